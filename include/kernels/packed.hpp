// Weights repacked for tiled matrix products (prompt processing, batched decoding, draft
// verification): qk::packed_matrix<Block> owns a copy of GGUF rows rearranged in tiles of 16 rows,
// and qk::packed_panel holds quantized activation columns arranged for the same kernels
// (packed/*.hpp), which compute 16 rows x up to 8 columns at a time. backends/cpu drives them.
//
// Results equal the generic qk::dot bit for bit: each output value is the sum over blocks (NVFP4:
// sub-blocks of 16), in order, of (d_w * d_a) * sumi rounded twice, as dot/generic.hpp computes
// it; only where and how the exact integer sums are formed differs.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <type_traits>
#include <utility>

#include "error.hpp"
#include "formats.hpp"
#include "fp16.hpp"
#include "large_buffer.hpp"

namespace qk {

// The layout, per format. A tile is packed_tile_rows rows (the last tile padded with zero
// weights). Each group of 32 values of the tile's rows is one "code group":
//  - 8-bit codes (Q8_0): 512 bytes, eight 64-byte vectors; vector k holds values 4k..4k+3 of rows
//    0..15 in turn (row r at bytes 4r..4r+3), each stored as value + 128 (unsigned): an int8 dot
//    instruction (u8 x s8, four products per 32-bit lane) then sums one row per lane.
//  - 4-bit codes (MXFP4, NVFP4, IQ4_NL, IQ4_XS): 256 bytes, four 64-byte vectors; byte 4r + q of
//    vector m holds the code of value 8m + q of row r in its low nibble and of value 8m + 4 + q in
//    its high nibble, so that the two nibble halves of a vector are the 8-bit layout's vectors 2m,
//    2m + 1. An NVFP4 block is two code groups, and each group two 16-value sub-blocks: vectors 0
//    and 1 hold sub-block 2g, vectors 2 and 3 sub-block 2g + 1 (the kernels flush their integer
//    sums between the two, as the reference's per-sub-block float steps need).
// The scales of a block, for the tile's rows:
//  - Q8_0, IQ4_NL: fp16 d[16], the scale of each row's block;
//  - MXFP4: uint8 e[16] (E8M0);
//  - NVFP4: uint8 d[4][16] (UE4M3), sub-block-major;
//  - IQ4_XS: fp16 d[16], then int8 ls[8][16]: the group multipliers ls - 32, group-major.
// A tile is a run of units, each packed_traits<Block>::blocks_per_unit blocks: their code groups
// in order, then their scales (a whole number of 64-byte lines; the last unit is padded to full
// size). Scales between the codes keep the tile one sequential stream: a mat-vec reading them from
// a second place in the tile (all scales after all codes, as before) streamed about 30% slower
// from memory on Zen 5, and a synthetic loop with the same two streams lost as much.
// The storage is 64-byte aligned, and so is every unit and code group.
inline constexpr std::size_t packed_tile_rows = 16;

template <class Block>
struct packed_traits;

template <>
struct packed_traits<block_q8_0> {
    static constexpr std::size_t code_bytes = 512; // per group of 32 values
    static constexpr std::size_t groups_per_block = 1;
    static constexpr std::size_t scale_bytes = 32; // per block
    static constexpr std::size_t blocks_per_unit = 2;
};
template <>
struct packed_traits<block_mxfp4> {
    static constexpr std::size_t code_bytes = 256;
    static constexpr std::size_t groups_per_block = 1;
    static constexpr std::size_t scale_bytes = 16;
    static constexpr std::size_t blocks_per_unit = 4;
};
template <>
struct packed_traits<block_nvfp4> {
    static constexpr std::size_t code_bytes = 256;
    static constexpr std::size_t groups_per_block = 2;
    static constexpr std::size_t scale_bytes = 64;
    static constexpr std::size_t blocks_per_unit = 1;
};
template <>
struct packed_traits<block_iq4_nl> {
    static constexpr std::size_t code_bytes = 256;
    static constexpr std::size_t groups_per_block = 1;
    static constexpr std::size_t scale_bytes = 32;
    static constexpr std::size_t blocks_per_unit = 2;
};
template <>
struct packed_traits<block_iq4_xs> {
    static constexpr std::size_t code_bytes = 256;
    static constexpr std::size_t groups_per_block = 8;
    static constexpr std::size_t scale_bytes = 32 + 8 * 16;
    static constexpr std::size_t blocks_per_unit = 2;
};

// One tile as the kernels read it.
template <class Block>
struct packed_tile {
    using traits = packed_traits<Block>;
    static constexpr std::size_t block_code_bytes = traits::groups_per_block * traits::code_bytes;
    static constexpr std::size_t unit_bytes = traits::blocks_per_unit * (block_code_bytes + traits::scale_bytes);
    static_assert(traits::blocks_per_unit * traits::scale_bytes % 64 == 0, "a unit's scales end on a 64-byte line");

