// The portable half of Metal sampling: plans a chain for the kernels of shaders/sampling.metal,
// lays out the records they read, lists the dispatches in order, and finishes on the host, in
// double, what Metal cannot compute (it has no double): the total of the chunk sums, the softmax
// factor float(1.0 / total), both categorical draws and adaptive_p's, from the values the
// kernels wrote.
// Pure C++ with no Metal dependency: the Apple host code and the Linux emulation tests share it.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../kernels/error.hpp"
#include "../../sampling/chain.hpp"
#include "../../sampling/samplers/adaptive_p.hpp"
#include "../../sampling/samplers/dist.hpp"
#include "../../sampling/token_data.hpp"
#include "../../sampling/vocabulary_scan.hpp"
#include "../gpu/sampling_layout.hpp"
#include "../gpu/sampling_plan.hpp"

namespace qk::backend::metal::detail::sampling {

namespace gpu_sampling = qk::backend::detail::gpu_sampling;
namespace layout = qk::backend::gpu::sampling_layout;

// --- the records shared with sampling.metal: gpu/sampling_layout.hpp spells out every word, and
// the kernels read the same values from shaders/generated/sampling_layout.h ---

using layout::row_words;
using layout::op_words;
using layout::result_words;
using layout::list_words; // a list entry is a token_data, so the host reads lists in place
using layout::all_rows;
inline constexpr std::size_t chunk_size = layout::chunk_size; // host arithmetic is in size_t
using layout::max_list_capacity;
using layout::row_word;
using layout::row_flags;
using layout::row_k;
using layout::row_list_ops;
using layout::row_list_count;
using layout::flag;
using layout::active;
using layout::max;
using layout::sums;
// Metal's name for the whole-row draw flag: the host draws from the exps the kernel stores.
inline constexpr flag store_exp = layout::whole_row_draw;
// Metal's name for the softmax flag: scale multiplies the stored exps by the host's factor.
inline constexpr flag scale = layout::softmax;
using layout::top_k;
using layout::list;
using layout::list_dist;
using layout::list_adaptive;
using layout::host_draw;
using layout::kind;
using layout::none;
using layout::divide;
using layout::bias;
using layout::keep_max;
using layout::keep_top_k;
using layout::status;
using layout::ok;
using layout::no_candidate;
using layout::infinite;
using layout::result_word;
using layout::index;
using layout::max_bits;
using layout::token;
using layout::status_word;
using layout::list_size;
using layout::factor_bits;

// Threadgroup-memory bytes (at [[threadgroup(0)]]) of each kernel.
[[nodiscard]] constexpr std::uint32_t argmax_threadgroup_bytes(std::uint32_t threads) noexcept
{
    return 8 * threads;
}
[[nodiscard]] constexpr std::uint32_t top_k_threadgroup_bytes(std::uint32_t threads, std::uint32_t capacity) noexcept
{
    return 4 * (256 + 3 * capacity + 2 * threads + 4);
}

using gpu_sampling::bits;
using gpu_sampling::op;
using gpu_sampling::row_plan;
using gpu_sampling::temperature_op;

using gpu_sampling::drawing;

[[nodiscard]] inline row_plan plan_chain(qk::sampling::chain& c, std::size_t row, std::size_t n_vocab, std::size_t capacity,
                                         drawing& drawer)
{
    return gpu_sampling::plan_chain(c, row, n_vocab, capacity, drawer, "qk::backend::metal");
}

// The row, op and bias records for a batch of plans (shared with the Vulkan backend).
using gpu_sampling::records;
using gpu_sampling::encode;

// --- the dispatches, in order ---

enum class kernel : std::uint8_t { transform, argmax, chunks, scale, top_k };

[[nodiscard]] constexpr const char* kernel_name(kernel k) noexcept
{
    switch (k) {
    case kernel::transform: return "kernel_sampling_transform";
    case kernel::argmax: return "kernel_sampling_argmax";
    case kernel::chunks: return "kernel_sampling_chunks";
    case kernel::scale: return "kernel_sampling_scale";
    case kernel::top_k: return "kernel_sampling_top_k";
    }
    return "";
}

struct dispatch {
    kernel what;
    std::uint32_t param;       // the shape record's param word
    std::uint32_t groups_x;
    std::uint32_t groups_y;    // rows
    std::uint32_t threads;     // per threadgroup (a power of two, at least 32)
    std::uint32_t threadgroup_bytes;
};

enum class mode : std::uint8_t {
    sample,   // chains: the caller's logits are copied into the work values before any op
    in_place, // the stage ops change the bound values themselves
    read,     // selection kernels only (argmax, softmax up to the factor, top-k)
};

// The dispatches for these plans, in order. Buffer 1 (values) is the work copy where mode::sample
// has stage ops (the first dispatch fills it from the caller's logits, bound at 7), else the
// caller's logits themselves; buffer 7 is the exp buffer for chunks and scale. Softmax needs one
// more dispatch, scale_dispatch(), after the host has written each row's factor
// (softmax_factor below) into its result record.
[[nodiscard]] inline std::vector<dispatch> dispatches(const records& r, std::size_t n_seq, std::size_t n_vocab, mode how,
                                                      std::uint32_t threads, std::uint32_t capacity)
{
    const auto seqs = static_cast<std::uint32_t>(n_seq);
    const auto vocab = static_cast<std::uint32_t>(n_vocab);
    const std::uint32_t chunks = (vocab + static_cast<std::uint32_t>(chunk_size) - 1) / static_cast<std::uint32_t>(chunk_size);
    const std::uint32_t row_groups = (vocab + threads - 1) / threads;
    std::vector<dispatch> out;
    if (how == mode::sample && r.stages > 0) {
        out.push_back({kernel::transform, all_rows, row_groups, seqs, threads, 0});
    }
    if (how != mode::read) {
        for (std::size_t j = 0; j < r.stages; ++j) {
            if (r.keeps_at[j]) {
                out.push_back({kernel::argmax, static_cast<std::uint32_t>(j), 1, seqs, threads, argmax_threadgroup_bytes(threads)});
            }
            out.push_back({kernel::transform, static_cast<std::uint32_t>(j), row_groups, seqs, threads, 0});
        }
    }
    if (how != mode::in_place) {
        out.push_back({kernel::argmax, all_rows, 1, seqs, threads, argmax_threadgroup_bytes(threads)});
        out.push_back({kernel::chunks, 0, (chunks * 16 + threads - 1) / threads, seqs, threads, 0});
        out.push_back({kernel::top_k, 0, 1, seqs, threads, top_k_threadgroup_bytes(threads, capacity)});
    }
    return out;
}

[[nodiscard]] inline dispatch scale_dispatch(std::size_t n_seq, std::size_t n_vocab, std::uint32_t threads)
{
    const auto vocab = static_cast<std::uint32_t>(n_vocab);
    return {kernel::scale, 0, (vocab + threads - 1) / threads, static_cast<std::uint32_t>(n_seq), threads, 0};
}

// --- finishing on the host, in double, exactly as the CPU ---

inline void check_status(const char* what, std::uint32_t s, std::size_t row)
{
    if (s == no_candidate) {
        qk::detail::fail("qk::backend::metal::", what, ": sequence ", row, ": every candidate's logit is -inf or NaN; nothing can be sampled");
    }
    if (s == infinite) {
        qk::detail::fail("qk::backend::metal::", what, ": sequence ", row, ": a logit is +inf; logits must be finite or -inf");
    }
}

// The chunk sums of a row's weights as the chunks kernel stored them: exp_sums()'s, in its order
// and rounding (double lanes, which the kernels cannot add).
[[nodiscard]] inline std::vector<float> chunk_sums_of(std::span<const float> weights)
{
    std::vector<float> sums(qk::sampling::detail::chunk_count(weights.size()));
    (void)qk::sampling::detail::weight_sums(weights.data(), weights.size(), sums.data());
    return sums;
}

// The chunk sums added in order, in double: exp_sums()'s total.
[[nodiscard]] inline double total_of(std::span<const float> chunk_sums) noexcept
{
    double total = 0;
    for (const float s : chunk_sums) {
        total += s;
    }
    return total;
}

// qk::sampling::softmax's factor: the double reciprocal rounded to float.
[[nodiscard]] inline float softmax_factor(double total) noexcept
{
    return static_cast<float>(1.0 / total);
}

// The draw over a whole row (vocabulary_scan.hpp's draw) from the kernels' chunk sums and the
// row's exp values (only the chunks the draw reaches are read): the token, or n if no element
// has weight.
[[nodiscard]] inline std::size_t draw(std::span<const float> chunk_sums, std::span<const float> exps, double u) noexcept
{
    const std::size_t n = exps.size();
    const double threshold = u * total_of(chunk_sums);
    double running = 0;
    const std::size_t chunks = chunk_sums.size();
    for (std::size_t c = 0; c < chunks; ++c) {
        if (running + chunk_sums[c] > threshold || c + 1 == chunks) {
            const std::size_t begin = c * chunk_size;
            const std::size_t count = std::min(chunk_size, n - begin);
            std::size_t last_nonzero = n;
            for (std::size_t j = 0; j < count; ++j) {
                const float e = exps[begin + j];
                if (e > 0.0f) {
                    last_nonzero = begin + j;
                    running += e;
                    if (running > threshold) {
                        return begin + j;
                    }
                }
            }
            if (last_nonzero != n) {
                return last_nonzero;
            }
        } else {
            running += chunk_sums[c];
        }
    }
    return n;
}

// The draw over the kernel's final list: the CPU's own softmax of it (compute_probabilities',
// whose total is a double sum) and draw_index, so both are the CPU's by construction.
[[nodiscard]] inline std::int32_t draw_list(std::span<const qk::sampling::token_data> list, double u)
{
    std::vector<qk::sampling::token_data> l(list.begin(), list.end());
    std::vector<float> scratch;
    qk::sampling::detail::softmax_list(l, scratch);
    return l[qk::sampling::detail::draw_index(l, u)].id;
}

// The token of one row after the dispatches, and where adaptive_p drew it, the token's original
// probability: `result` is the row's result record, `exps` its weights as the chunks kernel
// stored them (read only for a whole-row dist draw), `entries` the row's list (read only for a
// list draw), `values` the row's logits after the stage ops (read only for adaptive_p over the
// whole row). Errors (no candidate, +inf) as the CPU raises them.
[[nodiscard]] inline qk::sampling::adaptive_p::choice selection_of(const row_plan& p, std::size_t row,
                                                                   std::span<const std::uint32_t> result,
                                                                   std::span<const float> exps,
                                                                   std::span<const qk::sampling::token_data> entries,
                                                                   std::span<const float> values)
{
    if ((p.flags & host_draw) != 0) {
        return gpu_sampling::draw_on_host(p, values, row, "qk::backend::metal::sample");
    }
    check_status("sample", result[status_word], row);
    if ((p.flags & list) != 0) {
        const auto final_list = entries.first(result[list_size]);
        if ((p.flags & list_adaptive) != 0) {
            return qk::sampling::adaptive_p::select_from({final_list.begin(), final_list.end()}, p.target, p.u);
        }
        if ((p.flags & list_dist) != 0) {
            return {draw_list(final_list, p.u), 0.0f};
        }
        return {static_cast<std::int32_t>(result[token]), 0.0f};
    }
    if ((p.flags & sums) != 0) {
        return {static_cast<std::int32_t>(draw(chunk_sums_of(exps), exps, p.u)), 0.0f};
    }
    return {static_cast<std::int32_t>(result[index]), 0.0f};
}

} // namespace qk::backend::metal::detail::sampling
