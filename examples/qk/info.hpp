// qk info: the compiler, the architecture tags, the CPU's features, which tag each kind of kernel
// runs on, the block formats and the Vulkan devices; `qk info FILE.gguf` describes a GGUF file
// instead (its metadata and its tensors). print_info() also heads `qk tour` and `qk bench`, so
// tour.hpp and bench.hpp include this header.
#pragma once

#include "common.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <variant>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

namespace qk_tool {

struct info_options {
    std::string file; // a GGUF file to describe instead of the build and the CPU
};

// ---------------------------------------------------------------------------------------------
// Build and CPU facts that only qk info prints (common.hpp holds those others print too)

inline std::string compiler_description()
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

inline std::string cplusplus_description()
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

struct feature {
    bool present;
    const char* name;
};

inline std::string join_present(std::span<const feature> features, std::string_view if_none)
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

inline std::vector<std::string> present_names(std::span<const feature> features)
{
    std::vector<std::string> out;
    for (const feature& f : features) {
        if (f.present) {
            out.emplace_back(f.name);
        }
    }
    return out;
}

// What the compiler was allowed to emit: the instruction sets the kernels can be built for.
inline std::span<const feature> compiler_feature_list()
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
#if defined(__BMI2__)
        {true, "bmi2"},
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
#if defined(__AVX512VBMI__)
        {true, "avx512vbmi"},
#endif
#if defined(__ARM_NEON)
        {true, "neon"},
#endif
#if defined(__ARM_FEATURE_DOTPROD)
        {true, "dotprod"},
#endif
        {false, ""}, // keeps the array non-empty on targets with none of the above
    };
    return features;
}

inline std::string compiler_enabled_features()
{
    return join_present(compiler_feature_list(), "none of sse2..avx512vbmi, neon, dotprod");
}

// What the running CPU offers of the features qkern has tags for (qk::running_cpu(), which also
// checks that the OS saves the wider registers); it may exceed what the flags enable.
inline std::vector<feature> cpu_feature_list()
{
    const qk::cpu_features& cpu = qk::running_cpu();
    return {
        {cpu.sse4_2, "sse4.2"},     {cpu.popcnt, "popcnt"},         {cpu.avx2, "avx2"},
        {cpu.fma, "fma"},           {cpu.f16c, "f16c"},             {cpu.bmi2, "bmi2"},
        {cpu.avx512f, "avx512f"},   {cpu.avx512bw, "avx512bw"},     {cpu.avx512dq, "avx512dq"},
        {cpu.avx512vl, "avx512vl"}, {cpu.avx512vnni, "avx512vnni"}, {cpu.avx512vbmi, "avx512vbmi"},
        {cpu.neon64, "neon"},       {cpu.dotprod, "dotprod"},
    };
}

inline std::string cpu_features()
{
    return join_present(cpu_feature_list(), "none of the features qkern has kernels for");
}

// The tags of qkern's kernels that this CPU runs, lowest first.
inline std::string runnable_tags()
{
    std::string out;
    qk::for_each_runnable(qk::running_cpu(), [&]<class Tag>(Tag) { out += fmt::format("{}{}", out.empty() ? "" : " ", qk::arch::name<Tag>()); });
    return out;
}

inline std::string hardware_threads()
{
    const unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? std::string("unknown") : fmt::format("{}", n);
}

// The Vulkan devices with the facts kernels size themselves by, or why there are none.
inline void print_vulkan_devices()
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

// One line per block format: its GGUF type id, block geometry and, for weights, what its dot
// product pairs it with (the activation blocks each weight block meets).
inline void print_formats()
{
    bool first = true;
    qk::block_formats::for_each([&]<class Block>(std::type_identity<Block>) {
        using traits = qk::format_traits<Block>;
        std::string pairs = "activations only";
        if constexpr (qk::weight_format<Block>) {
            using activation = typename traits::vec_dot_type;
            const std::size_t n = qk::activation_blocks_per_block<Block>;
            pairs = fmt::format("dot with {}{}", n == 1 ? "" : fmt::format("{} x ", n), qk::format_traits<activation>::name);
        }
        fmt::print("{}{:<7} GGUF type {:>2}, {:>3} values in {:>3} bytes ({:.4g} bits each), {}\n", first ? "  formats        " : "                 ",
                   traits::name, traits::gguf_type, traits::block_size, traits::bytes, 8.0 * double(traits::bytes) / double(traits::block_size),
                   pairs);
        first = false;
    });
}

inline void print_info()
{
    fmt::print("{} (qkern header-only kernels)\n", version_string());
    fmt::print("  compiler       {}, {}\n", compiler_description(), cplusplus_description());
    fmt::print("  native tag     {} (qk::arch::native: the best tag the compiler flags enable)\n",
               qk::arch::name<qk::arch::native>());
    if constexpr (std::is_same_v<qk::arch::default_tag, qk::arch::runtime>) {
        fmt::print("  default tag    runtime (qk::arch::default_tag: the flags enable no qkern tag, so qk::dot, quantize, gemv\n"
                   "                 and gemm called without a tag run the CPU's best kernels, here {})\n",
                   qk::dispatched_tag_name());
    } else {
        fmt::print("  default tag    {} (qk::arch::default_tag: qk::dot, quantize, gemv and gemm called without a tag)\n",
                   qk::arch::name<qk::arch::default_tag>());
    }
    fmt::print("  flags enable   {}\n", compiler_enabled_features());
    fmt::print("  CPU offers     {}\n", cpu_features());
    fmt::print("  CPU runs tags  {}\n", runnable_tags());
    // dot, quantize and gemv carry per-function targets, so this tool picks them at run time;
    // solve_tri and the sampling passes are plain xsimd vectors, which exist only as the flags allow.
    const std::string_view best = qk::dispatched_tag_name();
    fmt::print("  kernels        dot, quantize, gemv: {} (chosen at run time for this CPU)\n", best);
    fmt::print("                 solve_tri: {}, sampling passes: {} (fixed at compile time by the flags)\n",
               qk::arch::name<qk::arch::solve_tri_native>(), qk::arch::name<qk::arch::vector_native>());
    if (best != qk::arch::name<qk::arch::vector_native>() && best != "generic") {
        fmt::print("  hint           this CPU runs {}, but solve_tri and sampling were compiled for {}: build qk for this machine\n"
                   "                 (./scripts/try.sh does; CMake: leave QKERN_PORTABLE off, or -DQKERN_NATIVE=ON)\n",
                   best, qk::arch::name<qk::arch::vector_native>());
    }
    print_formats();
    fmt::print("  threads        {} hardware threads\n", hardware_threads());
    print_vulkan_devices();
}

