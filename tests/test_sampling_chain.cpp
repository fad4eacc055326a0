// Chains: parsing (every sampler, positional and named values, describe() round trips, every
// error naming its part), sampling (sample = select + accept, final candidates), deep copies,
// reseeding, errors that leave the state untouched, and batched sampling with inactive sequences.
#include <doctest/doctest.h>

#include <qkern.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__linux__)
#include <cstdio>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

// Sanitizers reserve terabytes of shadow memory: an address-space limit cannot be set under them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define QK_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define QK_TEST_SANITIZED 1
#endif
#endif
#ifndef QK_TEST_SANITIZED
#define QK_TEST_SANITIZED 0
#endif

#include "inputs.hpp"
#include "sampling_reference.hpp"

namespace {

namespace qs = qk::sampling;
using qk_test::sampling::inf;

std::vector<float> model_logits(std::size_t n, std::uint32_t seed)
{
    std::mt19937 rng(seed);
    return qk_inputs::draws(n, std::normal_distribution<float>(0.0f, 2.0f), rng);
}

const char* const every_sampler =
    "logit_bias(3=-inf,7=1.5);penalties(last_n=16,repeat=1.1,frequency=0.1,presence=0.2);"
    "dry(multiplier=0.8,base=1.75,allowed_length=2,last_n=64,breakers=[[13],[5,6]]);top_n_sigma(3);"
    "top_k(100);typical(0.98);top_p(0.95,min_keep=2);min_p(p=0.02);xtc(0.5,0.1,1,7);temp_ext(0.9,0.2,1.5);temp(0.8);dist(seed=9)";

} // namespace

TEST_CASE("chain::parse builds every sampler; describe() parses back to the same chain")
{
    for (const char* text : {"greedy", "dist", "dist(42)", "top_k(40);dist", "temperature(0.7);greedy", "dynatemp(0.8,0.3);dist",
                             "typ_p(0.9);dist", "mirostat(5,0.1,100,3)", "mirostat_v2(tau=4,eta=0.2)", every_sampler,
                             " top_k ( 40 ) ; dist ( seed = 1 ) ;"}) {
        CAPTURE(text);
        const qs::chain c = qs::chain::parse(text);
        const std::string described = c.describe();
        CHECK(qs::chain::parse(described).describe() == described);
    }
    const qs::chain c = qs::chain::parse("top_k(40);top_p(0.95);min_p(0.05);temp(0.8);dist(seed=42)");
    CHECK(c.describe() == "top_k(k=40);top_p(p=0.95,min_keep=1);min_p(p=0.05,min_keep=1);temp(t=0.8);dist(seed=42)");
    CHECK(c.size() == 5);
    CHECK(c[4].selects());
    CHECK_FALSE(c[0].selects());
    CHECK(qs::chain::parse("penalties;greedy").describe() == "penalties(last_n=64,repeat=1,frequency=0,presence=0);greedy");
    // The defaults of a parsed sampler are those of the code-built one.
    CHECK(qs::chain::parse("mirostat").describe() == qs::sampler(qs::mirostat()).describe());
    // Every 64-bit seed survives the round trip.
    qs::chain seeded = qs::chain::parse("xtc(0.5,0.1);mirostat_v2");
    seeded.reseed(~0ull);
    CHECK(seeded.describe() == "xtc(probability=0.5,threshold=0.1,min_keep=1,seed=18446744073709551615);"
                               "mirostat_v2(tau=5,eta=0.1,seed=18446744073709551615)");
    CHECK(qs::chain::parse(seeded.describe()).describe() == seeded.describe());
}

