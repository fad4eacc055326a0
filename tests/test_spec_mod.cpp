// qk::spec::ngram_mod and ngram_pool against a plain reference written from llama.cpp's
// `ngram-mod` (its hash, a vector pool, the chunked adds and the walk), on every draft over
// random and text-like sequences with appends, cuts and regrowth, with one pool shared by two
// drafters, tiny pools whose collisions are worked out by hand, and errors; and
// qk::spec::drafter_selection with scripted drafters (choices, scores and statistics worked out by
// hand), with drafters of known quality against a reference of its rule, and with real drafters
// under replay.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include <kernels/error.hpp>
#include <spec/drafter_selection.hpp>
#include <spec/ngram_config.hpp>
#include <spec/ngram_mod.hpp>
#include <spec/ngram_simple.hpp>
#include <spec/replay.hpp>
#include <spec/token_history.hpp>

#include "spec_support.hpp"

namespace {

using namespace qk_test::spec;

using token = std::int32_t;
using tokens = std::vector<token>;
using qk::spec::ngram_mod;
using qk::spec::ngram_mod_config;
using qk::spec::ngram_pool;
using qk::spec::token_history;

static_assert(qk::spec::history_drafter<ngram_mod>);

// ---- the reference, written plainly from llama.cpp's common_ngram_mod and its state -----------

struct reference_pool {
    std::size_t n;
    std::vector<token> entries;

    reference_pool(std::size_t n_, std::size_t size) : n(n_), entries(size, -1) {}

    // llama.cpp's idx(): res = res * 6364136223846793005 + tokens[i] in size_t, then res % size.
    [[nodiscard]] std::size_t slot(const token* key) const
    {
        std::uint64_t res = 0;
        for (std::size_t i = 0; i < n; ++i) {
            res = res * 6364136223846793005ull + static_cast<std::uint64_t>(key[i]);
        }
        return static_cast<std::size_t>(res % entries.size());
    }
    void add(const token* ngram_and_next) { entries[slot(ngram_and_next)] = ngram_and_next[n]; }
    [[nodiscard]] token get(const token* key) const { return entries[slot(key)]; }
    void reset() { std::fill(entries.begin(), entries.end(), -1); }
};

// One sequence's state. It keeps its own copy of the sequence and is told of every edit: what
// llama.cpp's i_last must forget is derived from the edits, not from token_history's marks.
struct reference_drafter {
    reference_pool* pool;
    ngram_mod_config c;
    tokens sequence;
    std::size_t i_last = 0;
    std::size_t n_draft_last = 0;
    int n_low = 0;
    std::size_t length_seen = 0;                                  // at the previous draft
    std::size_t first_rewritten = std::numeric_limits<std::size_t>::max(); // lowest cut since then
    int resets = 0;

    void append(token t) { sequence.push_back(t); }
    void cut(std::size_t length)
    {
        sequence.resize(length);
        first_rewritten = std::min(first_rewritten, length);
    }
    void replaced() { first_rewritten = 0; } // a new history: every position is new to a reader

    tokens draft(token id_last)
    {
        const std::size_t n = pool->n;
        // The deliberate difference from llama.cpp: n-grams reading a rewritten position are
        // added again.
        const std::size_t keep = std::min(length_seen, first_rewritten);
        i_last = std::min(i_last, keep >= n ? keep - n : 0);
        length_seen = sequence.size();
        first_rewritten = std::numeric_limits<std::size_t>::max();

        n_draft_last = 0;
        const std::size_t cur_len = sequence.size();
        if (cur_len < n) {
            return {};
        }
        if (i_last + static_cast<std::size_t>(c.add_chunk) < cur_len) {
            for (std::size_t i = i_last; i < cur_len - n; ++i) {
                pool->add(sequence.data() + i);
            }
            i_last = cur_len - n;
        }
        tokens result(sequence.end() - static_cast<std::ptrdiff_t>(n - 1), sequence.end());
        result.push_back(id_last);
        for (int i = 0; i < c.max_draft; ++i) {
            const token t = pool->get(result.data() + i);
            if (t == -1) {
                if (i < c.min_draft) {
                    return {};
                }
                break;
            }
            result.push_back(t);
        }
        result.erase(result.begin(), result.begin() + static_cast<std::ptrdiff_t>(n));
        n_draft_last = result.size();
        return result;
    }

    void accept(int n_accepted)
    {
        if (n_draft_last > 0) {
            const double f_acc = double(n_accepted) / double(n_draft_last);
            if (f_acc < c.low_acceptance) {
                n_low++;
                if (n_low >= c.low_streak) {
                    pool->reset();
                    n_low = 0;
                    i_last = 0;
                    ++resets;
                }
            } else {
                n_low = 0;
            }
        }
    }
};

// ---- sequences -------------------------------------------------------------------------------

// Text-like: a few phrases of 6 .. 40 tokens over a vocabulary of 1000, chosen at random one after
// another, each token replaced by a random one with probability `noise`.
tokens text_like(std::uint64_t seed, std::size_t length, double noise)
{
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<token> vocabulary(0, 999);
    std::vector<tokens> phrases(7);
    for (auto& p : phrases) {
        p.resize(std::uniform_int_distribution<std::size_t>(6, 40)(rng));
        for (auto& t : p) {
            t = vocabulary(rng);
        }
    }
    tokens out;
    while (out.size() < length) {
        for (const token t : phrases[std::uniform_int_distribution<std::size_t>(0, phrases.size() - 1)(rng)]) {
            out.push_back(std::bernoulli_distribution(noise)(rng) ? vocabulary(rng) : t);
        }
    }
    out.resize(length);
    return out;
}

tokens random_tokens(std::uint64_t seed, std::size_t length, token alphabet)
{
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<token> pick(0, alphabet - 1);
    tokens out(length);
    for (auto& t : out) {
        t = pick(rng);
    }
    return out;
}

// One sequence being generated from `source`: the history, our drafter and the reference side by
// side. Each step edits the history now and then, drafts, and appends the sampled token and the
// accepted part of the draft, the target's choices being the source's next tokens.
struct generation {
    token_history history;
    ngram_mod drafter;
    reference_drafter reference;
    const tokens* source;
    std::size_t at = 0;      // the next source token
    int edit_one_in = 4;     // of the five kinds of edit, about one every 4 steps
    std::size_t nonempty = 0;

