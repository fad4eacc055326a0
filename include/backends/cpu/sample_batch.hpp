// qk::sampling::sample_batch on a CPU thread pool: the sequences of sampling/batch.hpp's batched
// step spread over the pool's threads (each chain is used by one thread), with the same checks
// and the same tokens as the single-threaded call.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "../../sampling/batch.hpp"
#include "thread_pool.hpp"

namespace qk::sampling {

inline void sample_batch(backend::cpu::thread_pool& pool, std::span<const float> logits, std::size_t n_seq, std::size_t n_vocab,
                         std::span<chain> chains, std::span<const std::uint8_t> active, std::span<std::int32_t> tokens)
try {
    detail::check_batch(logits, n_seq, n_vocab, chains, active, tokens);
    std::vector<std::int32_t> selected(n_seq);
    pool.run(n_seq, [&](std::size_t s) { detail::select_one(logits, n_vocab, chains, active, selected, s); });
    pool.run(n_seq, [&](std::size_t s) { detail::accept_one(chains, selected, s); });
    std::ranges::copy(selected, tokens.begin());
} catch (...) {
    qk::detail::rethrow_as_error("qk::sampling::sample_batch");
}

} // namespace qk::sampling
