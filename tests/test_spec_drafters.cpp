// The n-gram drafters of qk::spec (ngram_simple, ngram_index, ngram_map) against brute-force
// references written from the header comments (the specification), called on every prefix of
// random, periodic and text-like sequences, with histories cut, cut and regrown with other
// tokens, replaced and switched between calls, and errors; and token_history's marks against the
// shortest length a history has had since each mark was taken.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <kernels/error.hpp>
#include <spec/ngram_config.hpp>
#include <spec/ngram_index.hpp>
#include <spec/ngram_map.hpp>
#include <spec/ngram_simple.hpp>
#include <spec/replay.hpp>
#include <spec/token_history.hpp>

#include "spec_support.hpp"

namespace {

using namespace qk_test::spec;

using token = std::int32_t;
using tokens = std::vector<token>;
using history_view = std::span<const token>;
using qk::spec::ngram_config;
using qk::spec::token_history;

// Every drafter here can be replayed; the stateful ones take no bare span, which could be cut and
// regrown behind their backs.
static_assert(qk::spec::history_drafter<qk::spec::ngram_simple>);
static_assert(qk::spec::history_drafter<qk::spec::ngram_index>);
static_assert(qk::spec::history_drafter<qk::spec::ngram_map>);
static_assert(!drafts_from_span<qk::spec::ngram_index>);
static_assert(!drafts_from_span<qk::spec::ngram_map>);
static_assert(drafts_from_span<qk::spec::ngram_simple>);
struct span_only_drafter {
    tokens draft(history_view, token) { return {}; }
};
static_assert(!qk::spec::history_drafter<span_only_drafter>);

// Brings `history` to `target` by cutting and appending only what differs (so the positions
// they share stay unchanged to a reader).
void follow_to(token_history& history, history_view target)
{
    std::size_t same = 0;
    while (same < history.size() && same < target.size() && history[same] == target[same]) {
        ++same;
    }
    history.cut(same);
    history.append(target.subspan(same));
}

// ---- sequences -------------------------------------------------------------------------------

using generator = std::function<token()>;

generator random_tokens(std::uint64_t seed, token alphabet)
{
    return [rng = std::mt19937_64(seed), dist = std::uniform_int_distribution<token>(0, alphabet - 1)]() mutable {
        return dist(rng);
    };
}

// A random base period repeated, each token replaced by a random one with probability `noise`
// (so most n-grams recur one period back, and some never recur).
generator periodic_tokens(std::uint64_t seed, int period, double noise, token alphabet)
{
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<token> pick(0, alphabet - 1);
    tokens base(static_cast<std::size_t>(period));
    for (auto& t : base) {
        t = pick(rng);
    }
    return [rng, pick, base, noise, at = std::size_t{0}]() mutable {
        const token t = base[at++ % base.size()];
        return std::bernoulli_distribution(noise)(rng) ? pick(rng) : t;
    };
}

constexpr std::string_view paragraph =
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age "
    "of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season "
    "of Light, it was the season of Darkness, it was the spring of hope, it was the winter of "
    "despair, we had everything before us, we had nothing before us, we were all going direct to "
    "Heaven, we were all going direct the other way.";

// The paragraph's bytes over and over, copied with typos: a letter replaced, dropped or added.
generator text_tokens(std::uint64_t seed, double typo)
{
    return [rng = std::mt19937_64(seed), typo, at = std::size_t{0}]() mutable {
        std::uniform_int_distribution<token> letter('a', 'z');
        if (std::bernoulli_distribution(typo)(rng)) {
            switch (std::uniform_int_distribution<int>(0, 2)(rng)) {
            case 0: // replaced
                ++at;
                return letter(rng);
            case 1: // dropped
                ++at;
                break;
            default: // added
                return letter(rng);
            }
        }
        return static_cast<token>(static_cast<unsigned char>(paragraph[at++ % paragraph.size()]));
    };
}

// Words drawn from a Zipf distribution over a vocabulary, each spelled as 1-5 subword tokens
// and followed by a separator: frequent words and phrases recur, rare ones seldom.
constexpr token word_separator = 64;

generator zipf_tokens(std::uint64_t seed, int vocabulary, double exponent)
{
    std::mt19937_64 rng(seed);
    std::vector<double> weights(static_cast<std::size_t>(vocabulary));
    std::vector<tokens> spelling(weights.size());
    for (std::size_t w = 0; w < weights.size(); ++w) {
        weights[w] = 1.0 / std::pow(static_cast<double>(w + 1), exponent);
        spelling[w].resize(std::uniform_int_distribution<std::size_t>(1, 5)(rng));
        for (auto& t : spelling[w]) {
            t = std::uniform_int_distribution<token>(0, 63)(rng);
        }
    }
    return [rng, words = std::discrete_distribution<std::size_t>(weights.begin(), weights.end()), spelling,
            pending = tokens{}, at = std::size_t{0}]() mutable {
        if (at == pending.size()) {
            pending = spelling[words(rng)];
            pending.push_back(word_separator);
            at = 0;
        }
        return pending[at++];
    };
}

// A generator passed by name keeps its state between takes.
template <class Generator>
tokens take(Generator&& g, std::size_t count)
{
    tokens out(count);
    for (auto& t : out) {
        t = g();
    }
    return out;
}

std::vector<named_sequence> prefix_sequences(std::size_t length)
{
    std::vector<named_sequence> out;
    std::uint64_t seed = 1000;
    for (const token alphabet : {2, 3, 5, 20, 1000}) {
        out.push_back({"random alphabet " + std::to_string(alphabet), take(random_tokens(++seed, alphabet), length)});
    }
    for (const int period : {1, 2, 7, 50}) {
        out.push_back({"periodic " + std::to_string(period) + " exact", take(periodic_tokens(++seed, period, 0.0, 30), length)});
        out.push_back({"periodic " + std::to_string(period) + " noisy", take(periodic_tokens(++seed, period, 0.03, 30), length)});
    }
    out.push_back({"text", take(text_tokens(++seed, 0.01), length)});
    out.push_back({"text typos", take(text_tokens(++seed, 0.08), length)});
    out.push_back({"zipf words", take(zipf_tokens(++seed, 200, 1.1), length)});
    return out;
}

// ---- reference for ngram_simple and ngram_index: the five steps of ngram_simple.hpp -----------

class reference_simple {
public:
    reference_simple(int n, int m, int check_rate) : n_(n), m_(m), check_rate_(check_rate) {}

