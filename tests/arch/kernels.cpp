// Every kernel of one architecture tag (QK_TEST_TAG, set by tests/CMakeLists.txt together with the
// tag's compiler flags) against the generic reference on the same inputs: integer inner sums
// exact, float results within a tolerance derived from the block scales, activation quantizers
// byte-identical, for lengths from one block up and for unaligned starting addresses.
#include <doctest/doctest.h>

#include <qkern.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "../inputs.hpp"

namespace {

using tag = qk::arch::QK_TEST_TAG;

using qk_inputs::normal;

// A copy of `blocks` starting `offset` units of the block's own alignment past a 64-byte boundary,
// so kernels meet every placement relative to vector registers that a GGUF file mapped into
// memory can give them (the blocks' members stay naturally aligned, as in a file).
template <class Block>
class unaligned_copy {
public:
    unaligned_copy(const std::vector<Block>& blocks, std::size_t offset)
        : storage_(new std::uint8_t[blocks.size() * sizeof(Block) + 64 * alignof(Block) + 64]),
          data_(aligned_start() + offset * alignof(Block)), size_(blocks.size())
    {
        std::memcpy(data_, blocks.data(), blocks.size() * sizeof(Block));
    }
    std::span<const Block> span() const { return {reinterpret_cast<const Block*>(data_), size_}; }

private:
    std::uint8_t* aligned_start() const
    {
        const auto address = reinterpret_cast<std::uintptr_t>(storage_.get());
        return storage_.get() + (64 - address % 64) % 64;
    }

    std::unique_ptr<std::uint8_t[]> storage_;
    std::uint8_t* data_;
    std::size_t size_;
};

// Lengths in blocks: every count up to 9, then sizes that leave every remainder of an unrolled
// loop.
const std::size_t lengths[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 127, 128, 129};

// Sum over the rows of |w_i * a_i| after decoding: it bounds every block term |d * sumi| and
// every partial sum, so float summation in any order with fused or unfused products stays within
// (terms + 4) * 2^-24 of it per rounding; twice that covers two different orders.
template <class Block, class Activation>
double magnitude(std::span<const Block> w, std::span<const Activation> a)
{
    std::vector<float> wf(w.size() * qk::format_traits<Block>::block_size);
    std::vector<float> af(wf.size());
    qk::dequantize<Block>(w, wf);
    qk::dequantize<Activation>(a, af);
    double sum = 0;
    for (std::size_t i = 0; i < wf.size(); ++i) {
        sum += std::fabs(static_cast<double>(wf[i]) * af[i]);
    }
    return sum;
}

// Mat-vec's kernels for the 4-bit formats' rows on avx512vbmi (and its children) and for MXFP4's
// and NVFP4's on avx2 and sse4_2, on activations laid out by split_activations: checked as qk::dot
// is, at every length and placement.
template <class Block>
constexpr bool has_split_kernel = qk::kernels::has_split_dot<Block, tag>;

// The split kernel's result, its layout `offset` bytes past a 64-byte boundary.
template <class Block>
float split_dot(std::span<const Block> w, std::span<const typename qk::format_traits<Block>::vec_dot_type> a, std::size_t offset)
{
#if QK_HAS_X86_KERNELS
    if constexpr (has_split_kernel<Block>) {
        using split = qk::kernels::split_activations<Block>;
        std::vector<std::byte> storage(split::bytes_for(w.size()) + 64 + offset);
        const auto address = reinterpret_cast<std::uintptr_t>(storage.data());
        std::byte* layout = storage.data() + (64 - address % 64) % 64 + offset;
        split::lay_out(a, layout);
        return qk::kernels::dot<tag>(w.data(), split{a.data(), layout}, w.size(), tag{});
    }
    (void)w, (void)a, (void)offset;
#else
    (void)w, (void)a, (void)offset;
#endif
    // No split kernel on this tag: callers do not ask for it.
    FAIL("split_dot on a tag without split kernels");
    return 0.0f;
}

template <class Block>
void check_dot_against_generic()
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    constexpr std::size_t size = qk::format_traits<Block>::block_size;
    for (std::size_t n : lengths) {
        const auto w = qk::quantize<Block, qk::arch::generic>(std::span<const float>(normal(n * size, 0.05f, static_cast<std::uint32_t>(n))));
        const auto a = qk::quantize<activation, qk::arch::generic>(
            std::span<const float>(normal(n * size, 2.0f, static_cast<std::uint32_t>(1000 + n))));
        const float reference = qk::dot<Block, qk::arch::generic>(w, a);
        // The block terms: one per 32 values, one per 16-value sub-block for NVFP4.
        const double groups = static_cast<double>(n * size / (std::is_same_v<Block, qk::block_nvfp4> ? 16 : 32));
        const double tolerance = 2.0 * (groups + 4.0) * 0x1p-24 * magnitude<Block, activation>(w, a);
        for (std::size_t offset : {0u, 1u, 3u, 17u}) {
            const unaligned_copy<Block> wu(w, offset);
            const unaligned_copy<activation> au(a, (offset * 7) % 32);
            const float simd = qk::dot<Block, tag>(wu.span(), au.span());
            CAPTURE(n);
            CAPTURE(offset);
            CAPTURE(reference);
            CAPTURE(simd);
            CHECK(std::fabs(static_cast<double>(simd) - reference) <= tolerance);
            if constexpr (has_split_kernel<Block>) {
                const float split = split_dot<Block>(wu.span(), au.span(), offset);
                CAPTURE(split);
                CHECK(std::fabs(static_cast<double>(split) - reference) <= tolerance);
            }
        }
    }
}

