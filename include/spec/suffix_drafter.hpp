// qk::spec::suffix_drafter: SuffixDecoding (arXiv 2411.04975). It drafts from the longest earlier
// match of the current suffix (not a fixed n), continued by the most frequent next token while the
// estimated probability of the draft holds, from a suffix automaton of the history and optionally
// of a suffix_corpus of earlier sequences shared by several drafters.
//
// Definition. H is the history (L tokens), s the token just sampled, C = H s the context;
// D = max_depth and K = D - 1, the most tokens a count conditions on.
//  1. The check-rate counter runs as in ngram_simple; a call that is not due drafts nothing.
//  2. The history match is the longest suffix of C of at most K tokens that occurs in H (so it ends
//     before s); the corpus match is the longest one of at most K tokens that occurs within one of
//     the corpus's sequences. The longer wins (on a tie: the history), and its source, H or the
//     corpus, gives every count below. A match shorter than min_match (or none): no draft.
//  3. P is the matched tokens. While the draft holds fewer than max_draft tokens: W = the last
//     min(|P|, K) tokens of P; n(t) = the number of occurrences of W t in the source (in H, or
//     within one corpus sequence), total = the sum of n(t) over all t. total = 0: stop. The next
//     token is the t with the largest n(t); on a tie, the t whose first occurrence of W t ends
//     latest (corpus positions count along its sequences in the order they were added).
//     confidence (1 before the first token) becomes confidence * (n(t) / total), in double; below
//     min_confidence: stop; otherwise t joins the draft and P.
//
// Cost. Reading a token extends the automaton (amortized O(1) over a history that only grows;
// transitions are hashed) and counts it in the states of its suffixes of up to D tokens (one per
// distinct occurrence count among them: a few on text, up to D on a run of one repeated token). A
// draft finds its match in O(D) and looks at every continuation of the states it passes. Each call
// first takes back, newest first, the tokens written since the previous call read the history
// (token_history marks), each in the time its append took, from a log; when it keeps fewer tokens
// than it cuts it rebuilds from the kept prefix instead. So a call costs O(D) per token appended or
// cut, plus the automaton's amortized work; regrowing cut tokens pays their appends again (the
// rare append that touches many states, such as a new token after a long run, costs as much each
// time it is cut and regrown). Memory: about 110 bytes per history token on text, at most 160 (plus
// the slack of growing vectors): per state 20 bytes (1 to 2 states per token), per transition 16
// bytes and 8 to 16 of hash table (1 to 3 per token), a 24-byte log entry per token. A corpus
// needs the same without the log (while add() runs, its sequence is logged, so that running out
// of memory takes it back). Memory running out in a call is a qk::error after which the drafter
// drafts as it would have without the call, and the corpus is as it was.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "../kernels/error.hpp"
#include "ngram_config.hpp"
#include "token_history.hpp"

namespace qk::spec {

namespace detail {

// A suffix automaton (of one sequence, or of several: a generalized one) whose states know how
// often their strings occur, for the strings of at most max_depth tokens. Indices are int32: at
// most 2n states and 3n transitions for n tokens, hence the limit on tokens below.
class suffix_automaton {
public:
    static constexpr std::size_t max_tokens = static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()) / 3;

    struct state {
        std::int32_t length = 0;     // of its longest string
        std::int32_t link = -1;      // the state of its longest suffix in another state
        std::int32_t first_end = -1; // where its strings first end (one position for all of them)
        std::int32_t count = 0;      // where they end: exact when the state's shortest string has <= max_depth tokens
        std::int32_t edges = -1;     // its newest outgoing transition
    };
    struct edge {
        std::int32_t source = 0;
        std::int32_t token = 0;
        std::int32_t target = 0;
        std::int32_t next = -1; // the source's previous transition
    };

    explicit suffix_automaton(std::int32_t max_depth) : max_depth_(max_depth) { clear(); }

    // Allocates nothing once the automaton was built (a moved-from one makes its first room again).
    void clear()
    {
        states_.resize(1);
        states_[0] = state{};
        edges_.clear();
        slots_.resize(16);
        std::fill(slots_.begin(), slots_.end(), empty);
        steps_.clear();
        redirects_.clear();
        last_ = 0;
        window_ = 0;
        sequence_length_ = 0;
        positions_ = 0;
    }

