// The activation quantizers on AVX2 (with F16C): f32 -> Q8_0 and f32 -> Q8_K, byte-identical with
// the scalar references in formats/ whatever the user's flags. They overload kernels::quantize on
// arch::avx2 (and serve AVX-512 tags until those have their own); other formats stay generic.
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
namespace quantize_avx2 {

// How these stay bit-exact with the references:
//  - No product ever meets an addition: products only feed conversions to integers, so there is
//    nothing for -ffp-contract=fast to fuse, and the divisions are single IEEE operations.
//  - Maxima are taken on the bit patterns as integers (more execution ports take them than float
//    maxima on, e.g., AMD Zen 3): for finite floats, |x| orders like its bits with the sign
//    cleared, and the largest and smallest elements follow from a signed and an unsigned maximum
//    of the raw bits (see q8_K_scale).
//  - Q8_0 rounds half away from zero through an exact identity: with k = trunc(2t) (2t = x * 2id
//    is exact, being 2 * (x * id) rounded), round_half_away(t) = (k + sign(k)) / 2 truncated,
//    which is avg_epu16(k, k < 0 ? -1 : 0) in 16-bit lanes for |k| < 2^15 (vpavgw computes
//    (a + b + 1) >> 1 on 17 bits). Checked for every float |t| < 2^14.
//  - Q8_K's nearest_int is the conversion's round-to-nearest-even, which is also what the
//    reference's 1.5 * 2^23 trick computes; the saturating packs are its min(v, 127).
//  - Like the references' own results, this assumes the default rounding mode of MXCSR (round to
//    nearest even); DAZ and FTZ change nothing that matters (they only ever zero blocks that are
//    all zero in the reference too).

// 32 int32 values (in order q0..q3) to 32 int8 in order. Packing works within 128-bit lanes: the
// dwords come out as values 0-3, 8-11, 16-19, 24-27, 4-7, 12-15, 20-23, 28-31, hence the permute.
template <class Arch>
[[gnu::always_inline]] QK_TARGET_AVX2 inline __m256i pack_int8(__m256i q0, __m256i q1, __m256i q2, __m256i q3) noexcept
{
    const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
    return _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Q8_0's rounding, in 16-bit lanes: k = trunc(2t) -> round half away from zero of t.
template <class Arch>
[[gnu::always_inline]] QK_TARGET_AVX2 inline __m256i halve_away(__m256i k) noexcept
{
    return _mm256_avg_epu16(k, _mm256_cmpgt_epi16(_mm256_setzero_si256(), k));
}

// An unaligned load kept in a register: compilers otherwise fold it into both instructions that
// use it, loading the same data twice.
template <class Arch>
[[gnu::always_inline]] QK_TARGET_AVX2 inline __m256i load_once(const __m256i* p) noexcept
{
    __m256i v = _mm256_loadu_si256(p);
    __asm__("" : "+x"(v));
    return v;
}

// 32 values of one Q8_0 block, scaled by s = 2 * id, rounded and packed to int8 in order.
template <class Arch>
[[gnu::always_inline]] QK_TARGET_AVX2 inline __m256i q8_0_values(const float* x, __m256 s) noexcept
{
    const __m256i k0 = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), s));
    const __m256i k1 = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), s));
    const __m256i k2 = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), s));
    const __m256i k3 = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), s));
    const __m256i q01 = halve_away<Arch>(_mm256_packs_epi32(k0, k1)); // |k| <= 254: no saturation
    const __m256i q23 = halve_away<Arch>(_mm256_packs_epi32(k2, k3));
    return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q01, q23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// What the second pass over eight Q8_0 blocks needs: 2 * id per block (0 for blocks written as
// zero or left to the reference), the fp16 scales, and the blocks for the reference.
struct q8_0_scales {
    alignas(32) float twice_id[8];
    alignas(16) std::uint16_t d[8];
    int by_reference; // bit b: block b is quantized by reference::quantize
};

