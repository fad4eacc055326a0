// The host code the Vulkan and Metal backends share (backends/gpu/): the device index from the
// environment, the matrix and its upload checks, the kernel tables' format order, the workspace
// growth rule, and the solve_tri and sample() checks, each message exactly as a user reads it.
// Backend-neutral, so it runs everywhere, with a stand-in buffer for the backend's.
#include <doctest/doctest.h>

#include <backends/gpu/device_index.hpp>
#include <backends/gpu/format_index.hpp>
#include <backends/gpu/matrix.hpp>
#include <backends/gpu/sample_checks.hpp>
#include <backends/gpu/solve_tri_checks.hpp>
#include <backends/gpu/workspace.hpp>
#include <kernels/formats.hpp>
#include <sampling/chain.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace gpu = qk::backend::gpu;

namespace {

// A backend buffer as the shared code sees one: bytes with a size, movable, empty by default.
struct host_buffer {
    std::vector<std::byte> bytes;
    [[nodiscard]] std::size_t size() const noexcept { return bytes.size(); }
};

// The exact message of the qk::error that `call` raises ("" when it raises none).
template <class Call>
std::string message_of(Call&& call)
{
    try {
        call();
    } catch (const qk::error& e) {
        return e.what();
    }
    return "";
}

constexpr const char* test_variable = "QKERN_TEST_GPU_DEVICE";

} // namespace

TEST_CASE("gpu device_index_from_environment: -1 when unset or empty, else digits up to 10^6")
{
    ::unsetenv(test_variable);
    CHECK(gpu::device_index_from_environment(test_variable, "vulkan") == -1);
    ::setenv(test_variable, "", 1);
    CHECK(gpu::device_index_from_environment(test_variable, "vulkan") == -1);
    ::setenv(test_variable, "0", 1);
    CHECK(gpu::device_index_from_environment(test_variable, "vulkan") == 0);
    ::setenv(test_variable, "3", 1);
    CHECK(gpu::device_index_from_environment(test_variable, "metal") == 3);
    ::setenv(test_variable, "1000000", 1);
    CHECK(gpu::device_index_from_environment(test_variable, "metal") == 1000000);

    // One behaviour for both backends: not a number, negative and past 10^6 are all rejected.
    for (const char* bad : {"first", "-1", "1000001", "99999999999999999999", "3x", " 3", "+3", "0x1"}) {
        CAPTURE(bad);
        ::setenv(test_variable, bad, 1);
        CHECK(message_of([] { (void)gpu::device_index_from_environment(test_variable, "vulkan"); }) ==
              std::string("qk::backend::vulkan: QKERN_TEST_GPU_DEVICE='") + bad + "' is not a device index");
        CHECK(message_of([] { (void)gpu::device_index_from_environment(test_variable, "metal"); }) ==
              std::string("qk::backend::metal: QKERN_TEST_GPU_DEVICE='") + bad + "' is not a device index");
    }
    ::unsetenv(test_variable);
}

// Compile-time: every weight format has a place, in the list's order (the table entries follow it).
static_assert(gpu::format_index<qk::block_q8_0> == 0);
static_assert(gpu::format_index<qk::block_mxfp4> == 1);
static_assert(gpu::format_index<qk::block_iq4_nl> == 2);
static_assert(gpu::format_index<qk::block_iq4_xs> == 3);
static_assert(gpu::format_index<qk::block_nvfp4> == 4);

TEST_CASE("gpu format_index and lists_weight_formats: kernel tables follow qk::weight_formats")
{
    constexpr auto name = [](std::string_view n) { return n; };
    static constexpr std::array<std::string_view, 5> in_order{"gemv_q8_0", "gemv_mxfp4", "gemv_iq4_nl", "gemv_iq4_xs", "gemv_nvfp4"};
    static constexpr std::array<std::string_view, 5> swapped{"gemv_q8_0", "gemv_mxfp4", "gemv_iq4_nl", "gemv_nvfp4", "gemv_iq4_xs"};
    static constexpr std::array<std::string_view, 4> short_one{"gemv_q8_0", "gemv_mxfp4", "gemv_iq4_nl", "gemv_iq4_xs"};
    static constexpr std::array<std::string_view, 5> other_prefix{"dot_q8_0", "dot_mxfp4", "dot_iq4_nl", "dot_iq4_xs", "dot_nvfp4"};
    static_assert(gpu::lists_weight_formats(in_order, "gemv_", name));
    static_assert(!gpu::lists_weight_formats(swapped, "gemv_", name));
    static_assert(!gpu::lists_weight_formats(short_one, "gemv_", name));
    static_assert(!gpu::lists_weight_formats(other_prefix, "gemv_", name));
    CHECK(gpu::lists_weight_formats(other_prefix, "dot_", name));
    std::vector<std::size_t> positions;
    qk::weight_formats::for_each([&]<class Block>(std::type_identity<Block>) { positions.push_back(gpu::format_index<Block>); });
    CHECK(positions == std::vector<std::size_t>{0, 1, 2, 3, 4});
}

