// qk::backend::vulkan::context: the operations of qk::backend::cpu::context (mat-vec on resident
// weights, solve_tri, batched sampling) on one Vulkan device, with the buffers they reuse from
// call to call. Engine code templated on the context type runs on either backend.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>

#include "../context.hpp"
#include "../../kernels/solve_tri.hpp"
#include "../../sampling/chain.hpp"
#include "../gpu/sample_checks.hpp"
#include "device.hpp"
#include "gemv.hpp"
#include "sampling.hpp"
#include "solve_tri.hpp"

namespace qk::backend::vulkan {

// One context per thread, or a shared one: each operation holds the context's lock while it uses
// the reused buffers (the device itself is shared safely either way).
class context {
public:
    template <class Block>
    using matrix_type = matrix<Block>;

    // index < 0: QKERN_VULKAN_DEVICE if set, else the first discrete GPU, else the first device.
    explicit context(int index = -1) : device_(index), gemv_(device_), solve_(device_), sampling_(device_) {}

    [[nodiscard]] std::string name() const { return "vulkan: " + device_.facts().name; }
    [[nodiscard]] const device& gpu() const noexcept { return device_; }

    template <class Block>
    [[nodiscard]] matrix<Block> upload(std::span<const Block> w, std::size_t rows, std::size_t cols) const
    {
        return upload_matrix<Block>(device_, w, rows, cols);
    }

    // y = W·x with float x (not quantized, unlike the CPU's gemv).
    template <class Block>
    void gemv(const matrix<Block>& w, std::span<const float> x, std::span<float> y)
    {
        const std::lock_guard lock(mutex_);
        vulkan::gemv(device_, gemv_, w, x, y);
    }

    // Y = W·X for `columns` float columns (x[c * cols + i], y[c * rows + r], as the CPU's gemm),
    // in one run of the mat-vec kernel over all columns, so each column of y equals gemv's result
    // for it bit for bit. The shapes are checked before anything runs.
    template <class Block>
    void gemm(const matrix<Block>& w, std::size_t columns, std::span<const float> x, std::span<float> y)
    {
        const std::lock_guard lock(mutex_);
        vulkan::gemm(device_, gemv_, w, columns, x, y);
    }

    void solve_tri(const float* A, const float* B, float* X, std::int64_t n, std::int64_t k, std::int64_t batch, tri_options opt = {})
    {
        const std::lock_guard lock(mutex_);
        vulkan::solve_tri(device_, solve_, A, B, X, n, k, batch, opt);
    }

    // As qk::backend::cpu::context::sample, for chains of GPU-capable samplers: the same tokens.
    void sample(std::span<const float> logits, std::size_t n_seq, std::size_t n_vocab, std::span<sampling::chain> chains,
                std::span<const std::uint8_t> active, std::span<std::int32_t> tokens)
    {
        gpu::check_sample_arguments("qk::backend::vulkan::context::sample", logits, n_seq, n_vocab, chains, active, tokens);
        const std::lock_guard lock(mutex_);
        const auto picked = vulkan::sample(device_, sampling_, chains, logits, n_vocab, active);
        std::copy(picked.begin(), picked.end(), tokens.begin());
    }

private:
    device device_;
    std::mutex mutex_;
    gemv_workspace gemv_;
    solve_tri_workspace solve_;
    sampling_workspace sampling_;
};

static_assert(backend::context<context>, "every backend's context offers the operations of qk::backend::context");

} // namespace qk::backend::vulkan
