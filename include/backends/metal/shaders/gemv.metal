// Mat-vec and mat-mult Y = W·X on Metal for Q8_0, MXFP4, IQ4_NL, IQ4_XS and NVFP4 weights (the
// GGUF block bytes, read as they are) with float activations: one SIMD-group per row and column, its
// lanes striding over parts of the row's blocks, then simd_sum. x is not quantized. A mat-vec is
// one column, so each column of a mat-mult is the mat-vec of that column bit for bit.
//
// Host interface (kernel_gemv_q8_0, kernel_gemv_mxfp4, kernel_gemv_iq4_nl, kernel_gemv_iq4_xs,
// kernel_gemv_nvfp4)
//   buffer(0)  device const uchar* w      rows * blocks_per_row blocks, row-major, GGUF bytes
//                                         (34, 17, 18, 136, 36 bytes per block of 32, 32, 32,
//                                         256, 64)
//   buffer(1)  device const float* x      columns * cols values (cols = blocks_per_row * block
//                                         values), column c from x + c * cols
//   buffer(2)  device float*       y      columns * rows values, column c from y + c * rows
//   buffer(3)  constant gemv_args&        { uint rows; uint blocks_per_row; } (setBytes, 8 bytes)
//   buffer(4)  constant float* e8m0_half  kernel_gemv_mxfp4 only: qk::e8m0_half_table, 256
//                                         floats (1024 bytes). NVFP4 decodes its UE4M3 scales
//                                         (gemv_ue4m3_half) and takes no table.
//   threadgroup memory: none. Function constants: none.
//   dispatch: threadgroups (ceil(rows / nsg), columns, 1); threads per threadgroup (32 * nsg, 1, 1)
//   for any nsg >= 1 with 32 * nsg <= the pipeline's maxTotalThreadsPerThreadgroup; the
//   pipeline's threadExecutionWidth must be 32. SIMD-group s of threadgroup (g, c) computes row
//   g * nsg + s of column c (rows past the last return at once). Row and column offsets are
//   64-bit; within a row, blocks_per_row * 8 (the parts) must stay below 2^32.
//
// Blocks of 17, 18 and 34 bytes are not word aligned, so weights are read byte by byte and
// fp16 scales assembled from two bytes. A lane's unit of work is a part of a block: a quarter
// (8 values) of the 32-value formats, a 32-value group of IQ4_XS, a 16-value sub-block of NVFP4.
// In the 32-value nibble formats byte j of a block holds values j (low nibble) and j + 16 (high),
// so quarter q covers bytes 4q..4q+3; NVFP4's sub-block s has byte 8s + j hold values 16s + j and
// 16s + j + 8.
#include <metal_stdlib>
using namespace metal;

struct gemv_args {
    uint rows;
    uint blocks_per_row;
};

// iq4_values (the IQ4_NL grid) and mxfp4_values (the E2M1 values doubled to integers, which the
// half-scale table undoes), as the C++ formats define them.
#include "generated/value_tables.h"

// A little-endian fp16 at any byte offset.
inline float gemv_fp16_at(device const uchar* p)
{
    return float(as_type<half>(ushort(uint(p[0]) | (uint(p[1]) << 8))));
}

struct gemv_q8_0 {
    float part(device const uchar* block, device const float* x, uint q) const
    {
        device const uchar* qs = block + 2 + 8 * q;
        device const float* xs = x + 8 * q;
        float s = 0.0f;
        for (uint t = 0; t < 8; ++t) {
            // The byte as a signed int8: flip the sign bit's weight from +128 to -128.
            s += float(int(uint(qs[t]) ^ 0x80u) - 128) * xs[t];
        }
        return gemv_fp16_at(block) * s;
    }
};

struct gemv_mxfp4 {
    constant float* e8m0_half;
    float part(device const uchar* block, device const float* x, uint q) const
    {
        device const uchar* qs = block + 1 + 4 * q;
        device const float* xs = x + 4 * q;
        float s = 0.0f;
        for (uint t = 0; t < 4; ++t) {
            const uint code = qs[t];
            s += mxfp4_values[code & 15u] * xs[t] + mxfp4_values[code >> 4] * xs[t + 16];
        }
        return e8m0_half[block[0]] * s;
    }
};

