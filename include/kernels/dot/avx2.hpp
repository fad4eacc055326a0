// The dot products on the AVX2 tag (with FMA and F16C, which every AVX2 CPU has): Q8_0, MXFP4,
// NVFP4 and IQ4_NL against Q8_0, IQ4_XS against Q8_K, and MXFP4 and NVFP4 rows against activations
// laid out by split_activations (mat-vec's path). Included by dot.hpp and checked against
// dot/generic.hpp; the AVX-512 tags have kernels of their own, which take their tails here.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../arch.hpp"
#include "../e8m0.hpp"
#include "../formats.hpp"
#include "../prefetch.hpp"
#include "../target.hpp"
#include "generic.hpp"
#include "split_activations.hpp"

#if QK_HAS_X86_KERNELS
#include <immintrin.h>

// Technique, shared by the four kernels: weights and activations are multiplied as int8 pairs with
// vpmaddubsw, which needs one unsigned operand: |w| (up to 128 as an unsigned byte) times the
// activation with w's sign moved onto it (vpsignb). Two adjacent products sum to at most
// 2 * 128 * 127 < 2^15, so the int16 results are exact for any weight byte and any activation in
// [-127, 127], the range of the Q8_0 and Q8_K quantizers. vpmaddwd then widens to int32: with
// ones, or for IQ4_XS with the group multiplier ls - 32, so that a superblock's eight groups add up
// in integers and are converted to float once. 4-bit codes are decoded with vpshufb through the
// 16-entry value table. 32-value blocks go four at a time: their int32 lanes are folded pairwise
// so that each lane holds an exact part of one block's sum, converted to float and multiplied by
// that block's scale with FMA. The scales' fp16 bits are gathered with scalar loads (the integer
// units are otherwise idle) and converted four at a time with F16C. A non-finite result (infinite
// or NaN scales, overflow) is recomputed by the reference, so that inf and NaN come out as there.
namespace qk::kernels::avx2_detail {

// Helpers are templates on the calling tag, like the kernels, and always inlined into them.
#define QK_AVX2_INLINE [[gnu::always_inline]] QK_TARGET_AVX2 inline

template <class Arch>
QK_AVX2_INLINE __m256i load32(const void* p) noexcept
{
    return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// The exact int16 pair sums of 32 int8 products w * a; w any int8, a in [-127, 127].
template <class Arch>
QK_AVX2_INLINE __m256i pair_sums(__m256i w, __m256i a) noexcept
{
    return _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(a, w));
}

// The exact int32 partial sums (8 lanes) of 32 int8 products w * a.
template <class Arch>
QK_AVX2_INLINE __m256i dot_i8(__m256i w, __m256i a) noexcept
{
    return _mm256_madd_epi16(pair_sums<Arch>(w, a), _mm256_set1_epi16(1));
}

// The 16-entry table in both 128-bit lanes.
template <class Arch>
QK_AVX2_INLINE __m256i table(const std::array<std::int8_t, 16>& values) noexcept
{
    return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values.data())));
}

// 32 4-bit codes (16 bytes: element j in the low nibble of byte j, element j + 16 in its high
// nibble) decoded through `values` (table<Arch>()), in element order.
template <class Arch>
QK_AVX2_INLINE __m256i decode_nibbles(const std::uint8_t* codes, __m256i values) noexcept
{
    // Both lanes hold the 16 bytes; the upper one is shifted by 4 to bring the high nibbles down.
    const __m256i bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
    const __m256i shifted = _mm256_srlv_epi64(bytes, _mm256_set_epi64x(4, 4, 0, 0));
    return _mm256_shuffle_epi8(values, _mm256_and_si256(shifted, _mm256_set1_epi8(0x0f)));
}

// The 16-bit scale bits `d` of four consecutive blocks, packed into 64 bits.
template <class Arch, class Block>
QK_AVX2_INLINE std::uint64_t scale_bits4(const Block* x) noexcept
{
    return std::uint64_t{x[0].d} | (std::uint64_t{x[1].d} << 16) | (std::uint64_t{x[2].d} << 32) | (std::uint64_t{x[3].d} << 48);
}