TEST_CASE("gpu make_matrix: checked before the buffer is made, then the blocks' bytes in the backend's buffer")
{
    constexpr const char* op = "qk::backend::vulkan::upload_matrix";
    std::vector<qk::block_q8_0> w(8);
    w[5].qs[3] = 42;
    int made = 0;
    const auto make_filled = [&](std::span<const std::byte> bytes) {
        ++made;
        return host_buffer{std::vector<std::byte>(bytes.begin(), bytes.end())};
    };
    const auto upload = [&](std::size_t rows, std::size_t cols) {
        return gpu::make_matrix<qk::block_q8_0>(op, std::span<const qk::block_q8_0>(w), rows, cols, make_filled);
    };

    const auto m = upload(2, 128);
    CHECK(made == 1);
    CHECK(m.rows() == 2);
    CHECK(m.cols() == 128);
    CHECK(m.blocks_per_row() == 4);
    CHECK(m.bytes() == 8 * 34);
    REQUIRE(m.weights().size() == 8 * 34);
    CHECK(m.weights().bytes[5 * 34 + 2 + 3] == std::byte{42});
    const gpu::matrix<qk::block_q8_0, host_buffer> empty;
    CHECK(empty.rows() == 0);
    CHECK(empty.bytes() == 0);

    CHECK(message_of([&] { (void)upload(2, 100); }) ==
          "qk::backend::vulkan::upload_matrix: cols (100) is not a positive multiple of Q8_0's block size 32");
    CHECK(message_of([&] { (void)upload(2, 0); }) ==
          "qk::backend::vulkan::upload_matrix: cols (0) is not a positive multiple of Q8_0's block size 32");
    CHECK(message_of([&] { (void)upload(3, 128); }) == "qk::backend::vulkan::upload_matrix: w has 8 blocks for 3 rows of 4 blocks");
    CHECK(message_of([&] { (void)upload(0, 128); }) == "qk::backend::vulkan::upload_matrix: w has 8 blocks for 0 rows of 4 blocks");
    CHECK(made == 1); // no buffer for a rejected upload
}

TEST_CASE("gpu check_matrix_shape: the kernels' bounds, 2^32 - 1 bytes of weights and 2^32 - 1 values a row")
{
    constexpr const char* op = "qk::backend::metal::upload";
    // One Q8_0 block (34 bytes) a row: the most rows whose bytes stay below 2^32.
    constexpr std::size_t most_rows = 0xffffffffu / 34;
    CHECK(message_of([&] { gpu::check_matrix_shape<qk::block_q8_0>(op, most_rows, most_rows, 32); }).empty());
    CHECK(message_of([&] { gpu::check_matrix_shape<qk::block_q8_0>(op, most_rows + 1, most_rows + 1, 32); }) ==
          "qk::backend::metal::upload: 126322568 rows of 32 values are past the mat-vec kernels' bounds (Q8_0 weights of at most "
          "2^32 - 1 bytes, rows of at most 2^32 - 1 values)");
    // An IQ4_XS row of 2^32 values is 2^24 blocks of 136 bytes, within the bytes but not the values.
    CHECK(message_of([&] { gpu::check_matrix_shape<qk::block_iq4_xs>(op, std::size_t{1} << 24, 1, std::size_t{1} << 32); }) ==
          "qk::backend::metal::upload: 1 rows of 4294967296 values are past the mat-vec kernels' bounds (IQ4_XS weights of at most "
          "2^32 - 1 bytes, rows of at most 2^32 - 1 values)");
    // Huge sizes are rejected by the bounds, not wrapped around into a match.
    CHECK(!message_of([&] { gpu::check_matrix_shape<qk::block_q8_0>(op, 0, std::size_t{1} << 62, std::size_t{1} << 32); }).empty());
}

TEST_CASE("gpu check_gemv_shape: x a value per column, y one per row")
{
    const std::vector<qk::block_mxfp4> w(8);
    const auto m = gpu::make_matrix<qk::block_mxfp4>("qk::backend::metal::upload", std::span<const qk::block_mxfp4>(w), 2, 128,
                                                    [](std::span<const std::byte> b) { return host_buffer{{b.begin(), b.end()}}; });
    CHECK(message_of([&] { gpu::check_gemv_shape("qk::backend::metal::gemv", m, 128, 2); }).empty());
    CHECK(message_of([&] { gpu::check_gemv_shape("qk::backend::metal::gemv", m, 127, 2); }) ==
          "qk::backend::metal::gemv: x has 127 values and y 2 for a 2 x 128 matrix");
    CHECK(message_of([&] { gpu::check_gemv_shape("qk::backend::vulkan::gemv", m, 128, 3); }) ==
          "qk::backend::vulkan::gemv: x has 128 values and y 3 for a 2 x 128 matrix");
}

