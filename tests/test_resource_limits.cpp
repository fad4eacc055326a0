// Sizes at the edge of what the types hold, through sampling and drafting: token ids up to
// 2^31 - 1 in every sampler that keeps tokens and every drafter, vocabularies past 2^31 - 1 (a clear
// qk::error before anything is read), and histories of millions of tokens (exact results, memory
// that grows with the tokens held). A real vocabulary of 2^31 - 1 logits needs 8 GiB: that case
// runs only with QKERN_LARGE_MEMORY_TESTS set.
#include <doctest/doctest.h>

#include <sampling/batch.hpp>
#include <sampling/chain.hpp>
#include <spec/ngram_index.hpp>
#include <spec/ngram_map.hpp>
#include <spec/ngram_mod.hpp>
#include <spec/ngram_simple.hpp>
#include <spec/suffix_drafter.hpp>
#include <spec/token_history.hpp>
#include <spec/verify.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "inputs.hpp"

namespace {

namespace qs = qk::sampling;
namespace spec = qk::spec;

constexpr std::int32_t top_id = std::numeric_limits<std::int32_t>::max();

// A history that repeats itself, so that drafters find matches, over ids spread across the whole
// int32 range, 2^31 - 1 included (hashes and comparisons must not overflow or collide on them).
std::vector<std::int32_t> wide_id_history(std::size_t length, std::uint32_t seed)
{
    std::mt19937 engine(seed);
    const std::vector<std::int32_t> alphabet{0, 1, 2, top_id, top_id - 1, 1 << 30, 65535, 65536, 12345678};
    std::vector<std::int32_t> phrase(40);
    for (auto& t : phrase) {
        t = alphabet[engine() % alphabet.size()];
    }
    std::vector<std::int32_t> h;
    while (h.size() < length) {
        if (engine() % 3 == 0) {
            h.push_back(alphabet[engine() % alphabet.size()]);
        } else {
            const std::size_t from = engine() % phrase.size();
            for (std::size_t i = from; i < phrase.size() && h.size() < length; ++i) {
                h.push_back(phrase[i]);
            }
        }
    }
    return h;
}

bool all_from(const std::vector<std::int32_t>& draft, const std::vector<std::int32_t>& history)
{
    return std::ranges::all_of(draft, [&](std::int32_t t) { return std::ranges::find(history, t) != history.end(); });
}

} // namespace

TEST_CASE("resource limits: token ids up to 2^31 - 1 through the samplers that keep tokens")
{
    constexpr std::size_t vocab = 100;
    for (const char* text : {"penalties(-1,1.3,0.2,0.1);dist(1)", "penalties(8,1.3);dry(0.8,1.75,2,-1);top_k(10);dist(2)",
                             "logit_bias(99=5,3=-inf);dry(0.8,1.75,1,16);greedy", "dry(0.8,1.75,2,-1);mirostat_v2(5,0.1,3)"}) {
        CAPTURE(std::string(text));
        qs::chain c = qs::chain::parse(text);
        // The ids outside the vocabulary are the caller's (another model's, a special token) and
        // must neither be selected nor disturb the ones inside.
        for (std::uint32_t step = 0; step < 200; ++step) {
            const std::vector<float> logits = qk_inputs::normal(vocab, 2.0f, step);
            const std::int32_t token = c.sample(logits);
            REQUIRE(token >= 0);
            REQUIRE(token < static_cast<std::int32_t>(vocab));
            CHECK(logits[static_cast<std::size_t>(token)] > -std::numeric_limits<float>::infinity());
            c.accept(step % 3 == 0 ? top_id : static_cast<std::int32_t>(step % 7) + top_id - 10);
        }
        CHECK(qs::chain::parse(c.describe()).describe() == c.describe());
    }

    // A bias is for a token of the vocabulary: one past it is refused when the logits come.
    qs::chain biased = qs::chain::parse("logit_bias(2147483647=5);greedy");
    CHECK_THROWS_WITH_AS((void)biased.sample(qk_inputs::normal(vocab, 1.0f, 1)), doctest::Contains("outside the vocabulary"), qk::error);

    // penalties' counts at 2^31 - 1 are exact: compared with a histogram counted here.
    qs::chain c = qs::chain::parse("penalties(-1,1.1);greedy");
    std::map<std::int32_t, std::int32_t> histogram;
    for (std::int32_t i = 0; i < 5000; ++i) {
        const std::int32_t id = i % 5 == 0 ? top_id : top_id - i % 13;
        c.accept(id);
        ++histogram[id];
    }
    const auto* p = c[0].get<qs::penalties>();
    REQUIRE(p != nullptr);
    CHECK(std::ranges::equal(p->counts(), histogram, [](const auto& a, const auto& b) { return a.first == b.first && a.second == b.second; }));
}

