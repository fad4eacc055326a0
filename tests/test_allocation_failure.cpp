// Allocation failure at the public entry points: this executable replaces the global operator new
// so that the n-th allocation from a point on throws std::bad_alloc, and runs each call with
// n = 1, 2, ... until it allocates fewer than n times. Every run must either succeed or throw a
// qk::error saying memory ran out, and a run that throws must leave outputs and state as they were.
// Its own executable: the replaced operator new would slow every other suite. With
// QKERN_ALLOCATION_TRACE set, each failing allocation prints its stack (glibc's backtrace; link
// with -rdynamic for names): what finds the allocation behind a broken guarantee.
#include <doctest/doctest.h>

#include <qkern.hpp>

#include <execinfo.h>
#include <unistd.h>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "allocation_failure.hpp"
#include "inputs.hpp"

namespace {

using qk_allocation::allocations_left;
using qk_allocation::failed_one;

void* allocate(std::size_t size, std::size_t alignment)
{
    if (allocations_left.load(std::memory_order_relaxed) > 0 && allocations_left.fetch_sub(1) == 1) {
        failed_one = true;
        if (std::getenv("QKERN_ALLOCATION_TRACE") != nullptr) {
            void* frames[40];
            backtrace_symbols_fd(frames, backtrace(frames, 40), 2);
        }
        return nullptr;
    }
    size = size == 0 ? 1 : size;
    if (alignment <= alignof(std::max_align_t)) {
        return std::malloc(size);
    }
    return std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
}

void* allocate_or_throw(std::size_t size, std::size_t alignment)
{
    void* p = allocate(size, alignment);
    if (p == nullptr) {
        throw std::bad_alloc();
    }
    return p;
}

// Out of line, so that g++ does not see free() applied to what its callers got from operator new.
[[gnu::noinline]] void deallocate(void* p) noexcept { std::free(p); }

} // namespace

