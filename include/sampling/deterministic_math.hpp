// exp and log with the same bits on every architecture tag, compiler and flag set: the sampling
// code computes probabilities only with these, so a seed and a logits vector pick the same token
// everywhere. Built from IEEE additions and multiplications that are never fused (contraction is
// blocked per product), with no library call whose result is implementation-defined.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "../kernels/strict_fp.hpp"

namespace qk::sampling::detail {

// exp(x) for x below this is 0 (the result would be subnormal: no probability ratio that small
// changes a draw). NaN also gives 0, which is how NaN logits come to count as -inf.
inline constexpr float exp_lowest = -87.33654475f; // log(FLT_MIN)
// Above this, exp(x) is exp(exp_highest): results stay finite (only x <= 0 occurs in softmax).
inline constexpr float exp_highest = 88.0f;

// A vector's value unchanged, through an empty asm statement the optimizer cannot look into, so a
// product passed through it cannot be fused into the addition that consumes it.
template <class A>
[[gnu::always_inline]] inline xsimd::batch<float, A> opaque(const xsimd::batch<float, A>& v) noexcept
{
    auto r = v.data;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __asm__("" : "+v"(r));
#elif defined(__GNUC__) && defined(__aarch64__)
    __asm__("" : "+w"(r));
#else
    volatile auto stored = r;
    r = stored;
#endif
    return xsimd::batch<float, A>(r);
}

[[gnu::always_inline]] inline float opaque(float v) noexcept
{
    return qk::detail::rounded(v);
}

// Cody-Waite reduction x = k ln2 + r with |r| <= ln2/2, then Cephes' degree-6 polynomial
// (within 2 ulp of exp on its range). Written out for floats and for vectors of them in the same
// order, so the scalar reference and every SIMD width run the identical sequence of roundings.
// Scalar: the reference.
[[nodiscard]] inline float exp(float x) noexcept
{
    if (!(x >= exp_lowest)) {
        return 0.0f;
    }
    const float clamped = x < exp_highest ? x : exp_highest;
    const float t = opaque(clamped * 1.44269504f);
    const float k = (t + 12582912.0f) - 12582912.0f;
    const float r = (clamped - opaque(k * 0.693359375f)) - opaque(k * -2.12194440e-4f);
    float p = opaque(1.9875691500e-4f * r) + 1.3981999507e-3f;
    p = opaque(p * r) + 8.3334519073e-3f;
    p = opaque(p * r) + 4.1665795894e-2f;
    p = opaque(p * r) + 1.6666665459e-1f;
    p = opaque(p * r) + 5.0000001201e-1f;
    const float r2 = opaque(r * r);
    p = (opaque(p * r2) + r) + 1.0f;
    const auto exponent = static_cast<std::int32_t>(k) + 127; // in [1, 254] on this range
    return opaque(p * std::bit_cast<float>(static_cast<std::uint32_t>(exponent) << 23));
}

// The same on a vector: lane i equals exp(x[i]) above, bit for bit.
// (g++ 12 warns, wrongly, that the AVX-512 intrinsics' _mm512_undefined_* operands are or may be
// used uninitialized once they are inlined here, which of the two depending on the optimization
// level: GCC bug 105593.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// t rounded to the nearest integer, ties to even (the default rounding mode), for |t| < 2^22: what
// the scalar exp's addition and subtraction of 1.5 * 2^23 give. On AVX-512 xsimd::nearbyint
// is one instruction (vrndscaleps) instead of two, which takes exp over 32k floats from 7.6 to
// 7.1 us on Zen 5 (the pass is bound by its vector arithmetic); exp's result is the same bits for
// every one of the 2^32 float inputs.
template <class A>
[[nodiscard]] inline xsimd::batch<float, A> nearest_integer(const xsimd::batch<float, A>& t) noexcept
{
#if defined(__AVX512F__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, A>) {
        return xsimd::nearbyint(t);
    }
#endif
    using V = xsimd::batch<float, A>;
    return (t + V(12582912.0f)) - V(12582912.0f);
}

