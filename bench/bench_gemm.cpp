// Prompt-processing products: Y = W·X for 4096 x 4096 and 14336 x 4096 weights and 128 or 512
// activation columns, per weight format, on 1 and 2 threads: qk::gemm on the GGUF rows (one
// qk::dot per output value, dispatched tag), the CPU context's gemm on its own copy of the weights
// (packed tiles where the CPU has tile kernels; the AMX kernels for these column counts where the
// process may use them), qk::gemm on packed weights on every tag with tile kernels that the
// machine runs, on the tag's own kernels, and where AMX is usable the packed product on the AMX
// kernels (packed/amx). Reported: GFLOP/s (2 per multiply-add) and `peak_fraction`, the rate of
// int8 multiply-adds over the peak of the instruction the kernels multiply with (independent
// tdpbssd tiles of 16 x 16 x 64 on AMX, vpdpbusd chains with VNNI, vpmaddubsw otherwise),
// measured first on one core, times the threads.
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

// The same for vpmaddubsw on 256-bit registers (32 multiply-adds each), each chain feeding its
// int16 sums back in as the next unsigned operand.
[[gnu::noinline]] QK_TARGET_AVX2 double vpmaddubsw_seconds(long iterations)
{
    __m256i a0 = _mm256_set1_epi16(0), a1 = _mm256_set1_epi16(1), a2 = _mm256_set1_epi16(2), a3 = _mm256_set1_epi16(3);
    __m256i a4 = _mm256_set1_epi16(4), a5 = _mm256_set1_epi16(5), a6 = _mm256_set1_epi16(6), a7 = _mm256_set1_epi16(7);
    __m256i a8 = _mm256_set1_epi16(8), a9 = _mm256_set1_epi16(9), a10 = _mm256_set1_epi16(10), a11 = _mm256_set1_epi16(11);
    __m256i s = _mm256_set1_epi8(-5);
    __asm__("" : "+x"(s));
    const auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < iterations; ++i) {
        a0 = _mm256_maddubs_epi16(a0, s);
        a1 = _mm256_maddubs_epi16(a1, s);
        a2 = _mm256_maddubs_epi16(a2, s);
        a3 = _mm256_maddubs_epi16(a3, s);
        a4 = _mm256_maddubs_epi16(a4, s);
        a5 = _mm256_maddubs_epi16(a5, s);
        a6 = _mm256_maddubs_epi16(a6, s);
        a7 = _mm256_maddubs_epi16(a7, s);
        a8 = _mm256_maddubs_epi16(a8, s);
        a9 = _mm256_maddubs_epi16(a9, s);
        a10 = _mm256_maddubs_epi16(a10, s);
        a11 = _mm256_maddubs_epi16(a11, s);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const __m256i sum = _mm256_add_epi16(_mm256_add_epi16(_mm256_add_epi16(a0, a1), _mm256_add_epi16(a2, a3)),
                                         _mm256_add_epi16(_mm256_add_epi16(a4, a5), _mm256_add_epi16(a6, a7)));
    benchmark::DoNotOptimize(_mm256_add_epi16(sum, _mm256_add_epi16(_mm256_add_epi16(a8, a9), _mm256_add_epi16(a10, a11))));
    return seconds;
}

// And on 128-bit registers (16 multiply-adds each), the SSE4.2 tag's.
[[gnu::noinline]] QK_TARGET_SSE4_2 double pmaddubsw_seconds(long iterations)
{
    __m128i a[12];
    for (int i = 0; i < 12; ++i) {
        a[i] = _mm_set1_epi16(static_cast<short>(i));
    }
    __m128i s = _mm_set1_epi8(-5);
    __asm__("" : "+x"(s));
    const auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
        for (int k = 0; k < 12; ++k) {
            a[k] = _mm_maddubs_epi16(a[k], s);
        }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    __m128i sum = a[0];
    for (int k = 1; k < 12; ++k) {
        sum = _mm_add_epi16(sum, a[k]);
    }
    benchmark::DoNotOptimize(sum);
    return seconds;
}

