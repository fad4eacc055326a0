#version 450
// The sums of the weights exp_difference(x, max) per chunk of chunk_size values in qkern's fixed
// order (vocabulary_scan.hpp's chunk_exp_sum): element j of a chunk goes to lane j % chunk_lanes,
// each lane adds its elements in order in double, the 16 lanes are added as a tree (i += i + 8,
// + 4, + 2, + 1), and the sum is rounded to float once. One invocation per lane, so a workgroup
// covers workgroup_size / chunk_lanes chunks; grid: x over chunks, y rows.

#include "sampling_common.glsl"

shared double lane_sum[workgroup_size];

void main()
{
    const uint row = gl_WorkGroupID.y;
    if (row >= shape.n_seq || !row_has(row, flag_active) || !row_has(row, flag_sums)
        || results[row * result_words + result_status] != status_ok) {
        return;
    }
    const uint t = gl_LocalInvocationID.x;
    const uint chunk = gl_WorkGroupID.x * (workgroup_size / chunk_lanes) + t / chunk_lanes;
    const uint lane = t % chunk_lanes;
    const float max = uintBitsToFloat(results[row * result_words + result_max_bits]);
    precise double sum = 0.0LF;
    if (chunk < shape.chunks) {
        const uint begin = chunk * chunk_size;
        const uint count = min(chunk_size, shape.n_vocab - begin);
        for (uint j = lane; j < count; j += chunk_lanes) {
            sum = sum + double_of_bits(floatBitsToUint(exp_difference(value_at(row, begin + j), max)));
        }
    }
    lane_sum[t] = sum;
    barrier();
    if (lane == 0u && chunk < shape.chunks) {
        precise double s[chunk_lanes];
        for (uint l = 0u; l < chunk_lanes; ++l) {
            s[l] = lane_sum[t + l];
        }
        for (uint h = chunk_lanes / 2u; h > 0u; h /= 2u) {
            for (uint l = 0u; l < h; ++l) {
                s[l] = s[l] + s[l + h];
            }
        }
        chunk_sums[row * shape.chunks + chunk] = float_bits_nearest(s[0]);
    }
}
