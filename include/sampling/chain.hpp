// qk::sampling::chain: samplers applied in order to one step's logits, ending with one that
// selects the token. Built in code with add(), or parsed from a string such as
// "penalties(last_n=64,repeat=1.1);top_k(40);top_p(0.95);min_p(0.05);temp(0.8);dist(seed=42)".
// A chain is itself a sampler (it can be added to another), and copying it copies all its state.
#pragma once

#include <cctype>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../kernels/error.hpp"
#include "candidates.hpp"
#include "parameters.hpp"
#include "sampler.hpp"
#include "samplers/adaptive_p.hpp"
#include "samplers/dist.hpp"
#include "samplers/dry.hpp"
#include "samplers/greedy.hpp"
#include "samplers/logit_bias.hpp"
#include "samplers/min_p.hpp"
#include "samplers/mirostat.hpp"
#include "samplers/penalties.hpp"
#include "samplers/temperature.hpp"
#include "samplers/top_k.hpp"
#include "samplers/top_n_sigma.hpp"
#include "samplers/top_p.hpp"
#include "samplers/typical.hpp"
#include "samplers/xtc.hpp"

namespace qk::sampling {

class chain {
public:
    static constexpr bool selects = true;

    chain() = default;

    chain& add(sampler s)
    try {
        append(std::move(s), false);
        return *this;
    } catch (...) {
        qk::detail::rethrow_as_error("qk::sampling::chain::add");
    }

    // Parses `name(args);name(args);...`. Names: greedy, dist, temp (temperature), temp_ext
    // (dynatemp), top_k, top_p, min_p, typical (typ_p), top_n_sigma, xtc, mirostat, mirostat_v2,
    // adaptive_p, penalties, dry, logit_bias; each header lists its parameters in positional
    // order. Unknown names, bad values, empty parts, or a chain whose last sampler selects
    // nothing: qk::error naming the part.
    [[nodiscard]] static chain parse(std::string_view text)
    try {
        chain result;
        std::size_t start = 0;
        std::size_t index = 0;
        while (start <= text.size()) {
            const std::size_t end = find_top_level(text, ';', start);
            const std::string_view part = trim(text.substr(start, end - start));
            ++index;
            if (part.empty()) {
                if (end == text.size() && index > 1) {
                    break; // one trailing ';'
                }
                qk::detail::fail("qk::sampling::chain::parse: sampler ", index, " of '", text, "' is empty");
            }
            bool seed_written = false;
            sampler one = parse_one(part, seed_written);
            result.append(std::move(one), seed_written);
            if (end == text.size()) {
                break;
            }
            start = end + 1;
        }
        result.check_selects("qk::sampling::chain::parse");
        return result;
    } catch (...) {
        qk::detail::rethrow_as_error("qk::sampling::chain::parse");
    }

    // Samples one token from the logits (NaN counts as -inf) and accepts it. On any error, memory
    // running out included, nothing was accepted: histories, windows and adaptive state are as
    // they were (the random generators may have drawn, as they do in select()).
    std::int32_t sample(std::span<const float> logits)
    try {
        prepare_accept(); // the one step that allocates as the window grows, done before any state moves
        const std::int32_t token = select_token("qk::sampling::chain::sample", logits);
        accept_prepared(token);
        return token;
    } catch (...) {
        qk::detail::rethrow_as_error("qk::sampling::chain::sample");
    }

    // Runs the chain without accepting: the token the chain selects. final_candidates() then
    // gives the set it was selected from.
    std::int32_t select(std::span<const float> logits)
    try {
        return select_token("qk::sampling::chain::select", logits);
    } catch (...) {
        qk::detail::rethrow_as_error("qk::sampling::chain::select");
    }

    // The candidates the last select() or sample() chose from, with probabilities (the softmax of
    // their final logits), in the chain's final order. Converts a whole vocabulary into a list,
    // reading the last step's logits again: they must still be alive and unchanged.
    [[nodiscard]] std::span<const token_data> final_candidates()
    try {
        if (candidates_.size() == 0 || candidates_.selected() < 0) {
            qk::detail::fail("qk::sampling::chain::final_candidates: nothing has been sampled yet");
        }
        candidates_.compute_probabilities();
        return candidates_.list();
    } catch (...) {
        qk::detail::rethrow_as_error("qk::sampling::chain::final_candidates");
    }

