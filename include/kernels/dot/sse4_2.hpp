// The dot products on the SSE4.2 tag (x86-64-v2: SSSE3 and SSE4.1 integer instructions, no FMA,
// no F16C): Q8_0, MXFP4, NVFP4 and IQ4_NL against Q8_0, IQ4_XS against Q8_K. Included by dot.hpp, for
// x86-64-v2 CPUs without AVX2 (see dispatch.hpp); checked against dot/generic.hpp.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../arch.hpp"
#include "../e8m0.hpp"
#include "../formats.hpp"
#include "../fp16.hpp"
#include "../target.hpp"
#include "generic.hpp"
#include "split_activations.hpp"

#if QK_HAS_X86_KERNELS
#include <immintrin.h>

// Technique (as in avx2.hpp, on 128-bit registers): int8 products with pmaddubsw on |w| and the
// activation carrying w's sign (psignb); two adjacent products sum to at most 2 * 128 * 127 < 2^15,
// exact for any weight byte and activations in [-127, 127] (the Q8_0 and Q8_K quantizers' range).
// pmaddwd widens to int32 (with ones, or for IQ4_XS with the group multiplier ls - 32). 4-bit
// codes are decoded with pshufb through the 16-entry table. 32-value blocks go four at a time;
// their int32 lanes are reduced exactly to one lane per block, converted to float once and scaled.
// Without F16C, the fp16 scales of four blocks are converted with a few integer vector operations
// when all are normal numbers (checked in the integer units), else by qk::fp16_to_fp32. A
// non-finite result (infinite or NaN scales, overflow) is recomputed by the reference.
namespace qk::kernels::sse4_2_detail {

// Helpers are templates on the calling tag, like the kernels, and always inlined into them.
#define QK_SSE4_2_INLINE [[gnu::always_inline]] QK_TARGET_SSE4_2 inline

template <class Arch>
QK_SSE4_2_INLINE __m128i load16(const void* p) noexcept
{
    return _mm_loadu_si128(static_cast<const __m128i*>(p));
}

// The exact int16 pair sums of 16 int8 products w * a; w any int8, a in [-127, 127].
template <class Arch>
QK_SSE4_2_INLINE __m128i pair_sums(__m128i w, __m128i a) noexcept
{
    return _mm_maddubs_epi16(_mm_abs_epi8(w), _mm_sign_epi8(a, w));
}

// The exact int32 partial sums (4 lanes) of the 32 products of w_lo:w_hi and a_lo:a_hi.
template <class Arch>
QK_SSE4_2_INLINE __m128i dot_i8(__m128i w_lo, __m128i w_hi, __m128i a_lo, __m128i a_hi) noexcept
{
    const __m128i ones = _mm_set1_epi16(1);
    return _mm_add_epi32(_mm_madd_epi16(pair_sums<Arch>(w_lo, a_lo), ones), _mm_madd_epi16(pair_sums<Arch>(w_hi, a_hi), ones));
}

template <class Arch>
QK_SSE4_2_INLINE __m128i dot_q8(const std::int8_t* w, const std::int8_t* a) noexcept
{
    return dot_i8<Arch>(load16<Arch>(w), load16<Arch>(w + 16), load16<Arch>(a), load16<Arch>(a + 16));
}

// 32 4-bit codes (16 bytes: element j in the low nibble of byte j, element j + 16 in its high
// nibble) decoded through the 16-entry table `values`, times 32 activations.
template <class Arch>
QK_SSE4_2_INLINE __m128i dot_nibbles(const std::uint8_t* codes, const std::int8_t* a, __m128i values) noexcept
{
    const __m128i bytes = load16<Arch>(codes);
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i w_lo = _mm_shuffle_epi8(values, _mm_and_si128(bytes, mask));
    const __m128i w_hi = _mm_shuffle_epi8(values, _mm_and_si128(_mm_srli_epi16(bytes, 4), mask));
    return dot_i8<Arch>(w_lo, w_hi, load16<Arch>(a), load16<Arch>(a + 16));
}

// The exact block sums of s0..s3 (4 int32 lanes each) as lanes 0..3.
template <class Arch>
QK_SSE4_2_INLINE __m128i reduce4(__m128i s0, __m128i s1, __m128i s2, __m128i s3) noexcept
{
    const __m128i s01 = _mm_add_epi32(_mm_unpacklo_epi32(s0, s1), _mm_unpackhi_epi32(s0, s1));
    const __m128i s23 = _mm_add_epi32(_mm_unpacklo_epi32(s2, s3), _mm_unpackhi_epi32(s2, s3));
    return _mm_add_epi32(_mm_unpacklo_epi64(s01, s23), _mm_unpackhi_epi64(s01, s23));
}

// The four 16-value sub-block sums of NVFP4 block x against Q8_0 blocks a[0], a[1], as lanes
// 0..3. Sub-block s's codes are its 8 bytes' low nibbles, then their high nibbles.
template <class Arch>
QK_SSE4_2_INLINE __m128i nvfp4_sums(const block_nvfp4& x, const block_q8_0* a, __m128i values) noexcept
{
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i ones = _mm_set1_epi16(1);
    __m128i s[4];
    for (std::size_t h = 0; h < 2; ++h) {
        const __m128i bytes = load16<Arch>(x.qs.data() + 16 * h);
        const __m128i lo = _mm_and_si128(bytes, mask);
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
        const __m128i w0 = _mm_shuffle_epi8(values, _mm_unpacklo_epi64(lo, hi));
        const __m128i w1 = _mm_shuffle_epi8(values, _mm_unpackhi_epi64(lo, hi));
        s[2 * h] = _mm_madd_epi16(pair_sums<Arch>(w0, load16<Arch>(a[h].qs.data())), ones);
        s[2 * h + 1] = _mm_madd_epi16(pair_sums<Arch>(w1, load16<Arch>(a[h].qs.data() + 16)), ones);
    }
    return reduce4<Arch>(s[0], s[1], s[2], s[3]);
}

template <class Arch>
QK_SSE4_2_INLINE int reduce_i32(__m128i s) noexcept
{
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

template <class Arch>
QK_SSE4_2_INLINE float reduce_ps(__m128 v) noexcept
{
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_shuffle_ps(v, v, 1));
    return _mm_cvtss_f32(v);
}

// The 16-bit scale bits `d` of four consecutive blocks, packed into 64 bits.
template <class Arch, class Block>
QK_SSE4_2_INLINE std::uint64_t scale_bits4(const Block* x) noexcept
{
    return std::uint64_t{x[0].d} | (std::uint64_t{x[1].d} << 16) | (std::uint64_t{x[2].d} << 32) | (std::uint64_t{x[3].d} << 48);
}

// Whether the four fp16 values packed in `bits` are all normal numbers (exponent field neither
// 0 nor 31), tested on all four at once in the integer units.
template <class Arch>
QK_SSE4_2_INLINE bool all_normal(std::uint64_t bits) noexcept
{
    constexpr std::uint64_t lanes = 0x0001000100010001u;
    const std::uint64_t exponents = bits & (0x7c00u * lanes);
    // Per 16-bit lane (no carries between lanes): bit 15 of exponent + 0x7c00 is clear only for
    // exponent 0, and bit 15 of exponent + 0x0400 is set only for exponent 31.
    const std::uint64_t special = (~(exponents + 0x7c00u * lanes) | (exponents + 0x0400u * lanes)) & (0x8000u * lanes);
    return special == 0;
}

// The four fp16 values packed in `bits` (the first in the low 16 bits) as floats, exactly as
// fp16_to_fp32. Normal values (nearly every scale) are rebiased in the vector unit; zero,
// subnormal, infinite and NaN ones go through fp16_to_fp32. The packed tile kernel
// (packed/sse4_2.hpp) converts its weight scales here too.
template <class Arch>
QK_SSE4_2_INLINE __m128 fp16x4_to_fp32(std::uint64_t bits) noexcept
{
    if (all_normal<Arch>(bits)) [[likely]] {
        // Each half in the upper 16 bits of a 32-bit lane; the arithmetic shift by 3 puts the
        // exponent and mantissa in place and leaves the sign on top (its copies are masked off);
        // adding 112 to the exponent rebiases it from 15 to 127.
        const __m128i upper = _mm_unpacklo_epi16(_mm_setzero_si128(), _mm_set_epi64x(0, static_cast<long long>(bits)));
        const __m128i shifted = _mm_and_si128(_mm_srai_epi32(upper, 3), _mm_set1_epi32(static_cast<int>(0x8fffffffu)));
        return _mm_castsi128_ps(_mm_add_epi32(shifted, _mm_set1_epi32(112 << 23)));
    }
    return _mm_setr_ps(fp16_to_fp32(static_cast<fp16_bits>(bits)), fp16_to_fp32(static_cast<fp16_bits>(bits >> 16)),
                       fp16_to_fp32(static_cast<fp16_bits>(bits >> 32)), fp16_to_fp32(static_cast<fp16_bits>(bits >> 48)));
}

// The four fp16 scales of consecutive blocks as floats.
template <class Arch, class Block>
QK_SSE4_2_INLINE __m128 scales4(const Block* x) noexcept
{
    return fp16x4_to_fp32<Arch>(scale_bits4<Arch>(x));
}

// The eight IQ4_XS group multipliers ls - 32 of a superblock as int16 lanes 0..7.
template <class Arch>
QK_SSE4_2_INLINE __m128i group_multipliers(const block_iq4_xs& x) noexcept
{
    // Bytes 0-7 of the block: d (2), scales_h (2), scales_l (4).
    const __m128i header = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(&x));
    static_assert(offsetof(block_iq4_xs, scales_h) == 2 && offsetof(block_iq4_xs, scales_l) == 4);
    // Lane g: scales_l[g / 2], then its low nibble for even g, high nibble for odd g (the even
    // lanes are first shifted up by 4 with a multiply, so that one shift right serves both).
    const __m128i low_bytes = _mm_shuffle_epi8(header, _mm_setr_epi8(4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1));
    const __m128i low = _mm_and_si128(_mm_srli_epi16(_mm_mullo_epi16(low_bytes, _mm_setr_epi16(16, 1, 16, 1, 16, 1, 16, 1)), 4), _mm_set1_epi16(0x0f));
    // Lane g: scales_h, shifted left by 14 - 2g (a multiply) to put bits 2g, 2g+1 on top, then
    // right by 10 to bits 4 and 5.
    const __m128i high_bits = _mm_shuffle_epi8(header, _mm_setr_epi8(2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3));
    const __m128i high = _mm_and_si128(
        _mm_srli_epi16(_mm_mullo_epi16(high_bits, _mm_setr_epi16(1 << 14, 1 << 12, 1 << 10, 1 << 8, 1 << 6, 1 << 4, 1 << 2, 1)), 10),
        _mm_set1_epi16(0x30));
    return _mm_sub_epi16(_mm_or_si128(low, high), _mm_set1_epi16(32));
}

