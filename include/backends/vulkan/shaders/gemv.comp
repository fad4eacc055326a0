#version 450
// y = W·x for one weight format (FORMAT_Q8_0, FORMAT_MXFP4, FORMAT_IQ4_NL or FORMAT_IQ4_XS, set by
// the generator) with float activations: one workgroup per row, its invocations striding over
// the row's blocks, then a tree reduction in shared memory, which works for any subgroup size.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint workgroup_size = 64;

layout(std430, set = 0, binding = 0) readonly buffer Weights { uint words[]; };
layout(std430, set = 0, binding = 1) readonly buffer Activations { float x[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Output { float y[]; };
// MXFP4's scales: qkern's compile-time E8M0 table (half scales), uploaded as is.
layout(std430, set = 0, binding = 3) readonly buffer Table { float e8m0_half[]; };

layout(push_constant) uniform Shape {
    uint rows;
    uint blocks_per_row;
} shape;

#include "bytes.glsl"
// iq4_values and mxfp4_values, as the C++ formats define them.
#include "generated/value_tables.glsl"

shared float partial[workgroup_size];

#if defined(FORMAT_Q8_0)
const uint block_bytes = 34u;
const uint block_values = 32u;
float block_dot(uint at, uint xi)
{
    float sum = 0.0;
    for (uint j = 0u; j < 32u; j += 4u) {
        const uint q = u32_at(at + 2u + j);
        const ivec4 v = ivec4(int(q << 24) >> 24, int(q << 16) >> 24, int(q << 8) >> 24, int(q) >> 24);
        sum += dot(vec4(v), vec4(x[xi + j], x[xi + j + 1u], x[xi + j + 2u], x[xi + j + 3u]));
    }
    return fp16_at(at) * sum;
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
float block_dot(uint at, uint xi)
{
    float sum = 0.0;
    for (uint j = 0u; j < 16u; j += 4u) {
        const uint q = u32_at(at + quants + j);
        for (uint b = 0u; b < 4u; ++b) {
            const uint code = (q >> (8u * b)) & 0xffu;
            sum += VALUE(code & 15u) * x[xi + j + b] + VALUE(code >> 4) * x[xi + j + b + 16u];
        }
    }
#if defined(FORMAT_MXFP4)
    return sum * e8m0_half[byte_at(at)];
#else
    return fp16_at(at) * sum;
#endif
}
#elif defined(FORMAT_IQ4_XS)
const uint block_bytes = 136u;
const uint block_values = 256u;
float block_dot(uint at, uint xi)
{
    const float d = fp16_at(at);
    const uint scales_h = u16_at(at + 2u);
    const uint scales_l = words[(at + 4u) >> 2]; // blocks of 136 bytes: this word is aligned
    float total = 0.0;
    for (uint g = 0u; g < 8u; ++g) {
        const uint low = (scales_l >> (4u * g)) & 15u; // byte g/2, nibble g%2
        const int scale = int(low | (((scales_h >> (2u * g)) & 3u) << 4)) - 32;
        float sum = 0.0;
        for (uint j = 0u; j < 16u; j += 4u) {
            const uint q = words[(at + 8u + 16u * g + j) >> 2];
            for (uint b = 0u; b < 4u; ++b) {
                const uint code = (q >> (8u * b)) & 0xffu;
                sum += iq4_values[code & 15u] * x[xi + 32u * g + j + b] + iq4_values[code >> 4] * x[xi + 32u * g + j + b + 16u];
            }
        }
        total += (d * float(scale)) * sum;
    }
    return total;
}
#else
#error "the generator defines one FORMAT_*"
#endif

void main()
{
    const uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    const uint t = gl_LocalInvocationID.x;
    float sum = 0.0;
    if (row < shape.rows) {
        const uint first = row * shape.blocks_per_row;
        for (uint b = t; b < shape.blocks_per_row; b += workgroup_size) {
            sum += block_dot((first + b) * block_bytes, b * block_values);
        }
    }
    partial[t] = sum;
    barrier();
    for (uint half_size = workgroup_size / 2u; half_size > 0u; half_size /= 2u) {
        if (t < half_size) {
            partial[t] += partial[t + half_size];
        }
        barrier();
    }
    if (t == 0u && row < shape.rows) {
        y[row] = partial[0];
    }
}
