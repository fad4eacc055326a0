// qk::gguf: the tensor type table against ggml's sizes written out here; a file assembled byte by
// byte in this test (independently of the writer) read field by field, and the writer's bytes for
// the same content equal to it; a round trip through a file on disk with metadata of every value
// type and tensors of several types (qkern's formats as blocks, F16/BF16 as floats, a type without
// kernels as bytes); every prefix of a file and hostile values in every header field rejected with
// qk::error; random corruption never crashing (ASan and UBSan watch in CI's sanitizer stage); and
// the writer's argument checks and its atomic write (a failed write leaves the target as it was).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#if defined(__linux__)
#include <csignal>
#include <sys/resource.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <sys/stat.h> // mkfifo
#endif

#include <gguf/gguf.hpp>
#include <kernels/error.hpp>
#include <kernels/formats.hpp>
#include <kernels/fp16.hpp>
#include <kernels/quantize.hpp>

namespace {

using bytes = std::vector<std::byte>;

// Little-endian fields appended by hand, recording where each one starts.
struct assembler {
    bytes out;
    template <class T>
    std::size_t number(T v)
    {
        const std::size_t at = out.size();
        const auto raw = std::bit_cast<std::array<std::byte, sizeof(T)>>(v);
        out.insert(out.end(), raw.begin(), raw.end());
        return at;
    }
    std::size_t string(std::string_view s)
    {
        const std::size_t at = number(std::uint64_t{s.size()});
        for (const char c : s) {
            out.push_back(static_cast<std::byte>(c));
        }
        return at;
    }
    void pad(std::size_t alignment)
    {
        while (out.size() % alignment != 0) {
            out.push_back(std::byte{0});
        }
    }
};

// A small file with a field of each kind, and where those fields lie.
struct hand_file {
    bytes data;
    std::size_t magic, version, tensor_count, kv_count;
    std::size_t key_length, value_type, string_length;       // "general.architecture" = "llama"
    std::size_t array_key_length, array_type, element_type, array_length; // "tokens.ids" = int32[3]
    std::size_t name_length, dims, dim0, dim1, tensor_type, offset;        // "w": f32 [8, 2]
    std::size_t name2_length, dims2, dim2_0, tensor_type2, offset2;        // "v": q8_0 [32]
    std::size_t data_offset;
};

hand_file assemble()
{
    assembler a;
    hand_file h{};
    h.magic = a.out.size();
    for (const char c : std::string_view("GGUF")) {
        a.out.push_back(static_cast<std::byte>(c));
    }
    h.version = a.number(std::uint32_t{3});
    h.tensor_count = a.number(std::uint64_t{2});
    h.kv_count = a.number(std::uint64_t{2});
    h.key_length = a.string("general.architecture");
    h.value_type = a.number(std::uint32_t{8});
    h.string_length = a.string("llama");
    h.array_key_length = a.string("tokens.ids");
    h.array_type = a.number(std::uint32_t{9});
    h.element_type = a.number(std::uint32_t{5});
    h.array_length = a.number(std::uint64_t{3});
    a.number(std::int32_t{-1});
    a.number(std::int32_t{7});
    a.number(std::int32_t{1 << 30});
    h.name_length = a.string("w");
    h.dims = a.number(std::uint32_t{2});
    h.dim0 = a.number(std::uint64_t{8});
    h.dim1 = a.number(std::uint64_t{2});
    h.tensor_type = a.number(std::uint32_t{0});
    h.offset = a.number(std::uint64_t{0});
    h.name2_length = a.string("v");
    h.dims2 = a.number(std::uint32_t{1});
    h.dim2_0 = a.number(std::uint64_t{32});
    h.tensor_type2 = a.number(std::uint32_t{8});
    h.offset2 = a.number(std::uint64_t{64}); // 16 floats = 64 bytes, already aligned to 32
    a.pad(32);
    h.data_offset = a.out.size();
    for (int i = 0; i < 16; ++i) {
        a.number(static_cast<float>(i) * 0.5f - 2.0f);
    }
    // One Q8_0 block: scale 1.0 (fp16 0x3c00), codes -16..15.
    a.number(std::uint16_t{0x3c00});
    for (int i = 0; i < 32; ++i) {
        a.out.push_back(static_cast<std::byte>(static_cast<std::int8_t>(i - 16)));
    }
    a.pad(32);
    h.data = a.out;
    return h;
}

template <class T>
bytes with(const bytes& b, std::size_t at, T v)
{
    bytes c = b;
    std::memcpy(c.data() + at, &v, sizeof v);
    return c;
}

bool parses(const bytes& b)
{
    try {
        const qk::gguf::file f(std::span<const std::byte>(b.data(), b.size()));
        static_cast<void>(f);
        return true;
    } catch (const qk::error&) {
        return false;
    }
}

// With QKERN_GGUF_SEEDS naming a directory, the valid files the tests build are also written there:
// the fuzz target's seed corpus (scripts/fuzz.sh gguf_file).
void save_seed(const std::string& name, std::span<const std::byte> file)
{
    const char* dir = std::getenv("QKERN_GGUF_SEEDS");
    if (dir == nullptr || *dir == '\0') {
        return;
    }
    std::FILE* out = std::fopen((std::filesystem::path(dir) / name).string().c_str(), "wb");
    REQUIRE(out != nullptr);
    REQUIRE(std::fwrite(file.data(), 1, file.size(), out) == file.size());
    REQUIRE(std::fclose(out) == 0);
}

std::filesystem::path scratch_directory()
{
    const auto dir = std::filesystem::temp_directory_path() / ("qkern_gguf_test_" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(dir);
    return dir;
}

} // namespace

TEST_CASE("gguf tensor types: ggml's ids and block geometry, and qkern's formats agree with them")
{
    using qk::gguf::find_tensor_type;
    // From ggml.h and ggml-common.h (d99724f), written out by hand.
    struct expected {
        std::uint32_t id;
        std::string_view name;
        std::uint32_t block, bytes;
    };
    for (const expected e : {expected{0, "f32", 1, 4}, expected{1, "f16", 1, 2}, expected{2, "q4_0", 32, 18}, expected{12, "q4_K", 256, 144},
                             expected{14, "q6_K", 256, 210}, expected{30, "bf16", 1, 2}, expected{34, "tq1_0", 256, 54},
                             expected{41, "q1_0", 128, 18}, expected{42, "q2_0", 64, 18}, expected{28, "f64", 1, 8}}) {
        CAPTURE(e.id);
        const auto* t = find_tensor_type(e.id);
        REQUIRE(t != nullptr);
        CHECK(t->name == e.name);
        CHECK(t->block_size == e.block);
        CHECK(t->block_bytes == e.bytes);
        CHECK(find_tensor_type(e.name) == t);
    }
    for (const std::uint32_t removed : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 43u, 0xffffffffu}) {
        CHECK(find_tensor_type(removed) == nullptr);
    }
    CHECK(find_tensor_type("IQ4_XS") == find_tensor_type(23u));
    CHECK(find_tensor_type("q4_k") == find_tensor_type(12u));
    CHECK(find_tensor_type("q9_0") == nullptr);
    qk::block_formats::for_each([]<class Block>(std::type_identity<Block>) {
        const auto* t = find_tensor_type(qk::format_traits<Block>::gguf_type);
        REQUIRE(t != nullptr);
        CHECK(t->block_size == qk::format_traits<Block>::block_size);
        CHECK(t->block_bytes == sizeof(Block));
        CHECK(qk::gguf::kernel_format(t->id).has_value());
    });
    CHECK(!qk::gguf::kernel_format(12).has_value());
}

