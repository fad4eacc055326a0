// Allocation failure in the speculative-drafting layer (include/spec), with the operator new that
// test_allocation_failure.cpp replaces: token_history's edits, every drafter's draft, begin and
// accept (cold, warm, after a cut and regrowth, after a long append), the corpus, the selection,
// verification, the batch budget and replay. Each call runs with its n-th allocation failing for
// every n: it succeeds, or throws a qk::error saying memory ran out and leaves its outputs
// untouched and its object going on exactly as a copy taken before the call (the same drafts,
// indexed(), statistics and pool over a future of appends, cuts, regrowth and feedback). A call
// that succeeds gives what a copy gives without failures.
#include <doctest/doctest.h>

#include <spec/spec.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "allocation_failure.hpp"

namespace {

namespace qs = qk::spec;
using qk_allocation::every_allocation_failing;
using qs::token_history;
using tokens = std::vector<std::int32_t>;

// Text-like tokens: phrases of a small vocabulary that recur, with some noise between them, so
// that every drafter finds matches.
tokens source_tokens(std::size_t count, std::uint32_t seed)
{
    std::mt19937 rng(seed);
    std::vector<tokens> phrases(10);
    for (auto& phrase : phrases) {
        phrase.resize(6 + rng() % 14);
        for (auto& t : phrase) {
            t = static_cast<std::int32_t>(rng() % 40);
        }
    }
    tokens result;
    while (result.size() < count) {
        const tokens& phrase = phrases[rng() % phrases.size()];
        result.insert(result.end(), phrase.begin(), phrase.end());
        if (rng() % 3 == 0) {
            result.push_back(static_cast<std::int32_t>(rng() % 60));
        }
    }
    result.resize(count);
    return result;
}

const tokens& source()
{
    static const tokens s = source_tokens(1200, 7);
    return s;
}

const tokens sentinel = {-7, -7, -7};

// The feedback replay gives, for drafters that take it.
template <class D>
void feedback(D& d, std::size_t accepted, std::size_t length)
{
    if constexpr (requires { d.accept(std::int32_t{}, std::int32_t{}); }) {
        d.accept(static_cast<std::int32_t>(accepted), static_cast<std::int32_t>(length));
    } else if constexpr (requires { d.accept(std::int32_t{}); }) {
        d.accept(static_cast<std::int32_t>(accepted));
    }
}

// What a drafter lets one observe besides its drafts.
template <class D>
void same_observers(const D& a, const D& b)
{
    if constexpr (requires { a.indexed(); }) {
        CHECK(a.indexed() == b.indexed());
    }
    if constexpr (requires { a.statistics(); }) {
        CHECK(a.statistics() == b.statistics());
        CHECK(a.chosen() == b.chosen());
    }
    if constexpr (requires { a.last_draft_length(); }) {
        CHECK(a.last_draft_length() == b.last_draft_length());
        CHECK(a.added() == b.added());
    }
}

// Runs the same feedback, edits and drafts on both drafters over `history` (one object, so that
// the marks they keep of it stay valid) and checks that they draft the same. Returns the non-empty
// drafts. First the feedback on whatever draft awaits it (none: nothing happens); then, with
// `rewind`, the history is cut to that length (the source's tokens) and the first draft is the
// source's next token, so that a key the feedback changed is drafted again.
template <class D>
std::size_t same_future(D& a, D& b, token_history& history, std::uint32_t seed, std::size_t rewind = 0)
{
    const tokens& s = source();
    std::mt19937 rng(seed);
    std::size_t drafts = 0;
    feedback(a, 0, 1);
    feedback(b, 0, 1);
    same_observers(a, b);
    if (rewind != 0 && history.size() > rewind) {
        history.cut(rewind);
    }
    for (int step = 0; step < 64; ++step) {
        const std::uint32_t op = rng() % 6;
        if (step == 0 && rewind != 0) {
            // the draft the scene's last call made, at the same place
        } else if (op == 0 && history.size() > 20) {
            history.cut(history.size() - 1 - rng() % 6); // a rejected draft
        } else if (op == 1 && history.size() > 20) {
            history.cut(history.size() - 2); // regrown with another token
            history.push_back(static_cast<std::int32_t>(100 + rng() % 5));
        } else {
            const std::size_t from = std::min(history.size(), s.size() - 4);
            history.append(std::span(s).subspan(from, 1 + rng() % 3));
        }
        const std::int32_t sampled = s[std::min(history.size(), s.size() - 1)];
        const tokens da = a.draft(history, sampled);
        const tokens db = b.draft(history, sampled);
        CHECK(da == db);
        same_observers(a, b);
        if (!da.empty()) {
            ++drafts;
            const std::size_t accepted = rng() % (da.size() + 1);
            feedback(a, accepted, da.size());
            feedback(b, accepted, da.size());
        }
    }
    return drafts;
}

// Where a drafter stands when the call under test comes.
enum class scene {
    cold,        // fresh, handed some 300 tokens at once
    warm,        // has drafted along 100 .. ~300 with feedback; a few tokens appended since
    cut_regrown, // warm, then the last 5 tokens cut and 3 others written
    grown_far,   // warm, then 200 tokens and more appended at once
};
const char* name(scene s)
{
    switch (s) {
    case scene::cold:
        return "cold";
    case scene::warm:
        return "warm";
    case scene::cut_regrown:
        return "cut and regrown";
    case scene::grown_far:
        return "grown far";
    }
    return "?";
}

// The first history length from `from` on whose last 4 tokens and the next one occurred earlier
// with 8 tokens after them: a call there drafts, for every drafter here (n-grams of at most 5).
std::size_t recurring_end(std::size_t from)
{
    const tokens& s = source();
    for (std::size_t length = from;; ++length) {
        const auto pattern = std::span(s).subspan(length - 4, 5);
        for (std::size_t j = 0; j + 5 + 8 <= length; ++j) {
            if (std::ranges::equal(std::span(s).subspan(j, 5), pattern)) {
                return length;
            }
        }
    }
}

// Where the warm-up ends: its last call drafts.
std::size_t warm_end()
{
    static const std::size_t end = recurring_end(300);
    return end;
}

// Drafts along the source from 100 to warm_end() (with feedback when asked), then edits the
// history as the scene says; returns the token sampled next (one the history has seen follow its
// last tokens). The calls made are an odd number, so that a drafter with check_rate 2 is due at
// the next one (and the last one drafts, with check_rate 1).
template <class D>
std::int32_t set_scene(D& d, token_history& history, scene sc, bool with_feedback)
{
    const tokens& s = source();
    const std::size_t end = warm_end();
    history = token_history();
    if (sc == scene::cold) {
        history.assign(std::span(s).first(end));
        return s[end];
    }
    history.assign(std::span(s).first(100));
    if ((end - 100) % 2 == 1) {
        (void)d.draft(history, s[100]); // so that the calls below make an odd number with it
    }
    for (std::size_t pos = 100; pos <= end; ++pos) {
        const tokens draft = d.draft(history, s[pos]);
        if (!draft.empty() && with_feedback && pos < end) {
            std::size_t accepted = 0;
            while (accepted < draft.size() && draft[accepted] == s[pos + 1 + accepted]) {
                ++accepted;
            }
            feedback(d, accepted, draft.size());
        }
        if (pos < end) {
            history.push_back(s[pos]);
        }
    }
    switch (sc) {
    case scene::warm: {
        const std::size_t length = recurring_end(end + 3);
        history.append(std::span(s).subspan(end, length - end));
        return s[length];
    }
    case scene::cut_regrown: // with tokens from earlier on
        history.cut(history.size() - 5);
        history.append(std::span(s).subspan(50, 3));
        return s[53];
    case scene::grown_far: {
        const std::size_t length = recurring_end(end + 200);
        history.append(std::span(s).subspan(end, length - end));
        return s[length];
    }
    case scene::cold:
        break;
    }
    return s[end];
}

// What the drafter shares with others and a copy does not copy: ngram_mod's pool.
template <class D>
tokens shared_state(const D& d)
{
    if constexpr (requires { d.pool(); }) {
        return {d.pool().entries().begin(), d.pool().entries().end()};
    } else {
        return {};
    }
}

// draft() (and begin() where the drafter has one) in every scene: on a throw the output is the
// sentinel and the drafter goes on as its copy; on success it drafted as its copy does. make(r)
// builds the drafter with check_rate r.
template <class D>
void drafter_cases(const char* call, const std::function<D(std::int32_t)>& make, bool begin_allocates)
{
    std::size_t drafts = 0;
    for (const scene sc : {scene::cold, scene::warm, scene::cut_regrown, scene::grown_far}) {
        const std::string scene_name = name(sc);
        CAPTURE(scene_name);
        const std::int32_t check_rate = sc == scene::cold || sc == scene::grown_far ? 1 : 2;
        std::optional<D> tried;
        std::optional<D> before;
        token_history history;
        std::int32_t sampled = 0;
        tokens out;
        tokens pool;
        std::uint32_t seed = 0;
        const auto prepare = [&] {
            tried.reset();
            before.reset();
            tried.emplace(make(check_rate));
            sampled = set_scene(*tried, history, sc, true);
            before.emplace(*tried);
            out = sentinel;
            pool = shared_state(*tried);
            ++seed;
        };
        std::size_t drafted = 0; // successful runs whose draft was not empty
        const long drafting = every_allocation_failing(
            call, prepare, [&] { out = tried->draft(history, sampled); },
            [&](bool threw) {
                if (threw) {
                    CHECK(out == sentinel);
                    CHECK(shared_state(*tried) == pool);
                    same_observers(*tried, *before);
                } else {
                    CHECK(out == before->draft(history, sampled));
                    drafted += out.empty() ? 0 : 1;
                }
                drafts += same_future(*tried, *before, history, seed, warm_end());
            });
        CHECK(drafting > 0);
        CHECK(drafted == 1); // the scene's call drafts
        if constexpr (requires { tried->begin(history); }) {
            const long beginning = every_allocation_failing(
                call, prepare, [&] { tried->begin(history); },
                [&](bool threw) {
                    if (threw) {
                        CHECK(shared_state(*tried) == pool);
                        same_observers(*tried, *before);
                    } else {
                        before->begin(history);
                    }
                    drafts += same_future(*tried, *before, history, seed, warm_end());
                });
            if (sc == scene::cold) { // warm, a drafter may have all the room it needs
                CHECK((beginning > 0) == begin_allocates);
            }
        }
    }
    // The futures compared are worth something only where the drafters drafted.
    CHECK(drafts > 100);
}

qs::ngram_map::config map_config(std::int32_t check_rate, bool values)
{
    return {.size_ngram = 3, .size_mgram = 6, .check_rate = check_rate, .min_hits = 1, .values = values, .dominance = 2};
}

qs::ngram_mod_config mod_config()
{
    return {.size_ngram = 4, .min_draft = 2, .max_draft = 12, .add_chunk = 3, .low_acceptance = 0.25, .low_streak = 3,
            .reset_occupancy = 0.25, .pool_size = 1 << 12};
}

qs::suffix_drafter::config suffix_config(std::int32_t check_rate)
{
    return {.max_draft = 8, .min_match = 2, .min_confidence = 0.05, .max_depth = 16, .check_rate = check_rate};
}

std::shared_ptr<qs::suffix_corpus> corpus_of(std::uint32_t seed)
{
    auto corpus = std::make_shared<qs::suffix_corpus>(16);
    const tokens sequence = source_tokens(400, seed);
    corpus->add(std::span(sequence).first(150));
    corpus->add(std::span(sequence).subspan(150));
    return corpus;
}

} // namespace

