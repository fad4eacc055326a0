// The configuration every n-gram drafter takes: the n-gram that must match (size_ngram tokens,
// the last n - 1 of the history and the token just sampled), the most tokens a draft proposes
// (size_mgram), and how often a draft is attempted (every check_rate calls).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "../kernels/error.hpp"

namespace qk::spec {

struct ngram_config {
    std::int32_t size_ngram = 12; // n: tokens of the matched pattern
    std::int32_t size_mgram = 48; // m: the most tokens a draft copies
    std::int32_t check_rate = 1;  // a draft is attempted every check_rate calls (<= 1: every call)
};

namespace detail {

inline void check_config(const char* drafter, const ngram_config& c)
{
    if (c.size_ngram < 1 || c.size_mgram < 1) {
        qk::detail::fail("qk::spec::", drafter, ": size_ngram=", c.size_ngram, ", size_mgram=", c.size_mgram,
                         ": both must be at least 1");
    }
}

// The check-rate counter: true when this call may draft (every check_rate calls).
[[nodiscard]] inline bool due(std::int32_t& counter, std::int32_t check_rate) noexcept
{
    ++counter;
    if (counter < check_rate) {
        return false;
    }
    counter = 0;
    return true;
}

// Steps 4 and 5 of ngram_simple's definition once a start j is known to match: the draft is the
// c = min(m, L - (j + n)) tokens after the match, or nothing when c < n; written to `draft`
// (which allocates only beyond its capacity). Shared by ngram_simple and ngram_index, whose
// drafts must be the same.
inline void continuation(std::span<const std::int32_t> history, std::size_t j, std::size_t n, std::size_t m,
                         std::vector<std::int32_t>& draft)
{
    const std::size_t count = std::min(m, history.size() - (j + n));
    if (count < n) {
        draft.clear();
        return;
    }
    const auto first = history.begin() + static_cast<std::ptrdiff_t>(j + n);
    draft.assign(first, first + static_cast<std::ptrdiff_t>(count));
}

// Makes room for `size` elements in v, growing its capacity geometrically (so that growing by a
// few elements per call stays amortized O(1)): what the drafters do before they change anything,
// so that memory running out leaves them as they were.
template <class T>
void reserve_for(std::vector<T>& v, std::size_t size)
{
    if (size > v.capacity()) {
        v.reserve(std::max(size, std::min(2 * v.capacity(), v.max_size())));
    }
}

// Whether the n tokens at history[j] are the pattern: the history's last n - 1 and `sampled`.
[[nodiscard]] inline bool matches_pattern(std::span<const std::int32_t> history, std::size_t j, std::size_t n,
                                          std::int32_t sampled) noexcept
{
    const std::int32_t* tail = history.data() + (history.size() - n + 1);
    return history[j + n - 1] == sampled && std::equal(tail, tail + (n - 1), history.data() + j);
}

} // namespace detail
} // namespace qk::spec
