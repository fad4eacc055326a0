// Exact masses and selection by rank (exact_mass.hpp, rank_select.hpp) against their definitions
// written out independently here: floor(e 2^48) in double, ceil(p total) from frexp, positions
// from a full sort and walk, and top_p followed by dist over a whole vocabulary against a sorted
// walk of exact masses.
#include <doctest/doctest.h>

#include <sampling/sampling.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "sampling_reference.hpp"

namespace {

using namespace qk_test::sampling;
namespace sd = qk::sampling::detail;

std::vector<float> vocabulary(std::size_t n, std::uint32_t seed, int kind)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, kind == 0 ? 1.0f : 3.0f);
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) {
        x[i] = normal(rng);
        if (kind == 2 && i % 3 == 0) {
            x[i] = std::round(x[i]); // ties
        }
        if (kind == 3 && i % 9 == 0) {
            x[i] = i % 2 == 0 ? -inf : nan_value;
        }
    }
    if (kind == 4) {
        for (int h = 0; h < 4; ++h) {
            x[rng() % n] = 14.0f + static_cast<float>(h); // a peaky head
        }
    }
    return x;
}

// Units per bucket for the histograms of the tests: several powers of two, coarse and fine.
float k_unit(std::size_t n)
{
    return n % 3 == 0 ? 1.0f : n % 3 == 1 ? 32.0f : 256.0f;
}

// The position by a full sort: the first token in rank order among those ranking at or before
// `bound` whose running mass reaches target (unit: every token weighs 1).
std::pair<std::int32_t, mass_ref> position_ref(const std::vector<float>& x, float max, mass_ref target, sd::rank_bound bound, bool unit)
{
    std::vector<token_data> l;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const float v = norm(x[i]);
        if (x[i] == x[i] && (v > bound.logit || (v == bound.logit && static_cast<std::int32_t>(i) <= bound.id))) {
            l.push_back({static_cast<std::int32_t>(i), v, 0.0f});
        }
    }
    std::sort(l.begin(), l.end(), ranks_first);
    mass_ref running = 0;
    for (const auto& t : l) {
        running += unit ? 1 : mass_of_ref(d_exp(t.logit - max));
        if (running >= target) {
            return {t.id, running};
        }
    }
    return {-1, running};
}

} // namespace

TEST_CASE("exact mass: each weight is floor(e 2^48)")
{
    std::vector<float> weights = {0.0f, 1.0f, 0x1.0p-48f, 0x1.0p-49f, 0x1.fffffep-49f, 0x1.000002p-48f, 0x1.fffffep-1f, 0x1.0p-24f,
                                  0x1.0p-126f, std::numeric_limits<float>::denorm_min()};
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    for (int i = 0; i < 200000; ++i) {
        weights.push_back(unit(rng));
        weights.push_back(std::ldexp(unit(rng), -static_cast<int>(rng() % 60)));
    }
    for (std::uint32_t bits = std::bit_cast<std::uint32_t>(0.5f); bits < std::bit_cast<std::uint32_t>(1.0f); bits += 997) {
        weights.push_back(std::bit_cast<float>(bits));
    }
    std::size_t wrong = 0;
    for (const float e : weights) {
        if (sd::mass_of(e) != mass_of_ref(e)) {
            ++wrong;
            CAPTURE(e);
            CHECK(sd::mass_of(e) == mass_of_ref(e));
        }
    }
    CHECK(wrong == 0);
    CHECK(sd::mass_of(1.0f) == (std::uint64_t{1} << 48));
    CHECK(sd::mass_of(0x1.0p-49f) == 0);
}

TEST_CASE("exact mass: a share of a total is ceil(p total), and the draw's target exceeds u total")
{
    std::mt19937_64 rng(11);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    for (int i = 0; i < 20000; ++i) {
        float p = unit(rng);
        if (i % 5 == 1) {
            p = std::ldexp(p, -static_cast<int>(rng() % 140)); // tiny and subnormal shares too
        }
        if (!(p > 0.0f) || p >= 1.0f) {
            continue;
        }
        const mass_ref total = (mass_ref{rng() >> (rng() % 64)} << (rng() % 17)) + 1;
        const mass_ref got = sd::mass_share(p, total);
        CAPTURE(p);
        REQUIRE(got == share_ref(p, total));
        // The defining inequality, where p = m / 2^s and m total fit 128 bits with room.
        int ex = 0;
        const auto m = static_cast<std::uint64_t>(std::ldexp(std::frexp(static_cast<double>(p), &ex), 24));
        const int s = 24 - ex;
        if (s <= 40 && total < (mass_ref{1} << 80)) {
            const mass_ref product = mass_ref{m} * total;
            CHECK(product <= got << s);
            CHECK(((got - 1) << s) < product);
            // typical's strict share: the least mass above p total.
            const mass_ref beyond = sd::mass_beyond(p, total);
            CHECK(product < beyond << s);
            CHECK(((beyond - 1) << s) <= product);
        }
        CHECK(sd::mass_beyond(p, total) == beyond_ref(p, total));
    }
    CHECK(sd::mass_beyond(0.0f, 1000) == 1);
    CHECK(sd::mass_beyond(0.5f, 1000) == 501);
    CHECK(sd::mass_beyond(0.5f, 1001) == 501);
    for (int i = 0; i < 20000; ++i) {
        const mass_ref total = (rng() >> (rng() % 64)) + 1; // below 2^64: exact in long double
        const double u = qk::sampling::to_unit_interval(rng());
        const mass_ref target = sd::draw_target(u, total);
        const double product = u * static_cast<double>(total);
        CAPTURE(u);
        CHECK(target >= 1);
        CHECK(target <= total);
        if (target < total) {
            // The first running mass above the product, which rounding made a double.
            CHECK(static_cast<long double>(target - 1) <= static_cast<long double>(product));
            CHECK(static_cast<long double>(product) < static_cast<long double>(target));
        }
    }
}

