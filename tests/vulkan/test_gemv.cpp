// The Vulkan mat-vec against two references on the same random blocks: the float dot of the
// dequantized rows with x, computed in double (the GPU's result differs from it only by float
// rounding, bounded below), and the CPU's qk::gemv, which multiplies by x quantized to the
// activation format (the difference is that quantization's effect, computed exactly, plus both
// roundings). Shapes cover one block to many, odd row counts and rows beyond one grid row. The
// mat-mult's columns against the same float bound and against the mat-vec of each column.
#include <doctest/doctest.h>

#include <backends/vulkan/gemv.hpp>
#include <backends/cpu/gemv.hpp>
#include <kernels/quantize.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "../gpu_reference.hpp"
#include "support.hpp"

namespace {

namespace vk = qk::backend::vulkan;
using qk_inputs::random_blocks;
using qk_test::gpu::rounding_bound;

template <class Block>
void check_format(std::size_t rows, std::size_t cols, std::uint64_t seed)
{
    using traits = qk::format_traits<Block>;
    CAPTURE(traits::name);
    CAPTURE(rows);
    CAPTURE(cols);
    const vk::device& dev = qk_test::vulkan_device();
    const auto w = random_blocks<Block>(rows * cols / traits::block_size, seed);
    const auto x = qk_inputs::normal<std::mt19937_64>(cols, 1.0f, seed + 1);
    std::vector<float> wf(rows * cols);
    qk::dequantize<Block>(w, wf);
    // The activations as the CPU gemv sees them.
    using act = typename traits::vec_dot_type;
    const auto xq = qk::quantize<act>(x);
    std::vector<float> xd(cols);
    qk::dequantize<act>(xq, xd);

    const auto m = vk::upload_matrix<Block>(dev, w, rows, cols);
    CHECK(m.bytes() == w.size() * sizeof(Block));
    vk::gemv_workspace ws(dev);
    std::vector<float> y(rows, std::nanf(""));
    vk::gemv(dev, ws, m, x, y);
    qk::backend::cpu::thread_pool pool(2);
    std::vector<float> y_cpu(rows);
    qk::gemv<Block>(w, rows, cols, x, y_cpu, pool);

    std::size_t bad_float = 0, bad_cpu = 0;
    for (std::size_t r = 0; r < rows; ++r) {
        double exact = 0, magnitude = 0, quantized = 0, quantized_magnitude = 0;
        for (std::size_t c = 0; c < cols; ++c) {
            const double wv = wf[r * cols + c];
            exact += wv * x[c];
            magnitude += std::abs(wv * x[c]);
            quantized += wv * xd[c];
            quantized_magnitude += std::abs(wv * xd[c]);
        }
        const double gpu_bound = rounding_bound(cols, magnitude);
        if (!(std::abs(y[r] - exact) <= gpu_bound)) {
            if (++bad_float <= 3) {
                INFO("row " << r << ": gpu " << y[r] << ", exact " << exact << ", bound " << gpu_bound);
                CHECK(std::abs(y[r] - exact) <= gpu_bound);
            }
        }
        // The CPU sums integer products exactly per block, then scales: the same form of bound.
        const double cpu_bound = gpu_bound + rounding_bound(cols, quantized_magnitude);
        if (!(std::abs(static_cast<double>(y[r]) - y_cpu[r] - (exact - quantized)) <= cpu_bound)) {
            if (++bad_cpu <= 3) {
                INFO("row " << r << ": gpu " << y[r] << ", cpu " << y_cpu[r] << ", quantization effect " << exact - quantized);
                CHECK(std::abs(static_cast<double>(y[r]) - y_cpu[r] - (exact - quantized)) <= cpu_bound);
            }
        }
    }
    CHECK(bad_float == 0);
    CHECK(bad_cpu == 0);
}

template <class Block>
void check_shapes()
{
    constexpr std::size_t bs = qk::format_traits<Block>::block_size;
    std::uint64_t seed = 1;
    for (const std::size_t rows : {1, 3, 64, 257}) {
        for (const std::size_t blocks : {1, 2, 5, 64, 65, 130}) {
            if (blocks * bs <= 8192) {
                check_format<Block>(rows, blocks * bs, seed++);
            }
        }
    }
}

// gemm over `columns` random columns: each column within the rounding bound of its double-precision
// product, and equal bit for bit to gemv's result for that column alone (the columns are spread
// over tiles of four, the last tile partly filled, and gemv is a tile of one).
template <class Block>
void check_gemm(std::size_t rows, std::size_t cols, std::size_t columns, std::uint64_t seed)
{
    using traits = qk::format_traits<Block>;
    CAPTURE(traits::name);
    CAPTURE(rows);
    CAPTURE(cols);
    CAPTURE(columns);
    const vk::device& dev = qk_test::vulkan_device();
    const auto w = random_blocks<Block>(rows * cols / traits::block_size, seed);
    const auto x = qk_inputs::normal<std::mt19937_64>(columns * cols, 1.0f, seed + 1);
    std::vector<float> wf(rows * cols);
    qk::dequantize<Block>(w, wf);
    const auto m = vk::upload_matrix<Block>(dev, w, rows, cols);
    vk::gemv_workspace ws(dev);
    std::vector<float> y(columns * rows, std::nanf(""));
    vk::gemm(dev, ws, m, columns, x, y);
    std::size_t bad_bound = 0, bad_bits = 0;
    for (std::size_t c = 0; c < columns; ++c) {
        std::vector<float> y_gemv(rows, std::nanf(""));
        vk::gemv(dev, ws, m, std::span<const float>(x).subspan(c * cols, cols), y_gemv);
        for (std::size_t r = 0; r < rows; ++r) {
            double exact = 0, magnitude = 0;
            for (std::size_t i = 0; i < cols; ++i) {
                exact += static_cast<double>(wf[r * cols + i]) * x[c * cols + i];
                magnitude += std::abs(static_cast<double>(wf[r * cols + i]) * x[c * cols + i]);
            }
            const float got = y[c * rows + r];
            if (!(std::abs(got - exact) <= rounding_bound(cols, magnitude)) && ++bad_bound <= 3) {
                INFO("column " << c << ", row " << r << ": gemm " << got << ", exact " << exact);
                CHECK(std::abs(got - exact) <= rounding_bound(cols, magnitude));
            }
            if (std::bit_cast<std::uint32_t>(got) != std::bit_cast<std::uint32_t>(y_gemv[r]) && ++bad_bits <= 3) {
                INFO("column " << c << ", row " << r << ": gemm " << got << ", gemv " << y_gemv[r]);
                CHECK(std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(y_gemv[r]));
            }
        }
    }
    CHECK(bad_bound == 0);
    CHECK(bad_bits == 0);
}

template <class Block>
void check_gemm_shapes()
{
    constexpr std::size_t bs = qk::format_traits<Block>::block_size;
    std::uint64_t seed = 500;
    for (const std::size_t rows : {1, 3, 70}) {
        for (const std::size_t blocks : {1, 5, 67}) {
            for (const std::size_t columns : {1, 2, 4, 5, 9, 17}) {
                if (blocks * bs <= 4096) {
                    check_gemm<Block>(rows, blocks * bs, columns, seed++);
                }
            }
        }
    }
}

} // namespace

