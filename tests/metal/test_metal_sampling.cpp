// The Metal sampling kernels (shaders/sampling.metal, compiled as C++ through the shim and run on
// its CPU emulation of threadgroups and SIMD-groups) with the host finishing of
// sampling_host.hpp, against the CPU sampler chain: the float helpers bit for bit, argmax ==
// greedy, softmax bit for bit, top-k lists, temperature and biases bit for bit, the draw, and
// whole chains sampled step after step.
#include <doctest/doctest.h>

#include <backends/metal/sampling_host.hpp>
#include <sampling/chain.hpp>
#include <sampling/deterministic_math.hpp>
#include <sampling/vocabulary_scan.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include "gpu_reference.hpp"
#include "metal/shim/emulator.hpp"
#include "metal/shim_sampling.hpp"

#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wunknown-attributes"
#pragma clang diagnostic ignored "-Wdeprecated-volatile"
#else
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wattributes"
#pragma GCC diagnostic ignored "-Wvolatile"
#endif
namespace msl_sampling {
using qk_metal_sampling_shim::atomic_fetch_add_explicit;
using qk_metal_sampling_shim::atomic_load_explicit;
using qk_metal_sampling_shim::atomic_store_explicit;
using qk_metal_sampling_shim::atomic_uint;
using qk_metal_sampling_shim::memory_order_relaxed;
#include <backends/metal/shaders/sampling.metal>
} // namespace msl_sampling
#include "metal/shim/metal_shim_end.hpp"
#if defined(__clang__)
#pragma clang diagnostic pop
#else
#pragma GCC diagnostic pop
#endif

