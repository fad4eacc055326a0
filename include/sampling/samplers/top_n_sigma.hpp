// top_n_sigma: with m the largest logit and mean and sigma the mean and standard deviation of the
// logits above -inf (population form, summed in float in the set's order), every logit below
// m - n sigma becomes -inf (the candidates stay in the set). n <= 0, or fewer than two
// candidates, changes nothing.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "../candidates.hpp"
#include "../parameters.hpp"

namespace qk::sampling {

class top_n_sigma {
public:
    static constexpr bool selects = false;
    static constexpr const char* name = "top_n_sigma";

    explicit top_n_sigma(float n) : n_(n)
    {
        if (!(n == n)) {
            qk::detail::fail("qk::sampling::top_n_sigma: n is NaN");
        }
    }

    void apply(candidates& c) const
    {
        if (!(n_ > 0.0f) || c.size() <= 1) {
            return;
        }
        if (c.whole_vocabulary()) {
            const auto d = c.dense();
            mask(d, [](float& v) -> float& { return v; });
            return;
        }
        auto& l = c.list();
        mask(std::span<token_data>(l), [](token_data& t) -> float& { return t.logit; });
        c.logits_changed(false);
    }

    [[nodiscard]] std::string describe() const { return qk::detail::message("top_n_sigma(n=", detail::shortest{n_}, ")"); }

    static top_n_sigma from_arguments(std::vector<argument> given)
    {
        const arguments args(name, std::move(given), {"n"});
        return top_n_sigma(args.number("n", 1.0f));
    }

private:
    template <class T, class Logit>
    void mask(std::span<T> items, Logit logit) const
    {
        float max = detail::minus_infinity;
        float sum = 0.0f;
        std::size_t count = 0;
        for (auto& item : items) {
            const float v = logit(item);
            if (v > detail::minus_infinity) {
                max = v > max ? v : max;
                sum = sum + v;
                ++count;
            }
        }
        const float mean = count > 0 ? sum / static_cast<float>(count) : 0.0f;
        float squares = 0.0f;
        for (auto& item : items) {
            const float v = logit(item);
            if (v > detail::minus_infinity) {
                squares = squares + detail::opaque((v - mean) * (v - mean));
            }
        }
        const float sigma = count > 0 ? std::sqrt(squares / static_cast<float>(count)) : 0.0f;
        const float threshold = max - detail::opaque(n_ * sigma);
        for (auto& item : items) {
            float& v = logit(item);
            if (!(v >= threshold)) {
                v = detail::minus_infinity;
            }
        }
    }

    float n_;
};

} // namespace qk::sampling
