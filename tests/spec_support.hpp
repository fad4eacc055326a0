// Helpers the drafter suites share (test_spec_drafters.cpp, test_spec_mod.cpp,
// test_spec_suffix.cpp): a printable wrapper for drafts, the check that a drafter takes a
// token_history rather than a plain span, and a named token sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <vector>

namespace qk_test::spec {

// doctest cannot print a std::vector: wrapped, a failed comparison shows both drafts.
struct shown {
    std::vector<std::int32_t> v;
    bool operator==(const shown&) const = default;
};

inline std::ostream& operator<<(std::ostream& out, const shown& s)
{
    out << '[';
    for (std::size_t i = 0; i < s.v.size(); ++i) {
        out << (i ? "," : "") << s.v[i];
    }
    return out << ']';
}

// Whether Drafter drafts from a plain span of tokens (only ngram_simple does; the others need a
// token_history, whose cuts and appends they follow).
template <class Drafter>
concept drafts_from_span = requires(Drafter& drafter, std::span<const std::int32_t> history) { drafter.draft(history, std::int32_t{}); };

struct named_sequence {
    std::string name;
    std::vector<std::int32_t> values;
};

} // namespace qk_test::spec
