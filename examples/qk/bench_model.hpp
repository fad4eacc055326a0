// qk bench FILE.gguf: the mat-vec over a model's own weights (every tensor of 2 or more dimensions
// in one of qkern's weight formats), per group of tensors of one format and shape and as one
// token's whole pass, at each thread count against the streaming-read bandwidth, with the
// token-generation ceiling those bytes imply. CPU only. bench.hpp includes this header last.
#pragma once

#include "bench.hpp"
#include "common.hpp"
#include "files.hpp"
#include "info.hpp"
#include "progress.hpp"

#include <backends/cpu/read_bandwidth.hpp>
#include <gguf/gguf.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if __has_include(<unistd.h>)
#include <unistd.h>
#endif

#include <fmt/core.h>

namespace qk_tool {

// One tensor a token's mat-vecs read. Its blocks are kept as bytes so that tensors of every
// format fit one list; `format` says how to read them.
struct model_tensor {
    std::string name;
    qk::format format = qk::format::q8_0;
    std::size_t rows = 0; // every row of every matrix: a 3-D tensor of experts counts them all
    std::size_t cols = 0;
    std::span<const std::byte> bytes;
};

// The tensors of one format and shape (a model repeats each shape once per layer): they run the
// same kernel on the same amount of data, so one measurement stands for all of them.
struct model_group {
    qk::format format = qk::format::q8_0;
    std::size_t rows = 0;
    std::size_t cols = 0;
    std::vector<std::size_t> members; // indices into model_weights::tensors, in file order
};

struct model_weights {
    qk::gguf::file file;              // owns the mapping the tensors' bytes point into
    std::vector<model_tensor> tensors; // in file order, as one token reads them
    std::vector<model_group> groups;   // in the order their first tensor appears
    std::vector<std::pair<std::string, std::size_t>> skipped; // "<type>[ (1-D)| (empty)]" and how many
    std::uint64_t bytes = 0;

    [[nodiscard]] std::uint64_t group_bytes(const model_group& g) const { return tensors[g.members.front()].bytes.size() * g.members.size(); }
};

// Counts `what` in counts, kept in the order things first appear.
inline void count_one(std::vector<std::pair<std::string, std::size_t>>& counts, std::string what)
{
    const auto seen = std::ranges::find(counts, what, &std::pair<std::string, std::size_t>::first);
    if (seen != counts.end()) {
        ++seen->second;
    } else {
        counts.emplace_back(std::move(what), 1);
    }
}

inline std::string count_list(std::span<const std::pair<std::string, std::size_t>> counts)
{
    std::string out;
    for (const auto& [what, n] : counts) {
        out += fmt::format("{}{} {}", out.empty() ? "" : ", ", n, what);
    }
    return out;
}

inline std::string weight_format_names()
{
    std::string out;
    qk::weight_formats::for_each([&]<class Block>(std::type_identity<Block>) {
        // As ggml spells types, like the list of what the file holds that follows it.
        out += fmt::format("{}{}", out.empty() ? "" : ", ", qk::gguf::find_tensor_type(qk::format_traits<Block>::gguf_type)->name);
    });
    return out;
}

// Opens and validates the file (qk::error on a bad one) and picks the tensors a token's mat-vecs
// read; a file with none is an error that says what the file holds instead.
inline model_weights load_model_weights(const std::string& path)
{
    model_weights m{qk::gguf::file(path), {}, {}, {}, 0};
    // A map, not a search of the groups per tensor: a file of many shapes must not cost quadratic time.
    std::map<std::tuple<qk::format, std::size_t, std::size_t>, std::size_t> group_of;
    const auto skip = [&](std::string what) { count_one(m.skipped, std::move(what)); };
    // A token reads one row of the token embeddings, not the whole matrix, unless the model ties
    // its output to them and so multiplies by them once per token.
    const bool tied_output = m.file.find_tensor("output.weight") == nullptr;
    for (const qk::gguf::tensor_info& t : m.file.tensors()) {
        if (t.name == "token_embd.weight" && !tied_output) {
            skip("token_embd.weight (a row per token)");
            continue;
        }
        const std::optional<qk::format> format = qk::gguf::kernel_format(t.type);
        const bool weight =
            format && qk::visit_format(*format, []<class Block>(std::type_identity<Block>) { return qk::weight_format<Block>; });
        if (!weight || t.shape.size() < 2 || t.elements() == 0) {
            skip(fmt::format("{}{}", t.type_info().name, !weight ? "" : t.shape.size() < 2 ? " (1-D)" : " (empty)"));
            continue;
        }
        model_tensor w{t.name, *format, static_cast<std::size_t>(t.rows()), static_cast<std::size_t>(t.shape[0]), {}};
        // blocks<Block> checks the type and the alignment once, here; the timed calls trust them.
        w.bytes = qk::visit_format(*format, [&]<class Block>(std::type_identity<Block>) { return std::as_bytes(m.file.blocks<Block>(t.name)); });
        m.bytes += w.bytes.size();
        const auto [group, added] = group_of.try_emplace({w.format, w.rows, w.cols}, m.groups.size());
        if (added) {
            m.groups.push_back({w.format, w.rows, w.cols, {}});
        }
        m.groups[group->second].members.push_back(m.tensors.size());
        m.tensors.push_back(std::move(w));
    }
    if (m.tensors.empty()) {
        fail(fmt::format("{}: no tensor to bench: qk bench needs tensors of 2 or more dimensions in {}, and the file holds {}", path,
                         weight_format_names(), m.skipped.empty() ? std::string("no tensors") : count_list(m.skipped)));
    }
    return m;
}

// x, y and the quantized x for the widest and tallest tensor, allocated once so that the timed
// calls allocate nothing; each call uses the front of each.
struct gemv_workspace {
    std::vector<float> x;
    std::vector<float> y;
    std::tuple<std::vector<qk::block_q8_0>, std::vector<qk::block_q8_K>> scratch; // by activation format

