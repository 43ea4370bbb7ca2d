// cuda/encoder.cuh: token + position embedding, forward and backward (the Llama family has
// no position embedding: wpe and dwpe are null, rotary positions act in attention instead;
// its token embedding is multiplied by scale: 1, or Gemma 3's sqrt(C)).
// CPU twins: encoder_forward/backward in train_sft.c.
#pragma once
#include "common.cuh"
#include "elementwise.cuh"

// out[i] = wte[inputs[i]] + wpe[pos[i]] (wte[inputs[i]] * scale when wpe is null): thread per group of N channels of one row.
template <int N>
__global__ void encoder_forward_kernel(floatX* out, const int* inputs, const int* pos, const floatX* wte, const floatX* wpe, float scale, int BT,
                                       int C) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * N;
    if (idx >= (size_t)BT * C) return;
    int i = (int)(idx / C), c = (int)(idx % C);  // C % N == 0: a group never crosses a row
    float te[N], pe[N];
    load_vec<N>(te, wte + (size_t)inputs[i] * C + c);
    if (wpe) {
        load_vec<N>(pe, wpe + (size_t)pos[i] * C + c);
#pragma unroll
        for (int k = 0; k < N; k++) te[k] += pe[k];
    } else {
#pragma unroll
        for (int k = 0; k < N; k++) te[k] *= scale;
    }
    store_vec<N>(out + idx, te);
}

void encoder_forward(floatX* out, const int* inputs, const int* pos, const floatX* wte, const floatX* wpe, float scale, int BT, int C,
                     cudaStream_t s) {
    if (BT <= 0 || C <= 0) return;
    const int block = 256;
    long n = (long)BT * C;
    bool vec = C % XVEC == 0 && is_aligned(out, 16) && is_aligned(wte, 16) && is_aligned(wpe, 16);  // null is aligned
    if (vec) encoder_forward_kernel<XVEC><<<ceil_div(n, (long)block * XVEC), block, 0, s>>>(out, inputs, pos, wte, wpe, scale, BT, C);
    else encoder_forward_kernel<1><<<ceil_div(n, block), block, 0, s>>>(out, inputs, pos, wte, wpe, scale, BT, C);
    LAUNCH_CHECK();
}

// ----------------------------------------------------------------------------
// Backward: dwte[inputs[i]] += dout[i] and dwpe[pos[i]] += dout[i] (fp32 gradients); without
// wpe dwte[inputs[i]] += dout[i] * scale.
//
// Deterministic without atomics, in O(BT * C): the host groups the rows by key once
// per micro-batch (encoder_backward_plan: the distinct tokens, then the distinct
// positions, each with its rows in increasing order). Block (key j, channel chunk)
// sums dout over key j's rows in that order in fp32, one thread per channel, and
// adds the sum to the gradient row once. The order of the sum is the row order (as
// on the CPU), fixed whatever the grid.

#define ENC_BWD_THREADS 256

// The grouping of one micro-batch: keys[j] (j < num_keys[0]: tokens, then positions)
// has the rows rows[off[j]] .. rows[off[j + 1] - 1], increasing.
// Capacities: keys 2 BT, off 2 BT + 1, rows 2 BT.
struct EncoderPlan {
    int *keys, *off, *rows;
    int num_keys[2];  // distinct tokens, distinct positions
};

// Host: fills plan from the micro-batch's inputs and pos. slot_tok (V ints) and
// slot_pos (maxT ints) must hold -1 everywhere; they do again on return.
inline void encoder_backward_plan(EncoderPlan* plan, const int* inputs, const int* pos, int BT, int* slot_tok, int* slot_pos) {
    int nk = 0;
    plan->off[0] = 0;
    for (int t = 0; t < 2; t++) {
        const int* keys = t == 0 ? inputs : pos;
        int* slot = t == 0 ? slot_tok : slot_pos;
        int first = nk;
        for (int i = 0; i < BT; i++) {  // distinct keys in order of first occurrence, counted in off
            int k = keys[i];
            if (slot[k] < 0) {
                slot[k] = nk;
                plan->keys[nk] = k;
                plan->off[++nk] = 0;
            }
            plan->off[slot[k] + 1]++;
        }
        for (int j = first; j < nk; j++) plan->off[j + 1] += plan->off[j];
        for (int j = first; j < nk; j++) slot[plan->keys[j]] = plan->off[j];  // now: the next free index of the key
        for (int i = 0; i < BT; i++) plan->rows[slot[keys[i]]++] = i;
        for (int j = first; j < nk; j++) slot[plan->keys[j]] = -1;
        plan->num_keys[t] = nk - first;
    }
}

__global__ void __launch_bounds__(ENC_BWD_THREADS) encoder_backward_kernel(float* dwte, float* dwpe, const floatX* dout, const int* keys,
                                                                           const int* off, const int* rows, int num_tok_keys, float scale,
                                                                           int C) {
    const int j = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float* dst = j < num_tok_keys ? dwte : dwpe;
    float acc = 0.0f;
    for (int k = off[j]; k < off[j + 1]; k++) acc += to_float(dout[(size_t)rows[k] * C + c]);
    dst[(size_t)keys[j] * C + c] += j < num_tok_keys ? acc * scale : acc;
}

// plan: device copies of the arrays of a plan made by encoder_backward_plan (its num_keys as made);
// dwpe null (no position embedding): only the token keys, the first num_keys[0], are summed,
// each sum times scale (1 with wpe)
void encoder_backward(float* dwte, float* dwpe, const floatX* dout, const EncoderPlan* plan, float scale, int C, cudaStream_t s) {
    int nk = plan->num_keys[0] + (dwpe ? plan->num_keys[1] : 0);
    if (nk <= 0 || C <= 0) return;
    dim3 grid(nk, ceil_div(C, ENC_BWD_THREADS));
    encoder_backward_kernel<<<grid, ENC_BWD_THREADS, 0, s>>>(dwte, dwpe, dout, plan->keys, plan->off, plan->rows, plan->num_keys[0], scale, C);
    LAUNCH_CHECK();
}
