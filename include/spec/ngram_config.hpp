// The configuration every n-gram drafter takes: the n-gram that must match (size_ngram tokens,
// the last n - 1 of the history and the token just sampled), the most tokens a draft proposes
// (size_mgram), and how often a draft is attempted (every check_rate calls).
#pragma once

#include <cstdint>

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

} // namespace detail
} // namespace qk::spec
