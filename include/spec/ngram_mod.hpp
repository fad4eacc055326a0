// qk::spec::ngram_mod: llama.cpp's `ngram-mod` drafter (PR 19164). The token that followed each
// n-gram is stored in a fixed-size pool under the n-gram's hash; a draft walks the pool, hashing
// the last n tokens and appending the token it finds, until max_draft tokens or an empty entry.
// Constant memory and time per token; one ngram_pool can serve many sequences (llama.cpp's server
// shares one across all its slots), each read by its own ngram_mod.
//
// Definition, identical to llama.cpp's common_ngram_mod and its speculative state:
//  - the hash of n tokens t_0 .. t_{n-1} is h = 0, then h = h * 6364136223846793005 + t_i for each
//    i, modulo 2^64 (a token taken as a 64-bit unsigned value, so -1 is 2^64 - 1); its entry is
//    h mod size(). An entry holds one token, -1 meaning empty; adding an n-gram writes the token
//    that followed it, overwriting whatever another n-gram with the same entry left there;
//  - the drafter keeps `added`: the n-grams starting below it are in the pool. A call draft(history,
//    sampled) with L = history.size() < n drafts nothing; otherwise, when added + add_chunk < L,
//    the n-grams starting at added .. L - n - 1 (history[i .. i + n), followed by history[i + n])
//    are added and added = L - n (so the pool lags the history by up to add_chunk tokens);
//  - the walk starts from the key made of the last n - 1 history tokens and `sampled`; for
//    i = 0 .. max_draft - 1 the key's entry is read: empty, the walk stops, and the call drafts
//    nothing when i < min_draft; otherwise the token is drafted and becomes the key's last token;
//  - accept(n_accepted) after a draft of D tokens (D as drafted, even if the caller verified fewer):
//    n_accepted / D below low_acceptance is a low; after low_streak lows in a row the pool is
//    emptied (for every drafter sharing it) and this drafter adds its whole history again at its
//    next add (added = 0). The defaults 0.25 and 5 are those of llama.cpp's per-sequence state (its
//    first version used 0.5 and 3, and kept i_last);
//  - begin(history), optional, for a new prompt: adds all of its n-grams at once, added = L - n,
//    then empties the pool when more than reset_occupancy of its entries are used.
// Deliberate differences:
//  - llama.cpp sees only the history's length; this drafter reads a token_history and, when the
//    history changed from position `keep` since its previous call (a cut, or a cut regrown),
//    lowers `added` to keep - n, so the n-grams of a regrown part are added too (llama.cpp skips
//    them, or never adds again until the history outgrows its old length). What was added stays:
//    the pool is content-addressed, and a stale entry is one more collision, as in llama.cpp;
//  - the hash is rolled (the oldest token's term taken out, the new one added): the same value as
//    llama.cpp's loop, in O(1) per token instead of O(n);
//  - used() counts the entries that are not empty exactly (llama.cpp counts a write of token -1
//    into an empty entry as a use). Token ids are meant to be >= 0: -1 reads as empty, as there.
// Thread safety: a pool is not synchronized. Its const members may run concurrently; add, reset
// and every ngram_mod::draft, accept and begin on drafters sharing it need one thread at a time
// (llama.cpp's server calls them all from its one loop), or a lock held by the caller.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "../kernels/error.hpp"
#include "token_history.hpp"

namespace qk::spec {

class ngram_pool {
public:
    static constexpr std::int32_t empty = -1;
    static constexpr std::size_t default_size = std::size_t{4} * 1024 * 1024; // llama.cpp's: 16 MiB
    static constexpr std::uint64_t multiplier = 6364136223846793005ull;