    const std::uint8_t* bytes;
    std::size_t blocks; // per row

    // Where in the tile block b's first code group (its groups follow one another) and its scales lie.
    [[nodiscard]] static constexpr std::size_t codes_offset(std::size_t b) noexcept
    {
        return b / traits::blocks_per_unit * unit_bytes + b % traits::blocks_per_unit * block_code_bytes;
    }
    [[nodiscard]] static constexpr std::size_t scales_offset(std::size_t b) noexcept
    {
        return b / traits::blocks_per_unit * unit_bytes + traits::blocks_per_unit * block_code_bytes +
               b % traits::blocks_per_unit * traits::scale_bytes;
    }
    [[nodiscard]] const std::uint8_t* codes(std::size_t b) const noexcept { return bytes + codes_offset(b); }
    [[nodiscard]] const std::uint8_t* scales(std::size_t b) const noexcept { return bytes + scales_offset(b); }
    // The bytes of a tile of `blocks` blocks per row: whole units.
    [[nodiscard]] static constexpr std::size_t bytes_for(std::size_t blocks) noexcept
    {
        return (blocks / traits::blocks_per_unit + (blocks % traits::blocks_per_unit != 0 ? 1 : 0)) * unit_bytes;
    }
};

namespace detail {

// Where element j of row r of a group lives in the group's bytes: for 4-bit codes, the byte, whose
// low nibble holds it if `high` is false.
template <class Block>
[[nodiscard]] constexpr std::size_t code_offset(std::size_t r, std::size_t j) noexcept
{
    const std::size_t k = j / 4;
    return 64 * (packed_traits<Block>::code_bytes == 512 ? k : k / 2) + 4 * r + j % 4;
}
[[nodiscard]] constexpr bool high_nibble(std::size_t j) noexcept { return j / 4 % 2 == 1; }

// Row r of a code group, whole 32-bit words at a time, each element where code_offset and
// high_nibble place it (packing a matrix runs on these):
//  - Q8_0: from the group's 32 values;
//  - 4-bit: from the 16 bytes holding its 32 codes, in GGUF's order (element j in the low nibble
//    of byte j, element j + 16 in the high nibble: MXFP4, IQ4_NL, an IQ4_XS group) or, with
//    nvfp4_order, NVFP4's (the group's two 16-value sub-blocks in bytes 0-7 and 8-15, elements 0-7
//    of each in the low nibbles, 8-15 in the high ones).
inline void put_q8_0_group(std::uint8_t* group, std::size_t r, const std::int8_t* values) noexcept
{
    for (std::size_t k = 0; k < 8; ++k) {
        std::uint32_t word;
        std::memcpy(&word, values + 4 * k, 4);
        word ^= 0x80808080u; // value + 128, byte by byte
        std::memcpy(group + 64 * k + 4 * r, &word, 4);
    }
}
inline void put_nibble_group(std::uint8_t* group, std::size_t r, const std::uint8_t* codes, bool nvfp4_order) noexcept
{
    // Vector m holds elements 8m .. 8m + 3 in its low nibbles and 8m + 4 .. 8m + 7 in its high ones.
    std::uint32_t word[4];
    std::memcpy(word, codes, 16);
    constexpr std::uint32_t low = 0x0f0f0f0fu;
    const auto low_nibbles = [](std::uint32_t first, std::uint32_t second) { return (first & low) | (second & low) << 4; };
    const auto high_nibbles = [](std::uint32_t first, std::uint32_t second) { return (first >> 4 & low) | (second & ~low); };
    const std::uint32_t vector[4] = {
        low_nibbles(word[0], word[1]),
        nvfp4_order ? high_nibbles(word[0], word[1]) : low_nibbles(word[2], word[3]),
        nvfp4_order ? low_nibbles(word[2], word[3]) : high_nibbles(word[0], word[1]),
        high_nibbles(word[2], word[3]),
    };
    for (std::size_t m = 0; m < 4; ++m) {
        std::memcpy(group + 64 * m + 4 * r, &vector[m], 4);
    }
}

// Reads back element j of row r of a group (the generic kernel's decoding).
template <class Block>
[[nodiscard]] inline int get_code(const std::uint8_t* group, std::size_t r, std::size_t j) noexcept
{
    const std::uint8_t byte = group[code_offset<Block>(r, j)];
    if constexpr (packed_traits<Block>::code_bytes == 512) {
        return byte - 128;
    } else {
        return high_nibble(j) ? byte >> 4 : byte & 0x0f;
    }
}

} // namespace detail

// A weight matrix in the packed layout above, owning its bytes: once built, the GGUF rows it was
// made from may be released. Same size as the GGUF rows but for the last tile's padding (and
// IQ4_XS's 2 bytes per row and block, its group multipliers unpacked).
template <weight_format Block>
class packed_matrix {
public:
    static constexpr std::size_t block_size = format_traits<Block>::block_size;

