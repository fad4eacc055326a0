// qk bench: dot products in cache on every tag this CPU runs, the 14336 x 4096 mat-vec on every
// thread count against the streaming-read bandwidth, and the prompt-processing product (4096 x
// 4096 weights times 128 columns, packed where the CPU has tile kernels); or the mat-vec on the
// Vulkan device. A brief look; bench/ holds the full suites. `qk bench FILE.gguf` times the
// mat-vec over a model's own weights instead (bench_model.hpp, included at the end).
#pragma once

#include "common.hpp"
#include "files.hpp"
#include "info.hpp"
#include "progress.hpp"
#include "inputs.hpp" // tests/inputs.hpp: the seeded inputs the tests use too

#include <backends/cpu/read_bandwidth.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
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
    std::size_t repetitions = 1;
    std::string model;          // a GGUF file: time the mat-vec over its weights (bench_model.hpp)
};

// One figure over the repetitions of a measurement, as llama-bench reports its mean ± stddev: the
// stddev is the sample's (n - 1), 0 for a single repetition.
struct spread {
    double mean = 0.0;
    double stddev = 0.0;
    double min = 0.0;
    double max = 0.0;

    // The same figure in other units (a positive factor: seconds per call to ns per 32 values).
    [[nodiscard]] spread scaled(double factor) const { return {mean * factor, stddev * factor, min * factor, max * factor}; }
};

// measure() repeated, each time a whole measurement (calibration included), so that the spread
// shows how much a figure moves from one run to the next, which one run cannot.
template <class F>
spread repeated(std::size_t repetitions, F&& measure)
{
    std::vector<double> values;
    for (std::size_t r = 0; r < std::max<std::size_t>(repetitions, 1); ++r) {
        values.push_back(measure());
    }
    const double n = static_cast<double>(values.size());
    spread s;
    s.min = *std::ranges::min_element(values);
    s.max = *std::ranges::max_element(values);
    for (const double v : values) {
        s.mean += v / n;
    }
    if (values.size() > 1) {
        double squares = 0.0;
        for (const double v : values) {
            squares += (v - s.mean) * (v - s.mean);
        }
        s.stddev = std::sqrt(squares / (n - 1));
    }
    return s;
}

// One row of the table and one entry of the JSON's results. The figures come from the mean time
// per call (read: they are the mean bandwidth); stats is the spread of the figure `measure` names.
struct measurement {
    std::string op;
    std::string format;
    std::string arch;
    std::size_t threads = 1;
    bool device = false;            // on the Vulkan device: threads is then 0 and means nothing
    std::vector<std::size_t> shape; // read: bytes per pass; dot: values; gemv: rows, cols; gemm: rows, cols, columns
    double ns_per_block = 0.0;
    double ns_per_32 = 0.0;
    double gb_per_s = 0.0;
    double bandwidth_fraction = -1.0; // gemv only
    double gflops = 0.0;              // gemm only
    std::string measure;              // "gb_per_s" (read) or "ns_per_32"
    spread stats;
};

inline measurement read_measurement(std::string arch, std::size_t threads, std::size_t bytes, const spread& gb_per_s)
{
    measurement m;
    m.op = "read";
    m.format = "f32";
    m.arch = std::move(arch);
    m.threads = threads;
    m.shape = {bytes};
    m.gb_per_s = gb_per_s.mean;
    m.bandwidth_fraction = 1.0;
    m.measure = "gb_per_s";
    m.stats = gb_per_s;
    return m;
}

// dot, gemv and gemm: calls of `seconds` each over `blocks` weight blocks holding `values` weights
// (gemm: multiply-adds), reading `bytes` of weights (0: not a read-bound figure).
inline measurement timed_measurement(std::string op, std::string format, std::string arch, std::size_t threads,
                                     std::vector<std::size_t> shape, const spread& seconds, double blocks, double values, double bytes)
{
    measurement m;
    m.op = std::move(op);
    m.format = std::move(format);
    m.arch = std::move(arch);
    m.threads = threads;
    m.shape = std::move(shape);
    m.ns_per_block = seconds.mean * 1e9 / blocks;
    m.ns_per_32 = seconds.mean * 1e9 / (values / 32);
    m.gb_per_s = bytes / seconds.mean / 1e9;
    m.measure = "ns_per_32";
    m.stats = seconds.scaled(1e9 / (values / 32));
    return m;
}

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

