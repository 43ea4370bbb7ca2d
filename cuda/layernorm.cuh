// cuda/layernorm.cuh: layer normalization forward and backward, and the fused
// residual add + layernorm forward. CPU twins: layernorm_forward/backward in train_sft.c.
//
// Forward: one warp per row (8 rows per 256-thread block); the warp reads the row
// three times (mean, variance, output; the re-reads hit L1), with 16-byte accesses
// when C is a multiple of the vector width and the pointers are aligned.
// Backward: dinp by one warp per row; dw and db (fp32 gradients, sums over rows) deterministically:
// fp32 partial sums per chunk of LN_BWD_ROWS rows into scratch (thread per channel,
// rows in order), then a thread per channel sums the chunks in order and adds once.
#pragma once
#include "common.cuh"
#include "elementwise.cuh"

#define LN_THREADS 256
#define LN_BWD_ROWS 32

// y = (x - mean) / sqrt(var + eps) * w + b, one warp per row.
// FUSED: the input row is inp + inp2 rounded to floatX, first stored to residual_out.
template <int N, bool FUSED>
__global__ void layernorm_forward_kernel(floatX* out, float* mean, float* rstd, floatX* residual_out, const floatX* inp, const floatX* inp2,
                                         const floatX* w, const floatX* b, int rows, int C, float eps) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;  // the whole warp leaves together
    size_t off = (size_t)row * C;
    const floatX* x = FUSED ? residual_out + off : inp + off;
    float sum = 0.0f;
    for (int c = lane * N; c < C; c += 32 * N) {
        float v[N];
        norm_input_load<N, FUSED>(v, residual_out, inp, inp2, off + c);
#pragma unroll
        for (int k = 0; k < N; k++) sum += v[k];
    }
    float m = warp_sum(sum) / (float)C;
    float sq = 0.0f;
    for (int c = lane * N; c < C; c += 32 * N) {
        float v[N];
        load_vec<N>(v, x + c);
#pragma unroll
        for (int k = 0; k < N; k++) {
            float d = v[k] - m;
            sq += d * d;
        }
    }
    float s = 1.0f / sqrtf(warp_sum(sq) / (float)C + eps);
    for (int c = lane * N; c < C; c += 32 * N) {
        float v[N], wv[N], bv[N];
        load_vec<N>(v, x + c);
        load_vec<N>(wv, w + c);
        load_vec<N>(bv, b + c);
#pragma unroll
        for (int k = 0; k < N; k++) v[k] = (v[k] - m) * s * wv[k] + bv[k];
        store_vec<N>(out + off + c, v);
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = s;
    }
}

inline void layernorm_forward_launch(floatX* out, float* mean, float* rstd, floatX* residual_out, const floatX* inp, const floatX* inp2,
                                     const floatX* w, const floatX* b, int N, int C, float eps, bool fused, cudaStream_t s) {
    if (N <= 0 || C <= 0) return;
    bool vec = C % XVEC == 0 && is_aligned(out, 16) && is_aligned(inp, 16) && is_aligned(w, 16) && is_aligned(b, 16) &&
               (!fused || (is_aligned(inp2, 16) && is_aligned(residual_out, 16)));
    int grid = ceil_div(N, LN_THREADS / 32);
    if (fused) {
        if (vec) layernorm_forward_kernel<XVEC, true><<<grid, LN_THREADS, 0, s>>>(out, mean, rstd, residual_out, inp, inp2, w, b, N, C, eps);
        else layernorm_forward_kernel<1, true><<<grid, LN_THREADS, 0, s>>>(out, mean, rstd, residual_out, inp, inp2, w, b, N, C, eps);
    } else {
        if (vec) layernorm_forward_kernel<XVEC, false><<<grid, LN_THREADS, 0, s>>>(out, mean, rstd, nullptr, inp, nullptr, w, b, N, C, eps);
        else layernorm_forward_kernel<1, false><<<grid, LN_THREADS, 0, s>>>(out, mean, rstd, nullptr, inp, nullptr, w, b, N, C, eps);
    }
    LAUNCH_CHECK();
}

// out (N x C) = layernorm of inp's rows; mean and rstd (N floats each) may be null
void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w, const floatX* b, int N, int C, float eps,
                       cudaStream_t s) {
    layernorm_forward_launch(out, mean, rstd, nullptr, inp, nullptr, w, b, N, C, eps, false, s);
}

// residual_out = a + b (stored as floatX), ln_out = layernorm(residual_out as stored): bit for bit
// layernorm_forward's output on residual_out. ln_out may be b (in place): each row's warp reads
// the row of b before its warp_sum and writes ln_out only after it.
void fused_residual_layernorm_forward(floatX* residual_out, floatX* ln_out, float* mean, float* rstd, const floatX* a, const floatX* b,
                                      const floatX* w, const floatX* bias, int N, int C, float eps, cudaStream_t s) {
    layernorm_forward_launch(ln_out, mean, rstd, residual_out, a, b, w, bias, N, C, eps, true, s);
}

