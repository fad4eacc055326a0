// qk::quantize over a CPU thread pool: the same bytes as the single-threaded qk::quantize
// (kernels/quantize.hpp) whatever the thread count, for quantizing whole weight matrices, where
// the IQ4 formats' scale search takes seconds per million values on one thread.
// As there, every argument and value is checked before anything is written.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../kernels/arch.hpp"
#include "../../kernels/dispatch.hpp"
#include "../../kernels/error.hpp"
#include "../../kernels/formats.hpp"
#include "../../kernels/quantize.hpp"
#include "thread_pool.hpp"

namespace qk {
namespace detail {

// Blocks per task: enough tasks for every thread to find work while others finish theirs, each
// at least 64 K values so that handing it out costs nothing in comparison.
template <class Block>
[[nodiscard]] std::size_t blocks_per_task(std::size_t blocks, std::size_t threads) noexcept
{
    const std::size_t least = std::max<std::size_t>(1, 65536 / format_traits<Block>::block_size);
    return std::max(least, (blocks + 8 * threads - 1) / (8 * threads));
}

template <block_format Block, class Arch>
void quantize_on_pool(std::span<const float> x, std::span<Block> y, backend::cpu::thread_pool& pool)
{
    constexpr std::size_t size = format_traits<Block>::block_size;
    const std::size_t per_task = blocks_per_task<Block>(y.size(), pool.size());
    const std::size_t tasks = (y.size() + per_task - 1) / per_task;
    const auto range = [&](std::size_t task) {
        const std::size_t first = task * per_task;
        return std::pair{first, std::min(y.size(), first + per_task) - first};
    };
    // Every value is checked before any block is written. A task's check names an index within
    // its own range, so a failure is only noted here and the whole of x checked again below,
    // which finds the first bad value and names it as the one-thread quantize does.
    std::atomic<bool> bad{false};
    pool.run(tasks, [&](std::size_t task) {
        const auto [first, count] = range(task);
        try {
            check_values<Block, Arch>(x.subspan(first * size, count * size));
        } catch (const qk::error&) {
            bad.store(true, std::memory_order_relaxed);
        }
    });
    if (bad.load(std::memory_order_relaxed)) {
        check_values<Block, Arch>(x);
    }
    pool.run(tasks, [&](std::size_t task) {
        const auto [first, count] = range(task);
        kernels::quantize<Arch>(x.data() + first * size, y.data() + first, count, Arch{});
    });
}

} // namespace detail

// Quantizes x into y as qk::quantize(x, y) does, blocks spread over the pool's threads.
template <block_format Block, class Arch = arch::default_tag>
void quantize(std::span<const float> x, std::span<Block> y, backend::cpu::thread_pool& pool)
try {
    detail::check_block_shapes<Block>("qk::quantize", x.size(), y.size(), "y");
    if constexpr (std::is_same_v<Arch, arch::runtime>) {
        dispatch([&]<class Tag>(Tag) { detail::quantize_on_pool<Block, Tag>(x, y, pool); });
    } else {
        detail::quantize_on_pool<Block, Arch>(x, y, pool);
    }
} catch (...) {
    qk::detail::rethrow_as_error("qk::quantize");
}

// With importance weights, as qk::quantize(x, y, importance): rows spread over the pool's threads.
template <importance_format Block>
void quantize(std::span<const float> x, std::span<Block> y, std::span<const float> importance, backend::cpu::thread_pool& pool)
try {
    detail::check_block_shapes<Block>("qk::quantize", x.size(), y.size(), "y");
    detail::check_values<Block>(x);
    detail::check_importance<Block>(x, importance);
    const std::size_t rows = x.size() / importance.size();
    const std::size_t row_blocks = importance.size() / format_traits<Block>::block_size;
    const std::size_t rows_per_task = std::max<std::size_t>(1, detail::blocks_per_task<Block>(y.size(), pool.size()) / row_blocks);
    std::vector<Block> blocks(y.size());
    pool.run((rows + rows_per_task - 1) / rows_per_task, [&](std::size_t task) {
        const std::size_t first = task * rows_per_task;
        detail::quantize_rows(x, std::span<Block>(blocks), importance, first, std::min(rows, first + rows_per_task));
    });
    detail::check_scales(x, std::span<const Block>(blocks));
    std::copy(blocks.begin(), blocks.end(), y.begin());
} catch (...) {
    qk::detail::rethrow_as_error("qk::quantize");
}

} // namespace qk