    // The next token starts another sequence (the corpus): no match runs across the boundary.
    void start_sequence() noexcept
    {
        last_ = 0;
        window_ = 0;
        sequence_length_ = 0;
    }

    // Appends a whole sequence as a new one, all or nothing: logged as it goes, so that memory
    // running out takes back what was appended (the automaton is as it was, std::bad_alloc passes
    // on); the log is then dropped. For an automaton that logs nothing else (the corpus's).
    void append_sequence(std::span<const std::int32_t> sequence)
    {
        const std::int32_t last = last_;
        const std::int32_t window = window_;
        const std::int32_t sequence_length = sequence_length_;
        start_sequence();
        try {
            for (const std::int32_t token : sequence) {
                append(token, true);
            }
        } catch (...) {
            while (!steps_.empty()) {
                undo();
            }
            last_ = last;
            window_ = window;
            sequence_length_ = sequence_length;
            drop_log();
            throw;
        }
        drop_log();
    }

    // Appends a token to the current sequence; `logged`: so that undo() can take it back. Memory
    // running out: std::bad_alloc and the automaton as it was (room for everything the append adds
    // is made first).
    void append(std::int32_t token, bool logged)
    {
        prepare(token, logged);
        // Nothing below allocates.
        const std::int32_t window_next = std::min(max_depth_, sequence_length_ + 1);
        // The state of the window's suffix one token shorter: followed by `token`, it is the next
        // window. (If the append splits that state, both halves keep the same transitions.)
        const std::int32_t before = shorten(window_, window_next - 1);
        step record{static_cast<std::int32_t>(states_.size()), static_cast<std::int32_t>(edges_.size()),
                    static_cast<std::int32_t>(redirects_.size()), last_, window_, -1};
        std::int32_t split = -1;
        const std::int32_t existing = find(last_, token);
        if (existing >= 0) { // another sequence already holds this prefix followed by `token`
            if (states_[static_cast<std::size_t>(existing)].length == length(last_) + 1) {
                last_ = existing;
            } else {
                split = existing;
                last_ = split_state(last_, existing, token, logged);
            }
        } else {
            const std::int32_t current = add_state(length(last_) + 1, -1, positions_, 0); // its link follows
            std::int32_t p = last_;
            for (; p >= 0 && find(p, token) < 0; p = link_of(p)) {
                add_edge(p, token, current);
            }
            if (p < 0) {
                states_[static_cast<std::size_t>(current)].link = 0;
            } else {
                const std::int32_t q = edges_[static_cast<std::size_t>(find_edge(p, token))].target;
                if (length(q) == length(p) + 1) {
                    states_[static_cast<std::size_t>(current)].link = q;
                } else {
                    split = q;
                    states_[static_cast<std::size_t>(current)].link = split_state(p, q, token, logged);
                }
            }
            last_ = current;
        }
        window_ = find(before, token);
        for (std::int32_t v = window_; v > 0; v = link_of(v)) {
            ++states_[static_cast<std::size_t>(v)].count;
        }
        ++sequence_length_;
        ++positions_;
        if (logged) {
            record.split = split;
            steps_.push_back(record);
        }
    }

    // Takes back the newest logged append: the automaton is as it was before it.
    void undo()
    {
        const step record = steps_.back();
        steps_.pop_back();
        for (std::int32_t v = window_; v > 0; v = link_of(v)) {
            --states_[static_cast<std::size_t>(v)].count;
        }
        for (auto r = redirects_.size(); r > static_cast<std::size_t>(record.redirects); --r) {
            edges_[static_cast<std::size_t>(redirects_[r - 1])].target = record.split;
        }
        redirects_.resize(static_cast<std::size_t>(record.redirects));
        if (record.split >= 0) { // the clone is the newest state; it took the split state's old link
            states_[static_cast<std::size_t>(record.split)].link = states_.back().link;
        }
        while (edges_.size() > static_cast<std::size_t>(record.edges)) {
            const edge e = edges_.back();
            erase_slot(static_cast<std::int32_t>(edges_.size() - 1));
            states_[static_cast<std::size_t>(e.source)].edges = e.next;
            edges_.pop_back();
        }
        states_.resize(static_cast<std::size_t>(record.states));
        last_ = record.last;
        window_ = record.window;
        --sequence_length_;
        --positions_;
    }

