// adaptive_p (include/sampling/samplers/adaptive_p.hpp) against an independent reference of
// llama.cpp's rule in double precision, step by step with the same uniform numbers: the state
// within bounds derived from float rounding, the transformed logits, and the chosen tokens wherever
// the uniform number is clearly inside one token's interval. Then the steering itself over 2000
// steps, compared with its mean-field equilibrium and with plain dist, and the sampler's contract
// (parse and describe, deep copies, reset and reseed, accept, errors).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <sampling/sampling.hpp>

#include "inputs.hpp"
#include "sampling_reference.hpp"

namespace {

namespace qs = qk::sampling;
using qk_test::sampling::inf;
using qk_test::sampling::nan_value;

constexpr double unit = 0x1p-24;              // the unit roundoff of float
constexpr double double_unit = 0x1p-53;       // of double
constexpr double inverse_width = 1.0f / 0.3f; // llama.cpp's INV_WIDTH, a float constant

// llama.cpp's adaptive-p in double: llama_sampler_adaptive_p_{apply,accept,reset} with
// llama_sampler_softmax_impl (no sorting) and a draw that walks the candidates in their order.
struct reference {
    double target;
    double decay;
    double weighted_sum = 0;
    double total_weight = 0;
    std::int32_t pending = -1;
    double pending_p = 0;

    reference(float t, float d) : target(t), decay(std::clamp(d, 0.0f, 0.99f)) { prime(); }

    void prime()
    {
        weighted_sum = target / (1.0 - decay);
        total_weight = 1.0 / (1.0 - decay);
        pending = -1;
    }
    [[nodiscard]] double average() const { return weighted_sum / total_weight; }
    [[nodiscard]] double adapted() const
    {
        const double t = std::clamp(target, 0.0, 1.0);
        return std::clamp(total_weight == 0.0 ? t : 2.0 * t - average(), 0.0, 1.0);
    }

    static std::vector<double> softmax(const std::vector<double>& logits)
    {
        double max = -inf;
        for (const double l : logits) {
            max = std::max(max, l);
        }
        std::vector<double> p(logits.size());
        double sum = 0;
        for (std::size_t i = 0; i < logits.size(); ++i) {
            p[i] = logits[i] == -inf ? 0.0 : std::exp(logits[i] - max);
            sum += p[i];
        }
        for (auto& v : p) {
            v /= sum;
        }
        return p;
    }
    static double transform(double p, double a)
    {
        const double x = std::fabs((p - a) * inverse_width);
        return 5.0 - 10.0 * x * x / (1.0 + x);
    }

    struct step {
        std::vector<double> p;     // original probabilities
        std::vector<double> t;     // transformed logits (-inf kept)
        std::vector<double> q;     // what is drawn from
        std::vector<double> upper; // running sums of q
    };
    [[nodiscard]] step weigh(const std::vector<float>& logits) const
    {
        step s;
        std::vector<double> l(logits.begin(), logits.end());
        s.p = softmax(l);
        s.t = l;
        if (target < 0) {
            s.q = s.p;
        } else {
            const double a = adapted();
            for (std::size_t i = 0; i < l.size(); ++i) {
                s.t[i] = l[i] == -inf ? -inf : transform(s.p[i], a);
            }
            s.q = softmax(s.t);
        }
        double running = 0;
        for (const double q : s.q) {
            running += q;
            s.upper.push_back(running);
        }
        return s;
    }
    void selected(std::int32_t id, double p)
    {
        if (target >= 0) {
            pending = id;
            pending_p = p;
        }
    }
    void accept(std::int32_t token)
    {
        if (pending >= 0 && token == pending) {
            weighted_sum = pending_p + decay * weighted_sum;
            total_weight = 1.0 + decay * total_weight;
        }
        pending = -1;
    }
};

// Bounds on how far qkern's float state may be from the reference's, carried from step to step.
// Only first-order terms in the unit roundoff u are kept (the neglected ones are O(u^2)).
struct state_bounds {
    double weighted_sum;
    double total_weight;