    tokens draft(history_view history, token sampled)
    {
        ++counter_; // step 1
        if (counter_ < check_rate_) {
            return {};
        }
        counter_ = 0;
        const auto length = static_cast<long long>(history.size());
        if (length <= n_ + m_ + 1) { // step 2
            return {};
        }
        tokens pattern(history.end() - (n_ - 1), history.end()); // step 3
        pattern.push_back(sampled);
        for (long long j = length - n_ - 1; j >= 1; --j) { // step 4
            bool same = true;
            for (long long k = 0; k < n_ && same; ++k) {
                same = history[static_cast<std::size_t>(j + k)] == pattern[static_cast<std::size_t>(k)];
            }
            if (!same) {
                continue;
            }
            const long long count = std::min<long long>(m_, length - (j + n_)); // step 5
            if (count < n_) {
                return {};
            }
            return tokens(history.begin() + (j + n_), history.begin() + (j + n_ + count));
        }
        return {};
    }

private:
    long long n_;
    long long m_;
    long long check_rate_;
    long long counter_ = 0;
};

// ---- reference for ngram_map: the statistics recomputed from the whole history on every call --

struct map_settings {
    int n;
    int m;
    int check_rate;
    int min_hits;
    bool values;
    int dominance;
};

struct map_coverage {
    long long drafts = 0;
    long long capped = 0;         // drafts shorter than m
    long long few_hits = 0;       // a key with some occurrences, but fewer than min_hits
    long long not_dominant = 0;   // refused for dominance
    long long untracked = 0;      // drafts of a key with more than 4 distinct values
    long long voted_short = 0;    // drafts cut short by the values' vote
};

class reference_map {
public:
    explicit reference_map(map_settings s) : s_(s) {}

    tokens draft(history_view history, token sampled)
    {
        drafted_.reset();
        ++counter_;
        if (counter_ < s_.check_rate) {
            return {};
        }
        counter_ = 0;
        const auto length = static_cast<long long>(history.size());
        const long long n = s_.n;
        const long long m = s_.m;
        if (length < n - 1) {
            return {};
        }
        tokens key(history.end() - (n - 1), history.end());
        key.push_back(sampled);
        std::vector<long long> occurrences;
        for (long long j = 0; j + n + m <= length; ++j) {
            if (std::equal(key.begin(), key.end(), history.begin() + j)) {
                occurrences.push_back(j);
            }
        }
        const auto total = static_cast<long long>(occurrences.size());
        if (total < s_.min_hits) {
            coverage.few_hits += total > 0 ? 1 : 0;
            return {};
        }
        long long from = occurrences.back() + n;
        if (s_.values) {
            struct tracked {
                long long at;
                long long hits;
            };
            std::vector<tracked> values;
            bool more = false;
            for (const long long j : occurrences) {
                const auto value = history.begin() + (j + n);
                const auto same = std::find_if(values.begin(), values.end(), [&](const tracked& t) {
                    return std::equal(value, value + m, history.begin() + t.at);
                });
                if (same != values.end()) {
                    ++same->hits;
                } else if (values.size() < 4) {
                    values.push_back({j + n, 1});
                } else {
                    more = true;
                }
            }
            std::size_t best = 0;
            for (std::size_t v = 1; v < values.size(); ++v) {
                if (values[v].hits > values[best].hits) {
                    best = v;
                }
            }
            // The vote, token by token, of the values that agreed with the best one so far.
            from = values[best].at;
            long long agreed = 0;
            std::vector<bool> along(values.size(), true);
            for (; agreed < m; ++agreed) {
                long long agree = 0;
                long long part = 0;
                for (std::size_t v = 0; v < values.size(); ++v) {
                    if (along[v] && history[static_cast<std::size_t>(values[v].at + agreed)] == history[static_cast<std::size_t>(from + agreed)]) {
                        agree += values[v].hits;
                    } else if (along[v]) {
                        part += values[v].hits;
                        along[v] = false;
                    }
                }
                if (agree < s_.dominance * part) {
                    break;
                }
            }
            if (agreed == 0) {
                ++coverage.not_dominant;
                return {};
            }
            coverage.untracked += more ? 1 : 0;
            coverage.voted_short += agreed < m ? 1 : 0;
            agreed_ = agreed;
        }
        const auto cap = caps_.find(key);
        const long long count = std::min<long long>(s_.values ? agreed_ : m, cap == caps_.end() ? m : cap->second);
        ++coverage.drafts;
        coverage.capped += count < m ? 1 : 0;
        drafted_ = key;
        drafted_length_ = count;
        return tokens(history.begin() + from, history.begin() + from + count);
    }

    void accept(int n_accepted)
    {
        if (!drafted_) {
            return;
        }
        long long& cap = caps_.try_emplace(*drafted_, s_.m).first->second;
        cap = n_accepted < drafted_length_ ? std::max(1, n_accepted) : std::min<long long>(s_.m, 2 * cap);
        drafted_.reset();
    }

