// What several of qk's subcommands share: the build facts they print, how main() wires a
// subcommand in (command, wire), and the exit status every subcommand follows (usage_error). The
// tool's own kernels are qk::arch::runtime's, the CPU's best (qk::dispatched_tag_name()).
// Every subcommand header includes this one; their random inputs come from tests/inputs.hpp.
#pragma once

#include <qkern.hpp>
#include <backends/vulkan/vulkan.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
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
// Exit status: 0 on success, 1 on an error, 2 on a usage error or a failed check. A usage error is
// a command line that asks for something impossible or contradictory, whatever the files hold:
// CLI11's parse errors, and the option values the tool checks itself (usage_fail). An error in a
// file or while working (files.hpp's fail, a qk::error from the library) is 1.

inline constexpr int exit_error = 1;
inline constexpr int exit_usage = 2;

inline constexpr const char* exit_status_footer =
    "Exit status: 0 on success, 1 on an error (a bad or missing file, a failed write), 2 on a usage error (a bad\n"
    "option or value) or when a check of `qk tour` fails. Messages start with 'qk:'.";

// Not a std::runtime_error, so that no handler meant for files.hpp's fail() takes it for one.
class usage_error : public std::exception {
public:
    explicit usage_error(std::string message) : message_(std::move(message)) {}
    [[nodiscard]] const char* what() const noexcept override { return message_.c_str(); }

private:
    std::string message_;
};

[[noreturn]] inline void usage_fail(std::string message)
{
    throw usage_error(std::move(message));
}

// ---------------------------------------------------------------------------------------------
// Build facts

inline std::string version_string()
{
    return fmt::format("qk {}.{}.{}", QKERN_VERSION_MAJOR, QKERN_VERSION_MINOR, QKERN_VERSION_PATCH);
}

// --backend: "cpu" or "vulkan" (an error where this build has no Vulkan backend).
inline void check_backend(const std::string& backend)
{
    if (backend != "cpu" && backend != "vulkan") {
        usage_fail(fmt::format("--backend '{}': expected cpu or vulkan", backend));
    }
    if (backend == "vulkan" && !qk::backend::vulkan::enabled) {
        usage_fail("--backend vulkan: this qk was built without the Vulkan backend (configure with -DQKERN_VULKAN=ON)");
    }
}

} // namespace qk_tool
