// Batched triangular solves on a Vulkan device: qk::solve_tri's eight variants (tri_options) in
// float, on its contiguous ggml layout, with the same checks and error messages as the CPU op.
// A plan sizes the kernel from the device's shared memory; the step builder chains it with others.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "../../kernels/error.hpp"
#include "../../kernels/solve_tri.hpp"
#include "../gpu/solve_tri_checks.hpp"
#include "../gpu/workspace.hpp"
#include "device.hpp"
#include "shaders/generated/solve_tri.hpp"

namespace qk::backend::vulkan {

namespace detail {

// Bindings: A, B, X; push constants: the number of workgroups with work.
[[nodiscard]] inline const kernel& solve_tri_kernel() noexcept
{
    static constexpr kernel k{"solve_tri", spirv::solve_tri, 3, 4};
    return k;
}

// At most this many invocations per workgroup: within every device's limit (Vulkan guarantees
// 128), and enough lanes per column that the per-step work hides the barrier on small k.
inline constexpr std::uint32_t solve_tri_max_workgroup = 64;

// Below this many columns per workgroup beside A's triangle, the triangle stays in global memory:
// each workgroup loads the whole triangle, and loading it for one or two columns costs as much as
// the solve it serves.
inline constexpr std::int64_t solve_tri_min_shared_columns = 8;

} // namespace detail

// How the kernel is laid out for one (n, k): `columns` right-hand sides per workgroup of
// `workgroup` invocations (columns times the lanes sharing each column), and where the data lives.
// Made by plan_solve_tri; the fields are public for reports and tests.
struct solve_tri_plan {
    std::uint32_t n = 0;
    std::uint32_t k = 0;
    std::uint32_t workgroup = 1;
    std::uint32_t columns = 1;
    bool a_in_shared = false;    // A's triangle packed in shared memory, else read where it lies
    bool tile_in_shared = false; // the working n x columns tile in shared memory, else in X
    // The shared arrays' sizes; an unused one has 1 float, as GLSL has no empty arrays.
    std::uint32_t a_floats = 1;
    std::uint32_t tile_floats = 1;

