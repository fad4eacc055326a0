// qk::gemv and qk::gemm against a loop of qk::dot over the rows on the same quantized activations
// (bit for bit: each output is the same kernel call), for every weight format, shape and thread
// count. The thread pool they run on has its own tests in test_thread_pool.cpp.
#include <doctest/doctest.h>

#include <backends/cpu/gemv.hpp>
#include <kernels/dispatch.hpp>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>

#include "inputs.hpp"
#include "test_support.hpp"

using namespace qk_test;
using qk::backend::cpu::thread_pool;

namespace {

constexpr std::size_t thread_counts[] = {1, 2, 3, 7}; // 7: more threads than cores and than some matrices' rows
constexpr std::size_t row_counts[] = {1, 3, 10, 64, 257}; // ascending: weights() holds the last; 10 gives tasks of 2 and 3 rows
constexpr std::size_t max_cols = 4096;

// One weight matrix per format, as large as the largest shape; smaller shapes use a prefix of
// its blocks (any whole number of rows of blocks is a matrix).
template <class Block>
const std::vector<Block>& weights()
{
    // Random blocks, not quantized ones: quantizing a 257 x 4096 matrix with the IQ4 search takes
    // about a second per format, far beyond this suite's budget.
    static const auto blocks = qk_inputs::random_blocks<Block>(row_counts[std::size(row_counts) - 1] * max_cols / qk::format_traits<Block>::block_size, 7);
    return blocks;
}

template <class Block>
std::vector<std::size_t> col_counts()
{
    constexpr std::size_t size = qk::format_traits<Block>::block_size;
    // max_cols - 3 * size: a row of whole steps of every unrolled kernel and a tail.
    return {size, 3 * size, 1024, max_cols - 3 * size, max_cols};
}

// y filled with a NaN whose bits no kernel produces, so an unwritten or rewritten value shows.
constexpr std::uint32_t sentinel_bits = 0x7fc0dead;

std::vector<float> sentinel_filled(std::size_t n)
{
    return std::vector<float>(n, std::bit_cast<float>(sentinel_bits));
}

bool all_sentinel(const std::vector<float>& y)
{
    return std::all_of(y.begin(), y.end(), [](float v) { return bits(v) == sentinel_bits; });
}

// The definition gemv must equal: x quantized on the same tag, then qk::dot per row.
template <class Block, class Arch>
std::vector<float> dot_per_row(std::span<const Block> w, std::size_t rows, std::size_t cols, std::span<const float> x)
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    const auto a = qk::quantize<activation, Arch>(x);
    const std::size_t blocks_per_row = cols / qk::format_traits<Block>::block_size;
    std::vector<float> y(rows);
#if QK_HAS_X86_KERNELS
    // Rows of 1024 values or more in the formats with split kernels on this tag (the 4-bit formats
    // on avx512vbmi, MXFP4 and NVFP4 on avx2 and sse4_2): the split kernel, on the activations as
    // split_activations lays them out (tests/arch checks it against the reference).
    if constexpr (qk::kernels::has_split_dot<Block, Arch>) {
        if (cols >= 1024) {
            using split = qk::kernels::split_activations<Block>;
            std::vector<std::byte> laid_out(split::bytes_for(blocks_per_row));
            split::lay_out(a, laid_out.data());
            for (std::size_t r = 0; r < rows; ++r) {
                y[r] = qk::kernels::dot<Arch>(w.data() + r * blocks_per_row, split{a.data(), laid_out.data()}, blocks_per_row, Arch{});
            }
            return y;
        }
    }
#endif
    for (std::size_t r = 0; r < rows; ++r) {
        y[r] = qk::dot<Block, Arch>(w.subspan(r * blocks_per_row, blocks_per_row), a);
    }
    return y;
}

