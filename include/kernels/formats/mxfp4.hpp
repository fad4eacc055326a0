// MXFP4 (OCP microscaling FP4, as in gpt-oss): 32 E2M1 values sharing one E8M0 power-of-two
// scale. Block struct, traits, the E2M1 table, and the scalar reference quantizer and
// dequantizer (byte-exact with GGUF producers).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
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

// The values plus 12, in [0, 24]: for kernels that multiply them as unsigned bytes (x86's
// pmaddubsw, with no sign to move onto the activations) and take 12 times the activations' sum off.
inline constexpr int mxfp4_value_bias = 12;
alignas(16) inline constexpr std::array<std::uint8_t, 16> mxfp4_biased_values = [] {
    std::array<std::uint8_t, 16> biased{};
    for (std::size_t i = 0; i < 16; ++i) {
        biased[i] = static_cast<std::uint8_t>(mxfp4_values[i] + mxfp4_value_bias);
    }
    return biased;
}();
static_assert(mxfp4_biased_values[7] == 24 && mxfp4_biased_values[15] == 0 && mxfp4_biased_values[0] == 12);

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

// code[j] = the E2M1 code whose decoded value rounded(mxfp4_values[code] * d) is nearest to x[j],
// the first code winning ties, as GGUF producers search all 16 codes (MXFP4 and NVFP4 alike).
// The same code comes from the 8 magnitudes alone: a negative code's error |-p - v| is the
// positive one's |p - |v|| for v < 0 (rounding and negation commute), and the codes of the other
// sign are never nearer than code 0, which comes first (their error fl(p + |v|) is at least |v|,
// code 0's). So the first nearest magnitude, signed where v < 0 and not zero, is the producers'
// code; test_quantize.cpp checks it against the 16-code search. Written as a loop over the values
// per magnitude so that compilers vectorize it.
template <int N>
QK_STRICT_FP inline void nearest_e2m1_codes(const float* x, float d, std::uint8_t* code) noexcept
{
    QK_STRICT_FP_BODY
    std::array<float, 8> value;
    for (std::size_t m = 0; m < 8; ++m) {
        value[m] = detail::rounded(static_cast<float>(mxfp4_values[m]) * d);
    }
    // The smallest error, then the first magnitude with it as the lowest set bit of a mask; each
    // step a loop over the values, with nothing to branch on. Keeping the nearer magnitude with a
    // conditional instead gave GCC branches to make (one per magnitude at -O3, one per sign), and
    // their mispredictions made the search up to 5x slower.
    std::array<float, N> a;
    std::array<float, N> smallest;
    std::array<std::uint32_t, N> nearest;
    for (int j = 0; j < N; ++j) {
        a[j] = std::fabs(x[j]);
        smallest[j] = a[j];
        nearest[j] = 0;
    }
    for (std::size_t m = 1; m < 8; ++m) {
        for (int j = 0; j < N; ++j) {
            smallest[j] = std::min(smallest[j], std::fabs(value[m] - a[j]));
        }
    }
    for (std::uint32_t m = 0; m < 8; ++m) {
        for (int j = 0; j < N; ++j) {
            nearest[j] |= static_cast<std::uint32_t>(std::fabs(value[m] - a[j]) == smallest[j]) << m;
        }
    }
    for (int j = 0; j < N; ++j) {
        const auto best = static_cast<unsigned>(std::countr_zero(nearest[j]));
        code[j] = static_cast<std::uint8_t>(best | ((static_cast<unsigned>(x[j] < 0.0f) & static_cast<unsigned>(best != 0)) << 3));
    }
}

// The shared exponent is floor(log2f(amax)) - 2 + 127, through single-precision log2f exactly as
// GGUF producers compute it: just below a power of two log2f rounds up to the integer, so e is one
// larger than the exact exponent there. Blocks with amax < 2^-125 would give a negative exponent
// (undefined behaviour in the producers); qkern clamps it to 0, the smallest scale. Each value then
// takes the nearest code (nearest_e2m1_codes).
QK_STRICT_FP inline void quantize(const float* x, block_mxfp4* y, std::size_t blocks) noexcept
{
    QK_STRICT_FP_BODY
    for (std::size_t b = 0; b < blocks; ++b, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) {
            const float a = std::fabs(x[j]);
            amax = amax < a ? a : amax;
        }
        std::uint8_t e = 0;
        if (amax > 0.0f) {
            const float exponent = std::floor(std::log2(amax)) - 2.0f + 127.0f;
            e = exponent > 0.0f ? static_cast<std::uint8_t>(exponent) : std::uint8_t{0};
        }
        std::array<std::uint8_t, 32> code;
        nearest_e2m1_codes<32>(x, e8m0_half_to_fp32(e), code.data());
        y[b].e = e;
        for (int j = 0; j < 16; ++j) {
            y[b].qs[j] = static_cast<std::uint8_t>(code[j] | (code[j + 16] << 4));
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