struct gemv_iq4_nl {
    float part(device const uchar* block, device const float* x, uint q) const
    {
        device const uchar* qs = block + 2 + 4 * q;
        device const float* xs = x + 4 * q;
        float s = 0.0f;
        for (uint t = 0; t < 4; ++t) {
            const uint code = qs[t];
            s += iq4_values[code & 15u] * xs[t] + iq4_values[code >> 4] * xs[t + 16];
        }
        return gemv_fp16_at(block) * s;
    }
};

// Layout: fp16 d; uint16 scales_h; uint8 scales_l[4]; uint8 qs[128]. Group g has the 6-bit
// scale (low nibble g % 2 of scales_l[g / 2]) | (bits 2g, 2g + 1 of scales_h) << 4, minus 32.
struct gemv_iq4_xs {
    float part(device const uchar* block, device const float* x, uint g) const
    {
        const uint scales_h = uint(block[2]) | (uint(block[3]) << 8);
        const uint low = (uint(block[4 + g / 2]) >> (4 * (g % 2))) & 15u;
        const int scale = int(low | (((scales_h >> (2 * g)) & 3u) << 4)) - 32;
        device const uchar* qs = block + 8 + 16 * g;
        device const float* xs = x + 32 * g;
        float s = 0.0f;
        for (uint t = 0; t < 16; ++t) {
            const uint code = qs[t];
            s += iq4_values[code & 15u] * xs[t] + iq4_values[code >> 4] * xs[t + 16];
        }
        return (gemv_fp16_at(block) * float(scale)) * s;
    }
};

// Half the unsigned E4M3 value of byte b, exactly as qk::ue4m3_half_to_fp32 builds it (bit 7 not
// read; 0 and 0x7F give 0): a significand below 16 times a power of two from 2^-11, both exact.
inline float gemv_ue4m3_half(uint b)
{
    if (b == 0u || b == 0x7fu) {
        return 0.0f;
    }
    const uint exponent = (b >> 3) & 15u;
    const uint mantissa = b & 7u;
    const uint significand = exponent == 0u ? mantissa : 8u + mantissa;
    const int power = exponent == 0u ? -10 : int(exponent) - 11;
    return float(significand) * as_type<float>(uint(127 + power) << 23);
}

// Layout: uint8 d[4] (UE4M3 scales); uint8 qs[32]. Part s is sub-block s: scale d[s], codes in
// qs[8s .. 8s + 7].
struct gemv_nvfp4 {
    float part(device const uchar* block, device const float* x, uint s) const
    {
        device const uchar* qs = block + 4 + 8 * s;
        device const float* xs = x + 16 * s;
        float sum = 0.0f;
        for (uint t = 0; t < 8; ++t) {
            const uint code = qs[t];
            sum += mxfp4_values[code & 15u] * xs[t] + mxfp4_values[code >> 4] * xs[t + 8];
        }
        return gemv_ue4m3_half(block[s]) * sum;
    }
};

template <typename Format, uint BlockBytes, uint BlockValues, uint Parts>
inline void gemv_row(thread const Format& format, device const uchar* w, device const float* x, device float* y,
                     constant gemv_args& args, uint row, uint column, uint lane, uint width)
{
    // Uniform over the SIMD-group: the lanes of one row leave together, before simd_sum.
    if (row >= args.rows) {
        return;
    }
    x += ulong(column) * args.blocks_per_row * BlockValues;
    y += ulong(column) * args.rows;
    device const uchar* blocks = w + ulong(row) * args.blocks_per_row * BlockBytes;
    const uint parts = args.blocks_per_row * Parts;
    float sum = 0.0f;
    for (uint p = lane; p < parts; p += width) {
        const uint block = p / Parts;
        sum += format.part(blocks + ulong(block) * BlockBytes, x + ulong(block) * BlockValues, p % Parts);
    }
    sum = simd_sum(sum);
    if (lane == 0) {
        y[row] = sum;
    }
}

