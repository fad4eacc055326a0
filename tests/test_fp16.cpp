// fp16 <-> fp32 and E8M0 conversions against independent references: the IEEE definitions
// computed in double precision, not the bit manipulations the library uses.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "test_support.hpp"

using namespace qk_test;

namespace {

// binary16 by definition: (-1)^s * 2^(e-15) * (1 + m/1024), subnormal 2^-14 * m/1024.
double half_value(std::uint16_t h)
{
    const int sign = h >> 15;
    const int exponent = (h >> 10) & 0x1f;
    const int mantissa = h & 0x3ff;
    double magnitude = exponent == 0 ? std::ldexp(mantissa / 1024.0, -14) : std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
    if (exponent == 0x1f) {
        magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
    }
    return sign ? -magnitude : magnitude;
}

// Rounds f to binary16 by the definition: the nearest representable value, ties to the one with
// an even mantissa, beyond 65520 infinity. Works in double, where f and every half are exact.
std::uint16_t half_by_definition(float f)
{
    static const std::map<double, std::uint16_t> finite_halves = [] {
        std::map<double, std::uint16_t> m;
        for (unsigned h = 0; h < 0x7c00; ++h) {
            m.emplace(half_value(static_cast<std::uint16_t>(h)), static_cast<std::uint16_t>(h));
        }
        return m;
    }();
    const auto sign = static_cast<std::uint16_t>(std::signbit(f) ? 0x8000 : 0);
    const double x = std::fabs(static_cast<double>(f));
    if (x >= 65520.0) {
        return sign | 0x7c00;
    }
    if (x > 65504.0) {
        return sign | 0x7bff; // nearer to the largest half than to the 2^16 that would overflow
    }
    auto above = finite_halves.lower_bound(x);
    if (above->first == x) {
        return sign | above->second;
    }
    auto below = std::prev(above);
    const double to_below = x - below->first;
    const double to_above = above->first - x;
    if (to_below < to_above) {
        return sign | below->second;
    }
    if (to_above < to_below) {
        return sign | above->second;
    }
    return sign | ((below->second & 1) == 0 ? below->second : above->second);
}

} // namespace

TEST_CASE("fp16_to_fp32 decodes all 65536 patterns by the binary16 definition")
{
    for (unsigned h = 0; h < 65536; ++h) {
        const auto bits16 = static_cast<std::uint16_t>(h);
        const float f = qk::fp16_to_fp32(bits16);
        const double expected = half_value(bits16);
        CAPTURE(h);
        if (std::isnan(expected)) {
            REQUIRE(std::isnan(f));
        } else {
            REQUIRE(static_cast<double>(f) == expected);
            REQUIRE(std::signbit(f) == std::signbit(expected));
        }
    }
}

TEST_CASE("fp32_to_fp16 round-trips every half and rounds ties to even")
{
    for (unsigned h = 0; h < 65536; ++h) {
        const auto bits16 = static_cast<std::uint16_t>(h);
        const float f = qk::fp16_to_fp32(bits16);
        CAPTURE(h);
        if (std::isnan(f)) {
            REQUIRE(((qk::fp32_to_fp16(f) & 0x7c00) == 0x7c00 && (qk::fp32_to_fp16(f) & 0x3ff) != 0));
            REQUIRE((qk::fp32_to_fp16(f) & 0x8000) == (bits16 & 0x8000));
            continue;
        }
        REQUIRE(qk::fp32_to_fp16(f) == bits16);
        // The midpoint to the next half up (exact in float) must round to the even neighbour.
        if ((h & 0x7fff) < 0x7bff) {
            const double mid = (half_value(bits16) + half_value(static_cast<std::uint16_t>(h + 1))) / 2;
            const auto midpoint = static_cast<float>(mid);
            REQUIRE(static_cast<double>(midpoint) == mid);
            const std::uint16_t even = (h & 1) == 0 ? bits16 : static_cast<std::uint16_t>(h + 1);
            REQUIRE(qk::fp32_to_fp16(midpoint) == even);
        }
    }
}

