// qk::solve_tri on one architecture tag (QK_TEST_TAG, compiled with the tag's flags): every
// variant, float and double, held to the substitution error bounds of solve_tri_reference.hpp,
// on sizes that leave every remainder of the tag's register tile (rows and columns).
#include <doctest/doctest.h>

#include <backends/cpu/solve_tri.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "../inputs.hpp"
#include "../solve_tri_reference.hpp"

namespace {

using tag = qk::arch::QK_TEST_TAG;

} // namespace

TEST_CASE_TEMPLATE("solve_tri on this tag: every variant within the error bounds, every tile remainder", T, float, double)
{
    qk::backend::cpu::thread_pool pool(2);
    std::size_t checked = 0;
    for (int v = 0; v < 8; ++v) {
        const qk::tri_options opt{(v & 1) != 0, (v & 2) != 0, (v & 4) != 0};
        for (const std::size_t n : {1, 2, 5, 8, 9, 17, 40}) {
            for (const std::size_t k : {1, 4, 7, 16, 33, 48}) {
                CAPTURE(v);
                CAPTURE(n);
                CAPTURE(k);
                constexpr std::size_t batch = 2;
                const auto p = qk_inputs::random_tri_problem<T>(n, k, batch, opt, static_cast<std::uint32_t>(31 * n + k));
                std::vector<T> x(p.b.size());
                qk::solve_tri<tag>(p.a.data(), p.b.data(), x.data(), static_cast<std::int64_t>(n), static_cast<std::int64_t>(k), batch, opt,
                                   pool);
                for (std::size_t q = 0; q < batch; ++q) {
                    checked += qk_test::check_solution(p.a.data() + q * n * n, p.b.data() + q * n * k, x.data() + q * n * k, n, k, opt);
                }
            }
        }
    }
    MESSAGE(checked, " elements checked on ", qk::arch::name<tag>());
}

TEST_CASE("solve_tri on this tag divides correctly rounded when a pivot's reciprocal is not normal")
{
    // Pivots 3e38 (reciprocal subnormal) and 1e-39 (subnormal) send the solve down its dividing
    // path; row 0 has no other term, so each x is one IEEE division b / a.
    constexpr std::size_t n = 3;
    constexpr std::size_t k = 37;
    for (const float pivot : {3e38f, 1e-39f, 1.5f}) {
        CAPTURE(pivot);
        const std::vector<float> a = {pivot, 0.0f, 0.0f, 0.5f, 2.0f, 0.0f, 0.25f, 0.125f, 4.0f};
        std::vector<float> b(n * k);
        for (std::size_t i = 0; i < b.size(); ++i) {
            b[i] = (pivot < 1.0f && i < k ? 1e-39f : 1.0f) * (0.1f + 0.37f * static_cast<float>(i % 11));
        }
        std::vector<float> x(b.size());
        qk::solve_tri<tag>(a.data(), b.data(), x.data(), n, k, 1);
        for (std::size_t c = 0; c < k; ++c) {
            if (pivot != 1.5f) {
                CHECK(x[c] == b[c] / pivot);
            } else {
                // The reciprocal path: within one rounding of the division.
                CHECK(std::abs(x[c] - b[c] / pivot) <= std::numeric_limits<float>::epsilon() * std::abs(b[c] / pivot));
            }
        }
    }
}