TEST_CASE("allocation failure: qk::spec::token_history push_back, append (from itself too), assign, constructor")
{
    const tokens& s = source();
    const token_history base{std::span(s).first(200)};
    const tokens extra(s.begin() + 200, s.begin() + 260);
    enum class edit { push_back, append, append_itself, assign, assign_itself };
    for (const edit e : {edit::push_back, edit::append, edit::append_itself, edit::assign, edit::assign_itself}) {
        CAPTURE(static_cast<int>(e));
        const auto apply = [&](token_history& h) {
            switch (e) {
            case edit::push_back:
                h.push_back(77);
                break;
            case edit::append:
                h.append(extra);
                break;
            case edit::append_itself:
                h.append(h.tokens().subspan(10, 50));
                break;
            case edit::assign:
                h.assign(std::span(s).subspan(500, 300));
                break;
            case edit::assign_itself:
                h.assign(h.tokens().subspan(20, 150));
                break;
            }
        };
        token_history tried;
        token_history before;
        token_history::mark tried_mark;
        token_history::mark before_mark;
        const long allocations = every_allocation_failing(
            "qk::spec::token_history",
            [&] {
                tried = token_history(); // frees what the last run grew: the copies hold just their tokens
                tried = base;
                before = base;
                tried_mark = tried.seen();
                before_mark = before.seen();
            },
            [&] { apply(tried); },
            [&](bool threw) {
                if (!threw) {
                    apply(before);
                }
                const auto same = [&] {
                    CHECK(std::ranges::equal(tried.tokens(), before.tokens()));
                    CHECK(tried.seen().length == before.seen().length);
                    CHECK(tried.seen().last == before.seen().last);
                    CHECK(tried.unchanged_since(tried_mark) == before.unchanged_since(before_mark));
                };
                same();
                // The stamps go on alike: cut, regrow, and compare the marks again.
                tried.cut(tried.size() - 7);
                before.cut(before.size() - 7);
                for (const std::int32_t t : {5, 6, 7}) {
                    tried.push_back(t);
                    before.push_back(t);
                }
                same();
            });
        // Within capacity (assigning 150 of its 200 tokens), nothing is allocated.
        CHECK((allocations > 0) == (e != edit::assign_itself));
    }

    token_history built;
    built.push_back(-1);
    const long allocations = every_allocation_failing(
        "qk::spec::token_history::token_history", [&] { built = token_history(); }, [&] { built = token_history(extra); },
        [&](bool threw) {
            if (!threw) {
                CHECK(std::ranges::equal(built.tokens(), extra));
            } else {
                CHECK(built.empty());
            }
        });
    CHECK(allocations == 2); // tokens and stamps

    // Pushing one by one grows geometrically: a few allocations for 10,000 tokens.
    token_history pushed;
    qk_allocation::allocations_left = std::numeric_limits<long>::max();
    for (std::int32_t t = 0; t < 10000; ++t) {
        pushed.push_back(t);
    }
    const long used = std::numeric_limits<long>::max() - qk_allocation::allocations_left.load();
    qk_allocation::allocations_left = 0;
    CHECK(used < 64);
}

