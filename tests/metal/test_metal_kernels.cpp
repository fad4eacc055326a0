// The Metal kernels' logic on the CPU: solve_tri.metal and gemv.metal compiled as C++ through
// tests/metal/shim and run on its emulator (threadgroups of real threads, 32-lane SIMD-groups),
// held to error bounds derived from the arithmetic against qkern's CPU references; plus the
// emulator's own semantics (SIMD-group functions, barriers, the misuse it reports).
#include <doctest/doctest.h>

#include <kernels/e8m0.hpp>
#include <kernels/formats.hpp>
#include <kernels/quantize.hpp>
#include <kernels/solve_tri.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "emulator.hpp"
#include "gpu_reference.hpp"
#include "inputs.hpp"
#include "solve_tri_reference.hpp"

// The .metal files' attributes ([[buffer(0)]], ...) are unknown to C++ and ignored by design;
// gemv.metal and solve_tri.metal never assign compound to threadgroup memory, so -Wvolatile
// stays on (see <metal_stdlib> for why threadgroup is volatile here).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wattributes"
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wunknown-attributes"
#endif
namespace msl_solve_tri {
#include <backends/metal/shaders/solve_tri.metal>
}
#include "metal_shim_end.hpp"
namespace msl_gemv {
#include <backends/metal/shaders/gemv.metal>
}
#include "metal_shim_end.hpp"
#pragma GCC diagnostic pop