    [[nodiscard]] std::size_t logged() const noexcept { return steps_.size(); }

    // The state reached from `from` by `token`, or -1.
    [[nodiscard]] std::int32_t find(std::int32_t from, std::int32_t token) const noexcept
    {
        const std::int32_t e = find_edge(from, token);
        return e < 0 ? -1 : edges_[static_cast<std::size_t>(e)].target;
    }

    // The state of the suffix of `of`'s strings with `tokens` tokens (at most the longest's).
    [[nodiscard]] std::int32_t shorten(std::int32_t of, std::int32_t tokens) const noexcept
    {
        while (of > 0 && length(link_of(of)) >= tokens) {
            of = link_of(of);
        }
        return of;
    }

    [[nodiscard]] std::int32_t window() const noexcept { return window_; }
    [[nodiscard]] std::int32_t length(std::int32_t s) const noexcept { return states_[static_cast<std::size_t>(s)].length; }
    [[nodiscard]] std::int32_t link_of(std::int32_t s) const noexcept { return states_[static_cast<std::size_t>(s)].link; }
    [[nodiscard]] const state& at(std::int32_t s) const noexcept { return states_[static_cast<std::size_t>(s)]; }
    [[nodiscard]] const edge& edge_at(std::int32_t e) const noexcept { return edges_[static_cast<std::size_t>(e)]; }
    [[nodiscard]] std::size_t positions() const noexcept { return static_cast<std::size_t>(positions_); }
    [[nodiscard]] std::int32_t max_depth() const noexcept { return max_depth_; }

private:
    static constexpr std::int32_t empty = -1;

    // Makes room for everything append(token, logged) will add (states, transitions, table slots,
    // log entries), walking the same chains it will walk; changes nothing else.
    void prepare(std::int32_t token, bool logged)
    {
        std::size_t edges = 0;     // transitions the append adds
        std::size_t redirects = 0; // transitions it moves to a clone
        // A split of q (reached from p by `token`) copies q's transitions and redirects those of p
        // and its suffixes by `token` into q.
        const auto count_split = [&](std::int32_t p, std::int32_t q) {
            for (std::int32_t e = states_[static_cast<std::size_t>(q)].edges; e >= 0; e = edges_[static_cast<std::size_t>(e)].next) {
                ++edges;
            }
            for (; p >= 0 && find(p, token) == q; p = link_of(p)) {
                ++redirects;
            }
        };
        const std::int32_t existing = find(last_, token);
        if (existing >= 0) {
            if (length(existing) != length(last_) + 1) {
                count_split(last_, existing);
            }
        } else {
            std::int32_t p = last_;
            for (; p >= 0 && find(p, token) < 0; p = link_of(p)) {
                ++edges;
            }
            if (p >= 0) {
                const std::int32_t q = find(p, token);
                if (length(q) != length(p) + 1) {
                    count_split(p, q);
                    // q may be one of the states given a transition above (a run of one token):
                    // its clone copies that one too.
                    for (std::int32_t s = last_; s != p; s = link_of(s)) {
                        edges += s == q ? 1 : 0;
                    }
                }
            }
        }
        detail::reserve_for(states_, states_.size() + 2);
        detail::reserve_for(edges_, edges_.size() + edges);
        const std::size_t slots = std::max<std::size_t>(16, std::bit_ceil(2 * (edges_.size() + edges))); // at most half full
        if (slots_.size() < slots) {
            std::vector<std::int32_t> grown(slots, empty);
            for (std::size_t e = 0; e < edges_.size(); ++e) {
                std::size_t i = hash(edges_[e].source, edges_[e].token) & (slots - 1);
                while (grown[i] != empty) {
                    i = (i + 1) & (slots - 1);
                }
                grown[i] = static_cast<std::int32_t>(e);
            }
            slots_.swap(grown);
        }
        if (logged) {
            detail::reserve_for(steps_, steps_.size() + 1);
            detail::reserve_for(redirects_, redirects_.size() + redirects);
        }
    }

