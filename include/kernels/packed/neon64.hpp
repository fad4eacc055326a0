// The tile kernel over packed weights (kernels/packed.hpp) on AArch64 with the dot-product
// instructions (qk::arch::neon64_dotprod): four rows per vector, half a tile (eight rows) of up to
// eight columns at a time, with sdot by element. Checked bit for bit against packed/generic.hpp
// under qemu; plain Armv8.0 (neon64) keeps the scalar reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../arch.hpp"
#include "../e8m0.hpp"
#include "../formats.hpp"
#include "../packed.hpp"
#include "../target.hpp"
#include "generic.hpp"

#if QK_HAS_ARM_KERNELS
#include <arm_neon.h>

// Technique: sdot multiplies signed by signed, so the 8-bit codes are unbiased (eor 0x80) and the
// 4-bit codes decoded through the signed grid (tbl), once per vector and four rows; the panel's
// corrections are not used, and the sums are exact for any bytes (four products of at most 2^14
// per int32 lane). Each column's 32 activations are two 16-byte registers whose four-byte groups
// sdot's by-element form picks, so no broadcasts are needed. Sixteen int32 accumulators (eight
// columns by two row quads), eight activation registers and two weight registers fit in the 32
// vector registers; the float accumulators (the reference's unfused steps, per group) live on the
// stack. As in dot/neon64.hpp, the helpers carry the dotprod target and read through pointers.
// NVFP4's 16-value sub-blocks are each one of the two activation registers of a group (j = 0, 1),
// so their sums are flushed after each, with the sub-block's own scales.
namespace qk::kernels::packed_neon64_detail {

#define QK_PACKED_NEON64_INLINE [[gnu::always_inline]] QK_TARGET_NEON64_DOTPROD inline

// acc plus, in each lane, the four products of w's lane with the four bytes of a's lane Lane.
// Clang before 16 lacks vdotq_laneq_s32 unless the flags enable dotprod (see dot/neon64.hpp).
template <class Arch, int Lane>
QK_PACKED_NEON64_INLINE int32x4_t dot_lane(int32x4_t acc, int8x16_t w, int8x16_t a) noexcept
{
#if defined(__clang__) && !defined(__ARM_FEATURE_DOTPROD)
    __asm__("sdot %0.4s, %1.16b, %2.4b[%3]" : "+w"(acc) : "w"(w), "w"(a), "i"(Lane));
    return acc;
#else
    return vdotq_laneq_s32(acc, w, a, Lane);
#endif
}

// Signed weights of vector k (values 4k .. 4k + 3) of rows 4q .. 4q + 3 of a code group.
template <class Arch, class Block>
QK_PACKED_NEON64_INLINE int8x16_t weights(const std::uint8_t* codes, std::size_t k, std::size_t q, int8x16_t grid) noexcept
{
    if constexpr (std::is_same_v<Block, block_q8_0>) {
        return vreinterpretq_s8_u8(veorq_u8(vld1q_u8(codes + 64 * k + 16 * q), vdupq_n_u8(0x80)));
    } else {
        const uint8x16_t v = vld1q_u8(codes + 64 * (k / 2) + 16 * q);
        return vqtbl1q_s8(grid, k % 2 == 0 ? vandq_u8(v, vdupq_n_u8(0x0f)) : vshrq_n_u8(v, 4));
    }
}

// The weight scales of rows 4q .. 4q + 3 of a block (MXFP4: the halved E8M0 values of e8m0.hpp;
// NVFP4, given the scales of one sub-block: the halved UE4M3 values of formats/nvfp4.hpp).
template <class Arch, class Block>
QK_PACKED_NEON64_INLINE float32x4_t weight_scales(const std::uint8_t* scales, std::size_t q) noexcept
{
    if constexpr (std::is_same_v<Block, block_mxfp4> || std::is_same_v<Block, block_nvfp4>) {
        const auto* table = std::is_same_v<Block, block_mxfp4> ? reinterpret_cast<const float*>(&e8m0_half_table)
                                                               : reinterpret_cast<const float*>(&ue4m3_half_table);
        float d[4];
        for (std::size_t i = 0; i < 4; ++i) {
            d[i] = table[scales[4 * q + i]];
        }
        return vld1q_f32(d);
    } else {
        std::uint16_t bits[4];
        std::memcpy(bits, scales + 8 * q, sizeof bits);
        return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(bits)));
    }
}

// Keeps a product from being fused into the addition that consumes it (the reference rounds both).
template <class Arch>
QK_PACKED_NEON64_INLINE float32x4_t rounded(float32x4_t v) noexcept
{
    __asm__("" : "+w"(v));
    return v;
}

// Vectors 4j + Lane of rows 8h .. 8h + 7 against every column's activation register a[c].
template <class Arch, class Block, std::size_t N, int Lane>
QK_PACKED_NEON64_INLINE void dot_vector(const std::uint8_t* codes, std::size_t j, std::size_t h, int8x16_t grid, const int8x16_t (&a)[N],
                                        int32x4_t (&sum)[N][2]) noexcept
{
    const int8x16_t w0 = weights<Arch, Block>(codes, 4 * j + Lane, 2 * h, grid);
    const int8x16_t w1 = weights<Arch, Block>(codes, 4 * j + Lane, 2 * h + 1, grid);
#pragma GCC unroll 8
    for (std::size_t c = 0; c < N; ++c) {
        sum[c][0] = dot_lane<Arch, Lane>(sum[c][0], w0, a[c]);
        sum[c][1] = dot_lane<Arch, Lane>(sum[c][1], w1, a[c]);
    }
}

