// The dot products on the AVX-512 BW tag (AVX-512 F/BW/DQ/VL, with AVX2, FMA and F16C): Q8_0, MXFP4,
// NVFP4 and IQ4_NL against Q8_0, IQ4_XS against Q8_K, on 512-bit registers. Included by dot.hpp, and
// checked against dot/generic.hpp. The helpers here also serve the VNNI kernels (avx512vnni.hpp),
// which differ only in how int8 products are summed. xsimd's AVX-512 tags derive from generic,
// not from avx2: this file ends with the explicit fallback that sends any other pair to the AVX2
// kernels.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../arch.hpp"
#include "../e8m0.hpp"
#include "../formats.hpp"
#include "../target.hpp"
#include "avx2.hpp"

#if QK_HAS_X86_KERNELS
#include <immintrin.h>

// g++ 12 warns, wrongly, that the AVX-512 intrinsics' _mm512_undefined_* operands are or may be
// used uninitialized once they are inlined (GCC bug 105593), as in sampling/deterministic_math.hpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// Technique, shared with avx512vnni.hpp: int8 products are summed by an instruction that needs one
// unsigned operand (vpmaddubsw here, vpdpbusd with VNNI): |w| (up to 128 as an unsigned byte) times
// the activation carrying w's sign. AVX-512 has no vpsignb, so the sign is moved with a mask: the
// lanes where w is negative (vpmovb2m, or for 4-bit codes a test of the code's sign bit, whose
// magnitude comes from a table of absolute values) take 0 - a (a masked vpsubb). As in avx2.hpp,
// two adjacent products sum to at most 2 * 128 * 127 < 2^15, exact for any weight byte and
// activations in [-127, 127], the range of the Q8_0 and Q8_K quantizers; vpmaddwd widens to int32
// (with ones, or for IQ4_XS with the group multiplier ls - 32).
//
// Eight 32-value blocks go per iteration, two per 512-bit register, and the loads are arranged to
// do as little else as possible (the kernels are bound by loads and by the number of instructions;
// the scales, 16-bit fields 34 or 18 bytes apart, cost as much to gather as the products):
//  - Q8_0 · Q8_0 reads both rows as they lie, in 64-byte chunks (see q8_0_octet below), and takes
//    the scales out of the same chunks with vpermt2w;
//  - IQ4_NL's weights likewise (iq4_nl_octet), with vpermt2w laying out the codes; MXFP4's
//    (17-byte blocks: odd offsets, which vpermt2w cannot reach) are broadcast 16 bytes at a time;
//  - the Q8_0 activations of MXFP4 and IQ4_NL come as two 32-byte loads per register, their
//    scales as 16-bit loads packed in integer registers and converted eight at a time with F16C.
// 4-bit codes end up with each 16-byte group of codes in both 128-bit lanes of its block, the
// second shifted by 4 to bring the high nibbles down, then decoded with vpshufb. Each pair of
// registers (four blocks) is folded so that every int32 lane holds an exact part of one block's
// sum (Q8_0 · Q8_0 needs no folding: each 4-byte lane of a chunk belongs to one block), converted
// to float and multiplied by its block's scale (vpermps spreads the eight scales) with FMA. The
// last 0-7 blocks go through the AVX2 kernel. IQ4_XS takes a superblock per
// iteration (see its kernel). A non-finite result (infinite or NaN scales, overflow) is
// recomputed by the reference, as in avx2.hpp.
namespace qk::kernels::avx512_detail {

// Helpers are templates on the calling tag, like the kernels, and always inlined into them.
#define QK_AVX512BW_INLINE [[gnu::always_inline]] QK_TARGET_AVX512BW inline

// The absolute values of a 16-entry table, for the unsigned operand of vpmaddubsw / vpdpbusd.
constexpr std::array<std::int8_t, 16> absolute(const std::array<std::int8_t, 16>& values) noexcept
{
    std::array<std::int8_t, 16> out{};
    for (std::size_t i = 0; i < 16; ++i) {
        out[i] = static_cast<std::int8_t>(values[i] < 0 ? -values[i] : values[i]);
    }
    return out;
}

// The tables' signs follow bit 3 of the code: MXFP4's codes 8-15 are negative (code 8 is -0), the
// IQ4 grid's codes 0-7 are; the kernels' masks rely on that.
inline constexpr std::array<std::int8_t, 16> mxfp4_magnitudes = absolute(mxfp4_values);
inline constexpr std::array<std::int8_t, 16> iq4_magnitudes = absolute(iq4_values);
static_assert([] {
    for (std::size_t i = 0; i < 16; ++i) {
        if ((mxfp4_values[i] < 0) != (i >= 8 && mxfp4_values[i] != 0) || (iq4_values[i] < 0) != (i < 8)) {
            return false;
        }
    }
    return true;
}());

// Two 32-byte rows (two blocks' int8 values) in one register, p0's in the low half.
template <class Arch>
QK_AVX512BW_INLINE __m512i load2x32(const void* p0, const void* p1) noexcept
{
    const __m256i low = _mm256_loadu_si256(static_cast<const __m256i*>(p0));
    return _mm512_inserti64x4(_mm512_castsi256_si512(low), _mm256_loadu_si256(static_cast<const __m256i*>(p1)), 1);
}

// A 16-entry table in all four 128-bit lanes.
template <class Arch>
QK_AVX512BW_INLINE __m512i table(const std::array<std::int8_t, 16>& values) noexcept
{
    return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values.data())));
}

