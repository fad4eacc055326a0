// libFuzzer target: the file readers of the qk tool's subcommands (examples/qk/), called as `qk`
// calls them once CLI11 has filled in the options: raw float32 files (quantize's input and its
// --importance, sample's --logits), raw block files (dequantize with --type and --cols), GGUF
// files (where the bytes start with the magic), and spec's text and --ids files. The contract, not
// just "no crash": a call succeeds or throws what main() reports as the tool's own errors (usage_error,
// fail()'s plain std::runtime_error, qk::error; the exact type, as an independent reading of the
// same bytes and options predicts it), never another exception; a refused call leaves the output
// as it was (sentinel bytes, no file, a directory), every input unchanged and no temporary file
// behind; and a success writes what the library makes of the same bytes (quantize: the blocks
// qk::quantize writes; dequantize: qk::dequantize's floats, with the warning exactly when some are
// not finite; GGUF: a file that reads back with as many tensors), draws the tokens the same chain
// draws itself (sample), and counts the tokens an independent reading counts (spec; parse_ids also
// reads back its own output). Built and run by scripts/fuzz.sh (clang, ASan and UBSan).
//
// Input: 4 header bytes h, then the file's bytes.
//   h[0] % 6, the path: 0 quantize, 1 quantize --importance, 2 dequantize, 3 sample --logits,
//     4 spec FILE (bytes as tokens), 5 spec --ids FILE.
//   quantize, dequantize: h[1] bits 0-2 the --type text (types below), bit 3 --threads 2 (else 1),
//     bits 4-5 the output: a file of sentinel bytes, no file, the input itself, a directory;
//     h[2] --cols from k = bits 0-5 and bits 6-7: 32 (k + 1), 256 (k + 1), k (0: not given), or
//     SIZE_MAX >> k with the low 8 bits cleared; h[3] (--importance only): the importance file is
//     the first 4 * cols + (int8_t)h[3] bytes (clamped to the bytes there are), the input the rest.
//   sample: h[1] bits 0-3 the --chain (chains below), bits 4-6 the --seed text (seeds below),
//     bit 7 --backend vulkan (else cpu); h[2] % 16 + 1 draws (--n).
//   spec: h[1] and h[2] give --n and --m: 1 + b % 24 for b < 0xf0, else 4096 - (b - 0xf0).
//     run_spec runs on every file it refuses, but on only the first file of a process that reads:
//     its replays fill three 16 MiB n-gram pools (qk::spec::ngram_mod's default size), half a
//     second under the sanitizers whatever the file, which would make that path nearly all the
//     fuzzing. Every file that reads is checked through parse_ids and bytes_as_tokens, which
//     run_spec reads it with.
#include "qk/convert.hpp"
#include "qk/sample.hpp"
#include "qk/spec.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <typeinfo>
#include <utility>
#include <vector>

#include <fmt/core.h>

// The tool prints with fmt::print to stdout and stderr, several lines a call; the target reads
// both by pointing glibc's stdout and stderr (plain variables there, as its manual documents) at
// memory streams while the tool runs. libFuzzer keeps its own copy of the original stderr and the
// sanitizers write to file descriptor 2, so their reports stay readable. Redirecting descriptor 2
// instead would hide those reports.
#if !defined(__GLIBC__)
#error "fuzz/tool_files.cpp captures the tool's output by assigning glibc's stdout and stderr; other C libraries do not allow it"
#endif

