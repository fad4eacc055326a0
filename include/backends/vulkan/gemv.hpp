// Mat-vec on a Vulkan device: y = W·x for W in Q8_0, MXFP4, IQ4_NL or IQ4_XS (the GGUF bytes,
// uploaded once as a qk::backend::vulkan::matrix) and float x. Unlike the CPU gemv, x is not
// quantized: the result is the float dot of the dequantized row with x, in the GPU's order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "../../kernels/e8m0.hpp"
#include "../../kernels/error.hpp"
#include "../../kernels/format_traits.hpp"
#include "../../kernels/formats.hpp"
#include "device.hpp"
#include "shaders/generated/gemv_iq4_nl.hpp"
#include "shaders/generated/gemv_iq4_xs.hpp"
#include "shaders/generated/gemv_mxfp4.hpp"
#include "shaders/generated/gemv_q8_0.hpp"

namespace qk::backend::vulkan {

namespace detail {

// Bindings: weights, x, y, the E8M0 half-scale table; push constants: rows, blocks per row.
template <class Block>
[[nodiscard]] const kernel& gemv_kernel() noexcept
{
    if constexpr (std::is_same_v<Block, block_q8_0>) {
        static constexpr kernel k{"gemv_q8_0", spirv::gemv_q8_0, 4, 8};
        return k;
    } else if constexpr (std::is_same_v<Block, block_mxfp4>) {
        static constexpr kernel k{"gemv_mxfp4", spirv::gemv_mxfp4, 4, 8};
        return k;
    } else if constexpr (std::is_same_v<Block, block_iq4_nl>) {
        static constexpr kernel k{"gemv_iq4_nl", spirv::gemv_iq4_nl, 4, 8};
        return k;
    } else {
        static_assert(std::is_same_v<Block, block_iq4_xs>, "the Vulkan mat-vec takes Q8_0, MXFP4, IQ4_NL or IQ4_XS weights");
        static constexpr kernel k{"gemv_iq4_xs", spirv::gemv_iq4_xs, 4, 8};
        return k;
    }
}

// One workgroup per row; a workgroup of 64 fills two subgroups of 32, one of 64, or several
// narrower ones, and the reduction does not depend on which.
inline constexpr std::uint32_t gemv_workgroup = 64;

} // namespace detail

// A weight matrix resident on the device: `rows` rows of `cols` values, row-major blocks.
template <class Block>
class matrix {
public:
    [[nodiscard]] std::size_t rows() const noexcept { return rows_; }
    [[nodiscard]] std::size_t cols() const noexcept { return cols_; }
    [[nodiscard]] const buffer& weights() const noexcept { return weights_; }
    [[nodiscard]] std::size_t bytes() const noexcept { return rows_ * cols_ / format_traits<Block>::block_size * sizeof(Block); }

private:
    template <class B>
    friend matrix<B> upload_matrix(const device&, std::span<const B>, std::size_t, std::size_t);
    buffer weights_;
    std::size_t rows_ = 0;
    std::size_t cols_ = 0;
};

// Copies W (rows x cols values, the blocks exactly as GGUF stores them) to the device.
template <class Block>
[[nodiscard]] matrix<Block> upload_matrix(const device& dev, std::span<const Block> w, std::size_t rows, std::size_t cols)
{
    static_assert(sizeof(Block) == format_traits<Block>::bytes, "blocks are uploaded as their GGUF bytes");
    constexpr std::size_t bs = format_traits<Block>::block_size;
    if (cols == 0 || cols % bs != 0) {
        qk::detail::fail("qk::backend::vulkan::upload_matrix: cols (", cols, ") is not a positive multiple of ", format_traits<Block>::name,
                         "'s block size ", bs);
    }
    if (rows == 0 || rows > 0xffffffffu / (cols / bs) || w.size() != rows * (cols / bs)) {
        qk::detail::fail("qk::backend::vulkan::upload_matrix: w has ", w.size(), " blocks for ", rows, " rows of ", cols / bs,
                         " blocks (at most 2^32 - 1 blocks in all)");
    }
    matrix<Block> m;
    m.weights_ = dev.make_buffer(w.size_bytes());
    dev.upload(m.weights_, w.data(), w.size_bytes());
    m.rows_ = rows;
    m.cols_ = cols;
    return m;
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
        if (b.size() < bytes) {
            b = buffer();
            b = dev_->make_buffer(bytes);
        }
        return b;
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
    s.what = &detail::gemv_kernel<Block>();
    s.specialization = {detail::gemv_workgroup};
    s.buffers = {&w.weights(), &x, &y, &table};
    s.push = {rows, static_cast<std::uint32_t>(w.cols() / format_traits<Block>::block_size)};
    s.groups_x = groups_x;
    s.groups_y = (rows + groups_x - 1) / groups_x;
    return s;
}

// y = W·x from host memory: x holds cols values (finite), y rows values. Shapes are checked
// before anything runs; on a qk::error y is untouched.
template <class Block>
void gemv(const device& dev, gemv_workspace& ws, const matrix<Block>& w, std::span<const float> x, std::span<float> y)
{
    if (x.size() != w.cols() || y.size() != w.rows()) {
        qk::detail::fail("qk::backend::vulkan::gemv: x has ", x.size(), " values and y ", y.size(), " for a ", w.rows(), " x ", w.cols(),
                         " matrix");
    }
    const buffer& xb = ws.x(x.size());
    const buffer& yb = ws.y(y.size());
    dev.upload(xb, x.data(), x.size_bytes());
    dev.run(gemv_step(w, xb, yb, ws.table(), dev.facts().max_workgroup_count_x));
    dev.download(yb, y.data(), y.size_bytes());
}

} // namespace qk::backend::vulkan