    packed_matrix() = default;

    // Packs rows x cols weights given as GGUF rows (rows * cols / block_size blocks, row-major).
    packed_matrix(std::span<const Block> w, std::size_t rows, std::size_t cols) try : rows_(rows), cols_(cols)
    {
        constexpr std::string_view name = format_traits<Block>::name;
        if (cols % block_size != 0) {
            detail::fail("qk::packed_matrix<", name, ">: cols is ", cols, ", not a multiple of the block size ", block_size);
        }
        blocks_ = cols / block_size;
        if (blocks_ != 0 && (rows > w.size() / blocks_ || rows * blocks_ != w.size())) {
            detail::fail("qk::packed_matrix<", name, ">: w has ", w.size(), " blocks but rows ", rows, " x cols ", cols, " need ",
                         blocks_, " per row");
        }
        if (blocks_ == 0 && !w.empty()) {
            detail::fail("qk::packed_matrix<", name, ">: w has ", w.size(), " blocks but cols is 0");
        }
        // (rows + 15) / 16 would wrap for rows near SIZE_MAX, which zero columns allow.
        tiles_ = rows / packed_tile_rows + (rows % packed_tile_rows != 0 ? 1 : 0);
        // With rows, w's size bounds blocks_ far below overflow here; without, nothing is allocated.
        tile_bytes_ = packed_tile<Block>::bytes_for(blocks_);
        if (tiles_ != 0 && tile_bytes_ > static_cast<std::size_t>(PTRDIFF_MAX) / tiles_) {
            detail::fail("qk::packed_matrix<", name, ">: rows ", rows, " x cols ", cols, " do not fit in memory");
        }
        const std::size_t total = tiles_ * tile_bytes_;
        // Zero columns make empty tiles, however many rows: nothing to pack (and looping over
        // 2^60 of them would never end).
        if (total != 0) {
            bytes_ = detail::large_array<std::uint8_t>(total);
            std::memset(bytes_.data(), 0, total);
            for (std::size_t t = 0; t < tiles_; ++t) {
                pack_tile(w, t);
            }
        }
    } catch (...) {
        qk::detail::rethrow_as_error("qk::packed_matrix");
    }

    // A value type: copies are deep (a copy is as large as the original), moves are cheap.
    packed_matrix(const packed_matrix&) = default;
    packed_matrix& operator=(const packed_matrix&) = default;
    packed_matrix(packed_matrix&&) noexcept = default;
    packed_matrix& operator=(packed_matrix&&) noexcept = default;
    ~packed_matrix() = default;

    [[nodiscard]] std::size_t rows() const noexcept { return rows_; }
    [[nodiscard]] std::size_t cols() const noexcept { return cols_; }
    [[nodiscard]] std::size_t tiles() const noexcept { return tiles_; }
    [[nodiscard]] std::size_t bytes() const noexcept { return bytes_.size(); }

