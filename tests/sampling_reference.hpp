// The samplers of qk::sampling as brute-force references written from the header comments (the
// specification), not from the implementation, and the inputs they are compared on: the two
// softmax definitions and the two draws, reference candidate sets and their comparison with a
// qs::candidates, one reference per sampler, logits with ties, -inf and NaN, and the ways a test's
// candidates are set up before the sampler under test runs (test_sampling_samplers.cpp).
#pragma once

#include <doctest/doctest.h>

#include <sampling/sampling.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "inputs.hpp"

namespace qk_test::sampling {

namespace qs = qk::sampling;
using qs::token_data;

inline constexpr float inf = std::numeric_limits<float>::infinity();
inline constexpr float nan_value = std::numeric_limits<float>::quiet_NaN();

// The references compute probabilities with the library's deterministic exp and log (and pow,
// which is exp(y log x) built from them) instead of std::exp: the headers define every softmax
// with these, so the references' probabilities match the library's bit for bit and a cut-off or
// a draw can be compared exactly. Everything else (sorting, cutting, counting, matching) is
// written here from the header comments.
inline float d_exp(float x) { return qs::detail::exp(x); }
inline float d_log(float x) { return qs::detail::log(x); }
inline float d_pow(float x, float y) { return qs::detail::pow(x, y); }

// A product that must be rounded before the addition consuming it, whatever contraction flags
// the test is built with (the library never fuses, so neither may the reference).
inline float strict(float v)
{
    volatile float stored = v;
    return stored;
}

inline float norm(float v) { return v == v ? v : -inf; }
inline bool same_bits(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }

inline bool ranks_first(const token_data& a, const token_data& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); }

inline std::vector<token_data> sorted_copy(std::vector<token_data> v)
{
    std::sort(v.begin(), v.end(), ranks_first);
    return v;
}

// --- the two softmax definitions ---

// candidates::compute_probabilities: in list order, max, e = exp(l - max) corrected by the
// subtraction's exact error (TwoSum) as e (1 + err), their total in double with element i in lane i % 16 and
// the lanes added as a tree, p = e * float(1 / total).
inline float exp_difference_ref(float l, float max)
{
    const float d = l - max;
    const float e = d_exp(d);
    if (!(e > 0.0f)) {
        return 0.0f;
    }
    const float moved = d - l;
    const float err = (l - (d - moved)) + (-max - moved);
    return e * (1.0f + err);
}

inline void softmax_list(std::vector<token_data>& v)
{
    float max = -inf;
    for (const auto& t : v) {
        max = t.logit > max ? t.logit : max;
    }
    double lanes[16] = {};
    for (std::size_t i = 0; i < v.size(); ++i) {
        v[i].p = exp_difference_ref(v[i].logit, max);
        lanes[i % 16] += static_cast<double>(v[i].p);
    }
    for (std::size_t half = 8; half > 0; half /= 2) {
        for (std::size_t i = 0; i < half; ++i) {
            lanes[i] += lanes[i + half];
        }
    }
    const auto factor = static_cast<float>(1.0 / lanes[0]);
    for (auto& t : v) {
        t.p = t.p * factor;
    }
}

// vocabulary_scan.hpp over a whole vocabulary in id order: chunks of 1024, element j of a chunk
// into lane j % 16, the 16 lanes added as a tree (i += i + 8, + 4, + 2, + 1), chunk sums added in
// double.
struct vocabulary_sums {
    float max = -inf;
    std::vector<float> e;
    std::vector<float> chunk;
    double total = 0;
};

inline vocabulary_sums sums_of(const std::vector<token_data>& v)
{
    vocabulary_sums s;
    for (const auto& t : v) {
        s.max = t.logit > s.max ? t.logit : s.max;
    }
    s.e.resize(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
        s.e[i] = d_exp(v[i].logit - s.max);
    }
    for (std::size_t begin = 0; begin < v.size(); begin += 1024) {
        float lanes[16] = {};
        for (std::size_t j = 0; j < 1024 && begin + j < v.size(); ++j) {
            lanes[j % 16] = lanes[j % 16] + s.e[begin + j];
        }
        for (std::size_t half = 8; half > 0; half /= 2) {
            for (std::size_t i = 0; i < half; ++i) {
                lanes[i] = lanes[i] + lanes[i + half];
            }
        }
        s.chunk.push_back(lanes[0]);
        s.total += lanes[0];
    }
    return s;
}

