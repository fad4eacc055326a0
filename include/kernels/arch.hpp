// Architecture tags: the compile-time names of instruction sets that kernels are specialized on.
// They are xsimd's tag types (which inherit, avx2 -> avx -> ... -> sse2 -> generic) plus ours
// where xsimd has none (AVX-512 VNNI and VBMI, Arm's dot-product extension). A kernel overload for a
// parent tag also serves its children until a faster overload exists; generic is the last
// fallback. qk::arch::native is the best tag the compiler flags enable.
//
// qk::arch::all is the one list of the tags qkern has kernels for on the target architecture:
// dispatch, the feature checks, the tests, the tool and the benchmarks all walk it, so a new tag
// is its own kernel files plus one entry there (and in cpu_features.hpp's runs()).
#pragma once

#include <cstddef>
#include <string_view>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "target.hpp"

namespace qk::arch {

// The portable scalar kernels: the reference every other tag is tested against.
using generic = xsimd::generic;

// x86-64-v2.
using sse4_2 = xsimd::sse4_2;
// AVX2 kernels also use FMA and F16C, which every AVX2 CPU has.
using avx2 = xsimd::avx2;
// AVX-512 F/BW/DQ/VL (Skylake-SP and later, Zen 4).
using avx512bw = xsimd::avx512bw;

// AVX-512 with VNNI's vpdpbusd (Cascade Lake, Zen 4): int8 dot products in one instruction; also
// BMI2's pdep (every AVX-512 CPU has it) for scattering bit fields in integer registers.
struct avx512vnni : xsimd::avx512bw {
    static constexpr unsigned version() noexcept { return xsimd::generic::version(3, 5, 0); }
    static constexpr char const* name() noexcept { return "avx512vnni"; }
};

// VNNI plus AVX-512 VBMI's byte permutes, vpermb and vpermt2b (Ice Lake, Zen 4): 64-entry table
// lookups that need no masking of the index bits, and byte gathers across two registers.
struct avx512vbmi : avx512vnni {
    static constexpr unsigned version() noexcept { return xsimd::generic::version(3, 6, 0); }
    static constexpr char const* name() noexcept { return "avx512vbmi"; }
};

// AArch64 Advanced SIMD.
using neon64 = xsimd::neon64;

// AArch64 with the Armv8.2 dot-product instructions (sdot/udot).
struct neon64_dotprod : xsimd::neon64 {
    static constexpr unsigned version() noexcept { return xsimd::generic::version(8, 2, 0); }
    static constexpr char const* name() noexcept { return "neon64_dotprod"; }
};

// Kernels take their tag as `requires_arch<Tag>` (a const reference), so overload resolution picks
// the most derived tag that has an overload.
template <class Tag>
using requires_arch = xsimd::kernel::requires_arch<Tag>;

// A tag's name for messages, reports, test names and command lines: the C++ name of qkern's tags
// (xsimd spells sse4_2 "sse4.2" and neon64 "arm64+neon", and has none for generic); for xsimd's
// other tags (sse2, the baseline vectors of a build without -march), xsimd's name.
template <class Tag>
[[nodiscard]] constexpr const char* name() noexcept
{
    if constexpr (std::is_same_v<Tag, generic>) {
        return "generic";
    } else if constexpr (std::is_same_v<Tag, sse4_2>) {
        return "sse4_2";
    } else if constexpr (std::is_same_v<Tag, neon64>) {
        return "neon64";
    } else {
        return Tag::name();
    }
}

// A list of tags, lowest first; for_each(f) calls f(Tag{}) for each in that order.
template <class... Tags>
struct tag_list {
    static constexpr std::size_t size = sizeof...(Tags);

    template <class F>
    static constexpr void for_each(F&& f)
    {
        (f(Tags{}), ...);
    }

