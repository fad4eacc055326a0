// Mat-vec throughput against the machine's memory bandwidth. First this binary measures the
// streaming-read bandwidth (an AVX2 sum over 1 GiB or four times the last-level cache the OS
// reports, whichever is larger, on 1 and 2 threads of the CPU pool); then a 14336 x 4096 gemv per
// weight format, rotating over copies of the weights as large in total, three ways: qk::gemv with
// no tag named (qk::arch::default_tag) and on the tag qk::dispatch picks (GGUF rows), and the CPU
// context's gemv (its own copy, packed where the CPU has tile kernels). Each reports weight bytes per second,
// `bandwidth_fraction`: that rate over the best streaming read of the same thread count in the
// run, and `paired_fraction`: the median, over rotations through the copies, of the rotation's
// rate over a streaming pass made just before it (see paired_probe). A mat-vec reads each weight
// once, so 1.0 is its ceiling. After each format's mat-vecs, `upload_14336x4096` times the
// context's upload of one such matrix (its own copy, packed where the CPU has tile kernels), in
// GGUF bytes per second: what loading a model costs per weight.
#include <benchmark/benchmark.h>

#include <kernels/dispatch.hpp>
#include <backends/cpu/context.hpp>
#include <backends/cpu/gemv.hpp>
#include <backends/cpu/read_bandwidth.hpp>


#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <typeinfo>
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

// Far beyond any cache, so every pass reads DRAM: at least 1 GiB and four times the last-level
// cache the OS reports.
std::size_t bench_bytes()
{
    return qk::backend::cpu::streaming_bytes();
}

const std::size_t stream_floats = bench_bytes() / sizeof(float);

