// The numbers under every sampler: the deterministic exp, log and pow against the C library in
// double (their accuracy), the uniform mapping and generator streams, and the softmax pass
// against a softmax computed in double.
#include <doctest/doctest.h>

#include <qkern.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "inputs.hpp"
#include "sampling_reference.hpp"

namespace {

namespace sd = qk::sampling::detail;
using qk_test::sampling::inf;

// |a - b| in units of the float spacing at b (b a double reference).
double ulps(float a, double b)
{
    const double spacing = std::ldexp(1.0, std::ilogb(static_cast<float>(b)) - 23);
    return std::fabs(a - b) / spacing;
}

} // namespace

TEST_CASE("deterministic exp is within 2 ulp of exp on its range and 0 below it")
{
    double worst = 0;
    for (std::uint32_t bits = 0; bits < 0xffffffffu - 977; bits += 977) {
        const float x = std::bit_cast<float>(bits);
        if (!(x >= sd::exp_lowest && x <= sd::exp_highest)) {
            continue;
        }
        const double reference = std::exp(static_cast<double>(x));
        if (reference < std::numeric_limits<float>::min()) {
            continue; // subnormal results: the spacing argument does not apply
        }
        worst = std::max(worst, ulps(sd::exp(x), reference));
    }
    INFO("worst error: " << worst << " ulp");
    CHECK(worst <= 2.0);
    CHECK(sd::exp(0.0f) == 1.0f);
    CHECK(sd::exp(-inf) == 0.0f);
    CHECK(sd::exp(std::numeric_limits<float>::quiet_NaN()) == 0.0f);
    CHECK(sd::exp(-88.0f) == 0.0f);
    CHECK(sd::exp(-1000.0f) == 0.0f);
    CHECK(sd::exp(inf) == sd::exp(sd::exp_highest));
    CHECK(std::isfinite(sd::exp(sd::exp_highest)));
}

TEST_CASE("deterministic log is within 2 ulp of log, pow within a few ulp of pow")
{
    double worst = 0;
    for (std::uint32_t bits = 1; bits < 0x7f800000u; bits += 613) {
        const float x = std::bit_cast<float>(bits);
        const double reference = std::log(static_cast<double>(x));
        if (std::fabs(reference) < 1e-30) {
            continue;
        }
        worst = std::max(worst, ulps(sd::log(x), reference));
    }
    INFO("worst log error: " << worst << " ulp");
    CHECK(worst <= 2.0);
    CHECK(sd::log(1.0f) == 0.0f);
    CHECK(sd::log(0.0f) == -inf);
    CHECK(std::isnan(sd::log(-1.0f)));
    CHECK(sd::log(inf) == inf);

    // exp(y log x) carries log's error times |y log x| into the result: allow 2 + 2|y log x| ulp.
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> base(0.01f, 10.0f);
    std::uniform_real_distribution<float> exponent(-8.0f, 8.0f);
    for (int i = 0; i < 20000; ++i) {
        const float x = base(rng);
        const float y = exponent(rng);
        const double reference = std::pow(static_cast<double>(x), static_cast<double>(y));
        const double magnitude = std::fabs(y * std::log(static_cast<double>(x)));
        if (magnitude > 80) {
            continue;
        }
        CAPTURE(x);
        CAPTURE(y);
        CHECK(ulps(sd::pow(x, y), reference) <= 2.0 + 2.0 * magnitude + 1.0);
    }
    CHECK(sd::pow(0.0f, 2.0f) == 0.0f);
    CHECK(sd::pow(5.0f, 0.0f) == 1.0f);
    CHECK(sd::pow(2.0f, 10.0f) == doctest::Approx(1024.0f).epsilon(1e-6));
}

