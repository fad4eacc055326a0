// qk::spec::ngram_index: exactly ngram_simple's drafts (see ngram_simple.hpp for the definition),
// in O(1) amortized time per call however long the history: every n-gram start position is
// indexed by its hash to the most recent start with the same hash (an open-addressing table), and
// each position links to the previous one (so dropping the newest starts restores the older
// ones). It reads a token_history: each call drops the starts whose n-gram touches a position
// written since the previous call (a cut, or a cut regrown with other tokens) and indexes the new
// ones, so an edit at the end costs what it changed; begin() forgets everything and indexes a
// history afresh. Memory running out in a call is a qk::error that leaves the drafter as it was.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "ngram_config.hpp"
#include "token_history.hpp"

namespace qk::spec {

class ngram_index {
public:
    // size_ngram or size_mgram below 1: qk::error.
    explicit ngram_index(ngram_config config) : config_(config) { detail::check_config("ngram_index", config); }

    // A history longer than 2^31 - 1 tokens: qk::error, before anything changes. Memory running
    // out: qk::error, and the drafter is as it was (its index, indexed() and counter): all it
    // needs is allocated before anything changes.
    [[nodiscard]] std::vector<std::int32_t> draft(const token_history& history, std::int32_t sampled)
    try {
        const plan p = prepare(history, false);
        std::int32_t counter = counter_;
        const auto n = static_cast<std::size_t>(config_.size_ngram);
        const auto m = static_cast<std::size_t>(config_.size_mgram);
        const std::size_t length = history.size();
        const bool attempt = detail::due(counter, config_.check_rate) && length > n + m + 1;
        std::vector<std::int32_t> result;
        if (attempt) {
            result.reserve(std::min(m, length - n - 1)); // the longest draft (its match starts at 1 or later)
        }
        // Nothing below allocates.
        follow(history, p);
        counter_ = counter;
        if (!attempt) {
            return result;
        }
        const std::span<const std::int32_t> tokens = history.tokens();
        const std::int32_t* tail = tokens.data() + (length - n + 1);
        std::uint64_t h = hash_start;
        for (std::size_t i = 0; i + 1 < n; ++i) {
            h = mix(h, tail[i]);
        }
        h = mix(h, sampled);
        // Positions sharing the hash, most recent first; a different n-gram with the same hash
        // is passed over.
        for (std::int32_t j = slots_[find_slot(h)]; j >= 1; j = previous_[static_cast<std::size_t>(j)]) {
            if (detail::matches_pattern(tokens, static_cast<std::size_t>(j), n, sampled)) {
                detail::continuation(tokens, static_cast<std::size_t>(j), n, m, result);
                break;
            }
        }
        return result;
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::ngram_index::draft");
    }

