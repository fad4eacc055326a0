// The Vulkan tests' shared device: created once by main.cpp (which exits 77, "skipped", where
// no Vulkan device exists) and used by every test case.
#pragma once

#include <backends/vulkan/device.hpp>

namespace qk_test {

qk::backend::vulkan::device& vulkan_device();

} // namespace qk_test
