// The activation quantizers on SSE4.2 (x86-64-v2): f32 -> Q8_0 and f32 -> Q8_K, byte-identical
// with the scalar references in formats/ whatever the user's flags. They overload
// kernels::quantize on arch::sse4_2 (and serve AVX tags without their own); other formats stay generic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../arch.hpp"
#include "../formats.hpp"
#include "../target.hpp"

#if QK_HAS_X86_KERNELS
#include <immintrin.h>

namespace qk::kernels {
namespace quantize_sse4_2 {

// How these stay bit-exact with the references (the AVX2 kernels use the same methods):
//  - Products only feed conversions to integers, except in fp16_nonnegative, where the one product
//    that meets an addition passes through `opaque` (an empty asm statement the optimizer cannot
//    look into), so -ffp-contract=fast cannot fuse it. The divisions are single IEEE operations.
//  - Maxima are taken on the bit patterns as integers: for finite floats, |x| orders like its bits
//    with the sign cleared, and the largest and smallest elements follow from a signed and an
//    unsigned maximum of the raw bits (see q8_K_scale).
//  - Q8_0 rounds half away from zero through an exact identity: with k = trunc(2t) (2t = x * 2id
//    is exact, being 2 * (x * id) rounded), round_half_away(t) = (k + sign(k)) / 2 truncated,
//    which is avg_epu16(k, k < 0 ? -1 : 0) in 16-bit lanes for |k| < 2^15 (pavgw computes
//    (a + b + 1) >> 1 on 17 bits). Checked for every float |t| < 2^14.
//  - Q8_K's nearest_int is the conversion's round-to-nearest-even, which is also what the
//    reference's 1.5 * 2^23 trick computes; the saturating packs are its min(v, 127).
//  - Like the references' own results, this assumes the default rounding mode of MXCSR (round to
//    nearest even); DAZ and FTZ change nothing that matters (they only ever zero blocks that are
//    all zero in the reference too).

template <class Arch>
[[gnu::always_inline]] QK_TARGET_SSE4_2 inline __m128 opaque(__m128 v) noexcept
{
    __asm__("" : "+x"(v));
    return v;
}

// An unaligned load kept in a register: compilers otherwise fold it into both instructions that
// use it, loading the same data twice.
template <class Arch>
[[gnu::always_inline]] QK_TARGET_SSE4_2 inline __m128i load_once(const __m128i* p) noexcept
{
    __m128i v = _mm_loadu_si128(p);
    __asm__("" : "+x"(v));
    return v;
}

// Non-negative finite floats to fp16 bits (in the low 16 bits of each lane), rounding to nearest
// even: qk::fp32_to_fp16 without branches (the FP16 library's method: scaling by 2^112 then
// 2^-110 drops the bits below fp16 precision in a float rounding, and the addition of a power of
// two aligned with v's exponent rounds the rest). Checked for every non-negative float.
template <class Arch>
[[gnu::always_inline]] QK_TARGET_SSE4_2 inline __m128i fp16_nonnegative(__m128 v) noexcept
{
    const __m128 base = opaque<Arch>(_mm_mul_ps(_mm_mul_ps(v, _mm_set1_ps(0x1p+112f)), _mm_set1_ps(0x1p-110f)));
    const __m128i bits = _mm_castps_si128(v);
    const __m128i exponent = _mm_max_epu32(_mm_and_si128(_mm_add_epi32(bits, bits), _mm_set1_epi32(static_cast<int>(0xff000000u))),
                                           _mm_set1_epi32(0x71000000));
    const __m128 bias = _mm_castsi128_ps(_mm_add_epi32(_mm_srli_epi32(exponent, 1), _mm_set1_epi32(0x07800000)));
    const __m128i rounded = _mm_castps_si128(_mm_add_ps(bias, base));
    return _mm_add_epi32(_mm_and_si128(_mm_srli_epi32(rounded, 13), _mm_set1_epi32(0x7c00)),
                         _mm_and_si128(rounded, _mm_set1_epi32(0x0fff)));
}

// Q8_0's rounding, in 16-bit lanes: k = trunc(2t) -> round half away from zero of t.
template <class Arch>
[[gnu::always_inline]] QK_TARGET_SSE4_2 inline __m128i halve_away(__m128i k) noexcept
{
    return _mm_avg_epu16(k, _mm_cmpgt_epi16(_mm_setzero_si128(), k));
}

// 16 values of one Q8_0 block, scaled by s = 2 * id, rounded and packed to int8.
template <class Arch>
[[gnu::always_inline]] QK_TARGET_SSE4_2 inline __m128i q8_0_values(const float* x, __m128 s) noexcept
{
    const __m128i k0 = _mm_cvttps_epi32(_mm_mul_ps(_mm_loadu_ps(x), s));
    const __m128i k1 = _mm_cvttps_epi32(_mm_mul_ps(_mm_loadu_ps(x + 4), s));
    const __m128i k2 = _mm_cvttps_epi32(_mm_mul_ps(_mm_loadu_ps(x + 8), s));
    const __m128i k3 = _mm_cvttps_epi32(_mm_mul_ps(_mm_loadu_ps(x + 12), s));
    const __m128i q01 = halve_away<Arch>(_mm_packs_epi32(k0, k1)); // |k| <= 254: no saturation
    const __m128i q23 = halve_away<Arch>(_mm_packs_epi32(k2, k3));
    return _mm_packs_epi16(q01, q23);
}

// What the second pass over four Q8_0 blocks needs: 2 * id per block (0 for blocks written as
// zero or left to the reference), the fp16 scales, and the blocks for the reference.
struct q8_0_scales {
    alignas(16) float twice_id[4];
    alignas(16) std::uint16_t d[8];
    int by_reference; // bit b: block b is quantized by reference::quantize
};

// The first pass over four consecutive Q8_0 blocks: their maxima, reduced together, then one
// vector division each for d = amax / 127 and id = 1 / d.
template <class Arch>
QK_TARGET_SSE4_2 inline void q8_0_scales_of(const float* x, q8_0_scales& out) noexcept
{
    const __m128i magnitude = _mm_set1_epi32(0x7fffffff);
    __m128i m[4];
    for (int b = 0; b < 4; ++b) {
        const auto* xb = reinterpret_cast<const __m128i*>(x + 32 * b);
        __m128i a[8];
        for (int k = 0; k < 8; ++k) {
            a[k] = _mm_and_si128(_mm_loadu_si128(xb + k), magnitude);
        }
        m[b] = _mm_max_epi32(_mm_max_epi32(_mm_max_epi32(a[0], a[1]), _mm_max_epi32(a[2], a[3])),
                             _mm_max_epi32(_mm_max_epi32(a[4], a[5]), _mm_max_epi32(a[6], a[7])));
    }
    // Transposing reduction: lane b of amax is the largest element of m[b].
    const __m128i t01 = _mm_max_epi32(_mm_unpacklo_epi32(m[0], m[1]), _mm_unpackhi_epi32(m[0], m[1])); // m0 m1 m0 m1
    const __m128i t23 = _mm_max_epi32(_mm_unpacklo_epi32(m[2], m[3]), _mm_unpackhi_epi32(m[2], m[3])); // m2 m3 m2 m3
    const __m128 amax = _mm_castsi128_ps(_mm_max_epi32(_mm_unpacklo_epi64(t01, t23), _mm_unpackhi_epi64(t01, t23)));
    // d = amax / 127 and id = d ? 1 / d : 0 as in the reference (no 1/0 is evaluated). Blocks with
    // id >= 2^127, whose 2 * id is not finite, go to the reference: those with id = inf (it writes
    // them as zero) and the rare ones with 2^127 <= id < 2^128 (all |x| < 2^-120).
    const __m128 d = _mm_div_ps(amax, _mm_set1_ps(127.0f));
    const __m128 d_zero = _mm_cmpeq_ps(d, _mm_setzero_ps());
    const __m128 one = _mm_set1_ps(1.0f);
    const __m128 id = _mm_div_ps(one, _mm_or_ps(d, _mm_and_ps(d_zero, one)));
    const __m128 overflow = _mm_cmpge_ps(id, _mm_set1_ps(0x1p127f)); // 2 * id is not finite
    _mm_store_ps(out.twice_id, _mm_andnot_ps(_mm_or_ps(d_zero, overflow), _mm_add_ps(id, id)));
    const __m128i d16 = fp16_nonnegative<Arch>(d);
    _mm_store_si128(reinterpret_cast<__m128i*>(out.d), _mm_packus_epi32(d16, d16)); // d16 <= 0x7c00
    out.by_reference = _mm_movemask_ps(_mm_andnot_ps(d_zero, overflow));
}

// The second pass: writes the four blocks.
template <class Arch>
QK_TARGET_SSE4_2 inline void q8_0_write(const float* x, block_q8_0* y, const q8_0_scales& scales) noexcept
{
    for (int b = 0; b < 4; ++b) {
        const float* xb = x + 32 * b;
        const __m128 s = _mm_set1_ps(scales.twice_id[b]);
        y[b].d = scales.d[b];
        auto* out = reinterpret_cast<__m128i*>(y[b].qs.data());
        _mm_storeu_si128(out, q8_0_values<Arch>(xb, s));
        _mm_storeu_si128(out + 1, q8_0_values<Arch>(xb + 16, s));
    }
    for (int rest = scales.by_reference; rest != 0; rest &= rest - 1) {
        const int b = __builtin_ctz(static_cast<unsigned>(rest));
        reference::quantize(x + 32 * b, y + b, 1);
    }
}

// Q8_K's first pass over one block: the scale iscale = -127 / max, or 0 for a block that is
// written as all zero (max = 0, or -127 / max not finite).
template <class Arch>
QK_TARGET_SSE4_2 inline float q8_K_scale(const float* x) noexcept
{
    // On the raw bits, the signed maximum is the largest non-negative element when there is one,
    // and the unsigned maximum is the negative element of largest magnitude when there is one;
    // with one sign only, both are the element of largest magnitude.
    const auto* xv = reinterpret_cast<const __m128i*>(x);
    __m128i s[4];
    __m128i u[4];
    for (int k = 0; k < 4; ++k) {
        s[k] = u[k] = load_once<Arch>(xv + k);
    }
    for (int i = 4; i < 64; i += 4) {
        for (int k = 0; k < 4; ++k) {
            const __m128i v = load_once<Arch>(xv + i + k);
            s[k] = _mm_max_epi32(s[k], v);
            u[k] = _mm_max_epu32(u[k], v);
        }
    }
    __m128i s4 = _mm_max_epi32(_mm_max_epi32(s[0], s[1]), _mm_max_epi32(s[2], s[3]));
    __m128i u4 = _mm_max_epu32(_mm_max_epu32(u[0], u[1]), _mm_max_epu32(u[2], u[3]));
    s4 = _mm_max_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    u4 = _mm_max_epu32(u4, _mm_shuffle_epi32(u4, 0x4e));
    s4 = _mm_max_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    u4 = _mm_max_epu32(u4, _mm_shuffle_epi32(u4, 0xb1));
    const auto largest = static_cast<std::uint32_t>(_mm_cvtsi128_si32(s4));
    const auto extreme = static_cast<std::uint32_t>(_mm_cvtsi128_si32(u4));
    const std::uint32_t largest_magnitude = largest & 0x7fffffffu;
    const std::uint32_t extreme_magnitude = extreme & 0x7fffffffu;
    std::uint32_t max = largest_magnitude >= extreme_magnitude ? largest : extreme;
    if (largest_magnitude == extreme_magnitude && largest != extreme) {
        if (largest_magnitude == 0) {
            return 0.0f; // +0 and -0 only
        }
        // Both +m and -m occur: the first element of magnitude m decides the sign.
        const __m128i m = _mm_set1_epi32(static_cast<int>(largest_magnitude));
        const __m128i magnitude = _mm_set1_epi32(0x7fffffff);
        for (int i = 0; i < 64; ++i) {
            const __m128i v = _mm_loadu_si128(xv + i);
            const int hits = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(_mm_and_si128(v, magnitude), m)));
            if (hits != 0) {
                std::memcpy(&max, x + 4 * i + __builtin_ctz(static_cast<unsigned>(hits)), sizeof max);
                break;
            }
        }
    }
    if ((max & 0x7fffffffu) == 0) {
        return 0.0f;
    }
    float max_value;
    std::memcpy(&max_value, &max, sizeof max_value);
    const float iscale = -127.0f / max_value; // one IEEE division, as in the reference
    return iscale <= 0x1.fffffep127f && iscale >= -0x1.fffffep127f ? iscale : 0.0f;
}

