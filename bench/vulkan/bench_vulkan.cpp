// The Vulkan backend's speed on the device QKERN_VULKAN_DEVICE (or the default) picks: its
// streaming read (the ceiling of a mat-vec), mat-vec 14336 x 4096 per weight format reported in
// bytes/s of weights and as a fraction of that read bandwidth, mat-mult 4096 x 4096 by 8 and 32
// columns in GFLOP/s and against a mat-vec per column timed in the same run, solve_tri, and sampling per token
// on a 152064-token vocabulary, each call including its transfers to and from the host. Without a
// device every benchmark reports itself skipped.
#include <benchmark/benchmark.h>

#include <backends/vulkan/vulkan.hpp>
#include <kernels/formats.hpp>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "inputs.hpp"

namespace {

namespace vk = qk::backend::vulkan;

// One device for the whole process, created on first use; nullptr where there is none.
vk::device* shared_device()
{
    static std::unique_ptr<vk::device> dev = []() -> std::unique_ptr<vk::device> {
        try {
            return std::make_unique<vk::device>();
        } catch (const qk::error&) {
            return nullptr;
        }
    }();
    return dev.get();
}

// Measured once per process, so every mat-vec's fraction is formed against the same figure.
double device_read_bandwidth()
{
    static const double bandwidth = vk::measure_read_bandwidth(*shared_device());
    return bandwidth;
}

void read_bandwidth(benchmark::State& state)
{
    if (shared_device() == nullptr) {
        state.SkipWithError("no Vulkan device");
        return;
    }
    double bandwidth = 0;
    for (auto _ : state) {
        bandwidth = vk::measure_read_bandwidth(*shared_device(), std::size_t{256} << 20, 1);
    }
    state.counters["GB/s"] = bandwidth / 1e9;
}
BENCHMARK(read_bandwidth)->Name("vulkan/read")->Unit(benchmark::kMillisecond)->Iterations(5);

template <class Block>
void gemv(benchmark::State& state)
{
    vk::device* dev = shared_device();
    if (dev == nullptr) {
        state.SkipWithError("no Vulkan device");
        return;
    }
    constexpr std::size_t rows = 14336, cols = 4096;
    const auto w = qk_inputs::random_blocks_fixed_scale<Block>(rows * cols / qk::format_traits<Block>::block_size, 3);
    const auto m = vk::upload_matrix<Block>(*dev, std::span<const Block>(w), rows, cols);
    vk::gemv_workspace ws(*dev);
    std::vector<float> x(cols, 0.5f), y(rows);
    vk::gemv(*dev, ws, m, x, y); // pipeline built outside the timing
    double seconds = 0;
    for (auto _ : state) {
        const auto start = std::chrono::steady_clock::now();
        vk::gemv(*dev, ws, m, x, y);
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        state.SetIterationTime(elapsed);
        seconds += elapsed;
        benchmark::DoNotOptimize(y.data());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * m.bytes()));
    // Weight bytes per second over the device's read bandwidth measured by this process.
    state.counters["bandwidth_fraction"] =
        static_cast<double>(state.iterations() * m.bytes()) / seconds / device_read_bandwidth();
}
BENCHMARK(gemv<qk::block_q8_0>)->Name("vulkan/gemv/Q8_0")->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(gemv<qk::block_mxfp4>)->Name("vulkan/gemv/MXFP4")->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(gemv<qk::block_iq4_nl>)->Name("vulkan/gemv/IQ4_NL")->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(gemv<qk::block_iq4_xs>)->Name("vulkan/gemv/IQ4_XS")->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(gemv<qk::block_nvfp4>)->Name("vulkan/gemv/NVFP4")->Unit(benchmark::kMillisecond)->UseManualTime();

