// Block layouts, traits and run-time format names.
#include <doctest/doctest.h>

#include <cstddef>
#include <iterator>
#include <string>
#include <utility>

#include "test_support.hpp"

// Byte offsets as GGUF files lay them out (FORMATS.md).
static_assert(offsetof(qk::block_q8_0, qs) == 2);
static_assert(offsetof(qk::block_q8_K, qs) == 4 && offsetof(qk::block_q8_K, bsums) == 260);
static_assert(offsetof(qk::block_mxfp4, qs) == 1);
static_assert(offsetof(qk::block_nvfp4, d) == 0 && offsetof(qk::block_nvfp4, qs) == 4);
static_assert(offsetof(qk::block_iq4_nl, qs) == 2);
static_assert(offsetof(qk::block_iq4_xs, scales_h) == 2 && offsetof(qk::block_iq4_xs, scales_l) == 4 &&
              offsetof(qk::block_iq4_xs, qs) == 8);
static_assert(qk::format_traits<qk::block_q8_0>::bytes == 34 && qk::format_traits<qk::block_q8_K>::bytes == 292 &&
              qk::format_traits<qk::block_mxfp4>::bytes == 17 && qk::format_traits<qk::block_iq4_nl>::bytes == 18 &&
              qk::format_traits<qk::block_iq4_xs>::bytes == 136 && qk::format_traits<qk::block_nvfp4>::bytes == 36);
static_assert(qk::format_traits<qk::block_nvfp4>::block_size == 64 && qk::activation_blocks_per_block<qk::block_nvfp4> == 2 &&
              qk::activation_blocks_per_block<qk::block_mxfp4> == 1 && qk::activation_blocks_per_block<qk::block_iq4_xs> == 1);
static_assert(std::is_same_v<qk::format_traits<qk::block_nvfp4>::vec_dot_type, qk::block_q8_0>);
static_assert(qk::format_traits<qk::block_q8_K>::block_size == 256 && qk::format_traits<qk::block_mxfp4>::block_size == 32);
static_assert(qk::weight_format<qk::block_iq4_xs> && !qk::weight_format<qk::block_q8_K>);
static_assert(qk::importance_format<qk::block_iq4_nl> && !qk::importance_format<qk::block_q8_0>);
static_assert(std::is_same_v<qk::format_traits<qk::block_iq4_xs>::vec_dot_type, qk::block_q8_K>);
static_assert(std::is_same_v<qk::format_traits<qk::block_mxfp4>::vec_dot_type, qk::block_q8_0>);

TEST_CASE("format names round-trip and ignore letter case")
{
    for (qk::format f : qk::all_formats) {
        const std::string name(qk::format_name(f));
        CHECK(qk::parse_format(name) == f);
        std::string lower = name;
        for (auto& c : lower) {
            c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        }
        CHECK(qk::parse_format(lower) == f);
    }
    CHECK(qk::format_name(qk::format::iq4_xs) == "IQ4_XS");
    CHECK_FALSE(qk::find_format("Q4_0").has_value());
    CHECK_THROWS_WITH_AS((void)qk::parse_format("q4_k"), doctest::Contains("unknown format 'q4_k'"), qk::error);
    CHECK_THROWS_WITH_AS((void)qk::parse_format(""), doctest::Contains("IQ4_XS"), qk::error);
}

TEST_CASE("visit_format passes the matching block type")
{
    for (qk::format f : qk::all_formats) {
        const std::size_t bytes = qk::visit_format(f, []<class Block>(std::type_identity<Block>) { return sizeof(Block); });
        const std::size_t expected = f == qk::format::q8_0     ? 34
                                     : f == qk::format::q8_K   ? 292
                                     : f == qk::format::mxfp4  ? 17
                                     : f == qk::format::iq4_nl ? 18
                                     : f == qk::format::nvfp4  ? 36
                                                               : 136;
        CHECK(bytes == expected);
    }
}