// Q8_K's second pass over one block, with its iscale from q8_K_scale.
template <class Arch>
QK_TARGET_SSE4_2 inline void q8_K_write(const float* x, block_q8_K* y, float iscale) noexcept
{
    if (iscale == 0.0f) {
        *y = block_q8_K{};
        return;
    }
    const __m128 s = _mm_set1_ps(iscale);
    const __m128i ones = _mm_set1_epi8(1);
    __m128i pairs[16];
    for (int g = 0; g < 16; ++g) {
        const float* xg = x + 16 * g;
        const __m128i q0 = _mm_cvtps_epi32(_mm_mul_ps(_mm_loadu_ps(xg), s));
        const __m128i q1 = _mm_cvtps_epi32(_mm_mul_ps(_mm_loadu_ps(xg + 4), s));
        const __m128i q2 = _mm_cvtps_epi32(_mm_mul_ps(_mm_loadu_ps(xg + 8), s));
        const __m128i q3 = _mm_cvtps_epi32(_mm_mul_ps(_mm_loadu_ps(xg + 12), s));
        const __m128i q = _mm_packs_epi16(_mm_packs_epi32(q0, q1), _mm_packs_epi32(q2, q3));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y->qs.data() + 16 * g), q);
        pairs[g] = _mm_maddubs_epi16(ones, q); // 16-bit sums of neighbouring pairs
    }
    // Three rounds of pairwise sums turn eight vectors of pair sums into eight bsums, in order.
    auto* bsums = reinterpret_cast<__m128i*>(y->bsums.data());
    for (int half = 0; half < 2; ++half) {
        const __m128i* p = pairs + 8 * half;
        const __m128i s0123 = _mm_hadd_epi16(_mm_hadd_epi16(p[0], p[1]), _mm_hadd_epi16(p[2], p[3]));
        const __m128i s4567 = _mm_hadd_epi16(_mm_hadd_epi16(p[4], p[5]), _mm_hadd_epi16(p[6], p[7]));
        _mm_storeu_si128(bsums + half, _mm_hadd_epi16(s0123, s4567));
    }
    y->d = 1.0f / iscale;
}

} // namespace quantize_sse4_2

