// The quantizer kernels on the generic tag: the scalar references of formats/, behind the
// tag-dispatched signature that SIMD overloads (activation formats) share.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "../arch.hpp"
#include "../formats.hpp"

namespace qk::kernels {

template <class Arch, class Block>
void quantize(const float* x, Block* y, std::size_t blocks, arch::requires_arch<arch::generic>) noexcept
{
    reference::quantize(x, y, blocks);
}

// qk::quantize's fused path, for kernels that check while they quantize: false (nothing written)
// means the caller checks and quantizes in separate passes, as every format and tag does here.
template <class Arch, class Block>
bool quantize_checked(const float*, Block*, std::size_t, arch::requires_arch<arch::generic>) noexcept
{
    return false;
}

// The largest |x[i]| as float bits with the sign cleared, for the argument checks of qk::quantize:
// as integers these bits order finite magnitudes, infinity and NaN (above infinity), so one pass
// of integer maxima tells whether every value is finite and below a bound.
template <class Arch>
std::uint32_t max_magnitude_bits(const float* x, std::size_t n, arch::requires_arch<arch::generic>) noexcept
{
    std::uint32_t largest = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const std::uint32_t bits = std::bit_cast<std::uint32_t>(x[i]) & 0x7fffffffu;
        largest = bits > largest ? bits : largest;
    }
    return largest;
}

} // namespace qk::kernels
