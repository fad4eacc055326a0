// qk::dot: the dot product of a row of quantized weights with a row of quantized activations
// (Q8_0·Q8_0, MXFP4·Q8_0, IQ4_NL·Q8_0, NVFP4·Q8_0, IQ4_XS·Q8_K), on an architecture tag chosen at compile
// time (qk::arch::native by default). Kernels live under dot/, one file per instruction set.
#pragma once

#include <span>

#include "arch.hpp"
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

template <weight_format Block, class Arch = arch::native>
[[nodiscard]] float dot(std::span<const Block> w, std::span<const typename format_traits<Block>::vec_dot_type> a)
{
    using activation = typename format_traits<Block>::vec_dot_type;
    if (w.size() * activation_blocks_per_block<Block> != a.size()) {
        detail::fail("qk::dot<", format_traits<Block>::name, ">: w has ", w.size(), " blocks (", w.size() * format_traits<Block>::block_size,
                     " values) but a has ", a.size(), " ", format_traits<activation>::name, " blocks (",
                     a.size() * format_traits<activation>::block_size, " values)");
    }
    return kernels::dot<Arch>(w.data(), a.data(), w.size(), Arch{});
}

} // namespace qk