    void append(token t)
    {
        history.push_back(t);
        reference.append(t);
    }

    void step(std::mt19937_64& rng)
    {
        const std::size_t length = history.size();
        const auto back = std::min<std::size_t>(length, std::uniform_int_distribution<std::size_t>(1, 12)(rng));
        switch (std::uniform_int_distribution<int>(0, 5 * edit_one_in - 1)(rng)) {
        case 0: // a cut (a rejected draft, a regeneration)
            history.cut(length - back);
            reference.cut(length - back);
            break;
        case 1:
        case 2: // cut and regrown with other tokens before the next draft
            history.cut(length - back);
            reference.cut(length - back);
            for (std::size_t i = 0; i < back + 2; ++i) {
                append(next());
            }
            break;
        case 3: { // cut and regrown with the same tokens: still written anew
            const tokens tail(history.tokens().end() - static_cast<std::ptrdiff_t>(back), history.tokens().end());
            history.cut(length - back);
            reference.cut(length - back);
            for (const token t : tail) {
                append(t);
            }
            break;
        }
        case 4:
            if (std::bernoulli_distribution(0.1)(rng)) { // the same tokens in a new history
                history = token_history(history.tokens());
                reference.replaced();
            }
            break;
        default:
            break;
        }
        const token sampled = next();
        const tokens ours = drafter.draft(history, sampled);
        const tokens theirs = reference.draft(sampled);
        CHECK(shown{ours} == shown{theirs});
        CHECK(drafter.added() == reference.i_last);
        append(sampled);
        if (!ours.empty()) {
            ++nonempty;
            std::size_t accepted = 0;
            while (accepted < ours.size() && ours[accepted] == (*source)[(at + accepted) % source->size()]) {
                ++accepted;
            }
            // Now and then a draft is judged as if all of it had been rejected, so that the low
            // streaks that empty the pool come up.
            const auto reported = std::bernoulli_distribution(0.2)(rng) ? 0 : static_cast<int>(accepted);
            drafter.accept(reported);
            reference.accept(reported);
            for (std::size_t i = 0; i < accepted; ++i) {
                append(next());
            }
        }
    }

    token next()
    {
        const token t = (*source)[at % source->size()];
        ++at;
        return t;
    }
};

bool same_entries(const ngram_pool& pool, const reference_pool& reference)
{
    return std::equal(pool.entries().begin(), pool.entries().end(), reference.entries.begin(), reference.entries.end());
}

ngram_mod_config small_config(std::int32_t n, std::int32_t min_draft, std::int32_t max_draft, std::int32_t add_chunk, std::size_t pool_size)
{
    ngram_mod_config c;
    c.size_ngram = n;
    c.min_draft = min_draft;
    c.max_draft = max_draft;
    c.add_chunk = add_chunk;
    c.pool_size = pool_size;
    return c;
}

} // namespace

TEST_CASE("ngram_pool: llama.cpp's hash and index, by hand")
{
    constexpr std::uint64_t m = 6364136223846793005ull;
    // One token: the token itself, -1 as 2^64 - 1.
    CHECK(ngram_pool::hash(tokens{5}) == 5u);
    CHECK(ngram_pool::hash(tokens{-1}) == 18446744073709551615ull);
    // Two tokens: a * m + b.
    CHECK(ngram_pool::hash(tokens{1, 2}) == 6364136223846793007ull);
    CHECK(ngram_pool::hash(tokens{2, 0}) == 12728272447693586010ull); // 2m < 2^64
    CHECK(ngram_pool::hash(tokens{3, 0}) == 645664597830827399ull);   // 3m - 2^64
    // Three tokens: m^2 mod 2^64 (computed with Python's unbounded integers).
    CHECK(ngram_pool::hash(tokens{1, 0, 0}) == 7520897724310334953ull);
    CHECK(ngram_pool::hash(tokens{1, 0, 0}) == m * m);

    // The entry: the hash modulo the pool's size. m ends in ...005, so m + 2 ends in ...007.
    const ngram_pool thousand(2, 1000);
    CHECK(thousand.index(tokens{1, 2}) == 7u);
    CHECK(thousand.index(tokens{3, 0}) == 399u);
    // m = 1 (mod 4) and 2^64 = 0 (mod 4): in a pool of 4 entries, a key's entry is the sum of its
    // tokens modulo 4.
    const ngram_pool four(3, 4);
    CHECK(four.index(tokens{7, -3, 5}) == 1u);
    CHECK(four.index(tokens{2, 2, 2}) == 2u);
    CHECK(four.index(tokens{0, 0, 3}) == 3u);
}

