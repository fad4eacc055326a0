// The sampling passes of one architecture tag (QK_TEST_TAG, compiled with its flags) against the
// generic reference on the same inputs, bit for bit: exp, the maximum, the exp sums in their
// fixed order, softmax, the categorical draw, top-k selection and filtering. Chains only combine
// these with scalar code, so equal bits here mean the same token on every tag.
#include <doctest/doctest.h>

#include <qkern.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "../inputs.hpp"

namespace {

using tag = qk::arch::QK_TEST_TAG;
using reference = qk::arch::generic;
namespace sd = qk::sampling::detail;

constexpr float inf = std::numeric_limits<float>::infinity();

// Logits as a model gives them (normal, a few outliers), with ties, -inf, NaN and weightless finite
// logits mixed in when asked.
std::vector<float> logits(std::size_t n, std::uint32_t seed, bool special)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::uniform_int_distribution<int> pick(0, 19);
    std::vector<float> x(n);
    for (auto& v : x) {
        v = normal(rng);
        if (special) {
            const int r = pick(rng);
            // -200: finite, but too far below the largest to weigh anything.
            v = r == 0 ? -inf : r == 1 ? std::numeric_limits<float>::quiet_NaN() : r == 2 ? 1.5f : r == 3 ? 12.0f : r == 4 ? -200.0f : v;
        }
    }
    return x;
}

bool same_bits(float a, float b)
{
    return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

const std::size_t sizes[] = {1, 2, 3, 7, 15, 16, 17, 31, 33, 64, 100, 1023, 1024, 1025, 2049, 5000, 40000};

} // namespace

// A template, so that the generic tag (which has no vectors) never instantiates the body.
template <class Tag>
void check_vector_exp()
{
    {
        using V = xsimd::batch<float, sd::simd_of<Tag>>;
        std::vector<float> inputs = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, -87.0f, -87.33654f, -87.3366f, -88.0f, -100.0f,
                                     -inf, inf, 88.0f, 90.0f, std::numeric_limits<float>::quiet_NaN(), 1e-30f, -1e-30f};
        const std::vector<float> wide = qk_inputs::uniform(100000, -90.0f, 90.0f, 7);
        inputs.insert(inputs.end(), wide.begin(), wide.end());
        // Every float in [-1, 0) at a stride, where softmax spends most of its time.
        for (std::uint32_t bits = std::bit_cast<std::uint32_t>(-1.0f); bits > 0x80000000u; bits -= 4099) {
            inputs.push_back(std::bit_cast<float>(bits));
        }
        while (inputs.size() % V::size != 0) {
            inputs.push_back(0.0f);
        }
        std::size_t mismatches = 0;
        for (std::size_t i = 0; i < inputs.size(); i += V::size) {
            alignas(64) float out[V::size];
            sd::exp(V::load_unaligned(inputs.data() + i)).store_aligned(out);
            for (std::size_t l = 0; l < V::size; ++l) {
                if (!same_bits(out[l], sd::exp(inputs[i + l]))) {
                    ++mismatches;
                    CAPTURE(inputs[i + l]);
                    CHECK(out[l] == sd::exp(inputs[i + l]));
                }
            }
        }
        CHECK(mismatches == 0);
        // exp_difference (compute_probabilities' exponential, with the subtraction's error put
        // back) against several maxima, the difference's error terms nonzero at most of them.
        std::size_t difference_mismatches = 0;
        for (const float max : {0.0f, 3.71f, 17.25f, -2.03f, 61.9f}) {
            for (std::size_t i = 0; i < inputs.size(); i += V::size) {
                alignas(64) float out[V::size];
                sd::exp_difference(V::load_unaligned(inputs.data() + i), V(max)).store_aligned(out);
                for (std::size_t l = 0; l < V::size; ++l) {
                    if (!same_bits(out[l], sd::exp_difference(inputs[i + l], max))) {
                        ++difference_mismatches;
                        CAPTURE(inputs[i + l]);
                        CAPTURE(max);
                        CHECK(out[l] == sd::exp_difference(inputs[i + l], max));
                    }
                }
            }
        }
        CHECK(difference_mismatches == 0);
    }
}

