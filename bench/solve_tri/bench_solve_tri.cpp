// qk::solve_tri throughput in GFLOP/s (n * n * k flops per batch, the count of the issue and of
// ggml), on 1 and 2 threads, beside the same solves by ggml's algorithm (column by column, one
// dot product per element), OpenBLAS's cblas_strsm and Eigen's triangularView solve where those
// were found at configure time. Every run first measures this core's multiply-add peak (12
// independent vector FMA chains) and reports `peak_fraction`: the rate over that peak times the
// thread count. Built with -march=native (bench/CMakeLists.txt): xsimd's vectors need the flags.
#include <benchmark/benchmark.h>

#include <backends/cpu/solve_tri.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "peers.hpp"

namespace {

using qk::backend::cpu::thread_pool;

// ---- the machine's limit: vector multiply-adds per second on one core ------------------------

double measure_fma_peak()
{
    using vector = xsimd::batch<float, qk::arch::xsimd_of<qk::arch::solve_tri_native>>;
    constexpr std::size_t chains = 12;
    std::array<vector, chains> acc;
    for (std::size_t j = 0; j < chains; ++j) {
        acc[j] = vector(static_cast<float>(j) * 1e-3f);
    }
    const vector x(0.999f);
    const vector y(1e-4f);
    double best = 0;
    for (int round = 0; round < 5; ++round) {
        constexpr long iterations = 20'000'000;
        const auto start = std::chrono::steady_clock::now();
        for (long i = 0; i < iterations; ++i) {
            for (std::size_t j = 0; j < chains; ++j) {
                acc[j] = xsimd::fma(acc[j], x, y);
            }
        }
        benchmark::DoNotOptimize(acc);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        best = std::max(best, static_cast<double>(iterations) * chains * vector::size * 2 / seconds);
    }
    return best;
}

double fma_peak()
{
    static const double peak = measure_fma_peak();
    return peak;
}

thread_pool& pool_of(std::size_t threads)
{
    static std::array<std::unique_ptr<thread_pool>, 3> pools;
    if (!pools[threads]) {
        pools[threads] = std::make_unique<thread_pool>(threads);
    }
    return *pools[threads];
}

// ---- the problems ----------------------------------------------------------------------------

// A well-conditioned lower-triangular system per batch (diagonal in [1, 2] with random signs,
// off-diagonal U(-1, 1) / sqrt(n)), in 64-byte aligned buffers.
struct problem {
    std::int64_t n, k, batch;
    std::vector<float, xsimd::aligned_allocator<float, 64>> a, b, x;

