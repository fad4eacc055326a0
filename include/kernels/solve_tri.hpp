// qk::solve_tri: batched triangular solves A X = B or X A = B, A lower or upper triangular, with
// a stored or unit diagonal, in float or double, on contiguous ggml-layout buffers or strided 4-D
// views (A may be broadcast across batches), single-threaded here; backends/cpu/solve_tri.hpp adds
// the overloads that spread the work over a CPU thread pool.
//
// Every variant is reduced to one: a forward substitution L' X' = B' with L' lower triangular,
// where reversing the row order turns "upper" into "lower" and transposing turns a right solve
// into a left one. A is read in that form where it lies, through strides (its diagonal inverted
// once per batch), and kernels/solve_tri/tile.hpp solves B' column tile by column tile (wide
// tiles, then one vector wide for the rest of k): in place where B and X have contiguous rows (left
// solves) and the tile is whole, else through a packed copy of the tile. So X may be B itself:
// every block of rows of B is read completely before that block of X is written.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "arch.hpp"
#include "error.hpp"
#include "solve_tri/tile.hpp"
#include "tensor_view.hpp"

namespace qk {

// Which system to solve. The default, A X = B with A lower triangular and its stored diagonal, is
// ggml's GGML_OP_SOLVE_TRI. The triangle that is not selected is never read, nor is the diagonal
// when `unit` is set (it is taken as all ones).
struct tri_options {
    bool left = true;  // A X = B; false: X A = B
    bool lower = true; // A is lower triangular; false: upper
    bool unit = false; // A has a unit diagonal
};

template <class T>
concept solve_tri_value = std::same_as<T, float> || std::same_as<T, double>;

namespace arch {

// The tag qk::solve_tri uses by default: qk::arch::vector_native (plain xsimd arithmetic, which
// needs nothing newer than the baseline SIMD).
using solve_tri_native = vector_native;

} // namespace arch

namespace detail {

// The checked shape of one solve, and how its variant maps onto the canonical lower solve.
struct tri_problem {
    std::int64_t n;        // order of A
    std::int64_t k;        // right-hand sides
    std::int64_t batch2;   // B's batch dimensions
    std::int64_t batch3;
    std::int64_t repeat2;  // B batches per A batch along dimensions 2 and 3 (broadcast)
    std::int64_t repeat3;
    bool reversed;         // row order reversed (upper left solves, lower right solves)
    bool transposed;       // right solve: A transposed
    bool unit;
};

inline const char* tri_variant_name(const tri_options& opt) noexcept
{
    static constexpr const char* names[2][2][2] = {
        {{"right, upper, non-unit", "right, upper, unit"}, {"right, lower, non-unit", "right, lower, unit"}},
        {{"left, upper, non-unit", "left, upper, unit"}, {"left, lower, non-unit", "left, lower, unit"}},
    };
    return names[opt.left][opt.lower][opt.unit];
}

template <class T>
void check_view(const char* name, const tensor_view<const T>& view)
{
    if (view.data == nullptr) {
        fail("qk::solve_tri: ", name, " is a null pointer");
    }
    for (std::size_t d = 0; d < 4; ++d) {
        if (view.ne[d] < 1) {
            fail("qk::solve_tri: ", name, ".ne[", d, "] is ", view.ne[d], "; every dimension needs at least one element");
        }
        if (view.nb[d] % static_cast<std::int64_t>(sizeof(T)) != 0) {
            fail("qk::solve_tri: ", name, ".nb[", d, "] is ", view.nb[d], " bytes, not a multiple of the element size ", sizeof(T));
        }
    }
}

// Every element count and scratch size must fit the integer types used for them (and a
// contiguous call's byte strides must not overflow): at most 2^40 elements in A, and in B.
inline void check_tri_size(std::int64_t n, std::int64_t k, std::int64_t batches)
{
    constexpr auto limit = std::int64_t{1} << 40;
    if (n > (std::int64_t{1} << 20) || k > limit / n || batches > limit / (n * k) || batches > limit / (n * n)) {
        fail("qk::solve_tri: n = ", n, ", k = ", k, " and ", batches, " batches exceed the supported size (2^40 elements in A or in B)");
    }
}

// The contiguous entry points' sizes.
inline void check_tri_sizes(std::int64_t n, std::int64_t k, std::int64_t batch)
{
    if (n < 1 || k < 1 || batch < 1) {
        fail("qk::solve_tri: n = ", n, ", k = ", k, ", batch = ", batch, "; each must be at least 1");
    }
    check_tri_size(n, k, batch);
}

// Checks shapes, broadcasts and (for a non-unit diagonal) every pivot of A, before anything is
// written. A zero pivot is reported with its batch and row: no X exists for it.
template <class T>
tri_problem check_solve_tri(const tensor_view<const T>& A, const tensor_view<const T>& B, const tensor_view<T>& X, const tri_options& opt)
{
    check_view("A", A);
    check_view("B", B);
    check_view<T>("X", X);
    const std::int64_t n = A.ne[0];
    if (A.ne[1] != n) {
        fail("qk::solve_tri: A is not square: ", A.ne[1], " rows of ", A.ne[0], " columns");
    }
    // Left solves: B is n rows of k (ggml's b->ne[0] = k, ne[1] = n); right solves: k rows of n.
    const std::int64_t b_rows = opt.left ? B.ne[1] : B.ne[0];
    const std::int64_t k = opt.left ? B.ne[0] : B.ne[1];
    if (b_rows != n) {
        fail("qk::solve_tri (", tri_variant_name(opt), "): A is ", n, " x ", n, " but B is ", B.ne[1], " rows of ", B.ne[0], " columns; ",
             opt.left ? "a left solve needs B to have n rows" : "a right solve needs B rows of n columns");
    }
    for (std::size_t d = 0; d < 4; ++d) {
        if (X.ne[d] != B.ne[d]) {
            fail("qk::solve_tri: X.ne[", d, "] is ", X.ne[d], " but B.ne[", d, "] is ", B.ne[d], "; X must have B's shape");
        }
    }
    for (std::size_t d = 2; d < 4; ++d) {
        if (B.ne[d] % A.ne[d] != 0) {
            fail("qk::solve_tri: B.ne[", d, "] is ", B.ne[d], ", not a multiple of A.ne[", d, "] = ", A.ne[d],
                 "; A's batches are broadcast over B's");
        }
    }
    constexpr auto too_many = std::int64_t{1} << 41;
    check_tri_size(n, k, B.ne[3] > too_many / B.ne[2] ? too_many : B.ne[2] * B.ne[3]);
    if (!opt.unit) {
        const std::int64_t diagonal_step = (A.nb[0] + A.nb[1]) / static_cast<std::int64_t>(sizeof(T));
        for (std::int64_t i3 = 0; i3 < A.ne[3]; ++i3) {
            for (std::int64_t i2 = 0; i2 < A.ne[2]; ++i2) {
                const T* diagonal = &A.at(0, 0, i2, i3);
                for (std::int64_t i = 0; i < n; ++i) {
                    if (diagonal[i * diagonal_step] == T(0)) {
                        fail("qk::solve_tri: A has a zero on its diagonal at batch ", i2 + i3 * A.ne[2], " (", i2, ", ", i3, "), row ", i,
                             "; the system is singular (tri_options::unit ignores the stored diagonal)");
                    }
                }
            }
        }
    }
    return {n,
            k,
            B.ne[2],
            B.ne[3],
            B.ne[2] / A.ne[2],
            B.ne[3] / A.ne[3],
            opt.left ? !opt.lower : opt.lower,
            !opt.left,
            opt.unit};
}

// 64-byte aligned scratch, so that rows of a packed tile never straddle cache lines. Allocated by
// the aligned operator new, as all of qkern's memory is, so that a program's replacement of it sees
// this too (the allocation-failure tests do).
template <class T>
struct aligned_64_allocator {
    using value_type = T;
    aligned_64_allocator() = default;
    template <class U>
    explicit aligned_64_allocator(const aligned_64_allocator<U>&) noexcept
    {
    }
    [[nodiscard]] T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
    void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{64}); }
    friend bool operator==(const aligned_64_allocator&, const aligned_64_allocator&) = default;
};

