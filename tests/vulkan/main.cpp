// The Vulkan test executable: doctest's runner around one shared device. With no Vulkan device
// (no loader driver, or a driver that reports none) it prints why and exits 77, which CTest
// reports as skipped, never as passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <memory>

#include <dlfcn.h>
#include <link.h>

#include "support.hpp"

namespace {
std::unique_ptr<qk::backend::vulkan::device> shared_device;

// Marks every library loaded so far (the Vulkan loader, the driver and what it pulls in) as never
// to be unloaded. Destroying the last instance unloads the driver, and LeakSanitizer, which reports
// at exit, could then neither name the module of the driver stack's exit-time allocations nor
// match them to tests/vulkan/lsan.supp.
void keep_loaded_libraries()
{
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void*) {
            if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') {
                if (void* handle = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE); handle != nullptr) {
                    dlclose(handle);
                }
            }
            return 0;
        },
        nullptr);
}
} // namespace

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
    keep_loaded_libraries();
    const auto& f = shared_device->facts();
    std::printf("Vulkan device %u: %s (%s), subgroup size %u, %u bytes of shared memory, fp64 %s\n", f.index, f.name.c_str(),
                f.driver_name.c_str(), f.subgroup_size, f.shared_memory_bytes, f.fp64_arithmetic ? "yes" : "no");
    doctest::Context context(argc, argv);
    const int rc = context.run();
    shared_device.reset();
    return rc;
}
