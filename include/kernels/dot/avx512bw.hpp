// Dot products on the AVX-512 tags (xsimd::avx512bw and qk::arch::avx512vnni). xsimd's AVX-512
// tags derive from generic, not from avx2, so without an overload here they would fall back to
// the scalar kernels: this file's explicit fallback sends every pair to the AVX2 kernels until
// 512-bit ones exist (they need an AVX-512 machine to be tested on).
#pragma once

#include <cstddef>

#include "../arch.hpp"
#include "../target.hpp"
#include "avx2.hpp"

#if QK_HAS_X86_KERNELS

namespace qk::kernels {

template <class Arch, class Weight, class Activation>
QK_TARGET_AVX512BW float dot(const Weight* w, const Activation* a, std::size_t blocks, arch::requires_arch<xsimd::avx512f>) noexcept
{
    return dot<Arch>(w, a, blocks, arch::avx2{});
}

} // namespace qk::kernels

#endif
