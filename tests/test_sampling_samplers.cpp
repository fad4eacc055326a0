// Every sampler of qk::sampling against brute-force references written from the header comments
// (the specification), not from the implementation: whole vocabularies (plain and patched views)
// and lists (id order, sorted, unsorted), with ties, -inf and NaN logits, and stateful histories.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
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

#include <sampling/sampling.hpp>

namespace {

namespace qs = qk::sampling;
using qs::token_data;

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float nan_value = std::numeric_limits<float>::quiet_NaN();

// The references compute probabilities with the library's deterministic exp and log (and pow,
// which is exp(y log x) built from them) instead of std::exp: the headers define every softmax
// with these, so the references' probabilities match the library's bit for bit and a cut-off or
// a draw can be compared exactly. Everything else (sorting, cutting, counting, matching) is
// written here from the header comments.
float d_exp(float x) { return qs::detail::exp(x); }
float d_log(float x) { return qs::detail::log(x); }
float d_pow(float x, float y) { return qs::detail::pow(x, y); }

// A product that must be rounded before the addition consuming it, whatever contraction flags
// the test is built with (the library never fuses, so neither may the reference).
float strict(float v)
{
    volatile float stored = v;
    return stored;
}

float norm(float v) { return v == v ? v : -inf; }
bool same_bits(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }

bool ranks_first(const token_data& a, const token_data& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); }

std::vector<token_data> sorted_copy(std::vector<token_data> v)
{
    std::sort(v.begin(), v.end(), ranks_first);
    return v;
}

// --- the two softmax definitions ---

// candidates::compute_probabilities: in list order, max, e = exp(l - max), float sum in order,
// p = e * (1 / sum).
void softmax_list(std::vector<token_data>& v)
{
    float max = -inf;
    for (const auto& t : v) {
        max = t.logit > max ? t.logit : max;
    }
    float sum = 0.0f;
    for (auto& t : v) {
        t.p = d_exp(t.logit - max);
        sum = sum + t.p;
    }
    const float factor = 1.0f / sum;
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

vocabulary_sums sums_of(const std::vector<token_data>& v)
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

void softmax_vocabulary(std::vector<token_data>& v)
{
    const vocabulary_sums s = sums_of(v);
    const auto factor = static_cast<float>(1.0 / s.total);
    for (std::size_t i = 0; i < v.size(); ++i) {
        v[i].p = s.e[i] * factor;
    }
}

// The documented whole-vocabulary draw: chunk sums first, then the elements of the chunk reached,
// in double; a chosen chunk whose elements fall short gives its last element with weight.
std::size_t vocabulary_draw(const vocabulary_sums& s, double u)
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
std::size_t list_draw(const std::vector<token_data>& v, double u)
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

set_ref unchanged(set_ref in)
{
    in.ordered = false;
    return in;
}

set_ref as_list(std::vector<token_data> items, bool ordered = true) { return {std::move(items), false, ordered}; }

set_ref whole_ref(const std::vector<float>& x)
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
std::vector<token_data> current_set(qs::candidates& c)
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

std::string describe(const token_data& t)
{
    std::ostringstream s;
    s.precision(9);
    s << "{id " << t.id << ", logit " << t.logit << ", p " << t.p << "}";
    return s.str();
}

// Empty when `got` is the set `want` describes (ids and logit bits; p bits too when asked, in
// lists), otherwise the first difference.
std::string difference(std::vector<token_data> got, std::vector<token_data> want, bool ordered, bool with_p)
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

void check_set(qs::candidates& c, const set_ref& want, bool with_p = false)
{
    const bool lists = !c.whole_vocabulary() && !want.whole;
    const std::string d = difference(current_set(c), want.items, want.ordered, with_p && lists);
    CHECK_MESSAGE(d.empty(), d);
}

// --- reference samplers, each from its header comment ---

std::int32_t ref_greedy(const set_ref& in)
{
    const token_data* best = nullptr;
    for (const auto& t : in.items) {
        if (t.logit > -inf && (best == nullptr || ranks_first(t, *best))) {
            best = &t;
        }
    }
    return best == nullptr ? -1 : best->id;
}

set_ref ref_temp(set_ref in, float t)
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

set_ref ref_top_k(const set_ref& in, std::int32_t k)
{
    if (k <= 0 || static_cast<std::size_t>(k) >= in.items.size()) {
        return unchanged(in);
    }
    auto l = sorted_copy(in.items);
    l.resize(static_cast<std::size_t>(k));
    return as_list(l);
}

// "The candidate that crosses p is kept": only non-empty prefixes count, so p <= 0 keeps one.
set_ref ref_top_p(const set_ref& in, float p, std::size_t min_keep)
{
    if (p >= 1.0f) {
        return unchanged(in);
    }
    auto l = in.items;
    if (in.whole) {
        softmax_vocabulary(l);
    } else {
        softmax_list(l);
    }
    l = sorted_copy(l);
    float sum = 0.0f;
    std::size_t keep = l.size();
    for (std::size_t i = 0; i < l.size(); ++i) {
        sum = sum + l[i].p;
        if (sum >= p && i + 1 >= min_keep) {
            keep = i + 1;
            break;
        }
    }
    l.resize(keep);
    return as_list(l);
}

set_ref ref_min_p(const set_ref& in, float p, std::size_t min_keep)
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

set_ref ref_typical(const set_ref& in, float p, std::size_t min_keep)
{
    if (p >= 1.0f) {
        return unchanged(in);
    }
    auto l = sorted_copy(in.items);
    softmax_list(l);
    float entropy = 0.0f;
    for (const auto& t : l) {
        if (t.p > 0.0f) {
            entropy = entropy - strict(t.p * d_log(t.p));
        }
    }
    std::vector<std::pair<float, token_data>> scored;
    for (const auto& t : l) {
        scored.emplace_back(std::fabs(-d_log(t.p) - entropy), t);
    }
    std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<token_data> out;
    float sum = 0.0f;
    for (const auto& s : scored) {
        out.push_back(s.second);
        sum = sum + s.second.p;
        if (sum > p && out.size() >= min_keep) {
            break;
        }
    }
    return as_list(out);
}

set_ref ref_top_n_sigma(set_ref in, float n)
{
    if (!(n > 0.0f) || in.items.size() <= 1) {
        return in;
    }
    float max = -inf;
    float sum = 0.0f;
    std::size_t count = 0;
    for (const auto& t : in.items) {
        if (t.logit > -inf) {
            max = std::max(max, t.logit);
            sum = sum + t.logit;
            ++count;
        }
    }
    const float mean = count > 0 ? sum / static_cast<float>(count) : 0.0f;
    float squares = 0.0f;
    for (const auto& t : in.items) {
        if (t.logit > -inf) {
            const float d = t.logit - mean;
            squares = squares + strict(d * d);
        }
    }
    const float sigma = count > 0 ? std::sqrt(squares / static_cast<float>(count)) : 0.0f;
    const float threshold = max - strict(n * sigma);
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
    auto l = sorted_copy(in.items);
    softmax_list(l);
    std::size_t above = 0;
    while (above < l.size() && l[above].p >= threshold) {
        ++above;
    }
    if (above >= 2 && l.size() - (above - 1) >= min_keep) {
        l.erase(l.begin(), l.begin() + static_cast<std::ptrdiff_t>(above - 1));
        return as_list(l);
    }
    return as_list(l, false);
}

set_ref ref_logit_bias(set_ref in, const std::vector<std::pair<std::int32_t, float>>& biases)
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

// --- inputs ---

std::vector<float> tie_logits(std::size_t n, std::uint32_t seed)
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
std::vector<float> mixed_logits(std::size_t n, std::uint32_t seed, float scale = 2.5f)
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

std::vector<float> normal_logits(std::size_t n, std::uint32_t seed, float scale)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> x(n);
    for (auto& v : x) {
        v = d(rng) * scale;
    }
    return x;
}

