// top_p (nucleus): with the candidates in rank order (logit high first, ties by lower id) and
// each weighing e = exp(logit - max), keeps the shortest prefix whose exact mass reaches p times
// the total mass (rounded up), and at least min_keep candidates: the candidate that crosses p is
// kept (inclusive). Masses are exact (exact_mass.hpp: e in units of 2^-48, summed in integers),
// so the cut does not depend on an order of float additions. p >= 1 keeps everything, p <= 0 the
// best candidate (and min_keep). The result is sorted; its p are not renormalized.
// Over a whole vocabulary no candidate is sorted: one pass computes every weight, the total mass
// and (from 4096 logits) the exact mass of each of 1024 buckets by logit (rank_select.hpp's
// rank_histogram); a walk of the buckets and one gathering pass over the vocabulary find the
// crossing token's bucket and its few tokens, searched by rank; the set becomes the prefix up to
// it (candidates::form::prefix), which dist draws from without a list, through the same
// histogram. A list is partially sorted in growing prefixes.
// Differs from llama.cpp: llama_sampler_top_p_apply adds float probabilities (each already divided
// by a float sum) in sorted order and compares the running sum with p, so rounding that depends on
// that order can move its cut by a token next to p; here the exact masses decide. Equal logits
// rank by lower id, so a cut through a tie keeps the lowest ids (llama.cpp's partial sorts leave
// ties in no defined order).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "../candidates.hpp"
#include "../parameters.hpp"
#include "top_k.hpp"

namespace qk::sampling {

class top_p {
public:
    static constexpr bool selects = false;
    static constexpr const char* name = "top_p";

    explicit top_p(float p, std::size_t min_keep = 1) : p_(p), min_keep_(detail::keep_bound(min_keep))
    {
        if (!(p == p)) {
            qk::detail::fail("qk::sampling::top_p: p is NaN");
        }
    }

    void apply(candidates& c) const
    {
        if (p_ >= 1.0f) {
            return;
        }
        if (c.whole_vocabulary() || c.is_prefix()) {
            apply_ranked(c);
            return;
        }
        auto& l = c.list();
        c.compute_probabilities(); // kept in the result, not renormalized
        const float max = detail::list_max(l);
        const detail::mass_t total = detail::list_mass(l, max);
        const detail::mass_t target = p_ > 0.0f ? detail::mass_share(p_, total) : 0;
        if (c.sorted() || l.size() <= first_prefix) {
            c.sort();
            c.truncate(cut(l, l.size(), max, target));
            return;
        }
        for (std::size_t m = first_prefix;; m *= 8) {
            const std::size_t prefix = std::min(m, l.size());
            std::partial_sort(l.begin(), l.begin() + static_cast<std::ptrdiff_t>(prefix), l.end(), detail::ranks_before);
            const std::size_t keep = cut(l, prefix, max, target);
            if (keep < prefix || prefix == l.size()) {
                l.resize(keep);
                c.assign_list(true);
                return;
            }
        }
    }

    [[nodiscard]] float p() const noexcept { return p_; }
    [[nodiscard]] std::size_t min_keep() const noexcept { return min_keep_; }
    [[nodiscard]] std::string describe() const { return qk::detail::message("top_p(p=", detail::shortest{p_}, ",min_keep=", min_keep_, ")"); }

    static top_p from_arguments(std::vector<argument> given)
    {
        const arguments args(name, std::move(given), {"p", "min_keep"});
        const std::int64_t min_keep = args.integer("min_keep", 1);
        if (min_keep < 0) {
            args.fail("min_keep=", min_keep, " is negative");
        }
        return top_p(args.number("p", 0.95f), static_cast<std::size_t>(min_keep));
    }

private:
    static constexpr std::size_t first_prefix = 256;
    // From this many logits, the weights' pass also builds the histogram by logit
    // (rank_select.hpp) that the cut and the draw over the prefix search instead of the vocabulary.
    static constexpr std::size_t histogram_from = 4096;
    // exp(-34) is below 2^-48: logits further below the maximum weigh nothing.
    static constexpr float weightless_below = 34.0f;

    // How many of the first `prefix` sorted candidates top_p keeps; `prefix` when the prefix does
    // not reach the target (then a longer one must be looked at, unless it is the whole set).
    [[nodiscard]] std::size_t cut(const std::vector<token_data>& l, std::size_t prefix, float max, detail::mass_t target) const noexcept
    {
        detail::mass_t sum = 0;
        for (std::size_t i = 0; i < prefix; ++i) {
            sum += detail::mass_of(detail::exp(l[i].logit - max));
            if (sum >= target && i + 1 >= min_keep_) {
                return i + 1;
            }
        }
        return prefix;
    }

    // A whole vocabulary or a prefix of one: the new prefix ends at the crossing token.
    void apply_ranked(candidates& c) const
    {
        const auto n = static_cast<std::size_t>(c.vocab_size());
        const float* x = nullptr;
        const float* e = nullptr;
        float max = detail::minus_infinity;
        float lowest = detail::minus_infinity;
        detail::mass_t total = 0;
        detail::rank_bound bound = detail::everything;
        const detail::rank_histogram* histogram = nullptr;
        if (c.is_prefix()) {
            histogram = c.prefix_histogram();
            x = c.prefix_logits();
            e = c.prefix_weights();
            max = c.prefix_max();
            lowest = c.prefix_lowest();
            total = c.prefix_mass();
            bound = c.prefix_bound();
        } else {
            x = c.vocabulary_logits();
            float least = 0.0f;
            max = detail::max_logit<arch::vector_native>(x, n, least);
            c.check_max(max);
            float* weights = c.weights_buffer();
            if (n >= histogram_from) {
                // The buckets spread over the logits that weigh anything.
                const float per_unit = detail::rank_histogram::unit_for(max - std::max(least, max - weightless_below));
                total = detail::exp_mass_histogram<arch::vector_native>(x, n, max, per_unit, weights, lowest, c.rank_histogram());
                histogram = &c.rank_histogram();
            } else {
                total = detail::exp_mass<arch::vector_native>(x, n, max, weights, lowest);
            }
            lowest = std::max(lowest, max - weightless_below);
            e = weights;
        }
        detail::rank_position found;
        if (p_ > 0.0f) {
            found = detail::find_by_rank<arch::vector_native, false>(x, e, n, lowest, max, detail::mass_share(p_, total), bound, c.rank_scratch(),
                                                                     histogram);
        } else {
            const std::size_t best = detail::find_value<arch::vector_native>(x, n, max);
            found = {static_cast<std::int32_t>(best), max, detail::mass_of(1.0f)};
        }
        const detail::rank_bound cut_at{found.logit, found.id};
        if (min_keep_ > 1 && detail::count_ranked<arch::vector_native>(x, n, cut_at) < min_keep_) {
            // Rare (min_keep beyond the nucleus): the min_keep best, as a list.
            if (c.is_prefix()) {
                c.truncate(min_keep_); // list() sorts the prefix
            } else {
                if (min_keep_ < n) {
                    detail::keep_top_k(c, min_keep_);
                } else {
                    c.sort(); // the min_keep best are all of them
                }
                // Probabilities over the whole vocabulary, as a prefix would list them.
                const auto factor = static_cast<float>(0x1.0p48 / detail::to_double(total));
                for (auto& t : c.list()) {
                    t.p = e[static_cast<std::size_t>(t.id)] * factor;
                }
            }
            return;
        }
        c.keep_prefix(cut_at, found.through, total, max, lowest, histogram != nullptr);
    }

    float p_;
    std::size_t min_keep_;
};

} // namespace qk::sampling