std::size_t count_bit_differences(const std::vector<float>& a, const std::vector<float>& b)
{
    REQUIRE(a.size() == b.size());
    std::size_t differences = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        differences += bits(a[i]) != bits(b[i]);
    }
    return differences;
}

// One pool per thread count, each reused for every shape: reuse across calls is part of the test.
std::vector<std::unique_ptr<thread_pool>> make_pools()
{
    std::vector<std::unique_ptr<thread_pool>> pools;
    for (std::size_t threads : thread_counts) {
        pools.push_back(std::make_unique<thread_pool>(threads));
    }
    return pools;
}

template <class Block, class Arch>
void check_gemv_equals_dot_per_row()
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    const auto& all = weights<Block>();
    const auto pools = make_pools();
    std::vector<activation> scratch(qk::gemm_scratch_blocks<Block>(max_cols));
    for (std::size_t rows : row_counts) {
        for (std::size_t cols : col_counts<Block>()) {
            CAPTURE(rows);
            CAPTURE(cols);
            const std::span<const Block> w(all.data(), rows * (cols / qk::format_traits<Block>::block_size));
            const auto x = normal(cols, 1.0f, static_cast<std::uint32_t>(rows * 7919 + cols));
            const auto expected = dot_per_row<Block, Arch>(w, rows, cols, x);
            for (const auto& pool : pools) {
                CAPTURE(pool->size());
                auto y = sentinel_filled(rows);
                qk::gemv<Block, Arch>(w, rows, cols, x, y, *pool, scratch);
                CHECK(count_bit_differences(y, expected) == 0);
            }
            auto allocating = sentinel_filled(rows);
            qk::gemv<Block, Arch>(w, rows, cols, x, allocating, *pools.back());
            CHECK(count_bit_differences(allocating, expected) == 0);
        }
    }
}

template <class Block, class Arch>
void check_gemm_equals_gemv_per_column()
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    const auto& all = weights<Block>();
    const auto pools = make_pools();
    const std::size_t cols = 1024;
    for (std::size_t columns : {1u, 2u, 5u}) {
        for (std::size_t rows : {3u, 257u}) {
            CAPTURE(columns);
            CAPTURE(rows);
            const std::span<const Block> w(all.data(), rows * (cols / qk::format_traits<Block>::block_size));
            const auto x = normal(columns * cols, 1.0f, static_cast<std::uint32_t>(columns * 31 + rows));
            std::vector<float> per_column(columns * rows);
            for (std::size_t c = 0; c < columns; ++c) {
                qk::gemv<Block, Arch>(w, rows, cols, std::span<const float>(x).subspan(c * cols, cols),
                                      std::span<float>(per_column).subspan(c * rows, rows), *pools.front());
            }
            std::vector<activation> scratch(qk::gemm_scratch_blocks<Block>(cols, columns));
            for (const auto& pool : pools) {
                CAPTURE(pool->size());
                auto y = sentinel_filled(columns * rows);
                qk::gemm<Block, Arch>(w, rows, cols, columns, x, y, *pool, scratch);
                CHECK(count_bit_differences(y, per_column) == 0);
            }
            auto allocating = sentinel_filled(columns * rows);
            qk::gemm<Block, Arch>(w, rows, cols, columns, x, allocating, *pools.back());
            CHECK(count_bit_differences(allocating, per_column) == 0);
        }
    }
}

} // namespace

