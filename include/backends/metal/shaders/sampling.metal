// Exact sampling on Metal: argmax, softmax, top-k, temperature, logit biases and what a chain does
// with a top-k list, giving bit for bit the floats qk::sampling computes on the CPU. Metal has no
// double, so the double-precision steps run on the host (backends/metal/sampling_host.hpp): the
// chunk sums of the weights the kernels write, their total, the softmax factor float(1.0 /
// total), and the categorical draws.
//
// Host requirements: compile with fast math off (MTLCompileOptions.mathMode = MTLMathModeSafe, or
// fastMathEnabled = NO before macOS 15); relaxed or fast mode may fuse, reassociate or fold the
// float operations below and break exactness. Every product sits in its own statement, never in
// the expression of the sum that uses it, so that no contraction can fuse the two; on MSL 3.2+
// the pragmas below also forbid it. fma() is used only where a single rounding is wanted.
//
// Exactness rests on: float +, -, * correctly rounded (MSL: "correctly rounded" with fast math
// off); fma() correctly rounded (MSL lists fma as correctly rounded). Division is NOT trusted:
// divide_exact() corrects a / b with fma residuals, so it is exact whatever the accuracy of the
// hardware quotient (within 4 ulp). Subnormal exp results and
// products are built from integer bits, so a GPU that flushes float denormals still matches the
// CPU there. Outside the guarantee: sums and differences of subnormal logits (a GPU that flushes
// denormals reads them as zero), and divisions whose quotient is subnormal or overflows (the
// hardware quotient is returned).
//
// Buffers (one layout for every kernel; a kernel declares only those it reads or writes). The
// records' words are those of backends/gpu/sampling_layout.hpp, which the Vulkan kernels share
// (generated/sampling_layout.h holds their values); Metal leaves the row's uniform and the
// result's total unread, as the host draws and adds the chunk sums.
//   0 shape    constant sampling_shape {n_seq, n_vocab, chunks = ceil(n_vocab / chunk_size), param}
//   1 values   device uint[n_seq * n_vocab]  the float bits worked on (the work copy, or in place)
//   2 rows     device uint[n_seq * row_words]  row records: flags, k, first list op, list op count
//   3 ops      device uint[]                 op records: kind, param, first bias, bias count;
//                                             stage ops at stage * n_seq + row, list ops after
//   4 biases   device uint[]                 (token id, bias bits) pairs, sorted by id per op
//   5 results  device uint[n_seq * result_words]  index, max bits, token, status, list size,
//                                             factor bits (written by the host before scale)
//   7 extra    device uint[n_seq * n_vocab]  transform(all_rows): the caller's logits (read);
//                                             chunks: the weights exp_difference(x, max) out;
//                                             scale: those weights in, probabilities out (in place)
//   8 lists    device uint[n_seq * capacity * list_words]  token_data entries (id, logit bits,
//                                             p bits)
//
// Function constants:
//   sampling_list_capacity  uint  index 0  entries per row in `lists` (a power of two, at most
//                                          max_list_capacity);
//                                          only kernel_sampling_top_k uses it
//
// Kernels (T = threads per threadgroup: a power of two, 32 <= T <= 1024; one row per y group):
//   kernel_sampling_transform  buffers 0,1,2,3,4,5,7  tg memory 0
//       grid (ceil(n_vocab / T), n_seq). param == all_rows: values = extra for active rows;
//       else stage `param`'s op: divide (exact), bias, keep_max (keeps results.index).
//   kernel_sampling_argmax     buffers 0,1,2,3,5      tg memory 8 * T bytes
//       grid (1, n_seq). param == all_rows: rows with flag max or sums get index, max, status;
//       else rows whose stage `param` op is keep_max get index (run just before that transform).
//   kernel_sampling_chunks     buffers 0,1,2,5,7      tg memory 0
//       grid (ceil(chunks * chunk_lanes / T), n_seq), chunk_lanes threads per chunk. Rows with flag
//       sums and status ok: every weight exp_difference(x, max) into extra, for the host, which
//       adds the chunk sums in double lanes (vocabulary_scan.hpp's weight_sums).
//   kernel_sampling_scale      buffers 0,2,5,7        tg memory 0
//       grid (ceil(n_vocab / T), n_seq). Rows with flag softmax and status ok: extra *= factor.
//   kernel_sampling_top_k      buffers 0,1,2,3,4,5,8  tg memory 4 * (256 + 3 * capacity + 2 * T + 4)
//       grid (1, n_seq). Rows with flag top_k: the sorted top-k list (1 <= k <= min(n_vocab,
//       capacity)); with flag list the chain's list ops, then greedy (results.token) or, with
//       list_dist, the list's status (p left 0). lists and results.list_size hold the final
//       list.
// The host finishes: the chunk sums of the stored weights in double lanes and their total in
// double; softmax factor float(1.0 / total) (written to results.factor_bits, then scale); the
// whole-row draw from the chunk sums and the stored weights of the chunk it reaches; the list
// draw (compute_probabilities' softmax of the final list, then draw_index over its p);
// adaptive_p's draws (flag list_adaptive: from the final list; flag host_draw: from the row's
// values after the stage ops), through the CPU's own code.