TEST_CASE("uniform numbers: the top 53 bits of mt19937_64, and streams independent of each other")
{
    CHECK(qk::sampling::to_unit_interval(0) == 0.0);
    CHECK(qk::sampling::to_unit_interval(~0ull) == 1.0 - 0x1.0p-53);
    CHECK(qk::sampling::to_unit_interval(1ull << 63) == 0.5);

    qk::sampling::random_source a(42, qk::sampling::stream::dist);
    std::mt19937_64 engine(qk::sampling::mix_seed(42, qk::sampling::stream::dist));
    for (int i = 0; i < 1000; ++i) {
        const double u = a.uniform();
        CHECK(u == static_cast<double>(engine() >> 11) * 0x1.0p-53);
        CHECK(u >= 0.0);
        CHECK(u < 1.0);
    }
    // The C++ standard fixes mt19937_64's 10000th output for the default seed; it pins the engine.
    std::mt19937_64 standard;
    standard.discard(9999);
    CHECK(standard() == 9981545732273789042ull);

    qk::sampling::random_source b(42, qk::sampling::stream::xtc);
    qk::sampling::random_source c(42, qk::sampling::stream::dist);
    CHECK(b.uniform() != c.uniform());
    c.reseed(42);
    qk::sampling::random_source d(42, qk::sampling::stream::dist);
    CHECK(c == d);
}

TEST_CASE("softmax pass: against softmax in double, NaN as -inf, errors")
{
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 4.0f);
    for (const std::size_t n : {1u, 5u, 1000u, 1024u, 1025u, 30000u}) {
        std::vector<float> x = qk_inputs::draws(n, normal, rng); // rng and normal carry over from n to n
        if (n > 4) {
            x[1] = -inf;
            x[3] = std::numeric_limits<float>::quiet_NaN();
        }
        std::vector<float> p(n);
        std::vector<float> chunks;
        REQUIRE(qk::sampling::softmax(x, p, chunks));
        double max = -INFINITY;
        for (const float v : x) {
            max = v > max ? v : max;
        }
        double sum = 0;
        for (const float v : x) {
            sum += v == v ? std::exp(v - max) : 0.0;
        }
        double total = 0;
        for (std::size_t i = 0; i < n; ++i) {
            const double reference = x[i] == x[i] ? std::exp(x[i] - max) / sum : 0.0;
            // softmax's bound: 7e-7 relative at or above FLT_MIN, 2^-126 absolute below.
            CHECK(std::fabs(p[i] - reference) <= std::max(reference * 7e-7, 0x1.0p-126));
            total += p[i];
        }
        CHECK(total == doctest::Approx(1.0).epsilon(static_cast<double>(n) * 0x1.0p-23));
    }
    std::vector<float> all_minus_inf(10, -inf);
    std::vector<float> p(10, 7.0f);
    std::vector<float> chunks;
    CHECK_FALSE(qk::sampling::softmax(all_minus_inf, p, chunks));
    CHECK(p[0] == 7.0f);
    std::vector<float> with_inf = {0.0f, inf, 1.0f};
    std::vector<float> q(3);
    CHECK_THROWS_WITH_AS(qk::sampling::softmax(with_inf, q, chunks), doctest::Contains("logit 1 is +inf"), qk::error);
    std::vector<float> short_p(2);
    CHECK_THROWS_AS(qk::sampling::softmax(with_inf, short_p, chunks), qk::error);
}

TEST_CASE("exp_difference is within 2 ulp of exp(x - max) computed exactly, where plain exp of the rounded difference is not")
{
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> maxima(-40.0f, 60.0f);
    std::uniform_real_distribution<float> below(0.0f, 87.0f);
    double worst = 0;
    double worst_plain = 0;
    for (int i = 0; i < 400000; ++i) {
        const float max = maxima(rng);
        const float x = max - below(rng);
        // Both floats: their difference is exact in double (exponents within 29 bits of each other).
        const double reference = std::exp(static_cast<double>(x) - static_cast<double>(max));
        if (reference < std::numeric_limits<float>::min()) {
            continue;
        }
        worst = std::max(worst, ulps(sd::exp_difference(x, max), reference));
        worst_plain = std::max(worst_plain, ulps(sd::exp(x - max), reference));
    }
    INFO("worst error: " << worst << " ulp; exp of the rounded difference: " << worst_plain << " ulp");
    CHECK(worst <= 2.0);
    CHECK(worst_plain > 4.0); // what the correction is for: the inputs do exercise it
    CHECK(sd::exp_difference(1.5f, 1.5f) == 1.0f);
    CHECK(sd::exp_difference(-inf, 2.0f) == 0.0f);
    CHECK(sd::exp_difference(std::numeric_limits<float>::quiet_NaN(), 2.0f) == 0.0f);
    CHECK(sd::exp_difference(-3e38f, 3e38f) == 0.0f); // the difference overflows to -inf
    CHECK(sd::exp_difference(-100.0f, 0.0f) == 0.0f);
}

