// The dot products on the AVX-512 VBMI tag (qk::arch::avx512vbmi, VNNI plus VBMI, a child of
// avx512vnni): MXFP4 and IQ4_NL against Q8_0 and IQ4_XS against Q8_K, where decoding 4-bit codes
// is the work. Included by dot.hpp after avx512vnni.hpp, whose loads and scaling they share;
// checked against dot/generic.hpp. Q8_0 takes the avx512vnni kernel.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../arch.hpp"
#include "../e8m0.hpp"
#include "../formats.hpp"
#include "../prefetch.hpp"
#include "../target.hpp"
#include "avx2.hpp"
#include "avx512bw.hpp"
#include "avx512vnni.hpp"
#include "split_activations.hpp"

#if QK_HAS_X86_KERNELS
#include <immintrin.h>

// g++ 12 warns, wrongly, that the AVX-512 intrinsics' _mm512_undefined_* operands are or may be
// used uninitialized once they are inlined (GCC bug 105593), as in sampling/deterministic_math.hpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// What VBMI changes: vpermb looks a byte up in a 64-entry table by the low six bits of the index,
// so a table holding the 16 values four times decodes a code byte whose other nibble is still in
// bits 4-7 (no masking), and the table can hold the values plus a bias that makes them all
// non-negative: vpdpbusd then takes the decoded weights as its unsigned operand and the
// activations as they are, with no sign handling, and the bias times the sum of the activations,
// one more vpdpbusd against a register of bias bytes, is subtracted. Each 4-byte lane stays an
// exact integer (at most 4 * 255 * 128 in magnitude), so the sums are the other tags' exactly.
// That is two instructions where the sign trick of avx512bw.hpp takes three (mask, masked
// negation, and the masking of the codes before vpshufb).
namespace qk::kernels::avx512vbmi_detail {

// values[i % 16] + bias, for i < 64.
constexpr std::array<std::uint8_t, 64> biased_table(const std::array<std::int8_t, 16>& values, int bias) noexcept
{
    std::array<std::uint8_t, 64> table{};
    for (std::size_t i = 0; i < 64; ++i) {
        table[i] = static_cast<std::uint8_t>(values[i % 16] + bias);
    }
    return table;
}

// The smallest biases that make every value non-negative: MXFP4's doubled E2M1 values reach -12,
// the IQ4 grid -127.
inline constexpr int mxfp4_bias = 12;
inline constexpr int iq4_bias = 127;
alignas(64) inline constexpr std::array<std::uint8_t, 64> mxfp4_biased = biased_table(mxfp4_values, mxfp4_bias);
alignas(64) inline constexpr std::array<std::uint8_t, 64> iq4_biased = biased_table(iq4_values, iq4_bias);
static_assert([] {
    for (std::size_t i = 0; i < 16; ++i) {
        if (mxfp4_values[i] + mxfp4_bias < 0 || iq4_values[i] + iq4_bias < 0 || iq4_values[i] + iq4_bias > 255) {
            return false;
        }
    }
    return true;
}());

#define QK_AVX512VBMI_INLINE [[gnu::always_inline]] QK_TARGET_AVX512VBMI inline

// The exact int32 sums of the four products in each 4-byte lane of (code bytes decoded through a
// biased table) x (activations a).
template <class Arch>
QK_AVX512VBMI_INLINE __m512i biased_dot(__m512i codes, __m512i table, __m512i bias, __m512i a) noexcept
{
    const __m512i biased = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_permutexvar_epi8(codes, table), a);
    return _mm512_sub_epi32(biased, _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, a));
}

// Mat-vec's kernels for MXFP4 and IQ4_NL rows (kernels::split_activations) take sixteen blocks per
// step, four per register: register j (0-3) holds blocks 4j to 4j + 3, one per 128-bit lane, the
// first 16 values of each block (the codes' low nibbles) in one register and the last 16 (the
// high nibbles, after one 64-bit shift) in another. One vpermt2b gathers four blocks' codes for
// both halves, and the sums reduce to one int32 per block in three unpack levels: sixteen exact
// block sums that one conversion and one FMA scale. The activations come laid out to match, once
// per mat-vec, with each block's code sum (for the bias) and its scale as a float, so each row
// reads them with aligned loads. The octet kernels below instead take each group of codes twice
// (vpermt2w, a 64-bit shift per pair), the activations with a 32-byte insert per pair and the
// bias with a second vpdpbusd. On Zen 5, where vpermb, vpermt2b and the unpacks issue two per
// cycle, the split form reads rows from cache about twice as fast; laying the activations out in
// the kernel instead (four loads and two vpermt2b per register) made it slower than the octet
// kernels, so qk::dot keeps those.
using split_activations_detail::lane_block;
using split_activations_detail::step_blocks;
using split_activations_detail::sum_block;

// A step's weights are read as five 64-byte chunks in address order: at 0, 64, 128, 192 and the
// last ending with the step (at 256 it would read past the row). Register j's four blocks lie in
// chunks j and j + 1. In order and line by line matters: reading the two halves of the step side
// by side (as the layout of two blocks per half-register would) ran 25% slower from memory
// (Zen 5, one thread), the hardware prefetchers seeing two interleaved streams.
inline constexpr std::size_t step_chunks = 5;

