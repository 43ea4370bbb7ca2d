// cuda/rmsnorm.cuh: RMSNorm forward and backward (Llama, Qwen2), and the fused residual
// add + RMSNorm forward. CPU twins: ref_rmsnorm_forward/backward (dev/cuda/cpu_ref.c).
//
//   y = x * rstd * w,  rstd = 1 / sqrt(mean(x^2) + eps)   (per row; rstd saved for backward)
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
                                       int rows, int C, float eps) {
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
        for (int k = 0; k < N; k++) v[k] = v[k] * s * wv[k];
        store_vec<N>(out + off + c, v);
    }
    if (lane == 0 && rstd) rstd[row] = s;
}

inline void rmsnorm_forward_launch(floatX* out, float* rstd, floatX* residual_out, const floatX* inp, const floatX* inp2, const floatX* w, int N,
                                   int C, float eps, bool fused, cudaStream_t s) {
    if (N <= 0 || C <= 0) return;
    bool vec = C % XVEC == 0 && is_aligned(out, 16) && is_aligned(inp, 16) && is_aligned(w, 16) &&
               (!fused || (is_aligned(inp2, 16) && is_aligned(residual_out, 16)));
    int grid = ceil_div(N, RMS_THREADS / 32);
    if (fused) {
        if (vec) rmsnorm_forward_kernel<XVEC, true><<<grid, RMS_THREADS, 0, s>>>(out, rstd, residual_out, inp, inp2, w, N, C, eps);
        else rmsnorm_forward_kernel<1, true><<<grid, RMS_THREADS, 0, s>>>(out, rstd, residual_out, inp, inp2, w, N, C, eps);
    } else {
        if (vec) rmsnorm_forward_kernel<XVEC, false><<<grid, RMS_THREADS, 0, s>>>(out, rstd, nullptr, inp, nullptr, w, N, C, eps);
        else rmsnorm_forward_kernel<1, false><<<grid, RMS_THREADS, 0, s>>>(out, rstd, nullptr, inp, nullptr, w, N, C, eps);
    }
    LAUNCH_CHECK();
}

// out (N x C) = RMSNorm of inp's rows with weight w; rstd (N floats) may be null
void rmsnorm_forward(floatX* out, float* rstd, const floatX* inp, const floatX* w, int N, int C, float eps, cudaStream_t s) {
    rmsnorm_forward_launch(out, rstd, nullptr, inp, nullptr, w, N, C, eps, false, s);
}

// residual_out = a + b (stored as floatX), out = RMSNorm(residual_out as stored): bit for bit
// rmsnorm_forward's output on residual_out. out may be b (in place).
void fused_residual_rmsnorm_forward(floatX* residual_out, floatX* out, float* rstd, const floatX* a, const floatX* b, const floatX* w, int N,
                                    int C, float eps, cudaStream_t s) {
    rmsnorm_forward_launch(out, rstd, residual_out, a, b, w, N, C, eps, true, s);
}

// ----------------------------------------------------------------------------
// Backward. With n = x * rstd and g = dy * w:
//   dx += rstd * (g - n * mean(g * n)),  dw += sum_rows dy * n

template <int N>
__global__ void rmsnorm_backward_dinp_kernel(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* w, const float* rstd, int rows,
                                             int C) {
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
        for (int k = 0; k < N; k++) gnsum += dy[k] * wv[k] * x[k] * s;
    }
    float gn_mean = warp_sum(gnsum) / (float)C;
    for (int c = lane * N; c < C; c += 32 * N) {
        float dy[N], x[N], wv[N], dx[N];
        load_vec<N>(dy, dout + off + c);
        load_vec<N>(x, inp + off + c);
        load_vec<N>(wv, w + c);
        load_vec<N>(dx, dinp + off + c);
#pragma unroll
        for (int k = 0; k < N; k++) dx[k] += s * (dy[k] * wv[k] - x[k] * s * gn_mean);
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

// dinp += ..., dw += sum_rows dy * x * rstd (fp32); scratch: rmsnorm_backward_scratch_floats(N, C) floats
void rmsnorm_backward(floatX* dinp, float* dw, float* scratch, const floatX* dout, const floatX* inp, const floatX* w, const float* rstd, int N,
                      int C, cudaStream_t s) {
    if (N <= 0 || C <= 0) return;
    bool vec = C % XVEC == 0 && is_aligned(dinp, 16) && is_aligned(dout, 16) && is_aligned(inp, 16) && is_aligned(w, 16);
    int grid = ceil_div(N, RMS_THREADS / 32);
    if (vec) rmsnorm_backward_dinp_kernel<XVEC><<<grid, RMS_THREADS, 0, s>>>(dinp, dout, inp, w, rstd, N, C);
    else rmsnorm_backward_dinp_kernel<1><<<grid, RMS_THREADS, 0, s>>>(dinp, dout, inp, w, rstd, N, C);
    LAUNCH_CHECK();
    int chunks = ceil_div(N, RMS_BWD_ROWS);
    dim3 pgrid(ceil_div(C, COLSUM_THREADS), chunks < COLSUM_MAX_GRID_Y ? chunks : COLSUM_MAX_GRID_Y);
    rmsnorm_backward_partial_kernel<<<pgrid, COLSUM_THREADS, 0, s>>>(scratch, dout, inp, rstd, N, C);
    LAUNCH_CHECK();
    colsum_final(dw, scratch, chunks, C, s);
}