TEST_CASE("gguf bytes_of: whole blocks only, and no size beyond 2^63 - 1")
{
    const auto& q8 = *qk::gguf::find_tensor_type(8u);
    const auto& f32 = *qk::gguf::find_tensor_type(0u);
    const std::uint64_t s1[] = {64, 3};
    CHECK(qk::gguf::bytes_of(q8, s1) == 2 * 34 * 3);
    const std::uint64_t s2[] = {48};
    CHECK(!qk::gguf::bytes_of(q8, s2).has_value());
    const std::uint64_t s3[] = {std::uint64_t{1} << 61, 4};
    CHECK(!qk::gguf::bytes_of(f32, s3).has_value()); // 2^61 * 4 bytes * 4 rows
    const std::uint64_t s4[] = {std::uint64_t{1} << 60, 1, 1, 1};
    CHECK(qk::gguf::bytes_of(f32, s4) == std::uint64_t{1} << 62);
    const std::uint64_t s5[] = {4, 0, 7};
    CHECK(qk::gguf::bytes_of(f32, s5) == 0u);
}

TEST_CASE("gguf file: a file assembled by hand, read field by field; the writer writes the same bytes")
{
    const hand_file h = assemble();
    save_seed("hand.gguf", h.data);
    const qk::gguf::file f(std::span<const std::byte>(h.data.data(), h.data.size()));
    CHECK(f.version() == 3u);
    CHECK(f.alignment() == 32u);
    CHECK(f.data_offset() == h.data_offset);
    REQUIRE(f.metadata().size() == 2u);
    CHECK(f.metadata()[0].key == "general.architecture");
    CHECK(f.get<std::string>("general.architecture") == "llama");
    CHECK(f.get<std::vector<std::int32_t>>("tokens.ids") == std::vector<std::int32_t>{-1, 7, 1 << 30});
    CHECK(!f.get<std::string>("general.name").has_value());
    CHECK_THROWS_AS(static_cast<void>(f.get<std::uint32_t>("general.architecture")), qk::error);
    CHECK_THROWS_AS(static_cast<void>(f.get<std::vector<std::uint32_t>>("tokens.ids")), qk::error);
    CHECK(f.find("tokens.ids")->type_name() == "array of int32");

    REQUIRE(f.tensors().size() == 2u);
    const qk::gguf::tensor_info& w = f.tensor("w");
    CHECK(w.type == 0u);
    CHECK(w.shape == std::vector<std::uint64_t>{8, 2});
    CHECK(w.bytes == 64u);
    CHECK(w.offset == 0u);
    CHECK(w.rows() == 2u);
    const std::vector<float> values = f.floats("w");
    REQUIRE(values.size() == 16u);
    for (int i = 0; i < 16; ++i) {
        CHECK(values[static_cast<std::size_t>(i)] == static_cast<float>(i) * 0.5f - 2.0f);
    }
    const std::span<const qk::block_q8_0> v = f.blocks<qk::block_q8_0>("v");
    REQUIRE(v.size() == 1u);
    CHECK(v[0].d == 0x3c00);
    CHECK(v[0].qs[0] == -16);
    CHECK(v[0].qs[31] == 15);
    CHECK_THROWS_AS(static_cast<void>(f.blocks<qk::block_q8_0>("w")), qk::error);      // f32, not Q8_0
    CHECK_THROWS_AS(static_cast<void>(f.blocks<qk::block_mxfp4>("v")), qk::error);     // Q8_0, not MXFP4
    CHECK_THROWS_AS(static_cast<void>(f.floats("v")), qk::error);
    CHECK_THROWS_AS(static_cast<void>(f.tensor("missing")), qk::error);
    CHECK(f.bytes("v").size() == 34u);
    CHECK(f.bytes("v").data() == h.data.data() + h.data_offset + 64);

    qk::gguf::writer out;
    out.set("general.architecture", "llama");
    out.set("tokens.ids", std::vector<std::int32_t>{-1, 7, 1 << 30});
    const std::uint64_t w_shape[] = {8, 2};
    const std::uint64_t v_shape[] = {32};
    out.add_tensor("w", 0, w_shape, f.bytes("w"));
    out.add_tensor<qk::block_q8_0>("v", v_shape, v);
    CHECK(out.bytes() == h.data);
}