    [[nodiscard]] packed_tile<Block> tile(std::size_t t) const noexcept
    {
        return {bytes_.data() + t * tile_bytes_, blocks_};
    }

private:
    void pack_tile(std::span<const Block> w, std::size_t t)
    {
        using traits = packed_traits<Block>;
        using tile = packed_tile<Block>;
        std::uint8_t* base = bytes_.data() + t * tile_bytes_;
        const std::size_t first = t * packed_tile_rows;
        const std::size_t count = std::min(packed_tile_rows, rows_ - first);
        for (std::size_t r = 0; r < count; ++r) {
            const Block* row = w.data() + (first + r) * blocks_;
            for (std::size_t b = 0; b < blocks_; ++b) {
                std::uint8_t* block_scales = base + tile::scales_offset(b);
                std::uint8_t* codes = base + tile::codes_offset(b);
                if constexpr (std::is_same_v<Block, block_nvfp4>) {
                    for (std::size_t g = 0; g < 2; ++g) {
                        detail::put_nibble_group(codes + g * traits::code_bytes, r, row[b].qs.data() + 16 * g, true);
                    }
                    for (std::size_t s = 0; s < 4; ++s) {
                        block_scales[16 * s + r] = row[b].d[s];
                    }
                } else if constexpr (std::is_same_v<Block, block_iq4_xs>) {
                    for (std::size_t g = 0; g < 8; ++g) {
                        detail::put_nibble_group(codes + g * traits::code_bytes, r, row[b].qs.data() + 16 * g, false);
                        block_scales[32 + 16 * g + r] = static_cast<std::uint8_t>(iq4_xs_group_scale(row[b], static_cast<int>(g)));
                    }
                    std::memcpy(block_scales + 2 * r, &row[b].d, 2);
                } else if constexpr (std::is_same_v<Block, block_q8_0>) {
                    detail::put_q8_0_group(codes, r, row[b].qs.data());
                    std::memcpy(block_scales + 2 * r, &row[b].d, 2);
                } else {
                    detail::put_nibble_group(codes, r, row[b].qs.data(), false);
                    if constexpr (std::is_same_v<Block, block_mxfp4>) {
                        block_scales[r] = row[b].e;
                    } else {
                        std::memcpy(block_scales + 2 * r, &row[b].d, 2);
                    }
                }
            }
        }
        // Padding rows: Q8_0's zero is code 128; 4-bit padding keeps code 0 with a zero scale
        // (MXFP4, NVFP4: code 0 is the value 0).
        if constexpr (traits::code_bytes == 512) {
            constexpr std::int8_t zeros[32] = {};
            for (std::size_t r = count; r < packed_tile_rows; ++r) {
                for (std::size_t b = 0; b < blocks_; ++b) {
                    detail::put_q8_0_group(base + tile::codes_offset(b), r, zeros);
                }
            }
        }
    }