TEST_CASE("rank selection: the token a full sort and walk of exact masses finds")
{
    std::uint32_t seed = 21;
    for (const int kind : {0, 1, 2, 3, 4}) {
        for (const std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{17}, std::size_t{300}, std::size_t{5000}, std::size_t{70000}}) {
            const auto x = vocabulary(n, seed++, kind);
            const float max = sd::max_logit<qk::arch::generic>(x.data(), n);
            if (!(max > -inf)) {
                continue;
            }
            std::vector<float> e(n);
            float lowest = 0.0f;
            const sd::mass_t total = sd::exp_mass<qk::arch::vector_native>(x.data(), n, max, e.data(), lowest);
            mass_ref total_ref = 0;
            for (const float v : x) {
                total_ref += mass_of_ref(d_exp(v - max));
            }
            CAPTURE(kind);
            CAPTURE(n);
            REQUIRE(total == total_ref);
            const float from = std::max(lowest, max - 34.0f);
            // The histogram by logit: each bucket the exact mass of its tokens, the buckets in
            // rank order (a token ranking before another is never in a later bucket).
            sd::rank_histogram histogram;
            std::vector<float> e_histogram(n);
            float lowest_histogram = 0.0f;
            const float per_unit = k_unit(n);
            REQUIRE(sd::exp_mass_histogram<qk::arch::vector_native>(x.data(), n, max, per_unit, e_histogram.data(), lowest_histogram, histogram) ==
                    total_ref);
            CHECK(std::memcmp(e_histogram.data(), e.data(), n * sizeof(float)) == 0);
            CHECK(same_bits(lowest_histogram, lowest));
            std::vector<mass_ref> bucket_ref(sd::rank_histogram::buckets);
            std::vector<std::pair<float, std::size_t>> ranked; // (logit, bucket)
            for (const float v : x) {
                const float d = (max - v) * per_unit;
                const auto b = static_cast<std::size_t>(d < 1023.0f ? d : 1023.0f);
                bucket_ref[b] += mass_of_ref(d_exp(v - max));
                ranked.emplace_back(norm(v), b);
            }
            CHECK(std::equal(bucket_ref.begin(), bucket_ref.end(), histogram.mass.begin()));
            std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
            CHECK(std::is_sorted(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second < b.second; }));
            sd::rank_scratch scratch;
            std::mt19937_64 rng(seed);
            for (int k = 0; k < 24; ++k) {
                const mass_ref target = k == 0 ? 1 : k == 1 ? total : 1 + rng() % static_cast<std::uint64_t>(total);
                const auto got = sd::find_by_rank<qk::arch::vector_native, false>(x.data(), e.data(), n, from, max, target, sd::everything, scratch);
                const auto want = position_ref(x, max, target, sd::everything, false);
                CAPTURE(static_cast<double>(target));
                CHECK(got.id == want.first);
                CHECK(got.through == want.second);
                const auto got_histogram =
                    sd::find_by_rank<qk::arch::vector_native, false>(x.data(), e.data(), n, from, max, target, sd::everything, scratch, &histogram);
                CHECK(got_histogram.id == want.first);
                CHECK(got_histogram.through == want.second);
                // The same within the prefix that ends at that token.
                const sd::rank_bound bound{got.logit, got.id};
                const mass_ref inner = 1 + rng() % static_cast<std::uint64_t>(got.through);
                const auto got_inner = sd::find_by_rank<qk::arch::vector_native, false>(x.data(), e.data(), n, from, max, inner, bound, scratch);
                const auto want_inner = position_ref(x, max, inner, bound, false);
                CHECK(got_inner.id == want_inner.first);
                CHECK(got_inner.through == want_inner.second);
                const auto got_inner_histogram =
                    sd::find_by_rank<qk::arch::vector_native, false>(x.data(), e.data(), n, from, max, inner, bound, scratch, &histogram);
                CHECK(got_inner_histogram.id == want_inner.first);
                CHECK(got_inner_histogram.through == want_inner.second);
                std::size_t count_ref = 0;
                for (std::size_t i = 0; i < n; ++i) {
                    count_ref += norm(x[i]) > bound.logit || (x[i] == bound.logit && static_cast<std::int32_t>(i) <= bound.id) ? 1 : 0;
                }
                CHECK(sd::count_ranked<qk::arch::vector_native>(x.data(), n, bound) == count_ref);
            }
            if (kind != 3) { // counting needs every token at or above `lowest`
                for (const std::size_t k : {std::size_t{1}, (n + 1) / 2, n}) {
                    const auto got = sd::find_by_rank<qk::arch::vector_native, true>(x.data(), nullptr, n, lowest, max, k, sd::everything, scratch);
                    const auto want = position_ref(x, max, k, sd::everything, true);
                    CHECK(got.id == want.first);
                    CHECK(got.through == want.second);
                }
            }
        }
    }
}

