// qk::backend::vulkan::solve_tri: every variant against a double-precision reference and against
// the CPU solve, with error bounds derived for the GPU's arithmetic; every placement of A and the
// working tile (the device's own choice, and ones forced by a smaller shared-memory budget);
// in-place solves; grids taller than one row of workgroups; and every error path (X untouched).
#include <doctest/doctest.h>

#include <backends/vulkan/solve_tri.hpp>
#include <kernels/solve_tri.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "../gpu_reference.hpp"
#include "../solve_tri_reference.hpp"
#include "support.hpp"

namespace vk = qk::backend::vulkan;
using qk::tri_options;
using qk_test::vulkan_device;
using qk_test::gpu::all_variants;
using qk_test::gpu::describe;
// The shader divides, and Vulkan allows x / y an error of 2.5 ulp (gpu_reference.hpp).
constexpr auto check_against_cpu = [](const auto& p, const auto& x, std::size_t n, std::size_t k, std::size_t batch,
                                      const tri_options& opt) {
    return qk_test::gpu::check_solve_against_cpu(p, x, n, k, batch, opt, qk_test::gpu::division_extra_roundings);
};

namespace {


std::vector<float> device_solve(vk::solve_tri_workspace& ws, const qk_inputs::tri_problem_data<float>& p, std::size_t n, std::size_t k,
                                std::size_t batch, const tri_options& opt)
{
    std::vector<float> x(p.b.size(), std::numeric_limits<float>::quiet_NaN());
    vk::solve_tri(vulkan_device(), ws, p.a.data(), p.b.data(), x.data(), static_cast<std::int64_t>(n), static_cast<std::int64_t>(k),
                  static_cast<std::int64_t>(batch), opt);
    return x;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b)
{
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::uint32_t shared_bytes()
{
    return vulkan_device().facts().shared_memory_bytes;
}

// The smallest order whose triangle the plan keeps out of shared memory even for one right-hand
// side (the case that leaves it the most room), on this device.
std::size_t first_global_n()
{
    std::size_t n = 101;
    while (vk::plan_solve_tri(static_cast<std::int64_t>(n), 1, shared_bytes()).a_in_shared) {
        ++n;
    }
    return n;
}

} // namespace

TEST_CASE("vulkan solve_tri: every variant and size within the derived error bounds, and near the CPU solve")
{
    vk::solve_tri_workspace ws(vulkan_device());
    const std::size_t big = first_global_n();
    MESSAGE("A's triangle leaves shared memory from n = ", big);
    // Two of the three k for each (variant, n), taken in turn: every variant meets every n and
    // every k, at a third fewer pipelines to build (which dominates the time on a CPU device).
    const std::size_t ks[] = {1, 5, 40};
    const std::size_t ns[] = {1, 2, 7, 33, 64, 100, big};
    const std::vector<tri_options> variants = all_variants();
    std::size_t checked = 0;
    for (std::size_t v = 0; v < variants.size(); ++v) {
        const tri_options& opt = variants[v];
        for (std::size_t ni = 0; ni < std::size(ns); ++ni) {
            const std::size_t n = ns[ni];
            for (const std::size_t k : {ks[(v + ni) % 3], ks[(v + ni + 1) % 3]}) {
                CAPTURE(describe(opt));
                CAPTURE(n);
                CAPTURE(k);
                const vk::solve_tri_plan plan = vk::plan_solve_tri(static_cast<std::int64_t>(n), static_cast<std::int64_t>(k), shared_bytes());
                // Which path a case exercises is part of what it tests.
                REQUIRE(plan.a_in_shared == (n < big));
                REQUIRE(plan.tile_in_shared);
                const std::size_t batch = n * k < 400 ? 3 : 2;
                const auto p = qk_inputs::random_tri_problem<float>(n, k, batch, opt, static_cast<std::uint32_t>(n * 1000 + k));
                checked += check_against_cpu(p, device_solve(ws, p, n, k, batch, opt), n, k, batch, opt);
            }
        }
    }
    MESSAGE(checked, " elements checked");
}

TEST_CASE("vulkan solve_tri: every placement of A and the tile, forced by smaller shared-memory budgets")
{
    vk::solve_tri_workspace ws(vulkan_device());
    for (const tri_options& opt : all_variants()) {
        for (const std::size_t n : {33}) {
            for (const std::size_t k : {5, 70}) {
                const auto ni = static_cast<std::int64_t>(n);
                const auto ki = static_cast<std::int64_t>(k);
                const auto triangle_bytes = static_cast<std::uint32_t>(n * (n + 1) / 2 * sizeof(float));
                struct forced {
                    const char* name;
                    std::uint32_t budget;
                    bool a_in_shared;
                    bool tile_in_shared;
                };
                // One float short of the triangle: the tile alone. n floats: not even one column
                // beside the unused triangle's float, so both stay in global memory.
                const forced placements[] = {{"tile only", triangle_bytes - 4, false, true},
                                             {"global only", static_cast<std::uint32_t>(n * sizeof(float)), false, false}};
                const auto p = qk_inputs::random_tri_problem<float>(n, k, 2, opt, static_cast<std::uint32_t>(n * 7 + k));
                for (const forced& f : placements) {
                    CAPTURE(describe(opt));
                    CAPTURE(n);
                    CAPTURE(k);
                    CAPTURE(f.name);
                    const vk::solve_tri_plan plan = vk::plan_solve_tri(ni, ki, f.budget);
                    REQUIRE(plan.a_in_shared == f.a_in_shared);
                    REQUIRE(plan.tile_in_shared == f.tile_in_shared);
                    std::vector<float> x(p.b.size(), std::numeric_limits<float>::quiet_NaN());
                    vk::solve_tri(vulkan_device(), ws, p.a.data(), p.b.data(), x.data(), ni, ki, 2, opt, plan);
                    check_against_cpu(p, x, n, k, 2, opt);
                }
            }
        }
    }
}

TEST_CASE("vulkan solve_tri in place: X == B on the host, and one buffer as both b and x of the step")
{
    const vk::device& dev = vulkan_device();
    vk::solve_tri_workspace ws(dev);
    for (const tri_options& opt : all_variants()) {
        for (const std::size_t n : {7, 100}) {
            constexpr std::size_t k = 40;
            constexpr std::size_t batch = 2;
            CAPTURE(describe(opt));
            CAPTURE(n);
            const auto ni = static_cast<std::int64_t>(n);
            const auto p = qk_inputs::random_tri_problem<float>(n, k, batch, opt, 31);
            const std::vector<float> apart = device_solve(ws, p, n, k, batch, opt);
            std::vector<float> in_place = p.b;
            vk::solve_tri(dev, ws, p.a.data(), in_place.data(), in_place.data(), ni, k, batch, opt);
            CHECK(same_bits(apart, in_place));

            for (const std::uint32_t budget : {shared_bytes(), static_cast<std::uint32_t>(n * sizeof(float))}) {
                const vk::solve_tri_plan plan = vk::plan_solve_tri(ni, k, budget);
                const vk::buffer a = dev.make_buffer(p.a.size() * sizeof(float));
                const vk::buffer bx = dev.make_buffer(p.b.size() * sizeof(float));
                dev.upload(a, p.a.data(), p.a.size() * sizeof(float));
                dev.upload(bx, p.b.data(), p.b.size() * sizeof(float));
                dev.run(vk::solve_tri_step(a, bx, bx, batch, opt, plan, dev.facts().max_workgroup_count_x));
                std::vector<float> shared_buffer(p.b.size());
                dev.download(bx, shared_buffer.data(), shared_buffer.size() * sizeof(float));
                CAPTURE(plan.tile_in_shared);
                check_against_cpu(p, shared_buffer, n, k, batch, opt);
            }
        }
    }
}

TEST_CASE("vulkan solve_tri: grids of several rows of workgroups, and more batches than one row holds")
{
    const vk::device& dev = vulkan_device();
    vk::solve_tri_workspace ws(dev);
    SUBCASE("a step built for a few workgroups per row (the last row part empty)")
    {
        for (const tri_options& opt : {tri_options{}, tri_options{false, false, false}}) {
            constexpr std::size_t n = 100;
            constexpr std::size_t k = 70;
            constexpr std::size_t batch = 4;
            CAPTURE(describe(opt));
            const vk::solve_tri_plan plan = vk::plan_solve_tri(n, k, shared_bytes());
            const auto p = qk_inputs::random_tri_problem<float>(n, k, batch, opt, 37);
            const vk::buffer a = dev.make_buffer(p.a.size() * sizeof(float));
            const vk::buffer b = dev.make_buffer(p.b.size() * sizeof(float));
            const vk::buffer x = dev.make_buffer(p.b.size() * sizeof(float));
            dev.upload(a, p.a.data(), p.a.size() * sizeof(float));
            dev.upload(b, p.b.data(), p.b.size() * sizeof(float));
            const std::uint32_t groups = (k + plan.columns - 1) / plan.columns * batch;
            REQUIRE(groups > batch); // several tiles per batch
            // The narrowest row that leaves the last one part empty.
            std::uint32_t row = 3;
            while (groups % row == 0) {
                ++row;
            }
            const vk::step s = vk::solve_tri_step(a, b, x, batch, opt, plan, row);
            REQUIRE(s.groups_x == row);
            REQUIRE(s.groups_y == (groups + row - 1) / row);
            REQUIRE(s.groups_y > 1);
            dev.run(s);
            std::vector<float> out(p.b.size());
            dev.download(x, out.data(), out.size() * sizeof(float));
            check_against_cpu(p, out, n, k, batch, opt);
        }
    }
    SUBCASE("more batches than the device's max_workgroup_count_x")
    {
        const std::size_t batch = std::size_t{dev.facts().max_workgroup_count_x} + 5;
        if (batch > 1'100'000) {
            MESSAGE("skipped: max_workgroup_count_x is ", dev.facts().max_workgroup_count_x, ", too many batches to test quickly");
            return;
        }
        constexpr std::size_t n = 2;
        constexpr std::size_t k = 1;
        const tri_options opt{true, false, false};
        const auto p = qk_inputs::random_tri_problem<float>(n, k, batch, opt, 41);
        const std::vector<float> x = device_solve(ws, p, n, k, batch, opt);
        check_against_cpu(p, x, n, k, batch, opt);
    }
}

TEST_CASE("vulkan solve_tri never reads the other triangle, nor the diagonal of a unit solve")
{
    vk::solve_tri_workspace ws(vulkan_device());
    for (const tri_options& opt : all_variants()) {
        for (const std::uint32_t budget : {shared_bytes(), std::uint32_t{33 * 4}}) {
            constexpr std::size_t n = 33;
            constexpr std::size_t k = 5;
            CAPTURE(describe(opt));
            CAPTURE(budget);
            auto p = qk_inputs::random_tri_problem<float>(n, k, 2, opt, 43);
            const vk::solve_tri_plan plan = vk::plan_solve_tri(n, k, budget);
            std::vector<float> before(p.b.size());
            vk::solve_tri(vulkan_device(), ws, p.a.data(), p.b.data(), before.data(), n, k, 2, opt, plan);
            for (std::size_t q = 0; q < 2; ++q) {
                for (std::size_t i = 0; i < n; ++i) {
                    for (std::size_t j = 0; j < n; ++j) {
                        const bool read = opt.lower ? j < i : j > i;
                        if (!read && (i != j || opt.unit)) {
                            p.a[(q * n + i) * n + j] = i == j ? 0.0f : std::numeric_limits<float>::quiet_NaN();
                        }
                    }
                }
            }
            std::vector<float> after(p.b.size());
            vk::solve_tri(vulkan_device(), ws, p.a.data(), p.b.data(), after.data(), n, k, 2, opt, plan);
            CHECK(same_bits(before, after));
        }
    }
}

TEST_CASE("vulkan solve_tri rejects bad arguments with a qk::error naming them, before writing X")
{
    const vk::device& dev = vulkan_device();
    vk::solve_tri_workspace ws(dev);
    const auto p = qk_inputs::random_tri_problem<float>(4, 3, 2, {}, 29);
    std::vector<float> x(p.b.size(), 42.0f);
    const auto untouched = [&] {
        for (const float v : x) {
            if (v != 42.0f) {
                return false;
            }
        }
        return true;
    };
    const auto rejects = [&](auto call, const std::string& needle) {
        try {
            call();
            FAIL("no qk::error; expected one mentioning \"", needle, "\"");
        } catch (const qk::error& e) {
            INFO("message: ", e.what());
            CHECK(std::string(e.what()).find("qk::backend::vulkan::solve_tri") != std::string::npos);
            CHECK(std::string(e.what()).find(needle) != std::string::npos);
        }
        CHECK(untouched());
    };
    const float* a = p.a.data();
    const float* b = p.b.data();
    float* out = x.data();
    rejects([&] { vk::solve_tri(dev, ws, a, b, out, 0, 3, 2); }, "n = 0");
    rejects([&] { vk::solve_tri(dev, ws, a, b, out, 4, 0, 2); }, "k = 0");
    rejects([&] { vk::solve_tri(dev, ws, a, b, out, 4, 3, 0); }, "batch = 0");
    rejects([&] { vk::solve_tri(dev, ws, a, b, out, -4, 3, 2); }, "n = -4");
    rejects([&] { vk::solve_tri(dev, ws, nullptr, b, out, 4, 3, 2); }, "A is a null pointer");
    rejects([&] { vk::solve_tri(dev, ws, a, nullptr, out, 4, 3, 2); }, "B is a null pointer");
    rejects([&] { vk::solve_tri(dev, ws, a, b, nullptr, 4, 3, 2); }, "X is a null pointer");
    rejects([&] { vk::solve_tri(dev, ws, a, b, out, std::int64_t{1} << 21, 1, 1); }, "exceed the supported size");
    // Within the CPU's limits but past any storage buffer (2^32 floats of A): checked before A is read.
    rejects([&] { vk::solve_tri(dev, ws, a, b, out, std::int64_t{1} << 16, 1, 1); }, "largest storage buffer");
    rejects([&] { vk::solve_tri(dev, ws, a, b, out, 4, 3, 2, {}, vk::plan_solve_tri(5, 3, shared_bytes())); }, "does not fit n = 4, k = 3");

    // A zero pivot: its batch and row, in every variant that reads the diagonal.
    std::vector<float> singular = p.a;
    singular[1 * 16 + 2 * 4 + 2] = 0.0f;
    for (const tri_options& opt : all_variants()) {
        CAPTURE(describe(opt));
        if (opt.unit) {
            vk::solve_tri(dev, ws, singular.data(), b, out, 4, 3, 2, opt); // ignores the stored diagonal
            CHECK(!untouched());
            std::fill(x.begin(), x.end(), 42.0f);
        } else {
            rejects([&] { vk::solve_tri(dev, ws, singular.data(), b, out, 4, 3, 2, opt); }, "zero on its diagonal at batch 1, row 2");
        }
    }

    // The step builder refuses buffers too small for the plan.
    const vk::buffer small = dev.make_buffer(16);
    CHECK_THROWS_AS((void)vk::solve_tri_step(small, small, small, 2, {}, vk::plan_solve_tri(4, 3, shared_bytes()), 100), qk::error);
}
