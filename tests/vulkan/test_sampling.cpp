// The Vulkan sampling ops and chains against the CPU sampler chain, which is the reference:
// argmax == greedy, softmax bit for bit, top-k lists, temperature and biases bit for bit, the
// draw, and whole chains sampled step by step over a batch with inactive sequences.
#include <doctest/doctest.h>

#include <backends/vulkan/sampling.hpp>
#include <sampling/chain.hpp>
#include <sampling/vocabulary_scan.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../gpu_reference.hpp"
#include "support.hpp"

namespace {

namespace vk = qk::backend::vulkan;
namespace qs = qk::sampling;

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float not_a_number = std::numeric_limits<float>::quiet_NaN();

std::vector<float> make_row(std::mt19937& rng, std::size_t n, int style)
{
    return qk_test::gpu::make_logits_row(rng, n, style, -120.0f);
}

std::vector<float> make_matrix(std::mt19937& rng, std::size_t n_seq, std::size_t n, int first_style)
{
    std::vector<float> m;
    for (std::size_t r = 0; r < n_seq; ++r) {
        const auto row = make_row(rng, n, static_cast<int>((static_cast<std::size_t>(first_style) + r) % 4));
        m.insert(m.end(), row.begin(), row.end());
    }
    return m;
}

std::span<const float> row_of(const std::vector<float>& m, std::size_t r, std::size_t n)
{
    return std::span<const float>(m).subspan(r * n, n);
}

bool same_bits(float a, float b)
{
    if (a != a && b != b) {
        return true; // NaN payloads are not specified
    }
    return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

const std::size_t vocab_sizes[] = {1, 5, 1023, 1024, 1025, 32000, 152064};

} // namespace

TEST_CASE("vulkan sampling: argmax is the CPU greedy's token")
{
    auto& dev = qk_test::vulkan_device();
    vk::sampling_workspace ws(dev); // per test case: it must not outlive the shared device
    std::mt19937 rng(7);
    for (const std::size_t n : vocab_sizes) {
        CAPTURE(n);
        const std::size_t n_seq = 4;
        auto m = make_matrix(rng, n_seq, n, static_cast<int>(n % 4));
        // Row 2 must keep a candidate for the CPU's greedy to accept it.
        m[2 * n + n / 2] = 1.0f;
        const auto got = vk::argmax(dev, ws, m, n_seq, n);
        for (std::size_t r = 0; r < n_seq; ++r) {
            CAPTURE(r);
            auto greedy = qs::chain::parse("greedy");
            CHECK(got[r] == greedy.sample(row_of(m, r, n)));
        }
    }
    // The maximum at the very end, after a tie: the first one wins.
    std::vector<float> m(2048, -1.0f);
    m[1500] = 2.0f;
    m[2047] = 2.0f;
    CHECK(vk::argmax(dev, ws, m, 1, 2048)[0] == 1500);
    // Inactive rows are skipped (-1), and their logits may be anything.
    std::vector<float> two = {1.0f, 3.0f, -inf, -inf};
    const std::uint8_t active[] = {1, 0};
    const auto got = vk::argmax(dev, ws, two, 2, 2, active);
    CHECK(got[0] == 1);
    CHECK(got[1] == -1);
    // As greedy: nothing above -inf, or a +inf logit, is an error.
    const std::vector<float> dead = {-inf, not_a_number, -inf};
    CHECK_THROWS_AS((void)vk::argmax(dev, ws, dead, 1, 3), qk::error);
    const std::vector<float> infinite = {0.0f, inf};
    CHECK_THROWS_AS((void)vk::argmax(dev, ws, infinite, 1, 2), qk::error);
}

TEST_CASE("vulkan sampling: softmax is qk::sampling::softmax bit for bit")
{
    auto& dev = qk_test::vulkan_device();
    vk::sampling_workspace ws(dev); // per test case: it must not outlive the shared device
    std::mt19937 rng(11);
    std::size_t subnormal = 0;
    for (const std::size_t n : vocab_sizes) {
        CAPTURE(n);
        const std::size_t n_seq = 4;
        const auto m = make_matrix(rng, n_seq, n, 0);
        std::vector<float> p(m.size(), -1.0f);
        const auto written = vk::softmax(dev, ws, m, n_seq, n, p);
        for (std::size_t r = 0; r < n_seq; ++r) {
            CAPTURE(r);
            std::vector<float> expected(n);
            std::vector<float> sums;
            const bool ok = qs::softmax(row_of(m, r, n), expected, sums);
            REQUIRE(static_cast<bool>(written[r]) == ok);
            if (!ok) {
                continue;
            }
            std::size_t differ = 0;
            for (std::size_t i = 0; i < n; ++i) {
                differ += same_bits(p[r * n + i], expected[i]) ? 0 : 1;
                subnormal += expected[i] != 0.0f && std::fabs(expected[i]) < std::numeric_limits<float>::min() ? 1 : 0;
            }
            CHECK(differ == 0);
        }
    }
    // The wide rows must have exercised the subnormal rounding.
    CHECK(subnormal > 0);
    // Nothing above -inf: not written, as on the CPU; inactive rows neither.
    std::vector<float> none = {-inf, not_a_number, 1.0f, 2.0f};
    std::vector<float> p(4, 7.0f);
    const std::uint8_t active[] = {1, 0};
    const auto written = vk::softmax(dev, ws, none, 2, 2, p, active);
    CHECK(written[0] == 0);
    CHECK(written[1] == 0);
    CHECK(p == std::vector<float>(4, 7.0f));
    const std::vector<float> infinite = {1.0f, inf};
    std::vector<float> p2(2);
    CHECK_THROWS_AS((void)vk::softmax(dev, ws, infinite, 1, 2, p2), qk::error);
}

TEST_CASE("vulkan sampling: top-k is the CPU's sorted top_k list")
{
    auto& dev = qk_test::vulkan_device();
    vk::sampling_workspace ws(dev); // per test case: it must not outlive the shared device
    std::mt19937 rng(13);
    const std::size_t capacity = ws.list_capacity();
    for (const std::size_t n : vocab_sizes) {
        const std::size_t n_seq = 4;
        const auto m = make_matrix(rng, n_seq, n, 1);
        for (const std::size_t k : {std::size_t{1}, std::size_t{5}, std::size_t{40}, std::size_t{1000}, capacity}) {
            if (k > n) {
                continue;
            }
            CAPTURE(n);
            CAPTURE(k);
            const auto lists = vk::top_k(dev, ws, m, n_seq, n, k);
            for (std::size_t r = 0; r < n_seq; ++r) {
                CAPTURE(r);
                std::vector<qs::token_data> expected;
                qs::detail::top_k_scan<qk::arch::vector_native>(m.data() + r * n, n, k, expected, [](std::size_t) { return false; });
                if (k < n) {
                    // The sampler's list is the same scan; check that too, as a user sees it.
                    qs::candidates c;
                    c.reset(row_of(m, r, n));
                    qs::top_k(static_cast<std::int32_t>(k)).apply(c);
                    REQUIRE(c.list().size() == k);
                    CHECK(c.list() == expected);
                }
                REQUIRE(lists[r].size() == k);
                std::size_t differ = 0;
                for (std::size_t i = 0; i < k; ++i) {
                    differ += lists[r][i].id == expected[i].id && same_bits(lists[r][i].logit, expected[i].logit) ? 0 : 1;
                }
                CHECK(differ == 0);
            }
        }
    }
    // All ties: the lowest ids, in order.
    std::vector<float> flat(3000, 0.5f);
    const auto l = vk::top_k(dev, ws, flat, 1, 3000, 100);
    bool in_order = true;
    for (std::size_t i = 0; i < 100; ++i) {
        in_order = in_order && l[0][i].id == static_cast<std::int32_t>(i);
    }
    CHECK(in_order);
    CHECK_THROWS_AS((void)vk::top_k(dev, ws, flat, 1, 3000, 0), qk::error);
    CHECK_THROWS_AS((void)vk::top_k(dev, ws, flat, 1, 3000, capacity + 1), qk::error);
    const std::vector<float> five(5, 0.0f);
    CHECK_THROWS_AS((void)vk::top_k(dev, ws, five, 1, 5, 6), qk::error);
}

TEST_CASE("vulkan sampling: temperature and logit biases change logits as the CPU samplers do")
{
    auto& dev = qk_test::vulkan_device();
    vk::sampling_workspace ws(dev); // per test case: it must not outlive the shared device
    std::mt19937 rng(17);
    const float temperatures[] = {0.7f, 0.3f, 1.7f, 1.0f, 0.0f, -1.0f, 0.123456789f, 3.0f};
    for (const std::size_t n : {std::size_t{1}, std::size_t{1025}, std::size_t{32000}}) {
        CAPTURE(n);
        const std::size_t n_seq = std::size(temperatures);
        auto m = make_matrix(rng, n_seq, n, 0);
        auto gpu = m;
        vk::temperature(dev, ws, gpu, n_seq, n, temperatures);
        for (std::size_t r = 0; r < n_seq; ++r) {
            CAPTURE(temperatures[r]);
            qs::candidates c;
            c.reset(row_of(m, r, n));
            qs::temp(temperatures[r]).apply(c);
            const float* expected = c.vocabulary_logits();
            std::size_t differ = 0;
            for (std::size_t i = 0; i < n; ++i) {
                differ += same_bits(gpu[r * n + i], expected[i]) ? 0 : 1;
            }
            CHECK(differ == 0);
        }

        std::vector<std::vector<std::pair<std::int32_t, float>>> biases(n_seq);
        std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(n) - 1);
        const float values[] = {2.5f, -inf, inf, -0.0f, 1e-3f, -7.25f};
        for (std::size_t r = 0; r < n_seq; ++r) {
            for (std::size_t j = 0; j < (n < 10 ? n : 10) + r; ++j) {
                const std::int32_t id = token(rng);
                bool listed = false;
                for (const auto& b : biases[r]) {
                    listed = listed || b.first == id;
                }
                if (!listed) {
                    biases[r].emplace_back(id, values[(j + r) % std::size(values)]);
                }
            }
        }
        gpu = m;
        vk::logit_bias(dev, ws, gpu, n_seq, n, biases);
        for (std::size_t r = 0; r < n_seq; ++r) {
            CAPTURE(r);
            qs::candidates c;
            c.reset(row_of(m, r, n));
            qs::logit_bias(biases[r]).apply(c);
            const float* expected = c.vocabulary_logits();
            std::size_t differ = 0;
            for (std::size_t i = 0; i < n; ++i) {
                differ += same_bits(gpu[r * n + i], expected[i]) ? 0 : 1;
            }
            CHECK(differ == 0);
        }
    }
    std::vector<float> m(4, 1.0f);
    const std::vector<std::vector<std::pair<std::int32_t, float>>> outside = {{{4, 1.0f}}};
    CHECK_THROWS_AS(vk::logit_bias(dev, ws, m, 1, 4, outside), qk::error);
    const std::vector<std::vector<std::pair<std::int32_t, float>>> twice = {{{1, 1.0f}, {1, 2.0f}}};
    CHECK_THROWS_AS(vk::logit_bias(dev, ws, m, 1, 4, twice), qk::error);
    const float one[] = {0.5f, 0.5f};
    CHECK_THROWS_AS(vk::temperature(dev, ws, m, 1, 4, one), qk::error);
}

