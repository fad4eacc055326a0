// qk::gguf::tensor_type_info: every tensor type a GGUF file may hold (ggml's `enum ggml_type`),
// with its block geometry, so that a reader can size and bound any tensor, including the types
// qkern has no kernels for; `bytes_of` is the one overflow-checked size computation the reader
// and the writer share. qkern's own formats carry the same ids in their format_traits.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string_view>

#include "../kernels/error.hpp"
#include "../kernels/formats.hpp"

namespace qk::gguf {

struct tensor_type_info {
    std::uint32_t id;          // ggml_type
    std::string_view name;     // as ggml_type_name spells it
    std::uint32_t block_size;  // values per block (1 for plain numbers)
    std::uint32_t block_bytes; // bytes per block
};

// ggml d99724f's type_traits (ids 4, 5, 31-33 and 36-38 were removed from GGUF files; a file
// holding them is refused like any unknown id).
inline constexpr std::array<tensor_type_info, 35> tensor_types = {{
    {0, "f32", 1, 4},        {1, "f16", 1, 2},         {2, "q4_0", 32, 18},      {3, "q4_1", 32, 20},     {6, "q5_0", 32, 22},
    {7, "q5_1", 32, 24},     {8, "q8_0", 32, 34},      {9, "q8_1", 32, 36},      {10, "q2_K", 256, 84},   {11, "q3_K", 256, 110},
    {12, "q4_K", 256, 144},  {13, "q5_K", 256, 176},   {14, "q6_K", 256, 210},   {15, "q8_K", 256, 292},  {16, "iq2_xxs", 256, 66},
    {17, "iq2_xs", 256, 74}, {18, "iq3_xxs", 256, 98}, {19, "iq1_s", 256, 50},   {20, "iq4_nl", 32, 18},  {21, "iq3_s", 256, 110},
    {22, "iq2_s", 256, 82},  {23, "iq4_xs", 256, 136}, {24, "i8", 1, 1},         {25, "i16", 1, 2},       {26, "i32", 1, 4},
    {27, "i64", 1, 8},       {28, "f64", 1, 8},        {29, "iq1_m", 256, 56},   {30, "bf16", 1, 2},      {34, "tq1_0", 256, 54},
    {35, "tq2_0", 256, 66},  {39, "mxfp4", 32, 17},    {40, "nvfp4", 64, 36},    {41, "q1_0", 128, 18},   {42, "q2_0", 64, 18},
}};

inline constexpr std::uint32_t type_f32 = 0;
inline constexpr std::uint32_t type_f16 = 1;
inline constexpr std::uint32_t type_bf16 = 30;

// The type with ggml id `id`; nullptr for an id no GGUF file may hold.
[[nodiscard]] constexpr const tensor_type_info* find_tensor_type(std::uint32_t id) noexcept
{
    for (const tensor_type_info& t : tensor_types) {
        if (t.id == id) {
            return &t;
        }
    }
    return nullptr;
}

// By name, in any letter case ("Q8_0", "iq4_xs", "BF16"); nullptr when none is called that.
[[nodiscard]] constexpr const tensor_type_info* find_tensor_type(std::string_view name) noexcept
{
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    for (const tensor_type_info& t : tensor_types) {
        if (t.name.size() != name.size()) {
            continue;
        }
        bool same = true;
        for (std::size_t i = 0; i < name.size() && same; ++i) {
            same = lower(t.name[i]) == lower(name[i]);
        }
        if (same) {
            return &t;
        }
    }
    return nullptr;
}

// Whether qkern has kernels for the type (one of its block formats), and which.
[[nodiscard]] inline std::optional<qk::format> kernel_format(std::uint32_t id) noexcept { return qk::find_gguf_type(id); }

// The bytes of a tensor of `type` and `shape` (ggml order: shape[0] is the row length), or nullopt
// when the row length is not a whole number of blocks or the size does not fit in 63 bits (the
// largest a file offset can address). An empty shape is one value.
[[nodiscard]] constexpr std::optional<std::uint64_t> bytes_of(const tensor_type_info& type, std::span<const std::uint64_t> shape) noexcept
{
    constexpr std::uint64_t limit = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    const std::uint64_t row = shape.empty() ? 1 : shape[0];
    if (row % type.block_size != 0) {
        return std::nullopt;
    }
    std::uint64_t bytes = row / type.block_size;
    if (bytes > limit / type.block_bytes) {
        return std::nullopt;
    }
    bytes *= type.block_bytes;
    for (std::size_t d = 1; d < shape.size(); ++d) {
        if (shape[d] != 0 && bytes > limit / shape[d]) {
            return std::nullopt;
        }
        bytes *= shape[d];
    }
    return bytes;
}

} // namespace qk::gguf