// A nearly flat distribution: top_p's nucleus then holds most of the vocabulary.
std::vector<float> flat_logits(std::size_t n, std::uint32_t seed)
{
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(0.0f, 0.05f);
    std::vector<float> x(n);
    for (auto& v : x) {
        v = d(rng);
    }
    return x;
}

struct named_logits {
    std::string name;
    std::vector<float> x;
};

const std::size_t sizes[] = {1, 2, 5, 37, 1000, 5000, 40000};

const std::vector<named_logits>& standard_inputs()
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

bool big(const std::vector<float>& x) { return x.size() >= 5000; }

// How a test's candidates are set up before the sampler under test runs.
enum class start { view, patched, list_ids, top_k_list, min_p_list };
constexpr start all_starts[] = {start::view, start::patched, start::list_ids, start::top_k_list, start::min_p_list};

std::string start_name(start s)
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

std::vector<std::pair<std::int32_t, float>> start_biases(std::size_t n)
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

std::int32_t start_k(std::size_t n) { return n <= 1 ? 1 : static_cast<std::int32_t>(std::min<std::size_t>(200, n - 1)); }

set_ref prepare(qs::candidates& c, const std::vector<float>& x, start s)
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

} // namespace

// ------------------------------------------------------------------------------------------------

TEST_CASE("greedy: the largest logit, lowest id among ties, NaN as -inf")
{
    for (const auto& input : standard_inputs()) {
        CAPTURE(input.name);
        for_each_start(input.x, [](qs::candidates& c, const set_ref& in) {
            qs::greedy{}.apply(c);
            CHECK(c.selected() == ref_greedy(in));
        });
    }
    // The maximum in the middle of a long vocabulary, behind NaN and -inf, and its tie later on.
    std::vector<float> x(3000, -inf);
    x[5] = nan_value;
    x[1500] = 1.0f;
    x[2999] = 1.0f;
    x[17] = 0.5f;
    qs::candidates c;
    c.reset(std::span<const float>(x));
    qs::greedy{}.apply(c);
    CHECK(c.selected() == 1500);
}

TEST_CASE("dist: the token the documented draw rule gives for the generator's numbers")
{
    std::uint64_t seed = 7;
    for (const auto& input : standard_inputs()) {
        CAPTURE(input.name);
        for_each_start(input.x, [&](qs::candidates& c, const set_ref& in) {
            qs::dist d(seed);
            qs::random_source numbers(seed, qs::stream::dist);
            ++seed;
            vocabulary_sums sums;
            auto list = in.items;
            if (in.whole) {
                sums = sums_of(in.items);
            } else {
                softmax_list(list); // in the list's order, as candidates specifies
            }
            for (int draw = 0; draw < (big(input.x) ? 6 : 25); ++draw) {
                CAPTURE(draw);
                d.apply(c);
                const double u = numbers.uniform();
                const std::int32_t want = in.whole ? static_cast<std::int32_t>(vocabulary_draw(sums, u)) : list[list_draw(list, u)].id;
                CHECK(c.selected() == want);
            }
        });
    }
}

TEST_CASE("dist: draws land in the chunk the uniform number points at")
{
    // Weight only in the last of several chunks, or only in a tail chunk: the chunk sums must
    // skip the empty chunks and the exp of the chosen chunk be recomputed at the right offset.
    for (const std::size_t n : {std::size_t{2049}, std::size_t{4096}, std::size_t{5000}}) {
        CAPTURE(n);
        std::vector<float> x(n, -inf);
        x[n - 1] = 0.0f;
        x[n - 2] = 0.0f;
        x[1] = -40.0f; // far below: about e^-40 of the weight
        qs::candidates c;
        c.reset(std::span<const float>(x));
        qs::dist d(3);
        qs::random_source numbers(3, qs::stream::dist);
        const auto sums = sums_of(whole_ref(x).items);
        for (int i = 0; i < 50; ++i) {
            d.apply(c);
            const double u = numbers.uniform();
            CHECK(c.selected() == static_cast<std::int32_t>(vocabulary_draw(sums, u)));
            CHECK((c.selected() == static_cast<std::int32_t>(n - 1) || c.selected() == static_cast<std::int32_t>(n - 2)));
        }
    }
}

TEST_CASE("dist: reseed and copies continue the generator's sequence")
{
    const auto x = normal_logits(300, 99, 1.0f);
    qs::candidates c;
    c.reset(std::span<const float>(x));
    const auto sums = sums_of(whole_ref(x).items);
    qs::dist d(11);
    qs::random_source numbers(11, qs::stream::dist);
    for (int i = 0; i < 5; ++i) {
        d.apply(c);
        CHECK(c.selected() == static_cast<std::int32_t>(vocabulary_draw(sums, numbers.uniform())));
    }
    qs::sampler copy(d);
    qs::random_source copied = numbers;
    for (int i = 0; i < 5; ++i) {
        copy.apply(c);
        CHECK(c.selected() == static_cast<std::int32_t>(vocabulary_draw(sums, copied.uniform())));
    }
    d.reseed(12345);
    CHECK(d.seed() == 12345u);
    qs::random_source reseeded(12345, qs::stream::dist);
    for (int i = 0; i < 5; ++i) {
        d.apply(c);
        CHECK(c.selected() == static_cast<std::int32_t>(vocabulary_draw(sums, reseeded.uniform())));
    }
}

