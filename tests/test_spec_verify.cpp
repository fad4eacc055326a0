// Draft verification and the batch budget: greedy verification against hand-made cases and a
// brute-force loop, stochastic verification preserving the target distribution (chi-square with
// fixed seeds), every emitted token fed to the target's chain exactly once, evaluations never
// above n_batch, and the replay evaluator's bookkeeping against a direct simulation.
#include <doctest/doctest.h>

#include <qkern.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace {

namespace qs = qk::sampling;

// A pass-through sampler that records what the chain accepts.
struct accept_log {
    static constexpr bool selects = false;
    std::vector<std::int32_t>* log;
    void apply(qs::candidates&) const {}
    void accept(std::int32_t token) { log->push_back(token); }
    [[nodiscard]] std::string describe() const { return "accept_log"; }
};

double chi_square(const std::vector<std::size_t>& counts, const std::vector<double>& p)
{
    double total = 0;
    for (const auto c : counts) {
        total += static_cast<double>(c);
    }
    double chi2 = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) {
        const double expected = total * p[i];
        chi2 += (static_cast<double>(counts[i]) - expected) * (static_cast<double>(counts[i]) - expected) / expected;
    }
    return chi2;
}

std::vector<double> softmax(const std::vector<float>& x)
{
    double max = -INFINITY;
    for (const float v : x) {
        max = std::max(max, static_cast<double>(v));
    }
    std::vector<double> p(x.size());
    double sum = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        p[i] = std::exp(x[i] - max);
        sum += p[i];
    }
    for (auto& v : p) {
        v /= sum;
    }
    return p;
}

} // namespace

TEST_CASE("verify_greedy: the longest matching prefix and the target's next token")
{
    using v = std::vector<std::int32_t>;
    auto r = qk::spec::verify_greedy(v{5, 6, 7}, v{5, 6, 9, 1});
    CHECK(r.accepted == 2);
    CHECK(r.tokens == v{5, 6, 9});
    r = qk::spec::verify_greedy(v{5, 6, 7}, v{5, 6, 7, 1});
    CHECK(r.accepted == 3);
    CHECK(r.tokens == v{5, 6, 7, 1});
    r = qk::spec::verify_greedy(v{}, v{4});
    CHECK(r.accepted == 0);
    CHECK(r.tokens == v{4});
    r = qk::spec::verify_greedy(v{1}, v{2, 3});
    CHECK(r.accepted == 0);
    CHECK(r.tokens == v{2});
    CHECK_THROWS_AS((void)qk::spec::verify_greedy(v{1, 2}, v{1, 2}), qk::error);

    std::mt19937 rng(1);
    for (int trial = 0; trial < 2000; ++trial) {
        v draft(rng() % 8);
        v target(draft.size() + 1);
        for (auto& t : draft) {
            t = static_cast<std::int32_t>(rng() % 3);
        }
        for (auto& t : target) {
            t = static_cast<std::int32_t>(rng() % 3);
        }
        const auto result = qk::spec::verify_greedy(draft, target);
        std::size_t expected = 0;
        for (std::size_t i = 0; i < draft.size(); ++i) {
            if (draft[i] != target[i]) {
                break;
            }
            expected = i + 1;
        }
        CHECK(result.accepted == expected);
        REQUIRE(result.tokens.size() == expected + 1);
        CHECK(result.tokens.back() == target[expected]);
    }
}

TEST_CASE("verify_stochastic preserves the target distribution (chi-square, fixed seeds)")
{
    // Two positions: the first emitted token must follow p0 whatever the draft proposes, and the
    // second, given the first draft token was accepted, must follow p1.
    const std::vector<float> row0 = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -1.5f};
    const std::vector<float> row1 = {-1.0f, 1.5f, 0.5f, 0.0f, 0.3f, 1.0f};
    std::vector<float> logits = row0;
    logits.insert(logits.end(), row1.begin(), row1.end());
    const auto p0 = softmax(row0);
    const auto p1 = softmax(row1);
    for (const std::int32_t proposed : {0, 3, 5}) {
        CAPTURE(proposed);
        qs::chain target = qs::chain::parse("dist(seed=5)");
        qs::random_source random(17, 1000);
        std::vector<std::size_t> first(6, 0);
        std::vector<std::size_t> second(6, 0);
        constexpr int trials = 100000;
        for (int i = 0; i < trials; ++i) {
            const std::vector<std::int32_t> draft = {proposed, 1};
            const auto r = qk::spec::verify_stochastic(target, std::span<const float>(logits).first(12), 6,
                                                       std::span<const std::int32_t>(draft).first(1), random);
            REQUIRE(!r.tokens.empty());
            ++first[static_cast<std::size_t>(r.tokens[0])];
            CHECK(r.accepted == (r.tokens[0] == proposed ? 1u : 0u));
            if (r.accepted == 1) {
                REQUIRE(r.tokens.size() == 2);
                ++second[static_cast<std::size_t>(r.tokens[1])];
            } else {
                CHECK(r.tokens.size() == 1);
            }
        }
        // 0.999 quantile of chi-square with 5 degrees of freedom.
        CHECK(chi_square(first, p0) < 20.52);
        CHECK(chi_square(second, p1) < 20.52);
        // The acceptance rate of the proposed token is its probability.
        CHECK(static_cast<double>(first[static_cast<std::size_t>(proposed)]) / trials == doctest::Approx(p0[static_cast<std::size_t>(proposed)]).epsilon(0.03));
    }
}

