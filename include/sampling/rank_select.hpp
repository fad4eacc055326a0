// Selection by rank without sorting: the token at which the running mass (or count) of a whole
// vocabulary, taken in rank order (logit high first, then id low first), first reaches a target.
// top_p's cut, the draw over a sorted set and top_k's k-th token are such positions. A few SIMD
// passes narrow a logit range eight ways at a time, then a handful of tokens is sorted; or, where
// the pass that computed the weights also built a histogram of their exact masses by rank value,
// a walk of its buckets and one pass gathering the bucket the target falls in replace the first.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "exact_mass.hpp"
#include "token_data.hpp"
#include "vocabulary_scan.hpp"

// g++ 12 warns, wrongly, that operands of the AVX-512 intrinsics inlined here may be used
// uninitialized: GCC bug 105593, as in deterministic_math.hpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace qk::sampling::detail {

// The tokens ranking at or before a given one: logit above `logit`, or equal with id <= `id`.
// `everything` admits every token whose logit is not NaN.
struct rank_bound {
    float logit = minus_infinity;
    std::int32_t id = std::numeric_limits<std::int32_t>::max();
};
inline constexpr rank_bound everything{};

// A token found by rank: `through` is the mass (or count) of every token ranking at or before it.
struct rank_position {
    std::int32_t id = -1;
    float logit = minus_infinity;
    mass_t through = 0;
};

// Some tokens of a vocabulary in id order, as parallel arrays (the first `count` entries; the
// arrays keep their size, so gathering writes without a branch per token), with the range of
// their logits.
struct token_arrays {
    std::vector<std::int32_t> id;
    std::vector<float> logit;
    std::vector<float> weight;
    std::size_t count = 0;
    float lowest = std::numeric_limits<float>::infinity();
    float highest = minus_infinity;

    // Ends a gather of k tokens into the arrays: their count and the range of their logits.
    // The range is kept in four pairs of locals: updating the members in the loop stored each
    // one and waited on the store (they may alias the logits, for all the compiler knows), and one
    // pair waits on its own comparisons token by token. (Which of two zeros ends up an end may
    // depend on the order; the searches take the range only to place their thresholds.)
    void close(std::size_t k) noexcept
    {
        count = k;
        constexpr std::size_t chains = 4;
        std::array<float, chains> low;
        std::array<float, chains> high;
        low.fill(std::numeric_limits<float>::infinity());
        high.fill(minus_infinity);
        const float* l = logit.data();
        std::size_t j = 0;
        for (; j + chains <= k; j += chains) {
            for (std::size_t c = 0; c < chains; ++c) {
                low[c] = l[j + c] < low[c] ? l[j + c] : low[c];
                high[c] = l[j + c] > high[c] ? l[j + c] : high[c];
            }
        }
        for (; j < k; ++j) {
            low[0] = l[j] < low[0] ? l[j] : low[0];
            high[0] = l[j] > high[0] ? l[j] : high[0];
        }
        lowest = std::min({low[0], low[1], low[2], low[3]});
        highest = std::max({high[0], high[1], high[2], high[3]});
    }

    // Empties the arrays, able to take n tokens.
    void clear(std::size_t n)
    {
        if (id.size() < n) {
            id.resize(n);
            logit.resize(n);
            weight.resize(n);
        }
        count = 0;
        lowest = std::numeric_limits<float>::infinity();
        highest = minus_infinity;
    }
};

// Kept by a candidates object across steps for its capacity.
struct rank_scratch {
    token_arrays ranges[2];
    token_arrays bucket; // the tokens of a histogram's bucket (find_by_rank, find_by_distance)
    std::vector<token_data> last;
};

inline constexpr std::size_t rank_splits = 7; // thresholds per pass: eight brackets

// The mass (Unit: the count) of the tokens with logit >= threshold[j], for each j. NaN logits
// and, unless Unit, zero weights add nothing.
template <class Arch, bool Unit>
void masses_above(const float* x, const float* e, std::size_t n, const std::array<float, rank_splits>& threshold,
                  std::array<mass_t, rank_splits>& mass) noexcept
{
    std::array<std::uint64_t, rank_splits> high_total{};
    std::array<std::uint64_t, rank_splits> low_total{};
    std::size_t i = 0;
    if constexpr (!is_scalar<Arch>) {
        using V = simd_float<Arch>;
        using I = simd_int<Arch>;
        constexpr std::size_t w = V::size;
        std::array<V, rank_splits> t;
        for (std::size_t j = 0; j < rank_splits; ++j) {
            t[j] = V(threshold[j]);
        }
        while (i + w <= n) {
            std::array<I, rank_splits> high_lanes;
            std::array<I, rank_splits> low_lanes;
            high_lanes.fill(I(0));
            low_lanes.fill(I(0));
            for (std::size_t a = 0; a < limb_adds_per_flush && i + w <= n; ++a, i += w) {
                const V v = V::load_unaligned(x + i);
                I high(1);
                I low(0);
                if constexpr (!Unit) {
                    limbs(V::load_unaligned(e + i), high, low);
                }
                // Selected as float bit patterns: xsimd has no cast of a float mask to an int one.
                const V high_bits = xsimd::bitwise_cast<V>(high);
                const V low_bits = xsimd::bitwise_cast<V>(low);
                for (std::size_t j = 0; j < rank_splits; ++j) {
                    const auto in = v >= t[j];
                    high_lanes[j] += xsimd::bitwise_cast<I>(xsimd::select(in, high_bits, V(0.0f)));
                    if constexpr (!Unit) {
                        low_lanes[j] += xsimd::bitwise_cast<I>(xsimd::select(in, low_bits, V(0.0f)));
                    }
                }
            }
            for (std::size_t j = 0; j < rank_splits; ++j) {
                flush(high_lanes[j], high_total[j]);
                if constexpr (!Unit) {
                    flush(low_lanes[j], low_total[j]);
                }
            }
        }
    }
    for (; i < n; ++i) {
        const std::uint64_t m = Unit ? 1 : mass_of(e[i]);
        for (std::size_t j = 0; j < rank_splits; ++j) {
            if (x[i] >= threshold[j]) {
                if constexpr (Unit) {
                    high_total[j] += 1;
                } else {
                    low_total[j] += m; // the sum of whole masses equals the sum of their limbs
                }
            }
        }
    }
    for (std::size_t j = 0; j < rank_splits; ++j) {
        mass[j] = Unit ? mass_t{high_total[j]} : (mass_t{high_total[j]} << 24) + low_total[j];
    }
}

// Appends the tokens with low <= logit < high that rank at or before `bound` to `out` (cleared
// for n tokens). ids == nullptr: token i is x[i].
template <class Arch>
void gather_range(const float* x, const float* e, const std::int32_t* ids, std::size_t n, float low, float high, rank_bound bound,
                  token_arrays& out)
{
    std::int32_t* __restrict out_id = out.id.data();
    float* __restrict out_logit = out.logit.data();
    float* __restrict out_weight = out.weight.data();
    std::size_t k = 0;
    // Token i is written at k, which moves on only when it is in range: no branch per token.
    const auto take = [=, &k](std::size_t from, std::size_t to) {
        for (std::size_t i = from; i < to; ++i) {
            const float v = x[i];
            const std::int32_t id = ids == nullptr ? static_cast<std::int32_t>(i) : ids[i];
            out_id[k] = id;
            out_logit[k] = v;
            out_weight[k] = e == nullptr ? 1.0f : e[i];
            k += static_cast<std::size_t>(v >= low) & static_cast<std::size_t>(v < high) &
                 static_cast<std::size_t>(!(v == bound.logit && id > bound.id));
        }
    };
    std::size_t i = 0;
#if defined(__AVX512F__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, simd_of<Arch>>) {
        // AVX-512 compresses the tokens in range of 16 at a time; the tie beyond the bound is
        // left out of the mask the same way the scalar loop leaves it out.
        const __m512 lo = _mm512_set1_ps(low);
        const __m512 hi = _mm512_set1_ps(high);
        const __m512 tie = _mm512_set1_ps(bound.logit);
        const __m512i tie_id = _mm512_set1_epi32(bound.id);
        const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const __m512 one = _mm512_set1_ps(1.0f);
        for (; i + 16 <= n; i += 16) {
            const __m512 v = _mm512_loadu_ps(x + i);
            __mmask16 in = _mm512_cmp_ps_mask(v, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(v, hi, _CMP_LT_OQ);
            if (in == 0) {
                continue;
            }
            const __m512i id = ids == nullptr ? _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<std::int32_t>(i)))
                                              : _mm512_loadu_si512(ids + i);
            in &= static_cast<__mmask16>(~(_mm512_cmp_ps_mask(v, tie, _CMP_EQ_OQ) & _mm512_cmpgt_epi32_mask(id, tie_id)));
            const __m512 weight = e == nullptr ? one : _mm512_loadu_ps(e + i);
            _mm512_storeu_si512(out_id + k, _mm512_maskz_compress_epi32(in, id));
            _mm512_storeu_ps(out_logit + k, _mm512_maskz_compress_ps(in, v));
            _mm512_storeu_ps(out_weight + k, _mm512_maskz_compress_ps(in, weight));
            k += static_cast<std::size_t>(__builtin_popcount(in));
        }
    }
