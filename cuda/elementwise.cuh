// cuda/elementwise.cuh: element-wise kernels of the GPU trainer (GELU, residual
// adds, scaling), the bias gradient (column sums) and row gather/scatter, plus the
// vector load/store helpers that the other kernel headers use.
//
// Conventions of every kernel header: fp32 arithmetic inside, floatX storage;
// deterministic results (no float atomics, reductions in a fixed order); backward
// kernels add into their gradient outputs unless stated "overwrite"; each launcher
// calls LAUNCH_CHECK() after launching. CPU twins are in train_sft.c.
#pragma once
#include <stdint.h>
#include <string.h>
#include "common.cuh"

// ----------------------------------------------------------------------------
// Vector access. load_vec/store_vec move N consecutive floatX (or float) values
// in one memory instruction; p must be aligned to N * sizeof(T) bytes. The raw
// bytes go through a plain integer vector type and memcpy (no type punning).

template <int BYTES> struct RawBytes;
template <> struct RawBytes<2> { typedef unsigned short type; };
template <> struct RawBytes<4> { typedef unsigned int type; };
template <> struct RawBytes<8> { typedef uint2 type; };
template <> struct RawBytes<16> { typedef uint4 type; };

template <int N, typename T> __device__ __forceinline__ void load_vec(float (&f)[N], const T* p) {
    typedef typename RawBytes<N * sizeof(T)>::type R;
    R raw = *reinterpret_cast<const R*>(p);
    T e[N];
    memcpy(e, &raw, sizeof(R));
#pragma unroll
    for (int k = 0; k < N; k++) f[k] = to_float(e[k]);
}

template <int N, typename T> __device__ __forceinline__ void store_vec(T* p, const float (&f)[N]) {
    typedef typename RawBytes<N * sizeof(T)>::type R;
    T e[N];
#pragma unroll
    for (int k = 0; k < N; k++) e[k] = from_float<T>(f[k]);
    R raw;
    memcpy(&raw, e, sizeof(R));
    *reinterpret_cast<R*>(p) = raw;
}

// floatX values per 16-byte access: 8 in bf16, 4 in fp32
#define XVEC ((int)(16 / sizeof(floatX)))

// A normalization's input values v[0..N) at offset `at` of its row (LayerNorm, RMSNorm):
// inp's, or with FUSED the residual add inp + inp2 rounded to floatX (the value as stored),
// first written to residual_out, from where the same lane re-reads it in later passes.
template <int N, bool FUSED>
__device__ __forceinline__ void norm_input_load(float (&v)[N], floatX* residual_out, const floatX* inp, const floatX* inp2, size_t at) {
    if (FUSED) {
        float v2[N];
        load_vec<N>(v, inp + at);
        load_vec<N>(v2, inp2 + at);
#pragma unroll
        for (int k = 0; k < N; k++) v[k] = to_float(from_float<floatX>(v[k] + v2[k]));
        store_vec<N>(residual_out + at, v);
    } else {
        load_vec<N>(v, inp + at);
    }
}

inline bool is_aligned(const void* p, size_t bytes) { return ((uintptr_t)p % bytes) == 0; }

// ----------------------------------------------------------------------------
// Element-wise map: out[i] = op(a[i], b[i]) (b may be null: op gets 0). Thread t
// handles elements [t*N, t*N + N); the last thread may get a partial group and
// does it one by one. out may alias a or b (each element is read, then written,
// by the same thread).

#define GELU_SQRT_2_OVER_PI 0.7978845608028654f

struct GeluForwardOp {
    __device__ float operator()(float x, float) const {
        float u = GELU_SQRT_2_OVER_PI * (x + 0.044715f * x * x * x);
        return 0.5f * x * (1.0f + tanhf(u));
    }
};
struct GeluBackwardOp {  // (x, dout) -> gelu'(x) * dout
    __device__ float operator()(float x, float d) const {
        float u = GELU_SQRT_2_OVER_PI * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float local = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * 0.044715f * x * x);
        return local * d;
    }
};
struct AddOp {
    __device__ float operator()(float a, float b) const { return a + b; }
};
struct ScaleOp {
    float s;
    __device__ float operator()(float a, float) const { return a * s; }
};