// f32 -> Q8_0 as reference::quantize: d = amax / 127 stored as fp16, q = round half away from
// zero of x * (1 / d), with the reciprocal of the float d. Four blocks at a time, software
// pipelined: the scales of the next four are computed before this four is written, so that the
// divisions' latency overlaps with work. The last 1..3 blocks go through a zero-padded copy.
template <class Arch>
QK_TARGET_SSE4_2 void quantize(const float* x, block_q8_0* y, std::size_t blocks, arch::requires_arch<arch::sse4_2>) noexcept
{
    const std::size_t groups = blocks / 4;
    if (groups > 0) {
        quantize_sse4_2::q8_0_scales scales[2];
        quantize_sse4_2::q8_0_scales_of<Arch>(x, scales[0]);
        for (std::size_t g = 0; g < groups; ++g) {
            if (g + 1 < groups) {
                quantize_sse4_2::q8_0_scales_of<Arch>(x + 128 * (g + 1), scales[(g + 1) % 2]);
            }
            quantize_sse4_2::q8_0_write<Arch>(x + 128 * g, y + 4 * g, scales[g % 2]);
        }
    }
    const std::size_t rest = blocks - 4 * groups;
    if (rest > 0) {
        alignas(16) float padded[4 * 32] = {};
        block_q8_0 out[4];
        quantize_sse4_2::q8_0_scales scales;
        std::memcpy(padded, x + 128 * groups, rest * 32 * sizeof(float));
        quantize_sse4_2::q8_0_scales_of<Arch>(padded, scales);
        quantize_sse4_2::q8_0_write<Arch>(padded, out, scales);
        std::memcpy(static_cast<void*>(y + 4 * groups), out, rest * sizeof(block_q8_0));
    }
}