TEST_CASE("chain::parse errors name the offending part")
{
    const auto fails_with = [](const char* text, const char* part) {
        CAPTURE(text);
        CHECK_THROWS_WITH_AS((void)qs::chain::parse(text), doctest::Contains(part), qk::error);
    };
    fails_with("top_k(40);nucleus(0.9);dist", "unknown sampler 'nucleus'");
    fails_with("top_k(forty);dist", "k='forty' is not an integer");
    fails_with("top_p(p=0.9x);dist", "p='0.9x' is not a number");
    fails_with("top_p(q=0.9);dist", "has no parameter 'q'");
    fails_with("top_p(0.9,1,2);dist", "at most 2 positional values");
    fails_with("top_p(0.9,p=0.8);dist", "'p' is given twice");
    fails_with("top_k(40);;dist", "sampler 2");
    fails_with("", "sampler 1");
    fails_with("top_k(40;dist", "must end with one ')'");
    fails_with("top_k(40)", "ends with 'top_k(k=40)', which selects no token");
    fails_with("dist;top_k(40)", "which selects no token");
    fails_with("dist(seed=-1)", "seed='-1' is not a seed");
    fails_with("dist(seed=18446744073709551616)", "is not a seed");
    fails_with("top_k(k=);dist", "key=value");
    fails_with("top_k(40,);dist", "an empty argument");
    fails_with("dry(breakers=13);dist", "is not a list of token lists");
    fails_with("dry(breakers=[[1,]]);dist", "ends with ','");
    fails_with("dry(breakers=[[]]);dist", "an empty token list");
    fails_with("logit_bias(x=1);dist", "'x' is not a token id");
    fails_with("logit_bias(5);dist", "token=bias");
    fails_with("logit_bias(5=1,5=2);dist", "token 5 with bias 2: tokens must be non-negative and listed once");
    fails_with("penalties(last_n=-2);dist", "last_n=-2");
    fails_with("mirostat(m=0)", "m=0");
    fails_with("temp(nan);dist", "is not a number");
    fails_with("temp(1e39);dist", "does not fit a float");
    // 2^128 - 2^103, halfway from FLT_MAX to 2^128: rounds to inf.
    fails_with("temp(340282356779733661637539395458142568448);dist", "does not fit a float");
    fails_with("logit_bias(0=-340282356779733661637539395458142568448);dist", "does not fit a float");
}

TEST_CASE("the largest floats survive the describe() round trip")
{
    // describe() writes FLT_MAX as 3.4028235e+38, a little above it; parse() once refused that,
    // so a chain holding FLT_MAX described itself as text that did not parse (found by fuzzing).
    constexpr float max = std::numeric_limits<float>::max();
    // The last: the largest double below the midpoint that rounds to inf.
    for (const char* text : {"temp(3.4028234e38);greedy", "temp(-3.4028235e+38);greedy",
                             "logit_bias(0=3.4028235e38,1=-3.4028235e38);greedy", "temp(3.4028235677973362e38);greedy"}) {
        CAPTURE(text);
        const qs::chain c = qs::chain::parse(text);
        const std::string described = c.describe();
        CHECK(qs::chain::parse(described).describe() == described);
    }
    CHECK(qs::chain::parse("temp(3.4028235e+38);greedy").describe() == "temp(t=3.4028235e+38);greedy");
    CHECK(qs::chain::parse("temp(3.4028235677973362e38);greedy").describe() == "temp(t=3.4028235e+38);greedy");
    const qs::chain biased = qs::chain::parse("logit_bias(0=3.4028235e38,1=-3.4028235e38);greedy");
    const auto* bias = biased[0].get<qs::logit_bias>();
    REQUIRE(bias != nullptr);
    CHECK(bias->biases()[0].second == max);
    CHECK(bias->biases()[1].second == -max);
}

TEST_CASE("sample is select then accept; final candidates carry probabilities")
{
    const auto logits = model_logits(5000, 1);
    qs::chain a = qs::chain::parse(every_sampler);
    qs::chain b = a;
    for (int step = 0; step < 40; ++step) {
        const std::int32_t token = a.sample(logits);
        const std::int32_t selected = b.select(logits);
        CHECK(token == selected);
        const auto final_set = b.final_candidates();
        double total = 0;
        bool found = false;
        for (const auto& t : final_set) {
            total += t.p;
            found = found || t.id == token;
        }
        CHECK(found);
        CHECK(total == doctest::Approx(1.0).epsilon(1e-5));
        b.accept(selected);
    }
    CHECK(a.describe() == b.describe());
}

TEST_CASE("copies are deep: a copy continues exactly as the original, independently")
{
    const auto logits = model_logits(3000, 2);
    for (const char* text : {every_sampler, "penalties(last_n=8,repeat=1.3);mirostat(5,0.1,100,3)",
                             "dry(multiplier=1,allowed_length=1);mirostat_v2(tau=3,eta=0.3,seed=4)"}) {
        CAPTURE(text);
        qs::chain original = qs::chain::parse(text);
        for (int i = 0; i < 10; ++i) {
            (void)original.sample(logits);
        }
        qs::chain copy = original;
        std::vector<std::int32_t> from_original;
        std::vector<std::int32_t> from_copy;
        for (int i = 0; i < 30; ++i) {
            from_original.push_back(original.sample(logits));
        }
        for (int i = 0; i < 30; ++i) {
            from_copy.push_back(copy.sample(logits));
        }
        CHECK(from_original == from_copy);
        // The mirostat state moved with the copy, not with a shared object.
        if (auto* m = copy[copy.size() - 1].get<qs::mirostat>()) {
            CHECK(m->mu() == original[original.size() - 1].get<qs::mirostat>()->mu());
            copy.reset();
            CHECK(m->mu() == 10.0f);
            CHECK(original[original.size() - 1].get<qs::mirostat>()->mu() != 10.0f);
        }
    }
}

