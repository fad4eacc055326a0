// Consumer test program, built against qkern by find_package, add_subdirectory and pkg-config:
// quantize to Q8_0 and back, check the round-trip error, print a dot product, solve a small
// triangular system, sample greedily. Exits 1 if wrong.
#include <qkern.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

int main()
{
    constexpr std::size_t n = 64; // two Q8_0 blocks of 32 values
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) {
        x[i] = static_cast<float>(i) / 8.0f - 4.0f;
    }

    std::vector<qk::block_q8_0> q(n / 32);
    qk::quantize<qk::block_q8_0>(x, q);
    std::vector<float> y(n);
    qk::dequantize<qk::block_q8_0>(q, y);

    // Q8_0 stores d = amax/127 as a half and rounds x/d to the nearest integer: the error is at most
    // d/2 plus |q| <= 127 times the half's rounding of d (relative 2^-11). amax = 4 here.
    const float d = 4.0f / 127.0f;
    const float tolerance = d * (0.5f + 127.0f / 2048.0f);
    float max_error = 0.0f;
    double sum_squares = 0.0; // in double: far more precise than the float dot it checks
    for (std::size_t i = 0; i < n; ++i) {
        max_error = std::max(max_error, std::abs(y[i] - x[i]));
        sum_squares += static_cast<double>(y[i]) * y[i];
    }

    // dot(q, q) is the same sum: its integer block sums are exact, and scaling and adding two
    // blocks of positive terms takes a few float roundings, so 8 epsilons of the total bound it.
    const float dot = qk::dot<qk::block_q8_0>(q, q);
    const double dot_tolerance = 8.0 * std::numeric_limits<float>::epsilon() * sum_squares;

    std::printf("qkern %d.%d.%d: max |dequantize(quantize(x)) - x| = %g (bound %g), dot = %g (expected %g)\n",
                QKERN_VERSION_MAJOR, QKERN_VERSION_MINOR, QKERN_VERSION_PATCH, max_error, tolerance, dot,
                sum_squares);
    // [2 0; 1 4] X = [2; 9] has X = [1; 2], and every step of the substitution is exact.
    const float a[4] = {2.0f, -99.0f, 1.0f, 4.0f}; // -99: the upper triangle, never read
    const float b[2] = {2.0f, 9.0f};
    float solved[2] = {0.0f, 0.0f};
    qk::solve_tri(a, b, solved, 2, 1, 1);
    std::printf("solve_tri: X = [%g, %g] (expected [1, 2])\n", solved[0], solved[1]);

    // Token 2 has the largest logit; top_k keeps it and greedy selects it.
    const float logits[4] = {0.5f, -1.0f, 3.0f, 2.0f};
    const std::int32_t token = qk::sampling::chain::parse("top_k(2);greedy").sample(logits);
    std::printf("sampling: top_k(2);greedy picks token %d (expected 2)\n", static_cast<int>(token));

    const bool ok = max_error <= tolerance && std::abs(dot - sum_squares) <= dot_tolerance && solved[0] == 1.0f && solved[1] == 2.0f &&
                    token == 2;
    return ok ? 0 : 1;
}