TEST_CASE_TEMPLATE_DEFINE("gemv equals qk::dot row by row, bit for bit, on every shape and thread count", Block, gemv_equals_dot_row_by)
{
    check_gemv_equals_dot_per_row<Block, qk::arch::native>();
    // The tag a portable binary picks at run time, which is a SIMD tag even without -march.
    std::string dispatched;
    qk::dispatch([&]<class Tag>(Tag) {
        dispatched = qk::arch::name<Tag>();
        check_gemv_equals_dot_per_row<Block, Tag>();
    });
    // The other tags this CPU runs on which gemv takes split kernels for Block (on an AVX-512 VBMI
    // machine, MXFP4's and NVFP4's on avx2 and sse4_2), so that those paths run wherever the CPU can.
    qk::for_each_runnable(qk::detect_cpu_features(), [&]<class Tag>(Tag) {
        if constexpr (qk::kernels::has_split_dot<Block, Tag>) {
            if (qk::arch::name<Tag>() != dispatched && !std::is_same_v<Tag, qk::arch::native>) {
                check_gemv_equals_dot_per_row<Block, Tag>();
            }
        }
    });
}
TEST_CASE_TEMPLATE_APPLY(gemv_equals_dot_row_by, qk::weight_formats::tuple);

TEST_CASE_TEMPLATE_DEFINE("gemv with several columns (gemm) equals gemv column by column, bit for bit", Block, gemv_several_columns_gemm_equals)
{
    check_gemm_equals_gemv_per_column<Block, qk::arch::native>();
    qk::dispatch([]<class Tag>(Tag) { check_gemm_equals_gemv_per_column<Block, Tag>(); });
}
TEST_CASE_TEMPLATE_APPLY(gemv_several_columns_gemm_equals, qk::weight_formats::tuple);

TEST_CASE("gemv on a pool reused for many calls gives the same bits every time")
{
    using Block = qk::block_q8_0;
    const std::size_t rows = 64;
    const std::size_t cols = 512;
    const std::span<const Block> w(weights<Block>().data(), rows * cols / 32);
    const auto x = normal(cols, 1.0f, 3);
    const auto expected = dot_per_row<Block, qk::arch::default_tag>(w, rows, cols, x);
    thread_pool pool(3);
    std::vector<qk::block_q8_0> scratch(qk::gemm_scratch_blocks<Block>(cols));
    std::size_t failures = 0;
    for (int call = 0; call < 200; ++call) {
        auto y = sentinel_filled(rows);
        qk::gemv<Block>(w, rows, cols, x, y, pool, scratch);
        failures += count_bit_differences(y, expected) != 0;
    }
    CHECK(failures == 0);
}

TEST_CASE("gemv edge shapes: no rows writes nothing, no columns of W gives zeros")
{
    using Block = qk::block_q8_0;
    thread_pool pool(2);
    std::vector<float> empty;
    qk::gemv<Block>(std::span<const Block>(), 0, 64, normal(64, 1.0f, 1), empty, pool);
    auto y = sentinel_filled(3);
    qk::gemv<Block>(std::span<const Block>(), 3, 0, std::span<const float>(), y, pool);
    CHECK(std::all_of(y.begin(), y.end(), [](float v) { return bits(v) == 0; }));
}

