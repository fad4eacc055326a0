// See baseline.hpp. The library's namespace is renamed here so that its inline functions, compiled
// with other flags than in the rest of the test binary, are distinct symbols (no ODR clash).
#define qk qk_baseline
#include <qkern.hpp>
#undef qk

#include "baseline.hpp"

#include <cstring>

namespace baseline {

std::vector<std::uint8_t> quantize(int format, std::span<const float> x, std::span<const float> importance)
{
    return qk_baseline::visit_format(qk_baseline::all_formats[static_cast<std::size_t>(format)], [&]<class Block>(std::type_identity<Block>) {
        std::vector<Block> blocks(x.size() / qk_baseline::format_traits<Block>::block_size);
        if constexpr (qk_baseline::importance_format<Block>) {
            if (!importance.empty()) {
                qk_baseline::quantize<Block>(x, std::span<Block>(blocks), importance);
            } else {
                qk_baseline::quantize<Block>(x, std::span<Block>(blocks));
            }
        } else {
            qk_baseline::quantize<Block>(x, std::span<Block>(blocks));
        }
        std::vector<std::uint8_t> bytes(blocks.size() * sizeof(Block));
        std::memcpy(bytes.data(), blocks.data(), bytes.size());
        return bytes;
    });
}

float dot(int weight_format, std::span<const std::uint8_t> w, std::span<const std::uint8_t> a)
{
    return qk_baseline::visit_format(qk_baseline::all_formats[static_cast<std::size_t>(weight_format)], [&]<class Block>(std::type_identity<Block>) {
        if constexpr (qk_baseline::weight_format<Block>) {
            using activation = typename qk_baseline::format_traits<Block>::vec_dot_type;
            std::vector<Block> wb(w.size() / sizeof(Block));
            std::vector<activation> ab(a.size() / sizeof(activation));
            std::memcpy(wb.data(), w.data(), w.size());
            std::memcpy(ab.data(), a.data(), a.size());
            return qk_baseline::dot<Block, qk_baseline::arch::generic>(wb, ab);
        } else {
            return 0.0f;
        }
    });
}

} // namespace baseline
