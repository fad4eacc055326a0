// The tile kernel over packed weights (kernels/packed.hpp) on AVX2, which also serves the AVX-512 BW
// tag (no int8 dot instruction there either, and no vpsignb on 512-bit registers): eight rows per
// vector, half a tile at a time, every column of the set against each decoded weight vector.
// Checked bit for bit against packed/generic.hpp; the VNNI tags have packed/avx512vnni.hpp.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../arch.hpp"
#include "../e8m0.hpp"
#include "../formats.hpp"
#include "../packed.hpp"
#include "../prefetch.hpp"
#include "../target.hpp"
#include "../dot/avx2.hpp"
#include "generic.hpp"

#if QK_HAS_X86_KERNELS
#include <immintrin.h>

// Technique: the products go through vpmaddubsw. For Q8_0 and the IQ4 grids as in dot/avx2.hpp
// (|w| times the activation carrying w's sign, exact for any weight byte and activations in
// [-127, 127], the range of the quantizers that fill a panel): the 8-bit codes are unbiased (xor
// 0x80) and the 4-bit codes decoded through the signed grid, once per vector and half tile. MXFP4
// and NVFP4 decode through a biased grid instead and correct their sums (biased_weights). Each
// column's four-byte activation groups are broadcast from memory. With 16 vector registers there
// is no room for two halves of N columns of accumulators, so the kernel runs the eight vectors of
// a group over one half, flushes the int32 sums into float accumulators kept on the stack (the
// reference's unfused steps), then takes the other half. NVFP4 flushes each 16-value sub-block on
// its own (vectors 0 .. 3 of a group, then 4 .. 7) with its own scales.
namespace qk::kernels::packed_avx2_detail {

#define QK_PACKED_AVX2_INLINE [[gnu::always_inline]] QK_TARGET_AVX2 inline

// MXFP4's and NVFP4's weights go in biased by +12, into [0, 24]: vpmaddubsw takes them as its
// unsigned operand as they are and the activations as its signed one, with no vpabsb and vpsignb,
// and 12 times the activations' sum comes off each int32 sum: the panel's corrections (-128 times
// that sum) times 12 / 128, exactly. A pair sum is then at most 2 * 24 * 127, and four vectors' add
// up in int16 before one vpmaddwd (an NVFP4 sub-block; an MXFP4 group in two halves): two
// instructions per column and vector, where the signed form takes three and a vpabsb per vector.
// The same integers, so the bits stay the reference's. With the avx2 tag on Zen 5 against the
// signed form, in one process: mat-vec 14336 x 4096 from memory 1.13-1.16x (MXFP4) and 1.08-1.11x
// (NVFP4) at one thread and two, 256 rows in L2 1.46x and 1.31x; gemm of 4096 or 14336 rows by 128
// or 512 columns 1.11-1.14x and 1.07-1.08x.
template <class Block>
inline constexpr bool biased_weights = std::is_same_v<Block, block_mxfp4> || std::is_same_v<Block, block_nvfp4>;
static_assert(4 * 2 * 2 * mxfp4_value_bias * 127 <= 32767);

// Weights of vector k (values 4k .. 4k + 3) of rows 8h .. 8h + 7 of a code group: signed, or
// biased where `grid` is (biased_weights).
template <class Arch, class Block>
QK_PACKED_AVX2_INLINE __m256i weights(const std::uint8_t* codes, std::size_t k, std::size_t h, __m256i grid) noexcept
{
    if constexpr (std::is_same_v<Block, block_q8_0>) {
        const __m256i biased = _mm256_load_si256(reinterpret_cast<const __m256i*>(codes + 64 * k + 32 * h));
        return _mm256_xor_si256(biased, _mm256_set1_epi8(static_cast<char>(0x80)));
    } else {
        const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(codes + 64 * (k / 2) + 32 * h));
        const __m256i nibbles = k % 2 == 0 ? v : _mm256_srli_epi16(v, 4);
        return _mm256_shuffle_epi8(grid, _mm256_and_si256(nibbles, _mm256_set1_epi8(0x0f)));
    }
}

