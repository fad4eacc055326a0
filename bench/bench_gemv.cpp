// Mat-vec throughput against the machine's memory bandwidth. First this binary measures the
// streaming-read bandwidth (an AVX2 sum of 256 MiB, on 1 and 2 threads of the CPU pool); then a
// 14336 x 4096 gemv per weight format, on qk::arch::native and on the tag qk::dispatch picks,
// reports weight bytes per second and `bandwidth_fraction`: that rate over the streaming-read
// bandwidth of the same thread count. A mat-vec reads each weight once, so 1.0 is its ceiling.
#include <benchmark/benchmark.h>

#include <kernels/dispatch.hpp>
#include <backends/cpu/gemv.hpp>
#include <backends/cpu/read_bandwidth.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "inputs.hpp"

#if QK_HAS_X86_KERNELS
#include <immintrin.h>
#endif

namespace {

using qk::backend::cpu::thread_pool;

constexpr std::size_t max_threads = 2;

// One pool per thread count, created on first use: pools are meant to be reused.
thread_pool& pool_of(std::size_t threads)
{
    static std::array<std::unique_ptr<thread_pool>, max_threads + 1> pools;
    if (!pools[threads]) {
        pools[threads] = std::make_unique<thread_pool>(threads);
    }
    return *pools[threads];
}

// ---- (a) streaming-read bandwidth -------------------------------------------------------------

// Far beyond any cache, so every pass reads DRAM.
constexpr std::size_t stream_floats = std::size_t{256} << 20 >> 2;

const std::vector<float>& stream_array()
{
    // Written, not just allocated: untouched pages all map the one zero page, which stays cached.
    static const std::vector<float> values(stream_floats, 1.0f);
    return values;
}

// The loops of qk::backend::cpu::measure_read_bandwidth, timed here by Google Benchmark.
float sum(const float* p, std::size_t n)
{
#if QK_HAS_X86_KERNELS
    static const bool has_avx2 = qk::runs<qk::arch::avx2>(qk::running_cpu());
    if (has_avx2) {
        return qk::backend::cpu::detail::sum_avx2(p, n);
    }
#endif
    return qk::backend::cpu::detail::sum_portable(p, n);
}

// Reads the whole array once, split into one contiguous part per thread.
float stream_pass(thread_pool& pool)
{
    const auto& values = stream_array();
    const std::size_t parts = pool.size();
    std::array<float, max_threads> partial{};
    pool.run(parts, [&](std::size_t part) {
        const std::size_t begin = values.size() * part / parts;
        const std::size_t end = values.size() * (part + 1) / parts;
        partial[part] = sum(values.data() + begin, end - begin);
    });
    float total = 0.0f;
    for (std::size_t part = 0; part < parts; ++part) {
        total += partial[part];
    }
    return total;
}

double seconds_since(std::chrono::steady_clock::time_point start)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The best pass seen per thread count, in bytes per second: on a shared machine the fastest
// pass is the least disturbed one, so it is the best estimate of what the memory can deliver.
std::array<double, max_threads + 1> best_stream_bandwidth{};

void record_stream_pass(std::size_t threads, double seconds)
{
    best_stream_bandwidth[threads] = std::max(best_stream_bandwidth[threads], static_cast<double>(stream_floats * sizeof(float)) / seconds);
}

void stream_read(benchmark::State& state)
{
    const auto threads = static_cast<std::size_t>(state.range(0));
    thread_pool& pool = pool_of(threads);
    stream_array();
    for (auto _ : state) {
        const auto start = std::chrono::steady_clock::now();
        benchmark::DoNotOptimize(stream_pass(pool));
        record_stream_pass(threads, seconds_since(start));
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * stream_floats * sizeof(float)));
    state.counters["best_GB/s"] = best_stream_bandwidth[threads] / 1e9;
}

// For a gemv run on its own (e.g. with --benchmark_filter): measure the bandwidth it needs.
double stream_bandwidth(std::size_t threads)
{
    if (best_stream_bandwidth[threads] == 0) {
        for (int pass = 0; pass < 5; ++pass) {
            const auto start = std::chrono::steady_clock::now();
            benchmark::DoNotOptimize(stream_pass(pool_of(threads)));
            record_stream_pass(threads, seconds_since(start));
        }
    }
    return best_stream_bandwidth[threads];
}

// ---- (b) mat-vec -----------------------------------------------------------------------------

constexpr std::size_t rows = 14336;
constexpr std::size_t cols = 4096;