TEST_CASE("ngram_pool: the rolled hash is the hash of the next n tokens")
{
    const tokens sequence = random_tokens(11, 400, 100000);
    for (const std::int32_t n : {1, 2, 3, 7, 24}) {
        const ngram_pool pool(n, 97);
        const auto size = static_cast<std::size_t>(n);
        std::uint64_t h = ngram_pool::hash(std::span(sequence).first(size));
        for (std::size_t i = 0; i + size < sequence.size(); ++i) {
            h = pool.roll(h, sequence[i], sequence[i + size]);
            CHECK(h == ngram_pool::hash(std::span(sequence).subspan(i + 1, size)));
        }
    }
}

TEST_CASE("ngram_pool: add, get, overwrites, used and reset")
{
    ngram_pool pool(2, 4); // entry = (a + b) mod 4
    CHECK(pool.size() == 4u);
    CHECK(pool.size_bytes() == 16u);
    CHECK(pool.used() == 0u);
    pool.add(tokens{1, 2, 9}); // entry 3
    CHECK(pool.get(tokens{1, 2}) == 9);
    CHECK(pool.get(tokens{0, 3}) == 9); // another key on entry 3 reads what is there
    CHECK(pool.get(tokens{2, 2}) == ngram_pool::empty);
    CHECK(pool.used() == 1u);
    pool.add(tokens{0, 3, 5}); // entry 3, overwritten
    CHECK(pool.get(tokens{1, 2}) == 5);
    CHECK(pool.used() == 1u);
    pool.add(tokens{2, 0, 7}); // entry 2
    CHECK(pool.used() == 2u);
    CHECK(pool.occupancy() == 0.5);
    pool.add(tokens{1, 1, -1}); // entry 2 written empty
    CHECK(pool.used() == 1u);
    CHECK(pool.get(tokens{2, 0}) == ngram_pool::empty);
    pool.reset();
    CHECK(pool.used() == 0u);
    CHECK(std::all_of(pool.entries().begin(), pool.entries().end(), [](token t) { return t == ngram_pool::empty; }));
}

TEST_CASE("ngram_mod: drafts from pools of 1 and 2 entries, by hand")
{
    // history 1 2 3 4 5, n = 2, adds on every call: (1,2)->3, (2,3)->4, (3,4)->5.
    const token_history five(tokens{1, 2, 3, 4, 5});
    SUBCASE("one entry: every key reads the last token added")
    {
        ngram_mod drafter(small_config(2, 0, 4, 0, 1));
        CHECK(shown{drafter.draft(five, 7)} == shown{{5, 5, 5, 5}});
        CHECK(drafter.added() == 3u);
        CHECK(drafter.pool().used() == 1u);
        CHECK(drafter.last_draft_length() == 4);
    }
    // history 1 2 3 4 6: entry = (a + b) mod 2; (1,2)->3, (2,3)->4, (3,4)->6 all land on entry 1.
    // Sampled 7: (6,7) -> 6, (7,6) -> 6, then (6,6) on entry 0, empty.
    const token_history six(tokens{1, 2, 3, 4, 6});
    SUBCASE("two entries, the walk stops at an empty entry")
    {
        ngram_mod drafter(small_config(2, 0, 4, 0, 2));
        CHECK(shown{drafter.draft(six, 7)} == shown{{6, 6}});
        CHECK(drafter.pool().entries()[0] == ngram_pool::empty);
        CHECK(drafter.pool().entries()[1] == 6);
    }
    SUBCASE("a walk shorter than min_draft drafts nothing")
    {
        ngram_mod at_two(small_config(2, 2, 4, 0, 2));
        CHECK(shown{at_two.draft(six, 7)} == shown{{6, 6}});
        ngram_mod at_three(small_config(2, 3, 4, 0, 2));
        CHECK(at_three.draft(six, 7).empty());
        CHECK(at_three.last_draft_length() == 0);
    }
    SUBCASE("a history shorter than n drafts nothing and adds nothing")
    {
        ngram_mod drafter(small_config(3, 0, 4, 0, 1));
        CHECK(drafter.draft(token_history(tokens{1, 2}), 3).empty());
        CHECK(drafter.pool().used() == 0u);
    }
}

TEST_CASE("ngram_mod: new n-grams wait until more than add_chunk tokens are unread")
{
    // n = 2. History 1 2 3 1: the n-grams starting at 0 and 1, (1,2)->3 and (2,3)->1, can be added;
    // the one at 2 has no next token yet. Sampled 2: (1,2)->3, (2,3)->1, (3,1) never added.
    const token_history history(tokens{1, 2, 3, 1});
    ngram_mod eager(small_config(2, 0, 8, 3, 1 << 16)); // 0 + 3 < 4: added
    CHECK(shown{eager.draft(history, 2)} == shown{{3, 1}});
    CHECK(eager.added() == 2u);
    CHECK(eager.pool().used() == 2u);
    CHECK(eager.pool().get(tokens{3, 1}) == ngram_pool::empty); // no collision with the two
    ngram_mod lagging(small_config(2, 0, 8, 4, 1 << 16)); // 0 + 4 < 4 fails: not yet
    CHECK(lagging.draft(history, 2).empty());
    CHECK(lagging.added() == 0u);
    CHECK(lagging.pool().used() == 0u);
    token_history longer = history;
    longer.push_back(2); // 0 + 4 < 5: now (1,2)->3, (2,3)->1, (3,1)->2
    CHECK(shown{lagging.draft(longer, 3)} == shown{{1, 2, 3, 1, 2, 3, 1, 2}});
    CHECK(lagging.added() == 3u);
}