    // Whether name is one of the list's names, and f(Tag{}) for the tag of that name.
    template <class F>
    static constexpr bool visit(std::string_view tag_name, F&& f)
    {
        return ((tag_name == name<Tags>() ? (f(Tags{}), true) : false) || ...);
    }
};

// Every tag qkern has kernels for on this architecture, the scalar reference first, each tag
// after the ones it extends.
#if QK_HAS_X86_KERNELS
using all = tag_list<generic, sse4_2, avx2, avx512bw, avx512vnni, avx512vbmi>;
#elif QK_HAS_ARM_KERNELS
using all = tag_list<generic, neon64, neon64_dotprod>;
#else
using all = tag_list<generic>;
#endif

// The best tag the compiler flags enable. Each tag needs all the features its kernels use.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(__AVX512VBMI__) && defined(__FMA__) && defined(__F16C__) && defined(__BMI2__)
using native = avx512vbmi;
#elif defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(__FMA__) && defined(__F16C__) && defined(__BMI2__)
using native = avx512vnni;
#elif defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__) && defined(__FMA__) && \
    defined(__F16C__)
using native = avx512bw;
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
using native = avx2;
#elif defined(__SSE4_2__) && defined(__POPCNT__)
using native = sse4_2;
#elif defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
using native = neon64_dotprod;
#elif defined(__aarch64__)
using native = neon64;
#else
using native = generic;
#endif

// Not an instruction set: the entry points that take a tag (qk::dot, qk::quantize, qk::gemv,
// qk::gemm) resolve it to the best tag of qk::arch::all that the running CPU supports, chosen
// once (qk::dispatch), and call that tag's kernels. Naming it forces run-time choice in any build.
struct runtime {
    static constexpr const char* name() noexcept { return "runtime"; }
};

// The tag those entry points use when none is given. A build whose flags enable a qkern tag
// uses it (qk::arch::native: inlined, no indirection); one whose flags enable nothing better than
// the baseline (no -march: what packagers and most CMake users build) chooses at run time rather
// than silently run the scalar reference, where qkern has SIMD kernels for the architecture.
using default_tag = std::conditional_t<std::is_same_v<native, generic> && (all::size > 1), runtime, native>;

// The tag of kernels written as plain xsimd arithmetic (solve_tri, the sampling passes):
// qk::arch::native, or where the flags name no qkern tag (a baseline x86-64 build), the SIMD that
// every such CPU has (SSE2). A tag named explicitly must be enabled by the compiler flags (xsimd
// provides its vectors only then); generic is the scalar reference.
#if defined(XSIMD_NO_SUPPORTED_ARCHITECTURE)
using vector_native = generic;
#else
using vector_native = std::conditional_t<std::is_same_v<native, generic>, xsimd::default_arch, native>;
#endif

} // namespace qk::arch

namespace qk::detail {

// qkern's own tags map to the xsimd tag whose vectors they use; qkern's avx2 includes FMA.
template <class Tag>
struct xsimd_arch_of {
    using type = Tag;
};
template <>
struct xsimd_arch_of<arch::avx2> {
    using type = xsimd::fma3<xsimd::avx2>;
};
template <>
struct xsimd_arch_of<arch::avx512vnni> {
    using type = xsimd::avx512bw;
};
template <>
struct xsimd_arch_of<arch::avx512vbmi> {
    using type = xsimd::avx512bw;
};
template <>
struct xsimd_arch_of<arch::neon64_dotprod> {
    using type = xsimd::neon64;
};

} // namespace qk::detail

namespace qk::arch {

// The xsimd architecture whose vectors a tag's code uses. xsimd knows only its own tags, so
// anything handed to xsimd (xsimd::batch<float, xsimd_of<Tag>>) goes through this: a qkern tag
// such as avx512vnni or neon64_dotprod given to xsimd directly does not compile, and does so only
// in builds whose flags select that tag.
template <class Tag>
using xsimd_of = typename detail::xsimd_arch_of<Tag>::type;

} // namespace qk::arch