#include <metal_stdlib>
using namespace metal;

#if defined(__METAL_VERSION__) && __METAL_VERSION__ >= 320
#pragma METAL fp math_mode(safe)
#pragma METAL fp contract(off)
#endif

// The records' words, flags, kinds and statuses, and the limits: gpu/sampling_layout.hpp's values.
#include "generated/sampling_layout.h"

struct sampling_shape {
    uint n_seq;
    uint n_vocab;
    uint chunks;
    uint param;
};

constant uint sampling_list_capacity [[function_constant(0)]];

constant uint bits_minus_infinity = 0xff800000u;
constant uint bits_smallest_normal = 0x00800000u;
// order_key of -inf and of +inf.
constant uint key_minus_infinity = 0x007fffffu;
constant uint key_plus_infinity = 0xff800000u;

inline bool is_nan_bits(uint b)
{
    return (b & 0x7fffffffu) > 0x7f800000u;
}

inline bool is_finite_bits(uint b)
{
    return (b & 0x7f800000u) != 0x7f800000u;
}

// Unsigned keys in the order the CPU's float comparisons see: NaN ranks as -inf, -0 as +0.
// Comparing keys rather than floats keeps NaN handling out of the compiler's hands.
inline uint order_key(uint b)
{
    if (is_nan_bits(b)) {
        b = bits_minus_infinity;
    }
    if (b == 0x80000000u) {
        b = 0u;
    }
    return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
}

// A list never holds NaN (the CPU's without_nan).
inline uint without_nan(uint b)
{
    return is_nan_bits(b) ? bits_minus_infinity : b;
}

inline uint status_of(uint key)
{
    return key <= key_minus_infinity ? status_no_candidate : (key == key_plus_infinity ? status_infinite : status_ok);
}

// 2^e for e in [-126, 127].
inline float power_of_two(int e)
{
    return as_type<float>(uint(e + 127) << 23);
}

// A finite non-negative float times 2^e (e in [0, 127]), exact also for a subnormal: it is
// rebuilt from its bits, as a GPU that flushes denormals would read it as zero.
inline float scaled_up(uint b, int e)
{
    if (b < bits_smallest_normal) {
        const float m = float(b);
        const float scaled = m * power_of_two(e - 149);
        return scaled;
    }
    const float scaled = as_type<float>(b) * power_of_two(e);
    return scaled;
}

// a * b for a, b in [0, 1] (probabilities, exps and factors), as IEEE rounds it, a subnormal
// product included (so a subnormal operand's product is below FLT_MIN too): where the hardware
// result is below the normal range, the product is formed at 2^200 scale, its rounding error
// taken exactly with fma, and rounded once onto the subnormal grid.
inline float multiply_exact(float a, float b)
{
    const float product = a * b;
    if (as_type<uint>(product) >= bits_smallest_normal) {
        return product;
    }
    const uint ab = as_type<uint>(a);
    const uint bb = as_type<uint>(b);
    if (ab == 0u || bb == 0u) {
        return 0.0f;
    }
    // At 2^200 scale both are normal multiples of 2^-49 and their product (below 2^74) is finite,
    // so the product's rounding error is a float and fma gives it exactly.
    const float hi_a = scaled_up(ab, 100);
    const float hi_b = scaled_up(bb, 100);
    const float big = hi_a * hi_b;
    const float error = fma(hi_a, hi_b, -big);
    // The product in units of 2^-149: big * 2^-200 * 2^149, exact while it matters (units >= 2^-126).
    const float units = big * power_of_two(-51);
    const float shifted = units + 8388608.0f;
    float rounded = shifted - 8388608.0f; // to an integer, ties to even (units < 2^23)
    const float off = units - rounded;    // exact
    if ((off == 0.5f || off == -0.5f) && error != 0.0f) {
        // A tie for the rounded product, but the exact one lies to the side of the error.
        const float half_unit = error > 0.0f ? 0.5f : -0.5f;
        rounded = units + half_unit;
    }
    return as_type<float>(uint(rounded));
}