template <int N, typename Op>
__global__ void elementwise_kernel(floatX* out, const floatX* a, const floatX* b, size_t n, Op op) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * N;
    if (i >= n) return;
    if (i + N <= n) {
        float x[N], y[N];
        load_vec<N>(x, a + i);
        if (b) load_vec<N>(y, b + i);
        else {
#pragma unroll
            for (int k = 0; k < N; k++) y[k] = 0.0f;
        }
#pragma unroll
        for (int k = 0; k < N; k++) x[k] = op(x[k], y[k]);
        store_vec<N>(out + i, x);
    } else {
        for (size_t j = i; j < n; j++) out[j] = from_float<floatX>(op(to_float(a[j]), b ? to_float(b[j]) : 0.0f));
    }
}

template <typename Op> void elementwise_launch(floatX* out, const floatX* a, const floatX* b, size_t n, Op op, cudaStream_t s) {
    if (n == 0) return;
    const int block = 256;
    bool vec = is_aligned(out, 16) && is_aligned(a, 16) && (b == nullptr || is_aligned(b, 16));
    if (vec) elementwise_kernel<XVEC><<<ceil_div((long)n, (long)block * XVEC), block, 0, s>>>(out, a, b, n, op);
    else elementwise_kernel<1><<<ceil_div((long)n, block), block, 0, s>>>(out, a, b, n, op);
    LAUNCH_CHECK();
}

// tanh-GELU ("gelu_new"): out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
void gelu_forward(floatX* out, const floatX* inp, size_t N, cudaStream_t s) { elementwise_launch(out, inp, nullptr, N, GeluForwardOp(), s); }
// dinp OVERWRITTEN with gelu'(inp) * dout (the CPU twin adds into a zeroed buffer)
void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t N, cudaStream_t s) {
    elementwise_launch(dinp, inp, dout, N, GeluBackwardOp(), s);
}
void residual_forward(floatX* out, const floatX* a, const floatX* b, size_t N, cudaStream_t s) { elementwise_launch(out, a, b, N, AddOp(), s); }
void add_inplace(floatX* a, const floatX* b, size_t N, cudaStream_t s) { elementwise_launch(a, a, b, N, AddOp(), s); }
void scale_inplace(floatX* a, float scale, size_t N, cudaStream_t s) {
    ScaleOp op;
    op.s = scale;
    elementwise_launch(a, a, nullptr, N, op, s);
}

// ----------------------------------------------------------------------------
// Column sums of an (N, OC) matrix, deterministic: the rows are cut into chunks of
// COLSUM_ROWS; pass 1 writes one fp32 partial sum per (chunk, column) to scratch
// (thread per column, rows in order); pass 2 (colsum_add) sums each column's partials
// and adds the total to the fp32 output once. The result depends only on N and OC,
// never on the grid or the device. The output is an fp32 gradient.

#define COLSUM_ROWS 32
#define COLSUM_THREADS 256
#define COLSUM_MAX_GRID_Y 65535

__host__ __device__ inline int colsum_chunks(int N) { return (N + COLSUM_ROWS - 1) / COLSUM_ROWS; }

__global__ void bias_backward_partial_kernel(float* partial, const floatX* dout, int N, int OC) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= OC) return;
    int chunks = colsum_chunks(N);
    for (int k = blockIdx.y; k < chunks; k += gridDim.y) {
        int r0 = k * COLSUM_ROWS, r1 = min(N, r0 + COLSUM_ROWS);
        float s = 0.0f;
#pragma unroll 8
        for (int r = r0; r < r1; r++) s += to_float(dout[(size_t)r * OC + c]);
        partial[(size_t)k * OC + c] = s;
    }
}

// out[c] += sum over r < rows of in[r * ld + c], for c < cols (in: fp32 partial sums or
// floatX values). A block of COLSUM_ADD_COLS x COLSUM_ADD_LANES threads per 32 columns (each
// warp reads 32 consecutive values of a row): lane j sums rows j, j + LANES, j + 2 LANES, ...
// in order, then the LANES sums are added pairwise in shared memory (j + LANES/2 into j, then
// j + LANES/4, ...: a fixed tree), so the order, and the result, depends only on rows.
// CPU twin of the exact order: colsum_add_ref in dev/cuda/elementwise.cu.
#define COLSUM_ADD_COLS 32
#define COLSUM_ADD_LANES 32