namespace {

namespace emu = metal::emu;
using metal::uint3;
using qk::tri_options;
using qk_test::gpu::all_variants;
using qk_test::gpu::describe;
using qk_inputs::random_blocks;
using qk_test::gpu::rounding_bound;
// Metal's fast-math division may be off by 2.5 ulp, as Vulkan's (gpu_reference.hpp).
void check_solution(const qk_inputs::tri_problem_data<float>& p, const std::vector<float>& x, std::size_t n, std::size_t k,
                    std::size_t batch, const tri_options& opt)
{
    (void)qk_test::gpu::check_solve_against_cpu(p, x, n, k, batch, opt, qk_test::gpu::division_extra_roundings);
}

constexpr std::size_t round_up_16(std::size_t bytes)
{
    return (bytes + 15) / 16 * 16;
}

// ---- solve_tri ----------------------------------------------------------------------------

// How the host dispatches kernel_solve_tri_f32 (the table at the top of solve_tri.metal).
void metal_solve_tri(const float* a, const float* b, float* x, std::uint32_t n, std::uint32_t k, std::uint32_t batch,
                     const tri_options& opt, std::uint32_t nsg, std::uint32_t rows)
{
    namespace s = msl_solve_tri;
    s::fc_nsg = nsg;
    s::fc_n = n;
    s::fc_k = k;
    s::fc_left = opt.left;
    s::fc_lower = opt.lower;
    s::fc_unit = opt.unit;
    s::fc_rows = rows;
    s::solve_tri_args args{batch};
    const emu::dispatch_shape shape{uint3((k + nsg - 1) / nsg, batch, 1u), uint3(32 * nsg, 1u, 1u), {round_up_16(std::size_t{rows} * n * 4)}};
    emu::dispatch(shape, [&](const emu::thread_builtins& t) {
        s::kernel_solve_tri_f32(a, b, x, args, t.threadgroup<float>(0), t.threadgroup_position_in_grid, t.thread_index_in_threadgroup,
                                t.simdgroup_index_in_threadgroup, t.thread_index_in_simdgroup, t.threads_per_simdgroup);
    });
}


// ---- gemv ---------------------------------------------------------------------------------

// How the host dispatches kernel_gemv_* (the table at the top of gemv.metal).
template <class Block>
void metal_gemv(const std::vector<Block>& w, std::uint32_t rows, std::uint32_t blocks_per_row, const std::vector<float>& x,
                std::vector<float>& y, std::uint32_t nsg, std::uint32_t columns = 1)
{
    namespace g = msl_gemv;
    g::gemv_args args{rows, blocks_per_row};
    // The E8M0 table as the host uploads it: a buffer of its own.
    std::vector<float> table(qk::e8m0_half_table.begin(), qk::e8m0_half_table.end());
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(w.data());
    const emu::dispatch_shape shape{uint3((rows + nsg - 1) / nsg, columns, 1u), uint3(32 * nsg, 1u, 1u), {}};
    emu::dispatch(shape, [&](const emu::thread_builtins& t) {
        const uint3 tg = t.threadgroup_position_in_grid;
        const auto sg = t.simdgroup_index_in_threadgroup;
        const auto nsgs = t.simdgroups_per_threadgroup;
        const auto lane = t.thread_index_in_simdgroup;
        const auto width = t.threads_per_simdgroup;
        if constexpr (std::is_same_v<Block, qk::block_q8_0>) {
            g::kernel_gemv_q8_0(bytes, x.data(), y.data(), args, tg, sg, nsgs, lane, width);
        } else if constexpr (std::is_same_v<Block, qk::block_mxfp4>) {
            g::kernel_gemv_mxfp4(bytes, x.data(), y.data(), args, table.data(), tg, sg, nsgs, lane, width);
        } else if constexpr (std::is_same_v<Block, qk::block_iq4_nl>) {
            g::kernel_gemv_iq4_nl(bytes, x.data(), y.data(), args, tg, sg, nsgs, lane, width);
        } else if constexpr (std::is_same_v<Block, qk::block_nvfp4>) {
            g::kernel_gemv_nvfp4(bytes, x.data(), y.data(), args, tg, sg, nsgs, lane, width);
        } else {
            static_assert(std::is_same_v<Block, qk::block_iq4_xs>);
            g::kernel_gemv_iq4_xs(bytes, x.data(), y.data(), args, tg, sg, nsgs, lane, width);
        }
    });
}

template <class Block>
void check_gemv(std::uint32_t rows, std::uint32_t blocks_per_row, std::uint32_t nsg, std::uint64_t seed)
{
    using traits = qk::format_traits<Block>;
    const std::size_t cols = std::size_t{blocks_per_row} * traits::block_size;
    CAPTURE(traits::name);
    CAPTURE(rows);
    CAPTURE(cols);
    CAPTURE(nsg);
    const auto w = random_blocks<Block>(std::size_t{rows} * blocks_per_row, seed);
    const std::vector<float> x = qk_inputs::normal<std::mt19937_64>(cols, 1.0f, seed + 1);
    std::vector<float> wf(rows * cols);
    qk::dequantize<Block>(w, wf);
    std::vector<float> y(rows, std::nanf(""));
    metal_gemv(w, rows, blocks_per_row, x, y, nsg);
    std::size_t bad = 0;
    for (std::size_t r = 0; r < rows; ++r) {
        double exact = 0, magnitude = 0;
        for (std::size_t c = 0; c < cols; ++c) {
            const double product = static_cast<double>(wf[r * cols + c]) * x[c];
            exact += product;
            magnitude += std::abs(product);
        }
        const double bound = rounding_bound(cols, magnitude);
        if (!(std::abs(y[r] - exact) <= bound) && ++bad <= 3) {
            INFO("row ", r, ": kernel ", y[r], ", exact ", exact, ", bound ", bound);
            CHECK(std::abs(y[r] - exact) <= bound);
        }
    }
    CHECK(bad == 0);
}

// The kernels over `columns` columns in one dispatch: each column equal bit for bit to a
// dispatch of that column alone, and within the rounding bound of its double-precision product.
template <class Block>
void check_gemm(std::uint32_t rows, std::uint32_t blocks_per_row, std::uint32_t columns, std::uint32_t nsg, std::uint64_t seed)
{
    using traits = qk::format_traits<Block>;
    const std::size_t cols = std::size_t{blocks_per_row} * traits::block_size;
    CAPTURE(traits::name);
    CAPTURE(rows);
    CAPTURE(cols);
    CAPTURE(columns);
    CAPTURE(nsg);
    const auto w = random_blocks<Block>(std::size_t{rows} * blocks_per_row, seed);
    const std::vector<float> x = qk_inputs::normal<std::mt19937_64>(columns * cols, 1.0f, seed + 1);
    std::vector<float> wf(rows * cols);
    qk::dequantize<Block>(w, wf);
    std::vector<float> y(std::size_t{columns} * rows, std::nanf(""));
    metal_gemv(w, rows, blocks_per_row, x, y, nsg, columns);
    std::size_t bad_bound = 0, bad_bits = 0;
    for (std::size_t c = 0; c < columns; ++c) {
        const std::vector<float> xc(x.begin() + static_cast<std::ptrdiff_t>(c * cols), x.begin() + static_cast<std::ptrdiff_t>((c + 1) * cols));
        std::vector<float> yc(rows, std::nanf(""));
        metal_gemv(w, rows, blocks_per_row, xc, yc, nsg);
        for (std::size_t r = 0; r < rows; ++r) {
            double exact = 0, magnitude = 0;
            for (std::size_t i = 0; i < cols; ++i) {
                const double product = static_cast<double>(wf[r * cols + i]) * xc[i];
                exact += product;
                magnitude += std::abs(product);
            }
            const float got = y[c * rows + r];
            const double bound = rounding_bound(cols, magnitude);
            if (!(std::abs(got - exact) <= bound) && ++bad_bound <= 3) {
                INFO("column ", c, ", row ", r, ": kernel ", got, ", exact ", exact, ", bound ", bound);
                CHECK(std::abs(got - exact) <= bound);
            }
            if (std::bit_cast<std::uint32_t>(got) != std::bit_cast<std::uint32_t>(yc[r]) && ++bad_bits <= 3) {
                INFO("column ", c, ", row ", r, ": all columns ", got, ", this column alone ", yc[r]);
                CHECK(std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(yc[r]));
            }
        }
    }
    CHECK(bad_bound == 0);
    CHECK(bad_bits == 0);
}

template <class Block>
void check_gemv_shapes()
{
    std::uint64_t seed = 1;
    std::uint32_t nsg = 1;
    for (const std::uint32_t rows : {1u, 3u, 8u, 33u}) {
        for (const std::uint32_t blocks : {1u, 2u, 5u, 33u}) {
            check_gemv<Block>(rows, blocks, nsg, seed++);
            nsg = nsg % 3 + 1;
        }
    }
    for (const std::uint32_t rows : {1u, 5u}) {
        for (const std::uint32_t columns : {2u, 7u}) {
            check_gemm<Block>(rows, 3, columns, nsg, seed++);
            nsg = nsg % 3 + 1;
        }
    }
}

} // namespace

