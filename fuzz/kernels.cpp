// libFuzzer target: the public kernel entry points (quantize, dequantize, dot, gemv/gemm, packed
// gemm, solve_tri) fed fuzzed shapes, sizes and values. The contract, not just "no crash": a call
// succeeds or throws qk::error, leaves its outputs untouched when it throws (and past its spans
// always), throws exactly when its documented checks say so, and a success satisfies identities
// the headers promise (every tag quantizes to the generic bytes; gemv/gemm equal a loop of qk::dot;
// packed gemm equals the generic dot; pools equal one thread; solve_tri never reads A's other
// triangle). Built and run by scripts/fuzz.sh (clang, ASan and UBSan).
//
// Input: 16 header bytes (h[0] the entry point, h[1] format, tag and pool, h[2] value mode and
// options, then sizes and codes that make them wrong on purpose), then a payload that floats (raw
// bits, or finite, or small values) and raw block bytes are read from, cyclically.
#include <backends/cpu/gemv.hpp>
#include <backends/cpu/packed_gemm.hpp>
#include <backends/cpu/quantize.hpp>
#include <backends/cpu/solve_tri.hpp>
#include <backends/cpu/thread_pool.hpp>
#include <kernels/dot.hpp>
#include <kernels/packed.hpp>
#include <kernels/quantize.hpp>
#include <kernels/solve_tri.hpp>
#include <kernels/tensor_view.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "contract.hpp"