    // The primed state: 1 - d and the quotient are each rounded once.
    explicit state_bounds(const reference& r)
        : weighted_sum(2 * unit * std::fabs(r.weighted_sum)), total_weight(2 * unit * r.total_weight)
    {
    }
    // S' = p + d S and W' = 1 + d W: the bounds shrink by d, and grow by the error of p and by one
    // rounding of each product and each sum.
    void accept(const reference& before, const reference& after, double p_error)
    {
        weighted_sum = p_error + before.decay * weighted_sum + unit * before.decay * std::fabs(before.weighted_sum) +
                       unit * std::fabs(after.weighted_sum);
        total_weight = before.decay * total_weight + unit * before.decay * before.total_weight + unit * after.total_weight;
    }
    // S / W, rounded (W >= 1).
    [[nodiscard]] double average(const reference& r) const
    {
        return (weighted_sum + std::fabs(r.average()) * total_weight) / (r.total_weight - total_weight) + unit * std::fabs(r.average());
    }
};

// The relative error of a softmax that candidates computes over n logits whose finite values
// spread over `spread`: exp within 2 ulp (4u), the rounding of l - max (u |l - max|), the float
// sum of n positive terms ((n - 1) u relative), then the reciprocal and the product (2u).
double softmax_error(std::size_t n, double spread)
{
    return (static_cast<double>(n) + 9.0 + spread) * unit;
}

double finite_spread(const std::vector<double>& v)
{
    double hi = -inf;
    double lo = inf;
    for (const double x : v) {
        if (x > -inf) {
            hi = std::max(hi, x);
            lo = std::min(lo, x);
        }
    }
    return hi - lo;
}

struct logit_case {
    std::string name;
    std::vector<float> vocabulary;
    std::int32_t top_k; // 0: the whole vocabulary as a view
};

// The set qkern's candidates hold when adaptive_p runs, in its order: id order for a view, and
// for top_k the k best by (logit, id), NaN counting as -inf.
std::vector<qs::token_data> reference_set(const logit_case& lc)
{
    std::vector<qs::token_data> set;
    for (std::size_t i = 0; i < lc.vocabulary.size(); ++i) {
        const float v = lc.vocabulary[i];
        set.push_back({static_cast<std::int32_t>(i), v == v ? v : -inf, 0.0f});
    }
    if (lc.top_k > 0) {
        std::sort(set.begin(), set.end(), [](const auto& a, const auto& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); });
        set.resize(static_cast<std::size_t>(lc.top_k));
    }
    return set;
}

std::vector<logit_case> logit_cases()
{
    using namespace qk_test::sampling;
    return {
        {"flat n=16", flat_logits(16, 51), 0},
        {"peaky n=50", qk_inputs::normal(50, 3.0f, 52), 0},
        {"-inf and NaN n=37", mixed_logits(37, 53), 0},
        {"top_k(40) of n=1000", mixed_logits(1000, 54), 40},
    };
}

// The mean of p, and its variance, when tokens are drawn with probabilities q.
double mean_under(const std::vector<double>& p, const std::vector<double>& q, double* variance)
{
    double mean = 0;
    double square = 0;
    for (std::size_t i = 0; i < p.size(); ++i) {
        mean += q[i] * p[i];
        square += q[i] * p[i] * p[i];
    }
    *variance = square - mean * mean;
    return mean;
}

} // namespace