TEST_CASE("sampling exp: vectors equal the scalar reference bit for bit")
{
    if constexpr (!std::is_same_v<tag, reference>) {
        check_vector_exp<tag>();
    }
}

TEST_CASE("sampling passes: the tag's results equal generic's bit for bit")
{
    std::uint32_t seed = 1;
    for (const bool special : {false, true}) {
        for (const std::size_t n : sizes) {
            for (const std::size_t offset : {0, 1, 3}) {
                const auto storage = logits(n + offset, seed++, special);
                const float* x = storage.data() + offset;
                CAPTURE(n);
                CAPTURE(offset);
                CAPTURE(special);

                const float max = sd::max_logit<tag>(x, n);
                REQUIRE(same_bits(max, sd::max_logit<reference>(x, n)));
                CHECK(sd::find_value<tag>(x, n, max) == sd::find_value<reference>(x, n, max));
                CHECK(sd::find_finite<tag>(x, n) == sd::find_finite<reference>(x, n));

                std::vector<float> sums(sd::chunk_count(n));
                std::vector<float> sums_ref(sums.size());
                std::vector<float> e(n);
                std::vector<float> e_ref(n);
                const double total = sd::exp_sums<tag>(x, n, max, sums.data(), e.data());
                const double total_ref = sd::exp_sums<reference>(x, n, max, sums_ref.data(), e_ref.data());
                CHECK(total == total_ref);
                CHECK(std::memcmp(sums.data(), sums_ref.data(), sums.size() * sizeof(float)) == 0);
                CHECK(std::memcmp(e.data(), e_ref.data(), n * sizeof(float)) == 0);

                // compute_probabilities' pass: corrected exponentials in place and their double total.
                std::vector<float> corrected(x, x + n);
                std::vector<float> corrected_ref(x, x + n);
                CHECK(sd::exp_difference_total<tag>(corrected.data(), n, max) ==
                      sd::exp_difference_total<reference>(corrected_ref.data(), n, max));
                CHECK(std::memcmp(corrected.data(), corrected_ref.data(), n * sizeof(float)) == 0);

                // typical's passes: the moments in their fixed order, the keys and their range.
                double z = 0;
                double s = 0;
                double z_ref = 0;
                double s_ref = 0;
                sd::typical_moments<tag>(x, e.data(), n, max, z, s);
                sd::typical_moments<reference>(x, e.data(), n, max, z_ref, s_ref);
                CHECK(z == z_ref);
                CHECK(s == s_ref);
                // Both in one pass, as typical runs them over a whole vocabulary.
                {
                    std::vector<float> e_fused(n);
                    std::vector<float> e_plain(n);
                    float lowest_fused = 0.0f;
                    float lowest_plain = 0.0f;
                    double z_fused = 0;
                    double s_fused = 0;
                    CHECK(sd::exp_mass_moments<tag>(x, n, max, e_fused.data(), lowest_fused, z_fused, s_fused) ==
                          sd::exp_mass<reference>(x, n, max, e_plain.data(), lowest_plain));
                    CHECK(std::memcmp(e_fused.data(), e_plain.data(), n * sizeof(float)) == 0);
                    CHECK(same_bits(lowest_fused, lowest_plain));
                    sd::typical_moments<reference>(x, e_plain.data(), n, max, z_ref, s_ref);
                    CHECK(z_fused == z_ref);
                    CHECK(s_fused == s_ref);
                    // The same pass without the masses (typical over 4096 logits and more).
                    std::fill(e_fused.begin(), e_fused.end(), -1.0f);
                    lowest_fused = 0.0f;
                    sd::exp_moments<tag>(x, n, max, e_fused.data(), lowest_fused, z_fused, s_fused);
                    CHECK(std::memcmp(e_fused.data(), e_plain.data(), n * sizeof(float)) == 0);
                    CHECK(same_bits(lowest_fused, lowest_plain));
                    CHECK(z_fused == z_ref);
                    CHECK(s_fused == s_ref);
                }
                const auto center = static_cast<float>(static_cast<double>(max) + s_ref / z_ref);
                std::vector<float> keys(n);
                std::vector<float> keys_ref(n);
                float low = 0;
                float high = 0;
                float low_ref = 0;
                float high_ref = 0;
                sd::distance_keys<tag>(x, e.data(), n, center, keys.data(), low, high);
                sd::distance_keys<reference>(x, e.data(), n, center, keys_ref.data(), low_ref, high_ref);
                CHECK(std::memcmp(keys.data(), keys_ref.data(), n * sizeof(float)) == 0);
                CHECK(same_bits(low, low_ref));
                CHECK(same_bits(high, high_ref));
                // The histogram by key: generic's buckets and masses.
                sd::rank_histogram by_key;
                sd::rank_histogram by_key_ref;
                const sd::mass_t by_key_total = sd::distance_histogram<tag>(x, e.data(), n, center, 64.0f, by_key);
                const sd::mass_t by_key_total_ref = sd::distance_histogram<reference>(x, e.data(), n, center, 64.0f, by_key_ref);
                CHECK(by_key.mass == by_key_ref.mass);
                CHECK(by_key.bucket_of == by_key_ref.bucket_of);
                // Its total is the weights' mass, which typical then no longer adds in the weights' pass.
                sd::mass_t weights_total = 0;
                for (std::size_t i = 0; i < n; ++i) {
                    weights_total += sd::mass_of(e[i]);
                }
                CHECK(by_key_total == weights_total);
                CHECK(by_key_total_ref == weights_total);

                for (int k = 0; k < 64; ++k) {
                    const double u = (k + 0.5) / 64.0;
                    CHECK(sd::draw<tag>(x, n, max, sums.data(), total, u) == sd::draw<reference>(x, n, max, sums_ref.data(), total_ref, u));
                }

                std::vector<float> p(n);
                std::vector<float> p_ref(n);
                std::vector<float> chunks;
                REQUIRE(qk::sampling::softmax<tag>({x, n}, p, chunks) == qk::sampling::softmax<reference>({x, n}, p_ref, chunks));
                CHECK(std::memcmp(p.data(), p_ref.data(), n * sizeof(float)) == 0);

                for (const std::size_t k : {std::size_t{1}, std::size_t{5}, std::size_t{40}, n}) {
                    std::vector<qk::sampling::token_data> top;
                    std::vector<qk::sampling::token_data> top_ref;
                    const auto skip = [](std::size_t i) { return i % 7 == 3; };
                    sd::top_k_scan<tag>(x, n, k, top, skip);
                    sd::top_k_scan<reference>(x, n, k, top_ref, skip);
                    CHECK(top == top_ref);
                }
                // xtc's bounds on the exact total mass hold it on this width too.
                if (max > -inf && max < inf) {
                    sd::mass_t exact = 0;
                    for (std::size_t i = 0; i < n; ++i) {
                        exact += sd::mass_of(sd::exp(x[i] - max));
                    }
                    sd::mass_t low = 0;
                    sd::mass_t high = 0;
                    sd::exp_mass_bounds<tag>(x, n, max, low, high);
                    CHECK(low <= exact);
                    CHECK(exact <= high);
                }
                for (const float threshold : {-inf, 0.0f, 1.5f, max}) {
                    // Appended after what the list holds, in id order: a plain loop's list.
                    const qk::sampling::token_data before{-7, 2.5f, 0.25f};
                    std::vector<qk::sampling::token_data> expected{before};
                    for (std::size_t i = 0; i < n; ++i) {
                        if (x[i] >= threshold) {
                            expected.push_back({static_cast<std::int32_t>(i), x[i], 0.0f});
                        }
                    }
                    std::vector<qk::sampling::token_data> kept{before};
                    std::vector<qk::sampling::token_data> kept_ref{before};
                    sd::filter_at_least<tag>(x, n, threshold, kept);
                    sd::filter_at_least<reference>(x, n, threshold, kept_ref);
                    CHECK(kept == expected);
                    CHECK(kept_ref == expected);
                    CHECK(sd::count_at_least<tag>(x, n, threshold) == expected.size() - 1);
                }
            }
        }
    }
}

