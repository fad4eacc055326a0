// Quantizer properties on random and extreme inputs: round-trip error within bounds derived from
// each format's step size, defined results at the edges of the float range, and argument errors
// that name the sizes and leave the output untouched.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "test_support.hpp"

using namespace qk_test;

namespace {

// The largest error of rounding a scale d to fp16: half an ulp, 2^-11 relative for normal
// halves, 2^-25 absolute among the subnormals (below 2^-14).
double fp16_rounding_error(double d)
{
    return std::max(std::fabs(d) * 0x1p-11, 0x1p-25);
}

template <class Block>
std::vector<float> round_trip(const std::vector<float>& x, std::vector<Block>* blocks_out = nullptr)
{
    const auto blocks = qk::quantize<Block>(std::span<const float>(x));
    std::vector<float> y(x.size());
    qk::dequantize<Block>(blocks, y);
    if (blocks_out != nullptr) {
        *blocks_out = blocks;
    }
    return y;
}

// Distance from v to the nearest point of the IQ4 grid scaled by d.
double grid_distance(double v, double d)
{
    double best = std::numeric_limits<double>::infinity();
    for (auto g : qk::iq4_values) {
        best = std::min(best, std::fabs(v - d * g));
    }
    return best;
}

// Per-format bound on |x - dequantize(quantize(x))| for element j of block b, derived from the
// block's stored scale (see each branch); every element is checked against it.
template <class Block>
void check_round_trip_bound(const std::vector<float>& x)
{
    std::vector<Block> blocks;
    const auto y = round_trip<Block>(x, &blocks);
    constexpr std::size_t size = qk::format_traits<Block>::block_size;
    std::size_t violations = 0;
    double worst_ratio = 0;
    for (std::size_t b = 0; b < blocks.size(); ++b) {
        const Block& block = blocks[b];
        double amax = 0;
        for (std::size_t j = 0; j < size; ++j) {
            amax = std::max(amax, std::fabs(static_cast<double>(x[b * size + j])));
        }
        for (std::size_t j = 0; j < size; ++j) {
            const double v = x[b * size + j];
            const double error = std::fabs(v - static_cast<double>(y[b * size + j]));
            double bound = 0;
            if constexpr (std::is_same_v<Block, qk::block_q8_0>) {
                // q = round(x / d) with d = amax/127 in float, decoded with d rounded to fp16:
                // half a step, plus |q| <= 127 times the scale's rounding error.
                const double d = amax / 127.0;
                bound = 0.5 * d * (1 + 1e-6) + 127.0 * fp16_rounding_error(d);
            } else if constexpr (std::is_same_v<Block, qk::block_q8_K>) {
                // float scale, nearest integer: half a step.
                bound = std::fabs(static_cast<double>(block.d)) * 0.5 * (1 + 1e-6);
            } else if constexpr (std::is_same_v<Block, qk::block_mxfp4>) {
                // The largest gap of the doubled E2M1 grid is 4 (8 -> 12) in units of the scale s:
                // half a gap inside the grid. The exponent floor(log2 amax) - 2 makes 12 s =
                // 1.5 * 2^floor(log2 amax), which can be below amax: larger values clip to 12 s.
                const double s = qk::e8m0_half_to_fp32(block.e);
                bound = std::max(2.0 * s, std::fabs(v) - 12.0 * s) * (1 + 1e-6);
            } else if constexpr (std::is_same_v<Block, qk::block_nvfp4>) {
                // The same grid per 16 values, at the sub-block's UE4M3 scale: half a gap inside
                // the grid; beyond 12 s (a scale clamped at 448, or rounded below amax / 6) values
                // clip to 12 s. A scale below the smallest subnormal is 0 and the value is lost.
                const double s = qk::ue4m3_half_table[block.d[j / 16]];
                bound = std::max(2.0 * s, std::fabs(v) - 12.0 * s) * (1 + 1e-6);
            } else {
                // Codes are the nearest grid points at the float scale; rounding the scale to fp16
                // moves each decoded value by at most 127 times the scale's rounding error, once
                // for the choice of code and once for the decoding.
                double d = qk::fp16_to_fp32(block.d);
                double scale_error = fp16_rounding_error(d);
                if constexpr (std::is_same_v<Block, qk::block_iq4_xs>) {
                    const int l = qk::iq4_xs_group_scale(block, static_cast<int>(j / 32));
                    d *= l;
                    scale_error *= std::abs(l);
                }
                bound = grid_distance(v, d) + 2.0 * 127.0 * scale_error + std::fabs(v) * 1e-6;
            }
            bound += std::numeric_limits<float>::denorm_min();
            violations += error > bound;
            if (bound > 0) {
                worst_ratio = std::max(worst_ratio, error / bound);
            }
        }
    }
    CAPTURE(worst_ratio);
    CHECK(violations == 0);
}

// Rows of normal values at several magnitudes, one block in seven zero, some outliers.
std::vector<float> varied_input(std::size_t n, std::uint32_t seed)
{
    auto x = normal(n, 1.0f, seed);
    const float scales[] = {1e-3f, 1.0f, 37.0f, 1e3f, 0.01f, 4e4f};
    for (std::size_t i = 0; i < n; ++i) {
        const std::size_t block = i / 32;
        x[i] *= block % 7 == 3 ? 0.0f : scales[block % 6];
        if (i % 97 == 5) {
            x[i] *= 20.0f;
        }
    }
    return x;
}

template <class Block>
void check_rejected_without_writing(std::span<const float> x, std::size_t blocks, const std::vector<std::string>& fragments)
{
    std::vector<Block> y(blocks);
    std::memset(static_cast<void*>(y.data()), 0xab, y.size() * sizeof(Block));
    const std::vector<Block> before = y;
    std::string message;
    try {
        qk::quantize<Block>(x, std::span<Block>(y));
    } catch (const qk::error& e) {
        message = e.what();
    }
    CAPTURE(message);
    REQUIRE_FALSE(message.empty());
    for (const auto& fragment : fragments) {
        CHECK(message.find(fragment) != std::string::npos);
    }
    CHECK(std::memcmp(y.data(), before.data(), y.size() * sizeof(Block)) == 0);
}

} // namespace

