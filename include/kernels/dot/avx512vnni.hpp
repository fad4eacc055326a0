// The dot products on the AVX-512 VNNI tag (qk::arch::avx512vnni, a child of avx512bw): Q8_0, MXFP4,
// NVFP4 and IQ4_NL against Q8_0, IQ4_XS against Q8_K. Included by dot.hpp after avx512bw.hpp, whose
// loads, decoding, sign handling and scaling they share (see the technique there); checked against
// dot/generic.hpp. What VNNI changes: vpdpbusd sums four u8 x s8 products into int32 lanes in one
// instruction, replacing vpmaddubsw + vpmaddwd with ones; for IQ4_XS, vpdpwssd multiplies the int16
// pair sums by the group multipliers and accumulates in one, replacing vpmaddwd + vpaddd, and the
// multipliers themselves come from BMI2's pdep in integer registers.
// (vpdpbusds would only add saturation, which exact sums never reach.) Any pair without an
// overload here takes the avx512bw one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../arch.hpp"
#include "../e8m0.hpp"
#include "../formats.hpp"
#include "../prefetch.hpp"
#include "../target.hpp"
#include "avx2.hpp"
#include "avx512bw.hpp"

#if QK_HAS_X86_KERNELS
#include <immintrin.h>

// g++ 12 warns, wrongly, that the AVX-512 intrinsics' _mm512_undefined_* operands are or may be
// used uninitialized once they are inlined (GCC bug 105593), as in sampling/deterministic_math.hpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace qk::kernels::avx512vnni_detail {

// The exact int32 sums of the four products in each 4-byte lane (each below 2^14 in magnitude).
template <class Arch>
[[gnu::always_inline]] QK_TARGET_AVX512VNNI inline __m512i dot_i8(const avx512_detail::operands& x) noexcept
{
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), x.magnitudes, x.activations);
}

// The eight multipliers ls - 32 of an IQ4_XS superblock as int16 in the low 128 bits (the lanes
// group_pair_multipliers reads), built in integer registers: pdep scatters nibble g of scales_l
// to bits 0-3 of 16-bit lane g and bits 2g, 2g + 1 of scales_h to its bits 4-5. Four scalar
// instructions per four groups replace the ten vector ones of avx2_detail::group_multipliers,
// which the kernel is short of.
template <class Arch>
[[gnu::always_inline]] QK_TARGET_AVX512VNNI inline __m256i group_multipliers(const block_iq4_xs& x) noexcept
{
    std::uint32_t low;
    std::memcpy(&low, x.scales_l.data(), sizeof low);
    const std::uint64_t high = x.scales_h;
    constexpr std::uint64_t nibbles = 0x000f000f000f000full;
    constexpr std::uint64_t high_bits = 0x0030003000300030ull;
    const std::uint64_t groups03 = _pdep_u64(low & 0xffffu, nibbles) | _pdep_u64(high & 0xffu, high_bits);
    const std::uint64_t groups47 = _pdep_u64(low >> 16, nibbles) | _pdep_u64(high >> 8, high_bits);
    const __m128i ls = _mm_insert_epi64(_mm_cvtsi64_si128(static_cast<long long>(groups03)), static_cast<long long>(groups47), 1);
    return _mm256_castsi128_si256(_mm_sub_epi16(ls, _mm_set1_epi16(32)));
}

} // namespace qk::kernels::avx512vnni_detail

