// Consumer test program for qkern::vulkan, built by the add_subdirectory and find_package projects
// where Vulkan is found: the target enables the backend (QKERN_ENABLE_VULKAN) through <qkern.hpp>
// and links the loader. Lists the Vulkan devices; on the first one, if any, solves a small
// triangular system whose every step is exact. No device is not a failure (the backend compiled
// and linked, which is what a consumer's build can check). Exits 1 if wrong.
#include <qkern.hpp>

#include <cstdio>
#include <optional>
#include <vector>

static_assert(qk::backend::vulkan::enabled, "qkern::vulkan must define QKERN_ENABLE_VULKAN");

int main()
{
    const std::vector<qk::backend::vulkan::device_facts> devices = qk::backend::vulkan::list_devices();
    std::printf("vulkan: %zu device(s)\n", devices.size());
    for (const auto& d : devices) {
        std::printf("  %u: %s (%.*s)\n", d.index, d.name.c_str(), static_cast<int>(qk::backend::vulkan::name(d.arch).size()),
                    qk::backend::vulkan::name(d.arch).data());
    }
    if (devices.empty()) {
        std::printf("vulkan: no device here; the backend compiled and linked, nothing run\n");
        return 0;
    }
    // [2 0; 1 4] X = [2; 9] has X = [1; 2], as in main.cpp.
    const float a[4] = {2.0f, -99.0f, 1.0f, 4.0f};
    const float b[2] = {2.0f, 9.0f};
    float x[2] = {0.0f, 0.0f};
    std::optional<qk::backend::vulkan::context> gpu;
    try {
        gpu.emplace();
    } catch (const qk::error& e) { // a device without what the backend needs
        std::printf("vulkan: device 0 not usable (%s); nothing run\n", e.what());
        return 0;
    }
    gpu->solve_tri(a, b, x, 2, 1, 1);
    std::printf("%s: solve_tri X = [%g, %g] (expected [1, 2])\n", gpu->name().c_str(), static_cast<double>(x[0]),
                static_cast<double>(x[1]));
    return x[0] == 1.0f && x[1] == 2.0f ? 0 : 1;
}
