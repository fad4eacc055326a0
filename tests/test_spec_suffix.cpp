// qk::spec::suffix_drafter and suffix_corpus against a brute-force reference written from the
// header's definition (every match and count found by scanning), called on every prefix of random,
// periodic and text-like sequences, with tokens appended several at a time, histories cut, cut and
// regrown with other tokens, replaced and switched between calls, corpora that grow and are shared,
// token ids anywhere in int32, and configuration errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <kernels/error.hpp>
#include <spec/replay.hpp>
#include <spec/suffix_drafter.hpp>
#include <spec/token_history.hpp>

#include "spec_support.hpp"

namespace {

using namespace qk_test::spec;

using token = std::int32_t;
using tokens = std::vector<token>;
using qk::spec::suffix_corpus;
using qk::spec::suffix_drafter;
using qk::spec::token_history;
using settings = suffix_drafter::config;

static_assert(qk::spec::history_drafter<suffix_drafter>);
static_assert(!drafts_from_span<suffix_drafter>);

// ---- the reference: the header's definition, by scanning -------------------------------------

enum class source { none, history, corpus };

struct reference_draft {
    tokens draft;
    source from = source::none;
};

bool occurs_in(std::span<const token> pattern, const tokens& sequence)
{
    for (std::size_t j = 0; j + pattern.size() <= sequence.size(); ++j) {
        if (std::equal(pattern.begin(), pattern.end(), sequence.begin() + static_cast<std::ptrdiff_t>(j))) {
            return true;
        }
    }
    return false;
}

// The longest suffix of `context`, of at most `cap` tokens, that lies within one of `sequences`.
// (A suffix that occurs nowhere has no longer suffix that occurs, so the search stops there.)
std::size_t longest_match(const tokens& context, const std::vector<tokens>& sequences, std::size_t cap)
{
    std::size_t best = 0;
    for (std::size_t length = 1; length <= std::min(cap, context.size()); ++length) {
        const std::span<const token> suffix(context.end() - static_cast<std::ptrdiff_t>(length), length);
        if (std::none_of(sequences.begin(), sequences.end(), [&](const tokens& s) { return occurs_in(suffix, s); })) {
            break;
        }
        best = length;
    }
    return best;
}

// Steps 2 and 3 (the caller runs step 1).
reference_draft reference(const settings& c, const tokens& history, const std::vector<tokens>& corpus, token sampled)
{
    const auto context_cap = static_cast<std::size_t>(c.max_depth - 1);
    tokens context = history;
    context.push_back(sampled);
    const std::vector<tokens> own{history};
    const std::size_t from_history = longest_match(context, own, context_cap);
    const std::size_t from_corpus = longest_match(context, corpus, context_cap);
    reference_draft out;
    out.from = from_corpus > from_history ? source::corpus : source::history;
    const std::vector<tokens>& sequences = out.from == source::corpus ? corpus : own;
    const std::size_t matched = std::max(from_history, from_corpus);
    if (matched < static_cast<std::size_t>(c.min_match)) {
        return {};
    }
    tokens pattern(context.end() - static_cast<std::ptrdiff_t>(matched), context.end());
    double confidence = 1.0;
    while (out.draft.size() < static_cast<std::size_t>(c.max_draft)) {
        const std::size_t w = std::min(pattern.size(), context_cap);
        const std::span<const token> window(pattern.end() - static_cast<std::ptrdiff_t>(w), w);
        std::map<token, std::pair<long long, long long>> next; // token -> (occurrences, end of the first)
        long long total = 0;
        long long offset = 0; // corpus positions run along its sequences in order
        for (const tokens& s : sequences) {
            for (std::size_t j = 0; j + w < s.size(); ++j) {
                if (std::equal(window.begin(), window.end(), s.begin() + static_cast<std::ptrdiff_t>(j))) {
                    const auto end = offset + static_cast<long long>(j + w);
                    auto& entry = next.try_emplace(s[j + w], 0, end).first->second;
                    ++entry.first;
                    ++total;
                }
            }
            offset += static_cast<long long>(s.size());
        }
        if (total == 0) {
            break;
        }
        auto best = next.begin();
        for (auto it = next.begin(); it != next.end(); ++it) {
            if (it->second.first > best->second.first || (it->second.first == best->second.first && it->second.second > best->second.second)) {
                best = it;
            }
        }
        confidence = confidence * (static_cast<double>(best->second.first) / static_cast<double>(total));
        if (confidence < c.min_confidence) {
            break;
        }
        out.draft.push_back(best->first);
        pattern.push_back(best->first);
    }
    if (out.draft.empty()) {
        out.from = source::none;
    }
    return out;
}

// A drafter and its reference, side by side; tallies what the calls drafted.
class checker {
public:
    explicit checker(settings c, std::shared_ptr<suffix_corpus> corpus = nullptr, std::vector<tokens>* corpus_copy = nullptr)
        : drafter_(c, corpus), settings_(c), corpus_copy_(corpus_copy)
    {
    }