// The 4-bit codes of two 32-value blocks (16 bytes each: element j in the low nibble of byte j,
// element j + 16 in its high nibble), as bytes 0-15 in element order: c0's 32 elements in the low
// half, c1's in the high half.
// code_bytes2 leaves the other nibble in bits 4-7 (which a vpermb table of the 16 entries repeated
// four times ignores).
template <class Arch>
QK_AVX512BW_INLINE __m512i code_bytes2(const std::uint8_t* c0, const std::uint8_t* c1) noexcept
{
    const __m512i low = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c0)));
    const __m512i bytes = _mm512_mask_broadcast_i32x4(low, 0xff00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(c1)));
    return _mm512_srlv_epi64(bytes, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
}

template <class Arch>
QK_AVX512BW_INLINE __m512i nibbles2(const std::uint8_t* c0, const std::uint8_t* c1) noexcept
{
    return _mm512_and_si512(code_bytes2<Arch>(c0, c1), _mm512_set1_epi8(0x0f));
}

// The same for two consecutive 16-byte groups of codes (IQ4_XS), read as one 32-byte row.
template <class Arch>
QK_AVX512BW_INLINE __m512i nibbles2(const std::uint8_t* codes) noexcept
{
    const __m512i row = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes)));
    const __m512i bytes = _mm512_shuffle_i64x2(row, row, _MM_SHUFFLE(1, 1, 0, 0));
    const __m512i shifted = _mm512_srlv_epi64(bytes, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
    return _mm512_and_si512(shifted, _mm512_set1_epi8(0x0f));
}

// The operands of a signed int8 dot product in the form vpmaddubsw and vpdpbusd take: unsigned
// magnitudes and the activations carrying the weights' signs.
struct operands {
    __m512i magnitudes;
    __m512i activations;
};

// 64 4-bit codes (nibbles2) decoded through `magnitudes` (mxfp4_magnitudes or iq4_magnitudes), with
// activations a; the codes whose bit 3 is set are negative for MXFP4, those whose bit 3 is clear
// for the IQ4 grid.
template <class Arch, bool HighCodesNegative>
QK_AVX512BW_INLINE operands code_operands(__m512i codes, __m512i magnitudes, __m512i a) noexcept
{
    const __m512i bit3 = _mm512_set1_epi8(8);
    const __mmask64 negative = HighCodesNegative ? _mm512_test_epi8_mask(codes, bit3) : _mm512_testn_epi8_mask(codes, bit3);
    return {_mm512_shuffle_epi8(magnitudes, codes), _mm512_mask_sub_epi8(a, negative, _mm512_setzero_si512(), a)};
}

// The exact int32 sums of the four products in each 4-byte lane.
template <class Arch>
QK_AVX512BW_INLINE __m512i dot_i8(const operands& x) noexcept
{
    return _mm512_madd_epi16(_mm512_maddubs_epi16(x.magnitudes, x.activations), _mm512_set1_epi16(1));
}

// The 16-bit scale bits `d` of four consecutive blocks, packed into 64 bits in integer registers
// (the integer units are otherwise idle). The empty asm keeps the compiler from vectorizing the
// shifts and ors, which would cost more vector operations than the packing saves.
template <class Arch, class Block>
QK_AVX512BW_INLINE long long scale_bits4(const Block* x) noexcept
{
    auto bits = static_cast<long long>(std::uint64_t{x[0].d} | (std::uint64_t{x[1].d} << 16) | (std::uint64_t{x[2].d} << 32) |
                                       (std::uint64_t{x[3].d} << 48));
    __asm__("" : "+r"(bits));
    return bits;
}

