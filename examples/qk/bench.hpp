// qk bench: dot products in cache on every tag this CPU runs, the 14336 x 4096 mat-vec on every
// thread count against the streaming-read bandwidth, and the prompt-processing product (4096 x
// 4096 weights times 128 columns, packed where the CPU has tile kernels); or the mat-vec on the
// Vulkan device. A brief look; bench/ holds the full suites. `qk bench FILE.gguf` times the
// mat-vec over a model's own weights instead (bench_model.hpp, included at the end).
#pragma once

#include "common.hpp"
#include "files.hpp"
#include "info.hpp"
#include "inputs.hpp" // tests/inputs.hpp: the seeded inputs the tests use too

#include <backends/cpu/read_bandwidth.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

namespace qk_tool {

// ---------------------------------------------------------------------------------------------
// qk bench: the kernels' speed on this machine, briefly (bench/ holds the full Google Benchmark
// suites). Mat-vec speed is reported against the streaming-read bandwidth measured in the same
// run, since a mat-vec reads each weight once and that bandwidth is its ceiling.

struct bench_options {
    std::string backend = "cpu";
    std::string json;
    double seconds = 0.05;
    std::vector<std::size_t> threads{1, 2};
    bool threads_given = false; // a model file's default is every thread count up to the machine's
    std::string model;          // a GGUF file: time the mat-vec over its weights (bench_model.hpp)
};

struct measurement {
    std::string op;
    std::string format;
    std::string arch;
    std::size_t threads = 1;
    double ns_per_block = 0.0;
    double ns_per_32 = 0.0;
    double gb_per_s = 0.0;
    double bandwidth_fraction = -1.0; // gemv only
    double gflops = 0.0;              // gemm only
};

// Seconds per call of f: calls are timed in batches grown until a batch takes a tenth of the
// budget, then the fastest of several batches counts (the machine may be shared).
template <class F>
double seconds_per_call(F&& f, double budget)
{
    using clock = std::chrono::steady_clock;
    const auto time_batch = [&](std::size_t calls) {
        const auto start = clock::now();
        for (std::size_t i = 0; i < calls; ++i) {
            f();
        }
        return std::chrono::duration<double>(clock::now() - start).count();
    };
    std::size_t calls = 1;
    double elapsed = time_batch(calls);
    while (elapsed < budget / 10 && calls < (std::size_t{1} << 30)) {
        calls *= 2;
        elapsed = time_batch(calls);
    }
    double best = elapsed / static_cast<double>(calls);
    for (int batch = 0; batch < 5; ++batch) {
        best = std::min(best, time_batch(calls) / static_cast<double>(calls));
    }
    return best;
}

class progress_line {
public:
    explicit progress_line(std::size_t total) : total_(total) {}
    void step(const std::string& label)
    {
        fmt::print(stderr, "\r[{}/{}] {:<48}", ++done_, total_, label);
        std::fflush(stderr);
    }
    ~progress_line() { fmt::print(stderr, "\r{:<64}\r", ""); }

private:
    std::size_t total_;
    std::size_t done_ = 0;
};

inline std::vector<measurement> run_benchmarks(const bench_options& opt)
{
    constexpr std::size_t dot_values = 4096;
    constexpr std::size_t rows = 14336;
    constexpr std::size_t cols = 4096;
    std::size_t tags = 0;
    qk::for_each_runnable(qk::running_cpu(), [&](auto) { ++tags; });
    progress_line progress(opt.threads.size() * (1 + 2 * 4) + 4 * tags);

    std::vector<measurement> results;
    std::vector<double> bandwidth(opt.threads.size());
    {
        const auto buffer = qk::backend::cpu::make_bandwidth_buffer();
        for (std::size_t i = 0; i < opt.threads.size(); ++i) {
            progress.step(fmt::format("streaming read, {} thread(s)", opt.threads[i]));
            qk::backend::cpu::thread_pool pool(opt.threads[i]);
            bandwidth[i] = qk::backend::cpu::measure_read_bandwidth(pool, buffer.span());
            results.push_back({"read", "f32", "", opt.threads[i], 0.0, 0.0, bandwidth[i] / 1e9, 1.0});
        }
    }

    const auto bench_format = [&]<class Block>(std::type_identity<Block>) {
        if constexpr (qk::weight_format<Block>) {
            using activation = typename qk::format_traits<Block>::vec_dot_type;
            constexpr std::size_t size = qk::format_traits<Block>::block_size;
            const std::string name(qk::format_traits<Block>::name);

            const auto w = qk_inputs::random_blocks_fixed_scale<Block>(dot_values / size, 1);
            const auto a = qk_inputs::random_blocks_fixed_scale<activation>(dot_values / qk::format_traits<activation>::block_size, 2);
            qk::for_each_runnable(qk::running_cpu(), [&]<class Tag>(Tag) {
                progress.step(fmt::format("dot {} on {}", name, qk::arch::name<Tag>()));
                float sink = 0.0f;
                const double seconds = seconds_per_call([&] { sink += qk::dot<Block, Tag>(w, a); }, opt.seconds);
                if (!std::isfinite(sink)) {
                    fmt::print(stderr, "\n");
                }
                const double ns = seconds * 1e9;
                results.push_back({"dot", name, qk::arch::name<Tag>(), 1, ns / static_cast<double>(w.size()),
                                   ns / static_cast<double>(dot_values / 32), static_cast<double>(w.size() * sizeof(Block)) / seconds / 1e9, -1.0});
            });

            // Copies of the matrix totalling the bandwidth probe's size (1 GiB, or four times the
            // last-level cache the OS reports), so that no cache holds them; each call reads the
            // next copy. One matrix is drawn and copied: drawing gigabytes would take minutes.
            const std::size_t matrix_blocks = rows * cols / size;
            const std::size_t copies = std::max<std::size_t>(1, (qk::backend::cpu::streaming_bytes() + matrix_blocks * sizeof(Block) - 1) /
                                                                    (matrix_blocks * sizeof(Block)));
            const auto one = qk_inputs::random_blocks_fixed_scale<Block>(matrix_blocks, 3);
            // In a large buffer (huge pages where the OS grants them), as the CPU context keeps
            // its weights, and as the bandwidth probe reads.
            qk::detail::large_array<Block> matrices(copies * matrix_blocks);
            for (std::size_t copy = 0; copy < copies; ++copy) {
                std::copy(one.begin(), one.end(), matrices.data() + copy * matrix_blocks);
            }
            std::size_t next = 0;
            std::vector<float> x(cols);
            for (std::size_t i = 0; i < cols; ++i) {
                x[i] = static_cast<float>(i % 17) - 8.0f;
            }
            std::vector<float> y(rows);
            std::vector<activation> scratch(cols / qk::format_traits<activation>::block_size);
            for (std::size_t i = 0; i < opt.threads.size(); ++i) {
                qk::backend::cpu::thread_pool pool(opt.threads[i]);
                qk::dispatch([&]<class Tag>(Tag) {
                    progress.step(fmt::format("gemv {} on {}, {} thread(s)", name, qk::arch::name<Tag>(), opt.threads[i]));
                    const double seconds = seconds_per_call(
                        [&] {
                            const auto matrix = std::as_const(matrices).span().subspan(next * matrix_blocks, matrix_blocks);
                            next = (next + 1) % copies;
                            qk::gemv<Block, Tag>(matrix, rows, cols, x, y, pool, std::span<activation>(scratch));
                        },
                        4 * opt.seconds);
                    const double bytes_per_second = static_cast<double>(matrix_blocks * sizeof(Block)) / seconds;
                    results.push_back({"gemv", name, qk::arch::name<Tag>(), opt.threads[i],
                                       seconds * 1e9 / static_cast<double>(matrix_blocks), seconds * 1e9 / static_cast<double>(rows * cols / 32),
                                       bytes_per_second / 1e9, bytes_per_second / bandwidth[i]});
                });
            }

            // Prompt processing: the first 4096 rows times 128 activation columns, on weights packed
            // in tiles where the dispatched tag has tile kernels (as the CPU context keeps them),
            // else on the rows. ns/32 is per 32 multiply-adds.
            constexpr std::size_t gemm_rows = 4096;
            constexpr std::size_t columns = 128;
            const auto weights = std::span<const Block>(one).first(gemm_rows * cols / size);
            const auto x_columns = qk_inputs::normal(columns * cols, 1.0f, 4);
            std::vector<float> y_columns(gemm_rows * columns);
            qk::dispatch([&]<class Tag>(Tag) {
                constexpr bool packed = qk::kernels::has_tile_kernels<Tag>;
                const qk::packed_matrix<Block> tiles = packed ? qk::packed_matrix<Block>(weights, gemm_rows, cols) : qk::packed_matrix<Block>();
                std::vector<std::uint8_t> packed_scratch;
                std::vector<activation> row_scratch(qk::gemm_scratch_blocks<Block>(cols, columns));
                for (std::size_t i = 0; i < opt.threads.size(); ++i) {
                    qk::backend::cpu::thread_pool pool(opt.threads[i]);
                    const std::string arch = std::string(qk::arch::name<Tag>()) + (packed ? " packed" : "");
                    progress.step(fmt::format("gemm {} on {}, {} thread(s)", name, arch, opt.threads[i]));
                    const double seconds = seconds_per_call(
                        [&] {
                            if constexpr (packed) {
                                qk::gemm<Block, Tag>(tiles, columns, x_columns, y_columns, pool, packed_scratch);
                            } else {
                                qk::gemm<Block, Tag>(weights, gemm_rows, cols, columns, x_columns, y_columns, pool, row_scratch);
                            }
                        },
                        4 * opt.seconds);
                    const double products = static_cast<double>(gemm_rows * cols * columns);
                    measurement m{"gemm", name, arch, opt.threads[i], seconds * 1e9 / (products / size), seconds * 1e9 / (products / 32), 0.0, -1.0};
                    m.gflops = 2.0 * products / seconds / 1e9;
                    results.push_back(m);
                }
            });
        }
    };
    for (qk::format f : qk::all_formats) {
        qk::visit_format(f, bench_format);
    }
    return results;
}

// qk bench --backend vulkan: the device's streaming read, then the mat-vec per format on resident
// weights (14336 x 4096, float activations), against that bandwidth.
inline std::vector<measurement> run_vulkan_benchmarks([[maybe_unused]] const bench_options& opt)
{
    std::vector<measurement> results;
#if defined(QKERN_ENABLE_VULKAN)
    namespace vk = qk::backend::vulkan;
    constexpr std::size_t rows = 14336;
    constexpr std::size_t cols = 4096;
    const vk::device dev;
    const std::string arch = "vulkan";
    progress_line progress(1 + 4);
    progress.step(fmt::format("streaming read on {}", dev.facts().name));
    const double bandwidth = vk::measure_read_bandwidth(dev);
    results.push_back({"read", "f32", arch, 0, 0.0, 0.0, bandwidth / 1e9, 1.0});
    vk::gemv_workspace ws(dev);
    std::vector<float> x(cols);
    for (std::size_t i = 0; i < cols; ++i) {
        x[i] = static_cast<float>(i % 17) - 8.0f;
    }
    std::vector<float> y(rows);
    const auto bench_format = [&]<class Block>(std::type_identity<Block>) {
        if constexpr (qk::weight_format<Block>) {
            const std::string name(qk::format_traits<Block>::name);
            progress.step(fmt::format("gemv {} on {}", name, dev.facts().name));
            const std::size_t blocks = rows * cols / qk::format_traits<Block>::block_size;
            const auto m =
                vk::upload_matrix<Block>(dev, std::span<const Block>(qk_inputs::random_blocks_fixed_scale<Block>(blocks, 3)), rows, cols);
            const double seconds = seconds_per_call([&] { vk::gemv(dev, ws, m, x, y); }, 4 * opt.seconds);
            const double bytes_per_second = static_cast<double>(m.bytes()) / seconds;
            results.push_back({"gemv", name, arch, 0, seconds * 1e9 / static_cast<double>(blocks),
                               seconds * 1e9 / static_cast<double>(rows * cols / 32), bytes_per_second / 1e9, bytes_per_second / bandwidth});
        }
    };
    for (qk::format f : qk::all_formats) {
        qk::visit_format(f, bench_format);
    }
    fmt::print("  bench device   {} (threads 0: the device; gemv times include the upload of x and download of y)\n",
               dev.facts().name);
#endif
    return results;
}

inline void print_benchmarks(const std::vector<measurement>& results)
{
    fmt::print("{:<5} {:<7} {:<17} {:>7} {:>10} {:>9} {:>8} {:>8}\n", "op", "format", "arch", "threads", "ns/block", "ns/32", "GB/s",
               "% of bw");
    for (const measurement& m : results) {
        const std::string fraction = m.bandwidth_fraction >= 0 ? fmt::format("{:.1f}%", 100.0 * m.bandwidth_fraction) : "";
        if (m.op == "read") {
            fmt::print("{:<5} {:<7} {:<17} {:>7} {:>10} {:>9} {:>8.2f} {:>8}\n", m.op, m.format,
                       m.arch.empty() ? "streaming" : m.arch + " streaming", m.threads, "", "", m.gb_per_s, "");
        } else if (m.op == "gemm") {
            fmt::print("{:<5} {:<7} {:<17} {:>7} {:>10.3f} {:>9.4f} {:>8} {:>8}  {:.1f} GFLOP/s\n", m.op, m.format, m.arch, m.threads,
                       m.ns_per_block, m.ns_per_32, "", "", m.gflops);
        } else {
            fmt::print("{:<5} {:<7} {:<17} {:>7} {:>10.3f} {:>9.3f} {:>8.2f} {:>8}\n", m.op, m.format, m.arch, m.threads, m.ns_per_block,
                       m.ns_per_32, m.gb_per_s, fraction);
        }
    }
}

inline void write_benchmarks_json(const std::string& path, const std::vector<measurement>& results)
{
    std::string text = "[\n";
    for (std::size_t i = 0; i < results.size(); ++i) {
        const measurement& m = results[i];
        if (m.op == "read") {
            text += m.arch.empty() ? fmt::format(R"(  {{"op": "read", "threads": {}, "gb_per_s": {:.4f}}})", m.threads, m.gb_per_s)
                                   : fmt::format(R"(  {{"op": "read", "arch": "{}", "threads": {}, "gb_per_s": {:.4f}}})", m.arch,
                                                 m.threads, m.gb_per_s);
        } else if (m.op == "gemm") {
            text += fmt::format(R"(  {{"op": "gemm", "format": "{}", "arch": "{}", "threads": {}, "ns_per_block": {:.4f}, "ns_per_32": {:.5f}, "gflops": {:.3f}}})",
                                m.format, m.arch, m.threads, m.ns_per_block, m.ns_per_32, m.gflops);
        } else {
            text += fmt::format(R"(  {{"op": "{}", "format": "{}", "arch": "{}", "threads": {}, "ns_per_block": {:.4f}, "ns_per_32": {:.4f}, "gb_per_s": {:.4f})",
                                m.op, m.format, m.arch, m.threads, m.ns_per_block, m.ns_per_32, m.gb_per_s);
            text += m.op == "gemv" ? fmt::format(R"(, "bandwidth_fraction": {:.4f}}})", m.bandwidth_fraction) : std::string("}");
        }
        text += i + 1 < results.size() ? ",\n" : "\n";
    }
    text += "]\n";
    write_file(path, std::span<const char>(text.data(), text.size()));
}

// Defined in bench_model.hpp, which needs the options and the timing above.
inline int run_model_bench(const bench_options& opt);

inline CLI::App* add_bench(CLI::App& app, bench_options& opt)
{
    CLI::App* cmd = app.add_subcommand("bench", "measure the kernels briefly: dot products in cache on every tag this CPU runs, "
                                                "mat-vec 14336 x 4096 against the streaming-read bandwidth, "
                                                "gemm 4096 x 4096 times 128 columns in GFLOP/s; or, given a GGUF model file, "
                                                "the mat-vec over its weights and the tokens/s they allow");
    cmd->add_option("model", opt.model,
                    "a GGUF model file: time the mat-vec over each of its 2-D (and 3-D) tensors in a weight format qkern has kernels for, "
                    "per format and shape and as one token's pass over all of them, on the CPU");
    cmd->add_option("--json", opt.json, "also write the measurements as a JSON array to this file");
    cmd->add_option("--backend", opt.backend, "cpu, or vulkan: the mat-vec on the Vulkan device (QKERN_VULKAN_DEVICE picks one)")
        ->capture_default_str();
    cmd->add_option("--seconds", opt.seconds, "time budget of one dot measurement (mat-vec, gemm, a model's groups and passes: 4x)")->check(CLI::Range(0.001, 10.0));
    CLI::Option* threads =
        cmd->add_option("--threads", opt.threads, "thread counts for mat-vec, gemm and bandwidth (default: 1 2; with a model file: 1, 2, 4, ... "
                                                  "and this machine's hardware threads)")
            ->check(CLI::Range(1, 1024));
    cmd->callback([&opt, threads] { opt.threads_given = threads->count() > 0; });
    cmd->footer("With a model file, each group of tensors of one format and shape is timed in turn (each call reads the next tensor "
                "of the group) and so is the whole model (one mat-vec over every tensor, in file order, as one token reads them), "
                "in GB/s and as a fraction of the streaming read; the whole model also as tokens/s, measured and as the "
                "streaming bandwidth allows (bandwidth / weight bytes). Groups smaller than the streaming read are marked "
                "\"in cache?\": the caches may serve them, so their fraction can pass 100%. --threads takes every number after it: give the "
                "file first (qk bench FILE.gguf --threads 1 4) or end the list with --.");
    return cmd;
}

inline int run_bench(const bench_options& opt)
{
    if (!opt.model.empty()) {
        return run_model_bench(opt);
    }
    check_backend(opt.backend);
    print_info();
    const auto results = opt.backend == "vulkan" ? run_vulkan_benchmarks(opt) : run_benchmarks(opt);
    fmt::print("\n");
    print_benchmarks(results);
    if (!opt.json.empty()) {
        write_benchmarks_json(opt.json, results);
    }
    return 0;
}

} // namespace qk_tool

#include "bench_model.hpp"
