// qk tour, also what `qk` alone runs: what this build and this CPU offer (qk info), then every
// block format's round trip and every weight format's dot products on built-in data, checked
// against the reference. A CTest test wherever the tool is built.
#pragma once

#include "common.hpp"
#include "info.hpp"
#include "inputs.hpp" // tests/inputs.hpp: the seeded inputs the tests use too

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

namespace qk_tool {

struct tour_options {}; // none; the struct lets main() wire the tour like every other subcommand

// ---------------------------------------------------------------------------------------------
// The tour: built-in data, round trips and dot products

inline constexpr std::size_t tour_rows = 4;
inline constexpr std::size_t tour_cols = 4096; // a multiple of every block size (32 and 256)

template <class Block>
constexpr double bits_per_weight()
{
    return static_cast<double>(sizeof(Block) * 8) / static_cast<double>(qk::format_traits<Block>::block_size);
}

template <class Block>
std::vector<float> round_trip(std::span<const float> x)
{
    const std::vector<Block> blocks = qk::quantize<Block, qk::arch::runtime>(x);
    std::vector<float> y(x.size());
    qk::dequantize<Block>(std::span<const Block>(blocks), std::span<float>(y));
    return y;
}

// Prints one round-trip row; returns whether it passed. The check is a sanity bound, not an
// accuracy test (tests/ holds those): every one of these formats keeps the relative RMS error on
// Gaussian data well under 25%, while a wrong scale, sign or nibble order lands near 100% or more.
template <class Block>
bool tour_round_trip(std::span<const float> x)
{
    const std::vector<float> y = round_trip<Block>(x);
    double error_squares = 0.0;
    double value_squares = 0.0;
    double max_error = 0.0;
    bool finite = true;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double error = static_cast<double>(y[i]) - static_cast<double>(x[i]);
        finite = finite && std::isfinite(y[i]);
        error_squares += error * error;
        value_squares += static_cast<double>(x[i]) * static_cast<double>(x[i]);
        max_error = std::max(max_error, std::fabs(error));
    }
    const double relative_rms = std::sqrt(error_squares / value_squares);
    const bool ok = finite && relative_rms < 0.25;
    fmt::print("  {:<8} {:>5} {:>7.3f} {:>11.3f}% {:>11.5f}   {}\n", qk::format_traits<Block>::name, qk::format_traits<Block>::block_size,
               bits_per_weight<Block>(), 100.0 * relative_rms, max_error, ok ? "ok" : "FAIL");
    return ok;
}

struct dot_result {
    float best = 0.0f; // on the kernels qk::dispatch picks
    float generic = 0.0f;
    double dequantized = 0.0; // the dot of the dequantized rows, in double
    double exact = 0.0;       // the dot of the original floats, in double
    bool ok = true;
};

// How far apart two computations of one row's dot product may be.
//
// Every kernel forms one float term per group of 32 values (a Q8_0/MXFP4/IQ4_NL block, an IQ4_XS
// sub-block) or of 16 (an NVFP4 sub-block): t = d * sumi, where sumi is an exact integer sum and d a product of at most three
// scales, so each term carries at most 3 roundings. Adding n terms in float costs n - 1 more.
// With u = FLT_EPSILON / 2 and S = sum_i |w_i * a_i| over the dequantized values (which bounds
// every |t| and every partial sum), the standard bound for recursive summation gives
//     |computed - exact| <= (n + 2) * u * S   (to first order in u).
// A SIMD kernel may add in another order (lanes, then a horizontal sum) or fuse multiply-adds;
// that obeys the same bound, so |best - generic| <= 2 (n + 2) u S = (n + 2) * FLT_EPSILON * S,
// and the dot of the dequantized values in double is within half of that of either. We allow
// twice the bound, for the rounding of the dequantized values and in S, and second-order terms.
inline double dot_tolerance(std::size_t groups, double abs_sum)
{
    return 2.0 * static_cast<double>(groups + 2) * static_cast<double>(FLT_EPSILON) * abs_sum;
}

