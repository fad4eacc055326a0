// qk::gguf::quantize, dequantize and importance_matrix on a small model file written here: which
// tensors are converted (llama.cpp's rules, written out below as the expected type of each), every
// converted tensor's bytes equal to the scalar reference quantizer's on the same floats (the
// reference is checked against ggml's vectors in test_golden.cpp), every other tensor and all
// metadata carried over, the same bytes from one thread and from a pool; importance matrices in
// llama-imatrix's GGUF and legacy forms (the weights computed here from the sums and counts) giving
// the reference's importance-weighted bytes; dequantize's F32 equal to the reference decoding; and
// bad inputs refused before anything is written, or while writing with no file left behind.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <backends/cpu/thread_pool.hpp>
#include <gguf/gguf.hpp>
#include <kernels/arch.hpp>
#include <kernels/error.hpp>
#include <kernels/formats.hpp>
#include <kernels/fp16.hpp>
#include <kernels/quantize.hpp>

#include "inputs.hpp"

namespace {

namespace gguf = qk::gguf;

// A tensor of the test model: its floats (already rounded to its type, so that they are exactly
// what the file holds), or raw bytes for a quantized input type.
struct model_tensor {
    std::string name;
    std::uint32_t type;
    std::vector<std::uint64_t> shape;
    std::vector<float> values;
    std::vector<std::byte> raw;
};

std::vector<std::byte> encode(const model_tensor& t)
{
    if (!t.raw.empty()) {
        return t.raw;
    }
    std::vector<std::byte> out;
    for (const float v : t.values) {
        if (t.type == gguf::type_f32) {
            const auto b = std::bit_cast<std::array<std::byte, 4>>(v);
            out.insert(out.end(), b.begin(), b.end());
        } else {
            const std::uint16_t h = t.type == gguf::type_f16 ? qk::fp32_to_fp16(v) : static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(v) >> 16);
            const auto b = std::bit_cast<std::array<std::byte, 2>>(h);
            out.insert(out.end(), b.begin(), b.end());
        }
    }
    return out;
}

// Values representable in the type: F16 through its conversion, BF16 by dropping the low half.
std::vector<float> values_for(std::uint32_t type, std::size_t count, std::uint32_t seed)
{
    std::vector<float> v = qk_inputs::portable_normal(count, seed);
    for (float& x : v) {
        if (type == gguf::type_f16) {
            x = qk::fp16_to_fp32(qk::fp32_to_fp16(x));
        } else if (type == gguf::type_bf16) {
            x = std::bit_cast<float>(std::bit_cast<std::uint32_t>(x) & 0xffff0000u);
        }
    }
    return v;
}

std::uint64_t elements(const std::vector<std::uint64_t>& shape)
{
    std::uint64_t n = 1;
    for (const auto d : shape) {
        n *= d;
    }
    return n;
}

model_tensor float_tensor(std::string name, std::uint32_t type, std::vector<std::uint64_t> shape, std::uint32_t seed)
{
    model_tensor t{std::move(name), type, std::move(shape), {}, {}};
    t.values = values_for(type, static_cast<std::size_t>(elements(t.shape)), seed);
    return t;
}

template <class Block>
model_tensor block_tensor(std::string name, std::vector<std::uint64_t> shape, std::uint64_t seed)
{
    model_tensor t{std::move(name), qk::format_traits<Block>::gguf_type, std::move(shape), {}, {}};
    const auto blocks = qk_inputs::random_blocks<Block>(static_cast<std::size_t>(elements(t.shape) / qk::format_traits<Block>::block_size), seed);
    const auto b = std::as_bytes(std::span<const Block>(blocks));
    t.raw.assign(b.begin(), b.end());
    return t;
}

// The model, and what llama.cpp's rules make of each tensor: "q" quantized to the chosen type,
// "nl" IQ4_NL where IQ4_XS is asked for and rows are not whole 256-value blocks, "copy" kept.
struct expectation {
    model_tensor tensor;
    std::string rule;
};

