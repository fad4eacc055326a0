// The tile kernel over packed weights (kernels/packed.hpp) on AVX-512 VNNI: 16 rows in the 16
// int32 lanes of a vector, up to 8 columns at once. Each group of 32 weights is decoded once
// (Q8_0 is stored ready; 4-bit codes go through vpshufb with the grid biased by +128) into eight
// vectors, which every column then multiplies with vpdpbusd against its activation dwords,
// broadcast from memory. The +128 bias comes back out through the column's correction, the
// accumulator's starting value. The float steps are the reference's, lane by lane, unfused.
// NVFP4's sub-blocks of 16 values (vectors 0 and 1 of a group, then 2 and 3) are summed and
// scaled one at a time, each from its own correction (the panel keeps the first half's beside the
// group's). tile_pair reads two tiles against one column in turn, for the mat-vecs that gain from
// two memory streams per thread (backends/cpu/packed_gemm.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../arch.hpp"
#include "../formats.hpp"
#include "../packed.hpp"
#include "../prefetch.hpp"
#include "../target.hpp"
#include "../dot/avx512bw.hpp"
#include "generic.hpp"

#if QK_HAS_X86_KERNELS
#include <immintrin.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace qk::kernels::packed_avx512_detail {

// The 4-bit grids biased by +128, in each 128-bit lane (vpshufb looks up within lanes).
template <const std::array<std::int8_t, 16>& Values>
inline constexpr auto biased_grid = [] {
    std::array<std::uint8_t, 64> table{};
    for (std::size_t i = 0; i < 64; ++i) {
        table[i] = static_cast<std::uint8_t>(Values[i % 16] + 128);
    }
    return table;
}();

template <class Arch>
[[gnu::always_inline]] QK_TARGET_AVX512VNNI inline __m512i broadcast32(const std::uint8_t* p) noexcept
{
    std::int32_t v;
    std::memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

template <class Arch>
[[gnu::always_inline]] QK_TARGET_AVX512VNNI inline __m512 broadcast_float(const std::uint8_t* p) noexcept
{
    float v;
    std::memcpy(&v, p, sizeof v);
    return _mm512_set1_ps(v);
}

// How far ahead of the bytes being read a tile kernel prefetches, into L1. A tile is one sequential
// stream, yet the hardware prefetchers alone fall behind it. Mat-vec 14336 x 4096 from memory on
// Zen 5, over the same buffers with the distance set at run time, in shuffled order, each pass
// after its own streaming pass; medians of 8-20 passes as fractions of that streaming read, the
// range over 3-9 runs (none -> 4 KiB):
//   one thread:  IQ4_NL 0.72-0.84 -> 0.74-0.93, NVFP4 0.66-0.79 -> 0.73-0.96,
//                MXFP4 0.76-0.95 -> 0.80-1.10, IQ4_XS 0.81-0.89 -> 1.05-1.16, Q8_0 0.84-1.04 -> 0.95-1.07;
//   two threads: IQ4_NL 0.66-0.86 -> 0.75-0.89, NVFP4 0.65-0.83 -> 0.87-1.07,
//                MXFP4 0.83-1.04 -> 0.92-1.21, IQ4_XS 0.79-0.92 -> 1.02-1.12, Q8_0 0.80-1.07 -> 0.95-1.01.
// The 4-bit formats gained in every run but one; Q8_0 in four of seven, and lost in two. 2 KiB
// was never better; 6 and 8 KiB about the same as 4 KiB. The prefetches run past a tile's end
// into the next one (tiles are contiguous) or past the matrix, where they only fetch a line.
inline constexpr std::size_t tile_prefetch_distance = 4096;

// Keeps a product from being fused into the addition that consumes it (the reference rounds both).
template <class Arch>
[[gnu::always_inline]] QK_TARGET_AVX512VNNI inline __m512 rounded(__m512 v) noexcept
{
    __asm__("" : "+v"(v));
    return v;
}

// Vectors 2m and 2m + 1 of a code group (values 8m .. 8m + 7 of each row), biased to unsigned.
template <class Arch, class Block>
[[gnu::always_inline]] QK_TARGET_AVX512VNNI inline void decode_pair(const std::uint8_t* codes, std::size_t m, __m512i table, __m512i& even,
                                                                    __m512i& odd) noexcept
{
    if constexpr (std::is_same_v<Block, block_q8_0>) {
        even = _mm512_load_si512(codes + 128 * m);
        odd = _mm512_load_si512(codes + 128 * m + 64);
    } else {
        const __m512i low = _mm512_set1_epi8(0x0f);
        const __m512i v = _mm512_load_si512(codes + 64 * m);
        even = _mm512_shuffle_epi8(table, _mm512_and_si512(v, low));
        odd = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), low));
    }
}

