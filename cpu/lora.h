/*
cpu/lora.h: the math of one LoRA adapter on the CPU, the twin of cuda/lora.cuh. An
adapter on a product out[N, OC] = x[N, in] W of the trainer adds
  out[:, off : off + rows] += s * dropout(x) A^T B^T        A [R, in], B [rows, R]
to the columns of its module (q, k or v of a fused q|k|v product, gate or up of
gate|up, the whole product otherwise). h = s * dropout(x) A^T [N, R] is kept for the
backward pass; the dropout mask is a function of its counters (model/lora.h's
lora_dropout_mask), so the backward pass draws it again instead of storing it.
Backward, with d = dout[:, off : off + rows]:
  dB += d^T h;  dh = s * d B;  dA += dh^T dropout(x);  dx += mask * (dh A)

It is not the settings, the adapter layout, the initialization, the mask itself, the
merge or the PEFT files (model/lora.h, shared with the GPU trainer), nor the choice of
which adapters a product has (the trainer's lora_site_forward / lora_site_backward).
C, not C++; on model/lora.h and base/ (as cuda/ is).
*/
#ifndef CPU_LORA_H
#define CPU_LORA_H
#include "../model/lora.h"
#include "gemm.h"

// x[0..n) *= s
static void lora_scale_floats(float *x, size_t n, float s) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

// xd = dropout(x), n values, for the draw `key` with drop probability p (0 < p < 1)
static void lora_dropout_forward(float *xd, const float *x, size_t n, uint64_t key, float p) {
    uint32_t threshold = lora_dropout_threshold(p);
    float keep = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static)
    for (size_t e = 0; e < n; e++) xd[e] = x[e] * lora_dropout_mask(key, e, threshold, keep);
}

// dx += mask * g: the backward pass of lora_dropout_forward for the same key and p
static void lora_dropout_backward(float *dx, const float *g, size_t n, uint64_t key, float p) {
    uint32_t threshold = lora_dropout_threshold(p);
    float keep = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static)
    for (size_t e = 0; e < n; e++) dx[e] += lora_dropout_mask(key, e, threshold, keep) * g[e];
}

// h [N, R] = s * x A^T;  out[:, off : off + rows] += h B^T   (x already dropped out)
static void lora_forward(float *out, float *h, const float *x, const float *A, const float *B, float scale, int N, int in, int OC, int off,
                         int rows, int R) {
    gemm(N, R, in, x, in, 1, A, 1, in, h, R, 0);
    lora_scale_floats(h, (size_t)N * R, scale);
    gemm(N, rows, R, h, R, 1, B, 1, R, out + off, OC, 1);
}

// dB [rows, R] += d^T h;  dh [N, R] = s * d B;  dA [R, in] += dh^T x, with d the columns
// from off of dout [N, OC] and x as in lora_forward. The input's gradient, dh A, is
// lora_backward_dx's (it passes through the dropout's mask when there is one).
static void lora_backward_weights(float *dA, float *dB, float *dh, const float *dout, const float *h, const float *x, const float *B, float scale,
                                  int N, int in, int OC, int off, int rows, int R) {
    const float *d = dout + off;
    gemm(rows, R, N, d, 1, OC, h, R, 1, dB, R, 1);
    gemm(N, R, rows, d, OC, 1, B, R, 1, dh, R, 0);
    lora_scale_floats(dh, (size_t)N * R, scale);
    gemm(R, in, N, dh, 1, R, x, in, 1, dA, in, 1);
}

// dx [N, in] = dh A, added to dx (accumulate 1: no dropout) or written (0: into a scratch
// that lora_dropout_backward then adds through the mask)
static void lora_backward_dx(float *dx, const float *dh, const float *A, int N, int in, int R, int accumulate) {
    gemm(N, in, R, dh, R, 1, A, in, 1, dx, in, accumulate);
}

// One adapter in training or evaluation: its dropout (p > 0: x dropped out into the scratch
// xd [N, in] with the draw `key`; p = 0: none) and lora_forward. The entry point per adapter.
static void lora_adapter_forward(float *out, float *h, float *xd, const float *x, const float *A, const float *B, float scale, float p,
                                 uint64_t key, int N, int in, int OC, int off, int rows, int R) {
    if (p > 0) { lora_dropout_forward(xd, x, (size_t)N * in, key, p); x = xd; }
    lora_forward(out, h, x, A, B, scale, N, in, OC, off, rows, R);
}

// Its backward pass, with the same p and key (the mask is drawn again into xd): dA, dB +=
// their gradients, dx [N, in] += the adapter's part of the input's gradient; dh [N, R] scratch
static void lora_adapter_backward(float *dx, float *dA, float *dB, float *dh, float *xd, const float *dout, const float *h, const float *x,
                                  const float *A, const float *B, float scale, float p, uint64_t key, int N, int in, int OC, int off, int rows, int R) {
    if (p > 0) { lora_dropout_forward(xd, x, (size_t)N * in, key, p); x = xd; }
    lora_backward_weights(dA, dB, dh, dout, h, x, B, scale, N, in, OC, off, rows, R);
    if (p == 0) { lora_backward_dx(dx, dh, A, N, in, R, 1); return; }
    lora_backward_dx(xd, dh, A, N, in, R, 0);  // the dropped-out x is used: xd takes dh A
    lora_dropout_backward(dx, xd, (size_t)N * in, key, p);
}

// lora_forward on one row x [in] without dropout (generation):
// out[off + o] += sum_r B[o][r] * s * (A x)[r]
static void lora_forward_row(float *out, const float *x, const float *A, const float *B, float scale, int in, int off, int rows, int R) {
    float h[LORA_MAX_RANK];
    for (int r = 0; r < R; r++) {
        float d = 0.0f;
        for (int k = 0; k < in; k++) d += A[(size_t)r * in + k] * x[k];
        h[r] = scale * d;
    }
#pragma omp parallel for schedule(static)
    for (int o = 0; o < rows; o++) {
        float d = 0.0f;
        for (int r = 0; r < R; r++) d += B[(size_t)o * R + r] * h[r];
        out[off + o] += d;
    }
}

#endif  // CPU_LORA_H