std::vector<expectation> test_model()
{
    std::vector<expectation> m;
    m.push_back({float_tensor("token_embd.weight", gguf::type_f16, {512, 6}, 1), "q"});
    m.push_back({float_tensor("blk.0.attn_norm.weight", gguf::type_f32, {512}, 2), "copy"});          // 1-D
    m.push_back({float_tensor("blk.0.attn_q.weight", gguf::type_f32, {512, 9}, 3), "q"});
    m.push_back({float_tensor("blk.0.attn_k.weight", gguf::type_f32, {512, 1}, 4), "copy"});           // ggml_n_dims 1
    m.push_back({float_tensor("blk.0.ffn_down.weight", gguf::type_bf16, {192, 5}, 5), "nl"});          // 192: not whole IQ4_XS blocks
    m.push_back({float_tensor("blk.0.ffn_gate_inp.weight", gguf::type_f32, {512, 4}, 6), "copy"});     // MoE router
    m.push_back({float_tensor("blk.0.ffn_up_exps.weight", gguf::type_f32, {256, 4, 3}, 7), "q"});      // 3 experts
    m.push_back({float_tensor("blk.0.odd.weight", gguf::type_f32, {40, 4}, 8), "copy"});               // 40: no format's block
    m.push_back({float_tensor("blk.0.post_ffw_norm.weight", gguf::type_f32, {256, 2}, 9), "copy"});    // a norm, whatever its shape
    m.push_back({float_tensor("rope.factors", gguf::type_f32, {64, 2}, 10), "copy"});                  // not a weight
    m.push_back({float_tensor("position_embd.weight", gguf::type_f32, {256, 3}, 11), "copy"});
    m.push_back({block_tensor<qk::block_q8_0>("output.weight", {512, 2}, 12), "copy"});                 // already quantized
    model_tensor q4{"blk.0.q4_0.weight", 2, {64, 2}, {}, {}};                                           // a type qkern has no kernels for
    for (std::size_t i = 0; i < 4 * 18; ++i) {
        q4.raw.push_back(static_cast<std::byte>(i * 7 + 1));
    }
    m.push_back({q4, "copy"});
    return m;
}

gguf::writer model_writer(const std::vector<expectation>& model)
{
    gguf::writer w;
    w.set("general.architecture", "llama");
    w.set("general.name", "qkern test model");
    w.set("general.file_type", std::uint32_t{1});
    w.set("llama.context_length", std::uint32_t{4096});
    w.set("tokenizer.ggml.scores", std::vector<float>{0.5f, -1.0f, 2.0f});
    w.set("general.tags", std::vector<std::string>{"a", "b"});
    for (const expectation& e : model) {
        w.add_tensor(e.tensor.name, e.tensor.type, e.tensor.shape, encode(e.tensor));
    }
    return w;
}

// With QKERN_GGUF_MODEL naming a file, the test model is also written there: the input of the
// tool's test (tests/qk_gguf.sh).
void save_model(const gguf::writer& w)
{
    const char* path = std::getenv("QKERN_GGUF_MODEL");
    if (path != nullptr && *path != '\0') {
        w.write(path);
    }
}

std::filesystem::path convert_scratch_directory()
{
    const auto dir = std::filesystem::temp_directory_path() / ("qkern_gguf_convert_" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(dir);
    return dir;
}

struct scratch {
    std::filesystem::path dir = convert_scratch_directory();
    ~scratch() { std::filesystem::remove_all(dir); }
    [[nodiscard]] std::string operator/(const std::string& name) const { return (dir / name).string(); }
    [[nodiscard]] std::size_t files() const
    {
        return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()));
    }
};

std::uint32_t expected_type(const expectation& e, qk::format f)
{
    if (e.rule == "copy") {
        return e.tensor.type;
    }
    const std::uint64_t cols = e.tensor.shape[0];
    if (f == qk::format::iq4_xs && cols % 256 != 0) {
        return qk::gguf_type(qk::format::iq4_nl);
    }
    if (f == qk::format::nvfp4 && cols % 64 != 0) {
        return e.tensor.type;
    }
    return qk::gguf_type(f);
}