TEST_CASE("gpu grow: a new buffer only when more bytes are needed or there is none, the old one released first")
{
    host_buffer b;
    int made = 0;
    const auto make = [&](std::size_t bytes) {
        CHECK(b.size() == 0); // released before the new one is asked for
        ++made;
        return host_buffer{std::vector<std::byte>(bytes < 4 ? 4 : bytes)};
    };
    CHECK(&gpu::grow(b, 0, make) == &b); // even 0 bytes gets a buffer to bind
    CHECK(made == 1);
    CHECK(b.size() == 4);
    gpu::grow(b, 4, make);
    CHECK(made == 1);
    gpu::grow(b, 100, make);
    CHECK(made == 2);
    CHECK(b.size() == 100);
    gpu::grow(b, 60, make);
    gpu::grow(b, 0, make);
    CHECK(made == 2);
    CHECK(b.size() == 100);
}

TEST_CASE("gpu check_solve_tri: sizes against the backend's limits, null pointers, the device's checks, then pivots")
{
    constexpr gpu::solve_tri_limits cpu_like{.max_n = std::int64_t{1} << 20,
                                             .max_batch_values = std::int64_t{1} << 40,
                                             .max_batch = gpu::no_limit,
                                             .max_values = std::int64_t{1} << 40,
                                             .in_words = "2^40 elements in A or in B, n <= 2^20"};
    constexpr gpu::solve_tri_limits kernel_like{.max_n = 8192,
                                                .max_batch_values = std::int64_t{1} << 31,
                                                .max_batch = 65535,
                                                .max_values = gpu::no_limit,
                                                .in_words = "n <= 8192, n * k <= 2^31, batch <= 65535"};
    constexpr const char* vk = "qk::backend::vulkan::solve_tri";
    constexpr const char* mtl = "qk::backend::metal::solve_tri";
    const auto sizes = [](const char* op, std::int64_t n, std::int64_t k, std::int64_t batch, const gpu::solve_tri_limits& limits) {
        return message_of([&] { gpu::check_solve_tri_sizes(op, n, k, batch, limits); });
    };
    CHECK(sizes(vk, 0, 3, 2, cpu_like) == "qk::backend::vulkan::solve_tri: n = 0, k = 3, batch = 2; each must be at least 1");
    CHECK(sizes(mtl, 4, 3, -1, kernel_like) == "qk::backend::metal::solve_tri: n = 4, k = 3, batch = -1; each must be at least 1");
    CHECK(sizes(vk, std::int64_t{1} << 20, 1, 1, cpu_like).empty());
    CHECK(sizes(vk, (std::int64_t{1} << 20) + 1, 1, 1, cpu_like) ==
          "qk::backend::vulkan::solve_tri: n = 1048577, k = 1, batch = 1 exceed the supported size (2^40 elements in A or in B, n <= "
          "2^20)");
    CHECK(sizes(vk, 1024, 1024, 1 << 20, cpu_like).empty());
    CHECK(!sizes(vk, 1024, 1024, (1 << 20) + 1, cpu_like).empty());       // all of A, and of B, past 2^40
    CHECK(!sizes(vk, 1024, std::int64_t{1} << 31, 2, cpu_like).empty()); // B past 2^40 (n * k alone is 2^41)
    CHECK(!sizes(vk, 1 << 20, 1, 2, cpu_like).empty());                  // A past 2^40, B within
    CHECK(sizes(mtl, 8192, std::int64_t{1} << 18, 65535, kernel_like).empty());
    CHECK(sizes(mtl, 8193, 1, 1, kernel_like) ==
          "qk::backend::metal::solve_tri: n = 8193, k = 1, batch = 1 exceed the supported size (n <= 8192, n * k <= 2^31, batch <= "
          "65535)");
    CHECK(!sizes(mtl, 8192, (std::int64_t{1} << 18) + 1, 1, kernel_like).empty());
    CHECK(!sizes(mtl, 4, 3, 65536, kernel_like).empty());

    // Two batches of 2 x 2; batch 1's second pivot is zero.
    const std::vector<float> a{1, 0, 1, 1, 2, 0, 1, 0};
    const std::vector<float> b(8, 1.0f);
    std::vector<float> x(8);
    std::vector<std::string> order;
    const auto full = [&](const float* A, const float* B, const float* X, qk::tri_options opt) {
        order.clear();
        return message_of([&] {
            gpu::check_solve_tri(vk, A, B, X, 2, 2, 2, opt, cpu_like, [&] { order.emplace_back("device"); });
            order.emplace_back("passed");
        });
    };
    CHECK(full(nullptr, b.data(), x.data(), {}) == "qk::backend::vulkan::solve_tri: A is a null pointer");
    CHECK(full(a.data(), nullptr, nullptr, {}) == "qk::backend::vulkan::solve_tri: B is a null pointer");
    CHECK(full(a.data(), b.data(), nullptr, {}) == "qk::backend::vulkan::solve_tri: X is a null pointer");
    CHECK(order.empty()); // the device is asked only once the pointers are good
    CHECK(full(a.data(), b.data(), x.data(), {}) ==
          "qk::backend::vulkan::solve_tri: A has a zero on its diagonal at batch 1, row 1; the system is singular (tri_options::unit "
          "ignores the stored diagonal)");
    CHECK(order == std::vector<std::string>{"device"}); // before the pivot scan reads A
    CHECK(full(a.data(), b.data(), x.data(), {.unit = true}).empty());
    CHECK(order == std::vector<std::string>{"device", "passed"});
    // A device check's error stops the rest (the scan would read past a small A).
    CHECK(message_of([&] {
              gpu::check_solve_tri(mtl, a.data(), b.data(), x.data(), 2, 2, 2, {}, kernel_like, [] { qk::detail::fail("device says no"); });
          }) == "device says no");
    CHECK(message_of([&] { gpu::check_solve_tri(mtl, a.data(), b.data(), x.data(), 2, 2, 2, {}, kernel_like); }) ==
          "qk::backend::metal::solve_tri: A has a zero on its diagonal at batch 1, row 1; the system is singular (tri_options::unit "
          "ignores the stored diagonal)");
}