// The weight scales of rows 8h .. 8h + 7 of a block (MXFP4: the halved E8M0 values of e8m0.hpp;
// NVFP4, given the scales of one sub-block: the halved UE4M3 values of formats/nvfp4.hpp, from
// avx2_detail::ue4m3_half8_div128 times 128, exact). Both are built in registers, bit for bit the
// tables' values: a gather of eight costs more than a mat-vec step on AMD's cores.
template <class Arch, class Block>
QK_PACKED_AVX2_INLINE __m256 weight_scales(const std::uint8_t* scales, std::size_t h) noexcept
{
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + 8 * h));
    if constexpr (std::is_same_v<Block, block_mxfp4>) {
        return avx2_detail::e8m0_half8<Arch>(_mm256_cvtepu8_epi32(bytes));
    } else if constexpr (std::is_same_v<Block, block_nvfp4>) {
        return _mm256_mul_ps(avx2_detail::ue4m3_half8_div128<Arch>(bytes), _mm256_set1_ps(128.0f));
    } else {
        return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(scales + 16 * h)));
    }
}

template <class Arch>
QK_PACKED_AVX2_INLINE __m256i broadcast32(const std::uint8_t* p) noexcept
{
    std::int32_t v;
    std::memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

// Keeps a product from being fused into the addition that consumes it (the reference rounds both).
template <class Arch>
QK_PACKED_AVX2_INLINE __m256 rounded(__m256 v) noexcept
{
    __asm__("" : "+x"(v));
    return v;
}

// Vector k of rows 8h .. 8h + 7 of a code group against the N columns of a set.
template <class Arch, class Block, std::size_t N>
QK_PACKED_AVX2_INLINE void vector_products(const std::uint8_t* codes, const std::uint8_t* entries, std::size_t k, std::size_t h, __m256i grid,
                                           __m256i (&sum)[N]) noexcept
{
    const __m256i w = weights<Arch, Block>(codes, k, h, grid);
    if constexpr (biased_weights<Block>) {
#pragma GCC unroll 8
        for (std::size_t c = 0; c < N; ++c) {
            sum[c] = _mm256_add_epi16(sum[c], _mm256_maddubs_epi16(w, broadcast32<Arch>(entries + 32 * c + 4 * k)));
        }
        return;
    }
    const __m256i magnitude = _mm256_abs_epi8(w);
#pragma GCC unroll 8
    for (std::size_t c = 0; c < N; ++c) {
        const __m256i a = broadcast32<Arch>(entries + 32 * c + 4 * k);
        const __m256i pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(a, w));
        sum[c] = _mm256_add_epi32(sum[c], _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
    }
}

// The N columns of a set against rows 8h .. 8h + 7 of one code group: the int32 sums over the
// group's vectors K0 .. K1 - 1 (all eight, or one NVFP4 sub-block's four), scaled and added to the
// float accumulators.
template <class Arch, class Block, std::size_t N, std::size_t K0 = 0, std::size_t K1 = 8>
QK_PACKED_AVX2_INLINE void half_group(const std::uint8_t* codes, const std::uint8_t* entries, const std::uint8_t* scales, std::size_t g, std::size_t h,
                                      __m256 dw, __m256i grid, float (&acc)[N][packed_tile_rows]) noexcept
{
    __m256i sum[N];
#pragma GCC unroll 8
    for (std::size_t c = 0; c < N; ++c) {
        sum[c] = _mm256_setzero_si256();
    }
    __m256i total[N];
    if constexpr (biased_weights<Block>) {
        // Four vectors at a time in int16, then the bias off (see biased_weights).
        const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 2
        for (std::size_t k0 = K0; k0 < K1; k0 += 4) {
            // Unrolled for few columns only, as below.
            if constexpr (N <= 2) {
#pragma GCC unroll 4
                for (std::size_t k = k0; k < k0 + 4; ++k) {
                    vector_products<Arch, Block, N>(codes, entries, k, h, grid, sum);
                }
            } else {
#pragma GCC unroll 1
                for (std::size_t k = k0; k < k0 + 4; ++k) {
                    vector_products<Arch, Block, N>(codes, entries, k, h, grid, sum);
                }
            }
#pragma GCC unroll 8
            for (std::size_t c = 0; c < N; ++c) {
                const __m256i part = _mm256_madd_epi16(sum[c], ones);
                total[c] = k0 == K0 ? part : _mm256_add_epi32(total[c], part);
                sum[c] = _mm256_setzero_si256();
            }
        }
#pragma GCC unroll 8
        for (std::size_t c = 0; c < N; ++c) {
            using qk::detail::panel_values;
            const panel_values values = K1 - K0 == 8 ? panel_values::all : K0 == 0 ? panel_values::first_half : panel_values::second_half;
            const std::int32_t correction = qk::detail::panel_correction(entries, N, c, values);
            total[c] = _mm256_add_epi32(total[c], _mm256_set1_epi32(correction / 128 * mxfp4_value_bias));
        }
    } else if constexpr (N <= 2) {
        // Few columns: unrolled, so that the loads of the eight vectors go out together (mat-vec).
#pragma GCC unroll 8
        for (std::size_t k = K0; k < K1; ++k) {
            vector_products<Arch, Block, N>(codes, entries, k, h, grid, sum);
        }
    } else {
        // Unrolled, g++ keeps every column's eight activation broadcasts live and spills.
#pragma GCC unroll 1
        for (std::size_t k = K0; k < K1; ++k) {
            vector_products<Arch, Block, N>(codes, entries, k, h, grid, sum);
        }
    }
    __m256 ls = _mm256_setzero_ps();
    if constexpr (std::is_same_v<Block, block_iq4_xs>) {
        const auto* multipliers = scales + 32 + 16 * g + 8 * h;
        ls = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(multipliers))));
    }
