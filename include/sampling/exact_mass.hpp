// Exact probability mass over a whole vocabulary: each token's weight e = exp(logit - max) as an
// integer number of 2^-48 units, summed in integers, so that a sum has one value whatever order
// or vector width adds it. The selections of rank_select.hpp (top_p's cut, the draw over a sorted
// set) compare such sums, so they never depend on which elements a search happened to add first.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "../kernels/arch.hpp"
#include "deterministic_math.hpp"
#include "vocabulary_scan.hpp"

// g++ 12 warns, wrongly, that operands of the AVX-512 intrinsics inlined here may be used
// uninitialized: GCC bug 105593, as in deterministic_math.hpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace qk::sampling::detail {

// Wide enough for 2^31 weights of at most 2^48 units each.
__extension__ using mass_t = unsigned __int128;

// A weight in [0, 1] as floor(e * 2^48): two limbs of 24 bits, floor(e * 2^24) and the next 24
// bits of the fraction, each of which a float holds and an int32 lane adds exactly. Weights below
// 2^-48 count as 0 (next to the largest logit's weight of 1, a share below 4e-15).
inline constexpr int mass_bits = 48;
inline constexpr float limb_scale = 16777216.0f; // 2^24

// One scalar conversion: e 2^48 is exact (a power of two) and below 2^49, and truncation is floor,
// so this equals the limbs' sum (high 2^24 + low) that the vector code without 64-bit
// conversions adds.
[[nodiscard]] inline std::uint64_t mass_of(float e) noexcept
{
    return static_cast<std::uint64_t>(e * (limb_scale * limb_scale));
}

// ceil(p * total) for p in (0, 1), exactly: p is m 2^-s with an integer m below 2^24.
[[nodiscard]] inline mass_t mass_share(float p, mass_t total) noexcept
{
    const auto bits = std::bit_cast<std::uint32_t>(p);
    const std::uint32_t exponent = (bits >> 23) & 0xffu;
    const std::uint32_t m = exponent == 0 ? (bits & 0x7fffffu) : ((bits & 0x7fffffu) | 0x800000u);
    const int s = exponent == 0 ? 149 : 150 - static_cast<int>(exponent);
    const mass_t product = mass_t{m} * total; // below 2^24 * 2^79
    if (s >= 128) {
        return product > 0 ? 1 : 0;
    }
    const mass_t q = product >> s;
    return q + (((q << s) != product) ? 1 : 0);
}

// The exact mass of a list's weights exp(logit - max).
[[nodiscard]] inline mass_t list_mass(const std::vector<token_data>& l, float max) noexcept
{
    mass_t total = 0;
    for (const auto& t : l) {
        total += mass_of(exp(t.logit - max));
    }
    return total;
}

// floor(p * total) + 1 for p in [0, 1), exactly: the least mass that exceeds p times the total.
[[nodiscard]] inline mass_t mass_beyond(float p, mass_t total) noexcept
{
    if (!(p > 0.0f)) {
        return 1;
    }
    const auto bits = std::bit_cast<std::uint32_t>(p);
    const std::uint32_t exponent = (bits >> 23) & 0xffu;
    const std::uint32_t m = exponent == 0 ? (bits & 0x7fffffu) : ((bits & 0x7fffffu) | 0x800000u);
    const int s = exponent == 0 ? 149 : 150 - static_cast<int>(exponent);
    const mass_t product = mass_t{m} * total;
    return (s >= 128 ? 0 : product >> s) + 1;
}

// A mass as a double, correctly rounded (g++ and clang convert 128-bit integers so).
[[nodiscard]] inline double to_double(mass_t m) noexcept
{
    return static_cast<double>(m);
}

// floor(v) as a mass, for 0 <= v below 2^128 (a double that large holds an integer exactly).
[[nodiscard]] inline mass_t mass_floor(double v) noexcept
{
    const double whole = std::floor(v);
    const double high = std::floor(whole * 0x1.0p-64);
    return (mass_t{static_cast<std::uint64_t>(high)} << 64) + static_cast<std::uint64_t>(whole - high * 0x1.0p64);
}

// The draw's target for a uniform u in [0, 1): the running mass must exceed u * total (that
// product rounded to a double), i.e. reach floor(u * total) + 1; at most `total`.
[[nodiscard]] inline mass_t draw_target(double u, mass_t total) noexcept
{
    const mass_t whole = mass_floor(u * to_double(total)); // below 2^80
    return whole + 1 < total ? whole + 1 : total;
}