namespace {

using qk::backend::cpu::thread_pool;

constexpr std::size_t header_bytes = 16;
constexpr std::byte sentinel{0xa5};
// Elements past every span: a write beyond what the call was given shows there (ASan sees only
// writes past the allocation).
constexpr std::size_t slack = 3;
constexpr std::size_t size_max = std::numeric_limits<std::size_t>::max();

using qk_fuzz::attempt;
using qk_fuzz::current_call;
using qk_fuzz::current_input;
using qk_fuzz::report;
using qk_fuzz::require;

// Either outcome is allowed unless the documented checks decide it.
enum class expect { success, failure, either };

void require_outcome(bool ok, expect e)
{
    require(!(ok && e == expect::failure), "accepted arguments its checks must refuse");
    require(ok || e != expect::success, "refused valid arguments");
}

template <class T>
std::span<std::byte> bytes_of(std::vector<T>& v)
{
    return std::as_writable_bytes(std::span<T>(v));
}

template <class T>
std::vector<T> sentinel_filled(std::size_t n)
{
    std::vector<T> v(n);
    std::ranges::fill(bytes_of(v), sentinel);
    return v;
}

template <class T>
bool untouched(const std::vector<T>& v, std::size_t from = 0)
{
    const auto b = std::as_bytes(std::span<const T>(v).subspan(from));
    return std::ranges::all_of(b, [](std::byte x) { return x == sentinel; });
}

bool same_bits(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b)
{
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// The payload, read cyclically so that short inputs still fill any size.
struct payload {
    std::span<const std::uint8_t> bytes;

    [[nodiscard]] std::uint8_t at(std::size_t i) const { return bytes.empty() ? 0 : bytes[i % bytes.size()]; }

    // mode 0: raw bits (NaN, infinity, subnormals); 1: the same made finite; 2: small multiples
    // of 1/16 (zeros included); 3: such values times a power of two from 2^-128 to 2^127.
    [[nodiscard]] std::vector<float> floats(std::size_t n, std::size_t offset, unsigned mode) const
    {
        std::vector<float> v(n);
        for (std::size_t i = 0; i < n; ++i) {
            const std::size_t o = offset + 4 * i;
            std::uint32_t bits = at(o) | std::uint32_t{at(o + 1)} << 8 | std::uint32_t{at(o + 2)} << 16 | std::uint32_t{at(o + 3)} << 24;
            const float small = static_cast<float>(static_cast<std::int8_t>(at(o))) / 16.0f;
            switch (mode % 4) {
            case 0: v[i] = std::bit_cast<float>(bits); break;
            case 1:
                if ((bits & 0x7f800000u) == 0x7f800000u) {
                    bits &= ~0x00800000u;
                }
                v[i] = std::bit_cast<float>(bits);
                break;
            case 2: v[i] = small; break;
            default: v[i] = std::ldexp(small, static_cast<int>(at(o + 1)) - 128); break;
            }
        }
        return v;
    }

    template <class Block>
    [[nodiscard]] std::vector<Block> blocks(std::size_t n, std::size_t offset) const
    {
        std::vector<Block> v(n);
        const std::span<std::byte> b = bytes_of(v);
        for (std::size_t i = 0; i < b.size(); ++i) {
            b[i] = std::byte{at(offset + i)};
        }
        return v;
    }
};

// A shape argument: mostly right, sometimes off by one, zero, or near SIZE_MAX (products overflow).
std::size_t shape_arg(std::size_t correct, std::uint8_t code, std::size_t block)
{
    switch (code % 16) {
    case 10: return correct + 1;
    case 11: return correct - 1; // SIZE_MAX when correct is 0
    case 12: return 0;
    case 13: return size_max;
    case 14: return size_max / 2 + 1;
    case 15: return correct + block;
    default: return correct;
    }
}

// A span's length: never larger than a buffer of 2 * correct + 1 elements (plus slack) holds.
std::size_t span_len(std::size_t correct, std::uint8_t code)
{
    switch (code % 16) {
    case 10: return correct + 1;
    case 11: return correct == 0 ? 0 : correct - 1;
    case 12: return 0;
    case 13: return 2 * correct + 1;
    default: return correct;
    }
}

bool mul_is(std::size_t a, std::size_t b, std::size_t product)
{
    std::size_t p = 0;
    return !__builtin_mul_overflow(a, b, &p) && p == product;
}

bool all_finite(std::span<const float> x)
{
    return std::ranges::all_of(x, [](float v) { return std::isfinite(v); });
}

// Below every fp16 scale bound of quantize's value check (Q8_0: max/127 < 65520; IQ4: 65504).
bool quantizable(std::span<const float> x)
{
    return std::ranges::all_of(x, [](float v) { return std::isfinite(v) && std::fabs(v) <= 65504.0f; });
}

// The pools, created once (a pool per input would cost more than the calls).
thread_pool& pool(bool two)
{
    static thread_pool one(1);
    static thread_pool both(2);
    return two ? both : one;
}

template <class List, class F>
void with_format(std::size_t index, F&& f)
{
    std::size_t i = 0;
    List::for_each([&]<class Block>(std::type_identity<Block> t) {
        if (i++ == index % List::size) {
            f(t);
        }
    });
}

template <class F>
void with_tag(bool generic, F&& f)
{
    if (generic) {
        f(qk::arch::generic{});
    } else {
        f(qk::arch::runtime{});
    }
}

// ---- quantize, on generic, runtime and a pool: same success, same bytes -------------------------

template <class Block>
void fuzz_quantize(const std::uint8_t* h, const payload& p)
{
    current_call = "qk::quantize";
    constexpr std::size_t bs = qk::format_traits<Block>::block_size;
    const std::size_t blocks = h[3] % 5;
    const std::size_t x_len = span_len(blocks * bs, h[4]);
    const std::size_t y_len = span_len(blocks, h[5]);
    const std::vector<float> x = p.floats(x_len, 0, h[2]);
    const bool shape_ok = x_len % bs == 0 && y_len == x_len / bs;
    expect e = !shape_ok || !all_finite(x) ? expect::failure : quantizable(x) ? expect::success : expect::either;

    auto reference = sentinel_filled<Block>(2 * blocks + 1 + slack);
    const bool ok = attempt([&] { qk::quantize<Block, qk::arch::generic>(x, std::span<Block>(reference.data(), y_len)); });
    require_outcome(ok, e);
    require(untouched(reference, ok ? y_len : 0), "wrote outside y (or wrote y, then threw)");
    const auto same_as_generic = [&](const char* call, auto&& run) {
        current_call = call;
        auto y = sentinel_filled<Block>(reference.size());
        require(attempt([&] { run(std::span<Block>(y.data(), y_len)); }) == ok, "succeeds where the generic tag fails, or fails where it succeeds");
        require(same_bytes(y, reference), "other bytes than the generic tag's (or outside y, or before a throw)");
    };
    same_as_generic("qk::quantize<runtime>", [&](std::span<Block> y) { qk::quantize<Block, qk::arch::runtime>(x, y); });
    same_as_generic("qk::quantize(pool)", [&](std::span<Block> y) { qk::quantize<Block>(x, y, pool((h[1] & 0x10) != 0)); });
}

// ---- quantize with importance: one thread and a pool agree -------------------------------------

template <class Block>
void fuzz_quantize_importance(const std::uint8_t* h, const payload& p)
{
    current_call = "qk::quantize(importance)";
    constexpr std::size_t bs = qk::format_traits<Block>::block_size;
    const std::size_t rows = 1 + h[3] % 4;
    const std::size_t row_blocks = 1 + h[4] % (bs == 256 ? 1 : 2);
    const std::size_t values = rows * row_blocks * bs;
    const std::size_t x_len = span_len(values, h[5]);
    const std::size_t y_len = span_len(rows * row_blocks, h[6]);
    const std::size_t w_len = span_len(row_blocks * bs, h[7]);
    const std::vector<float> x = p.floats(x_len, 0, h[2]);
    std::vector<float> importance = p.floats(w_len, 7, 2 + ((h[2] >> 2) & 1));
    switch ((h[2] >> 4) % 4) {
    case 0: std::ranges::transform(importance, importance.begin(), [](float v) { return std::fabs(v); }); break;
    case 1: importance = p.floats(w_len, 7, 0); break; // raw bits
    case 2: std::ranges::fill(importance, 0.0f); break;
    default: break; // signed: some weights negative
    }
    const bool shape_ok = x_len % bs == 0 && y_len == x_len / bs;
    const bool weights_ok = !importance.empty() && w_len % bs == 0 && x_len % w_len == 0 &&
                            std::ranges::all_of(importance, [](float v) { return std::isfinite(v) && v >= 0.0f; });
    // Success also needs a positive weight in every group that is not all zero, and scales that
    // fit fp16 after the search: not predicted here, but one thread and the pool must agree.
    const expect e = !shape_ok || !all_finite(x) || !weights_ok ? expect::failure : expect::either;

    auto single = sentinel_filled<Block>(2 * rows * row_blocks + 1 + slack);
    const bool ok = attempt([&] { qk::quantize<Block>(x, std::span<Block>(single.data(), y_len), importance); });
    require_outcome(ok, e);
    require(untouched(single, ok ? y_len : 0), "wrote outside y (or wrote y, then threw)");
    current_call = "qk::quantize(importance, pool)";
    auto pooled = sentinel_filled<Block>(single.size());
    require(attempt([&] { qk::quantize<Block>(x, std::span<Block>(pooled.data(), y_len), importance, pool((h[1] & 0x10) != 0)); }) == ok,
            "the pool and one thread disagree on success");
    require(same_bytes(pooled, single), "the pool writes other bytes than one thread");
}

// ---- dequantize: refuses exactly the mismatched shapes ------------------------------------------

template <class Block>
void fuzz_dequantize(const std::uint8_t* h, const payload& p)
{
    current_call = "qk::dequantize";
    constexpr std::size_t bs = qk::format_traits<Block>::block_size;
    const std::size_t blocks = h[3] % 5;
    const std::size_t x_len = span_len(blocks, h[4]);
    const std::size_t y_len = span_len(blocks * bs, h[5]);
    const std::vector<Block> x = p.blocks<Block>(x_len, 0);
    auto y = sentinel_filled<float>(2 * blocks * bs + 1 + slack);
    const bool ok = attempt([&] { qk::dequantize<Block>(x, std::span<float>(y.data(), y_len)); });
    require_outcome(ok, y_len % bs == 0 && x_len == y_len / bs ? expect::success : expect::failure);
    require(untouched(y, ok ? y_len : 0), "wrote outside y (or wrote y, then threw)");
}

// ---- dot: refuses exactly the mismatched lengths; runtime near generic --------------------------

template <class Block>
void fuzz_dot(const std::uint8_t* h, const payload& p)
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    constexpr std::size_t per = qk::activation_blocks_per_block<Block>;
    const std::size_t blocks = h[3] % 5;
    const std::vector<Block> w = p.blocks<Block>(span_len(blocks, h[4]), 0);
    std::vector<activation> a = p.blocks<activation>(span_len(blocks * per, h[5]), 5);
    // The SIMD kernels are exact for activation codes in [-127, 127], the quantizers' range
    // (dot/sse4_2.hpp): -128 flips sign under psignb, so raw bytes are kept to that range.
    for (activation& block : a) {
        std::ranges::replace(block.qs, std::int8_t{-128}, std::int8_t{-127});
    }
    const expect e = w.size() * per == a.size() ? expect::success : expect::failure;
    float generic = 0.0f;
    float runtime = 0.0f;
    current_call = "qk::dot<generic>";
    require_outcome(attempt([&] { generic = qk::dot<Block, qk::arch::generic>(w, a); }), e);
    current_call = "qk::dot<runtime>";
    require_outcome(attempt([&] { runtime = qk::dot<Block, qk::arch::runtime>(w, a); }), e);
    if (e != expect::success || !std::isfinite(generic) || !std::isfinite(runtime)) {
        return;
    }
    // Both are the decoded rows' dot product up to float rounding: bound the difference by the
    // sum of the products' magnitudes. Tiny sums (scale products near the subnormals, where each
    // kernel may round differently) and huge ones (overflow in some order) prove nothing.
    std::vector<float> wf(w.size() * qk::format_traits<Block>::block_size);
    std::vector<float> af(wf.size());
    qk::dequantize<Block>(w, wf);
    qk::dequantize<activation>(a, af);
    double magnitude = 0.0;
    for (std::size_t i = 0; i < wf.size(); ++i) {
        magnitude += std::fabs(static_cast<double>(wf[i]) * static_cast<double>(af[i]));
    }
    if (std::isfinite(magnitude) && magnitude > 1e-20 && magnitude < 1e30) {
        require(std::fabs(static_cast<double>(generic) - static_cast<double>(runtime)) <= 1e-3 * magnitude,
                "the runtime tag's dot is far from the generic one");
    }
}

// ---- gemv / gemm on plain rows: equal a loop of qk::dot on the same tag, bit for bit ------------
// (Rows here stay below 1024 values, where gemv.hpp's split kernels, which sum in another order,
// start: at most 4 blocks of 32 or 64 values, 3 of IQ4_XS's 256.)

struct gemm_case {
    std::size_t rows, cols, columns;             // the true shape, that buffers are sized for
    std::size_t rows_arg, cols_arg, columns_arg; // what the call is told
};

template <class Block>
bool gemm_shape_ok(const gemm_case& c, std::size_t w_len, std::size_t x_len, std::size_t y_len, std::size_t scratch_len)
{
    constexpr std::size_t bs = qk::format_traits<Block>::block_size;
    const std::size_t bpr = c.cols_arg / bs;
    return c.cols_arg % bs == 0 && c.columns_arg != 0 && mul_is(c.rows_arg, bpr, w_len) && mul_is(c.columns_arg, c.cols_arg, x_len) &&
           mul_is(c.columns_arg, c.rows_arg, y_len) && scratch_len >= c.columns_arg * bpr * qk::activation_blocks_per_block<Block>;
}

// y[c * rows + r] = qk::dot<Block, Tag>(row r, x's column c quantized on Tag).
template <class Block, class Tag>
std::vector<float> dot_loop(std::span<const Block> w, const gemm_case& c, std::span<const float> x)
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    const std::size_t bpr = c.cols / qk::format_traits<Block>::block_size;
    std::vector<float> y(c.rows * c.columns);
    // Without rows the column count is bounded by nothing (x and y both empty when cols is 0).
    for (std::size_t col = 0; col < c.columns && c.rows != 0; ++col) {
        const auto a = qk::quantize<activation, Tag>(x.subspan(col * c.cols, c.cols));
        for (std::size_t r = 0; r < c.rows; ++r) {
            y[col * c.rows + r] = qk::dot<Block, Tag>(w.subspan(r * bpr, bpr), a);
        }
    }
    return y;
}

