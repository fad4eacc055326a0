#version 450
// Top-k per row and what a chain does with the list afterwards. One workgroup per row:
//  1. radix select on order-preserving keys (NaN as -inf), a byte at a time from the top, finds
//     the k-th largest key T and how many of the k are ties at T;
//  2. compaction: every value above T, plus the ties at T with the lowest ids (each invocation
//     takes a contiguous part of the row, so a prefix count over invocations orders the ties);
//  3. a bitonic sort of the k by (value desc, id asc): the CPU's sorted top-k list, written out
//     for the top-k op;
//  4. for a chain, its list ops (temperature, biases, keep-the-maximum, a further top-k) and the
//     selection from the list (greedy, or compute_probabilities + the draw of samplers/dist.hpp,
//     with adaptive_p's transform and second softmax between them where it draws; the sums are
//     sequential in list order and so run on one invocation).

#include "sampling_common.glsl"

shared uint histogram[256];
shared uint list_value[list_capacity]; // float bits, never NaN
shared uint list_id[list_capacity];
shared uint list_p[list_capacity];     // float bits
shared uint segment_ties[workgroup_size];
shared uint found_prefix;
shared uint found_remaining;
shared uint above_count;
shared uint keep_index;

bool ranks_before(uint a, uint b)
{
    const uint ka = order_key(list_value[a]);
    const uint kb = order_key(list_value[b]);
    return ka > kb || (ka == kb && list_id[a] < list_id[b]);
}

// The largest of list_value[0 .. count) (of list_p's values with `of_p`), as bits.
uint largest(uint count, bool of_p)
{
    uint max_bits = bits_minus_infinity;
    for (uint i = 0u; i < count; ++i) {
        const uint v = of_p ? list_p[i] : list_value[i];
        if (order_key(v) > order_key(max_bits)) {
            max_bits = v;
        }
    }
    return max_bits;
}

// The float nearest to e * factor (two floats; their double product is exact), as bits.
uint product_bits(float e, float factor)
{
    return float_bits_nearest(double_of_bits(floatBitsToUint(e)) * double(factor));
}

// candidates::compute_probabilities over list_value[0 .. count) (with `of_p`, over the values in
// list_p, replaced in place): corrected exponentials, their total in double with element i in
// lane i % 16 and the lanes added as a tree, factor float(1 / total), each p = e * factor into
// list_p. Returns the factor.
float probabilities(uint count, bool of_p, float max)
{
    precise double lanes[16];
    for (uint l = 0u; l < 16u; ++l) {
        lanes[l] = 0.0LF;
    }
    for (uint i = 0u; i < count; ++i) {
        list_p[i] = floatBitsToUint(exp_difference(of_p ? list_p[i] : list_value[i], max));
        lanes[i % 16u] = lanes[i % 16u] + double_of_bits(list_p[i]);
    }
    for (uint width = 8u; width > 0u; width /= 2u) {
        for (uint l = 0u; l < width; ++l) {
            lanes[l] = lanes[l] + lanes[l + width];
        }
    }
    const float factor = uintBitsToFloat(reciprocal_bits(lanes[0]));
    for (uint i = 0u; i < count; ++i) {
        list_p[i] = product_bits(uintBitsToFloat(list_p[i]), factor);
    }
    return factor;
}

// adaptive_p's transform of a probability's bits, aimed at a: 5 - 10 x x / (1 + x) with
// x = |(p - a) * (1 / 0.3)|, left to right, the quotient correctly rounded. A subnormal p that a
// driver flushes changes nothing: x then differs by under 2^-120, far below what moves the result.
uint adaptive_logit(uint p_bits, float a)
{
    precise float d = uintBitsToFloat(p_bits) - a;
    precise float x = abs(d * uintBitsToFloat(adaptive_inverse_width_bits));
    precise float numerator = (uintBitsToFloat(adaptive_sharpness_bits) * x) * x;
    precise float denominator = 1.0 + x;
    precise float logit = uintBitsToFloat(adaptive_peak_logit_bits) - uintBitsToFloat(divide_bits(floatBitsToUint(numerator), denominator));
    return floatBitsToUint(logit);
}

