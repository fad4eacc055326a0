// kernels::tile_product: 16 rows of packed weights (kernels/packed.hpp) times up to 8 quantized
// activation columns, on an architecture tag: the scalar reference (packed/generic.hpp) on every
// tag, and SIMD kernels where has_tile_kernels<Tag> says so (SSE4.2: packed/sse4_2.hpp; AVX2 and
// AVX-512 BW: packed/avx2.hpp; the VNNI tags: packed/avx512vnni.hpp; AArch64 with dotprod:
// packed/neon64.hpp).
// Single-threaded; backends/cpu drives.
#pragma once

#include <type_traits>

#include "arch.hpp"
#include "packed.hpp"
#include "packed/generic.hpp"
#include "packed/sse4_2.hpp"
#include "packed/avx2.hpp"
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

#if QK_HAS_X86_KERNELS
// xsimd's x86 tags do not form one chain (avx derives from generic, not from sse4_2), so each
// branch above is needed; this keeps one from being lost.
static_assert(has_tile_kernels<arch::sse4_2> && has_tile_kernels<arch::avx2> && has_tile_kernels<arch::avx512bw> &&
              has_tile_kernels<arch::avx512vnni> && has_tile_kernels<arch::avx512vbmi> && !has_tile_kernels<arch::generic>);
#endif

} // namespace qk::kernels