TEST_CASE("gpu check_sample_arguments: shapes within the kernels' bounds and spans that agree with them")
{
    std::vector<qk::sampling::chain> chains;
    chains.push_back(qk::sampling::chain::parse("greedy"));
    chains.push_back(qk::sampling::chain::parse("greedy"));
    const std::vector<float> logits(20, 0.0f);
    const std::vector<std::uint8_t> active{1, 0};
    std::vector<std::int32_t> tokens(2);
    constexpr const char* op = "qk::backend::metal::sample";
    const auto check = [&](std::span<const float> l, std::size_t n_seq, std::size_t n_vocab, std::span<const qk::sampling::chain> c,
                           std::span<const std::uint8_t> a, std::span<const std::int32_t> t) {
        return message_of([&] { gpu::check_sample_arguments(op, l, n_seq, n_vocab, c, a, t); });
    };
    const std::span<const qk::sampling::chain> all(chains);
    CHECK(check(logits, 2, 10, all, active, tokens).empty());
    CHECK(check(logits, 2, 10, all, {}, tokens).empty());
    CHECK(check({}, 0, 10, {}, {}, {}) == "qk::backend::metal::sample: n_seq = 0, n_vocab = 10; both must be at least 1");
    CHECK(check({}, 2, 0, all, {}, tokens) == "qk::backend::metal::sample: n_seq = 2, n_vocab = 0; both must be at least 1");
    CHECK(check(logits, 65536, 1, all, {}, tokens) ==
          "qk::backend::metal::sample: n_seq = 65536 x n_vocab = 1 exceeds the kernels' limits (n_seq <= 65535, n_seq * n_vocab < 2^32)");
    CHECK(check(logits, 2, 0x80000000u, all, {}, tokens) ==
          "qk::backend::metal::sample: n_seq = 2 x n_vocab = 2147483648 exceeds the kernels' limits (n_seq <= 65535, n_seq * n_vocab "
          "< 2^32)");
    CHECK(check(logits, 2, 10, all.first(1), {}, tokens) == "qk::backend::metal::sample: 1 chains and 2 tokens for n_seq = 2");
    CHECK(check(logits, 2, 10, all, {}, std::span<const std::int32_t>(tokens).first(1)) ==
          "qk::backend::metal::sample: 2 chains and 1 tokens for n_seq = 2");
    CHECK(check(logits, 2, 10, all, std::span<const std::uint8_t>(active).first(1), tokens) ==
          "qk::backend::metal::sample: 1 active flags for n_seq = 2 (active may also be empty: all active)");
    CHECK(check(std::span<const float>(logits).first(19), 2, 10, all, {}, tokens) ==
          "qk::backend::metal::sample: logits has 19 values, not n_seq * n_vocab = 2 * 10");
}