namespace {

namespace mh = qk::backend::metal::detail::sampling;
namespace qs = qk::sampling;

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float not_a_number = std::numeric_limits<float>::quiet_NaN();

// The kernels' constants (generated/sampling_layout.h, constexpr here as in MSL) are the host's:
// a checked-in header left stale by a layout change fails to compile here, not just in CI's
// scripts/generate-shaders.sh --check.
static_assert(msl_sampling::row_words == mh::row_words && msl_sampling::op_words == mh::op_words &&
              msl_sampling::result_words == mh::result_words && msl_sampling::list_words == mh::list_words);
static_assert(msl_sampling::row_flags == mh::row_flags && msl_sampling::row_k == mh::row_k &&
              msl_sampling::row_list_ops == mh::row_list_ops && msl_sampling::row_list_count == mh::row_list_count);
static_assert(msl_sampling::flag_active == mh::active && msl_sampling::flag_max == mh::max && msl_sampling::flag_sums == mh::sums &&
              msl_sampling::flag_whole_row_draw == mh::store_exp && msl_sampling::flag_softmax == mh::scale &&
              msl_sampling::flag_top_k == mh::top_k && msl_sampling::flag_list == mh::list &&
              msl_sampling::flag_list_dist == mh::list_dist);
static_assert(msl_sampling::kind_divide == mh::divide && msl_sampling::kind_bias == mh::bias &&
              msl_sampling::kind_keep_max == mh::keep_max && msl_sampling::kind_keep_top_k == mh::keep_top_k);
static_assert(msl_sampling::result_index == mh::index && msl_sampling::result_max_bits == mh::max_bits &&
              msl_sampling::result_token == mh::token && msl_sampling::result_status == mh::status_word &&
              msl_sampling::result_list_size == mh::list_size && msl_sampling::result_factor_bits == mh::factor_bits);
static_assert(msl_sampling::status_ok == mh::ok && msl_sampling::status_no_candidate == mh::no_candidate &&
              msl_sampling::status_infinite == mh::infinite);
static_assert(msl_sampling::all_rows == mh::all_rows && msl_sampling::chunk_size == mh::chunk_size &&
              msl_sampling::chunk_lanes == qs::detail::sum_lanes && msl_sampling::max_list_capacity == mh::max_list_capacity);

std::vector<float> make_row(std::mt19937& rng, std::size_t n, int style)
{
    return qk_test::gpu::make_logits_row(rng, n, style, -110.0f);
}

bool same_bits(float a, float b)
{
    if (a != a && b != b) {
        return true; // NaN payloads are not specified
    }
    return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

std::vector<std::uint32_t> bits_of(std::span<const float> v)
{
    std::vector<std::uint32_t> out(v.size());
    std::memcpy(out.data(), v.data(), v.size_bytes());
    return out;
}

std::vector<float> floats_of(std::span<const std::uint32_t> v)
{
    std::vector<float> out(v.size());
    std::memcpy(out.data(), v.data(), v.size_bytes());
    return out;
}

// The buffers of sampling.metal's table, for one batch, and the emulated dispatches over them.
struct device_state {
    std::size_t n_seq = 0;
    std::size_t n_vocab = 0;
    std::uint32_t threads = 32;
    std::uint32_t capacity = 256;
    std::vector<std::uint32_t> input;  // the caller's logits
    std::vector<std::uint32_t> work;   // the work copy
    bool use_work = false;             // buffer 1 is the work copy (else the input itself)
    mh::records records;
    std::vector<std::uint32_t> results;
    std::vector<std::uint32_t> exps;   // buffer 7 for chunks and scale
    std::vector<std::uint32_t> lists;

    device_state(std::span<const float> logits, std::size_t seqs, std::size_t vocab, std::span<const mh::row_plan> plans,
                 std::uint32_t threads_per_group, std::uint32_t list_capacity)
        : n_seq(seqs), n_vocab(vocab), threads(threads_per_group), capacity(list_capacity), input(bits_of(logits)),
          records(mh::encode(plans))
    {
        work.assign(input.size(), 0xffffffffu);
        results.assign(n_seq * mh::result_words, 0);
        exps.assign(n_seq * n_vocab, 0xffffffffu);
        lists.assign(n_seq * capacity * mh::list_words, 0xffffffffu);
    }

    [[nodiscard]] std::uint32_t chunks() const { return static_cast<std::uint32_t>(qs::detail::chunk_count(n_vocab)); }

    void run(const mh::dispatch& d)
    {
        namespace k = msl_sampling;
        k::sampling_shape shape{static_cast<std::uint32_t>(n_seq), static_cast<std::uint32_t>(n_vocab), chunks(), d.param};
        k::sampling_list_capacity = capacity;
        metal::emu::dispatch_shape s;
        s.threadgroups = metal::uint3(d.groups_x, d.groups_y, 1u);
        s.threads_per_threadgroup = metal::uint3(d.threads, 1u, 1u);
        if (d.threadgroup_bytes > 0) {
            s.threadgroup_memory = {d.threadgroup_bytes};
        }
        std::uint32_t* values = use_work ? work.data() : input.data();
        const std::uint32_t* rows = records.rows.data();
        const std::uint32_t* ops = records.ops.data();
        const std::uint32_t* biases = records.biases.data();
        metal::emu::dispatch(s, [&](const metal::emu::thread_builtins& b) {
            const metal::uint3 group = b.threadgroup_position_in_grid;
            const metal::uint t = b.thread_position_in_threadgroup.x;
            const metal::uint n = b.threads_per_threadgroup.x;
            switch (d.what) {
            case mh::kernel::transform:
                k::kernel_sampling_transform(shape, values, rows, ops, biases, results.data(),
                                             d.param == mh::all_rows ? input.data() : exps.data(), group, t, n);
                break;
            case mh::kernel::argmax:
                k::kernel_sampling_argmax(shape, values, rows, ops, results.data(), b.threadgroup<volatile metal::uint>(0), group, t, n,
                                          b.thread_index_in_simdgroup, b.simdgroup_index_in_threadgroup, b.simdgroups_per_threadgroup);
                break;
            case mh::kernel::chunks:
                k::kernel_sampling_chunks(shape, values, rows, results.data(), exps.data(), group, t, n);
                break;
            case mh::kernel::scale: k::kernel_sampling_scale(shape, rows, results.data(), exps.data(), group, t, n); break;
            case mh::kernel::top_k:
                k::kernel_sampling_top_k(shape, values, rows, ops, biases, results.data(), lists.data(),
                                         b.threadgroup<volatile metal::uint>(0), group, t, n);
                break;
            }
        });
    }

    void run_all(mh::mode how)
    {
        use_work = how == mh::mode::sample && records.stages > 0;
        for (const auto& d : mh::dispatches(records, n_seq, n_vocab, how, threads, capacity)) {
            run(d);
        }
    }

    [[nodiscard]] std::span<const std::uint32_t> result(std::size_t row) const
    {
        return std::span<const std::uint32_t>(results).subspan(row * mh::result_words, mh::result_words);
    }
    [[nodiscard]] std::vector<float> row_exps(std::size_t row) const
    {
        return floats_of(std::span<const std::uint32_t>(exps).subspan(row * n_vocab, n_vocab));
    }
    // The chunk sums the host adds from the row's stored weights.
    [[nodiscard]] std::vector<float> row_sums(std::size_t row) const { return mh::chunk_sums_of(row_exps(row)); }
    [[nodiscard]] std::vector<qs::token_data> row_list(std::size_t row, std::size_t count) const
    {
        std::vector<qs::token_data> out(count);
        if (count > 0) { // an empty vector's data() may be null, which memcpy must not get
            std::memcpy(out.data(), lists.data() + row * capacity * mh::list_words, count * sizeof(qs::token_data));
        }
        return out;
    }
    [[nodiscard]] std::vector<float> values_of(std::size_t row) const
    {
        const auto& v = use_work ? work : input;
        return floats_of(std::span<const std::uint32_t>(v).subspan(row * n_vocab, n_vocab));
    }
};

// What the Apple host code does for a step of chains: plan, dispatch, finish, accept.
std::vector<std::int32_t> gpu_sample(std::vector<qs::chain>& chains, std::span<const float> logits, std::size_t n_vocab,
                                     std::uint32_t threads = 32, std::uint32_t capacity = 256)
{
    const std::size_t n_seq = chains.size();
    std::vector<mh::row_plan> plans(n_seq);
    std::vector<mh::drawing> drawers(n_seq);
    for (std::size_t r = 0; r < n_seq; ++r) {
        plans[r] = mh::plan_chain(chains[r], r, n_vocab, capacity, drawers[r]);
    }
    device_state g(logits, n_seq, n_vocab, plans, threads, capacity);
    g.run_all(mh::mode::sample);
    std::vector<qs::adaptive_p::choice> picked(n_seq);
    for (std::size_t r = 0; r < n_seq; ++r) {
        const auto exps = g.row_exps(r);
        const auto list = g.row_list(r, std::min<std::size_t>(capacity, g.result(r)[mh::list_size]));
        picked[r] = mh::selection_of(plans[r], r, g.result(r), exps, list, g.values_of(r));
    }
    std::vector<std::int32_t> tokens(n_seq);
    for (std::size_t r = 0; r < n_seq; ++r) {
        tokens[r] = picked[r].token;
        drawers[r].commit(picked[r].token, picked[r].p);
        chains[r].accept(tokens[r]);
    }
    return tokens;
}

mh::row_plan plan_with(std::uint32_t flags)
{
    mh::row_plan p;
    p.flags = flags;
    return p;
}

float random_float_bits(std::mt19937& rng)
{
    return std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
}

} // namespace

TEST_CASE("metal sampling kernels: exp, weights, products and quotients are the CPU's bit for bit")
{
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> range(-100.0f, 0.5f);
    for (int i = 0; i < 200000; ++i) {
        const float x = range(rng);
        REQUIRE(same_bits(msl_sampling::qk_exp(x), qs::detail::exp(x)));
    }
    // Just above exp_lowest, where the polynomial's last ulp decides between FLT_MIN and the
    // subnormal below it: every float there.
    float x = qs::detail::exp_lowest;
    for (int i = 0; i < 300000; ++i, x = std::nextafter(x, 0.0f)) {
        REQUIRE(same_bits(msl_sampling::qk_exp(x), qs::detail::exp(x)));
        REQUIRE(same_bits(msl_sampling::qk_exp(std::nextafter(qs::detail::exp_lowest, -inf)), 0.0f));
    }

    std::uniform_int_distribution<std::uint32_t> subnormal(1u, 0x007fffffu);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    std::uniform_real_distribution<float> factor(1.0f / 4096.0f, 1.0f);
    for (int i = 0; i < 100000; ++i) {
        const float s1 = std::bit_cast<float>(subnormal(rng));
        // Weights exp_difference(x, max) over the whole range, down to the subnormal ones.
        const float max = 80.0f * unit(rng) - 40.0f;
        const float below = 90.0f * unit(rng);
        const float value = max - below;
        REQUIRE(same_bits(msl_sampling::exp_difference(std::bit_cast<std::uint32_t>(value), max), qs::detail::exp_difference(value, max)));
        const float u = unit(rng);
        // Products that land in, or next to, the subnormal range, and ordinary ones.
        const float f = factor(rng);
        const float mantissa = unit(rng); // drawn in a fixed order (function arguments have none)
        const float e = std::ldexp(mantissa, -115 - static_cast<int>(rng() % 20));
        REQUIRE(same_bits(msl_sampling::multiply_exact(e, f), e * f));
        REQUIRE(same_bits(msl_sampling::multiply_exact(s1, f), s1 * f));
        REQUIRE(same_bits(msl_sampling::multiply_exact(u, f), u * f));
    }
    // Ties on the subnormal grid, decided by the rounding error of the scaled product.
    for (std::uint32_t m = 1; m < 4000; ++m) {
        const float a = std::ldexp(static_cast<float>(2 * m + 1), -150); // (m + 0.5) * 2^-149 ... times 2
        const float b = 0.5f;
        REQUIRE(same_bits(msl_sampling::multiply_exact(std::ldexp(a, 1), b), std::ldexp(a, 1) * b));
        const float c = std::nextafter(0.5f, 1.0f);
        REQUIRE(same_bits(msl_sampling::multiply_exact(std::ldexp(a, 1), c), std::ldexp(a, 1) * c));
    }

    // The quotient correction from approximations up to 3 ulp off, and divide_exact itself.
    std::uniform_real_distribution<float> divisor(0.01f, 20.0f);
    std::normal_distribution<float> logit(0.0f, 30.0f);
    for (int i = 0; i < 100000; ++i) {
        const float a = i % 7 == 0 ? random_float_bits(rng) : logit(rng);
        const float b = i % 11 == 0 ? std::bit_cast<float>(static_cast<std::uint32_t>(0x3f800000u | (rng() & 0x007fffffu))) : divisor(rng);
        const float want = a / b;
        CAPTURE(a);
        CAPTURE(b);
        REQUIRE(same_bits(msl_sampling::divide_exact(a, b), want));
        if (std::isfinite(want) && std::fabs(want) >= std::ldexp(1.0f, -100) && std::fabs(a) >= std::ldexp(1.0f, -60)) {
            const int off = static_cast<int>(rng() % 7) - 3;
            const float q = std::bit_cast<float>(std::bit_cast<std::uint32_t>(want) + static_cast<std::uint32_t>(off));
            if (std::isfinite(q) && (q > 0.0f) == (want > 0.0f)) {
                REQUIRE(same_bits(msl_sampling::correct_quotient(a, b, q), want));
            }
        }
    }
    // Ties between two floats: a / b exactly halfway only happens for b with few bits; 1 / 3 etc.
    for (const float a : {1.0f, 3.0f, -7.0f, 1e-3f, 12345.678f, 0.0f, -0.0f, inf, -inf}) {
        for (const float b : {0.7f, 0.8f, 3.0f, 1.0f / 3.0f, 1e-3f, 1e3f}) {
            REQUIRE(same_bits(msl_sampling::divide_exact(a, b), a / b));
        }
    }
    CHECK(std::isnan(msl_sampling::divide_exact(not_a_number, 0.7f)));
}

#if defined(__SSE2__)
TEST_CASE("metal sampling kernels: the subnormal paths hold on hardware that flushes denormals")
{
    // A GPU may flush float denormals: MXCSR's FTZ and DAZ make this CPU do the same, and the
    // helpers must still give the IEEE results computed before with denormals on.
    std::mt19937 rng(8);
    std::uniform_int_distribution<std::uint32_t> subnormal(1u, 0x007fffffu);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    std::vector<float> a(20000);
    std::vector<float> b(a.size());
    std::vector<float> xs(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (i % 2 == 0) {
            a[i] = std::bit_cast<float>(subnormal(rng));
        } else {
            const float mantissa = unit(rng);
            a[i] = std::ldexp(mantissa, -110 - static_cast<int>(rng() % 16));
        }
        b[i] = i % 3 == 0 ? std::bit_cast<float>(subnormal(rng)) : unit(rng);
        xs[i] = qs::detail::exp_lowest + static_cast<float>(i) * 2e-7f; // exp(exp_lowest) is subnormal
    }
    std::vector<float> weight(a.size()), product(a.size()), e(a.size()), quotient(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
        weight[i] = qs::detail::exp_difference(xs[i] - 3.0f, -3.0f);
        product[i] = a[i] * b[i];
        e[i] = qs::detail::exp(xs[i]);
        quotient[i] = a[i] / 0.7f;
    }
    const unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | 0x8040u); // FTZ | DAZ
    std::vector<float> got_weight(a.size()), got_product(a.size()), got_e(a.size()), got_quotient(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
        got_weight[i] = msl_sampling::exp_difference(std::bit_cast<std::uint32_t>(xs[i] - 3.0f), -3.0f);
        got_product[i] = msl_sampling::multiply_exact(a[i], b[i]);
        got_e[i] = msl_sampling::qk_exp(xs[i]);
        got_quotient[i] = msl_sampling::divide_exact(a[i], 0.7f);
    }
    _mm_setcsr(saved);
    std::size_t subnormal_exps = 0;
    std::size_t normal_quotients = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        CAPTURE(i);
        REQUIRE(same_bits(got_weight[i], weight[i]));
        REQUIRE(same_bits(got_product[i], product[i]));
        REQUIRE(same_bits(got_e[i], e[i]));
        subnormal_exps += std::fpclassify(e[i]) == FP_SUBNORMAL ? 1 : 0;
        // Subnormal quotients are outside the guarantee; normal ones from tiny operands are not.
        if (std::fpclassify(quotient[i]) == FP_NORMAL) {
            REQUIRE(same_bits(got_quotient[i], quotient[i]));
            ++normal_quotients;
        }
    }
    CHECK(subnormal_exps > 0);
    CHECK(std::count_if(weight.begin(), weight.end(), [](float w) { return std::fpclassify(w) == FP_SUBNORMAL; }) > 0);
    CHECK(normal_quotients > 0);
}
#endif

