// qk::quantize over a thread pool (backends/cpu/quantize.hpp) against the one-thread qk::quantize:
// the same bytes for every format, size and thread count, and on bad input the same error, with
// nothing written.
#include <doctest/doctest.h>

#include <backends/cpu/quantize.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "inputs.hpp"
#include "test_support.hpp"

using namespace qk_test;
using qk::backend::cpu::thread_pool;

namespace {

template <class Block>
bool same_bytes(const std::vector<Block>& a, const std::vector<Block>& b)
{
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(Block)) == 0;
}

// y filled with a byte no quantizer writes everywhere, so a written block shows.
template <class Block>
std::vector<Block> sentinel_blocks(std::size_t n)
{
    std::vector<Block> y(n);
    std::memset(y.data(), 0xa5, n * sizeof(Block));
    return y;
}

template <class Block>
bool untouched(const std::vector<Block>& y)
{
    return same_bytes(y, sentinel_blocks<Block>(y.size()));
}

// The error the one-thread quantize gives for x, or "" if it gives none.
template <class Block>
std::string one_thread_error(std::span<const float> x)
{
    std::vector<Block> y(x.size() / qk::format_traits<Block>::block_size);
    try {
        qk::quantize<Block>(x, std::span<Block>(y));
    } catch (const qk::error& e) {
        return e.what();
    }
    return "";
}

} // namespace

TEST_CASE_TEMPLATE_DEFINE("quantize on a pool gives the one-thread bytes for every size and thread count", Block, pool_quantize_same_bytes)
{
    constexpr std::size_t size = qk::format_traits<Block>::block_size;
    // Sizes around the task length (65536 values): less than one task, one and a bit, many.
    for (std::size_t blocks : {std::size_t{1}, std::size_t{7}, 65536 / size + 1, 5 * 65536 / size + 3}) {
        const auto x = normal(blocks * size, 2.0f, static_cast<std::uint32_t>(blocks));
        std::vector<Block> expected(blocks);
        qk::quantize<Block>(x, std::span<Block>(expected));
        for (std::size_t threads : {1u, 2u, 3u, 7u}) {
            CAPTURE(blocks);
            CAPTURE(threads);
            thread_pool pool(threads);
            auto y = sentinel_blocks<Block>(blocks);
            qk::quantize<Block>(x, std::span<Block>(y), pool);
            CHECK(same_bytes(y, expected));
            // Every tag writes the reference's bytes, on a pool too.
            auto generic = sentinel_blocks<Block>(blocks);
            qk::quantize<Block, qk::arch::generic>(x, std::span<Block>(generic), pool);
            CHECK(same_bytes(generic, expected));
        }
    }
}
TEST_CASE_TEMPLATE_APPLY(pool_quantize_same_bytes, qk::block_formats::tuple);

TEST_CASE_TEMPLATE_DEFINE("quantize on a pool rejects what the one-thread quantize rejects, with its message, y untouched", Block,
                          pool_quantize_rejects)
{
    constexpr std::size_t size = qk::format_traits<Block>::block_size;
    const std::size_t blocks = 3 * 65536 / size + 5;
    thread_pool pool(3);
    const auto x = normal(blocks * size, 1.0f, 5);

    // A bad value in a late task and another in an earlier one: the message names the first, by
    // its index in the whole of x, as the one-thread quantize does.
    for (std::size_t bad_at : {blocks * size - 1, std::size_t{65536 + 17}}) {
        CAPTURE(bad_at);
        auto bad = x;
        bad[bad_at] = std::numeric_limits<float>::quiet_NaN();
        bad[blocks * size - 1] = std::numeric_limits<float>::infinity();
        const std::string expected = one_thread_error<Block>(bad);
        REQUIRE(!expected.empty());
        CHECK(expected.find("x[" + std::to_string(bad_at) + "]") != std::string::npos);
        auto y = sentinel_blocks<Block>(blocks);
        CHECK_THROWS_WITH_AS(qk::quantize<Block>(bad, std::span<Block>(y), pool), expected.c_str(), qk::error);
        CHECK(untouched(y));
    }

    auto y = sentinel_blocks<Block>(blocks + 1);
    CHECK_THROWS_WITH_AS(qk::quantize<Block>(x, std::span<Block>(y), pool), doctest::Contains("qk::quantize"), qk::error);
    CHECK(untouched(y));
}
TEST_CASE_TEMPLATE_APPLY(pool_quantize_rejects, qk::block_formats::tuple);

TEST_CASE_TEMPLATE("quantize with importance weights on a pool gives the one-thread bytes", Block, qk::block_iq4_nl, qk::block_iq4_xs)
{
    const std::size_t columns = 512;
    const std::size_t rows = 37;
    const auto x = normal(rows * columns, 1.0f, 31);
    auto importance = normal(columns, 1.0f, 32);
    for (auto& w : importance) {
        w = std::fabs(w);
    }
    std::vector<Block> expected(rows * columns / qk::format_traits<Block>::block_size);
    qk::quantize<Block>(x, std::span<Block>(expected), importance);
    for (std::size_t threads : {1u, 2u, 5u}) {
        CAPTURE(threads);
        thread_pool pool(threads);
        auto y = sentinel_blocks<Block>(expected.size());
        qk::quantize<Block>(x, std::span<Block>(y), importance, pool);
        CHECK(same_bytes(y, expected));
    }

    thread_pool pool(2);
    auto negative = importance;
    negative[9] = -1.0f;
    auto y = sentinel_blocks<Block>(expected.size());
    CHECK_THROWS_WITH_AS(qk::quantize<Block>(x, std::span<Block>(y), negative, pool), doctest::Contains("importance[9] is -1"), qk::error);
    CHECK(untouched(y));
}
