// qk::spec::ngram_index: exactly ngram_simple's drafts (see ngram_simple.hpp for the definition),
// in O(1) amortized time per call however long the history: every n-gram start position is
// indexed by its hash to the most recent start with the same hash, and each position links to
// the previous one (so dropping the newest starts restores the older ones). It reads a
// token_history: each call drops the starts whose n-gram touches a position written since the
// previous call (a cut, or a cut regrown with other tokens) and indexes the new ones, so an edit
// at the end costs what it changed; begin() forgets everything and indexes a history afresh.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <unordered_map>
#include <vector>

#include "ngram_config.hpp"
#include "token_history.hpp"

namespace qk::spec {

class ngram_index {
public:
    // size_ngram or size_mgram below 1: qk::error.
    explicit ngram_index(ngram_config config) : config_(config) { detail::check_config("ngram_index", config); }

    // A history longer than 2^31 - 1 tokens: qk::error, before anything changes.
    [[nodiscard]] std::vector<std::int32_t> draft(const token_history& history, std::int32_t sampled)
    {
        follow(history);
        std::vector<std::int32_t> result;
        if (!detail::due(counter_, config_.check_rate)) {
            return result;
        }
        const auto n = static_cast<std::size_t>(config_.size_ngram);
        const auto m = static_cast<std::size_t>(config_.size_mgram);
        const std::size_t length = history.size();
        if (length <= n + m + 1) {
            return result;
        }
        const std::span<const std::int32_t> tokens = history.tokens();
        const std::int32_t* tail = tokens.data() + (length - n + 1);
        std::uint64_t h = hash_start;
        for (std::size_t i = 0; i + 1 < n; ++i) {
            h = mix(h, tail[i]);
        }
        h = mix(h, sampled);
        const auto head = heads_.find(h);
        if (head == heads_.end()) {
            return result;
        }
        // Positions sharing the hash, most recent first; a different n-gram with the same hash
        // is passed over.
        for (std::int32_t j = head->second; j >= 1; j = previous_[static_cast<std::size_t>(j)]) {
            if (detail::matches_pattern(tokens, static_cast<std::size_t>(j), n, sampled)) {
                return detail::continuation(tokens, static_cast<std::size_t>(j), n, m);
            }
        }
        return result;
    }

    // Forgets everything read so far and indexes `history` afresh (the check-rate counter carries
    // on). Never needed for correctness: it moves the cost of indexing out of the next draft().
    void begin(const token_history& history)
    {
        check_length(history);
        forget();
        follow(history);
    }

    [[nodiscard]] const ngram_config& config() const noexcept { return config_; }
    // How many start positions are indexed (for tests and memory accounting).
    [[nodiscard]] std::size_t indexed() const noexcept { return hashes_.size() > 1 ? hashes_.size() - 1 : 0; }

private:
    static constexpr std::uint64_t hash_start = 0x243f6a8885a308d3ull;
    [[nodiscard]] static std::uint64_t mix(std::uint64_t h, std::int32_t token) noexcept
    {
        h = (h ^ static_cast<std::uint32_t>(token)) * 0x9e3779b97f4a7c15ull;
        return h ^ (h >> 29);
    }

    static void check_length(const token_history& history)
    {
        if (history.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
            qk::detail::fail("qk::spec::ngram_index: a history of ", history.size(), " tokens exceeds the positions it indexes (at most ",
                             std::numeric_limits<std::int32_t>::max(), ")");
        }
    }

    void forget() noexcept
    {
        heads_.clear();
        previous_.clear();
        hashes_.clear();
        mark_ = {};
    }

    // Brings the index to the starts 1 .. L - n - 1 of a history of length L: the n-grams that end
    // before its last token, the only ones ngram_simple searches.
    void follow(const token_history& history)
    {
        check_length(history);
        const auto n = static_cast<std::size_t>(config_.size_ngram);
        const std::size_t wanted = history.size() > n + 1 ? history.size() - n : 1; // starts [1, wanted)
        // Start j hashed positions j .. j + n - 1: it stays only if all of them are unchanged.
        const std::size_t unchanged = history.unchanged_since(mark_);
        const std::size_t valid = std::min(wanted, unchanged >= n ? unchanged - n + 1 : 1);
        if (valid <= 1 && hashes_.size() > 1) {
            forget(); // nothing to keep: cheaper than dropping the starts one by one
        }
        if (hashes_.empty()) {
            hashes_.push_back(0); // position 0 is never indexed
            previous_.push_back(-1);
        }
        while (hashes_.size() > valid) { // cut, or written over: drop the newest starts
            const std::size_t j = hashes_.size() - 1;
            const auto head = heads_.find(hashes_[j]);
            if (previous_[j] >= 1) {
                head->second = previous_[j];
            } else {
                heads_.erase(head);
            }
            hashes_.pop_back();
            previous_.pop_back();
        }
        const std::span<const std::int32_t> tokens = history.tokens();
        while (hashes_.size() < wanted) {
            const std::size_t j = hashes_.size();
            std::uint64_t h = hash_start;
            for (std::size_t i = 0; i < n; ++i) {
                h = mix(h, tokens[j + i]);
            }
            const auto [head, inserted] = heads_.try_emplace(h, static_cast<std::int32_t>(j));
            previous_.push_back(inserted ? -1 : head->second);
            head->second = static_cast<std::int32_t>(j);
            hashes_.push_back(h);
        }
        mark_ = history.seen();
    }

    ngram_config config_;
    std::int32_t counter_ = 0;
    std::unordered_map<std::uint64_t, std::int32_t> heads_; // hash -> most recent start
    std::vector<std::int32_t> previous_;                    // per start: the previous start with its hash, or -1
    std::vector<std::uint64_t> hashes_;                     // per start: its n-gram's hash
    token_history::mark mark_;                              // the history as last read
};

} // namespace qk::spec
