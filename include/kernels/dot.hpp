// qk::dot: the dot product of a row of quantized weights with a row of quantized activations
// (Q8_0·Q8_0, MXFP4·Q8_0, IQ4_NL·Q8_0, NVFP4·Q8_0, IQ4_XS·Q8_K), on an architecture tag: by default
// qk::arch::default_tag (the flags' tag, or in a build without -march the running CPU's best,
// chosen once). Kernels live under dot/, one file per instruction set. Activation blocks are
// those qk::quantize writes, codes in [-127, 127]: a code of -128, which no quantizer writes,
// makes the SIMD tags' results differ from the reference's (x86's sign instructions cannot negate it).
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>

#include "arch.hpp"
#include "dispatch.hpp"
#include "dot/generic.hpp"
#include "dot/sse4_2.hpp"
#include "dot/avx2.hpp"
#include "dot/avx512bw.hpp"
#include "dot/avx512vnni.hpp"
#include "dot/avx512vbmi.hpp"
#include "dot/neon64.hpp"
#include "error.hpp"
#include "formats.hpp"

namespace qk {
namespace detail {

template <class Block>
using dot_kernel = float (*)(const Block*, const typename format_traits<Block>::vec_dot_type*, std::size_t);

template <class Block, class Tag>
float dot_on(const Block* w, const typename format_traits<Block>::vec_dot_type* a, std::size_t blocks)
{
    return kernels::dot<Tag>(w, a, blocks, Tag{});
}

// The running CPU's best kernel, looked up on the first call: later calls cost one indirect call,
// not a walk over the CPU's features (a dot over one row is a few dozen nanoseconds).
template <class Block>
[[nodiscard]] dot_kernel<Block> runtime_dot() noexcept
{
    static const dot_kernel<Block> kernel = dispatch([]<class Tag>(Tag) noexcept -> dot_kernel<Block> { return &dot_on<Block, Tag>; });
    return kernel;
}

} // namespace detail

template <weight_format Block, class Arch = arch::default_tag>
[[nodiscard]] float dot(std::span<const Block> w, std::span<const typename format_traits<Block>::vec_dot_type> a)
{
    using activation = typename format_traits<Block>::vec_dot_type;
    if (w.size() * activation_blocks_per_block<Block> != a.size()) {
        detail::fail("qk::dot<", format_traits<Block>::name, ">: w has ", w.size(), " blocks (", w.size() * format_traits<Block>::block_size,
                     " values) but a has ", a.size(), " ", format_traits<activation>::name, " blocks (",
                     a.size() * format_traits<activation>::block_size, " values)");
    }
    if constexpr (std::is_same_v<Arch, arch::runtime>) {
        return detail::runtime_dot<Block>()(w.data(), a.data(), w.size());
    } else {
        return kernels::dot<Arch>(w.data(), a.data(), w.size(), Arch{});
    }
}

} // namespace qk