inline void softmax_vocabulary(std::vector<token_data>& v)
{
    const vocabulary_sums s = sums_of(v);
    const auto factor = static_cast<float>(1.0 / s.total);
    for (std::size_t i = 0; i < v.size(); ++i) {
        v[i].p = s.e[i] * factor;
    }
}

// The documented whole-vocabulary draw: chunk sums first, then the elements of the chunk reached,
// in double; a chosen chunk whose elements fall short gives its last element with weight.
inline std::size_t vocabulary_draw(const vocabulary_sums& s, double u)
{
    const double threshold = u * s.total;
    double running = 0;
    for (std::size_t c = 0; c < s.chunk.size(); ++c) {
        if (running + s.chunk[c] > threshold || c + 1 == s.chunk.size()) {
            std::size_t last = s.e.size();
            for (std::size_t j = c * 1024; j < std::min(s.e.size(), (c + 1) * 1024); ++j) {
                if (s.e[j] > 0.0f) {
                    last = j;
                    running += s.e[j];
                    if (running > threshold) {
                        return j;
                    }
                }
            }
            if (last != s.e.size()) {
                return last;
            }
        } else {
            running += s.chunk[c];
        }
    }
    return s.e.size();
}

// The list draw: the first index whose running double sum of p exceeds u times the double sum.
inline std::size_t list_draw(const std::vector<token_data>& v, double u)
{
    double total = 0;
    for (const auto& t : v) {
        total += t.p;
    }
    double running = 0;
    std::size_t last = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (v[i].p > 0.0f) {
            last = i;
            running += v[i].p;
            if (running > u * total) {
                return i;
            }
        }
    }
    return last;
}

// --- reference sets ---

struct set_ref {
    std::vector<token_data> items; // in the order the set has
    bool whole = false;            // the whole vocabulary, items in id order
    bool ordered = true;           // whether the header fixes that order
};

inline set_ref unchanged(set_ref in)
{
    in.ordered = false;
    return in;
}

inline set_ref as_list(std::vector<token_data> items, bool ordered = true) { return {std::move(items), false, ordered}; }

inline set_ref whole_ref(const std::vector<float>& x)
{
    set_ref r;
    r.whole = true;
    for (std::size_t i = 0; i < x.size(); ++i) {
        r.items.push_back({static_cast<std::int32_t>(i), norm(x[i]), 0.0f});
    }
    return r;
}

// The current set of a candidates object: a whole vocabulary as every id with its logit (NaN
// shown as -inf, as it counts), a list as it is.
inline std::vector<token_data> current_set(qs::candidates& c)
{
    std::vector<token_data> out;
    if (c.whole_vocabulary()) {
        for (std::int32_t id = 0; id < c.vocab_size(); ++id) {
            out.push_back({id, norm(c.logit(id)), 0.0f});
        }
    } else {
        out = c.list();
    }
    return out;
}

inline std::string describe(const token_data& t)
{
    std::ostringstream s;
    s.precision(9);
    s << "{id " << t.id << ", logit " << t.logit << ", p " << t.p << "}";
    return s.str();
}

// Empty when `got` is the set `want` describes (ids and logit bits; p bits too when asked, in
// lists), otherwise the first difference.
inline std::string difference(std::vector<token_data> got, std::vector<token_data> want, bool ordered, bool with_p)
{
    for (const auto& t : got) {
        if (t.logit != t.logit) {
            return "the set holds a NaN logit: " + describe(t);
        }
    }
    if (!ordered) {
        const auto by_id = [](const token_data& a, const token_data& b) { return a.id < b.id; };
        std::sort(got.begin(), got.end(), by_id);
        std::sort(want.begin(), want.end(), by_id);
    }
    if (got.size() != want.size()) {
        return "got " + std::to_string(got.size()) + " candidates, expected " + std::to_string(want.size());
    }
    for (std::size_t i = 0; i < got.size(); ++i) {
        if (got[i].id != want[i].id || !same_bits(got[i].logit, want[i].logit) || (with_p && !same_bits(got[i].p, want[i].p))) {
            return "at " + std::to_string(i) + ": got " + describe(got[i]) + ", expected " + describe(want[i]);
        }
    }
    return {};
}

