// qk::packed_matrix and qk::gemm / qk::gemv on it (kernels/packed.hpp, backends/cpu/packed_gemm.hpp),
// and the CPU context's gemm: every output equals the generic qk::dot of its row and column, bit
// for bit (the tile kernels keep the reference's float steps), for every weight format, every
// shape edge (rows around the 16-row tile, columns around the 8-column set, one block per row)
// and 1..3 threads. The SIMD tile kernels are checked against the generic one per tag in
// arch/kernels.cpp.
#include <doctest/doctest.h>

#include <qkern.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "inputs.hpp"
#include "test_support.hpp"

using namespace qk_test;
using qk::backend::cpu::thread_pool;

namespace {

constexpr std::uint32_t unwritten_bits = 0x7fc0beef;

template <class Block>
std::vector<float> dot_per_value(std::span<const Block> w, std::size_t rows, std::size_t cols, std::size_t columns, std::span<const float> x)
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    const std::size_t blocks = cols / qk::format_traits<Block>::block_size;
    std::vector<float> y(rows * columns);
    for (std::size_t c = 0; c < columns; ++c) {
        const auto a = qk::quantize<activation, qk::arch::generic>(x.subspan(c * cols, cols));
        for (std::size_t r = 0; r < rows; ++r) {
            y[c * rows + r] = qk::dot<Block, qk::arch::generic>(w.subspan(r * blocks, blocks), a);
        }
    }
    return y;
}

std::size_t bit_differences(const std::vector<float>& a, const std::vector<float>& b)
{
    REQUIRE(a.size() == b.size());
    std::size_t differences = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        differences += bits(a[i]) != bits(b[i]);
    }
    return differences;
}

template <class Block, class Arch>
void check_packed_gemm_equals_dot()
{
    constexpr std::size_t size = qk::format_traits<Block>::block_size;
    std::vector<std::unique_ptr<thread_pool>> pools;
    for (std::size_t threads : {1u, 2u, 3u}) {
        pools.push_back(std::make_unique<thread_pool>(threads));
    }
    std::vector<std::uint8_t> scratch;
    // 83 and 147 rows (6 and 10 tiles): runs of tiles per task that the mat-vec on the
    // AVX-512 VNNI tags reads in pairs, the partial last tile second in a pair or left alone.
    for (std::size_t rows : {1u, 15u, 16u, 17u, 40u, 83u, 129u, 147u}) {
        // 1, 3 and 5 blocks a row: a lone partial unit, then whole units and a partial one (units
        // are 1, 2 or 4 blocks).
        for (std::size_t cols : {size, 3 * size, 5 * size}) {
            const auto w = qk_inputs::random_blocks<Block>(rows * cols / size, static_cast<std::uint32_t>(rows * 131 + cols));
            const qk::packed_matrix<Block> packed(w, rows, cols);
            for (std::size_t columns : {1u, 2u, 3u, 7u, 8u, 9u, 15u, 16u, 17u, 40u}) {
                CAPTURE(rows);
                CAPTURE(cols);
                CAPTURE(columns);
                const auto x = normal(columns * cols, 1.0f, static_cast<std::uint32_t>(rows + 7 * cols + 1000 * columns));
                const auto expected = dot_per_value<Block>(w, rows, cols, columns, x);
                for (const auto& pool : pools) {
                    CAPTURE(pool->size());
                    std::vector<float> y(rows * columns, std::bit_cast<float>(unwritten_bits));
                    qk::gemm<Block, Arch>(packed, columns, x, y, *pool, scratch);
                    CHECK(bit_differences(y, expected) == 0);
                }
                if (columns == 1) {
                    std::vector<float> y(rows, std::bit_cast<float>(unwritten_bits));
                    qk::gemv<Block, Arch>(packed, x, y, *pools.back());
                    CHECK(bit_differences(y, expected) == 0);
                }
            }
        }
    }
}

} // namespace

