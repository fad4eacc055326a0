// qk::error, the one exception type qkern throws: bad arguments are reported at the public
// boundary, before any output is written, with a message naming the argument and its values.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace qk {

class error : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

namespace detail {

// Builds a message from pieces with operator<<, so call sites read like a sentence.
template <class... Parts>
[[nodiscard]] std::string message(Parts&&... parts)
{
    std::ostringstream out;
    out.precision(9);
    (out << ... << std::forward<Parts>(parts));
    return out.str();
}

template <class... Parts>
[[noreturn]] void fail(Parts&&... parts)
{
    throw error(message(std::forward<Parts>(parts)...));
}

} // namespace detail
} // namespace qk
