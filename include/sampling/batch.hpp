// Batched sampling: one chain per sequence over a [n_seq x n_vocab] logits matrix (row-major),
// with a mask of the sequences active in this step. Inactive sequences are skipped (their chain
// is not touched and their token is -1), so a step with any mask reuses the same chains and
// buffers: nothing is reallocated but the step's n_seq token ids. backends/cpu/sample_batch.hpp spreads the rows over a thread pool.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

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
    // Before the rows are scanned: a vocabulary the token ids cannot number is refused by its size.
    if (n_vocab > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
        qk::detail::fail("qk::sampling::sample_batch: n_vocab=", n_vocab, " exceeds the token id type (at most ",
                         std::numeric_limits<std::int32_t>::max(), ")");
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

// The two halves of a step for sequence s: selecting (which may allocate, and changes no chain's
// state but its generators') and accepting (which, room made by prepare_accept(), allocates
// nothing, unless a sampler of the caller's own allocates in accept() without that hook). All sequences select before any accepts, so that running out of memory leaves every
// chain's history as it was and no token written.
inline void select_one(std::span<const float> logits, std::size_t n_vocab, std::span<chain> chains, std::span<const std::uint8_t> active,
                       std::span<std::int32_t> selected, std::size_t s)
{
    selected[s] = -1;
    if (active.empty() || active[s] != 0) {
        chains[s].prepare_accept();
        selected[s] = chains[s].select(logits.subspan(s * n_vocab, n_vocab));
    }
}

inline void accept_one(std::span<chain> chains, std::span<const std::int32_t> selected, std::size_t s)
{
    if (selected[s] >= 0) {
        chains[s].accept(selected[s]);
    }
}

} // namespace detail

// Samples and accepts a token for every active sequence (active empty: all are). On any error,
// memory running out included, no token is written and no chain has accepted anything (their
// generators may have drawn, as select() does).
inline void sample_batch(std::span<const float> logits, std::size_t n_seq, std::size_t n_vocab, std::span<chain> chains,
                         std::span<const std::uint8_t> active, std::span<std::int32_t> tokens)
try {
    detail::check_batch(logits, n_seq, n_vocab, chains, active, tokens);
    std::vector<std::int32_t> selected(n_seq);
    for (std::size_t s = 0; s < n_seq; ++s) {
        detail::select_one(logits, n_vocab, chains, active, selected, s);
    }
    for (std::size_t s = 0; s < n_seq; ++s) {
        detail::accept_one(chains, selected, s);
    }
    std::ranges::copy(selected, tokens.begin());
} catch (...) {
    qk::detail::rethrow_as_error("qk::sampling::sample_batch");
}

} // namespace qk::sampling