// Q8_0 against Q8_0: both rows have the same layout, so they are read as they lie, eight blocks
// (272 bytes) as five 64-byte chunks, the last overlapping the fourth, with no shuffling at all:
// the products of bytes at the same position pair each value with its partner, and a 4-byte lane
// never mixes two blocks' values (block k's scale sits at byte 34k, even, so a lane holds the
// scale and two values of block k, or two values of block k - 1 and block k's scale). The
// weights' magnitudes are zeroed on the scale bytes and on the overlap (vpabsb with a mask), each
// lane's sum is scaled by its block's scale (vpermps from the eight scales), and the scales
// themselves come from the chunks (vpermt2w picks them out), not from separate loads. The last
// chunk's live lanes (12-15, block 7's last 16 values) are the lanes where chunk 3 holds block 7's
// first 16, so their integer sums are added before the one conversion and scaling of the two.
inline constexpr std::array<std::size_t, 5> q8_0_chunk_start = {0, 64, 128, 192, 208};

struct q8_0_octet_layout {
    std::array<std::uint64_t, 5> keep;                      // per chunk: the bytes that are values read once
    std::array<std::array<std::int32_t, 16>, 5> lane_block; // per chunk: the block of each 4-byte lane
    std::array<std::int16_t, 32> scales01;                  // vpermt2w indices of blocks 0-3's scales in chunks 0, 1
    std::array<std::int16_t, 32> scales23;                  // and of blocks 4-7's in chunks 2, 3
};

inline constexpr q8_0_octet_layout q8_0_octet = [] {
    constexpr std::size_t block_bytes = sizeof(block_q8_0);
    q8_0_octet_layout layout{};
    for (std::size_t c = 0; c < 5; ++c) {
        for (std::size_t i = 0; i < 64; ++i) {
            const std::size_t byte = q8_0_chunk_start[c] + i;
            const bool scale = byte % block_bytes < 2;
            const bool read_before = c == 4 && byte < q8_0_chunk_start[3] + 64;
            if (!scale && !read_before) {
                layout.keep[c] |= std::uint64_t{1} << i;
            }
        }
        for (std::size_t j = 0; j < 16; ++j) {
            // The block of the lane's values: that of its first byte that is not a scale.
            std::size_t byte = q8_0_chunk_start[c] + 4 * j;
            byte += byte % block_bytes < 2 ? 2 - byte % block_bytes : 0;
            layout.lane_block[c][j] = static_cast<std::int32_t>(byte / block_bytes);
        }
    }
    for (std::size_t b = 0; b < 4; ++b) {
        layout.scales01[b] = static_cast<std::int16_t>(b * block_bytes / 2);
        layout.scales23[b] = static_cast<std::int16_t>(((b + 4) * block_bytes - q8_0_chunk_start[2]) / 2);
    }
    return layout;
}();
static_assert(sizeof(block_q8_0) == 34 && q8_0_chunk_start[4] + 64 == 8 * sizeof(block_q8_0));
// Chunk 4 may share chunk 3's scaling: every lane with a live byte belongs to the block chunk 3's lane does.
static_assert([] {
    for (std::size_t j = 0; j < 16; ++j) {
        if (((q8_0_octet.keep[4] >> (4 * j)) & 0xf) != 0 && q8_0_octet.lane_block[4][j] != q8_0_octet.lane_block[3][j]) {
            return false;
        }
    }
    return true;
}());

// Loads chunk c of eight Q8_0 blocks, kept in a register (compilers otherwise fold the load into
// each instruction that uses it, reading it several times).
template <class Arch>
QK_AVX512BW_INLINE __m512i load_chunk(const block_q8_0* x, std::size_t c) noexcept
{
    __m512i v = _mm512_loadu_si512(reinterpret_cast<const char*>(x) + q8_0_chunk_start[c]);
    __asm__("" : "+v"(v));
    return v;
}

// The fp16 scales of the eight blocks (the low eight 16-bit lanes), from chunks 0-3.
template <class Arch>
QK_AVX512BW_INLINE __m256 octet_scales(__m512i c0, __m512i c1, __m512i c2, __m512i c3, __m512i scales01, __m512i scales23) noexcept
{
    const __m512i low = _mm512_permutex2var_epi16(c0, scales01, c1);
    const __m512i high = _mm512_permutex2var_epi16(c2, scales23, c3);
    return _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_unpacklo_epi64(low, high)));
}

// Chunk c of the weights and activations as operands.
template <class Arch>
QK_AVX512BW_INLINE operands octet_operands(__m512i w, __m512i a, std::size_t c) noexcept
{
    return {_mm512_maskz_abs_epi8(q8_0_octet.keep[c], w), _mm512_mask_sub_epi8(a, _mm512_movepi8_mask(w), _mm512_setzero_si512(), a)};
}