template <class Block>
constexpr std::size_t chunk_start(std::size_t c) noexcept
{
    return c < 4 ? 64 * c : step_blocks * sizeof(Block) - 64;
}

// Where a block's 16 code bytes begin: after IQ4_NL's fp16 scale, after MXFP4's E8M0 byte.
template <class Block>
inline constexpr std::size_t codes_offset = std::is_same_v<Block, block_iq4_nl> ? 2 : 1;

// Byte `byte` of a step as an index into the 128-byte table of the chunks loaded at `low` and
// `high`, or 128 where it is in neither.
constexpr std::size_t pair_index(std::size_t low, std::size_t high, std::size_t byte) noexcept
{
    if (byte >= low && byte < low + 64) {
        return byte - low;
    }
    if (byte >= high && byte < high + 64) {
        return 64 + byte - high;
    }
    return 128;
}

// The same for chunks first and first + 1 of a MXFP4 or IQ4_NL step.
template <class Block>
constexpr std::size_t chunk_pair_index(std::size_t first, std::size_t byte) noexcept
{
    return pair_index(chunk_start<Block>(first), chunk_start<Block>(first + 1), byte);
}

// vpermt2b indices: register j's four blocks' codes, from chunks j and j + 1.
template <class Block>
alignas(64) inline constexpr std::array<std::array<std::uint8_t, 64>, 4> code_index = [] {
    std::array<std::array<std::uint8_t, 64>, 4> index{};
    for (std::size_t j = 0; j < 4; ++j) {
        for (std::size_t i = 0; i < 64; ++i) {
            const std::size_t byte = lane_block(j, i / 16) * sizeof(Block) + codes_offset<Block> + i % 16;
            index[j][i] = static_cast<std::uint8_t>(chunk_pair_index<Block>(j, byte));
        }
    }
    return index;
}();

template <class Block>
constexpr bool codes_within_chunks() noexcept
{
    for (const auto& index : code_index<Block>) {
        for (const std::uint8_t i : index) {
            if (i >= 128) {
                return false;
            }
        }
    }
    return chunk_start<Block>(4) >= chunk_start<Block>(3); // still in address order
}
static_assert(codes_within_chunks<block_iq4_nl>() && codes_within_chunks<block_mxfp4>());

// The scale gathers: in sum_block order the step's blocks interleave, so each gather fills the
// lanes of some blocks and a blend merges them: blocks 0-7 from chunks 0 and 1, 8-15 from chunks 2
// and 3 (IQ4_NL's block 15, at byte 270, from chunk 4). Per source pair: indices, and which lanes take it.
// (Each index vector 64-byte aligned, for the aligned loads, in every element of an array.)
struct scale_gather {
    alignas(64) std::array<std::uint16_t, 32> words; // IQ4_NL: vpermt2w indices, word i for block sum_block(i)
    alignas(64) std::array<std::uint8_t, 64> bytes;  // MXFP4: vpermt2b indices and pass-through (below)
    std::uint32_t lanes;                             // lanes i whose block this pair holds
};
static_assert(sizeof(scale_gather) % 64 == 0);

template <class Block>
constexpr std::array<scale_gather, 3> scale_gathers() noexcept
{
    std::array<scale_gather, 3> gathers{};
    constexpr std::size_t firsts[3] = {0, 2, 3};
    for (std::size_t g = 0; g < 3; ++g) {
        for (std::size_t i = 0; i < step_blocks; ++i) {
            const std::size_t byte = sum_block(i) * sizeof(Block);
            const std::size_t index = chunk_pair_index<Block>(firsts[g], byte);
            // The first pair that holds the block (and both bytes of an fp16 scale) takes it.
            bool taken = false;
            for (std::size_t earlier = 0; earlier < g; ++earlier) {
                taken = taken || ((gathers[earlier].lanes >> i) & 1) != 0;
            }
            const bool whole = index < 128 && (sizeof(Block) % 2 != 0 || chunk_pair_index<Block>(firsts[g], byte + 1) == index + 1);
            if (!taken && whole) {
                gathers[g].lanes |= std::uint32_t{1} << i;
                gathers[g].words[i] = static_cast<std::uint16_t>(index / 2);
                gathers[g].bytes[4 * i] = static_cast<std::uint8_t>(index);
            }
            // 0x4b in each int32 lane's high byte: the masked vpermt2b replaces the low byte only,
            // leaving the float 2^23 + e.
            gathers[g].bytes[4 * i + 3] = 0x4b;
        }
    }
    return gathers;
}

alignas(64) inline constexpr std::array<scale_gather, 3> iq4_nl_scales = scale_gathers<block_iq4_nl>();
alignas(64) inline constexpr std::array<scale_gather, 3> mxfp4_exponents = scale_gathers<block_mxfp4>();
// Every block's scale is gathered once; MXFP4's from the first two pairs alone.
static_assert((iq4_nl_scales[0].lanes | iq4_nl_scales[1].lanes | iq4_nl_scales[2].lanes) == 0xffff &&
              iq4_nl_scales[0].lanes + iq4_nl_scales[1].lanes + iq4_nl_scales[2].lanes == 0xffff);
