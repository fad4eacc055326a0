// xtc (exclude top choices): with chance `probability` per step (a uniform draw u <= probability),
// removes every candidate whose probability is at least `threshold` except the least likely of
// them (the last in rank order: lowest logit, then highest id), provided at least min_keep
// candidates remain; the others keep their order. Nothing happens when probability <= 0,
// threshold > 0.5 (at most one candidate could pass it) or fewer than two candidates remain.
// Probabilities are compared as exact masses (exact_mass.hpp): a candidate passes when the mass of
// its weight exp(logit - max) reaches ceil(threshold * total), so no order of float additions
// decides it. Over a whole vocabulary the removed tokens' logits become -inf and the set stays
// whole: a max pass, an exp pass that bounds the total mass (the exact total is added up only when
// a token's mass lies between the shares of the two bounds) and a top-k scan for the (at most
// 1 / threshold) that pass; a list loses them in place.
// Differs from llama.cpp (llama_sample_xtc_apply): the chance is a double from qkern's generator
// (random.hpp) instead of std::uniform_real_distribution<float> over std::mt19937; the threshold
// is compared with exact masses, not with float probabilities from a sorted softmax; equal logits
// rank by lower id, so when the least likely candidate at or above the threshold ties with others,
// the highest id of them is the one kept (llama.cpp's sort leaves ties in no defined order); a
// chain's reset() leaves the generator alone (llama_sampler_xtc_reset reseeds it).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "../candidates.hpp"
#include "../parameters.hpp"
#include "../random.hpp"

namespace qk::sampling {

class xtc {
public:
    static constexpr bool selects = false;
    static constexpr const char* name = "xtc";

    xtc(float probability, float threshold, std::size_t min_keep = 1, std::uint64_t seed = 0)
        : probability_(probability), threshold_(threshold), min_keep_(detail::keep_bound(min_keep)), seed_(seed), random_(seed, stream::xtc)
    {
        if (!(probability == probability) || !(threshold == threshold)) {
            qk::detail::fail("qk::sampling::xtc: probability=", probability, ", threshold=", threshold, ": NaN");
        }
    }

    void apply(candidates& c)
    {
        if (probability_ <= 0.0f || threshold_ > 0.5f || c.size() < 2) {
            return;
        }
        if (random_.uniform() > probability_) {
            return;
        }
        if (c.whole_vocabulary()) {
            apply_whole(c);
            return;
        }
        auto& l = c.list();
        const float max = detail::list_max(l);
        c.check_max(max);
        const detail::mass_t share = passing_mass(detail::list_mass(l, max));
        const auto passes = [&](const token_data& t) { return detail::mass_of(detail::exp(t.logit - max)) >= share; };
        const auto passing = static_cast<std::size_t>(std::count_if(l.begin(), l.end(), passes));
        if (passing < 2 || l.size() - (passing - 1) < min_keep_) {
            return;
        }
        // The passing candidates are the best `passing` by rank; the last of them stays.
        const token_data* kept = nullptr;
        for (const auto& t : l) {
            if (passes(t) && (kept == nullptr || detail::ranks_before(*kept, t))) {
                kept = &t;
            }
        }
        const std::int32_t kept_id = kept->id;
        std::erase_if(l, [&](const token_data& t) { return t.id != kept_id && passes(t); });
        c.assign_list(c.sorted());
    }

    void reseed(std::uint64_t seed)
    {
        seed_ = seed;
        random_.reseed(seed);
    }

    [[nodiscard]] std::string describe() const
    {
        return qk::detail::message("xtc(probability=", detail::shortest{probability_}, ",threshold=", detail::shortest{threshold_}, ",min_keep=", min_keep_,
                                   ",seed=", seed_, ")");
    }

    static xtc from_arguments(std::vector<argument> given)
    {
        const arguments args(name, std::move(given), {"probability", "threshold", "min_keep", "seed"});
        const std::int64_t min_keep = args.integer("min_keep", 1);
        if (min_keep < 0) {
            args.fail("min_keep=", min_keep, " is negative");
        }
        return xtc(args.number("probability", 0.5f), args.number("threshold", 0.1f), static_cast<std::size_t>(min_keep),
                   args.seed("seed", 0));
    }

private:
    // Beyond this many passing tokens (thresholds below 1/1024) the whole vocabulary is scanned
    // token by token instead of by a top-k scan.
    static constexpr std::size_t most_scanned = 1024;