TEST_CASE("gguf round trip on disk: every value type, arrays of each, tensors of several types and shapes")
{
    const auto dir = scratch_directory();
    std::mt19937_64 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const std::uint32_t alignment : {32u, 64u, 1u}) {
        CAPTURE(alignment);
        qk::gguf::writer out;
        if (alignment != 32) {
            out.set("general.alignment", alignment);
        }
        out.set("u8", std::uint8_t{200});
        out.set("i8", std::int8_t{-100});
        out.set("u16", std::uint16_t{60000});
        out.set("i16", std::int16_t{-30000});
        out.set("u32", std::uint32_t{4000000000u});
        out.set("i32", std::int32_t{-2000000000});
        out.set("f32", 1.5f);
        out.set("bool", true);
        out.set("string", std::string("qkern \xc3\xa9 \0 x", 12));
        out.set("u64", std::uint64_t{1} << 63);
        out.set("i64", std::int64_t{-1} << 62);
        out.set("f64", 0.1);
        out.set("a.u8", std::vector<std::uint8_t>{0, 255});
        out.set("a.i8", std::vector<std::int8_t>{-128, 127});
        out.set("a.u16", std::vector<std::uint16_t>{1, 65535});
        out.set("a.i16", std::vector<std::int16_t>{-32768});
        out.set("a.u32", std::vector<std::uint32_t>{});
        out.set("a.i32", std::vector<std::int32_t>{1, -2, 3});
        out.set("a.f32", std::vector<float>{0.25f, -0.0f});
        out.set("a.bool", std::vector<bool>{true, false, true});
        out.set("a.string", std::vector<std::string>{"a", "", "tokens"});
        out.set("a.u64", std::vector<std::uint64_t>{~std::uint64_t{0}});
        out.set("a.i64", std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min()});
        out.set("a.f64", std::vector<double>{1e300, -2.5});
        out.set("u32", std::uint32_t{7}); // replaced, in place

        // Tensors: F32 [5 3], F16 [6], BF16 [2 2 2 2], Q8_0 [64 3], IQ4_XS [256 2], NVFP4 [128], Q4_K raw [256].
        std::vector<float> x(256 * 2);
        for (float& e : x) {
            e = normal(rng);
        }
        const std::uint64_t f32_shape[] = {5, 3};
        out.add_tensor("f32", 0, f32_shape, std::as_bytes(std::span(x).first(15)));
        std::vector<std::uint16_t> halves(6);
        std::vector<std::uint16_t> bf16(16);
        for (std::size_t i = 0; i < halves.size(); ++i) {
            halves[i] = qk::fp32_to_fp16(static_cast<float>(i) - 2.5f);
        }
        for (std::size_t i = 0; i < bf16.size(); ++i) {
            bf16[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(x[i]) >> 16);
        }
        const std::uint64_t f16_shape[] = {6};
        const std::uint64_t bf16_shape[] = {2, 2, 2, 2};
        out.add_tensor("f16", qk::gguf::type_f16, f16_shape, std::as_bytes(std::span(halves)));
        out.add_tensor("bf16", qk::gguf::type_bf16, bf16_shape, std::as_bytes(std::span(bf16)));
        std::vector<qk::block_q8_0> q8(6);
        qk::quantize<qk::block_q8_0>(std::span(x).first(192), q8);
        std::vector<qk::block_iq4_xs> iq4(2);
        qk::quantize<qk::block_iq4_xs>(std::span(x).first(512), iq4);
        std::vector<qk::block_nvfp4> nv(2);
        qk::quantize<qk::block_nvfp4>(std::span(x).first(128), nv);
        const std::uint64_t q8_shape[] = {64, 3};
        const std::uint64_t iq4_shape[] = {256, 2};
        const std::uint64_t nv_shape[] = {128};
        out.add_tensor<qk::block_q8_0>("blk.0.q8_0", q8_shape, q8);
        out.add_tensor<qk::block_iq4_xs>("blk.0.iq4_xs", iq4_shape, iq4);
        out.add_tensor<qk::block_nvfp4>("blk.0.nvfp4", nv_shape, nv);
        std::vector<std::byte> q4k(144);
        for (std::size_t i = 0; i < q4k.size(); ++i) {
            q4k[i] = static_cast<std::byte>(i * 7);
        }
        const std::uint64_t q4k_shape[] = {256};
        out.add_tensor("q4_k", 12, q4k_shape, q4k);

        const auto path = (dir / ("round_trip_" + std::to_string(alignment) + ".gguf")).string();
        out.write(path);
        save_seed("round_trip_" + std::to_string(alignment) + ".gguf", out.bytes());
        const qk::gguf::file f(path);
        CHECK(f.alignment() == alignment);
        CHECK(f.size() == std::filesystem::file_size(path));
        REQUIRE(f.metadata().size() == out.metadata().size());
        for (std::size_t i = 0; i < out.metadata().size(); ++i) {
            CAPTURE(out.metadata()[i].key);
            CHECK(f.metadata()[i].key == out.metadata()[i].key);
            CHECK(f.metadata()[i].value == out.metadata()[i].value);
        }
        CHECK(f.get<std::uint32_t>("u32") == 7u);
        CHECK(f.get<std::string>("string")->size() == 12u);
        CHECK(f.get<std::vector<bool>>("a.bool") == std::vector<bool>{true, false, true});
        CHECK(f.get<std::vector<std::string>>("a.string") == std::vector<std::string>{"a", "", "tokens"});
        CHECK(f.get<double>("f64") == 0.1);
        CHECK(f.get<bool>("bool") == true);

        REQUIRE(f.tensors().size() == 7u);
        for (const qk::gguf::tensor_info& t : f.tensors()) {
            CHECK((f.data_offset() + t.offset) % alignment == 0u);
        }
        const std::vector<float> f32 = f.floats("f32");
        CHECK(std::equal(f32.begin(), f32.end(), x.begin()));
        const std::vector<float> f16 = f.floats("f16");
        for (std::size_t i = 0; i < f16.size(); ++i) {
            CHECK(f16[i] == static_cast<float>(i) - 2.5f);
        }
        const std::vector<float> b16 = f.floats("bf16");
        REQUIRE(b16.size() == 16u);
        for (std::size_t i = 0; i < b16.size(); ++i) {
            CHECK(b16[i] == std::bit_cast<float>(std::bit_cast<std::uint32_t>(x[i]) & 0xffff0000u));
        }
        CHECK(f.tensor("bf16").shape == std::vector<std::uint64_t>{2, 2, 2, 2});
        // Blocks as spans when their bytes are aligned for the block type in memory; a file aligned
        // to 1 byte may not give that, and then blocks() refuses.
        const auto check_blocks = [&]<class Block>(const char* name, const std::vector<Block>& expected) {
            CAPTURE(name);
            const std::uint64_t at = f.data_offset() + f.tensor(name).offset;
            if (at % alignof(Block) != 0) {
                CHECK(alignment == 1u);
                CHECK_THROWS_AS(static_cast<void>(f.blocks<Block>(name)), qk::error);
            } else {
                CHECK(std::ranges::equal(std::as_bytes(f.blocks<Block>(name)), std::as_bytes(std::span(expected))));
            }
            CHECK(std::ranges::equal(f.bytes(name), std::as_bytes(std::span(expected))));
        };
        check_blocks("blk.0.q8_0", q8);
        check_blocks("blk.0.iq4_xs", iq4);
        check_blocks("blk.0.nvfp4", nv);
        CHECK(f.tensor("blk.0.q8_0").rows() == 3u);
        CHECK(std::ranges::equal(f.bytes("q4_k"), q4k));
        CHECK(f.tensor("q4_k").type_info().name == "q4_K");
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("gguf file: every truncation and hostile values in every header field are qk::error")
{
    const hand_file h = assemble();
    REQUIRE(parses(h.data));
    // Every prefix shorter than the end of the last tensor's data is refused; the padding after it
    // is not needed.
    const std::size_t needed = h.data_offset + 64 + 34;
    for (std::size_t n = 0; n < h.data.size(); ++n) {
        CAPTURE(n);
        CHECK(parses(bytes(h.data.begin(), h.data.begin() + static_cast<std::ptrdiff_t>(n))) == (n >= needed));
    }

    const std::uint64_t huge = std::uint64_t{1} << 62;
    const std::uint64_t all = ~std::uint64_t{0};
    struct mutation {
        const char* field;
        bytes data;
    };
    std::vector<mutation> hostile = {
        {"magic", with(h.data, h.magic, std::uint32_t{0x46554746})},
        {"version 0", with(h.data, h.version, std::uint32_t{0})},
        {"version 1", with(h.data, h.version, std::uint32_t{1})},
        {"version 4", with(h.data, h.version, std::uint32_t{4})},
        {"big-endian version", with(h.data, h.version, std::uint32_t{0x03000000})},
        {"tensor count huge", with(h.data, h.tensor_count, huge)},
        {"tensor count all ones", with(h.data, h.tensor_count, all)},
        {"metadata count huge", with(h.data, h.kv_count, huge)},
        {"metadata count all ones", with(h.data, h.kv_count, all)},
        {"key length past the end", with(h.data, h.key_length, std::uint64_t{h.data.size()})},
        {"key length all ones", with(h.data, h.key_length, all)},
        {"key length 0", with(h.data, h.key_length, std::uint64_t{0})},
        {"value type 13", with(h.data, h.value_type, std::uint32_t{13})},
        {"value type all ones", with(h.data, h.value_type, std::uint32_t{0xffffffff})},
        {"string length past the end", with(h.data, h.string_length, std::uint64_t{h.data.size()})},
        {"string length all ones", with(h.data, h.string_length, all)},
        {"array of arrays", with(h.data, h.element_type, std::uint32_t{9})},
        {"array element type 13", with(h.data, h.element_type, std::uint32_t{13})},
        {"array length huge", with(h.data, h.array_length, huge)},
        {"array length all ones", with(h.data, h.array_length, all)},
        {"tensor name length 64", with(h.data, h.name_length, std::uint64_t{64})},
        {"tensor name empty", with(h.data, h.name_length, std::uint64_t{0})},
        {"tensor name length all ones", with(h.data, h.name_length, all)},
        {"dimensions 0", with(h.data, h.dims, std::uint32_t{0})},
        {"dimensions 5", with(h.data, h.dims, std::uint32_t{5})},
        {"dimensions all ones", with(h.data, h.dims, std::uint32_t{0xffffffff})},
        {"dimension 2^63", with(h.data, h.dim0, std::uint64_t{1} << 63)},
        {"dimension all ones", with(h.data, h.dim1, all)},
        {"elements past 2^63", with(with(h.data, h.dim0, std::uint64_t{1} << 32), h.dim1, std::uint64_t{1} << 31)},
        {"rows past the end", with(h.data, h.dim1, std::uint64_t{3})},
        {"row not whole blocks", with(h.data, h.dim2_0, std::uint64_t{48})},
        {"tensor type removed", with(h.data, h.tensor_type, std::uint32_t{4})},
        {"tensor type 43", with(h.data, h.tensor_type2, std::uint32_t{43})},
        {"tensor type all ones", with(h.data, h.tensor_type, std::uint32_t{0xffffffff})},
        {"offset unaligned", with(h.data, h.offset, std::uint64_t{1})},
        {"offset past the end", with(h.data, h.offset2, std::uint64_t{128})},
        {"offset huge", with(h.data, h.offset, huge)},
        {"offset all ones, aligned", with(h.data, h.offset2, all & ~std::uint64_t{31})},
        {"tensors overlapping", with(h.data, h.offset2, std::uint64_t{32})},
        {"same name twice", with(h.data, h.name2_length + 8, std::byte{'w'})},
    };
    for (const mutation& m : hostile) {
        CAPTURE(m.field);
        CHECK(!parses(m.data));
    }
    // The alignment key: not uint32, not a power of two, or so large that the data section would
    // start past the end.
    struct alignment_case {
        const char* field;
        qk::gguf::value value;
    };
    for (const alignment_case& c : {alignment_case{"uint64", {qk::gguf::scalar(std::uint64_t{32})}},
                                    alignment_case{"3", {qk::gguf::scalar(std::uint32_t{3})}},
                                    alignment_case{"0", {qk::gguf::scalar(std::uint32_t{0})}},
                                    alignment_case{"2^31", {qk::gguf::scalar(std::uint32_t{1u << 31})}}}) {
        CAPTURE(c.field);
        const qk::gguf::value& value = c.value;
        assembler a;
        a.out = {std::byte{'G'}, std::byte{'G'}, std::byte{'U'}, std::byte{'F'}};
        a.number(std::uint32_t{3});
        a.number(std::uint64_t{1});
        a.number(std::uint64_t{1});
        a.string("general.alignment");
        a.number(static_cast<std::uint32_t>(value.type()));
        if (value.type() == qk::gguf::value_type::uint64) {
            a.number(std::uint64_t{32});
        } else {
            a.number(std::get<std::uint32_t>(std::get<qk::gguf::scalar>(value.data)));
        }
        a.string("t");
        a.number(std::uint32_t{1});
        a.number(std::uint64_t{4});
        a.number(std::uint32_t{0});
        a.number(std::uint64_t{0});
        a.pad(64);
        for (int i = 0; i < 4; ++i) {
            a.number(1.0f);
        }
        CHECK(!parses(a.out));
    }
    // The same key twice.
    {
        assembler a;
        a.out = {std::byte{'G'}, std::byte{'G'}, std::byte{'U'}, std::byte{'F'}};
        a.number(std::uint32_t{3});
        a.number(std::uint64_t{0});
        a.number(std::uint64_t{2});
        for (int i = 0; i < 2; ++i) {
            a.string("general.name");
            a.number(std::uint32_t{8});
            a.string(i == 0 ? "a" : "b");
        }
        CHECK(!parses(a.out));
        a.out[a.out.size() - 9 - 4 - 8 - 12 + 8] = std::byte{'N'}; // the second key becomes "Neneral.name"
        CHECK(parses(a.out));
    }
    // A bool that is neither 0 nor 1.
    {
        assembler a;
        a.out = {std::byte{'G'}, std::byte{'G'}, std::byte{'U'}, std::byte{'F'}};
        a.number(std::uint32_t{3});
        a.number(std::uint64_t{0});
        a.number(std::uint64_t{1});
        a.string("flag");
        a.number(std::uint32_t{7});
        a.number(std::uint8_t{2});
        CHECK(!parses(a.out));
        a.out.back() = std::byte{1};
        CHECK(parses(a.out));
    }
}