    tokens call(const token_history& history, token sampled)
    {
        const tokens got = drafter_.draft(history, sampled);
        ++calls_;
        reference_draft want;
        if (settings_.check_rate <= 1 || calls_ % settings_.check_rate == 0) {
            static const std::vector<tokens> no_corpus;
            want = reference(settings_, tokens(history.tokens().begin(), history.tokens().end()), corpus_copy_ ? *corpus_copy_ : no_corpus,
                             sampled);
        }
        INFO("call ", calls_, ", history of ", history.size(), " tokens, sampled ", sampled);
        CHECK(shown{got} == shown{want.draft});
        drafted += got.empty() ? 0 : 1;
        from_corpus += want.from == source::corpus ? 1 : 0;
        full += got.size() == static_cast<std::size_t>(settings_.max_draft) ? 1 : 0;
        return got;
    }

    suffix_drafter& drafter() { return drafter_; }

    long long drafted = 0;     // non-empty drafts
    long long from_corpus = 0; // non-empty drafts from the corpus
    long long full = 0;        // drafts of max_draft tokens

private:
    suffix_drafter drafter_;
    settings settings_;
    std::vector<tokens>* corpus_copy_;
    long long calls_ = 0;
};

// ---- sequences -------------------------------------------------------------------------------

tokens random_history(std::uint64_t seed, token alphabet, std::size_t count, token first = 0)
{
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<token> pick(0, alphabet - 1);
    tokens out(count);
    for (auto& t : out) {
        t = first + pick(rng);
    }
    return out;
}

// A random period repeated, each token replaced by a random one with probability `noise`.
tokens periodic_tokens(std::uint64_t seed, std::size_t period, double noise, token alphabet, std::size_t count)
{
    const tokens base = random_history(seed, alphabet, period);
    std::mt19937_64 rng(seed + 1);
    std::uniform_int_distribution<token> pick(0, alphabet - 1);
    tokens out(count);
    for (std::size_t i = 0; i < count; ++i) {
        out[i] = std::bernoulli_distribution(noise)(rng) ? pick(rng) : base[i % period];
    }
    return out;
}

// Phrases of words (1-3 tokens each, ids from `first`), the frequent phrases much more often, with
// random words between them: long repeats whose continuations sometimes differ.
class text_source {
public:
    text_source(std::uint64_t seed, token first) : rng_(seed), first_(first)
    {
        std::uniform_int_distribution<int> word_length(1, 3);
        std::uniform_int_distribution<token> piece(0, 299);
        words_.resize(60);
        for (auto& w : words_) {
            w.resize(static_cast<std::size_t>(word_length(rng_)));
            for (auto& t : w) {
                t = first + piece(rng_);
            }
        }
        std::uniform_int_distribution<std::size_t> phrase_length(3, 9);
        std::uniform_int_distribution<std::size_t> word(0, words_.size() - 1);
        phrases_.resize(12);
        std::vector<double> weights;
        for (auto& p : phrases_) {
            p.resize(phrase_length(rng_));
            for (auto& w : p) {
                w = word(rng_);
            }
            weights.push_back(1.0 / static_cast<double>(weights.size() + 1));
        }
        pick_phrase_ = std::discrete_distribution<std::size_t>(weights.begin(), weights.end());
    }