// The exact-mass and rank-selection passes (exact_mass.hpp, rank_select.hpp): integer sums and
// positions, so the tag must give generic's values exactly, whatever order its lanes add in.
TEST_CASE("rank selection passes: the tag's masses and positions equal generic's")
{
    std::uint32_t seed = 1000;
    for (const bool special : {false, true}) {
        for (const std::size_t n : sizes) {
            for (const std::size_t offset : {0, 1, 3}) {
                auto storage = logits(n + offset, seed++, special);
                if (n > 100 && !special) {
                    // Runs of equal logits, so that ties meet the bounds.
                    for (std::size_t i = offset; i < storage.size(); i += 5) {
                        storage[i] = std::round(storage[i]);
                    }
                }
                const float* x = storage.data() + offset;
                CAPTURE(n);
                CAPTURE(offset);
                CAPTURE(special);
                const float max = sd::max_logit<reference>(x, n);
                if (!(max > -inf)) {
                    continue;
                }
                std::vector<float> e(n);
                std::vector<float> e_ref(n);
                float lowest = 0.0f;
                float lowest_ref = 0.0f;
                const sd::mass_t total = sd::exp_mass<tag>(x, n, max, e.data(), lowest);
                const sd::mass_t total_ref = sd::exp_mass<reference>(x, n, max, e_ref.data(), lowest_ref);
                CHECK(total == total_ref);
                CHECK(same_bits(lowest, lowest_ref));
                CHECK(std::memcmp(e.data(), e_ref.data(), n * sizeof(float)) == 0);

                // The weights' pass with the histogram by logit: the same weights, total and
                // lowest, and the same bucket masses, as generic's.
                sd::rank_histogram histogram;
                sd::rank_histogram histogram_ref;
                // A power of two per unit that spreads the logits over the buckets, as top_p picks it.
                float finite_lowest = 0.0f;
                CHECK(same_bits(sd::max_logit<tag>(x, n, finite_lowest), max));
                float finite_lowest_ref = 0.0f;
                (void)sd::max_logit<reference>(x, n, finite_lowest_ref);
                CHECK(same_bits(finite_lowest, finite_lowest_ref));
                const float per_unit = sd::rank_histogram::unit_for(max - std::max(finite_lowest, max - 34.0f));
                std::vector<float> e_histogram(n);
                float lowest_histogram = 0.0f;
                CHECK(sd::exp_mass_histogram<tag>(x, n, max, per_unit, e_histogram.data(), lowest_histogram, histogram) == total_ref);
                CHECK(sd::exp_mass_histogram<reference>(x, n, max, per_unit, e_ref.data(), lowest_ref, histogram_ref) == total_ref);
                CHECK(same_bits(lowest_histogram, lowest_ref));
                CHECK(std::memcmp(e_histogram.data(), e_ref.data(), n * sizeof(float)) == 0);
                CHECK(histogram.mass == histogram_ref.mass);
                // Each token's stored bucket: its position's truncation, as a plain loop finds it
                // (the last bucket for NaN).
                REQUIRE(histogram.bucket_of.size() >= n);
                const auto bucket_by_loop = [&](std::size_t i) {
                    const float d = (max - x[i]) * per_unit;
                    return static_cast<std::size_t>(d < 1023.0f ? d : 1023.0f);
                };
                std::size_t wrong_buckets = 0;
                for (std::size_t i = 0; i < n; ++i) {
                    wrong_buckets += histogram.bucket_of[i] == bucket_by_loop(i) && histogram_ref.bucket_of[i] == bucket_by_loop(i) ? 0 : 1;
                }
                CHECK(wrong_buckets == 0);
                // The same pass counting each bucket's tokens (top_k's prefix), against those buckets.
                std::vector<std::uint32_t> counts;
                CHECK(sd::exp_mass_histogram<tag>(x, n, max, per_unit, e_histogram.data(), lowest_histogram, histogram, &counts) == total_ref);
                CHECK(histogram.mass == histogram_ref.mass);
                std::vector<std::uint32_t> counts_by_loop(sd::rank_histogram::buckets, 0u);
                for (std::size_t i = 0; i < n; ++i) {
                    ++counts_by_loop[bucket_by_loop(i)];
                }
                CHECK(counts == counts_by_loop);
                // The pass with the total only (top_k's prefix), on a copy of that histogram: the
                // same weights, lowest, total and buckets, and every bucket's mass 0 again.
                sd::rank_histogram total_only = histogram;
                std::fill(e_histogram.begin(), e_histogram.end(), std::numeric_limits<float>::quiet_NaN());
                std::fill(total_only.bucket_of.begin(), total_only.bucket_of.end(), std::uint16_t{0xffff});
                CHECK(sd::exp_mass_histogram<tag>(x, n, max, per_unit, e_histogram.data(), lowest_histogram, total_only, nullptr, false) ==
                      total_ref);
                CHECK(same_bits(lowest_histogram, lowest_ref));
                CHECK(std::memcmp(e_histogram.data(), e_ref.data(), n * sizeof(float)) == 0);
                CHECK(std::all_of(total_only.mass.begin(), total_only.mass.end(), [](sd::mass_t m) { return m == 0; }));
                wrong_buckets = 0;
                for (std::size_t i = 0; i < n; ++i) {
                    wrong_buckets += total_only.bucket_of[i] == bucket_by_loop(i) ? 0 : 1;
                }
                CHECK(wrong_buckets == 0);
                // add_masses_through on that histogram (top_k's prefix): the masses of the buckets
                // through b as the histogram with masses holds them, the others 0.
                for (const std::size_t b : {std::size_t{0}, std::size_t{40}, std::size_t{300}, std::size_t{1023}}) {
                    CAPTURE(b);
                    sd::rank_histogram through = total_only;
                    sd::add_masses_through<tag>(through, e_ref.data(), n, b);
                    std::size_t wrong_masses = 0;
                    for (std::size_t j = 0; j < sd::rank_histogram::buckets; ++j) {
                        wrong_masses += through.mass[j] == (j <= b ? histogram.mass[j] : sd::mass_t{0}) ? 0 : 1;
                    }
                    CHECK(wrong_masses == 0);
                }

                std::array<float, sd::rank_splits> thresholds;
                for (std::size_t j = 0; j < sd::rank_splits; ++j) {
                    thresholds[j] = max - 1.5f * static_cast<float>(j);
                }
                std::array<sd::mass_t, sd::rank_splits> masses;
                std::array<sd::mass_t, sd::rank_splits> masses_ref;
                sd::masses_above<tag, false>(x, e.data(), n, thresholds, masses);
                sd::masses_above<reference, false>(x, e.data(), n, thresholds, masses_ref);
                CHECK(masses == masses_ref);
                sd::masses_above<tag, true>(x, nullptr, n, thresholds, masses);
                sd::masses_above<reference, true>(x, nullptr, n, thresholds, masses_ref);
                CHECK(masses == masses_ref);

                const sd::rank_bound bounds[] = {sd::everything, {x[n / 2], static_cast<std::int32_t>(n / 3)}, {1.5f, 7}};
                for (const auto& bound : bounds) {
                    CHECK(sd::count_ranked<tag>(x, n, bound) == sd::count_ranked<reference>(x, n, bound));
                    sd::token_arrays got;
                    sd::token_arrays want;
                    got.clear(n);
                    want.clear(n);
                    sd::gather_range<tag>(x, e.data(), nullptr, n, max - 4.0f, max - 0.5f, bound, got);
                    sd::gather_range<reference>(x, e.data(), nullptr, n, max - 4.0f, max - 0.5f, bound, want);
                    REQUIRE(got.count == want.count);
                    CHECK(std::equal(got.id.begin(), got.id.begin() + static_cast<std::ptrdiff_t>(got.count), want.id.begin()));
                    CHECK(std::memcmp(got.weight.data(), want.weight.data(), got.count * sizeof(float)) == 0);
                    CHECK(same_bits(got.lowest, want.lowest));
                    CHECK(same_bits(got.highest, want.highest));
                    for (const std::size_t b : {std::size_t{0}, std::size_t{17}, std::size_t{40}, sd::rank_histogram::buckets - 1}) {
                        sd::gather_bucket<tag>(x, e.data(), n, histogram, b, max - 34.0f, bound, got);
                        sd::gather_bucket<reference>(x, e.data(), n, histogram, b, max - 34.0f, bound, want);
                        CAPTURE(b);
                        REQUIRE(got.count == want.count);
                        CHECK(std::equal(got.id.begin(), got.id.begin() + static_cast<std::ptrdiff_t>(got.count), want.id.begin()));
                        CHECK(std::memcmp(got.logit.data(), want.logit.data(), got.count * sizeof(float)) == 0);
                        CHECK(std::memcmp(got.weight.data(), want.weight.data(), got.count * sizeof(float)) == 0);
                        // The ids a plain loop over the positions gathers.
                        std::vector<std::int32_t> ids;
                        for (std::size_t i = 0; i < n; ++i) {
                            const auto id = static_cast<std::int32_t>(i);
                            if (bucket_by_loop(i) == b && x[i] >= max - 34.0f && !(x[i] == bound.logit && id > bound.id)) {
                                ids.push_back(id);
                            }
                        }
                        REQUIRE(got.count == ids.size());
                        CHECK(std::equal(ids.begin(), ids.end(), got.id.begin()));
                    }
                }

                const double sum = sd::finite_sum<tag, false>(x, n, 0.0f);
                CHECK(sum == sd::finite_sum<reference, false>(x, n, 0.0f));
                const auto mean = static_cast<float>(sum / static_cast<double>(n));
                CHECK(sd::finite_sum<tag, true>(x, n, mean) == sd::finite_sum<reference, true>(x, n, mean));
                // top_n_sigma's one pass: the maximum, count and sum of the passes above it, and
                // finite_range's verdict and lowest end.
                {
                    std::size_t count = 0;
                    double statistics_sum = 0;
                    float lowest_end = 0.0f;
                    bool all_finite = false;
                    const float statistics_max = sd::finite_statistics<tag>(x, n, count, statistics_sum, lowest_end, all_finite);
                    CHECK(same_bits(statistics_max, sd::max_logit<reference>(x, n)));
                    CHECK(count == sd::count_ranked<reference>(x, n, {-inf, -1}));
                    CHECK(statistics_sum == sum);
                    float range_low = 0.0f;
                    float range_high = 0.0f;
                    const bool finite = sd::finite_range<reference>(x, n, range_low, range_high);
                    CHECK(all_finite == finite);
                    if (finite) {
                        CHECK(same_bits(lowest_end, range_low));
                    }
                }
                {
                    std::vector<float> floored(n);
                    std::vector<float> floored_ref(n);
                    sd::floor_to_minus_infinity<tag>(x, floored.data(), n, mean);
                    sd::floor_to_minus_infinity<reference>(x, floored_ref.data(), n, mean);
                    CHECK(std::memcmp(floored.data(), floored_ref.data(), n * sizeof(float)) == 0);
                    std::size_t wrong = 0;
                    for (std::size_t i = 0; i < n; ++i) {
                        wrong += same_bits(floored_ref[i], x[i] >= mean ? x[i] : -inf) ? 0 : 1;
                    }
                    CHECK(wrong == 0);
                }
                for (const float threshold : {-inf, max - 3.0f, max}) {
                    std::vector<std::uint64_t> chunk(sd::chunk_count(n));
                    std::vector<std::uint64_t> chunk_ref(chunk.size());
                    CHECK(sd::masked_chunk_masses<tag>(x, n, max, threshold, chunk.data()) ==
                          sd::masked_chunk_masses<reference>(x, n, max, threshold, chunk_ref.data()));
                    CHECK(chunk == chunk_ref);
                }
                // mirostat_v2's pass over its weights: the tag's chunk masses, total, least and
                // most_below equal generic's and the definition's, for the weights of these logits
                // and for the same weights shuffled (the tokens of weight w or more then no floor
                // of logits, as exp's steps could make them).
                for (const bool shuffled : {false, true}) {
                    std::vector<float> weights = e_ref;
                    if (shuffled) {
                        std::shuffle(weights.begin(), weights.end(), std::mt19937(seed));
                    }
                    for (const float w : {0.0f, 1e-3f, 0.25f, 1.0f, 2.0f}) {
                        CAPTURE(shuffled);
                        CAPTURE(w);
                        std::vector<std::uint64_t> chunk(sd::chunk_count(n));
                        std::vector<std::uint64_t> chunk_ref(chunk.size());
                        float least = 0.0f;
                        float least_ref = 0.0f;
                        float most_below = 0.0f;
                        float most_below_ref = 0.0f;
                        const sd::mass_t passing = sd::passing_chunk_masses<tag>(x, weights.data(), n, w, chunk.data(), least, most_below);
                        const sd::mass_t passing_ref =
                            sd::passing_chunk_masses<reference>(x, weights.data(), n, w, chunk_ref.data(), least_ref, most_below_ref);
                        CHECK(passing == passing_ref);
                        CHECK(chunk == chunk_ref);
                        CHECK(same_bits(least, least_ref));
                        CHECK(same_bits(most_below, most_below_ref));
                        std::vector<std::uint64_t> defined(chunk.size(), 0);
                        sd::mass_t defined_total = 0;
                        float defined_least = inf;
                        float defined_most_below = -inf;
                        for (std::size_t i = 0; i < n; ++i) {
                            if (weights[i] >= w) {
                                defined[i / sd::chunk_size] += sd::mass_of(weights[i]);
                                defined_total += sd::mass_of(weights[i]);
                                defined_least = x[i] < defined_least ? x[i] : defined_least;
                            } else if (x[i] > defined_most_below) {
                                defined_most_below = x[i];
                            }
                        }
                        CHECK(chunk_ref == defined);
                        CHECK(passing_ref == defined_total);
                        CHECK(same_bits(least_ref, defined_least));
                        CHECK(same_bits(most_below_ref, defined_most_below));
                    }
                }

                const float from = std::max(lowest_ref, max - 34.0f);
                sd::rank_scratch scratch;
                sd::rank_scratch scratch_ref;
                for (int k = 1; k <= 15; ++k) {
                    // Targets over the whole mass, the first and last units included.
                    const sd::mass_t target = k == 1 ? 1 : k == 15 ? total : total / 16 * static_cast<unsigned>(k);
                    const auto got = sd::find_by_rank<tag, false>(x, e.data(), n, from, max, target, sd::everything, scratch);
                    const auto want = sd::find_by_rank<reference, false>(x, e.data(), n, from, max, target, sd::everything, scratch_ref);
                    CHECK(got.id == want.id);
                    CHECK(got.through == want.through);
                    const auto through_histogram =
                        sd::find_by_rank<tag, false>(x, e.data(), n, from, max, target, sd::everything, scratch, &histogram);
                    CHECK(through_histogram.id == want.id);
                    CHECK(through_histogram.through == want.through);
                }
                if (!special) {
                    // find_by_count (top_k's count by rank) finds the k-th token that find_by_rank
                    // counting finds, through buckets the tag places as generic does.
                    sd::rank_histogram counted;
                    sd::rank_histogram counted_ref;
                    sd::rank_positions<tag>(x, n, max, 64.0f, counted);
                    sd::rank_positions<reference>(x, n, max, 64.0f, counted_ref);
                    CHECK(std::memcmp(counted.bucket_of.data(), counted_ref.bucket_of.data(), n * sizeof(std::uint16_t)) == 0);
                    for (const std::size_t k : {std::size_t{1}, std::size_t{2}, n / 3 + 1, n / 2 + 1, n - 1, n}) {
                        if (k == 0 || k > n) {
                            continue;
                        }
                        CAPTURE(k);
                        const auto got = sd::find_by_rank<tag, true>(x, nullptr, n, lowest_ref, max, k, sd::everything, scratch);
                        const auto want = sd::find_by_rank<reference, true>(x, nullptr, n, lowest_ref, max, k, sd::everything, scratch_ref);
                        CHECK(got.id == want.id);
                        CHECK(got.through == want.through);
                        const auto by_count = sd::find_by_count<tag>(x, n, lowest_ref, max, k, counted, scratch);
                        CHECK(by_count.id == want.id);
                        CHECK(same_bits(by_count.logit, want.logit));
                        CHECK(by_count.through == want.through);
                    }
                }
            }
        }
    }
}