#if defined(__x86_64__)
// tdpbssd on four independent accumulator tiles of 16 x 16 int32, each from 16 x 64 int8 by
// 64 x 16 int8 (16384 multiply-adds), the largest shape the tile unit takes. Needs
// qk::amx_usable().
[[gnu::noinline]] QK_TARGET_AMX double tdpbssd_seconds(long iterations)
{
    qk::kernels::amx_detail::tile_config config;
    for (std::size_t t = 0; t < 8; ++t) {
        config.rows[t] = 16;
        config.bytes_per_row[t] = 64;
    }
    alignas(64) static std::int8_t operand[16 * 64];
    const long stride = 64;
    __asm__ volatile("ldtilecfg %0" : : "m"(config));
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm4\n\ttileloadd (%0,%1,1), %%tmm5\n\ttileloadd (%0,%1,1), %%tmm6\n\t"
                     "tileloadd (%0,%1,1), %%tmm7\n\ttilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3"
                     :
                     : "r"(operand), "r"(stride)
                     : "memory");
    const auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < iterations; ++i) {
        __asm__ volatile("tdpbssd %%tmm6, %%tmm4, %%tmm0\n\ttdpbssd %%tmm6, %%tmm5, %%tmm1\n\ttdpbssd %%tmm7, %%tmm4, %%tmm2\n\t"
                         "tdpbssd %%tmm7, %%tmm5, %%tmm3" ::
                             : "memory");
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    __asm__ volatile("tilerelease" ::: "memory");
    return seconds;
}
#endif

// Multiply-adds per second of one core, the best of five runs.
template <class Measure>
double best_rate(Measure measure, double per_iteration, long iterations = 20'000'000)
{
    double best = 1e30;
    for (int run = 0; run < 5; ++run) {
        best = std::min(best, measure(iterations));
    }
    return per_iteration * static_cast<double>(iterations) / best;
}
#endif

// The int8 multiply-add peak of one core for kernels on Tag: vpdpbusd's on the VNNI tags,
// vpmaddubsw's on the other x86 tags (128-bit on SSE4.2); 0 where unmeasured.
template <class Tag>
double int8_peak()
{
#if QK_HAS_X86_KERNELS
    if constexpr (std::is_base_of_v<qk::arch::avx512vnni, Tag>) {
        static const double peak = best_rate(vpdpbusd_seconds, 12.0 * 64.0);
        return peak;
    } else if constexpr (std::is_base_of_v<qk::arch::avx2, Tag> || std::is_base_of_v<qk::arch::avx512bw, Tag>) {
        static const double peak = best_rate(vpmaddubsw_seconds, 12.0 * 32.0);
        return peak;
    } else if constexpr (std::is_base_of_v<qk::arch::sse4_2, Tag>) {
        static const double peak = best_rate(pmaddubsw_seconds, 12.0 * 16.0);
        return peak;
    }
#endif
    return 0.0;
}

double dispatched_int8_peak()
{
    return qk::dispatch([]<class Tag>(Tag) { return int8_peak<Tag>(); });
}

// The AMX tile unit's int8 multiply-add peak of one core; 0 where the process may not use it.
double amx_peak()
{
#if QK_HAS_X86_KERNELS && defined(__x86_64__)
    if (qk::amx_usable()) {
        static const double peak = best_rate(tdpbssd_seconds, 4.0 * 16 * 16 * 64, 1'000'000);
        return peak;
    }
#endif
    return 0.0;
}

// Whether the packed product of this many columns runs on the AMX kernels (packed_gemm.hpp).
template <class Block>
bool runs_amx(std::size_t columns)
{
    return qk::dispatch([&]<class Tag>(Tag) { return qk::detail::takes_amx<Block, Tag>(columns, cols); });
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

void report(benchmark::State& state, std::size_t rows, std::size_t columns, std::size_t threads, double seconds, double peak)
{
    const double macs = static_cast<double>(state.iterations()) * static_cast<double>(rows * cols * columns);
    state.counters["GFLOP/s"] = 2.0 * macs / seconds / 1e9;
    if (peak > 0) {
        state.counters["peak_fraction"] = macs / seconds / (peak * static_cast<double>(threads));
    }
}

template <class Block>
void gemm_plain(benchmark::State& state)
{
    const auto rows = static_cast<std::size_t>(state.range(0));
    const auto columns = static_cast<std::size_t>(state.range(1));
    const auto threads = static_cast<std::size_t>(state.range(2));
    const double peak = dispatched_int8_peak();
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
    report(state, rows, columns, threads, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), peak);
}