#endif
    if constexpr (!is_scalar<Arch>) {
        using V = simd_float<Arch>;
        constexpr std::size_t w = V::size;
        const V lo(low);
        const V hi(high);
        for (; i + w <= n; i += w) {
            const V v = V::load_unaligned(x + i);
            if (xsimd::any((v >= lo) && (v < hi))) {
                take(i, i + w);
            }
        }
    }
    take(i, n);
    out.close(k);
}

// How many tokens of x[0 .. n) rank at or before `bound`.
template <class Arch>
[[nodiscard]] std::size_t count_ranked(const float* x, std::size_t n, rank_bound bound) noexcept
{
    std::size_t count = 0;
    std::size_t i = 0;
    const auto one = [&](std::size_t j) {
        count += (x[j] > bound.logit || (x[j] == bound.logit && static_cast<std::int32_t>(j) <= bound.id)) ? 1 : 0;
    };
    if constexpr (!is_scalar<Arch>) {
        using V = simd_float<Arch>;
        using I = simd_int<Arch>;
        constexpr std::size_t w = V::size;
        const V b(bound.logit);
        I lanes(0);
        std::uint64_t total = 0;
        while (i + w <= n) {
            for (std::size_t a = 0; a < limb_adds_per_flush && i + w <= n; ++a, i += w) {
                const V v = V::load_unaligned(x + i);
                if (xsimd::any(v == b)) {
                    for (std::size_t j = i; j < i + w; ++j) {
                        one(j);
                    }
                } else {
                    lanes += xsimd::bitwise_cast<I>(xsimd::select(v > b, xsimd::bitwise_cast<V>(I(1)), V(0.0f)));
                }
            }
            flush(lanes, total);
        }
        count += total;
    }
    for (; i < n; ++i) {
        one(i);
    }
    return count;
}

// The exact mass of a whole vocabulary per bucket of its logits (or other rank values, such as
// typical's keys): bucket b holds the values v with trunc(min((top - v) * per_unit, buckets - 1))
// = b, top at least the largest, per_unit a power of two (so the product is exact) that spreads
// the range of the values that weigh anything over the buckets. A float subtraction, product,
// minimum and truncation are monotone, so the buckets follow rank order (equal values share one);
// the last also takes everything below the range, -inf and NaN. Built in the pass that computes
// the weights, it lets the searches by rank over that vocabulary (top_p's cut, then the draw over
// the prefix it leaves) walk 1024 sums and gather the one bucket their target falls in, where
// narrowing the whole vocabulary eight ways per pass cost about two passes of masses over seven
// thresholds and a gather of an eighth.
struct rank_histogram {
    static constexpr std::size_t buckets = 1024;
    static constexpr float last = static_cast<float>(buckets - 1);

    float top = minus_infinity;
    float per_unit = 32.0f;
    std::vector<mass_t> mass;
    // Each token's bucket, stored by the pass that builds the histogram, so that gathering one
    // bucket compares 16-bit numbers instead of recomputing every token's position.
    std::vector<std::uint16_t> bucket_of;
    // The builder's four copies of the buckets, kept for their capacity; all zero between passes
    // once partial_zero says so (a builder leaves them so), which spares the next pass clearing them.
    std::vector<std::uint64_t> partial;
    bool partial_zero = false;
    std::vector<std::uint32_t> picked; // add_masses_through's scratch, kept for its capacity

    // The bucket as a float in [0, last], whose truncation is the bucket (NaN fails the comparison).
    [[nodiscard]] float position(float v) const noexcept
    {
        const float d = (top - v) * per_unit;
        return d < last ? d : last;
    }

    // The power of two (from 2^-8 to 2^16) that spreads `range` over the most buckets; 32 when the
    // range is 0 or not finite.
    [[nodiscard]] static float unit_for(float range) noexcept
    {
        if (!(range > 0.0f) || !(range < std::numeric_limits<float>::infinity())) {
            return 32.0f;
        }
        float unit = 0x1.0p-8f;
        while (unit < 0x1.0p16f && 2.0f * unit * range <= last) {
            unit *= 2.0f;
        }
        return unit;
    }
};

// Adds blocks of (bucket, mass) pairs to a histogram: each mass goes to its bucket in one of four
// copies (so that runs of one bucket do not wait on each other's additions), and the copies are
// folded into the 128-bit sums every 2^17 pairs, before a 64-bit bucket of a copy could overflow
// (2^15 masses of at most 2^48).
class histogram_builder {
public:
    static constexpr std::size_t block = 256; // pairs per add()

    // For the buckets of n tokens, added in order.
    histogram_builder(rank_histogram& h, float top, float per_unit, std::size_t n) : h_(h)
    {
        h.top = top;
        h.per_unit = per_unit;
        h.mass.resize(buckets); // the first fold sets every bucket
        if (!h.partial_zero || h.partial.size() != copies * buckets) {
            h.partial.assign(copies * buckets, 0);
        }
        if (h.bucket_of.size() < n) {
            h.bucket_of.resize(n);
        }
        h.partial_zero = false; // until finish() has folded them
    }

    // Also counts the tokens of each bucket into `counts` (rank_histogram::buckets of them, set to
    // 0 here), when not null.
    void count_into(std::vector<std::uint32_t>* counts)
    {
        counts_ = counts;
        if (counts != nullptr) {
            counts->assign(copies * buckets, 0u);
        }
    }

    // Adds the masses to the total only, leaving every bucket's 0 (for a search that needs the
    // counts and the masses of a few buckets: add_masses_through adds those afterwards). Each
    // mass added to its bucket is a read-modify-write that costs about what counting it does.
    void total_only() noexcept { by_bucket_ = false; }

    // Adds the next `count` tokens by their mass `sum` alone (total_only), their buckets written
    // at next_buckets().
    void add_total(mass_t sum, std::size_t count) noexcept
    {
        total_ += sum;
        advance(count);
    }

    // Where the buckets of the next tokens go: a producer writes them there (rank_histogram's
    // bucket_of, which keeps them), then calls add() with their masses.
    [[nodiscard]] std::uint16_t* next_buckets() noexcept { return h_.bucket_of.data() + tokens_; }