TEST_CASE("metal solve_tri: every variant, n and k in place or not, within the derived bounds and near the CPU solve")
{
    const std::uint32_t ns[] = {1, 2, 7, 33, 64};
    const std::uint32_t ks[] = {1, 5, 40};
    const std::vector<tri_options> variants = all_variants();
    std::size_t cases = 0;
    for (std::size_t v = 0; v < variants.size(); ++v) {
        const tri_options& opt = variants[v];
        for (std::size_t ni = 0; ni < std::size(ns); ++ni) {
            for (std::size_t ki = 0; ki < std::size(ks); ++ki) {
                const std::uint32_t n = ns[ni];
                const std::uint32_t k = ks[ki];
                constexpr std::uint32_t batch = 2;
                const std::size_t turn = v + ni + ki;
                // SIMD-groups per threadgroup: one, or several with the last tile partly empty.
                const std::uint32_t nsg = std::min<std::uint32_t>(k, turn % 2 == 0 ? 1 : 3);
                // Rows per stage: all of A at once, or several stages with a short last one.
                const std::uint32_t rows = turn % 3 == 0 ? n : std::min<std::uint32_t>(n, turn % 3 == 1 ? 5 : 1);
                const bool in_place = turn % 2 == 1;
                CAPTURE(describe(opt));
                CAPTURE(n);
                CAPTURE(k);
                CAPTURE(nsg);
                CAPTURE(rows);
                CAPTURE(in_place);
                const auto p = qk_inputs::random_tri_problem<float>(n, k, batch, opt, n * 1000 + k * 10 + static_cast<std::uint32_t>(v));
                std::vector<float> x;
                if (in_place) {
                    x = p.b;
                    metal_solve_tri(p.a.data(), x.data(), x.data(), n, k, batch, opt, nsg, rows);
                } else {
                    x.assign(p.b.size(), std::numeric_limits<float>::quiet_NaN());
                    metal_solve_tri(p.a.data(), p.b.data(), x.data(), n, k, batch, opt, nsg, rows);
                }
                check_solution(p, x, n, k, batch, opt);
                ++cases;
            }
        }
    }
    CHECK(cases == 8 * 5 * 3);
}