// The panel's layout as packed.hpp documents it, field by field: per set of up to eight columns
// (or, for the AMX kernels, of 16 with the last set padded with zero columns) and group of 32
// values, qs, scale, the correction of all 32 qs and that of the first 16 (which the AVX-512
// NVFP4 tile kernel reads for its sub-blocks), for both activation formats.
TEST_CASE_TEMPLATE("pack_panel lays out qs, scale and both corrections as documented", Activation, qk::block_q8_0, qk::block_q8_K)
{
    constexpr std::size_t groups_per_block = qk::format_traits<Activation>::block_size / 32;
    const std::size_t blocks = std::is_same_v<Activation, qk::block_q8_0> ? 3 : 1;
    const std::size_t groups = blocks * groups_per_block;
    for (const bool pad : {false, true}) {
        const std::size_t set_columns = pad ? qk::packed_amx_set_columns : qk::packed_panel_columns;
        for (std::size_t columns : {1u, 8u, 11u, 16u, 21u}) {
            const auto a = qk_inputs::random_blocks<Activation>(blocks * columns, static_cast<std::uint32_t>(40 + columns));
            const std::size_t panel_columns = pad ? (columns + set_columns - 1) / set_columns * set_columns : columns;
            std::vector<std::uint8_t> panel(qk::packed_panel_bytes(groups, panel_columns), 0xa5);
            qk::pack_panel(a.data(), blocks, columns, panel.data(), pad);
            for (std::size_t column = 0; column < panel_columns; ++column) {
                const std::size_t c0 = column - column % set_columns;
                const std::size_t n = pad ? set_columns : std::min(set_columns, columns - c0);
                const std::size_t c = column - c0;
                for (std::size_t g = 0; g < groups; ++g) {
                    std::int8_t qs[32] = {};
                    float scale = 0.0f;
                    if (column < columns) {
                        const Activation& block = a[column * blocks + g / groups_per_block];
                        std::memcpy(qs, block.qs.data() + 32 * (g % groups_per_block), 32);
                        if constexpr (std::is_same_v<Activation, qk::block_q8_0>) {
                            scale = qk::fp16_to_fp32(block.d);
                        } else {
                            scale = block.d;
                        }
                    }
                    std::int32_t all = 0;
                    std::int32_t first = 0;
                    for (std::size_t j = 0; j < 32; ++j) {
                        all += qs[j];
                        first += j < 16 ? qs[j] : 0;
                    }
                    const std::uint8_t* entry = panel.data() + c0 * groups * qk::packed_entry_bytes + g * n * qk::packed_entry_bytes;
                    float stored_scale;
                    std::int32_t stored_all;
                    std::int32_t stored_first;
                    std::memcpy(&stored_scale, entry + 32 * n + 4 * c, 4);
                    std::memcpy(&stored_all, entry + 36 * n + 4 * c, 4);
                    std::memcpy(&stored_first, entry + 40 * n + 4 * c, 4);
                    CAPTURE(pad);
                    CAPTURE(columns);
                    CAPTURE(column);
                    CAPTURE(g);
                    CHECK(std::memcmp(entry + 32 * c, qs, 32) == 0);
                    CHECK(bits(stored_scale) == bits(scale));
                    CHECK(stored_all == -128 * all);
                    CHECK(stored_first == -128 * first);
                }
            }
        }
    }
}

// The unit layout of packed.hpp's comment, its sizes written out here: per format the blocks in a
// unit, a block's code bytes for 16 rows and a block's scale bytes. A tile's scales lie between its
// codes, one unit at a time, so that a mat-vec reads one sequential stream.
struct unit_layout {
    std::size_t blocks;
    std::size_t code_bytes;
    std::size_t scale_bytes;
};
template <class Block>
constexpr unit_layout documented_unit = std::is_same_v<Block, qk::block_q8_0>    ? unit_layout{2, 512, 32}
                                        : std::is_same_v<Block, qk::block_mxfp4>  ? unit_layout{4, 256, 16}
                                        : std::is_same_v<Block, qk::block_nvfp4>  ? unit_layout{1, 512, 64}
                                        : std::is_same_v<Block, qk::block_iq4_nl> ? unit_layout{2, 256, 32}
                                                                                  : unit_layout{2, 2048, 160};

// Random rows of two whole units and one block more (three units a tile), packed, and where in
// the packed bytes each block's unit begins by the documented layout.
template <class Block>
struct unit_sample {
    static constexpr unit_layout unit = documented_unit<Block>;
    static constexpr std::size_t unit_bytes = unit.blocks * (unit.code_bytes + unit.scale_bytes);
    static constexpr std::size_t blocks = 2 * unit.blocks + 1;

    std::vector<Block> w;
    qk::packed_matrix<Block> packed;

    unit_sample(std::size_t rows, std::uint64_t seed)
        : w(qk_inputs::random_blocks<Block>(rows * blocks, seed)), packed(w, rows, blocks * qk::format_traits<Block>::block_size)
    {
    }
    // The unit holding block b of tile t.
    [[nodiscard]] const std::uint8_t* unit_of(std::size_t t, std::size_t b) const
    {
        return packed.tile(0).bytes + t * 3 * unit_bytes + b / unit.blocks * unit_bytes;
    }
};

