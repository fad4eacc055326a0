// The activation quantizers on AArch64 Advanced SIMD: f32 -> Q8_0 and f32 -> Q8_K, byte-identical
// with the scalar references in formats/ whatever the user's flags. They overload
// kernels::quantize on arch::neon64 (and serve neon64_dotprod, its child); other formats stay generic.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../arch.hpp"
#include "../formats.hpp"
#include "../target.hpp"

#if QK_HAS_ARM_KERNELS
#include <arm_neon.h>

namespace qk::kernels {
namespace quantize_neon64 {

// How these stay bit-exact with the references:
//  - No product ever meets an addition: products (vmulq_f32, never vfmaq) only feed conversions
//    to integers, so there is nothing for contraction (on by default on AArch64) to fuse, and the
//    divisions are single IEEE operations on scalars, as in the references.
//  - The maxima of |x| are exact whatever the order (max is), and so is Q8_K's search for the
//    first element whose magnitude is that maximum (its sign decides the sign of the scale).
//  - Q8_0 rounds half away from zero: fcvtas (vcvtaq_s32_f32) is exactly roundf for the products,
//    all of which are within [-128, 128]. Q8_K's nearest_int, round half to even through the
//    1.5 * 2^23 trick, is exactly fcvtns (vcvtnq_s32_f32). Narrowing (xtn) keeps the low bits like
//    the references' casts to int8.

#define QK_NEON64_QUANTIZE_INLINE [[gnu::always_inline]] QK_TARGET_NEON64 inline

// Four int32 vectors (16 values in order) to 16 int8 in order, keeping the low 8 bits of each.
template <class Arch>
QK_NEON64_QUANTIZE_INLINE int8x16_t narrow(int32x4_t q0, int32x4_t q1, int32x4_t q2, int32x4_t q3) noexcept
{
    const int16x8_t h0 = vcombine_s16(vmovn_s32(q0), vmovn_s32(q1));
    const int16x8_t h1 = vcombine_s16(vmovn_s32(q2), vmovn_s32(q3));
    return vcombine_s8(vmovn_s16(h0), vmovn_s16(h1));
}

// m and |x| over 16 values, lane-wise maximum. fmaxnm ignores NaN as the references' comparisons
// do (qk::quantize rejects non-finite input anyway), so the maximum is always one of the |x|.
template <class Arch>
QK_NEON64_QUANTIZE_INLINE float32x4_t abs_max16(float32x4_t m, const float* x) noexcept
{
    const float32x4_t m01 = vmaxnmq_f32(vabsq_f32(vld1q_f32(x)), vabsq_f32(vld1q_f32(x + 4)));
    const float32x4_t m23 = vmaxnmq_f32(vabsq_f32(vld1q_f32(x + 8)), vabsq_f32(vld1q_f32(x + 12)));
    return vmaxnmq_f32(m, vmaxnmq_f32(m01, m23));
}

// 16 values of a Q8_0 block times id, rounded half away from zero, as int8.
template <class Arch>
QK_NEON64_QUANTIZE_INLINE int8x16_t q8_0_values(const float* x, float id) noexcept
{
    return narrow<Arch>(vcvtaq_s32_f32(vmulq_n_f32(vld1q_f32(x), id)), vcvtaq_s32_f32(vmulq_n_f32(vld1q_f32(x + 4), id)),
                        vcvtaq_s32_f32(vmulq_n_f32(vld1q_f32(x + 8), id)), vcvtaq_s32_f32(vmulq_n_f32(vld1q_f32(x + 12), id)));
}

// The first of 256 values whose magnitude is amax, the largest magnitude among them: the
// element the reference's scan keeps (it replaces its maximum only when a magnitude exceeds it).
template <class Arch>
QK_NEON64_QUANTIZE_INLINE float first_with_magnitude(const float* x, float amax) noexcept
{
    const float32x4_t target = vdupq_n_f32(amax);
    int i = 0;
    while (i < 252 && vmaxvq_u32(vceqq_f32(vabsq_f32(vld1q_f32(x + i)), target)) == 0) {
        i += 4;
    }
    while (i < 255 && std::fabs(x[i]) != amax) {
        ++i;
    }
    return x[i];
}

// 16 values of a Q8_K block times iscale, rounded half to even, at most 127, as int8.
template <class Arch>
QK_NEON64_QUANTIZE_INLINE int8x16_t q8_K_values(const float* x, float iscale) noexcept
{
    const int32x4_t limit = vdupq_n_s32(127);
    return narrow<Arch>(vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x), iscale)), limit),
                        vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 4), iscale)), limit),
                        vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 8), iscale)), limit),
                        vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 12), iscale)), limit));
}

