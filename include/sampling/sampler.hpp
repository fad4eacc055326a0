// qk::sampling::sampler: any sampler as a value. Copying one deep-copies its state (penalty
// history, mirostat's mu, its random generator), so a copied chain continues exactly as the
// original would. A sampler type needs apply(candidates&), describe() and `selects`; accept,
// prepare_accept, reseed and reset are optional hooks, called only where the type has them.
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "../kernels/error.hpp"
#include "candidates.hpp"

namespace qk::sampling {

// What a sampler type provides. apply() narrows or reweights the candidates and, for a selecting
// sampler (`selects == true`), sets candidates::select(); it may draw random numbers but changes
// no other state, so the same state applied twice to the same logits does the same thing.
// accept(token) is told every token the caller keeps (sampled or not), and is where history and
// feedback state change; a type whose accept() allocates makes that room in prepare_accept()
// (changing nothing else), so that a chain takes a token in all its samplers or, when memory runs
// out, in none. reseed(seed) restarts the random generator; reset() forgets history.
// describe() gives the sampler in chain syntax, so that chain::parse(describe()) rebuilds it.
template <class S>
concept sampler_type = std::copy_constructible<S> && requires(S& s, const S& cs, candidates& c) {
    s.apply(c);
    { cs.describe() } -> std::convertible_to<std::string>;
    { S::selects } -> std::convertible_to<bool>;
};

class sampler {
public:
    template <class S>
        requires(!std::same_as<std::remove_cvref_t<S>, sampler> && sampler_type<S>)
    sampler(S s) : self_(std::make_unique<model<S>>(std::move(s)))
    {
    }

    sampler(const sampler& other) : self_(other.self_->clone()) {}
    sampler(sampler&&) noexcept = default;
    sampler& operator=(const sampler& other)
    {
        if (this != &other) {
            self_ = other.self_->clone();
        }
        return *this;
    }
    sampler& operator=(sampler&&) noexcept = default;
    ~sampler() = default;

    void apply(candidates& c) { self_->apply(c); }
    void accept(std::int32_t token) { self_->accept(token); }
    void prepare_accept() { self_->prepare_accept(); }
    void reseed(std::uint64_t seed) { self_->reseed(seed); }
    void reset() { self_->reset(); }
    [[nodiscard]] bool selects() const { return self_->selects(); }
    [[nodiscard]] std::string describe() const { return self_->describe(); }

    // The sampler as its own type, or nullptr if it is another one (e.g. to read mirostat's mu).
    template <sampler_type S>
    [[nodiscard]] S* get() noexcept
    {
        return self_->type() == typeid(S) ? &static_cast<model<S>*>(self_.get())->value : nullptr;
    }
    template <sampler_type S>
    [[nodiscard]] const S* get() const noexcept
    {
        return self_->type() == typeid(S) ? &static_cast<const model<S>*>(self_.get())->value : nullptr;
    }

private:
    struct concept_base {
        virtual ~concept_base() = default;
        [[nodiscard]] virtual std::unique_ptr<concept_base> clone() const = 0;
        virtual void apply(candidates& c) = 0;
        virtual void accept(std::int32_t token) = 0;
        virtual void prepare_accept() = 0;
        virtual void reseed(std::uint64_t seed) = 0;
        virtual void reset() = 0;
        [[nodiscard]] virtual bool selects() const = 0;
        [[nodiscard]] virtual std::string describe() const = 0;
        [[nodiscard]] virtual const std::type_info& type() const noexcept = 0;
    };

    template <class S>
    struct model final : concept_base {
        explicit model(S s) : value(std::move(s)) {}
        [[nodiscard]] std::unique_ptr<concept_base> clone() const override { return std::make_unique<model>(value); }
        void apply(candidates& c) override { value.apply(c); }
        void accept(std::int32_t token) override
        {
            if constexpr (requires { value.accept(token); }) {
                value.accept(token);
            }
        }
        void prepare_accept() override
        {
            if constexpr (requires { value.prepare_accept(); }) {
                value.prepare_accept();
            }
        }
        void reseed(std::uint64_t seed) override
        {
            if constexpr (requires { value.reseed(seed); }) {
                value.reseed(seed);
            }
        }
        void reset() override
        {
            if constexpr (requires { value.reset(); }) {
                value.reset();
            }
        }
        [[nodiscard]] bool selects() const override { return S::selects; }
        [[nodiscard]] std::string describe() const override { return value.describe(); }
        [[nodiscard]] const std::type_info& type() const noexcept override { return typeid(S); }

        S value;
    };

    std::unique_ptr<concept_base> self_;
};

namespace detail {

// Accepted tokens are token ids: a negative one is a caller error.
inline void check_token(const char* sampler, std::int32_t token)
{
    if (token < 0) {
        qk::detail::fail("qk::sampling::", sampler, "::accept: token ", token, " is negative; token ids start at 0");
    }
}

} // namespace detail

} // namespace qk::sampling