// The fp16 scales of four consecutive blocks as floats.
template <class Arch, class Block>
QK_AVX2_INLINE __m128 scales4(const Block* x) noexcept
{
    return _mm_cvtph_ps(_mm_set_epi64x(0, static_cast<long long>(scale_bits4<Arch>(x))));
}

template <class Arch>
QK_AVX2_INLINE float half(std::uint16_t h) noexcept
{
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

// acc0/acc1 += the four blocks' int32 partial sums s0..s3 times their scales d (lanes 0..3).
// Folding s0 with s1 (and s2 with s3) leaves lanes [s0 s1 s0 s1 | s0 s1 s0 s1], each an exact
// sum of 8 products, so the scales are d0 d1 d0 d1 in both halves.
template <class Arch>
QK_AVX2_INLINE void accumulate4(__m256& acc0, __m256& acc1, __m256i s0, __m256i s1, __m256i s2, __m256i s3, __m128 d) noexcept
{
    const __m256i s01 = _mm256_add_epi32(_mm256_unpacklo_epi32(s0, s1), _mm256_unpackhi_epi32(s0, s1));
    const __m256i s23 = _mm256_add_epi32(_mm256_unpacklo_epi32(s2, s3), _mm256_unpackhi_epi32(s2, s3));
    const __m256 dd = _mm256_set_m128(d, d);
    acc0 = _mm256_fmadd_ps(_mm256_permute_ps(dd, 0x44), _mm256_cvtepi32_ps(s01), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_permute_ps(dd, 0xee), _mm256_cvtepi32_ps(s23), acc1);
}

// The sum of the 8 int32 lanes of s.
template <class Arch>
QK_AVX2_INLINE int reduce_i32(__m256i s) noexcept
{
    __m128i v = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    v = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 1));
    return _mm_cvtsi128_si32(v);
}

template <class Arch>
QK_AVX2_INLINE float reduce_ps(__m256 v) noexcept
{
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

// Per group g of an IQ4_XS superblock, the bytes that broadcast its 16-bit multiplier (see
// group_multipliers) to every 16-bit lane with vpshufb.
alignas(32) inline constexpr std::array<std::array<std::int8_t, 32>, 8> group_broadcast = [] {
    std::array<std::array<std::int8_t, 32>, 8> masks{};
    for (std::size_t g = 0; g < 8; ++g) {
        for (std::size_t j = 0; j < 32; ++j) {
            masks[g][j] = static_cast<std::int8_t>(2 * g + j % 2);
        }
    }
    return masks;
}();

// The eight multipliers ls - 32 of an IQ4_XS superblock as int16, in both 128-bit lanes.
template <class Arch>
QK_AVX2_INLINE __m256i group_multipliers(const block_iq4_xs& x) noexcept
{
    std::uint32_t low;
    std::memcpy(&low, x.scales_l.data(), sizeof low);
    const std::uint32_t high = x.scales_h;
    // Lane g (32 bits): bits 0-3 of ls from nibble g of scales_l, bits 4-5 from bits 2g, 2g+1 of scales_h.
    const __m256i nibbles = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(low)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    const __m256i highs = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(high << 4)), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    const __m256i ls = _mm256_or_si256(_mm256_and_si256(nibbles, _mm256_set1_epi32(0x0f)), _mm256_and_si256(highs, _mm256_set1_epi32(0x30)));
    const __m256i multipliers = _mm256_sub_epi32(ls, _mm256_set1_epi32(32));
    // int16 [m0 m1 m2 m3 m0 m1 m2 m3 | m4 m5 m6 m7 m4 m5 m6 m7], then m0..m7 in both lanes.
    return _mm256_permute4x64_epi64(_mm256_packs_epi32(multipliers, multipliers), 0x88);
}

// Group g of an IQ4_XS superblock (codes, q8: its qs arrays), with multipliers m
// (group_multipliers): 8 int32 lanes that sum to (ls_g - 32) * the group's exact integer dot.
template <class Arch>
QK_AVX2_INLINE __m256i group_sum(const std::uint8_t* codes, const std::int8_t* q8, __m256i values, __m256i m, std::size_t g) noexcept
{
    const __m256i products = pair_sums<Arch>(decode_nibbles<Arch>(codes + 16 * g, values), load32<Arch>(q8 + 32 * g));
    return _mm256_madd_epi16(products, _mm256_shuffle_epi8(m, load32<Arch>(group_broadcast[g].data())));
}

