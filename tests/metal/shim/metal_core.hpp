// The part of the Metal Shading Language that qkern's kernels use, as plain C++20 in namespace
// metal: scalar and vector types, half, as_type, math, barriers and SIMD-group functions. It
// defines no macros; <metal_stdlib> adds the address-space keywords (see there).
//
// Barriers and SIMD-group functions need a running emulated thread: they call the hooks that
// emulator.hpp installs per thread, and abort with a message when called outside a dispatch.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include <kernels/fp16.hpp>

namespace metal {

using uint = std::uint32_t;
using ushort = std::uint16_t;
using uchar = std::uint8_t;
using ulong = std::uint64_t;
using ::int8_t;
using ::int16_t;
using ::int32_t;
using ::int64_t;
using ::uint8_t;
using ::uint16_t;
using ::uint32_t;
using ::uint64_t;
using std::size_t;

// binary16 storage with float arithmetic: MSL computes half * half in half, the shim in float
// (a kernel whose result depends on that difference is not validated by the shim). Conversions
// round to nearest even, as Metal's do.
struct half {
    std::uint16_t bits;
    half() = default;
    constexpr half(float f) noexcept : bits(qk::fp32_to_fp16(f)) {}
    constexpr operator float() const noexcept { return qk::fp16_to_fp32(bits); }
};
static_assert(sizeof(half) == 2 && std::is_trivially_copyable_v<half>);

// Vectors: named components x, y, z, w and [i]; no swizzles beyond what a kernel spells out.
template <class T, int N>
struct vec_storage;
template <class T>
struct vec_storage<T, 2> {
    T x, y;
};
template <class T>
struct vec_storage<T, 3> {
    T x, y, z;
};
template <class T>
struct vec_storage<T, 4> {
    T x, y, z, w;
};

template <class T, int N>
struct vec : vec_storage<T, N> {
    vec() = default;
    constexpr explicit vec(T s) noexcept
    {
        for (int i = 0; i < N; ++i) {
            (*this)[i] = s;
        }
    }
    template <class... U>
        requires(sizeof...(U) == N && N > 1 && (std::is_convertible_v<U, T> && ...))
    constexpr vec(U... v) noexcept
    {
        int i = 0;
        ((( *this)[i++] = static_cast<T>(v)), ...);
    }
    template <class U>
    constexpr explicit vec(const vec<U, N>& o) noexcept
    {
        for (int i = 0; i < N; ++i) {
            (*this)[i] = static_cast<T>(o[i]);
        }
    }
    constexpr T& operator[](int i) noexcept
    {
        if constexpr (N > 3) {
            if (i == 3) {
                return this->w;
            }
        }
        if constexpr (N > 2) {
            if (i == 2) {
                return this->z;
            }
        }
        return i == 0 ? this->x : this->y;
    }
    constexpr const T& operator[](int i) const noexcept { return const_cast<vec&>(*this)[i]; }
};

#define METAL_SHIM_VEC_OP(op)                                                                                                              \
    template <class T, int N>                                                                                                              \
    constexpr vec<T, N> operator op(vec<T, N> a, const vec<T, N>& b) noexcept                                                              \
    {                                                                                                                                      \
        for (int i = 0; i < N; ++i) {                                                                                                      \
            a[i] = static_cast<T>(a[i] op b[i]);                                                                                           \
        }                                                                                                                                  \
        return a;                                                                                                                          \
    }                                                                                                                                      \
    template <class T, int N>                                                                                                              \
    constexpr vec<T, N> operator op(vec<T, N> a, std::type_identity_t<T> s) noexcept                                                       \
    {                                                                                                                                      \
        return a op vec<T, N>(s);                                                                                                          \
    }                                                                                                                                      \
    template <class T, int N>                                                                                                              \
    constexpr vec<T, N> operator op(std::type_identity_t<T> s, const vec<T, N>& b) noexcept                                                \
    {                                                                                                                                      \
        return vec<T, N>(s) op b;                                                                                                          \
    }                                                                                                                                      \
    template <class T, int N, class U>                                                                                                     \
    constexpr vec<T, N>& operator op##=(vec<T, N>& a, const U& b) noexcept                                                                 \
    {                                                                                                                                      \
        return a = a op b;                                                                                                                 \
    }
METAL_SHIM_VEC_OP(+)
METAL_SHIM_VEC_OP(-)
METAL_SHIM_VEC_OP(*)
METAL_SHIM_VEC_OP(/)
#undef METAL_SHIM_VEC_OP

template <class T, int N>
constexpr vec<T, N> operator-(vec<T, N> a) noexcept
{
    for (int i = 0; i < N; ++i) {
        a[i] = -a[i];
    }
    return a;
}

template <class T, int N>
constexpr T dot(const vec<T, N>& a, const vec<T, N>& b) noexcept
{
    T s = a[0] * b[0];
    for (int i = 1; i < N; ++i) {
        s += a[i] * b[i];
    }
    return s;
}

#define METAL_SHIM_VEC_ALIASES(T, name)                                                                                                    \
    using name##2 = vec<T, 2>;                                                                                                             \
    using name##3 = vec<T, 3>;                                                                                                             \
    using name##4 = vec<T, 4>;
METAL_SHIM_VEC_ALIASES(float, float)
METAL_SHIM_VEC_ALIASES(half, half)
METAL_SHIM_VEC_ALIASES(int, int)
METAL_SHIM_VEC_ALIASES(uint, uint)
METAL_SHIM_VEC_ALIASES(short, short)
METAL_SHIM_VEC_ALIASES(ushort, ushort)
METAL_SHIM_VEC_ALIASES(signed char, char)
METAL_SHIM_VEC_ALIASES(uchar, uchar)
METAL_SHIM_VEC_ALIASES(bool, bool)
#undef METAL_SHIM_VEC_ALIASES

template <class To, class From>
    requires(sizeof(To) == sizeof(From))
constexpr To as_type(const From& v) noexcept
{
    return std::bit_cast<To>(v);
}

// Math on floats (Metal's precise forms; fast-math error bounds are the tests' business).
inline float fabs(float v) noexcept { return std::fabs(v); }
inline float sqrt(float v) noexcept { return std::sqrt(v); }
inline float rsqrt(float v) noexcept { return 1.0f / std::sqrt(v); }
inline float exp(float v) noexcept { return std::exp(v); }
inline float exp2(float v) noexcept { return std::exp2(v); }
inline float log(float v) noexcept { return std::log(v); }
inline float log2(float v) noexcept { return std::log2(v); }
inline float floor(float v) noexcept { return std::floor(v); }
inline float ceil(float v) noexcept { return std::ceil(v); }
inline float fma(float a, float b, float c) noexcept { return std::fma(a, b, c); }
inline bool isnan(float v) noexcept { return std::isnan(v); }
inline bool isinf(float v) noexcept { return std::isinf(v); }
inline bool isfinite(float v) noexcept { return std::isfinite(v); }
template <class T>
    requires std::is_arithmetic_v<T>
constexpr T min(T a, T b) noexcept
{
    return b < a ? b : a;
}
template <class T>
    requires std::is_arithmetic_v<T>
constexpr T max(T a, T b) noexcept
{
    return a < b ? b : a;
}
template <class T>
    requires std::is_arithmetic_v<T>
constexpr T clamp(T v, T lo, T hi) noexcept
{
    return min(max(v, lo), hi);
}
template <class T>
constexpr T select(T a, T b, bool c) noexcept
{
    return c ? b : a;
}

enum class mem_flags : unsigned { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
constexpr mem_flags operator|(mem_flags a, mem_flags b) noexcept
{
    return static_cast<mem_flags>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}

// What the emulator provides to each emulated thread. `line`/`file` name the call site, so that
// threads meeting at different barriers (divergent control flow) are reported, not paired.
namespace shim {

inline constexpr unsigned simd_width = 32;

struct call_site {
    const char* file;
    int line;
    friend bool operator==(const call_site&, const call_site&) = default;
};

struct lane_hooks {
    virtual void threadgroup_barrier(call_site site) = 0;
    // Every active lane of the SIMD-group passes `size` bytes; on return `all` holds lane i's
    // bytes at i * size for each bit i of the returned mask of active lanes.
    virtual std::uint32_t simd_exchange(const void* value, std::size_t size, void* all, call_site site) = 0;
    virtual unsigned lane() const noexcept = 0;
    // Reports a kernel error (an undefined operation) for the dispatch to fail with.
    virtual void fail(const char* what, call_site site) = 0;

protected:
    ~lane_hooks() = default;
};

inline thread_local lane_hooks* current_lane = nullptr;

inline lane_hooks& hooks(const char* what)
{
    if (current_lane == nullptr) {
        std::fprintf(stderr, "metal shim: %s called outside an emulated dispatch\n", what);
        std::abort();
    }
    return *current_lane;
}

// All active lanes' values of v, and which lanes those are.
template <class T>
struct lanes_of {
    T value[simd_width];
    std::uint32_t mask;
};

template <class T>
lanes_of<T> exchange(const T& v, call_site site)
{
    static_assert(std::is_trivially_copyable_v<T>, "SIMD-group functions take trivially copyable values");
    lanes_of<T> r;
    r.mask = hooks("a SIMD-group function").simd_exchange(&v, sizeof(T), r.value, site);
    return r;
}

// A fixed pairwise tree over the active lanes (deterministic; Apple's order is unspecified).
template <class T, class Op>
T tree_reduce(const lanes_of<T>& in, Op op)
{
    T v[simd_width];
    bool have[simd_width];
    for (unsigned i = 0; i < simd_width; ++i) {
        have[i] = ((in.mask >> i) & 1u) != 0;
        if (have[i]) {
            v[i] = in.value[i];
        }
    }
    for (unsigned stride = 1; stride < simd_width; stride *= 2) {
        for (unsigned i = 0; i + stride < simd_width; i += 2 * stride) {
            if (have[i] && have[i + stride]) {
                v[i] = op(v[i], v[i + stride]);
            } else if (have[i + stride]) {
                v[i] = v[i + stride];
                have[i] = true;
            }
        }
    }
    return v[0];
}

template <class T>
T read_lane(const lanes_of<T>& in, unsigned from, const T& own, call_site site)
{
    if (from >= simd_width || ((in.mask >> from) & 1u) == 0) {
        hooks("a SIMD-group shuffle").fail("a SIMD-group shuffle or broadcast read an inactive or nonexistent lane", site);
        return own;
    }
    return in.value[from];
}

} // namespace shim

// Inside a macro's arguments every call reports the macro's position: keep such code out of them.
#define METAL_SHIM_SITE shim::call_site site = {__builtin_FILE(), __builtin_LINE()}

inline void threadgroup_barrier(mem_flags, METAL_SHIM_SITE)
{
    shim::hooks("threadgroup_barrier").threadgroup_barrier(site);
}

// Lanes of a SIMD-group run concurrently in the emulator, so this one is a real rendezvous too.
inline void simdgroup_barrier(mem_flags, METAL_SHIM_SITE)
{
    (void)shim::exchange(0, site);
}

template <class T>
T simd_sum(T v, METAL_SHIM_SITE)
{
    return shim::tree_reduce(shim::exchange(v, site), [](T a, T b) { return static_cast<T>(a + b); });
}
template <class T>
T simd_product(T v, METAL_SHIM_SITE)
{
    return shim::tree_reduce(shim::exchange(v, site), [](T a, T b) { return static_cast<T>(a * b); });
}
template <class T>
T simd_max(T v, METAL_SHIM_SITE)
{
    return shim::tree_reduce(shim::exchange(v, site), [](T a, T b) { return max(a, b); });
}
template <class T>
T simd_min(T v, METAL_SHIM_SITE)
{
    return shim::tree_reduce(shim::exchange(v, site), [](T a, T b) { return min(a, b); });
}
template <class T>
    requires std::is_integral_v<T>
T simd_and(T v, METAL_SHIM_SITE)
{
    return shim::tree_reduce(shim::exchange(v, site), [](T a, T b) { return static_cast<T>(a & b); });
}
template <class T>
    requires std::is_integral_v<T>
T simd_or(T v, METAL_SHIM_SITE)
{
    return shim::tree_reduce(shim::exchange(v, site), [](T a, T b) { return static_cast<T>(a | b); });
}
template <class T>
    requires std::is_integral_v<T>
T simd_xor(T v, METAL_SHIM_SITE)
{
    return shim::tree_reduce(shim::exchange(v, site), [](T a, T b) { return static_cast<T>(a ^ b); });
}
inline bool simd_all(bool v, METAL_SHIM_SITE)
{
    return shim::tree_reduce(shim::exchange(v, site), [](bool a, bool b) { return a && b; });
}
inline bool simd_any(bool v, METAL_SHIM_SITE)
{
    return shim::tree_reduce(shim::exchange(v, site), [](bool a, bool b) { return a || b; });
}

// Prefix operations run in lane order over the active lanes, as MSL defines them.
template <class T>
T simd_prefix_inclusive_sum(T v, METAL_SHIM_SITE)
{
    const auto all = shim::exchange(v, site);
    const unsigned me = shim::hooks("simd_prefix_inclusive_sum").lane();
    T s = T(0);
    for (unsigned i = 0; i <= me; ++i) {
        if ((all.mask >> i) & 1u) {
            s = static_cast<T>(s + all.value[i]);
        }
    }
    return s;
}
template <class T>
T simd_prefix_exclusive_sum(T v, METAL_SHIM_SITE)
{
    const auto all = shim::exchange(v, site);
    const unsigned me = shim::hooks("simd_prefix_exclusive_sum").lane();
    T s = T(0);
    for (unsigned i = 0; i < me; ++i) {
        if ((all.mask >> i) & 1u) {
            s = static_cast<T>(s + all.value[i]);
        }
    }
    return s;
}

template <class T>
T simd_broadcast(T v, ushort lane, METAL_SHIM_SITE)
{
    return shim::read_lane(shim::exchange(v, site), lane, v, site);
}
template <class T>
T simd_shuffle(T v, ushort lane, METAL_SHIM_SITE)
{
    return shim::read_lane(shim::exchange(v, site), lane, v, site);
}
template <class T>
T simd_broadcast_first(T v, METAL_SHIM_SITE)
{
    const auto all = shim::exchange(v, site);
    return all.value[std::countr_zero(all.mask)];
}
// Lanes whose source lies past the SIMD-group keep their own value (MSL's rule for down/up).
template <class T>
T simd_shuffle_down(T v, ushort delta, METAL_SHIM_SITE)
{
    const auto all = shim::exchange(v, site);
    const unsigned from = shim::hooks("simd_shuffle_down").lane() + delta;
    return from >= shim::simd_width ? v : shim::read_lane(all, from, v, site);
}
template <class T>
T simd_shuffle_up(T v, ushort delta, METAL_SHIM_SITE)
{
    const auto all = shim::exchange(v, site);
    const unsigned me = shim::hooks("simd_shuffle_up").lane();
    return delta > me ? v : shim::read_lane(all, me - delta, v, site);
}
template <class T>
T simd_shuffle_xor(T v, ushort mask, METAL_SHIM_SITE)
{
    const auto all = shim::exchange(v, site);
    return shim::read_lane(all, shim::hooks("simd_shuffle_xor").lane() ^ mask, v, site);
}
inline bool simd_is_first(METAL_SHIM_SITE)
{
    const auto all = shim::exchange(0, site);
    return static_cast<unsigned>(std::countr_zero(all.mask)) == shim::hooks("simd_is_first").lane();
}

#undef METAL_SHIM_SITE

} // namespace metal
