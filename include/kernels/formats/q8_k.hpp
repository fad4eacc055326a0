// Q8_K: 256 int8 values with a float scale and per-16 sums, the activation format that k-quant
// and IQ4_XS weights are multiplied with. Block struct, traits, and the scalar reference
// quantizer and dequantizer (byte-exact with GGUF's quantize_row_q8_K_ref).
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "../format_traits.hpp"
#include "../strict_fp.hpp"

namespace qk {

// Layout (292 bytes): float d; int8 qs[256]; int16 bsums[16]. Element j = d * qs[j];
// bsums[g] = qs[16g] + ... + qs[16g + 15], which k-quant dot products use for their offsets.
struct block_q8_K {
    float d;
    std::array<std::int8_t, 256> qs;
    std::array<std::int16_t, 16> bsums;
};
static_assert(sizeof(block_q8_K) == 292, "Q8_K blocks are 292 bytes");

template <>
struct format_traits<block_q8_K> {
    static constexpr std::size_t block_size = 256;
    static constexpr std::size_t bytes = sizeof(block_q8_K);
    static constexpr std::string_view name = "Q8_K";
    static constexpr std::uint32_t gguf_type = 15;
    static constexpr bool takes_importance = false;
    using vec_dot_type = void; // an activation format only: no dot product of its own
};

namespace detail {

// Round to nearest, ties to even, for |v| < 2^22: adding 1.5 * 2^23 leaves the integer in the
// low mantissa bits. This is GGUF's nearest_int; its result must match it bit for bit.
inline int nearest_int(float v) noexcept
{
    const float shifted = v + 12582912.0f;
    return static_cast<int>(std::bit_cast<std::uint32_t>(shifted) & 0x007fffffu) - 0x00400000;
}

} // namespace detail

namespace reference {

// The scale maps the element of largest magnitude to -127 (its sign flipped), then d = 1/iscale.
// A block of zeros, or one so small that -127/max overflows (|max| < ~3.7e-37, undefined
// behaviour in the GGUF producer), is written as all zero.
QK_STRICT_FP inline void quantize(const float* x, block_q8_K* y, std::size_t blocks) noexcept
{
    QK_STRICT_FP_BODY
    for (std::size_t b = 0; b < blocks; ++b, x += 256) {
        float max = 0.0f;
        float amax = 0.0f;
        for (int j = 0; j < 256; ++j) {
            const float a = std::fabs(x[j]);
            if (a > amax) {
                amax = a;
                max = x[j];
            }
        }
        const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
        if (amax == 0.0f || !std::isfinite(iscale)) {
            y[b] = block_q8_K{};
            continue;
        }
        for (int j = 0; j < 256; ++j) {
            const float scaled = detail::rounded(iscale * x[j]);
            const int v = detail::nearest_int(scaled);
            y[b].qs[j] = static_cast<std::int8_t>(v < 127 ? v : 127);
        }
        for (int g = 0; g < 16; ++g) {
            int sum = 0;
            for (int j = 0; j < 16; ++j) {
                sum += y[b].qs[16 * g + j];
            }
            y[b].bsums[g] = static_cast<std::int16_t>(sum);
        }
        y[b].d = 1.0f / iscale;
    }
}

inline void dequantize(const block_q8_K* x, float* y, std::size_t blocks) noexcept
{
    for (std::size_t b = 0; b < blocks; ++b, y += 256) {
        for (int j = 0; j < 256; ++j) {
            y[j] = x[b].d * static_cast<float>(x[b].qs[j]);
        }
    }
}

} // namespace reference
} // namespace qk
