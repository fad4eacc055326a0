// Batched triangular solves in float on Metal: all eight variants of qk::tri_options (left/right,
// lower/upper, unit) on qk::solve_tri's contiguous ggml layout, one SIMD-group per right-hand
// side, rows of A staged through threadgroup memory, dot products reduced with simd_sum.
//
// Host interface (kernel_solve_tri_f32)
//   buffer(0)  device const float* a     A: [batch][n][n] row-major
//   buffer(1)  device const float* b     B: [batch][n][k] (left) or [batch][k][n] (right)
//   buffer(2)  device float*       x     X, same layout as B; may be the same buffer as b
//   buffer(3)  constant solve_tri_args&  { uint batch; } (setBytes, 4 bytes)
//   threadgroup(0)  rows * n * 4 bytes, rounded up to a multiple of 16
//   function constants (all must be set):
//     0  fc_nsg    uint  SIMD-groups per threadgroup (>= 1)
//     1  fc_n      uint  order of A (>= 1)
//     2  fc_k      uint  right-hand sides per batch (>= 1)
//     3  fc_left   bool  A X = B (true) or X A = B (false)
//     4  fc_lower  bool  A lower (true) or upper (false) triangular
//     5  fc_unit   bool  unit diagonal: the stored diagonal is never read
//     6  fc_rows   uint  rows of A per stage, 1..n; rows * n * 4 bytes must fit threadgroup memory
//   dispatch: threadgroups (ceil(k / nsg), batch, 1); threads per threadgroup (32 * nsg, 1, 1).
//   The pipeline's threadExecutionWidth must be 32 (every Apple GPU); nsg * 32 <= the
//   pipeline's maxTotalThreadsPerThreadgroup. Offsets of a batch are computed in 64 bits,
//   offsets within one in 32: n * n and n * k below 2^32.
//
// Every variant is solved as one forward substitution L' X' = B' with L' lower triangular:
// "reversed" reverses rows and columns (left upper, right lower), "transposed" reads A
// transposed (right solves: X A = B is A^T X^T = B^T). Row i of X' is
//   x_i = (b_i - sum_{j < i} L'[i][j] x_j) / L'[i][i],
// the sum split over the SIMD-group's lanes and combined by simd_sum. Lane j % 32 alone reads
// b_j and writes x_j, and is the only lane that later reads x_j back, so an in-place solve
// (x == b) reads every b_j before the same thread overwrites it, and no lane waits on another's
// write to device memory. The threadgroup's SIMD-groups share one batch and so one A: they stage
// `fc_rows` rows of L' at a time (only the part left of the diagonal, and the diagonal unless
// unit) and each reads them from threadgroup memory.
#include <metal_stdlib>
using namespace metal;

constant uint fc_nsg [[function_constant(0)]];
constant uint fc_n [[function_constant(1)]];
constant uint fc_k [[function_constant(2)]];
constant bool fc_left [[function_constant(3)]];
constant bool fc_lower [[function_constant(4)]];
constant bool fc_unit [[function_constant(5)]];
constant uint fc_rows [[function_constant(6)]];

struct solve_tri_args {
    uint batch;
};

// Where canonical L'[r][c] lies in one batch of A.
inline uint solve_tri_a_offset(uint r, uint c)
{
    const bool reversed = fc_left != fc_lower;
    const uint rr = reversed ? fc_n - 1 - r : r;
    const uint cc = reversed ? fc_n - 1 - c : c;
    return fc_left ? rr * fc_n + cc : cc * fc_n + rr;
}

// Where canonical B'[r][column] (and X') lies in one batch of B.
inline uint solve_tri_b_offset(uint r, uint column)
{
    const bool reversed = fc_left != fc_lower;
    const uint rr = reversed ? fc_n - 1 - r : r;
    return fc_left ? rr * fc_k + column : column * fc_n + rr;
}

kernel void kernel_solve_tri_f32(device const float* a [[buffer(0)]],
                                 device const float* b [[buffer(1)]],
                                 device float* x [[buffer(2)]],
                                 constant solve_tri_args& args [[buffer(3)]],
                                 threadgroup float* stage [[threadgroup(0)]],
                                 uint3 tgpig [[threadgroup_position_in_grid]],
                                 uint tiitg [[thread_index_in_threadgroup]],
                                 uint sgitg [[simdgroup_index_in_threadgroup]],
                                 uint tiisg [[thread_index_in_simdgroup]],
                                 uint ntpsg [[threads_per_simdgroup]])
{
    const uint batch = tgpig.y;
    // The whole threadgroup leaves together, so no barrier below misses a thread.
    if (batch >= args.batch) {
        return;
    }
    const uint column = tgpig.x * fc_nsg + sgitg;
    // A SIMD-group past the last column stages rows and meets the barriers, and solves nothing.
    const bool solving = column < fc_k;
    const uint threads = fc_nsg * ntpsg;
    device const float* ab = a + ulong(batch) * fc_n * fc_n;
    device const float* bb = b + ulong(batch) * fc_n * fc_k;
    device float* xb = x + ulong(batch) * fc_n * fc_k;

    for (uint first = 0; first < fc_n; first += fc_rows) {
        const uint rows = min(fc_rows, fc_n - first);
        // Every SIMD-group is done with the previous stage before it is overwritten.
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint r = 0; r < rows; ++r) {
            const uint i = first + r;
            const uint end = fc_unit ? i : i + 1;
            for (uint c = tiitg; c < end; c += threads) {
                stage[r * fc_n + c] = ab[solve_tri_a_offset(i, c)];
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (solving) {
            for (uint r = 0; r < rows; ++r) {
                const uint i = first + r;
                threadgroup const float* row = stage + r * fc_n;
                float partial = 0.0f;
                for (uint j = tiisg; j < i; j += ntpsg) {
                    partial += row[j] * xb[solve_tri_b_offset(j, column)];
                }
                const float s = simd_sum(partial);
                if (tiisg == i % ntpsg) {
                    const uint at = solve_tri_b_offset(i, column);
                    const float v = bb[at] - s;
                    xb[at] = fc_unit ? v : v / row[i];
                }
            }
        }
    }
}
