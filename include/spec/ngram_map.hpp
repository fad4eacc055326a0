// qk::spec::ngram_map: drafts from statistics of what followed each n-gram, rather than from its
// latest occurrence alone. Definition, over a history of length L:
//  - an occurrence of a key is a start j >= 0 whose m-token continuation lies in the history
//    (j + n + m <= L); its value is that continuation, history[j + n .. j + n + m). A key tracks
//    its first 4 distinct values (in order of first occurrence) with their counts; later distinct
//    values only add to the key's total;
//  - a call first runs the check-rate counter (as ngram_simple does); the key is the last n - 1
//    history tokens and the sampled token; fewer than min_hits occurrences: no draft;
//  - key-only mode (values = false) drafts the value of the key's most recent occurrence;
//    key+values mode drafts the tracked value with the most occurrences (ties: the first seen) if
//    its count is at least `dominance` times the key's other occurrences together, else nothing;
//  - the draft is the chosen value's first min(m, cap) tokens (the value itself, not whatever
//    followed the latest match); a key's cap starts at m. accept(n_accepted) after a draft sets
//    the drafted key's cap to max(1, n_accepted) when fewer tokens were accepted than drafted,
//    and doubles it (up to m) when all were, so a capped key grows back (accept(n_accepted,
//    n_verified) when only a prefix of the draft was verified: all of it accepted is "all").
// The statistics grow with the history in O(n + 4m) per appended token; a history found shorter
// than before (tokens cut off the end) or passed to begin() is re-read from the start.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <unordered_map>
#include <vector>

#include "ngram_config.hpp"

namespace qk::spec {

class ngram_map {
public:
    struct config {
        std::int32_t size_ngram = 4;
        std::int32_t size_mgram = 16;
        std::int32_t check_rate = 1;
        std::int32_t min_hits = 1;   // occurrences a key needs before it drafts
        bool values = true;          // key+values mode; false: key-only
        std::int32_t dominance = 3;  // key+values: the dominant value's count over all others'
    };

    explicit ngram_map(config c) : config_(c)
    {
        detail::check_config("ngram_map", {c.size_ngram, c.size_mgram, c.check_rate});
        if (c.min_hits < 1 || c.dominance < 0) {
            qk::detail::fail("qk::spec::ngram_map: min_hits=", c.min_hits, ", dominance=", c.dominance,
                             ": min_hits must be at least 1 and dominance not negative");
        }
    }

    [[nodiscard]] std::vector<std::int32_t> draft(std::span<const std::int32_t> history, std::int32_t sampled)
    {
        follow(history);
        last_key_ = no_key;
        std::vector<std::int32_t> result;
        if (!detail::due(counter_, config_.check_rate)) {
            return result;
        }
        const auto n = static_cast<std::size_t>(config_.size_ngram);
        if (history.size() + 1 < n) {
            return result;
        }
        const std::int32_t* tail = history.data() + (history.size() + 1 - n);
        std::uint64_t h = hash_start;
        for (std::size_t i = 0; i + 1 < n; ++i) {
            h = mix(h, tail[i]);
        }
        h = mix(h, sampled);
        const auto matches = [&](const key_stats& k) {
            const auto p = static_cast<std::size_t>(k.position);
            return history[p + n - 1] == sampled && std::equal(tail, tail + (n - 1), history.data() + p);
        };
        for (;; h = next(h)) { // hashes of different keys that collide are probed onwards
            const auto it = keys_.find(h);
            if (it == keys_.end()) {
                return result;
            }
            if (!matches(it->second)) {
                continue;
            }
            const key_stats& k = it->second;
            if (k.total < config_.min_hits) {
                return result;
            }
            std::int32_t from = k.latest;
            if (config_.values) {
                std::size_t best = 0;
                for (std::size_t v = 1; v < k.count; ++v) {
                    best = k.values[v].hits > k.values[best].hits ? v : best;
                }
                const std::int64_t others = k.total - k.values[best].hits;
                if (static_cast<std::int64_t>(k.values[best].hits) < static_cast<std::int64_t>(config_.dominance) * others) {
                    return result;
                }
                from = k.values[best].position;
            }
            const auto cap = caps_.find(h);
            const std::int32_t length = cap == caps_.end() ? config_.size_mgram : cap->second;
            result.assign(history.begin() + from, history.begin() + from + length);
            last_key_ = h;
            last_length_ = length;
            return result;
        }
    }

    // Feedback on the last draft: how many of its tokens the target accepted.
    void accept(std::int32_t n_accepted) { accept(n_accepted, last_length_); }

