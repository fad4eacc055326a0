// format_traits<Block>: what generic code needs to know about a GGUF block format (values per
// block, bytes, the activation format its dot product pairs with, its name and GGUF type id). Each format header
// under formats/ specializes it next to its block struct.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace qk {

template <class Block>
struct format_traits; // specialized by each format header

// A block format: a trivially copyable struct of fixed size with traits.
template <class Block>
concept block_format = requires {
    { format_traits<Block>::block_size } -> std::convertible_to<std::size_t>;
    { format_traits<Block>::bytes } -> std::convertible_to<std::size_t>;
    { format_traits<Block>::name } -> std::convertible_to<std::string_view>;
    { format_traits<Block>::gguf_type } -> std::convertible_to<std::uint32_t>;
    typename format_traits<Block>::vec_dot_type;
} && std::is_trivially_copyable_v<Block> && std::is_standard_layout_v<Block>;

// A weight format: one with a dot product against an activation format.
template <class Block>
concept weight_format = block_format<Block> && !std::is_void_v<typename format_traits<Block>::vec_dot_type>;

// Weight formats whose model-file quantizer takes importance weights (an "imatrix").
template <class Block>
concept importance_format = block_format<Block> && format_traits<Block>::takes_importance;

// How many activation blocks one weight block pairs with: 1, except NVFP4's 64 values against
// two Q8_0 blocks. Row lengths are whole weight blocks, so activations come in whole blocks too.
template <weight_format Block>
inline constexpr std::size_t activation_blocks_per_block =
    format_traits<Block>::block_size / format_traits<typename format_traits<Block>::vec_dot_type>::block_size;

} // namespace qk
