// typical (locally typical sampling): with p the softmax of the candidates sorted by logit and H
// its entropy, orders the candidates by |-log p - H| (ascending; equal scores keep the logit
// order) and keeps the shortest prefix of that order whose p sum to more than p (strictly), and
// at least min_keep. p >= 1 keeps everything. The result is in that order, not sorted by logit.
// Differs from llama.cpp: a candidate with p = 0 (a -inf logit, or one whose exp underflows) adds
// nothing to H here and scores +inf, so it goes last. llama_sampler_typical_apply adds -p logf(p)
// for it as well: 0 * -inf makes H NaN, every score NaN, and its std::sort then leaves an
// unspecified order (with libstdc++: unchanged up to 16 candidates, shuffled beyond), of which it
// keeps a prefix. Equal scores (equal logits) get no defined order there either.
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

    explicit typical(float p, std::size_t min_keep = 1) : p_(p), min_keep_(min_keep)
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
        c.sort();
        c.compute_probabilities();
        auto& l = c.list();
        float entropy = 0.0f;
        for (const auto& e : l) {
            if (e.p > 0.0f) {
                entropy = entropy - detail::opaque(e.p * detail::log(e.p));
            }
        }
        scored_.resize(l.size());
        for (std::size_t i = 0; i < l.size(); ++i) {
            // log 0 is -inf: a zero-probability candidate scores +inf and goes last.
            scored_[i] = {std::fabs(-detail::log(l[i].p) - entropy), l[i]};
        }
        std::stable_sort(scored_.begin(), scored_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        std::size_t keep = scored_.size();
        float sum = 0.0f;
        for (std::size_t i = 0; i < scored_.size(); ++i) {
            sum = sum + scored_[i].second.p;
            if (sum > p_ && i + 1 >= min_keep_) {
                keep = i + 1;
                break;
            }
        }
        for (std::size_t i = 0; i < keep; ++i) {
            l[i] = scored_[i].second;
        }
        l.resize(keep);
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
    float p_;
    std::size_t min_keep_;
    mutable std::vector<std::pair<float, token_data>> scored_; // scratch, kept for its capacity
};

} // namespace qk::sampling
