// The Vulkan test executable: doctest's runner around one shared device. With no Vulkan device
// (no loader driver, or a driver that reports none) it prints why and exits 77, which CTest
// reports as skipped, never as passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <memory>

#include "support.hpp"

namespace {
std::unique_ptr<qk::backend::vulkan::device> shared_device;
}

qk::backend::vulkan::device& qk_test::vulkan_device()
{
    return *shared_device;
}

int main(int argc, char** argv)
{
    try {
        shared_device = std::make_unique<qk::backend::vulkan::device>();
    } catch (const qk::error& e) {
        std::printf("skipped: no usable Vulkan device (%s)\n", e.what());
        return 77;
    }
    const auto& f = shared_device->facts();
    std::printf("Vulkan device %u: %s (%s), subgroup size %u, %u bytes of shared memory, fp64 %s\n", f.index, f.name.c_str(),
                f.driver_name.c_str(), f.subgroup_size, f.shared_memory_bytes, f.fp64_arithmetic ? "yes" : "no");
    doctest::Context context(argc, argv);
    const int rc = context.run();
    shared_device.reset();
    return rc;
}