template <class Block>
void fuzz_gemm(const std::uint8_t* h, const payload& p, bool gemv)
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    constexpr std::size_t bs = qk::format_traits<Block>::block_size;
    gemm_case c{};
    c.rows = h[3] % 9;
    c.cols = h[4] % (1024 / bs < 5 ? 1024 / bs : 5) * bs;
    c.columns = gemv ? 1 : 1 + h[5] % 4;
    c.rows_arg = shape_arg(c.rows, h[6], 1);
    c.cols_arg = shape_arg(c.cols, h[7], bs);
    c.columns_arg = gemv ? 1 : shape_arg(c.columns, h[8], 1);
    const std::size_t w_blocks = c.rows * (c.cols / bs);
    const std::vector<Block> w = p.blocks<Block>(span_len(w_blocks, h[9]), 0);
    const std::vector<float> x = p.floats(span_len(c.columns * c.cols, h[10]), 3, h[2]);
    const std::size_t y_len = span_len(c.rows * c.columns, h[11]);
    const std::size_t scratch_needed = qk::gemm_scratch_blocks<Block>(c.cols, c.columns);
    const std::size_t scratch_len = span_len(scratch_needed, h[12]);
    const bool allocating = (h[2] & 0x40) != 0;
    const bool shape_ok = gemm_shape_ok<Block>(c, w.size(), x.size(), y_len, allocating ? size_max : scratch_len);
    const expect e = !shape_ok || !all_finite(x) ? expect::failure : quantizable(x) ? expect::success : expect::either;
    thread_pool& threads = pool((h[1] & 0x10) != 0);

    with_tag((h[1] & 0x08) != 0, [&]<class Tag>(Tag) {
        current_call = gemv ? "qk::gemv" : "qk::gemm";
        auto y = sentinel_filled<float>(2 * c.rows * c.columns + 1 + slack);
        auto scratch = sentinel_filled<activation>(2 * scratch_needed + 1 + slack);
        const std::span<float> ys(y.data(), y_len);
        const std::span<activation> ss(scratch.data(), scratch_len);
        const bool ok = attempt([&] {
            if (gemv && allocating) {
                qk::gemv<Block, Tag>(w, c.rows_arg, c.cols_arg, x, ys, threads);
            } else if (gemv) {
                qk::gemv<Block, Tag>(w, c.rows_arg, c.cols_arg, x, ys, threads, ss);
            } else if (allocating) {
                qk::gemm<Block, Tag>(w, c.rows_arg, c.cols_arg, c.columns_arg, x, ys, threads);
            } else {
                qk::gemm<Block, Tag>(w, c.rows_arg, c.cols_arg, c.columns_arg, x, ys, threads, ss);
            }
        });
        require_outcome(ok, e);
        require(untouched(y, ok ? y_len : 0), "wrote outside y (or wrote y, then threw)");
        // Scratch is untouched by a refused shape (check_gemm), but its contents are unspecified
        // after a call that got as far as quantizing x (a value error in a later column).
        require(untouched(scratch, ok || shape_ok ? scratch_len : 0), "wrote outside scratch (or wrote it for a bad shape)");
        if (ok) {
            // The arguments matched the spans (wrong ones can match too: rows 0 with empty w and y).
            const auto expected = dot_loop<Block, Tag>(w, {c.rows_arg, c.cols_arg, c.columns_arg, 0, 0, 0}, x);
            require(std::ranges::equal(ys, expected, same_bits), "y differs from a loop of qk::dot on the same tag");
        }
    });
}

