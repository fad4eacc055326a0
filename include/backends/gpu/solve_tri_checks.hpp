// The argument checks of the GPU backends' solve_tri (qk::solve_tri's contiguous overload, from
// host memory): sizes against the backend's kernel limits, null pointers, and the CPU op's pivot
// scan, all raised as qk::errors naming the public function before anything is uploaded or written.
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>
#include <utility>

#include "../../kernels/error.hpp"
#include "../../kernels/solve_tri.hpp"

namespace qk::backend::gpu {

inline constexpr std::int64_t no_limit = std::numeric_limits<std::int64_t>::max();

// What a backend's solve_tri takes beyond n, k, batch >= 1; the kernels differ, so each backend
// states its own (Vulkan's are the CPU op's).
struct solve_tri_limits {
    std::int64_t max_n;             // the order of A; at most 2^31, so that n * n is computed safely
    std::int64_t max_batch_values;  // n * k: one batch of B
    std::int64_t max_batch;         // batches
    std::int64_t max_values;        // n * n * batch and n * k * batch: all of A, all of B
    std::string_view in_words;      // the limits as the message states them
};

// n, k and batch at least 1 and within `limits`: checked before anything is made of the sizes.
inline void check_solve_tri_sizes(std::string_view op, std::int64_t n, std::int64_t k, std::int64_t batch, const solve_tri_limits& limits)
{
    if (n < 1 || k < 1 || batch < 1) {
        qk::detail::fail(op, ": n = ", n, ", k = ", k, ", batch = ", batch, "; each must be at least 1");
    }
    // Each division bounds the product the next one divides by, so nothing overflows.
    if (n > limits.max_n || k > limits.max_batch_values / n || batch > limits.max_batch || batch > limits.max_values / (n * k) ||
        batch > limits.max_values / (n * n)) {
        qk::detail::fail(op, ": n = ", n, ", k = ", k, ", batch = ", batch, " exceed the supported size (", limits.in_words, ")");
    }
}

// All of solve_tri's checks, in the CPU op's order: sizes, null pointers, then whatever the device
// checks (device_checks(), given sizes that passed), then the pivot scan of A's diagonal unless
// opt.unit, which reads A and so comes last.
template <class DeviceChecks>
void check_solve_tri(std::string_view op, const float* A, const float* B, const float* X, std::int64_t n, std::int64_t k,
                     std::int64_t batch, const qk::tri_options& opt, const solve_tri_limits& limits, DeviceChecks&& device_checks)
{
    check_solve_tri_sizes(op, n, k, batch, limits);
    if (A == nullptr || B == nullptr || X == nullptr) {
        qk::detail::fail(op, ": ", A == nullptr ? "A" : (B == nullptr ? "B" : "X"), " is a null pointer");
    }
    std::forward<DeviceChecks>(device_checks)();
    if (!opt.unit) {
        for (std::int64_t q = 0; q < batch; ++q) {
            for (std::int64_t i = 0; i < n; ++i) {
                if (A[(q * n + i) * n + i] == 0.0f) {
                    qk::detail::fail(op, ": A has a zero on its diagonal at batch ", q, ", row ", i,
                                     "; the system is singular (tri_options::unit ignores the stored diagonal)");
                }
            }
        }
    }
}

inline void check_solve_tri(std::string_view op, const float* A, const float* B, const float* X, std::int64_t n, std::int64_t k,
                            std::int64_t batch, const qk::tri_options& opt, const solve_tri_limits& limits)
{
    check_solve_tri(op, A, B, X, n, k, batch, opt, limits, [] {});
}

} // namespace qk::backend::gpu