// Lanes add at most this many limbs (each below 2^24 + 1) before they are flushed into 64-bit
// totals, so an int32 lane stays below 2^31.
inline constexpr std::size_t limb_adds_per_flush = 64;

template <class Arch>
using simd_float = xsimd::batch<float, arch::xsimd_of<Arch>>;
template <class Arch>
using simd_int = xsimd::batch<std::int32_t, arch::xsimd_of<Arch>>;

// The two limbs of a vector of weights. The conversions truncate, which is floor for weights
// (never negative), and the high limb converts back exactly (at most 2^24), so the fraction left
// is exact too: no rounding instruction (two micro-ops each on recent Intel cores, where the
// floating-point ports are what exp's passes wait on).
template <class A>
[[gnu::always_inline]] inline void limbs(const xsimd::batch<float, A>& e, xsimd::batch<std::int32_t, A>& high,
                                         xsimd::batch<std::int32_t, A>& low) noexcept
{
    using V = xsimd::batch<float, A>;
    const V scaled = e * V(limb_scale);
    high = xsimd::batch_cast<std::int32_t>(scaled);
    low = xsimd::batch_cast<std::int32_t>((scaled - xsimd::batch_cast<float>(high)) * V(limb_scale));
}

// Adds int32 lanes into a 64-bit total.
template <class A>
inline void flush(xsimd::batch<std::int32_t, A>& lanes, std::uint64_t& total) noexcept
{
    alignas(64) std::int32_t stored[xsimd::batch<std::int32_t, A>::size];
    lanes.store_aligned(stored);
    for (const std::int32_t v : stored) {
        total += static_cast<std::uint32_t>(v);
    }
    lanes = xsimd::batch<std::int32_t, A>(0);
}

// e[i] = exp(x[i] - max) for every i (stored when e is not null) and the total mass of the
// weights; `lowest` becomes the smallest logit (NaN ignored, +inf when there is none). NaN logits
// weigh 0.
template <class Arch>
[[nodiscard]] mass_t exp_mass(const float* x, std::size_t n, float max, float* e, float& lowest) noexcept
{
    mass_t total = 0;
    lowest = std::numeric_limits<float>::infinity();
    std::size_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, simd_of<Arch>>) {
        // floor(e 2^48) in one conversion to 64 bits per half (e 2^48 is exact, truncation is
        // floor), added in 64-bit lanes: cheaper than two 24-bit limbs, and the same sum.
        using V = simd_float<Arch>;
        const V m(max);
        const __m512 unit = _mm512_set1_ps(0x1.0p48f);
        __m512 low_x = _mm512_set1_ps(lowest);
        while (i + 16 <= n) {
            __m512i lanes = _mm512_setzero_si512();
            // At most 2^15 masses of at most 2^48 are added up in one 64-bit sum.
            for (std::size_t a = 0; a < (std::size_t{1} << 11) && i + 16 <= n; ++a, i += 16) {
                const __m512 xi = _mm512_loadu_ps(x + i);
                low_x = _mm512_min_ps(xi, low_x); // the second operand where xi is NaN
                const __m512 v = exp(V(xi) - m);
                if (e != nullptr) {
                    _mm512_storeu_ps(e + i, v);
                }
                const __m512 scaled = _mm512_mul_ps(v, unit);
                lanes = _mm512_add_epi64(lanes, _mm512_cvttps_epu64(_mm512_castps512_ps256(scaled)));
                lanes = _mm512_add_epi64(lanes, _mm512_cvttps_epu64(_mm512_extractf32x8_ps(scaled, 1)));
            }
            // Added as unsigned: the sum reaches 2^63, which _mm512_reduce_add_epi64's signed
            // additions would overflow.
            alignas(64) std::uint64_t sums[8];
            _mm512_store_si512(sums, lanes);
            for (const std::uint64_t v : sums) {
                total += v;
            }
        }
        lowest = _mm512_reduce_min_ps(low_x);
    }