inline void check_set(qs::candidates& c, const set_ref& want, bool with_p = false)
{
    const bool lists = !c.whole_vocabulary() && !want.whole;
    const std::string d = difference(current_set(c), want.items, want.ordered, with_p && lists);
    CHECK_MESSAGE(d.empty(), d);
}

// --- reference samplers, each from its header comment ---

inline std::int32_t ref_greedy(const set_ref& in)
{
    const token_data* best = nullptr;
    for (const auto& t : in.items) {
        if (t.logit > -inf && (best == nullptr || ranks_first(t, *best))) {
            best = &t;
        }
    }
    return best == nullptr ? -1 : best->id;
}

inline set_ref ref_temp(set_ref in, float t)
{
    if (t <= 0.0f) {
        std::size_t keep = 0;
        for (std::size_t i = 1; i < in.items.size(); ++i) {
            keep = in.items[i].logit > in.items[keep].logit ? i : keep;
        }
        for (std::size_t i = 0; i < in.items.size(); ++i) {
            in.items[i].logit = i == keep ? in.items[i].logit : -inf;
        }
    } else {
        for (auto& e : in.items) {
            e.logit = e.logit / t;
        }
    }
    return in;
}

inline set_ref ref_top_k(const set_ref& in, std::int32_t k)
{
    if (k <= 0 || static_cast<std::size_t>(k) >= in.items.size()) {
        return unchanged(in);
    }
    auto l = sorted_copy(in.items);
    l.resize(static_cast<std::size_t>(k));
    return as_list(l);
}

// The exact mass of exact_mass.hpp, written from its definition: floor(e * 2^48), in double
// (e has 24 bits, so the product and its floor are exact), summed in 128-bit integers.
__extension__ using mass_ref = unsigned __int128;
inline std::uint64_t mass_of_ref(float e) { return static_cast<std::uint64_t>(std::floor(static_cast<double>(e) * 0x1.0p48)); }

// ceil(p * total) for p in (0, 1): p = f 2^ex with f in [1/2, 1) a 24-bit fraction (frexp).
inline mass_ref share_ref(float p, mass_ref total)
{
    int ex = 0;
    const double f = std::frexp(static_cast<double>(p), &ex);
    const auto m = static_cast<std::uint64_t>(std::ldexp(f, 24));
    const int s = 24 - ex; // p = m / 2^s
    const mass_ref product = mass_ref{m} * total;
    if (s >= 128) {
        return product > 0 ? 1 : 0;
    }
    const mass_ref whole = product >> s;
    return (whole << s) == product ? whole : whole + 1;
}

// "The candidate that crosses p is kept": p <= 0 keeps one; the cut compares exact masses.
inline set_ref ref_top_p(const set_ref& in, float p, std::size_t min_keep)
{
    if (p >= 1.0f) {
        return unchanged(in);
    }
    auto l = in.items;
    float max = -inf;
    for (const auto& t : l) {
        max = t.logit > max ? t.logit : max;
    }
    mass_ref total = 0;
    for (const auto& t : l) {
        total += mass_of_ref(d_exp(t.logit - max));
    }
    if (in.whole) {
        // A prefix lists each token's weight over the vocabulary's exact mass.
        const auto factor = static_cast<float>(0x1.0p48 / static_cast<double>(total));
        for (auto& t : l) {
            t.p = d_exp(t.logit - max) * factor;
        }
    } else {
        softmax_list(l);
    }
    l = sorted_copy(l);
    const mass_ref target = p > 0.0f ? share_ref(p, total) : 0;
    mass_ref sum = 0;
    std::size_t keep = l.size();
    for (std::size_t i = 0; i < l.size(); ++i) {
        sum += mass_of_ref(d_exp(l[i].logit - max));
        if (sum >= target && i + 1 >= min_keep) {
            keep = i + 1;
            break;
        }
    }
    l.resize(keep);
    return as_list(l);
}