TEST_CASE("softmax within 7e-7 and candidate probabilities within 6e-7 of a long double softmax (32k, 152k, 256k vocabularies)")
{
    struct shape {
        const char* name;
        std::vector<float> (*make)(std::size_t, std::uint32_t);
    };
    const shape shapes[] = {
        {"flat N(0,1)", [](std::size_t n, std::uint32_t seed) { return qk_inputs::normal(n, 1.0f, seed); }},
        {"N(0,3)", [](std::size_t n, std::uint32_t seed) { return qk_inputs::normal(n, 3.0f, seed); }},
        {"peaky", [](std::size_t n, std::uint32_t seed) {
             auto x = qk_inputs::normal(n, 1.0f, seed);
             for (auto& v : x) {
                 v -= 10.0f;
             }
             x[n / 3] = 20.0f;
             x[n / 2] = 18.5f;
             x[7] = 17.0f;
             return x;
         }},
        {"wide, with -inf and NaN", [](std::size_t n, std::uint32_t seed) {
             auto x = qk_inputs::uniform(n, -70.0f, 25.0f, seed);
             for (std::size_t i = 5; i < n; i += 97) {
                 x[i] = i % 2 == 0 ? -inf : std::numeric_limits<float>::quiet_NaN();
             }
             return x;
         }},
    };
    std::uint32_t seed = 1;
    for (const auto& s : shapes) {
        for (const std::size_t n : {std::size_t{32000}, std::size_t{152064}, std::size_t{256000}}) {
            const auto x = s.make(n, seed++);
            {
                // The public softmax pass over the whole vocabulary (NaN as -inf).
                CAPTURE(s.name);
                CAPTURE(n);
                std::vector<float> p(n);
                std::vector<float> chunks;
                REQUIRE(qk::sampling::softmax(x, p, chunks));
                long double max = -INFINITY;
                for (const float v : x) {
                    max = v == v ? std::max<long double>(max, v) : max;
                }
                long double sum = 0;
                for (const float v : x) {
                    sum += v == v ? std::exp(static_cast<long double>(v) - max) : 0.0L;
                }
                double worst = 0;
                std::size_t checked = 0;
                for (std::size_t i = 0; i < n; ++i) {
                    const long double reference = x[i] == x[i] ? std::exp(static_cast<long double>(x[i]) - max) / sum : 0.0L;
                    if (reference >= std::numeric_limits<float>::min()) {
                        worst = std::max(worst, static_cast<double>(std::fabs((p[i] - reference) / reference)));
                        ++checked;
                    } else {
                        CHECK(std::fabs(p[i] - reference) <= static_cast<long double>(std::numeric_limits<float>::min()));
                    }
                }
                INFO("softmax: worst relative error " << worst << " over " << checked << " of " << n);
                CHECK(checked > 0);
                CHECK(worst <= 7e-7);
            }
            for (const char* spec : {"dist(seed=3)", "temp(0.7);dist(seed=3)", "top_k(1000);dist(seed=3)", "top_p(0.9);dist(seed=3)"}) {
                CAPTURE(s.name);
                CAPTURE(n);
                CAPTURE(spec);
                auto chain = qk::sampling::chain::parse(spec);
                (void)chain.sample(x);
                const auto list = chain.final_candidates();
                long double max = -INFINITY;
                for (const auto& t : list) {
                    max = std::max<long double>(max, t.logit);
                }
                long double sum = 0;
                for (const auto& t : list) {
                    sum += std::exp(static_cast<long double>(t.logit) - max);
                }
                double worst = 0;
                std::size_t checked = 0;
                for (const auto& t : list) {
                    const long double reference = std::exp(static_cast<long double>(t.logit) - max) / sum;
                    if (reference >= std::numeric_limits<float>::min()) {
                        worst = std::max(worst, static_cast<double>(std::fabs((t.p - reference) / reference)));
                        ++checked;
                    } else {
                        CHECK(std::fabs(t.p - reference) <= static_cast<long double>(std::numeric_limits<float>::min()));
                    }
                }
                INFO("worst relative error " << worst << " over " << checked << " of " << list.size());
                CHECK(checked > 0);
                CHECK(worst <= 6e-7);
            }
        }
    }
}
