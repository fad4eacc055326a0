// temp(t): divides every logit by t. t <= 0 means greedy: the first candidate with the largest
// logit (the lowest id over a whole vocabulary) keeps its logit and every other becomes -inf.
// temp_ext(t, delta, exponent), dynamic temperature: with delta > 0 and more than one candidate,
// the temperature is t - delta + 2 delta (H / log n)^exponent (the lower end clamped at 0), where
// H is the entropy of the candidates' softmax and n their number, and the result has fresh
// probabilities; with delta <= 0 it is temp(t).
// Differs from llama.cpp: temp_ext keeps the set's order (a whole vocabulary becomes a list in id
// order, not sorted), where llama_sampler_temp_ext_apply sorts the set by logit before taking the
// entropy (llama_sampler_softmax_impl with do_sort, ties in no defined order), and its final p are
// candidates::compute_probabilities' (within 6e-7 of exact) where llama.cpp recomputes them with
// expf in double. temp is llama_sampler_temp_impl's rule: t <= 0 keeps the first largest logit in
// the set's order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "../candidates.hpp"
#include "../parameters.hpp"

namespace qk::sampling {

namespace detail {

inline void apply_temperature(candidates& c, float t)
{
    if (t == 1.0f) {
        return;
    }
    if (t <= 0.0f) {
        if (c.whole_vocabulary()) {
            const float* x = c.vocabulary_logits();
            const auto n = static_cast<std::size_t>(c.vocab_size());
            const float max = c.vocabulary_max();
            const std::size_t keep = find_value<arch::vector_native>(x, n, max);
            auto d = c.dense();
            for (std::size_t i = 0; i < d.size(); ++i) {
                d[i] = i == keep ? d[i] : minus_infinity;
            }
            return;
        }
        auto& l = c.list();
        std::size_t keep = 0;
        for (std::size_t i = 1; i < l.size(); ++i) {
            keep = l[i].logit > l[keep].logit ? i : keep;
        }
        for (std::size_t i = 0; i < l.size(); ++i) {
            l[i].logit = i == keep ? l[i].logit : minus_infinity;
        }
        c.logits_changed(false);
        return;
    }
    if (c.whole_vocabulary()) {
        for (float& v : c.dense()) {
            v = v / t;
        }
        return;
    }
    for (auto& e : c.list()) {
        e.logit = without_nan(e.logit / t);
    }
    // Dividing keeps the order of logits but may round two of them to one value, which would
    // then need the id order: the list is no longer known to be sorted.
    c.logits_changed(false);
}

} // namespace detail

class temp {
public:
    static constexpr bool selects = false;
    static constexpr const char* name = "temp";

    explicit temp(float t) : t_(t)
    {
        if (!(t == t)) {
            qk::detail::fail("qk::sampling::temp: t is NaN");
        }
    }

    void apply(candidates& c) const { detail::apply_temperature(c, t_); }

    [[nodiscard]] float t() const noexcept { return t_; }
    [[nodiscard]] std::string describe() const { return qk::detail::message("temp(t=", detail::shortest{t_}, ")"); }

    static temp from_arguments(std::vector<argument> given)
    {
        const arguments args(name, std::move(given), {"t"});
        return temp(args.number("t", 0.8f));
    }

private:
    float t_;
};

class temp_ext {
public:
    static constexpr bool selects = false;
    static constexpr const char* name = "temp_ext";

    temp_ext(float t, float delta, float exponent = 1.0f) : t_(t), delta_(delta), exponent_(exponent)
    {
        if (!(t == t) || !(delta == delta) || !(exponent == exponent)) {
            qk::detail::fail("qk::sampling::temp_ext: t=", t, ", delta=", delta, ", exponent=", exponent, ": NaN");
        }
    }

    void apply(candidates& c) const
    {
        if (!(delta_ > 0.0f)) {
            detail::apply_temperature(c, t_);
            return;
        }
        if (c.size() <= 1) {
            return;
        }
        const float low = std::max(0.0f, t_ - delta_);
        const float high = t_ + delta_;
        auto& l = c.list();
        const float max_entropy = -detail::log(1.0f / static_cast<float>(l.size()));
        c.compute_probabilities();
        float entropy = 0.0f;
        for (const auto& e : l) {
            if (e.p > 0.0f) {
                entropy = entropy - detail::opaque(e.p * detail::log(e.p));
            }
        }
        const float normalized = entropy / max_entropy;
        const float dynamic = low + detail::opaque((high - low) * detail::pow(normalized, exponent_));
        // Refused before the set is rescaled (the division apply_temperature makes), so that an
        // error leaves it as it was: a maximum the division makes +inf, or NaN (t and delta near
        // FLT_MAX make high - low infinite, and times a zero power NaN).
        if (!(dynamic <= 0.0f)) {
            c.check_max(detail::list_max(l) / dynamic);
        }
        detail::apply_temperature(c, dynamic);
        c.compute_probabilities();
    }

    [[nodiscard]] std::string describe() const
    {
        return qk::detail::message("temp_ext(t=", detail::shortest{t_}, ",delta=", detail::shortest{delta_}, ",exponent=", detail::shortest{exponent_}, ")");
    }

    static temp_ext from_arguments(std::vector<argument> given)
    {
        const arguments args(name, std::move(given), {"t", "delta", "exponent"});
        return temp_ext(args.number("t", 0.8f), args.number("delta", 0.0f), args.number("exponent", 1.0f));
    }

private:
    float t_;
    float delta_;
    float exponent_;
};

} // namespace qk::sampling
