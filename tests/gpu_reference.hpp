// What the GPU backends' tests (tests/vulkan, tests/metal) hold their kernels to, in one place:
// solve_tri's residual and forward-error bounds for a device's arithmetic, derived as in
// solve_tri_reference.hpp, checked against a double solve and the CPU's qk::solve_tri; the
// rounding bound of a mat-vec; NVFP4 blocks with every scale byte at every position; and logits
// rows in the styles the sampling tests use.
#pragma once

#include <doctest/doctest.h>

#include <kernels/formats/nvfp4.hpp>
#include <kernels/solve_tri.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "inputs.hpp"
#include "solve_tri_reference.hpp"

namespace qk_test::gpu {

inline std::vector<qk::tri_options> all_variants()
{
    std::vector<qk::tri_options> variants;
    for (int v = 0; v < 8; ++v) {
        variants.push_back({(v & 1) != 0, (v & 2) != 0, (v & 4) != 0});
    }
    return variants;
}

inline std::string describe(const qk::tri_options& opt)
{
    return std::string(opt.left ? "left" : "right") + (opt.lower ? ", lower" : ", upper") + (opt.unit ? ", unit" : ", non-unit");
}

// Rounding errors on the way to one element of X, in units of u, beyond the n of the sum (Higham
// thm. 8.5: |dA| <= gamma_m |A|; the sum of b and at most n - 1 products costs at most n roundings
// in any order, fused or not). The CPU multiplies by a rounded reciprocal: 2 more. Vulkan and
// Metal (fast math) allow x / y an error of 2.5 ulp, at most 5u relative: 5 more.
inline constexpr std::size_t cpu_extra_roundings = 2;
inline constexpr std::size_t division_extra_roundings = 5;

// gamma_m doubled, the slack solve_tri_reference.hpp allows for the double reference's rounding.
inline double gamma(std::size_t roundings)
{
    const double u = std::numeric_limits<float>::epsilon() / 2;
    const auto m = static_cast<double>(roundings);
    return 2 * m * u / (1 - m * u);
}

// One batch of a computed X held to the residual bound |R| <= g |M| |X| (left: R = M X - B;
// right: X M - B); returns the forward-error bound of each element, |M^-1| (g |M| |X|) (left) or
// (g |X| |M|) |M^-1| (right).
inline std::vector<double> bounded_residual(const std::vector<double>& m, const std::vector<double>& inverse, const float* b,
                                            const float* x, std::size_t n, std::size_t k, const qk::tri_options& opt, double g,
                                            const char* who)
{
    const std::size_t rows = opt.left ? n : k;
    const std::size_t cols = opt.left ? k : n;
    std::vector<double> scale(rows * cols);
    for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t c = 0; c < cols; ++c) {
            double residual = -static_cast<double>(b[r * cols + c]);
            double size = 0;
            for (std::size_t t = 0; t < n; ++t) {
                const double coefficient = opt.left ? m[r * n + t] : m[t * n + c];
                const double value = opt.left ? x[t * cols + c] : x[r * cols + t];
                residual += coefficient * value;
                size += std::abs(coefficient) * std::abs(value);
            }
            scale[r * cols + c] = g * size;
            INFO(who, " residual at (", r, ", ", c, ")");
            REQUIRE(std::abs(residual) <= scale[r * cols + c] + std::numeric_limits<float>::denorm_min());
        }
    }
    std::vector<double> bound(rows * cols, 0.0);
    for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t c = 0; c < cols; ++c) {
            for (std::size_t t = 0; t < n; ++t) {
                bound[r * cols + c] += opt.left ? inverse[r * n + t] * scale[t * cols + c] : scale[r * cols + t] * inverse[t * n + c];
            }
        }
    }
    return bound;
}

// Holds every batch of a device's X (computed with `device_extra` roundings beyond the sum's) to
// its residual and forward-error bounds, and to the CPU's X (qk::solve_tri<generic>) within the
// sum of both forward bounds. Returns the elements checked.
inline std::size_t check_solve_against_cpu(const qk_inputs::tri_problem_data<float>& p, const std::vector<float>& x, std::size_t n,
                                           std::size_t k, std::size_t batch, const qk::tri_options& opt,
                                           std::size_t device_extra = division_extra_roundings)
{
    std::vector<float> cpu(x.size());
    qk::solve_tri<qk::arch::generic>(p.a.data(), p.b.data(), cpu.data(), static_cast<std::int64_t>(n), static_cast<std::int64_t>(k),
                                     static_cast<std::int64_t>(batch), opt);
    for (std::size_t q = 0; q < batch; ++q) {
        const float* a = p.a.data() + q * n * n;
        const float* b = p.b.data() + q * n * k;
        const float* dx = x.data() + q * n * k;
        const float* cx = cpu.data() + q * n * k;
        const std::vector<double> m = dense_triangle(a, n, opt);
        const std::vector<double> exact = reference_solve(m, b, n, k, opt);
        const std::vector<double> inverse = abs_inverse(m, n, opt.lower);
        const auto device_bound = bounded_residual(m, inverse, b, dx, n, k, opt, gamma(n + device_extra), "device");
        const auto cpu_bound = bounded_residual(m, inverse, b, cx, n, k, opt, gamma(n + cpu_extra_roundings), "CPU");
        for (std::size_t e = 0; e < n * k; ++e) {
            INFO("batch ", q, " element ", e, ": device ", dx[e], ", CPU ", cx[e], ", exact ", exact[e]);
            REQUIRE(std::abs(dx[e] - exact[e]) <= device_bound[e] + std::numeric_limits<float>::denorm_min());
            REQUIRE(std::abs(static_cast<double>(dx[e]) - cx[e]) <=
                    device_bound[e] + cpu_bound[e] + std::numeric_limits<float>::denorm_min());
        }
    }
    return n * k * batch;
}

