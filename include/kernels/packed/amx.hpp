// The tile kernels over packed weights (kernels/packed.hpp) on AMX: the int8 tile unit forms a
// code group's integer sums for 16 rows x 16 columns in one instruction, where AVX-512 VNNI
// spends 128 vpdpbusd, and the float steps stay the VNNI kernel's (packed/avx512vnni.hpp), so
// results equal the generic kernel's bit for bit. backends/cpu/packed_gemm.hpp runs them for
// products of 16 columns and more where qk::amx_usable() (and, for the 4-bit formats, where the
// padded last set wastes little: amx_pays).
//
// The per-group scales bound them: every group's sums leave the tile unit through memory (a tile
// store, about as long as the multiplication) and take four float instructions per column and
// row vector (five for IQ4_XS). On an Intel Xeon (family 6 model 167) the tile instructions also
// hold the vector float units while they run (tdpbssd or tilestored beside a run of vmulps: the
// two times nearly add, where vpaddd overlaps tdpbssd), so a step costs its tile work plus its
// float work, and the kernels keep both lean rather than try to overlap them. There, 4096 x 4096
// weights times 128 columns ran 1.5x as fast as on the VNNI kernels for Q8_0 and 1.2-1.3x for
// the 4-bit formats, at one thread and at two; at 16 columns, 2.2x for Q8_0 and 1.05-1.3x for
// the others; at 8 columns, 0.7x.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "../formats.hpp"
#include "../packed.hpp"
#include "../prefetch.hpp"
#include "../target.hpp"
#include "avx512vnni.hpp"

namespace qk::kernels {

// Whether the AMX kernels are compiled: x86-64 with GNU compilers (the tile instructions do not
// exist in 32-bit mode).
#if QK_HAS_X86_KERNELS && defined(__x86_64__)
inline constexpr bool has_amx_kernels = true;
#else
inline constexpr bool has_amx_kernels = false;
#endif

} // namespace qk::kernels

#if QK_HAS_X86_KERNELS && defined(__x86_64__)
#include <immintrin.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace qk::kernels::amx_detail {

// ldtilecfg's operand, palette 1.
struct alignas(64) tile_config {
    std::uint8_t palette = 1;
    std::uint8_t start_row = 0;
    std::uint8_t reserved[14] = {};
    std::uint16_t bytes_per_row[16] = {};
    std::uint8_t rows[16] = {};
};

// The tiles, in two sets (P = 0, 1) for alternate steps: P the int32 sums (a row per column, 16
// int32: one per weight row), 2 + P the activations (a row per column: K int8), 4 + P the
// weights (K / 4 rows of 16 x 4 bytes: packed.hpp's 8-bit vectors, which are the tile unit's
// layout as they stand). K is 32, a code group; NVFP4's scales change every 16 values, so its K
// is 16, a sub-block. (Issuing the next step's tile work one, two or three steps ahead of a
// step's float work, or with one set of tiles, measured the same: the unit runs its
// instructions one after another.)
template <class Block>
inline constexpr std::size_t depth = std::is_same_v<Block, block_nvfp4> ? 16 : 32;

template <class Block>
QK_TARGET_AMX inline void configure(std::size_t columns) noexcept
{
    tile_config config;
    for (std::size_t t = 0; t < 4; ++t) {
        config.rows[t] = static_cast<std::uint8_t>(columns);
        config.bytes_per_row[t] = t < 2 ? 64 : depth<Block>;
    }
    for (std::size_t t = 4; t < 6; ++t) {
        config.rows[t] = depth<Block> / 4;
        config.bytes_per_row[t] = 64;
    }
    // Not _tile_loadconfig: g++ 12's declares its operand as 8 bytes, and the stores to the rest
    // of the configuration are then dropped as dead (a tile load then faults).
    __asm__ volatile("ldtilecfg %0" : : "m"(config));
}