#undef QK_NEON64_QUANTIZE_INLINE

} // namespace quantize_neon64

// Q8_0: d = amax / 127 (rounded to fp16 after id = 1 / d is taken from the float d); a zero block,
// or one whose id is infinite, is written as all zero.
template <class Arch>
QK_TARGET_NEON64 void quantize(const float* x, block_q8_0* y, std::size_t blocks, arch::requires_arch<arch::neon64>) noexcept
{
    namespace nq = quantize_neon64;
    for (std::size_t b = 0; b < blocks; ++b, x += 32) {
        const float amax = vmaxnmvq_f32(nq::abs_max16<Arch>(nq::abs_max16<Arch>(vdupq_n_f32(0.0f), x), x + 16));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        if (!std::isfinite(id)) {
            y[b] = block_q8_0{};
            continue;
        }
        y[b].d = fp32_to_fp16(d);
        vst1q_s8(y[b].qs.data(), nq::q8_0_values<Arch>(x, id));
        vst1q_s8(y[b].qs.data() + 16, nq::q8_0_values<Arch>(x + 16, id));
    }
}

// Q8_K: iscale = -127 / max, where max is the first element of largest magnitude; q = min(127,
// nearest_int(iscale * x)); d = 1 / iscale; bsums. Zero blocks, and blocks whose iscale is not
// finite, are written as all zero.
template <class Arch>
QK_TARGET_NEON64 void quantize(const float* x, block_q8_K* y, std::size_t blocks, arch::requires_arch<arch::neon64>) noexcept
{
    namespace nq = quantize_neon64;
    for (std::size_t b = 0; b < blocks; ++b, x += 256) {
        float32x4_t m0 = vdupq_n_f32(0.0f);
        float32x4_t m1 = vdupq_n_f32(0.0f);
        for (int j = 0; j < 256; j += 32) {
            m0 = nq::abs_max16<Arch>(m0, x + j);
            m1 = nq::abs_max16<Arch>(m1, x + j + 16);
        }
        const float amax = vmaxnmvq_f32(vmaxnmq_f32(m0, m1));
        const float iscale = amax != 0.0f ? -127.0f / nq::first_with_magnitude<Arch>(x, amax) : 0.0f;
        if (amax == 0.0f || !std::isfinite(iscale)) {
            y[b] = block_q8_K{};
            continue;
        }
        for (int g = 0; g < 16; ++g) {
            const int8x16_t q = nq::q8_K_values<Arch>(x + 16 * g, iscale);
            vst1q_s8(y[b].qs.data() + 16 * g, q);
            y[b].bsums[static_cast<std::size_t>(g)] = vaddlvq_s8(q);
        }
        y[b].d = 1.0f / iscale;
    }
}

// The argument checks' pass (generic.hpp), four accumulators of umax.
template <class Arch>
QK_TARGET_NEON64 std::uint32_t max_magnitude_bits(const float* x, std::size_t n, arch::requires_arch<arch::neon64>) noexcept
{
    const uint32x4_t magnitude = vdupq_n_u32(0x7fffffffu);
    uint32x4_t m0 = vdupq_n_u32(0), m1 = m0, m2 = m0, m3 = m0;
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = vmaxq_u32(m0, vandq_u32(vreinterpretq_u32_f32(vld1q_f32(x + i)), magnitude));
        m1 = vmaxq_u32(m1, vandq_u32(vreinterpretq_u32_f32(vld1q_f32(x + i + 4)), magnitude));
        m2 = vmaxq_u32(m2, vandq_u32(vreinterpretq_u32_f32(vld1q_f32(x + i + 8)), magnitude));
        m3 = vmaxq_u32(m3, vandq_u32(vreinterpretq_u32_f32(vld1q_f32(x + i + 12)), magnitude));
    }
    const std::uint32_t largest = vmaxvq_u32(vmaxq_u32(vmaxq_u32(m0, m1), vmaxq_u32(m2, m3)));
    const std::uint32_t tail = max_magnitude_bits<Arch>(x + i, n - i, arch::generic{});
    return largest > tail ? largest : tail;
}

} // namespace qk::kernels

#endif // QK_HAS_ARM_KERNELS