TEST_CASE("gguf file: random corruption is refused or read, never read outside the file")
{
    const hand_file h = assemble();
    std::mt19937_64 rng(11);
    std::size_t refused = 0;
    for (int trial = 0; trial < 20000; ++trial) {
        bytes b = h.data;
        const int flips = 1 + static_cast<int>(rng() % 3);
        for (int k = 0; k < flips; ++k) {
            const std::size_t at = rng() % h.data_offset; // the header, metadata and tensor infos
            b[at] = static_cast<std::byte>(rng());
        }
        if (rng() % 4 == 0) {
            b.resize(rng() % (b.size() + 1));
        }
        if (!parses(b)) {
            ++refused;
            continue;
        }
        // What was read must lie inside the file.
        const qk::gguf::file f(std::span<const std::byte>(b.data(), b.size()));
        for (const qk::gguf::tensor_info& t : f.tensors()) {
            const std::span<const std::byte> s = f.bytes(t);
            CHECK(s.data() >= b.data());
            CHECK(s.data() + s.size() <= b.data() + b.size());
        }
    }
    CHECK(refused > 10000u);
}

TEST_CASE("gguf file: files that are not there, or not GGUF")
{
    const auto dir = scratch_directory();
    CHECK_THROWS_AS(qk::gguf::file((dir / "missing.gguf").string()), qk::error);
    CHECK_THROWS_AS(qk::gguf::file(dir.string()), qk::error); // a directory
    const auto empty = (dir / "empty.gguf").string();
    std::fclose(std::fopen(empty.c_str(), "wb"));
    CHECK_THROWS_AS(qk::gguf::file{empty}, qk::error);
    std::filesystem::remove_all(dir);
}

