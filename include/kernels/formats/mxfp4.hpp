// MXFP4 (OCP microscaling FP4, as in gpt-oss): 32 E2M1 values sharing one E8M0 power-of-two
// scale. Block struct, traits, the E2M1 table, and the scalar reference quantizer and
// dequantizer (byte-exact with GGUF producers).
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "../e8m0.hpp"
#include "../format_traits.hpp"
#include "../strict_fp.hpp"
#include "q8_0.hpp"

namespace qk {

// Layout (17 bytes): uint8 e (E8M0); uint8 qs[16]. Byte j holds element j in its low nibble and
// element j + 16 in its high nibble. Element = mxfp4_values[code] * e8m0_half_to_fp32(e).
struct block_mxfp4 {
    std::uint8_t e;
    std::array<std::uint8_t, 16> qs;
};
static_assert(sizeof(block_mxfp4) == 17, "MXFP4 blocks are 17 bytes in GGUF files");

// The E2M1 values {0, 0.5, 1, 1.5, 2, 3, 4, 6} and their negatives, doubled to be integers.
inline constexpr std::array<std::int8_t, 16> mxfp4_values = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

template <>
struct format_traits<block_mxfp4> {
    static constexpr std::size_t block_size = 32;
    static constexpr std::size_t bytes = sizeof(block_mxfp4);
    static constexpr std::string_view name = "MXFP4";
    static constexpr std::uint32_t gguf_type = 39;
    static constexpr bool takes_importance = false;
    using vec_dot_type = block_q8_0;
};

namespace reference {

// The code whose decoded value is nearest to v at scale d; the first code wins ties.
QK_STRICT_FP inline unsigned nearest_mxfp4_code(float v, float d) noexcept
{
    QK_STRICT_FP_BODY
    unsigned best = 0;
    float best_error = std::fabs(detail::rounded(static_cast<float>(mxfp4_values[0]) * d) - v);
    for (unsigned code = 1; code < 16; ++code) {
        const float error = std::fabs(detail::rounded(static_cast<float>(mxfp4_values[code]) * d) - v);
        if (error < best_error) {
            best = code;
            best_error = error;
        }
    }
    return best;
}

// The shared exponent is floor(log2f(amax)) - 2 + 127, through single-precision log2f exactly as
// GGUF producers compute it: just below a power of two log2f rounds up to the integer, so e is one
// larger than the exact exponent there. Blocks with amax < 2^-125 would give a negative exponent
// (undefined behaviour in the producers); qkern clamps it to 0, the smallest scale. Each value then
// takes the code whose decoded value is nearest; the first code wins ties.
QK_STRICT_FP inline void quantize(const float* x, block_mxfp4* y, std::size_t blocks) noexcept
{
    QK_STRICT_FP_BODY
    for (std::size_t b = 0; b < blocks; ++b, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) {
            const float a = std::fabs(x[j]);
            if (amax < a) {
                amax = a;
            }
        }
        std::uint8_t e = 0;
        if (amax > 0.0f) {
            const float exponent = std::floor(std::log2(amax)) - 2.0f + 127.0f;
            e = exponent > 0.0f ? static_cast<std::uint8_t>(exponent) : std::uint8_t{0};
        }
        const float d = e8m0_half_to_fp32(e);
        y[b].e = e;
        for (int j = 0; j < 16; ++j) {
            y[b].qs[j] = static_cast<std::uint8_t>(nearest_mxfp4_code(x[j], d) | (nearest_mxfp4_code(x[j + 16], d) << 4));
        }
    }
}

inline void dequantize(const block_mxfp4* x, float* y, std::size_t blocks) noexcept
{
    for (std::size_t b = 0; b < blocks; ++b, y += 32) {
        const float d = e8m0_half_to_fp32(x[b].e);
        for (int j = 0; j < 16; ++j) {
            y[j] = static_cast<float>(mxfp4_values[x[b].qs[j] & 0x0f]) * d;
            y[j + 16] = static_cast<float>(mxfp4_values[x[b].qs[j] >> 4]) * d;
        }
    }
}

} // namespace reference
} // namespace qk