TEST_CASE("dist: frequencies match the softmax (chi-square, 7 degrees of freedom)")
{
    const std::vector<float> x = {0.0f, 1.0f, 2.0f, -1.0f, 0.5f, 1.5f, -0.5f, 2.5f};
    double total = 0;
    for (const float v : x) {
        total += std::exp(static_cast<double>(v));
    }
    constexpr int draws = 200000;
    for (const bool as_list : {false, true}) {
        CAPTURE(as_list);
        std::vector<int> counts(x.size(), 0);
        qs::dist d(2024);
        qs::candidates c;
        for (int i = 0; i < draws; ++i) {
            c.reset(std::span<const float>(x));
            if (as_list) {
                (void)c.list();
            }
            d.apply(c);
            REQUIRE(c.selected() >= 0);
            REQUIRE(c.selected() < 8);
            ++counts[static_cast<std::size_t>(c.selected())];
        }
        double chi2 = 0;
        for (std::size_t i = 0; i < x.size(); ++i) {
            const double expected = draws * std::exp(static_cast<double>(x[i])) / total;
            chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
        }
        CAPTURE(chi2);
        CHECK(chi2 < 24.3); // the 0.999 quantile of chi-square with 7 degrees of freedom
    }
}

TEST_CASE("temp: divides every logit; t <= 0 keeps the first largest only")
{
    for (const auto& input : standard_inputs()) {
        CAPTURE(input.name);
        for (const float t : {0.7f, 1.0f, 1.5f, 0.0f, -1.0f}) {
            CAPTURE(t);
            check_on_starts(input.x, [t](qs::candidates& c) { qs::temp(t).apply(c); },
                            [t](const set_ref& in) { return ref_temp(in, t); });
        }
    }
    // In a list the first of equal maxima is the first in list order, not the lowest id.
    const std::vector<float> x = {3.0f, 1.0f, 3.0f, 2.0f};
    qs::candidates c;
    c.reset(std::span<const float>(x));
    auto& l = c.list();
    std::swap(l[0], l[2]);
    qs::temp(0.0f).apply(c);
    const auto& r = c.list();
    REQUIRE(r.size() == 4);
    CHECK(r[0].id == 2);
    CHECK(r[0].logit == 3.0f);
    CHECK(r[2].logit == -inf);
}

TEST_CASE("temp_ext: the temperature follows the normalized entropy")
{
    struct params {
        float t, delta, exponent;
    };
    // (0.2, 0.5): the lower end t - delta is clamped at 0.
    const params all[] = {{0.8f, 0.5f, 1.0f}, {1.0f, 0.3f, 2.0f}, {0.2f, 0.5f, 0.5f}, {1.2f, 0.0f, 1.0f}, {0.7f, -1.0f, 1.0f}};
    for (const auto& input : standard_inputs()) {
        if (input.x.size() > 5000) {
            continue;
        }
        CAPTURE(input.name);
        for (const auto& prm : all) {
            CAPTURE(prm.t);
            CAPTURE(prm.delta);
            CAPTURE(prm.exponent);
            for_each_start(input.x, [&](qs::candidates& c, const set_ref& in) {
                qs::temp_ext(prm.t, prm.delta, prm.exponent).apply(c);
                if (!(prm.delta > 0.0f)) {
                    check_set(c, ref_temp(in, prm.t));
                    return;
                }
                if (in.items.size() <= 1) {
                    check_set(c, unchanged(in));
                    return;
                }
                // The temperature in double from the header's formula; the logits are then
                // compared within a tolerance, since the header does not fix the float roundings
                // of the formula.
                auto p = in.items;
                softmax_list(p);
                double entropy = 0;
                for (const auto& e : p) {
                    if (e.p > 0.0f) {
                        entropy -= e.p * std::log(static_cast<double>(e.p));
                    }
                }
                const double low = std::max(0.0, static_cast<double>(prm.t) - prm.delta);
                const double high = static_cast<double>(prm.t) + prm.delta;
                const double normalized = entropy / std::log(static_cast<double>(in.items.size()));
                const double temperature = low + (high - low) * std::pow(normalized, static_cast<double>(prm.exponent));
                CAPTURE(temperature);
                REQUIRE_FALSE(c.whole_vocabulary());
                const auto& got = c.list();
                REQUIRE(got.size() == in.items.size());
                set_ref want = in;
                if (temperature <= 0.0) {
                    want = ref_temp(in, 0.0f);
                }
                bool close = true;
                std::string first;
                for (std::size_t i = 0; i < got.size() && close; ++i) {
                    const float w = want.items[i].logit;
                    const double expected = temperature <= 0.0 ? w : w / temperature;
                    close = got[i].id == want.items[i].id &&
                            (w == -inf ? got[i].logit == -inf : std::fabs(got[i].logit - expected) <= 2e-5 * std::max(1.0, std::fabs(expected)));
                    if (!close) {
                        first = describe(got[i]) + " vs logit " + std::to_string(expected) + " id " + std::to_string(want.items[i].id);
                    }
                }
                CHECK_MESSAGE(close, first);
                // "The result has fresh probabilities": the softmax of the new logits.
                auto fresh = got;
                softmax_list(fresh);
                const std::string d = difference(got, fresh, true, true);
                CHECK_MESSAGE(d.empty(), d);
            });
        }
    }
}

TEST_CASE("top_k: the k best by (logit, id), sorted")
{
    for (const auto& input : standard_inputs()) {
        CAPTURE(input.name);
        const auto n = static_cast<std::int32_t>(input.x.size());
        std::vector<std::int32_t> ks = {-1, 0, 1, 3, 40, n - 1, n, n + 5};
        if (big(input.x)) {
            ks = {0, 1, 40, 300, n};
        }
        for (const std::int32_t k : ks) {
            CAPTURE(k);
            check_on_starts(input.x, [k](qs::candidates& c) { qs::top_k(k).apply(c); },
                            [k](const set_ref& in) { return ref_top_k(in, k); });
        }
    }
}

TEST_CASE("top_k: patched logits enter and leave the top of a view")
{
    std::mt19937 rng(5);
    for (const std::size_t n : {std::size_t{64}, std::size_t{1000}, std::size_t{5000}}) {
        for (int round = 0; round < 6; ++round) {
            const auto x = tie_logits(n, static_cast<std::uint32_t>(100 + round));
            std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(n - 1));
            std::map<std::int32_t, float> chosen;
            for (int i = 0; i < 12; ++i) {
                const float values[] = {10.0f, -10.0f, -inf, 4.0f, 0.0f, 3.5f};
                chosen[id(rng)] = values[static_cast<std::size_t>(i) % 6];
            }
            const std::vector<std::pair<std::int32_t, float>> biases(chosen.begin(), chosen.end());
            for (const std::int32_t k : {1, 5, 17, 200}) {
                CAPTURE(n);
                CAPTURE(k);
                qs::candidates c;
                c.reset(std::span<const float>(x));
                qs::logit_bias(biases).apply(c);
                qs::top_k(k).apply(c);
                check_set(c, ref_top_k(ref_logit_bias(whole_ref(x), biases), k));
            }
        }
    }
}

