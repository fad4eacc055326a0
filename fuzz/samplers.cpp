// libFuzzer target: every sampler of include/sampling/samplers/ built through its C++ constructor
// with fuzzed parameters and run over fuzzed logits (alone, after another sampler, in chains built
// with add(), and through sample_batch), with fuzzed accepted tokens. Built and run by
// scripts/fuzz.sh (clang, ASan and UBSan). fuzz/sampling_chain.cpp covers chain::parse itself.
//
// Input: 64 header bytes, then a payload that logits, raw parameter values and token ids are read
// from, cyclically (so short inputs still fill any vocabulary).
//  h[0]     what (h[0] % 18): a sampler kind (0..15: greedy, dist, temp, temp_ext, top_k, top_p,
//           min_p, typical, top_n_sigma, xtc, mirostat, mirostat_v2, adaptive_p, penalties, dry,
//           logit_bias), 16 a chain of 1-4 samplers, 17 sample_batch over copies of such a chain
//  h[1]     vocabulary: 1 + h[1] up to 248 tokens, then 4096 + 64 (h[1] - 248) (histogram paths;
//           then at most 4 ops)
//  h[2]     logits: bits 0-2 the value mode (make_logits), bits 3-4 one special value sprinkled in
//  h[3]     the seed of the draws that check the sets non-selecting samplers leave
//  h[4-27]  parameter codes, read in turn (fields: number, integer, count, seed, token)
//  h[28]    ops: h[28] % 17 of the op codes h[29-44] (low 3 bits the op, high 5 its argument):
//           apply, apply after another sampler, accept, sample, reset, reseed, new logits, copy
//           (chains: sample, select and accept, accept, reset, reseed, new logits, copy, select;
//           sample_batch, op % 4: a step, a step with a wrong shape, new logits, a new mask)
//  h[45-47] sample_batch: sequences, active mask, the row given another logit mode
// Contract: a constructor, apply(), accept(), sample() or sample_batch() succeeds or throws
// qk::error, exactly where a header says when (constructors, accept(), the selecting samplers and
// logit_bias at apply(), chains and sample_batch before any sampler runs). A throw leaves the
// candidates as they were, and the state but the random generator (accepted tokens, counts, mu,
// adaptive_p's S and W; everything where a check comes before any sampler runs); sample_batch
// writes no token then. A success gives a token of the vocabulary (of the set it was selected
// from, with a finite logit), or a set that is a subset of the one given (no duplicate, no NaN)
// from which greedy selects the best by rank and dist a member, and whose probabilities are
// finite, in [0, 1] and sum to 1 within compute_probabilities' documented bound; each header's
// own rule where it is cheap to restate (top_k's k best, temp's division, greedy's argmax,
// penalties' counts and penalty, logit_bias's sums, mirostat's mu and adaptive_p's state on
// accept() and reset(), the "changes nothing" cases); and the same results from the sampler
// built twice from the same parameters, from chain::parse(describe()) and from a copy made
// midway; sample_batch's tokens are those of each chain sampled alone (-1 for an inactive one).
#include <sampling/sampling.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "contract.hpp"

namespace {

namespace qs = qk::sampling;
using qs::token_data;

// Findings of issue 21, fixed in include/ (each check was off until its fix landed; the saved
// input, fuzz/samplers.seeds/finding-*, stays as a regression seed):
//  - top_p, min_p, typical and xtc take min_keep as std::size_t but describe() writes it for an
//    int64 parser: a min_keep of 2^63 or more describes itself as text chain::parse refuses.
constexpr bool describe_any_min_keep = true;
//  - min_p over a whole vocabulary with a +inf logit leaves the floor at +inf (when the +inf
//    logits are more than 1/32 of it), and dist draws from a floor without the +inf check every
//    other set gets: "min_p(0.05);dist" samples such logits (the first +inf token) where "dist"
//    alone refuses them, and final_candidates() then throws after the successful step.
constexpr bool floor_refuses_inf = true;
//  - temp_ext with delta > 0 rescaled the set, then computed its probabilities again, which
//    refused logits the rescaling made +inf (or NaN, for t and delta near FLT_MAX): apply() threw
//    with the candidates already rescaled. The rescaled maximum is now checked first.

constexpr std::size_t header_bytes = 64;
constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float flt_max = std::numeric_limits<float>::max();
constexpr std::int32_t int32_max = std::numeric_limits<std::int32_t>::max();
constexpr std::int32_t int32_min = std::numeric_limits<std::int32_t>::min();

using qk_fuzz::attempt;
using qk_fuzz::current_call;
using qk_fuzz::current_input;
using qk_fuzz::report;
using qk_fuzz::require;

bool same_bits(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }
float without_nan(float v) { return v == v ? v : -inf; }

struct payload {
    std::span<const std::uint8_t> bytes;

    [[nodiscard]] std::uint8_t at(std::size_t i) const { return bytes.empty() ? 0 : bytes[i % bytes.size()]; }
    [[nodiscard]] std::uint32_t u32(std::size_t i) const
    {
        return at(i) | std::uint32_t{at(i + 1)} << 8 | std::uint32_t{at(i + 2)} << 16 | std::uint32_t{at(i + 3)} << 24;
    }
};

// Values samplers must survive, for the one-byte-per-logit mode.
const std::array<float, 32> special_values = {
    0.0f,  -0.0f,  1.0f,  -1.0f,    0.5f,  -0.5f, 2.0f,     10.0f,    -10.0f, 30.0f, -30.0f,
    88.0f, 100.0f, 1e4f,  1e30f,    -1e30f, flt_max, -flt_max, std::numeric_limits<float>::min(),
    std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(), inf, -inf,
    std::numeric_limits<float>::quiet_NaN(), 3.25f, 1e-30f, 16.0f, 1e38f, -88.0f, 20.0f, 0.25f, -3.0f};

// mode % 8: 0 raw bits (NaN, infinities, subnormals); 1 special_values; 2 four values only (ties
// everywhere); 3 multiples of 1/16; 4 those times 2^-128 .. 2^127; 5 model-like (distinct, finite);
// 6 mostly -inf, a few finite; 7 raw bits made finite. (mode >> 3) % 4 then sprinkles in one NaN,
// FLT_MAX with two -inf, or one +inf.
std::vector<float> make_logits(std::size_t n, std::uint8_t mode, const payload& p, std::size_t offset)
{
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) {
        const std::size_t o = offset + i;
        const auto small = static_cast<float>(static_cast<std::int8_t>(p.at(o))) / 16.0f;
        switch (mode % 8) {
        case 0: v[i] = std::bit_cast<float>(p.u32(offset + 4 * i)); break;
        case 1: v[i] = special_values[p.at(o) % special_values.size()]; break;
        case 2: v[i] = static_cast<float>(p.at(o) % 4) - 2.0f; break;
        case 3: v[i] = small; break;
        case 4: v[i] = std::ldexp(static_cast<float>(static_cast<std::int8_t>(p.at(offset + 2 * i))) / 16.0f,
                                  static_cast<int>(p.at(offset + 2 * i + 1)) - 128);
            break;
        case 5: v[i] = 3.0f * std::sin(0.7f * static_cast<float>(i)) + 0.25f * static_cast<float>(i % 7) + small / 8.0f; break;
        case 6: v[i] = p.at(o) < 40 ? static_cast<float>(p.at(o)) / 8.0f - 2.0f : -inf; break;
        default: {
            std::uint32_t bits = p.u32(offset + 4 * i);
            if ((bits & 0x7f800000u) == 0x7f800000u) {
                bits &= ~0x00800000u;
            }
            v[i] = std::bit_cast<float>(bits);
            break;
        }
        }
    }
    const std::size_t at = p.at(offset + 1) % n;
    switch ((mode >> 3) % 4) {
    case 1: v[at] = std::numeric_limits<float>::quiet_NaN(); break;
    case 2:
        v[at] = flt_max;
        v[(at + n / 2) % n] = -inf;
        v[(at + n / 3 + 1) % n] = -inf;
        break;
    case 3: v[at] = inf; break;
    default: break;
    }
    return v;
}

