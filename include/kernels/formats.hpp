// All block formats qkern reads and writes, and a run-time name for each (for tools and files
// that name a format in text). Generic code uses the block types directly; `visit_format` turns a
// run-time `format` into a call with the matching block type.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "error.hpp"
#include "formats/iq4_nl.hpp"
#include "formats/iq4_xs.hpp"
#include "formats/mxfp4.hpp"
#include "formats/nvfp4.hpp"
#include "formats/q8_0.hpp"
#include "formats/q8_k.hpp"

namespace qk {

enum class format { q8_0, q8_K, mxfp4, iq4_nl, iq4_xs, nvfp4 };

inline constexpr std::array<format, 6> all_formats = {format::q8_0, format::q8_K, format::mxfp4, format::iq4_nl, format::iq4_xs,
                                                      format::nvfp4};

// The block types as compile-time lists, for code that covers every format (tests, benchmarks, the
// backends' format-to-kernel maps): for_each(f) calls f(std::type_identity<Block>{}) in order, and
// tuple is std::tuple<Blocks...> (doctest's TEST_CASE_TEMPLATE_APPLY takes it).
template <class... Blocks>
struct format_list {
    static constexpr std::size_t size = sizeof...(Blocks);
    using tuple = std::tuple<Blocks...>;

    template <class F>
    static constexpr void for_each(F&& f)
    {
        (f(std::type_identity<Blocks>{}), ...);
    }
};

// Every block format, in the order of `format`.
using block_formats = format_list<block_q8_0, block_q8_K, block_mxfp4, block_iq4_nl, block_iq4_xs, block_nvfp4>;
// The weight formats: those with a dot product against an activation format.
using weight_formats = format_list<block_q8_0, block_mxfp4, block_iq4_nl, block_iq4_xs, block_nvfp4>;
static_assert(block_formats::size == all_formats.size(), "a new format goes into both lists");

// Calls f(std::type_identity<Block>{}) with the block type of `which`.
template <class F>
decltype(auto) visit_format(format which, F&& f)
{
    switch (which) {
    case format::q8_0: return std::forward<F>(f)(std::type_identity<block_q8_0>{});
    case format::q8_K: return std::forward<F>(f)(std::type_identity<block_q8_K>{});
    case format::mxfp4: return std::forward<F>(f)(std::type_identity<block_mxfp4>{});
    case format::iq4_nl: return std::forward<F>(f)(std::type_identity<block_iq4_nl>{});
    case format::iq4_xs: return std::forward<F>(f)(std::type_identity<block_iq4_xs>{});
    case format::nvfp4: break;
    }
    return std::forward<F>(f)(std::type_identity<block_nvfp4>{});
}

[[nodiscard]] inline std::string_view format_name(format which)
{
    return visit_format(which, []<class Block>(std::type_identity<Block>) { return format_traits<Block>::name; });
}

// Accepts the GGUF spelling in any letter case ("Q8_0", "q8_0", "iq4_xs").
[[nodiscard]] inline std::optional<format> find_format(std::string_view name) noexcept
{
    const auto equal_ignoring_case = [](std::string_view a, std::string_view b) {
        if (a.size() != b.size()) {
            return false;
        }
        for (std::size_t i = 0; i < a.size(); ++i) {
            const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
            if (lower(a[i]) != lower(b[i])) {
                return false;
            }
        }
        return true;
    };
    for (format f : all_formats) {
        if (equal_ignoring_case(format_name(f), name)) {
            return f;
        }
    }
    return std::nullopt;
}

// The GGUF tensor type id of a format (ggml's enum ggml_type: Q8_0 8, Q8_K 15, IQ4_NL 20, IQ4_XS 23,
// MXFP4 39, NVFP4 40), and the format of an id, none for the types qkern does not read.
[[nodiscard]] inline std::uint32_t gguf_type(format which)
{
    return visit_format(which, []<class Block>(std::type_identity<Block>) { return format_traits<Block>::gguf_type; });
}

[[nodiscard]] inline std::optional<format> find_gguf_type(std::uint32_t id) noexcept
{
    for (format f : all_formats) {
        if (gguf_type(f) == id) {
            return f;
        }
    }
    return std::nullopt;
}

// Like find_format, but an unknown name is a qk::error that lists the known ones.
[[nodiscard]] inline format parse_format(std::string_view name)
{
    if (auto found = find_format(name)) {
        return *found;
    }
    detail::fail("unknown format '", name, "': expected one of Q8_0, Q8_K, MXFP4, IQ4_NL, IQ4_XS, NVFP4");
}

} // namespace qk
