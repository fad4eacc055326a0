// qk::backend::cpu::context through the engine template that vulkan/test_context.cpp runs on the
// Vulkan context (context_tests.hpp), checked here against references so that a build without
// Vulkan tests it too: on 1, 2 and 3 threads the mat-vec is W times x quantized to Q8_0 within the
// dot product's rounding bound, the solve within substitution's error bounds
// (solve_tri_reference.hpp), the tokens those of each sequence's chain run alone on its row, and
// every thread count gives the same bits; a bad shape is a qk::error before anything is written.
#include <doctest/doctest.h>

#include <backends/cpu/context.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "context_tests.hpp"
#include "solve_tri_reference.hpp"
#include "test_support.hpp"

using namespace qk_test;

namespace {

// The tokens of the engine step's sampling, one chain per sequence run on its own row: what
// qk::sampling::sample_batch is defined to give, step after step, -1 for an inactive sequence.
std::vector<std::int32_t> reference_tokens(const engine_inputs& in)
{
    std::vector<qk::sampling::chain> chains;
    for (std::size_t s = 0; s < in.n_seq; ++s) {
        chains.push_back(qk::sampling::chain::parse(engine_inputs::chain(s)));
    }
    std::vector<std::int32_t> tokens;
    for (int t = 0; t < in.sampling_steps; ++t) {
        for (std::size_t s = 0; s < in.n_seq; ++s) {
            const std::span<const float> row = std::span<const float>(in.logits).subspan(s * in.n_vocab, in.n_vocab);
            tokens.push_back(in.active[s] != 0 ? chains[s].sample(row) : -1);
        }
    }
    return tokens;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b)
{
    if (a.size() != b.size()) {
        return false;
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (bits(a[i]) != bits(b[i])) {
            return false;
        }
    }
    return true;
}

} // namespace

TEST_CASE("cpu context: the engine template on 1, 2 and 3 threads, against the references")
{
    const engine_inputs in = make_engine_inputs();
    constexpr std::size_t rows = engine_inputs::rows, cols = engine_inputs::cols;

    // Mat-vec: the CPU context multiplies W by x quantized to Q8_0 (qk::gemv). The exact product of
    // the dequantized values is computed in double (each product of two of them is exact in double,
    // and cols additions lose far less than the float bound below). Whatever order and blocking a
    // tag's kernel uses, its result is a float dot product of cols terms (Higham, thm. 3.1: within
    // gamma_cols of the sum of the terms' magnitudes) with two more roundings per term at most (the
    // two scales' product, and its product with the block's exact integer sum): gamma_(cols+2).
    std::vector<float> wd(rows * cols), xd(cols);
    qk::dequantize<qk::block_q8_0>(in.w, wd);
    qk::dequantize<qk::block_q8_0>(qk::quantize<qk::block_q8_0>(in.x), xd);
    const double u = 0x1p-24;
    const double gamma = (cols + 2) * u / (1 - (cols + 2) * u);
    std::vector<double> exact(rows), magnitude(rows);
    for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t j = 0; j < cols; ++j) {
            const double term = static_cast<double>(wd[r * cols + j]) * xd[j];
            exact[r] += term;
            magnitude[r] += std::abs(term);
        }
    }
    const auto tokens = reference_tokens(in);

    std::vector<step_result> results;
    results.reserve(3);
    for (const std::size_t threads : {1u, 2u, 3u}) {
        CAPTURE(threads);
        qk::backend::cpu::context cpu(threads);
        CHECK(cpu.name() == "cpu");
        CHECK(cpu.pool().size() == threads);
        const auto& r = results.emplace_back(engine_step(cpu, in));

        REQUIRE(r.y.size() == rows);
        for (std::size_t i = 0; i < rows; ++i) {
            CAPTURE(i);
            CHECK(std::abs(static_cast<double>(r.y[i]) - exact[i]) <= gamma * magnitude[i]);
        }
        CHECK(check_solution(in.a.data(), in.b.data(), r.x.data(), static_cast<std::size_t>(in.n), static_cast<std::size_t>(in.k),
                             in.solve_options) == static_cast<std::size_t>(in.n * in.k));
        CHECK(r.tokens == tokens);

        // gemm is gemv column by column, bit for bit; its column 0 is x itself.
        CHECK(same_bits(r.y_gemm, r.y_columns));
        CHECK(same_bits(std::vector<float>(r.y_gemm.begin(), r.y_gemm.begin() + static_cast<std::ptrdiff_t>(rows)), r.y));

        // The pool only spreads rows, tasks and sequences over threads: the same bits on any count.
        CHECK(same_bits(r.y, results.front().y));
        CHECK(same_bits(r.y_gemm, results.front().y_gemm));
        CHECK(same_bits(r.x, results.front().x));
    }
}

TEST_CASE("cpu context: bad shapes are a qk::error before anything is written")
{
    qk::backend::cpu::context cpu(2);
    const std::vector<qk::block_q8_0> w(4);
    CHECK_THROWS_AS((void)cpu.upload<qk::block_q8_0>(w, 3, 64), qk::error); // 4 blocks for 3 rows of 2

    const auto m = cpu.upload<qk::block_q8_0>(w, 2, 64);
    const std::vector<float> x(64, 1.0f);
    std::vector<float> y(3, 42.0f);
    CHECK_THROWS_AS(cpu.gemv(m, std::span<const float>(x).first(63), std::span<float>(y).first(2)), qk::error);
    CHECK_THROWS_AS(cpu.gemv(m, x, y), qk::error); // 3 values of y for 2 rows
    CHECK(y == std::vector<float>(3, 42.0f));

    std::vector<qk::sampling::chain> chains{qk::sampling::chain::parse("greedy")};
    const std::vector<float> logits(10, 0.0f);
    std::vector<std::int32_t> tokens(2, 42);
    CHECK_THROWS_AS(cpu.sample(logits, 1, 10, chains, {}, tokens), qk::error);
    CHECK(tokens == std::vector<std::int32_t>(2, 42));
}