TEST_CASE_TEMPLATE_DEFINE("gemv and gemm reject bad shapes with a qk::error naming the values, y untouched", Block, gemv_gemm_reject_bad_shapes)
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    constexpr std::size_t size = qk::format_traits<Block>::block_size;
    const std::size_t rows = 3;
    const std::size_t cols = 2 * size;
    const std::string name(qk::format_traits<Block>::name);
    const std::span<const Block> w(weights<Block>().data(), rows * 2);
    const auto x = normal(2 * cols, 1.0f, 11);
    const std::span<const float> x1 = std::span<const float>(x).first(cols);
    // Activation blocks per weight block: 2 for NVFP4, 1 otherwise.
    constexpr std::size_t per = qk::activation_blocks_per_block<Block>;
    std::vector<activation> scratch(4 * per);
    thread_pool pool(2);
    auto y = sentinel_filled(2 * rows);
    const std::span<float> y1 = std::span<float>(y).first(rows);
    const std::span<activation> scratch1 = std::span<activation>(scratch).first(2 * per);

    const auto rejects = [&](auto&& call, const std::string& message) {
        CAPTURE(message);
        CHECK_THROWS_WITH_AS(call(), doctest::Contains(message.c_str()), qk::error);
        CHECK(all_sentinel(y));
    };
    rejects([&] { qk::gemv<Block>(w, rows, cols + 1, x1, y1, pool, scratch1); },
            "qk::gemv<" + name + ">: cols is " + std::to_string(cols + 1) + ", not a multiple of the block size " + std::to_string(size));
    rejects([&] { qk::gemv<Block>(w.first(5), rows, cols, x1, y1, pool, scratch1); },
            "w has 5 blocks but rows 3 x cols " + std::to_string(cols) + " make 6");
    rejects([&] { qk::gemv<Block>(w, rows, cols, x1.first(cols - 1), y1, pool, scratch1); },
            "x has " + std::to_string(cols - 1) + " values but cols is " + std::to_string(cols));
    rejects([&] { qk::gemv<Block>(w, rows, cols, x1, y1.first(2), pool, scratch1); }, "y has 2 values but rows is 3");
    rejects([&] { qk::gemv<Block>(w, rows, cols, x1, y1, pool, scratch1.first(1)); },
            "scratch has 1 " + std::string(qk::format_traits<activation>::name) + " blocks but x needs " + std::to_string(2 * per));
    rejects([&] { qk::gemv<Block>(w, std::numeric_limits<std::size_t>::max(), cols, x1, y1, pool); }, "make more than SIZE_MAX");

    rejects([&] { qk::gemm<Block>(w, rows, cols, 0, x, y, pool, scratch); }, "qk::gemm<" + name + ">: columns is 0");
    rejects([&] { qk::gemm<Block>(w, rows, cols, 2, x1, y, pool, scratch); },
            "x has " + std::to_string(cols) + " values but columns 2 x cols " + std::to_string(cols) + " make " + std::to_string(2 * cols));
    rejects([&] { qk::gemm<Block>(w, rows, cols, 2, x, y1, pool, scratch); }, "y has 3 values but columns 2 x rows 3 make 6");
    rejects([&] { qk::gemm<Block>(w, rows, cols, 2, x, y, pool, scratch1); }, "scratch has " + std::to_string(2 * per));

    // Activations that cannot be quantized are quantize's error, still before y is written.
    auto bad_x = normal(cols, 1.0f, 12);
    bad_x[cols - 1] = std::numeric_limits<float>::infinity();
    rejects([&] { qk::gemv<Block>(w, rows, cols, bad_x, y1, pool, scratch1); }, "is inf");

    // The valid call, for contrast: same arguments, y written.
    qk::gemv<Block>(w, rows, cols, x1, y1, pool, scratch1);
    CHECK(count_bit_differences(std::vector<float>(y1.begin(), y1.end()), dot_per_row<Block, qk::arch::default_tag>(w, rows, cols, x1)) == 0);
}
TEST_CASE_TEMPLATE_APPLY(gemv_gemm_reject_bad_shapes, qk::weight_formats::tuple);

// Zero cols make x empty for any number of columns: a count near SIZE_MAX is valid and must cost
// nothing (fuzz/kernels.cpp found gemm quantizing 2^63 empty columns), and with rows it is bounded
// by y, every value of which is an empty dot product.
TEST_CASE_TEMPLATE_DEFINE("gemm of zero cols and a huge column count does no work", Block, gemm_zero_cols_huge_columns)
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    thread_pool pool(2);
    const std::size_t huge = std::numeric_limits<std::size_t>::max() / 2 + 1;
    std::vector<activation> scratch;
    qk::gemm<Block>({}, 0, 0, huge, {}, {}, pool, scratch);
    qk::gemm<Block>({}, 0, 0, huge, {}, {}, pool);
    auto y = sentinel_filled(6);
    qk::gemm<Block>({}, 3, 0, 2, {}, y, pool, scratch);
    CHECK(std::all_of(y.begin(), y.end(), [](float v) { return bits(v) == 0; }));
}
TEST_CASE_TEMPLATE_APPLY(gemm_zero_cols_huge_columns, qk::weight_formats::tuple);