// The first pass over eight consecutive Q8_0 blocks: their maxima (of |x|, which orders like the
// bits of x with the sign cleared), reduced together, then one vector division each for
// d = amax / 127 and id = 1 / d.
template <class Arch>
QK_TARGET_AVX2 inline void q8_0_scales_of(const float* x, q8_0_scales& out) noexcept
{
    const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
    __m256i m[8];
    for (int b = 0; b < 8; ++b) {
        const auto* xb = reinterpret_cast<const __m256i*>(x + 32 * b);
        const __m256i a0 = _mm256_and_si256(_mm256_loadu_si256(xb), magnitude);
        const __m256i a1 = _mm256_and_si256(_mm256_loadu_si256(xb + 1), magnitude);
        const __m256i a2 = _mm256_and_si256(_mm256_loadu_si256(xb + 2), magnitude);
        const __m256i a3 = _mm256_and_si256(_mm256_loadu_si256(xb + 3), magnitude);
        m[b] = _mm256_max_epi32(_mm256_max_epi32(a0, a1), _mm256_max_epi32(a2, a3));
    }
    // Transposing reduction: lane b of amax is the largest element of m[b].
    const __m256i t01 = _mm256_max_epi32(_mm256_unpacklo_epi32(m[0], m[1]), _mm256_unpackhi_epi32(m[0], m[1]));
    const __m256i t23 = _mm256_max_epi32(_mm256_unpacklo_epi32(m[2], m[3]), _mm256_unpackhi_epi32(m[2], m[3]));
    const __m256i t45 = _mm256_max_epi32(_mm256_unpacklo_epi32(m[4], m[5]), _mm256_unpackhi_epi32(m[4], m[5]));
    const __m256i t67 = _mm256_max_epi32(_mm256_unpacklo_epi32(m[6], m[7]), _mm256_unpackhi_epi32(m[6], m[7]));
    const __m256i t0123 = _mm256_max_epi32(_mm256_unpacklo_epi64(t01, t23), _mm256_unpackhi_epi64(t01, t23));
    const __m256i t4567 = _mm256_max_epi32(_mm256_unpacklo_epi64(t45, t67), _mm256_unpackhi_epi64(t45, t67));
    const __m256 amax = _mm256_castsi256_ps(
        _mm256_max_epi32(_mm256_permute2x128_si256(t0123, t4567, 0x20), _mm256_permute2x128_si256(t0123, t4567, 0x31)));
    // d = amax / 127 and id = d ? 1 / d : 0 as in the reference (no 1/0 is evaluated). Blocks with
    // id >= 2^127, whose 2 * id is not finite, go to the reference: those with id = inf (it writes
    // them as zero) and the rare ones with 2^127 <= id < 2^128 (all |x| < 2^-120).
    const __m256 d = _mm256_div_ps(amax, _mm256_set1_ps(127.0f));
    const __m256 d_zero = _mm256_cmp_ps(d, _mm256_setzero_ps(), _CMP_EQ_OQ);
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 id = _mm256_div_ps(one, _mm256_or_ps(d, _mm256_and_ps(d_zero, one)));
    const __m256 overflow = _mm256_cmp_ps(id, _mm256_set1_ps(0x1p127f), _CMP_GE_OQ); // 2 * id is not finite
    _mm256_store_ps(out.twice_id, _mm256_andnot_ps(_mm256_or_ps(d_zero, overflow), _mm256_add_ps(id, id)));
    _mm_store_si128(reinterpret_cast<__m128i*>(out.d), _mm256_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    out.by_reference = _mm256_movemask_ps(_mm256_andnot_ps(d_zero, overflow));
}

// The second pass: writes the eight blocks.
template <class Arch>
QK_TARGET_AVX2 inline void q8_0_write(const float* x, block_q8_0* y, const q8_0_scales& scales) noexcept
{
    for (int b = 0; b < 8; ++b) {
        y[b].d = scales.d[b];
        const __m256i q = q8_0_values<Arch>(x + 32 * b, _mm256_broadcast_ss(scales.twice_id + b));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs.data()), q);
    }
    for (int rest = scales.by_reference; rest != 0; rest &= rest - 1) {
        const int b = __builtin_ctz(static_cast<unsigned>(rest));
        reference::quantize(x + 32 * b, y + b, 1);
    }
}