// Vector pairs first .. last - 1 of a code group (decode_pair) against the N columns of a set,
// added to each column's even and odd sums.
template <class Arch, class Block, std::size_t N>
[[gnu::always_inline]] QK_TARGET_AVX512VNNI inline void multiply_pairs(const std::uint8_t* codes, const std::uint8_t* entries, std::size_t first,
                                                                       std::size_t last, __m512i table, __m512i (&even_sum)[N],
                                                                       __m512i (&odd_sum)[N]) noexcept
{
#pragma GCC unroll 4
    for (std::size_t m = first; m < last; ++m) {
        __m512i even;
        __m512i odd;
        decode_pair<Arch, Block>(codes, m, table, even, odd);
#pragma GCC unroll 8
        for (std::size_t c = 0; c < N; ++c) {
            even_sum[c] = _mm512_dpbusd_epi32(even_sum[c], even, broadcast32<Arch>(entries + 32 * c + 8 * m));
            odd_sum[c] = _mm512_dpbusd_epi32(odd_sum[c], odd, broadcast32<Arch>(entries + 32 * c + 8 * m + 4));
        }
    }
}

// acc[c] += (d_w * d_a) * sum[c] for an NVFP4 sub-block (its UE4M3 scales: 16 bytes at
// scales), the reference's float steps; sum[c] holds the sub-block's exact integer sums.
template <class Arch, std::size_t N>
[[gnu::always_inline]] QK_TARGET_AVX512VNNI inline void add_nvfp4_sub_block(const __m512i (&sum)[N], const std::uint8_t* entries,
                                                                            const std::uint8_t* scales, __m512 (&acc)[N]) noexcept
{
    // ue4m3_half_table's values: the conversion gives them over 128, and times 128 is exact.
    const __m512 dw =
        _mm512_mul_ps(avx512_detail::ue4m3_half16_div128<Arch>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales))), _mm512_set1_ps(128.0f));
#pragma GCC unroll 16
    for (std::size_t c = 0; c < N; ++c) {
        const __m512 d = _mm512_mul_ps(dw, broadcast_float<Arch>(entries + 32 * N + 4 * c));
        acc[c] = _mm512_add_ps(acc[c], rounded<Arch>(_mm512_mul_ps(rounded<Arch>(d), _mm512_cvtepi32_ps(sum[c]))));
    }
}

// One NVFP4 code group against the N columns of a set: sub-block 2g (vectors 0 and 1), then
// 2g + 1 (vectors 2 and 3), each flushed with its UE4M3 scales (16 bytes at scales + 16i).
template <class Arch, std::size_t N>
[[gnu::always_inline]] QK_TARGET_AVX512VNNI inline void nvfp4_group(const std::uint8_t* codes, const std::uint8_t* entries, const std::uint8_t* scales,
                                                                    __m512i table, __m512 (&acc)[N]) noexcept
{
#pragma GCC unroll 2
    for (std::size_t i = 0; i < 2; ++i) {
        __m512i even_sum[N];
        __m512i odd_sum[N];
#pragma GCC unroll 8
        for (std::size_t c = 0; c < N; ++c) {
            // The sub-block's bias: the panel's for the group's first 16 values, or the rest of the group's.
            using qk::detail::panel_values;
            const panel_values values = i == 0 ? panel_values::first_half : panel_values::second_half;
            even_sum[c] = _mm512_set1_epi32(qk::detail::panel_correction(entries, N, c, values));
            odd_sum[c] = _mm512_setzero_si512();
        }
        multiply_pairs<Arch, block_nvfp4, N>(codes, entries, 2 * i, 2 * i + 2, table, even_sum, odd_sum);
        __m512i sum[N];
#pragma GCC unroll 8
        for (std::size_t c = 0; c < N; ++c) {
            sum[c] = _mm512_add_epi32(even_sum[c], odd_sum[c]);
        }
        add_nvfp4_sub_block<Arch, N>(sum, entries, scales + 16 * i, acc);
    }
}

// The grid of a 4-bit format, biased (none for Q8_0).
template <class Arch, class Block>
[[gnu::always_inline]] QK_TARGET_AVX512VNNI inline __m512i grid_table() noexcept
{
    if constexpr (std::is_same_v<Block, block_mxfp4> || std::is_same_v<Block, block_nvfp4>) {
        return _mm512_loadu_si512(biased_grid<mxfp4_values>.data());
    } else if constexpr (!std::is_same_v<Block, block_q8_0>) {
        return _mm512_loadu_si512(biased_grid<iq4_values>.data());
    } else {
        return _mm512_setzero_si512();
    }
}

