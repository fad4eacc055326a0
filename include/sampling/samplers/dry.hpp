// dry ("don't repeat yourself"): penalizes tokens that would extend a repetition of the recent
// history. Over the window w of the last `last_n` accepted tokens (-1: all since reset), for each
// position p < |w| - 1 let L(p) be the length of the longest suffix of w[0..p] that is also a
// suffix of w, capped at the length of the text after the last sequence breaker (a breaker is a
// token sequence; the latest occurrence of one, with its longest match, limits how far back a
// repetition may reach). Token w[p + 1] would extend that repetition: the largest L(p) >=
// allowed_length over its positions gives it the penalty multiplier * base^(L - allowed_length)
// (the exponent capped so the power stays finite), subtracted from its logit. Single-token
// breakers are never penalized. multiplier = 0, base < 1 or last_n = 0 turn it off.
// Cost: O(|w|) per step (a Z-function over the reversed window), none over the vocabulary.
// Differs from llama.cpp: breakers are token sequences from the caller, as
// llama_sampler_init_dry_testing takes them; llama_sampler_init_dry takes strings and derives
// token sequences from them with the vocabulary (get_overlapping_token_sequences, tails capped at
// 20 tokens), which needs a tokenizer qkern does not have. last_n = -1 means every token since
// reset(), where llama_sampler_init_dry uses its n_ctx_train argument. The penalty is a float
// capped at FLT_MAX (llama.cpp's, from a double std::pow, can overflow to inf).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "../candidates.hpp"
#include "../parameters.hpp"
#include "../recent_tokens.hpp"
#include "../sampler.hpp"

namespace qk::sampling {

class dry {
public:
    static constexpr bool selects = false;
    static constexpr const char* name = "dry";

    struct config {
        float multiplier = 0.0f;
        float base = 1.75f;
        std::int32_t allowed_length = 2;
        std::int32_t last_n = -1;
        std::vector<std::vector<std::int32_t>> breakers;
    };

    explicit dry(config cfg) : cfg_(std::move(cfg)), history_(cfg_.last_n)
    {
        if (!(cfg_.multiplier == cfg_.multiplier) || !(cfg_.base == cfg_.base) || cfg_.allowed_length < 0 || cfg_.last_n < -1) {
            qk::detail::fail("qk::sampling::dry: multiplier=", cfg_.multiplier, ", base=", cfg_.base, ", allowed_length=",
                             cfg_.allowed_length, ", last_n=", cfg_.last_n,
                             ": numbers, allowed_length >= 0 and last_n >= -1 are required");
        }
        for (const auto& b : cfg_.breakers) {
            if (b.empty()) {
                qk::detail::fail("qk::sampling::dry: a sequence breaker is empty");
            }
            for (const auto t : b) {
                if (t < 0) {
                    qk::detail::fail("qk::sampling::dry: breaker token ", t, " is negative");
                }
            }
        }
    }

    void apply(candidates& c) const
    {
        if (cfg_.multiplier == 0.0f || cfg_.base < 1.0f || cfg_.last_n == 0) {
            return;
        }
        const std::size_t n = history_.size();
        if (n <= static_cast<std::size_t>(cfg_.allowed_length)) {
            return;
        }
        window_.resize(n);
        for (std::size_t i = 0; i < n; ++i) {
            window_[i] = history_[i];
        }
        const std::size_t limit = repetition_limit();
        if (limit < static_cast<std::size_t>(cfg_.allowed_length)) {
            return;
        }
        // z[i]: the longest common prefix of the reversed window and the reversed window from i,
        // i.e. how long a suffix of w[0 .. n - 1 - i] equals a suffix of w.
        z_.assign(n, 0);
        std::size_t left = 0;
        std::size_t right = 0; // [left, right) is the rightmost match found so far
        const auto reversed = [this, n](std::size_t i) { return window_[n - 1 - i]; };
        for (std::size_t i = 1; i < n; ++i) {
            std::size_t k = 0;
            if (i < right) {
                k = std::min(right - i, z_[i - left]);
            }
            while (i + k < n && reversed(k) == reversed(i + k)) {
                ++k;
            }
            z_[i] = k;
            if (i + k > right) {
                left = i;
                right = i + k;
            }
        }
        repeats_.clear();
        for (std::size_t p = 0; p + 1 < n; ++p) {
            const std::size_t length = std::min(z_[n - 1 - p], limit);
            if (length >= static_cast<std::size_t>(cfg_.allowed_length)) {
                repeats_.emplace_back(window_[p + 1], static_cast<std::int32_t>(length));
            }
        }
        if (repeats_.empty()) {
            return;
        }
        // Longest repetition per token: sort by token, longest first, and keep the first of each.
        std::sort(repeats_.begin(), repeats_.end(), [](const auto& a, const auto& b) {
            return a.first < b.first || (a.first == b.first && a.second > b.second);
        });
        repeats_.erase(std::unique(repeats_.begin(), repeats_.end(), [](const auto& a, const auto& b) { return a.first == b.first; }),
                       repeats_.end());
        std::erase_if(repeats_, [this](const auto& r) { return single_token_breaker(r.first); });
        int max_exponent = 0;
        if (cfg_.base > 1.000001f) {
            max_exponent = static_cast<int>(88.7228391f / detail::log(cfg_.base));
        }
        const auto penalty = [this, max_exponent](std::int32_t length) {
            int exponent = length - cfg_.allowed_length;
            if (max_exponent > 0 && exponent > max_exponent) {
                exponent = max_exponent;
            }
            const float value = detail::opaque(cfg_.multiplier * detail::pow(cfg_.base, static_cast<float>(exponent)));
            return std::min(value, std::numeric_limits<float>::max());
        };
        if (c.whole_vocabulary()) {
            for (const auto& [token, length] : repeats_) {
                if (token < c.vocab_size()) {
                    c.set_logit(token, c.logit(token) - penalty(length));
                }
            }
            return;
        }
        for (auto& t : c.list()) {
            const auto it = std::lower_bound(repeats_.begin(), repeats_.end(), t.id, [](const auto& e, std::int32_t v) { return e.first < v; });
            if (it != repeats_.end() && it->first == t.id) {
                t.logit = detail::without_nan(t.logit - penalty(it->second));
            }
        }
        c.logits_changed(false);
    }