    // Adds the next `count` tokens (at most block), their buckets written at next_buckets().
    void add(const std::uint64_t* mass, std::size_t count) noexcept
    {
        const std::uint16_t* bucket = next_buckets();
        if (by_bucket_) {
            std::size_t j = 0;
            for (; j + 16 <= count; j += 16) {
                add_masses_of<16>(bucket + j, mass + j);
            }
            for (; j < count; ++j) {
                h_.partial[bucket[j]] += mass[j];
            }
        } else {
            std::uint64_t sum = 0; // a block's masses: below 2^8 * 2^48
            for (std::size_t j = 0; j < count; ++j) {
                sum += mass[j];
            }
            total_ += sum;
        }
        if (counts_ != nullptr) {
            std::uint32_t* __restrict c = counts_->data();
            std::size_t j = 0;
            for (; j + copies <= count; j += copies) {
                ++c[bucket[j]];
                ++c[buckets + bucket[j + 1]];
                ++c[2 * buckets + bucket[j + 2]];
                ++c[3 * buckets + bucket[j + 3]];
            }
            for (; j < count; ++j) {
                ++c[bucket[j]];
            }
        }
        advance(count);
    }

    // For a producer that computes its tokens' buckets and masses with vector arithmetic (by
    // bucket, without counts), with room for a run's masses at `mass`: calls compute(i, bucket,
    // mass + i) for i = 0, 16, ..., run - 16, which writes the buckets and masses of the next
    // run's tokens i to i + 15 there (the buckets in place in bucket_of), and between those
    // calls adds each vector's masses to their buckets `lag` tokens later; then moves past the
    // run. A read-modify-write per token runs on other units than that arithmetic, and the two
    // overlap once the additions no longer wait on its latest results (top_p's weights' pass over
    // 32k logits: about 15% less time on Zen 5). The last lag tokens of a run are added after its
    // arithmetic, alone: a sixteenth of them in runs of four blocks. A run and 2^17 masses still
    // fit a copy's 64 bits.
    static constexpr std::size_t lag = 64;
    static constexpr std::size_t run = 4 * block;

    template <class Compute>
    void add_run(std::uint64_t* __restrict mass, Compute&& compute) noexcept
    {
        std::uint16_t* bucket = next_buckets();
        for (std::size_t i = 0; i < run; i += 16) {
            compute(i, bucket + i, mass + i);
            if (i >= lag) {
                add_masses_of<16>(bucket + i - lag, mass + i - lag);
            }
        }
        for (std::size_t i = run - lag; i < run; i += 16) {
            add_masses_of<16>(bucket + i, mass + i);
        }
        advance(run);
    }

    void advance(std::size_t count) noexcept
    {
        tokens_ += count;
        added_ += count;
        if (by_bucket_ && added_ >= fold_every) {
            fold();
        }
    }

    // The total mass.
    [[nodiscard]] mass_t finish() noexcept
    {
        if (by_bucket_) {
            if (added_ > 0 || !folded_) {
                fold();
            }
        } else {
            std::fill(h_.mass.begin(), h_.mass.end(), mass_t{0});
        }
        h_.partial_zero = true;
        if (counts_ != nullptr) {
            std::uint32_t* c = counts_->data();
            for (std::size_t b = 0; b < buckets; ++b) {
                c[b] += c[buckets + b] + c[2 * buckets + b] + c[3 * buckets + b];
            }
            counts_->resize(buckets);
        }
        return total_;
    }

private:
    static constexpr std::size_t buckets = rank_histogram::buckets;
    static constexpr std::size_t copies = 4;
    static constexpr std::size_t fold_every = std::size_t{1} << 17;

    // Count masses (a multiple of the copies) added to their buckets, token j to copy j % 4.
    template <std::size_t Count>
    void add_masses_of(const std::uint16_t* __restrict bucket, const std::uint64_t* __restrict mass) noexcept
    {
        static_assert(Count % copies == 0);
        std::uint64_t* __restrict partial = h_.partial.data();
        for (std::size_t j = 0; j < Count; j += copies) {
            partial[bucket[j]] += mass[j];
            partial[buckets + bucket[j + 1]] += mass[j + 1];
            partial[2 * buckets + bucket[j + 2]] += mass[j + 2];
            partial[3 * buckets + bucket[j + 3]] += mass[j + 3];
        }
    }

    // Adds the copies into h.mass (sets it, at the first fold) and their sum to the total, and
    // clears them. Below 2^16 masses since the last fold the loops are plain 64-bit arithmetic,
    // which vectorizes: with a builder's setup, this fixed cost of every pass took 1.14 us with
    // the buckets cleared at each setup and summed in 128 bits, 0.6 us so (Zen 5, -march=native;
    // 1.5 and 1.2 us built for baseline x86-64).
    void fold() noexcept
    {
        std::uint64_t* __restrict partial = h_.partial.data();
        mass_t* __restrict mass = h_.mass.data();
        if (added_ < (std::size_t{1} << 16)) {
            // Fewer than 2^16 masses of at most 2^48: a bucket's four copies add up below 2^64,
            // and the 32-bit halves of 1024 such sums below 2^42 each.
            std::uint64_t low = 0;
            std::uint64_t high = 0;
            for (std::size_t b = 0; b < buckets; ++b) {
                const std::uint64_t sum = partial[b] + partial[buckets + b] + partial[2 * buckets + b] + partial[3 * buckets + b];
                partial[b] = sum;
                low += sum & 0xffffffffu;
                high += sum >> 32;
            }
            if (folded_) {
                for (std::size_t b = 0; b < buckets; ++b) {
                    mass[b] += partial[b];
                }
            } else if constexpr (std::endian::native == std::endian::little && sizeof(mass_t) == 16) {
                // The first fold writes each 128-bit sum as its two 64-bit halves, low first, into
                // the last two copies (free once summed): a loop that vectorizes, then one copy,
                // where the loop of 128-bit stores did not vectorize.
                std::uint64_t* halves = partial + 2 * buckets;
                for (std::size_t b = 0; b < buckets; ++b) {
                    halves[2 * b] = partial[b];
                    halves[2 * b + 1] = 0;
                }
                std::memcpy(mass, halves, buckets * sizeof(mass_t));
            } else {
                for (std::size_t b = 0; b < buckets; ++b) {
                    mass[b] = partial[b];
                }
            }
            total_ += (mass_t{high} << 32) + low;
        } else {
            for (std::size_t b = 0; b < buckets; ++b) {
                const mass_t sum = mass_t{partial[b]} + partial[buckets + b] + partial[2 * buckets + b] + partial[3 * buckets + b];
                mass[b] = folded_ ? mass[b] + sum : sum;
                total_ += sum;
            }
        }
        std::fill(partial, partial + copies * buckets, std::uint64_t{0});
        folded_ = true;
        added_ = 0;
    }

    rank_histogram& h_;
    std::vector<std::uint32_t>* counts_ = nullptr;
    std::size_t tokens_ = 0; // added so far
    std::size_t added_ = 0;  // since the last fold
    bool by_bucket_ = true;
    bool folded_ = false; // h.mass set
    mass_t total_ = 0;
};

#if defined(__AVX512F__) && defined(__AVX512DQ__)
// floor(e 2^48) of 16 weights, mass_of's values, in one conversion to 64 bits each: e 2^48 is
// exact, and truncation is floor.
inline void store_masses(__m512 e, std::uint64_t* mass) noexcept
{
    const __m512 scaled = _mm512_mul_ps(e, _mm512_set1_ps(0x1.0p48f));
    _mm512_storeu_si512(mass, _mm512_cvttps_epu64(_mm512_castps512_ps256(scaled)));
    _mm512_storeu_si512(mass + 8, _mm512_cvttps_epu64(_mm512_extractf32x8_ps(scaled, 1)));
}

// The buckets of 16 positions (top - v) * per_unit, as rank_histogram::position truncates them,
// in 16 bits each: min_ps gives `last` where the position is NaN, as position() does.
inline void store_buckets(__m512 position, std::uint16_t* bucket) noexcept
{
    const __m512 clamped = _mm512_min_ps(position, _mm512_set1_ps(rank_histogram::last));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bucket), _mm512_cvtepi32_epi16(_mm512_cvttps_epu32(clamped)));
}
#endif

