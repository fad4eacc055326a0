// The replay evaluator: a token sequence fed through a drafter as if it were being generated,
// the target's choice at each step being the sequence's next token (greedy verification against
// it), with the batch budget applied to the prompt and to each drafted evaluation. It reports
// what drafting would save: acceptance rate, mean accepted length, tokens per evaluation,
// evaluations saved against one evaluation per token, and the drafter's time per call. Any
// drafter reading a token_history (the history_drafter concept below) can be replayed. On an
// error, a copyable drafter is as it was (see replay()).
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../kernels/error.hpp"
#include "token_history.hpp"
#include "verify.hpp"

namespace qk::spec {

struct replay_options {
    std::size_t prompt = 1;       // tokens evaluated before generation starts (at least 1)
    std::size_t n_batch = 512;    // the batch budget
    std::size_t max_draft = 64;   // drafts are cut to this many tokens
};

struct replay_result {
    std::size_t generated = 0;        // tokens produced after the prompt
    std::size_t steps = 0;            // evaluations of a sampled token and its draft
    std::size_t drafts = 0;           // steps with a non-empty draft
    std::size_t drafted = 0;          // drafted tokens
    std::size_t accepted = 0;         // drafted tokens accepted
    std::size_t evaluations = 0;      // with drafting (prompt included)
    std::size_t baseline = 0;         // without drafting: one per generated token after the first
    double draft_seconds = 0;         // time spent in draft()

    [[nodiscard]] double acceptance_rate() const noexcept { return drafted == 0 ? 0.0 : double(accepted) / double(drafted); }
    [[nodiscard]] double mean_accepted() const noexcept { return drafts == 0 ? 0.0 : double(accepted) / double(drafts); }
    // Tokens per evaluation after the prompt's (which produces the first generated token): 1.0
    // without drafting.
    [[nodiscard]] double tokens_per_evaluation() const noexcept
    {
        const std::size_t generation = evaluations - prompt_evaluations;
        return generation == 0 ? 0.0 : double(generated - 1) / double(generation);
    }
    // Negative when drafting cost evaluations (drafts longer than n_batch split into several).
    [[nodiscard]] std::int64_t evaluations_saved() const noexcept
    {
        return static_cast<std::int64_t>(baseline) - static_cast<std::int64_t>(evaluations);
    }
    [[nodiscard]] double draft_ns_per_call() const noexcept { return steps == 0 ? 0.0 : draft_seconds * 1e9 / double(steps); }

    std::size_t prompt_evaluations = 0;
};

// What replay (and any code written for every drafter) needs: draft(history, sampled) proposes
// the tokens to follow `sampled`, the history holding every token before it. A drafter may keep
// what it derived from the history between calls; the history's marks tell it what changed.
// The feedback hooks are optional: accept(accepted, verified) or accept(accepted).
template <class Drafter>
concept history_drafter = requires(Drafter& drafter, const token_history& history, std::int32_t sampled) {
    { drafter.draft(history, sampled) } -> std::convertible_to<std::vector<std::int32_t>>;
};

// The history passed to the drafter is one token_history, appended to as generation advances
// (tokens[0, pos) at each step), so a drafter's state follows it in O(1) per token. After each
// non-empty draft the drafter's feedback hook is called when it has one: accept(accepted,
// verified) (ngram_map: `verified` is the draft's length after the replay cut it) or accept(n).
// The sequence needs more tokens than the prompt.
//
// A replay of a long sequence can take minutes, so a caller may follow it: on_progress, when
// given, is called after each step with the tokens reached so far (the prompt included) and
// tokens.size(); the first figure only grows, and the last call gives tokens.size() twice. It is
// outside the draft timing.
//
// On any error (memory running out: qk::error; an exception of on_progress or of the drafter
// passes unchanged), a drafter that can be copied is as it was: the replay runs on a copy, which
// replaces it once the replay is complete (what the drafter shares with others, such as an
// ngram_mod's pool or a suffix_corpus, is not copied: the pool keeps what was added to it). A
// drafter that cannot be copied (or moved without throwing) is replayed in place, and an error
// leaves it where the replay stopped.
using replay_progress = std::function<void(std::size_t reached, std::size_t total)>;

namespace detail {

template <history_drafter Drafter>
void replay_steps(std::span<const std::int32_t> tokens, Drafter& drafter, const replay_options& options, const replay_progress& on_progress,
                  const batch_budget& budget, replay_result& r)
{
    const std::size_t max_draft = options.max_draft;
    // pos: the token the target has just chosen (sampled); everything before it is the history.
    std::size_t pos = options.prompt;
    token_history history(tokens.first(pos));
    while (pos + 1 < tokens.size()) {
        const auto start = std::chrono::steady_clock::now();
        std::vector<std::int32_t> draft = drafter.draft(history, tokens[pos]);
        r.draft_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        // Only tokens inside the sequence can be verified against it.
        draft.resize(std::min({draft.size(), max_draft, tokens.size() - pos - 2}));
        ++r.steps;
        // The sampled token and its draft, split into evaluations of at most n_batch tokens.
        r.evaluations += budget.evaluations(1 + draft.size());
        std::size_t accepted = 0;
        while (accepted < draft.size() && draft[accepted] == tokens[pos + 1 + accepted]) {
            ++accepted;
        }
        if (!draft.empty()) {
            ++r.drafts;
            r.drafted += draft.size();
            r.accepted += accepted;
        }
        if (!draft.empty()) {
            if constexpr (requires { drafter.accept(std::int32_t{}, std::int32_t{}); }) {
                drafter.accept(static_cast<std::int32_t>(accepted), static_cast<std::int32_t>(draft.size()));
            } else if constexpr (requires { drafter.accept(std::int32_t{}); }) {
                drafter.accept(static_cast<std::int32_t>(accepted));
            }
        }
        history.append(tokens.subspan(pos, 1 + accepted));
        pos += 1 + accepted;
        if (on_progress) {
            // pos is the last token's position once the loop ends: reached counts it.
            on_progress(pos + 1, tokens.size());
        }
    }
}

} // namespace detail

template <history_drafter Drafter>
[[nodiscard]] replay_result replay(std::span<const std::int32_t> tokens, Drafter& drafter, replay_options options = {},
                                   const replay_progress& on_progress = {})
try {
    const batch_budget budget(options.n_batch);
    if (options.prompt == 0 || options.prompt >= tokens.size()) {
        qk::detail::fail("qk::spec::replay: prompt=", options.prompt, " for a sequence of ", tokens.size(),
                         " tokens; the prompt needs at least 1 token and the sequence more than the prompt");
    }
    replay_result r;
    r.prompt_evaluations = budget.evaluations(options.prompt);
    r.evaluations = r.prompt_evaluations;
    r.generated = tokens.size() - options.prompt;
    r.baseline = r.prompt_evaluations + r.generated - 1;
    if constexpr (std::is_copy_constructible_v<Drafter> && std::is_nothrow_move_assignable_v<Drafter>) {
        Drafter replayed = drafter;
        detail::replay_steps(tokens, replayed, options, on_progress, budget, r);
        drafter = std::move(replayed);
    } else {
        detail::replay_steps(tokens, drafter, options, on_progress, budget, r);
    }
    return r;
} catch (...) {
    qk::detail::rethrow_as_error("qk::spec::replay");
}

} // namespace qk::spec