    [[nodiscard]] std::uint64_t shared_bytes() const noexcept { return (std::uint64_t{a_floats} + tile_floats) * sizeof(float); }
};

// The plan for n x n triangles and k right-hand sides within `shared_memory_bytes` (the device's
// facts().shared_memory_bytes, or less). The rule, in order of preference:
//  - A's triangle (n (n + 1) / 2 floats) and a tile of n rows by min(k, 64, what is left) columns,
//    when what is left holds at least min(k, 8) columns;
//  - else the tile alone, A read from global memory, when n rows of one column fit;
//  - else both in global memory (the tile is X itself), min(k, 64) columns per workgroup.
// Each column gets as many lanes as fit in 64 invocations, but no more than the rows a step updates.
[[nodiscard]] inline solve_tri_plan plan_solve_tri(std::int64_t n, std::int64_t k, std::uint32_t shared_memory_bytes)
{
    if (n < 1 || k < 1 || n > (std::int64_t{1} << 20) || k > (std::int64_t{1} << 40)) {
        qk::detail::fail("qk::backend::vulkan::plan_solve_tri: n = ", n, ", k = ", k, " is not a solvable size");
    }
    const std::int64_t floats = shared_memory_bytes / static_cast<std::int64_t>(sizeof(float));
    const std::int64_t triangle = n * (n + 1) / 2;
    const std::int64_t wanted = std::min<std::int64_t>(k, detail::solve_tri_max_workgroup);
    solve_tri_plan p;
    p.n = static_cast<std::uint32_t>(n);
    p.k = k > 0xffffffff ? 0xffffffffu : static_cast<std::uint32_t>(k);
    std::int64_t columns = wanted;
    if (triangle < floats && (floats - triangle) / n >= std::min(wanted, detail::solve_tri_min_shared_columns)) {
        columns = std::min(wanted, (floats - triangle) / n);
        p.a_in_shared = true;
        p.tile_in_shared = true;
        p.a_floats = static_cast<std::uint32_t>(triangle);
        p.tile_floats = static_cast<std::uint32_t>(n * columns);
    } else if (n < floats) { // n + 1: the tile and the unused triangle's one float
        columns = std::min(wanted, (floats - 1) / n);
        p.tile_in_shared = true;
        p.tile_floats = static_cast<std::uint32_t>(n * columns);
    }
    const std::int64_t lanes = std::clamp<std::int64_t>(std::min<std::int64_t>(detail::solve_tri_max_workgroup / columns, n - 1), 1,
                                                        detail::solve_tri_max_workgroup);
    p.columns = static_cast<std::uint32_t>(columns);
    p.workgroup = static_cast<std::uint32_t>(columns * lanes);
    return p;
}

// The step that solves `batch` systems between device buffers: a holds batch x n x n floats, b and
// x batch x n x k (the layout of qk::solve_tri's contiguous overload). b and x may be one buffer
// (an in-place solve). Only what would make the launch itself invalid is checked here (buffers
// too small, a grid past the y limit); pivots, and a plan that fits the device, are the caller's
// (solve_tri below checks them on the host).
[[nodiscard]] inline step solve_tri_step(const buffer& a, const buffer& b, const buffer& x, std::uint32_t batch, qk::tri_options opt,
                                         const solve_tri_plan& plan, std::uint32_t max_groups_x)
{
    const std::uint64_t n = plan.n;
    const std::uint64_t k = plan.k;
    const std::uint64_t tiles = (k + plan.columns - 1) / plan.columns;
    const std::uint64_t groups = tiles * batch;
    const std::uint64_t elements = std::max(n * n, n * k) * batch;
    if (n == 0 || batch == 0 || max_groups_x == 0 || elements > 0xffffffffu / sizeof(float) ||
        a.size() < n * n * batch * sizeof(float) || b.size() < n * k * batch * sizeof(float) || x.size() < n * k * batch * sizeof(float)) {
        qk::detail::fail("qk::backend::vulkan::solve_tri_step: buffers of ", a.size(), ", ", b.size(), " and ", x.size(),
                         " bytes do not hold ", batch, " batches of n = ", n, ", k = ", k, " (at most 2^30 floats each)");
    }
    const auto groups_x = static_cast<std::uint32_t>(std::min<std::uint64_t>(groups, max_groups_x));
    const std::uint64_t groups_y = (groups + groups_x - 1) / groups_x;
    // 65535: the least maxComputeWorkGroupCount[1] Vulkan allows (device_facts has no y limit).
    // With a device's own x limit (at least 65535 too) and at most 2^30 floats in B, never reached.
    if (groups_y > 65535) {
        qk::detail::fail("qk::backend::vulkan::solve_tri_step: ", groups, " workgroups at ", groups_x, " per row need ", groups_y,
                         " rows, more than 65535");
    }
    step s;
    s.what = &detail::solve_tri_kernel();
    s.specialization = {plan.workgroup,
                        plan.n,
                        plan.k,
                        plan.columns,
                        opt.left ? !opt.lower : opt.lower, // reversed
                        !opt.left,                          // transposed
                        opt.unit,
                        plan.a_in_shared,
                        plan.a_floats,
                        plan.tile_in_shared,
                        plan.tile_floats};
    s.buffers = {&a, &b, &x};
    s.push = {static_cast<std::uint32_t>(groups)};
    s.groups_x = groups_x;
    s.groups_y = static_cast<std::uint32_t>(groups_y);
    return s;
}

// Buffers a caller keeps between calls so that repeated solves allocate nothing (grown as needed).
class solve_tri_workspace {
public:
    explicit solve_tri_workspace(const device& dev) : dev_(&dev) {}