TEST_CASE("verify_stochastic feeds every emitted token to the chain exactly once, in order")
{
    std::vector<std::int32_t> log;
    qs::chain target;
    target.add(accept_log{&log}).add(qs::top_k(3)).add(qs::dist(2));
    std::mt19937 rng(4);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    qs::random_source random(3, 1000);
    std::vector<std::int32_t> emitted;
    for (int step = 0; step < 300; ++step) {
        std::vector<std::int32_t> draft(rng() % 5);
        for (auto& t : draft) {
            t = static_cast<std::int32_t>(rng() % 4);
        }
        std::vector<float> logits((draft.size() + 1) * 10);
        for (auto& v : logits) {
            v = normal(rng);
        }
        const auto r = qk::spec::verify_stochastic(target, logits, 10, draft, random);
        CHECK(r.tokens.size() == r.accepted + 1);
        CHECK(r.accepted <= draft.size());
        for (std::size_t i = 0; i < r.accepted; ++i) {
            CHECK(r.tokens[i] == draft[i]);
        }
        emitted.insert(emitted.end(), r.tokens.begin(), r.tokens.end());
    }
    CHECK(log == emitted);
    std::vector<float> short_logits(15);
    const std::vector<std::int32_t> draft = {1};
    CHECK_THROWS_AS((void)qk::spec::verify_stochastic(target, short_logits, 10, draft, random), qk::error);
}

TEST_CASE("batch_budget: evaluations never hold more than n_batch tokens and cover every token once")
{
    for (const std::size_t n_batch : {1u, 2u, 7u, 512u}) {
        const qk::spec::batch_budget budget(n_batch);
        for (std::size_t n = 0; n < 2000; n += 1 + n / 7) {
            const auto sizes = budget.split(n);
            std::size_t total = 0;
            for (const auto s : sizes) {
                CHECK(s >= 1);
                CHECK(s <= n_batch);
                total += s;
            }
            CHECK(total == n);
            CHECK(sizes.size() == budget.evaluations(n));
            // Only the last evaluation may be short.
            for (std::size_t i = 0; i + 1 < sizes.size(); ++i) {
                CHECK(sizes[i] == n_batch);
            }
        }
    }
    CHECK_THROWS_AS(qk::spec::batch_budget(0), qk::error);
}

namespace {

// Proposes a fixed-length slice of a known future, mutated at random: a drafter whose
// acceptances the test can predict. It also counts the calls whose history held the sequence's
// tokens so far and had only been appended to since the previous call (by the mark it kept).
struct oracle_drafter {
    const std::vector<std::int32_t>* tokens;
    std::size_t length;
    std::mt19937* rng;
    std::vector<std::size_t>* seen_lengths;
    qk::spec::token_history::mark mark{};
    std::size_t faithful = 0;
    std::size_t appended_only = 0;
    std::vector<std::int32_t> draft(const qk::spec::token_history& history, std::int32_t sampled)
    {
        seen_lengths->push_back(history.size());
        CHECK(sampled == (*tokens)[history.size()]);
        faithful += std::equal(history.tokens().begin(), history.tokens().end(), tokens->begin()) ? 1 : 0;
        appended_only += history.unchanged_since(mark) == mark.length && mark.length > 0 ? 1 : 0;
        mark = history.seen();
        std::vector<std::int32_t> d;
        for (std::size_t i = 0; i < length && history.size() + 1 + i < tokens->size(); ++i) {
            d.push_back((*rng)() % 4 == 0 ? -7 : (*tokens)[history.size() + 1 + i]);
        }
        return d;
    }
};

} // namespace

