// qk::detail::large_buffer: memory for the big buffers that are streamed from RAM (packed weights,
// the read-bandwidth probe's buffer). From 2 MiB up it is aligned to 2 MiB and, on Linux, offered
// to transparent huge pages: a thread streaming over 4 KiB pages pays a TLB walk and a prefetcher
// restart every 4 KiB. On Zen 5, one thread: mat-vec from memory 10-20% faster, and the streaming
// read itself 35-38 -> 40-44 GB/s. Smaller buffers keep 64-byte alignment and ordinary pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#if defined(__linux__) && __has_include(<sys/mman.h>)
#include <sys/mman.h>
#endif

namespace qk::detail {

inline constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;

struct large_buffer_free {
    std::size_t alignment = 64;
    void operator()(std::uint8_t* p) const noexcept { ::operator delete[](p, std::align_val_t{alignment}); }
};

using large_buffer = std::unique_ptr<std::uint8_t[], large_buffer_free>;

// Uninitialized bytes (the caller writes them all, which is also what backs the huge pages).
[[nodiscard]] inline large_buffer allocate_large_buffer(std::size_t bytes)
{
    const std::size_t alignment = bytes >= huge_page_bytes ? huge_page_bytes : 64;
    large_buffer buffer(new (std::align_val_t{alignment}) std::uint8_t[bytes], large_buffer_free{alignment});
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (alignment == huge_page_bytes) {
        // A hint over the whole huge pages inside the allocation; where the kernel declines (THP
        // off, no memory to compact) the pages stay 4 KiB and nothing else changes.
        (void)madvise(buffer.get(), bytes / huge_page_bytes * huge_page_bytes, MADV_HUGEPAGE);
    }
#endif
    return buffer;
}

} // namespace qk::detail