inline std::vector<measurement> run_benchmarks(const bench_options& opt)
{
    constexpr std::size_t dot_values = 4096;
    constexpr std::size_t rows = 14336;
    constexpr std::size_t cols = 4096;
    std::size_t tags = 0;
    qk::for_each_runnable(qk::running_cpu(), [&](auto) { ++tags; });
    constexpr std::size_t formats = qk::weight_formats::size;
    // A read, a mat-vec and a gemm per thread count and format, a dot per format and tag.
    progress_reporter bar("qk bench", opt.threads.size() * (1 + 2 * formats) + formats * tags, "measurements");
    std::size_t done = 0;

    std::vector<measurement> results;
    std::vector<double> bandwidth(opt.threads.size());
    {
        const auto buffer = qk::backend::cpu::make_bandwidth_buffer();
        for (std::size_t i = 0; i < opt.threads.size(); ++i) {
            bar.update(done++, fmt::format("streaming read, {} thread(s)", opt.threads[i]));
            qk::backend::cpu::thread_pool pool(opt.threads[i]);
            const spread gb_per_s =
                repeated(opt.repetitions, [&] { return qk::backend::cpu::measure_read_bandwidth(pool, buffer.span()) / 1e9; });
            bandwidth[i] = gb_per_s.mean * 1e9;
            results.push_back(read_measurement("", opt.threads[i], buffer.span().size_bytes(), gb_per_s));
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
                bar.update(done++, fmt::format("dot {} on {}", name, qk::arch::name<Tag>()));
                float sink = 0.0f;
                const spread seconds =
                    repeated(opt.repetitions, [&] { return seconds_per_call([&] { sink += qk::dot<Block, Tag>(w, a); }, opt.seconds); });
                if (!std::isfinite(sink)) {
                    fmt::print(stderr, "\n");
                }
                results.push_back(timed_measurement("dot", name, std::string(qk::arch::name<Tag>()), 1, {dot_values}, seconds,
                                                    static_cast<double>(w.size()), dot_values, static_cast<double>(w.size() * sizeof(Block))));
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
            std::vector<activation> scratch(qk::gemm_scratch_blocks<Block>(cols));
            for (std::size_t i = 0; i < opt.threads.size(); ++i) {
                qk::backend::cpu::thread_pool pool(opt.threads[i]);
                qk::dispatch([&]<class Tag>(Tag) {
                    bar.update(done++, fmt::format("gemv {} on {}, {} thread(s)", name, qk::arch::name<Tag>(), opt.threads[i]));
                    const spread seconds = repeated(opt.repetitions, [&] {
                        return seconds_per_call(
                            [&] {
                                const auto matrix = std::as_const(matrices).span().subspan(next * matrix_blocks, matrix_blocks);
                                next = (next + 1) % copies;
                                qk::gemv<Block, Tag>(matrix, rows, cols, x, y, pool, std::span<activation>(scratch));
                            },
                            4 * opt.seconds);
                    });
                    measurement m = timed_measurement("gemv", name, std::string(qk::arch::name<Tag>()), opt.threads[i], {rows, cols}, seconds,
                                                      static_cast<double>(matrix_blocks), static_cast<double>(rows * cols),
                                                      static_cast<double>(matrix_blocks * sizeof(Block)));
                    m.bandwidth_fraction = m.gb_per_s * 1e9 / bandwidth[i];
                    results.push_back(std::move(m));
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
                    bar.update(done++, fmt::format("gemm {} on {}, {} thread(s)", name, arch, opt.threads[i]));
                    const spread seconds = repeated(opt.repetitions, [&] {
                        return seconds_per_call(
                            [&] {
                                if constexpr (packed) {
                                    qk::gemm<Block, Tag>(tiles, columns, x_columns, y_columns, pool, packed_scratch);
                                } else {
                                    qk::gemm<Block, Tag>(weights, gemm_rows, cols, columns, x_columns, y_columns, pool, row_scratch);
                                }
                            },
                            4 * opt.seconds);
                    });
                    const double products = static_cast<double>(gemm_rows * cols * columns);
                    measurement m = timed_measurement("gemm", name, arch, opt.threads[i], {gemm_rows, cols, columns}, seconds, products / size,
                                                      products, 0.0);
                    m.gflops = 2.0 * products / seconds.mean / 1e9;
                    results.push_back(std::move(m));
                }
            });
        }
    };
    for (qk::format f : qk::all_formats) {
        qk::visit_format(f, bench_format);
    }
    bar.finish();
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
    progress_reporter bar("qk bench", 1 + qk::weight_formats::size, "measurements");
    std::size_t done = 0;
    bar.update(done++, fmt::format("streaming read on {}", dev.facts().name));
    // The probe's default size, within what the device allows it (as the probe would cut it).
    const std::size_t read_bytes = std::min<std::size_t>(std::size_t{256} << 20, dev.facts().max_storage_buffer_bytes) / 16 * 16;
    const spread gb_per_s = repeated(opt.repetitions, [&] { return vk::measure_read_bandwidth(dev, read_bytes) / 1e9; });
    const double bandwidth = gb_per_s.mean * 1e9;
    results.push_back(read_measurement(arch, 0, read_bytes, gb_per_s));
    results.back().device = true;
    vk::gemv_workspace ws(dev);
    std::vector<float> x(cols);
    for (std::size_t i = 0; i < cols; ++i) {
        x[i] = static_cast<float>(i % 17) - 8.0f;
    }
    std::vector<float> y(rows);
    const auto bench_format = [&]<class Block>(std::type_identity<Block>) {
        if constexpr (qk::weight_format<Block>) {
            const std::string name(qk::format_traits<Block>::name);
            bar.update(done++, fmt::format("gemv {} on {}", name, dev.facts().name));
            const std::size_t blocks = rows * cols / qk::format_traits<Block>::block_size;
            const auto m =
                vk::upload_matrix<Block>(dev, std::span<const Block>(qk_inputs::random_blocks_fixed_scale<Block>(blocks, 3)), rows, cols);
            const spread seconds =
                repeated(opt.repetitions, [&] { return seconds_per_call([&] { vk::gemv(dev, ws, m, x, y); }, 4 * opt.seconds); });
            measurement r = timed_measurement("gemv", name, arch, 0, {rows, cols}, seconds, static_cast<double>(blocks),
                                              static_cast<double>(rows * cols), static_cast<double>(m.bytes()));
            r.device = true;
            r.bandwidth_fraction = r.gb_per_s * 1e9 / bandwidth;
            results.push_back(std::move(r));
        }
    };
    for (qk::format f : qk::all_formats) {
        qk::visit_format(f, bench_format);
    }
    bar.finish();
    fmt::print("  bench device   {}\n", dev.facts().name);
#endif
    return results;
}

