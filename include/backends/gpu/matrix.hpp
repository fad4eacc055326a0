// qk::backend::gpu::matrix: weights resident on a GPU (the GGUF blocks as they are, in the
// backend's Buffer), made by make_matrix after the checks both backends' mat-vec kernels need, and
// the mat-vec's shape check. vulkan::matrix and metal::matrix are this template on their buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

#include "../../kernels/error.hpp"
#include "../../kernels/format_traits.hpp"

namespace qk::backend::gpu {

// The largest matrix the mat-vec kernels take. Vulkan's gemv.comp addresses W's bytes and x's
// values with 32-bit offsets; Metal's gemv.metal has 64-bit row offsets but counts rows and a
// row's parts (up to 8 per block) in 32 bits, which these bounds keep in range too (a block is
// at least 8 bytes).
inline constexpr std::uint64_t max_matrix_bytes = 0xffffffffu;
inline constexpr std::uint64_t max_row_values = 0xffffffffu;

namespace detail {
struct matrix_access;
}

// `rows` rows of `cols` values, row-major blocks. Made only by make_matrix (or empty, default
// constructed), so its shape always matches its weights.
template <class Block, class Buffer>
class matrix {
public:
    matrix() = default;

    [[nodiscard]] std::size_t rows() const noexcept { return rows_; }
    [[nodiscard]] std::size_t cols() const noexcept { return cols_; }
    [[nodiscard]] std::size_t blocks_per_row() const noexcept { return cols_ / format_traits<Block>::block_size; }
    [[nodiscard]] const Buffer& weights() const noexcept { return weights_; }
    [[nodiscard]] std::size_t bytes() const noexcept { return rows_ * blocks_per_row() * sizeof(Block); }

private:
    friend struct detail::matrix_access;
    matrix(Buffer weights, std::size_t rows, std::size_t cols) : weights_(std::move(weights)), rows_(rows), cols_(cols) {}

    Buffer weights_;
    std::size_t rows_ = 0;
    std::size_t cols_ = 0;
};

namespace detail {
struct matrix_access {
    template <class Block, class Buffer>
    [[nodiscard]] static matrix<Block, Buffer> make(Buffer weights, std::size_t rows, std::size_t cols)
    {
        return matrix<Block, Buffer>(std::move(weights), rows, cols);
    }
};
} // namespace detail

// The upload's checks, in the words of `op` (the public function, as "qk::backend::vulkan::upload_matrix"):
// cols a positive multiple of the block size, a shape within the kernels' bounds, and `blocks`
// (w.size()) exactly rows times the blocks of a row.
template <class Block>
void check_matrix_shape(std::string_view op, std::size_t blocks, std::size_t rows, std::size_t cols)
{
    constexpr std::size_t block_size = format_traits<Block>::block_size;
    if (cols == 0 || cols % block_size != 0) {
        qk::detail::fail(op, ": cols (", cols, ") is not a positive multiple of ", format_traits<Block>::name, "'s block size ",
                         block_size);
    }
    // cols first, so that the row's bytes cannot overflow.
    if (cols > max_row_values || rows > max_matrix_bytes / (std::uint64_t{cols / block_size} * sizeof(Block))) {
        qk::detail::fail(op, ": ", rows, " rows of ", cols, " values are past the mat-vec kernels' bounds (", format_traits<Block>::name,
                         " weights of at most 2^32 - 1 bytes, rows of at most 2^32 - 1 values)");
    }
    if (rows == 0 || blocks != rows * (cols / block_size)) {
        qk::detail::fail(op, ": w has ", blocks, " blocks for ", rows, " rows of ", cols / block_size, " blocks");
    }
}

// Checks w against rows x cols, then makes the matrix of it: make_filled(bytes) returns the
// backend's buffer holding a copy of w's bytes (its allocation and upload), called only once the
// checks have passed.
template <class Block, class MakeFilled>
[[nodiscard]] auto make_matrix(std::string_view op, std::span<const Block> w, std::size_t rows, std::size_t cols, MakeFilled&& make_filled)
{
    static_assert(sizeof(Block) == format_traits<Block>::bytes, "blocks are uploaded as their GGUF bytes");
    static_assert(sizeof(Block) >= 8, "max_matrix_bytes keeps Metal's 8 parts per block in 32 bits only for blocks of 8 bytes or more");
    check_matrix_shape<Block>(op, w.size(), rows, cols);
    using Buffer = std::remove_cvref_t<std::invoke_result_t<MakeFilled&, std::span<const std::byte>>>;
    return detail::matrix_access::make<Block, Buffer>(make_filled(std::as_bytes(w)), rows, cols);
}

// y = W·x's shapes: x has a value per column, y one per row.
template <class Block, class Buffer>
void check_gemv_shape(std::string_view op, const matrix<Block, Buffer>& w, std::size_t x_values, std::size_t y_values)
{
    if (x_values != w.cols() || y_values != w.rows()) {
        qk::detail::fail(op, ": x has ", x_values, " values and y ", y_values, " for a ", w.rows(), " x ", w.cols(), " matrix");
    }
}

// gemm's shapes: columns >= 1 activation columns of cols values in x, of rows values in y.
template <class Block, class Buffer>
void check_gemm_shape(std::string_view op, const matrix<Block, Buffer>& w, std::size_t columns, std::size_t x_values, std::size_t y_values)
{
    if (columns == 0) {
        qk::detail::fail(op, ": columns is 0; there must be at least one activation column");
    }
    if (x_values / columns != w.cols() || x_values % columns != 0 || y_values / columns != w.rows() || y_values % columns != 0) {
        qk::detail::fail(op, ": x has ", x_values, " values and y ", y_values, " for ", columns, " columns of a ", w.rows(), " x ",
                         w.cols(), " matrix (", columns, " x ", w.cols(), " and ", columns, " x ", w.rows(), " expected)");
    }
}

} // namespace qk::backend::gpu