    // size_ngram (n) below 1 or a size of 0 entries: qk::error; so is memory running out for
    // the entries (4 bytes each).
    explicit ngram_pool(std::int32_t size_ngram, std::size_t size = default_size)
    try {
        if (size_ngram < 1 || size == 0) {
            qk::detail::fail("qk::spec::ngram_pool: size_ngram=", size_ngram, ", size=", size,
                             ": the n-gram needs at least 1 token and the pool at least 1 entry");
        }
        n_ = static_cast<std::size_t>(size_ngram);
        entries_.assign(size, empty);
        // The term of the oldest of n tokens is that token times multiplier^(n - 1).
        oldest_factor_ = 1;
        for (std::size_t i = 1; i < n_; ++i) {
            oldest_factor_ *= multiplier;
        }
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::ngram_pool::ngram_pool");
    }

    // llama.cpp's hash of the tokens of `key` (any number of them).
    [[nodiscard]] static std::uint64_t hash(std::span<const std::int32_t> key) noexcept
    {
        std::uint64_t h = 0;
        for (const std::int32_t token : key) {
            h = h * multiplier + static_cast<std::uint64_t>(token);
        }
        return h;
    }
    // The hash of the n tokens after `leaving`, from h, the hash of `leaving` and the n - 1 after it.
    [[nodiscard]] std::uint64_t roll(std::uint64_t h, std::int32_t leaving, std::int32_t entering) const noexcept
    {
        return (h - static_cast<std::uint64_t>(leaving) * oldest_factor_) * multiplier + static_cast<std::uint64_t>(entering);
    }

    // The entry of an n-token key; another number of tokens: qk::error.
    [[nodiscard]] std::size_t index(std::span<const std::int32_t> key) const
    {
        check_key("index", key.size(), n_);
        return index_of(hash(key));
    }
    // The token stored for an n-token key (empty: -1).
    [[nodiscard]] std::int32_t get(std::span<const std::int32_t> key) const
    {
        check_key("get", key.size(), n_);
        return at_hash(hash(key));
    }
    // Adds an n-gram and the token that followed it: n + 1 tokens.
    void add(std::span<const std::int32_t> ngram_and_next)
    {
        check_key("add", ngram_and_next.size(), n_ + 1);
        store(hash(ngram_and_next.first(n_)), ngram_and_next[n_]);
    }

    [[nodiscard]] std::int32_t at_hash(std::uint64_t h) const noexcept { return entries_[index_of(h)]; }
    void store(std::uint64_t h, std::int32_t token) noexcept
    {
        std::int32_t& entry = entries_[index_of(h)];
        used_ += static_cast<std::size_t>(entry == empty && token != empty);
        used_ -= static_cast<std::size_t>(entry != empty && token == empty);
        entry = token;
    }

    // Empties every entry.
    void reset() noexcept
    {
        std::fill(entries_.begin(), entries_.end(), empty);
        used_ = 0;
    }

