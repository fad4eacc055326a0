// Keeps the reference kernels bit-exact with GGUF producers whatever flags the user compiles
// with: every a*b + c in them must be rounded twice, never fused into one FMA.
//
// A header-only library is compiled with the user's flags, and compilers fuse multiply-adds when
// FMA is available (-march=native, always on AArch64). Two guards, because neither is enough:
//  - QK_STRICT_FP / QK_STRICT_FP_BODY switch contraction off for a whole function. g++ decides per
//    function, and a function inlined into a caller takes the caller's setting, so such functions
//    are also kept out of line. Clang honours its pragma, except under -ffp-contract=fast.
//  - detail::rounded(a * b) makes a product opaque to the optimizer, so it cannot be fused into
//    the addition that consumes it under any contraction mode. Every product that feeds an
//    addition or subtraction in a strict function goes through it.
// Usage: `QK_STRICT_FP inline float f(...) { QK_STRICT_FP_BODY ... sum += detail::rounded(a * b); }`
// (-ffast-math, which also reassociates sums, is not supported for the reference kernels.)
#pragma once

#if defined(__clang__)
#define QK_STRICT_FP [[gnu::noinline]]
#define QK_STRICT_FP_BODY _Pragma("clang fp contract(off)")
#elif defined(__GNUC__)
#define QK_STRICT_FP [[gnu::noinline, gnu::optimize("fp-contract=off")]]
#define QK_STRICT_FP_BODY
#else
// MSVC does not contract under its default /fp:precise.
#define QK_STRICT_FP
#define QK_STRICT_FP_BODY
#endif

namespace qk::detail {

// Returns v unchanged, through an empty asm statement that the optimizer cannot look into.
[[nodiscard]] inline float rounded(float v) noexcept
{
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __asm__("" : "+x"(v));
#elif defined(__GNUC__) && (defined(__aarch64__) || defined(__arm__))
    __asm__("" : "+w"(v));
#elif defined(__GNUC__)
    __asm__("" : "+m"(v));
#else
    volatile float stored = v;
    v = stored;
#endif
    return v;
}

} // namespace qk::detail
