// qk solve: one batched triangular solve (qk::solve_tri) on a random well-conditioned problem,
// on the CPU pool or the Vulkan device, timed, with its residual.
#pragma once

#include "common.hpp"
#include "progress.hpp"
#include "inputs.hpp" // tests/inputs.hpp: the seeded inputs the tests use too

#include <backends/cpu/context.hpp>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

namespace qk_tool {

// ---------------------------------------------------------------------------------------------
// qk solve: one batched triangular solve on a random well-conditioned problem, timed, with its
// residual. The problem is the tests' (qk_inputs::random_tri_problem), drawn as ggml's tests draw
// theirs: diagonal magnitudes in [1, 2] with random signs, off-diagonal entries U(-1, 1) / sqrt(n),
// junk in the triangle that is not read.

struct solve_options {
    std::int64_t n = 64;
    std::int64_t k = 64;
    std::int64_t batch = 32;
    bool right = false;
    bool upper = false;
    bool unit = false;
    std::size_t threads = 1;
    int repeat = 20;
    std::string backend = "cpu";
};

// max over batches of ||A X - B|| / (||A|| ||X||) in the infinity norm, computed in double; a
// backward-stable solve keeps it below a small multiple of n * epsilon.
inline double solve_residual(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& x,
                             const solve_options& opt, const qk::tri_options& tri)
{
    const auto n = static_cast<std::size_t>(opt.n);
    const auto k = static_cast<std::size_t>(opt.k);
    double worst = 0.0;
    for (std::size_t q = 0; q < static_cast<std::size_t>(opt.batch); ++q) {
        const float* aq = a.data() + q * n * n;
        const auto coefficient = [&](std::size_t i, std::size_t j) -> double {
            if (i == j) {
                return tri.unit ? 1.0 : aq[i * n + i];
            }
            return (tri.lower ? j < i : j > i) ? aq[i * n + j] : 0.0;
        };
        // Left: R = A X - B (n x k); right: R = X A - B (k x n).
        const std::size_t rows = tri.left ? n : k;
        const std::size_t cols = tri.left ? k : n;
        const float* bq = b.data() + q * n * k;
        const float* xq = x.data() + q * n * k;
        double r_norm = 0.0;
        double x_norm = 0.0;
        double a_norm = 0.0;
        for (std::size_t r = 0; r < rows; ++r) {
            double r_sum = 0.0;
            double x_sum = 0.0;
            for (std::size_t c = 0; c < cols; ++c) {
                double v = -static_cast<double>(bq[r * cols + c]);
                for (std::size_t t = 0; t < n; ++t) {
                    v += tri.left ? coefficient(r, t) * xq[t * cols + c] : xq[r * cols + t] * coefficient(t, c);
                }
                r_sum += std::abs(v);
                x_sum += std::abs(static_cast<double>(xq[r * cols + c]));
            }
            r_norm = std::max(r_norm, r_sum);
            x_norm = std::max(x_norm, x_sum);
        }
        for (std::size_t i = 0; i < n; ++i) {
            double row = 0.0;
            for (std::size_t j = 0; j < n; ++j) {
                row += std::abs(coefficient(i, j));
            }
            a_norm = std::max(a_norm, row);
        }
        // Right solves: ||X A|| <= ||X|| ||A|| holds in the infinity norm as well.
        worst = std::max(worst, r_norm / (a_norm * x_norm));
    }
    return worst;
}

inline void report_solve(const solve_options& opt, const qk::tri_options& tri, const std::vector<float>& a,
                         const std::vector<float>& b, const std::vector<float>& x, double best, double total, const std::string& where)
{
    const auto n = static_cast<std::size_t>(opt.n);
    const auto k = static_cast<std::size_t>(opt.k);
    const auto batch = static_cast<std::size_t>(opt.batch);
    const double flops = static_cast<double>(n * n * k * batch);
    const double residual = solve_residual(a, b, x, opt, tri);
    fmt::print("solve_tri {} ({}): n = {}, k = {}, batch = {}, {}\n", tri.left ? "A X = B" : "X A = B",
               qk::detail::tri_variant_name(tri), n, k, batch, where);
    fmt::print("  time           {:.3f} ms best, {:.3f} ms mean of {} runs\n", best * 1e3, total / opt.repeat * 1e3, opt.repeat);
    fmt::print("  speed          {:.2f} GFLOP/s (n * n * k flops per batch)\n", flops / best * 1e-9);
    fmt::print("  residual       {:.3g} = {:.3g} n eps  (max over batches of ||AX - B|| / (||A|| ||X||), infinity norm)\n", residual,
               residual / (static_cast<double>(n) * FLT_EPSILON));
}

inline CLI::App* add_solve(CLI::App& app, solve_options& opt)
{
    CLI::App* cmd = app.add_subcommand("solve", "time one batched triangular solve (qk::solve_tri) on a random well-conditioned "
                                                "problem and print its speed and residual");
    cmd->add_option("--n", opt.n, "order of the triangular matrices A")->capture_default_str();
    cmd->add_option("--k", opt.k, "right-hand sides per batch")->capture_default_str();
    cmd->add_option("--batch", opt.batch, "independent systems")->capture_default_str();
    cmd->add_flag("--right", opt.right, "solve X A = B instead of A X = B");
    cmd->add_flag("--upper", opt.upper, "A is upper triangular (default: lower)");
    cmd->add_flag("--unit", opt.unit, "A has a unit diagonal (its stored diagonal is ignored)");
    cmd->add_option("--backend", opt.backend, "cpu, or vulkan (QKERN_VULKAN_DEVICE picks the device)")->capture_default_str();
    cmd->add_option("--threads", opt.threads, "threads of the CPU pool")->check(CLI::Range(1, 1024))->capture_default_str();
    cmd->add_option("--repeat", opt.repeat, "timed runs; the best is reported")->check(CLI::Range(1, 100000))->capture_default_str();
    return cmd;
}

inline int run_solve(const solve_options& opt)
{
    const qk::tri_options tri{.left = !opt.right, .lower = !opt.upper, .unit = opt.unit};
    if (opt.n < 1 || opt.k < 1 || opt.batch < 1 || opt.n > 65536 || opt.k > (std::int64_t{1} << 30) / opt.n ||
        opt.batch > (std::int64_t{1} << 30) / (opt.n * std::max(opt.n, opt.k))) {
        usage_fail(fmt::format("--n {} --k {} --batch {}: each must be at least 1, and A and B at most 2^30 values", opt.n,
                               opt.k, opt.batch));
    }
    const auto n = static_cast<std::size_t>(opt.n);
    const auto k = static_cast<std::size_t>(opt.k);
    const auto batch = static_cast<std::size_t>(opt.batch);
    const auto problem = qk_inputs::random_tri_problem<float>(n, k, batch, tri, 20250101);
    const std::vector<float>& a = problem.a;
    const std::vector<float>& b = problem.b;
    std::vector<float> x(b.size());

    const auto solve = [&]<class Context>(Context& context, const std::string& where) {
        double best = 1e300;
        double total = 0.0;
        progress_reporter bar("qk solve", static_cast<std::uint64_t>(opt.repeat), "runs"); // large --n and --repeat take minutes
        for (int r = 0; r < opt.repeat; ++r) {
            const auto start = std::chrono::steady_clock::now();
            context.solve_tri(a.data(), b.data(), x.data(), opt.n, opt.k, opt.batch, tri);
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            best = std::min(best, seconds);
            total += seconds;
            bar.update(static_cast<std::uint64_t>(r + 1));
        }
        bar.finish();
        report_solve(opt, tri, a, b, x, best, total, where);
    };
    check_backend(opt.backend);
    if (opt.backend == "vulkan") {
#if defined(QKERN_ENABLE_VULKAN)
        qk::backend::vulkan::context context;
        solve(context, context.name() + " (times include the transfers)");
#endif
    } else {
        qk::backend::cpu::context context(opt.threads);
        solve(context, fmt::format("{} thread{}, tag {}", opt.threads, opt.threads == 1 ? "" : "s", qk::arch::name<qk::arch::solve_tri_native>()));
    }
    return 0;
}

} // namespace qk_tool
