// IQ4_XS: 256 values in 8 groups of 32, 4-bit codes into the IQ4_NL grid, a 6-bit scale per group
// and one fp16 super-scale. Block struct, traits, and the scalar reference quantizer (GGUF's
// model-file quantizer, optionally with importance weights) and dequantizer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "../format_traits.hpp"
#include "../fp16.hpp"
#include "iq4_grid.hpp"
#include "q8_k.hpp"

namespace qk {

// Layout (136 bytes): fp16 d; uint16 scales_h; uint8 scales_l[4]; uint8 qs[128].
// Group g (values 32g .. 32g+31) has the 6-bit scale
//   ls = ((scales_l[g/2] >> 4*(g%2)) & 0xF) | (((scales_h >> 2*g) & 3) << 4),
// and its 16 bytes qs[16g ..] hold element j in the low nibble and j + 16 in the high nibble.
// Element = d * (ls - 32) * iq4_values[code].
struct block_iq4_xs {
    fp16_bits d;
    std::uint16_t scales_h;
    std::array<std::uint8_t, 4> scales_l;
    std::array<std::uint8_t, 128> qs;
};
static_assert(sizeof(block_iq4_xs) == 136, "IQ4_XS blocks are 136 bytes in GGUF files");

template <>
struct format_traits<block_iq4_xs> {
    static constexpr std::size_t block_size = 256;
    static constexpr std::size_t bytes = sizeof(block_iq4_xs);
    static constexpr std::string_view name = "IQ4_XS";
    static constexpr std::uint32_t gguf_type = 23;
    static constexpr bool takes_importance = true;
    using vec_dot_type = block_q8_K;
};

// The signed scale multiplier (ls - 32) of group g, in -32..31.
[[nodiscard]] constexpr int iq4_xs_group_scale(const block_iq4_xs& block, int g) noexcept
{
    const int low = (block.scales_l[static_cast<std::size_t>(g / 2)] >> (4 * (g % 2))) & 0xf;
    const int high = (block.scales_h >> (2 * g)) & 3;
    return (low | (high << 4)) - 32;
}

namespace reference {

// The model-file quantizer. `importance` is null or holds one weight per value of x.
inline void quantize(const float* x, block_iq4_xs* y, std::size_t blocks, const float* importance = nullptr) noexcept
{
    for (std::size_t b = 0; b < blocks; ++b) {
        detail::iq4_quantize(256, x + 256 * b, importance ? importance + 256 * b : nullptr, 7, y[b].d, y[b].qs.data(), &y[b].scales_h,
                             y[b].scales_l.data());
    }
}

inline void dequantize(const block_iq4_xs* x, float* y, std::size_t blocks) noexcept
{
    for (std::size_t b = 0; b < blocks; ++b) {
        const float d = fp16_to_fp32(x[b].d);
        for (int g = 0; g < 8; ++g, y += 32) {
            const float dl = d * static_cast<float>(iq4_xs_group_scale(x[b], g));
            const std::uint8_t* qs = x[b].qs.data() + 16 * g;
            for (int j = 0; j < 16; ++j) {
                y[j] = dl * static_cast<float>(iq4_values[qs[j] & 0x0f]);
                y[j + 16] = dl * static_cast<float>(iq4_values[qs[j] >> 4]);
            }
        }
    }
}

} // namespace reference
} // namespace qk
