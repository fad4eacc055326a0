// Prompt-processing products: Y = W·X for 4096 x 4096 and 14336 x 4096 weights and 128 or 512
// activation columns, per weight format, on 1 and 2 threads, two ways: qk::gemm on the GGUF rows
// (one qk::dot per output value, dispatched tag) and the CPU context's gemm on its own copy of the
// weights (packed tiles where the CPU has tile kernels). Reported: GFLOP/s (2 per multiply-add)
// and `peak_fraction`, the rate of int8 multiply-adds over the peak this binary measures first on
// one core (independent vpdpbusd chains; AVX-512 VNNI machines only) times the threads.
#include <benchmark/benchmark.h>

#include <qkern.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "inputs.hpp"

#if QK_HAS_X86_KERNELS
#include <immintrin.h>
#endif

namespace {

using qk::backend::cpu::thread_pool;

constexpr std::size_t cols = 4096;

#if QK_HAS_X86_KERNELS
// Twelve independent accumulators in named variables (an array would be kept in memory), enough
// to cover vpdpbusd's latency at two per cycle; the operands are hidden from the optimizer.
[[gnu::noinline]] QK_TARGET_AVX512VNNI double vpdpbusd_seconds(long iterations)
{
    __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2), a3 = _mm512_set1_epi32(3);
    __m512i a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5), a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7);
    __m512i a8 = _mm512_set1_epi32(8), a9 = _mm512_set1_epi32(9), a10 = _mm512_set1_epi32(10), a11 = _mm512_set1_epi32(11);
    __m512i u = _mm512_set1_epi8(3);
    __m512i s = _mm512_set1_epi8(-5);
    __asm__("" : "+v"(u), "+v"(s));
    const auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < iterations; ++i) {
        a0 = _mm512_dpbusd_epi32(a0, u, s);
        a1 = _mm512_dpbusd_epi32(a1, u, s);
        a2 = _mm512_dpbusd_epi32(a2, u, s);
        a3 = _mm512_dpbusd_epi32(a3, u, s);
        a4 = _mm512_dpbusd_epi32(a4, u, s);
        a5 = _mm512_dpbusd_epi32(a5, u, s);
        a6 = _mm512_dpbusd_epi32(a6, u, s);
        a7 = _mm512_dpbusd_epi32(a7, u, s);
        a8 = _mm512_dpbusd_epi32(a8, u, s);
        a9 = _mm512_dpbusd_epi32(a9, u, s);
        a10 = _mm512_dpbusd_epi32(a10, u, s);
        a11 = _mm512_dpbusd_epi32(a11, u, s);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const __m512i sum = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                         _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    benchmark::DoNotOptimize(_mm512_add_epi32(sum, _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11))));
    return seconds;
}
#endif

// int8 multiply-adds per second of one core, the best of five runs; 0 where unmeasured.
double int8_peak()
{
    static const double peak = [] {
#if QK_HAS_X86_KERNELS
        if (qk::runs<qk::arch::avx512vnni>(qk::running_cpu())) {
            constexpr long iterations = 20'000'000;
            double best = 1e30;
            for (int run = 0; run < 5; ++run) {
                best = std::min(best, vpdpbusd_seconds(iterations));
            }
            return 12.0 * 64.0 * static_cast<double>(iterations) / best;
        }
#endif
        return 0.0;
    }();
    return peak;
}

template <class Block>
const std::vector<Block>& weights(std::size_t rows)
{
    static std::map<std::size_t, std::vector<Block>> cache;
    auto& w = cache[rows];
    if (w.empty()) {
        w = qk_inputs::random_blocks_fixed_scale<Block>(rows * cols / qk::format_traits<Block>::block_size, 17);
    }
    return w;
}

void report(benchmark::State& state, std::size_t rows, std::size_t columns, std::size_t threads, double seconds)
{
    const double macs = static_cast<double>(state.iterations()) * static_cast<double>(rows * cols * columns);
    state.counters["GFLOP/s"] = 2.0 * macs / seconds / 1e9;
    if (int8_peak() > 0) {
        state.counters["peak_fraction"] = macs / seconds / (int8_peak() * static_cast<double>(threads));
    }
}

template <class Block>
void gemm_plain(benchmark::State& state)
{
    const auto rows = static_cast<std::size_t>(state.range(0));
    const auto columns = static_cast<std::size_t>(state.range(1));
    const auto threads = static_cast<std::size_t>(state.range(2));
    int8_peak();
    const auto& w = weights<Block>(rows);
    thread_pool pool(threads);
    const auto x = qk_inputs::normal(columns * cols, 1.0f, 3);
    std::vector<float> y(rows * columns);
    std::vector<typename qk::format_traits<Block>::vec_dot_type> scratch(qk::gemm_scratch_blocks<Block>(cols, columns));
    const auto start = std::chrono::steady_clock::now();
    for (auto _ : state) {
        qk::dispatch([&]<class Tag>(Tag) { qk::gemm<Block, Tag>(w, rows, cols, columns, x, y, pool, scratch); });
        benchmark::DoNotOptimize(y.data());
    }
    report(state, rows, columns, threads, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

template <class Block>
void gemm_context(benchmark::State& state)
{
    const auto rows = static_cast<std::size_t>(state.range(0));
    const auto columns = static_cast<std::size_t>(state.range(1));
    const auto threads = static_cast<std::size_t>(state.range(2));
    int8_peak();
    qk::backend::cpu::context context(threads);
    const auto m = context.upload<Block>(weights<Block>(rows), rows, cols);
    const auto x = qk_inputs::normal(columns * cols, 1.0f, 3);
    std::vector<float> y(rows * columns);
    context.gemm(m, columns, x, y); // the scratch grows once
    const auto start = std::chrono::steady_clock::now();
    for (auto _ : state) {
        context.gemm(m, columns, x, y);
        benchmark::DoNotOptimize(y.data());
    }
    report(state, rows, columns, threads, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    state.SetLabel(m.is_packed() ? "packed" : "plain rows");
}

template <class Block>
void register_gemm()
{
    const std::string name(qk::format_traits<Block>::name);
    using function = void (*)(benchmark::State&);
    for (auto [f, path] : {std::pair<function, const char*>{gemm_context<Block>, "context"}, std::pair<function, const char*>{gemm_plain<Block>, "plain"}}) {
        benchmark::RegisterBenchmark(("gemm/" + name + "/" + path).c_str(), f)
            ->ArgsProduct({{4096, 14336}, {128, 512}, {1, 2}})
            ->ArgNames({"rows", "columns", "threads"})
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
    }
}

[[maybe_unused]] const bool registered = [] {
    register_gemm<qk::block_q8_0>();
    register_gemm<qk::block_mxfp4>();
    register_gemm<qk::block_iq4_nl>();
    register_gemm<qk::block_iq4_xs>();
    return true;
}();

} // namespace