    map_coverage coverage;

private:
    map_settings s_;
    long long counter_ = 0;
    std::map<tokens, long long> caps_;
    std::optional<tokens> drafted_;
    long long drafted_length_ = 0;
    long long agreed_ = 0;
};

qk::spec::ngram_map make_map(const map_settings& s)
{
    return qk::spec::ngram_map({.size_ngram = s.n,
                                .size_mgram = s.m,
                                .check_rate = s.check_rate,
                                .min_hits = s.min_hits,
                                .values = s.values,
                                .dominance = s.dominance});
}

std::size_t expected_indexed(std::size_t length, int n)
{
    const auto unindexed = static_cast<std::size_t>(n) + 1;
    return length > unindexed ? length - unindexed : 0;
}

} // namespace

TEST_CASE("ngram_simple: hand-worked drafts")
{
    // Pattern [1,2,3] (history ends 1,2; sampled 3) is found at j = 6; what followed it is [4,5,1,2].
    const tokens h = {9, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2};
    qk::spec::ngram_simple s({.size_ngram = 3, .size_mgram = 4, .check_rate = 1});
    CHECK(shown{s.draft(h, 3)} == shown{{4, 5, 1, 2}});
    CHECK(s.draft(h, 7).empty()); // [1,2,7] never occurs
    // L = n + m + 1 = 8: too short, although [1,2,3] occurs at j = 1.
    const tokens short_history = {9, 1, 2, 3, 4, 5, 1, 2};
    CHECK(s.draft(short_history, 3).empty());

    // The only occurrence of [1,2] is at j = 0, which is never a match.
    const tokens at_zero = {1, 2, 3, 4, 5, 6, 7, 8, 9, 1};
    qk::spec::ngram_simple two({.size_ngram = 2, .size_mgram = 3, .check_rate = 1});
    CHECK(two.draft(at_zero, 2).empty());

    // The most recent match leaves c = 1 < n = 2 tokens: no draft, even though an older match
    // (j = 1) would have had enough.
    const tokens recent = {0, 5, 6, 7, 8, 9, 3, 4, 5, 6, 0, 1, 5, 6, 5};
    CHECK(two.draft(recent, 6).empty());

    // check_rate 3: only every third call drafts.
    qk::spec::ngram_simple every_third({.size_ngram = 3, .size_mgram = 4, .check_rate = 3});
    CHECK(every_third.draft(h, 3).empty());
    CHECK(every_third.draft(h, 3).empty());
    CHECK(shown{every_third.draft(h, 3)} == shown{{4, 5, 1, 2}});
    CHECK(every_third.draft(h, 3).empty());
}

TEST_CASE("ngram_simple equals the five-step definition on every prefix")
{
    struct setting {
        int n;
        int m;
        int check_rate;
    };
    const setting settings[] = {{1, 1, 1}, {1, 5, 0}, {2, 1, 2}, {2, 3, 1}, {3, 8, 5},
                                {4, 4, 1}, {5, 16, 2}, {6, 2, 1}, {12, 48, 1}};
    long long drafts = 0;
    for (const auto& seq : prefix_sequences(2000)) {
        long long sequence_drafts = 0;
        for (const setting& c : settings) {
            CAPTURE(seq.name);
            CAPTURE(c.n);
            CAPTURE(c.m);
            CAPTURE(c.check_rate);
            qk::spec::ngram_simple lib({.size_ngram = c.n, .size_mgram = c.m, .check_rate = c.check_rate});
            reference_simple ref(c.n, c.m, c.check_rate);
            for (std::size_t i = 0; i < seq.values.size(); ++i) {
                CAPTURE(i);
                const history_view history(seq.values.data(), i);
                const tokens want = ref.draft(history, seq.values[i]);
                const tokens got = lib.draft(history, seq.values[i]);
                CHECK(shown{got} == shown{want});
                if (got != want) {
                    break; // one report per run is enough
                }
                sequence_drafts += want.empty() ? 0 : 1;
            }
        }
        // Every sequence but the unrepeating one gives drafts somewhere, so the comparison
        // covers both outcomes.
        if (seq.name != "random alphabet 1000") {
            CAPTURE(seq.name);
            CHECK(sequence_drafts > 0);
        }
        drafts += sequence_drafts;
    }
    CHECK(drafts > 10000);
}

