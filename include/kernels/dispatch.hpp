// Run-time dispatch for portable binaries: qk::dispatch(f) calls f with the best tag the running
// CPU supports among those qkern has kernels for on this architecture. Compile-time dispatch
// (qk::arch::native) stays the default; this is the opt-in for binaries built without -march.
#pragma once

#include "arch.hpp"
#include "cpu_features.hpp"
#include "target.hpp"

namespace qk {

// The CPU's features, read once: they cannot change while the program runs.
[[nodiscard]] inline const cpu_features& running_cpu() noexcept
{
    static const cpu_features features = detect_cpu_features();
    return features;
}

// Calls f(Tag{}) with the best supported tag; f must accept every tag (a generic lambda).
template <class F>
decltype(auto) dispatch(F&& f)
{
    [[maybe_unused]] const cpu_features& cpu = running_cpu();
#if QK_HAS_X86_KERNELS
    if (runs<arch::avx512vnni>(cpu)) {
        return f(arch::avx512vnni{});
    }
    if (runs<arch::avx512bw>(cpu)) {
        return f(arch::avx512bw{});
    }
    if (runs<arch::avx2>(cpu)) {
        return f(arch::avx2{});
    }
    if (runs<arch::sse4_2>(cpu)) {
        return f(arch::sse4_2{});
    }
#elif QK_HAS_ARM_KERNELS
    if (runs<arch::neon64_dotprod>(cpu)) {
        return f(arch::neon64_dotprod{});
    }
    return f(arch::neon64{});
#endif
    return f(arch::generic{});
}

} // namespace qk
