// The SIMD passes over a whole vocabulary of logits that keep the common sampling path free of
// sorting: the largest logit, exp sums in a fixed order, softmax, the categorical draw, top-k
// selection and threshold filtering. Each gives the same bits on every architecture tag (the sums
// have one order, fixed below, that every vector width reproduces); generic is the reference.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "../kernels/arch.hpp"
#include "../kernels/error.hpp"
#include "deterministic_math.hpp"
#include "token_data.hpp"

namespace qk::sampling::detail {

// Sums run over chunks of this many logits, and within a chunk over 16 lanes: element j of a chunk
// goes to lane j % 16, and the lanes are added as a tree (lane i += lane i + 8, then + 4, + 2,
// + 1). Chunk sums are then added in order, in double. Every vector width (4, 8 or 16 floats)
// and the scalar reference follow exactly this order.
inline constexpr std::size_t chunk_size = 1024;
inline constexpr std::size_t sum_lanes = 16;

[[nodiscard]] inline std::size_t chunk_count(std::size_t n) noexcept
{
    return (n + chunk_size - 1) / chunk_size;
}

template <class Arch>
inline constexpr bool is_scalar = std::is_same_v<Arch, arch::generic>;

template <class Arch>
using simd_of = arch::xsimd_of<Arch>;

inline constexpr float minus_infinity = -std::numeric_limits<float>::infinity();

[[nodiscard]] inline float tree_sum(std::array<float, sum_lanes>& s) noexcept
{
    for (std::size_t half = sum_lanes / 2; half > 0; half /= 2) {
        for (std::size_t i = 0; i < half; ++i) {
            s[i] = s[i] + s[i + half];
        }
    }
    return s[0];
}

// Running maxima (and minima, and counts) per lane are kept in this many vectors: each
// comparison and blend waits on the previous one into the same vector, so a single chain would
// run at its latency instead of the loads' pace.
inline constexpr std::size_t extremum_chains = 4;

// Feeds the whole vectors of x[0 .. n) to take(v, c), c the running state (of extremum_chains)
// the vector goes to: they take turns four vectors at a time, and the few vectors after the last
// four go to state 0. Returns how many elements it took; the caller takes the rest one by one.
// Always inlined, so that the states stay in registers: called, it kept finite_range's flag of
// bad logits in memory, whose store and reload each vector waited on (about 6 us of top_k(4096)'s
// 60 us at 32k logits, g++ 12 for x86-64-v3).
template <class V, class Take>
[[nodiscard, gnu::always_inline]] inline std::size_t take_in_chains(const float* x, std::size_t n, Take&& take) noexcept
{
    constexpr std::size_t w = V::size;
    std::size_t i = 0;
    for (; i + extremum_chains * w <= n; i += extremum_chains * w) {
        for (std::size_t c = 0; c < extremum_chains; ++c) {
            take(V::load_unaligned(x + i + c * w), c);
        }
    }
    for (; i + w <= n; i += w) {
        take(V::load_unaligned(x + i), std::size_t{0});
    }
    return i;
}

// The largest logit, NaN counted as -inf; -inf when there is none larger. A largest logit of zero
// is +0 whichever zero came first, so every order of comparisons (every vector width) agrees.
template <class Arch>
[[nodiscard]] float max_logit(const float* x, std::size_t n) noexcept
{
    float best = minus_infinity;
    std::size_t i = 0;
    if constexpr (!is_scalar<Arch>) {
        using V = xsimd::batch<float, simd_of<Arch>>;
        constexpr std::size_t w = V::size;
        std::array<V, extremum_chains> high;
        high.fill(V(minus_infinity));
        // A comparison is false for NaN, so NaN never replaces the running maximum.
        i = take_in_chains<V>(x, n, [&high](const V& v, std::size_t c) { high[c] = xsimd::select(v > high[c], v, high[c]); });
        for (std::size_t c = 1; c < extremum_chains; ++c) {
            high[0] = xsimd::select(high[c] > high[0], high[c], high[0]);
        }
        alignas(64) float lanes[w];
        high[0].store_aligned(lanes);
        for (std::size_t l = 0; l < w; ++l) {
            best = lanes[l] > best ? lanes[l] : best;
        }
    }
    for (; i < n; ++i) {
        best = x[i] > best ? x[i] : best;
    }
    return best + 0.0f; // -0 + 0 is +0; every other value is unchanged
}

// max_logit, and the smallest logit above -inf (NaN ignored; +inf when there is none; a zero as
// +0), in the same pass.
template <class Arch>
[[nodiscard]] float max_logit(const float* x, std::size_t n, float& lowest) noexcept
{
    float best = minus_infinity;
    float least = std::numeric_limits<float>::infinity();
    std::size_t i = 0;
    if constexpr (!is_scalar<Arch>) {
        using V = xsimd::batch<float, simd_of<Arch>>;
        constexpr std::size_t w = V::size;
        std::array<V, extremum_chains> high;
        std::array<V, extremum_chains> low;
        high.fill(V(minus_infinity));
        low.fill(V(least));
        // Comparisons are false for NaN, so NaN replaces neither.
        i = take_in_chains<V>(x, n, [&high, &low](const V& v, std::size_t c) {
            high[c] = xsimd::select(v > high[c], v, high[c]);
            low[c] = xsimd::select(v < low[c] && v > V(minus_infinity), v, low[c]);
        });
        for (std::size_t c = 1; c < extremum_chains; ++c) {
            high[0] = xsimd::select(high[c] > high[0], high[c], high[0]);
            low[0] = xsimd::select(low[c] < low[0], low[c], low[0]);
        }
        alignas(64) float high_lanes[w];
        alignas(64) float low_lanes[w];
        high[0].store_aligned(high_lanes);
        low[0].store_aligned(low_lanes);
        for (std::size_t l = 0; l < w; ++l) {
            best = high_lanes[l] > best ? high_lanes[l] : best;
            least = low_lanes[l] < least ? low_lanes[l] : least;
        }
    }
    for (; i < n; ++i) {
        best = x[i] > best ? x[i] : best;
        least = x[i] < least && x[i] > minus_infinity ? x[i] : least;
    }
    lowest = least + 0.0f;
    return best + 0.0f;
}

// (g++ 12's false -Wmaybe-uninitialized on inlined AVX-512 intrinsics: GCC bug 105593.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// The smallest and largest logit; false when a logit is NaN or infinite (then counting by rank,
// which needs every token within a finite range, does not apply: with a +inf logit it kept every
// token in top_k's count, a fuzzing finding).
template <class Arch>
[[nodiscard]] bool finite_range(const float* x, std::size_t n, float& lowest, float& highest) noexcept
{
    float lo = std::numeric_limits<float>::infinity();
    float hi = minus_infinity;
    bool ok = true;
    std::size_t i = 0;
    if constexpr (!is_scalar<Arch>) {
        using V = xsimd::batch<float, simd_of<Arch>>;
        constexpr std::size_t w = V::size;
        std::array<V, extremum_chains> low;
        std::array<V, extremum_chains> high;
        low.fill(V(lo));
        high.fill(V(hi));
        auto bad = V(0.0f) != V(0.0f);
        // Which of two zeros min and max keep, and what they give for NaN, differ between
        // instruction sets: NaN fails the range anyway, and a zero end is made +0 below.
        i = take_in_chains<V>(x, n, [&bad, &low, &high](const V& v, std::size_t c) {
            bad = bad || !(v > V(minus_infinity)); // NaN fails the comparison too
            low[c] = xsimd::min(low[c], v);
            high[c] = xsimd::max(high[c], v);
        });
        for (std::size_t c = 1; c < extremum_chains; ++c) {
            low[0] = xsimd::min(low[0], low[c]);
            high[0] = xsimd::max(high[0], high[c]);
        }
        ok = !xsimd::any(bad);
        alignas(64) float l[w];
        alignas(64) float h[w];
        low[0].store_aligned(l);
        high[0].store_aligned(h);
        for (std::size_t j = 0; j < w; ++j) {
            lo = l[j] < lo ? l[j] : lo;
            hi = h[j] > hi ? h[j] : hi;
        }
    }
    for (; i < n; ++i) {
        ok = ok && x[i] > minus_infinity;
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    lowest = lo + 0.0f;
    highest = hi + 0.0f;
    return ok && hi < std::numeric_limits<float>::infinity(); // a +inf is the maximum: checked once
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// The first index holding `value` (a value max_logit returned), or n.
template <class Arch>
[[nodiscard]] std::size_t find_value(const float* x, std::size_t n, float value) noexcept
{
    std::size_t i = 0;
    if constexpr (!is_scalar<Arch>) {
        using V = xsimd::batch<float, simd_of<Arch>>;
        constexpr std::size_t w = V::size;
        const V target(value);
        for (; i + w <= n; i += w) {
            if (xsimd::any(V::load_unaligned(x + i) == target)) {
                break;
            }
        }
    }
    for (; i < n; ++i) {
        if (x[i] == value) {
            return i;
        }
    }
    return n;
}

// The index of the first logit above -inf (NaN does not count), or n: finds out in O(1) for real
// logits whether a vocabulary has any candidate at all.
template <class Arch>
[[nodiscard]] std::size_t find_finite(const float* x, std::size_t n) noexcept
{
    std::size_t i = 0;
    if constexpr (!is_scalar<Arch>) {
        using V = xsimd::batch<float, simd_of<Arch>>;
        constexpr std::size_t w = V::size;
        const V low(minus_infinity);
        for (; i + w <= n; i += w) {
            if (xsimd::any(V::load_unaligned(x + i) > low)) {
                break;
            }
        }
    }
    for (; i < n; ++i) {
        if (x[i] > minus_infinity) {
            return i;
        }
    }
    return n;
}

// Double lanes added as a tree: lane i += lane i + 8, then + 4, + 2, + 1.
[[nodiscard]] inline double lane_total(std::array<double, sum_lanes>& lanes) noexcept
{
    for (std::size_t half = sum_lanes / 2; half > 0; half /= 2) {
        for (std::size_t l = 0; l < half; ++l) {
            lanes[l] = lanes[l] + lanes[l + half];
        }
    }
    return lanes[0];
}

// A chunk's double lanes added as a tree, rounded to float once.
[[nodiscard]] inline float chunk_total(std::array<double, sum_lanes>& lanes) noexcept
{
    return static_cast<float>(lane_total(lanes));
}

// (g++ 12's false -Wmaybe-uninitialized on inlined AVX-512 intrinsics: GCC bug 105593.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// The weights exp_difference(x[i], max) for i < n (within 2 ulp of exp(x - max): the
// subtraction's rounding error corrected) into dst (x itself, other storage, or null: not kept),
// and their double lanes: element i added to lane i % 16, in order. The pass that softmax, the
// whole-vocabulary draw and compute_probabilities share.
template <class Arch>
[[nodiscard]] std::array<double, sum_lanes> weight_lanes(const float* x, std::size_t n, float max, float* dst) noexcept
{
    std::array<double, sum_lanes> lanes{};
    std::size_t i = 0;
#if defined(__AVX512F__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, simd_of<Arch>>) {
        // The 16 lanes in two registers, each half of a vector widened to double at once: the
        // same additions in the same order as the loop below, in fewer instructions.
        using V = xsimd::batch<float, simd_of<Arch>>;
        const V m(max);
        __m512d low = _mm512_setzero_pd();
        __m512d high = _mm512_setzero_pd();
        for (; i + sum_lanes <= n; i += sum_lanes) {
            const __m512 e = exp_difference(V::load_unaligned(x + i), m);
            if (dst != nullptr) {
                _mm512_storeu_ps(dst + i, e);
            }
            low = _mm512_add_pd(low, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
            high = _mm512_add_pd(high, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
        }
        _mm512_storeu_pd(lanes.data(), low);
        _mm512_storeu_pd(lanes.data() + 8, high);
    }
#endif
#if defined(__AVX__)
    if constexpr (std::is_base_of_v<xsimd::avx, simd_of<Arch>> && !std::is_base_of_v<xsimd::avx512f, simd_of<Arch>>) {
        // Likewise in four registers of four lanes each (g++ 12 widened the second vector of each
        // 16 element by element).
        using V = xsimd::batch<float, simd_of<Arch>>;
        const V m(max);
        __m256d sums[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
        for (; i + sum_lanes <= n; i += sum_lanes) {
            for (std::size_t g = 0; g < 2; ++g) {
                const __m256 e = exp_difference(V::load_unaligned(x + i + 8 * g), m);
                if (dst != nullptr) {
                    _mm256_storeu_ps(dst + i + 8 * g, e);
                }
                sums[2 * g] = _mm256_add_pd(sums[2 * g], _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
                sums[2 * g + 1] = _mm256_add_pd(sums[2 * g + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
            }
        }
        for (std::size_t q = 0; q < 4; ++q) {
            _mm256_storeu_pd(lanes.data() + 4 * q, sums[q]);
        }
    }
#endif
    if constexpr (!is_scalar<Arch>) {
        using V = xsimd::batch<float, simd_of<Arch>>;
        constexpr std::size_t w = V::size;
        static_assert(sum_lanes % w == 0, "a vector must fill whole lane groups");
        const V m(max);
        // Without dst, every group goes through the same 16 floats.
        alignas(64) std::array<float, sum_lanes> group{};
        float* const base = dst != nullptr ? dst : group.data();
        const std::size_t advance = dst != nullptr ? 1 : 0;
        for (; i + sum_lanes <= n; i += sum_lanes) {
            float* const e = base + i * advance;
            for (std::size_t g = 0; g < sum_lanes; g += w) {
                exp_difference(V::load_unaligned(x + i + g), m).store_unaligned(e + g);
            }
            for (std::size_t l = 0; l < sum_lanes; ++l) {
                lanes[l] += static_cast<double>(e[l]);
            }
        }
    }
    // The tail (and the scalar reference) element by element.
    for (; i < n; ++i) {
        const float v = exp_difference(x[i], max);
        if (dst != nullptr) {
            dst[i] = v;
        }
        lanes[i % sum_lanes] += static_cast<double>(v);
    }
    return lanes;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// The weights of one chunk (at most chunk_size elements), optionally stored, and the chunk's sum
// in double lanes, rounded to float once: within 2^-24 relative of the weights' exact sum (64
// additions per lane in double cost at most 2^-47).
template <class Arch>
float chunk_exp_sum(const float* x, std::size_t n, float max, float* out) noexcept
{
    std::array<double, sum_lanes> lanes = weight_lanes<Arch>(x, n, max, out);
    return chunk_total(lanes);
}

// The chunk sums of weights already computed (e as chunk_exp_sum stores them), in its order and
// rounding, into `sums` (chunk_count(n) of them), and their total in double: what the host of a
// device without double arithmetic (Metal) adds from the weights its kernels wrote.
[[nodiscard]] inline double weight_sums(const float* e, std::size_t n, float* sums) noexcept
{
    double total = 0;
    for (std::size_t c = 0; c * chunk_size < n; ++c) {
        const std::size_t begin = c * chunk_size;
        const std::size_t count = std::min(chunk_size, n - begin);
        std::array<double, sum_lanes> lanes{};
        for (std::size_t i = 0; i < count; ++i) {
            lanes[i % sum_lanes] += static_cast<double>(e[begin + i]);
        }
        sums[c] = chunk_total(lanes);
        total += sums[c];
    }
    return total;
}

// The sums of the weights exp_difference(x, max) per chunk (chunk_count(n) of them, into `sums`)
// and their total, in double.
template <class Arch>
double exp_sums(const float* x, std::size_t n, float max, float* sums, float* out = nullptr) noexcept
{
    double total = 0;
    for (std::size_t c = 0; c * chunk_size < n; ++c) {
        const std::size_t begin = c * chunk_size;
        const std::size_t count = std::min(chunk_size, n - begin);
        sums[c] = chunk_exp_sum<Arch>(x + begin, count, max, out == nullptr ? nullptr : out + begin);
        total += sums[c];
    }
    return total;
}

// The probabilities' sum: exp_difference(x[i], max) in place of each x[i], and their total in
// double over 16 lanes (element i into lane i % 16, in order, the lanes added as a tree: lane
// i += lane i + 8, + 4, + 2, + 1). Double lanes keep the sum within 2^-49 of exact for any
// n < 2^31, so the probabilities' error is the exponentials' alone; lanes keep it a vector pass.
template <class Arch>
double exp_difference_total(float* x, std::size_t n, float max) noexcept
{
    std::array<double, sum_lanes> lanes = weight_lanes<Arch>(x, n, max, x);
    return lane_total(lanes);
}

// The largest logit of a list (which never holds NaN); -inf for an empty one.
[[nodiscard]] inline float list_max(const std::vector<token_data>& l) noexcept
{
    float max = minus_infinity;
    for (const auto& t : l) {
        max = t.logit > max ? t.logit : max;
    }
    return max;
}

// candidates::compute_probabilities over a list with at least one logit above -inf and none +inf
// (the caller checks): every p the softmax of the logits in list order, as documented there.
// `scratch` holds the exponentials (its capacity is kept). Also the Metal host's finish of a list
// draw, so that its probabilities are the CPU's by construction.
inline void softmax_list(std::vector<token_data>& l, std::vector<float>& scratch)
{
    const std::size_t n = l.size();
    scratch.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
        scratch[i] = l[i].logit;
    }
    const float max = max_logit<arch::vector_native>(scratch.data(), n);
    const double total = exp_difference_total<arch::vector_native>(scratch.data(), n, max);
    const auto factor = static_cast<float>(1.0 / total);
    for (std::size_t i = 0; i < n; ++i) {
        l[i].p = scratch[i] * factor;
    }
}

// The sum of the logits above -inf (NaN does not count), or with `Squares` of (x - mean)^2 over
// them (each square rounded before it is added), in the fixed order of the exp sums: element j
// of a chunk into lane j % 16, the lanes added as a tree, the chunk sums added in double.
template <class Arch, bool Squares>
[[nodiscard]] double finite_sum(const float* x, std::size_t n, float mean) noexcept
{
    double total = 0;
    for (std::size_t begin = 0; begin < n; begin += chunk_size) {
        const std::size_t count = std::min(chunk_size, n - begin);
        const float* c = x + begin;
        std::array<float, sum_lanes> lanes{};
        std::size_t i = 0;
        if constexpr (!is_scalar<Arch>) {
            using V = xsimd::batch<float, simd_of<Arch>>;
            constexpr std::size_t w = V::size;
            constexpr std::size_t groups = sum_lanes / w;
            V acc[groups];
            for (auto& a : acc) {
                a = V(0.0f);
            }
            const V m(mean);
            for (; i + sum_lanes <= count; i += sum_lanes) {
                for (std::size_t g = 0; g < groups; ++g) {
                    const V v = V::load_unaligned(c + i + g * w);
                    const V term = Squares ? opaque((v - m) * (v - m)) : v;
                    acc[g] = acc[g] + xsimd::select(v > V(minus_infinity), term, V(0.0f));
                }
            }
            for (std::size_t g = 0; g < groups; ++g) {
                acc[g].store_unaligned(lanes.data() + g * w);
            }
        } else {
            for (; i + sum_lanes <= count; i += sum_lanes) {
                for (std::size_t l = 0; l < sum_lanes; ++l) {
                    const float v = c[i + l];
                    const float term = Squares ? opaque((v - mean) * (v - mean)) : v;
                    lanes[l] = lanes[l] + (v > minus_infinity ? term : 0.0f);
                }
            }
        }
        for (std::size_t l = 0; i + l < count; ++l) {
            const float v = c[i + l];
            const float term = Squares ? opaque((v - mean) * (v - mean)) : v;
            lanes[l] = lanes[l] + (v > minus_infinity ? term : 0.0f);
        }
        total += tree_sum(lanes);
    }
    return total;
}

// out[i] = x[i] where x[i] >= threshold, else -inf (NaN too); out may be x.
template <class Arch>
void floor_to_minus_infinity(const float* x, float* out, std::size_t n, float threshold) noexcept
{
    std::size_t i = 0;
    if constexpr (!is_scalar<Arch>) {
        using V = xsimd::batch<float, simd_of<Arch>>;
        constexpr std::size_t w = V::size;
        const V t(threshold);
        const V none(minus_infinity);
        for (; i + w <= n; i += w) {
            const V v = V::load_unaligned(x + i);
            xsimd::select(v >= t, v, none).store_unaligned(out + i);
        }
    }
    for (; i < n; ++i) {
        out[i] = x[i] >= threshold ? x[i] : minus_infinity;
    }
}

// In one pass over x[0 .. n), what top_n_sigma reads before the variance: returns max_logit's
// maximum; `count` is the number of logits above -inf (NaN does not count) and `sum` their sum,
// finite_sum's (the same lanes in the same order); `all_finite` whether every logit is finite,
// and then `lowest` the smallest (a zero as +0).
template <class Arch>
[[nodiscard]] float finite_statistics(const float* x, std::size_t n, std::size_t& count, double& sum, float& lowest, bool& all_finite) noexcept
{
    double total = 0;
    std::size_t above = 0;
    float best = minus_infinity;
    float least = std::numeric_limits<float>::infinity();
    bool finite = true;
    const auto one = [&](float v, float& lane) {
        const bool counts = v > minus_infinity; // false for NaN
        lane = lane + (counts ? v : 0.0f);
        above += counts ? 1 : 0;
        best = v > best ? v : best;
        least = v < least ? v : least;
        finite = finite && counts && v < std::numeric_limits<float>::infinity();
    };
    for (std::size_t begin = 0; begin < n; begin += chunk_size) {
        const std::size_t size = std::min(chunk_size, n - begin);
        const float* c = x + begin;
        std::array<float, sum_lanes> lanes{};
        std::size_t i = 0;
        if constexpr (!is_scalar<Arch>) {
            using V = xsimd::batch<float, simd_of<Arch>>;
            using I = xsimd::batch<std::int32_t, simd_of<Arch>>;
            constexpr std::size_t w = V::size;
            constexpr std::size_t groups = sum_lanes / w;
            const V none(minus_infinity);
            const V all(std::numeric_limits<float>::infinity());
            V acc[groups];
            V high[groups];
            V low[groups];
            I counted[groups];
            for (std::size_t g = 0; g < groups; ++g) {
                acc[g] = V(0.0f);
                high[g] = none;
                low[g] = all;
                counted[g] = I(0);
            }
            auto bad = V(0.0f) != V(0.0f);
            for (; i + sum_lanes <= size; i += sum_lanes) {
                for (std::size_t g = 0; g < groups; ++g) {
                    const V v = V::load_unaligned(c + i + g * w);
                    const auto counts = v > none; // false for NaN
                    acc[g] = acc[g] + xsimd::select(counts, v, V(0.0f));
                    counted[g] += xsimd::bitwise_cast<I>(xsimd::select(counts, xsimd::bitwise_cast<V>(I(1)), V(0.0f)));
                    high[g] = xsimd::select(v > high[g], v, high[g]); // NaN never replaces it
                    low[g] = xsimd::select(v < low[g], v, low[g]);
                    bad = bad || !counts || !(v < all);
                }
            }
            alignas(64) float high_lanes[w];
            alignas(64) float low_lanes[w];
            alignas(64) std::int32_t count_lanes[w];
            for (std::size_t g = 0; g < groups; ++g) {
                acc[g].store_unaligned(lanes.data() + g * w);
                high[g].store_aligned(high_lanes);
                low[g].store_aligned(low_lanes);
                counted[g].store_aligned(count_lanes);
                for (std::size_t l = 0; l < w; ++l) {
                    best = high_lanes[l] > best ? high_lanes[l] : best;
                    least = low_lanes[l] < least ? low_lanes[l] : least;
                    above += static_cast<std::size_t>(count_lanes[l]);
                }
            }
            finite = finite && !xsimd::any(bad);
        } else {
            for (; i + sum_lanes <= size; i += sum_lanes) {
                for (std::size_t l = 0; l < sum_lanes; ++l) {
                    one(c[i + l], lanes[l]);
                }
            }
        }
        for (std::size_t l = 0; i + l < size; ++l) {
            one(c[i + l], lanes[l]);
        }
        total += tree_sum(lanes);
    }
    count = above;
    sum = total;
    lowest = least + 0.0f;
    all_finite = finite;
    return best + 0.0f; // -0 + 0 is +0; every other value is unchanged
}

// (g++ 12's false -Wmaybe-uninitialized on inlined AVX-512 intrinsics: GCC bug 105593.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// The lanes of typical_moments, carried from one run of elements to the next (every run but the
// last a multiple of 16 long, so that element i of the whole still goes to lane i % 16).
struct moment_lanes {
    std::array<double, sum_lanes> z{};
    std::array<double, sum_lanes> s{};
};

#if defined(__AVX512F__)
// The 16 lanes of moment_lanes as two vectors of 8 doubles each for z and for s, in registers
// while a loop adds to them (add_typical_moments, and the weights' pass that adds them a few
// vectors behind its exp).
struct moment_registers {
    __m512d z_low;
    __m512d z_high;
    __m512d s_low;
    __m512d s_high;

    explicit moment_registers(const moment_lanes& lanes) noexcept
        : z_low(_mm512_loadu_pd(lanes.z.data())), z_high(_mm512_loadu_pd(lanes.z.data() + 8)), s_low(_mm512_loadu_pd(lanes.s.data())),
          s_high(_mm512_loadu_pd(lanes.s.data() + 8))
    {
    }

    // Elements 0 to 15 of x and e (weights of x - max) into lanes 0 to 15, each lane still a sum
    // in element order.
    void add(const float* x, const float* e, __m512 max) noexcept
    {
        const __m512 ev = _mm512_loadu_ps(e);
        const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x), max);
        const __mmask16 weighs = _mm512_cmp_ps_mask(ev, _mm512_setzero_ps(), _CMP_GT_OQ);
        const __m512 product = _mm512_maskz_mul_ps(weighs, ev, d); // rounded to float, as opaque() keeps it
        z_low = _mm512_add_pd(z_low, _mm512_cvtps_pd(_mm512_castps512_ps256(ev)));
        z_high = _mm512_add_pd(z_high, _mm512_cvtps_pd(_mm512_extractf32x8_ps(ev, 1)));
        s_low = _mm512_add_pd(s_low, _mm512_cvtps_pd(_mm512_castps512_ps256(product)));
        s_high = _mm512_add_pd(s_high, _mm512_cvtps_pd(_mm512_extractf32x8_ps(product, 1)));
    }

    void store(moment_lanes& lanes) const noexcept
    {
        _mm512_storeu_pd(lanes.z.data(), z_low);
        _mm512_storeu_pd(lanes.z.data() + 8, z_high);
        _mm512_storeu_pd(lanes.s.data(), s_low);
        _mm512_storeu_pd(lanes.s.data() + 8, s_high);
    }
};
#endif

#if defined(__AVX2__)
// moment_lanes in eight vectors of 4 doubles, for AVX2: lanes 0 to 3, 4 to 7, 8 to 11 and 12 to
// 15 of z, then of s. Through the lanes of xsimd's loop below, each of 16 elements was stored and
// added to its lane one at a time: typical's weights' pass on this tag spent a tenth of its time
// there.
struct avx2_moment_registers {
    __m256d z[4];
    __m256d s[4];

    explicit avx2_moment_registers(const moment_lanes& lanes) noexcept
    {
        for (std::size_t q = 0; q < 4; ++q) {
            z[q] = _mm256_loadu_pd(lanes.z.data() + 4 * q);
            s[q] = _mm256_loadu_pd(lanes.s.data() + 4 * q);
        }
    }

    // Elements 0 to 15 of x and e (weights of x - max) into lanes 0 to 15, as moment_registers.
    void add(const float* x, const float* e, __m256 max) noexcept
    {
        for (std::size_t half = 0; half < 2; ++half) {
            const __m256 ev = _mm256_loadu_ps(e + 8 * half);
            const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + 8 * half), max);
            const __m256 weighs = _mm256_cmp_ps(ev, _mm256_setzero_ps(), _CMP_GT_OQ);
            const __m256 product = _mm256_and_ps(weighs, _mm256_mul_ps(ev, d)); // +0 where e is 0
            z[2 * half] = _mm256_add_pd(z[2 * half], _mm256_cvtps_pd(_mm256_castps256_ps128(ev)));
            z[2 * half + 1] = _mm256_add_pd(z[2 * half + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(ev, 1)));
            s[2 * half] = _mm256_add_pd(s[2 * half], _mm256_cvtps_pd(_mm256_castps256_ps128(product)));
            s[2 * half + 1] = _mm256_add_pd(s[2 * half + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(product, 1)));
        }
    }

    void store(moment_lanes& lanes) const noexcept
    {
        for (std::size_t q = 0; q < 4; ++q) {
            _mm256_storeu_pd(lanes.z.data() + 4 * q, z[q]);
            _mm256_storeu_pd(lanes.s.data() + 4 * q, s[q]);
        }
    }
};
#endif

template <class Arch>
void add_typical_moments(const float* x, const float* e, std::size_t n, float max, moment_lanes& lanes) noexcept
{
    std::array<double, sum_lanes>& lz = lanes.z;
    std::array<double, sum_lanes>& ls = lanes.s;
    std::size_t i = 0;
#if defined(__AVX512F__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, simd_of<Arch>>) {
        const __m512 m = _mm512_set1_ps(max);
        moment_registers sums(lanes);
        for (; i + sum_lanes <= n; i += sum_lanes) {
            sums.add(x + i, e + i, m);
        }
        sums.store(lanes);
    }
#endif
#if defined(__AVX2__)
    if constexpr (std::is_base_of_v<xsimd::avx2, simd_of<Arch>>) {
        const __m256 m = _mm256_set1_ps(max);
        avx2_moment_registers sums(lanes);
        for (; i + sum_lanes <= n; i += sum_lanes) {
            sums.add(x + i, e + i, m);
        }
        sums.store(lanes);
    }
#endif
    if constexpr (!is_scalar<Arch>) {
        using V = xsimd::batch<float, simd_of<Arch>>;
        constexpr std::size_t w = V::size;
        const V m(max);
        alignas(64) std::array<float, sum_lanes> weight;
        alignas(64) std::array<float, sum_lanes> product;
        for (; i + sum_lanes <= n; i += sum_lanes) {
            for (std::size_t g = 0; g < sum_lanes; g += w) {
                const V ev = V::load_unaligned(e + i + g);
                const V d = V::load_unaligned(x + i + g) - m;
                ev.store_aligned(weight.data() + g);
                xsimd::select(ev > V(0.0f), opaque(ev * d), V(0.0f)).store_aligned(product.data() + g);
            }
            for (std::size_t l = 0; l < sum_lanes; ++l) {
                lz[l] += static_cast<double>(weight[l]);
                ls[l] += static_cast<double>(product[l]);
            }
        }
    }
    for (; i < n; ++i) {
        lz[i % sum_lanes] += static_cast<double>(e[i]);
        ls[i % sum_lanes] += static_cast<double>(e[i] > 0.0f ? opaque(e[i] * (x[i] - max)) : 0.0f);
    }
}

// z and s from the lanes, added as a tree.
inline void finish_typical_moments(moment_lanes& lanes, double& z, double& s) noexcept
{
    for (std::size_t half = sum_lanes / 2; half > 0; half /= 2) {
        for (std::size_t l = 0; l < half; ++l) {
            lanes.z[l] = lanes.z[l] + lanes.z[l + half];
            lanes.s[l] = lanes.s[l] + lanes.s[l + half];
        }
    }
    z = lanes.z[0];
    s = lanes.s[0];
}

// typical's moments over weights e[i] = exp(x[i] - max): z = sum of e, s = sum of e (x - max)
// (each product rounded to float; tokens of weight 0 add nothing), both in double over 16 lanes
// (element i into lane i % 16, in order, the lanes added as a tree), so every tag and the list
// path agree. The softmax's entropy is log z - s / z.
template <class Arch>
void typical_moments(const float* x, const float* e, std::size_t n, float max, double& z, double& s) noexcept
{
    moment_lanes lanes;
    add_typical_moments<Arch>(x, e, n, max, lanes);
    finish_typical_moments(lanes, z, s);
}

// typical's rank key of logit v: -|center - v| (higher ranks first), -inf for NaN and -inf.
[[nodiscard]] inline float distance_key(float center, float v) noexcept { return v == v ? -std::fabs(center - v) : minus_infinity; }

// The rank keys of x[0 .. n) (distance_key); the largest key, and the smallest key of a token with
// weight e[i] > 0 (+inf when none has).
template <class Arch>
void distance_keys(const float* x, const float* e, std::size_t n, float center, float* keys, float& lowest, float& highest) noexcept
{
    constexpr float plus_infinity = std::numeric_limits<float>::infinity();
    float lo = plus_infinity;
    float hi = minus_infinity;
    std::size_t i = 0;
    if constexpr (!is_scalar<Arch>) {
        using V = xsimd::batch<float, simd_of<Arch>>;
        constexpr std::size_t w = V::size;
        const V c(center);
        V vlo(plus_infinity);
        V vhi(minus_infinity);
        for (; i + w <= n; i += w) {
            const V v = V::load_unaligned(x + i);
            const V key = xsimd::select(v == v, -xsimd::abs(c - v), V(minus_infinity));
            key.store_unaligned(keys + i);
            vlo = xsimd::min(vlo, xsimd::select(V::load_unaligned(e + i) > V(0.0f), key, V(plus_infinity)));
            vhi = xsimd::max(vhi, key);
        }
        alignas(64) float low_lanes[w];
        alignas(64) float high_lanes[w];
        vlo.store_aligned(low_lanes);
        vhi.store_aligned(high_lanes);
        for (std::size_t l = 0; l < w; ++l) {
            lo = low_lanes[l] < lo ? low_lanes[l] : lo;
            hi = high_lanes[l] > hi ? high_lanes[l] : hi;
        }
    }
    for (; i < n; ++i) {
        const float key = distance_key(center, x[i]);
        keys[i] = key;
        lo = e[i] > 0.0f && key < lo ? key : lo;
        hi = key > hi ? key : hi;
    }
    lowest = lo;
    highest = hi;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// The categorical draw over a whole vocabulary from the chunk sums: the first index whose running
// sum (in double, chunk sums first, then the elements of the chunk reached) exceeds u * total.
// Where rounding leaves the chosen chunk's elements short of the threshold, its last element with
// a nonzero weight is taken. Returns n if no element has weight.
template <class Arch>
[[nodiscard]] std::size_t draw(const float* x, std::size_t n, float max, const float* sums, double total, double u) noexcept
{
    const double threshold = u * total;
    double running = 0;
    const std::size_t chunks = chunk_count(n);
    for (std::size_t c = 0; c < chunks; ++c) {
        if (running + sums[c] > threshold || c + 1 == chunks) {
            const std::size_t begin = c * chunk_size;
            const std::size_t count = std::min(chunk_size, n - begin);
            alignas(64) float e[chunk_size];
            (void)chunk_exp_sum<Arch>(x + begin, count, max, e);
            std::size_t last_nonzero = n;
            for (std::size_t j = 0; j < count; ++j) {
                if (e[j] > 0.0f) {
                    last_nonzero = begin + j;
                    running += e[j];
                    if (running > threshold) {
                        return begin + j;
                    }
                }
            }
            if (last_nonzero != n) {
                return last_nonzero;
            }
        } else {
            running += sums[c];
        }
    }
    return n;
}

// p = e * (1 / sum) in place over n values (the product is exact IEEE on every tag).
template <class Arch>
void scale(float* p, std::size_t n, float factor) noexcept
{
    std::size_t i = 0;
    if constexpr (!is_scalar<Arch>) {
        using V = xsimd::batch<float, simd_of<Arch>>;
        constexpr std::size_t w = V::size;
        const V f(factor);
        for (; i + w <= n; i += w) {
            (V::load_unaligned(p + i) * f).store_unaligned(p + i);
        }
    }
    for (; i < n; ++i) {
        p[i] = p[i] * factor;
    }
}

// Orders candidates as a sorted candidate set lists them: higher logit first, then lower id. A
// function object, not a function, so that std::sort inlines it rather than calling through a
// pointer (three times faster sorting 4096 candidates).
inline constexpr auto ranks_before = [](const token_data& a, const token_data& b) noexcept {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
};

// Sorts a list (in id order, as filter_at_least gives it) by ranks_before, through 64-bit keys:
// the logit's bits made to order high first above the id. Probabilities are not kept (they are
// 0 in such a list). Above 256 candidates, a bucket sort: the logit halves of the keys, offset
// from their smallest, spread over about one bucket per candidate by their leading bits, then
// each bucket is put in order by whole keys (insertion sort when small; std::sort when it holds
// many, which a cluster of close logits can make, unless a run of equal logits left it in id
// order already): a counting pass, a scatter and a short fix-up instead of a radix sort's
// passes, whose counters a run of equal digits serializes. The key buffer holds both halves.
inline void sort_by_rank(std::vector<token_data>& l, std::vector<std::uint64_t>& keys)
{
    const std::size_t n = l.size();
    keys.resize(2 * n);
    std::uint64_t* from = keys.data();
    std::uint64_t* to = keys.data() + n;
    std::uint32_t low = std::numeric_limits<std::uint32_t>::max();
    std::uint32_t high = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const auto bits = std::bit_cast<std::uint32_t>(l[i].logit);
        if (bits == 0x80000000u) {
            // -0 would come back as +0, whose bits differ: the comparison sort keeps them.
            std::sort(l.begin(), l.end(), ranks_before);
            return;
        }
        const std::uint32_t ascending = (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
        const std::uint32_t rank = ~ascending;
        low = std::min(low, rank);
        high = std::max(high, rank);
        from[i] = (std::uint64_t{rank} << 32) | static_cast<std::uint32_t>(l[i].id);
    }
    if (n <= 256) {
        std::sort(from, from + n);
        to = from;
    } else {
        const int bucket_bits = static_cast<int>(std::bit_width(n - 1));
        const int shift = std::max(0, static_cast<int>(std::bit_width(high - low)) - bucket_bits);
        const std::size_t buckets = static_cast<std::size_t>((high - low) >> shift) + 1;
        std::vector<std::uint32_t> start(buckets + 1, 0u);
        for (std::size_t i = 0; i < n; ++i) {
            ++start[((static_cast<std::uint32_t>(from[i] >> 32) - low) >> shift) + 1];
        }
        for (std::size_t b = 0; b < buckets; ++b) {
            start[b + 1] += start[b];
        }
        std::vector<std::uint32_t> next(start.begin(), start.end() - 1);
        for (std::size_t i = 0; i < n; ++i) {
            to[next[(static_cast<std::uint32_t>(from[i] >> 32) - low) >> shift]++] = from[i];
        }
        // Buckets of more than 32 are sorted by std::sort; then one insertion pass over the whole
        // array puts the small ones in order: every key of an earlier bucket is smaller, so no
        // key moves out of its bucket, and a pass over all keys branches far less often than a
        // loop over the buckets, whose sizes vary at random.
        for (std::size_t b = 0; b < buckets; ++b) {
            if (start[b + 1] - start[b] > 32) {
                std::uint64_t* first = to + start[b];
                std::uint64_t* last = to + start[b + 1];
                if (!std::is_sorted(first, last)) {
                    std::sort(first, last);
                }
            }
        }
        for (std::size_t i = 1; i < n; ++i) {
            const std::uint64_t key = to[i];
            if (to[i - 1] > key) {
                std::size_t j = i;
                for (; j > 0 && to[j - 1] > key; --j) {
                    to[j] = to[j - 1];
                }
                to[j] = key;
            }
        }
    }
    for (std::size_t i = 0; i < n; ++i) {
        const auto ascending = ~static_cast<std::uint32_t>(to[i] >> 32);
        const std::uint32_t bits = (ascending & 0x80000000u) != 0 ? ascending & 0x7fffffffu : ~ascending;
        l[i] = {static_cast<std::int32_t>(static_cast<std::uint32_t>(to[i])), std::bit_cast<float>(bits), 0.0f};
    }
}

// How many of x[0 .. n) are at least `threshold` (never NaN).
template <class Arch>
[[nodiscard]] std::size_t count_at_least(const float* x, std::size_t n, float threshold) noexcept
{
    std::size_t count = 0;
    std::size_t i = 0;
    if constexpr (!is_scalar<Arch>) {
        using V = xsimd::batch<float, simd_of<Arch>>;
        using I = xsimd::batch<std::int32_t, simd_of<Arch>>;
        constexpr std::size_t w = V::size;
        const V t(threshold);
        const V one = xsimd::bitwise_cast<V>(I(1));
        // Each lane counts at most n / w < 2^31 tokens; in extremum_chains vectors, so that the
        // additions do not wait on each other.
        std::array<I, extremum_chains> lanes;
        lanes.fill(I(0));
        i = take_in_chains<V>(x, n, [&](const V& v, std::size_t c) { lanes[c] += xsimd::bitwise_cast<I>(xsimd::select(v >= t, one, V(0.0f))); });
        for (std::size_t c = 1; c < extremum_chains; ++c) {
            lanes[0] += lanes[c];
        }
        alignas(64) std::array<std::int32_t, w> parts{};
        lanes[0].store_aligned(parts.data());
        for (const std::int32_t part : parts) {
            count += static_cast<std::size_t>(part);
        }
    }
    for (; i < n; ++i) {
        count += x[i] >= threshold ? 1 : 0;
    }
    return count;
}

// Appends every index with x[i] >= threshold (never NaN) to `out` in index order, `count` being
// how many there are (count_at_least's result, or a count of the same tokens the caller already
// has: the list is written up to it). The count lets the list grow once and each token be
// written without a branch (a token is stored at the end and kept by moving the end on when it
// passes): at a few thousand tokens out of tens of thousands nearly every vector holds one, and
// a branch per token would mispredict at every one of them. AVX-512 compresses 16 tokens at a
// time into three registers of token_data.
template <class Arch>
void filter_at_least(const float* x, std::size_t n, float threshold, std::size_t count, std::vector<token_data>& out)
{
    static_assert(sizeof(token_data) == 12 && offsetof(token_data, id) == 0 && offsetof(token_data, logit) == 4 && offsetof(token_data, p) == 8);
    const std::size_t start = out.size();
    // Room for the unconditional stores past the last token kept (a whole vector at most).
    constexpr std::size_t slack = 16;
    out.resize(start + count + slack);
    token_data* const o = out.data() + start;
    std::size_t k = 0;
    std::size_t i = 0;
#if defined(__AVX512F__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, simd_of<Arch>>) {
        // Dword d of the 48 that 16 token_data take: id, logit, then p (0) of token d / 3.
        alignas(64) static constexpr std::array<std::array<std::int32_t, 16>, 3> interleave = [] {
            std::array<std::array<std::int32_t, 16>, 3> index{};
            for (std::size_t d = 0; d < 48; ++d) {
                const auto token = static_cast<std::int32_t>(d / 3);
                index[d / 16][d % 16] = d % 3 == 0 ? token : token + 16; // ids from the first operand, logits from the second
            }
            return index;
        }();
        // The dwords that are not p (left 0).
        constexpr std::array<__mmask16, 3> no_p = [] {
            std::array<__mmask16, 3> mask{};
            for (std::size_t d = 0; d < 48; ++d) {
                mask[d / 16] = static_cast<__mmask16>(mask[d / 16] | (d % 3 != 2 ? 1u << (d % 16) : 0u));
            }
            return mask;
        }();
        const __m512 t = _mm512_set1_ps(threshold);
        const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const __m512i index0 = _mm512_load_si512(interleave[0].data());
        const __m512i index1 = _mm512_load_si512(interleave[1].data());
        const __m512i index2 = _mm512_load_si512(interleave[2].data());
        for (; i + 16 <= n; i += 16) {
            const __m512 v = _mm512_loadu_ps(x + i);
            const __mmask16 in = _mm512_cmp_ps_mask(v, t, _CMP_GE_OQ);
            if (in == 0) {
                continue;
            }
            const __m512i ids = _mm512_maskz_compress_epi32(in, _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<std::int32_t>(i))));
            const __m512i logits = _mm512_maskz_compress_epi32(in, _mm512_castps_si512(v));
            auto* to = reinterpret_cast<char*>(o + k);
            _mm512_storeu_si512(to, _mm512_maskz_permutex2var_epi32(no_p[0], ids, index0, logits));
            _mm512_storeu_si512(to + 64, _mm512_maskz_permutex2var_epi32(no_p[1], ids, index1, logits));
            _mm512_storeu_si512(to + 128, _mm512_maskz_permutex2var_epi32(no_p[2], ids, index2, logits));
            k += static_cast<std::size_t>(__builtin_popcount(in));
        }
    }
#endif
    const auto take = [&](std::size_t from, std::size_t to) {
        for (std::size_t j = from; j < to; ++j) {
            o[k] = {static_cast<std::int32_t>(j), x[j], 0.0f};
            k += x[j] >= threshold ? 1 : 0;
        }
    };
    if constexpr (!is_scalar<Arch>) {
        using V = xsimd::batch<float, simd_of<Arch>>;
        constexpr std::size_t w = V::size;
        const V t(threshold);
        for (; i + w <= n; i += w) {
            if (xsimd::any(V::load_unaligned(x + i) >= t)) {
                take(i, i + w);
            }
        }
    }
    take(i, n);
    out.resize(start + count);
}

template <class Arch>
void filter_at_least(const float* x, std::size_t n, float threshold, std::vector<token_data>& out)
{
    filter_at_least<Arch>(x, n, threshold, count_at_least<Arch>(x, n, threshold), out);
}

// top_k_scan's selection for a k in the tens or hundreds: with at most `skippable` indices for
// which skip is true, the (k + skippable)-th largest of the maxima of at least 2 (k + skippable)
// chunks of the tokens is a threshold that at least k tokens not skipped reach (of the chunks whose
// maximum is at least it, at most `skippable` have a skipped maximum), and on real logits not
// many more: one pass for the maxima, one to count and one to filter, then the few above it are
// sorted. The heap pays a branch and a heap update for every token that beats its running k-th
// best, some k ln(n / k) of them, each a branch that mispredicts: for k from 16 up (and n up to
// 1024 k, beyond which the three passes cost more) that is the dearer way (Zen 5, 32k logits:
// mirostat's steps 20 and 22 us with the heap below k = 48, 15 and 18 us with this from 16; the
// usual chain's top_k(40) 10.3 against 9.1 us; a scan for k = 5, 1.8 against 3.4 us). False,
// with `out` empty, outside that range, or when fewer than k tokens that are not skipped reach
// the threshold (a skip count understated) or it is -inf: top_k_scan's heap decides then.
inline constexpr std::size_t chunked_top_k_from = 16;
inline constexpr std::size_t chunked_top_k_share = 1024;

template <class Arch, class Skip>
[[nodiscard]] bool top_k_by_chunk_maxima(const float* x, std::size_t n, std::size_t k, std::vector<token_data>& out, Skip& skip,
                                         std::size_t skippable = 0)
{
    constexpr std::size_t granule = 16;
    out.clear();
    const std::size_t rank = k + skippable;
    if (k < chunked_top_k_from || n / chunked_top_k_share > k) {
        return false;
    }
    const std::size_t size = std::max(granule, n / (4 * rank) / granule * granule);
    const std::size_t chunks = n / size;
    if (chunks < 2 * rank) {
        return false;
    }
    out.resize(chunks); // the maxima in the logit fields, until the filter below
    for (std::size_t c = 0; c < chunks; ++c) {
        out[c].logit = max_logit<Arch>(x + c * size, size);
    }
    const auto higher = [](const token_data& a, const token_data& b) { return a.logit > b.logit; };
    std::nth_element(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(rank - 1), out.end(), higher);
    const float threshold = out[rank - 1].logit;
    out.clear();
    if (!(threshold > minus_infinity)) {
        return false;
    }
    filter_at_least<Arch>(x, n, threshold, out);
    std::erase_if(out, [&skip](const token_data& t) { return skip(static_cast<std::size_t>(t.id)); });
    if (out.size() < k) {
        out.clear();
        return false;
    }
    std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(k), out.end(), ranks_before);
    out.resize(k);
    return true;
}

