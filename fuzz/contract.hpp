// What the targets in fuzz/ share: every call is checked against its contract, and a broken one is
// reported (the target, the call under way, the input's first bytes) and abort()ed, which
// libFuzzer reports like a crash and saves the input of. A target names itself (target_name) and
// keeps current_input and current_call up to date as it goes.
#pragma once

#include <kernels/error.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>

namespace qk_fuzz {

inline const char* target_name = "";
inline std::span<const std::uint8_t> current_input;
inline const char* current_call = "";

[[noreturn]] inline void report(const char* what, const char* detail = "")
{
    std::fprintf(stderr, "%s: %s: %s%s%s\ninput (%zu bytes):", target_name, current_call, what, detail[0] != '\0' ? ": " : "", detail,
                 current_input.size());
    for (std::size_t i = 0; i < current_input.size() && i < 96; ++i) {
        std::fprintf(stderr, " %02x", current_input[i]);
    }
    std::fprintf(stderr, "\n");
    std::abort();
}

inline void require(bool ok, const char* what)
{
    if (!ok) {
        report(what);
    }
}

// f() under the contract: true when it returned, false on qk::error, a finding on anything else.
template <class F>
bool attempt(F&& f)
{
    try {
        f();
        return true;
    } catch (const qk::error&) {
        return false;
    } catch (const std::exception& e) {
        report("threw an exception other than qk::error", e.what());
    } catch (...) {
        report("threw something that is not a std::exception");
    }
}

} // namespace qk_fuzz