// The reference quantizer (scalar, the generic tag) on the tensor's floats, row by row per matrix
// with that matrix's importance weights when given.
template <class Block>
std::vector<std::byte> reference_bytes(const model_tensor& t, const std::vector<float>* importance)
{
    std::vector<Block> blocks(t.values.size() / qk::format_traits<Block>::block_size);
    const std::size_t cols = static_cast<std::size_t>(t.shape[0]);
    const std::size_t matrix = cols * static_cast<std::size_t>(t.shape[1]);
    for (std::size_t m = 0; m * matrix < t.values.size(); ++m) {
        const std::span<const float> x(t.values.data() + m * matrix, matrix);
        const std::span<Block> y(blocks.data() + m * matrix / qk::format_traits<Block>::block_size, matrix / qk::format_traits<Block>::block_size);
        if constexpr (qk::importance_format<Block>) {
            if (importance != nullptr) {
                qk::quantize<Block>(x, y, std::span<const float>(*importance).subspan(m * cols, cols));
                continue;
            }
        }
        qk::quantize<Block, qk::arch::generic>(x, y);
    }
    const auto b = std::as_bytes(std::span<const Block>(blocks));
    return {b.begin(), b.end()};
}

std::vector<std::byte> to_vector(std::span<const std::byte> b) { return {b.begin(), b.end()}; }

// Every input key is in the output with its value, apart from those the conversion sets.
void check_metadata_kept(const gguf::file& in, const gguf::file& out)
{
    for (const gguf::metadata_entry& e : in.metadata()) {
        if (e.key == "general.file_type") {
            continue;
        }
        const gguf::value* v = out.find(e.key);
        REQUIRE_MESSAGE(v != nullptr, e.key);
        CHECK_MESSAGE(v->data == e.value.data, e.key);
    }
}

gguf::parallel_runner pool_runner(qk::backend::cpu::thread_pool& pool)
{
    return [&pool](std::size_t tasks, const std::function<void(std::size_t)>& task) { pool.run(tasks, task); };
}

// llama-imatrix's GGUF form for the given entries: sums (columns x matrices) and counts per matrix.
struct imatrix_entry {
    std::string name;
    std::vector<float> sums;
    std::vector<float> counts;
};

void write_imatrix_gguf(const std::string& path, const std::vector<imatrix_entry>& entries)
{
    gguf::writer w;
    w.set("general.type", "imatrix");
    w.set("imatrix.datasets", std::vector<std::string>{"calibration.txt"});
    w.set("imatrix.chunk_count", std::uint32_t{42});
    w.set("imatrix.chunk_size", std::uint32_t{512});
    for (const imatrix_entry& e : entries) {
        const std::uint64_t matrices = e.counts.size();
        const std::vector<std::uint64_t> sums_shape{e.sums.size() / matrices, matrices};
        const std::vector<std::uint64_t> counts_shape{1, matrices};
        w.add_tensor(e.name + ".in_sum2", gguf::type_f32, sums_shape, std::as_bytes(std::span<const float>(e.sums)));
        w.add_tensor(e.name + ".counts", gguf::type_f32, counts_shape, std::as_bytes(std::span<const float>(e.counts)));
    }
    w.write(path);
}

// The legacy form, assembled field by field.
void write_imatrix_legacy(const std::string& path, const std::vector<imatrix_entry>& entries, std::int32_t chunks, const std::string& dataset)
{
    std::ofstream out(path, std::ios::binary);
    const auto int32 = [&](std::int32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); };
    int32(static_cast<std::int32_t>(entries.size()));
    for (const imatrix_entry& e : entries) {
        int32(static_cast<std::int32_t>(e.name.size()));
        out.write(e.name.data(), static_cast<std::streamsize>(e.name.size()));
        int32(static_cast<std::int32_t>(e.counts.at(0)));
        int32(static_cast<std::int32_t>(e.sums.size()));
        out.write(reinterpret_cast<const char*>(e.sums.data()), static_cast<std::streamsize>(4 * e.sums.size()));
    }
    int32(chunks);
    int32(static_cast<std::int32_t>(dataset.size()));
    out.write(dataset.data(), static_cast<std::streamsize>(dataset.size()));
}

std::vector<float> positive_sums(std::size_t n, std::uint32_t seed)
{
    std::vector<float> s = qk_inputs::portable_normal(n, seed);
    for (float& v : s) {
        v = v * v * 100.0f + 0.5f;
    }
    return s;
}

} // namespace

