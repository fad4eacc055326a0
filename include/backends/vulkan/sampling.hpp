// Sampling on a Vulkan device over an [n_seq x n_vocab] logits matrix: argmax, softmax, top-k,
// temperature, logit biases and the categorical draw as ops, and sample(), which runs whole
// qk::sampling chains of those samplers (and adaptive_p) and picks exactly the token
// chain.sample() picks.
// Needs shaderFloat64 (the CPU's sums are in double); see sampling_workspace for the limits.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../kernels/error.hpp"
#include "../../sampling/chain.hpp"
#include "../../sampling/token_data.hpp"
#include "../gpu/sample_checks.hpp"
#include "../gpu/sampling_plan.hpp"
#include "../gpu/workspace.hpp"
#include "device.hpp"
#include "shaders/generated/sampling_argmax.hpp"
#include "shaders/generated/sampling_chunks.hpp"
#include "shaders/generated/sampling_finish.hpp"
#include "shaders/generated/sampling_scale.hpp"
#include "shaders/generated/sampling_top_k.hpp"
#include "shaders/generated/sampling_transform.hpp"

namespace qk::backend::vulkan {

namespace detail::sampling {

namespace gpu_sampling = qk::backend::detail::gpu_sampling;
namespace layout = qk::backend::gpu::sampling_layout;

// The records shared with the kernels: gpu/sampling_layout.hpp spells out each word, and the
// shaders read the same values from shaders/generated/sampling_layout.glsl.
using layout::result_words;
using layout::list_words;
using layout::all_rows;
inline constexpr std::size_t chunk_size = layout::chunk_size; // host arithmetic is in size_t
using layout::max_list_capacity;
using layout::active;
using layout::max;
using layout::sums;
using layout::whole_row_draw;
using layout::softmax;
using layout::top_k;
using layout::write_list;
using layout::bias;
using layout::ok;
using layout::no_candidate;
using layout::infinite;
using layout::index;
using layout::token;
using layout::status_word;
using layout::selected_p;
using layout::host_draw;

// Seven storage buffers and four words of push constants for every kernel (one host path).
inline constexpr kernel transform{"sampling_transform", spirv::sampling_transform, 7, 16};
inline constexpr kernel argmax{"sampling_argmax", spirv::sampling_argmax, 7, 16};
inline constexpr kernel chunks{"sampling_chunks", spirv::sampling_chunks, 7, 16};
inline constexpr kernel finish{"sampling_finish", spirv::sampling_finish, 7, 16};
inline constexpr kernel scale{"sampling_scale", spirv::sampling_scale, 7, 16};
inline constexpr kernel top_k_kernel{"sampling_top_k", spirv::sampling_top_k, 7, 16};

using gpu_sampling::op;
using gpu_sampling::row_plan;

} // namespace detail::sampling

// The buffers and records the sampling kernels use, allocated on first need and reused (grown
// only when a larger batch comes): per-step inputs (row records with the uniforms, ops, biases,
// the active set), the work copy of the logits, chunk sums, top-k lists and results. Samplers
// and chains own none of it, so a chain stays plain data that any backend can run. One
// workspace serves one thread at a time. Every pipeline is built here, once.
//
// Exactness rests on: float add/multiply correctly rounded (Vulkan requires it) and never fused
// (`precise` everywhere); double add/multiply and double->float conversion IEEE (true of every
// fp64 device and lavapipe, though Vulkan promises less); float division corrected to the
// correctly rounded quotient in the kernels. Denormal results are rounded by hand where the CPU
// produces them routinely (softmax probabilities); subnormal logits themselves, and exp results
// within an ulp of exp_lowest, may be flushed by a driver and are outside the guarantee.
//
// Limits: top-k lists of at most list_capacity() (2048 where the device has 28 KiB of shared
// memory, else 1024); n_seq <= 65535; n_seq * n_vocab < 2^32. A device without shaderFloat64 is
// a qk::error here (the CPU's sums are in double, and we do not emulate them).
class sampling_workspace {
public:
    explicit sampling_workspace(const device& dev) : dev_(&dev)
    {
        const auto& f = dev.facts();
        if (!f.fp64_arithmetic) {
            qk::detail::fail("qk::backend::vulkan::sampling_workspace: device '", f.name,
                             "' has no shaderFloat64; the exact sampling kernels need double arithmetic");
        }
        workgroup_ = f.max_workgroup_invocations >= 256 ? 256 : 128;
        capacity_ = f.shared_memory_bytes >= 28 * 1024 ? detail::sampling::max_list_capacity : detail::sampling::max_list_capacity / 2;
        // Builds every pipeline now, with a run in which no row is active.
        namespace s = detail::sampling;
        std::vector<s::row_plan> none(1);
        none[0].stage.resize(1);
        execute(input(1), 1, 1, none, mode::warm_up, nullptr);
    }

