// cuda/lora.cuh: LoRA adapters on the GPU (model/lora.h has the settings and the layout;
// cpu/lora.h is the CPU twin). One adapter on a linear layer y = x W^T (+ b) of input width IC adds
//   y[:, col : col + O] += s * dropout(x) A^T B^T,   A [R, IC], B [O, R], s = alpha / R
// to the columns [col, col + O) of the layer's product of width OC (q, k and v of a fused
// q|k|v product, gate and up of gate|up; the whole product otherwise). The products run
// through cuBLAS, the scale s in their alpha; h = s * dropout(x) A^T [N, R] is kept for
// backward (it is small: R columns), and the dropout mask is a function of its counters
// (model/lora.h's lora_dropout_mask), so backward draws it again instead of storing it.
// Backward, with dy = dL/dy[:, col : col + O] and xd = dropout(x):
//   dB += dy^T h;  dh = s * dy B;  dA += dh^T xd;  dx += dropout'(dh A)
// (dropout' multiplies by the same mask: 0 or 1 / (1 - p)). dA and dB are fp32, accumulated
// over micro-batches as the other gradients.
#pragma once
#include "../model/lora.h"
#include "common.cuh"
#include "matmul.cuh"

// ----------------------------------------------------------------------------
// Dropout on the adapter's input: element i of the N x IC input (row-major) times
// lora_dropout_mask(key, i, ...), 0 or 1 / (1 - p): the CPU trainer's draw for the same key
// (model/lora.h, a hash of the counters, LORA_HD: the same function here).
// CPU twin: cpu/lora.h's lora_dropout_forward (and _backward); checked by dev/cuda/lora.cu.

__global__ void lora_dropout_forward_kernel(floatX* xd, const floatX* x, size_t n, uint64_t key, uint32_t threshold, float keep_scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) xd[i] = from_float<floatX>(to_float(x[i]) * lora_dropout_mask(key, (uint64_t)i, threshold, keep_scale));
}

// dx[i] += mask(i) * g[i]: the backward of lora_dropout_forward for the same key
__global__ void lora_dropout_backward_kernel(floatX* dx, const floatX* g, size_t n, uint64_t key, uint32_t threshold, float keep_scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dx[i] = from_float<floatX>(to_float(dx[i]) + to_float(g[i]) * lora_dropout_mask(key, (uint64_t)i, threshold, keep_scale));
}

// xd = dropout(x), n values, for the draw `key` with drop probability p (0 < p < 1)
inline void lora_dropout_forward(floatX* xd, const floatX* x, size_t n, uint64_t key, float p, cudaStream_t s) {
    if (n == 0) return;
    lora_dropout_forward_kernel<<<ceil_div((long)n, 256), 256, 0, s>>>(xd, x, n, key, lora_dropout_threshold(p), 1.0f / (1.0f - p));
    LAUNCH_CHECK();
}

// dx += dropout'(g): g times the mask lora_dropout_forward applied for the same key and p
inline void lora_dropout_backward(floatX* dx, const floatX* g, size_t n, uint64_t key, float p, cudaStream_t s) {
    if (n == 0) return;
    lora_dropout_backward_kernel<<<ceil_div((long)n, 256), 256, 0, s>>>(dx, g, n, key, lora_dropout_threshold(p), 1.0f / (1.0f - p));
    LAUNCH_CHECK();
}

// ----------------------------------------------------------------------------
// One adapter's products. x: [N, IC] the layer's input (already dropped out: xd); out: the
// layer's product [N, OC], its columns from col.

// h [N, R] = s * x A^T;  out[:, col : col + O] += h B^T
inline void lora_forward(cublasHandle_t blas, floatX* out, floatX* h, const floatX* x, const floatX* A, const floatX* B, float scale, int N,
                         int IC, int OC, int col, int O, int R) {
    gemm_rm(blas, false, true, N, R, IC, x, IC, A, IC, h, R, 0.0f, scale);
    gemm_rm(blas, false, true, N, O, R, h, R, B, R, out + col, OC, 1.0f);
}

// dB [O, R] += dy^T h;  dh [N, R] = s * dy B;  dA [R, IC] += dh^T x.  dy: the columns from col
// of dout [N, OC]; x as in forward (dropped out). The input gradient's part, dh A, is
// lora_backward_dx's (it goes through the dropout's mask when there is one).
inline void lora_backward_weights(cublasHandle_t blas, float* dA, float* dB, floatX* dh, const floatX* dout, const floatX* h, const floatX* x,
                                  const floatX* B, float scale, int N, int IC, int OC, int col, int O, int R) {
    gemm_rm(blas, true, false, O, R, N, dout + col, OC, h, R, dB, R, 1.0f);
    gemm_rm(blas, false, false, N, R, O, dout + col, OC, B, R, dh, R, 0.0f, scale);
    gemm_rm(blas, true, false, R, IC, N, dh, R, x, IC, dA, IC, 1.0f);
}

// dx [N, IC] = dh A + beta * dx: beta 1 adds the adapter's input gradient to the base layer's
// (no dropout); beta 0 writes it to a scratch that lora_dropout_backward then adds through the mask
inline void lora_backward_dx(cublasHandle_t blas, floatX* dx, const floatX* dh, const floatX* A, int N, int IC, int R, float beta) {
    gemm_rm(blas, false, false, N, IC, R, dh, R, A, IC, dx, IC, beta);
}

// ----------------------------------------------------------------------------
// One adapter in training or evaluation, the entry points per adapter (cpu/lora.h's twins):
// its dropout (p > 0: x dropped out into the scratch xd [N, IC] with the draw `key`; p = 0:
// none), then lora_forward.
inline void lora_adapter_forward(cublasHandle_t blas, floatX* out, floatX* h, floatX* xd, const floatX* x, const floatX* A, const floatX* B,
                                 float scale, float p, uint64_t key, int N, int IC, int OC, int col, int O, int R, cudaStream_t s) {
    if (p > 0.0f) { lora_dropout_forward(xd, x, (size_t)N * IC, key, p, s); x = xd; }
    lora_forward(blas, out, h, x, A, B, scale, N, IC, OC, col, O, R);
}

// Its backward pass, with the same p and key (the mask is drawn again into xd): dA, dB += their
// gradients, dx [N, IC] += the adapter's part of the input's gradient; dh [N, R] scratch
inline void lora_adapter_backward(cublasHandle_t blas, floatX* dx, float* dA, float* dB, floatX* dh, floatX* xd, const floatX* dout,
                                  const floatX* h, const floatX* x, const floatX* A, const floatX* B, float scale, float p, uint64_t key, int N,
                                  int IC, int OC, int col, int O, int R, cudaStream_t s) {
    if (p > 0.0f) { lora_dropout_forward(xd, x, (size_t)N * IC, key, p, s); x = xd; }
    lora_backward_weights(blas, dA, dB, dh, dout, h, x, B, scale, N, IC, OC, col, O, R);
    if (p <= 0.0f) { lora_backward_dx(blas, dx, dh, A, N, IC, R, 1.0f); return; }
    lora_backward_dx(blas, xd, dh, A, N, IC, R, 0.0f);  // the dropped-out x is used: xd takes dh A
    lora_dropout_backward(dx, xd, (size_t)N * IC, key, p, s);
}