// Parameter codes, read in turn from h[4-27] (cyclically); raw values come from the payload.
class fields {
public:
    fields(std::span<const std::uint8_t> codes, const payload& p) : codes_(codes), p_(p) {}

    std::uint8_t byte() { return codes_[next_++ % codes_.size()]; }

    // Zeros, ones, fractions, values just below 1, powers of two, the infinities, NaN, FLT_MAX,
    // subnormals, raw bits.
    float number()
    {
        const std::uint8_t c = byte();
        const int hi = c >> 4;
        switch (c % 16) {
        case 0: return 0.0f;
        case 1: return -0.0f;
        case 2: return static_cast<float>(hi) / 16.0f;
        case 3: return 1.0f + static_cast<float>(hi) / 4.0f;
        case 4: return -static_cast<float>(hi) / 4.0f;
        case 5: return inf;
        case 6: return -inf;
        case 7: return std::numeric_limits<float>::quiet_NaN();
        case 8: return flt_max;
        case 9: return -flt_max;
        case 10: return std::numeric_limits<float>::denorm_min() * static_cast<float>(1 + hi);
        case 11: return 1.0f;
        case 12: return std::bit_cast<float>(raw32());
        case 13: return static_cast<float>(hi) * 8.0f;
        case 14: return 1.0f - std::ldexp(1.0f, -1 - hi);
        default: return std::ldexp(1.0f, hi - 8);
        }
    }

    // Small counts, -1, 0, the int32 limits, raw bits.
    std::int32_t integer()
    {
        const std::uint8_t c = byte();
        const int hi = c >> 4;
        switch (c % 16) {
        case 0: return hi;
        case 1: return -1;
        case 2: return 0;
        case 3: return int32_max;
        case 4: return int32_min;
        case 5: return int32_max - hi;
        case 6: return static_cast<std::int32_t>(raw32());
        case 7: return -2 - hi;
        case 8: return hi * 64;
        case 9: return 1 + hi;
        case 10: return 4096 + hi * 16;
        case 11: return 2048 + hi;
        case 12: return hi * 300;
        case 13: return 1;
        case 14: return 2;
        default: return 3 + hi % 3;
        }
    }

    // A std::size_t: small, or near the top of the type (min_keep).
    std::size_t count()
    {
        const std::uint8_t c = byte();
        switch (c % 8) {
        case 5: return std::numeric_limits<std::size_t>::max() - (c >> 3);
        case 6: return (std::size_t{1} << 63) + (c >> 3);
        case 7: return static_cast<std::size_t>(int32_max) + (c >> 3);
        default: return c >> 3;
        }
    }

    std::uint64_t seed()
    {
        const std::uint8_t c = byte();
        switch (c % 4) {
        case 1: return std::numeric_limits<std::uint64_t>::max();
        case 2: return std::uint64_t{raw32()} << 32 | raw32();
        default: return c >> 2;
        }
    }

    // A token id for a breaker or a bias: small ids mostly, so that they meet the vocabulary.
    std::int32_t token()
    {
        const std::uint8_t c = byte();
        return c % 16 == 15 ? integer() : (c >> 4) % 12;
    }

private:
    std::uint32_t raw32()
    {
        const std::uint32_t v = p_.u32(raw_);
        raw_ += 4;
        return v;
    }

    std::span<const std::uint8_t> codes_;
    payload p_;
    std::size_t next_ = 0;
    std::size_t raw_ = 7; // away from the first logits' bytes
};

enum kind : std::uint8_t {
    k_greedy, k_dist, k_temp, k_temp_ext, k_top_k, k_top_p, k_min_p, k_typical, k_top_n_sigma, k_xtc,
    k_mirostat, k_mirostat_v2, k_adaptive_p, k_penalties, k_dry, k_logit_bias, kinds
};

const char* const kind_names[kinds] = {"greedy", "dist", "temp", "temp_ext", "top_k", "top_p", "min_p", "typical",
                                       "top_n_sigma", "xtc", "mirostat", "mirostat_v2", "adaptive_p", "penalties", "dry", "logit_bias"};

constexpr std::array<std::uint8_t, 5> selecting_kinds = {k_greedy, k_dist, k_mirostat, k_mirostat_v2, k_adaptive_p};

bool has_accept(std::uint8_t k)
{
    return k == k_mirostat || k == k_mirostat_v2 || k == k_adaptive_p || k == k_penalties || k == k_dry;
}

// A sampler and the parameters it was built from (not every one has an accessor).
struct built {
    std::uint8_t kind = 0;
    std::optional<qs::sampler> sampler;
    float t = 0, delta = 0, p = 0, n = 0, probability = 0, threshold = 0, tau = 0, target = 0, decay = 0;
    std::int32_t top = 0;
    std::size_t min_keep = 0;
    qs::penalties::config penalties;
    qs::dry::config dry;
    std::vector<std::pair<std::int32_t, float>> biases;
};

