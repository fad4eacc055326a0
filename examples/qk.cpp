// qk: the qkern command-line tool. `qk tour` (the default) shows what this build and this CPU
// offer and checks every block format's round trip and dot product on built-in data; `qk info`
// prints the build and CPU facts alone; `qk quantize` / `qk dequantize` convert raw float32 files
// to and from rows of GGUF blocks; `qk bench` times the kernels; `qk solve` times a triangular solve;
// `qk sample` draws tokens through a sampler chain (qk::sampling) and times each draw; `qk spec`
// replays a text file, a file of token ids or a built-in sample through the n-gram drafters
// (qk::spec) and prints what drafting would save.
#include <qkern.hpp>
#include <backends/cpu/read_bandwidth.hpp>
#include <backends/cpu/context.hpp>
#include <backends/vulkan/vulkan.hpp>

#include <algorithm>
#include <bit>
#include <charconv>
#include <chrono>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <new>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

namespace {

// ---------------------------------------------------------------------------------------------
// Build and CPU facts

std::string version_string()
{
    return fmt::format("qk {}.{}.{}", QKERN_VERSION_MAJOR, QKERN_VERSION_MINOR, QKERN_VERSION_PATCH);
}

std::string compiler_description()
{
    // Clang defines __GNUC__ too (as 4.2), so it must be tested first.
#if defined(__clang__) && defined(__apple_build_version__)
    return fmt::format("Apple Clang {}.{}.{}", __clang_major__, __clang_minor__, __clang_patchlevel__);
#elif defined(__clang__)
    return fmt::format("Clang {}.{}.{}", __clang_major__, __clang_minor__, __clang_patchlevel__);
#elif defined(__GNUC__)
    return fmt::format("GCC {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#elif defined(_MSC_VER)
    return fmt::format("MSVC {}", _MSC_FULL_VER);
#else
    return "an unknown compiler";
#endif
}

std::string cplusplus_description()
{
    // MSVC reports 199711L in __cplusplus unless /Zc:__cplusplus is given; _MSVC_LANG is truthful.
#if defined(_MSVC_LANG)
    constexpr long standard = _MSVC_LANG;
#else
    constexpr long standard = __cplusplus;
#endif
    const char* name = standard > 202002L ? "C++23 (or a draft of it)" : standard >= 202002L ? "C++20" : "pre-C++20";
    return fmt::format("{} (__cplusplus = {}L)", name, standard);
}

// xsimd's generic tag has no name() or version(), unlike the instruction-set tags.
template <class Tag>
constexpr std::string_view tag_name()
{
    if constexpr (requires { Tag::name(); }) {
        return Tag::name();
    } else {
        return std::is_same_v<Tag, xsimd::generic> ? "generic" : "(unnamed tag)";
    }
}

struct feature {
    bool present;
    const char* name;
};

std::string join_present(std::span<const feature> features, std::string_view if_none)
{
    std::string out;
    for (const feature& f : features) {
        if (f.present) {
            out += out.empty() ? "" : " ";
            out += f.name;
        }
    }
    return out.empty() ? std::string(if_none) : out;
}

// What the compiler was allowed to emit: the instruction sets the kernels can be built for.
std::string compiler_enabled_features()
{
    static constexpr feature features[] = {
#if defined(__SSE2__)
        {true, "sse2"},
#endif
#if defined(__SSE4_2__)
        {true, "sse4.2"},
#endif
#if defined(__AVX__)
        {true, "avx"},
#endif
#if defined(__AVX2__)
        {true, "avx2"},
#endif
#if defined(__FMA__)
        {true, "fma"},
#endif
#if defined(__F16C__)
        {true, "f16c"},
#endif
#if defined(__AVX512F__)
        {true, "avx512f"},
#endif
#if defined(__AVX512BW__)
        {true, "avx512bw"},
#endif
#if defined(__AVX512VNNI__)
        {true, "avx512vnni"},
#endif
#if defined(__ARM_NEON)
        {true, "neon"},
#endif
#if defined(__ARM_FEATURE_DOTPROD)
        {true, "dotprod"},
#endif
        {false, ""}, // keeps the array non-empty on targets with none of the above
    };
    return join_present(features, "none of sse2..avx512vnni, neon, dotprod");
}

// What the running CPU offers of the features qkern has tags for (qk::running_cpu(), which also
// checks that the OS saves the wider registers); it may exceed what the flags enable.
std::string cpu_features()
{
    const qk::cpu_features& cpu = qk::running_cpu();
    const feature features[] = {
        {cpu.sse4_2, "sse4.2"},         {cpu.popcnt, "popcnt"},         {cpu.avx2, "avx2"},         {cpu.fma, "fma"},
        {cpu.f16c, "f16c"},             {cpu.avx512f, "avx512f"},       {cpu.avx512bw, "avx512bw"}, {cpu.avx512dq, "avx512dq"},
        {cpu.avx512vl, "avx512vl"},     {cpu.avx512vnni, "avx512vnni"}, {cpu.neon64, "neon"},       {cpu.dotprod, "dotprod"},
    };
    return join_present(features, "none of the features qkern has kernels for");
}

// Calls f(Tag{}) for every tag this CPU runs, scalar reference first.
template <class F>
void for_each_runnable_tag(F&& f)
{
    f(qk::arch::generic{});
    [[maybe_unused]] const qk::cpu_features& cpu = qk::running_cpu();
#if QK_HAS_X86_KERNELS
    if (qk::runs<qk::arch::sse4_2>(cpu)) f(qk::arch::sse4_2{});
    if (qk::runs<qk::arch::avx2>(cpu)) f(qk::arch::avx2{});
    if (qk::runs<qk::arch::avx512bw>(cpu)) f(qk::arch::avx512bw{});
    if (qk::runs<qk::arch::avx512vnni>(cpu)) f(qk::arch::avx512vnni{});
#elif QK_HAS_ARM_KERNELS
    f(qk::arch::neon64{});
    if (qk::runs<qk::arch::neon64_dotprod>(cpu)) f(qk::arch::neon64_dotprod{});
#endif
}

// quantize and dot on the tag qk::dispatch picks for this CPU: the tool's kernels are the CPU's
// best whatever the build's flags (the bytes are the same on every tag).
template <class Block>
std::vector<Block> quantize_best(std::span<const float> x)
{
    return qk::dispatch([&]<class Tag>(Tag) { return qk::quantize<Block, Tag>(x); });
}

template <class Block>
void quantize_best(std::span<const float> x, std::span<Block> y)
{
    qk::dispatch([&]<class Tag>(Tag) { qk::quantize<Block, Tag>(x, y); });
}

template <qk::weight_format Block>
float dot_best(std::span<const Block> w, std::span<const typename qk::format_traits<Block>::vec_dot_type> a)
{
    return qk::dispatch([&]<class Tag>(Tag) { return qk::dot<Block, Tag>(w, a); });
}

// The tags of qkern's kernels that this CPU runs, lowest first.
std::string runnable_tags()
{
    std::string out;
    for_each_runnable_tag([&]<class Tag>(Tag) { out += fmt::format("{}{}", out.empty() ? "" : " ", tag_name<Tag>()); });
    return out;
}

// The tag qk::dispatch picks on this CPU: what dot, quantize and gemv run on in this tool.
std::string_view dispatched_tag()
{
    return qk::dispatch([]<class Tag>(Tag) { return tag_name<Tag>(); });
}

std::string hardware_threads()
{
    const unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? std::string("unknown") : fmt::format("{}", n);
}

// The Vulkan devices with the facts kernels size themselves by, or why there are none.
void print_vulkan_devices()
{
#if defined(QKERN_ENABLE_VULKAN)
    const auto devices = qk::backend::vulkan::list_devices();
    if (devices.empty()) {
        fmt::print("  vulkan         no device (no Vulkan driver, or it reports none)\n");
        return;
    }
    for (const auto& d : devices) {
        fmt::print("  vulkan {}       {} ({}, {}), class {}\n", d.index, d.name, qk::backend::vulkan::type_name(d.type), d.driver_name,
                   qk::backend::vulkan::name(d.arch));
        fmt::print("                 vendor 0x{:04x} device 0x{:04x}, Vulkan {}.{}.{}, driver {}\n", d.vendor_id, d.device_id,
                   VK_API_VERSION_MAJOR(d.api_version), VK_API_VERSION_MINOR(d.api_version), VK_API_VERSION_PATCH(d.api_version),
                   d.driver_info.empty() ? std::to_string(d.driver_version) : d.driver_info);
        std::string heaps;
        for (const auto& h : d.heaps) {
            heaps += fmt::format("{}{:.1f} GiB{}", heaps.empty() ? "" : ", ", static_cast<double>(h.bytes) / (1u << 30),
                                 h.device_local ? " device-local" : "");
        }
        fmt::print("                 memory heaps: {}\n", heaps);
        fmt::print("                 subgroup {} (range {}-{}), shared memory {} bytes, push constants {} bytes\n", d.subgroup_size,
                   d.min_subgroup_size, d.max_subgroup_size, d.shared_memory_bytes, d.push_constant_bytes);
        fmt::print("                 int8 storage {}, int8 math {}, fp16 storage {}, fp16 math {}, fp64 math {}\n",
                   d.int8_storage ? "yes" : "no", d.int8_arithmetic ? "yes" : "no", d.fp16_storage ? "yes" : "no",
                   d.fp16_arithmetic ? "yes" : "no", d.fp64_arithmetic ? "yes" : "no");
    }
#else
    fmt::print("  vulkan         not built in (configure with -DQKERN_VULKAN=ON and libvulkan-dev)\n");
#endif
}

// --backend: "cpu" or "vulkan" (an error where this build has no Vulkan backend).
void check_backend(const std::string& backend)
{
    if (backend != "cpu" && backend != "vulkan") {
        throw qk::error(fmt::format("--backend '{}': expected cpu or vulkan", backend));
    }
    if (backend == "vulkan" && !qk::backend::vulkan::enabled) {
        throw qk::error("--backend vulkan: this qk was built without the Vulkan backend (configure with -DQKERN_VULKAN=ON)");
    }
}

void print_info()
{
    fmt::print("{} (qkern header-only kernels)\n", version_string());
    fmt::print("  compiler       {}, {}\n", compiler_description(), cplusplus_description());
    fmt::print("  native tag     {} (qk::arch::native: the best tag the compiler flags enable)\n",
               tag_name<qk::arch::native>());
    fmt::print("  flags enable   {}\n", compiler_enabled_features());
    fmt::print("  CPU offers     {}\n", cpu_features());
    fmt::print("  CPU runs tags  {}\n", runnable_tags());
    // dot, quantize and gemv carry per-function targets, so this tool picks them at run time;
    // solve_tri and the sampling passes are plain xsimd vectors, which exist only as the flags allow.
    const std::string_view best = dispatched_tag();
    fmt::print("  kernels        dot, quantize, gemv: {} (chosen at run time for this CPU)\n", best);
    fmt::print("                 solve_tri: {}, sampling passes: {} (fixed at compile time by the flags)\n",
               tag_name<qk::arch::solve_tri_native>(), tag_name<qk::arch::vector_native>());
    if (best != tag_name<qk::arch::vector_native>() && best != "generic") {
        fmt::print("  hint           this CPU runs {}, but solve_tri and sampling were compiled for {}: build qk for this machine\n"
                   "                 (./scripts/try.sh does; CMake: leave QKERN_PORTABLE off, or -DQKERN_NATIVE=ON)\n",
                   best, tag_name<qk::arch::vector_native>());
    }
    fmt::print("  threads        {} hardware threads\n", hardware_threads());
    print_vulkan_devices();
}

// ---------------------------------------------------------------------------------------------
// The tour: built-in data, round trips and dot products

constexpr std::size_t tour_rows = 4;
constexpr std::size_t tour_cols = 4096; // a multiple of every block size (32 and 256)

// Gaussian-ish values that are the same on every platform: std::mt19937's output sequence is
// fixed by the standard, but std::normal_distribution's algorithm is not, so the sum of 12
// uniforms (Irwin-Hall: mean 6, variance 1) is taken instead.
std::vector<float> gaussian_values(std::size_t count, std::uint32_t seed)
{
    std::mt19937 engine(seed);
    std::vector<float> values(count);
    for (float& v : values) {
        double sum = 0.0;
        for (int k = 0; k < 12; ++k) {
            sum += static_cast<double>(engine()) / 4294967296.0;
        }
        v = static_cast<float>(sum - 6.0);
    }
    return values;
}

template <class Block>
constexpr double bits_per_weight()
{
    return static_cast<double>(sizeof(Block) * 8) / static_cast<double>(qk::format_traits<Block>::block_size);
}

template <class Block>
std::vector<float> round_trip(std::span<const float> x)
{
    const std::vector<Block> blocks = quantize_best<Block>(x);
    std::vector<float> y(x.size());
    qk::dequantize<Block>(std::span<const Block>(blocks), std::span<float>(y));
    return y;
}

// Prints one round-trip row; returns whether it passed. The check is a sanity bound, not an
// accuracy test (tests/ holds those): every one of these formats keeps the relative RMS error on
// Gaussian data well under 25%, while a wrong scale, sign or nibble order lands near 100% or more.
template <class Block>
bool tour_round_trip(std::span<const float> x)
{
    const std::vector<float> y = round_trip<Block>(x);
    double error_squares = 0.0;
    double value_squares = 0.0;
    double max_error = 0.0;
    bool finite = true;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double error = static_cast<double>(y[i]) - static_cast<double>(x[i]);
        finite = finite && std::isfinite(y[i]);
        error_squares += error * error;
        value_squares += static_cast<double>(x[i]) * static_cast<double>(x[i]);
        max_error = std::max(max_error, std::fabs(error));
    }
    const double relative_rms = std::sqrt(error_squares / value_squares);
    const bool ok = finite && relative_rms < 0.25;
    fmt::print("  {:<8} {:>5} {:>7.3f} {:>11.3f}% {:>11.5f}   {}\n", qk::format_traits<Block>::name, qk::format_traits<Block>::block_size,
               bits_per_weight<Block>(), 100.0 * relative_rms, max_error, ok ? "ok" : "FAIL");
    return ok;
}

struct dot_result {
    float best = 0.0f; // on the kernels qk::dispatch picks
    float generic = 0.0f;
    double dequantized = 0.0; // the dot of the dequantized rows, in double
    double exact = 0.0;       // the dot of the original floats, in double
    bool ok = true;
};

// How far apart two computations of one row's dot product may be.
//
// Every kernel forms one float term per group of 32 values (a Q8_0/MXFP4/IQ4_NL block, an IQ4_XS
// sub-block): t = d * sumi, where sumi is an exact integer sum and d a product of at most three
// scales, so each term carries at most 3 roundings. Adding n terms in float costs n - 1 more.
// With u = FLT_EPSILON / 2 and S = sum_i |w_i * a_i| over the dequantized values (which bounds
// every |t| and every partial sum), the standard bound for recursive summation gives
//     |computed - exact| <= (n + 2) * u * S   (to first order in u).
// A SIMD kernel may add in another order (lanes, then a horizontal sum) or fuse multiply-adds;
// that obeys the same bound, so |best - generic| <= 2 (n + 2) u S = (n + 2) * FLT_EPSILON * S,
// and the dot of the dequantized values in double is within half of that of either. We allow
// twice the bound, for the rounding of the dequantized values and in S, and second-order terms.
double dot_tolerance(std::size_t groups, double abs_sum)
{
    return 2.0 * static_cast<double>(groups + 2) * static_cast<double>(FLT_EPSILON) * abs_sum;
}

// y = W a for the tour's W (tour_rows x tour_cols), on the best kernels and by the generic reference, each
// row checked (best against generic, generic against the dequantized data, which catches a
// dot kernel that disagrees with dequantize); returns row 0's values to show.
template <qk::weight_format Block>
dot_result tour_dot(std::span<const float> w, std::span<const float> a)
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    const std::vector<Block> wq = quantize_best<Block>(w);
    const std::vector<activation> aq = quantize_best<activation>(a);

