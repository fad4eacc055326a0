// Throughput of the scalar reference kernels: quantize and dequantize (float bytes per second)
// and the generic dot products in cache (weight bytes per second, ns per 32 values). These are
// the baselines that the SIMD kernels are measured against.
#include <benchmark/benchmark.h>

#include <qkern.hpp>

#include <random>
#include <vector>

namespace {

std::vector<float> gaussian(std::size_t n, std::uint32_t seed)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(n);
    for (auto& v : x) {
        v = dist(rng);
    }
    return x;
}

constexpr std::size_t values = 4096;

template <class Block>
void quantize(benchmark::State& state)
{
    const auto x = gaussian(values, 1);
    std::vector<Block> y(values / qk::format_traits<Block>::block_size);
    for (auto _ : state) {
        qk::quantize<Block>(x, std::span<Block>(y));
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * values * sizeof(float)));
    state.counters["ns_per_32"] = benchmark::Counter(static_cast<double>(state.iterations() * values / 32),
                                                     benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

template <class Block>
void dequantize(benchmark::State& state)
{
    const auto blocks = qk::quantize<Block>(std::span<const float>(gaussian(values, 2)));
    std::vector<float> y(values);
    for (auto _ : state) {
        qk::dequantize<Block>(blocks, y);
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * values * sizeof(float)));
}

template <class Block, class Arch>
void dot(benchmark::State& state)
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    const auto w = qk::quantize<Block>(std::span<const float>(gaussian(values, 3)));
    const auto a = qk::quantize<activation>(std::span<const float>(gaussian(values, 4)));
    for (auto _ : state) {
        benchmark::DoNotOptimize(qk::dot<Block, Arch>(w, a));
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * w.size() * sizeof(Block)));
    state.counters["ns_per_32"] = benchmark::Counter(static_cast<double>(state.iterations() * values / 32),
                                                     benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

} // namespace

BENCHMARK_TEMPLATE(quantize, qk::block_q8_0);
BENCHMARK_TEMPLATE(quantize, qk::block_q8_K);
BENCHMARK_TEMPLATE(quantize, qk::block_mxfp4);
BENCHMARK_TEMPLATE(quantize, qk::block_iq4_nl);
BENCHMARK_TEMPLATE(quantize, qk::block_iq4_xs);
BENCHMARK_TEMPLATE(dequantize, qk::block_q8_0);
BENCHMARK_TEMPLATE(dequantize, qk::block_q8_K);
BENCHMARK_TEMPLATE(dequantize, qk::block_mxfp4);
BENCHMARK_TEMPLATE(dequantize, qk::block_iq4_nl);
BENCHMARK_TEMPLATE(dequantize, qk::block_iq4_xs);
BENCHMARK_TEMPLATE(dot, qk::block_q8_0, qk::arch::generic);
BENCHMARK_TEMPLATE(dot, qk::block_mxfp4, qk::arch::generic);
BENCHMARK_TEMPLATE(dot, qk::block_iq4_nl, qk::arch::generic);
BENCHMARK_TEMPLATE(dot, qk::block_iq4_xs, qk::arch::generic);
BENCHMARK_TEMPLATE(dot, qk::block_q8_0, qk::arch::sse4_2);
BENCHMARK_TEMPLATE(dot, qk::block_mxfp4, qk::arch::sse4_2);
BENCHMARK_TEMPLATE(dot, qk::block_iq4_nl, qk::arch::sse4_2);
BENCHMARK_TEMPLATE(dot, qk::block_iq4_xs, qk::arch::sse4_2);
BENCHMARK_TEMPLATE(dot, qk::block_q8_0, qk::arch::avx2);
BENCHMARK_TEMPLATE(dot, qk::block_mxfp4, qk::arch::avx2);
BENCHMARK_TEMPLATE(dot, qk::block_iq4_nl, qk::arch::avx2);
BENCHMARK_TEMPLATE(dot, qk::block_iq4_xs, qk::arch::avx2);