#if defined(__AVX2__)
// floor(e 2^48) of 8 weights, mass_of's values, without AVX-512's conversions to 64 bits: the
// floor of e 2^48 (exact) is an integer below 2^49, which a double holds, and whose bits are
// those of 2^52 + it with 2^52's taken away.
inline void store_masses(__m256 e, std::uint64_t* mass) noexcept
{
    const __m256 whole = _mm256_floor_ps(_mm256_mul_ps(e, _mm256_set1_ps(0x1.0p48f)));
    const __m256d offset = _mm256_set1_pd(0x1.0p52);
    const auto integer = [&](__m128 four) {
        return _mm256_xor_si256(_mm256_castpd_si256(_mm256_add_pd(_mm256_cvtps_pd(four), offset)), _mm256_castpd_si256(offset));
    };
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(mass), integer(_mm256_castps256_ps128(whole)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(mass + 4), integer(_mm256_extractf128_ps(whole, 1)));
}

// The buckets of 16 positions (8 in each vector), as rank_histogram::position truncates them, in
// 16 bits each: the blend keeps a position below `last`, else last (NaN too), and the packing to
// 16 bits happens in registers.
inline void store_buckets(__m256 low_positions, __m256 high_positions, std::uint16_t* bucket) noexcept
{
    const __m256 last = _mm256_set1_ps(rank_histogram::last);
    const auto placed = [&](__m256 d) { return _mm256_cvttps_epi32(_mm256_blendv_ps(last, d, _mm256_cmp_ps(d, last, _CMP_LT_OQ))); };
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(placed(low_positions), placed(high_positions)), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bucket), packed);
}

// The buckets of 16 values v[0 .. 16), at (top - v) * per_unit.
inline void store_buckets(const float* v, __m256 top, __m256 per_unit, std::uint16_t* bucket) noexcept
{
    store_buckets(_mm256_mul_ps(_mm256_sub_ps(top, _mm256_loadu_ps(v)), per_unit), _mm256_mul_ps(_mm256_sub_ps(top, _mm256_loadu_ps(v + 8)), per_unit),
                  bucket);
}
#endif

// The bucket in h and the mass of values v[0 .. count) with weights e (count at most a builder's block).
template <class Arch>
void buckets_and_masses(const float* v, const float* e, std::size_t count, const rank_histogram& h, std::uint16_t* bucket,
                        std::uint64_t* mass) noexcept
{
    const float top = h.top;
    std::size_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, simd_of<Arch>>) {
        const __m512 t = _mm512_set1_ps(top);
        const __m512 per_unit = _mm512_set1_ps(h.per_unit);
        for (; i + 16 <= count; i += 16) {
            store_masses(_mm512_loadu_ps(e + i), mass + i);
            store_buckets(_mm512_mul_ps(_mm512_sub_ps(t, _mm512_loadu_ps(v + i)), per_unit), bucket + i);
        }
    }
#endif
#if defined(__AVX2__)
    if constexpr (std::is_base_of_v<xsimd::avx2, simd_of<Arch>>) {
        // The lanes below store each mass and bucket one by one: here the masses convert to 64
        // bits and the buckets pack to 16 in registers (typical's keys' pass and top_p's weights'
        // pass on this tag: about a fifth of their time went to those stores).
        const __m256 t = _mm256_set1_ps(top);
        const __m256 scale = _mm256_set1_ps(h.per_unit);
        for (; i + 16 <= count; i += 16) {
            store_masses(_mm256_loadu_ps(e + i), mass + i);
            store_masses(_mm256_loadu_ps(e + i + 8), mass + i + 8);
            store_buckets(v + i, t, scale, bucket + i);
        }
    }
#endif
    if constexpr (!is_scalar<Arch>) {
        using V = simd_float<Arch>;
        using I = simd_int<Arch>;
        constexpr std::size_t w = V::size;
        const V t(top);
        const V per_unit(h.per_unit);
        const V last(rank_histogram::last);
        alignas(64) std::int32_t high[w];
        alignas(64) std::int32_t low[w];
        alignas(64) std::int32_t placed[w];
        for (; i + w <= count; i += w) {
            I high_limb;
            I low_limb;
            limbs(V::load_unaligned(e + i), high_limb, low_limb);
            high_limb.store_aligned(high);
            low_limb.store_aligned(low);
            for (std::size_t l = 0; l < w; ++l) {
                mass[i + l] = (static_cast<std::uint64_t>(high[l]) << 24) + static_cast<std::uint64_t>(low[l]);
            }
            const V d = (t - V::load_unaligned(v + i)) * per_unit;
            xsimd::batch_cast<std::int32_t>(xsimd::select(d < last, d, last)).store_aligned(placed);
            for (std::size_t l = 0; l < w; ++l) {
                bucket[i + l] = static_cast<std::uint16_t>(placed[l]);
            }
        }
    }
    for (; i < count; ++i) {
        mass[i] = mass_of(e[i]);
        bucket[i] = static_cast<std::uint16_t>(h.position(v[i]));
    }
}

// Each token's bucket in h.bucket_of for a histogram by logit with top `top` and `per_unit` (as
// rank_histogram::position truncates it), and nothing else: no weight, no mass, no count.
template <class Arch>
void rank_positions(const float* x, std::size_t n, float top, float per_unit, rank_histogram& h)
{
    h.top = top;
    h.per_unit = per_unit;
    if (h.bucket_of.size() < n) {
        h.bucket_of.resize(n);
    }
    std::uint16_t* bucket = h.bucket_of.data();
    std::size_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, simd_of<Arch>>) {
        const __m512 t = _mm512_set1_ps(top);
        const __m512 scale = _mm512_set1_ps(per_unit);
        for (; i + 16 <= n; i += 16) {
            store_buckets(_mm512_mul_ps(_mm512_sub_ps(t, _mm512_loadu_ps(x + i)), scale), bucket + i);
        }
    }
#endif
#if defined(__AVX2__)
    if constexpr (std::is_base_of_v<xsimd::avx2, simd_of<Arch>>) {
        // 16 at a time, packed to 16 bits in registers (the lanes below are stored one by one).
        const __m256 t = _mm256_set1_ps(top);
        const __m256 scale = _mm256_set1_ps(per_unit);
        for (; i + 16 <= n; i += 16) {
            store_buckets(x + i, t, scale, bucket + i);
        }
    }
#endif
    if constexpr (!is_scalar<Arch>) {
        using V = simd_float<Arch>;
        constexpr std::size_t w = V::size;
        const V t(top);
        const V scale(per_unit);
        const V last(rank_histogram::last);
        alignas(64) std::int32_t placed[w];
        for (; i + w <= n; i += w) {
            const V d = (t - V::load_unaligned(x + i)) * scale;
            xsimd::batch_cast<std::int32_t>(xsimd::select(d < last, d, last)).store_aligned(placed);
            for (std::size_t l = 0; l < w; ++l) {
                bucket[i + l] = static_cast<std::uint16_t>(placed[l]);
            }
        }
    }
    for (; i < n; ++i) {
        bucket[i] = static_cast<std::uint16_t>(h.position(x[i]));
    }
}

