// The argument check of the GPU contexts' sample() (qk::backend::context's batched sampling on a
// device): the shape's bounds that both backends' sampling kernels share, and spans that agree
// with it, raised as a qk::error naming the public function before any chain is touched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "../../kernels/error.hpp"
#include "../../sampling/chain.hpp"

namespace qk::backend::gpu {

// The sampling kernels run a row of workgroups per sequence (65535: the least grid height Vulkan
// guarantees) and index the logits with 32 bits.
inline constexpr std::size_t max_sequences = 65535;
inline constexpr std::uint64_t max_logits = 0xffffffffu;

// n_seq and n_vocab at least 1 and within the kernels' bounds; a chain and a token per sequence;
// an active flag per sequence, or none (all active); n_seq * n_vocab logits.
inline void check_sample_arguments(std::string_view op, std::span<const float> logits, std::size_t n_seq, std::size_t n_vocab,
                                   std::span<const qk::sampling::chain> chains, std::span<const std::uint8_t> active,
                                   std::span<const std::int32_t> tokens)
{
    if (n_seq == 0 || n_vocab == 0) {
        qk::detail::fail(op, ": n_seq = ", n_seq, ", n_vocab = ", n_vocab, "; both must be at least 1");
    }
    if (n_seq > max_sequences || n_vocab > max_logits / n_seq) {
        qk::detail::fail(op, ": n_seq = ", n_seq, " x n_vocab = ", n_vocab,
                         " exceeds the kernels' limits (n_seq <= 65535, n_seq * n_vocab < 2^32)");
    }
    if (chains.size() != n_seq || tokens.size() != n_seq) {
        qk::detail::fail(op, ": ", chains.size(), " chains and ", tokens.size(), " tokens for n_seq = ", n_seq);
    }
    if (!active.empty() && active.size() != n_seq) {
        qk::detail::fail(op, ": ", active.size(), " active flags for n_seq = ", n_seq, " (active may also be empty: all active)");
    }
    if (logits.size() != n_seq * n_vocab) {
        qk::detail::fail(op, ": logits has ", logits.size(), " values, not n_seq * n_vocab = ", n_seq, " * ", n_vocab);
    }
}

} // namespace qk::backend::gpu
