// qk::sampling::candidates: the set of tokens a chain's samplers narrow down, from a whole
// vocabulary of logits to the one token a selecting sampler picks. It starts as a view of the
// caller's logits (nothing copied) and becomes a list only when a sampler cuts it down, so the
// common chain never copies, sorts or allocates for the whole vocabulary.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "../kernels/arch.hpp"
#include "../kernels/error.hpp"
#include "deterministic_math.hpp"
#include "exact_mass.hpp"
#include "rank_select.hpp"
#include "token_data.hpp"
#include "vocabulary_scan.hpp"

namespace qk::sampling {

namespace detail {

// A logit as a list holds it: NaN (from -inf + inf, -inf * 0, ...) becomes -inf.
[[nodiscard]] inline float without_nan(float v) noexcept
{
    return v == v ? v : -std::numeric_limits<float>::infinity();
}

} // namespace detail

// Five forms, each a complete description of the set:
//  - view: every token of the vocabulary, its logit read from the caller's span, except for a few
//    tokens whose logits a sampler changed (penalties, biases: `patches`, sorted by id);
//  - dense: every token, logits in an owned copy (when a sampler changes all of them);
//  - list: some tokens as token_data, in an order samplers may rely on (`sorted`: by logit, high
//    first, then by id) and with probabilities when `has_probabilities`;
//  - prefix: the tokens of the vocabulary (view without patches, or dense) that rank at or before
//    one token (logit high first, then id low first), sorted: what top_p leaves of a whole
//    vocabulary, held as that token, the vocabulary's weights exp(logit - max) and their exact
//    mass (exact_mass.hpp) instead of a list of thousands (with, when top_p built one, the
//    histogram of those masses by logit, rank_select.hpp). list() sorts it out when a sampler
//    needs one, each p the token's weight times float(1 / the vocabulary's exact mass); top_p,
//    dist and greedy work on it directly;
//  - floor: the tokens of the vocabulary (view without patches, or dense) whose logit is at least
//    a threshold, in id order: what min_p leaves of a whole vocabulary, held as the threshold.
//    list() filters it out (p 0) when a sampler needs one; dist and greedy work on it directly;
//  - ranked: the tokens of the vocabulary (view without patches, or dense) that rank at or before
//    one token by a key a sampler gave every token (key high first, then id low first), in that
//    order: what typical leaves of a whole vocabulary, held as the keys (or the center they are
//    computed from, with the histogram of the weights by key), the bound, the weights and their
//    exact masses as for a prefix. list() sorts it out (p 0, the logits the vocabulary's); dist
//    draws from it directly.
// NaN logits count as -inf throughout; a list never holds NaN.
class candidates {
public:
    enum class form : std::uint8_t { view, dense, list, prefix, floor, ranked };

    candidates() = default;

    // Starts a step on the caller's logits, which must stay alive and unchanged until the step's
    // result has been read. An empty vocabulary, or one whose ids do not fit std::int32_t: qk::error.
    void reset(std::span<const float> logits)
    {
        if (logits.empty()) {
            qk::detail::fail("qk::sampling: the logits span is empty; a vocabulary needs at least one token");
        }
        if (logits.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
            qk::detail::fail("qk::sampling: ", logits.size(), " logits exceed the token id type (at most ",
                             std::numeric_limits<std::int32_t>::max(), ")");
        }
        base_ = logits.data();
        vocab_ = static_cast<std::int32_t>(logits.size());
        form_ = form::view;
        patches_.clear();
        list_.clear();
        sorted_ = false;
        has_probabilities_ = false;
        selected_ = -1;
        prefix_size_ = unknown_size;
        max_known_ = false;
    }

    [[nodiscard]] form current() const noexcept { return form_; }
    [[nodiscard]] std::int32_t vocab_size() const noexcept { return vocab_; }
    [[nodiscard]] std::size_t size() const noexcept
    {
        if (form_ == form::prefix || form_ == form::floor || form_ == form::ranked) {
            if (prefix_size_ == unknown_size) {
                const float* ranks = form_ == form::ranked ? ranked_keys() : prefix_logits();
                prefix_size_ = detail::count_ranked<arch::vector_native>(ranks, static_cast<std::size_t>(vocab_), bound_);
            }
            return prefix_size_;
        }
        return form_ == form::list ? list_.size() : static_cast<std::size_t>(vocab_);
    }
    [[nodiscard]] bool whole_vocabulary() const noexcept { return form_ == form::view || form_ == form::dense; }

