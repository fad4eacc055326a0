// qk spec: a text file, a file of token ids or the built-in sample (spec_sample.hpp) replayed
// through every n-gram drafter (qk::spec), with what drafting would save on it.
#pragma once

#include "common.hpp"
#include "files.hpp"
#include "progress.hpp"
#include "spec_sample.hpp"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

namespace qk_tool {

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

inline std::vector<std::int32_t> bytes_as_tokens(std::span<const std::byte> bytes)
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
inline std::vector<std::int32_t> parse_ids(std::span<const std::byte> bytes, const std::string& path)
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
            // Long words are cut so that a binary file given by mistake does not flood the terminal,
            // and bytes other than printable ASCII are shown as \xHH: a NUL byte would end the
            // message at what(), before its line and column, and control bytes reach the terminal.
            std::string shown;
            for (const char c : word.substr(0, 40)) {
                shown += c >= 0x20 && c < 0x7f ? std::string(1, c) : fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
            }
            fail(fmt::format("'{}': token {} ('{}{}', line {}, column {}) {}", path, tokens.size() + 1, shown,
                             word.size() > 40 ? "..." : "", line, i - line_start + 1, problem));
        }
        tokens.push_back(value);
        i = end;
    }
    return tokens;
}

inline CLI::App* add_spec(CLI::App& app, spec_options& opt)
{
    CLI::App* cmd = app.add_subcommand("spec", "replay a token sequence through every n-gram drafter (qk::spec) and print acceptance, "
                                               "tokens per evaluation, evaluations saved and drafting time");
    CLI::Option* spec_file =
        cmd->add_option("file", opt.file, "text file, its bytes the tokens (default: a built-in sample of documentation)");
    cmd->add_flag("--ids", opt.ids, "the file holds whitespace-separated token ids instead of text")->needs(spec_file);
    cmd->add_option("--n", opt.n, "size_ngram: tokens of the matched n-gram")->check(CLI::Range(1, 4096))->capture_default_str();
    cmd->add_option("--m", opt.m, "size_mgram: the most tokens a draft proposes")->check(CLI::Range(1, 4096))->capture_default_str();
    return cmd;
}

// The drafters return nothing, without a word, where their rule cannot be met; this says so, with
// the numbers, when --n and --m or the length of the input rule drafting out for some of them.
// The rules (include/spec/): a history of L tokens (every token before the sampled one);
// ngram_simple and ngram_index draft the up to m tokens that followed the latest match of the
// n-gram and drop a draft shorter than n, and look only once L >= n + m + 2; ngram_map needs a
// complete occurrence, L >= n + m; ngram_mod needs its pool filled, which happens once
// L > add_chunk (32), with an n-gram and the token after it, L >= n + 1 (n = 24 for the llama
// row). The replay checks a draft at history L against the tokens after the sampled one, so it
// counts drafts only up to L = tokens - 3, and from L = prompt. Each bound is tight: some input
// drafts at exactly that history (tests/qk_cli.sh replays such inputs).
inline void warn_when_drafting_is_ruled_out(const spec_options& opt, std::size_t tokens, std::size_t prompt, const std::string& source)
{
    const auto n = static_cast<std::size_t>(opt.n);
    const auto m = static_cast<std::size_t>(opt.m);
    if (m < n) {
        fmt::print(stderr,
                   "qk: warning: --m {} is below --n {}: ngram_simple and ngram_index never draft (a draft is the up to m tokens "
                   "after the match of the n-gram, and one shorter than n tokens is dropped); give --m of at least {}\n",
                   m, n, n);
    }
    if (tokens < prompt + 3) {
        fmt::print(stderr,
                   "qk: warning: {} holds {} tokens and the prompt takes {}: no step leaves a token after its draft to check it "
                   "against, so nothing is drafted (a replay needs at least 3 tokens after the prompt)\n",
                   source, tokens, prompt);
        return;
    }
    const std::size_t longest = tokens - 3; // the longest history whose draft can still be checked
    const qk::spec::ngram_mod_config llama{}; // the add_chunk of both ngram_mod rows, and the n of the llama one
    const auto add_chunk = static_cast<std::size_t>(llama.add_chunk);
    const auto llama_n = static_cast<std::size_t>(llama.size_ngram);
    struct rule {
        const char* drafters;
        std::string formula;
        std::size_t history;
        bool ruled_out_anyway; // by m < n, already said
    };
    const rule rules[] = {
        {"ngram_simple and ngram_index", "n + m + 2", n + m + 2, m < n},
        {"ngram_map (both modes)", "n + m", n + m, false},
        {"ngram_mod (n, m)", fmt::format("max(n + 1, {})", add_chunk + 1), std::max(n + 1, add_chunk + 1), false},
        {"ngram_mod (llama)", fmt::format("max({} + 1, {})", llama_n, add_chunk + 1), std::max(llama_n + 1, add_chunk + 1), false},
    };
    std::string short_of;
    for (const rule& r : rules) {
        if (r.history > longest && !r.ruled_out_anyway) {
            short_of += fmt::format("{}{} {} = {}", short_of.empty() ? "" : ", ", r.drafters, r.formula, r.history);
        }
    }
    if (!short_of.empty()) {
        fmt::print(stderr,
                   "qk: warning: {} holds {} tokens, so a draft can be checked only up to a history of {} tokens, and at n = {}, m = {} "
                   "these drafters need a longer one, so they draft nothing here: {} (a longer input, or a smaller --n or --m "
                   "where the rule has them)\n",
                   source, tokens, longest, n, m, short_of);
    }
}