namespace {

namespace fs = std::filesystem;

constexpr std::size_t header_bytes = 4;
// Larger files only repeat what smaller ones cover, and spec replays a file eight times.
constexpr std::size_t max_file = 4096;
constexpr std::string_view sentinel = "qk-fuzz sentinel \xa5\x5a";

enum class outcome { success, usage_error, file_error, library_error };

const char* outcome_name(outcome o)
{
    switch (o) {
    case outcome::success: return "success";
    case outcome::usage_error: return "usage_error";
    case outcome::file_error: return "fail()'s std::runtime_error";
    case outcome::library_error: break;
    }
    return "qk::error";
}

// What one call of the tool did.
struct result {
    outcome what = outcome::success;
    std::string message; // the exception's
    std::string out;     // what the tool printed to stdout
    std::string err;     // and to stderr
};

std::FILE* real_stdout = nullptr;
std::FILE* real_stderr = nullptr;
std::span<const std::uint8_t> current_input;
std::string directory; // this process's, under /dev/shm (or /tmp)
std::string in_path;
std::string importance_path;
std::string out_path;
std::string out_directory; // the output that is a directory

[[noreturn]] void report(const std::string& what, const result* r = nullptr)
{
    std::fprintf(real_stderr, "tool_files: %s\n", what.c_str());
    if (r != nullptr) {
        std::fprintf(real_stderr, "  the call: %s%s%s\n  its stdout: %.2000s\n  its stderr: %.2000s\n", outcome_name(r->what),
                     r->message.empty() ? "" : ": ", r->message.c_str(), r->out.c_str(), r->err.c_str());
    }
    std::fprintf(real_stderr, "input (%zu bytes):", current_input.size());
    for (std::size_t i = 0; i < current_input.size() && i < 64; ++i) {
        std::fprintf(real_stderr, " %02x", current_input[i]);
    }
    std::fprintf(real_stderr, "\n");
    std::abort(); // a broken contract, reported by libFuzzer like a crash
}

void require(bool ok, const std::string& what, const result* r = nullptr)
{
    if (!ok) {
        report(what, r);
    }
}

std::string_view text_of(std::span<const std::uint8_t> bytes)
{
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

void write_bytes(const std::string& path, std::string_view bytes)
{
    std::FILE* f = std::fopen(path.c_str(), "wb");
    const bool ok = f != nullptr && std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    require(f != nullptr && std::fclose(f) == 0 && ok, "the target could not write " + path);
}

// The file's bytes, or nothing where there is no regular file.
std::optional<std::string> read_bytes(const std::string& path)
{
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
        return std::nullopt;
    }
    std::FILE* f = std::fopen(path.c_str(), "rb");
    require(f != nullptr, "the target could not open " + path);
    std::string bytes;
    char buffer[4096];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, f)) > 0;) {
        bytes.append(buffer, n);
    }
    std::fclose(f);
    return bytes;
}

// Runs one call of the tool with its stdout and stderr captured, and classifies how it ended as
// main() does; any other exception is a finding.
template <class F>
result run_tool(F&& call)
{
    result r;
    char* out_text = nullptr;
    char* err_text = nullptr;
    std::size_t out_size = 0;
    std::size_t err_size = 0;
    std::FILE* out = open_memstream(&out_text, &out_size);
    std::FILE* err = open_memstream(&err_text, &err_size);
    require(out != nullptr && err != nullptr, "open_memstream failed");
    stdout = out;
    stderr = err;
    std::string unexpected;
    try {
        call();
    } catch (const qk_tool::usage_error& e) {
        r.what = outcome::usage_error;
        r.message = e.what();
    } catch (const qk::error& e) {
        r.what = outcome::library_error;
        r.message = e.what();
        if (typeid(e) != typeid(qk::error)) {
            unexpected = fmt::format("the call threw {}, a type derived from qk::error", typeid(e).name());
        }
    } catch (const std::runtime_error& e) {
        // fail() throws exactly std::runtime_error; fmt::format_error and std::filesystem's
        // errors derive from it but are not the tool's messages.
        r.what = outcome::file_error;
        r.message = e.what();
        if (typeid(e) != typeid(std::runtime_error)) {
            unexpected = fmt::format("the call threw {}, not fail()'s plain std::runtime_error", typeid(e).name());
        }
    } catch (const std::exception& e) {
        r.message = e.what();
        unexpected = fmt::format("the call threw {}, neither usage_error, fail()'s std::runtime_error nor qk::error", typeid(e).name());
    } catch (...) {
        unexpected = "the call threw something that is not a std::exception";
    }
    stdout = real_stdout;
    stderr = real_stderr;
    std::fclose(out);
    std::fclose(err);
    r.out.assign(out_text, out_size);
    r.err.assign(err_text, err_size);
    std::free(out_text);
    std::free(err_text);
    if (!unexpected.empty()) {
        report(unexpected, &r);
    }
    return r;
}

// What a call must do, worked out from the bytes and options without the tool.
struct expectation {
    outcome what = outcome::success;
    bool or_library_error = false; // a GGUF conversion: the library may still refuse what it read
    std::string output;            // a raw conversion's output file
    bool not_finite = false;       // raw dequantize: values its warning is about
    std::size_t tensors = 0;       // a GGUF conversion: the input's tensors
};

