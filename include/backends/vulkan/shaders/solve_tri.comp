#version 450
// Batched triangular solves, every variant of qk::solve_tri in float (see solve_tri.hpp beside
// the generated headers). Each variant is read as one canonical forward substitution L' X' = B'
// with L' lower triangular: "reversed" reverses the row and column order (upper left solves,
// lower right solves), "transposed" reads A transposed (right solves, X A = B as A^T X^T = B^T).
//
// One workgroup solves one batch for `columns` right-hand sides: invocation t owns column
// t % columns and is one of `row_lanes` lanes sharing that column. Substitution is column
// oriented: at step i every lane divides row i of the working tile by the pivot (redundantly, so
// no lane waits on another for x_i) and subtracts L'[j][i] x_i from a share of the rows j > i,
// then the workgroup meets at a barrier. Row i is final once step i - 1 is over and no one
// writes it during step i, so one barrier per step suffices, and none when each column has a
// single lane. Every element sees its updates in the same order whichever memory holds it.
//
// Where the data lives is chosen by the host from the shared-memory size: the working tile in
// shared memory, or in X itself when n rows of one column do not fit; A's triangle (packed by
// columns, each from its diagonal down) in shared memory when it fits next to the tile, else
// read from the storage buffer at every step.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint workgroup_size = 1;
layout(constant_id = 1) const uint n = 1;             // order of A
layout(constant_id = 2) const uint k = 1;             // right-hand sides per batch
layout(constant_id = 3) const uint columns = 1;       // right-hand sides per workgroup
layout(constant_id = 4) const bool reversed = false;
layout(constant_id = 5) const bool transposed = false;
layout(constant_id = 6) const bool unit_diagonal = false;
layout(constant_id = 7) const bool a_in_shared = false;
layout(constant_id = 8) const uint a_floats = 1;      // n (n + 1) / 2 when a_in_shared
layout(constant_id = 9) const bool tile_in_shared = false;
layout(constant_id = 10) const uint tile_floats = 1;  // n * columns when tile_in_shared

layout(std430, set = 0, binding = 0) readonly buffer MatrixA { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer RightHandSides { float b[]; };
// Coherent: without a shared tile, X is the working storage that lanes read from each other.
layout(std430, set = 0, binding = 2) coherent buffer Solution { float x[]; };

layout(push_constant) uniform Shape {
    uint groups; // batches times tiles per batch: the workgroups with work
} shape;

shared float triangle[a_floats];
shared float tile[tile_floats];

const uint row_lanes = workgroup_size / columns;
const uint tiles = (k + columns - 1u) / columns;

// Where canonical L'[r][c] lies in A's batch (row-major n x n from `base`).
uint a_index(uint base, uint r, uint c)
{
    const uint rr = reversed ? n - 1u - r : r;
    const uint cc = reversed ? n - 1u - c : c;
    return base + (transposed ? cc * n + rr : rr * n + cc);
}

// Where canonical B'[r][column] lies: left solves n rows of k, right solves k rows of n.
uint b_index(uint base, uint r, uint column)
{
    const uint rr = reversed ? n - 1u - r : r;
    return base + (transposed ? column * n + rr : rr * k + column);
}

// Column c of the packed triangle starts here (the columns before it hold n, n - 1, ... values).
uint column_start(uint c)
{
    return c * n - c * (c - 1u) / 2u;
}

void main()
{
    const uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    // The grid is a rectangle: its last workgroups may have nothing to do (uniform per group).
    if (group >= shape.groups) {
        return;
    }
    const uint batch = group / tiles;
    const uint first_column = (group % tiles) * columns;
    const uint t = gl_LocalInvocationID.x;
    const uint lane_column = t % columns;
    const uint lane = t / columns;
    const uint column = first_column + lane_column;
    // Lanes past k (the last tile) or past row_lanes (workgroup_size not a multiple of columns)
    // compute nothing but still meet every barrier.
    const bool solving = lane < row_lanes && column < k;
    const uint a_base = batch * n * n;
    const uint b_base = batch * n * k;

    if (a_in_shared) {
        for (uint c = 0u; c < n; ++c) {
            const uint start = column_start(c);
            for (uint r = c + t; r < n; r += workgroup_size) {
                if (r != c || !unit_diagonal) {
                    triangle[start + r - c] = a[a_index(a_base, r, c)];
                }
            }
        }
    }
    if (solving) {
        for (uint r = lane; r < n; r += row_lanes) {
            if (tile_in_shared) {
                tile[r * columns + lane_column] = b[b_index(b_base, r, column)];
            } else {
                x[b_index(b_base, r, column)] = b[b_index(b_base, r, column)];
            }
        }
    } else if (tile_in_shared && lane < row_lanes) {
        for (uint r = lane; r < n; r += row_lanes) {
            tile[r * columns + lane_column] = 0.0;
        }
    }
    memoryBarrierBuffer();
    barrier();

    for (uint i = 0u; i < n; ++i) {
        if (solving) {
            float xi = tile_in_shared ? tile[i * columns + lane_column] : x[b_index(b_base, i, column)];
            if (!unit_diagonal) {
                xi /= a_in_shared ? triangle[column_start(i)] : a[a_index(a_base, i, i)];
            }
            // Lanes take rows i + 1 + lane, i + 1 + lane + row_lanes, ...: an even share at
            // every step (ownership rotates, which the barrier between steps makes safe).
            const uint start = column_start(i);
            for (uint j = i + 1u + lane; j < n; j += row_lanes) {
                const float l = a_in_shared ? triangle[start + j - i] : a[a_index(a_base, j, i)];
                if (tile_in_shared) {
                    tile[j * columns + lane_column] -= l * xi;
                } else {
                    const uint at = b_index(b_base, j, column);
                    x[at] -= l * xi;
                }
            }
        }
        if (row_lanes > 1u) {
            memoryBarrierBuffer();
            barrier();
        }
    }

    if (solving) {
        for (uint r = lane; r < n; r += row_lanes) {
            const uint at = b_index(b_base, r, column);
            float v = tile_in_shared ? tile[r * columns + lane_column] : x[at];
            if (!unit_diagonal) {
                v /= a_in_shared ? triangle[column_start(r)] : a[a_index(a_base, r, r)];
            }
            x[at] = v;
        }
    }
}