#endif
    if constexpr (!is_scalar<Arch>) {
        using V = simd_float<Arch>;
        using I = simd_int<Arch>;
        constexpr std::size_t w = V::size;
        const V m(max);
        V low_x(lowest);
        std::uint64_t high_total = 0;
        std::uint64_t low_total = 0;
        while (i + w <= n) {
            I high_lanes(0);
            I low_lanes(0);
            for (std::size_t a = 0; a < limb_adds_per_flush && i + w <= n; ++a, i += w) {
                const V xi = V::load_unaligned(x + i);
                low_x = xsimd::select(xi < low_x, xi, low_x);
                const V v = exp(xi - m);
                if (e != nullptr) {
                    v.store_unaligned(e + i);
                }
                I high;
                I low;
                limbs(v, high, low);
                high_lanes += high;
                low_lanes += low;
            }
            flush(high_lanes, high_total);
            flush(low_lanes, low_total);
        }
        total += (mass_t{high_total} << 24) + low_total;
        alignas(64) float lanes[w];
        low_x.store_aligned(lanes);
        for (const float l : lanes) {
            lowest = l < lowest ? l : lowest;
        }
    }
    for (; i < n; ++i) {
        lowest = x[i] < lowest ? x[i] : lowest;
        const float v = exp(x[i] - max);
        if (e != nullptr) {
            e[i] = v;
        }
        total += mass_of(v);
    }
    return total;
}

// Bounds on exp_mass's total without its exact sum: low <= total <= high, from the weights
// exp(x[i] - max) added in float lanes chunk by chunk (chunk_size of them: at most
// chunk_size / w additions per lane, a few more to add the lanes up) and the chunks in double,
// so within a relative (chunk_size / w + 8) 2^-24 of their real sum; each mass is its weight
// 2^48 less a fraction, so the total lies at most n below that. The pass costs what a plain exp
// pass does, where the exact masses convert every weight to an integer; a sampler that compares
// a few masses with a share of the total decides from the bounds when they settle it.
template <class Arch>
void exp_mass_bounds(const float* x, std::size_t n, float max, mass_t& low, mass_t& high) noexcept
{
    constexpr std::size_t w = [] {
        if constexpr (is_scalar<Arch>) {
            return std::size_t{1};
        } else {
            return simd_float<Arch>::size;
        }
    }();
    double sum = 0;
    for (std::size_t begin = 0; begin < n; begin += chunk_size) {
        const std::size_t end = std::min(n, begin + chunk_size);
        std::size_t i = begin;
        float chunk = 0.0f;
        if constexpr (!is_scalar<Arch>) {
            using V = simd_float<Arch>;
            const V m(max);
            V lanes(0.0f);
            for (; i + w <= end; i += w) {
                lanes += exp(V::load_unaligned(x + i) - m);
            }
            chunk = xsimd::hadd(lanes);
        }
        for (; i < end; ++i) {
            chunk += exp(x[i] - max);
        }
        sum += static_cast<double>(chunk);
    }
    // Relative error of the float sums, with room for the double additions and the products below.
    constexpr double error = static_cast<double>(chunk_size / w + 16) * 0x1.0p-24;
    const double scaled = sum * 0x1.0p48; // below 2^31 * 2^48: a double holds the integers
    high = mass_floor(scaled * (1.0 + error)) + 1;
    const double least = scaled * (1.0 - error) - static_cast<double>(n) - 1.0;
    low = least > 0.0 ? mass_floor(least) : 0;
}

// exp_mass and, in the same pass (block by block, while a block is in cache), typical's moments
// of those weights: vocabulary_scan.hpp's typical_moments, the same lanes in the same order.
template <class Arch>
[[nodiscard]] mass_t exp_mass_moments(const float* x, std::size_t n, float max, float* e, float& lowest, double& z, double& s) noexcept
{
    constexpr std::size_t block = 1024; // a multiple of 16, so that every element keeps its lane
    moment_lanes lanes;
    mass_t total = 0;
    lowest = std::numeric_limits<float>::infinity();
    for (std::size_t begin = 0; begin < n; begin += block) {
        const std::size_t count = std::min(block, n - begin);
        float block_lowest = 0.0f;
        total += exp_mass<Arch>(x + begin, count, max, e + begin, block_lowest);
        lowest = block_lowest < lowest ? block_lowest : lowest;
        add_typical_moments<Arch>(x + begin, e + begin, count, max, lanes);
    }
    finish_typical_moments(lanes, z, s);
    return total;
}