// ---- packed_matrix and gemm/gemv on it: equal the generic qk::dot, bit for bit ------------------

template <class Block>
void fuzz_packed(const std::uint8_t* h, const payload& p)
{
    constexpr std::size_t bs = qk::format_traits<Block>::block_size;
    const bool gemv = (h[2] & 0x80) != 0;
    gemm_case c{};
    c.rows = h[3] % 21; // beyond one tile of 16 rows
    c.cols = h[4] % 5 * bs;
    c.columns = gemv ? 1 : 1 + h[5] % 10; // beyond one panel of 8 columns
    c.rows_arg = shape_arg(c.rows, h[6], 1);
    c.cols_arg = shape_arg(c.cols, h[7], bs);
    c.columns_arg = gemv ? 1 : shape_arg(c.columns, h[8], 1);
    const std::vector<Block> w = p.blocks<Block>(span_len(c.rows * (c.cols / bs), h[9]), 0);

    current_call = "qk::packed_matrix";
    const bool pack_ok = c.cols_arg % bs == 0 && (c.cols_arg / bs == 0 ? w.empty() : mul_is(c.rows_arg, c.cols_arg / bs, w.size()));
    qk::packed_matrix<Block> m;
    const bool built = attempt([&] { m = qk::packed_matrix<Block>(w, c.rows_arg, c.cols_arg); });
    // A shape the checks accept may still not fit in memory (rows near SIZE_MAX): either outcome.
    require_outcome(built, !pack_ok ? expect::failure : c.rows_arg <= c.rows ? expect::success : expect::either);
    if (!built) {
        return;
    }
    require(m.rows() == c.rows_arg && m.cols() == c.cols_arg, "packed_matrix reports another shape than it was given");

    const std::vector<float> x = p.floats(span_len(c.columns * c.cols, h[10]), 3, h[2]);
    const std::size_t y_len = span_len(c.rows * c.columns, h[11]);
    const bool shape_ok = gemm_shape_ok<Block>({c.rows, c.cols, c.columns, m.rows(), m.cols(), c.columns_arg},
                                               m.rows() * (m.cols() / bs), x.size(), y_len, size_max);
    const expect e = !shape_ok || !all_finite(x) ? expect::failure : quantizable(x) ? expect::success : expect::either;
    with_tag((h[1] & 0x08) != 0, [&]<class Tag>(Tag) {
        current_call = gemv ? "qk::gemv(packed_matrix)" : "qk::gemm(packed_matrix)";
        auto y = sentinel_filled<float>(2 * c.rows * c.columns + 1 + slack);
        const std::span<float> ys(y.data(), y_len);
        std::vector<std::uint8_t> scratch;
        thread_pool& threads = pool((h[1] & 0x10) != 0);
        const bool ok = attempt([&] {
            if (gemv) {
                qk::gemv<Block, Tag>(m, x, ys, threads, scratch);
            } else {
                qk::gemm<Block, Tag>(m, c.columns_arg, x, ys, threads, scratch);
            }
        });
        require_outcome(ok, e);
        require(untouched(y, ok ? y_len : 0), "wrote outside y (or wrote y, then threw)");
        if (ok) {
            // Any NaN for a NaN: the tile kernels need not carry the reference's NaN payloads.
            const auto expected = dot_loop<Block, qk::arch::generic>(w, {m.rows(), m.cols(), c.columns_arg, 0, 0, 0}, x);
            require(std::ranges::equal(ys, expected, [](float a, float b) { return same_bits(a, b) || (std::isnan(a) && std::isnan(b)); }),
                    "y differs from the generic qk::dot");
        }
    });
}