TEST_CASE_TEMPLATE_DEFINE("round trip stays within the format's step-size bound", Block, round_trip_stays_within_format)
{
    SUBCASE("varied magnitudes") { check_round_trip_bound<Block>(varied_input(256 * 96, 11)); }
    SUBCASE("uniform") {
        auto x = normal(256 * 16, 1.0f, 12);
        for (auto& v : x) {
            v = std::fmod(v, 1.0f);
        }
        check_round_trip_bound<Block>(x);
    }
    SUBCASE("huge values") { check_round_trip_bound<Block>(normal(256 * 4, 1e5f, 13)); }
    SUBCASE("tiny values") { check_round_trip_bound<Block>(normal(256 * 4, 1e-30f, 14)); }
}
TEST_CASE_TEMPLATE_APPLY(round_trip_stays_within_format, qk::block_formats::tuple);

TEST_CASE_TEMPLATE_DEFINE("zero input gives zero blocks that decode to zero", Block, zero_input_gives_zero_blocks)
{
    const std::vector<float> x(512, 0.0f);
    std::vector<Block> blocks;
    const auto y = round_trip<Block>(x, &blocks);
    CHECK(std::all_of(y.begin(), y.end(), [](float v) { return v == 0.0f; }));
    if constexpr (std::is_same_v<Block, qk::block_q8_K>) {
        // GGUF producers leave bsums unwritten for zero blocks; qkern writes zeros.
        for (const auto& b : blocks) {
            CHECK(b.d == 0.0f);
            CHECK(std::all_of(b.bsums.begin(), b.bsums.end(), [](auto s) { return s == 0; }));
            CHECK(std::all_of(b.qs.begin(), b.qs.end(), [](auto q) { return q == 0; }));
        }
    }
}
TEST_CASE_TEMPLATE_APPLY(zero_input_gives_zero_blocks, qk::block_formats::tuple);

TEST_CASE_TEMPLATE_DEFINE("subnormal inputs give defined, finite blocks", Block, subnormal_inputs_give_defined_finite)
{
    // Scales underflow here; GGUF producers hit undefined behaviour (an infinite reciprocal
    // converted to int8, a negative exponent converted to uint8). qkern's results are documented:
    // all-zero blocks, except MXFP4 whose exponent is clamped to the smallest scale.
    auto x = normal(512, 1e-40f, 15);
    x[3] = std::numeric_limits<float>::denorm_min();
    std::vector<Block> blocks;
    const auto y = round_trip<Block>(x, &blocks);
    for (std::size_t i = 0; i < x.size(); ++i) {
        REQUIRE(std::isfinite(y[i]));
        if constexpr (std::is_same_v<Block, qk::block_mxfp4>) {
            CHECK(std::fabs(x[i] - y[i]) <= 2.0f * qk::e8m0_half_to_fp32(0));
        } else {
            CHECK(y[i] == 0.0f);
        }
    }
    if constexpr (std::is_same_v<Block, qk::block_mxfp4>) {
        CHECK(std::all_of(blocks.begin(), blocks.end(), [](const auto& b) { return b.e == 0; }));
    }
}
TEST_CASE_TEMPLATE_APPLY(subnormal_inputs_give_defined_finite, qk::block_formats::tuple);

