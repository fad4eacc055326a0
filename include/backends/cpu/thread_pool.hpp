// qk::backend::cpu::thread_pool: a fixed set of threads, created once, that runs a batch of
// indexed tasks and returns when all are done; the calling thread works as one of them.
// The CPU kernels (gemv, gemm) split their rows across it, so a hot call starts no thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../kernels/error.hpp"

namespace qk::backend::cpu {

// One caller at a time: run() is not reentrant and must not be called from two threads at
// once, nor from inside one of its own tasks; either misuse is detected and reported as a
// qk::error rather than a deadlock. Distinct pools are independent.
class thread_pool {
public:
    // `threads` counts the calling thread, so thread_pool(1) starts no thread and runs every
    // task on the caller. A thread the system will not start, or memory running out: qk::error.
    explicit thread_pool(std::size_t threads)
    {
        if (threads == 0) {
            qk::detail::fail("qk::backend::cpu::thread_pool: threads is 0; a pool needs at least 1 thread ",
                             "(the calling thread counts as one)");
        }
        try {
            workers_.reserve(threads - 1);
            for (std::size_t i = 1; i < threads; ++i) {
                workers_.emplace_back([this] { serve(); });
            }
        } catch (const std::system_error& e) {
            // The threads already started wait on this object: stop them before it vanishes.
            stop();
            qk::detail::fail("qk::backend::cpu::thread_pool: starting thread ", workers_.size() + 2, " of ", threads, " failed: ", e.what());
        } catch (...) {
            stop();
            qk::detail::rethrow_as_error("qk::backend::cpu::thread_pool");
        }
    }

    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    ~thread_pool() { stop(); }

    // The number of threads that run tasks, the caller included.
    [[nodiscard]] std::size_t size() const noexcept { return workers_.size() + 1; }

    // Calls f(task) once for every task in [0, tasks), spread over the pool's threads, and
    // returns when all calls have returned. Every task runs even if another one throws; the
    // first exception thrown is then rethrown here. Tasks are handed out one at a time in
    // index order, so a thread that the OS preempts delays only the task it holds.
    template <class F>
    void run(std::size_t tasks, F&& f)
    {
        if (tasks == 0) {
            return;
        }
        if (busy_.exchange(true, std::memory_order_acquire)) {
            qk::detail::fail("qk::backend::cpu::thread_pool::run: called while a run of the same pool is in progress (", tasks,
                             " tasks); a pool serves one caller at a time and a task must not run on its own pool");
        }
        const release_on_exit release{busy_};

        if (workers_.empty() || tasks == 1) {
            // Nothing to share: skip the wake-up and the type erasure.
            std::exception_ptr first;
            for (std::size_t task = 0; task < tasks; ++task) {
                try {
                    f(task);
                } catch (...) {
                    if (!first) {
                        first = std::current_exception();
                    }
                }
            }
            if (first) {
                std::rethrow_exception(first);
            }
            return;
        }

        using callable = std::remove_reference_t<F>;
        {
            const std::lock_guard lock(mutex_);
            // f lives on this frame, which outlives every use: run waits for all workers below.
            job_ = {[](const void* context, std::size_t task) { (*static_cast<callable*>(const_cast<void*>(context)))(task); },
                    static_cast<const void*>(std::addressof(f)), tasks};
            next_task_.store(0, std::memory_order_relaxed);
            pending_workers_ = workers_.size();
            first_error_ = nullptr;
            ++generation_;
        }
        wake_.notify_all();
        drain();

        std::exception_ptr error;
        {
            std::unique_lock lock(mutex_);
            done_.wait(lock, [this] { return pending_workers_ == 0; });
            error = std::exchange(first_error_, nullptr);
        }
        if (error) {
            std::rethrow_exception(error);
        }
    }

private:
    // A run's work without its callable's type, so workers need no allocation per run.
    struct job {
        void (*invoke)(const void* context, std::size_t task) = nullptr;
        const void* context = nullptr;
        std::size_t tasks = 0;
    };

    struct release_on_exit {
        std::atomic<bool>& flag;
        ~release_on_exit() { flag.store(false, std::memory_order_release); }
    };

    // Every worker takes part in every run, even one with fewer tasks than threads: the caller
    // waits for all of them, so none can still be reading a finished run's job.
    void serve()
    {
        std::uint64_t seen = 0;
        std::unique_lock lock(mutex_);
        for (;;) {
            wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
            if (stopping_) {
                return;
            }
            seen = generation_;
            lock.unlock();
            drain();
            lock.lock();
            if (--pending_workers_ == 0) {
                done_.notify_one();
            }
        }
    }

    // job_ was published under mutex_ before the generation changed, and is not rewritten
    // until every worker has reported back, so reading it here unlocked is safe.
    void drain() noexcept
    {
        const job current = job_;
        for (std::size_t task = next_task_.fetch_add(1, std::memory_order_relaxed); task < current.tasks;
             task = next_task_.fetch_add(1, std::memory_order_relaxed)) {
            try {
                current.invoke(current.context, task);
            } catch (...) {
                const std::lock_guard lock(mutex_);
                if (!first_error_) {
                    first_error_ = std::current_exception();
                }
            }
        }
    }

    void stop() noexcept
    {
        {
            const std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        wake_.notify_all();
        for (auto& worker : workers_) {
            worker.join();
        }
    }

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::condition_variable done_;
    // Guarded by mutex_.
    job job_;
    std::uint64_t generation_ = 0;
    std::size_t pending_workers_ = 0;
    std::exception_ptr first_error_;
    bool stopping_ = false;
    // Outside the lock: the task counter every thread draws from, and the one-caller guard.
    std::atomic<std::size_t> next_task_{0};
    std::atomic<bool> busy_{false};
};

} // namespace qk::backend::cpu
