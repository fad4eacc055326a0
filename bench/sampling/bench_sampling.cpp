// qk::sampling speed per token on whole vocabularies (32000, 152064, 256000 logits; flat, normal
// and peaky shapes): a plain SIMD softmax pass as the baseline, qkern's softmax, then greedy,
// dist, a typical llama.cpp-style chain and single truncations before dist, each also reported
// as a multiple of the plain softmax pass (x_softmax; x_paired against passes timed beside the
// case, see report()). Built with -march=native (bench/CMakeLists.txt) so that
// qk::arch::vector_native is the CPU's widest vector tag.
#include <benchmark/benchmark.h>

#include <sampling/sampling.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inputs.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

constexpr std::string_view typical_chain = "penalties(last_n=64,repeat=1.1);top_k(40);top_p(0.95);min_p(0.05);temp(0.8);dist(seed=42)";

// Three shapes of logits (portable_normal, so the values do not depend on the standard library's
// normal_distribution):
//  - flat: N(0, 1), where a nucleus of p = 0.95 holds most of the vocabulary;
//  - normal: N(0, 3), a broad body alone (the nucleus still holds thousands of tokens);
//  - peaky: N(0, 3) with a head of six tokens well above it that together hold most of the
//    probability, as a language model's logits usually are.
enum shape : std::int64_t { flat, normal, peaky };

const char* shape_name(std::int64_t s)
{
    constexpr const char* names[] = {"flat", "normal", "peaky"};
    return names[s];
}

std::vector<float> make_logits(std::size_t n, shape s)
{
    std::mt19937 engine(20250101);
    std::vector<float> logits = qk_inputs::portable_normal(n, engine, s == shape::flat ? 1.0 : 3.0);
    if (s == shape::peaky) {
        constexpr float head[] = {18.0f, 17.0f, 16.5f, 16.0f, 15.0f, 14.5f};
        for (const float h : head) {
            logits[engine() % n] = h;
        }
    }
    return logits;
}

const std::vector<float>& logits_of(std::size_t n, std::int64_t s)
{
    static std::map<std::pair<std::size_t, std::int64_t>, std::vector<float>> cache;
    auto it = cache.find({n, s});
    if (it == cache.end()) {
        it = cache.emplace(std::pair{n, s}, make_logits(n, static_cast<shape>(s))).first;
    }
    return it->second;
}

// The baseline pass: the plainest SIMD softmax over the logits (the maximum; exp of the rounded
// difference x - max, stored and summed in one float vector; one scaling pass), as
// qk::sampling::softmax was before its probabilities were held to 7e-7 relative. Its weights now
// correct the subtraction's rounding and its lanes add in double, which costs about half a pass
// more: the softmax case reports that as its own x_softmax, and the ratios of the samplers do not
// improve when the reference pass gets slower.
bool plain_softmax(std::span<const float> x, std::span<float> p)
{
    namespace sd = qk::sampling::detail;
    using arch = qk::arch::vector_native;
    const std::size_t n = x.size();
    const float max = sd::max_logit<arch>(x.data(), n);
    if (!(max > sd::minus_infinity)) {
        return false;
    }
    float total = 0;
    std::size_t i = 0;
    if constexpr (!sd::is_scalar<arch>) {
        using V = xsimd::batch<float, sd::simd_of<arch>>;
        const V m(max);
        V acc(0.0f);
        for (; i + V::size <= n; i += V::size) {
            const V e = sd::exp(V::load_unaligned(x.data() + i) - m);
            e.store_unaligned(p.data() + i);
            acc = acc + e;
        }
        total = xsimd::hadd(acc);
    }
    for (; i < n; ++i) {
        p[i] = sd::exp(x[i] - max);
        total += p[i];
    }
    sd::scale<arch>(p.data(), n, 1.0f / total);
    return true;
}