namespace {

// The highest tag of qk::arch::all the running CPU supports, found here from the feature checks
// alone (not through qk::dispatch, whose choice is what is tested).
std::string best_running_tag()
{
    std::string best;
    qk::arch::all::for_each([&]<class Tag>(Tag) {
        if (qk::runs<Tag>(qk::running_cpu())) {
            best = qk::arch::name<Tag>();
        }
    });
    return best;
}

} // namespace

TEST_CASE("without a tag, the entry points run the flags' tag, or in a build without -march the running CPU's best")
{
    if constexpr (std::is_same_v<qk::arch::native, qk::arch::generic> && qk::arch::all::size > 1) {
        CHECK(std::is_same_v<qk::arch::default_tag, qk::arch::runtime>);
    } else {
        CHECK(std::is_same_v<qk::arch::default_tag, qk::arch::native>);
    }
    const std::string best = best_running_tag();
    CHECK(qk::dispatched_tag_name() == best);
    MESSAGE("default tag: ", qk::arch::name<qk::arch::default_tag>(), "; the running CPU's best: ", best);
}

TEST_CASE_TEMPLATE_DEFINE("a default gemv, dot and quantize run the default tag's kernels, bit for bit", Block, default_gemv_runs_default_tag)
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    const std::size_t rows = 64;
    const std::size_t cols = max_cols;
    const std::span<const Block> w(weights<Block>().data(), rows * cols / qk::format_traits<Block>::block_size);
    const auto x = normal(cols, 1.0f, 21);
    thread_pool pool(2);

    // What the default tag resolves to, by name: the running CPU's best for the runtime tag.
    const std::string expected_tag =
        std::is_same_v<qk::arch::default_tag, qk::arch::runtime> ? best_running_tag() : qk::arch::name<qk::arch::native>();
    CAPTURE(expected_tag);
    std::vector<float> expected;
    std::vector<float> reference;
    qk::arch::all::for_each([&]<class Tag>(Tag) {
        if (expected_tag == qk::arch::name<Tag>()) {
            expected.resize(rows);
            qk::gemv<Block, Tag>(w, rows, cols, x, expected, pool);
        }
        if constexpr (std::is_same_v<Tag, qk::arch::generic>) {
            reference.resize(rows);
            qk::gemv<Block, Tag>(w, rows, cols, x, reference, pool);
        }
    });
    REQUIRE(expected.size() == rows);
    auto y = sentinel_filled(rows);
    qk::gemv<Block>(w, rows, cols, x, y, pool);
    CHECK(count_bit_differences(y, expected) == 0);
    // Where the tags' results differ at all, this also tells a default that fell back to the
    // scalar reference from one that did not.
    if (expected_tag != "generic" && count_bit_differences(expected, reference) != 0) {
        CHECK(count_bit_differences(y, reference) != 0);
    }

    // qk::dot and qk::quantize without a tag: the same kernels one row at a time.
    const auto quantized = qk::quantize<activation>(std::span<const float>(x));
    std::vector<activation> quantized_by_tag(quantized.size());
    qk::arch::all::for_each([&]<class Tag>(Tag) {
        if (expected_tag == qk::arch::name<Tag>()) {
            qk::quantize<activation, Tag>(x, std::span<activation>(quantized_by_tag));
            const std::span<const Block> row = w.first(cols / qk::format_traits<Block>::block_size);
            CHECK(bits(qk::dot<Block>(row, quantized)) == bits(qk::dot<Block, Tag>(row, quantized)));
        }
    });
    CHECK(std::memcmp(quantized.data(), quantized_by_tag.data(), quantized.size() * sizeof(activation)) == 0);
}
TEST_CASE_TEMPLATE_APPLY(default_gemv_runs_default_tag, qk::weight_formats::tuple);