    [[nodiscard]] std::int32_t size_ngram() const noexcept { return static_cast<std::int32_t>(n_); }
    [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
    [[nodiscard]] std::size_t size_bytes() const noexcept { return entries_.size() * sizeof(std::int32_t); }
    [[nodiscard]] std::size_t used() const noexcept { return used_; }
    [[nodiscard]] double occupancy() const noexcept { return double(used_) / double(entries_.size()); }
    [[nodiscard]] std::span<const std::int32_t> entries() const noexcept { return entries_; }

private:
    static void check_key(const char* what, std::size_t given, std::size_t wanted)
    {
        if (given != wanted) {
            qk::detail::fail("qk::spec::ngram_pool::", what, ": ", given, " tokens given, ", wanted, " expected");
        }
    }
    [[nodiscard]] std::size_t index_of(std::uint64_t h) const noexcept { return static_cast<std::size_t>(h % entries_.size()); }

    std::size_t n_ = 0;
    std::vector<std::int32_t> entries_;
    std::size_t used_ = 0;
    std::uint64_t oldest_factor_ = 1;
};

// llama.cpp's defaults (common_params_speculative_ngram_mod and its state).
struct ngram_mod_config {
    std::int32_t size_ngram = 24;   // n: tokens hashed (llama.cpp's n_match)
    std::int32_t min_draft = 48;    // a walk that stops before this many tokens drafts nothing (n_min)
    std::int32_t max_draft = 64;    // the most tokens a walk drafts (n_max)
    std::int32_t add_chunk = 32;    // new n-grams are added once more than this many history tokens are unread
    double low_acceptance = 0.25;   // an accepted fraction of a draft below this is a low
    std::int32_t low_streak = 5;    // this many lows in a row empty the pool (0: never)
    double reset_occupancy = 0.25;  // begin() empties a pool that has more of its entries used
    std::size_t pool_size = ngram_pool::default_size; // entries of the pool a drafter makes for itself
};

class ngram_mod {
public:
    // A drafter with a pool of its own (config.pool_size entries). Bad config, or memory running
    // out for the pool: qk::error.
    explicit ngram_mod(ngram_mod_config config = {})
    try : config_(check(config)) {
        pool_ = std::make_shared<ngram_pool>(config_.size_ngram, config_.pool_size);
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::ngram_mod::ngram_mod");
    }
    // A drafter reading and writing a shared pool (config.pool_size is not used). A null pool, one
    // hashing another n than config.size_ngram, or a bad config: qk::error. A copy of a drafter
    // shares its pool.
    ngram_mod(ngram_mod_config config, std::shared_ptr<ngram_pool> pool) : config_(check(config)), pool_(std::move(pool))
    {
        if (!pool_ || pool_->size_ngram() != config_.size_ngram) {
            qk::detail::fail("qk::spec::ngram_mod: pool of size_ngram=", pool_ ? pool_->size_ngram() : 0,
                             " for config.size_ngram=", config_.size_ngram, ": a pool hashing the same n is needed");
        }
    }

    // Memory running out (the draft's room, allocated first): qk::error, and the drafter and its
    // pool are as they were.
    [[nodiscard]] std::vector<std::int32_t> draft(const token_history& history, std::int32_t sampled)
    try {
        const auto n = static_cast<std::size_t>(config_.size_ngram);
        const std::span<const std::int32_t> tokens = history.tokens();
        const std::size_t length = tokens.size();
        std::vector<std::int32_t> result;
        if (length >= n) {
            result.reserve(static_cast<std::size_t>(config_.max_draft)); // the one allocation, before anything changes
        }
        last_length_ = 0;
        follow(history);
        if (length < n) {
            return result;
        }
        if (added_ + static_cast<std::size_t>(config_.add_chunk) < length) {
            add(tokens, added_, length - n);
            added_ = length - n;
        }
        // The key at step i is the walk's tokens i .. i + n - 1: the history's last n - 1, then
        // `sampled`, then the tokens drafted so far.
        const auto walked = [&](std::size_t i) {
            return i + 1 < n ? tokens[length - n + 1 + i] : (i + 1 == n ? sampled : result[i - n]);
        };
        std::uint64_t h = ngram_pool::hash(tokens.subspan(length - n + 1));
        h = h * ngram_pool::multiplier + static_cast<std::uint64_t>(sampled);
        const auto max_draft = static_cast<std::size_t>(config_.max_draft);
        for (std::size_t i = 0; i < max_draft; ++i) {
            const std::int32_t token = pool_->at_hash(h);
            if (token == ngram_pool::empty) {
                if (i < static_cast<std::size_t>(config_.min_draft)) {
                    result.clear();
                    return result;
                }
                break;
            }
            result.push_back(token); // within the room reserved
            h = pool_->roll(h, walked(i), token);
        }
        last_length_ = static_cast<std::int32_t>(result.size());
        return result;
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::ngram_mod::draft");
    }

    // Feedback on the last draft: how many of its tokens the target accepted (negative: qk::error).
    void accept(std::int32_t n_accepted)
    {
        if (n_accepted < 0) {
            qk::detail::fail("qk::spec::ngram_mod::accept: n_accepted=", n_accepted, ": cannot be negative");
        }
        if (last_length_ == 0) {
            return;
        }
        if (double(n_accepted) / double(last_length_) < config_.low_acceptance) {
            ++lows_;
            if (config_.low_streak > 0 && lows_ >= config_.low_streak) {
                pool_->reset();
                lows_ = 0;
                added_ = 0;
            }
        } else {
            lows_ = 0;
        }
    }