// exp_mass (e[i] = exp(x[i] - max), stored; the total mass; `lowest` the smallest logit) and, in
// the same pass, block by block while the block is in cache, the histogram of the masses by logit
// (top: max) and, when `counts` is not null, the number of tokens in each bucket. With
// `masses_by_bucket` false every bucket's mass stays 0 (histogram_builder::total_only).
template <class Arch>
[[nodiscard]] mass_t exp_mass_histogram(const float* x, std::size_t n, float max, float per_unit, float* e, float& lowest,
                                        rank_histogram& h, std::vector<std::uint32_t>* counts = nullptr, bool masses_by_bucket = true)
{
    constexpr std::size_t block = histogram_builder::block;
    histogram_builder builder(h, max, per_unit, n);
    builder.count_into(counts);
    if (!masses_by_bucket) {
        builder.total_only();
    }
    alignas(64) std::uint64_t mass[block];
    lowest = std::numeric_limits<float>::infinity();
    std::size_t done = 0;
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, simd_of<Arch>>) {
        if (counts == nullptr) {
            using V = simd_float<Arch>;
            const V m(max);
            const __m512 t = _mm512_set1_ps(max);
            const __m512 scale = _mm512_set1_ps(per_unit);
            V low(lowest);
            // Token at + i's weight, stored; its bucket at bucket[i].
            const auto weigh = [&](std::size_t at, std::uint16_t* bucket) {
                const V v = V::load_unaligned(x + at);
                low = xsimd::select(v < low, v, low); // NaN is never below
                const V ev = exp(v - m);
                ev.store_unaligned(e + at);
                store_buckets(_mm512_mul_ps(_mm512_sub_ps(t, v), scale), bucket);
                return ev;
            };
            if (masses_by_bucket) {
                // exp_weights and buckets_and_masses in one loop, each vector's masses added to
                // their buckets a few vectors later (histogram_builder::add_run): exp's arithmetic
                // waits on its own latency, the additions on memory, and the two overlap.
                alignas(64) std::uint64_t run_masses[histogram_builder::run];
                for (; done + histogram_builder::run <= n; done += histogram_builder::run) {
                    builder.add_run(run_masses, [&](std::size_t i, std::uint16_t* bucket, std::uint64_t* run_mass) {
                        store_masses(weigh(done + i, bucket), run_mass);
                    });
                }
            } else {
                // The same loop with the masses summed in eight 64-bit lanes, never stored: a
                // run's 1024 masses of at most 2^48 add up below 2^58. Building the buckets and
                // masses from the stored weights and logits afterwards, block by block, took a
                // fifth more time than the pass of weights itself (top_k(4096)'s pass, 32k logits,
                // Intel Xeon with AVX-512).
                constexpr std::size_t run = histogram_builder::run;
                for (; done + run <= n; done += run) {
                    std::uint16_t* bucket = builder.next_buckets();
                    __m512i sum = _mm512_setzero_si512();
                    for (std::size_t i = 0; i < run; i += 16) {
                        const __m512 scaled = _mm512_mul_ps(weigh(done + i, bucket + i), _mm512_set1_ps(0x1.0p48f));
                        sum = _mm512_add_epi64(sum, _mm512_cvttps_epu64(_mm512_castps512_ps256(scaled)));
                        sum = _mm512_add_epi64(sum, _mm512_cvttps_epu64(_mm512_extractf32x8_ps(scaled, 1)));
                    }
                    builder.add_total(static_cast<std::uint64_t>(_mm512_reduce_add_epi64(sum)), run);
                }
            }
            alignas(64) float lanes[16];
            low.store_aligned(lanes);
            for (const float l : lanes) {
                lowest = l < lowest ? l : lowest;
            }
        }
    }
#endif
    if (!masses_by_bucket && counts == nullptr && done == 0) {
        // Without AVX-512's loop: exp_mass's pass (its limbs summed in vector lanes), then the
        // buckets in a pass of their own, where the blocks below convert and store every mass
        // lane by lane (top_k(4096)'s pass at 32k logits, x86-64-v3: about 30% less time).
        builder.add_total(exp_mass<Arch>(x, n, max, e, lowest), 0);
        rank_positions<Arch>(x, n, max, per_unit, h);
        return builder.finish();
    }
    for (std::size_t begin = done; begin < n; begin += block) {
        const std::size_t count = std::min(block, n - begin);
        const float* xb = x + begin;
        float* eb = e + begin;
        float block_lowest = 0.0f;
        exp_weights<Arch>(xb, count, max, eb, block_lowest);
        lowest = block_lowest < lowest ? block_lowest : lowest;
        buckets_and_masses<Arch>(xb, eb, count, h, builder.next_buckets(), mass);
        builder.add(mass, count);
    }
    return builder.finish();
}

// How many of the n tokens that h places (its bucket_of) lie in the buckets up to last[j], for each
// of the Bounds bounds, in `count`: one pass of comparisons (AVX-512: 32 at a time from 64-byte
// boundaries, counted in 16-bit lanes) for them all, where counting each bucket in the
// histogram's pass is a read-modify-write per token.
template <class Arch, std::size_t Bounds>
void count_through_each(const rank_histogram& h, std::size_t n, const std::array<std::size_t, Bounds>& last,
                        std::array<std::size_t, Bounds>& count) noexcept
{
    const std::uint16_t* bucket_of = h.bucket_of.data();
    count.fill(0);
    std::size_t i = 0;
    const auto one = [&](std::size_t j) {
        for (std::size_t b = 0; b < Bounds; ++b) {
            count[b] += bucket_of[j] <= last[b] ? 1 : 0;
        }
    };
#if defined(__AVX512BW__)
    if constexpr (std::is_base_of_v<xsimd::avx512bw, simd_of<Arch>>) {
        for (; i < n && reinterpret_cast<std::uintptr_t>(bucket_of + i) % 64 != 0; ++i) {
            one(i);
        }
        __m512i bound[Bounds];
        for (std::size_t b = 0; b < Bounds; ++b) {
            bound[b] = _mm512_set1_epi16(static_cast<short>(last[b])); // buckets are below 2^15
        }
        const __m512i unit = _mm512_set1_epi16(1);
        while (i + 32 <= n) {
            // Each 16-bit lane counts at most 2^15 - 1 tokens before the lanes are added up.
            __m512i lanes[Bounds];
            for (std::size_t b = 0; b < Bounds; ++b) {
                lanes[b] = _mm512_setzero_si512();
            }
            for (std::size_t a = 0; a < (std::size_t{1} << 15) - 1 && i + 32 <= n; ++a, i += 32) {
                const __m512i v = _mm512_load_si512(bucket_of + i);
                for (std::size_t b = 0; b < Bounds; ++b) {
                    lanes[b] = _mm512_mask_add_epi16(lanes[b], _mm512_cmple_epu16_mask(v, bound[b]), lanes[b], unit);
                }
            }
            for (std::size_t b = 0; b < Bounds; ++b) {
                count[b] += static_cast<std::size_t>(_mm512_reduce_add_epi32(_mm512_madd_epi16(lanes[b], unit)));
            }
        }
    }
#endif
#if defined(__AVX2__)
    if constexpr (std::is_base_of_v<xsimd::avx2, simd_of<Arch>>) {
        // 16 at a time: a comparison's true lanes are -1, so subtracting them counts (one token
        // at a time, this search took half of top_k(4096)'s time at 32k logits on this tag).
        __m256i above[Bounds]; // last[b] + 1, which is above exactly the buckets through last[b]
        for (std::size_t b = 0; b < Bounds; ++b) {
            above[b] = _mm256_set1_epi16(static_cast<short>(last[b] + 1)); // at most 2^10
        }
        const __m256i unit = _mm256_set1_epi16(1);
        while (i + 16 <= n) {
            __m256i lanes[Bounds];
            for (std::size_t b = 0; b < Bounds; ++b) {
                lanes[b] = _mm256_setzero_si256();
            }
            for (std::size_t a = 0; a < (std::size_t{1} << 15) - 1 && i + 16 <= n; ++a, i += 16) {
                const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bucket_of + i));
                for (std::size_t b = 0; b < Bounds; ++b) {
                    lanes[b] = _mm256_sub_epi16(lanes[b], _mm256_cmpgt_epi16(above[b], v));
                }
            }
            for (std::size_t b = 0; b < Bounds; ++b) {
                alignas(32) std::int32_t sums[8];
                _mm256_store_si256(reinterpret_cast<__m256i*>(sums), _mm256_madd_epi16(lanes[b], unit));
                for (const std::int32_t c : sums) {
                    count[b] += static_cast<std::size_t>(c);
                }
            }
        }
    }
