// qk::error, the one exception type qkern throws: bad arguments are reported at the public
// boundary, before any output is written, with a message naming the argument and its values.
// Running out of memory inside a public call is reported the same way (rethrow_as_error).
#pragma once

#include <new>
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

// For the catch (...) of a public entry point's function-try-block: std::bad_alloc (memory ran
// out, in the caller's thread or a pool's) and std::length_error (a container asked for more than
// it can hold) become the call's qk::error, so that a caller handles one type for every refusal.
// Anything else, a qk::error or an exception from the caller's own callback, passes unchanged.
[[noreturn]] inline void rethrow_as_error(const char* call)
{
    try {
        throw;
    } catch (const std::bad_alloc&) {
        fail(call, ": out of memory");
    } catch (const std::length_error& e) {
        fail(call, ": out of memory (", e.what(), ")");
    }
}

} // namespace detail
} // namespace qk
