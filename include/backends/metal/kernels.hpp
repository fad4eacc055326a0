// The Metal kernels the host code dispatches, as plain data: each kernel's name, the embedded MSL
// source that defines it, and its function constants (name, index, type). Portable C++ with no
// Metal dependency, so a Linux test can check every name and index against the source text.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <span>
#include <string_view>

#include "../../kernels/formats.hpp"
#include "../gpu/format_index.hpp"
#include "shaders/generated/gemv.hpp"
#include "shaders/generated/sampling.hpp"
#include "shaders/generated/solve_tri.hpp"

namespace qk::backend::metal {

enum class constant_type : std::uint32_t { uint32, boolean };

struct function_constant {
    std::string_view name;
    std::uint32_t index;
    constant_type type;
};

struct kernel_info {
    std::string_view name;        // the MSL kernel function
    std::string_view source_name; // the .metal file (and generated header) it is in
    const char* source;           // that file's text, embedded
    std::span<const function_constant> constants;
};

// A function constant's value for one pipeline (booleans as 0 or 1).
struct constant_value {
    std::uint32_t index;
    constant_type type;
    std::uint32_t value;
    friend auto operator<=>(const constant_value&, const constant_value&) = default;
};

namespace kernels {

// solve_tri.metal: buffers A, B, X, {batch}; threadgroups (ceil(k / nsg), batch), 32 * nsg
// threads; threadgroup memory round_up_16(rows * n * 4) bytes at index 0.
inline constexpr std::array<function_constant, 7> solve_tri_constants{{
    {"fc_nsg", 0, constant_type::uint32},
    {"fc_n", 1, constant_type::uint32},
    {"fc_k", 2, constant_type::uint32},
    {"fc_left", 3, constant_type::boolean},
    {"fc_lower", 4, constant_type::boolean},
    {"fc_unit", 5, constant_type::boolean},
    {"fc_rows", 6, constant_type::uint32},
}};
inline constexpr kernel_info solve_tri{"kernel_solve_tri_f32", "solve_tri", source::solve_tri, solve_tri_constants};

// gemv.metal: buffers W (GGUF bytes), x, y, {rows, blocks_per_row}, and for MXFP4 the E8M0
// half-scale table; threadgroups ceil(rows / nsg), 32 * nsg threads (one SIMD-group per row).
inline constexpr kernel_info gemv_q8_0{"kernel_gemv_q8_0", "gemv", source::gemv, {}};
inline constexpr kernel_info gemv_mxfp4{"kernel_gemv_mxfp4", "gemv", source::gemv, {}};
inline constexpr kernel_info gemv_iq4_nl{"kernel_gemv_iq4_nl", "gemv", source::gemv, {}};
inline constexpr kernel_info gemv_iq4_xs{"kernel_gemv_iq4_xs", "gemv", source::gemv, {}};
inline constexpr kernel_info gemv_nvfp4{"kernel_gemv_nvfp4", "gemv", source::gemv, {}};
// The same in qk::weight_formats order, for gpu::format_index<Block>.
inline constexpr std::array<const kernel_info*, weight_formats::size> gemv{&gemv_q8_0, &gemv_mxfp4, &gemv_iq4_nl, &gemv_iq4_xs,
                                                                           &gemv_nvfp4};
static_assert(gpu::lists_weight_formats(gemv, "kernel_gemv_", [](const kernel_info* k) { return k->name; }),
              "kernels::gemv has one kernel per format of qk::weight_formats, in that order");

// sampling.metal: nine buffers shared by every kernel (sampling_host.hpp lays them out); the list
// capacity (a power of two up to 2048) is the one function constant, used by top_k.
inline constexpr std::array<function_constant, 1> sampling_constants{{
    {"sampling_list_capacity", 0, constant_type::uint32},
}};
inline constexpr kernel_info sampling_transform{"kernel_sampling_transform", "sampling", source::sampling, {}};
inline constexpr kernel_info sampling_argmax{"kernel_sampling_argmax", "sampling", source::sampling, {}};
inline constexpr kernel_info sampling_chunks{"kernel_sampling_chunks", "sampling", source::sampling, {}};
inline constexpr kernel_info sampling_scale{"kernel_sampling_scale", "sampling", source::sampling, {}};
inline constexpr kernel_info sampling_top_k{"kernel_sampling_top_k", "sampling", source::sampling, sampling_constants};

// Every kernel the host code dispatches (what the Linux test checks against the sources).
inline constexpr std::array<const kernel_info*, 11> all{&solve_tri,          &gemv_q8_0,       &gemv_mxfp4,      &gemv_iq4_nl,
                                                        &gemv_iq4_xs,        &gemv_nvfp4,      &sampling_transform,
                                                        &sampling_argmax,    &sampling_chunks, &sampling_scale,  &sampling_top_k};

} // namespace kernels

} // namespace qk::backend::metal