expectation expect(outcome what)
{
    expectation e;
    e.what = what;
    return e;
}

void check_outcome(const expectation& e, const result& r)
{
    const bool ok = r.what == e.what || (e.or_library_error && r.what == outcome::library_error);
    require(ok, fmt::format("expected {}{}", outcome_name(e.what), e.or_library_error ? " or qk::error" : ""), &r);
}

// No file but the ones the target made: the tool's temporary files are gone, written or not.
void require_no_strays(const result& r)
{
    for (const fs::directory_entry& entry : fs::directory_iterator(directory)) {
        const std::string path = entry.path().string();
        require(path == in_path || path == importance_path || path == out_path || path == out_directory,
                "a file left behind: " + path, &r);
    }
    require(fs::is_directory(out_directory) && fs::is_empty(out_directory), "the output directory was changed", &r);
}

// ---------------------------------------------------------------------------------------------
// quantize, dequantize

struct type_choice {
    const char* text;
    std::optional<qk::format> format;
};

// Letter case varies, as the tool accepts any; the last two are refused.
constexpr std::array<type_choice, 8> types = {{
    {"Q8_0", qk::format::q8_0},
    {"q8_k", qk::format::q8_K},
    {"MXFP4", qk::format::mxfp4},
    {"iq4_nl", qk::format::iq4_nl},
    {"IQ4_XS", qk::format::iq4_xs},
    {"Nvfp4", qk::format::nvfp4},
    {"", std::nullopt},
    {"Q4_0", std::nullopt},
}};

std::size_t cols_of(std::uint8_t b)
{
    const std::size_t k = b & 63u;
    switch (b >> 6) {
    case 0: return 32 * (k + 1);
    case 1: return 256 * (k + 1);
    case 2: return k;
    default: return (SIZE_MAX >> k) & ~std::size_t{255};
    }
}

std::vector<float> floats_of(std::span<const std::uint8_t> bytes)
{
    std::vector<float> values(bytes.size() / sizeof(float));
    if (!values.empty()) {
        std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
    }
    return values;
}

template <class T>
std::string bytes_of(const std::vector<T>& values)
{
    return {reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T)};
}

template <class Block>
expectation expect_quantize(std::span<const std::uint8_t> input, std::optional<std::span<const std::uint8_t>> importance,
                            std::size_t cols)
{
    constexpr std::size_t block_size = qk::format_traits<Block>::block_size;
    if (cols % block_size != 0 || (importance && !qk::importance_format<Block>)) {
        return expect(outcome::usage_error);
    }
    if (input.empty() || input.size() % sizeof(float) != 0 || input.size() / sizeof(float) % cols != 0) {
        return expect(outcome::file_error);
    }
    if (importance && (importance->size() % sizeof(float) != 0 || importance->size() / sizeof(float) != cols)) {
        return expect(outcome::file_error);
    }
    const std::vector<float> x = floats_of(input);
    std::vector<Block> y(x.size() / block_size);
    try {
        if constexpr (qk::importance_format<Block>) {
            if (importance) {
                qk::quantize<Block>(x, std::span<Block>(y), floats_of(*importance));
            } else {
                qk::quantize<Block, qk::arch::generic>(x, std::span<Block>(y));
            }
        } else {
            qk::quantize<Block, qk::arch::generic>(x, std::span<Block>(y));
        }
    } catch (const qk::error&) {
        return expect(outcome::file_error); // the tool says which file
    }
    expectation e;
    e.output = bytes_of(y);
    return e;
}

template <class Block>
expectation expect_dequantize(std::span<const std::uint8_t> input, std::size_t cols)
{
    constexpr std::size_t block_size = qk::format_traits<Block>::block_size;
    std::size_t row_bytes = 0;
    if (cols % block_size != 0 || __builtin_mul_overflow(cols / block_size, sizeof(Block), &row_bytes)) {
        return expect(outcome::usage_error);
    }
    if (input.empty() || input.size() % row_bytes != 0) {
        return expect(outcome::file_error);
    }
    std::vector<Block> blocks(input.size() / sizeof(Block));
    std::memcpy(blocks.data(), input.data(), input.size());
    std::vector<float> y(blocks.size() * block_size);
    qk::dequantize<Block>(std::span<const Block>(blocks), std::span<float>(y));
    expectation e;
    e.output = bytes_of(y);
    e.not_finite = std::ranges::any_of(y, [](float v) { return !std::isfinite(v); });
    return e;
}

