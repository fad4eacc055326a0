// adaptive_p (llama.cpp's adaptive-p, PR 17927): a selecting sampler that steers the original
// probability of the selected tokens towards a target over time, by favouring the candidates whose
// probability lies near a target adapted from a moving average of what it selected before.
// The rule (float throughout), with target T (negative: disabled), decay d clamped to [0, 0.99],
// and a state S (the selected tokens' original probabilities weighted by d^age) and W (the sum of
// d^age), both primed as if T had been reached: S = T / (1 - d), W = 1 / (1 - d):
//  - T < 0: apply() selects as dist does and nothing else changes (accept() never moves S, W);
//  - otherwise apply() takes p, the softmax of the candidates' logits (the set as earlier samplers
//    left it, in its order: id order for a whole vocabulary, which becomes a list), aims at
//    a = clamp(2 clamp(T, 0, 1) - S / W, 0, 1), replaces every logit that is not -inf by
//    5 - 10 x x / (1 + x) (left to right), x = |(p - a) * (1.0f / 0.3f)| (far from a, and also
//    at probability 0 above -inf, a low but finite logit), and draws from the new softmax as dist
//    draws over a list: the first candidate at which the running sum exceeds u times the sum. The
//    set is left as that list with the new logits; the selected token and its p become pending;
//  - accept(token) of the pending token sets S = p + d S, W = 1 + d W (rounded, never fused);
//    every accept() clears the pending token, so another token or a second accept changes nothing.
// apply() draws exactly one uniform number, from the generator's stream adaptive_p. reset() primes
// S and W again and clears the pending token; reseed() restarts the generator.
// Differs from llama.cpp: qkern's exp and softmax (p = e * (1 / sum)) instead of expf and a
// division; qkern's generator and draw instead of std::mt19937 and std::discrete_distribution;
// reset() leaves the generator alone, as for every qkern sampler (llama.cpp reseeds it there); a
// NaN or +inf target and a NaN decay are errors (llama.cpp takes any float; a target of +inf with
// decay 0 would make S NaN). T > 1 is kept as given, as llama.cpp does: it enters the primed S
// unclamped. Parameters, in positional order: target (default -1, llama.cpp's common default:
// disabled), decay (0.9), seed (0).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../candidates.hpp"
#include "../parameters.hpp"
#include "../random.hpp"
#include "../sampler.hpp"
#include "../token_data.hpp"
#include "../vocabulary_scan.hpp"
#include "dist.hpp"

namespace qk::sampling {

class adaptive_p {
public:
    static constexpr bool selects = true;
    static constexpr const char* name = "adaptive_p";

    // llama.cpp's transform constants: DISTRIBUTION_WIDTH, PEAK_LOGIT_VALUE, SHARPNESS, INV_WIDTH.
    static constexpr float width = 0.3f;
    static constexpr float peak_logit = 5.0f;
    static constexpr float sharpness = 10.0f;
    static constexpr float inverse_width = 1.0f / width;
    static constexpr float max_decay = 0.99f;

    explicit adaptive_p(float target = -1.0f, float decay = 0.9f, std::uint64_t seed = 0)
        : target_(target), decay_(decay), seed_(seed), random_(seed, stream::adaptive_p)
    {
        if (!(target == target) || target == std::numeric_limits<float>::infinity() || !(decay == decay)) {
            qk::detail::fail("qk::sampling::adaptive_p: target=", target, ", decay=", decay,
                             ": target must be a number below +inf (negative: disabled) and decay a number");
        }
        decay_ = std::clamp(decay, 0.0f, max_decay);
        restart();
    }

    void apply(candidates& c)
    {
        const double u = random_.uniform();
        if (target_ < 0.0f) {
            c.select(detail::draw_token(c, u));
            return;
        }
        c.compute_probabilities();
        auto& l = c.list();
        transform(l, adapted_target(), original_);
        c.logits_changed(false);
        c.compute_probabilities();
        const std::size_t i = detail::draw_index(l, u);
        c.select(l[i].id);
        pending_token_ = l[i].id;
        pending_p_ = original_[i];
    }