// The k best (by ranks_before) of x[0 .. n), NaN counted as -inf, sorted best first into `out`.
// Indices for which skip(i) is true are left out (the caller adds their current values itself);
// `skippable` bounds how many there are (0 when skip is never true), for top_k_by_chunk_maxima.
// k in the tens or hundreds: top_k_by_chunk_maxima. Otherwise (or when that finds too few) a
// heap of k elements whose worst is compared against whole vectors at once: on real logits few
// elements beat the k-th best once the heap is full, so the pass mostly runs at the speed of
// loading the logits.
template <class Arch, class Skip>
void top_k_scan(const float* x, std::size_t n, std::size_t k, std::vector<token_data>& out, Skip&& skip, std::size_t skippable = 0)
{
    out.clear();
    if (k == 0 || top_k_by_chunk_maxima<Arch>(x, n, k, out, skip, skippable)) {
        return;
    }
    const auto worst_first = [](const token_data& a, const token_data& b) { return ranks_before(a, b); };
    std::size_t i = 0;
    for (; i < n && out.size() < k; ++i) {
        if (!skip(i)) {
            const float v = x[i] == x[i] ? x[i] : minus_infinity;
            out.push_back({static_cast<std::int32_t>(i), v, 0.0f});
            std::push_heap(out.begin(), out.end(), worst_first);
        }
    }
    if (out.size() < k) {
        std::sort_heap(out.begin(), out.end(), worst_first);
        return;
    }
    float threshold = out.front().logit;
    // Elements scanned from here on have larger ids than any in the heap, so they must be strictly
    // larger than the worst to replace it.
    const auto offer = [&](std::size_t j) {
        if (x[j] > threshold && !skip(j)) {
            std::pop_heap(out.begin(), out.end(), worst_first);
            out.back() = {static_cast<std::int32_t>(j), x[j], 0.0f};
            std::push_heap(out.begin(), out.end(), worst_first);
            threshold = out.front().logit;
        }
    };
    if constexpr (!is_scalar<Arch>) {
        using V = xsimd::batch<float, simd_of<Arch>>;
        constexpr std::size_t w = V::size;
        for (; i + 2 * w <= n; i += 2 * w) {
            const V t(threshold);
            if (xsimd::any((V::load_unaligned(x + i) > t) || (V::load_unaligned(x + i + w) > t))) {
                for (std::size_t j = i; j < i + 2 * w; ++j) {
                    offer(j);
                }
            }
        }
    }
    for (; i < n; ++i) {
        offer(i);
    }
    std::sort_heap(out.begin(), out.end(), worst_first);
}


} // namespace qk::sampling::detail

