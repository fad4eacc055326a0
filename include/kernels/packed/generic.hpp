// The scalar reference tile kernel over packed weights (kernels/packed.hpp): 16 rows x n columns,
// one value at a time, each the sum over blocks (NVFP4: sub-blocks) in order of (d_w * d_a) * sumi
// rounded twice, exactly as dot/generic.hpp: the SIMD tile kernels are checked against it bit for
// bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../arch.hpp"
#include "../e8m0.hpp"
#include "../formats.hpp"
#include "../fp16.hpp"
#include "../packed.hpp"
#include "../strict_fp.hpp"

namespace qk::detail {

template <class Block>
[[nodiscard]] inline int packed_value(const std::uint8_t* group, std::size_t r, std::size_t j) noexcept
{
    const int code = get_code<Block>(group, r, j);
    if constexpr (std::is_same_v<Block, block_q8_0>) {
        return code;
    } else if constexpr (std::is_same_v<Block, block_mxfp4> || std::is_same_v<Block, block_nvfp4>) {
        return mxfp4_values[static_cast<std::size_t>(code)];
    } else {
        return iq4_values[static_cast<std::size_t>(code)];
    }
}

template <class Block>
[[nodiscard]] inline float packed_fp16(const std::uint8_t* p) noexcept
{
    fp16_bits h;
    std::memcpy(&h, p, sizeof h);
    return fp16_to_fp32(h);
}

// The block's float scale d_w * d_a for row r and an activation scale (IQ4_XS: the superblock's
// d_w * d_a, which each group then multiplies by its ls - 32).
template <class Block>
[[nodiscard]] inline float packed_scale(const std::uint8_t* block_scales, std::size_t r, float activation) noexcept
{
    if constexpr (std::is_same_v<Block, block_mxfp4>) {
        return activation * e8m0_half_to_fp32(block_scales[r]);
    } else {
        return packed_fp16<Block>(block_scales + 2 * r) * activation;
    }
}

template <class Block>
QK_STRICT_FP void packed_tile_generic(const packed_tile<Block>& tile, const std::uint8_t* entries, std::size_t n, float* y,
                                      std::size_t y_stride, std::size_t rows) noexcept
{
    QK_STRICT_FP_BODY
    using traits = packed_traits<Block>;
    for (std::size_t c = 0; c < n; ++c) {
        for (std::size_t r = 0; r < rows; ++r) {
            float sum = 0.0f;
            for (std::size_t b = 0; b < tile.blocks; ++b) {
                const std::uint8_t* block_scales = tile.scales(b);
                for (std::size_t g = 0; g < traits::groups_per_block; ++g) {
                    const std::size_t group = b * traits::groups_per_block + g;
                    const std::uint8_t* entry = entries + group * n * packed_entry_bytes;
                    const std::uint8_t* codes = tile.codes(b) + g * traits::code_bytes;
                    const auto* qs = reinterpret_cast<const std::int8_t*>(entry + 32 * c);
                    float activation;
                    std::memcpy(&activation, entry + 32 * n + 4 * c, sizeof activation);
                    if constexpr (std::is_same_v<Block, block_nvfp4>) {
                        // Sub-blocks 2g and 2g + 1, each its own float steps, as dot/generic.hpp.
                        for (std::size_t h = 0; h < 2; ++h) {
                            int sumi = 0;
                            for (std::size_t j = 16 * h; j < 16 * h + 16; ++j) {
                                sumi += packed_value<Block>(codes, r, j) * qs[j];
                            }
                            const float d = rounded(activation * ue4m3_half_table[block_scales[16 * (2 * g + h) + r]]);
                            const float term = rounded(d * static_cast<float>(sumi));
                            sum = sum + term;
                        }
                        continue;
                    }
                    int sumi = 0;
                    for (std::size_t j = 0; j < 32; ++j) {
                        sumi += packed_value<Block>(codes, r, j) * qs[j];
                    }
                    float d = packed_scale<Block>(block_scales, r, activation);
                    if constexpr (std::is_same_v<Block, block_iq4_xs>) {
                        d = d * static_cast<float>(static_cast<std::int8_t>(block_scales[32 + 16 * g + r]));
                    }
                    const float term = rounded(d * static_cast<float>(sumi));
                    sum = sum + term;
                }
            }
            y[c * y_stride + r] = sum;
        }
    }
}

} // namespace qk::detail

namespace qk::kernels {

// y[c * y_stride + r] = row r of the tile times column c of the panel entries, for r < rows
// (at most packed_tile_rows) and c < n (at most packed_panel_columns). The activations' qs are in
// [-127, 127], as the Q8_0 and Q8_K quantizers make them (the AVX2 kernel's products rely on it);
// the weights may be any valid blocks.
template <class Arch, class Block>
void tile_product(const packed_tile<Block>& tile, const std::uint8_t* entries, std::size_t n, float* y, std::size_t y_stride,
                  std::size_t rows, arch::requires_arch<arch::generic>) noexcept
{
    detail::packed_tile_generic<Block>(tile, entries, n, y, y_stride, rows);
}

} // namespace qk::kernels
