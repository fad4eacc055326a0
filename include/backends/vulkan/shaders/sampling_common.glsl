// Shared by the sampling kernels: their bindings and push constants (one layout for all, so the
// host builds every step the same way), the row/op/result records (generated from
// gpu/sampling_layout.hpp, as the host reads them), and qkern's deterministic float arithmetic
// rebuilt from operations Vulkan rounds correctly.
// Every intermediate is `precise` (NoContraction) so no driver fuses or reassociates it, and
// special values are recognised from their bits: Vulkan lets drivers assume floats are never
// NaN or infinite, and may flush denormals, so no float comparison is trusted with those.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint workgroup_size = 256;

// The float values worked on, as bits: the caller's logits, or the workspace's copy of them.
layout(std430, set = 0, binding = 0) buffer Values { uint values[]; };
layout(std430, set = 0, binding = 1) readonly buffer Rows { uint rows[]; };
layout(std430, set = 0, binding = 2) readonly buffer Ops { uint ops[]; };
layout(std430, set = 0, binding = 3) readonly buffer Biases { uint biases[]; };
layout(std430, set = 0, binding = 4) buffer Results { uint results[]; };
layout(std430, set = 0, binding = 5) buffer Sums { uint chunk_sums[]; }; // float bits
// The copy's source, the softmax output or the top-k lists, by kernel.
layout(std430, set = 0, binding = 6) buffer Extra { uint extra[]; };

layout(push_constant) uniform Shape {
    uint n_seq;
    uint n_vocab;
    uint chunks; // per row: ceil(n_vocab / chunk_size)
    uint param;  // the kernel's selector (a stage number, or all_rows)
} shape;

// The records' words, flags, kinds and statuses, and the limits: gpu/sampling_layout.hpp's values.
#include "generated/sampling_layout.glsl"

// Longest top-k list a row can hold (the host derives it from the shared memory size).
layout(constant_id = 1) const uint list_capacity = max_list_capacity;

const uint bits_minus_infinity = 0xff800000u;
const uint bits_plus_infinity = 0x7f800000u;

bool is_nan_bits(uint b) { return (b & 0x7fffffffu) > 0x7f800000u; }
bool is_finite_bits(uint b) { return (b & 0x7f800000u) != 0x7f800000u; }
bool is_zero_bits(uint b) { return (b & 0x7fffffffu) == 0u; }

// Unsigned keys in the order of the values: NaN ranks as -inf and -0 as +0, as the CPU's float
// comparisons see them; denormals keep their exact place.
uint order_key(uint b)
{
    if (is_nan_bits(b)) {
        b = bits_minus_infinity;
    }
    if (b == 0x80000000u) {
        b = 0u;
    }
    return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
}
const uint key_minus_infinity = 0x007fffffu;
const uint key_plus_infinity = 0xff800000u;

// A list never holds NaN (the CPU's without_nan).
uint without_nan(uint b) { return is_nan_bits(b) ? bits_minus_infinity : b; }

double power_of_two(int e) { return packDouble2x32(uvec2(0u, uint(e + 1023) << 20)); }

// The float nearest to v >= 0 (ties to even), as bits, subnormals included: the subnormal range
// is rounded with integer-valued doubles, since the driver may flush float denormals.
uint float_bits_nearest(double v)
{
    if (v >= power_of_two(-126)) {
        return floatBitsToUint(float(v));
    }
    precise double scaled = v * power_of_two(149);
    precise double rounded = (scaled + 4503599627370496.0LF) - 4503599627370496.0LF;
    return uint(rounded);
}

// A float's value in double from its bits, subnormals included (a conversion could flush them).
double double_of_bits(uint b)
{
    if ((b & 0x7f800000u) == 0u) {
        const double magnitude = double(b & 0x007fffffu) * power_of_two(-149);
        return (b & 0x80000000u) != 0u ? -magnitude : magnitude;
    }
    return double(uintBitsToFloat(b));
}

// qkern's exp (deterministic_math.hpp) for finite x, operation for operation.
float qk_exp(float x)
{
    if (!(x >= uintBitsToFloat(0xc2aeac50u))) { // exp_lowest
        return 0.0;
    }
    precise float clamped = x < 88.0 ? x : 88.0;
    precise float t = clamped * uintBitsToFloat(0x3fb8aa3bu);
    precise float k = (t + 12582912.0) - 12582912.0;
    precise float r = (clamped - k * uintBitsToFloat(0x3f318000u)) - k * uintBitsToFloat(0xb95e8083u);
    precise float p = uintBitsToFloat(0x39506967u) * r + uintBitsToFloat(0x3ab743ceu);
    p = p * r + uintBitsToFloat(0x3c088908u);
    p = p * r + uintBitsToFloat(0x3d2aa9c1u);
    p = p * r + uintBitsToFloat(0x3e2aaaaau);
    p = p * r + 0.5;
    precise float r2 = r * r;
    p = (p * r2 + r) + 1.0;
    const int exponent = int(k) + 127; // in [1, 254]
    if (exponent > 1) {
        precise float result = p * uintBitsToFloat(uint(exponent) << 23);
        return result;
    }
    // 2^-126 * p may be subnormal.
    return uintBitsToFloat(float_bits_nearest(double(p) * power_of_two(-126)));
}

// exp(x - max) for a value's bits and a finite maximum; NaN and -inf give 0, as on the CPU.
float exp_minus_max(uint xb, float max)
{
    if (!is_finite_bits(xb)) {
        return 0.0;
    }
    precise float d = uintBitsToFloat(xb) - max;
    if (!is_finite_bits(floatBitsToUint(d))) {
        return 0.0;
    }
    return qk_exp(d);
}

