// dist: the seeded categorical draw. With p the softmax of the candidates' logits and u a uniform
// number in [0, 1) from the sampler's generator, it selects the first candidate (in the set's
// order: id order over a whole vocabulary) at which the running sum of p exceeds u times the sum
// of p. Over a whole vocabulary this is one SIMD pass for the maximum (none where a sampler before
// it has it: candidates::vocabulary_max) and one for the exp sums per chunk of 1024 logits, then
// exp is recomputed for the one chunk the draw lands in. Over a prefix
// (what top_p leaves of a whole vocabulary, sorted) the running sum is the exact mass of
// exact_mass.hpp, taken in rank order without sorting (rank_select.hpp): the first candidate whose
// running mass exceeds u times the prefix's mass (found through the histogram by logit top_p
// built, when it did: a walk of its buckets and one gathering pass). Over a floor (what min_p, and mirostat_v2 when
// it keeps many, leave of a whole vocabulary, in id order) likewise with exact masses, in id
// order: one SIMD pass for the mass of each chunk of 1024 logits, then the chunk the draw lands
// in, token by token. Over a ranked set (what typical leaves of a whole vocabulary) as over a
// prefix, in the order of its keys (through typical's histogram by key, computing the keys of the
// bucket it gathers).
// Differs from llama.cpp (llama_sampler_dist_apply): u comes from qkern's generator (random.hpp)
// instead of std::uniform_real_distribution<double> over std::mt19937, whose algorithm each
// standard library defines, so a seed draws the same tokens with every compiler and library
// (though not llama.cpp's). apply() draws exactly one u, also for a single candidate, where
// llama.cpp draws none; the running sum must exceed u times the sum (llama.cpp: reach it); a
// chain's reset() leaves the generator alone (llama_sampler_dist_reset reseeds it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../candidates.hpp"
#include "../parameters.hpp"
#include "../random.hpp"