// A table whose columns are as wide as their widest cell: an arch name such as "vulkan
// streaming" or a "mean ± stddev" cannot push a row out of line. The first left_aligned columns
// are text; a column empty in every row is left out.
inline void print_table(const std::vector<std::vector<std::string>>& rows, std::size_t left_aligned)
{
    // Columns on a terminal: UTF-8 continuation bytes (those of "±") take none.
    const auto columns_of = [](const std::string& text) {
        return static_cast<std::size_t>(std::ranges::count_if(text, [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
    };
    std::vector<std::size_t> width;
    std::vector<bool> used;
    for (std::size_t r = 0; r < rows.size(); ++r) {
        width.resize(std::max(width.size(), rows[r].size()));
        used.resize(width.size());
        for (std::size_t c = 0; c < rows[r].size(); ++c) {
            width[c] = std::max(width[c], columns_of(rows[r][c]));
            used[c] = used[c] || (r > 0 && !rows[r][c].empty());
        }
    }
    for (const std::vector<std::string>& row : rows) {
        std::string line;
        for (std::size_t c = 0; c < row.size(); ++c) {
            if (!used[c]) {
                continue;
            }
            const std::string padding(width[c] - columns_of(row[c]), ' ');
            line += line.empty() ? "" : " ";
            line += c < left_aligned ? row[c] + padding : padding + row[c];
        }
        while (!line.empty() && line.back() == ' ') {
            line.pop_back();
        }
        fmt::print("{}\n", line);
    }
}

// "12.34", or "12.34 ± 0.05" over several repetitions (a single one has no spread to show).
inline std::string with_spread(double value, const spread& s, int precision, std::size_t repetitions)
{
    return repetitions > 1 ? fmt::format("{:.{}f} ± {:.{}f}", value, precision, s.stddev, precision) : fmt::format("{:.{}f}", value, precision);
}

inline constexpr const char* bench_legend =
    "ns/block  time per call divided by the weight blocks it reads (dot, gemv) or multiplies (gemm)\n"
    "ns/32     the same per 32 weights (gemm: per 32 multiply-adds), comparable across formats\n"
    "GB/s      weight bytes read per second; a dot reads from cache, so its GB/s can pass the memory's;\n"
    "          read: the streaming-read bandwidth, a mat-vec's ceiling\n"
    "% of bw   a mat-vec's GB/s as a share of the streaming read at the same thread count\n"
    "GFLOP/s   gemm: 2 flops per multiply-add\n";

inline void print_benchmarks(const std::vector<measurement>& results, std::size_t repetitions)
{
    std::vector<std::vector<std::string>> rows{{"op", "format", "arch", "threads", "ns/block", "ns/32", "GB/s", "% of bw", "GFLOP/s"}};
    bool device = false;
    for (const measurement& m : results) {
        device = device || m.device;
        const std::string threads = m.device ? std::string("device") : fmt::format("{}", m.threads);
        if (m.op == "read") {
            rows.push_back({m.op, m.format, m.arch.empty() ? "streaming" : m.arch + " streaming", threads, "", "",
                            with_spread(m.gb_per_s, m.stats, 2, repetitions), "", ""});
        } else if (m.op == "gemm") {
            rows.push_back({m.op, m.format, m.arch, threads, fmt::format("{:.3f}", m.ns_per_block), with_spread(m.ns_per_32, m.stats, 4, repetitions),
                            "", "", fmt::format("{:.1f}", m.gflops)});
        } else {
            rows.push_back({m.op, m.format, m.arch, threads, fmt::format("{:.3f}", m.ns_per_block), with_spread(m.ns_per_32, m.stats, 3, repetitions),
                            fmt::format("{:.2f}", m.gb_per_s),
                            m.bandwidth_fraction >= 0 ? fmt::format("{:.1f}%", 100.0 * m.bandwidth_fraction) : std::string(), ""});
        }
    }
    print_table(rows, 3);
    fmt::print("\n{}", bench_legend);
    if (device) {
        fmt::print("threads   device: the Vulkan device runs it; its gemv times include the upload of x and the download of y\n");
    }
    if (repetitions > 1) {
        fmt::print("±         the standard deviation over the {} repetitions of the figure (which is their mean)\n", repetitions);
    }
}

// ---------------------------------------------------------------------------------------------
// JSON: schema "qkern-bench", version 1, for the kernels and for a model file alike (README.md, qk
// bench --help). Version 1 wrapped the bare array of earlier qk versions, whose entries' fields
// every result keeps.

inline std::string json_string(std::string_view text)
{
    std::string out = "\"";
    for (const char c : text) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
            out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
            out += c;
        }
    }
    return out + "\"";
}

// JSON has no NaN or infinity: a figure that came out as one (a call timed as 0 s) is null.
inline std::string json_number(double value)
{
    return std::isfinite(value) ? fmt::format("{:.6g}", value) : std::string("null");
}

template <class T, class Format>
std::string json_list(const std::vector<T>& items, Format&& format)
{
    std::string out = "[";
    for (std::size_t i = 0; i < items.size(); ++i) {
        out += (i == 0 ? "" : ", ") + format(items[i]);
    }
    return out + "]";
}

// "mean", "stddev", "min", "max" of the figure named by "measure", in that figure's units.
inline std::string json_spread(std::string_view measure, const spread& s)
{
    return fmt::format(R"("measure": "{}", "mean": {}, "stddev": {}, "min": {}, "max": {})", measure, json_number(s.mean),
                       json_number(s.stddev), json_number(s.min), json_number(s.max));
}

// /proc/cpuinfo's "model name" (x86, some ARM kernels); "unknown" where the OS does not say.
inline std::string cpu_model_name()
{
    const file_handle info(std::fopen("/proc/cpuinfo", "r"));
    if (!info) {
        return "unknown";
    }
    char line[512];
    while (std::fgets(line, sizeof line, info.get()) != nullptr) {
        std::string_view text(line);
        if (!text.starts_with("model name")) {
            continue;
        }
        const std::size_t colon = text.find(':');
        if (colon == std::string_view::npos) {
            break;
        }
        text.remove_prefix(colon + 1);
        while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) {
            text.remove_prefix(1);
        }
        while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) {
            text.remove_suffix(1);
        }
        return text.empty() ? std::string("unknown") : std::string(text);
    }
    return "unknown";
}