// Y = W·X in one call, and the same columns as one gemv call each (what the context did before it
// had a mat-mult), timed in the same run: `over_gemv_per_column` is how many times faster the
// one call is.
template <class Block>
void gemm(benchmark::State& state)
{
    vk::device* dev = shared_device();
    if (dev == nullptr) {
        state.SkipWithError("no Vulkan device");
        return;
    }
    constexpr std::size_t rows = 4096, cols = 4096;
    const auto columns = static_cast<std::size_t>(state.range(0));
    const auto w = qk_inputs::random_blocks_fixed_scale<Block>(rows * cols / qk::format_traits<Block>::block_size, 3);
    const auto m = vk::upload_matrix<Block>(*dev, std::span<const Block>(w), rows, cols);
    vk::gemv_workspace ws(*dev);
    const auto x = qk_inputs::normal<std::mt19937_64>(columns * cols, 1.0f, 5);
    std::vector<float> y(columns * rows);
    const auto per_column = [&] {
        for (std::size_t c = 0; c < columns; ++c) {
            vk::gemv(*dev, ws, m, std::span<const float>(x).subspan(c * cols, cols), std::span<float>(y).subspan(c * rows, rows));
        }
    };
    vk::gemm(*dev, ws, m, columns, x, y); // pipeline built outside the timing
    double seconds = 0, per_column_seconds = 0;
    for (auto _ : state) {
        auto start = std::chrono::steady_clock::now();
        vk::gemm(*dev, ws, m, columns, x, y);
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        state.SetIterationTime(elapsed);
        seconds += elapsed;
        benchmark::DoNotOptimize(y.data());
        state.PauseTiming();
        start = std::chrono::steady_clock::now();
        per_column();
        per_column_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        state.ResumeTiming();
    }
    const double flops = 2.0 * static_cast<double>(rows * cols * columns) * static_cast<double>(state.iterations());
    state.counters["GFLOP/s"] = flops / seconds / 1e9;
    state.counters["over_gemv_per_column"] = per_column_seconds / seconds;
}
BENCHMARK(gemm<qk::block_q8_0>)->Name("vulkan/gemm/Q8_0/columns")->Arg(8)->Arg(32)->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(gemm<qk::block_mxfp4>)->Name("vulkan/gemm/MXFP4/columns")->Arg(8)->Arg(32)->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(gemm<qk::block_iq4_nl>)->Name("vulkan/gemm/IQ4_NL/columns")->Arg(8)->Arg(32)->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(gemm<qk::block_iq4_xs>)->Name("vulkan/gemm/IQ4_XS/columns")->Arg(8)->Arg(32)->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(gemm<qk::block_nvfp4>)->Name("vulkan/gemm/NVFP4/columns")->Arg(8)->Arg(32)->Unit(benchmark::kMillisecond)->UseManualTime();

void solve_tri(benchmark::State& state)
{
    vk::device* dev = shared_device();
    if (dev == nullptr) {
        state.SkipWithError("no Vulkan device");
        return;
    }
    const std::int64_t n = state.range(0), k = n, batch = 32;
    std::mt19937 engine(1);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    std::vector<float> a(static_cast<std::size_t>(n * n * batch)), b(static_cast<std::size_t>(n * k * batch)), x(b.size());
    for (std::int64_t q = 0; q < batch; ++q) {
        for (std::int64_t i = 0; i < n; ++i) {
            for (std::int64_t j = 0; j < n; ++j) {
                a[static_cast<std::size_t>((q * n + i) * n + j)] = i == j ? 2.0f : unit(engine) / static_cast<float>(n);
            }
        }
    }
    for (float& v : b) {
        v = unit(engine);
    }
    vk::solve_tri_workspace ws(*dev);
    vk::solve_tri(*dev, ws, a.data(), b.data(), x.data(), n, k, batch);
    for (auto _ : state) {
        vk::solve_tri(*dev, ws, a.data(), b.data(), x.data(), n, k, batch);
        benchmark::DoNotOptimize(x.data());
    }
    state.counters["GFLOP/s"] =
        benchmark::Counter(static_cast<double>(n * n * k * batch) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(solve_tri)->Name("vulkan/solve_tri/batch:32/n=k")->Arg(16)->Arg(64)->Arg(128)->Unit(benchmark::kMillisecond)->UseRealTime();

void sample(benchmark::State& state, const char* chain_text)
{
    vk::device* dev = shared_device();
    if (dev == nullptr) {
        state.SkipWithError("no Vulkan device");
        return;
    }
    constexpr std::size_t n_vocab = 152064;
    const auto n_seq = static_cast<std::size_t>(state.range(0));
    std::mt19937 engine(7);
    const std::vector<float> logits = qk_inputs::draws(n_seq * n_vocab, std::normal_distribution<float>(0.0f, 3.0f), engine);
    std::vector<qk::sampling::chain> chains;
    for (std::size_t s = 0; s < n_seq; ++s) {
        chains.push_back(qk::sampling::chain::parse(chain_text));
    }
    vk::sampling_workspace ws(*dev);
    (void)vk::sample(*dev, ws, chains, std::span<const float>(logits), n_vocab);
    for (auto _ : state) {
        benchmark::DoNotOptimize(vk::sample(*dev, ws, chains, std::span<const float>(logits), n_vocab));
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * logits.size() * sizeof(float)));
    state.counters["tokens/s"] =
        benchmark::Counter(static_cast<double>(n_seq), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(sample, greedy, "greedy")->Name("vulkan/sample/vocab:152064/greedy")->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(sample, dist, "dist(seed=1)")->Name("vulkan/sample/vocab:152064/dist")->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(sample, top_k_temp_dist, "top_k(40);temp(0.8);dist(seed=1)")
    ->Name("vulkan/sample/vocab:152064/top_k(40);temp(0.8);dist")
    ->Arg(1)
    ->Arg(8)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

} // namespace