inline set_ref ref_min_p(const set_ref& in, float p, std::size_t min_keep)
{
    if (p <= 0.0f || in.items.empty()) {
        return unchanged(in);
    }
    float max = -inf;
    for (const auto& t : in.items) {
        max = std::max(max, t.logit);
    }
    if (!(max > -inf)) {
        return unchanged(in);
    }
    const float threshold = max + d_log(p);
    std::vector<token_data> passing;
    for (const auto& t : in.items) {
        if (t.logit >= threshold) {
            passing.push_back(t);
        }
    }
    if (passing.size() >= min_keep) {
        return as_list(passing);
    }
    // The min_keep best, sorted: every candidate where min_keep exceeds the set.
    auto l = sorted_copy(in.items);
    l.resize(std::min(min_keep, l.size()));
    return as_list(l);
}

// floor(p total) + 1: by way of ceil, which is one more exactly when p total is not an integer.
inline mass_ref beyond_ref(float p, mass_ref total)
{
    if (!(p > 0.0f)) {
        return 1;
    }
    const mass_ref ceiling = share_ref(p, total);
    int ex = 0;
    const auto m = static_cast<std::uint64_t>(std::ldexp(std::frexp(static_cast<double>(p), &ex), 24));
    const int s = 24 - ex;
    const bool integral = s < 128 && ((mass_ref{m} * total) >> s << s) == mass_ref{m} * total;
    return integral ? ceiling + 1 : ceiling;
}

// typical, from its header: weights e = exp(l - max) in the set's order; z and s summed in double
// in 16 lanes by position; center = float(max + s / z); score |center - l| (+inf for -inf); order
// by score, then id; keep through the first token whose running exact mass reaches
// floor(p total) + 1, and at least min_keep.
inline set_ref ref_typical(const set_ref& in, float p, std::size_t min_keep)
{
    if (p >= 1.0f) {
        return unchanged(in);
    }
    const auto& l = in.items;
    float max = -inf;
    for (const auto& t : l) {
        max = t.logit > max ? t.logit : max;
    }
    double z[16] = {};
    double s[16] = {};
    mass_ref total = 0;
    for (std::size_t i = 0; i < l.size(); ++i) {
        const float e = d_exp(l[i].logit - max);
        z[i % 16] += e;
        s[i % 16] += e > 0.0f ? strict(e * (l[i].logit - max)) : 0.0f;
        total += mass_of_ref(e);
    }
    for (std::size_t half = 8; half > 0; half /= 2) {
        for (std::size_t i = 0; i < half; ++i) {
            z[i] += z[i + half];
            s[i] += s[i + half];
        }
    }
    const auto center = static_cast<float>(static_cast<double>(max) + s[0] / z[0]);
    std::vector<std::pair<float, token_data>> scored;
    for (const auto& t : l) {
        scored.emplace_back(t.logit == -inf ? inf : std::fabs(center - t.logit), token_data{t.id, t.logit, 0.0f});
    }
    std::sort(scored.begin(), scored.end(),
              [](const auto& a, const auto& b) { return a.first < b.first || (a.first == b.first && a.second.id < b.second.id); });
    const mass_ref target = beyond_ref(p, total);
    std::vector<token_data> out;
    mass_ref running = 0;
    for (const auto& [score, t] : scored) {
        out.push_back(t);
        running += mass_of_ref(d_exp(t.logit - max));
        if (running >= target && out.size() >= min_keep) {
            break;
        }
    }
    return as_list(out);
}

// A sum in vocabulary_scan.hpp's fixed order (as sums_of adds the exps): chunks of 1024, element
// j of a chunk into lane j % 16, the lanes added as a tree, chunk sums added in double.
inline double fixed_order_sum(const std::vector<float>& terms)
{
    double total = 0;
    for (std::size_t begin = 0; begin < terms.size(); begin += 1024) {
        float lanes[16] = {};
        for (std::size_t j = 0; j < 1024 && begin + j < terms.size(); ++j) {
            lanes[j % 16] = lanes[j % 16] + terms[begin + j];
        }
        for (std::size_t half = 8; half > 0; half /= 2) {
            for (std::size_t i = 0; i < half; ++i) {
                lanes[i] = lanes[i] + lanes[i + half];
            }
        }
        total += lanes[0];
    }
    return total;
}