TEST_CASE("metal sampling: argmax is the CPU greedy's token")
{
    std::mt19937 rng(1);
    for (const std::size_t n : {1u, 5u, 1023u, 1024u, 1025u, 4100u}) {
        for (const std::uint32_t threads : {32u, 64u}) {
            const std::size_t n_seq = 5;
            std::vector<float> m;
            for (std::size_t r = 0; r < n_seq; ++r) {
                const auto row = make_row(rng, n, static_cast<int>(r % 4));
                m.insert(m.end(), row.begin(), row.end());
            }
            m[4 * n + n / 2] = std::numeric_limits<float>::max(); // a row whose first maximum is in its middle
            std::vector<mh::row_plan> plans(n_seq, plan_with(mh::active | mh::max));
            plans[1].flags = 0; // inactive: its record must stay untouched
            device_state g(m, n_seq, n, plans, threads, 256);
            g.run_all(mh::mode::read);
            for (std::size_t r = 0; r < n_seq; ++r) {
                CAPTURE(n);
                CAPTURE(r);
                if (r == 1) {
                    CHECK(g.result(r)[mh::status_word] == 0);
                    CHECK(g.result(r)[mh::index] == 0);
                    continue;
                }
                qs::chain greedy = qs::chain::parse("greedy");
                const auto row = std::span<const float>(m).subspan(r * n, n);
                bool cpu_fails = false;
                std::int32_t want = -1;
                try {
                    want = greedy.sample(row);
                } catch (const qk::error&) {
                    cpu_fails = true;
                }
                if (cpu_fails) {
                    CHECK(g.result(r)[mh::status_word] != mh::ok);
                } else {
                    CHECK(g.result(r)[mh::status_word] == mh::ok);
                    CHECK(static_cast<std::int32_t>(g.result(r)[mh::index]) == want);
                }
            }
        }
    }
}

