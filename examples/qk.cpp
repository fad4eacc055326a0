// qk: the qkern command-line tool. `qk tour` (the default) shows what this build and this CPU
// offer and checks every block format's round trip and dot product on built-in data; `qk info`
// prints the build and CPU facts alone, or describes a GGUF file; `qk quantize` / `qk dequantize`
// convert GGUF model files, or raw float32 files to and from rows of GGUF blocks; `qk bench` times
// the kernels, or a GGUF model's mat-vecs; `qk solve` times a triangular solve; `qk sample` draws
// tokens through a sampler chain (qk::sampling) and times each draw; `qk spec` replays a text
// file, a file of token ids or a built-in sample through the n-gram drafters (qk::spec) and prints
// what drafting would save.
//
// One translation unit: each subcommand lives in its own header under qk/, which declares its
// options, `CLI::App* add_<name>(CLI::App&, <name>_options&)` and `int run_<name>(const
// <name>_options&)` (the exit status); qk/common.hpp and qk/files.hpp hold what they share. To add
// a subcommand, write qk/<name>.hpp so, include it here and add its wire() line to main()'s list.
#include "qk/bench.hpp"
#include "qk/common.hpp"
#include "qk/convert.hpp"
#include "qk/info.hpp"
#include "qk/sample.hpp"
#include "qk/solve.hpp"
#include "qk/spec.hpp"
#include "qk/tour.hpp"

#include <algorithm>
#include <exception>
#include <new>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

int main(int argc, char** argv)
{
    using namespace qk_tool;

    CLI::App app{"qk: the qkern tool. Without a subcommand it runs `qk tour`.", "qk"};
    app.set_version_flag("--version", version_string());
    app.require_subcommand(0, 1);

    app.footer(exit_status_footer);
    // In the order `qk --help` lists them; the first, the tour, is also what `qk` alone runs.
    const std::vector<command> commands = {
        wire(app, add_tour, run_tour),
        wire(app, add_info, run_info),
        wire(app, add_quantize, run_quantize),
        wire(app, add_bench, run_bench),
        wire(app, add_solve, run_solve),
        wire(app, add_sample, run_sample),
        wire(app, add_spec, run_spec),
        wire(app, add_dequantize, run_dequantize),
    };
    // A subcommand inherits the footer when it is made, and loses it when it sets its own: the
    // exit status then follows its own text, so that every --help shows it.
    for (const command& c : commands) {
        if (c.app->get_footer() != exit_status_footer) {
            c.app->footer(c.app->get_footer() + "\n\n" + exit_status_footer);
        }
    }
    // Where the --help that explains a mistake is: the subcommand's, once one was recognised.
    const auto help_hint = [&] {
        const auto chosen = std::ranges::find_if(commands, [&](const command& c) { return app.got_subcommand(c.app); });
        return chosen != commands.end() ? fmt::format("qk {} --help", chosen->app->get_name()) : std::string("qk --help");
    };

    try {
        app.parse(argc, argv);
    } catch (const CLI::Success& e) {
        return app.exit(e); // --help, --version: printed as CLI11 prints them, status 0
    } catch (const CLI::ParseError& e) {
        fmt::print(stderr, "qk: {}\nqk: see '{}'\n", e.what(), help_hint());
        return exit_usage;
    }

    try {
        const auto chosen = std::ranges::find_if(commands, [&](const command& c) { return app.got_subcommand(c.app); });
        return (chosen != commands.end() ? *chosen : commands.front()).run();
    } catch (const usage_error& e) {
        fmt::print(stderr, "qk: {}\nqk: see '{}'\n", e.what(), help_hint());
        return exit_usage;
    } catch (const qk::error& e) {
        fmt::print(stderr, "qk: error: {}\n", e.what());
        return exit_error;
    } catch (const std::bad_alloc&) {
        fmt::print(stderr, "qk: error: out of memory\n");
        return exit_error;
    } catch (const std::exception& e) {
        fmt::print(stderr, "qk: error: {}\n", e.what());
        return exit_error;
    }
}
