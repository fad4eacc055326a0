#version 450
// The whole-vocabulary logit changes of a chain, one stage at a time: with param == all_rows,
// copies the caller's logits (extra) into the work values of every active row; otherwise runs
// stage `param`'s op of each row (temperature division, logit biases, or keeping only the row's
// first maximum, found by sampling_argmax just before). Grid: x over the vocabulary, y rows.

#include "sampling_common.glsl"

void main()
{
    const uint row = gl_WorkGroupID.y;
    const uint i = gl_GlobalInvocationID.x;
    if (row >= shape.n_seq || !row_has(row, flag_active)) {
        return;
    }
    const uint at = row * shape.n_vocab + i;
    if (shape.param == all_rows) {
        if (i < shape.n_vocab) {
            values[at] = extra[at];
        }
        return;
    }
    const uint op = (shape.param * shape.n_seq + row) * op_words;
    const uint kind = ops[op + op_kind];
    if (kind == kind_divide && i < shape.n_vocab) {
        values[at] = divide_bits(values[at], uintBitsToFloat(ops[op + op_param]));
    } else if (kind == kind_bias && i < ops[op + op_count]) {
        // Each token is listed once per row, so no two invocations touch the same value.
        const uint b = (ops[op + op_first] + i) * 2u;
        const uint at_token = row * shape.n_vocab + biases[b];
        values[at_token] = add_bits(values[at_token], biases[b + 1u]);
    } else if (kind == kind_keep_max && i < shape.n_vocab) {
        if (i != results[row * result_words + result_index]) {
            values[at] = bits_minus_infinity;
        }
    }
}
