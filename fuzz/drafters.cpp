// libFuzzer target: the speculative drafting of include/spec (ngram_simple, ngram_index,
// ngram_map, ngram_mod, suffix_drafter, drafter_selection over them, token_history,
// verify_greedy, verify_stochastic and replay) fed fuzzed configurations, token histories, cuts
// and feedback. Built and run by scripts/fuzz.sh (clang, ASan and UBSan).
//
// Input: 48 header bytes, then a payload that every token (and logit) is read from, cyclically
// (a short payload repeats, so n-grams recur and drafters find matches).
//  h[0]     what (h[0] % 8): 0 ngram_simple and ngram_index, 1 ngram_map, 2 ngram_mod,
//           3 suffix_drafter (with a corpus when h[1] & 0x80), 4 drafter_selection of ngram_index,
//           ngram_map, ngram_mod and suffix_drafter, 5 verify_greedy, 6 verify_stochastic, 7 replay
//  h[1]     tokens: bits 0-1 the alphabet (small ids; small ids and the int32 extremes; raw int32;
//           only extremes), bits 2-4 the small alphabet's size
//  h[2-13]  configuration codes, read in turn (fields: integer, fraction); verify_stochastic:
//           h[2] the vocabulary, h[3] the chain, h[4-5] the generator; replay: h[2] the drafter
//           (ngram_simple, ngram_index, ngram_map, ngram_mod, suffix_drafter), then its codes
//  h[14]    the history's (replay: the sequence's) length, up to about 3000 tokens
//  h[15]    ops: h[15] % 33 of the op codes h[16-47] (low 3 bits the op, high 5 its argument):
//           draft; draft and speculate (append the sampled token and an accepted prefix, then
//           feedback); append; cut (back, to half, or past the end); feedback alone; begin();
//           edit the history (assign, clear, copy over, move round trip); copy the drafter,
//           reset it, or add a corpus sequence. verify_greedy and verify_stochastic: one
//           verification per op code (the draft's length, the logits' mode, a wrong size);
//           replay: h[16-18] prompt, n_batch and max_draft
// Contract: a constructor or call succeeds or throws qk::error exactly where its header says; a
// throw changes nothing visible (later drafts still equal the reference's); every draft equals
// an independent reference computed from scratch from its header's definition (ngram_index and
// ngram_simple against ngram_simple's five steps; ngram_map's statistics and caps; ngram_mod's
// pool, entry for entry; suffix_drafter's longest match and counts; drafter_selection's scores,
// statistics and choice), is bounded by its configured maximum and copied from the history (or
// corpus, or pool) where the header says so; the same drafts from a twin built the same way, a
// copy made midway and, where nothing but the history matters, a fresh drafter reading a fresh
// history; token_history's unchanged_since() equals a model of its stamps for marks taken along
// the way; verify_greedy accepts the longest agreeing prefix; verify_stochastic emits accepted
// draft tokens then one token of the row's candidates (never the rejected one), leaves the chain
// as selecting and accepting those tokens row by row does, gives the same from copies, and on a
// throw leaves the chain and the generator as they were; replay reports what a loop written from
// its header counts, and the progress it promises.
#include <sampling/chain.hpp>
#include <spec/spec.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "contract.hpp"

namespace {

namespace spec = qk::spec;
namespace qs = qk::sampling;
using tokens_t = std::vector<std::int32_t>;

constexpr std::size_t header_bytes = 48;
constexpr std::int32_t int32_max = std::numeric_limits<std::int32_t>::max();
constexpr std::int32_t int32_min = std::numeric_limits<std::int32_t>::min();
constexpr float inf = std::numeric_limits<float>::infinity();

using qk_fuzz::attempt;
using qk_fuzz::current_call;
using qk_fuzz::current_input;
using qk_fuzz::report;
using qk_fuzz::require;

void require_outcome(bool ok, bool valid)
{
    require(ok || !valid, "refused what its header accepts");
    require(!ok || valid, "accepted what its header refuses");
}

struct payload {
    std::span<const std::uint8_t> bytes;

    [[nodiscard]] std::uint8_t at(std::size_t i) const { return bytes.empty() ? 0 : bytes[i % bytes.size()]; }
    [[nodiscard]] std::uint32_t u32(std::size_t i) const
    {
        return at(i) | std::uint32_t{at(i + 1)} << 8 | std::uint32_t{at(i + 2)} << 16 | std::uint32_t{at(i + 3)} << 24;
    }
};

// Tokens read in turn from the payload, in one of four alphabets.
class token_stream {
public:
    token_stream(const payload& p, std::uint8_t code) : p_(p), mode_(code % 4), alphabet_(1 + (code >> 2) % 8) {}

    std::int32_t next()
    {
        const std::uint8_t b = p_.at(cursor_);
        switch (mode_) {
        case 0: ++cursor_; return b % alphabet_;
        case 1: {
            ++cursor_;
            constexpr std::array<std::int32_t, 8> extremes = {int32_max, -1, int32_min, -2, int32_max - 1, 0, int32_min + 1, 1};
            return b % 8 == 7 ? extremes[(b >> 3) % 8] : b % alphabet_;
        }
        case 2: {
            const auto v = static_cast<std::int32_t>(p_.u32(cursor_));
            cursor_ += 4;
            return v;
        }
        default: {
            ++cursor_;
            constexpr std::array<std::int32_t, 5> extremes = {int32_max, int32_max - 1, -1, int32_min, 0};
            return extremes[b % (alphabet_ < 5 ? alphabet_ : 5)];
        }
        }
    }
    tokens_t take(std::size_t n)
    {
        tokens_t t(n);
        for (auto& v : t) {
            v = next();
        }
        return t;
    }
    std::uint8_t byte() { return p_.at(cursor_++); }

private:
    payload p_;
    int mode_;
    std::int32_t alphabet_;
    std::size_t cursor_ = 0;
};

// Configuration codes, read in turn from h[2-13] (cyclically).
class fields {
public:
    fields(std::span<const std::uint8_t> codes, const payload& p) : codes_(codes), p_(p) {}

    std::uint8_t byte() { return codes_[next_++ % codes_.size()]; }

    // Small values mostly (drafters need short n-grams to match), then 0, -1, the int32 limits.
    std::int32_t integer()
    {
        const std::uint8_t c = byte();
        const int hi = c >> 4;
        switch (c % 16) {
        case 0: return hi;
        case 1: return -1;
        case 2: return 0;
        case 3: return c >= 0x80 ? int32_max : int32_min;
        case 4: return 1 + hi;
        case 5: return 2 + hi % 4;
        case 6: return 1;
        case 7: return 2;
        case 8: return 3;
        case 9: return 4 + hi;
        case 10: return 16 + hi * 4;
        case 11: return static_cast<std::int32_t>(p_.u32(hi));
        case 12: return -2 - hi;
        case 13: return 1 + hi % 3;
        case 14: return 64 + hi * 16;
        default: return int32_max - hi;
        }
    }
    // A rate or confidence: [0, 1] mostly, then outside, infinite, NaN.
    double fraction()
    {
        const std::uint8_t c = byte();
        const int hi = c >> 4;
        switch (c % 8) {
        case 0: return 0.0;
        case 1: return 1.0;
        case 2: return std::numeric_limits<double>::quiet_NaN();
        case 3: return -0.25 * (1 + hi);
        case 4: return 1.0 + hi;
        case 5: return std::numeric_limits<double>::infinity();
        default: return hi / 16.0;
        }
    }

private:
    std::span<const std::uint8_t> codes_;
    payload p_;
    std::size_t next_ = 0;
};

std::size_t length_code(std::uint8_t c)
{
    const std::size_t hi = c >> 3;
    switch (c % 8) {
    case 1: return 32 + hi * 8;
    case 2: return 300 + hi * 20;
    case 3: return 1000 + hi * 32;
    case 4: return 2000 + hi * 32;
    default: return hi;
    }
}

bool contains_run(std::span<const std::int32_t> haystack, const tokens_t& needle)
{
    return needle.empty() || std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end()) != haystack.end();
}