    // Every logit above -inf of a list whose p are its softmax becomes 5 - 10 x x / (1 + x),
    // x = |(p - a) / 0.3|; `original` receives each entry's p before (apply()'s first step).
    static void transform(std::vector<token_data>& l, float a, std::vector<float>& original)
    {
        original.resize(l.size());
        for (std::size_t i = 0; i < l.size(); ++i) {
            original[i] = l[i].p;
            if (l[i].logit > detail::minus_infinity) {
                const float x = std::fabs((l[i].p - a) * inverse_width);
                l[i].logit = peak_logit - sharpness * x * x / (1.0f + x);
            }
        }
    }

    // What apply() selects from a list (logits only, at least one above -inf and none +inf: the
    // caller checks) given the uniform and the adapted target it would use: the token and its
    // original probability. The GPU backends finish their adaptive_p draws through it, so that
    // these are the CPU's by construction.
    struct choice {
        std::int32_t token;
        float p;
    };
    [[nodiscard]] static choice select_from(std::vector<token_data> l, float a, double u)
    {
        std::vector<float> scratch;
        std::vector<float> original;
        detail::softmax_list(l, scratch);
        transform(l, a, original);
        detail::softmax_list(l, scratch);
        const std::size_t i = detail::draw_index(l, u);
        return {l[i].id, original[i]};
    }

    // For a backend that runs the draw itself: the uniform the next apply() would draw,
    // advancing the generator as apply() does, and the selection it made from that uniform and
    // adapted_target() (the token and its original probability), which accept() then takes
    // exactly as it takes apply()'s.
    [[nodiscard]] double next_uniform() { return random_.uniform(); }
    void selected(std::int32_t token, float original_p) noexcept
    {
        pending_token_ = token;
        pending_p_ = original_p;
    }

    void accept(std::int32_t token)
    {
        detail::check_token(name, token);
        if (pending_token_ >= 0 && token == pending_token_) {
            weighted_sum_ = pending_p_ + detail::opaque(decay_ * weighted_sum_);
            total_weight_ = 1.0f + detail::opaque(decay_ * total_weight_);
        }
        pending_token_ = -1;
    }
    void reseed(std::uint64_t seed)
    {
        seed_ = seed;
        random_.reseed(seed);
    }
    void reset() { restart(); }

    [[nodiscard]] float target() const noexcept { return target_; }
    [[nodiscard]] float decay() const noexcept { return decay_; }
    [[nodiscard]] std::uint64_t seed() const noexcept { return seed_; }
    // The state: S, W and the moving average S / W of the selected tokens' original probabilities.
    [[nodiscard]] float weighted_sum() const noexcept { return weighted_sum_; }
    [[nodiscard]] float total_weight() const noexcept { return total_weight_; }
    [[nodiscard]] float average() const noexcept { return weighted_sum_ / total_weight_; }
    // The probability the next apply() aims at (W is never 0: at least 1).
    [[nodiscard]] float adapted_target() const noexcept
    {
        const float t = std::clamp(target_, 0.0f, 1.0f);
        return std::clamp(total_weight_ == 0.0f ? t : detail::opaque(2.0f * t) - weighted_sum_ / total_weight_, 0.0f, 1.0f);
    }
    // The token the last apply() selected, until the next accept(); -1 when none.
    [[nodiscard]] std::int32_t pending_token() const noexcept { return pending_token_; }

    [[nodiscard]] std::string describe() const
    {
        return qk::detail::message("adaptive_p(target=", detail::shortest{target_}, ",decay=", detail::shortest{decay_}, ",seed=", seed_, ")");
    }

    static adaptive_p from_arguments(std::vector<argument> given)
    {
        const arguments args(name, std::move(given), {"target", "decay", "seed"});
        const float target = args.number("target", -1.0f);
        if (target == std::numeric_limits<float>::infinity()) {
            args.fail("target=", target, ": must be below +inf (negative: disabled)");
        }
        return adaptive_p(target, args.number("decay", 0.9f), args.seed("seed", 0));
    }

private:
    void restart() noexcept
    {
        weighted_sum_ = target_ / (1.0f - decay_);
        total_weight_ = 1.0f / (1.0f - decay_);
        pending_token_ = -1;
        pending_p_ = 0.0f;
    }

    float target_;
    float decay_;
    std::uint64_t seed_;
    float weighted_sum_ = 0.0f;
    float total_weight_ = 1.0f;
    std::int32_t pending_token_ = -1;
    float pending_p_ = 0.0f;
    random_source random_;
    std::vector<float> original_; // scratch: the original probabilities of the last apply()
};

} // namespace qk::sampling