// Builds a sampler of kind k from the fields, checking that the constructor refuses exactly the
// parameters its header refuses (no sampler on a refusal).
built build(std::uint8_t k, fields& f)
{
    built b;
    b.kind = k;
    bool valid = true;
    const auto make = [&](auto&& construct) {
        current_call = kind_names[k];
        const bool ok = attempt([&] { b.sampler.emplace(construct()); });
        require(ok || !valid, "a constructor refused parameters its header accepts");
        require(!ok || valid, "a constructor accepted parameters its header refuses");
    };
    const auto nan = [](float v) { return v != v; };
    switch (k) {
    case k_greedy: make([] { return qs::greedy{}; }); break;
    case k_dist: {
        const std::uint64_t seed = f.seed();
        make([&] { return qs::dist(seed); });
        break;
    }
    case k_temp:
        b.t = f.number();
        valid = !nan(b.t);
        make([&] { return qs::temp(b.t); });
        break;
    case k_temp_ext: {
        b.t = f.number();
        b.delta = f.number();
        const float exponent = f.number();
        valid = !nan(b.t) && !nan(b.delta) && !nan(exponent);
        make([&] { return qs::temp_ext(b.t, b.delta, exponent); });
        break;
    }
    case k_top_k:
        b.top = f.integer();
        make([&] { return qs::top_k(b.top); });
        break;
    case k_top_p:
    case k_min_p:
    case k_typical:
        b.p = f.number();
        b.min_keep = f.count();
        valid = !nan(b.p);
        if (k == k_top_p) {
            make([&] { return qs::top_p(b.p, b.min_keep); });
        } else if (k == k_min_p) {
            make([&] { return qs::min_p(b.p, b.min_keep); });
        } else {
            make([&] { return qs::typical(b.p, b.min_keep); });
        }
        break;
    case k_top_n_sigma:
        b.n = f.number();
        valid = !nan(b.n);
        make([&] { return qs::top_n_sigma(b.n); });
        break;
    case k_xtc: {
        b.probability = f.number();
        b.threshold = f.number();
        b.min_keep = f.count();
        const std::uint64_t seed = f.seed();
        valid = !nan(b.probability) && !nan(b.threshold);
        make([&] { return qs::xtc(b.probability, b.threshold, b.min_keep, seed); });
        break;
    }
    case k_mirostat: {
        b.tau = f.number();
        const float eta = f.number();
        const std::int32_t m = f.integer();
        const std::uint64_t seed = f.seed();
        valid = !nan(b.tau) && !nan(eta) && m >= 1;
        make([&] { return qs::mirostat(b.tau, eta, m, seed); });
        break;
    }
    case k_mirostat_v2: {
        b.tau = f.number();
        const float eta = f.number();
        const std::uint64_t seed = f.seed();
        valid = !nan(b.tau) && !nan(eta);
        make([&] { return qs::mirostat_v2(b.tau, eta, seed); });
        break;
    }
    case k_adaptive_p: {
        b.target = f.number();
        b.decay = f.number();
        const std::uint64_t seed = f.seed();
        valid = !nan(b.target) && b.target != inf && !nan(b.decay);
        make([&] { return qs::adaptive_p(b.target, b.decay, seed); });
        break;
    }
    case k_penalties: {
        qs::penalties::config& c = b.penalties;
        c.last_n = f.integer();
        c.repeat = f.number();
        c.frequency = f.number();
        c.presence = f.number();
        valid = c.last_n >= -1 && !nan(c.repeat) && !nan(c.frequency) && !nan(c.presence);
        make([&] { return qs::penalties(c); });
        break;
    }
    case k_dry: {
        qs::dry::config& c = b.dry;
        c.multiplier = f.number();
        c.base = f.number();
        c.allowed_length = f.integer();
        c.last_n = f.integer();
        c.breakers.resize(f.byte() % 4);
        valid = !nan(c.multiplier) && !nan(c.base) && c.allowed_length >= 0 && c.last_n >= -1;
        for (auto& breaker : c.breakers) {
            breaker.resize(f.byte() % 4); // empty now and then: refused
            for (auto& t : breaker) {
                t = f.token();
                valid = valid && t >= 0;
            }
            valid = valid && !breaker.empty();
        }
        make([&] { return qs::dry(c); });
        break;
    }
    default:
        b.biases.resize(f.byte() % 5);
        for (auto& [token, bias] : b.biases) {
            token = f.token();
            bias = f.number();
            valid = valid && token >= 0 && !nan(bias);
        }
        for (std::size_t i = 0; i < b.biases.size(); ++i) {
            for (std::size_t j = 0; j < i; ++j) {
                valid = valid && b.biases[i].first != b.biases[j].first;
            }
        }
        make([&] { return qs::logit_bias(b.biases); });
        break;
    }
    return b;
}

// describe() of a min_keep >= 2^63 does not parse (a finding, see describe_any_min_keep).
bool describable(const built& b)
{
    const bool keeps = b.kind == k_top_p || b.kind == k_min_p || b.kind == k_typical || b.kind == k_xtc;
    return describe_any_min_keep || !keeps || b.min_keep <= static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max());
}

// ---- candidate sets ------------------------------------------------------------------------------

// The set as list() gives it, read from a copy so that the set itself keeps its form.
std::vector<token_data> listing(const qs::candidates& c)
{
    if (c.current() == qs::candidates::form::view && c.patches().empty()) {
        // What list() makes of the caller's logits, without copying every buffer of the set.
        std::vector<token_data> l(static_cast<std::size_t>(c.vocab_size()));
        for (std::int32_t i = 0; i < c.vocab_size(); ++i) {
            l[static_cast<std::size_t>(i)] = {i, without_nan(c.base()[i]), 0.0f};
        }
        return l;
    }
    qs::candidates copy = c;
    return copy.list();
}

bool same_list(const std::vector<token_data>& a, const std::vector<token_data>& b)
{
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const token_data& x, const token_data& y) {
               return x.id == y.id && same_bits(x.logit, y.logit) && same_bits(x.p, y.p);
           });
}

bool same_ids_and_logits(const std::vector<token_data>& a, const std::vector<token_data>& b)
{
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const token_data& x, const token_data& y) {
               return x.id == y.id && same_bits(x.logit, y.logit);
           });
}

float max_logit(const std::vector<token_data>& l)
{
    float m = -inf;
    for (const auto& t : l) {
        m = t.logit > m ? t.logit : m;
    }
    return m;
}

// Whether a selecting sampler (or compute_probabilities) must refuse the set: nothing above -inf
// (NaN counts as -inf), or a +inf logit (candidates::check_max).
bool unselectable(const std::vector<token_data>& l)
{
    const float m = max_logit(l);
    return !(m > -inf) || m == inf;
}

// Ids of the vocabulary, each once, and no NaN logit ("a list never holds NaN").
void check_set(const std::vector<token_data>& l, std::int32_t vocab)
{
    std::vector<bool> seen(static_cast<std::size_t>(vocab));
    for (const auto& t : l) {
        require(t.id >= 0 && t.id < vocab, "a candidate outside the vocabulary");
        require(!seen[static_cast<std::size_t>(t.id)], "a candidate listed twice");
        seen[static_cast<std::size_t>(t.id)] = true;
        require(t.logit == t.logit, "a NaN logit in a list");
    }
}

const token_data* find_id(const std::vector<token_data>& l, std::int32_t id)
{
    const auto it = std::find_if(l.begin(), l.end(), [id](const token_data& t) { return t.id == id; });
    return it == l.end() ? nullptr : &*it;
}

bool subset(const std::vector<token_data>& part, const std::vector<token_data>& whole, std::int32_t vocab)
{
    std::vector<bool> in(static_cast<std::size_t>(vocab));
    for (const auto& t : whole) {
        in[static_cast<std::size_t>(t.id)] = true;
    }
    return std::all_of(part.begin(), part.end(), [&](const token_data& t) { return in[static_cast<std::size_t>(t.id)]; });
}

// Probabilities as compute_probabilities promises them: each within 6e-7 relative of the exact
// softmax (above FLT_MIN; within 2^-126 below), so their sum, in double (n 2^-52 more), is within
// 6e-7 + n 2^-126 of 1.
void check_probabilities(const std::vector<token_data>& l)
{
    double sum = 0;
    for (const auto& t : l) {
        require(std::isfinite(t.p) && t.p >= 0.0f && t.p <= 1.0f, "a probability outside [0, 1]");
        sum += t.p;
    }
    const double n = static_cast<double>(l.size());
    require(std::fabs(sum - 1.0) <= 6e-7 + n * 0x1.0p-126 + n * 0x1.0p-52, "probabilities that do not sum to 1");
}

