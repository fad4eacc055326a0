// Block layouts, traits and run-time format names.
#include <doctest/doctest.h>

#include <cstddef>
#include <string>

#include "test_support.hpp"

// Byte offsets as GGUF files lay them out (FORMATS.md).
static_assert(offsetof(qk::block_q8_0, qs) == 2);
static_assert(offsetof(qk::block_q8_K, qs) == 4 && offsetof(qk::block_q8_K, bsums) == 260);
static_assert(offsetof(qk::block_mxfp4, qs) == 1);
static_assert(offsetof(qk::block_iq4_nl, qs) == 2);
static_assert(offsetof(qk::block_iq4_xs, scales_h) == 2 && offsetof(qk::block_iq4_xs, scales_l) == 4 &&
              offsetof(qk::block_iq4_xs, qs) == 8);
static_assert(qk::format_traits<qk::block_q8_0>::bytes == 34 && qk::format_traits<qk::block_q8_K>::bytes == 292 &&
              qk::format_traits<qk::block_mxfp4>::bytes == 17 && qk::format_traits<qk::block_iq4_nl>::bytes == 18 &&
              qk::format_traits<qk::block_iq4_xs>::bytes == 136);
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
        const std::size_t expected = f == qk::format::q8_0 ? 34 : f == qk::format::q8_K ? 292 : f == qk::format::mxfp4 ? 17 : f == qk::format::iq4_nl ? 18 : 136;
        CHECK(bytes == expected);
    }
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