TEST_CASE("vulkan sampling: the draw from a given uniform is dist's")
{
    auto& dev = qk_test::vulkan_device();
    vk::sampling_workspace ws(dev); // per test case: it must not outlive the shared device
    std::mt19937 rng(19);
    for (const std::size_t n : vocab_sizes) {
        CAPTURE(n);
        const std::size_t n_seq = 4;
        auto m = make_matrix(rng, n_seq, n, 0);
        m[2 * n] = 0.0f; // row 2 (with -inf and NaN) keeps a candidate
        std::vector<qs::chain> cpu;
        std::vector<double> u;
        for (std::size_t r = 0; r < n_seq; ++r) {
            cpu.push_back(qs::chain::parse("dist(seed=" + std::to_string(100 + r + n) + ")"));
            qs::dist copy = *cpu.back()[0].get<qs::dist>();
            u.push_back(copy.next_uniform());
        }
        const auto got = vk::draw(dev, ws, m, n_seq, n, u);
        for (std::size_t r = 0; r < n_seq; ++r) {
            CAPTURE(r);
            CHECK(got[r] == cpu[r].sample(row_of(m, r, n)));
        }
    }
    // The uniforms' ends: u = 0 takes the first token with weight, u just below 1 the last.
    std::vector<float> m = {-inf, 0.0f, 0.0f, -inf, 0.0f, -inf};
    const double ends[] = {0.0, 1.0 - 0x1.0p-53};
    std::vector<float> both = m;
    both.insert(both.end(), m.begin(), m.end());
    const auto got = vk::draw(dev, ws, both, 2, 6, ends);
    CHECK(got[0] == 1);
    CHECK(got[1] == 4);
}