// acc plus the int32 lane sums s of a chunk times the scales of their blocks (d: the eight
// blocks' scales; lanes: lane_block of the chunk).
template <class Arch>
QK_AVX512BW_INLINE __m512 add_scaled(__m512 acc, __m512i lanes, __m512 d, __m512i s) noexcept
{
    return _mm512_fmadd_ps(_mm512_permutexvar_ps(lanes, d), _mm512_cvtepi32_ps(s), acc);
}

// IQ4_NL weights are read the same way, eight blocks (144 bytes) as three 64-byte chunks (at 0,
// 64 and 80), and vpermt2w lays out each pair's codes as nibbles2 does (every 16-byte group of codes
// twice) and gathers the eight fp16 scales, all of them within the first two chunks.
inline constexpr std::array<std::size_t, 3> iq4_nl_chunk_start = {0, 64, 80};

struct iq4_nl_octet_layout {
    std::array<std::array<std::int16_t, 32>, 4> codes; // per pair of blocks: vpermt2w indices
    std::array<std::int16_t, 32> scales;
};

inline constexpr iq4_nl_octet_layout iq4_nl_octet = [] {
    constexpr std::size_t block_words = sizeof(block_iq4_nl) / 2;
    iq4_nl_octet_layout layout{};
    for (std::size_t pair = 0; pair < 4; ++pair) {
        // Pairs 0-2 lie in chunks 0 and 1 (words 0-63), pair 3 in chunks 1 and 2 (words 32-63, 40-71).
        for (std::size_t j = 0; j < 32; ++j) {
            const std::size_t block = 2 * pair + j / 16;
            const std::size_t word = block * block_words + 1 + j % 8;
            std::size_t index = word;
            if (pair == 3) {
                index = word < 64 ? word - 32 : 32 + word - iq4_nl_chunk_start[2] / 2;
            }
            layout.codes[pair][j] = static_cast<std::int16_t>(index);
        }
    }
    for (std::size_t b = 0; b < 8; ++b) {
        layout.scales[b] = static_cast<std::int16_t>(b * block_words);
    }
    return layout;
}();
static_assert(sizeof(block_iq4_nl) == 18 && iq4_nl_chunk_start[2] + 64 == 8 * sizeof(block_iq4_nl));

// Loads chunk c of eight IQ4_NL blocks, kept in a register.
template <class Arch>
QK_AVX512BW_INLINE __m512i load_chunk(const block_iq4_nl* x, std::size_t c) noexcept
{
    __m512i v = _mm512_loadu_si512(reinterpret_cast<const char*>(x) + iq4_nl_chunk_start[c]);
    __asm__("" : "+v"(v));
    return v;
}

// The codes of a pair of blocks laid out by vpermt2w (each group of codes twice), as nibbles.
// (pair_code_bytes: the other nibble still in bits 4-7, as code_bytes2.)
template <class Arch>
QK_AVX512BW_INLINE __m512i pair_code_bytes(__m512i first, __m512i index, __m512i second) noexcept
{
    const __m512i bytes = _mm512_permutex2var_epi16(first, index, second);
    return _mm512_srlv_epi64(bytes, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
}

template <class Arch>
QK_AVX512BW_INLINE __m512i pair_nibbles(__m512i first, __m512i index, __m512i second) noexcept
{
    return _mm512_and_si512(pair_code_bytes<Arch>(first, index, second), _mm512_set1_epi8(0x0f));
}

// The fp16 scales of eight consecutive blocks as floats.
template <class Arch, class Block>
QK_AVX512BW_INLINE __m256 scales8(const Block* x) noexcept
{
    return _mm256_cvtph_ps(_mm_set_epi64x(scale_bits4<Arch>(x + 4), scale_bits4<Arch>(x)));
}

// The E8M0 weight scales (halved, as MXFP4's doubled values need) of eight consecutive blocks.
template <class Arch>
QK_AVX512BW_INLINE __m256 e8m0_half8(const block_mxfp4* x) noexcept
{
    const float* e8m0 = e8m0_half_table.data();
    return _mm256_setr_ps(e8m0[x[0].e], e8m0[x[1].e], e8m0[x[2].e], e8m0[x[3].e], e8m0[x[4].e], e8m0[x[5].e], e8m0[x[6].e],
                          e8m0[x[7].e]);
}

// acc0/acc1 += the eight blocks' int32 partial sums s[0..3] (two blocks each, in order) times
// their scales d. Folding s[0] with s[1] leaves lanes [b0 b2 b0 b2 b0 b2 b0 b2 | b1 b3 ...
// b1 b3], each an exact sum of 8 products (likewise s[2] with s[3] for blocks 4-7); vpermps lays
// the scales out in the same pattern.
template <class Arch>
QK_AVX512BW_INLINE void accumulate8(__m512& acc0, __m512& acc1, const __m512i (&s)[4], __m256 d) noexcept
{
    const __m512i s0123 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]), _mm512_unpackhi_epi32(s[0], s[1]));
    const __m512i s4567 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]), _mm512_unpackhi_epi32(s[2], s[3]));
    const __m512 scales = _mm512_castps256_ps512(d);
    const __m512 d0123 = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 2, 0, 2, 0, 2, 0, 2, 1, 3, 1, 3, 1, 3, 1, 3), scales);
    const __m512 d4567 = _mm512_permutexvar_ps(_mm512_setr_epi32(4, 6, 4, 6, 4, 6, 4, 6, 5, 7, 5, 7, 5, 7, 5, 7), scales);
    acc0 = _mm512_fmadd_ps(d0123, _mm512_cvtepi32_ps(s0123), acc0);
    acc1 = _mm512_fmadd_ps(d4567, _mm512_cvtepi32_ps(s4567), acc1);
}