// One baseline pass's time on this vocabulary, measured once per process: the median of 15
// batches of calls (each batch ~5 ms), so that a descheduled batch on a shared machine does not
// move the baseline the ratios are formed against.
double softmax_baseline_ns(std::size_t n)
{
    static std::map<std::size_t, double> cache;
    if (const auto it = cache.find(n); it != cache.end()) {
        return it->second;
    }
    // The pass has no data-dependent branch, so one shape stands for all.
    const std::vector<float>& logits = logits_of(n, static_cast<std::int64_t>(shape::peaky));
    std::vector<float> p(n);
    const auto batch = [&](std::size_t calls) {
        const auto start = clock_type::now();
        for (std::size_t i = 0; i < calls; ++i) {
            benchmark::DoNotOptimize(plain_softmax(logits, p));
            benchmark::ClobberMemory();
        }
        return std::chrono::duration<double, std::nano>(clock_type::now() - start).count();
    };
    std::size_t calls = 1;
    while (batch(calls) < 5e6 && calls < (std::size_t{1} << 20)) {
        calls *= 2;
    }
    // ~0.1 s untimed first: the first measurement of a process otherwise runs on a cold core
    // (clock ramp-up, fresh pages) and reads slower than the benchmark loops that follow.
    for (int r = 0; r < 20; ++r) {
        (void)batch(calls);
    }
    std::vector<double> per_call;
    for (int r = 0; r < 15; ++r) {
        per_call.push_back(batch(calls) / static_cast<double>(calls));
    }
    std::nth_element(per_call.begin(), per_call.begin() + 7, per_call.end());
    return cache.emplace(n, per_call[7]).first->second;
}

// The counters every case reports. ns_per_token is this case's wall time over its timed loop
// divided by the iterations (one token each); x_softmax = ns_per_token / softmax_baseline_ns(n),
// both wall-clock times from the same process, so the ratio reads "this case costs x softmax
// passes over the same logits" (plain ones, plain_softmax above). The plain pass's own case
// (plain_softmax_pass) should read close to 1: how far it is from 1 shows the noise in the ratios.
//
// x_paired is the same ratio taken against a baseline measured beside the case instead of once
// per process: after the timed loop, 15 rounds each time a batch of plain passes and then a batch
// of the case's calls (at least 8 calls and about 0.5 ms each, after one untimed call that brings
// each one's data back into the caches the other evicted) over the same logits, and x_paired is
// the median of the rounds' ratios. A shared host slows everything for minutes at a time, so a
// case timed in such a phase against a baseline timed outside it (or the other way round) reads a
// ratio that says more about the phase than about the code; the paired rounds share their phase.
// What they do not undo is a phase that slows one kind of code more than another. A chain with
// state (mirostat's mu, penalties' window) costs what its state asks for at each step: the rounds
// sample about a tenth of the steps the timed loop averages, so its two ratios may differ.
template <class Call>
void report(benchmark::State& state, std::size_t n, const std::vector<float>& logits, double loop_ns, Call&& call)
{
    const double ns = loop_ns / static_cast<double>(state.iterations());
    state.SetItemsProcessed(state.iterations());
    state.counters["ns_per_token"] = ns;
    state.counters["x_softmax"] = ns / softmax_baseline_ns(n);
    std::vector<float> p(n);
    const auto calls = static_cast<std::size_t>(std::max(8.0, 5e5 / ns));
    const auto batch_ns = [calls](auto&& one) {
        one();
        const auto start = clock_type::now();
        for (std::size_t i = 0; i < calls; ++i) {
            one();
        }
        return std::chrono::duration<double, std::nano>(clock_type::now() - start).count();
    };
    std::vector<double> ratios;
    for (int r = 0; r < 15; ++r) {
        const double base = batch_ns([&] {
            benchmark::DoNotOptimize(plain_softmax(logits, p));
            benchmark::ClobberMemory();
        });
        ratios.push_back(batch_ns(call) / base);
    }
    std::nth_element(ratios.begin(), ratios.begin() + 7, ratios.end());
    state.counters["x_paired"] = ratios[7];
}

void plain_softmax_pass(benchmark::State& state)
{
    const auto n = static_cast<std::size_t>(state.range(0));
    const std::vector<float>& logits = logits_of(n, state.range(1));
    std::vector<float> p(n);
    (void)softmax_baseline_ns(n); // outside the timed loop
    const auto start = clock_type::now();
    const auto call = [&] {
        benchmark::DoNotOptimize(plain_softmax(logits, p));
        benchmark::ClobberMemory();
    };
    for (auto _ : state) {
        call();
    }
    report(state, n, logits, std::chrono::duration<double, std::nano>(clock_type::now() - start).count(), call);
    state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(n * sizeof(float)));
}