TEST_CASE_TEMPLATE("packed tiles keep each unit's scales after its codes", Block, qk::block_q8_0, qk::block_mxfp4, qk::block_nvfp4,
                   qk::block_iq4_nl, qk::block_iq4_xs)
{
    using sample = unit_sample<Block>;
    constexpr unit_layout unit = sample::unit;
    constexpr std::size_t unit_bytes = sample::unit_bytes;
    constexpr std::size_t blocks = sample::blocks;
    // On 17 rows: two tiles, the second mostly padding.
    const std::size_t rows = 17;
    const sample packed_sample(rows, 77);
    const auto& w = packed_sample.w;
    const auto& packed = packed_sample.packed;
    CHECK(packed.tile(1).bytes - packed.tile(0).bytes == static_cast<std::ptrdiff_t>(3 * unit_bytes));
    CHECK(packed.bytes() == 2 * 3 * unit_bytes);
    std::size_t checked = 0;
    for (std::size_t t = 0; t < 2; ++t) {
        for (std::size_t r = 0; r < 16 && 16 * t + r < rows; ++r) {
            for (std::size_t b = 0; b < blocks; ++b) {
                CAPTURE(t);
                CAPTURE(r);
                CAPTURE(b);
                const Block& block = w[(16 * t + r) * blocks + b];
                const std::uint8_t* scales = packed_sample.unit_of(t, b) + unit.blocks * unit.code_bytes + b % unit.blocks * unit.scale_bytes;
                if constexpr (std::is_same_v<Block, qk::block_mxfp4>) {
                    CHECK(scales[r] == block.e);
                } else if constexpr (std::is_same_v<Block, qk::block_nvfp4>) {
                    for (std::size_t s = 0; s < 4; ++s) {
                        CHECK(scales[16 * s + r] == block.d[s]);
                    }
                } else {
                    CHECK(std::memcmp(scales + 2 * r, &block.d, 2) == 0);
                }
                ++checked;
            }
        }
    }
    CHECK(checked == rows * blocks);
}

// Element j (0-31) of code group g of a GGUF block, written out from the formats' layouts
// (FORMATS.md): the Q8_0 value, or the 4-bit code.
template <class Block>
int gguf_element(const Block& block, std::size_t g, std::size_t j)
{
    if constexpr (std::is_same_v<Block, qk::block_q8_0>) {
        return block.qs[j];
    } else if constexpr (std::is_same_v<Block, qk::block_nvfp4>) {
        // 64 values in four 16-value sub-blocks of 8 bytes: value i of a sub-block in the low
        // nibble of byte i (i < 8), in the high nibble of byte i - 8 otherwise.
        const std::size_t value = 32 * g + j;
        const std::uint8_t byte = block.qs[8 * (value / 16) + value % 8];
        return value % 16 < 8 ? byte & 0x0f : byte >> 4;
    } else {
        // 32 values in 16 bytes (an IQ4_XS superblock: eight such groups): value j in the low nibble
        // of byte j (j < 16), in the high nibble of byte j - 16 otherwise.
        const std::uint8_t byte = block.qs[16 * g + j % 16];
        return j < 16 ? byte & 0x0f : byte >> 4;
    }
}

