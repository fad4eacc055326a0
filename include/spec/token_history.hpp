// qk::spec::token_history: the token sequence the drafters read, with its edits made visible.
// Every token written gets a stamp larger than any before it in the same history, so stamps
// increase along the sequence; a drafter that kept the mark of what it last read finds the first
// position written since then by binary search (O(log n)), however the history was cut and
// regrown between calls. The stateful drafters take a token_history, not a bare span, so that an
// edit cannot go unseen. An edit for which memory runs out is a qk::error that leaves the history
// as it was.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "../kernels/error.hpp"

namespace qk::spec {

class token_history {
public:
    // What a reader saw: which history, how long it was and the stamp of its last token.
    struct mark {
        std::uint64_t history = 0; // 0: nothing seen
        std::size_t length = 0;
        std::uint64_t last = 0;
    };

    token_history() = default;
    // Memory running out: qk::error.
    explicit token_history(std::span<const std::int32_t> tokens)
    try {
        replace(0, tokens);
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::token_history::token_history");
    }

    // A copy is a new history (a reader of the original re-reads it); a moved-from one is empty.
    token_history(const token_history& other) : tokens_(other.tokens_), stamps_(other.stamps_), stamp_(other.stamp_) {}
    token_history& operator=(const token_history& other)
    {
        if (this != &other) {
            tokens_ = other.tokens_;
            stamps_ = other.stamps_;
            stamp_ = other.stamp_;
            id_ = next_id();
        }
        return *this;
    }
    token_history(token_history&& other) noexcept
        : tokens_(std::move(other.tokens_)), stamps_(std::move(other.stamps_)), stamp_(other.stamp_), id_(other.id_)
    {
        other.reset();
    }
    token_history& operator=(token_history&& other) noexcept
    {
        if (this != &other) {
            tokens_ = std::move(other.tokens_);
            stamps_ = std::move(other.stamps_);
            stamp_ = other.stamp_;
            id_ = other.id_;
            other.reset();
        }
        return *this;
    }
    ~token_history() = default;

    // The edits below that add tokens may take them from this history itself (a span of
    // tokens()). Memory running out: qk::error, and the history is as it was (tokens, stamps,
    // marks), so that a caller can go on.
    void push_back(std::int32_t token)
    try {
        replace(tokens_.size(), std::span<const std::int32_t>(&token, 1));
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::token_history::push_back");
    }
    void append(std::span<const std::int32_t> tokens)
    try {
        replace(tokens_.size(), tokens);
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::token_history::append");
    }
    // Keeps the first `length` tokens (a rejected draft, a regeneration); length above size():
    // qk::error. Allocates nothing.
    void cut(std::size_t length)
    {
        if (length > tokens_.size()) {
            qk::detail::fail("qk::spec::token_history::cut: length=", length, " exceeds the history's ", tokens_.size(), " tokens");
        }
        // erase, not resize: it cannot grow, which g++ 12 -O2 otherwise warns resize might do
        // (stringop-overflow) where it cannot see the two vectors' sizes agree.
        tokens_.erase(tokens_.begin() + static_cast<std::ptrdiff_t>(length), tokens_.end());
        stamps_.erase(stamps_.begin() + static_cast<std::ptrdiff_t>(length), stamps_.end());
    }
    // Replaces every token: to a reader, all of it is new.
    void assign(std::span<const std::int32_t> tokens)
    try {
        replace(0, tokens);
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::token_history::assign");
    }
    void clear() noexcept
    {
        tokens_.clear();
        stamps_.clear();
    }

    [[nodiscard]] std::span<const std::int32_t> tokens() const noexcept { return tokens_; }
    [[nodiscard]] const std::int32_t* data() const noexcept { return tokens_.data(); }
    [[nodiscard]] std::size_t size() const noexcept { return tokens_.size(); }
    [[nodiscard]] bool empty() const noexcept { return tokens_.empty(); }
    [[nodiscard]] std::int32_t operator[](std::size_t i) const noexcept { return tokens_[i]; }

    [[nodiscard]] mark seen() const noexcept { return {id_, tokens_.size(), stamps_.empty() ? 0 : stamps_.back()}; }

    // The longest prefix that holds the same tokens as when `m` was taken: positions written since
    // have larger stamps than m.last, and stamps increase along the sequence. A mark of another
    // history (or none) gives 0.
    [[nodiscard]] std::size_t unchanged_since(const mark& m) const noexcept
    {
        if (m.history != id_) {
            return 0;
        }
        const std::size_t limit = std::min(m.length, stamps_.size());
        if (limit == 0) {
            return 0;
        }
        if (stamps_[limit - 1] <= m.last) { // the usual case: only appended to, or only cut
            return limit;
        }
        const auto end = stamps_.begin() + static_cast<std::ptrdiff_t>(limit);
        return static_cast<std::size_t>(
            std::partition_point(stamps_.begin(), end, [&](std::uint64_t s) { return s <= m.last; }) - stamps_.begin());
    }

private:
    // Keeps the first `keep` tokens and writes `tokens` after them, with new stamps. Everything
    // that can fail (the growth of both vectors, geometric so that pushing tokens one by one stays
    // amortized O(1)) comes before anything changes. `tokens` may lie in tokens_: grown, the new
    // vectors are filled while the old ones are still alive; in place, memmove copes with overlap.
    void replace(std::size_t keep, std::span<const std::int32_t> tokens)
    {
        const std::size_t length = keep + tokens.size();
        if (length > tokens_.capacity() || length > stamps_.capacity()) {
            const std::size_t most = std::min(tokens_.max_size(), stamps_.max_size());
            const std::size_t capacity = length > most / 2 ? length : std::max(length, 2 * tokens_.size());
            std::vector<std::int32_t> grown_tokens;
            grown_tokens.reserve(capacity);
            std::vector<std::uint64_t> grown_stamps;
            grown_stamps.reserve(capacity);
            // Nothing below allocates.
            grown_tokens.insert(grown_tokens.end(), tokens_.begin(), tokens_.begin() + static_cast<std::ptrdiff_t>(keep));
            grown_tokens.insert(grown_tokens.end(), tokens.begin(), tokens.end());
            grown_stamps.insert(grown_stamps.end(), stamps_.begin(), stamps_.begin() + static_cast<std::ptrdiff_t>(keep));
            stamp_new(grown_stamps, tokens.size());
            tokens_.swap(grown_tokens);
            stamps_.swap(grown_stamps);
            return;
        }
        // Within capacity: nothing allocates, and `tokens` (if it lies in tokens_) stays where it is.
        tokens_.resize(std::max(tokens_.size(), length));
        if (!tokens.empty()) {
            std::memmove(tokens_.data() + keep, tokens.data(), tokens.size() * sizeof(std::int32_t));
        }
        tokens_.resize(length);
        stamps_.resize(keep);
        stamp_new(stamps_, tokens.size());
    }
    void stamp_new(std::vector<std::uint64_t>& stamps, std::size_t count) noexcept
    {
        for (std::size_t i = 0; i < count; ++i) {
            stamps.push_back(++stamp_); // within capacity
        }
    }

    static std::uint64_t next_id() noexcept
    {
        static std::atomic<std::uint64_t> ids{0};
        return ids.fetch_add(1, std::memory_order_relaxed) + 1;
    }
    void reset() noexcept
    {
        tokens_.clear();
        stamps_.clear();
        id_ = next_id();
    }

    std::vector<std::int32_t> tokens_;
    std::vector<std::uint64_t> stamps_; // per position: when it was written (strictly increasing)
    std::uint64_t stamp_ = 0;
    std::uint64_t id_ = next_id();
};

} // namespace qk::spec