inline std::string compiler_json()
{
    // Clang defines __GNUC__ and __VERSION__ too, so it is tested first.
#if defined(__clang__)
    std::string_view version = __clang_version__;
    const char* name = "clang";
#elif defined(__GNUC__)
    std::string_view version = __VERSION__;
    const char* name = "gcc";
#elif defined(_MSC_VER)
    const std::string full = fmt::format("{}", _MSC_FULL_VER);
    std::string_view version = full;
    const char* name = "msvc";
#else
    std::string_view version = "unknown";
    const char* name = "unknown";
#endif
    while (!version.empty() && version.back() == ' ') {
        version.remove_suffix(1);
    }
    return fmt::format(R"({{"name": "{}", "version": {}}})", name, json_string(version));
}

// The document around a bench's results (each already a JSON object); extra: a bench's own
// top-level fields, each followed by ",\n  ".
inline std::string bench_json(const bench_options& opt, const std::vector<std::string>& results, std::string_view extra = {})
{
    const auto quoted = [](const std::string& name) { return json_string(name); };
    std::string text = fmt::format(
        "{{\n"
        "  \"schema\": \"qkern-bench\",\n"
        "  \"version\": 1,\n"
        "  \"qkern_version\": \"{}.{}.{}\",\n"
        "  \"compiler\": {},\n"
        "  \"build\": {{\"native_tag\": \"{}\", \"kernels\": \"{}\", \"flags_enable\": {}}},\n"
        "  \"cpu\": {{\"model\": {}, \"features\": {}}},\n"
        "  \"backend\": {},\n"
        "  \"seconds\": {},\n"
        "  \"repetitions\": {},\n"
        "  {}\"results\": [\n",
        QKERN_VERSION_MAJOR, QKERN_VERSION_MINOR, QKERN_VERSION_PATCH, compiler_json(), qk::arch::name<qk::arch::native>(), qk::dispatched_tag_name(),
        json_list(present_names(compiler_feature_list()), quoted), json_string(cpu_model_name()),
        json_list(present_names(cpu_feature_list()), quoted), json_string(opt.backend), json_number(opt.seconds), opt.repetitions, extra);
    for (std::size_t i = 0; i < results.size(); ++i) {
        text += "    " + results[i] + (i + 1 < results.size() ? ",\n" : "\n");
    }
    return text + "  ]\n}\n";
}

