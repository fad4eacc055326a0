// logit_bias: adds a fixed bias to the logits of the listed tokens (e.g. -inf to ban one).
// A listed token outside the vocabulary is a qk::error at apply(), raised before any logit
// changes. Over a whole vocabulary only the listed tokens are touched.
// Differs from llama.cpp: a token listed twice, a negative token or one outside the vocabulary is
// an error, where llama_sampler_logit_bias_apply skips tokens it does not find and applies all of
// a duplicate's biases to a token still at its own index but only the first to one that is not.
#pragma once

#include <algorithm>
#include <charconv>
#include <limits>
#include <system_error>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../candidates.hpp"
#include "../parameters.hpp"

namespace qk::sampling {

class logit_bias {
public:
    static constexpr bool selects = false;
    static constexpr const char* name = "logit_bias";

    // (token, bias) pairs; a token listed twice, a negative token or a NaN bias: qk::error.
    explicit logit_bias(std::vector<std::pair<std::int32_t, float>> biases) : biases_(std::move(biases))
    {
        std::sort(biases_.begin(), biases_.end());
        for (std::size_t i = 0; i < biases_.size(); ++i) {
            const auto [token, bias] = biases_[i];
            if (token < 0 || !(bias == bias) || (i > 0 && biases_[i - 1].first == token)) {
                qk::detail::fail("qk::sampling::logit_bias: token ", token, " with bias ", bias,
                                 ": tokens must be non-negative and listed once, biases numbers");
            }
        }
    }

    void apply(candidates& c) const
    {
        if (biases_.empty()) {
            return;
        }
        if (biases_.back().first >= c.vocab_size()) {
            qk::detail::fail("qk::sampling::logit_bias: token ", biases_.back().first, " is outside the vocabulary of ",
                             c.vocab_size(), " tokens");
        }
        if (c.whole_vocabulary()) {
            for (const auto& [token, bias] : biases_) {
                c.set_logit(token, c.logit(token) + bias);
            }
            return;
        }
        for (auto& t : c.list()) {
            const auto it = std::lower_bound(biases_.begin(), biases_.end(), t.id, [](const auto& e, std::int32_t v) { return e.first < v; });
            if (it != biases_.end() && it->first == t.id) {
                t.logit = detail::without_nan(t.logit + it->second);
            }
        }
        c.logits_changed(false);
    }

    // The (token, bias) pairs, sorted by token (what a GPU backend uploads).
    [[nodiscard]] const std::vector<std::pair<std::int32_t, float>>& biases() const noexcept { return biases_; }

    [[nodiscard]] std::string describe() const
    {
        std::string s = "logit_bias(";
        for (std::size_t i = 0; i < biases_.size(); ++i) {
            s += qk::detail::message(i == 0 ? "" : ",", biases_[i].first, "=", detail::shortest{biases_[i].second});
        }
        return s + ")";
    }

    // logit_bias(15=-inf,42=2.5): each key is a token id.
    static logit_bias from_arguments(std::vector<argument> given)
    {
        std::vector<std::pair<std::int32_t, float>> biases;
        for (auto& a : given) {
            if (a.key.empty()) {
                qk::detail::fail("qk::sampling::chain::parse: logit_bias: '", a.value, "' needs the form token=bias");
            }
            const arguments one(name, {a}, {a.key});
            std::int64_t id = 0;
            const auto [end, ec] = std::from_chars(a.key.data(), a.key.data() + a.key.size(), id);
            if (ec != std::errc{} || end != a.key.data() + a.key.size() || id < 0 || id > std::numeric_limits<std::int32_t>::max()) {
                qk::detail::fail("qk::sampling::chain::parse: logit_bias: '", a.key, "' is not a token id");
            }
            biases.emplace_back(static_cast<std::int32_t>(id), one.number(a.key, 0.0f));
        }
        return logit_bias(std::move(biases));
    }

private:
    std::vector<std::pair<std::int32_t, float>> biases_;
};

} // namespace qk::sampling
