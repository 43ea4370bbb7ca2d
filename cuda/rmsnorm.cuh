// cuda/rmsnorm.cuh: RMSNorm forward and backward (the Llama family), the fused residual
// add + RMSNorm forward, and the per-head q/k RMSNorm (Qwen3, Gemma 3). CPU twins:
// ref_rmsnorm_forward/backward, ref_qk_norm_forward/backward (dev/cuda/cpu_ref.c).
//
//   y = x * rstd * (w + one),  rstd = 1 / sqrt(mean(x^2) + eps)   (per row; rstd saved for backward)
// one = 0, or 1 where the norms scale by 1 + w (Gemma 3; norm_one of train_sft.c).
//
// Laid out as cuda/layernorm.cuh: forward and the backward's dinp by one warp per row
// (8 rows per 256-thread block, 16-byte accesses when C allows); the weight gradient
// deterministically by fp32 partial sums per chunk of RMS_BWD_ROWS rows (thread per
// channel, rows in order), then colsum_final sums the chunks (a fixed order) and adds once.
#pragma once
#include "common.cuh"
#include "elementwise.cuh"

#define RMS_THREADS 256
#define RMS_BWD_ROWS 32

// One warp per row. FUSED: the input row is inp + inp2 rounded to floatX, first stored to
// residual_out (re-read below by the same lane, so out may be inp2: each lane reads its
// values of the row before the warp_sum and writes out only after it).
template <int N, bool FUSED>
__global__ void rmsnorm_forward_kernel(floatX* out, float* rstd, floatX* residual_out, const floatX* inp, const floatX* inp2, const floatX* w,
                                       int rows, int C, float eps, float one) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;  // the whole warp leaves together
    size_t off = (size_t)row * C;
    const floatX* x = FUSED ? residual_out + off : inp + off;
    float sq = 0.0f;
    for (int c = lane * N; c < C; c += 32 * N) {
        float v[N];
        norm_input_load<N, FUSED>(v, residual_out, inp, inp2, off + c);
#pragma unroll
        for (int k = 0; k < N; k++) sq += v[k] * v[k];
    }
    float s = 1.0f / sqrtf(warp_sum(sq) / (float)C + eps);
    for (int c = lane * N; c < C; c += 32 * N) {
        float v[N], wv[N];
        load_vec<N>(v, x + c);
        load_vec<N>(wv, w + c);
#pragma unroll
        for (int k = 0; k < N; k++) v[k] = v[k] * s * (wv[k] + one);
        store_vec<N>(out + off + c, v);
    }
    if (lane == 0 && rstd) rstd[row] = s;
}

inline void rmsnorm_forward_launch(floatX* out, float* rstd, floatX* residual_out, const floatX* inp, const floatX* inp2, const floatX* w, int N,
                                   int C, float eps, float one, bool fused, cudaStream_t s) {
    if (N <= 0 || C <= 0) return;
    bool vec = C % XVEC == 0 && is_aligned(out, 16) && is_aligned(inp, 16) && is_aligned(w, 16) &&
               (!fused || (is_aligned(inp2, 16) && is_aligned(residual_out, 16)));
    int grid = ceil_div(N, RMS_THREADS / 32);
    if (fused) {
        if (vec) rmsnorm_forward_kernel<XVEC, true><<<grid, RMS_THREADS, 0, s>>>(out, rstd, residual_out, inp, inp2, w, N, C, eps, one);
        else rmsnorm_forward_kernel<1, true><<<grid, RMS_THREADS, 0, s>>>(out, rstd, residual_out, inp, inp2, w, N, C, eps, one);
    } else {
        if (vec) rmsnorm_forward_kernel<XVEC, false><<<grid, RMS_THREADS, 0, s>>>(out, rstd, nullptr, inp, nullptr, w, N, C, eps, one);
        else rmsnorm_forward_kernel<1, false><<<grid, RMS_THREADS, 0, s>>>(out, rstd, nullptr, inp, nullptr, w, N, C, eps, one);
    }
    LAUNCH_CHECK();
}

