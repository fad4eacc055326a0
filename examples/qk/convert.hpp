// qk quantize and qk dequantize: raw little-endian float32 files to and from rows of GGUF blocks,
// on the kernels qk::dispatch picks for this CPU. The two share their options and their checks,
// so they share this header; each is still its own subcommand, wired by its own line in main().
#pragma once

#include "common.hpp"
#include "files.hpp"

#include <charconv>
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
    std::size_t cols = 0;
    std::string input;
    std::string output;
    std::string importance; // quantize only; empty when not given
};

template <class Block>
void require_whole_blocks(std::size_t cols)
{
    constexpr std::size_t block_size = qk::format_traits<Block>::block_size;
    if (cols % block_size != 0) {
        fail(fmt::format("--cols {} is not a multiple of the {} block size {}", cols, qk::format_traits<Block>::name, block_size));
    }
}

template <class Block>
void quantize_file(const convert_options& opt)
{
    using traits = qk::format_traits<Block>;
    require_whole_blocks<Block>(opt.cols);
    if (!opt.importance.empty() && !qk::importance_format<Block>) {
        fail(fmt::format("--importance applies to IQ4_NL and IQ4_XS only, not {}", traits::name));
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
    try {
        if constexpr (qk::importance_format<Block>) {
            if (!importance.empty()) {
                qk::quantize<Block>(x, std::span<Block>(blocks), importance);
            } else {
                quantize_best<Block>(x, std::span<Block>(blocks));
            }
        } else {
            quantize_best<Block>(x, std::span<Block>(blocks));
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
        fail(fmt::format("--cols {} is too large: a row of {} would not fit in memory", opt.cols, traits::name));
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
    write_file(opt.output, std::span<const float>(y));
    fmt::print("qk: dequantized {} rows x {} cols of {}: {} bytes written to '{}'\n", bytes.size() / row_bytes, opt.cols, traits::name,
               y.size() * sizeof(float), opt.output);
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
    cmd->add_option("-t,--type", opt.type, "block format: Q8_0, Q8_K, MXFP4, NVFP4, IQ4_NL or IQ4_XS (any letter case)")->required();
    cmd->add_option("-c,--cols", opt.cols, "values per row, a multiple of the format's block size (32 or 256)")
        ->required()
        ->type_name("N")
        ->check(positive_count());
    cmd->add_option("input", opt.input, input_help)->required();
    cmd->add_option("output", opt.output, output_help)->required();
    cmd->footer("Files are raw and little-endian, with no header: float32 values, or each row's blocks as GGUF\n"
                "stores them, rows back to back. The output is replaced only when everything succeeded.");
    return cmd;
}

inline CLI::App* add_quantize(CLI::App& app, convert_options& opt)
{
    CLI::App* cmd = add_convert_command(app, "quantize", "quantize a raw little-endian float32 file to rows of blocks", opt,
                                        "raw float32 input file", "output file of blocks");
    cmd->add_option("--importance", opt.importance,
                    "raw float32 file of per-column importance weights, --cols of them (IQ4_NL, IQ4_XS only)");
    return cmd;
}

inline CLI::App* add_dequantize(CLI::App& app, convert_options& opt)
{
    return add_convert_command(app, "dequantize", "dequantize a file of block rows to raw little-endian float32", opt,
                               "input file of blocks", "raw float32 output file");
}

inline int run_quantize(const convert_options& opt)
{
    require_little_endian();
    qk::visit_format(qk::parse_format(opt.type), [&]<class Block>(std::type_identity<Block>) { quantize_file<Block>(opt); });
    return 0;
}

inline int run_dequantize(const convert_options& opt)
{
    require_little_endian();
    qk::visit_format(qk::parse_format(opt.type), [&]<class Block>(std::type_identity<Block>) { dequantize_file<Block>(opt); });
    return 0;
}

} // namespace qk_tool
