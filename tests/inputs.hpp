// Seeded random inputs shared by the tests, the benchmarks and the qk tool: Gaussian and uniform
// vectors, random blocks of every format, triangular systems. Each helper names its engine and
// distribution and draws in a fixed order, because expected results and the tool's output depend
// on these exact values: a helper's draws never change, a new need gets a new helper or parameter.
#pragma once

#include <kernels/formats.hpp>
#include <kernels/solve_tri.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

namespace qk_inputs {

// n draws of `distribution` from `engine`, in order. Both are used in place, not copied, so a
// caller can go on drawing from them (std::normal_distribution keeps a spare value between calls).
template <class Distribution, class Engine>
std::vector<typename std::remove_cvref_t<Distribution>::result_type> draws(std::size_t n, Distribution&& distribution, Engine& engine)
{
    std::vector<typename std::remove_cvref_t<Distribution>::result_type> values(n);
    for (auto& v : values) {
        v = distribution(engine);
    }
    return values;
}

// Gaussian values: std::normal_distribution<float>(0, 1) times `scale`, from Engine(seed) (the GPU
// suites' activations come from std::mt19937_64). The standard leaves the distribution's
// algorithm to the library, so the values repeat with one standard library, not across libraries
// (portable_normal's do).
template <class Engine = std::mt19937>
std::vector<float> normal(std::size_t n, float scale, typename Engine::result_type seed)
{
    Engine engine(seed);
    std::normal_distribution<float> unit(0.0f, 1.0f);
    std::vector<float> values(n);
    for (auto& v : values) {
        v = unit(engine) * scale;
    }
    return values;
}

// Values from std::uniform_real_distribution<float>(low, high), from Engine(seed).
template <class Engine = std::mt19937>
std::vector<float> uniform(std::size_t n, float low, float high, typename Engine::result_type seed)
{
    Engine engine(seed);
    return draws(n, std::uniform_real_distribution<float>(low, high), engine);
}

// Gaussian-ish values that are the same on every platform: std::mt19937's output sequence is
// fixed by the standard, but std::normal_distribution's algorithm is not, so each value is the sum
// of 12 uniforms (Irwin-Hall: mean 6, variance 1), centred and multiplied by sigma in double.
inline std::vector<float> portable_normal(std::size_t count, std::mt19937& engine, double sigma = 1.0)
{
    std::vector<float> values(count);
    for (float& v : values) {
        double sum = 0.0;
        for (int k = 0; k < 12; ++k) {
            sum += static_cast<double>(engine()) / 4294967296.0;
        }
        v = static_cast<float>(sigma * (sum - 6.0));
    }
    return values;
}

// The same from a fresh std::mt19937(seed), sigma 1 (qk tour's weights, qk sample's logits).
inline std::vector<float> portable_normal(std::size_t count, std::uint32_t seed)
{
    std::mt19937 engine(seed);
    return portable_normal(count, engine);
}

// Random GGUF blocks whose scales keep every product in float's normal range: random bytes, then
// per block a scale from U(1e-3, 1e-2) (MXFP4: an exponent for 2^-9 .. 2^6, halved; NVFP4: per
// sub-block a UE4M3 byte for 2^-2 .. 3.75, halved), and Q8_0 codes kept in the quantizer's range [-127, 127]. A mat-vec's result is defined for any valid
// block, not only for those a quantizer would choose, and quantizing large matrices with the IQ4
// search would cost the suites seconds.
template <class Block>
std::vector<Block> random_blocks(std::size_t count, std::uint64_t seed)
{
    std::mt19937_64 engine(seed);
    std::uniform_real_distribution<float> scale(1e-3f, 1e-2f);
    std::vector<Block> blocks(count);
    for (auto& block : blocks) {
        auto* raw = reinterpret_cast<unsigned char*>(&block);
        for (std::size_t i = 0; i < sizeof(Block); i += 8) {
            const std::uint64_t word = engine();
            std::memcpy(raw + i, &word, std::min<std::size_t>(8, sizeof(Block) - i));
        }
        if constexpr (std::is_same_v<Block, qk::block_mxfp4>) {
            block.e = static_cast<std::uint8_t>(118 + engine() % 16);
        } else if constexpr (std::is_same_v<Block, qk::block_nvfp4>) {
            for (auto& d : block.d) {
                d = static_cast<std::uint8_t>(0x28 + engine() % 32);
            }
        } else if constexpr (std::is_same_v<Block, qk::block_q8_K>) {
            block.d = scale(engine);
        } else {
            block.d = qk::fp32_to_fp16(scale(engine));
        }
        if constexpr (std::is_same_v<Block, qk::block_q8_0>) {
            for (auto& q : block.qs) {
                q = static_cast<std::int8_t>(std::max<int>(q, -127));
            }
        }
    }
    return blocks;
}

// Random codes under one moderate scale, 0.01 (MXFP4: an exponent for 2^-7 .. 2^0, halved; NVFP4:
// per sub-block a UE4M3 byte for 0.5 .. 1.875, halved), for
// speed measurements: a kernel's speed does not depend on the values, and quantizing a 14336 x
// 4096 matrix with the IQ4 quantizers would take half a minute.
template <class Block>
std::vector<Block> random_blocks_fixed_scale(std::size_t count, std::uint32_t seed)
{
    std::mt19937 engine(seed);
    std::vector<Block> blocks(count);
    auto* bytes = reinterpret_cast<unsigned char*>(blocks.data());
    for (std::size_t i = 0; i < count * sizeof(Block); ++i) {
        bytes[i] = static_cast<unsigned char>(engine());
    }
    for (Block& b : blocks) {
        if constexpr (std::is_same_v<Block, qk::block_mxfp4>) {
            b.e = static_cast<std::uint8_t>(120 + engine() % 8);
        } else if constexpr (std::is_same_v<Block, qk::block_nvfp4>) {
            for (auto& d : b.d) {
                d = static_cast<std::uint8_t>(0x30 + engine() % 16);
            }
        } else if constexpr (std::is_same_v<Block, qk::block_q8_K>) {
            b.d = 0.01f;
        } else {
            b.d = qk::fp32_to_fp16(0.01f);
        }
    }
    return blocks;
}

// `batch` triangular systems, row-major: the n x n matrices A, then the right-hand sides B (n x k
// each; k x n for right solves).
template <class T>
struct tri_problem_data {
    std::vector<T> a;
    std::vector<T> b;
};

// A random well-conditioned problem as ggml's tests and the golden vectors draw it: diagonal
// magnitudes in [1, 2] with random signs, off-diagonal entries U(-1, 1) / sqrt(n), and junk in
// [-100, 100] in the triangle a solve must not read.
template <class T>
tri_problem_data<T> random_tri_problem(std::size_t n, std::size_t k, std::size_t batch, const qk::tri_options& opt, std::uint32_t seed)
{
    std::mt19937 rng(seed);
    std::uniform_real_distribution<T> unit(-1, 1);
    std::uniform_real_distribution<T> junk(-100, 100);
    tri_problem_data<T> p{std::vector<T>(n * n * batch), std::vector<T>(n * k * batch)};
    const T off = T(1) / std::sqrt(static_cast<T>(n));
    for (std::size_t q = 0; q < batch; ++q) {
        for (std::size_t i = 0; i < n; ++i) {
            for (std::size_t j = 0; j < n; ++j) {
                T& v = p.a[(q * n + i) * n + j];
                if (i == j) {
                    v = (unit(rng) < 0 ? T(-1) : T(1)) * (T(1) + std::abs(unit(rng)));
                } else if (opt.lower ? j < i : j > i) {
                    v = unit(rng) * off;
                } else {
                    v = junk(rng);
                }
            }
        }
    }
    for (auto& v : p.b) {
        v = unit(rng);
    }
    return p;
}

} // namespace qk_inputs
