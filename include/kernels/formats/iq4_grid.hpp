// The non-linear 4-bit grid shared by IQ4_NL and IQ4_XS, and the weighted least-squares scale
// search that GGUF's model-file quantizer runs over it. Both formats' quantizers call it; it is
// written operation for operation as the producers do, since the bytes must match exactly.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "../fp16.hpp"
#include "../strict_fp.hpp"
#include "q8_k.hpp" // detail::nearest_int

namespace qk {

// Grid values of codes 0..15: denser near zero, where weights cluster.
inline constexpr std::array<std::int8_t, 16> iq4_values = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

namespace detail {

// The code whose grid value is nearest to v (binary search; the upper code wins ties).
inline std::uint8_t nearest_iq4_code(float v) noexcept
{
    if (v <= iq4_values[0]) {
        return 0;
    }
    if (v >= iq4_values[15]) {
        return 15;
    }
    int low = 0;
    int high = 15;
    while (high - low > 1) {
        const int middle = (low + high) / 2;
        if (v < iq4_values[middle]) {
            high = middle;
        } else {
            low = middle;
        }
    }
    return static_cast<std::uint8_t>(v - iq4_values[high - 1] < iq4_values[high] - v ? high - 1 : high);
}

// Blocks whose largest magnitude is below this get a zero scale.
inline constexpr float iq4_zero_threshold = 1e-15f;

// Quantizes `size` values (32 for IQ4_NL, 256 for IQ4_XS) in groups of 32.
// Each group's scale comes from a least-squares fit weighted by x^2 (or by the importance
// weights, scaled by sqrt(sigma^2 + x^2)); `tries` > 0 also scans 2*tries+1 candidate
// reciprocal scales around 127/max and keeps the best fit (the model-file quantizer uses 7;
// GGUF's row reference uses -1, no scan). With several groups (IQ4_XS) the group scales are
// then quantized to 6 bits against a super-scale -max_scale/32 and the codes recomputed.
// Outputs: the fp16 scale, 4-bit codes (`size`/2 bytes), and for several groups the 6-bit
// group scales split into low nibbles (scales_low) and high 2-bit pairs (scales_high).
QK_STRICT_FP inline void iq4_quantize(int size, const float* x, const float* importance, int tries, fp16_bits& d_out,
                                      std::uint8_t* codes_out, std::uint16_t* scales_high, std::uint8_t* scales_low) noexcept
{
    QK_STRICT_FP_BODY
    constexpr int group = 32;
    const int groups = size / group;
    std::array<float, 8> scales{};
    std::array<float, group> weight{};
    std::array<std::uint8_t, 256> codes{};

    float sigma2 = 0.0f;
    for (int j = 0; j < size; ++j) {
        const float square = rounded(x[j] * x[j]);
        sigma2 += square;
    }
    sigma2 *= 2.0f / static_cast<float>(size);

    d_out = fp32_to_fp16(0.0f);
    float max_scale = 0.0f;
    float amax_scale = 0.0f;
    for (int g = 0; g < groups; ++g) {
        const float* xg = x + g * group;
        std::uint8_t* cg = codes.data() + g * group;
        if (importance != nullptr) {
            const float* ig = importance + g * group;
            for (int j = 0; j < group; ++j) {
                const float square = rounded(xg[j] * xg[j]);
                weight[j] = ig[j] * std::sqrt(sigma2 + square);
            }
        } else {
            for (int j = 0; j < group; ++j) {
                weight[j] = xg[j] * xg[j];
            }
        }
        float amax = 0.0f;
        float max = 0.0f;
        for (int j = 0; j < group; ++j) {
            const float a = std::fabs(xg[j]);
            if (a > amax) {
                amax = a;
                max = xg[j];
            }
        }
        if (amax < iq4_zero_threshold) {
            scales[g] = 0.0f;
            continue;
        }
        const float v0 = iq4_values[0];
        float d = tries > 0 ? -max / v0 : max / v0;
        float id = 1.0f / d;
        float sumqx = 0.0f;
        float sumq2 = 0.0f;
        for (int j = 0; j < group; ++j) {
            const float scaled = rounded(id * xg[j]);
            const std::uint8_t code = nearest_iq4_code(scaled);
            cg[j] = code;
            const float q = iq4_values[code];
            const float wq = weight[j] * q;
            const float wqx = rounded(wq * xg[j]);
            const float wqq = rounded(wq * q);
            sumqx += wqx;
            sumq2 += wqq;
        }
        d = sumqx / sumq2;
        float best = d * sumqx;
        for (int step = -tries; step <= tries; ++step) {
            id = static_cast<float>(step + iq4_values[0]) / max;
            float try_sumqx = 0.0f;
            float try_sumq2 = 0.0f;
            for (int j = 0; j < group; ++j) {
                const float scaled = rounded(id * xg[j]);
                const float q = iq4_values[nearest_iq4_code(scaled)];
                const float wq = weight[j] * q;
                const float wqx = rounded(wq * xg[j]);
                const float wqq = rounded(wq * q);
                try_sumqx += wqx;
                try_sumq2 += wqq;
            }
            if (try_sumq2 > 0.0f && try_sumqx * try_sumqx > best * try_sumq2) {
                d = try_sumqx / try_sumq2;
                best = d * try_sumqx;
            }
        }
        scales[g] = d;
        const float abs_d = std::fabs(d);
        if (abs_d > amax_scale) {
            amax_scale = abs_d;
            max_scale = d;
        }
    }

    if (groups > 1) {
        *scales_high = 0;
        const float d = -max_scale / 32.0f;
        d_out = fp32_to_fp16(d);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int g = 0; g < groups; ++g) {
            const float scaled = rounded(id * scales[g]);
            int l = nearest_int(scaled);
            l = l < -32 ? -32 : (l > 31 ? 31 : l);
            const float dl = d * static_cast<float>(l);
            const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
            const float* xg = x + g * group;
            std::uint8_t* cg = codes.data() + g * group;
            for (int j = 0; j < group; ++j) {
                const float value = rounded(idl * xg[j]);
                cg[j] = nearest_iq4_code(value);
            }
            l += 32;
            const auto low = static_cast<std::uint8_t>(l & 0xf);
            const auto high = static_cast<std::uint16_t>(l >> 4);
            if (g % 2 == 0) {
                scales_low[g / 2] = low;
            } else {
                scales_low[g / 2] = static_cast<std::uint8_t>(scales_low[g / 2] | (low << 4));
            }
            *scales_high = static_cast<std::uint16_t>(*scales_high | (high << (2 * g)));
        }
    } else {
        d_out = fp32_to_fp16(scales[0]);
        if (tries > 0) {
            const float id = scales[0] != 0.0f ? 1.0f / scales[0] : 0.0f;
            for (int j = 0; j < size; ++j) {
                const float value = rounded(id * x[j]);
                codes[j] = nearest_iq4_code(value);
            }
        }
    }

    for (int g = 0; g < groups; ++g) {
        for (int j = 0; j < 16; ++j) {
            codes_out[16 * g + j] = static_cast<std::uint8_t>(codes[32 * g + j] | (codes[32 * g + 16 + j] << 4));
        }
    }
}

} // namespace detail
} // namespace qk