// ---- token_history and its model --------------------------------------------------------------------

// The history the drafters read, edited together with a model of its stamps (token_history's
// header): every token written gets a stamp above all before it; a mark is (history, length, the
// last token's stamp); unchanged_since(mark) is the longest prefix, within the mark's length,
// whose stamps are at most the mark's. A copy is another history.
class histories {
public:
    struct model_mark {
        std::uint64_t id = 0;
        std::size_t length = 0;
        std::uint64_t last = 0;
    };

    spec::token_history h;

    explicit histories(const tokens_t& first)
    {
        h.append(first);
        write(first);
    }

    [[nodiscard]] std::size_t size() const { return tokens_.size(); }
    [[nodiscard]] const tokens_t& tokens() const { return tokens_; }

    void push(std::int32_t t)
    {
        h.push_back(t);
        write({t});
    }
    void append(const tokens_t& t)
    {
        h.append(t);
        write(t);
    }
    // True when the cut was in range (else qk::error, nothing changed).
    bool cut(std::size_t length)
    {
        current_call = "token_history::cut";
        const bool ok = attempt([&] { h.cut(length); });
        require_outcome(ok, length <= tokens_.size());
        if (ok) {
            tokens_.resize(length);
            stamps_.resize(length);
        }
        return ok;
    }
    void assign(const tokens_t& t)
    {
        h.assign(t);
        tokens_.clear();
        stamps_.clear();
        write(t);
    }
    void clear()
    {
        h.clear();
        tokens_.clear();
        stamps_.clear();
    }
    // A copy is a new history: its readers re-read it; the copy assigned back is new too.
    void copy_over()
    {
        const spec::token_history copy(h);
        require(std::ranges::equal(copy.tokens(), tokens_), "a copied history holds other tokens");
        for (const auto& [m, mm] : marks_) {
            require(copy.unchanged_since(m) == 0, "a copy of a history keeps the marks of the original");
        }
        h = copy;
        id_ = ++ids_;
    }
    // A move hands the history over, marks and all; the moved-from one is empty and another.
    void move_round_trip()
    {
        spec::token_history moved(std::move(h));
        require(h.empty(), "a moved-from history is not empty");
        for (const auto& [m, mm] : marks_) {
            require(h.unchanged_since(m) == 0, "a moved-from history keeps the marks");
            require(moved.unchanged_since(m) == unchanged_since(mm), "a moved history lost its marks");
        }
        h = std::move(moved);
    }

    // Takes a mark (of both) and checks every mark kept against the model.
    void check()
    {
        require(std::ranges::equal(h.tokens(), tokens_) && h.size() == tokens_.size(), "the history holds other tokens than written");
        marks_.emplace_back(h.seen(), model_mark{id_, tokens_.size(), stamps_.empty() ? 0 : stamps_.back()});
        if (marks_.size() > 6) {
            marks_.erase(marks_.begin());
        }
        for (const auto& [m, mm] : marks_) {
            require(h.unchanged_since(m) == unchanged_since(mm), "unchanged_since() differs from the stamps' rule");
        }
    }

    [[nodiscard]] model_mark mark() const { return {id_, tokens_.size(), stamps_.empty() ? 0 : stamps_.back()}; }
    [[nodiscard]] std::size_t unchanged_since(const model_mark& m) const
    {
        if (m.id != id_) {
            return 0;
        }
        const std::size_t limit = std::min(m.length, stamps_.size());
        std::size_t k = 0;
        while (k < limit && stamps_[k] <= m.last) {
            ++k;
        }
        return k;
    }

private:
    void write(const tokens_t& t)
    {
        for (const std::int32_t v : t) {
            tokens_.push_back(v);
            stamps_.push_back(++stamp_);
        }
    }

    tokens_t tokens_;
    std::vector<std::uint64_t> stamps_;
    std::uint64_t stamp_ = 0;
    inline static std::uint64_t ids_ = 0;
    std::uint64_t id_ = ++ids_;
    std::vector<std::pair<spec::token_history::mark, model_mark>> marks_;
};

// The check-rate counter of every drafter (ngram_simple's step 1).
bool due(std::int32_t& counter, std::int32_t rate)
{
    ++counter;
    if (counter < rate) {
        return false;
    }
    counter = 0;
    return true;
}

// ---- references, each from its header's definition ---------------------------------------------------

// ngram_simple's steps 2 to 5 (ngram_simple.hpp), for ngram_simple and ngram_index alike.
tokens_t simple_reference(const tokens_t& h, std::int32_t sampled, std::size_t n, std::size_t m)
{
    const std::size_t length = h.size();
    if (length <= n + m + 1) {
        return {};
    }
    tokens_t pattern(h.end() - static_cast<std::ptrdiff_t>(n - 1), h.end());
    pattern.push_back(sampled);
    for (std::size_t j = length - n - 1; j >= 1; --j) {
        if (std::equal(pattern.begin(), pattern.end(), h.begin() + static_cast<std::ptrdiff_t>(j))) {
            const std::size_t c = std::min(m, length - (j + n));
            if (c < n) {
                return {};
            }
            return {h.begin() + static_cast<std::ptrdiff_t>(j + n), h.begin() + static_cast<std::ptrdiff_t>(j + n + c)};
        }
    }
    return {};
}

// ngram_map's definition (ngram_map.hpp): occurrences, tracked values, the vote and the caps.
struct map_reference {
    explicit map_reference(const spec::ngram_map::config& config) : c(config) {}

    spec::ngram_map::config c;
    std::int32_t counter = 0;
    std::map<tokens_t, std::int32_t> caps;
    std::optional<tokens_t> last_key;
    std::int32_t last_length = 0;
    std::int32_t last_cap = 0;

    tokens_t draft(const tokens_t& h, std::int32_t sampled)
    {
        last_key.reset();
        if (!due(counter, c.check_rate)) {
            return {};
        }
        const auto n = static_cast<std::size_t>(c.size_ngram);
        const auto m = static_cast<std::size_t>(c.size_mgram);
        if (h.size() + 1 < n) {
            return {};
        }
        tokens_t key(h.end() - static_cast<std::ptrdiff_t>(n - 1), h.end());
        key.push_back(sampled);
        struct value {
            std::size_t position;
            std::int64_t hits;
        };
        std::vector<value> tracked;
        std::int64_t total = 0;
        std::size_t latest = 0;
        for (std::size_t j = 0; h.size() >= n + m && j <= h.size() - n - m; ++j) {
            if (!std::equal(key.begin(), key.end(), h.begin() + static_cast<std::ptrdiff_t>(j))) {
                continue;
            }
            ++total;
            latest = j + n;
            const auto same = [&](const value& v) {
                return std::equal(h.begin() + static_cast<std::ptrdiff_t>(v.position), h.begin() + static_cast<std::ptrdiff_t>(v.position + m),
                                  h.begin() + static_cast<std::ptrdiff_t>(j + n));
            };
            const auto it = std::find_if(tracked.begin(), tracked.end(), same);
            if (it != tracked.end()) {
                ++it->hits;
            } else if (tracked.size() < 4) {
                tracked.push_back({j + n, 1});
            }
        }
        if (total < c.min_hits) {
            return {};
        }
        std::size_t from = latest;
        std::size_t agreed = m;
        if (c.values) {
            std::size_t best = 0;
            for (std::size_t v = 1; v < tracked.size(); ++v) {
                best = tracked[v].hits > tracked[best].hits ? v : best;
            }
            from = tracked[best].position;
            std::vector<bool> along(tracked.size(), true);
            for (std::size_t i = 0; i < m; ++i) {
                std::int64_t agree = 0;
                std::int64_t part = 0;
                for (std::size_t v = 0; v < tracked.size(); ++v) {
                    if (!along[v]) {
                        continue;
                    }
                    if (h[tracked[v].position + i] == h[from + i]) {
                        agree += tracked[v].hits;
                    } else {
                        part += tracked[v].hits;
                        along[v] = false;
                    }
                }
                if (agree < c.dominance * part) {
                    agreed = i;
                    break;
                }
            }
            if (agreed == 0) {
                return {};
            }
        }
        const auto cap = caps.find(key);
        last_cap = cap == caps.end() ? c.size_mgram : cap->second;
        const std::size_t length = std::min(agreed, static_cast<std::size_t>(last_cap));
        last_key = key;
        last_length = static_cast<std::int32_t>(length);
        return {h.begin() + static_cast<std::ptrdiff_t>(from), h.begin() + static_cast<std::ptrdiff_t>(from + length)};
    }