// With every scale 1 each block term is its integer sum, and totals below 2^24 are exact in
// float: any order of summation must then give exactly the integer total.
template <class Block>
void check_exact_integer_sums()
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    constexpr std::size_t size = qk::format_traits<Block>::block_size;
    std::mt19937 rng(7);
    for (std::size_t n : lengths) {
        std::vector<Block> w(n);
        std::vector<activation> a(n * qk::activation_blocks_per_block<Block>);
        for (std::size_t b = 0; b < n; ++b) {
            // Random bytes for codes and scales' bit fields, then unit scales.
            auto* wb = reinterpret_cast<std::uint8_t*>(&w[b]);
            for (std::size_t i = 0; i < sizeof(Block); ++i) {
                wb[i] = static_cast<std::uint8_t>(rng());
            }
            if constexpr (std::is_same_v<Block, qk::block_mxfp4>) {
                w[b].e = 128; // e8m0_half(128) = 1
            } else if constexpr (std::is_same_v<Block, qk::block_nvfp4>) {
                w[b].d.fill(0x40); // ue4m3_half(0x40) = 1
            } else {
                w[b].d = qk::fp32_to_fp16(1.0f);
            }
            if constexpr (std::is_same_v<Block, qk::block_iq4_xs>) {
                // Group multipliers ls - 32 in [-4, 3], keeping the totals below 2^24.
                w[b].scales_h = 0;
                for (int g = 0; g < 8; ++g) {
                    const int ls = 28 + static_cast<int>(rng() % 8);
                    auto& low = w[b].scales_l[static_cast<std::size_t>(g / 2)];
                    low = static_cast<std::uint8_t>(g % 2 == 0 ? (ls & 0xf) : (low | ((ls & 0xf) << 4)));
                    w[b].scales_h = static_cast<std::uint16_t>(w[b].scales_h | ((ls >> 4) << (2 * g)));
                }
            }
        }
        for (std::size_t b = 0; b < a.size(); ++b) {
            auto* ab = reinterpret_cast<std::uint8_t*>(&a[b]);
            for (std::size_t i = 0; i < sizeof(activation); ++i) {
                ab[i] = static_cast<std::uint8_t>(rng());
            }
            // Activations in [-31, 31] (the extremes of int8 are covered by the quantizer tests),
            // so that even 129 blocks stay exact in float.
            for (auto& q : a[b].qs) {
                q = static_cast<std::int8_t>(q % 32);
            }
            if constexpr (std::is_same_v<activation, qk::block_q8_K>) {
                a[b].d = 1.0f;
            } else {
                a[b].d = qk::fp32_to_fp16(1.0f);
            }
        }
        // The exact total, from the decoded values (all small integers here).
        std::vector<float> wf(n * size);
        std::vector<float> af(n * size);
        qk::dequantize<Block>(w, wf);
        qk::dequantize<activation>(a, af);
        std::int64_t exact = 0;
        for (std::size_t i = 0; i < wf.size(); ++i) {
            exact += static_cast<std::int64_t>(wf[i]) * static_cast<std::int64_t>(af[i]);
        }
        REQUIRE(std::llabs(exact) < (1 << 24));
        CAPTURE(n);
        CHECK(static_cast<std::int64_t>(qk::dot<Block, tag>(w, a)) == exact);
        CHECK(qk::dot<Block, tag>(w, a) == static_cast<float>(exact));
        if constexpr (has_split_kernel<Block>) {
            CHECK(split_dot<Block>(w, a, 0) == static_cast<float>(exact));
        }
    }
}

template <class Block>
void check_quantizer_bytes()
{
    constexpr std::size_t size = qk::format_traits<Block>::block_size;
    for (std::size_t n : lengths) {
        // Varied magnitudes per block, an all-zero block, exact ties for rounding.
        auto x = normal(n * size, 1.0f, static_cast<std::uint32_t>(50 + n));
        for (std::size_t i = 0; i < x.size(); ++i) {
            x[i] *= std::pow(10.0f, static_cast<float>((i / size) % 9) - 4.0f);
        }
        if (n > 2) {
            std::fill(x.begin() + size, x.begin() + 2 * size, 0.0f);
            for (std::size_t j = 0; j < size; ++j) {
                x[2 * size + j] = static_cast<float>(static_cast<int>(j % 9) - 4) * 0.5f; // halves: rounding ties
            }
        }
        const auto expected = qk::quantize<Block, qk::arch::generic>(std::span<const float>(x));
        for (std::size_t offset : {0u, 1u, 2u, 3u}) {
            std::vector<float> shifted(x.size() + offset);
            std::copy(x.begin(), x.end(), shifted.begin() + static_cast<std::ptrdiff_t>(offset));
            std::vector<Block> actual(n);
            qk::quantize<Block, tag>(std::span<const float>(shifted).subspan(offset), std::span<Block>(actual));
            CAPTURE(n);
            CAPTURE(offset);
            CHECK(std::memcmp(actual.data(), expected.data(), n * sizeof(Block)) == 0);
        }
    }
}

