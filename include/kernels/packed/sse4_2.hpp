// The tile kernel over packed weights (kernels/packed.hpp) on SSE4.2 (with SSSE3's pmaddubsw,
// psignb and pshufb): four rows per vector, a quarter of the tile at a time, every column of the
// set against each decoded weight vector. The AVX2 kernel (packed/avx2.hpp) on 128-bit registers,
// without F16C: checked bit for bit against packed/generic.hpp.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../arch.hpp"
#include "../dot/sse4_2.hpp"
#include "../e8m0.hpp"
#include "../formats.hpp"
#include "../packed.hpp"
#include "../target.hpp"
#include "generic.hpp"

#if QK_HAS_X86_KERNELS
#include <immintrin.h>

// Technique as in packed/avx2.hpp for Q8_0 and the IQ4 grids (products through pmaddubsw, |w|
// times the activation carrying w's sign; the reference's unfused steps into float accumulators
// on the stack), for MXFP4 and NVFP4 too (sums_in_int16), with the tile's 16 rows taken four at a
// time: the 16 vector registers then hold the accumulators of all eight columns. Without F16C the fp16 scales are
// converted as the SSE4.2 dot kernels convert theirs (dot/sse4_2.hpp: fp16x4_to_fp32).
namespace qk::kernels::packed_sse4_2_detail {

#define QK_PACKED_SSE4_2_INLINE [[gnu::always_inline]] QK_TARGET_SSE4_2 inline

// MXFP4's and NVFP4's doubled values are at most 12 in magnitude, so their int16 pair sums add up
// over a whole group (8 * 2 * 12 * 127 < 2^15) before one pmaddwd; NVFP4's over each 16-value
// sub-block, which is flushed on its own with its own scales.
template <class Block>
inline constexpr bool sums_in_int16 = std::is_same_v<Block, block_mxfp4> || std::is_same_v<Block, block_nvfp4>;
static_assert(std::ranges::all_of(mxfp4_values, [](int v) { return v >= -12 && v <= 12; }) && 8 * 2 * 12 * 127 <= 32767);

// Signed weights of vector k (values 4k .. 4k + 3) of rows 4q .. 4q + 3 of a code group.
template <class Arch, class Block>
QK_PACKED_SSE4_2_INLINE __m128i weights(const std::uint8_t* codes, std::size_t k, std::size_t q, __m128i grid) noexcept
{
    if constexpr (std::is_same_v<Block, block_q8_0>) {
        const __m128i biased = _mm_load_si128(reinterpret_cast<const __m128i*>(codes + 64 * k + 16 * q));
        return _mm_xor_si128(biased, _mm_set1_epi8(static_cast<char>(0x80)));
    } else {
        const __m128i v = _mm_load_si128(reinterpret_cast<const __m128i*>(codes + 64 * (k / 2) + 16 * q));
        const __m128i nibbles = k % 2 == 0 ? v : _mm_srli_epi16(v, 4);
        return _mm_shuffle_epi8(grid, _mm_and_si128(nibbles, _mm_set1_epi8(0x0f)));
    }
}

// The weight scales of rows 4q .. 4q + 3 of a block (MXFP4: the halved E8M0 values of e8m0.hpp;
// NVFP4, given the scales of one sub-block: the halved UE4M3 values of formats/nvfp4.hpp).
template <class Arch, class Block>
QK_PACKED_SSE4_2_INLINE __m128 weight_scales(const std::uint8_t* scales, std::size_t q) noexcept
{
    if constexpr (std::is_same_v<Block, block_mxfp4> || std::is_same_v<Block, block_nvfp4>) {
        const float* table = std::is_same_v<Block, block_mxfp4> ? e8m0_half_table.data() : ue4m3_half_table.data();
        const std::uint8_t* e = scales + 4 * q;
        return _mm_setr_ps(table[e[0]], table[e[1]], table[e[2]], table[e[3]]);
    } else {
        std::uint64_t bits;
        std::memcpy(&bits, scales + 8 * q, sizeof bits);
        return sse4_2_detail::fp16x4_to_fp32<Arch>(bits);
    }
}

template <class Arch>
QK_PACKED_SSE4_2_INLINE __m128i broadcast32(const std::uint8_t* p) noexcept
{
    std::int32_t v;
    std::memcpy(&v, p, sizeof v);
    return _mm_set1_epi32(v);
}

// Keeps a product from being fused into the addition that consumes it (the reference rounds both).
template <class Arch>
QK_PACKED_SSE4_2_INLINE __m128 rounded(__m128 v) noexcept
{
    __asm__("" : "+x"(v));
    return v;
}

// Vector k of rows 4q .. 4q + 3 of a code group against the N columns of a set.
template <class Arch, class Block, std::size_t N>
QK_PACKED_SSE4_2_INLINE void vector_products(const std::uint8_t* codes, const std::uint8_t* entries, std::size_t k, std::size_t q, __m128i grid,
                                             __m128i (&sum)[N]) noexcept
{
    const __m128i w = weights<Arch, Block>(codes, k, q, grid);
    const __m128i magnitude = _mm_abs_epi8(w);
#pragma GCC unroll 8
    for (std::size_t c = 0; c < N; ++c) {
        const __m128i a = broadcast32<Arch>(entries + 32 * c + 4 * k);
        const __m128i pairs = _mm_maddubs_epi16(magnitude, _mm_sign_epi8(a, w));
        if constexpr (sums_in_int16<Block>) {
            sum[c] = _mm_add_epi16(sum[c], pairs);
        } else {
            sum[c] = _mm_add_epi32(sum[c], _mm_madd_epi16(pairs, _mm_set1_epi16(1)));
        }
    }
}

// The N columns of a set against rows 4q .. 4q + 3 of one code group: the int32 sums over the
// group's vectors K0 .. K1 - 1 (all eight, or one NVFP4 sub-block's four), scaled and added to the
// float accumulators.
template <class Arch, class Block, std::size_t N, std::size_t K0 = 0, std::size_t K1 = 8>
QK_PACKED_SSE4_2_INLINE void quarter_group(const std::uint8_t* codes, const std::uint8_t* entries, const std::uint8_t* scales, std::size_t g,
                                           std::size_t q, __m128 dw, __m128i grid, float (&acc)[N][packed_tile_rows]) noexcept
{
    __m128i sum[N];
#pragma GCC unroll 8
    for (std::size_t c = 0; c < N; ++c) {
        sum[c] = _mm_setzero_si128();
    }
#pragma GCC unroll 8
    for (std::size_t k = K0; k < K1; ++k) {
        vector_products<Arch, Block, N>(codes, entries, k, q, grid, sum);
    }
    __m128 ls = _mm_setzero_ps();
    if constexpr (std::is_same_v<Block, block_iq4_xs>) {
        std::int32_t multipliers;
        std::memcpy(&multipliers, scales + 32 + 16 * g + 4 * q, sizeof multipliers);
        ls = _mm_cvtepi32_ps(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(multipliers)));
    }
#pragma GCC unroll 8
    for (std::size_t c = 0; c < N; ++c) {
        float da;
        std::memcpy(&da, entries + 32 * N + 4 * c, sizeof da);
        __m128 d = _mm_mul_ps(dw, _mm_set1_ps(da));
        if constexpr (std::is_same_v<Block, block_iq4_xs>) {
            d = _mm_mul_ps(rounded<Arch>(d), ls);
        }
        const __m128i total = sums_in_int16<Block> ? _mm_madd_epi16(sum[c], _mm_set1_epi16(1)) : sum[c];
        const __m128 term = rounded<Arch>(_mm_mul_ps(rounded<Arch>(d), _mm_cvtepi32_ps(total)));
        float* a = acc[c] + 4 * q;
        _mm_store_ps(a, _mm_add_ps(_mm_load_ps(a), term));
    }
}