// out (N x C) = RMSNorm of inp's rows with weight w (w + one); rstd (N floats) may be null
void rmsnorm_forward(floatX* out, float* rstd, const floatX* inp, const floatX* w, int N, int C, float eps, float one, cudaStream_t s) {
    rmsnorm_forward_launch(out, rstd, nullptr, inp, nullptr, w, N, C, eps, one, false, s);
}

// residual_out = a + b (stored as floatX), out = RMSNorm(residual_out as stored): bit for bit
// rmsnorm_forward's output on residual_out. out may be b (in place).
void fused_residual_rmsnorm_forward(floatX* residual_out, floatX* out, float* rstd, const floatX* a, const floatX* b, const floatX* w, int N,
                                    int C, float eps, float one, cudaStream_t s) {
    rmsnorm_forward_launch(out, rstd, residual_out, a, b, w, N, C, eps, one, true, s);
}

// ----------------------------------------------------------------------------
// Backward. With n = x * rstd and g = dy * (w + one):
//   dx += rstd * (g - n * mean(g * n)),  dw += sum_rows dy * n

template <int N>
__global__ void rmsnorm_backward_dinp_kernel(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* w, const float* rstd, int rows,
                                             int C, float one) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    size_t off = (size_t)row * C;
    float s = rstd[row];
    float gnsum = 0.0f;
    for (int c = lane * N; c < C; c += 32 * N) {
        float dy[N], x[N], wv[N];
        load_vec<N>(dy, dout + off + c);
        load_vec<N>(x, inp + off + c);
        load_vec<N>(wv, w + c);
#pragma unroll
        for (int k = 0; k < N; k++) gnsum += dy[k] * (wv[k] + one) * x[k] * s;
    }
    float gn_mean = warp_sum(gnsum) / (float)C;
    for (int c = lane * N; c < C; c += 32 * N) {
        float dy[N], x[N], wv[N], dx[N];
        load_vec<N>(dy, dout + off + c);
        load_vec<N>(x, inp + off + c);
        load_vec<N>(wv, w + c);
        load_vec<N>(dx, dinp + off + c);
#pragma unroll
        for (int k = 0; k < N; k++) dx[k] += s * (dy[k] * (wv[k] + one) - x[k] * s * gn_mean);
        store_vec<N>(dinp + off + c, dx);
    }
}

// partial[k * C + c] = sum over the rows of chunk k of dy * x * rstd
__global__ void rmsnorm_backward_partial_kernel(float* partial, const floatX* dout, const floatX* inp, const float* rstd, int rows, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int chunks = (rows + RMS_BWD_ROWS - 1) / RMS_BWD_ROWS;
    for (int k = blockIdx.y; k < chunks; k += gridDim.y) {
        int r0 = k * RMS_BWD_ROWS, r1 = min(rows, r0 + RMS_BWD_ROWS);
        float sw = 0.0f;
#pragma unroll 4
        for (int r = r0; r < r1; r++) sw += to_float(dout[(size_t)r * C + c]) * to_float(inp[(size_t)r * C + c]) * rstd[r];
        partial[(size_t)k * C + c] = sw;
    }
}

size_t rmsnorm_backward_scratch_floats(int N, int C) { return (size_t)ceil_div(N, RMS_BWD_ROWS) * C; }