// The best by rank (logit high first, then id low first).
std::int32_t argmax(const std::vector<token_data>& l)
{
    const token_data* best = nullptr;
    for (const auto& t : l) {
        if (best == nullptr || qs::detail::ranks_before(t, *best)) {
            best = &t;
        }
    }
    return best == nullptr ? -1 : best->id;
}

// A floor whose largest logit is +inf (see floor_refuses_inf): drawn from instead of refused.
bool known_floor_inf(const qs::candidates& c) { return !floor_refuses_inf && c.is_floor() && c.prefix_max() == inf; }

// A set that a non-selecting sampler left, as the selecting ones take it: its probabilities,
// greedy's argmax and a dist draw (over each form: view, dense, list, prefix, floor, ranked).
void check_drawable(const qs::candidates& c, std::int32_t vocab, std::uint64_t seed)
{
    const std::vector<token_data> l = listing(c);
    const bool refused = unselectable(l);
    qs::candidates probabilities = c;
    current_call = "candidates::compute_probabilities";
    const bool computed = attempt([&] { probabilities.compute_probabilities(); });
    require(computed != refused, refused ? "probabilities of a set it must refuse" : "refused the probabilities of a valid set");
    if (computed) {
        check_probabilities(probabilities.list());
    }
    qs::candidates g = c;
    current_call = "greedy over the set";
    require(attempt([&] { qs::greedy{}.apply(g); }) != refused, "greedy refuses exactly a set of nothing above -inf or with +inf");
    require(refused || g.selected() == argmax(l), "greedy did not select the best by rank");
    qs::candidates d = c;
    qs::dist draw(seed);
    current_call = "dist over the set";
    const bool drawn = attempt([&] { draw.apply(d); });
    require(drawn != refused || known_floor_inf(c), "dist refuses exactly a set of nothing above -inf or with +inf");
    if (drawn && !refused) {
        const token_data* t = find_id(l, d.selected());
        require(t != nullptr && t->logit > -inf, "dist selected a token outside the set, or of logit -inf");
    }
    (void)vocab;
}

// The forms other than a whole vocabulary in the caller's logits, made by another sampler first.
void prefilter(qs::candidates& c, std::uint8_t arg)
{
    const auto level = static_cast<float>(arg / 6);
    switch (arg % 6) {
    case 0: qs::top_k(1 + arg / 6).apply(c); break;                         // a sorted list
    case 1: qs::top_p(0.4f + 0.1f * level).apply(c); break;                // a prefix
    case 2: qs::min_p(0.01f + 0.04f * level).apply(c); break;              // a floor or a list
    case 3: qs::typical(0.5f + 0.1f * level, 1 + arg / 6).apply(c); break; // a ranked set
    case 4: qs::temp(0.25f + level).apply(c); break;                       // dense
    default: (void)c.list(); break;                                        // a list in id order
    }
}

// ---- the rules of each header ---------------------------------------------------------------------

// What the target remembers to restate the rules: the tokens accepted since reset().
struct history_model {
    std::vector<std::int32_t> accepted;
    bool pending = false; // mirostat: an apply() selected, and no accept() came since
};

// The last last_n accepted tokens (-1: all), as penalties and dry keep them.
std::vector<std::int32_t> window(const history_model& m, std::int32_t last_n)
{
    if (last_n == 0) {
        return {};
    }
    const std::size_t n = m.accepted.size();
    const std::size_t keep = last_n < 0 ? n : std::min(n, static_cast<std::size_t>(last_n));
    return {m.accepted.end() - static_cast<std::ptrdiff_t>(keep), m.accepted.end()};
}

std::map<std::int32_t, std::int32_t> counts_of(const std::vector<std::int32_t>& w)
{
    std::map<std::int32_t, std::int32_t> counts;
    for (const std::int32_t t : w) {
        ++counts[t];
    }
    return counts;
}

// temp's rule over a set in its order: t <= 0 keeps the first largest logit, others -inf.
std::vector<token_data> temperature_rule(std::vector<token_data> l, float t)
{
    if (t == 1.0f) {
        return l;
    }
    if (t <= 0.0f) {
        const float m = max_logit(l);
        bool kept = false;
        for (auto& e : l) {
            const bool keep = !kept && e.logit == m;
            kept = kept || keep;
            e.logit = keep ? e.logit : -inf;
        }
        return l;
    }
    for (auto& e : l) {
        e.logit = without_nan(e.logit / t);
    }
    return l;
}

// penalties' rule for a token seen `count` times (kept in separate statements: never fused).
float penalized(const qs::penalties::config& c, float logit, std::int32_t count)
{
    const float scaled = logit <= 0.0f ? logit * c.repeat : logit / c.repeat;
    const float frequency = static_cast<float>(count) * c.frequency;
    const float cost = frequency + c.presence;
    return scaled - cost;
}