TEST_CASE("top_p: the shortest sorted prefix reaching p, at least min_keep")
{
    auto inputs = standard_inputs();
    // Flat distributions: nuclei beyond 256 candidates (the growing-prefix paths).
    inputs.push_back({"flat n=300", flat_logits(300, 41)});
    inputs.push_back({"flat n=5000", flat_logits(5000, 42)});
    inputs.push_back({"flat n=40000", flat_logits(40000, 43)});
    for (const auto& input : inputs) {
        CAPTURE(input.name);
        const std::size_t n = input.x.size();
        std::vector<std::pair<float, std::size_t>> params;
        for (const float p : {0.0f, 0.5f, 0.9f, 0.999f, 1.0f}) {
            for (const std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{3}, n + 5}) {
                params.emplace_back(p, k);
            }
        }
        if (big(input.x)) {
            params = {{0.5f, 1}, {0.95f, 1}, {0.9f, 3000}};
        }
        for (const auto& prm : params) {
            const float p = prm.first;
            const std::size_t min_keep = prm.second;
            CAPTURE(p);
            CAPTURE(min_keep);
            check_on_starts(input.x, [p, min_keep](qs::candidates& c) { qs::top_p(p, min_keep).apply(c); },
                            [p, min_keep](const set_ref& in) { return ref_top_p(in, p, min_keep); }, true);
        }
    }
}

TEST_CASE("min_p: logits at least max + log p, in the current order; else the min_keep best")
{
    for (const auto& input : standard_inputs()) {
        CAPTURE(input.name);
        const std::size_t n = input.x.size();
        std::vector<std::pair<float, std::size_t>> params;
        for (const float p : {0.0f, 0.05f, 0.3f, 1.0f, 1.5f}) {
            for (const std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{3}, n + 5}) {
                params.emplace_back(p, k);
            }
        }
        if (big(input.x)) {
            params = {{0.05f, 1}, {0.3f, 3}, {1.0f, 100}, {1.5f, 0}};
        }
        for (const auto& prm : params) {
            const float p = prm.first;
            const std::size_t min_keep = prm.second;
            CAPTURE(p);
            CAPTURE(min_keep);
            check_on_starts(input.x, [p, min_keep](qs::candidates& c) { qs::min_p(p, min_keep).apply(c); },
                            [p, min_keep](const set_ref& in) { return ref_min_p(in, p, min_keep); });
        }
    }
}

TEST_CASE("min_p: when fewer than min_keep pass and min_keep exceeds the set, the result is sorted")
{
    // "If fewer than min_keep pass, it keeps the min_keep best instead (sorted)": with min_keep
    // beyond the set's size that is every candidate, in sorted order.
    const std::vector<float> x = {0.0f, 3.0f, 1.0f, 3.0f, -inf, 2.0f};
    for (const bool from_list : {false, true}) {
        CAPTURE(from_list);
        qs::candidates c;
        c.reset(std::span<const float>(x));
        if (from_list) {
            (void)c.list();
        }
        qs::min_p(0.9f, 10).apply(c); // only the two 3s pass
        set_ref want = as_list(sorted_copy(whole_ref(x).items));
        check_set(c, want);
    }
}

TEST_CASE("typical: by |-log p - H|, the shortest prefix with mass above p")
{
    for (const auto& input : standard_inputs()) {
        CAPTURE(input.name);
        const std::size_t n = input.x.size();
        std::vector<std::pair<float, std::size_t>> params;
        for (const float p : {0.2f, 0.5f, 0.9f, 0.95f, 1.0f}) {
            for (const std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{3}, n + 5}) {
                params.emplace_back(p, k);
            }
        }
        if (big(input.x)) {
            params = {{0.5f, 1}, {0.9f, 3}};
        }
        for (const auto& prm : params) {
            const float p = prm.first;
            const std::size_t min_keep = prm.second;
            CAPTURE(p);
            CAPTURE(min_keep);
            check_on_starts(input.x, [p, min_keep](qs::candidates& c) { qs::typical(p, min_keep).apply(c); },
                            [p, min_keep](const set_ref& in) { return ref_typical(in, p, min_keep); });
        }
    }
}

TEST_CASE("top_n_sigma: logits below max - n sigma become -inf")
{
    for (const auto& input : standard_inputs()) {
        CAPTURE(input.name);
        for (const float n : {0.0f, -1.0f, 0.5f, 1.0f, 2.5f}) {
            if (big(input.x) && (n == -1.0f || n == 2.5f)) {
                continue;
            }
            CAPTURE(n);
            check_on_starts(input.x, [n](qs::candidates& c) { qs::top_n_sigma(n).apply(c); },
                            [n](const set_ref& in) { return ref_top_n_sigma(in, n); });
        }
    }
}

TEST_CASE("top_n_sigma: the boundary max - n sigma is kept")
{
    // {0, 0, 2, 2, -inf}: mean 1 and sigma 1 exactly over the finite logits (the -inf one and the
    // NaN one left out), so n = 2 puts the threshold exactly on the 0s (kept: only logits below it
    // go) and n = 1.5 just above them.
    const std::vector<float> x = {0.0f, 2.0f, -inf, 0.0f, 2.0f, nan_value};
    for (const bool as_list : {false, true}) {
        CAPTURE(as_list);
        for (const float n : {2.0f, 1.5f}) {
            CAPTURE(n);
            qs::candidates c;
            c.reset(std::span<const float>(x));
            if (as_list) {
                (void)c.list();
            }
            qs::top_n_sigma(n).apply(c);
            const auto got = current_set(c);
            REQUIRE(got.size() == 6);
            const float zero = n == 2.0f ? 0.0f : -inf;
            const float want[] = {zero, 2.0f, -inf, zero, 2.0f, -inf};
            for (std::size_t i = 0; i < 6; ++i) {
                CAPTURE(i);
                CHECK(got[i].id == static_cast<std::int32_t>(i));
                CHECK(same_bits(got[i].logit, want[i]));
            }
        }
    }
}