// For NVFP4: the UE4M3 scale bytes bytes[0..7] (the low 64 bits) as floats, divided by 128. Each
// byte's low seven bits, shifted left by 7, are an fp16 with the same exponent and mantissa fields
// (subnormals included), whose value is ue4m3_half / 2^7; F16C converts them exactly, and the 2^7
// is put back on the activation scales (an exact power-of-two product). 0x7F, E4M3's NaN, reads as
// 0 (as the reference); its twin 0xFF, with bit 7 set, is 240.
template <class Arch>
QK_AVX2_INLINE __m256 ue4m3_half8_div128(__m128i bytes) noexcept
{
    const __m128i h = _mm_cvtepu8_epi16(bytes);
    const __m128i nan = _mm_cmpeq_epi16(h, _mm_set1_epi16(0x7f));
    return _mm256_cvtph_ps(_mm_andnot_si128(nan, _mm_slli_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7f)), 7)));
}

// The E2M1 codes of NVFP4 sub-blocks 2h and 2h + 1 (qs[16h .. 16h + 15]; byte 8s + j holds
// element 16s + j low and 16s + j + 8 high) decoded through `values`, in element order: vpermq puts
// each sub-block's 8 bytes in both halves of its 128-bit lane, the upper half shifted by 4.
template <class Arch>
QK_AVX2_INLINE __m256i decode_nvfp4_half(const std::uint8_t* qs, __m256i values, std::size_t h) noexcept
{
    const __m256i row = load32<Arch>(qs);
    const __m256i bytes = h == 0 ? _mm256_permute4x64_epi64(row, 0x50) : _mm256_permute4x64_epi64(row, 0xfa);
    const __m256i shifted = _mm256_srlv_epi64(bytes, _mm256_set_epi64x(4, 0, 4, 0));
    return _mm256_shuffle_epi8(values, _mm256_and_si256(shifted, _mm256_set1_epi8(0x0f)));
}

// The kernels' result when finite, else the reference's. Infinite or NaN scales, or overflow, give
// a non-finite result, and whether inf or NaN can differ from the reference (inf * 0 is NaN, and
// these kernels scale parts of a block's sum and add in another order). Such rows are recomputed
// by the reference, once, outside the hot loop.
template <class Arch, class Block, class Activation>
QK_AVX2_INLINE float finite_or_reference(float sum, const Block* w, const Activation* a, std::size_t blocks) noexcept
{
    if (std::isfinite(sum)) [[likely]] {
        return sum;
    }
    return dot<Arch>(w, a, blocks, arch::generic{});
}

#undef QK_AVX2_INLINE

} // namespace qk::kernels::avx2_detail