    // Frees the log (std::vector's swap allocates nothing).
    void drop_log() noexcept
    {
        std::vector<step>().swap(steps_);
        std::vector<std::int32_t>().swap(redirects_);
    }

    // What an append changed beyond what it added at the ends of states_ and edges_.
    struct step {
        std::int32_t states;    // states_.size() before it
        std::int32_t edges;     // edges_.size() before it
        std::int32_t redirects; // redirects_.size() before it: transitions moved from `split` to its clone
        std::int32_t last;
        std::int32_t window;
        std::int32_t split; // the state split in two, or -1
    };

    std::int32_t add_state(std::int32_t length, std::int32_t link, std::int32_t first_end, std::int32_t count)
    {
        states_.push_back({length, link, first_end, count, -1});
        return static_cast<std::int32_t>(states_.size() - 1);
    }

    // q's shorter strings (up to p's length + 1) move to a new state; the transitions by `token`
    // into q from p and its suffixes now lead there.
    std::int32_t split_state(std::int32_t p, std::int32_t q, std::int32_t token, bool logged)
    {
        const state old = states_[static_cast<std::size_t>(q)];
        const std::int32_t clone = add_state(length(p) + 1, old.link, old.first_end, old.count);
        for (std::int32_t e = old.edges; e >= 0; e = edges_[static_cast<std::size_t>(e)].next) {
            const edge copied = edges_[static_cast<std::size_t>(e)];
            add_edge(clone, copied.token, copied.target);
        }
        for (; p >= 0; p = link_of(p)) {
            const std::int32_t e = find_edge(p, token);
            if (e < 0 || edges_[static_cast<std::size_t>(e)].target != q) {
                break;
            }
            edges_[static_cast<std::size_t>(e)].target = clone;
            if (logged) {
                redirects_.push_back(e);
            }
        }
        states_[static_cast<std::size_t>(q)].link = clone;
        return clone;
    }

    // ---- transitions: an open-addressing table (linear probing) of edge indices --------------

    [[nodiscard]] static std::size_t hash(std::int32_t source, std::int32_t token) noexcept
    {
        std::uint64_t h = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(source)) << 32) | static_cast<std::uint32_t>(token);
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
        h *= 0xc4ceb9fe1a85ec53ull;
        h ^= h >> 33;
        return static_cast<std::size_t>(h);
    }
    [[nodiscard]] std::size_t home(std::int32_t e) const noexcept
    {
        const edge& x = edges_[static_cast<std::size_t>(e)];
        return hash(x.source, x.token) & (slots_.size() - 1);
    }

    [[nodiscard]] std::int32_t find_edge(std::int32_t source, std::int32_t token) const noexcept
    {
        const std::size_t mask = slots_.size() - 1;
        for (std::size_t i = hash(source, token) & mask;; i = (i + 1) & mask) {
            const std::int32_t e = slots_[i];
            if (e == empty) {
                return -1;
            }
            const edge& x = edges_[static_cast<std::size_t>(e)];
            if (x.source == source && x.token == token) {
                return e;
            }
        }
    }

    // Within the room prepare() made (the table then stays at most half full, so probes stay short).
    void add_edge(std::int32_t source, std::int32_t token, std::int32_t target) noexcept
    {
        edges_.push_back({source, token, target, states_[static_cast<std::size_t>(source)].edges});
        const auto e = static_cast<std::int32_t>(edges_.size() - 1);
        states_[static_cast<std::size_t>(source)].edges = e;
        place(e);
    }

    void place(std::int32_t e) noexcept
    {
        const std::size_t mask = slots_.size() - 1;
        std::size_t i = home(e);
        while (slots_[i] != empty) {
            i = (i + 1) & mask;
        }
        slots_[i] = e;
    }

    // Removes edge e's slot, moving back the entries after it that probed past it.
    void erase_slot(std::int32_t e) noexcept
    {
        const std::size_t mask = slots_.size() - 1;
        std::size_t hole = home(e);
        while (slots_[hole] != e) {
            hole = (hole + 1) & mask;
        }
        for (std::size_t next = (hole + 1) & mask; slots_[next] != empty; next = (next + 1) & mask) {
            const std::size_t wanted = home(slots_[next]);
            // The entry at `next` may fill the hole unless its home lies cyclically in (hole, next].
            const bool stays = hole <= next ? (hole < wanted && wanted <= next) : (hole < wanted || wanted <= next);
            if (!stays) {
                slots_[hole] = slots_[next];
                hole = next;
            }
        }
        slots_[hole] = empty;
    }

    std::int32_t max_depth_;
    std::vector<state> states_;   // states_[0]: the empty string
    std::vector<edge> edges_;     // in the order added
    std::vector<std::int32_t> slots_;
    std::vector<step> steps_;     // per logged append
    std::vector<std::int32_t> redirects_;
    std::int32_t last_ = 0;       // the state of the whole current sequence
    std::int32_t window_ = 0;     // the state of its suffix of min(max_depth, length) tokens
    std::int32_t sequence_length_ = 0;
    std::int32_t positions_ = 0;  // tokens appended, over all sequences
};

} // namespace detail

