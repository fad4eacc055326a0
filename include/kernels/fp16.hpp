// IEEE-754 binary16 <-> binary32 conversion as constexpr functions on raw 16-bit patterns,
// the way GGUF stores half-precision scales. Round to nearest even; subnormals, infinities and
// NaN are handled; no tables, no global state, usable in constant expressions.
#pragma once

#include <bit>
#include <cstdint>

namespace qk {

// Raw binary16 bits as stored in a block. A distinct name keeps block layouts self-describing.
using fp16_bits = std::uint16_t;

[[nodiscard]] constexpr float fp16_to_fp32(fp16_bits h) noexcept
{
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exponent = (h >> 10) & 0x1fu;
    const std::uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1f) {
        return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
    }
    if (exponent != 0) {
        return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
    }
    // Subnormal half: mantissa * 2^-24 is exact in binary32.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
}

[[nodiscard]] constexpr fp16_bits fp32_to_fp16(float f) noexcept
{
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
    const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
    const std::uint32_t magnitude = bits & 0x7fffffffu;

    if (magnitude > 0x7f800000u) {
        // NaN: the quiet NaN GGUF producers write (payload not kept).
        return static_cast<fp16_bits>(sign | 0x7e00u);
    }
    if (magnitude >= 0x477ff000u) {
        // >= 65520, the midpoint between the largest half (65504) and 2^16: ties go to the
        // even neighbour, which is infinity.
        return static_cast<fp16_bits>(sign | 0x7c00u);
    }
    if (magnitude >= 0x38800000u) {
        // Normal half. Rebias the exponent (127 -> 15), then round the 23-bit mantissa to 10
        // bits; a carry out of the mantissa correctly bumps the exponent.
        std::uint32_t v = magnitude - 0x38000000u;
        v += 0x0fffu + ((v >> 13) & 1u);
        return static_cast<fp16_bits>(sign | (v >> 13));
    }
    if (magnitude <= 0x33000000u) {
        // At most 2^-25, half of the smallest subnormal: rounds to (signed) zero, ties to even.
        return sign;
    }
    // Subnormal half: count units of 2^-24, rounding to nearest even.
    const std::uint32_t exponent = magnitude >> 23;
    const std::uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - exponent; // 14..24
    std::uint32_t units = significand >> shift;
    const std::uint32_t rest = significand & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (units & 1u))) {
        ++units;
    }
    return static_cast<fp16_bits>(sign | units);
}

} // namespace qk
