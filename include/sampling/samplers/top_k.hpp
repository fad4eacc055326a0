// top_k: keeps the k candidates with the largest logits (ties: lower id first), sorted; k <= 0,
// or k at least the set's size, keeps everything. Over a whole vocabulary, for k up to 256, it is
// one SIMD pass against the k-th best seen so far (a heap of k); for larger k (of finite logits)
// the k-th token is found by counting by rank (rank_select.hpp) and only the k kept are sorted;
// for k above 2048 and above 1/64 of a whole vocabulary (of finite logits) the set becomes the
// prefix up to the k-th best (candidates::form::prefix, as top_p leaves it: list() sorts it and
// gives each its probability in the whole vocabulary, where a sorted list's p are 0; dist draws
// from it by exact masses in rank order, not from a sorted list's probabilities), which costs a
// few passes where sorting that many costs more. No sort of the vocabulary ever happens.
// Differs from llama.cpp: equal logits rank by lower id, so a cut through a tie keeps the lowest
// ids (llama_token_data_array_partial_sort(_inplace) compares logits only, leaving ties in no
// defined order). When k covers the set nothing happens (a whole vocabulary stays in id order, a
// list in its order), where llama_sampler_top_k_impl clamps k to the size and sorts the set: the
// same set without a sort of the vocabulary, though a dist after it walks another order (the same
// distribution, another token for a given uniform number).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../candidates.hpp"
#include "../parameters.hpp"

