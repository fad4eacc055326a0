// The plan both GPU backends (Vulkan and Metal) make of a sampler chain: which samplers have a GPU
// form (logit_bias, temp, top_k, then greedy, dist or adaptive_p), the whole-vocabulary ops and
// the top-k list's ops they become, and the selection at the end; and encode(), which lays a
// batch of plans out in the row, op and bias records (sampling_layout.hpp) that both backends'
// kernels read.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "../../kernels/error.hpp"
#include "../../sampling/chain.hpp"
#include "../../sampling/samplers/adaptive_p.hpp"
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
using layout::list_adaptive;
using layout::host_draw;
using layout::kind;
using layout::none;
using layout::divide;
using layout::bias;
using layout::keep_max;
using layout::keep_top_k;

// A top_k the device keeps as a list must be a list on the CPU too (not top_k's prefix), so that
// dist draws from it the same way.
static_assert(layout::max_list_capacity <= qk::sampling::detail::prefix_top_k_from);

struct op {
    std::uint32_t kind = none;
    std::uint32_t param = 0;
    std::vector<std::pair<std::int32_t, float>> biases; // sorted by id
};

// What the kernels do for one row: the whole-vocabulary ops (one per stage), then either a
// selection over the whole row or a top-k list with its own ops and selection. `u` is the
// uniform of the row's draw, `target` adaptive_p's adapted target.
struct row_plan {
    std::uint32_t flags = 0;
    std::uint32_t k = 0;
    double u = 0;
    float target = 0;
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

// The chain's selecting sampler that draws (dist or adaptive_p), if any. The plan reads the
// uniform it would draw without moving its generator; once every row's token is known, commit()
// moves it as the CPU's apply() would and gives adaptive_p the token it selected, with its
// original probability, before the chain accepts the token.
struct drawing {
    qk::sampling::dist* dist = nullptr;
    qk::sampling::adaptive_p* adaptive = nullptr;

    [[nodiscard]] double peek_uniform() const
    {
        if (dist != nullptr) {
            qk::sampling::dist copy = *dist;
            return copy.next_uniform();
        }
        if (adaptive != nullptr) {
            qk::sampling::adaptive_p copy = *adaptive;
            return copy.next_uniform();
        }
        return 0;
    }
    void commit(std::int32_t token, float original_p) const
    {
        if (dist != nullptr) {
            (void)dist->next_uniform();
        }
        if (adaptive != nullptr) {
            (void)adaptive->next_uniform();
            if (adaptive->target() >= 0.0f) {
                adaptive->selected(token, original_p);
            }
        }
    }
};

// What the kernels must do for one chain, checking that each sampler has a GPU form; the chain's
// drawing sampler (if it ends with one) comes back in `drawer`, untouched. adaptive_p over a
// list is a kernel draw (Vulkan) or the host's (Metal); over the whole row it is always the
// host's, from the row's values after the kernels' stage ops (flag host_draw): its two
// softmaxes sum in list order, one element after another, which a GPU cannot spread over threads
// and still round as the CPU does. Disabled (a negative target), it draws as dist. Errors name
// `backend`.
[[nodiscard]] inline row_plan plan_chain(qk::sampling::chain& c, std::size_t row, std::size_t n_vocab, std::size_t capacity,
                                         drawing& drawer, std::string_view backend)
{
    namespace qs = qk::sampling;
    row_plan p;
    p.flags = active;
    bool in_list = false;
    bool selected = false;
    drawer = {};
    const auto where = [&](std::size_t i) {
        return qk::detail::message("sequence ", row, ": sampler ", i + 1, " '", c[i].describe(), "' of '", c.describe(), "'");
    };
    for (std::size_t i = 0; i < c.size(); ++i) {
        qs::sampler& s = c[i];
        if (selected) {
            qk::detail::fail(backend, "::sample: ", where(i),
                             " follows the selecting sampler; the GPU runs chains that end with their only greedy, dist or adaptive_p");
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
            drawer.dist = d;
            p.flags |= in_list ? list_dist : (max | sums | whole_row_draw);
            p.u = drawer.peek_uniform();
            continue;
        } else if (auto* a = s.get<qs::adaptive_p>(); a != nullptr) {
            selected = true;
            drawer.adaptive = a;
            if (a->target() < 0.0f) {
                p.flags |= in_list ? list_dist : (max | sums | whole_row_draw);
            } else {
                p.flags |= in_list ? (list_dist | list_adaptive) : host_draw;
                p.target = a->adapted_target();
            }
            p.u = drawer.peek_uniform();
            continue;
        } else {
            qk::detail::fail(backend, "::sample: ", where(i),
                             " has no GPU implementation; the GPU runs logit_bias, temp, top_k, then greedy, dist or adaptive_p");
        }
        (in_list ? p.list : p.stage).push_back(std::move(o));
    }
    if (!selected) {
        qk::detail::fail(backend, "::sample: sequence ", row, ": chain '", c.describe(),
                         "' does not end with greedy, dist or adaptive_p");
    }
    return p;
}

// adaptive_p over a whole row, finished on the host from the row's values after the stage ops
// (flag host_draw): the CPU's own selection over the vocabulary as a list in id order, NaN as
// -inf. A row with nothing above -inf, or with a +inf logit: qk::error naming `what` and the row.
[[nodiscard]] inline qk::sampling::adaptive_p::choice draw_on_host(const row_plan& p, std::span<const float> values, std::size_t row,
                                                                std::string_view what)
{
    namespace qs = qk::sampling;
    std::vector<qs::token_data> l(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
        l[i] = {static_cast<std::int32_t>(i), qs::detail::without_nan(values[i]), 0.0f};
    }
    const float max = qs::detail::list_max(l);
    if (!(max > qs::detail::minus_infinity)) {
        qk::detail::fail(what, ": sequence ", row, ": every candidate's logit is -inf or NaN; nothing can be sampled");
    }
    if (max == std::numeric_limits<float>::infinity()) {
        qk::detail::fail(what, ": sequence ", row, ": a logit is +inf; logits must be finite or -inf");
    }
    return qs::adaptive_p::select_from(std::move(l), p.target, p.u);
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
        w[layout::row_target] = bits(p.target);
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