    explicit gemv_workspace(const model_weights& m)
    {
        for (const model_tensor& t : m.tensors) {
            x.resize(std::max(x.size(), t.cols));
            y.resize(std::max(y.size(), t.rows));
            qk::visit_format(t.format, [&]<class Block>(std::type_identity<Block>) {
                if constexpr (qk::weight_format<Block>) {
                    auto& s = std::get<std::vector<typename qk::format_traits<Block>::vec_dot_type>>(scratch);
                    s.resize(std::max(s.size(), qk::gemm_scratch_blocks<Block>(t.cols)));
                }
            });
        }
        for (std::size_t i = 0; i < x.size(); ++i) {
            x[i] = static_cast<float>(i % 17) - 8.0f;
        }
    }
};

template <class Tag>
void gemv_tensor(const model_tensor& t, gemv_workspace& ws, qk::backend::cpu::thread_pool& pool)
{
    qk::visit_format(t.format, [&]<class Block>(std::type_identity<Block>) {
        if constexpr (qk::weight_format<Block>) {
            using activation = typename qk::format_traits<Block>::vec_dot_type;
            const std::span<const Block> w(reinterpret_cast<const Block*>(t.bytes.data()), t.bytes.size() / sizeof(Block));
            auto& scratch = std::get<std::vector<activation>>(ws.scratch);
            qk::gemv<Block, Tag>(w, t.rows, t.cols, std::span<const float>(ws.x).first(t.cols), std::span<float>(ws.y).first(t.rows), pool,
                                 std::span<activation>(scratch).first(qk::gemm_scratch_blocks<Block>(t.cols)));
        }
    });
}

// Seconds of one pass over the whole model. A pass over gigabytes takes a large part of the
// budget, and seconds_per_call would then time six of them per thread count: past a tenth of the
// budget, one warm-up pass and the best of three timed ones.
template <class F>
double seconds_per_pass(F&& pass, double budget)
{
    using clock = std::chrono::steady_clock;
    const auto time_pass = [&] {
        const auto start = clock::now();
        pass();
        return std::chrono::duration<double>(clock::now() - start).count();
    };
    if (time_pass() < budget / 10) {
        return seconds_per_call(pass, budget);
    }
    double best = std::numeric_limits<double>::infinity();
    for (int timed = 0; timed < 3; ++timed) {
        best = std::min(best, time_pass());
    }
    return best;
}

struct model_measurement {
    std::string op; // "read" (streaming), "gemv" (one group), "model" (a whole pass)
    std::string format;
    std::size_t threads = 1;
    std::size_t tensors = 0;
    std::size_t rows = 0;
    std::size_t cols = 0;
    std::uint64_t bytes = 0; // gemv: one tensor's; model: all of them
    std::uint64_t blocks = 0;
    double seconds = 0.0;  // per call or pass, the mean over the repetitions
    double bandwidth = 0.0; // bytes per second of the streaming read at this thread count (its mean)
    bool may_be_cached = false;
    spread stats; // read: of GB/s; gemv: of ns per call; model: of seconds per pass