// In the order run_quantize and run_dequantize check: the output, the input's form, then the
// options each form needs and its file.
expectation expect_convert(bool dequantize, const qk_tool::convert_options& opt, const type_choice& type,
                           std::span<const std::uint8_t> input, std::optional<std::span<const std::uint8_t>> importance)
{
    if (opt.output == opt.input) {
        return expect(outcome::usage_error);
    }
    if (opt.output == out_directory) {
        return expect(outcome::file_error);
    }
    if (text_of(input).starts_with("GGUF")) {
        const bool raw_options = opt.cols != 0 || (dequantize ? !opt.type.empty() : importance.has_value());
        if (raw_options || (!dequantize && !type.format)) {
            return expect(outcome::usage_error);
        }
        expectation e;
        try {
            e.tensors = qk::gguf::file(std::as_bytes(input)).tensors().size();
        } catch (const qk::error&) {
            return expect(outcome::library_error);
        }
        e.or_library_error = true;
        return e;
    }
    if (!type.format || opt.cols == 0) {
        return expect(outcome::usage_error);
    }
    return qk::visit_format(*type.format, [&]<class Block>(std::type_identity<Block>) {
        return dequantize ? expect_dequantize<Block>(input, opt.cols) : expect_quantize<Block>(input, importance, opt.cols);
    });
}

void fuzz_convert(bool dequantize, bool with_importance, std::span<const std::uint8_t> h, std::span<const std::uint8_t> bytes)
{
    const type_choice& type = types[h[1] & 7u];
    qk_tool::convert_options opt;
    opt.type = type.text;
    opt.cols = cols_of(h[2]);
    opt.threads = (h[1] & 8u) != 0 ? 2 : 1;
    opt.input = in_path;
    std::span<const std::uint8_t> input = bytes;
    std::optional<std::span<const std::uint8_t>> importance;
    if (with_importance) {
        std::size_t split = bytes.size();
        if (opt.cols <= bytes.size() / sizeof(float)) {
            const auto wanted = static_cast<std::ptrdiff_t>(opt.cols * sizeof(float)) + static_cast<std::int8_t>(h[3]);
            split = static_cast<std::size_t>(std::clamp<std::ptrdiff_t>(wanted, 0, static_cast<std::ptrdiff_t>(bytes.size())));
        }
        importance = bytes.first(split);
        input = bytes.subspan(split);
        write_bytes(importance_path, text_of(*importance));
        opt.importance = importance_path;
    }
    write_bytes(in_path, text_of(input));
    const unsigned output_kind = (h[1] >> 4) & 3u;
    opt.output = output_kind == 2 ? in_path : output_kind == 3 ? out_directory : out_path;
    if (output_kind == 0) {
        write_bytes(out_path, sentinel);
    }

    const expectation e = expect_convert(dequantize, opt, type, input, importance);
    const result r = run_tool([&] { static_cast<void>(dequantize ? qk_tool::run_dequantize(opt) : qk_tool::run_quantize(opt)); });
    check_outcome(e, r);
    require(read_bytes(in_path) == text_of(input), "the input file was changed", &r);
    require(!importance || read_bytes(importance_path) == text_of(*importance), "the importance file was changed", &r);
    const std::optional<std::string> written = read_bytes(out_path);
    if (r.what != outcome::success) {
        require(output_kind == 0 ? written == sentinel : output_kind == 1 ? !written.has_value() : true,
                "a refused call changed the output", &r);
    } else if (e.or_library_error) {
        require(written.has_value(), "a GGUF conversion succeeded without an output", &r);
        try {
            const qk::gguf::file out(std::as_bytes(std::span<const char>(written->data(), written->size())));
            require(out.tensors().size() == e.tensors, "a GGUF conversion wrote another number of tensors", &r);
        } catch (const qk::error& error) {
            report(std::string("a GGUF conversion wrote a file that does not read back: ") + error.what(), &r);
        }
    } else {
        require(written == e.output, "the output is not what the library makes of the input", &r);
        if (dequantize) {
            require(e.not_finite == r.err.starts_with("qk: warning:"),
                    "dequantize warns about values that are not finite, or misses them", &r);
        }
    }
    require_no_strays(r);
}

// ---------------------------------------------------------------------------------------------
// sample