    std::vector<float> w_deq(w.size());
    std::vector<float> a_deq(a.size());
    qk::dequantize<Block>(std::span<const Block>(wq), std::span<float>(w_deq));
    qk::dequantize<activation>(std::span<const activation>(aq), std::span<float>(a_deq));

    const std::size_t row_blocks = tour_cols / qk::format_traits<Block>::block_size;
    const std::span<const activation> a_blocks(aq);
    dot_result result;
    for (std::size_t r = 0; r < tour_rows; ++r) {
        const std::span<const Block> row(wq.data() + r * row_blocks, row_blocks);
        const float best = dot_best<Block>(row, a_blocks);
        const float generic = qk::dot<Block, qk::arch::generic>(row, a_blocks);

        double exact = 0.0;
        double dequantized = 0.0;
        double abs_sum = 0.0;
        for (std::size_t i = 0; i < tour_cols; ++i) {
            const double product = static_cast<double>(w_deq[r * tour_cols + i]) * static_cast<double>(a_deq[i]);
            exact += static_cast<double>(w[r * tour_cols + i]) * static_cast<double>(a[i]);
            dequantized += product;
            abs_sum += std::fabs(product);
        }
        const double tolerance = dot_tolerance(tour_cols / 32, abs_sum);
        // Written so that a NaN anywhere fails the check.
        const bool row_ok = std::fabs(static_cast<double>(best) - static_cast<double>(generic)) <= tolerance &&
                            std::fabs(static_cast<double>(generic) - dequantized) <= tolerance;
        result.ok = result.ok && row_ok;
        if (r == 0) {
            result.best = best;
            result.generic = generic;
            result.dequantized = dequantized;
            result.exact = exact;
        }
    }
    return result;
}

