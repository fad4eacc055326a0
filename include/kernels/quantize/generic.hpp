// The quantizer kernels on the generic tag: the scalar references of formats/, behind the
// tag-dispatched signature that SIMD overloads (activation formats) share.
#pragma once

#include <cstddef>

#include "../arch.hpp"
#include "../formats.hpp"

namespace qk::kernels {

template <class Arch, class Block>
void quantize(const float* x, Block* y, std::size_t blocks, arch::requires_arch<arch::generic>) noexcept
{
    reference::quantize(x, y, blocks);
}

} // namespace qk::kernels
