// The plan both GPU backends (Vulkan and Metal) make of a sampler chain: which samplers have a GPU
// form (logit_bias, temp, top_k, then greedy or dist), the whole-vocabulary ops and the top-k
// list's ops they become, and the selection at the end; and encode(), which lays a batch of plans
// out in the row, op and bias records (sampling_layout.hpp) that both backends' kernels read.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "../../kernels/error.hpp"
#include "../../sampling/chain.hpp"
#include "../../sampling/samplers/dist.hpp"
#include "../../sampling/samplers/greedy.hpp"
#include "../../sampling/samplers/logit_bias.hpp"
#include "../../sampling/samplers/temperature.hpp"
#include "../../sampling/samplers/top_k.hpp"
#include "../../sampling/token_data.hpp"
#include "../../sampling/vocabulary_scan.hpp"
#include "sampling_layout.hpp"

namespace qk::backend::detail::gpu_sampling {

namespace layout = qk::backend::gpu::sampling_layout;

// The kernels sum exps in the CPU's order, so the layout's chunking must be the CPU's.
static_assert(layout::chunk_size == qk::sampling::detail::chunk_size && layout::chunk_lanes == qk::sampling::detail::sum_lanes,
              "the GPU kernels sum exps in chunks and lanes of vocabulary_scan.hpp's sizes");
static_assert(sizeof(qk::sampling::token_data) == layout::list_words * 4, "a list entry must be a token_data");

// The flags the plan sets and the kinds of its ops.
using layout::flag;
using layout::active;
using layout::max;
using layout::sums;
using layout::whole_row_draw;
using layout::top_k;
using layout::list;
using layout::list_dist;
using layout::kind;
using layout::none;
using layout::divide;
using layout::bias;
using layout::keep_max;
using layout::keep_top_k;

struct op {
    std::uint32_t kind = none;
    std::uint32_t param = 0;
    std::vector<std::pair<std::int32_t, float>> biases; // sorted by id
};

// What the kernels do for one row: the whole-vocabulary ops (one per stage), then either a
// selection over the whole row or a top-k list with its own ops and selection. `u` is the
// uniform of the row's dist.
struct row_plan {
    std::uint32_t flags = 0;
    std::uint32_t k = 0;
    double u = 0;
    std::vector<op> stage;
    std::vector<op> list;
};

[[nodiscard]] inline std::uint32_t bits(float v) noexcept
{
    return std::bit_cast<std::uint32_t>(v);
}

// A temperature as an op: t == 1 changes nothing, t <= 0 keeps the first maximum.
[[nodiscard]] inline op temperature_op(float t)
{
    op o;
    if (t == 1.0f) {
        return o;
    }
    if (t <= 0.0f) {
        o.kind = keep_max;
        return o;
    }
    o.kind = divide;
    o.param = bits(t);
    return o;
}

// What the kernels must do for one chain, checking that each sampler has a GPU form; the chain's
// dist (if it ends with one) comes back in dist_sampler, untouched. Errors name `backend`.
[[nodiscard]] inline row_plan plan_chain(qk::sampling::chain& c, std::size_t row, std::size_t n_vocab, std::size_t capacity,
                                         qk::sampling::dist*& dist_sampler, std::string_view backend)
{
    namespace qs = qk::sampling;
    row_plan p;
    p.flags = active;
    bool in_list = false;
    bool selected = false;
    dist_sampler = nullptr;
    const auto where = [&](std::size_t i) {
        return qk::detail::message("sequence ", row, ": sampler ", i + 1, " '", c[i].describe(), "' of '", c.describe(), "'");
    };
    for (std::size_t i = 0; i < c.size(); ++i) {
        qs::sampler& s = c[i];
        if (selected) {
            qk::detail::fail(backend, "::sample: ", where(i), " follows the selecting sampler; the GPU runs chains that end with their only greedy or dist");
        }
        op o;
        if (s.get<qs::logit_bias>() != nullptr) {
            o.biases = s.get<qs::logit_bias>()->biases();
            if (o.biases.empty()) {
                continue;
            }
            if (static_cast<std::size_t>(o.biases.back().first) >= n_vocab) {
                qk::detail::fail(backend, "::sample: ", where(i), ": token ", o.biases.back().first,
                                 " is outside the vocabulary of ", n_vocab, " tokens");
            }
            o.kind = bias;
        } else if (const auto* t = s.get<qs::temp>(); t != nullptr) {
            o = temperature_op(t->t());
            if (o.kind == none) {
                continue;
            }
        } else if (const auto* k = s.get<qs::top_k>(); k != nullptr) {
            const std::int32_t kk = k->k();
            if (!in_list) {
                if (kk <= 0 || static_cast<std::size_t>(kk) >= n_vocab) {
                    continue; // keeps everything, as on the CPU
                }
                if (static_cast<std::size_t>(kk) > capacity) {
                    qk::detail::fail(backend, "::sample: ", where(i), ": k exceeds this device's GPU top-k limit of ", capacity);
                }
                in_list = true;
                p.k = static_cast<std::uint32_t>(kk);
                p.flags |= top_k | list;
                continue;
            }
            o.kind = keep_top_k;
            o.param = kk <= 0 ? 0u : static_cast<std::uint32_t>(kk);
        } else if (s.get<qs::greedy>() != nullptr) {
            selected = true;
            p.flags |= in_list ? 0u : max;
            continue;
        } else if (auto* d = s.get<qs::dist>(); d != nullptr) {
            selected = true;
            dist_sampler = d;
            p.flags |= in_list ? list_dist : (max | sums | whole_row_draw);
            continue;
        } else {
            qk::detail::fail(backend, "::sample: ", where(i),
                             " has no GPU implementation; the GPU runs logit_bias, temp, top_k, then greedy or dist");
        }
        (in_list ? p.list : p.stage).push_back(std::move(o));
    }
    if (!selected) {
        qk::detail::fail(backend, "::sample: sequence ", row, ": chain '", c.describe(),
                         "' does not end with greedy or dist");
    }
    return p;
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
    r.rows.assign(n_seq * layout::row_words, 0);
    r.ops.assign((r.stages * n_seq + list_ops) * layout::op_words, 0);
    r.keeps_at.assign(r.stages, false);
    const auto put = [&](std::size_t at, const op& o) {
        std::uint32_t* w = r.ops.data() + at * layout::op_words;
        w[layout::op_kind] = o.kind;
        w[layout::op_param] = o.param;
        w[layout::op_first] = static_cast<std::uint32_t>(r.biases.size() / 2);
        w[layout::op_count] = static_cast<std::uint32_t>(o.biases.size());
        for (const auto& [id, value] : o.biases) {
            r.biases.push_back(static_cast<std::uint32_t>(id));
            r.biases.push_back(bits(value));
        }
    };
    std::size_t next_list_op = r.stages * n_seq;
    for (std::size_t row = 0; row < n_seq; ++row) {
        const row_plan& p = plans[row];
        std::uint32_t* w = r.rows.data() + row * layout::row_words;
        w[layout::row_flags] = p.flags;
        w[layout::row_k] = p.k;
        w[layout::row_list_ops] = static_cast<std::uint32_t>(next_list_op);
        w[layout::row_list_count] = static_cast<std::uint32_t>(p.list.size());
        const auto u = std::bit_cast<std::uint64_t>(p.u);
        w[layout::row_u_low] = static_cast<std::uint32_t>(u);
        w[layout::row_u_high] = static_cast<std::uint32_t>(u >> 32);
        for (std::size_t j = 0; j < p.stage.size(); ++j) {
            put(j * n_seq + row, p.stage[j]);
            r.keeps_at[j] = r.keeps_at[j] || ((p.flags & active) != 0 && p.stage[j].kind == keep_max);
        }
        for (const auto& o : p.list) {
            put(next_list_op++, o);
        }
    }
    // Neither Metal nor Vulkan has empty buffers: every records buffer holds at least one word.
    for (auto* v : {&r.rows, &r.ops, &r.biases}) {
        if (v->empty()) {
            v->push_back(0);
        }
    }
    return r;
}

} // namespace qk::backend::detail::gpu_sampling
