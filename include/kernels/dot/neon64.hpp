// The dot products on AArch64: Q8_0, MXFP4, NVFP4 and IQ4_NL against Q8_0, IQ4_XS against Q8_K, on the
// neon64 tag (Armv8.0 Advanced SIMD) and on neon64_dotprod (Armv8.2 sdot). Included by dot.hpp;
// checked against dot/generic.hpp by tests/arch/kernels.cpp (run under qemu-aarch64 in CI).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "../arch.hpp"
#include "../e8m0.hpp"
#include "../formats.hpp"
#include "../target.hpp"

#if QK_HAS_ARM_KERNELS
#include <arm_neon.h>

// Technique, shared by the ten kernels: a block's 32 int8 products go into four int32 lanes
// exactly. Without dotprod, vmull_s8 forms int16 products (|w * a| <= 128 * 128 = 2^14, exact)
// and vpadalq_s16 adds adjacent pairs into the int32 lanes (two products may reach 2^15, so they
// are never summed in 16 bits); with dotprod, sdot (vdotq_s32) adds four products per lane in one
// instruction. 4-bit codes are decoded with tbl (vqtbl1q_s8) through the 16-entry value table:
// low nibbles give elements 0..15, high nibbles 16..31. The 32-value blocks go two at a time into
// two float accumulators: each block's lanes are converted to float (exact: |lane| < 2^24) and
// multiplied by the block scale with FMA. IQ4_XS multiplies each group's lanes by its integer
// multiplier ls - 32 (the superblock's lanes stay below 2^26) and scales once per superblock.
// fp16 scales convert with fcvtl (vcvt_f32_f16, exact). MXFP4's E8M0 scales come from
// qk::e8m0_half_table, one load per block: whether that or building the float's bits in registers
// is faster could not be measured on real hardware here, and the table is the simpler code and the
// very values the reference uses.
// NVFP4 sums each 16-value sub-block into its own four lanes, pairwise-added (addp) into one
// lane per sub-block, and takes its UE4M3 scales from qk::ue4m3_half_table likewise.
//
// The helpers exist twice, once per tag, each with its tag's target attribute: g++ inlines a
// function only into callers whose target includes all of its own, and the dotprod attribute may
// name an architecture that replaces the user's -march (target.hpp). For the same reason they read
// the blocks' arrays through pointers rather than std::array's members, which have the user's target.
namespace qk::kernels::neon64_detail {

// Helpers are templates on the calling tag, like the kernels, and always inlined into them.
#define QK_NEON64_INLINE [[gnu::always_inline]] QK_TARGET_NEON64 inline

template <class Arch, class Array>
QK_NEON64_INLINE const std::int8_t* bytes(const Array& a) noexcept
{
    return reinterpret_cast<const std::int8_t*>(&a);
}

template <class Arch>
QK_NEON64_INLINE float fp16_to_fp32(fp16_bits h) noexcept
{
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

// 32 4-bit codes (16 bytes: element j in the low nibble of byte j, element j + 16 in its high
// nibble) decoded through the table `values`: elements 0..15 and 16..31.
template <class Arch>
QK_NEON64_INLINE int8x16x2_t decode_nibbles(const std::int8_t* codes, int8x16_t values) noexcept
{
    const uint8x16_t packed = vreinterpretq_u8_s8(vld1q_s8(codes));
    int8x16x2_t decoded;
    decoded.val[0] = vqtbl1q_s8(values, vandq_u8(packed, vdupq_n_u8(0x0f)));
    decoded.val[1] = vqtbl1q_s8(values, vshrq_n_u8(packed, 4));
    return decoded;
}

// acc plus the 16 exact products w * a, pairwise summed into four int32 lanes.
template <class Arch>
QK_NEON64_INLINE int32x4_t dot16(int32x4_t acc, int8x16_t w, int8x16_t a) noexcept
{
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(w), vget_low_s8(a)));
    return vpadalq_s16(acc, vmull_high_s8(w, a));
}

// The exact int32 lanes of the dot of 32 weights (two halves) with 32 activations at a.
template <class Arch>
QK_NEON64_INLINE int32x4_t block_dot(int8x16_t w0, int8x16_t w1, const std::int8_t* a) noexcept
{
    return dot16<Arch>(dot16<Arch>(vdupq_n_s32(0), w0, vld1q_s8(a)), w1, vld1q_s8(a + 16));
}