    sampling_workspace(const sampling_workspace&) = delete;
    sampling_workspace& operator=(const sampling_workspace&) = delete;

    [[nodiscard]] const device& owner() const noexcept { return *dev_; }
    [[nodiscard]] std::size_t list_capacity() const noexcept { return capacity_; }
    // How many buffers this workspace has allocated so far (constant once shapes stop growing).
    [[nodiscard]] std::size_t allocations() const noexcept { return allocations_; }

    // --- for the functions below ---

    enum class mode {
        sample,   // chains: the logits are copied before any op changes them
        in_place, // ops change the given buffer itself
        read,     // nothing changes values (argmax, top-k, draw, softmax)
        warm_up,
    };

    // The device buffer host logits are uploaded into.
    const buffer& input(std::size_t values) { return grow(input_, values * sizeof(float), memory_kind::device); }
    // The softmax output for the host overload.
    const buffer& probabilities(std::size_t values) { return grow(p_, values * sizeof(float), memory_kind::device); }
    [[nodiscard]] const buffer& lists() const noexcept { return lists_; }

    // Runs the plans (one per row) over `logits` and leaves the result records in results().
    void execute(const buffer& logits, std::size_t n_seq, std::size_t n_vocab, std::span<const detail::sampling::row_plan> plans,
                 mode how, const buffer* output)
    {
        namespace s = detail::sampling;
        const auto seqs = static_cast<std::uint32_t>(n_seq);
        const auto vocab = static_cast<std::uint32_t>(n_vocab);
        const auto chunk_count = static_cast<std::uint32_t>((n_vocab + s::chunk_size - 1) / s::chunk_size);

        const s::gpu_sampling::records records = s::gpu_sampling::encode(plans);
        const std::size_t stages = records.stages;

        const buffer& rows = grow(rows_, records.rows.size() * 4, memory_kind::staging);
        const buffer& ops = grow(ops_, records.ops.size() * 4, memory_kind::staging);
        const buffer& biases = grow(biases_, records.biases.size() * 4, memory_kind::staging);
        const buffer& results = grow(results_, n_seq * s::result_words * 4, memory_kind::staging);
        const buffer& sums = grow(sums_, n_seq * chunk_count * 4, memory_kind::device);
        grow(lists_, n_seq * capacity_ * s::list_words * 4, memory_kind::device);
        const bool copy = how == mode::sample && stages > 0;
        const buffer& values = copy ? grow(work_, n_seq * n_vocab * 4, memory_kind::device) : logits;
        values_ = &values;
        dev_->upload(rows, records.rows.data(), records.rows.size() * 4);
        dev_->upload(ops, records.ops.data(), records.ops.size() * 4);
        dev_->upload(biases, records.biases.data(), records.biases.size() * 4);
        result_words_.assign(n_seq * s::result_words, 0);
        dev_->upload(results, result_words_.data(), result_words_.size() * 4);

        const std::uint32_t wg = workgroup_;
        const std::uint32_t row_groups = (vocab + wg - 1) / wg;
        std::vector<step> steps;
        const auto add = [&](const kernel& k, std::uint32_t param, std::uint32_t groups_x, const buffer& extra) {
            step st;
            st.what = &k;
            st.specialization = {wg, static_cast<std::uint32_t>(capacity_)};
            st.buffers = {&values, &rows, &ops, &biases, &results, &sums, &extra};
            st.push = {seqs, vocab, chunk_count, param};
            st.groups_x = groups_x;
            st.groups_y = seqs;
            steps.push_back(std::move(st));
        };
        const bool all = how == mode::warm_up;
        if (copy) {
            add(s::transform, s::all_rows, row_groups, logits);
        }
        if (how == mode::sample || how == mode::in_place || all) {
            for (std::size_t j = 0; j < stages; ++j) {
                if (records.keeps_at[j] || all) {
                    add(s::argmax, static_cast<std::uint32_t>(j), 1, lists_);
                }
                add(s::transform, static_cast<std::uint32_t>(j), row_groups, lists_);
            }
        }
        if (how != mode::in_place) {
            // Selection kernels run whenever a row might need them: each skips rows that do not.
            add(s::argmax, s::all_rows, 1, lists_);
            add(s::chunks, 0, (chunk_count + wg / 16 - 1) / (wg / 16), lists_);
            add(s::finish, 0, 1, lists_);
            if (output != nullptr || all) {
                add(s::scale, 0, row_groups, output != nullptr ? *output : lists_);
            }
            add(s::top_k_kernel, 0, 1, lists_);
        }
        dev_->run(steps);
        dev_->download(results, result_words_.data(), result_words_.size() * 4);
    }