// ---- solve_tri ----------------------------------------------------------------------------------

// A view over a buffer the fuzzer lays out: dimensions in any order, padded rows, reversed
// dimensions (negative strides) and broadcast batch dimensions (stride 0), every element inside
// the buffer. Without broadcasts no two elements share memory.
template <class T>
struct laid_out {
    std::vector<T> buffer;
    qk::tensor_view<T> view;
    std::vector<bool> in_view; // which buffer elements the view covers
};

template <class T>
laid_out<T> lay_out(const std::array<std::int64_t, 4>& ne, std::uint8_t code, std::uint8_t flags, bool may_broadcast)
{
    std::array<int, 4> order{0, 1, 2, 3};
    for (int i = code % 24; i > 0; --i) {
        std::ranges::next_permutation(order);
    }
    std::array<std::int64_t, 4> stride{};
    std::int64_t extent = 1;
    for (const int d : order) {
        if (may_broadcast && d >= 2 && (flags >> d & 1) != 0) {
            continue; // stride 0
        }
        stride[d] = extent;
        extent *= ne[d] + (d == order[0] ? (code >> 5) % 3 : 0); // padding after the innermost dimension
    }
    std::int64_t base = 0;
    for (int d = 0; d < 2; ++d) {
        if ((flags >> (4 + d) & 1) != 0) {
            base += (ne[d] - 1) * stride[d];
            stride[d] = -stride[d];
        }
    }
    laid_out<T> l{std::vector<T>(static_cast<std::size_t>(extent)), {}, std::vector<bool>(static_cast<std::size_t>(extent))};
    l.view.data = l.buffer.data() + base;
    l.view.ne = ne;
    for (int d = 0; d < 4; ++d) {
        l.view.nb[d] = stride[d] * static_cast<std::int64_t>(sizeof(T));
    }
    for (std::int64_t i3 = 0; i3 < ne[3]; ++i3) {
        for (std::int64_t i2 = 0; i2 < ne[2]; ++i2) {
            for (std::int64_t i1 = 0; i1 < ne[1]; ++i1) {
                for (std::int64_t i0 = 0; i0 < ne[0]; ++i0) {
                    l.in_view[static_cast<std::size_t>(&l.view.at(i0, i1, i2, i3) - l.buffer.data())] = true;
                }
            }
        }
    }
    return l;
}

