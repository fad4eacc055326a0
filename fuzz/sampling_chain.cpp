// libFuzzer target: qk::sampling::chain::parse over arbitrary text. The contract, not just "no
// crash": parse() returns a chain or throws qk::error (never another exception); what parses
// describes itself as text that parses back to a chain with the same description, the seeds
// written out, and the same draws; and sampling it, over logits with ties, a huge value, -inf
// and NaN, gives a token of the vocabulary or qk::error, the same for a copy as for the original.
// Built and run by scripts/fuzz.sh (clang, ASan and UBSan).
#include <sampling/chain.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace qs = qk::sampling;

// Longer text only repeats what shorter text covers, and slows every run.
constexpr std::size_t max_length = 4096;
constexpr std::size_t vocab = 64;
constexpr int steps = 4;

std::string_view current_input;

[[noreturn]] void report(const char* what, const char* detail)
{
    std::fprintf(stderr, "sampling_chain: %s%s%s\ninput (%zu bytes): '%.*s'\n", what, detail[0] != '\0' ? ": " : "", detail,
                 current_input.size(), static_cast<int>(current_input.size()), current_input.data());
    std::abort(); // a broken contract, reported by libFuzzer like a crash
}

void require(bool ok, const char* what)
{
    if (!ok) {
        report(what, "");
    }
}

// Model-like logits, then the cases samplers must survive: ties everywhere, one logit that
// overflows whatever scales it, -inf (banned tokens), a NaN, and nothing finite at all (the
// chain's documented qk::error).
std::vector<std::vector<float>> logit_variants()
{
    constexpr float inf = std::numeric_limits<float>::infinity();
    std::vector<float> base(vocab);
    for (std::size_t i = 0; i < vocab; ++i) {
        base[i] = 3.0f * std::sin(0.7f * static_cast<float>(i)) + 0.25f * static_cast<float>(i % 7);
    }
    std::vector<std::vector<float>> v(7, base);
    v[1].assign(vocab, 0.5f);
    v[2][17] = std::numeric_limits<float>::max();
    for (std::size_t i = 0; i < vocab; i += 3) {
        v[3][i] = -inf;
    }
    v[4][5] = std::numeric_limits<float>::quiet_NaN();
    v[5].assign(vocab, -inf);
    v[6].assign(vocab, std::numeric_limits<float>::quiet_NaN());
    return v;
}

const std::vector<std::vector<float>> variants = logit_variants();

bool takes_seed(const qs::sampler& s)
{
    return s.get<qs::dist>() != nullptr || s.get<qs::xtc>() != nullptr || s.get<qs::mirostat>() != nullptr ||
           s.get<qs::mirostat_v2>() != nullptr || s.get<qs::adaptive_p>() != nullptr;
}

// One step: the token, or nothing where the chain refused with qk::error.
std::optional<std::int32_t> step(qs::chain& c, std::span<const float> logits)
{
    try {
        const std::int32_t token = c.sample(logits);
        require(token >= 0 && static_cast<std::size_t>(token) < logits.size(), "sample() returned a token outside the vocabulary");
        return token;
    } catch (const qk::error&) {
        return std::nullopt;
    }
}

void check_parsed(const qs::chain& c)
{
    const std::string described = c.describe();
    const qs::chain again = qs::chain::parse(described); // qk::error here is a finding: caught as one below
    require(again.describe() == described, "describe(parse(describe(c))) != describe(c)");
    require(again.size() == c.size(), "parse(describe(c)) has another number of samplers");
    for (std::size_t i = 0; i < c.size(); ++i) {
        // describe() writes every seed, so the reparsed chain has each seed-taking sampler's seed
        // written; the text the fuzzer wrote may have left it out, but never gives one to a
        // sampler that takes none.
        require(again.seed_written(i) == takes_seed(again[i]), "parse(describe(c)) lost or invented a written seed");
        require(!c.seed_written(i) || takes_seed(c[i]), "seed_written() for a sampler that takes no seed");
    }
    // A fresh copy of the chain, of the chain its description rebuilds, and a copy made midway
    // must all draw the same tokens, and refuse the same steps.
    for (const auto& logits : variants) {
        qs::chain original = c;
        qs::chain rebuilt = again;
        std::optional<qs::chain> copy;
        for (int s = 0; s < steps; ++s) {
            if (s == steps / 2) {
                copy = original;
            }
            const std::optional<std::int32_t> token = step(original, logits);
            require(step(rebuilt, logits) == token, "parse(describe(c)) draws other tokens than c");
            if (copy) {
                require(step(*copy, logits) == token, "a copied chain draws other tokens than the original");
            }
        }
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    if (size > max_length) {
        return 0;
    }
    const std::string text(reinterpret_cast<const char*>(data), size);
    current_input = text;
    std::optional<qs::chain> c;
    try {
        c = qs::chain::parse(text);
    } catch (const qk::error&) {
        return 0; // refused, as bad text should be
    } catch (const std::exception& e) {
        report("parse() threw an exception other than qk::error", e.what());
    } catch (...) {
        report("parse() threw something that is not a std::exception", "");
    }
    try {
        check_parsed(*c);
    } catch (const std::exception& e) {
        // qk::error included: describe() must parse, and sample() refuses only with qk::error, caught in step().
        report("a parsed chain threw", e.what());
    } catch (...) {
        report("a parsed chain threw something that is not a std::exception", "");
    }
    return 0;
}
