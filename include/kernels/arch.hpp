// Architecture tags: the compile-time names of instruction sets that kernels are specialized on.
// They are xsimd's tag types (which inherit, avx2 -> avx -> ... -> sse2 -> generic), so a
// kernel overload for a parent tag also serves its children until a faster overload exists.
#pragma once

#include <type_traits>

#include <xsimd/xsimd.hpp>

namespace qk::arch {

// The portable scalar kernels: the reference every other tag is tested against.
using generic = xsimd::generic;

// The best tag the compiler flags enable (e.g. avx2 under -mavx2, neon64 on AArch64), or
// generic where xsimd knows none.
using native = std::conditional_t<std::is_same_v<xsimd::default_arch, xsimd::unavailable>, generic, xsimd::default_arch>;

// Kernels take their tag as `requires_arch<Tag>` (a const reference), so overload resolution picks
// the most derived tag that has an overload.
template <class Tag>
using requires_arch = xsimd::kernel::requires_arch<Tag>;

} // namespace qk::arch