// The rounding bound of a float sum of n products: n u sum|terms| (u = 2^-24) with a margin of 2
// for the scale products, which any evaluation order respects (the first-order bound for
// recursive summation is (n - 1) u; a tree's is smaller).
inline double rounding_bound(std::size_t n, double magnitude)
{
    return 2.0 * static_cast<double>(n + 2) * 0x1p-24 * magnitude + 1e-30;
}

// NVFP4 blocks that show each UE4M3 scale byte on its own, for the kernels that decode the scales
// themselves rather than read qk::ue4m3_half_table: one block per row, row 4 b + p with scale byte
// b at sub-block p and the other three sub-blocks' bytes among those that decode to 0 (0x00, 0x7F,
// 0x80), under random codes; x holds small integers. Every product and sum is then exact in float,
// so a kernel's row r must equal `expected[r]` (the table's value times the sub-block's integer
// dot, taken with FORMATS.md's nibble order) in any order of summation.
struct nvfp4_scale_probe {
    static constexpr std::size_t rows = 4 * 256;
    static constexpr std::size_t cols = 64;
    std::vector<qk::block_nvfp4> w;
    std::vector<float> x;
    std::vector<float> expected;
};

inline nvfp4_scale_probe make_nvfp4_scale_probe(std::uint32_t seed)
{
    constexpr std::array<std::uint8_t, 3> zeros{0x00, 0x7f, 0x80};
    std::mt19937 rng(seed);
    nvfp4_scale_probe probe;
    std::vector<int> xi(nvfp4_scale_probe::cols);
    for (int& v : xi) {
        v = static_cast<int>(rng() % 7) - 3;
        probe.x.push_back(static_cast<float>(v));
    }
    for (std::size_t r = 0; r < nvfp4_scale_probe::rows; ++r) {
        const std::size_t byte = r / 4;
        const std::size_t p = r % 4;
        qk::block_nvfp4 block{};
        for (std::size_t s = 0; s < 4; ++s) {
            block.d[s] = s == p ? static_cast<std::uint8_t>(byte) : zeros[(r + s) % zeros.size()];
        }
        for (auto& q : block.qs) {
            q = static_cast<std::uint8_t>(rng());
        }
        int sumi = 0;
        for (std::size_t j = 0; j < 8; ++j) {
            const std::uint8_t q = block.qs[8 * p + j];
            sumi += qk::mxfp4_values[q & 0x0f] * xi[16 * p + j] + qk::mxfp4_values[q >> 4] * xi[16 * p + j + 8];
        }
        probe.w.push_back(block);
        probe.expected.push_back(qk::ue4m3_half_table[byte] * static_cast<float>(sumi));
    }
    return probe;
}

// Logits rows for the sampling kernels, in four styles: 0 normal logits (sigma 3); 1 few distinct
// values (many ties, -0 and +0); 2 with -inf and NaN sprinkled in; 3 a wide range from `wide_low`
// up to 5, so that many exps and probabilities are subnormal.
inline std::vector<float> make_logits_row(std::mt19937& rng, std::size_t n, int style, float wide_low = -120.0f)
{
    constexpr float inf = std::numeric_limits<float>::infinity();
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::uniform_int_distribution<int> small(-3, 3);
    std::uniform_real_distribution<float> wide(wide_low, 5.0f);
    std::uniform_int_distribution<int> pick(0, 9);
    std::vector<float> row(n);
    for (auto& v : row) {
        switch (style) {
        case 0: v = normal(rng); break;
        case 1: v = small(rng) == 0 ? (pick(rng) < 5 ? -0.0f : 0.0f) : static_cast<float>(small(rng)) * 0.5f; break;
        case 2: {
            const int p = pick(rng);
            v = p == 0 ? -inf : (p == 1 ? std::numeric_limits<float>::quiet_NaN() : normal(rng));
            break;
        }
        default: v = wide(rng); break;
        }
    }
    return row;
}

} // namespace qk_test::gpu
