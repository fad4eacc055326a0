// qkern: header-only tensor kernels, token sampling and speculative drafting for LLM inference.
// Include this one header to get everything that is enabled; each concept also has its own
// header under kernels/, gguf/, backends/, sampling/ and spec/ for users who want less.
#pragma once

#define QKERN_VERSION_MAJOR 0
#define QKERN_VERSION_MINOR 1
#define QKERN_VERSION_PATCH 0

#include "backends/cpu/context.hpp"
#include "backends/cpu/gemv.hpp"
#include "backends/cpu/packed_gemm.hpp"
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