// The rules of the header of s (built as b) for an apply() that succeeded: `before` the set it was
// given (listed), `seen` the logits it read there (over a whole vocabulary the caller's, NaN
// included), `after` the set it left.
void check_rule(const built& b, const qs::sampler& s, const history_model& m, const std::vector<token_data>& before,
                const std::vector<float>& seen, const std::vector<token_data>& after, std::int32_t selected)
{
    const auto unchanged = [&] { require(same_list(after, before), "changed a set its header says it leaves alone"); };
    // Every candidate stays, in its place, with the logit expected(i).
    const auto in_place = [&](auto&& expected, const char* what) {
        require(after.size() == before.size(), what);
        for (std::size_t i = 0; i < after.size(); ++i) {
            require(after[i].id == before[i].id && same_bits(after[i].logit, expected(i)), what);
        }
    };
    switch (b.kind) {
    case k_greedy: require(selected == argmax(before), "greedy did not select the best by rank"); break;
    case k_temp: require(same_ids_and_logits(after, temperature_rule(before, b.t)), "temp's logits are not its rule's"); break;
    case k_temp_ext:
        if (!(b.delta > 0.0f)) {
            require(same_ids_and_logits(after, temperature_rule(before, b.t)), "temp_ext with delta <= 0 is not temp(t)");
        }
        break;
    case k_top_k: {
        if (b.top <= 0 || static_cast<std::size_t>(b.top) >= before.size()) {
            unchanged();
            break;
        }
        std::vector<token_data> best = before;
        std::stable_sort(best.begin(), best.end(), qs::detail::ranks_before);
        best.resize(static_cast<std::size_t>(b.top));
        require(same_ids_and_logits(after, best), "top_k did not keep its k best by rank, sorted");
        break;
    }
    case k_top_p:
    case k_typical:
        if (b.p >= 1.0f) {
            unchanged();
        }
        break;
    case k_min_p:
        if (b.p <= 0.0f) {
            unchanged();
        }
        break;
    case k_top_n_sigma:
        if (!(b.n > 0.0f) || before.size() <= 1) {
            unchanged();
            break;
        }
        in_place([&](std::size_t i) { return after[i].logit == -inf ? -inf : before[i].logit; },
                 "top_n_sigma changed a logit to something other than -inf, or the set");
        break;
    case k_xtc:
        if (b.probability <= 0.0f || b.threshold > 0.5f || before.size() < 2) {
            unchanged();
            break;
        }
        for (const auto& t : after) {
            const token_data* was = find_id(before, t.id);
            require(same_bits(t.logit, was->logit) || t.logit == -inf, "xtc changed a logit to something other than -inf");
        }
        break;
    case k_penalties: {
        const qs::penalties::config& c = b.penalties;
        const auto counts = counts_of(window(m, c.last_n));
        const auto& reported = s.get<qs::penalties>()->counts();
        require(std::equal(reported.begin(), reported.end(), counts.begin(), counts.end(),
                           [](const auto& x, const auto& y) { return x.first == y.first && x.second == y.second; }),
                "penalties counts other tokens than its window of accepted tokens");
        if (c.last_n == 0 || (c.repeat == 1.0f && c.frequency == 0.0f && c.presence == 0.0f) || counts.empty()) {
            unchanged();
            break;
        }
        in_place(
            [&](std::size_t i) {
                const auto it = counts.find(before[i].id);
                return it == counts.end() ? before[i].logit : without_nan(penalized(c, seen[i], it->second));
            },
            "penalties' logits are not its rule's");
        break;
    }
    case k_dry: {
        const auto w = window(m, b.dry.last_n);
        in_place(
            [&](std::size_t i) {
                const bool repeated = std::find(w.begin(), w.end(), before[i].id) != w.end();
                return repeated ? after[i].logit : before[i].logit;
            },
            "dry changed the logit of a token that is not in its window");
        break;
    }
    case k_logit_bias:
        in_place(
            [&](std::size_t i) {
                for (const auto& [token, bias] : b.biases) {
                    if (token == before[i].id) {
                        return without_nan(seen[i] + bias);
                    }
                }
                return before[i].logit;
            },
            "logit_bias's logits are not the sums");
        break;
    default: break;
    }
}

// What accept() changes in a sampler, as far as its accessors show it: penalties' counts,
// mirostat's mu, adaptive_p's S and W. A call that throws must leave it: the generator may have
// drawn (sampler.hpp, chain::sample), and adaptive_p's pending token moved as apply() moves it,
// but nothing was accepted.
struct kept_state {
    std::vector<std::pair<std::int32_t, std::int32_t>> counts;
    float mu = 0.0f;
    float weighted_sum = 0.0f;
    float total_weight = 0.0f;

    bool operator==(const kept_state& o) const
    {
        return counts == o.counts && same_bits(mu, o.mu) && same_bits(weighted_sum, o.weighted_sum) &&
               same_bits(total_weight, o.total_weight);
    }
};

kept_state state_of(const qs::sampler& s)
{
    kept_state k;
    if (const auto* p = s.get<qs::penalties>()) {
        k.counts = p->counts();
    }
    if (const auto* m = s.get<qs::mirostat>()) {
        k.mu = m->mu();
    }
    if (const auto* m = s.get<qs::mirostat_v2>()) {
        k.mu = m->mu();
    }
    if (const auto* a = s.get<qs::adaptive_p>()) {
        k.weighted_sum = a->weighted_sum();
        k.total_weight = a->total_weight();
    }
    return k;
}

std::vector<kept_state> state_of(const qs::chain& c)
{
    std::vector<kept_state> k;
    for (std::size_t i = 0; i < c.size(); ++i) {
        k.push_back(state_of(c[i]));
    }
    return k;
}

// ---- one sampler, over many steps -----------------------------------------------------------------

struct instance {
    qs::sampler s;
    qs::candidates c;
};

struct outcome {
    bool ok = false;
    std::int32_t selected = -1;
    std::vector<token_data> set;
};

bool same_outcome(const outcome& a, const outcome& b) { return a.ok == b.ok && a.selected == b.selected && same_list(a.set, b.set); }

// A token for accept(): the last selected, small ids, the vocabulary's edges, the int32 limits,
// negatives, raw bits.
std::int32_t token_for(std::uint8_t arg, std::int32_t vocab, std::int32_t last, const payload& p, std::size_t& cursor)
{
    const int hi = arg >> 3;
    cursor += 4;
    switch (arg % 8) {
    case 0: return last >= 0 ? last : 0;
    case 1: return static_cast<std::int32_t>(p.at(cursor) % static_cast<std::uint32_t>(vocab));
    case 2: return vocab - 1;
    case 3: return vocab + hi;
    case 4: return int32_max - hi;
    case 5: return -1 - hi;
    case 6: return int32_min + hi;
    default: return static_cast<std::int32_t>(p.u32(cursor));
    }
}

struct sampler_run {
    built b;
    std::vector<instance> xs; // [0] the one checked, [1] built again, [2] parsed from describe(), [3] a copy
    history_model model;
    std::int32_t vocab = 0;
    std::int32_t last = -1;
    std::uint64_t seed = 0;

    // [1] runs every op, but is put back as it was after an op that threw (when the contract says
    // a throw changes nothing), so a throw that changed [0] shows as a difference later.
    template <class Op>
    std::vector<outcome> each(Op&& op, bool restore_on_error)
    {
        std::vector<outcome> out;
        for (std::size_t i = 0; i < xs.size(); ++i) {
            std::optional<instance> saved;
            if (i == 1 && restore_on_error) {
                saved = xs[i];
            }
            out.push_back(op(xs[i], i == 0));
            require(i == 0 || same_outcome(out[i], out[0]),
                    i == 1   ? "the same parameters give other results (or a throw changed the state)"
                    : i == 2 ? "chain::parse(describe()) gives other results"
                             : "a copy gives other results than the original");
            if (i == 1 && !out[i].ok && restore_on_error) {
                xs[i] = std::move(*saved);
            }
        }
        return out;
    }