inline set_ref ref_top_n_sigma(set_ref in, float n)
{
    if (!(n > 0.0f) || in.items.size() <= 1) {
        return in;
    }
    float max = -inf;
    std::size_t count = 0;
    std::vector<float> terms;
    for (const auto& t : in.items) {
        terms.push_back(t.logit > -inf ? t.logit : 0.0f);
        if (t.logit > -inf) {
            max = std::max(max, t.logit);
            ++count;
        }
    }
    float threshold = -inf;
    if (count > 0) {
        const auto mean = static_cast<float>(fixed_order_sum(terms) / static_cast<double>(count));
        for (std::size_t i = 0; i < terms.size(); ++i) {
            const float d = in.items[i].logit - mean;
            terms[i] = in.items[i].logit > -inf ? strict(d * d) : 0.0f;
        }
        const float sigma = std::sqrt(static_cast<float>(fixed_order_sum(terms) / static_cast<double>(count)));
        threshold = max - strict(n * sigma);
    }
    for (auto& t : in.items) {
        if (t.logit < threshold) {
            t.logit = -inf;
        }
    }
    return in;
}

// `draw` gives the next number of the sampler's generator; it is called only where xtc draws.
template <class Draw>
set_ref ref_xtc(const set_ref& in, float probability, float threshold, std::size_t min_keep, Draw&& draw)
{
    if (probability <= 0.0f || threshold > 0.5f || in.items.size() < 2) {
        return unchanged(in);
    }
    if (draw() > probability) {
        return unchanged(in);
    }
    float max = -inf;
    for (const auto& t : in.items) {
        max = std::max(max, t.logit);
    }
    mass_ref total = 0;
    for (const auto& t : in.items) {
        total += mass_of_ref(d_exp(t.logit - max));
    }
    const mass_ref share = threshold > 0.0f ? share_ref(threshold, total) : 0;
    const auto passes = [&](const token_data& t) { return mass_of_ref(d_exp(t.logit - max)) >= share; };
    const auto sorted = sorted_copy(in.items);
    std::size_t above = 0;
    while (above < sorted.size() && passes(sorted[above])) {
        ++above;
    }
    if (above < 2 || in.items.size() - (above - 1) < min_keep) {
        return unchanged(in);
    }
    // The best above - 1 go: -inf in a whole vocabulary, erased from a list; the rest keep their order.
    std::vector<std::int32_t> gone;
    for (std::size_t i = 0; i + 1 < above; ++i) {
        gone.push_back(sorted[i].id);
    }
    const auto removed = [&gone](const token_data& t) { return std::find(gone.begin(), gone.end(), t.id) != gone.end(); };
    set_ref out = in;
    if (in.whole) {
        for (auto& t : out.items) {
            t.logit = removed(t) ? -inf : t.logit;
        }
        return out;
    }
    std::erase_if(out.items, removed);
    out.ordered = true;
    return out;
}

inline set_ref ref_logit_bias(set_ref in, const std::vector<std::pair<std::int32_t, float>>& biases)
{
    for (auto& t : in.items) {
        for (const auto& b : biases) {
            if (b.first == t.id) {
                t.logit = norm(t.logit + b.second); // NaN (-inf + inf) counts as -inf, in any form
            }
        }
    }
    return in;
}

// The surprise of a probability in bits, as mirostat_v2 compares it with mu.
inline float surprise_bits(float p) { return -strict(d_log(p) * 1.44269504f); } // -log2 p as ln p / ln 2 in float

struct penalty_config {
    std::int32_t last_n;
    float repeat, frequency, presence;
};

// Counts over the last last_n accepted tokens (all for -1), then the header's formula.
inline set_ref ref_penalties(set_ref in, const std::deque<std::int32_t>& accepted, const penalty_config& cfg)
{
    if (cfg.last_n == 0) {
        return in;
    }
    std::map<std::int32_t, int> counts;
    const std::size_t window = cfg.last_n < 0 ? accepted.size() : std::min(accepted.size(), static_cast<std::size_t>(cfg.last_n));
    for (std::size_t i = accepted.size() - window; i < accepted.size(); ++i) {
        ++counts[accepted[i]];
    }
    for (auto& t : in.items) {
        const auto it = counts.find(t.id);
        if (it != counts.end()) {
            const float scaled = t.logit <= 0.0f ? t.logit * cfg.repeat : t.logit / cfg.repeat;
            t.logit = scaled - (strict(static_cast<float>(it->second) * cfg.frequency) + cfg.presence);
            t.logit = norm(t.logit);
        }
    }
    return in;
}