// e[i] = exp(x[i] - max) for every i, stored, as exp_mass computes them but without their mass
// (for a caller that gets the total elsewhere, as a histogram pass adds it up); `lowest` the
// smallest logit (NaN ignored, +inf when there is none).
template <class Arch>
void exp_weights(const float* x, std::size_t n, float max, float* e, float& lowest) noexcept
{
    lowest = std::numeric_limits<float>::infinity();
    std::size_t i = 0;
    if constexpr (!is_scalar<Arch>) {
        using V = simd_float<Arch>;
        constexpr std::size_t w = V::size;
        const V m(max);
        V low(lowest);
        for (; i + w <= n; i += w) {
            const V v = V::load_unaligned(x + i);
            low = xsimd::select(v < low, v, low); // NaN is never below
            exp(v - m).store_unaligned(e + i);
        }
        alignas(64) float lanes[w];
        low.store_aligned(lanes);
        for (const float l : lanes) {
            lowest = l < lowest ? l : lowest;
        }
    }
    for (; i < n; ++i) {
        lowest = x[i] < lowest ? x[i] : lowest;
        e[i] = exp(x[i] - max);
    }
}

// exp_moments in one loop, with the moments in vector registers (moment_registers or
// avx2_moment_registers, given `register_max` holding max): the moments of each 16 elements are
// added eight vectors of 16 after their weights. exp waits on its own latency, and the moments'
// conversions fit in beside it once they do not wait on it too (added in the same vector as its
// weights, they made the pass slower than two, on AVX-512).
template <class Arch, class Registers, class Register>
void exp_moments_lagged(const float* x, std::size_t n, float max, Register register_max, float* e, float& lowest, double& z,
                        double& s) noexcept
{
    constexpr std::size_t lag = 128;
    using V = simd_float<Arch>;
    constexpr std::size_t w = V::size;
    static_assert(sum_lanes % w == 0);
    const V m(max);
    V low(std::numeric_limits<float>::infinity());
    moment_lanes lanes;
    Registers sums(lanes);
    std::size_t i = 0;
    for (; i + sum_lanes <= n; i += sum_lanes) {
        for (std::size_t g = 0; g < sum_lanes; g += w) {
            const V v = V::load_unaligned(x + i + g);
            low = xsimd::select(v < low, v, low); // NaN is never below
            exp(v - m).store_unaligned(e + i + g);
        }
        if (i >= lag) {
            sums.add(x + i - lag, e + i - lag, register_max);
        }
    }
    sums.store(lanes);
    alignas(64) float lane_lowest[w];
    low.store_aligned(lane_lowest);
    lowest = std::numeric_limits<float>::infinity();
    for (const float l : lane_lowest) {
        lowest = l < lowest ? l : lowest;
    }
    for (std::size_t j = i; j < n; ++j) {
        lowest = x[j] < lowest ? x[j] : lowest;
        e[j] = exp(x[j] - max);
    }
    const std::size_t from = i >= lag ? i - lag : 0;
    add_typical_moments<Arch>(x + from, e + from, n - from, max, lanes);
    finish_typical_moments(lanes, z, s);
}

// exp_weights and, in the same pass, typical's moments of those weights (vocabulary_scan.hpp's
// typical_moments, the same lanes in the same order): exp_mass_moments without the mass.
template <class Arch>
void exp_moments(const float* x, std::size_t n, float max, float* e, float& lowest, double& z, double& s) noexcept
{
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, simd_of<Arch>>) {
        exp_moments_lagged<Arch, moment_registers>(x, n, max, _mm512_set1_ps(max), e, lowest, z, s);
        return;
    }
#endif
#if defined(__AVX2__)
    if constexpr (std::is_base_of_v<xsimd::avx2, simd_of<Arch>>) {
        exp_moments_lagged<Arch, avx2_moment_registers>(x, n, max, _mm256_set1_ps(max), e, lowest, z, s);
        return;
    }
#endif
    // Block by block, while a block is in cache.
    constexpr std::size_t block = 1024; // a multiple of 16, so that every element keeps its lane
    moment_lanes lanes;
    lowest = std::numeric_limits<float>::infinity();
    for (std::size_t begin = 0; begin < n; begin += block) {
        const std::size_t count = std::min(block, n - begin);
        float block_lowest = 0.0f;
        exp_weights<Arch>(x + begin, count, max, e + begin, block_lowest);
        lowest = block_lowest < lowest ? block_lowest : lowest;
        add_typical_moments<Arch>(x + begin, e + begin, count, max, lanes);
    }
    finish_typical_moments(lanes, z, s);
}