    // --- view and dense forms ---

    // The caller's logits (view form).
    [[nodiscard]] const float* base() const noexcept { return base_; }
    // The changed logits of the view form, by id.
    [[nodiscard]] std::span<const std::pair<std::int32_t, float>> patches() const noexcept { return patches_; }

    // The largest of vocabulary_logits() (max_logit's: NaN counts as -inf), computed once until a
    // logit changes (set_logit, dense(), floor_logits()), or as a sampler that changed them and
    // knows where the largest is now says with note_max().
    [[nodiscard]] float vocabulary_max()
    {
        if (!max_known_) {
            known_max_ = detail::max_logit<arch::vector_native>(vocabulary_logits(), static_cast<std::size_t>(vocab_));
            max_known_ = true;
        }
        return known_max_;
    }
    // The largest logit of the view or dense form is `max` (max_logit's value of it).
    void note_max(float max) noexcept
    {
        known_max_ = max + 0.0f; // a zero as +0, as max_logit gives it
        max_known_ = true;
    }

    // Every token's current logit, in id order: the caller's span itself while nothing changed.
    [[nodiscard]] const float* vocabulary_logits()
    {
        if (form_ == form::view && patches_.empty()) {
            return base_;
        }
        make_dense(); // the same logits: vocabulary_max() still holds
        return dense_.data();
    }

    // Every token's logit, writable: copies the view into the dense form first.
    [[nodiscard]] std::span<float> dense()
    {
        require_whole("dense()");
        max_known_ = false; // the caller may change any logit
        make_dense();
        return {dense_.data(), dense_.size()};
    }

    // Sets every logit below `threshold` (and NaN) to -inf in the view or dense form, which becomes
    // dense: one pass over the view's logits into the copy (dense() and a pass over it: two).
    void floor_logits(float threshold)
    {
        require_whole("floor_logits()");
        max_known_ = false;
        if (form_ == form::view) {
            dense_.resize(static_cast<std::size_t>(vocab_));
            detail::floor_to_minus_infinity<arch::vector_native>(base_, dense_.data(), dense_.size(), threshold);
            for (const auto& [id, logit] : patches_) {
                dense_[static_cast<std::size_t>(id)] = logit >= threshold ? logit : detail::minus_infinity;
            }
            patches_.clear();
            form_ = form::dense;
            return;
        }
        detail::floor_to_minus_infinity<arch::vector_native>(dense_.data(), dense_.data(), dense_.size(), threshold);
    }

    [[nodiscard]] float logit(std::int32_t id) const
    {
        if (form_ == form::dense || form_ == form::prefix || form_ == form::floor || form_ == form::ranked) {
            return form_ == form::dense ? dense_[static_cast<std::size_t>(id)] : prefix_logits()[id];
        }
        const auto it = find_patch(id);
        return it != patches_.end() && it->first == id ? it->second : base_[id];
    }

    // Changes one token's logit in the view or dense form (id in [0, vocab_size())).
    void set_logit(std::int32_t id, float value)
    {
        require_whole("set_logit()");
        max_known_ = false;
        if (form_ == form::dense) {
            dense_[static_cast<std::size_t>(id)] = value;
            return;
        }
        const auto it = find_patch(id);
        if (it != patches_.end() && it->first == id) {
            it->second = value;
        } else {
            patches_.insert(it, {id, value});
        }
    }

    [[nodiscard]] bool patched(std::int32_t id) const noexcept
    {
        const auto it = find_patch(id);
        return it != patches_.end() && it->first == id;
    }

    // --- list form ---

