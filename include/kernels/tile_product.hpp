// kernels::tile_product: 16 rows of packed weights (kernels/packed.hpp) times up to 8 quantized
// activation columns, on an architecture tag: the scalar reference (packed/generic.hpp) on every
// tag, and SIMD kernels where has_tile_kernels<Tag> says so. Single-threaded; backends/cpu drives.
#pragma once

#include <type_traits>

#include "arch.hpp"
#include "packed.hpp"
#include "packed/generic.hpp"
#include "packed/avx512vnni.hpp"

namespace qk::kernels {

// Whether Tag has tile kernels of its own; on other tags tile_product runs the scalar reference,
// and the CPU backend keeps plain rows for qk::dot instead.
template <class Tag>
inline constexpr bool has_tile_kernels =
#if QK_HAS_X86_KERNELS
    std::is_base_of_v<arch::avx512vnni, Tag>;
#else
    false;
#endif

} // namespace qk::kernels