    void apply(std::span<const float> logits, int pre)
    {
        const bool selects = xs[0].s.selects();
        current_call = kind_names[b.kind];
        each(
            [&](instance& x, bool checked) {
                x.c.reset(logits);
                if (pre >= 0 && !attempt([&] { prefilter(x.c, static_cast<std::uint8_t>(pre)); })) {
                    return outcome{false, -2, {}}; // refused before the sampler ran: the same for all
                }
                current_call = kind_names[b.kind];
                outcome o;
                if (!checked) { // compared with [0], which the checks below cover
                    o.ok = attempt([&] { x.s.apply(x.c); });
                    o.selected = o.ok ? x.c.selected() : -1;
                    if (o.ok) {
                        o.set = x.c.list();
                    }
                    return o;
                }
                const std::vector<token_data> before = listing(x.c);
                std::vector<float> seen(before.size());
                for (std::size_t i = 0; i < before.size(); ++i) {
                    seen[i] = x.c.whole_vocabulary() ? x.c.logit(before[i].id) : before[i].logit;
                }
                const std::int32_t selected_before = x.c.selected();
                const float mu = mu_of(x.s);
                const std::int32_t pending = pending_of(x.s);
                const kept_state kept = state_of(x.s);
                bool must_fail = selects && unselectable(before) && !known_floor_inf(x.c);
                bool may_fail = !selects || known_floor_inf(x.c);
                if (b.kind == k_logit_bias) {
                    must_fail = !b.biases.empty() && std::max_element(b.biases.begin(), b.biases.end())->first >= vocab;
                    may_fail = false;
                }
                o.ok = attempt([&] { x.s.apply(x.c); });
                require(!(o.ok && must_fail), "apply() accepted a set its header refuses");
                require(o.ok || must_fail || may_fail, "apply() refused a set its header accepts");
                require(same_bits(mu_of(x.s), mu), "apply() moved mirostat's mu");
                if (!o.ok) {
                    // temp_ext computes the probabilities of the set it was given before it
                    // refuses a rescaling: the p fields change, the set (ids, logits) does not.
                    require((same_list(x.c.list(), before) || (b.kind == k_temp_ext && same_ids_and_logits(x.c.list(), before))) &&
                                x.c.selected() == selected_before,
                            "apply() threw after changing the candidates");
                    require(state_of(x.s) == kept && pending_of(x.s) == pending,
                            "apply() threw after changing the sampler's state (beyond its generator)");
                    return o;
                }
                o.selected = x.c.selected();
                if (!selects) {
                    check_drawable(x.c, vocab, seed); // on the form apply() left, before list() below
                }
                o.set = x.c.list();
                current_call = kind_names[b.kind];
                check_set(o.set, vocab);
                require(subset(o.set, before, vocab), "apply() added a candidate");
                if (selects) {
                    const token_data* t = find_id(before, o.selected);
                    require(t != nullptr && t->logit > -inf && (t->logit < inf || !floor_refuses_inf),
                            "selected a token outside the set, or of logit +-inf");
                    model.pending = true;
                    last = o.selected;
                    if (b.kind == k_adaptive_p) {
                        require(pending_of(x.s) == (b.target >= 0.0f ? o.selected : pending),
                                "adaptive_p's pending token is not the one it selected (or, disabled, changed)");
                    }
                }
                check_rule(b, x.s, model, before, seen, o.set, o.selected);
                return o;
            },
            false); // a throw may have drawn from the generator: [1] runs the same op, not restored
    }

    void accept(std::int32_t token)
    {
        const bool must_fail = token < 0 && has_accept(b.kind);
        current_call = "accept";
        each(
            [&](instance& x, bool checked) {
                const float mu = mu_of(x.s);
                outcome o;
                o.ok = attempt([&] { x.s.accept(token); });
                require(o.ok != must_fail, must_fail ? "accept() took a negative token" : "accept() refused a token");
                if (!checked) {
                    return o;
                }
                if (!o.ok) {
                    require(same_bits(mu_of(x.s), mu), "accept() threw after moving mu");
                    return o;
                }
                if (!model.pending) {
                    require(same_bits(mu_of(x.s), mu), "accept() without a selection before moved mu");
                }
                model.pending = false;
                model.accepted.push_back(token);
                require(pending_of(x.s) == -1, "adaptive_p keeps a pending token after accept()");
                return o;
            },
            true);
    }

    void reset()
    {
        for (std::size_t i = 0; i < xs.size(); ++i) {
            xs[i].s.reset();
        }
        model = {};
        check_primed();
    }

    void reseed(std::uint64_t value)
    {
        for (auto& x : xs) {
            x.s.reseed(value);
        }
    }

    // mirostat's mu and adaptive_p's S and W as the headers prime them (construction, reset()).
    void check_primed()
    {
        const qs::sampler& s = xs[0].s;
        if (const auto* m = s.get<qs::mirostat>()) {
            require(same_bits(m->mu(), 2.0f * b.tau), "mirostat's mu is not 2 tau after reset()");
        }
        if (const auto* m = s.get<qs::mirostat_v2>()) {
            require(same_bits(m->mu(), 2.0f * b.tau), "mirostat_v2's mu is not 2 tau after reset()");
        }
        if (const auto* a = s.get<qs::adaptive_p>()) {
            const float d = std::clamp(b.decay, 0.0f, qs::adaptive_p::max_decay);
            require(same_bits(a->decay(), d), "adaptive_p's decay is not clamped to [0, 0.99]");
            require(same_bits(a->weighted_sum(), b.target / (1.0f - d)) && same_bits(a->total_weight(), 1.0f / (1.0f - d)),
                    "adaptive_p is not primed with S = T / (1 - d), W = 1 / (1 - d)");
            require(a->pending_token() == -1, "adaptive_p has a pending token after reset()");
        }
    }

    static float mu_of(const qs::sampler& s)
    {
        if (const auto* m = s.get<qs::mirostat>()) {
            return m->mu();
        }
        if (const auto* m = s.get<qs::mirostat_v2>()) {
            return m->mu();
        }
        return 0.0f;
    }
    static std::int32_t pending_of(const qs::sampler& s)
    {
        const auto* a = s.get<qs::adaptive_p>();
        return a == nullptr ? -1 : a->pending_token();
    }
};

// ---- chains ----------------------------------------------------------------------------------------

// A chain of 1-4 samplers; the last one selects, except now and then (then sample() refuses).
struct chain_built {
    qs::chain c;
    bool describable = true;
};

chain_built build_chain(fields& f)
{
    chain_built out;
    const int count = 1 + f.byte() % 4;
    for (int i = 0; i < count; ++i) {
        const std::uint8_t code = f.byte();
        std::uint8_t k = code % kinds;
        if (i + 1 == count && code < 240) {
            k = selecting_kinds[code % selecting_kinds.size()];
        }
        built b = build(k, f);
        if (b.sampler) {
            out.describable = out.describable && describable(b);
            out.c.add(std::move(*b.sampler));
        }
    }
    return out;
}

bool ends_selecting(const qs::chain& c) { return c.size() > 0 && c[c.size() - 1].selects(); }

struct chain_outcome {
    bool ok = false;
    std::int32_t token = -1;
    std::vector<token_data> final;
};

bool same_chain_outcome(const chain_outcome& a, const chain_outcome& b)
{
    return a.ok == b.ok && a.token == b.token && same_list(a.final, b.final);
}

struct chain_run {
    std::vector<qs::chain> xs; // as sampler_run's
    std::int32_t vocab = 0;
    std::int32_t last = -1;

    template <class Op>
    void each(Op&& op, bool restore_on_error)
    {
        std::optional<chain_outcome> first;
        for (std::size_t i = 0; i < xs.size(); ++i) {
            std::optional<qs::chain> saved;
            if (i == 1) {
                saved = xs[i];
            }
            const chain_outcome o = op(xs[i], i == 0);
            if (i == 0) {
                first = o;
            }
            require(same_chain_outcome(o, *first), i == 1   ? "the same chain built again gives other results (or a throw changed it)"
                                                   : i == 2 ? "chain::parse(describe()) gives other results"
                                                            : "a copied chain gives other results than the original");
            if (i == 1 && !o.ok && restore_on_error) {
                xs[i] = std::move(*saved);
            }
        }
    }