struct chain_choice {
    const char* text;
    std::optional<std::uint64_t> written_seed; // the seed the text gives a sampler, if any
};

// Valid chains (seeded and not, penalties and DRY, which draws change), and three refused ones.
constexpr std::array<chain_choice, 16> chains = {{
    {"greedy", std::nullopt},
    {"penalties(last_n=64,repeat=1.1);top_k(40);top_p(0.95);min_p(0.05);temp(0.8);dist", std::nullopt},
    {"top_k(3);dist(seed=7)", 7},
    {"logit_bias(0=-inf,2=1.5);temp(0.5);dist", std::nullopt},
    {"penalties(last_n=8,repeat=1.3,frequency=0.2,presence=0.1);top_k(5);dist", std::nullopt},
    {"dry(multiplier=0.8,base=1.75,allowed_length=2,last_n=16,breakers=[[1],[2,3]]);dist", std::nullopt},
    {"xtc(0.5,0.1,1);dist(seed=7)", 7},
    {"mirostat(5,0.1,100,3)", 3},
    {"mirostat_v2(tau=4,eta=0.2)", std::nullopt},
    {"top_n_sigma(1);typical(0.9);top_p(0.8,min_keep=2);min_p(p=0.1);temp_ext(0.9,0.2,1.5);dist", std::nullopt},
    {"min_p(0.01);adaptive_p(target=0.4,decay=0.8,seed=5)", 5},
    {"temp(0.8)", std::nullopt},
    {"top_k(", std::nullopt},
    {"top_k(0);greedy", std::nullopt},
    {"logit_bias(1=-inf);greedy", std::nullopt},
    {"top_k(2);top_k(", std::nullopt},
}};

struct seed_choice {
    const char* text;
    bool valid;
    std::uint64_t value;
};

// Not "-1": a random seed would make runs differ, and CI's fixed runs must not.
constexpr std::array<seed_choice, 8> seeds = {{
    {"", true, qk_tool::default_seed},
    {"0", true, 0},
    {"7", true, 7},
    {"3", true, 3},
    {"18446744073709551615", true, UINT64_MAX},
    {"-2", false, 0},
    {"x7", false, 0},
    {"18446744073709551616", false, 0},
}};

// The tokens, or what refuses first: the file, then the options in the order run_sample checks.
expectation expect_sample(std::span<const std::uint8_t> bytes, const qk_tool::sample_options& opt, const chain_choice& chain,
                          const seed_choice& seed, std::vector<std::int32_t>& tokens)
{
    if (bytes.empty() || bytes.size() % sizeof(float) != 0) {
        return expect(outcome::file_error);
    }
    if (!seed.valid) {
        return expect(outcome::usage_error);
    }
    std::optional<qk::sampling::chain> c;
    try {
        c = qk::sampling::chain::parse(chain.text);
    } catch (const qk::error&) {
        return expect(outcome::usage_error);
    }
    if (!opt.seed.empty() && chain.written_seed && *chain.written_seed != seed.value) {
        return expect(outcome::usage_error);
    }
    if (opt.backend != "cpu" && !(opt.backend == "vulkan" && qk::backend::vulkan::enabled)) {
        return expect(outcome::usage_error);
    }
    for (std::size_t i = 0; i < c->size(); ++i) {
        if (!c->seed_written(i)) {
            (*c)[i].reseed(seed.value);
        }
    }
    const std::vector<float> logits = floats_of(bytes);
    try {
        for (std::int64_t i = 0; i < opt.n; ++i) {
            tokens.push_back(c->sample(logits));
        }
    } catch (const qk::error&) {
        return expect(outcome::library_error);
    }
    return {};
}

void fuzz_sample(std::span<const std::uint8_t> h, std::span<const std::uint8_t> bytes)
{
    const chain_choice& chain = chains[h[1] & 15u];
    const seed_choice& seed = seeds[(h[1] >> 4) & 7u];
    qk_tool::sample_options opt;
    opt.logits = in_path;
    opt.chain = chain.text;
    opt.seed = seed.text;
    opt.backend = (h[1] & 0x80u) != 0 ? "vulkan" : "cpu";
    opt.n = 1 + h[2] % 16;
    write_bytes(in_path, text_of(bytes));

    std::vector<std::int32_t> tokens;
    const expectation e = expect_sample(bytes, opt, chain, seed, tokens);
    const result r = run_tool([&] { static_cast<void>(qk_tool::run_sample(opt)); });
    check_outcome(e, r);
    if (r.what == outcome::success) {
        std::string line;
        for (const std::int32_t t : tokens) {
            line += fmt::format("{}{}", line.empty() ? "" : " ", t);
        }
        require(r.out.substr(0, r.out.find('\n')) == line, "qk sample drew other tokens than the chain itself: " + line, &r);
    }
    require(read_bytes(in_path) == text_of(bytes), "the logits file was changed", &r);
    require_no_strays(r);
}