// NVFP4 block x's 64 codes in element order (128-bit lane s holds sub-block s: its 8 bytes in
// both halves, the upper shifted by 4, as vpermq lays them out), as operands with the two Q8_0
// blocks a[0], a[1].
template <class Arch>
QK_AVX512BW_INLINE operands nvfp4_operands(const block_nvfp4& x, const block_q8_0* a, __m512i magnitudes) noexcept
{
    const __m512i row = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs.data())));
    const __m512i bytes = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 0, 1, 1, 2, 2, 3, 3), row);
    const __m512i codes = _mm512_and_si512(_mm512_srlv_epi64(bytes, _mm512_setr_epi64(0, 4, 0, 4, 0, 4, 0, 4)), _mm512_set1_epi8(0x0f));
    return code_operands<Arch, true>(codes, magnitudes, load2x32<Arch>(a[0].qs.data(), a[1].qs.data()));
}

// Sixteen UE4M3 bytes as their ue4m3_half_table values divided by 128, exactly: as in
// avx2_detail::ue4m3_half8_div128, each byte's low seven bits are an fp16 exponent and mantissa
// once shifted (0x7F, the NaN, masked to 0). In registers rather than gathered from the table:
// on AMD's cores a 16-lane gather costs more than the rest of a tile kernel's mat-vec step.
template <class Arch>
QK_AVX512BW_INLINE __m512 ue4m3_half16_div128(__m128i bytes) noexcept
{
    const __m256i h = _mm256_cvtepu8_epi16(bytes);
    const __mmask16 finite = _mm256_cmpneq_epi16_mask(h, _mm256_set1_epi16(0x7f));
    return _mm512_cvtph_ps(_mm256_maskz_slli_epi16(finite, _mm256_and_si256(h, _mm256_set1_epi16(0x7f)), 7));
}

// The sub-block scales of four NVFP4 blocks times those of their eight Q8_0 blocks a[0..7]: lane
// 4i + s for block i, sub-block s (ue4m3_half16_div128, with the 128 moved onto the activations).
template <class Arch>
QK_AVX512BW_INLINE __m512 nvfp4_scales16(const block_nvfp4* x, const block_q8_0* a) noexcept
{
    std::uint32_t d[4];
    for (std::size_t i = 0; i < 4; ++i) {
        std::memcpy(&d[i], x[i].d.data(), sizeof d[i]);
    }
    const __m128i bytes = _mm_set_epi64x(static_cast<long long>(d[2] | (std::uint64_t{d[3]} << 32)),
                                         static_cast<long long>(d[0] | (std::uint64_t{d[1]} << 32)));
    const __m512 ue = ue4m3_half16_div128<Arch>(bytes);
    const __m512 da = _mm512_castps256_ps512(_mm256_mul_ps(scales8<Arch>(a), _mm256_set1_ps(128.0f)));
    return _mm512_mul_ps(ue, _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7), da));
}