TEST_CASE("adaptive_p: llama.cpp's rule, step by step against a double-precision reference")
{
    struct config {
        float target, decay;
    };
    // T > 1 enters the primed average unclamped; decay 1.7 is clamped to 0.99; -1 is disabled.
    const config configs[] = {{0.5f, 0.9f}, {0.1f, 0.5f}, {0.9f, 0.0f}, {1.5f, 0.9f}, {0.3f, 1.7f}, {-1.0f, 0.9f}};
    const int steps = 300;
    std::uint64_t seed = 4100;
    long compared = 0;
    long total = 0;
    for (const auto& lc : logit_cases()) {
        const std::vector<qs::token_data> set = reference_set(lc);
        std::vector<float> set_logits;
        for (const auto& t : set) {
            set_logits.push_back(t.logit);
        }
        const std::size_t n = set.size();
        for (const auto& cfg : configs) {
            CAPTURE(lc.name);
            CAPTURE(cfg.target);
            CAPTURE(cfg.decay);
            qs::adaptive_p sampler(cfg.target, cfg.decay, seed);
            qs::random_source numbers(seed, qs::stream::adaptive_p);
            ++seed;
            reference ref(cfg.target, cfg.decay);
            state_bounds bound(ref);
            CHECK(sampler.decay() == std::clamp(cfg.decay, 0.0f, 0.99f));
            for (int step = 0; step < steps; ++step) {
                CAPTURE(step);
                REQUIRE(std::fabs(sampler.weighted_sum() - ref.weighted_sum) <= bound.weighted_sum);
                REQUIRE(std::fabs(sampler.total_weight() - ref.total_weight) <= bound.total_weight);
                const float weighted_sum = sampler.weighted_sum();
                const float total_weight = sampler.total_weight();

                qs::candidates c;
                c.reset(std::span<const float>(lc.vocabulary));
                if (lc.top_k > 0) {
                    qs::top_k(lc.top_k).apply(c);
                }
                sampler.apply(c);
                // apply() changes nothing but the generator and the pending token.
                CHECK(sampler.weighted_sum() == weighted_sum);
                CHECK(sampler.total_weight() == total_weight);
                const double u = numbers.uniform();
                const auto r = ref.weigh(set_logits);

                // How far qkern's probabilities may be from the reference's: the original ones,
                // the adapted target, the transformed logits (|dt/dx| < 10, x = |p - a| / 0.3;
                // each of the five roundings of 5 - 10 x x / (1 + x) is at most u times the
                // largest intermediate 10 x^2 <= 10 / 0.3^2, not amplified by 1 + x >= 1), and the
                // softmax drawn from.
                const double p_error = softmax_error(n, finite_spread(std::vector<double>(set_logits.begin(), set_logits.end())));
                double q_error = p_error;
                double t_error = 0;
                if (cfg.target >= 0) {
                    const double a_error = bound.average(ref) + unit * (2.0 + std::fabs(ref.average()));
                    const double x_error = inverse_width * (p_error + a_error) + 2 * unit * inverse_width;
                    t_error = 10.0 * x_error + 5 * unit * 10.0 * inverse_width * inverse_width;
                    q_error = std::expm1(2 * t_error) + softmax_error(n, finite_spread(r.t));
                    // The transformed set, in the set's order, -inf kept.
                    REQUIRE(c.current() == qs::candidates::form::list);
                    const auto& l = c.list();
                    REQUIRE(l.size() == n);
                    std::string difference;
                    for (std::size_t i = 0; i < n && difference.empty(); ++i) {
                        const bool same = l[i].id == set[i].id &&
                                          (r.t[i] == -inf ? l[i].logit == -inf : std::fabs(l[i].logit - r.t[i]) <= t_error);
                        if (!same) {
                            difference = "at " + std::to_string(i) + ": id " + std::to_string(l[i].id) + ", logit " +
                                         std::to_string(l[i].logit) + "; expected id " + std::to_string(set[i].id) +
                                         ", logit " + std::to_string(r.t[i]) + " within " + std::to_string(t_error);
                        }
                    }
                    CHECK_MESSAGE(difference.empty(), difference);
                    CHECK(sampler.pending_token() == c.selected());
                } else {
                    CHECK(sampler.pending_token() == -1);
                }

                // The reference's choice, and how far u is from the ends of its interval. qkern
                // compares running sums of its q with u times their sum: each sum within q_error
                // relative, so a normalized running sum within 2 q_error / (1 - q_error), plus the
                // double sums' own rounding.
                std::size_t want = 0;
                while (want + 1 < n && !(r.upper[want] > u)) {
                    ++want;
                }
                const double lower = want == 0 ? 0.0 : r.upper[want - 1];
                const double margin = std::min(u - lower, r.upper[want] - u);
                const double needed = 2 * q_error / (1 - q_error) + 2 * static_cast<double>(n) * double_unit;
                std::size_t got = n;
                for (std::size_t i = 0; i < n; ++i) {
                    got = set[i].id == c.selected() ? i : got;
                }
                REQUIRE(got < n);
                CHECK(r.q[got] > 0.0);
                ++total;
                if (margin > needed) {
                    ++compared;
                    CHECK(got == want);
                } else {
                    // Within rounding of an interval's end: qkern's token must be one whose interval
                    // reaches u within that rounding; the reference follows qkern's choice.
                    const double got_lower = got == 0 ? 0.0 : r.upper[got - 1];
                    CHECK(got_lower - needed <= u);
                    CHECK(u < r.upper[got] + needed);
                }
                ref.selected(set[got].id, r.p[got]);

                // Accept: mostly the selected token; sometimes another one (no change) or twice.
                const reference before = ref;
                const std::int32_t accepted = step % 7 == 3 ? (c.selected() + 1) % static_cast<std::int32_t>(lc.vocabulary.size()) : c.selected();
                sampler.accept(accepted);
                ref.accept(accepted);
                CHECK(sampler.pending_token() == -1);
                if (ref.weighted_sum != before.weighted_sum || ref.total_weight != before.total_weight) {
                    bound.accept(before, ref, p_error * before.pending_p);
                } else {
                    CHECK(sampler.weighted_sum() == weighted_sum);
                    CHECK(sampler.total_weight() == total_weight);
                }
                if (step % 5 == 0) {
                    const float s = sampler.weighted_sum();
                    sampler.accept(accepted);
                    CHECK(sampler.weighted_sum() == s);
                }
            }
            CHECK(std::fabs(sampler.average() - ref.average()) <= bound.average(ref));
            if (cfg.target < 0) {
                CHECK(sampler.weighted_sum() == static_cast<float>(cfg.target / (1.0f - 0.9f)));
            }
        }
    }
    // Most choices are compared, not only bounded.
    MESSAGE("compared ", compared, " of ", total, " choices");
    CHECK(compared * 4 >= total * 3);
}