    // The candidates as a list, converting a whole vocabulary into one (in id order) or a prefix
    // into one (sorted) if needed.
    [[nodiscard]] std::vector<token_data>& list()
    {
        if (form_ == form::ranked) {
            list_.clear();
            detail::filter_at_least<arch::vector_native>(ranked_keys(), static_cast<std::size_t>(vocab_), bound_.logit, list_);
            std::erase_if(list_, [this](const token_data& t) { return t.logit == bound_.logit && t.id > bound_.id; });
            detail::sort_by_rank(list_, sort_keys_); // by key, as the logits of this list
            const float* x = prefix_logits();
            for (auto& t : list_) {
                t.logit = detail::without_nan(x[t.id]);
            }
            form_ = form::list;
            sorted_ = false;
            has_probabilities_ = false;
        }
        if (form_ == form::floor) {
            list_.clear();
            detail::filter_at_least<arch::vector_native>(prefix_logits(), static_cast<std::size_t>(vocab_), bound_.logit, list_);
            form_ = form::list;
            sorted_ = false;
            has_probabilities_ = false;
        }
        if (form_ == form::prefix) {
            const float* x = prefix_logits();
            list_.clear();
            detail::filter_at_least<arch::vector_native>(x, static_cast<std::size_t>(vocab_), bound_.logit, list_);
            std::erase_if(list_, [this](const token_data& t) { return t.logit == bound_.logit && t.id > bound_.id; });
            detail::sort_by_rank(list_, sort_keys_);
            // Each keeps its probability in the whole vocabulary, from the exact total mass.
            const auto factor = static_cast<float>(0x1.0p48 / detail::to_double(vocabulary_mass_));
            for (auto& t : list_) {
                t.p = weights_[static_cast<std::size_t>(t.id)] * factor;
            }
            form_ = form::list;
            sorted_ = true;
            has_probabilities_ = false;
        }
        if (form_ != form::list) {
            const float* x = vocabulary_logits();
            list_.resize(static_cast<std::size_t>(vocab_));
            for (std::int32_t i = 0; i < vocab_; ++i) {
                const float v = x[i];
                list_[static_cast<std::size_t>(i)] = {i, v == v ? v : detail::minus_infinity, 0.0f};
            }
            form_ = form::list;
            sorted_ = false;
            has_probabilities_ = false;
        }
        return list_;
    }

    // Replaces the set by `list_` after a sampler filled it through assign_list() or spare().
    void assign_list(bool sorted)
    {
        form_ = form::list;
        sorted_ = sorted;
        has_probabilities_ = false;
    }
    // The list buffer for a sampler that builds the new set from the whole vocabulary (its
    // capacity is kept across steps).
    [[nodiscard]] std::vector<token_data>& list_buffer() noexcept { return list_; }

    [[nodiscard]] bool sorted() const noexcept { return form_ == form::list && sorted_; }
    [[nodiscard]] bool has_probabilities() const noexcept { return form_ == form::list && has_probabilities_; }

    // Sorts the list by logit, high first, then by id.
    void sort()
    {
        auto& l = list();
        if (!sorted_) {
            std::sort(l.begin(), l.end(), detail::ranks_before);
            sorted_ = true;
        }
    }

    // A sampler that changed logits in the list says so; `order_kept` when the list is still
    // sorted (a positive scaling of every logit, a truncation).
    void logits_changed(bool order_kept) noexcept
    {
        sorted_ = sorted_ && order_kept;
        has_probabilities_ = false;
    }
    void truncate(std::size_t n)
    {
        auto& l = list();
        if (n < l.size()) {
            l.resize(n);
            has_probabilities_ = false;
        }
    }

    // Fills every p in the list with the softmax of the logits: max, e = exp_difference(l, max)
    // (deterministic_math.hpp), their total in double over 16 lanes in list order
    // (vocabulary_scan.hpp's exp_difference_total), p = e * float(1 / total). Each p is within
    // 6e-7 relative of the exact softmax of the float logits when p >= 2^-126 (FLT_MIN), within
    // 2^-126 below that, for any list size: e within 2 ulp, the total within that and 2^-49, the
    // reciprocal and the product rounded once each (2 + 2 + 0.5 + 0.5 ulp of 2^-23).
    // Deterministic: the same bits on every tag. A set whose logits are all -inf, or one with a
    // +inf logit: qk::error.
    void compute_probabilities()
    {
        auto& l = list();
        if (has_probabilities_) {
            return;
        }
        check_max(detail::list_max(l));
        detail::softmax_list(l, exps_);
        has_probabilities_ = true;
    }

    // --- selection ---

    [[nodiscard]] std::int32_t selected() const noexcept { return selected_; }
    void select(std::int32_t token) noexcept { selected_ = token; }

    // Raises the error for a set with no candidate above -inf, or with a +inf logit.
    void check_max(float max) const
    {
        if (!(max > detail::minus_infinity)) {
            qk::detail::fail("qk::sampling: every candidate's logit is -inf or NaN (", size(), " candidates of a ", vocab_,
                             "-token vocabulary); nothing can be sampled");
        }
        if (max == std::numeric_limits<float>::infinity()) {
            qk::detail::fail("qk::sampling: a logit is +inf; logits must be finite or -inf");
        }
    }

    // Scratch space for whole-vocabulary passes (chunk sums), kept across steps.
    [[nodiscard]] std::vector<float>& chunk_sums() noexcept { return chunk_sums_; }

