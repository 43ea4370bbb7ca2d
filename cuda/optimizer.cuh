// cuda/optimizer.cuh: the global gradient norm and the AdamW update.
// CPU twins: gradient_norm and adamw_tensor in train_sft.c; the update of one value and the
// clipping coefficient are train/adamw.h's, shared with them.
#pragma once
#include <math.h>
#include "../train/adamw.h"
#include "common.cuh"
#include "elementwise.cuh"

// ----------------------------------------------------------------------------
// Sum of squares, deterministic: a FIXED grid of NORM_BLOCKS x NORM_THREADS (the
// same on every device and for every n) walks the values in a grid-stride loop
// with fp32 sums per thread; each block reduces its threads in a fixed tree into
// scratch[block]; then one block sums the NORM_BLOCKS partials in a fixed tree.

#define NORM_BLOCKS 1024
#define NORM_THREADS 512

// sum over the block in a fixed order; the result is valid in thread 0
__device__ inline float block_sum_fixed(float v) {
    __shared__ float warp_sums[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_sum(v);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    float t = 0.0f;
    if (warp == 0) {
        t = lane < nwarps ? warp_sums[lane] : 0.0f;
        t = warp_sum(t);
    }
    return t;
}

template <int N> __global__ void __launch_bounds__(NORM_THREADS) norm_partial_kernel(float* partial, const float* g, size_t n) {
    size_t ngroups = n / N, stride = (size_t)gridDim.x * blockDim.x;
    float acc = 0.0f;
    for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < ngroups; p += stride) {
        float x[N];
        load_vec<N>(x, g + p * N);
#pragma unroll
        for (int k = 0; k < N; k++) acc += x[k] * x[k];
    }
    if (blockIdx.x == 0 && threadIdx.x < n - ngroups * N) {  // the last n % N values
        float x = g[ngroups * N + threadIdx.x];
        acc += x * x;
    }
    float total = block_sum_fixed(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

__global__ void __launch_bounds__(NORM_THREADS) norm_final_kernel(float* out, const float* partial, int nparts) {
    float acc = 0.0f;
    for (int k = threadIdx.x; k < nparts; k += blockDim.x) acc += partial[k];
    float total = block_sum_fixed(acc);
    if (threadIdx.x == 0) *out = total;
}

size_t global_norm_scratch_floats(void) { return NORM_BLOCKS; }

// *out (device float) = sum of g[i]^2 over n fp32 gradients; scratch: global_norm_scratch_floats() floats
void global_norm_squared(float* out, float* scratch, const float* g, size_t n, cudaStream_t s) {
    if (is_aligned(g, 16)) norm_partial_kernel<4><<<NORM_BLOCKS, NORM_THREADS, 0, s>>>(scratch, g, n);
    else norm_partial_kernel<1><<<NORM_BLOCKS, NORM_THREADS, 0, s>>>(scratch, g, n);
    LAUNCH_CHECK();
    norm_final_kernel<<<1, NORM_THREADS, 0, s>>>(out, scratch, NORM_BLOCKS);
    LAUNCH_CHECK();
}

// *scale = the factor that clips the gradients to norm max_norm (1 if max_norm <= 0 or
// the norm is below it), from *norm2, on the device: no host round trip in the step.
// train/adamw.h's grad_clip_coef, which the offloaded optimizer calls on the host.
__global__ void grad_clip_scale_kernel(float* scale, const float* norm2, float max_norm) { *scale = grad_clip_coef(*norm2, max_norm); }

void grad_clip_scale(float* scale, const float* norm2, float max_norm, cudaStream_t s) {
    grad_clip_scale_kernel<<<1, 1, 0, s>>>(scale, norm2, max_norm);
    LAUNCH_CHECK();
}

// ----------------------------------------------------------------------------
// AdamW (torch semantics, train/adamw.h's adamw_one): thread per group of N parameters,
// the gradient grad * (*grad_scale).
// p is the fp32 master weight (master), or params itself when master is null;
// master may equal params in the fp32 build (each value is read, then written, by one thread).

template <int N>
__global__ void adamw_kernel(float* master, floatX* params, const float* grads, float* m, float* v, size_t n, AdamWStep a,
                             const float* grad_scale) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * N;
    if (i >= n) return;
    const float gs = *grad_scale;
    if (i + N <= n) {
        float p[N], g[N], mk[N], vk[N];
        if (master) load_vec<N>(p, master + i);
        else load_vec<N>(p, params + i);
        load_vec<N>(g, grads + i);
        load_vec<N>(mk, m + i);
        load_vec<N>(vk, v + i);
#pragma unroll
        for (int k = 0; k < N; k++) p[k] = adamw_one(p[k], g[k] * gs, &mk[k], &vk[k], &a);
        store_vec<N>(m + i, mk);
        store_vec<N>(v + i, vk);
        if (master) store_vec<N>(master + i, p);
        store_vec<N>(params + i, p);
    } else {
        for (size_t k = i; k < n; k++) {
            float p = master ? master[k] : to_float(params[k]);
            float mk = m[k], vk = v[k];
            p = adamw_one(p, grads[k] * gs, &mk, &vk, &a);
            m[k] = mk;
            v[k] = vk;
            if (master) master[k] = p;
            params[k] = from_float<floatX>(p);
        }
    }
}

void adamw_update(float* master, floatX* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, const float* grad_scale, int t, cudaStream_t s) {
    if (n == 0) return;
    AdamWStep a = adamw_constants(lr, beta1, beta2, eps, weight_decay, t);
    const int block = 256, N = 4;  // 4 values: 16 bytes of fp32 state and grads, 8 (bf16) or 16 (fp32) bytes of params
    bool vec = (master == nullptr || is_aligned(master, 16)) && is_aligned(m, 16) && is_aligned(v, 16) &&
               is_aligned(params, N * sizeof(floatX)) && is_aligned(grads, 16);
    if (vec) adamw_kernel<N><<<ceil_div((long)n, (long)block * N), block, 0, s>>>(master, params, grads, m, v, n, a, grad_scale);
    else adamw_kernel<1><<<ceil_div((long)n, block), block, 0, s>>>(master, params, grads, m, v, n, a, grad_scale);
    LAUNCH_CHECK();
}
