// typical (locally typical sampling): with p the softmax of the candidates and H its entropy,
// orders the candidates by |-log p - H| (ascending; equal scores: lower id first) and keeps the
// shortest prefix of that order whose mass exceeds p times the total (strictly), and at least
// min_keep. p >= 1 keeps everything. The result is in that order, not sorted by logit.
// Computed as: each candidate's weight e = exp(l - max); z = sum e and s = sum e (l - max), in
// double in one fixed order (vocabulary_scan.hpp's typical_moments), so that H = log z - s / z
// and -log p - H = s / z - (l - max): the score is |center - l| with center = float(max + s / z)
// (rounded once, not through log p), +inf for a -inf logit. The masses are exact_mass.hpp's
// (e in 2^-48 units, summed in integers): the prefix must reach floor(p * total) + 1.
// Over a whole vocabulary nothing is sorted: one pass for the weights and the moments, one for
// the keys -|center - l|, then the crossing token by rank. From 4096 logits the keys' pass
// builds the exact mass of each of 1024 buckets by key (rank_select.hpp's rank_histogram, whose
// sum is the total) and stores no key: a walk of the buckets and one pass over the tokens' stored
// buckets gather the crossing bucket, whose keys alone are computed. Below that the first pass
// adds the masses, the keys are stored, and a few passes narrow them. The set becomes
// candidates::form::ranked, which dist draws from by the same search. A list is sorted by score.
// Differs from llama.cpp: a candidate with a -inf logit adds nothing to H here and scores +inf, so
// it goes last. llama_sampler_typical_apply adds -p logf(p) for it as well: 0 * -inf makes H NaN,
// every score NaN, and its std::sort then leaves an unspecified order (with libstdc++: unchanged
// up to 16 candidates, shuffled beyond), of which it keeps a prefix. Equal scores get no defined
// order there either. Its scores come from float p and its cut from float p added in order; here
// the moments are double sums and the cut compares exact masses.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../candidates.hpp"
#include "../parameters.hpp"

namespace qk::sampling {

class typical {
public:
    static constexpr bool selects = false;
    static constexpr const char* name = "typical";

    explicit typical(float p, std::size_t min_keep = 1) : p_(p), min_keep_(detail::keep_bound(min_keep))
    {
        if (!(p == p)) {
            qk::detail::fail("qk::sampling::typical: p is NaN");
        }
    }

    void apply(candidates& c) const
    {
        if (p_ >= 1.0f) {
            return;
        }
        if (c.whole_vocabulary() && apply_ranked(c)) {
            return;
        }
        auto& l = c.list();
        const std::size_t n = l.size();
        logits_.resize(n);
        weights_.resize(n);
        keys_.resize(n);
        float max = detail::minus_infinity;
        for (std::size_t i = 0; i < n; ++i) {
            logits_[i] = l[i].logit;
            max = l[i].logit > max ? l[i].logit : max;
        }
        c.check_max(max);
        float lowest_logit = 0.0f;
        const detail::mass_t total = detail::exp_mass<arch::vector_native>(logits_.data(), n, max, weights_.data(), lowest_logit);
        const float center = center_of(logits_.data(), weights_.data(), n, max);
        float lowest = 0.0f;
        float highest = 0.0f;
        detail::distance_keys<arch::vector_native>(logits_.data(), weights_.data(), n, center, keys_.data(), lowest, highest);
        order_.resize(n);
        for (std::size_t i = 0; i < n; ++i) {
            order_[i] = {keys_[i], l[i].id, static_cast<std::uint32_t>(i)};
        }
        std::sort(order_.begin(), order_.end(),
                  [](const ranked& a, const ranked& b) { return a.key > b.key || (a.key == b.key && a.id < b.id); });
        const detail::mass_t target = detail::mass_beyond(p_, total);
        detail::mass_t running = 0;
        std::size_t keep = n;
        for (std::size_t i = 0; i < n; ++i) {
            running += detail::mass_of(weights_[order_[i].at]);
            if (running >= target && i + 1 >= min_keep_) {
                keep = i + 1;
                break;
            }
        }
        kept_.resize(keep);
        for (std::size_t i = 0; i < keep; ++i) {
            kept_[i] = {order_[i].id, logits_[order_[i].at], 0.0f};
        }
        l.assign(kept_.begin(), kept_.end());
        c.assign_list(false);
    }