TEST_CASE("ngram_mod: low acceptance empties the pool and the history is added again")
{
    // n = 2, history 1 2 3 1 2 3 1 2, sampled 3: three distinct n-grams (1,2)->3, (2,3)->1,
    // (3,1)->2; the walk from (2,3) cycles: 1 2 3 1.
    const token_history history(tokens{1, 2, 3, 1, 2, 3, 1, 2});
    ngram_mod drafter(small_config(2, 0, 4, 0, 1 << 20)); // low below 1/4 of 4 tokens, 5 in a row
    const shown cycle{{1, 2, 3, 1}};
    const auto low = [&] {
        CHECK(shown{drafter.draft(history, 3)} == cycle);
        drafter.accept(0);
    };
    CHECK(shown{drafter.draft(history, 3)} == cycle);
    CHECK(drafter.pool().used() == 3u); // no collisions among the three
    drafter.accept(0);
    low();
    low();
    low(); // four lows
    CHECK(shown{drafter.draft(history, 3)} == cycle);
    drafter.accept(1); // 1/4 is not below 1/4: the streak restarts
    low();
    low();
    low();
    low(); // four lows again
    CHECK(drafter.pool().used() == 3u);
    CHECK(drafter.added() == 6u);
    low(); // the fifth in a row
    CHECK(drafter.pool().used() == 0u);
    CHECK(drafter.added() == 0u);
    // The next draft adds the whole history again.
    CHECK(shown{drafter.draft(history, 3)} == cycle);
    CHECK(drafter.pool().used() == 3u);
    CHECK(drafter.added() == 6u);
    drafter.accept(0);
    low();
    low();
    low(); // four lows
    // An empty draft (a history shorter than n) is not judged: no fifth low.
    CHECK(drafter.draft(token_history(tokens{9}), 9).empty());
    drafter.accept(0);
    CHECK(drafter.pool().used() == 3u);
    low(); // this one is the fifth
    CHECK(drafter.pool().used() == 0u);
}

TEST_CASE("ngram_mod: begin adds a prompt at once and empties a pool used beyond reset_occupancy")
{
    // n = 1 and 4 entries: a token's entry is itself modulo 4. Prompt 1 2 3: 1->2 on entry 1,
    // 2->3 on entry 2: half the pool.
    const token_history prompt(tokens{1, 2, 3});
    auto config = small_config(1, 0, 4, 32, 4);
    ngram_mod emptied(config); // 0.5 > 0.25
    emptied.begin(prompt);
    CHECK(emptied.pool().used() == 0u);
    CHECK(emptied.added() == 2u);
    config.reset_occupancy = 0.5;
    ngram_mod kept(config); // 0.5 > 0.5 fails
    kept.begin(prompt);
    CHECK(kept.pool().used() == 2u);
    CHECK(kept.added() == 2u);
    // Sampled 1: 1->2, 2->3, then 3 is empty (add_chunk 32 adds nothing more).
    CHECK(shown{kept.draft(prompt, 1)} == shown{{2, 3}});
}

TEST_CASE("ngram_mod equals the reference on every draft, with appends, cuts and regrowth")
{
    const std::vector<ngram_mod_config> configs = {
        small_config(3, 0, 8, 0, 4096),  small_config(4, 2, 16, 5, 1 << 16), small_config(2, 1, 6, 32, 61),
        small_config(1, 0, 4, 1, 7),     small_config(5, 3, 12, 2, 257),
        small_config(24, 48, 64, 32, 1 << 16), // llama.cpp's defaults in a smaller pool
    };
    const std::vector<tokens> sources = {text_like(1, 6000, 0.02), text_like(2, 6000, 0.1), random_tokens(3, 6000, 3)};
    std::size_t nonempty = 0;
    std::size_t long_drafts = 0;
    int resets = 0;
    std::uint64_t seed = 100;
    for (const auto& config : configs) {
        for (const auto& source : sources) {
            CAPTURE(config.size_ngram);
            CAPTURE(config.pool_size);
            CAPTURE(seed);
            std::mt19937_64 rng(seed++);
            reference_pool pool(static_cast<std::size_t>(config.size_ngram), config.pool_size);
            generation g{token_history{}, ngram_mod(config), reference_drafter{&pool, config, {}}, &source};
            // A match of 24 tokens and a walk of 48 need long stretches without an edit.
            g.edit_one_in = config.size_ngram > 8 ? 40 : 4;
            for (int i = 0; i < 1500; ++i) {
                g.step(rng);
            }
            CHECK(same_entries(g.drafter.pool(), pool));
            nonempty += g.nonempty;
            resets += g.reference.resets;
            long_drafts += config.min_draft >= 48 ? g.nonempty : 0;
        }
    }
    // The comparisons above cover many drafts, drafts of 48 .. 64 tokens, and emptied pools.
    CHECK(nonempty > 12000u);
    CHECK(long_drafts > 10u);
    CHECK(resets > 500);
}