kernel void kernel_gemv_q8_0(device const uchar* w [[buffer(0)]],
                             device const float* x [[buffer(1)]],
                             device float* y [[buffer(2)]],
                             constant gemv_args& args [[buffer(3)]],
                             uint3 tgpig [[threadgroup_position_in_grid]],
                             uint sgitg [[simdgroup_index_in_threadgroup]],
                             uint nsg [[simdgroups_per_threadgroup]],
                             uint tiisg [[thread_index_in_simdgroup]],
                             uint ntpsg [[threads_per_simdgroup]])
{
    const gemv_q8_0 format{};
    gemv_row<gemv_q8_0, 34, 32, 4>(format, w, x, y, args, tgpig.x * nsg + sgitg, tgpig.y, tiisg, ntpsg);
}

kernel void kernel_gemv_mxfp4(device const uchar* w [[buffer(0)]],
                              device const float* x [[buffer(1)]],
                              device float* y [[buffer(2)]],
                              constant gemv_args& args [[buffer(3)]],
                              constant float* e8m0_half [[buffer(4)]],
                              uint3 tgpig [[threadgroup_position_in_grid]],
                              uint sgitg [[simdgroup_index_in_threadgroup]],
                              uint nsg [[simdgroups_per_threadgroup]],
                              uint tiisg [[thread_index_in_simdgroup]],
                              uint ntpsg [[threads_per_simdgroup]])
{
    const gemv_mxfp4 format{e8m0_half};
    gemv_row<gemv_mxfp4, 17, 32, 4>(format, w, x, y, args, tgpig.x * nsg + sgitg, tgpig.y, tiisg, ntpsg);
}

kernel void kernel_gemv_iq4_nl(device const uchar* w [[buffer(0)]],
                               device const float* x [[buffer(1)]],
                               device float* y [[buffer(2)]],
                               constant gemv_args& args [[buffer(3)]],
                               uint3 tgpig [[threadgroup_position_in_grid]],
                               uint sgitg [[simdgroup_index_in_threadgroup]],
                               uint nsg [[simdgroups_per_threadgroup]],
                               uint tiisg [[thread_index_in_simdgroup]],
                               uint ntpsg [[threads_per_simdgroup]])
{
    const gemv_iq4_nl format{};
    gemv_row<gemv_iq4_nl, 18, 32, 4>(format, w, x, y, args, tgpig.x * nsg + sgitg, tgpig.y, tiisg, ntpsg);
}

kernel void kernel_gemv_iq4_xs(device const uchar* w [[buffer(0)]],
                               device const float* x [[buffer(1)]],
                               device float* y [[buffer(2)]],
                               constant gemv_args& args [[buffer(3)]],
                               uint3 tgpig [[threadgroup_position_in_grid]],
                               uint sgitg [[simdgroup_index_in_threadgroup]],
                               uint nsg [[simdgroups_per_threadgroup]],
                               uint tiisg [[thread_index_in_simdgroup]],
                               uint ntpsg [[threads_per_simdgroup]])
{
    const gemv_iq4_xs format{};
    gemv_row<gemv_iq4_xs, 136, 256, 8>(format, w, x, y, args, tgpig.x * nsg + sgitg, tgpig.y, tiisg, ntpsg);
}

kernel void kernel_gemv_nvfp4(device const uchar* w [[buffer(0)]],
                              device const float* x [[buffer(1)]],
                              device float* y [[buffer(2)]],
                              constant gemv_args& args [[buffer(3)]],
                              uint3 tgpig [[threadgroup_position_in_grid]],
                              uint sgitg [[simdgroup_index_in_threadgroup]],
                              uint nsg [[simdgroups_per_threadgroup]],
                              uint tiisg [[thread_index_in_simdgroup]],
                              uint ntpsg [[threads_per_simdgroup]])
{
    const gemv_nvfp4 format{};
    gemv_row<gemv_nvfp4, 36, 64, 4>(format, w, x, y, args, tgpig.x * nsg + sgitg, tgpig.y, tiisg, ntpsg);
}
