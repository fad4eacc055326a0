// qk::quantize and qk::dequantize: float rows <-> GGUF blocks, for every block format.
// `quantize` is the model-file quantizer, byte-exact with what GGUF-writing tools produce, on an
// architecture tag (SIMD kernels exist for the activation formats Q8_0 and Q8_K; every tag gives
// the reference's bytes). Arguments are checked first: on a qk::error nothing has been written.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "error.hpp"
#include "arch.hpp"
#include "dispatch.hpp"
#include "formats.hpp"
#include "quantize/generic.hpp"
#include "quantize/sse4_2.hpp"
#include "quantize/avx2.hpp"
#include "quantize/avx512bw.hpp"
#include "quantize/neon64.hpp"

namespace qk {
namespace detail {

template <class Block>
void check_block_shapes(const char* function, std::size_t values, std::size_t blocks, const char* blocks_name)
{
    constexpr std::size_t size = format_traits<Block>::block_size;
    if (values % size != 0) {
        fail(function, '<', format_traits<Block>::name, ">: the float span has ", values, " values, not a multiple of the block size ",
             size);
    }
    if (blocks != values / size) {
        fail(function, '<', format_traits<Block>::name, ">: ", blocks_name, " has ", blocks, " blocks but ", values, " values make ",
             values / size);
    }
}

template <class Block>
[[noreturn]] void fail_scale(std::size_t block, float amax)
{
    constexpr std::size_t size = format_traits<Block>::block_size;
    fail("qk::quantize<", format_traits<Block>::name, ">: block ", block, " (x[", block * size, "..", block * size + size - 1,
         "], max |x| = ", amax, ") cannot be encoded: its fp16 scale would not be finite (largest fp16 is 65504)");
}

inline bool is_finite_fp16(fp16_bits h) noexcept
{
    return (h & 0x7c00u) != 0x7c00u;
}

// Rejects NaN and infinity (naming the first), and blocks whose fp16 scale would overflow.
// Q8_0's scale is amax/127, checked directly. The IQ4 scales stay below 7/120 of amax (the grid
// value nearest to a scaled value is never below 1/7 of it), so only blocks beyond the fp16
// range at all need a trial quantization to find out. This runs on every quantization,
// activations included, so it starts with one SIMD pass over x (the largest magnitude, on the
// caller's tag): every bound above grows with amax, so when the largest value of all passes,
// every block does, and only inputs near a limit take the block-by-block pass that finds the
// culprit.
template <class Block, class Arch = arch::native>
void check_values(std::span<const float> x)
{
    constexpr std::size_t size = format_traits<Block>::block_size;
    constexpr bool has_fp16_scale = std::is_same_v<Block, block_q8_0> || std::is_same_v<Block, block_iq4_nl> ||
                                    std::is_same_v<Block, block_iq4_xs>;
    const float largest = std::bit_cast<float>(kernels::max_magnitude_bits<Arch>(x.data(), x.size(), Arch{}));
    // (A NaN bit pattern compares false here and falls through to the full pass.)
    if (largest < std::numeric_limits<float>::infinity()) {
        if constexpr (std::is_same_v<Block, block_q8_0>) {
            if (largest / 127.0f < 65520.0f) {
                return;
            }
        } else if constexpr (has_fp16_scale) {
            if (largest <= 65504.0f) {
                return;
            }
        } else {
            return;
        }
    }
    for (std::size_t b = 0; b < x.size() / size; ++b) {
        const float* block = x.data() + b * size;
        // max |x| as bits: at least 0x7f800000 iff the block holds an infinity or a NaN.
        const std::uint32_t magnitude = kernels::max_magnitude_bits<Arch>(block, size, Arch{});
        if (magnitude >= 0x7f800000u) {
            const auto bad = std::find_if(block, block + size, [](float v) { return !std::isfinite(v); });
            fail("qk::quantize<", format_traits<Block>::name, ">: x[", static_cast<std::size_t>(bad - x.data()), "] is ", *bad,
                 "; only finite values can be quantized");
        }
        const float amax = std::bit_cast<float>(magnitude);
        if constexpr (has_fp16_scale) {
            bool fits = true;
            if constexpr (std::is_same_v<Block, block_q8_0>) {
                fits = amax / 127.0f < 65520.0f; // from 65520 up, fp16 rounds to infinity
            } else if (amax > 65504.0f) {
                Block trial{};
                reference::quantize(block, &trial, 1);
                fits = is_finite_fp16(trial.d);
            }
            if (!fits) {
                fail_scale<Block>(b, amax);
            }
        }
    }
}

// Importance weights must be finite and non-negative, and a group of 32 values that are not
// all zero needs at least one positive weight (else its least-squares scale is 0/0).
template <class Block>
void check_importance(std::span<const float> x, std::span<const float> importance)
{
    if (importance.empty() || importance.size() % format_traits<Block>::block_size != 0 || x.size() % importance.size() != 0) {
        fail("qk::quantize<", format_traits<Block>::name, ">: importance has ", importance.size(),
             " weights; it must hold one weight per column of a row (a positive multiple of ", format_traits<Block>::block_size,
             " that divides the ", x.size(), " values of x)");
    }
    for (std::size_t i = 0; i < importance.size(); ++i) {
        if (!std::isfinite(importance[i]) || importance[i] < 0.0f) {
            fail("qk::quantize<", format_traits<Block>::name, ">: importance[", i, "] is ", importance[i],
                 "; weights must be finite and non-negative");
        }
    }
    for (std::size_t start = 0; start < x.size(); start += 32) {
        const std::size_t column = start % importance.size();
        bool weighted = false;
        bool nonzero = false;
        for (std::size_t j = 0; j < 32; ++j) {
            weighted = weighted || importance[column + j] > 0.0f;
            nonzero = nonzero || std::fabs(x[start + j]) >= detail::iq4_zero_threshold;
        }
        if (nonzero && !weighted) {
            fail("qk::quantize<", format_traits<Block>::name, ">: importance[", column, "..", column + 31,
                 "] are all zero, but x[", start, "..", start + 31, "] are not: such a group has no least-squares scale");
        }
    }
}

} // namespace detail

namespace detail {

// Rows [first, last) of x, each of importance.size() values, quantized with importance weights.
template <importance_format Block>
void quantize_rows(std::span<const float> x, std::span<Block> y, std::span<const float> importance, std::size_t first, std::size_t last)
{
    const std::size_t row_blocks = importance.size() / format_traits<Block>::block_size;
    for (std::size_t row = first; row < last; ++row) {
        reference::quantize(x.data() + row * importance.size(), y.data() + row * row_blocks, row_blocks, importance.data());
    }
}

// A scale that rounded to an fp16 infinity is an error, named by its block.
template <importance_format Block>
void check_scales(std::span<const float> x, std::span<const Block> blocks)
{
    for (std::size_t b = 0; b < blocks.size(); ++b) {
        if (!is_finite_fp16(blocks[b].d)) {
            float amax = 0.0f;
            for (float v : x.subspan(b * format_traits<Block>::block_size, format_traits<Block>::block_size)) {
                amax = std::fmax(amax, std::fabs(v));
            }
            fail_scale<Block>(b, amax);
        }
    }
}

// After the shape check: the kernels of one tag, or the values' check and then the kernels.
template <class Block, class Arch>
void quantize_on(const float* x, Block* y, std::size_t blocks)
{
    if (kernels::quantize_checked<Arch>(x, y, blocks, Arch{})) {
        return;
    }
    check_values<Block, Arch>(std::span<const float>(x, blocks * format_traits<Block>::block_size));
    kernels::quantize<Arch>(x, y, blocks, Arch{});
}

template <class Block>
using quantize_kernel = void (*)(const float*, Block*, std::size_t);

// The running CPU's best tag, looked up on the first call (as qk::dot's): activations are
// quantized once per mat-vec, often a few blocks at a time.
template <class Block>
[[nodiscard]] quantize_kernel<Block> runtime_quantize() noexcept
{
    static const quantize_kernel<Block> kernel =
        dispatch([]<class Tag>(Tag) noexcept -> quantize_kernel<Block> { return &quantize_on<Block, Tag>; });
    return kernel;
}

} // namespace detail

// Quantizes x (a whole number of blocks) into y (exactly x.size() / block_size blocks), on
// qk::arch::default_tag unless a tag is named (every tag writes the same bytes).
template <block_format Block, class Arch = arch::default_tag>
void quantize(std::span<const float> x, std::span<Block> y)
{
    detail::check_block_shapes<Block>("qk::quantize", x.size(), y.size(), "y");
    if constexpr (std::is_same_v<Arch, arch::runtime>) {
        detail::runtime_quantize<Block>()(x.data(), y.data(), y.size());
    } else {
        detail::quantize_on<Block, Arch>(x.data(), y.data(), y.size());
    }
}

// With importance weights (an imatrix): `importance` holds one weight per column, and x is a
// whole number of rows of importance.size() columns, as model quantizers apply it.
template <importance_format Block>
void quantize(std::span<const float> x, std::span<Block> y, std::span<const float> importance)
try {
    detail::check_block_shapes<Block>("qk::quantize", x.size(), y.size(), "y");
    detail::check_values<Block>(x);
    detail::check_importance<Block>(x, importance);
    // Importance weights can drive the least-squares scale anywhere, so every block is checked
    // after it is quantized; blocks go to a buffer first so that y is untouched on error.
    std::vector<Block> blocks(y.size());
    detail::quantize_rows(x, std::span<Block>(blocks), importance, 0, y.size() * format_traits<Block>::block_size / importance.size());
    detail::check_scales(x, std::span<const Block>(blocks));
    std::copy(blocks.begin(), blocks.end(), y.begin());
} catch (...) {
    qk::detail::rethrow_as_error("qk::quantize");
}

// Convenience: returns the blocks in a new vector.
template <block_format Block, class Arch = arch::default_tag>
[[nodiscard]] std::vector<Block> quantize(std::span<const float> x)
try {
    detail::check_block_shapes<Block>("qk::quantize", x.size(), x.size() / format_traits<Block>::block_size, "the result");
    std::vector<Block> y(x.size() / format_traits<Block>::block_size);
    quantize<Block, Arch>(x, std::span<Block>(y));
    return y;
} catch (...) {
    qk::detail::rethrow_as_error("qk::quantize");
}

// Decodes x into y (exactly x.size() * block_size floats).
template <block_format Block>
void dequantize(std::span<const Block> x, std::span<float> y)
{
    detail::check_block_shapes<Block>("qk::dequantize", y.size(), x.size(), "x");
    reference::dequantize(x.data(), y.data(), x.size());
}

} // namespace qk
