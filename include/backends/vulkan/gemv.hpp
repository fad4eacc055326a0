// Mat-vec on a Vulkan device: y = W·x for W in Q8_0, MXFP4, IQ4_NL or IQ4_XS (the GGUF bytes,
// uploaded once as a qk::backend::vulkan::matrix) and float x. Unlike the CPU gemv, x is not
// quantized: the result is the float dot of the dequantized row with x, in the GPU's order.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "../../kernels/e8m0.hpp"
#include "../../kernels/formats.hpp"
#include "../gpu/format_index.hpp"
#include "../gpu/matrix.hpp"
#include "../gpu/workspace.hpp"
#include "device.hpp"
#include "shaders/generated/gemv_iq4_nl.hpp"
#include "shaders/generated/gemv_iq4_xs.hpp"
#include "shaders/generated/gemv_mxfp4.hpp"
#include "shaders/generated/gemv_q8_0.hpp"

namespace qk::backend::vulkan {

namespace detail {

// Bindings: weights, x, y, the E8M0 half-scale table; push constants: rows, blocks per row. One
// kernel per weight format, in qk::weight_formats order (gpu::format_index picks one).
inline constexpr std::array<kernel, weight_formats::size> gemv_kernels{{
    {"gemv_q8_0", spirv::gemv_q8_0, 4, 8},
    {"gemv_mxfp4", spirv::gemv_mxfp4, 4, 8},
    {"gemv_iq4_nl", spirv::gemv_iq4_nl, 4, 8},
    {"gemv_iq4_xs", spirv::gemv_iq4_xs, 4, 8},
}};
static_assert(gpu::lists_weight_formats(gemv_kernels, "gemv_", [](const kernel& k) { return k.name; }),
              "gemv_kernels has one kernel per format of qk::weight_formats, in that order");

// One workgroup per row; a workgroup of 64 fills two subgroups of 32, one of 64, or several
// narrower ones, and the reduction does not depend on which.
inline constexpr std::uint32_t gemv_workgroup = 64;

} // namespace detail

// A weight matrix resident on the device: `rows` rows of `cols` values, row-major blocks.
template <class Block>
using matrix = gpu::matrix<Block, buffer>;

// Copies W (rows x cols values, the blocks exactly as GGUF stores them) to the device.
template <class Block>
[[nodiscard]] matrix<Block> upload_matrix(const device& dev, std::span<const Block> w, std::size_t rows, std::size_t cols)
{
    return gpu::make_matrix<Block>("qk::backend::vulkan::upload_matrix", w, rows, cols, [&](std::span<const std::byte> bytes) {
        buffer weights = dev.make_buffer(bytes.size());
        dev.upload(weights, bytes.data(), bytes.size());
        return weights;
    });
}

// Scratch that a caller keeps between calls so that the hot call allocates nothing: activation
// and output buffers (grown as needed) and the E8M0 table.
class gemv_workspace {
public:
    explicit gemv_workspace(const device& dev) : dev_(&dev)
    {
        table_ = dev.make_buffer(sizeof(e8m0_half_table));
        dev.upload(table_, e8m0_half_table.data(), sizeof(e8m0_half_table));
    }

    const buffer& x(std::size_t values) { return grow(x_, values * sizeof(float)); }
    const buffer& y(std::size_t values) { return grow(y_, values * sizeof(float)); }
    [[nodiscard]] const buffer& table() const noexcept { return table_; }

private:
    const buffer& grow(buffer& b, std::size_t bytes)
    {
        return gpu::grow(b, bytes, [this](std::size_t n) { return dev_->make_buffer(n); });
    }
    const device* dev_;
    buffer table_;
    buffer x_;
    buffer y_;
};

// The step that computes y = W·x between device buffers (for callers that chain kernels).
template <class Block>
[[nodiscard]] step gemv_step(const matrix<Block>& w, const buffer& x, const buffer& y, const buffer& table, std::uint32_t max_groups_x)
{
    const auto rows = static_cast<std::uint32_t>(w.rows());
    const auto groups_x = rows < max_groups_x ? rows : max_groups_x;
    step s;
    s.what = &detail::gemv_kernels[gpu::format_index<Block>];
    s.specialization = {detail::gemv_workgroup};
    s.buffers = {&w.weights(), &x, &y, &table};
    s.push = {rows, static_cast<std::uint32_t>(w.blocks_per_row())};
    s.groups_x = groups_x;
    s.groups_y = (rows + groups_x - 1) / groups_x;
    return s;
}

// y = W·x from host memory: x holds cols values (finite), y rows values. Shapes are checked
// before anything runs; on a qk::error y is untouched.
template <class Block>
void gemv(const device& dev, gemv_workspace& ws, const matrix<Block>& w, std::span<const float> x, std::span<float> y)
{
    gpu::check_gemv_shape("qk::backend::vulkan::gemv", w, x.size(), y.size());
    const buffer& xb = ws.x(x.size());
    const buffer& yb = ws.y(y.size());
    dev.upload(xb, x.data(), x.size_bytes());
    dev.run(gemv_step(w, xb, yb, ws.table(), dev.facts().max_workgroup_count_x));
    dev.download(yb, y.data(), y.size_bytes());
}

} // namespace qk::backend::vulkan