TEST_CASE("MXFP4's exponent follows single-precision log2f just below powers of two")
{
    // nextafter(8, 0) has exact exponent 2, but log2f rounds it to 3.0: the shared exponent is
    // 3 - 2 + 127 = 128, one more than the exact exponent would give (FORMATS.md).
    std::vector<float> x(32, 0.0f);
    x[0] = std::nextafter(8.0f, 0.0f);
    const auto blocks = qk::quantize<qk::block_mxfp4>(std::span<const float>(x));
    CHECK(static_cast<int>(blocks[0].e) == static_cast<int>(std::floor(std::log2(x[0]))) - 2 + 127);
    x[0] = 8.0f;
    CHECK(qk::quantize<qk::block_mxfp4>(std::span<const float>(x))[0].e == 128);
    x[0] = 7.0f;
    CHECK(qk::quantize<qk::block_mxfp4>(std::span<const float>(x))[0].e == 127);
}

TEST_CASE("Q8_0 and IQ4 scales at the edge of the fp16 range")
{
    std::vector<float> x(32, 1.0f);
    x[0] = 127.0f * 65504.0f; // scale exactly the largest fp16
    CHECK(qk::fp16_to_fp32(qk::quantize<qk::block_q8_0>(std::span<const float>(x))[0].d) == 65504.0f);
    x[0] = 127.0f * 65520.0f; // scale rounds to infinity
    check_rejected_without_writing<qk::block_q8_0>(x, 1, {"block 0", "x[0..31]", "fp16"});
    std::vector<float> big(256, 3.0f);
    big[7] = 2e6f; // beyond fp16 but its IQ4 scale (~2e6/120) fits
    const auto ok = qk::quantize<qk::block_iq4_nl>(std::span<const float>(big));
    CHECK(std::isfinite(qk::fp16_to_fp32(ok[0].d)));
    big[40] = 1e10f;
    check_rejected_without_writing<qk::block_iq4_nl>(big, 8, {"block 1", "x[32..63]"});
    check_rejected_without_writing<qk::block_iq4_xs>(big, 1, {"block 0", "x[0..255]"});
    // Formats with float or power-of-two scales take the whole float range.
    big[40] = 3e38f;
    CHECK_NOTHROW((void)qk::quantize<qk::block_q8_K>(std::span<const float>(big)));
    CHECK_NOTHROW((void)qk::quantize<qk::block_mxfp4>(std::span<const float>(big)));
    CHECK_NOTHROW((void)qk::quantize<qk::block_nvfp4>(std::span<const float>(big)));
}

// The producers' search, written out: every one of the 16 codes tried in order, the first of the
// nearest kept.
unsigned nearest_code_by_search(float v, float d)
{
    unsigned best = 0;
    float best_error = std::fabs(qk::detail::rounded(static_cast<float>(qk::mxfp4_values[0]) * d) - v);
    for (unsigned code = 1; code < 16; ++code) {
        const float error = std::fabs(qk::detail::rounded(static_cast<float>(qk::mxfp4_values[code]) * d) - v);
        if (error < best_error) {
            best = code;
            best_error = error;
        }
    }
    return best;
}

