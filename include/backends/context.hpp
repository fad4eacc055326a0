// qk::backend::context: the operations every backend's context offers (the CPU's, Vulkan's,
// Metal's), so that engine code written against one compiles against the others. Each backend's
// context.hpp checks its class against it with static_assert; later operations join here.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "../kernels/formats.hpp"
#include "../kernels/solve_tri.hpp"
#include "../sampling/chain.hpp"

namespace qk::backend {

// Resident weights of one format: upload(blocks, rows, cols) gives C::matrix_type<Block>, which
// gemv(matrix, x, y) multiplies (y = W·x) and gemm(matrix, columns, x, y) too (Y = W·X, x and y
// column-major: x[c * cols + i], y[c * rows + r]).
template <class C, class Block>
concept weights_of = requires(C& c, const C& const_c, std::span<const Block> blocks, std::size_t rows, std::size_t cols,
                              const typename C::template matrix_type<Block>& w, std::span<const float> x, std::span<float> y) {
    { const_c.upload(blocks, rows, cols) } -> std::same_as<typename C::template matrix_type<Block>>;
    c.gemv(w, x, y);
    c.gemm(w, cols, x, y);
};

// Whether C takes every format of a format_list.
template <class C, class Formats>
inline constexpr bool takes_formats = false;
template <class C, class... Blocks>
inline constexpr bool takes_formats<C, format_list<Blocks...>> = (weights_of<C, Blocks> && ...);

// name(): a description for reports. solve_tri on ggml's contiguous layout (as qk::solve_tri),
// sample over [n_seq x n_vocab] logits with one chain per sequence (as qk::sampling::sample_batch).
template <class C>
concept context = takes_formats<C, weight_formats> &&
                  requires(C& c, const C& const_c, const float* a, const float* b, float* x, std::int64_t n, tri_options options,
                           std::span<const float> logits, std::size_t n_seq, std::span<sampling::chain> chains,
                           std::span<const std::uint8_t> active, std::span<std::int32_t> tokens) {
                      { const_c.name() } -> std::convertible_to<std::string>;
                      c.solve_tri(a, b, x, n, n, n, options);
                      c.solve_tri(a, b, x, n, n, n);
                      c.sample(logits, n_seq, n_seq, chains, active, tokens);
                  };

} // namespace qk::backend
