// qk::backend::gpu::format_index<Block>: a weight format's position in qk::weight_formats, which
// indexes the GPU backends' per-format kernel tables (one mat-vec kernel per format), and
// lists_weight_formats, the compile-time check that such a table follows that order.
#pragma once

#include <cstddef>
#include <string_view>
#include <type_traits>

#include "../../kernels/format_traits.hpp"
#include "../../kernels/formats.hpp"

namespace qk::backend::gpu {

namespace detail {

// Block's position in the list, or the list's size when it is not there.
template <class Block, class List>
struct position_in;

template <class Block, class... Blocks>
struct position_in<Block, format_list<Blocks...>> {
    static constexpr std::size_t value = [] {
        constexpr bool matches[] = {std::is_same_v<Block, Blocks>..., false};
        std::size_t i = 0;
        while (i < sizeof...(Blocks) && !matches[i]) {
            ++i;
        }
        return i;
    }();
};

// static_assert messages are literals: this one names the formats, so it changes with the list.
static_assert(weight_formats::size == 5, "a new weight format: name it in weight_format_position's message below");

template <class Block>
[[nodiscard]] consteval std::size_t weight_format_position()
{
    constexpr std::size_t i = position_in<Block, weight_formats>::value;
    static_assert(i < weight_formats::size, "the GPU mat-vec takes the formats of qk::weight_formats: Q8_0, MXFP4, IQ4_NL, IQ4_XS or NVFP4");
    return i;
}

[[nodiscard]] constexpr char lower_case(char c) noexcept
{
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

// Whether `name` is prefix + format_name in lower case ("gemv_" + "IQ4_NL": "gemv_iq4_nl").
[[nodiscard]] constexpr bool names_format(std::string_view name, std::string_view prefix, std::string_view format_name) noexcept
{
    if (name.size() != prefix.size() + format_name.size() || name.substr(0, prefix.size()) != prefix) {
        return false;
    }
    for (std::size_t i = 0; i < format_name.size(); ++i) {
        if (name[prefix.size() + i] != lower_case(format_name[i])) {
            return false;
        }
    }
    return true;
}

} // namespace detail

// Where a backend's table of per-format kernels has Block's kernel; a format outside
// qk::weight_formats is a compile-time error naming the formats there are.
template <class Block>
inline constexpr std::size_t format_index = detail::weight_format_position<Block>();

// Whether table[i] is the kernel of the i-th weight format for every format, by its name:
// name_of(table[i]) must be prefix + that format's name in lower case. A backend checks its table
// with it in a static_assert, so adding a format to the list without its kernel fails to build.
template <class Table, class NameOf>
[[nodiscard]] consteval bool lists_weight_formats(const Table& table, std::string_view prefix, NameOf name_of)
{
    if (table.size() != weight_formats::size) {
        return false;
    }
    bool in_order = true;
    std::size_t i = 0;
    weight_formats::for_each([&]<class Block>(std::type_identity<Block>) {
        in_order = in_order && detail::names_format(name_of(table[i]), prefix, format_traits<Block>::name);
        ++i;
    });
    return in_order;
}

} // namespace qk::backend::gpu