TEST_CASE("xtc: removes the likely candidates but the least likely of them")
{
    struct params {
        float probability, threshold;
        std::size_t min_keep;
    };
    std::vector<named_logits> inputs;
    std::uint32_t seed = 500;
    for (const std::size_t n : {std::size_t{2}, std::size_t{5}, std::size_t{37}, std::size_t{1000}, std::size_t{5000}}) {
        inputs.push_back({"ties n=" + std::to_string(n), tie_logits(n, seed++)});
        inputs.push_back({"mixed n=" + std::to_string(n), mixed_logits(n, seed++)});
        auto peaked = normal_logits(n, seed++, 1.0f);
        for (std::size_t i = 0; i < std::min<std::size_t>(4, n); ++i) {
            peaked[i * (n / 4)] += 9.0f - static_cast<float>(i) * 0.5f; // a few tokens well above the rest
        }
        inputs.push_back({"peaked n=" + std::to_string(n), peaked});
    }
    inputs.push_back({"n=1", {0.5f}});
    for (const auto& input : inputs) {
        CAPTURE(input.name);
        const std::size_t n = input.x.size();
        const params all[] = {{1.0f, 0.1f, 1}, {1.0f, 0.05f, 3}, {1.0f, 0.01f, 0}, {1.0f, 0.3f, 1}, {1.0f, 0.5f, 1},
                              {1.0f, 0.6f, 1}, {0.0f, 0.1f, 1}, {-1.0f, 0.1f, 1}, {1.0f, 0.1f, n + 5}, {1.0f, 0.0f, 2}};
        for (const auto& prm : all) {
            CAPTURE(prm.probability);
            CAPTURE(prm.threshold);
            CAPTURE(prm.min_keep);
            for_each_start(input.x, [&](qs::candidates& c, const set_ref& in) {
                qs::xtc sampler(prm.probability, prm.threshold, prm.min_keep, 1);
                qs::random_source numbers(1, qs::stream::xtc);
                sampler.apply(c);
                // probability 1: every draw (in [0, 1)) passes; 0 or less: xtc never draws.
                check_set(c, ref_xtc(in, prm.probability, prm.threshold, prm.min_keep, [&numbers] { return numbers.uniform(); }));
            });
        }
        // probability 0.5: the generator's numbers decide, one per step that gets that far.
        qs::xtc x(0.5f, 0.1f, 1, 77);
        qs::random_source numbers(77, qs::stream::xtc);
        for (int step = 0; step < 20; ++step) {
            CAPTURE(step);
            qs::candidates c;
            const set_ref in = prepare(c, input.x, step % 2 == 0 ? start::view : start::top_k_list);
            x.apply(c);
            check_set(c, ref_xtc(in, 0.5f, 0.1f, 1, [&numbers] { return numbers.uniform(); }));
        }
    }
}

namespace {

std::vector<float> mirostat_logits(std::size_t n, std::uint32_t seed)
{
    // Both ties and spread, no -inf: every candidate keeps a probability above 0.
    return seed % 2 == 0 ? tie_logits(n, seed) : normal_logits(n, seed, 2.0f);
}

float surprise_bits(float p) { return -strict(d_log(p) * 1.44269504f); } // -log2 p as ln p / ln 2 in float

} // namespace

TEST_CASE("mirostat: k from the Zipf estimate, draw, and mu updated on accept")
{
    struct params {
        float tau, eta;
        std::int32_t m;
    };
    const params all[] = {{5.0f, 0.1f, 100}, {3.0f, 0.5f, 100}, {1.0f, 0.3f, 2}, {4.0f, 0.2f, 1}};
    std::uint32_t seed = 900;
    for (const std::size_t n : {std::size_t{2}, std::size_t{5}, std::size_t{37}, std::size_t{1000}, std::size_t{5000}}) {
        for (const auto& prm : all) {
            for (const start s : {start::view, start::list_ids, start::top_k_list}) {
                CAPTURE(n);
                CAPTURE(prm.tau);
                CAPTURE(prm.m);
                CAPTURE(start_name(s));
                qs::mirostat m(prm.tau, prm.eta, prm.m, seed);
                qs::random_source numbers(seed, qs::stream::mirostat);
                ++seed;
                CHECK(m.mu() == 2.0f * prm.tau);
                for (int step = 0; step < (n >= 5000 ? 4 : 12); ++step) {
                    CAPTURE(step);
                    const auto x = mirostat_logits(n, seed * 31 + static_cast<std::uint32_t>(step));
                    qs::candidates c;
                    const set_ref in = prepare(c, x, s);
                    const float mu = m.mu();
                    m.apply(c);
                    const double u = numbers.uniform();
                    CHECK(m.mu() == mu); // apply() changes nothing but the generator

                    auto l = sorted_copy(in.items);
                    softmax_list(l);
                    float sum_tb = 0.0f;
                    float sum_tt = 0.0f;
                    for (std::size_t i = 0; i + 1 < static_cast<std::size_t>(prm.m) && i + 1 < l.size(); ++i) {
                        const float t = d_log(static_cast<float>(i + 2) / static_cast<float>(i + 1));
                        const float b = d_log(l[i].p / l[i + 1].p);
                        sum_tb = sum_tb + strict(t * b);
                        sum_tt = sum_tt + strict(t * t);
                    }
                    std::size_t keep = l.size();
                    const float sh = sum_tb / sum_tt;
                    // Without pairs (m = 1, one candidate) s is 0 / 0 and k undefined: the
                    // header is silent; everything stays, as for a k beyond the set.
                    if (sh == sh) {
                        const float e = sh - 1.0f;
                        const float k = d_pow(strict(e * d_pow(2.0f, mu)) / (1.0f - d_pow(static_cast<float>(n), -e)), 1.0f / sh);
                        if (k == k && k < static_cast<float>(l.size())) {
                            keep = std::max<std::size_t>(1, static_cast<std::size_t>(k));
                        }
                    }
                    l.resize(keep);
                    softmax_list(l);
                    const std::size_t chosen = list_draw(l, u);
                    CHECK(c.selected() == l[chosen].id);
                    check_set(c, as_list(l), true);

                    // Accepting any token applies the selected token's surprise, once.
                    const double surprise = -std::log2(static_cast<double>(l[chosen].p));
                    m.accept(step % 3 == 0 ? c.selected() : 0);
                    const double expected = mu - prm.eta * (surprise - prm.tau);
                    CHECK(std::fabs(m.mu() - expected) <= 1e-4 * std::max(1.0, std::fabs(expected)));
                    const float after = m.mu();
                    m.accept(1);
                    CHECK(m.mu() == after);
                }
                m.reset();
                CHECK(m.mu() == 2.0f * prm.tau);
                m.accept(0); // nothing selected since the reset
                CHECK(m.mu() == 2.0f * prm.tau);
            }
        }
    }
}

