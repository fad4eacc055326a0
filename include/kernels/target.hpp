// Per-function instruction-set targets for the SIMD kernels. Each kernel carries the attribute of
// its tag, so every kernel compiles in every translation unit whatever the global flags: a
// portable binary (no -m flags) can hold all of them and pick one at run time (dispatch.hpp),
// and a -march=native build inlines the one qk::arch::native names.
#pragma once

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define QK_HAS_X86_KERNELS 1
#define QK_TARGET_SSE4_2 __attribute__((target("sse4.2,popcnt")))
#define QK_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define QK_TARGET_AVX512BW __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))
#define QK_TARGET_AVX512VNNI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c,bmi2")))
#define QK_TARGET_AVX512VBMI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,bmi2")))
// The AMX tile kernel (packed/amx.hpp): AVX-512 VNNI's set and the int8 tile instructions.
#define QK_TARGET_AMX __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c,bmi2,amx-tile,amx-int8")))
#else
#define QK_HAS_X86_KERNELS 0
#endif

#if defined(__aarch64__) && defined(__GNUC__)
#define QK_HAS_ARM_KERNELS 1
#define QK_TARGET_NEON64
// dotprod: where the flags already enable it, no attribute, so the kernels keep all of the user's
// -march. Otherwise g++ needs the whole architecture named: its arm_neon.h declares vdotq_s32
// under target("arch=armv8.2-a+dotprod"), which "+dotprod" on Armv8.0 does not satisfy ("inlining
// failed ... target specific option mismatch"), and binutils assembles sdot only for Armv8.2.
// arch= replaces the user's -march for these functions, so their helpers carry the same attribute
// (a helper with the user's flags cannot be inlined into them when those name more than Armv8.2).
// Clang adds the feature to the user's flags (clang before 16 then lacks vdotq_s32 itself: see
// dot/neon64.hpp).
#if defined(__ARM_FEATURE_DOTPROD)
#define QK_TARGET_NEON64_DOTPROD
#elif defined(__clang__)
#define QK_TARGET_NEON64_DOTPROD __attribute__((target("dotprod")))
#else
#define QK_TARGET_NEON64_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#endif
#else
#define QK_HAS_ARM_KERNELS 0
#endif
