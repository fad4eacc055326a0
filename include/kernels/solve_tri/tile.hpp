// The register-tiled kernel behind qk::solve_tri: one block of rows of a column tile of the
// right-hand side, updated by every row solved before it and then solved against its own diagonal
// block, without leaving registers. It reads A where it lies, through strides (packing A would
// cost about as much as the solve when k is small). Written once on xsimd batches for any architecture tag; on generic the
// "vector" is a single scalar, which makes the same code the scalar reference.
#pragma once

#include <cmath>
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
    // c - a * b: one fused instruction on FMA3 (xsimd's fnma); elsewhere xsimd's fnma flips a
    // sign bit first, while the plain expression lets the compiler fuse it (AVX-512, NEON) when
    // contraction is on, as it is by default in GNU mode.
    static vector fnma(const vector& a, const vector& b, const vector& c) noexcept
    {
#if defined(__x86_64__) || defined(__i386__)
        if constexpr (std::is_base_of_v<xsimd::fma3<xsimd::sse4_2>, A> || std::is_base_of_v<xsimd::fma3<xsimd::avx>, A> ||
                      std::is_base_of_v<xsimd::fma3<xsimd::avx2>, A>) {
            return xsimd::fnma(a, b, c);
        }
#endif
        return c - a * b;
    }
    // Whether every lane's magnitude lies in [lo, hi] (false for NaN).
    static bool within(const vector& v, T lo, T hi) noexcept
    {
        const vector magnitude = xsimd::abs(v);
        return xsimd::all((magnitude >= vector(lo)) & (magnitude <= vector(hi)));
    }
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
    // Transposes the width x width block held in rows[0 .. width): lane c of rows[l] moves to
    // lane l of rows[c]. In registers for AVX float (the usual 8 x 8 sequence), through memory
    // elsewhere (xsimd 8's zip_lo interleaves within 128-bit lanes on AVX only, so a portable
    // sequence of zips would not be one).
    static void transpose(vector* rows) noexcept
    {
#if defined(__AVX__)
        if constexpr (std::is_same_v<T, float> && width == 8 && std::is_base_of_v<xsimd::avx, A>) {
            __m256 t[8];
            __m256 u[8];
            for (int i = 0; i < 4; ++i) {
                t[2 * i] = _mm256_unpacklo_ps(rows[2 * i], rows[2 * i + 1]);
                t[2 * i + 1] = _mm256_unpackhi_ps(rows[2 * i], rows[2 * i + 1]);
            }
            for (int i = 0; i < 2; ++i) {
                u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
                u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
                u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
                u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
            }
            for (int i = 0; i < 4; ++i) {
                rows[i] = vector(_mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
                rows[i + 4] = vector(_mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
            }
            return;
        }
#endif
        alignas(64) T block[width][width];
        for (std::size_t l = 0; l < width; ++l) {
            rows[l].store_aligned(block[l]);
        }
        alignas(64) T column[width];
        for (std::size_t c = 0; c < width; ++c) {
            for (std::size_t l = 0; l < width; ++l) {
                column[l] = block[l][c];
            }
            rows[c] = vector::load_aligned(column);
        }
    }
};

template <class T>
struct lanes<T, arch::generic> {
    using vector = T;
    static constexpr std::size_t width = 1;
    static T load(const T* p) noexcept { return *p; }
    static void store(T* p, T v) noexcept { *p = v; }
    static T splat(T x) noexcept { return x; }
    static T fnma(T a, T b, T c) noexcept { return c - a * b; }
    static bool within(T v, T lo, T hi) noexcept { return std::abs(v) >= lo && std::abs(v) <= hi; }
    static T divide(T a, T b) noexcept { return a / b; }
    static void transpose(T*) noexcept {}
};

// The tiles: `rows` rows of `vectors` vectors each, as many accumulators as the register file
// holds with room for one row of the right-hand side and a broadcast coefficient (x86 before
// AVX-512: 16 registers, 6 x 2 + 3; AVX-512 and AArch64: 32 registers). The narrow tile, one
// vector wide, takes the columns left over from wide tiles (all of them when k is at most one
// vector, as for n = k = 16, which then needs no copy); with one accumulator a row it takes twice
// the rows, which halves how often the solved rows are reloaded.
template <class T, class A>
struct tile_shape {
    static constexpr bool scalar = std::is_same_v<A, arch::generic>;
    static constexpr bool wide_register_file = std::is_base_of_v<xsimd::avx512f, A> || std::is_base_of_v<xsimd::neon64, A>;
    static constexpr std::size_t rows = scalar ? 4 : wide_register_file ? 8 : 6;
    static constexpr std::size_t vectors = scalar ? 4 : 2;
    static constexpr std::size_t columns = vectors * lanes<T, A>::width;
    static constexpr std::size_t narrow_rows = scalar ? 4 : wide_register_file ? 16 : 12;
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

// L' where A lies: L'[i][j] = origin[i * row_step + j * column_step] for j < i < n (the strictly
// lower part is all that is read), and its diagonal as reciprocals unless Divide (then as
// stored; all ones for a unit diagonal).
template <class T>
struct lower_matrix {
    const T* origin;
    std::ptrdiff_t row_step;
    std::ptrdiff_t column_step;
    const T* diag;
    std::size_t n;
};

// Solves rows [first, first + R) of a tile NV vectors wide, given that the rows before are solved.
template <class T, class A, std::size_t R, std::size_t NV, bool Divide>
[[gnu::always_inline]] inline void solve_block_row(const lower_matrix<T>& l, const tile_rows<T>& tile, std::size_t first) noexcept
{
    using L = lanes<T, A>;
    using vector = typename L::vector;
    constexpr std::size_t W = L::width;
    static_assert(R >= 1 && NV >= 1);

    const auto at = [](auto* base, std::ptrdiff_t stride, std::size_t i) { return base + static_cast<std::ptrdiff_t>(i) * stride; };
    vector acc[R][NV];
#pragma GCC unroll 16
    for (std::size_t r = 0; r < R; ++r) {
#pragma GCC unroll 4
        for (std::size_t v = 0; v < NV; ++v) {
            acc[r][v] = L::load(at(tile.b, tile.ldb, first + r) + v * W);
        }
    }
    // The trailing update by every solved row: the hot loop, R x NV multiply-adds per row, with
    // the R coefficients L'[first + r][p] read from column p of this block's rows.
    const T* block = at(l.origin, l.row_step, first);
    const T* solved = tile.x;
    for (std::size_t p = 0; p < first; ++p, solved += tile.ldx) {
        vector x[NV];
#pragma GCC unroll 4
        for (std::size_t v = 0; v < NV; ++v) {
            x[v] = L::load(solved + v * W);
        }
        const T* column = at(block, l.column_step, p);
#pragma GCC unroll 16
        for (std::size_t r = 0; r < R; ++r) {
            const vector a = L::splat(*at(column, l.row_step, r));
#pragma GCC unroll 4
            for (std::size_t v = 0; v < NV; ++v) {
                acc[r][v] = L::fnma(a, x[v], acc[r][v]);
            }
        }
    }
    // Substitution within the diagonal block, still in registers.
    const T* own = at(block, l.column_step, first);
#pragma GCC unroll 16
    for (std::size_t r = 0; r < R; ++r) {
#pragma GCC unroll 16
        for (std::size_t s = 0; s < r; ++s) {
            const vector a = L::splat(*at(at(own, l.column_step, s), l.row_step, r));
#pragma GCC unroll 4
            for (std::size_t v = 0; v < NV; ++v) {
                acc[r][v] = L::fnma(a, acc[s][v], acc[r][v]);
            }
        }
        const vector d = L::splat(l.diag[first + r]);
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
            L::store(at(tile.x, tile.ldx, first + r) + v * W, acc[r][v]);
        }
    }
}

// The last, partial block of rows: R = remainder, chosen at run time among 1 .. MR - 1.
template <class T, class A, std::size_t MR, std::size_t NV, bool Divide, std::size_t R = 1>
inline void solve_last_rows(const lower_matrix<T>& l, const tile_rows<T>& tile, std::size_t first, std::size_t remainder) noexcept
{
    if constexpr (R < MR) {
        if (remainder == R) {
            solve_block_row<T, A, R, NV, Divide>(l, tile, first);
        } else {
            solve_last_rows<T, A, MR, NV, Divide, R + 1>(l, tile, first, remainder);
        }
    }
}

// Solves a whole column tile of MR x NV blocks, block of rows after block of rows.
template <class T, class A, std::size_t MR, std::size_t NV, bool Divide>
void solve_tile(const lower_matrix<T>& l, const tile_rows<T>& tile) noexcept
{
    std::size_t first = 0;
    for (; first + MR <= l.n; first += MR) {
        solve_block_row<T, A, MR, NV, Divide>(l, tile, first);
    }
    if (first < l.n) {
        solve_last_rows<T, A, MR, NV, Divide>(l, tile, first, l.n - first);
    }
}

} // namespace qk::kernels::solve_tri_detail
