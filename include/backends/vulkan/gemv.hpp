// Mat-vec and mat-mult on a Vulkan device: y = W·x and Y = W·X for W in Q8_0, MXFP4, IQ4_NL,
// IQ4_XS or NVFP4 (the GGUF bytes, uploaded once as a qk::backend::vulkan::matrix) and float x.
// Unlike the CPU's, x is not quantized: each result is the float dot of the dequantized row with a
// column, in the GPU's order. One kernel does both (a mat-vec is one column), so gemm's columns
// are gemv's.
#pragma once

#include <algorithm>
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
#include "shaders/generated/gemv_nvfp4.hpp"
#include "shaders/generated/gemv_q8_0.hpp"

namespace qk::backend::vulkan {

namespace detail {

// Bindings: weights, x, y, the E8M0 half-scale table; push constants: rows, blocks per row,
// columns. One kernel per weight format, in qk::weight_formats order (gpu::format_index picks one).
inline constexpr std::array<kernel, weight_formats::size> gemv_kernels{{
    {"gemv_q8_0", spirv::gemv_q8_0, 4, 12},
    {"gemv_mxfp4", spirv::gemv_mxfp4, 4, 12},
    {"gemv_iq4_nl", spirv::gemv_iq4_nl, 4, 12},
    {"gemv_iq4_xs", spirv::gemv_iq4_xs, 4, 12},
    {"gemv_nvfp4", spirv::gemv_nvfp4, 4, 12},
}};
static_assert(gpu::lists_weight_formats(gemv_kernels, "gemv_", [](const kernel& k) { return k.name; }),
              "gemv_kernels has one kernel per format of qk::weight_formats, in that order");

// One workgroup per row and tile of columns; a workgroup of 64 fills two subgroups of 32, one of
// 64, or several narrower ones, and the reduction does not depend on which.
inline constexpr std::uint32_t gemv_workgroup = 64;
// Columns per workgroup (gemv.comp's specialization constant column_tile) where there are several:
// enough to reuse each decoded block, few enough to keep the sums in registers.
inline constexpr std::uint32_t gemv_column_tile = 4;

// The workgroup count that every device allows in the y and z dimensions (Vulkan's minimum).
inline constexpr std::uint32_t guaranteed_workgroup_count = 65535;

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

// The step that computes Y = W·X between device buffers for `columns` columns (1: y = W·x), for
// callers that chain kernels. x and y must hold columns * cols and columns * rows floats, each
// count below 2^32 (the kernel's indices), and columns at most 4 * 65535 (the grid's z).
template <class Block>
[[nodiscard]] step gemv_step(const matrix<Block>& w, const buffer& x, const buffer& y, const buffer& table, std::uint32_t max_groups_x,
                             std::uint32_t columns = 1)
{
    const auto rows = static_cast<std::uint32_t>(w.rows());
    const auto groups_x = rows < max_groups_x ? rows : max_groups_x;
    step s;
    s.what = &detail::gemv_kernels[gpu::format_index<Block>];
    const std::uint32_t tile = columns == 1 ? 1 : detail::gemv_column_tile;
    s.specialization = {detail::gemv_workgroup, tile};
    s.buffers = {&w.weights(), &x, &y, &table};
    s.push = {rows, static_cast<std::uint32_t>(w.blocks_per_row()), columns};
    s.groups_x = groups_x;
    s.groups_y = (rows + groups_x - 1) / groups_x;
    s.groups_z = (columns + tile - 1) / tile;
    return s;
}

// How many columns one run of the kernel takes: all of them where the device allows, else as many
// as fit the grid, the kernel's 32-bit indices and the device's largest storage buffer.
template <class Block>
[[nodiscard]] std::size_t gemm_batch_columns(const device& dev, const matrix<Block>& w, std::size_t columns) noexcept
{
    const std::size_t longest = std::max<std::size_t>({w.rows(), w.cols(), 1});
    const std::size_t by_range = std::min<std::uint64_t>(dev.facts().max_storage_buffer_bytes / sizeof(float), 0xffffffffu) / longest;
    const std::size_t by_grid = std::size_t{detail::gemv_column_tile} * detail::guaranteed_workgroup_count;
    return std::max<std::size_t>(1, std::min({columns, by_range, by_grid}));
}

// Y = W·X from host memory: x holds columns * cols values (finite; column c at x[c * cols]), y
// columns * rows (column c at y[c * rows]), as qk::gemm. Each column equals gemv's result for it
// bit for bit. Shapes are checked before anything runs; on a qk::error y is untouched.
template <class Block>
void gemm(const device& dev, gemv_workspace& ws, const matrix<Block>& w, std::size_t columns, std::span<const float> x, std::span<float> y)
{
    gpu::check_gemm_shape("qk::backend::vulkan::gemm", w, columns, x.size(), y.size());
    const std::size_t batch = gemm_batch_columns(dev, w, columns);
    for (std::size_t first = 0; first < columns; first += batch) {
        const std::size_t n = std::min(batch, columns - first);
        const std::span<const float> xs = x.subspan(first * w.cols(), n * w.cols());
        const std::span<float> ys = y.subspan(first * w.rows(), n * w.rows());
        const buffer& xb = ws.x(xs.size());
        const buffer& yb = ws.y(ys.size());
        dev.upload(xb, xs.data(), xs.size_bytes());
        dev.run(gemv_step(w, xb, yb, ws.table(), dev.facts().max_workgroup_count_x, static_cast<std::uint32_t>(n)));
        dev.download(yb, ys.data(), ys.size_bytes());
    }
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