namespace {

struct index_run {
    std::string name;
    generator source;
    int n;
    int m;
    int check_rate;
    std::size_t calls;
};

// Drives ngram_index and ngram_simple with the same calls: the history mostly grows by one
// token (sometimes by several, as after an accepted draft), is cut off (then regrows by
// appending, with other tokens), and is now and then replaced by a new prompt, sometimes of the
// same length, given to begin() or not (the history's marks tell the index anyway).
void compare_index(index_run run, std::uint64_t seed)
{
    CAPTURE(run.name);
    CAPTURE(run.n);
    CAPTURE(run.m);
    CAPTURE(run.check_rate);
    std::mt19937_64 rng(seed);
    const auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
    const auto uniform = [&](std::size_t lo, std::size_t hi) { return std::uniform_int_distribution<std::size_t>(lo, hi)(rng); };
    generator prompts = random_tokens(seed + 1, 6);

    qk::spec::ngram_index index({.size_ngram = run.n, .size_mgram = run.m, .check_rate = run.check_rate});
    qk::spec::ngram_simple simple({.size_ngram = run.n, .size_mgram = run.m, .check_rate = run.check_rate});
    token_history history;
    long long drafts = 0;
    long long cuts = 0;
    long long replaced = 0;
    long long begins = 0;
    for (std::size_t call = 0; call < run.calls; ++call) {
        CAPTURE(call);
        if (!history.empty() && chance(0.004)) {
            // Mostly short cuts (a rejected draft), sometimes deep ones, down to nothing.
            const std::size_t most = chance(0.8) ? std::min<std::size_t>(history.size(), 64) : history.size();
            history.cut(history.size() - uniform(1, most));
            ++cuts;
        }
        if (call == run.calls / 3 || call == 2 * run.calls / 3 || chance(0.0005)) {
            const std::size_t length = chance(0.5) ? history.size() : uniform(0, 3000);
            tokens prompt = take(prompts, length);
            // The new prompt's n-grams recur, so a stale index would be noticed.
            for (std::size_t i = length / 2; i < length; ++i) {
                prompt[i] = prompt[i - length / 2];
            }
            history.assign(prompt);
            if (++replaced % 2 == 0) {
                index.begin(history);
                simple.begin(history);
                CHECK(index.indexed() == expected_indexed(history.size(), run.n));
                ++begins;
            }
        }
        const token sampled = run.source();
        const tokens want = simple.draft(history, sampled);
        const tokens got = index.draft(history, sampled);
        CAPTURE(history.size());
        CHECK(shown{got} == shown{want});
        CHECK(index.indexed() == expected_indexed(history.size(), run.n));
        if (got != want || index.indexed() != expected_indexed(history.size(), run.n)) {
            break;
        }
        drafts += want.empty() ? 0 : 1;
        history.push_back(sampled);
        if (chance(0.05)) {
            for (std::size_t k = uniform(1, 8); k > 0; --k) {
                history.push_back(run.source());
            }
        }
    }
    CHECK(cuts > 0);
    CHECK(replaced > begins);
    CHECK(begins > 0);
    if (run.name != "random alphabet 1000") {
        CHECK(drafts > 0);
    }
}

} // namespace

TEST_CASE("ngram_index equals ngram_simple on long, cut and replaced histories")
{
    std::uint64_t seed = 77;
    const index_run runs[] = {
        {"periodic 50 noisy", periodic_tokens(++seed, 50, 0.01, 1000), 12, 48, 1, 60000},
        {"periodic 7 noisy", periodic_tokens(++seed, 7, 0.05, 10), 3, 8, 2, 30000},
        {"periodic 1 noisy", periodic_tokens(++seed, 1, 0.1, 4), 2, 4, 1, 20000},
        {"text", text_tokens(++seed, 0.02), 4, 16, 1, 40000},
        {"zipf words", zipf_tokens(++seed, 300, 1.1), 3, 10, 2, 30000},
        {"random alphabet 2", random_tokens(++seed, 2), 12, 16, 3, 30000},
        {"random alphabet 20", random_tokens(++seed, 20), 1, 1, 1, 20000},
        {"random alphabet 5", random_tokens(++seed, 5), 2, 3, 0, 20000},
        {"random alphabet 1000", random_tokens(++seed, 1000), 2, 5, 5, 8000},
    };
    for (const index_run& run : runs) {
        compare_index(run, ++seed);
    }
}

TEST_CASE("ngram_index: indexed() follows the history")
{
    const tokens h = take(periodic_tokens(5, 9, 0.1, 12), 400);
    qk::spec::ngram_index index({.size_ngram = 4, .size_mgram = 6, .check_rate = 1});
    CHECK(index.indexed() == 0);
    token_history history;
    for (const std::size_t length : {0u, 3u, 5u, 6u, 7u, 100u, 99u, 400u, 6u, 5u, 0u, 250u}) {
        CAPTURE(length);
        follow_to(history, history_view(h.data(), length));
        (void)index.draft(history, 1);
        CHECK(index.indexed() == expected_indexed(length, 4));
    }
    index.begin(token_history(history_view(h.data(), 50)));
    CHECK(index.indexed() == 45u);
    // Back to the other history, untouched meanwhile: read afresh, since begin() read another.
    (void)index.draft(history, 1);
    CHECK(index.indexed() == expected_indexed(250, 4));
}

namespace {

struct map_run {
    std::string name;
    generator source;
    std::size_t calls;
};

// Drives ngram_map and its reference with the same calls and the same accept feedback; the
// history grows, is cut (the caps carry on) and is replaced through begin().
void compare_map(const map_settings& s, map_run run, std::uint64_t seed, map_coverage& total)
{
    CAPTURE(run.name);
    CAPTURE(s.n);
    CAPTURE(s.m);
    CAPTURE(s.check_rate);
    CAPTURE(s.min_hits);
    CAPTURE(s.values);
    CAPTURE(s.dominance);
    std::mt19937_64 rng(seed);
    const auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
    const auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

    qk::spec::ngram_map lib = make_map(s);
    reference_map ref(s);
    token_history history;
    for (std::size_t call = 0; call < run.calls; ++call) {
        CAPTURE(call);
        if (history.size() > 1 && chance(0.01)) {
            history.cut(history.size() - static_cast<std::size_t>(uniform(1, static_cast<int>(history.size()) / 2)));
        }
        if (call == run.calls / 2) {
            // A new prompt: the old history's second half, so the caps' keys come back.
            const tokens half(history.tokens().begin() + static_cast<std::ptrdiff_t>(history.size() / 2), history.tokens().end());
            history.assign(half);
            lib.begin(history);
        }
        const token sampled = run.source();
        const tokens want = ref.draft(history.tokens(), sampled);
        const tokens got = lib.draft(history, sampled);
        CAPTURE(history.size());
        CHECK(shown{got} == shown{want});
        if (got != want) {
            break;
        }
        if (!want.empty() && chance(0.9)) {
            const int drafted = static_cast<int>(want.size());
            const int accepted = chance(0.5) ? drafted : uniform(0, drafted);
            lib.accept(accepted);
            ref.accept(accepted);
        } else if (want.empty() && chance(0.2)) {
            // Feedback on an empty draft (maybe after an unjudged one) judges nothing.
            const int accepted = uniform(0, 4);
            lib.accept(accepted);
            ref.accept(accepted);
        }
        history.push_back(sampled);
    }
    total.drafts += ref.coverage.drafts;
    total.capped += ref.coverage.capped;
    total.few_hits += ref.coverage.few_hits;
    total.not_dominant += ref.coverage.not_dominant;
    total.untracked += ref.coverage.untracked;
    total.voted_short += ref.coverage.voted_short;
}

} // namespace