    [[nodiscard]] double gb_per_s() const { return op == "read" ? bandwidth / 1e9 : static_cast<double>(bytes) / seconds / 1e9; }
    [[nodiscard]] double bandwidth_fraction() const { return static_cast<double>(bytes) / seconds / bandwidth; }
};

// 1, 2, 4, ... and the machine's hardware threads: where the mat-vec stops scaling is the point.
inline std::vector<std::size_t> model_thread_counts()
{
    const std::size_t most = std::max(1u, std::thread::hardware_concurrency());
    std::vector<std::size_t> counts;
    for (std::size_t n = 1; n < most; n *= 2) {
        counts.push_back(n);
    }
    counts.push_back(most);
    return counts;
}

// The machine's memory, 0 where the OS does not say: weights beyond it are read from the disk.
inline std::uint64_t physical_memory_bytes()
{
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) {
        return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
    }
#endif
    return 0;
}

inline std::vector<model_measurement> run_model_benchmarks(const model_weights& m, std::span<const std::size_t> threads, double seconds,
                                                          std::size_t repetitions)
{
    std::vector<model_measurement> results;
    // A read, a pass and a gemv per group at each thread count, and the first pass.
    progress_reporter bar("qk bench", 2 * threads.size() + 1 + m.groups.size() * threads.size(), "measurements");
    std::size_t done = 0;
    std::vector<double> bandwidth(threads.size());
    {
        const auto buffer = qk::backend::cpu::make_bandwidth_buffer();
        for (std::size_t i = 0; i < threads.size(); ++i) {
            bar.update(done++, fmt::format("streaming read, {} thread(s)", threads[i]));
            qk::backend::cpu::thread_pool pool(threads[i]);
            const spread gb_per_s =
                repeated(repetitions, [&] { return qk::backend::cpu::measure_read_bandwidth(pool, buffer.span()) / 1e9; });
            bandwidth[i] = gb_per_s.mean * 1e9;
            results.push_back({"read", "f32", threads[i], 0, 0, 0, buffer.span().size_bytes(), 0, 0.0, bandwidth[i], false, gb_per_s});
        }
    }

    gemv_workspace ws(m);
    qk::dispatch([&]<class Tag>(Tag) {
        const auto pass = [&](qk::backend::cpu::thread_pool& pool) {
            for (const model_tensor& t : m.tensors) {
                gemv_tensor<Tag>(t, ws, pool);
            }
        };
        // The weights are read where the file's mapping has them (the page cache, in 4 KiB pages
        // as a rule, where the bandwidth probe gets huge pages), as an engine that maps the file
        // reads them. One pass first, on the most threads, so that page faults, and the disk
        // where the file is not cached yet, stay out of every timed call.
        {
            bar.update(done++, "first pass: mapping the file in");
            qk::backend::cpu::thread_pool pool(*std::ranges::max_element(threads));
            pass(pool);
        }

        for (const model_group& g : m.groups) {
            const model_tensor& first = m.tensors[g.members.front()];
            const std::string name(qk::format_name(g.format));
            for (std::size_t i = 0; i < threads.size(); ++i) {
                bar.update(done++, fmt::format("gemv {} {} x {}, {} thread(s)", name, g.rows, g.cols, threads[i]));
                qk::backend::cpu::thread_pool pool(threads[i]);
                // Each call reads the next tensor of the group, as a token does one layer after
                // another; a group that fits in the caches may still be served from them.
                std::size_t next = 0;
                const spread s = repeated(repetitions, [&] {
                    return seconds_per_call(
                        [&] {
                            gemv_tensor<Tag>(m.tensors[g.members[next]], ws, pool);
                            next = (next + 1) % g.members.size();
                        },
                        4 * seconds);
                });
                const std::uint64_t blocks = qk::visit_format(
                    g.format, [&]<class Block>(std::type_identity<Block>) { return first.bytes.size() / sizeof(Block); });
                results.push_back({"gemv", name, threads[i], g.members.size(), g.rows, g.cols, first.bytes.size(), blocks, s.mean, bandwidth[i],
                                   m.group_bytes(g) < qk::backend::cpu::streaming_bytes(), s.scaled(1e9)});
            }
        }

        for (std::size_t i = 0; i < threads.size(); ++i) {
            bar.update(done++, fmt::format("whole model, {} thread(s)", threads[i]));
            qk::backend::cpu::thread_pool pool(threads[i]);
            const spread s = repeated(repetitions, [&] { return seconds_per_pass([&] { pass(pool); }, 4 * seconds); });
            results.push_back({"model", "", threads[i], m.tensors.size(), 0, 0, m.bytes, 0, s.mean, bandwidth[i],
                               m.bytes < qk::backend::cpu::streaming_bytes(), s});
        }
    });
    bar.finish();
    return results;
}