    // --- prefix form ---

    // Every token's weight exp(logit - max) for a prefix about to be made: vocab_size() floats.
    [[nodiscard]] float* weights_buffer()
    {
        weights_.resize(static_cast<std::size_t>(vocab_));
        return weights_.data();
    }
    // Makes the set the tokens of the current whole vocabulary (or prefix) that rank at or before
    // `bound`, `mass` their exact mass (of a whole vocabulary: `total`, the mass of all of it);
    // weights_buffer() holds every token's weight, `max` is the largest logit and `lowest` the
    // smallest that weighs anything.
    // `histogram`: rank_histogram() holds the histogram of those weights (a prefix of a prefix
    // keeps the one it had).
    void keep_prefix(detail::rank_bound bound, detail::mass_t mass, detail::mass_t total, float max, float lowest, bool histogram = false)
    {
        if (whole_vocabulary()) {
            prefix_over_dense_ = form_ == form::dense;
            vocabulary_mass_ = total;
            histogram_current_ = histogram;
        } else if (form_ != form::prefix) {
            qk::detail::fail("qk::sampling::candidates::keep_prefix: the set is a list of ", list_.size(), " candidates");
        }
        form_ = form::prefix;
        bound_ = bound;
        prefix_mass_ = mass;
        max_ = max;
        lowest_ = lowest;
        prefix_size_ = unknown_size;
        sorted_ = true;
        has_probabilities_ = false;
    }
    [[nodiscard]] bool is_prefix() const noexcept { return form_ == form::prefix; }
    // Scratch for the histogram of a prefix (or ranked set) about to be made; the set's own (of
    // its weights by logit, or by key), or null.
    [[nodiscard]] detail::rank_histogram& rank_histogram() noexcept { return histogram_; }
    [[nodiscard]] const detail::rank_histogram* prefix_histogram() const noexcept
    {
        return (form_ == form::prefix || form_ == form::ranked) && histogram_current_ ? &histogram_ : nullptr;
    }

    // Makes the set the tokens of the current whole vocabulary whose logit is at least
    // `threshold` (at most `max`, the largest logit), in id order.
    void keep_at_least(float threshold, float max)
    {
        require_whole("keep_at_least()");
        prefix_over_dense_ = form_ == form::dense;
        form_ = form::floor;
        bound_ = {threshold, std::numeric_limits<std::int32_t>::max()};
        max_ = max;
        prefix_size_ = unknown_size;
        sorted_ = false;
        has_probabilities_ = false;
    }
    [[nodiscard]] bool is_floor() const noexcept { return form_ == form::floor; }

    // --- ranked form ---

    // Every token's key for a ranked set about to be made: vocab_size() floats.
    [[nodiscard]] float* keys_buffer()
    {
        keys_.resize(static_cast<std::size_t>(vocab_));
        return keys_.data();
    }
    // Makes the set the tokens of the current whole vocabulary that rank at or before `bound` by
    // keys_buffer()'s keys, `mass` their exact mass and `total` the vocabulary's; weights_buffer()
    // holds every token's weight; every token of nonzero weight has a key in [lowest, highest].
    void keep_ranked(detail::rank_bound bound, detail::mass_t mass, detail::mass_t total, float lowest, float highest)
    {
        keep_ranked_set(bound, mass, total);
        histogram_current_ = false;
        keys_current_ = true;
        max_ = highest;
        lowest_ = lowest;
    }
    // keep_ranked with typical's keys, distance_key(center, logit), and rank_histogram() holding
    // the histogram of the weights by key: the keys are not stored (ranked_keys() computes them
    // when something asks for them).
    void keep_ranked_by_distance(detail::rank_bound bound, detail::mass_t mass, detail::mass_t total, float center)
    {
        keys_.resize(static_cast<std::size_t>(vocab_)); // where ranked_keys() puts them (first: it may throw)
        keep_ranked_set(bound, mass, total);
        histogram_current_ = true;
        keys_current_ = false;
        center_ = center;
    }
    [[nodiscard]] bool is_ranked() const noexcept { return form_ == form::ranked; }
    // A ranked set's keys, every token's (computed here the first time after keep_ranked_by_distance).
    [[nodiscard]] const float* ranked_keys() const noexcept
    {
        if (!keys_current_) {
            detail::distance_keys<arch::vector_native>(prefix_logits(), weights_.data(), keys_.size(), center_, keys_.data(), lowest_, max_);
            keys_current_ = true;
        }
        return keys_.data();
    }
    // The center of a ranked set's keys after keep_ranked_by_distance.
    [[nodiscard]] float ranked_center() const noexcept { return center_; }
    [[nodiscard]] float floor_threshold() const noexcept { return bound_.logit; }
    [[nodiscard]] std::vector<std::uint64_t>& chunk_masses() noexcept { return chunk_masses_; }
    [[nodiscard]] const float* prefix_logits() const noexcept { return prefix_over_dense_ ? dense_.data() : base_; }
    [[nodiscard]] const float* prefix_weights() const noexcept { return weights_.data(); }
    [[nodiscard]] detail::rank_bound prefix_bound() const noexcept { return bound_; }
    [[nodiscard]] detail::mass_t prefix_mass() const noexcept { return prefix_mass_; }
    // The largest logit and the smallest that weighs anything (ranked: the same of the keys, once
    // ranked_keys() has them).
    [[nodiscard]] float prefix_max() const noexcept { return max_; }
    [[nodiscard]] float prefix_lowest() const noexcept { return lowest_; }
    [[nodiscard]] detail::rank_scratch& rank_scratch() noexcept { return rank_scratch_; }
    [[nodiscard]] std::vector<std::uint64_t>& sort_keys() noexcept { return sort_keys_; }

private:
    // The view form becomes the dense one, with the same logits.
    void make_dense()
    {
        if (form_ == form::view) {
            dense_.assign(base_, base_ + vocab_);
            for (const auto& [id, logit] : patches_) {
                dense_[static_cast<std::size_t>(id)] = logit;
            }
            patches_.clear();
            form_ = form::dense;
        }
    }

