/*
cpu/attention.h: the CPU trainer's causal self-attention within packed documents
(grouped-query, optionally in a sliding window), forward and backward, and the first
key a query sees (train_sft.c's generation uses it too).

Each query row's work is products over its keys. The scores q_t . k_s are computed a
vector of keys at a time from a transposed copy of the head's keys (channel i of key s
at kt[i * ld + s]), one vector holding 16 (AVX2: 8) keys' partial sums, instead of one
dot product (and one horizontal sum) per key; the weighted sums (sum_s p_s v_s, dq's
sum_s dpre_s k_s, and in the backward dv's and dk's sums over queries) keep their
outputs in registers for the whole sweep instead of a load and a store per term. Every result keeps its summation order, so the bits are those
of the plain loops (dot_lanes's lanes for a score, cpu/vecmath.h): the same for any
thread count and vector width, and for attention_decode, which computes one row as
attention_forward does. At T=256 attention took 12% of a GPT-2 124M step on a 2-core
Xeon before (docs/benchmarks.md). C, not C++; on base/ and cpu/vecmath.h only.
*/
#ifndef CPU_ATTENTION_H
#define CPU_ATTENTION_H
#include <math.h>
#include <omp.h>
#include "../base/util.h"
#include "vecmath.h"

// The first key position query t sees: its document's start ds, and with a sliding
// window of W > 0 keys (Gemma 3's sliding layers; W = 0: full causal) also t - W + 1.
// That is transformers' convention (masking_utils: sliding_window_overlay allows
// kv_idx > q_idx - W, and'ed with the causal kv_idx <= q_idx): query t sees key s iff
// s <= t and t - s < W, W keys counting itself; the window restarts in each packed
// document like the causal mask.
static inline int attention_first_key(int ds, int t, int window) {
    return window > 0 && t - window + 1 > ds ? t - window + 1 : ds;
}

// A vector of the machine's width (gcc keeps a wider one in memory in an AVX2 build:
// GPT-2's step at T=256 was 30% slower). The lanes are keys or channels, whose sums are
// independent, so the width changes no result.
#if defined(__AVX512F__)
#define ATT_VEC 16
#else
#define ATT_VEC 8
#endif
typedef float vkeys __attribute__((vector_size(ATT_VEC * sizeof(float))));

// Channel i of row s (at src + s * ld, s < T) into kt[i * kt_ld + s]: the keys (or values)
// of one head transposed, so that 16 consecutive keys' channel i is one vector load.
static void attention_transpose(float *kt, long kt_ld, const float *src, long ld, int T, int HS) {
    for (int s = 0; s < T; s++)
        for (int i = 0; i < HS; i++) kt[i * kt_ld + s] = src[(long)s * ld + i];
}

// out[s - s0] = dot_lanes(q, k_s, n) for the keys s0 <= s < s1, k_s's channel i at
// kt[i * ld + s] (the columns up to s1 + 15 readable). dot_lanes adds channel i into
// lane i % 16, in order, then its 16 lanes in order: here one vector holds one of those
// lanes for ATT_VEC keys, and the lanes are added in the same order.
static void dot_lanes_keys(float *out, const float *q, const float *kt, long ld, int s0, int s1, int n) {
    for (int s = s0; s < s1; s += ATT_VEC) {
        vkeys sum = {0};
        for (int lane = 0; lane < 16; lane++) {
            vkeys part = {0}, k;
            for (int i = lane; i < n; i += 16) memcpy(&k, kt + i * ld + s, sizeof k), part += q[i] * k;
            sum += part;
        }
        memcpy(out + s - s0, &sum, (size_t)(s1 - s < ATT_VEC ? s1 - s : ATT_VEC) * sizeof(float));
    }
}

// out[i] (+)= sum over s0 <= s < s1 of p[s * p_ld] * x_s[i] for i < n (x_s at x + s * ld),
// each out[i] one chain of rounded products added in order of s, from out[i]
// (accumulate) or from 0: 4 vectors or 1 of outputs at a time in registers across the rows.
static void attention_weighted_sum(float *out, const float *p, long p_ld, const float *x, long ld, int s0, int s1, int n, int accumulate) {
    int i = 0;
    for (; i + 4 * ATT_VEC <= n; i += 4 * ATT_VEC) {
        vkeys acc[4] = {{0}}, v;
        if (accumulate) memcpy(acc, out + i, sizeof acc);
        for (int s = s0; s < s1; s++)
            for (int u = 0; u < 4; u++) memcpy(&v, x + s * ld + i + ATT_VEC * u, sizeof v), acc[u] += p[s * p_ld] * v;
        memcpy(out + i, acc, sizeof acc);
    }
    for (; i + ATT_VEC <= n; i += ATT_VEC) {
        vkeys acc = {0}, v;
        if (accumulate) memcpy(&acc, out + i, sizeof acc);
        for (int s = s0; s < s1; s++) memcpy(&v, x + s * ld + i, sizeof v), acc += p[s * p_ld] * v;
        memcpy(out + i, &acc, sizeof acc);
    }
    for (; i < n; i++) {
        float acc = accumulate ? out[i] : 0.0f;
        for (int s = s0; s < s1; s++) acc += p[s * p_ld] * x[s * ld + i];
        out[i] = acc;
    }
}

