// qk::backend::metal::context: the operations of qk::backend::cpu::context on an Apple GPU
// (mat-vec on resident weights, solve_tri, batched sampling with the CPU chain's tokens), built on
// device.hpp and the kernels of shaders/*.metal. Apple platforms only (metal.hpp says so
// elsewhere); the sampling plan and its double-precision finish are the portable sampling_host.hpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "../context.hpp"
#include "../../kernels/e8m0.hpp"
#include "../../kernels/solve_tri.hpp"
#include "../../sampling/chain.hpp"
#include "../gpu/format_index.hpp"
#include "../gpu/matrix.hpp"
#include "../gpu/sample_checks.hpp"
#include "../gpu/solve_tri_checks.hpp"
#include "../gpu/workspace.hpp"
#include "device.hpp"
#include "kernels.hpp"
#include "sampling_host.hpp"

namespace qk::backend::metal {

// Weights resident in shared memory: rows of blocks, their GGUF bytes as they are.
template <class Block>
using matrix = gpu::matrix<Block, buffer>;

namespace detail {

// SIMD-groups of 32 per threadgroup for mat-vec (one row each) and solve_tri (one column each).
inline constexpr std::uint32_t simdgroups = 4;
inline constexpr std::uint32_t simd_width = 32;
// gemm's columns per dispatch: the grid's height, kept within the 65535 threadgroups per dimension
// that every Metal GPU family allows.
inline constexpr std::size_t max_grid_height = 65535;
// solve_tri stages rows of A through 32 KiB of threadgroup memory: n * rows floats.
inline constexpr std::uint32_t solve_tri_stage_floats = 8192;

// solve_tri.metal's limits: a row of A fits the stage, offsets within a batch are 32-bit (n * n,
// n * k), and the batch is the grid's height.
inline constexpr gpu::solve_tri_limits solve_tri_kernel_limits{.max_n = solve_tri_stage_floats,
                                                               .max_batch_values = std::int64_t{1} << 31,
                                                               .max_batch = 65535,
                                                               .max_values = gpu::no_limit,
                                                               .in_words = "n <= 8192, n * k <= 2^31, batch <= 65535"};

} // namespace detail

// One context per device; its operations lock it for the buffers they reuse.
class context {
public:
    template <class Block>
    using matrix_type = matrix<Block>;

    explicit context(int index = -1) : device_(index)
    {
        table_ = device_.make_buffer(sizeof(e8m0_half_table));
        std::memcpy(table_.contents(), e8m0_half_table.data(), sizeof(e8m0_half_table));
    }

    [[nodiscard]] std::string name() const { return "metal: " + device_.name(); }
    [[nodiscard]] const device& gpu() const noexcept { return device_; }

    template <class Block>
    [[nodiscard]] matrix<Block> upload(std::span<const Block> w, std::size_t rows, std::size_t cols) const
    {
        return gpu::make_matrix<Block>("qk::backend::metal::upload", w, rows, cols, [this](std::span<const std::byte> bytes) {
            buffer weights = device_.make_buffer(bytes.size());
            std::memcpy(weights.contents(), bytes.data(), bytes.size());
            return weights;
        });
    }

    // y = W·x with float x (not quantized, unlike the CPU's gemv).
    template <class Block>
    void gemv(const matrix<Block>& w, std::span<const float> x, std::span<float> y)
    {
        gpu::check_gemv_shape("qk::backend::metal::gemv", w, x.size(), y.size());
        const std::lock_guard lock(mutex_);
        run_gemv(w, 1, x, y);
    }

    // Y = W·X for `columns` float columns (x[c * cols + i], y[c * rows + r], as the CPU's gemm),
    // in one dispatch of the mat-vec kernel over all columns (several where they exceed the grid
    // or the device's largest buffer), so each column of y equals gemv's result for it bit for
    // bit. The shapes are checked before anything runs.
    template <class Block>
    void gemm(const matrix<Block>& w, std::size_t columns, std::span<const float> x, std::span<float> y)
    {
        gpu::check_gemm_shape("qk::backend::metal::gemm", w, columns, x.size(), y.size());
        const std::lock_guard lock(mutex_);
        const std::size_t longest = std::max<std::size_t>({w.rows(), w.cols(), 1});
        const std::size_t by_buffer = device_.max_buffer_bytes() / sizeof(float) / longest;
        const std::size_t batch = std::max<std::size_t>(1, std::min({columns, by_buffer, detail::max_grid_height}));
        for (std::size_t first = 0; first < columns; first += batch) {
            const std::size_t n = std::min(batch, columns - first);
            run_gemv(w, n, x.subspan(first * w.cols(), n * w.cols()), y.subspan(first * w.rows(), n * w.rows()));
        }
    }