// One block of each quantizer edge case, placed after `before` ordinary blocks so that the cases
// land at every position of a kernel's group of blocks: the largest magnitude reached by +m and
// by -m in both orders (Q8_K keeps the first), +0 and -0 only, a single nonzero value, subnormals
// only (scales that underflow: all-zero blocks), |x| <= 2^-121 (Q8_0's 1/d between 2^127 and
// 2^128, still finite), exact rounding ties (Q8_0 half away from zero, Q8_K half to even), and
// for Q8_K, whose float scale takes any finite input, values near the float maximum.
template <class Block>
std::vector<float> edge_blocks(std::size_t before, std::uint32_t seed)
{
    constexpr std::size_t size = qk::format_traits<Block>::block_size;
    constexpr bool is_q8_K = std::is_same_v<Block, qk::block_q8_K>;
    std::vector<float> x = normal(before * size, 1.0f, seed);
    const auto add = [&x](auto value) {
        for (std::size_t j = 0; j < size; ++j) {
            x.push_back(value(j));
        }
    };
    const auto quarters = [](std::size_t j) { return 0.25f * static_cast<float>(j % 5) - 0.5f; };
    add([&](std::size_t j) { return j == 3 ? 2.0f : j == size - 2 ? -2.0f : quarters(j); });
    add([&](std::size_t j) { return j == 3 ? -2.0f : j == size - 2 ? 2.0f : quarters(j); });
    add([](std::size_t j) { return j == 0 ? -3.0f : j == 1 ? 3.0f : 0.0f; });
    add([](std::size_t j) { return j % 2 == 0 ? 0.0f : -0.0f; });
    add([](std::size_t j) { return j == 5 ? -1e-3f : 0.0f; });
    add([](std::size_t j) { return std::ldexp(static_cast<float>(static_cast<int>(j % 7) - 3), -149 + static_cast<int>(j % 20)); });
    add([](std::size_t j) { return std::ldexp(static_cast<float>(static_cast<int>(j % 33) - 16), -125); });
    add([](std::size_t j) { return std::ldexp(static_cast<float>(static_cast<int>(j % 33) - 16), -127); });
    // Ties: the scale maps 127 (Q8_0) or -127 (Q8_K) to a unit step, so x.5 values are exact ties.
    add([](std::size_t j) { return j == 0 ? (is_q8_K ? -127.0f : 127.0f) : static_cast<float>(static_cast<int>(j % 41) - 20) + 0.5f; });
    if constexpr (is_q8_K) {
        add([](std::size_t j) { return (j % 2 == 0 ? 1.0f : -1.0f) * 0x1.fffffep127f / static_cast<float>(1 + j % 3); });
    }
    return x;
}

template <class Block>
void check_quantizer_edges()
{
    for (std::size_t before = 0; before < 9; ++before) {
        const auto x = edge_blocks<Block>(before, static_cast<std::uint32_t>(300 + before));
        const auto expected = qk::quantize<Block, qk::arch::generic>(std::span<const float>(x));
        for (std::size_t offset : {0u, 1u, 3u}) {
            std::vector<float> shifted(x.size() + offset);
            std::copy(x.begin(), x.end(), shifted.begin() + static_cast<std::ptrdiff_t>(offset));
            std::vector<Block> actual(expected.size());
            qk::quantize<Block, tag>(std::span<const float>(shifted).subspan(offset), std::span<Block>(actual));
            for (std::size_t b = 0; b < expected.size(); ++b) {
                CAPTURE(before);
                CAPTURE(offset);
                CAPTURE(b);
                CHECK(std::memcmp(&actual[b], &expected[b], sizeof(Block)) == 0);
            }
        }
    }
}

// The kernels' integer extremes. Negative: every weight of the largest negative value the format
// has (Q8_0's -128, the grids' -12 and -127) against activations of -127, so that every product
// is the largest positive one and every sum of products as large as it gets (the AVX2 kernel's
// int16 pair sums, and MXFP4's int16 group sums, at their limits). Positive: the largest positive
// weight (127, 12, 113) against activations of 127, the limits of the AVX2 kernel's int16 sums of
// weights biased into [0, 24] (packed/avx2.hpp's biased_weights).
enum class extremes { none, negative, positive };

template <class Block>
void make_extreme(Block& w, extremes kind)
{
    const bool negative = kind == extremes::negative;
    if constexpr (std::is_same_v<Block, qk::block_q8_0>) {
        w.qs.fill(negative ? -128 : 127);
    } else if constexpr (std::is_same_v<Block, qk::block_mxfp4> || std::is_same_v<Block, qk::block_nvfp4>) {
        w.qs.fill(negative ? 0xff : 0x77); // code 15 is -12, code 7 is 12
    } else {
        w.qs.fill(negative ? 0x00 : 0xff); // code 0 is -127, code 15 is 113
    }
}

// An activation value: random ones clamped to [-127, 127] (the range of the quantizers that fill
// a panel), or the extreme that goes with the weights'.
std::int8_t extreme_activation(std::int8_t random, extremes kind)
{
    switch (kind) {
    case extremes::negative: return -127;
    case extremes::positive: return 127;
    default: return static_cast<std::int8_t>(std::max<int>(random, -127));
    }
}

// The tile kernel over packed weights against the generic one, bit for bit: every row count of a
// tile, every column count of a set, one to three blocks per row, random blocks (Q8_K's bsums
// random too, which the kernels must not trust; activations in [-127, 127], the range of the
// quantizers that fill a panel), the integer extremes, and y strided with sentinels between the
// columns.
template <class Block>
void check_tile_product_against_generic()
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    constexpr std::size_t size = qk::format_traits<Block>::block_size;
    constexpr std::uint32_t sentinel = 0x7fc0beef;
    for (const extremes extreme : {extremes::none, extremes::negative, extremes::positive}) {
        // Up to 5 blocks a row: a second packed unit, whole or partial, for every format.
        for (const std::size_t blocks : {1u, 2u, 3u, 5u}) {
            for (std::size_t rows = 1; rows <= qk::packed_tile_rows; ++rows) {
                auto w = qk_inputs::random_blocks<Block>(rows * blocks, static_cast<std::uint32_t>(rows * 17 + blocks));
                if (extreme != extremes::none) {
                    std::for_each(w.begin(), w.end(), [&](Block& block) { make_extreme(block, extreme); });
                }
                const qk::packed_matrix<Block> packed(w, rows, blocks * size);
                // NVFP4's blocks pair with two activation blocks each.
                const std::size_t a_blocks = blocks * qk::activation_blocks_per_block<Block>;
                for (std::size_t n = 1; n <= qk::packed_panel_columns; ++n) {
                    auto a = qk_inputs::random_blocks<activation>(n * a_blocks, static_cast<std::uint32_t>(n * 101 + rows));
                    for (auto& block : a) {
                        for (auto& q : block.qs) {
                            q = extreme_activation(q, extreme);
                        }
                    }
                    const std::size_t groups = blocks * size / 32;
                    std::vector<std::uint8_t> panel(qk::packed_panel_bytes(groups, n));
                    qk::pack_panel(a.data(), a_blocks, n, panel.data());
                    const std::size_t stride = rows + 3;
                    std::vector<float> expected(n * stride, std::bit_cast<float>(sentinel));
                    std::vector<float> actual(n * stride, std::bit_cast<float>(sentinel));
                    qk::kernels::tile_product<qk::arch::generic>(packed.tile(0), panel.data(), n, expected.data(), stride, rows,
                                                                  qk::arch::generic{});
                    qk::kernels::tile_product<tag>(packed.tile(0), panel.data(), n, actual.data(), stride, rows, tag{});
                    for (std::size_t i = 0; i < expected.size(); ++i) {
                        CAPTURE(static_cast<int>(extreme));
                        CAPTURE(blocks);
                        CAPTURE(rows);
                        CAPTURE(n);
                        CAPTURE(i);
                        CHECK(std::bit_cast<std::uint32_t>(actual[i]) == std::bit_cast<std::uint32_t>(expected[i]));
                    }
                }
            }
        }
    }
}