// f32 -> Q8_K as reference::quantize: max = the first element of largest magnitude, iscale =
// -127 / max, q = min(127, nearest_int(iscale * x)), bsums, d = 1 / iscale. Software pipelined:
// the next block's scale is found before this block is written.
template <class Arch>
QK_TARGET_SSE4_2 void quantize(const float* x, block_q8_K* y, std::size_t blocks, arch::requires_arch<arch::sse4_2>) noexcept
{
    if (blocks == 0) {
        return;
    }
    float iscale = quantize_sse4_2::q8_K_scale<Arch>(x);
    for (std::size_t b = 0; b + 1 < blocks; ++b) {
        const float next = quantize_sse4_2::q8_K_scale<Arch>(x + 256 * (b + 1));
        quantize_sse4_2::q8_K_write<Arch>(x + 256 * b, y + b, iscale);
        iscale = next;
    }
    quantize_sse4_2::q8_K_write<Arch>(x + 256 * (blocks - 1), y + blocks - 1, iscale);
}

// The argument checks' pass (generic.hpp), four accumulators of pmaxud.
template <class Arch>
QK_TARGET_SSE4_2 std::uint32_t max_magnitude_bits(const float* x, std::size_t n, arch::requires_arch<arch::sse4_2>) noexcept
{
    const __m128i magnitude = _mm_set1_epi32(0x7fffffff);
    __m128i m0 = _mm_setzero_si128(), m1 = m0, m2 = m0, m3 = m0;
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = _mm_max_epu32(m0, _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)), magnitude));
        m1 = _mm_max_epu32(m1, _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i + 4)), magnitude));
        m2 = _mm_max_epu32(m2, _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i + 8)), magnitude));
        m3 = _mm_max_epu32(m3, _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i + 12)), magnitude));
    }
    __m128i m = _mm_max_epu32(_mm_max_epu32(m0, m1), _mm_max_epu32(m2, m3));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
    const std::uint32_t tail = max_magnitude_bits<Arch>(x + i, n - i, arch::generic{});
    const auto largest = static_cast<std::uint32_t>(_mm_cvtsi128_si32(m));
    return largest > tail ? largest : tail;
}

} // namespace qk::kernels

#endif // QK_HAS_X86_KERNELS