TEST_CASE("gguf quantize: llama.cpp's choice of tensors, the reference quantizer's bytes, everything else kept")
{
    const scratch dir;
    const std::vector<expectation> model = test_model();
    model_writer(model).write(dir / "model.gguf");
    save_model(model_writer(model));
    const gguf::file in(dir / "model.gguf");
    qk::backend::cpu::thread_pool pool(3);

    for (const qk::format f : {qk::format::q8_0, qk::format::mxfp4, qk::format::iq4_nl, qk::format::iq4_xs, qk::format::nvfp4}) {
        CAPTURE(qk::format_name(f));
        std::vector<std::size_t> reported;
        gguf::quantize_options serial;
        serial.type = f;
        serial.on_tensor = [&](const gguf::conversion& c) { reported.push_back(c.index); };
        const gguf::model_conversion one = gguf::quantize(in, serial);
        CHECK(reported.empty()); // nothing runs before the write
        one.out.write(dir / "one.gguf");
        REQUIRE(reported.size() == model.size());
        for (std::size_t i = 0; i < reported.size(); ++i) {
            CHECK(reported[i] == i);
        }

        gguf::quantize_options threaded;
        threaded.type = f;
        threaded.run = pool_runner(pool);
        gguf::quantize(in, threaded).out.write(dir / "pool.gguf");

        const gguf::file out(dir / "one.gguf");
        const gguf::file pooled(dir / "pool.gguf");
        CHECK(out.get<std::uint32_t>("general.file_type") == gguf::file_type_of(f));
        CHECK(out.get<std::uint32_t>("general.quantization_version") == 2u);
        CHECK(out.find("quantize.imatrix.file") == nullptr);
        check_metadata_kept(in, out);
        REQUIRE(out.tensors().size() == model.size());
        std::size_t converted = 0;
        for (std::size_t i = 0; i < model.size(); ++i) {
            const model_tensor& t = model[i].tensor;
            const gguf::tensor_info& o = out.tensors()[i];
            CAPTURE(t.name);
            CHECK(o.name == t.name);
            CHECK(o.shape == t.shape);
            const std::uint32_t type = expected_type(model[i], f);
            REQUIRE(o.type == type);
            CHECK(one.tensors[i].to == type);
            CHECK(to_vector(pooled.bytes(pooled.tensors()[i])) == to_vector(out.bytes(o)));
            if (type == t.type) {
                CHECK(to_vector(out.bytes(o)) == encode(t));
            } else {
                ++converted;
                const std::vector<std::byte> expected =
                    qk::visit_format(*qk::find_gguf_type(type), [&]<class Block>(std::type_identity<Block>) { return reference_bytes<Block>(t, nullptr); });
                CHECK(to_vector(out.bytes(o)) == expected);
            }
        }
        CHECK(one.converted == converted);
        CHECK(converted >= 3);
    }
}