// The float next to q (finite, nonzero) in the direction of larger values, or of smaller ones.
inline float next_float(float q, bool up)
{
    const uint b = as_type<uint>(q);
    const bool negative = (b & 0x80000000u) != 0u;
    return as_type<float>(up != negative ? b + 1u : b - 1u);
}

// a / b correctly rounded from an approximation q of it (finite, normal, within 4 ulp), for b > 0
// finite and normal: q is walked toward the true quotient until two adjacent floats bracket it;
// both are then within an ulp of a / b, so their residuals a - q b are floats and fma computes
// them exactly, and the smaller one wins (a tie goes to the even one, as round-to-nearest-even
// does). Needs only fma correctly rounded.
inline float correct_quotient(float a, float b, float q)
{
    float r = fma(-q, b, a);
    for (int step = 0; step < 4 && r != 0.0f; ++step) {
        const float n = next_float(q, r > 0.0f);
        const float rn = fma(-n, b, a);
        if (rn == 0.0f) {
            return n;
        }
        if ((rn > 0.0f) != (r > 0.0f)) {
            const float dq = fabs(r);
            const float dn = fabs(rn);
            if (dq != dn) {
                return dq < dn ? q : n;
            }
            return (as_type<uint>(q) & 1u) == 0u ? q : n;
        }
        q = n;
        r = rn;
    }
    return q;
}

// a / b correctly rounded for b > 0 finite and normal, whatever the accuracy of the hardware's
// division. ±0, ±inf and NaN come back as any IEEE division by a positive number gives them.
inline float divide_exact(float a, float b)
{
    const float hardware = a / b;
    const uint ab = as_type<uint>(a);
    const uint magnitude = ab & 0x7fffffffu;
    if (!is_finite_bits(ab) || magnitude == 0u) {
        return hardware;
    }
    if (magnitude < 0x21800000u) {
        // |a| < 2^-60: the residuals could underflow, so divide 2^64 |a| (exact, subnormals
        // included) and scale back, which is exact while the quotient is normal.
        const float up = scaled_up(magnitude, 64);
        const float approximate = up / b;
        if (!is_finite_bits(as_type<uint>(approximate)) || approximate < power_of_two(-62)) {
            return hardware; // overflow, or a subnormal quotient: outside the exact range
        }
        const float q = correct_quotient(up, b, approximate);
        const float back = q * power_of_two(-64);
        return (ab & 0x80000000u) != 0u ? -back : back;
    }
    const uint qb = as_type<uint>(hardware);
    if (!is_finite_bits(qb) || (qb & 0x7fffffffu) < bits_smallest_normal) {
        return hardware; // overflow or underflow: outside the exact range (see the header)
    }
    return correct_quotient(a, b, hardware);
}

// qkern's exp (sampling/deterministic_math.hpp) operation for operation: the same constants, the
// same order, every product rounded before the addition that uses it.
inline float qk_exp(float x)
{
    if (!(x >= -87.33654475f)) {
        return 0.0f;
    }
    const float clamped = x < 88.0f ? x : 88.0f;
    const float t = clamped * 1.44269504f;
    const float shifted = t + 12582912.0f;
    const float k = shifted - 12582912.0f;
    const float k_hi = k * 0.693359375f;
    const float k_lo = k * -2.12194440e-4f;
    const float r_hi = clamped - k_hi;
    const float r = r_hi - k_lo;
    float m = 1.9875691500e-4f * r;
    float p = m + 1.3981999507e-3f;
    m = p * r;
    p = m + 8.3334519073e-3f;
    m = p * r;
    p = m + 4.1665795894e-2f;
    m = p * r;
    p = m + 1.6666665459e-1f;
    m = p * r;
    p = m + 5.0000001201e-1f;
    const float r2 = r * r;
    m = p * r2;
    const float pr = m + r;
    p = pr + 1.0f;
    const int exponent = int(k) + 127; // in [1, 254] on this range
    if (exponent == 1 && p < 1.0f) {
        // p * 2^-126 is subnormal: p * 2^23 (exact) rounded to an integer is its bit pattern.
        const float units = p * 8388608.0f;
        const float shifted = units + 8388608.0f;
        const float rounded = shifted - 8388608.0f; // to an integer, ties to even (units < 2^23)
        return as_type<float>(uint(rounded));
    }
    const float result = p * as_type<float>(uint(exponent) << 23);
    return result;
}