// The two-tile mat-vec kernel against the generic tile kernel on each tile, bit for bit: a whole
// first tile, every row count of the second, one to five blocks per row, random and extreme
// blocks, sentinels after each tile's outputs.
template <class Block>
void check_tile_pair_against_generic()
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    constexpr std::size_t size = qk::format_traits<Block>::block_size;
    constexpr std::size_t tile_rows = qk::packed_tile_rows;
    constexpr std::uint32_t sentinel = 0x7fc0beef;
    for (const extremes extreme : {extremes::none, extremes::negative, extremes::positive}) {
        for (const std::size_t blocks : {1u, 2u, 3u, 5u}) {
            for (std::size_t rows = 1; rows <= tile_rows; ++rows) {
                const std::size_t all_rows = tile_rows + rows;
                auto w = qk_inputs::random_blocks<Block>(all_rows * blocks, static_cast<std::uint32_t>(rows * 29 + blocks));
                if (extreme != extremes::none) {
                    std::for_each(w.begin(), w.end(), [&](Block& block) { make_extreme(block, extreme); });
                }
                const qk::packed_matrix<Block> packed(w, all_rows, blocks * size);
                const std::size_t a_blocks = blocks * qk::activation_blocks_per_block<Block>;
                auto a = qk_inputs::random_blocks<activation>(a_blocks, static_cast<std::uint32_t>(rows * 7 + blocks));
                for (auto& block : a) {
                    for (auto& q : block.qs) {
                        q = extreme_activation(q, extreme);
                    }
                }
                std::vector<std::uint8_t> panel(qk::packed_panel_bytes(blocks * size / 32, 1));
                qk::pack_panel(a.data(), a_blocks, 1, panel.data());
                // Each tile's outputs followed by 3 sentinels.
                std::vector<float> expected(2 * (tile_rows + 3), std::bit_cast<float>(sentinel));
                std::vector<float> actual(expected);
                float* const expected_second = expected.data() + tile_rows + 3;
                float* const actual_second = actual.data() + tile_rows + 3;
                qk::kernels::tile_product<qk::arch::generic>(packed.tile(0), panel.data(), 1, expected.data(), tile_rows, tile_rows,
                                                              qk::arch::generic{});
                qk::kernels::tile_product<qk::arch::generic>(packed.tile(1), panel.data(), 1, expected_second, tile_rows, rows,
                                                              qk::arch::generic{});
                qk::kernels::tile_pair_product<tag>(packed.tile(0), packed.tile(1), panel.data(), actual.data(), actual_second, rows, tag{});
                for (std::size_t i = 0; i < expected.size(); ++i) {
                    CAPTURE(static_cast<int>(extreme));
                    CAPTURE(blocks);
                    CAPTURE(rows);
                    CAPTURE(i);
                    CHECK(std::bit_cast<std::uint32_t>(actual[i]) == std::bit_cast<std::uint32_t>(expected[i]));
                }
            }
        }
    }
}

} // namespace

#define QK_TAG_NAME_STRING(x) #x
#define QK_TAG_NAME(x) QK_TAG_NAME_STRING(x)

TEST_CASE_TEMPLATE_DEFINE("dot on " QK_TAG_NAME(QK_TEST_TAG) " agrees with the generic reference", Block, dot_agrees_generic_reference)
{
    check_dot_against_generic<Block>();
}
TEST_CASE_TEMPLATE_APPLY(dot_agrees_generic_reference, qk::weight_formats::tuple);

TEST_CASE_TEMPLATE_DEFINE("the tile kernel on " QK_TAG_NAME(QK_TEST_TAG) " equals the generic one bit for bit", Block, tile_product_agrees)
{
    check_tile_product_against_generic<Block>();
}
TEST_CASE_TEMPLATE_APPLY(tile_product_agrees, qk::weight_formats::tuple);

TEST_CASE_TEMPLATE_DEFINE("the two-tile mat-vec kernel on " QK_TAG_NAME(QK_TEST_TAG) " equals the generic tile kernel bit for bit", Block,
                          tile_pair_agrees)
{
    check_tile_pair_against_generic<Block>();
}
TEST_CASE_TEMPLATE_APPLY(tile_pair_agrees, qk::weight_formats::tuple);