TEST_CASE("GGUF type ids follow ggml's enum ggml_type")
{
    // The ids of ggml.h (GGML_TYPE_Q8_0 = 8, ..., GGML_TYPE_NVFP4 = 40), written out here.
    const std::pair<qk::format, std::uint32_t> ids[] = {{qk::format::q8_0, 8},   {qk::format::q8_K, 15},   {qk::format::iq4_nl, 20},
                                                        {qk::format::iq4_xs, 23}, {qk::format::mxfp4, 39}, {qk::format::nvfp4, 40}};
    CHECK(std::size(ids) == qk::all_formats.size());
    for (const auto& entry : ids) {
        const qk::format f = entry.first;
        const std::uint32_t id = entry.second;
        CAPTURE(qk::format_name(f));
        CHECK(qk::gguf_type(f) == id);
        CHECK(qk::find_gguf_type(id) == f);
    }
    // F32, F16, Q4_0, Q4_K, BF16, Q1_0 and beyond the enum: not formats qkern reads.
    for (std::uint32_t other : {0u, 1u, 2u, 12u, 30u, 41u, 43u, 0xffffffffu}) {
        CHECK_FALSE(qk::find_gguf_type(other).has_value());
    }
}

TEST_CASE("UE4M3 scales decode as half the unsigned E4M3 value")
{
    // Worked by hand from the definition (4 exponent bits, bias 7, 3 mantissa bits, halved):
    // 0x38 = exponent 7, mantissa 0: 1.0 / 2; 0x3c: 1.5 / 2; 0x01: subnormal 2^-9 / 2; 0x7e: 448 / 2.
    CHECK(qk::ue4m3_half_to_fp32(0x38) == 0.5f);
    CHECK(qk::ue4m3_half_to_fp32(0x3c) == 0.75f);
    CHECK(qk::ue4m3_half_to_fp32(0x01) == 0x1p-10f);
    CHECK(qk::ue4m3_half_to_fp32(0x07) == 7 * 0x1p-10f);
    CHECK(qk::ue4m3_half_to_fp32(0x08) == 0x1p-7f);
    CHECK(qk::ue4m3_half_to_fp32(0x7e) == 224.0f);
    CHECK(qk::ue4m3_half_to_fp32(0x00) == 0.0f);
    CHECK(qk::ue4m3_half_to_fp32(0x7f) == 0.0f);
    // The encoder: every scale byte's value below exponent 15 encodes back to that byte; GGUF
    // producers write exponent 15 only as 0x7e (448), so 256 .. 416 go there too, and 0x7f (the
    // NaN) is never written.
    for (unsigned b = 1; b < 0x7f; ++b) {
        CAPTURE(b);
        CHECK(qk::reference::fp32_to_ue4m3(2.0f * qk::ue4m3_half_to_fp32(static_cast<std::uint8_t>(b))) == (b < 0x78 ? b : 0x7e));
    }
    CHECK(qk::reference::fp32_to_ue4m3(1e30f) == 0x7e);    // clamped at 448
    CHECK(qk::reference::fp32_to_ue4m3(-1.0f) == 0);       // not positive
    CHECK(qk::reference::fp32_to_ue4m3(0x1p-12f) == 0);    // below half the smallest subnormal
    CHECK(qk::reference::fp32_to_ue4m3(0x1p-10f) == 1);    // x * 512 = 0.5 rounds up
    CHECK(qk::reference::fp32_to_ue4m3(1.03125f) == 0x38); // 1 + 1/32: the bit below the 3 mantissa bits is clear
    CHECK(qk::reference::fp32_to_ue4m3(1.0625f) == 0x39);  // 1 + 1/16: that bit alone set rounds up (half up)
    CHECK(qk::reference::fp32_to_ue4m3(1.96875f) == 0x40); // rounds up into the next exponent: 2.0
}

TEST_CASE("IQ4_XS group scales decode the 6-bit split fields")
{
    qk::block_iq4_xs block{};
    // Group 3: low nibble 0xA in the high half of scales_l[1], high bits 0b10 at bits 6-7 of
    // scales_h: ls = 0x2A = 42, multiplier 10. Group 0 stays 0 - 32.
    block.scales_l[1] = 0xA0;
    block.scales_h = 0b10 << 6;
    CHECK(qk::iq4_xs_group_scale(block, 3) == 10);
    CHECK(qk::iq4_xs_group_scale(block, 0) == -32);
}