TEST_CASE("allocation failure: qk::spec::ngram_simple::draft")
{
    drafter_cases<qs::ngram_simple>(
        "qk::spec::ngram_simple::draft", [](std::int32_t check_rate) { return qs::ngram_simple({3, 8, check_rate}); }, false);
}

TEST_CASE("allocation failure: qk::spec::ngram_index draft and begin")
{
    drafter_cases<qs::ngram_index>(
        "qk::spec::ngram_index", [](std::int32_t check_rate) { return qs::ngram_index({3, 8, check_rate}); }, true);
}

TEST_CASE("allocation failure: qk::spec::ngram_map draft, begin and accept")
{
    for (const bool values : {true, false}) {
        CAPTURE(values);
        drafter_cases<qs::ngram_map>(
            "qk::spec::ngram_map", [&](std::int32_t check_rate) { return qs::ngram_map(map_config(check_rate, values)); }, true);
    }

    // accept() records a key's first cap: warmed without feedback, so that the key is new.
    std::optional<qs::ngram_map> tried;
    std::optional<qs::ngram_map> before;
    token_history history;
    std::uint32_t seed = 0;
    std::size_t drafts = 0;
    tokens draft;
    const long allocations = every_allocation_failing(
        "qk::spec::ngram_map::accept",
        [&] {
            tried.emplace(map_config(1, true));
            draft = tried->draft(history, set_scene(*tried, history, scene::warm, false));
            before.emplace(*tried);
            ++seed;
        },
        [&] { tried->accept(1, static_cast<std::int32_t>(draft.size())); },
        [&](bool threw) {
            if (!threw) {
                before->accept(1, static_cast<std::int32_t>(draft.size()));
            }
            drafts += same_future(*tried, *before, history, seed);
        });
    CHECK(!draft.empty());
    CHECK(allocations > 0);
    CHECK(drafts > 0);
}