    void keep_ranked_set(detail::rank_bound bound, detail::mass_t mass, detail::mass_t total)
    {
        require_whole("keep_ranked()");
        prefix_over_dense_ = form_ == form::dense;
        vocabulary_mass_ = total;
        form_ = form::ranked;
        bound_ = bound;
        prefix_mass_ = mass;
        prefix_size_ = unknown_size;
        sorted_ = false;
        has_probabilities_ = false;
    }

    void require_whole(const char* what) const
    {
        if (!whole_vocabulary()) {
            qk::detail::fail("qk::sampling::candidates::", what, ": the set is ", form_ == form::list ? "a list of " : "a part of ", size(),
                             " candidates, not a whole vocabulary");
        }
    }

    static constexpr std::size_t unknown_size = std::numeric_limits<std::size_t>::max();

    using patch_iterator = std::vector<std::pair<std::int32_t, float>>::iterator;
    using patch_const_iterator = std::vector<std::pair<std::int32_t, float>>::const_iterator;
    [[nodiscard]] patch_iterator find_patch(std::int32_t id) noexcept
    {
        return std::lower_bound(patches_.begin(), patches_.end(), id, [](const auto& p, std::int32_t v) { return p.first < v; });
    }
    [[nodiscard]] patch_const_iterator find_patch(std::int32_t id) const noexcept
    {
        return std::lower_bound(patches_.begin(), patches_.end(), id, [](const auto& p, std::int32_t v) { return p.first < v; });
    }

    const float* base_ = nullptr;
    std::int32_t vocab_ = 0;
    form form_ = form::view;
    std::vector<std::pair<std::int32_t, float>> patches_;
    std::vector<float> dense_;
    std::vector<token_data> list_;
    std::vector<float> chunk_sums_;
    std::vector<float> weights_;
    std::vector<float> exps_;
    mutable std::vector<float> keys_;
    mutable bool keys_current_ = false; // keys_ holds a ranked set's keys
    detail::rank_scratch rank_scratch_;
    detail::rank_histogram histogram_;
    bool histogram_current_ = false; // histogram_ is of the prefix's (or ranked set's) weights
    std::vector<std::uint64_t> sort_keys_;
    std::vector<std::uint64_t> chunk_masses_;
    detail::rank_bound bound_;
    detail::mass_t prefix_mass_ = 0;
    detail::mass_t vocabulary_mass_ = 1;
    mutable float max_ = detail::minus_infinity;
    mutable float lowest_ = detail::minus_infinity;
    float center_ = 0.0f;
    mutable std::size_t prefix_size_ = unknown_size;
    bool prefix_over_dense_ = false;
    float known_max_ = detail::minus_infinity; // vocabulary_max(), when max_known_
    bool max_known_ = false;
    bool sorted_ = false;
    bool has_probabilities_ = false;
    std::int32_t selected_ = -1;
};

} // namespace qk::sampling
