// top_n_sigma: with m the largest logit and mean and sigma the mean and standard deviation of the
// logits above -inf (population form; the sums of the logits and of their squared differences
// from the mean in vocabulary_scan.hpp's fixed order, chunk sums in double: the same on every
// tag, over a whole vocabulary in id order and over a list in its order), every logit below
// m - n sigma becomes -inf (the candidates stay in the set). n <= 0, or fewer than two
// candidates, changes nothing. Over a whole vocabulary: two SIMD passes (the maximum, the count
// and the sum; then the squares), and a copy of the logits, masked as it is made, only when some
// must become -inf.
// Differs from llama.cpp (llama_sampler_top_n_sigma_apply): the mean and the variance use the
// fixed-order sums above, where llama.cpp adds floats in the set's order; NaN counts as -inf
// (llama.cpp counts it, which makes the mean NaN and masks nothing); and the set keeps its order
// and form, where llama.cpp ends by sorting it by logit and filling p (llama_sampler_softmax_impl
// with do_sort): a whole vocabulary stays one, in id order, without a sort.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "../candidates.hpp"
#include "../parameters.hpp"
#include "../rank_select.hpp"

namespace qk::sampling {

class top_n_sigma {
public:
    static constexpr bool selects = false;
    static constexpr const char* name = "top_n_sigma";

    explicit top_n_sigma(float n) : n_(n)
    {
        if (!(n == n)) {
            qk::detail::fail("qk::sampling::top_n_sigma: n is NaN");
        }
    }

    void apply(candidates& c) const
    {
        if (!(n_ > 0.0f) || c.size() <= 1) {
            return;
        }
        if (c.whole_vocabulary()) {
            const float* x = c.vocabulary_logits();
            const auto n = static_cast<std::size_t>(c.vocab_size());
            float max = 0.0f;
            float lowest = 0.0f;
            bool all_finite = false;
            const float threshold = cut(x, n, max, lowest, all_finite);
            c.note_max(max);
            if (all_finite && lowest >= threshold) {
                return; // every logit stays
            }
            c.floor_logits(threshold);
            if (threshold <= max) {
                c.note_max(max); // it stays
            }
            return;
        }
        auto& l = c.list();
        logits_.resize(l.size());
        for (std::size_t i = 0; i < l.size(); ++i) {
            logits_[i] = l[i].logit;
        }
        float max = 0.0f;
        float lowest = 0.0f;
        bool all_finite = false;
        const float threshold = cut(logits_.data(), logits_.size(), max, lowest, all_finite);
        for (auto& t : l) {
            t.logit = t.logit >= threshold ? t.logit : detail::minus_infinity;
        }
        c.logits_changed(false);
    }

    [[nodiscard]] std::string describe() const { return qk::detail::message("top_n_sigma(n=", detail::shortest{n_}, ")"); }

    static top_n_sigma from_arguments(std::vector<argument> given)
    {
        const arguments args(name, std::move(given), {"n"});
        return top_n_sigma(args.number("n", 1.0f));
    }

private:
    // m - n sigma over x[0 .. n); -inf when no logit is above -inf. m (max_logit's), whether every
    // logit is finite and then the smallest come from the same pass as the count and the sum.
    [[nodiscard]] float cut(const float* x, std::size_t n, float& max, float& lowest, bool& all_finite) const noexcept
    {
        std::size_t count = 0;
        double sum = 0;
        max = detail::finite_statistics<arch::vector_native>(x, n, count, sum, lowest, all_finite);
        if (count == 0) {
            return detail::minus_infinity;
        }
        const auto mean = static_cast<float>(sum / static_cast<double>(count));
        const auto variance = static_cast<float>(detail::finite_sum<arch::vector_native, true>(x, n, mean) / static_cast<double>(count));
        return max - detail::opaque(n_ * std::sqrt(variance));
    }

    mutable std::vector<float> logits_; // scratch, kept for its capacity
    float n_;
};

} // namespace qk::sampling