#pragma GCC unroll 8
    for (std::size_t c = 0; c < N; ++c) {
        float da;
        std::memcpy(&da, entries + 32 * N + 4 * c, sizeof da);
        __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(da));
        if constexpr (std::is_same_v<Block, block_iq4_xs>) {
            d = _mm256_mul_ps(rounded<Arch>(d), ls);
        }
        if constexpr (!biased_weights<Block>) {
            total[c] = sum[c];
        }
        const __m256 term = rounded<Arch>(_mm256_mul_ps(rounded<Arch>(d), _mm256_cvtepi32_ps(total[c])));
        float* a = acc[c] + 8 * h;
        _mm256_store_ps(a, _mm256_add_ps(_mm256_load_ps(a), term));
    }
}

// How far ahead of the bytes being read the kernel prefetches, into L1 (see avx512vnni.hpp's
// tile_prefetch_distance). This kernel on Zen 5, mat-vec 14336 x 4096 from memory over the same
// buffers with the distance set at run time, medians of 12 passes as fractions of a streaming pass
// just before each, none -> 4 KiB -> 8 KiB, one thread: IQ4_XS 0.55 -> 0.75 -> 0.77, NVFP4 0.58 ->
// 0.67 -> 0.66, IQ4_NL 0.70 -> 0.77 -> 0.80, MXFP4 0.76 -> 0.78 -> 0.79, Q8_0 0.93 -> 0.98 -> 1.05;
// two threads: 0.57 -> 1.07 -> 1.05, 0.44 -> 0.55 -> 0.56, 0.55 -> 0.60 -> 0.70, 0.77 -> 0.89 -> 0.92,
// 1.01 -> 1.42 -> 1.53 (a noisy phase of the host, but every format gained in it).
inline constexpr std::size_t tile_prefetch_distance = 8192;

