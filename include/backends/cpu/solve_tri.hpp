// qk::solve_tri on a CPU thread pool: the overloads of kernels/solve_tri.hpp's entry points that
// take a qk::backend::cpu::thread_pool and spread (batch, column tile) work items over its threads.
// The results are those of the single-threaded call, bit for bit.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../../kernels/solve_tri.hpp"
#include "thread_pool.hpp"

namespace qk {

// Strided views, as the single-threaded overload.
template <class Arch = arch::solve_tri_native, solve_tri_value T>
void solve_tri(std::type_identity_t<tensor_view<const T>> A, std::type_identity_t<tensor_view<const T>> B, tensor_view<T> X,
               tri_options opt, backend::cpu::thread_pool& pool)
try {
    detail::solve_tri_views<Arch, T>(A, B, X, opt, pool);
} catch (...) {
    qk::detail::rethrow_as_error("qk::solve_tri");
}

// Contiguous buffers in ggml's layout, as the single-threaded overload.
template <class Arch = arch::solve_tri_native, solve_tri_value T>
void solve_tri(const T* A, const T* B, T* X, std::int64_t n, std::int64_t k, std::int64_t batch, tri_options opt,
               backend::cpu::thread_pool& pool)
try {
    detail::solve_tri_contiguous<Arch>(A, B, X, n, k, batch, opt, pool);
} catch (...) {
    qk::detail::rethrow_as_error("qk::solve_tri");
}

} // namespace qk