TEST_CASE("rank histogram: buckets of 2^17 logits and more are folded before a 64-bit sum could overflow")
{
    // Equal logits weigh 2^48 each and all fall in bucket 0: 2^16 of them would overflow one
    // 64-bit copy; the pass folds every 2^17 logits (2^15 per copy).
    const std::size_t n = 3 * (std::size_t{1} << 17) + 5;
    const std::vector<float> equal(n, 0.25f);
    std::vector<float> e(n);
    float lowest = 0.0f;
    sd::rank_histogram histogram;
    const sd::mass_t total = sd::exp_mass_histogram<qk::arch::vector_native>(equal.data(), n, 0.25f, 32.0f, e.data(), lowest, histogram);
    CHECK(total == (sd::mass_t{n} << 48));
    CHECK(histogram.mass[0] == (sd::mass_t{n} << 48));
    CHECK(lowest == 0.25f);
    // exp_mass's 64-bit lanes (AVX-512) are added up before they could overflow, too.
    CHECK(sd::exp_mass<qk::arch::vector_native>(equal.data(), n, 0.25f, e.data(), lowest) == (sd::mass_t{n} << 48));
    CHECK(sd::exp_mass<qk::arch::vector_native>(equal.data(), n, 0.25f, nullptr, lowest) == (sd::mass_t{n} << 48));
    sd::rank_scratch scratch;
    // Every token ties: the k-th unit of 2^48 ends at token k - 1.
    const auto found = sd::find_by_rank<qk::arch::vector_native, false>(equal.data(), e.data(), n, 0.25f, 0.25f,
                                                                        (sd::mass_t{12345} << 48) - 7, sd::everything, scratch, &histogram);
    CHECK(found.id == 12344);
    CHECK(found.through == (sd::mass_t{12345} << 48));

    // A normal body over as many logits: the buckets' masses against a walk in id order.
    const auto x = vocabulary(n, 4242, 1);
    const float max = sd::max_logit<qk::arch::generic>(x.data(), n);
    const sd::mass_t normal_total = sd::exp_mass_histogram<qk::arch::vector_native>(x.data(), n, max, 64.0f, e.data(), lowest, histogram);
    std::vector<mass_ref> bucket_ref(sd::rank_histogram::buckets);
    mass_ref total_ref = 0;
    for (const float v : x) {
        const float d = (max - v) * 64.0f;
        const mass_ref m = mass_of_ref(d_exp(v - max));
        bucket_ref[static_cast<std::size_t>(d < 1023.0f ? d : 1023.0f)] += m;
        total_ref += m;
    }
    CHECK(normal_total == total_ref);
    CHECK(std::equal(bucket_ref.begin(), bucket_ref.end(), histogram.mass.begin()));

    // By typical's keys -|center - x| (from 0 down): the buckets' masses against a walk in id
    // order, in rank order of the keys; then positions by key through the histogram against a
    // full sort of the keys.
    const float center = max - 2.5f;
    sd::rank_histogram by_key;
    const sd::mass_t by_key_total = sd::distance_histogram<qk::arch::vector_native>(x.data(), e.data(), n, center, 128.0f, by_key);
    std::fill(bucket_ref.begin(), bucket_ref.end(), mass_ref{0});
    std::vector<std::pair<float, std::size_t>> ranked;
    std::vector<token_data> by_distance;
    mass_ref by_key_total_ref = 0;
    std::size_t wrong_buckets = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const float key = -std::fabs(center - x[i]);
        const float d = (0.0f - key) * 128.0f;
        const auto b = static_cast<std::size_t>(d < 1023.0f ? d : 1023.0f);
        bucket_ref[b] += mass_of_ref(e[i]);
        by_key_total_ref += mass_of_ref(e[i]);
        wrong_buckets += by_key.bucket_of[i] == b ? 0 : 1;
        ranked.emplace_back(key, b);
        by_distance.push_back({static_cast<std::int32_t>(i), key, e[i]});
    }
    CHECK(std::equal(bucket_ref.begin(), bucket_ref.end(), by_key.mass.begin()));
    CHECK(by_key_total == by_key_total_ref);
    CHECK(wrong_buckets == 0);
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    CHECK(std::is_sorted(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second < b.second; }));
    std::sort(by_distance.begin(), by_distance.end(), ranks_first);
    for (const mass_ref target : {mass_ref{1}, by_key_total_ref / 3, by_key_total_ref * 19 / 20, by_key_total_ref}) {
        mass_ref running = 0;
        std::size_t at = 0;
        while (running + mass_of_ref(by_distance[at].p) < target) {
            running += mass_of_ref(by_distance[at++].p);
        }
        const auto got = sd::find_by_distance<qk::arch::vector_native>(x.data(), e.data(), n, center, target, sd::everything, scratch, by_key);
        CHECK(got.id == by_distance[at].id);
        CHECK(same_bits(got.logit, by_distance[at].logit));
        CHECK(got.through == running + mass_of_ref(by_distance[at].p));
        // The same within a bound: the tokens ranking at or before a token past the position.
        const token_data& edge = by_distance[std::min(at + 5, by_distance.size() - 1)];
        const auto bounded = sd::find_by_distance<qk::arch::vector_native>(x.data(), e.data(), n, center, target, {edge.logit, edge.id},
                                                                           scratch, by_key);
        CHECK(bounded.id == got.id);
        CHECK(bounded.through == got.through);
    }
    const float from = std::max(lowest, max - 34.0f);
    for (const mass_ref target : {mass_ref{1}, total_ref / 3, total_ref * 19 / 20, total_ref}) {
        const auto got = sd::find_by_rank<qk::arch::vector_native, false>(x.data(), e.data(), n, from, max, target, sd::everything, scratch, &histogram);
        const auto want = position_ref(x, max, target, sd::everything, false);
        CHECK(got.id == want.first);
        CHECK(got.through == want.second);
    }
}

