// The solve_tri benchmark's peers, OpenBLAS and Eigen, behind plain functions: their headers are
// included only by peers.cpp, a translation unit of its own whose third-party warnings cannot fail
// a -Werror build (bench/CMakeLists.txt), while the benchmark itself keeps every warning an error.
#pragma once

#include <cstdint>

namespace qk_bench {

// Each solves A X = B in place (x holds B on entry) for one lower-triangular, non-unit A: row-major
// n x n A and n x k X, 64-byte aligned, on one thread.
void openblas_solve_lower(const float* a, float* x, std::int64_t n, std::int64_t k);
void eigen_solve_lower(const float* a, float* x, std::int64_t n, std::int64_t k);

} // namespace qk_bench
