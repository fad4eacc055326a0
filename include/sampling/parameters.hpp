// The arguments of one sampler in chain syntax, `name(value, key=value, ...)`: positional values
// fill the sampler's parameters in their documented order, named ones go by name. The samplers'
// from_arguments() read them through this class, which names the sampler, the parameter and the
// text in every error.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "../kernels/error.hpp"

namespace qk::sampling {

namespace detail {

// A float printed in the fewest digits that read back as the same float (0.95, not 0.949999988),
// so describe() strings are short and chain::parse(describe()) rebuilds the same sampler.
struct shortest {
    float value;
    friend std::ostream& operator<<(std::ostream& out, shortest s)
    {
        char text[32];
        const auto result = std::to_chars(text, text + sizeof text, s.value);
        return out.write(text, result.ptr - text);
    }
};

// A min_keep as the samplers hold it: no set has more than 2^31 - 1 candidates, so every larger
// value keeps them all alike, and clamped it is one that describe() writes and parse() reads back
// (parse takes signed 64-bit integers; 2^63 and up did not read back).
[[nodiscard]] constexpr std::size_t keep_bound(std::size_t min_keep) noexcept
{
    constexpr auto most = static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max());
    return min_keep < most ? min_keep : most;
}

} // namespace detail

struct argument {
    std::string key; // empty for a positional value
    std::string value;
};

class arguments {
public:
    // `names`: the sampler's parameters in positional order.
    arguments(std::string_view sampler, std::vector<argument> given, std::vector<std::string_view> names)
        : sampler_(sampler), names_(std::move(names))
    {
        std::size_t position = 0;
        for (auto& a : given) {
            if (a.key.empty()) {
                if (position >= names_.size()) {
                    fail("takes at most ", names_.size(), " positional value", names_.size() == 1 ? "" : "s",
                         ", got '", a.value, "' as value ", position + 1);
                }
                a.key = std::string(names_[position++]);
            } else {
                bool known = false;
                for (const auto n : names_) {
                    known = known || n == a.key;
                }
                if (!known) {
                    fail("has no parameter '", a.key, "' (it takes: ", list_names(), ")");
                }
            }
            for (const auto& seen : values_) {
                if (seen.key == a.key) {
                    fail("parameter '", a.key, "' is given twice");
                }
            }
            values_.push_back(std::move(a));
        }
    }

    [[nodiscard]] const std::string* find(std::string_view name) const noexcept
    {
        for (const auto& a : values_) {
            if (a.key == name) {
                return &a.value;
            }
        }
        return nullptr;
    }

    [[nodiscard]] float number(std::string_view name, float fallback) const
    {
        const std::string* text = find(name);
        if (text == nullptr) {
            return fallback;
        }
        std::string_view t = *text;
        if (!t.empty() && t.front() == '+') {
            t.remove_prefix(1);
        }
        double v = 0;
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (ec != std::errc{} || end != t.data() + t.size() || std::isnan(v)) {
            fail(name, "='", *text, "' is not a number");
        }
        // Refused only where the float would be inf: from the midpoint between FLT_MAX and 2^128
        // up. FLT_MAX itself is written 3.4028235e+38 (shortest{}, so describe() too), a little
        // above it, and must read back as FLT_MAX.
        constexpr double float_overflow = 0x1.ffffffp+127;
        if (std::isfinite(v) && std::fabs(v) >= float_overflow) {
            fail(name, "='", *text, "' does not fit a float");
        }
        return static_cast<float>(v);
    }

    [[nodiscard]] std::int64_t integer(std::string_view name, std::int64_t fallback) const
    {
        const std::string* text = find(name);
        if (text == nullptr) {
            return fallback;
        }
        return parse_integer(name, *text);
    }

    // A seed: any 64-bit unsigned value.
    [[nodiscard]] std::uint64_t seed(std::string_view name, std::uint64_t fallback) const
    {
        const std::string* text = find(name);
        if (text == nullptr) {
            return fallback;
        }
        std::uint64_t v = 0;
        const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
        if (ec != std::errc{} || end != text->data() + text->size()) {
            fail(name, "='", *text, "' is not a seed (an integer from 0 to 2^64 - 1)");
        }
        return v;
    }

    // A list such as [[13],[29871,13]]: a list of token sequences.
    [[nodiscard]] std::vector<std::vector<std::int32_t>> sequences(std::string_view name) const
    {
        std::vector<std::vector<std::int32_t>> result;
        const std::string* text = find(name);
        if (text == nullptr) {
            return result;
        }
        const std::string_view t = *text;
        if (t.size() < 2 || t.front() != '[' || t.back() != ']') {
            fail(name, "='", t, "' is not a list of token lists such as [[13],[198,13]]");
        }
        std::string_view rest = t.substr(1, t.size() - 2);
        while (!rest.empty()) {
            if (rest.front() != '[') {
                fail(name, "='", t, "': expected '[' at '", rest, "'");
            }
            const auto close = rest.find(']');
            if (close == std::string_view::npos) {
                fail(name, "='", t, "': a '[' is not closed");
            }
            std::vector<std::int32_t> sequence;
            std::string_view items = rest.substr(1, close - 1);
            while (!items.empty()) {
                const auto comma = items.find(',');
                const std::string_view item = items.substr(0, comma);
                const std::int64_t v = parse_integer(name, item);
                if (v < 0 || v > std::numeric_limits<std::int32_t>::max()) {
                    fail(name, "='", t, "': ", v, " is not a token id");
                }
                sequence.push_back(static_cast<std::int32_t>(v));
                items = comma == std::string_view::npos ? std::string_view{} : items.substr(comma + 1);
                if (comma != std::string_view::npos && items.empty()) {
                    fail(name, "='", t, "': a list ends with ','");
                }
            }
            if (sequence.empty()) {
                fail(name, "='", t, "': an empty token list");
            }
            result.push_back(std::move(sequence));
            rest.remove_prefix(close + 1);
            if (!rest.empty()) {
                if (rest.front() != ',' || rest.size() == 1) {
                    fail(name, "='", t, "': expected ',' between lists at '", rest, "'");
                }
                rest.remove_prefix(1);
            }
        }
        return result;
    }

    // Every argument, for samplers whose keys are data (logit_bias: token=bias).
    [[nodiscard]] const std::vector<argument>& all() const noexcept { return values_; }

    template <class... Parts>
    [[noreturn]] void fail(Parts&&... parts) const
    {
        qk::detail::fail("qk::sampling::chain::parse: ", sampler_, ": ", std::forward<Parts>(parts)...);
    }

private:
    [[nodiscard]] std::int64_t parse_integer(std::string_view name, std::string_view text) const
    {
        std::string_view t = text;
        if (!t.empty() && t.front() == '+') {
            t.remove_prefix(1);
        }
        std::int64_t v = 0;
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (ec != std::errc{} || end != t.data() + t.size()) {
            fail(name, "='", text, "' is not an integer");
        }
        return v;
    }

    [[nodiscard]] std::string list_names() const
    {
        std::string s;
        for (const auto n : names_) {
            s += s.empty() ? "" : ", ";
            s += n;
        }
        return s.empty() ? "no parameters" : s;
    }

    std::string_view sampler_;
    std::vector<std::string_view> names_;
    std::vector<argument> values_;
};

} // namespace qk::sampling
