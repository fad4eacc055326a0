// Helpers shared by the test suites: golden-vector loading, byte and bit views, and the seeded
// random inputs of inputs.hpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <qkern.hpp>

#include "inputs.hpp"

namespace qk_test {

// Whether the directory of ggml's golden vectors (QKERN_GOLDEN_DIR, by default ../shared/golden
// beside the repository) exists. The golden test cases carry doctest::skip(!golden_present()):
// without the directory they are reported as skipped (doctest's summary counts them) and the test
// case "golden: the vectors' directory" says where they were looked for; a directory that lacks
// one of the files fails the test case that reads it. CI checks the directory before it builds.
inline bool golden_present()
{
    std::error_code ec;
    return std::filesystem::is_directory(QKERN_GOLDEN_DIR, ec);
}

inline std::string golden_path(const std::string& name)
{
    return std::string(QKERN_GOLDEN_DIR) + "/" + name;
}

// Reads a golden file as an array of T; throws (failing the test) if it is missing or its size
// is not a whole number of T.
template <class T>
std::vector<T> load(const std::string& name)
{
    std::ifstream in(golden_path(name), std::ios::binary);
    if (!in) {
        throw std::runtime_error("cannot open golden file " + golden_path(name));
    }
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.size() % sizeof(T) != 0) {
        throw std::runtime_error("golden file " + name + " is not a whole number of elements");
    }
    std::vector<T> out(bytes.size() / sizeof(T));
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
}

template <class T>
std::span<const std::uint8_t> bytes_of(const std::vector<T>& v)
{
    return {reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * sizeof(T)};
}

inline std::uint32_t bits(float f)
{
    return std::bit_cast<std::uint32_t>(f);
}

// The suites call the shared Gaussian inputs unqualified, as normal(n, scale, seed).
using qk_inputs::normal;

} // namespace qk_test
