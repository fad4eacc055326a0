// The scalar reference dot products (weights · activations), one overload per weight format,
// on the generic tag. Each block's integer sum is exact; the float scaling and summation follow
// GGUF consumers' portable loops, so results match them bit for bit whatever the user's flags:
// per block sumf = sumf + d * (float)sumi, rounded twice, blocks in order.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../arch.hpp"
#include "../e8m0.hpp"
#include "../formats.hpp"
#include "../fp16.hpp"
#include "../strict_fp.hpp"

namespace qk::kernels {

QK_STRICT_FP inline float dot(arch::requires_arch<arch::generic>, const block_q8_0* w, const block_q8_0* a, std::size_t blocks) noexcept
{
    QK_STRICT_FP_BODY
    float sum = 0.0f;
    for (std::size_t b = 0; b < blocks; ++b) {
        int sumi = 0;
        for (int j = 0; j < 32; ++j) {
            sumi += w[b].qs[j] * a[b].qs[j];
        }
        const float d = fp16_to_fp32(w[b].d) * fp16_to_fp32(a[b].d);
        const float term = detail::rounded(d * static_cast<float>(sumi));
        sum = sum + term;
    }
    return sum;
}

QK_STRICT_FP inline float dot(arch::requires_arch<arch::generic>, const block_mxfp4* w, const block_q8_0* a, std::size_t blocks) noexcept
{
    QK_STRICT_FP_BODY
    float sum = 0.0f;
    for (std::size_t b = 0; b < blocks; ++b) {
        int sumi = 0;
        for (int j = 0; j < 16; ++j) {
            sumi += mxfp4_values[w[b].qs[j] & 0x0f] * a[b].qs[j];
            sumi += mxfp4_values[w[b].qs[j] >> 4] * a[b].qs[j + 16];
        }
        const float d = fp16_to_fp32(a[b].d) * e8m0_half_to_fp32(w[b].e);
        const float term = detail::rounded(d * static_cast<float>(sumi));
        sum = sum + term;
    }
    return sum;
}

QK_STRICT_FP inline float dot(arch::requires_arch<arch::generic>, const block_iq4_nl* w, const block_q8_0* a, std::size_t blocks) noexcept
{
    QK_STRICT_FP_BODY
    float sum = 0.0f;
    for (std::size_t b = 0; b < blocks; ++b) {
        int sumi = 0;
        for (int j = 0; j < 16; ++j) {
            sumi += iq4_values[w[b].qs[j] & 0x0f] * a[b].qs[j];
            sumi += iq4_values[w[b].qs[j] >> 4] * a[b].qs[j + 16];
        }
        const float d = fp16_to_fp32(a[b].d) * fp16_to_fp32(w[b].d);
        const float term = detail::rounded(d * static_cast<float>(sumi));
        sum = sum + term;
    }
    return sum;
}

QK_STRICT_FP inline float dot(arch::requires_arch<arch::generic>, const block_iq4_xs* w, const block_q8_K* a, std::size_t blocks) noexcept
{
    QK_STRICT_FP_BODY
    float sum = 0.0f;
    for (std::size_t b = 0; b < blocks; ++b) {
        const float d4d8 = fp16_to_fp32(w[b].d) * a[b].d;
        for (int g = 0; g < 8; ++g) {
            const std::uint8_t* qs = w[b].qs.data() + 16 * g;
            const std::int8_t* q8 = a[b].qs.data() + 32 * g;
            int sumi = 0;
            for (int j = 0; j < 16; ++j) {
                sumi += iq4_values[qs[j] & 0x0f] * q8[j];
                sumi += iq4_values[qs[j] >> 4] * q8[j + 16];
            }
            const float d = d4d8 * static_cast<float>(iq4_xs_group_scale(w[b], g));
            const float term = detail::rounded(d * static_cast<float>(sumi));
            sum = sum + term;
        }
    }
    return sum;
}

} // namespace qk::kernels
