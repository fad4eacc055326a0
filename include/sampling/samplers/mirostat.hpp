// mirostat (v1) and mirostat_v2: selecting samplers that steer the surprise -log2 p of the
// selected tokens towards tau. Both keep mu (initially 2 tau) and update it by
// mu -= eta (surprise - tau) when accept() follows the step that selected a token (with that
// token's surprise), so apply() itself changes nothing but the generator.
// v1: from the candidates sorted by logit with softmax p, s = sum t_i b_i / sum t_i^2 over the
// first m - 1 pairs (t_i = log((i + 2) / (i + 1)), b_i = log(p_i / p_(i+1))), stopping before a
// pair whose p_(i+1) is 0 (its b_i would be infinite), e = s - 1,
// k = (e 2^mu / (1 - n_vocab^-e))^(1 / s); keeps the best max(k, 1) (all when there is no pair or
// k is NaN or not below the set's size), renormalizes and draws as dist does.
// v2: from the sorted softmax, keeps the prefix of candidates with surprise <= mu (at least one),
// renormalizes and draws.
// Differs from llama.cpp (llama_sampler_mirostat_apply, llama_sampler_mirostat_v2_apply): mu moves
// on accept(), not in apply(), so a step never accepted leaves it alone. v1 skips a pair with
// p_(i+1) = 0, which llama.cpp lets make s infinite and k 1, and keeps everything for a k that is
// NaN or too large for an int, where llama.cpp's int(k) is undefined. The draw is dist's over a
// list, with qkern's generator (llama.cpp: std::discrete_distribution over std::mt19937); ties
// rank by lower id; reset() leaves the generator alone (llama.cpp reseeds it).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../candidates.hpp"
#include "../parameters.hpp"
#include "../random.hpp"
#include "dist.hpp"

namespace qk::sampling {

namespace detail {

inline constexpr float inverse_ln2 = 1.44269504f;

[[nodiscard]] inline float surprise(float p) noexcept
{
    return -opaque(log(p) * inverse_ln2);
}

// What both versions keep between steps: mu, moved on accept() by the surprise of the token the
// last apply() selected, and the generator.
struct mirostat_feedback {
    mirostat_feedback(float tau_value, float eta_value, std::uint64_t seed_value, std::uint64_t stream)
        : tau(tau_value), eta(eta_value), seed(seed_value), mu(2.0f * tau_value), random(seed_value, stream)
    {
    }

    // Draws from the sorted, truncated list and records the selected token's surprise.
    void select(candidates& c, double u)
    {
        c.compute_probabilities();
        const auto& l = c.list();
        const std::size_t i = draw_index(l, u);
        c.select(l[i].id);
        pending_surprise = surprise(l[i].p);
        pending = true;
    }
    void accept(const char* sampler, std::int32_t token)
    {
        check_token(sampler, token);
        if (pending) {
            mu = mu - opaque(eta * (pending_surprise - tau));
            pending = false;
        }
    }
    void reseed(std::uint64_t seed_value)
    {
        seed = seed_value;
        random.reseed(seed_value);
    }
    void reset()
    {
        mu = 2.0f * tau;
        pending = false;
    }

    float tau;
    float eta;
    std::uint64_t seed;
    float mu;
    float pending_surprise = 0.0f;
    bool pending = false;
    random_source random;
};

} // namespace detail

class mirostat {
public:
    static constexpr bool selects = true;
    static constexpr const char* name = "mirostat";

    explicit mirostat(float tau = 5.0f, float eta = 0.1f, std::int32_t m = 100, std::uint64_t seed = 0)
        : m_(m), state_(tau, eta, seed, stream::mirostat)
    {
        if (!(tau == tau) || !(eta == eta) || m < 1) {
            qk::detail::fail("qk::sampling::mirostat: tau=", tau, ", eta=", eta, ", m=", m,
                             ": tau and eta must be numbers and m at least 1");
        }
    }