// Returns whether every check passed.
bool run_tour()
{
    print_info();
    const std::vector<float> w = gaussian_values(tour_rows * tour_cols, 1);
    const std::vector<float> a = gaussian_values(tour_cols, 2);
    bool all_ok = true;

    fmt::print("\nround trip: quantize then dequantize {} x {} Gaussian weights\n", tour_rows, tour_cols);
    fmt::print("  {:<8} {:>5} {:>7} {:>12} {:>11}   {}\n", "format", "block", "bits/w", "rel RMS err", "max |err|", "check");
    for (qk::format f : qk::all_formats) {
        all_ok = qk::visit_format(f, [&]<class Block>(std::type_identity<Block>) { return tour_round_trip<Block>(w); }) && all_ok;
    }

    const std::string best_header = fmt::format("best ({})", dispatched_tag());
    const std::size_t best_width = std::max<std::size_t>(best_header.size(), 12);
    fmt::print("\ndot products: y = W a with a quantized too; y[0] shown, all {} rows checked\n", tour_rows);
    fmt::print("  {:<8} {:<6} {:>{}} {:>12} {:>12} {:>12}   {}\n", "format", "a as", best_header, best_width, "generic",
               "dequant f64", "exact f64", "check");
    for (qk::format f : qk::all_formats) {
        qk::visit_format(f, [&]<class Block>(std::type_identity<Block>) {
            if constexpr (qk::weight_format<Block>) {
                using activation = typename qk::format_traits<Block>::vec_dot_type;
                const dot_result d = tour_dot<Block>(w, a);
                all_ok = all_ok && d.ok;
                fmt::print("  {:<8} {:<6} {:>{}.5f} {:>12.5f} {:>12.5f} {:>12.5f}   {}\n", qk::format_traits<Block>::name,
                           qk::format_traits<activation>::name, d.best, best_width, d.generic, d.dequantized, d.exact,
                           d.ok ? "ok" : "FAIL");
            }
        });
    }
    fmt::print("  check: |best - generic| and |generic - dequant f64| within the float rounding bound\n");
    fmt::print("\n{}\n", all_ok ? "all checks passed" : "SOME CHECKS FAILED");
    return all_ok;
}

// ---------------------------------------------------------------------------------------------
// Files: read whole, validate, compute in memory, then replace the output in one rename

[[noreturn]] void fail(std::string message)
{
    throw std::runtime_error(std::move(message));
}

struct file_closer {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};
using file_handle = std::unique_ptr<std::FILE, file_closer>;