namespace {

// Runs the same chains on the GPU and on the CPU for `steps` steps over fresh logits, with the
// active set changing every step, and checks every token.
void run_chains(vk::sampling_workspace& ws, const std::vector<std::string>& specs, std::size_t n, std::size_t steps, std::uint32_t seed)
{
    auto& dev = qk_test::vulkan_device();
    std::mt19937 rng(seed);
    std::vector<qs::chain> gpu;
    for (const auto& s : specs) {
        gpu.push_back(qs::chain::parse(s));
    }
    std::vector<qs::chain> cpu = gpu;
    const std::size_t n_seq = gpu.size();
    std::size_t pipelines = 0;
    std::size_t allocations = 0;
    std::size_t checked = 0;
    std::size_t mismatches = 0;
    for (std::size_t step = 0; step < steps; ++step) {
        auto m = make_matrix(rng, n_seq, n, static_cast<int>(step % 4));
        std::vector<std::uint8_t> active(n_seq, 1);
        for (std::size_t r = 0; r < n_seq; ++r) {
            m[r * n + (step * 7 + r) % n] = 1.0f; // every row keeps a candidate
            if (step > 0) {
                active[r] = (step + r) % 3 != 0 ? 1 : 0;
            }
        }
        const auto tokens = vk::sample(dev, ws, gpu, m, n, active);
        for (std::size_t r = 0; r < n_seq; ++r) {
            if (active[r] == 0) {
                CHECK(tokens[r] == -1);
                continue;
            }
            const std::int32_t expected = cpu[r].sample(row_of(m, r, n));
            ++checked;
            if (tokens[r] != expected) {
                ++mismatches;
                INFO("chain '", specs[r], "' step ", step, " n ", n);
                CHECK(tokens[r] == expected);
            }
        }
        if (step == 0) {
            pipelines = dev.pipelines_built();
            allocations = ws.allocations();
        }
    }
    CHECK(checked > steps);
    CHECK(mismatches == 0);
    // A batch with other active sets reuses the same pipelines and buffers.
    CHECK(dev.pipelines_built() == pipelines);
    CHECK(ws.allocations() == allocations);
    // The chains' generators moved exactly as the CPU's: the next draws agree.
    for (std::size_t r = 0; r < n_seq; ++r) {
        for (std::size_t i = 0; i < gpu[r].size(); ++i) {
            if (auto* d = gpu[r][i].get<qs::dist>(); d != nullptr) {
                CHECK(d->next_uniform() == cpu[r][i].get<qs::dist>()->next_uniform());
            }
            // adaptive_p accepted the same original probabilities, bit for bit.
            if (auto* a = gpu[r][i].get<qs::adaptive_p>(); a != nullptr) {
                const auto* b = cpu[r][i].get<qs::adaptive_p>();
                INFO("chain '", specs[r], "' n ", n);
                CHECK(std::bit_cast<std::uint32_t>(a->weighted_sum()) == std::bit_cast<std::uint32_t>(b->weighted_sum()));
                CHECK(std::bit_cast<std::uint32_t>(a->total_weight()) == std::bit_cast<std::uint32_t>(b->total_weight()));
                CHECK(a->next_uniform() == cpu[r][i].get<qs::adaptive_p>()->next_uniform());
            }
        }
    }
}

} // namespace