TEST_CASE("ngram_mod: one pool shared by two drafters on two sequences")
{
    SUBCASE("by hand: a drafter drafts what the other sequence wrote")
    {
        // n = 3, adds on every call. Sequence A: 1 10 11 12 13 14 15 16 17 18 2, whose n-grams
        // starting at 0 .. 7 are added by its draft. Sequence B ends with 10 11 and samples 12:
        // (10,11,12)->13, (11,12,13)->14, ... up to 5 tokens.
        const auto config = small_config(3, 0, 5, 0, 1 << 20);
        auto pool = std::make_shared<ngram_pool>(3, std::size_t{1} << 20);
        ngram_mod a(config, pool);
        ngram_mod b(config, pool);
        ngram_mod alone(config);
        const token_history sequence_a(tokens{1, 10, 11, 12, 13, 14, 15, 16, 17, 18, 2});
        const token_history sequence_b(tokens{5, 10, 11});
        CHECK(b.draft(sequence_b, 12).empty());
        static_cast<void>(a.draft(sequence_a, 3));
        CHECK(pool->used() == 8u); // eight n-grams, no collisions
        CHECK(shown{b.draft(sequence_b, 12)} == shown{{13, 14, 15, 16, 17}});
        CHECK(alone.draft(sequence_b, 12).empty());
        CHECK(&a.pool() == &b.pool());
    }
    SUBCASE("interleaved, against two references sharing a reference pool")
    {
        const tokens source_a = text_like(7, 5000, 0.05);
        const tokens source_b = text_like(7, 5000, 0.15); // the same phrases, more noise
        for (const auto& config : {small_config(3, 0, 8, 0, 509), small_config(4, 2, 12, 6, 1 << 14)}) {
            auto pool = std::make_shared<ngram_pool>(config.size_ngram, config.pool_size);
            reference_pool shared(static_cast<std::size_t>(config.size_ngram), config.pool_size);
            generation a{token_history{}, ngram_mod(config, pool), reference_drafter{&shared, config, {}}, &source_a};
            generation b{token_history{}, ngram_mod(config, pool), reference_drafter{&shared, config, {}}, &source_b};
            b.at = 1234;
            std::mt19937_64 rng(config.pool_size);
            for (int i = 0; i < 2000; ++i) {
                (std::bernoulli_distribution(0.5)(rng) ? a : b).step(rng);
            }
            CHECK(same_entries(*pool, shared));
            CHECK(a.nonempty > 100u);
            CHECK(b.nonempty > 100u);
        }
    }
}

TEST_CASE("ngram_mod and ngram_pool: bad configuration and arguments are qk::error")
{
    CHECK_THROWS_AS(ngram_pool(0, 16), qk::error);
    CHECK_THROWS_AS(ngram_pool(2, 0), qk::error);
    const ngram_pool pool(2, 16);
    CHECK_THROWS_AS(static_cast<void>(pool.index(tokens{1, 2, 3})), qk::error);
    CHECK_THROWS_AS(static_cast<void>(pool.get(tokens{1})), qk::error);
    ngram_pool writable(2, 16);
    CHECK_THROWS_AS(writable.add(tokens{1, 2}), qk::error);
    CHECK(writable.used() == 0u);

    const auto bad = [](auto change) {
        ngram_mod_config c = small_config(2, 0, 4, 0, 16);
        change(c);
        return c;
    };
    CHECK_THROWS_AS(ngram_mod(bad([](auto& c) { c.size_ngram = 0; })), qk::error);
    CHECK_THROWS_AS(ngram_mod(bad([](auto& c) { c.max_draft = 0; })), qk::error);
    CHECK_THROWS_AS(ngram_mod(bad([](auto& c) { c.min_draft = -1; })), qk::error);
    CHECK_THROWS_AS(ngram_mod(bad([](auto& c) { c.min_draft = 5; })), qk::error); // above max_draft
    CHECK_THROWS_AS(ngram_mod(bad([](auto& c) { c.add_chunk = -1; })), qk::error);
    CHECK_THROWS_AS(ngram_mod(bad([](auto& c) { c.low_acceptance = 1.5; })), qk::error);
    CHECK_THROWS_AS(ngram_mod(bad([](auto& c) { c.low_acceptance = std::numeric_limits<double>::quiet_NaN(); })), qk::error);
    CHECK_THROWS_AS(ngram_mod(bad([](auto& c) { c.low_streak = -1; })), qk::error);
    CHECK_THROWS_AS(ngram_mod(bad([](auto& c) { c.reset_occupancy = -0.5; })), qk::error);
    CHECK_THROWS_AS(ngram_mod(bad([](auto& c) { c.pool_size = 0; })), qk::error);
    CHECK_NOTHROW(ngram_mod(bad([](auto& c) { c.min_draft = 4; })));
    // A shared pool: none, or one hashing another n.
    CHECK_THROWS_AS(ngram_mod(small_config(2, 0, 4, 0, 16), nullptr), qk::error);
    CHECK_THROWS_AS(ngram_mod(small_config(3, 0, 4, 0, 16), std::make_shared<ngram_pool>(2, 16)), qk::error);
    ngram_mod drafter(small_config(2, 0, 4, 0, 16));
    CHECK_THROWS_AS(drafter.accept(-1), qk::error);
    // llama.cpp's defaults: n 24, drafts of 48 .. 64 tokens, 4M entries (16 MiB).
    const ngram_mod defaults;
    CHECK(defaults.config().size_ngram == 24);
    CHECK(defaults.config().min_draft == 48);
    CHECK(defaults.config().max_draft == 64);
    CHECK(defaults.pool().size() == std::size_t{4} * 1024 * 1024);
    CHECK(defaults.pool().size_bytes() == std::size_t{16} * 1024 * 1024);
}

// ---- drafter_selection -----------------------------------------------------------------------

namespace {

// Drafts what its script says, one entry per call, and records what it was told.
struct scripted {
    std::vector<tokens> script;
    std::size_t step = 0;
    std::vector<std::size_t> history_lengths;

    tokens draft(const token_history& history, token)
    {
        history_lengths.push_back(history.size());
        return step < script.size() ? script[step++] : tokens{};
    }
};
struct two_count_hook : scripted {
    std::vector<std::pair<int, int>> accepted;
    void accept(std::int32_t n_accepted, std::int32_t n_verified) { accepted.emplace_back(n_accepted, n_verified); }
};
struct one_count_hook : scripted {
    std::vector<int> accepted;
    void accept(std::int32_t n_accepted) { accepted.push_back(n_accepted); }
};
struct no_hook : scripted {};

} // namespace