template <class T>
using solve_tri_buffer = std::vector<T, aligned_64_allocator<T>>;

// Solves work items (a batch and a group of its column tiles) one after another, keeping the
// prepared diagonal of the last batch of A for the next item that uses the same one. What it does
// per item counts: an n = k = 16 solve is a few hundred cycles.
template <class T, class Simd>
class tri_worker {
    using shape = kernels::solve_tri_detail::tile_shape<T, Simd>;
    using lanes = kernels::solve_tri_detail::lanes<T, Simd>;
    static constexpr std::size_t NR = shape::columns;
    static constexpr std::size_t W = lanes::width;

public:
    // The column tiles of k right-hand sides: wide ones of NR columns, then narrow ones of W
    // (one vector) for the rest, the last of them partial when W does not divide k.
    [[nodiscard]] static constexpr std::size_t tiles(std::size_t k) noexcept { return k / NR + (k % NR + W - 1) / W; }

    tri_worker(const tensor_view<const T>& A, const tensor_view<const T>& B, const tensor_view<T>& X, const tri_problem& p,
               std::size_t tiles_per_item)
        : A_(A), B_(B), X_(X), p_(p), n_(static_cast<std::size_t>(p.n)), k_(static_cast<std::size_t>(p.k)), tiles_total_(tiles(k_)),
          tiles_per_item_(tiles_per_item), diag_((n_ + W - 1) / W * W, T(1)), tile_(n_ * (k_ < NR ? W : NR))
    {
    }

