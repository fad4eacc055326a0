// NVFP4 (NVIDIA's 4-bit float weights, GGUF type 40): 64 E2M1 values in four sub-blocks of 16,
// each with an unsigned E4M3 scale. Block struct, traits, the UE4M3 conversions (a compile-time
// table, as E8M0's) and the scalar reference quantizer and dequantizer (byte-exact with GGUF
// producers). One block pairs with two Q8_0 activation blocks.
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "../format_traits.hpp"
#include "../strict_fp.hpp"
#include "mxfp4.hpp"
#include "q8_0.hpp"

namespace qk {

// Layout (36 bytes): uint8 d[4] (UE4M3 sub-block scales); uint8 qs[32]. Sub-block s (elements
// 16s .. 16s + 15) has scale d[s] and codes in qs[8s .. 8s + 7]: byte 8s + j holds element
// 16s + j in its low nibble and element 16s + j + 8 in its high nibble (not the 32-value formats'
// order). Element = mxfp4_values[code] * ue4m3_half_to_fp32(d[s]). The tensor-wide float scale
// of NVFP4 models is a separate tensor, applied by the caller.
struct block_nvfp4 {
    std::array<std::uint8_t, 4> d;
    std::array<std::uint8_t, 32> qs;
};
static_assert(sizeof(block_nvfp4) == 36, "NVFP4 blocks are 36 bytes in GGUF files");

template <>
struct format_traits<block_nvfp4> {
    static constexpr std::size_t block_size = 64;
    static constexpr std::size_t bytes = sizeof(block_nvfp4);
    static constexpr std::string_view name = "NVFP4";
    static constexpr std::uint32_t gguf_type = 40;
    static constexpr bool takes_importance = false;
    using vec_dot_type = block_q8_0;
};

// Half the unsigned E4M3 value of b (4 exponent bits with bias 7, 3 mantissa bits; bit 7 is not
// read): the halving cancels the doubled E2M1 table, as for MXFP4. Bytes 0 and 0x7F (E4M3's NaN)
// give 0, as GGUF consumers decode them. Every value is exact in binary32.
[[nodiscard]] constexpr float ue4m3_half_to_fp32(std::uint8_t b) noexcept
{
    if (b == 0 || b == 0x7f) {
        return 0.0f;
    }
    const unsigned exponent = (b >> 3) & 0x0fu;
    const unsigned mantissa = b & 0x07u;
    // exponent 0: mantissa * 2^-9 / 2; otherwise (8 + mantissa) * 2^(exponent - 7 - 3) / 2.
    const unsigned significand = exponent == 0 ? mantissa : 8 + mantissa;
    const int power = exponent == 0 ? -10 : static_cast<int>(exponent) - 11;
    // significand < 16 and power >= -11: the product is a normal float, built exactly.
    return static_cast<float>(significand) * std::bit_cast<float>(static_cast<std::uint32_t>(127 + power) << 23);
}

inline constexpr std::array<float, 256> ue4m3_half_table = [] {
    std::array<float, 256> table{};
    for (unsigned b = 0; b < 256; ++b) {
        table[b] = ue4m3_half_to_fp32(static_cast<std::uint8_t>(b));
    }
    return table;
}();

static_assert(ue4m3_half_table[0x38] == 0.5f && ue4m3_half_table[0x7e] == 224.0f && ue4m3_half_table[1] == 0x1p-10f);
static_assert(ue4m3_half_table[0x7f] == 0.0f && ue4m3_half_table[0x80] == 0.0f && ue4m3_half_table[0xff] == 240.0f);

namespace reference {

// The UE4M3 byte GGUF producers store for a positive scale x: 0 unless x > 0 (NaN included);
// x clamped to 448; subnormal results (x below 2^-6) round x * 512 to nearest, ties up, and
// give 0 below 1; otherwise the top three mantissa bits plus the next one (round half up on that
// bit alone), carrying into the exponent. Exponent 15 is only ever written as 0x7E (448): the
// producers send every scale from 256 up there, and qkern writes what they write.
QK_STRICT_FP inline std::uint8_t fp32_to_ue4m3(float x) noexcept
{
    QK_STRICT_FP_BODY
    if (!(x > 0.0f)) {
        return 0;
    }
    if (x > 448.0f) {
        x = 448.0f;
    }
    const auto bits = std::bit_cast<std::uint32_t>(x);
    int exponent = static_cast<int>((bits >> 23) & 0xffu) - 127 + 7;
    if (exponent <= 0) {
        const float scaled = detail::rounded(x * 512.0f) + 0.5f;
        const int mantissa = static_cast<int>(scaled);
        return mantissa < 1 ? std::uint8_t{0} : static_cast<std::uint8_t>(mantissa > 7 ? 7 : mantissa);
    }
    if (exponent >= 15) {
        return 0x7e;
    }
    unsigned mantissa = ((bits >> 20) & 0x07u) + ((bits >> 19) & 0x01u);
    if (mantissa > 7) {
        mantissa = 0;
        if (++exponent >= 15) {
            return 0x7e;
        }
    }
    return static_cast<std::uint8_t>((static_cast<unsigned>(exponent) << 3) | mantissa);
}

// Per sub-block: the scale byte encodes max |x| / 6 (6 is E2M1's largest value), and each value
// takes the E2M1 code whose decoded value at that scale is nearest (the first code wins ties).
QK_STRICT_FP inline void quantize(const float* x, block_nvfp4* y, std::size_t blocks) noexcept
{
    QK_STRICT_FP_BODY
    for (std::size_t b = 0; b < blocks; ++b) {
        for (int s = 0; s < 4; ++s, x += 16) {
            float amax = 0.0f;
            for (int j = 0; j < 16; ++j) {
                const float a = std::fabs(x[j]);
                if (amax < a) {
                    amax = a;
                }
            }
            const std::uint8_t scale = fp32_to_ue4m3(amax / 6.0f);
            const float d = ue4m3_half_to_fp32(scale);
            y[b].d[static_cast<std::size_t>(s)] = scale;
            std::array<std::uint8_t, 16> code;
            nearest_e2m1_codes<16>(x, d, code.data());
            for (int j = 0; j < 8; ++j) {
                y[b].qs[static_cast<std::size_t>(8 * s + j)] = static_cast<std::uint8_t>(code[j] | (code[j + 8] << 4));
            }
        }
    }
}

inline void dequantize(const block_nvfp4* x, float* y, std::size_t blocks) noexcept
{
    for (std::size_t b = 0; b < blocks; ++b) {
        for (std::size_t s = 0; s < 4; ++s, y += 16) {
            const float d = ue4m3_half_table[x[b].d[s]];
            for (std::size_t j = 0; j < 8; ++j) {
                const std::uint8_t byte = x[b].qs[8 * s + j];
                y[j] = static_cast<float>(mxfp4_values[byte & 0x0f]) * d;
                y[j + 8] = static_cast<float>(mxfp4_values[byte >> 4]) * d;
            }
        }
    }
}

} // namespace reference
} // namespace qk