    // qk::solve_tri's contiguous overload (float): the same checks, raised before anything runs.
    void solve_tri(const float* A, const float* B, float* X, std::int64_t n, std::int64_t k, std::int64_t batch, tri_options opt = {})
    {
        gpu::check_solve_tri("qk::backend::metal::solve_tri", A, B, X, n, k, batch, opt, detail::solve_tri_kernel_limits);
        const std::lock_guard lock(mutex_);
        const auto a_bytes = static_cast<std::size_t>(n * n * batch) * sizeof(float);
        const auto b_bytes = static_cast<std::size_t>(n * k * batch) * sizeof(float);
        const buffer& ab = grow(a_, a_bytes);
        const buffer& bb = grow(b_, b_bytes);
        const buffer& xb = grow(x_solve_, b_bytes);
        std::memcpy(ab.contents(), A, a_bytes);
        std::memcpy(bb.contents(), B, b_bytes);
        const auto un = static_cast<std::uint32_t>(n);
        const std::uint32_t rows = std::min<std::uint32_t>(un, detail::solve_tri_stage_floats / un);
        const std::vector<constant_value> constants{
            {0, constant_type::uint32, detail::simdgroups},
            {1, constant_type::uint32, un},
            {2, constant_type::uint32, static_cast<std::uint32_t>(k)},
            {3, constant_type::boolean, opt.left ? 1u : 0u},
            {4, constant_type::boolean, opt.lower ? 1u : 0u},
            {5, constant_type::boolean, opt.unit ? 1u : 0u},
            {6, constant_type::uint32, rows},
        };
        const std::vector<argument> args{{&ab, {}}, {&bb, {}}, {&xb, {}}, {nullptr, {static_cast<std::uint32_t>(batch)}}};
        dispatch_shape shape;
        shape.groups_x = static_cast<std::uint32_t>((k + detail::simdgroups - 1) / detail::simdgroups);
        shape.groups_y = static_cast<std::uint32_t>(batch);
        shape.threads_per_group = detail::simd_width * detail::simdgroups;
        shape.threadgroup_memory_bytes = (rows * un * 4 + 15) / 16 * 16;
        device_.run(kernels::solve_tri, constants, args, shape);
        std::memcpy(X, xb.contents(), b_bytes);
    }

