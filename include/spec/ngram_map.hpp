// qk::spec::ngram_map: drafts from statistics of what followed each n-gram, rather than from its
// latest occurrence alone. Definition, over a history of length L:
//  - an occurrence of a key is a start j >= 0 whose m-token continuation lies in the history
//    (j + n + m <= L); its value is that continuation, history[j + n .. j + n + m). A key tracks
//    its first 4 distinct values (in order of first occurrence) with their counts; later distinct
//    values only add to the key's total;
//  - a call first runs the check-rate counter (as ngram_simple does); the key is the last n - 1
//    history tokens and the sampled token; fewer than min_hits occurrences: no draft;
//  - key-only mode (values = false) drafts the value of the key's most recent occurrence;
//    key+values mode drafts the tracked value with the most occurrences (ties: the first seen),
//    token by token while it is agreed on: token i is drafted when, among the tracked values
//    that agree with it on tokens 0 .. i - 1, those that also agree on token i have at least
//    `dominance` times the occurrences of those that part from it there (untracked values do not
//    vote); not even token 0 agreed on: no draft. A whole-value vote would refuse most keys of
//    real text, whose continuations part after a few tokens; this drafts the part they share;
//  - the draft is the chosen value's first min(agreed, cap) tokens (the value itself, not
//    whatever followed the latest match; agreed = m in key-only mode); a key's cap starts at m.
//    accept(n_accepted) after a draft sets the drafted key's cap to max(1, n_accepted) when fewer
//    tokens were accepted than drafted, and doubles it (up to m) when all were, so a capped key
//    grows back (accept(n_accepted, n_verified) when only a prefix of the draft was verified: all
//    of it accepted is "all").
// It reads a token_history: the statistics grow in O(n + 4m) per appended token, and each call
// first takes back, newest first, the occurrences that reach a position written since the
// previous call (a cut, or a cut regrown with other tokens), in O(1) each, from a log of what each
// occurrence added (16 bytes per token). begin() forgets the statistics and reads a history afresh.
// Memory running out in a call is a qk::error after which the drafter drafts and takes feedback
// as it would have without the call.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <unordered_map>
#include <vector>

#include "ngram_config.hpp"
#include "token_history.hpp"

namespace qk::spec {

class ngram_map {
public:
    struct config {
        std::int32_t size_ngram = 4;
        std::int32_t size_mgram = 16;
        std::int32_t check_rate = 1;
        std::int32_t min_hits = 1;   // occurrences a key needs before it drafts
        bool values = true;          // key+values mode; false: key-only
        std::int32_t dominance = 2;  // key+values: agreeing occurrences over parting ones, per token
    };

    explicit ngram_map(config c) : config_(c)
    {
        detail::check_config("ngram_map", {c.size_ngram, c.size_mgram, c.check_rate});
        if (c.min_hits < 1 || c.dominance < 0) {
            qk::detail::fail("qk::spec::ngram_map: min_hits=", c.min_hits, ", dominance=", c.dominance,
                             ": min_hits must be at least 1 and dominance not negative");
        }
    }

    // A history longer than 2^31 - 1 tokens: qk::error, before anything changes. Memory running
    // out: qk::error, and the drafter drafts and takes feedback as it would have without the call
    // (its counter and the draft awaiting feedback are as they were; statistics it had read from
    // the history by then stay, as a later call would have read them).
    [[nodiscard]] std::vector<std::int32_t> draft(const token_history& history, std::int32_t sampled)
    try {
        follow(history);
        std::int32_t counter = counter_;
        chosen c;
        if (detail::due(counter, config_.check_rate)) {
            c = choose(history.tokens(), sampled);
        }
        std::vector<std::int32_t> result;
        if (c.key != no_key) {
            const auto first = history.tokens().begin() + c.from;
            result.assign(first, first + c.length);
        }
        // Nothing below allocates.
        counter_ = counter;
        last_key_ = c.key;
        if (c.key != no_key) {
            last_length_ = c.length;
            last_cap_ = c.cap;
        }
        return result;
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::ngram_map::draft");
    }

    // Feedback on the last draft: how many of its tokens the target accepted.
    void accept(std::int32_t n_accepted) { accept(n_accepted, last_length_); }