TEST_CASE("gguf quantize: importance matrices in llama-imatrix's GGUF and legacy forms weight IQ4_NL and IQ4_XS")
{
    const scratch dir;
    const std::vector<expectation> model = test_model();
    model_writer(model).write(dir / "model.gguf");
    const gguf::file in(dir / "model.gguf");

    // attn_q: one matrix seen 7 times. The experts: counts 2, 0 (never routed: weight 1, as
    // llama.cpp sets it) and 5. token_embd: no entry (quantized without, and counted).
    const std::vector<imatrix_entry> entries = {
        {"blk.0.attn_q.weight", positive_sums(512, 20), {7.0f}},
        {"blk.0.ffn_up_exps.weight", positive_sums(256 * 3, 21), {2.0f, 0.0f, 5.0f}},
        {"blk.0.ffn_down.weight", positive_sums(192, 22), {3.0f}},
    };
    write_imatrix_gguf(dir / "imatrix.gguf", entries);
    write_imatrix_legacy(dir / "imatrix.dat", {entries[0], entries[2]}, 42, "calibration.txt");

    std::map<std::string, std::vector<float>> weights;
    for (const imatrix_entry& e : entries) {
        const std::size_t cols = e.sums.size() / e.counts.size();
        std::vector<float>& w = weights[e.name];
        for (std::size_t m = 0; m < e.counts.size(); ++m) {
            for (std::size_t c = 0; c < cols; ++c) {
                w.push_back(e.counts[m] > 0.0f ? e.sums[m * cols + c] / e.counts[m] : 1.0f);
            }
        }
    }

    const gguf::importance_matrix from_gguf(dir / "imatrix.gguf");
    CHECK_FALSE(from_gguf.legacy());
    CHECK(from_gguf.size() == 3);
    CHECK(from_gguf.chunk_count() == 42);
    CHECK(from_gguf.datasets() == std::vector<std::string>{"calibration.txt"});
    for (const auto& [name, w] : weights) {
        REQUIRE(from_gguf.find(name) != nullptr);
        CHECK(*from_gguf.find(name) == w);
    }
    CHECK(from_gguf.find("blk.0.attn_k.weight") == nullptr);

    const gguf::importance_matrix from_dat(dir / "imatrix.dat");
    CHECK(from_dat.legacy());
    CHECK(from_dat.size() == 2);
    CHECK(from_dat.chunk_count() == 42);
    CHECK(from_dat.datasets() == std::vector<std::string>{"calibration.txt"});
    CHECK(*from_dat.find("blk.0.attn_q.weight") == weights["blk.0.attn_q.weight"]);

    for (const qk::format f : {qk::format::iq4_xs, qk::format::iq4_nl, qk::format::q8_0}) {
        CAPTURE(qk::format_name(f));
        gguf::quantize_options opt;
        opt.type = f;
        opt.importance = &from_gguf;
        const gguf::model_conversion c = gguf::quantize(in, opt);
        c.out.write(dir / "out.gguf");
        const gguf::file out(dir / "out.gguf");
        CHECK(out.get<std::string>("quantize.imatrix.file") == dir / "imatrix.gguf");
        CHECK(out.get<std::string>("quantize.imatrix.dataset") == "calibration.txt");
        CHECK(out.get<std::uint32_t>("quantize.imatrix.entries_count") == 3u);
        CHECK(out.get<std::uint32_t>("quantize.imatrix.chunks_count") == 42u);
        const bool weighted = f != qk::format::q8_0;
        CHECK(c.without_importance == (weighted ? 1u : 0u)); // token_embd
        for (std::size_t i = 0; i < model.size(); ++i) {
            const model_tensor& t = model[i].tensor;
            const std::uint32_t type = expected_type(model[i], f);
            if (type == t.type) {
                continue;
            }
            CAPTURE(t.name);
            const auto w = weights.find(t.name);
            const std::vector<float>* importance = weighted && w != weights.end() ? &w->second : nullptr;
            CHECK(c.tensors[i].with_importance == (importance != nullptr));
            const std::vector<std::byte> expected =
                qk::visit_format(*qk::find_gguf_type(type), [&]<class Block>(std::type_identity<Block>) { return reference_bytes<Block>(t, importance); });
            CHECK(to_vector(out.bytes(out.tensors()[i])) == expected);
            if (importance != nullptr) {
                // The weights change the bytes: a test that cannot tell them apart proves nothing.
                const std::vector<std::byte> unweighted = qk::visit_format(
                    *qk::find_gguf_type(type), [&]<class Block>(std::type_identity<Block>) { return reference_bytes<Block>(t, nullptr); });
                CHECK(to_vector(out.bytes(out.tensors()[i])) != unweighted);
            }
        }
    }

    // The legacy form gives the same bytes for the entries it holds.
    gguf::quantize_options a;
    a.type = qk::format::iq4_xs;
    a.importance = &from_gguf;
    gguf::quantize_options b = a;
    b.importance = &from_dat;
    const std::vector<std::byte> with_gguf = gguf::quantize(in, a).out.bytes();
    const std::vector<std::byte> with_dat = gguf::quantize(in, b).out.bytes();
    const gguf::file fa(with_gguf);
    const gguf::file fb(with_dat);
    CHECK(to_vector(fa.bytes("blk.0.attn_q.weight")) == to_vector(fb.bytes("blk.0.attn_q.weight")));
    CHECK(to_vector(fa.bytes("blk.0.ffn_down.weight")) == to_vector(fb.bytes("blk.0.ffn_down.weight")));
    CHECK(to_vector(fa.bytes("blk.0.ffn_up_exps.weight")) != to_vector(fb.bytes("blk.0.ffn_up_exps.weight"))); // no entry in the .dat

    SUBCASE("an entry of the wrong size is refused before anything is written")
    {
        write_imatrix_gguf(dir / "short.gguf", {{"blk.0.attn_q.weight", positive_sums(256, 23), {1.0f}}});
        const gguf::importance_matrix bad(dir / "short.gguf");
        gguf::quantize_options opt;
        opt.type = qk::format::iq4_xs;
        opt.importance = &bad;
        CHECK_THROWS_WITH_AS(static_cast<void>(gguf::quantize(in, opt)), doctest::Contains("has 256 weights for 'blk.0.attn_q.weight', which needs 512"),
                             qk::error);
    }
    SUBCASE("malformed importance files are qk::error")
    {
        write_imatrix_gguf(dir / "negative.gguf", {{"x.weight", positive_sums(32, 24), {-1.0f}}});
        CHECK_THROWS_WITH_AS(gguf::importance_matrix(dir / "negative.gguf"), doctest::Contains("counts must be finite and non-negative"), qk::error);
        write_imatrix_gguf(dir / "nan.gguf", {{"x.weight", std::vector<float>(32, std::nanf("")), {1.0f}}});
        CHECK_THROWS_AS(gguf::importance_matrix(dir / "nan.gguf"), qk::error);
        gguf::writer lonely;
        const std::vector<float> sums(32, 1.0f);
        lonely.add_tensor("x.weight.in_sum2", gguf::type_f32, std::vector<std::uint64_t>{32, 1}, std::as_bytes(std::span<const float>(sums)));
        lonely.write(dir / "lonely.gguf");
        CHECK_THROWS_WITH_AS(gguf::importance_matrix(dir / "lonely.gguf"), doctest::Contains("has no 'x.weight.counts' beside it"), qk::error);
        model_writer(model).write(dir / "not_imatrix.gguf");
        CHECK_THROWS_AS(gguf::importance_matrix(dir / "not_imatrix.gguf"), qk::error);
        // Every truncation of the legacy file: refused, never read past its end (ASan watches).
        std::ifstream dat(dir / "imatrix.dat", std::ios::binary);
        const std::vector<char> bytes((std::istreambuf_iterator<char>(dat)), std::istreambuf_iterator<char>());
        const std::size_t entries_end = bytes.size() - 4 - 4 - 15; // before the chunk count and dataset
        for (std::size_t n = 0; n < entries_end; n += (n < 64 ? 1 : 97)) {
            std::ofstream(dir / "cut.dat", std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(n));
            CHECK_THROWS_AS(gguf::importance_matrix(dir / "cut.dat"), qk::error);
        }
    }
}

