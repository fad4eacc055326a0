// qk::backend::gpu::device_index_from_environment: the device a GPU backend's environment variable
// (QKERN_VULKAN_DEVICE, QKERN_METAL_DEVICE) names when a device is made without an index. Both
// backends read it alike and reject a bad value in the same words.
#pragma once

#include <charconv>
#include <cstdlib>
#include <string_view>
#include <system_error>

#include "../../kernels/error.hpp"

namespace qk::backend::gpu {

// No machine has more devices; the bound keeps a typo (a pasted device id, say) from reading as an
// index and reaching the backend's "out of range" check as a huge number.
inline constexpr int max_device_index = 1000000;

// The index `variable` holds (decimal digits, 0 to max_device_index), or -1 when it is unset or
// empty. Anything else is a qk::error: "qk::backend::<backend>: <variable>='<value>' is not a
// device index". Whether the index names a device is the backend's check.
[[nodiscard]] inline int device_index_from_environment(const char* variable, std::string_view backend)
{
    const char* value = std::getenv(variable);
    if (value == nullptr || *value == '\0') {
        return -1;
    }
    const std::string_view text(value);
    int index = -1;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), index);
    if (error != std::errc() || end != text.data() + text.size() || index < 0 || index > max_device_index) {
        qk::detail::fail("qk::backend::", backend, ": ", variable, "='", text, "' is not a device index");
    }
    return index;
}

} // namespace qk::backend::gpu
