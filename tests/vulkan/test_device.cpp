// The Vulkan runtime: device facts and selection, buffer transfers and their checks, the pipeline
// cache, and several threads sharing one device (this executable also runs under
// ThreadSanitizer in CI).
#include <doctest/doctest.h>

#include <backends/vulkan/gemv.hpp>

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace vk = qk::backend::vulkan;

TEST_CASE("vulkan device: facts are read and classified")
{
    const auto& f = qk_test::vulkan_device().facts();
    CHECK_FALSE(f.name.empty());
    CHECK(f.subgroup_size >= 1);
    CHECK((f.subgroup_size & (f.subgroup_size - 1)) == 0);
    CHECK(f.min_subgroup_size <= f.subgroup_size);
    CHECK(f.subgroup_size <= f.max_subgroup_size);
    CHECK(f.shared_memory_bytes >= 16384); // Vulkan's required minimum
    CHECK(f.push_constant_bytes >= 128);
    CHECK(f.max_workgroup_invocations >= 128);
    CHECK_FALSE(f.heaps.empty());
    CHECK(f.arch == vk::classify(f.classified_from));
    // lavapipe's subgroup is its vector width in floats: the three CTest runs really use 4, 8, 16.
    if (const char* width = std::getenv("LP_NATIVE_VECTOR_WIDTH"); width != nullptr && f.driver_name == "llvmpipe") {
        CHECK(f.subgroup_size == static_cast<std::uint32_t>(std::atoi(width)) / 32);
    }
    const auto all = vk::list_devices();
    REQUIRE(f.index < all.size());
    CHECK(all[f.index].name == f.name);
    CHECK(all[f.index].subgroup_size == f.subgroup_size);
}

TEST_CASE("vulkan device: selection by index, and indices that name no device")
{
    const auto count = vk::list_devices().size();
    vk::device first(0);
    CHECK(first.facts().index == 0);
    const std::string expected = "out of range: there are " + std::to_string(count);
    CHECK_THROWS_WITH_AS(vk::device(static_cast<int>(count)), doctest::Contains(expected.c_str()), qk::error);
    ::setenv("QKERN_VULKAN_DEVICE", "first", 1);
    CHECK_THROWS_WITH_AS(vk::device(), doctest::Contains("QKERN_VULKAN_DEVICE='first'"), qk::error);
    ::setenv("QKERN_VULKAN_DEVICE", "0", 1);
    CHECK(vk::device().facts().index == 0);
    ::unsetenv("QKERN_VULKAN_DEVICE");
}

TEST_CASE("vulkan device: transfers round-trip, out-of-range ones are qk::errors")
{
    const vk::device& dev = qk_test::vulkan_device();
    for (const auto kind : {vk::memory_kind::device, vk::memory_kind::staging}) {
        const vk::buffer b = dev.make_buffer(1000, kind);
        CHECK(b.size() == 1000);
        std::vector<unsigned char> in(1000), out(1000, 0);
        std::iota(in.begin(), in.end(), static_cast<unsigned char>(3));
        dev.upload(b, in.data(), in.size());
        dev.download(b, out.data(), out.size());
        CHECK(in == out);
        std::vector<unsigned char> part(10, 0);
        dev.download(b, part.data(), 10, 990);
        CHECK(std::equal(part.begin(), part.end(), in.begin() + 990));
        CHECK_THROWS_WITH_AS(dev.upload(b, in.data(), 11, 990), doctest::Contains("11 bytes at offset 990 exceed the buffer's 1000"),
                             qk::error);
        CHECK_THROWS_AS(dev.download(b, out.data(), 1001), qk::error);
    }
    CHECK(dev.make_buffer(0).size() == 4); // Vulkan has no empty buffers
}

namespace {

std::vector<qk::block_q8_0> ramp_blocks(std::size_t count, std::uint64_t seed)
{
    std::mt19937_64 rng(seed);
    std::vector<qk::block_q8_0> blocks(count);
    for (auto& b : blocks) {
        b.d = qk::fp32_to_fp16(0.01f);
        for (auto& q : b.qs) {
            q = static_cast<std::int8_t>(static_cast<int>(rng() % 255) - 127);
        }
    }
    return blocks;
}

} // namespace

TEST_CASE("vulkan device: a pipeline is built once per kernel and specialization")
{
    const vk::device& dev = qk_test::vulkan_device();
    const auto w = ramp_blocks(4 * 8, 1);
    const auto m = vk::upload_matrix<qk::block_q8_0>(dev, w, 4, 256);
    vk::gemv_workspace ws(dev);
    std::vector<float> x(256, 0.5f), y(4);
    vk::gemv(dev, ws, m, x, y);
    const std::size_t built = dev.pipelines_built();
    for (int i = 0; i < 5; ++i) {
        vk::gemv(dev, ws, m, x, y);
    }
    CHECK(dev.pipelines_built() == built);
    vk::step wrong = vk::gemv_step(m, ws.x(256), ws.y(4), ws.table(), dev.facts().max_workgroup_count_x);
    wrong.push.pop_back();
    CHECK_THROWS_WITH_AS(dev.run(wrong), doctest::Contains("given 4 and 8"), qk::error);
}

TEST_CASE("vulkan device: threads sharing one device get the single-threaded results")
{
    const vk::device& dev = qk_test::vulkan_device();
    constexpr std::size_t rows = 96, cols = 1024;
    const auto w = ramp_blocks(rows * cols / 32, 7);
    std::vector<float> x(cols);
    for (std::size_t i = 0; i < cols; ++i) {
        x[i] = static_cast<float>(i % 17) * 0.25f - 2.0f;
    }
    std::vector<float> expected(rows);
    {
        const auto m = vk::upload_matrix<qk::block_q8_0>(dev, w, rows, cols);
        vk::gemv_workspace ws(dev);
        vk::gemv(dev, ws, m, x, expected);
    }
    constexpr int threads = 4;
    std::vector<int> mismatches(threads, 0);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            // Each thread uploads its own copy and builds its own workspace: buffers are created,
            // written and read concurrently, and the pipeline cache is hit from every thread.
            const auto m = vk::upload_matrix<qk::block_q8_0>(dev, w, rows, cols);
            vk::gemv_workspace ws(dev);
            std::vector<float> y(rows);
            for (int i = 0; i < 10; ++i) {
                vk::gemv(dev, ws, m, x, y);
                if (std::memcmp(y.data(), expected.data(), rows * sizeof(float)) != 0) {
                    ++mismatches[t];
                }
            }
        });
    }
    for (auto& th : pool) {
        th.join();
    }
    for (int t = 0; t < threads; ++t) {
        CHECK(mismatches[t] == 0);
    }
}
