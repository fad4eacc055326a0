// qk::backend::cpu::context: the operations every qkern backend offers (mat-vec on resident
// weights, solve_tri, batched sampling), run on this CPU's threads. qk::backend::vulkan::context
// has the same members, so engine code written against one compiles against the other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "../context.hpp"
#include "../../kernels/dispatch.hpp"
#include "gemv.hpp"
#include "sample_batch.hpp"
#include "solve_tri.hpp"
#include "thread_pool.hpp"

namespace qk::backend::cpu {

// Weights as the CPU reads them: a view of the caller's blocks (nothing is copied, so the caller
// keeps them alive), with the shape checked once at upload.
template <class Block>
class matrix {
public:
    matrix(std::span<const Block> w, std::size_t rows, std::size_t cols) : w_(w), rows_(rows), cols_(cols) {}
    [[nodiscard]] std::span<const Block> blocks() const noexcept { return w_; }
    [[nodiscard]] std::size_t rows() const noexcept { return rows_; }
    [[nodiscard]] std::size_t cols() const noexcept { return cols_; }

private:
    std::span<const Block> w_;
    std::size_t rows_;
    std::size_t cols_;
};

class context {
public:
    template <class Block>
    using matrix_type = matrix<Block>;

    // threads counts the calling thread (1: everything runs on the caller).
    explicit context(std::size_t threads = 1) : pool_(threads) {}

    [[nodiscard]] std::string name() const { return "cpu"; }
    [[nodiscard]] thread_pool& pool() noexcept { return pool_; }

    template <weight_format Block>
    [[nodiscard]] matrix<Block> upload(std::span<const Block> w, std::size_t rows, std::size_t cols) const
    {
        // The same checks gemv makes, raised here so a bad shape is found at load time.
        (void)detail::check_gemm<Block>(detail::gemm_entry::gemv, w.size(), rows, cols, 1, cols, rows,
                                        std::numeric_limits<std::size_t>::max());
        return matrix<Block>(w, rows, cols);
    }

    // y = W·x, x quantized to the weight format's activation format (qk::gemv), on the kernels the
    // running CPU does best (qk::dispatch): a portable build loses nothing here.
    template <weight_format Block>
    void gemv(const matrix<Block>& w, std::span<const float> x, std::span<float> y)
    {
        dispatch([&]<class Tag>(Tag) { qk::gemv<Block, Tag>(w.blocks(), w.rows(), w.cols(), x, y, pool_); });
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
};

static_assert(backend::context<context>, "every backend's context offers the operations of qk::backend::context");

} // namespace qk::backend::cpu