TEST_CASE("metal sampling: softmax is qk::sampling::softmax bit for bit")
{
    std::mt19937 rng(2);
    for (const std::size_t n : {1u, 5u, 1023u, 1024u, 1025u, 32000u}) {
        const std::size_t n_seq = n == 32000 ? 2 : 4;
        std::vector<float> m;
        for (std::size_t r = 0; r < n_seq; ++r) {
            const auto row = make_row(rng, n, static_cast<int>(n_seq == 2 ? 3 * r : r));
            m.insert(m.end(), row.begin(), row.end());
        }
        std::vector<mh::row_plan> plans(n_seq, plan_with(mh::active | mh::max | mh::sums | mh::store_exp | mh::scale));
        device_state g(m, n_seq, n, plans, 32, 256);
        g.run_all(mh::mode::read);
        std::vector<std::vector<float>> chunk_sums(n_seq); // the host's, from the weights before scale
        for (std::size_t r = 0; r < n_seq; ++r) {
            if (g.result(r)[mh::status_word] == mh::ok) {
                chunk_sums[r] = g.row_sums(r);
                const double total = mh::total_of(chunk_sums[r]);
                g.results[r * mh::result_words + mh::factor_bits] = mh::bits(mh::softmax_factor(total));
            }
        }
        g.run(mh::scale_dispatch(n_seq, n, 32));
        for (std::size_t r = 0; r < n_seq; ++r) {
            CAPTURE(n);
            CAPTURE(r);
            const auto row = std::span<const float>(m).subspan(r * n, n);
            std::vector<float> want(n);
            std::vector<float> sums;
            const bool written = qs::softmax<qk::arch::generic>(row, want, sums);
            REQUIRE(written == (g.result(r)[mh::status_word] == mh::ok));
            if (!written) {
                continue;
            }
            REQUIRE(chunk_sums[r].size() == sums.size());
            for (std::size_t c = 0; c < sums.size(); ++c) {
                REQUIRE(same_bits(chunk_sums[r][c], sums[c]));
            }
            const auto p = g.row_exps(r);
            std::size_t subnormals = 0;
            for (std::size_t i = 0; i < n; ++i) {
                REQUIRE(same_bits(p[i], want[i]));
                subnormals += std::fpclassify(want[i]) == FP_SUBNORMAL ? 1 : 0;
            }
            if (n == 32000 && r == 1) {
                CHECK(subnormals > 0); // the wide row exercises the subnormal products
            }
        }
    }
}

