// kernels::split_activations<Block>: a vector of quantized activations (Q8_0, Q8_K for IQ4_XS)
// laid out once for many rows of Block weights, as the mat-vec kernels of MXFP4, IQ4_NL, NVFP4 and
// IQ4_XS on AVX-512 VBMI (dot/avx512vbmi.hpp) and of MXFP4 and NVFP4 on AVX2 and SSE4.2
// (dot/avx2.hpp, dot/sse4_2.hpp) read it; the CPU backend's gemv lays x out in its scratch. Plain
// code, on every architecture.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include "../arch.hpp"
#include "../formats.hpp"
#include "../fp16.hpp"
#include "../target.hpp"

namespace qk::kernels {
namespace split_activations_detail {

// MXFP4 and IQ4_NL: sixteen blocks per kernel step, four per register: register j (0-3) holds
// blocks 4j to 4j + 3, one per 128-bit lane.
inline constexpr std::size_t step_blocks = 16;

// The block whose values lie in 128-bit lane `lane` of register j.
constexpr std::size_t lane_block(std::size_t j, std::size_t lane) noexcept
{
    return 4 * j + lane;
}

// After the reduction, int32 lane i holds the sum of block sum_block(i).
constexpr std::size_t sum_block(std::size_t i) noexcept
{
    return lane_block(i % 4, i / 4);
}

// NVFP4: four blocks per step, sixteen sub-blocks of 16 values; register k (0-1) holds the codes
// of blocks 2k and 2k + 1 as they lie (sub-block s of the pair in bytes 8s to 8s + 7), so the
// values of sub-block s lie in its 64-bit lane s: the first 8 in one register, the last 8 in
// another.
inline constexpr std::size_t nvfp4_step_blocks = 4;

// After the reduction (adjacent int32 pairs of both registers, 128-bit lane by lane), int32 lane i
// holds the sum of the step's sub-block nvfp4_sum_subblock(i) (block s / 4, its sub-block s % 4).
constexpr std::size_t nvfp4_sum_subblock(std::size_t i) noexcept
{
    return 8 * (i % 4 / 2) + 2 * (i / 4) + i % 2;
}

// IQ4_XS: two blocks per step, four registers of 64 code bytes as they lie (register j: block
// j / 2, groups 4 (j % 2) to 4 (j % 2) + 3, group per 128-bit lane).
inline constexpr std::size_t iq4_xs_step_blocks = 2;

// The block (of the step) and group of int32 lane i after the reduction (block_sums order).
constexpr std::size_t iq4_xs_sum_block(std::size_t i) noexcept
{
    return i % 4 / 2;
}
constexpr std::size_t iq4_xs_sum_group(std::size_t i) noexcept
{
    return 4 * (i % 2) + i / 4;
}

} // namespace split_activations_detail

// The formats the layout is defined for, whether or not a tag has kernels that read it.
template <class Block>
inline constexpr bool has_split_layout = std::is_same_v<Block, block_mxfp4> || std::is_same_v<Block, block_iq4_nl> ||
                                         std::is_same_v<Block, block_nvfp4> || std::is_same_v<Block, block_iq4_xs>;

// Whether kernels::dot takes rows of Block against this layout on tag Arch: every format of the
// layout on avx512vbmi and its children; MXFP4 and NVFP4 on avx2 and sse4_2.
template <class Block, class Arch>
inline constexpr bool has_split_dot =
    QK_HAS_X86_KERNELS && has_split_layout<Block> &&
    (std::is_base_of_v<arch::avx512vbmi, Arch> || ((std::is_base_of_v<arch::avx2, Arch> || std::is_base_of_v<arch::sse4_2, Arch>) &&
                                                   (std::is_same_v<Block, block_mxfp4> || std::is_same_v<Block, block_nvfp4>)));

// The layout, per kernel step (bytes best 64-byte aligned):
// - MXFP4 and IQ4_NL, 16 blocks, 640 bytes: registers j = 0-3 (64 bytes of low halves, then 64 of
//   high halves, lanes as lane_block); the 16 blocks' code sums (int32, in sum_block order);
//   their scales (float, likewise).
// - NVFP4, 4 blocks (8 Q8_0 blocks), 384 bytes: registers k = 0-1 (64 bytes of each sub-block's
//   first 8 values, then 64 of its last 8); the 16 sub-blocks' code sums (int32, in
//   nvfp4_sum_subblock order); their Q8_0 scales times 128 (float, likewise: exact).
// - IQ4_XS, 2 blocks (2 Q8_K blocks), 576 bytes: registers j = 0-3 (64 bytes of each group's
//   first 16 values, then 64 of its last 16); the 16 groups' code sums (int32, in
//   iq4_xs_sum_block/iq4_xs_sum_group order). The kernel reads the Q8_K scales from `blocks`.
// Blocks past the last whole step are not laid out: the kernels read those from `blocks`, the
// quantized blocks of the whole vector.
template <class Block>
struct split_activations {
    static_assert(has_split_layout<Block>);
    using activation = typename format_traits<Block>::vec_dot_type;
    static constexpr bool nvfp4 = std::is_same_v<Block, block_nvfp4>;
    static constexpr bool iq4_xs = std::is_same_v<Block, block_iq4_xs>;
    // Weight blocks per step, and the bytes their activations take.
    static constexpr std::size_t step_blocks = nvfp4    ? split_activations_detail::nvfp4_step_blocks
                                               : iq4_xs ? split_activations_detail::iq4_xs_step_blocks
                                                        : split_activations_detail::step_blocks;
    static constexpr std::size_t step_bytes = nvfp4 ? 384 : iq4_xs ? 576 : 640;