    void accept(std::int32_t token)
    {
        detail::check_token(name, token);
        history_.reserve_one();
        (void)history_.push(token);
    }
    void prepare_accept() { history_.reserve_one(); }

    void reset() { history_.clear(); }

    [[nodiscard]] std::string describe() const
    {
        std::string breakers;
        for (const auto& b : cfg_.breakers) {
            breakers += breakers.empty() ? "[" : ",[";
            for (std::size_t i = 0; i < b.size(); ++i) {
                breakers += qk::detail::message(i == 0 ? "" : ",", b[i]);
            }
            breakers += "]";
        }
        return qk::detail::message("dry(multiplier=", detail::shortest{cfg_.multiplier}, ",base=", detail::shortest{cfg_.base}, ",allowed_length=", cfg_.allowed_length,
                                   ",last_n=", cfg_.last_n, ",breakers=[", breakers, "])");
    }

    static dry from_arguments(std::vector<argument> given)
    {
        const arguments args(name, std::move(given), {"multiplier", "base", "allowed_length", "last_n", "breakers"});
        const std::int64_t allowed = args.integer("allowed_length", 2);
        const std::int64_t last_n = args.integer("last_n", -1);
        if (allowed < 0 || allowed > std::numeric_limits<std::int32_t>::max() || last_n < -1 ||
            last_n > std::numeric_limits<std::int32_t>::max()) {
            args.fail("allowed_length=", allowed, ", last_n=", last_n, ": allowed_length must be >= 0 and last_n >= -1");
        }
        return dry(config{args.number("multiplier", 0.0f), args.number("base", 1.75f), static_cast<std::int32_t>(allowed),
                          static_cast<std::int32_t>(last_n), args.sequences("breakers")});
    }

private:
    // The length of the text after the latest breaker occurrence in the window (the whole window
    // when there is none): scanning back from the newest token, the first token that starts a
    // breaker whose remaining tokens follow it (the longest such breaker) ends the search.
    [[nodiscard]] std::size_t repetition_limit() const
    {
        const std::size_t n = window_.size();
        for (std::size_t i = 0; i < n; ++i) { // i tokens from the end
            const std::int32_t token = window_[n - 1 - i];
            std::ptrdiff_t longest = -1;
            for (const auto& b : cfg_.breakers) {
                const std::size_t tail = b.size() - 1;
                if (b.front() != token || static_cast<std::ptrdiff_t>(tail) <= longest || tail > i) {
                    continue;
                }
                bool match = true;
                for (std::size_t o = 0; o < tail && match; ++o) {
                    match = b[o + 1] == window_[n - i + o];
                }
                if (match) {
                    longest = static_cast<std::ptrdiff_t>(tail);
                }
            }
            if (longest >= 0) {
                return i - static_cast<std::size_t>(longest);
            }
        }
        return n;
    }

    [[nodiscard]] bool single_token_breaker(std::int32_t token) const noexcept
    {
        return std::any_of(cfg_.breakers.begin(), cfg_.breakers.end(), [token](const auto& b) { return b.size() == 1 && b[0] == token; });
    }

    config cfg_;
    detail::recent_tokens history_;
    // Scratch, kept for its capacity.
    mutable std::vector<std::int32_t> window_;
    mutable std::vector<std::size_t> z_;
    mutable std::vector<std::pair<std::int32_t, std::int32_t>> repeats_;
};

} // namespace qk::sampling