TEST_CASE("rank histogram without masses by bucket: counts through a bucket, the k-th token's bucket, the masses up to it")
{
    // top_k's prefix pass: each token's bucket and the total mass only, then counts of the tokens
    // through a bucket (binary search for the k-th) and the masses of the buckets up to it,
    // against a walk in id order. 2^17 + 40007 tokens: add_masses_through folds once on the way.
    for (const std::size_t n : {std::size_t{1}, std::size_t{33}, std::size_t{4099}, (std::size_t{1} << 17) + 40007}) {
        for (int kind = 0; kind < 5; ++kind) {
            auto x = vocabulary(n, static_cast<std::uint32_t>(n + 10 * kind), kind);
            for (float& v : x) {
                v = norm(v) == -inf ? -30.0f : v; // finite logits, as top_k's prefix takes them
            }
            const float max = sd::max_logit<qk::arch::generic>(x.data(), n);
            std::vector<mass_ref> bucket_ref(sd::rank_histogram::buckets);
            std::vector<std::size_t> count_ref(sd::rank_histogram::buckets);
            std::vector<std::uint16_t> position_ref(n);
            mass_ref total_ref = 0;
            for (std::size_t i = 0; i < n; ++i) {
                const float d = (max - x[i]) * 32.0f;
                const auto b = static_cast<std::size_t>(d < 1023.0f ? d : 1023.0f);
                const mass_ref m = mass_of_ref(d_exp(x[i] - max));
                bucket_ref[b] += m;
                count_ref[b] += 1;
                position_ref[i] = static_cast<std::uint16_t>(b);
                total_ref += m;
            }
            const auto check = [&]<class Tag>(Tag) {
                std::vector<float> e(n);
                float lowest = 0.0f;
                sd::rank_histogram h;
                const sd::mass_t total = sd::exp_mass_histogram<Tag>(x.data(), n, max, 32.0f, e.data(), lowest, h, nullptr, false);
                CHECK(total == total_ref);
                CHECK(std::equal(position_ref.begin(), position_ref.end(), h.bucket_of.begin()));
                CHECK(std::all_of(h.mass.begin(), h.mass.end(), [](sd::mass_t m) { return m == 0; }));
                std::size_t through = 0;
                std::size_t wrong_counts = 0;
                for (std::size_t b = 0; b < sd::rank_histogram::buckets; b += 1 + b / 8) {
                    through = 0;
                    for (std::size_t c = 0; c <= b; ++c) {
                        through += count_ref[c];
                    }
                    wrong_counts += sd::count_through<Tag>(h, n, b) == through ? 0 : 1;
                }
                CHECK(wrong_counts == 0);
                // Three bounds in one pass, as the search asks for them (out of order here too).
                for (const std::array<std::size_t, 3> bounds :
                     {std::array<std::size_t, 3>{0, 511, 1023}, std::array<std::size_t, 3>{40, 40, 41}, std::array<std::size_t, 3>{900, 3, 64}}) {
                    std::array<std::size_t, 3> got{};
                    sd::count_through_each<Tag, 3>(h, n, bounds, got);
                    for (std::size_t j = 0; j < 3; ++j) {
                        std::size_t want = 0;
                        for (std::size_t c = 0; c <= bounds[j]; ++c) {
                            want += count_ref[c];
                        }
                        CHECK(got[j] == want);
                    }
                }
                for (const std::size_t k : {std::size_t{1}, n / 7 + 1, n / 2 + 1, n}) {
                    std::size_t b_ref = 0;
                    std::size_t before_ref = 0;
                    while (before_ref + count_ref[b_ref] < k) {
                        before_ref += count_ref[b_ref++];
                    }
                    std::size_t before = 0;
                    CHECK(sd::bucket_of_count<Tag>(h, n, k, before) == b_ref);
                    CHECK(before == before_ref);
                    sd::rank_histogram added = h;
                    sd::add_masses_through<Tag>(added, e.data(), n, b_ref);
                    for (std::size_t b = 0; b < sd::rank_histogram::buckets; ++b) {
                        if (added.mass[b] != (b <= b_ref ? bucket_ref[b] : 0)) {
                            FAIL_CHECK("bucket " << b << " of " << b_ref);
                            break;
                        }
                    }
                }
            };
            CAPTURE(n);
            CAPTURE(kind);
            check(qk::arch::vector_native{});
            check(qk::arch::generic{});
        }
    }
}

