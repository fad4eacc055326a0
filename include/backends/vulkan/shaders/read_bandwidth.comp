#version 450
// Reads a buffer once, as a mat-vec reads its weights, and keeps one word per invocation so the
// reads cannot be optimized away: the device's streaming-read bandwidth, which qk bench reports
// the Vulkan mat-vec against.

layout(local_size_x_id = 0) in;

layout(std430, set = 0, binding = 0) readonly buffer Data { uvec4 data[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Sink { uint sink[]; };

layout(push_constant) uniform Size {
    uint vectors;
} size;

void main()
{
    const uint threads = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    const uint id = gl_GlobalInvocationID.x;
    uvec4 acc = uvec4(0u);
    for (uint i = id; i < size.vectors; i += threads) {
        acc ^= data[i];
    }
    sink[id] = acc.x ^ acc.y ^ acc.z ^ acc.w;
}
