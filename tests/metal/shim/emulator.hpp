// A CPU emulation of a Metal compute dispatch for kernels compiled through <metal_stdlib>: a grid
// of threadgroups, each thread of a threadgroup a fiber (ucontext) of its own, SIMD-groups of 32
// lanes whose functions (simd_sum, ...) are real exchanges among those fibers, and threadgroup
// memory of the sizes the host would set. One OS thread runs every fiber in a fixed order, so
// results are deterministic; the fiber switches are annotated for ASan and TSan.
//
// Fibers rather than one std::thread per Metal thread: a kernel meets a barrier or a SIMD-group
// function for every few operations, and a switch between fibers costs nanoseconds where an OS
// wake-up costs microseconds (the solve_tri tests make millions of them).
//
// What it checks besides running the kernel (each a dispatch failure, reported by exception):
//  - threads meeting at different threadgroup_barrier calls, or a barrier reached after some
//    thread of the threadgroup has returned (undefined in Metal);
//  - lanes of a SIMD-group meeting at different SIMD-group functions (divergent control flow;
//    lanes that have returned simply drop out, as inactive lanes do on the GPU);
//  - a shuffle or broadcast from an inactive lane;
//  - a threadgroup whose threads all wait and none can go on (a deadlock), reported at once;
//  - threadgroup memory lengths that Metal rejects (not a multiple of 16 bytes, over 32 KiB in
//    all) and threadgroups of more than 1024 threads;
//  - exceptions thrown by the kernel body.
// Threadgroup memory starts as all-ones bytes (a NaN in every float) in every threadgroup, so
// a kernel that reads what it never wrote sees garbage, as on the GPU.
//
// Threadgroups run one after another, x fastest, then y, then z; within one, threads run in
// index order until each blocks. Metal promises no order, and kernels must not depend on one.
// A data race between Metal threads is invisible here (fibers do not run in parallel): the
// tests catch its effects only where it changes results.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <ucontext.h>

#include "metal_core.hpp"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define METAL_EMU_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define METAL_EMU_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(METAL_EMU_ASAN)
#define METAL_EMU_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(METAL_EMU_TSAN)
#define METAL_EMU_TSAN 1
#endif
#if defined(METAL_EMU_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(METAL_EMU_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

namespace metal::emu {

// Apple's limits: 1024 threads and 32 KiB of threadgroup memory per threadgroup.
inline constexpr unsigned max_threads_per_threadgroup = 1024;
inline constexpr std::size_t max_threadgroup_memory = 32768;

struct dispatch_shape {
    uint3 threadgroups{1u, 1u, 1u};
    uint3 threads_per_threadgroup{32u, 1u, 1u};
    // Bytes at each [[threadgroup(i)]] index, as setThreadgroupMemoryLength:atIndex: would set.
    std::vector<std::size_t> threadgroup_memory{};
};

// The attribute-qualified kernel inputs of one thread, for the dispatch body to pass on.
struct thread_builtins {
    uint3 threadgroup_position_in_grid;
    uint3 threadgroups_per_grid;
    uint3 thread_position_in_threadgroup;
    uint3 threads_per_threadgroup;
    uint3 thread_position_in_grid;
    uint3 threads_per_grid;
    uint thread_index_in_threadgroup;
    uint thread_index_in_simdgroup;
    uint simdgroup_index_in_threadgroup;
    uint threads_per_simdgroup;
    uint simdgroups_per_threadgroup;
    std::byte* const* threadgroup_memory;

    // The [[threadgroup(index)]] argument, typed as the kernel declares it.
    template <class T>
    T* threadgroup(std::size_t index) const noexcept
    {
        return reinterpret_cast<T*>(threadgroup_memory[index]);
    }
};

namespace detail {

using shim::call_site;
inline constexpr std::size_t max_exchange_bytes = 64;
// Kernel frames are small. ASan's swapcontext clears the shadow of the whole target stack at
// every switch, so a larger stack costs time there on every barrier.
inline constexpr std::size_t fiber_stack_bytes = std::size_t{128} << 10;

inline std::string describe(const char* what, call_site site)
{
    return std::string(what) + " (" + site.file + ":" + std::to_string(site.line) + ")";
}

class error_log {
public:
    void add(std::string what)
    {
        if (++count_ <= 5) {
            text_ += (text_.empty() ? "" : "; ") + what;
        }
    }
    [[nodiscard]] bool any() const noexcept { return count_ > 0; }
    void rethrow() const
    {
        if (count_ > 0) {
            throw std::runtime_error("metal emulator: " + std::to_string(count_) + " kernel error(s): " + text_);
        }
    }

private:
    std::size_t count_ = 0;
    std::string text_;
};

// The fibers of one threadgroup and the switches between them and the dispatching thread.
class scheduler {
public:
    using entry = void (*)(void* context, unsigned thread);