// A tile's code groups as signed 8-bit values in packed.hpp's 8-bit layout, group after group:
// without Q8_0's and the grids' +128 bias, the tile unit multiplies signed by signed and the
// panel's corrections have no use (fewer vector instructions per step, which bound the kernel).
template <class Arch, class Block>
QK_TARGET_AMX void decode(const packed_tile<Block>& t, std::size_t q0, std::size_t q1, std::uint8_t* out) noexcept
{
    namespace v = packed_avx512_detail;
    using traits = packed_traits<Block>;
    const __m512i table = v::grid_table<Arch, Block>();
    const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
    for (std::size_t q = q0; q < q1; ++q, out += 512) {
        const std::uint8_t* codes = t.codes(q / traits::groups_per_block) + q % traits::groups_per_block * traits::code_bytes;
#pragma GCC unroll 4
        for (std::size_t m = 0; m < 4; ++m) {
            __m512i even;
            __m512i odd;
            v::decode_pair<Arch, Block>(codes, m, table, even, odd);
            _mm512_store_si512(out + 128 * m, _mm512_xor_si512(even, bias));
            _mm512_store_si512(out + 128 * m + 64, _mm512_xor_si512(odd, bias));
        }
    }
}

// One step's integer sums (tiles P, 2 + P, 4 + P: sums, activations, weights): the 16
// activation rows at a (32 bytes apart) times the K / 4 weight rows at b, stored as 16 rows of 16
// int32 at sums.
template <int P>
[[gnu::always_inline]] QK_TARGET_AMX inline void multiply(const std::uint8_t* a, const std::uint8_t* b, std::int32_t (*sums)[16]) noexcept
{
    static_assert(P == 0 || P == 1);
    const long weight_stride = 64;
    const long activation_stride = 32;
    const long sums_stride = 64;
    // Inline assembly for both compilers: g++ 12's intrinsics do not tell the compiler that a tile
    // load reads memory, so stores before it (the decoded codes) could be dropped or sunk past it.
    // Tile numbers are immediates, hence the two copies.
    if constexpr (P == 0) {
        __asm__ volatile("tileloadd (%0,%1,1), %%tmm4" : : "r"(b), "r"(weight_stride) : "memory");
        __asm__ volatile("tilezero %%tmm0" ::: "memory");
        __asm__ volatile("tileloadd (%0,%1,1), %%tmm2" : : "r"(a), "r"(activation_stride) : "memory");
        __asm__ volatile("tdpbssd %%tmm4, %%tmm2, %%tmm0" ::: "memory");
        __asm__ volatile("tilestored %%tmm0, (%0,%1,1)" : : "r"(sums), "r"(sums_stride) : "memory");
    } else {
        __asm__ volatile("tileloadd (%0,%1,1), %%tmm5" : : "r"(b), "r"(weight_stride) : "memory");
        __asm__ volatile("tilezero %%tmm1" ::: "memory");
        __asm__ volatile("tileloadd (%0,%1,1), %%tmm3" : : "r"(a), "r"(activation_stride) : "memory");
        __asm__ volatile("tdpbssd %%tmm5, %%tmm3, %%tmm1" ::: "memory");
        __asm__ volatile("tilestored %%tmm1, (%0,%1,1)" : : "r"(sums), "r"(sums_stride) : "memory");
    }
}

// A tile's steps: K values each (a code group; NVFP4: a sub-block), in order. Step s reads
// activations at a(s), weights at b(s) (decoded holds groups from first_group on), and adds its
// sums to acc with finish().
template <class Arch, class Block, std::size_t N>
struct steps {
    using traits = packed_traits<Block>;
    static constexpr std::size_t halves = std::is_same_v<Block, block_nvfp4> ? 2 : 1;

    const packed_tile<Block>& t;
    const std::uint8_t* decoded;
    std::size_t first_group;
    const std::uint8_t* entries;

    // The step's code group (counted over the whole tile) and its entry in the panel.
    [[nodiscard]] static std::size_t group(std::size_t s) noexcept { return s / halves; }
    [[nodiscard]] const std::uint8_t* entry(std::size_t s) const noexcept { return entries + group(s) * N * packed_entry_bytes; }
    [[nodiscard]] const std::uint8_t* a(std::size_t s) const noexcept { return entry(s) + 16 * (s % halves); }
    [[nodiscard]] const std::uint8_t* b(std::size_t s) const noexcept
    {
        const std::size_t q = group(s);
        return decoded + (q - first_group) * 512 + 256 * (s % halves);
    }