TEST_CASE("reseed: the same seed repeats the same tokens, another seed gives others")
{
    const auto logits = model_logits(2000, 3);
    qs::chain c = qs::chain::parse("top_k(200);temp(1.5);dist");
    const auto run = [&](std::uint64_t seed) {
        c.reseed(seed);
        std::vector<std::int32_t> tokens;
        for (int i = 0; i < 50; ++i) {
            tokens.push_back(c.sample(logits));
        }
        return tokens;
    };
    const auto first = run(11);
    CHECK(run(12) != first);
    CHECK(run(11) == first);
    CHECK(qs::chain::parse("top_k(200);temp(1.5);dist(seed=11)").describe() == c.describe());
}

TEST_CASE("seed_written: a seed given by name or by position, and only then")
{
    // Each sampler that takes a seed, with every positional value up to its seed: parse() must
    // read the last one as the seed (so seed_written's positions agree with the samplers'), and
    // the same part without it must leave the seed to its default. Each is followed by greedy,
    // so that xtc, which selects nothing, makes a chain.
    const char* const positional[][2] = {
        {"dist(7)", "dist"},
        {"xtc(0.5,0.1,1,7)", "xtc(0.5,0.1,1)"},
        {"mirostat(5,0.1,100,7)", "mirostat(5,0.1,100)"},
        {"mirostat_v2(5,0.1,7)", "mirostat_v2(5,0.1)"},
        {"adaptive_p(0.5,0.9,7)", "adaptive_p(0.5,0.9)"},
    };
    for (const auto& [with_seed, without_seed] : positional) {
        const std::string with = std::string(with_seed) + ";greedy";
        CAPTURE(with);
        const qs::chain seeded = qs::chain::parse(with);
        CHECK(seeded.describe().find("seed=7") != std::string::npos);
        CHECK(seeded.seed_written(0));
        CHECK_FALSE(seeded.seed_written(1));
        CHECK_FALSE(qs::chain::parse(std::string(without_seed) + ";greedy").seed_written(0));
        // describe() names every parameter, so its text writes the seed by name.
        CHECK(qs::chain::parse(seeded.describe()).seed_written(0));
    }
    const qs::chain c = qs::chain::parse("top_k(40);xtc(0.5,0.1);temp(0.8);dist(seed=0)");
    CHECK_FALSE(c.seed_written(0)); // top_k takes no seed
    CHECK_FALSE(c.seed_written(1));
    CHECK_FALSE(c.seed_written(2));
    CHECK(c.seed_written(3)); // written, even as the default value
    CHECK(qs::chain::parse("xtc(0.5, seed=3);dist").seed_written(0));
    CHECK_FALSE(qs::chain::parse("xtc(0.5, seed=3);dist").seed_written(1));
    CHECK_THROWS_AS((void)c.seed_written(4), std::out_of_range);

    qs::chain built;
    built.add(qs::dist(7));
    CHECK_FALSE(built.seed_written(0)); // add() has no text
    qs::chain copy = c;
    copy.reseed(5);
    CHECK(copy.seed_written(3));
}