    scheduler(unsigned threads, entry run, void* context) : fibers_(threads), run_(run), context_(context)
    {
        for (auto& f : fibers_) {
            f.stack = std::unique_ptr<unsigned char[]>(new unsigned char[fiber_stack_bytes]);
        }
    }

    scheduler(const scheduler&) = delete;
    scheduler& operator=(const scheduler&) = delete;
    ~scheduler()
    {
#if defined(METAL_EMU_TSAN)
        for (auto& f : fibers_) {
            if (f.tsan != nullptr) {
                __tsan_destroy_fiber(f.tsan);
            }
        }
#endif
    }

    // Runs every thread of one threadgroup to its end; false if they deadlocked (the fibers are
    // then stuck and this scheduler is done). The fibers are made once: each runs thread t of
    // every threadgroup in turn, waiting at the dispatcher in between. `last` lets the final
    // switch away from each fiber say that it is over (ASan frees its fake stack).
    bool run_threadgroup(bool last)
    {
        active() = this;
        last_ = last;
        for (unsigned t = 0; t < fibers_.size(); ++t) {
            fiber& f = fibers_[t];
            if (!started_) {
                make_fiber(f);
            }
            f.state = fiber::runnable;
        }
        started_ = true;
        bool deadlock = false;
        for (;;) {
            bool ran = false;
            bool done = true;
            for (unsigned t = 0; t < fibers_.size(); ++t) {
                if (fibers_[t].state == fiber::runnable) {
                    resume(t);
                    ran = true;
                }
                done = done && fibers_[t].state == fiber::finished;
            }
            if (done) {
                break;
            }
            if (!ran) {
                deadlock = true;
                break;
            }
        }
        active() = nullptr;
        return !deadlock;
    }

    // Called on the running fiber: it waits until wake(thread) and another turn.
    void block(unsigned thread)
    {
        fibers_[thread].state = fiber::blocked;
        to_dispatcher(&fibers_[thread].context, false);
    }

    void wake(unsigned thread) noexcept { fibers_[thread].state = fiber::runnable; }

private:
    struct fiber {
        enum run_state { runnable, blocked, finished };
        ucontext_t context{};
        std::unique_ptr<unsigned char[]> stack;
        run_state state = finished;
        void* tsan = nullptr;
    };

    static scheduler*& active() noexcept
    {
        thread_local scheduler* s = nullptr;
        return s;
    }

    // Apart, and not inlined: getcontext returns twice, which -Wclobbered flags in a caller
    // with locals live across it (a fresh context never returns through it here).
    [[gnu::noinline]] static void make_fiber(fiber& f)
    {
        getcontext(&f.context);
        f.context.uc_stack.ss_sp = f.stack.get();
        f.context.uc_stack.ss_size = fiber_stack_bytes;
        f.context.uc_link = nullptr;
        makecontext(&f.context, &scheduler::trampoline, 0);
#if defined(METAL_EMU_TSAN)
        f.tsan = __tsan_create_fiber(0);
#endif
    }

    static void trampoline()
    {
        scheduler* s = active();
#if defined(METAL_EMU_ASAN)
        __sanitizer_finish_switch_fiber(nullptr, &s->dispatcher_bottom_, &s->dispatcher_size_);
#endif
        const unsigned t = s->current_;
        for (;;) {
            s->run_(s->context_, t);
            s->fibers_[t].state = fiber::finished;
            s->to_dispatcher(&s->fibers_[t].context, s->last_);
            s = active();
        }
    }

    void resume(unsigned t)
    {
        current_ = t;
#if defined(METAL_EMU_TSAN)
        dispatcher_tsan_ = __tsan_get_current_fiber();
        __tsan_switch_to_fiber(fibers_[t].tsan, 0);
#endif
#if defined(METAL_EMU_ASAN)
        void* fake_stack = nullptr;
        __sanitizer_start_switch_fiber(&fake_stack, fibers_[t].stack.get(), fiber_stack_bytes);
#endif
        swapcontext(&dispatcher_, &fibers_[t].context);
#if defined(METAL_EMU_ASAN)
        __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
    }