TEST_CASE("allocation failure: qk::spec::ngram_mod draft (its pool untouched), ngram_pool and ngram_mod constructors")
{
    // Its begin() allocates nothing; its pool, shared by copies, is compared entry by entry.
    drafter_cases<qs::ngram_mod>("qk::spec::ngram_mod::draft", [](std::int32_t) { return qs::ngram_mod(mod_config()); }, false);

    std::optional<qs::ngram_pool> pool;
    CHECK(every_allocation_failing(
              "qk::spec::ngram_pool::ngram_pool", [&] { pool.reset(); }, [&] { pool.emplace(4, 1000); },
              [&](bool threw) { CHECK(pool.has_value() == !threw); }) > 0);
    std::optional<qs::ngram_mod> mod;
    CHECK(every_allocation_failing(
              "qk::spec::ngram_mod::ngram_mod", [&] { mod.reset(); }, [&] { mod.emplace(mod_config()); },
              [&](bool threw) {
                  CHECK(mod.has_value() == !threw);
                  if (!threw) {
                      CHECK(mod->pool().used() == 0);
                  }
              }) > 1);
    // Too large to allocate at all: the same qk::error, without any injected failure.
    CHECK_THROWS_WITH_AS(qs::ngram_pool(4, std::numeric_limits<std::size_t>::max() / 2), doctest::Contains("out of memory"), qk::error);
}