TEST_CASE("metal solve_tri: threadgroups past args.batch write nothing")
{
    const tri_options opt{};
    const auto p = qk_inputs::random_tri_problem<float>(7, 3, 1, opt, 5);
    std::vector<float> x(p.b.size(), std::numeric_limits<float>::quiet_NaN());
    namespace s = msl_solve_tri;
    s::fc_nsg = 2;
    s::fc_n = 7;
    s::fc_k = 3;
    s::fc_left = true;
    s::fc_lower = true;
    s::fc_unit = false;
    s::fc_rows = 7;
    s::solve_tri_args args{1};
    // Three batches' worth of threadgroups over one batch of buffers: under ASan any access by
    // the extra ones is an error; without, the check below still sees the one batch solved.
    const emu::dispatch_shape shape{uint3(2u, 3u, 1u), uint3(64u, 1u, 1u), {round_up_16(7 * 7 * 4)}};
    emu::dispatch(shape, [&](const emu::thread_builtins& t) {
        s::kernel_solve_tri_f32(p.a.data(), p.b.data(), x.data(), args, t.threadgroup<float>(0), t.threadgroup_position_in_grid,
                                t.thread_index_in_threadgroup, t.simdgroup_index_in_threadgroup, t.thread_index_in_simdgroup,
                                t.threads_per_simdgroup);
    });
    check_solution(p, x, 7, 3, 1, opt);
}

TEST_CASE("metal gemv: Q8_0 against the double dot of the dequantized rows, one column and several")
{
    check_gemv_shapes<qk::block_q8_0>();
}

TEST_CASE("metal gemv: MXFP4 against the double dot of the dequantized rows, one column and several")
{
    check_gemv_shapes<qk::block_mxfp4>();
}

TEST_CASE("metal gemv: IQ4_NL against the double dot of the dequantized rows, one column and several")
{
    check_gemv_shapes<qk::block_iq4_nl>();
}

TEST_CASE("metal gemv: IQ4_XS against the double dot of the dequantized rows, one column and several")
{
    check_gemv_shapes<qk::block_iq4_xs>();
}

TEST_CASE("metal gemv: NVFP4 against the double dot of the dequantized rows, one column and several")
{
    check_gemv_shapes<qk::block_nvfp4>();
}

