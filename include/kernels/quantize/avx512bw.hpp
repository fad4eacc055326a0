// The activation quantizers on the AVX-512 tags (AVX-512 F/BW/DQ/VL, with AVX2 and F16C; the
// avx512vnni tag inherits them, VNNI adds nothing they need): f32 -> Q8_0 and f32 -> Q8_K on 512-bit
// registers, byte-identical with the scalar references in formats/ whatever the user's flags. Other
// formats keep the scalar reference (xsimd's AVX-512 tags derive from generic).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../arch.hpp"
#include "../formats.hpp"
#include "../target.hpp"

#if QK_HAS_X86_KERNELS
#include <immintrin.h>

// g++ 12 warns, wrongly, that the AVX-512 intrinsics' _mm512_undefined_* operands are or may be
// used uninitialized once they are inlined (GCC bug 105593), as in sampling/deterministic_math.hpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace qk::kernels {
namespace quantize_avx512 {

// How these stay bit-exact with the references: as in quantize/avx2.hpp (products only feed
// conversions to integers, single IEEE divisions, maxima on the bit patterns, Q8_0's rounding
// half away from zero as vpavgw of k = trunc(2t) with k's sign, Q8_K's nearest_int as the
// conversion's round-to-nearest-even, saturating packs as its min(v, 127); MXCSR's default rounding
// mode assumed, DAZ and FTZ changing nothing that matters). What 512 bits change:
//  - Q8_0's maxima of |x| come from vrangeps (the larger magnitude, sign cleared: exactly
//    max(|a|, |b|) for finite values, zeros and subnormals included); eight blocks are reduced
//    together, so one division per eight blocks gives d = amax / 127 and one id = 1 / d.
//  - Both quantizers read their input twice (scales, then values), as the AVX2 ones do, and
//    compute scales ahead of the writes: Q8_0 the scales of up to 16 groups of eight blocks (4096
//    values, in L1) into a buffer on the stack, then their values; Q8_K two blocks ahead. The
//    reduction, the divisions and the mask handling form a chain longer than a group's work. A
//    loop that kept each value in a register between the passes (one load instead of two) ran
//    slower, waiting on that chain: holding enough groups in flight takes more than the 32
//    registers. For Q8_0, so did one that computed the scales three groups ahead of the writes
//    (1.15-1.2x the time of the two loops on Zen 5): the loops apart each keep the ports busy.
//  - Packing: two vpackssdw and one vpacksswb turn four registers of int32 into 64 bytes whose
//    dwords come out of order (each 128-bit lane takes four values of each source); one vpermd
//    puts them back.
//  - Q8_K's bsums are sums of sixteen bytes of the packed values: vpsadbw of q + 128 (q xor 0x80)
//    against zero sums each eight, and two vpermt2d gather and add the halves.

// The dword order after vpackssdw + vpacksswb of q0..q3 (see above): destination dword 4i + L
// comes from source dword 4L + i.
template <class Arch>
[[gnu::always_inline]] QK_TARGET_AVX512BW inline __m512i pack_int8(__m512i q0, __m512i q1, __m512i q2, __m512i q3) noexcept
{
    const __m512i packed = _mm512_packs_epi16(_mm512_packs_epi32(q0, q1), _mm512_packs_epi32(q2, q3));
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), packed);
}

// Q8_0's rounding, in 16-bit lanes: k = trunc(2t) -> round half away from zero of t (k's sign
// from an arithmetic shift: -1 for negative k, else 0).
template <class Arch>
[[gnu::always_inline]] QK_TARGET_AVX512BW inline __m512i halve_away(__m512i k) noexcept
{
    return _mm512_avg_epu16(k, _mm512_srai_epi16(k, 15));
}

// An unaligned load kept in a register: compilers otherwise fold it into both instructions that
// use it, loading the same data twice.
template <class Arch>
[[gnu::always_inline]] QK_TARGET_AVX512BW inline __m512i load_once(const float* p) noexcept
{
    __m512i v = _mm512_loadu_si512(p);
    __asm__("" : "+v"(v));
    return v;
}