void* operator new(std::size_t size) { return allocate_or_throw(size, 0); }
void* operator new[](std::size_t size) { return allocate_or_throw(size, 0); }
void* operator new(std::size_t size, std::align_val_t a) { return allocate_or_throw(size, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t size, std::align_val_t a) { return allocate_or_throw(size, static_cast<std::size_t>(a)); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return allocate(size, 0); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return allocate(size, 0); }
void* operator new(std::size_t size, std::align_val_t a, const std::nothrow_t&) noexcept { return allocate(size, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t size, std::align_val_t a, const std::nothrow_t&) noexcept { return allocate(size, static_cast<std::size_t>(a)); }
void operator delete(void* p) noexcept { deallocate(p); }
void operator delete[](void* p) noexcept { deallocate(p); }
void operator delete(void* p, std::size_t) noexcept { deallocate(p); }
void operator delete[](void* p, std::size_t) noexcept { deallocate(p); }
void operator delete(void* p, std::align_val_t) noexcept { deallocate(p); }
void operator delete[](void* p, std::align_val_t) noexcept { deallocate(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { deallocate(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { deallocate(p); }

namespace {

namespace qs = qk::sampling;
using qk::backend::cpu::thread_pool;

using qk_allocation::every_allocation_failing;

std::vector<float> logits_of(std::size_t vocab, std::uint32_t seed)
{
    return qk_inputs::normal(vocab, 3.0f, seed);
}

// A chain used after a failed call must go on exactly as a copy made before the call: the next
// tokens are compared, which covers penalty windows, mirostat's mu and adaptive state. Both are
// reseeded first, as a failed select() may have drawn random numbers, as any select() does.
void same_future(qs::chain& a, qs::chain& b, std::size_t vocab)
{
    CHECK(a.describe() == b.describe());
    a.reseed(12345);
    b.reseed(12345);
    for (std::uint32_t step = 0; step < 6; ++step) {
        const std::vector<float> logits = logits_of(vocab, 900 + step);
        CHECK(a.sample(logits) == b.sample(logits));
    }
}

} // namespace

TEST_CASE("allocation failure: qk::sampling::chain parse, sample, select, accept")
{
    constexpr std::size_t vocab = 300;
    const char* texts[] = {
        "penalties(last_n=8,repeat=1.3,frequency=0.1,presence=0.2);dry(0.8,1.75,2,-1);top_k(40);top_p(0.9);min_p(0.05);temp(0.8);dist(7)",
        "penalties(-1,1.2);typical(0.9);xtc(0.5,0.1,3);top_n_sigma(2);mirostat_v2(5,0.1,9)",
        "logit_bias(3=1.5,7=-inf);temp_ext(0.8,0.3,1.2);adaptive_p(0.4,0.9,11)",
        "mirostat(5,0.1,100,5)",
    };
    for (const std::string text : texts) {
        CAPTURE(text);
        qs::chain parsed;
        every_allocation_failing(
            "qk::sampling::chain::parse", [] {}, [&] { parsed = qs::chain::parse(text); },
            [&](bool threw) {
                if (!threw) {
                    CHECK(parsed.describe() == qs::chain::parse(text).describe());
                }
            });

        for (const bool warm : {false, true}) {
            CAPTURE(warm);
            qs::chain c = qs::chain::parse(text);
            if (warm) {
                for (std::uint32_t step = 0; step < 5; ++step) {
                    (void)c.sample(logits_of(vocab, 10 + step));
                }
            }
            const std::vector<float> logits = logits_of(vocab, 77);
            qs::chain tried;
            qs::chain before;
            std::int32_t token = -1;
            every_allocation_failing(
                "qk::sampling::chain::sample",
                [&] {
                    tried = c;
                    before = c;
                },
                [&] { token = tried.sample(logits); },
                [&](bool threw) {
                    if (!threw) {
                        CHECK(token == before.sample(logits));
                    }
                    same_future(tried, before, vocab);
                });
            every_allocation_failing(
                "qk::sampling::chain::accept",
                [&] {
                    tried = c;
                    before = c;
                },
                [&] { tried.accept(5); },
                [&](bool threw) {
                    if (!threw) {
                        before.accept(5);
                    }
                    same_future(tried, before, vocab);
                });
            every_allocation_failing(
                "qk::sampling::chain::final_candidates",
                [&] {
                    tried = c;
                    (void)tried.select(logits);
                },
                [&] { (void)tried.final_candidates(); }, [](bool) {});
        }
    }
}

TEST_CASE("allocation failure: qk::sampling::sample_batch, one thread and a pool")
{
    constexpr std::size_t vocab = 200;
    constexpr std::size_t n_seq = 5;
    const std::vector<float> logits = logits_of(vocab * n_seq, 5);
    const qs::chain proto = qs::chain::parse("penalties(16,1.2);top_k(50);temp(0.9);dist(3)");
    std::vector<qs::chain> chains;
    std::vector<qs::chain> before;
    std::vector<std::int32_t> tokens(n_seq);
    const std::vector<std::int32_t> sentinel(n_seq, -7);
    thread_pool pool(3);
    for (const bool pooled : {false, true}) {
        CAPTURE(pooled);
        every_allocation_failing(
            "qk::sampling::sample_batch",
            [&] {
                chains.assign(n_seq, proto);
                before.assign(n_seq, proto);
                tokens = sentinel;
            },
            [&] {
                if (pooled) {
                    qs::sample_batch(pool, logits, n_seq, vocab, chains, {}, tokens);
                } else {
                    qs::sample_batch(logits, n_seq, vocab, chains, {}, tokens);
                }
            },
            [&](bool threw) {
                if (threw) {
                    CHECK(tokens == sentinel);
                    for (std::size_t s = 0; s < n_seq; ++s) {
                        same_future(chains[s], before[s], vocab);
                    }
                } else {
                    for (std::size_t s = 0; s < n_seq; ++s) {
                        CHECK(tokens[s] == before[s].sample(std::span(logits).subspan(s * vocab, vocab)));
                    }
                }
            });
    }
}

namespace {

// Outputs start as a value no kernel writes, so a write before the error shows.
constexpr float sentinel_value = -12345.5f;

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b)
{
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

template <class Block>
std::vector<Block> sentinel_blocks(std::size_t n)
{
    std::vector<Block> y(n);
    std::memset(static_cast<void*>(y.data()), 0xa5, n * sizeof(Block));
    return y;
}

} // namespace

TEST_CASE("allocation failure: qk::quantize with importance weights, on a pool, into a new vector")
{
    using block = qk::block_iq4_xs;
    constexpr std::size_t cols = 512;
    constexpr std::size_t rows = 6;
    const std::vector<float> x = qk_inputs::normal(rows * cols, 1.0f, 3);
    const std::vector<float> importance = qk_inputs::uniform(cols, 0.1f, 2.0f, 4);
    const std::size_t blocks = rows * cols / qk::format_traits<block>::block_size;
    std::vector<block> expected(blocks);
    qk::quantize<block>(x, std::span<block>(expected), importance);
    std::vector<block> plain(blocks);
    qk::quantize<block>(x, std::span<block>(plain));
    thread_pool pool(3);
    std::vector<block> y;
    const auto check = [&](const std::vector<block>& want) {
        return [&](bool threw) { CHECK(same_bytes(y, threw ? sentinel_blocks<block>(blocks) : want)); };
    };
    const auto reset = [&] { y = sentinel_blocks<block>(blocks); };
    CHECK(every_allocation_failing("qk::quantize", reset, [&] { qk::quantize<block>(x, std::span<block>(y), importance); }, check(expected)) > 0);
    CHECK(every_allocation_failing("qk::quantize", reset, [&] { qk::quantize<block>(x, std::span<block>(y), importance, pool); },
                                   check(expected)) > 0);
    every_allocation_failing("qk::quantize", reset, [&] { qk::quantize<block>(x, std::span<block>(y), pool); }, check(plain));
    std::vector<block> made;
    CHECK(every_allocation_failing("qk::quantize", [&] { made.clear(); }, [&] { made = qk::quantize<block>(x); },
                                   [&](bool threw) { CHECK(same_bytes(made, threw ? std::vector<block>() : plain)); }) > 0);
}

TEST_CASE_TEMPLATE("allocation failure: gemv and gemm without scratch, plain and packed rows, and the CPU context", Block, qk::block_q8_0,
                   qk::block_iq4_xs, qk::block_nvfp4)
{
    constexpr std::size_t rows = 40;
    constexpr std::size_t cols = 512;
    constexpr std::size_t columns = 3;
    const auto w = qk_inputs::random_blocks<Block>(rows * cols / qk::format_traits<Block>::block_size, 11);
    const std::vector<float> x = qk_inputs::normal(columns * cols, 1.0f, 12);
    thread_pool pool(3);
    std::vector<float> y;
    std::vector<float> want(columns * rows);
    const auto reset = [&] { y.assign(columns * rows, sentinel_value); };
    const auto check = [&](bool threw) { CHECK(same_bytes(y, threw ? std::vector<float>(columns * rows, sentinel_value) : want)); };

    qk::gemm<Block>(w, rows, cols, columns, x, want, pool);
    CHECK(every_allocation_failing("qk::gemm", reset, [&] { qk::gemm<Block>(w, rows, cols, columns, x, y, pool); }, check) > 0);
    std::vector<float> want_gemv(rows);
    qk::gemv<Block>(w, rows, cols, std::span(x).first(cols), want_gemv, pool);
    every_allocation_failing(
        "qk::gemv", [&] { y.assign(rows, sentinel_value); }, [&] { qk::gemv<Block>(w, rows, cols, std::span(x).first(cols), y, pool); },
        [&](bool threw) { CHECK(same_bytes(y, threw ? std::vector<float>(rows, sentinel_value) : want_gemv)); });

    const qk::packed_matrix<Block> reference(w, rows, cols);
    qk::gemm<Block>(reference, columns, x, want, pool);
    std::optional<qk::packed_matrix<Block>> packed;
    CHECK(every_allocation_failing("qk::packed_matrix", [&] { packed.reset(); }, [&] { packed.emplace(w, rows, cols); },
                                   [&](bool threw) {
                                       CHECK(packed.has_value() == !threw);
                                       if (packed) {
                                           std::vector<float> got(columns * rows);
                                           qk::gemm<Block>(*packed, columns, x, got, pool);
                                           CHECK(same_bytes(got, want));
                                       }
                                   }) > 0);
    std::vector<std::uint8_t> scratch;
    CHECK(every_allocation_failing(
              "qk::gemm", [&] { reset(), scratch = {}; }, [&] { qk::gemm<Block>(reference, columns, x, y, pool, scratch); }, check) > 0);

    // The context keeps its scratch between calls: after a failed one it must still compute right.
    qk::backend::cpu::context cpu(2);
    std::optional<qk::backend::cpu::matrix<Block>> uploaded;
    CHECK(every_allocation_failing("qk::backend::cpu::context::upload", [&] { uploaded.reset(); }, [&] { uploaded.emplace(cpu.upload<Block>(w, rows, cols)); },
                                   [&](bool threw) { CHECK(uploaded.has_value() == !threw); }) > 0);
    uploaded.emplace(cpu.upload<Block>(w, rows, cols));
    cpu.gemm(*uploaded, columns, x, want);
    every_allocation_failing("qk::backend::cpu::context::gemm", reset, [&] { cpu.gemm(*uploaded, columns, x, y); }, [&](bool threw) {
        check(threw);
        std::vector<float> again(columns * rows);
        cpu.gemm(*uploaded, columns, x, again);
        CHECK(same_bytes(again, want));
    });
}

TEST_CASE("allocation failure: qk::solve_tri in place, one thread and a pool; thread_pool's construction")
{
    constexpr std::int64_t n = 37;
    constexpr std::int64_t k = 45;
    constexpr std::int64_t batch = 3;
    std::vector<float> a = qk_inputs::normal(static_cast<std::size_t>(batch * n * n), 0.1f, 21);
    for (std::int64_t b = 0; b < batch; ++b) {
        for (std::int64_t i = 0; i < n; ++i) {
            a[static_cast<std::size_t>((b * n + i) * n + i)] = 2.0f; // well away from singular
        }
    }
    const std::vector<float> b0 = qk_inputs::normal(static_cast<std::size_t>(batch * n * k), 1.0f, 22);
    std::vector<float> want = b0;
    qk::solve_tri(a.data(), want.data(), want.data(), n, k, batch, {});
    thread_pool pool(3);
    std::vector<float> x;
    for (const bool pooled : {false, true}) {
        CAPTURE(pooled);
        // In place: the right-hand sides are the output, so a half-done solve would lose them.
        CHECK(every_allocation_failing(
                  "qk::solve_tri", [&] { x = b0; },
                  [&] {
                      if (pooled) {
                          qk::solve_tri(a.data(), x.data(), x.data(), n, k, batch, {}, pool);
                      } else {
                          qk::solve_tri(a.data(), x.data(), x.data(), n, k, batch, {});
                      }
                  },
                  [&](bool threw) { CHECK(same_bytes(x, threw ? b0 : want)); }) > 0);
    }

    std::optional<thread_pool> made;
    CHECK(every_allocation_failing("qk::backend::cpu::thread_pool", [&] { made.reset(); }, [&] { made.emplace(4); },
                                   [&](bool threw) {
                                       CHECK(made.has_value() == !threw);
                                       if (made) {
                                           std::atomic<int> ran{0};
                                           made->run(50, [&](std::size_t) { ++ran; });
                                           CHECK(ran == 50);
                                       }
                                   }) > 0);
}

namespace {

namespace gguf = qk::gguf;

// A small model: metadata of each kind, a weight matrix that quantizes, a vector that is copied.
gguf::writer small_model()
{
    gguf::writer w;
    w.set("general.architecture", "llama");
    w.set("general.name", "allocation test model with a name too long for the short-string buffer");
    w.set("llama.block_count", std::uint32_t{1});
    w.set("tokenizer.ggml.tokens", std::vector<std::string>{"<s>", "</s>", "a token long enough to be allocated on its own"});
    w.set("tokenizer.ggml.scores", std::vector<float>{0.0f, -1.0f, -2.5f});
    const std::vector<float> weight = qk_inputs::normal(64 * 512, 1.0f, 31);
    const std::vector<float> norm = qk_inputs::normal(512, 1.0f, 32);
    w.add_tensor("blk.0.attn_q.weight", gguf::type_f32, std::vector<std::uint64_t>{512, 64}, std::as_bytes(std::span(weight)));
    w.add_tensor("blk.0.attn_norm.weight", gguf::type_f32, std::vector<std::uint64_t>{512}, std::as_bytes(std::span(norm)));
    return w;
}

std::vector<std::byte> file_bytes(const std::filesystem::path& path)
{
    std::ifstream in(path, std::ios::binary);
    const std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto bytes = std::as_bytes(std::span(chars));
    return {bytes.begin(), bytes.end()};
}

} // namespace

TEST_CASE("allocation failure: qk::gguf reading, the writer's edits, writing, model quantization and importance matrices")
{
    const gguf::writer model = small_model();
    const std::vector<std::byte> bytes = model.bytes();

    std::optional<gguf::file> read;
    CHECK(every_allocation_failing("qk::gguf::file", [&] { read.reset(); }, [&] { read.emplace(std::span<const std::byte>(bytes)); },
                                   [&](bool threw) {
                                       CHECK(read.has_value() == !threw);
                                       if (read) {
                                           CHECK(read->metadata().size() == model.metadata().size());
                                           CHECK(read->tensors().size() == 2);
                                       }
                                   }) > 0);
    const gguf::file in{std::span<const std::byte>(bytes)};
    std::optional<std::vector<std::string>> tokens;
    CHECK(every_allocation_failing("qk::gguf::file::get", [&] { tokens.reset(); },
                                   [&] { tokens = in.get<std::vector<std::string>>("tokenizer.ggml.tokens"); },
                                   [&](bool threw) { CHECK(tokens.has_value() == !threw); }) > 0);

    // Every edit of a writer either happens or, on any error, leaves the file it writes unchanged.
    gguf::writer w;
    const auto edit = [&](const char* call, auto change) {
        const std::vector<std::byte> before = model.bytes();
        return every_allocation_failing(
            call, [&] { w = model; }, [&] { change(w); },
            [&](bool threw) {
                if (threw) {
                    CHECK(w.bytes() == before);
                    CHECK(w.alignment() == model.alignment());
                } else {
                    gguf::writer expected = model;
                    change(expected);
                    CHECK(w.bytes() == expected.bytes());
                    CHECK(w.alignment() == expected.alignment());
                }
            });
    };
    const std::vector<std::byte> payload(96, std::byte{7});
    CHECK(edit("qk::gguf::writer::set", [](gguf::writer& x) { x.set("a.new.key.long.enough.to.be.allocated", std::uint32_t{5}); }) > 0);
    CHECK(edit("qk::gguf::writer::set", [](gguf::writer& x) { x.set("general.alignment", std::uint32_t{64}); }) > 0);
    edit("qk::gguf::writer::set", [](gguf::writer& x) { x.set("general.name", "renamed, and long enough to allocate its string"); });
    CHECK(edit("qk::gguf::writer::set_all", [&](gguf::writer& x) { x.set_all(in.metadata()); }) > 0);
    CHECK(edit("qk::gguf::writer::erase", [](gguf::writer& x) { (void)x.erase("general.name"); }) > 0);
    // (Arguments the caller builds, the shape here, are made outside the call under test.)
    const std::vector<std::uint64_t> shape{24};
    CHECK(edit("qk::gguf::writer::add_tensor",
               [&](gguf::writer& x) { x.add_tensor("extra.tensor.with.a.long.name", gguf::type_f32, shape, payload); }) > 0);
    const gguf::tensor_source source = [](std::span<std::byte> out) { std::ranges::fill(out, std::byte{9}); };
    CHECK(edit("qk::gguf::writer::add_tensor", [&](gguf::writer& x) { x.add_tensor("extra.tensor.with.a.long.name", gguf::type_f32, shape, source); }) > 0);

    // write() and a model's quantization, written: the target keeps its old bytes on a throw,
    // and no temporary file is left beside it either way.
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("qkern_allocation_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const std::filesystem::path target = dir / "model.gguf";
    const std::string target_path = target.string();
    const std::vector<std::byte> old_bytes(100, std::byte{0x5a});
    const auto reset_target = [&] {
        std::ofstream out(target, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(old_bytes.data()), static_cast<std::streamsize>(old_bytes.size()));
    };
    const auto check_target = [&](const std::vector<std::byte>& written) {
        return [&, written](bool threw) {
            CHECK(file_bytes(target) == (threw ? old_bytes : written));
            CHECK(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()) == 1);
        };
    };
    CHECK(every_allocation_failing("qk::gguf::writer::write", reset_target, [&] { model.write(target_path); }, check_target(bytes)) > 0);

    thread_pool pool(2);
    gguf::quantize_options opt;
    opt.type = qk::format::iq4_xs;
    opt.run = [&pool](std::size_t tasks, const std::function<void(std::size_t)>& task) { pool.run(tasks, task); };
    const std::vector<std::byte> quantized = gguf::quantize(in, opt).out.bytes();
    CHECK(every_allocation_failing("qk::gguf::quantize", reset_target, [&] { gguf::quantize(in, opt).out.write(target_path); },
                                   check_target(quantized)) > 0);
    const gguf::file q{std::span<const std::byte>(quantized)};
    const std::vector<std::byte> dequantized = gguf::dequantize(q).out.bytes();
    CHECK(every_allocation_failing("qk::gguf::dequantize", reset_target, [&] { gguf::dequantize(q).out.write(target_path); },
                                   check_target(dequantized)) > 0);
    std::filesystem::remove_all(dir);

    // An importance matrix in llama-imatrix's GGUF form.
    gguf::writer imatrix;
    imatrix.set("general.type", "imatrix");
    imatrix.set("imatrix.datasets", std::vector<std::string>{"calibration.txt"});
    imatrix.set("imatrix.chunk_count", std::uint32_t{8});
    const std::vector<float> sums = qk_inputs::uniform(512, 0.5f, 4.0f, 33);
    const std::vector<float> counts{8.0f};
    imatrix.add_tensor("blk.0.attn_q.weight.in_sum2", gguf::type_f32, std::vector<std::uint64_t>{512, 1}, std::as_bytes(std::span(sums)));
    imatrix.add_tensor("blk.0.attn_q.weight.counts", gguf::type_f32, std::vector<std::uint64_t>{1, 1}, std::as_bytes(std::span(counts)));
    const std::vector<std::byte> imatrix_bytes = imatrix.bytes();
    std::optional<gguf::importance_matrix> weights;
    CHECK(every_allocation_failing("qk::gguf::importance_matrix", [&] { weights.reset(); },
                                   [&] { weights.emplace(std::span<const std::byte>(imatrix_bytes), "imatrix.gguf"); },
                                   [&](bool threw) {
                                       CHECK(weights.has_value() == !threw);
                                       if (weights) {
                                           REQUIRE(weights->find("blk.0.attn_q.weight") != nullptr);
                                           CHECK(weights->find("blk.0.attn_q.weight")->size() == 512);
                                       }
                                   }) > 0);
}