TEST_CASE("gguf writer: bad arguments are qk::error and change nothing")
{
    qk::gguf::writer out;
    const std::uint64_t shape[] = {32};
    const std::vector<std::byte> q8(34);
    CHECK_THROWS_AS(out.set("", 1.0f), qk::error);
    CHECK_THROWS_AS(out.set("general.alignment", std::uint64_t{32}), qk::error);
    CHECK_THROWS_AS(out.set("general.alignment", std::uint32_t{48}), qk::error);
    CHECK_THROWS_AS(out.set("general.alignment", std::uint32_t{0}), qk::error);
    CHECK(out.metadata().empty());
    CHECK(out.alignment() == 32u);
    out.add_tensor("w", 8, shape, q8);
    CHECK_THROWS_AS(out.add_tensor("w", 8, shape, q8), qk::error);                         // the same name
    CHECK_THROWS_AS(out.add_tensor("", 8, shape, q8), qk::error);                          // no name
    CHECK_THROWS_AS(out.add_tensor(std::string(64, 'n'), 8, shape, q8), qk::error);        // 64 bytes
    CHECK_THROWS_AS(out.add_tensor("x", 4, shape, q8), qk::error);                         // a removed type
    CHECK_THROWS_AS(out.add_tensor("x", 8, std::span<const std::uint64_t>{}, q8), qk::error); // no dimensions
    const std::uint64_t five[] = {32, 1, 1, 1, 1};
    CHECK_THROWS_AS(out.add_tensor("x", 8, five, q8), qk::error);
    const std::uint64_t ragged[] = {48};
    CHECK_THROWS_AS(out.add_tensor("x", 8, ragged, q8), qk::error);
    const std::uint64_t two_rows[] = {32, 2};
    CHECK_THROWS_AS(out.add_tensor("x", 8, two_rows, q8), qk::error); // 68 bytes expected
    CHECK(out.tensor_count() == 1u);
    out.add_tensor(std::string(63, 'n'), 8, shape, q8);
    CHECK(out.tensor_count() == 2u);
    out.set("general.alignment", std::uint32_t{64});
    CHECK(out.alignment() == 64u);
    CHECK(out.erase("general.alignment"));
    CHECK(out.alignment() == 32u);
    CHECK(!out.erase("general.alignment"));

    // Without tensors there is no data section to align: a large alignment pads nothing.
    qk::gguf::writer empty;
    empty.set("general.alignment", std::uint32_t{1} << 29);
    const std::vector<std::byte> b = empty.bytes();
    CHECK(b.size() == 4u + 4 + 8 + 8 + 8 + 17 + 4 + 4);
    const qk::gguf::file f(std::span<const std::byte>(b.data(), b.size()));
    CHECK(f.alignment() == 1u << 29);
    CHECK(f.tensors().empty());
}