// exp(x - max) for a value's bits and a finite maximum; NaN and -inf give 0, as on the CPU.
inline float exp_minus_max(uint xb, float max)
{
    if (!is_finite_bits(xb)) {
        return 0.0f;
    }
    const float d = as_type<float>(xb) - max;
    if (!is_finite_bits(as_type<uint>(d))) {
        return 0.0f;
    }
    return qk_exp(d);
}

// deterministic_math.hpp's exp_difference for a value's bits and a finite maximum: exp(x - max)
// times float(1 + the subtraction's exact error, by TwoSum), the product rounded as IEEE rounds
// it (subnormal results included); NaN and -inf give 0. A flushed subnormal in the TwoSum can
// only change an error below 2^-25, which 1 + err rounds away on the CPU as well.
inline float exp_difference(uint xb, float max)
{
    const float e = exp_minus_max(xb, max);
    if (as_type<uint>(e) == 0u) { // from its bits: a flushing GPU compares a subnormal e as 0
        return 0.0f;
    }
    const float x = as_type<float>(xb);
    const float d = x - max;
    const float moved = d - x;
    const float err = (x - (d - moved)) + (-max - moved);
    const float f = 1.0f + err;
    return multiply_exact(e, f);
}

inline bool row_has(const device uint* rows, uint row, uint flag)
{
    return (rows[row * row_words + row_flags] & flag) != 0u;
}

// --- kernels ---

kernel void kernel_sampling_transform(constant sampling_shape& shape [[buffer(0)]],
                                      device uint* values [[buffer(1)]],
                                      const device uint* rows [[buffer(2)]],
                                      const device uint* ops [[buffer(3)]],
                                      const device uint* biases [[buffer(4)]],
                                      const device uint* results [[buffer(5)]],
                                      const device uint* extra [[buffer(7)]],
                                      uint3 group [[threadgroup_position_in_grid]],
                                      uint t [[thread_position_in_threadgroup]],
                                      uint threads [[threads_per_threadgroup]])
{
    const uint row = group.y;
    const uint i = group.x * threads + t;
    if (row >= shape.n_seq || !row_has(rows, row, flag_active)) {
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
        values[at] = as_type<uint>(divide_exact(as_type<float>(values[at]), as_type<float>(ops[op + op_param])));
    } else if (kind == kind_bias && i < ops[op + op_count]) {
        // Each token is listed once per op, so no two threads touch the same value.
        const uint b = (ops[op + op_first] + i) * 2u;
        const uint token_at = row * shape.n_vocab + biases[b];
        const float biased = as_type<float>(values[token_at]) + as_type<float>(biases[b + 1u]);
        values[token_at] = as_type<uint>(biased);
    } else if (kind == kind_keep_max && i < shape.n_vocab) {
        if (i != results[row * result_words + result_index]) {
            values[at] = bits_minus_infinity;
        }
    }
}

