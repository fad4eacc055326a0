// qk::gemv and qk::gemm: y = W·x and Y = W·X for a matrix W of quantized weights (any weight
// format, row-major rows of blocks) and float activations, rows split across a CPU thread pool:
// the CPU backend's threaded driver over the single-threaded kernels/dot.hpp.
// The activations are quantized once to the format's activation blocks; each output value is one
// dot kernel call on the tag: qk::dot's, so results equal a loop of qk::dot over the rows bit for
// bit, except for rows of 1024 values or more in the formats with split kernels on the tag (the
// 4-bit formats on avx512vbmi, MXFP4 and NVFP4 on avx2 and sse4_2: kernels::has_split_dot), whose kernels read
// the activations laid out once per call (kernels::split_activations) and sum in another order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../../kernels/arch.hpp"
#include "../../kernels/dispatch.hpp"
#include "../../kernels/dot.hpp"
#include "../../kernels/dot/split_activations.hpp"
#include "../../kernels/error.hpp"
#include "../../kernels/formats.hpp"
#include "../../kernels/quantize.hpp"
#include "thread_pool.hpp"

namespace qk {
namespace detail {

// Whether rows of blocks_per_row blocks take the split kernels on a tag that has them: rows of
// 1024 values or more, where they overtake the other kernels (on a step or two, the per-row sum
// of their vector costs more than the layout saves).
template <class Block>
[[nodiscard]] constexpr bool splits_activations(std::size_t blocks_per_row) noexcept
{
    return kernels::has_split_layout<Block> && blocks_per_row * format_traits<Block>::block_size >= 1024;
}

// Scratch blocks past the quantized activations that hold their split layouts (any tag may run:
// the size cannot depend on it), with room to align them to 64 bytes.
template <class Block>
[[nodiscard]] constexpr std::size_t split_scratch_blocks(std::size_t blocks_per_row, std::size_t columns) noexcept
{
    if constexpr (kernels::has_split_layout<Block>) {
        if (splits_activations<Block>(blocks_per_row)) {
            constexpr std::size_t block_bytes = sizeof(typename format_traits<Block>::vec_dot_type);
            return (columns * kernels::split_activations<Block>::bytes_for(blocks_per_row) + 63 + block_bytes - 1) / block_bytes;
        }
    }
    return 0;
}

} // namespace detail

// Blocks of scratch that gemv/gemm need for `columns` activation vectors of `cols` values.
template <weight_format Block>
[[nodiscard]] constexpr std::size_t gemm_scratch_blocks(std::size_t cols, std::size_t columns = 1) noexcept
{
    const std::size_t blocks_per_row = cols / format_traits<Block>::block_size;
    return cols / format_traits<typename format_traits<Block>::vec_dot_type>::block_size * columns +
           detail::split_scratch_blocks<Block>(blocks_per_row, columns);
}

namespace detail {

// The checked shape of one gemm call.
struct gemm_shape {
    std::size_t rows;
    std::size_t columns;
    std::size_t blocks_per_row;
};

// Which entry point is checking: messages name the arguments that function has (gemv has no
// columns argument).
enum class gemm_entry { gemv, gemm };

// Checks every size against the shape before anything is written, so that a qk::error leaves
// y (and scratch) untouched.
template <class Block>
gemm_shape check_gemm(gemm_entry entry, std::size_t w_blocks, std::size_t rows, std::size_t cols, std::size_t columns, std::size_t x_values,
                      std::size_t y_values, std::size_t scratch_blocks)
{
    using activation = typename format_traits<Block>::vec_dot_type;
    constexpr std::size_t block_size = format_traits<Block>::block_size;
    constexpr std::string_view name = format_traits<Block>::name;
    const bool is_gemv = entry == gemm_entry::gemv;
    const char* function = is_gemv ? "qk::gemv" : "qk::gemm";
    // A product that overflows cannot be any span's size.
    const auto overflows = [](std::size_t a, std::size_t b) { return a != 0 && b > std::numeric_limits<std::size_t>::max() / a; };
    const auto matches = [&](std::size_t size, std::size_t a, std::size_t b) { return !overflows(a, b) && size == a * b; };
    const auto needed = [&](std::size_t a, std::size_t b) {
        return overflows(a, b) ? std::string("more than SIZE_MAX") : std::to_string(a * b);
    };

    if (cols % block_size != 0) {
        fail(function, '<', name, ">: cols is ", cols, ", not a multiple of the block size ", block_size);
    }
    if (columns == 0) {
        fail(function, '<', name, ">: columns is 0; there must be at least one activation vector");
    }
    const std::size_t blocks_per_row = cols / block_size;
    if (!matches(w_blocks, rows, blocks_per_row)) {
        fail(function, '<', name, ">: w has ", w_blocks, " blocks but rows ", rows, " x cols ", cols, " make ",
             needed(rows, blocks_per_row), " (", blocks_per_row, " per row)");
    }
    if (!matches(x_values, columns, cols)) {
        if (is_gemv) {
            fail(function, '<', name, ">: x has ", x_values, " values but cols is ", cols);
        }
        fail(function, '<', name, ">: x has ", x_values, " values but columns ", columns, " x cols ", cols, " make ",
             needed(columns, cols));
    }
    if (!matches(y_values, columns, rows)) {
        if (is_gemv) {
            fail(function, '<', name, ">: y has ", y_values, " values but rows is ", rows);
        }
        fail(function, '<', name, ">: y has ", y_values, " values but columns ", columns, " x rows ", rows, " make ",
             needed(columns, rows));
    }
    // columns * cols fits (x has that size), so this smaller product does too, and so does the
    // split layout (at most 1.5 bytes per value, where x takes 4).
    const std::size_t quantized = columns * blocks_per_row * activation_blocks_per_block<Block>;
    const std::size_t split = split_scratch_blocks<Block>(blocks_per_row, columns);
    if (scratch_blocks < quantized + split) {
        const std::string laid_out = split == 0 ? std::string() : " and " + std::to_string(split) + " more to lay them out";
        fail(function, '<', name, ">: scratch has ", scratch_blocks, ' ', format_traits<activation>::name, " blocks but x needs ",
             quantized + split, is_gemv ? " (cols " : " (columns x cols ", is_gemv ? cols : columns * cols, " / ",
             format_traits<activation>::block_size, laid_out, ')');
    }
    return {rows, columns, blocks_per_row};
}

// Rows go to tasks in contiguous chunks, several chunks per thread: the pool hands tasks out
// as threads free up, which evens out threads that the OS preempts on a busy machine, while
// each chunk is still long enough for the hardware prefetchers to stream it.
// No software prefetch here: a task reads one or two sequential streams (its rows, or its
// tiles' units with the scales between the codes; two in the mat-vecs of for_each_row and of the
// packed tile pairs). The hardware prefetchers alone do not bring them at the memory's pace,
// though, so the kernels prefetch 4-8 KiB ahead within each: Q8_0 rows in
// dot/avx2.hpp and dot/avx512vnni.hpp, the 4-bit rows' split kernels in dot/avx512vbmi.hpp, the
// tiles in packed/avx2.hpp and packed/avx512vnni.hpp, each saying what it gains. Those gains
// show only where both sides read the same buffers: two sets of copies of one matrix, allocated
// one after the other, streamed 10-20% apart on Zen 5 whatever the code, which hid them before.
inline constexpr std::size_t gemm_tasks_per_thread = 4;

// Calls row_range(begin, end) on the pool for the rows in those chunks.
template <class Task>
void run_row_chunks(std::size_t rows, backend::cpu::thread_pool& pool, Task&& row_range)
{
    const std::size_t chunks = pool.size() * gemm_tasks_per_thread;
    const std::size_t rows_per_task = (rows + chunks - 1) / chunks;
    const std::size_t tasks = (rows + rows_per_task - 1) / rows_per_task;
    pool.run(tasks, [&](std::size_t task) {
        const std::size_t begin = task * rows_per_task;
        row_range(begin, begin + rows_per_task < rows ? begin + rows_per_task : rows);
    });
}

// A mat-vec's task reads its rows as two streams: rows i of its first and second halves in
// turn. Two streams per thread come from memory faster than one, by how much depends on the core.
// 14336 x 4096 from memory against rows in order, both on copies allocated in turn: on Zen 5 (6
// runs of 15-41 shuffled rounds, medians of the runs' medians) Q8_0 1.09 at one thread, 1.06 at
// two (avx2 tag: 1.16-1.25), MXFP4 1.08 and 1.06, IQ4_NL 1.03 and 1.05, but NVFP4 0.98 and 0.99
// and IQ4_XS 0.95 and 0.97; on an Intel Xeon with AVX-512 (family 6 model 167, two runs of
// qkern_bench's paired fraction) NVFP4 0.72-0.74 -> 0.92-0.94 at one thread and 0.78-0.82 ->
// 0.77-0.85 at two, IQ4_XS 0.71-0.72 -> 0.95 and 0.69-0.73 -> 0.82-0.90. So every format pairs.
// With several columns each row is read once for all of them, from cache after the first, and
// order does not matter.
template <class Row>
void for_each_row(std::size_t begin, std::size_t end, std::size_t columns, Row&& row)
{
    if (columns == 1) {
        const std::size_t half = (end - begin + 1) / 2;
        for (std::size_t r = begin; r < begin + half; ++r) {
            row(r);
            if (r + half < end) {
                row(r + half);
            }
        }
        return;
    }
    for (std::size_t r = begin; r < end; ++r) {
        row(r);
    }
}

// The rows on the split kernels: each column's quantized activations laid out once, after all of
// them in scratch, 64-byte aligned.
template <class Block, class Arch>
void gemm_split(const Block* w, const gemm_shape& shape, float* y, backend::cpu::thread_pool& pool,
                typename format_traits<Block>::vec_dot_type* scratch)
{
    using split = kernels::split_activations<Block>;
    const std::size_t blocks = shape.blocks_per_row;
    const std::size_t activation_blocks = blocks * activation_blocks_per_block<Block>;
    const std::size_t split_bytes = split::bytes_for(blocks);
    auto* quantized_end = reinterpret_cast<std::byte*>(scratch + shape.columns * activation_blocks);
    std::byte* laid_out = quantized_end + (64 - reinterpret_cast<std::uintptr_t>(quantized_end) % 64) % 64;
    for (std::size_t c = 0; c < shape.columns; ++c) {
        const std::span<const typename split::activation> quantized(scratch + c * activation_blocks, activation_blocks);
        split::lay_out(quantized, laid_out + c * split_bytes);
    }
    run_row_chunks(shape.rows, pool, [&](std::size_t begin, std::size_t end) {
        for_each_row(begin, end, shape.columns, [&](std::size_t r) {
            const Block* row = w + r * blocks;
            for (std::size_t c = 0; c < shape.columns; ++c) {
                const split activations{scratch + c * activation_blocks, laid_out + c * split_bytes};
                y[c * shape.rows + r] = kernels::dot<Arch>(row, activations, blocks, Arch{});
            }
        });
    });
}

template <class Block, class Arch>
void gemm_on(const Block* w, const gemm_shape& shape, std::span<const float> x, float* y, backend::cpu::thread_pool& pool,
             typename format_traits<Block>::vec_dot_type* scratch)
{
    using activation = typename format_traits<Block>::vec_dot_type;
    const std::size_t cols = shape.blocks_per_row * format_traits<Block>::block_size;
    const std::size_t activation_blocks = shape.blocks_per_row * activation_blocks_per_block<Block>;
    // Zero columns of x leave nothing to quantize, however many vectors (up to SIZE_MAX: x's size
    // bounds only columns * cols) there are.
    for (std::size_t c = 0; c < shape.columns && cols != 0; ++c) {
        quantize<activation, Arch>(x.subspan(c * cols, cols), std::span<activation>(scratch + c * activation_blocks, activation_blocks));
    }
    if (shape.rows == 0) {
        return;
    }
    if constexpr (kernels::has_split_dot<Block, Arch>) {
        if (splits_activations<Block>(shape.blocks_per_row)) {
            gemm_split<Block, Arch>(w, shape, y, pool, scratch);
            return;
        }
    }
    run_row_chunks(shape.rows, pool, [&](std::size_t begin, std::size_t end) {
        for_each_row(begin, end, shape.columns, [&](std::size_t r) {
            // The row stays in L1 while every column uses it: weights are read from memory once.
            const Block* row = w + r * shape.blocks_per_row;
            for (std::size_t c = 0; c < shape.columns; ++c) {
                y[c * shape.rows + r] = kernels::dot<Arch>(row, scratch + c * activation_blocks, shape.blocks_per_row, Arch{});
            }
        });
    });
}

template <class Block, class Arch>
void gemm_checked(const Block* w, const gemm_shape& shape, std::span<const float> x, float* y, backend::cpu::thread_pool& pool,
                  typename format_traits<Block>::vec_dot_type* scratch)
{
    if constexpr (std::is_same_v<Arch, arch::runtime>) {
        // Chosen once per call, not per row: the rows then run the tag's kernels inline.
        dispatch([&]<class Tag>(Tag) { gemm_on<Block, Tag>(w, shape, x, y, pool, scratch); });
    } else {
        gemm_on<Block, Arch>(w, shape, x, y, pool, scratch);
    }
}

} // namespace detail

// Y = W·X for `columns` activation vectors at once (prompt processing): W is `rows` rows of
// `cols` values (rows * cols / block_size blocks, row-major), X is column-major
// (x[c * cols + i]) and so is Y (y[c * rows + r]). Each weight row is read once for all columns.
// scratch holds the quantized X: at least gemm_scratch_blocks<Block>(cols, columns) blocks, its
// contents afterwards unspecified. x must be finite (quantize's check). On a qk::error (a bad
// shape, a non-finite x, a pool already running) y is untouched.
template <weight_format Block, class Arch = arch::default_tag>
void gemm(std::span<const Block> w, std::size_t rows, std::size_t cols, std::size_t columns, std::span<const float> x, std::span<float> y,
          backend::cpu::thread_pool& pool, std::span<typename format_traits<Block>::vec_dot_type> scratch)
{
    const auto shape =
        detail::check_gemm<Block>(detail::gemm_entry::gemm, w.size(), rows, cols, columns, x.size(), y.size(), scratch.size());
    detail::gemm_checked<Block, Arch>(w.data(), shape, x, y.data(), pool, scratch.data());
}

// As above, with scratch allocated for this call.
template <weight_format Block, class Arch = arch::default_tag>
void gemm(std::span<const Block> w, std::size_t rows, std::size_t cols, std::size_t columns, std::span<const float> x, std::span<float> y,
          backend::cpu::thread_pool& pool)
try {
    const auto shape = detail::check_gemm<Block>(detail::gemm_entry::gemm, w.size(), rows, cols, columns, x.size(), y.size(),
                                                 std::numeric_limits<std::size_t>::max());
    std::vector<typename format_traits<Block>::vec_dot_type> scratch(gemm_scratch_blocks<Block>(cols, shape.columns));
    detail::gemm_checked<Block, Arch>(w.data(), shape, x, y.data(), pool, scratch.data());
} catch (...) {
    qk::detail::rethrow_as_error("qk::gemm");
}

// y = W·x: x holds cols values, y rows values; otherwise as gemm with one column. scratch (at
// least gemm_scratch_blocks<Block>(cols) blocks) keeps the hot call free of allocation.
template <weight_format Block, class Arch = arch::default_tag>
void gemv(std::span<const Block> w, std::size_t rows, std::size_t cols, std::span<const float> x, std::span<float> y,
          backend::cpu::thread_pool& pool, std::span<typename format_traits<Block>::vec_dot_type> scratch)
{
    const auto shape = detail::check_gemm<Block>(detail::gemm_entry::gemv, w.size(), rows, cols, 1, x.size(), y.size(), scratch.size());
    detail::gemm_checked<Block, Arch>(w.data(), shape, x, y.data(), pool, scratch.data());
}

// As above, with scratch allocated for this call.
template <weight_format Block, class Arch = arch::default_tag>
void gemv(std::span<const Block> w, std::size_t rows, std::size_t cols, std::span<const float> x, std::span<float> y,
          backend::cpu::thread_pool& pool)
try {
    const auto shape = detail::check_gemm<Block>(detail::gemm_entry::gemv, w.size(), rows, cols, 1, x.size(), y.size(),
                                                 std::numeric_limits<std::size_t>::max());
    std::vector<typename format_traits<Block>::vec_dot_type> scratch(gemm_scratch_blocks<Block>(cols));
    detail::gemm_checked<Block, Arch>(w.data(), shape, x, y.data(), pool, scratch.data());
} catch (...) {
    qk::detail::rethrow_as_error("qk::gemv");
}

} // namespace qk