TEST_CASE("adaptive_p: the average original probability of the chosen tokens is steered to the target")
{
    // A fixed distribution with probabilities spread over [0, 0.5]; plain dist averages sum p^2.
    const std::vector<double> probabilities = {0.5, 0.3, 0.1, 0.05, 0.03, 0.02};
    std::vector<float> logits;
    for (const double p : probabilities) {
        logits.push_back(static_cast<float>(std::log(p)));
    }
    const std::vector<double> p = reference::softmax(std::vector<double>(logits.begin(), logits.end()));
    const int steps = 2000;
    const float decay = 0.9f;

    const auto run_mean = [&](qs::sampler s) {
        double sum = 0;
        qs::candidates c;
        for (int step = 0; step < steps; ++step) {
            c.reset(std::span<const float>(logits));
            s.apply(c);
            sum += p[static_cast<std::size_t>(c.selected())];
            s.accept(c.selected());
        }
        return sum / steps;
    };

    // Plain dist: the mean of p under p, within three standard errors of `steps` draws.
    double dist_variance = 0;
    const double dist_expected = mean_under(p, p, &dist_variance);
    const double dist_tolerance = 3 * std::sqrt(dist_variance / steps);
    const double dist_mean = run_mean(qs::dist(77));
    CHECK(std::fabs(dist_mean - dist_expected) <= dist_tolerance);

    for (const float target : {0.05f, 0.25f}) {
        CAPTURE(target);
        // The mean-field equilibrium of llama.cpp's rule: the average A at which the transformed
        // distribution, aimed at a = 2T - A, yields A on average (unique: the yield grows with a,
        // and a falls as A grows), found by bisection.
        reference ref(target, decay);
        double lo = 0;
        double hi = 1;
        double variance = 0;
        for (int i = 0; i < 60; ++i) {
            const double mid = (lo + hi) / 2;
            ref.weighted_sum = mid * ref.total_weight;
            const auto r = ref.weigh(logits);
            (mean_under(p, r.q, &variance) > mid ? lo : hi) = mid;
        }
        const double equilibrium = (lo + hi) / 2;
        ref.weighted_sum = equilibrium * ref.total_weight;
        (void)mean_under(p, ref.weigh(logits).q, &variance);

        // The mean over `steps` is the mean of the moving average plus (A_N - A_0) / ((1 - d) N),
        // at most 1 / ((1 - d) N); the draws around the equilibrium add three standard errors.
        const double tolerance = 3 * std::sqrt(variance / steps) + 1.0 / ((1.0 - decay) * steps);
        const double mean = run_mean(qs::adaptive_p(target, decay, 1234));
        MESSAGE("target ", target, ": mean ", mean, ", equilibrium ", equilibrium, ", tolerance ", tolerance, ", dist ", dist_mean);
        CHECK(std::fabs(mean - equilibrium) <= tolerance);
        // The equilibrium is near the target here (the rule aims with a proportional correction,
        // so it is not exactly there), far nearer than dist's mean; and the two differ clearly.
        CHECK(std::fabs(mean - target) <= tolerance + std::fabs(equilibrium - target));
        CHECK(std::fabs(equilibrium - target) * 10 < std::fabs(dist_expected - target));
        CHECK(std::fabs(mean - dist_mean) > tolerance + dist_tolerance);
    }
}

