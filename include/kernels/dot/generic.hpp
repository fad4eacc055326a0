// The scalar reference dot products (weights · activations), one overload per weight format,
// on the generic tag. Like every kernel they are templates on the calling tag, so that copies
// compiled with different instruction-set flags are different symbols. Each block's integer sum is exact; the float scaling and summation follow
// GGUF consumers' portable loops, so results match them bit for bit whatever the user's flags:
// per block sumf = sumf + d * (float)sumi, rounded twice, blocks in order.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "../arch.hpp"
#include "../e8m0.hpp"
#include "../formats.hpp"
#include "../fp16.hpp"
#include "../strict_fp.hpp"

namespace qk::detail {

// The exact integer dot of 32 4-bit codes (16 bytes, element j in the low nibble of byte j and
// element j + 16 in the high nibble) decoded through `table`, with 32 int8 activations.
inline int nibble_dot(const std::uint8_t* codes, const std::int8_t* q8, const std::array<std::int8_t, 16>& table) noexcept
{
    int sum = 0;
    for (int j = 0; j < 16; ++j) {
        sum += table[codes[j] & 0x0f] * q8[j];
        sum += table[codes[j] >> 4] * q8[j + 16];
    }
    return sum;
}

} // namespace qk::detail

namespace qk::kernels {

template <class Arch>
QK_STRICT_FP float dot(const block_q8_0* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::generic>) noexcept
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

template <class Arch>
QK_STRICT_FP float dot(const block_mxfp4* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::generic>) noexcept
{
    QK_STRICT_FP_BODY
    float sum = 0.0f;
    for (std::size_t b = 0; b < blocks; ++b) {
        const int sumi = detail::nibble_dot(w[b].qs.data(), a[b].qs.data(), mxfp4_values);
        const float d = fp16_to_fp32(a[b].d) * e8m0_half_to_fp32(w[b].e);
        const float term = detail::rounded(d * static_cast<float>(sumi));
        sum = sum + term;
    }
    return sum;
}

template <class Arch>
QK_STRICT_FP float dot(const block_iq4_nl* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::generic>) noexcept
{
    QK_STRICT_FP_BODY
    float sum = 0.0f;
    for (std::size_t b = 0; b < blocks; ++b) {
        const int sumi = detail::nibble_dot(w[b].qs.data(), a[b].qs.data(), iq4_values);
        const float d = fp16_to_fp32(a[b].d) * fp16_to_fp32(w[b].d);
        const float term = detail::rounded(d * static_cast<float>(sumi));
        sum = sum + term;
    }
    return sum;
}

// Per 16-value sub-block, in order, as GGUF consumers' portable loop: the activation scale times
// the sub-block's, then times the exact integer sum.
template <class Arch>
QK_STRICT_FP float dot(const block_nvfp4* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::generic>) noexcept
{
    QK_STRICT_FP_BODY
    float sum = 0.0f;
    for (std::size_t b = 0; b < blocks; ++b) {
        for (std::size_t s = 0; s < 4; ++s) {
            const block_q8_0& activation = a[2 * b + s / 2];
            const std::int8_t* q8 = activation.qs.data() + 16 * (s % 2);
            const std::uint8_t* codes = w[b].qs.data() + 8 * s;
            int sumi = 0;
            for (std::size_t j = 0; j < 8; ++j) {
                sumi += mxfp4_values[codes[j] & 0x0f] * q8[j];
                sumi += mxfp4_values[codes[j] >> 4] * q8[j + 8];
            }
            const float d = detail::rounded(fp16_to_fp32(activation.d) * ue4m3_half_table[w[b].d[s]]);
            const float term = detail::rounded(d * static_cast<float>(sumi));
            sum = sum + term;
        }
    }
    return sum;
}

template <class Arch>
QK_STRICT_FP float dot(const block_iq4_xs* w, const block_q8_K* a, std::size_t blocks, arch::requires_arch<arch::generic>) noexcept
{
    QK_STRICT_FP_BODY
    float sum = 0.0f;
    for (std::size_t b = 0; b < blocks; ++b) {
        const float d4d8 = fp16_to_fp32(w[b].d) * a[b].d;
        for (int g = 0; g < 8; ++g) {
            const int sumi = detail::nibble_dot(w[b].qs.data() + 16 * g, a[b].qs.data() + 32 * g, iq4_values);
            const float d = d4d8 * static_cast<float>(iq4_xs_group_scale(w[b], g));
            const float term = detail::rounded(d * static_cast<float>(sumi));
            sum = sum + term;
        }
    }
    return sum;
}

} // namespace qk::kernels