    [[gnu::always_inline]] QK_TARGET_AMX inline void finish(std::size_t s, const std::int32_t (*sums)[16], __m512 (&acc)[N]) const noexcept
    {
        namespace v = packed_avx512_detail;
        const std::size_t q = group(s);
        const std::size_t block = q / traits::groups_per_block;
        const std::size_t g = q % traits::groups_per_block;
        const std::uint8_t* e = entry(s);
        const std::uint8_t* scales = t.scales(block);
        __m512i sum[N];
#pragma GCC unroll 16
        for (std::size_t c = 0; c < N; ++c) {
            sum[c] = _mm512_load_si512(sums[c]);
        }
        if constexpr (std::is_same_v<Block, block_nvfp4>) {
            v::add_nvfp4_sub_block<Arch, N>(sum, e, scales + 16 * (2 * g + s % 2), acc);
        } else {
            v::add_group<Arch, Block, N>(sum, e, scales, g, v::block_scales<Arch, Block>(scales), acc);
        }
    }
};

// Groups q0 .. q1 - 1 of a tile (decoded: theirs, as decode() gives them) against a set of 16
// columns (entries: the set's first panel entry). partial: the set's 16 x 16 sums so far, unread
// when q0 is 0; with groups left after q1 it receives the new ones, and otherwise the first `used`
// columns go to y (at the set's first column; the others are the panel's padding). Step s + 1's
// tile work is issued before step s's float work, on the other tiles.
template <class Arch, class Block>
QK_TARGET_AMX void tile(const packed_tile<Block>& t, const std::uint8_t* decoded, std::size_t q0, std::size_t q1, const std::uint8_t* entries,
                        float* partial, float* y, std::size_t y_stride, __mmask16 rows, std::size_t used) noexcept
{
    constexpr std::size_t N = packed_amx_set_columns;
    using stepping = steps<Arch, Block, N>;
    const stepping step{t, decoded, q0, entries};
    alignas(64) std::int32_t sums[2][N][16];
    __m512 acc[N];
#pragma GCC unroll 16
    for (std::size_t c = 0; c < N; ++c) {
        acc[c] = q0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(partial + 16 * c);
    }
    const std::size_t begin = q0 * stepping::halves;
    const std::size_t end = q1 * stepping::halves;
    multiply<0>(step.a(begin), step.b(begin), sums[0]);
    std::size_t s = begin;
    for (; s + 2 <= end; s += 2) {
        multiply<1>(step.a(s + 1), step.b(s + 1), sums[1]);
        step.finish(s, sums[0], acc);
        if (s + 2 < end) {
            multiply<0>(step.a(s + 2), step.b(s + 2), sums[0]);
        }
        step.finish(s + 1, sums[1], acc);
    }
    if (s < end) {
        step.finish(s, sums[0], acc);
    }
    if (q1 < t.blocks * packed_traits<Block>::groups_per_block) {
#pragma GCC unroll 16
        for (std::size_t c = 0; c < N; ++c) {
            _mm512_store_ps(partial + 16 * c, acc[c]);
        }
        return;
    }
#pragma GCC unroll 16
    for (std::size_t c = 0; c < N; ++c) {
        if (c < used) {
            _mm512_mask_storeu_ps(y + c * y_stride, rows, acc[c]);
        }
    }
}

// The bytes of a tile's groups q0 .. q1 - 1, codes and scales: from the first group's codes to the
// last block's scales (a tile's blocks lie in units: their codes, then their scales).
template <class Block>
[[nodiscard]] std::span<const std::uint8_t> chunk_bytes(const packed_tile<Block>& t, std::size_t q0, std::size_t q1) noexcept
{
    using traits = packed_traits<Block>;
    const std::uint8_t* from = t.codes(q0 / traits::groups_per_block) + q0 % traits::groups_per_block * traits::code_bytes;
    return {from, t.scales((q1 - 1) / traits::groups_per_block) + traits::scale_bytes};
}

} // namespace qk::kernels::amx_detail

