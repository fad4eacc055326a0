// qk::backend::gpu::grow: the growth rule of the GPU backends' workspaces, which keep their
// buffers between calls and replace one only when a call needs more, so that calls of a steady
// shape allocate nothing. Templated on the backend's buffer; the backend says how one is made.
#pragma once

#include <cstddef>
#include <utility>

namespace qk::backend::gpu {

// `b`, replaced by make_buffer(bytes) when it holds fewer than `bytes` or is empty: kernels bind
// every buffer they are given, so even 0 bytes gets a real one. The old buffer is released
// before the new one is made, so growing never holds both. make_buffer is called only when a
// buffer is made (a workspace may count allocations in it) and may pass its own arguments, such
// as a memory kind.
template <class Buffer, class MakeBuffer>
const Buffer& grow(Buffer& b, std::size_t bytes, MakeBuffer&& make_buffer)
{
    if (b.size() < bytes || b.size() == 0) {
        b = Buffer();
        b = std::forward<MakeBuffer>(make_buffer)(bytes);
    }
    return b;
}

} // namespace qk::backend::gpu