    // As qk::backend::cpu::context::sample for chains of logit_bias, temp, top_k, then greedy,
    // dist or adaptive_p: the same tokens. Errors leave every chain untouched.
    void sample(std::span<const float> logits, std::size_t n_seq, std::size_t n_vocab, std::span<sampling::chain> chains,
                std::span<const std::uint8_t> active, std::span<std::int32_t> tokens)
    {
        namespace mh = detail::sampling;
        gpu::check_sample_arguments("qk::backend::metal::sample", logits, n_seq, n_vocab, chains, active, tokens);
        const auto is_active = [&](std::size_t r) { return active.empty() || active[r] != 0; };
        std::vector<mh::row_plan> plans(n_seq);
        std::vector<mh::drawing> drawers(n_seq);
        for (std::size_t r = 0; r < n_seq; ++r) {
            if (is_active(r)) {
                plans[r] = mh::plan_chain(chains[r], r, n_vocab, capacity, drawers[r]);
            }
        }
        const std::lock_guard lock(mutex_);
        const mh::records records = mh::encode(plans);
        const std::size_t chunks = sampling::detail::chunk_count(n_vocab);
        const buffer& input = grow(logits_, logits.size_bytes());
        const buffer& work = grow(work_, logits.size_bytes());
        const buffer& rows = grow(rows_, records.rows.size() * 4);
        const buffer& ops = grow(ops_, records.ops.size() * 4);
        const buffer& biases = grow(biases_, records.biases.size() * 4);
        const buffer& results = grow(results_, n_seq * mh::result_words * 4);
        const buffer& exps = grow(exps_, logits.size_bytes());
        const buffer& lists = grow(lists_, n_seq * capacity * mh::list_words * 4);
        std::memcpy(input.contents(), logits.data(), logits.size_bytes());
        std::memcpy(rows.contents(), records.rows.data(), records.rows.size() * 4);
        std::memcpy(ops.contents(), records.ops.data(), records.ops.size() * 4);
        std::memcpy(biases.contents(), records.biases.data(), records.biases.size() * 4);
        std::memset(results.contents(), 0, n_seq * mh::result_words * 4);
        const bool copied = records.stages > 0;
        const std::vector<constant_value> constants{{0, constant_type::uint32, capacity}};
        for (const mh::dispatch& d : mh::dispatches(records, n_seq, n_vocab, mh::mode::sample, threads, capacity)) {
            const std::vector<argument> args{
                {nullptr, {static_cast<std::uint32_t>(n_seq), static_cast<std::uint32_t>(n_vocab), static_cast<std::uint32_t>(chunks), d.param}},
                {copied ? &work : &input, {}},
                {&rows, {}},
                {&ops, {}},
                {&biases, {}},
                {&results, {}},
                {&results, {}}, // buffer 6 is read by no kernel (the chunk sums are the host's): a placeholder
                {d.what == mh::kernel::transform && d.param == mh::all_rows ? &input : &exps, {}},
                {&lists, {}},
            };
            dispatch_shape shape;
            shape.groups_x = d.groups_x;
            shape.groups_y = d.groups_y;
            shape.threads_per_group = d.threads;
            shape.threadgroup_memory_bytes = d.threadgroup_bytes;
            device_.run(kernel_of(d.what), d.what == mh::kernel::top_k ? std::span<const constant_value>(constants)
                                                                       : std::span<const constant_value>(),
                        args, shape);
        }
        const auto* result_words = static_cast<const std::uint32_t*>(results.contents());
        const auto* exp_values = static_cast<const float*>(exps.contents());
        const auto* list_entries = static_cast<const sampling::token_data*>(lists.contents());
        const auto* row_values = static_cast<const float*>((copied ? work : input).contents());
        std::vector<sampling::adaptive_p::choice> picked(n_seq, {-1, 0.0f});
        for (std::size_t r = 0; r < n_seq; ++r) {
            if (is_active(r)) {
                const std::span<const std::uint32_t> result(result_words + r * mh::result_words, mh::result_words);
                const std::size_t listed = std::min<std::size_t>(capacity, result[mh::list_size]);
                picked[r] = mh::selection_of(plans[r], r, result, {exp_values + r * n_vocab, n_vocab}, {list_entries + r * capacity, listed},
                                             {row_values + r * n_vocab, n_vocab});
            }
        }
        for (std::size_t r = 0; r < n_seq; ++r) {
            tokens[r] = picked[r].token;
            if (is_active(r)) {
                drawers[r].commit(picked[r].token, picked[r].p);
                chains[r].accept(picked[r].token);
            }
        }
    }

private:
    // The largest top-k list, and threads per sampling threadgroup: top_k's threadgroup memory is
    // 4 (256 + 3 * 2048 + 2 * 256 + 4) = 27664 bytes, within every Apple GPU's 32 KiB.
    static constexpr std::uint32_t capacity = detail::sampling::max_list_capacity;
    static constexpr std::uint32_t threads = 256;

    static const kernel_info& kernel_of(detail::sampling::kernel k) noexcept
    {
        switch (k) {
        case detail::sampling::kernel::transform: return kernels::sampling_transform;
        case detail::sampling::kernel::argmax: return kernels::sampling_argmax;
        case detail::sampling::kernel::chunks: return kernels::sampling_chunks;
        case detail::sampling::kernel::scale: return kernels::sampling_scale;
        case detail::sampling::kernel::top_k: break;
        }
        return kernels::sampling_top_k;
    }

    const buffer& grow(buffer& b, std::size_t bytes)
    {
        return gpu::grow(b, bytes, [this](std::size_t n) { return device_.make_buffer(n); });
    }

    // gemv.metal over `columns` columns (x and y checked by the caller; the lock held).
    template <class Block>
    void run_gemv(const matrix<Block>& w, std::size_t columns, std::span<const float> x, std::span<float> y)
    {
        const buffer& xb = grow(x_, x.size_bytes());
        const buffer& yb = grow(y_, y.size_bytes());
        std::memcpy(xb.contents(), x.data(), x.size_bytes());
        const auto rows = static_cast<std::uint32_t>(w.rows());
        const std::vector<argument> args{
            {&w.weights(), {}},
            {&xb, {}},
            {&yb, {}},
            {nullptr, {rows, static_cast<std::uint32_t>(w.blocks_per_row())}},
            {&table_, {}},
        };
        dispatch_shape shape;
        shape.groups_x = (rows + detail::simdgroups - 1) / detail::simdgroups;
        shape.groups_y = static_cast<std::uint32_t>(columns);
        shape.threads_per_group = detail::simd_width * detail::simdgroups;
        device_.run(*kernels::gemv[gpu::format_index<Block>], {}, args, shape);
        std::memcpy(y.data(), yb.contents(), y.size_bytes());
    }

    device device_;
    std::mutex mutex_;
    buffer table_;
    buffer x_, y_, a_, b_, x_solve_;
    buffer logits_, work_, rows_, ops_, biases_, results_, exps_, lists_;
};

static_assert(backend::context<context>, "every backend's context offers the operations of qk::backend::context");

} // namespace qk::backend::metal