namespace qk::kernels {

namespace avx512vnni_detail {
// How far ahead of an octet its row is prefetched, into L1 (a prefetch past the row's end fetches
// the next row's lines, which a mat-vec reads next, or a line past the matrix). In a mat-vec from
// memory (14336 x 4096, Zen 5) over the same buffers with the distance set at run time, shuffled,
// each pass after its own streaming pass, medians of 16: 0.97 of the streaming read without, 1.12
// with 4 KiB, 1.09 with 8 KiB at one thread; 1.02, 1.11, 1.07 at two.
inline constexpr std::size_t q8_0_prefetch_distance = 4096;
} // namespace avx512vnni_detail

template <class Arch>
QK_TARGET_AVX512VNNI float dot(const block_q8_0* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::avx512vnni>) noexcept
{
    namespace k = avx512_detail;
    const __m512i scales01 = _mm512_loadu_si512(k::q8_0_octet.scales01.data());
    const __m512i scales23 = _mm512_loadu_si512(k::q8_0_octet.scales23.data());
    const __m512i lanes0 = _mm512_loadu_si512(k::q8_0_octet.lane_block[0].data());
    const __m512i lanes1 = _mm512_loadu_si512(k::q8_0_octet.lane_block[1].data());
    const __m512i lanes2 = _mm512_loadu_si512(k::q8_0_octet.lane_block[2].data());
    const __m512i lanes3 = _mm512_loadu_si512(k::q8_0_octet.lane_block[3].data());
    __m512 acc0 = _mm512_setzero_ps();
    __m512 acc1 = _mm512_setzero_ps();
    __m512 acc2 = _mm512_setzero_ps();
    __m512 acc3 = _mm512_setzero_ps();
    const std::size_t full = blocks - blocks % 8;
    for (std::size_t b = 0; b < full; b += 8) {
        // An octet is 272 bytes: five lines' worth, octet after octet, covers the row.
        qk::detail::prefetch_lines(w + b, avx512vnni_detail::q8_0_prefetch_distance, 5 * 64);
        const __m512i w0 = k::load_chunk<Arch>(w + b, 0), w1 = k::load_chunk<Arch>(w + b, 1), w2 = k::load_chunk<Arch>(w + b, 2);
        const __m512i w3 = k::load_chunk<Arch>(w + b, 3), w4 = k::load_chunk<Arch>(w + b, 4);
        const __m512i a0 = k::load_chunk<Arch>(a + b, 0), a1 = k::load_chunk<Arch>(a + b, 1), a2 = k::load_chunk<Arch>(a + b, 2);
        const __m512i a3 = k::load_chunk<Arch>(a + b, 3), a4 = k::load_chunk<Arch>(a + b, 4);
        const __m512 d = _mm512_castps256_ps512(_mm256_mul_ps(k::octet_scales<Arch>(w0, w1, w2, w3, scales01, scales23),
                                                              k::octet_scales<Arch>(a0, a1, a2, a3, scales01, scales23)));
        acc0 = k::add_scaled<Arch>(acc0, lanes0, d, avx512vnni_detail::dot_i8<Arch>(k::octet_operands<Arch>(w0, a0, 0)));
        acc1 = k::add_scaled<Arch>(acc1, lanes1, d, avx512vnni_detail::dot_i8<Arch>(k::octet_operands<Arch>(w1, a1, 1)));
        acc2 = k::add_scaled<Arch>(acc2, lanes2, d, avx512vnni_detail::dot_i8<Arch>(k::octet_operands<Arch>(w2, a2, 2)));
        // Chunks 3 and 4 in one vpdpbusd chain (see q8_0_octet).
        const k::operands x4 = k::octet_operands<Arch>(w4, a4, 4);
        const __m512i s34 = _mm512_dpbusd_epi32(avx512vnni_detail::dot_i8<Arch>(k::octet_operands<Arch>(w3, a3, 3)), x4.magnitudes, x4.activations);
        acc3 = k::add_scaled<Arch>(acc3, lanes3, d, s34);
    }
    // The last 0-7 blocks: the AVX2 kernel (every AVX-512 CPU runs it).
    const float sum = k::reduce_ps<Arch>(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3))) + dot<Arch>(w + full, a + full, blocks - full, arch::avx2{});
    return avx2_detail::finite_or_reference<Arch>(sum, w, a, blocks);
}

template <class Arch>
QK_TARGET_AVX512VNNI float dot(const block_mxfp4* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::avx512vnni>) noexcept
{
    namespace k = avx512_detail;
    const __m512i magnitudes = k::table<Arch>(k::mxfp4_magnitudes);
    __m512 acc0 = _mm512_setzero_ps();
    __m512 acc1 = _mm512_setzero_ps();
    const std::size_t full = blocks - blocks % 8;
    for (std::size_t b = 0; b < full; b += 8) {
        __m512i s[4];
#pragma GCC unroll 4
        for (std::size_t i = 0; i < 4; ++i) {
            const __m512i codes = k::nibbles2<Arch>(w[b + 2 * i].qs.data(), w[b + 2 * i + 1].qs.data());
            const __m512i ai = k::load2x32<Arch>(a[b + 2 * i].qs.data(), a[b + 2 * i + 1].qs.data());
            s[i] = avx512vnni_detail::dot_i8<Arch>(k::code_operands<Arch, true>(codes, magnitudes, ai));
        }
        k::accumulate8<Arch>(acc0, acc1, s, _mm256_mul_ps(k::e8m0_half8<Arch>(w + b), k::scales8<Arch>(a + b)));
    }
    // The last 0-7 blocks: the AVX2 kernel (every AVX-512 CPU runs it).
    const float sum = k::reduce_ps<Arch>(_mm512_add_ps(acc0, acc1)) + dot<Arch>(w + full, a + full, blocks - full, arch::avx2{});
    return avx2_detail::finite_or_reference<Arch>(sum, w, a, blocks);
}

template <class Arch>
QK_TARGET_AVX512VNNI float dot(const block_nvfp4* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::avx512vnni>) noexcept
{
    namespace k = avx512_detail;
    const __m512i magnitudes = k::table<Arch>(k::mxfp4_magnitudes);
    __m512 acc0 = _mm512_setzero_ps();
    __m512 acc1 = _mm512_setzero_ps();
    const std::size_t full = blocks - blocks % 4;
    for (std::size_t b = 0; b < full; b += 4) {
        __m512i s[4];
#pragma GCC unroll 4
        for (std::size_t i = 0; i < 4; ++i) {
            s[i] = avx512vnni_detail::dot_i8<Arch>(k::nvfp4_operands<Arch>(w[b + i], a + 2 * (b + i), magnitudes));
        }
        k::accumulate_nvfp4<Arch>(acc0, acc1, s, k::nvfp4_scales16<Arch>(w + b, a + 2 * b));
    }
    // The last 0-3 blocks: the AVX2 kernel (every AVX-512 CPU runs it).
    const float sum = k::reduce_ps<Arch>(_mm512_add_ps(acc0, acc1)) + dot<Arch>(w + full, a + 2 * full, blocks - full, arch::avx2{});
    return avx2_detail::finite_or_reference<Arch>(sum, w, a, blocks);
}