TEST_CASE("bad logits: qk::error before any sampler changes")
{
    qs::chain c = qs::chain::parse("penalties(last_n=4,repeat=2);top_k(5);dist(seed=1)");
    const auto logits = model_logits(100, 4);
    (void)c.sample(logits);
    const qs::chain before = c;
    const std::vector<float> empty;
    const std::vector<float> all_minus_inf(50, -inf);
    const std::vector<float> all_nan(50, std::numeric_limits<float>::quiet_NaN());
    CHECK_THROWS_WITH_AS(c.sample(empty), doctest::Contains("empty"), qk::error);
    CHECK_THROWS_WITH_AS(c.sample(all_minus_inf), doctest::Contains("all 50 logits are -inf or NaN"), qk::error);
    CHECK_THROWS_AS(c.sample(all_nan), qk::error);
    CHECK_THROWS_AS(c.accept(-1), qk::error);
    qs::chain same = before;
    for (int i = 0; i < 10; ++i) {
        CHECK(c.sample(logits) == same.sample(logits));
    }
    // NaN counts as -inf: a single finite logit among NaNs is the only candidate.
    std::vector<float> one_finite(50, std::numeric_limits<float>::quiet_NaN());
    one_finite[17] = -3.0f;
    CHECK(qs::chain::parse("top_k(3);top_p(0.9);dist").sample(one_finite) == 17);
    CHECK(qs::chain::parse("greedy").sample(one_finite) == 17);
    CHECK(qs::chain::parse("dist").sample(one_finite) == 17);
    qs::chain incomplete;
    incomplete.add(qs::top_k(3));
    CHECK_THROWS_WITH_AS(incomplete.sample(logits), doctest::Contains("selects no token"), qk::error);
    CHECK_THROWS_AS((void)qs::chain().final_candidates(), qk::error);
}

TEST_CASE("a chain is a sampler: nested chains sample as the flat chain does")
{
    const auto logits = model_logits(4000, 5);
    qs::chain inner = qs::chain::parse("top_k(50);top_p(0.9);dist(seed=3)");
    qs::chain outer;
    outer.add(qs::penalties({.last_n = 8, .repeat = 1.5f})).add(inner);
    qs::chain flat = qs::chain::parse("penalties(last_n=8,repeat=1.5);top_k(50);top_p(0.9);dist(seed=3)");
    for (int i = 0; i < 30; ++i) {
        CHECK(outer.sample(logits) == flat.sample(logits));
    }
}

TEST_CASE("sample_batch: active sequences sampled as alone, inactive ones untouched")
{
    constexpr std::size_t n_seq = 6;
    constexpr std::size_t n_vocab = 3000;
    std::vector<float> matrix;
    for (std::size_t s = 0; s < n_seq; ++s) {
        const auto row = model_logits(n_vocab, 100 + static_cast<std::uint32_t>(s));
        matrix.insert(matrix.end(), row.begin(), row.end());
    }
    std::vector<qs::chain> chains;
    for (std::size_t s = 0; s < n_seq; ++s) {
        chains.push_back(qs::chain::parse("penalties(last_n=16,repeat=1.2);top_k(40);top_p(0.95);temp(0.8);dist"));
        chains.back().reseed(s);
    }
    std::vector<qs::chain> alone = chains;
    std::vector<qs::chain> threaded = chains;
    qk::backend::cpu::thread_pool pool(3);
    std::vector<std::int32_t> tokens(n_seq);
    std::vector<std::int32_t> threaded_tokens(n_seq);
    for (int step = 0; step < 12; ++step) {
        std::vector<std::uint8_t> active(n_seq);
        for (std::size_t s = 0; s < n_seq; ++s) {
            active[s] = static_cast<std::uint8_t>((s + static_cast<std::size_t>(step)) % 3 != 0);
        }
        qs::sample_batch(matrix, n_seq, n_vocab, chains, active, tokens);
        qs::sample_batch(pool, matrix, n_seq, n_vocab, threaded, active, threaded_tokens);
        CHECK(tokens == threaded_tokens);
        for (std::size_t s = 0; s < n_seq; ++s) {
            if (active[s]) {
                CHECK(tokens[s] == alone[s].sample(std::span<const float>(matrix).subspan(s * n_vocab, n_vocab)));
            } else {
                CHECK(tokens[s] == -1);
            }
        }
    }
    // The chains of inactive steps were not touched: each still equals its standalone twin.
    for (std::size_t s = 0; s < n_seq; ++s) {
        const auto row = std::span<const float>(matrix).subspan(s * n_vocab, n_vocab);
        CHECK(chains[s].sample(row) == alone[s].sample(row));
    }
    std::vector<std::int32_t> all_tokens(n_seq);
    qs::sample_batch(matrix, n_seq, n_vocab, chains, {}, all_tokens);
    for (const auto t : all_tokens) {
        CHECK(t >= 0);
    }

    // Errors come before any chain is used.
    const std::vector<qs::chain> saved = chains;
    std::vector<std::int32_t> out(n_seq, 5);
    CHECK_THROWS_AS(qs::sample_batch(std::span<const float>(matrix).first(100), n_seq, n_vocab, chains, {}, out), qk::error);
    CHECK_THROWS_AS(qs::sample_batch(matrix, n_seq, n_vocab, std::span<qs::chain>(chains).first(2), {}, out), qk::error);
    std::vector<float> bad = matrix;
    std::fill(bad.begin() + 4 * n_vocab, bad.begin() + 5 * n_vocab, -inf);
    CHECK_THROWS_WITH_AS(qs::sample_batch(bad, n_seq, n_vocab, chains, {}, out), doctest::Contains("sequence 4"), qk::error);
    CHECK(out == std::vector<std::int32_t>(n_seq, 5));
    // The same row inactive is fine: inactive rows are not read.
    std::vector<std::uint8_t> skip_four(n_seq, 1);
    skip_four[4] = 0;
    qs::sample_batch(bad, n_seq, n_vocab, chains, skip_four, out);
    CHECK(out[4] == -1);
    for (std::size_t s = 0; s < n_seq; ++s) {
        if (s != 4) {
            std::vector<qs::chain> twin = {saved[s]};
            CHECK(out[s] == twin[0].sample(std::span<const float>(matrix).subspan(s * n_vocab, n_vocab)));
        }
    }
}