    // Solves items [first, last): item i is group i % groups of batch i / groups, and batch q is
    // (q % batch2, q / batch2); divided once here, then counted.
    void solve(std::size_t first, std::size_t last)
    {
        const std::size_t groups = (tiles_total_ + tiles_per_item_ - 1) / tiles_per_item_;
        std::size_t group = first % groups;
        const auto batch = static_cast<std::int64_t>(first / groups);
        std::int64_t b2 = batch % p_.batch2;
        std::int64_t b3 = batch / p_.batch2;
        for (std::size_t item = first; item < last; ++item) {
            solve(b2, b3, group * tiles_per_item_);
            if (++group == groups) {
                group = 0;
                if (++b2 == p_.batch2) {
                    b2 = 0;
                    ++b3;
                }
            }
        }
    }

private:
    // Tiles [first_tile, first_tile + tiles_per_item) of batch (b2, b3).
    void solve(std::int64_t b2, std::int64_t b3, std::size_t first_tile)
    {
        const std::size_t last_tile = std::min(first_tile + tiles_per_item_, tiles_total_);
        // (Without broadcasting, the usual case, no 64-bit division per item.)
        const std::int64_t a2 = p_.repeat2 == 1 ? b2 : b2 / p_.repeat2;
        const std::int64_t a3 = p_.repeat3 == 1 ? b3 : b3 / p_.repeat3;
        if (a2 != a2_ || a3 != a3_) {
            prepare_a(a2, a3);
        }
        const canonical<const T> b = map_b(B_, b2, b3);
        const canonical<T> x = map_b(X_, b2, b3);
        // Rows of B and X with unit column steps (left solves on row-major data) are solved where
        // they lie; other layouts, and the last narrow tile when W does not divide k, go through a
        // packed copy.
        const bool in_place = b.column_step == 1 && x.column_step == 1;
        const std::size_t wide_tiles = k_ / NR;
        for (std::size_t t = first_tile; t < last_tile; ++t) {
            const bool wide = t < wide_tiles;
            const std::size_t columns = wide ? NR : W;
            const std::size_t c0 = wide ? t * NR : wide_tiles * NR + (t - wide_tiles) * W;
            const std::size_t width = std::min(columns, k_ - c0);
            if (in_place && width == columns) {
                solve(wide, {&b(0, c0), b.row_step, &x(0, c0), x.row_step});
                continue;
            }
            if (width < columns) {
                std::fill_n(tile_.begin(), n_ * columns, T(0)); // the columns past k
            }
            copy_tile(b, c0, width, columns);
            solve(wide, {tile_.data(), static_cast<std::ptrdiff_t>(columns), tile_.data(), static_cast<std::ptrdiff_t>(columns)});
            copy_tile(x, c0, width, columns);
        }
    }

    // One batch of A, B or X in canonical coordinates: element (i, j) is origin[i * row_step +
    // j * column_step]. Reversal makes the steps negative from the far corner; transposition
    // swaps them.
    template <class U>
    struct canonical {
        U* origin;
        std::int64_t row_step;
        std::int64_t column_step;
        [[nodiscard]] U& operator()(std::size_t i, std::size_t j) const noexcept
        {
            return origin[static_cast<std::int64_t>(i) * row_step + static_cast<std::int64_t>(j) * column_step];
        }
    };