// The values of two Q8_0 blocks (x0, x1: the first's 32 values; x2, x3: the second's) scaled by
// their 2 * id (s0, s1), rounded and stored.
template <class Arch>
[[gnu::always_inline]] QK_TARGET_AVX512BW inline void q8_0_write2(__m512 x0, __m512 x1, __m512 x2, __m512 x3, __m512 s0, __m512 s1,
                                                                  block_q8_0* y) noexcept
{
    const __m512i k0 = _mm512_cvttps_epi32(_mm512_mul_ps(x0, s0));
    const __m512i k1 = _mm512_cvttps_epi32(_mm512_mul_ps(x1, s0));
    const __m512i k2 = _mm512_cvttps_epi32(_mm512_mul_ps(x2, s1));
    const __m512i k3 = _mm512_cvttps_epi32(_mm512_mul_ps(x3, s1));
    const __m512i q01 = halve_away<Arch>(_mm512_packs_epi32(k0, k1)); // |k| <= 254: no saturation
    const __m512i q23 = halve_away<Arch>(_mm512_packs_epi32(k2, k3));
    const __m512i q = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15),
                                               _mm512_packs_epi16(q01, q23));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[0].qs.data()), _mm512_castsi512_si256(q));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[1].qs.data()), _mm512_extracti64x4_epi64(q, 1));
}

// What the second pass over eight Q8_0 blocks needs: 2 * id per block (0 for blocks written as
// zero or left to the reference), the fp16 scales, and the blocks for the reference.
struct q8_0_scales {
    __m256 twice_id;
    __m128i d;
    unsigned by_reference; // bit b: block b is quantized by reference::quantize
};

