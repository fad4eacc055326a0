// qk::spec::drafter_selection: several drafters run as one (after llama.cpp PR 22838). Every
// drafter drafts on every call, so each follows the history, and the draft returned is the one
// with the highest expected gain. It is itself a drafter (replay, a server loop or another
// selection can use it).
//  - Every drafter's draft is scored, not only the chosen one's: once the chosen draft's feedback
//    came (accept()), each draft of that step is compared, token by token, with what the target
//    is then known to have produced: the chosen draft's accepted tokens, then its first rejected
//    token (a draft holding that token there was rejected too) and, when the next call's history
//    continues exactly as the feedback said (the sampled token and the accepted ones appended,
//    nothing else changed), the token the target chose after them, which is that call's
//    `sampled`. A draft's tokens count as matched until its first token that differs from a known
//    one (one mismatch) or until what is known ends (no mismatch: the rest is not judged).
//  - A drafter's match rate r is matched / (matched + mismatched) over all its scored drafts, the
//    maximum-likelihood rate of a geometric acceptance model with censored drafts; before any of
//    its tokens was judged, prior_acceptance (1 by default: optimistic, so that each drafter is
//    tried as soon as it proposes something).
//  - The expected gain of a draft of n tokens is the expected number of them accepted under that
//    model, r + r^2 + ... + r^n (n when r = 1), rather than llama.cpp's rate x length, which
//    rates a long draft by its length whatever its rate: a drafter of long, rarely accepted
//    drafts could win every step. Only non-empty drafts compete; ties go to the first drafter in
//    the list. The best draft is returned even when its gain is 0, so a selection of one
//    drafter drafts as that drafter does.
//  - accept(n_accepted, n_verified) or accept(n_accepted) after a draft adds to the chosen
//    drafter's statistics and is passed on to it when it has such a hook (the two-count form when
//    it has one, else the one-count form; accept(n_accepted) passes the draft's length as
//    n_verified to a drafter with only the two-count form). The drafters not chosen hear nothing,
//    as llama.cpp's do (their accept sees is_other and returns). A step without feedback is
//    scored for no drafter.
//  - Memory running out is a qk::error that leaves the selection's own state as it was; a draft or
//    begin that fails in one drafter has already run in those before it (see draft()).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "../kernels/error.hpp"
#include "replay.hpp"
#include "token_history.hpp"

namespace qk::spec {

// What a selection counted for one of its drafters.
struct drafter_statistics {
    std::size_t drafts = 0;   // non-empty drafts it proposed
    std::size_t chosen = 0;   // of those, the ones returned
    std::size_t verified = 0; // chosen drafts whose verification was reported (accept())
    std::size_t drafted = 0;  // tokens of those drafts that were verified
    std::size_t accepted = 0; // tokens of those drafts that were accepted
    // Every draft of a step with feedback, chosen or not, against what the target produced:
    std::size_t scored = 0;     // drafts scored
    std::size_t matched = 0;    // their tokens equal to the target's, up to the first that differs
    std::size_t mismatched = 0; // drafts whose tokens differed from the target's at a known position

    [[nodiscard]] double acceptance_rate() const noexcept { return drafted == 0 ? 0.0 : double(accepted) / double(drafted); }
    // r in the header's model: the chance that a token is accepted once those before it were.
    [[nodiscard]] double match_rate() const noexcept
    {
        return matched + mismatched == 0 ? 0.0 : double(matched) / double(matched + mismatched);
    }
    bool operator==(const drafter_statistics&) const = default;
};

struct selection_options {
    double prior_acceptance = 1.0; // the match rate assumed for a drafter none of whose tokens was judged
};

template <history_drafter... Drafters>
    requires(sizeof...(Drafters) > 0)
class drafter_selection {
public:
    static constexpr std::size_t count = sizeof...(Drafters);
    static constexpr std::size_t none = std::numeric_limits<std::size_t>::max();

    explicit drafter_selection(Drafters... drafters) : drafter_selection(selection_options{}, std::move(drafters)...) {}
    // prior_acceptance outside [0, 1]: qk::error.
    explicit drafter_selection(selection_options options, Drafters... drafters)
        : drafters_(std::move(drafters)...), options_(options)
    {
        if (!(options_.prior_acceptance >= 0 && options_.prior_acceptance <= 1)) {
            qk::detail::fail("qk::spec::drafter_selection: prior_acceptance=", options_.prior_acceptance, ": must lie in [0, 1]");
        }
    }