// A block's weight scales for the 16 rows (MXFP4: the exponents e - 128; NVFP4: none here, its
// are per sub-block, in nvfp4_group).
template <class Arch, class Block>
[[gnu::always_inline]] QK_TARGET_AVX512VNNI inline __m512 block_scales(const std::uint8_t* scales) noexcept
{
    if constexpr (std::is_same_v<Block, block_mxfp4>) {
        // vscalefps(d_a, e - 128) is d_a * 2^(e - 128) correctly rounded: the reference's product.
        return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(scales))),
                                                   _mm512_set1_epi32(128)));
    } else if constexpr (!std::is_same_v<Block, block_nvfp4>) {
        return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(scales)));
    } else {
        return _mm512_setzero_ps();
    }
}

// acc[c] += (d_w * d_a) * sum[c] for code group g of a block (not NVFP4: add_nvfp4_sub_block),
// the reference's float steps lane by lane; sum[c] holds the group's exact integer sums, dw the
// block's weight scales (block_scales).
template <class Arch, class Block, std::size_t N>
[[gnu::always_inline]] QK_TARGET_AVX512VNNI inline void add_group(const __m512i (&sum)[N], const std::uint8_t* entries, const std::uint8_t* scales,
                                                                  std::size_t g, __m512 dw, __m512 (&acc)[N]) noexcept
{
    __m512 ls = _mm512_setzero_ps();
    if constexpr (std::is_same_v<Block, block_iq4_xs>) {
        ls = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(scales + 32 + 16 * g))));
    } else {
        (void)scales;
        (void)g;
    }
#pragma GCC unroll 16
    for (std::size_t c = 0; c < N; ++c) {
        const __m512 da = broadcast_float<Arch>(entries + 32 * N + 4 * c);
        __m512 d;
        if constexpr (std::is_same_v<Block, block_mxfp4>) {
            d = _mm512_scalef_ps(da, dw);
        } else if constexpr (std::is_same_v<Block, block_iq4_xs>) {
            d = _mm512_mul_ps(rounded<Arch>(_mm512_mul_ps(dw, da)), ls);
        } else {
            d = _mm512_mul_ps(dw, da);
        }
        acc[c] = _mm512_add_ps(acc[c], rounded<Arch>(_mm512_mul_ps(rounded<Arch>(d), _mm512_cvtepi32_ps(sum[c]))));
    }
}

// Code group g of a block (codes: its bytes; scales: the block's) against the N columns of a set
// (entries: the group's), added to acc. Each column keeps two int32 accumulators per group (even
// and odd vectors), so that 2N independent vpdpbusd chains cover the instruction's latency; the
// vectors are decoded two at a time, which leaves registers for them.
template <class Arch, class Block, std::size_t N>
[[gnu::always_inline]] QK_TARGET_AVX512VNNI inline void group_product(const std::uint8_t* codes, const std::uint8_t* entries,
                                                                      const std::uint8_t* scales, std::size_t g, __m512i table, __m512 dw,
                                                                      __m512 (&acc)[N]) noexcept
{
    if constexpr (std::is_same_v<Block, block_nvfp4>) {
        nvfp4_group<Arch, N>(codes, entries, scales + 16 * (2 * g), table, acc);
        return;
    }
    __m512i even_sum[N];
    __m512i odd_sum[N];
#pragma GCC unroll 8
    for (std::size_t c = 0; c < N; ++c) {
        even_sum[c] = broadcast32<Arch>(entries + 36 * N + 4 * c);
        odd_sum[c] = _mm512_setzero_si512();
    }
    multiply_pairs<Arch, Block, N>(codes, entries, 0, 4, table, even_sum, odd_sum);
    __m512i sum[N];
#pragma GCC unroll 8
    for (std::size_t c = 0; c < N; ++c) {
        sum[c] = _mm512_add_epi32(even_sum[c], odd_sum[c]);
    }
    add_group<Arch, Block, N>(sum, entries, scales, g, dw, acc);
}

