#version 450
// Y = W·X for one weight format (FORMAT_Q8_0, FORMAT_MXFP4, FORMAT_IQ4_NL, FORMAT_IQ4_XS or
// FORMAT_NVFP4, set by the generator) with float activations, for any number of columns (a
// mat-vec is one): one workgroup per row and tile of column_tile columns, its invocations striding
// over the row's blocks, each decoding a block once for every column of the tile, then a tree
// reduction in shared memory per column, which works for any subgroup size. A column's result does not depend
// on the tile or the tile size: every column takes the same operations in the same order. The
// tile size is a specialization constant so that the compiler unrolls the loops over it and keeps
// the per-column sums in registers (1 for a mat-vec); a last tile that is not full computes its
// last column again in the empty places and does not store them.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint workgroup_size = 64;
layout(constant_id = 1) const uint column_tile = 1;

layout(std430, set = 0, binding = 0) readonly buffer Weights { uint words[]; };
// Column c of X at x[c * cols], of Y at y[c * rows] (cols = blocks_per_row * block_values).
layout(std430, set = 0, binding = 1) readonly buffer Activations { float x[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Output { float y[]; };
// MXFP4's scales: qkern's compile-time E8M0 table (half scales), uploaded as is. NVFP4 decodes its
// UE4M3 scales instead (ue4m3_half below): no second table binding for a format of its own.
layout(std430, set = 0, binding = 3) readonly buffer Table { float e8m0_half[]; };

layout(push_constant) uniform Shape {
    uint rows;
    uint blocks_per_row;
    uint columns;
} shape;

#include "bytes.glsl"
// iq4_values and mxfp4_values, as the C++ formats define them.
#include "generated/value_tables.glsl"

shared float partial[column_tile * workgroup_size];
// This invocation's sums, one per column of the tile.
float sums[column_tile];

// block_dot(at, xi, stride, n): for the block at byte `at` and the tile's columns (x values from
// xi, columns `stride` floats apart, the tile's first n of them real), sums[c] += that column's
// dot with the block.
#if defined(FORMAT_Q8_0)
const uint block_bytes = 34u;
const uint block_values = 32u;
void block_dot(uint at, uint xi, uint stride, uint n)
{
    float s[column_tile];
    for (uint c = 0u; c < column_tile; ++c) {
        s[c] = 0.0;
    }
    for (uint j = 0u; j < 32u; j += 4u) {
        const uint q = u32_at(at + 2u + j);
        const vec4 v = vec4(ivec4(int(q << 24) >> 24, int(q << 16) >> 24, int(q << 8) >> 24, int(q) >> 24));
        for (uint c = 0u; c < column_tile; ++c) {
            const uint i = min(c, n - 1u) * stride + xi + j;
            s[c] += dot(v, vec4(x[i], x[i + 1u], x[i + 2u], x[i + 3u]));
        }
    }
    const float d = fp16_at(at);
    for (uint c = 0u; c < column_tile; ++c) {
        sums[c] += d * s[c];
    }
}
#elif defined(FORMAT_MXFP4) || defined(FORMAT_IQ4_NL)
#if defined(FORMAT_MXFP4)
const uint block_bytes = 17u;
const uint quants = 1u;
#define VALUE(code) mxfp4_values[code]
#else
const uint block_bytes = 18u;
const uint quants = 2u;
#define VALUE(code) iq4_values[code]
#endif
const uint block_values = 32u;
void block_dot(uint at, uint xi, uint stride, uint n)
{
    float s[column_tile];
    for (uint c = 0u; c < column_tile; ++c) {
        s[c] = 0.0;
    }
    for (uint j = 0u; j < 16u; j += 4u) {
        const uint q = u32_at(at + quants + j);
        for (uint b = 0u; b < 4u; ++b) {
            const uint code = (q >> (8u * b)) & 0xffu;
            const float low = VALUE(code & 15u);
            const float high = VALUE(code >> 4);
            for (uint c = 0u; c < column_tile; ++c) {
                const uint i = min(c, n - 1u) * stride + xi + j + b;
                s[c] += low * x[i] + high * x[i + 16u];
            }
        }
    }
#if defined(FORMAT_MXFP4)
    const float d = e8m0_half[byte_at(at)];
    for (uint c = 0u; c < column_tile; ++c) {
        sums[c] += s[c] * d;
    }
#else
    const float d = fp16_at(at);
    for (uint c = 0u; c < column_tile; ++c) {
        sums[c] += d * s[c];
    }
#endif
}
#elif defined(FORMAT_IQ4_XS)
const uint block_bytes = 136u;
const uint block_values = 256u;
void block_dot(uint at, uint xi, uint stride, uint n)
{
    const float d = fp16_at(at);
    const uint scales_h = u16_at(at + 2u);
    const uint scales_l = words[(at + 4u) >> 2]; // blocks of 136 bytes: this word is aligned
    float total[column_tile];
    for (uint c = 0u; c < column_tile; ++c) {
        total[c] = 0.0;
    }
    for (uint g = 0u; g < 8u; ++g) {
        const uint low_bits = (scales_l >> (4u * g)) & 15u; // byte g/2, nibble g%2
        const int scale = int(low_bits | (((scales_h >> (2u * g)) & 3u) << 4)) - 32;
        float s[column_tile];
        for (uint c = 0u; c < column_tile; ++c) {
            s[c] = 0.0;
        }
        for (uint j = 0u; j < 16u; j += 4u) {
            const uint q = words[(at + 8u + 16u * g + j) >> 2];
            for (uint b = 0u; b < 4u; ++b) {
                const uint code = (q >> (8u * b)) & 0xffu;
                const float low = iq4_values[code & 15u];
                const float high = iq4_values[code >> 4];
                for (uint c = 0u; c < column_tile; ++c) {
                    const uint i = min(c, n - 1u) * stride + xi + 32u * g + j + b;
                    s[c] += low * x[i] + high * x[i + 16u];
                }
            }
        }
        const float ds = d * float(scale);
        for (uint c = 0u; c < column_tile; ++c) {
            total[c] += ds * s[c];
        }
    }
    for (uint c = 0u; c < column_tile; ++c) {
        sums[c] += total[c];
    }
}
#elif defined(FORMAT_NVFP4)
const uint block_bytes = 36u;
const uint block_values = 64u;
// Half the unsigned E4M3 value of byte b, exactly as qk::ue4m3_half_to_fp32 builds it (bit 7 not
// read; 0 and 0x7F give 0): a significand below 16 times a power of two from 2^-11, both exact.
float ue4m3_half(uint b)
{
    if (b == 0u || b == 0x7fu) {
        return 0.0;
    }
    const uint exponent = (b >> 3) & 15u;
    const uint mantissa = b & 7u;
    const uint significand = exponent == 0u ? mantissa : 8u + mantissa;
    const int power = exponent == 0u ? -10 : int(exponent) - 11;
    return float(significand) * uintBitsToFloat(uint(127 + power) << 23);
}
// Four sub-blocks of 16 values, each with its scale byte; blocks of 36 bytes keep every block, and
// so its scale word and code words, word-aligned. Byte 8s + j holds values 16s + j (low nibble)
// and 16s + j + 8 (high).
void block_dot(uint at, uint xi, uint stride, uint n)
{
    const uint scales = words[at >> 2];
    float total[column_tile];
    for (uint c = 0u; c < column_tile; ++c) {
        total[c] = 0.0;
    }
    for (uint sub = 0u; sub < 4u; ++sub) {
        float s[column_tile];
        for (uint c = 0u; c < column_tile; ++c) {
            s[c] = 0.0;
        }
        for (uint j = 0u; j < 8u; j += 4u) {
            const uint q = words[(at + 4u + 8u * sub + j) >> 2];
            for (uint b = 0u; b < 4u; ++b) {
                const uint code = (q >> (8u * b)) & 0xffu;
                const float low = mxfp4_values[code & 15u];
                const float high = mxfp4_values[code >> 4];
                for (uint c = 0u; c < column_tile; ++c) {
                    const uint i = min(c, n - 1u) * stride + xi + 16u * sub + j + b;
                    s[c] += low * x[i] + high * x[i + 8u];
                }
            }
        }
        const float d = ue4m3_half((scales >> (8u * sub)) & 0xffu);
        for (uint c = 0u; c < column_tile; ++c) {
            total[c] += d * s[c];
        }
    }
    for (uint c = 0u; c < column_tile; ++c) {
        sums[c] += total[c];
    }
}
#else
#error "the generator defines one FORMAT_*"
#endif

void main()
{
    const uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    const uint first_column = gl_WorkGroupID.z * column_tile;
    const uint n = min(column_tile, shape.columns - first_column);
    const uint stride = shape.blocks_per_row * block_values;
    const uint t = gl_LocalInvocationID.x;
    for (uint c = 0u; c < column_tile; ++c) {
        sums[c] = 0.0;
    }
    if (row < shape.rows) {
        const uint first = row * shape.blocks_per_row;
        for (uint b = t; b < shape.blocks_per_row; b += workgroup_size) {
            block_dot((first + b) * block_bytes, first_column * stride + b * block_values, stride, n);
        }
    }
    for (uint c = 0u; c < column_tile; ++c) {
        partial[c * workgroup_size + t] = sums[c];
    }
    barrier();
    for (uint half_size = workgroup_size / 2u; half_size > 0u; half_size /= 2u) {
        if (t < half_size) {
            for (uint c = 0u; c < column_tile; ++c) {
                partial[c * workgroup_size + t] += partial[c * workgroup_size + t + half_size];
            }
        }
        barrier();
    }
    if (t == 0u && row < shape.rows) {
        for (uint c = 0u; c < n; ++c) {
            y[(first_column + c) * shape.rows + row] = partial[c * workgroup_size];
        }
    }
}
