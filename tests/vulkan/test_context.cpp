// The two backends' contexts through one template (engine_step, context_tests.hpp): the same engine
// code compiles against qk::backend::cpu::context and qk::backend::vulkan::context, and their
// results agree (the same tokens, solves within their residual bound, mat-vec within the
// activation-quantization effect). test_context.cpp checks the CPU context alone against references.
#include <doctest/doctest.h>

#include <backends/cpu/context.hpp>
#include <backends/vulkan/context.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <vector>

#include "../context_tests.hpp"

using namespace qk_test;

TEST_CASE("vulkan context: one engine template on both backends")
{
    const engine_inputs in = make_engine_inputs();
    constexpr std::size_t rows = engine_inputs::rows, cols = engine_inputs::cols;
    constexpr std::int64_t n = engine_inputs::n;
    const auto& w = in.w;
    const auto& x = in.x;

    qk::backend::cpu::context cpu(2);
    qk::backend::vulkan::context gpu;
    CHECK(cpu.name() == "cpu");
    CHECK(gpu.name().rfind("vulkan: ", 0) == 0);
    const auto c = engine_step(cpu, in);
    const auto g = engine_step(gpu, in);

    CHECK(c.tokens == g.tokens);
    // gemm is gemv column by column, bit for bit, on each backend; column 0 is x itself.
    for (const auto* r : {&c, &g}) {
        REQUIRE(r->y_gemm.size() == 3 * rows);
        for (std::size_t i = 0; i < r->y_gemm.size(); ++i) {
            CHECK(std::bit_cast<std::uint32_t>(r->y_gemm[i]) == std::bit_cast<std::uint32_t>(r->y_columns[i]));
        }
        for (std::size_t i = 0; i < rows; ++i) {
            CHECK(std::bit_cast<std::uint32_t>(r->y_gemm[i]) == std::bit_cast<std::uint32_t>(r->y[i]));
        }
    }
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
    const auto cm = cpu.upload<qk::block_q8_0>(w, 2, 64);
    const auto gm = gpu.upload<qk::block_q8_0>(w, 2, 64);
    const std::vector<float> x(3 * 64, 1.0f);
    std::vector<float> y(6, 42.0f);
    CHECK_THROWS_WITH_AS(gpu.gemm(gm, 0, x, y), doctest::Contains("columns is 0"), qk::error);
    CHECK_THROWS_WITH_AS(gpu.gemm(gm, 3, x, std::span<float>(y).first(5)), doctest::Contains("y 5 for 3 columns of a 2 x 64 matrix"),
                         qk::error);
    CHECK_THROWS_AS(gpu.gemm(gm, 2, x, std::span<float>(y).first(4)), qk::error); // x holds 3 columns
    CHECK_THROWS_AS(cpu.gemm(cm, 3, x, std::span<float>(y).first(5)), qk::error);
    CHECK(y == std::vector<float>(6, 42.0f));
    std::vector<qk::sampling::chain> chains{qk::sampling::chain::parse("greedy")};
    const std::vector<float> logits(10, 0.0f);
    std::vector<std::int32_t> tokens(2, 42);
    CHECK_THROWS_WITH_AS(gpu.sample(logits, 1, 10, chains, {}, tokens), doctest::Contains("1 chains and 2 tokens for n_seq = 1"),
                         qk::error);
    CHECK_THROWS_AS(cpu.sample(logits, 1, 10, chains, {}, tokens), qk::error);
    CHECK(tokens == std::vector<std::int32_t>(2, 42));
}
