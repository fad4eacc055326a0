// E8M0, the power-of-two scale of OCP microscaling formats (MXFP4): value 2^(e - 127).
// Conversions are constexpr, and the 256-entry tables that SIMD kernels gather from are
// computed by the compiler: no initialisation function, no global mutable state.
#pragma once

#include <array>
#include <bit>
#include <cstdint>

namespace qk {

// 2^(e - 127); e = 0 is the subnormal 2^-127 and e = 255 gives +inf (GGUF consumers do not
// treat it as NaN).
[[nodiscard]] constexpr float e8m0_to_fp32(std::uint8_t e) noexcept
{
    return std::bit_cast<float>(e == 0 ? 0x00400000u : static_cast<std::uint32_t>(e) << 23);
}

// 2^(e - 128), half of the scale: MXFP4 stores its E2M1 values doubled as integers, and this
// halving cancels the doubling.
[[nodiscard]] constexpr float e8m0_half_to_fp32(std::uint8_t e) noexcept
{
    return std::bit_cast<float>(e < 2 ? 0x00200000u << e : static_cast<std::uint32_t>(e - 1) << 23);
}

namespace detail {
template <float (*Convert)(std::uint8_t) noexcept>
constexpr std::array<float, 256> make_e8m0_table() noexcept
{
    std::array<float, 256> table{};
    for (unsigned e = 0; e < 256; ++e) {
        table[e] = Convert(static_cast<std::uint8_t>(e));
    }
    return table;
}
} // namespace detail

inline constexpr std::array<float, 256> e8m0_table = detail::make_e8m0_table<e8m0_to_fp32>();
inline constexpr std::array<float, 256> e8m0_half_table = detail::make_e8m0_table<e8m0_half_to_fp32>();

static_assert(e8m0_table[127] == 1.0f && e8m0_table[128] == 2.0f && e8m0_table[1] == 0x1p-126f);
static_assert(e8m0_half_table[128] == 1.0f && e8m0_half_table[2] == 0x1p-126f);
static_assert(std::bit_cast<std::uint32_t>(e8m0_half_table[0]) == 0x00200000u);
static_assert(std::bit_cast<std::uint32_t>(e8m0_half_table[1]) == 0x00400000u);
static_assert(std::bit_cast<std::uint32_t>(e8m0_table[255]) == 0x7f800000u);

} // namespace qk