    // Canonical rows of `view` run along its dimension `along` (0: columns, 1: rows), reversed if
    // the problem is; canonical columns along the other one, in order unless `both_reversed`.
    template <class U>
    [[nodiscard]] canonical<U> map(const tensor_view<U>& view, std::int64_t i2, std::int64_t i3, std::size_t along, bool both_reversed) const noexcept
    {
        constexpr auto size = static_cast<std::int64_t>(sizeof(T));
        const std::int64_t row_step = view.nb[along] / size;
        const std::int64_t column_step = view.nb[1 - along] / size;
        const std::int64_t last = p_.n - 1;
        U* origin = &view.at(0, 0, i2, i3);
        if (p_.reversed) {
            origin += last * row_step + (both_reversed ? last * column_step : 0);
            return {origin, -row_step, both_reversed ? -column_step : column_step};
        }
        return {origin, row_step, column_step};
    }

    // L'[i][j] for j <= i < n: A's rows in canonical order (its columns for right solves).
    [[nodiscard]] canonical<const T> map_a(std::int64_t a2, std::int64_t a3) const noexcept
    {
        return map(A_, a2, a3, p_.transposed ? 0 : 1, true);
    }

    // B'[i][c] and X'[i][c]: canonical row i, right-hand side c.
    template <class U>
    [[nodiscard]] canonical<U> map_b(const tensor_view<U>& view, std::int64_t b2, std::int64_t b3) const noexcept
    {
        return map(view, b2, b3, p_.transposed ? 0 : 1, false);
    }

    // One element between the tile and the caller: into the tile from B (const U), out to X.
    template <class U>
    static void transfer(T& packed, U& caller) noexcept
    {
        if constexpr (std::is_const_v<U>) {
            packed = caller;
        } else {
            caller = packed;
        }
    }

    // Moves columns [c0, c0 + width) of every row between the tile (rows of `columns`) and the
    // caller's matrix, walking it along whichever of its dimensions is contiguous (for right
    // solves, B's rows are the tile's columns).
    template <class U>
    void copy_tile(const canonical<U>& m, std::size_t c0, std::size_t width, std::size_t columns)
    {
        if (std::abs(m.row_step) == 1 && W > 1) {
            transpose_tile(m, c0, width, columns);
        } else if (std::abs(m.row_step) < std::abs(m.column_step)) {
            for (std::size_t c = 0; c < width; ++c) {
                for (std::size_t i = 0; i < n_; ++i) {
                    transfer(tile_[i * columns + c], m(i, c0 + c));
                }
            }
        } else {
            for (std::size_t i = 0; i < n_; ++i) {
                for (std::size_t c = 0; c < width; ++c) {
                    transfer(tile_[i * columns + c], m(i, c0 + c));
                }
            }
        }
    }

    // copy_tile where the caller's canonical rows are adjacent elements (right solves): whole
    // width x width blocks move as vectors through a transpose, the remainders one by one.
    // Reversed rows (row_step -1) are loaded from their lowest address and land in reverse.
    template <class U>
    void transpose_tile(const canonical<U>& m, std::size_t c0, std::size_t width, std::size_t columns)
    {
        constexpr bool to_tile = std::is_const_v<U>;
        const bool reversed = m.row_step < 0;
        const std::size_t rows = n_ - n_ % W;
        const std::size_t whole = width - width % W;
        typename lanes::vector block[W];
        for (std::size_t cb = 0; cb < whole; cb += W) {
            for (std::size_t i0 = 0; i0 < rows; i0 += W) {
                // Vector l of the caller's side holds caller row (c0 + cb + l), tile rows i0 .. i0 + W - 1.
                const std::size_t lowest = reversed ? i0 + W - 1 : i0;
                const auto tile_row = [&](std::size_t l) { return tile_.data() + (reversed ? i0 + W - 1 - l : i0 + l) * columns + cb; };
                if constexpr (to_tile) {
                    for (std::size_t l = 0; l < W; ++l) {
                        block[l] = lanes::load(&m(lowest, c0 + cb + l));
                    }
                    lanes::transpose(block);
                    for (std::size_t l = 0; l < W; ++l) {
                        lanes::store(tile_row(l), block[l]);
                    }
                } else {
                    for (std::size_t l = 0; l < W; ++l) {
                        block[l] = lanes::load(tile_row(l));
                    }
                    lanes::transpose(block);
                    for (std::size_t l = 0; l < W; ++l) {
                        lanes::store(&m(lowest, c0 + cb + l), block[l]);
                    }
                }
            }
        }
        for (std::size_t c = 0; c < width; ++c) {
            for (std::size_t i = c < whole ? rows : 0; i < n_; ++i) {
                transfer(tile_[i * columns + c], m(i, c0 + c));
            }
        }
    }

