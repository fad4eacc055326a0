// Concurrency stress of the CPU backend, short enough for the main suite and meant to run under
// ThreadSanitizer as well: a qk::backend::cpu::thread_pool through thousands of runs of varying
// task counts (every task exactly once per run, its plain writes seen by the caller afterwards),
// runs where several tasks throw (one of their exceptions reaches the caller, every task still
// ran, the pool works afterwards), pools created, used and destroyed on several threads at once,
// run() from inside a task and from a second thread while a run is in progress (a qk::error, the
// pool unharmed); and qk::backend::cpu::context objects used from several threads at once, each
// with its own weights or all sharing one matrix read-only (uploaded, or kept as plain rows),
// whose gemv, gemm, solve_tri and sampling give the bits of single-threaded references on pools
// of 1, 2 and 3 threads. QKERN_STRESS_SCALE (a positive integer, default 1) multiplies every
// iteration count. Under ThreadSanitizer, as one translation unit:
//   g++ -std=c++20 -fsanitize=thread -O1 -g -Iinclude -Itests -DQKERN_GOLDEN_DIR='""'
//       tests/main.cpp tests/test_stress_threads.cpp -o stress_tsan
//   TSAN_OPTIONS=halt_on_error=1 ./stress_tsan --test-case='stress: *'
#include <doctest/doctest.h>

#include <backends/cpu/context.hpp>
#include <backends/cpu/thread_pool.hpp>
#include <kernels/arch.hpp>
#include <kernels/dot.hpp>
#include <kernels/error.hpp>
#include <kernels/formats.hpp>
#include <kernels/quantize.hpp>
#include <kernels/solve_tri.hpp>
#include <sampling/sampling.hpp>

#include <array>
#include <atomic>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

using qk::backend::cpu::thread_pool;

namespace {

// QKERN_STRESS_SCALE, or 1 when unset; 0 when it is not a positive integer (the test cases then
// fail saying so rather than run a scale nobody asked for).
std::size_t stress_scale()
{
    const char* text = std::getenv("QKERN_STRESS_SCALE");
    if (text == nullptr || *text == '\0') {
        return 1;
    }
    std::size_t value = 0;
    const char* end = text + std::strlen(text);
    const auto [ptr, ec] = std::from_chars(text, end, value);
    return ec == std::errc{} && ptr == end ? value : 0;
}

std::size_t checked_scale()
{
    const std::size_t scale = stress_scale();
    INFO("QKERN_STRESS_SCALE must be a positive integer");
    REQUIRE(scale >= 1);
    return scale;
}

constexpr std::size_t pool_sizes[] = {1, 2, 3, 4};

// Failures seen on threads other than the test's own are counted here and checked (with the first
// message) on the test's thread: doctest's assertions belong to the thread that runs the test case.
class failures {
public:
    void add(const std::string& what)
    {
        const std::lock_guard lock(mutex_);
        if (count_++ == 0) {
            first_ = what;
        }
    }
    [[nodiscard]] std::size_t count() const
    {
        const std::lock_guard lock(mutex_);
        return count_;
    }
    [[nodiscard]] std::string first() const
    {
        const std::lock_guard lock(mutex_);
        return first_;
    }

private:
    mutable std::mutex mutex_;
    std::size_t count_ = 0;
    std::string first_;
};

std::string describe(const std::exception_ptr& e)
{
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& x) {
        return x.what();
    } catch (...) {
        return "an exception that is not a std::exception";
    }
}

// Runs `tasks` tasks that each count themselves, and checks that each ran exactly once: the
// number of tasks that did not. The counters are reset for the next call.
std::size_t checked_run(thread_pool& pool, std::size_t tasks, std::vector<std::atomic<std::uint32_t>>& calls)
{
    pool.run(tasks, [&](std::size_t task) { calls[task].fetch_add(1, std::memory_order_relaxed); });
    std::size_t wrong = 0;
    for (std::size_t task = 0; task < calls.size(); ++task) {
        wrong += calls[task].exchange(0, std::memory_order_relaxed) != (task < tasks ? 1u : 0u) ? 1 : 0;
    }
    return wrong;
}