// The passes that build a histogram over more tokens than histogram_builder adds between two
// folds (2^17), on spread logits: the tag's weights' and keys' passes (which add each vector's
// masses a few vectors after computing them) against generic's, bucket by bucket.
TEST_CASE("histogram passes: generic's buckets across folds, by logit and by key")
{
    const std::size_t n = (std::size_t{1} << 17) + 40007;
    const std::vector<float> x = logits(n, 77, false);
    const float max = sd::max_logit<reference>(x.data(), n);
    float least = 0.0f;
    (void)sd::max_logit<reference>(x.data(), n, least);
    const float per_unit = sd::rank_histogram::unit_for(max - std::max(least, max - 34.0f));
    std::vector<float> e(n);
    std::vector<float> e_ref(n);
    float lowest = 0.0f;
    float lowest_ref = 0.0f;
    sd::rank_histogram histogram;
    sd::rank_histogram histogram_ref;
    const sd::mass_t total = sd::exp_mass_histogram<tag>(x.data(), n, max, per_unit, e.data(), lowest, histogram);
    CHECK(total == sd::exp_mass_histogram<reference>(x.data(), n, max, per_unit, e_ref.data(), lowest_ref, histogram_ref));
    CHECK(std::memcmp(e.data(), e_ref.data(), n * sizeof(float)) == 0);
    CHECK(same_bits(lowest, lowest_ref));
    CHECK(histogram.mass == histogram_ref.mass);
    CHECK(std::equal(histogram_ref.bucket_of.begin(), histogram_ref.bucket_of.begin() + static_cast<std::ptrdiff_t>(n),
                     histogram.bucket_of.begin()));
    // More than a few buckets hold tokens, so a mass added to the wrong one would show.
    CHECK(std::count_if(histogram.mass.begin(), histogram.mass.end(), [](sd::mass_t m) { return m > 0; }) > 100);
    double z = 0;
    double s = 0;
    sd::typical_moments<reference>(x.data(), e_ref.data(), n, max, z, s);
    const auto center = static_cast<float>(static_cast<double>(max) + s / z);
    CHECK(sd::distance_histogram<tag>(x.data(), e.data(), n, center, 64.0f, histogram) == total);
    CHECK(sd::distance_histogram<reference>(x.data(), e.data(), n, center, 64.0f, histogram_ref) == total);
    CHECK(histogram.mass == histogram_ref.mass);
    CHECK(std::equal(histogram_ref.bucket_of.begin(), histogram_ref.bucket_of.begin() + static_cast<std::ptrdiff_t>(n),
                     histogram.bucket_of.begin()));
    // The searches by key through it (typical's cut and the draw after it), whole and within a bound.
    sd::rank_scratch scratch;
    sd::rank_scratch scratch_ref;
    for (const sd::mass_t target : {sd::mass_t{1}, total / 7, total / 2, total - total / 50, total}) {
        const auto got = sd::find_by_distance<tag>(x.data(), e.data(), n, center, target, sd::everything, scratch, histogram);
        const auto want = sd::find_by_distance<reference>(x.data(), e.data(), n, center, target, sd::everything, scratch_ref, histogram_ref);
        CHECK(got.id == want.id);
        CHECK(same_bits(got.logit, want.logit));
        CHECK(got.through == want.through);
        const sd::rank_bound bound{want.logit, want.id};
        const auto bounded = sd::find_by_distance<tag>(x.data(), e.data(), n, center, want.through, bound, scratch, histogram);
        CHECK(bounded.id == want.id);
        CHECK(bounded.through == want.through);
    }
    CHECK(std::count_if(histogram.mass.begin(), histogram.mass.end(), [](sd::mass_t m) { return m > 0; }) > 100);
}

TEST_CASE("exact masses: sums of many full weights stay exact on the tag")
{
    // Every weight is 1 (2^48 units): 3 * 2^17 + 5 of them pass any lane or copy of the passes
    // that add them in 64 bits, each of which must be added up before it overflows.
    const std::size_t n = 3 * (std::size_t{1} << 17) + 5;
    const std::vector<float> equal(n, 0.25f);
    const sd::mass_t all = sd::mass_t{n} << 48;
    std::vector<float> e(n);
    float lowest = 0.0f;
    CHECK(sd::exp_mass<tag>(equal.data(), n, 0.25f, e.data(), lowest) == all);
    CHECK(lowest == 0.25f);
    CHECK(sd::exp_mass<tag>(equal.data(), n, 0.25f, nullptr, lowest) == all);
    sd::rank_histogram histogram;
    CHECK(sd::exp_mass_histogram<tag>(equal.data(), n, 0.25f, 32.0f, e.data(), lowest, histogram) == all);
    CHECK(histogram.mass[0] == all);
    CHECK(sd::distance_histogram<tag>(equal.data(), e.data(), n, 0.25f, 32.0f, histogram) == all);
    CHECK(histogram.mass[0] == all);
}
