// Throughput of the scalar reference kernels: quantize and dequantize (float bytes per second)
// and the dot products in cache on every tag this CPU runs, the generic reference first (weight
// bytes per second, ns per 32 values): the baselines the SIMD kernels are measured against.
#include <benchmark/benchmark.h>

#include <qkern.hpp>

#include <string>
#include <vector>

#include "inputs.hpp"

namespace {

constexpr std::size_t values = 4096;

template <class Block>
void quantize(benchmark::State& state)
{
    const auto x = qk_inputs::normal(values, 1.0f, 1);
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
    const auto blocks = qk::quantize<Block>(std::span<const float>(qk_inputs::normal(values, 1.0f, 2)));
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
    const auto w = qk::quantize<Block>(std::span<const float>(qk_inputs::normal(values, 1.0f, 3)));
    const auto a = qk::quantize<activation>(std::span<const float>(qk_inputs::normal(values, 1.0f, 4)));
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
BENCHMARK_TEMPLATE(quantize, qk::block_nvfp4);
BENCHMARK_TEMPLATE(quantize, qk::block_iq4_nl);
BENCHMARK_TEMPLATE(quantize, qk::block_iq4_xs);
BENCHMARK_TEMPLATE(dequantize, qk::block_q8_0);
BENCHMARK_TEMPLATE(dequantize, qk::block_q8_K);
BENCHMARK_TEMPLATE(dequantize, qk::block_mxfp4);
BENCHMARK_TEMPLATE(dequantize, qk::block_nvfp4);
BENCHMARK_TEMPLATE(dequantize, qk::block_iq4_nl);
BENCHMARK_TEMPLATE(dequantize, qk::block_iq4_xs);
// The dot products on every tag of qk::arch::all that this CPU runs (named dot<FORMAT>/TAG).
[[maybe_unused]] const bool dot_registered = [] {
    qk::for_each_runnable(qk::running_cpu(), []<class Tag>(Tag) {
        const std::string tag = qk::arch::name<Tag>();
        benchmark::RegisterBenchmark(("dot<Q8_0>/" + tag).c_str(), dot<qk::block_q8_0, Tag>);
        benchmark::RegisterBenchmark(("dot<MXFP4>/" + tag).c_str(), dot<qk::block_mxfp4, Tag>);
        benchmark::RegisterBenchmark(("dot<NVFP4>/" + tag).c_str(), dot<qk::block_nvfp4, Tag>);
        benchmark::RegisterBenchmark(("dot<IQ4_NL>/" + tag).c_str(), dot<qk::block_iq4_nl, Tag>);
        benchmark::RegisterBenchmark(("dot<IQ4_XS>/" + tag).c_str(), dot<qk::block_iq4_xs, Tag>);
    });
    return true;
}();