TEST_CASE("metal sampling: top-k is the CPU's sorted top_k list")
{
    std::mt19937 rng(3);
    for (const std::size_t n : {1u, 5u, 1023u, 1025u, 32000u}) {
        for (const std::size_t k : {1u, 5u, 40u, 256u}) {
            if (k > n || (n == 32000 && k != 40)) {
                continue;
            }
            const std::size_t n_seq = n == 32000 ? 1 : 4;
            std::vector<float> m;
            for (std::size_t r = 0; r < n_seq; ++r) {
                const auto row = make_row(rng, n, static_cast<int>(n == 32000 ? 1 : r));
                m.insert(m.end(), row.begin(), row.end());
            }
            std::vector<mh::row_plan> plans(n_seq, plan_with(mh::active | mh::top_k));
            for (auto& p : plans) {
                p.k = static_cast<std::uint32_t>(k);
            }
            device_state g(m, n_seq, n, plans, 32, 256);
            g.run_all(mh::mode::read);
            for (std::size_t r = 0; r < n_seq; ++r) {
                CAPTURE(n);
                CAPTURE(k);
                CAPTURE(r);
                std::vector<qs::token_data> want;
                qs::detail::top_k_scan<qk::arch::generic>(m.data() + r * n, n, k, want, [](std::size_t) { return false; });
                REQUIRE(g.result(r)[mh::list_size] == k);
                const auto got = g.row_list(r, k);
                for (std::size_t i = 0; i < k; ++i) {
                    REQUIRE(got[i].id == want[i].id);
                    REQUIRE(same_bits(got[i].logit, want[i].logit));
                }
            }
        }
    }
}