TEST_CASE("ngram_map: hand-worked drafts and caps")
{
    // Key [1,2] occurs at 0, 4 and 8 with values [3,4], [3,4], [5,6] (m = 2); the occurrence at
    // 12 has no complete value in a history of 13 tokens.
    const token_history h(tokens{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 5, 6, 1});
    auto map = qk::spec::ngram_map({.size_ngram = 2, .size_mgram = 2, .dominance = 2});
    CHECK(shown{map.draft(h, 2)} == shown{{3, 4}}); // 2 >= 2 * 1
    map.accept(0);                                   // cap 1
    CHECK(shown{map.draft(h, 2)} == shown{{3}});
    map.accept(1); // all accepted: cap 2
    CHECK(shown{map.draft(h, 2)} == shown{{3, 4}});
    map.accept(2); // doubled, but not above m
    CHECK(shown{map.draft(h, 2)} == shown{{3, 4}});

    auto strict = qk::spec::ngram_map({.size_ngram = 2, .size_mgram = 2, .dominance = 3});
    CHECK(strict.draft(h, 2).empty()); // 2 < 3 * 1

    // The vote, token by token. Key [1,2] at 0, 5, 10 and 15 with values [3,4,5] twice, [3,4,6]
    // and [3,7,7] (m = 3): the best is [3,4,5]. Token 3: all four agree (4 >= 2 * 0); token 4:
    // three agree, [3,7,7] parts (3 >= 2 * 1); token 5: two agree, [3,4,6] parts (2 >= 2 * 1).
    const token_history votes(tokens{1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3, 4, 6, 1, 2, 3, 7, 7, 1});
    auto two = qk::spec::ngram_map({.size_ngram = 2, .size_mgram = 3, .dominance = 2});
    CHECK(shown{two.draft(votes, 2)} == shown{{3, 4, 5}});
    two.accept(3); // all accepted: the cap stays at m
    CHECK(shown{two.draft(votes, 2)} == shown{{3, 4, 5}});
    // Dominance 3: token 4 is agreed (3 >= 3 * 1), token 5 is not (2 < 3 * 1).
    auto three = qk::spec::ngram_map({.size_ngram = 2, .size_mgram = 3, .dominance = 3});
    CHECK(shown{three.draft(votes, 2)} == shown{{3, 4}});
    three.accept(2); // all of a vote-cut draft accepted: the cap (m) is not lowered to 2
    CHECK(shown{three.draft(votes, 2)} == shown{{3, 4}});
    three.accept(1); // one accepted: cap 1
    CHECK(shown{three.draft(votes, 2)} == shown{{3}});
    // Dominance 4: token 3 alone (4 >= 4 * 0), token 4 not (3 < 4 * 1).
    auto four = qk::spec::ngram_map({.size_ngram = 2, .size_mgram = 3, .dominance = 4});
    CHECK(shown{four.draft(votes, 2)} == shown{{3}});
    auto latest = qk::spec::ngram_map({.size_ngram = 2, .size_mgram = 2, .values = false});
    CHECK(shown{latest.draft(h, 2)} == shown{{5, 6}});
    auto three_hits = qk::spec::ngram_map({.size_ngram = 2, .size_mgram = 2, .min_hits = 3, .values = false});
    CHECK(shown{three_hits.draft(h, 2)} == shown{{5, 6}});
    auto four_hits = qk::spec::ngram_map({.size_ngram = 2, .size_mgram = 2, .min_hits = 4, .values = false});
    CHECK(four_hits.draft(h, 2).empty());
}

TEST_CASE("ngram_map equals its definition recomputed from the whole history")
{
    const map_settings settings[] = {
        {1, 1, 1, 1, true, 0}, {1, 4, 1, 2, false, 3}, {2, 3, 1, 1, true, 1}, {2, 4, 2, 2, true, 3},
        {2, 2, 1, 3, false, 0}, {3, 8, 1, 1, true, 3}, {3, 5, 1, 3, true, 1}, {4, 16, 3, 1, false, 1},
        {2, 6, 1, 1, true, 0}, {3, 3, 1, 2, true, 3},
    };
    std::uint64_t seed = 4242;
    map_coverage total;
    for (const map_settings& s : settings) {
        const map_run runs[] = {
            {"periodic 7 noisy", periodic_tokens(++seed, 7, 0.08, 6), 2000},
            {"periodic 2 noisy", periodic_tokens(++seed, 2, 0.1, 3), 1500},
            {"text typos", text_tokens(++seed, 0.05), 2000},
            {"zipf words", zipf_tokens(++seed, 60, 1.2), 2000},
            {"random alphabet 3", random_tokens(++seed, 3), 1500},
        };
        for (const map_run& run : runs) {
            compare_map(s, run, ++seed, total);
        }
    }
    // The runs reach every branch of the definition.
    CHECK(total.drafts > 1000);
    CHECK(total.capped > 100);
    CHECK(total.few_hits > 100);
    CHECK(total.not_dominant > 100);
    CHECK(total.untracked > 10);
    CHECK(total.voted_short > 100);
}

