// penalties: repetition, frequency and presence penalties over the last `last_n` accepted tokens
// (-1: every token accepted since reset). A candidate that occurred c > 0 times there gets its
// logit multiplied by `repeat` if it is <= 0, divided by it otherwise, and then lowered by
// c * frequency + presence. last_n = 0, or repeat = 1 with frequency = presence = 0, changes
// nothing. Over a whole vocabulary only the tokens in the history are touched.
// Differs from llama.cpp for last_n = -1, which here means every token accepted since reset() (a
// window without bound): llama_sampler_init_penalties clamps a negative last_n to 0 (off), and
// llama.cpp's callers (common_init_from_params, the server) replace -1 by the context size first.
// Otherwise the rule is llama_sampler_penalties_apply's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../candidates.hpp"
#include "../parameters.hpp"
#include "../recent_tokens.hpp"
#include "../sampler.hpp"

namespace qk::sampling {

class penalties {
public:
    static constexpr bool selects = false;
    static constexpr const char* name = "penalties";

    struct config {
        std::int32_t last_n = 64;
        float repeat = 1.0f;
        float frequency = 0.0f;
        float presence = 0.0f;
    };

    explicit penalties(config cfg) : cfg_(cfg), history_(cfg.last_n)
    {
        if (cfg.last_n < -1 || !(cfg.repeat == cfg.repeat) || !(cfg.frequency == cfg.frequency) || !(cfg.presence == cfg.presence)) {
            qk::detail::fail("qk::sampling::penalties: last_n=", cfg.last_n, ", repeat=", cfg.repeat, ", frequency=", cfg.frequency,
                             ", presence=", cfg.presence, ": last_n must be -1 or more and the factors numbers");
        }
    }

    void apply(candidates& c) const
    {
        if (cfg_.last_n == 0 || (cfg_.repeat == 1.0f && cfg_.frequency == 0.0f && cfg_.presence == 0.0f) || counts_.empty()) {
            return;
        }
        if (c.whole_vocabulary()) {
            for (const auto& [token, count] : counts_) {
                if (token < c.vocab_size()) {
                    c.set_logit(token, penalize(c.logit(token), count));
                }
            }
            return;
        }
        for (auto& t : c.list()) {
            const auto it = find(t.id);
            if (it != counts_.end() && it->first == t.id) {
                t.logit = detail::without_nan(penalize(t.logit, it->second));
            }
        }
        c.logits_changed(false);
    }

    void accept(std::int32_t token)
    {
        detail::check_token(name, token);
        if (cfg_.last_n == 0) {
            return;
        }
        prepare_accept(); // nothing below allocates, so memory running out changes nothing
        if (const auto old = history_.push(token)) {
            const auto it = find(*old);
            if (--it->second == 0) {
                counts_.erase(it);
            }
        }
        const auto it = find(token);
        if (it != counts_.end() && it->first == token) {
            ++it->second;
        } else {
            counts_.insert(it, {token, 1});
        }
    }

    // Room for one more token in the window and one more count.
    void prepare_accept()
    {
        if (cfg_.last_n == 0) {
            return;
        }
        history_.reserve_one();
        if (counts_.size() == counts_.capacity()) {
            counts_.reserve(std::max<std::size_t>(16, counts_.size() * 2));
        }
    }

    void reset()
    {
        history_.clear();
        counts_.clear();
    }

    // How often each token occurs in the window, by token.
    [[nodiscard]] const std::vector<std::pair<std::int32_t, std::int32_t>>& counts() const noexcept { return counts_; }

    [[nodiscard]] std::string describe() const
    {
        return qk::detail::message("penalties(last_n=", cfg_.last_n, ",repeat=", detail::shortest{cfg_.repeat}, ",frequency=", detail::shortest{cfg_.frequency},
                                   ",presence=", detail::shortest{cfg_.presence}, ")");
    }

    static penalties from_arguments(std::vector<argument> given)
    {
        const arguments args(name, std::move(given), {"last_n", "repeat", "frequency", "presence"});
        const std::int64_t last_n = args.integer("last_n", 64);
        if (last_n < -1 || last_n > std::numeric_limits<std::int32_t>::max()) {
            args.fail("last_n=", last_n, ": must be -1 (everything) or a count");
        }
        return penalties(config{static_cast<std::int32_t>(last_n), args.number("repeat", 1.0f), args.number("frequency", 0.0f),
                                args.number("presence", 0.0f)});
    }

private:
    [[nodiscard]] float penalize(float logit, std::int32_t count) const noexcept
    {
        const float scaled = logit <= 0.0f ? logit * cfg_.repeat : logit / cfg_.repeat;
        return scaled - (detail::opaque(static_cast<float>(count) * cfg_.frequency) + cfg_.presence);
    }

    using count_iterator = std::vector<std::pair<std::int32_t, std::int32_t>>::iterator;
    using count_const_iterator = std::vector<std::pair<std::int32_t, std::int32_t>>::const_iterator;
    [[nodiscard]] count_iterator find(std::int32_t token)
    {
        return std::lower_bound(counts_.begin(), counts_.end(), token, [](const auto& e, std::int32_t t) { return e.first < t; });
    }
    [[nodiscard]] count_const_iterator find(std::int32_t token) const
    {
        return std::lower_bound(counts_.begin(), counts_.end(), token, [](const auto& e, std::int32_t t) { return e.first < t; });
    }

    config cfg_;
    detail::recent_tokens history_;
    std::vector<std::pair<std::int32_t, std::int32_t>> counts_;
};

} // namespace qk::sampling