TEST_CASE("drafter_selection: choices, scores and statistics on a scripted run, by hand")
{
    using qk::spec::drafter_selection;
    using qk::spec::drafter_statistics;
    // A continues a draft after one that was rejected, so that the third call tells a history that
    // continued as the feedback said from one regenerated in between.
    for (const bool regenerated : {false, true}) {
        CAPTURE(regenerated);
        two_count_hook a;
        one_count_hook b;
        no_hook c;
        a.script = {{2, 3, 4}, {5, 6, 7, 8}, {3, 3, 5}, {}};
        b.script = {{2, 3}, {4, 4}, {3, 3}, {}};
        c.script = {{7}, {5}, {}, {}};
        drafter_selection selection{a, b, c};
        static_assert(qk::spec::history_drafter<decltype(selection)>);
        token_history history(tokens{10, 11});

        // 1: nothing judged yet, every rate is the prior 1: gains A 3, B 2, C 1 -> A. The target
        // takes 2, then 9: 1 of 3 accepted.
        CHECK(shown{selection.draft(history, 1)} == shown{{2, 3, 4}});
        CHECK(selection.chosen() == 0u);
        selection.accept(1, 3);
        CHECK(selection.chosen() == selection.none);
        history.append(tokens{1, 2});
        // 2 (sampled 9). Scored: A 2 then 3 where 3 was rejected; B the same; C 7 where 2 was
        // accepted. Rates A 1/2, B 1/2, C 0: gains A .5+.25+.125+.0625, B .5+.25, C 0 -> A. The
        // target takes 4 instead of 5: none accepted.
        CHECK(shown{selection.draft(history, 9)} == shown{{5, 6, 7, 8}});
        CHECK(selection.expected_acceptance(0) == 0.5);
        CHECK(selection.expected_acceptance(1) == 0.5);
        CHECK(selection.expected_acceptance(2) == 0.0);
        CHECK(selection.expected_gain(0, 4) == 0.9375);
        CHECK(selection.expected_gain(1, 2) == 0.75);
        CHECK(selection.chosen() == 0u);
        selection.accept(0);
        history.push_back(9);
        // 3 (sampled 4). Scored: A and C drafted the rejected 5; B drafted 4, the target's token,
        // known because the history grew by exactly the sampled token: one match, then nothing
        // judged. Rates A 1/3, B 2/3: gains A 1/3+1/9+1/27, B 2/3+4/9 -> B, never chosen before.
        // All of it accepted.
        CHECK(shown{selection.draft(history, 4)} == shown{{3, 3}});
        CHECK(selection.expected_acceptance(1) == doctest::Approx(2.0 / 3));
        CHECK(selection.expected_gain(0, 3) < selection.expected_gain(1, 2));
        CHECK(selection.chosen() == 1u);
        selection.accept(2);
        if (regenerated) { // cut back and regrown: the same length, the last token another
            history.append(tokens{4, 3, 3});
            history.cut(5);
            history.append(tokens{4, 3, 8});
        } else {
            history.append(tokens{4, 3, 3});
        }
        // 4 (sampled 5): A's 3 3 matched the accepted tokens; its 5 is the target's next token only
        // when the history continued as the feedback said. Nobody drafts; feedback without a draft
        // changes nothing.
        CHECK(selection.draft(history, 5).empty());
        CHECK(selection.chosen() == selection.none);
        selection.accept(3, 3);

        const auto& s = selection.statistics();
        //                                drafts chosen verified drafted accepted scored matched mismatched
        CHECK(s[0] == drafter_statistics{3, 2, 2, 7, 1, 3, regenerated ? 3u : 4u, 2});
        CHECK(s[1] == drafter_statistics{3, 1, 1, 2, 2, 3, 4, 1});
        CHECK(s[2] == drafter_statistics{2, 0, 0, 0, 0, 2, 0, 2});
        CHECK(s[0].acceptance_rate() == 1.0 / 7);
        // Each drafter drafted on every call, following the history; only the chosen heard back, in
        // the form it has.
        for (const auto* d : {static_cast<const scripted*>(&selection.drafter<0>()), static_cast<const scripted*>(&selection.drafter<1>()),
                              static_cast<const scripted*>(&selection.drafter<2>())}) {
            CHECK(d->history_lengths == std::vector<std::size_t>{2, 4, 5, 8});
        }
        CHECK(selection.drafter<0>().accepted == std::vector<std::pair<int, int>>{{1, 3}, {0, 4}});
        CHECK(selection.drafter<1>().accepted == std::vector<int>{2});
        // The selection holds copies: the originals were not called.
        CHECK(a.history_lengths.empty());
    }
}

TEST_CASE("drafter_selection: a rejected token is known to be wrong even when the target's own is not known")
{
    two_count_hook a;
    two_count_hook b;
    two_count_hook c;
    a.script = {{1, 2}, {}};
    b.script = {{1, 2, 3}, {}};
    c.script = {{1, 5}, {}};
    qk::spec::drafter_selection selection{a, b, c};
    token_history history(tokens{0, 0, 0});
    CHECK(shown{selection.draft(history, 7)} == shown{{1, 2, 3}}); // gains 2, 3, 2
    selection.accept(1, 2);
    history.cut(1); // a regeneration: what the target chose after 1 is not in this history
    history.append(tokens{4, 4});
    static_cast<void>(selection.draft(history, 9));
    // A and B drafted the rejected 2 after the accepted 1; C's 5 may or may not be right.
    CHECK(selection.statistics()[0].matched == 1u);
    CHECK(selection.statistics()[0].mismatched == 1u);
    CHECK(selection.statistics()[1].matched == 1u);
    CHECK(selection.statistics()[1].mismatched == 1u);
    CHECK(selection.statistics()[2].matched == 1u);
    CHECK(selection.statistics()[2].mismatched == 0u);
    CHECK(selection.expected_acceptance(2) == 1.0);
}

