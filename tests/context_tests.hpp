// One engine step written once for any backend context (qk::backend::cpu::context,
// qk::backend::vulkan::context: the same members), and the fixed inputs it runs on: upload Q8_0
// weights, a mat-vec, a triangular solve and four steps of batched sampling with one sequence
// inactive. test_context.cpp runs it on the CPU context against references, vulkan/test_context.cpp
// on the Vulkan context against the CPU context.
#pragma once

#include <backends/context.hpp>
#include <kernels/formats.hpp>
#include <kernels/quantize.hpp>
#include <kernels/solve_tri.hpp>
#include <sampling/sampling.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "inputs.hpp"

namespace qk_test {

// The step's inputs, drawn from a fixed seed: W (rows x cols, Q8_0) and x for the mat-vec; a
// diagonally dominant lower triangle A (n x n, diagonals above 2, off-diagonal row sums below 1)
// and B (n x k) for the solve; logits for n_seq sequences of n_vocab tokens.
struct engine_inputs {
    static constexpr std::size_t rows = 33, cols = 256;
    static constexpr std::int64_t n = 24, k = 3;
    static constexpr std::size_t n_seq = 3, n_vocab = 3000;
    static constexpr int sampling_steps = 4;
    static constexpr qk::tri_options solve_options{.left = true, .lower = true, .unit = false};

    std::vector<qk::block_q8_0> w;
    std::vector<float> x;
    std::vector<float> a;
    std::vector<float> b;
    std::vector<float> logits;
    std::vector<std::uint8_t> active{1, 0, 1}; // sequence 1 is inactive in every step

    // Sequence s's sampler chain.
    static std::string chain(std::size_t s) { return "top_k(20);temp(0.9);dist(seed=" + std::to_string(s) + ")"; }
};

inline engine_inputs make_engine_inputs()
{
    using in = engine_inputs;
    engine_inputs r;
    std::mt19937_64 rng(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    // One engine and one distribution for every input, in this order.
    const std::vector<float> wf = qk_inputs::draws(in::rows * in::cols, normal, rng);
    r.x = qk_inputs::draws(in::cols, normal, rng);
    r.w = qk::quantize<qk::block_q8_0>(wf);
    r.a.assign(in::n * in::n, 0.0f);
    for (std::int64_t i = 0; i < in::n; ++i) {
        for (std::int64_t j = 0; j <= i; ++j) {
            r.a[i * in::n + j] = i == j ? 2.0f + std::abs(normal(rng)) : normal(rng) / static_cast<float>(in::n);
        }
    }
    r.b = qk_inputs::draws(in::n * in::k, normal, rng);
    r.logits.resize(in::n_seq * in::n_vocab);
    for (auto& v : r.logits) {
        v = 2.0f * normal(rng);
    }
    return r;
}

struct step_result {
    std::vector<float> y;             // W x: rows values
    std::vector<float> y_gemm;        // W [x, -x, 2x] by gemm: 3 x rows values
    std::vector<float> y_columns;     // the same by gemv, column by column
    std::vector<float> x;             // the solve's X: n x k values
    std::vector<std::int32_t> tokens; // n_seq tokens per sampling step, step after step
};

// An engine step written once for any backend: it uses only what qk::backend::context promises.
template <qk::backend::context Context>
step_result engine_step(Context& ctx, const engine_inputs& in)
{
    step_result r;
    const auto m = ctx.template upload<qk::block_q8_0>(in.w, in.rows, in.cols);
    r.y.resize(in.rows);
    ctx.gemv(m, in.x, r.y);
    std::vector<float> x3;
    for (const float scale : {1.0f, -1.0f, 2.0f}) {
        for (const float v : in.x) {
            x3.push_back(scale * v);
        }
    }
    r.y_gemm.resize(3 * in.rows);
    ctx.gemm(m, 3, x3, r.y_gemm);
    r.y_columns.resize(3 * in.rows);
    for (std::size_t c = 0; c < 3; ++c) {
        ctx.gemv(m, std::span<const float>(x3).subspan(c * in.cols, in.cols), std::span<float>(r.y_columns).subspan(c * in.rows, in.rows));
    }
    r.x.resize(in.b.size());
    ctx.solve_tri(in.a.data(), in.b.data(), r.x.data(), in.n, in.k, 1, in.solve_options);
    std::vector<qk::sampling::chain> chains;
    for (std::size_t s = 0; s < in.n_seq; ++s) {
        chains.push_back(qk::sampling::chain::parse(engine_inputs::chain(s)));
    }
    for (int t = 0; t < in.sampling_steps; ++t) {
        std::vector<std::int32_t> tokens(in.n_seq);
        ctx.sample(in.logits, in.n_seq, in.n_vocab, chains, in.active, tokens);
        r.tokens.insert(r.tokens.end(), tokens.begin(), tokens.end());
    }
    return r;
}

} // namespace qk_test