TEST_CASE_TEMPLATE_DEFINE("dot on " QK_TAG_NAME(QK_TEST_TAG) " sums integers exactly", Block, dot_sums_integers_exactly)
{
    check_exact_integer_sums<Block>();
}
TEST_CASE_TEMPLATE_APPLY(dot_sums_integers_exactly, qk::weight_formats::tuple);

#if QK_HAS_X86_KERNELS
// The SSE4.2 kernels (dot and tile) have no F16C and convert fp16 scales with integer
// instructions where all four are normal, else one by one: every one of the 65536 patterns
// (subnormals, infinities, NaN payloads, signed zeros) must give fp16_to_fp32's bits. Run on
// every x86 tag whose CPU has SSE4.2.
static QK_TARGET_SSE4_2 void convert_fp16_sse4_2(std::uint32_t first, float (&converted)[4])
{
    const std::uint64_t bits = std::uint64_t{first} | (std::uint64_t{first + 1} << 16) | (std::uint64_t{first + 2} << 32) |
                               (std::uint64_t{first + 3} << 48);
    _mm_storeu_ps(converted, qk::kernels::sse4_2_detail::fp16x4_to_fp32<qk::arch::sse4_2>(bits));
}

TEST_CASE("the SSE4.2 kernels' fp16 conversion equals fp16_to_fp32 on all 65536 patterns")
{
    if (!qk::runs<qk::arch::sse4_2>(qk::running_cpu())) {
        return;
    }
    std::size_t mismatches = 0;
    for (std::uint32_t first = 0; first < 65536; first += 4) {
        float converted[4];
        convert_fp16_sse4_2(first, converted);
        for (std::uint32_t i = 0; i < 4; ++i) {
            const auto expected = std::bit_cast<std::uint32_t>(qk::fp16_to_fp32(static_cast<qk::fp16_bits>(first + i)));
            if (std::bit_cast<std::uint32_t>(converted[i]) != expected) {
                ++mismatches;
                CAPTURE(first + i);
                CHECK(std::bit_cast<std::uint32_t>(converted[i]) == expected);
            }
        }
    }
    CHECK(mismatches == 0);
}
#endif

TEST_CASE("MXFP4 dot on " QK_TAG_NAME(QK_TEST_TAG) " takes every E8M0 exponent as the reference does")
{
    // Rows of eight blocks (one group of the AVX-512 kernels), of eleven (a group and a tail), of
    // sixteen and 35 (one step of the split kernels, two and a tail), block j with exponent
    // (first + j) % 256, so every exponent meets every position, subnormal scales (e = 0, 1) and
    // the largest (e = 255, 2^126 halved) included. Activation scales of 2^-14 keep most rows
    // finite; rows that overflow must do so as the reference does.
    for (const std::size_t n : {std::size_t{8}, std::size_t{11}, std::size_t{16}, std::size_t{35}}) {
        for (unsigned first = 0; first < 256; ++first) {
            auto w = qk_inputs::random_blocks<qk::block_mxfp4>(n, 500 + first);
            auto a = qk_inputs::random_blocks<qk::block_q8_0>(n, 900 + first);
            for (std::size_t j = 0; j < n; ++j) {
                w[j].e = static_cast<std::uint8_t>((first + j) % 256);
                a[j].d = qk::fp32_to_fp16(0x1p-14f);
            }
            const float reference = qk::dot<qk::block_mxfp4, qk::arch::generic>(w, a);
            const float simd = qk::dot<qk::block_mxfp4, tag>(w, a);
            // The split kernel, where the tag has one, is held to the same.
            const float split = has_split_kernel<qk::block_mxfp4> ? split_dot<qk::block_mxfp4>(w, a, 0) : simd;
            CAPTURE(n);
            CAPTURE(first);
            CAPTURE(reference);
            CAPTURE(simd);
            CAPTURE(split);
            if (std::isfinite(reference)) {
                // The bound of `magnitude`, in double: dequantizing to float overflows for e >= 254.
                double bound = 0;
                for (std::size_t j = 0; j < n; ++j) {
                    double sum = 0;
                    for (std::size_t i = 0; i < 16; ++i) {
                        sum += std::abs(qk::mxfp4_values[w[j].qs[i] & 0xf] * a[j].qs[i]) + std::abs(qk::mxfp4_values[w[j].qs[i] >> 4] * a[j].qs[i + 16]);
                    }
                    bound += std::ldexp(sum, static_cast<int>(w[j].e) - 128) * qk::fp16_to_fp32(a[j].d);
                }
                const double tolerance = 2.0 * (static_cast<double>(n) + 4.0) * 0x1p-24 * bound;
                CHECK(std::fabs(static_cast<double>(simd) - reference) <= tolerance);
                CHECK(std::fabs(static_cast<double>(split) - reference) <= tolerance);
            } else {
                CHECK(std::memcmp(&simd, &reference, sizeof simd) == 0);
                CHECK(std::memcmp(&split, &reference, sizeof split) == 0);
            }
        }
    }
}