    // Memory running out (in a drafter, or for the draft returned): qk::error, and the selection's
    // own state (statistics, proposals, the draft awaiting feedback, the step to score) is as it
    // was; the drafters before the one that failed in the list have drafted, as a call whose
    // draft was discarded does (a drafter cannot take a draft back: their check-rate counters,
    // and ngram_map's key awaiting feedback, have moved on). A selection of one drafter is left as
    // it was when that drafter fails, not when the returned copy fails after it drafted.
    [[nodiscard]] std::vector<std::int32_t> draft(const token_history& history, std::int32_t sampled)
    try {
        std::array<drafter_statistics, count> statistics = statistics_;
        score_last_step(history, sampled, statistics);
        std::array<std::vector<std::int32_t>, count> proposals;
        [&]<std::size_t... I>(std::index_sequence<I...>) {
            ((proposals[I] = std::get<I>(drafters_).draft(history, sampled)), ...);
        }(std::make_index_sequence<count>{});
        std::size_t best = none;
        double best_gain = 0;
        for (std::size_t i = 0; i < count; ++i) {
            if (proposals[i].empty()) {
                continue;
            }
            ++statistics[i].drafts;
            const double gain = gain_of(statistics[i], proposals[i].size());
            if (best == none || gain > best_gain) {
                best = i;
                best_gain = gain;
            }
        }
        std::vector<std::int32_t> result;
        if (best != none) {
            result = proposals[best]; // the last allocation; the proposals are kept for scoring
            ++statistics[best].chosen;
        }
        // Nothing below allocates.
        statistics_ = statistics;
        proposals_.swap(proposals);
        scored_ = none;
        pending_ = best; // a draft never reported on is forgotten
        if (best != none) {
            step_ = {history.seen(), sampled, 0, 0};
        }
        return result;
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::drafter_selection::draft");
    }

    // Feedback on the last draft: the target verified its first n_verified tokens and accepted
    // n_accepted of them. Negative counts, n_accepted above n_verified, or n_verified above the
    // draft's length: qk::error. Without a draft awaiting feedback, nothing happens. Memory
    // running out in the chosen drafter's accept: qk::error, and the selection is as it was (the
    // drafter as its own accept leaves it).
    void accept(std::int32_t n_accepted, std::int32_t n_verified)
    try {
        const std::size_t length = pending_length();
        if (n_accepted < 0 || n_accepted > n_verified || (pending_ != none && std::size_t(n_verified) > length)) {
            qk::detail::fail("qk::spec::drafter_selection::accept: n_accepted=", n_accepted, ", n_verified=", n_verified,
                             " for a draft of ", length, " tokens: needs 0 <= n_accepted <= n_verified <= the draft's length");
        }
        if (pending_ == none) {
            return;
        }
        with_drafter(pending_, [&](auto& drafter) {
            if constexpr (requires { drafter.accept(std::int32_t{}, std::int32_t{}); }) {
                drafter.accept(n_accepted, n_verified);
            } else if constexpr (requires { drafter.accept(std::int32_t{}); }) {
                drafter.accept(n_accepted);
            }
        });
        record(n_accepted, n_verified); // once the drafter took it
        pending_ = none;
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::drafter_selection::accept");
    }
    // The same when all of the draft was verified.
    void accept(std::int32_t n_accepted)
    try {
        const auto length = static_cast<std::int32_t>(pending_length());
        if (n_accepted < 0 || (pending_ != none && n_accepted > length)) {
            qk::detail::fail("qk::spec::drafter_selection::accept: n_accepted=", n_accepted, " for a draft of ", length,
                             " tokens: needs 0 <= n_accepted <= the draft's length");
        }
        if (pending_ == none) {
            return;
        }
        with_drafter(pending_, [&](auto& drafter) {
            if constexpr (requires { drafter.accept(std::int32_t{}); }) {
                drafter.accept(n_accepted);
            } else if constexpr (requires { drafter.accept(std::int32_t{}, std::int32_t{}); }) {
                drafter.accept(n_accepted, length);
            }
        });
        record(n_accepted, length);
        pending_ = none;
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::drafter_selection::accept");
    }

    // Passed on to every drafter that has begin(const token_history&); the statistics carry on,
    // and the last step is scored for no drafter. Memory running out in a drafter's begin:
    // qk::error, the selection's own state as it was, and the drafters before it in the list
    // begun.
    void begin(const token_history& history)
    try {
        std::apply(
            [&](auto&... drafter) {
                (
                    [&](auto& d) {
                        if constexpr (requires { d.begin(history); }) {
                            d.begin(history);
                        }
                    }(drafter),
                    ...);
            },
            drafters_);
        pending_ = none;
        scored_ = none;
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::drafter_selection::begin");
    }

