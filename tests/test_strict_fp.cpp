// The reference kernels give the same bits whatever the compiler's contraction setting: this file
// is built with the flags of the build (CI also builds it with -march=native -ffp-contract=fast),
// baseline.cpp with contraction off and no FMA. Inputs are large and varied so that a fused
// multiply-add anywhere in the quantizers' decisions would show up.
#include <doctest/doctest.h>

#include <cstring>

#include "baseline.hpp"
#include "test_support.hpp"

using namespace qk_test;

namespace {

constexpr std::size_t columns = 1024;
constexpr std::size_t matrix_rows = 96;

std::vector<float> varied_rows()
{
    auto x = normal(matrix_rows * columns, 1.0f, 31);
    for (std::size_t i = 0; i < x.size(); ++i) {
        // Heavy tails in every tenth row, then log-uniform magnitudes per block of 32 from 1e-6
        // to 1e4.
        if ((i / columns) % 10 == 0) {
            x[i] *= std::fabs(x[i]);
        }
        const std::size_t block = i / 32;
        x[i] *= std::pow(10.0f, static_cast<float>((block * 7919) % 101) / 10.0f - 6.0f);
    }
    return x;
}

template <class T>
std::span<const std::uint8_t> raw(std::span<const T> s)
{
    return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size_bytes()};
}

template <class Block>
std::vector<std::uint8_t> block_bytes(const std::vector<Block>& blocks)
{
    std::vector<std::uint8_t> out(blocks.size() * sizeof(Block));
    std::memcpy(out.data(), blocks.data(), out.size());
    return out;
}

} // namespace

TEST_CASE("quantizers give the same bytes with and without floating-point contraction")
{
    const auto x = varied_rows();
    auto importance = normal(columns, 1.0f, 32);
    for (auto& w : importance) {
        w = w * w + 0.05f;
    }
    for (std::size_t f = 0; f < qk::all_formats.size(); ++f) {
        qk::visit_format(qk::all_formats[f], [&]<class Block>(std::type_identity<Block>) {
            CAPTURE(qk::format_traits<Block>::name);
            const auto here = block_bytes(qk::quantize<Block>(std::span<const float>(x)));
            CHECK(here == baseline::quantize(static_cast<int>(f), x, {}));
            if constexpr (qk::importance_format<Block>) {
                std::vector<Block> weighted(here.size() / sizeof(Block));
                qk::quantize<Block>(x, std::span<Block>(weighted), importance);
                CHECK(block_bytes(weighted) == baseline::quantize(static_cast<int>(f), x, importance));
            }
        });
    }
}

TEST_CASE("generic dot products give the same bits with and without floating-point contraction")
{
    const auto x = varied_rows();
    const auto y = normal(matrix_rows * columns, 3.0f, 33);
    for (std::size_t f = 0; f < qk::all_formats.size(); ++f) {
        qk::visit_format(qk::all_formats[f], [&]<class Block>(std::type_identity<Block>) {
            if constexpr (qk::weight_format<Block>) {
                using activation = typename qk::format_traits<Block>::vec_dot_type;
                CAPTURE(qk::format_traits<Block>::name);
                const auto w = qk::quantize<Block>(std::span<const float>(x));
                const auto a = qk::quantize<activation>(std::span<const float>(y));
                const std::size_t wn = w.size() / matrix_rows;
                const std::size_t an = a.size() / matrix_rows;
                std::size_t differing = 0;
                for (std::size_t r = 0; r < matrix_rows; ++r) {
                    const auto wr = std::span<const Block>(w).subspan(r * wn, wn);
                    const auto ar = std::span<const activation>(a).subspan(r * an, an);
                    const float here = qk::dot<Block, qk::arch::generic>(wr, ar);
                    const float there = baseline::dot(static_cast<int>(f), raw(wr), raw(ar));
                    differing += bits(here) != bits(there);
                }
                CHECK(differing == 0);
            }
        });
    }
}