inline void print_model_benchmarks(const std::string& path, const model_weights& m, const std::vector<model_measurement>& results,
                                   std::size_t repetitions)
{
    const std::string arch(qk::dispatched_tag_name());
    std::vector<std::pair<std::string, std::size_t>> formats;
    for (const model_tensor& t : m.tensors) {
        count_one(formats, std::string(qk::format_name(t.format)));
    }
    fmt::print("\n  model          {}\n", path);
    fmt::print("  weights        {} tensors in {} groups, {:.2f} GB: {}\n", m.tensors.size(), m.groups.size(), static_cast<double>(m.bytes) / 1e9,
               count_list(formats));
    if (!m.skipped.empty()) {
        fmt::print("  not timed      {}\n", count_list(m.skipped));
    }
    if (const std::uint64_t memory = physical_memory_bytes(); memory != 0 && m.bytes > memory) {
        fmt::print("  warning        the weights exceed this machine's {:.2f} GB of memory: passes read them from the disk\n",
                   static_cast<double>(memory) / 1e9);
    }

    std::vector<std::vector<std::string>> rows{
        {"op", "format", "arch", "threads", "tensors", "rows x cols", "MB each", "ns/call", "GB/s", "% of bw", ""}};
    bool cached = false;
    for (const model_measurement& r : results) {
        if (r.op == "read") {
            rows.push_back({r.op, r.format, "streaming", fmt::format("{}", r.threads), "", "", "", "", with_spread(r.gb_per_s(), r.stats, 2, repetitions),
                            "", ""});
        } else if (r.op == "gemv") {
            rows.push_back({r.op, r.format, arch, fmt::format("{}", r.threads), fmt::format("{}", r.tensors), fmt::format("{} x {}", r.rows, r.cols),
                            fmt::format("{:.2f}", static_cast<double>(r.bytes) / 1e6), with_spread(r.seconds * 1e9, r.stats, 0, repetitions),
                            fmt::format("{:.2f}", r.gb_per_s()), fmt::format("{:.1f}%", 100.0 * r.bandwidth_fraction()),
                            r.may_be_cached ? "in cache?" : ""});
            cached = cached || r.may_be_cached;
        }
    }
    fmt::print("\n");
    print_table(rows, 3);

    fmt::print("\nwhole model: one pass is a mat-vec over each of the {} tensors in file order, as one token reads them\n", m.tensors.size());
    rows = {{"arch", "threads", "GB", "ms/pass", "GB/s", "% of bw", "tokens/s", "bw-bound tok/s", ""}};
    for (const model_measurement& r : results) {
        if (r.op == "model") {
            rows.push_back({arch, fmt::format("{}", r.threads), fmt::format("{:.3f}", static_cast<double>(r.bytes) / 1e9),
                            with_spread(r.seconds * 1e3, r.stats.scaled(1e3), 3, repetitions), fmt::format("{:.2f}", r.gb_per_s()),
                            fmt::format("{:.1f}%", 100.0 * r.bandwidth_fraction()), fmt::format("{:.1f}", 1.0 / r.seconds),
                            fmt::format("{:.1f}", r.bandwidth / static_cast<double>(r.bytes)), r.may_be_cached ? "in cache?" : ""});
            cached = cached || r.may_be_cached;
        }
    }
    print_table(rows, 1);
    fmt::print("\ntokens/s: 1 / the pass time, the most tokens per second these weights allow on this CPU (attention, norms and\n"
               "sampling come on top); bw-bound: the streaming read at that thread count / the weight bytes.\n");
    if (repetitions > 1) {
        fmt::print("±: the standard deviation over the {} repetitions of the figure (which is their mean).\n", repetitions);
    }
    if (std::ranges::any_of(m.file.tensors(), [](const qk::gguf::tensor_info& t) { return qk::gguf::effective_dimensions(t) > 2; })) {
        fmt::print("experts: a pass reads every expert of the 3-D expert tensors, where a token reads only those it is routed to;\n"
                   "a mixture-of-experts model's tokens/s is higher than this pass's.\n");
    }
    if (cached) {
        fmt::print("in cache?: those tensors total less than the {:.2f} GB the streaming read covers, so the caches may serve them\n"
                   "from one call to the next, and their GB/s may pass the streaming bandwidth.\n",
                   static_cast<double>(qk::backend::cpu::streaming_bytes()) / 1e9);
    }
}

