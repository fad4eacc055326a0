// qk::backend::metal: the Metal backend (mat-vec, solve_tri and sampling on Apple GPUs, the same
// operations as qk::backend::cpu::context and qk::backend::vulkan::context). Its host code needs
// an Apple platform, metal-cpp and QKERN_ENABLE_METAL; elsewhere this header declares
// `enabled = false`, and naming qk::backend::metal::context is a compile-time error saying why.
#pragma once

#if defined(__APPLE__) && defined(QKERN_ENABLE_METAL)
#include "context.hpp"
#include "device.hpp"
#include "kernels.hpp"

namespace qk::backend::metal {
inline constexpr bool enabled = true;
}
#else
namespace qk::backend::metal {

inline constexpr bool enabled = false;

namespace detail {
template <class>
inline constexpr bool unavailable = false;
}

// Instantiated only when a program uses the context, so that including qkern.hpp stays fine.
template <class Tag = void>
class basic_context {
    static_assert(detail::unavailable<Tag>,
                  "qk::backend::metal needs an Apple platform with Metal and metal-cpp, and QKERN_ENABLE_METAL defined "
                  "(on Linux and Windows use qk::backend::vulkan::context or qk::backend::cpu::context)");
};
using context = basic_context<>;

} // namespace qk::backend::metal
#endif