template <class Arch, class Block, std::size_t N>
QK_TARGET_AVX512VNNI void tile(const packed_tile<Block>& t, const std::uint8_t* entries, float* y, std::size_t y_stride, __mmask16 rows) noexcept
{
    using traits = packed_traits<Block>;
    // Eight Q8_0 columns spend the issue slots that eight prefetches per group would take: 2-8%
    // slower at 128 columns with them, where the 4-bit formats' four gain 2-5%.
    constexpr bool prefetch = !(std::is_same_v<Block, block_q8_0> && N == packed_panel_columns);
    const __m512i table = grid_table<Arch, Block>();
    __m512 acc[N];
#pragma GCC unroll 8
    for (std::size_t c = 0; c < N; ++c) {
        acc[c] = _mm512_setzero_ps();
    }
    for (std::size_t b = 0; b < t.blocks; ++b) {
        const std::uint8_t* codes = t.codes(b);
        const std::uint8_t* scales = t.scales(b);
        if constexpr (prefetch) {
            qk::detail::prefetch_lines(scales, tile_prefetch_distance, traits::scale_bytes);
        }
        const __m512 dw = block_scales<Arch, Block>(scales);
        for (std::size_t g = 0; g < traits::groups_per_block; ++g, codes += traits::code_bytes, entries += N * packed_entry_bytes) {
            if constexpr (prefetch) {
                qk::detail::prefetch_lines(codes, tile_prefetch_distance, traits::code_bytes);
            }
            group_product<Arch, Block, N>(codes, entries, scales, g, table, dw, acc);
        }
    }
#pragma GCC unroll 8
    for (std::size_t c = 0; c < N; ++c) {
        _mm512_mask_storeu_ps(y + c * y_stride, rows, acc[c]);
    }
}

// Two tiles against one column (a mat-vec), block by block in turn, so that the thread reads two
// sequential streams: tile()'s steps with N = 1 for each.
template <class Arch, class Block>
QK_TARGET_AVX512VNNI void tile_pair(const packed_tile<Block>& first, const packed_tile<Block>& second, const std::uint8_t* entries, float* y0,
                                    float* y1, __mmask16 rows) noexcept
{
    using traits = packed_traits<Block>;
    const __m512i table = grid_table<Arch, Block>();
    __m512 acc[2][1] = {{_mm512_setzero_ps()}, {_mm512_setzero_ps()}};
    for (std::size_t b = 0; b < first.blocks; ++b, entries += traits::groups_per_block * packed_entry_bytes) {
#pragma GCC unroll 2
        for (std::size_t which = 0; which < 2; ++which) {
            const packed_tile<Block>& t = which == 0 ? first : second;
            const std::uint8_t* codes = t.codes(b);
            const std::uint8_t* scales = t.scales(b);
            qk::detail::prefetch_lines(scales, tile_prefetch_distance, traits::scale_bytes);
            const __m512 dw = block_scales<Arch, Block>(scales);
            const std::uint8_t* entry = entries;
            for (std::size_t g = 0; g < traits::groups_per_block; ++g, codes += traits::code_bytes, entry += packed_entry_bytes) {
                qk::detail::prefetch_lines(codes, tile_prefetch_distance, traits::code_bytes);
                group_product<Arch, Block, 1>(codes, entry, scales, g, table, dw, acc[which]);
            }
        }
    }
    _mm512_storeu_ps(y0, acc[0][0]);
    _mm512_mask_storeu_ps(y1, rows, acc[1][0]);
}

// The lanes of a tile's first `rows` rows (all 16 from 16 on).
inline __mmask16 row_mask(std::size_t rows) noexcept
{
    return static_cast<__mmask16>(rows >= packed_tile_rows ? 0xffffu : (1u << rows) - 1u);
}

} // namespace qk::kernels::packed_avx512_detail

namespace qk::kernels {

template <class Arch, class Block>
QK_TARGET_AVX512VNNI void tile_product(const packed_tile<Block>& tile, const std::uint8_t* entries, std::size_t n, float* y,
                                       std::size_t y_stride, std::size_t rows, arch::requires_arch<arch::avx512vnni>) noexcept
{
    namespace k = packed_avx512_detail;
    const __mmask16 mask = k::row_mask(rows);
    qk::detail::with_column_count(n, [&](auto columns) { k::tile<Arch, Block, decltype(columns)::value>(tile, entries, y, y_stride, mask); });
}

template <class Arch, class Block>
QK_TARGET_AVX512VNNI void tile_pair_product(const packed_tile<Block>& first, const packed_tile<Block>& second, const std::uint8_t* entries,
                                            float* y0, float* y1, std::size_t rows, arch::requires_arch<arch::avx512vnni>) noexcept
{
    packed_avx512_detail::tile_pair<Arch, Block>(first, second, entries, y0, y1, packed_avx512_detail::row_mask(rows));
}

} // namespace qk::kernels

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif // QK_HAS_X86_KERNELS