// Q8_K's first pass over one block: the scale iscale = -127 / max, or 0 for a block that is
// written as all zero (max = 0, or -127 / max not finite).
template <class Arch>
QK_TARGET_AVX2 inline float q8_K_scale(const float* x) noexcept
{
    // On the raw bits, the signed maximum is the largest non-negative element when there is one,
    // and the unsigned maximum is the negative element of largest magnitude when there is one;
    // with one sign only, both are the element of largest magnitude.
    const auto* xv = reinterpret_cast<const __m256i*>(x);
    __m256i s[4];
    __m256i u[4];
    for (int k = 0; k < 4; ++k) {
        s[k] = u[k] = load_once<Arch>(xv + k);
    }
    for (int i = 4; i < 32; i += 4) {
        for (int k = 0; k < 4; ++k) {
            const __m256i v = load_once<Arch>(xv + i + k);
            s[k] = _mm256_max_epi32(s[k], v);
            u[k] = _mm256_max_epu32(u[k], v);
        }
    }
    const __m256i s8 = _mm256_max_epi32(_mm256_max_epi32(s[0], s[1]), _mm256_max_epi32(s[2], s[3]));
    const __m256i u8 = _mm256_max_epu32(_mm256_max_epu32(u[0], u[1]), _mm256_max_epu32(u[2], u[3]));
    __m128i s4 = _mm_max_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    __m128i u4 = _mm_max_epu32(_mm256_castsi256_si128(u8), _mm256_extracti128_si256(u8, 1));
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
        const __m256i m = _mm256_set1_epi32(static_cast<int>(largest_magnitude));
        const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
        for (int i = 0; i < 32; ++i) {
            const __m256i v = _mm256_loadu_si256(xv + i);
            const int hits = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(v, magnitude), m)));
            if (hits != 0) {
                std::memcpy(&max, x + 8 * i + __builtin_ctz(static_cast<unsigned>(hits)), sizeof max);
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
QK_TARGET_AVX2 inline void q8_K_write(const float* x, block_q8_K* y, float iscale) noexcept
{
    if (iscale == 0.0f) {
        *y = block_q8_K{};
        return;
    }
    const __m256 s = _mm256_set1_ps(iscale);
    const __m256i ones8 = _mm256_set1_epi8(1);
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m256i quads[8];
    for (int g = 0; g < 8; ++g) {
        const float* xg = x + 32 * g;
        const __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg), s));
        const __m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + 8), s));
        const __m256i q2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + 16), s));
        const __m256i q3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + 24), s));
        const __m256i q = pack_int8<Arch>(q0, q1, q2, q3);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(y->qs.data() + 32 * g), q);
        // Sums of four neighbours: the low 128 bits go to bsum 2g, the high ones to bsum 2g + 1.
        quads[g] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
    }
    // Pairwise sums, by packing two vectors to 16 bits and adding neighbours with pmaddwd: the low
    // 128 bits end up holding bsums 0, 2, ..., 14 and the high ones 1, 3, ..., 15.
    const __m256i o01 = _mm256_madd_epi16(_mm256_packs_epi32(quads[0], quads[1]), ones16);
    const __m256i o23 = _mm256_madd_epi16(_mm256_packs_epi32(quads[2], quads[3]), ones16);
    const __m256i o45 = _mm256_madd_epi16(_mm256_packs_epi32(quads[4], quads[5]), ones16);
    const __m256i o67 = _mm256_madd_epi16(_mm256_packs_epi32(quads[6], quads[7]), ones16);
    const __m256i s0123 = _mm256_madd_epi16(_mm256_packs_epi32(o01, o23), ones16);
    const __m256i s4567 = _mm256_madd_epi16(_mm256_packs_epi32(o45, o67), ones16);
    const __m256i sums = _mm256_packs_epi32(s0123, s4567);
    const __m256i interleave = _mm256_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15, //
                                                0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15);
    const __m256i bsums = _mm256_shuffle_epi8(_mm256_permute4x64_epi64(sums, 0xd8), interleave);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y->bsums.data()), bsums);
    y->d = 1.0f / iscale;
}

} // namespace quantize_avx2

// f32 -> Q8_0 as reference::quantize: d = amax / 127 stored as fp16, q = round half away from
// zero of x * (1 / d), with the reciprocal of the float d. Up to 16 groups of eight blocks at a
// time (4096 values, in L1): their scales into a buffer on the stack, then their values. Each
// loop then keeps the ports busy by itself, and the divisions' latency overlaps with the next
// group's maxima; computing each group's scales just before the previous group's writes took
// 1.1x the time on Zen 5. The last 1..7 blocks go through a zero-padded copy.
template <class Arch>
QK_TARGET_AVX2 void quantize(const float* x, block_q8_0* y, std::size_t blocks, arch::requires_arch<arch::avx2>) noexcept
{
    const std::size_t groups = blocks / 8;
    constexpr std::size_t chunk = 16;
    for (std::size_t first = 0; first < groups; first += chunk) {
        const std::size_t count = groups - first < chunk ? groups - first : chunk;
        quantize_avx2::q8_0_scales scales[chunk];
        for (std::size_t g = 0; g < count; ++g) {
            quantize_avx2::q8_0_scales_of<Arch>(x + 256 * (first + g), scales[g]);
        }
        for (std::size_t g = 0; g < count; ++g) {
            quantize_avx2::q8_0_write<Arch>(x + 256 * (first + g), y + 8 * (first + g), scales[g]);
        }
    }
    const std::size_t rest = blocks - 8 * groups;
    if (rest > 0) {
        alignas(32) float padded[8 * 32] = {};
        block_q8_0 out[8];
        quantize_avx2::q8_0_scales scales;
        std::memcpy(padded, x + 256 * groups, rest * 32 * sizeof(float));
        quantize_avx2::q8_0_scales_of<Arch>(padded, scales);
        quantize_avx2::q8_0_write<Arch>(padded, out, scales);
        std::memcpy(static_cast<void*>(y + 8 * groups), out, rest * sizeof(block_q8_0));
    }
}