// Per group g, the bytes that broadcast int16 lane g of group_multipliers to all lanes with pshufb.
alignas(16) inline constexpr std::array<std::array<std::int8_t, 16>, 8> group_broadcast = [] {
    std::array<std::array<std::int8_t, 16>, 8> masks{};
    for (std::size_t g = 0; g < 8; ++g) {
        for (std::size_t j = 0; j < 16; ++j) {
            masks[g][j] = static_cast<std::int8_t>(2 * g + j % 2);
        }
    }
    return masks;
}();

// Group g of an IQ4_XS superblock (codes, q8: its qs arrays), with multipliers m
// (group_multipliers): 4 int32 lanes that sum to (ls_g - 32) * the group's exact integer dot.
template <class Arch>
QK_SSE4_2_INLINE __m128i group_sum(const std::uint8_t* codes, const std::int8_t* q8, __m128i values, __m128i m, std::size_t g) noexcept
{
    const __m128i bytes = load16<Arch>(codes + 16 * g);
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i w_lo = _mm_shuffle_epi8(values, _mm_and_si128(bytes, mask));
    const __m128i w_hi = _mm_shuffle_epi8(values, _mm_and_si128(_mm_srli_epi16(bytes, 4), mask));
    const __m128i multiplier = _mm_shuffle_epi8(m, load16<Arch>(group_broadcast[g].data()));
    const __m128i lo = _mm_madd_epi16(pair_sums<Arch>(w_lo, load16<Arch>(q8 + 32 * g)), multiplier);
    const __m128i hi = _mm_madd_epi16(pair_sums<Arch>(w_hi, load16<Arch>(q8 + 32 * g + 16)), multiplier);
    return _mm_add_epi32(lo, hi);
}

