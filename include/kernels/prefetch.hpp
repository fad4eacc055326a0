// qk::detail::prefetch_line: a hint that the line holding the byte `ahead` bytes past p is read
// soon, brought into L1 (prefetcht0 on x86, prfm pldl1keep on Arm). The mat-vec kernels give it
// several KiB ahead of what they read, which runs past the end of a row or of the whole matrix:
// the address is formed as an integer, never as a pointer beyond its object, and a prefetch of
// any address only fetches a line (it never faults).
#pragma once

#include <cstddef>
#include <cstdint>

namespace qk::detail {

[[gnu::always_inline]] inline void prefetch_line(const void* p, std::size_t ahead) noexcept
{
    const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(p) + ahead;
    __builtin_prefetch(reinterpret_cast<const void*>(address), 0, 3);
}

} // namespace qk::detail