TEST_CASE("gguf dequantize: qkern's formats, F16 and BF16 to F32 as the reference decodes them, the rest copied")
{
    const scratch dir;
    const std::vector<expectation> model = test_model();
    model_writer(model).write(dir / "model.gguf");
    const gguf::file in(dir / "model.gguf");
    qk::backend::cpu::thread_pool pool(2);

    for (const qk::format f : {qk::format::q8_0, qk::format::iq4_xs, qk::format::nvfp4}) {
        CAPTURE(qk::format_name(f));
        gguf::quantize_options q;
        q.type = f;
        gguf::quantize(in, q).out.write(dir / "quantized.gguf");
        const gguf::file quantized(dir / "quantized.gguf");
        gguf::dequantize_options d;
        d.run = pool_runner(pool);
        const gguf::model_conversion c = gguf::dequantize(quantized, d);
        c.out.write(dir / "f32.gguf");
        const gguf::file out(dir / "f32.gguf");
        check_metadata_kept(quantized, out);
        CHECK(out.get<std::uint32_t>("general.file_type") == gguf::file_type_of(f)); // Q4_0 is left, so the type stays
        for (std::size_t i = 0; i < model.size(); ++i) {
            const gguf::tensor_info& from = quantized.tensors()[i];
            const gguf::tensor_info& to = out.tensors()[i];
            CAPTURE(from.name);
            CHECK(to.shape == from.shape);
            if (from.type == 2) { // Q4_0: no kernels
                CHECK(to.type == 2u);
                CHECK(to_vector(out.bytes(to)) == to_vector(quantized.bytes(from)));
                CHECK_FALSE(c.tensors[i].note.empty());
                continue;
            }
            REQUIRE(to.type == gguf::type_f32);
            std::vector<float> expected;
            if (const auto format = qk::find_gguf_type(from.type)) {
                qk::visit_format(*format, [&]<class Block>(std::type_identity<Block>) {
                    const std::span<const std::byte> b = quantized.bytes(from);
                    std::vector<Block> blocks(b.size() / sizeof(Block));
                    std::memcpy(blocks.data(), b.data(), b.size());
                    expected.resize(blocks.size() * qk::format_traits<Block>::block_size);
                    qk::dequantize<Block>(blocks, expected);
                });
            } else {
                expected = model[i].tensor.values; // F32 kept, F16 and BF16 widened: exactly the model's values
            }
            CHECK(out.floats(to) == expected);
        }
    }

    // Without a type qkern cannot decode, the file says ALL_F32.
    std::vector<expectation> decodable = test_model();
    decodable.pop_back();
    model_writer(decodable).write(dir / "decodable.gguf");
    const gguf::file all(dir / "decodable.gguf");
    gguf::dequantize(all).out.write(dir / "all_f32.gguf");
    CHECK(gguf::file(dir / "all_f32.gguf").get<std::uint32_t>("general.file_type") == 0u);
}