namespace qk::kernels {

namespace avx2_detail {
// How far ahead of four Q8_0 blocks their row is prefetched, into L1 (past the row's end: the next
// row's lines, which a mat-vec reads next). Mat-vec 14336 x 4096 from memory on Zen 5 with the avx2
// tag, over the same buffers with the distance set at run time, medians of 12 passes as fractions
// of a streaming pass just before each: 0.85-0.89 without, 0.93 with 4 KiB, 0.90 with 8 KiB at one
// thread; 0.93, 1.02, 0.98 at two. (The 4-bit formats' AVX2 kernels, at 0.41-0.53 of the read,
// are bound by their arithmetic: prefetches moved them by 0.01-0.05.)
inline constexpr std::size_t q8_0_prefetch_distance = 4096;
} // namespace avx2_detail

template <class Arch>
QK_TARGET_AVX2 float dot(const block_q8_0* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::avx2>) noexcept
{
    namespace k = avx2_detail;
    __m256 acc0 = _mm256_setzero_ps();
    __m256 acc1 = _mm256_setzero_ps();
    // Whole groups of four first, then the 0-3 blocks left: the tail's bounds are computed from
    // blocks alone (not from where the first loop stopped), so the compiler sees b < blocks there.
    const std::size_t full = blocks - blocks % 4;
    for (std::size_t b = 0; b < full; b += 4) {
        // Four blocks are 136 bytes: three lines' worth, step after step, covers the row.
        qk::detail::prefetch_lines(w + b, k::q8_0_prefetch_distance, 3 * 64);
        const __m256i s0 = k::dot_i8<Arch>(k::load32<Arch>(w[b].qs.data()), k::load32<Arch>(a[b].qs.data()));
        const __m256i s1 = k::dot_i8<Arch>(k::load32<Arch>(w[b + 1].qs.data()), k::load32<Arch>(a[b + 1].qs.data()));
        const __m256i s2 = k::dot_i8<Arch>(k::load32<Arch>(w[b + 2].qs.data()), k::load32<Arch>(a[b + 2].qs.data()));
        const __m256i s3 = k::dot_i8<Arch>(k::load32<Arch>(w[b + 3].qs.data()), k::load32<Arch>(a[b + 3].qs.data()));
        const __m128 d = _mm_mul_ps(k::scales4<Arch>(w + b), k::scales4<Arch>(a + b));
        k::accumulate4<Arch>(acc0, acc1, s0, s1, s2, s3, d);
    }
    float sum = k::reduce_ps<Arch>(_mm256_add_ps(acc0, acc1));
    for (std::size_t b = full; b < blocks; ++b) {
        const int sumi = k::reduce_i32<Arch>(k::dot_i8<Arch>(k::load32<Arch>(w[b].qs.data()), k::load32<Arch>(a[b].qs.data())));
        sum += k::half<Arch>(w[b].d) * k::half<Arch>(a[b].d) * static_cast<float>(sumi);
    }
    return k::finite_or_reference<Arch>(sum, w, a, blocks);
}

template <class Arch>
QK_TARGET_AVX2 float dot(const block_mxfp4* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::avx2>) noexcept
{
    namespace k = avx2_detail;
    const __m256i values = k::table<Arch>(mxfp4_values);
    const float* e8m0 = e8m0_half_table.data();
    __m256 acc0 = _mm256_setzero_ps();
    __m256 acc1 = _mm256_setzero_ps();
    const std::size_t full = blocks - blocks % 4;
    for (std::size_t b = 0; b < full; b += 4) {
        const __m256i s0 = k::dot_i8<Arch>(k::decode_nibbles<Arch>(w[b].qs.data(), values), k::load32<Arch>(a[b].qs.data()));
        const __m256i s1 = k::dot_i8<Arch>(k::decode_nibbles<Arch>(w[b + 1].qs.data(), values), k::load32<Arch>(a[b + 1].qs.data()));
        const __m256i s2 = k::dot_i8<Arch>(k::decode_nibbles<Arch>(w[b + 2].qs.data(), values), k::load32<Arch>(a[b + 2].qs.data()));
        const __m256i s3 = k::dot_i8<Arch>(k::decode_nibbles<Arch>(w[b + 3].qs.data(), values), k::load32<Arch>(a[b + 3].qs.data()));
        const __m128 scale_w = _mm_setr_ps(e8m0[w[b].e], e8m0[w[b + 1].e], e8m0[w[b + 2].e], e8m0[w[b + 3].e]);
        k::accumulate4<Arch>(acc0, acc1, s0, s1, s2, s3, _mm_mul_ps(scale_w, k::scales4<Arch>(a + b)));
    }
    float sum = k::reduce_ps<Arch>(_mm256_add_ps(acc0, acc1));
    for (std::size_t b = full; b < blocks; ++b) {
        const int sumi = k::reduce_i32<Arch>(k::dot_i8<Arch>(k::decode_nibbles<Arch>(w[b].qs.data(), values), k::load32<Arch>(a[b].qs.data())));
        sum += e8m0[w[b].e] * k::half<Arch>(a[b].d) * static_cast<float>(sumi);
    }
    return k::finite_or_reference<Arch>(sum, w, a, blocks);
}

namespace avx2_detail {
// MXFP4's and NVFP4's E2M1 grid biased by +12 (mxfp4_biased_values), vpmaddubsw's unsigned operand
// in the split kernels below and packed/avx2.hpp's tiles, in both 128-bit lanes.
static_assert(2 * 2 * 2 * mxfp4_value_bias * 127 <= 32767); // biased_nibble_sums' int16 sums
template <class Arch>
[[gnu::always_inline]] QK_TARGET_AVX2 inline __m256i mxfp4_biased_table() noexcept
{
    return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(mxfp4_biased_values.data())));
}

