// qk::detail::prefetch_stream: the software prefetch that mat-vec kernels and drivers issue ahead
// of the weights they stream from memory, at one distance and into one cache level for all of
// them (the plain-row driver in backends/cpu/gemv.hpp, the tile kernels in kernels/packed/).
#pragma once

#include <cstddef>
#include <cstdint>

namespace qk::detail {

// The hardware prefetchers stop at 4 KiB pages, so a thread streaming rows asks for the bytes
// this far ahead of those it reads. Into L2 (prefetcht1 on x86, pldl2keep on Arm), not L1: on
// Zen 4 (family 25), one thread over 1 GiB of Q8_0 rows, prefetcht0 4 KiB ahead held the plain
// mat-vec to 37-55% of the streaming read, against 77-79% without prefetches and 70-75% with
// prefetcht1 8 KiB ahead, and the L2 form was as good as or better than prefetcht0 for the packed
// tiles. On Zen 5, where prefetcht0 at 4 KiB was chosen (median pass 72-75% -> 78-83% for Q8_0
// rows), the L2 form has not been measured.
inline constexpr std::size_t stream_prefetch_bytes = 8192;

// An address, not a pointer: near the end of a buffer it points past the allocation, which a
// prefetch may (it never faults) but pointer arithmetic may not.
inline void prefetch_stream(const void* p, std::size_t ahead = stream_prefetch_bytes) noexcept
{
    __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) + ahead), 0, 2);
}

} // namespace qk::detail