// f32 -> Q8_0 with qk::quantize's value check fused into the first pass, as on AVX-512
// (quantize/avx512bw.hpp): for rows of whole groups of eight blocks up to 64 groups, the scales
// of the whole row first, into a buffer on the stack; a block fails the check exactly when its
// fp16 scale is not finite (amax / 127 from 65520 up, an infinite amax, or a NaN, which the
// integer maxima of the first pass make amax). Only then is y written, so a rejected row leaves
// it untouched and the caller's own check (which names the culprit) runs instead; otherwise x is
// read twice instead of three times.
template <class Arch>
QK_TARGET_AVX2 bool quantize_checked(const float* x, block_q8_0* y, std::size_t blocks, arch::requires_arch<arch::avx2>) noexcept
{
    constexpr std::size_t max_groups = 64;
    const std::size_t groups = blocks / 8;
    if (blocks % 8 != 0 || groups > max_groups) {
        return false;
    }
    quantize_avx2::q8_0_scales scales[max_groups];
    const __m128i exponent = _mm_set1_epi16(0x7c00);
    __m128i not_finite = _mm_setzero_si128();
    for (std::size_t g = 0; g < groups; ++g) {
        quantize_avx2::q8_0_scales_of<Arch>(x + 256 * g, scales[g]);
        const __m128i d = _mm_load_si128(reinterpret_cast<const __m128i*>(scales[g].d));
        not_finite = _mm_or_si128(not_finite, _mm_cmpeq_epi16(_mm_and_si128(d, exponent), exponent));
    }
    if (_mm_testz_si128(not_finite, not_finite) == 0) {
        return false;
    }
    for (std::size_t g = 0; g < groups; ++g) {
        quantize_avx2::q8_0_write<Arch>(x + 256 * g, y + 8 * g, scales[g]);
    }
    return true;
}

// f32 -> Q8_K as reference::quantize: max = the first element of largest magnitude, iscale =
// -127 / max, q = min(127, nearest_int(iscale * x)), bsums, d = 1 / iscale. Software pipelined:
// the next block's scale is found before this block is written.
template <class Arch>
QK_TARGET_AVX2 void quantize(const float* x, block_q8_K* y, std::size_t blocks, arch::requires_arch<arch::avx2>) noexcept
{
    if (blocks == 0) {
        return;
    }
    float iscale = quantize_avx2::q8_K_scale<Arch>(x);
    for (std::size_t b = 0; b + 1 < blocks; ++b) {
        const float next = quantize_avx2::q8_K_scale<Arch>(x + 256 * (b + 1));
        quantize_avx2::q8_K_write<Arch>(x + 256 * b, y + b, iscale);
        iscale = next;
    }
    quantize_avx2::q8_K_write<Arch>(x + 256 * (blocks - 1), y + blocks - 1, iscale);
}

// The argument checks' pass (generic.hpp), four accumulators of vpmaxud.
template <class Arch>
QK_TARGET_AVX2 std::uint32_t max_magnitude_bits(const float* x, std::size_t n, arch::requires_arch<arch::avx2>) noexcept
{
    const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
    __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
    std::size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        m0 = _mm256_max_epu32(m0, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), magnitude));
        m1 = _mm256_max_epu32(m1, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 8)), magnitude));
        m2 = _mm256_max_epu32(m2, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 16)), magnitude));
        m3 = _mm256_max_epu32(m3, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 24)), magnitude));
    }
    const __m256i m8 = _mm256_max_epu32(_mm256_max_epu32(m0, m1), _mm256_max_epu32(m2, m3));
    __m128i m = _mm_max_epu32(_mm256_castsi256_si128(m8), _mm256_extracti128_si256(m8, 1));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
    const std::uint32_t tail = max_magnitude_bits<Arch>(x + i, n - i, arch::generic{});
    const auto largest = static_cast<std::uint32_t>(_mm_cvtsi128_si32(m));
    return largest > tail ? largest : tail;
}

} // namespace qk::kernels

#endif // QK_HAS_X86_KERNELS