static_assert((mxfp4_exponents[0].lanes | mxfp4_exponents[1].lanes) == 0xffff && mxfp4_exponents[2].lanes == 0 &&
              (mxfp4_exponents[0].lanes & mxfp4_exponents[1].lanes) == 0);

// The four int32 sums of each 128-bit lane of r[0..3] added up: lane i of the result is the sum
// over lane i / 4 of r[i % 4], that is of block sum_block(i). Exact: every sum is an integer.
template <class Arch>
QK_AVX512VBMI_INLINE __m512i block_sums(const __m512i (&r)[4]) noexcept
{
    const __m512i r01 = _mm512_add_epi32(_mm512_unpacklo_epi32(r[0], r[1]), _mm512_unpackhi_epi32(r[0], r[1]));
    const __m512i r23 = _mm512_add_epi32(_mm512_unpacklo_epi32(r[2], r[3]), _mm512_unpackhi_epi32(r[2], r[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(r01, r23), _mm512_unpackhi_epi64(r01, r23));
}


// The exact block sums of one step against its activations (`activations`, the step's part of a
// split_activations layout), the bias taken off.
template <class Arch, class Block>
QK_AVX512VBMI_INLINE __m512i step_sums(const __m512i (&chunks)[step_chunks], __m512i table, int bias, const std::byte* activations,
                                       const __m512i (&code_index)[4]) noexcept
{
    __m512i r[4];
#pragma GCC unroll 4
    for (std::size_t j = 0; j < 4; ++j) {
        const __m512i low = _mm512_loadu_si512(activations + 128 * j);
        const __m512i high = _mm512_loadu_si512(activations + 128 * j + 64);
        const __m512i codes = _mm512_permutex2var_epi8(chunks[j], code_index[j], chunks[j + 1]);
        r[j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_permutexvar_epi8(codes, table), low),
                                   _mm512_permutexvar_epi8(_mm512_srli_epi64(codes, 4), table), high);
    }
    const __m512i sums = _mm512_loadu_si512(activations + 512);
    return _mm512_sub_epi32(block_sums<Arch>(r), _mm512_mullo_epi32(sums, _mm512_set1_epi32(bias)));
}

// Loads a step's chunks, in address order, kept in registers.
template <class Arch, class Block>
QK_AVX512VBMI_INLINE void load_weight_chunks(const char* w, __m512i (&chunks)[step_chunks]) noexcept
{
#pragma GCC unroll 5
    for (std::size_t c = 0; c < step_chunks; ++c) {
        chunks[c] = _mm512_loadu_si512(w + chunk_start<Block>(c));
        __asm__("" : "+v"(chunks[c]));
    }
}

// The weight scales of a step times the activation scales d_a, in sum_block order: IQ4_NL's fp16
// scales gathered and converted, their product rounded once.
template <class Arch>
QK_AVX512VBMI_INLINE __m512 step_scales(const block_iq4_nl*, const __m512i (&chunks)[step_chunks], __m512 activation_scales) noexcept
{
    const auto& g = iq4_nl_scales;
    const __m512i first = _mm512_permutex2var_epi16(chunks[0], _mm512_load_si512(g[0].words.data()), chunks[1]);
    const __m512i second = _mm512_permutex2var_epi16(chunks[2], _mm512_load_si512(g[1].words.data()), chunks[3]);
    const __m512i third = _mm512_permutex2var_epi16(chunks[3], _mm512_load_si512(g[2].words.data()), chunks[4]);
    const __m512i words = _mm512_mask_blend_epi16(g[2].lanes, _mm512_mask_blend_epi16(g[1].lanes, first, second), third);
    return _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(words)), activation_scales);
}

// MXFP4's: e8m0_half(e) * d_a = d_a * 2^(e - 128), one vscalefps, exactly the reference's product
// (a product by a power of two rounds only where the result is subnormal or overflows, and
// vscalefps rounds it the same way). e - 128 as a float costs one subtraction from 2^23 + e.
template <class Arch>
QK_AVX512VBMI_INLINE __m512 step_scales(const block_mxfp4*, const __m512i (&chunks)[step_chunks], __m512 activation_scales) noexcept
{
    const auto& g = mxfp4_exponents;
    constexpr __mmask64 low_bytes = 0x1111111111111111ull;
    const __m512i first = _mm512_mask2_permutex2var_epi8(chunks[0], _mm512_load_si512(g[0].bytes.data()), low_bytes, chunks[1]);
    const __m512i second = _mm512_mask2_permutex2var_epi8(chunks[2], _mm512_load_si512(g[1].bytes.data()), low_bytes, chunks[3]);
    const __m512 biased = _mm512_castsi512_ps(_mm512_mask_blend_epi32(static_cast<__mmask16>(g[1].lanes), first, second));
    return _mm512_scalef_ps(activation_scales, _mm512_sub_ps(biased, _mm512_set1_ps(0x1p23f + 128.0f)));
}