#endif
    if constexpr (!is_scalar<Arch>) {
        // The same in 16-bit lanes of the tag's width.
        using S = xsimd::batch<std::int16_t, simd_of<Arch>>;
        constexpr std::size_t w = S::size;
        const auto* buckets = reinterpret_cast<const std::int16_t*>(bucket_of); // below 2^15
        std::array<S, Bounds> bound;
        for (std::size_t b = 0; b < Bounds; ++b) {
            bound[b] = S(static_cast<std::int16_t>(last[b]));
        }
        while (i + w <= n) {
            // Each 16-bit lane counts at most 2^15 - 1 tokens before the lanes are added up.
            std::array<S, Bounds> lanes;
            lanes.fill(S(0));
            for (std::size_t a = 0; a < (std::size_t{1} << 15) - 1 && i + w <= n; ++a, i += w) {
                const S v = S::load_unaligned(buckets + i);
                for (std::size_t b = 0; b < Bounds; ++b) {
                    lanes[b] = lanes[b] + xsimd::select(v <= bound[b], S(1), S(0));
                }
            }
            alignas(64) std::int16_t stored[w];
            for (std::size_t b = 0; b < Bounds; ++b) {
                lanes[b].store_aligned(stored);
                for (const std::int16_t c : stored) {
                    count[b] += static_cast<std::size_t>(c);
                }
            }
        }
    }
    for (; i < n; ++i) {
        one(i);
    }
}

// count_through_each for one bound.
template <class Arch>
[[nodiscard]] std::size_t count_through(const rank_histogram& h, std::size_t n, std::size_t last) noexcept
{
    std::array<std::size_t, 1> count{};
    count_through_each<Arch, 1>(h, n, {last}, count);
    return count[0];
}

// bucket_of_count's parts per pass: three bounds cost about 1.5 passes of one on Zen 5 (the
// comparisons into masks set the pace), so four parts take the search over 1024 buckets from a
// binary search's ten passes to five (32k tokens: 5.8 to 4.3 us), where eight parts (seven
// bounds, about 2.5 passes of one) would take four and cost more.
inline constexpr std::size_t search_ways = 4;

// The first bucket of h (over n tokens) through which at least k tokens lie (k at most n), and in
// `before` how many lie in the buckets above it: a search that splits the buckets left into
// search_ways parts at each pass of count_through_each.
template <class Arch>
[[nodiscard]] std::size_t bucket_of_count(const rank_histogram& h, std::size_t n, std::size_t k, std::size_t& before) noexcept
{
    std::size_t low = 0;
    std::size_t high = rank_histogram::buckets - 1; // every token lies through the last
    before = 0;                                    // the count through low - 1
    while (low < high) {
        // Bounds from low to below high (step / search_ways < step), in order, so that the first
        // that counts k or more narrows the search to its part; equal bounds are harmless.
        const std::size_t step = high - low;
        std::array<std::size_t, search_ways - 1> bound{};
        for (std::size_t j = 0; j + 1 < search_ways; ++j) {
            bound[j] = low + step * (j + 1) / search_ways;
        }
        std::array<std::size_t, search_ways - 1> count{};
        count_through_each<Arch, search_ways - 1>(h, n, bound, count);
        std::size_t j = 0;
        while (j + 1 < search_ways && count[j] < k) {
            ++j;
        }
        if (j > 0) {
            low = bound[j - 1] + 1;
            before = count[j - 1];
        }
        if (j + 1 < search_ways) {
            high = bound[j];
        }
    }
    return low;
}

// Appends at + j to out (at out[k], k moving on) for each set bit j of `bits`, lowest first: the
// positions a mask of comparisons found, without a compress per vector (slow on Zen 5) or a
// branch per vector (a coin toss when a few tokens in a hundred match).
template <class T>
void append_set_bits(std::uint64_t bits, std::size_t at, T* out, std::size_t& k) noexcept
{
    for (; bits != 0; bits &= bits - 1) {
        out[k++] = static_cast<T>(at + static_cast<std::size_t>(__builtin_ctzll(bits)));
    }
}

// Adds to h.mass (0 before, and h.partial 0, as exp_mass_histogram leaves them without masses by
// bucket; it leaves them so) the masses
// of weights e[0 .. n) by bucket (h.bucket_of) for the buckets up to `last`, as a histogram of
// them all would hold them; the buckets after it stay 0. The tokens of those buckets are picked
// first (their indices listed), so that only they are added.
template <class Arch>
void add_masses_through(rank_histogram& h, const float* e, std::size_t n, std::size_t last)
{
    const std::uint16_t* bucket_of = h.bucket_of.data();
    const auto through = static_cast<std::uint16_t>(last);
    std::vector<std::uint32_t>& picked = h.picked;
    if (picked.size() < n) {
        picked.resize(n);
    }
    std::uint32_t* __restrict index = picked.data();
    std::size_t k = 0;
    std::size_t i = 0;
#if defined(__AVX512BW__)
    if constexpr (std::is_base_of_v<xsimd::avx512bw, simd_of<Arch>>) {
        // The indices from the bits of 64 comparisons at a time (append_set_bits).
        const __m512i bound = _mm512_set1_epi16(static_cast<short>(through));
        for (; i + 64 <= n; i += 64) {
            const std::uint64_t in =
                static_cast<std::uint64_t>(_mm512_cmple_epu16_mask(_mm512_loadu_si512(bucket_of + i), bound)) |
                (static_cast<std::uint64_t>(_mm512_cmple_epu16_mask(_mm512_loadu_si512(bucket_of + i + 32), bound)) << 32);
            append_set_bits(in, i, index, k);
        }
    }
#endif
#if defined(__AVX2__)
    if constexpr (std::is_base_of_v<xsimd::avx2, simd_of<Arch>>) {
        // The bits of 32 comparisons at a time, packed to bytes in order for one movemask.
        const __m256i above = _mm256_set1_epi16(static_cast<short>(last + 1)); // at most 2^10
        for (; i + 32 <= n; i += 32) {
            const __m256i first = _mm256_cmpgt_epi16(above, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bucket_of + i)));
            const __m256i second = _mm256_cmpgt_epi16(above, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bucket_of + i + 16)));
            const __m256i bytes = _mm256_permute4x64_epi64(_mm256_packs_epi16(first, second), 0xd8);
            append_set_bits(static_cast<std::uint32_t>(_mm256_movemask_epi8(bytes)), i, index, k);
        }
    }
#endif
    for (; i < n; ++i) {
        index[k] = static_cast<std::uint32_t>(i);
        k += bucket_of[i] <= through ? 1 : 0;
    }
    // Added in four 64-bit copies, as histogram_builder adds, and folded every 2^17 tokens.
    constexpr std::size_t buckets = rank_histogram::buckets;
    constexpr std::size_t fold_every = std::size_t{1} << 17;
    std::uint64_t* __restrict partial = h.partial.data();
    mass_t* mass = h.mass.data();
    for (std::size_t begin = 0; begin < k; begin += fold_every) {
        const std::size_t end = std::min(k, begin + fold_every);
        std::size_t j = begin;
        for (; j + 4 <= end; j += 4) {
            partial[bucket_of[index[j]]] += mass_of(e[index[j]]);
            partial[buckets + bucket_of[index[j + 1]]] += mass_of(e[index[j + 1]]);
            partial[2 * buckets + bucket_of[index[j + 2]]] += mass_of(e[index[j + 2]]);
            partial[3 * buckets + bucket_of[index[j + 3]]] += mass_of(e[index[j + 3]]);
        }
        for (; j < end; ++j) {
            partial[bucket_of[index[j]]] += mass_of(e[index[j]]);
        }
        for (std::size_t b = 0; b <= last; ++b) {
            mass[b] += mass_t{partial[b]} + partial[buckets + b] + partial[2 * buckets + b] + partial[3 * buckets + b];
            partial[b] = partial[buckets + b] = partial[2 * buckets + b] = partial[3 * buckets + b] = 0;
        }
    }
}

