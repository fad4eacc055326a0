// qk::solve_tri: every variant in float and double against a double-precision reference with
// derived error bounds (solve_tri_reference.hpp), ggml's golden solves, thread counts, strided and
// broadcast views, in-place solves, non-finite values, and every error path (nothing written).
#include <doctest/doctest.h>

#include <backends/cpu/solve_tri.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "inputs.hpp"
#include "solve_tri_reference.hpp"
#include "test_support.hpp"

using namespace qk_test;
using qk::backend::cpu::thread_pool;
using qk::tri_options;

namespace {

std::vector<tri_options> all_variants()
{
    std::vector<tri_options> variants;
    for (int v = 0; v < 8; ++v) {
        variants.push_back({(v & 1) != 0, (v & 2) != 0, (v & 4) != 0});
    }
    return variants;
}

std::string describe(const tri_options& opt)
{
    return std::string(opt.left ? "left" : "right") + (opt.lower ? ", lower" : ", upper") + (opt.unit ? ", unit" : ", non-unit");
}

// B and X hold n x k (left) or k x n (right) per batch: n * k either way.
template <class T>
std::vector<T> solve(const qk_inputs::tri_problem_data<T>& p, std::size_t n, std::size_t k, std::size_t batch, const tri_options& opt,
                     thread_pool* pool = nullptr)
{
    std::vector<T> x(n * k * batch, std::numeric_limits<T>::quiet_NaN());
    const auto ni = static_cast<std::int64_t>(n);
    const auto ki = static_cast<std::int64_t>(k);
    const auto bi = static_cast<std::int64_t>(batch);
    if (pool != nullptr) {
        qk::solve_tri(p.a.data(), p.b.data(), x.data(), ni, ki, bi, opt, *pool);
    } else {
        qk::solve_tri(p.a.data(), p.b.data(), x.data(), ni, ki, bi, opt);
    }
    return x;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b)
{
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

} // namespace

TEST_CASE_TEMPLATE("solve_tri: every variant within the substitution error bounds of a double-precision reference", T, float, double)
{
    std::size_t checked = 0;
    for (const tri_options& opt : all_variants()) {
        for (const std::size_t n : {1, 2, 3, 5, 6, 7, 8, 9, 13, 32, 65}) {
            for (const std::size_t k : {1, 3, 8, 16, 17, 40}) {
                const std::size_t batch = n * k < 200 ? 3 : 1;
                CAPTURE(describe(opt));
                CAPTURE(n);
                CAPTURE(k);
                const auto p = qk_inputs::random_tri_problem<T>(n, k, batch, opt, static_cast<std::uint32_t>(n * 1000 + k));
                const std::vector<T> x = solve(p, n, k, batch, opt);
                for (std::size_t q = 0; q < batch; ++q) {
                    checked += check_solution(p.a.data() + q * n * n, p.b.data() + q * n * k, x.data() + q * n * k, n, k, opt);
                }
            }
        }
    }
    MESSAGE(checked, " elements checked");
}

TEST_CASE_TEMPLATE("solve_tri: every k from 1 to 40 (wide, narrow and partial column tiles), in place and on strided rows", T, float,
                   double)
{
    // The column tiles are chosen from k (wide ones, then one-vector ones, the last partial), so
    // every k up to past two vectors of AVX-512 floats; n = 16 is a whole narrow block of rows,
    // n = 21 leaves a remainder. Strided: B's and X's rows padded by 3, each system read and
    // written where it lies, in place too.
    std::size_t checked = 0;
    for (const tri_options& opt : all_variants()) {
        for (const std::size_t n : {3, 16, 21}) {
            for (std::size_t k = 1; k <= 40; ++k) {
                CAPTURE(describe(opt));
                CAPTURE(n);
                CAPTURE(k);
                constexpr std::size_t batch = 2;
                const auto p = qk_inputs::random_tri_problem<T>(n, k, batch, opt, static_cast<std::uint32_t>(n * 100 + k));
                const std::vector<T> x = solve(p, n, k, batch, opt);
                for (std::size_t q = 0; q < batch; ++q) {
                    checked += check_solution(p.a.data() + q * n * n, p.b.data() + q * n * k, x.data() + q * n * k, n, k, opt);
                }

                std::vector<T> in_place = p.b;
                qk::solve_tri(p.a.data(), in_place.data(), in_place.data(), static_cast<std::int64_t>(n), static_cast<std::int64_t>(k),
                              static_cast<std::int64_t>(batch), opt);
                CHECK(same_bits(x, in_place));

                const auto rows = static_cast<std::int64_t>(opt.left ? n : k);
                const auto cols = static_cast<std::int64_t>(opt.left ? k : n);
                const std::int64_t row = cols + 3;
                constexpr auto f = static_cast<std::int64_t>(sizeof(T));
                std::vector<T> padded(static_cast<std::size_t>(row * rows) * batch, std::numeric_limits<T>::quiet_NaN());
                for (std::int64_t q = 0; q < static_cast<std::int64_t>(batch); ++q) {
                    for (std::int64_t r = 0; r < rows; ++r) {
                        std::copy_n(p.b.begin() + (q * rows + r) * cols, cols, padded.begin() + (q * rows + r) * row);
                    }
                }
                const std::vector<T> padded_b = padded;
                const qk::tensor_view<T> X{padded.data(), {cols, rows, static_cast<std::int64_t>(batch), 1}, {f, f * row, f * row * rows, 0}};
                const auto ni = static_cast<std::int64_t>(n);
                qk::solve_tri(qk::tensor_view<const T>::contiguous(p.a.data(), ni, ni, static_cast<std::int64_t>(batch)), X, X, opt);
                bool same = true;
                for (std::size_t i = 0; i < padded.size(); ++i) {
                    const auto r = static_cast<std::int64_t>(i) / row;
                    const auto c = static_cast<std::int64_t>(i) % row;
                    const T expected = c < cols ? x[static_cast<std::size_t>(r * cols + c)] : padded_b[i];
                    same &= std::memcmp(&padded[i], &expected, sizeof(T)) == 0;
                }
                CHECK(same);
            }
        }
    }
    MESSAGE(checked, " elements checked");
}

TEST_CASE("solve_tri reproduces ggml's golden solves (left, lower, non-unit)" * doctest::skip(!golden_present()))
{
    struct golden_case {
        std::size_t n, k, batch;
    };
    const golden_case cases[] = {{5, 3, 2}, {32, 7, 3}, {64, 64, 1}};
    for (std::size_t c = 0; c < std::size(cases); ++c) {
        const std::size_t n = cases[c].n;
        const std::size_t k = cases[c].k;
        const std::size_t batch = cases[c].batch;
        const std::string prefix = "solve_tri." + std::to_string(c) + ".";
        const auto a = load<float>(prefix + "A.f32");
        const auto b = load<float>(prefix + "B.f32");
        const auto expected = load<float>(prefix + "X.f32");
        REQUIRE(a.size() == n * n * batch);
        REQUIRE(b.size() == n * k * batch);
        REQUIRE(expected.size() == n * k * batch);
        std::vector<float> x(b.size());
        qk::solve_tri(a.data(), b.data(), x.data(), static_cast<std::int64_t>(n), static_cast<std::int64_t>(k),
                      static_cast<std::int64_t>(batch));
        // ggml's own rounding depends on how g++ vectorised its loop (golden/README.md): compare
        // within 1e-5 of max |X|, the tolerance its authors give, and hold both to the bounds.
        float largest = 0;
        for (const float v : expected) {
            largest = std::max(largest, std::abs(v));
        }
        for (std::size_t i = 0; i < x.size(); ++i) {
            INFO("golden case ", c, ", element ", i);
            REQUIRE(std::abs(x[i] - expected[i]) <= 1e-5f * largest);
        }
        for (std::size_t q = 0; q < batch; ++q) {
            check_solution(a.data() + q * n * n, b.data() + q * n * k, x.data() + q * n * k, n, k, {});
            check_solution(a.data() + q * n * n, b.data() + q * n * k, expected.data() + q * n * k, n, k, {});
        }
    }
}

TEST_CASE("solve_tri gives the same bits on any thread count and for in-place solves")
{
    thread_pool two(2);
    thread_pool three(3);
    for (const tri_options& opt : all_variants()) {
        for (const auto& shape : {std::array<std::size_t, 3>{64, 64, 5}, {16, 16, 40}, {33, 100, 2}, {7, 1, 9}}) {
            const std::size_t n = shape[0];
            const std::size_t k = shape[1];
            const std::size_t batch = shape[2];
            CAPTURE(describe(opt));
            CAPTURE(n);
            CAPTURE(k);
            const auto p = qk_inputs::random_tri_problem<float>(n, k, batch, opt, 7);
            const std::vector<float> single = solve(p, n, k, batch, opt);
            CHECK(same_bits(single, solve(p, n, k, batch, opt, &two)));
            CHECK(same_bits(single, solve(p, n, k, batch, opt, &three)));
            // In place: X is B.
            std::vector<float> in_place = p.b;
            qk::solve_tri(p.a.data(), in_place.data(), in_place.data(), static_cast<std::int64_t>(n), static_cast<std::int64_t>(k),
                          static_cast<std::int64_t>(batch), opt, two);
            CHECK(same_bits(single, in_place));
        }
    }
}

TEST_CASE("solve_tri on strided views: padded rows, a column slice, two batch dimensions, A broadcast")
{
    // A: 2 x 1 batches broadcast over B's 2 x 3; each n x n matrix stored in rows of n + 3.
    constexpr std::int64_t n = 19;
    constexpr std::int64_t k = 21;
    constexpr std::int64_t a_row = n + 3;
    for (const tri_options& opt : all_variants()) {
        CAPTURE(describe(opt));
        const auto p = qk_inputs::random_tri_problem<float>(n, k, 2, opt, 11);
        std::vector<float> a_storage(static_cast<std::size_t>(a_row * n * 2), std::numeric_limits<float>::quiet_NaN());
        for (std::int64_t q = 0; q < 2; ++q) {
            for (std::int64_t i = 0; i < n; ++i) {
                for (std::int64_t j = 0; j < n; ++j) {
                    a_storage[static_cast<std::size_t>((q * n + i) * a_row + j)] = p.a[static_cast<std::size_t>((q * n + i) * n + j)];
                }
            }
        }
        constexpr std::int64_t f = sizeof(float);
        const qk::tensor_view<const float> A{a_storage.data(), {n, n, 2, 1}, {f, f * a_row, f * a_row * n, 0}};

        // B: the k x n (left: n x k) system of each batch is a slice of a wider buffer; for right
        // solves B is taken transposed out of a column-major buffer, to exercise every stride.
        const std::int64_t rows = opt.left ? n : k;
        const std::int64_t cols = opt.left ? k : n;
        const std::int64_t b_row = cols + 5;
        std::vector<float> b_storage(static_cast<std::size_t>(b_row * rows * 6));
        const std::vector<float> dense_b = qk_inputs::uniform(static_cast<std::size_t>(rows * cols * 6), -1.0f, 1.0f, 5);
        for (std::int64_t q = 0; q < 6; ++q) {
            for (std::int64_t r = 0; r < rows; ++r) {
                for (std::int64_t c = 0; c < cols; ++c) {
                    b_storage[static_cast<std::size_t>((q * rows + r) * b_row + c + 2)] =
                        dense_b[static_cast<std::size_t>((q * rows + r) * cols + c)];
                }
            }
        }
        // ne = {cols, rows, 2, 3}: dimension 2 is the inner batch dimension.
        const qk::tensor_view<const float> B{b_storage.data() + 2, {cols, rows, 2, 3}, {f, f * b_row, f * b_row * rows, 2 * f * b_row * rows}};
        // X: column-major inside each batch (nb0 > nb1), so its rows are strided.
        std::vector<float> x_storage(static_cast<std::size_t>(rows * cols * 6), -1.0f);
        const qk::tensor_view<float> X{x_storage.data(), {cols, rows, 2, 3}, {f * rows, f, f * rows * cols, 2 * f * rows * cols}};

        qk::solve_tri(A, B, X, opt);

        // The same problems, dense: batch q of B uses A's batch (q % 2) (A.ne[2] = 2 = B.ne[2]).
        for (std::int64_t q3 = 0; q3 < 3; ++q3) {
            for (std::int64_t q2 = 0; q2 < 2; ++q2) {
                const std::int64_t q = q2 + 2 * q3;
                std::vector<float> expected(static_cast<std::size_t>(rows * cols));
                qk::solve_tri(p.a.data() + q2 * n * n, dense_b.data() + q * rows * cols, expected.data(), n, k, 1, opt);
                for (std::int64_t r = 0; r < rows; ++r) {
                    for (std::int64_t c = 0; c < cols; ++c) {
                        INFO("batch (", q2, ", ", q3, ") element (", r, ", ", c, ")");
                        REQUIRE(X.at(c, r, q2, q3) == expected[static_cast<std::size_t>(r * cols + c)]);
                    }
                }
            }
        }
    }
}

TEST_CASE("solve_tri broadcasts one A over every batch, through ne = 1 and through a zero stride")
{
    constexpr std::int64_t n = 10;
    constexpr std::int64_t k = 4;
    constexpr std::int64_t f = sizeof(float);
    const auto p = qk_inputs::random_tri_problem<float>(n, k, 6, {}, 3);
    std::vector<float> expected(p.b.size());
    std::vector<float> a6;
    for (int q = 0; q < 6; ++q) {
        a6.insert(a6.end(), p.a.begin(), p.a.begin() + n * n);
    }
    qk::solve_tri(a6.data(), p.b.data(), expected.data(), n, k, 6);

    const auto B = qk::tensor_view<const float>::contiguous(p.b.data(), k, n, 3, 2);
    std::vector<float> x1(p.b.size());
    qk::solve_tri(qk::tensor_view<const float>::contiguous(p.a.data(), n, n), B, qk::tensor_view<float>::contiguous(x1.data(), k, n, 3, 2));
    CHECK(same_bits(expected, x1));
    std::vector<float> x2(p.b.size());
    qk::solve_tri(qk::tensor_view<const float>{p.a.data(), {n, n, 3, 2}, {f, f * n, 0, 0}}, B, qk::tensor_view<float>::contiguous(x2.data(), k, n, 3, 2));
    CHECK(same_bits(expected, x2));
}

TEST_CASE("solve_tri never reads the other triangle, nor the diagonal of a unit solve")
{
    for (const tri_options& opt : all_variants()) {
        CAPTURE(describe(opt));
        constexpr std::size_t n = 23;
        constexpr std::size_t k = 18;
        auto p = qk_inputs::random_tri_problem<double>(n, k, 2, opt, 13);
        const std::vector<double> x = solve(p, n, k, 2, opt);
        for (std::size_t q = 0; q < 2; ++q) {
            for (std::size_t i = 0; i < n; ++i) {
                for (std::size_t j = 0; j < n; ++j) {
                    const bool read = opt.lower ? j < i : j > i;
                    if (!read && (i != j || opt.unit)) {
                        p.a[(q * n + i) * n + j] = i == j ? 0.0 : std::numeric_limits<double>::quiet_NaN();
                    }
                }
            }
        }
        CHECK(same_bits(x, solve(p, n, k, 2, opt)));
    }
}

TEST_CASE("solve_tri: tiny, huge and infinite pivots divide as IEEE arithmetic does; NaN and infinity propagate")
{
    constexpr std::size_t n = 9;
    constexpr std::size_t k = 20;
    SUBCASE("subnormal and huge pivots (their reciprocals would not be normal numbers)")
    {
        auto p = qk_inputs::random_tri_problem<float>(n, k, 1, {}, 17);
        // Row 2: x = b / 1e-39 alone (no other terms, b as small), so that x stays finite.
        p.a[2 * n + 0] = 0.0f;
        p.a[2 * n + 1] = 0.0f;
        p.a[2 * n + 2] = 1e-39f; // subnormal
        for (std::size_t c = 0; c < k; ++c) {
            p.b[2 * k + c] *= 1e-39f;
        }
        p.a[5 * n + 5] = 3e38f; // its reciprocal is subnormal
        const std::vector<float> x = solve(p, n, k, 1, {});
        for (std::size_t c = 0; c < k; ++c) {
            // Row 0 has no other term: x = b / a exactly as one IEEE division.
            CHECK(x[c] == p.b[c] / p.a[0]);
        }
        check_solution(p.a.data(), p.b.data(), x.data(), n, k, {});
    }
    SUBCASE("a NaN coefficient poisons the rows after it, and only those")
    {
        auto p = qk_inputs::random_tri_problem<float>(n, k, 1, {}, 19);
        p.a[4 * n + 1] = std::numeric_limits<float>::quiet_NaN();
        const std::vector<float> x = solve(p, n, k, 1, {});
        for (std::size_t i = 0; i < n; ++i) {
            for (std::size_t c = 0; c < k; ++c) {
                CHECK(std::isnan(x[i * k + c]) == (i >= 4));
            }
        }
    }
    SUBCASE("an infinite right-hand side gives infinity in its row and NaN or infinity below")
    {
        auto p = qk_inputs::random_tri_problem<float>(n, k, 1, {}, 23);
        p.b[0 * k + 3] = std::numeric_limits<float>::infinity();
        const std::vector<float> x = solve(p, n, k, 1, {});
        CHECK(std::isinf(x[3]));
        for (std::size_t i = 1; i < n; ++i) {
            CHECK(!std::isfinite(x[i * k + 3]));
            CHECK(std::isfinite(x[i * k + 4]));
        }
    }
}

TEST_CASE("solve_tri rejects bad arguments with a qk::error naming them, before writing X")
{
    const auto p = qk_inputs::random_tri_problem<float>(4, 3, 2, {}, 29);
    std::vector<float> x(p.b.size(), 42.0f);
    const auto untouched = [&] {
        for (const float v : x) {
            if (v != 42.0f) {
                return false;
            }
        }
        return true;
    };
    const auto rejects = [&](auto call, const std::string& needle) {
        try {
            call();
            FAIL("no qk::error; expected one mentioning \"", needle, "\"");
        } catch (const qk::error& e) {
            INFO("message: ", e.what());
            CHECK(std::string(e.what()).find(needle) != std::string::npos);
        }
        CHECK(untouched());
    };
    const float* a = p.a.data();
    const float* b = p.b.data();
    float* out = x.data();
    rejects([&] { qk::solve_tri(a, b, out, 0, 3, 2); }, "n = 0");
    rejects([&] { qk::solve_tri(a, b, out, 4, 0, 2); }, "k = 0");
    rejects([&] { qk::solve_tri(a, b, out, 4, 3, 0); }, "batch = 0");
    rejects([&] { qk::solve_tri(a, b, out, -4, 3, 2); }, "n = -4");
    rejects([&] { qk::solve_tri(static_cast<const float*>(nullptr), b, out, 4, 3, 2); }, "A is a null pointer");
    rejects([&] { qk::solve_tri(a, b, out, std::int64_t{1} << 21, 1, 1); }, "exceed the supported size");

    // A zero pivot: its batch and row.
    std::vector<float> singular = p.a;
    singular[1 * 16 + 2 * 4 + 2] = 0.0f;
    rejects([&] { qk::solve_tri(singular.data(), b, out, 4, 3, 2); }, "zero on its diagonal at batch 1 (1, 0), row 2");
    thread_pool two(2);
    rejects([&] { qk::solve_tri(singular.data(), b, out, 4, 3, 2, {}, two); }, "row 2");
    // ... which a unit solve ignores.
    qk::solve_tri(singular.data(), b, out, 4, 3, 2, {.left = true, .lower = true, .unit = true});
    CHECK(!untouched());
    std::fill(x.begin(), x.end(), 42.0f);

    constexpr std::int64_t f = sizeof(float);
    const auto A = qk::tensor_view<const float>::contiguous(a, 4, 4, 2);
    const auto B = qk::tensor_view<const float>::contiguous(b, 3, 4, 2);
    const auto X = qk::tensor_view<float>::contiguous(out, 3, 4, 2);
    rejects([&] { qk::solve_tri(qk::tensor_view<const float>::contiguous(a, 4, 3, 2), B, X); }, "A is not square: 3 rows of 4 columns");
    rejects([&] { qk::solve_tri(A, qk::tensor_view<const float>::contiguous(b, 4, 3, 2), qk::tensor_view<float>::contiguous(out, 4, 3, 2)); },
            "A is 4 x 4 but B is 3 rows of 4 columns");
    rejects([&] { qk::solve_tri(A, B, X, {.left = false}); }, "a right solve needs B rows of n columns");
    rejects([&] { qk::solve_tri(A, B, qk::tensor_view<float>::contiguous(out, 3, 4, 1, 2)); }, "X.ne[2] is 1 but B.ne[2] is 2");
    rejects([&] { qk::solve_tri(qk::tensor_view<const float>::contiguous(a, 4, 4, 2), qk::tensor_view<const float>::contiguous(b, 3, 4, 1, 2),
                                qk::tensor_view<float>::contiguous(out, 3, 4, 1, 2)); },
            "B.ne[2] is 1, not a multiple of A.ne[2] = 2");
    rejects([&] { qk::solve_tri(qk::tensor_view<const float>{a, {4, 4, 2, 1}, {f, 4 * f + 2, 16 * f, 0}}, B, X); },
            "A.nb[1] is 18 bytes, not a multiple of the element size 4");
    rejects([&] { qk::solve_tri(qk::tensor_view<const float>{a, {4, 4, 0, 1}, {f, 4 * f, 16 * f, 0}}, B, X); }, "A.ne[2] is 0");
}
