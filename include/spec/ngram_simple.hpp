// qk::spec::ngram_simple: self-speculative drafting by scanning the history for the most recent
// earlier occurrence of the current n-gram and proposing what followed it. O(history) per call;
// ngram_index gives the same drafts in O(1). The reference definition of both:
//  1. a counter is incremented on every call; below check_rate, no draft; otherwise it is reset
//     to 0 and the call goes on (so check_rate <= 1 drafts on every call);
//  2. with L the history length (every token so far except the one just sampled): L <= n + m + 1,
//     no draft;
//  3. the pattern is the last n - 1 history tokens followed by the sampled token;
//  4. start positions j from L - n - 1 down to 1 (0 is never a match) are searched for the first
//     (most recent) j where history[j .. j + n - 1] equals the pattern;
//  5. no match: no draft; otherwise c = min(m, L - (j + n)) tokens from history[j + n] are the
//     draft, unless c < n (no draft).
// It keeps nothing from one call to the next but the counter, so it takes a bare span as well as
// a token_history: no edit of the history can make it stale.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "ngram_config.hpp"
#include "token_history.hpp"

namespace qk::spec {

class ngram_simple {
public:
    // size_ngram or size_mgram below 1: qk::error.
    explicit ngram_simple(ngram_config config) : config_(config) { detail::check_config("ngram_simple", config); }

    // Memory running out: qk::error, and the drafter is as it was (its counter has not moved).
    [[nodiscard]] std::vector<std::int32_t> draft(std::span<const std::int32_t> history, std::int32_t sampled)
    try {
        std::int32_t counter = counter_;
        std::vector<std::int32_t> result;
        const auto n = static_cast<std::size_t>(config_.size_ngram);
        const auto m = static_cast<std::size_t>(config_.size_mgram);
        const std::size_t length = history.size();
        if (detail::due(counter, config_.check_rate) && length > n + m + 1) {
            for (std::size_t j = length - n - 1; j >= 1; --j) {
                if (detail::matches_pattern(history, j, n, sampled)) {
                    detail::continuation(history, j, n, m, result);
                    break;
                }
            }
        }
        counter_ = counter; // once nothing can fail
        return result;
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::ngram_simple::draft");
    }
    [[nodiscard]] std::vector<std::int32_t> draft(const token_history& history, std::int32_t sampled)
    {
        return draft(history.tokens(), sampled);
    }

    // Nothing to forget (the counter carries on); there for code written for any drafter.
    void begin(const token_history&) noexcept {}
    void begin(std::span<const std::int32_t>) noexcept {}

    [[nodiscard]] const ngram_config& config() const noexcept { return config_; }

private:
    ngram_config config_;
    std::int32_t counter_ = 0;
};

} // namespace qk::spec