    // The same when the caller verified only the first n_verified tokens of the draft (it cut
    // the draft to fit its budget): accepting all of those counts as a full acceptance. Memory
    // running out (a key's first cap): qk::error, and the drafter is as it was.
    void accept(std::int32_t n_accepted, std::int32_t n_verified)
    try {
        if (n_accepted < 0 || n_verified < 0) {
            qk::detail::fail("qk::spec::ngram_map::accept: n_accepted=", n_accepted, ", n_verified=", n_verified,
                             ": counts cannot be negative");
        }
        if (last_key_ == no_key) {
            return;
        }
        const bool full = n_accepted >= std::min(n_verified, last_length_);
        // A draft cut short by the values' vote leaves a full acceptance's cap above its length.
        const std::int32_t cap = full ? std::min(config_.size_mgram, 2 * last_cap_) : std::max(1, n_accepted);
        caps_[last_key_] = cap; // an insertion that fails inserts nothing
        last_key_ = no_key;
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::ngram_map::accept");
    }

    // Forgets the statistics and reads `history` afresh (the counter and the caps carry on).
    // Never needed for correctness: it moves the cost of reading out of the next draft(). Errors
    // as draft()'s: on memory running out, the drafter drafts as it would have without the call.
    void begin(const token_history& history)
    try {
        check_length(history);
        forget();
        follow(history);
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::ngram_map::begin");
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

    // The draft a due call makes: the key it drafts for (no_key: none), where the drafted tokens
    // start, how many, and the key's cap. Reads only.
    struct chosen {
        std::uint64_t key = no_key;
        std::int32_t from = 0;
        std::int32_t length = 0;
        std::int32_t cap = 0;
    };
    [[nodiscard]] chosen choose(std::span<const std::int32_t> tokens, std::int32_t sampled) const
    {
        const auto n = static_cast<std::size_t>(config_.size_ngram);
        if (tokens.size() + 1 < n) {
            return {};
        }
        const std::int32_t* tail = tokens.data() + (tokens.size() + 1 - n);
        std::uint64_t h = hash_start;
        for (std::size_t i = 0; i + 1 < n; ++i) {
            h = mix(h, tail[i]);
        }
        h = mix(h, sampled);
        const auto matches = [&](const key_stats& k) {
            const auto p = static_cast<std::size_t>(k.position);
            return tokens[p + n - 1] == sampled && std::equal(tail, tail + (n - 1), tokens.data() + p);
        };
        for (;; h = next(h)) { // hashes of different keys that collide are probed onwards
            const auto it = keys_.find(h);
            if (it == keys_.end()) {
                return {};
            }
            if (!matches(it->second)) {
                continue;
            }
            const key_stats& k = it->second;
            if (k.total < config_.min_hits) {
                return {};
            }
            std::int32_t from = k.latest;
            std::int32_t agreed = config_.size_mgram;
            if (config_.values) {
                std::size_t best = 0;
                for (std::size_t v = 1; v < k.count; ++v) {
                    best = k.values[v].hits > k.values[best].hits ? v : best;
                }
                from = k.values[best].position;
                agreed = agreed_length(tokens, k, from);
                if (agreed == 0) {
                    return {};
                }
            }
            const auto cap = caps_.find(h);
            const std::int32_t key_cap = cap == caps_.end() ? config_.size_mgram : cap->second;
            return {h, from, std::min(agreed, key_cap), key_cap};
        }
    }

    // How many tokens of the value at `from` the key's tracked values agree on (see the header).
    [[nodiscard]] std::int32_t agreed_length(std::span<const std::int32_t> tokens, const key_stats& k, std::int32_t from) const
    {
        std::array<bool, 4> along{};
        along.fill(true);
        for (std::int32_t i = 0; i < config_.size_mgram; ++i) {
            const std::int32_t token = tokens[static_cast<std::size_t>(from + i)];
            std::int64_t agree = 0;
            std::int64_t part = 0;
            for (std::size_t v = 0; v < k.count; ++v) {
                if (!along[v]) {
                    continue;
                }
                if (tokens[static_cast<std::size_t>(k.values[v].position + i)] == token) {
                    agree += k.values[v].hits;
                } else {
                    part += k.values[v].hits;
                    along[v] = false;
                }
            }
            if (agree < static_cast<std::int64_t>(config_.dominance) * part) {
                return i;
            }
        }
        return config_.size_mgram;
    }

    // What recording one occurrence changed, so that it can be taken back.
    struct occurrence {
        std::uint64_t key = 0;              // its slot in keys_
        std::int32_t previous_latest = 0;   // the key's `latest` before it
        std::int32_t value = -1;            // the tracked value it counted for; -1: untracked
    };

    static void check_length(const token_history& history)
    {
        if (history.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
            qk::detail::fail("qk::spec::ngram_map: a history of ", history.size(), " tokens exceeds the positions it indexes (at most ",
                             std::numeric_limits<std::int32_t>::max(), ")");
        }
    }

    void forget() noexcept
    {
        keys_.clear();
        log_.clear();
        read_ = 0;
        mark_ = {};
    }

    // Reads the history into the statistics. Memory running out (a new key): qk::error, with the
    // statistics those of the occurrences recorded so far and read_ counting their tokens, all
    // consistent, and mark_ the previous call's; the next call then keeps what is still the
    // history's (everything it keeps lies within what that mark saw unchanged) and reads on.
    void follow(const token_history& history)
    {
        check_length(history);
        const auto n = static_cast<std::size_t>(config_.size_ngram);
        const auto m = static_cast<std::size_t>(config_.size_mgram);
        // One log entry per occurrence: room for all of them first, so that recording one cannot
        // fail after its key was counted.
        detail::reserve_for(log_, history.size() >= n + m ? history.size() - (n + m) + 1 : 0);
        // Occurrence j read positions j .. j + n + m - 1: it stays only if all are unchanged.
        const std::size_t unchanged = std::min(read_, history.unchanged_since(mark_));
        const std::size_t valid = unchanged >= n + m ? unchanged - (n + m) + 1 : 0;
        if (valid == 0 && !log_.empty()) {
            forget(); // nothing to keep: cheaper than taking occurrences back one by one
        }
        while (log_.size() > valid) {
            take_back();
        }
        read_ = unchanged;
        const std::span<const std::int32_t> tokens = history.tokens();
        for (; read_ < tokens.size(); ++read_) {
            // The history now holds read_ + 1 tokens: the occurrence starting n + m before its end
            // has become complete.
            if (read_ + 1 >= n + m) {
                record(tokens, read_ + 1 - n - m);
            }
        }
        mark_ = history.seen();
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
            auto [it, inserted] = keys_.try_emplace(h); // the one allocation: failing, it inserts nothing
            key_stats& k = it->second;
            if (inserted) {
                k.position = static_cast<std::int32_t>(j);
            } else if (!std::equal(history.begin() + k.position, history.begin() + k.position + static_cast<std::ptrdiff_t>(n),
                                   history.begin() + static_cast<std::ptrdiff_t>(j))) {
                continue; // another key with this hash
            }
            const auto value = static_cast<std::int32_t>(j + n);
            occurrence& entry = log_.emplace_back(occurrence{h, k.latest, -1}); // within the room follow() made
            ++k.total;
            k.latest = value;
            for (std::size_t v = 0; v < k.count; ++v) {
                const auto p = k.values[v].position;
                if (std::equal(history.begin() + p, history.begin() + p + static_cast<std::ptrdiff_t>(m), history.begin() + value)) {
                    ++k.values[v].hits;
                    entry.value = static_cast<std::int32_t>(v);
                    return;
                }
            }
            if (k.count < k.values.size()) {
                entry.value = static_cast<std::int32_t>(k.count);
                k.values[k.count++] = {value, 1};
            }
            return;
        }
    }