TEST_CASE("vulkan sampling: chains pick the CPU chain's token, step after step")
{
    const std::vector<std::string> specs = {
        "dist(seed=1)",
        "temp(0.7);dist(seed=2)",
        "top_k(40);temp(0.8);dist(seed=3)",
        "logit_bias(3=-inf,10=2.5,0=1.25);top_k(5);greedy",
        "temp(0);dist(seed=5)",
        "greedy",
        "logit_bias(1=-inf,2=3.5);temp(0.5);top_k(300);logit_bias(7=-2,8=4.5);temp(1.3);top_k(12);dist(seed=7)",
        "top_k(1000);temp(0);dist(seed=8)",
        "top_k(2);top_k(0);temp(1);temp(2);dist(seed=9)",
        "top_k(50);temp(0.9);top_k(60);top_k(7);greedy",
        // adaptive_p: drawn by the kernel over a list, on the host over the whole row, disabled.
        "top_k(40);temp(0.9);adaptive_p(target=0.3,decay=0.9,seed=10)",
        "logit_bias(1=-inf,2=3.5);top_k(300);temp(1.3);adaptive_p(target=0.05,decay=0.5,seed=11)",
        "top_k(1000);adaptive_p(target=0.9,decay=0.99,seed=12)",
        "temp(1.5);adaptive_p(target=0.5,decay=0.5,seed=13)",
        "temp(0.8);adaptive_p(seed=14)",
        "top_k(30);adaptive_p(target=-1,seed=15)",
    };
    vk::sampling_workspace ws(qk_test::vulkan_device());
    SUBCASE("n_vocab 1025") { run_chains(ws, specs, 1025, 60, 23); }
    SUBCASE("n_vocab 32000") { run_chains(ws, specs, 32000, 20, 29); }
    SUBCASE("n_vocab 152064") { run_chains(ws, specs, 152064, 6, 31); }
    SUBCASE("n_vocab 5 and 1") {
        run_chains(ws,
                   {"dist(seed=4)", "top_k(3);dist(seed=6)", "temp(0.4);greedy", "top_k(40);dist(seed=1)",
                    "top_k(3);adaptive_p(target=0.2,seed=2)", "adaptive_p(target=0.6,seed=3)"},
                   5, 20, 37);
        run_chains(ws, {"dist(seed=4)", "top_k(3);temp(0.1);dist(seed=6)", "adaptive_p(target=0.4,seed=5)"}, 1, 5, 41);
    }
}