// Earlier sequences (finished outputs) that drafters may draft from. add() only while no drafter
// that shares it is drafting: drafting reads it, so any number of drafters, in any threads, may
// share one corpus while nobody adds. A drafter notices a corpus that grew since its previous call.
class suffix_corpus {
public:
    // max_depth: as suffix_drafter::config's; a drafter needs a corpus at least as deep. Below 2,
    // or memory running out: qk::error.
    explicit suffix_corpus(std::int32_t max_depth = 64)
    try : automaton_(checked(max_depth)) {
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::suffix_corpus::suffix_corpus");
    }

    // More tokens in all than 715,827,882: qk::error, before anything changes. Memory running out:
    // qk::error, and the corpus is as it was (what was added of the sequence is taken back).
    void add(std::span<const std::int32_t> sequence)
    try {
        if (sequence.size() > detail::suffix_automaton::max_tokens - automaton_.positions()) {
            qk::detail::fail("qk::spec::suffix_corpus::add: a sequence of ", sequence.size(), " tokens after ", automaton_.positions(),
                             " exceeds the corpus's limit of ", detail::suffix_automaton::max_tokens, " tokens");
        }
        if (sequence.empty()) {
            return;
        }
        automaton_.append_sequence(sequence);
        ++sequences_;
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::suffix_corpus::add");
    }

    [[nodiscard]] std::size_t sequences() const noexcept { return sequences_; }
    [[nodiscard]] std::size_t size() const noexcept { return automaton_.positions(); }
    [[nodiscard]] std::int32_t max_depth() const noexcept { return automaton_.max_depth(); }
    // Changes whenever a sequence is added.
    [[nodiscard]] std::size_t version() const noexcept { return sequences_; }

private:
    friend class suffix_drafter; // reads the automaton
    static std::int32_t checked(std::int32_t max_depth)
    {
        if (max_depth < 2) {
            qk::detail::fail("qk::spec::suffix_corpus: max_depth=", max_depth, ": must be at least 2");
        }
        return max_depth;
    }

    detail::suffix_automaton automaton_;
    std::size_t sequences_ = 0;
};

class suffix_drafter {
public:
    struct config {
        // The most tokens per draft.
        std::int32_t max_draft = 16;
        // The shortest match that may draft (at most max_depth - 1). 3: the sampled token and the two
        // before it must have occurred together; shorter matches are common word pairs whose
        // counts describe the language more than this sequence.
        std::int32_t min_match = 3;
        // Drafting stops where the product of the drafted tokens' estimated probabilities falls
        // below this, in [0, 1]; 0.1 is the paper's. It sets the draft's length.
        double min_confidence = 0.1;
        // Counts condition on at most max_depth - 1 tokens (the paper's tree depth); at least 2.
        std::int32_t max_depth = 64;
        // A draft is attempted every check_rate calls (<= 1: every call).
        std::int32_t check_rate = 1;
    };

    // A bad config field, a corpus shallower than max_depth, or memory running out: qk::error.
    explicit suffix_drafter(config c, std::shared_ptr<const suffix_corpus> corpus = nullptr)
    try : config_(checked(c, corpus.get())), corpus_(std::move(corpus)), history_(c.max_depth) {
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::suffix_drafter::suffix_drafter");
    }

