// qk::tensor_view: a strided 4-D view of someone else's memory, laid out as ggml lays tensors out
// (ne: elements per dimension, innermost first; nb: byte strides), so kernels such as solve_tri
// can work on slices, transposes and broadcasts of a caller's tensors without copying them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace qk {

template <class T>
struct tensor_view {
    T* data = nullptr;
    // Elements per dimension: ne[0] is the row length (columns), ne[1] the rows, ne[2] and ne[3]
    // the batch dimensions.
    std::array<std::int64_t, 4> ne{1, 1, 1, 1};
    // Byte strides per dimension; 0 repeats one slice along that dimension (a broadcast).
    std::array<std::int64_t, 4> nb{0, 0, 0, 0};

    // A dense row-major tensor of ne0 x ne1 x ne2 x ne3 elements (ggml's ggml_new_tensor_4d).
    [[nodiscard]] static constexpr tensor_view contiguous(T* data, std::int64_t ne0, std::int64_t ne1 = 1, std::int64_t ne2 = 1,
                                                          std::int64_t ne3 = 1) noexcept
    {
        constexpr auto size = static_cast<std::int64_t>(sizeof(T));
        return {data, {ne0, ne1, ne2, ne3}, {size, size * ne0, size * ne0 * ne1, size * ne0 * ne1 * ne2}};
    }

    // The element at column i0, row i1, batch (i2, i3). No bounds check: callers validate once.
    [[nodiscard]] T& at(std::int64_t i0, std::int64_t i1, std::int64_t i2 = 0, std::int64_t i3 = 0) const noexcept
    {
        using byte = std::conditional_t<std::is_const_v<T>, const std::byte, std::byte>;
        byte* p = reinterpret_cast<byte*>(data) + i0 * nb[0] + i1 * nb[1] + i2 * nb[2] + i3 * nb[3];
        return *reinterpret_cast<T*>(p);
    }

    // A read-only view of the same elements.
    template <class U = T>
        requires(!std::is_const_v<U>)
    [[nodiscard]] constexpr operator tensor_view<const U>() const noexcept
    {
        return {data, ne, nb};
    }
};

} // namespace qk