    void to_dispatcher(ucontext_t* from, [[maybe_unused]] bool finished)
    {
#if defined(METAL_EMU_TSAN)
        __tsan_switch_to_fiber(dispatcher_tsan_, 0);
#endif
#if defined(METAL_EMU_ASAN)
        // A finished fiber passes no slot: ASan then frees its fake stack.
        void* fake_stack = nullptr;
        __sanitizer_start_switch_fiber(finished ? nullptr : &fake_stack, dispatcher_bottom_, dispatcher_size_);
#endif
        swapcontext(from, &dispatcher_);
#if defined(METAL_EMU_ASAN)
        __sanitizer_finish_switch_fiber(fake_stack, &dispatcher_bottom_, &dispatcher_size_);
#endif
    }

    std::vector<fiber> fibers_;
    entry run_;
    void* context_;
    ucontext_t dispatcher_{};
    unsigned current_ = 0;
    bool started_ = false;
    bool last_ = false;
    [[maybe_unused]] const void* dispatcher_bottom_ = nullptr;
    [[maybe_unused]] std::size_t dispatcher_size_ = 0;
    [[maybe_unused]] void* dispatcher_tsan_ = nullptr;
};

// All threads of the threadgroup; a thread that returns leaves it.
class threadgroup_rendezvous {
public:
    void reset(unsigned threads)
    {
        alive_ = threads;
        exited_ = 0;
        waiting_.clear();
    }

    void arrive(scheduler& s, unsigned thread, call_site site, error_log& errors)
    {
        if (waiting_.empty()) {
            site_ = site;
        } else if (!(site == site_)) {
            errors.add(describe("threads met at different threadgroup_barrier calls", site));
        }
        if (exited_ > 0) {
            errors.add(describe("threadgroup_barrier reached after a thread of the threadgroup returned", site));
        }
        if (waiting_.size() + 1 == alive_) {
            release(s);
        } else {
            waiting_.push_back(thread);
            s.block(thread);
        }
    }

    void leave(scheduler& s, error_log& errors)
    {
        --alive_;
        ++exited_;
        if (!waiting_.empty()) {
            errors.add(describe("a thread returned while others wait at threadgroup_barrier", site_));
            if (waiting_.size() == alive_) {
                release(s);
            }
        }
    }

private:
    void release(scheduler& s)
    {
        for (const unsigned t : waiting_) {
            s.wake(t);
        }
        waiting_.clear();
    }
    unsigned alive_ = 0;
    unsigned exited_ = 0;
    std::vector<unsigned> waiting_;
    call_site site_{"", 0};
};

// The active lanes of one SIMD-group. Exchanges alternate between two slot sets: a lane cannot
// write the set of exchange g + 2 before every lane has arrived at g + 1, that is, has finished
// reading g.
class simdgroup_rendezvous {
public:
    void reset(unsigned first_thread, unsigned lanes)
    {
        first_thread_ = first_thread;
        alive_ = lanes;
        arrived_mask_ = 0;
    }

    std::uint32_t exchange(scheduler& s, unsigned lane, const void* value, std::size_t size, void* all, call_site site,
                           error_log& errors)
    {
        if (size > max_exchange_bytes) {
            errors.add(describe("a SIMD-group function on a value larger than the emulator's slots", site));
            return 0;
        }
        const unsigned set = generation_ & 1u;
        std::memcpy(slots_[set][lane], value, size);
        sites_[lane] = site;
        arrived_mask_ |= 1u << lane;
        if (static_cast<unsigned>(std::popcount(arrived_mask_)) == alive_) {
            release(s, errors);
        } else {
            s.block(first_thread_ + lane);
        }
        const std::uint32_t mask = masks_[set];
        for (unsigned i = 0; i < shim::simd_width; ++i) {
            if ((mask >> i) & 1u) {
                std::memcpy(static_cast<unsigned char*>(all) + i * size, slots_[set][i], size);
            }
        }
        return mask;
    }