    // The match rate a drafter's gain is computed with: its match rate, or the prior.
    [[nodiscard]] double expected_acceptance(std::size_t i) const noexcept { return acceptance_of(statistics_[i]); }
    // The expected number of accepted tokens of drafter i's draft of `length` tokens: r + r^2 + ...
    // + r^length, summed in that order (the same bits on every platform).
    [[nodiscard]] double expected_gain(std::size_t i, std::size_t length) const noexcept { return gain_of(statistics_[i], length); }
    [[nodiscard]] const std::array<drafter_statistics, count>& statistics() const noexcept { return statistics_; }
    // The drafter whose draft was returned last and awaits feedback; `none` when none does.
    [[nodiscard]] std::size_t chosen() const noexcept { return pending_; }
    [[nodiscard]] const selection_options& options() const noexcept { return options_; }

    template <std::size_t I>
    [[nodiscard]] auto& drafter() noexcept
    {
        return std::get<I>(drafters_);
    }
    template <std::size_t I>
    [[nodiscard]] const auto& drafter() const noexcept
    {
        return std::get<I>(drafters_);
    }

private:
    // The step whose drafts are scored at the next call: where the history stood, and the feedback.
    struct step {
        token_history::mark mark;
        std::int32_t sampled = 0;
        std::int32_t accepted = 0;
        std::int32_t verified = 0;
    };

    [[nodiscard]] double acceptance_of(const drafter_statistics& s) const noexcept
    {
        return s.matched + s.mismatched == 0 ? options_.prior_acceptance : s.match_rate();
    }
    [[nodiscard]] double gain_of(const drafter_statistics& s, std::size_t length) const noexcept
    {
        const double r = acceptance_of(s);
        if (r == 1.0) {
            return double(length);
        }
        double term = 1.0;
        double sum = 0.0;
        for (std::size_t k = 0; k < length && term > 0.0; ++k) {
            term *= r;
            sum += term;
        }
        return sum;
    }

    [[nodiscard]] std::size_t pending_length() const noexcept { return pending_ == none ? 0 : proposals_[pending_].size(); }

    void record(std::int32_t n_accepted, std::int32_t n_verified) noexcept
    {
        drafter_statistics& s = statistics_[pending_];
        ++s.verified;
        s.drafted += static_cast<std::size_t>(n_verified);
        s.accepted += static_cast<std::size_t>(n_accepted);
        step_.accepted = n_accepted;
        step_.verified = n_verified;
        scored_ = pending_;
    }

    // Scores the drafts of the last step with feedback against what the target produced (header),
    // into `statistics` (a copy of statistics_, kept if the call succeeds).
    void score_last_step(const token_history& history, std::int32_t sampled,
                         std::array<drafter_statistics, count>& statistics) const noexcept
    {
        const std::size_t chosen = scored_;
        if (chosen == none) {
            return;
        }
        const std::vector<std::int32_t>& truth = proposals_[chosen];
        const auto accepted = static_cast<std::size_t>(step_.accepted);
        const bool rejected = step_.accepted < step_.verified; // truth[accepted] was not the target's
        // The target's token after the accepted ones is `sampled` when the history grew by exactly
        // the last step's sampled token and accepted tokens, and nothing before them changed.
        const std::size_t before = step_.mark.length;
        bool next_known = history.size() == before + 1 + accepted && history.unchanged_since(step_.mark) == before &&
                          history[before] == step_.sampled;
        for (std::size_t k = 0; next_known && k < accepted; ++k) {
            next_known = history[before + 1 + k] == truth[k];
        }
        for (std::size_t i = 0; i < count; ++i) {
            const std::vector<std::int32_t>& draft = proposals_[i];
            if (draft.empty()) {
                continue;
            }
            drafter_statistics& s = statistics[i];
            ++s.scored;
            std::size_t k = 0;
            while (k < draft.size() && k < accepted && draft[k] == truth[k]) {
                ++k;
            }
            s.matched += k;
            if (k == draft.size()) {
                continue;
            }
            if (k < accepted || (rejected && draft[k] == truth[k])) {
                ++s.mismatched;
            } else if (next_known) {
                if (draft[k] == sampled) {
                    ++s.matched;
                } else {
                    ++s.mismatched;
                }
            }
        }
    }

    template <class Function>
    void with_drafter(std::size_t index, Function&& function)
    {
        [&]<std::size_t... I>(std::index_sequence<I...>) {
            ((I == index ? function(std::get<I>(drafters_)) : void()), ...);
        }(std::make_index_sequence<count>{});
    }

    std::tuple<Drafters...> drafters_;
    std::array<drafter_statistics, count> statistics_{};
    selection_options options_;
    std::array<std::vector<std::int32_t>, count> proposals_; // the last call's drafts
    std::size_t pending_ = none; // the drafter whose draft was returned last and awaits feedback
    std::size_t scored_ = none;  // the drafter chosen at the step with feedback, scored at the next call
    step step_;
};

template <history_drafter... Drafters>
drafter_selection(Drafters...) -> drafter_selection<Drafters...>;
template <history_drafter... Drafters>
drafter_selection(selection_options, Drafters...) -> drafter_selection<Drafters...>;

} // namespace qk::spec