// y = W a for the tour's W (tour_rows x tour_cols), on the best kernels and by the generic reference, each
// row checked (best against generic, generic against the dequantized data, which catches a
// dot kernel that disagrees with dequantize); returns row 0's values to show.
template <qk::weight_format Block>
dot_result tour_dot(std::span<const float> w, std::span<const float> a)
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    const std::vector<Block> wq = qk::quantize<Block, qk::arch::runtime>(w);
    const std::vector<activation> aq = qk::quantize<activation, qk::arch::runtime>(a);

    std::vector<float> w_deq(w.size());
    std::vector<float> a_deq(a.size());
    qk::dequantize<Block>(std::span<const Block>(wq), std::span<float>(w_deq));
    qk::dequantize<activation>(std::span<const activation>(aq), std::span<float>(a_deq));

    const std::size_t row_blocks = tour_cols / qk::format_traits<Block>::block_size;
    const std::span<const activation> a_blocks(aq);
    dot_result result;
    for (std::size_t r = 0; r < tour_rows; ++r) {
        const std::span<const Block> row(wq.data() + r * row_blocks, row_blocks);
        const float best = qk::dot<Block, qk::arch::runtime>(row, a_blocks);
        const float generic = qk::dot<Block, qk::arch::generic>(row, a_blocks);

        double exact = 0.0;
        double dequantized = 0.0;
        double abs_sum = 0.0;
        for (std::size_t i = 0; i < tour_cols; ++i) {
            const double product = static_cast<double>(w_deq[r * tour_cols + i]) * static_cast<double>(a_deq[i]);
            exact += static_cast<double>(w[r * tour_cols + i]) * static_cast<double>(a[i]);
            dequantized += product;
            abs_sum += std::fabs(product);
        }
        const double tolerance = dot_tolerance(tour_cols / (std::is_same_v<Block, qk::block_nvfp4> ? 16 : 32), abs_sum);
        // Written so that a NaN anywhere fails the check.
        const bool row_ok = std::fabs(static_cast<double>(best) - static_cast<double>(generic)) <= tolerance &&
                            std::fabs(static_cast<double>(generic) - dequantized) <= tolerance;
        result.ok = result.ok && row_ok;
        if (r == 0) {
            result.best = best;
            result.generic = generic;
            result.dequantized = dequantized;
            result.exact = exact;
        }
    }
    return result;
}

inline CLI::App* add_tour(CLI::App& app, tour_options&)
{
    return app.add_subcommand("tour", "show info, then round-trip and dot-product checks for every format (the default)");
}

// Exit status 2 when a check fails (see the footer of `qk --help`).
inline int run_tour(const tour_options&)
{
    print_info();
    const std::vector<float> w = qk_inputs::portable_normal(tour_rows * tour_cols, 1);
    const std::vector<float> a = qk_inputs::portable_normal(tour_cols, 2);
    bool all_ok = true;

    fmt::print("\nround trip: quantize then dequantize {} x {} Gaussian weights\n", tour_rows, tour_cols);
    fmt::print("  {:<8} {:>5} {:>7} {:>12} {:>11}   {}\n", "format", "block", "bits/w", "rel RMS err", "max |err|", "check");
    for (qk::format f : qk::all_formats) {
        all_ok = qk::visit_format(f, [&]<class Block>(std::type_identity<Block>) { return tour_round_trip<Block>(w); }) && all_ok;
    }

    const std::string best_header = fmt::format("best ({})", qk::dispatched_tag_name());
    const std::size_t best_width = std::max<std::size_t>(best_header.size(), 12);
    fmt::print("\ndot products: y = W a with a quantized too; y[0] shown, all {} rows checked\n", tour_rows);
    fmt::print("  {:<8} {:<6} {:>{}} {:>12} {:>12} {:>12}   {}\n", "format", "a as", best_header, best_width, "generic",
               "dequant f64", "exact f64", "check");
    for (qk::format f : qk::all_formats) {
        qk::visit_format(f, [&]<class Block>(std::type_identity<Block>) {
            if constexpr (qk::weight_format<Block>) {
                using activation = typename qk::format_traits<Block>::vec_dot_type;
                const dot_result d = tour_dot<Block>(w, a);
                all_ok = all_ok && d.ok;
                fmt::print("  {:<8} {:<6} {:>{}.5f} {:>12.5f} {:>12.5f} {:>12.5f}   {}\n", qk::format_traits<Block>::name,
                           qk::format_traits<activation>::name, d.best, best_width, d.generic, d.dequantized, d.exact,
                           d.ok ? "ok" : "FAIL");
            }
        });
    }
    fmt::print("  check: |best - generic| and |generic - dequant f64| within the float rounding bound\n");
    fmt::print("\n{}\n", all_ok ? "all checks passed" : "SOME CHECKS FAILED");
    return all_ok ? 0 : 2;
}

} // namespace qk_tool
