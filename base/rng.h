// rng.h: a small deterministic random number generator (splitmix64 seeding an
// xorshift64* stream). The whole state is one uint64, so checkpoints can save it
// and a resumed run continues the same stream.
#ifndef SFT_RNG_H
#define SFT_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct { uint64_t state; } Rng;

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void rng_seed(Rng *r, uint64_t seed) {
    r->state = splitmix64(seed);
    if (r->state == 0) r->state = 0x2545F4914F6CDD1Dull;  // xorshift must not start at 0
}

static uint64_t rng_u64(Rng *r) {
    uint64_t x = r->state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

// Uniform in [0, 1) with 24 random bits (exact in float).
static float rng_float(Rng *r) { return (float)(rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

// Uniform integer in [0, n), n > 0 (multiply-shift; the bias is below 2^-32 for any n we use).
static uint64_t rng_below(Rng *r, uint64_t n) {
    return (uint64_t)(((unsigned __int128)rng_u64(r) * n) >> 64);
}

// Standard normal by Box-Muller (one value per call; deterministic).
static float rng_normal(Rng *r) {
    double u1 = ((double)(rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);  // (0, 1]
    double u2 = (double)(rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

#endif