std::span<const float> stream_array()
{
    // qk::backend::cpu's probe buffer: written (untouched pages all map the one zero page, which
    // stays cached) and in huge pages where the OS grants them.
    static const auto values = qk::backend::cpu::make_bandwidth_buffer(stream_floats * sizeof(float));
    return values.span();
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
    const auto values = stream_array();
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

// A matrix of 4-bit weights (~31 MB) would fit in a server's L3 and be served from it on every
// call after the first; a mat-vec in a model streams its weights from DRAM. Calls therefore
// rotate over copies at distinct addresses totalling bench_bytes().
template <class Block>
struct weight_set {
    std::size_t blocks_per_matrix = rows * cols / qk::format_traits<Block>::block_size;
    std::size_t copies;
    // In a large array (huge pages where the OS grants them), as the context keeps its copies.
    qk::detail::large_array<Block> blocks;

    // only_one: a single copy, to upload from.
    explicit weight_set(bool only_one = false)
        : copies(only_one ? 1 : (bench_bytes() + blocks_per_matrix * sizeof(Block) - 1) / (blocks_per_matrix * sizeof(Block))),
          blocks(blocks_per_matrix * copies)
    {
        const std::span<Block> values = blocks.span();
        std::memset(values.data(), 0, values.size_bytes());
        // Random bytes with finite scales: quantizing 58.7 M values with the IQ4 search would take
        // most of a minute, and the kernels' cost does not depend on the values.
        std::mt19937_64 rng(42);
        auto* raw = reinterpret_cast<unsigned char*>(values.data());
        const std::size_t matrix_bytes = blocks_per_matrix * sizeof(Block);
        for (std::size_t i = 0; i + 8 <= matrix_bytes; i += 8) {
            const std::uint64_t word = rng();
            std::memcpy(raw + i, &word, 8);
        }
        for (std::size_t b = 0; b < blocks_per_matrix; ++b) {
            if constexpr (std::is_same_v<Block, qk::block_mxfp4>) {
                values[b].e = static_cast<std::uint8_t>(118 + b % 16);
            } else if constexpr (std::is_same_v<Block, qk::block_nvfp4>) {
                for (std::size_t s = 0; s < 4; ++s) {
                    values[b].d[s] = static_cast<std::uint8_t>(0x28 + (b + s) % 32);
                }
            } else {
                values[b].d = qk::fp32_to_fp16(1e-3f * static_cast<float>(1 + b % 8));
            }
        }
        for (std::size_t copy = 1; copy < copies; ++copy) {
            std::memcpy(raw + copy * matrix_bytes, raw, matrix_bytes);
        }
    }

    [[nodiscard]] std::span<const Block> matrix(std::size_t copy) const
    {
        return blocks.span().subspan(copy % copies * blocks_per_matrix, blocks_per_matrix);
    }
};

// The copies of one format at a time (several GiB each on a large server): a benchmark of another
// format, or of the other layout, releases them first.
std::shared_ptr<void> current_set;
const std::type_info* current_type = nullptr;

template <class Set>
const Set& hold()
{
    if (current_type != &typeid(Set)) {
        current_set.reset();
        current_set = std::make_shared<Set>();
        current_type = &typeid(Set);
    }
    return *static_cast<const Set*>(current_set.get());
}

template <class Block>
const weight_set<Block>& weights()
{
    return hold<weight_set<Block>>();
}

// The CPU context's copies of the same matrix, made by uploading one and copying it.
template <class Block>
struct context_set {
    qk::backend::cpu::context uploader;
    std::vector<qk::backend::cpu::matrix<Block>> matrices;
    std::size_t bytes = 0;

    context_set()
    {
        const weight_set<Block> one_copy_source(true);
        const auto first = uploader.upload<Block>(one_copy_source.matrix(0), rows, cols);
        const std::size_t matrix_bytes = first.is_packed() ? first.packed().bytes() : first.blocks().size_bytes();
        const std::size_t copies = (bench_bytes() + matrix_bytes - 1) / matrix_bytes;
        matrices.assign(copies, first);
        bytes = matrix_bytes;
    }
};

// defaulted: no tag named (qk::arch::default_tag: the flags' tag, or chosen at run time in a build
// without -march); dispatched: qk::dispatch by hand around each call.
enum class tag_choice { defaulted, dispatched, context };

// The memory's pace drifts by tens of percent over a run on a shared host, which a probe taken
// once at the start cannot follow: before each rotation over the copies comes one streaming pass
// (outside the timing), and each rotation's mat-vec rate is divided by that pass's. The median
// of those ratios is `paired_fraction`; `bandwidth_fraction` stays against the run's best pass.
class paired_probe {
public:
    paired_probe(thread_pool& pool, std::size_t copies, double matrix_bytes) : pool_(pool), copies_(copies), matrix_bytes_(matrix_bytes) {}

    // Around each timed call: a streaming pass first where a rotation begins.
    void before_call(benchmark::State& state)
    {
        if (in_rotation_ == 0) {
            state.PauseTiming();
            const auto start = std::chrono::steady_clock::now();
            benchmark::DoNotOptimize(stream_pass(pool_));
            const double seconds = seconds_since(start);
            record_stream_pass(pool_.size(), seconds);
            pass_rate_ = static_cast<double>(stream_floats * sizeof(float)) / seconds;
            state.ResumeTiming();
        }
    }
    void after_call(double seconds)
    {
        total_seconds_ += seconds;
        rotation_seconds_ += seconds;
        if (++in_rotation_ == copies_) {
            ratios_.push_back(static_cast<double>(copies_) * matrix_bytes_ / rotation_seconds_ / pass_rate_);
            in_rotation_ = 0;
            rotation_seconds_ = 0;
        }
    }

    // The time of the calls alone, without the streaming passes.
    [[nodiscard]] double call_seconds() const noexcept { return total_seconds_; }
    // 0 when no rotation was completed (Google Benchmark's first, one-iteration runs).
    [[nodiscard]] double median_ratio()
    {
        if (ratios_.empty()) {
            return 0;
        }
        std::sort(ratios_.begin(), ratios_.end());
        return ratios_[ratios_.size() / 2];
    }

private:
    thread_pool& pool_;
    std::size_t copies_;
    double matrix_bytes_;
    std::size_t in_rotation_ = 0;
    double pass_rate_ = 0;
    double rotation_seconds_ = 0;
    double total_seconds_ = 0;
    std::vector<double> ratios_;
};

template <class Block, tag_choice choice>
void gemv(benchmark::State& state)
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    const auto threads = static_cast<std::size_t>(state.range(0));
    thread_pool& pool = pool_of(threads);
    const std::vector<float> x = qk_inputs::normal(cols, 1.0f, 1);
    std::vector<float> y(rows);
    std::vector<activation> scratch(qk::gemm_scratch_blocks<Block>(cols));
    double matrix_bytes = 0;
    std::size_t call = 0;
    std::optional<paired_probe> probe;
    if constexpr (choice == tag_choice::context) {
        const auto& set = hold<context_set<Block>>();
        qk::backend::cpu::context context(threads);
        matrix_bytes = static_cast<double>(set.bytes);
        for (const auto& m : set.matrices) { // one untimed pass: a virtual machine's host may back new pages lazily
            context.gemv(m, x, y);
        }
        probe.emplace(pool, set.matrices.size(), matrix_bytes);
        for (auto _ : state) {
            probe->before_call(state);
            const auto start = std::chrono::steady_clock::now();
            context.gemv(set.matrices[call++ % set.matrices.size()], x, y);
            benchmark::DoNotOptimize(y.data());
            benchmark::ClobberMemory();
            probe->after_call(seconds_since(start));
        }
        state.SetLabel(set.matrices.front().is_packed() ? "packed" : "plain rows");
    } else {
        const auto& set = weights<Block>();
        matrix_bytes = static_cast<double>(set.blocks_per_matrix * sizeof(Block));
        for (std::size_t copy = 0; copy < set.copies; ++copy) { // one untimed pass, as above
            qk::dispatch([&]<class Tag>(Tag) { qk::gemv<Block, Tag>(set.matrix(copy), rows, cols, x, y, pool, scratch); });
        }
        probe.emplace(pool, set.copies, matrix_bytes);
        for (auto _ : state) {
            probe->before_call(state);
            const auto start = std::chrono::steady_clock::now();
            const auto w = set.matrix(call++);
            if constexpr (choice == tag_choice::defaulted) {
                qk::gemv<Block>(w, rows, cols, x, y, pool, scratch);
            } else {
                qk::dispatch([&]<class Tag>(Tag) { qk::gemv<Block, Tag>(w, rows, cols, x, y, pool, scratch); });
            }
            benchmark::DoNotOptimize(y.data());
            benchmark::ClobberMemory();
            probe->after_call(seconds_since(start));
        }
    }
    const double bytes = static_cast<double>(state.iterations()) * matrix_bytes;
    state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
    // After the calls, whose paired passes may have raised the best.
    state.counters["bandwidth_fraction"] = bytes / probe->call_seconds() / stream_bandwidth(threads);
    state.counters["paired_fraction"] = probe->median_ratio();
}