TEST_CASE("mirostat_v2: the prefix with surprise <= mu, draw, and mu updated on accept")
{
    std::uint32_t seed = 1300;
    for (const auto& input : standard_inputs()) {
        if (input.x.size() > 5000) {
            continue;
        }
        for (const float tau : {1.0f, 3.0f, 5.0f}) {
            for (const start s : all_starts) {
                CAPTURE(input.name);
                CAPTURE(tau);
                CAPTURE(start_name(s));
                const float eta = 0.25f;
                qs::mirostat_v2 m(tau, eta, seed);
                qs::random_source numbers(seed, qs::stream::mirostat_v2);
                ++seed;
                for (int step = 0; step < (big(input.x) ? 3 : 10); ++step) {
                    CAPTURE(step);
                    qs::candidates c;
                    const set_ref in = prepare(c, input.x, s);
                    const float mu = m.mu();
                    m.apply(c);
                    const double u = numbers.uniform();
                    auto l = sorted_copy(in.items);
                    softmax_list(l);
                    std::size_t keep = 0;
                    while (keep < l.size() && surprise_bits(l[keep].p) <= mu) {
                        ++keep;
                    }
                    l.resize(std::max<std::size_t>(keep, 1));
                    softmax_list(l);
                    const std::size_t chosen = list_draw(l, u);
                    CHECK(c.selected() == l[chosen].id);
                    check_set(c, as_list(l), true);
                    const double surprise = -std::log2(static_cast<double>(l[chosen].p));
                    m.accept(c.selected());
                    const double expected = mu - eta * (surprise - tau);
                    CHECK(std::fabs(m.mu() - expected) <= 1e-4 * std::max(1.0, std::fabs(expected)));
                    m.accept(c.selected()); // a second accept has no step to learn from
                    CHECK(std::fabs(m.mu() - expected) <= 1e-4 * std::max(1.0, std::fabs(expected)));
                }
            }
        }
    }
    // mu rises after a token less surprising than tau.
    const std::vector<float> x = {5.0f, 0.0f, 0.0f, 0.0f};
    qs::mirostat_v2 m(1.0f, 0.5f, 3);
    qs::candidates c;
    c.reset(std::span<const float>(x));
    m.apply(c); // mu = 2: token 0 (surprise ~0.04) and nothing else (surprise ~7.3) remain
    CHECK(c.selected() == 0);
    m.accept(0);
    CHECK(m.mu() > 2.0f);
}

namespace {

struct penalty_config {
    std::int32_t last_n;
    float repeat, frequency, presence;
};

// Counts over the last last_n accepted tokens (all for -1), then the header's formula.
set_ref ref_penalties(set_ref in, const std::deque<std::int32_t>& accepted, const penalty_config& cfg)
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

std::vector<std::pair<std::int32_t, std::int32_t>> ref_counts(const std::deque<std::int32_t>& accepted, std::int32_t last_n)
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

} // namespace

TEST_CASE("penalties: repeat, frequency and presence over the last last_n tokens")
{
    const penalty_config configs[] = {{-1, 1.3f, 0.25f, 0.5f}, {0, 1.3f, 0.25f, 0.5f}, {1, 1.5f, 0.0f, 0.0f},
                                      {4, 1.3f, 0.25f, 0.5f},  {16, 1.0f, 0.5f, 0.0f}, {16, 1.0f, 0.0f, 0.0f},
                                      {7, 0.8f, -0.1f, 1.0f}};
    std::uint32_t seed = 70;
    for (const std::size_t n : {std::size_t{5}, std::size_t{37}, std::size_t{1000}, std::size_t{40000}}) {
        // Logits around 0 on both sides (the repeat factor depends on the sign), with -inf and NaN.
        std::vector<float> x = tie_logits(n, seed++);
        for (std::size_t i = 0; i < n; ++i) {
            x[i] -= 2.0f;
        }
        x[n - 1] = nan_value;
        x[n / 2] = -inf;
        for (const auto& cfg : configs) {
            CAPTURE(n);
            CAPTURE(cfg.last_n);
            CAPTURE(cfg.repeat);
            qs::penalties pen({cfg.last_n, cfg.repeat, cfg.frequency, cfg.presence});
            std::deque<std::int32_t> accepted;
            std::mt19937 rng(seed++);
            // Tokens from a small range so that they repeat, some beyond a small vocabulary.
            std::uniform_int_distribution<std::int32_t> token(0, std::min<std::int32_t>(static_cast<std::int32_t>(n) + 2, 12));
            for (int step = 0; step < (n >= 40000 ? 3 : (n >= 1000 ? 20 : 40)); ++step) {
                CAPTURE(step);
                const std::int32_t t = step % 5 == 4 ? static_cast<std::int32_t>(n / 2) : token(rng);
                pen.accept(t);
                accepted.push_back(t);
                CHECK(pen.counts() == ref_counts(accepted, cfg.last_n));
                check_on_starts(x, [&pen](qs::candidates& c) { pen.apply(c); },
                                [&](const set_ref& in) { return ref_penalties(in, accepted, cfg); });
            }
            pen.reset();
            CHECK(pen.counts().empty());
            qs::candidates c;
            c.reset(std::span<const float>(x));
            pen.apply(c);
            check_set(c, whole_ref(x));
        }
    }
}

namespace {

struct dry_config {
    float multiplier, base;
    std::int32_t allowed_length, last_n;
    std::vector<std::vector<std::int32_t>> breakers;
};

// Brute force from the header: the window, the text after the latest breaker occurrence (latest
// start, longest breaker there), and for every position the longest suffix match, O(n^2).
std::map<std::int32_t, std::int32_t> ref_dry_lengths(const std::deque<std::int32_t>& accepted, const dry_config& cfg)
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

set_ref ref_dry(set_ref in, const std::deque<std::int32_t>& accepted, const dry_config& cfg)
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

qs::dry make_dry(const dry_config& cfg) { return qs::dry({cfg.multiplier, cfg.base, cfg.allowed_length, cfg.last_n, cfg.breakers}); }

} // namespace

