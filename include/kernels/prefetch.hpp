// qk::detail::prefetch_line: a hint that the line holding the byte `ahead` bytes past p is read
// soon, brought into L1 (prefetcht0 on x86, prfm pldl1keep on Arm); prefetch_lines, one such hint
// per 64 bytes of a span. The mat-vec kernels give it several KiB ahead of what they read, which
// runs past the end of a row or of the whole matrix: the address is formed as an integer, never
// as a pointer beyond its object, and a prefetch of any address only fetches a line (it never
// faults).
#pragma once

#include <cstddef>
#include <cstdint>

namespace qk::detail {

[[gnu::always_inline]] inline void prefetch_line(const void* p, std::size_t ahead) noexcept
{
    const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(p) + ahead;
    __builtin_prefetch(reinterpret_cast<const void*>(address), 0, 3);
}

// A hint every 64 bytes from p + ahead, `bytes` bytes long (a whole number of lines where p +
// ahead starts one; the kernels call it for spans that follow one another, which covers them).
[[gnu::always_inline]] inline void prefetch_lines(const void* p, std::size_t ahead, std::size_t bytes) noexcept
{
#pragma GCC unroll 8
    for (std::size_t line = 0; line < bytes; line += 64) {
        prefetch_line(p, ahead + line);
    }
}

} // namespace qk::detail