    // Undoes the newest recorded occurrence. Taken back newest first, the statistics are those of
    // the occurrences before it: a value (or key) whose count falls to 0 is the last one added,
    // since its first occurrence was the earliest of those that counted for it; and a key that
    // probing placed past colliding ones is erased before them, so no probe sequence is broken.
    void take_back()
    {
        const occurrence entry = log_.back();
        log_.pop_back();
        const auto it = keys_.find(entry.key);
        key_stats& k = it->second;
        if (--k.total == 0) {
            keys_.erase(it);
            return;
        }
        k.latest = entry.previous_latest;
        if (entry.value >= 0 && --k.values[static_cast<std::size_t>(entry.value)].hits == 0) {
            --k.count;
        }
    }

    config config_;
    std::int32_t counter_ = 0;
    std::size_t read_ = 0;          // history tokens read into the statistics
    std::vector<occurrence> log_;   // per recorded occurrence, in the order recorded
    token_history::mark mark_;      // the history as last read
    std::unordered_map<std::uint64_t, key_stats> keys_;
    std::unordered_map<std::uint64_t, std::int32_t> caps_;
    std::uint64_t last_key_ = no_key;
    std::int32_t last_length_ = 0;
    std::int32_t last_cap_ = 0; // the drafted key's cap when it drafted
};

} // namespace qk::spec