TEST_CASE_TEMPLATE("packed tiles place each code where packed.hpp's layout comment says", Block, qk::block_q8_0, qk::block_mxfp4,
                   qk::block_nvfp4, qk::block_iq4_nl, qk::block_iq4_xs)
{
    using sample = unit_sample<Block>;
    constexpr unit_layout unit = sample::unit;
    constexpr std::size_t groups = unit.code_bytes / (std::is_same_v<Block, qk::block_q8_0> ? 512 : 256);
    constexpr std::size_t blocks = sample::blocks;
    const std::size_t rows = 21;
    const sample packed_sample(rows, 91);
    const auto& w = packed_sample.w;
    std::size_t mismatches = 0;
    std::size_t checked = 0;
    for (std::size_t row = 0; row < rows; ++row) {
        const std::size_t t = row / 16;
        const std::size_t r = row % 16;
        for (std::size_t b = 0; b < blocks; ++b) {
            const std::uint8_t* block_codes = packed_sample.unit_of(t, b) + b % unit.blocks * unit.code_bytes;
            for (std::size_t g = 0; g < groups; ++g) {
                for (std::size_t j = 0; j < 32; ++j) {
                    const int expected = gguf_element(w[row * blocks + b], g, j);
                    int stored = 0;
                    if constexpr (std::is_same_v<Block, qk::block_q8_0>) {
                        // Vector j / 4, row r at bytes 4r .. 4r + 3, stored as value + 128.
                        stored = block_codes[512 * g + 64 * (j / 4) + 4 * r + j % 4] - 128;
                    } else {
                        // Vector j / 8: values 8m .. 8m + 3 in the low nibbles, 8m + 4 .. 8m + 7 in the high.
                        const std::uint8_t byte = block_codes[256 * g + 64 * (j / 8) + 4 * r + j % 4];
                        stored = j % 8 < 4 ? byte & 0x0f : byte >> 4;
                    }
                    mismatches += stored != expected ? 1 : 0;
                    ++checked;
                }
            }
        }
    }
    CHECK(mismatches == 0);
    CHECK(checked == rows * blocks * groups * 32);
}

TEST_CASE_TEMPLATE_DEFINE("gemm on packed weights equals the generic qk::dot of each row and column, bit for bit", Block, packed_gemm_equals_dot)
{
    SUBCASE("generic tag") { check_packed_gemm_equals_dot<Block, qk::arch::generic>(); }
    SUBCASE("native tag") { check_packed_gemm_equals_dot<Block, qk::arch::native>(); }
    SUBCASE("default tag") { check_packed_gemm_equals_dot<Block, qk::arch::default_tag>(); }
}
TEST_CASE_TEMPLATE_APPLY(packed_gemm_equals_dot, qk::weight_formats::tuple);

// Which products the AMX kernels take (packed_gemm.hpp's amx_pays): from 16 columns on for Q8_0;
// for the 4-bit formats only where at least three quarters of the 16-column sets, the last one
// padded, are real columns (24 of 32, 36 of 48, 49 of 64; not 17 or 23 of 32, nor 35 of 48).
TEST_CASE("the AMX kernels take products of 16 columns and more, the 4-bit formats only with little padding")
{
    using qk::detail::amx_pays;
    for (std::size_t columns : {1u, 8u, 15u}) {
        CAPTURE(columns);
        CHECK_FALSE(amx_pays<qk::block_q8_0>(columns));
        CHECK_FALSE(amx_pays<qk::block_iq4_xs>(columns));
    }
    for (std::size_t columns : {16u, 17u, 20u, 23u, 33u, 35u, 130u, 4097u}) {
        CAPTURE(columns);
        CHECK(amx_pays<qk::block_q8_0>(columns));
    }
    const auto four_bit = [](std::size_t columns) {
        const bool pays = amx_pays<qk::block_mxfp4>(columns);
        CHECK(amx_pays<qk::block_nvfp4>(columns) == pays);
        CHECK(amx_pays<qk::block_iq4_nl>(columns) == pays);
        CHECK(amx_pays<qk::block_iq4_xs>(columns) == pays);
        return pays;
    };
    for (std::size_t columns : {16u, 24u, 32u, 36u, 48u, 49u, 128u, 130u, 513u}) {
        CAPTURE(columns);
        CHECK(four_bit(columns));
    }
    for (std::size_t columns : {17u, 20u, 23u, 33u, 35u}) {
        CAPTURE(columns);
        CHECK_FALSE(four_bit(columns));
    }
}