TEST_CASE("n-gram drafters: configuration errors throw qk::error")
{
    const ngram_config bad[] = {{0, 48, 1}, {-1, 48, 1}, {-12, 48, 1}, {12, 0, 1}, {12, -3, 1}, {0, 0, 1}};
    for (const ngram_config& c : bad) {
        CAPTURE(c.size_ngram);
        CAPTURE(c.size_mgram);
        CHECK_THROWS_AS(qk::spec::ngram_simple{c}, qk::error);
        CHECK_THROWS_AS(qk::spec::ngram_index{c}, qk::error);
        const qk::spec::ngram_map::config mc{.size_ngram = c.size_ngram, .size_mgram = c.size_mgram};
        CHECK_THROWS_AS(qk::spec::ngram_map{mc}, qk::error);
    }
    // check_rate <= 1 means every call, not an error; 1 and 1 are the smallest sizes.
    for (const int rate : {-5, 0, 1}) {
        const ngram_config c{.size_ngram = 1, .size_mgram = 1, .check_rate = rate};
        CHECK_NOTHROW(qk::spec::ngram_simple{c});
        CHECK_NOTHROW(qk::spec::ngram_index{c});
    }

    const qk::spec::ngram_map::config no_hits{.min_hits = 0};
    const qk::spec::ngram_map::config negative_hits{.min_hits = -2};
    const qk::spec::ngram_map::config negative_dominance{.dominance = -1};
    CHECK_THROWS_AS(qk::spec::ngram_map{no_hits}, qk::error);
    CHECK_THROWS_AS(qk::spec::ngram_map{negative_hits}, qk::error);
    CHECK_THROWS_AS(qk::spec::ngram_map{negative_dominance}, qk::error);
    const qk::spec::ngram_map::config smallest{.size_ngram = 1, .size_mgram = 1, .min_hits = 1, .dominance = 0};
    CHECK_NOTHROW(qk::spec::ngram_map{smallest});

    qk::spec::ngram_map map({.size_ngram = 2, .size_mgram = 2, .dominance = 0});
    CHECK_THROWS_AS(map.accept(-1), qk::error);
    const token_history h(tokens{1, 2, 3, 4, 1, 2, 3, 4, 1});
    CHECK(shown{map.draft(h, 2)} == shown{{3, 4}});
    CHECK_THROWS_AS(map.accept(-1), qk::error);
    CHECK_NOTHROW(map.accept(0));
}

TEST_CASE("n-gram drafters: designated initializers")
{
    auto simple = qk::spec::ngram_simple({.size_ngram = 12, .size_mgram = 48, .check_rate = 1});
    auto index = qk::spec::ngram_index({.size_ngram = 12, .size_mgram = 48, .check_rate = 1});
    CHECK(simple.config().size_ngram == 12);
    CHECK(simple.config().size_mgram == 48);
    CHECK(simple.config().check_rate == 1);
    CHECK(index.config().size_ngram == 12);
    CHECK(index.config().size_mgram == 48);
    CHECK(index.config().check_rate == 1);

    qk::spec::ngram_simple partial({.size_mgram = 7});
    CHECK(partial.config().size_ngram == ngram_config{}.size_ngram);
    CHECK(partial.config().size_mgram == 7);

    auto map = qk::spec::ngram_map({.size_ngram = 3, .size_mgram = 8, .min_hits = 2, .values = false});
    CHECK(map.configuration().size_ngram == 3);
    CHECK(map.configuration().size_mgram == 8);
    CHECK(map.configuration().min_hits == 2);
    CHECK_FALSE(map.configuration().values);
    CHECK(map.configuration().dominance == qk::spec::ngram_map::config{}.dominance);
}

// ---- token_history ---------------------------------------------------------------------------

TEST_CASE("token_history: unchanged_since after appends, cuts, regrowth, assign, clear, copies and moves")
{
    token_history h;
    const token_history::mark empty = h.seen();
    CHECK(h.unchanged_since(empty) == 0);
    CHECK(h.unchanged_since(token_history::mark{}) == 0);

    h.append(tokens{1, 2, 3, 4, 5});
    const token_history::mark five = h.seen();
    CHECK(h.unchanged_since(empty) == 0); // it held nothing then
    CHECK(h.unchanged_since(five) == 5);
    h.push_back(6);
    CHECK(h.unchanged_since(five) == 5); // appended to only
    const token_history::mark six = h.seen();
    CHECK(h.unchanged_since(six) == 6);

    h.cut(4);
    CHECK(h.unchanged_since(six) == 4);
    CHECK(h.unchanged_since(five) == 4);
    h.push_back(5); // the token position 4 held before: still written since
    h.append(tokens{7, 8, 9});
    CHECK(h.size() == 8);
    CHECK(h.unchanged_since(six) == 4);
    CHECK(h.unchanged_since(five) == 4);
    const token_history::mark eight = h.seen();
    h.cut(8); // to its own length: nothing changes
    CHECK(h.unchanged_since(eight) == 8);

    // Cut and regrown past the old length: the length alone cannot tell.
    h.cut(2);
    h.append(tokens{1, 1, 1, 1, 1, 1, 1, 1, 1});
    CHECK(h.size() == 11);
    CHECK(h.unchanged_since(eight) == 2);
    CHECK(h.unchanged_since(six) == 2);
    CHECK(h.unchanged_since(empty) == 0);

    const token_history::mark eleven = h.seen();
    CHECK_THROWS_AS(h.cut(12), qk::error);
    CHECK(h.size() == 11);
    CHECK(h.unchanged_since(eleven) == 11);

    // assign: all of it new, even the same tokens.
    const tokens same(h.tokens().begin(), h.tokens().end());
    h.assign(same);
    CHECK(h.size() == 11);
    CHECK(h.unchanged_since(eleven) == 0);
    const token_history::mark assigned = h.seen();
    CHECK(h.unchanged_since(assigned) == 11);

    // clear: nothing left; what is appended afterwards is new.
    h.clear();
    CHECK(h.empty());
    CHECK(h.unchanged_since(assigned) == 0);
    h.append(same);
    CHECK(h.unchanged_since(assigned) == 0);
    const token_history::mark refilled = h.seen();

    // A copy holds the same tokens but is a new history: nothing a reader saw of either carries over.
    token_history copy = h;
    CHECK(shown{tokens(copy.tokens().begin(), copy.tokens().end())} == shown{same});
    CHECK(copy.unchanged_since(refilled) == 0);
    CHECK(h.unchanged_since(copy.seen()) == 0);
    CHECK(copy.unchanged_since(copy.seen()) == 11);
    CHECK(h.unchanged_since(refilled) == 11); // the original is untouched
    token_history assigned_copy(tokens{4, 4});
    const token_history::mark before_assignment = assigned_copy.seen();
    assigned_copy = h;
    CHECK(assigned_copy.size() == 11);
    CHECK(assigned_copy.unchanged_since(before_assignment) == 0);
    CHECK(assigned_copy.unchanged_since(refilled) == 0);

    // Another history with the same tokens: 0.
    const token_history other(same);
    CHECK(other.unchanged_since(refilled) == 0);
    CHECK(h.unchanged_since(other.seen()) == 0);

    // A move hands the sequence over as it was (a reader's mark still holds); the moved-from
    // history is empty, and what it is given afterwards is new.
    token_history moved(std::move(h));
    CHECK(moved.size() == 11);
    CHECK(moved.unchanged_since(refilled) == 11);
    CHECK(h.empty()); // a moved-from history is empty and usable
    CHECK(h.unchanged_since(refilled) == 0);
    h.append(same);
    CHECK(h.unchanged_since(refilled) == 0);
    token_history target(tokens{9, 9, 9});
    const token_history::mark target_before = target.seen();
    target = std::move(moved);
    CHECK(target.size() == 11);
    CHECK(target.unchanged_since(refilled) == 11);
    CHECK(target.unchanged_since(target_before) == 0);
    CHECK(moved.empty());
    CHECK(moved.unchanged_since(refilled) == 0);
}

