// min_p: keeps the candidates whose probability is at least p times the largest one, i.e. whose
// logit is at least max + log(p) (inclusive), in their current order. If fewer than min_keep
// pass, it keeps the min_keep best instead (sorted). p <= 0 keeps everything. Over a whole
// vocabulary: one SIMD max pass and one counting pass; when more than 1/32 of the vocabulary
// passes, the set becomes the floor at that logit (candidates::form::floor), which dist draws
// from without a list, otherwise the list of those that pass.
// Differs from llama.cpp: where fewer than min_keep pass and the min_keep best cut through equal
// logits, the lower ids are kept (llama_sampler_min_p_apply sorts with no tie rule); its
// threshold, max + logf(p), is the same. p above 1 with min_keep 0 keeps nothing here (the
// selecting sampler then raises qk::error naming the empty set), where llama.cpp always keeps the
// best candidate: min_keep 0 asks for no floor, and a p that passes nothing is a caller's error.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../candidates.hpp"
#include "../parameters.hpp"
#include "top_k.hpp"

namespace qk::sampling {

class min_p {
public:
    static constexpr bool selects = false;
    static constexpr const char* name = "min_p";

    explicit min_p(float p, std::size_t min_keep = 1) : p_(p), min_keep_(detail::keep_bound(min_keep))
    {
        if (!(p == p)) {
            qk::detail::fail("qk::sampling::min_p: p is NaN");
        }
    }

    void apply(candidates& c) const
    {
        if (p_ <= 0.0f || c.size() == 0) {
            return;
        }
        const float log_p = detail::log(p_);
        if (c.whole_vocabulary()) {
            const float* x = c.vocabulary_logits();
            const auto n = static_cast<std::size_t>(c.vocab_size());
            const float max = c.vocabulary_max();
            if (!(max > detail::minus_infinity)) {
                return; // nothing to cut; the selecting sampler reports the empty set
            }
            const float threshold = max + log_p;
            const std::size_t passing = detail::count_ranked<arch::vector_native>(x, n, {threshold, std::numeric_limits<std::int32_t>::max()});
            if (passing > 0 && passing >= min_keep_ && passing * floor_share > n) {
                c.keep_at_least(threshold, max);
            } else if (passing >= min_keep_) {
                // Few pass (as with most real logits): a list of them is cheaper to draw from.
                auto& out = c.list_buffer();
                out.clear();
                detail::filter_at_least<arch::vector_native>(x, n, threshold, passing, out); // passing: the tokens at least threshold
                c.assign_list(false);
            } else if (min_keep_ < n) {
                detail::keep_top_k(c, min_keep_);
            } else {
                c.sort(); // the min_keep best are all of them
            }
            return;
        }
        auto& l = c.list();
        const float max = detail::list_max(l);
        if (!(max > detail::minus_infinity)) {
            return;
        }
        const float threshold = max + log_p;
        const auto passing = static_cast<std::size_t>(
            std::count_if(l.begin(), l.end(), [threshold](const token_data& t) { return t.logit >= threshold; }));
        if (passing >= min_keep_) {
            const bool was_sorted = c.sorted();
            l.erase(std::remove_if(l.begin(), l.end(), [threshold](const token_data& t) { return !(t.logit >= threshold); }),
                    l.end());
            c.assign_list(was_sorted);
        } else if (min_keep_ < l.size()) {
            detail::keep_top_k(c, min_keep_);
        } else {
            c.sort();
        }
    }

    [[nodiscard]] float p() const noexcept { return p_; }
    [[nodiscard]] std::size_t min_keep() const noexcept { return min_keep_; }
    [[nodiscard]] std::string describe() const { return qk::detail::message("min_p(p=", detail::shortest{p_}, ",min_keep=", min_keep_, ")"); }

    static min_p from_arguments(std::vector<argument> given)
    {
        const arguments args(name, std::move(given), {"p", "min_keep"});
        const std::int64_t min_keep = args.integer("min_keep", 1);
        if (min_keep < 0) {
            args.fail("min_keep=", min_keep, " is negative");
        }
        return min_p(args.number("p", 0.05f), static_cast<std::size_t>(min_keep));
    }

private:
    // More than 1/32 of the vocabulary passing makes the set a floor (dist then draws in one
    // masked pass over the vocabulary); fewer, a list.
    static constexpr std::size_t floor_share = 32;

    float p_;
    std::size_t min_keep_;
};

} // namespace qk::sampling
