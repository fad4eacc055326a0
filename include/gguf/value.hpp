// qk::gguf::value: one metadata value of a GGUF file, of any of GGUF's thirteen value types: a
// number, a bool, a string, or an array of one of those (GGUF has no arrays of arrays). The reader
// produces them and the writer stores them; get<T> reads one as exactly the type it was written as.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace qk::gguf {

// GGUF's value type ids (gguf.h's enum gguf_type).
enum class value_type : std::uint32_t {
    uint8 = 0,
    int8 = 1,
    uint16 = 2,
    int16 = 3,
    uint32 = 4,
    int32 = 5,
    float32 = 6,
    boolean = 7,
    string = 8,
    array = 9,
    uint64 = 10,
    int64 = 11,
    float64 = 12,
};

[[nodiscard]] constexpr std::string_view name(value_type t) noexcept
{
    constexpr std::string_view names[] = {"uint8", "int8",  "uint16", "int16",  "uint32", "int32", "float32",
                                          "bool",  "string", "array", "uint64", "int64",  "float64"};
    const auto i = static_cast<std::uint32_t>(t);
    return i < std::size(names) ? names[i] : std::string_view("unknown");
}

// The element types, in the order of the variants below (index = value_type id, array excepted).
using scalar = std::variant<std::uint8_t, std::int8_t, std::uint16_t, std::int16_t, std::uint32_t, std::int32_t, float, bool, std::string,
                            std::uint64_t, std::int64_t, double>;
using array = std::variant<std::vector<std::uint8_t>, std::vector<std::int8_t>, std::vector<std::uint16_t>, std::vector<std::int16_t>,
                           std::vector<std::uint32_t>, std::vector<std::int32_t>, std::vector<float>, std::vector<bool>,
                           std::vector<std::string>, std::vector<std::uint64_t>, std::vector<std::int64_t>, std::vector<double>>;

// The value type of a C++ element type (T one of scalar's alternatives).
template <class T>
[[nodiscard]] constexpr value_type type_of() noexcept
{
    if constexpr (std::is_same_v<T, std::uint8_t>) {
        return value_type::uint8;
    } else if constexpr (std::is_same_v<T, std::int8_t>) {
        return value_type::int8;
    } else if constexpr (std::is_same_v<T, std::uint16_t>) {
        return value_type::uint16;
    } else if constexpr (std::is_same_v<T, std::int16_t>) {
        return value_type::int16;
    } else if constexpr (std::is_same_v<T, std::uint32_t>) {
        return value_type::uint32;
    } else if constexpr (std::is_same_v<T, std::int32_t>) {
        return value_type::int32;
    } else if constexpr (std::is_same_v<T, float>) {
        return value_type::float32;
    } else if constexpr (std::is_same_v<T, bool>) {
        return value_type::boolean;
    } else if constexpr (std::is_same_v<T, std::string>) {
        return value_type::string;
    } else if constexpr (std::is_same_v<T, std::uint64_t>) {
        return value_type::uint64;
    } else if constexpr (std::is_same_v<T, std::int64_t>) {
        return value_type::int64;
    } else {
        static_assert(std::is_same_v<T, double>, "GGUF values are 8- to 64-bit integers, float, double, bool or string");
        return value_type::float64;
    }
}

struct value {
    std::variant<scalar, array> data;

    value() = default;
    value(std::variant<scalar, array> v) noexcept : data(std::move(v)) {} // implicit: {scalar(...)} is a value
    // Copied alternative by alternative, each built in place: libstdc++ 12's variant copy
    // constructor, when the copy of a string or vector alternative throws (memory ran out), goes
    // on to destroy the alternative it never built and crashes. Moves cannot throw, so keep theirs.
    value(const value& other) : data(copy(other.data)) {}
    value(value&&) noexcept = default;
    value& operator=(const value& other)
    {
        if (this != &other) {
            data = copy(other.data);
        }
        return *this;
    }
    value& operator=(value&&) noexcept = default;
    ~value() = default;

    [[nodiscard]] bool is_array() const noexcept { return data.index() == 1; }
    // The value's type: `array` for an array (element_type() says of what).
    [[nodiscard]] value_type type() const noexcept
    {
        return is_array() ? value_type::array : static_cast<value_type>(index_to_id(std::get<0>(data).index()));
    }
    // Of an array's elements; of a scalar, its own type.
    [[nodiscard]] value_type element_type() const noexcept
    {
        return static_cast<value_type>(index_to_id(is_array() ? std::get<1>(data).index() : std::get<0>(data).index()));
    }
    // "uint32", "array of string", ...
    [[nodiscard]] std::string type_name() const
    {
        return is_array() ? "array of " + std::string(name(element_type())) : std::string(name(type()));
    }
    bool operator==(const value&) const = default;

private:
    template <class V>
    [[nodiscard]] static V copy_alternative(const V& v)
    {
        return std::visit([]<class T>(const T& x) { return V(std::in_place_type<T>, x); }, v);
    }
    [[nodiscard]] static std::variant<scalar, array> copy(const std::variant<scalar, array>& v)
    {
        return std::visit([]<class Inner>(const Inner& inner) { return std::variant<scalar, array>(std::in_place_type<Inner>, copy_alternative(inner)); }, v);
    }

    // The variants skip id 9 (array).
    static constexpr std::uint32_t index_to_id(std::size_t index) noexcept
    {
        return static_cast<std::uint32_t>(index < 9 ? index : index + 1);
    }
};

} // namespace qk::gguf
