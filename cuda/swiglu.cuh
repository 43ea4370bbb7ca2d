// cuda/swiglu.cuh: the SwiGLU of the Llama-family MLP, forward and backward. CPU twins:
// ref_swiglu_forward/backward (dev/cuda/cpu_ref.c).
//
// A row of fch is [gate (FF) | up (FF)] (gate_proj and up_proj stacked in one product);
//   h = silu(gate) * up,  silu(g) = g / (1 + exp(-g)) = g * sigmoid(g)
//   dgate = dh * up * sigmoid(g) * (1 + g * (1 - sigmoid(g))),  dup = dh * silu(g)
// One thread per group of N channels of one row (16-byte accesses when FF and the
// pointers allow); fp32 arithmetic, floatX storage.
#pragma once
#include <math.h>
#include "common.cuh"
#include "elementwise.cuh"

#define SWIGLU_THREADS 256

__device__ __forceinline__ float sigmoidf_(float g) { return 1.0f / (1.0f + expf(-g)); }

template <int N> __global__ void swiglu_forward_kernel(floatX* out, const floatX* fch, int BT, int FF) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * N;
    if (idx >= (size_t)BT * FF) return;
    size_t row = idx / FF;
    int j = (int)(idx % FF);  // FF % N == 0: a group never crosses a row
    const floatX* g = fch + row * 2 * FF + j;
    float gv[N], uv[N];
    load_vec<N>(gv, g);
    load_vec<N>(uv, g + FF);
#pragma unroll
    for (int k = 0; k < N; k++) gv[k] = gv[k] * sigmoidf_(gv[k]) * uv[k];
    store_vec<N>(out + idx, gv);
}

template <int N> __global__ void swiglu_backward_kernel(floatX* dfch, const floatX* fch, const floatX* dout, int BT, int FF) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * N;
    if (idx >= (size_t)BT * FF) return;
    size_t row = idx / FF;
    int j = (int)(idx % FF);
    size_t o = row * 2 * FF + j;
    float gv[N], uv[N], dh[N], dg[N], du[N];
    load_vec<N>(gv, fch + o);
    load_vec<N>(uv, fch + o + FF);
    load_vec<N>(dh, dout + idx);
#pragma unroll
    for (int k = 0; k < N; k++) {
        float sg = sigmoidf_(gv[k]);
        du[k] = dh[k] * gv[k] * sg;
        dg[k] = dh[k] * uv[k] * sg * (1.0f + gv[k] * (1.0f - sg));
    }
    store_vec<N>(dfch + o, dg);
    store_vec<N>(dfch + o + FF, du);
}

inline bool swiglu_vec(int FF, const void* a, const void* b, const void* c) {
    return FF % XVEC == 0 && is_aligned(a, 16) && is_aligned(b, 16) && (c == nullptr || is_aligned(c, 16));
}

// out (BT, FF) = silu(gate) * up of fch (BT, 2 FF)
void swiglu_forward(floatX* out, const floatX* fch, int BT, int FF, cudaStream_t s) {
    size_t n = (size_t)BT * FF;
    if (n == 0) return;
    if (swiglu_vec(FF, out, fch, nullptr))
        swiglu_forward_kernel<XVEC><<<ceil_div((long)n, (long)SWIGLU_THREADS * XVEC), SWIGLU_THREADS, 0, s>>>(out, fch, BT, FF);
    else swiglu_forward_kernel<1><<<ceil_div((long)n, SWIGLU_THREADS), SWIGLU_THREADS, 0, s>>>(out, fch, BT, FF);
    LAUNCH_CHECK();
}

// dfch (BT, 2 FF) OVERWRITTEN with the gradients of gate and up, from dout (BT, FF) = dh
void swiglu_backward(floatX* dfch, const floatX* fch, const floatX* dout, int BT, int FF, cudaStream_t s) {
    size_t n = (size_t)BT * FF;
    if (n == 0) return;
    if (swiglu_vec(FF, dfch, fch, dout))
        swiglu_backward_kernel<XVEC><<<ceil_div((long)n, (long)SWIGLU_THREADS * XVEC), SWIGLU_THREADS, 0, s>>>(dfch, fch, dout, BT, FF);
    else swiglu_backward_kernel<1><<<ceil_div((long)n, SWIGLU_THREADS), SWIGLU_THREADS, 0, s>>>(dfch, fch, dout, BT, FF);
    LAUNCH_CHECK();
}
