// The register-tiled kernel behind qk::solve_tri: one block of rows of a packed right-hand side,
// updated by every row solved before it and then solved against its own diagonal block, without
// leaving registers. Written once on xsimd batches for any architecture tag; on generic the
// "vector" is a single scalar, which makes the same code the scalar reference.
#pragma once

#include <cstddef>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "../arch.hpp"

namespace qk::kernels::solve_tri_detail {

// T in vectors of the tag's width, or T itself on generic.
template <class T, class A>
struct lanes {
    using vector = xsimd::batch<T, A>;
    static constexpr std::size_t width = vector::size;
    static vector load(const T* p) noexcept { return vector::load_unaligned(p); }
    static void store(T* p, const vector& v) noexcept { v.store_unaligned(p); }
    static vector splat(T x) noexcept { return vector(x); }
    // a * b + c, fused where the tag has FMA.
    static vector fma(const vector& a, const vector& b, const vector& c) noexcept { return xsimd::fma(a, b, c); }
    // a / b, correctly rounded: xsimd 8's float division on NEON is a reciprocal estimate refined
    // by Newton steps (a few ulps off, and infinite for subnormal b), so AArch64 divides itself.
    static vector divide(const vector& a, const vector& b) noexcept
    {
#if defined(__aarch64__)
        if constexpr (std::is_same_v<T, float> && std::is_base_of_v<xsimd::neon64, A>) {
            return vector(vdivq_f32(a, b));
        }
#endif
        return a / b;
    }
};

template <class T>
struct lanes<T, arch::generic> {
    using vector = T;
    static constexpr std::size_t width = 1;
    static T load(const T* p) noexcept { return *p; }
    static void store(T* p, T v) noexcept { *p = v; }
    static T splat(T x) noexcept { return x; }
    static T fma(T a, T b, T c) noexcept { return a * b + c; }
    static T divide(T a, T b) noexcept { return a / b; }
};

// The tile: `rows` rows of `vectors` vectors each, as many accumulators as the register file
// holds with room for one row of the right-hand side and a broadcast coefficient (x86 before
// AVX-512: 16 registers, 6 x 2 + 3; AVX-512 and AArch64: 32 registers).
template <class T, class A>
struct tile_shape {
    static constexpr bool scalar = std::is_same_v<A, arch::generic>;
    static constexpr bool wide_register_file = std::is_base_of_v<xsimd::avx512f, A> || std::is_base_of_v<xsimd::neon64, A>;
    static constexpr std::size_t rows = scalar ? 4 : wide_register_file ? 8 : 6;
    static constexpr std::size_t vectors = scalar ? 4 : 2;
    static constexpr std::size_t columns = vectors * lanes<T, A>::width;
};

// One column tile of the canonical problem L' X' = B': `columns` right-hand sides, row i of B'
// at b + i * ldb and of X' at x + i * ldx (strides in elements, negative for reversed rows; b and
// x may be the same rows, since each block of rows is read completely before it is written).
template <class T>
struct tile_rows {
    const T* b;
    std::ptrdiff_t ldb;
    T* x;
    std::ptrdiff_t ldx;
};

// The packed L': per block of `rows` rows starting at row `first`, a panel of (first + rows) x
// rows coefficients, negated: panel[p * rows + r] = -L'[first + r][p] for p < first + r (entries
// at p >= first + r are never read), so that the updates are plain multiply-adds (xsimd's fnma
// costs a sign flip per call); and the diagonal, as reciprocals unless Divide (then as stored).
template <class T>
struct packed_lower {
    const T* panels;
    const T* diag;
    std::size_t n;
};

// Solves rows [first, first + R) of a tile, R <= rows, given that the rows before are solved.
template <class T, class A, std::size_t R, bool Divide>
[[gnu::always_inline]] inline void solve_block_row(const T* panel, const T* diag, const tile_rows<T>& tile, std::size_t first) noexcept
{
    using L = lanes<T, A>;
    using shape = tile_shape<T, A>;
    using vector = typename L::vector;
    constexpr std::size_t MR = shape::rows;
    constexpr std::size_t NV = shape::vectors;
    constexpr std::size_t W = L::width;
    static_assert(R >= 1 && R <= MR);

    const auto row = [](auto* base, std::ptrdiff_t stride, std::size_t i) { return base + static_cast<std::ptrdiff_t>(i) * stride; };
    vector acc[R][NV];
#pragma GCC unroll 16
    for (std::size_t r = 0; r < R; ++r) {
#pragma GCC unroll 4
        for (std::size_t v = 0; v < NV; ++v) {
            acc[r][v] = L::load(row(tile.b, tile.ldb, first + r) + v * W);
        }
    }
    // The trailing update by every solved row: the hot loop, R x NV multiply-adds per row.
    const T* solved = tile.x;
    for (std::size_t p = 0; p < first; ++p, solved += tile.ldx) {
        vector x[NV];
#pragma GCC unroll 4
        for (std::size_t v = 0; v < NV; ++v) {
            x[v] = L::load(solved + v * W);
        }
        const T* coefficients = panel + p * MR;
#pragma GCC unroll 16
        for (std::size_t r = 0; r < R; ++r) {
            const vector a = L::splat(coefficients[r]);
#pragma GCC unroll 4
            for (std::size_t v = 0; v < NV; ++v) {
                acc[r][v] = L::fma(a, x[v], acc[r][v]);
            }
        }
    }
    // Substitution within the diagonal block, still in registers.
    const T* own = panel + first * MR;
#pragma GCC unroll 16
    for (std::size_t r = 0; r < R; ++r) {
#pragma GCC unroll 16
        for (std::size_t s = 0; s < r; ++s) {
            const vector a = L::splat(own[s * MR + r]);
#pragma GCC unroll 4
            for (std::size_t v = 0; v < NV; ++v) {
                acc[r][v] = L::fma(a, acc[s][v], acc[r][v]);
            }
        }
        const vector d = L::splat(diag[first + r]);
#pragma GCC unroll 4
        for (std::size_t v = 0; v < NV; ++v) {
            if constexpr (Divide) {
                acc[r][v] = L::divide(acc[r][v], d);
            } else {
                acc[r][v] = acc[r][v] * d;
            }
        }
    }
#pragma GCC unroll 16
    for (std::size_t r = 0; r < R; ++r) {
#pragma GCC unroll 4
        for (std::size_t v = 0; v < NV; ++v) {
            L::store(row(tile.x, tile.ldx, first + r) + v * W, acc[r][v]);
        }
    }
}

// The last, partial block of rows: R = remainder, chosen at run time among 1 .. rows - 1.
template <class T, class A, bool Divide, std::size_t R = 1>
inline void solve_last_rows(const T* panel, const T* diag, const tile_rows<T>& tile, std::size_t first, std::size_t remainder) noexcept
{
    if constexpr (R < tile_shape<T, A>::rows) {
        if (remainder == R) {
            solve_block_row<T, A, R, Divide>(panel, diag, tile, first);
        } else {
            solve_last_rows<T, A, Divide, R + 1>(panel, diag, tile, first, remainder);
        }
    }
}

// Solves a whole column tile, block of rows after block of rows.
template <class T, class A, bool Divide>
void solve_tile(const packed_lower<T>& lower, const tile_rows<T>& tile) noexcept
{
    constexpr std::size_t MR = tile_shape<T, A>::rows;
    const T* panel = lower.panels;
    std::size_t first = 0;
    for (; first + MR <= lower.n; first += MR) {
        solve_block_row<T, A, MR, Divide>(panel, lower.diag, tile, first);
        panel += (first + MR) * MR;
    }
    if (first < lower.n) {
        solve_last_rows<T, A, Divide>(panel, lower.diag, tile, first, lower.n - first);
    }
}

} // namespace qk::kernels::solve_tri_detail