// ---------------------------------------------------------------------------------------------
// spec

// A file of ids read independently of parse_ids: the ids, or the first word that is not one, with
// its place and what the tool must say about it.
struct ids_reading {
    std::vector<std::int32_t> ids;
    bool bad = false;
    std::size_t index = 0; // 1-based, as the message counts
    std::size_t line = 1;
    std::size_t column = 0;
    std::vector<const char*> problems; // one of these
};

ids_reading read_ids(std::string_view text)
{
    ids_reading r;
    const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
    std::size_t line_start = 0;
    for (std::size_t i = 0; i < text.size();) {
        if (space(text[i])) {
            if (text[i] == '\n') {
                ++r.line;
                line_start = i + 1;
            }
            ++i;
            continue;
        }
        std::size_t end = i;
        while (end < text.size() && !space(text[end])) {
            ++end;
        }
        const std::string_view word = text.substr(i, end - i);
        const bool negative = word.starts_with('-');
        std::string_view digits = word.substr(negative ? 1 : 0);
        const bool integer = !digits.empty() && std::ranges::all_of(digits, [](char c) { return c >= '0' && c <= '9'; });
        if (integer) {
            digits.remove_prefix(std::min(digits.find_first_not_of('0'), digits.size()));
            const std::string_view limit = negative ? "2147483648" : "2147483647";
            const bool fits = digits.size() < limit.size() || (digits.size() == limit.size() && digits <= limit);
            if (fits && (!negative || digits.empty())) {
                std::int64_t value = 0;
                for (const char c : digits) {
                    value = value * 10 + (c - '0');
                }
                r.ids.push_back(static_cast<std::int32_t>(value));
                i = end;
                continue;
            }
            r.problems = {fits ? "is negative (token ids are not)" : "is out of range (token ids are 32-bit)"};
        } else {
            // std::from_chars reports a number too large before the junk that follows it.
            r.problems = {"is not an integer", "is out of range (token ids are 32-bit)"};
        }
        r.bad = true;
        r.index = r.ids.size() + 1;
        r.column = i - line_start + 1;
        return r;
    }
    return r;
}

std::int32_t spec_size(std::uint8_t b)
{
    return b < 0xf0 ? 1 + b % 24 : 4096 - (b - 0xf0);
}

// The message names the word's place and problem, and shows the word in printable ASCII: what()
// ends at a NUL byte, and control bytes would reach the terminal.
void check_ids_message(const ids_reading& ids, const result& r)
{
    const std::string place = fmt::format("token {} (", ids.index);
    const std::string where = fmt::format(", line {}, column {}) ", ids.line, ids.column);
    const bool named = std::ranges::any_of(ids.problems, [&](const char* p) { return r.message.ends_with(where + p); });
    require(r.message.find(place) != std::string::npos && named,
            fmt::format("the message does not name token {} at line {}, column {} and its problem", ids.index, ids.line, ids.column), &r);
    require(std::ranges::all_of(r.message, [](char c) { return c >= 0x20 && c < 0x7f; }), "the message is not printable ASCII", &r);
}

// parse_ids and bytes_as_tokens called directly, as run_spec calls them.
void check_readers(bool ids, std::span<const std::uint8_t> bytes, const ids_reading& expected)
{
    const std::span<const std::byte> file = std::as_bytes(bytes);
    if (!ids) {
        const std::vector<std::int32_t> tokens = qk_tool::bytes_as_tokens(file);
        require(std::ranges::equal(tokens, bytes, [](std::int32_t t, std::uint8_t b) { return t == b; }),
                "bytes_as_tokens did not give one token per byte, its value");
        return;
    }
    const result r = run_tool([&] {
        const std::vector<std::int32_t> tokens = qk_tool::parse_ids(file, in_path);
        require(!expected.bad && tokens == expected.ids, "parse_ids read other ids than an independent reading");
        std::string text;
        for (const std::int32_t t : tokens) {
            text += fmt::format("{}\n", t);
        }
        const std::vector<std::int32_t> again = qk_tool::parse_ids(std::as_bytes(std::span<const char>(text.data(), text.size())), "again");
        require(again == tokens, "parse_ids does not read back the ids it read, printed");
    });
    check_outcome(expect(expected.bad ? outcome::file_error : outcome::success), r);
    if (expected.bad) {
        check_ids_message(expected, r);
    }
}