// What a task throws in the throwing runs: its own index, so the caller can tell which one it got.
struct task_failure {
    std::size_t task;
};

} // namespace

TEST_CASE("stress: a thread pool through many runs runs every task exactly once per run")
{
    const std::size_t scale = checked_scale();
    constexpr std::size_t max_tasks = 67;
    std::size_t runs = 0, tasks_total = 0, wrong = 0;
    std::atomic<std::size_t> off_caller{0}; // tasks that ran on one of the pool's own threads
    const std::thread::id caller = std::this_thread::get_id();
    for (const std::size_t threads : pool_sizes) {
        thread_pool pool(threads);
        std::vector<std::atomic<std::uint32_t>> calls(max_tasks);
        // Written plainly by the tasks and read here after run() returns: run() must order every
        // task's writes before its return (ThreadSanitizer reports it if not).
        std::vector<std::size_t> written(max_tasks);
        for (std::size_t r = 0; r < 5000 * scale; ++r) {
            // 0 to max_tasks tasks, fewer and more than the pool's threads, in no simple order.
            const std::size_t tasks = (r * 37 + threads) % (max_tasks + 1);
            pool.run(tasks, [&](std::size_t task) {
                calls[task].fetch_add(1, std::memory_order_relaxed);
                written[task] = r * max_tasks + task;
                if (std::this_thread::get_id() != caller) {
                    off_caller.fetch_add(1, std::memory_order_relaxed);
                }
            });
            for (std::size_t task = 0; task < max_tasks; ++task) {
                const bool ran = task < tasks;
                wrong += calls[task].exchange(0, std::memory_order_relaxed) != (ran ? 1u : 0u) ? 1 : 0;
                wrong += ran && written[task] != r * max_tasks + task ? 1 : 0;
            }
            ++runs;
            tasks_total += tasks;
        }
    }
    CHECK(wrong == 0);
    CHECK(off_caller.load() > 0); // the pools' threads did take part
    MESSAGE("thread pool many runs: " << runs << " runs, " << tasks_total << " tasks on pools of 1-4 threads (" << off_caller.load()
                                      << " of them on the pools' own threads), " << wrong << " tasks run other than once");
}

TEST_CASE("stress: tasks that throw: one of their exceptions reaches the caller, every task ran, the pool works afterwards")
{
    const std::size_t scale = checked_scale();
    constexpr std::size_t max_tasks = 64;
    std::size_t runs = 0, tasks_total = 0, thrown_total = 0, caught = 0, wrong = 0;
    for (const std::size_t threads : pool_sizes) {
        CAPTURE(threads);
        thread_pool pool(threads);
        std::vector<std::atomic<std::uint32_t>> calls(max_tasks);
        for (std::size_t r = 0; r < 1000 * scale; ++r) {
            const std::size_t tasks = 8 + r % (max_tasks - 7);
            // The tasks whose index is `offset` modulo `period` throw: at least 2 of them (tasks is
            // at least 8), every task in one run out of seven.
            const std::size_t period = r % 7 == 0 ? 1 : 2 + r % 5;
            const std::size_t offset = r % period;
            std::atomic<std::size_t> thrown{0};
            try {
                pool.run(tasks, [&](std::size_t task) {
                    calls[task].fetch_add(1, std::memory_order_relaxed);
                    if (task % period == offset) {
                        thrown.fetch_add(1, std::memory_order_relaxed);
                        throw task_failure{task};
                    }
                });
                ++wrong; // nothing reached the caller
            } catch (const task_failure& e) {
                ++caught;
                // One of the exceptions thrown; on one thread, tasks run in index order, so the first.
                wrong += e.task >= tasks || e.task % period != offset ? 1 : 0;
                wrong += threads == 1 && e.task != offset ? 1 : 0;
            } catch (...) {
                ++wrong;
            }
            for (std::size_t task = 0; task < max_tasks; ++task) {
                wrong += calls[task].exchange(0, std::memory_order_relaxed) != (task < tasks ? 1u : 0u) ? 1 : 0;
            }
            wrong += thrown.load() != (tasks - offset + period - 1) / period ? 1 : 0;
            thrown_total += thrown.load();
            tasks_total += tasks;
            // The pool is usable afterwards: a clean run of as many tasks.
            wrong += checked_run(pool, tasks, calls);
            runs += 2;
            tasks_total += tasks;
        }
    }
    CHECK(wrong == 0);
    MESSAGE("thread pool throwing tasks: " << runs << " runs (half of them throwing), " << tasks_total << " tasks, " << thrown_total
                                           << " exceptions thrown, " << caught << " rethrown to the caller, " << wrong << " wrong");
}

