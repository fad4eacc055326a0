// kernels::tile_product: 16 rows of packed weights (kernels/packed.hpp) times up to 8 quantized
// activation columns, on an architecture tag: the scalar reference (packed/generic.hpp) on every
// tag, and SIMD kernels where has_tile_kernels<Tag> says so (SSE4.2: packed/sse4_2.hpp; AVX2 and
// AVX-512 BW: packed/avx2.hpp; the VNNI tags: packed/avx512vnni.hpp; AArch64 with dotprod:
// packed/neon64.hpp).
// Single-threaded; backends/cpu drives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "arch.hpp"
#include "packed.hpp"
#include "packed/generic.hpp"
#include "packed/sse4_2.hpp"
#include "packed/avx2.hpp"
#include "packed/amx.hpp"
#include "packed/avx512vnni.hpp"
#include "packed/neon64.hpp"

namespace qk::kernels {

// Whether Tag has tile kernels of its own; on other tags tile_product runs the scalar reference,
// and the CPU backend keeps plain rows for qk::dot instead.
template <class Tag>
inline constexpr bool has_tile_kernels =
#if QK_HAS_X86_KERNELS
    std::is_base_of_v<arch::sse4_2, Tag> || std::is_base_of_v<arch::avx2, Tag> || std::is_base_of_v<arch::avx512bw, Tag>;
#elif QK_HAS_ARM_KERNELS
    std::is_base_of_v<arch::neon64_dotprod, Tag>;
#else
    false;
#endif

// Two tiles against one activation column (a mat-vec): y0[r] for the 16 rows of `first`, a whole
// tile, and y1[r] for r < rows of `second`, the values tile_product gives for each. The AVX-512
// VNNI kernel reads the two tiles block by block in turn, two memory streams per thread
// (backends/cpu/packed_gemm.hpp says where that pays); on other tags this is two tile_products.
template <class Arch, class Block>
void tile_pair_product(const packed_tile<Block>& first, const packed_tile<Block>& second, const std::uint8_t* entries, float* y0, float* y1,
                       std::size_t rows, arch::requires_arch<arch::generic>) noexcept
{
    tile_product<Arch, Block>(first, entries, 1, y0, packed_tile_rows, packed_tile_rows, Arch{});
    tile_product<Arch, Block>(second, entries, 1, y1, packed_tile_rows, rows, Arch{});
}

#if QK_HAS_X86_KERNELS
// xsimd's x86 tags do not form one chain (avx derives from generic, not from sse4_2), so each
// branch above is needed; this keeps one from being lost.
static_assert(has_tile_kernels<arch::sse4_2> && has_tile_kernels<arch::avx2> && has_tile_kernels<arch::avx512bw> &&
              has_tile_kernels<arch::avx512vnni> && has_tile_kernels<arch::avx512vbmi> && !has_tile_kernels<arch::generic>);
#endif

} // namespace qk::kernels