// The AMX kernels (kernels/packed/amx.hpp) and the VNNI ones for the same products, through the
// driver with AMX allowed and not: both equal the generic qk::dot bit for bit. Shapes cross the
// AMX kernels' edges: 16-column sets and a padded last one (24 and 130 columns; 17 and 33 for
// Q8_0, where the 4-bit formats keep to the VNNI kernels), runs of 128 columns, chunks of 4
// code groups (7 blocks a row: a whole chunk and a partial one where blocks hold one or two
// groups, chunks inside a block for IQ4_XS; NVFP4 steps over sub-blocks), blocks of 4 tiles and
// a partial one (147 rows: 10 tiles, split between threads), partial last tiles, 1..3 threads.
// Where the process may not use AMX (qk::amx_usable), both runs take the tag's own kernels, and
// the message says so.
TEST_CASE_TEMPLATE_DEFINE("gemm on packed weights with and without AMX equals the generic qk::dot, bit for bit", Block, packed_gemm_amx)
{
    MESSAGE(std::string(qk::amx_usable() ? "AMX runs here" : "AMX is not usable here: both runs take the tag's kernels"));
    constexpr std::size_t size = qk::format_traits<Block>::block_size;
    std::vector<std::unique_ptr<thread_pool>> pools;
    for (std::size_t threads : {1u, 2u, 3u}) {
        pools.push_back(std::make_unique<thread_pool>(threads));
    }
    std::vector<std::uint8_t> scratch;
    for (std::size_t rows : {1u, 17u, 40u, 147u}) {
        for (std::size_t cols : {size, 7 * size, std::size_t{768}}) {
            const auto w = qk_inputs::random_blocks<Block>(rows * cols / size, static_cast<std::uint32_t>(rows * 17 + cols));
            const qk::packed_matrix<Block> packed(w, rows, cols);
            for (std::size_t columns : {15u, 16u, 17u, 24u, 33u, 130u}) {
                CAPTURE(rows);
                CAPTURE(cols);
                CAPTURE(columns);
                const auto x = normal(columns * cols, 1.0f, static_cast<std::uint32_t>(rows + 5 * cols + 1000 * columns));
                const auto expected = dot_per_value<Block>(w, rows, cols, columns, x);
                for (const bool amx : {false, true}) {
                    for (const auto& pool : pools) {
                        CAPTURE(amx);
                        CAPTURE(pool->size());
                        std::vector<float> y(rows * columns, std::bit_cast<float>(unwritten_bits));
                        qk::detail::packed_gemm_on<Block, qk::arch::native>(packed, columns, x, y.data(), *pool, scratch, amx);
                        CHECK(bit_differences(y, expected) == 0);
                    }
                }
            }
        }
    }
}
TEST_CASE_TEMPLATE_APPLY(packed_gemm_amx, qk::weight_formats::tuple);

TEST_CASE_TEMPLATE_DEFINE("packed gemm rejects bad shapes with a qk::error naming the values, y untouched", Block, packed_gemm_rejects)
{
    constexpr std::size_t size = qk::format_traits<Block>::block_size;
    const std::size_t rows = 5;
    const std::size_t cols = 2 * size;
    const auto w = qk_inputs::random_blocks<Block>(rows * 2, 3);
    CHECK_THROWS_WITH_AS(qk::packed_matrix<Block>(w, rows + 1, cols), doctest::Contains("w has 10 blocks"), qk::error);
    CHECK_THROWS_WITH_AS(qk::packed_matrix<Block>(w, rows, cols + 1), doctest::Contains("not a multiple of the block size"), qk::error);
    const qk::packed_matrix<Block> packed(w, rows, cols);
    thread_pool pool(2);
    const auto x = normal(3 * cols, 1.0f, 5);
    std::vector<float> y(3 * rows, std::bit_cast<float>(unwritten_bits));
    const auto untouched = [&] { return std::all_of(y.begin(), y.end(), [](float v) { return bits(v) == unwritten_bits; }); };
    CHECK_THROWS_WITH_AS(qk::gemm(packed, 0, x, y, pool), doctest::Contains("columns is 0"), qk::error);
    CHECK_THROWS_WITH_AS(qk::gemm(packed, 2, x, y, pool), doctest::Contains(("x has " + std::to_string(3 * cols) + " values").c_str()), qk::error);
    CHECK_THROWS_WITH_AS(qk::gemm(packed, 3, x, std::span<float>(y).first(3 * rows - 1), pool),
                         doctest::Contains(("y has " + std::to_string(3 * rows - 1) + " values").c_str()), qk::error);
    CHECK_THROWS_WITH_AS(qk::gemv(packed, std::span<const float>(x).first(cols - 1), std::span<float>(y).first(rows), pool),
                         doctest::Contains(("x has " + std::to_string(cols - 1) + " values but cols is " + std::to_string(cols)).c_str()), qk::error);
    auto bad = x;
    bad[cols + 3] = std::numeric_limits<float>::infinity();
    CHECK_THROWS_AS(qk::gemm(packed, 3, bad, y, pool), qk::error);
    CHECK(untouched());
}
TEST_CASE_TEMPLATE_APPLY(packed_gemm_rejects, qk::weight_formats::tuple);