TEST_CASE("allocation failure: qk::spec::suffix_drafter draft and begin, without and with a corpus; its constructor")
{
    drafter_cases<qs::suffix_drafter>(
        "qk::spec::suffix_drafter", [](std::int32_t check_rate) { return qs::suffix_drafter(suffix_config(check_rate)); }, true);
    const std::shared_ptr<const qs::suffix_corpus> corpus = corpus_of(11);
    drafter_cases<qs::suffix_drafter>(
        "qk::spec::suffix_drafter", [&](std::int32_t check_rate) { return qs::suffix_drafter(suffix_config(check_rate), corpus); }, true);

    std::optional<qs::suffix_drafter> drafter;
    CHECK(every_allocation_failing(
              "qk::spec::suffix_drafter::suffix_drafter", [&] { drafter.reset(); }, [&] { drafter.emplace(suffix_config(1), corpus); },
              [&](bool threw) { CHECK(drafter.has_value() == !threw); }) > 0);
}

TEST_CASE("allocation failure: qk::spec::suffix_corpus::add takes back what it added; its constructor")
{
    const tokens sequence = source_tokens(300, 12);
    for (const bool empty : {true, false}) {
        CAPTURE(empty);
        const std::shared_ptr<const qs::suffix_corpus> base = empty ? std::make_shared<qs::suffix_corpus>(16) : corpus_of(13);
        std::shared_ptr<qs::suffix_corpus> tried;
        std::shared_ptr<qs::suffix_corpus> before;
        token_history history;
        std::uint32_t seed = 0;
        std::size_t drafts = 0;
        const long allocations = every_allocation_failing(
            "qk::spec::suffix_corpus::add",
            [&] {
                tried = std::make_shared<qs::suffix_corpus>(*base);
                before = std::make_shared<qs::suffix_corpus>(*base);
                history = token_history(std::span(source()).first(120));
                ++seed;
            },
            [&] { tried->add(sequence); },
            [&](bool threw) {
                if (!threw) {
                    before->add(sequence);
                }
                CHECK(tried->size() == before->size());
                CHECK(tried->sequences() == before->sequences());
                CHECK(tried->version() == before->version());
                // Drafters reading each corpus draft alike, over a history that ends like the sequence.
                qs::suffix_drafter a(suffix_config(1), tried);
                qs::suffix_drafter b(suffix_config(1), before);
                history.append(std::span(sequence).first(40));
                drafts += same_future(a, b, history, seed);
                // The corpus takes the next sequence alike.
                tried->add(std::span(sequence).subspan(100, 60));
                before->add(std::span(sequence).subspan(100, 60));
                drafts += same_future(a, b, history, seed + 1000);
            });
        CHECK(allocations > 0);
        CHECK(drafts > 0);
    }

    std::optional<qs::suffix_corpus> corpus;
    CHECK(every_allocation_failing(
              "qk::spec::suffix_corpus::suffix_corpus", [&] { corpus.reset(); }, [&] { corpus.emplace(16); },
              [&](bool threw) { CHECK(corpus.has_value() == !threw); }) > 0);
}