// A metadata value in one line: numbers and strings as they are (strings cut at 60 bytes),
// arrays by their length and element type, with the first few elements.
inline std::string describe_value(const qk::gguf::value& v)
{
    const auto one = []<class T>(const T& x) -> std::string {
        if constexpr (std::is_same_v<T, std::string>) {
            return x.size() <= 60 ? fmt::format("\"{}\"", x) : fmt::format("\"{}...\" ({} bytes)", x.substr(0, 60), x.size());
        } else if constexpr (std::is_same_v<T, bool>) {
            return x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::int8_t> || std::is_same_v<T, std::uint8_t>) {
            return fmt::format("{}", static_cast<int>(x));
        } else {
            return fmt::format("{}", x);
        }
    };
    if (!v.is_array()) {
        return std::visit(one, std::get<qk::gguf::scalar>(v.data));
    }
    return std::visit(
        [&](const auto& values) {
            std::string out = fmt::format("[{} x {}]", values.size(), qk::gguf::name(v.element_type()));
            for (std::size_t i = 0; i < values.size() && i < 4; ++i) {
                out += fmt::format("{}{}", i == 0 ? " " : ", ", one(static_cast<typename std::decay_t<decltype(values)>::value_type>(values[i])));
            }
            return values.size() > 4 ? out + ", ..." : out;
        },
        std::get<qk::gguf::array>(v.data));
}

inline std::string shape_text(std::span<const std::uint64_t> shape)
{
    std::string out;
    for (const std::uint64_t d : shape) {
        out += fmt::format("{}{}", out.empty() ? "" : " x ", d);
    }
    return out;
}

// qk info FILE.gguf: the file's header, its metadata (the usual keys first) and a table of its
// tensors with whether qkern has kernels for each.
inline void print_gguf(const std::string& path)
{
    const qk::gguf::file f(path);
    fmt::print("{}: GGUF version {}, {} bytes, alignment {}, {} metadata entries, {} tensors, data from byte {}\n", path, f.version(), f.size(),
               f.alignment(), f.metadata().size(), f.tensors().size(), f.data_offset());
    std::string architecture;
    if (const qk::gguf::value* a = f.find("general.architecture"); a != nullptr && !a->is_array() && a->type() == qk::gguf::value_type::string) {
        architecture = std::get<std::string>(std::get<qk::gguf::scalar>(a->data));
    }
    const std::string usual[] = {"general.architecture", "general.name", architecture + ".context_length", "general.file_type",
                                 "general.quantization_version", "general.alignment"};
    fmt::print("\n  {:<40} {:<16} {}\n", "metadata", "type", "value");
    for (const std::string& key : usual) {
        if (const qk::gguf::value* v = f.find(key)) {
            fmt::print("  {:<40} {:<16} {}\n", key, v->type_name(), describe_value(*v));
        }
    }
    for (const qk::gguf::metadata_entry& e : f.metadata()) {
        if (std::ranges::find(usual, e.key) == std::end(usual)) {
            fmt::print("  {:<40} {:<16} {}\n", e.key, e.value.type_name(), describe_value(e.value));
        }
    }
    fmt::print("\n  {:<40} {:<8} {:>22} {:>14}  {}\n", "tensor", "type", "shape", "bytes", "qkern kernels");
    std::uint64_t total = 0, with_kernels = 0;
    for (const qk::gguf::tensor_info& t : f.tensors()) {
        const std::optional<qk::format> format = qk::gguf::kernel_format(t.type);
        const bool weight = format && *format != qk::format::q8_K;
        fmt::print("  {:<40} {:<8} {:>22} {:>14}  {}\n", t.name, t.type_info().name, shape_text(t.shape), t.bytes,
                   weight   ? "dot, gemv, gemm"
                   : format ? "activations"
                   : t.type == qk::gguf::type_f32 || t.type == qk::gguf::type_f16 || t.type == qk::gguf::type_bf16
                       ? "read as floats"
                       : "no (bytes only)");
        total += t.bytes;
        with_kernels += weight ? t.bytes : 0;
    }
    fmt::print("\n  {} tensor bytes, {} ({:.1f}%) in formats qkern has dot products for\n", total, with_kernels,
               total == 0 ? 0.0 : 100.0 * double(with_kernels) / double(total));
}

inline CLI::App* add_info(CLI::App& app, info_options& opt)
{
    CLI::App* sub = app.add_subcommand("info", "show the compiler, the architecture tags and the CPU's features, or describe a GGUF file");
    sub->add_option("file", opt.file, "a GGUF file: its metadata and a table of its tensors");
    return sub;
}

inline int run_info(const info_options& opt)
{
    if (!opt.file.empty()) {
        print_gguf(opt.file);
        return 0;
    }
    print_info();
    return 0;
}

} // namespace qk_tool
