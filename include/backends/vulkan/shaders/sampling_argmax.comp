#version 450
// The first index of each row's largest value (NaN ranks as -inf): one workgroup per row, each
// invocation striding over the row, then a shared-memory reduction (any subgroup size). Rows:
// with param == all_rows those whose selection needs the maximum (its status is recorded too);
// otherwise those whose stage `param` op keeps only the maximum (temperature <= 0).

#include "sampling_common.glsl"

shared uint best_key[workgroup_size];
shared uint best_index[workgroup_size];

void main()
{
    const uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= shape.n_seq || !row_has(row, flag_active)) {
        return;
    }
    if (shape.param == all_rows ? !row_has(row, flag_max)
                                : ops[(shape.param * shape.n_seq + row) * op_words + op_kind] != kind_keep_max) {
        return;
    }
    const uint t = gl_LocalInvocationID.x;
    uint key = 0u; // below every value's key
    uint index = 0xffffffffu;
    for (uint i = t; i < shape.n_vocab; i += workgroup_size) {
        const uint k = order_key(value_at(row, i));
        if (k > key) { // strict: the first index of a tie stays
            key = k;
            index = i;
        }
    }
    best_key[t] = key;
    best_index[t] = index;
    barrier();
    for (uint half_size = workgroup_size / 2u; half_size > 0u; half_size /= 2u) {
        if (t < half_size) {
            const uint k = best_key[t + half_size];
            const uint j = best_index[t + half_size];
            if (k > best_key[t] || (k == best_key[t] && j < best_index[t])) {
                best_key[t] = k;
                best_index[t] = j;
            }
        }
        barrier();
    }
    if (t == 0u) {
        const uint r = row * result_words;
        const uint index = best_index[0];
        results[r + result_index] = index;
        if (shape.param == all_rows) {
            const uint k = best_key[0];
            results[r + result_max_bits] = value_at(row, index);
            results[r + result_token] = index;
            results[r + result_status] = k <= key_minus_infinity ? status_no_candidate
                                         : (k == key_plus_infinity ? status_infinite : status_ok);
        }
    }
}
