// qkern: header-only tensor kernels, token sampling and speculative drafting for LLM inference.
// Include this one header to get everything that is enabled: the CPU kernels and drivers, GGUF
// files, sampling and drafting. A GPU backend is parsed only when enabled (QKERN_ENABLE_VULKAN,
// which the qkern::vulkan CMake target defines; QKERN_ENABLE_METAL on Apple platforms): otherwise
// backends/vulkan/vulkan.hpp and backends/metal/metal.hpp declare little more than
// `enabled = false`, and no device code or shader array is parsed (scripts/check-headers.sh checks it).
// Each area also has its own header, which compiles on its own, for users who want less (and a
// faster compile; the README lists what each costs): kernels/dot.hpp, kernels/quantize.hpp,
// kernels/solve_tri.hpp, gguf/gguf.hpp, sampling/sampling.hpp, spec/spec.hpp, backends/cpu/*.hpp.
#pragma once

#define QKERN_VERSION_MAJOR 0
#define QKERN_VERSION_MINOR 1
#define QKERN_VERSION_PATCH 0

#include "backends/cpu/context.hpp"
#include "backends/cpu/gemv.hpp"
#include "backends/cpu/packed_gemm.hpp"
#include "backends/cpu/quantize.hpp"
#include "backends/cpu/sample_batch.hpp"
#include "backends/cpu/solve_tri.hpp"
#include "backends/cpu/thread_pool.hpp"
#include "backends/metal/metal.hpp"
#include "backends/vulkan/vulkan.hpp"
#include "kernels/arch.hpp"
#include "kernels/cpu_features.hpp"
#include "kernels/dispatch.hpp"
#include "kernels/dot.hpp"
#include "kernels/e8m0.hpp"
#include "kernels/error.hpp"
#include "kernels/formats.hpp"
#include "kernels/fp16.hpp"
#include "kernels/packed.hpp"
#include "kernels/quantize.hpp"
#include "kernels/solve_tri.hpp"
#include "kernels/tensor_view.hpp"
#include "kernels/tile_product.hpp"
#include "gguf/gguf.hpp"
#include "sampling/sampling.hpp"
#include "spec/spec.hpp"