kernel void kernel_sampling_argmax(constant sampling_shape& shape [[buffer(0)]],
                                   const device uint* values [[buffer(1)]],
                                   const device uint* rows [[buffer(2)]],
                                   const device uint* ops [[buffer(3)]],
                                   device uint* results [[buffer(5)]],
                                   threadgroup uint* scratch [[threadgroup(0)]],
                                   uint3 group [[threadgroup_position_in_grid]],
                                   uint t [[thread_position_in_threadgroup]],
                                   uint threads [[threads_per_threadgroup]],
                                   uint lane [[thread_index_in_simdgroup]],
                                   uint simd_group [[simdgroup_index_in_threadgroup]],
                                   uint simd_groups [[simdgroups_per_threadgroup]])
{
    const uint row = group.y;
    if (row >= shape.n_seq || !row_has(rows, row, flag_active)) {
        return;
    }
    if (shape.param == all_rows ? !row_has(rows, row, flag_max | flag_sums)
                                : ops[(shape.param * shape.n_seq + row) * op_words + op_kind] != kind_keep_max) {
        return;
    }
    const device uint* x = values + row * shape.n_vocab;
    uint key = 0u; // below every value's key
    uint index = 0xffffffffu;
    for (uint i = t; i < shape.n_vocab; i += threads) {
        const uint k = order_key(x[i]);
        if (k > key) { // strict: a thread's first index of a tie stays
            key = k;
            index = i;
        }
    }
    const uint group_key = simd_max(key);
    const uint group_index = simd_min(key == group_key ? index : 0xffffffffu);
    threadgroup uint* keys = scratch;
    threadgroup uint* indices = scratch + threads;
    if (lane == 0u) {
        keys[simd_group] = group_key;
        indices[simd_group] = group_index;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t != 0u) {
        return;
    }
    uint best_key = keys[0];
    uint best = indices[0];
    for (uint g = 1u; g < simd_groups; ++g) {
        if (keys[g] > best_key || (keys[g] == best_key && indices[g] < best)) {
            best_key = keys[g];
            best = indices[g];
        }
    }
    device uint* r = results + row * result_words;
    r[result_index] = best;
    if (shape.param == all_rows) {
        r[result_max_bits] = x[best];
        r[result_token] = best;
        r[result_status] = status_of(best_key);
    }
}

kernel void kernel_sampling_chunks(constant sampling_shape& shape [[buffer(0)]],
                                   const device uint* values [[buffer(1)]],
                                   const device uint* rows [[buffer(2)]],
                                   const device uint* results [[buffer(5)]],
                                   device uint* extra [[buffer(7)]],
                                   uint3 group [[threadgroup_position_in_grid]],
                                   uint t [[thread_position_in_threadgroup]],
                                   uint threads [[threads_per_threadgroup]])
{
    const uint row = group.y;
    if (row >= shape.n_seq || !row_has(rows, row, flag_active) || !row_has(rows, row, flag_sums)
        || results[row * result_words + result_status] != status_ok) {
        return;
    }
    const uint chunk = (group.x * threads + t) / chunk_lanes;
    const uint lane = t % chunk_lanes;
    const float max = as_type<float>(results[row * result_words + result_max_bits]);
    // The chunk sums are the host's: their lanes add in double.
    if (chunk < shape.chunks) {
        const uint begin = row * shape.n_vocab + chunk * chunk_size;
        const uint count = min(chunk_size, shape.n_vocab - chunk * chunk_size);
        for (uint j = lane; j < count; j += chunk_lanes) {
            extra[begin + j] = as_type<uint>(exp_difference(values[begin + j], max));
        }
    }
}

kernel void kernel_sampling_scale(constant sampling_shape& shape [[buffer(0)]],
                                  const device uint* rows [[buffer(2)]],
                                  const device uint* results [[buffer(5)]],
                                  device uint* extra [[buffer(7)]],
                                  uint3 group [[threadgroup_position_in_grid]],
                                  uint t [[thread_position_in_threadgroup]],
                                  uint threads [[threads_per_threadgroup]])
{
    const uint row = group.y;
    const uint i = group.x * threads + t;
    if (row >= shape.n_seq || i >= shape.n_vocab || !row_has(rows, row, flag_active) || !row_has(rows, row, flag_softmax)) {
        return;
    }
    const device uint* r = results + row * result_words;
    if (r[result_status] != status_ok) {
        return;
    }
    const uint at = row * shape.n_vocab + i;
    extra[at] = as_type<uint>(multiply_exact(as_type<float>(extra[at]), as_type<float>(r[result_factor_bits])));
}

// --- top-k and the list ---

struct list_memory {
    threadgroup atomic_uint* histogram; // 256
    threadgroup uint* value;            // capacity: float bits, never NaN
    threadgroup uint* id;               // capacity
    threadgroup uint* p;                // capacity: float bits
    threadgroup uint* above_before;     // T: per thread, values above the k-th before its segment
    threadgroup uint* ties_before;      // T: the same for ties at the k-th
    threadgroup uint* shared;           // 4 words
};

inline bool ranks_before(list_memory m, uint a, uint b)
{
    const uint ka = order_key(m.value[a]);
    const uint kb = order_key(m.value[b]);
    return ka > kb || (ka == kb && m.id[a] < m.id[b]);
}