    tokens take(std::size_t count)
    {
        tokens out;
        while (out.size() < count) {
            if (std::bernoulli_distribution(0.15)(rng_)) {
                const tokens& w = words_[std::uniform_int_distribution<std::size_t>(0, words_.size() - 1)(rng_)];
                out.insert(out.end(), w.begin(), w.end());
            } else {
                for (const std::size_t w : phrases_[pick_phrase_(rng_)]) {
                    out.insert(out.end(), words_[w].begin(), words_[w].end());
                }
            }
            if (std::bernoulli_distribution(0.5)(rng_)) {
                out.push_back(first_ + 300); // a separator
            }
        }
        out.resize(count);
        return out;
    }

private:
    std::mt19937_64 rng_;
    token first_;
    std::vector<tokens> words_;
    std::vector<std::vector<std::size_t>> phrases_;
    std::discrete_distribution<std::size_t> pick_phrase_;
};

std::vector<named_sequence> test_sequences(std::size_t length)
{
    std::vector<named_sequence> out;
    std::uint64_t seed = 7000;
    for (const token alphabet : {2, 3, 5, 8}) {
        out.push_back({"random alphabet " + std::to_string(alphabet), random_history(++seed, alphabet, length)});
    }
    out.push_back({"periodic 1", periodic_tokens(++seed, 1, 0.0, 4, length)});
    out.push_back({"periodic 3", periodic_tokens(++seed, 3, 0.0, 4, length)});
    out.push_back({"periodic 7 noisy", periodic_tokens(++seed, 7, 0.05, 6, length)});
    out.push_back({"text", text_source(++seed, 0).take(length)});
    return out;
}

std::vector<settings> test_settings()
{
    return {
        settings{},                                                                       // the defaults
        {.max_draft = 8, .min_match = 1, .min_confidence = 0.0, .max_depth = 64, .check_rate = 1}, // no confidence limit
        {.max_draft = 16, .min_match = 2, .min_confidence = 0.5, .max_depth = 4, .check_rate = 1}, // shallow counts
        {.max_draft = 32, .min_match = 1, .min_confidence = 0.05, .max_depth = 2, .check_rate = 1}, // one token of context
        {.max_draft = 4, .min_match = 5, .min_confidence = 0.2, .max_depth = 12, .check_rate = 1},
    };
}

std::string describe(const settings& c)
{
    return "max_draft " + std::to_string(c.max_draft) + ", min_match " + std::to_string(c.min_match) + ", min_confidence " +
           std::to_string(c.min_confidence) + ", max_depth " + std::to_string(c.max_depth) + ", check_rate " + std::to_string(c.check_rate);
}

tokens drafted(suffix_drafter& drafter, const tokens& history, token sampled)
{
    return drafter.draft(token_history(history), sampled);
}

// Maps small ids to far-apart ones anywhere in int32, to run hand-worked cases with large ids.
token far(token t)
{
    return t % 2 == 0 ? 200000 + 7919 * t : -1000003 * t;
}
tokens far(const tokens& ts)
{
    tokens out;
    for (const token t : ts) {
        out.push_back(far(t));
    }
    return out;
}

} // namespace