// The same layout over another buffer (for a second solve into the same shape).
template <class T>
qk::tensor_view<T> rebase(const qk::tensor_view<T>& v, const std::vector<T>& from, std::vector<T>& to)
{
    return {to.data() + (v.data - from.data()), v.ne, v.nb};
}

template <class T, class Tag>
void fuzz_solve_tri_views(const std::uint8_t* h, const payload& p)
{
    current_call = "qk::solve_tri(views)";
    const qk::tri_options opt{(h[2] & 0x10) != 0, (h[2] & 0x20) != 0, (h[2] & 0x40) != 0};
    const bool in_place = (h[2] & 0x80) != 0;
    const std::int64_t n = 1 + h[3] % 12;
    const std::int64_t k = 1 + h[4] % 12;
    const std::array<std::int64_t, 4> a_ne{n, n, 1 + h[5] % 2, 1 + h[6] % 2};
    std::array<std::int64_t, 4> b_ne{opt.left ? k : n, opt.left ? n : k, a_ne[2] * (1 + h[7] % 2), a_ne[3] * (1 + h[7] / 2 % 2)};
    laid_out<T> a = lay_out<T>(a_ne, h[8], h[11], true);
    laid_out<T> b = lay_out<T>(b_ne, h[9], h[15], !in_place);
    laid_out<T> x = lay_out<T>(b_ne, h[10], 0, false);
    const std::vector<float> values = p.floats(a.buffer.size() + b.buffer.size(), 0, h[2]);
    std::copy_n(values.begin(), a.buffer.size(), a.buffer.begin());
    std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(a.buffer.size()), b.buffer.size(), b.buffer.begin());
    std::ranges::fill(bytes_of(x.buffer), sentinel);

    qk::tensor_view<const T> av = a.view;
    qk::tensor_view<const T> bv = b.view;
    qk::tensor_view<T> xv = in_place ? b.view : x.view;
    // One thing wrong, or nothing: every such change the documented checks must refuse.
    bool valid = true;
    const std::size_t d = h[13] % 4;
    switch (h[12] % 16) {
    case 8: av.ne[0] += 1; valid = false; break;                                      // A not square
    case 9: bv.ne[opt.left ? 1 : 0] += 1; xv.ne = bv.ne; valid = false; break;         // B's rows are not n
    case 10: xv.ne[d] += 1; valid = false; break;                                      // X is not B's shape
    case 11: av.ne[2] = 3; valid = false; break;                                       // B's batches are not a multiple of A's
    case 12: (h[13] & 4 ? bv : av).nb[d] += 1; valid = false; break;                   // a stride that is not whole elements
    case 13: (h[13] & 4 ? xv.ne : av.ne)[d] = -static_cast<std::int64_t>(h[14] % 2); valid = false; break;
    case 14: (h[13] & 4 ? bv.data : av.data) = nullptr; valid = false; break;
    case 15: // one batch beyond 2^40 elements of B (2^40 itself is allowed, and n = k = 1 reaches it)
        bv.ne[2] = xv.ne[2] = av.ne[2] * ((std::int64_t{1} << 40) + 1);
        valid = false;
        break;
    default: break;
    }
    if (valid && !opt.unit) {
        for (std::int64_t i3 = 0; i3 < a_ne[3]; ++i3) {
            for (std::int64_t i2 = 0; i2 < a_ne[2]; ++i2) {
                for (std::int64_t i = 0; i < n; ++i) {
                    valid = valid && av.at(i, i, i2, i3) != T(0);
                }
            }
        }
    }

    const std::vector<T> b_before = b.buffer;
    thread_pool& threads = pool((h[1] & 0x10) != 0);
    const bool ok = attempt([&] { qk::solve_tri<Tag, T>(av, bv, xv, opt); });
    require_outcome(ok, valid ? expect::success : expect::failure);
    if (!ok) {
        require(untouched(x.buffer) && same_bytes(b.buffer, b_before), "X was written before a qk::error");
        return;
    }
    const std::vector<T>& result = in_place ? b.buffer : x.buffer;
    const std::vector<bool>& covered = in_place ? b.in_view : x.in_view;
    for (std::size_t i = 0; i < result.size(); ++i) {
        const T& unwritten = in_place ? b_before[i] : x.buffer[i];
        require(covered[i] || (in_place ? std::memcmp(&result[i], &unwritten, sizeof(T)) == 0 : untouched(std::vector<T>{result[i]})),
                "wrote an element outside X's view");
    }
    // The same solve on a pool, and with A's other triangle (and a unit diagonal) replaced by
    // NaN, which the solve must never read: the same bits.
    const auto again = [&](const qk::tensor_view<const T>& a_view, bool on_pool) {
        std::vector<T> b2 = b_before;
        std::vector<T> x2(x.buffer.size());
        std::ranges::fill(bytes_of(x2), sentinel);
        const qk::tensor_view<const T> b2v = rebase(b.view, b.buffer, b2);
        const qk::tensor_view<T> x2v = in_place ? rebase(b.view, b.buffer, b2) : rebase(x.view, x.buffer, x2);
        current_call = on_pool ? "qk::solve_tri(views, pool)" : "qk::solve_tri(views), A's other triangle NaN";
        require(attempt([&] {
                    if (on_pool) {
                        qk::solve_tri<Tag, T>(a_view, b2v, x2v, opt, threads);
                    } else {
                        qk::solve_tri<Tag, T>(a_view, b2v, x2v, opt);
                    }
                }),
                "refused what it solved before");
        require(same_bytes(in_place ? b2 : x2, result), on_pool ? "a pool solves to other bits than one thread"
                                                                 : "the result depends on elements of A the solve must not read");
    };
    again(av, true);
    std::vector<T> a2 = a.buffer;
    const qk::tensor_view<T> a2v = rebase(a.view, a.buffer, a2);
    for (std::int64_t i3 = 0; i3 < a_ne[3]; ++i3) {
        for (std::int64_t i2 = 0; i2 < a_ne[2]; ++i2) {
            for (std::int64_t row = 0; row < n; ++row) {
                for (std::int64_t col = 0; col < n; ++col) {
                    if (opt.lower ? col > row : col < row) {
                        a2v.at(col, row, i2, i3) = std::numeric_limits<T>::quiet_NaN();
                    } else if (col == row && opt.unit) {
                        a2v.at(col, row, i2, i3) = std::numeric_limits<T>::quiet_NaN();
                    }
                }
            }
        }
    }
    again(a2v, false);
}