// The first pass over eight consecutive Q8_0 blocks: their maxima of |x|, reduced together (lane b
// of amax is block b's), then d = amax / 127 and id = 1 / d, one division each. Checked (for
// quantize_checked) takes the maxima as unsigned integers on the bits with the sign cleared,
// where a NaN is larger than any number and so becomes amax, and d: vrangeps (one instruction
// instead of three, for input known to be finite) passes over NaN, returning the other operand.
// (A compare into a mask register per block, ORed together, to find NaN beside vrangeps cost
// more than the two extra instructions; FMA sums that NaN would poison, more still.)
template <class Arch, bool Checked = false>
[[gnu::always_inline]] QK_TARGET_AVX512BW inline q8_0_scales q8_0_scales_of(const float* x) noexcept
{
    __m512i m[8];
    for (int b = 0; b < 8; ++b) {
        if constexpr (Checked) {
            const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
            m[b] = _mm512_max_epu32(_mm512_and_si512(_mm512_loadu_si512(x + 32 * b), magnitude),
                                    _mm512_and_si512(_mm512_loadu_si512(x + 32 * b + 16), magnitude));
        } else {
            m[b] = _mm512_castps_si512(_mm512_range_ps(_mm512_loadu_ps(x + 32 * b), _mm512_loadu_ps(x + 32 * b + 16), 0x0b));
        }
    }
    // Transposing reduction: pairs of blocks interleaved by dwords, then by qwords (each 128-bit
    // lane of t[i] holds blocks 4i..4i+3), then 128-bit lanes combined twice.
    __m512i t[2];
    for (int i = 0; i < 2; ++i) {
        const __m512i* mi = m + 4 * i;
        const __m512i m01 = _mm512_max_epi32(_mm512_unpacklo_epi32(mi[0], mi[1]), _mm512_unpackhi_epi32(mi[0], mi[1]));
        const __m512i m23 = _mm512_max_epi32(_mm512_unpacklo_epi32(mi[2], mi[3]), _mm512_unpackhi_epi32(mi[2], mi[3]));
        t[i] = _mm512_max_epi32(_mm512_unpacklo_epi64(m01, m23), _mm512_unpackhi_epi64(m01, m23));
    }
    const __m512i t01 = _mm512_max_epi32(_mm512_shuffle_i64x2(t[0], t[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                         _mm512_shuffle_i64x2(t[0], t[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m256 amax = _mm256_castsi256_ps(_mm512_castsi512_si256(
        _mm512_max_epi32(_mm512_shuffle_i64x2(t01, t01, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_shuffle_i64x2(t01, t01, _MM_SHUFFLE(2, 0, 3, 1)))));
    // d = amax / 127 and id = d ? 1 / d : 0 as in the reference (no 1/0 is evaluated). Blocks with
    // id >= 2^127, whose 2 * id is not finite, go to the reference: those with id = inf (it writes
    // them as zero) and the rare ones with 2^127 <= id < 2^128 (all |x| < 2^-120).
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 d = _mm256_div_ps(amax, _mm256_set1_ps(127.0f));
    const __mmask8 d_zero = _mm256_cmp_ps_mask(d, _mm256_setzero_ps(), _CMP_EQ_OQ);
    const __m256 id = _mm256_div_ps(one, _mm256_mask_blend_ps(d_zero, d, one));
    const __mmask8 overflow = _mm256_cmp_ps_mask(id, _mm256_set1_ps(0x1p127f), _CMP_GE_OQ); // 2 * id is not finite
    return {_mm256_maskz_add_ps(static_cast<__mmask8>(~(d_zero | overflow)), id, id),
            _mm256_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), static_cast<unsigned>(overflow & ~d_zero) & 0xffu};
}

// The second pass: writes the eight blocks, two per register.
template <class Arch>
[[gnu::always_inline]] QK_TARGET_AVX512BW inline void q8_0_write(const float* x, block_q8_0* y, const q8_0_scales& scales) noexcept
{
    // Each block's 2 * id broadcast from memory (vbroadcastss, on a load port) rather than from the
    // register (vpermps, on a shuffle port, the ports this loop is short of).
    const auto* twice_id = reinterpret_cast<const float*>(&scales.twice_id);
    for (int b = 0; b < 8; b += 2) {
        const float* xb = x + 32 * b;
        q8_0_write2<Arch>(_mm512_loadu_ps(xb), _mm512_loadu_ps(xb + 16), _mm512_loadu_ps(xb + 32), _mm512_loadu_ps(xb + 48),
                          _mm512_set1_ps(twice_id[b]), _mm512_set1_ps(twice_id[b + 1]), y + b);
    }
    y[0].d = static_cast<std::uint16_t>(_mm_extract_epi16(scales.d, 0));
    y[1].d = static_cast<std::uint16_t>(_mm_extract_epi16(scales.d, 1));
    y[2].d = static_cast<std::uint16_t>(_mm_extract_epi16(scales.d, 2));
    y[3].d = static_cast<std::uint16_t>(_mm_extract_epi16(scales.d, 3));
    y[4].d = static_cast<std::uint16_t>(_mm_extract_epi16(scales.d, 4));
    y[5].d = static_cast<std::uint16_t>(_mm_extract_epi16(scales.d, 5));
    y[6].d = static_cast<std::uint16_t>(_mm_extract_epi16(scales.d, 6));
    y[7].d = static_cast<std::uint16_t>(_mm_extract_epi16(scales.d, 7));
}

// The blocks left to the reference (q8_0_scales::by_reference) are written with d = 0 and all zero
// (their d rounds to fp16 zero); the reference rewrites the blocks with d = 0, which changes only
// those (for every other block it writes the same bytes). Kept out of the loops: a call there
// would make every vector live across it go through the stack.
template <class Arch>
QK_TARGET_AVX512BW inline void q8_0_fix(const float* x, block_q8_0* y, std::size_t blocks) noexcept
{
    for (std::size_t b = 0; b < blocks; ++b) {
        if (y[b].d == 0) {
            reference::quantize(x + 32 * b, y + b, 1);
        }
    }
}

// Q8_K's first pass over one block: the scale iscale = -127 / max, or 0 for a block that is
// written as all zero (max = 0, or -127 / max not finite).
template <class Arch>
[[gnu::always_inline]] QK_TARGET_AVX512BW inline float q8_K_scale(const float* x) noexcept
{
    // On the raw bits, the signed maximum is the largest non-negative element when there is one,
    // and the unsigned maximum is the negative element of largest magnitude when there is one;
    // with one sign only, both are the element of largest magnitude.
    __m512i s[4];
    __m512i u[4];
    for (int k = 0; k < 4; ++k) {
        s[k] = u[k] = load_once<Arch>(x + 16 * k);
    }
    for (int i = 4; i < 16; i += 4) {
        for (int k = 0; k < 4; ++k) {
            const __m512i v = load_once<Arch>(x + 16 * (i + k));
            s[k] = _mm512_max_epi32(s[k], v);
            u[k] = _mm512_max_epu32(u[k], v);
        }
    }
    const __m512i s16 = _mm512_max_epi32(_mm512_max_epi32(s[0], s[1]), _mm512_max_epi32(s[2], s[3]));
    const __m512i u16 = _mm512_max_epu32(_mm512_max_epu32(u[0], u[1]), _mm512_max_epu32(u[2], u[3]));
    const auto largest = static_cast<std::uint32_t>(_mm512_reduce_max_epi32(s16));
    const auto extreme = static_cast<std::uint32_t>(_mm512_reduce_max_epu32(u16));
    const std::uint32_t largest_magnitude = largest & 0x7fffffffu;
    const std::uint32_t extreme_magnitude = extreme & 0x7fffffffu;
    std::uint32_t max = largest_magnitude >= extreme_magnitude ? largest : extreme;
    if (largest_magnitude == extreme_magnitude && largest != extreme) [[unlikely]] {
        if (largest_magnitude == 0) {
            return 0.0f; // +0 and -0 only
        }
        // Both +m and -m occur: the first element of magnitude m decides the sign.
        const __m512i m = _mm512_set1_epi32(static_cast<int>(largest_magnitude));
        const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
        for (int i = 0; i < 16; ++i) {
            const __mmask16 hits = _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_loadu_si512(x + 16 * i), magnitude), m);
            if (hits != 0) {
                std::memcpy(&max, x + 16 * i + __builtin_ctz(static_cast<unsigned>(hits)), sizeof max);
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
[[gnu::always_inline]] QK_TARGET_AVX512BW inline void q8_K_write(const float* x, block_q8_K* y, float iscale) noexcept
{
    if (iscale == 0.0f) {
        *y = block_q8_K{};
        return;
    }
    const __m512 s = _mm512_set1_ps(iscale);
    const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
    __m512i sums[4]; // qword i of sums[j]: the sum of bytes 64j + 8i .. 64j + 8i + 7, plus 8 * 128
    for (int j = 0; j < 4; ++j) {
        const float* xj = x + 64 * j;
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xj), s));
        const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xj + 16), s));
        const __m512i q2 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xj + 32), s));
        const __m512i q3 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xj + 48), s));
        const __m512i q = pack_int8<Arch>(q0, q1, q2, q3);
        _mm512_storeu_si512(y->qs.data() + 64 * j, q);
        sums[j] = _mm512_sad_epu8(_mm512_xor_si512(q, bias), _mm512_setzero_si512());
    }
    // The low dwords of the 32 eight-byte sums in order, then neighbours added: bsum g in dword g.
    const __m512i low_dwords = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i halves0 = _mm512_permutex2var_epi32(sums[0], low_dwords, sums[1]);
    const __m512i halves1 = _mm512_permutex2var_epi32(sums[2], low_dwords, sums[3]);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512i bsums = _mm512_sub_epi32(_mm512_add_epi32(_mm512_permutex2var_epi32(halves0, low_dwords, halves1),
                                                            _mm512_permutex2var_epi32(halves0, odd, halves1)),
                                           _mm512_set1_epi32(16 * 128));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y->bsums.data()), _mm512_cvtepi32_epi16(bsums));
    y->d = 1.0f / iscale;
}

} // namespace quantize_avx512

