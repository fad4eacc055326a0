// qk::backend::vulkan::measure_read_bandwidth: the device's streaming-read bandwidth, measured by
// a kernel that reads a buffer once, the ceiling a mat-vec's weight reads are compared against
// (qk bench --backend vulkan), as the CPU's is in backends/cpu/read_bandwidth.hpp.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "device.hpp"
#include "shaders/generated/read_bandwidth.hpp"

namespace qk::backend::vulkan {

// Bytes per second over the best of `repeats` passes over a buffer of `bytes` (default 256 MiB,
// beyond any GPU cache; capped at the device's largest storage buffer).
[[nodiscard]] inline double measure_read_bandwidth(const device& dev, std::size_t bytes = std::size_t{256} << 20, int repeats = 5)
{
    static constexpr kernel read{"read_bandwidth", spirv::read_bandwidth, 2, 4};
    constexpr std::uint32_t workgroup = 256;
    constexpr std::uint32_t groups = 1024;
    bytes = std::min<std::size_t>(bytes, dev.facts().max_storage_buffer_bytes) / 16 * 16;
    const buffer data = dev.make_buffer(bytes);
    const buffer sink = dev.make_buffer(std::size_t{workgroup} * groups * 4);
    step s;
    s.what = &read;
    s.specialization = {workgroup};
    s.buffers = {&data, &sink};
    s.push = {static_cast<std::uint32_t>(bytes / 16)};
    s.groups_x = groups;
    dev.run(s); // builds the pipeline and touches the memory
    double best = 1e300;
    for (int r = 0; r < repeats; ++r) {
        const auto start = std::chrono::steady_clock::now();
        dev.run(s);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return static_cast<double>(bytes) / best;
}

} // namespace qk::backend::vulkan