// The kernels' result when finite, else the reference's: infinite or NaN scales, or overflow,
// give a non-finite result, and whether it is inf or NaN depends on the order of the sum. Such
// rows are recomputed by the reference, once, outside the hot loop.
template <class Arch, class Block, class Activation>
QK_SSE4_2_INLINE float finite_or_reference(float sum, const Block* w, const Activation* a, std::size_t blocks) noexcept
{
    if (std::isfinite(sum)) [[likely]] {
        return sum;
    }
    return dot<Arch>(w, a, blocks, arch::generic{});
}

// The split kernels' products (as dot/avx2.hpp's): 16 code bytes' low nibbles through the grid
// biased by +12 (mxfp4_biased_values, in `table`) times the 16 activations at `first`, their high
// nibbles times those at `last`, as 4 int32 sums (of 4 bytes each). Two pair sums add up in
// int16: at most 2 * 2 * 24 * 127.
template <class Arch>
QK_SSE4_2_INLINE __m128i biased_nibble_sums(__m128i codes, __m128i table, const std::byte* first, const std::byte* last) noexcept
{
    static_assert(2 * 2 * 2 * mxfp4_value_bias * 127 <= 32767);
    const __m128i nibble = _mm_set1_epi8(0x0f);
    const __m128i low = _mm_shuffle_epi8(table, _mm_and_si128(codes, nibble));
    const __m128i high = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(codes, 4), nibble));
    const __m128i pairs = _mm_add_epi16(_mm_maddubs_epi16(low, load16<Arch>(first)), _mm_maddubs_epi16(high, load16<Arch>(last)));
    return _mm_madd_epi16(pairs, _mm_set1_epi16(1));
}