// acc0/acc1 += four NVFP4 blocks' int32 partial sums s[0..3] (one block each, sub-block k in
// 128-bit lane k) times the scales d (nvfp4_scales16). Folding s[0] with s[1] leaves in lane k
// [b0 b1 b0 b1] sums of 8 products of sub-block k, and vpermps lays the scales out to match.
template <class Arch>
QK_AVX512BW_INLINE void accumulate_nvfp4(__m512& acc0, __m512& acc1, const __m512i (&s)[4], __m512 d) noexcept
{
    const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]), _mm512_unpackhi_epi32(s[0], s[1]));
    const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]), _mm512_unpackhi_epi32(s[2], s[3]));
    const __m512i index = _mm512_setr_epi32(0, 4, 0, 4, 1, 5, 1, 5, 2, 6, 2, 6, 3, 7, 3, 7);
    acc0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(index, d), _mm512_cvtepi32_ps(s01), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_add_epi32(index, _mm512_set1_epi32(8)), d), _mm512_cvtepi32_ps(s23), acc1);
}

// For IQ4_XS, per pair k of groups: the vpermw indices that spread the multipliers ls - 32 of
// groups 2k and 2k + 1 (avx2_detail::group_multipliers: eight int16 in each 128-bit lane) over the
// 16-bit lanes of their halves of a register.
alignas(64) inline constexpr std::array<std::array<std::int16_t, 32>, 4> pair_multiplier_index = [] {
    std::array<std::array<std::int16_t, 32>, 4> index{};
    for (std::size_t k = 0; k < 4; ++k) {
        for (std::size_t j = 0; j < 32; ++j) {
            index[k][j] = static_cast<std::int16_t>(2 * k + j / 16);
        }
    }
    return index;
}();

template <class Arch>
QK_AVX512BW_INLINE __m512i group_pair_multipliers(__m256i multipliers, std::size_t k) noexcept
{
    return _mm512_permutexvar_epi16(_mm512_load_si512(pair_multiplier_index[k].data()), _mm512_castsi256_si512(multipliers));
}

// Groups 2k and 2k + 1 of an IQ4_XS superblock against its Q8_K values, as operands.
template <class Arch>
QK_AVX512BW_INLINE operands iq4_xs_pair(const block_iq4_xs& x, const block_q8_K& a, __m512i magnitudes, std::size_t k) noexcept
{
    const __m512i q8 = _mm512_loadu_si512(a.qs.data() + 64 * k);
    return code_operands<Arch, false>(nibbles2<Arch>(x.qs.data() + 32 * k), magnitudes, q8);
}

template <class Arch>
QK_AVX512BW_INLINE float reduce_ps(__m512 v) noexcept
{
    const __m256 x = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    return avx2_detail::reduce_ps<Arch>(x);
}

#undef QK_AVX512BW_INLINE

} // namespace qk::kernels::avx512_detail

namespace qk::kernels {

template <class Arch>
QK_TARGET_AVX512BW float dot(const block_q8_0* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::avx512bw>) noexcept
{
    namespace k = avx512_detail;
    const __m512i scales01 = _mm512_loadu_si512(k::q8_0_octet.scales01.data());
    const __m512i scales23 = _mm512_loadu_si512(k::q8_0_octet.scales23.data());
    const __m512i lanes0 = _mm512_loadu_si512(k::q8_0_octet.lane_block[0].data());
    const __m512i lanes1 = _mm512_loadu_si512(k::q8_0_octet.lane_block[1].data());
    const __m512i lanes2 = _mm512_loadu_si512(k::q8_0_octet.lane_block[2].data());
    const __m512i lanes3 = _mm512_loadu_si512(k::q8_0_octet.lane_block[3].data());
    __m512 acc0 = _mm512_setzero_ps();
    __m512 acc1 = _mm512_setzero_ps();
    __m512 acc2 = _mm512_setzero_ps();
    __m512 acc3 = _mm512_setzero_ps();
    // Whole groups of eight first, then the 0-7 blocks left one at a time; the tail's bounds come
    // from blocks alone (not from where the first loop stopped), so the compiler sees b < blocks.
    const std::size_t full = blocks - blocks % 8;
    for (std::size_t b = 0; b < full; b += 8) {
        const __m512i w0 = k::load_chunk<Arch>(w + b, 0), w1 = k::load_chunk<Arch>(w + b, 1), w2 = k::load_chunk<Arch>(w + b, 2);
        const __m512i w3 = k::load_chunk<Arch>(w + b, 3), w4 = k::load_chunk<Arch>(w + b, 4);
        const __m512i a0 = k::load_chunk<Arch>(a + b, 0), a1 = k::load_chunk<Arch>(a + b, 1), a2 = k::load_chunk<Arch>(a + b, 2);
        const __m512i a3 = k::load_chunk<Arch>(a + b, 3), a4 = k::load_chunk<Arch>(a + b, 4);
        const __m512 d = _mm512_castps256_ps512(_mm256_mul_ps(k::octet_scales<Arch>(w0, w1, w2, w3, scales01, scales23),
                                                              k::octet_scales<Arch>(a0, a1, a2, a3, scales01, scales23)));
        acc0 = k::add_scaled<Arch>(acc0, lanes0, d, k::dot_i8<Arch>(k::octet_operands<Arch>(w0, a0, 0)));
        acc1 = k::add_scaled<Arch>(acc1, lanes1, d, k::dot_i8<Arch>(k::octet_operands<Arch>(w1, a1, 1)));
        acc2 = k::add_scaled<Arch>(acc2, lanes2, d, k::dot_i8<Arch>(k::octet_operands<Arch>(w2, a2, 2)));
        const __m512i s34 = _mm512_add_epi32(k::dot_i8<Arch>(k::octet_operands<Arch>(w3, a3, 3)), k::dot_i8<Arch>(k::octet_operands<Arch>(w4, a4, 4)));
        acc3 = k::add_scaled<Arch>(acc3, lanes3, d, s34);
    }
    // The last 0-7 blocks: the AVX2 kernel (every AVX-512 CPU runs it).
    const float sum = k::reduce_ps<Arch>(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3))) + dot<Arch>(w + full, a + full, blocks - full, arch::avx2{});
    return avx2_detail::finite_or_reference<Arch>(sum, w, a, blocks);
}