// Reads to end of file rather than trusting a size query, so pipes and /dev/stdin work too.
std::vector<std::byte> read_file(const std::string& path)
{
    const file_handle file(std::fopen(path.c_str(), "rb"));
    if (!file) {
        fail(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
    }
    std::vector<std::byte> bytes;
    std::size_t used = 0;
    for (;;) {
        bytes.resize(std::max<std::size_t>(used * 2, 1 << 20));
        used += std::fread(bytes.data() + used, 1, bytes.size() - used, file.get());
        if (used < bytes.size()) {
            break;
        }
    }
    if (std::ferror(file.get())) {
        fail(fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
    }
    bytes.resize(used);
    return bytes;
}

// The files hold little-endian values and blocks are stored byte for byte, so on a big-endian
// host reading and writing them would silently garble every value.
void require_little_endian()
{
    if constexpr (std::endian::native != std::endian::little) {
        fail("raw files are little-endian and this host is not; quantize/dequantize are unsupported here");
    }
}

std::vector<float> read_floats(const std::string& path, std::string_view role)
{
    const std::vector<std::byte> bytes = read_file(path);
    if (bytes.size() % sizeof(float) != 0) {
        fail(fmt::format("{} '{}' has {} bytes, not a multiple of 4: it is not raw float32", role, path, bytes.size()));
    }
    std::vector<float> values(bytes.size() / sizeof(float));
    if (!values.empty()) { // memcpy's pointers must not be null, even for 0 bytes
        std::memcpy(values.data(), bytes.data(), bytes.size());
    }
    return values;
}

// A new file beside the target, removed again unless commit() renames it over the target; so a
// failure at any step leaves the target as it was and no stray file behind.
class pending_file {
public:
    explicit pending_file(std::string target) : target_(std::move(target))
    {
        // fopen's "x" (exclusive create, C11) makes the name ours; the random suffix avoids
        // collisions with other runs. Unlike mkstemp, the file gets the usual 0666 & ~umask.
        std::random_device entropy;
        constexpr std::string_view alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
        for (int attempt = 0; attempt < 100 && !file_; ++attempt) {
            path_ = target_ + ".tmp-";
            for (int k = 0; k < 6; ++k) {
                path_ += alphabet[entropy() % alphabet.size()];
            }
            file_.reset(std::fopen(path_.c_str(), "wbx"));
            if (!file_ && errno != EEXIST) {
                break;
            }
        }
        if (!file_) {
            fail(fmt::format("cannot write '{}': creating the temporary file '{}' failed: {}", target_, path_, std::strerror(errno)));
        }
    }
    pending_file(const pending_file&) = delete;
    pending_file& operator=(const pending_file&) = delete;

    ~pending_file()
    {
        if (!committed_) {
            file_.reset();
            std::remove(path_.c_str());
        }
    }

    void write(std::span<const std::byte> bytes)
    {
        if (std::fwrite(bytes.data(), 1, bytes.size(), file_.get()) != bytes.size()) {
            fail(fmt::format("cannot write '{}' (via '{}'): {}", target_, path_, std::strerror(errno)));
        }
    }

    void commit()
    {
        // fclose flushes, so a full disk can show up only here.
        if (std::fclose(file_.release()) != 0) {
            fail(fmt::format("cannot write '{}' (via '{}'): {}", target_, path_, std::strerror(errno)));
        }
        // std::filesystem::rename replaces an existing target on every platform (std::rename
        // does not on Windows).
        std::error_code ec;
        std::filesystem::rename(path_, target_, ec);
        if (ec) {
            fail(fmt::format("cannot write '{}': renaming '{}' over it failed: {}", target_, path_, ec.message()));
        }
        committed_ = true;
    }

private:
    std::string target_;
    std::string path_;
    file_handle file_;
    bool committed_ = false;
};

template <class T>
void write_file(const std::string& path, std::span<const T> values)
{
    static_assert(std::is_trivially_copyable_v<T>);
    pending_file out(path);
    out.write(std::as_bytes(values));
    out.commit();
}

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
CLI::Validator positive_count()
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

CLI::App* add_convert_command(CLI::App& app, const char* name, const char* description, convert_options& opt, const char* input_help,
                              const char* output_help)
{
    CLI::App* cmd = app.add_subcommand(name, description);
    cmd->add_option("-t,--type", opt.type, "block format: Q8_0, Q8_K, MXFP4, IQ4_NL or IQ4_XS (any letter case)")->required();
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

} // namespace

// ---------------------------------------------------------------------------------------------
// qk bench: the kernels' speed on this machine, briefly (bench/ holds the full Google Benchmark
// suites). Mat-vec speed is reported against the streaming-read bandwidth measured in the same
// run, since a mat-vec reads each weight once and that bandwidth is its ceiling.

struct bench_options {
    std::string backend = "cpu";
    std::string json;
    double seconds = 0.05;
    std::vector<std::size_t> threads{1, 2};
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

// Blocks of random codes with moderate scales: kernel speed does not depend on the values, and
// quantizing a 14336 x 4096 matrix with the IQ4 model-file quantizers would take half a minute.
template <class Block>
std::vector<Block> random_blocks(std::size_t count, std::uint32_t seed)
{
    std::mt19937 engine(seed);
    std::vector<Block> blocks(count);
    auto* bytes = reinterpret_cast<unsigned char*>(blocks.data());
    for (std::size_t i = 0; i < count * sizeof(Block); ++i) {
        bytes[i] = static_cast<unsigned char>(engine());
    }
    for (Block& b : blocks) {
        if constexpr (std::is_same_v<Block, qk::block_mxfp4>) {
            b.e = static_cast<std::uint8_t>(120 + engine() % 8);
        } else if constexpr (std::is_same_v<Block, qk::block_q8_K>) {
            b.d = 0.01f;
        } else {
            b.d = qk::fp32_to_fp16(0.01f);
        }
    }
    return blocks;
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

std::vector<measurement> run_benchmarks(const bench_options& opt)
{
    constexpr std::size_t dot_values = 4096;
    constexpr std::size_t rows = 14336;
    constexpr std::size_t cols = 4096;
    std::size_t tags = 0;
    for_each_runnable_tag([&](auto) { ++tags; });
    progress_line progress(opt.threads.size() * (1 + 4) + 4 * tags);

    std::vector<measurement> results;
    std::vector<double> bandwidth(opt.threads.size());
    {
        const std::vector<float> buffer = qk::backend::cpu::make_bandwidth_buffer();
        for (std::size_t i = 0; i < opt.threads.size(); ++i) {
            progress.step(fmt::format("streaming read, {} thread(s)", opt.threads[i]));
            qk::backend::cpu::thread_pool pool(opt.threads[i]);
            bandwidth[i] = qk::backend::cpu::measure_read_bandwidth(pool, buffer);
            results.push_back({"read", "f32", "", opt.threads[i], 0.0, 0.0, bandwidth[i] / 1e9, 1.0});
        }
    }

    const auto bench_format = [&]<class Block>(std::type_identity<Block>) {
        if constexpr (qk::weight_format<Block>) {
            using activation = typename qk::format_traits<Block>::vec_dot_type;
            constexpr std::size_t size = qk::format_traits<Block>::block_size;
            const std::string name(qk::format_traits<Block>::name);

            const auto w = random_blocks<Block>(dot_values / size, 1);
            const auto a = random_blocks<activation>(dot_values / qk::format_traits<activation>::block_size, 2);
            for_each_runnable_tag([&]<class Tag>(Tag) {
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

            // Enough copies of the matrix to exceed any last-level cache (a 4-bit 14336 x 4096
            // matrix alone, ~31 MB, could sit in a 32 MiB L3); each call reads the next copy.
            const std::size_t matrix_blocks = rows * cols / size;
            const std::size_t copies = std::max<std::size_t>(1, ((std::size_t{128} << 20) + matrix_blocks * sizeof(Block) - 1) /
                                                                    (matrix_blocks * sizeof(Block)));
            const auto matrices = random_blocks<Block>(copies * matrix_blocks, 3);
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
                            const auto matrix = std::span<const Block>(matrices).subspan(next * matrix_blocks, matrix_blocks);
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
        }
    };
    for (qk::format f : qk::all_formats) {
        qk::visit_format(f, bench_format);
    }
    return results;
}

// qk bench --backend vulkan: the device's streaming read, then the mat-vec per format on resident
// weights (14336 x 4096, float activations), against that bandwidth.
std::vector<measurement> run_vulkan_benchmarks([[maybe_unused]] const bench_options& opt)
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
            const auto m = vk::upload_matrix<Block>(dev, std::span<const Block>(random_blocks<Block>(blocks, 3)), rows, cols);
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

void print_benchmarks(const std::vector<measurement>& results)
{
    fmt::print("{:<5} {:<7} {:<15} {:>7} {:>10} {:>9} {:>8} {:>8}\n", "op", "format", "arch", "threads", "ns/block", "ns/32", "GB/s",
               "% of bw");
    for (const measurement& m : results) {
        const std::string fraction = m.bandwidth_fraction >= 0 ? fmt::format("{:.1f}%", 100.0 * m.bandwidth_fraction) : "";
        if (m.op == "read") {
            fmt::print("{:<5} {:<7} {:<15} {:>7} {:>10} {:>9} {:>8.2f} {:>8}\n", m.op, m.format,
                       m.arch.empty() ? "streaming" : m.arch + " streaming", m.threads, "", "", m.gb_per_s, "");
        } else {
            fmt::print("{:<5} {:<7} {:<15} {:>7} {:>10.3f} {:>9.3f} {:>8.2f} {:>8}\n", m.op, m.format, m.arch, m.threads, m.ns_per_block,
                       m.ns_per_32, m.gb_per_s, fraction);
        }
    }
}

void write_benchmarks_json(const std::string& path, const std::vector<measurement>& results)
{
    std::string text = "[\n";
    for (std::size_t i = 0; i < results.size(); ++i) {
        const measurement& m = results[i];
        if (m.op == "read") {
            text += m.arch.empty() ? fmt::format(R"(  {{"op": "read", "threads": {}, "gb_per_s": {:.4f}}})", m.threads, m.gb_per_s)
                                   : fmt::format(R"(  {{"op": "read", "arch": "{}", "threads": {}, "gb_per_s": {:.4f}}})", m.arch,
                                                 m.threads, m.gb_per_s);
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

// ---------------------------------------------------------------------------------------------
// qk solve: one batched triangular solve on a random well-conditioned problem, timed, with its
// residual. The problem is drawn as ggml's tests draw theirs: diagonal magnitudes in [1, 2] with
// random signs, off-diagonal entries U(-1, 1) / sqrt(n), junk in the triangle that is not read.

struct solve_options {
    std::int64_t n = 64;
    std::int64_t k = 64;
    std::int64_t batch = 32;
    bool right = false;
    bool upper = false;
    bool unit = false;
    std::size_t threads = 1;
    int repeat = 20;
    std::string backend = "cpu";
};

// max over batches of ||A X - B|| / (||A|| ||X||) in the infinity norm, computed in double; a
// backward-stable solve keeps it below a small multiple of n * epsilon.
double solve_residual(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& x, const solve_options& opt,
                      const qk::tri_options& tri)
{
    const auto n = static_cast<std::size_t>(opt.n);
    const auto k = static_cast<std::size_t>(opt.k);
    double worst = 0.0;
    for (std::size_t q = 0; q < static_cast<std::size_t>(opt.batch); ++q) {
        const float* aq = a.data() + q * n * n;
        const auto coefficient = [&](std::size_t i, std::size_t j) -> double {
            if (i == j) {
                return tri.unit ? 1.0 : aq[i * n + i];
            }
            return (tri.lower ? j < i : j > i) ? aq[i * n + j] : 0.0;
        };
        // Left: R = A X - B (n x k); right: R = X A - B (k x n).
        const std::size_t rows = tri.left ? n : k;
        const std::size_t cols = tri.left ? k : n;
        const float* bq = b.data() + q * n * k;
        const float* xq = x.data() + q * n * k;
        double r_norm = 0.0;
        double x_norm = 0.0;
        double a_norm = 0.0;
        for (std::size_t r = 0; r < rows; ++r) {
            double r_sum = 0.0;
            double x_sum = 0.0;
            for (std::size_t c = 0; c < cols; ++c) {
                double v = -static_cast<double>(bq[r * cols + c]);
                for (std::size_t t = 0; t < n; ++t) {
                    v += tri.left ? coefficient(r, t) * xq[t * cols + c] : xq[r * cols + t] * coefficient(t, c);
                }
                r_sum += std::abs(v);
                x_sum += std::abs(static_cast<double>(xq[r * cols + c]));
            }
            r_norm = std::max(r_norm, r_sum);
            x_norm = std::max(x_norm, x_sum);
        }
        for (std::size_t i = 0; i < n; ++i) {
            double row = 0.0;
            for (std::size_t j = 0; j < n; ++j) {
                row += std::abs(coefficient(i, j));
            }
            a_norm = std::max(a_norm, row);
        }
        // Right solves: ||X A|| <= ||X|| ||A|| holds in the infinity norm as well.
        worst = std::max(worst, r_norm / (a_norm * x_norm));
    }
    return worst;
}

void report_solve(const solve_options& opt, const qk::tri_options& tri, const std::vector<float>& a, const std::vector<float>& b,
                  const std::vector<float>& x, double best, double total, const std::string& where)
{
    const auto n = static_cast<std::size_t>(opt.n);
    const auto k = static_cast<std::size_t>(opt.k);
    const auto batch = static_cast<std::size_t>(opt.batch);
    const double flops = static_cast<double>(n * n * k * batch);
    const double residual = solve_residual(a, b, x, opt, tri);
    fmt::print("solve_tri {} ({}): n = {}, k = {}, batch = {}, {}\n", tri.left ? "A X = B" : "X A = B",
               qk::detail::tri_variant_name(tri), n, k, batch, where);
    fmt::print("  time           {:.3f} ms best, {:.3f} ms mean of {} runs\n", best * 1e3, total / opt.repeat * 1e3, opt.repeat);
    fmt::print("  speed          {:.2f} GFLOP/s (n * n * k flops per batch)\n", flops / best * 1e-9);
    fmt::print("  residual       {:.3g} = {:.3g} n eps  (max over batches of ||AX - B|| / (||A|| ||X||), infinity norm)\n", residual,
               residual / (static_cast<double>(n) * FLT_EPSILON));
}

void run_solve(const solve_options& opt)
{
    const qk::tri_options tri{.left = !opt.right, .lower = !opt.upper, .unit = opt.unit};
    if (opt.n < 1 || opt.k < 1 || opt.batch < 1 || opt.n > 65536 || opt.k > (std::int64_t{1} << 30) / opt.n ||
        opt.batch > (std::int64_t{1} << 30) / (opt.n * std::max(opt.n, opt.k))) {
        throw qk::error(fmt::format("qk solve: --n {} --k {} --batch {}: each must be at least 1, and A and B at most 2^30 values",
                                    opt.n, opt.k, opt.batch));
    }
    const auto n = static_cast<std::size_t>(opt.n);
    const auto k = static_cast<std::size_t>(opt.k);
    const auto batch = static_cast<std::size_t>(opt.batch);
    std::mt19937 rng(20250101);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    std::uniform_real_distribution<float> junk(-100.0f, 100.0f);
    std::vector<float> a(n * n * batch);
    std::vector<float> b(n * k * batch);
    std::vector<float> x(b.size());
    const float off = 1.0f / std::sqrt(static_cast<float>(n));
    for (std::size_t q = 0; q < batch; ++q) {
        for (std::size_t i = 0; i < n; ++i) {
            for (std::size_t j = 0; j < n; ++j) {
                float& v = a[(q * n + i) * n + j];
                if (i == j) {
                    v = (unit(rng) < 0.0f ? -1.0f : 1.0f) * (1.0f + std::abs(unit(rng)));
                } else {
                    v = (tri.lower ? j < i : j > i) ? unit(rng) * off : junk(rng);
                }
            }
        }
    }
    for (float& v : b) {
        v = unit(rng);
    }

    const auto solve = [&]<class Context>(Context& context, const std::string& where) {
        double best = 1e300;
        double total = 0.0;
        for (int r = 0; r < opt.repeat; ++r) {
            const auto start = std::chrono::steady_clock::now();
            context.solve_tri(a.data(), b.data(), x.data(), opt.n, opt.k, opt.batch, tri);
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            best = std::min(best, seconds);
            total += seconds;
        }
        report_solve(opt, tri, a, b, x, best, total, where);
    };
    check_backend(opt.backend);
    if (opt.backend == "vulkan") {
#if defined(QKERN_ENABLE_VULKAN)
        qk::backend::vulkan::context context;
        solve(context, context.name() + " (times include the transfers)");
#endif
    } else {
        qk::backend::cpu::context context(opt.threads);
        solve(context, fmt::format("{} thread{}, tag {}", opt.threads, opt.threads == 1 ? "" : "s", tag_name<qk::arch::solve_tri_native>()));
    }
}

// ---------------------------------------------------------------------------------------------
// qk sample: a sampler chain run on one vocabulary of logits, from a file or built in. Every
// draw is accepted, as a decoding loop would, so penalties and mirostat change later draws even
// though the logits stay the same.

struct sample_options {
    std::string logits;
    std::int64_t vocab = 32000;
    std::string chain = "penalties(last_n=64,repeat=1.1);top_k(40);top_p(0.95);min_p(0.05);temp(0.8);dist(seed=42)";
    std::uint64_t seed = 42;
    std::int64_t n = 16;
    std::string backend = "cpu";
};

// Built-in logits shaped like a model's: a body of sigma 3 and a head of six tokens that hold
// most of the probability. Fixed generators, so every platform draws the same tokens.
std::vector<float> synthetic_logits(std::size_t n)
{
    std::vector<float> logits = gaussian_values(n, 20250101);
    for (float& v : logits) {
        v *= 3.0f;
    }
    std::mt19937 engine(20250102);
    for (const float h : {18.0f, 17.0f, 16.5f, 16.0f, 15.0f, 14.5f}) {
        logits[engine() % n] = h;
    }
    return logits;
}

void run_sample(const sample_options& opt)
{
    std::vector<float> logits;
    if (!opt.logits.empty()) {
        require_little_endian();
        logits = read_floats(opt.logits, "logits file");
        if (logits.empty()) {
            fail(fmt::format("logits file '{}' is empty: a vocabulary needs at least one logit", opt.logits));
        }
    } else {
        logits = synthetic_logits(static_cast<std::size_t>(opt.vocab));
    }
    qk::sampling::chain chain = qk::sampling::chain::parse(opt.chain);
    chain.reseed(opt.seed);

    check_backend(opt.backend);
    std::vector<std::int32_t> tokens;
    tokens.reserve(static_cast<std::size_t>(opt.n));
    double total = 0.0;
    double best = 1e300;
    // One sequence through the backend's batched entry point (the CPU's is chain.sample itself).
    const auto draw = [&]<class Context>(Context& context) {
        std::span<qk::sampling::chain> one(&chain, 1);
        std::int32_t token = -1;
        for (std::int64_t i = 0; i < opt.n; ++i) {
            const auto start = std::chrono::steady_clock::now();
            context.sample(logits, 1, logits.size(), one, {}, std::span<std::int32_t>(&token, 1));
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            tokens.push_back(token);
            total += seconds;
            best = std::min(best, seconds);
        }
    };
    std::string where = fmt::format("vector tag {}", tag_name<qk::arch::vector_native>());
    if (opt.backend == "vulkan") {
#if defined(QKERN_ENABLE_VULKAN)
        qk::backend::vulkan::context context;
        where = context.name() + ", times include the upload of the logits";
        draw(context);
#endif
    } else {
        qk::backend::cpu::context context(1);
        draw(context);
    }

    std::string line;
    for (const std::int32_t t : tokens) {
        line += fmt::format("{}{}", line.empty() ? "" : " ", t);
    }
    fmt::print("{}\n", line);
    // The first draw pays for the chain's buffers, so the mean can sit well above the minimum.
    fmt::print("  time per token {:.2f} us mean, {:.2f} us min over {} draws ({} logits from {}, {})\n",
               total / static_cast<double>(opt.n) * 1e6, best * 1e6, opt.n, logits.size(),
               opt.logits.empty() ? std::string("the built-in generator") : fmt::format("'{}'", opt.logits), where);
    fmt::print("  chain          {}\n", chain.describe());
}

// ---------------------------------------------------------------------------------------------
// qk spec: a token sequence replayed through every n-gram drafter (qk::spec::replay), as if it
// were being generated with greedy verification against its own next tokens, to show what
// drafting would save on it.

struct spec_options {
    std::string file;
    bool ids = false;
    std::int32_t n = 4;
    std::int32_t m = 16;
};

// The built-in sample: documentation-like text, where names, phrases and whole sentence shapes
// recur, which is the case n-gram drafting is for. Paragraphs rather than one literal because
// compilers need only accept string literals of a few thousand characters.
constexpr std::string_view spec_sample[] = {
    R"(# ringlog: a fixed-size event log for embedded services

ringlog keeps the most recent events of a service in a ring of fixed-size records. A record
holds a timestamp, a severity, a source identifier and up to 96 bytes of message text. When the
ring is full, the oldest record is overwritten by the newest one, so the log never allocates
after it is created and never blocks the thread that writes to it.

## Creating a log

Call ringlog_create(capacity, flags) to create a log with room for capacity records. The
capacity is rounded up to a power of two. The flags select the clock used for timestamps:
RINGLOG_CLOCK_MONOTONIC (the default) or RINGLOG_CLOCK_REALTIME. ringlog_create returns a
pointer to the new log, or NULL when the capacity is zero or the memory cannot be allocated.
Call ringlog_destroy(log) to release the log and every record in it.
)",
    R"(
## Writing records

Call ringlog_write(log, severity, source, message) to append a record to the log. The severity
is one of RINGLOG_DEBUG, RINGLOG_INFO, RINGLOG_WARNING and RINGLOG_ERROR. The source is a small
integer that identifies the part of the service that wrote the record. The message is copied
into the record; a message longer than 96 bytes is cut at 96 bytes. ringlog_write returns 0 on
success and -1 when the severity is not one of the four severities.

Call ringlog_writef(log, severity, source, format, ...) to append a record whose message is
formatted as printf would format it. ringlog_writef returns 0 on success and -1 when the
severity is not one of the four severities or the format is NULL.

Writing is lock-free: several threads may write to the same log at the same time. Each writer
claims a record with one atomic increment of the write counter, fills the record, and then
publishes it by storing its sequence number. A reader never sees a record that is only half
written, because it checks the sequence number before and after it copies the record.
)",
    R"(
## Reading records

Call ringlog_read(log, cursor, record) to copy the next record after the cursor into record.
The cursor starts at zero and is advanced by every successful read. ringlog_read returns 0 on
success, 1 when there is no record after the cursor yet, and -1 when the record after the cursor
has already been overwritten. After -1, call ringlog_oldest(log) to move the cursor to the
oldest record that is still in the log, and read again.

Call ringlog_count(log) to get the number of records written since the log was created. Call
ringlog_capacity(log) to get the number of records the log can hold. The difference between
the two, when it is positive, is the number of records that have been overwritten.

## Example

    ringlog *log = ringlog_create(1024, RINGLOG_CLOCK_MONOTONIC);
    ringlog_write(log, RINGLOG_INFO, 1, "service started");
    ringlog_writef(log, RINGLOG_WARNING, 2, "queue %d is %d%% full", 3, 90);
    ringlog_writef(log, RINGLOG_ERROR, 2, "queue %d is full, dropping request %u", 3, 4711u);

    ringlog_record record;
    uint64_t cursor = 0;
    while (ringlog_read(log, &cursor, &record) == 0) {
        printf("%llu %s %u %s\n", record.timestamp, ringlog_severity_name(record.severity),
               record.source, record.message);
    }
    ringlog_destroy(log);
)",
    R"(
## Errors

Every function that takes a log returns -1 when the log is NULL, except ringlog_destroy, which
does nothing when the log is NULL, and ringlog_count and ringlog_capacity, which return 0 when
the log is NULL. No function sets errno, and no function writes to standard error.

## Thread safety

ringlog_write and ringlog_writef may be called from several threads at the same time.
ringlog_read may be called from several threads at the same time, each with its own cursor.
ringlog_create and ringlog_destroy must not be called while another thread uses the log.
ringlog_count and ringlog_capacity may be called from any thread at any time.

## Frequently asked questions

Why does ringlog_write not block when the log is full? Because the log is for the most recent
events, and a writer that blocked would delay the service to keep events that nobody will read.

Why is the message cut at 96 bytes? Because a record of 128 bytes fits two cache lines on most
machines, and the timestamp, the severity and the source take the rest of the record.

Why does ringlog_read return -1 instead of skipping to the oldest record? Because a reader that
falls behind should know that it lost records; call ringlog_oldest(log) to skip to the oldest
record, and ringlog_count(log) to know how many records were lost.
)",
};

std::vector<std::int32_t> bytes_as_tokens(std::span<const std::byte> bytes)
{
    std::vector<std::int32_t> tokens;
    tokens.reserve(bytes.size());
    for (const std::byte b : bytes) {
        tokens.push_back(std::to_integer<std::int32_t>(b));
    }
    return tokens;
}

// Whitespace-separated non-negative integers; a bad one is named with its place in the file,
// since a file of ids is usually written by another program and the place is what finds the bug.
std::vector<std::int32_t> parse_ids(std::span<const std::byte> bytes, const std::string& path)
{
    const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
    std::vector<std::int32_t> tokens;
    std::size_t line = 1;
    std::size_t line_start = 0;
    for (std::size_t i = 0; i < text.size();) {
        if (space(text[i])) {
            if (text[i] == '\n') {
                ++line;
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
        std::int32_t value = 0;
        const auto [stop, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
        const char* problem = ec == std::errc::result_out_of_range                    ? "is out of range (token ids are 32-bit)"
                              : ec != std::errc() || stop != word.data() + word.size() ? "is not an integer"
                              : value < 0                                              ? "is negative (token ids are not)"
                                                                                       : nullptr;
        if (problem != nullptr) {
            // Long words are cut so that a binary file given by mistake does not flood the terminal.
            const std::string_view shown = word.substr(0, 40);
            fail(fmt::format("'{}': token {} ('{}{}', line {}, column {}) {}", path, tokens.size() + 1, shown,
                             shown.size() < word.size() ? "..." : "", line, i - line_start + 1, problem));
        }
        tokens.push_back(value);
        i = end;
    }
    return tokens;
}

void run_spec(const spec_options& opt)
{
    std::vector<std::int32_t> tokens;
    std::string source;
    if (opt.file.empty()) {
        std::string text;
        for (const std::string_view paragraph : spec_sample) {
            text += paragraph;
        }
        tokens = bytes_as_tokens(std::as_bytes(std::span(text.data(), text.size())));
        source = "the built-in sample (bytes as tokens)";
    } else {
        const std::vector<std::byte> bytes = read_file(opt.file);
        tokens = opt.ids ? parse_ids(bytes, opt.file) : bytes_as_tokens(bytes);
        source = fmt::format("'{}' ({})", opt.file, opt.ids ? "token ids" : "bytes as tokens");
    }
    if (tokens.size() < 2) {
        fail(fmt::format("{} holds {} token{}: a replay needs at least 2 (a prompt and one to generate)", source, tokens.size(),
                         tokens.size() == 1 ? "" : "s"));
    }

    const qk::spec::replay_options replay_opt{
        .prompt = std::min<std::size_t>(32, tokens.size() - 1),
        .n_batch = 512,
        .max_draft = static_cast<std::size_t>(opt.m), // the drafters' own limit, so --m governs alone
    };
    const qk::spec::ngram_config config{.size_ngram = opt.n, .size_mgram = opt.m, .check_rate = 1};
    const qk::spec::ngram_map::config map_config{.size_ngram = opt.n, .size_mgram = opt.m, .check_rate = 1, .min_hits = 1, .values = true};
    auto key_only = map_config;
    key_only.values = false;

    fmt::print("{}: {} tokens, prompt {}, n_batch {}, n = {}, m = {}\n\n", source, tokens.size(), replay_opt.prompt,
               replay_opt.n_batch, opt.n, opt.m);
    fmt::print("{:<20} {:>9} {:>9} {:>11} {:>12} {:>11} {:>11} {:>9}\n", "drafter", "accepted", "mean len", "tokens/eval",
               "evals saved", "baseline", "drafts", "ns/call");
    std::vector<qk::spec::replay_result> results;
    const auto row = [&](std::string_view name, auto drafter) {
        const qk::spec::replay_result r = qk::spec::replay(tokens, drafter, replay_opt);
        fmt::print("{:<20} {:>8.1f}% {:>9.2f} {:>11.3f} {:>12} {:>11} {:>11} {:>9.1f}\n", name, 100.0 * r.acceptance_rate(),
                   r.mean_accepted(), r.tokens_per_evaluation(), r.evaluations_saved(), r.baseline, r.drafts, r.draft_ns_per_call());
        results.push_back(r);
    };
    row("ngram_simple", qk::spec::ngram_simple(config));
    row("ngram_index", qk::spec::ngram_index(config));
    row("ngram_map (values)", qk::spec::ngram_map(map_config));
    row("ngram_map (key-only)", qk::spec::ngram_map(key_only));
    fmt::print("\n  accepted: drafted tokens the target accepted; mean len: accepted tokens per draft;\n"
               "  tokens/eval: generated tokens per generation evaluation; evals saved: against `baseline`,\n"
               "  one evaluation per token (negative: a loss); drafts: steps that drafted;\n"
               "  ns/call: time in draft() per step, one clock read included\n");
    // ngram_index promises exactly ngram_simple's drafts, so any difference here is a library bug.
    if (results[0].drafted != results[1].drafted || results[0].accepted != results[1].accepted || results[0].steps != results[1].steps) {
        fmt::print(stderr, "qk spec: warning: ngram_index drafted differently from ngram_simple ({} vs {} tokens drafted)\n",
                   results[1].drafted, results[0].drafted);
    }
}

int main(int argc, char** argv)
{
    CLI::App app{"qk: the qkern tool. Without a subcommand it runs `qk tour`.", "qk"};
    app.set_version_flag("--version", version_string());
    app.require_subcommand(0, 1);

    app.footer("Exit status: 0 on success, 1 on an error, 2 when a tour check fails (CLI11 usage errors: 100 and up).");
    app.add_subcommand("tour", "show info, then round-trip and dot-product checks for every format (the default)");
    CLI::App* info = app.add_subcommand("info", "show the compiler, the architecture tags and the CPU's features");

    convert_options quantize_opt;
    CLI::App* quantize = add_convert_command(app, "quantize", "quantize a raw little-endian float32 file to rows of blocks", quantize_opt,
                                             "raw float32 input file", "output file of blocks");
    quantize->add_option("--importance", quantize_opt.importance,
                         "raw float32 file of per-column importance weights, --cols of them (IQ4_NL, IQ4_XS only)");

    bench_options bench_opt;
    CLI::App* bench = app.add_subcommand("bench", "measure the kernels briefly: dot products in cache on every tag this CPU runs, "
                                                  "mat-vec 14336 x 4096 against the streaming-read bandwidth");
    bench->add_option("--json", bench_opt.json, "also write the measurements as a JSON array to this file");
    bench->add_option("--backend", bench_opt.backend, "cpu, or vulkan: the mat-vec on the Vulkan device (QKERN_VULKAN_DEVICE picks one)")
        ->capture_default_str();
    bench->add_option("--seconds", bench_opt.seconds, "time budget of one dot measurement (mat-vec: 4x)")->check(CLI::Range(0.001, 10.0));
    bench->add_option("--threads", bench_opt.threads, "thread counts for mat-vec and bandwidth")->check(CLI::Range(1, 1024));

    solve_options solve_opt;
    CLI::App* solve = app.add_subcommand("solve", "time one batched triangular solve (qk::solve_tri) on a random well-conditioned "
                                                  "problem and print its speed and residual");
    solve->add_option("--n", solve_opt.n, "order of the triangular matrices A")->capture_default_str();
    solve->add_option("--k", solve_opt.k, "right-hand sides per batch")->capture_default_str();
    solve->add_option("--batch", solve_opt.batch, "independent systems")->capture_default_str();
    solve->add_flag("--right", solve_opt.right, "solve X A = B instead of A X = B");
    solve->add_flag("--upper", solve_opt.upper, "A is upper triangular (default: lower)");
    solve->add_flag("--unit", solve_opt.unit, "A has a unit diagonal (its stored diagonal is ignored)");
    solve->add_option("--backend", solve_opt.backend, "cpu, or vulkan (QKERN_VULKAN_DEVICE picks the device)")->capture_default_str();
    solve->add_option("--threads", solve_opt.threads, "threads of the CPU pool")->check(CLI::Range(1, 1024))->capture_default_str();
    solve->add_option("--repeat", solve_opt.repeat, "timed runs; the best is reported")->check(CLI::Range(1, 100000))->capture_default_str();

    sample_options sample_opt;
    CLI::App* sample = app.add_subcommand("sample", "draw tokens from one vocabulary of logits through a sampler chain, accepting each, "
                                                    "and time the draws");
    CLI::Option* sample_logits =
        sample->add_option("--logits", sample_opt.logits, "raw little-endian float32 file of logits, one per token (default: built in)");
    sample->add_option("--vocab", sample_opt.vocab, "tokens of the built-in logits")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24))
        ->excludes(sample_logits)
        ->capture_default_str();
    sample->add_option("--chain", sample_opt.chain, "sampler chain, e.g. \"top_k(40);temp(0.8);dist\"")->capture_default_str();
    sample->add_option("--backend", sample_opt.backend,
                       "cpu, or vulkan (chains of logit_bias, temp, top_k, then greedy or dist; the same tokens)")
        ->capture_default_str();
    sample->add_option("--seed", sample_opt.seed, "seed every sampler of the chain is reseeded with")->capture_default_str();
    sample->add_option("--n", sample_opt.n, "tokens to draw")->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24))->capture_default_str();

    spec_options spec_opt;
    CLI::App* spec = app.add_subcommand("spec", "replay a token sequence through every n-gram drafter (qk::spec) and print acceptance, "
                                                "tokens per evaluation, evaluations saved and drafting time");
    CLI::Option* spec_file =
        spec->add_option("file", spec_opt.file, "text file, its bytes the tokens (default: a built-in sample of documentation)");
    spec->add_flag("--ids", spec_opt.ids, "the file holds whitespace-separated token ids instead of text")->needs(spec_file);
    spec->add_option("--n", spec_opt.n, "size_ngram: tokens of the matched n-gram")->check(CLI::Range(1, 4096))->capture_default_str();
    spec->add_option("--m", spec_opt.m, "size_mgram: the most tokens a draft proposes")->check(CLI::Range(1, 4096))->capture_default_str();

    convert_options dequantize_opt;
    CLI::App* dequantize = add_convert_command(app, "dequantize", "dequantize a file of block rows to raw little-endian float32",
                                               dequantize_opt, "input file of blocks", "raw float32 output file");

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }

    try {
        if (app.got_subcommand(info)) {
            print_info();
        } else if (app.got_subcommand(bench)) {
            check_backend(bench_opt.backend);
            print_info();
            const auto results = bench_opt.backend == "vulkan" ? run_vulkan_benchmarks(bench_opt) : run_benchmarks(bench_opt);
            fmt::print("\n");
            print_benchmarks(results);
            if (!bench_opt.json.empty()) {
                write_benchmarks_json(bench_opt.json, results);
            }
        } else if (app.got_subcommand(solve)) {
            run_solve(solve_opt);
        } else if (app.got_subcommand(sample)) {
            run_sample(sample_opt);
        } else if (app.got_subcommand(spec)) {
            run_spec(spec_opt);
        } else if (app.got_subcommand(quantize)) {
            require_little_endian();
            qk::visit_format(qk::parse_format(quantize_opt.type),
                             [&]<class Block>(std::type_identity<Block>) { quantize_file<Block>(quantize_opt); });
        } else if (app.got_subcommand(dequantize)) {
            require_little_endian();
            qk::visit_format(qk::parse_format(dequantize_opt.type),
                             [&]<class Block>(std::type_identity<Block>) { dequantize_file<Block>(dequantize_opt); });
        } else { // `qk tour`, or `qk` alone
            return run_tour() ? 0 : 2;
        }
    } catch (const qk::error& e) {
        fmt::print(stderr, "qk: error: {}\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        fmt::print(stderr, "qk: error: out of memory\n");
        return 1;
    } catch (const std::exception& e) {
        fmt::print(stderr, "qk: error: {}\n", e.what());
        return 1;
    }
    return 0;
}