// Schema qkern-bench (bench.hpp's bench_json), with the model's path at the top level.
inline void write_model_benchmarks_json(const bench_options& opt, const std::vector<model_measurement>& results)
{
    const std::string arch(qk::dispatched_tag_name());
    std::vector<std::string> entries;
    for (const model_measurement& r : results) {
        std::string text;
        if (r.op == "read") {
            text = fmt::format(R"({{"op": "read", "threads": {}, "gb_per_s": {:.4f}, "shape": [{}], {})", r.threads, r.gb_per_s(), r.bytes,
                               json_spread("gb_per_s", r.stats));
        } else if (r.op == "gemv") {
            const double ns = r.seconds * 1e9;
            text = fmt::format(R"({{"op": "gemv", "format": "{}", "arch": "{}", "threads": {}, "tensors": {}, "rows": {}, "cols": {}, )"
                                R"("bytes": {}, "ns_per_call": {:.1f}, "ns_per_block": {:.4f}, "ns_per_32": {:.4f}, "gb_per_s": {:.4f}, )"
                                R"("bandwidth_fraction": {:.4f}, "may_be_cached": {}, "shape": [{}, {}], {})",
                                r.format, arch, r.threads, r.tensors, r.rows, r.cols, r.bytes, ns, ns / static_cast<double>(r.blocks),
                                ns / (static_cast<double>(r.rows) * static_cast<double>(r.cols) / 32), r.gb_per_s(), r.bandwidth_fraction(),
                                r.may_be_cached, r.rows, r.cols, json_spread("ns_per_call", r.stats));
        } else {
            // A pass over tensors of many shapes has none of its own: "tensors" and "bytes" say its size.
            text = fmt::format(R"({{"op": "model", "arch": "{}", "threads": {}, "tensors": {}, "bytes": {}, "seconds": {:.9f}, )"
                                R"("gb_per_s": {:.4f}, "bandwidth_fraction": {:.4f}, "tokens_per_s": {:.4f}, "bandwidth_tokens_per_s": {:.4f}, )"
                                R"("may_be_cached": {}, "shape": [], {})",
                                arch, r.threads, r.tensors, r.bytes, r.seconds, r.gb_per_s(), r.bandwidth_fraction(), 1.0 / r.seconds,
                                r.bandwidth / static_cast<double>(r.bytes), r.may_be_cached, json_spread("seconds", r.stats));
        }
        entries.push_back(text + R"(, "device": false})");
    }
    const std::string text = bench_json(opt, entries, fmt::format("\"model\": {},\n  ", json_string(opt.model)));
    write_file(opt.json, std::span<const char>(text.data(), text.size()));
}

inline int run_model_bench(const bench_options& opt)
{
    if (opt.backend == "vulkan") {
        usage_fail(fmt::format("qk bench {}: the model bench runs on the CPU only; drop --backend vulkan (qk bench --backend vulkan "
                               "times the mat-vec on the device with built-in weights)",
                               opt.model));
    }
    check_backend(opt.backend);
    // Opened before anything is printed, so that a bad file is the only output.
    const model_weights m = load_model_weights(opt.model);
    if (!opt.json.empty()) {
        check_json_output(opt.json);
    }
    const std::vector<std::size_t> threads = opt.threads_given ? opt.threads : model_thread_counts();
    print_info();
    const std::vector<model_measurement> results = run_model_benchmarks(m, threads, opt.seconds, opt.repetitions);
    print_model_benchmarks(opt.model, m, results, opt.repetitions);
    if (!opt.json.empty()) {
        write_model_benchmarks_json(opt, results);
    }
    return 0;
}

} // namespace qk_tool