TEST_CASE("E2M1 codes: the magnitude search gives the 16-code search's code, ties and signed zeros included")
{
    // Scales: MXFP4's powers of two (the subnormal 2^-128 and 2^-127 among them) and NVFP4's
    // UE4M3 halves, plus arbitrary floats. Values: random, exactly on the decoded values, exactly
    // between two of them (the ties), one ulp either side of those, and both zeros.
    std::vector<float> scales;
    for (int e = 0; e < 255; e += 3) {
        scales.push_back(qk::e8m0_half_to_fp32(static_cast<std::uint8_t>(e)));
    }
    for (int byte = 0; byte < 0x7f; ++byte) {
        scales.push_back(qk::ue4m3_half_to_fp32(static_cast<std::uint8_t>(byte)));
    }
    std::mt19937 engine(5);
    std::uniform_real_distribution<float> uniform(1e-3f, 10.0f);
    for (int i = 0; i < 40; ++i) {
        scales.push_back(uniform(engine));
    }
    std::size_t checked = 0;
    for (const float d : scales) {
        std::vector<float> values = {0.0f, -0.0f};
        for (int m = 0; m < 8; ++m) {
            const float p = qk::detail::rounded(static_cast<float>(qk::mxfp4_values[static_cast<std::size_t>(m)]) * d);
            const float q = m < 7 ? qk::detail::rounded(static_cast<float>(qk::mxfp4_values[static_cast<std::size_t>(m + 1)]) * d) : p * 2.0f;
            const float middle = p + (q - p) / 2.0f;
            for (const float v : {p, middle, std::nextafter(middle, 0.0f), std::nextafter(middle, q), uniform(engine) * d}) {
                values.push_back(v);
                values.push_back(-v);
            }
        }
        // 32 at a time through the MXFP4 form and 16 at a time through the NVFP4 form's helper.
        while (values.size() % 32 != 0) {
            values.push_back(d);
        }
        for (std::size_t start = 0; start < values.size(); start += 32) {
            std::array<std::uint8_t, 32> wide;
            std::array<std::uint8_t, 16> narrow;
            qk::reference::nearest_e2m1_codes<32>(values.data() + start, d, wide.data());
            qk::reference::nearest_e2m1_codes<16>(values.data() + start + 16, d, narrow.data());
            for (std::size_t j = 0; j < 32; ++j) {
                const float v = values[start + j];
                CAPTURE(d);
                CAPTURE(v);
                REQUIRE(wide[j] == nearest_code_by_search(v, d));
                if (j >= 16) {
                    REQUIRE(narrow[j - 16] == nearest_code_by_search(v, d));
                }
                ++checked;
            }
        }
    }
    CHECK(checked > 20000);
}

TEST_CASE("NVFP4 sub-block scales: clamped at 448, each 16 values on their own")
{
    std::vector<float> x(64, 0.0f);
    x[0] = 1e6f;   // amax / 6 beyond 448: scale byte 0x7e, the value clips to 12 * 224
    x[16] = 6.0f;  // amax / 6 = 1: byte 0x38, and 6 is code 7 (12 * 0.5)
    x[17] = -0.5f; // code 9 (-1 * 0.5)
    x[40] = 3.0f;  // sub-block 2: byte 0x30 (0.5, half of it 0.25), 3 is code 7 (12 * 0.25)
    // Sub-block 3 stays zero: byte 0, codes 0.
    const auto blocks = qk::quantize<qk::block_nvfp4>(std::span<const float>(x));
    REQUIRE(blocks.size() == 1);
    CHECK(blocks[0].d[0] == 0x7e);
    CHECK(blocks[0].d[1] == 0x38);
    CHECK(blocks[0].d[2] == 0x30);
    CHECK(blocks[0].d[3] == 0x00);
    CHECK((blocks[0].qs[0] & 0x0f) == 7);  // element 0: 12 * 224 = 2688 is the nearest value
    CHECK((blocks[0].qs[8] & 0x0f) == 7);  // element 16
    CHECK((blocks[0].qs[9] & 0x0f) == 9);  // element 17
    CHECK((blocks[0].qs[16] >> 4) == 7);   // element 40 = 16 * 2 + 8: the high nibble of byte 16
    std::vector<float> y(64);
    qk::dequantize<qk::block_nvfp4>(blocks, y);
    CHECK(y[0] == 2688.0f);
    CHECK(y[16] == 6.0f);
    CHECK(y[17] == -0.5f);
    CHECK(y[40] == 3.0f);
    CHECK(std::count(y.begin(), y.end(), 0.0f) == 60);
}

TEST_CASE_TEMPLATE_DEFINE("bad shapes and values are rejected before anything is written", Block, bad_shapes_values_are_rejected)
{
    constexpr std::size_t size = qk::format_traits<Block>::block_size;
    const std::string name(qk::format_traits<Block>::name);
    const auto x = normal(size * 3, 1.0f, 16);
    const std::span<const float> all(x);

    SUBCASE("values not a multiple of the block size")
    {
        check_rejected_without_writing<Block>(all.first(size * 2 + 5), 2, {name, std::to_string(size * 2 + 5), std::to_string(size)});
    }
    SUBCASE("too few output blocks") { check_rejected_without_writing<Block>(all, 2, {name, "2 blocks", "make 3"}); }
    SUBCASE("too many output blocks") { check_rejected_without_writing<Block>(all, 4, {"4 blocks", "make 3"}); }
    SUBCASE("NaN and infinity")
    {
        auto bad = x;
        bad[size + 1] = std::numeric_limits<float>::quiet_NaN();
        check_rejected_without_writing<Block>(bad, 3, {"x[" + std::to_string(size + 1) + "]", "nan", "finite"});
        bad[size + 1] = 1.0f;
        bad[2] = -std::numeric_limits<float>::infinity();
        check_rejected_without_writing<Block>(bad, 3, {"x[2]", "inf"});
    }
    SUBCASE("dequantize checks its sizes")
    {
        const auto blocks = qk::quantize<Block>(all);
        std::vector<float> y(size * 3 - 1, 7.0f);
        CHECK_THROWS_WITH_AS(qk::dequantize<Block>(blocks, y), doctest::Contains(std::to_string(size * 3 - 1).c_str()), qk::error);
        CHECK(std::all_of(y.begin(), y.end(), [](float v) { return v == 7.0f; }));
    }
    SUBCASE("empty input is a no-op")
    {
        std::vector<Block> none;
        CHECK_NOTHROW(qk::quantize<Block>(std::span<const float>(), std::span<Block>(none)));
    }
}
TEST_CASE_TEMPLATE_APPLY(bad_shapes_values_are_rejected, qk::block_formats::tuple);