namespace qk::sampling {

namespace detail {

// The list index the draw over a list with probabilities lands on: the first whose running sum
// (in double) exceeds u times the sum, or the last with p > 0 where rounding leaves it short.
[[nodiscard]] inline std::size_t draw_index(const std::vector<token_data>& l, double u) noexcept
{
    double total = 0;
    for (const auto& t : l) {
        total += t.p;
    }
    const double threshold = u * total;
    double running = 0;
    std::size_t last = 0;
    for (std::size_t i = 0; i < l.size(); ++i) {
        if (l[i].p > 0.0f) {
            last = i;
            running += l[i].p;
            if (running > threshold) {
                return i;
            }
        }
    }
    return last;
}

// The draw over a whole vocabulary: the token, and its probability as softmax() gives it.
struct vocabulary_draw {
    std::int32_t token;
    float p;
};
[[nodiscard]] inline vocabulary_draw draw_vocabulary(candidates& c, double u)
{
    const float* x = c.vocabulary_logits();
    const auto n = static_cast<std::size_t>(c.vocab_size());
    const float max = c.vocabulary_max();
    c.check_max(max);
    auto& sums = c.chunk_sums();
    sums.resize(chunk_count(n));
    const double total = exp_sums<arch::vector_native>(x, n, max, sums.data());
    const std::size_t i = draw<arch::vector_native>(x, n, max, sums.data(), total, u);
    return {static_cast<std::int32_t>(i), exp_difference(x[i], max) * static_cast<float>(1.0 / total)};
}

// A floor's draw: the token, its exact mass and the floor's (a sampler that reports the drawn
// token's probability divides the one by the other).
struct floor_draw {
    std::int32_t token;
    std::uint64_t mass;
    mass_t total;
};

// The draw over a floor at `threshold` of a whole vocabulary x[0 .. n) from its chunk masses
// (masked_chunk_masses or floor_chunk_masses) and their total: the chunk the target falls in, then
// its tokens one by one, their masses from the stored weights when `weights` is not null (the
// same masses: exp(x[i] - max) as exp_mass stores it).
[[nodiscard]] inline floor_draw draw_floor_chunks(const float* x, const float* weights, float max, float threshold, const std::uint64_t* masses,
                                                  mass_t total, double u)
{
    const mass_t target = draw_target(u, total);
    mass_t running = 0;
    std::size_t chunk = 0;
    while (running + masses[chunk] < target) {
        running += masses[chunk++];
    }
    for (std::size_t i = chunk * chunk_size;; ++i) {
        if (x[i] >= threshold) {
            const std::uint64_t mass = mass_of(weights != nullptr ? weights[i] : exp(x[i] - max));
            running += mass;
            if (running >= target) {
                return {static_cast<std::int32_t>(i), mass, total};
            }
        }
    }
}

[[nodiscard]] inline floor_draw draw_floor(candidates& c, double u)
{
    const float* x = c.prefix_logits();
    const auto n = static_cast<std::size_t>(c.vocab_size());
    const float max = c.prefix_max();
    // A +inf logit is refused here as in every other form: a floor kept it (min_p, whose
    // threshold is then +inf too), and the draw would otherwise pick it.
    c.check_max(max);
    const float threshold = c.floor_threshold();
    auto& masses = c.chunk_masses();
    masses.resize(chunk_count(n));
    const mass_t total = masked_chunk_masses<arch::vector_native>(x, n, max, threshold, masses.data());
    return draw_floor_chunks(x, nullptr, max, threshold, masses.data(), total, u);
}

// Draws over whatever form the candidates have and returns the token.
[[nodiscard]] inline std::int32_t draw_token(candidates& c, double u)
{
    if (c.whole_vocabulary()) {
        return draw_vocabulary(c, u).token;
    }
    if (c.is_floor()) {
        return draw_floor(c, u).token;
    }
    if (c.is_prefix()) {
        const auto n = static_cast<std::size_t>(c.vocab_size());
        return find_by_rank<arch::vector_native, false>(c.prefix_logits(), c.prefix_weights(), n, c.prefix_lowest(), c.prefix_max(),
                                                        draw_target(u, c.prefix_mass()), c.prefix_bound(), c.rank_scratch(),
                                                        c.prefix_histogram())
            .id;
    }
    if (c.is_ranked()) {
        const auto n = static_cast<std::size_t>(c.vocab_size());
        const mass_t target = draw_target(u, c.prefix_mass());
        if (const rank_histogram* histogram = c.prefix_histogram()) {
            return find_by_distance<arch::vector_native>(c.prefix_logits(), c.prefix_weights(), n, c.ranked_center(), target, c.prefix_bound(),
                                                         c.rank_scratch(), *histogram)
                .id;
        }
        return find_by_rank<arch::vector_native, false>(c.ranked_keys(), c.prefix_weights(), n, c.prefix_lowest(), c.prefix_max(), target,
                                                        c.prefix_bound(), c.rank_scratch())
            .id;
    }
    c.compute_probabilities();
    return c.list()[draw_index(c.list(), u)].id;
}

} // namespace detail

class dist {
public:
    static constexpr bool selects = true;
    static constexpr const char* name = "dist";

    explicit dist(std::uint64_t seed = 0) : seed_(seed), random_(seed, stream::dist) {}

    void apply(candidates& c) { c.select(detail::draw_token(c, random_.uniform())); }
    // Draws the uniform the next apply() would draw, advancing the generator the same way: a
    // backend that runs the draw itself consumes exactly the number this chain would have.
    [[nodiscard]] double next_uniform() { return random_.uniform(); }
    void reseed(std::uint64_t seed)
    {
        seed_ = seed;
        random_.reseed(seed);
    }

    [[nodiscard]] std::uint64_t seed() const noexcept { return seed_; }
    [[nodiscard]] std::string describe() const { return qk::detail::message("dist(seed=", seed_, ")"); }

    static dist from_arguments(std::vector<argument> given)
    {
        const arguments args(name, std::move(given), {"seed"});
        return dist(args.seed("seed", 0));
    }

private:
    std::uint64_t seed_;
    random_source random_;
};

} // namespace qk::sampling
