// cuda/classifier.cuh: fused softmax cross-entropy over R rows of logits (R rows of
// V classes, floatX, computed by cuBLAS; rows ld >= V apart: the vocabulary padded
// to Vp, whose extra columns get a zero gradient). CPU twin: crossentropy_softmax in train_sft.c.
//
// One block of CE_THREADS per row. Pass 1: each thread keeps an online (max, sum of
// exp(x - max)) over its elements in fp32; the block combines them in a fixed tree
// (warp shuffles, then warp 0 over the warps' results), so the result is the same
// every run. Pass 2 re-reads the row (from L2) and overwrites it with
// (softmax - onehot(target)) * grad_scale as floatX. Rows start at any element
// (V is odd for GPT-2), so each row is visited as a short unaligned head, 16-byte
// groups, and a short tail. Pass 2 also forms trl's token metrics of the row (train/
// trainer.h's TokenSums): each thread sums exp(x - m) (x - m) and keeps the first
// index where x equals the row's max m; a second fixed tree gives the entropy
// log(s) - sum / s and the prediction (the first largest logit, as torch.argmax).
#pragma once
#include <limits.h>
#include <math.h>
#include "common.cuh"
#include "elementwise.cuh"

#define CE_THREADS 1024

// (m, s) <- (m, s) combined with one value x: s is the sum of exp(. - m)
__device__ __forceinline__ void online_add(float& m, float& s, float x) {
    if (x > m) {
        s = s * expf(m - x) + 1.0f;  // m = -inf at the start: s = 0 * 0 + 1
        m = x;
    } else {
        s += expf(x - m);
    }
}

// (m, s) <- (m, s) combined with (m2, s2); an empty side has m = -inf
__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
    if (m2 == -INFINITY) return;
    if (m == -INFINITY) {
        m = m2;
        s = s2;
        return;
    }
    float mx = fmaxf(m, m2);
    s = s * expf(m - mx) + s2 * expf(m2 - mx);
    m = mx;
}

// block-wide (max, sum) in a fixed order; every thread gets the result
__device__ inline void block_online_reduce(float& m, float& s) {
    __shared__ float sm[32], ss[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_down_sync(0xffffffffu, m, o), s2 = __shfl_down_sync(0xffffffffu, s, o);
        online_merge(m, s, m2, s2);
    }
    if (lane == 0) {
        sm[warp] = m;
        ss[warp] = s;
    }
    __syncthreads();
    if (warp == 0) {
        m = lane < nwarps ? sm[lane] : -INFINITY;
        s = lane < nwarps ? ss[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) {
            float m2 = __shfl_down_sync(0xffffffffu, m, o), s2 = __shfl_down_sync(0xffffffffu, s, o);
            online_merge(m, s, m2, s2);
        }
        if (lane == 0) {
            sm[0] = m;
            ss[0] = s;
        }
    }
    __syncthreads();
    m = sm[0];
    s = ss[0];
}

