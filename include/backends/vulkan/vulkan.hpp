// qk::backend::vulkan: the Vulkan backend (device runtime, mat-vec, solve_tri, sampling, and
// qk::backend::vulkan::context, which offers the operations of qk::backend::cpu::context). It is
// compiled only with QKERN_ENABLE_VULKAN (the qkern::vulkan CMake target defines it and links the
// loader); otherwise this header declares `enabled = false` and the architecture classification.
#pragma once

#include "architecture.hpp"

#if defined(QKERN_ENABLE_VULKAN)
#include "context.hpp"
#include "device.hpp"
#include "gemv.hpp"
#include "read_bandwidth.hpp"
#include "sampling.hpp"
#include "solve_tri.hpp"

namespace qk::backend::vulkan {
inline constexpr bool enabled = true;
}
#else
namespace qk::backend::vulkan {
inline constexpr bool enabled = false;
}
#endif