TEST_CASE("suffix_drafter: hand-worked drafts")
{
    // C = 1 2 3 1 2 4 1 2 3 1 2 3: "1 2 3" occurs in H (twice, both followed by 1), "3 1 2 3" does
    // not; the pattern then follows the first occurrence to the end of H.
    const tokens h = {1, 2, 3, 1, 2, 4, 1, 2, 3, 1, 2};
    for (const bool large : {false, true}) {
        CAPTURE(large);
        const auto ids = [&](const tokens& ts) { return large ? far(ts) : ts; };
        const token three = large ? far(3) : 3;
        suffix_drafter deep(settings{});
        CHECK(shown{drafted(deep, ids(h), three)} == shown{ids({1, 2, 4, 1, 2, 3, 1, 2})});
        // Two tokens of context: after "1 2" comes 3 twice and 4 once, so each "3" drafted
        // multiplies the confidence by 2/3; 16 tokens end at (2/3)^5 = 0.13 >= 0.1.
        suffix_drafter shallow({.max_draft = 16, .min_match = 2, .min_confidence = 0.1, .max_depth = 3, .check_rate = 1});
        CHECK(shown{drafted(shallow, ids(h), three)} == shown{ids({1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1})});
        // (2/3)^3 = 0.296 < 0.3: the third "3" is not drafted.
        suffix_drafter cautious({.max_draft = 16, .min_match = 2, .min_confidence = 0.3, .max_depth = 3, .check_rate = 1});
        CHECK(shown{drafted(cautious, ids(h), three)} == shown{ids({1, 2, 3, 1, 2, 3, 1, 2})});
        // H holds no 9: no match, no draft.
        CHECK(drafted(deep, ids(h), large ? far(9) : 9).empty());

        // A tie: after "7" came 1 (first at position 2) and 2 (first at 5); the later one wins,
        // with confidence 1/2, and "7 2" has no continuation.
        const tokens tie = {5, 7, 1, 5, 7, 2};
        suffix_drafter one({.max_draft = 16, .min_match = 1, .min_confidence = 0.1, .max_depth = 64, .check_rate = 1});
        CHECK(shown{drafted(one, ids(tie), large ? far(7) : 7)} == shown{ids({2})});
        suffix_drafter sure({.max_draft = 16, .min_match = 1, .min_confidence = 0.6, .max_depth = 64, .check_rate = 1});
        CHECK(drafted(sure, ids(tie), large ? far(7) : 7).empty());
    }
}

TEST_CASE("suffix_drafter: hand-worked drafts from a corpus")
{
    auto corpus = std::make_shared<suffix_corpus>();
    corpus->add(tokens{9, 8, 7, 6});
    corpus->add(tokens{9, 8, 7, 5, 4});
    corpus->add(tokens{});
    CHECK(corpus->sequences() == 2);
    CHECK(corpus->size() == 9);
    const settings two{.max_draft = 16, .min_match = 2, .min_confidence = 0.1, .max_depth = 64, .check_rate = 1};
    const settings three{.max_draft = 16, .min_match = 3, .min_confidence = 0.1, .max_depth = 64, .check_rate = 1};
    // H has no 7; the corpus holds "9 8 7" twice: then 6 (first at position 3) or 5 (position 7).
    suffix_drafter drafter(two, corpus);
    CHECK(shown{drafted(drafter, {1, 9, 8}, 7)} == shown{{5, 4}});
    // "6 9 8" runs across two sequences: it is no match, so the match is "9 8" (2 tokens).
    CHECK(shown{drafted(drafter, {3, 6, 9}, 8)} == shown{{7, 5, 4}});
    suffix_drafter strict(three, corpus);
    CHECK(drafted(strict, {3, 6, 9}, 8).empty());
    // The history's "1 2 3" and the corpus's tie: the history drafts.
    auto tied = std::make_shared<suffix_corpus>();
    tied->add(tokens{1, 2, 3, 5});
    suffix_drafter from_tie(three, tied);
    CHECK(shown{drafted(from_tie, {1, 2, 3, 9, 0, 1, 2}, 3)} == shown{{9, 0, 1, 2}});
    // A longer match in the corpus wins.
    auto longer = std::make_shared<suffix_corpus>();
    longer->add(tokens{0, 1, 2, 3, 4, 4});
    suffix_drafter from_longer(three, longer);
    CHECK(shown{drafted(from_longer, {1, 2, 3, 9, 0, 1, 2}, 3)} == shown{{4, 4}});
    // A corpus that grows between calls on the same history: the next call matches against it.
    auto growing = std::make_shared<suffix_corpus>();
    suffix_drafter late(three, growing);
    const token_history history(tokens{4, 4, 1, 2, 3});
    CHECK(late.draft(history, 4).empty());
    growing->add(tokens{1, 2, 3, 4, 6, 6});
    CHECK(shown{late.draft(history, 4)} == shown{{6, 6}});
}

namespace {

// Drafts counted per sequence and per setting, so that no test passes by drafting nothing (a random
// sequence over 8 tokens rarely repeats 5 of them, so only the sums are bounded).
struct coverage {
    std::map<std::string, long long> per_sequence;
    std::map<std::string, long long> per_setting;
    long long full = 0;