// The split kernels' products: 32 code bytes' low nibbles through the biased grid `table` times
// the 32 activations at `first`, their high nibbles times those at `last`, as 8 int32 sums (each
// of the 8 bytes of one 64-bit lane). Two pair sums add up in int16: at most 2 * 2 * 24 * 127.
template <class Arch>
[[gnu::always_inline]] QK_TARGET_AVX2 inline __m256i biased_nibble_sums(__m256i codes, __m256i table, const std::byte* first,
                                                                       const std::byte* last) noexcept
{
    const __m256i nibble = _mm256_set1_epi8(0x0f);
    const __m256i low = _mm256_shuffle_epi8(table, _mm256_and_si256(codes, nibble));
    const __m256i high = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(codes, 4), nibble));
    const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(low, load32<Arch>(first)), _mm256_maddubs_epi16(high, load32<Arch>(last)));
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

// e8m0_half_to_fp32 of the exponents in the 8 int32 lanes of e (each 0 to 255), exactly: (e - 1) << 23
// from e = 2, the subnormals 0x00200000 << e below (the split kernel below, packed/avx2.hpp's tiles).
template <class Arch>
[[gnu::always_inline]] QK_TARGET_AVX2 inline __m256 e8m0_half8(__m256i e) noexcept
{
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i small = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(small, normal, _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1))));
}
} // namespace avx2_detail

// MXFP4 rows against activations laid out by split_activations (mat-vec's path on this tag):
// sixteen blocks per step, two per register (one per 128-bit lane), the codes' low nibbles
// against the blocks' first 16 activations and the high nibbles against the last 16, so no code
// byte is decoded twice and no activation is moved. The weights go in biased by +12 (vpmaddubsw
// takes them unsigned, with no vpabsb and vpsignb) and 12 times each block's activation sum, laid
// out with them, comes off its exact int32 sum. Three vphaddd per eight blocks leave one sum per
// block in the layout's order. The exponents are loaded one by one: a vpgatherdd of them made the
// kernel 1.2x slower. On Zen 5 against the row kernel above (mat-vec 4096 columns, one process):
// 1.44x with 256 rows in L2 (15.4 -> 22.2 GB/s), 1.38-1.41x over 14336 rows from memory.
template <class Arch>
QK_TARGET_AVX2 float dot(const block_mxfp4* w, split_activations<block_mxfp4> a, std::size_t blocks, arch::requires_arch<arch::avx2>) noexcept
{
    namespace k = avx2_detail;
    constexpr std::size_t step_blocks = split_activations<block_mxfp4>::step_blocks;
    const __m256i table = k::mxfp4_biased_table<Arch>();
    const __m256i bias = _mm256_set1_epi32(mxfp4_value_bias);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    const std::size_t full = blocks - blocks % step_blocks;
    const std::byte* activations = a.steps;
    for (std::size_t b = 0; b < full; b += step_blocks, activations += split_activations<block_mxfp4>::step_bytes) {
        const block_mxfp4* step = w + b;
#pragma GCC unroll 2
        for (std::size_t h = 0; h < 2; ++h) {
            // Half h: blocks 4j + 2h and 4j + 2h + 1 of register j, in lanes 0 and 1.
            __m256i q[4];
#pragma GCC unroll 4
            for (std::size_t j = 0; j < 4; ++j) {
                const block_mxfp4* pair = step + 4 * j + 2 * h;
                const __m256i codes = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(pair[1].qs.data()),
                                                          reinterpret_cast<const __m128i*>(pair[0].qs.data()));
                const std::byte* first = activations + 128 * j + 32 * h;
                q[j] = k::biased_nibble_sums<Arch>(codes, table, first, first + 64);
            }
            // Lane i: the block of register i % 4, 128-bit lane i / 4: sum_block(8h + i).
            const __m256i sums = _mm256_hadd_epi32(_mm256_hadd_epi32(q[0], q[1]), _mm256_hadd_epi32(q[2], q[3]));
            const __m256i code_sums = k::load32<Arch>(activations + 512 + 32 * h);
            const __m256i exact = _mm256_sub_epi32(sums, _mm256_mullo_epi32(code_sums, bias));
            const block_mxfp4* s = step + 2 * h;
            const __m256i exponents = _mm256_setr_epi32(s[0].e, s[4].e, s[8].e, s[12].e, s[1].e, s[5].e, s[9].e, s[13].e);
            const __m256 scales = _mm256_mul_ps(k::e8m0_half8<Arch>(exponents),
                                                _mm256_loadu_ps(reinterpret_cast<const float*>(activations + 576) + 8 * h));
            acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(exact), scales, acc[h]);
        }
    }
    // The last 0-15 blocks: the row kernel above.
    const float sum = k::reduce_ps<Arch>(_mm256_add_ps(acc[0], acc[1])) + dot<Arch>(w + full, a.blocks + full, blocks - full, arch::avx2{});
    return k::finite_or_reference<Arch>(sum, w, a.blocks, blocks);
}