// Sorts list[0 .. count) best first; count and the trip counts are uniform over the workgroup.
void sort_list(uint count)
{
    const uint t = gl_LocalInvocationID.x;
    uint padded = 1u;
    while (padded < count) {
        padded <<= 1;
    }
    // Padding ranks after everything: -inf with an id above every token's.
    for (uint i = count + t; i < padded; i += workgroup_size) {
        list_value[i] = bits_minus_infinity;
        list_id[i] = 0xffffffffu;
    }
    barrier();
    for (uint size = 2u; size <= padded; size <<= 1) {
        for (uint stride = size >> 1; stride > 0u; stride >>= 1) {
            for (uint p = t; p < padded / 2u; p += workgroup_size) {
                const uint lo = (p / stride) * stride * 2u + p % stride;
                const uint hi = lo + stride;
                const bool best_first = (lo & size) == 0u;
                if (best_first ? ranks_before(hi, lo) : ranks_before(lo, hi)) {
                    const uint v = list_value[lo];
                    const uint id = list_id[lo];
                    list_value[lo] = list_value[hi];
                    list_id[lo] = list_id[hi];
                    list_value[hi] = v;
                    list_id[hi] = id;
                }
            }
            barrier();
        }
    }
}

// The status of a selection whose best candidate has these value bits.
uint status_of(uint best)
{
    const uint k = order_key(best);
    return k <= key_minus_infinity ? status_no_candidate : (k == key_plus_infinity ? status_infinite : status_ok);
}

