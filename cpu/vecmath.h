/*
cpu/vecmath.h: exp and tanh for the CPU trainer's activations (softmax, GELU, SiLU),
written in plain float arithmetic that the compiler vectorizes, with their accuracy
stated and checked by test_sft; and a dot product and a sum of squares whose summation
orders are fixed.

Not a libm replacement: inputs are clamped to the ranges the trainer needs. C, not
C++ (the GPU kernels have their own, in cuda/). On base/ only.
*/
#ifndef CPU_VECMATH_H
#define CPU_VECMATH_H
#include <stdint.h>
#include <string.h>

// exp(x) in plain float arithmetic, which the compiler vectorizes (libm's expf is one
// call per element, and the MLP activations were a quarter of a small model's step):
// x = n ln2 + r with n = round(x / ln2) and |r| <= ln2/2 (ln2 split in two, Cody-Waite,
// so n * ln2_hi is exact), exp(r) by its Taylor series to r^7 (truncation under 1e-8
// relative), times 2^n written into the exponent bits. Within 1.2 ulp of exp over
// [-87, 88], checked by test_sft. x is clamped to that range: exp(-87) ~ 1.6e-38 stands
// in for smaller values, which here only ever enter a sum with a term of at least 1
// (1 + exp(x), or a softmax's sum, whose largest term is exp(0)). NaN stays NaN.
static inline float exp_vec(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    float shifted = x * 1.44269504f + 12582912.0f;   // + 1.5 * 2^23 rounds x / ln2 to an integer n,
    float n = shifted - 12582912.0f;                  // which sits in shifted's low mantissa bits
    float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.0f + r * (1.0f + r * (1.0f / 2 + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720 + r * (1.0f / 5040)))))));
    uint32_t bits;  // (n + 127) << 23 from those bits, in unsigned arithmetic (a NaN's bits too: no undefined conversion)
    memcpy(&bits, &shifted, sizeof bits);
    bits = (bits - 0x4B400000u + 127u) << 23;         // 0x4B400000: the bits of 1.5 * 2^23
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

// tanh(u) = 1 - 2 / (exp(2u) + 1): one exp instead of libm's slower tanhf, with u
// clamped to +-15 where tanh is +-1 in float (NaN passes the clamps, as in exp_vec).
// The absolute error stays near float rounding, which is all GELU's 1 + tanh needs.
static inline float tanh_via_exp(float u) {
    u = u > 15.0f ? 15.0f : u;
    u = u < -15.0f ? -15.0f : u;
    return 1.0f - 2.0f / (exp_vec(2.0f * u) + 1.0f);
}

// x . y over n floats in 16 running sums (element i in sum i mod 16), added in order at
// the end. A single running sum cannot be vectorized (the compiler may not reorder float
// additions), and a chain of n dependent adds is latency-bound: attention's q . k over a
// head was a fifth of a step at T=256. 16 lanes are one AVX-512 vector or two AVX2 ones
// with the same sums, so every build adds alike.
static inline float dot_lanes(const float *x, const float *y, int n) {
    float part[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++) part[k] += x[i + k] * y[i + k];
    for (; i < n; i++) part[i & 15] += x[i] * y[i];
    float sum = 0.0f;
    for (int k = 0; k < 16; k++) sum += part[k];
    return sum;
}

// The sum of squares of g[i] * scale over n floats (each product rounded to float, as if g
// had been scaled in place), in double: element i goes to lane i % 16 of two 8-double
// vectors, added lane by lane in order at the end, then the last n % 16 elements. One
// chain of scalar adds runs at a third of the memory's rate (the gradient norm is a pass
// over every gradient a step); the vectors keep 16 independent sums in registers, with
// the same bits whether the compiler splits them for AVX2 or not.
typedef float floats8 __attribute__((vector_size(32)));
typedef double doubles8 __attribute__((vector_size(64)));
static inline double sum_squares_lanes(const float *g, size_t n, float scale) {
    doubles8 lanes_lo = {0}, lanes_hi = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        floats8 a, b;
        memcpy(&a, g + i, sizeof a);
        memcpy(&b, g + i + 8, sizeof b);
        doubles8 x = __builtin_convertvector(a * scale, doubles8), y = __builtin_convertvector(b * scale, doubles8);
        lanes_lo += x * x;
        lanes_hi += y * y;
    }
    double s = 0.0;
    for (int j = 0; j < 8; j++) s += lanes_lo[j];
    for (int j = 0; j < 8; j++) s += lanes_hi[j];
    for (; i < n; i++) {
        float x = g[i] * scale;
        s += (double)x * x;
    }
    return s;
}

#endif  // CPU_VECMATH_H