TEST_CASE_TEMPLATE("importance weights", Block, qk::block_iq4_nl, qk::block_iq4_xs)
{
    constexpr std::size_t size = qk::format_traits<Block>::block_size;
    const std::size_t columns = 512;
    const auto x = varied_input(columns * 3, 21);
    auto importance = normal(columns, 1.0f, 22);
    for (auto& w : importance) {
        w = w * w + 0.01f;
    }
    std::vector<Block> y(x.size() / size);
    qk::quantize<Block>(x, std::span<Block>(y), importance);

    SUBCASE("applied per row: quantizing rows one by one gives the same bytes")
    {
        for (std::size_t row = 0; row < 3; ++row) {
            std::vector<Block> one(columns / size);
            qk::quantize<Block>(std::span<const float>(x).subspan(row * columns, columns), std::span<Block>(one), importance);
            CHECK(std::memcmp(one.data(), y.data() + row * one.size(), one.size() * sizeof(Block)) == 0);
        }
    }
    SUBCASE("they steer the scale: a heavily weighted column is reproduced more closely")
    {
        // Column 5 of every row gets almost all the weight; its round-trip error, summed over
        // rows, must not exceed the unweighted quantizer's.
        std::vector<float> focused(columns, 1e-3f);
        for (std::size_t c = 5; c < columns; c += 32) {
            focused[c] = 1e3f;
        }
        std::vector<Block> weighted(y.size());
        qk::quantize<Block>(x, std::span<Block>(weighted), focused);
        std::vector<float> yw(x.size());
        std::vector<float> yu(x.size());
        qk::dequantize<Block>(weighted, yw);
        qk::dequantize<Block>(qk::quantize<Block>(std::span<const float>(x)), yu);
        double error_weighted = 0;
        double error_unweighted = 0;
        for (std::size_t i = 5; i < x.size(); i += 32) {
            error_weighted += std::fabs(x[i] - yw[i]);
            error_unweighted += std::fabs(x[i] - yu[i]);
        }
        CHECK(error_weighted < error_unweighted);
    }
    SUBCASE("bad importance is rejected before anything is written")
    {
        std::vector<Block> out(y.size());
        std::memset(static_cast<void*>(out.data()), 0xab, out.size() * sizeof(Block));
        const auto before = out;
        const auto expect_error = [&](std::span<const float> w, const char* fragment) {
            CHECK_THROWS_WITH_AS(qk::quantize<Block>(x, std::span<Block>(out), w), doctest::Contains(fragment), qk::error);
            CHECK(std::memcmp(out.data(), before.data(), out.size() * sizeof(Block)) == 0);
        };
        expect_error(std::span<const float>(importance).first(size + 1), "importance has");
        expect_error(std::span<const float>(importance).first(0), "importance has 0");
        auto negative = importance;
        negative[9] = -1.0f;
        expect_error(negative, "importance[9] is -1");
        auto zero_group = importance;
        std::fill(zero_group.begin() + 64, zero_group.begin() + 96, 0.0f);
        expect_error(zero_group, "importance[64..95] are all zero");
        // A scale that overflows fp16 is found after quantizing, and y is still untouched.
        auto huge = x;
        huge[columns + 40] = 1e10f;
        CHECK_THROWS_WITH_AS(qk::quantize<Block>(huge, std::span<Block>(out), importance),
                             doctest::Contains("fp16 scale would not be finite"), qk::error);
        CHECK(std::memcmp(out.data(), before.data(), out.size() * sizeof(Block)) == 0);
    }
}