inline int run_spec(const spec_options& opt)
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
    warn_when_drafting_is_ruled_out(opt, tokens.size(), replay_opt.prompt, source);
    const qk::spec::ngram_config config{.size_ngram = opt.n, .size_mgram = opt.m, .check_rate = 1};
    const qk::spec::ngram_map::config map_config{.size_ngram = opt.n, .size_mgram = opt.m, .check_rate = 1, .min_hits = 1, .values = true};
    auto key_only = map_config;
    key_only.values = false;

    fmt::print("{}: {} tokens, prompt {}, n_batch {}, n = {}, m = {}\n\n", source, tokens.size(), replay_opt.prompt,
               replay_opt.n_batch, opt.n, opt.m);
    fmt::print("{:<20} {:>9} {:>9} {:>11} {:>12} {:>11} {:>11} {:>9}\n", "drafter", "accepted", "mean len", "tokens/eval",
               "evals saved", "baseline", "drafts", "ns/call");
    std::vector<qk::spec::replay_result> results;
    // A replay of megabytes takes minutes: progress on stderr over all the rows below, 8 of them.
    constexpr std::size_t replays = 8;
    const std::size_t per_replay = tokens.size() - replay_opt.prompt;
    progress_reporter bar("qk spec", replays * per_replay, "tokens");
    std::size_t replayed = 0;
    const auto row = [&](std::string_view name, auto&& drafter) {
        const qk::spec::replay_result r = qk::spec::replay(tokens, drafter, replay_opt, [&](std::size_t reached, std::size_t) {
            bar.update(replayed + reached - replay_opt.prompt, name);
        });
        replayed += per_replay;
        bar.clear(); // the row goes to stdout, which may share the terminal with the line
        fmt::print("{:<20} {:>8.1f}% {:>9.2f} {:>11.3f} {:>12} {:>11} {:>11} {:>9.1f}\n", name, 100.0 * r.acceptance_rate(),
                   r.mean_accepted(), r.tokens_per_evaluation(), r.evaluations_saved(), r.baseline, r.drafts, r.draft_ns_per_call());
        results.push_back(r);
    };
    // ngram_mod as llama.cpp runs it (n = 24, drafts of 48 to 64 tokens), and at this run's n and m
    // (any walk of at least one token drafts).
    const qk::spec::ngram_mod_config mod_defaults{};
    const qk::spec::ngram_mod_config mod_config{.size_ngram = opt.n, .min_draft = 1, .max_draft = opt.m};
    row("ngram_simple", qk::spec::ngram_simple(config));
    row("ngram_index", qk::spec::ngram_index(config));
    row("ngram_map (values)", qk::spec::ngram_map(map_config));
    row("ngram_map (key-only)", qk::spec::ngram_map(key_only));
    row("ngram_mod (llama)", qk::spec::ngram_mod(mod_defaults));
    row("ngram_mod (n, m)", qk::spec::ngram_mod(mod_config));
    // The selection keeps the draft of the highest expected gain (expected accepted tokens, from each
    // drafter's match rate over all its drafts) each step.
    // The suffix drafter drafts up to m tokens, as the others.
    qk::spec::suffix_drafter::config suffix_config{};
    suffix_config.max_draft = opt.m;
    row("suffix_drafter", qk::spec::suffix_drafter(suffix_config));
    qk::spec::drafter_selection selection{qk::spec::ngram_index(config), qk::spec::ngram_map(map_config), qk::spec::ngram_mod(mod_config),
                                          qk::spec::suffix_drafter(suffix_config)};
    row("selection", selection);
    bar.finish(fmt::format("qk spec: {} replays of {} tokens", replays, grouped(tokens.size())));
    const char* const chosen_names[] = {"ngram_index", "ngram_map (values)", "ngram_mod (n, m)", "suffix_drafter"};
    fmt::print("\n  selection's choices:");
    for (std::size_t i = 0; i < selection.count; ++i) {
        const qk::spec::drafter_statistics& st = selection.statistics()[i];
        fmt::print("{}\n    {}: {} of {} drafts, {:.1f}% of their tokens accepted; match rate of all its drafts {:.1f}%",
                   i == 0 ? "" : ";", chosen_names[i], st.chosen, st.drafts, 100.0 * st.acceptance_rate(), 100.0 * st.match_rate());
    }
    fmt::print("\n");
    fmt::print("\n  accepted: drafted tokens the target accepted; mean len: accepted tokens per draft;\n"
               "  tokens/eval: generated tokens per generation evaluation; evals saved: against `baseline`,\n"
               "  one evaluation per token (negative: a loss); drafts: steps that drafted;\n"
               "  ns/call: time in draft() per step, one clock read included\n");
    // ngram_index promises exactly ngram_simple's drafts, so any difference here is a library bug.
    if (results[0].drafted != results[1].drafted || results[0].accepted != results[1].accepted || results[0].steps != results[1].steps) {
        fmt::print(stderr, "qk: warning: ngram_index drafted differently from ngram_simple ({} vs {} tokens drafted)\n",
                   results[1].drafted, results[0].drafted);
    }
    return 0;
}

} // namespace qk_tool