TEST_CASE("resource limits: vocabularies past 2^31 - 1 are refused before a logit is read")
{
    // The spans claim more floats than exist; the calls must refuse them by their size alone.
    const float one = 0.0f;
    const std::size_t past = static_cast<std::size_t>(top_id) + 1;
    qs::chain c = qs::chain::parse("top_k(4);dist(1)");
    CHECK_THROWS_WITH_AS((void)c.sample(std::span<const float>(&one, past)), doctest::Contains("exceed the token id type"), qk::error);
    CHECK_THROWS_AS((void)c.select(std::span<const float>(&one, std::numeric_limits<std::size_t>::max() / 4)), qk::error);

    // A batch whose n_seq * n_vocab wraps to the span's size must not pass for a matching one.
    std::vector<qs::chain> chains(2, qs::chain::parse("greedy"));
    std::vector<std::int32_t> tokens(2, -7);
    const std::size_t n_vocab = std::size_t{1} << 63;
    CHECK_THROWS_AS(qs::sample_batch(std::span<const float>(&one, 0), 2, n_vocab, chains, {}, tokens), qk::error);
    CHECK_THROWS_WITH_AS(qs::sample_batch(std::span<const float>(&one, past * 2), 2, past, chains, {}, tokens),
                         doctest::Contains("exceeds the token id type"), qk::error);
    CHECK(tokens == std::vector<std::int32_t>(2, -7));
}

TEST_CASE("resource limits: a vocabulary of exactly 2^31 - 1 logits (8 GiB; QKERN_LARGE_MEMORY_TESTS)")
{
    if (std::getenv("QKERN_LARGE_MEMORY_TESTS") == nullptr) {
        MESSAGE("skipped: set QKERN_LARGE_MEMORY_TESTS to run it (it needs 8 GiB for the logits and up to 18 GiB of address space)");
        return;
    }
    // Under an address-space limit, so that a pass needing more than the machine has is a failed
    // allocation (qk::error) rather than the kernel's out-of-memory killer: a candidate list of the
    // whole vocabulary alone is 24 GiB.
    rlimit old_limit{};
    REQUIRE(getrlimit(RLIMIT_AS, &old_limit) == 0);
    const rlimit limit{std::size_t{18} << 30, old_limit.rlim_max};
    REQUIRE(setrlimit(RLIMIT_AS, &limit) == 0);
    {
        const auto vocab = static_cast<std::size_t>(top_id);
        std::vector<float> logits(vocab);
        for (std::size_t i = 0; i < vocab; ++i) {
            logits[i] = static_cast<float>(i % 1021) * 0.001f;
        }
        // The largest logit at the largest id: any index that overflows past 2^31 - 2 misses it.
        logits[vocab - 1] = 50.0f;
        logits[vocab - 2] = 49.0f;
        for (const char* text : {"greedy", "top_k(3);temp(0.5);dist(1)", "penalties(4,2.0);min_p(0.5);dist(2)", "top_p(0.5);dist(3)",
                                 "temp(0.8);dist(4)"}) {
            CAPTURE(std::string(text));
            qs::chain c = qs::chain::parse(text);
            try {
                const std::int32_t token = c.sample(logits);
                // With these logits every chain keeps only the top two ids, the first far more likely.
                CHECK((token == top_id - 1 || token == top_id - 2));
                MESSAGE(std::string(text), ": token ", token);
            } catch (const qk::error& e) {
                CHECK(std::string(e.what()).find("out of memory") != std::string::npos);
                MESSAGE(std::string(text), ": ", std::string(e.what()));
            }
        }
    }
    REQUIRE(setrlimit(RLIMIT_AS, &old_limit) == 0);
}

TEST_CASE("resource limits: drafters over histories of ids up to 2^31 - 1 and millions of tokens")
{
    const std::vector<std::int32_t> tokens = wide_id_history(1'200'000, 5);
    spec::token_history history;
    history.append(std::span(tokens).first(1'000'000));

    const spec::ngram_config config{.size_ngram = 3, .size_mgram = 8, .check_rate = 1};
    spec::ngram_simple simple(config);
    spec::ngram_index index(config);
    spec::ngram_map map({.size_ngram = 3, .size_mgram = 8, .check_rate = 1, .min_hits = 1, .values = true});
    spec::ngram_mod_config mod_config;
    mod_config.size_ngram = 3;
    mod_config.min_draft = 1;
    mod_config.max_draft = 8;
    spec::ngram_mod mod(mod_config);
    spec::suffix_drafter suffix({.max_draft = 8, .min_match = 3, .min_confidence = 0.1, .max_depth = 16, .check_rate = 1});
    std::size_t drafted = 0;
    for (std::size_t length : {std::size_t{1'000'000}, std::size_t{1'100'000}, std::size_t{1'199'990}}) {
        CAPTURE(length);
        if (length > history.size()) {
            history.append(std::span(tokens).subspan(history.size(), length - history.size()));
        }
        const std::int32_t sampled = tokens[length];
        // ngram_index is documented to draft exactly what ngram_simple's scan does.
        const std::vector<std::int32_t> expected = simple.draft(history, sampled);
        CHECK(index.draft(history, sampled) == expected);
        drafted += expected.size();
        for (const auto& draft : {map.draft(history, sampled), mod.draft(history, sampled), suffix.draft(history, sampled)}) {
            CHECK(draft.size() <= 64);
            CHECK(all_from(draft, tokens));
        }
        // A rejected draft cuts the history back; the index must follow the cut exactly.
        history.cut(length - 17);
        CHECK(index.draft(history, tokens[length - 17]) == simple.draft(history, tokens[length - 17]));
    }
    CHECK(drafted > 0); // the history repeats: the comparison above is not of empty drafts

    // verify_greedy over a draft of ids at the top of the range.
    const std::vector<std::int32_t> draft{top_id, top_id - 1, 0, top_id};
    const std::vector<std::int32_t> target{top_id, top_id - 1, 1, top_id, 5};
    CHECK(spec::verify_greedy(draft, target).accepted == 2);
}