// Two NVFP4 blocks (four Q8_0 blocks) per iteration. Each register of products covers one Q8_0
// block, two sub-blocks in its two 128-bit lanes; three vphaddd fold the four registers into one
// lane per sub-block, [b0s0 b0s2 b1s0 b1s2 | b0s1 b0s3 b1s1 b1s3] (each 16-value sum fits int16
// already, so every step is exact), and the scale bytes are shuffled into that order.
template <class Arch>
QK_TARGET_AVX2 float dot(const block_nvfp4* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::avx2>) noexcept
{
    namespace k = avx2_detail;
    const __m256i values = k::table<Arch>(mxfp4_values);
    const __m128i scale_order = _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256 acc = _mm256_setzero_ps();
    const std::size_t full = blocks - blocks % 2;
    for (std::size_t b = 0; b < full; b += 2) {
        const __m256i s0 = k::dot_i8<Arch>(k::decode_nvfp4_half<Arch>(w[b].qs.data(), values, 0), k::load32<Arch>(a[2 * b].qs.data()));
        const __m256i s1 = k::dot_i8<Arch>(k::decode_nvfp4_half<Arch>(w[b].qs.data(), values, 1), k::load32<Arch>(a[2 * b + 1].qs.data()));
        const __m256i s2 = k::dot_i8<Arch>(k::decode_nvfp4_half<Arch>(w[b + 1].qs.data(), values, 0), k::load32<Arch>(a[2 * b + 2].qs.data()));
        const __m256i s3 = k::dot_i8<Arch>(k::decode_nvfp4_half<Arch>(w[b + 1].qs.data(), values, 1), k::load32<Arch>(a[2 * b + 3].qs.data()));
        const __m256i sums = _mm256_hadd_epi32(_mm256_hadd_epi32(s0, s1), _mm256_hadd_epi32(s2, s3));
        std::uint32_t d0, d1;
        std::memcpy(&d0, w[b].d.data(), 4);
        std::memcpy(&d1, w[b + 1].d.data(), 4);
        const __m128i bytes = _mm_shuffle_epi8(_mm_cvtsi64_si128(static_cast<long long>(d0 | (std::uint64_t{d1} << 32))), scale_order);
        const __m128 da = _mm_mul_ps(k::scales4<Arch>(a + 2 * b), _mm_set1_ps(128.0f));
        const __m256 d = _mm256_mul_ps(k::ue4m3_half8_div128<Arch>(bytes), _mm256_set_m128(da, da));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sums), acc);
    }
    float sum = k::reduce_ps<Arch>(acc);
    if (full < blocks) {
        // The last block: its four sub-block sums in lanes [s0 s2 . . | s1 s3 . .].
        const std::size_t b = full;
        const __m256i s0 = k::dot_i8<Arch>(k::decode_nvfp4_half<Arch>(w[b].qs.data(), values, 0), k::load32<Arch>(a[2 * b].qs.data()));
        const __m256i s1 = k::dot_i8<Arch>(k::decode_nvfp4_half<Arch>(w[b].qs.data(), values, 1), k::load32<Arch>(a[2 * b + 1].qs.data()));
        const __m256i sums = _mm256_hadd_epi32(_mm256_hadd_epi32(s0, s1), _mm256_setzero_si256());
        std::uint32_t d0;
        std::memcpy(&d0, w[b].d.data(), 4);
        const __m128i bytes = _mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(d0)), scale_order);
        const __m128 da = _mm_mul_ps(_mm_setr_ps(k::half<Arch>(a[2 * b].d), k::half<Arch>(a[2 * b + 1].d), 0.0f, 0.0f), _mm_set1_ps(128.0f));
        const __m256 d = _mm256_mul_ps(k::ue4m3_half8_div128<Arch>(bytes), _mm256_set_m128(da, da));
        sum += k::reduce_ps<Arch>(_mm256_mul_ps(d, _mm256_cvtepi32_ps(sums)));
    }
    return k::finite_or_reference<Arch>(sum, w, a, blocks);
}