inline void write_benchmarks_json(const bench_options& opt, const std::vector<measurement>& results)
{
    std::vector<std::string> entries;
    for (const measurement& m : results) {
        std::string e;
        if (m.op == "read") {
            e = m.arch.empty() ? fmt::format(R"({{"op": "read", "threads": {}, "gb_per_s": {:.4f})", m.threads, m.gb_per_s)
                               : fmt::format(R"({{"op": "read", "arch": "{}", "threads": {}, "gb_per_s": {:.4f})", m.arch, m.threads, m.gb_per_s);
        } else if (m.op == "gemm") {
            e = fmt::format(R"({{"op": "gemm", "format": "{}", "arch": "{}", "threads": {}, "ns_per_block": {:.4f}, "ns_per_32": {:.5f}, "gflops": {:.3f})",
                            m.format, m.arch, m.threads, m.ns_per_block, m.ns_per_32, m.gflops);
        } else {
            e = fmt::format(R"({{"op": "{}", "format": "{}", "arch": "{}", "threads": {}, "ns_per_block": {:.4f}, "ns_per_32": {:.4f}, "gb_per_s": {:.4f})",
                            m.op, m.format, m.arch, m.threads, m.ns_per_block, m.ns_per_32, m.gb_per_s);
            e += m.op == "gemv" ? fmt::format(R"(, "bandwidth_fraction": {:.4f})", m.bandwidth_fraction) : std::string();
        }
        e += fmt::format(R"(, "device": {}, "shape": {}, {}}})", m.device, json_list(m.shape, [](std::size_t n) { return fmt::format("{}", n); }),
                         json_spread(m.measure, m.stats));
        entries.push_back(std::move(e));
    }
    const std::string text = bench_json(opt, entries);
    write_file(opt.json, std::span<const char>(text.data(), text.size()));
}