// Whatever the edits, unchanged_since(mark) is the shortest length the history has had since the
// mark was taken: every position below it was kept throughout, and every position at or above
// it was cut off at some point (or never there), so rewritten since.
TEST_CASE("token_history: unchanged_since is the shortest length since the mark, under random edits")
{
    std::mt19937_64 rng(31337);
    const auto uniform = [&](std::size_t lo, std::size_t hi) { return std::uniform_int_distribution<std::size_t>(lo, hi)(rng); };
    struct tracked {
        token_history::mark mark;
        std::size_t shortest;
    };
    token_history h;
    std::vector<tracked> marks;
    long long below_old_length = 0; // checks where a regrown history reached the mark's length again
    for (int step = 0; step < 4000; ++step) {
        bool emptied = false; // on the way: assign() replaces every token
        switch (uniform(0, 9)) {
        case 0:
        case 1:
        case 2:
            h.push_back(static_cast<token>(uniform(0, 2)));
            break;
        case 3:
        case 4: {
            tokens more(uniform(0, 6));
            for (auto& t : more) {
                t = static_cast<token>(uniform(0, 2));
            }
            h.append(more);
            break;
        }
        case 5:
        case 6:
            h.cut(h.size() - uniform(0, std::min<std::size_t>(h.size(), 8)));
            break;
        case 7:
            h.cut(uniform(0, h.size()));
            break;
        case 8:
            if (uniform(0, 4) == 0) {
                h.clear();
            } else if (uniform(0, 4) == 0) {
                h.assign(tokens(uniform(0, 40), 1));
                emptied = true;
            }
            break;
        default:
            break;
        }
        for (tracked& t : marks) {
            t.shortest = emptied ? 0 : std::min(t.shortest, h.size());
        }
        if (uniform(0, 3) == 0) {
            marks.push_back({h.seen(), h.size()});
        }
        if (marks.size() > 24) {
            marks.erase(marks.begin() + static_cast<std::ptrdiff_t>(uniform(0, marks.size() - 1)));
        }
        for (const tracked& t : marks) {
            CAPTURE(step);
            CAPTURE(t.mark.length);
            CAPTURE(h.size());
            REQUIRE(h.unchanged_since(t.mark) == t.shortest);
            below_old_length += t.shortest < t.mark.length && h.size() >= t.mark.length ? 1 : 0;
        }
    }
    CHECK(below_old_length > 1000);
}

// ---- cut and regrown between calls -----------------------------------------------------------

