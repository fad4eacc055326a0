// A user's program, built as users build theirs: `g++ -std=c++20 -O2 -march=LEVEL -Wall -Wextra
// -Wpedantic -Werror`, only <qkern.hpp>, every entry point on its default tag. CI compiles it at
// every instruction-set level it has kernels for (.ci/run) and runs it where it can: the headers
// must stay warning-free in such builds whatever the optimizer infers once small, fixed sizes are
// inlined into the kernels, and the default tag must agree with the scalar reference there.
// Exits 1 on a wrong result.
#include <qkern.hpp>

#include <array>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace {

bool all_ok = true;

void check(bool ok, std::string_view what, std::size_t blocks)
{
    if (!ok) {
        std::printf("FAIL: %.*s with %zu blocks\n", static_cast<int>(what.size()), what.data(), blocks);
        all_ok = false;
    }
}

// Values with a spread of magnitudes and signs, the same on every platform.
template <std::size_t N>
std::array<float, N> values(std::uint32_t seed)
{
    std::array<float, N> x{};
    std::uint32_t state = seed;
    for (float& v : x) {
        state = state * 1664525u + 1013904223u;
        v = static_cast<float>(static_cast<std::int32_t>(state >> 8) % 2001 - 1000) / 250.0f;
    }
    return x;
}

// Blocks blocks of one weight format in arrays of that exact size (the case where the compiler
// knows every trip count): the default tag's dot against the reference's, within the float
// rounding bound of one term per 32 values (see examples/qk.cpp, dot_tolerance).
template <class Block, std::size_t Blocks>
void dot_fixed_size()
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    constexpr std::size_t n = Blocks * qk::format_traits<Block>::block_size;
    const std::array<float, n> w = values<n>(1 + Blocks);
    const std::array<float, n> a = values<n>(100 + Blocks);
    std::array<Block, Blocks> wq{};
    std::array<activation, n / qk::format_traits<activation>::block_size> aq{};
    qk::quantize<Block>(w, wq);
    qk::quantize<activation>(a, aq);

    std::array<float, n> w_back{};
    std::array<float, n> a_back{};
    qk::dequantize<Block>(wq, w_back);
    qk::dequantize<activation>(aq, a_back);
    double abs_sum = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
        abs_sum += std::fabs(static_cast<double>(w_back[i]) * static_cast<double>(a_back[i]));
    }
    const float best = qk::dot<Block>(wq, aq);
    const float reference = qk::dot<Block, qk::arch::generic>(wq, aq);
    const double bound = 2.0 * static_cast<double>(n / 32 + 2) * static_cast<double>(FLT_EPSILON) * abs_sum;
    check(std::fabs(static_cast<double>(best) - static_cast<double>(reference)) <= bound, qk::format_traits<Block>::name, Blocks);
}

template <class Block, std::size_t... Blocks>
void dot_sizes(std::index_sequence<Blocks...>)
{
    (dot_fixed_size<Block, Blocks + 1>(), ...);
}

// Mat-vec and solve_tri on small fixed shapes, against the same computed row by row.
void gemv_and_solve()
{
    constexpr std::size_t rows = 3;
    constexpr std::size_t cols = 96;
    const std::array<float, rows * cols> w = values<rows * cols>(7);
    const std::array<float, cols> x = values<cols>(8);
    std::array<qk::block_q8_0, rows * cols / 32> wq{};
    qk::quantize<qk::block_q8_0>(w, wq);
    std::array<float, rows> y{};
    qk::backend::cpu::thread_pool pool(2);
    qk::gemv<qk::block_q8_0>(wq, rows, cols, x, y, pool);
    std::array<qk::block_q8_0, cols / 32> xq{};
    qk::quantize<qk::block_q8_0>(x, xq);
    for (std::size_t r = 0; r < rows; ++r) {
        const float expected = qk::dot<qk::block_q8_0>(std::span<const qk::block_q8_0>(wq).subspan(r * cols / 32, cols / 32), xq);
        check(y[r] == expected, "gemv row", r);
    }

    // [2 0 0; 1 4 0; -2 2 8] X = B with X = [1 2 3]^T: every step is exact.
    const std::array<float, 9> a = {2, 0, 0, 1, 4, 0, -2, 2, 8};
    const std::array<float, 3> b = {2, 9, 26};
    std::array<float, 3> solved{};
    qk::solve_tri(a.data(), b.data(), solved.data(), 3, 1, 1);
    check(solved[0] == 1.0f && solved[1] == 2.0f && solved[2] == 3.0f, "solve_tri", 1);
}

void sampling()
{
    const std::array<float, 6> logits = {0.5f, -1.0f, 3.0f, 2.0f, 2.5f, -4.0f};
    check(qk::sampling::chain::parse("top_k(3);greedy").sample(logits) == 2, "top_k;greedy", 0);
    check(qk::sampling::chain::parse("temp(0.7);top_p(0.9);min_p(0.05);dist(seed=3)").sample(logits) >= 0, "chain", 0);
}

} // namespace

int main()
{
    dot_sizes<qk::block_q8_0>(std::make_index_sequence<9>{});
    dot_sizes<qk::block_mxfp4>(std::make_index_sequence<9>{});
    dot_sizes<qk::block_iq4_nl>(std::make_index_sequence<9>{});
    dot_sizes<qk::block_iq4_xs>(std::make_index_sequence<3>{});
    gemv_and_solve();
    sampling();
    std::printf("user program on tag %s: %s\n", qk::arch::name<qk::arch::native>(), all_ok ? "ok" : "FAILED");
    return all_ok ? 0 : 1;
}
