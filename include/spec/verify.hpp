// Draft verification: which drafted tokens the target model accepts after evaluating the whole
// draft in one batch, and the token it adds. Greedy verification compares with the target's
// argmax tokens; stochastic verification is the speculative-sampling rule, which leaves the
// target's distribution unchanged (drafts from n-gram drafters are deterministic: q = 1).
// Memory running out is a qk::error, with the chain and the random source as they were.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "../kernels/error.hpp"
#include "../sampling/chain.hpp"
#include "../sampling/random.hpp"

namespace qk::spec {

struct verification {
    std::size_t accepted = 0;          // drafted tokens accepted
    std::vector<std::int32_t> tokens;  // the accepted ones and then the target's own token
};

// target[i] is the target's argmax after the context and the first i drafted tokens, so it has
// one more entry than the draft: the longest prefix of the draft equal to target is accepted,
// followed by the target's token at the first difference (or after the whole draft). Memory
// running out: qk::error.
[[nodiscard]] inline verification verify_greedy(std::span<const std::int32_t> draft, std::span<const std::int32_t> target)
try {
    if (target.size() != draft.size() + 1) {
        qk::detail::fail("qk::spec::verify_greedy: ", target.size(), " target tokens for a draft of ", draft.size(),
                         "; the target needs one more (its token after the whole draft)");
    }
    verification v;
    while (v.accepted < draft.size() && draft[v.accepted] == target[v.accepted]) {
        ++v.accepted;
    }
    v.tokens.reserve(v.accepted + 1);
    v.tokens.assign(draft.begin(), draft.begin() + static_cast<std::ptrdiff_t>(v.accepted));
    v.tokens.push_back(target[v.accepted]);
    return v;
} catch (...) {
    qk::detail::rethrow_as_error("qk::spec::verify_greedy");
}

// logits holds draft.size() + 1 rows of n_vocab: the target's logits after the context and each
// prefix of the draft. Position i's distribution p is the chain's final candidates on row i (the
// chain accepts every token emitted, once, before the next row, so its penalties see them). The
// drafted token d is accepted when u < p(d) (u from `random`), i.e. with probability
// min(1, p(d) / q(d)) for q(d) = 1; otherwise a token is drawn from p with d removed and
// renormalized, max(0, p - q), and verification stops. After a fully accepted draft the chain's
// own selection on the last row is the bonus token.
// On any error, memory running out included, the chain and `random` are as they were: the rows
// are verified with copies of both (one chain copy per call, its histories and windows
// included), which replace them once the verification is complete.
[[nodiscard]] inline verification verify_stochastic(qk::sampling::chain& target, std::span<const float> logits, std::size_t n_vocab,
                                                    std::span<const std::int32_t> draft, qk::sampling::random_source& random)
try {
    if (n_vocab == 0 || logits.size() != (draft.size() + 1) * n_vocab) {
        qk::detail::fail("qk::spec::verify_stochastic: ", logits.size(), " logits for ", draft.size() + 1, " rows of n_vocab = ", n_vocab);
    }
    qk::sampling::chain chain = target;
    qk::sampling::random_source uniform = random;
    verification v;
    v.tokens.reserve(draft.size() + 1);
    for (std::size_t i = 0;; ++i) {
        const auto row = logits.subspan(i * n_vocab, n_vocab);
        const std::int32_t own = chain.select(row);
        if (i == draft.size()) {
            v.tokens.push_back(own);
            chain.accept(own);
            break;
        }
        const auto candidates = chain.final_candidates();
        const std::int32_t d = draft[i];
        double p_draft = 0;
        double total = 0;
        for (const auto& c : candidates) {
            total += c.p;
            p_draft += c.id == d ? c.p : 0.0;
        }
        if (uniform.uniform() * total < p_draft) {
            ++v.accepted;
            v.tokens.push_back(d);
            chain.accept(d);
            continue;
        }
        // The residual max(0, p - q) with q one-hot at d: p without d. It has mass: p(d) < total.
        const double threshold = uniform.uniform() * (total - p_draft);
        double running = 0;
        std::int32_t chosen = -1;
        for (const auto& c : candidates) {
            if (c.id == d || !(c.p > 0.0f)) {
                continue;
            }
            chosen = c.id;
            running += c.p;
            if (running > threshold) {
                break;
            }
        }
        v.tokens.push_back(chosen);
        chain.accept(chosen);
        break;
    }
    // Nothing below allocates.
    target = std::move(chain);
    random = uniform;
    return v;
} catch (...) {
    qk::detail::rethrow_as_error("qk::spec::verify_stochastic");
}

// The batch budget: an evaluation holds at most n_batch tokens, so a longer prompt or draft is
// split into consecutive evaluations of n_batch tokens and a last, shorter one.
class batch_budget {
public:
    explicit batch_budget(std::size_t n_batch) : n_batch_(n_batch)
    {
        if (n_batch == 0) {
            qk::detail::fail("qk::spec::batch_budget: n_batch is 0; an evaluation must hold at least 1 token");
        }
    }

    [[nodiscard]] std::size_t n_batch() const noexcept { return n_batch_; }
    // How many evaluations n tokens take.
    [[nodiscard]] std::size_t evaluations(std::size_t n) const noexcept { return n / n_batch_ + (n % n_batch_ != 0 ? 1 : 0); }
    // The sizes of those evaluations, in order. Memory running out: qk::error.
    [[nodiscard]] std::vector<std::size_t> split(std::size_t n) const
    try {
        std::vector<std::size_t> sizes;
        sizes.reserve(evaluations(n));
        for (std::size_t done = 0; done < n; done += sizes.back()) {
            sizes.push_back(std::min(n_batch_, n - done));
        }
        return sizes;
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::batch_budget::split");
    }

private:
    std::size_t n_batch_;
};

} // namespace qk::spec