// Causal self-attention within documents, grouped-query, optionally in a sliding
// window. qkv rows (width QKV = (NH + 2 KVH) HS) hold [q (NH heads) | k (KVH heads) |
// v (KVH heads)], heads of HS channels; query head h reads key/value head h / (NH / KVH)
// (GPT-2: KVH = NH, HS = C/NH, QKV = 3C). For position t with first key
// s0 = attention_first_key(doc_start[t], t, window):
// att[t, s] = softmax_{s0 <= s <= t}(scale q_t . k_s), out_t = sum_s att[t, s] v_s, scale
// 1/sqrt(HS) or Gemma 3's query_pre_attn_scalar^-1/2 (attention_scale);
// out rows are NH*HS wide. att is (B, NH, T, T); entries outside [s0, t] are unused.
static void attention_forward(float *out, float *att, const float *qkv, const int *doc_start, int B, int T, int NH, int KVH, int HS, float scale,
                              int window) {
    int QKV = (NH + 2 * KVH) * HS, A = NH * HS, group = NH / KVH;
    long ld = T + 16;  // kt's rows, 16 columns past T for the last block of keys
#pragma omp parallel
    {
        float *kt = (float *)xcalloc((size_t)HS * ld, sizeof(float));
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                int kh = h / group;
                attention_transpose(kt, ld, qkv + (size_t)b * T * QKV + A + kh * HS, QKV, T, HS);
                for (int t = 0; t < T; t++) {
                    const float *q = qkv + ((size_t)b * T + t) * QKV + h * HS;
                    float *a = att + (((size_t)b * NH + h) * T + t) * T;
                    int s0 = attention_first_key(doc_start[b * T + t], t, window);
                    dot_lanes_keys(a + s0, q, kt, ld, s0, t + 1, HS);
                    float mx = -INFINITY, sum = 0.0f;
                    for (int s = s0; s <= t; s++) {
                        a[s] *= scale;
                        if (a[s] > mx) mx = a[s];
                    }
                    for (int s = s0; s <= t; s++) a[s] = exp_vec(a[s] - mx);
                    for (int s = s0; s <= t; s++) sum += a[s];
                    float inv = 1.0f / sum;
                    for (int s = s0; s <= t; s++) a[s] *= inv;
                    const float *v = qkv + (size_t)b * T * QKV + A + (KVH + kh) * HS;
                    attention_weighted_sum(out + ((size_t)b * T + t) * A + h * HS, a, 1, v, QKV, s0, t + 1, HS, 0);
                }
            }
        free(kt);
    }
}

// With p = att[t, :], g_s = dout_t . v_s:  dv_s += p_s dout_t,
// dpre_s = p_s (g_s - sum_r p_r g_r),  dq_t += scale sum_s dpre_s k_s,  dk_s += scale dpre_s q_t;
// dk and dv of a key/value head sum over the NH/KVH query heads that read it; s runs over
// s0 .. t as in attention_forward (the same window).
// One thread per (row, key/value head), its query heads in order: dk and dv of a
// head are written only by its thread, in a fixed order.
static void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, const int *doc_start,
                               int B, int T, int NH, int KVH, int HS, float scale, int window) {
    int QKV = (NH + 2 * KVH) * HS, A = NH * HS, group = NH / KVH;
    long ld = T + 16;  // vt's rows, as kt's in attention_forward
#pragma omp parallel
    {
        // dp: dpre of the group's query heads, (head, t, s): NH/KVH x T^2 floats a thread (att: B NH T^2 a layer)
        float *vt = (float *)xcalloc((size_t)HS * ld, sizeof(float)), *dp = (float *)xmalloc((size_t)group * T * T * sizeof(float));
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int kh = 0; kh < KVH; kh++) {
                const float *k0 = qkv + (size_t)b * T * QKV + A + kh * HS;  // key s at k0 + s * QKV, value s at v0 + s * QKV
                const float *v0 = k0 + KVH * HS;
                attention_transpose(vt, ld, v0, QKV, T, HS);
                for (int h = kh * group; h < (kh + 1) * group; h++)  // dq, and dpre for dk
                    for (int t = 0; t < T; t++) {
                        const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                        const float *dy = dout + ((size_t)b * T + t) * A + h * HS;
                        float *dq = dqkv + ((size_t)b * T + t) * QKV + h * HS, *g = dp + ((size_t)(h - kh * group) * T + t) * T;
                        int s0 = attention_first_key(doc_start[b * T + t], t, window);
                        dot_lanes_keys(g + s0, dy, vt, ld, s0, t + 1, HS);  // g_s
                        float dot = 0.0f;
                        for (int s = s0; s <= t; s++) dot += a[s] * g[s];
                        for (int s = s0; s <= t; s++) g[s] = a[s] * (g[s] - dot) * scale;  // dpre_s
                        attention_weighted_sum(dq, g, 1, k0, QKV, s0, t + 1, HS, 1);
                    }
                // dv_s and dk_s: a sum over the queries that see key s, t in [s, t1) (s0 grows
                // with t), head by head of the group and t in order within a head: the order
                // of one update per (head, t, s) in the loops above, in registers across t
                for (int s = 0, t1 = 0; s < T; s++) {
                    if (t1 < s) t1 = s;
                    while (t1 < T && attention_first_key(doc_start[b * T + t1], t1, window) <= s) t1++;
                    float *dk = dqkv + ((size_t)b * T + s) * QKV + A + kh * HS, *dv = dk + KVH * HS;
                    for (int h = kh * group; h < (kh + 1) * group; h++) {
                        const float *a = att + ((size_t)b * NH + h) * T * T + s, *g = dp + (size_t)(h - kh * group) * T * T + s;
                        attention_weighted_sum(dv, a, T, dout + (size_t)b * T * A + h * HS, A, s, t1, HS, 1);
                        attention_weighted_sum(dk, g, T, qkv + (size_t)b * T * QKV + h * HS, QKV, s, t1, HS, 1);
                    }
                }
            }
        free(vt), free(dp);
    }
}

#endif  // CPU_ATTENTION_H
