// What the running CPU can execute, for run-time dispatch and for tests that skip the tags a
// machine lacks. x86: CPUID plus XGETBV (the OS must save the wider registers); AArch64 Linux:
// the kernel's hardware capability bits.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "arch.hpp"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace qk {

struct cpu_features {
    bool sse4_2 = false;
    bool popcnt = false;
    bool avx2 = false;
    bool fma = false;
    bool f16c = false;
    bool bmi2 = false;
    bool avx512f = false;
    bool avx512bw = false;
    bool avx512dq = false;
    bool avx512vl = false;
    bool avx512vnni = false;
    bool avx512vbmi = false;
    bool amx_int8 = false; // AMX-TILE and AMX-INT8, with the OS saving tile state (Linux asks also a permission: amx_usable)
    bool neon64 = false;
    bool dotprod = false;
};

[[nodiscard]] inline cpu_features detect_cpu_features() noexcept
{
    cpu_features f;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) == 0) {
        return f;
    }
    f.sse4_2 = (c >> 20) & 1;
    f.popcnt = (c >> 23) & 1;
    const bool fma = (c >> 12) & 1;
    const bool f16c = (c >> 29) & 1;
    const bool osxsave = (c >> 27) & 1;
    const bool avx = (c >> 28) & 1;
    std::uint64_t xcr0 = 0;
    if (osxsave) {
        unsigned lo = 0, hi = 0;
        __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        xcr0 = (static_cast<std::uint64_t>(hi) << 32) | lo;
    }
    const bool ymm_saved = (xcr0 & 0x6) == 0x6;        // SSE and AVX state
    const bool zmm_saved = (xcr0 & 0xe6) == 0xe6;      // plus opmask and both halves of ZMM
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) != 0) {
        f.avx2 = avx && ymm_saved && ((b >> 5) & 1);
        f.fma = avx && ymm_saved && fma;
        f.f16c = avx && ymm_saved && f16c;
        f.bmi2 = (b >> 8) & 1;
        f.avx512f = zmm_saved && ((b >> 16) & 1);
        f.avx512dq = f.avx512f && ((b >> 17) & 1);
        f.avx512bw = f.avx512f && ((b >> 30) & 1);
        f.avx512vl = f.avx512f && ((b >> 31) & 1);
        f.avx512vnni = f.avx512f && ((c >> 11) & 1);
        f.avx512vbmi = f.avx512f && ((c >> 1) & 1);
        const bool tiles_saved = (xcr0 & 0x60000) == 0x60000; // XTILECFG and XTILEDATA
        f.amx_int8 = tiles_saved && ((d >> 24) & 1) && ((d >> 25) & 1);
    }
#elif defined(__aarch64__)
    f.neon64 = true;
#if defined(__linux__)
    f.dotprod = (getauxval(AT_HWCAP) & (1ul << 20)) != 0; // HWCAP_ASIMDDP
#elif defined(__ARM_FEATURE_DOTPROD)
    f.dotprod = true;
#endif
#endif
    return f;
}

// Whether the CPU runs every instruction the kernels of tag Tag use.
template <class Tag>
[[nodiscard]] constexpr bool runs(const cpu_features& f) noexcept
{
    if constexpr (std::is_same_v<Tag, arch::avx512vbmi>) {
        return runs<arch::avx512vnni>(f) && f.avx512vbmi;
    } else if constexpr (std::is_same_v<Tag, arch::avx512vnni>) {
        return runs<arch::avx512bw>(f) && f.avx512vnni && f.bmi2;
    } else if constexpr (std::is_same_v<Tag, arch::avx512bw>) {
        return runs<arch::avx2>(f) && f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl;
    } else if constexpr (std::is_same_v<Tag, arch::avx2>) {
        return runs<arch::sse4_2>(f) && f.avx2 && f.fma && f.f16c;
    } else if constexpr (std::is_same_v<Tag, arch::sse4_2>) {
        return f.sse4_2 && f.popcnt;
    } else if constexpr (std::is_same_v<Tag, arch::neon64_dotprod>) {
        return f.neon64 && f.dotprod;
    } else if constexpr (std::is_same_v<Tag, arch::neon64>) {
        return f.neon64;
    } else {
        static_assert(std::is_same_v<Tag, arch::generic>, "runs<Tag>: not one of qkern's tags");
        return true;
    }
}

// Calls f(Tag{}) for each tag of qk::arch::all that the CPU runs, lowest first.
template <class F>
constexpr void for_each_runnable(const cpu_features& cpu, F&& f)
{
    arch::all::for_each([&]<class Tag>(Tag tag) {
        if (runs<Tag>(cpu)) {
            f(tag);
        }
    });
}

// Whether the CPU runs the tag of that name (qk::arch::name); false for a name not in qk::arch::all.
[[nodiscard]] constexpr bool runs(std::string_view tag_name, const cpu_features& cpu)
{
    bool result = false;
    arch::all::visit(tag_name, [&]<class Tag>(Tag) { result = runs<Tag>(cpu); });
    return result;
}

// Whether this process may run the AMX tile kernels (kernels/packed/amx.hpp): the CPU has AMX-INT8
// with AVX-512 VNNI and the OS saves tile state, and, on Linux, which hands tile state out per
// process, the kernel granted it (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, asked once; a
// tile instruction without it is SIGILL). Other systems: false. Tests may stop all AMX use by
// setting QKERN_AMX=0 in the environment before the first call.
[[nodiscard]] inline bool amx_usable() noexcept
{
    static const bool usable = [] {
#if defined(__x86_64__) && defined(__linux__)
        const cpu_features f = detect_cpu_features();
        if (!f.amx_int8 || !runs<arch::avx512vnni>(f)) {
            return false;
        }
        if (const char* setting = std::getenv("QKERN_AMX"); setting != nullptr && std::string_view(setting) == "0") {
            return false;
        }
        constexpr long arch_get_xcomp_perm = 0x1022;
        constexpr long arch_req_xcomp_perm = 0x1023;
        constexpr long xfeature_xtiledata = 18;
        unsigned long permitted = 0;
        return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0 &&
               syscall(SYS_arch_prctl, arch_get_xcomp_perm, &permitted) == 0 && (permitted >> xfeature_xtiledata & 1) != 0;
#else
        return false;
#endif
    }();
    return usable;
}

} // namespace qk