// The histogram of the masses of weights e by typical's keys distance_key(center, x[i]) (top: 0,
// which no key is above), the keys computed and not stored (the searches through it compute those
// of the bucket they gather); returns the total mass.
template <class Arch>
[[nodiscard]] mass_t distance_histogram(const float* x, const float* e, std::size_t n, float center, float per_unit, rank_histogram& h)
{
    constexpr std::size_t block = histogram_builder::block;
    histogram_builder builder(h, 0.0f, per_unit, n);
    alignas(64) std::uint64_t mass[block];
    std::size_t done = 0;
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, simd_of<Arch>>) {
        // The keys and buckets_and_masses in one loop, each vector's masses added to their
        // buckets a few vectors later (histogram_builder::add_run).
        const __m512 c = _mm512_set1_ps(center);
        const __m512 sign = _mm512_set1_ps(-0.0f);
        const __m512 none = _mm512_set1_ps(minus_infinity);
        const __m512 scale = _mm512_set1_ps(per_unit);
        alignas(64) std::uint64_t run_masses[histogram_builder::run];
        for (; done + histogram_builder::run <= n; done += histogram_builder::run) {
            builder.add_run(run_masses, [&](std::size_t i, std::uint16_t* bucket, std::uint64_t* run_mass) {
                const std::size_t at = done + i;
                const __m512 v = _mm512_loadu_ps(x + at);
                // -|center - v|, -inf for NaN
                const __m512 key = _mm512_mask_or_ps(none, _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), _mm512_sub_ps(c, v), sign);
                store_masses(_mm512_loadu_ps(e + at), run_mass);
                // (0 - key) per unit, as h.position(key) with top 0; the key is never NaN.
                store_buckets(_mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), key), scale), bucket);
            });
        }
    }
#endif
#if defined(__AVX2__)
    if constexpr (std::is_base_of_v<xsimd::avx2, simd_of<Arch>>) {
        // The same loop in 256-bit registers. The position of key -|center - v| below top 0 is
        // |center - v| per unit: NaN for a NaN logit, which store_buckets places last, as a
        // NaN's key -inf.
        const __m256 c = _mm256_set1_ps(center);
        const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
        const __m256 scale = _mm256_set1_ps(per_unit);
        alignas(64) std::uint64_t run_masses[histogram_builder::run];
        for (; done + histogram_builder::run <= n; done += histogram_builder::run) {
            builder.add_run(run_masses, [&](std::size_t i, std::uint16_t* bucket, std::uint64_t* run_mass) {
                const std::size_t at = done + i;
                const auto position = [&](std::size_t half) {
                    return _mm256_mul_ps(_mm256_and_ps(_mm256_sub_ps(c, _mm256_loadu_ps(x + at + half)), magnitude), scale);
                };
                store_masses(_mm256_loadu_ps(e + at), run_mass);
                store_masses(_mm256_loadu_ps(e + at + 8), run_mass + 8);
                store_buckets(position(0), position(8), bucket);
            });
        }
    }
#endif
    alignas(64) float keys[block];
    for (std::size_t begin = done; begin < n; begin += block) {
        const std::size_t count = std::min(block, n - begin);
        float lowest = 0.0f;
        float highest = 0.0f;
        distance_keys<Arch>(x + begin, e + begin, count, center, keys, lowest, highest);
        buckets_and_masses<Arch>(keys, e + begin, count, h, builder.next_buckets(), mass);
        builder.add(mass, count);
    }
    return builder.finish();
}

// Appends the tokens of bucket `b` of h with value(i) >= low that rank at or before `bound` by
// those values to `out` (cleared for n tokens), as gather_range does for a range of logits. The
// values (logits or keys) are those h was built from (its bucket_of), read only for the tokens of
// the bucket: typical's keys are computed there.
template <class Arch, class Value>
void gather_bucket_values(Value value, const float* e, std::size_t n, const rank_histogram& h, std::size_t b, float low, rank_bound bound,
                          token_arrays& out)
{
    const std::uint16_t* bucket_of = h.bucket_of.data();
    const auto want = static_cast<std::uint16_t>(b);
    std::int32_t* __restrict out_id = out.id.data();
    float* __restrict out_logit = out.logit.data();
    float* __restrict out_weight = out.weight.data();
    std::size_t k = 0;
    const auto take = [=, &k](std::size_t from, std::size_t to) {
        for (std::size_t i = from; i < to; ++i) {
            const bool in = bucket_of[i] == want;
            const float v = in ? value(i) : minus_infinity;
            const auto id = static_cast<std::int32_t>(i);
            out_id[k] = id;
            out_logit[k] = v;
            out_weight[k] = e[i];
            k += static_cast<std::size_t>(in) & static_cast<std::size_t>(v >= low) & static_cast<std::size_t>(!(v == bound.logit && id > bound.id));
        }
    };
    std::size_t i = 0;
#if defined(__AVX512BW__)
    if constexpr (std::is_base_of_v<xsimd::avx512bw, simd_of<Arch>>) {
        // Two steps: the ids whose bucket matches, from the bits of 128 comparisons at a time
        // (append_set_bits), then those that pass the other tests, moved down in place.
        const __m512i wanted = _mm512_set1_epi16(static_cast<short>(want));
        std::size_t found = 0;
        const auto hits = [&wanted, bucket_of](std::size_t at) {
            return static_cast<std::uint64_t>(_mm512_cmpeq_epi16_mask(_mm512_loadu_si512(bucket_of + at), wanted)) |
                   (static_cast<std::uint64_t>(_mm512_cmpeq_epi16_mask(_mm512_loadu_si512(bucket_of + at + 32), wanted)) << 32);
        };
        for (; i + 128 <= n; i += 128) {
            const std::uint64_t low_half = hits(i);
            const std::uint64_t high_half = hits(i + 64);
            append_set_bits(low_half, i, out_id, found);
            append_set_bits(high_half, i + 64, out_id, found);
        }
        for (; i + 64 <= n; i += 64) {
            append_set_bits(hits(i), i, out_id, found);
        }
        for (std::size_t j = 0; j < found; ++j) {
            const std::int32_t id = out_id[j];
            const float v = value(static_cast<std::size_t>(id));
            out_id[k] = id;
            out_logit[k] = v;
            out_weight[k] = e[id];
            k += static_cast<std::size_t>(v >= low) & static_cast<std::size_t>(!(v == bound.logit && id > bound.id));
        }
    }
#endif
#if defined(__AVX2__)
    if constexpr (std::is_base_of_v<xsimd::avx2, simd_of<Arch>>) {
        // As AVX-512's: the ids of the matching buckets from the bits of 32 comparisons at a
        // time (packed to bytes in order for one movemask), then the other tests.
        const __m256i wanted = _mm256_set1_epi16(static_cast<short>(want));
        std::size_t found = 0;
        for (; i + 32 <= n; i += 32) {
            const __m256i first = _mm256_cmpeq_epi16(wanted, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bucket_of + i)));
            const __m256i second = _mm256_cmpeq_epi16(wanted, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bucket_of + i + 16)));
            const __m256i bytes = _mm256_permute4x64_epi64(_mm256_packs_epi16(first, second), 0xd8);
            append_set_bits(static_cast<std::uint32_t>(_mm256_movemask_epi8(bytes)), i, out_id, found);
        }
        for (std::size_t j = 0; j < found; ++j) {
            const std::int32_t id = out_id[j];
            const float v = value(static_cast<std::size_t>(id));
            out_id[k] = id;
            out_logit[k] = v;
            out_weight[k] = e[id];
            k += static_cast<std::size_t>(v >= low) & static_cast<std::size_t>(!(v == bound.logit && id > bound.id));
        }
    }
#endif
    if constexpr (!is_scalar<Arch>) {
        using U = xsimd::batch<std::uint16_t, simd_of<Arch>>;
        constexpr std::size_t w = U::size;
        const U wanted(want);
        for (; i + w <= n; i += w) {
            if (xsimd::any(U::load_unaligned(bucket_of + i) == wanted)) {
                take(i, i + w);
            }
        }
    }
    take(i, n);
    out.close(k);
}

