// Q8_0: 32 int8 values sharing one fp16 scale. A weight format, and the activation format that
// Q8_0, MXFP4 and IQ4_NL weights are multiplied with. Block struct, traits and the scalar
// reference quantizer and dequantizer (byte-exact with GGUF producers).
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "../format_traits.hpp"
#include "../fp16.hpp"
#include "../strict_fp.hpp"

namespace qk {

// Layout (34 bytes, little-endian, no padding): fp16 d; int8 qs[32]. Element j = d * qs[j].
struct block_q8_0 {
    fp16_bits d;
    std::array<std::int8_t, 32> qs;
};
static_assert(sizeof(block_q8_0) == 34, "Q8_0 blocks are 34 bytes in GGUF files");

template <>
struct format_traits<block_q8_0> {
    static constexpr std::size_t block_size = 32;
    static constexpr std::size_t bytes = sizeof(block_q8_0);
    static constexpr std::string_view name = "Q8_0";
    static constexpr std::uint32_t gguf_type = 8;
    static constexpr bool takes_importance = false;
    using vec_dot_type = block_q8_0;
};

namespace detail {

// roundf for |v| < 2^31 without a library call: truncate, then step away from zero when the
// (exactly computed) remainder is at least one half.
inline int round_half_away(float v) noexcept
{
    const int truncated = static_cast<int>(v);
    const float remainder = v - static_cast<float>(truncated);
    return truncated + (remainder >= 0.5f) - (remainder <= -0.5f);
}

} // namespace detail

namespace reference {

// amax / 127 as the scale, round half away from zero. The reciprocal comes from the float scale
// before it is rounded to fp16, as GGUF producers do. A block whose scale underflows so far that
// its reciprocal is infinite (all |x| < ~4e-37) is written as all zero: its fp16 scale is 0
// anyway, and the producers' result there is undefined behaviour.
QK_STRICT_FP inline void quantize(const float* x, block_q8_0* y, std::size_t blocks) noexcept
{
    QK_STRICT_FP_BODY
    for (std::size_t b = 0; b < blocks; ++b, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) {
            const float a = std::fabs(x[j]);
            amax = amax > a ? amax : a;
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        if (!std::isfinite(id)) {
            y[b] = block_q8_0{};
            continue;
        }
        y[b].d = fp32_to_fp16(d);
        for (int j = 0; j < 32; ++j) {
            y[b].qs[j] = static_cast<std::int8_t>(detail::round_half_away(x[j] * id));
        }
    }
}

inline void dequantize(const block_q8_0* x, float* y, std::size_t blocks) noexcept
{
    for (std::size_t b = 0; b < blocks; ++b, y += 32) {
        const float d = fp16_to_fp32(x[b].d);
        for (int j = 0; j < 32; ++j) {
            y[j] = static_cast<float>(x[b].qs[j]) * d;
        }
    }
}

} // namespace reference
} // namespace qk