// A list draw is decided by the list's probabilities to the last bit only near the boundary
// between two tokens: one logit moved an ulp at a time across the point where the CPU's token
// changes, 64 rows straddling it. A GPU whose probabilities differ from compute_probabilities'
// (its exponentials, the order or width of its sum, its reciprocal) moves the point.
TEST_CASE("vulkan sampling: list draws straddling the boundary between two tokens are the CPU's, ulp for ulp")
{
    auto& dev = qk_test::vulkan_device();
    vk::sampling_workspace ws(dev);
    std::mt19937 rng(43);
    const std::size_t n = 300;
    const std::size_t rows = 64;
    // adaptive_p's draw also rests on its transform of each probability and its second softmax.
    for (const std::string selector : {"dist(", "adaptive_p(target=0.2,decay=0.9,"}) {
    std::size_t boundaries = 0;
    for (std::uint32_t scenario = 0; scenario < 48; ++scenario) {
        CAPTURE(scenario);
        const std::string spec = "top_k(40);" + selector + "seed=" + std::to_string(500 + scenario) + ")";
        CAPTURE(spec);
        const qs::chain prototype = qs::chain::parse(spec);
        auto base = make_matrix(rng, 1, n, 0);
        const auto cpu_token = [&](const std::vector<float>& x) {
            qs::chain c = prototype; // the same generator state, so the same u
            return c.sample(x);
        };
        // The chosen token's logit, lowered until the token changes: the flip lies between two
        // adjacent floats, found by bisection.
        // The rows shifted so that the chosen token's logit is near 0, where its float steps are
        // finer than the float steps of its probability.
        const std::int32_t first = cpu_token(base);
        const float shift = base[static_cast<std::size_t>(first)] - 0.25f;
        for (auto& v : base) {
            v -= shift;
        }
        const std::int32_t chosen = cpu_token(base);
        const auto at = static_cast<std::size_t>(chosen);
        const float high = base[at];
        std::vector<float> x = base;
        x[at] = high - 0.5f;
        if (cpu_token(x) == chosen) {
            continue; // it stays chosen: no boundary below it
        }
        // high keeps the token, low does not; bisected until they are adjacent floats.
        float low = high - 0.5f;
        float top = high;
        while (std::nextafter(low, top) != top) {
            const auto mid = static_cast<float>((static_cast<double>(low) + static_cast<double>(top)) / 2);
            x[at] = mid;
            (cpu_token(x) == chosen ? top : low) = mid;
        }
        ++boundaries;
        std::vector<float> m;
        std::vector<qs::chain> gpu;
        std::vector<std::int32_t> expected;
        float v = low;
        for (std::size_t k = 0; k < rows / 2 - 1; ++k) {
            v = std::nextafter(v, -std::numeric_limits<float>::infinity());
        }
        for (std::size_t r = 0; r < rows; ++r, v = std::nextafter(v, std::numeric_limits<float>::infinity())) {
            x = base;
            x[at] = v;
            m.insert(m.end(), x.begin(), x.end());
            gpu.push_back(prototype);
            expected.push_back(cpu_token(x));
        }
        const auto tokens = vk::sample(dev, ws, gpu, m, n, std::vector<std::uint8_t>(rows, 1));
        std::size_t chosen_rows = 0;
        for (std::size_t r = 0; r < rows; ++r) {
            CAPTURE(r);
            CHECK(tokens[r] == expected[r]);
            chosen_rows += expected[r] == chosen ? 1 : 0;
        }
        CHECK(chosen_rows > 0); // the rows do straddle the flip
        CHECK(chosen_rows < rows);
    }
    CAPTURE(selector);
    CHECK(boundaries >= 24);
    }
}

