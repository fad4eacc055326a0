// GPU architecture classification on synthetic device facts (no Vulkan device needed): each class
// from the facts its drivers report, the boundaries between neighbouring classes, and the
// per-class path choice (cooperative matrices stay off on NVIDIA Turing).
#include <doctest/doctest.h>

#include <backends/vulkan/architecture.hpp>

namespace vk = qk::backend::vulkan;

namespace {

vk::architecture_facts amd(std::uint32_t min, std::uint32_t max, std::uint32_t wavefronts, bool dot)
{
    vk::architecture_facts f;
    f.vendor_id = vk::vendor_amd;
    f.min_subgroup_size = min;
    f.max_subgroup_size = max;
    f.wavefronts_per_simd = wavefronts;
    f.integer_dot_product = dot;
    return f;
}

vk::architecture_facts nvidia(bool cooperative_matrix, std::uint32_t warps)
{
    vk::architecture_facts f;
    f.vendor_id = vk::vendor_nvidia;
    f.min_subgroup_size = 32;
    f.max_subgroup_size = 32;
    f.cooperative_matrix = cooperative_matrix;
    f.warps_per_sm = warps;
    return f;
}

vk::architecture_facts intel(std::uint32_t min, std::uint32_t max)
{
    vk::architecture_facts f;
    f.vendor_id = vk::vendor_intel;
    f.min_subgroup_size = min;
    f.max_subgroup_size = max;
    return f;
}

} // namespace

TEST_CASE("vulkan architecture: AMD GCN, RDNA1, RDNA2, RDNA3")
{
    CHECK(vk::classify(amd(64, 64, 10, false)) == vk::architecture::amd_gcn);
    CHECK(vk::classify(amd(64, 64, 10, true)) == vk::architecture::amd_gcn); // Vega 20 has dot products
    CHECK(vk::classify(amd(32, 64, 20, false)) == vk::architecture::amd_rdna1);
    CHECK(vk::classify(amd(32, 64, 20, true)) == vk::architecture::amd_rdna1);
    CHECK(vk::classify(amd(32, 64, 16, false)) == vk::architecture::amd_rdna2);
    CHECK(vk::classify(amd(32, 64, 16, true)) == vk::architecture::amd_rdna3);
    // Without the subgroup size range (an old driver), nothing can be told apart.
    CHECK(vk::classify(amd(0, 0, 16, true)) == vk::architecture::other);
    CHECK(vk::classify(amd(32, 32, 16, true)) == vk::architecture::other);
}

TEST_CASE("vulkan architecture: Intel Xe1 and Xe2")
{
    CHECK(vk::classify(intel(8, 32)) == vk::architecture::intel_xe1);
    CHECK(vk::classify(intel(16, 32)) == vk::architecture::intel_xe2);
    CHECK(vk::classify(intel(0, 0)) == vk::architecture::other);
}

TEST_CASE("vulkan architecture: NVIDIA pre-Turing, Turing, later")
{
    CHECK(vk::classify(nvidia(false, 64)) == vk::architecture::nvidia_pre_turing); // Pascal: no cooperative matrix
    CHECK(vk::classify(nvidia(false, 0)) == vk::architecture::nvidia_pre_turing);
    CHECK(vk::classify(nvidia(true, 32)) == vk::architecture::nvidia_turing);
    CHECK(vk::classify(nvidia(true, 48)) == vk::architecture::nvidia_later); // Ampere, Ada
    CHECK(vk::classify(nvidia(true, 64)) == vk::architecture::nvidia_later); // Hopper
    CHECK(vk::classify(nvidia(true, 0)) == vk::architecture::other);         // no VK_NV_shader_sm_builtins
}

TEST_CASE("vulkan architecture: other vendors, names and the cooperative-matrix path")
{
    vk::architecture_facts lavapipe;
    lavapipe.vendor_id = 0x10005; // Mesa's VK_VENDOR_ID_MESA
    lavapipe.min_subgroup_size = 4;
    lavapipe.max_subgroup_size = 4;
    CHECK(vk::classify(lavapipe) == vk::architecture::other);
    CHECK(vk::name(vk::architecture::amd_rdna3) == "AMD RDNA3");
    CHECK(vk::name(vk::architecture::nvidia_turing) == "NVIDIA Turing");
    CHECK(vk::name(vk::architecture::other) == "other");

    const auto turing = nvidia(true, 32);
    const auto ampere = nvidia(true, 48);
    CHECK_FALSE(vk::use_cooperative_matrix(vk::classify(turing), turing));
    CHECK(vk::use_cooperative_matrix(vk::classify(ampere), ampere));
    auto rdna3 = amd(32, 64, 16, true);
    CHECK_FALSE(vk::use_cooperative_matrix(vk::classify(rdna3), rdna3));
    rdna3.cooperative_matrix = true;
    CHECK(vk::use_cooperative_matrix(vk::classify(rdna3), rdna3));
}