    // Forgets everything read so far and indexes `history` afresh (the check-rate counter carries
    // on). Never needed for correctness: it moves the cost of indexing out of the next draft().
    // Errors as draft()'s, with the same guarantee.
    void begin(const token_history& history)
    try {
        follow(history, prepare(history, true));
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::ngram_index::begin");
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

    // What follow() will do: index the starts [1, wanted), keeping those below `valid`.
    struct plan {
        std::size_t wanted = 1;
        std::size_t valid = 1;
        bool forget = false; // start from nothing
    };

    // Checks the history and makes room for everything follow() will add (positions and table
    // slots); changes nothing else, so that it may fail.
    plan prepare(const token_history& history, bool fresh)
    {
        check_length(history);
        const auto n = static_cast<std::size_t>(config_.size_ngram);
        plan p;
        p.wanted = history.size() > n + 1 ? history.size() - n : 1; // starts [1, wanted)
        // Start j hashed positions j .. j + n - 1: it stays only if all of them are unchanged.
        const std::size_t unchanged = fresh ? 0 : history.unchanged_since(mark_);
        p.valid = std::min(p.wanted, unchanged >= n ? unchanged - n + 1 : 1);
        // Nothing to keep: cheaper than dropping the starts one by one.
        p.forget = fresh || (p.valid <= 1 && hashes_.size() > 1);
        detail::reserve_for(hashes_, p.wanted);
        detail::reserve_for(previous_, p.wanted);
        // At most wanted - 1 hashes, so the table stays at most half full.
        const std::size_t slots = std::max<std::size_t>(16, std::bit_ceil(2 * p.wanted));
        if (slots_.size() < slots) {
            std::vector<std::int32_t> grown(slots, 0);
            for (const std::int32_t j : slots_) {
                if (j != 0) {
                    grown[free_slot(grown, hashes_[static_cast<std::size_t>(j)])] = j;
                }
            }
            slots_.swap(grown);
        }
        return p;
    }

    // Brings the index to the starts 1 .. L - n - 1 of a history of length L: the n-grams that end
    // before its last token, the only ones ngram_simple searches. Room made by prepare(), it
    // allocates nothing.
    void follow(const token_history& history, const plan& p) noexcept
    {
        const auto n = static_cast<std::size_t>(config_.size_ngram);
        if (p.forget) {
            std::fill(slots_.begin(), slots_.end(), 0);
            previous_.clear();
            hashes_.clear();
        }
        if (hashes_.empty()) {
            hashes_.push_back(0); // position 0 is never indexed
            previous_.push_back(-1);
        }
        while (hashes_.size() > p.valid) { // cut, or written over: drop the newest starts
            const std::size_t j = hashes_.size() - 1;
            const std::size_t slot = find_slot(hashes_[j]); // j, the newest start, heads its hash
            if (previous_[j] >= 1) {
                slots_[slot] = previous_[j];
            } else {
                erase_slot(slot);
            }
            hashes_.pop_back();
            previous_.pop_back();
        }
        const std::span<const std::int32_t> tokens = history.tokens();
        while (hashes_.size() < p.wanted) {
            const std::size_t j = hashes_.size();
            std::uint64_t h = hash_start;
            for (std::size_t i = 0; i < n; ++i) {
                h = mix(h, tokens[j + i]);
            }
            const std::size_t slot = find_slot(h);
            previous_.push_back(slots_[slot] != 0 ? slots_[slot] : -1);
            hashes_.push_back(h);
            slots_[slot] = static_cast<std::int32_t>(j);
        }
        mark_ = history.seen();
    }

    // ---- hash -> most recent start: an open-addressing table (linear probing) of starts, each
    // start's hash read from hashes_; 0 is an empty slot (start 0 is never indexed) --------------

    [[nodiscard]] static std::size_t home(std::uint64_t h, std::size_t mask) noexcept
    {
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
        return static_cast<std::size_t>(h) & mask;
    }
    // The slot of hash h, or the empty slot where it would go.
    [[nodiscard]] std::size_t find_slot(std::uint64_t h) const noexcept
    {
        const std::size_t mask = slots_.size() - 1;
        std::size_t i = home(h, mask);
        while (slots_[i] != 0 && hashes_[static_cast<std::size_t>(slots_[i])] != h) {
            i = (i + 1) & mask;
        }
        return i;
    }
    [[nodiscard]] static std::size_t free_slot(const std::vector<std::int32_t>& slots, std::uint64_t h) noexcept
    {
        const std::size_t mask = slots.size() - 1;
        std::size_t i = home(h, mask);
        while (slots[i] != 0) {
            i = (i + 1) & mask;
        }
        return i;
    }
    // Empties a slot, moving back the entries after it that probed past it.
    void erase_slot(std::size_t hole) noexcept
    {
        const std::size_t mask = slots_.size() - 1;
        for (std::size_t next = (hole + 1) & mask; slots_[next] != 0; next = (next + 1) & mask) {
            const std::size_t wanted = home(hashes_[static_cast<std::size_t>(slots_[next])], mask);
            // The entry at `next` may fill the hole unless its home lies cyclically in (hole, next].
            const bool stays = hole <= next ? (hole < wanted && wanted <= next) : (hole < wanted || wanted <= next);
            if (!stays) {
                slots_[hole] = slots_[next];
                hole = next;
            }
        }
        slots_[hole] = 0;
    }

    ngram_config config_;
    std::int32_t counter_ = 0;
    std::vector<std::int32_t> slots_;    // hash -> most recent start (a power of two of slots, at most half used)
    std::vector<std::int32_t> previous_; // per start: the previous start with its hash, or -1
    std::vector<std::uint64_t> hashes_;  // per start: its n-gram's hash
    token_history::mark mark_;           // the history as last read
};

} // namespace qk::spec