    // False where accept() must throw (nothing changes then).
    bool accept(std::int32_t accepted, std::int32_t verified)
    {
        if (accepted < 0 || verified < 0) {
            return false;
        }
        if (!last_key) {
            return true;
        }
        const bool full = accepted >= std::min(verified, last_length);
        caps[*last_key] = full ? std::min(c.size_mgram, 2 * last_cap) : std::max(1, accepted);
        last_key.reset();
        return true;
    }
};

// ngram_mod's definition (ngram_mod.hpp): the pool entry for entry, `added`, the walk, the lows.
struct mod_reference {
    explicit mod_reference(const spec::ngram_mod_config& config) : c(config), pool(config.pool_size, -1) {}

    spec::ngram_mod_config c;
    tokens_t pool;
    std::size_t added = 0;
    std::int32_t last_length = 0;
    std::int32_t lows = 0;
    histories::model_mark mark;

    [[nodiscard]] std::size_t used() const
    {
        return static_cast<std::size_t>(std::count_if(pool.begin(), pool.end(), [](std::int32_t e) { return e != -1; }));
    }
    [[nodiscard]] std::size_t entry(std::span<const std::int32_t> key) const
    {
        std::uint64_t h = 0;
        for (const std::int32_t t : key) {
            h = h * spec::ngram_pool::multiplier + static_cast<std::uint64_t>(t);
        }
        return static_cast<std::size_t>(h % pool.size());
    }
    void add(const tokens_t& h, std::size_t from, std::size_t to)
    {
        const auto n = static_cast<std::size_t>(c.size_ngram);
        for (std::size_t i = from; i < to; ++i) {
            pool[entry(std::span(h).subspan(i, n))] = h[i + n];
        }
    }
    void reset_pool() { std::fill(pool.begin(), pool.end(), -1); }

    tokens_t draft(const histories& hs, std::int32_t sampled)
    {
        last_length = 0;
        const auto n = static_cast<std::size_t>(c.size_ngram);
        const std::size_t keep = hs.unchanged_since(mark);
        added = std::min(added, keep >= n ? keep - n : 0);
        mark = hs.mark();
        const tokens_t& h = hs.tokens();
        const std::size_t length = h.size();
        if (length < n) {
            return {};
        }
        if (added + static_cast<std::size_t>(c.add_chunk) < length) {
            add(h, added, length - n);
            added = length - n;
        }
        tokens_t key(h.end() - static_cast<std::ptrdiff_t>(n - 1), h.end());
        key.push_back(sampled);
        tokens_t result;
        for (std::int32_t i = 0; i < c.max_draft; ++i) {
            const std::int32_t token = pool[entry(std::span(key).last(n))];
            if (token == -1) {
                if (i < c.min_draft) {
                    return {};
                }
                break;
            }
            result.push_back(token);
            key.push_back(token);
        }
        last_length = static_cast<std::int32_t>(result.size());
        return result;
    }
    bool accept(std::int32_t accepted)
    {
        if (accepted < 0) {
            return false;
        }
        if (last_length == 0) {
            return true;
        }
        if (double(accepted) / double(last_length) < c.low_acceptance) {
            if (++lows >= c.low_streak && c.low_streak > 0) {
                reset_pool();
                lows = 0;
                added = 0;
            }
        } else {
            lows = 0;
        }
        return true;
    }
    void begin(const histories& hs)
    {
        added = 0;
        last_length = 0;
        mark = hs.mark();
        const auto n = static_cast<std::size_t>(c.size_ngram);
        if (hs.size() < n) {
            return;
        }
        add(hs.tokens(), 0, hs.size() - n);
        added = hs.size() - n;
        if (double(used()) / double(pool.size()) > c.reset_occupancy) {
            reset_pool();
        }
    }
};

// suffix_drafter's definition (suffix_drafter.hpp, steps 2 and 3) over the history and a corpus
// of sequences: matches and counts by brute force, one pass per drafted token.
struct suffix_reference {
    spec::suffix_drafter::config c;
    std::int32_t counter = 0;
    std::vector<tokens_t> corpus;

    // A source: its sequences, and each position's common suffix with the pattern P (capped).
    struct source {
        std::vector<const tokens_t*> sequences;
        std::vector<std::vector<std::int32_t>> common;
    };

    tokens_t draft(const tokens_t& h, std::int32_t sampled)
    {
        if (!due(counter, c.check_rate)) {
            return {};
        }
        const std::int32_t k = c.max_depth - 1; // K, tokens a count conditions on
        tokens_t context = h;
        context.push_back(sampled);
        source history{{&h}, {}};
        source from_corpus;
        for (const auto& s : corpus) {
            from_corpus.sequences.push_back(&s);
        }
        const std::int32_t in_history = match(history, context, k);
        const std::int32_t in_corpus = corpus.empty() ? 0 : match(from_corpus, context, k);
        source& chosen = in_corpus > in_history ? from_corpus : history;
        const std::int32_t matched = std::max(in_history, in_corpus);
        if (matched < c.min_match) {
            return {};
        }
        // P is the matched tokens: each position's common suffix with P is min(that with C, |P|).
        for (auto& row : chosen.common) {
            for (auto& l : row) {
                l = std::min(l, matched);
            }
        }
        std::int64_t p_length = matched;
        tokens_t result;
        double confidence = 1.0;
        while (result.size() < static_cast<std::size_t>(c.max_draft)) {
            const std::int64_t w = std::min<std::int64_t>(p_length, k);
            std::map<std::int32_t, std::pair<std::int64_t, std::int64_t>> next; // token: count, first end (global)
            std::int64_t total = 0;
            std::int64_t offset = 0;
            for (std::size_t s = 0; s < chosen.sequences.size(); ++s) {
                const tokens_t& seq = *chosen.sequences[s];
                for (std::size_t e = 1; e < seq.size(); ++e) {
                    if (chosen.common[s][e - 1] >= w) {
                        auto [it, fresh] = next.try_emplace(seq[e], 0, offset + static_cast<std::int64_t>(e));
                        ++it->second.first;
                        ++total;
                    }
                }
                offset += static_cast<std::int64_t>(seq.size());
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
            const std::int32_t t = best->first;
            result.push_back(t);
            ++p_length;
            for (std::size_t s = 0; s < chosen.sequences.size(); ++s) {
                const tokens_t& seq = *chosen.sequences[s];
                auto& row = chosen.common[s];
                for (std::size_t e = seq.size(); e-- > 0;) {
                    row[e] = seq[e] != t ? 0 : std::min(e == 0 ? 1 : row[e - 1] + 1, k);
                }
            }
        }
        return result;
    }

    // The longest suffix of the context, of at most k tokens, within one sequence of the source;
    // fills each position's common suffix with the context (capped at k).
    static std::int32_t match(source& src, const tokens_t& context, std::int32_t k)
    {
        std::int32_t best = 0;
        src.common.clear();
        for (const tokens_t* seq : src.sequences) {
            auto& row = src.common.emplace_back(seq->size());
            for (std::size_t e = 0; e < seq->size(); ++e) {
                std::int32_t l = 0;
                while (l < k && static_cast<std::size_t>(l) <= e && static_cast<std::size_t>(l) < context.size() &&
                       (*seq)[e - static_cast<std::size_t>(l)] == context[context.size() - 1 - static_cast<std::size_t>(l)]) {
                    ++l;
                }
                row[e] = l;
                best = std::max(best, l);
            }
        }
        return best;
    }
};

// ---- the drafters under test, each beside its reference ------------------------------------------------

// What an op needs of a system: draft (checked against the reference), feedback, begin, copy.
// `form`: 0 accept(n_accepted), 1 accept(n_accepted, n_verified).

struct index_system {
    spec::ngram_config config;
    spec::ngram_simple simple;
    spec::ngram_index a, b;
    std::optional<spec::ngram_index> copy;
    std::int32_t counter = 0;