TEST_CASE("metal sampling: temperature and logit biases change logits as the CPU samplers do")
{
    std::mt19937 rng(4);
    const std::size_t n = 1025;
    const std::size_t n_seq = 4;
    std::vector<float> m;
    for (std::size_t r = 0; r < n_seq; ++r) {
        const auto row = make_row(rng, n, static_cast<int>(r));
        m.insert(m.end(), row.begin(), row.end());
    }
    // Stage 0: a temperature per row (t <= 0 keeps the first maximum); stage 1: biases.
    const float temperatures[n_seq] = {0.7f, 1.3f, 0.0f, 3.0f};
    const std::vector<std::pair<std::int32_t, float>> biases = {{0, 2.5f}, {3, -inf}, {17, inf}, {1024, -1.25f}};
    std::vector<mh::row_plan> plans(n_seq, plan_with(mh::active));
    for (std::size_t r = 0; r < n_seq; ++r) {
        plans[r].stage.push_back(mh::temperature_op(temperatures[r]));
        mh::op b;
        b.kind = mh::bias;
        b.biases = biases;
        plans[r].stage.push_back(b);
    }
    device_state g(m, n_seq, n, plans, 32, 256);
    g.run_all(mh::mode::in_place);
    for (std::size_t r = 0; r < n_seq; ++r) {
        CAPTURE(r);
        std::vector<float> want(m.begin() + static_cast<std::ptrdiff_t>(r * n), m.begin() + static_cast<std::ptrdiff_t>((r + 1) * n));
        qs::candidates c;
        c.reset(want);
        qs::temp(temperatures[r]).apply(c);
        qs::logit_bias(biases).apply(c);
        const float* cpu = c.vocabulary_logits();
        const auto got = g.values_of(r);
        for (std::size_t i = 0; i < n; ++i) {
            REQUIRE(same_bits(got[i], cpu[i]));
        }
    }
}