namespace {

// Drafters whose drafts change nothing but what they derived from the history (check_rate 1, no
// feedback hook), so that a selection of them is left as it was even when a later drafter fails.
using neutral_selection = qs::drafter_selection<qs::ngram_index, qs::suffix_drafter, qs::ngram_simple>;
neutral_selection make_neutral_selection(std::int32_t)
{
    return neutral_selection(qs::ngram_index({3, 8, 1}), qs::suffix_drafter(suffix_config(1)), qs::ngram_simple({4, 6, 1}));
}

} // namespace

TEST_CASE("allocation failure: qk::spec::drafter_selection draft, begin and accept")
{
    drafter_cases<neutral_selection>("qk::spec::drafter_selection", make_neutral_selection, true);

    // accept() passes the feedback on to ngram_map, whose first cap of a key allocates.
    using map_selection = qs::drafter_selection<qs::ngram_map>;
    std::optional<map_selection> tried;
    std::optional<map_selection> before;
    token_history history;
    std::uint32_t seed = 0;
    std::size_t drafts = 0;
    tokens draft;
    for (const bool two_counts : {false, true}) {
        CAPTURE(two_counts);
        const auto accept = [&](map_selection& selection) {
            if (two_counts) {
                selection.accept(1, static_cast<std::int32_t>(draft.size()));
            } else {
                selection.accept(1);
            }
        };
        const long allocations = every_allocation_failing(
            "qk::spec::drafter_selection::accept",
            [&] {
                tried.emplace(qs::ngram_map(map_config(1, true)));
                draft = tried->draft(history, set_scene(*tried, history, scene::warm, false));
                before.emplace(*tried);
                ++seed;
            },
            [&] { accept(*tried); },
            [&](bool threw) {
                if (threw) {
                    same_observers(*tried, *before);
                } else {
                    accept(*before);
                }
                drafts += same_future(*tried, *before, history, seed);
            });
        CHECK(!draft.empty());
        CHECK(allocations > 0);
    }
    CHECK(drafts > 0);
}

