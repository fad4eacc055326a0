// qk::gemm and qk::gemv on a qk::packed_matrix: the CPU backend's threaded driver over the tile
// kernels (kernels/tile_product.hpp), and over the AMX kernels (kernels/packed/amx.hpp) for 16
// columns and more where the process may use them. The activations are quantized once per call,
// as qk::gemm does, then arranged in panels; threads take long runs of tiles and sweep every
// column set over four tiles (64 rows) at a time, while those stay in the core's L2. Results
// equal qk::gemm's on the generic tag bit for bit, whatever the tag, AMX and the threads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "../../kernels/arch.hpp"
#include "../../kernels/cpu_features.hpp"
#include "../../kernels/dispatch.hpp"
#include "../../kernels/formats.hpp"
#include "../../kernels/packed.hpp"
#include "../../kernels/quantize.hpp"
#include "../../kernels/tile_product.hpp"
#include "gemv.hpp"
#include "thread_pool.hpp"

namespace qk {

namespace detail {

// Four tiles (64 rows) of 4096 Q8_0 columns are 280 KiB: they stay in L2 while every column set
// passes over them.
inline constexpr std::size_t tiles_per_sweep = 4;

// Whether a mat-vec on the tag reads two tiles at once (kernels::tile_pair_product), two memory
// streams per thread: every format on the AVX-512 VNNI kernels (the other tags have no pair
// kernel). On Zen 5 (14336 x 4096 from memory, same buffers, pairing on and off in shuffled
// rounds, medians of 9-15 rounds, 2-4 runs) IQ4_NL read 5-11% faster at one thread and 4-17% at
// two, NVFP4 8-15% and 8-12%, while MXFP4 lost 1-8% at one thread (-4% to +3% at two) and IQ4_XS
// and Q8_0 moved both ways by 3-7%. On an Intel Xeon with AVX-512 (family 6 model 167, two runs
// of qkern_bench's paired fraction, old and new binaries in turn) MXFP4 went from 0.64-0.67 to
// 0.95-0.99 at one thread and from 0.61-0.62 to 0.77-0.90 at two, IQ4_XS from 0.80-0.81 to
// 0.91-0.92 and from 0.62-0.73 to 0.79-0.92, Q8_0 from 0.96-0.97 to 0.98-1.01 and from 0.81-0.86
// to 0.90: a few percent lost on one core against up to half again on the other.
template <class Block, class Arch>
inline constexpr bool pairs_tiles_in_gemv = std::is_base_of_v<arch::avx512vnni, Arch>;

// The fewest columns for which a product takes the AMX kernels (kernels/packed/amx.hpp) where
// the process may use them. Against the VNNI kernels, 4096 x 4096 weights at one thread (Intel
// Xeon, family 6 model 167): 8 columns 0.7x, 16 columns 1.05-1.4x (the 4-bit formats) and 2.2x
// (Q8_0).
inline constexpr std::size_t amx_min_columns = 16;

// Whether the AMX kernels beat the tag's own for `columns` columns. They take sets of 16 columns,
// the last padded with zeros, and the padding costs as much as real columns: where the 4-bit
// formats gain 1.2-1.3x on whole sets, 17 and 20 columns (sets of 32) ran 0.77-0.88x as fast as
// the VNNI kernels for NVFP4 and IQ4_XS and 1.0x for MXFP4 and IQ4_NL, 24 columns 1.05-1.2x (same
// machine and shape). So those take them where at least three quarters of the padded columns are
// real; Q8_0, 1.6x at 17 columns, takes them from 16 on.
template <class Block>
[[nodiscard]] constexpr bool amx_pays(std::size_t columns) noexcept
{
    if (columns < amx_min_columns) {
        return false;
    }
    if constexpr (std::is_same_v<Block, block_q8_0>) {
        return true;
    } else {
        const std::size_t padded = (columns + packed_amx_set_columns - 1) / packed_amx_set_columns * packed_amx_set_columns;
        return 4 * columns >= 3 * padded;
    }
}

// Whether the driver has an AMX path on Arch (the VNNI tags, where the AMX kernels compile).
template <class Arch>
inline constexpr bool has_amx_path = kernels::has_amx_kernels && std::is_base_of_v<arch::avx512vnni, Arch>;

// Whether a product of `columns` activation columns over `cols` columns of weights takes the AMX
// kernels on Arch: not without columns of weights, where the tile kernels write the zeros and the
// AMX ones would write nothing.
template <class Block, class Arch>
[[nodiscard]] bool takes_amx(std::size_t columns, std::size_t cols) noexcept
{
    return has_amx_path<Arch> && amx_pays<Block>(columns) && cols != 0 && amx_usable();
}

// amx: whether the AMX kernels may run where qk::amx_usable() (false keeps to the tag's own).
template <weight_format Block, class Arch>
void packed_gemm_on(const packed_matrix<Block>& w, std::size_t columns, std::span<const float> x, float* y,
                    backend::cpu::thread_pool& pool, std::vector<std::uint8_t>& scratch, bool amx)
{
    using activation = typename format_traits<Block>::vec_dot_type;
    const std::size_t cols = w.cols();
    // Activation blocks (NVFP4's 64-value blocks pair with two Q8_0 blocks each).
    const std::size_t blocks = cols / format_traits<Block>::block_size * activation_blocks_per_block<Block>;
    const std::size_t groups = cols / 32;
    const std::size_t activation_bytes = columns * blocks * sizeof(activation);

    // Each task is one contiguous run of tiles, as long as gemv's tasks (long runs keep the
    // hardware prefetchers streaming).
    const std::size_t tiles = w.tiles();
    const std::size_t chunks = pool.size() * gemm_tasks_per_thread;
    const std::size_t per_task = tiles == 0 ? 1 : (tiles + chunks - 1) / chunks;
    const std::size_t tasks = (tiles + per_task - 1) / per_task;
    amx = amx && takes_amx<Block, Arch>(columns, cols);
    // The AMX kernels take sets of 16 columns, the last one padded (pack_panel).
    const std::size_t set_columns = amx ? packed_amx_set_columns : packed_panel_columns;
    const std::size_t sets = cols == 0 ? 0 : columns / set_columns + (columns % set_columns != 0 ? 1 : 0);
    const std::size_t panel_bytes = packed_panel_bytes(groups, amx ? sets * set_columns : columns);
    scratch.resize(activation_bytes + panel_bytes);
    auto* quantized = reinterpret_cast<activation*>(scratch.data() + panel_bytes);
    std::uint8_t* panel = scratch.data();
    // Quantized and arranged a column set per task: serial, this would cost a tenth of a
    // two-thread product of 128 columns. A non-finite x throws here, before y is written.
    // (None when x has zero columns, where columns is bounded by nothing: see gemv.hpp's gemm_on.)
    pool.run(sets, [&](std::size_t set) {
        const std::size_t c0 = set * set_columns;
        const std::size_t n = std::min(set_columns, columns - c0);
        for (std::size_t c = c0; c < c0 + n; ++c) {
            quantize<activation, Arch>(x.subspan(c * cols, cols), std::span<activation>(quantized + c * blocks, blocks));
        }
        pack_panel(quantized + c0 * blocks, blocks, n, panel + c0 * groups * packed_entry_bytes, amx);
    });
    if (w.rows() == 0) {
        return;
    }

    const std::size_t rows = w.rows();
    // The rows of tile t (only the last may have fewer than 16).
    const auto rows_of = [&](std::size_t t) { return std::min(packed_tile_rows, rows - t * packed_tile_rows); };
    if constexpr (pairs_tiles_in_gemv<Block, Arch>) {
        if (columns == 1) {
            pool.run(tasks, [&](std::size_t task) {
                const std::size_t begin = task * per_task;
                const std::size_t end = std::min(tiles, (task + 1) * per_task);
                const std::size_t half = (end - begin) / 2;
                // Tile k of the task's first half with tile k of its second: only the last tile of
                // the matrix can be partial, and it is never in the first half.
                for (std::size_t k = 0; k < half; ++k) {
                    const std::size_t a = begin + k;
                    const std::size_t b = begin + half + k;
                    kernels::tile_pair_product<Arch>(w.tile(a), w.tile(b), panel, y + a * packed_tile_rows, y + b * packed_tile_rows,
                                                     rows_of(b), Arch{});
                }
                for (std::size_t t = begin + 2 * half; t < end; ++t) {
                    kernels::tile_product<Arch>(w.tile(t), panel, 1, y + t * packed_tile_rows, rows, rows_of(t), Arch{});
                }
            });
            return;
        }
    }
    if constexpr (has_amx_path<Arch>) {
        if (amx) {
            pool.run(tasks, [&](std::size_t task) {
                kernels::amx_product<Arch, Block>(w, task * per_task, std::min(tiles, (task + 1) * per_task), panel, columns, y);
            });
            return;
        }
    }
    // Within a task, every column set passes over four tiles at a time while those stay in L2.
    pool.run(tasks, [&](std::size_t task) {
        const std::size_t task_end = std::min(tiles, (task + 1) * per_task);
        for (std::size_t first = task * per_task; first < task_end; first += tiles_per_sweep) {
            const std::size_t last = std::min(task_end, first + tiles_per_sweep);
            for (std::size_t c0 = 0; c0 < columns; c0 += packed_panel_columns) {
                const std::size_t n = std::min(packed_panel_columns, columns - c0);
                const std::uint8_t* entries = panel + c0 * groups * packed_entry_bytes;
                for (std::size_t t = first; t < last; ++t) {
                    kernels::tile_product<Arch>(w.tile(t), entries, n, y + c0 * rows + t * packed_tile_rows, rows, rows_of(t), Arch{});
                }
            }
        }
    });
}

template <weight_format Block, class Arch>
void packed_gemm_checked(const packed_matrix<Block>& w, std::size_t columns, std::span<const float> x, float* y,
                         backend::cpu::thread_pool& pool, std::vector<std::uint8_t>& scratch)
{
    constexpr bool amx = true; // where the process may use it
    if constexpr (std::is_same_v<Arch, arch::runtime>) {
        dispatch([&]<class Tag>(Tag) { packed_gemm_on<Block, Tag>(w, columns, x, y, pool, scratch, amx); });
    } else {
        packed_gemm_on<Block, Arch>(w, columns, x, y, pool, scratch, amx);
    }
}

} // namespace detail

// Y = W·X on packed weights: X column-major (x[c * cols + i]), Y too (y[c * rows + r]), as
// qk::gemm. scratch is reused between calls (its contents afterwards unspecified). On a qk::error
// (a bad shape, a non-finite x, a pool already running) y is untouched.
template <weight_format Block, class Arch = arch::default_tag>
void gemm(const packed_matrix<Block>& w, std::size_t columns, std::span<const float> x, std::span<float> y,
          backend::cpu::thread_pool& pool, std::vector<std::uint8_t>& scratch)
try {
    const std::size_t blocks = w.cols() / format_traits<Block>::block_size;
    (void)detail::check_gemm<Block>(detail::gemm_entry::gemm, w.rows() * blocks, w.rows(), w.cols(), columns, x.size(), y.size(),
                                    std::numeric_limits<std::size_t>::max());
    detail::packed_gemm_checked<Block, Arch>(w, columns, x, y.data(), pool, scratch);
} catch (...) {
    qk::detail::rethrow_as_error("qk::gemm");
}

template <weight_format Block, class Arch = arch::default_tag>
void gemm(const packed_matrix<Block>& w, std::size_t columns, std::span<const float> x, std::span<float> y, backend::cpu::thread_pool& pool)
try {
    std::vector<std::uint8_t> scratch;
    gemm<Block, Arch>(w, columns, x, y, pool, scratch);
} catch (...) {
    qk::detail::rethrow_as_error("qk::gemm");
}

// y = W·x on packed weights.
template <weight_format Block, class Arch = arch::default_tag>
void gemv(const packed_matrix<Block>& w, std::span<const float> x, std::span<float> y, backend::cpu::thread_pool& pool,
          std::vector<std::uint8_t>& scratch)
try {
    const std::size_t blocks = w.cols() / format_traits<Block>::block_size;
    (void)detail::check_gemm<Block>(detail::gemm_entry::gemv, w.rows() * blocks, w.rows(), w.cols(), 1, x.size(), y.size(),
                                    std::numeric_limits<std::size_t>::max());
    detail::packed_gemm_checked<Block, Arch>(w, 1, x, y.data(), pool, scratch);
} catch (...) {
    qk::detail::rethrow_as_error("qk::gemv");
}

template <weight_format Block, class Arch = arch::default_tag>
void gemv(const packed_matrix<Block>& w, std::span<const float> x, std::span<float> y, backend::cpu::thread_pool& pool)
try {
    std::vector<std::uint8_t> scratch;
    gemv<Block, Arch>(w, x, y, pool, scratch);
} catch (...) {
    qk::detail::rethrow_as_error("qk::gemv");
}

} // namespace qk