template <class T, class Tag>
void fuzz_solve_tri_contiguous(const std::uint8_t* h, const payload& p)
{
    current_call = "qk::solve_tri(contiguous)";
    const qk::tri_options opt{(h[2] & 0x10) != 0, (h[2] & 0x20) != 0, (h[2] & 0x40) != 0};
    const bool in_place = (h[2] & 0x80) != 0;
    const std::int64_t n = 1 + h[3] % 24;
    const std::int64_t k = 1 + h[4] % 40;
    const std::int64_t batch = 1 + h[5] % 3;
    // A wrong size is one the size checks alone refuse: the buffers hold only the true sizes.
    const auto wrong = [](std::int64_t correct, std::uint8_t code, std::int64_t beyond) {
        switch (code % 16) {
        case 12: return std::int64_t{0};
        case 13: return -correct;
        case 14: return beyond;
        case 15: return std::numeric_limits<std::int64_t>::min();
        default: return correct;
        }
    };
    constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
    const std::int64_t n_arg = wrong(n, h[6], h[9] % 2 ? max : (std::int64_t{1} << 20) + 1);
    const std::int64_t k_arg = wrong(k, h[7], h[9] % 2 ? max : (std::int64_t{1} << 40) / n + 1);
    const std::int64_t batch_arg = wrong(batch, h[8], h[9] % 2 ? max : (std::int64_t{1} << 40) / (n * std::max(n, k)) + 1);
    bool valid = n_arg == n && k_arg == k && batch_arg == batch;

    const auto nn = static_cast<std::size_t>(n * n * batch);
    const auto nk = static_cast<std::size_t>(n * k * batch);
    const std::vector<float> values = p.floats(nn + nk, 0, h[2]);
    std::vector<T> a(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(nn));
    std::vector<T> b(values.begin() + static_cast<std::ptrdiff_t>(nn), values.end());
    for (std::int64_t q = 0; q < batch && !opt.unit; ++q) {
        for (std::int64_t i = 0; i < n; ++i) {
            valid = valid && a[static_cast<std::size_t>(q * n * n + i * n + i)] != T(0);
        }
    }
    const std::vector<T> b_before = b;
    auto x = sentinel_filled<T>(nk);
    T* out = in_place ? b.data() : x.data();
    const bool ok = attempt([&] { qk::solve_tri<Tag, T>(a.data(), b.data(), out, n_arg, k_arg, batch_arg, opt); });
    require_outcome(ok, valid ? expect::success : expect::failure);
    if (!ok) {
        require(untouched(x) && same_bytes(b, b_before), "X was written before a qk::error");
        return;
    }
    const std::vector<T>& result = in_place ? b : x;
    // The pool's result, and with A's other triangle (a unit diagonal too) NaN: the same bits.
    current_call = "qk::solve_tri(contiguous, pool)";
    std::vector<T> b2 = b_before;
    std::vector<T> x2(nk);
    require(attempt([&] { qk::solve_tri<Tag, T>(a.data(), b2.data(), in_place ? b2.data() : x2.data(), n, k, batch, opt,
                                                    pool((h[1] & 0x10) != 0)); }),
            "refused what it solved before");
    require(same_bytes(in_place ? b2 : x2, result), "a pool solves to other bits than one thread");
    current_call = "qk::solve_tri(contiguous), A's other triangle NaN";
    for (std::size_t q = 0; q < static_cast<std::size_t>(batch); ++q) {
        for (std::size_t row = 0; row < static_cast<std::size_t>(n); ++row) {
            for (std::size_t col = 0; col < static_cast<std::size_t>(n); ++col) {
                if ((opt.lower ? col > row : col < row) || (col == row && opt.unit)) {
                    a[q * static_cast<std::size_t>(n * n) + row * static_cast<std::size_t>(n) + col] = std::numeric_limits<T>::quiet_NaN();
                }
            }
        }
    }
    b2 = b_before;
    require(attempt([&] { qk::solve_tri<Tag, T>(a.data(), b2.data(), in_place ? b2.data() : x2.data(), n, k, batch, opt); }),
            "refused what it solved before");
    require(same_bytes(in_place ? b2 : x2, result), "the result depends on elements of A the solve must not read");
}