// NVFP4's split kernel: four blocks (144 bytes) per step as three chunks in address order (at 0,
// 64 and 80); register k's codes are blocks 2k and 2k + 1's 64 code bytes as they lie, gathered
// from chunks k and k + 1, sub-block s of the pair in 64-bit lane s. Decoded through the biased
// MXFP4 table, low nibbles against each sub-block's first 8 activations, high nibbles against its
// last 8, the two registers' int32 pairs fold (vshufps, one add) into the sixteen sub-block sums.
inline constexpr std::array<std::size_t, 3> nvfp4_chunk_start = {0, 64, 80};
static_assert(nvfp4_chunk_start[2] + 64 == 4 * sizeof(block_nvfp4));

// Byte `byte` of the step in the 128-byte table of chunks `first` and `first + 1`.
constexpr std::size_t nvfp4_chunk_pair_index(std::size_t first, std::size_t byte) noexcept
{
    return pair_index(nvfp4_chunk_start[first], nvfp4_chunk_start[first + 1], byte);
}

struct nvfp4_step_layout {
    std::array<std::array<std::uint8_t, 64>, 2> codes; // vpermt2b indices, register k from chunks k, k + 1
    std::array<std::uint8_t, 64> scales;                // vpermt2b indices from chunks 0, 1: sub-block
                                                        // scale bytes in nvfp4_sum_subblock order
};

alignas(64) inline constexpr nvfp4_step_layout nvfp4_step = [] {
    nvfp4_step_layout layout{};
    for (std::size_t k = 0; k < 2; ++k) {
        for (std::size_t i = 0; i < 64; ++i) {
            const std::size_t block = 2 * k + i / 32;
            layout.codes[k][i] = static_cast<std::uint8_t>(nvfp4_chunk_pair_index(k, block * sizeof(block_nvfp4) + 4 + i % 32));
        }
    }
    for (std::size_t i = 0; i < 16; ++i) {
        const std::size_t g = split_activations_detail::nvfp4_sum_subblock(i);
        layout.scales[i] = static_cast<std::uint8_t>(nvfp4_chunk_pair_index(0, g / 4 * sizeof(block_nvfp4) + g % 4));
    }
    return layout;
}();
static_assert([] {
    for (const auto& index : nvfp4_step.codes) {
        for (const std::uint8_t i : index) {
            if (i >= 128) {
                return false;
            }
        }
    }
    for (std::size_t i = 0; i < 16; ++i) {
        if (nvfp4_step.scales[i] >= 128) {
            return false;
        }
    }
    return true;
}());

// IQ4_XS's split kernel: two blocks per step, their codes loaded as they lie (64 bytes, four groups,
// per register, in address order), each group's sum reduced as MXFP4's blocks are; the group
// multipliers ls - 32 (avx512vnni's group_multipliers, both blocks') spread to the same order.
alignas(32) inline constexpr std::array<std::uint16_t, 16> iq4_xs_multiplier_index = [] {
    std::array<std::uint16_t, 16> index{};
    for (std::size_t i = 0; i < 16; ++i) {
        index[i] = static_cast<std::uint16_t>(8 * split_activations_detail::iq4_xs_sum_block(i) + split_activations_detail::iq4_xs_sum_group(i));
    }
    return index;
}();

// How far ahead of a step its rows are prefetched, into L1. On Zen 5, 14336 x 4096 from memory,
// the mat-vec ran at 0.68-0.97 of the streaming read without, 0.83-0.99 with 8 KiB, the same or
// better in each of three runs at one thread and two (12 and 16 KiB: no better; prefetcht1 4 KiB:
// worse).
// A prefetch past the end of the row, or of the matrix, does nothing but fetch a line.
inline constexpr std::size_t step_prefetch_distance = 8192;

// The whole steps of a dot product of MXFP4 or IQ4_NL weights (biased table `values`, bias
// `bias`) with activations laid out by split_activations, summed into one float vector: one FMA per step.
template <class Arch, class Block>
QK_AVX512VBMI_INLINE __m512 dot_steps(const Block* w, const std::byte* activations, std::size_t steps,
                                      const std::array<std::uint8_t, 64>& values, int bias) noexcept
{
    const __m512i table = _mm512_load_si512(values.data());
    const __m512i code_index[4] = {
        _mm512_load_si512(avx512vbmi_detail::code_index<Block>[0].data()), _mm512_load_si512(avx512vbmi_detail::code_index<Block>[1].data()),
        _mm512_load_si512(avx512vbmi_detail::code_index<Block>[2].data()), _mm512_load_si512(avx512vbmi_detail::code_index<Block>[3].data())};
    __m512 acc = _mm512_setzero_ps();
    for (std::size_t s = 0; s < steps; ++s, activations += split_activations<Block>::step_bytes) {
        const Block* step = w + s * step_blocks;
        const char* bytes = reinterpret_cast<const char*>(step);
        __m512i chunks[step_chunks];
        qk::detail::prefetch_lines(bytes, step_prefetch_distance, 64 * step_chunks);
        load_weight_chunks<Arch, Block>(bytes, chunks);
        const __m512i sums = step_sums<Arch, Block>(chunks, table, bias, activations, code_index);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), step_scales<Arch>(step, chunks, _mm512_loadu_ps(activations + 576)), acc);
    }
    return acc;
}