    explicit index_system(const spec::ngram_config& c) : config(c), simple(c), a(c), b(c) {}

    tokens_t draft(histories& hs, std::int32_t sampled)
    {
        current_call = "ngram_index::draft";
        const tokens_t expected = due(counter, config.check_rate)
                                      ? simple_reference(hs.tokens(), sampled, static_cast<std::size_t>(config.size_ngram),
                                                         static_cast<std::size_t>(config.size_mgram))
                                      : tokens_t{};
        tokens_t got;
        require(attempt([&] { got = simple.draft(hs.h, sampled); }) && got == expected, "ngram_simple differs from its definition");
        require(attempt([&] { got = a.draft(hs.h, sampled); }) && got == expected, "ngram_index differs from ngram_simple's definition");
        require(attempt([&] { got = b.draft(hs.h, sampled); }) && got == expected, "a twin ngram_index drafts otherwise");
        if (copy) {
            require(attempt([&] { got = copy->draft(hs.h, sampled); }) && got == expected, "a copied ngram_index drafts otherwise");
        }
        if (config.check_rate <= 1) {
            spec::ngram_index fresh(config);
            const spec::token_history again(hs.tokens());
            require(fresh.draft(again, sampled) == expected, "a fresh ngram_index on a fresh history drafts otherwise");
        }
        require(expected.size() <= static_cast<std::size_t>(config.size_mgram) && contains_run(hs.tokens(), expected),
                "a draft longer than size_mgram, or not copied from the history");
        return expected;
    }
    void feedback(std::int32_t, std::int32_t, int) {}
    void begin(histories& hs)
    {
        simple.begin(hs.h);
        a.begin(hs.h);
        b.begin(hs.h);
        if (copy) {
            copy->begin(hs.h);
        }
    }
    void duplicate() { copy = a; }
    void extra(std::uint8_t, token_stream&, histories&) {}
};

struct map_system {
    map_reference reference;
    spec::ngram_map a, b;
    std::optional<spec::ngram_map> copy;

    explicit map_system(const spec::ngram_map::config& c) : reference(c), a(c), b(c) {}

    template <class F>
    void each(F&& f)
    {
        f(a);
        f(b);
        if (copy) {
            f(*copy);
        }
    }

    tokens_t draft(histories& hs, std::int32_t sampled)
    {
        current_call = "ngram_map::draft";
        const tokens_t expected = reference.draft(hs.tokens(), sampled);
        each([&](spec::ngram_map& d) {
            tokens_t got;
            require(attempt([&] { got = d.draft(hs.h, sampled); }), "ngram_map refused to draft");
            require(got == expected, "ngram_map differs from its definition (or its twin, or its copy)");
        });
        require(expected.size() <= static_cast<std::size_t>(reference.c.size_mgram) && contains_run(hs.tokens(), expected),
                "a draft longer than size_mgram, or not copied from the history");
        return expected;
    }
    void feedback(std::int32_t accepted, std::int32_t verified, int form)
    {
        current_call = "ngram_map::accept";
        map_reference before = reference;
        const bool valid = form == 0 ? reference.accept(accepted, reference.last_length) : reference.accept(accepted, verified);
        if (!valid) {
            reference = before;
        }
        each([&](spec::ngram_map& d) {
            require_outcome(attempt([&] { form == 0 ? d.accept(accepted) : d.accept(accepted, verified); }), valid);
        });
    }
    void begin(histories& hs)
    {
        each([&](spec::ngram_map& d) { d.begin(hs.h); });
    }
    void duplicate() { copy = a; }
    void extra(std::uint8_t, token_stream&, histories&) {}
};

struct mod_system {
    mod_reference reference;
    spec::ngram_mod a, b;

    explicit mod_system(const spec::ngram_mod_config& c) : reference(c), a(c), b(c) {}

    void check_state(const char* what)
    {
        require(std::ranges::equal(a.pool().entries(), reference.pool) && std::ranges::equal(b.pool().entries(), reference.pool), what);
        require(a.pool().used() == reference.used() && a.added() == reference.added && a.last_draft_length() == reference.last_length,
                "ngram_mod's used(), added() or last_draft_length() differs from its definition");
    }
    tokens_t draft(histories& hs, std::int32_t sampled)
    {
        current_call = "ngram_mod::draft";
        const tokens_t expected = reference.draft(hs, sampled);
        tokens_t got;
        require(attempt([&] { got = a.draft(hs.h, sampled); }) && got == expected, "ngram_mod differs from its definition");
        require(attempt([&] { got = b.draft(hs.h, sampled); }) && got == expected, "a twin ngram_mod drafts otherwise");
        check_state("ngram_mod's pool differs from its definition after draft()");
        require(expected.size() <= static_cast<std::size_t>(reference.c.max_draft) &&
                    (expected.empty() || expected.size() >= static_cast<std::size_t>(reference.c.min_draft)),
                "a draft outside [min_draft, max_draft]");
        return expected;
    }
    void feedback(std::int32_t accepted, std::int32_t, int)
    {
        current_call = "ngram_mod::accept";
        const bool valid = reference.accept(accepted);
        require_outcome(attempt([&] { a.accept(accepted); }), valid);
        require_outcome(attempt([&] { b.accept(accepted); }), valid);
        check_state("ngram_mod's pool differs from its definition after accept()");
    }
    void begin(histories& hs)
    {
        current_call = "ngram_mod::begin";
        reference.begin(hs);
        a.begin(hs.h);
        b.begin(hs.h);
        check_state("ngram_mod's pool differs from its definition after begin()");
    }
    void duplicate()
    {
        const spec::ngram_mod copy = a; // shares the pool
        require(copy.shared_pool() == a.shared_pool(), "a copy of ngram_mod does not share its pool");
    }
    void extra(std::uint8_t, token_stream&, histories&) {}
};

struct suffix_system {
    suffix_reference reference;
    std::shared_ptr<spec::suffix_corpus> corpus;
    spec::suffix_drafter a, b;
    std::optional<spec::suffix_drafter> copy;

    suffix_system(const spec::suffix_drafter::config& c, std::shared_ptr<spec::suffix_corpus> shared, std::vector<tokens_t> sequences)
        : reference{c, 0, std::move(sequences)}, corpus(std::move(shared)), a(c, corpus), b(c, corpus)
    {
    }

    template <class F>
    void each(F&& f)
    {
        f(a);
        f(b);
        if (copy) {
            f(*copy);
        }
    }

