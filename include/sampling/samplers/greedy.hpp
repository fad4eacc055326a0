// greedy: selects the token with the largest logit; among equal logits the lowest id. NaN counts
// as -inf; a set with nothing above -inf is a qk::error. Over a whole vocabulary it is one SIMD
// max pass and one search for the first index holding the maximum.
// Differs from llama.cpp: among equal logits the lowest id whatever the set's order, where
// llama_sampler_greedy_apply takes the first in the set's order (the lowest id only while the set
// is in id order, which llama.cpp's sorts do not keep for ties); NaN counts as -inf, and a set
// with nothing above -inf is an error where llama.cpp selects its first candidate.
#pragma once

#include <string>
#include <vector>

#include "../candidates.hpp"
#include "../parameters.hpp"

namespace qk::sampling {

struct greedy {
    static constexpr bool selects = true;
    static constexpr const char* name = "greedy";

    void apply(candidates& c) const
    {
        if (c.whole_vocabulary() || c.is_prefix() || c.is_floor()) {
            // A prefix or a floor holds the vocabulary's best token.
            const float* x = c.whole_vocabulary() ? c.vocabulary_logits() : c.prefix_logits();
            const auto n = static_cast<std::size_t>(c.vocab_size());
            const float max = c.whole_vocabulary() ? c.vocabulary_max() : detail::max_logit<arch::vector_native>(x, n);
            c.check_max(max);
            c.select(static_cast<std::int32_t>(detail::find_value<arch::vector_native>(x, n, max)));
            return;
        }
        const auto& l = c.list();
        const token_data* best = nullptr;
        for (const auto& t : l) {
            if (best == nullptr || detail::ranks_before(t, *best)) {
                best = &t;
            }
        }
        c.check_max(best == nullptr ? detail::minus_infinity : best->logit);
        c.select(best->id);
    }

    [[nodiscard]] std::string describe() const { return "greedy"; }

    static greedy from_arguments(std::vector<argument> given)
    {
        const arguments args(name, std::move(given), {});
        return {};
    }
};

} // namespace qk::sampling
