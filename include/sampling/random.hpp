// The random numbers of the stochastic samplers (dist, XTC, mirostat): a specified engine
// (std::mt19937_64, whose output sequence the C++ standard fixes) and qkern's own mapping of its
// output to a uniform double, so a seed draws the same numbers with every compiler and library.
#pragma once

#include <cstdint>
#include <random>

namespace qk::sampling {

// splitmix64's finalizer: spreads a seed and a stream number over all 64 bits, so samplers given
// the same seed (chain::reseed gives every sampler the same one) still draw independent numbers.
[[nodiscard]] constexpr std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t stream) noexcept
{
    std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * (stream + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// The top 53 bits of one engine output as a double in [0, 1): every value k * 2^-53 equally likely.
// std::uniform_real_distribution is not used because its algorithm is implementation-defined.
[[nodiscard]] constexpr double to_unit_interval(std::uint64_t bits) noexcept
{
    return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// One sampler's generator: the stream number names the sampler kind, the seed comes from the user.
class random_source {
public:
    random_source(std::uint64_t seed, std::uint64_t stream) : stream_(stream), engine_(mix_seed(seed, stream)) {}

    void reseed(std::uint64_t seed) { engine_.seed(mix_seed(seed, stream_)); }

    // A uniform number in [0, 1); GPU backends are given this same double (dist::next_uniform).
    [[nodiscard]] double uniform() { return to_unit_interval(engine_()); }

    friend bool operator==(const random_source&, const random_source&) = default;

private:
    std::uint64_t stream_;
    std::mt19937_64 engine_;
};

// Stream numbers of the samplers that draw.
namespace stream {
inline constexpr std::uint64_t dist = 1;
inline constexpr std::uint64_t xtc = 2;
inline constexpr std::uint64_t mirostat = 3;
inline constexpr std::uint64_t mirostat_v2 = 4;
inline constexpr std::uint64_t adaptive_p = 5;
} // namespace stream

} // namespace qk::sampling