    // A new prompt: adds all of its n-grams now, then empties the pool if it is too full (see the
    // header). Never needed for correctness: draft() reads whatever it has not read.
    void begin(const token_history& history)
    {
        added_ = 0;
        last_length_ = 0;
        mark_ = history.seen();
        const auto n = static_cast<std::size_t>(config_.size_ngram);
        if (history.size() < n) {
            return;
        }
        add(history.tokens(), 0, history.size() - n);
        added_ = history.size() - n;
        if (pool_->occupancy() > config_.reset_occupancy) {
            pool_->reset();
        }
    }

    [[nodiscard]] const ngram_mod_config& config() const noexcept { return config_; }
    [[nodiscard]] const ngram_pool& pool() const noexcept { return *pool_; }
    [[nodiscard]] const std::shared_ptr<ngram_pool>& shared_pool() const noexcept { return pool_; }
    // The n-grams starting below this history position are in the pool (llama.cpp's i_last).
    [[nodiscard]] std::size_t added() const noexcept { return added_; }
    // The length of the last draft (0 after none), the one accept() judges.
    [[nodiscard]] std::int32_t last_draft_length() const noexcept { return last_length_; }

private:
    static const ngram_mod_config& check(const ngram_mod_config& c)
    {
        // Written so that NaN fails too.
        const bool fractions = c.low_acceptance >= 0 && c.low_acceptance <= 1 && c.reset_occupancy >= 0 && std::isfinite(c.reset_occupancy);
        if (c.size_ngram < 1 || c.max_draft < 1 || c.min_draft < 0 || c.min_draft > c.max_draft || c.add_chunk < 0 ||
            c.low_streak < 0 || !fractions || c.pool_size == 0) {
            qk::detail::fail("qk::spec::ngram_mod: size_ngram=", c.size_ngram, ", min_draft=", c.min_draft, ", max_draft=", c.max_draft,
                             ", add_chunk=", c.add_chunk, ", low_acceptance=", c.low_acceptance, ", low_streak=", c.low_streak,
                             ", reset_occupancy=", c.reset_occupancy, ", pool_size=", c.pool_size,
                             ": needs size_ngram >= 1, 0 <= min_draft <= max_draft, max_draft >= 1, add_chunk >= 0, "
                             "low_acceptance in [0, 1], low_streak >= 0, reset_occupancy >= 0 and pool_size >= 1");
        }
        return c;
    }

    // An n-gram read positions i .. i + n: those starting at keep - n or later read a position
    // written since the previous call, and are added again when the history reaches them.
    void follow(const token_history& history) noexcept
    {
        const auto n = static_cast<std::size_t>(config_.size_ngram);
        const std::size_t keep = history.unchanged_since(mark_);
        added_ = std::min(added_, keep >= n ? keep - n : 0);
        mark_ = history.seen();
    }

    // Adds the n-grams starting at from .. to - 1, rolling the hash along.
    void add(std::span<const std::int32_t> tokens, std::size_t from, std::size_t to) noexcept
    {
        if (from >= to) {
            return;
        }
        const auto n = static_cast<std::size_t>(config_.size_ngram);
        std::uint64_t h = ngram_pool::hash(tokens.subspan(from, n));
        for (std::size_t i = from;; ++i) {
            pool_->store(h, tokens[i + n]);
            if (i + 1 == to) {
                break;
            }
            h = pool_->roll(h, tokens[i], tokens[i + n]);
        }
    }

    ngram_mod_config config_;
    std::shared_ptr<ngram_pool> pool_;
    std::size_t added_ = 0;        // n-grams starting below are in the pool
    std::int32_t last_length_ = 0; // of the last draft
    std::int32_t lows_ = 0;        // lows in a row
    token_history::mark mark_;     // the history as last read
};

} // namespace qk::spec