TEST_CASE("vulkan gemv: Q8_0 against the float reference and the CPU")
{
    check_shapes<qk::block_q8_0>();
}

TEST_CASE("vulkan gemv: MXFP4 against the float reference and the CPU")
{
    check_shapes<qk::block_mxfp4>();
}

TEST_CASE("vulkan gemv: IQ4_NL against the float reference and the CPU")
{
    check_shapes<qk::block_iq4_nl>();
}

TEST_CASE("vulkan gemv: IQ4_XS against the float reference and the CPU")
{
    check_shapes<qk::block_iq4_xs>();
}

TEST_CASE("vulkan gemv: NVFP4 against the float reference and the CPU")
{
    check_shapes<qk::block_nvfp4>();
}

TEST_CASE("vulkan gemv: NVFP4 decodes every UE4M3 scale byte at every sub-block as qk::ue4m3_half_table")
{
    const vk::device& dev = qk_test::vulkan_device();
    using probe_type = qk_test::gpu::nvfp4_scale_probe;
    const probe_type probe = qk_test::gpu::make_nvfp4_scale_probe(7);
    const auto m = vk::upload_matrix<qk::block_nvfp4>(dev, probe.w, probe_type::rows, probe_type::cols);
    vk::gemv_workspace ws(dev);
    std::vector<float> y(probe_type::rows, std::nanf(""));
    vk::gemv(dev, ws, m, probe.x, y);
    std::size_t bad = 0, nonzero = 0;
    for (std::size_t r = 0; r < probe_type::rows; ++r) {
        nonzero += probe.expected[r] != 0.0f ? 1 : 0;
        if (y[r] != probe.expected[r] && ++bad <= 3) {
            INFO("scale byte " << r / 4 << " at sub-block " << r % 4 << ": gpu " << y[r] << ", expected " << probe.expected[r]);
            CHECK(y[r] == probe.expected[r]);
        }
    }
    CHECK(bad == 0);
    CHECK(nonzero > probe_type::rows / 2); // the probe is not all zeros
}

