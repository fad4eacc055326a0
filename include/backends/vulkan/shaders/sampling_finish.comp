#version 450
// Per row, after sampling_chunks: the total of the chunk sums (in order, in double), the softmax
// factor float(1.0 / total) rounded exactly as the CPU rounds it, and the categorical draw: the
// first index whose running sum (chunk sums, then the elements of the chunk reached, in double)
// exceeds u * total, or that chunk's last nonzero element where rounding leaves it short, as
// vocabulary_scan.hpp's draw(). One workgroup per row; the chunk's exps are computed in parallel,
// the running sum is one invocation's, as its order requires.

#include "sampling_common.glsl"

shared uint e[chunk_size]; // float bits
shared uint chosen_chunk;
shared double running_shared;
shared bool done;
shared uint token;

void main()
{
    const uint row = gl_WorkGroupID.y;
    if (row >= shape.n_seq || !row_has(row, flag_active) || !row_has(row, flag_sums)
        || results[row * result_words + result_status] != status_ok) {
        return;
    }
    const uint t = gl_LocalInvocationID.x;
    const uint r = row * result_words;
    const uint first_sum = row * shape.chunks;
    precise double total = 0.0LF;
    for (uint c = 0u; c < shape.chunks; ++c) {
        total = total + double_of_bits(chunk_sums[first_sum + c]);
    }
    if (t == 0u) {
        const uvec2 total_bits = unpackDouble2x32(total);
        results[r + result_total_low] = total_bits.x;
        results[r + result_total_high] = total_bits.y;
        if (row_has(row, flag_softmax)) {
            results[r + result_factor_bits] = reciprocal_bits(total);
        }
        chosen_chunk = 0u;
        running_shared = 0.0LF;
        done = false;
        token = shape.n_vocab;
    }
    if (!row_has(row, flag_whole_row_draw)) {
        return;
    }
    const double u = packDouble2x32(uvec2(row_word(row, row_u_low), row_word(row, row_u_high)));
    precise double threshold = u * total;
    const float max = uintBitsToFloat(results[r + result_max_bits]);
    barrier();
    uint next = 0u; // the chunk to search from, invocation 0's
    while (true) {
        if (t == 0u) {
            precise double running = running_shared;
            uint c = next;
            for (; c < shape.chunks; ++c) {
                precise double with_chunk = running + double_of_bits(chunk_sums[first_sum + c]);
                if (with_chunk > threshold || c + 1u == shape.chunks) {
                    break;
                }
                running = with_chunk;
            }
            running_shared = running;
            chosen_chunk = c;
            done = c >= shape.chunks;
        }
        barrier();
        if (done) {
            break;
        }
        const uint begin = chosen_chunk * chunk_size;
        const uint count = min(chunk_size, shape.n_vocab - begin);
        for (uint j = t; j < count; j += workgroup_size) {
            e[j] = floatBitsToUint(exp_difference(value_at(row, begin + j), max));
        }
        barrier();
        if (t == 0u) {
            precise double running = running_shared;
            uint last_nonzero = shape.n_vocab;
            for (uint j = 0u; j < count; ++j) {
                if (e[j] != 0u) {
                    last_nonzero = begin + j;
                    running = running + double_of_bits(e[j]);
                    if (running > threshold) {
                        token = begin + j;
                        break;
                    }
                }
            }
            if (token == shape.n_vocab && last_nonzero != shape.n_vocab) {
                token = last_nonzero;
            }
            running_shared = running;
            done = token != shape.n_vocab || chosen_chunk + 1u >= shape.chunks;
            next = chosen_chunk + 1u;
        }
        barrier();
        if (done) {
            break;
        }
    }
    if (t == 0u) {
        results[r + result_token] = token;
    }
}
