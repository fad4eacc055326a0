// The portable half of Metal sampling: plans a chain for the kernels of shaders/sampling.metal,
// lays out the records they read, lists the dispatches in order, and finishes on the host, in
// double, what Metal cannot compute (it has no double): the total of the chunk sums, the softmax
// factor float(1.0 / total) and both categorical draws, from the values the kernels wrote.
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
#include "../gpu/sampling_plan.hpp"
#include "../../sampling/chain.hpp"
#include "../../sampling/samplers/dist.hpp"
#include "../../sampling/token_data.hpp"
#include "../../sampling/vocabulary_scan.hpp"

namespace qk::backend::metal::detail::sampling {

namespace gpu_sampling = qk::backend::detail::gpu_sampling;

// --- the records shared with sampling.metal (its header table spells out every word) ---

inline constexpr std::uint32_t row_words = 8;
inline constexpr std::uint32_t op_words = 4;
inline constexpr std::uint32_t result_words = 8;
// A list entry is a token_data (id, logit bits, p bits), so the host reads lists in place.
inline constexpr std::uint32_t list_words = 3;
inline constexpr std::uint32_t all_rows = 0xffffffffu;
inline constexpr std::size_t chunk_size = qk::sampling::detail::chunk_size;
static_assert(sizeof(qk::sampling::token_data) == list_words * 4, "a list entry must be a token_data");

enum row_word : std::uint32_t { row_flags = 0, row_k = 1, row_list_ops = 2, row_list_count = 3 };

enum flag : std::uint32_t {
    active = 1,
    max = 2,        // the row's maximum and first argmax at selection time
    sums = 4,       // chunk exp sums
    store_exp = 8,  // every exp(x - max) of the row into the exp buffer
    scale = 16,     // the exp buffer times the host's factor (softmax output)
    top_k = 32,     // the sorted top-k list
    list = 64,      // the chain's list ops and its selection from the list
    list_dist = 128 // that selection is a draw: the kernel writes p, the host draws
};
using gpu_sampling::kind;
using gpu_sampling::none;
using gpu_sampling::divide;
using gpu_sampling::bias;
using gpu_sampling::keep_max;
using gpu_sampling::keep_top_k;
static_assert(+active == +gpu_sampling::active && +max == +gpu_sampling::max && +sums == +gpu_sampling::sums &&
                  +store_exp == +gpu_sampling::whole_row_draw && +top_k == +gpu_sampling::top_k && +list == +gpu_sampling::list &&
                  +list_dist == +gpu_sampling::list_dist,
              "the kernels read the plan's flag bits");
enum status : std::uint32_t { ok = 0, no_candidate = 1, infinite = 2 };
enum result_word : std::uint32_t { index = 0, max_bits = 1, token = 2, status_word = 3, list_size = 4, factor_bits = 6 };

inline constexpr std::uint32_t max_list_capacity = 2048;

// Threadgroup-memory bytes (at [[threadgroup(0)]]) of each kernel.
[[nodiscard]] constexpr std::uint32_t argmax_threadgroup_bytes(std::uint32_t threads) noexcept
{
    return 8 * threads;
}
[[nodiscard]] constexpr std::uint32_t chunks_threadgroup_bytes(std::uint32_t threads) noexcept
{
    return 4 * threads;
}
[[nodiscard]] constexpr std::uint32_t top_k_threadgroup_bytes(std::uint32_t threads, std::uint32_t capacity) noexcept
{
    return 4 * (256 + 3 * capacity + 2 * threads + 4);
}

using gpu_sampling::bits;
using gpu_sampling::op;
using gpu_sampling::row_plan;
using gpu_sampling::temperature_op;

[[nodiscard]] inline row_plan plan_chain(qk::sampling::chain& c, std::size_t row, std::size_t n_vocab, std::size_t capacity,
                                         qk::sampling::dist*& dist_sampler)
{
    return gpu_sampling::plan_chain(c, row, n_vocab, capacity, dist_sampler, "qk::backend::metal");
}

// The words of the rows, ops and biases buffers for a batch of plans (one per row). Stage ops
// are laid out stage-major (stage * n_seq + row), list ops after them.
struct records {
    std::vector<std::uint32_t> rows;
    std::vector<std::uint32_t> ops;
    std::vector<std::uint32_t> biases;
    std::size_t stages = 0;
    std::vector<bool> keeps_at; // a stage some active row keeps only the maximum at (argmax first)
};

[[nodiscard]] inline records encode(std::span<const row_plan> plans)
{
    records r;
    const std::size_t n_seq = plans.size();
    std::size_t list_ops = 0;
    for (const auto& p : plans) {
        r.stages = std::max(r.stages, p.stage.size());
        list_ops += p.list.size();
    }
    r.rows.assign(n_seq * row_words, 0);
    r.ops.assign((r.stages * n_seq + list_ops) * op_words, 0);
    r.keeps_at.assign(r.stages, false);
    const auto put = [&](std::size_t at, const op& o) {
        r.ops[at * op_words + 0] = o.kind;
        r.ops[at * op_words + 1] = o.param;
        r.ops[at * op_words + 2] = static_cast<std::uint32_t>(r.biases.size() / 2);
        r.ops[at * op_words + 3] = static_cast<std::uint32_t>(o.biases.size());
        for (const auto& [id, value] : o.biases) {
            r.biases.push_back(static_cast<std::uint32_t>(id));
            r.biases.push_back(bits(value));
        }
    };
    std::size_t next_list_op = r.stages * n_seq;
    for (std::size_t row = 0; row < n_seq; ++row) {
        const row_plan& p = plans[row];
        std::uint32_t* w = r.rows.data() + row * row_words;
        w[row_flags] = p.flags;
        w[row_k] = p.k;
        w[row_list_ops] = static_cast<std::uint32_t>(next_list_op);
        w[row_list_count] = static_cast<std::uint32_t>(p.list.size());
        for (std::size_t j = 0; j < p.stage.size(); ++j) {
            put(j * n_seq + row, p.stage[j]);
            r.keeps_at[j] = r.keeps_at[j] || ((p.flags & active) != 0 && p.stage[j].kind == keep_max);
        }
        for (const auto& o : p.list) {
            put(next_list_op++, o);
        }
    }
    // Metal cannot bind an empty buffer: every records buffer holds at least one word.
    for (auto* v : {&r.rows, &r.ops, &r.biases}) {
        if (v->empty()) {
            v->push_back(0);
        }
    }
    return r;
}

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
        out.push_back({kernel::chunks, 0, (chunks * 16 + threads - 1) / threads, seqs, threads, chunks_threadgroup_bytes(threads)});
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

// The draw over a list whose p the kernel computed (compute_probabilities' values): the CPU's
// own draw_index, so the order of the double sums is the CPU's by construction.
[[nodiscard]] inline std::int32_t draw_list(std::span<const qk::sampling::token_data> list, double u)
{
    const std::vector<qk::sampling::token_data> l(list.begin(), list.end());
    return l[qk::sampling::detail::draw_index(l, u)].id;
}

// The token of one row after the dispatches: `result` is the row's result record, `chunk_sums`
// and `exps` its chunk sums and exp values (read only for a whole-row draw), `entries` the row's
// list (read only for a list draw). Errors (no candidate, +inf) as the CPU raises them.
[[nodiscard]] inline std::int32_t token_of(const row_plan& p, std::size_t row, std::span<const std::uint32_t> result,
                                           std::span<const float> chunk_sums, std::span<const float> exps,
                                           std::span<const qk::sampling::token_data> entries)
{
    check_status("sample", result[status_word], row);
    if ((p.flags & list) != 0) {
        if ((p.flags & list_dist) != 0) {
            return draw_list(entries.first(result[list_size]), p.u);
        }
        return static_cast<std::int32_t>(result[token]);
    }
    if ((p.flags & sums) != 0) {
        return static_cast<std::int32_t>(draw(chunk_sums, exps, p.u));
    }
    return static_cast<std::int32_t>(result[index]);
}

} // namespace qk::backend::metal::detail::sampling
