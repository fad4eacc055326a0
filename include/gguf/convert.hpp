// qk::gguf::quantize and qk::gguf::dequantize: a whole model file converted, as llama.cpp's
// llama-quantize converts one. quantize picks the weights llama.cpp would quantize, puts them in
// one of qkern's formats (optionally with an importance matrix) and copies everything else; the
// tensor bytes are those ggml_quantize_chunk writes. dequantize turns every tensor qkern can
// decode into F32. Both return a writer whose tensors are produced from the input while it
// writes, one at a time, so a model of many gigabytes converts in the memory of its largest
// tensor; the input file must outlive that write.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../kernels/dispatch.hpp"
#include "../kernels/error.hpp"
#include "../kernels/format_traits.hpp"
#include "../kernels/formats.hpp"
#include "../kernels/quantize.hpp"
#include "file.hpp"
#include "importance.hpp"
#include "writer.hpp"

namespace qk::gguf {

// llama.cpp's llama_ftype for a model quantized to `f` (general.file_type); nullopt for Q8_K, which
// is an activation format and no model's file type. MXFP4's is MXFP4_MOE, the only MXFP4 type.
[[nodiscard]] constexpr std::optional<std::uint32_t> file_type_of(qk::format f) noexcept
{
    switch (f) {
    case qk::format::q8_0: return 7;
    case qk::format::iq4_nl: return 25;
    case qk::format::iq4_xs: return 30;
    case qk::format::mxfp4: return 38;
    case qk::format::nvfp4: return 39;
    case qk::format::q8_K: return std::nullopt;
    }
    return std::nullopt;
}
inline constexpr std::uint32_t file_type_all_f32 = 0;
inline constexpr std::uint32_t quantization_version = 2; // GGML_QNT_VERSION

// ggml_n_dims: the dimensions up to the last one above 1 (a [4096, 1] tensor is a vector).
[[nodiscard]] inline std::size_t effective_dimensions(const tensor_info& t) noexcept
{
    std::size_t n = 1;
    for (std::size_t d = 1; d < t.shape.size(); ++d) {
        if (t.shape[d] > 1) {
            n = d + 1;
        }
    }
    return n;
}

// Whether llama.cpp's quantizer (llama-quant.cpp, tensor_allows_quantization) quantizes a tensor
// of this name and shape: a matrix or a stack of expert matrices whose name ends in "weight",
// except norms, MoE routers, position and token-type embeddings, and the small tensors it keeps
// (convolutions, RWKV's mixes, multimodal projections and codebooks).
[[nodiscard]] inline bool quantizable_weight(const tensor_info& t)
{
    const std::string_view name = t.name;
    if (effective_dimensions(t) < 2 || !name.ends_with("weight")) {
        return false;
    }
    constexpr std::string_view kept[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj", "ssm_conv1d",
        "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight",
        "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight",
        "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.",
        "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
    };
    for (const std::string_view k : kept) {
        if (name.find(k) != std::string_view::npos) {
            return false;
        }
    }
    return name != "position_embd.weight" && name != "token_types.weight";
}

// Calls task(i) for every i in [0, tasks), in any order and on any threads, and returns when all
// have returned (rethrowing the first exception). qk::backend::cpu::thread_pool::run fits; the
// default runs them in turn on the calling thread.
using parallel_runner = std::function<void(std::size_t tasks, const std::function<void(std::size_t)>& task)>;

// What happens to one tensor.
struct conversion {
    std::size_t index = 0;      // in the input's tensor list (and the output's: the order is kept)
    std::uint32_t from = 0;     // ggml types
    std::uint32_t to = 0;       // equal to from: copied
    bool with_importance = false;
    std::string note;           // why a weight was copied or took a fallback type; empty otherwise
};

struct model_conversion {
    gguf::writer out;
    std::vector<conversion> tensors;
    std::size_t converted = 0;        // tensors whose type changes
    std::size_t without_importance = 0; // importance-format tensors an importance matrix had no entry for
};

// What every conversion takes: how to run its tasks, and what to call as each tensor is written.
struct conversion_options {
    parallel_runner run;                              // empty: one thread
    std::function<void(const conversion&)> on_tensor; // called as each tensor is about to be written (progress)
};

struct quantize_options : conversion_options {
    qk::format type = qk::format::q8_0;
    const importance_matrix* importance = nullptr; // IQ4_NL and IQ4_XS use it; the others ignore it, as ggml does
};

using dequantize_options = conversion_options;

namespace detail {

inline void run_tasks(const parallel_runner& run, std::size_t tasks, const std::function<void(std::size_t)>& task)
{
    if (run) {
        run(tasks, task);
    } else {
        for (std::size_t i = 0; i < tasks; ++i) {
            task(i);
        }
    }
}

// Rows per task: about 64 K values, so that a task is long enough to be worth handing out and
// short enough to spread a small tensor over many threads.
inline std::size_t rows_per_task(std::uint64_t cols) { return static_cast<std::size_t>(std::max<std::uint64_t>(1, 65536 / std::max<std::uint64_t>(cols, 1))); }

template <block_format Block>
void quantize_tensor(const file& in, const tensor_info& t, std::span<std::byte> out, const std::vector<float>* importance,
                     const parallel_runner& run)
{
    using traits = format_traits<Block>;
    const std::uint64_t cols = t.shape[0];
    const std::uint64_t rows = t.rows();
    const std::uint64_t matrix_rows = t.shape.size() > 1 ? t.shape[1] : 1; // an importance set per matrix (expert)
    const std::size_t row_blocks = static_cast<std::size_t>(cols / traits::block_size);
    Block* blocks = reinterpret_cast<Block*>(out.data());
    const std::size_t per_task = rows_per_task(cols);
    const std::size_t tasks_per_matrix = static_cast<std::size_t>((matrix_rows + per_task - 1) / per_task);
    const std::size_t matrices = matrix_rows == 0 ? 0 : static_cast<std::size_t>(rows / matrix_rows);
    run_tasks(run, matrices * tasks_per_matrix, [&](std::size_t task) {
        const std::size_t matrix = task / tasks_per_matrix;
        const std::uint64_t first = matrix * matrix_rows + (task % tasks_per_matrix) * per_task;
        const std::uint64_t count = std::min<std::uint64_t>(per_task, (matrix + 1) * matrix_rows - first);
        std::vector<float> x(static_cast<std::size_t>(count * cols));
        in.floats(t, first * cols, x);
        const std::span<Block> y(blocks + first * row_blocks, static_cast<std::size_t>(count) * row_blocks);
        try {
            if constexpr (importance_format<Block>) {
                if (importance != nullptr) {
                    qk::quantize<Block>(x, y, std::span<const float>(*importance).subspan(matrix * cols, static_cast<std::size_t>(cols)));
                    return;
                }
            }
            qk::dispatch([&]<class Tag>(Tag) { qk::quantize<Block, Tag>(x, y); });
        } catch (const qk::error& e) {
            // The kernel speaks of x[i]: say which tensor and rows.
            qk::detail::fail("qk::gguf::quantize: tensor '", t.name, "' rows ", first, "..", first + count - 1, ": ", e.what());
        }
    });
}

template <block_format Block>
void dequantize_tensor(const file& in, const tensor_info& t, std::span<std::byte> out, const parallel_runner& run)
{
    using traits = format_traits<Block>;
    const std::span<const std::byte> bytes = in.bytes(t);
    const std::size_t blocks = bytes.size() / sizeof(Block);
    const std::size_t per_task = std::max<std::size_t>(1, 65536 / traits::block_size);
    run_tasks(run, (blocks + per_task - 1) / per_task, [&](std::size_t task) {
        const std::size_t first = task * per_task;
        const std::size_t count = std::min(per_task, blocks - first);
        // Blocks are copied out: a file aligned below alignof(Block) is still readable.
        std::vector<Block> x(count);
        std::memcpy(x.data(), bytes.data() + first * sizeof(Block), count * sizeof(Block));
        qk::dequantize<Block>(x, std::span<float>(reinterpret_cast<float*>(out.data()) + first * traits::block_size, count * traits::block_size));
    });
}

// A copied tensor is a source too, not bytes in the writer: a model's unquantized tensors (token
// embeddings kept in F16, say) would otherwise sit in memory twice, and progress would be reported
// out of order.
inline tensor_source copy_of(const file& in, const tensor_info& t, const conversion& c, const std::function<void(const conversion&)>& on_tensor)
{
    return [&in, &t, c, on_tensor](std::span<std::byte> out) {
        if (on_tensor) {
            on_tensor(c);
        }
        const std::span<const std::byte> bytes = in.bytes(t);
        if (!bytes.empty()) {
            std::memcpy(out.data(), bytes.data(), bytes.size());
        }
    };
}

inline void copy_metadata(const file& in, writer& out, std::string_view what)
{
    const gguf::value* split = in.find("split.count");
    if (split != nullptr && !split->is_array() && split->type() == value_type::uint16) {
        if (const auto parts = std::get<std::uint16_t>(std::get<gguf::scalar>(split->data)); parts > 1) {
            qk::detail::fail("qk::gguf::", what, ": ", in.path(), " is one part of a split model (split.count ", parts,
                             "); merge the parts first (llama-gguf-split --merge)");
        }
    }
    out.set_all(in.metadata());
    out.erase("split.no");
    out.erase("split.count");
    out.erase("split.tensors.count");
}

} // namespace detail

// The conversion of `in` to opt.type, as a writer ready to write (nothing is computed until then).
// Every argument problem is found here, before anything is written: Q8_K as the type, an
// importance matrix whose entry for a tensor has the wrong size (llama.cpp refuses those too,
// except for token_embd.weight, which it quantizes without). Values that cannot be quantized
// (not finite, or beyond the format's range) are found while writing: qk::error naming the
// tensor and rows, and no file is left behind.
//
// (quantize and dequantize are templates only so that a program that never calls them does not
// instantiate the quantizers of every format on every architecture tag: <qkern.hpp> includes this
// header. Call them as plain functions.)
template <class = void>
[[nodiscard]] model_conversion quantize(const file& in, const quantize_options& opt)
try {
    const std::optional<std::uint32_t> file_type = file_type_of(opt.type);
    if (!file_type) {
        qk::detail::fail("qk::gguf::quantize: ", qk::format_name(opt.type),
                         " is an activation format, not a model's: quantize to Q8_0, MXFP4, IQ4_NL, IQ4_XS or NVFP4");
    }
    model_conversion result;
    detail::copy_metadata(in, result.out, "quantize");
    result.out.set("general.quantization_version", quantization_version);
    result.out.set("general.file_type", *file_type);
    if (opt.importance != nullptr) {
        result.out.set("quantize.imatrix.file", opt.importance->path());
        if (!opt.importance->datasets().empty()) {
            result.out.set("quantize.imatrix.dataset", opt.importance->datasets().front());
        }
        result.out.set("quantize.imatrix.entries_count", static_cast<std::uint32_t>(opt.importance->size()));
        if (opt.importance->chunk_count() > 0) {
            result.out.set("quantize.imatrix.chunks_count", opt.importance->chunk_count());
        }
    }

    const std::span<const tensor_info> tensors = in.tensors();
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const tensor_info& t = tensors[i];
        conversion c{i, t.type, t.type, false, {}};
        qk::format target = opt.type;
        const bool floating = t.type == type_f32 || t.type == type_f16 || t.type == type_bf16;
        if (quantizable_weight(t) && t.elements() > 0) {
            const std::uint64_t cols = t.shape[0];
            // llama.cpp's fallback for rows that are not whole 256-value blocks.
            if (target == qk::format::iq4_xs && cols % 256 != 0 && cols % 32 == 0) {
                target = qk::format::iq4_nl;
                c.note = "rows of " + std::to_string(cols) + " values are not whole IQ4_XS blocks: IQ4_NL instead, as llama.cpp does";
            }
            const std::size_t block = qk::visit_format(target, []<class Block>(std::type_identity<Block>) { return format_traits<Block>::block_size; });
            if (!floating) {
                c.note = std::string("already ") + std::string(t.type_info().name) + ": copied";
            } else if (cols % block != 0) {
                c.note = "rows of " + std::to_string(cols) + " values are not whole " + std::string(qk::format_name(target)) + " blocks: copied";
            } else {
                c.to = qk::gguf_type(target);
            }
        }
        const std::vector<float>* importance = nullptr;
        const bool takes_importance =
            c.to != c.from && qk::visit_format(target, []<class Block>(std::type_identity<Block>) { return importance_format<Block>; });
        if (takes_importance && opt.importance != nullptr) {
            importance = opt.importance->find(t.name);
            const std::uint64_t matrices = t.elements() / (t.shape[0] * t.shape[1]);
            if (importance == nullptr) {
                ++result.without_importance;
            } else if (importance->size() != t.shape[0] * matrices) {
                if (t.name != "token_embd.weight") {
                    qk::detail::fail("qk::gguf::quantize: the importance matrix ", opt.importance->path(), " has ", importance->size(),
                                     " weights for '", t.name, "', which needs ", t.shape[0] * matrices, " (", t.shape[0], " columns x ", matrices,
                                     " matrices)");
                }
                importance = nullptr;
                ++result.without_importance;
            }
            c.with_importance = importance != nullptr;
        }
        if (c.to == c.from) {
            result.out.add_tensor(t.name, t.type, t.shape, detail::copy_of(in, t, c, opt.on_tensor));
        } else {
            ++result.converted;
            result.out.add_tensor(t.name, c.to, t.shape, [&in, &t, c, target, importance, opt](std::span<std::byte> out) {
                if (opt.on_tensor) {
                    opt.on_tensor(c);
                }
                qk::visit_format(target, [&]<class Block>(std::type_identity<Block>) { detail::quantize_tensor<Block>(in, t, out, importance, opt.run); });
            });
        }
        result.tensors.push_back(std::move(c));
    }
    return result;
} catch (...) {
    qk::detail::rethrow_as_error("qk::gguf::quantize");
}