namespace qk::sampling {

// Softmax of a whole vector of logits into p (same size), NaN counted as -inf: the reference
// pass the samplers' speed is measured against, and the probabilities a backend must reproduce.
// p = e * float(1 / total), e = exp_difference(x, max) and total the chunk sums (chunk_exp_sum)
// added in double. Each p is within 7e-7 relative of the exact softmax of the float logits when
// p >= 2^-126 (FLT_MIN), within 2^-126 below that, for any size below 2^31: e within 2 ulp, the
// total within that, 2^-24 and 2^-47, the reciprocal and the product rounded once each
// (2 + 2 + 0.5 + 0.5 + 0.5 ulp of 2^-23). Deterministic: the same bits on every tag.
// Returns false, leaving p unwritten, when no logit is above -inf.
// A +inf logit or spans of different sizes: qk::error.
template <class Arch = arch::vector_native>
bool softmax(std::span<const float> logits, std::span<float> p, std::vector<float>& chunk_sums)
{
    if (p.size() != logits.size()) {
        qk::detail::fail("qk::sampling::softmax: p has ", p.size(), " elements for ", logits.size(), " logits");
    }
    const float max = detail::max_logit<Arch>(logits.data(), logits.size());
    if (!(max > detail::minus_infinity)) {
        return false;
    }
    if (max == std::numeric_limits<float>::infinity()) {
        qk::detail::fail("qk::sampling::softmax: logit ", detail::find_value<Arch>(logits.data(), logits.size(), max),
                         " is +inf; logits must be finite or -inf");
    }
    chunk_sums.resize(detail::chunk_count(logits.size()));
    const double total = detail::exp_sums<Arch>(logits.data(), logits.size(), max, chunk_sums.data(), p.data());
    detail::scale<Arch>(p.data(), p.size(), static_cast<float>(1.0 / total));
    return true;
}

} // namespace qk::sampling