    [[nodiscard]] std::string describe() const { return qk::detail::message("typical(p=", detail::shortest{p_}, ",min_keep=", min_keep_, ")"); }

    static typical from_arguments(std::vector<argument> given)
    {
        const arguments args(name, std::move(given), {"p", "min_keep"});
        const std::int64_t min_keep = args.integer("min_keep", 1);
        if (min_keep < 0) {
            args.fail("min_keep=", min_keep, " is negative");
        }
        return typical(args.number("p", 1.0f), static_cast<std::size_t>(min_keep));
    }

private:
    struct ranked {
        float key;
        std::int32_t id;
        std::uint32_t at; // index in the list
    };

    // float(max + s / z): the logit whose score is 0 (see the header comment).
    [[nodiscard]] static float center_of(const float* x, const float* e, std::size_t n, float max) noexcept
    {
        double z = 0;
        double s = 0;
        detail::typical_moments<arch::vector_native>(x, e, n, max, z, s);
        return center_from(max, z, s);
    }

    // The center from the moments z and s (the list and whole-vocabulary paths share it).
    [[nodiscard]] static float center_from(float max, double z, double s) noexcept
    {
        return static_cast<float>(static_cast<double>(max) + s / z);
    }

    // A whole vocabulary: the crossing token by rank of its key, the set left ranked up to it.
    // False (nothing changed) when min_keep asks for more than that: the list path then applies.
    bool apply_ranked(candidates& c) const
    {
        const float* x = c.vocabulary_logits();
        const auto n = static_cast<std::size_t>(c.vocab_size());
        const float max = c.vocabulary_max();
        c.check_max(max);
        float* weights = c.weights_buffer();
        float* keys = c.keys_buffer();
        float lowest_logit = 0.0f;
        double z = 0;
        double s = 0;
        float lowest = 0.0f; // the keys' range, where they are stored
        float highest = 0.0f;
        detail::mass_t total = 0;
        float center = 0.0f;
        detail::rank_position found;
        const bool by_histogram = n >= histogram_from;
        if (by_histogram) {
            // The total mass comes from the histogram the keys' pass builds, so the weights' pass
            // computes no masses.
            detail::exp_moments<arch::vector_native>(x, n, max, weights, lowest_logit, z, s);
            center = center_from(max, z, s);
            // The buckets spread over the keys of the logits that weigh anything: |center - x|
            // for x from max - 34 (or the lowest logit) to max, center between them.
            const float from = std::max(lowest_logit, max - 34.0f);
            const float per_unit = detail::rank_histogram::unit_for(std::max(center - from, max - center));
            total = detail::distance_histogram<arch::vector_native>(x, weights, n, center, per_unit, c.rank_histogram());
            found = detail::find_by_distance<arch::vector_native>(x, weights, n, center, detail::mass_beyond(p_, total), detail::everything,
                                                                  c.rank_scratch(), c.rank_histogram());
        } else {
            total = detail::exp_mass_moments<arch::vector_native>(x, n, max, weights, lowest_logit, z, s);
            center = center_from(max, z, s);
            detail::distance_keys<arch::vector_native>(x, weights, n, center, keys, lowest, highest);
            found = detail::find_by_rank<arch::vector_native, false>(keys, weights, n, lowest, highest, detail::mass_beyond(p_, total),
                                                                     detail::everything, c.rank_scratch());
        }
        const detail::rank_bound bound{found.logit, found.id};
        if (min_keep_ > 1) {
            if (by_histogram) {
                detail::distance_keys<arch::vector_native>(x, weights, n, center, keys, lowest, highest);
            }
            if (detail::count_ranked<arch::vector_native>(keys, n, bound) < min_keep_) {
                return false;
            }
        }
        if (by_histogram) {
            c.keep_ranked_by_distance(bound, found.through, total, center);
        } else {
            c.keep_ranked(bound, found.through, total, lowest, highest);
        }
        return true;
    }

    // From this many logits, the keys are not stored: their pass builds the histogram of the
    // weights by key (rank_select.hpp) through which the cut and the draw over the ranked set find
    // their token, computing the keys of one bucket.
    static constexpr std::size_t histogram_from = 4096;

    float p_;
    std::size_t min_keep_;
    // Scratch, kept for its capacity.
    mutable std::vector<float> logits_;
    mutable std::vector<float> weights_;
    mutable std::vector<float> keys_;
    mutable std::vector<ranked> order_;
    mutable std::vector<token_data> kept_;
};

} // namespace qk::sampling