// ----------------------------------------------------------------------------
// Backward. With n = (x - mean) * rstd and g = dy * w:
//   dx += rstd * (g - mean(g) - n * mean(g * n)),  dw += sum_rows dy * n,  db += sum_rows dy

template <int N>
__global__ void layernorm_backward_dinp_kernel(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* w, const float* mean,
                                               const float* rstd, int rows, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    size_t off = (size_t)row * C;
    float m = mean[row], s = rstd[row];
    float gsum = 0.0f, gnsum = 0.0f;
    for (int c = lane * N; c < C; c += 32 * N) {
        float dy[N], x[N], wv[N];
        load_vec<N>(dy, dout + off + c);
        load_vec<N>(x, inp + off + c);
        load_vec<N>(wv, w + c);
#pragma unroll
        for (int k = 0; k < N; k++) {
            float g = dy[k] * wv[k];
            gsum += g;
            gnsum += g * (x[k] - m) * s;
        }
    }
    float g_mean = warp_sum(gsum) / (float)C, gn_mean = warp_sum(gnsum) / (float)C;
    for (int c = lane * N; c < C; c += 32 * N) {
        float dy[N], x[N], wv[N], dx[N];
        load_vec<N>(dy, dout + off + c);
        load_vec<N>(x, inp + off + c);
        load_vec<N>(wv, w + c);
        load_vec<N>(dx, dinp + off + c);
#pragma unroll
        for (int k = 0; k < N; k++) dx[k] += s * (dy[k] * wv[k] - g_mean - (x[k] - m) * s * gn_mean);
        store_vec<N>(dinp + off + c, dx);
    }
}

// partial[k * C + c] = sum over rows of chunk k of dy * n; partial[(chunks + k) * C + c] = same of dy
__global__ void layernorm_backward_partial_kernel(float* partial, const floatX* dout, const floatX* inp, const float* mean, const float* rstd,
                                                  int rows, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int chunks = (rows + LN_BWD_ROWS - 1) / LN_BWD_ROWS;
    for (int k = blockIdx.y; k < chunks; k += gridDim.y) {
        int r0 = k * LN_BWD_ROWS, r1 = min(rows, r0 + LN_BWD_ROWS);
        float sw = 0.0f, sb = 0.0f;
#pragma unroll 4
        for (int r = r0; r < r1; r++) {
            float dy = to_float(dout[(size_t)r * C + c]);
            float x = to_float(inp[(size_t)r * C + c]);
            sw += dy * (x - mean[r]) * rstd[r];
            sb += dy;
        }
        partial[(size_t)k * C + c] = sw;
        partial[(size_t)(chunks + k) * C + c] = sb;
    }
}

size_t layernorm_backward_scratch_floats(int N, int C) { return 2 * (size_t)ceil_div(N, LN_BWD_ROWS) * C; }

// dinp += ..., dw += sum_rows dy*n, db += sum_rows dy; scratch: layernorm_backward_scratch_floats(N, C) floats.
// dw and db null: a frozen norm (LoRA), only dinp
void layernorm_backward(floatX* dinp, float* dw, float* db, float* scratch, const floatX* dout, const floatX* inp, const floatX* w,
                        const float* mean, const float* rstd, int N, int C, cudaStream_t s) {
    if (N <= 0 || C <= 0) return;
    bool vec = C % XVEC == 0 && is_aligned(dinp, 16) && is_aligned(dout, 16) && is_aligned(inp, 16) && is_aligned(w, 16);
    int grid = ceil_div(N, LN_THREADS / 32);
    if (vec) layernorm_backward_dinp_kernel<XVEC><<<grid, LN_THREADS, 0, s>>>(dinp, dout, inp, w, mean, rstd, N, C);
    else layernorm_backward_dinp_kernel<1><<<grid, LN_THREADS, 0, s>>>(dinp, dout, inp, w, mean, rstd, N, C);
    LAUNCH_CHECK();
    if (!dw) return;
    int chunks = ceil_div(N, LN_BWD_ROWS);
    dim3 pgrid(ceil_div(C, COLSUM_THREADS), chunks < COLSUM_MAX_GRID_Y ? chunks : COLSUM_MAX_GRID_Y);
    layernorm_backward_partial_kernel<<<pgrid, COLSUM_THREADS, 0, s>>>(scratch, dout, inp, mean, rstd, N, C);
    LAUNCH_CHECK();
    colsum_final(dw, scratch, chunks, C, s);
    colsum_final(db, scratch + (size_t)chunks * C, chunks, C, s);
}