void softmax_pass(benchmark::State& state)
{
    const auto n = static_cast<std::size_t>(state.range(0));
    const std::vector<float>& logits = logits_of(n, state.range(1));
    std::vector<float> p(n);
    std::vector<float> chunk_sums;
    (void)softmax_baseline_ns(n); // outside the timed loop
    const auto start = clock_type::now();
    const auto call = [&] {
        benchmark::DoNotOptimize(qk::sampling::softmax(logits, p, chunk_sums));
        benchmark::ClobberMemory();
    };
    for (auto _ : state) {
        call();
    }
    report(state, n, logits, std::chrono::duration<double, std::nano>(clock_type::now() - start).count(), call);
    state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(n * sizeof(float)));
}

// `warm_up` tokens are sampled (and accepted) before timing, so samplers with history start
// from a full window; each timed iteration is then one chain.sample, as a decoding loop runs it.
void chain_case(benchmark::State& state, std::string_view text, int warm_up)
{
    const auto n = static_cast<std::size_t>(state.range(0));
    const std::vector<float>& logits = logits_of(n, state.range(1));
    qk::sampling::chain chain = qk::sampling::chain::parse(text);
    for (int i = 0; i < warm_up; ++i) {
        (void)chain.sample(logits);
    }
    (void)softmax_baseline_ns(n);
    const auto start = clock_type::now();
    const auto call = [&] { benchmark::DoNotOptimize(chain.sample(logits)); };
    for (auto _ : state) {
        call();
    }
    report(state, n, logits, std::chrono::duration<double, std::nano>(clock_type::now() - start).count(), call);
    state.SetLabel(std::string(shape_name(state.range(1))) + " " + chain.describe());
}

void greedy_chain(benchmark::State& state) { chain_case(state, "greedy", 0); }
void dist_chain(benchmark::State& state) { chain_case(state, "dist(seed=42)", 0); }
// The penalty window (last_n = 64) is filled by the chain's own draws, as it would be after 64
// steps of decoding; the timed loop keeps it in that steady state.
void typical_chain_case(benchmark::State& state) { chain_case(state, typical_chain, 64); }
// Single truncations over the whole vocabulary, as APIs that default to one of them run them.
void top_p_dist(benchmark::State& state) { chain_case(state, "top_p(0.95);dist(seed=42)", 0); }
void typical_dist(benchmark::State& state) { chain_case(state, "typical(0.9);dist(seed=42)", 0); }
void top_k_4096_dist(benchmark::State& state) { chain_case(state, "top_k(4096);dist(seed=42)", 0); }
void top_n_sigma_dist(benchmark::State& state) { chain_case(state, "top_n_sigma(1);dist(seed=42)", 0); }
void min_p_dist(benchmark::State& state) { chain_case(state, "min_p(0.02);dist(seed=42)", 0); }
// xtc draws every step (probability 1); mirostat's own truncation and draw.
void xtc_dist(benchmark::State& state) { chain_case(state, "xtc(probability=1,threshold=0.1);dist(seed=42)", 0); }
void mirostat_chain(benchmark::State& state) { chain_case(state, "mirostat(tau=5,eta=0.1,seed=42)", 0); }
void mirostat_v2_chain(benchmark::State& state) { chain_case(state, "mirostat_v2(tau=5,eta=0.1,seed=42)", 0); }

void vocabularies(benchmark::internal::Benchmark* b)
{
    for (const std::int64_t s : {shape::flat, shape::normal, shape::peaky}) {
        for (const std::int64_t n : {32000, 152064, 256000}) {
            b->Args({n, s});
        }
    }
    b->ArgNames({"vocab", "shape"})->MinTime(0.2)->Unit(benchmark::kMicrosecond);
}

} // namespace

BENCHMARK(plain_softmax_pass)->Apply(vocabularies);
BENCHMARK(softmax_pass)->Apply(vocabularies);
BENCHMARK(greedy_chain)->Apply(vocabularies);
BENCHMARK(dist_chain)->Apply(vocabularies);
BENCHMARK(typical_chain_case)->Name("typical_chain")->Apply(vocabularies);
BENCHMARK(top_p_dist)->Apply(vocabularies);
BENCHMARK(typical_dist)->Apply(vocabularies);
BENCHMARK(top_k_4096_dist)->Apply(vocabularies);
BENCHMARK(top_n_sigma_dist)->Apply(vocabularies);
BENCHMARK(min_p_dist)->Apply(vocabularies);
BENCHMARK(xtc_dist)->Apply(vocabularies);
BENCHMARK(mirostat_chain)->Apply(vocabularies);
BENCHMARK(mirostat_v2_chain)->Apply(vocabularies);
