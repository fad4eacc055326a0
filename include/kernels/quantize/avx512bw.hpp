// Activation quantizers on the AVX-512 tags. As for the dot products (dot/avx512bw.hpp), xsimd's
// AVX-512 tags derive from generic, so this explicit fallback sends Q8_0 and Q8_K to the AVX2
// kernels; the other formats keep the scalar reference.
#pragma once

#include <cstddef>

#include "../arch.hpp"
#include "../formats.hpp"
#include "../target.hpp"
#include "avx2.hpp"

#if QK_HAS_X86_KERNELS

namespace qk::kernels {

template <class Arch>
QK_TARGET_AVX512BW void quantize(const float* x, block_q8_0* y, std::size_t blocks, arch::requires_arch<xsimd::avx512f>) noexcept
{
    quantize<Arch>(x, y, blocks, arch::avx2{});
}

template <class Arch>
QK_TARGET_AVX512BW void quantize(const float* x, block_q8_K* y, std::size_t blocks, arch::requires_arch<xsimd::avx512f>) noexcept
{
    quantize<Arch>(x, y, blocks, arch::avx2{});
}

} // namespace qk::kernels

#endif
