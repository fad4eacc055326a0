// Activation quantization (f32 -> Q8_0 and f32 -> Q8_K, run on every token before each mat-vec)
// on every tag this CPU runs, 4096 values in cache. `quantize` is the public
// qk::quantize (input checks included); `kernel` is the tag's kernel alone. Both report float
// bytes per second and ns_per_32: nanoseconds per 32 values.
#include <benchmark/benchmark.h>

#include <qkern.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "inputs.hpp"

namespace {

constexpr std::size_t values = 4096;

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
    const auto x = qk_inputs::normal(values, 1.0f, 11);
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
    const auto x = qk_inputs::normal(values, 1.0f, 12);
    std::vector<Block> y(values / qk::format_traits<Block>::block_size);
    for (auto _ : state) {
        qk::kernels::quantize<Arch>(x.data(), y.data(), y.size(), Arch{});
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    report(state);
}

// Every tag of qk::arch::all that this CPU runs (named quantize<FORMAT>/TAG and kernel<FORMAT>/TAG).
[[maybe_unused]] const bool registered = [] {
    qk::for_each_runnable(qk::running_cpu(), []<class Tag>(Tag) {
        const std::string tag = qk::arch::name<Tag>();
        benchmark::RegisterBenchmark(("quantize<Q8_0>/" + tag).c_str(), quantize<qk::block_q8_0, Tag>);
        benchmark::RegisterBenchmark(("quantize<Q8_K>/" + tag).c_str(), quantize<qk::block_q8_K, Tag>);
        benchmark::RegisterBenchmark(("kernel<Q8_0>/" + tag).c_str(), kernel<qk::block_q8_0, Tag>);
        benchmark::RegisterBenchmark(("kernel<Q8_K>/" + tag).c_str(), kernel<qk::block_q8_K, Tag>);
    });
    return true;
}();

} // namespace