// dinp += ..., dw += sum_rows dy * x * rstd (fp32); scratch: rmsnorm_backward_scratch_floats(N, C) floats;
// dw null: a frozen norm (LoRA), only dinp
void rmsnorm_backward(floatX* dinp, float* dw, float* scratch, const floatX* dout, const floatX* inp, const floatX* w, const float* rstd, int N,
                      int C, float one, cudaStream_t s) {
    if (N <= 0 || C <= 0) return;
    bool vec = C % XVEC == 0 && is_aligned(dinp, 16) && is_aligned(dout, 16) && is_aligned(inp, 16) && is_aligned(w, 16);
    int grid = ceil_div(N, RMS_THREADS / 32);
    if (vec) rmsnorm_backward_dinp_kernel<XVEC><<<grid, RMS_THREADS, 0, s>>>(dinp, dout, inp, w, rstd, N, C, one);
    else rmsnorm_backward_dinp_kernel<1><<<grid, RMS_THREADS, 0, s>>>(dinp, dout, inp, w, rstd, N, C, one);
    LAUNCH_CHECK();
    if (!dw) return;
    int chunks = ceil_div(N, RMS_BWD_ROWS);
    dim3 pgrid(ceil_div(C, COLSUM_THREADS), chunks < COLSUM_MAX_GRID_Y ? chunks : COLSUM_MAX_GRID_Y);
    rmsnorm_backward_partial_kernel<<<pgrid, COLSUM_THREADS, 0, s>>>(scratch, dout, inp, rstd, N, C);
    LAUNCH_CHECK();
    colsum_final(dw, scratch, chunks, C, s);
}

// ----------------------------------------------------------------------------
// Per-head RMSNorm of q and k (Qwen3, Gemma 3: q_norm, k_norm), before RoPE, in place on
// the first H = NH + KVH heads (HS wide) of every qkv row [q (NH) | k (KVH) | v (KVH)]:
//   x = x * rstd * (w + one),  w = wq on the query heads, wk on the key heads.
// The heads before the norm go to raw (BT, H HS) (floatX: the values qkv held, exactly)
// and their rstd to rstd (BT, H), for the backward pass. One warp per (row, head).

__global__ void qk_norm_forward_kernel(floatX* qkv, floatX* raw, float* rstd, const floatX* wq, const floatX* wk, int BT, int NH, int KVH,
                                       int HS, float eps, float one) {
    int H = NH + KVH, unit = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (unit >= BT * H) return;  // the whole warp leaves together
    int r = unit / H, h = unit % H;
    floatX* x = qkv + (size_t)r * (NH + 2 * KVH) * HS + (size_t)h * HS;
    floatX* xr = raw + (size_t)unit * HS;
    const floatX* w = h < NH ? wq : wk;
    float sq = 0.0f;
    for (int i = lane; i < HS; i += 32) {  // each lane reads and writes only its own channels
        float v = to_float(x[i]);
        sq += v * v;
        xr[i] = x[i];
    }
    float s = 1.0f / sqrtf(warp_sum(sq) / (float)HS + eps);
    for (int i = lane; i < HS; i += 32) x[i] = from_float<floatX>(to_float(xr[i]) * s * (to_float(w[i]) + one));
    if (lane == 0) rstd[unit] = s;
}

void qk_norm_forward(floatX* qkv, floatX* raw, float* rstd, const floatX* wq, const floatX* wk, int BT, int NH, int KVH, int HS, float eps,
                     float one, cudaStream_t s) {
    long units = (long)BT * (NH + KVH);
    if (units <= 0) return;
    qk_norm_forward_kernel<<<ceil_div(units, (long)(RMS_THREADS / 32)), RMS_THREADS, 0, s>>>(qkv, raw, rstd, wq, wk, BT, NH, KVH, HS, eps, one);
    LAUNCH_CHECK();
}