TEST_CASE("dry: penalties for extending repetitions, limited by sequence breakers")
{
    const std::vector<std::vector<std::vector<std::int32_t>>> breaker_sets = {
        {}, {{3}}, {{1, 2}}, {{3}, {1, 2}, {1, 2, 4}}, {{5, 0}, {2}}};
    std::uint32_t seed = 4000;
    for (const auto& breakers : breaker_sets) {
        for (const std::int32_t allowed : {0, 1, 2, 3}) {
            for (const std::int32_t last_n : {-1, 0, 5, 12}) {
                const dry_config cfg{0.8f, 1.75f, allowed, last_n, breakers};
                for (const std::size_t n : {std::size_t{7}, std::size_t{1000}}) {
                    if (n > 7 && allowed != 2) {
                        continue; // the large vocabulary only checks the view / list paths
                    }
                    CAPTURE(breakers.size());
                    CAPTURE(allowed);
                    CAPTURE(last_n);
                    CAPTURE(n);
                    const auto x = mixed_logits(n, seed++, 1.0f);
                    qs::dry d = make_dry(cfg);
                    std::deque<std::int32_t> accepted;
                    std::mt19937 rng(seed++);
                    // Repetitive text over tokens 0..7 (7 is outside the small vocabulary): runs
                    // copied from earlier in the history, with random tokens in between.
                    std::uniform_int_distribution<std::int32_t> token(0, 7);
                    std::uniform_int_distribution<int> coin(0, 3);
                    for (int step = 0; step < 40; ++step) {
                        CAPTURE(step);
                        std::int32_t t = token(rng);
                        if (coin(rng) != 0 && accepted.size() > 4) {
                            t = accepted[accepted.size() - 4 + static_cast<std::size_t>(step % 2)];
                        }
                        d.accept(t);
                        accepted.push_back(t);
                        check_on_starts(x, [&d](qs::candidates& c) { d.apply(c); },
                                        [&](const set_ref& in) { return ref_dry(in, accepted, cfg); });
                    }
                    d.reset();
                    qs::candidates c;
                    c.reset(std::span<const float>(x));
                    d.apply(c);
                    check_set(c, whole_ref(x));
                }
            }
        }
    }
}

TEST_CASE("dry: hand-checked repetitions")
{
    const std::vector<float> x(10, 0.0f);
    const auto penalties_after = [&x](const dry_config& cfg, const std::vector<std::int32_t>& history) {
        qs::dry d = make_dry(cfg);
        for (const auto t : history) {
            d.accept(t);
        }
        qs::candidates c;
        c.reset(std::span<const float>(x));
        d.apply(c);
        std::vector<float> out;
        for (std::int32_t id = 0; id < 10; ++id) {
            out.push_back(-c.logit(id));
        }
        return out;
    };
    // "1 2 3 1 2": the suffix "1 2" occurred before, followed by 3: L = 2, allowed 2 -> 1 * 2^0.
    auto p = penalties_after({1.0f, 2.0f, 2, -1, {}}, {1, 2, 3, 1, 2});
    CHECK(p[3] == 1.0f);
    CHECK(p[1] == 0.0f);
    CHECK(p[2] == 0.0f);
    // "1 2 3 4 1 2 3": L = 3 for token 4 -> 2^(3-2) = 2.
    p = penalties_after({1.0f, 2.0f, 2, -1, {}}, {1, 2, 3, 4, 1, 2, 3});
    CHECK(p[4] == 2.0f);
    // A single-token breaker (3) is never penalized itself and cuts the repetition it ends.
    p = penalties_after({1.0f, 2.0f, 2, -1, {{3}}}, {1, 2, 3, 1, 2});
    CHECK(p[3] == 0.0f);
    // ... but the head of a multi-token breaker is penalized like any token.
    p = penalties_after({1.0f, 2.0f, 2, -1, {{3, 9}}}, {1, 2, 3, 1, 2});
    CHECK(p[3] == 1.0f);
    // "2 1 | 3 | 1 2 4 | 3 | 1 2" with breaker 3: the suffix "3 1 2" also ends at the second
    // token 2, before 4, but the latest 3 leaves only "1 2" (L capped at 2): 2^0, not 2^1. Token
    // 3 follows the first "1 2" with L = 2, but a single-token breaker is never penalized.
    p = penalties_after({1.0f, 2.0f, 2, -1, {{3}}}, {1, 2, 3, 1, 2, 4, 3, 1, 2});
    CHECK(p[4] == 1.0f);
    CHECK(p[3] == 0.0f);
    // last_n = 3 sees only "3 1 2": no earlier "1 2" in the window.
    p = penalties_after({1.0f, 2.0f, 2, 3, {}}, {1, 2, 3, 1, 2});
    CHECK(p[3] == 0.0f);
    // multiplier 0, base below 1, last_n 0: off.
    for (const dry_config& off : {dry_config{0.0f, 2.0f, 2, -1, {}}, dry_config{1.0f, 0.9f, 2, -1, {}}, dry_config{1.0f, 2.0f, 2, 0, {}}}) {
        p = penalties_after(off, {1, 2, 3, 1, 2});
        CHECK(p[3] == 0.0f);
    }
}

TEST_CASE("dry: the exponent is capped so that the penalty stays finite")
{
    // "1 2 1 2 ... 1 2" (400 tokens): token 1 would extend a repetition of 398 tokens. With the
    // exponent capped so the power stays finite, multiplier 0.5 gives a large but finite penalty.
    std::deque<std::int32_t> history;
    for (int i = 0; i < 400; ++i) {
        history.push_back(1 + i % 2);
    }
    const std::vector<float> x(5, 0.0f);
    for (const float base : {1.75f, 2.0f, 3.0f, 1.1f, 1.25f}) {
        CAPTURE(base);
        qs::dry d({0.5f, base, 2, -1, {}});
        for (const auto t : history) {
            d.accept(t);
        }
        qs::candidates c;
        c.reset(std::span<const float>(x));
        d.apply(c);
        const float logit = c.logit(1);
        CAPTURE(logit);
        CHECK(std::isfinite(logit));
        // Below the cap the penalty is 0.5 base^396; at the cap at least 0.5 base^(cap - 1),
        // which is above 1e37 for these bases.
        const double uncapped = 0.5 * std::pow(static_cast<double>(base), 396.0);
        if (uncapped < 1e37) {
            CHECK(std::fabs(-logit - uncapped) <= 1e-4 * uncapped);
        } else {
            CHECK(logit < -1e37f);
        }
        CHECK(c.logit(0) == 0.0f);
    }
}

TEST_CASE("logit_bias: adds the biases of the listed tokens")
{
    std::mt19937 rng(31);
    for (const auto& input : standard_inputs()) {
        CAPTURE(input.name);
        const auto n = static_cast<std::int32_t>(input.x.size());
        for (int round = 0; round < 3; ++round) {
            std::uniform_int_distribution<std::int32_t> id(0, n - 1);
            std::map<std::int32_t, float> chosen;
            const float values[] = {-inf, -3.5f, -0.25f, 0.5f, 4.0f, 1e-3f};
            for (int i = 0; i < 6; ++i) {
                chosen[id(rng)] = values[(static_cast<std::size_t>(round) + static_cast<std::size_t>(i)) % 6];
            }
            const std::vector<std::pair<std::int32_t, float>> biases(chosen.begin(), chosen.end());
            check_on_starts(input.x, [&biases](qs::candidates& c) { qs::logit_bias(biases).apply(c); },
                            [&biases](const set_ref& in) { return ref_logit_bias(in, biases); });
        }
    }
}