TEST_CASE("replay: its counts equal a direct simulation of drafted decoding under the batch budget")
{
    std::mt19937 data(9);
    std::vector<std::int32_t> tokens(3000);
    for (auto& t : tokens) {
        t = static_cast<std::int32_t>(data() % 50);
    }
    for (const std::size_t n_batch : {1u, 3u, 8u, 512u}) {
        for (const std::size_t length : {0u, 1u, 5u, 20u}) {
            CAPTURE(n_batch);
            CAPTURE(length);
            std::mt19937 rng_a(1);
            std::mt19937 rng_b(1);
            std::vector<std::size_t> seen;
            std::vector<std::size_t> seen_b;
            oracle_drafter a{&tokens, length, &rng_a, &seen};
            const auto r = qk::spec::replay(tokens, a, {.prompt = 100, .n_batch = n_batch, .max_draft = 64});

            // The simulation, written out: the same drafts (same generator), verified by hand.
            oracle_drafter b{&tokens, length, &rng_b, &seen_b};
            std::size_t pos = 100;
            std::size_t evaluations = (100 + n_batch - 1) / n_batch;
            std::size_t accepted_total = 0;
            std::size_t drafted_total = 0;
            while (pos + 1 < tokens.size()) {
                auto d = b.draft(qk::spec::token_history(std::span<const std::int32_t>(tokens).first(pos)), tokens[pos]);
                d.resize(std::min({d.size(), std::size_t{64}, tokens.size() - pos - 2}));
                evaluations += (1 + d.size() + n_batch - 1) / n_batch;
                std::size_t a_count = 0;
                while (a_count < d.size() && d[a_count] == tokens[pos + 1 + a_count]) {
                    ++a_count;
                }
                accepted_total += a_count;
                drafted_total += d.size();
                pos += 1 + a_count;
            }
            CHECK(seen == seen_b);
            // replay kept one history, appended to: every call but the first could follow it.
            CHECK(a.faithful == seen.size());
            CHECK(a.appended_only + 1 == seen.size());
            CHECK(r.evaluations == evaluations);
            CHECK(r.accepted == accepted_total);
            CHECK(r.drafted == drafted_total);
            CHECK(r.generated == tokens.size() - 100);
            CHECK(r.baseline == (100 + n_batch - 1) / n_batch + tokens.size() - 100 - 1);
            CHECK(r.evaluations_saved() == static_cast<std::int64_t>(r.baseline) - static_cast<std::int64_t>(r.evaluations));
            if (length == 0) {
                CHECK(r.tokens_per_evaluation() == 1.0);
            }
            // Each history the drafter saw is one position: the positions only move forward.
            for (std::size_t i = 1; i < seen.size(); ++i) {
                CHECK(seen[i] > seen[i - 1]);
            }
            if (length == 0) {
                CHECK(r.drafted == 0);
                CHECK(r.evaluations == r.baseline);
            }
            if (n_batch == 1) {
                // Every drafted token costs its own evaluation: drafting cannot save any.
                CHECK(r.evaluations >= r.baseline);
            }
        }
    }
    qk::spec::ngram_simple drafter({.size_ngram = 2, .size_mgram = 4, .check_rate = 1});
    CHECK_THROWS_AS((void)qk::spec::replay(std::span<const std::int32_t>(tokens).first(5), drafter, {.prompt = 5}), qk::error);
    CHECK_THROWS_AS((void)qk::spec::replay(tokens, drafter, {.prompt = 0}), qk::error);
    CHECK_THROWS_AS((void)qk::spec::replay(tokens, drafter, {.prompt = 4, .n_batch = 0}), qk::error);
}

TEST_CASE("replay's progress callback: called after every step, growing, ending at the sequence's length")
{
    std::mt19937 data(4);
    std::vector<std::int32_t> tokens(2000);
    for (auto& t : tokens) {
        t = static_cast<std::int32_t>(data() % 8); // a small alphabet, so drafts are accepted and steps skip tokens
    }
    qk::spec::ngram_simple drafter({.size_ngram = 2, .size_mgram = 8, .check_rate = 1});
    std::vector<std::size_t> reached;
    const auto r = qk::spec::replay(tokens, drafter, {.prompt = 10, .n_batch = 512, .max_draft = 8},
                                    [&](std::size_t done, std::size_t total) {
                                        CHECK(total == tokens.size());
                                        reached.push_back(done);
                                    });
    REQUIRE(reached.size() == r.steps);
    CHECK(reached.front() > 10);
    for (std::size_t i = 1; i < reached.size(); ++i) {
        CHECK(reached[i] > reached[i - 1]);
    }
    CHECK(reached.back() == tokens.size());
    CHECK(r.accepted > 0); // else every step is one token and "growing" tests nothing the steps skip

    // Without a callback the replay is the same.
    qk::spec::ngram_simple again({.size_ngram = 2, .size_mgram = 8, .check_rate = 1});
    const auto plain = qk::spec::replay(tokens, again, {.prompt = 10, .n_batch = 512, .max_draft = 8});
    CHECK(plain.steps == r.steps);
    CHECK(plain.accepted == r.accepted);
}

TEST_CASE("ngram_map feedback on a draft the caller cut: all verified tokens accepted is a full acceptance")
{
    // Period 5: every key has one continuation, so each call drafts the same key's value again.
    std::vector<std::int32_t> tokens;
    for (int i = 0; i < 200; ++i) {
        tokens.push_back(i % 5);
    }
    const auto draft_length_after = [&](bool tell_verified) {
        qk::spec::ngram_map map({.size_ngram = 2, .size_mgram = 8});
        const qk::spec::token_history history(std::span<const std::int32_t>(tokens).first(100));
        const auto first = map.draft(history, tokens[100]);
        REQUIRE(first.size() == 8);
        if (tell_verified) {
            map.accept(3, 3); // the caller verified only 3 of the 8 tokens, and all were accepted
        } else {
            map.accept(3); // 3 of 8 accepted
        }
        return map.draft(history, tokens[100]).size();
    };
    CHECK(draft_length_after(true) == 8);
    CHECK(draft_length_after(false) == 3);
    qk::spec::ngram_map map({.size_ngram = 2, .size_mgram = 8});
    CHECK_THROWS_AS(map.accept(1, -1), qk::error);
}