// The mass of each chunk of chunk_size logits (chunk_count(n) of them, into `masses`), counting
// only the tokens whose logit is at least `threshold`, and their total.
template <class Arch>
mass_t masked_chunk_masses(const float* x, std::size_t n, float max, float threshold, std::uint64_t* masses) noexcept
{
    mass_t total = 0;
    for (std::size_t c = 0; c * chunk_size < n; ++c) {
        const std::size_t begin = c * chunk_size;
        const std::size_t end = std::min(n, begin + chunk_size);
        std::uint64_t chunk = 0;
        std::size_t i = begin;
        if constexpr (!is_scalar<Arch>) {
            using V = simd_float<Arch>;
            using I = simd_int<Arch>;
            constexpr std::size_t w = V::size;
            const V m(max);
            const V t(threshold);
            std::uint64_t high_total = 0;
            std::uint64_t low_total = 0;
            while (i + w <= end) {
                I high_lanes(0);
                I low_lanes(0);
                for (std::size_t a = 0; a < limb_adds_per_flush && i + w <= end; ++a, i += w) {
                    const V v = V::load_unaligned(x + i);
                    I high;
                    I low;
                    limbs(xsimd::select(v >= t, exp(v - m), V(0.0f)), high, low);
                    high_lanes += high;
                    low_lanes += low;
                }
                flush(high_lanes, high_total);
                flush(low_lanes, low_total);
            }
            chunk = (high_total << 24) + low_total; // below 2^10 * 2^48
        }
        for (; i < end; ++i) {
            chunk += x[i] >= threshold ? mass_of(exp(x[i] - max)) : 0;
        }
        masses[c] = chunk;
        total += chunk;
    }
    return total;
}

// The mass of the weights e[i] of at least w in each chunk of chunk_size (chunk_count(n) of them,
// into `masses`), and their total; `least` becomes the smallest logit x[i] among those tokens and
// `most_below` the largest among the others (+inf, -inf where there is none; NaN ignored). When least is above
// most_below, the tokens of weight w or more are those of logit `least` or more, and the masses
// are masked_chunk_masses' at that threshold when e[i] = exp(x[i] - max) (exp_mass's weights),
// computed without an exponential.
template <class Arch>
mass_t passing_chunk_masses(const float* x, const float* e, std::size_t n, float w, std::uint64_t* masses, float& least,
                            float& most_below) noexcept
{
    mass_t total = 0;
    least = std::numeric_limits<float>::infinity();
    most_below = minus_infinity;
    for (std::size_t c = 0; c * chunk_size < n; ++c) {
        const std::size_t begin = c * chunk_size;
        const std::size_t end = std::min(n, begin + chunk_size);
        std::uint64_t chunk = 0;
        std::size_t i = begin;
        if constexpr (!is_scalar<Arch>) {
            using V = simd_float<Arch>;
            using I = simd_int<Arch>;
            constexpr std::size_t step = V::size;
            const V bound(w);
            V low(least);
            V high(most_below);
            std::uint64_t high_total = 0;
            std::uint64_t low_total = 0;
            while (i + step <= end) {
                I high_lanes(0);
                I low_lanes(0);
                for (std::size_t a = 0; a < limb_adds_per_flush && i + step <= end; ++a, i += step) {
                    const V v = V::load_unaligned(x + i);
                    const V weight = V::load_unaligned(e + i);
                    const auto in = weight >= bound;
                    low = xsimd::select(in && v < low, v, low);     // NaN is never below
                    high = xsimd::select(!in && v > high, v, high); // nor above
                    I high_limb;
                    I low_limb;
                    limbs(xsimd::select(in, weight, V(0.0f)), high_limb, low_limb);
                    high_lanes += high_limb;
                    low_lanes += low_limb;
                }
                flush(high_lanes, high_total);
                flush(low_lanes, low_total);
            }
            chunk = (high_total << 24) + low_total; // below 2^10 * 2^48
            alignas(64) float stored[step];
            low.store_aligned(stored);
            for (const float l : stored) {
                least = l < least ? l : least;
            }
            high.store_aligned(stored);
            for (const float h : stored) {
                most_below = h > most_below ? h : most_below;
            }
        }
        for (; i < end; ++i) {
            if (e[i] >= w) {
                chunk += mass_of(e[i]);
                least = x[i] < least ? x[i] : least;
            } else {
                most_below = x[i] > most_below ? x[i] : most_below;
            }
        }
        masses[c] = chunk;
        total += chunk;
    }
    return total;
}

} // namespace qk::sampling::detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
