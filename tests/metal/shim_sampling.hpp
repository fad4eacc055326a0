// What kernel_sampling_top_k needs beyond the shared Metal shim: threadgroup atomics
// (atomic_uint with the relaxed explicit operations). Declared in their own namespace and
// brought into the kernels' wrapper namespace by using-declarations, so that they take
// precedence over any the shim may gain later instead of clashing with them.
#pragma once

#include <atomic>
#include <cstdint>

namespace qk_metal_sampling_shim {

enum memory_order { memory_order_relaxed };

// Lives in threadgroup memory (raw bytes the emulator hands out), so it is a plain word that
// each operation accesses through std::atomic_ref: the emulated threads of a threadgroup are
// real threads, and their histogram increments race as they would on the GPU.
struct atomic_uint {
    std::uint32_t value;
};

inline std::atomic_ref<std::uint32_t> word(volatile atomic_uint* a) noexcept
{
    return std::atomic_ref<std::uint32_t>(const_cast<atomic_uint*>(a)->value);
}

inline void atomic_store_explicit(volatile atomic_uint* a, std::uint32_t v, memory_order) noexcept
{
    word(a).store(v, std::memory_order_relaxed);
}

inline std::uint32_t atomic_load_explicit(volatile atomic_uint* a, memory_order) noexcept
{
    return word(a).load(std::memory_order_relaxed);
}

inline std::uint32_t atomic_fetch_add_explicit(volatile atomic_uint* a, std::uint32_t v, memory_order) noexcept
{
    return word(a).fetch_add(v, std::memory_order_relaxed);
}

} // namespace qk_metal_sampling_shim