// acc + d * lanes, the float step that ends each block.
template <class Arch>
QK_NEON64_INLINE float32x4_t scale_add(float32x4_t acc, int32x4_t lanes, float d) noexcept
{
    return vfmaq_n_f32(acc, vcvtq_f32_s32(lanes), d);
}

// IQ4_XS's multiplier ls - 32 of group g.
template <class Arch>
QK_NEON64_INLINE int group_scale(const block_iq4_xs& w, int g) noexcept
{
    const int low = (static_cast<std::uint8_t>(bytes<Arch>(w.scales_l)[g / 2]) >> (4 * (g % 2))) & 0xf;
    const int high = (w.scales_h >> (2 * g)) & 3;
    return (low | (high << 4)) - 32;
}

// The four 16-value sub-block sums of an NVFP4 block (codes: its 32 code bytes) against the
// Q8_0 values a0[0..31], a1[0..31], as lanes 0..3. Sub-block s's codes are its 8 bytes' low
// nibbles, then their high nibbles (zip1/zip2 join the halves).
template <class Arch>
QK_NEON64_INLINE int32x4_t nvfp4_sums(const std::int8_t* codes, const std::int8_t* a0, const std::int8_t* a1, int8x16_t values) noexcept
{
    int32x4_t s[4];
    for (int h = 0; h < 2; ++h) {
        const uint8x16_t packed = vreinterpretq_u8_s8(vld1q_s8(codes + 16 * h));
        const uint64x2_t lo = vreinterpretq_u64_u8(vandq_u8(packed, vdupq_n_u8(0x0f)));
        const uint64x2_t hi = vreinterpretq_u64_u8(vshrq_n_u8(packed, 4));
        const std::int8_t* a = h == 0 ? a0 : a1;
        s[2 * h] = dot16<Arch>(vdupq_n_s32(0), vqtbl1q_s8(values, vreinterpretq_u8_u64(vzip1q_u64(lo, hi))), vld1q_s8(a));
        s[2 * h + 1] = dot16<Arch>(vdupq_n_s32(0), vqtbl1q_s8(values, vreinterpretq_u8_u64(vzip2q_u64(lo, hi))), vld1q_s8(a + 16));
    }
    return vpaddq_s32(vpaddq_s32(s[0], s[1]), vpaddq_s32(s[2], s[3]));
}

// The scales of an NVFP4 block's four sub-blocks: its UE4M3 bytes (from ue4m3_half_table, as the
// reference) times the fp16 scales of its Q8_0 blocks, [d0 a0, d1 a0, d2 a1, d3 a1].
template <class Arch>
QK_NEON64_INLINE float32x4_t nvfp4_scales(const block_nvfp4& w, const block_q8_0* a) noexcept
{
    const float* ue4m3 = reinterpret_cast<const float*>(&ue4m3_half_table);
    const std::uint8_t* d = reinterpret_cast<const std::uint8_t*>(&w.d);
    const float32x4_t dw = {ue4m3[d[0]], ue4m3[d[1]], ue4m3[d[2]], ue4m3[d[3]]};
    const std::uint64_t a0 = a[0].d;
    const std::uint64_t a1 = a[1].d;
    const float32x4_t da = vcvt_f32_f16(vreinterpret_f16_u16(vcreate_u16(a0 | (a0 << 16) | (a1 << 32) | (a1 << 48))));
    return vmulq_f32(dw, da);
}

#undef QK_NEON64_INLINE

} // namespace qk::kernels::neon64_detail