template <class Arch>
QK_TARGET_AVX512BW float dot(const block_mxfp4* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::avx512bw>) noexcept
{
    namespace k = avx512_detail;
    const __m512i magnitudes = k::table<Arch>(k::mxfp4_magnitudes);
    __m512 acc0 = _mm512_setzero_ps();
    __m512 acc1 = _mm512_setzero_ps();
    const std::size_t full = blocks - blocks % 8;
    for (std::size_t b = 0; b < full; b += 8) {
        __m512i s[4];
#pragma GCC unroll 4
        for (std::size_t i = 0; i < 4; ++i) {
            const __m512i codes = k::nibbles2<Arch>(w[b + 2 * i].qs.data(), w[b + 2 * i + 1].qs.data());
            const __m512i ai = k::load2x32<Arch>(a[b + 2 * i].qs.data(), a[b + 2 * i + 1].qs.data());
            s[i] = k::dot_i8<Arch>(k::code_operands<Arch, true>(codes, magnitudes, ai));
        }
        k::accumulate8<Arch>(acc0, acc1, s, _mm256_mul_ps(k::e8m0_half8<Arch>(w + b), k::scales8<Arch>(a + b)));
    }
    // The last 0-7 blocks: the AVX2 kernel (every AVX-512 CPU runs it).
    const float sum = k::reduce_ps<Arch>(_mm512_add_ps(acc0, acc1)) + dot<Arch>(w + full, a + full, blocks - full, arch::avx2{});
    return avx2_detail::finite_or_reference<Arch>(sum, w, a, blocks);
}

// Four NVFP4 blocks (eight Q8_0 blocks) per iteration, one register each.
template <class Arch>
QK_TARGET_AVX512BW float dot(const block_nvfp4* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::avx512bw>) noexcept
{
    namespace k = avx512_detail;
    const __m512i magnitudes = k::table<Arch>(k::mxfp4_magnitudes);
    __m512 acc0 = _mm512_setzero_ps();
    __m512 acc1 = _mm512_setzero_ps();
    const std::size_t full = blocks - blocks % 4;
    for (std::size_t b = 0; b < full; b += 4) {
        __m512i s[4];
#pragma GCC unroll 4
        for (std::size_t i = 0; i < 4; ++i) {
            s[i] = k::dot_i8<Arch>(k::nvfp4_operands<Arch>(w[b + i], a + 2 * (b + i), magnitudes));
        }
        k::accumulate_nvfp4<Arch>(acc0, acc1, s, k::nvfp4_scales16<Arch>(w + b, a + 2 * b));
    }
    // The last 0-3 blocks: the AVX2 kernel (every AVX-512 CPU runs it).
    const float sum = k::reduce_ps<Arch>(_mm512_add_ps(acc0, acc1)) + dot<Arch>(w + full, a + 2 * full, blocks - full, arch::avx2{});
    return avx2_detail::finite_or_reference<Arch>(sum, w, a, blocks);
}