TEST_CASE("fp32_to_fp16 matches the rounding definition across the float range")
{
    // Every 4099th bit pattern (a prime stride reaches all exponents and mantissa residues),
    // plus the neighbourhoods of the boundaries where the conversion changes regime.
    std::vector<std::uint32_t> patterns;
    for (std::uint64_t p = 0; p <= 0xffffffffull; p += 4099) {
        patterns.push_back(static_cast<std::uint32_t>(p));
    }
    for (std::uint32_t boundary : {0x477fe000u, 0x477ff000u, 0x38800000u, 0x33000000u, 0x33800000u, 0x387fc000u, 0x7f800000u}) {
        for (std::uint32_t d = 0; d < 4096; ++d) {
            patterns.push_back(boundary - 2048 + d);
            patterns.push_back((boundary - 2048 + d) | 0x80000000u);
        }
    }
    std::size_t mismatches = 0;
    for (std::uint32_t p : patterns) {
        const float f = std::bit_cast<float>(p);
        if (std::isnan(f)) {
            mismatches += qk::fp32_to_fp16(f) != (((p >> 16) & 0x8000u) | 0x7e00u);
            continue;
        }
        const bool equal = qk::fp32_to_fp16(f) == half_by_definition(f);
        if (!equal && mismatches < 5) {
            MESSAGE("mismatch at pattern ", p);
        }
        mismatches += !equal;
    }
    CHECK(patterns.size() > 1000000);
    CHECK(mismatches == 0);
}

TEST_CASE("conversions are usable in constant expressions")
{
    static_assert(qk::fp32_to_fp16(1.0f) == 0x3c00);
    static_assert(qk::fp32_to_fp16(-2.0f) == 0xc000);
    static_assert(qk::fp32_to_fp16(65504.0f) == 0x7bff);
    static_assert(qk::fp32_to_fp16(65520.0f) == 0x7c00);
    static_assert(qk::fp32_to_fp16(0x1p-24f) == 0x0001);
    static_assert(qk::fp32_to_fp16(0x1p-25f) == 0x0000); // tie to even: zero
    static_assert(qk::fp16_to_fp32(0x3555) == 0x1.554p-2f);
    static_assert(qk::fp16_to_fp32(0x0001) == 0x1p-24f);
    static_assert(qk::e8m0_to_fp32(127) == 1.0f);
    static_assert(qk::e8m0_half_to_fp32(130) == 4.0f);
    CHECK(true); // the checks above run at compile time
}

// The compile-time tables against powers of two built by repeated doubling or halving in double
// (exact), checked entirely by the compiler.
constexpr bool e8m0_tables_are_powers_of_two()
{
    for (int e = 0; e < 255; ++e) {
        double full = 1.0;
        for (int i = 127; i < e; ++i) {
            full *= 2.0;
        }
        for (int i = e; i < 127; ++i) {
            full /= 2.0;
        }
        if (qk::e8m0_table[static_cast<std::size_t>(e)] != static_cast<float>(full) ||
            qk::e8m0_half_table[static_cast<std::size_t>(e)] != static_cast<float>(full / 2.0)) {
            return false;
        }
    }
    return qk::e8m0_table[255] == std::numeric_limits<float>::infinity() && qk::e8m0_half_table[255] == 0x1p127f;
}
static_assert(e8m0_tables_are_powers_of_two());

TEST_CASE("E8M0 conversions follow 2^(e-127) and 2^(e-128)")
{
    for (unsigned e = 0; e < 256; ++e) {
        CAPTURE(e);
        const auto code = static_cast<std::uint8_t>(e);
        const double full = e == 255 ? std::numeric_limits<double>::infinity() : std::ldexp(1.0, static_cast<int>(e) - 127);
        CHECK(static_cast<double>(qk::e8m0_to_fp32(code)) == full);
        CHECK(static_cast<double>(qk::e8m0_half_to_fp32(code)) == std::ldexp(1.0, static_cast<int>(e) - 128));
    }
}