TEST_CASE("logit_bias: a list never holds NaN, even where -inf meets a +inf bias")
{
    // candidates.hpp: "NaN logits count as -inf throughout; a list never holds NaN". A banned
    // token (-inf) given a +inf bias: as -inf + inf is NaN, it must still count as -inf.
    const std::vector<float> x = {-inf, 1.0f, 0.5f};
    qs::candidates c;
    c.reset(std::span<const float>(x));
    (void)c.list();
    qs::logit_bias({{0, inf}}).apply(c);
    for (const auto& t : c.list()) {
        CAPTURE(t.id);
        CHECK(t.logit == t.logit);
    }
    CHECK_NOTHROW(qs::greedy{}.apply(c));
    CHECK(c.selected() == 1);
}

TEST_CASE("errors: nothing to sample, tokens outside the vocabulary, bad parameters")
{
    SUBCASE("every logit -inf or NaN reaching greedy or dist")
    {
        for (const std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{3000}}) {
            std::vector<float> x(n, -inf);
            x[n / 2] = nan_value;
            for (const bool as_list : {false, true}) {
                CAPTURE(n);
                CAPTURE(as_list);
                qs::candidates c;
                c.reset(std::span<const float>(x));
                if (as_list) {
                    (void)c.list();
                }
                CHECK_THROWS_AS(qs::greedy{}.apply(c), qk::error);
                qs::dist d(1);
                CHECK_THROWS_AS(d.apply(c), qk::error);
                qs::mirostat_v2 m;
                CHECK_THROWS_AS(m.apply(c), qk::error);
            }
        }
        // An empty list (min_p above 1 with min_keep 0 keeps nothing) reaching greedy or dist.
        const std::vector<float> x = {1.0f, 2.0f};
        qs::candidates c;
        c.reset(std::span<const float>(x));
        qs::min_p(1.5f, 0).apply(c);
        CHECK(c.size() == 0);
        CHECK_THROWS_AS(qs::greedy{}.apply(c), qk::error);
        qs::dist d(1);
        CHECK_THROWS_AS(d.apply(c), qk::error);
    }
    SUBCASE("logit_bias with a token outside the vocabulary changes nothing")
    {
        const auto x = mixed_logits(37, 8);
        for (const start s : all_starts) {
            CAPTURE(start_name(s));
            qs::candidates c;
            const set_ref before = prepare(c, x, s);
            CHECK_THROWS_AS(qs::logit_bias({{0, 5.0f}, {3, -inf}, {37, 1.0f}}).apply(c), qk::error);
            check_set(c, before);
        }
    }
    SUBCASE("constructors")
    {
        CHECK_THROWS_AS(qs::temp{nan_value}, qk::error);
        CHECK_THROWS_AS(qs::temp_ext(nan_value, 0.5f, 1.0f), qk::error);
        CHECK_THROWS_AS(qs::temp_ext(1.0f, nan_value, 1.0f), qk::error);
        CHECK_THROWS_AS(qs::temp_ext(1.0f, 0.5f, nan_value), qk::error);
        CHECK_THROWS_AS(qs::top_p{nan_value}, qk::error);
        CHECK_THROWS_AS(qs::min_p{nan_value}, qk::error);
        CHECK_THROWS_AS(qs::typical{nan_value}, qk::error);
        CHECK_THROWS_AS(qs::top_n_sigma{nan_value}, qk::error);
        CHECK_THROWS_AS(qs::xtc(nan_value, 0.1f), qk::error);
        CHECK_THROWS_AS(qs::xtc(0.5f, nan_value), qk::error);
        CHECK_THROWS_AS(qs::mirostat{nan_value}, qk::error);
        CHECK_THROWS_AS(qs::mirostat(5.0f, nan_value), qk::error);
        CHECK_THROWS_AS(qs::mirostat(5.0f, 0.1f, 0), qk::error);
        CHECK_THROWS_AS(qs::mirostat_v2{nan_value}, qk::error);
        CHECK_THROWS_AS(qs::mirostat_v2(5.0f, nan_value), qk::error);
        CHECK_THROWS_AS(qs::penalties({-2, 1.1f, 0.0f, 0.0f}), qk::error);
        CHECK_THROWS_AS(qs::penalties({64, nan_value, 0.0f, 0.0f}), qk::error);
        CHECK_THROWS_AS(qs::penalties({64, 1.1f, nan_value, 0.0f}), qk::error);
        CHECK_THROWS_AS(qs::penalties({64, 1.1f, 0.0f, nan_value}), qk::error);
        CHECK_THROWS_AS(qs::dry({nan_value, 1.75f, 2, -1, {}}), qk::error);
        CHECK_THROWS_AS(qs::dry({0.8f, nan_value, 2, -1, {}}), qk::error);
        CHECK_THROWS_AS(qs::dry({0.8f, 1.75f, -1, -1, {}}), qk::error);
        CHECK_THROWS_AS(qs::dry({0.8f, 1.75f, 2, -2, {}}), qk::error);
        CHECK_THROWS_AS(qs::dry({0.8f, 1.75f, 2, -1, {{}}}), qk::error);
        CHECK_THROWS_AS(qs::dry({0.8f, 1.75f, 2, -1, {{-1}}}), qk::error);
        CHECK_THROWS_AS(qs::dry({0.8f, 1.75f, 2, -1, {{4}, {1, -3}}}), qk::error);
        CHECK_THROWS_AS(qs::logit_bias({{-1, 1.0f}}), qk::error);
        CHECK_THROWS_AS(qs::logit_bias({{1, nan_value}}), qk::error);
        CHECK_THROWS_AS(qs::logit_bias({{3, 1.0f}, {1, 0.5f}, {3, 2.0f}}), qk::error);
        CHECK_NOTHROW(qs::logit_bias({{3, 1.0f}, {1, -inf}}));
        CHECK_NOTHROW(qs::dry({0.8f, 1.75f, 0, 0, {{1, 2}}}));
    }
    SUBCASE("negative accepted tokens")
    {
        qs::penalties pen({64, 1.1f, 0.0f, 0.0f});
        CHECK_THROWS_AS(pen.accept(-1), qk::error);
        CHECK(pen.counts().empty());
        qs::dry d({0.8f, 1.75f, 2, -1, {}});
        CHECK_THROWS_AS(d.accept(-5), qk::error);
        qs::mirostat m;
        CHECK_THROWS_AS(m.accept(-1), qk::error);
        qs::mirostat_v2 m2;
        CHECK_THROWS_AS(m2.accept(-1), qk::error);
    }
}