void fuzz_spec(bool ids, std::span<const std::uint8_t> h, std::span<const std::uint8_t> bytes)
{
    qk_tool::spec_options opt;
    opt.file = in_path;
    opt.ids = ids;
    opt.n = spec_size(h[1]);
    opt.m = spec_size(h[2]);
    write_bytes(in_path, text_of(bytes));

    const ids_reading reading = ids ? read_ids(text_of(bytes)) : ids_reading{};
    check_readers(ids, bytes, reading);
    const std::size_t tokens = ids ? reading.ids.size() : bytes.size();
    const bool refused = reading.bad || tokens < 2;
    static bool replayed = false;
    if (!refused && std::exchange(replayed, true)) {
        return;
    }
    const result r = run_tool([&] { static_cast<void>(qk_tool::run_spec(opt)); });
    check_outcome(expect(refused ? outcome::file_error : outcome::success), r);
    if (reading.bad) {
        check_ids_message(reading, r);
    } else if (r.what == outcome::success) {
        const std::string counted = fmt::format(": {} tokens, prompt {}, ", tokens, std::min<std::size_t>(32, tokens - 1));
        require(r.out.substr(0, r.out.find('\n')).find(counted) != std::string::npos, "qk spec's first line lacks '" + counted + "'", &r);
    }
    require(read_bytes(in_path) == text_of(bytes), "the spec file was changed", &r);
    require_no_strays(r);
}

void remove_directory()
{
    std::error_code ec;
    fs::remove_all(directory, ec);
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    real_stdout = stdout;
    real_stderr = stderr;
    // log: the progress lines a GGUF conversion prints per tensor, captured like the rest (stderr
    // is a memory stream during a call, which would pick log anyway, but QK_PROGRESS overrides).
    setenv("QK_PROGRESS", "log", 1);
    const bool shm = fs::is_directory("/dev/shm");
    std::string name = shm ? "/dev/shm/qk-tool-files-XXXXXX" : "/tmp/qk-tool-files-XXXXXX";
    if (mkdtemp(name.data()) == nullptr) {
        std::fprintf(stderr, "tool_files: cannot create a directory %s: %s\n", name.c_str(), std::strerror(errno));
        std::abort();
    }
    directory = name;
    in_path = directory + "/in";
    importance_path = directory + "/importance";
    out_path = directory + "/out";
    out_directory = directory + "/out-directory";
    fs::create_directory(out_directory);
    std::atexit(remove_directory);
    // Every chain's written seed as the table says: the seed conflicts expected depend on it.
    for (const chain_choice& c : chains) {
        try {
            const qk::sampling::chain parsed = qk::sampling::chain::parse(c.text);
            bool written = false;
            for (std::size_t i = 0; i < parsed.size(); ++i) {
                written = written || parsed.seed_written(i);
            }
            require(written == c.written_seed.has_value(), std::string("the chain table is wrong about the seed of ") + c.text);
        } catch (const qk::error&) {
            require(!c.written_seed, std::string("the chain table gives a seed to a chain that does not parse: ") + c.text);
        }
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    if (size < header_bytes || size > header_bytes + max_file) {
        return 0;
    }
    current_input = std::span<const std::uint8_t>(data, size);
    const std::span<const std::uint8_t> h = current_input.first(header_bytes);
    const std::span<const std::uint8_t> bytes = current_input.subspan(header_bytes);
    std::error_code ec;
    fs::remove(out_path, ec);
    fs::remove(importance_path, ec);
    switch (h[0] % 6) {
    case 0: fuzz_convert(false, false, h, bytes); break;
    case 1: fuzz_convert(false, true, h, bytes); break;
    case 2: fuzz_convert(true, false, h, bytes); break;
    case 3: fuzz_sample(h, bytes); break;
    case 4: fuzz_spec(false, h, bytes); break;
    default: fuzz_spec(true, h, bytes); break;
    }
    return 0;
}