TEST_CASE("vulkan gemm: Q8_0 columns within the float bound, each equal to gemv's")
{
    check_gemm_shapes<qk::block_q8_0>();
}

TEST_CASE("vulkan gemm: MXFP4 columns within the float bound, each equal to gemv's")
{
    check_gemm_shapes<qk::block_mxfp4>();
}

TEST_CASE("vulkan gemm: IQ4_NL columns within the float bound, each equal to gemv's")
{
    check_gemm_shapes<qk::block_iq4_nl>();
}

TEST_CASE("vulkan gemm: IQ4_XS columns within the float bound, each equal to gemv's")
{
    check_gemm_shapes<qk::block_iq4_xs>();
}

TEST_CASE("vulkan gemm: NVFP4 columns within the float bound, each equal to gemv's")
{
    check_gemm_shapes<qk::block_nvfp4>();
}

TEST_CASE("vulkan gemv: more rows than one row of workgroups holds")
{
    const vk::device& dev = qk_test::vulkan_device();
    // The grid wraps into a second dimension past maxComputeWorkGroupCount[0] (65535 on lavapipe).
    const std::size_t rows = std::max<std::size_t>(dev.facts().max_workgroup_count_x + 7, 70000);
    if (rows > 200000) {
        MESSAGE("skipped: this device allows " << dev.facts().max_workgroup_count_x << " workgroups in x");
        return;
    }
    check_format<qk::block_q8_0>(rows, 32, 99);
}

TEST_CASE("vulkan gemv: bad shapes are qk::errors and leave y untouched")
{
    const vk::device& dev = qk_test::vulkan_device();
    const auto w = random_blocks<qk::block_q8_0>(8, 5);
    CHECK_THROWS_WITH_AS((void)vk::upload_matrix<qk::block_q8_0>(dev, w, 2, 100), doctest::Contains("cols (100)"), qk::error);
    CHECK_THROWS_WITH_AS((void)vk::upload_matrix<qk::block_q8_0>(dev, w, 3, 128), doctest::Contains("8 blocks for 3 rows"), qk::error);
    CHECK_THROWS_AS((void)vk::upload_matrix<qk::block_q8_0>(dev, w, 0, 128), qk::error);
    const auto m = vk::upload_matrix<qk::block_q8_0>(dev, w, 2, 128);
    vk::gemv_workspace ws(dev);
    std::vector<float> x(128, 1.0f), y(2, 42.0f), short_x(127, 1.0f), long_y(3, 42.0f);
    CHECK_THROWS_WITH_AS(vk::gemv(dev, ws, m, short_x, y), doctest::Contains("x has 127 values"), qk::error);
    CHECK_THROWS_AS(vk::gemv(dev, ws, m, x, long_y), qk::error);
    CHECK(y == std::vector<float>(2, 42.0f));
    CHECK(long_y == std::vector<float>(3, 42.0f));
    std::vector<float> x2(256, 1.0f), y2(4, 42.0f);
    CHECK_THROWS_WITH_AS(vk::gemm(dev, ws, m, 0, x2, y2), doctest::Contains("columns is 0"), qk::error);
    CHECK_THROWS_WITH_AS(vk::gemm(dev, ws, m, 2, std::span<const float>(x2).first(255), y2), doctest::Contains("x has 255 values"),
                         qk::error);
    CHECK_THROWS_AS(vk::gemm(dev, ws, m, 2, x2, std::span<float>(y2).first(3)), qk::error);
    CHECK(y2 == std::vector<float>(4, 42.0f));
}
