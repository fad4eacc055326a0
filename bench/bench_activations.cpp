// Activation quantization (f32 -> Q8_0 and f32 -> Q8_K, run on every token before each mat-vec)
// on the generic, sse4_2 and avx2 tags, 4096 values in cache. `quantize` is the public
// qk::quantize (input checks included); `kernel` is the tag's kernel alone. Both report float
// bytes per second and ns_per_32: nanoseconds per 32 values.
#include <benchmark/benchmark.h>

#include <qkern.hpp>

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace {

constexpr std::size_t values = 4096;

std::vector<float> activations(std::uint32_t seed)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(values);
    for (auto& v : x) {
        v = dist(rng);
    }
    return x;
}

// Skips (with a message) a tag the running CPU lacks.
template <class Arch>
bool runnable(benchmark::State& state)
{
    if (!qk::runs<Arch>(qk::running_cpu())) {
        state.SkipWithError("this CPU lacks the tag's instructions");
        return false;
    }
    return true;
}

void report(benchmark::State& state)
{
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * values * sizeof(float)));
    state.counters["ns_per_32"] = benchmark::Counter(static_cast<double>(state.iterations() * values / 32),
                                                     benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

template <class Block, class Arch>
void quantize(benchmark::State& state)
{
    if (!runnable<Arch>(state)) {
        return;
    }
    const auto x = activations(11);
    std::vector<Block> y(values / qk::format_traits<Block>::block_size);
    for (auto _ : state) {
        qk::quantize<Block, Arch>(x, std::span<Block>(y));
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    report(state);
}

template <class Block, class Arch>
void kernel(benchmark::State& state)
{
    if (!runnable<Arch>(state)) {
        return;
    }
    const auto x = activations(12);
    std::vector<Block> y(values / qk::format_traits<Block>::block_size);
    for (auto _ : state) {
        qk::kernels::quantize<Arch>(x.data(), y.data(), y.size(), Arch{});
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    report(state);
}

} // namespace

BENCHMARK_TEMPLATE(quantize, qk::block_q8_0, qk::arch::generic);
BENCHMARK_TEMPLATE(quantize, qk::block_q8_K, qk::arch::generic);
BENCHMARK_TEMPLATE(kernel, qk::block_q8_0, qk::arch::generic);
BENCHMARK_TEMPLATE(kernel, qk::block_q8_K, qk::arch::generic);
#if QK_HAS_X86_KERNELS
BENCHMARK_TEMPLATE(quantize, qk::block_q8_0, qk::arch::sse4_2);
BENCHMARK_TEMPLATE(quantize, qk::block_q8_K, qk::arch::sse4_2);
BENCHMARK_TEMPLATE(kernel, qk::block_q8_0, qk::arch::sse4_2);
BENCHMARK_TEMPLATE(kernel, qk::block_q8_K, qk::arch::sse4_2);
BENCHMARK_TEMPLATE(quantize, qk::block_q8_0, qk::arch::avx2);
BENCHMARK_TEMPLATE(quantize, qk::block_q8_K, qk::arch::avx2);
BENCHMARK_TEMPLATE(kernel, qk::block_q8_0, qk::arch::avx2);
BENCHMARK_TEMPLATE(kernel, qk::block_q8_K, qk::arch::avx2);
#endif