template <class Arch>
QK_TARGET_AVX512VNNI float dot(const block_iq4_nl* w, const block_q8_0* a, std::size_t blocks, arch::requires_arch<arch::avx512vnni>) noexcept
{
    namespace k = avx512_detail;
    const __m512i magnitudes = k::table<Arch>(k::iq4_magnitudes);
    const __m512i codes0 = _mm512_loadu_si512(k::iq4_nl_octet.codes[0].data());
    const __m512i codes1 = _mm512_loadu_si512(k::iq4_nl_octet.codes[1].data());
    const __m512i codes2 = _mm512_loadu_si512(k::iq4_nl_octet.codes[2].data());
    const __m512i codes3 = _mm512_loadu_si512(k::iq4_nl_octet.codes[3].data());
    const __m512i scales = _mm512_loadu_si512(k::iq4_nl_octet.scales.data());
    __m512 acc0 = _mm512_setzero_ps();
    __m512 acc1 = _mm512_setzero_ps();
    const std::size_t full = blocks - blocks % 8;
    for (std::size_t b = 0; b < full; b += 8) {
        const __m512i c0 = k::load_chunk<Arch>(w + b, 0);
        const __m512i c1 = k::load_chunk<Arch>(w + b, 1);
        const __m512i c2 = k::load_chunk<Arch>(w + b, 2);
        const __m512i nibbles[4] = {k::pair_nibbles<Arch>(c0, codes0, c1), k::pair_nibbles<Arch>(c0, codes1, c1),
                                    k::pair_nibbles<Arch>(c0, codes2, c1), k::pair_nibbles<Arch>(c1, codes3, c2)};
        const __m256 dw = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutex2var_epi16(c0, scales, c1)));
        __m512i s[4];
#pragma GCC unroll 4
        for (std::size_t i = 0; i < 4; ++i) {
            const __m512i ai = k::load2x32<Arch>(a[b + 2 * i].qs.data(), a[b + 2 * i + 1].qs.data());
            s[i] = avx512vnni_detail::dot_i8<Arch>(k::code_operands<Arch, false>(nibbles[i], magnitudes, ai));
        }
        k::accumulate8<Arch>(acc0, acc1, s, _mm256_mul_ps(dw, k::scales8<Arch>(a + b)));
    }
    // The last 0-7 blocks: the AVX2 kernel (every AVX-512 CPU runs it).
    const float sum = k::reduce_ps<Arch>(_mm512_add_ps(acc0, acc1)) + dot<Arch>(w + full, a + full, blocks - full, arch::avx2{});
    return avx2_detail::finite_or_reference<Arch>(sum, w, a, blocks);
}

template <class Arch>
QK_TARGET_AVX512VNNI float dot(const block_iq4_xs* w, const block_q8_K* a, std::size_t blocks, arch::requires_arch<arch::avx512vnni>) noexcept
{
    namespace k = avx512_detail;
    const __m512i magnitudes = k::table<Arch>(k::iq4_magnitudes);
    __m512 acc = _mm512_setzero_ps();
    for (std::size_t b = 0; b < blocks; ++b) {
        const __m256i m = avx512vnni_detail::group_multipliers<Arch>(w[b]);
        __m512i sum0 = _mm512_setzero_si512();
        __m512i sum1 = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (std::size_t i = 0; i < 4; i += 2) {
            const k::operands x0 = k::iq4_xs_pair<Arch>(w[b], a[b], magnitudes, i);
            const k::operands x1 = k::iq4_xs_pair<Arch>(w[b], a[b], magnitudes, i + 1);
            const __m512i p0 = _mm512_maddubs_epi16(x0.magnitudes, x0.activations);
            const __m512i p1 = _mm512_maddubs_epi16(x1.magnitudes, x1.activations);
            sum0 = _mm512_dpwssd_epi32(sum0, p0, k::group_pair_multipliers<Arch>(m, i));
            sum1 = _mm512_dpwssd_epi32(sum1, p1, k::group_pair_multipliers<Arch>(m, i + 1));
        }
        const __m512 scale = _mm512_set1_ps(avx2_detail::half<Arch>(w[b].d) * a[b].d);
        acc = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(_mm512_add_epi32(sum0, sum1)), acc);
    }
    return avx2_detail::finite_or_reference<Arch>(k::reduce_ps<Arch>(acc), w, a, blocks);
}

} // namespace qk::kernels

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif // QK_HAS_X86_KERNELS