    const activation* blocks;
    const std::byte* steps; // bytes_for(weight blocks) bytes

    // The layout's size for a row of `weight_blocks` blocks.
    [[nodiscard]] static constexpr std::size_t bytes_for(std::size_t weight_blocks) noexcept
    {
        return weight_blocks / step_blocks * step_bytes;
    }

    // Writes the layout of a, the quantized blocks of one vector, to out (bytes_for of the
    // vector's weight blocks). Plain code: it runs once per vector.
    static void lay_out(std::span<const activation> a, std::byte* out) noexcept
    {
        constexpr std::size_t per_step = nvfp4 ? 2 * step_blocks : step_blocks; // activation blocks
        for (std::size_t s = 0; s + per_step <= a.size(); s += per_step, out += step_bytes) {
            if constexpr (nvfp4) {
                lay_out_nvfp4_step(a.data() + s, out);
            } else if constexpr (iq4_xs) {
                lay_out_iq4_xs_step(a.data() + s, out);
            } else {
                lay_out_step(a.data() + s, out);
            }
        }
    }

private:
    static void write_sum_and_scale(std::byte* out, std::size_t i, const std::int8_t* values, std::size_t count, float scale) noexcept
    {
        std::int32_t sum = 0;
        for (std::size_t k = 0; k < count; ++k) {
            sum += values[k];
        }
        std::memcpy(out + 4 * i, &sum, 4);
        std::memcpy(out + 64 + 4 * i, &scale, 4);
    }

    static void lay_out_iq4_xs_step(const block_q8_K* step, std::byte* out) noexcept
    {
        namespace v = split_activations_detail;
        for (std::size_t j = 0; j < 4; ++j) {
            for (std::size_t lane = 0; lane < 4; ++lane) {
                const std::int8_t* values = step[j / 2].qs.data() + 32 * (4 * (j % 2) + lane);
                std::memcpy(out + 128 * j + 16 * lane, values, 16);
                std::memcpy(out + 128 * j + 64 + 16 * lane, values + 16, 16);
            }
        }
        for (std::size_t i = 0; i < 16; ++i) {
            const block_q8_K& block = step[v::iq4_xs_sum_block(i)];
            std::int32_t sum = 0;
            for (std::size_t k = 0; k < 32; ++k) {
                sum += block.qs[32 * v::iq4_xs_sum_group(i) + k];
            }
            std::memcpy(out + 512 + 4 * i, &sum, 4);
        }
    }

    static void lay_out_step(const block_q8_0* step, std::byte* out) noexcept
    {
        namespace v = split_activations_detail;
        for (std::size_t j = 0; j < 4; ++j) {
            for (std::size_t lane = 0; lane < 4; ++lane) {
                const auto& qs = step[v::lane_block(j, lane)].qs;
                std::memcpy(out + 128 * j + 16 * lane, qs.data(), 16);
                std::memcpy(out + 128 * j + 64 + 16 * lane, qs.data() + 16, 16);
            }
        }
        for (std::size_t i = 0; i < v::step_blocks; ++i) {
            const block_q8_0& block = step[v::sum_block(i)];
            write_sum_and_scale(out + 512, i, block.qs.data(), 32, fp16_to_fp32(block.d));
        }
    }

    // Sub-block g of the step (block g / 4, its sub-block g % 4): 16 values of Q8_0 block
    // 2 (g / 4) + g % 4 / 2, from value 16 (g % 2).
    static const std::int8_t* subblock_values(const block_q8_0* step, std::size_t g) noexcept
    {
        return step[2 * (g / 4) + g % 4 / 2].qs.data() + 16 * (g % 2);
    }

    static void lay_out_nvfp4_step(const block_q8_0* step, std::byte* out) noexcept
    {
        namespace v = split_activations_detail;
        for (std::size_t k = 0; k < 2; ++k) {
            for (std::size_t s = 0; s < 8; ++s) {
                const std::int8_t* values = subblock_values(step, 8 * k + s);
                std::memcpy(out + 128 * k + 8 * s, values, 8);
                std::memcpy(out + 128 * k + 64 + 8 * s, values + 8, 8);
            }
        }
        for (std::size_t i = 0; i < 16; ++i) {
            const std::size_t g = v::nvfp4_sum_subblock(i);
            write_sum_and_scale(out + 256, i, subblock_values(step, g), 16, fp16_to_fp32(step[2 * (g / 4) + g % 4 / 2].d) * 128.0f);
        }
    }
};

} // namespace qk::kernels