TEST_CASE("counts through a bucket over more tokens than a 16-bit lane holds")
{
    // The AVX-512 count adds 32 tokens per step into 16-bit lanes, summed every 2^15 - 1 steps:
    // with 2^15 steps and every token counted (through the last bucket here), a lane would reach
    // 2^15, which the signed sum of the lanes reads as -2^15. 2^20 + 100 tokens, all but every
    // 1000th in bucket 0.
    const std::size_t n = (std::size_t{1} << 20) + 100;
    sd::rank_histogram h;
    h.bucket_of.assign(n, 0);
    std::size_t in_zero = n;
    for (std::size_t i = 999; i < n; i += 1000) {
        h.bucket_of[i] = 700;
        --in_zero;
    }
    const auto check = [&]<class Tag>(Tag) {
        CHECK(sd::count_through<Tag>(h, n, 0) == in_zero);
        CHECK(sd::count_through<Tag>(h, n, 1023) == n);
        std::size_t before = 0;
        CHECK(sd::bucket_of_count<Tag>(h, n, n, before) == 700);
        CHECK(before == in_zero);
        CHECK(sd::bucket_of_count<Tag>(h, n, in_zero, before) == 0);
        CHECK(before == 0);
    };
    check(qk::arch::vector_native{});
    check(qk::arch::generic{});
}

TEST_CASE("top_p then dist over a whole vocabulary: the token a sorted walk of exact masses draws")
{
    std::uint32_t seed = 77;
    for (const int kind : {0, 1, 2, 3, 4}) {
        for (const std::size_t n : {std::size_t{1}, std::size_t{40}, std::size_t{3000}, std::size_t{60000}}) {
            const auto x = vocabulary(n, seed++, kind);
            if (!(sd::max_logit<qk::arch::generic>(x.data(), n) > -inf)) {
                continue;
            }
            for (const float p : {0.0f, 0.3f, 0.9f, 0.95f, 0.999f}) {
                const set_ref kept = ref_top_p(whole_ref(x), p, 1);
                float max = -inf;
                for (const float v : x) {
                    max = norm(v) > max ? norm(v) : max;
                }
                mass_ref kept_mass = 0;
                for (const auto& t : kept.items) {
                    kept_mass += mass_of_ref(d_exp(t.logit - max));
                }
                const std::uint64_t dist_seed = seed * 31 + 7;
                auto chain = qk::sampling::chain::parse("top_p(p=" + std::to_string(p) + ");dist(seed=" + std::to_string(dist_seed) + ")");
                qk::sampling::random_source uniforms(dist_seed, qk::sampling::stream::dist);
                CAPTURE(kind);
                CAPTURE(n);
                CAPTURE(p);
                for (int step = 0; step < 8; ++step) {
                    const double u = uniforms.uniform();
                    const double product = u * static_cast<double>(kept_mass);
                    mass_ref running = 0;
                    std::int32_t want = -1;
                    for (const auto& t : kept.items) {
                        running += mass_of_ref(d_exp(t.logit - max));
                        if (static_cast<long double>(running) > static_cast<long double>(product)) {
                            want = t.id;
                            break;
                        }
                    }
                    if (want < 0) {
                        want = kept.items.back().id; // rounding left the product at the total
                    }
                    CHECK(chain.sample(x) == want);
                }
                CHECK(chain.final_candidates().size() == kept.items.size());
            }
        }
    }
}

TEST_CASE("top_k above 2048 and 1/64 of a whole vocabulary then dist: the k best, drawn by a walk of exact masses")
{
    std::uint32_t seed = 177;
    int prefixes = 0;
    for (const int kind : {0, 1, 2, 3, 4}) {
        // 131136 = 2049 * 64: k = 2049 stays a list there, 3001 is a prefix.
        for (const std::size_t n : {std::size_t{2050}, std::size_t{5000}, std::size_t{60000}, std::size_t{70000}, std::size_t{131136}}) {
            const auto x = vocabulary(n, seed++, kind);
            std::vector<token_data> sorted;
            for (std::size_t i = 0; i < n; ++i) {
                sorted.push_back({static_cast<std::int32_t>(i), norm(x[i]), 0.0f});
            }
            std::sort(sorted.begin(), sorted.end(), [](const token_data& a, const token_data& b) {
                return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
            });
            const float max = sorted.front().logit;
            const bool finite = std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); });
            for (const std::size_t k : {std::size_t{2048}, std::size_t{2049}, std::size_t{3001}, n / 2, n - 1}) {
                if (k >= n || k < 2048) {
                    continue;
                }
                // 2048 and k of at most 1/64 of the vocabulary stay sorted lists (dist's list draw,
                // which the other tests check); the rest of finite logits become prefixes.
                const bool prefix = finite && k > 2048 && k * 64 > n;
                prefixes += prefix ? 1 : 0;
                const std::vector<token_data> kept(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k));
                mass_ref kept_mass = 0;
                for (const auto& t : kept) {
                    kept_mass += mass_of_ref(d_exp(t.logit - max));
                }
                const std::uint64_t dist_seed = seed * 17 + 3;
                auto chain = qk::sampling::chain::parse("top_k(k=" + std::to_string(k) + ");dist(seed=" + std::to_string(dist_seed) + ")");
                qk::sampling::random_source uniforms(dist_seed, qk::sampling::stream::dist);
                CAPTURE(kind);
                CAPTURE(n);
                CAPTURE(k);
                for (int step = 0; step < 6; ++step) {
                    const double u = uniforms.uniform();
                    const std::int32_t got = chain.sample(x);
                    if (!prefix) {
                        continue;
                    }
                    const double product = u * static_cast<double>(kept_mass);
                    mass_ref running = 0;
                    std::int32_t want = kept.back().id; // where rounding left the product at the total
                    for (const auto& t : kept) {
                        running += mass_of_ref(d_exp(t.logit - max));
                        if (static_cast<long double>(running) > static_cast<long double>(product)) {
                            want = t.id;
                            break;
                        }
                    }
                    CHECK(got == want);
                }
                // The set, listed: the k best in rank order, whichever form holds them.
                qk::sampling::candidates c;
                c.reset(std::span<const float>(x));
                qk::sampling::top_k(static_cast<std::int32_t>(k)).apply(c);
                const auto& listed = c.list();
                REQUIRE(listed.size() == k);
                // A prefix lists each one's probability in the whole vocabulary (as after top_p),
                // a sorted list none (p 0).
                mass_ref total = 0;
                for (const float v : x) {
                    total += std::isfinite(v) ? mass_of_ref(d_exp(v - max)) : 0;
                }
                std::size_t wrong = 0;
                std::size_t wrong_p = 0;
                for (std::size_t i = 0; i < k; ++i) {
                    wrong += listed[i].id == kept[i].id && std::bit_cast<std::uint32_t>(listed[i].logit) == std::bit_cast<std::uint32_t>(kept[i].logit) ? 0 : 1;
                    const double p_ref = prefix ? static_cast<double>(d_exp(kept[i].logit - max)) * 0x1.0p48 / static_cast<double>(total) : 0.0;
                    wrong_p += std::fabs(static_cast<double>(listed[i].p) - p_ref) <= 1e-6 * p_ref ? 0 : 1;
                }
                CHECK(wrong == 0);
                CHECK(wrong_p == 0);
            }
        }
    }
    CHECK(prefixes >= 20);
}

