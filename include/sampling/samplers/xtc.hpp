// xtc (exclude top choices): with chance `probability` per step (a uniform draw u <= probability),
// removes every candidate whose probability is at least `threshold` except the least likely of
// them, provided at least min_keep candidates remain. Nothing happens when probability <= 0,
// threshold > 0.5 (at most one candidate could pass it) or fewer than two candidates remain.
// The result is sorted by logit; its p are not renormalized.
// Differs from llama.cpp (llama_sample_xtc_apply): the chance is a double from qkern's generator
// (random.hpp) instead of std::uniform_real_distribution<float> over std::mt19937; equal logits
// rank by lower id, so when the least likely candidate at or above the threshold ties with others,
// the highest id of them is the one kept (llama.cpp's sort leaves ties in no defined order); a
// chain's reset() leaves the generator alone (llama_sampler_xtc_reset reseeds it).
#pragma once

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
        : probability_(probability), threshold_(threshold), min_keep_(min_keep), seed_(seed), random_(seed, stream::xtc)
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
        c.sort();
        c.compute_probabilities();
        auto& l = c.list();
        std::size_t last_above = 0;
        for (std::size_t i = 0; i < l.size() && l[i].p >= threshold_; ++i) {
            last_above = i;
        }
        if (last_above > 0 && l.size() - last_above >= min_keep_) {
            l.erase(l.begin(), l.begin() + static_cast<std::ptrdiff_t>(last_above));
            c.assign_list(true);
        }
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
    float probability_;
    float threshold_;
    std::size_t min_keep_;
    std::uint64_t seed_;
    random_source random_;
};

} // namespace qk::sampling
