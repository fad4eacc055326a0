// qk sample: tokens drawn through a sampler chain (qk::sampling) from one vocabulary of logits,
// read from a file or built in, on the CPU or the Vulkan device, each draw timed.
#pragma once

#include "common.hpp"
#include "files.hpp"
#include "progress.hpp"
#include "inputs.hpp" // tests/inputs.hpp: the seeded inputs the tests use too

#include <backends/cpu/context.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

namespace qk_tool {

// ---------------------------------------------------------------------------------------------
// qk sample: a sampler chain run on one vocabulary of logits, from a file or built in. Every
// draw is accepted, as a decoding loop would, so penalties and mirostat change later draws even
// though the logits stay the same.

struct sample_options {
    std::string logits;
    std::int64_t vocab = 32000;
    std::string chain = "penalties(last_n=64,repeat=1.1);top_k(40);top_p(0.95);min_p(0.05);temp(0.8);dist";
    std::string seed; // as given: empty when not given, "-1" for a random seed
    std::int64_t n = 16;
    std::string backend = "cpu";
};

// Built-in logits shaped like a model's: a body of sigma 3 and a head of six tokens that hold
// most of the probability. Fixed generators, so every platform draws the same tokens.
inline std::vector<float> synthetic_logits(std::size_t n)
{
    std::vector<float> logits = qk_inputs::portable_normal(n, 20250101);
    for (float& v : logits) {
        v *= 3.0f;
    }
    std::mt19937 engine(20250102);
    for (const float h : {18.0f, 17.0f, 16.5f, 16.0f, 15.0f, 14.5f}) {
        logits[engine() % n] = h;
    }
    return logits;
}

inline constexpr std::uint64_t default_seed = 42;

// --seed: the seed for the chain's samplers whose seed the chain does not write, and whether it
// was given, which decides whether a seed in the chain that differs from it is a conflict.
struct seed_choice {
    std::uint64_t value = default_seed;
    bool given = false;
    bool random = false; // --seed -1: drawn from std::random_device
};

// "-1" or an integer from 0 to 2^64 - 1; an empty string is the default. The text is checked
// before CLI11 converts anything, as CLI11 2.1 would wrap -1 around to 2^64 - 1.
inline std::optional<std::string> seed_problem(const std::string& text)
{
    if (text == "-1") {
        return std::nullopt;
    }
    std::uint64_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec == std::errc() && end == text.data() + text.size()) {
        return std::nullopt;
    }
    return fmt::format("expected an integer from 0 to 2^64 - 1, or -1 for a random seed, not '{}'", text);
}

inline seed_choice parse_seed(const std::string& text)
{
    seed_choice choice;
    if (text.empty()) {
        return choice;
    }
    if (const std::optional<std::string> problem = seed_problem(text)) {
        usage_fail("--seed: " + *problem);
    }
    choice.given = true;
    if (text == "-1") {
        std::random_device entropy;
        choice.value = (std::uint64_t{entropy()} << 32) ^ std::uint64_t{entropy()};
        choice.random = true;
    } else {
        std::from_chars(text.data(), text.data() + text.size(), choice.value);
    }
    return choice;
}

// Seeds the samplers whose seed the chain does not write with the choice; a seed the chain writes
// stays, and an explicit --seed that would change it is a usage error rather than a silent choice
// of one of the two.
inline void apply_seed(qk::sampling::chain& chain, const seed_choice& seed)
{
    for (std::size_t i = 0; i < chain.size(); ++i) {
        if (!chain.seed_written(i)) {
            chain[i].reseed(seed.value);
            continue;
        }
        if (!seed.given) {
            continue;
        }
        // describe() shows the seed, so a reseeded copy reads differently exactly when the seeds differ.
        qk::sampling::sampler reseeded = chain[i];
        reseeded.reseed(seed.value);
        if (seed.random || reseeded.describe() != chain[i].describe()) {
            usage_fail(fmt::format("--seed {} conflicts with the seed the chain gives '{}': drop --seed, or the seed in --chain",
                                   seed.random ? std::string("-1 (random)") : fmt::format("{}", seed.value), chain[i].describe()));
        }
    }
}

inline CLI::App* add_sample(CLI::App& app, sample_options& opt)
{
    CLI::App* cmd = app.add_subcommand("sample", "draw tokens from one vocabulary of logits through a sampler chain, accepting each, "
                                                 "and time the draws");
    CLI::Option* sample_logits =
        cmd->add_option("--logits", opt.logits, "raw little-endian float32 file of logits, one per token (default: built in)");
    cmd->add_option("--vocab", opt.vocab, "tokens of the built-in logits")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24))
        ->excludes(sample_logits)
        ->capture_default_str();
    cmd->add_option("--chain", opt.chain, "sampler chain, e.g. \"top_k(40);temp(0.8);dist\"")->capture_default_str();
    cmd->add_option("--backend", opt.backend,
                    "cpu, or vulkan (chains of logit_bias, temp, top_k, then greedy, dist or adaptive_p; the same tokens)")
        ->capture_default_str();
    cmd->add_option("--seed", opt.seed,
                    fmt::format("seed of the samplers (dist, xtc, mirostat, mirostat_v2, adaptive_p) whose seed the chain does not "
                                "give (default: {}); -1: a random seed, printed so that the run can be repeated. A seed written in "
                                "the chain wins: a different --seed is a usage error",
                                default_seed))
        ->type_name("SEED")
        ->check(CLI::Validator([](std::string& text) { return seed_problem(text).value_or(""); }, ""));
    cmd->add_option("--n", opt.n, "tokens to draw")->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24))->capture_default_str();
    return cmd;
}

inline int run_sample(const sample_options& opt)
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
    const seed_choice seed = parse_seed(opt.seed);
    qk::sampling::chain chain;
    try {
        chain = qk::sampling::chain::parse(opt.chain);
    } catch (const qk::error& e) {
        usage_fail(fmt::format("--chain: {}", e.what()));
    }
    apply_seed(chain, seed);
    if (seed.random) {
        // stderr, so that the tokens on stdout compare equal to those of the repeated run.
        fmt::print(stderr, "qk: --seed -1: the random seed is {} (--seed {} repeats this run)\n", seed.value, seed.value);
    }

    check_backend(opt.backend);
    std::vector<std::int32_t> tokens;
    tokens.reserve(static_cast<std::size_t>(opt.n));
    double total = 0.0;
    double best = 1e300;
    // One sequence through the backend's batched entry point (the CPU's is chain.sample itself).
    const auto draw = [&]<class Context>(Context& context) {
        progress_reporter bar("qk sample", static_cast<std::uint64_t>(opt.n), "draws"); // --n goes up to 16 million
        std::span<qk::sampling::chain> one(&chain, 1);
        std::int32_t token = -1;
        for (std::int64_t i = 0; i < opt.n; ++i) {
            const auto start = std::chrono::steady_clock::now();
            context.sample(logits, 1, logits.size(), one, {}, std::span<std::int32_t>(&token, 1));
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            tokens.push_back(token);
            total += seconds;
            best = std::min(best, seconds);
            bar.update(static_cast<std::uint64_t>(i + 1));
        }
        bar.finish();
    };
    std::string where = fmt::format("vector tag {}", qk::arch::name<qk::arch::vector_native>());
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
    return 0;
}

} // namespace qk_tool
