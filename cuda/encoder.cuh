// cuda/encoder.cuh: token + position embedding, forward and backward.
// CPU twins: encoder_forward/backward in train_sft.c.
#pragma once
#include "common.cuh"
#include "elementwise.cuh"

// out[i] = wte[inputs[i]] + wpe[pos[i]]: thread per group of N channels of one row.
template <int N>
__global__ void encoder_forward_kernel(floatX* out, const int* inputs, const int* pos, const floatX* wte, const floatX* wpe, int BT, int C) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * N;
    if (idx >= (size_t)BT * C) return;
    int i = (int)(idx / C), c = (int)(idx % C);  // C % N == 0: a group never crosses a row
    float te[N], pe[N];
    load_vec<N>(te, wte + (size_t)inputs[i] * C + c);
    load_vec<N>(pe, wpe + (size_t)pos[i] * C + c);
#pragma unroll
    for (int k = 0; k < N; k++) te[k] += pe[k];
    store_vec<N>(out + idx, te);
}

void encoder_forward(floatX* out, const int* inputs, const int* pos, const floatX* wte, const floatX* wpe, int BT, int C, cudaStream_t s) {
    if (BT <= 0 || C <= 0) return;
    const int block = 256;
    long n = (long)BT * C;
    bool vec = C % XVEC == 0 && is_aligned(out, 16) && is_aligned(wte, 16) && is_aligned(wpe, 16);
    if (vec) encoder_forward_kernel<XVEC><<<ceil_div(n, (long)block * XVEC), block, 0, s>>>(out, inputs, pos, wte, wpe, BT, C);
    else encoder_forward_kernel<1><<<ceil_div(n, block), block, 0, s>>>(out, inputs, pos, wte, wpe, BT, C);
    LAUNCH_CHECK();
}

// ----------------------------------------------------------------------------
// Backward: dwte[inputs[i]] += dout[i] and dwpe[pos[i]] += dout[i].
//
// Deterministic without atomics or scratch: the row i that holds the FIRST
// occurrence of a key (token or position) owns that key's gradient row. Block
// (i, channel chunk y, table z) scans the keys in tiles of ENC_BWD_THREADS: if a
// tile holds the key at some j < i, the block leaves (another block owns it);
// otherwise the matching j of the tile are compacted in increasing order into
// shared memory (warp ballots + a prefix over the warps), and each thread, one
// channel each, adds dout[j][c] for them into an fp32 sum. At the end the owner
// adds the sum to the fp32 gradient once. The order of the sum is the row order
// (as on the CPU), fixed whatever the grid.

#define ENC_BWD_THREADS 256

__global__ void __launch_bounds__(ENC_BWD_THREADS)
    encoder_backward_kernel(float* dwte, float* dwpe, const floatX* dout, const int* inputs, const int* pos, int BT, int C) {
    __shared__ int match_rows[ENC_BWD_THREADS];
    __shared__ int warp_matches[ENC_BWD_THREADS / 32];
    const int* keys = blockIdx.z == 0 ? inputs : pos;
    float* dst = blockIdx.z == 0 ? dwte : dwpe;
    const int i = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    const int key = keys[i];
    float acc = 0.0f;
    for (int j0 = 0; j0 < BT; j0 += blockDim.x) {
        int j = j0 + threadIdx.x;
        bool match = j < BT && keys[j] == key;
        // this barrier also ends the previous tile's reads of match_rows/warp_matches
        if (__syncthreads_or(match && j < i)) return;  // uniform: an earlier row owns the key
        unsigned ballot = __ballot_sync(0xffffffffu, match);
        if (lane == 0) warp_matches[warp] = __popc(ballot);
        __syncthreads();
        int before = 0, total = 0;
        for (int w = 0; w < nwarps; w++) {
            int cnt = warp_matches[w];
            before += w < warp ? cnt : 0;
            total += cnt;
        }
        if (match) match_rows[before + __popc(ballot & ((1u << lane) - 1u))] = j;
        __syncthreads();
        if (c < C)
            for (int k = 0; k < total; k++) acc += to_float(dout[(size_t)match_rows[k] * C + c]);
    }
    if (c < C) {
        dst[(size_t)key * C + c] += acc;
    }
}

void encoder_backward(float* dwte, float* dwpe, const floatX* dout, const int* inputs, const int* pos, int BT, int C, cudaStream_t s) {
    if (BT <= 0 || C <= 0) return;
    dim3 grid(BT, ceil_div(C, ENC_BWD_THREADS), 2);
    encoder_backward_kernel<<<grid, ENC_BWD_THREADS, 0, s>>>(dwte, dwpe, dout, inputs, pos, BT, C);
    LAUNCH_CHECK();
}