    [[nodiscard]] std::span<const std::uint32_t> results() const noexcept { return result_words_; }
    // Row `row` of the values the last execute() left (the logits after its stage ops) into
    // `out` (n_vocab floats): for the draws the host finishes.
    void download_values(std::size_t row, std::size_t n_vocab, float* out) const
    {
        dev_->download(*values_, out, n_vocab * sizeof(float), row * n_vocab * sizeof(float));
    }
    [[nodiscard]] std::uint32_t result(std::size_t row, std::uint32_t word) const noexcept
    {
        return result_words_[row * detail::sampling::result_words + word];
    }

private:
    const buffer& grow(buffer& b, std::size_t bytes, memory_kind kind)
    {
        return gpu::grow(b, bytes, [&](std::size_t n) {
            ++allocations_;
            return dev_->make_buffer(n, kind);
        });
    }

    const device* dev_;
    const buffer* values_ = nullptr; // what the last execute() ran its ops on
    std::uint32_t workgroup_ = 256;
    std::size_t capacity_ = detail::sampling::max_list_capacity;
    std::size_t allocations_ = 0;
    buffer input_;
    buffer work_;
    buffer p_;
    buffer rows_;
    buffer ops_;
    buffer biases_;
    buffer results_;
    buffer sums_;
    buffer lists_;
    std::vector<std::uint32_t> result_words_;
};

namespace detail::sampling {

inline void check_shape(const char* what, const device& dev, const sampling_workspace& ws, std::size_t n_seq, std::size_t n_vocab,
                        std::span<const std::uint8_t> active)
{
    if (&ws.owner() != &dev) {
        qk::detail::fail("qk::backend::vulkan::", what, ": the workspace belongs to another device");
    }
    if (n_seq == 0 || n_vocab == 0) {
        qk::detail::fail("qk::backend::vulkan::", what, ": n_seq=", n_seq, ", n_vocab=", n_vocab, ": both must be at least 1");
    }
    if (n_seq > gpu::max_sequences || n_vocab > gpu::max_logits / n_seq) {
        qk::detail::fail("qk::backend::vulkan::", what, ": n_seq=", n_seq, " x n_vocab=", n_vocab,
                         " exceeds the kernels' limits (n_seq <= 65535, n_seq * n_vocab < 2^32)");
    }
    if (!active.empty() && active.size() != n_seq) {
        qk::detail::fail("qk::backend::vulkan::", what, ": ", active.size(), " active flags for n_seq = ", n_seq,
                         " (active may also be empty: all active)");
    }
}

inline void check_buffer(const char* what, const buffer& b, std::size_t n_seq, std::size_t n_vocab)
{
    if (b.size() < n_seq * n_vocab * sizeof(float)) {
        qk::detail::fail("qk::backend::vulkan::", what, ": the logits buffer has ", b.size(), " bytes for ", n_seq, " x ", n_vocab,
                         " floats");
    }
}

inline void check_host(const char* what, std::size_t given, std::size_t n_seq, std::size_t n_vocab)
{
    if (given / n_vocab != n_seq || given % n_vocab != 0) {
        qk::detail::fail("qk::backend::vulkan::", what, ": logits has ", given, " elements, not n_seq * n_vocab = ", n_seq, " * ", n_vocab);
    }
}

[[nodiscard]] inline bool is_active(std::span<const std::uint8_t> active, std::size_t r) noexcept
{
    return active.empty() || active[r] != 0;
}

inline void check_status(const char* what, const sampling_workspace& ws, std::size_t row)
{
    const std::uint32_t s = ws.result(row, status_word);
    if (s == no_candidate) {
        qk::detail::fail("qk::backend::vulkan::", what, ": sequence ", row,
                         ": every candidate's logit is -inf or NaN; nothing can be sampled");
    }
    if (s == infinite) {
        qk::detail::fail("qk::backend::vulkan::", what, ": sequence ", row, ": a logit is +inf; logits must be finite or -inf");
    }
}

[[nodiscard]] inline row_plan plan_chain(qk::sampling::chain& c, std::size_t row, std::size_t n_vocab, std::size_t capacity,
                                         gpu_sampling::drawing& drawer)
{
    return gpu_sampling::plan_chain(c, row, n_vocab, capacity, drawer, "qk::backend::vulkan");
}
using gpu_sampling::temperature_op;

} // namespace detail::sampling

// Samples a token for every active sequence of a device-resident [chains.size() x n_vocab]
// logits matrix (active empty: all are) and advances each chain exactly as chain.sample(row)
// would: dist or adaptive_p draws its uniform through next_uniform(), adaptive_p learns the
// token it selected, then the chain accepts the token. Inactive sequences get -1 and their chains
// are not touched. Chains may hold logit_bias, temp (plain temperature), top_k, then greedy, dist
// or adaptive_p; any other sampler, a selecting sampler before the end, or top_k above
// list_capacity() is a qk::error naming it. Errors (those, sizes, or a row with nothing to
// sample) are raised before any chain changes. adaptive_p over a whole row (no top_k before it)
// runs on the host after the kernels' ops (see gpu/sampling_plan.hpp): a download of the row and
// two CPU softmax passes over it.
inline std::vector<std::int32_t> sample(const device& dev, sampling_workspace& ws, std::span<qk::sampling::chain> chains,
                                        const buffer& logits, std::size_t n_vocab, std::span<const std::uint8_t> active = {})
{
    namespace s = detail::sampling;
    const std::size_t n_seq = chains.size();
    s::check_shape("sample", dev, ws, n_seq, n_vocab, active);
    s::check_buffer("sample", logits, n_seq, n_vocab);
    std::vector<s::row_plan> plans(n_seq);
    std::vector<s::gpu_sampling::drawing> drawers(n_seq);
    for (std::size_t r = 0; r < n_seq; ++r) {
        if (s::is_active(active, r)) {
            plans[r] = s::plan_chain(chains[r], r, n_vocab, ws.list_capacity(), drawers[r]);
        }
    }
    ws.execute(logits, n_seq, n_vocab, plans, sampling_workspace::mode::sample, nullptr);
    std::vector<std::int32_t> tokens(n_seq, -1);
    std::vector<float> selected(n_seq, 0.0f); // adaptive_p's original probabilities
    std::vector<float> values;
    for (std::size_t r = 0; r < n_seq; ++r) {
        if (!s::is_active(active, r)) {
            continue;
        }
        if ((plans[r].flags & s::host_draw) != 0) {
            values.resize(n_vocab);
            ws.download_values(r, n_vocab, values.data());
            const auto chosen = s::gpu_sampling::draw_on_host(plans[r], values, r, "qk::backend::vulkan::sample");
            tokens[r] = chosen.token;
            selected[r] = chosen.p;
            continue;
        }
        s::check_status("sample", ws, r);
        tokens[r] = static_cast<std::int32_t>(ws.result(r, s::token));
        selected[r] = std::bit_cast<float>(ws.result(r, s::selected_p));
    }
    for (std::size_t r = 0; r < n_seq; ++r) {
        if (s::is_active(active, r)) {
            drawers[r].commit(tokens[r], selected[r]);
            chains[r].accept(tokens[r]);
        }
    }
    return tokens;
}

// The same from host logits (row-major, chains.size() x n_vocab), uploaded into the workspace.
inline std::vector<std::int32_t> sample(const device& dev, sampling_workspace& ws, std::span<qk::sampling::chain> chains,
                                        std::span<const float> logits, std::size_t n_vocab, std::span<const std::uint8_t> active = {})
{
    namespace s = detail::sampling;
    s::check_shape("sample", dev, ws, chains.size(), n_vocab, active);
    s::check_host("sample", logits.size(), chains.size(), n_vocab);
    const buffer& in = ws.input(logits.size());
    dev.upload(in, logits.data(), logits.size_bytes());
    return sample(dev, ws, chains, in, n_vocab, active);
}

// --- the ops, each over the active rows of a device-resident [n_seq x n_vocab] matrix ---

// Per row, the first index of the largest logit (NaN as -inf): the CPU greedy's token; -1 for
// inactive rows. A row with nothing above -inf, or with a +inf logit: qk::error (as greedy).
inline std::vector<std::int32_t> argmax(const device& dev, sampling_workspace& ws, const buffer& logits, std::size_t n_seq,
                                        std::size_t n_vocab, std::span<const std::uint8_t> active = {})
{
    namespace s = detail::sampling;
    s::check_shape("argmax", dev, ws, n_seq, n_vocab, active);
    s::check_buffer("argmax", logits, n_seq, n_vocab);
    std::vector<s::row_plan> plans(n_seq);
    for (std::size_t r = 0; r < n_seq; ++r) {
        plans[r].flags = s::is_active(active, r) ? (s::active | s::max) : 0u;
    }
    ws.execute(logits, n_seq, n_vocab, plans, sampling_workspace::mode::read, nullptr);
    std::vector<std::int32_t> out(n_seq, -1);
    for (std::size_t r = 0; r < n_seq; ++r) {
        if (s::is_active(active, r)) {
            s::check_status("argmax", ws, r);
            out[r] = static_cast<std::int32_t>(ws.result(r, s::index));
        }
    }
    return out;
}

// The categorical draw of dist over each whole row from the caller's uniforms u[row] in [0, 1)
// (the numbers dist::next_uniform() gives): the token dist would select. Errors as argmax.
inline std::vector<std::int32_t> draw(const device& dev, sampling_workspace& ws, const buffer& logits, std::size_t n_seq,
                                      std::size_t n_vocab, std::span<const double> u, std::span<const std::uint8_t> active = {})
{
    namespace s = detail::sampling;
    s::check_shape("draw", dev, ws, n_seq, n_vocab, active);
    s::check_buffer("draw", logits, n_seq, n_vocab);
    if (u.size() != n_seq) {
        qk::detail::fail("qk::backend::vulkan::draw: ", u.size(), " uniforms for n_seq = ", n_seq);
    }
    std::vector<s::row_plan> plans(n_seq);
    for (std::size_t r = 0; r < n_seq; ++r) {
        plans[r].flags = s::is_active(active, r) ? (s::active | s::max | s::sums | s::whole_row_draw) : 0u;
        plans[r].u = u[r];
    }
    ws.execute(logits, n_seq, n_vocab, plans, sampling_workspace::mode::read, nullptr);
    std::vector<std::int32_t> out(n_seq, -1);
    for (std::size_t r = 0; r < n_seq; ++r) {
        if (s::is_active(active, r)) {
            s::check_status("draw", ws, r);
            out[r] = static_cast<std::int32_t>(ws.result(r, s::token));
        }
    }
    return out;
}

// Softmax of every active row into p (a device buffer of n_seq x n_vocab floats), bit for bit
// qk::sampling::softmax. Returns, per row, whether it was written (false: inactive, or nothing
// above -inf, which the CPU reports the same way). A +inf logit: qk::error.
inline std::vector<std::uint8_t> softmax(const device& dev, sampling_workspace& ws, const buffer& logits, std::size_t n_seq,
                                         std::size_t n_vocab, const buffer& p, std::span<const std::uint8_t> active = {})
{
    namespace s = detail::sampling;
    s::check_shape("softmax", dev, ws, n_seq, n_vocab, active);
    s::check_buffer("softmax", logits, n_seq, n_vocab);
    s::check_buffer("softmax (p)", p, n_seq, n_vocab);
    std::vector<s::row_plan> plans(n_seq);
    for (std::size_t r = 0; r < n_seq; ++r) {
        plans[r].flags = s::is_active(active, r) ? (s::active | s::max | s::sums | s::softmax) : 0u;
    }
    ws.execute(logits, n_seq, n_vocab, plans, sampling_workspace::mode::read, &p);
    std::vector<std::uint8_t> written(n_seq, 0);
    for (std::size_t r = 0; r < n_seq; ++r) {
        if (s::is_active(active, r)) {
            if (ws.result(r, s::status_word) == s::infinite) {
                s::check_status("softmax", ws, r);
            }
            written[r] = ws.result(r, s::status_word) == s::ok ? 1 : 0;
        }
    }
    return written;
}

// Per active row the k best tokens by (logit desc, id asc), NaN as -inf, best first: the list
// the CPU's top_k builds (1 <= k <= min(n_vocab, list_capacity()), else qk::error).
inline std::vector<std::vector<qk::sampling::token_data>> top_k(const device& dev, sampling_workspace& ws, const buffer& logits,
                                                                std::size_t n_seq, std::size_t n_vocab, std::size_t k,
                                                                std::span<const std::uint8_t> active = {})
{
    namespace s = detail::sampling;
    s::check_shape("top_k", dev, ws, n_seq, n_vocab, active);
    s::check_buffer("top_k", logits, n_seq, n_vocab);
    if (k == 0 || k > n_vocab || k > ws.list_capacity()) {
        qk::detail::fail("qk::backend::vulkan::top_k: k=", k, " must be in [1, ", std::min(n_vocab, ws.list_capacity()),
                         "] (n_vocab ", n_vocab, ", GPU list capacity ", ws.list_capacity(), ")");
    }
    std::vector<s::row_plan> plans(n_seq);
    for (std::size_t r = 0; r < n_seq; ++r) {
        plans[r].flags = s::is_active(active, r) ? (s::active | s::top_k | s::write_list) : 0u;
        plans[r].k = static_cast<std::uint32_t>(k);
    }
    ws.execute(logits, n_seq, n_vocab, plans, sampling_workspace::mode::read, nullptr);
    std::vector<std::uint32_t> words(n_seq * ws.list_capacity() * s::list_words);
    dev.download(ws.lists(), words.data(), words.size() * 4);
    std::vector<std::vector<qk::sampling::token_data>> out(n_seq);
    for (std::size_t r = 0; r < n_seq; ++r) {
        if (!s::is_active(active, r)) {
            continue;
        }
        out[r].resize(k);
        for (std::size_t i = 0; i < k; ++i) {
            const std::size_t at = (r * ws.list_capacity() + i) * s::list_words;
            out[r][i] = {static_cast<std::int32_t>(words[at]), std::bit_cast<float>(words[at + 1]), 0.0f};
        }
    }
    return out;
}

// Divides every logit of each active row by t[row] in place, as temp(t) does over a whole
// vocabulary (correctly rounded); t == 1 leaves the row, t <= 0 keeps only its first maximum.
inline void temperature(const device& dev, sampling_workspace& ws, const buffer& logits, std::size_t n_seq, std::size_t n_vocab,
                        std::span<const float> t, std::span<const std::uint8_t> active = {})
{
    namespace s = detail::sampling;
    s::check_shape("temperature", dev, ws, n_seq, n_vocab, active);
    s::check_buffer("temperature", logits, n_seq, n_vocab);
    if (t.size() != n_seq) {
        qk::detail::fail("qk::backend::vulkan::temperature: ", t.size(), " temperatures for n_seq = ", n_seq);
    }
    std::vector<s::row_plan> plans(n_seq);
    for (std::size_t r = 0; r < n_seq; ++r) {
        if (!(t[r] == t[r])) {
            qk::detail::fail("qk::backend::vulkan::temperature: t[", r, "] is NaN");
        }
        plans[r].flags = s::is_active(active, r) ? s::active : 0u;
        plans[r].stage.push_back(s::temperature_op(t[r]));
    }
    ws.execute(logits, n_seq, n_vocab, plans, sampling_workspace::mode::in_place, nullptr);
}

// Adds biases[row]'s (token, bias) pairs to each active row in place, as logit_bias does.
// A token listed twice or outside the vocabulary, or a NaN bias: qk::error.
inline void logit_bias(const device& dev, sampling_workspace& ws, const buffer& logits, std::size_t n_seq, std::size_t n_vocab,
                       std::span<const std::vector<std::pair<std::int32_t, float>>> biases, std::span<const std::uint8_t> active = {})
{
    namespace s = detail::sampling;
    s::check_shape("logit_bias", dev, ws, n_seq, n_vocab, active);
    s::check_buffer("logit_bias", logits, n_seq, n_vocab);
    if (biases.size() != n_seq) {
        qk::detail::fail("qk::backend::vulkan::logit_bias: ", biases.size(), " bias lists for n_seq = ", n_seq);
    }
    std::vector<s::row_plan> plans(n_seq);
    for (std::size_t r = 0; r < n_seq; ++r) {
        plans[r].flags = s::is_active(active, r) ? s::active : 0u;
        s::op o;
        o.kind = s::bias;
        o.biases = biases[r];
        std::sort(o.biases.begin(), o.biases.end());
        for (std::size_t i = 0; i < o.biases.size(); ++i) {
            const auto [id, b] = o.biases[i];
            if (id < 0 || static_cast<std::size_t>(id) >= n_vocab || !(b == b) || (i > 0 && o.biases[i - 1].first == id)) {
                qk::detail::fail("qk::backend::vulkan::logit_bias: row ", r, ": token ", id, " with bias ", b,
                                 ": tokens must be in [0, n_vocab) and listed once, biases numbers");
            }
        }
        plans[r].stage.push_back(std::move(o));
    }
    ws.execute(logits, n_seq, n_vocab, plans, sampling_workspace::mode::in_place, nullptr);
}

// --- the same ops on host logits (row-major n_seq x n_vocab), through the workspace's buffers ---

namespace detail::sampling {

inline const buffer& uploaded(const device& dev, sampling_workspace& ws, const char* what, std::span<const float> logits,
                              std::size_t n_seq, std::size_t n_vocab)
{
    if (n_seq == 0 || n_vocab == 0) {
        qk::detail::fail("qk::backend::vulkan::", what, ": n_seq=", n_seq, ", n_vocab=", n_vocab, ": both must be at least 1");
    }
    check_host(what, logits.size(), n_seq, n_vocab);
    const buffer& in = ws.input(logits.size());
    dev.upload(in, logits.data(), logits.size_bytes());
    return in;
}

} // namespace detail::sampling

inline std::vector<std::int32_t> argmax(const device& dev, sampling_workspace& ws, std::span<const float> logits, std::size_t n_seq,
                                        std::size_t n_vocab, std::span<const std::uint8_t> active = {})
{
    return argmax(dev, ws, detail::sampling::uploaded(dev, ws, "argmax", logits, n_seq, n_vocab), n_seq, n_vocab, active);
}

inline std::vector<std::int32_t> draw(const device& dev, sampling_workspace& ws, std::span<const float> logits, std::size_t n_seq,
                                      std::size_t n_vocab, std::span<const double> u, std::span<const std::uint8_t> active = {})
{
    return draw(dev, ws, detail::sampling::uploaded(dev, ws, "draw", logits, n_seq, n_vocab), n_seq, n_vocab, u, active);
}

// p (n_seq x n_vocab) receives the rows reported written; the others are left as they were.
inline std::vector<std::uint8_t> softmax(const device& dev, sampling_workspace& ws, std::span<const float> logits, std::size_t n_seq,
                                         std::size_t n_vocab, std::span<float> p, std::span<const std::uint8_t> active = {})
{
    if (p.size() != logits.size()) {
        qk::detail::fail("qk::backend::vulkan::softmax: p has ", p.size(), " elements for ", logits.size(), " logits");
    }
    const buffer& in = detail::sampling::uploaded(dev, ws, "softmax", logits, n_seq, n_vocab);
    const buffer& out = ws.probabilities(logits.size());
    const auto written = softmax(dev, ws, in, n_seq, n_vocab, out, active);
    for (std::size_t r = 0; r < n_seq; ++r) {
        if (written[r] != 0) {
            dev.download(out, p.data() + r * n_vocab, n_vocab * sizeof(float), r * n_vocab * sizeof(float));
        }
    }
    return written;
}

inline std::vector<std::vector<qk::sampling::token_data>> top_k(const device& dev, sampling_workspace& ws, std::span<const float> logits,
                                                                std::size_t n_seq, std::size_t n_vocab, std::size_t k,
                                                                std::span<const std::uint8_t> active = {})
{
    return top_k(dev, ws, detail::sampling::uploaded(dev, ws, "top_k", logits, n_seq, n_vocab), n_seq, n_vocab, k, active);
}

inline void temperature(const device& dev, sampling_workspace& ws, std::span<float> logits, std::size_t n_seq, std::size_t n_vocab,
                        std::span<const float> t, std::span<const std::uint8_t> active = {})
{
    const buffer& in = detail::sampling::uploaded(dev, ws, "temperature", logits, n_seq, n_vocab);
    temperature(dev, ws, in, n_seq, n_vocab, t, active);
    dev.download(in, logits.data(), logits.size_bytes());
}

inline void logit_bias(const device& dev, sampling_workspace& ws, std::span<float> logits, std::size_t n_seq, std::size_t n_vocab,
                       std::span<const std::vector<std::pair<std::int32_t, float>>> biases, std::span<const std::uint8_t> active = {})
{
    const buffer& in = detail::sampling::uploaded(dev, ws, "logit_bias", logits, n_seq, n_vocab);
    logit_bias(dev, ws, in, n_seq, n_vocab, biases, active);
    dev.download(in, logits.data(), logits.size_bytes());
}

} // namespace qk::backend::vulkan
