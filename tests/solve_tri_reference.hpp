// A plain double-precision triangular solver and the error bounds that qk::solve_tri's results
// are held to, shared by the main suite and the per-tag suites.
//
// The bounds are the textbook ones for substitution (Higham, Accuracy and Stability of Numerical
// Algorithms, thm. 8.5): the computed X solves (A + dA) X = B with |dA| <= gamma |A|, where
// gamma = m u / (1 - m u), u the unit roundoff and m the number of rounding errors on the way to
// one element: at most n in the sum, one for the reciprocal of the pivot, one for the product
// (m = n + 2). So the residual satisfies |A X - B| <= gamma |A| |X| element by element, and the
// error against the exact solution |X - X*| <= |A^-1| gamma |A| |X|. Both are checked with
// gamma doubled, the only slack, for the double-precision reference's own rounding.
#pragma once

#include <doctest/doctest.h>

#include <kernels/solve_tri.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "inputs.hpp"

namespace qk_test {

// One batch of A as a dense double matrix: the selected triangle, the rest zero, the diagonal one
// if unit.
template <class T>
std::vector<double> dense_triangle(const T* a, std::size_t n, const qk::tri_options& opt)
{
    std::vector<double> m(n * n, 0.0);
    for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t j = 0; j < n; ++j) {
            const bool kept = i == j || (opt.lower ? j < i : j > i);
            if (kept) {
                m[i * n + j] = i == j && opt.unit ? 1.0 : static_cast<double>(a[i * n + j]);
            }
        }
    }
    return m;
}

// Solves M y = c (lower or upper M, dense n x n) in double, in place in c.
inline void substitute(const std::vector<double>& m, std::size_t n, bool lower, std::vector<double>& c)
{
    for (std::size_t step = 0; step < n; ++step) {
        const std::size_t i = lower ? step : n - 1 - step;
        double s = c[i];
        for (std::size_t j = 0; j < n; ++j) {
            if (lower ? j < i : j > i) {
                s -= m[i * n + j] * c[j];
            }
        }
        c[i] = s / m[i * n + i];
    }
}

// The exact-arithmetic solution of one batch, in double: left solves column by column of B,
// right solves (X M = B, i.e. M^T x = b per row of B) row by row.
template <class T>
std::vector<double> reference_solve(const std::vector<double>& m, const T* b, std::size_t n, std::size_t k, const qk::tri_options& opt)
{
    std::vector<double> x(n * k);
    std::vector<double> c(n);
    if (opt.left) {
        for (std::size_t col = 0; col < k; ++col) {
            for (std::size_t i = 0; i < n; ++i) {
                c[i] = b[i * k + col];
            }
            substitute(m, n, opt.lower, c);
            for (std::size_t i = 0; i < n; ++i) {
                x[i * k + col] = c[i];
            }
        }
    } else {
        std::vector<double> mt(n * n);
        for (std::size_t i = 0; i < n; ++i) {
            for (std::size_t j = 0; j < n; ++j) {
                mt[j * n + i] = m[i * n + j];
            }
        }
        for (std::size_t row = 0; row < k; ++row) {
            for (std::size_t i = 0; i < n; ++i) {
                c[i] = b[row * n + i];
            }
            substitute(mt, n, !opt.lower, c);
            for (std::size_t i = 0; i < n; ++i) {
                x[row * n + i] = c[i];
            }
        }
    }
    return x;
}

// |M^-1| by solving against the identity's columns.
inline std::vector<double> abs_inverse(const std::vector<double>& m, std::size_t n, bool lower)
{
    std::vector<double> inv(n * n);
    std::vector<double> c(n);
    for (std::size_t col = 0; col < n; ++col) {
        std::fill(c.begin(), c.end(), 0.0);
        c[col] = 1.0;
        substitute(m, n, lower, c);
        for (std::size_t i = 0; i < n; ++i) {
            inv[i * n + col] = std::abs(c[i]);
        }
    }
    return inv;
}

// Checks one batch of a computed X against the bounds above. Returns the number of elements
// checked (every element of X).
template <class T>
std::size_t check_solution(const T* a, const T* b, const T* x, std::size_t n, std::size_t k, const qk::tri_options& opt)
{
    const std::vector<double> m = dense_triangle(a, n, opt);
    const std::vector<double> exact = reference_solve(m, b, n, k, opt);
    const std::vector<double> inv = abs_inverse(m, n, opt.lower);
    const double u = std::numeric_limits<T>::epsilon() / 2;
    const double steps = static_cast<double>(n + 2);
    const double gamma = 2 * steps * u / (1 - steps * u);
    // Left: R = M X - B and |M| |X|; right: R = X M - B and |X| |M|. Both n x k (left) or k x n.
    const std::size_t rows = opt.left ? n : k;
    const std::size_t cols = opt.left ? k : n;
    std::vector<double> scale(rows * cols, 0.0);
    for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t c = 0; c < cols; ++c) {
            double residual = -static_cast<double>(b[r * cols + c]);
            double size = 0.0;
            for (std::size_t t = 0; t < n; ++t) {
                const double coefficient = opt.left ? m[r * n + t] : m[t * n + c];
                const double value = opt.left ? static_cast<double>(x[t * cols + c]) : static_cast<double>(x[r * cols + t]);
                residual += coefficient * value;
                size += std::abs(coefficient) * std::abs(value);
            }
            scale[r * cols + c] = gamma * size;
            INFO("residual at (", r, ", ", c, ") of an n = ", n, ", k = ", k, " solve");
            REQUIRE(std::abs(residual) <= scale[r * cols + c] + std::numeric_limits<T>::denorm_min());
        }
    }
    // Forward error: |X - X*| <= |M^-1| (gamma |M| |X|) (left), (gamma |X| |M|) |M^-1| (right).
    for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t c = 0; c < cols; ++c) {
            double bound = 0.0;
            for (std::size_t t = 0; t < n; ++t) {
                bound += opt.left ? inv[r * n + t] * scale[t * cols + c] : scale[r * cols + t] * inv[t * n + c];
            }
            const double error = std::abs(static_cast<double>(x[r * cols + c]) - exact[r * cols + c]);
            INFO("element (", r, ", ", c, "): ", static_cast<double>(x[r * cols + c]), " against ", exact[r * cols + c]);
            REQUIRE(error <= bound + std::numeric_limits<T>::denorm_min());
        }
    }
    return rows * cols;
}

} // namespace qk_test