    tokens_t draft(histories& hs, std::int32_t sampled)
    {
        current_call = "suffix_drafter::draft";
        const tokens_t expected = reference.draft(hs.tokens(), sampled);
        each([&](spec::suffix_drafter& d) {
            tokens_t got;
            require(attempt([&] { got = d.draft(hs.h, sampled); }), "suffix_drafter refused to draft");
            require(got == expected, "suffix_drafter differs from its definition (or its twin, or its copy)");
        });
        if (reference.c.check_rate <= 1) {
            spec::suffix_drafter fresh(reference.c, corpus);
            const spec::token_history again(hs.tokens());
            require(fresh.draft(again, sampled) == expected, "a fresh suffix_drafter on a fresh history drafts otherwise");
        }
        for (const std::int32_t t : expected) {
            bool seen = std::find(hs.tokens().begin(), hs.tokens().end(), t) != hs.tokens().end();
            for (const auto& s : reference.corpus) {
                seen = seen || std::find(s.begin(), s.end(), t) != s.end();
            }
            require(seen, "a drafted token that is in neither the history nor the corpus");
        }
        require(expected.size() <= static_cast<std::size_t>(reference.c.max_draft), "a draft longer than max_draft");
        return expected;
    }
    void feedback(std::int32_t, std::int32_t, int) {}
    void begin(histories& hs)
    {
        each([&](spec::suffix_drafter& d) { d.begin(hs.h); });
    }
    void duplicate() { copy = a; }
    // Forgets what a drafter read (the next draft reads it all again), or grows the corpus.
    void extra(std::uint8_t arg, token_stream& stream, histories&)
    {
        if (arg % 2 == 0) {
            a.reset();
            return;
        }
        if (corpus) {
            const tokens_t sequence = stream.take(arg % 24);
            current_call = "suffix_corpus::add";
            require(attempt([&] { corpus->add(sequence); }), "suffix_corpus refused a sequence");
            if (!sequence.empty()) {
                reference.corpus.push_back(sequence);
            }
            require(corpus->sequences() == reference.corpus.size(), "suffix_corpus counts other sequences");
        }
    }
};

// drafter_selection over four drafters, against four more drafters of the same configurations and
// the selection's rules (drafter_selection.hpp) restated.
using selection_t = spec::drafter_selection<spec::ngram_index, spec::ngram_map, spec::ngram_mod, spec::suffix_drafter>;

struct selection_system {
    static constexpr std::size_t count = 4;
    static constexpr std::size_t none = selection_t::none;

    selection_t a, b;
    spec::ngram_index d0;
    spec::ngram_map d1;
    spec::ngram_mod d2;
    spec::suffix_drafter d3;
    double prior = 1.0;
    std::array<spec::drafter_statistics, count> stats{};
    std::array<tokens_t, count> proposals;
    std::size_t pending = none;
    std::size_t scored = none;
    struct step {
        histories::model_mark mark;
        std::int32_t sampled = 0;
        std::int32_t accepted = 0;
        std::int32_t verified = 0;
    } last;

    selection_system(spec::selection_options o, const spec::ngram_config& c0, const spec::ngram_map::config& c1,
                     const spec::ngram_mod_config& c2, const spec::suffix_drafter::config& c3)
        : a(o, spec::ngram_index(c0), spec::ngram_map(c1), spec::ngram_mod(c2), spec::suffix_drafter(c3)),
          b(o, spec::ngram_index(c0), spec::ngram_map(c1), spec::ngram_mod(c2), spec::suffix_drafter(c3)), d0(c0), d1(c1), d2(c2), d3(c3),
          prior(o.prior_acceptance)
    {
    }

    [[nodiscard]] double rate(std::size_t i) const
    {
        const auto& s = stats[i];
        return s.matched + s.mismatched == 0 ? prior : double(s.matched) / double(s.matched + s.mismatched);
    }
    [[nodiscard]] double gain(std::size_t i, std::size_t length) const
    {
        const double r = rate(i);
        if (r == 1.0) {
            return double(length);
        }
        double term = 1.0;
        double sum = 0.0;
        for (std::size_t k = 0; k < length; ++k) {
            term *= r;
            sum += term;
        }
        return sum;
    }

    void compare(const char* what)
    {
        for (const selection_t* s : {&a, &b}) {
            require(s->chosen() == pending, what);
            for (std::size_t i = 0; i < count; ++i) {
                require(s->statistics()[i] == stats[i], what);
            }
        }
    }

    // The header's scoring of the last step with feedback, against what the target produced.
    void score(const histories& hs, std::int32_t sampled)
    {
        const std::size_t chosen = scored;
        scored = none;
        if (chosen == none) {
            return;
        }
        const tokens_t& truth = proposals[chosen];
        const auto accepted = static_cast<std::size_t>(last.accepted);
        const bool rejected = last.accepted < last.verified;
        const std::size_t before = last.mark.length;
        const tokens_t& h = hs.tokens();
        bool next_known = h.size() == before + 1 + accepted && hs.unchanged_since(last.mark) == before && h[before] == last.sampled;
        for (std::size_t k = 0; next_known && k < accepted; ++k) {
            next_known = h[before + 1 + k] == truth[k];
        }
        for (std::size_t i = 0; i < count; ++i) {
            const tokens_t& d = proposals[i];
            if (d.empty()) {
                continue;
            }
            auto& s = stats[i];
            ++s.scored;
            std::size_t k = 0;
            while (k < d.size() && k < accepted && d[k] == truth[k]) {
                ++k;
            }
            s.matched += k;
            if (k == d.size()) {
                continue;
            }
            if (k < accepted || (rejected && d[k] == truth[k])) {
                ++s.mismatched;
            } else if (next_known) {
                ++(d[k] == sampled ? s.matched : s.mismatched);
            }
        }
    }

    tokens_t draft(histories& hs, std::int32_t sampled)
    {
        current_call = "drafter_selection::draft";
        score(hs, sampled);
        pending = none;
        proposals = {d0.draft(hs.h, sampled), d1.draft(hs.h, sampled), d2.draft(hs.h, sampled), d3.draft(hs.h, sampled)};
        std::size_t best = none;
        double best_gain = 0;
        for (std::size_t i = 0; i < count; ++i) {
            if (proposals[i].empty()) {
                continue;
            }
            ++stats[i].drafts;
            const double g = gain(i, proposals[i].size());
            if (best == none || g > best_gain) {
                best = i;
                best_gain = g;
            }
        }
        tokens_t expected;
        if (best != none) {
            ++stats[best].chosen;
            pending = best;
            last = {hs.mark(), sampled, 0, 0};
            expected = proposals[best];
        }
        tokens_t got;
        require(attempt([&] { got = a.draft(hs.h, sampled); }) && got == expected, "drafter_selection chose another draft than its rules");
        require(attempt([&] { got = b.draft(hs.h, sampled); }) && got == expected, "a twin drafter_selection drafts otherwise");
        for (std::size_t i = 0; i < count; ++i) {
            require(a.expected_acceptance(i) == rate(i), "drafter_selection's expected acceptance differs from its rule");
        }
        compare("drafter_selection's statistics or choice differ from its rules");
        return expected;
    }