template <typename T> __global__ void colsum_add_kernel(float* out, const T* in, int rows, int cols, size_t ld) {
    __shared__ float part[COLSUM_ADD_LANES][COLSUM_ADD_COLS];
    int c = blockIdx.x * COLSUM_ADD_COLS + threadIdx.x, j = threadIdx.y;
    float s = 0.0f;
    if (c < cols) {
#pragma unroll 4
        for (int r = j; r < rows; r += COLSUM_ADD_LANES) s += to_float(in[(size_t)r * ld + c]);
    }
    part[j][threadIdx.x] = s;
    for (int h = COLSUM_ADD_LANES / 2; h > 0; h /= 2) {
        __syncthreads();
        if (j < h) part[j][threadIdx.x] += part[j + h][threadIdx.x];
    }
    if (j == 0 && c < cols) out[c] += part[0][threadIdx.x];
}

template <typename T> void colsum_add(float* out, const T* in, int rows, int cols, size_t ld, cudaStream_t s) {
    if (rows <= 0 || cols <= 0) return;
    colsum_add_kernel<T><<<ceil_div(cols, COLSUM_ADD_COLS), dim3(COLSUM_ADD_COLS, COLSUM_ADD_LANES), 0, s>>>(out, in, rows, cols, ld);
    LAUNCH_CHECK();
}

// out[c] += sum over k < chunks of partial[k * OC + c]: pass 2 of the column sums
void colsum_final(float* out, const float* partial, int chunks, int OC, cudaStream_t s) { colsum_add(out, partial, chunks, OC, (size_t)OC, s); }

size_t bias_backward_scratch_floats(int N, int OC) { return (size_t)colsum_chunks(N) * OC; }

// dbias += column sums of dout (N x OC); scratch holds bias_backward_scratch_floats(N, OC) floats
void bias_backward(float* dbias, float* scratch, const floatX* dout, int N, int OC, cudaStream_t s) {
    if (N <= 0 || OC <= 0) return;
    int chunks = colsum_chunks(N);
    dim3 grid(ceil_div(OC, COLSUM_THREADS), chunks < COLSUM_MAX_GRID_Y ? chunks : COLSUM_MAX_GRID_Y);
    bias_backward_partial_kernel<<<grid, COLSUM_THREADS, 0, s>>>(scratch, dout, N, OC);
    LAUNCH_CHECK();
    colsum_final(dbias, scratch, chunks, OC, s);
}

// ----------------------------------------------------------------------------
// Row gather/scatter: one block per listed row, threads across the C channels
// (16-byte copies when every row start is 16-byte aligned).

template <int N> __global__ void copy_rows_kernel(floatX* dst, const floatX* src, const int* rows, int C, int gather) {
    int r = blockIdx.x;
    size_t src_row = gather ? (size_t)rows[r] : (size_t)r, dst_row = gather ? (size_t)r : (size_t)rows[r];
    const floatX* sp = src + src_row * C;
    floatX* dp = dst + dst_row * C;
    typedef typename RawBytes<N * sizeof(floatX)>::type R;
    for (int c = threadIdx.x * N; c < C; c += blockDim.x * N) *reinterpret_cast<R*>(dp + c) = *reinterpret_cast<const R*>(sp + c);
}

inline void copy_rows_launch(floatX* dst, const floatX* src, const int* rows, int R, int C, int gather, cudaStream_t s) {
    if (R <= 0 || C <= 0) return;
    bool vec = is_aligned(dst, 16) && is_aligned(src, 16) && C % XVEC == 0;
    if (vec) copy_rows_kernel<XVEC><<<R, 128, 0, s>>>(dst, src, rows, C, gather);
    else copy_rows_kernel<1><<<R, 128, 0, s>>>(dst, src, rows, C, gather);
    LAUNCH_CHECK();
}

// dst[r] = src[rows[r]] for r < R (rows of C values)
void gather_rows(floatX* dst, const floatX* src, const int* rows, int R, int C, cudaStream_t s) { copy_rows_launch(dst, src, rows, R, C, 1, s); }

// dst (N x C) = 0 except dst[rows[r]] = src[r]; the rows must be distinct
void scatter_rows_zero(floatX* dst, const floatX* src, const int* rows, int R, int N, int C, cudaStream_t s) {
    if (N <= 0 || C <= 0) return;
    CUDA_CHECK(cudaMemsetAsync(dst, 0, (size_t)N * C * sizeof(floatX), s));  // all-zero bits are 0.0 in bf16 and fp32
    copy_rows_launch(dst, src, rows, R, C, 0, s);
}
