// The plan both GPU backends (Vulkan and Metal) make of a sampler chain: which samplers have a GPU
// form (logit_bias, temp, top_k, then greedy or dist), the whole-vocabulary ops and the top-k
// list's ops they become, and the selection at the end. Plain data; each backend lays it out in
// the records its kernels read.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
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

namespace qk::backend::detail::gpu_sampling {

// Row flags the plan sets (each backend's kernels read these bits; they add their own above).
enum flag : std::uint32_t {
    active = 1,
    max = 2,            // the row's maximum and first argmax at selection time
    sums = 4,           // chunk exp sums
    whole_row_draw = 8, // a draw over the whole row (the exp values it needs)
    top_k = 32,         // the sorted top-k list
    list = 64,          // the chain's list ops and its selection from the list
    list_dist = 128,    // that selection is a draw
};
enum kind : std::uint32_t { none = 0, divide = 1, bias = 2, keep_max = 3, keep_top_k = 4 };

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

} // namespace qk::backend::detail::gpu_sampling