template <class Arch, class Block, std::size_t N>
QK_TARGET_SSE4_2 void tile(const packed_tile<Block>& t, const std::uint8_t* entries, float* y, std::size_t y_stride, std::size_t rows) noexcept
{
    using traits = packed_traits<Block>;
    __m128i grid = _mm_setzero_si128();
    if constexpr (std::is_same_v<Block, block_mxfp4> || std::is_same_v<Block, block_nvfp4>) {
        grid = _mm_loadu_si128(reinterpret_cast<const __m128i*>(mxfp4_values.data()));
    } else if constexpr (!std::is_same_v<Block, block_q8_0>) {
        grid = _mm_loadu_si128(reinterpret_cast<const __m128i*>(iq4_values.data()));
    }
    alignas(16) float acc[N][packed_tile_rows] = {};
    for (std::size_t b = 0; b < t.blocks; ++b) {
        const std::uint8_t* codes = t.codes(b);
        const std::uint8_t* scales = t.scales(b);
        const __m128 dw[4] = {weight_scales<Arch, Block>(scales, 0), weight_scales<Arch, Block>(scales, 1), weight_scales<Arch, Block>(scales, 2),
                              weight_scales<Arch, Block>(scales, 3)};
        for (std::size_t g = 0; g < traits::groups_per_block; ++g, codes += traits::code_bytes, entries += N * packed_entry_bytes) {
            for (std::size_t q = 0; q < 4; ++q) {
                if constexpr (std::is_same_v<Block, block_nvfp4>) {
                    const std::uint8_t* first = scales + 16 * (2 * g); // sub-block 2g's, then 2g + 1's
                    quarter_group<Arch, Block, N, 0, 4>(codes, entries, scales, g, q, weight_scales<Arch, Block>(first, q), grid, acc);
                    quarter_group<Arch, Block, N, 4, 8>(codes, entries, scales, g, q, weight_scales<Arch, Block>(first + 16, q), grid, acc);
                } else {
                    quarter_group<Arch, Block, N>(codes, entries, scales, g, q, dw[q], grid, acc);
                }
            }
        }
    }
    for (std::size_t c = 0; c < N; ++c) {
        std::memcpy(y + c * y_stride, acc[c], rows * sizeof(float));
    }
}

#undef QK_PACKED_SSE4_2_INLINE

} // namespace qk::kernels::packed_sse4_2_detail

namespace qk::kernels {

template <class Arch, class Block>
QK_TARGET_SSE4_2 void tile_product(const packed_tile<Block>& tile, const std::uint8_t* entries, std::size_t n, float* y, std::size_t y_stride,
                                   std::size_t rows, arch::requires_arch<arch::sse4_2>) noexcept
{
    namespace k = packed_sse4_2_detail;
    qk::detail::with_column_count(n, [&](auto columns) { k::tile<Arch, Block, decltype(columns)::value>(tile, entries, y, y_stride, rows); });
}

} // namespace qk::kernels

#endif // QK_HAS_X86_KERNELS