// Zero columns accept any number of rows: near SIZE_MAX the tile count must not wrap, nor the
// empty tiles take forever to pack (fuzz/kernels.cpp hung on rows = 2^63 + 1), and gemm refuses a
// y that cannot have so many values.
TEST_CASE_TEMPLATE_DEFINE("packed_matrix of zero columns and rows near SIZE_MAX", Block, packed_zero_columns_huge_rows)
{
    constexpr std::size_t size_max = std::numeric_limits<std::size_t>::max();
    for (const std::size_t rows : {size_max, size_max / 2 + 1}) {
        CAPTURE(rows);
        const qk::packed_matrix<Block> packed(std::span<const Block>(), rows, 0);
        CHECK(packed.rows() == rows);
        REQUIRE(packed.tiles() == rows / qk::packed_tile_rows + (rows % qk::packed_tile_rows != 0 ? 1 : 0)); // was 0 for SIZE_MAX
        CHECK(packed.bytes() == 0);
        thread_pool pool(1);
        std::vector<float> y(4);
        CHECK_THROWS_WITH_AS(qk::gemv(packed, std::span<const float>(), y, pool), doctest::Contains("y has 4 values"), qk::error);
    }
    // Rows but no columns, with as many activation columns as the AMX kernels take: every output
    // is the empty sum, 0, on the kernels that run for them (AMX where usable) and on the tag's own.
    for (const bool amx : {false, true}) {
        CAPTURE(amx);
        thread_pool pool(2);
        const qk::packed_matrix<Block> no_columns(std::span<const Block>(), 40, 0);
        std::vector<float> y(40 * 20, std::bit_cast<float>(unwritten_bits));
        std::vector<std::uint8_t> scratch;
        qk::detail::packed_gemm_on<Block, qk::arch::native>(no_columns, 20, std::span<const float>(), y.data(), pool, scratch, amx);
        CHECK(std::count(y.begin(), y.end(), 0.0f) == static_cast<std::ptrdiff_t>(y.size()));
    }
    // No rows and no columns: any number of activation vectors matches empty x and y, and there
    // is nothing to do (this spun through 2^63 empty columns).
    thread_pool pool(2);
    const qk::packed_matrix<Block> empty(std::span<const Block>(), 0, 0);
    qk::gemm(empty, size_max / 2 + 1, std::span<const float>(), std::span<float>(), pool);
}
TEST_CASE_TEMPLATE_APPLY(packed_zero_columns_huge_rows, qk::weight_formats::tuple);

TEST_CASE_TEMPLATE_DEFINE("the CPU context's gemm owns its weights and equals qk::dot per value", Block, context_gemm_owns)
{
    constexpr std::size_t size = qk::format_traits<Block>::block_size;
    const std::size_t rows = 33;
    const std::size_t cols = 2 * size;
    const auto w = qk_inputs::random_blocks<Block>(rows * 2, 11);
    const std::size_t columns = 10;
    const auto x = normal(columns * cols, 1.0f, 12);
    for (std::size_t threads : {1u, 3u}) {
        CAPTURE(threads);
        qk::backend::cpu::context context(threads);
        std::optional<qk::backend::cpu::matrix<Block>> m;
        {
            auto copy = w; // released before the products: the context keeps its own copy
            m.emplace(context.upload<Block>(copy, rows, cols));
            std::fill(copy.begin(), copy.end(), Block{});
        }
        std::vector<float> y(rows * columns);
        context.gemm(*m, columns, x, y);
        std::vector<float> expected(rows * columns);
        if (m->is_packed()) {
            expected = dot_per_value<Block>(w, rows, cols, columns, x);
        } else {
            thread_pool pool(1);
            qk::dispatch([&]<class Tag>(Tag) { qk::gemm<Block, Tag>(w, rows, cols, columns, x, expected, pool); });
        }
        CHECK(bit_differences(y, expected) == 0);
        std::vector<float> column(rows);
        context.gemv(*m, std::span<const float>(x).subspan(cols, cols), column);
        CHECK(bit_differences(column, std::vector<float>(expected.begin() + static_cast<std::ptrdiff_t>(rows),
                                                         expected.begin() + static_cast<std::ptrdiff_t>(2 * rows))) == 0);
        std::vector<float> short_y(rows * columns - 1, std::bit_cast<float>(unwritten_bits));
        CHECK_THROWS_AS(context.gemm(*m, columns, x, short_y), qk::error);
        CHECK(std::all_of(short_y.begin(), short_y.end(), [](float v) { return bits(v) == unwritten_bits; }));
    }
}
TEST_CASE_TEMPLATE_APPLY(context_gemm_owns, qk::weight_formats::tuple);
