// The harness of the allocation-failure tests: every_allocation_failing() runs a call with its n-th
// allocation failing, n = 1, 2, ..., through the global operator new that
// test_allocation_failure.cpp replaces (this header is for that executable's sources only).
#pragma once

#include <doctest/doctest.h>

#include <kernels/error.hpp>

#include <atomic>
#include <exception>
#include <string>
#include <typeinfo>

namespace qk_allocation {

// The count of allocations left before the failing one: 0 when disarmed. Atomic because a pool's
// threads allocate too.
inline std::atomic<long> allocations_left{0};
inline std::atomic<bool> failed_one{false};

// Runs act() with the n-th allocation failing for n = 1, 2, ... until act() allocates fewer than n
// times, each run after prepare() (allocations not counted) and followed by check(threw).
// Returns the number of allocations act() makes when none fails.
template <class Prepare, class Act, class Check>
long every_allocation_failing(const char* call, Prepare prepare, Act act, Check check)
{
    for (long n = 1;; ++n) {
        prepare();
        bool threw = false;
        std::string message;
        allocations_left = n;
        failed_one = false;
        try {
            act();
        } catch (const qk::error& e) {
            allocations_left = 0;
            threw = true;
            message = e.what();
        } catch (const std::exception& e) {
            allocations_left = 0;
            FAIL(std::string(call), ": allocation ", n, " failing escaped as ", std::string(typeid(e).name()), " (", std::string(e.what()),
                 "), not qk::error");
        }
        allocations_left = 0;
        const bool failed = failed_one;
        INFO(std::string(call), ", allocation ", n, " failing: ", message);
        if (threw) {
            // A qk::error without a failed allocation is another refusal: the inputs here are valid.
            CHECK(failed);
            CHECK(message.find("out of memory") != std::string::npos);
            CHECK(message.starts_with("qk::"));
        }
        check(threw);
        if (!failed) {
            return n - 1;
        }
    }
}

} // namespace qk_allocation