template <class Arch, class Block, std::size_t N>
QK_TARGET_AVX2 void tile(const packed_tile<Block>& t, const std::uint8_t* entries, float* y, std::size_t y_stride, std::size_t rows) noexcept
{
    using traits = packed_traits<Block>;
    // As on AVX-512: with a full set of Q8_0 columns the prefetches cost more than they bring.
    constexpr bool prefetch = !(std::is_same_v<Block, block_q8_0> && N == packed_panel_columns);
    __m256i grid = _mm256_setzero_si256();
    if constexpr (biased_weights<Block>) {
        grid = avx2_detail::mxfp4_biased_table<Arch>();
    } else if constexpr (!std::is_same_v<Block, block_q8_0>) {
        grid = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(iq4_values.data())));
    }
    alignas(32) float acc[N][packed_tile_rows] = {};
    for (std::size_t b = 0; b < t.blocks; ++b) {
        const std::uint8_t* codes = t.codes(b);
        const std::uint8_t* scales = t.scales(b);
        if constexpr (prefetch) {
            qk::detail::prefetch_lines(scales, tile_prefetch_distance, traits::scale_bytes);
        }
        const __m256 dw[2] = {weight_scales<Arch, Block>(scales, 0), weight_scales<Arch, Block>(scales, 1)};
        for (std::size_t g = 0; g < traits::groups_per_block; ++g, codes += traits::code_bytes, entries += N * packed_entry_bytes) {
            if constexpr (prefetch) {
                qk::detail::prefetch_lines(codes, tile_prefetch_distance, traits::code_bytes);
            }
            // The halves one after the other: with both at once, g++ shares the activation
            // broadcasts of the two and spills them.
            if constexpr (std::is_same_v<Block, block_nvfp4>) {
                const std::uint8_t* first = scales + 16 * (2 * g); // sub-block 2g's, then 2g + 1's
                for (std::size_t h = 0; h < 2; ++h) {
                    half_group<Arch, Block, N, 0, 4>(codes, entries, scales, g, h, weight_scales<Arch, Block>(first, h), grid, acc);
                    half_group<Arch, Block, N, 4, 8>(codes, entries, scales, g, h, weight_scales<Arch, Block>(first + 16, h), grid, acc);
                }
            } else {
                half_group<Arch, Block, N>(codes, entries, scales, g, 0, dw[0], grid, acc);
                half_group<Arch, Block, N>(codes, entries, scales, g, 1, dw[1], grid, acc);
            }
        }
    }
    for (std::size_t c = 0; c < N; ++c) {
        std::memcpy(y + c * y_stride, acc[c], rows * sizeof(float));
    }
}

#undef QK_PACKED_AVX2_INLINE

} // namespace qk::kernels::packed_avx2_detail

namespace qk::kernels {

template <class Arch, class Block>
QK_TARGET_AVX2 void tile_product(const packed_tile<Block>& tile, const std::uint8_t* entries, std::size_t n, float* y, std::size_t y_stride,
                                 std::size_t rows, arch::requires_arch<arch::avx2>) noexcept
{
    namespace k = packed_avx2_detail;
    qk::detail::with_column_count(n, [&](auto columns) { k::tile<Arch, Block, decltype(columns)::value>(tile, entries, y, y_stride, rows); });
}

// xsimd's AVX-512 tags do not derive from avx2: the BW tag takes the AVX2 kernel explicitly (the
// VNNI tags have their own).
template <class Arch, class Block>
QK_TARGET_AVX512BW void tile_product(const packed_tile<Block>& tile, const std::uint8_t* entries, std::size_t n, float* y,
                                     std::size_t y_stride, std::size_t rows, arch::requires_arch<arch::avx512bw>) noexcept
{
    tile_product<Arch, Block>(tile, entries, n, y, y_stride, rows, arch::avx2{});
}

} // namespace qk::kernels

#endif // QK_HAS_X86_KERNELS