template <class F>
void with_solve_tri(const std::uint8_t* h, F&& f)
{
    // solve_tri takes xsimd tags: the scalar reference, or its default (the build's SIMD).
    const auto typed = [&]<class T>(std::type_identity<T>) {
        if ((h[1] & 0x08) != 0) {
            f(std::type_identity<T>{}, qk::arch::generic{});
        } else {
            f(std::type_identity<T>{}, qk::arch::solve_tri_native{});
        }
    };
    if ((h[1] & 1) != 0) {
        typed(std::type_identity<double>{});
    } else {
        typed(std::type_identity<float>{});
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    qk_fuzz::target_name = "kernels";
    current_input = {data, size};
    std::array<std::uint8_t, header_bytes> h{};
    std::copy_n(data, std::min(size, header_bytes), h.begin());
    const payload p{size > header_bytes ? std::span(data + header_bytes, size - header_bytes) : std::span<const std::uint8_t>()};
    const std::size_t format = h[1] & 0x07;
    switch (h[0] % 9) {
    case 0: with_format<qk::block_formats>(format, [&]<class B>(std::type_identity<B>) { fuzz_quantize<B>(h.data(), p); }); break;
    case 1:
        if ((format & 1) != 0) {
            fuzz_quantize_importance<qk::block_iq4_xs>(h.data(), p);
        } else {
            fuzz_quantize_importance<qk::block_iq4_nl>(h.data(), p);
        }
        break;
    case 2: with_format<qk::block_formats>(format, [&]<class B>(std::type_identity<B>) { fuzz_dequantize<B>(h.data(), p); }); break;
    case 3: with_format<qk::weight_formats>(format, [&]<class B>(std::type_identity<B>) { fuzz_dot<B>(h.data(), p); }); break;
    case 4: with_format<qk::weight_formats>(format, [&]<class B>(std::type_identity<B>) { fuzz_gemm<B>(h.data(), p, true); }); break;
    case 5: with_format<qk::weight_formats>(format, [&]<class B>(std::type_identity<B>) { fuzz_gemm<B>(h.data(), p, false); }); break;
    case 6: with_format<qk::weight_formats>(format, [&]<class B>(std::type_identity<B>) { fuzz_packed<B>(h.data(), p); }); break;
    case 7:
        with_solve_tri(h.data(), [&]<class T, class Tag>(std::type_identity<T>, Tag) { fuzz_solve_tri_contiguous<T, Tag>(h.data(), p); });
        break;
    default:
        with_solve_tri(h.data(), [&]<class T, class Tag>(std::type_identity<T>, Tag) { fuzz_solve_tri_views<T, Tag>(h.data(), p); });
        break;
    }
    return 0;
}