    // A history longer than 715,827,882 tokens: qk::error, before anything changes. Memory
    // running out: qk::error, and the drafter drafts as it would have without the call (its
    // counter is as it was; the tokens it had read into its automaton by then stay, as a later
    // call would have read them).
    [[nodiscard]] std::vector<std::int32_t> draft(const token_history& history, std::int32_t sampled)
    try {
        follow(history);
        std::int32_t counter = counter_;
        std::vector<std::int32_t> result;
        if (detail::due(counter, config_.check_rate)) {
            const std::int32_t context = config_.max_depth - 1;
            const auto length = static_cast<std::int32_t>(history.size());
            const std::int32_t shorter = std::min(length, context - 1);
            match best = extend(history_, history_.shorten(history_.window(), shorter), shorter, sampled);
            const detail::suffix_automaton* source = &history_;
            if (corpus_) {
                const match other = extend(corpus_->automaton_, corpus_state_, corpus_length_, sampled);
                if (other.length > best.length) {
                    best = other;
                    source = &corpus_->automaton_;
                }
            }
            if (best.length >= config_.min_match) {
                result = continuation(*source, best);
            }
        }
        counter_ = counter; // once nothing can fail
        return result;
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::suffix_drafter::draft");
    }

    // Forgets everything read and reads `history` afresh (the check-rate counter carries on).
    // Never needed for correctness: it moves the cost of reading out of the next draft(). Errors
    // as draft()'s: on memory running out, the drafter drafts as it would have without the call.
    void begin(const token_history& history)
    try {
        check_length(history);
        reset();
        follow(history);
    } catch (...) {
        qk::detail::rethrow_as_error("qk::spec::suffix_drafter::begin");
    }

    // Forgets everything read: the next call reads its history from the start. Allocates nothing.
    void reset()
    {
        history_.clear();
        read_ = 0;
        mark_ = {};
        corpus_read_ = 0;
        corpus_state_ = 0;
        corpus_length_ = 0;
    }

    [[nodiscard]] const config& configuration() const noexcept { return config_; }
    [[nodiscard]] const std::shared_ptr<const suffix_corpus>& corpus() const noexcept { return corpus_; }

private:
    struct match {
        std::int32_t state = 0;  // of its tokens, in the source's automaton
        std::int32_t length = 0; // its tokens
    };

    static config checked(const config& c, const suffix_corpus* corpus)
    {
        if (c.max_draft < 1 || c.max_depth < 2 || c.min_match < 1 || c.min_match > c.max_depth - 1) {
            qk::detail::fail("qk::spec::suffix_drafter: max_draft=", c.max_draft, ", min_match=", c.min_match, ", max_depth=", c.max_depth,
                             ": max_draft must be at least 1, max_depth at least 2 and min_match in [1, max_depth - 1]");
        }
        if (!(c.min_confidence >= 0.0 && c.min_confidence <= 1.0)) {
            qk::detail::fail("qk::spec::suffix_drafter: min_confidence=", c.min_confidence, ": must lie in [0, 1]");
        }
        if (corpus != nullptr && corpus->max_depth() < c.max_depth) {
            qk::detail::fail("qk::spec::suffix_drafter: the corpus's max_depth=", corpus->max_depth(), " is below the config's max_depth=",
                             c.max_depth, ": its counts would not reach that deep");
        }
        return c;
    }

    static void check_length(const token_history& history)
    {
        if (history.size() > detail::suffix_automaton::max_tokens) {
            qk::detail::fail("qk::spec::suffix_drafter: a history of ", history.size(), " tokens exceeds the limit of ",
                             detail::suffix_automaton::max_tokens, " tokens");
        }
    }

    // The longest suffix of (the `length`-token string of `state`) followed by `token` that the
    // automaton holds: the string's suffixes are tried longest first.
    [[nodiscard]] static match extend(const detail::suffix_automaton& automaton, std::int32_t state, std::int32_t length,
                                      std::int32_t token) noexcept
    {
        for (; state >= 0; state = automaton.link_of(state)) {
            const std::int32_t next = automaton.find(state, token);
            if (next >= 0) {
                return {next, std::min(length, automaton.length(state)) + 1};
            }
        }
        return {0, 0};
    }