    // select() and, with `accept`, accept() of its token (sample() when `whole`).
    void step(std::span<const float> logits, bool whole, bool accept)
    {
        bool any_above = false; // chain::select's own check: a logit above -inf
        for (const float v : logits) {
            any_above = any_above || v > -inf;
        }
        // A +inf logit is refused by the sampler that meets it, unless an earlier one changed it
        // (temp(inf) makes it NaN): not predicted here.
        const bool prechecked = !ends_selecting(xs[0]) || !any_above;
        const bool must_fail = prechecked;
        current_call = "chain::sample";
        each(
            [&](qs::chain& c, bool checked) {
                chain_outcome o;
                const std::vector<kept_state> kept = state_of(c);
                o.ok = attempt([&] { o.token = whole ? c.sample(logits) : c.select(logits); });
                require(!(o.ok && must_fail), "a chain sampled what it must refuse");
                if (!o.ok) {
                    require(state_of(c) == kept, "a chain threw after a sampler's state (beyond its generator) changed");
                    o.token = -1;
                    return o;
                }
                require(o.token >= 0 && o.token < vocab, "a chain selected a token outside the vocabulary");
                current_call = "chain::final_candidates";
                const bool listed = attempt([&] {
                    const auto f = c.final_candidates();
                    o.final.assign(f.begin(), f.end());
                });
                const bool inf_logit = std::find(logits.begin(), logits.end(), inf) != logits.end();
                require(listed || (inf_logit && !floor_refuses_inf), "final_candidates() refused after a step that selected");
                if (!whole && accept) {
                    current_call = "chain::accept";
                    require(attempt([&] { c.accept(o.token); }), "accept() refused the token the chain selected");
                }
                if (checked && listed) {
                    check_set(o.final, vocab);
                    check_probabilities(o.final);
                    require(find_id(o.final, o.token) != nullptr, "the selected token is not among the final candidates");
                    last = o.token;
                }
                return o;
            },
            // Refusing every logit, or a chain that selects nothing, is checked before any sampler
            // runs: nothing changes. What the samplers refuse may have drawn from the generators.
            prechecked);
    }

    void accept(std::int32_t token)
    {
        current_call = "chain::accept";
        each(
            [&](qs::chain& c, bool) {
                chain_outcome o;
                o.ok = attempt([&] { c.accept(token); });
                require(o.ok == (token >= 0), "chain::accept() refuses exactly a negative token");
                return o;
            },
            true);
    }
};

// ---- sample_batch ------------------------------------------------------------------------------------

struct batch_run {
    std::size_t n_seq = 0;
    std::int32_t vocab = 0;
    std::vector<qs::chain> chains; // n_seq of them and a spare, for a chains span one too long
    std::vector<qs::chain> reference;
    std::vector<std::uint8_t> active;
    bool all_active = false;

    void step(std::span<const float> matrix, std::uint8_t wrong)
    {
        current_call = "sample_batch";
        const auto n_vocab = static_cast<std::size_t>(vocab);
        std::size_t seqs = n_seq;
        std::size_t width = n_vocab;
        std::span<const float> logits = matrix;
        std::size_t chain_count = n_seq;
        std::size_t token_count = n_seq;
        std::vector<std::uint8_t> flags = all_active ? std::vector<std::uint8_t>{} : active;
        switch (wrong % 8) {
        case 1: logits = matrix.first(matrix.size() - 1); break;
        case 2: seqs = 0; break;
        case 3: width = wrong & 0x10 ? 0 : std::numeric_limits<std::size_t>::max(); break;
        case 4: chain_count = n_seq + 1; break;
        case 5: token_count = wrong & 0x10 ? n_seq + 1 : n_seq - 1; break;
        case 6: flags.assign(n_seq + 1, 1); break;
        default: wrong = 0; break; // valid shapes
        }
        // The reference: every active row sampled by a copy of its chain alone, in order.
        const std::vector<qs::chain> saved = reference;
        std::vector<std::int32_t> expected(n_seq, -1);
        bool prechecked = false; // refused before any chain runs (check_batch)
        bool refused = false;
        for (std::size_t s = 0; s < n_seq && wrong == 0; ++s) {
            if (!all_active && active[s] == 0) {
                continue;
            }
            const auto row = matrix.subspan(s * n_vocab, n_vocab);
            bool empty_row = true;
            for (const float v : row) {
                empty_row = empty_row && !(v > -inf);
            }
            prechecked = prechecked || empty_row || !ends_selecting(reference[s]);
            refused = refused || !attempt([&] { expected[s] = reference[s].sample(row); });
        }
        prechecked = prechecked || wrong != 0;
        refused = refused || prechecked;
        constexpr std::int32_t sentinel = 0x5a5a5a5a;
        std::vector<std::int32_t> tokens(n_seq + 1, sentinel);
        const std::vector<qs::chain> before = chains;
        const bool ok = attempt([&] {
            qs::sample_batch(logits, seqs, width, std::span<qs::chain>(chains).first(chain_count), flags,
                             std::span<std::int32_t>(tokens).first(token_count));
        });
        require(ok != refused, refused ? "sample_batch sampled what a chain alone refuses, or wrong shapes"
                                       : "sample_batch refused what every chain alone samples");
        require(tokens[n_seq] == sentinel || token_count > n_seq, "sample_batch wrote past its tokens");
        if (ok) {
            require(std::equal(expected.begin(), expected.end(), tokens.begin()),
                    "sample_batch drew other tokens than each chain alone (or -1 for an inactive one)");
            return;
        }
        require(std::all_of(tokens.begin(), tokens.end(), [](std::int32_t t) { return t == sentinel; }), "sample_batch wrote tokens, then threw");
        if (prechecked) {
            reference = saved; // refused before any chain ran: later steps compare against that
            return;
        }
        // Refused by a chain: none has accepted anything, though generators may have drawn.
        for (std::size_t s = 0; s <= n_seq; ++s) {
            require(state_of(chains[s]) == state_of(before[s]), "sample_batch threw after a chain accepted a token");
        }
        reference = chains;
    }
};

// ---- the input -------------------------------------------------------------------------------------

std::vector<float> matrix_of(std::size_t rows, std::size_t vocab, std::uint8_t mode, std::uint8_t odd, const payload& p,
                             std::size_t offset)
{
    std::vector<float> m;
    for (std::size_t s = 0; s < rows; ++s) {
        const std::uint8_t row_mode = s == odd % rows ? static_cast<std::uint8_t>(odd >> 2) : mode;
        const auto row = make_logits(vocab, row_mode, p, offset + 131 * s);
        m.insert(m.end(), row.begin(), row.end());
    }
    return m;
}