    void count(const std::string& sequence, const settings& c, const checker& check)
    {
        per_sequence[sequence] += check.drafted;
        per_setting[describe(c)] += check.drafted;
        full += check.full;
    }
    void require(long long at_least) const
    {
        for (const auto* counts : {&per_sequence, &per_setting}) {
            for (const auto& entry : *counts) {
                CAPTURE(entry.first);
                CHECK(entry.second > at_least);
            }
        }
        CHECK(full > at_least);
    }
};

} // namespace

TEST_CASE("suffix_drafter equals its definition on every prefix")
{
    coverage drafts;
    for (const auto& sequence : test_sequences(600)) {
        for (const settings& c : test_settings()) {
            CAPTURE(sequence.name);
            CAPTURE(describe(c));
            checker check(c);
            token_history history;
            for (std::size_t i = 0; i < sequence.values.size(); ++i) {
                check.call(history, sequence.values[i]);
                history.push_back(sequence.values[i]);
            }
            drafts.count(sequence.name, c, check);
        }
    }
    drafts.require(100);
}

TEST_CASE("suffix_drafter: several tokens per call, sampled tokens the history lacks")
{
    std::mt19937_64 rng(31);
    coverage drafts;
    for (const auto& sequence : test_sequences(800)) {
        for (const settings& c : test_settings()) {
            CAPTURE(sequence.name);
            CAPTURE(describe(c));
            checker check(c);
            token_history history;
            std::size_t at = 0;
            while (at < sequence.values.size()) {
                const std::size_t chunk = std::min(sequence.values.size() - at, std::uniform_int_distribution<std::size_t>(1, 12)(rng));
                history.append(std::span<const token>(sequence.values).subspan(at, chunk));
                at += chunk;
                const bool unseen = std::bernoulli_distribution(0.2)(rng);
                const token sampled = unseen ? 1000 + static_cast<token>(at) : (at < sequence.values.size() ? sequence.values[at] : 0);
                check.call(history, sampled);
            }
            drafts.count(sequence.name, c, check);
        }
    }
    drafts.require(20);
}

namespace {

// Random edits between calls: appends (mostly continuing `base`), cuts (short and long), cuts
// regrown with other tokens to the same length, replacements and clears.
void random_edits(checker& check, std::uint64_t seed, const tokens& base, token alphabet, int calls, token first = 0)
{
    std::mt19937_64 rng(seed);
    const auto uniform = [&](std::size_t low, std::size_t high) { return std::uniform_int_distribution<std::size_t>(low, high)(rng); };
    const auto random_token = [&] { return first + std::uniform_int_distribution<token>(0, alphabet - 1)(rng); };
    token_history history;
    for (int call = 0; call < calls; ++call) {
        const std::size_t size = history.size();
        const std::size_t op = uniform(0, 99);
        if (op < 45) {
            const std::size_t count = uniform(1, 6);
            for (std::size_t k = 0; k < count; ++k) {
                history.push_back(history.size() < base.size() ? base[history.size()] : random_token());
            }
        } else if (op < 55) {
            history.cut(uniform(size / 2, size));
        } else if (op < 60) {
            history.cut(uniform(0, size));
        } else if (op < 75 && size > 0) {
            const std::size_t back = uniform(1, std::min<std::size_t>(8, size));
            history.cut(size - back);
            for (std::size_t k = 0; k < back; ++k) {
                history.push_back(random_token());
            }
        } else if (op < 79) {
            const std::size_t length = uniform(0, base.size());
            history.assign(std::span<const token>(base).first(length));
        } else if (op < 81) {
            history.clear();
        } else if (op < 90) {
            history.push_back(random_token());
        } // else: the same history again
        const bool along = history.size() < base.size() && std::bernoulli_distribution(0.75)(rng);
        check.call(history, along ? base[history.size()] : random_token());
    }
}

} // namespace

