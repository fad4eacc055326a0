// qk quantize and qk dequantize: GGUF model files converted as a whole (qk::gguf::quantize and
// dequantize, threaded, with a progress bar), or raw little-endian float32 files to and from rows
// of GGUF blocks; on the kernels qk::dispatch picks for this CPU. The two share their options and
// their checks, so they share this header; each is still its own subcommand, wired by its own
// line in main(). A GGUF input is recognised by its magic, so the two forms need no flag.
#pragma once

#include "common.hpp"
#include "files.hpp"
#include "progress.hpp"

#include <backends/cpu/quantize.hpp>

#include <algorithm>
#include <chrono>
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

namespace qk_tool {

struct convert_options {
    std::string type;
    std::size_t cols = 0; // raw files only; 0 when not given
    std::string input;
    std::string output;
    std::string importance; // raw quantize only; empty when not given
    std::string imatrix;    // GGUF quantize only; empty when not given
    std::size_t threads = 0; // GGUF only; 0: every hardware thread
};

template <class Block>
void require_whole_blocks(std::size_t cols)
{
    constexpr std::size_t block_size = qk::format_traits<Block>::block_size;
    if (cols % block_size != 0) {
        usage_fail(fmt::format("--cols {} is not a multiple of the {} block size {}", cols, qk::format_traits<Block>::name, block_size));
    }
}

// --type: a name qk::parse_format knows, or a usage error.
inline qk::format parse_type(const std::string& name)
{
    try {
        return qk::parse_format(name);
    } catch (const qk::error& e) {
        usage_fail(fmt::format("--type: {}", e.what()));
    }
}

inline std::size_t threads_or_all(std::size_t threads)
{
    return threads != 0 ? threads : std::max<std::size_t>(1, std::thread::hardware_concurrency());
}

template <class Block>
void quantize_file(const convert_options& opt)
{
    using traits = qk::format_traits<Block>;
    require_whole_blocks<Block>(opt.cols);
    if (!opt.importance.empty() && !qk::importance_format<Block>) {
        usage_fail(fmt::format("--importance applies to IQ4_NL and IQ4_XS only, not {}", traits::name));
    }

    const std::vector<float> x = read_floats(opt.input, "input");
    if (x.empty()) {
        fail(fmt::format("input '{}' is empty: there is nothing to quantize", opt.input));
    }
    if (x.size() % opt.cols != 0) {
        fail(fmt::format("input '{}' holds {} floats, not a whole number of rows of --cols {} ({} = {} x {} + {})", opt.input, x.size(),
                         opt.cols, x.size(), x.size() / opt.cols, opt.cols, x.size() % opt.cols));
    }
    std::vector<float> importance;
    if (!opt.importance.empty()) {
        importance = read_floats(opt.importance, "importance file");
        if (importance.size() != opt.cols) {
            fail(fmt::format("importance file '{}' holds {} floats but needs one per column: --cols {}", opt.importance, importance.size(),
                             opt.cols));
        }
    }

    std::vector<Block> blocks(x.size() / traits::block_size);
    // The same bytes whatever the thread count (qk::quantize on a pool).
    qk::backend::cpu::thread_pool pool(threads_or_all(opt.threads));
    try {
        if constexpr (qk::importance_format<Block>) {
            if (!importance.empty()) {
                qk::quantize<Block>(x, std::span<Block>(blocks), importance, pool);
            } else {
                qk::quantize<Block, qk::arch::runtime>(x, std::span<Block>(blocks), pool);
            }
        } else {
            qk::quantize<Block, qk::arch::runtime>(x, std::span<Block>(blocks), pool);
        }
    } catch (const qk::error& e) {
        // The library speaks of x[i]; say which file and where in it.
        fail(fmt::format("cannot quantize '{}' ({} x {} floats): {}", opt.input, x.size() / opt.cols, opt.cols, e.what()));
    }
    write_file(opt.output, std::span<const Block>(blocks));
    fmt::print("qk: quantized {} rows x {} cols to {}{}: {} bytes written to '{}'\n", x.size() / opt.cols, opt.cols, traits::name,
               importance.empty() ? "" : " with importance", blocks.size() * sizeof(Block), opt.output);
}

template <class Block>
void dequantize_file(const convert_options& opt)
{
    using traits = qk::format_traits<Block>;
    require_whole_blocks<Block>(opt.cols);
    if (opt.cols / traits::block_size > SIZE_MAX / sizeof(Block)) {
        usage_fail(fmt::format("--cols {} is too large: a row of {} would not fit in memory", opt.cols, traits::name));
    }
    const std::size_t row_bytes = opt.cols / traits::block_size * sizeof(Block);

    const std::vector<std::byte> bytes = read_file(opt.input);
    if (bytes.empty()) {
        fail(fmt::format("input '{}' is empty: there is nothing to dequantize", opt.input));
    }
    if (bytes.size() % row_bytes != 0) {
        fail(fmt::format("input '{}' has {} bytes, not a whole number of {} rows of --cols {} ({} bytes each: {} blocks of {} bytes)",
                         opt.input, bytes.size(), traits::name, opt.cols, row_bytes, opt.cols / traits::block_size, sizeof(Block)));
    }
    std::vector<Block> blocks(bytes.size() / sizeof(Block));
    std::memcpy(blocks.data(), bytes.data(), bytes.size());

    std::vector<float> y(blocks.size() * traits::block_size);
    qk::dequantize<Block>(std::span<const Block>(blocks), std::span<float>(y));
    // A raw file has no header, so a file of another format (or of other data) is read as --type
    // all the same; what the quantizers never write, values that are not finite, gives some away.
    const auto not_finite = static_cast<std::size_t>(std::ranges::count_if(y, [](float v) { return !std::isfinite(v); }));
    if (not_finite > 0) {
        fmt::print(stderr, "qk: warning: {} of the {} values dequantized from '{}' are infinite or NaN, which {} blocks written by a "
                           "quantizer never hold: is the file {} (--type)? A raw file has no header, so its type cannot be checked\n",
                   not_finite, y.size(), opt.input, traits::name, traits::name);
    }
    write_file(opt.output, std::span<const float>(y));
    fmt::print("qk: dequantized {} rows x {} cols of {}: {} bytes written to '{}'\n", bytes.size() / row_bytes, opt.cols, traits::name,
               y.size() * sizeof(float), opt.output);
}

// ---------------------------------------------------------------------------------------------
// GGUF model files

// Whether the input starts with GGUF's magic; an input that cannot be opened is an error here,
// before the answer picks which form's options to demand.
inline bool is_gguf_file(const std::string& path)
{
    const file_handle file(std::fopen(path.c_str(), "rb"));
    if (!file) {
        fail(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
    }
    char magic[4] = {};
    return std::fread(magic, 1, 4, file.get()) == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

// Each tensor as it is written, the share done counted in bytes: on a terminal progress.hpp's one
// rewritten line, with the time left; in a log one line per tensor, where carriage returns would
// pile up (the summary that follows on stdout gives the time).
class conversion_progress {
public:
    explicit conversion_progress(const qk::gguf::file& in) : in_(in), total_(in.tensors().size()), bar_("qk", tensor_bytes(in) / 1000000, "MB") {}

    void operator()(const qk::gguf::conversion& c)
    {
        const qk::gguf::tensor_info& t = in_.tensors()[c.index];
        const double fraction = bytes_total_ == 0 ? 1.0 : static_cast<double>(bytes_done_) / static_cast<double>(bytes_total_);
        ++done_;
        const std::string what = c.to == c.from ? fmt::format("{} copied", qk::gguf::find_tensor_type(c.from)->name)
                                                : fmt::format("{} -> {}{}", qk::gguf::find_tensor_type(c.from)->name,
                                                              qk::gguf::find_tensor_type(c.to)->name, c.with_importance ? " (imatrix)" : "");
        if (bar_.mode() == progress_mode::terminal) {
            bar_.update(bytes_done_ / 1000000, fmt::format("[{}/{}] {} {}", done_, total_, t.name, what));
        } else if (bar_.mode() == progress_mode::log) {
            constexpr int width = 24;
            const int filled = static_cast<int>(fraction * width);
            fmt::print(stderr, "[{}{}] {:3.0f}% [{:>{}}/{}] {:<40} {}\n", std::string(static_cast<std::size_t>(filled), '#'),
                       std::string(static_cast<std::size_t>(width - filled), ' '), 100.0 * fraction, done_,
                       fmt::format("{}", total_).size(), total_, t.name, what);
            std::fflush(stderr);
        }
        bytes_done_ += t.bytes;
    }

    // Before the summary on stdout, which may share the terminal with the line.
    void clear() { bar_.clear(); }

private:
    static std::uint64_t tensor_bytes(const qk::gguf::file& in)
    {
        std::uint64_t bytes = 0;
        for (const qk::gguf::tensor_info& t : in.tensors()) {
            bytes += t.bytes;
        }
        return bytes;
    }

    const qk::gguf::file& in_;
    std::size_t total_;
    progress_reporter bar_;
    std::size_t done_ = 0;
    std::uint64_t bytes_total_ = tensor_bytes(in_);
    std::uint64_t bytes_done_ = 0;
};

inline std::string readable_size(std::uint64_t bytes)
{
    const auto b = static_cast<double>(bytes);
    return bytes < (1u << 20) ? fmt::format("{:.1f} KiB", b / 1024) : bytes < (1u << 30) ? fmt::format("{:.1f} MiB", b / (1 << 20)) : fmt::format("{:.2f} GiB", b / (1 << 30));
}

// What quantize and dequantize share: the input opened, a pool of --threads and the progress line
// handed to the library as its conversion options, then the write, timed from the start, and a
// report. convert(in, options) returns the conversion; verb says what it did.
template <class Convert>
void convert_gguf(convert_options opt, std::string_view verb, Convert&& convert)
{
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    opt.threads = threads_or_all(opt.threads);
    const qk::gguf::file in(opt.input);
    qk::backend::cpu::thread_pool pool(opt.threads);
    conversion_progress progress(in);
    qk::gguf::conversion_options options;
    options.run = [&pool](std::size_t tasks, const std::function<void(std::size_t)>& task) { pool.run(tasks, task); };
    options.on_tensor = [&progress](const qk::gguf::conversion& c) { progress(c); };
    const qk::gguf::model_conversion conversion = convert(in, options);
    conversion.out.write(opt.output);
    progress.clear();
    const double seconds = std::chrono::duration<double>(clock::now() - start).count();
    std::error_code ec;
    const std::uintmax_t written = std::filesystem::file_size(opt.output, ec);
    fmt::print("qk: {} '{}' ({}, {} tensors, {} of them converted) to '{}' ({}) in {:.2f} s, {:.0f} MB/s of input, {} thread(s)\n", verb,
               opt.input, readable_size(in.size()), conversion.tensors.size(), conversion.converted, opt.output,
               ec ? std::string("size unknown") : readable_size(written), seconds, static_cast<double>(in.size()) / seconds / 1e6,
               opt.threads);
    for (const qk::gguf::conversion& c : conversion.tensors) {
        if (!c.note.empty()) {
            fmt::print("  {}: {}\n", in.tensors()[c.index].name, c.note);
        }
    }
}

inline void quantize_gguf(const convert_options& opt)
{
    if (opt.cols != 0 || !opt.importance.empty()) {
        usage_fail(fmt::format("'{}' is a GGUF file: --cols and --importance are for raw float files (a GGUF file has its shapes; use --imatrix)",
                               opt.input));
    }
    const qk::format type = parse_type(opt.type);
    std::optional<qk::gguf::importance_matrix> importance; // read by the write, so it lives here
    convert_gguf(opt, fmt::format("quantized to {}", qk::format_name(type)), [&](const qk::gguf::file& in, const qk::gguf::conversion_options& hooks) {
        if (!opt.imatrix.empty()) {
            importance.emplace(opt.imatrix);
        }
        qk::gguf::quantize_options options{hooks};
        options.type = type;
        options.importance = importance ? &*importance : nullptr;
        qk::gguf::model_conversion conversion = qk::gguf::quantize(in, options);
        if (importance && !qk::visit_format(type, []<class Block>(std::type_identity<Block>) { return qk::importance_format<Block>; })) {
            fmt::print(stderr, "qk: note: {} takes no importance weights (as in ggml); --imatrix '{}' is recorded but not used\n",
                       qk::format_name(type), opt.imatrix);
        }
        if (conversion.without_importance > 0) {
            fmt::print(stderr, "qk: note: the importance matrix '{}' has no usable entry for {} tensor(s); they are quantized without\n",
                       opt.imatrix, conversion.without_importance);
        }
        return conversion;
    });
}

inline void dequantize_gguf(const convert_options& opt)
{
    if (opt.cols != 0 || !opt.type.empty()) {
        usage_fail(fmt::format("'{}' is a GGUF file: --type and --cols are for raw block files (a GGUF file says each tensor's type and shape)",
                               opt.input));
    }
    convert_gguf(opt, "dequantized to F32",
                 [](const qk::gguf::file& in, const qk::gguf::conversion_options& hooks) { return qk::gguf::dequantize(in, hooks); });
}

// ---------------------------------------------------------------------------------------------
// Command line

// Checks the text before CLI11 converts it: CLI11 2.1 turns "-5" into a huge std::size_t and
// saturates on overflow, and its own range validators print DBL_MAX in full.
inline CLI::Validator positive_count()
{
    return CLI::Validator(
        [](std::string& text) -> std::string {
            std::size_t value = 0;
            const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
            if (ec == std::errc::result_out_of_range) {
                return fmt::format("{} is too large", text);
            }
            if (ec != std::errc() || end != text.data() + text.size() || value == 0) {
                return fmt::format("expected a positive whole number, not '{}'", text);
            }
            return {};
        },
        "");
}

inline CLI::App* add_convert_command(CLI::App& app, const char* name, const char* description, convert_options& opt,
                                     const char* input_help, const char* output_help)
{
    CLI::App* cmd = app.add_subcommand(name, description);
    cmd->add_option("-c,--cols", opt.cols, "raw files: values per row, a multiple of the format's block size (32, 64 or 256)")
        ->type_name("N")
        ->check(positive_count());
    cmd->add_option("input", opt.input, input_help)->required();
    cmd->add_option("output", opt.output, output_help)->required();
    cmd->add_option("--threads", opt.threads, "threads to convert with (default: every hardware thread; raw dequantize uses one)")
        ->type_name("N")
        ->check(positive_count());
    return cmd;
}

inline CLI::App* add_quantize(CLI::App& app, convert_options& opt)
{
    CLI::App* cmd = add_convert_command(app, "quantize", "quantize a GGUF model file, or a raw little-endian float32 file to rows of blocks", opt,
                                        "GGUF model file, or raw float32 file", "output file: GGUF, or raw blocks");
    cmd->add_option("-t,--type", opt.type, "block format: Q8_0, MXFP4, IQ4_NL, IQ4_XS or NVFP4 (raw files: also Q8_K; any letter case)")
        ->required();
    cmd->add_option("--imatrix", opt.imatrix,
                    "GGUF files: importance matrix as llama-imatrix writes it (GGUF or legacy .dat), for IQ4_NL and IQ4_XS");
    cmd->add_option("--importance", opt.importance,
                    "raw files: float32 file of per-column importance weights, --cols of them (IQ4_NL, IQ4_XS only)");
    cmd->footer("A GGUF input (known by its magic) is quantized as llama.cpp's llama-quantize --pure does: every matrix and\n"
                "expert stack of F32, F16 or BF16 whose name ends in 'weight' (not norms, routers, position embeddings) goes\n"
                "to --type, byte for byte what ggml_quantize_chunk writes; IQ4_XS rows that are not whole 256-value blocks\n"
                "take IQ4_NL; the rest is copied. Metadata is kept, general.file_type and general.quantization_version set.\n"
                "Raw files have no header: float32 values in, each row's blocks as GGUF stores them out, rows back to back;\n"
                "--cols is then required, and the output does not say its type: dequantize needs the same --type and --cols.\n"
                "The output is replaced only when everything succeeded; it must not be the input (nor a link to it) and, if it\n"
                "exists, must be a regular file (not a device or a pipe).");
    return cmd;
}

inline CLI::App* add_dequantize(CLI::App& app, convert_options& opt)
{
    CLI::App* cmd = add_convert_command(app, "dequantize", "dequantize a GGUF model file to F32, or a raw file of block rows to float32", opt,
                                        "GGUF model file, or raw file of blocks", "output file: GGUF, or raw float32");
    cmd->add_option("-t,--type", opt.type,
                    "raw files only: block format of the input, which a raw file cannot confirm: Q8_0, Q8_K, MXFP4, NVFP4, IQ4_NL or "
                    "IQ4_XS (any letter case)");
    cmd->footer("A GGUF input (known by its magic) has every tensor of qkern's formats, F16 and BF16 written as F32 and the rest\n"
                "copied; the types come from the file, so --type is refused. Raw files have no header: each row's blocks as\n"
                "GGUF stores them in, float32 values out; --type and --cols are then required, and the type cannot be checked:\n"
                "a file of another format of the same row size is read as --type all the same (values that are not finite\n"
                "are warned about). The output is replaced only when everything succeeded; it must not be the input (nor a\n"
                "link to it) and, if it exists, must be a regular file (not a device or a pipe).");
    return cmd;
}

inline void require_raw_options(const convert_options& opt)
{
    if (opt.type.empty() || opt.cols == 0) {
        usage_fail(fmt::format("'{}' is not a GGUF file, so it is read as a raw file, which needs --type and --cols", opt.input));
    }
    if (!opt.imatrix.empty()) {
        usage_fail(fmt::format("'{}' is not a GGUF file: --imatrix is for GGUF files (raw files take --importance)", opt.input));
    }
}

// Checked before any work: an output that is the input would be replaced by what was computed
// from it (the raw forms read it whole first, but a failure part way would still cost the
// input), and one that is not a regular file would be replaced by the rename.
inline void check_output(const convert_options& opt)
{
    if (same_file(opt.input, opt.output)) {
        usage_fail(fmt::format("the output '{}' is the input '{}' (the same file{}): write to another file", opt.output, opt.input,
                               opt.output == opt.input ? "" : ", through a link"));
    }
    if (!opt.importance.empty() && same_file(opt.importance, opt.output)) {
        usage_fail(fmt::format("the output '{}' is the importance file '{}': write to another file", opt.output, opt.importance));
    }
    if (!opt.imatrix.empty() && same_file(opt.imatrix, opt.output)) {
        usage_fail(fmt::format("the output '{}' is the importance matrix '{}': write to another file", opt.output, opt.imatrix));
    }
    require_replaceable(opt.output);
}

inline int run_quantize(const convert_options& opt)
{
    require_little_endian();
    check_output(opt);
    if (is_gguf_file(opt.input)) {
        quantize_gguf(opt);
        return 0;
    }
    require_raw_options(opt);
    qk::visit_format(parse_type(opt.type), [&]<class Block>(std::type_identity<Block>) { quantize_file<Block>(opt); });
    return 0;
}

inline int run_dequantize(const convert_options& opt)
{
    require_little_endian();
    check_output(opt);
    if (is_gguf_file(opt.input)) {
        dequantize_gguf(opt);
        return 0;
    }
    require_raw_options(opt);
    qk::visit_format(parse_type(opt.type), [&]<class Block>(std::type_identity<Block>) { dequantize_file<Block>(opt); });
    return 0;
}

} // namespace qk_tool
