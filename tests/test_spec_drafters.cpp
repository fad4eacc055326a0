// The n-gram drafters of qk::spec (ngram_simple, ngram_index, ngram_map) against brute-force
// references written from the header comments (the specification), called on every prefix of
// random, periodic and text-like sequences, with truncated and replaced histories, and errors.
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

namespace {

using token = std::int32_t;
using tokens = std::vector<token>;
using history_view = std::span<const token>;
using qk::spec::ngram_config;

// doctest cannot print a std::vector: wrapped, a failed comparison shows both drafts.
struct shown {
    tokens v;
    bool operator==(const shown&) const = default;
};

std::ostream& operator<<(std::ostream& out, const shown& s)
{
    out << '[';
    for (std::size_t i = 0; i < s.v.size(); ++i) {
        out << (i ? "," : "") << s.v[i];
    }
    return out << ']';
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

struct named_sequence {
    std::string name;
    tokens values;
};

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
            const long long others = total - values[best].hits;
            if (values[best].hits < s_.dominance * others) {
                ++coverage.not_dominant;
                return {};
            }
            coverage.untracked += more ? 1 : 0;
            from = values[best].at;
        }
        const auto cap = caps_.find(key);
        const long long count = std::min<long long>(m, cap == caps_.end() ? m : cap->second);
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
// token (sometimes by several, as after an accepted draft), is cut off without notice (then
// regrows by appending, with other tokens), and is now and then replaced by a new prompt given
// to begin(), sometimes of the same length, so that only begin() can tell.
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
    tokens history;
    long long drafts = 0;
    long long cuts = 0;
    long long begins = 0;
    for (std::size_t call = 0; call < run.calls; ++call) {
        CAPTURE(call);
        if (!history.empty() && chance(0.004)) {
            // Mostly short cuts (a rejected draft), sometimes deep ones, down to nothing.
            const std::size_t most = chance(0.8) ? std::min<std::size_t>(history.size(), 64) : history.size();
            history.resize(history.size() - uniform(1, most));
            ++cuts;
        }
        if (call == run.calls / 3 || chance(0.0005)) {
            const std::size_t length = chance(0.5) ? history.size() : uniform(0, 3000);
            history = take(prompts, length);
            // The new prompt's n-grams recur, so a stale index would be noticed.
            for (std::size_t i = length / 2; i < length; ++i) {
                history[i] = history[i - length / 2];
            }
            index.begin(history);
            simple.begin(history);
            CHECK(index.indexed() == expected_indexed(history.size(), run.n));
            ++begins;
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
    for (const std::size_t length : {0u, 3u, 5u, 6u, 7u, 100u, 99u, 400u, 6u, 5u, 0u, 250u}) {
        CAPTURE(length);
        (void)index.draft(history_view(h.data(), length), 1);
        CHECK(index.indexed() == expected_indexed(length, 4));
    }
    index.begin(history_view(h.data(), 50));
    CHECK(index.indexed() == 45u);
}

namespace {

struct map_run {
    std::string name;
    generator source;
    std::size_t calls;
};

// Drives ngram_map and its reference with the same calls and the same accept feedback; the
// history grows, is cut without notice (the caps carry on) and is replaced through begin().
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
    tokens history;
    for (std::size_t call = 0; call < run.calls; ++call) {
        CAPTURE(call);
        if (history.size() > 1 && chance(0.01)) {
            history.resize(history.size() - static_cast<std::size_t>(uniform(1, static_cast<int>(history.size()) / 2)));
        }
        if (call == run.calls / 2) {
            // A new prompt: the old history's second half, so the caps' keys come back.
            history.erase(history.begin(), history.begin() + static_cast<std::ptrdiff_t>(history.size() / 2));
            lib.begin(history);
        }
        const token sampled = run.source();
        const tokens want = ref.draft(history, sampled);
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
}

} // namespace

TEST_CASE("ngram_map: hand-worked drafts and caps")
{
    // Key [1,2] occurs at 0, 4 and 8 with values [3,4], [3,4], [5,6] (m = 2); the occurrence at
    // 12 has no complete value in a history of 13 tokens.
    const tokens h = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 5, 6, 1};
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
    const tokens h = {1, 2, 3, 4, 1, 2, 3, 4, 1};
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