// NVFP4 rows against activations laid out by split_activations (mat-vec's path on this tag), as
// the MXFP4 kernel above: a block's 32 code bytes in one register, their low nibbles against each
// sub-block's first 8 activations and the high nibbles against its last 8, the weights biased by
// +12 and 12 times each sub-block's activation sum taken off its exact int32 sum. One vphaddd per
// two blocks leaves the sub-block sums in the layout's order (blocks 0 and 2 of a step, then 1
// and 3), and one vpshufb puts the scale bytes in it.
template <class Arch>
QK_TARGET_AVX2 float dot(const block_nvfp4* w, split_activations<block_nvfp4> a, std::size_t blocks, arch::requires_arch<arch::avx2>) noexcept
{
    namespace k = avx2_detail;
    constexpr std::size_t step_blocks = split_activations<block_nvfp4>::step_blocks;
    const __m256i table = k::mxfp4_biased_table<Arch>();
    const __m256i bias = _mm256_set1_epi32(mxfp4_value_bias);
    // Scale bytes of blocks b and b + 2 (as one 64-bit word, b's first) in sum order.
    const __m128i scale_order = _mm_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    const std::size_t full = blocks - blocks % step_blocks;
    const std::byte* activations = a.steps;
    for (std::size_t b = 0; b < full; b += step_blocks, activations += split_activations<block_nvfp4>::step_bytes) {
        const block_nvfp4* step = w + b;
        __m256i r[4];
#pragma GCC unroll 4
        for (std::size_t i = 0; i < 4; ++i) {
            // Block i: half i % 2 of register i / 2 of the layout.
            const std::byte* first = activations + 128 * (i / 2) + 32 * (i % 2);
            r[i] = k::biased_nibble_sums<Arch>(k::load32<Arch>(step[i].qs.data()), table, first, first + 64);
        }
#pragma GCC unroll 2
        for (std::size_t h = 0; h < 2; ++h) {
            // Lanes [b s0, b s1, b+2 s0, b+2 s1 | b s2, b s3, b+2 s2, b+2 s3] for b = h.
            const __m256i sums = _mm256_hadd_epi32(r[h], r[h + 2]);
            const __m256i exact = _mm256_sub_epi32(sums, _mm256_mullo_epi32(k::load32<Arch>(activations + 256 + 32 * h), bias));
            std::uint32_t d0;
            std::uint32_t d2;
            std::memcpy(&d0, step[h].d.data(), 4);
            std::memcpy(&d2, step[h + 2].d.data(), 4);
            const __m128i bytes = _mm_shuffle_epi8(_mm_cvtsi64_si128(static_cast<long long>(d0 | (std::uint64_t{d2} << 32))), scale_order);
            const __m256 scales = _mm256_mul_ps(k::ue4m3_half8_div128<Arch>(bytes),
                                                _mm256_loadu_ps(reinterpret_cast<const float*>(activations + 320) + 8 * h));
            acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(exact), scales, acc[h]);
        }
    }
    // The last 0-3 blocks: the row kernel above.
    const float sum = k::reduce_ps<Arch>(_mm256_add_ps(acc[0], acc[1])) + dot<Arch>(w + full, a.blocks + 2 * full, blocks - full, arch::avx2{});
    return k::finite_or_reference<Arch>(sum, w, a.blocks, blocks);
}

