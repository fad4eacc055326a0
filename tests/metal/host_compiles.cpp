// Compiles qkern's Apple-only Metal host code on Linux against the declaration-only stand-in of
// metal-cpp in api_stand_in/ (CTest runs the compiler with -fsyntax-only): the host code's own
// C++ is checked here, its use of the real metal-cpp only on an Apple machine.
#include <backends/metal/context.hpp>

#include <vector>

void use_every_operation(qk::backend::metal::context& ctx, std::span<const qk::block_q8_0> w, std::span<const qk::block_mxfp4> w4,
                         std::span<const float> x, std::span<float> y, std::span<qk::sampling::chain> chains,
                         std::span<std::int32_t> tokens)
{
    const auto m = ctx.upload<qk::block_q8_0>(w, 1, 32);
    ctx.gemv(m, x, y);
    const auto m4 = ctx.upload<qk::block_mxfp4>(w4, 1, 32);
    ctx.gemv(m4, x, y);
    ctx.gemm(m4, 1, x, y);
    std::vector<float> a(4, 1.0f), b(4, 1.0f), out(4);
    ctx.solve_tri(a.data(), b.data(), out.data(), 2, 2, 1, {.left = false, .lower = false, .unit = true});
    ctx.sample(x, 1, x.size(), chains, {}, tokens);
}