// MXFP4's eight blocks (136 bytes: 17-byte blocks, an E8M0 exponent then 16 code bytes) are read
// as three 64-byte chunks, at 0, 64 and 72, and vpermb (vpermt2b for the pair that straddles the
// first two) lays out each pair's codes as code_bytes2 does, every 16-byte group twice: three
// loads per eight blocks instead of eight, and no merging of broadcasts. The exponents come out
// of the first two chunks as well (mxfp4_scales8).
inline constexpr std::array<std::size_t, 3> mxfp4_chunk_start = {0, 64, 72};

struct mxfp4_octet_layout {
    std::array<std::array<std::uint8_t, 64>, 4> codes; // per pair: vpermb (or vpermt2b) indices
    std::array<std::uint8_t, 64> exponents;            // see mxfp4_scales8
};

// Pair 0 lies in chunk 0, pair 1 across chunks 0 and 1 (vpermt2b: indices from byte 0), pair 2
// in chunk 1, pair 3 in chunk 2.
inline constexpr std::array<std::size_t, 4> mxfp4_pair_chunk = {0, 0, 1, 2};

alignas(64) inline constexpr mxfp4_octet_layout mxfp4_octet = [] {
    constexpr std::size_t block_bytes = sizeof(block_mxfp4);
    mxfp4_octet_layout layout{};
    for (std::size_t pair = 0; pair < 4; ++pair) {
        for (std::size_t j = 0; j < 64; ++j) {
            const std::size_t byte = (2 * pair + j / 32) * block_bytes + 1 + j % 16;
            layout.codes[pair][j] = static_cast<std::uint8_t>(byte - mxfp4_chunk_start[mxfp4_pair_chunk[pair]]);
        }
    }
    // Dword b (b < 8): byte 0 the index of block b's exponent in chunks 0-1, byte 3 0x4b, the
    // other bytes 0; the masked vpermi2b replaces byte 0 only, leaving the float 2^23 + e.
    for (std::size_t b = 0; b < 16; ++b) {
        layout.exponents[4 * b] = static_cast<std::uint8_t>(b < 8 ? b * block_bytes : 0);
        layout.exponents[4 * b + 3] = 0x4b;
    }
    return layout;
}();
static_assert(sizeof(block_mxfp4) == 17 && mxfp4_chunk_start[2] + 64 == 8 * sizeof(block_mxfp4));
// Every code byte lies in the chunk(s) its pair reads, and the exponents in chunks 0-1.
static_assert([] {
    for (std::size_t pair = 0; pair < 4; ++pair) {
        const std::size_t start = mxfp4_chunk_start[mxfp4_pair_chunk[pair]];
        const std::size_t end = start + (pair == 1 ? 128 : 64);
        for (std::size_t block = 2 * pair; block < 2 * pair + 2; ++block) {
            if (block * sizeof(block_mxfp4) + 1 < start || (block + 1) * sizeof(block_mxfp4) > end) {
                return false;
            }
        }
    }
    return 7 * sizeof(block_mxfp4) < 128;
}());

// Loads chunk c of eight MXFP4 blocks, kept in a register.
template <class Arch>
QK_AVX512VBMI_INLINE __m512i load_chunk(const block_mxfp4* x, std::size_t c) noexcept
{
    __m512i v = _mm512_loadu_si512(reinterpret_cast<const char*>(x) + mxfp4_chunk_start[c]);
    __asm__("" : "+v"(v));
    return v;
}

// The codes of pair i as code_bytes2 lays them out (the other nibble still in bits 4-7).
template <class Arch>
QK_AVX512VBMI_INLINE __m512i mxfp4_pair_code_bytes(const __m512i (&chunks)[3], __m512i index, std::size_t i) noexcept
{
    const __m512i bytes = i == 1 ? _mm512_permutex2var_epi8(chunks[0], index, chunks[1]) : _mm512_permutexvar_epi8(index, chunks[mxfp4_pair_chunk[i]]);
    return _mm512_srlv_epi64(bytes, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
}

// The scales of the eight blocks times those of their Q8_0 activations d_a: e8m0_half(e) * d_a =
// d_a * 2^(e - 128), one vscalefps, exactly the reference's product (a product by a power of two
// rounds only where the result is subnormal or overflows, and vscalefps rounds it the same way).
// e - 128 as a float costs one subtraction: a masked vpermi2b drops each exponent into the low
// byte of a dword whose high byte is 0x4b, the float 2^23 + e.
template <class Arch>
QK_AVX512VBMI_INLINE __m256 mxfp4_scales8(__m512i chunk0, __m512i chunk1, __m512i exponents, __m256 activation_scales) noexcept
{
    const __m512i biased = _mm512_mask2_permutex2var_epi8(chunk0, exponents, 0x1111111111111111ull, chunk1);
    const __m256 e = _mm256_sub_ps(_mm512_castps512_ps256(_mm512_castsi512_ps(biased)), _mm256_set1_ps(0x1p23f + 128.0f));
    return _mm256_scalef_ps(activation_scales, e);
}

// The IQ4 grid's magnitudes, the 16 four times (for vpermb; the signs follow bit 3 of the code).
alignas(64) inline constexpr std::array<std::uint8_t, 64> iq4_magnitudes = [] {
    std::array<std::uint8_t, 64> table{};
    for (std::size_t i = 0; i < 64; ++i) {
        table[i] = static_cast<std::uint8_t>(avx512_detail::iq4_magnitudes[i % 16]);
    }
    return table;
}();

#undef QK_AVX512VBMI_INLINE

} // namespace qk::kernels::avx512vbmi_detail