TEST_CASE("gguf writer: write() replaces the target whole or not at all")
{
    const auto dir = scratch_directory();
    const auto path = (dir / "model.gguf").string();
    qk::gguf::writer small;
    small.set("general.name", "small");
    small.write(path);
    const auto first = std::filesystem::file_size(path);
    CHECK(qk::gguf::file(path).get<std::string>("general.name") == "small");

    qk::gguf::writer big;
    big.set("general.name", "big");
    std::vector<std::byte> payload(1 << 20, std::byte{0x5a});
    const std::uint64_t shape[] = {std::uint64_t{1} << 20};
    big.add_tensor("payload", 24, shape, payload); // i8
    CHECK_THROWS_AS(big.write((dir / "no" / "such" / "dir.gguf").string()), qk::error);
#if defined(__linux__)
    // A file-size limit makes the write fail part way: the target keeps its old contents and no
    // temporary file stays behind.
    rlimit old{};
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    const auto previous = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limited = old;
    limited.rlim_cur = 64 * 1024;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &limited) == 0);
    CHECK_THROWS_AS(big.write(path), qk::error);
    REQUIRE(setrlimit(RLIMIT_FSIZE, &old) == 0);
    std::signal(SIGXFSZ, previous);
    CHECK(std::filesystem::file_size(path) == first);
    CHECK(qk::gguf::file(path).get<std::string>("general.name") == "small");