TEST_CASE("sort_by_rank: the order of a comparison sort by (logit high first, id low first)")
{
    std::mt19937 rng(3);
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{100}, std::size_t{256}, std::size_t{257}, std::size_t{4096}, std::size_t{50000}}) {
        for (int kind = 0; kind < 6; ++kind) {
            std::vector<token_data> l;
            std::normal_distribution<float> normal(0.0f, kind == 0 || kind >= 4 ? 1.0f : 1e-30f);
            std::uniform_real_distribution<float> close(1.0f, 1.0001f);
            for (std::size_t i = 0; i < n; ++i) {
                float v = normal(rng);
                const unsigned r = rng() % 10;
                v = r == 0 ? -inf : r == 1 ? 0.0f : r == 2 && kind == 1 ? -0.0f : r == 3 ? std::round(v) : v;
                if (kind == 2) {
                    v = static_cast<float>(rng() % 3) - 1.0f; // mostly ties
                }
                if (kind == 3) {
                    // Hundreds of close logits in no order and one far below: a few buckets hold them all.
                    v = i == n / 2 ? -1e30f : close(rng);
                }
                if (kind >= 4) {
                    // No -0 (rounding makes some above, and the comparison sort takes any list with one):
                    // distinct logits, spread (4) or with -inf and ties among them (5).
                    v = kind == 4 ? 3.0f * normal(rng) : (v == 0.0f ? 0.0f : v);
                }
                l.push_back({static_cast<std::int32_t>(i * 7 + rng() % 7), v, 0.0f});
            }
            auto want = l;
            std::sort(want.begin(), want.end(), ranks_first);
            std::vector<std::uint64_t> keys;
            sd::sort_by_rank(l, keys);
            CAPTURE(n);
            CAPTURE(kind);
            REQUIRE(l.size() == want.size());
            bool same = true;
            for (std::size_t i = 0; i < n; ++i) {
                same = same && l[i].id == want[i].id && same_bits(l[i].logit, want[i].logit);
            }
            CHECK(same);
        }
    }
}