namespace qk::kernels {

// Y's rows of tiles first .. last - 1 for all `columns` columns of a panel (pack_panel's with
// amx_sets; of groups = w.cols() / 32 groups), y[c * w.rows() + r] as qk::gemm writes it. The
// caller must have checked qk::amx_usable().
//
// Columns go in runs of 8 sets (128 columns), and tiles in blocks of 4. Within a block, the
// groups go in chunks of 4, and each chunk of each tile in turn (a unit) is decoded into a 2 KiB
// stack buffer and passed over by every set of the run, the sets' partial sums kept in between:
// the activations of a chunk (18 KiB for 8 sets) then stay in L1 for the block's four tiles,
// where tile after tile with the whole row in a chunk read them from L2 at every step (1.15-1.3x
// slower on Q8_0; chunks of 8 groups, 36 KiB, did not stay). Every set also fetches its share of
// the next unit's bytes, which would otherwise arrive only when the next decode stalls on them
// (a tenth of the product's time; fetching them all at once before the sets measured slower).
template <class Arch, class Block>
QK_TARGET_AMX void amx_product(const packed_matrix<Block>& w, std::size_t first, std::size_t last, const std::uint8_t* panel, std::size_t columns,
                               float* y) noexcept
{
    namespace k = amx_detail;
    constexpr std::size_t run_sets = 8;
    constexpr std::size_t block_tiles = 4;
    constexpr std::size_t chunk_groups = 4;
    alignas(64) std::uint8_t decoded[chunk_groups * 512];
    alignas(64) float partial[block_tiles][run_sets][packed_amx_set_columns * packed_tile_rows];
    const std::size_t groups = w.cols() / 32;
    const std::size_t rows = w.rows();
    k::configure<Block>(packed_amx_set_columns);
    for (std::size_t c0 = 0; c0 < columns; c0 += run_sets * packed_amx_set_columns) {
        const std::size_t run_end = std::min(columns, c0 + run_sets * packed_amx_set_columns);
        const std::size_t sets = (run_end - c0 + packed_amx_set_columns - 1) / packed_amx_set_columns;
        for (std::size_t t0 = first; t0 < last; t0 += block_tiles) {
            const std::size_t t1 = std::min(last, t0 + block_tiles);
            for (std::size_t q0 = 0; q0 < groups; q0 += chunk_groups) {
                const std::size_t q1 = std::min(groups, q0 + chunk_groups);
                for (std::size_t t = t0; t < t1; ++t) {
                    const packed_tile<Block> tile = w.tile(t);
                    const __mmask16 mask = packed_avx512_detail::row_mask(std::min(packed_tile_rows, rows - t * packed_tile_rows));
                    k::decode<Arch, Block>(tile, q0, q1, decoded);
                    // The next unit: the block's next tile, or its first tile's next chunk, or
                    // the next block's first (none after the last).
                    const bool same_chunk = t + 1 < t1;
                    const std::size_t next_tile = same_chunk ? t + 1 : (q1 < groups ? t0 : t1);
                    const std::size_t n0 = same_chunk ? q0 : (q1 < groups ? q1 : 0);
                    const std::span<const std::uint8_t> next =
                        next_tile < last ? k::chunk_bytes(w.tile(next_tile), n0, std::min(groups, n0 + chunk_groups)) : std::span<const std::uint8_t>{};
                    const std::size_t share = (next.size() / sets + 63) / 64 * 64;
                    for (std::size_t set = 0; set < sets; ++set) {
                        const std::size_t c = c0 + set * packed_amx_set_columns;
                        if (set * share < next.size()) {
                            qk::detail::prefetch_lines(next.data(), set * share, std::min(share, next.size() - set * share));
                        }
                        k::tile<Arch, Block>(tile, decoded, q0, q1, panel + c * groups * packed_entry_bytes, partial[t - t0][set],
                                             y + c * rows + t * packed_tile_rows, rows, mask, std::min(packed_amx_set_columns, run_end - c));
                    }
                }
            }
        }
    }
    __asm__ volatile("tilerelease" ::: "memory");
}

} // namespace qk::kernels

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#else

namespace qk::kernels {

// Declared, never defined, where has_amx_kernels is false: callers name it in branches that
// if constexpr discards, and a template's names are looked up where it is defined.
template <class Arch, class Block>
void amx_product(const packed_matrix<Block>& w, std::size_t first, std::size_t last, const std::uint8_t* panel, std::size_t columns,
                 float* y) noexcept;

} // namespace qk::kernels

#endif