namespace {

struct regrow_run {
    std::string name;
    generator source;
    map_settings settings; // ngram_index and ngram_simple take its n, m and check rate
    std::size_t calls;
};

struct regrow_counts {
    long long regrown = 0;          // calls after a regrowth that changed tokens below the old length
    long long regrown_longer = 0;   // ... to the old length or beyond, where the length cannot tell
    long long index_drafts = 0;     // ngram_simple's drafts on those calls
    long long map_drafts = 0;       // the ngram_map reference's drafts on those calls
    long long switches = 0;         // calls on the other history than the previous call's
};

// One history (or two, served by the same drafters in turn, as one drafter serving two
// conversations) edited at random between draft calls: appended to; cut and regrown with other
// tokens, to below, at or beyond its old length; cut without regrowth; replaced by a new prompt;
// copied (a new history). After every call ngram_index must equal ngram_simple's scan, and
// ngram_map its definition recomputed from scratch (the caps fed the same accept() feedback).
void compare_regrown(regrow_run run, std::uint64_t seed, regrow_counts& counts)
{
    const map_settings& s = run.settings;
    CAPTURE(run.name);
    CAPTURE(s.n);
    CAPTURE(s.m);
    CAPTURE(s.check_rate);
    CAPTURE(s.min_hits);
    CAPTURE(s.values);
    CAPTURE(s.dominance);
    std::mt19937_64 rng(seed);
    const auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
    const auto uniform = [&](std::size_t lo, std::size_t hi) { return std::uniform_int_distribution<std::size_t>(lo, hi)(rng); };

    qk::spec::ngram_index index({.size_ngram = s.n, .size_mgram = s.m, .check_rate = s.check_rate});
    qk::spec::ngram_simple simple({.size_ngram = s.n, .size_mgram = s.m, .check_rate = s.check_rate});
    qk::spec::ngram_map map = make_map(s);
    reference_map map_reference(s);

    token_history histories[2];
    bool regrown[2] = {false, false};       // since the history was last drafted from
    bool regrown_longer[2] = {false, false};
    std::size_t active = 0;
    std::size_t previous = 0;
    for (std::size_t call = 0; call < run.calls; ++call) {
        CAPTURE(call);
        if (chance(0.05)) {
            active = 1 - active;
        }
        token_history& history = histories[active];
        const std::size_t old_length = history.size();
        const double edit = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
        if (old_length > 0 && (edit < 0.3 || old_length > 700)) {
            // Cut (mostly a few tokens, as a rejected continuation; sometimes deep, as a
            // regeneration) and regrown with other tokens: the first differs from the one it
            // replaces, so the history changed below its old length.
            const std::size_t cut = chance(0.8) ? uniform(1, std::min<std::size_t>(old_length, 16)) : uniform(1, old_length);
            const std::size_t kept = old_length - cut;
            const token replaced = history[kept];
            history.cut(kept);
            tokens regrowth(uniform(1, cut + 12));
            for (auto& t : regrowth) {
                t = run.source();
            }
            if (regrowth[0] == replaced) {
                regrowth[0] = replaced + 1;
            }
            history.append(regrowth);
            regrown[active] = true;
            regrown_longer[active] = regrown_longer[active] || history.size() >= old_length;
        } else if (old_length > 0 && edit < 0.35) {
            history.cut(old_length - uniform(1, std::min<std::size_t>(old_length, 16)));
        } else if (edit < 0.355) {
            // A new prompt (to the same length half the time): a few recurring phrases.
            tokens prompt(chance(0.5) ? old_length : uniform(0, 400));
            for (std::size_t i = 0; i < prompt.size(); ++i) {
                prompt[i] = i >= 20 && chance(0.7) ? prompt[i - 20] : run.source();
            }
            history.assign(prompt);
            regrown[active] = regrown[active] || !prompt.empty();
            if (chance(0.3)) {
                index.begin(history);
                map.begin(history);
            }
        } else if (edit < 0.36) {
            history = token_history(history); // a copy: the same tokens in a new history
        }
        const token sampled = run.source();
        CAPTURE(history.size());
        const tokens want_index = simple.draft(history, sampled);
        const tokens got_index = index.draft(history, sampled);
        CHECK(shown{got_index} == shown{want_index});
        const tokens want_map = map_reference.draft(history.tokens(), sampled);
        const tokens got_map = map.draft(history, sampled);
        CHECK(shown{got_map} == shown{want_map});
        if (got_index != want_index || got_map != want_map) {
            break; // one report per run is enough
        }
        if (regrown[active]) {
            ++counts.regrown;
            counts.regrown_longer += regrown_longer[active] ? 1 : 0;
            counts.index_drafts += want_index.empty() ? 0 : 1;
            counts.map_drafts += want_map.empty() ? 0 : 1;
        }
        regrown[active] = false;
        regrown_longer[active] = false;
        counts.switches += active != previous ? 1 : 0;
        previous = active;
        if (!want_map.empty() && chance(0.9)) {
            const int drafted = static_cast<int>(want_map.size());
            const int accepted = chance(0.5) ? drafted : static_cast<int>(uniform(0, want_map.size()));
            map.accept(accepted);
            map_reference.accept(accepted);
        }
        history.push_back(sampled);
        if (chance(0.2)) {
            for (std::size_t k = uniform(1, 6); k > 0; --k) {
                history.push_back(run.source());
            }
        }
    }
}

} // namespace

TEST_CASE("ngram_index and ngram_map: histories cut and regrown with other tokens between calls")
{
    std::uint64_t seed = 2718;
    const map_settings settings[] = {
        {1, 1, 1, 1, true, 0},  {2, 3, 1, 1, true, 1},  {2, 4, 2, 2, false, 3}, {3, 5, 1, 1, true, 3},
        {3, 8, 1, 2, false, 0}, {4, 6, 3, 1, true, 1},  {2, 2, 1, 3, true, 0},  {4, 16, 1, 1, false, 1},
    };
    regrow_counts counts;
    for (const map_settings& s : settings) {
        const regrow_run runs[] = {
            {"random alphabet 3", random_tokens(++seed, 3), s, 2500},
            {"periodic 5 noisy", periodic_tokens(++seed, 5, 0.05, 4), s, 2500},
            {"periodic 11 noisy", periodic_tokens(++seed, 11, 0.02, 6), s, 2500},
            {"text typos", text_tokens(++seed, 0.03), s, 2500},
        };
        for (const regrow_run& run : runs) {
            compare_regrown(run, ++seed, counts);
        }
    }
    // The calls this test is about happened, often, and drew drafts from both drafters.
    CAPTURE(counts.regrown);
    CAPTURE(counts.regrown_longer);
    CAPTURE(counts.index_drafts);
    CAPTURE(counts.map_drafts);
    CAPTURE(counts.switches);
    CHECK(counts.regrown > 20000);
    CHECK(counts.regrown_longer > 10000);
    CHECK(counts.index_drafts > 2000);
    CHECK(counts.map_drafts > 2000);
    CHECK(counts.switches > 1000);
}