TEST_CASE("metal sampling: the draw from the kernels' weights is dist's")
{
    std::mt19937 rng(5);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    for (const std::size_t n : {1u, 5u, 1023u, 1024u, 1025u, 5000u}) {
        const std::size_t n_seq = 4;
        std::vector<float> m;
        for (std::size_t r = 0; r < n_seq; ++r) {
            const auto row = make_row(rng, n, static_cast<int>(r));
            m.insert(m.end(), row.begin(), row.end());
        }
        std::vector<mh::row_plan> plans(n_seq, plan_with(mh::active | mh::max | mh::sums | mh::store_exp));
        device_state g(m, n_seq, n, plans, 32, 256);
        g.run_all(mh::mode::read);
        for (std::size_t r = 0; r < n_seq; ++r) {
            const float* x = m.data() + r * n;
            const float max = qs::detail::max_logit<qk::arch::generic>(x, n);
            if (!(max > -inf)) {
                continue;
            }
            std::vector<float> sums(qs::detail::chunk_count(n));
            const double total = qs::detail::exp_sums<qk::arch::generic>(x, n, max, sums.data());
            const auto exps = g.row_exps(r);
            for (const double u : {0.0, 0.25, 0.5, 0.999999, uniform(rng), uniform(rng), uniform(rng)}) {
                CAPTURE(n);
                CAPTURE(r);
                CAPTURE(u);
                CHECK(mh::draw(g.row_sums(r), exps, u) == qs::detail::draw<qk::arch::generic>(x, n, max, sums.data(), total, u));
            }
        }
    }
}

TEST_CASE("metal sampling: chains pick the CPU chain's token, step after step")
{
    const char* chains_text[] = {
        "dist(seed=11)",
        "temp(0.7);dist(seed=12)",
        "top_k(40);temp(0.8);dist(seed=13)",
        "logit_bias(2=5,3=-inf,1000=1.5);top_k(5);greedy",
        "temp(0);dist(seed=14)",
        "top_k(8);temp(0);dist(seed=15)",
        "top_k(30);logit_bias(1=-2.5,4=3);temp(1.7);top_k(3);dist(seed=16)",
        "greedy",
        // adaptive_p: over a list (drawn on the host from the kernel's list), over the whole row
        // (from the values after the stage ops), and disabled (dist's draws).
        "top_k(40);temp(0.9);adaptive_p(target=0.3,decay=0.9,seed=17)",
        "temp(1.5);adaptive_p(target=0.5,decay=0.5,seed=18)",
        "temp(0.8);adaptive_p(seed=19)",
        "top_k(30);adaptive_p(target=-1,seed=20)",
        "logit_bias(1=-inf);top_k(12);adaptive_p(target=0.9,decay=0.99,seed=21)",
    };
    std::mt19937 rng(6);
    for (const std::size_t n : {1u, 5u, 1023u, 1024u, 1025u, 32000u}) {
        std::vector<qs::chain> gpu_chains;
        for (const char* text : chains_text) {
            if (n <= 1000 && std::string(text).find("1000=") != std::string::npos) {
                gpu_chains.push_back(qs::chain::parse("logit_bias(2=5);top_k(5);greedy"));
            } else {
                gpu_chains.push_back(qs::chain::parse(text));
            }
        }
        if (n < 5) {
            gpu_chains[3] = qs::chain::parse("logit_bias(0=5);top_k(5);greedy");
            gpu_chains[6] = qs::chain::parse("top_k(30);logit_bias(0=-2.5);temp(1.7);top_k(3);dist(seed=16)");
            gpu_chains[12] = qs::chain::parse("top_k(12);adaptive_p(target=0.9,decay=0.99,seed=21)");
        }
        std::vector<qs::chain> cpu_chains = gpu_chains;
        const std::size_t steps = n == 32000 ? 3 : 5;
        for (std::size_t step = 0; step < steps; ++step) {
            std::vector<float> m;
            for (std::size_t r = 0; r < gpu_chains.size(); ++r) {
                const auto row = make_row(rng, n, static_cast<int>((r + step) % 2 == 0 ? 0 : 1));
                m.insert(m.end(), row.begin(), row.end());
            }
            const auto tokens = gpu_sample(gpu_chains, m, n, n >= 1024 ? 128u : 32u);
            for (std::size_t r = 0; r < cpu_chains.size(); ++r) {
                CAPTURE(n);
                CAPTURE(step);
                CAPTURE(cpu_chains[r].describe());
                const std::int32_t want = cpu_chains[r].sample(std::span<const float>(m).subspan(r * n, n));
                CHECK(tokens[r] == want);
            }
        }
        // adaptive_p's state moved as the CPU's, bit for bit: the same original probabilities
        // were accepted, and the same uniforms drawn.
        std::size_t adaptive = 0;
        for (std::size_t r = 0; r < cpu_chains.size(); ++r) {
            for (std::size_t i = 0; i < cpu_chains[r].size(); ++i) {
                if (auto* a = gpu_chains[r][i].get<qs::adaptive_p>(); a != nullptr) {
                    auto* b = cpu_chains[r][i].get<qs::adaptive_p>();
                    CAPTURE(cpu_chains[r].describe());
                    CHECK(std::bit_cast<std::uint32_t>(a->weighted_sum()) == std::bit_cast<std::uint32_t>(b->weighted_sum()));
                    CHECK(std::bit_cast<std::uint32_t>(a->total_weight()) == std::bit_cast<std::uint32_t>(b->total_weight()));
                    CHECK(a->next_uniform() == b->next_uniform());
                    ++adaptive;
                }
            }
        }
        CHECK(adaptive == 5);
    }
}