TEST_CASE("gguf quantize: bad inputs are qk::error, and a failed write leaves no file")
{
    const scratch dir;
    std::vector<expectation> model = test_model();
    model_writer(model).write(dir / "model.gguf");
    const gguf::file in(dir / "model.gguf");

    gguf::quantize_options q8k;
    q8k.type = qk::format::q8_K;
    CHECK_THROWS_WITH_AS(static_cast<void>(gguf::quantize(in, q8k)), doctest::Contains("activation format"), qk::error);

    gguf::writer split = model_writer(model);
    split.set("split.count", std::uint16_t{3});
    split.write(dir / "split.gguf");
    const gguf::file part(dir / "split.gguf");
    CHECK_THROWS_WITH_AS(static_cast<void>(gguf::quantize(part, {})), doctest::Contains("one part of a split model"), qk::error);
    CHECK_THROWS_AS(static_cast<void>(gguf::dequantize(part)), qk::error);

    // The writer's and the reader's new entry points refuse what they cannot use.
    gguf::writer w;
    CHECK_THROWS_WITH_AS(w.add_tensor("x", gguf::type_f32, std::vector<std::uint64_t>{4}, gguf::tensor_source{}),
                         doctest::Contains("the source is empty"), qk::error);
    CHECK(w.tensor_count() == 0);
    std::vector<float> four(4);
    CHECK_THROWS_WITH_AS(in.floats(in.tensors()[1], 510, four), doctest::Contains("outside tensor 'blk.0.attn_norm.weight'"), qk::error);
    CHECK_THROWS_AS(gguf::importance_matrix(std::span<const std::byte>(), "empty"), qk::error);

    // A NaN in the third row of a weight: found while writing, named, and nothing left behind.
    model[2].tensor.values[2 * 512 + 17] = std::nanf("");
    model_writer(model).write(dir / "nan.gguf");
    const gguf::file with_nan(dir / "nan.gguf");
    std::ofstream(dir / "out.gguf") << "the old file";
    const std::size_t files = dir.files();
    for (const qk::format f : {qk::format::q8_0, qk::format::iq4_xs}) {
        gguf::quantize_options opt;
        opt.type = f;
        CHECK_THROWS_WITH_AS(gguf::quantize(with_nan, opt).out.write(dir / "out.gguf"), doctest::Contains("tensor 'blk.0.attn_q.weight' rows 0..8"),
                             qk::error);
        CHECK(dir.files() == files);
        std::ifstream old(dir / "out.gguf");
        std::string text;
        std::getline(old, text);
        CHECK(text == "the old file");
    }
}