TEST_CASE("drafter_selection: a step without feedback, or after begin(), is scored for nobody")
{
    two_count_hook a;
    two_count_hook b;
    a.script = {{1, 2}, {1}, {1}};
    b.script = {{5}, {5}, {5}};
    qk::spec::drafter_selection selection{a, b};
    token_history history(tokens{0});
    static_cast<void>(selection.draft(history, 0)); // A, never reported on
    history.push_back(0);
    static_cast<void>(selection.draft(history, 1)); // A again
    selection.accept(1, 1);
    selection.begin(history);
    static_cast<void>(selection.draft(history, 1));
    for (const auto& s : selection.statistics()) {
        CHECK(s.scored == 0u);
        CHECK(s.matched == 0u);
        CHECK(s.mismatched == 0u);
        CHECK(s.drafts == 3u);
    }
    CHECK(selection.statistics()[0].verified == 1u);
}

TEST_CASE("drafter_selection: the prior, feedback forms and errors")
{
    using qk::spec::drafter_selection;
    SUBCASE("a prior of 0: untried drafters tie at 0, the first wins and keeps winning")
    {
        two_count_hook a;
        two_count_hook b;
        a.script = {{1}, {1}};
        b.script = {{2, 3}, {2, 3}};
        drafter_selection selection{qk::spec::selection_options{0.0}, a, b};
        token_history history(tokens{0});
        CHECK(shown{selection.draft(history, 0)} == shown{{1}});
        selection.accept(1, 1); // A: 1 x 1 = 1 against B's 0 x 2
        CHECK(shown{selection.draft(history, 0)} == shown{{1}});
        CHECK(selection.statistics()[1].chosen == 0u);
        CHECK(selection.statistics()[1].drafts == 2u);
    }
    SUBCASE("accept(n) passes the draft's length to a drafter with only the two-count form")
    {
        two_count_hook a;
        a.script = {{4, 5, 6}};
        drafter_selection selection{a};
        token_history history(tokens{0});
        static_cast<void>(selection.draft(history, 0));
        selection.accept(2);
        CHECK(selection.drafter<0>().accepted == std::vector<std::pair<int, int>>{{2, 3}});
        CHECK(selection.statistics()[0] == qk::spec::drafter_statistics{1, 1, 1, 3, 2});
    }
    SUBCASE("accept(n, verified) passes n to a drafter with only the one-count form")
    {
        one_count_hook b;
        b.script = {{4, 5, 6}};
        drafter_selection selection{b};
        token_history history(tokens{0});
        static_cast<void>(selection.draft(history, 0));
        selection.accept(1, 2);
        CHECK(selection.drafter<0>().accepted == std::vector<int>{1});
        CHECK(selection.statistics()[0] == qk::spec::drafter_statistics{1, 1, 1, 2, 1});
    }
    SUBCASE("bad feedback and a bad prior are qk::error, and change nothing")
    {
        one_count_hook b;
        b.script = {{4, 5, 6}};
        drafter_selection selection{b};
        token_history history(tokens{0});
        static_cast<void>(selection.draft(history, 0));
        CHECK_THROWS_AS(selection.accept(-1, 2), qk::error);
        CHECK_THROWS_AS(selection.accept(3, 2), qk::error); // more accepted than verified
        CHECK_THROWS_AS(selection.accept(1, 4), qk::error); // more verified than drafted
        CHECK_THROWS_AS(selection.accept(-1), qk::error);
        CHECK_THROWS_AS(selection.accept(4), qk::error);
        CHECK(selection.statistics()[0] == qk::spec::drafter_statistics{1, 1, 0, 0, 0});
        CHECK(selection.drafter<0>().accepted.empty());
        CHECK(selection.chosen() == 0u);
        CHECK_THROWS_AS(drafter_selection(qk::spec::selection_options{1.5}, b), qk::error);
        CHECK_THROWS_AS(drafter_selection(qk::spec::selection_options{-0.1}, b), qk::error);
    }
}

namespace {

// Drafts the sequence's true continuation after the sampled token, 0 to 8 tokens of it, each token
// replaced by another with probability `noise`: a drafter of known quality. What it drafts at a
// position depends only on the position and its seed, so a reference can ask for the same draft.
struct noisy_oracle {
    const tokens* sequence;
    std::uint64_t seed;
    double noise;

    [[nodiscard]] tokens at(std::size_t position) const
    {
        std::mt19937_64 rng(seed * 1000003u + position);
        const std::size_t wanted = std::uniform_int_distribution<std::size_t>(0, 8)(rng);
        tokens out;
        for (std::size_t k = 0; k < wanted && position + 1 + k < sequence->size(); ++k) {
            const token t = (*sequence)[position + 1 + k];
            out.push_back(std::bernoulli_distribution(noise)(rng) ? t + 1 : t);
        }
        return out;
    }
    tokens draft(const token_history& history, token) const { return at(history.size()); }
};

} // namespace