template <class A>
[[nodiscard]] inline xsimd::batch<float, A> exp(const xsimd::batch<float, A>& x) noexcept
{
    using V = xsimd::batch<float, A>;
    using I = xsimd::batch<std::int32_t, A>;
    const V clamped = xsimd::min(x, V(exp_highest));
    const V t = opaque(clamped * V(1.44269504f));
    const V k = nearest_integer(t);
    const V r = (clamped - opaque(k * V(0.693359375f))) - opaque(k * V(-2.12194440e-4f));
    V p = opaque(V(1.9875691500e-4f) * r) + V(1.3981999507e-3f);
    p = opaque(p * r) + V(8.3334519073e-3f);
    p = opaque(p * r) + V(4.1665795894e-2f);
    p = opaque(p * r) + V(1.6666665459e-1f);
    p = opaque(p * r) + V(5.0000001201e-1f);
    const V r2 = opaque(r * r);
    p = (opaque(p * r2) + r) + V(1.0f);
    // k is integral here, so truncation converts it exactly.
    const I exponent = (xsimd::batch_cast<std::int32_t>(k) + I(127)) << 23;
    const V result = opaque(p * xsimd::bitwise_cast<V>(exponent));
    // NaN fails the comparison too.
    return xsimd::select(x >= V(exp_lowest), result, V(0.0f));
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// exp(x - max) with the subtraction's rounding error put back. x - max rounded to float is off by
// up to half an ulp of the difference, which exp turns into a relative error of up to
// |x - max| 2^-24 (3e-6 at -50); the error term of the subtraction, exact by TwoSum (no fused or
// reordered operation in it), corrects the result: exp(d + err) = exp(d) (1 + err) to first order.
// 1 + err is rounded first, so that no intermediate is subnormal where the result is not, which a
// GPU's float arithmetic may flush; an err below 2^-25 leaves it 1.
// Within 2 ulp of exp(x - max) for x - max >= exp_lowest (exp's own 0.98 ulp, measured over every
// float of that range, and two roundings of half an ulp); 0 below, for -inf and NaN.
[[nodiscard]] inline float exp_difference(float x, float max) noexcept
{
    const float d = x - max;
    const float e = exp(d);
    if (!(e > 0.0f)) {
        return 0.0f;
    }
    const float moved = d - x;
    const float err = (x - (d - moved)) + (-max - moved);
    return e * (1.0f + err);
}

// The same on a vector, lane for lane.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
template <class A>
[[nodiscard]] inline xsimd::batch<float, A> exp_difference(const xsimd::batch<float, A>& x, const xsimd::batch<float, A>& max) noexcept
{
    using V = xsimd::batch<float, A>;
    const V d = x - max;
    const V e = exp(d);
    const V moved = d - x;
    const V err = (x - (d - moved)) + (-max - moved);
    // e is 0 where err may be NaN (x or d infinite).
    return xsimd::select(e > V(0.0f), e * (V(1.0f) + err), V(0.0f));
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Natural logarithm for x > 0 (and +inf); x <= 0 or NaN gives -inf or NaN as below. Splits x into
// 2^e * m with m in [sqrt(1/2), sqrt(2)), then Cephes' logf polynomial in m - 1 (within 2 ulp).
[[nodiscard]] inline float log(float x) noexcept
{
    if (!(x > 0.0f)) {
        return x == 0.0f ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
    }
    if (x == std::numeric_limits<float>::infinity()) {
        return x;
    }
    std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
    std::int32_t e = 0;
    if (bits < 0x00800000u) { // subnormal: scale into the normal range first (exact)
        bits = std::bit_cast<std::uint32_t>(x * 16777216.0f);
        e = -24;
    }
    e += static_cast<std::int32_t>(bits >> 23) - 127;
    float m = std::bit_cast<float>((bits & 0x007fffffu) | 0x3f800000u); // [1, 2)
    if (m > 1.41421356f) {
        m = m * 0.5f; // exact
        e += 1;
    }
    const float f = m - 1.0f; // exact (Sterbenz)
    const float f2 = opaque(f * f);
    float p = opaque(7.0376836292e-2f * f) + -1.1514610310e-1f;
    p = opaque(p * f) + 1.1676998740e-1f;
    p = opaque(p * f) + -1.2420140846e-1f;
    p = opaque(p * f) + 1.4249322787e-1f;
    p = opaque(p * f) + -1.6668057665e-1f;
    p = opaque(p * f) + 2.0000714765e-1f;
    p = opaque(p * f) + -2.4999993993e-1f;
    p = opaque(p * f) + 3.3333331174e-1f;
    const float fe = static_cast<float>(e);
    float y = opaque(opaque(p * f) * f2);
    y = y + opaque(fe * -2.12194440e-4f);
    y = y - opaque(0.5f * f2);
    return (f + y) + opaque(fe * 0.693359375f);
}

// x^y for x > 0 as exp(y log x): a few ulp, the same everywhere. x == 0 gives 0 for y > 0.
[[nodiscard]] inline float pow(float x, float y) noexcept
{
    if (x == 0.0f) {
        return y > 0.0f ? 0.0f : (y == 0.0f ? 1.0f : std::numeric_limits<float>::infinity());
    }
    if (x == 1.0f || y == 0.0f) {
        return 1.0f;
    }
    const float l = opaque(y * log(x));
    if (l > exp_highest) {
        // Up to the largest float (exp(88.72)): the square of exp(l / 2), infinite beyond.
        const float half = exp(l * 0.5f);
        return half * half;
    }
    return exp(l);
}

} // namespace qk::sampling::detail
