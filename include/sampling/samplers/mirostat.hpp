// mirostat (v1) and mirostat_v2: selecting samplers that steer the surprise -log2 p of the
// selected tokens towards tau. Both keep mu (initially 2 tau) and update it by
// mu -= eta (surprise - tau) when accept() follows the step that selected a token (with that
// token's surprise), so apply() itself changes nothing but the generator.
// v1: over the best m - 1 pairs of candidates in rank order (logit high first, then id), with
// e = exp(logit - max) as exp_difference computes it, s = sum t_i b_i / sum t_i^2
// (t_i = log((i + 2) / (i + 1)), b_i = log(e_i / e_(i+1)): the log of the ratio of the two
// probabilities), stopping before a pair whose e_(i+1) is 0 (b_i would be infinite), e = s - 1,
// k = (e 2^mu / (1 - n_vocab^-e))^(1 / s); keeps the best max(k, 1) (all when there is no pair or
// k is NaN or not below the set's size).
// v2: keeps the candidates whose probability is at least 2^-mu (surprise <= mu; probabilities as
// exact masses: the mass of exp(logit - max) reaches ceil(2^-mu total), 2^-mu from pow), at
// least one: the best of them in rank order.
// Both then draw as dist does from what they keep: the best k as a sorted list (renormalized
// softmax, draw in that order); everything, the set as it is (a whole vocabulary in id order
// with dist's whole-vocabulary draw and softmax's probability for the surprise, a list in its
// order); except that v1 keeping more than 1/32 of a whole vocabulary, and v2 keeping more than
// 256 of one, make it the floor at the last kept one's logit (candidates::form::floor, id order:
// min_p's form; the search for that one counts the finite logits by rank: for v2, -inf and NaN
// weigh nothing, and over finite logits it is the least logit of a passing weight, checked in the
// pass that sums the floor's masses from the weights; v1 keeps its list when a logit is -inf or
// NaN), draws as dist draws over a floor (exact masses in id order) and takes the selected
// token's probability as its exact mass over the floor's. A floor keeps the last one's ties with
// it: v1 then keeps more than k when logits tie at the k-th. Over a whole vocabulary nothing is
// sorted beyond the k kept: v1 takes its m best with a top-k scan, v2 counts the passing tokens in
// a pass over the weights (skipped when the range of finite logits already shows that every
// token passes), and keeping k is top_k's.
// Differs from llama.cpp (llama_sampler_mirostat_apply, llama_sampler_mirostat_v2_apply): mu moves
// on accept(), not in apply(), so a step never accepted leaves it alone. v1 skips a pair with
// p_(i+1) = 0, which llama.cpp lets make s infinite and k 1, and keeps everything for a k that is
// NaN or too large for an int, where llama.cpp's int(k) is undefined; its b_i come from float
// probabilities of a sorted softmax and v2's cut from float surprises, here from exponentials and
// exact masses, so no order of additions decides them. The draw is dist's, with qkern's generator
// (llama.cpp: std::discrete_distribution over std::mt19937); ties rank by lower id; reset()
// leaves the generator alone (llama.cpp reseeds it).
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
#include "dist.hpp"
#include "top_k.hpp"

namespace qk::sampling {

namespace detail {

inline constexpr float inverse_ln2 = 1.44269504f;

// mirostat keeping more than 1/32 of a whole vocabulary makes it a floor (as min_p's): dist's
// draw over it is one masked pass over the vocabulary, where a list of them would be sorted first.
inline constexpr std::size_t mirostat_floor_share = 32;

// mirostat_v2 keeping more than this many of a whole vocabulary makes the floor too: its draw
// reads the weights v2 has computed, a pass without exponentials, where a list longer than
// top_k's heap keeps would be sorted (256k peaky logits, Intel Xeon with AVX-512: a step keeping
// 300 to 6000 took 380-580 us as a list, about 270 as the floor; a softmax pass takes 141).
inline constexpr std::size_t mirostat_list_limit = heap_top_k_limit;

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

