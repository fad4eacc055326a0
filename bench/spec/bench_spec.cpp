// qk::spec drafting time per call at 1k, 8k, 64k and 256k tokens of context: ngram_simple (a
// scan of the history) against ngram_index (O(1) per call), and ngram_map, ngram_mod,
// suffix_drafter and a drafter_selection of four, on a text-like sequence where matches exist and
// on a uniformly random one where they almost never do (so ngram_simple scans it all).
#include <benchmark/benchmark.h>

#include <spec/spec.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "inputs.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

// n = 4, m = 16: the prompt-lookup sizes in common use and ngram_map's defaults. A larger n
// finds fewer matches on text, so ngram_simple scans further; the random sequence already shows
// its worst case (no match at any n).
constexpr qk::spec::ngram_config config{.size_ngram = 4, .size_mgram = 16, .check_rate = 1};
constexpr std::int32_t vocabulary = 32000;
constexpr std::size_t longest_context = std::size_t{1} << 18;

enum class kind { text, random };

// Each timed call passes a history one token longer than the previous one, as decoding does,
// over a window of calls after the target length; the window is short against the context so
// that the length stays close to the one named, and at least 256 calls so that the pause at its
// end costs little per call.
std::size_t window_of(std::size_t context) { return std::max<std::size_t>(context / 8, 256); }

// Zipf-like ranks (p(r) ~ 1 / (r + 1)^s) drawn by inverting the cumulative sum.
class zipf {
public:
    zipf(std::size_t n, double s) : cdf_(n)
    {
        double sum = 0;
        for (std::size_t r = 0; r < n; ++r) {
            sum += 1.0 / std::pow(static_cast<double>(r + 1), s);
            cdf_[r] = sum;
        }
        for (double& c : cdf_) {
            c /= sum;
        }
    }
    template <class Engine>
    std::size_t operator()(Engine& engine) const
    {
        const double u = std::uniform_real_distribution<double>(0.0, 1.0)(engine);
        return std::min<std::size_t>(static_cast<std::size_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin()),
                                     cdf_.size() - 1);
    }

private:
    std::vector<double> cdf_;
};

// Text-like: 400 phrases of 20-60 tokens over a Zipf-distributed vocabulary, chosen by a Zipf law
// of their own and separated by a few loose tokens half the time. Popular phrases recur within
// a few hundred tokens, rare ones tens of thousands back, and the loose tokens make the n-grams
// that straddle phrases vary, as the joins between sentences do.
std::vector<std::int32_t> make_text(std::size_t length)
{
    std::mt19937_64 engine(20250301);
    const zipf token(vocabulary, 1.1);
    std::vector<std::vector<std::int32_t>> phrases(400);
    for (auto& p : phrases) {
        p.resize(std::uniform_int_distribution<std::size_t>(20, 60)(engine));
        for (auto& t : p) {
            t = static_cast<std::int32_t>(token(engine));
        }
    }
    const zipf phrase(phrases.size(), 1.0);
    std::vector<std::int32_t> seq;
    seq.reserve(length + 128);
    while (seq.size() < length) {
        const auto& p = phrases[phrase(engine)];
        seq.insert(seq.end(), p.begin(), p.end());
        if (engine() % 2 == 0) {
            for (auto k = std::uniform_int_distribution<int>(1, 6)(engine); k > 0; --k) {
                seq.push_back(static_cast<std::int32_t>(token(engine)));
            }
        }
    }
    seq.resize(length);
    return seq;
}

std::vector<std::int32_t> make_random(std::size_t length)
{
    std::mt19937_64 engine(20250302);
    return qk_inputs::draws(length, std::uniform_int_distribution<std::int32_t>(0, vocabulary - 1), engine);
}

// One sequence per kind, long enough for the longest context and its window; every context
// length uses a prefix of it.
const std::vector<std::int32_t>& sequence(kind k)
{
    const std::size_t length = longest_context + window_of(longest_context) + 1;
    static const std::vector<std::int32_t> text = make_text(length);
    static const std::vector<std::int32_t> random = make_random(length);
    return k == kind::text ? text : random;
}

// ngram_simple's wall time per call, per (kind, context), for the index cases' speedup.
std::map<std::pair<kind, std::size_t>, double>& simple_ns()
{
    static std::map<std::pair<kind, std::size_t>, double> ns;
    return ns;
}

// ns_per_call: wall time of the timed calls over their number; drafts: the share of calls that
// returned a draft. Both drafters return the same drafts for the same calls, so their shares
// differ only by where in the window each run stopped.
void report(benchmark::State& state, double timed_ns, std::size_t drafts)
{
    const auto calls = static_cast<double>(state.iterations());
    state.SetItemsProcessed(state.iterations());
    state.counters["ns_per_call"] = timed_ns / calls;
    state.counters["drafts"] = static_cast<double>(drafts) / calls;
}