// gather_bucket_values of the values x[i].
template <class Arch>
void gather_bucket(const float* x, const float* e, std::size_t n, const rank_histogram& h, std::size_t b, float low, rank_bound bound,
                   token_arrays& out)
{
    gather_bucket_values<Arch>([x](std::size_t i) { return x[i]; }, e, n, h, b, low, bound, out);
}

// The k-th token by rank (k from 1 to n) of n finite logits from `lowest` to `highest`, with k as
// its count through, as find_by_rank<Arch, true> finds it: each token's bucket by logit over that
// range in one pass, the bucket of the k-th by counts of 16-bit buckets through bounds
// (bucket_of_count), where find_by_rank compares every logit with seven thresholds per pass
// (256k logits, Intel Xeon with AVX-512: about half the time), then the k-th among that bucket's
// tokens. h's masses are left as they were; its buckets are these logits'.
template <class Arch>
[[nodiscard]] rank_position find_by_count(const float* x, std::size_t n, float lowest, float highest, std::size_t k, rank_histogram& h,
                                          rank_scratch& scratch)
{
    rank_positions<Arch>(x, n, highest, rank_histogram::unit_for(highest - lowest), h);
    std::size_t before = 0;
    const std::size_t b = bucket_of_count<Arch>(h, n, k, before);
    token_arrays& in = scratch.bucket;
    in.clear(n);
    // No weights: the logits stand in for them, and nothing reads them.
    gather_bucket<Arch>(x, x, n, h, b, lowest, everything, in);
    std::vector<token_data>& tokens = scratch.last;
    tokens.resize(in.count);
    for (std::size_t i = 0; i < in.count; ++i) {
        tokens[i] = {in.id[i], in.logit[i], 0.0f};
    }
    const auto kth = tokens.begin() + static_cast<std::ptrdiff_t>(k - before - 1);
    std::nth_element(tokens.begin(), kth, tokens.end(), ranks_before);
    return {kth->id, kth->logit, mass_t{k}};
}

// The bucket of h in which the running mass of its buckets (in rank order) first reaches
// `target`, and in `before` (0 before) the mass of the buckets above it. Where the target is at
// most the mass of the tokens ranking at or before a bound, the walk stops at the bound's bucket at
// the latest: buckets above it hold only tokens ranking before it.
[[nodiscard]] inline std::size_t bucket_of_mass(const rank_histogram& h, mass_t target, mass_t& before) noexcept
{
    std::size_t b = 0;
    while (b + 1 < rank_histogram::buckets && before + h.mass[b] < target) {
        before += h.mass[b];
        ++b;
    }
    return b;
}

// The token at which the running mass of the tokens ranking at or before `bound` first reaches
// `target` (at least 1 and at most their total mass), in rank order. x and e (e[i] the weight of
// x[i], exp(x[i] - max); null when Unit, where every token weighs 1 and the mass is a count) cover
// the whole vocabulary; tokens below `lowest` must weigh nothing (Unit: there must be none).
// Each pass over the tokens still in range measures the mass above seven thresholds spread over
// their logits, keeps the bracket the target falls in and gathers its tokens; once at most 64
// remain, or all have one logit, they are sorted and walked.
// With `histogram` (of these x and e; not Unit) the first pass walks its buckets instead and
// gathers the one the target falls in. With `ids` (ascending), token i is ids[i]: a set gathered
// before, whose first pass is skipped when it holds at most 64 tokens.
template <class Arch, bool Unit>
[[nodiscard]] rank_position find_by_rank(const float* x, const float* e, std::size_t n, float lowest, float highest,
                                         mass_t target, rank_bound bound, rank_scratch& scratch,
                                         const rank_histogram* histogram = nullptr, const std::int32_t* ids = nullptr)
{
    constexpr std::size_t few = 64;
    lowest = std::max(lowest, bound.logit);
    mass_t before = 0; // the mass of the tokens ranking above the current range
    float high = std::numeric_limits<float>::infinity();
    // Pass 0 reads the vocabulary itself; later passes the gathered tokens.
    const float* rx = x;
    const float* re = e;
    const std::int32_t* rid = ids;
    std::size_t count = n;
    float range_low = lowest;
    float range_high = highest;
    int next = 0;
    bool whole = ids == nullptr;
    if (histogram != nullptr && !Unit) {
        const std::size_t b = bucket_of_mass(*histogram, target, before);
        token_arrays& out = scratch.ranges[next];
        next ^= 1;
        out.clear(n);
        gather_bucket<Arch>(x, e, n, *histogram, b, lowest, bound, out);
        rx = out.logit.data();
        re = out.weight.data();
        rid = out.id.data();
        count = out.count;
        range_low = out.lowest;
        range_high = out.highest;
        whole = false;
    }
    while (whole || (count > few && range_low < range_high)) {
        std::array<float, rank_splits> threshold;
        const float step = (range_high - range_low) / static_cast<float>(rank_splits + 1);
        for (std::size_t j = 0; j < rank_splits; ++j) {
            // Descending, all above range_low: the bracket below the last holds the lowest token.
            threshold[j] = std::max(range_high - step * static_cast<float>(j + 1), range_low);
            if (threshold[j] <= range_low) {
                threshold[j] = std::nextafter(range_low, std::numeric_limits<float>::infinity());
            }
        }
        std::array<mass_t, rank_splits> mass;
        masses_above<Arch, Unit>(rx, re, count, threshold, mass);
        // Tokens ranking above the range are not in it after pass 0, and in pass 0 the first
        // bracket reaches up to +inf, so `before + mass[j]` is the running mass down to threshold j.
        std::size_t j = 0;
        while (j < rank_splits && before + mass[j] < target) {
            ++j;
        }
        const float new_high = j == 0 ? high : threshold[j - 1];
        const float new_low = j == rank_splits ? lowest : threshold[j];
        if (j > 0) {
            before += mass[j - 1];
        }
        token_arrays& out = scratch.ranges[next];
        next ^= 1;
        out.clear(count); // the gather writes token i at an index <= i
        gather_range<Arch>(rx, Unit ? nullptr : re, rid, count, new_low, new_high, bound, out);
        high = new_high;
        lowest = new_low;
        rx = out.logit.data();
        re = out.weight.data();
        rid = out.id.data();
        count = out.count;
        range_low = out.lowest;
        range_high = out.highest;
        whole = false;
    }
    auto& last = scratch.last;
    last.clear();
    for (std::size_t i = 0; i < count; ++i) {
        // rid is null only in pass 0, which has run; re only with Unit, whose gathers weigh 1.
        last.push_back({rid[i], rx[i], re == nullptr ? 1.0f : re[i]});
    }
    if (range_low < range_high) {
        std::sort(last.begin(), last.end(), ranks_before);
    }
    rank_position found;
    for (const auto& t : last) {
        before += Unit ? 1 : mass_of(t.p);
        found = {t.id, t.logit, before};
        if (before >= target) {
            break;
        }
    }
    return found;
}

// find_by_rank over typical's keys distance_key(center, x[i]) of the logits x, through h, the
// histogram of their weights e by key (distance_histogram): the walk of its buckets, one pass
// gathering the bucket the target falls in with its keys (computed for its tokens only: no key
// is stored), and the search of that bucket.
template <class Arch>
[[nodiscard]] rank_position find_by_distance(const float* x, const float* e, std::size_t n, float center, mass_t target, rank_bound bound,
                                             rank_scratch& scratch, const rank_histogram& h)
{
    mass_t before = 0;
    const std::size_t b = bucket_of_mass(h, target, before);
    token_arrays& in = scratch.bucket;
    in.clear(n);
    gather_bucket_values<Arch>([x, center](std::size_t i) { return distance_key(center, x[i]); }, e, n, h, b, bound.logit, bound, in);
    rank_position found = find_by_rank<Arch, false>(in.logit.data(), in.weight.data(), in.count, in.lowest, in.highest, target - before,
                                                    bound, scratch, nullptr, in.id.data());
    found.through += before;
    return found;
}

} // namespace qk::sampling::detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
