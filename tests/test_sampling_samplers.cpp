// Every sampler of qk::sampling against brute-force references written from the header comments
// (the specification), not from the implementation: whole vocabularies (plain and patched views)
// and lists (id order, sorted, unsorted), with ties, -inf and NaN logits, and stateful histories.
// The references, inputs and set-ups are in sampling_reference.hpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <sampling/sampling.hpp>

#include "inputs.hpp"
#include "sampling_reference.hpp"

using namespace qk_test::sampling;

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
    const auto x = qk_inputs::normal(300, 1.0f, 99);
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

// Each of top_k's whole-vocabulary paths (the heap up to k = 256, the count by rank above it, the
// prefix above 2048 and 1/64 of the vocabulary) with +inf logits, which rank first. The count by
// rank once took +inf for a finite maximum and kept every token (found by fuzz/samplers.cpp).
TEST_CASE("top_k: +inf logits rank first on every whole-vocabulary path")
{
    // The finding's vocabulary: logits from 2^-92 to -2^127 repeating every 20 tokens, one +inf.
    const float pattern[20] = {-0x1.ab854ep-63f, -0x1.003304p+73f, 0x1.0000cp+89f, -0x1.187cecp+127f, -0x1.dee5fep+5f,
                               0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f,
                               0x1.92ap-92f, -0x1.93eap-47f, -0x1.004778p+77f};
    for (int input = 0; input < 4; ++input) {
        const std::size_t n = input % 2 == 0 ? 4544 : 20000;
        std::vector<float> x(n);
        if (input < 2) {
            for (std::size_t i = 0; i < n; ++i) {
                x[i] = pattern[i % 20];
            }
        } else {
            x = tie_logits(n, 7);
            x[n - 3] = inf;
            x[n / 2] = -inf;
        }
        x[194] = inf;
        for (const std::int32_t k : {1, 2, 3, 200, 576, 2049, 3000}) {
            CAPTURE(input);
            CAPTURE(k);
            qs::candidates c;
            c.reset(std::span<const float>(x));
            qs::top_k(k).apply(c);
            check_set(c, ref_top_k(whole_ref(x), k));
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
            for (const std::int32_t k : {1, 5, 17, 200, 300, 999}) {
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

TEST_CASE("typical: by |-log p - H| (then id), the shortest prefix whose exact mass exceeds p")
{
    for (const auto& input : standard_inputs()) {
        CAPTURE(input.name);
        const std::size_t n = input.x.size();
        std::vector<std::pair<float, std::size_t>> params;
        for (const float p : {-1.0f, 0.0f, 0.2f, 0.5f, 0.9f, 0.95f, 1.0f}) {
            for (const std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{3}, n + 5}) {
                params.emplace_back(p, k);
            }
        }
        if (big(input.x)) {
            params = {{0.5f, 1}, {0.9f, 3}, {0.9f, 5000}};
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
        auto peaked = qk_inputs::normal(n, 1.0f, seed++);
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


TEST_CASE("xtc over a whole vocabulary: the bounds of the total mass hold it, and shares at their edge take the exact total")
{
    for (const std::size_t n : {std::size_t{2}, std::size_t{1000}, std::size_t{5000}, std::size_t{70001}}) {
        auto x = qk_inputs::normal(n, 1.0f, static_cast<std::uint32_t>(n));
        for (std::size_t i = 0; i < std::min<std::size_t>(4, n); ++i) {
            x[i * (n / 4)] += 9.0f - static_cast<float>(i) * 0.5f;
        }
        CAPTURE(n);
        const float max = *std::max_element(x.begin(), x.end());
        mass_ref total = 0;
        std::vector<mass_ref> masses(n);
        for (std::size_t i = 0; i < n; ++i) {
            masses[i] = mass_of_ref(d_exp(x[i] - max));
            total += masses[i];
        }
        // The bounds, on the widest tag and the scalar one: around the exact total, and within
        // 1.5e-4 of it (the scalar sum's one lane adds a whole chunk of 1024 floats: 6.2e-5 either way).
        const auto bounded = [&]<class Tag>(Tag) {
            qs::detail::mass_t low = 0;
            qs::detail::mass_t high = 0;
            qs::detail::exp_mass_bounds<Tag>(x.data(), n, max, low, high);
            CHECK(low <= total);
            CHECK(total <= high);
            CHECK(static_cast<double>(high - low) <= 1.5e-4 * static_cast<double>(total));
        };
        bounded(qk::arch::vector_native{});
        bounded(qk::arch::generic{});
        // Thresholds at the edge of a token's share of the total (its mass over the total, and the
        // floats next to it): the tokens of mass at least ceil(threshold total) pass, exactly.
        std::vector<std::size_t> order(n);
        std::iota(order.begin(), order.end(), std::size_t{0});
        std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
        for (std::size_t j = 0; j < std::min<std::size_t>(3, n); ++j) {
            const auto edge = static_cast<float>(static_cast<double>(masses[order[j]]) / static_cast<double>(total));
            for (const float threshold : {std::nextafter(edge, 0.0f), edge, std::nextafter(edge, 1.0f)}) {
                if (threshold > 0.5f) {
                    continue;
                }
                CAPTURE(j);
                CAPTURE(threshold);
                qs::candidates c;
                c.reset(std::span<const float>(x));
                qs::xtc sampler(1.0f, threshold, 1, 1);
                sampler.apply(c);
                qs::random_source numbers(1, qs::stream::xtc);
                check_set(c, ref_xtc(whole_ref(x), 1.0f, threshold, 1, [&numbers] { return numbers.uniform(); }));
            }
        }
    }
}

namespace {

// dist's draw over a set left as it was (p filled in): a whole vocabulary's draw in id order, or
// the list draw in the list's order.
std::size_t draw_as_dist(std::vector<token_data>& l, bool whole, double u)
{
    if (whole) {
        softmax_vocabulary(l);
        return vocabulary_draw(sums_of(l), u);
    }
    softmax_list(l);
    return list_draw(l, u);
}

// A floor's draw (mirostat keeping more than 1/32 of a whole vocabulary): the tokens `kept`
// passes, in id order, drawn by a walk of exact masses; p the chosen token's mass over theirs, and
// p 0 in `listed` (a floor's list()). Returns the chosen index in `floor`.
template <class Keep>
std::size_t floor_draw_ref(const std::vector<token_data>& items, float max, double u, Keep&& kept, std::vector<token_data>& floor,
                           std::vector<token_data>& listed)
{
    floor.clear();
    mass_ref kept_mass = 0;
    for (const auto& t : items) {
        if (kept(t)) {
            floor.push_back(t);
            kept_mass += mass_of_ref(d_exp(t.logit - max));
        }
    }
    const double product = u * static_cast<double>(kept_mass);
    mass_ref running = 0;
    std::size_t chosen = floor.size() - 1; // where rounding left the product at the total
    for (std::size_t i = 0; i < floor.size(); ++i) {
        running += mass_of_ref(d_exp(floor[i].logit - max));
        if (static_cast<long double>(running) > static_cast<long double>(product)) {
            chosen = i;
            break;
        }
    }
    listed = floor;
    for (auto& t : listed) {
        t.p = 0.0f;
    }
    floor[chosen].p = static_cast<float>(static_cast<double>(mass_of_ref(d_exp(floor[chosen].logit - max))) / static_cast<double>(kept_mass));
    return chosen;
}

} // namespace

TEST_CASE("mirostat: k from the Zipf estimate, draw, and mu updated on accept")
{
    struct params {
        float tau, eta;
        std::int32_t m;
    };
    const params all[] = {{5.0f, 0.1f, 100}, {3.0f, 0.5f, 100}, {1.0f, 0.3f, 2}, {4.0f, 0.2f, 1}};
    std::uint32_t seed = 900;
    int floors = 0; // steps that kept more than 1/32 of a whole vocabulary
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
                    const float max = l.front().logit;
                    float sum_tb = 0.0f;
                    float sum_tt = 0.0f;
                    for (std::size_t i = 0; i + 1 < static_cast<std::size_t>(prm.m) && i + 1 < l.size(); ++i) {
                        const float next = exp_difference_ref(l[i + 1].logit, max);
                        if (next == 0.0f) {
                            break;
                        }
                        const float t = d_log(static_cast<float>(i + 2) / static_cast<float>(i + 1));
                        const float b = d_log(exp_difference_ref(l[i].logit, max) / next);
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
                    std::size_t chosen = 0;
                    const bool finite = std::all_of(l.begin(), l.end(), [](const token_data& t) { return std::isfinite(t.logit); });
                    if (in.whole && finite && keep < l.size() && keep * 32 > l.size()) {
                        // More than 1/32 of a whole vocabulary of finite logits: the floor at the
                        // k-th best's logit, its ties with it.
                        const float floor_logit = l[keep - 1].logit;
                        std::vector<token_data> listed;
                        chosen = floor_draw_ref(in.items, max, u, [floor_logit](const token_data& t) { return t.logit >= floor_logit; }, l, listed);
                        CHECK(l.size() >= keep);
                        check_set(c, as_list(listed));
                        ++floors;
                    } else if (keep < l.size()) {
                        l.resize(keep);
                        softmax_list(l);
                        chosen = list_draw(l, u);
                        check_set(c, as_list(l), true);
                    } else {
                        l = in.items; // everything stays as it was: dist's draw over it
                        chosen = draw_as_dist(l, in.whole, u);
                        check_set(c, unchanged(in));
                    }
                    CHECK(c.selected() == l[chosen].id);

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
    CHECK(floors >= 30); // 35 with these seeds
}

TEST_CASE("mirostat_v2: the candidates with probability at least 2^-mu, draw, and mu updated on accept")
{
    std::uint32_t seed = 1300;
    int floors = 0;        // steps that kept more than 256 of a whole vocabulary
    int finite_floors = 0; // of them, over finite logits (the floor from the weights' pass)
    for (const auto& input : standard_inputs()) {
        const bool finite = std::all_of(input.x.begin(), input.x.end(), [](float v) { return std::isfinite(v); });
        // tau 30: mu 60, every token passes (a whole vocabulary of finite logits knows it from
        // its range, without the weights' pass).
        for (const float tau : {1.0f, 3.0f, 5.0f, 8.0f, 30.0f}) {
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
                    const float max = l.front().logit;
                    mass_ref total = 0;
                    for (const auto& t : l) {
                        total += mass_of_ref(d_exp(t.logit - max));
                    }
                    const float least = d_pow(2.0f, -mu);
                    // Probability at least `least`: a mass of at least ceil(least total).
                    const mass_ref share = !(least > 0.0f) ? 0 : (least >= 1.0f ? total : share_ref(least, total));
                    std::size_t keep = 0;
                    while (keep < l.size() && mass_of_ref(d_exp(l[keep].logit - max)) >= share) {
                        ++keep;
                    }
                    const std::size_t passing = keep;
                    keep = std::max<std::size_t>(keep, 1);
                    std::size_t chosen = 0;
                    if (in.whole && share > 0 && passing < l.size() && passing > 256) {
                        // More than 256 of a whole vocabulary (-inf logits too): the floor, in id
                        // order, drawn by a walk of exact masses; p the token's mass over the floor's.
                        std::vector<token_data> listed;
                        chosen = floor_draw_ref(
                            in.items, max, u, [&](const token_data& t) { return mass_of_ref(d_exp(t.logit - max)) >= share; }, l, listed);
                        REQUIRE(l.size() == keep);
                        check_set(c, as_list(listed));
                        ++floors;
                        finite_floors += finite ? 1 : 0;
                    } else if (keep < l.size()) {
                        l.resize(keep);
                        softmax_list(l);
                        chosen = list_draw(l, u);
                        check_set(c, as_list(l), true);
                    } else {
                        l = in.items;
                        chosen = draw_as_dist(l, in.whole, u);
                        check_set(c, unchanged(in));
                    }
                    CHECK(c.selected() == l[chosen].id);
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
    CHECK(floors >= 120);       // 133 with these seeds
    CHECK(finite_floors >= 60); // 69 of them
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


TEST_CASE("mirostat_v2: on both sides of keeping every token, the count decides as the exact masses do")
{
    // The tau (mu = 2 tau) at which the lowest logit's mass just reaches ceil(2^-mu total), found by
    // bisection on the reference's rule: just below it some token goes, at it every token stays.
    // Normal logits, and nearly equal ones (every weight close to 1, so the total is close to the
    // n 2^48 that bounds it before the weights are known).
    std::mt19937 rng(808);
    for (const float spread : {1.0f, 1e-3f}) {
        CAPTURE(spread);
        std::normal_distribution<float> normal(0.0f, spread);
        std::vector<float> x(3000);
        for (float& v : x) {
            v = normal(rng);
        }
        const float max = *std::max_element(x.begin(), x.end());
        const float lowest = *std::min_element(x.begin(), x.end());
        mass_ref total = 0;
        for (const float v : x) {
            total += mass_of_ref(d_exp(v - max));
        }
        const mass_ref weakest = mass_of_ref(d_exp(lowest - max));
        const auto keeps_all = [&](float tau) { return share_ref(d_pow(2.0f, -2.0f * tau), total) <= weakest; };
        float below = 1.0f;
        float above = 40.0f;
        REQUIRE(!keeps_all(below));
        REQUIRE(keeps_all(above));
        while (std::nextafter(below, above) < above) {
            const float mid = below + (above - below) / 2.0f;
            (keeps_all(mid) ? above : below) = mid;
        }
        for (const float tau : {below, above}) {
            CAPTURE(tau);
            qs::mirostat_v2 m(tau, 0.1f, 5);
            qs::random_source numbers(5, qs::stream::mirostat_v2);
            qs::candidates c;
            c.reset(std::span<const float>(x));
            m.apply(c);
            if (tau == above) {
                CHECK(c.whole_vocabulary());
                std::vector<token_data> l = whole_ref(x).items;
                CHECK(c.selected() == l[draw_as_dist(l, true, numbers.uniform())].id);
            } else {
                CHECK(!c.whole_vocabulary());
                CHECK(c.size() < x.size());
            }
        }
    }
}

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

// The sampler under test, configured as the reference is.
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