void main()
{
    const uint row = gl_WorkGroupID.y;
    if (row >= shape.n_seq || !row_has(row, flag_active) || !row_has(row, flag_top_k)) {
        return;
    }
    const uint t = gl_LocalInvocationID.x;
    const uint n = shape.n_vocab;
    const uint k = row_word(row, row_k); // 1 <= k <= min(n, list_capacity), checked by the host

    // 1. The k-th largest key, a byte at a time.
    uint prefix = 0u;
    uint mask = 0u;
    uint remaining = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (uint b = t; b < 256u; b += workgroup_size) {
            histogram[b] = 0u;
        }
        barrier();
        for (uint i = t; i < n; i += workgroup_size) {
            const uint key = order_key(value_at(row, i));
            if ((key & mask) == prefix) {
                atomicAdd(histogram[(key >> uint(shift)) & 255u], 1u);
            }
        }
        barrier();
        if (t == 0u) {
            uint above = 0u;
            int b = 255;
            for (; b > 0; --b) {
                if (above + histogram[b] >= remaining) {
                    break;
                }
                above += histogram[b];
            }
            found_prefix = prefix | (uint(b) << uint(shift));
            found_remaining = remaining - above;
        }
        barrier();
        prefix = found_prefix;
        remaining = found_remaining;
        mask |= 255u << uint(shift);
        barrier();
    }
    const uint kth_key = prefix;
    const uint ties = remaining; // taken at kth_key, lowest ids first
    const uint above = k - ties;

    // 2. Compaction.
    const uint segment = (n + workgroup_size - 1u) / workgroup_size;
    const uint begin = min(n, t * segment);
    const uint end = min(n, begin + segment);
    uint own_ties = 0u;
    for (uint i = begin; i < end; ++i) {
        own_ties += order_key(value_at(row, i)) == kth_key ? 1u : 0u;
    }
    segment_ties[t] = own_ties;
    if (t == 0u) {
        above_count = 0u;
    }
    barrier();
    if (t == 0u) {
        uint sum = 0u;
        for (uint j = 0u; j < workgroup_size; ++j) {
            const uint c = segment_ties[j];
            segment_ties[j] = sum;
            sum += c;
        }
    }
    barrier();
    uint rank = segment_ties[t];
    for (uint i = begin; i < end && (rank < ties || above_count < above); ++i) {
        const uint bits = value_at(row, i);
        const uint key = order_key(bits);
        if (key > kth_key) {
            const uint slot = atomicAdd(above_count, 1u);
            list_value[slot] = without_nan(bits);
            list_id[slot] = i;
        } else if (key == kth_key) {
            if (rank < ties) {
                list_value[above + rank] = without_nan(bits);
                list_id[above + rank] = i;
            }
            ++rank;
        }
    }
    barrier();

    // 3. Sorted, as the CPU's list.
    uint count = k;
    sort_list(count);
    const uint r = row * result_words;
    if (row_has(row, flag_write_list)) {
        for (uint i = t; i < count; i += workgroup_size) {
            const uint at = (row * list_capacity + i) * list_words; // a token_data, p left 0
            extra[at] = list_id[i];
            extra[at + 1u] = list_value[i];
            extra[at + 2u] = 0u;
        }
    }
    if (t == 0u) {
        results[r + result_list_size] = count;
        results[r + result_status] = status_ok;
    }
    if (!row_has(row, flag_list)) {
        return;
    }

    // 4. The chain's list ops, in order.
    const uint first_op = row_word(row, row_list_ops);
    const uint op_total = row_word(row, row_list_count);
    for (uint o = 0u; o < op_total; ++o) {
        const uint op = (first_op + o) * op_words;
        const uint kind = ops[op + op_kind];
        if (kind == kind_divide) {
            const float divisor = uintBitsToFloat(ops[op + op_param]);
            for (uint i = t; i < count; i += workgroup_size) {
                list_value[i] = without_nan(divide_bits(list_value[i], divisor));
            }
        } else if (kind == kind_bias) {
            const uint first = ops[op + op_first];
            const uint listed = ops[op + op_count];
            for (uint i = t; i < count; i += workgroup_size) {
                // Biases are sorted by token id: a binary search.
                uint lo = 0u;
                uint hi = listed;
                const uint id = list_id[i];
                while (lo < hi) {
                    const uint mid = (lo + hi) / 2u;
                    if (biases[(first + mid) * 2u] < id) {
                        lo = mid + 1u;
                    } else {
                        hi = mid;
                    }
                }
                if (lo < listed && biases[(first + lo) * 2u] == id) {
                    list_value[i] = without_nan(add_bits(list_value[i], biases[(first + lo) * 2u + 1u]));
                }
            }
        } else if (kind == kind_keep_max) {
            if (t == 0u) {
                uint keep = 0u;
                for (uint i = 1u; i < count; ++i) {
                    keep = order_key(list_value[i]) > order_key(list_value[keep]) ? i : keep;
                }
                keep_index = keep;
            }
            barrier();
            for (uint i = t; i < count; i += workgroup_size) {
                if (i != keep_index) {
                    list_value[i] = bits_minus_infinity;
                }
            }
        } else if (kind == kind_keep_top_k) {
            const uint keep = ops[op + op_param];
            if (keep > 0u && keep < count) {
                barrier();
                sort_list(count);
                count = keep;
            }
        }
        barrier();
    }

    // The selection, on one invocation (its sums have one order).
    if (t != 0u) {
        return;
    }
    if (!row_has(row, flag_list_dist)) {
        uint best = 0u;
        for (uint i = 1u; i < count; ++i) {
            best = ranks_before(i, best) ? i : best;
        }
        results[r + result_status] = status_of(list_value[best]);
        results[r + result_token] = list_id[best];
        return;
    }
    uint max_bits = largest(count, false);
    const uint status = status_of(max_bits);
    results[r + result_status] = status;
    if (status != status_ok) {
        return;
    }
    const float max = uintBitsToFloat(max_bits);
    const float factor = probabilities(count, false, max);
    if (row_has(row, flag_list_adaptive)) {
        // adaptive_p: each logit above -inf becomes 5 - 10 x x / (1 + x), x = |(p - a) / 0.3|,
        // into list_p (list_value keeps the logits, for the original p of the token drawn).
        const float a = uintBitsToFloat(row_word(row, row_target));
        for (uint i = 0u; i < count; ++i) {
            list_p[i] = list_value[i] == bits_minus_infinity ? bits_minus_infinity : adaptive_logit(list_p[i], a);
        }
        probabilities(count, true, uintBitsToFloat(largest(count, true)));
    }
    precise double total = 0.0LF;
    for (uint i = 0u; i < count; ++i) {
        total = total + double_of_bits(list_p[i]);
    }
    const double u = packDouble2x32(uvec2(row_word(row, row_u_low), row_word(row, row_u_high)));
    precise double threshold = u * total;
    precise double running = 0.0LF;
    uint chosen = 0u;
    uint last = 0u;
    bool found = false;
    for (uint i = 0u; i < count && !found; ++i) {
        if (list_p[i] != 0u) {
            last = i;
            running = running + double_of_bits(list_p[i]);
            if (running > threshold) {
                chosen = i;
                found = true;
            }
        }
    }
    const uint drawn = found ? chosen : last;
    results[r + result_token] = list_id[drawn];
    if (row_has(row, flag_list_adaptive)) {
        results[r + result_selected_p] = product_bits(exp_difference(list_value[drawn], max), factor);
    }
}