// Backward, with n = raw * rstd and g = dy * (w + one) per head: dy (dqkv's q and k heads)
// is OVERWRITTEN by dx = rstd * (g - n * mean(g * n)); v's part is untouched.
__global__ void qk_norm_backward_dinp_kernel(floatX* dqkv, const floatX* raw, const float* rstd, const floatX* wq, const floatX* wk, int BT, int NH,
                                             int KVH, int HS, float one) {
    int H = NH + KVH, unit = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (unit >= BT * H) return;
    int r = unit / H, h = unit % H;
    floatX* d = dqkv + (size_t)r * (NH + 2 * KVH) * HS + (size_t)h * HS;
    const floatX* x = raw + (size_t)unit * HS;
    const floatX* w = h < NH ? wq : wk;
    float sc = rstd[unit], gnsum = 0.0f;
    for (int i = lane; i < HS; i += 32) gnsum += to_float(d[i]) * (to_float(w[i]) + one) * to_float(x[i]) * sc;
    float gn_mean = warp_sum(gnsum) / (float)HS;
    for (int i = lane; i < HS; i += 32)
        d[i] = from_float<floatX>(sc * (to_float(d[i]) * (to_float(w[i]) + one) - to_float(x[i]) * sc * gn_mean));
}

// partial[(kind * chunks + k) * HS + i] (kind 0: q heads, 1: k heads) = sum over the rows of
// chunk k, and within a row over the kind's heads in order, of dy * raw * rstd
__global__ void qk_norm_backward_partial_kernel(float* partial, const floatX* dqkv, const floatX* raw, const float* rstd, int BT, int NH,
                                                int KVH, int HS) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= 2 * HS) return;
    int kind = c / HS, i = c % HS, H = NH + KVH, h0 = kind ? NH : 0, h1 = kind ? H : NH, QKV = (NH + 2 * KVH) * HS;
    int chunks = (BT + RMS_BWD_ROWS - 1) / RMS_BWD_ROWS;
    for (int k = blockIdx.y; k < chunks; k += gridDim.y) {
        int r0 = k * RMS_BWD_ROWS, r1 = min(BT, r0 + RMS_BWD_ROWS);
        float sw = 0.0f;
        for (int r = r0; r < r1; r++)
            for (int h = h0; h < h1; h++) {
                size_t u = (size_t)r * H + h;
                sw += to_float(dqkv[(size_t)r * QKV + (size_t)h * HS + i]) * to_float(raw[u * HS + i]) * rstd[u];
            }
        partial[((size_t)kind * chunks + k) * HS + i] = sw;
    }
}

size_t qk_norm_backward_scratch_floats(int BT, int HS) { return 2 * (size_t)ceil_div(BT, RMS_BWD_ROWS) * HS; }

// dqkv's q and k heads: the gradient after the norms becomes the one before (in place);
// dwq, dwk (HS each, fp32) += the weight gradients, deterministic (partial sums in row order,
// then colsum_final); scratch: qk_norm_backward_scratch_floats(BT, HS) floats; dwq and dwk null:
// frozen norms (LoRA), only the input gradient
void qk_norm_backward(floatX* dqkv, float* dwq, float* dwk, float* scratch, const floatX* raw, const float* rstd, const floatX* wq,
                      const floatX* wk, int BT, int NH, int KVH, int HS, float one, cudaStream_t s) {
    if (BT <= 0) return;
    int chunks = ceil_div(BT, RMS_BWD_ROWS);
    dim3 pgrid(ceil_div(2 * HS, COLSUM_THREADS), chunks < COLSUM_MAX_GRID_Y ? chunks : COLSUM_MAX_GRID_Y);
    if (dwq) {
        qk_norm_backward_partial_kernel<<<pgrid, COLSUM_THREADS, 0, s>>>(scratch, dqkv, raw, rstd, BT, NH, KVH, HS);  // reads dy before it is overwritten
        LAUNCH_CHECK();
        colsum_final(dwq, scratch, chunks, HS, s);
        colsum_final(dwk, scratch + (size_t)chunks * HS, chunks, HS, s);
    }
    long units = (long)BT * (NH + KVH);
    qk_norm_backward_dinp_kernel<<<ceil_div(units, (long)(RMS_THREADS / 32)), RMS_THREADS, 0, s>>>(dqkv, raw, rstd, wq, wk, BT, NH, KVH, HS, one);
    LAUNCH_CHECK();
}
