// OpenBLAS's cblas_strsm and Eigen's triangularView solve for the solve_tri benchmark (peers.hpp).
#include "peers.hpp"

#if QKERN_BENCH_OPENBLAS
#include <cblas.h>
#endif
#if QKERN_BENCH_EIGEN
#include <Eigen/Core>
#endif

namespace qk_bench {

#if QKERN_BENCH_OPENBLAS
void openblas_solve_lower(const float* a, float* x, std::int64_t n, std::int64_t k)
{
    static const bool single_threaded = (openblas_set_num_threads(1), true); // set once, not per call
    (void)single_threaded;
    const auto rows = static_cast<int>(n);
    const auto columns = static_cast<int>(k);
    cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, rows, columns, 1.0f, a, rows, x, columns);
}
#endif

#if QKERN_BENCH_EIGEN
void eigen_solve_lower(const float* a, float* x, std::int64_t n, std::int64_t k)
{
    using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const Eigen::Map<const matrix, Eigen::Aligned64> a_map(a, n, n);
    Eigen::Map<matrix, Eigen::Aligned64> x_map(x, n, k);
    a_map.triangularView<Eigen::Lower>().solveInPlace(x_map);
}
#endif

} // namespace qk_bench