namespace qk::sampling {

namespace detail {

// Above this k a whole vocabulary is cut by rank (rank_select.hpp): the heap of the k best seen
// so far would take k log k work for each of the many tokens that still beat its worst.
inline constexpr std::size_t heap_top_k_limit = 256;


// The k-th best of a whole vocabulary of finite logits, counting tokens by rank (find_by_count),
// and the largest logit; false when a logit is infinite or NaN, where counting by rank does not apply.
inline bool kth_by_count(candidates& c, std::size_t k, rank_position& kth, float& highest)
{
    const float* x = c.vocabulary_logits();
    const auto n = static_cast<std::size_t>(c.vocab_size());
    float lowest = 0.0f;
    if (!finite_range<arch::vector_native>(x, n, lowest, highest)) {
        return false;
    }
    kth = find_by_count<arch::vector_native>(x, n, lowest, highest, k, c.rank_histogram(), c.rank_scratch());
    return true;
}

// The k best of a whole vocabulary of finite logits, sorted, by rank: the k-th token from
// find_by_rank counting tokens, then the tokens ranking at or before it, sorted.
inline bool keep_top_k_by_rank(candidates& c, std::size_t k)
{
    rank_position kth;
    float highest = 0.0f;
    if (!kth_by_count(c, k, kth, highest)) {
        return false;
    }
    const float* x = c.vocabulary_logits();
    const auto n = static_cast<std::size_t>(c.vocab_size());
    auto& out = c.list_buffer();
    out.clear();
    filter_at_least<arch::vector_native>(x, n, kth.logit, out);
    std::erase_if(out, [&kth](const token_data& t) { return t.logit == kth.logit && t.id > kth.id; });
    sort_by_rank(out, c.sort_keys());
    c.assign_list(true);
    return true;
}

// Above this k, and above 1/64 of a whole vocabulary, top_k keeps a prefix instead of a sorted
// list (top_k::apply). It is also the GPU backends' largest top-k list, so that a chain they run
// never meets the prefix (their lists draw as a list does). The share is about where the two cost
// the same with dist after them: the prefix costs a few passes whatever k is, the list a sort of
// k that grows faster than k (Intel Xeon with AVX-512: at 152k logits they cross near k = 2800,
// at 256k near 3100, at 32k at 2048; top_k(4096);dist at 152k took 230 us as a list, 176 as a
// prefix).
inline constexpr std::size_t prefix_top_k_from = 2048;
inline constexpr std::size_t prefix_top_k_share = 64;

// The k best of a whole vocabulary of finite logits as a prefix (candidates::form::prefix, as
// top_p leaves it): every weight, the total mass and each token's bucket of the histogram by logit
// in one pass, the bucket of the k-th best by a search over counts of tokens through a bucket,
// the masses of the buckets up to it (add_masses_through: the draw over the prefix walks no
// further), its tokens sorted to find the k-th best and the mass through it. No mass or count is
// added bucket by bucket for the whole vocabulary: each would cost a read-modify-write per token.
// False (nothing changed) when a logit is infinite or NaN.
inline bool keep_top_k_prefix(candidates& c, std::size_t k)
{
    const float* x = c.vocabulary_logits();
    const auto n = static_cast<std::size_t>(c.vocab_size());
    float least = 0.0f;
    float max = 0.0f;
    if (!finite_range<arch::vector_native>(x, n, least, max)) {
        return false;
    }
    c.check_max(max);
    constexpr float weightless_below = 34.0f; // exp(-34) is below 2^-48
    const float per_unit = rank_histogram::unit_for(max - std::max(least, max - weightless_below));
    float* weights = c.weights_buffer();
    float lowest = 0.0f;
    rank_histogram& h = c.rank_histogram();
    const mass_t total = exp_mass_histogram<arch::vector_native>(x, n, max, per_unit, weights, lowest, h, nullptr, false);
    std::size_t before = 0; // tokens in the buckets above b
    const std::size_t b = bucket_of_count<arch::vector_native>(h, n, k, before);
    add_masses_through<arch::vector_native>(h, weights, n, b);
    mass_t mass = 0; // of the buckets above b
    for (std::size_t above = 0; above < b; ++above) {
        mass += h.mass[above];
    }
    token_arrays& in_bucket = c.rank_scratch().ranges[0];
    in_bucket.clear(n);
    gather_bucket<arch::vector_native>(x, weights, n, h, b, least, everything, in_bucket);
    std::vector<token_data>& sorted = c.rank_scratch().last;
    sorted.resize(in_bucket.count);
    for (std::size_t i = 0; i < in_bucket.count; ++i) {
        sorted[i] = {in_bucket.id[i], in_bucket.logit[i], in_bucket.weight[i]};
    }
    const auto kth = static_cast<std::ptrdiff_t>(k - before - 1);
    std::partial_sort(sorted.begin(), sorted.begin() + kth + 1, sorted.end(), ranks_before);
    for (std::ptrdiff_t i = 0; i <= kth; ++i) {
        mass += mass_of(sorted[static_cast<std::size_t>(i)].p); // p holds the weight here
    }
    const token_data& last = sorted[static_cast<std::size_t>(kth)];
    c.keep_prefix({last.logit, last.id}, mass, total, max, std::max(lowest, max - weightless_below), true);
    return true;
}

// Makes the candidates the k best, sorted (k >= 1 and less than the set's size).
inline void keep_top_k(candidates& c, std::size_t k)
{
    if (c.whole_vocabulary() && k > heap_top_k_limit && keep_top_k_by_rank(c, k)) {
        return;
    }
    if (c.whole_vocabulary()) {
        auto& out = c.list_buffer();
        const auto n = static_cast<std::size_t>(c.vocab_size());
        if (c.current() == candidates::form::view && !c.patches().empty()) {
            // Changed logits are left out of the scan and offered afterwards with their new values.
            top_k_scan<arch::vector_native>(
                c.base(), n, k, out, [&c](std::size_t i) { return c.patched(static_cast<std::int32_t>(i)); }, c.patches().size());
            for (const auto& [id, value] : c.patches()) {
                const token_data t{id, value == value ? value : minus_infinity, 0.0f};
                if (out.size() == k) {
                    if (!ranks_before(t, out.back())) {
                        continue;
                    }
                    out.pop_back();
                }
                out.insert(std::upper_bound(out.begin(), out.end(), t, ranks_before), t);
            }
        } else {
            top_k_scan<arch::vector_native>(c.vocabulary_logits(), n, k, out, [](std::size_t) { return false; });
        }
        c.assign_list(true);
        return;
    }
    auto& l = c.list();
    if (!c.sorted()) {
        std::partial_sort(l.begin(), l.begin() + static_cast<std::ptrdiff_t>(k), l.end(), ranks_before);
    }
    l.resize(k);
    c.assign_list(true);
}

} // namespace detail

class top_k {
public:
    static constexpr bool selects = false;
    static constexpr const char* name = "top_k";

    explicit top_k(std::int32_t k) : k_(k) {}

    void apply(candidates& c) const
    {
        const auto k = static_cast<std::size_t>(k_);
        if (k_ <= 0 || k >= c.size()) {
            return;
        }
        if (c.whole_vocabulary() && k > detail::prefix_top_k_from && k * detail::prefix_top_k_share > c.size() &&
            detail::keep_top_k_prefix(c, k)) {
            return;
        }
        detail::keep_top_k(c, k);
    }

    [[nodiscard]] std::int32_t k() const noexcept { return k_; }
    [[nodiscard]] std::string describe() const { return qk::detail::message("top_k(k=", k_, ")"); }

    static top_k from_arguments(std::vector<argument> given)
    {
        const arguments args(name, std::move(given), {"k"});
        const std::int64_t k = args.integer("k", 40);
        if (k > std::numeric_limits<std::int32_t>::max() || k < std::numeric_limits<std::int32_t>::min()) {
            args.fail("k=", k, " does not fit the token id type");
        }
        return top_k(static_cast<std::int32_t>(k));
    }

private:
    std::int32_t k_;
};

} // namespace qk::sampling
