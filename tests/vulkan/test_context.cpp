// The two backends' contexts through one template: the same engine code compiles against
// qk::backend::cpu::context and qk::backend::vulkan::context, and their results agree (the same
// tokens, solves within their residual bound, mat-vec within the activation-quantization effect).
#include <doctest/doctest.h>

#include <backends/cpu/context.hpp>
#include <backends/vulkan/context.hpp>

#include <cmath>
#include <random>
#include <vector>

namespace {

struct step_result {
    std::vector<float> y;
    std::vector<float> x;
    std::vector<std::int32_t> tokens;
};

// An engine step written once for any backend.
template <class Context>
step_result engine_step(Context& ctx, const std::vector<qk::block_q8_0>& w, std::size_t rows, std::size_t cols,
                        const std::vector<float>& x, const std::vector<float>& a, const std::vector<float>& b, std::int64_t n,
                        std::int64_t k, const std::vector<float>& logits, std::size_t n_seq, std::size_t n_vocab)
{
    step_result r;
    const auto m = ctx.template upload<qk::block_q8_0>(w, rows, cols);
    r.y.resize(rows);
    ctx.gemv(m, x, r.y);
    r.x.resize(b.size());
    ctx.solve_tri(a.data(), b.data(), r.x.data(), n, k, 1, {.left = true, .lower = true, .unit = false});
    std::vector<qk::sampling::chain> chains;
    for (std::size_t s = 0; s < n_seq; ++s) {
        chains.push_back(qk::sampling::chain::parse("top_k(20);temp(0.9);dist(seed=" + std::to_string(s) + ")"));
    }
    const std::vector<std::uint8_t> active{1, 0, 1};
    for (int t = 0; t < 4; ++t) {
        std::vector<std::int32_t> tokens(n_seq);
        ctx.sample(logits, n_seq, n_vocab, chains, active, tokens);
        r.tokens.insert(r.tokens.end(), tokens.begin(), tokens.end());
    }
    return r;
}

} // namespace

TEST_CASE("vulkan context: one engine template on both backends")
{
    std::mt19937_64 rng(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    constexpr std::size_t rows = 33, cols = 256;
    std::vector<float> wf(rows * cols), x(cols);
    for (auto& v : wf) {
        v = normal(rng);
    }
    for (auto& v : x) {
        v = normal(rng);
    }
    const auto w = qk::quantize<qk::block_q8_0>(wf);
    constexpr std::int64_t n = 24, k = 3;
    std::vector<float> a(n * n, 0.0f), b(n * k);
    for (std::int64_t i = 0; i < n; ++i) {
        for (std::int64_t j = 0; j <= i; ++j) {
            a[i * n + j] = i == j ? 2.0f + std::abs(normal(rng)) : normal(rng) / static_cast<float>(n);
        }
    }
    for (auto& v : b) {
        v = normal(rng);
    }
    constexpr std::size_t n_seq = 3, n_vocab = 3000;
    std::vector<float> logits(n_seq * n_vocab);
    for (auto& v : logits) {
        v = 2.0f * normal(rng);
    }

    qk::backend::cpu::context cpu(2);
    qk::backend::vulkan::context gpu;
    CHECK(cpu.name() == "cpu");
    CHECK(gpu.name().rfind("vulkan: ", 0) == 0);
    const auto c = engine_step(cpu, w, rows, cols, x, a, b, n, k, logits, n_seq, n_vocab);
    const auto g = engine_step(gpu, w, rows, cols, x, a, b, n, k, logits, n_seq, n_vocab);

    CHECK(c.tokens == g.tokens);
    CHECK(std::count(g.tokens.begin(), g.tokens.end(), -1) == 4); // row 1 is inactive in each of the 4 steps
    // Solves: each within the forward-error bound 2 gamma_(n+5) cond(A) of a diagonally dominant
    // triangle (off-diagonal row sums below 1 against diagonals above 2: cond(A) below 2), so they
    // differ by at most twice that.
    double worst = 0;
    for (std::size_t i = 0; i < c.x.size(); ++i) {
        worst = std::max(worst, std::abs(static_cast<double>(c.x[i]) - g.x[i]) / (1.0 + std::abs(c.x[i])));
    }
    CHECK(worst <= 4.0 * (n + 5) * 0x1p-24 * 2.0);
    // Mat-vec: the GPU multiplies by x itself, the CPU by x quantized to Q8_0; the difference is
    // that quantization's effect (computed exactly here) plus roundings.
    std::vector<float> wd(rows * cols), xd(cols);
    qk::dequantize<qk::block_q8_0>(w, wd);
    qk::dequantize<qk::block_q8_0>(qk::quantize<qk::block_q8_0>(x), xd);
    for (std::size_t r = 0; r < rows; ++r) {
        double effect = 0, magnitude = 0;
        for (std::size_t j = 0; j < cols; ++j) {
            effect += static_cast<double>(wd[r * cols + j]) * (x[j] - xd[j]);
            magnitude += std::abs(static_cast<double>(wd[r * cols + j]) * x[j]) + std::abs(static_cast<double>(wd[r * cols + j]) * xd[j]);
        }
        CHECK(std::abs(static_cast<double>(g.y[r]) - c.y[r] - effect) <= 2.0 * (cols + 2) * 0x1p-24 * magnitude);
    }
}

TEST_CASE("vulkan context: both contexts reject bad shapes with a qk::error before anything is written")
{
    qk::backend::cpu::context cpu(1);
    qk::backend::vulkan::context gpu;
    const std::vector<qk::block_q8_0> w(4);
    CHECK_THROWS_AS((void)cpu.upload<qk::block_q8_0>(w, 3, 64), qk::error); // 4 blocks for 3 rows of 2
    CHECK_THROWS_AS((void)gpu.upload<qk::block_q8_0>(w, 3, 64), qk::error);
    std::vector<qk::sampling::chain> chains{qk::sampling::chain::parse("greedy")};
    const std::vector<float> logits(10, 0.0f);
    std::vector<std::int32_t> tokens(2, 42);
    CHECK_THROWS_WITH_AS(gpu.sample(logits, 1, 10, chains, {}, tokens), doctest::Contains("1 chains and 2 tokens for n_seq = 1"),
                         qk::error);
    CHECK_THROWS_AS(cpu.sample(logits, 1, 10, chains, {}, tokens), qk::error);
    CHECK(tokens == std::vector<std::int32_t>(2, 42));
}