// Call i drafts from the history [0, context + i) with token context + i just sampled, i cycling
// through the window; the drafter keeps no state, so each call is a scan of its history. Each
// timed call also appends the sampled token to the history, as decoding does (and as the index
// cases do), and the window's end cuts it back (O(1)).
void simple_case(benchmark::State& state, kind k)
{
    const auto context = static_cast<std::size_t>(state.range(0));
    const std::size_t window = window_of(context);
    const std::span<const std::int32_t> tokens(sequence(k).data(), context + window);
    qk::spec::ngram_simple drafter(config);
    qk::spec::token_history history(tokens.first(context));
    std::size_t i = 0;
    std::size_t drafts = 0;
    const auto start = clock_type::now();
    for (auto _ : state) {
        const std::vector<std::int32_t> d = drafter.draft(history, tokens[context + i]);
        drafts += d.empty() ? 0 : 1;
        benchmark::DoNotOptimize(d.data());
        history.push_back(tokens[context + i]);
        if (++i == window) {
            history.cut(context);
            i = 0;
        }
    }
    const double ns = std::chrono::duration<double, std::nano>(clock_type::now() - start).count();
    report(state, ns, drafts);
    simple_ns()[{k, context}] = ns / static_cast<double>(state.iterations());
}

// The streaming use: the index holds the first context - 1 tokens before timing, and each timed
// call brings one more token in (O(1)), looks its n-gram up and appends the sampled token to the
// history. At the end of the window the history is cut back to context - 1 tokens outside the
// timed region (the index drops the newest starts, O(window)), rather than re-indexed from
// scratch (O(context)). The hash table's buckets stay grown after the first window, so later
// windows do not pay for its rehashes, which in a real stream cost amortized O(1) per token.
struct prepared_index {
    qk::spec::ngram_index drafter{config};
    qk::spec::token_history history; // the one the drafter follows, kept with it
    bool agrees = true;              // with ngram_simple on the window's first calls
};

// Back to the window's start (the history holds at least `context` tokens, the sequence's):
// the history holds context tokens, the index the first context - 1.
void rewind(prepared_index& p, std::span<const std::int32_t> tokens, std::size_t context)
{
    p.history.cut(context - 1);
    (void)p.drafter.draft(p.history, tokens[context - 1]);
    p.history.push_back(tokens[context - 1]);
}

// Built once per (kind, context) and kept for the later runs Google Benchmark makes of the same
// case: indexing 256k tokens costs more than the timed loop would otherwise run.
prepared_index& prepared(kind k, std::size_t context, std::span<const std::int32_t> tokens)
{
    static std::map<std::pair<kind, std::size_t>, std::unique_ptr<prepared_index>> cache;
    auto& slot = cache[{k, context}];
    if (!slot) {
        slot = std::make_unique<prepared_index>();
        slot->history.append(tokens.first(context));
        slot->drafter.begin(slot->history);
        // The scan's cost bounds how many calls are checked.
        qk::spec::ngram_simple reference(config);
        qk::spec::token_history& history = slot->history;
        for (std::size_t i = 0; i < std::min<std::size_t>(window_of(context), 64); ++i) {
            slot->agrees = slot->agrees && slot->drafter.draft(history, tokens[context + i]) == reference.draft(history, tokens[context + i]);
            history.push_back(tokens[context + i]);
        }
    }
    return *slot;
}

// The timed calls of a streaming case: call i drafts with token context + i just sampled and
// appends it; at the window's end `rewind` brings the history back, outside the timed region
// (the pause's own clock reads are left out too). Returns the timed nanoseconds.
template <class Drafter, class Rewind>
double time_stream(benchmark::State& state, Drafter& drafter, qk::spec::token_history& history, std::span<const std::int32_t> tokens,
                   std::size_t context, Rewind rewind)
{
    const std::size_t window = window_of(context);
    std::size_t i = 0;
    std::size_t drafts = 0;
    double paused_ns = 0;
    const auto start = clock_type::now();
    for (auto _ : state) {
        const std::vector<std::int32_t> d = drafter.draft(history, tokens[context + i]);
        drafts += d.empty() ? 0 : 1;
        benchmark::DoNotOptimize(d.data());
        history.push_back(tokens[context + i]);
        if (++i == window) {
            const auto pause = clock_type::now();
            state.PauseTiming();
            rewind();
            i = 0;
            state.ResumeTiming();
            paused_ns += std::chrono::duration<double, std::nano>(clock_type::now() - pause).count();
        }
    }
    const double ns = std::chrono::duration<double, std::nano>(clock_type::now() - start).count() - paused_ns;
    report(state, ns, drafts);
    return ns;
}