// Sorts entries [0, count) best first (bitonic, padded to a power of two <= capacity); count is
// uniform over the threadgroup.
inline void sort_list(list_memory m, uint count, uint t, uint threads)
{
    uint padded = 1u;
    while (padded < count) {
        padded <<= 1;
    }
    // Padding ranks after everything: -inf with an id above every token's.
    for (uint i = count + t; i < padded; i += threads) {
        m.value[i] = bits_minus_infinity;
        m.id[i] = 0xffffffffu;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint size = 2u; size <= padded; size <<= 1) {
        for (uint stride = size >> 1; stride > 0u; stride >>= 1) {
            for (uint q = t; q < padded / 2u; q += threads) {
                const uint lo = (q / stride) * stride * 2u + q % stride;
                const uint hi = lo + stride;
                const bool best_first = (lo & size) == 0u;
                if (best_first ? ranks_before(m, hi, lo) : ranks_before(m, lo, hi)) {
                    const uint v = m.value[lo];
                    const uint d = m.id[lo];
                    m.value[lo] = m.value[hi];
                    m.id[lo] = m.id[hi];
                    m.value[hi] = v;
                    m.id[hi] = d;
                }
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
    }
}

kernel void kernel_sampling_top_k(constant sampling_shape& shape [[buffer(0)]],
                                  const device uint* values [[buffer(1)]],
                                  const device uint* rows [[buffer(2)]],
                                  const device uint* ops [[buffer(3)]],
                                  const device uint* biases [[buffer(4)]],
                                  device uint* results [[buffer(5)]],
                                  device uint* lists [[buffer(8)]],
                                  threadgroup uint* scratch [[threadgroup(0)]],
                                  uint3 group [[threadgroup_position_in_grid]],
                                  uint t [[thread_position_in_threadgroup]],
                                  uint threads [[threads_per_threadgroup]])
{
    const uint row = group.y;
    if (row >= shape.n_seq || !row_has(rows, row, flag_active) || !row_has(rows, row, flag_top_k)) {
        return;
    }
    const uint capacity = sampling_list_capacity;
    list_memory m;
    m.histogram = reinterpret_cast<threadgroup atomic_uint*>(scratch);
    m.value = scratch + 256u;
    m.id = m.value + capacity;
    m.p = m.id + capacity;
    m.above_before = m.p + capacity;
    m.ties_before = m.above_before + threads;
    m.shared = m.ties_before + threads;

    const uint n = shape.n_vocab;
    const device uint* x = values + row * n;
    const uint k = rows[row * row_words + row_k]; // 1 <= k <= min(n, capacity), checked by the host

    // 1. The k-th largest key, a byte at a time from the top (radix select).
    uint prefix = 0u;
    uint mask = 0u;
    uint remaining = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (uint b = t; b < 256u; b += threads) {
            atomic_store_explicit(&m.histogram[b], 0u, memory_order_relaxed);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint i = t; i < n; i += threads) {
            const uint key = order_key(x[i]);
            if ((key & mask) == prefix) {
                atomic_fetch_add_explicit(&m.histogram[(key >> uint(shift)) & 255u], 1u, memory_order_relaxed);
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (t == 0u) {
            uint above = 0u;
            int b = 255;
            for (; b > 0; --b) {
                const uint c = atomic_load_explicit(&m.histogram[b], memory_order_relaxed);
                if (above + c >= remaining) {
                    break;
                }
                above += c;
            }
            m.shared[0] = prefix | (uint(b) << uint(shift));
            m.shared[1] = remaining - above;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        prefix = m.shared[0];
        remaining = m.shared[1];
        mask |= 255u << uint(shift);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    const uint kth_key = prefix;
    const uint ties = remaining; // taken at kth_key, lowest ids first
    const uint above = k - ties;

    // 2. Compaction: each thread owns a contiguous segment, so prefix counts over the threads
    //    place every value above the k-th, and order the ties by id.
    const uint segment = (n + threads - 1u) / threads;
    const uint begin = min(n, t * segment);
    const uint end = min(n, begin + segment);
    uint own_above = 0u;
    uint own_ties = 0u;
    for (uint i = begin; i < end; ++i) {
        const uint key = order_key(x[i]);
        own_above += key > kth_key ? 1u : 0u;
        own_ties += key == kth_key ? 1u : 0u;
    }
    m.above_before[t] = own_above;
    m.ties_before[t] = own_ties;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t == 0u) {
        uint sum_above = 0u;
        uint sum_ties = 0u;
        for (uint j = 0u; j < threads; ++j) {
            const uint a = m.above_before[j];
            const uint c = m.ties_before[j];
            m.above_before[j] = sum_above;
            m.ties_before[j] = sum_ties;
            sum_above += a;
            sum_ties += c;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    uint slot = m.above_before[t];
    uint rank = m.ties_before[t];
    for (uint i = begin; i < end; ++i) {
        const uint bits = x[i];
        const uint key = order_key(bits);
        if (key > kth_key) {
            m.value[slot] = without_nan(bits);
            m.id[slot] = i;
            ++slot;
        } else if (key == kth_key) {
            if (rank < ties) {
                m.value[above + rank] = without_nan(bits);
                m.id[above + rank] = i;
            }
            ++rank;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    // 3. Sorted, as the CPU's list.
    uint count = k;
    sort_list(m, count, t, threads);
    device uint* r = results + row * result_words;
    device uint* out = lists + row * capacity * list_words;
    const bool chain = row_has(rows, row, flag_list);

    // 4. The chain's list ops, in order.
    if (chain) {
        const uint first_op = rows[row * row_words + row_list_ops];
        const uint op_total = rows[row * row_words + row_list_count];
        for (uint o = 0u; o < op_total; ++o) {
            const uint op = (first_op + o) * op_words;
            const uint kind = ops[op + op_kind];
            if (kind == kind_divide) {
                const float divisor = as_type<float>(ops[op + op_param]);
                for (uint i = t; i < count; i += threads) {
                    const uint v = m.value[i];
                    m.value[i] = without_nan(as_type<uint>(divide_exact(as_type<float>(v), divisor)));
                }
            } else if (kind == kind_bias) {
                const uint first = ops[op + op_first];
                const uint listed = ops[op + op_count];
                for (uint i = t; i < count; i += threads) {
                    uint lo = 0u;
                    uint hi = listed;
                    const uint id = m.id[i];
                    while (lo < hi) {
                        const uint mid = (lo + hi) / 2u;
                        if (biases[(first + mid) * 2u] < id) {
                            lo = mid + 1u;
                        } else {
                            hi = mid;
                        }
                    }
                    if (lo < listed && biases[(first + lo) * 2u] == id) {
                        const uint v = m.value[i];
                        const float biased = as_type<float>(v) + as_type<float>(biases[(first + lo) * 2u + 1u]);
                        m.value[i] = without_nan(as_type<uint>(biased));
                    }
                }
            } else if (kind == kind_keep_max) {
                if (t == 0u) {
                    uint keep = 0u;
                    for (uint i = 1u; i < count; ++i) {
                        keep = order_key(m.value[i]) > order_key(m.value[keep]) ? i : keep;
                    }
                    m.shared[2] = keep;
                }
                threadgroup_barrier(mem_flags::mem_threadgroup);
                const uint keep = m.shared[2];
                for (uint i = t; i < count; i += threads) {
                    if (i != keep) {
                        m.value[i] = bits_minus_infinity;
                    }
                }
            } else if (kind == kind_keep_top_k) {
                const uint keep = ops[op + op_param];
                if (keep > 0u && keep < count) {
                    threadgroup_barrier(mem_flags::mem_threadgroup);
                    sort_list(m, count, t, threads);
                    count = keep;
                }
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
    }

    // 5. The selection, on one thread (its sums have one order).
    if (t == 0u) {
        m.shared[1] = status_no_candidate;
        r[result_list_size] = count;
        r[result_status] = status_ok;
        if (chain && !row_has(rows, row, flag_list_dist)) {
            uint best = 0u;
            for (uint i = 1u; i < count; ++i) {
                best = ranks_before(m, i, best) ? i : best;
            }
            r[result_status] = status_of(order_key(m.value[best]));
            r[result_token] = m.id[best];
        } else if (chain) {
            uint max_key = key_minus_infinity;
            for (uint i = 0u; i < count; ++i) {
                max_key = max(max_key, order_key(m.value[i]));
            }
            // The probabilities and the draw are the host's (their sums are in double).
            r[result_status] = status_of(max_key);
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint i = t; i < count; i += threads) {
        out[i * list_words + 0u] = m.id[i];
        out[i * list_words + 1u] = m.value[i];
        out[i * list_words + 2u] = 0u;
    }
}