TEST_CASE("adaptive_p: parse and describe, deep copies, reset and reseed")
{
    SUBCASE("chain syntax")
    {
        const qs::chain c = qs::chain::parse("adaptive_p(target=0.5,decay=0.9,seed=1)");
        CHECK(c.describe() == "adaptive_p(target=0.5,decay=0.9,seed=1)");
        CHECK(c[0].selects());
        CHECK(qs::chain::parse("adaptive_p(0.25,0.95,7)").describe() == "adaptive_p(target=0.25,decay=0.95,seed=7)");
        CHECK(qs::chain::parse("adaptive_p").describe() == "adaptive_p(target=-1,decay=0.9,seed=0)");
        CHECK(qs::chain::parse("adaptive_p").describe() == qs::sampler(qs::adaptive_p()).describe());
        CHECK(qs::chain::parse("adaptive_p(0.5,decay=2)").describe() == "adaptive_p(target=0.5,decay=0.99,seed=0)");
        CHECK(qs::chain::parse("adaptive_p(0.5,decay=-1)").describe() == "adaptive_p(target=0.5,decay=0,seed=0)");
        CHECK(qs::chain::parse("adaptive_p(-inf)").describe() == "adaptive_p(target=-inf,decay=0.9,seed=0)");
        for (const char* text : {"min_p(0.05);adaptive_p(0.3,0.8,5)", "top_k(40);temp(0.7);adaptive_p(target=1.5)", "adaptive_p(-inf)"}) {
            CAPTURE(text);
            const std::string described = qs::chain::parse(text).describe();
            CHECK(qs::chain::parse(described).describe() == described);
        }
        qs::chain seeded = qs::chain::parse("adaptive_p(0.4)");
        seeded.reseed(~0ull);
        CHECK(seeded.describe() == "adaptive_p(target=0.4,decay=0.9,seed=18446744073709551615)");
    }
    const auto logits = qk_inputs::normal(500, 2.0f, 61);
    SUBCASE("a copy continues exactly as the original, with its own state")
    {
        qs::chain a = qs::chain::parse("min_p(0.02);adaptive_p(0.3,0.9,3)");
        for (int i = 0; i < 20; ++i) {
            (void)a.sample(logits);
        }
        // A pending token travels with the copy too.
        const std::int32_t pending = a.select(logits);
        qs::chain b = a;
        a.accept(pending);
        b.accept(pending);
        for (int i = 0; i < 50; ++i) {
            CAPTURE(i);
            CHECK(a[1].get<qs::adaptive_p>()->weighted_sum() == b[1].get<qs::adaptive_p>()->weighted_sum());
            CHECK(a[1].get<qs::adaptive_p>()->total_weight() == b[1].get<qs::adaptive_p>()->total_weight());
            CHECK(a.sample(logits) == b.sample(logits));
        }
        // Independent: advancing one leaves the other.
        const float before = b[1].get<qs::adaptive_p>()->weighted_sum();
        for (int i = 0; i < 5; ++i) {
            (void)a.sample(logits);
        }
        CHECK(b[1].get<qs::adaptive_p>()->weighted_sum() == before);
    }
    SUBCASE("reset primes the average again and keeps the generator; reseed restarts it")
    {
        qs::candidates c;
        qs::adaptive_p a(0.2f, 0.8f, 9);
        for (int i = 0; i < 15; ++i) {
            c.reset(std::span<const float>(logits));
            a.apply(c);
            a.accept(c.selected());
        }
        CHECK(a.weighted_sum() != qs::adaptive_p(0.2f, 0.8f, 9).weighted_sum());
        c.reset(std::span<const float>(logits));
        a.apply(c);
        a.reset();
        CHECK(a.pending_token() == -1);
        CHECK(a.weighted_sum() == qs::adaptive_p(0.2f, 0.8f, 9).weighted_sum());
        CHECK(a.total_weight() == qs::adaptive_p(0.2f, 0.8f, 9).total_weight());
        const float primed = a.weighted_sum();
        a.accept(c.selected()); // the pending token went with the reset
        CHECK(a.weighted_sum() == primed);

        // The generator went on: a fresh sampler whose generator drew the same 16 numbers (apply()
        // without accept() of its token moves nothing else) continues identically.
        qs::adaptive_p fresh(0.2f, 0.8f, 9);
        for (int i = 0; i < 16; ++i) {
            c.reset(std::span<const float>(logits));
            fresh.apply(c);
        }
        fresh.accept((c.selected() + 1) % static_cast<std::int32_t>(logits.size()));
        CHECK(fresh.pending_token() == -1);
        CHECK(fresh.weighted_sum() == primed);
        const auto same_steps = [&](qs::adaptive_p& x, qs::adaptive_p& y) {
            for (int i = 0; i < 30; ++i) {
                c.reset(std::span<const float>(logits));
                x.apply(c);
                const std::int32_t tx = c.selected();
                c.reset(std::span<const float>(logits));
                y.apply(c);
                CHECK(tx == c.selected());
                x.accept(tx);
                y.accept(tx);
                CHECK(x.weighted_sum() == y.weighted_sum());
            }
        };
        same_steps(a, fresh);
        a.reset();
        a.reseed(21);
        CHECK(a.seed() == 21u);
        qs::adaptive_p reseeded(0.2f, 0.8f, 21);
        same_steps(a, reseeded);
    }
}