TEST_CASE("NVFP4 dot on " QK_TAG_NAME(QK_TEST_TAG) " takes every UE4M3 byte at every sub-block as the reference does")
{
    // Rows of four blocks (one group of the AVX-512 kernels, one step of the split kernel), seven
    // (a group and an odd tail), one, and nine (two steps and a tail); sub-block s of block j has
    // scale byte (first + 4j + s) % 256, so every byte meets every sub-block position: subnormals,
    // 0 and 0x7F (which decode to 0), bit 7 set (0xFF is 240). Every scale is finite and at most
    // 240, so every row is finite.
    for (const std::size_t n : {std::size_t{4}, std::size_t{7}, std::size_t{1}, std::size_t{9}}) {
        for (unsigned first = 0; first < 256; ++first) {
            auto w = qk_inputs::random_blocks<qk::block_nvfp4>(n, 2500 + first);
            const auto a = qk_inputs::random_blocks<qk::block_q8_0>(2 * n, 2900 + first);
            for (std::size_t j = 0; j < n; ++j) {
                for (std::size_t s = 0; s < 4; ++s) {
                    w[j].d[s] = static_cast<std::uint8_t>((first + 4 * j + s) % 256);
                }
            }
            const float reference = qk::dot<qk::block_nvfp4, qk::arch::generic>(w, a);
            const float simd = qk::dot<qk::block_nvfp4, tag>(w, a);
            // The bound of `magnitude`, from the format's definition (half the UE4M3 value from
            // its fields, not from the table the reference reads).
            double bound = 0;
            for (std::size_t j = 0; j < n; ++j) {
                for (std::size_t s = 0; s < 4; ++s) {
                    const unsigned byte = w[j].d[s];
                    const unsigned exponent = (byte >> 3) & 15;
                    const double scale = byte == 0x7f ? 0.0 : exponent == 0 ? std::ldexp(byte & 7, -10) : std::ldexp(8 + (byte & 7), static_cast<int>(exponent) - 11);
                    const qk::block_q8_0& q = a[2 * j + s / 2];
                    double sum = 0;
                    for (std::size_t i = 0; i < 8; ++i) {
                        const std::uint8_t code = w[j].qs[8 * s + i];
                        sum += std::abs(qk::mxfp4_values[code & 0xf] * q.qs[16 * (s % 2) + i]) + std::abs(qk::mxfp4_values[code >> 4] * q.qs[16 * (s % 2) + i + 8]);
                    }
                    bound += sum * scale * qk::fp16_to_fp32(q.d);
                }
            }
            const double tolerance = 2.0 * (4.0 * static_cast<double>(n) + 4.0) * 0x1p-24 * bound;
            CAPTURE(n);
            CAPTURE(first);
            CAPTURE(reference);
            CAPTURE(simd);
            REQUIRE(std::isfinite(reference));
            CHECK(std::fabs(static_cast<double>(simd) - reference) <= tolerance);
            if constexpr (has_split_kernel<qk::block_nvfp4>) {
                const float split = split_dot<qk::block_nvfp4>(w, a, 0);
                CAPTURE(split);
                CHECK(std::fabs(static_cast<double>(split) - reference) <= tolerance);
            }
        }
    }
}

#if QK_HAS_X86_KERNELS
// The AVX2 and AVX-512 NVFP4 kernels decode UE4M3 bytes in registers (as fp16 fields, 0x7F
// masked), not from the table: every byte must give ue4m3_half_table's value there, once the 2^7
// the activation scales carry is put back. Run on every x86 tag whose CPU has AVX2 / AVX-512 BW.
static QK_TARGET_AVX2 void ue4m3_avx2(const std::uint8_t* bytes, float (&converted)[8])
{
    std::uint64_t packed;
    std::memcpy(&packed, bytes, 8);
    const __m256 x = qk::kernels::avx2_detail::ue4m3_half8_div128<qk::arch::avx2>(_mm_cvtsi64_si128(static_cast<long long>(packed)));
    _mm256_storeu_ps(converted, _mm256_mul_ps(x, _mm256_set1_ps(128.0f)));
}

static QK_TARGET_AVX512BW void ue4m3_avx512(const std::uint8_t* bytes, float (&converted)[16])
{
    // Four blocks with these sub-block scales against Q8_0 scales of 1: the products are the scales.
    qk::block_nvfp4 w[4]{};
    qk::block_q8_0 a[8]{};
    for (std::size_t i = 0; i < 16; ++i) {
        w[i / 4].d[i % 4] = bytes[i];
    }
    for (auto& block : a) {
        block.d = qk::fp32_to_fp16(1.0f);
    }
    _mm512_storeu_ps(converted, qk::kernels::avx512_detail::nvfp4_scales16<qk::arch::avx512bw>(w, a));
}

TEST_CASE("the AVX2 and AVX-512 NVFP4 kernels' UE4M3 conversion equals ue4m3_half_table on all 256 bytes")
{
    std::uint8_t bytes[256];
    for (unsigned b = 0; b < 256; ++b) {
        bytes[b] = static_cast<std::uint8_t>(b);
    }
    if (qk::runs<qk::arch::avx2>(qk::running_cpu())) {
        for (unsigned first = 0; first < 256; first += 8) {
            float converted[8];
            ue4m3_avx2(bytes + first, converted);
            for (unsigned i = 0; i < 8; ++i) {
                CAPTURE(first + i);
                CHECK(std::bit_cast<std::uint32_t>(converted[i]) == std::bit_cast<std::uint32_t>(qk::ue4m3_half_table[first + i]));
            }
        }
    }
    if (qk::runs<qk::arch::avx512bw>(qk::running_cpu())) {
        for (unsigned first = 0; first < 256; first += 16) {
            float converted[16];
            ue4m3_avx512(bytes + first, converted);
            for (unsigned i = 0; i < 16; ++i) {
                CAPTURE(first + i);
                CHECK(std::bit_cast<std::uint32_t>(converted[i]) == std::bit_cast<std::uint32_t>(qk::ue4m3_half_table[first + i]));
            }
        }
    }
}
#endif