    // The chain as a sampler.
    void apply(candidates& c)
    try {
        for (auto& s : samplers_) {
            s.apply(c);
        }
    } catch (...) {
        qk::detail::rethrow_as_error("qk::sampling::chain::apply");
    }
    // Every sampler takes the token, or none does: room for it is made in all of them first.
    void accept(std::int32_t token)
    try {
        detail::check_token("chain", token);
        prepare_accept();
        accept_prepared(token);
    } catch (...) {
        qk::detail::rethrow_as_error("qk::sampling::chain::accept");
    }
    // Makes room for one more accepted token in every sampler (the windows of penalties and dry
    // grow with use); the accept() that follows then allocates nothing.
    void prepare_accept()
    {
        for (auto& s : samplers_) {
            s.prepare_accept();
        }
    }
    void reseed(std::uint64_t seed)
    {
        for (auto& s : samplers_) {
            s.reseed(seed);
        }
    }
    void reset()
    {
        for (auto& s : samplers_) {
            s.reset();
        }
    }

    [[nodiscard]] std::string describe() const
    try {
        std::string s;
        for (const auto& x : samplers_) {
            s += s.empty() ? "" : ";";
            s += x.describe();
        }
        return s;
    } catch (...) {
        qk::detail::rethrow_as_error("qk::sampling::chain::describe");
    }

    // Whether the text parse() read gave sampler i its seed, by name or in its place among the
    // positional values (dist(seed=7), dist(7)): a caller that reseeds the samplers can leave
    // alone the seeds its user wrote. False for a sampler that takes no seed, or left it to its
    // default, and for one added with add(); reseed() does not change it. i >= size(): std::out_of_range.
    [[nodiscard]] bool seed_written(std::size_t i) const { return seed_written_.at(i); }

    [[nodiscard]] std::size_t size() const noexcept { return samplers_.size(); }
    [[nodiscard]] sampler& operator[](std::size_t i) { return samplers_.at(i); }
    [[nodiscard]] const sampler& operator[](std::size_t i) const { return samplers_.at(i); }

private:
    std::int32_t select_token(const char* call, std::span<const float> logits)
    {
        check_selects(call);
        candidates_.reset(logits);
        // Checked before any sampler runs, so that an error leaves every sampler as it was.
        if (detail::find_finite<arch::vector_native>(logits.data(), logits.size()) == logits.size()) {
            qk::detail::fail(call, ": all ", logits.size(), " logits are -inf or NaN; nothing can be sampled");
        }
        for (auto& s : samplers_) {
            s.apply(candidates_);
        }
        return candidates_.selected();
    }

    void append(sampler s, bool seed_written)
    {
        // Both reserved first, so that running out of memory leaves the chain as it was.
        samplers_.reserve(samplers_.size() + 1);
        seed_written_.reserve(seed_written_.size() + 1);
        samplers_.push_back(std::move(s));
        seed_written_.push_back(seed_written);
    }

    void accept_prepared(std::int32_t token)
    {
        for (auto& s : samplers_) {
            s.accept(token);
        }
    }

    void check_selects(const char* where) const
    {
        if (samplers_.empty()) {
            qk::detail::fail(where, ": the chain is empty; it needs a selecting sampler (greedy, dist, mirostat, mirostat_v2, adaptive_p)");
        }
        if (!samplers_.back().selects()) {
            qk::detail::fail(where, ": the chain ends with '", samplers_.back().describe(),
                             "', which selects no token; end it with greedy, dist, mirostat, mirostat_v2 or adaptive_p");
        }
    }

