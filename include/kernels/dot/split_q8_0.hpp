// kernels::split_q8_0: a vector of Q8_0 activations laid out once for many rows, as the AVX-512
// VBMI MXFP4 and IQ4_NL mat-vec kernels (dot/avx512vbmi.hpp) read it; the CPU backend's gemv
// lays x out in its scratch. Plain code, on every architecture: only the kernels are x86.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "../formats.hpp"
#include "../fp16.hpp"

namespace qk::kernels {
namespace split_q8_0_detail {

// Blocks per kernel step, four per register: register j (0-3) holds blocks 4j to 4j + 3, one
// per 128-bit lane.
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

} // namespace split_q8_0_detail

// A vector of Q8_0 activations laid out for the AVX-512 VBMI MXFP4 and IQ4_NL mat-vec kernels:
// per step of 16 blocks, 640 bytes, best 64-byte aligned: registers j = 0-3 (64 bytes of low
// halves, then 64 of high halves, lanes as lane_block), the 16 blocks' code sums (int32, in
// sum_block order), their scales (float, likewise). Blocks past the last whole step are not laid
// out: the kernels read those from `blocks`, which holds all of them.
struct split_q8_0 {
    static constexpr std::size_t step_bytes = 640;
    const block_q8_0* blocks;
    const std::byte* steps; // (blocks / 16) * step_bytes bytes

    [[nodiscard]] static constexpr std::size_t bytes_for(std::size_t blocks) noexcept
    {
        return blocks / split_q8_0_detail::step_blocks * step_bytes;
    }

    // Writes a's layout to out (bytes_for(a.size()) bytes). Plain code: it runs once per vector.
    static void lay_out(std::span<const block_q8_0> a, std::byte* out) noexcept
    {
        namespace v = split_q8_0_detail;
        for (std::size_t s = 0; s + v::step_blocks <= a.size(); s += v::step_blocks, out += step_bytes) {
            const block_q8_0* step = a.data() + s;
            for (std::size_t j = 0; j < 4; ++j) {
                for (std::size_t lane = 0; lane < 4; ++lane) {
                    const auto& qs = step[v::lane_block(j, lane)].qs;
                    std::memcpy(out + 128 * j + 16 * lane, qs.data(), 16);
                    std::memcpy(out + 128 * j + 64 + 16 * lane, qs.data() + 16, 16);
                }
            }
            for (std::size_t i = 0; i < v::step_blocks; ++i) {
                const block_q8_0& block = step[v::sum_block(i)];
                std::int32_t sum = 0;
                for (const std::int8_t q : block.qs) {
                    sum += q;
                }
                const float scale = fp16_to_fp32(block.d);
                std::memcpy(out + 512 + 4 * i, &sum, 4);
                std::memcpy(out + 576 + 4 * i, &scale, 4);
            }
        }
    }
};

} // namespace qk::kernels
