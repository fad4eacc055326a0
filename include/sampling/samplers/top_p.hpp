// top_p (nucleus): with the candidates sorted by logit (high first, ties by id) and p their
// softmax, keeps the shortest prefix whose probabilities sum (in float, in order) to at least p,
// and at least min_keep candidates: the candidate that crosses p is kept (inclusive). p >= 1
// keeps everything. The result is sorted; its p are not renormalized.
// Without sorting every candidate: over a whole vocabulary the exp sums come from one SIMD pass,
// and only the best m candidates are selected and sorted (top_k_scan), m growing 8x until the
// prefix reaches p; a long unsorted list is likewise partially sorted in growing prefixes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "../candidates.hpp"
#include "../parameters.hpp"

namespace qk::sampling {

class top_p {
public:
    static constexpr bool selects = false;
    static constexpr const char* name = "top_p";

    explicit top_p(float p, std::size_t min_keep = 1) : p_(p), min_keep_(min_keep)
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
        if (c.whole_vocabulary()) {
            apply_whole(c);
            return;
        }
        auto& l = c.list();
        c.compute_probabilities();
        if (c.sorted() || l.size() <= first_prefix) {
            c.sort(); // keeps the probabilities
            c.truncate(cut(l, l.size()));
            return;
        }
        for (std::size_t m = first_prefix;; m *= 8) {
            const std::size_t prefix = std::min(m, l.size());
            std::partial_sort(l.begin(), l.begin() + static_cast<std::ptrdiff_t>(prefix), l.end(), detail::ranks_before);
            const std::size_t keep = cut(l, prefix);
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

    // How many of the first `prefix` sorted candidates top_p keeps; `prefix` when the prefix does
    // not reach p (then a longer one must be looked at, unless it is the whole set).
    [[nodiscard]] std::size_t cut(const std::vector<token_data>& l, std::size_t prefix) const noexcept
    {
        float sum = 0.0f;
        for (std::size_t i = 0; i < prefix; ++i) {
            sum = sum + l[i].p;
            if (sum >= p_ && i + 1 >= min_keep_) {
                return i + 1;
            }
        }
        return prefix;
    }

    void apply_whole(candidates& c) const
    {
        const float* x = c.vocabulary_logits();
        const auto n = static_cast<std::size_t>(c.vocab_size());
        const float max = detail::max_logit<arch::vector_native>(x, n);
        c.check_max(max);
        auto& sums = c.chunk_sums();
        sums.resize(detail::chunk_count(n));
        const auto factor = static_cast<float>(1.0 / detail::exp_sums<arch::vector_native>(x, n, max, sums.data()));
        auto& out = c.list_buffer();
        for (std::size_t m = first_prefix;; m *= 8) {
            const std::size_t prefix = std::min(m, n);
            detail::top_k_scan<arch::vector_native>(x, n, prefix, out, [](std::size_t) { return false; });
            // The same probabilities a softmax of the whole vocabulary gives these tokens.
            for (auto& t : out) {
                t.p = detail::exp(t.logit - max) * factor;
            }
            const std::size_t keep = cut(out, prefix);
            if (keep < prefix || prefix == n) {
                out.resize(keep);
                c.assign_list(true);
                return;
            }
        }
    }

    float p_;
    std::size_t min_keep_;
};

} // namespace qk::sampling
