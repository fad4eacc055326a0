// qk::backend::cpu::context: the operations every qkern backend offers (mat-vec on resident
// weights, solve_tri, batched sampling), and gemm on resident weights, run on this CPU's threads.
// qk::backend::vulkan::context has the same members, so engine code written against one compiles
// against the other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "../context.hpp"
#include "../../kernels/dispatch.hpp"
#include "../../kernels/large_buffer.hpp"
#include "gemv.hpp"
#include "packed_gemm.hpp"
#include "sample_batch.hpp"
#include "solve_tri.hpp"
#include "thread_pool.hpp"

namespace qk::backend::cpu {

// Weights as the CPU reads them, in the backend's own copy: once uploaded, the caller's blocks may
// be released. Where the running CPU has tile kernels (kernels::has_tile_kernels) the copy is a
// qk::packed_matrix, which gemv and gemm run on; elsewhere it is the GGUF rows as given, which
// qk::gemv and qk::gemm run on. Either way one copy, never both.
template <class Block>
class matrix {
public:
    matrix(std::span<const Block> w, std::size_t rows, std::size_t cols, bool pack) : rows_(rows), cols_(cols)
    {
        if (pack) {
            packed_ = packed_matrix<Block>(w, rows, cols);
        } else {
            // In a large array, as packed weights are: huge pages stream faster from memory.
            plain_ = qk::detail::large_array<Block>(w);
        }
    }
    [[nodiscard]] std::size_t rows() const noexcept { return rows_; }
    [[nodiscard]] std::size_t cols() const noexcept { return cols_; }
    [[nodiscard]] bool is_packed() const noexcept { return plain_.size() == 0 && packed_.bytes() != 0; }
    // The packed copy (empty unless is_packed()), and the plain rows (empty if is_packed()).
    [[nodiscard]] const packed_matrix<Block>& packed() const noexcept { return packed_; }
    [[nodiscard]] std::span<const Block> blocks() const noexcept { return plain_.span(); }

private:
    std::size_t rows_;
    std::size_t cols_;
    packed_matrix<Block> packed_;
    qk::detail::large_array<Block> plain_;
};

class context {
public:
    template <class Block>
    using matrix_type = matrix<Block>;

    // threads counts the calling thread (1: everything runs on the caller).
    explicit context(std::size_t threads = 1) : pool_(threads) {}

    [[nodiscard]] std::string name() const { return "cpu"; }
    [[nodiscard]] thread_pool& pool() noexcept { return pool_; }

    // Copies (and where the CPU has tile kernels, repacks) rows x cols weights given as GGUF
    // rows; the caller's blocks are not used afterwards.
    template <weight_format Block>
    [[nodiscard]] matrix<Block> upload(std::span<const Block> w, std::size_t rows, std::size_t cols) const
    try {
        // The same checks gemv makes, raised here so a bad shape is found at load time.
        (void)detail::check_gemm<Block>(detail::gemm_entry::gemv, w.size(), rows, cols, 1, cols, rows,
                                        std::numeric_limits<std::size_t>::max());
        const bool pack = dispatch([]<class Tag>(Tag) { return kernels::has_tile_kernels<Tag>; });
        return matrix<Block>(w, rows, cols, pack && rows != 0 && cols != 0);
    } catch (...) {
        qk::detail::rethrow_as_error("qk::backend::cpu::context::upload");
    }

    // y = W·x, x quantized to the weight format's activation format (qk::gemv), on the kernels the
    // running CPU does best (qk::dispatch): a portable build loses nothing here.
    template <weight_format Block>
    void gemv(const matrix<Block>& w, std::span<const float> x, std::span<float> y)
    {
        gemm(w, 1, x, y);
    }

    // Y = W·X for `columns` activation columns, column-major as qk::gemm: x[c * cols + i],
    // y[c * rows + r]. Results equal qk::gemm's on the generic tag bit for bit where the weights
    // are packed, and qk::gemm's on the dispatched tag otherwise.
    template <weight_format Block>
    void gemm(const matrix<Block>& w, std::size_t columns, std::span<const float> x, std::span<float> y)
    try {
        if (w.is_packed()) {
            // Packed only where the dispatched tag has tile kernels (upload), so this runs them.
            dispatch([&]<class Tag>(Tag) { qk::gemm<Block, Tag>(w.packed(), columns, x, y, pool_, scratch_); });
            return;
        }
        const auto shape = detail::check_gemm<Block>(columns == 1 ? detail::gemm_entry::gemv : detail::gemm_entry::gemm,
                                                     w.blocks().size(), w.rows(), w.cols(), columns, x.size(), y.size(),
                                                     std::numeric_limits<std::size_t>::max());
        using activation = typename format_traits<Block>::vec_dot_type;
        const std::size_t needed = gemm_scratch_blocks<Block>(w.cols(), shape.columns) * sizeof(activation);
        scratch_.resize(std::max(scratch_.size(), needed));
        auto* quantized = reinterpret_cast<activation*>(scratch_.data());
        dispatch([&]<class Tag>(Tag) { detail::gemm_checked<Block, Tag>(w.blocks().data(), shape, x, y.data(), pool_, quantized); });
    } catch (...) {
        qk::detail::rethrow_as_error("qk::backend::cpu::context::gemm");
    }

    // qk::solve_tri on contiguous buffers (ggml's layout), rows spread over the pool.
    void solve_tri(const float* A, const float* B, float* X, std::int64_t n, std::int64_t k, std::int64_t batch, tri_options opt = {})
    {
        qk::solve_tri(A, B, X, n, k, batch, opt, pool_);
    }

    // One chain per sequence over [n_seq x n_vocab] logits; inactive sequences get token -1.
    void sample(std::span<const float> logits, std::size_t n_seq, std::size_t n_vocab, std::span<sampling::chain> chains,
                std::span<const std::uint8_t> active, std::span<std::int32_t> tokens)
    {
        sampling::sample_batch(pool_, logits, n_seq, n_vocab, chains, active, tokens);
    }

private:
    thread_pool pool_;
    std::vector<std::uint8_t> scratch_; // quantized activations (and panels), reused between calls
};

static_assert(backend::context<context>, "every backend's context offers the operations of qk::backend::context");

} // namespace qk::backend::cpu