namespace qk::kernels {

template <class Arch>
QK_TARGET_AVX512VBMI float dot(const block_mxfp4* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::avx512vbmi>) noexcept
{
    namespace k = avx512_detail;
    namespace v = avx512vbmi_detail;
    const __m512i table = _mm512_load_si512(v::mxfp4_biased.data());
    const __m512i bias = _mm512_set1_epi8(static_cast<char>(v::mxfp4_bias));
    const __m512i exponents = _mm512_load_si512(v::mxfp4_octet.exponents.data());
    const __m512i index[4] = {_mm512_load_si512(v::mxfp4_octet.codes[0].data()), _mm512_load_si512(v::mxfp4_octet.codes[1].data()),
                              _mm512_load_si512(v::mxfp4_octet.codes[2].data()), _mm512_load_si512(v::mxfp4_octet.codes[3].data())};
    __m512 acc0 = _mm512_setzero_ps();
    __m512 acc1 = _mm512_setzero_ps();
    const std::size_t full = blocks - blocks % 8;
    for (std::size_t b = 0; b < full; b += 8) {
        const __m512i chunks[3] = {v::load_chunk<Arch>(w + b, 0), v::load_chunk<Arch>(w + b, 1), v::load_chunk<Arch>(w + b, 2)};
        __m512i s[4];
#pragma GCC unroll 4
        for (std::size_t i = 0; i < 4; ++i) {
            const __m512i codes = v::mxfp4_pair_code_bytes<Arch>(chunks, index[i], i);
            s[i] = v::biased_dot<Arch>(codes, table, bias, k::load2x32<Arch>(a[b + 2 * i].qs.data(), a[b + 2 * i + 1].qs.data()));
        }
        k::accumulate8<Arch>(acc0, acc1, s, v::mxfp4_scales8<Arch>(chunks[0], chunks[1], exponents, k::scales8<Arch>(a + b)));
    }
    // The last 0-7 blocks: the AVX2 kernel (every AVX-512 CPU runs it).
    const float sum = k::reduce_ps<Arch>(_mm512_add_ps(acc0, acc1)) + dot<Arch>(w + full, a + full, blocks - full, arch::avx2{});
    return avx2_detail::finite_or_reference<Arch>(sum, w, a, blocks);
}

template <class Arch>
QK_TARGET_AVX512VBMI float dot(const block_iq4_nl* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::avx512vbmi>) noexcept
{
    namespace k = avx512_detail;
    namespace v = avx512vbmi_detail;
    const __m512i table = _mm512_load_si512(v::iq4_biased.data());
    const __m512i bias = _mm512_set1_epi8(static_cast<char>(v::iq4_bias));
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
        const __m512i codes[4] = {k::pair_code_bytes<Arch>(c0, codes0, c1), k::pair_code_bytes<Arch>(c0, codes1, c1),
                                  k::pair_code_bytes<Arch>(c0, codes2, c1), k::pair_code_bytes<Arch>(c1, codes3, c2)};
        const __m256 dw = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutex2var_epi16(c0, scales, c1)));
        __m512i s[4];
#pragma GCC unroll 4
        for (std::size_t i = 0; i < 4; ++i) {
            s[i] = v::biased_dot<Arch>(codes[i], table, bias, k::load2x32<Arch>(a[b + 2 * i].qs.data(), a[b + 2 * i + 1].qs.data()));
        }
        k::accumulate8<Arch>(acc0, acc1, s, _mm256_mul_ps(dw, k::scales8<Arch>(a + b)));
    }
    // The last 0-7 blocks: the AVX2 kernel (every AVX-512 CPU runs it).
    const float sum = k::reduce_ps<Arch>(_mm512_add_ps(acc0, acc1)) + dot<Arch>(w + full, a + full, blocks - full, arch::avx2{});
    return avx2_detail::finite_or_reference<Arch>(sum, w, a, blocks);
}

// MXFP4 and IQ4_NL rows against activations laid out by split_activations, mat-vec's path: the
// products of the kernels above, summed in another order (equal up to float rounding).
template <class Arch, class Block>
    requires(std::is_same_v<Block, block_mxfp4> || std::is_same_v<Block, block_iq4_nl>)