    // Step 3 of the definition, from the match's state.
    [[nodiscard]] std::vector<std::int32_t> continuation(const detail::suffix_automaton& source, match at) const
    {
        const std::int32_t context = config_.max_depth - 1;
        std::vector<std::int32_t> result;
        double confidence = 1.0;
        while (result.size() < static_cast<std::size_t>(config_.max_draft)) {
            std::int64_t total = 0;
            std::int32_t best = -1;
            for (std::int32_t e = source.at(at.state).edges; e >= 0; e = source.edge_at(e).next) {
                const auto& next = source.at(source.edge_at(e).target);
                total += next.count;
                if (best < 0) {
                    best = e;
                    continue;
                }
                const auto& held = source.at(source.edge_at(best).target);
                if (next.count > held.count || (next.count == held.count && next.first_end > held.first_end)) {
                    best = e;
                }
            }
            if (best < 0) {
                break;
            }
            const detail::suffix_automaton::edge& chosen = source.edge_at(best);
            confidence = confidence * (static_cast<double>(source.at(chosen.target).count) / static_cast<double>(total));
            if (confidence < config_.min_confidence) {
                break;
            }
            result.push_back(chosen.token);
            at = {chosen.target, at.length + 1};
            if (at.length > context) { // W drops its first token
                at = {source.shorten(at.state, context), context};
            }
        }
        return result;
    }

    // Reads the history into the automaton. Memory running out: std::bad_alloc, with the
    // automaton holding the history's first read_ tokens (each append is all or nothing) and
    // mark_ and the corpus match the previous call's; the next call then keeps what is still the
    // history's (what that mark saw unchanged) and reads on.
    void follow(const token_history& history)
    {
        check_length(history);
        const std::size_t keep = std::min(read_, history.unchanged_since(mark_));
        if (keep < read_) {
            if (keep < read_ - keep) { // cheaper to read the kept prefix again than to take the rest back
                history_.clear();
                read_ = 0;
            } else {
                for (; read_ > keep; --read_) {
                    history_.undo();
                }
            }
        }
        const std::span<const std::int32_t> tokens = history.tokens();
        for (; read_ < tokens.size(); ++read_) {
            history_.append(tokens[read_], true);
        }
        mark_ = history.seen();
        if (corpus_) {
            follow_corpus(tokens, keep);
        }
    }

    // Keeps the longest suffix of the history, of at most max_depth - 2 tokens, that occurs in the
    // corpus (step 2 adds the sampled token). Those tokens are all it depends on, so after a cut,
    // or a corpus that grew, it is found again from max_depth - 2 tokens before the end.
    void follow_corpus(std::span<const std::int32_t> tokens, std::size_t keep)
    {
        const detail::suffix_automaton& automaton = corpus_->automaton_;
        const auto cap = static_cast<std::size_t>(config_.max_depth - 2);
        if (corpus_version_ != corpus_->version() || keep < corpus_read_ || tokens.size() - corpus_read_ > cap) {
            corpus_version_ = corpus_->version();
            corpus_read_ = tokens.size() - std::min(tokens.size(), cap);
            corpus_state_ = 0;
            corpus_length_ = 0;
        }
        for (; corpus_read_ < tokens.size(); ++corpus_read_) {
            const match next = extend(automaton, corpus_state_, corpus_length_, tokens[corpus_read_]);
            corpus_state_ = next.state;
            corpus_length_ = next.length;
            if (corpus_length_ > static_cast<std::int32_t>(cap)) {
                corpus_length_ = static_cast<std::int32_t>(cap);
                corpus_state_ = automaton.shorten(corpus_state_, corpus_length_);
            }
        }
    }

    config config_;
    std::shared_ptr<const suffix_corpus> corpus_;
    detail::suffix_automaton history_;
    std::int32_t counter_ = 0;
    std::size_t read_ = 0;     // history tokens read into history_
    token_history::mark mark_; // the history as last read
    std::size_t corpus_version_ = 0;
    std::size_t corpus_read_ = 0; // history tokens matched against the corpus
    std::int32_t corpus_state_ = 0;
    std::int32_t corpus_length_ = 0;
};

} // namespace qk::spec