TEST_CASE("the MXFP4 tile kernel on " QK_TAG_NAME(QK_TEST_TAG) " takes every E8M0 exponent at every row as the generic one does")
{
    // Tiles of 16 rows and two blocks: block 0 of row r has exponent first + (r + shift) % 16, so
    // over the shifts every exponent sits at every row position, subnormal scales (e = 0, 1) and
    // the largest (e = 255) included; block 1 has e = 128 (scale 1) and only zero codes, so that a
    // row that overflows adds 0 to its infinity (never inf - inf) and a subnormal scale's small
    // term is not lost in the rounding of a larger one. Bit for bit, every column count.
    constexpr std::size_t rows = qk::packed_tile_rows;
    for (unsigned first = 0; first < 256; first += 16) {
        for (unsigned shift = 0; shift < 16; ++shift) {
            auto w = qk_inputs::random_blocks<qk::block_mxfp4>(2 * rows, 1100 + first + shift);
            for (std::size_t r = 0; r < rows; ++r) {
                w[2 * r].e = static_cast<std::uint8_t>(first + (r + shift) % 16);
                w[2 * r + 1].e = 128;
                w[2 * r + 1].qs.fill(0);
            }
            const qk::packed_matrix<qk::block_mxfp4> packed(w, rows, 64);
            for (std::size_t n = 1; n <= qk::packed_panel_columns; ++n) {
                const auto a = qk_inputs::random_blocks<qk::block_q8_0>(2 * n, 1300 + n);
                std::vector<std::uint8_t> panel(qk::packed_panel_bytes(2, n));
                qk::pack_panel(a.data(), 2, n, panel.data());
                std::vector<float> expected(n * rows);
                std::vector<float> actual(n * rows);
                qk::kernels::tile_product<qk::arch::generic>(packed.tile(0), panel.data(), n, expected.data(), rows, rows, qk::arch::generic{});
                qk::kernels::tile_product<tag>(packed.tile(0), panel.data(), n, actual.data(), rows, rows, tag{});
                for (std::size_t i = 0; i < expected.size(); ++i) {
                    CAPTURE(first);
                    CAPTURE(shift);
                    CAPTURE(n);
                    CAPTURE(i);
                    CHECK(std::bit_cast<std::uint32_t>(actual[i]) == std::bit_cast<std::uint32_t>(expected[i]));
                }
            }
        }
    }
}

TEST_CASE("the NVFP4 tile kernel on " QK_TAG_NAME(QK_TEST_TAG) " takes every UE4M3 byte at every row and sub-block as the generic one does")
{
    // Tiles of 16 rows and two blocks: sub-block s of block 0 of row r has scale byte
    // first + (r + shift + 4s) % 16, so over the shifts every byte (subnormals, 0 and 0x7F that
    // decode to 0, bit 7 set) sits at every row and sub-block position; block 1 keeps random
    // scales but only zero codes, a second block to add to that cannot hide a subnormal scale's
    // small terms in the rounding of larger ones. Bit for bit, every column count.
    constexpr std::size_t rows = qk::packed_tile_rows;
    for (unsigned first = 0; first < 256; first += 16) {
        for (unsigned shift = 0; shift < 16; ++shift) {
            auto w = qk_inputs::random_blocks<qk::block_nvfp4>(2 * rows, 1500 + first + shift);
            for (std::size_t r = 0; r < rows; ++r) {
                for (std::size_t s = 0; s < 4; ++s) {
                    w[2 * r].d[s] = static_cast<std::uint8_t>(first + (r + shift + 4 * s) % 16);
                }
                w[2 * r + 1].qs.fill(0);
            }
            const qk::packed_matrix<qk::block_nvfp4> packed(w, rows, 128);
            for (std::size_t n = 1; n <= qk::packed_panel_columns; ++n) {
                const auto a = qk_inputs::random_blocks<qk::block_q8_0>(4 * n, 1700 + n);
                std::vector<std::uint8_t> panel(qk::packed_panel_bytes(4, n));
                qk::pack_panel(a.data(), 4, n, panel.data());
                std::vector<float> expected(n * rows);
                std::vector<float> actual(n * rows);
                qk::kernels::tile_product<qk::arch::generic>(packed.tile(0), panel.data(), n, expected.data(), rows, rows, qk::arch::generic{});
                qk::kernels::tile_product<tag>(packed.tile(0), panel.data(), n, actual.data(), rows, rows, tag{});
                for (std::size_t i = 0; i < expected.size(); ++i) {
                    CAPTURE(first);
                    CAPTURE(shift);
                    CAPTURE(n);
                    CAPTURE(i);
                    CHECK(std::bit_cast<std::uint32_t>(actual[i]) == std::bit_cast<std::uint32_t>(expected[i]));
                }
            }
        }
    }
}

TEST_CASE("IQ4_XS dot on " QK_TAG_NAME(QK_TEST_TAG) " takes every group scale as the reference does")
{
    // Group g of superblock j gets ls = (8j + g + shift) % 64: every 6-bit scale, in both halves of
    // scales_l's bytes and at every pair of scales_h's bits, over rows of 8 and 9 superblocks.
    for (const std::size_t n : {std::size_t{8}, std::size_t{9}}) {
        for (unsigned shift = 0; shift < 8; ++shift) {
            auto w = qk_inputs::random_blocks<qk::block_iq4_xs>(n, 700 + shift);
            auto a = qk_inputs::random_blocks<qk::block_q8_K>(n, 800 + shift);
            for (std::size_t j = 0; j < n; ++j) {
                w[j].scales_h = 0;
                w[j].scales_l.fill(0);
                for (unsigned g = 0; g < 8; ++g) {
                    const unsigned ls = (8 * static_cast<unsigned>(j) + g + shift) % 64;
                    w[j].scales_l[g / 2] = static_cast<std::uint8_t>(w[j].scales_l[g / 2] | ((ls & 0xf) << (4 * (g % 2))));
                    w[j].scales_h = static_cast<std::uint16_t>(w[j].scales_h | ((ls >> 4) << (2 * g)));
                }
                for (auto& q : a[j].qs) {
                    q = static_cast<std::int8_t>(std::max<int>(q, -127)); // the Q8_K quantizer's range
                }
            }
            const float reference = qk::dot<qk::block_iq4_xs, qk::arch::generic>(w, a);
            const float simd = qk::dot<qk::block_iq4_xs, tag>(w, a);
            const double tolerance = 2.0 * (8.0 * static_cast<double>(n) + 4.0) * 0x1p-24 * magnitude<qk::block_iq4_xs, qk::block_q8_K>(w, a);
            CAPTURE(n);
            CAPTURE(shift);
            CAPTURE(reference);
            CAPTURE(simd);
            CHECK(std::fabs(static_cast<double>(simd) - reference) <= tolerance);
            if constexpr (has_split_kernel<qk::block_iq4_xs>) {
                const float split = split_dot<qk::block_iq4_xs>(w, a, 0);
                CAPTURE(split);
                CHECK(std::fabs(static_cast<double>(split) - reference) <= tolerance);
            }
        }
    }
}