QK_TARGET_AVX512VBMI float dot(const Block* w, split_activations<Block> a, std::size_t blocks, arch::requires_arch<arch::avx512vbmi>) noexcept
{
    namespace v = avx512vbmi_detail;
    constexpr bool mxfp4 = std::is_same_v<Block, block_mxfp4>;
    const std::size_t full = blocks - blocks % v::step_blocks;
    const __m512 acc = v::dot_steps<Arch>(w, a.steps, full / v::step_blocks, mxfp4 ? v::mxfp4_biased : v::iq4_biased,
                                          mxfp4 ? v::mxfp4_bias : v::iq4_bias);
    // The last 0-15 blocks: the octet kernel.
    const float sum = avx512_detail::reduce_ps<Arch>(acc) + dot<Arch>(w + full, a.blocks + full, blocks - full, arch::avx512vbmi{});
    return avx2_detail::finite_or_reference<Arch>(sum, w, a.blocks, blocks);
}

// NVFP4 rows against activations laid out by split_activations, mat-vec's path: the products of the
// avx512vnni kernel, summed in another order. The sub-block scales are the other kernels' exact
// product (ue4m3_half16_div128 times the activation scale times 128), rounded once.
template <class Arch>
QK_TARGET_AVX512VBMI float dot(const block_nvfp4* w, split_activations<block_nvfp4> a, std::size_t blocks, arch::requires_arch<arch::avx512vbmi>) noexcept
{
    namespace v = avx512vbmi_detail;
    constexpr std::size_t step_blocks = split_activations<block_nvfp4>::step_blocks;
    const __m512i table = _mm512_load_si512(v::mxfp4_biased.data());
    const __m512i code_index[2] = {_mm512_load_si512(v::nvfp4_step.codes[0].data()), _mm512_load_si512(v::nvfp4_step.codes[1].data())};
    const __m512i scale_index = _mm512_load_si512(v::nvfp4_step.scales.data());
    const __m512i bias = _mm512_set1_epi32(v::mxfp4_bias);
    const std::size_t full = blocks - blocks % step_blocks;
    const std::byte* activations = a.steps;
    __m512 acc = _mm512_setzero_ps();
    for (std::size_t b = 0; b < full; b += step_blocks, activations += split_activations<block_nvfp4>::step_bytes) {
        const char* bytes = reinterpret_cast<const char*>(w + b);
        qk::detail::prefetch_lines(bytes, v::step_prefetch_distance, 3 * 64);
        __m512i chunks[3];
#pragma GCC unroll 3
        for (std::size_t c = 0; c < 3; ++c) {
            chunks[c] = _mm512_loadu_si512(bytes + v::nvfp4_chunk_start[c]);
            __asm__("" : "+v"(chunks[c]));
        }
        __m512i r[2];
#pragma GCC unroll 2
        for (std::size_t k = 0; k < 2; ++k) {
            const __m512i codes = _mm512_permutex2var_epi8(chunks[k], code_index[k], chunks[k + 1]);
            const __m512i low = _mm512_loadu_si512(activations + 128 * k);
            const __m512i high = _mm512_loadu_si512(activations + 128 * k + 64);
            r[k] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_permutexvar_epi8(codes, table), low),
                                       _mm512_permutexvar_epi8(_mm512_srli_epi64(codes, 4), table), high);
        }
        // Lane by lane: [r0 pair 0, r0 pair 1, r1 pair 0, r1 pair 1], each pair's two int32 added.
        const __m512 r0 = _mm512_castsi512_ps(r[0]);
        const __m512 r1 = _mm512_castsi512_ps(r[1]);
        const __m512i folded = _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(r0, r1, 0x88)), _mm512_castps_si512(_mm512_shuffle_ps(r0, r1, 0xdd)));
        const __m512i sums = _mm512_sub_epi32(folded, _mm512_mullo_epi32(_mm512_loadu_si512(activations + 256), bias));
        const __m512 ue = avx512_detail::ue4m3_half16_div128<Arch>(_mm512_castsi512_si128(_mm512_permutex2var_epi8(chunks[0], scale_index, chunks[1])));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(ue, _mm512_loadu_ps(activations + 320)), acc);
    }
    // The last 0-3 blocks: the avx512vnni kernel (which takes them to AVX2).
    const float sum = avx512_detail::reduce_ps<Arch>(acc) + dot<Arch>(w + full, a.blocks + 2 * full, blocks - full, arch::avx512vnni{});
    return avx2_detail::finite_or_reference<Arch>(sum, w, a.blocks, blocks);
}