TEST_CASE("allocation failure: qk::spec::verify_greedy, batch_budget::split")
{
    const tokens draft = {4, 5, 6, 7, 8};
    const tokens target = {4, 5, 9, 1, 1, 1};
    qs::verification v;
    CHECK(every_allocation_failing(
              "qk::spec::verify_greedy", [&] { v = {99, sentinel}; }, [&] { v = qs::verify_greedy(draft, target); },
              [&](bool threw) {
                  if (threw) {
                      CHECK(v.accepted == 99);
                      CHECK(v.tokens == sentinel);
                  } else {
                      CHECK(v.accepted == 2);
                      CHECK(v.tokens == tokens{4, 5, 9});
                  }
              }) == 1);

    const qs::batch_budget budget(7);
    std::vector<std::size_t> sizes;
    CHECK(every_allocation_failing(
              "qk::spec::batch_budget::split", [&] { sizes = {99}; }, [&] { sizes = budget.split(50); },
              [&](bool threw) {
                  if (threw) {
                      CHECK(sizes == std::vector<std::size_t>{99});
                  } else {
                      CHECK(sizes == std::vector<std::size_t>{7, 7, 7, 7, 7, 7, 7, 1});
                  }
              }) == 1);
    CHECK_THROWS_WITH_AS((void)budget.split(std::numeric_limits<std::size_t>::max()), doctest::Contains("out of memory"), qk::error);
}

TEST_CASE("allocation failure: qk::spec::verify_stochastic leaves the chain and the random source as they were")
{
    namespace sm = qk::sampling;
    constexpr std::size_t vocab = 60;
    const tokens draft = {3, 17, 42, 8};
    // Rows of noise that favour the drafted tokens, so that some are accepted and some not.
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> noise(-2.0f, 2.0f);
    std::vector<float> logits((draft.size() + 1) * vocab);
    for (auto& x : logits) {
        x = noise(rng);
    }
    for (std::size_t i = 0; i < draft.size(); ++i) {
        logits[i * vocab + static_cast<std::size_t>(draft[i])] += 3.5f;
    }
    const auto row = [&](std::size_t i) { return std::span<const float>(logits).subspan((i % (draft.size() + 1)) * vocab, vocab); };
    const char* texts[] = {
        "penalties(8,1.3);top_k(20);temp(0.8);dist(5)",
        "dry(0.8,1.75,2,-1);min_p(0.05);mirostat_v2(5,0.1,9)",
    };
    std::size_t accepted = 0;
    for (const char* text : texts) {
        CAPTURE(text);
        sm::chain warm = sm::chain::parse(text);
        for (std::size_t step = 0; step < 7; ++step) {
            (void)warm.sample(row(step));
        }
        const sm::random_source random(3, 1000);
        for (int round = 0; round < 6; ++round) {
            CAPTURE(round);
            sm::chain tried;
            sm::chain before;
            sm::random_source tried_random = random;
            sm::random_source before_random = random;
            qs::verification v;
            const long allocations = every_allocation_failing(
                "qk::spec::verify_stochastic",
                [&] {
                    tried = warm;
                    before = warm;
                    tried_random = random;
                    before_random = random;
                    v = {99, sentinel};
                },
                [&] { v = qs::verify_stochastic(tried, logits, vocab, draft, tried_random); },
                [&](bool threw) {
                    if (threw) {
                        CHECK(v.accepted == 99);
                        CHECK(v.tokens == sentinel);
                    } else {
                        const qs::verification expected = qs::verify_stochastic(before, logits, vocab, draft, before_random);
                        CHECK(v.accepted == expected.accepted);
                        CHECK(v.tokens == expected.tokens);
                    }
                    CHECK(tried_random == before_random);
                    // Not reseeded: the generators must not have drawn either.
                    for (std::size_t step = 0; step < 6; ++step) {
                        CHECK(tried.sample(row(step)) == before.sample(row(step)));
                    }
                });
            CHECK(allocations > 0);
            const qs::verification done = qs::verify_stochastic(warm, logits, vocab, draft, tried_random);
            accepted += done.accepted;
        }
    }
    CHECK(accepted > 0);
}

