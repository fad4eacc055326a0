// Batched sampling: one chain per sequence over a [n_seq x n_vocab] logits matrix (row-major),
// with a mask of the sequences active in this step. Inactive sequences are skipped (their chain
// is not touched and their token is -1), so a step with any mask reuses the same chains and
// buffers: nothing is reallocated. backends/cpu/sample_batch.hpp spreads the rows over a thread pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "../kernels/error.hpp"
#include "chain.hpp"

namespace qk::sampling {

namespace detail {

inline void check_batch(std::span<const float> logits, std::size_t n_seq, std::size_t n_vocab, std::span<chain> chains,
                        std::span<const std::uint8_t> active, std::span<std::int32_t> tokens)
{
    if (n_seq == 0 || n_vocab == 0) {
        qk::detail::fail("qk::sampling::sample_batch: n_seq=", n_seq, ", n_vocab=", n_vocab, ": both must be at least 1");
    }
    if (logits.size() / n_seq != n_vocab || logits.size() % n_seq != 0) {
        qk::detail::fail("qk::sampling::sample_batch: logits has ", logits.size(), " elements, not n_seq * n_vocab = ", n_seq,
                         " * ", n_vocab);
    }
    if (chains.size() != n_seq || tokens.size() != n_seq || (!active.empty() && active.size() != n_seq)) {
        qk::detail::fail("qk::sampling::sample_batch: ", chains.size(), " chains, ", tokens.size(), " tokens and ", active.size(),
                         " active flags for n_seq = ", n_seq, " (active may also be empty: all active)");
    }
    // Every row that will be sampled is checked first, so an error leaves every chain untouched.
    for (std::size_t s = 0; s < n_seq; ++s) {
        if (!active.empty() && active[s] == 0) {
            continue;
        }
        const float* row = logits.data() + s * n_vocab;
        if (find_finite<arch::vector_native>(row, n_vocab) == n_vocab) {
            qk::detail::fail("qk::sampling::sample_batch: sequence ", s, ": all ", n_vocab, " logits are -inf or NaN");
        }
        if (chains[s].size() == 0 || !chains[s][chains[s].size() - 1].selects()) {
            qk::detail::fail("qk::sampling::sample_batch: sequence ", s, ": chain '", chains[s].describe(),
                             "' does not end with a selecting sampler");
        }
    }
}

// The one step of sample_batch for sequence s.
inline void sample_one(std::span<const float> logits, std::size_t n_vocab, std::span<chain> chains, std::span<const std::uint8_t> active,
                       std::span<std::int32_t> tokens, std::size_t s)
{
    tokens[s] = -1;
    if (active.empty() || active[s] != 0) {
        tokens[s] = chains[s].sample(logits.subspan(s * n_vocab, n_vocab));
    }
}

} // namespace detail

// Samples and accepts a token for every active sequence (active empty: all are).
inline void sample_batch(std::span<const float> logits, std::size_t n_seq, std::size_t n_vocab, std::span<chain> chains,
                         std::span<const std::uint8_t> active, std::span<std::int32_t> tokens)
{
    detail::check_batch(logits, n_seq, n_vocab, chains, active, tokens);
    for (std::size_t s = 0; s < n_seq; ++s) {
        detail::sample_one(logits, n_vocab, chains, active, tokens, s);
    }
}

} // namespace qk::sampling