// IQ4_XS against Q8_K as on avx512vnni (the sign trick: vpmaddubsw's int16 pair sums feed
// vpdpwssd with the group multipliers, and the biased form of the other kernels would saturate
// there), with vpermb decoding the codes unmasked.
template <class Arch>
QK_TARGET_AVX512VBMI float dot(const block_iq4_xs* w, const block_q8_K* a, std::size_t blocks, arch::requires_arch<arch::avx512vbmi>) noexcept
{
    namespace k = avx512_detail;
    namespace v = avx512vbmi_detail;
    const __m512i magnitudes = _mm512_load_si512(v::iq4_magnitudes.data());
    const __m512i bit3 = _mm512_set1_epi8(8);
    __m512 acc = _mm512_setzero_ps();
    for (std::size_t b = 0; b < blocks; ++b) {
        const __m256i m = avx512vnni_detail::group_multipliers<Arch>(w[b]);
        __m512i sum0 = _mm512_setzero_si512();
        __m512i sum1 = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (std::size_t i = 0; i < 4; ++i) {
            const __m512i row = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs.data() + 32 * i)));
            const __m512i codes = _mm512_srlv_epi64(_mm512_shuffle_i64x2(row, row, _MM_SHUFFLE(1, 1, 0, 0)), _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
            const __m512i q8 = _mm512_loadu_si512(a[b].qs.data() + 64 * i);
            const __mmask64 negative = _mm512_testn_epi8_mask(codes, bit3);
            const __m512i products = _mm512_maddubs_epi16(_mm512_permutexvar_epi8(codes, magnitudes),
                                                          _mm512_mask_sub_epi8(q8, negative, _mm512_setzero_si512(), q8));
            if (i % 2 == 0) {
                sum0 = _mm512_dpwssd_epi32(sum0, products, k::group_pair_multipliers<Arch>(m, i));
            } else {
                sum1 = _mm512_dpwssd_epi32(sum1, products, k::group_pair_multipliers<Arch>(m, i));
            }
        }
        const __m512 scale = _mm512_set1_ps(avx2_detail::half<Arch>(w[b].d) * a[b].d);
        acc = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(_mm512_add_epi32(sum0, sum1)), acc);
    }
    return avx2_detail::finite_or_reference<Arch>(k::reduce_ps<Arch>(acc), w, a, blocks);
}

// IQ4_XS rows against activations laid out by split_activations, mat-vec's path: the biased table
// of the 32-value formats (vpdpbusd sums stay exact in int32, where the octet kernel's vpmaddubsw
// would saturate), each group's exact sum times its multiplier (below 2^24 in magnitude, so
// exact in float too), scaled by its block's d * d_a.
template <class Arch>
QK_TARGET_AVX512VBMI float dot(const block_iq4_xs* w, split_activations<block_iq4_xs> a, std::size_t blocks,
                               arch::requires_arch<arch::avx512vbmi>) noexcept
{
    namespace v = avx512vbmi_detail;
    constexpr std::size_t step_blocks = split_activations<block_iq4_xs>::step_blocks;
    const __m512i table = _mm512_load_si512(v::iq4_biased.data());
    const __m256i multiplier_index = _mm256_load_si256(reinterpret_cast<const __m256i*>(v::iq4_xs_multiplier_index.data()));
    const __m512i bias = _mm512_set1_epi32(v::iq4_bias);
    const std::size_t full = blocks - blocks % step_blocks;
    const std::byte* activations = a.steps;
    __m512 acc = _mm512_setzero_ps();
    for (std::size_t b = 0; b < full; b += step_blocks, activations += split_activations<block_iq4_xs>::step_bytes) {
        const char* bytes = reinterpret_cast<const char*>(w + b);
        qk::detail::prefetch_lines(bytes, v::step_prefetch_distance, 5 * 64);
        __m512i codes[4];
#pragma GCC unroll 4
        for (std::size_t j = 0; j < 4; ++j) {
            codes[j] = _mm512_loadu_si512(w[b + j / 2].qs.data() + 64 * (j % 2));
            __asm__("" : "+v"(codes[j]));
        }
        __m512i r[4];
#pragma GCC unroll 4
        for (std::size_t j = 0; j < 4; ++j) {
            const __m512i low = _mm512_loadu_si512(activations + 128 * j);
            const __m512i high = _mm512_loadu_si512(activations + 128 * j + 64);
            r[j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_permutexvar_epi8(codes[j], table), low),
                                       _mm512_permutexvar_epi8(_mm512_srli_epi64(codes[j], 4), table), high);
        }
        const __m512i sums = _mm512_sub_epi32(v::block_sums<Arch>(r), _mm512_mullo_epi32(_mm512_loadu_si512(activations + 512), bias));
        const __m256i both = _mm256_inserti128_si256(avx512vnni_detail::group_multipliers<Arch>(w[b]),
                                                     _mm256_castsi256_si128(avx512vnni_detail::group_multipliers<Arch>(w[b + 1])), 1);
        const __m512i multipliers = _mm512_cvtepi16_epi32(_mm256_permutexvar_epi16(multiplier_index, both));
        const float d0 = avx2_detail::half<Arch>(w[b].d) * a.blocks[b].d;
        const float d1 = avx2_detail::half<Arch>(w[b + 1].d) * a.blocks[b + 1].d;
        // int32 lane i belongs to block i % 4 / 2.
        const __m512 scales = _mm512_mask_blend_ps(0xcccc, _mm512_set1_ps(d0), _mm512_set1_ps(d1));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_mullo_epi32(sums, multipliers)), scales, acc);
    }
    // The last block: the kernel above.
    const float sum = avx512_detail::reduce_ps<Arch>(acc) + dot<Arch>(w + full, a.blocks + full, blocks - full, arch::avx512vbmi{});
    return avx2_detail::finite_or_reference<Arch>(sum, w, a.blocks, blocks);
}

} // namespace qk::kernels

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif // QK_HAS_X86_KERNELS