inline std::vector<std::pair<std::int32_t, std::int32_t>> ref_counts(const std::deque<std::int32_t>& accepted, std::int32_t last_n)
{
    std::map<std::int32_t, std::int32_t> counts;
    if (last_n != 0) {
        const std::size_t window = last_n < 0 ? accepted.size() : std::min(accepted.size(), static_cast<std::size_t>(last_n));
        for (std::size_t i = accepted.size() - window; i < accepted.size(); ++i) {
            ++counts[accepted[i]];
        }
    }
    return {counts.begin(), counts.end()};
}

struct dry_config {
    float multiplier, base;
    std::int32_t allowed_length, last_n;
    std::vector<std::vector<std::int32_t>> breakers;
};

// Brute force from the header: the window, the text after the latest breaker occurrence (latest
// start, longest breaker there), and for every position the longest suffix match, O(n^2).
inline std::map<std::int32_t, std::int32_t> ref_dry_lengths(const std::deque<std::int32_t>& accepted, const dry_config& cfg)
{
    std::map<std::int32_t, std::int32_t> longest;
    if (cfg.multiplier == 0.0f || cfg.base < 1.0f || cfg.last_n == 0) {
        return longest;
    }
    const std::size_t size = cfg.last_n < 0 ? accepted.size() : std::min(accepted.size(), static_cast<std::size_t>(cfg.last_n));
    const std::vector<std::int32_t> w(accepted.end() - static_cast<std::ptrdiff_t>(size), accepted.end());
    const std::size_t n = w.size();
    std::size_t limit = n;
    for (std::size_t s = n; s-- > 0;) {
        std::size_t found = 0;
        for (const auto& b : cfg.breakers) {
            if (s + b.size() <= n && std::equal(b.begin(), b.end(), w.begin() + static_cast<std::ptrdiff_t>(s))) {
                found = std::max(found, b.size());
            }
        }
        if (found > 0) {
            limit = n - s - found;
            break;
        }
    }
    for (std::size_t p = 0; p + 1 < n; ++p) {
        std::size_t length = 0;
        while (length <= p && w[p - length] == w[n - 1 - length]) {
            ++length;
        }
        length = std::min(length, limit);
        if (length >= static_cast<std::size_t>(cfg.allowed_length)) {
            auto& best = longest[w[p + 1]];
            best = std::max(best, static_cast<std::int32_t>(length));
        }
    }
    for (const auto& b : cfg.breakers) {
        if (b.size() == 1) {
            longest.erase(b[0]);
        }
    }
    return longest;
}

inline set_ref ref_dry(set_ref in, const std::deque<std::int32_t>& accepted, const dry_config& cfg)
{
    const auto lengths = ref_dry_lengths(accepted, cfg);
    for (auto& t : in.items) {
        const auto it = lengths.find(t.id);
        if (it != lengths.end()) {
            const float penalty = strict(cfg.multiplier * d_pow(cfg.base, static_cast<float>(it->second - cfg.allowed_length)));
            t.logit = norm(t.logit - penalty);
        }
    }
    return in;
}

// --- inputs ---

inline std::vector<float> tie_logits(std::size_t n, std::uint32_t seed)
{
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> d(0, 4);
    std::vector<float> x(n);
    for (auto& v : x) {
        v = static_cast<float>(d(rng));
    }
    return x;
}

// Gaussian logits with about 10% -inf and 5% NaN; logit 0 is always finite.
inline std::vector<float> mixed_logits(std::size_t n, std::uint32_t seed, float scale = 2.5f)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::uniform_real_distribution<float> kind(0.0f, 1.0f);
    std::vector<float> x(n);
    for (auto& v : x) {
        v = d(rng) * scale;
        const float k = kind(rng);
        v = k < 0.10f ? -inf : (k < 0.15f ? nan_value : v);
    }
    x[0] = d(rng) * scale;
    return x;
}

// A nearly flat distribution: top_p's nucleus then holds most of the vocabulary.
inline std::vector<float> flat_logits(std::size_t n, std::uint32_t seed)
{
    return qk_inputs::uniform(n, 0.0f, 0.05f, seed);
}