    // Draws as dist does from the kept set and records the selected token's surprise.
    void select(candidates& c, double u)
    {
        if (c.whole_vocabulary()) {
            const vocabulary_draw drawn = draw_vocabulary(c, u);
            c.select(drawn.token);
            pending_surprise = surprise(drawn.p);
            pending = true;
            return;
        }
        if (c.is_floor()) {
            select_floor(c, draw_floor(c, u));
            return;
        }
        c.compute_probabilities();
        const auto& l = c.list();
        const std::size_t i = draw_index(l, u);
        c.select(l[i].id);
        pending_surprise = surprise(l[i].p);
        pending = true;
    }
    // Records a draw over the floor the candidates are: the drawn token's share of its exact mass.
    void select_floor(candidates& c, const floor_draw& drawn)
    {
        c.select(drawn.token);
        pending_surprise = surprise(static_cast<float>(static_cast<double>(drawn.mass) / to_double(drawn.total)));
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
        const std::size_t size = c.size();
        const std::size_t m = std::min(static_cast<std::size_t>(m_), size);
        // The best m in rank order.
        if (c.whole_vocabulary()) {
            detail::top_k_scan<arch::vector_native>(c.vocabulary_logits(), size, m, best_, [](std::size_t) { return false; });
        } else {
            const auto& l = c.list();
            best_.assign(l.begin(), l.end());
            std::partial_sort(best_.begin(), best_.begin() + static_cast<std::ptrdiff_t>(m), best_.end(), detail::ranks_before);
            best_.resize(m);
        }
        c.check_max(best_.empty() ? detail::minus_infinity : best_.front().logit);
        const float max = best_.front().logit;
        float sum_tb = 0.0f;
        float sum_tt = 0.0f;
        for (std::size_t i = 0; i + 1 < m; ++i) {
            const float next = detail::exp_difference(best_[i + 1].logit, max);
            if (!(next > 0.0f)) {
                break;
            }
            const float t = detail::log(static_cast<float>(i + 2) / static_cast<float>(i + 1));
            const float b = detail::log(detail::exp_difference(best_[i].logit, max) / next);
            sum_tb = sum_tb + detail::opaque(t * b);
            sum_tt = sum_tt + detail::opaque(t * t);
        }
        std::size_t keep = size;
        if (sum_tt > 0.0f) {
            const float s = sum_tb / sum_tt;
            const float e = s - 1.0f;
            const float k = detail::pow(detail::opaque(e * detail::pow(2.0f, state_.mu)) / (1.0f - detail::pow(n_vocab, -e)), 1.0f / s);
            // k may be NaN or beyond any size (a flat distribution): then everything stays.
            if (k == k && k < static_cast<float>(size)) {
                keep = std::max<std::size_t>(1, static_cast<std::size_t>(k));
            }
        }
        if (keep < size && !(c.whole_vocabulary() && keep * detail::mirostat_floor_share > size && keep_floor(c, keep))) {
            detail::keep_top_k(c, keep);
        }
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
    // The floor at the k-th best's logit (its ties pass with it), as v2 keeps many; false (nothing
    // changed) when a logit is -inf or NaN, where counting by rank does not apply.
    static bool keep_floor(candidates& c, std::size_t k)
    {
        detail::rank_position kth;
        float highest = 0.0f;
        if (!detail::kth_by_count(c, k, kth, highest)) {
            return false;
        }
        c.keep_at_least(kth.logit, highest);
        return true;
    }

    std::int32_t m_;
    detail::mirostat_feedback state_;
    std::vector<token_data> best_; // scratch, kept for its capacity
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
        const std::size_t size = c.size();
        const float least = detail::pow(2.0f, -state_.mu); // the least probability kept
        std::size_t keep = 0;
        if (c.whole_vocabulary()) {
            const float* x = c.vocabulary_logits();
            float finite_lowest = 0.0f;
            float max = 0.0f;
            const bool finite = detail::finite_range<arch::vector_native>(x, size, finite_lowest, max);
            if (!finite) {
                max = detail::max_logit<arch::vector_native>(x, size, finite_lowest);
            }
            c.check_max(max);
            if (finite && everything_passes(max, finite_lowest, size, least)) {
                state_.select(c, u); // what the count below would find: every token kept
                return;
            }
            float* weights = c.weights_buffer();
            float lowest = 0.0f;
            const detail::mass_t total = detail::exp_mass<arch::vector_native>(x, size, max, weights, lowest);
            const detail::mass_t share = share_of(least, total);
            // mass_of(e) >= share exactly when e >= share 2^-48, which needs share <= 2^48.
            if (share <= (detail::mass_t{1} << detail::mass_bits)) {
                const double at_least = std::ldexp(static_cast<double>(share), -detail::mass_bits);
                float w = static_cast<float>(at_least);
                if (static_cast<double>(w) < at_least) {
                    w = std::nextafter(w, std::numeric_limits<float>::infinity());
                }
                keep = detail::count_ranked<arch::vector_native>(weights, size, {w, std::numeric_limits<std::int32_t>::max()});
                // Many kept (w > 0: all of finite logit): the floor at the last one's logit, which
                // its ties (of equal weight) pass with it, instead of sorting them.
                if (w > 0.0f && keep < size && keep > detail::mirostat_list_limit) {
                    if (finite && floor_from_weights(c, u, weights, w, max)) {
                        return;
                    }
                    // The count by rank runs over the finite logits: -inf and NaN, which weigh
                    // nothing, rank after every kept token and are never counted.
                    const detail::rank_position last = detail::find_by_rank<arch::vector_native, true>(
                        x, nullptr, size, finite_lowest, max, keep, detail::everything, c.rank_scratch());
                    c.keep_at_least(last.logit, max);
                    state_.select(c, u);
                    return;
                }
            }
        } else {
            const auto& l = c.list();
            const float max = detail::list_max(l);
            c.check_max(max);
            const detail::mass_t share = share_of(least, detail::list_mass(l, max));
            for (const auto& t : l) {
                keep += detail::mass_of(detail::exp(t.logit - max)) >= share ? 1 : 0;
            }
        }
        keep = std::max<std::size_t>(keep, 1);
        if (keep < size) {
            detail::keep_top_k(c, keep);
        }
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
    // The floor of the tokens of weight w or more (exp_mass's weights) of a whole vocabulary of
    // finite logits, and the draw over it, when they are the tokens from some logit up (as they
    // are unless exp's steps, monotone only to within 2 ulp, reorder two tokens across w): that
    // logit is then the one find_by_rank finds for their count, the floor the same, and its
    // masses the weights' (one pass, without exponentials). False (nothing changed) otherwise.
    bool floor_from_weights(candidates& c, double u, const float* weights, float w, float max)
    {
        const float* x = c.vocabulary_logits();
        const auto n = static_cast<std::size_t>(c.vocab_size());
        auto& masses = c.chunk_masses();
        masses.resize(detail::chunk_count(n));
        float least = 0.0f;
        float most_below = 0.0f;
        const detail::mass_t total = detail::passing_chunk_masses<arch::vector_native>(x, weights, n, w, masses.data(), least, most_below);
        if (!(most_below < least)) {
            return false;
        }
        c.keep_at_least(least, max);
        state_.select_floor(c, detail::draw_floor_chunks(x, weights, max, least, masses.data(), total, u));
        return true;
    }

    // Whether every token of a vocabulary of finite logits from `lowest` to `max` passes, known
    // without the weights' pass: the total mass is at most n 2^48, so the share it asks for is at
    // most share_of(least, n 2^48), and every weight is at least the lowest logit's (exp is within
    // 2 ulp of a monotone function: the margin of 2^-20 covers its steps). When mu has grown, as a
    // peaky distribution makes it, every step keeps everything, and this spares that pass.
    [[nodiscard]] static bool everything_passes(float max, float lowest, std::size_t n, float least) noexcept
    {
        const detail::mass_t most = share_of(least, detail::mass_t{n} << detail::mass_bits);
        const float weakest = detail::opaque(detail::exp(lowest - max) * (1.0f - 0x1.0p-20f));
        return detail::mass_t{detail::mass_of(weakest)} >= most;
    }

    // The least mass that has probability `least`: ceil(least total); the total when least >= 1
    // (at most a token holding all the mass passes, and one is kept anyway); 0 when least is 0
    // or NaN (mu beyond the float range: everything passes).
    [[nodiscard]] static detail::mass_t share_of(float least, detail::mass_t total) noexcept
    {
        if (!(least > 0.0f)) {
            return 0;
        }
        return least >= 1.0f ? total : detail::mass_share(least, total);
    }

    detail::mirostat_feedback state_;
};

} // namespace qk::sampling
