// Progress of a long subcommand on stderr (stdout keeps the results, so a pipe or --json output
// is never mixed with it). On a terminal: one line rewritten in place with `\r`, at most four
// times a second, with done/total, the percentage and an estimate of the time left, replaced at
// the end by a summary line. Elsewhere (a log, a pipe, a CI job) no `\r` ever: only the summary
// line. Work done within a second prints nothing at all, so quick runs stay as quiet as before.
// QK_PROGRESS=terminal, log or off overrides the choice (the tests use it; so can a user whose
// terminal is not a tty, or who wants silence).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#if __has_include(<unistd.h>)
#include <unistd.h>
#endif

#include <fmt/core.h>

namespace qk_tool {

enum class progress_mode {
    off,      // nothing
    terminal, // the \r-rewritten line, then the summary
    log,      // the summary only
};

inline progress_mode progress_mode_for_stderr()
{
    if (const char* forced = std::getenv("QK_PROGRESS"); forced != nullptr && *forced != '\0') {
        const std::string_view v(forced);
        if (v == "terminal") {
            return progress_mode::terminal;
        }
        if (v == "log") {
            return progress_mode::log;
        }
        if (v == "off") {
            return progress_mode::off;
        }
        // Anything else is a typo or a future value: the choice it would override is still right.
    }
#if __has_include(<unistd.h>)
    return isatty(fileno(stderr)) != 0 ? progress_mode::terminal : progress_mode::log;
#else
    return progress_mode::log;
#endif
}

// 2000000 -> "2,000,000": counts of tokens and bytes are read at a glance.
inline std::string grouped(std::uint64_t n)
{
    std::string digits = fmt::format("{}", n);
    for (std::size_t i = digits.size(); i > 3; i -= 3) {
        digits.insert(i - 3, 1, ',');
    }
    return digits;
}

inline std::string duration_text(double seconds)
{
    if (seconds < 60) {
        return fmt::format("{:.1f} s", seconds);
    }
    const auto whole = static_cast<std::uint64_t>(seconds + 0.5);
    if (whole < 3600) {
        return fmt::format("{} min {:02} s", whole / 60, whole % 60);
    }
    return fmt::format("{} h {:02} min", whole / 3600, whole / 60 % 60);
}

class progress_reporter {
public:
    using clock = std::chrono::steady_clock;

    // label heads every line ("qk spec"); unit names what total counts ("tokens").
    progress_reporter(std::string label, std::uint64_t total, std::string unit, progress_mode mode = progress_mode_for_stderr())
        : label_(std::move(label)), unit_(std::move(unit)), total_(total), mode_(mode), start_(clock::now()), last_draw_(start_)
    {
    }
    progress_reporter(const progress_reporter&) = delete;
    progress_reporter& operator=(const progress_reporter&) = delete;

    // Without finish() (an exception is on its way) the line is only erased: the error message
    // that follows must start on a clean line, and no summary claims work that did not finish.
    ~progress_reporter()
    {
        if (!finished_) {
            clear();
        }
    }

    [[nodiscard]] progress_mode mode() const noexcept { return mode_; }

    // done of total so far; what: the item under way, shown on the terminal line. Cheap enough to
    // call per item of a hot loop: one clock read unless it is time to draw.
    void update(std::uint64_t done, std::string_view what = {})
    {
        done_ = std::min(done, total_);
        if (mode_ != progress_mode::terminal) {
            return;
        }
        const auto now = clock::now();
        if (now - start_ < first_draw_after || (drawn_width_ != 0 && now - last_draw_ < redraw_every)) {
            return;
        }
        last_draw_ = now;
        draw(line(seconds(now), what));
    }

    // Erases the terminal line so that other output can be printed; the next update redraws it.
    void clear()
    {
        if (drawn_width_ != 0) {
            fmt::print(stderr, "\r{:{}}\r", "", drawn_width_);
            std::fflush(stderr);
            drawn_width_ = 0;
        }
    }

    // The work is done: the summary ("qk spec: 2,000,000 tokens in 81.9 s", or the given text)
    // replaces the terminal line, or is the one line a log gets; after a quick run, nothing.
    void finish(std::string_view summary = {})
    {
        if (finished_) {
            return;
        }
        finished_ = true;
        const double elapsed = seconds(clock::now());
        const bool was_drawn = drawn_width_ != 0;
        clear();
        if (mode_ == progress_mode::off || (!was_drawn && elapsed < quiet_below_seconds)) {
            return;
        }
        const std::string text = summary.empty() ? fmt::format("{}: {} {}", label_, grouped(total_), unit_) : std::string(summary);
        fmt::print(stderr, "{} in {}\n", text, duration_text(elapsed));
        std::fflush(stderr);
    }

private:
    static constexpr auto first_draw_after = std::chrono::milliseconds(500);
    static constexpr auto redraw_every = std::chrono::milliseconds(250);
    static constexpr double quiet_below_seconds = 1.0;
    // Beyond a narrow terminal's width the line would wrap, and \r would then return only to the
    // start of its last row.
    static constexpr std::size_t widest_line = 79;

    [[nodiscard]] double seconds(clock::time_point now) const { return std::chrono::duration<double>(now - start_).count(); }

    [[nodiscard]] std::string line(double elapsed, std::string_view what) const
    {
        const double fraction = total_ == 0 ? 1.0 : static_cast<double>(done_) / static_cast<double>(total_);
        std::string left = "estimating";
        // The rate of the first moments (allocations, warm-up) says little about the rest.
        if (done_ > 0 && elapsed >= 1.0) {
            left = duration_text(elapsed * static_cast<double>(total_ - done_) / static_cast<double>(done_)) + " left";
        }
        std::string text = fmt::format("{}: {}/{} {} {:3.0f}% {}", label_, grouped(done_), grouped(total_), unit_, 100.0 * fraction, left);
        if (!what.empty()) {
            text += fmt::format(" | {}", what);
        }
        if (text.size() > widest_line) {
            text.resize(widest_line);
        }
        return text;
    }

    void draw(const std::string& text)
    {
        // Spaces over whatever the previous, longer line left.
        fmt::print(stderr, "\r{:<{}}", text, std::max(text.size(), drawn_width_));
        std::fflush(stderr);
        drawn_width_ = std::max<std::size_t>(text.size(), 1);
    }

    std::string label_;
    std::string unit_;
    std::uint64_t total_;
    std::uint64_t done_ = 0;
    progress_mode mode_;
    clock::time_point start_;
    clock::time_point last_draw_;
    std::size_t drawn_width_ = 0; // columns of the line on the terminal now; 0: none shown
    bool finished_ = false;
};

} // namespace qk_tool