    // The least mass that passes: ceil(threshold * total); every mass passes a threshold <= 0.
    [[nodiscard]] detail::mass_t passing_mass(detail::mass_t total) const noexcept
    {
        return threshold_ > 0.0f ? detail::mass_share(threshold_, total) : 0;
    }

    // A whole vocabulary: the passing tokens are the best few, found by a top-k scan. The total
    // mass is first bounded (exp_mass_bounds, a plain exp pass); the exact total is added up only
    // when a token's mass lies between the shares of the two bounds (a relative window of about
    // 1e-5), or the threshold passes too many for a scan.
    void apply_whole(candidates& c)
    {
        const float* x = c.vocabulary_logits();
        const auto n = static_cast<std::size_t>(c.vocab_size());
        const float max = c.vocabulary_max();
        c.check_max(max);
        if (apply_bounded(c, x, n, max)) {
            return;
        }
        float lowest = 0.0f;
        const detail::mass_t total = detail::exp_mass<arch::vector_native>(x, n, max, nullptr, lowest);
        const detail::mass_t share = passing_mass(total);
        const auto passes = [&](float logit) { return detail::mass_of(detail::exp(logit - max)) >= share; };
        // Each passing token weighs at least `share`, so at most total / share pass.
        if (share == 0 || total / share > most_scanned) {
            // Token by token; in id order, a later token ranks after an equal one.
            std::size_t passing = 0;
            std::size_t kept = 0;
            float kept_logit = detail::minus_infinity;
            for (std::size_t i = 0; i < n; ++i) {
                const float v = detail::without_nan(x[i]);
                if (passes(v) && (passing++ == 0 || v <= kept_logit)) {
                    kept = i;
                    kept_logit = v;
                }
            }
            if (passing < 2 || n - (passing - 1) < min_keep_) {
                return;
            }
            auto d = c.dense();
            for (std::size_t i = 0; i < n; ++i) {
                if (i != kept && passes(detail::without_nan(d[i]))) {
                    d[i] = detail::minus_infinity;
                }
            }
            c.note_max(kept_logit); // every other token that passed ranked before it and is gone
            return;
        }
        const auto most = static_cast<std::size_t>(total / share);
        detail::top_k_scan<arch::vector_native>(x, n, most, best_, [](std::size_t) { return false; });
        std::size_t passing = 0;
        while (passing < best_.size() && passes(best_[passing].logit)) {
            ++passing;
        }
        remove_passing(c, passing);
    }

    // Makes -inf the logits of the `passing` best tokens (best_) but the last, provided at least
    // two pass and min_keep remain; the last is then the largest logit left.
    void remove_passing(candidates& c, std::size_t passing) const
    {
        const auto n = static_cast<std::size_t>(c.vocab_size());
        if (passing < 2 || n - (passing - 1) < min_keep_) {
            return;
        }
        for (std::size_t i = 0; i + 1 < passing; ++i) {
            c.set_logit(best_[i].id, detail::minus_infinity);
        }
        c.note_max(best_[passing - 1].logit);
    }

    // apply_whole from bounds on the total mass; false (nothing changed) when they do not settle
    // which tokens pass.
    bool apply_bounded(candidates& c, const float* x, std::size_t n, float max)
    {
        detail::mass_t low = 0;
        detail::mass_t high = 0;
        detail::exp_mass_bounds<arch::vector_native>(x, n, max, low, high);
        const detail::mass_t least_share = passing_mass(low);
        const detail::mass_t most_share = passing_mass(high); // shares grow with the total
        if (least_share == 0 || high / least_share > most_scanned) {
            return false;
        }
        const auto most = static_cast<std::size_t>(high / least_share);
        detail::top_k_scan<arch::vector_native>(x, n, most, best_, [](std::size_t) { return false; });
        std::size_t passing = 0;
        for (; passing < best_.size(); ++passing) {
            const detail::mass_t mass = detail::mass_of(detail::exp(best_[passing].logit - max));
            if (mass < least_share) {
                break; // fails the share of any total within the bounds
            }
            if (mass < most_share) {
                return false; // passes or fails depending on the exact total
            }
        }
        remove_passing(c, passing);
        return true;
    }

    float probability_;
    float threshold_;
    std::size_t min_keep_;
    std::uint64_t seed_;
    random_source random_;
    std::vector<token_data> best_; // scratch, kept for its capacity
};

} // namespace qk::sampling