#undef QK_SSE4_2_INLINE

} // namespace qk::kernels::sse4_2_detail

namespace qk::kernels {

template <class Arch>
QK_TARGET_SSE4_2 float dot(const block_q8_0* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::sse4_2>) noexcept
{
    namespace k = sse4_2_detail;
    __m128 acc = _mm_setzero_ps();
    std::size_t b = 0;
    for (; b + 4 <= blocks; b += 4) {
        const __m128i s0 = k::dot_q8<Arch>(w[b].qs.data(), a[b].qs.data());
        const __m128i s1 = k::dot_q8<Arch>(w[b + 1].qs.data(), a[b + 1].qs.data());
        const __m128i s2 = k::dot_q8<Arch>(w[b + 2].qs.data(), a[b + 2].qs.data());
        const __m128i s3 = k::dot_q8<Arch>(w[b + 3].qs.data(), a[b + 3].qs.data());
        const __m128 d = _mm_mul_ps(k::scales4<Arch>(w + b), k::scales4<Arch>(a + b));
        acc = _mm_add_ps(acc, _mm_mul_ps(d, _mm_cvtepi32_ps(k::reduce4<Arch>(s0, s1, s2, s3))));
    }
    float sum = k::reduce_ps<Arch>(acc);
    for (; b < blocks; ++b) {
        const int sumi = k::reduce_i32<Arch>(k::dot_q8<Arch>(w[b].qs.data(), a[b].qs.data()));
        sum += fp16_to_fp32(w[b].d) * fp16_to_fp32(a[b].d) * static_cast<float>(sumi);
    }
    return k::finite_or_reference<Arch>(sum, w, a, blocks);
}

template <class Arch>
QK_TARGET_SSE4_2 float dot(const block_mxfp4* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::sse4_2>) noexcept
{
    namespace k = sse4_2_detail;
    const __m128i values = k::load16<Arch>(mxfp4_values.data());
    const float* e8m0 = e8m0_half_table.data();
    __m128 acc = _mm_setzero_ps();
    std::size_t b = 0;
    for (; b + 4 <= blocks; b += 4) {
        const __m128i s0 = k::dot_nibbles<Arch>(w[b].qs.data(), a[b].qs.data(), values);
        const __m128i s1 = k::dot_nibbles<Arch>(w[b + 1].qs.data(), a[b + 1].qs.data(), values);
        const __m128i s2 = k::dot_nibbles<Arch>(w[b + 2].qs.data(), a[b + 2].qs.data(), values);
        const __m128i s3 = k::dot_nibbles<Arch>(w[b + 3].qs.data(), a[b + 3].qs.data(), values);
        const __m128 scale_w = _mm_setr_ps(e8m0[w[b].e], e8m0[w[b + 1].e], e8m0[w[b + 2].e], e8m0[w[b + 3].e]);
        const __m128 d = _mm_mul_ps(scale_w, k::scales4<Arch>(a + b));
        acc = _mm_add_ps(acc, _mm_mul_ps(d, _mm_cvtepi32_ps(k::reduce4<Arch>(s0, s1, s2, s3))));
    }
    float sum = k::reduce_ps<Arch>(acc);
    for (; b < blocks; ++b) {
        const int sumi = k::reduce_i32<Arch>(k::dot_nibbles<Arch>(w[b].qs.data(), a[b].qs.data(), values));
        sum += e8m0[w[b].e] * fp16_to_fp32(a[b].d) * static_cast<float>(sumi);
    }
    return k::finite_or_reference<Arch>(sum, w, a, blocks);
}

// Two NVFP4 blocks (four Q8_0 blocks) per iteration, so that the activation scales convert four
// at a time; the UE4M3 scales come from their table.
template <class Arch>
QK_TARGET_SSE4_2 float dot(const block_nvfp4* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::sse4_2>) noexcept
{
    namespace k = sse4_2_detail;
    const __m128i values = k::load16<Arch>(mxfp4_values.data());
    const float* ue4m3 = ue4m3_half_table.data();
    __m128 acc = _mm_setzero_ps();
    std::size_t b = 0;
    for (; b + 2 <= blocks; b += 2) {
        const __m128 da = k::scales4<Arch>(a + 2 * b);
        const __m128 d0 = _mm_setr_ps(ue4m3[w[b].d[0]], ue4m3[w[b].d[1]], ue4m3[w[b].d[2]], ue4m3[w[b].d[3]]);
        const __m128 d1 = _mm_setr_ps(ue4m3[w[b + 1].d[0]], ue4m3[w[b + 1].d[1]], ue4m3[w[b + 1].d[2]], ue4m3[w[b + 1].d[3]]);
        const __m128 s0 = _mm_cvtepi32_ps(k::nvfp4_sums<Arch>(w[b], a + 2 * b, values));
        const __m128 s1 = _mm_cvtepi32_ps(k::nvfp4_sums<Arch>(w[b + 1], a + 2 * b + 2, values));
        acc = _mm_add_ps(acc, _mm_mul_ps(_mm_mul_ps(d0, _mm_unpacklo_ps(da, da)), s0));
        acc = _mm_add_ps(acc, _mm_mul_ps(_mm_mul_ps(d1, _mm_unpackhi_ps(da, da)), s1));
    }
    if (b < blocks) {
        const float a0 = fp16_to_fp32(a[2 * b].d);
        const float a1 = fp16_to_fp32(a[2 * b + 1].d);
        const __m128 d = _mm_setr_ps(ue4m3[w[b].d[0]] * a0, ue4m3[w[b].d[1]] * a0, ue4m3[w[b].d[2]] * a1, ue4m3[w[b].d[3]] * a1);
        acc = _mm_add_ps(acc, _mm_mul_ps(d, _mm_cvtepi32_ps(k::nvfp4_sums<Arch>(w[b], a + 2 * b, values))));
    }
    return k::finite_or_reference<Arch>(k::reduce_ps<Arch>(acc), w, a, blocks);
}

// MXFP4 rows against activations laid out by split_activations (mat-vec's path on this tag), as
// on avx2 (dot/avx2.hpp) with one block per register: lane m of the layout's register t is block
// 4t + m, so the four blocks m, 4 + m, 8 + m, 12 + m reduce to lanes 4m to 4m + 3 of its sums.
// Mat-vec 14336 x 4096 from memory with this tag on Zen 5, against the row kernel above in one
// process: 1.32-1.34x at one thread; NVFP4's below 1.53-1.56x. The loops must be unrolled: left
// to g++ 12 they stay loops, and the kernels ran 0.8-1.0x the row kernels.
template <class Arch>
QK_TARGET_SSE4_2 float dot(const block_mxfp4* w, split_activations<block_mxfp4> a, std::size_t blocks, arch::requires_arch<arch::sse4_2>) noexcept
{
    namespace k = sse4_2_detail;
    constexpr std::size_t step_blocks = split_activations<block_mxfp4>::step_blocks;
    const __m128i table = k::load16<Arch>(mxfp4_biased_values.data());
    const __m128i bias = _mm_set1_epi32(mxfp4_value_bias);
    const float* e8m0 = e8m0_half_table.data();
    __m128 acc = _mm_setzero_ps();
    const std::size_t full = blocks - blocks % step_blocks;
    const std::byte* activations = a.steps;
    for (std::size_t b = 0; b < full; b += step_blocks, activations += split_activations<block_mxfp4>::step_bytes) {
        const block_mxfp4* step = w + b;
#pragma GCC unroll 4
        for (std::size_t m = 0; m < 4; ++m) {
            __m128i q[4];
#pragma GCC unroll 4
            for (std::size_t t = 0; t < 4; ++t) {
                const std::byte* first = activations + 128 * t + 16 * m;
                q[t] = k::biased_nibble_sums<Arch>(k::load16<Arch>(step[4 * t + m].qs.data()), table, first, first + 64);
            }
            const __m128i code_sums = k::load16<Arch>(activations + 512 + 16 * m);
            const __m128i exact = _mm_sub_epi32(k::reduce4<Arch>(q[0], q[1], q[2], q[3]), _mm_mullo_epi32(code_sums, bias));
            const __m128 scale_w = _mm_setr_ps(e8m0[step[m].e], e8m0[step[4 + m].e], e8m0[step[8 + m].e], e8m0[step[12 + m].e]);
            const __m128 scale_a = _mm_loadu_ps(reinterpret_cast<const float*>(activations + 576) + 4 * m);
            acc = _mm_add_ps(acc, _mm_mul_ps(_mm_mul_ps(scale_w, scale_a), _mm_cvtepi32_ps(exact)));
        }
    }
    // The last 0-15 blocks: the row kernel above.
    const float sum = k::reduce_ps<Arch>(acc) + dot<Arch>(w + full, a.blocks + full, blocks - full, arch::sse4_2{});
    return k::finite_or_reference<Arch>(sum, w, a.blocks, blocks);
}

// NVFP4 rows against activations laid out by split_activations, as on avx2: half h of a block's
// codes (sub-blocks 2h and 2h + 1) per register; phaddd pairs block b with block b + 2 into lanes
// in the layout's order. The layout's activation scales carry a factor 128 (for the AVX2 and
// AVX-512 kernels' UE4M3 conversion): taken off exactly before the product with the table's scale.
template <class Arch>
QK_TARGET_SSE4_2 float dot(const block_nvfp4* w, split_activations<block_nvfp4> a, std::size_t blocks, arch::requires_arch<arch::sse4_2>) noexcept
{
    namespace k = sse4_2_detail;
    constexpr std::size_t step_blocks = split_activations<block_nvfp4>::step_blocks;
    const __m128i table = k::load16<Arch>(mxfp4_biased_values.data());
    const __m128i bias = _mm_set1_epi32(mxfp4_value_bias);
    const float* ue4m3 = ue4m3_half_table.data();
    __m128 acc = _mm_setzero_ps();
    const std::size_t full = blocks - blocks % step_blocks;
    const std::byte* activations = a.steps;
    for (std::size_t b = 0; b < full; b += step_blocks, activations += split_activations<block_nvfp4>::step_bytes) {
        const block_nvfp4* step = w + b;
        // Lanes 4g to 4g + 3 of the layout: sub-blocks 2h and 2h + 1 of blocks c and c + 2, for
        // c = g / 2 and h = g % 2.
#pragma GCC unroll 4
        for (std::size_t g = 0; g < 4; ++g) {
            const std::size_t c = g / 2;
            const std::size_t h = g % 2;
            __m128i q[2];
#pragma GCC unroll 2
            for (std::size_t i = 0; i < 2; ++i) {
                const std::size_t block = c + 2 * i;
                const std::byte* first = activations + 128 * (block / 2) + 32 * (block % 2) + 16 * h;
                q[i] = k::biased_nibble_sums<Arch>(k::load16<Arch>(step[block].qs.data() + 16 * h), table, first, first + 64);
            }
            const __m128i code_sums = k::load16<Arch>(activations + 256 + 16 * g);
            const __m128i exact = _mm_sub_epi32(_mm_hadd_epi32(q[0], q[1]), _mm_mullo_epi32(code_sums, bias));
            const __m128 scale_w = _mm_setr_ps(ue4m3[step[c].d[2 * h]], ue4m3[step[c].d[2 * h + 1]], ue4m3[step[c + 2].d[2 * h]],
                                               ue4m3[step[c + 2].d[2 * h + 1]]);
            const __m128 scale_a = _mm_mul_ps(_mm_loadu_ps(reinterpret_cast<const float*>(activations + 320) + 4 * g), _mm_set1_ps(0x1p-7f));
            acc = _mm_add_ps(acc, _mm_mul_ps(_mm_mul_ps(scale_w, scale_a), _mm_cvtepi32_ps(exact)));
        }
    }
    // The last 0-3 blocks: the row kernel above.
    const float sum = k::reduce_ps<Arch>(acc) + dot<Arch>(w + full, a.blocks + 2 * full, blocks - full, arch::sse4_2{});
    return k::finite_or_reference<Arch>(sum, w, a.blocks, blocks);
}

template <class Arch>
QK_TARGET_SSE4_2 float dot(const block_iq4_nl* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::sse4_2>) noexcept
{
    namespace k = sse4_2_detail;
    const __m128i values = k::load16<Arch>(iq4_values.data());
    __m128 acc = _mm_setzero_ps();
    std::size_t b = 0;
    for (; b + 4 <= blocks; b += 4) {
        const __m128i s0 = k::dot_nibbles<Arch>(w[b].qs.data(), a[b].qs.data(), values);
        const __m128i s1 = k::dot_nibbles<Arch>(w[b + 1].qs.data(), a[b + 1].qs.data(), values);
        const __m128i s2 = k::dot_nibbles<Arch>(w[b + 2].qs.data(), a[b + 2].qs.data(), values);
        const __m128i s3 = k::dot_nibbles<Arch>(w[b + 3].qs.data(), a[b + 3].qs.data(), values);
        const __m128 d = _mm_mul_ps(k::scales4<Arch>(w + b), k::scales4<Arch>(a + b));
        acc = _mm_add_ps(acc, _mm_mul_ps(d, _mm_cvtepi32_ps(k::reduce4<Arch>(s0, s1, s2, s3))));
    }
    float sum = k::reduce_ps<Arch>(acc);
    for (; b < blocks; ++b) {
        const int sumi = k::reduce_i32<Arch>(k::dot_nibbles<Arch>(w[b].qs.data(), a[b].qs.data(), values));
        sum += fp16_to_fp32(w[b].d) * fp16_to_fp32(a[b].d) * static_cast<float>(sumi);
    }
    return k::finite_or_reference<Arch>(sum, w, a, blocks);
}

template <class Arch>
QK_TARGET_SSE4_2 float dot(const block_iq4_xs* w, const block_q8_K* a, std::size_t blocks, arch::requires_arch<arch::sse4_2>) noexcept
{
    namespace k = sse4_2_detail;
    const __m128i values = k::load16<Arch>(iq4_values.data());
    __m128 acc = _mm_setzero_ps();
    for (std::size_t b = 0; b < blocks; ++b) {
        const __m128i m = k::group_multipliers<Arch>(w[b]);
        const std::uint8_t* codes = w[b].qs.data();
        const std::int8_t* q8 = a[b].qs.data();
        // Each group's int32 lanes are below 4 * 2^15 * 32 = 2^22 in magnitude, so the sum of the
        // eight groups is exact, and rounded only above 2^24 when converted to float.
        __m128i sum0 = k::group_sum<Arch>(codes, q8, values, m, 0);
        __m128i sum1 = k::group_sum<Arch>(codes, q8, values, m, 1);
        sum0 = _mm_add_epi32(sum0, k::group_sum<Arch>(codes, q8, values, m, 2));
        sum1 = _mm_add_epi32(sum1, k::group_sum<Arch>(codes, q8, values, m, 3));
        sum0 = _mm_add_epi32(sum0, k::group_sum<Arch>(codes, q8, values, m, 4));
        sum1 = _mm_add_epi32(sum1, k::group_sum<Arch>(codes, q8, values, m, 5));
        sum0 = _mm_add_epi32(sum0, k::group_sum<Arch>(codes, q8, values, m, 6));
        sum1 = _mm_add_epi32(sum1, k::group_sum<Arch>(codes, q8, values, m, 7));
        const __m128 scale = _mm_set1_ps(fp16_to_fp32(w[b].d) * a[b].d);
        acc = _mm_add_ps(acc, _mm_mul_ps(scale, _mm_cvtepi32_ps(_mm_add_epi32(sum0, sum1))));
    }
    return k::finite_or_reference<Arch>(k::reduce_ps<Arch>(acc), w, a, blocks);
}

} // namespace qk::kernels

#endif // QK_HAS_X86_KERNELS