void fuzz_sampler(std::uint8_t kind, const std::uint8_t* h, const payload& p, std::int32_t vocab)
{
    fields f({h + 4, 24}, p);
    sampler_run run;
    run.b = build(kind, f);
    if (!run.b.sampler) {
        return;
    }
    run.vocab = vocab;
    run.seed = h[3];
    fields again({h + 4, 24}, p);
    built twin = build(run.b.kind, again);
    run.xs.push_back({*run.b.sampler, {}});
    run.xs.push_back({*twin.sampler, {}});
    if (describable(run.b)) {
        const std::string text = run.b.sampler->describe() + (run.b.sampler->selects() ? "" : ";greedy");
        current_call = "chain::parse(describe())";
        std::optional<qs::chain> parsed;
        require(attempt([&] { parsed = qs::chain::parse(text); }), "describe() of a sampler does not parse");
        require((*parsed)[0].describe() == run.b.sampler->describe(), "parse(describe()) describes itself otherwise");
        run.xs.push_back({(*parsed)[0], {}});
    } else {
        run.xs.push_back(run.xs[0]); // keeps [3] the copy
    }
    run.check_primed();
    std::uint8_t mode = h[2];
    std::size_t offset = 0;
    std::vector<float> logits = make_logits(static_cast<std::size_t>(vocab), mode, p, offset);
    std::size_t cursor = 0;
    const std::size_t ops = h[28] % 17;
    for (std::size_t i = 0; i < ops; ++i) {
        const std::uint8_t op = h[29 + i];
        const auto arg = static_cast<std::uint8_t>(op >> 3);
        switch (op % 8) {
        case 0: run.apply(logits, -1); break;
        case 1: run.apply(logits, arg); break;
        case 2: run.accept(token_for(arg, vocab, run.last, p, cursor)); break;
        case 3:
            run.apply(logits, -1);
            run.accept(run.last >= 0 ? run.last : token_for(arg, vocab, run.last, p, cursor));
            break;
        case 4: run.reset(); break;
        case 5: run.reseed(arg); break;
        case 6:
            mode = arg;
            offset += 97 * (1 + arg);
            logits = make_logits(static_cast<std::size_t>(vocab), mode, p, offset);
            break;
        default:
            if (run.xs.size() == 4) {
                run.xs.pop_back();
            }
            if (run.xs.size() == 3) {
                run.xs.push_back(run.xs[0]);
            }
            break;
        }
    }
}

void fuzz_chain(const std::uint8_t* h, const payload& p, std::int32_t vocab)
{
    fields f({h + 4, 24}, p);
    chain_built a = build_chain(f);
    fields again({h + 4, 24}, p);
    chain_built b = build_chain(again);
    chain_run run;
    run.vocab = vocab;
    run.xs.push_back(a.c);
    run.xs.push_back(b.c);
    if (a.describable) {
        current_call = "chain::parse(describe())";
        const bool ok = attempt([&] { run.xs.push_back(qs::chain::parse(a.c.describe())); });
        require(ok == ends_selecting(a.c), "a built chain's describe() does not parse (or parses without a selecting end)");
        require(!ok || run.xs.back().describe() == a.c.describe(), "parse(describe()) describes itself otherwise");
    }
    if (run.xs.size() == 2) {
        run.xs.push_back(a.c); // keeps [3] the copy
    }
    std::uint8_t mode = h[2];
    std::size_t offset = 0;
    std::vector<float> logits = make_logits(static_cast<std::size_t>(vocab), mode, p, offset);
    std::size_t cursor = 0;
    const std::size_t ops = h[28] % 17;
    for (std::size_t i = 0; i < ops; ++i) {
        const std::uint8_t op = h[29 + i];
        const auto arg = static_cast<std::uint8_t>(op >> 3);
        switch (op % 8) {
        case 0: run.step(logits, true, true); break;
        case 1: run.step(logits, false, true); break;
        case 2: run.accept(token_for(arg, vocab, run.last, p, cursor)); break;
        case 3:
            for (auto& c : run.xs) {
                c.reset();
            }
            break;
        case 4:
            for (auto& c : run.xs) {
                c.reseed(arg);
            }
            break;
        case 5:
            mode = arg;
            offset += 97 * (1 + arg);
            logits = make_logits(static_cast<std::size_t>(vocab), mode, p, offset);
            break;
        case 6:
            if (run.xs.size() == 4) {
                run.xs.pop_back();
            }
            run.xs.push_back(run.xs[0]);
            break;
        default: run.step(logits, false, false); break;
        }
    }
}

void fuzz_batch(const std::uint8_t* h, const payload& p, std::int32_t vocab)
{
    fields f({h + 4, 24}, p);
    const chain_built built_chain = build_chain(f);
    batch_run run;
    run.n_seq = 1 + h[45] % 4;
    run.vocab = vocab;
    for (std::size_t s = 0; s <= run.n_seq; ++s) {
        run.chains.push_back(built_chain.c);
        run.chains.back().reseed(s);
    }
    run.reference = run.chains;
    run.active.resize(run.n_seq);
    for (std::size_t s = 0; s < run.n_seq; ++s) {
        run.active[s] = static_cast<std::uint8_t>((h[46] >> s) & 1);
    }
    run.all_active = (h[46] & 0x80) != 0;
    std::uint8_t mode = h[2];
    std::size_t offset = 0;
    std::vector<float> matrix = matrix_of(run.n_seq, static_cast<std::size_t>(vocab), mode, h[47], p, offset);
    const std::size_t ops = h[28] % 17;
    for (std::size_t i = 0; i < ops; ++i) {
        const std::uint8_t op = h[29 + i];
        const auto arg = static_cast<std::uint8_t>(op >> 2);
        switch (op % 4) {
        case 0: run.step(matrix, 0); break;
        case 1: run.step(matrix, arg); break;
        case 2:
            mode = static_cast<std::uint8_t>(arg & 0x1f);
            offset += 97 * (1 + arg);
            matrix = matrix_of(run.n_seq, static_cast<std::size_t>(vocab), mode, static_cast<std::uint8_t>(h[47] + arg), p, offset);
            break;
        default:
            for (std::size_t s = 0; s < run.n_seq; ++s) {
                run.active[s] = static_cast<std::uint8_t>((arg >> s) & 1);
            }
            run.all_active = false;
            break;
        }
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    qk_fuzz::target_name = "samplers";
    current_input = {data, size};
    std::array<std::uint8_t, header_bytes> h{};
    std::copy_n(data, std::min(size, header_bytes), h.begin());
    const payload p{size > header_bytes ? std::span(data + header_bytes, size - header_bytes) : std::span<const std::uint8_t>()};
    // Now and then a vocabulary past 4096, where top_p and typical build histograms and top_k
    // keeps a prefix: slow, so rare.
    const std::int32_t vocab = h[1] < 0xf8 ? 1 + h[1] : 4096 + 64 * (h[1] - 0xf8);
    if (h[1] >= 0xf8) {
        h[28] = static_cast<std::uint8_t>(h[28] % 17 % 5); // a few ops: each costs passes over the whole vocabulary
    }
    const std::uint8_t what = h[0] % (kinds + 2);
    if (what < kinds) {
        fuzz_sampler(what, h.data(), p, vocab);
    } else if (what == kinds) {
        fuzz_chain(h.data(), p, vocab);
    } else {
        fuzz_batch(h.data(), p, vocab);
    }
    return 0;
}