namespace qk::kernels::neon64_dotprod_detail {

#define QK_NEON64_DOTPROD_INLINE [[gnu::always_inline]] QK_TARGET_NEON64_DOTPROD inline

template <class Arch, class Array>
QK_NEON64_DOTPROD_INLINE const std::int8_t* bytes(const Array& a) noexcept
{
    return reinterpret_cast<const std::int8_t*>(&a);
}

template <class Arch>
QK_NEON64_DOTPROD_INLINE float fp16_to_fp32(fp16_bits h) noexcept
{
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

template <class Arch>
QK_NEON64_DOTPROD_INLINE int8x16x2_t decode_nibbles(const std::int8_t* codes, int8x16_t values) noexcept
{
    const uint8x16_t packed = vreinterpretq_u8_s8(vld1q_s8(codes));
    int8x16x2_t decoded;
    decoded.val[0] = vqtbl1q_s8(values, vandq_u8(packed, vdupq_n_u8(0x0f)));
    decoded.val[1] = vqtbl1q_s8(values, vshrq_n_u8(packed, 4));
    return decoded;
}

// acc plus the 16 products w * a, four per lane, with sdot. Clang before 16 declares vdotq_s32
// only when the translation unit's flags enable dotprod; elsewhere clang gets the instruction
// through inline assembly, which the function's target attribute lets its assembler accept.
template <class Arch>
QK_NEON64_DOTPROD_INLINE int32x4_t dot16(int32x4_t acc, int8x16_t w, int8x16_t a) noexcept
{
#if defined(__clang__) && !defined(__ARM_FEATURE_DOTPROD)
    __asm__("sdot %0.4s, %1.16b, %2.16b" : "+w"(acc) : "w"(w), "w"(a));
    return acc;
#else
    return vdotq_s32(acc, w, a);
#endif
}

template <class Arch>
QK_NEON64_DOTPROD_INLINE int32x4_t block_dot(int8x16_t w0, int8x16_t w1, const std::int8_t* a) noexcept
{
    return dot16<Arch>(dot16<Arch>(vdupq_n_s32(0), w0, vld1q_s8(a)), w1, vld1q_s8(a + 16));
}

template <class Arch>
QK_NEON64_DOTPROD_INLINE float32x4_t scale_add(float32x4_t acc, int32x4_t lanes, float d) noexcept
{
    return vfmaq_n_f32(acc, vcvtq_f32_s32(lanes), d);
}

template <class Arch>
QK_NEON64_DOTPROD_INLINE int group_scale(const block_iq4_xs& w, int g) noexcept
{
    const int low = (static_cast<std::uint8_t>(bytes<Arch>(w.scales_l)[g / 2]) >> (4 * (g % 2))) & 0xf;
    const int high = (w.scales_h >> (2 * g)) & 3;
    return (low | (high << 4)) - 32;
}

// The four 16-value sub-block sums of an NVFP4 block (codes: its 32 code bytes) against the
// Q8_0 values a0[0..31], a1[0..31], as lanes 0..3. Sub-block s's codes are its 8 bytes' low
// nibbles, then their high nibbles (zip1/zip2 join the halves).
template <class Arch>
QK_NEON64_DOTPROD_INLINE int32x4_t nvfp4_sums(const std::int8_t* codes, const std::int8_t* a0, const std::int8_t* a1, int8x16_t values) noexcept
{
    int32x4_t s[4];
    for (int h = 0; h < 2; ++h) {
        const uint8x16_t packed = vreinterpretq_u8_s8(vld1q_s8(codes + 16 * h));
        const uint64x2_t lo = vreinterpretq_u64_u8(vandq_u8(packed, vdupq_n_u8(0x0f)));
        const uint64x2_t hi = vreinterpretq_u64_u8(vshrq_n_u8(packed, 4));
        const std::int8_t* a = h == 0 ? a0 : a1;
        s[2 * h] = dot16<Arch>(vdupq_n_s32(0), vqtbl1q_s8(values, vreinterpretq_u8_u64(vzip1q_u64(lo, hi))), vld1q_s8(a));
        s[2 * h + 1] = dot16<Arch>(vdupq_n_s32(0), vqtbl1q_s8(values, vreinterpretq_u8_u64(vzip2q_u64(lo, hi))), vld1q_s8(a + 16));
    }
    return vpaddq_s32(vpaddq_s32(s[0], s[1]), vpaddq_s32(s[2], s[3]));
}

// The scales of an NVFP4 block's four sub-blocks: its UE4M3 bytes (from ue4m3_half_table, as the
// reference) times the fp16 scales of its Q8_0 blocks, [d0 a0, d1 a0, d2 a1, d3 a1].
template <class Arch>
QK_NEON64_DOTPROD_INLINE float32x4_t nvfp4_scales(const block_nvfp4& w, const block_q8_0* a) noexcept
{
    const float* ue4m3 = reinterpret_cast<const float*>(&ue4m3_half_table);
    const std::uint8_t* d = reinterpret_cast<const std::uint8_t*>(&w.d);
    const float32x4_t dw = {ue4m3[d[0]], ue4m3[d[1]], ue4m3[d[2]], ue4m3[d[3]]};
    const std::uint64_t a0 = a[0].d;
    const std::uint64_t a1 = a[1].d;
    const float32x4_t da = vcvt_f32_f16(vreinterpret_f16_u16(vcreate_u16(a0 | (a0 << 16) | (a1 << 32) | (a1 << 48))));
    return vmulq_f32(dw, da);
}

#undef QK_NEON64_DOTPROD_INLINE

} // namespace qk::kernels::neon64_dotprod_detail

namespace qk::kernels {

// The kernels of the two tags are the same text but for the attribute, the tag and the helpers'
// namespace (nd), whose block_dot is vmull + vpadal on neon64 and sdot on neon64_dotprod.

// ---- neon64: Armv8.0 Advanced SIMD ----

template <class Arch>
QK_TARGET_NEON64 float dot(const block_q8_0* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::neon64>) noexcept
{
    namespace nd = neon64_detail;
    float32x4_t sum0 = vdupq_n_f32(0.0f);
    float32x4_t sum1 = vdupq_n_f32(0.0f);
    std::size_t b = 0;
    for (; b + 2 <= blocks; b += 2) {
        const std::int8_t* w0 = nd::bytes<Arch>(w[b].qs);
        const std::int8_t* w1 = nd::bytes<Arch>(w[b + 1].qs);
        const int32x4_t p0 = nd::block_dot<Arch>(vld1q_s8(w0), vld1q_s8(w0 + 16), nd::bytes<Arch>(a[b].qs));
        const int32x4_t p1 = nd::block_dot<Arch>(vld1q_s8(w1), vld1q_s8(w1 + 16), nd::bytes<Arch>(a[b + 1].qs));
        sum0 = nd::scale_add<Arch>(sum0, p0, nd::fp16_to_fp32<Arch>(w[b].d) * nd::fp16_to_fp32<Arch>(a[b].d));
        sum1 = nd::scale_add<Arch>(sum1, p1, nd::fp16_to_fp32<Arch>(w[b + 1].d) * nd::fp16_to_fp32<Arch>(a[b + 1].d));
    }
    if (b < blocks) {
        const std::int8_t* w0 = nd::bytes<Arch>(w[b].qs);
        const int32x4_t p0 = nd::block_dot<Arch>(vld1q_s8(w0), vld1q_s8(w0 + 16), nd::bytes<Arch>(a[b].qs));
        sum0 = nd::scale_add<Arch>(sum0, p0, nd::fp16_to_fp32<Arch>(w[b].d) * nd::fp16_to_fp32<Arch>(a[b].d));
    }
    return vaddvq_f32(vaddq_f32(sum0, sum1));
}

template <class Arch>
QK_TARGET_NEON64 float dot(const block_mxfp4* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::neon64>) noexcept
{
    namespace nd = neon64_detail;
    const int8x16_t values = vld1q_s8(nd::bytes<Arch>(mxfp4_values));
    const float* e8m0_half = reinterpret_cast<const float*>(&e8m0_half_table);
    float32x4_t sum0 = vdupq_n_f32(0.0f);
    float32x4_t sum1 = vdupq_n_f32(0.0f);
    std::size_t b = 0;
    for (; b + 2 <= blocks; b += 2) {
        const int8x16x2_t w0 = nd::decode_nibbles<Arch>(nd::bytes<Arch>(w[b].qs), values);
        const int8x16x2_t w1 = nd::decode_nibbles<Arch>(nd::bytes<Arch>(w[b + 1].qs), values);
        const int32x4_t p0 = nd::block_dot<Arch>(w0.val[0], w0.val[1], nd::bytes<Arch>(a[b].qs));
        const int32x4_t p1 = nd::block_dot<Arch>(w1.val[0], w1.val[1], nd::bytes<Arch>(a[b + 1].qs));
        sum0 = nd::scale_add<Arch>(sum0, p0, e8m0_half[w[b].e] * nd::fp16_to_fp32<Arch>(a[b].d));
        sum1 = nd::scale_add<Arch>(sum1, p1, e8m0_half[w[b + 1].e] * nd::fp16_to_fp32<Arch>(a[b + 1].d));
    }
    if (b < blocks) {
        const int8x16x2_t w0 = nd::decode_nibbles<Arch>(nd::bytes<Arch>(w[b].qs), values);
        const int32x4_t p0 = nd::block_dot<Arch>(w0.val[0], w0.val[1], nd::bytes<Arch>(a[b].qs));
        sum0 = nd::scale_add<Arch>(sum0, p0, e8m0_half[w[b].e] * nd::fp16_to_fp32<Arch>(a[b].d));
    }
    return vaddvq_f32(vaddq_f32(sum0, sum1));
}

template <class Arch>
QK_TARGET_NEON64 float dot(const block_nvfp4* w, const block_q8_0* a, std::size_t blocks,
                           arch::requires_arch<arch::neon64>) noexcept
{
    namespace nd = neon64_detail;
    const int8x16_t values = vld1q_s8(nd::bytes<Arch>(mxfp4_values));
    float32x4_t sum0 = vdupq_n_f32(0.0f);
    float32x4_t sum1 = vdupq_n_f32(0.0f);
    std::size_t b = 0;
    for (; b + 2 <= blocks; b += 2) {
        const int32x4_t p0 = nd::nvfp4_sums<Arch>(nd::bytes<Arch>(w[b].qs), nd::bytes<Arch>(a[2 * b].qs), nd::bytes<Arch>(a[2 * b + 1].qs), values);
        const int32x4_t p1 = nd::nvfp4_sums<Arch>(nd::bytes<Arch>(w[b + 1].qs), nd::bytes<Arch>(a[2 * b + 2].qs), nd::bytes<Arch>(a[2 * b + 3].qs), values);
        sum0 = vfmaq_f32(sum0, vcvtq_f32_s32(p0), nd::nvfp4_scales<Arch>(w[b], a + 2 * b));
        sum1 = vfmaq_f32(sum1, vcvtq_f32_s32(p1), nd::nvfp4_scales<Arch>(w[b + 1], a + 2 * b + 2));
    }
    if (b < blocks) {
        const int32x4_t p0 = nd::nvfp4_sums<Arch>(nd::bytes<Arch>(w[b].qs), nd::bytes<Arch>(a[2 * b].qs), nd::bytes<Arch>(a[2 * b + 1].qs), values);
        sum0 = vfmaq_f32(sum0, vcvtq_f32_s32(p0), nd::nvfp4_scales<Arch>(w[b], a + 2 * b));
    }
    return vaddvq_f32(vaddq_f32(sum0, sum1));
}

template <class Arch>
QK_TARGET_NEON64 float dot(const block_iq4_nl* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::neon64>) noexcept
{
    namespace nd = neon64_detail;
    const int8x16_t values = vld1q_s8(nd::bytes<Arch>(iq4_values));
    float32x4_t sum0 = vdupq_n_f32(0.0f);
    float32x4_t sum1 = vdupq_n_f32(0.0f);
    std::size_t b = 0;
    for (; b + 2 <= blocks; b += 2) {
        const int8x16x2_t w0 = nd::decode_nibbles<Arch>(nd::bytes<Arch>(w[b].qs), values);
        const int8x16x2_t w1 = nd::decode_nibbles<Arch>(nd::bytes<Arch>(w[b + 1].qs), values);
        const int32x4_t p0 = nd::block_dot<Arch>(w0.val[0], w0.val[1], nd::bytes<Arch>(a[b].qs));
        const int32x4_t p1 = nd::block_dot<Arch>(w1.val[0], w1.val[1], nd::bytes<Arch>(a[b + 1].qs));
        sum0 = nd::scale_add<Arch>(sum0, p0, nd::fp16_to_fp32<Arch>(w[b].d) * nd::fp16_to_fp32<Arch>(a[b].d));
        sum1 = nd::scale_add<Arch>(sum1, p1, nd::fp16_to_fp32<Arch>(w[b + 1].d) * nd::fp16_to_fp32<Arch>(a[b + 1].d));
    }
    if (b < blocks) {
        const int8x16x2_t w0 = nd::decode_nibbles<Arch>(nd::bytes<Arch>(w[b].qs), values);
        const int32x4_t p0 = nd::block_dot<Arch>(w0.val[0], w0.val[1], nd::bytes<Arch>(a[b].qs));
        sum0 = nd::scale_add<Arch>(sum0, p0, nd::fp16_to_fp32<Arch>(w[b].d) * nd::fp16_to_fp32<Arch>(a[b].d));
    }
    return vaddvq_f32(vaddq_f32(sum0, sum1));
}

// Each group's lanes times its multiplier go into one integer accumulator per superblock:
// |lane| <= 8 * 127 * 128 per group and |ls - 32| <= 32, so 8 groups stay below 2^26.
template <class Arch>
QK_TARGET_NEON64 float dot(const block_iq4_xs* w, const block_q8_K* a, std::size_t blocks, arch::requires_arch<arch::neon64>) noexcept
{
    namespace nd = neon64_detail;
    const int8x16_t values = vld1q_s8(nd::bytes<Arch>(iq4_values));
    float32x4_t sum = vdupq_n_f32(0.0f);
    for (std::size_t b = 0; b < blocks; ++b) {
        const std::int8_t* codes = nd::bytes<Arch>(w[b].qs);
        const std::int8_t* q8 = nd::bytes<Arch>(a[b].qs);
        int32x4_t total = vdupq_n_s32(0);
        for (int g = 0; g < 8; g += 2) {
            const int8x16x2_t w0 = nd::decode_nibbles<Arch>(codes + 16 * g, values);
            const int8x16x2_t w1 = nd::decode_nibbles<Arch>(codes + 16 * g + 16, values);
            const int32x4_t p0 = nd::block_dot<Arch>(w0.val[0], w0.val[1], q8 + 32 * g);
            const int32x4_t p1 = nd::block_dot<Arch>(w1.val[0], w1.val[1], q8 + 32 * g + 32);
            total = vmlaq_n_s32(total, p0, nd::group_scale<Arch>(w[b], g));
            total = vmlaq_n_s32(total, p1, nd::group_scale<Arch>(w[b], g + 1));
        }
        sum = nd::scale_add<Arch>(sum, total, nd::fp16_to_fp32<Arch>(w[b].d) * a[b].d);
    }
    return vaddvq_f32(sum);
}

// ---- neon64_dotprod: Armv8.2 with sdot ----

template <class Arch>
QK_TARGET_NEON64_DOTPROD float dot(const block_q8_0* w, const block_q8_0* a, std::size_t blocks,
                                   arch::requires_arch<arch::neon64_dotprod>) noexcept
{
    namespace nd = neon64_dotprod_detail;
    float32x4_t sum0 = vdupq_n_f32(0.0f);
    float32x4_t sum1 = vdupq_n_f32(0.0f);
    std::size_t b = 0;
    for (; b + 2 <= blocks; b += 2) {
        const std::int8_t* w0 = nd::bytes<Arch>(w[b].qs);
        const std::int8_t* w1 = nd::bytes<Arch>(w[b + 1].qs);
        const int32x4_t p0 = nd::block_dot<Arch>(vld1q_s8(w0), vld1q_s8(w0 + 16), nd::bytes<Arch>(a[b].qs));
        const int32x4_t p1 = nd::block_dot<Arch>(vld1q_s8(w1), vld1q_s8(w1 + 16), nd::bytes<Arch>(a[b + 1].qs));
        sum0 = nd::scale_add<Arch>(sum0, p0, nd::fp16_to_fp32<Arch>(w[b].d) * nd::fp16_to_fp32<Arch>(a[b].d));
        sum1 = nd::scale_add<Arch>(sum1, p1, nd::fp16_to_fp32<Arch>(w[b + 1].d) * nd::fp16_to_fp32<Arch>(a[b + 1].d));
    }
    if (b < blocks) {
        const std::int8_t* w0 = nd::bytes<Arch>(w[b].qs);
        const int32x4_t p0 = nd::block_dot<Arch>(vld1q_s8(w0), vld1q_s8(w0 + 16), nd::bytes<Arch>(a[b].qs));
        sum0 = nd::scale_add<Arch>(sum0, p0, nd::fp16_to_fp32<Arch>(w[b].d) * nd::fp16_to_fp32<Arch>(a[b].d));
    }
    return vaddvq_f32(vaddq_f32(sum0, sum1));
}

template <class Arch>
QK_TARGET_NEON64_DOTPROD float dot(const block_mxfp4* w, const block_q8_0* a, std::size_t blocks,
                                   arch::requires_arch<arch::neon64_dotprod>) noexcept
{
    namespace nd = neon64_dotprod_detail;
    const int8x16_t values = vld1q_s8(nd::bytes<Arch>(mxfp4_values));
    const float* e8m0_half = reinterpret_cast<const float*>(&e8m0_half_table);
    float32x4_t sum0 = vdupq_n_f32(0.0f);
    float32x4_t sum1 = vdupq_n_f32(0.0f);
    std::size_t b = 0;
    for (; b + 2 <= blocks; b += 2) {
        const int8x16x2_t w0 = nd::decode_nibbles<Arch>(nd::bytes<Arch>(w[b].qs), values);
        const int8x16x2_t w1 = nd::decode_nibbles<Arch>(nd::bytes<Arch>(w[b + 1].qs), values);
        const int32x4_t p0 = nd::block_dot<Arch>(w0.val[0], w0.val[1], nd::bytes<Arch>(a[b].qs));
        const int32x4_t p1 = nd::block_dot<Arch>(w1.val[0], w1.val[1], nd::bytes<Arch>(a[b + 1].qs));
        sum0 = nd::scale_add<Arch>(sum0, p0, e8m0_half[w[b].e] * nd::fp16_to_fp32<Arch>(a[b].d));
        sum1 = nd::scale_add<Arch>(sum1, p1, e8m0_half[w[b + 1].e] * nd::fp16_to_fp32<Arch>(a[b + 1].d));
    }
    if (b < blocks) {
        const int8x16x2_t w0 = nd::decode_nibbles<Arch>(nd::bytes<Arch>(w[b].qs), values);
        const int32x4_t p0 = nd::block_dot<Arch>(w0.val[0], w0.val[1], nd::bytes<Arch>(a[b].qs));
        sum0 = nd::scale_add<Arch>(sum0, p0, e8m0_half[w[b].e] * nd::fp16_to_fp32<Arch>(a[b].d));
    }
    return vaddvq_f32(vaddq_f32(sum0, sum1));
}

template <class Arch>
QK_TARGET_NEON64_DOTPROD float dot(const block_nvfp4* w, const block_q8_0* a, std::size_t blocks,
                                   arch::requires_arch<arch::neon64_dotprod>) noexcept
{
    namespace nd = neon64_dotprod_detail;
    const int8x16_t values = vld1q_s8(nd::bytes<Arch>(mxfp4_values));
    float32x4_t sum0 = vdupq_n_f32(0.0f);
    float32x4_t sum1 = vdupq_n_f32(0.0f);
    std::size_t b = 0;
    for (; b + 2 <= blocks; b += 2) {
        const int32x4_t p0 = nd::nvfp4_sums<Arch>(nd::bytes<Arch>(w[b].qs), nd::bytes<Arch>(a[2 * b].qs), nd::bytes<Arch>(a[2 * b + 1].qs), values);
        const int32x4_t p1 = nd::nvfp4_sums<Arch>(nd::bytes<Arch>(w[b + 1].qs), nd::bytes<Arch>(a[2 * b + 2].qs), nd::bytes<Arch>(a[2 * b + 3].qs), values);
        sum0 = vfmaq_f32(sum0, vcvtq_f32_s32(p0), nd::nvfp4_scales<Arch>(w[b], a + 2 * b));
        sum1 = vfmaq_f32(sum1, vcvtq_f32_s32(p1), nd::nvfp4_scales<Arch>(w[b + 1], a + 2 * b + 2));
    }
    if (b < blocks) {
        const int32x4_t p0 = nd::nvfp4_sums<Arch>(nd::bytes<Arch>(w[b].qs), nd::bytes<Arch>(a[2 * b].qs), nd::bytes<Arch>(a[2 * b + 1].qs), values);
        sum0 = vfmaq_f32(sum0, vcvtq_f32_s32(p0), nd::nvfp4_scales<Arch>(w[b], a + 2 * b));
    }
    return vaddvq_f32(vaddq_f32(sum0, sum1));
}

template <class Arch>
QK_TARGET_NEON64_DOTPROD float dot(const block_iq4_nl* w, const block_q8_0* a, std::size_t blocks,
                                   arch::requires_arch<arch::neon64_dotprod>) noexcept
{
    namespace nd = neon64_dotprod_detail;
    const int8x16_t values = vld1q_s8(nd::bytes<Arch>(iq4_values));
    float32x4_t sum0 = vdupq_n_f32(0.0f);
    float32x4_t sum1 = vdupq_n_f32(0.0f);
    std::size_t b = 0;
    for (; b + 2 <= blocks; b += 2) {
        const int8x16x2_t w0 = nd::decode_nibbles<Arch>(nd::bytes<Arch>(w[b].qs), values);
        const int8x16x2_t w1 = nd::decode_nibbles<Arch>(nd::bytes<Arch>(w[b + 1].qs), values);
        const int32x4_t p0 = nd::block_dot<Arch>(w0.val[0], w0.val[1], nd::bytes<Arch>(a[b].qs));
        const int32x4_t p1 = nd::block_dot<Arch>(w1.val[0], w1.val[1], nd::bytes<Arch>(a[b + 1].qs));
        sum0 = nd::scale_add<Arch>(sum0, p0, nd::fp16_to_fp32<Arch>(w[b].d) * nd::fp16_to_fp32<Arch>(a[b].d));
        sum1 = nd::scale_add<Arch>(sum1, p1, nd::fp16_to_fp32<Arch>(w[b + 1].d) * nd::fp16_to_fp32<Arch>(a[b + 1].d));
    }
    if (b < blocks) {
        const int8x16x2_t w0 = nd::decode_nibbles<Arch>(nd::bytes<Arch>(w[b].qs), values);
        const int32x4_t p0 = nd::block_dot<Arch>(w0.val[0], w0.val[1], nd::bytes<Arch>(a[b].qs));
        sum0 = nd::scale_add<Arch>(sum0, p0, nd::fp16_to_fp32<Arch>(w[b].d) * nd::fp16_to_fp32<Arch>(a[b].d));
    }
    return vaddvq_f32(vaddq_f32(sum0, sum1));
}

template <class Arch>
QK_TARGET_NEON64_DOTPROD float dot(const block_iq4_xs* w, const block_q8_K* a, std::size_t blocks,
                                   arch::requires_arch<arch::neon64_dotprod>) noexcept
{
    namespace nd = neon64_dotprod_detail;
    const int8x16_t values = vld1q_s8(nd::bytes<Arch>(iq4_values));
    float32x4_t sum = vdupq_n_f32(0.0f);
    for (std::size_t b = 0; b < blocks; ++b) {
        const std::int8_t* codes = nd::bytes<Arch>(w[b].qs);
        const std::int8_t* q8 = nd::bytes<Arch>(a[b].qs);
        int32x4_t total = vdupq_n_s32(0);
        for (int g = 0; g < 8; g += 2) {
            const int8x16x2_t w0 = nd::decode_nibbles<Arch>(codes + 16 * g, values);
            const int8x16x2_t w1 = nd::decode_nibbles<Arch>(codes + 16 * g + 16, values);
            const int32x4_t p0 = nd::block_dot<Arch>(w0.val[0], w0.val[1], q8 + 32 * g);
            const int32x4_t p1 = nd::block_dot<Arch>(w1.val[0], w1.val[1], q8 + 32 * g + 32);
            total = vmlaq_n_s32(total, p0, nd::group_scale<Arch>(w[b], g));
            total = vmlaq_n_s32(total, p1, nd::group_scale<Arch>(w[b], g + 1));
        }
        sum = nd::scale_add<Arch>(sum, total, nd::fp16_to_fp32<Arch>(w[b].d) * a[b].d);
    }
    return vaddvq_f32(sum);
}

} // namespace qk::kernels

#endif // QK_HAS_ARM_KERNELS
