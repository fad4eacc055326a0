// qk::backend::vulkan::classify: which GPU architecture a Vulkan device is, from the facts its
// driver reports (vendor, subgroup size range, vendor extensions), so kernels can pick a path per
// class. Plain data in, an enum out: no Vulkan header is needed, and tests feed it synthetic facts.
#pragma once

#include <cstdint>
#include <string_view>

namespace qk::backend::vulkan {

enum class architecture {
    other,
    amd_gcn,
    amd_rdna1,
    amd_rdna2,
    amd_rdna3,
    intel_xe1,
    intel_xe2,
    nvidia_pre_turing, // no cooperative matrix support
    nvidia_turing,     // 32 warps per SM
    nvidia_later,      // Ampere and later (48 warps per SM, or more)
};

inline constexpr std::uint32_t vendor_amd = 0x1002;
inline constexpr std::uint32_t vendor_intel = 0x8086;
inline constexpr std::uint32_t vendor_nvidia = 0x10de;

[[nodiscard]] constexpr std::string_view name(architecture a) noexcept
{
    switch (a) {
    case architecture::amd_gcn: return "AMD GCN";
    case architecture::amd_rdna1: return "AMD RDNA1";
    case architecture::amd_rdna2: return "AMD RDNA2";
    case architecture::amd_rdna3: return "AMD RDNA3";
    case architecture::intel_xe1: return "Intel Xe1";
    case architecture::intel_xe2: return "Intel Xe2";
    case architecture::nvidia_pre_turing: return "NVIDIA pre-Turing";
    case architecture::nvidia_turing: return "NVIDIA Turing";
    case architecture::nvidia_later: return "NVIDIA Ampere or later";
    case architecture::other: break;
    }
    return "other";
}

// What classification looks at. A zero means the driver did not report it (the extension that
// carries it is missing).
struct architecture_facts {
    std::uint32_t vendor_id = 0;
    std::uint32_t min_subgroup_size = 0; // VK_EXT_subgroup_size_control (core in 1.3)
    std::uint32_t max_subgroup_size = 0;
    std::uint32_t wavefronts_per_simd = 0; // VK_AMD_shader_core_properties
    bool integer_dot_product = false;      // VK_KHR_shader_integer_dot_product, 4x8-bit accelerated
    bool cooperative_matrix = false;       // VK_KHR_cooperative_matrix or VK_NV_cooperative_matrix
    std::uint32_t warps_per_sm = 0;        // VK_NV_shader_sm_builtins: shaderWarpsPerSM
};

// AMD: GCN runs only wave64; RDNA runs wave32 and wave64, RDNA1 with 20 wavefronts per SIMD
// (RDNA2 and 3 have 16), RDNA3 with accelerated 8-bit dot products. Intel: Xe2 has no SIMD8
// mode (smallest subgroup 16). NVIDIA: cooperative matrices arrived with Turing, whose SMs hold
// 32 warps; Ampere and later hold 48 or more.
[[nodiscard]] constexpr architecture classify(const architecture_facts& f) noexcept
{
    switch (f.vendor_id) {
    case vendor_amd:
        if (f.min_subgroup_size == 64 && f.max_subgroup_size == 64) {
            return architecture::amd_gcn;
        }
        if (f.min_subgroup_size == 32 && f.max_subgroup_size == 64) {
            if (f.wavefronts_per_simd == 20) {
                return architecture::amd_rdna1;
            }
            return f.integer_dot_product ? architecture::amd_rdna3 : architecture::amd_rdna2;
        }
        return architecture::other;
    case vendor_intel:
        if (f.min_subgroup_size == 16) {
            return architecture::intel_xe2;
        }
        return f.min_subgroup_size == 8 ? architecture::intel_xe1 : architecture::other;
    case vendor_nvidia:
        if (!f.cooperative_matrix) {
            return architecture::nvidia_pre_turing;
        }
        if (f.warps_per_sm == 32) {
            return architecture::nvidia_turing;
        }
        return f.warps_per_sm >= 48 ? architecture::nvidia_later : architecture::other;
    default:
        return architecture::other;
    }
}

// Paths chosen per class. The cooperative-matrix path stays off on Turing, where that driver path
// is known to miscompile, and wherever the device lacks cooperative matrices.
[[nodiscard]] constexpr bool use_cooperative_matrix(architecture a, const architecture_facts& f) noexcept
{
    return f.cooperative_matrix && a != architecture::nvidia_turing && a != architecture::nvidia_pre_turing;
}

} // namespace qk::backend::vulkan
