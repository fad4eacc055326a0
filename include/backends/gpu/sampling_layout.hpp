// The records the GPU sampling kernels share with their host code, word by word, for both
// backends: row, op, result and list records, flag bits, op kinds, status codes and limits.
// The Vulkan and Metal host code read these names, and the shaders read the same values from
// files that scripts/generate-shaders.sh prints from this header, so there is one layout.
#pragma once

#include <cstdint>

namespace qk::backend::gpu::sampling_layout {

// --- row records: one per sequence, written by the host ---
inline constexpr std::uint32_t row_words = 8;
enum row_word : std::uint32_t {
    row_flags = 0,
    row_k = 1,          // the top-k list's length (flag top_k)
    row_list_ops = 2,   // the first list op, in op records
    row_list_count = 3, // how many list ops follow it
    row_u_low = 4,      // the uniform of the row's draw, a double as two words (Vulkan draws on
    row_u_high = 5,     // the device; Metal draws on the host and leaves them unread)
    row_target = 6,     // adaptive_p's adapted target, float bits (flag list_adaptive)
};

// Row flags: what the kernels do for the row.
enum flag : std::uint32_t {
    active = 1,
    max = 2,            // the row's maximum and first argmax at selection time
    sums = 4,           // chunk exp sums
    whole_row_draw = 8, // a draw over the whole row (Metal stores the exps the host draws from)
    softmax = 16,       // the softmax output: the factor float(1 / total), then the scaled exps
    top_k = 32,         // the sorted top-k list
    list = 64,          // the chain's list ops and its selection from the list
    list_dist = 128,    // that selection is a draw
    write_list = 256,   // the top-k list is copied out for the caller (Vulkan; Metal always does)
    list_adaptive = 512, // that draw is adaptive_p's: the list's logits transformed towards
                         // row_target first (Vulkan; Metal finishes it on the host)
    host_draw = 1024,   // adaptive_p over the whole row: the kernels run the stage ops only, and
                        // the host draws from the row's values (the CPU's own code)
};

// --- op records: stage ops at stage * n_seq + row, list ops after them ---
inline constexpr std::uint32_t op_words = 4;
enum op_word : std::uint32_t {
    op_kind = 0,
    op_param = 1, // the divisor's bits (divide), or k (keep_top_k)
    op_first = 2, // the first bias, in (token id, bias bits) pairs
    op_count = 3, // how many biases
};
enum kind : std::uint32_t { none = 0, divide = 1, bias = 2, keep_max = 3, keep_top_k = 4 };

// --- result records: one per sequence, written by the kernels ---
inline constexpr std::uint32_t result_words = 9;
enum result_word : std::uint32_t {
    index = 0,       // the first argmax
    max_bits = 1,    // the maximum's bits
    token = 2,       // the selected token
    status_word = 3, // a status below
    list_size = 4,   // the final list's length
    factor_bits = 5, // the softmax factor's bits (Metal: written by the host before scale)
    total_low = 6,   // the double total of the chunk sums (Vulkan; Metal adds them on the host)
    total_high = 7,
    selected_p = 8,  // the original probability of the token adaptive_p drew (flag list_adaptive)
};
enum status : std::uint32_t {
    ok = 0,
    no_candidate = 1, // nothing above -inf
    infinite = 2,     // a +inf logit
};

// --- list entries: a qk::sampling::token_data (id, logit bits, p bits), read in place ---
inline constexpr std::uint32_t list_words = 3;

// --- limits and shapes ---
// The longest top-k list a row can hold (devices with less shared memory hold half).
inline constexpr std::uint32_t max_list_capacity = 2048;
// A kernel param meaning "every row" rather than a stage number.
inline constexpr std::uint32_t all_rows = 0xffffffffu;
// The exp sums' order (sampling/vocabulary_scan.hpp, which sampling_plan.hpp checks against):
// chunks of chunk_size values, element j of a chunk in lane j % chunk_lanes.
inline constexpr std::uint32_t chunk_size = 1024;
inline constexpr std::uint32_t chunk_lanes = 16;

} // namespace qk::backend::gpu::sampling_layout