// deterministic_math.hpp's exp_difference for a value's bits and a finite maximum: exp(x - max)
// times float(1 + the subtraction's exact error, by TwoSum), the product rounded as IEEE rounds it
// (subnormal results included, through double); NaN and -inf give 0. A flushed subnormal in the
// TwoSum can only change an error below 2^-25, which 1 + err rounds away on the CPU as well.
float exp_difference(uint xb, float max)
{
    const float e = exp_minus_max(xb, max);
    if (is_zero_bits(floatBitsToUint(e))) { // from its bits: a flushing driver compares a subnormal e as 0
        return 0.0;
    }
    const float x = uintBitsToFloat(xb);
    precise float d = x - max;
    precise float moved = d - x;
    precise float err = (x - (d - moved)) + (-max - moved);
    precise float f = 1.0 + err;
    return uintBitsToFloat(float_bits_nearest(double_of_bits(floatBitsToUint(e)) * double(f)));
}

// a / b correctly rounded for b > 0 finite (Vulkan's float division is not): the double quotient
// rounded to float is within one ulp; of it and its neighbours the one with the smallest
// |a - q b| wins, computed exactly in double (q b of two floats is exact, and so is the
// difference). ±0, ±inf and NaN pass through as IEEE division by a positive number leaves them.
uint divide_bits(uint ab, float b)
{
    if (!is_finite_bits(ab) || is_zero_bits(ab)) {
        return ab;
    }
    const float a = uintBitsToFloat(ab);
    precise double quotient = double(a) / double(b);
    const uint q0 = floatBitsToUint(float(quotient));
    if (!is_finite_bits(q0) || is_zero_bits(q0)) {
        return q0; // overflow or underflow: outside the exact range (documented)
    }
    uint best = q0;
    precise double best_error = abs(double(a) - double(uintBitsToFloat(q0)) * double(b));
    for (int step = -1; step <= 1; step += 2) {
        const uint q = uint(int(q0) + step); // the neighbour below or above in magnitude
        if (!is_finite_bits(q) || is_zero_bits(q) || (q & 0x80000000u) != (q0 & 0x80000000u)) {
            continue;
        }
        precise double error = abs(double(a) - double(uintBitsToFloat(q)) * double(b));
        if (error < best_error) {
            best = q;
            best_error = error;
        }
    }
    return best;
}

// a + b with IEEE special values decided from the bits (finite sums are plain additions).
uint add_bits(uint ab, uint bb)
{
    const bool af = is_finite_bits(ab);
    const bool bf = is_finite_bits(bb);
    if (af && bf) {
        precise float s = uintBitsToFloat(ab) + uintBitsToFloat(bb);
        return floatBitsToUint(s);
    }
    if (is_nan_bits(ab) || is_nan_bits(bb)) {
        return 0x7fc00000u;
    }
    if (!af && !bf) {
        return ab == bb ? ab : 0x7fc00000u; // inf + -inf is NaN
    }
    return af ? bb : ab;
}

// Dekker's exact product: hi + lo == a * b.
void two_product(double a, double b, out double hi, out double lo)
{
    precise double ca = 134217729.0LF * a;
    precise double ah = ca - (ca - a);
    precise double al = a - ah;
    precise double cb = 134217729.0LF * b;
    precise double bh = cb - (cb - b);
    precise double bl = b - bh;
    precise double p = a * b;
    precise double e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    hi = p;
    lo = e;
}

// Where double(1 / total) lies against the float midpoint between the adjacent floats `low` and
// low + 1 ulp: +1 above, -1 below, 0 on it (1/total is then within half a double ulp of the
// midpoint, so the CPU's double quotient is the midpoint itself and its float rounding a tie).
int side_of_midpoint(uint low, double total)
{
    precise double m = (double(uintBitsToFloat(low)) + double(uintBitsToFloat(low + 1u))) * 0.5LF;
    double hi;
    double lo;
    two_product(m, total, hi, lo);
    precise double above_one = hi - 1.0LF; // exact: hi is within a factor 2 of 1
    precise double delta = above_one + lo;  // m total - 1; its sign is exact
    const int exponent = int((unpackDouble2x32(m).y >> 20) & 0x7ffu) - 1023;
    precise double half_ulp_total = total * power_of_two(exponent - 53);
    if (abs(delta) <= half_ulp_total) {
        return 0;
    }
    return delta < 0.0LF ? 1 : -1;
}

// float(1.0 / total) exactly as the CPU rounds it (to double, then to float), for total >= 1.
uint reciprocal_bits(double total)
{
    precise double q = 1.0LF / total;
    const uint f = floatBitsToUint(float(q)); // within one float ulp
    const int up = side_of_midpoint(f, total);
    if (up > 0) {
        return f + 1u;
    }
    if (up == 0) {
        return (f & 1u) == 0u ? f : f + 1u;
    }
    const int down = side_of_midpoint(f - 1u, total);
    if (down < 0) {
        return f - 1u;
    }
    if (down == 0) {
        return (f & 1u) == 0u ? f : f - 1u;
    }
    return f;
}

uint row_word(uint row, uint word) { return rows[row * row_words + word]; }
bool row_has(uint row, uint flag) { return (row_word(row, row_flags) & flag) != 0u; }
uint value_at(uint row, uint i) { return values[row * shape.n_vocab + i]; }