    // The diagonal of A's batch (a2, a3), ready for the kernel, in diag_: its first n elements
    // (the rest, padding to whole vectors, stays one). A unit diagonal is the ones diag_ starts as.
    void prepare_a(std::int64_t a2, std::int64_t a3)
    {
        a_ = map_a(a2, a3);
        a2_ = a2;
        a3_ = a3;
        if (p_.unit) {
            return;
        }
        // Multiplying by reciprocals is faster than dividing, and within an ulp of it wherever
        // both the diagonal and its reciprocal are normal numbers; elsewhere (tiny, huge,
        // infinite or NaN pivots) divide, as IEEE arithmetic on the stored values would.
        // The reciprocal of a normal d is normal exactly when |d| <= 1 / (the least normal number).
        // (One comparison pair, false for zero, subnormal, infinite and NaN d.)
        constexpr T smallest_pivot = std::numeric_limits<T>::min();
        constexpr T largest_pivot = T(1) / smallest_pivot;
        const T* d = &a_(0, 0);
        const std::ptrdiff_t step = a_.row_step + a_.column_step;
        for (std::size_t i = 0; i < n_; ++i, d += step) {
            diag_[i] = *d;
        }
        bool all_safe = true;
        for (std::size_t i = 0; i < diag_.size(); i += W) {
            all_safe &= lanes::within(lanes::load(&diag_[i]), smallest_pivot, largest_pivot);
        }
        divide_ = !all_safe;
        if (!divide_) {
            for (std::size_t i = 0; i < diag_.size(); i += W) {
                lanes::store(&diag_[i], lanes::divide(lanes::splat(T(1)), lanes::load(&diag_[i])));
            }
        }
    }

    void solve(bool wide, const kernels::solve_tri_detail::tile_rows<T>& tile) const noexcept
    {
        namespace kernel = kernels::solve_tri_detail;
        const kernel::lower_matrix<T> lower{a_.origin, a_.row_step, a_.column_step, diag_.data(), n_};
        if (wide) {
            if (divide_) {
                kernel::solve_tile<T, Simd, shape::rows, shape::vectors, true>(lower, tile);
            } else {
                kernel::solve_tile<T, Simd, shape::rows, shape::vectors, false>(lower, tile);
            }
        } else if (divide_) {
            kernel::solve_tile<T, Simd, shape::narrow_rows, 1, true>(lower, tile);
        } else {
            kernel::solve_tile<T, Simd, shape::narrow_rows, 1, false>(lower, tile);
        }
    }

    tensor_view<const T> A_;
    tensor_view<const T> B_;
    tensor_view<T> X_;
    tri_problem p_;
    std::size_t n_;
    std::size_t k_;
    std::size_t tiles_total_;
    std::size_t tiles_per_item_;
    solve_tri_buffer<T> diag_;
    solve_tri_buffer<T> tile_;
    canonical<const T> a_{};
    std::int64_t a2_ = -1;
    std::int64_t a3_ = -1;
    bool divide_ = false;
};

// Runs tasks one after another on the calling thread: what solve_tri_views is given when no
// thread pool is (a pool offers the same two members).
struct serial_tasks {
    [[nodiscard]] static constexpr std::size_t size() noexcept { return 1; }
    template <class F>
    static void run(std::size_t tasks, F&& f)
    {
        for (std::size_t task = 0; task < tasks; ++task) {
            f(task);
        }
    }
};