TEST_CASE("metal sampling: what the GPU cannot run is an error naming it")
{
    mh::drawing d;
    qs::chain c;
    auto plan = [&](const char* text, std::size_t n = 100, std::size_t capacity = 256) {
        c = qs::chain::parse(text);
        return mh::plan_chain(c, 0, n, capacity, d);
    };
    CHECK_THROWS_WITH_AS(plan("top_p(0.9);dist"), doctest::Contains("top_p"), qk::error);
    CHECK_THROWS_WITH_AS(plan("top_k(300);dist", 1000), doctest::Contains("GPU top-k limit of 256"), qk::error);
    CHECK_THROWS_WITH_AS(plan("logit_bias(100=1);greedy"), doctest::Contains("outside the vocabulary"), qk::error);
    CHECK_THROWS_WITH_AS(plan("greedy;temp(0.5);dist"), doctest::Contains("follows the selecting sampler"), qk::error);
    // top_k keeping everything is no list at all, as on the CPU.
    const auto p = plan("top_k(100);temp(1);dist");
    CHECK(p.flags == (mh::active | mh::max | mh::sums | mh::store_exp));
    CHECK(p.stage.empty());
    CHECK(d.dist != nullptr);
    const auto q = plan("top_k(10);temp(0.5);greedy");
    CHECK(q.flags == (mh::active | mh::top_k | mh::list));
    REQUIRE(q.list.size() == 1);
    CHECK(q.list[0].kind == mh::divide);
    CHECK(d.dist == nullptr);
    CHECK(d.adaptive == nullptr);
    // adaptive_p: a list draw with its adapted target, a host draw over the whole row, or, disabled,
    // dist's draws; the uniform is the one its next apply() would draw, its generator untouched.
    const auto a = plan("top_k(10);adaptive_p(target=0.25,decay=0.5,seed=3)");
    CHECK(a.flags == (mh::active | mh::top_k | mh::list | mh::list_dist | mh::list_adaptive));
    REQUIRE(d.adaptive != nullptr);
    CHECK(d.dist == nullptr);
    CHECK(a.target == d.adaptive->adapted_target());
    CHECK(a.target == 0.25f);
    qs::adaptive_p fresh(0.25f, 0.5f, 3);
    CHECK(a.u == fresh.next_uniform());
    CHECK(a.u == d.peek_uniform());
    CHECK(plan("temp(2);adaptive_p(target=0.25)").flags == (mh::active | mh::host_draw));
    CHECK(plan("adaptive_p(target=-1)").flags == (mh::active | mh::max | mh::sums | mh::store_exp));
    CHECK(plan("top_k(5);adaptive_p(target=-0.5)").flags == (mh::active | mh::top_k | mh::list | mh::list_dist));
    CHECK_THROWS_WITH_AS(plan("adaptive_p(target=0.5);greedy"), doctest::Contains("follows the selecting sampler"), qk::error);
}
