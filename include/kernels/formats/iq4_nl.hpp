// IQ4_NL: 32 values as 4-bit codes into a non-linear grid, with one fp16 scale. Block struct,
// traits, and the scalar reference quantizer (GGUF's model-file quantizer, optionally with
// importance weights) and dequantizer.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "../format_traits.hpp"
#include "../fp16.hpp"
#include "iq4_grid.hpp"
#include "q8_0.hpp"

namespace qk {

// Layout (18 bytes): fp16 d; uint8 qs[16]. Byte j holds element j in its low nibble and element
// j + 16 in its high nibble. Element = d * iq4_values[code].
struct block_iq4_nl {
    fp16_bits d;
    std::array<std::uint8_t, 16> qs;
};
static_assert(sizeof(block_iq4_nl) == 18, "IQ4_NL blocks are 18 bytes in GGUF files");

template <>
struct format_traits<block_iq4_nl> {
    static constexpr std::size_t block_size = 32;
    static constexpr std::size_t bytes = sizeof(block_iq4_nl);
    static constexpr std::string_view name = "IQ4_NL";
    static constexpr std::uint32_t gguf_type = 20;
    static constexpr bool takes_importance = true;
    using vec_dot_type = block_q8_0;
};

namespace reference {

// The model-file quantizer (15 candidate scales per block). `importance` is null or holds one
// weight per value of x.
inline void quantize(const float* x, block_iq4_nl* y, std::size_t blocks, const float* importance = nullptr) noexcept
{
    for (std::size_t b = 0; b < blocks; ++b) {
        detail::iq4_quantize(32, x + 32 * b, importance ? importance + 32 * b : nullptr, 7, y[b].d, y[b].qs.data(), nullptr, nullptr);
    }
}

// GGUF's row reference (quantize_row_iq4_nl_ref): one least-squares step, no scan of candidate
// scales. It is not what model files contain; it exists to compare with that reference. For a
// block that is all (near) zero the producer does not rewrite its scratch codes, so such a block
// repeats the codes of the block before it; the first block of a call has code 0 there. The
// scale is 0 in either case, so these codes decode to 0.
inline void quantize_without_search(const float* x, block_iq4_nl* y, std::size_t blocks) noexcept
{
    for (std::size_t b = 0; b < blocks; ++b) {
        detail::iq4_quantize(32, x + 32 * b, nullptr, -1, y[b].d, y[b].qs.data(), nullptr, nullptr);
        const bool all_zero = std::all_of(x + 32 * b, x + 32 * b + 32, [](float v) { return std::fabs(v) < detail::iq4_zero_threshold; });
        if (all_zero) {
            y[b].qs = b > 0 ? y[b - 1].qs : std::array<std::uint8_t, 16>{};
        }
    }
}

inline void dequantize(const block_iq4_nl* x, float* y, std::size_t blocks) noexcept
{
    for (std::size_t b = 0; b < blocks; ++b, y += 32) {
        const float d = fp16_to_fp32(x[b].d);
        for (int j = 0; j < 16; ++j) {
            y[j] = d * static_cast<float>(iq4_values[x[b].qs[j] & 0x0f]);
            y[j + 16] = d * static_cast<float>(iq4_values[x[b].qs[j] >> 4]);
        }
    }
}

} // namespace reference
} // namespace qk