    const buffer& a(std::size_t floats) { return grow(a_, floats * sizeof(float)); }
    const buffer& b(std::size_t floats) { return grow(b_, floats * sizeof(float)); }
    const buffer& x(std::size_t floats) { return grow(x_, floats * sizeof(float)); }

private:
    const buffer& grow(buffer& buf, std::size_t bytes)
    {
        return gpu::grow(buf, bytes, [this](std::size_t n) { return dev_->make_buffer(n); });
    }
    const device* dev_;
    buffer a_;
    buffer b_;
    buffer x_;
};

namespace detail {

inline constexpr const char* solve_tri_op = "qk::backend::vulkan::solve_tri";

// The CPU op's size limits (qk::detail::check_tri_sizes); what the device itself can hold is
// checked after them, by check_solve_tri_fits.
inline constexpr gpu::solve_tri_limits solve_tri_size_limits{.max_n = std::int64_t{1} << 20,
                                                             .max_batch_values = std::int64_t{1} << 40,
                                                             .max_batch = gpu::no_limit,
                                                             .max_values = std::int64_t{1} << 40,
                                                             .in_words = "2^40 elements in A or in B, n <= 2^20"};

// What the device adds to the shared checks (after the null pointers, before the pivot scan):
// buffers within its largest storage buffer, and a plan that fits these sizes and the device.
inline void check_solve_tri_fits(const device& dev, std::int64_t n, std::int64_t k, std::int64_t batch, const solve_tri_plan& plan)
{
    const auto largest = static_cast<std::uint64_t>(std::max(n * n, n * k) * batch) * sizeof(float);
    if (largest > dev.facts().max_storage_buffer_bytes) {
        qk::detail::fail(solve_tri_op, ": n = ", n, ", k = ", k, " and ", batch, " batches need a buffer of ", largest,
                         " bytes, more than the device's largest storage buffer (", dev.facts().max_storage_buffer_bytes, " bytes)");
    }
    if (plan.n != n || plan.k != k || plan.columns < 1 || plan.workgroup < plan.columns ||
        plan.workgroup > dev.facts().max_workgroup_invocations || plan.shared_bytes() > dev.facts().shared_memory_bytes ||
        (plan.a_in_shared && plan.a_floats < n * (n + 1) / 2) || (plan.tile_in_shared && plan.tile_floats < n * plan.columns)) {
        qk::detail::fail(solve_tri_op, ": the plan (n = ", plan.n, ", k = ", plan.k, ", ", plan.columns, " columns on ", plan.workgroup,
                         " invocations, ", plan.shared_bytes(), " bytes of shared memory) does not fit n = ", n, ", k = ", k,
                         " on this device (", dev.facts().shared_memory_bytes, " bytes of shared memory)");
    }
}

} // namespace detail

// qk::solve_tri's contiguous overload on the device, from host memory: A is [batch][n][n]
// row-major; B and X are [batch][n][k] for left solves and [batch][k][n] for right ones. X may be
// B (the inputs are on the device before X is written). On a qk::error X is untouched. The plan
// overload is for callers that size the kernel themselves (from plan_solve_tri with less shared
// memory than the device has, say).
inline void solve_tri(const device& dev, solve_tri_workspace& ws, const float* A, const float* B, float* X, std::int64_t n,
                      std::int64_t k, std::int64_t batch, qk::tri_options opt, const solve_tri_plan& plan)
{
    gpu::check_solve_tri(detail::solve_tri_op, A, B, X, n, k, batch, opt, detail::solve_tri_size_limits,
                         [&] { detail::check_solve_tri_fits(dev, n, k, batch, plan); });
    const auto a_floats = static_cast<std::size_t>(n * n * batch);
    const auto b_floats = static_cast<std::size_t>(n * k * batch);
    const buffer& ab = ws.a(a_floats);
    const buffer& bb = ws.b(b_floats);
    const buffer& xb = ws.x(b_floats);
    dev.upload(ab, A, a_floats * sizeof(float));
    dev.upload(bb, B, b_floats * sizeof(float));
    dev.run(solve_tri_step(ab, bb, xb, static_cast<std::uint32_t>(batch), opt, plan, dev.facts().max_workgroup_count_x));
    dev.download(xb, X, b_floats * sizeof(float));
}

inline void solve_tri(const device& dev, solve_tri_workspace& ws, const float* A, const float* B, float* X, std::int64_t n,
                      std::int64_t k, std::int64_t batch, qk::tri_options opt = {})
{
    gpu::check_solve_tri_sizes(detail::solve_tri_op, n, k, batch, detail::solve_tri_size_limits); // before a plan is made of them
    solve_tri(dev, ws, A, B, X, n, k, batch, opt, plan_solve_tri(n, k, dev.facts().shared_memory_bytes));
}

} // namespace qk::backend::vulkan
