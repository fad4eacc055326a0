// qk::backend::cpu::measure_read_bandwidth: the machine's streaming-read bandwidth, measured by
// summing a buffer far larger than the caches on a pool's threads. A mat-vec reads each weight
// once, so this is the ceiling its weight bytes per second can approach; benchmarks and
// `qk bench` report their mat-vec speed as a fraction of it, measured in the same run.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <span>
#include <vector>

#if __has_include(<unistd.h>)
#include <unistd.h>
#endif

#include "../../kernels/dispatch.hpp"
#include "../../kernels/large_buffer.hpp"
#include "../../kernels/target.hpp"
#include "thread_pool.hpp"

#if QK_HAS_X86_KERNELS
#include <immintrin.h>
#endif

namespace qk::backend::cpu {
namespace detail {

inline float sum_portable(const float* p, std::size_t n) noexcept
{
    // Four independent sums: one chain of dependent adds would be slower than the memory.
    float sums[4] = {};
    std::size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        for (int k = 0; k < 4; ++k) {
            sums[k] += p[i + static_cast<std::size_t>(k)];
        }
    }
    for (; i < n; ++i) {
        sums[0] += p[i];
    }
    return sums[0] + sums[1] + sums[2] + sums[3];
}

#if QK_HAS_X86_KERNELS
// Eight independent accumulators hide the add latency, so the loads are the only limit.
QK_TARGET_AVX2 inline float sum_avx2(const float* p, std::size_t n) noexcept
{
    __m256 acc[8];
    for (auto& a : acc) {
        a = _mm256_setzero_ps();
    }
    std::size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        for (int k = 0; k < 8; ++k) {
            acc[k] = _mm256_add_ps(acc[k], _mm256_loadu_ps(p + i + 8 * static_cast<std::size_t>(k)));
        }
    }
    for (int k = 1; k < 8; ++k) {
        acc[0] = _mm256_add_ps(acc[0], acc[k]);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc[0]);
    return sum_portable(lanes, 8) + sum_portable(p + i, n - i);
}
#endif

} // namespace detail

// The last-level cache the OS reports, in bytes (0 where it says nothing).
[[nodiscard]] inline std::size_t last_level_cache_bytes() noexcept
{
#if defined(_SC_LEVEL3_CACHE_SIZE)
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0) {
        return static_cast<std::size_t>(l3);
    }
#endif
#if defined(_SC_LEVEL2_CACHE_SIZE)
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l2 > 0) {
        return static_cast<std::size_t>(l2);
    }
#endif
    return 0;
}

// How much a memory measurement must read so that no cache serves it: 1 GiB, or four times the
// last-level cache where that is larger (servers report hundreds of MiB of L3).
[[nodiscard]] inline std::size_t streaming_bytes() noexcept
{
    return std::max(std::size_t{1} << 30, 4 * last_level_cache_bytes());
}

// A buffer for measure_read_bandwidth, streaming_bytes() by default, in a qk::detail::large_array
// (huge pages where the OS grants them, as the CPU context's weights get), so that the probe
// measures the best streaming read, not that of 4 KiB pages. Written so that every page is backed
// by its own memory (untouched pages all map one shared zero page, which stays in cache).
[[nodiscard]] inline qk::detail::large_array<float> make_bandwidth_buffer(std::size_t bytes = streaming_bytes())
{
    qk::detail::large_array<float> buffer(bytes / sizeof(float));
    std::fill_n(buffer.data(), buffer.size(), 1.0f);
    return buffer;
}

// Bytes per second of the fastest of `passes` full reads of `buffer`, split evenly over the
// pool's threads: with AVX2 loads where the CPU has them, else a portable loop.
[[nodiscard]] inline double measure_read_bandwidth(thread_pool& pool, std::span<const float> buffer, int passes = 5)
{
    [[maybe_unused]] const bool use_avx2 = runs<arch::avx2>(running_cpu());
    const std::size_t threads = pool.size();
    const std::size_t chunk = buffer.size() / threads;
    std::vector<float> sums(threads);
    volatile float observed = 0.0f; // the sums are read, so the loads cannot be optimized away
    double best = 0.0;
    for (int pass = 0; pass < passes; ++pass) {
        const auto start = std::chrono::steady_clock::now();
        pool.run(threads, [&](std::size_t t) {
            const float* p = buffer.data() + t * chunk;
#if QK_HAS_X86_KERNELS
            sums[t] = use_avx2 ? detail::sum_avx2(p, chunk) : detail::sum_portable(p, chunk);
#else
            sums[t] = detail::sum_portable(p, chunk);
#endif
        });
        const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
        for (float sum : sums) {
            observed = observed + sum;
        }
        best = std::max(best, static_cast<double>(chunk * threads * sizeof(float)) / elapsed.count());
    }
    return best;
}

} // namespace qk::backend::cpu