template <class Arch>
QK_TARGET_AVX2 float dot(const block_iq4_nl* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::avx2>) noexcept
{
    namespace k = avx2_detail;
    const __m256i values = k::table<Arch>(iq4_values);
    __m256 acc0 = _mm256_setzero_ps();
    __m256 acc1 = _mm256_setzero_ps();
    const std::size_t full = blocks - blocks % 4;
    for (std::size_t b = 0; b < full; b += 4) {
        const __m256i s0 = k::dot_i8<Arch>(k::decode_nibbles<Arch>(w[b].qs.data(), values), k::load32<Arch>(a[b].qs.data()));
        const __m256i s1 = k::dot_i8<Arch>(k::decode_nibbles<Arch>(w[b + 1].qs.data(), values), k::load32<Arch>(a[b + 1].qs.data()));
        const __m256i s2 = k::dot_i8<Arch>(k::decode_nibbles<Arch>(w[b + 2].qs.data(), values), k::load32<Arch>(a[b + 2].qs.data()));
        const __m256i s3 = k::dot_i8<Arch>(k::decode_nibbles<Arch>(w[b + 3].qs.data(), values), k::load32<Arch>(a[b + 3].qs.data()));
        const __m128 d = _mm_mul_ps(k::scales4<Arch>(w + b), k::scales4<Arch>(a + b));
        k::accumulate4<Arch>(acc0, acc1, s0, s1, s2, s3, d);
    }
    float sum = k::reduce_ps<Arch>(_mm256_add_ps(acc0, acc1));
    for (std::size_t b = full; b < blocks; ++b) {
        const int sumi = k::reduce_i32<Arch>(k::dot_i8<Arch>(k::decode_nibbles<Arch>(w[b].qs.data(), values), k::load32<Arch>(a[b].qs.data())));
        sum += k::half<Arch>(w[b].d) * k::half<Arch>(a[b].d) * static_cast<float>(sumi);
    }
    return k::finite_or_reference<Arch>(sum, w, a, blocks);
}

template <class Arch>
QK_TARGET_AVX2 float dot(const block_iq4_xs* w, const block_q8_K* a, std::size_t blocks, arch::requires_arch<arch::avx2>) noexcept
{
    namespace k = avx2_detail;
    const __m256i values = k::table<Arch>(iq4_values);
    __m256 acc = _mm256_setzero_ps();
    for (std::size_t b = 0; b < blocks; ++b) {
        const __m256i m = k::group_multipliers<Arch>(w[b]);
        const std::uint8_t* codes = w[b].qs.data();
        const std::int8_t* q8 = a[b].qs.data();
        // Each group's int32 lanes are below 2 * 2^15 * 32 = 2^21 in magnitude, so the sum of the
        // eight groups is exact, and still exact when converted to float (below 2^24).
        __m256i sum0 = k::group_sum<Arch>(codes, q8, values, m, 0);
        __m256i sum1 = k::group_sum<Arch>(codes, q8, values, m, 1);
        sum0 = _mm256_add_epi32(sum0, k::group_sum<Arch>(codes, q8, values, m, 2));
        sum1 = _mm256_add_epi32(sum1, k::group_sum<Arch>(codes, q8, values, m, 3));
        sum0 = _mm256_add_epi32(sum0, k::group_sum<Arch>(codes, q8, values, m, 4));
        sum1 = _mm256_add_epi32(sum1, k::group_sum<Arch>(codes, q8, values, m, 5));
        sum0 = _mm256_add_epi32(sum0, k::group_sum<Arch>(codes, q8, values, m, 6));
        sum1 = _mm256_add_epi32(sum1, k::group_sum<Arch>(codes, q8, values, m, 7));
        const __m256 scale = _mm256_set1_ps(k::half<Arch>(w[b].d) * a[b].d);
        acc = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(_mm256_add_epi32(sum0, sum1)), acc);
    }
    return k::finite_or_reference<Arch>(k::reduce_ps<Arch>(acc), w, a, blocks);
}

} // namespace qk::kernels

#endif // QK_HAS_X86_KERNELS
