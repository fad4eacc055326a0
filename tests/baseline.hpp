// The reference kernels built in a translation unit of their own with floating-point contraction
// off and no FMA (tests/baseline.cpp, flags set in tests/CMakeLists.txt), so that the other test
// files, built with the flags of the build, can check that the results do not depend on them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace baseline {

// format: the index of a qk::format (qk::all_formats order). importance may be empty.
std::vector<std::uint8_t> quantize(int format, std::span<const float> x, std::span<const float> importance);

// Generic dot of one weight row with one activation row (raw block bytes).
float dot(int weight_format, std::span<const std::uint8_t> w, std::span<const std::uint8_t> a);

} // namespace baseline