    // The same when the caller verified only the first n_verified tokens of the draft (it cut
    // the draft to fit its budget): accepting all of those counts as a full acceptance.
    void accept(std::int32_t n_accepted, std::int32_t n_verified)
    {
        if (n_accepted < 0 || n_verified < 0) {
            qk::detail::fail("qk::spec::ngram_map::accept: n_accepted=", n_accepted, ", n_verified=", n_verified,
                             ": counts cannot be negative");
        }
        if (last_key_ == no_key) {
            return;
        }
        const bool full = n_accepted >= std::min(n_verified, last_length_);
        const std::int32_t cap = full ? std::min(config_.size_mgram, 2 * last_length_) : std::max(1, n_accepted);
        caps_[last_key_] = cap;
        last_key_ = no_key;
    }

    // The history was replaced or edited: read it afresh (the counter and the caps carry on).
    void begin(std::span<const std::int32_t> history)
    {
        keys_.clear();
        seen_ = 0;
        follow(history);
    }

    [[nodiscard]] const config& configuration() const noexcept { return config_; }

private:
    static constexpr std::uint64_t hash_start = 0x13198a2e03707344ull;
    static constexpr std::uint64_t no_key = 0;
    [[nodiscard]] static std::uint64_t mix(std::uint64_t h, std::int32_t token) noexcept
    {
        h = (h ^ static_cast<std::uint32_t>(token)) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
        return h == no_key ? 1 : h;
    }
    [[nodiscard]] static std::uint64_t next(std::uint64_t h) noexcept { return h + 1 == no_key ? 1 : h + 1; }

    struct value_stats {
        std::int32_t position = 0; // where its first occurrence's tokens start
        std::int32_t hits = 0;
    };
    struct key_stats {
        std::int32_t position = 0; // the key's first occurrence
        std::int32_t total = 0;    // occurrences with a complete value
        std::int32_t latest = 0;   // where the most recent occurrence's value starts
        std::size_t count = 0;     // tracked values
        std::array<value_stats, 4> values{};
    };

    void follow(std::span<const std::int32_t> history)
    {
        if (history.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
            qk::detail::fail("qk::spec::ngram_map: a history of ", history.size(), " tokens exceeds the positions it indexes (at most ",
                             std::numeric_limits<std::int32_t>::max(), ")");
        }
        if (history.size() < seen_) {
            keys_.clear();
            seen_ = 0;
        }
        const auto n = static_cast<std::size_t>(config_.size_ngram);
        const auto m = static_cast<std::size_t>(config_.size_mgram);
        for (; seen_ < history.size(); ++seen_) {
            // The history now holds seen_ + 1 tokens: the occurrence starting n + m before its end
            // has become complete.
            if (seen_ + 1 < n + m) {
                continue;
            }
            const std::size_t j = seen_ + 1 - n - m;
            record(history, j);
        }
    }

    void record(std::span<const std::int32_t> history, std::size_t j)
    {
        const auto n = static_cast<std::size_t>(config_.size_ngram);
        const auto m = static_cast<std::size_t>(config_.size_mgram);
        std::uint64_t h = hash_start;
        for (std::size_t i = 0; i < n; ++i) {
            h = mix(h, history[j + i]);
        }
        for (;; h = next(h)) {
            auto [it, inserted] = keys_.try_emplace(h);
            key_stats& k = it->second;
            if (inserted) {
                k.position = static_cast<std::int32_t>(j);
            } else if (!std::equal(history.begin() + k.position, history.begin() + k.position + static_cast<std::ptrdiff_t>(n),
                                   history.begin() + static_cast<std::ptrdiff_t>(j))) {
                continue; // another key with this hash
            }
            const auto value = static_cast<std::int32_t>(j + n);
            ++k.total;
            k.latest = value;
            for (std::size_t v = 0; v < k.count; ++v) {
                const auto p = k.values[v].position;
                if (std::equal(history.begin() + p, history.begin() + p + static_cast<std::ptrdiff_t>(m), history.begin() + value)) {
                    ++k.values[v].hits;
                    return;
                }
            }
            if (k.count < k.values.size()) {
                k.values[k.count++] = {value, 1};
            }
            return;
        }
    }

    config config_;
    std::int32_t counter_ = 0;
    std::size_t seen_ = 0; // history tokens read into the statistics
    std::unordered_map<std::uint64_t, key_stats> keys_;
    std::unordered_map<std::uint64_t, std::int32_t> caps_;
    std::uint64_t last_key_ = no_key;
    std::int32_t last_length_ = 0;
};

} // namespace qk::spec