// Logits for the mirostat tests.
inline std::vector<float> mirostat_logits(std::size_t n, std::uint32_t seed)
{
    // Both ties and spread, no -inf: every candidate keeps a probability above 0.
    return seed % 2 == 0 ? tie_logits(n, seed) : qk_inputs::normal(n, 2.0f, seed);
}

struct named_logits {
    std::string name;
    std::vector<float> x;
};

inline constexpr std::size_t sizes[] = {1, 2, 5, 37, 1000, 5000, 40000};

inline const std::vector<named_logits>& standard_inputs()
{
    static const std::vector<named_logits> inputs = [] {
        std::vector<named_logits> v;
        std::uint32_t seed = 1234;
        for (const std::size_t n : sizes) {
            v.push_back({"ties n=" + std::to_string(n), tie_logits(n, seed++)});
            v.push_back({"mixed n=" + std::to_string(n), mixed_logits(n, seed++)});
        }
        // Equal logits: probabilities 1/4 and 1/1024 exactly, so cumulative sums hit p = 0.5
        // exactly and the inclusive / strict boundaries of top_p and typical are tested.
        v.push_back({"equal n=4", std::vector<float>(4, 1.0f)});
        v.push_back({"equal n=1024", std::vector<float>(1024, -2.0f)});
        return v;
    }();
    return inputs;
}

inline bool big(const std::vector<float>& x) { return x.size() >= 5000; }

// How a test's candidates are set up before the sampler under test runs.
enum class start { view, patched, list_ids, top_k_list, min_p_list };
inline constexpr start all_starts[] = {start::view, start::patched, start::list_ids, start::top_k_list, start::min_p_list};

inline std::string start_name(start s)
{
    switch (s) {
    case start::view: return "view";
    case start::patched: return "view patched by logit_bias";
    case start::list_ids: return "list in id order";
    case start::top_k_list: return "sorted list from top_k";
    case start::min_p_list: return "unsorted list from min_p";
    }
    return "?";
}

inline std::vector<std::pair<std::int32_t, float>> start_biases(std::size_t n)
{
    std::vector<std::pair<std::int32_t, float>> b;
    const auto add = [&b](std::size_t id, float bias) {
        for (const auto& e : b) {
            if (e.first == static_cast<std::int32_t>(id)) {
                return;
            }
        }
        b.emplace_back(static_cast<std::int32_t>(id), bias);
    };
    add(0, 2.5f);
    add(n - 1, -inf);
    add(n / 2, -1.25f);
    add(n / 3, 7.0f);
    return b;
}

inline std::int32_t start_k(std::size_t n) { return n <= 1 ? 1 : static_cast<std::int32_t>(std::min<std::size_t>(200, n - 1)); }

inline set_ref prepare(qs::candidates& c, const std::vector<float>& x, start s)
{
    c.reset(std::span<const float>(x));
    set_ref r = whole_ref(x);
    switch (s) {
    case start::view:
        break;
    case start::patched: {
        const auto b = start_biases(x.size());
        qs::logit_bias(b).apply(c);
        r = ref_logit_bias(r, b);
        break;
    }
    case start::list_ids:
        (void)c.list();
        r.whole = false;
        break;
    case start::top_k_list:
        qs::top_k(start_k(x.size())).apply(c);
        r = ref_top_k(r, start_k(x.size()));
        break;
    case start::min_p_list:
        qs::min_p(0.02f, 1).apply(c);
        r = ref_min_p(r, 0.02f, 1);
        break;
    }
    r.ordered = true;
    return r;
}

template <class Body>
void for_each_start(const std::vector<float>& x, Body&& body)
{
    for (const start s : all_starts) {
        CAPTURE(start_name(s));
        qs::candidates c;
        const set_ref in = prepare(c, x, s);
        body(c, in);
    }
}

// Applies `apply` on every start and compares the set with `reference` of the start's set.
template <class Apply, class Reference>
void check_on_starts(const std::vector<float>& x, Apply&& apply, Reference&& reference, bool with_p = false)
{
    for_each_start(x, [&](qs::candidates& c, const set_ref& in) {
        apply(c);
        check_set(c, reference(in), with_p);
    });
}

} // namespace qk_test::sampling