    [[nodiscard]] static std::string_view trim(std::string_view s) noexcept
    {
        while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) {
            s.remove_prefix(1);
        }
        while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) {
            s.remove_suffix(1);
        }
        return s;
    }

    // The first `c` at bracket depth 0 from `start`, or the end.
    [[nodiscard]] static std::size_t find_top_level(std::string_view s, char c, std::size_t start) noexcept
    {
        int depth = 0;
        for (std::size_t i = start; i < s.size(); ++i) {
            if (s[i] == c && depth == 0) {
                return i;
            }
            if (s[i] == '(' || s[i] == '[') {
                ++depth;
            } else if (s[i] == ')' || s[i] == ']') {
                --depth;
            }
        }
        return s.size();
    }

    // Where each sampler that takes a seed has it among its positional values: the order its
    // from_arguments() lists (the chain tests check this against parse() itself).
    [[nodiscard]] static std::optional<std::size_t> seed_position(std::string_view name) noexcept
    {
        if (name == "dist") {
            return 0;
        }
        if (name == "mirostat_v2" || name == "adaptive_p") {
            return 2;
        }
        if (name == "mirostat" || name == "xtc") {
            return 3;
        }
        return std::nullopt;
    }

    [[nodiscard]] static bool writes_seed(std::string_view name, const std::vector<argument>& args) noexcept
    {
        const std::optional<std::size_t> position = seed_position(name);
        if (!position) {
            return false;
        }
        std::size_t positional = 0;
        for (const argument& a : args) {
            if (a.key == "seed") {
                return true;
            }
            positional += a.key.empty() ? 1 : 0;
        }
        return positional > *position;
    }

    // `seed_written`: set to whether the part gives the sampler its seed (see seed_written()).
    [[nodiscard]] static sampler parse_one(std::string_view part, bool& seed_written)
    {
        const std::size_t open = part.find('(');
        const std::string_view name = trim(part.substr(0, open));
        std::vector<argument> args;
        if (open != std::string_view::npos) {
            if (part.back() != ')' || find_top_level(part, ')', open + 1) != part.size() - 1) {
                qk::detail::fail("qk::sampling::chain::parse: '", part, "': the argument list must end with one ')'");
            }
            const std::string_view inner = part.substr(open + 1, part.size() - open - 2);
            std::size_t start = 0;
            while (!trim(inner).empty() && start <= inner.size()) {
                const std::size_t end = find_top_level(inner, ',', start);
                const std::string_view item = trim(inner.substr(start, end - start));
                if (item.empty()) {
                    qk::detail::fail("qk::sampling::chain::parse: '", part, "': an empty argument");
                }
                const std::size_t eq = item.find('=');
                if (eq == std::string_view::npos) {
                    args.push_back({"", std::string(item)});
                } else {
                    const std::string_view key = trim(item.substr(0, eq));
                    const std::string_view value = trim(item.substr(eq + 1));
                    if (key.empty() || value.empty()) {
                        qk::detail::fail("qk::sampling::chain::parse: '", part, "': '", item, "' needs the form key=value");
                    }
                    args.push_back({std::string(key), std::string(value)});
                }
                if (end == inner.size()) {
                    break;
                }
                start = end + 1;
            }
        }
        seed_written = writes_seed(name, args);
        if (name == "greedy") {
            return greedy::from_arguments(std::move(args));
        }
        if (name == "dist") {
            return dist::from_arguments(std::move(args));
        }
        if (name == "temp" || name == "temperature") {
            return temp::from_arguments(std::move(args));
        }
        if (name == "temp_ext" || name == "dynatemp") {
            return temp_ext::from_arguments(std::move(args));
        }
        if (name == "top_k") {
            return top_k::from_arguments(std::move(args));
        }
        if (name == "top_p") {
            return top_p::from_arguments(std::move(args));
        }
        if (name == "min_p") {
            return min_p::from_arguments(std::move(args));
        }
        if (name == "typical" || name == "typ_p") {
            return typical::from_arguments(std::move(args));
        }
        if (name == "top_n_sigma") {
            return top_n_sigma::from_arguments(std::move(args));
        }
        if (name == "xtc") {
            return xtc::from_arguments(std::move(args));
        }
        if (name == "mirostat") {
            return mirostat::from_arguments(std::move(args));
        }
        if (name == "mirostat_v2") {
            return mirostat_v2::from_arguments(std::move(args));
        }
        if (name == "adaptive_p") {
            return adaptive_p::from_arguments(std::move(args));
        }
        if (name == "penalties") {
            return penalties::from_arguments(std::move(args));
        }
        if (name == "dry") {
            return dry::from_arguments(std::move(args));
        }
        if (name == "logit_bias") {
            return logit_bias::from_arguments(std::move(args));
        }
        qk::detail::fail("qk::sampling::chain::parse: unknown sampler '", name, "' in '", part,
                         "' (known: greedy, dist, temp, temp_ext, top_k, top_p, min_p, typical, top_n_sigma, xtc, mirostat, "
                         "mirostat_v2, adaptive_p, penalties, dry, logit_bias)");
    }

    std::vector<sampler> samplers_;
    std::vector<bool> seed_written_; // one per sampler
    candidates candidates_;
};

} // namespace qk::sampling
