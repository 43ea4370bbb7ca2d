// cuda/rope.cuh: rotary position embeddings (Llama, Qwen2), forward and backward, in
// place on the q and k parts of the qkv activation. CPU twins: ref_rope_forward/backward
// (dev/cuda/cpu_ref.c).
//
// A row of qkv is [q (NH heads) | k (KVH heads) | v (KVH heads)], each head HS wide. For
// every head of q and k and i < HS/2, with angle = float(pos[row]) * inv_freq[i] (fp32,
// as transformers), x1 = x[i], x2 = x[i + HS/2] (the "rotate_half" pairing of Hugging Face
// checkpoints):
//   forward:  x[i] = x1 cos - x2 sin,  x[i + HS/2] = x2 cos + x1 sin
//   backward: the transpose, a rotation by -angle, applied in place to dq and dk (the
//             rotation is linear, so nothing from forward is needed)
// One thread per (row, head, i) pair: neighbouring threads touch neighbouring elements.
// inv_freq (HS/2 floats on the device) is model/model.h's rope_inv_freq.
#pragma once
#include <math.h>
#include "common.cuh"

#define ROPE_THREADS 256

// sign +1: forward rotation; -1: backward (by -angle)
__global__ void rope_kernel(floatX* qkv, const int* pos, const float* inv_freq, int BT, int heads, int qkv_width, int HS, float sign) {
    int half = HS / 2;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)BT * heads * half) return;
    int i = (int)(idx % half);
    size_t rh = idx / half;
    int h = (int)(rh % heads), row = (int)(rh / heads);
    float angle = (float)pos[row] * inv_freq[i];
    float c = cosf(angle), sn = sign * sinf(angle);
    floatX* x = qkv + (size_t)row * qkv_width + (size_t)h * HS;
    float x1 = to_float(x[i]), x2 = to_float(x[i + half]);
    x[i] = from_float<floatX>(x1 * c - x2 * sn);
    x[i + half] = from_float<floatX>(x2 * c + x1 * sn);
}

inline void rope_launch(floatX* qkv, const int* pos, const float* inv_freq, int BT, int NH, int KVH, int HS, float sign, cudaStream_t s) {
    int heads = NH + KVH;  // q's and k's heads are adjacent at the start of the row
    size_t n = (size_t)BT * heads * (HS / 2);
    if (n == 0) return;
    rope_kernel<<<ceil_div((long)n, ROPE_THREADS), ROPE_THREADS, 0, s>>>(qkv, pos, inv_freq, BT, heads, (NH + 2 * KVH) * HS, HS, sign);
    LAUNCH_CHECK();
}

// qkv (BT, (NH + 2 KVH) HS): q and k rotated in place by their rows' positions pos (BT)
void rope_forward(floatX* qkv, const int* pos, const float* inv_freq, int BT, int NH, int KVH, int HS, cudaStream_t s) {
    rope_launch(qkv, pos, inv_freq, BT, NH, KVH, HS, 1.0f, s);
}

// dqkv (BT, (NH + 2 KVH) HS): the gradients of rotated q and k become those of q and k
// before the rotation, in place (OVERWRITTEN); the v part is untouched
void rope_backward(floatX* dqkv, const int* pos, const float* inv_freq, int BT, int NH, int KVH, int HS, cudaStream_t s) {
    rope_launch(dqkv, pos, inv_freq, BT, NH, KVH, HS, -1.0f, s);
}