namespace {

// replay() on a drafter warmed by an earlier replay: on a throw the result is the sentinel and the
// drafter goes on as its copy; on success both replay alike.
template <class D>
void replay_case(const char* what, const std::function<D()>& make)
{
    CAPTURE(what);
    const tokens sequence = source_tokens(150, 21);
    const tokens earlier = source_tokens(120, 22);
    const qs::replay_options options{.prompt = 20, .n_batch = 4, .max_draft = 8};
    std::optional<D> tried;
    std::optional<D> before;
    token_history history;
    qs::replay_result r;
    std::uint32_t seed = 0;
    std::size_t drafts = 0;
    const long allocations = every_allocation_failing(
        "qk::spec::replay",
        [&] {
            tried.emplace(make());
            (void)qs::replay(earlier, *tried, {.prompt = 10, .n_batch = 512, .max_draft = 8});
            before.emplace(*tried);
            r = {};
            r.steps = 12345;
            history = token_history(std::span(sequence).first(60));
            ++seed;
        },
        [&] { r = qs::replay(sequence, *tried, options); },
        [&](bool threw) {
            if (threw) {
                CHECK(r.steps == 12345);
                same_observers(*tried, *before);
            } else {
                const qs::replay_result expected = qs::replay(sequence, *before, options);
                CHECK(r.generated == expected.generated);
                CHECK(r.steps == expected.steps);
                CHECK(r.drafts == expected.drafts);
                CHECK(r.drafted == expected.drafted);
                CHECK(r.accepted == expected.accepted);
                CHECK(r.evaluations == expected.evaluations);
                CHECK(r.baseline == expected.baseline);
                CHECK(r.prompt_evaluations == expected.prompt_evaluations);
                drafts += r.drafts;
            }
            drafts += same_future(*tried, *before, history, seed);
        });
    CHECK(allocations > 0);
    CHECK(drafts > 0);
}

} // namespace

TEST_CASE("allocation failure: qk::spec::replay leaves a copyable drafter as it was")
{
    replay_case<qs::ngram_index>("ngram_index", [] { return qs::ngram_index({3, 8, 1}); });
    replay_case<qs::ngram_map>("ngram_map", [] { return qs::ngram_map(map_config(2, true)); });
    replay_case<qs::suffix_drafter>("suffix_drafter", [] { return qs::suffix_drafter(suffix_config(1)); });
    replay_case<neutral_selection>("selection", [] { return make_neutral_selection(1); });
    using mixed = qs::drafter_selection<qs::ngram_map, qs::suffix_drafter>;
    replay_case<mixed>("selection with ngram_map",
                       [] { return mixed(qs::ngram_map(map_config(1, false)), qs::suffix_drafter(suffix_config(2))); });

    // ngram_mod's pool is shared, not copied: the drafter is as it was, the pool keeps what the
    // replay added before it failed.
    const tokens sequence = source_tokens(150, 21);
    std::optional<qs::ngram_mod> tried;
    std::optional<qs::ngram_mod> before;
    qs::replay_result r;
    const long allocations = every_allocation_failing(
        "qk::spec::replay",
        [&] {
            tried.emplace(mod_config());
            before.emplace(mod_config(), std::make_shared<qs::ngram_pool>(tried->pool()));
            r = {};
            r.steps = 12345;
        },
        [&] { r = qs::replay(sequence, *tried, {.prompt = 20, .n_batch = 4, .max_draft = 8}); },
        [&](bool threw) {
            if (threw) {
                CHECK(r.steps == 12345);
                CHECK(tried->added() == 0);
                CHECK(tried->last_draft_length() == 0);
            } else {
                const qs::replay_result expected = qs::replay(sequence, *before, {.prompt = 20, .n_batch = 4, .max_draft = 8});
                CHECK(r.drafts == expected.drafts);
                CHECK(r.accepted == expected.accepted);
                CHECK(r.evaluations == expected.evaluations);
                CHECK(r.drafts > 0);
                same_observers(*tried, *before);
            }
        });
    CHECK(allocations > 0);
}
