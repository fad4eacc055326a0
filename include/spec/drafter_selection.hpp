// qk::spec::drafter_selection: several drafters run as one (after llama.cpp PR 22838). Every
// drafter drafts on every call, so each follows the history, and the draft returned is the one
// with the highest expected gain: its drafter's acceptance rate times its length. It is itself a
// drafter (replay, a server loop or another selection can use it).
//  - a drafter's acceptance rate is accepted / drafted over its drafts that were chosen and
//    verified (accept() reported); before any of its tokens was verified, prior_acceptance (1 by
//    default: optimistic, so that each drafter is tried as soon as it proposes something);
//  - only non-empty drafts compete; ties go to the first drafter in the list. The best draft is
//    returned even when its expected gain is 0, so a selection of one drafter drafts as that
//    drafter does;
//  - accept(n_accepted, n_verified) or accept(n_accepted) after a draft adds to the chosen
//    drafter's statistics and is passed on to it when it has such a hook (the two-count form when
//    it has one, else the one-count form; accept(n_accepted) passes the draft's length as
//    n_verified to a drafter with only the two-count form). The drafters not chosen hear nothing,
//    as llama.cpp's do (their accept sees is_other and returns).
// A rate is only measured on a drafter's chosen drafts, so a drafter whose first drafts were
// rejected may not be chosen again while another drafter's gain stays above its own.
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

    [[nodiscard]] double acceptance_rate() const noexcept { return drafted == 0 ? 0.0 : double(accepted) / double(drafted); }
    bool operator==(const drafter_statistics&) const = default;
};

struct selection_options {
    double prior_acceptance = 1.0; // the rate assumed for a drafter none of whose tokens was verified
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

    [[nodiscard]] std::vector<std::int32_t> draft(const token_history& history, std::int32_t sampled)
    {
        pending_ = none; // a draft never reported on is forgotten
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
            ++statistics_[i].drafts;
            const double gain = expected_acceptance(i) * double(proposals[i].size());
            if (best == none || gain > best_gain) {
                best = i;
                best_gain = gain;
            }
        }
        if (best == none) {
            return {};
        }
        ++statistics_[best].chosen;
        pending_ = best;
        pending_length_ = proposals[best].size();
        return std::move(proposals[best]);
    }

    // Feedback on the last draft: the target verified its first n_verified tokens and accepted
    // n_accepted of them. Negative counts, n_accepted above n_verified, or n_verified above the
    // draft's length: qk::error. Without a draft awaiting feedback, nothing happens.
    void accept(std::int32_t n_accepted, std::int32_t n_verified)
    {
        if (n_accepted < 0 || n_accepted > n_verified || (pending_ != none && std::size_t(n_verified) > pending_length_)) {
            qk::detail::fail("qk::spec::drafter_selection::accept: n_accepted=", n_accepted, ", n_verified=", n_verified,
                             " for a draft of ", pending_length_, " tokens: needs 0 <= n_accepted <= n_verified <= the draft's length");
        }
        if (pending_ == none) {
            return;
        }
        record(n_accepted, n_verified);
        with_drafter(pending_, [&](auto& drafter) {
            if constexpr (requires { drafter.accept(std::int32_t{}, std::int32_t{}); }) {
                drafter.accept(n_accepted, n_verified);
            } else if constexpr (requires { drafter.accept(std::int32_t{}); }) {
                drafter.accept(n_accepted);
            }
        });
        pending_ = none;
    }
    // The same when all of the draft was verified.
    void accept(std::int32_t n_accepted)
    {
        const auto length = static_cast<std::int32_t>(pending_ == none ? 0 : pending_length_);
        if (n_accepted < 0 || (pending_ != none && n_accepted > length)) {
            qk::detail::fail("qk::spec::drafter_selection::accept: n_accepted=", n_accepted, " for a draft of ", length,
                             " tokens: needs 0 <= n_accepted <= the draft's length");
        }
        if (pending_ == none) {
            return;
        }
        record(n_accepted, length);
        with_drafter(pending_, [&](auto& drafter) {
            if constexpr (requires { drafter.accept(std::int32_t{}); }) {
                drafter.accept(n_accepted);
            } else if constexpr (requires { drafter.accept(std::int32_t{}, std::int32_t{}); }) {
                drafter.accept(n_accepted, length);
            }
        });
        pending_ = none;
    }

    // Passed on to every drafter that has begin(const token_history&); the statistics carry on.
    void begin(const token_history& history)
    {
        pending_ = none;
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
    }

    // The rate a drafter's expected gain is computed with: its acceptance rate, or the prior.
    [[nodiscard]] double expected_acceptance(std::size_t i) const noexcept
    {
        const drafter_statistics& s = statistics_[i];
        return s.drafted == 0 ? options_.prior_acceptance : s.acceptance_rate();
    }
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
    void record(std::int32_t n_accepted, std::int32_t n_verified) noexcept
    {
        drafter_statistics& s = statistics_[pending_];
        ++s.verified;
        s.drafted += static_cast<std::size_t>(n_verified);
        s.accepted += static_cast<std::size_t>(n_accepted);
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
    std::size_t pending_ = none;    // the drafter whose draft awaits feedback
    std::size_t pending_length_ = 0; // that draft's length
};

template <history_drafter... Drafters>
drafter_selection(Drafters...) -> drafter_selection<Drafters...>;
template <history_drafter... Drafters>
drafter_selection(selection_options, Drafters...) -> drafter_selection<Drafters...>;

} // namespace qk::spec