// Tasks is serial_tasks or a thread pool: size() threads that run(tasks, f) calls f(task) on.
template <class Arch, class T, class Tasks>
void solve_tri_views(const tensor_view<const T>& A, const tensor_view<const T>& B, const tensor_view<T>& X, const tri_options& opt,
                     Tasks& pool)
{
    using simd = arch::xsimd_of<Arch>;
    const tri_problem p = check_solve_tri<T>(A, B, X, opt);

    // Work items are (batch, group of column tiles): whole batches when one thread runs them (so
    // each A's diagonal is prepared once), else fine enough that every thread gets several items.
    const std::size_t batches = static_cast<std::size_t>(p.batch2 * p.batch3);
    const std::size_t tiles = tri_worker<T, simd>::tiles(static_cast<std::size_t>(p.k));
    const std::size_t threads = pool.size();
    std::size_t tiles_per_item = tiles;
    if (threads > 1) {
        const std::size_t wanted_items = 4 * threads;
        tiles_per_item = std::clamp(tiles * batches / wanted_items, std::size_t{1}, tiles);
    }
    const std::size_t items = batches * ((tiles + tiles_per_item - 1) / tiles_per_item);
    const std::size_t tasks = std::min(items, threads == 1 ? std::size_t{1} : 4 * threads);

    // Every worker's buffers are allocated before any task writes X, so that running out of
    // memory leaves X (which may be B) as it was: one worker per thread, as no more tasks than
    // threads run at once, each task taking a worker no other running task holds. Which worker
    // solves an item does not change its result.
    const std::size_t worker_count = std::min(tasks, threads);
    std::vector<tri_worker<T, simd>> workers;
    workers.reserve(worker_count);
    for (std::size_t i = 0; i < worker_count; ++i) {
        workers.emplace_back(A, B, X, p, tiles_per_item);
    }
    if (tasks == 1) {
        workers[0].solve(0, items);
        return;
    }
    const std::unique_ptr<std::atomic<bool>[]> taken(new std::atomic<bool>[worker_count]());
    pool.run(tasks, [&](std::size_t task) {
        std::size_t w = 0;
        while (taken[w].exchange(true, std::memory_order_acquire)) {
            w = (w + 1) % worker_count;
        }
        workers[w].solve(task * items / tasks, (task + 1) * items / tasks);
        taken[w].store(false, std::memory_order_release);
    });
}

// The contiguous entry points: their sizes are checked before views (and byte strides) are built.
template <class Arch, class T, class Tasks>
void solve_tri_contiguous(const T* A, const T* B, T* X, std::int64_t n, std::int64_t k, std::int64_t batch, const tri_options& opt,
                          Tasks& pool)
{
    check_tri_sizes(n, k, batch);
    // B and X hold n rows of k for left solves, k rows of n for right ones.
    const std::int64_t columns = opt.left ? k : n;
    const std::int64_t rows = opt.left ? n : k;
    solve_tri_views<Arch, T>(tensor_view<const T>::contiguous(A, n, n, batch), tensor_view<const T>::contiguous(B, columns, rows, batch),
                             tensor_view<T>::contiguous(X, columns, rows, batch), opt, pool);
}

} // namespace detail

// Strided views, ggml's layout: A is ne = {n, n, a2, a3}; B and X are {k, n, b2, b3} for left
// solves and {n, k, b2, b3} for right solves, where b2 and b3 are multiples of a2 and a3 (A's
// batch i is used for B's batches i * b2 / a2 and up, as ggml broadcasts). X may be B itself (the
// same data and strides); it must not otherwise overlap A or B.
template <class Arch = arch::solve_tri_native, solve_tri_value T>
void solve_tri(std::type_identity_t<tensor_view<const T>> A, std::type_identity_t<tensor_view<const T>> B, tensor_view<T> X,
               tri_options opt = {})
try {
    detail::serial_tasks serial;
    detail::solve_tri_views<Arch, T>(A, B, X, opt, serial);
} catch (...) {
    qk::detail::rethrow_as_error("qk::solve_tri");
}

// Contiguous buffers, ggml's layout: A is [batch][n][n] row-major; B and X are [batch][n][k] for
// left solves and [batch][k][n] for right solves. X may equal B (an in-place solve).
template <class Arch = arch::solve_tri_native, solve_tri_value T>
void solve_tri(const T* A, const T* B, T* X, std::int64_t n, std::int64_t k, std::int64_t batch, tri_options opt = {})
try {
    detail::serial_tasks serial;
    detail::solve_tri_contiguous<Arch>(A, B, X, n, k, batch, opt, serial);
} catch (...) {
    qk::detail::rethrow_as_error("qk::solve_tri");
}

} // namespace qk
