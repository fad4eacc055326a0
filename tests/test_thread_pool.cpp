// qk::backend::cpu::thread_pool: every task runs exactly once for any task count, size() tasks run
// at once on size() distinct threads (the caller among them), a task's exception is rethrown after
// every task ran, and misuse (no threads, a run from inside a run) is a qk::error, not a deadlock.
#include <doctest/doctest.h>

#include <backends/cpu/thread_pool.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using qk::backend::cpu::thread_pool;

namespace {

constexpr std::size_t threads_per_pool[] = {1, 2, 3, 7}; // 7: more threads than cores

} // namespace

TEST_CASE("thread_pool(0) is a qk::error naming the argument")
{
    CHECK_THROWS_WITH_AS(thread_pool(0), doctest::Contains("threads is 0"), qk::error);
    CHECK(thread_pool(1).size() == 1);
    CHECK(thread_pool(7).size() == 7);
}

TEST_CASE("thread_pool runs every task exactly once, for any task count, across many runs")
{
    for (std::size_t threads : threads_per_pool) {
        thread_pool pool(threads);
        for (std::size_t tasks : {0u, 1u, 2u, 3u, 7u, 100u}) {
            CAPTURE(threads);
            CAPTURE(tasks);
            std::vector<std::atomic<int>> calls(tasks);
            std::size_t wrong = 0;
            for (int repeat = 0; repeat < 50; ++repeat) {
                for (auto& c : calls) {
                    c.store(0);
                }
                pool.run(tasks, [&](std::size_t task) { calls[task].fetch_add(1, std::memory_order_relaxed); });
                wrong += static_cast<std::size_t>(std::count_if(calls.begin(), calls.end(), [](const auto& c) { return c.load() != 1; }));
            }
            CHECK(wrong == 0);
        }
    }
}

TEST_CASE("thread_pool runs size() tasks on size() distinct threads at once, the caller among them")
{
    for (std::size_t threads : threads_per_pool) {
        CAPTURE(threads);
        thread_pool pool(threads);
        std::mutex mutex;
        std::condition_variable all_arrived;
        std::size_t arrived = 0;
        bool timed_out = false;
        std::set<std::thread::id> ids;
        // Each task waits until every task has started: only size() threads running at once can
        // get past it. The timeout turns a pool that cannot into a failure instead of a hang.
        pool.run(threads, [&](std::size_t) {
            std::unique_lock lock(mutex);
            ids.insert(std::this_thread::get_id());
            if (++arrived == threads) {
                all_arrived.notify_all();
            }
            if (!all_arrived.wait_for(lock, std::chrono::seconds(20), [&] { return arrived == threads; })) {
                timed_out = true;
            }
        });
        CHECK_FALSE(timed_out);
        CHECK(ids.size() == threads);
        CHECK(ids.count(std::this_thread::get_id()) == 1);
    }
}

TEST_CASE("thread_pool rethrows a task's exception after every task ran, and stays usable")
{
    for (std::size_t threads : threads_per_pool) {
        CAPTURE(threads);
        thread_pool pool(threads);
        std::atomic<int> ran{0};
        const auto run_with_failures = [&] {
            pool.run(100, [&](std::size_t task) {
                ran.fetch_add(1, std::memory_order_relaxed);
                if (task == 10 || task == 50) {
                    throw std::runtime_error("task " + std::to_string(task) + " failed");
                }
            });
        };
        CHECK_THROWS_WITH_AS(run_with_failures(), doctest::Contains(" failed"), std::runtime_error);
        CHECK(ran.load() == 100);

        std::atomic<int> after{0};
        pool.run(10, [&](std::size_t) { after.fetch_add(1, std::memory_order_relaxed); });
        CHECK(after.load() == 10);
    }
}

TEST_CASE("thread_pool::run from inside one of its own tasks is a qk::error, not a deadlock")
{
    for (std::size_t threads : threads_per_pool) {
        CAPTURE(threads);
        thread_pool pool(threads);
        const auto nested = [&] { pool.run(4, [&](std::size_t) { pool.run(2, [](std::size_t) {}); }); };
        CHECK_THROWS_WITH_AS(nested(), doctest::Contains("while a run of the same pool is in progress"), qk::error);
        std::atomic<int> after{0};
        pool.run(5, [&](std::size_t) { after.fetch_add(1, std::memory_order_relaxed); });
        CHECK(after.load() == 5);
    }
}