    void feedback(std::int32_t accepted, std::int32_t verified, int form)
    {
        current_call = "drafter_selection::accept";
        const std::size_t length = pending == none ? 0 : proposals[pending].size();
        const std::int32_t v = form == 0 ? static_cast<std::int32_t>(length) : verified;
        // Without a draft awaiting feedback, the header has "nothing happens" beside its checks:
        // either outcome, nothing changes.
        const bool valid = accepted >= 0 && accepted <= v && (pending == none || static_cast<std::size_t>(v) <= length);
        for (selection_t* s : {&a, &b}) {
            const bool ok = attempt([&] { form == 0 ? s->accept(accepted) : s->accept(accepted, verified); });
            if (pending != none) {
                require_outcome(ok, valid);
            }
        }
        if (pending == none || !valid) {
            compare("drafter_selection's statistics changed on feedback that changes nothing");
            return;
        }
        auto& s = stats[pending];
        ++s.verified;
        s.drafted += static_cast<std::size_t>(v);
        s.accepted += static_cast<std::size_t>(accepted);
        last.accepted = accepted;
        last.verified = v;
        scored = pending;
        // Passed on to the chosen drafter by its own hooks (two counts when it has that form).
        if (pending == 1) {
            if (form == 0) {
                d1.accept(accepted);
            } else {
                d1.accept(accepted, verified);
            }
        } else if (pending == 2) {
            d2.accept(accepted);
        }
        pending = none;
        compare("drafter_selection's statistics after feedback differ from its rules");
    }
    void begin(histories& hs)
    {
        a.begin(hs.h);
        b.begin(hs.h);
        d0.begin(hs.h);
        d1.begin(hs.h);
        d2.begin(hs.h);
        d3.begin(hs.h);
        pending = none;
        scored = none;
        compare("drafter_selection after begin() differs from its rules");
    }
    void duplicate() {}
    void extra(std::uint8_t, token_stream&, histories&) {}
};

// ---- configurations -----------------------------------------------------------------------------------

// Each built only when its constructor must accept it (checked both ways here).
std::optional<spec::ngram_config> ngram_config_of(fields& f)
{
    spec::ngram_config c{f.integer(), f.integer(), f.integer()};
    const bool valid = c.size_ngram >= 1 && c.size_mgram >= 1;
    current_call = "ngram_simple, ngram_index";
    require_outcome(attempt([&] { (void)spec::ngram_simple(c); }), valid);
    require_outcome(attempt([&] { (void)spec::ngram_index(c); }), valid);
    return valid ? std::optional(c) : std::nullopt;
}

std::optional<spec::ngram_map::config> map_config_of(fields& f)
{
    spec::ngram_map::config c;
    c.size_ngram = f.integer();
    c.size_mgram = f.integer();
    c.check_rate = f.integer();
    c.min_hits = f.integer();
    c.values = (f.byte() & 1) != 0;
    c.dominance = f.integer();
    const bool valid = c.size_ngram >= 1 && c.size_mgram >= 1 && c.min_hits >= 1 && c.dominance >= 0;
    current_call = "ngram_map";
    require_outcome(attempt([&] { (void)spec::ngram_map(c); }), valid);
    return valid ? std::optional(c) : std::nullopt;
}

std::optional<spec::ngram_mod_config> mod_config_of(fields& f)
{
    spec::ngram_mod_config c;
    c.size_ngram = f.integer();
    c.min_draft = f.integer();
    c.max_draft = f.integer();
    c.add_chunk = f.integer();
    c.low_acceptance = f.fraction();
    c.low_streak = f.integer();
    c.reset_occupancy = f.fraction();
    constexpr std::array<std::size_t, 8> sizes = {1, 2, 7, 64, 257, 1000, 4096, 0};
    c.pool_size = sizes[f.byte() % 8];
    // A pool of size_ngram near 2^31 multiplies n times at construction: kept to where that is quick.
    c.size_ngram = std::min(c.size_ngram, 1 << 16);
    const bool fractions = c.low_acceptance >= 0 && c.low_acceptance <= 1 && c.reset_occupancy >= 0 && std::isfinite(c.reset_occupancy);
    const bool valid = c.size_ngram >= 1 && c.max_draft >= 1 && c.min_draft >= 0 && c.min_draft <= c.max_draft && c.add_chunk >= 0 &&
                       c.low_streak >= 0 && fractions && c.pool_size >= 1;
    current_call = "ngram_mod";
    require_outcome(attempt([&] { (void)spec::ngram_mod(c); }), valid);
    require_outcome(attempt([&] { (void)spec::ngram_pool(c.size_ngram, c.pool_size); }), c.size_ngram >= 1 && c.pool_size >= 1);
    if (!valid) {
        return std::nullopt;
    }
    // The shared-pool constructor: a null pool, or one of another n, is refused.
    require(!attempt([&] { (void)spec::ngram_mod(c, nullptr); }), "ngram_mod accepted a null pool");
    require(!attempt([&] { (void)spec::ngram_mod(c, std::make_shared<spec::ngram_pool>(c.size_ngram + 1, 1)); }),
            "ngram_mod accepted a pool of another size_ngram");
    // A walk through a cycle of the pool drafts max_draft tokens: up to 2^31 is a valid, but slow,
    // configuration (and draft() reserves max_draft tokens up front).
    c.max_draft = std::min(c.max_draft, 256);
    c.min_draft = std::min(c.min_draft, c.max_draft);
    return c;
}

std::optional<spec::suffix_drafter::config> suffix_config_of(fields& f, const spec::suffix_corpus* corpus)
{
    spec::suffix_drafter::config c;
    c.max_draft = f.integer();
    c.min_match = f.integer();
    c.min_confidence = f.fraction();
    c.max_depth = f.integer();
    c.check_rate = f.integer();
    const bool valid = c.max_draft >= 1 && c.max_depth >= 2 && c.min_match >= 1 && c.min_match <= c.max_depth - 1 &&
                       c.min_confidence >= 0.0 && c.min_confidence <= 1.0 && (corpus == nullptr || corpus->max_depth() >= c.max_depth);
    current_call = "suffix_drafter";
    require_outcome(attempt([&] {
                        std::shared_ptr<const spec::suffix_corpus> shared;
                        if (corpus != nullptr) {
                            shared = std::make_shared<spec::suffix_corpus>(*corpus);
                        }
                        (void)spec::suffix_drafter(c, shared);
                    }),
                    valid);
    // With min_confidence 0 a draft continues through a cycle up to max_draft tokens: kept short.
    c.max_draft = std::min(c.max_draft, 64);
    return valid ? std::optional(c) : std::nullopt;
}

// ---- the ops --------------------------------------------------------------------------------------------

// Feedback counts: -1, 0, small, the int32 limits.
std::int32_t count_code(std::uint8_t c, std::int32_t length)
{
    switch (c % 8) {
    case 0: return -1;
    case 1: return 0;
    case 2: return length;
    case 3: return length + 1;
    case 4: return int32_max;
    case 5: return int32_min;
    case 6: return length / 2;
    default: return 1;
    }
}

template <class System>
void run_ops(System& sys, histories& hs, token_stream& stream, const std::uint8_t* h)
{
    hs.check();
    const std::size_t ops = h[15] % 33;
    for (std::size_t i = 0; i < ops; ++i) {
        const std::uint8_t op = h[16 + i];
        const auto arg = static_cast<std::uint8_t>(op >> 3);
        switch (op % 8) {
        case 0: (void)sys.draft(hs, stream.next()); break;
        case 1: {
            // One step of speculative decoding: the target's token, the accepted prefix of the
            // draft (as the stream continues, or all, or none, or a few), feedback.
            const std::int32_t sampled = stream.next();
            const tokens_t d = sys.draft(hs, sampled);
            std::size_t accepted = 0;
            switch (arg % 4) {
            case 0: {
                const tokens_t truth = stream.take(d.size());
                while (accepted < d.size() && d[accepted] == truth[accepted]) {
                    ++accepted;
                }
                break;
            }
            case 1: accepted = d.size(); break;
            case 2: break;
            default: accepted = std::min<std::size_t>(d.size(), arg >> 2); break;
            }
            hs.push(sampled);
            hs.append(tokens_t(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(accepted)));
            if (!d.empty()) {
                const auto verified = static_cast<std::int32_t>(arg & 0x10 ? accepted + (accepted < d.size() ? 1 : 0) : d.size());
                sys.feedback(static_cast<std::int32_t>(accepted), verified, (arg >> 3) & 1);
            }
            break;
        }
        case 2: hs.append(stream.take(1 + arg)); break;
        case 3:
            switch (arg % 4) {
            case 0: (void)hs.cut(hs.size() - std::min<std::size_t>(hs.size(), 1 + (arg >> 2))); break;
            case 1: (void)hs.cut(hs.size()); break;
            case 2: (void)hs.cut(hs.size() + 1 + (arg >> 2)); break;
            default: (void)hs.cut(hs.size() / 2); break;
            }
            break;
        case 4: {
            const std::uint8_t c = stream.byte();
            const auto length = static_cast<std::int32_t>(arg);
            sys.feedback(count_code(c, length), count_code(static_cast<std::uint8_t>(c >> 3), length), (c >> 6) & 1);
            break;
        }
        case 5: sys.begin(hs); break;
        case 6:
            switch (arg % 4) {
            case 0: hs.assign(stream.take(4 * (arg >> 2))); break;
            case 1: hs.clear(); break;
            case 2: hs.copy_over(); break;
            default: hs.move_round_trip(); break;
            }
            break;
        default:
            if (arg % 2 == 0) {
                sys.duplicate();
            } else {
                sys.extra(static_cast<std::uint8_t>(arg >> 1), stream, hs);
            }
            break;
        }
        hs.check();
    }
}

// ---- verification and replay ----------------------------------------------------------------------------

void fuzz_verify_greedy(const std::uint8_t* h, token_stream& stream)
{
    current_call = "verify_greedy";
    const std::size_t ops = h[15] % 33;
    for (std::size_t i = 0; i < ops; ++i) {
        const std::uint8_t op = h[16 + i];
        const tokens_t draft = stream.take(op % 12);
        tokens_t target(draft.size() + 1);
        for (std::size_t k = 0; k < target.size(); ++k) {
            // Mostly agreeing, so that accepted prefixes of every length occur.
            target[k] = k < draft.size() && (stream.byte() & 3) != 0 ? draft[k] : stream.next();
        }
        if (op >= 0xe0) {
            target.resize(op & 1 ? target.size() + 1 : target.size() - 1);
        }
        spec::verification v;
        const bool ok = attempt([&] { v = spec::verify_greedy(draft, target); });
        require_outcome(ok, target.size() == draft.size() + 1);
        if (!ok) {
            continue;
        }
        std::size_t agree = 0;
        while (agree < draft.size() && draft[agree] == target[agree]) {
            ++agree;
        }
        require(v.accepted == agree, "verify_greedy accepted another count than the longest agreeing prefix");
        tokens_t expected(draft.begin(), draft.begin() + static_cast<std::ptrdiff_t>(agree));
        expected.push_back(target[agree]);
        require(v.tokens == expected, "verify_greedy's tokens are not the accepted prefix and the target's token");
    }
}

// Chains of every drawing kind and a history-keeping one.
const std::array<const char*, 8> verify_chains = {
    "greedy", "dist(seed=3)", "top_k(3);dist(seed=5)", "penalties(last_n=4,repeat=1.5,presence=0.5);top_p(0.9);dist(seed=7)",
    "min_p(0.1);temp(0.7);dist(seed=1)", "mirostat_v2(tau=3,eta=0.2,seed=2)", "adaptive_p(target=0.5,decay=0.9,seed=4)",
    "typical(0.8);xtc(probability=0.5,threshold=0.1,seed=6);dist(seed=8)"};

std::vector<float> rows_of(std::size_t count, token_stream& stream, std::uint8_t mode)
{
    std::vector<float> v(count);
    for (auto& x : v) {
        const std::uint8_t b = stream.byte();
        switch (mode % 4) {
        case 0: x = static_cast<float>(static_cast<std::int8_t>(b)) / 16.0f; break;
        case 1: x = b < 64 ? static_cast<float>(b) / 8.0f : -inf; break;
        case 2: x = static_cast<float>(b % 3); break;
        default: x = b == 0 ? inf : b == 1 ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(b) / 32.0f; break;
        }
    }
    return v;
}

// Whether two chains draw the same next tokens (a chain has no equality: compared by use).
bool same_draws(qs::chain x, qs::chain y, std::span<const float> row)
{
    for (int i = 0; i < 3; ++i) {
        std::int32_t a = -1;
        std::int32_t b = -1;
        const bool ok_a = attempt([&] { a = x.sample(row); });
        const bool ok_b = attempt([&] { b = y.sample(row); });
        if (ok_a != ok_b || a != b) {
            return false;
        }
    }
    return true;
}

void fuzz_verify_stochastic(const std::uint8_t* h, token_stream& stream)
{
    current_call = "verify_stochastic";
    const std::size_t n_vocab = 1 + h[2] % 48;
    qs::chain chain = qs::chain::parse(verify_chains[h[3] % verify_chains.size()]);
    qs::random_source random(h[4], h[5]);
    const std::vector<float> probe = rows_of(n_vocab, stream, 0);
    const std::size_t ops = h[15] % 33;
    for (std::size_t i = 0; i < ops; ++i) {
        const std::uint8_t op = h[16 + i];
        tokens_t draft(op % 9);
        for (auto& t : draft) {
            const std::uint8_t b = stream.byte();
            t = b % 8 == 7 ? stream.next() : static_cast<std::int32_t>(b % n_vocab);
        }
        std::vector<float> logits = rows_of((draft.size() + 1) * n_vocab, stream, static_cast<std::uint8_t>(op >> 4));
        std::size_t width = n_vocab;
        const bool shaped = op < 0xf0;
        if (!shaped) {
            if (op & 1) {
                logits.push_back(0.0f);
            } else {
                width = 0;
            }
        }
        const qs::chain chain_before = chain;
        const qs::random_source random_before = random;
        spec::verification v;
        const bool ok = attempt([&] { v = spec::verify_stochastic(chain, logits, width, draft, random); });
        if (!shaped) {
            require(!ok, "verify_stochastic accepted logits of the wrong size");
        }
        if (!ok) {
            // The header: on any error the chain and `random` are as they were.
            require(random == random_before && same_draws(chain, chain_before, probe), "verify_stochastic threw after changing the chain");
            continue;
        }
        require(v.accepted <= draft.size() && v.tokens.size() == v.accepted + 1, "verify_stochastic's counts do not add up");
        require(std::equal(draft.begin(), draft.begin() + static_cast<std::ptrdiff_t>(v.accepted), v.tokens.begin()),
                "verify_stochastic's accepted tokens are not the draft's");
        const std::int32_t last = v.tokens.back();
        require(last >= 0 && static_cast<std::size_t>(last) < n_vocab, "verify_stochastic emitted a token outside the vocabulary");
        // Row by row as the header says: select, then accept each emitted token, on copies; the
        // rejected draft token is never the one emitted in its place; the same draws afterwards.
        qs::chain replayed = chain_before;
        qs::random_source same = random_before;
        spec::verification again;
        qs::chain twin = chain_before;
        require(attempt([&] { again = spec::verify_stochastic(twin, logits, width, draft, same); }) && again.tokens == v.tokens &&
                    again.accepted == v.accepted && same == random,
                "verify_stochastic from copies verifies otherwise");
        for (std::size_t row = 0; row <= v.accepted; ++row) {
            const auto logits_row = std::span<const float>(logits).subspan(row * n_vocab, n_vocab);
            std::int32_t own = -1;
            require(attempt([&] { own = replayed.select(logits_row); }), "a row verify_stochastic read cannot be selected from");
            if (row == v.accepted) {
                const auto f = replayed.final_candidates();
                const bool offered = std::any_of(f.begin(), f.end(), [&](const qs::token_data& t) { return t.id == last && t.p > 0.0f; });
                if (row == draft.size()) {
                    require(last == own, "after a whole draft, the bonus token is not the chain's own selection");
                } else {
                    require(last != draft[row] && offered, "the token emitted for a rejected one is that one, or not a candidate");
                }
            }
            replayed.accept(v.tokens[row]);
        }
        require(same_draws(chain, replayed, probe), "verify_stochastic left the chain otherwise than selecting and accepting its tokens");
    }
}

// The drafters replay can run, by h[2] (configuration codes follow).
template <class F>
void with_drafter(std::uint8_t which, fields& f, F&& run)
{
    switch (which % 5) {
    case 0:
        if (const auto c = ngram_config_of(f)) {
            run(spec::ngram_simple(*c), spec::ngram_simple(*c));
        }
        break;
    case 1:
        if (const auto c = ngram_config_of(f)) {
            run(spec::ngram_index(*c), spec::ngram_index(*c));
        }
        break;
    case 2:
        if (const auto c = map_config_of(f)) {
            run(spec::ngram_map(*c), spec::ngram_map(*c));
        }
        break;
    case 3:
        if (const auto c = mod_config_of(f)) {
            run(spec::ngram_mod(*c), spec::ngram_mod(*c));
        }
        break;
    default:
        if (const auto c = suffix_config_of(f, nullptr)) {
            run(spec::suffix_drafter(*c), spec::suffix_drafter(*c));
        }
        break;
    }
}

std::size_t size_code(std::uint8_t c)
{
    switch (c % 8) {
    case 0: return 0;
    case 1: return 1;
    case 2: return std::numeric_limits<std::size_t>::max();
    case 3: return 2 + (c >> 3);
    default: return c >> 3;
    }
}

void fuzz_replay(const std::uint8_t* h, const payload& p, token_stream& stream)
{
    fields f({h + 3, 11}, p);
    const tokens_t tokens = stream.take(length_code(h[14]));
    spec::replay_options options;
    options.prompt = size_code(h[16]);
    options.n_batch = size_code(h[17]);
    options.max_draft = size_code(h[18]);
    with_drafter(h[2], f, [&](auto drafter, auto twin) {
        current_call = "replay";
        std::vector<std::pair<std::size_t, std::size_t>> progress;
        spec::replay_result r;
        const bool ok = attempt([&] {
            r = spec::replay(tokens, drafter, options, [&](std::size_t reached, std::size_t total) { progress.emplace_back(reached, total); });
        });
        const bool valid = options.n_batch != 0 && options.prompt != 0 && options.prompt < tokens.size();
        require_outcome(ok, valid);
        if (!ok) {
            return;
        }
        // The loop of replay.hpp's header, on a twin drafter.
        const auto evaluations = [&](std::size_t n) { return n / options.n_batch + (n % options.n_batch != 0 ? 1 : 0); }; // ceil
        spec::replay_result e;
        e.prompt_evaluations = evaluations(options.prompt);
        e.evaluations = e.prompt_evaluations;
        e.generated = tokens.size() - options.prompt;
        e.baseline = e.prompt_evaluations + e.generated - 1;
        std::size_t pos = options.prompt;
        spec::token_history history(std::span(tokens).first(pos));
        std::vector<std::pair<std::size_t, std::size_t>> expected_progress;
        while (pos + 1 < tokens.size()) {
            tokens_t d = twin.draft(history, tokens[pos]);
            d.resize(std::min({d.size(), options.max_draft, tokens.size() - pos - 2}));
            ++e.steps;
            e.evaluations += evaluations(1 + d.size());
            std::size_t accepted = 0;
            while (accepted < d.size() && d[accepted] == tokens[pos + 1 + accepted]) {
                ++accepted;
            }
            if (!d.empty()) {
                ++e.drafts;
                e.drafted += d.size();
                e.accepted += accepted;
                if constexpr (requires { twin.accept(std::int32_t{}, std::int32_t{}); }) {
                    twin.accept(static_cast<std::int32_t>(accepted), static_cast<std::int32_t>(d.size()));
                } else if constexpr (requires { twin.accept(std::int32_t{}); }) {
                    twin.accept(static_cast<std::int32_t>(accepted));
                }
            }
            history.append(std::span(tokens).subspan(pos, 1 + accepted));
            pos += 1 + accepted;
            expected_progress.emplace_back(pos + 1, tokens.size());
        }
        require(r.generated == e.generated && r.steps == e.steps && r.drafts == e.drafts && r.drafted == e.drafted &&
                    r.accepted == e.accepted && r.evaluations == e.evaluations && r.baseline == e.baseline &&
                    r.prompt_evaluations == e.prompt_evaluations,
                "replay counts otherwise than its header's loop");
        require(r.steps + r.accepted == r.generated - 1 && r.accepted <= r.drafted, "replay's counts do not add up");
        require(progress == expected_progress, "replay reported other progress than its header says");
        require(std::isfinite(r.draft_seconds) && r.draft_seconds >= 0 && std::isfinite(r.tokens_per_evaluation()) &&
                    std::isfinite(r.acceptance_rate()) && std::isfinite(r.mean_accepted()),
                "replay's rates are not finite");
    });
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    qk_fuzz::target_name = "drafters";
    current_input = {data, size};
    std::array<std::uint8_t, header_bytes> h{};
    std::copy_n(data, std::min(size, header_bytes), h.begin());
    const payload p{size > header_bytes ? std::span(data + header_bytes, size - header_bytes) : std::span<const std::uint8_t>()};
    token_stream stream(p, h[1]);
    fields f({h.data() + 2, 12}, p);
    switch (h[0] % 8) {
    case 5: fuzz_verify_greedy(h.data(), stream); return 0;
    case 6: fuzz_verify_stochastic(h.data(), stream); return 0;
    case 7: fuzz_replay(h.data(), p, stream); return 0;
    default: break;
    }
    histories hs(stream.take(length_code(h[14])));
    switch (h[0] % 8) {
    case 0:
        if (const auto c = ngram_config_of(f)) {
            index_system sys(*c);
            run_ops(sys, hs, stream, h.data());
        }
        break;
    case 1:
        if (const auto c = map_config_of(f)) {
            map_system sys(*c);
            run_ops(sys, hs, stream, h.data());
        }
        break;
    case 2:
        if (const auto c = mod_config_of(f)) {
            mod_system sys(*c);
            run_ops(sys, hs, stream, h.data());
        }
        break;
    case 3: {
        std::shared_ptr<spec::suffix_corpus> corpus;
        std::vector<tokens_t> sequences;
        if ((h[1] & 0x80) != 0) {
            const std::int32_t depth = f.integer();
            current_call = "suffix_corpus";
            require_outcome(attempt([&] { corpus = std::make_shared<spec::suffix_corpus>(depth); }), depth >= 2);
            for (int s = 0; corpus && s < 1 + f.byte() % 3; ++s) {
                sequences.push_back(stream.take(f.byte() % 40));
                corpus->add(sequences.back());
            }
            std::erase_if(sequences, [](const tokens_t& t) { return t.empty(); });
        }
        if (const auto c = suffix_config_of(f, corpus.get())) {
            suffix_system sys(*c, corpus, sequences);
            run_ops(sys, hs, stream, h.data());
        }
        break;
    }
    default: {
        spec::selection_options o{f.fraction()};
        const auto c0 = ngram_config_of(f);
        const auto c1 = map_config_of(f);
        const auto c2 = mod_config_of(f);
        const auto c3 = suffix_config_of(f, nullptr);
        current_call = "drafter_selection";
        const bool valid = o.prior_acceptance >= 0 && o.prior_acceptance <= 1;
        if (!c0 || !c1 || !c2 || !c3) {
            break;
        }
        require_outcome(attempt([&] { (void)selection_t(o, spec::ngram_index(*c0), spec::ngram_map(*c1), spec::ngram_mod(*c2),
                                                        spec::suffix_drafter(*c3)); }),
                        valid);
        if (valid) {
            selection_system sys(o, *c0, *c1, *c2, *c3);
            run_ops(sys, hs, stream, h.data());
        }
        break;
    }
    }
    return 0;
}