    problem(std::int64_t n_, std::int64_t k_, std::int64_t batch_)
        : n(n_), k(k_), batch(batch_), a(static_cast<std::size_t>(n * n * batch)), b(static_cast<std::size_t>(n * k * batch)),
          x(b.size())
    {
        std::mt19937 rng(42);
        std::uniform_real_distribution<float> unit(-1, 1);
        for (std::int64_t q = 0; q < batch; ++q) {
            for (std::int64_t i = 0; i < n; ++i) {
                for (std::int64_t j = 0; j < n; ++j) {
                    float& v = a[static_cast<std::size_t>((q * n + i) * n + j)];
                    v = i == j ? (unit(rng) < 0 ? -1.0f : 1.0f) * (1.0f + std::abs(unit(rng))) : j < i ? unit(rng) / std::sqrt(float(n)) : 0.0f;
                }
            }
        }
        for (auto& v : b) {
            v = unit(rng);
        }
    }
};

problem& problem_of(std::int64_t n, std::int64_t k, std::int64_t batch)
{
    static std::vector<std::unique_ptr<problem>> problems;
    for (auto& p : problems) {
        if (p->n == n && p->k == k && p->batch == batch) {
            return *p;
        }
    }
    problems.push_back(std::make_unique<problem>(n, k, batch));
    return *problems.back();
}

// GFLOP/s, and the fraction of the multiply-add peak of `threads` cores. `seconds` is the time
// of the whole measured loop (Google Benchmark's own time is not visible to the counters).
void report(benchmark::State& state, const problem& p, std::size_t threads, double seconds)
{
    const double rate = static_cast<double>(p.n * p.n * p.k * p.batch) * static_cast<double>(state.iterations()) / seconds;
    state.counters["GFLOP/s"] = rate * 1e-9;
    state.counters["peak_fraction"] = rate / (fma_peak() * static_cast<double>(threads));
}

// Times the loop that Google Benchmark runs: call as `timer t; for (auto _ : state) ...; t.seconds()`.
struct timer {
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    [[nodiscard]] double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
};

// ---- the solvers -----------------------------------------------------------------------------

void qkern_solve(benchmark::State& state)
{
    problem& p = problem_of(state.range(0), state.range(1), state.range(2));
    const auto threads = static_cast<std::size_t>(state.range(3));
    fma_peak();
    const timer time;
    for (auto _ : state) {
        if (threads == 1) {
            qk::solve_tri(p.a.data(), p.b.data(), p.x.data(), p.n, p.k, p.batch);
        } else {
            qk::solve_tri(p.a.data(), p.b.data(), p.x.data(), p.n, p.k, p.batch, {}, pool_of(threads));
        }
        benchmark::ClobberMemory();
    }
    report(state, p, threads, time.seconds());
}

// ggml's CPU algorithm: each element of X is one dot product of a row of A with the solved part
// of its column of X, column after column.
void naive_solve(benchmark::State& state)
{
    problem& p = problem_of(state.range(0), state.range(1), state.range(2));
    const auto n = static_cast<std::size_t>(p.n);
    const auto k = static_cast<std::size_t>(p.k);
    fma_peak();
    const timer time;
    for (auto _ : state) {
        for (std::size_t q = 0; q < static_cast<std::size_t>(p.batch); ++q) {
            const float* a = p.a.data() + q * n * n;
            const float* b = p.b.data() + q * n * k;
            float* x = p.x.data() + q * n * k;
            for (std::size_t c = 0; c < k; ++c) {
                for (std::size_t i = 0; i < n; ++i) {
                    float sum = 0;
                    for (std::size_t t = 0; t < i; ++t) {
                        sum += a[i * n + t] * x[t * k + c];
                    }
                    x[i * k + c] = (b[i * k + c] - sum) / a[i * n + i];
                }
            }
        }
        benchmark::ClobberMemory();
    }
    report(state, p, 1, time.seconds());
}

// Solvers that work in place: X is set to B before each timed call, outside the timing.
// solve_batch(a, x, p) solves one batch.
template <class SolveBatch>
[[maybe_unused]] void in_place_solve(benchmark::State& state, SolveBatch solve_batch)
{
    problem& p = problem_of(state.range(0), state.range(1), state.range(2));
    fma_peak();
    double seconds = 0;
    for (auto _ : state) {
        state.PauseTiming();
        std::copy(p.b.begin(), p.b.end(), p.x.begin());
        const timer time;
        state.ResumeTiming();
        for (std::int64_t q = 0; q < p.batch; ++q) {
            solve_batch(p.a.data() + q * p.n * p.n, p.x.data() + q * p.n * p.k, p);
        }
        benchmark::ClobberMemory();
        seconds += time.seconds();
    }
    report(state, p, 1, seconds);
}

#if QKERN_BENCH_OPENBLAS
void openblas_solve(benchmark::State& state)
{
    in_place_solve(state, [](const float* a, float* x, const problem& p) { qk_bench::openblas_solve_lower(a, x, p.n, p.k); });
}
#endif

#if QKERN_BENCH_EIGEN
void eigen_solve(benchmark::State& state)
{
    in_place_solve(state, [](const float* a, float* x, const problem& p) { qk_bench::eigen_solve_lower(a, x, p.n, p.k); });
}
#endif

// The shapes of the issue: (n, k, batch).
constexpr std::array<std::array<std::int64_t, 3>, 4> shapes{{{64, 64, 32}, {128, 128, 8}, {256, 32, 4}, {16, 16, 1024}}};

void shapes_and_threads(benchmark::internal::Benchmark* b)
{
    b->ArgNames({"n", "k", "batch", "threads"});
    for (const auto& s : shapes) {
        for (const std::int64_t threads : {1, 2}) {
            b->Args({s[0], s[1], s[2], threads});
        }
    }
}

void shapes_only(benchmark::internal::Benchmark* b)
{
    b->ArgNames({"n", "k", "batch"});
    for (const auto& s : shapes) {
        b->Args({s[0], s[1], s[2]});
    }
}

} // namespace

BENCHMARK(qkern_solve)->Apply(shapes_and_threads)->UseRealTime();
BENCHMARK(naive_solve)->Apply(shapes_only)->UseRealTime();
#if QKERN_BENCH_OPENBLAS
BENCHMARK(openblas_solve)->Apply(shapes_only)->UseRealTime();
#endif
#if QKERN_BENCH_EIGEN
BENCHMARK(eigen_solve)->Apply(shapes_only)->UseRealTime();
#endif