// f32 -> Q8_0 as reference::quantize: d = amax / 127 stored as fp16, q = round half away from
// zero of x * (1 / d), with the reciprocal of the float d. Up to 16 groups of eight blocks at a
// time: their scales, then their values (see above). The last 1..7 blocks go through a
// zero-padded copy; blocks left to the reference are rewritten after the loop (q8_0_fix).
template <class Arch>
QK_TARGET_AVX512BW void quantize(const float* x, block_q8_0* y, std::size_t blocks, arch::requires_arch<arch::avx512bw>) noexcept
{
    const std::size_t groups = blocks / 8;
    unsigned by_reference = 0;
    constexpr std::size_t chunk = 16;
    for (std::size_t first = 0; first < groups; first += chunk) {
        const std::size_t count = groups - first < chunk ? groups - first : chunk;
        quantize_avx512::q8_0_scales scales[chunk];
        for (std::size_t g = 0; g < count; ++g) {
            scales[g] = quantize_avx512::q8_0_scales_of<Arch>(x + 256 * (first + g));
        }
        for (std::size_t g = 0; g < count; ++g) {
            quantize_avx512::q8_0_write<Arch>(x + 256 * (first + g), y + 8 * (first + g), scales[g]);
            by_reference |= scales[g].by_reference;
        }
    }
    const std::size_t rest = blocks - 8 * groups;
    if (rest > 0) {
        alignas(64) float padded[8 * 32] = {};
        block_q8_0 out[8];
        std::memcpy(padded, x + 256 * groups, rest * 32 * sizeof(float));
        const quantize_avx512::q8_0_scales scales = quantize_avx512::q8_0_scales_of<Arch>(padded);
        quantize_avx512::q8_0_write<Arch>(padded, out, scales);
        std::memcpy(static_cast<void*>(y + 8 * groups), out, rest * sizeof(block_q8_0));
        by_reference |= scales.by_reference;
    }
    if (by_reference != 0) [[unlikely]] {
        quantize_avx512::q8_0_fix<Arch>(x, y, blocks);
    }
}