TEST_CASE("metal gemv: NVFP4's UE4M3 decoding is qk::ue4m3_half_table for every byte, at every sub-block")
{
    for (unsigned b = 0; b < 256; ++b) {
        CAPTURE(b);
        CHECK(std::bit_cast<std::uint32_t>(msl_gemv::gemv_ue4m3_half(b)) == std::bit_cast<std::uint32_t>(qk::ue4m3_half_table[b]));
    }
    using probe_type = qk_test::gpu::nvfp4_scale_probe;
    const probe_type probe = qk_test::gpu::make_nvfp4_scale_probe(7);
    std::vector<float> y(probe_type::rows, std::nanf(""));
    metal_gemv(probe.w, probe_type::rows, 1, probe.x, y, 4);
    std::size_t bad = 0, nonzero = 0;
    for (std::size_t r = 0; r < probe_type::rows; ++r) {
        nonzero += probe.expected[r] != 0.0f ? 1 : 0;
        if (y[r] != probe.expected[r] && ++bad <= 3) {
            INFO("scale byte ", r / 4, " at sub-block ", r % 4, ": kernel ", y[r], ", expected ", probe.expected[r]);
            CHECK(y[r] == probe.expected[r]);
        }
    }
    CHECK(bad == 0);
    CHECK(nonzero > probe_type::rows / 2); // the probe is not all zeros
}

// ---- the emulator itself ------------------------------------------------------------------

TEST_CASE("metal emulator: SIMD-group functions over full and partial SIMD-groups")
{
    // 40 threads: one SIMD-group of 32 and one of 8; each lane contributes its thread index.
    constexpr unsigned threads = 40;
    struct result {
        float sum, max, prefix;
        unsigned down, broadcast, xor_lane;
        bool any_odd_high, all_small;
    };
    std::vector<result> out(threads * 2);
    emu::dispatch({uint3(2u, 1u, 1u), uint3(threads, 1u, 1u), {}}, [&](const emu::thread_builtins& t) {
        const unsigned i = t.thread_index_in_threadgroup;
        const auto v = static_cast<float>(i);
        result r{};
        r.sum = metal::simd_sum(v);
        r.max = metal::simd_max(v);
        r.prefix = metal::simd_prefix_exclusive_sum(v);
        // Uniform per SIMD-group: lane 7 of the partial one would read the inactive lane 8.
        r.down = i < 32 ? metal::simd_shuffle_down(i, 1) : i;
        r.broadcast = metal::simd_broadcast(i, 3);
        r.xor_lane = metal::simd_shuffle_xor(i, 1);
        r.any_odd_high = metal::simd_any(i >= 36 && i % 2 == 1);
        r.all_small = metal::simd_all(i < 32);
        out[t.threadgroup_position_in_grid.x * threads + i] = r;
    });
    for (unsigned g = 0; g < 2; ++g) {
        for (unsigned i = 0; i < threads; ++i) {
            CAPTURE(i);
            const result& r = out[g * threads + i];
            const unsigned first = i < 32 ? 0 : 32;
            const unsigned last = i < 32 ? 31 : 39;
            CHECK(r.sum == static_cast<float>((first + last) * (last - first + 1) / 2));
            CHECK(r.max == static_cast<float>(last));
            CHECK(r.prefix == static_cast<float>((first + i - 1) * (i - first) / 2));
            CHECK(r.down == (i == 31 || i >= 32 ? i : i + 1)); // past lane 31: its own value
            CHECK(r.broadcast == first + 3);
            CHECK(r.xor_lane == (i ^ 1u));
            CHECK(r.any_odd_high == (i >= 32));
            CHECK(r.all_small == (i < 32));
        }
    }
}

TEST_CASE("metal emulator: threadgroup memory is shared by the threadgroup, starts as NaN, and is fresh per threadgroup")
{
    constexpr unsigned threads = 96;
    std::vector<float> seen_before(threads * 3), seen_after(threads * 3);
    emu::dispatch({uint3(3u, 1u, 1u), uint3(threads, 1u, 1u), {threads * 4}}, [&](const emu::thread_builtins& t) {
        float* shared = t.threadgroup<float>(0);
        const unsigned i = t.thread_index_in_threadgroup;
        const unsigned at = t.threadgroup_position_in_grid.x * threads + i;
        seen_before[at] = shared[i];
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        shared[i] = static_cast<float>(at);
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        seen_after[at] = shared[threads - 1 - i];
    });
    for (unsigned at = 0; at < threads * 3; ++at) {
        CAPTURE(at);
        CHECK(std::isnan(seen_before[at]));
        CHECK(seen_after[at] == static_cast<float>(at / threads * threads + (threads - 1 - at % threads)));
    }
}