TEST_CASE("top_k_scan: the k best of a full sort, by chunk maxima and by heap, skipped tokens left out")
{
    // Shapes that the chunk maxima handle well and badly: normal logits; ascending and descending
    // (every chunk maximum at one end of its chunk); mostly ties (the threshold admits thousands);
    // -inf and NaN in most places (the threshold is -inf: the heap decides); a head of +inf; and
    // the best tokens skipped, so that fewer than k of those above the threshold remain.
    std::mt19937 rng(11);
    int chunked = 0;
    for (const std::size_t n : {std::size_t{1000}, std::size_t{4099}, std::size_t{32000}}) {
        for (int kind = 0; kind < 7; ++kind) {
            std::normal_distribution<float> normal(0.0f, 3.0f);
            std::vector<float> x(n);
            for (std::size_t i = 0; i < n; ++i) {
                const float v = normal(rng);
                x[i] = kind == 1   ? static_cast<float>(i) * 0.01f
                       : kind == 2 ? -static_cast<float>(i) * 0.01f
                       : kind == 3 ? static_cast<float>(rng() % 4)
                       : kind == 4 ? (i % 5 == 0 ? v : (i % 2 == 0 ? -inf : nan_value))
                       : kind == 5 && i % 97 == 0 ? inf
                                   : v;
            }
            for (const std::size_t k : {std::size_t{1}, std::size_t{7}, std::size_t{40}, std::size_t{100}, std::size_t{256}, std::size_t{1000}}) {
                for (const bool skipping : {false, true}) {
                    // kind 6 skips the 2k best; the others every seventh token.
                    std::vector<char> skipped(n, 0);
                    if (skipping) {
                        std::vector<token_data> all;
                        for (std::size_t i = 0; i < n; ++i) {
                            all.push_back({static_cast<std::int32_t>(i), norm(x[i]), 0.0f});
                        }
                        std::sort(all.begin(), all.end(), ranks_first);
                        for (std::size_t i = 0; i < n; ++i) {
                            skipped[i] = kind == 6 ? 0 : (i % 7 == 3 ? 1 : 0);
                        }
                        for (std::size_t j = 0; kind == 6 && j < std::min(n, 2 * k); ++j) {
                            skipped[static_cast<std::size_t>(all[j].id)] = 1;
                        }
                    }
                    const auto skip = [&skipped](std::size_t i) { return skipped[i] != 0; };
                    const auto skippable = static_cast<std::size_t>(std::count(skipped.begin(), skipped.end(), 1));
                    std::vector<token_data> want;
                    for (std::size_t i = 0; i < n; ++i) {
                        if (!skip(i)) {
                            want.push_back({static_cast<std::int32_t>(i), norm(x[i]), 0.0f});
                        }
                    }
                    std::sort(want.begin(), want.end(), ranks_first);
                    want.resize(std::min(k, want.size()));
                    std::vector<token_data> got;
                    sd::top_k_scan<qk::arch::vector_native>(x.data(), n, k, got, skip, skippable);
                    std::vector<token_data> got_generic;
                    sd::top_k_scan<qk::arch::generic>(x.data(), n, k, got_generic, skip, skippable);
                    CAPTURE(n);
                    CAPTURE(kind);
                    CAPTURE(k);
                    CAPTURE(skipping);
                    CHECK(difference(got, want, true, false) == "");
                    CHECK(difference(got_generic, want, true, false) == "");
                    std::vector<token_data> by_chunks;
                    // Told of the skipped tokens or not: the threshold then admits too few when the
                    // best are skipped, and the heap decides.
                    const std::size_t told = kind % 2 == 0 ? skippable : 0;
                    if (sd::top_k_by_chunk_maxima<qk::arch::vector_native>(x.data(), n, k, by_chunks, skip, told)) {
                        ++chunked;
                        CHECK(difference(by_chunks, want, true, false) == "");
                    } else {
                        CHECK(by_chunks.empty());
                    }
                }
            }
        }
    }
    // k from 48 against many tokens takes the chunk maxima; -inf-heavy vocabularies, skipped heads
    // the threshold was not told of, small k and k near n take the heap.
    CHECK(chunked >= 30);
}

TEST_CASE("min_p then dist over a whole vocabulary: a walk of exact masses in id order over a floor, the list draw otherwise")
{
    std::uint32_t seed = 501;
    for (const int kind : {0, 1, 2, 3, 4}) {
        for (const std::size_t n : {std::size_t{1}, std::size_t{40}, std::size_t{1024}, std::size_t{3001}, std::size_t{60000}}) {
            const auto x = vocabulary(n, seed++, kind);
            float max = -inf;
            for (const float v : x) {
                max = norm(v) > max ? norm(v) : max;
            }
            if (!(max > -inf)) {
                continue;
            }
            for (const float p : {0.001f, 0.02f, 0.3f, 1.0f}) {
                const float threshold = max + d_log(p);
                std::vector<std::int32_t> kept;
                mass_ref kept_mass = 0;
                for (std::size_t i = 0; i < n; ++i) {
                    if (x[i] >= threshold) {
                        kept.push_back(static_cast<std::int32_t>(i));
                        kept_mass += mass_of_ref(d_exp(x[i] - max));
                    }
                }
                const std::uint64_t dist_seed = seed * 13 + 5;
                auto chain = qk::sampling::chain::parse("min_p(p=" + std::to_string(p) + ");dist(seed=" + std::to_string(dist_seed) + ")");
                qk::sampling::random_source uniforms(dist_seed, qk::sampling::stream::dist);
                CAPTURE(kind);
                CAPTURE(n);
                CAPTURE(p);
                // min_p's header: a floor when more than 1/32 of the vocabulary passes, else a list.
                const bool floor = kept.size() * 32 > n;
                std::vector<token_data> list;
                for (const std::int32_t id : kept) {
                    list.push_back({id, x[static_cast<std::size_t>(id)], 0.0f});
                }
                softmax_list(list);
                CAPTURE(floor);
                for (int step = 0; step < 8; ++step) {
                    const double u = uniforms.uniform();
                    const double product = u * static_cast<double>(kept_mass);
                    mass_ref running = 0;
                    std::int32_t want = kept.back(); // where rounding left the product at the total
                    for (const std::int32_t id : kept) {
                        running += mass_of_ref(d_exp(x[static_cast<std::size_t>(id)] - max));
                        if (static_cast<long double>(running) > static_cast<long double>(product)) {
                            want = id;
                            break;
                        }
                    }
                    if (!floor) {
                        want = list[list_draw(list, u)].id;
                    }
                    CHECK(chain.sample(x) == want);
                }
                const auto final_set = chain.final_candidates();
                REQUIRE(final_set.size() == kept.size());
                CHECK(std::equal(final_set.begin(), final_set.end(), kept.begin(), [](const token_data& t, std::int32_t id) { return t.id == id; }));
            }
        }
    }
}