// f32 -> Q8_0 with qk::quantize's value check fused into the first pass, for rows of whole groups
// of eight blocks up to 64 groups (16384 values, an activation row; longer rows take the separate
// passes): the scales of the whole row are computed first, into a buffer on the stack, and a
// block fails the check exactly when its fp16 scale is not finite: amax / 127 from 65520 up, an
// infinite amax, or a NaN, which the checked first pass makes amax. Only then is y written, so
// a rejected row leaves it
// untouched, and the caller's own check (which names the culprit) runs instead. With the
// scales of the row computed ahead, the second pass needs no pipelining, and reading x twice
// instead of three times is the saving.
template <class Arch>
QK_TARGET_AVX512BW bool quantize_checked(const float* x, block_q8_0* y, std::size_t blocks, arch::requires_arch<arch::avx512bw>) noexcept
{
    constexpr std::size_t max_groups = 64;
    const std::size_t groups = blocks / 8;
    if (blocks % 8 != 0 || groups > max_groups) {
        return false;
    }
    quantize_avx512::q8_0_scales scales[max_groups];
    const __m128i exponent = _mm_set1_epi16(0x7c00);
    __m128i not_finite = _mm_setzero_si128();
    for (std::size_t g = 0; g < groups; ++g) {
        scales[g] = quantize_avx512::q8_0_scales_of<Arch, true>(x + 256 * g);
        not_finite = _mm_or_si128(not_finite, _mm_cmpeq_epi16(_mm_and_si128(scales[g].d, exponent), exponent));
    }
    if (_mm_testz_si128(not_finite, not_finite) == 0) {
        return false;
    }
    unsigned by_reference = 0;
    for (std::size_t g = 0; g < groups; ++g) {
        quantize_avx512::q8_0_write<Arch>(x + 256 * g, y + 8 * g, scales[g]);
        by_reference |= scales[g].by_reference;
    }
    if (by_reference != 0) [[unlikely]] {
        quantize_avx512::q8_0_fix<Arch>(x, y, blocks);
    }
    return true;
}

// Other blocks on the AVX-512 tags: no fused path (xsimd's AVX-512 tags derive from generic).
template <class Arch, class Block>
QK_TARGET_AVX512BW bool quantize_checked(const float*, Block*, std::size_t, arch::requires_arch<arch::avx512bw>) noexcept
{
    return false;
}

// f32 -> Q8_K as reference::quantize: max = the first element of largest magnitude, iscale =
// -127 / max, q = min(127, nearest_int(iscale * x)), bsums, d = 1 / iscale. Software pipelined
// two blocks deep: the scale of the block after next is found before this block is written (the
// reductions and the division take longer than one block's work).
template <class Arch>
QK_TARGET_AVX512BW void quantize(const float* x, block_q8_K* y, std::size_t blocks, arch::requires_arch<arch::avx512bw>) noexcept
{
    if (blocks == 0) {
        return;
    }
    float iscale = quantize_avx512::q8_K_scale<Arch>(x);
    float next = blocks > 1 ? quantize_avx512::q8_K_scale<Arch>(x + 256) : 0.0f;
    for (std::size_t b = 0; b < blocks; ++b) {
        const float after_next = b + 2 < blocks ? quantize_avx512::q8_K_scale<Arch>(x + 256 * (b + 2)) : 0.0f;
        quantize_avx512::q8_K_write<Arch>(x + 256 * b, y + b, iscale);
        iscale = next;
        next = after_next;
    }
}

// The argument checks' pass (generic.hpp), four accumulators of vpmaxud.
template <class Arch>
QK_TARGET_AVX512BW std::uint32_t max_magnitude_bits(const float* x, std::size_t n, arch::requires_arch<arch::avx512bw>) noexcept
{
    const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
    __m512i m0 = _mm512_setzero_si512(), m1 = m0, m2 = m0, m3 = m0;
    std::size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(x + i), magnitude));
        m1 = _mm512_max_epu32(m1, _mm512_and_si512(_mm512_loadu_si512(x + i + 16), magnitude));
        m2 = _mm512_max_epu32(m2, _mm512_and_si512(_mm512_loadu_si512(x + i + 32), magnitude));
        m3 = _mm512_max_epu32(m3, _mm512_and_si512(_mm512_loadu_si512(x + i + 48), magnitude));
    }
    // The last 1..63 values in masked loads (masked-off lanes read as zero and fault nowhere).
    for (; i < n; i += 16) {
        const auto lanes = static_cast<__mmask16>(n - i >= 16 ? 0xffffu : (1u << (n - i)) - 1);
        m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_maskz_loadu_epi32(lanes, x + i), magnitude));
    }
    return static_cast<std::uint32_t>(_mm512_reduce_max_epu32(_mm512_max_epu32(_mm512_max_epu32(m0, m1), _mm512_max_epu32(m2, m3))));
}

} // namespace qk::kernels

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif // QK_HAS_X86_KERNELS
