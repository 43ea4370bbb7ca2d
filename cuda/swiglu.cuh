// cuda/swiglu.cuh: the gated activations of the Llama-family MLP, SwiGLU and GeGLU (Gemma 3),
// forward and backward, chosen by act (MLP_SWIGLU, MLP_GEGLU of model/model.h). CPU twins:
// ref_swiglu_forward/backward, ref_geglu_forward/backward (dev/cuda/cpu_ref.c).
//
// A row of fch is [gate (FF) | up (FF)] (gate_proj and up_proj stacked in one product);
//   h = act(gate) * up,  dgate = dh * up * act'(gate),  dup = dh * act(gate)
//   SwiGLU: act(g) = silu(g) = g * sigmoid(g),  act'(g) = sigmoid(g) * (1 + g * (1 - sigmoid(g)))
//   GeGLU:  act(g) = gelu_tanh(g) = 0.5 g (1 + tanh(u)),  u = sqrt(2/pi) (g + 0.044715 g^3),
//           act'(g) = 0.5 (1 + tanh(u)) + 0.5 g (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 g^2)
// One thread per group of N channels of one row (16-byte accesses when FF and the
// pointers allow); fp32 arithmetic, floatX storage.
#pragma once
#include <math.h>
#include "../model/model.h"
#include "common.cuh"
#include "elementwise.cuh"

#define SWIGLU_THREADS 256

__device__ __forceinline__ float sigmoidf_(float g) { return 1.0f / (1.0f + expf(-g)); }

// act(g) and act'(g) of the gate
template <int ACT> __device__ __forceinline__ void gate_act(float g, float* a, float* da) {
    if (ACT == MLP_GEGLU) {
        float th = tanhf(GELU_SQRT_2_OVER_PI * (g + 0.044715f * g * g * g));
        *a = 0.5f * g * (1.0f + th);
        *da = 0.5f * (1.0f + th) + 0.5f * g * (1.0f - th * th) * GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * 0.044715f * g * g);
    } else {
        float sg = sigmoidf_(g);
        *a = g * sg;
        *da = sg * (1.0f + g * (1.0f - sg));
    }
}

template <int N, int ACT> __global__ void glu_forward_kernel(floatX* out, const floatX* fch, int BT, int FF) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * N;
    if (idx >= (size_t)BT * FF) return;
    size_t row = idx / FF;
    int j = (int)(idx % FF);  // FF % N == 0: a group never crosses a row
    const floatX* g = fch + row * 2 * FF + j;
    float gv[N], uv[N];
    load_vec<N>(gv, g);
    load_vec<N>(uv, g + FF);
#pragma unroll
    for (int k = 0; k < N; k++) {
        float a, da;
        gate_act<ACT>(gv[k], &a, &da);
        gv[k] = a * uv[k];
    }
    store_vec<N>(out + idx, gv);
}

template <int N, int ACT> __global__ void glu_backward_kernel(floatX* dfch, const floatX* fch, const floatX* dout, int BT, int FF) {
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
        float a, da;
        gate_act<ACT>(gv[k], &a, &da);
        du[k] = dh[k] * a;
        dg[k] = dh[k] * uv[k] * da;
    }
    store_vec<N>(dfch + o, dg);
    store_vec<N>(dfch + o + FF, du);
}

inline bool glu_vec(int FF, const void* a, const void* b, const void* c) {
    return FF % XVEC == 0 && is_aligned(a, 16) && is_aligned(b, 16) && (c == nullptr || is_aligned(c, 16));
}

template <int ACT> void glu_forward_act(floatX* out, const floatX* fch, int BT, int FF, cudaStream_t s) {
    size_t n = (size_t)BT * FF;
    if (glu_vec(FF, out, fch, nullptr))
        glu_forward_kernel<XVEC, ACT><<<ceil_div((long)n, (long)SWIGLU_THREADS * XVEC), SWIGLU_THREADS, 0, s>>>(out, fch, BT, FF);
    else glu_forward_kernel<1, ACT><<<ceil_div((long)n, SWIGLU_THREADS), SWIGLU_THREADS, 0, s>>>(out, fch, BT, FF);
    LAUNCH_CHECK();
}

template <int ACT> void glu_backward_act(floatX* dfch, const floatX* fch, const floatX* dout, int BT, int FF, cudaStream_t s) {
    size_t n = (size_t)BT * FF;
    if (glu_vec(FF, dfch, fch, dout))
        glu_backward_kernel<XVEC, ACT><<<ceil_div((long)n, (long)SWIGLU_THREADS * XVEC), SWIGLU_THREADS, 0, s>>>(dfch, fch, dout, BT, FF);
    else glu_backward_kernel<1, ACT><<<ceil_div((long)n, SWIGLU_THREADS), SWIGLU_THREADS, 0, s>>>(dfch, fch, dout, BT, FF);
    LAUNCH_CHECK();
}

// out (BT, FF) = act(gate) * up of fch (BT, 2 FF); act MLP_SWIGLU or MLP_GEGLU
void glu_forward(floatX* out, const floatX* fch, int BT, int FF, int act, cudaStream_t s) {
    if ((size_t)BT * FF == 0) return;
    if (act == MLP_GEGLU) glu_forward_act<MLP_GEGLU>(out, fch, BT, FF, s);
    else glu_forward_act<MLP_SWIGLU>(out, fch, BT, FF, s);
}

// dfch (BT, 2 FF) OVERWRITTEN with the gradients of gate and up, from dout (BT, FF) = dh
void glu_backward(floatX* dfch, const floatX* fch, const floatX* dout, int BT, int FF, int act, cudaStream_t s) {
    if ((size_t)BT * FF == 0) return;
    if (act == MLP_GEGLU) glu_backward_act<MLP_GEGLU>(dfch, fch, dout, BT, FF, s);
    else glu_backward_act<MLP_SWIGLU>(dfch, fch, dout, BT, FF, s);
}