// One GGUF matrix to upload from (hold() releases the mat-vec copies first).
template <class Block>
struct upload_source {
    weight_set<Block> one{true};
};

template <class Block>
void upload(benchmark::State& state)
{
    const std::span<const Block> w = hold<upload_source<Block>>().one.matrix(0);
    const qk::backend::cpu::context context(1);
    for (auto _ : state) {
        // Allocation and first touch of the copy included, as a model load pays them.
        const auto m = context.upload<Block>(w, rows, cols);
        benchmark::DoNotOptimize(&m);
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * w.size_bytes()));
}

template <class Block>
void register_gemv()
{
    const std::string name(qk::format_traits<Block>::name);
    const std::string dispatched = qk::dispatch([]<class Tag>(Tag) { return std::string(qk::arch::name<Tag>()); });
    const std::string defaulted = std::is_same_v<qk::arch::default_tag, qk::arch::runtime> ? "runtime=" + dispatched
                                                                                            : std::string(qk::arch::name<qk::arch::native>());
    benchmark::RegisterBenchmark(("gemv_14336x4096/" + name + "/default:" + defaulted).c_str(), gemv<Block, tag_choice::defaulted>)
        ->DenseRange(1, max_threads)
        ->ArgName("threads")
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("gemv_14336x4096/" + name + "/dispatch:" + dispatched).c_str(), gemv<Block, tag_choice::dispatched>)
        ->DenseRange(1, max_threads)
        ->ArgName("threads")
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("gemv_14336x4096/" + name + "/context").c_str(), gemv<Block, tag_choice::context>)
        ->DenseRange(1, max_threads)
        ->ArgName("threads")
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("upload_14336x4096/" + name).c_str(), upload<Block>)->UseRealTime()->Unit(benchmark::kMillisecond);
}

// Registration order is run order: the bandwidth first, so every gemv finds its reference.
[[maybe_unused]] const bool registered = [] {
    benchmark::RegisterBenchmark("stream_read", stream_read)
        ->DenseRange(1, max_threads)
        ->ArgName("threads")
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    register_gemv<qk::block_q8_0>();
    register_gemv<qk::block_mxfp4>();
    register_gemv<qk::block_nvfp4>();
    register_gemv<qk::block_iq4_nl>();
    register_gemv<qk::block_iq4_xs>();
    return true;
}();

} // namespace