template <class Arch>
QK_TARGET_AVX512BW float dot(const block_iq4_nl* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::avx512bw>) noexcept
{
    namespace k = avx512_detail;
    const __m512i magnitudes = k::table<Arch>(k::iq4_magnitudes);
    const __m512i codes0 = _mm512_loadu_si512(k::iq4_nl_octet.codes[0].data());
    const __m512i codes1 = _mm512_loadu_si512(k::iq4_nl_octet.codes[1].data());
    const __m512i codes2 = _mm512_loadu_si512(k::iq4_nl_octet.codes[2].data());
    const __m512i codes3 = _mm512_loadu_si512(k::iq4_nl_octet.codes[3].data());
    const __m512i scales = _mm512_loadu_si512(k::iq4_nl_octet.scales.data());
    __m512 acc0 = _mm512_setzero_ps();
    __m512 acc1 = _mm512_setzero_ps();
    const std::size_t full = blocks - blocks % 8;
    for (std::size_t b = 0; b < full; b += 8) {
        const __m512i c0 = k::load_chunk<Arch>(w + b, 0);
        const __m512i c1 = k::load_chunk<Arch>(w + b, 1);
        const __m512i c2 = k::load_chunk<Arch>(w + b, 2);
        const __m512i nibbles[4] = {k::pair_nibbles<Arch>(c0, codes0, c1), k::pair_nibbles<Arch>(c0, codes1, c1),
                                    k::pair_nibbles<Arch>(c0, codes2, c1), k::pair_nibbles<Arch>(c1, codes3, c2)};
        const __m256 dw = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutex2var_epi16(c0, scales, c1)));
        __m512i s[4];
#pragma GCC unroll 4
        for (std::size_t i = 0; i < 4; ++i) {
            const __m512i ai = k::load2x32<Arch>(a[b + 2 * i].qs.data(), a[b + 2 * i + 1].qs.data());
            s[i] = k::dot_i8<Arch>(k::code_operands<Arch, false>(nibbles[i], magnitudes, ai));
        }
        k::accumulate8<Arch>(acc0, acc1, s, _mm256_mul_ps(dw, k::scales8<Arch>(a + b)));
    }
    // The last 0-7 blocks: the AVX2 kernel (every AVX-512 CPU runs it).
    const float sum = k::reduce_ps<Arch>(_mm512_add_ps(acc0, acc1)) + dot<Arch>(w + full, a + full, blocks - full, arch::avx2{});
    return avx2_detail::finite_or_reference<Arch>(sum, w, a, blocks);
}

// One superblock per iteration, four registers of two groups each. Each group's int32 lanes are
// below 2 * 2^15 * 32 = 2^21 in magnitude and a lane gathers four groups, so the sums are exact,
// and still exact when converted to float (below 2^24).
template <class Arch>
QK_TARGET_AVX512BW float dot(const block_iq4_xs* w, const block_q8_K* a, std::size_t blocks, arch::requires_arch<arch::avx512bw>) noexcept
{
    namespace k = avx512_detail;
    const __m512i magnitudes = k::table<Arch>(k::iq4_magnitudes);
    __m512 acc = _mm512_setzero_ps();
    for (std::size_t b = 0; b < blocks; ++b) {
        const __m256i m = avx2_detail::group_multipliers<Arch>(w[b]);
        __m512i sum0 = _mm512_setzero_si512();
        __m512i sum1 = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (std::size_t i = 0; i < 4; i += 2) {
            const k::operands x0 = k::iq4_xs_pair<Arch>(w[b], a[b], magnitudes, i);
            const k::operands x1 = k::iq4_xs_pair<Arch>(w[b], a[b], magnitudes, i + 1);
            const __m512i p0 = _mm512_maddubs_epi16(x0.magnitudes, x0.activations);
            const __m512i p1 = _mm512_maddubs_epi16(x1.magnitudes, x1.activations);
            sum0 = _mm512_add_epi32(sum0, _mm512_madd_epi16(p0, k::group_pair_multipliers<Arch>(m, i)));
            sum1 = _mm512_add_epi32(sum1, _mm512_madd_epi16(p1, k::group_pair_multipliers<Arch>(m, i + 1)));
        }
        const __m512 scale = _mm512_set1_ps(avx2_detail::half<Arch>(w[b].d) * a[b].d);
        acc = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(_mm512_add_epi32(sum0, sum1)), acc);
    }
    return avx2_detail::finite_or_reference<Arch>(k::reduce_ps<Arch>(acc), w, a, blocks);
}

// Any other pair: the AVX2 kernels (every AVX-512 CPU has AVX2, FMA and F16C).
template <class Arch, class Weight, class Activation>
QK_TARGET_AVX512BW float dot(const Weight* w, const Activation* a, std::size_t blocks, arch::requires_arch<xsimd::avx512f>) noexcept
{
    return dot<Arch>(w, a, blocks, arch::avx2{});
}

} // namespace qk::kernels

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif // QK_HAS_X86_KERNELS