#endif
    std::size_t files = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) {
        ++files;
    }
    CHECK(files == 1u);
    big.write(path);
    CHECK(qk::gguf::file(path).get<std::string>("general.name") == "big");
    CHECK(qk::gguf::file(path).bytes("payload").size() == payload.size());
    std::filesystem::remove_all(dir);
}

TEST_CASE("gguf writer: write() refuses a target that is not a regular file, before writing anything")
{
    // The rename would put a regular file in the place of a device or a pipe (as root, of
    // /dev/full) instead of writing to it.
    const auto dir = scratch_directory();
    qk::gguf::writer w;
    w.set("general.name", "refused");
    const auto sub = dir / "a directory";
    std::filesystem::create_directory(sub);
    CHECK_THROWS_WITH_AS(w.write(sub.string()), doctest::Contains("is not a regular file"), qk::error);
    CHECK(std::filesystem::is_directory(sub));
    std::size_t expected_files = 1;
#if defined(__unix__) || defined(__APPLE__)
    const auto fifo = dir / "fifo";
    REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_THROWS_WITH_AS(w.write(fifo.string()), doctest::Contains("is not a regular file"), qk::error);
    CHECK(std::filesystem::is_fifo(fifo));
    // Through a link too: the link's target is what would be replaced.
    const auto link = dir / "link";
    std::filesystem::create_symlink(fifo, link);
    CHECK_THROWS_WITH_AS(w.write(link.string()), doctest::Contains("is not a regular file"), qk::error);
    expected_files = 3;
#endif
    std::size_t files = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) {
        ++files;
    }
    CHECK(files == expected_files); // no temporary file left
    std::filesystem::remove_all(dir);
}