    std::size_t rows_ = 0;
    std::size_t cols_ = 0;
    std::size_t blocks_ = 0;
    std::size_t tiles_ = 0;
    std::size_t tile_bytes_ = 0;
    detail::large_array<std::uint8_t> bytes_;
};

// Quantized activation columns as the tile kernels read them. Columns are taken eight at a time
// (the last set may be smaller, n columns); for each group of 32 values such a set holds an
// entry of n * 44 bytes: int8 qs[n][32], float scale[n] (the activation block's d), int32
// correction[n] (-128 times the sum of the 32 qs: the 8-bit codes are stored biased by +128),
// int32 first_half_correction[n] (the same over the first 16 qs: NVFP4 scales each half apart).
inline constexpr std::size_t packed_panel_columns = 8;
// The columns of a set in the AMX kernels' panels (pack_panel's amx_sets): a tile row each, so that
// one tile product covers 16 columns.
inline constexpr std::size_t packed_amx_set_columns = 16;
inline constexpr std::size_t packed_entry_bytes = 44; // per column and group

namespace detail {

// f(std::integral_constant<std::size_t, n>{}) for a set of n columns (1 .. packed_panel_columns;
// more count as packed_panel_columns): the SIMD tile kernels are compiled per column count.
template <class F>
void with_column_count(std::size_t n, F&& f)
{
    static_assert(packed_panel_columns == 8);
    switch (n) {
    case 1: f(std::integral_constant<std::size_t, 1>{}); break;
    case 2: f(std::integral_constant<std::size_t, 2>{}); break;
    case 3: f(std::integral_constant<std::size_t, 3>{}); break;
    case 4: f(std::integral_constant<std::size_t, 4>{}); break;
    case 5: f(std::integral_constant<std::size_t, 5>{}); break;
    case 6: f(std::integral_constant<std::size_t, 6>{}); break;
    case 7: f(std::integral_constant<std::size_t, 7>{}); break;
    default: f(std::integral_constant<std::size_t, 8>{}); break;
    }
}

} // namespace detail

// The panel's bytes for `columns` columns of `groups` groups of 32 values.
[[nodiscard]] constexpr std::size_t packed_panel_bytes(std::size_t groups, std::size_t columns) noexcept
{
    return groups * columns * packed_entry_bytes;
}

namespace detail {

// The qs, scale and corrections of group g of one activation row.
struct panel_group {
    const std::int8_t* qs;
    float scale;
    std::int32_t correction;
    std::int32_t first_half_correction;
};

// Which of a group's values a correction read back from a panel covers: all 32, or the first or
// last 16 (NVFP4's sub-blocks).
enum class panel_values { all, first_half, second_half };

// Column c's correction in a panel entry of an n-column set (pack_panel's layout).
[[nodiscard]] inline std::int32_t panel_correction(const std::uint8_t* entry, std::size_t n, std::size_t c, panel_values values) noexcept
{
    std::int32_t all;
    std::int32_t first_half;
    std::memcpy(&all, entry + 36 * n + 4 * c, sizeof all);
    std::memcpy(&first_half, entry + 40 * n + 4 * c, sizeof first_half);
    return values == panel_values::all ? all : values == panel_values::first_half ? first_half : all - first_half;
}

// The corrections are summed from the qs rather than taken from Q8_K's bsums, so that a block
// whose bsums disagree with its qs gives what the reference (which ignores bsums) gives.
inline std::int32_t correction(const std::int8_t* qs, std::size_t count) noexcept
{
    std::int32_t sum = 0;
    for (std::size_t j = 0; j < count; ++j) {
        sum += qs[j];
    }
    return -128 * sum;
}

inline panel_group group_of(const std::int8_t* qs, float scale) noexcept
{
    return {qs, scale, correction(qs, 32), correction(qs, 16)};
}

inline panel_group activation_group(const block_q8_0* row, std::size_t g) noexcept
{
    return group_of(row[g].qs.data(), fp16_to_fp32(row[g].d));
}

inline panel_group activation_group(const block_q8_K* row, std::size_t g) noexcept
{
    return group_of(row[g / 8].qs.data() + 32 * (g % 8), row[g / 8].d);
}

} // namespace detail

// Fills a panel from `columns` rows of activation blocks (column c at a + c * blocks, each of
// `blocks` blocks, as qk::quantize writes them). panel must hold packed_panel_bytes(groups,
// columns) bytes, groups = blocks * values per block / 32. With amx_sets, the layout the AMX
// kernels (packed/amx.hpp) take: sets of packed_amx_set_columns (16) columns, the last one padded
// to 16 with zero columns (all fields zero), the panel then packed_panel_bytes(groups, columns
// rounded up to 16) bytes.
template <class Activation>
void pack_panel(const Activation* a, std::size_t blocks, std::size_t columns, std::uint8_t* panel, bool amx_sets = false) noexcept
{
    const std::size_t groups = blocks * format_traits<Activation>::block_size / 32;
    const std::size_t set_columns = amx_sets ? packed_amx_set_columns : packed_panel_columns;
    const bool pad = amx_sets;
    for (std::size_t c0 = 0; c0 < columns; c0 += set_columns) {
        const std::size_t used = std::min(set_columns, columns - c0);
        const std::size_t n = pad ? set_columns : used;
        std::uint8_t* set = panel + c0 * groups * packed_entry_bytes;
        const std::size_t stride = n * packed_entry_bytes;
        for (std::size_t c = 0; c < n; ++c) {
            const Activation* row = c < used ? a + (c0 + c) * blocks : nullptr;
            // Offsets rather than one moving pointer: g++ 12's -O2 on AVX-512 targets
            // (induction-variable optimisation) sent the stores astray with the latter.
            const std::size_t qs_at = 32 * c;
            const std::size_t scale_at = 32 * n + 4 * c;
            const std::size_t correction_at = 36 * n + 4 * c;
            const std::size_t first_half_at = 40 * n + 4 * c;
            for (std::size_t g = 0; g < groups; ++g) {
                constexpr std::int8_t zeros[32] = {};
                const detail::panel_group group = c < used ? detail::activation_group(row, g) : detail::panel_group{zeros, 0.0f, 0, 0};
                std::memcpy(set + g * stride + qs_at, group.qs, 32);
                std::memcpy(set + g * stride + scale_at, &group.scale, 4);
                std::memcpy(set + g * stride + correction_at, &group.correction, 4);
                std::memcpy(set + g * stride + first_half_at, &group.first_half_correction, 4);
            }
        }
    }
}

} // namespace qk