// The int32 sums of rows 8h .. 8h + 7, scaled by the weight scales at `weight` (the block's, or
// one NVFP4 sub-block's) and the columns' activation scales, added to the float accumulators.
template <class Arch, class Block, std::size_t N>
QK_PACKED_NEON64_INLINE void flush(const int32x4_t (&sum)[N][2], const std::uint8_t* weight, const std::uint8_t* scales, std::size_t g,
                                   std::size_t h, const std::uint8_t* entries, float (&acc)[N][packed_tile_rows]) noexcept
{
#pragma GCC unroll 2
    for (std::size_t i = 0; i < 2; ++i) {
        const std::size_t q = 2 * h + i;
        const float32x4_t dw = weight_scales<Arch, Block>(weight, q);
        float32x4_t ls = vdupq_n_f32(0.0f);
        if constexpr (std::is_same_v<Block, block_iq4_xs>) {
            const int8x8_t multipliers = vld1_s8(reinterpret_cast<const std::int8_t*>(scales + 32 + 16 * g + 4 * q));
            ls = vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(multipliers))));
        }
#pragma GCC unroll 8
        for (std::size_t c = 0; c < N; ++c) {
            float da;
            std::memcpy(&da, entries + 32 * N + 4 * c, sizeof da);
            float32x4_t d = vmulq_n_f32(dw, da);
            if constexpr (std::is_same_v<Block, block_iq4_xs>) {
                d = vmulq_f32(rounded<Arch>(d), ls);
            }
            const float32x4_t term = rounded<Arch>(vmulq_f32(rounded<Arch>(d), vcvtq_f32_s32(sum[c][i])));
            float* out = acc[c] + 4 * q;
            vst1q_f32(out, vaddq_f32(vld1q_f32(out), term));
        }
    }
}

template <class Arch, class Block, std::size_t N>
QK_TARGET_NEON64_DOTPROD void tile(const packed_tile<Block>& t, const std::uint8_t* entries, float* y, std::size_t y_stride, std::size_t rows) noexcept
{
    using traits = packed_traits<Block>;
    int8x16_t grid = vdupq_n_s8(0);
    if constexpr (std::is_same_v<Block, block_mxfp4> || std::is_same_v<Block, block_nvfp4>) {
        grid = vld1q_s8(reinterpret_cast<const std::int8_t*>(&mxfp4_values));
    } else if constexpr (!std::is_same_v<Block, block_q8_0>) {
        grid = vld1q_s8(reinterpret_cast<const std::int8_t*>(&iq4_values));
    }
    alignas(16) float acc[N][packed_tile_rows] = {};
    for (std::size_t b = 0; b < t.blocks; ++b) {
        const std::uint8_t* codes = t.codes(b);
        const std::uint8_t* scales = t.scales(b);
        for (std::size_t g = 0; g < traits::groups_per_block; ++g, codes += traits::code_bytes, entries += N * packed_entry_bytes) {
            for (std::size_t h = 0; h < 2; ++h) {
                int32x4_t sum[N][2];
#pragma GCC unroll 8
                for (std::size_t c = 0; c < N; ++c) {
                    sum[c][0] = vdupq_n_s32(0);
                    sum[c][1] = vdupq_n_s32(0);
                }
#pragma GCC unroll 2
                for (std::size_t j = 0; j < 2; ++j) {
                    int8x16_t a[N];
#pragma GCC unroll 8
                    for (std::size_t c = 0; c < N; ++c) {
                        a[c] = vld1q_s8(reinterpret_cast<const std::int8_t*>(entries + 32 * c + 16 * j));
                    }
                    dot_vector<Arch, Block, N, 0>(codes, j, h, grid, a, sum);
                    dot_vector<Arch, Block, N, 1>(codes, j, h, grid, a, sum);
                    dot_vector<Arch, Block, N, 2>(codes, j, h, grid, a, sum);
                    dot_vector<Arch, Block, N, 3>(codes, j, h, grid, a, sum);
                    if constexpr (std::is_same_v<Block, block_nvfp4>) {
                        // Sub-block 2g + j ends here.
                        flush<Arch, Block, N>(sum, scales + 16 * (2 * g + j), scales, g, h, entries, acc);
#pragma GCC unroll 8
                        for (std::size_t c = 0; c < N; ++c) {
                            sum[c][0] = vdupq_n_s32(0);
                            sum[c][1] = vdupq_n_s32(0);
                        }
                    }
                }
                if constexpr (!std::is_same_v<Block, block_nvfp4>) {
                    flush<Arch, Block, N>(sum, scales, scales, g, h, entries, acc);
                }
            }
        }
    }
    for (std::size_t c = 0; c < N; ++c) {
        std::memcpy(y + c * y_stride, acc[c], rows * sizeof(float));
    }
}

#undef QK_PACKED_NEON64_INLINE

} // namespace qk::kernels::packed_neon64_detail

namespace qk::kernels {

template <class Arch, class Block>
QK_TARGET_NEON64_DOTPROD void tile_product(const packed_tile<Block>& tile, const std::uint8_t* entries, std::size_t n, float* y,
                                           std::size_t y_stride, std::size_t rows, arch::requires_arch<arch::neon64_dotprod>) noexcept
{
    namespace k = packed_neon64_detail;
    qk::detail::with_column_count(n, [&](auto columns) { k::tile<Arch, Block, decltype(columns)::value>(tile, entries, y, y_stride, rows); });
}

} // namespace qk::kernels

#endif // QK_HAS_ARM_KERNELS