    void apply(candidates& c)
    {
        const double u = state_.random.uniform();
        const auto n_vocab = static_cast<float>(c.vocab_size());
        c.sort();
        c.compute_probabilities();
        auto& l = c.list();
        c.check_max(l.front().logit);
        float sum_tb = 0.0f;
        float sum_tt = 0.0f;
        for (std::size_t i = 0; i + 1 < static_cast<std::size_t>(m_) && i + 1 < l.size() && l[i + 1].p > 0.0f; ++i) {
            const float t = detail::log(static_cast<float>(i + 2) / static_cast<float>(i + 1));
            const float b = detail::log(l[i].p / l[i + 1].p);
            sum_tb = sum_tb + detail::opaque(t * b);
            sum_tt = sum_tt + detail::opaque(t * t);
        }
        std::size_t keep = l.size();
        if (sum_tt > 0.0f) {
            const float s = sum_tb / sum_tt;
            const float e = s - 1.0f;
            const float k = detail::pow(detail::opaque(e * detail::pow(2.0f, state_.mu)) / (1.0f - detail::pow(n_vocab, -e)), 1.0f / s);
            // k may be NaN or beyond any size (a flat distribution): then everything stays.
            if (k == k && k < static_cast<float>(l.size())) {
                keep = std::max<std::size_t>(1, static_cast<std::size_t>(k));
            }
        }
        c.truncate(keep);
        state_.select(c, u);
    }

    void accept(std::int32_t token) { state_.accept(name, token); }
    void reseed(std::uint64_t seed) { state_.reseed(seed); }
    void reset() { state_.reset(); }

    [[nodiscard]] float mu() const noexcept { return state_.mu; }
    [[nodiscard]] std::string describe() const
    {
        return qk::detail::message("mirostat(tau=", detail::shortest{state_.tau}, ",eta=", detail::shortest{state_.eta}, ",m=", m_, ",seed=", state_.seed, ")");
    }

    static mirostat from_arguments(std::vector<argument> given)
    {
        const arguments args(name, std::move(given), {"tau", "eta", "m", "seed"});
        const std::int64_t m = args.integer("m", 100);
        if (m < 1 || m > std::numeric_limits<std::int32_t>::max()) {
            args.fail("m=", m, ": must be at least 1");
        }
        return mirostat(args.number("tau", 5.0f), args.number("eta", 0.1f), static_cast<std::int32_t>(m), args.seed("seed", 0));
    }

private:
    std::int32_t m_;
    detail::mirostat_feedback state_;
};

class mirostat_v2 {
public:
    static constexpr bool selects = true;
    static constexpr const char* name = "mirostat_v2";

    explicit mirostat_v2(float tau = 5.0f, float eta = 0.1f, std::uint64_t seed = 0)
        : state_(tau, eta, seed, stream::mirostat_v2)
    {
        if (!(tau == tau) || !(eta == eta)) {
            qk::detail::fail("qk::sampling::mirostat_v2: tau=", tau, ", eta=", eta, ": NaN");
        }
    }

    void apply(candidates& c)
    {
        const double u = state_.random.uniform();
        c.sort();
        c.compute_probabilities();
        auto& l = c.list();
        c.check_max(l.front().logit);
        std::size_t keep = 0;
        while (keep < l.size() && !(detail::surprise(l[keep].p) > state_.mu)) {
            ++keep;
        }
        c.truncate(std::max<std::size_t>(keep, 1));
        state_.select(c, u);
    }

    void accept(std::int32_t token) { state_.accept(name, token); }
    void reseed(std::uint64_t seed) { state_.reseed(seed); }
    void reset() { state_.reset(); }

    [[nodiscard]] float mu() const noexcept { return state_.mu; }
    [[nodiscard]] std::string describe() const
    {
        return qk::detail::message("mirostat_v2(tau=", detail::shortest{state_.tau}, ",eta=", detail::shortest{state_.eta}, ",seed=", state_.seed, ")");
    }

    static mirostat_v2 from_arguments(std::vector<argument> given)
    {
        const arguments args(name, std::move(given), {"tau", "eta", "seed"});
        return mirostat_v2(args.number("tau", 5.0f), args.number("eta", 0.1f), args.seed("seed", 0));
    }

private:
    detail::mirostat_feedback state_;
};

} // namespace qk::sampling
