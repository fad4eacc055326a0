// Dot products against an exact double-precision reference, with a tolerance derived from float
// summation, and the native tag against the generic reference on the same inputs.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "test_support.hpp"

using namespace qk_test;

namespace {

// The exact dot of the dequantized rows, and the sum of |terms| that bounds the rounding error.
struct exact_dot {
    double value = 0;
    double magnitude = 0;
};

template <class Block>
exact_dot exact(const std::vector<Block>& w, const std::vector<typename qk::format_traits<Block>::vec_dot_type>& a)
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    std::vector<float> wf(w.size() * qk::format_traits<Block>::block_size);
    std::vector<float> af(a.size() * qk::format_traits<activation>::block_size);
    qk::dequantize<Block>(w, wf);
    qk::dequantize<activation>(a, af);
    exact_dot result;
    for (std::size_t i = 0; i < wf.size(); ++i) {
        const double term = static_cast<double>(wf[i]) * static_cast<double>(af[i]);
        result.value += term;
        result.magnitude += std::fabs(term);
    }
    return result;
}

} // namespace

TEST_CASE_TEMPLATE_DEFINE("dot equals the exact dot of the decoded rows up to float rounding", Block, dot_equals_exact_dot_decoded)
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    for (std::size_t n : {256u, 512u, 4096u, 14336u}) {
        CAPTURE(n);
        const auto w = qk::quantize<Block>(std::span<const float>(normal(n, 0.02f, static_cast<std::uint32_t>(n))));
        const auto a = qk::quantize<activation>(std::span<const float>(normal(n, 3.0f, static_cast<std::uint32_t>(n + 1))));
        const auto reference = exact(w, a);
        // Each block's integer sum is exact; its scale d (a product of two floats, or three for
        // IQ4_XS) carries up to 3 roundings, the term d * sum one more, and the running sum one
        // per block: relative error per term at most (4 + blocks) * 2^-24 of the |terms| total.
        // (Scaled sums per block: IQ4_XS has 8 groups and NVFP4 4 sub-blocks per block.)
        const std::size_t sums_per_block = std::is_same_v<Block, qk::block_iq4_xs> ? 8 : std::is_same_v<Block, qk::block_nvfp4> ? 4 : 1;
        const double blocks = static_cast<double>(w.size() * sums_per_block);
        const double tolerance = (4.0 + blocks) * 0x1p-24 * reference.magnitude;
        const float generic = qk::dot<Block, qk::arch::generic>(w, a);
        const float native = qk::dot<Block>(w, a);
        CHECK(std::fabs(generic - reference.value) <= tolerance);
        CHECK(std::fabs(native - reference.value) <= tolerance);
        CHECK(reference.magnitude > 0);
    }
}
TEST_CASE_TEMPLATE_APPLY(dot_equals_exact_dot_decoded, qk::weight_formats::tuple);

TEST_CASE_TEMPLATE_DEFINE("dot checks that both rows have the same length", Block, dot_checks_that_both_rows)
{
    using activation = typename qk::format_traits<Block>::vec_dot_type;
    const std::vector<Block> w(3);
    const std::vector<activation> a(2);
    CHECK_THROWS_WITH_AS((void)qk::dot<Block>(w, a), doctest::Contains("w has 3 blocks"), qk::error);
    CHECK_THROWS_WITH_AS((void)qk::dot<Block>(w, a), doctest::Contains("a has 2"), qk::error);
    CHECK(qk::dot<Block>(std::span<const Block>(), std::span<const activation>()) == 0.0f);
}
TEST_CASE_TEMPLATE_APPLY(dot_checks_that_both_rows, qk::weight_formats::tuple);

TEST_CASE("dot propagates non-finite scales as IEEE arithmetic does")
{
    // Blocks read from a file may hold an infinite fp16 scale; the product is then infinite or
    // NaN, never a crash.
    std::vector<qk::block_q8_0> w(1);
    std::vector<qk::block_q8_0> a(1);
    w[0].d = 0x7c00; // +inf
    a[0].d = qk::fp32_to_fp16(1.0f);
    w[0].qs.fill(1);
    a[0].qs.fill(1);
    CHECK(std::isinf(qk::dot<qk::block_q8_0>(w, a)));
    a[0].qs.fill(0);
    CHECK(std::isnan(qk::dot<qk::block_q8_0>(w, a)));
}

// The one list of tags, spelled out here independently: each architecture's tags, lowest first.
#if QK_HAS_X86_KERNELS
static_assert(std::is_same_v<qk::arch::all, qk::arch::tag_list<qk::arch::generic, qk::arch::sse4_2, qk::arch::avx2, qk::arch::avx512bw,
                                                               qk::arch::avx512vnni, qk::arch::avx512vbmi>>);
#elif QK_HAS_ARM_KERNELS
static_assert(std::is_same_v<qk::arch::all, qk::arch::tag_list<qk::arch::generic, qk::arch::neon64, qk::arch::neon64_dotprod>>);
#endif

TEST_CASE("tag names are the tags' C++ names, and runs() by name agrees with runs<Tag>()")
{
    const auto& cpu = qk::running_cpu();
    std::vector<std::string> names;
    qk::arch::all::for_each([&]<class Tag>(Tag) {
        names.emplace_back(qk::arch::name<Tag>());
        CHECK(qk::runs(qk::arch::name<Tag>(), cpu) == qk::runs<Tag>(cpu));
    });
#if QK_HAS_X86_KERNELS
    CHECK(names == std::vector<std::string>{"generic", "sse4_2", "avx2", "avx512bw", "avx512vnni", "avx512vbmi"});
#elif QK_HAS_ARM_KERNELS
    CHECK(names == std::vector<std::string>{"generic", "neon64", "neon64_dotprod"});
#endif
    CHECK_FALSE(qk::runs("sse4.2", cpu)); // one spelling only
    CHECK_FALSE(qk::runs("", cpu));
    CHECK(qk::runs("generic", cpu));
}

TEST_CASE("run-time dispatch picks the best tag this CPU runs and calls that tag's kernel")
{
    const auto& cpu = qk::running_cpu();
    const std::string chosen = qk::dispatch([&]<class Tag>(Tag) {
        CHECK(qk::runs<Tag>(cpu));
        return std::string(qk::arch::name<Tag>());
    });
    MESSAGE("dispatch chose " << chosen);
    const auto w = qk::quantize<qk::block_iq4_xs>(std::span<const float>(normal(2048, 0.1f, 5)));
    const auto a = qk::quantize<qk::block_q8_K>(std::span<const float>(normal(2048, 1.0f, 6)));
    const float dispatched = qk::dispatch([&]<class Tag>(Tag) { return qk::dot<qk::block_iq4_xs, Tag>(w, a); });

    // The best of the tags this CPU runs, found without dispatch (the last runnable one of the
    // list, lowest first), and its kernel called by name.
    std::string best = "generic";
    float direct = qk::dot<qk::block_iq4_xs, qk::arch::generic>(w, a);
    qk::for_each_runnable(cpu, [&]<class Tag>(Tag) {
        best = qk::arch::name<Tag>();
        direct = qk::dot<qk::block_iq4_xs, Tag>(w, a);
    });
#if QK_HAS_X86_KERNELS
    CHECK(best != "generic"); // every x86-64 machine this suite runs on has SSE4.2
#endif
    CHECK(chosen == best);
    CHECK(bits(dispatched) == bits(direct));
}