TEST_CASE("typical then dist over a whole vocabulary: the ranked set, and a walk of exact masses in score order")
{
    std::uint32_t seed = 801;
    for (const int kind : {0, 1, 2, 3, 4}) {
        for (const std::size_t n : {std::size_t{1}, std::size_t{40}, std::size_t{1024}, std::size_t{3001}, std::size_t{60000}}) {
            const auto x = vocabulary(n, seed++, kind);
            set_ref whole;
            whole.whole = true;
            for (std::size_t i = 0; i < n; ++i) {
                whole.items.push_back({static_cast<std::int32_t>(i), norm(x[i]), 0.0f});
            }
            float max = -inf;
            for (const auto& t : whole.items) {
                max = std::max(max, t.logit);
            }
            if (!(max > -inf)) {
                continue;
            }
            for (const float p : {0.0f, 0.05f, 0.5f, 0.9f, 0.999f}) {
                CAPTURE(kind);
                CAPTURE(n);
                CAPTURE(p);
                const auto kept = ref_typical(whole, p, 1).items;
                mass_ref kept_mass = 0;
                for (const auto& t : kept) {
                    kept_mass += mass_of_ref(d_exp(t.logit - max));
                }
                // The set itself: ranked, of the reference's size, listing in the reference's order.
                qs::candidates c;
                c.reset(x);
                qs::typical(p).apply(c);
                CHECK(c.current() == qs::candidates::form::ranked);
                CHECK(c.size() == kept.size());
                CHECK(c.logit(kept.back().id) == kept.back().logit);
                const auto& listed = c.list();
                REQUIRE(listed.size() == kept.size());
                CHECK(std::equal(listed.begin(), listed.end(), kept.begin(),
                                 [](const token_data& a, const token_data& b) { return a.id == b.id && same_bits(a.logit, b.logit); }));

                const std::uint64_t dist_seed = seed * 17 + 3;
                auto chain = qk::sampling::chain::parse("typical(p=" + std::to_string(p) + ");dist(seed=" + std::to_string(dist_seed) + ")");
                qk::sampling::random_source uniforms(dist_seed, qk::sampling::stream::dist);
                for (int step = 0; step < 8; ++step) {
                    const double product = uniforms.uniform() * static_cast<double>(kept_mass);
                    mass_ref running = 0;
                    std::int32_t want = kept.back().id;
                    for (const auto& t : kept) {
                        running += mass_of_ref(d_exp(t.logit - max));
                        if (static_cast<long double>(running) > static_cast<long double>(product)) {
                            want = t.id;
                            break;
                        }
                    }
                    CHECK(chain.sample(x) == want);
                }
            }
        }
    }
}

TEST_CASE("the vocabulary's largest logit: computed once, forgotten when a logit changes, noted by the samplers that move it")
{
    // Directly: each way of changing a logit forgets the maximum.
    const std::vector<float> x = vocabulary(5000, 61, 0);
    const float max = sd::max_logit<qk::arch::generic>(x.data(), x.size());
    qs::candidates c;
    c.reset(x);
    CHECK(same_bits(c.vocabulary_max(), max));
    c.set_logit(17, max + 1.0f);
    CHECK(c.vocabulary_max() == max + 1.0f);
    c.dense()[4000] = max + 2.0f;
    CHECK(c.vocabulary_max() == max + 2.0f);
    c.floor_logits(max + 3.0f);
    CHECK(c.vocabulary_max() == -inf);
    c.reset(x);
    CHECK(same_bits(c.vocabulary_max(), max));

    // After each whole-vocabulary sampler that notes where the maximum went, it is the maximum of
    // the logits it left, and dist draws over them what it draws over a copy of them.
    std::uint32_t seed = 900;
    for (const int kind : {0, 1, 2, 3, 4}) {
        for (const std::size_t n : {std::size_t{40}, std::size_t{3001}, std::size_t{60000}}) {
            const auto logits = vocabulary(n, seed++, kind);
            const std::vector<std::pair<std::string, std::function<void(qs::candidates&)>>> samplers = {
                {"xtc(probability=1,threshold=0.1)", [](qs::candidates& c) { qs::xtc(1.0f, 0.1f).apply(c); }},
                {"xtc(probability=1,threshold=0.01)", [](qs::candidates& c) { qs::xtc(1.0f, 0.01f).apply(c); }},
                {"xtc(probability=1,threshold=0.0005)", [](qs::candidates& c) { qs::xtc(1.0f, 0.0005f).apply(c); }},
                {"top_n_sigma(0.5)", [](qs::candidates& c) { qs::top_n_sigma(0.5f).apply(c); }},
                {"top_n_sigma(1)", [](qs::candidates& c) { qs::top_n_sigma(1.0f).apply(c); }},
                {"top_n_sigma(3)", [](qs::candidates& c) { qs::top_n_sigma(3.0f).apply(c); }},
            };
            for (const auto& entry : samplers) {
                const std::string& text = entry.first;
                const auto& apply = entry.second;
                CAPTURE(kind);
                CAPTURE(n);
                CAPTURE(text);
                qs::candidates left;
                left.reset(logits);
                apply(left);
                REQUIRE(left.whole_vocabulary());
                const std::vector<float> copy(left.vocabulary_logits(), left.vocabulary_logits() + n);
                CHECK(same_bits(left.vocabulary_max(), sd::max_logit<qk::arch::generic>(copy.data(), n)));
                auto drawn = qs::chain::parse(text + ";dist(seed=" + std::to_string(seed) + ")");
                auto plain = qs::chain::parse("dist(seed=" + std::to_string(seed) + ")");
                for (int step = 0; step < 4; ++step) {
                    CHECK(drawn.sample(logits) == plain.sample(copy));
                }
            }
        }
    }
}