TEST_CASE("stress: pools created, used and destroyed on several threads at once")
{
    const std::size_t scale = checked_scale();
    constexpr std::size_t creators = 4, max_tasks = 40;
    std::atomic<std::size_t> pools{0}, runs{0}, exceptions{0};
    failures failed;
    std::vector<std::thread> threads;
    for (std::size_t c = 0; c < creators; ++c) {
        threads.emplace_back([&, c] {
            try {
                std::vector<std::atomic<std::uint32_t>> calls(max_tasks);
                for (std::size_t i = 0; i < 100 * scale; ++i) {
                    const std::size_t size = 1 + (c + i) % 4;
                    thread_pool pool(size);
                    pools.fetch_add(1, std::memory_order_relaxed);
                    if (pool.size() != size) {
                        failed.add("pool of " + std::to_string(size) + " threads has size() " + std::to_string(pool.size()));
                    }
                    switch (i % 3) {
                    case 0: // destroyed without a run, maybe before its threads got to wait
                        break;
                    case 1: // a few runs
                        for (std::size_t r = 0; r < 4; ++r) {
                            const std::size_t tasks = (i * 7 + r * 13 + c) % max_tasks;
                            if (checked_run(pool, tasks, calls) != 0) {
                                failed.add("a run of " + std::to_string(tasks) + " tasks on " + std::to_string(size) +
                                           " threads ran some task other than once");
                            }
                            runs.fetch_add(1, std::memory_order_relaxed);
                        }
                        break;
                    default: // a run that throws, then one that does not
                        try {
                            pool.run(size + 3, [](std::size_t task) {
                                if (task % 2 == 1) {
                                    throw task_failure{task};
                                }
                            });
                            failed.add("a throwing run returned normally");
                        } catch (const task_failure&) {
                            exceptions.fetch_add(1, std::memory_order_relaxed);
                        }
                        if (checked_run(pool, size + 3, calls) != 0) {
                            failed.add("a run after a throwing run ran some task other than once");
                        }
                        runs.fetch_add(2, std::memory_order_relaxed);
                        break;
                    }
                }
            } catch (...) {
                failed.add("creator thread: " + describe(std::current_exception()));
            }
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    INFO(failed.first());
    CHECK(failed.count() == 0);
    MESSAGE("concurrent pools: " << pools.load() << " pools of 1-4 threads created and destroyed by " << creators
                                 << " threads at once, " << runs.load() << " runs, " << exceptions.load() << " rethrown exceptions");
}

TEST_CASE("stress: run() while a run of the same pool is in progress is a qk::error, and the pool works afterwards")
{
    const std::size_t scale = checked_scale();
    // The runs below take up to 9 tasks, and the checks after them 9 + the pool's threads (4).
    constexpr std::size_t max_tasks = 13;
    std::size_t nested_rejected = 0, escaped = 0, outer_runs = 0, wrong = 0;
    for (const std::size_t threads : pool_sizes) {
        CAPTURE(threads);
        thread_pool pool(threads);
        std::vector<std::atomic<std::uint32_t>> calls(max_tasks);
        for (std::size_t r = 0; r < 400 * scale; ++r) {
            const std::size_t tasks = 1 + r % 9;
            // Caught inside the task: every task's run() is refused, none of its tasks runs, and
            // the outer run completes.
            std::atomic<std::size_t> rejected{0}, inner_ran{0};
            pool.run(tasks, [&](std::size_t task) {
                calls[task].fetch_add(1, std::memory_order_relaxed);
                try {
                    pool.run(1 + task % 3, [&](std::size_t) { inner_ran.fetch_add(1, std::memory_order_relaxed); });
                } catch (const qk::error& e) {
                    if (std::string_view(e.what()).find("while a run of the same pool is in progress") != std::string_view::npos) {
                        rejected.fetch_add(1, std::memory_order_relaxed);
                    }
                }
            });
            for (std::size_t task = 0; task < max_tasks; ++task) {
                wrong += calls[task].exchange(0, std::memory_order_relaxed) != (task < tasks ? 1u : 0u) ? 1 : 0;
            }
            wrong += rejected.load() != tasks || inner_ran.load() != 0 ? 1 : 0;
            nested_rejected += rejected.load();
            // Left to escape: the outer run rethrows the qk::error.
            try {
                pool.run(tasks, [&](std::size_t) { pool.run(2, [](std::size_t) {}); });
                ++wrong;
            } catch (const qk::error&) {
                ++escaped;
            }
            // The pool works afterwards.
            wrong += checked_run(pool, tasks + threads, calls);
            outer_runs += 3;
        }
    }
    CHECK(wrong == 0);

    // The same guard against a second thread: two threads share one pool, each call either runs
    // all its tasks or is a qk::error before any of them runs, and a refused caller tries again
    // until it has had `attempts` runs. The tasks of both callers' runs increment the same plain
    // counters: one run must be ordered after the other (ThreadSanitizer reports it if not, and
    // the counts come out short).
    constexpr std::size_t attempts = 1000; // runs per caller and pool
    std::size_t completed = 0, refused = 0, handovers = 0;
    failures failed;
    for (const std::size_t threads : {2u, 3u}) {
        thread_pool pool(threads);
        std::atomic<std::size_t> done{0}, rejected{0}, handed{0}, last{2};
        std::vector<std::size_t> slots(max_tasks);
        std::vector<std::vector<std::size_t>> expected(2, std::vector<std::size_t>(max_tasks)); // one per caller
        std::vector<std::thread> callers;
        for (std::size_t c = 0; c < 2; ++c) {
            callers.emplace_back([&, c] {
                try {
                    std::vector<std::atomic<std::uint32_t>> calls(max_tasks);
                    for (std::size_t r = 0; r < attempts * scale;) {
                        const std::size_t tasks = 2 + (r + c) % (max_tasks - 1);
                        try {
                            pool.run(tasks, [&](std::size_t task) {
                                calls[task].fetch_add(1, std::memory_order_relaxed);
                                ++slots[task];
                                if (task == 0 && last.exchange(c, std::memory_order_relaxed) != c) {
                                    handed.fetch_add(1, std::memory_order_relaxed);
                                }
                            });
                            for (std::size_t task = 0; task < max_tasks; ++task) {
                                const bool ran = task < tasks;
                                if (calls[task].exchange(0, std::memory_order_relaxed) != (ran ? 1u : 0u)) {
                                    failed.add("a run shared with another thread ran some task other than once");
                                }
                                expected[c][task] += ran ? 1 : 0;
                            }
                            done.fetch_add(1, std::memory_order_relaxed);
                            // Now and then let the other caller in between two runs.
                            if (++r % 3 == c) {
                                std::this_thread::yield();
                            }
                        } catch (const qk::error&) {
                            for (auto& n : calls) {
                                if (n.exchange(0, std::memory_order_relaxed) != 0) {
                                    failed.add("a refused run ran some of its tasks");
                                }
                            }
                            // Straight back, so that some calls land in the other's run.
                            if (rejected.fetch_add(1, std::memory_order_relaxed) % 4 == 0) {
                                std::this_thread::yield();
                            }
                        }
                    }
                } catch (...) {
                    failed.add("caller thread: " + describe(std::current_exception()));
                }
            });
        }
        for (auto& t : callers) {
            t.join();
        }
        for (std::size_t task = 0; task < max_tasks; ++task) {
            if (slots[task] != expected[0][task] + expected[1][task]) {
                failed.add("the runs of two callers lost increments: their tasks overlapped");
            }
        }
        std::vector<std::atomic<std::uint32_t>> calls(max_tasks);
        if (checked_run(pool, max_tasks, calls) != 0) {
            failed.add("the shared pool ran some task other than once afterwards");
        }
        completed += done.load();
        refused += rejected.load();
        handovers += handed.load();
    }
    INFO(failed.first());
    CHECK(failed.count() == 0);
    CHECK(completed == 2 * 2 * attempts * scale);
    MESSAGE("run during a run: " << nested_rejected << " runs from inside a task refused, " << escaped << " escaping to the caller, "
                                 << outer_runs << " outer runs on pools of 1-4 threads; two threads sharing one pool: " << completed
                                 << " runs, " << refused << " calls refused while the other's run was in progress, " << handovers
                                 << " handovers between the callers");
}

namespace {

// Fixed inputs for the context stress: Q8_0 weights W (rows x cols) and `columns` activation
// columns X; `batch` lower-triangular systems A X = B, diagonally dominant; `steps` steps of
// logits for n_seq sequences (one inactive), each with its own sampler chain.
struct stress_problem {
    static constexpr std::size_t rows = 80, cols = 512, columns = 4;
    static constexpr std::int64_t n = 40, k = 6, batch = 2;
    static constexpr std::size_t n_seq = 5, n_vocab = 1500, steps = 3;
    static constexpr qk::tri_options solve_options{.left = true, .lower = true, .unit = false};
    static constexpr std::array<const char*, n_seq> chains{
        "top_k(40);top_p(0.95);min_p(0.05);temp(0.8);dist(seed=42)",
        "greedy",
        "top_k(200);temp(1.5);dist(seed=11)",
        "mirostat",
        "top_k(12);adaptive_p(target=0.9,decay=0.99,seed=21)",
    };

    std::vector<qk::block_q8_0> w;
    std::vector<float> x;
    std::vector<float> a;
    std::vector<float> b;
    std::vector<float> logits; // steps x n_seq x n_vocab
    std::vector<std::uint8_t> active{1, 1, 1, 0, 1};
};

stress_problem make_problem()
{
    using p = stress_problem;
    stress_problem r;
    std::mt19937_64 rng(21);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> wf(p::rows * p::cols);
    for (auto& v : wf) {
        v = normal(rng);
    }
    r.w = qk::quantize<qk::block_q8_0>(wf);
    r.x.resize(p::columns * p::cols);
    for (auto& v : r.x) {
        v = normal(rng);
    }
    r.a.assign(static_cast<std::size_t>(p::batch * p::n * p::n), 0.0f);
    for (std::int64_t m = 0; m < p::batch; ++m) {
        for (std::int64_t i = 0; i < p::n; ++i) {
            for (std::int64_t j = 0; j <= i; ++j) {
                r.a[static_cast<std::size_t>((m * p::n + i) * p::n + j)] =
                    i == j ? 2.0f + std::abs(normal(rng)) : normal(rng) / static_cast<float>(p::n);
            }
        }
    }
    r.b.resize(static_cast<std::size_t>(p::batch * p::n * p::k));
    for (auto& v : r.b) {
        v = normal(rng);
    }
    r.logits.resize(p::steps * p::n_seq * p::n_vocab);
    for (auto& v : r.logits) {
        v = 2.0f * normal(rng);
    }
    return r;
}

struct stress_result {
    std::vector<float> y;      // W x_0 by gemv: rows values
    std::vector<float> y_gemm; // W X by gemm: columns x rows values
    std::vector<float> solved; // the solve's X
    std::vector<std::int32_t> tokens;
};

std::vector<qk::sampling::chain> fresh_chains()
{
    std::vector<qk::sampling::chain> chains;
    for (const char* text : stress_problem::chains) {
        chains.push_back(qk::sampling::chain::parse(text));
    }
    return chains;
}

// The references, single-threaded and without a context: gemv and gemm are a loop of qk::dot over
// the rows on the tag the context's weights run on (the generic tag's where upload packed them:
// packed_gemm.hpp; the dispatched tag's otherwise: gemv.hpp); solve_tri is the single-threaded
// call (backends/cpu/solve_tri.hpp: the pool gives its bits); the tokens are each sequence's chain
// run alone on its row (backends/cpu/sample_batch.hpp), -1 for the inactive sequence.
template <class Tag>
std::vector<float> dot_loop(const stress_problem& p, std::size_t columns)
{
    using sp = stress_problem;
    constexpr std::size_t blocks = sp::cols / qk::format_traits<qk::block_q8_0>::block_size;
    std::vector<float> y(columns * sp::rows);
    const std::span<const qk::block_q8_0> w(p.w);
    for (std::size_t c = 0; c < columns; ++c) {
        const auto a = qk::quantize<qk::block_q8_0, Tag>(std::span<const float>(p.x).subspan(c * sp::cols, sp::cols));
        for (std::size_t r = 0; r < sp::rows; ++r) {
            y[c * sp::rows + r] = qk::dot<qk::block_q8_0, Tag>(w.subspan(r * blocks, blocks), a);
        }
    }
    return y;
}

stress_result reference(const stress_problem& p, bool packed)
{
    using sp = stress_problem;
    stress_result r;
    r.y_gemm = packed ? dot_loop<qk::arch::generic>(p, sp::columns) : dot_loop<qk::arch::runtime>(p, sp::columns);
    r.y.assign(r.y_gemm.begin(), r.y_gemm.begin() + static_cast<std::ptrdiff_t>(sp::rows));
    r.solved.resize(p.b.size());
    qk::solve_tri(p.a.data(), p.b.data(), r.solved.data(), sp::n, sp::k, sp::batch, sp::solve_options);
    auto chains = fresh_chains();
    for (std::size_t t = 0; t < sp::steps; ++t) {
        for (std::size_t s = 0; s < sp::n_seq; ++s) {
            const auto row = std::span<const float>(p.logits).subspan((t * sp::n_seq + s) * sp::n_vocab, sp::n_vocab);
            r.tokens.push_back(p.active[s] != 0 ? chains[s].sample(row) : -1);
        }
    }
    return r;
}

// One engine step on a context, with weights it uploaded or shares.
stress_result step(qk::backend::cpu::context& ctx, const qk::backend::cpu::matrix<qk::block_q8_0>& m, const stress_problem& p)
{
    using sp = stress_problem;
    stress_result r;
    r.y.resize(sp::rows);
    ctx.gemv(m, std::span<const float>(p.x).first(sp::cols), r.y);
    r.y_gemm.resize(sp::columns * sp::rows);
    ctx.gemm(m, sp::columns, p.x, r.y_gemm);
    r.solved.resize(p.b.size());
    ctx.solve_tri(p.a.data(), p.b.data(), r.solved.data(), sp::n, sp::k, sp::batch, sp::solve_options);
    auto chains = fresh_chains();
    for (std::size_t t = 0; t < sp::steps; ++t) {
        std::vector<std::int32_t> tokens(sp::n_seq);
        ctx.sample(std::span<const float>(p.logits).subspan(t * sp::n_seq * sp::n_vocab, sp::n_seq * sp::n_vocab), sp::n_seq, sp::n_vocab,
                   chains, p.active, tokens);
        r.tokens.insert(r.tokens.end(), tokens.begin(), tokens.end());
    }
    return r;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b)
{
    if (a.size() != b.size()) {
        return false;
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) {
            return false;
        }
    }
    return true;
}

// What in `got` differs from the reference, or "" where nothing does.
std::string differences(const stress_result& got, const stress_result& want)
{
    std::string what;
    what += bitwise_equal(got.y, want.y) ? "" : " gemv";
    what += bitwise_equal(got.y_gemm, want.y_gemm) ? "" : " gemm";
    what += bitwise_equal(got.solved, want.solved) ? "" : " solve_tri";
    what += got.tokens == want.tokens ? "" : " sample";
    return what;
}

} // namespace

TEST_CASE("stress: CPU contexts used from several threads at once give the single-threaded bits on 1, 2 and 3 threads")
{
    using sp = stress_problem;
    using matrix = qk::backend::cpu::matrix<qk::block_q8_0>;
    const std::size_t scale = checked_scale();
    const stress_problem p = make_problem();
    // The matrices the contexts share read-only: one uploaded here (packed where the CPU has tile
    // kernels), and one kept as plain rows whatever the CPU (what upload keeps elsewhere), so that
    // both of the context's gemm paths run on every CPU.
    const qk::backend::cpu::context uploader(1);
    const matrix uploaded = uploader.upload<qk::block_q8_0>(p.w, sp::rows, sp::cols);
    const matrix plain(p.w, sp::rows, sp::cols, false);
    REQUIRE_FALSE(plain.is_packed());
    const stress_result want = reference(p, uploaded.is_packed());
    const stress_result want_plain = reference(p, false);
    // Single-threaded contexts on this thread first: the references are what a context gives.
    {
        qk::backend::cpu::context alone(1);
        const std::string what = differences(step(alone, uploaded, p), want);
        const std::string what_plain = differences(step(alone, plain, p), want_plain);
        INFO("differs from the reference:" << what << " (uploaded weights)" << what_plain << " (plain weights)");
        REQUIRE(what.empty());
        REQUIRE(what_plain.empty());
    }

    // Each worker thread has its own contexts; the weights are its own upload, the shared upload
    // or the shared plain rows.
    enum class weights { own, shared, shared_plain };
    constexpr std::array<const char*, 3> weights_name{"own", "shared", "shared plain"};
    constexpr std::size_t workers = 3, max_pool = 3;
    const std::size_t iterations = 6 * scale;
    std::array<std::atomic<std::size_t>, max_pool + 1> steps_on{}, wrong_on{};
    failures failed;
    for (const weights mode : {weights::own, weights::shared, weights::shared_plain}) {
        std::vector<std::thread> threads;
        for (std::size_t i = 0; i < workers; ++i) {
            threads.emplace_back([&, i] {
                try {
                    // Each worker goes through contexts of 1, 2 and 3 threads, starting at a different
                    // one, so that every count runs alongside the others.
                    for (std::size_t j = 0; j < max_pool; ++j) {
                        const std::size_t size = 1 + (i + j) % max_pool;
                        qk::backend::cpu::context ctx(size);
                        const auto steps = [&](const matrix& m, const stress_result& expected) {
                            for (std::size_t it = 0; it < iterations; ++it) {
                                const std::string what = differences(step(ctx, m, p), expected);
                                steps_on[size].fetch_add(1, std::memory_order_relaxed);
                                if (!what.empty()) {
                                    wrong_on[size].fetch_add(1, std::memory_order_relaxed);
                                    failed.add(std::string(weights_name[static_cast<std::size_t>(mode)]) + " weights, " +
                                               std::to_string(size) + " threads: differs from the reference:" + what);
                                }
                            }
                        };
                        switch (mode) {
                        case weights::own: steps(ctx.upload<qk::block_q8_0>(p.w, sp::rows, sp::cols), want); break;
                        case weights::shared: steps(uploaded, want); break;
                        case weights::shared_plain: steps(plain, want_plain); break;
                        }
                    }
                } catch (...) {
                    failed.add("context thread: " + describe(std::current_exception()));
                }
            });
        }
        for (auto& t : threads) {
            t.join();
        }
    }
    INFO(failed.first());
    CHECK(failed.count() == 0);
    std::size_t total = 0;
    for (std::size_t size = 1; size <= max_pool; ++size) {
        CAPTURE(size);
        CHECK(steps_on[size].load() == 3 * workers * iterations);
        CHECK(wrong_on[size].load() == 0);
        total += steps_on[size].load();
    }
    MESSAGE("concurrent contexts: " << total << " engine steps (gemv, gemm of " << sp::columns << " columns, solve_tri, " << sp::steps
                                    << " sampling steps) by " << workers << " threads at once on contexts of 1, 2 and 3 threads ("
                                    << steps_on[1].load() << ", " << steps_on[2].load() << ", " << steps_on[3].load()
                                    << "), on own, shared (" << std::string(uploaded.is_packed() ? "packed" : "plain")
                                    << ") and shared plain weights, all bit-identical to the single-threaded references");
}