TEST_CASE("drafter_selection under replay: choices and every drafter's scores equal a reference written from the header")
{
    const tokens sequence = text_like(23, 3000, 0.05);
    const std::vector<double> noise = {0.6, 0.05, 0.3};
    for (const std::size_t max_draft : {std::size_t{64}, std::size_t{3}}) {
        CAPTURE(max_draft);
        qk::spec::drafter_selection selection{noisy_oracle{&sequence, 1, noise[0]}, noisy_oracle{&sequence, 2, noise[1]},
                                              noisy_oracle{&sequence, 3, noise[2]}};
        const std::size_t prompt = 8;
        const qk::spec::replay_result r = qk::spec::replay(sequence, selection, {prompt, 512, max_draft});

        // The reference: replay's loop, the selection's rule, and the scores read off the sequence
        // itself (what the target produces) rather than off the chosen draft.
        std::array<qk::spec::drafter_statistics, 3> expected{};
        const auto rate = [&](std::size_t i) {
            const auto& e = expected[i];
            return e.matched + e.mismatched == 0 ? 1.0 : double(e.matched) / double(e.matched + e.mismatched);
        };
        const auto gain = [&](std::size_t i, std::size_t length) {
            double sum = 0, term = 1;
            for (std::size_t k = 0; k < length; ++k) {
                term *= rate(i);
                sum += term;
            }
            return sum;
        };
        for (std::size_t pos = prompt; pos + 1 < sequence.size();) {
            std::array<tokens, 3> drafts;
            std::size_t best = 3;
            for (std::size_t i = 0; i < 3; ++i) {
                drafts[i] = noisy_oracle{&sequence, i + 1, noise[i]}.at(pos);
                if (drafts[i].empty()) {
                    continue;
                }
                ++expected[i].drafts;
                if (best == 3 || gain(i, drafts[i].size()) > gain(best, drafts[best].size())) {
                    best = i;
                }
            }
            if (best == 3) {
                ++pos;
                continue;
            }
            ++expected[best].chosen;
            const std::size_t kept = std::min({drafts[best].size(), max_draft, sequence.size() - pos - 2});
            std::size_t accepted = 0;
            while (accepted < kept && drafts[best][accepted] == sequence[pos + 1 + accepted]) {
                ++accepted;
            }
            const std::size_t next = pos + 1 + accepted;
            if (kept > 0) {
                expected[best].verified += 1;
                expected[best].drafted += kept;
                expected[best].accepted += accepted;
                // Known after the feedback and the next call: the accepted tokens and the next one.
                if (next + 1 < sequence.size()) {
                    for (std::size_t i = 0; i < 3; ++i) {
                        if (drafts[i].empty()) {
                            continue;
                        }
                        ++expected[i].scored;
                        for (std::size_t k = 0; k < drafts[i].size() && k <= accepted; ++k) {
                            if (drafts[i][k] != sequence[pos + 1 + k]) {
                                ++expected[i].mismatched;
                                break;
                            }
                            ++expected[i].matched;
                        }
                    }
                }
            }
            pos = next;
        }
        for (std::size_t i = 0; i < 3; ++i) {
            CAPTURE(i);
            CHECK(selection.statistics()[i] == expected[i]);
            CHECK(expected[i].scored > 200u);
        }
        // The good drafter's rate is its own, whoever was chosen: it won most steps.
        CHECK(expected[1].chosen > expected[0].chosen + expected[2].chosen);
        CHECK(r.accepted == expected[0].accepted + expected[1].accepted + expected[2].accepted);
    }
}

TEST_CASE("drafter_selection of real drafters under replay: its statistics add up to the replay's")
{
    const tokens sequence = text_like(21, 4000, 0.05);
    const auto mod_config = small_config(4, 2, 16, 0, 1 << 16);
    qk::spec::drafter_selection selection{qk::spec::ngram_simple(qk::spec::ngram_config{3, 8, 1}), ngram_mod(mod_config)};
    const qk::spec::replay_result r = qk::spec::replay(sequence, selection, {16, 512, 64});
    std::size_t chosen = 0, verified = 0, drafted = 0, accepted = 0;
    for (const auto& s : selection.statistics()) {
        CHECK(s.chosen > 0u); // both drafters won some steps
        CHECK(s.chosen <= s.drafts);
        CHECK(s.verified <= s.chosen);
        CHECK(s.accepted <= s.drafted);
        chosen += s.chosen;
        verified += s.verified;
        drafted += s.drafted;
        accepted += s.accepted;
    }
    CHECK(r.drafts > 100u);
    CHECK(verified == r.drafts);
    CHECK(drafted == r.drafted);
    CHECK(accepted == r.accepted);
    // A chosen draft goes unverified only when the replay cut it to nothing at the sequence's end.
    CHECK(chosen >= r.drafts);
    CHECK(chosen <= r.drafts + 1);
}

TEST_CASE("drafter_selection of one ngram_mod replays as the ngram_mod alone")
{
    const tokens sequence = text_like(22, 4000, 0.1);
    const auto config = small_config(3, 1, 12, 4, 1 << 12);
    ngram_mod alone(config);
    qk::spec::drafter_selection selection{ngram_mod(config)};
    const auto by_itself = qk::spec::replay(sequence, alone, {8, 512, 64});
    const auto selected = qk::spec::replay(sequence, selection, {8, 512, 64});
    CHECK(by_itself.drafts > 100u);
    CHECK(selected.steps == by_itself.steps);
    CHECK(selected.drafts == by_itself.drafts);
    CHECK(selected.drafted == by_itself.drafted);
    CHECK(selected.accepted == by_itself.accepted);
    CHECK(selected.evaluations == by_itself.evaluations);
    CHECK(std::equal(alone.pool().entries().begin(), alone.pool().entries().end(), selection.drafter<0>().pool().entries().begin()));
}