// Every tensor of one of qkern's formats, and every F16 and BF16 tensor, to F32; the rest (types
// qkern has no kernels for) copied. general.file_type becomes ALL_F32 when no quantized tensor is
// left, and stays otherwise.
// (A template for the reason given above quantize.)
template <class = void>
[[nodiscard]] model_conversion dequantize(const file& in, const dequantize_options& opt = {})
try {
    model_conversion result;
    detail::copy_metadata(in, result.out, "dequantize");
    bool quantized_left = false;
    const std::span<const tensor_info> tensors = in.tensors();
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const tensor_info& t = tensors[i];
        conversion c{i, t.type, t.type, false, {}};
        const std::optional<qk::format> format = kernel_format(t.type);
        if (format || t.type == type_f16 || t.type == type_bf16) {
            c.to = type_f32;
        } else if (t.type_info().block_size > 1) {
            quantized_left = true;
            c.note = std::string("qkern cannot decode ") + std::string(t.type_info().name) + ": copied";
        }
        if (c.to == c.from) {
            result.out.add_tensor(t.name, t.type, t.shape, detail::copy_of(in, t, c, opt.on_tensor));
        } else {
            ++result.converted;
            result.out.add_tensor(t.name, type_f32, t.shape, [&in, &t, c, format, opt](std::span<std::byte> out) {
                if (opt.on_tensor) {
                    opt.on_tensor(c);
                }
                if (format) {
                    qk::visit_format(*format, [&]<class Block>(std::type_identity<Block>) { detail::dequantize_tensor<Block>(in, t, out, opt.run); });
                    return;
                }
                const std::uint64_t n = t.elements();
                const std::size_t per_task = 65536;
                detail::run_tasks(opt.run, static_cast<std::size_t>((n + per_task - 1) / per_task), [&](std::size_t task) {
                    const std::uint64_t first = task * per_task;
                    in.floats(t, first, std::span<float>(reinterpret_cast<float*>(out.data()) + first, static_cast<std::size_t>(std::min<std::uint64_t>(per_task, n - first))));
                });
            });
        }
        result.tensors.push_back(std::move(c));
    }
    if (!quantized_left) {
        result.out.set("general.file_type", file_type_all_f32);
    }
    return result;
} catch (...) {
    qk::detail::rethrow_as_error("qk::gguf::dequantize");
}

} // namespace qk::gguf