// block-wide sum of w and minimum of i in a fixed order; every thread gets the result
__device__ inline void block_sum_min(float& w, int& i) {
    __shared__ float sw[32];
    __shared__ int si[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    for (int o = 16; o > 0; o >>= 1) {
        w += __shfl_down_sync(0xffffffffu, w, o);
        i = min(i, __shfl_down_sync(0xffffffffu, i, o));
    }
    if (lane == 0) {
        sw[warp] = w;
        si[warp] = i;
    }
    __syncthreads();
    if (warp == 0) {
        w = lane < nwarps ? sw[lane] : 0.0f;
        i = lane < nwarps ? si[lane] : INT_MAX;
        for (int o = 16; o > 0; o >>= 1) {
            w += __shfl_down_sync(0xffffffffu, w, o);
            i = min(i, __shfl_down_sync(0xffffffffu, i, o));
        }
        if (lane == 0) {
            sw[0] = w;
            si[0] = i;
        }
    }
    __syncthreads();
    w = sw[0];
    i = si[0];
}

// the part of pass 2 for one value x at index v: the metrics' sums, then the gradient
__device__ __forceinline__ float ce_grad(float x, int v, float m, float inv, int target, float grad_scale, float& w, int& first) {
    float d = x - m, e = expf(d);
    w += e * d;
    if (d == 0.0f) first = min(first, v);
    return (e * inv - (v == target ? 1.0f : 0.0f)) * grad_scale;
}

__global__ void __launch_bounds__(CE_THREADS)
    crossentropy_softmax_kernel(floatX* logits, float* losses, float* correct, float* entropy, const int* targets, int V, int ld, float grad_scale) {
    constexpr int N = XVEC;
    const int r = blockIdx.x;
    floatX* row = logits + (size_t)r * ld;
    const int target = targets[r];
    // row = [head: up to the first 16-byte boundary][npack groups of N][tail]
    int mis = (int)(((uintptr_t)row % 16) / sizeof(floatX));
    int head = mis ? min(N - mis, V) : 0;
    int npack = (V - head) / N;
    int tail0 = head + npack * N;

    float target_logit = (target >= 0 && target < V) ? to_float(row[target]) : NAN;  // read before pass 2 writes
    float m = -INFINITY, s = 0.0f;
    for (int v = threadIdx.x; v < head; v += blockDim.x) online_add(m, s, to_float(row[v]));
    for (int p = threadIdx.x; p < npack; p += blockDim.x) {
        float x[N];
        load_vec<N>(x, row + head + p * N);
#pragma unroll
        for (int k = 0; k < N; k++) online_add(m, s, x[k]);
    }
    for (int v = tail0 + threadIdx.x; v < V; v += blockDim.x) online_add(m, s, to_float(row[v]));
    block_online_reduce(m, s);  // its barriers order every read above before the writes below
    if (threadIdx.x == 0) losses[r] = logf(s) + m - target_logit;

    float inv = 1.0f / s, w = 0.0f;  // w: this thread's sum of exp(x - m) (x - m)
    int first = INT_MAX;              // the first index of this thread's values equal to m
    for (int v = threadIdx.x; v < head; v += blockDim.x) row[v] = from_float<floatX>(ce_grad(to_float(row[v]), v, m, inv, target, grad_scale, w, first));
    for (int p = threadIdx.x; p < npack; p += blockDim.x) {
        int v0 = head + p * N;
        float x[N];
        load_vec<N>(x, row + v0);
#pragma unroll
        for (int k = 0; k < N; k++) x[k] = ce_grad(x[k], v0 + k, m, inv, target, grad_scale, w, first);
        store_vec<N>(row + v0, x);
    }
    for (int v = tail0 + threadIdx.x; v < V; v += blockDim.x)
        row[v] = from_float<floatX>(ce_grad(to_float(row[v]), v, m, inv, target, grad_scale, w, first));
    for (int v = V + threadIdx.x; v < ld; v += blockDim.x) row[v] = from_float<floatX>(0.0f);  // padding: no gradient
    if (!correct) return;  // uniform over the block: no thread waits at block_sum_min's barriers
    block_sum_min(w, first);
    if (threadIdx.x == 0) {
        correct[r] = first == target ? 1.0f : 0.0f;
        entropy[r] = logf(s) - w / s;
    }
}

// With logits_r the first V values of row r (rows ld apart): losses[r] = logsumexp(logits_r)
// - logits_r[targets[r]] (fp32; NaN if the target is outside [0, V)); logits_r OVERWRITTEN
// with (softmax(logits_r) - onehot(targets[r])) * grad_scale, and the row's values V..ld-1 with 0.
// Unless correct is NULL (then entropy is unused): correct[r] = 1 if the first largest of
// logits_r is at targets[r], else 0, and entropy[r] = the entropy of softmax(logits_r), nats.
void crossentropy_softmax(floatX* logits, float* losses, float* correct, float* entropy, const int* targets, int R, int V, int ld, float grad_scale,
                          cudaStream_t s) {
    if (R <= 0 || V <= 0) return;
    crossentropy_softmax_kernel<<<R, CE_THREADS, 0, s>>>(logits, losses, correct, entropy, targets, V, ld, grad_scale);
    LAUNCH_CHECK();
}
