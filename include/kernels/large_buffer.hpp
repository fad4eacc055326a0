// qk::detail::large_array: memory for the big buffers that are streamed from RAM (packed weights,
// the CPU context's plain rows, the read-bandwidth probe's buffer). From 2 MiB up it is aligned to
// 2 MiB and, on Linux, offered to transparent huge pages: a thread streaming over 4 KiB pages pays
// a TLB walk and a prefetcher restart every 4 KiB. On Zen 5, one thread, the streaming read went
// from 35-38 to 40-44 GB/s; mat-vec from memory from -8% to +20% per format and run (a noisy host).
// Smaller buffers keep 64-byte alignment and ordinary pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <type_traits>
#include <utility>

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

// count T (trivially copyable) in a large_buffer, uninitialized until the owner writes them. A
// value type: copies are deep, moves leave the source empty.
template <class T>
class large_array {
    static_assert(std::is_trivially_copyable_v<T>);

public:
    large_array() = default;
    explicit large_array(std::size_t count) : count_(count), bytes_(count != 0 ? allocate_large_buffer(count * sizeof(T)) : nullptr) {}
    explicit large_array(std::span<const T> values) : large_array(values.size())
    {
        if (count_ != 0) {
            std::memcpy(bytes_.get(), values.data(), values.size_bytes());
        }
    }
    large_array(const large_array& other) : large_array(other.span()) {}
    large_array(large_array&& other) noexcept : count_(std::exchange(other.count_, 0)), bytes_(std::move(other.bytes_)) {}
    large_array& operator=(const large_array& other)
    {
        if (this != &other) {
            *this = large_array(other);
        }
        return *this;
    }
    large_array& operator=(large_array&& other) noexcept
    {
        count_ = std::exchange(other.count_, 0);
        bytes_ = std::move(other.bytes_);
        return *this;
    }
    ~large_array() = default;

    [[nodiscard]] std::size_t size() const noexcept { return count_; }
    [[nodiscard]] T* data() noexcept { return reinterpret_cast<T*>(bytes_.get()); }
    [[nodiscard]] const T* data() const noexcept { return reinterpret_cast<const T*>(bytes_.get()); }
    [[nodiscard]] std::span<T> span() noexcept { return {data(), count_}; }
    [[nodiscard]] std::span<const T> span() const noexcept { return {data(), count_}; }

private:
    std::size_t count_ = 0;
    large_buffer bytes_;
};

} // namespace qk::detail