// A matrix of 4-bit weights (~31 MB) would fit in this class of machine's L3 (32 MB) and
// be served from it on every call after the first; a mat-vec in a model streams its weights
// from DRAM. Calls therefore rotate over copies at distinct addresses totalling >= 128 MiB.
constexpr std::size_t rotation_bytes = std::size_t{128} << 20;

template <class Block>
struct weight_set {
    std::size_t blocks_per_matrix = rows * cols / qk::format_traits<Block>::block_size;
    std::size_t copies = (rotation_bytes + blocks_per_matrix * sizeof(Block) - 1) / (blocks_per_matrix * sizeof(Block));
    std::vector<Block> blocks;

    weight_set() : blocks(blocks_per_matrix * copies)
    {
        // Random bytes with finite scales: quantizing 58.7 M values with the IQ4 search would take
        // most of a minute, and the kernels' cost does not depend on the values.
        std::mt19937_64 rng(42);
        auto* raw = reinterpret_cast<unsigned char*>(blocks.data());
        const std::size_t matrix_bytes = blocks_per_matrix * sizeof(Block);
        for (std::size_t i = 0; i + 8 <= matrix_bytes; i += 8) {
            const std::uint64_t word = rng();
            std::memcpy(raw + i, &word, 8);
        }
        for (std::size_t b = 0; b < blocks_per_matrix; ++b) {
            if constexpr (std::is_same_v<Block, qk::block_mxfp4>) {
                blocks[b].e = static_cast<std::uint8_t>(118 + b % 16);
            } else {
                blocks[b].d = qk::fp32_to_fp16(1e-3f * static_cast<float>(1 + b % 8));
            }
        }
        for (std::size_t copy = 1; copy < copies; ++copy) {
            std::memcpy(raw + copy * matrix_bytes, raw, matrix_bytes);
        }
    }

    [[nodiscard]] std::span<const Block> matrix(std::size_t copy) const
    {
        return std::span<const Block>(blocks).subspan(copy % copies * blocks_per_matrix, blocks_per_matrix);
    }
};

template <class Block>
const weight_set<Block>& weights()
{
    static const weight_set<Block> set;
    return set;
}

enum class tag_choice { native, dispatched };

template <class Block, tag_choice choice>
void gemv(benchmark::State& state)
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    const auto threads = static_cast<std::size_t>(state.range(0));
    thread_pool& pool = pool_of(threads);
    const double bandwidth = stream_bandwidth(threads);
    const auto& set = weights<Block>();
    const std::vector<float> x = qk_inputs::normal(cols, 1.0f, 1);
    std::vector<float> y(rows);
    std::vector<activation> scratch(qk::gemm_scratch_blocks<Block>(cols));

    std::size_t call = 0;
    const auto start = std::chrono::steady_clock::now();
    for (auto _ : state) {
        const auto w = set.matrix(call++);
        if constexpr (choice == tag_choice::native) {
            qk::gemv<Block>(w, rows, cols, x, y, pool, scratch);
        } else {
            qk::dispatch([&]<class Tag>(Tag) { qk::gemv<Block, Tag>(w, rows, cols, x, y, pool, scratch); });
        }
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    const double seconds = seconds_since(start);
    const double bytes = static_cast<double>(state.iterations()) * static_cast<double>(set.blocks_per_matrix * sizeof(Block));
    state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
    state.counters["bandwidth_fraction"] = bytes / seconds / bandwidth;
}

template <class Block>
void register_gemv()
{
    const std::string name(qk::format_traits<Block>::name);
    const std::string dispatched = qk::dispatch([]<class Tag>(Tag) { return std::string(qk::arch::name<Tag>()); });
    benchmark::RegisterBenchmark(("gemv_14336x4096/" + name + "/native:" + qk::arch::name<qk::arch::native>()).c_str(),
                                 gemv<Block, tag_choice::native>)
        ->DenseRange(1, max_threads)
        ->ArgName("threads")
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("gemv_14336x4096/" + name + "/dispatch:" + dispatched).c_str(), gemv<Block, tag_choice::dispatched>)
        ->DenseRange(1, max_threads)
        ->ArgName("threads")
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
}

// Registration order is run order: the bandwidth first, so every gemv finds its reference.
[[maybe_unused]] const bool registered = [] {
    benchmark::RegisterBenchmark("stream_read_256MiB", stream_read)
        ->DenseRange(1, max_threads)
        ->ArgName("threads")
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    register_gemv<qk::block_q8_0>();
    register_gemv<qk::block_mxfp4>();
    register_gemv<qk::block_iq4_nl>();
    register_gemv<qk::block_iq4_xs>();
    return true;
}();

} // namespace