// The JSON is written after the benchmarks, which can take minutes: whatever would refuse it then
// (a missing or read-only directory, a directory named as the file) refuses it now. The probe is
// the temporary file the write itself creates, removed again at once.
inline void check_json_output(const std::string& path)
{
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
        fail(fmt::format("--json '{}' is a directory: name a file", path));
    }
    const pending_file probe(path);
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
    cmd->add_option("--json", opt.json, "also write the measurements to this file as JSON (schema qkern-bench, version 1: below); "
                                        "checked before the benchmarks start");
    cmd->add_option("--backend", opt.backend, "cpu, or vulkan: the mat-vec on the Vulkan device (QKERN_VULKAN_DEVICE picks one)")
        ->capture_default_str();
    cmd->add_option("--seconds", opt.seconds, "time budget of one dot measurement (mat-vec, gemm, a model's groups and passes: 4x)")
        ->check(CLI::Range(0.001, 10.0))
        ->capture_default_str();
    CLI::Option* threads =
        cmd->add_option("--threads", opt.threads, "thread counts for mat-vec, gemm and bandwidth (with a model file the default is 1, 2, "
                                                  "4, ... and this machine's hardware threads)")
            ->check(CLI::Range(1, 1024))
            ->capture_default_str();
    cmd->add_option("--repetitions", opt.repetitions, "times each measurement is repeated; over 1, the table shows mean ± stddev")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    cmd->callback([&opt, threads] { opt.threads_given = threads->count() > 0; });
    cmd->footer(fmt::format(
        "Columns:\n{}"
        "threads   device: the Vulkan device runs it (--backend vulkan)\n"
        "±         with --repetitions over 1: the standard deviation over the repetitions of the figure, their mean\n\n"
        "With a model file, each group of tensors of one format and shape is timed in turn (each call reads the next\n"
        "tensor of the group) and so is the whole model (one mat-vec over every tensor, in file order, as one token reads\n"
        "them), in GB/s and as a fraction of the streaming read; the whole model also as tokens/s, measured and as the\n"
        "streaming bandwidth allows (bandwidth / weight bytes). Groups smaller than the streaming read are marked\n"
        "\"in cache?\": the caches may serve them, so their fraction can pass 100%. --threads takes every number after\n"
        "it: give the file first (qk bench FILE.gguf --threads 1 4) or end the list with --.\n\n"
        "JSON (--json), schema qkern-bench version 1: {{\"schema\": \"qkern-bench\", \"version\": 1, \"qkern_version\",\n"
        "\"compiler\": {{\"name\", \"version\"}}, \"build\": {{\"native_tag\", \"kernels\", \"flags_enable\"}}, \"cpu\": {{\"model\",\n"
        "\"features\"}}, \"backend\", \"seconds\", \"repetitions\", \"model\" (a model file's bench), \"results\": [...]}}.\n"
        "Each result: \"op\" (read, dot, gemv, gemm; a model's read, gemv, model), \"format\", \"arch\", \"threads\",\n"
        "\"device\" (true: the Vulkan device, threads 0), \"shape\", the table's figures (ns_per_block, ns_per_32, gb_per_s,\n"
        "bandwidth_fraction, gflops; a model's ns_per_call, seconds, tokens_per_s, ...) from the mean time per call, and\n"
        "\"measure\" with \"mean\", \"stddev\", \"min\", \"max\": the figure it names over the repetitions. README.md has more.",
        bench_legend));
    return cmd;
}

inline int run_bench(const bench_options& opt)
{
    if (!opt.model.empty()) {
        return run_model_bench(opt);
    }
    check_backend(opt.backend);
    if (!opt.json.empty()) {
        check_json_output(opt.json);
    }
    print_info();
    const auto results = opt.backend == "vulkan" ? run_vulkan_benchmarks(opt) : run_benchmarks(opt);
    fmt::print("\n");
    print_benchmarks(results, opt.repetitions);
    if (!opt.json.empty()) {
        write_benchmarks_json(opt, results);
    }
    return 0;
}

} // namespace qk_tool

#include "bench_model.hpp"