void index_case(benchmark::State& state, kind k)
{
    const auto context = static_cast<std::size_t>(state.range(0));
    const std::size_t window = window_of(context);
    const std::span<const std::int32_t> tokens(sequence(k).data(), context + window);
    prepared_index& p = prepared(k, context, tokens);
    if (!p.agrees) {
        state.SkipWithError("ngram_index and ngram_simple drafted differently");
        return;
    }
    // Wherever the previous run stopped, back to the window's start.
    rewind(p, tokens, context);
    const double ns = time_stream(state, p.drafter, p.history, tokens, context, [&] { rewind(p, tokens, context); });
    // speedup: ngram_simple's time per call at the same length on the same sequence over this
    // one's, present when that case ran earlier in this process (a filter may leave it out).
    if (const auto it = simple_ns().find({k, context}); it != simple_ns().end()) {
        state.counters["speedup"] = it->second / (ns / static_cast<double>(state.iterations()));
    }
}

// The other drafters in the streaming use, as index_case times ngram_index: the drafter has read
// the first context - 1 tokens before timing (kept per (kind, context) across runs), each timed
// call reads one more token, drafts and appends the sampled one, and the window's end cuts the
// history back outside the timed region.
template <class Drafter>
struct prepared_stream {
    Drafter drafter;
    qk::spec::token_history history;
};

template <class Drafter>
void stream_case(benchmark::State& state, kind k, Drafter (*make)())
{
    const auto context = static_cast<std::size_t>(state.range(0));
    const std::size_t window = window_of(context);
    const std::span<const std::int32_t> tokens(sequence(k).data(), context + window);
    static std::map<std::pair<kind, std::size_t>, std::unique_ptr<prepared_stream<Drafter>>> cache;
    auto& slot = cache[{k, context}];
    if (!slot) {
        slot = std::make_unique<prepared_stream<Drafter>>(prepared_stream<Drafter>{make(), {}});
        slot->history.append(tokens.first(context));
    }
    Drafter& drafter = slot->drafter;
    qk::spec::token_history& history = slot->history;
    const auto rewind_stream = [&] {
        history.cut(context - 1);
        (void)drafter.draft(history, tokens[context - 1]);
        history.push_back(tokens[context - 1]);
    };
    rewind_stream();
    (void)time_stream(state, drafter, history, tokens, context, rewind_stream);
}

qk::spec::ngram_map make_map() { return qk::spec::ngram_map({.size_ngram = 4, .size_mgram = 16}); }
// llama.cpp's defaults (n = 24, drafts of 48-64 tokens, a pool of 4M entries).
qk::spec::ngram_mod make_mod() { return qk::spec::ngram_mod(); }
qk::spec::suffix_drafter make_suffix() { return qk::spec::suffix_drafter(qk::spec::suffix_drafter::config{}); }
using selection = qk::spec::drafter_selection<qk::spec::ngram_index, qk::spec::ngram_map, qk::spec::ngram_mod, qk::spec::suffix_drafter>;
selection make_selection() { return selection(qk::spec::ngram_index(config), make_map(), make_mod(), make_suffix()); }

void contexts(benchmark::internal::Benchmark* b)
{
    for (std::int64_t n = 1024; n <= static_cast<std::int64_t>(longest_context); n *= 8) {
        b->Arg(n);
    }
    b->Arg(static_cast<std::int64_t>(longest_context));
    b->ArgName("ctx")->MinTime(0.1)->Unit(benchmark::kNanosecond);
}

} // namespace

// Each index case after the scan it is compared with, so that its speedup finds the scan's time.
BENCHMARK_CAPTURE(simple_case, text, kind::text)->Name("ngram_simple/text")->Apply(contexts);
BENCHMARK_CAPTURE(index_case, text, kind::text)->Name("ngram_index/text")->Apply(contexts);
BENCHMARK_CAPTURE(simple_case, random, kind::random)->Name("ngram_simple/random")->Apply(contexts);
BENCHMARK_CAPTURE(index_case, random, kind::random)->Name("ngram_index/random")->Apply(contexts);
BENCHMARK_CAPTURE(stream_case, map_text, kind::text, make_map)->Name("ngram_map/text")->Apply(contexts);
BENCHMARK_CAPTURE(stream_case, map_random, kind::random, make_map)->Name("ngram_map/random")->Apply(contexts);
BENCHMARK_CAPTURE(stream_case, mod_text, kind::text, make_mod)->Name("ngram_mod/text")->Apply(contexts);
BENCHMARK_CAPTURE(stream_case, mod_random, kind::random, make_mod)->Name("ngram_mod/random")->Apply(contexts);
BENCHMARK_CAPTURE(stream_case, suffix_text, kind::text, make_suffix)->Name("suffix_drafter/text")->Apply(contexts);
BENCHMARK_CAPTURE(stream_case, suffix_random, kind::random, make_suffix)->Name("suffix_drafter/random")->Apply(contexts);
BENCHMARK_CAPTURE(stream_case, selection_text, kind::text, make_selection)->Name("drafter_selection/text")->Apply(contexts);
BENCHMARK_CAPTURE(stream_case, selection_random, kind::random, make_selection)->Name("drafter_selection/random")->Apply(contexts);