TEST_CASE("suffix_drafter: histories cut, regrown with other tokens, replaced and cleared between calls")
{
    std::uint64_t seed = 500;
    coverage drafts;
    for (const auto& sequence : test_sequences(400)) {
        for (const settings& c : test_settings()) {
            CAPTURE(sequence.name);
            CAPTURE(describe(c));
            checker check(c);
            const token alphabet = *std::max_element(sequence.values.begin(), sequence.values.end()) + 1;
            random_edits(check, ++seed, sequence.values, alphabet, 1000);
            drafts.count(sequence.name, c, check);
        }
    }
    drafts.require(50);
}

TEST_CASE("suffix_drafter: begin, reset and switching between histories")
{
    const tokens a = text_source(41, 0).take(300);
    const tokens b = random_history(42, 3, 300);
    for (const settings& c : test_settings()) {
        CAPTURE(describe(c));
        checker check(c);
        token_history first;
        token_history second;
        for (std::size_t i = 0; i < 300; ++i) {
            first.push_back(a[i]);
            second.push_back(b[i]);
            // Alternating histories: each call reads a history the previous one did not.
            check.call(first, i + 1 < a.size() ? a[i + 1] : 0);
            check.call(second, i + 1 < b.size() ? b[i + 1] : 0);
            if (i % 37 == 0) {
                check.drafter().begin(first);
                check.call(first, a[(i * 7) % a.size()]);
            }
            if (i % 41 == 0) {
                check.drafter().reset();
                check.call(second, b[(i * 5) % b.size()]);
            }
        }
        // A copy is another history with the same tokens.
        const token_history copy = first;
        check.call(copy, a[10]);
        check.drafter().begin(copy);
        check.call(copy, a[11]);
        CHECK(check.drafted > 100);
    }
}

TEST_CASE("suffix_drafter: check_rate drafts every check_rate calls")
{
    const tokens text = text_source(77, 0).take(400);
    for (const std::int32_t rate : {0, 1, 2, 3, 5}) {
        CAPTURE(rate);
        settings c;
        c.check_rate = rate;
        checker check(c);
        token_history history;
        for (std::size_t i = 0; i + 1 < text.size(); ++i) {
            history.push_back(text[i]);
            check.call(history, text[i + 1]);
        }
        CHECK(check.drafted > 20);
    }
}

TEST_CASE("suffix_drafter: token ids anywhere in int32")
{
    const token low = std::numeric_limits<token>::min();
    const token high = std::numeric_limits<token>::max();
    const tokens alphabet = {low, low + 1, -1, 0, 1, 200000, 262143, high - 1, high};
    std::mt19937_64 rng(99);
    tokens sequence;
    for (std::size_t i = 0; i < 300; ++i) {
        // Runs copied from earlier in the sequence, so long matches occur.
        if (i > 20 && std::bernoulli_distribution(0.6)(rng)) {
            sequence.push_back(sequence[i - std::uniform_int_distribution<std::size_t>(5, 20)(rng)]);
        } else {
            sequence.push_back(alphabet[std::uniform_int_distribution<std::size_t>(0, alphabet.size() - 1)(rng)]);
        }
    }
    const tokens text = text_source(5, 250000).take(300);
    for (const tokens* values : {static_cast<const tokens*>(&sequence), &text}) {
        checker check(settings{});
        token_history history;
        for (std::size_t i = 0; i + 1 < values->size(); ++i) {
            history.push_back((*values)[i]);
            check.call(history, (*values)[i + 1]);
        }
        CHECK(check.drafted > 20);
    }
}

namespace {

void add(suffix_corpus& corpus, std::vector<tokens>& copy, const tokens& sequence)
{
    corpus.add(sequence);
    if (!sequence.empty()) {
        copy.push_back(sequence);
    }
}

} // namespace

TEST_CASE("suffix_drafter with a corpus equals its definition")
{
    text_source text(123, 100000);
    for (const settings& c : test_settings()) {
        CAPTURE(describe(c));
        auto corpus = std::make_shared<suffix_corpus>(c.max_depth);
        std::vector<tokens> copy;
        for (int s = 0; s < 4; ++s) {
            add(*corpus, copy, text.take(150));
        }
        add(*corpus, copy, random_history(9, 3, 100, 100000)); // random tokens with ids of the text
        checker check(c, corpus, &copy);
        const tokens fresh = text.take(300);
        token_history history;
        for (std::size_t i = 0; i + 1 < fresh.size(); ++i) {
            history.push_back(fresh[i]);
            check.call(history, fresh[i + 1]);
        }
        CHECK(check.drafted > 30);
        CHECK(check.from_corpus > 5);
        CHECK(check.drafted - check.from_corpus > 5);
        // Edits, with drafts from the history and the corpus.
        random_edits(check, 321, fresh, 301, 400, 100000);
    }
}