TEST_CASE("metal emulator: misuse is reported, not run into a hang")
{
    const emu::dispatch_shape two_simdgroups{uint3(1u, 1u, 1u), uint3(64u, 1u, 1u), {}};
    // Barriers at different call sites (the kernels stay outside the CHECK macros, which would
    // give every call in them the macro's position).
    auto divergent_barriers = [](const emu::thread_builtins& t) {
        if (t.simdgroup_index_in_threadgroup == 0) {
            metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        } else {
            metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        }
    };
    CHECK_THROWS_WITH_AS(emu::dispatch(two_simdgroups, divergent_barriers), doctest::Contains("different threadgroup_barrier calls"),
                         std::runtime_error);
    // A barrier after some threads returned.
    CHECK_THROWS_WITH_AS(emu::dispatch(two_simdgroups,
                                       [](const emu::thread_builtins& t) {
                                           if (t.thread_index_in_threadgroup == 5) {
                                               return;
                                           }
                                           metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
                                       }),
                         doctest::Contains("returned"), std::runtime_error);
    // Lanes of one SIMD-group in different SIMD-group functions.
    auto divergent_reductions = [](const emu::thread_builtins& t) {
        if (t.thread_index_in_simdgroup < 16) {
            (void)metal::simd_sum(1.0f);
        } else {
            (void)metal::simd_max(1.0f);
        }
    };
    CHECK_THROWS_WITH_AS(emu::dispatch(two_simdgroups, divergent_reductions), doctest::Contains("different SIMD-group functions"),
                         std::runtime_error);
    // Half a SIMD-group at a barrier that waits for the other half, which waits in a reduction
    // for the first: a deadlock, reported rather than hung.
    auto deadlock = [](const emu::thread_builtins& t) {
        if (t.thread_index_in_simdgroup < 16) {
            metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        } else {
            (void)metal::simd_sum(1.0f);
        }
    };
    CHECK_THROWS_WITH_AS(emu::dispatch(two_simdgroups, deadlock), doctest::Contains("deadlock"), std::runtime_error);
    // A broadcast from a lane that has returned.
    CHECK_THROWS_WITH_AS(emu::dispatch(two_simdgroups,
                                       [](const emu::thread_builtins& t) {
                                           if (t.thread_index_in_simdgroup == 7) {
                                               return;
                                           }
                                           (void)metal::simd_broadcast(1.0f, 7);
                                       }),
                         doctest::Contains("inactive"), std::runtime_error);
    // Lanes that return early drop out of a reduction, as inactive lanes do.
    std::vector<float> sums(64);
    emu::dispatch(two_simdgroups, [&](const emu::thread_builtins& t) {
        if (t.thread_index_in_simdgroup >= 10) {
            return;
        }
        sums[t.thread_index_in_threadgroup] = metal::simd_sum(1.0f);
    });
    CHECK(sums[0] == 10.0f);
    CHECK(sums[41] == 10.0f);
    // Shapes Metal rejects.
    CHECK_THROWS_AS(emu::dispatch({uint3(1u, 1u, 1u), uint3(32u, 1u, 1u), {20}}, [](const emu::thread_builtins&) {}),
                    std::invalid_argument);
    CHECK_THROWS_AS(emu::dispatch({uint3(1u, 1u, 1u), uint3(32u, 1u, 1u), {16384, 16400}}, [](const emu::thread_builtins&) {}),
                    std::invalid_argument);
    CHECK_THROWS_AS(emu::dispatch({uint3(1u, 1u, 1u), uint3(1025u, 1u, 1u), {}}, [](const emu::thread_builtins&) {}),
                    std::invalid_argument);
}
