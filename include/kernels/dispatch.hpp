// Run-time dispatch for portable binaries: qk::dispatch(f) calls f with the best tag the running
// CPU supports among those qkern has kernels for on this architecture. The entry points use it by
// themselves for qk::arch::runtime, their default in builds without -march (qk::arch::default_tag).
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "arch.hpp"
#include "cpu_features.hpp"
#include "target.hpp"

namespace qk {

// The CPU's features, read once: they cannot change while the program runs.
[[nodiscard]] inline const cpu_features& running_cpu() noexcept
{
    static const cpu_features features = detect_cpu_features();
    return features;
}

namespace detail {

// f(Tag{}) for the first tag of the list, highest first, that the CPU runs; the last one (generic)
// runs everywhere.
template <class F, class Tag, class... Lower>
decltype(auto) dispatch_highest_first(F&& f, const cpu_features& cpu, Tag tag, Lower... lower)
{
    if constexpr (sizeof...(Lower) == 0) {
        static_assert(std::is_same_v<Tag, arch::generic>, "the lowest tag of qk::arch::all must be generic");
        return f(tag);
    } else {
        if (runs<Tag>(cpu)) {
            return f(tag);
        }
        return dispatch_highest_first(std::forward<F>(f), cpu, lower...);
    }
}

template <class F, class... Tags>
decltype(auto) dispatch_list(F&& f, const cpu_features& cpu, arch::tag_list<Tags...>)
{
    // The list is lowest first: walk it from its end.
    return [&]<std::size_t... I>(std::index_sequence<I...>) -> decltype(auto) {
        using tags = std::tuple<Tags...>;
        return dispatch_highest_first(std::forward<F>(f), cpu, std::tuple_element_t<sizeof...(Tags) - 1 - I, tags>{}...);
    }(std::index_sequence_for<Tags...>{});
}

} // namespace detail

// Calls f(Tag{}) with the best tag of qk::arch::all that the CPU runs; f must accept every tag
// (a generic lambda) and return the same type for each.
template <class F>
decltype(auto) dispatch(F&& f)
{
    return detail::dispatch_list(std::forward<F>(f), running_cpu(), arch::all{});
}

// The name of the tag qk::dispatch picks on this CPU: the kernels qk::arch::runtime runs.
[[nodiscard]] inline const char* dispatched_tag_name() noexcept
{
    return dispatch([]<class Tag>(Tag) noexcept { return arch::name<Tag>(); });
}

} // namespace qk