TEST_CASE_TEMPLATE("activation quantizers on " QK_TAG_NAME(QK_TEST_TAG) " write the reference's bytes", Block, qk::block_q8_0,
                   qk::block_q8_K)
{
    check_quantizer_bytes<Block>();
}

TEST_CASE_TEMPLATE("activation quantizers on " QK_TAG_NAME(QK_TEST_TAG) " match the reference on edge cases", Block, qk::block_q8_0,
                   qk::block_q8_K)
{
    check_quantizer_edges<Block>();
}

TEST_CASE("the value check's pass on " QK_TAG_NAME(QK_TEST_TAG) " finds the largest magnitude, infinities and NaNs included")
{
    // Expected: the largest |x| as bits, from std::fabs (which clears a NaN's sign too).
    const auto expected_bits = [](const float* x, std::size_t n) {
        std::uint32_t largest = 0;
        for (std::size_t i = 0; i < n; ++i) {
            largest = std::max(largest, std::bit_cast<std::uint32_t>(std::fabs(x[i])));
        }
        return largest;
    };
    const float planted[] = {-1e30f, 3e38f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()};
    for (std::size_t n = 0; n <= 150; ++n) {
        for (std::size_t offset = 0; offset < 4; ++offset) {
            auto x = normal(n + offset, 1.0f, static_cast<std::uint32_t>(400 + n));
            const float* start = x.data() + offset;
            CAPTURE(n);
            CAPTURE(offset);
            CHECK(qk::kernels::max_magnitude_bits<tag>(start, n, tag{}) == expected_bits(start, n));
            for (const std::size_t position : {std::size_t{0}, n / 2, n - 1}) {
                if (position >= n) {
                    continue;
                }
                for (const float value : planted) {
                    const float kept = x[offset + position];
                    x[offset + position] = value;
                    CAPTURE(position);
                    CAPTURE(value);
                    CHECK(qk::kernels::max_magnitude_bits<tag>(start, n, tag{}) == expected_bits(start, n));
                    x[offset + position] = kept;
                }
            }
        }
    }
}

TEST_CASE_TEMPLATE("qk::quantize on " QK_TAG_NAME(QK_TEST_TAG) " rejects what the reference cannot encode, naming it", Block,
                   qk::block_q8_0, qk::block_q8_K, qk::block_mxfp4, qk::block_iq4_nl, qk::block_iq4_xs)
{
    constexpr std::size_t size = qk::format_traits<Block>::block_size;
    // 5 blocks, and 8 and 16 (whole groups of eight: Q8_0's fused check on the AVX-512 tags).
    for (const std::size_t blocks : {std::size_t{5}, std::size_t{8}, std::size_t{16}}) {
        const auto x = normal(blocks * size, 1.0f, 17);
        for (const std::size_t position : {std::size_t{0}, 2 * size + 7, blocks * size - 1}) {
            auto bad = x;
            bad[position] = std::numeric_limits<float>::quiet_NaN();
            std::vector<Block> y(blocks);
            const std::vector<Block> untouched(y);
            CAPTURE(blocks);
            const auto quantize = [&] { qk::quantize<Block, tag>(std::span<const float>(bad), std::span<Block>(y)); };
            CAPTURE(position);
            const std::string nan_message = "x[" + std::to_string(position) + "] is nan";
            CHECK_THROWS_WITH_AS(quantize(), doctest::Contains(nan_message.c_str()), qk::error);
            CHECK(std::memcmp(y.data(), untouched.data(), y.size() * sizeof(Block)) == 0);
            bad[position] = -std::numeric_limits<float>::infinity();
            const std::string inf_message = "x[" + std::to_string(position) + "] is -inf";
            CHECK_THROWS_WITH_AS(quantize(), doctest::Contains(inf_message.c_str()), qk::error);
            CHECK(std::memcmp(y.data(), untouched.data(), y.size() * sizeof(Block)) == 0);
            if constexpr (!std::is_same_v<Block, qk::block_q8_K> && !std::is_same_v<Block, qk::block_mxfp4>) {
                // Beyond the fp16 scale's range: Q8_0 from 127 * 65520, the IQ4 formats well past 65504.
                bad[position] = std::is_same_v<Block, qk::block_q8_0> ? 127.0f * 65520.0f : 1e10f;
                const std::string scale_message = "block " + std::to_string(position / size) + " ";
                CHECK_THROWS_WITH_AS(quantize(), doctest::Contains(scale_message.c_str()), qk::error);
                CHECK(std::memcmp(y.data(), untouched.data(), y.size() * sizeof(Block)) == 0);
                // Just inside it: accepted, and the bytes are the reference's.
                bad[position] = std::is_same_v<Block, qk::block_q8_0> ? 127.0f * 65504.0f : 2e6f;
                quantize();
                const auto expected = qk::quantize<Block, qk::arch::generic>(std::span<const float>(bad));
                CHECK(std::memcmp(y.data(), expected.data(), y.size() * sizeof(Block)) == 0);
            }
        }
    }
}