TEST_CASE("vulkan sampling: what the GPU cannot run, and bad shapes, are errors that change no chain")
{
    auto& dev = qk_test::vulkan_device();
    vk::sampling_workspace ws(dev); // per test case: it must not outlive the shared device
    const std::size_t n = 64;
    std::vector<float> m(2 * n, 0.5f);
    m[3] = 2.0f;

    std::vector<qs::chain> chains = {qs::chain::parse("dist(seed=1)"), qs::chain::parse("top_p(0.9);dist(seed=2)")};
    try {
        (void)vk::sample(dev, ws, chains, m, n);
        FAIL("top_p must be refused");
    } catch (const qk::error& e) {
        CHECK(std::string(e.what()).find("top_p") != std::string::npos);
    }
    chains[1] = qs::chain::parse(qk::detail::message("top_k(", ws.list_capacity() + 1, ");greedy"));
    std::vector<float> big(2 * 5000, 0.0f);
    try {
        (void)vk::sample(dev, ws, chains, big, 5000);
        FAIL("a k above the capacity must be refused");
    } catch (const qk::error& e) {
        CHECK(std::string(e.what()).find("top_k") != std::string::npos);
    }
    chains[1] = qs::chain::parse("greedy;dist(seed=2)");
    CHECK_THROWS_AS((void)vk::sample(dev, ws, chains, m, n), qk::error);
    chains[1] = qs::chain::parse("logit_bias(64=1);greedy");
    CHECK_THROWS_AS((void)vk::sample(dev, ws, chains, m, n), qk::error);

    chains[1] = qs::chain::parse("dist(seed=2)");
    const std::vector<qs::chain> before = chains;
    const std::vector<float> short_by_one(2 * n - 1, 0.0f);
    CHECK_THROWS_AS((void)vk::sample(dev, ws, chains, short_by_one, n), qk::error);
    const std::uint8_t three[] = {1, 1, 1};
    CHECK_THROWS_AS((void)vk::sample(dev, ws, chains, m, n, three), qk::error);
    CHECK_THROWS_AS((void)vk::sample(dev, ws, chains, m, 0), qk::error);
    // A row with nothing to sample fails the whole batch before any chain moves.
    std::vector<float> dead = m;
    for (std::size_t i = n; i < 2 * n; ++i) {
        dead[i] = i % 2 == 0 ? -inf : not_a_number;
    }
    CHECK_THROWS_AS((void)vk::sample(dev, ws, chains, dead, n), qk::error);
    chains[1] = qs::chain::parse("logit_bias(5=inf);dist(seed=2)");
    CHECK_THROWS_AS((void)vk::sample(dev, ws, chains, m, n), qk::error);
    chains[1] = before[1];
    for (std::size_t r = 0; r < 2; ++r) {
        qs::chain cpu = before[r];
        const auto tokens = vk::sample(dev, ws, chains, m, n);
        CHECK(tokens[r] == cpu.sample(row_of(m, r, n)));
        CHECK(chains[r][0].get<qs::dist>()->next_uniform() == cpu[0].get<qs::dist>()->next_uniform());
        chains = before;
    }
}