TEST_CASE("suffix_corpus: grows between calls, is shared, and may be deeper than its drafters")
{
    text_source text(555, 0);
    auto corpus = std::make_shared<suffix_corpus>(64);
    std::vector<tokens> copy;
    add(*corpus, copy, text.take(100));
    const settings deep{};
    const settings shallow{.max_draft = 8, .min_match = 2, .min_confidence = 0.2, .max_depth = 5, .check_rate = 1};
    checker one(deep, corpus, &copy);
    checker two(shallow, corpus, &copy);
    std::mt19937_64 rng(8);
    token_history first;
    token_history second;
    const tokens a = text.take(600);
    const tokens b = text.take(600);
    std::size_t at = 0;
    while (at + 13 < a.size()) {
        // Several tokens at once, more than max_depth - 2 now and then.
        const std::size_t chunk = std::uniform_int_distribution<std::size_t>(1, 13)(rng);
        first.append(std::span<const token>(a).subspan(at, chunk));
        second.append(std::span<const token>(b).subspan(at, chunk));
        at += chunk;
        one.call(first, a[at]);
        two.call(second, b[at]);
        two.call(first, a[at]);
        if (std::bernoulli_distribution(0.15)(rng)) {
            add(*corpus, copy, text.take(std::uniform_int_distribution<std::size_t>(0, 60)(rng)));
        }
        if (std::bernoulli_distribution(0.1)(rng)) {
            first.cut(first.size() - std::min<std::size_t>(first.size(), 5));
        }
    }
    CHECK(copy.size() > 5);
    CHECK(one.from_corpus > 5);
    CHECK(two.from_corpus > 5);
    CHECK(one.drafted - one.from_corpus > 5);
}

TEST_CASE("suffix_drafter: configuration errors throw qk::error")
{
    const auto message_of = [](auto&& make) -> std::string {
        try {
            make();
        } catch (const qk::error& e) {
            return e.what();
        }
        return "no error";
    };
    const auto bad = [&](settings c, const char* named) {
        CAPTURE(describe(c));
        CHECK(message_of([&] { suffix_drafter d(c); }).find(named) != std::string::npos);
    };
    settings c;
    c.max_draft = 0;
    bad(c, "max_draft=0");
    c = {};
    c.min_match = 0;
    bad(c, "min_match=0");
    c = {};
    c.max_depth = 1;
    c.min_match = 1;
    bad(c, "max_depth=1");
    c = {};
    c.max_depth = 3; // min_match 3 needs a depth of 4
    bad(c, "min_match=3");
    c = {};
    c.min_confidence = -0.01;
    bad(c, "min_confidence=");
    c.min_confidence = 1.01;
    bad(c, "min_confidence=");
    c.min_confidence = std::numeric_limits<double>::quiet_NaN();
    bad(c, "min_confidence=");
    // The bounds themselves are fine.
    CHECK_NOTHROW(suffix_drafter({.max_draft = 1, .min_match = 1, .min_confidence = 0.0, .max_depth = 2, .check_rate = 0}));
    CHECK_NOTHROW(suffix_drafter({.max_draft = 1, .min_match = 3, .min_confidence = 1.0, .max_depth = 4, .check_rate = 1}));

    CHECK_THROWS_AS(suffix_corpus(1), qk::error);
    CHECK_NOTHROW(suffix_corpus(2));
    const auto shallow = std::make_shared<suffix_corpus>(16);
    CHECK(message_of([&] { suffix_drafter d(settings{}, shallow); }).find("max_depth=16") != std::string::npos);
    CHECK_NOTHROW(suffix_drafter({.max_draft = 16, .min_match = 3, .min_confidence = 0.1, .max_depth = 16, .check_rate = 1}, shallow));
}
