// The window of the last `last_n` accepted tokens that the history-based samplers (penalties,
// DRY) keep: a ring once full, unbounded for last_n = -1, nothing for last_n = 0.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace qk::sampling::detail {

class recent_tokens {
public:
    // Nothing is reserved: the window grows with the tokens pushed, so a window as large as
    // last_n = 2^31 - 1 costs only what it holds (reserving it took 8 GiB at parse time).
    explicit recent_tokens(std::int32_t last_n) : last_n_(last_n) {}

    // Makes room for one more token, so that the push() that follows allocates nothing: the
    // samplers call it before changing anything, so that running out of memory changes nothing.
    void reserve_one()
    {
        if (last_n_ != 0 && ring_.size() == ring_.capacity() && (last_n_ < 0 || ring_.size() < static_cast<std::size_t>(last_n_))) {
            std::size_t grown = std::max<std::size_t>(16, ring_.size() * 2);
            if (last_n_ > 0) {
                grown = std::min(grown, static_cast<std::size_t>(last_n_));
            }
            ring_.reserve(grown);
        }
    }

    // Adds a token; returns the one that fell out of a full window.
    std::optional<std::int32_t> push(std::int32_t token)
    {
        if (last_n_ == 0) {
            return std::nullopt;
        }
        if (last_n_ > 0 && ring_.size() == static_cast<std::size_t>(last_n_)) {
            const std::int32_t old = ring_[oldest_];
            ring_[oldest_] = token;
            oldest_ = (oldest_ + 1) % ring_.size();
            return old;
        }
        ring_.push_back(token);
        return std::nullopt;
    }

    [[nodiscard]] std::size_t size() const noexcept { return ring_.size(); }
    // The i-th token of the window, oldest first.
    [[nodiscard]] std::int32_t operator[](std::size_t i) const noexcept { return ring_[(oldest_ + i) % ring_.size()]; }

    void clear() noexcept
    {
        ring_.clear();
        oldest_ = 0;
    }

private:
    std::int32_t last_n_;
    std::vector<std::int32_t> ring_;
    std::size_t oldest_ = 0;
};

} // namespace qk::sampling::detail