    void leave(scheduler& s, error_log& errors)
    {
        --alive_;
        if (arrived_mask_ != 0 && static_cast<unsigned>(std::popcount(arrived_mask_)) == alive_) {
            release(s, errors);
        }
    }

private:
    void release(scheduler& s, error_log& errors)
    {
        const unsigned first = static_cast<unsigned>(std::countr_zero(arrived_mask_));
        for (unsigned i = first + 1; i < shim::simd_width; ++i) {
            if (((arrived_mask_ >> i) & 1u) && !(sites_[i] == sites_[first])) {
                errors.add(describe("lanes of a SIMD-group met at different SIMD-group functions", sites_[i]));
                break;
            }
        }
        for (unsigned i = 0; i < shim::simd_width; ++i) {
            if ((arrived_mask_ >> i) & 1u) {
                s.wake(first_thread_ + i);
            }
        }
        masks_[generation_ & 1u] = arrived_mask_;
        arrived_mask_ = 0;
        ++generation_;
    }
    unsigned first_thread_ = 0;
    unsigned alive_ = 0;
    std::uint32_t arrived_mask_ = 0;
    std::uint32_t masks_[2] = {0, 0};
    std::uint64_t generation_ = 0;
    call_site sites_[shim::simd_width] = {};
    alignas(16) unsigned char slots_[2][shim::simd_width][max_exchange_bytes] = {};
};

struct dispatch_state {
    explicit dispatch_state(unsigned threads, scheduler::entry run, void* context) : fibers(threads, run, context) {}
    error_log errors;
    scheduler fibers;
    threadgroup_rendezvous threadgroup;
    std::vector<simdgroup_rendezvous> simdgroups;
};

class emulated_thread final : public shim::lane_hooks {
public:
    emulated_thread(dispatch_state& state, unsigned thread) : state_(&state), thread_(thread) {}

    // Other fibers ran while this one waited, each naming itself the current lane.
    void threadgroup_barrier(call_site site) override
    {
        state_->threadgroup.arrive(state_->fibers, thread_, site, state_->errors);
        shim::current_lane = this;
    }
    std::uint32_t simd_exchange(const void* value, std::size_t size, void* all, call_site site) override
    {
        const std::uint32_t mask =
            state_->simdgroups[thread_ / shim::simd_width].exchange(state_->fibers, lane(), value, size, all, site, state_->errors);
        shim::current_lane = this;
        return mask;
    }
    unsigned lane() const noexcept override { return thread_ % shim::simd_width; }
    void fail(const char* what, call_site site) override { state_->errors.add(describe(what, site)); }