TEST_CASE("vocabularies: the token id type bounds it, a one-token vocabulary works")
{
    const std::vector<float> one = {0.25f};
    const std::string without_bias = std::string(every_sampler).substr(std::string(every_sampler).find(';') + 1);
    CHECK(qs::chain::parse(without_bias).sample(one) == 0);
    CHECK_THROWS_WITH_AS(qs::chain::parse(every_sampler).sample(one), doctest::Contains("token 7 is outside the vocabulary of 1"),
                         qk::error);
    CHECK(qs::chain::parse("mirostat").sample(one) == 0);
    CHECK(qs::chain::parse("mirostat_v2").sample(one) == 0);
    // A span longer than INT32_MAX is rejected from its size alone (the data is never read).
    const float dummy = 0.0f;
    const std::span<const float> huge(&dummy, static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()) + 1);
    CHECK_THROWS_WITH_AS(qs::chain::parse("greedy").sample(huge), doctest::Contains("exceed the token id type"), qk::error);
}

#if defined(__linux__) && !QK_TEST_SANITIZED
namespace {

// Runs f in a child process whose address space may grow by at most `headroom` bytes; whether f
// returned normally (an exception or a signal in the child is a failure).
template <class F>
bool runs_within_address_space(std::size_t headroom, F&& f)
{
    const pid_t child = fork();
    if (child == 0) {
        long pages = 0;
        if (std::FILE* statm = std::fopen("/proc/self/statm", "r")) {
            if (std::fscanf(statm, "%ld", &pages) != 1) {
                pages = 0;
            }
            std::fclose(statm);
        }
        const rlim_t limit = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + headroom;
        const rlimit as{limit, limit};
        if (pages == 0 || setrlimit(RLIMIT_AS, &as) != 0) {
            _exit(3);
        }
        try {
            f();
        } catch (...) {
            _exit(1);
        }
        _exit(0);
    }
    int status = 0;
    return child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

} // namespace

TEST_CASE("history windows of 2^31 - 1 tokens cost what they hold, not their capacity")
{
    // penalties and DRY used to reserve their whole window when parsed: 8 GiB for the tokens and
    // 16 GiB for the counts, std::bad_alloc under an address-space limit. Here 1 GiB more than
    // the test process already maps is plenty for a few hundred tokens.
    const std::vector<float> logits = qk_inputs::normal(1000, 3.0f, 5);
    for (const char* text : {"penalties(2147483647, 1.1);dist", "dry(last_n=2147483647, multiplier=0.8);dist",
                             "penalties(last_n=2147483647, repeat=1.2);dry(last_n=2147483647, multiplier=0.8);dist(seed=3)"}) {
        CAPTURE(text);
        // The same chain with a window longer than the run: never full, so both draw the same tokens.
        std::string bounded_text(text);
        for (std::size_t at; (at = bounded_text.find("2147483647")) != std::string::npos;) {
            bounded_text.replace(at, 10, "4096");
        }
        CHECK(runs_within_address_space(std::size_t{1} << 30, [&] {
            qk::sampling::chain huge = qk::sampling::chain::parse(text);
            qk::sampling::chain bounded = qk::sampling::chain::parse(bounded_text);
            for (int i = 0; i < 200; ++i) {
                if (huge.sample(logits) != bounded.sample(logits)) {
                    throw std::runtime_error("the chains drew different tokens");
                }
            }
        }));
    }
}
#endif
