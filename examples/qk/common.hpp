// What several of qk's subcommands share: the build and CPU facts they print, the kernels the tool
// runs (qk::dispatch's pick for this CPU), and how main() wires a subcommand in (command, wire).
// Every subcommand header includes this one; their random inputs come from tests/inputs.hpp.
#pragma once

#include <qkern.hpp>
#include <backends/vulkan/vulkan.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

namespace qk_tool {

// A subcommand as main() sees it: CLI11's subcommand, to ask whether it was given, and its run
// function bound to the options CLI11 fills in while parsing. The options live on the heap so
// that the references CLI11 keeps to them stay valid however the commands are stored.
struct command {
    CLI::App* app = nullptr;
    std::function<int()> run;
};

// Adds a subcommand to app with its header's add_* function and binds its run_* function (which
// returns qk's exit status) to the same options.
template <class Options>
command wire(CLI::App& app, CLI::App* (*add)(CLI::App&, Options&), int (*run)(const Options&))
{
    auto opt = std::make_shared<Options>();
    CLI::App* sub = add(app, *opt);
    return {sub, [opt, run] { return run(*opt); }};
}

// ---------------------------------------------------------------------------------------------
// Build and CPU facts

inline std::string version_string()
{
    return fmt::format("qk {}.{}.{}", QKERN_VERSION_MAJOR, QKERN_VERSION_MINOR, QKERN_VERSION_PATCH);
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

// The tag qk::dispatch picks on this CPU: what dot, quantize and gemv run on in this tool.
inline std::string_view dispatched_tag()
{
    return qk::dispatch([]<class Tag>(Tag) { return qk::arch::name<Tag>(); });
}

// --backend: "cpu" or "vulkan" (an error where this build has no Vulkan backend).
inline void check_backend(const std::string& backend)
{
    if (backend != "cpu" && backend != "vulkan") {
        throw qk::error(fmt::format("--backend '{}': expected cpu or vulkan", backend));
    }
    if (backend == "vulkan" && !qk::backend::vulkan::enabled) {
        throw qk::error("--backend vulkan: this qk was built without the Vulkan backend (configure with -DQKERN_VULKAN=ON)");
    }
}

} // namespace qk_tool