template <class Block>
void gemm_context(benchmark::State& state)
{
    const auto rows = static_cast<std::size_t>(state.range(0));
    const auto columns = static_cast<std::size_t>(state.range(1));
    const auto threads = static_cast<std::size_t>(state.range(2));
    qk::backend::cpu::context context(threads);
    const auto m = context.upload<Block>(weights<Block>(rows), rows, cols);
    const bool amx = m.is_packed() && runs_amx<Block>(columns);
    const double peak = amx ? amx_peak() : dispatched_int8_peak();
    const auto x = qk_inputs::normal(columns * cols, 1.0f, 3);
    std::vector<float> y(rows * columns);
    context.gemm(m, columns, x, y); // the scratch grows once
    const auto start = std::chrono::steady_clock::now();
    for (auto _ : state) {
        context.gemm(m, columns, x, y);
        benchmark::DoNotOptimize(y.data());
    }
    report(state, rows, columns, threads, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), peak);
    state.SetLabel(m.is_packed() ? (amx ? "packed, AMX" : "packed") : "plain rows");
}

// qk::gemm on packed weights on one tag (every tag with tile kernels that the machine runs), on
// the tag's own kernels (Amx false) or, where the process may use them, the AMX kernels.
template <class Block, class Tag, bool Amx>
void gemm_packed(benchmark::State& state)
{
    const auto rows = static_cast<std::size_t>(state.range(0));
    const auto columns = static_cast<std::size_t>(state.range(1));
    const auto threads = static_cast<std::size_t>(state.range(2));
    const double peak = Amx ? amx_peak() : int8_peak<Tag>();
    const qk::packed_matrix<Block> m(weights<Block>(rows), rows, cols);
    thread_pool pool(threads);
    const auto x = qk_inputs::normal(columns * cols, 1.0f, 3);
    std::vector<float> y(rows * columns);
    std::vector<std::uint8_t> scratch;
    qk::detail::packed_gemm_on<Block, Tag>(m, columns, x, y.data(), pool, scratch, Amx);
    const auto start = std::chrono::steady_clock::now();
    for (auto _ : state) {
        qk::detail::packed_gemm_on<Block, Tag>(m, columns, x, y.data(), pool, scratch, Amx);
        benchmark::DoNotOptimize(y.data());
    }
    report(state, rows, columns, threads, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), peak);
}

void shapes(benchmark::internal::Benchmark* b)
{
    b->ArgsProduct({{4096, 14336}, {128, 512}, {1, 2}})->ArgNames({"rows", "columns", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

template <class Block>
void register_gemm()
{
    const std::string name(qk::format_traits<Block>::name);
    using function = void (*)(benchmark::State&);
    for (auto [f, path] : {std::pair<function, const char*>{gemm_context<Block>, "context"}, std::pair<function, const char*>{gemm_plain<Block>, "plain"}}) {
        shapes(benchmark::RegisterBenchmark(("gemm/" + name + "/" + path).c_str(), f));
    }
    qk::arch::all::for_each([&]<class Tag>(Tag) {
        if constexpr (qk::kernels::has_tile_kernels<Tag>) {
            if (qk::runs<Tag>(qk::running_cpu())) {
                shapes(benchmark::RegisterBenchmark(("gemm/" + name + "/packed/" + qk::arch::name<Tag>()).c_str(), gemm_packed<Block, Tag, false>));
            }
        }
    });
    if (runs_amx<Block>(qk::detail::amx_min_columns)) {
        qk::dispatch([&]<class Tag>(Tag) {
            shapes(benchmark::RegisterBenchmark(("gemm/" + name + "/packed/amx").c_str(), gemm_packed<Block, Tag, true>));
        });
    }
}

[[maybe_unused]] const bool registered = [] {
    register_gemm<qk::block_q8_0>();
    register_gemm<qk::block_mxfp4>();
    register_gemm<qk::block_iq4_nl>();
    register_gemm<qk::block_iq4_xs>();
    register_gemm<qk::block_nvfp4>();
    return true;
}();

} // namespace
