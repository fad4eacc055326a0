#version 450
// The softmax output p = exp_difference(x, max) * factor (extra) for rows that asked for it, bit
// for bit as qk::sampling::softmax writes it: the product of the two floats is exact in double
// and rounded to float by hand below 2^-126, where the driver might flush. Grid: x over the
// vocabulary, y rows.

#include "sampling_common.glsl"

void main()
{
    const uint row = gl_WorkGroupID.y;
    const uint i = gl_GlobalInvocationID.x;
    if (row >= shape.n_seq || i >= shape.n_vocab || !row_has(row, flag_active) || !row_has(row, flag_softmax)) {
        return;
    }
    const uint r = row * result_words;
    if (results[r + result_status] != status_ok) {
        return;
    }
    const float max = uintBitsToFloat(results[r + result_max_bits]);
    const float factor = uintBitsToFloat(results[r + result_factor_bits]);
    const float e = exp_difference(value_at(row, i), max);
    extra[row * shape.n_vocab + i] = float_bits_nearest(double_of_bits(floatBitsToUint(e)) * double(factor));
}