    void leave()
    {
        state_->threadgroup.leave(state_->fibers, state_->errors);
        state_->simdgroups[thread_ / shim::simd_width].leave(state_->fibers, state_->errors);
    }

private:
    dispatch_state* state_;
    unsigned thread_;
};

inline void check_shape(const dispatch_shape& shape)
{
    const uint3 g = shape.threadgroups;
    const uint3 t = shape.threads_per_threadgroup;
    if (g.x == 0 || g.y == 0 || g.z == 0 || t.x == 0 || t.y == 0 || t.z == 0) {
        throw std::invalid_argument("metal emulator: empty grid or threadgroup");
    }
    if (std::uint64_t{t.x} * t.y * t.z > max_threads_per_threadgroup) {
        throw std::invalid_argument("metal emulator: more than 1024 threads per threadgroup");
    }
    std::size_t total = 0;
    for (const std::size_t bytes : shape.threadgroup_memory) {
        if (bytes % 16 != 0) {
            throw std::invalid_argument("metal emulator: threadgroup memory length " + std::to_string(bytes) +
                                        " is not a multiple of 16 bytes");
        }
        total += bytes;
    }
    if (total > max_threadgroup_memory) {
        throw std::invalid_argument("metal emulator: " + std::to_string(total) + " bytes of threadgroup memory, over 32 KiB");
    }
}

} // namespace detail

// Runs body(const thread_builtins&) once per Metal thread of the grid; body calls the kernel
// with the dispatch's buffers and the builtins it declares. Throws std::invalid_argument for a
// shape Metal would reject and std::runtime_error for kernel errors (see the top of this file).
// Not reentrant: body must not dispatch.
template <class Body>
void dispatch(const dispatch_shape& shape, Body&& body)
{
    detail::check_shape(shape);
    const uint3 tpt = shape.threads_per_threadgroup;
    const uint3 groups = shape.threadgroups;
    const unsigned threads = tpt.x * tpt.y * tpt.z;
    const unsigned simdgroups = (threads + shim::simd_width - 1) / shim::simd_width;

    // Exactly the lengths asked for (multiples of 16), so ASan sees any access past one.
    struct alignas(16) unit {
        std::byte bytes[16];
    };
    std::vector<std::vector<unit>> memory(shape.threadgroup_memory.size());
    std::vector<std::byte*> memory_at;
    for (std::size_t i = 0; i < memory.size(); ++i) {
        memory[i].resize(shape.threadgroup_memory[i] / sizeof(unit));
        memory_at.push_back(reinterpret_cast<std::byte*>(memory[i].data()));
    }

    std::vector<thread_builtins> builtins(threads);
    for (unsigned t = 0; t < threads; ++t) {
        thread_builtins& b = builtins[t];
        b.threadgroups_per_grid = groups;
        b.threads_per_threadgroup = tpt;
        b.threads_per_grid = uint3(groups.x * tpt.x, groups.y * tpt.y, groups.z * tpt.z);
        b.thread_position_in_threadgroup = uint3(t % tpt.x, t / tpt.x % tpt.y, t / (tpt.x * tpt.y));
        b.thread_index_in_threadgroup = t;
        b.thread_index_in_simdgroup = t % shim::simd_width;
        b.simdgroup_index_in_threadgroup = t / shim::simd_width;
        b.threads_per_simdgroup = shim::simd_width;
        b.simdgroups_per_threadgroup = simdgroups;
        b.threadgroup_memory = memory_at.data();
    }

    struct context {
        std::remove_reference_t<Body>* body;
        std::vector<thread_builtins>* builtins;
        std::vector<detail::emulated_thread>* threads;
        detail::dispatch_state* state;
    };
    auto run = [](void* c, unsigned t) {
        auto& ctx = *static_cast<context*>(c);
        shim::current_lane = &(*ctx.threads)[t];
        try {
            (*ctx.body)(static_cast<const thread_builtins&>((*ctx.builtins)[t]));
        } catch (const std::exception& e) {
            ctx.state->errors.add(std::string("the kernel threw: ") + e.what());
        } catch (...) {
            ctx.state->errors.add("the kernel threw");
        }
        shim::current_lane = nullptr;
        (*ctx.threads)[t].leave();
    };
    std::vector<detail::emulated_thread> lanes;
    context ctx{&body, &builtins, &lanes, nullptr};
    detail::dispatch_state state(threads, run, &ctx);
    ctx.state = &state;
    state.simdgroups.resize(simdgroups);
    lanes.reserve(threads);
    for (unsigned t = 0; t < threads; ++t) {
        lanes.emplace_back(state, t);
    }

    const std::uint64_t group_count = std::uint64_t{groups.x} * groups.y * groups.z;
    for (std::uint64_t g = 0; g < group_count; ++g) {
        const auto gx = static_cast<uint>(g % groups.x);
        const auto gy = static_cast<uint>(g / groups.x % groups.y);
        const auto gz = static_cast<uint>(g / (std::uint64_t{groups.x} * groups.y));
        for (thread_builtins& b : builtins) {
            b.threadgroup_position_in_grid = uint3(gx, gy, gz);
            b.thread_position_in_grid = uint3(gx * tpt.x + b.thread_position_in_threadgroup.x, gy * tpt.y + b.thread_position_in_threadgroup.y,
                                              gz * tpt.z + b.thread_position_in_threadgroup.z);
        }
        state.threadgroup.reset(threads);
        for (unsigned s = 0; s < simdgroups; ++s) {
            state.simdgroups[s].reset(s * shim::simd_width, std::min(shim::simd_width, threads - s * shim::simd_width));
        }
        for (auto& m : memory) {
            std::memset(static_cast<void*>(m.data()), 0xff, m.size() * sizeof(unit));
        }
        if (!state.fibers.run_threadgroup(g + 1 == group_count)) {
            state.errors.add("threadgroup (" + std::to_string(gx) + ", " + std::to_string(gy) + ", " + std::to_string(gz) +
                             "): every remaining thread waits and none can go on (a deadlock; divergent barriers?)");
            break;
        }
        // Stop at the first failing threadgroup: one report, not one per group.
        if (state.errors.any()) {
            break;
        }
    }
    state.errors.rethrow();
}

} // namespace metal::emu