TEST_CASE("adaptive_p: disabled, accept, errors")
{
    SUBCASE("a negative target selects as dist and never moves the average")
    {
        const auto logits = qk_inputs::normal(3000, 1.5f, 62);
        qs::adaptive_p a(-0.5f, 0.9f, 5);
        qs::random_source numbers(5, qs::stream::adaptive_p);
        qs::candidates c;
        qs::candidates d;
        for (int i = 0; i < 20; ++i) {
            c.reset(std::span<const float>(logits));
            a.apply(c);
            CHECK(c.whole_vocabulary()); // dist's draw over the whole vocabulary
            d.reset(std::span<const float>(logits));
            CHECK(c.selected() == qs::detail::draw_token(d, numbers.uniform()));
            a.accept(c.selected());
            CHECK(a.average() == doctest::Approx(-0.5));
        }
    }
    SUBCASE("-inf logits stay -inf and are never chosen; a token of probability 0 may be")
    {
        // Token 2 has probability 0 in float (exp(-100) underflows), token 3 is -inf: the first
        // still gets a finite transformed logit, as llama.cpp transforms every logit but -inf.
        const std::vector<float> logits = {0.0f, 0.0f, -100.0f, -inf};
        qs::adaptive_p a(0.9f, 0.0f, 1);
        qs::candidates c;
        c.reset(std::span<const float>(logits));
        a.apply(c);
        const auto& l = c.list();
        CHECK(l[3].logit == -inf);
        CHECK(l[2].logit > -inf);
        CHECK(l[2].logit < l[0].logit);
        CHECK(c.selected() != 3);
    }
    SUBCASE("accept moves the average only for the token the last apply() selected, once")
    {
        const std::vector<float> logits = {1.0f, 0.5f, 0.0f};
        qs::adaptive_p a(0.3f, 0.9f, 2);
        const float primed = a.weighted_sum();
        a.accept(0); // nothing selected yet
        CHECK(a.weighted_sum() == primed);
        qs::candidates c;
        c.reset(std::span<const float>(logits));
        a.apply(c);
        const std::int32_t other = (c.selected() + 1) % 3;
        a.accept(other);
        CHECK(a.weighted_sum() == primed);
        CHECK(a.pending_token() == -1);
        c.reset(std::span<const float>(logits));
        a.apply(c);
        const std::int32_t chosen = c.selected();
        CHECK_THROWS_WITH_AS(a.accept(-1), doctest::Contains("token -1 is negative"), qk::error);
        CHECK(a.pending_token() == chosen); // the failed accept changed nothing
        a.accept(chosen);
        CHECK(a.weighted_sum() != primed);
        CHECK(a.total_weight() == doctest::Approx(1.0 + 0.9 * 10.0));
    }
    SUBCASE("bad arguments name themselves")
    {
        CHECK_THROWS_WITH_AS(qs::adaptive_p{nan_value}, doctest::Contains("target=nan"), qk::error);
        CHECK_THROWS_WITH_AS(qs::adaptive_p{inf}, doctest::Contains("target=inf"), qk::error);
        CHECK_THROWS_WITH_AS(qs::adaptive_p(0.5f, nan_value), doctest::Contains("decay=nan"), qk::error);
        CHECK_NOTHROW(qs::adaptive_p(-inf, inf));
        const auto fails_with = [](const char* text, const char* part) {
            CAPTURE(text);
            CHECK_THROWS_WITH_AS((void)qs::chain::parse(text), doctest::Contains(part), qk::error);
        };
        fails_with("adaptive_p(target=abc)", "adaptive_p: target='abc' is not a number");
        fails_with("adaptive_p(target=nan)", "target='nan' is not a number");
        fails_with("adaptive_p(target=inf)", "adaptive_p: target=inf");
        fails_with("adaptive_p(0.5,decay=x)", "decay='x' is not a number");
        fails_with("adaptive_p(0.5,seed=-3)", "seed='-3' is not a seed");
        fails_with("adaptive_p(width=0.3)", "has no parameter 'width'");
        fails_with("adaptive_p(0.5,0.9,1,2)", "at most 3 positional values");
        fails_with("adaptive_p(0.5);top_k(4)", "which selects no token");
    }
    SUBCASE("nothing to sample")
    {
        const std::vector<float> logits = {1.0f, 2.0f};
        qs::candidates c;
        c.reset(std::span<const float>(logits));
        qs::min_p(1.5f, 0).apply(c); // keeps nothing
        qs::adaptive_p a(0.5f);
        CHECK_THROWS_AS(a.apply(c), qk::error);
        CHECK(a.pending_token() == -1);
    }
}
