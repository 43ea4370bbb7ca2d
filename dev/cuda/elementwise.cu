// dev/cuda/elementwise.cu: checks and timings of cuda/elementwise.cuh (GELU forward
// and backward, residual add, add_inplace, scale_inplace, bias_backward, the column sums
// colsum_add, row gather and scatter) against the CPU trainer's functions (cpu_ref.h) or
// plain host loops. Version 1 of each kernel is the simplest correct one (one thread per
// element; one thread per bias column over all rows; one thread per column for the column
// sums); version 2 is the trainer's, from the header.
// Build: see dev/cuda/Makefile, or
//   gcc -O2 -march=native -fopenmp -c dev/cuda/cpu_ref.c -o dev/cuda/cpu_ref.o
//   nvcc -std=c++17 -O3 -arch=sm_90 -I. [-DENABLE_FP32] dev/cuda/elementwise.cu dev/cuda/cpu_ref.o -lgomp -o elementwise
#include "../../cuda/common.cuh"
#include "../../cuda/elementwise.cuh"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // cpu_ref.h brings model/model.h's static helpers
#include "cpu_ref.h"
#pragma GCC diagnostic pop

#include "check.cuh"

// ----------------------------------------------------------------------------
// Version 1: one thread per element

__global__ void gelu_forward_v1_kernel(floatX* out, const floatX* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = from_float<floatX>(GeluForwardOp()(to_float(inp[i]), 0.0f));
}
__global__ void gelu_backward_v1_kernel(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dinp[i] = from_float<floatX>(GeluBackwardOp()(to_float(inp[i]), to_float(dout[i])));
}
__global__ void residual_forward_v1_kernel(floatX* out, const floatX* a, const floatX* b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = from_float<floatX>(to_float(a[i]) + to_float(b[i]));
}
// thread per column, all rows in order
__global__ void bias_backward_v1_kernel(float* dbias, const floatX* dout, int N, int OC) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= OC) return;
    float s = 0.0f;
    for (int r = 0; r < N; r++) s += to_float(dout[(size_t)r * OC + c]);
    dbias[c] += s;
}

// thread per column, rows in order (colsum_add before it was parallelized: 768 threads of
// GPT-2's LayerNorm each adding 512 partials, one after another)
__global__ void colsum_add_v1_kernel(float* out, const float* in, int rows, int cols, size_t ld) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float s = 0.0f;
    for (int r = 0; r < rows; r++) s += in[(size_t)r * ld + c];
    out[c] += s;
}

static void gelu_forward_v(int version, floatX* out, const floatX* inp, size_t n) {
    if (version == 1) {
        gelu_forward_v1_kernel<<<ceil_div((long)n, 256), 256>>>(out, inp, n);
        CUDA_CHECK(cudaGetLastError());
    } else {
        gelu_forward(out, inp, n, 0);
    }
}
static void gelu_backward_v(int version, floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    if (version == 1) {
        gelu_backward_v1_kernel<<<ceil_div((long)n, 256), 256>>>(dinp, inp, dout, n);
        CUDA_CHECK(cudaGetLastError());
    } else {
        gelu_backward(dinp, inp, dout, n, 0);
    }
}
static void residual_forward_v(int version, floatX* out, const floatX* a, const floatX* b, size_t n) {
    if (version == 1) {
        residual_forward_v1_kernel<<<ceil_div((long)n, 256), 256>>>(out, a, b, n);
        CUDA_CHECK(cudaGetLastError());
    } else {
        residual_forward(out, a, b, n, 0);
    }
}
static void bias_backward_v(int version, float* dbias, float* scratch, const floatX* dout, int N, int OC) {
    if (version == 1) {
        bias_backward_v1_kernel<<<ceil_div(OC, 256), 256>>>(dbias, dout, N, OC);
        CUDA_CHECK(cudaGetLastError());
    } else {
        bias_backward(dbias, scratch, dout, N, OC, 0);
    }
}

static void colsum_add_v(int version, float* out, const float* in, int rows, int cols, size_t ld) {
    if (version == 1) {
        colsum_add_v1_kernel<<<ceil_div(cols, 256), 256>>>(out, in, rows, cols, ld);
        CUDA_CHECK(cudaGetLastError());
    } else {
        colsum_add(out, in, rows, cols, ld, 0);
    }
}

// The CPU twin of colsum_add, in the kernel's order: lane j of COLSUM_ADD_LANES sums rows
// j, j + LANES, ... in fp32, then the lanes are added pairwise (j + h into j for h = LANES/2,
// LANES/4, ..., 1); the GPU must match it bit for bit.
static std::vector<float> colsum_add_ref(const std::vector<float>& out0, const std::vector<float>& in, int rows, int cols, size_t ld) {
    std::vector<float> out = out0;
    for (int c = 0; c < cols; c++) {
        float part[COLSUM_ADD_LANES];
        for (int j = 0; j < COLSUM_ADD_LANES; j++) {
            part[j] = 0.0f;
            for (int r = j; r < rows; r += COLSUM_ADD_LANES) part[j] += in[(size_t)r * ld + c];
        }
        for (int h = COLSUM_ADD_LANES / 2; h > 0; h /= 2)
            for (int j = 0; j < h; j++) part[j] += part[j + h];
        out[c] += part[0];
    }
    return out;
}

// ----------------------------------------------------------------------------

// off: element offset of every device pointer (1 makes them unaligned: the scalar path)
static void check_map(size_t n, int off) {
    char name[128];
    std::vector<float> x = rand_x(n, 4.0f), y = rand_x(n, 1.0f);
    floatX *dx = dev_x(x), *dy = dev_x(y), *dout = dev_alloc<floatX>(n);
    size_t m = n - off;
    // GELU forward
    std::vector<float> want(n);
    ref_gelu_forward(want.data(), x.data(), (long)n);
    want.erase(want.begin(), want.begin() + off);
    for (int v = 1; v <= 2; v++) {
        poison(dout, n * sizeof(floatX));
        gelu_forward_v(v, dout + off, dx + off, m);
        snprintf(name, sizeof name, "gelu_forward_v%d n=%zu off=%d", v, m, off);
        check(name, download_x(dout + off, m), want, TOL);
    }
    // GELU backward (overwrites; the CPU twin adds into zeros)
    std::fill(want.begin(), want.end(), 0.0f);
    want.resize(n);
    ref_gelu_backward(want.data(), x.data(), y.data(), (long)n);
    want.erase(want.begin(), want.begin() + off);
    for (int v = 1; v <= 2; v++) {
        poison(dout, n * sizeof(floatX));
        gelu_backward_v(v, dout + off, dx + off, dy + off, m);
        snprintf(name, sizeof name, "gelu_backward_v%d n=%zu off=%d", v, m, off);
        check(name, download_x(dout + off, m), want, TOL);
    }
    // residual forward, add_inplace, scale_inplace
    for (size_t i = 0; i < m; i++) want[i] = x[i + off] + y[i + off];
    for (int v = 1; v <= 2; v++) {
        poison(dout, n * sizeof(floatX));
        residual_forward_v(v, dout + off, dx + off, dy + off, m);
        snprintf(name, sizeof name, "residual_forward_v%d n=%zu off=%d", v, m, off);
        check(name, download_x(dout + off, m), want, TOL);
    }
    upload_x(dout, x);
    add_inplace(dout + off, dy + off, m, 0);
    snprintf(name, sizeof name, "add_inplace n=%zu off=%d", m, off);
    check(name, download_x(dout + off, m), want, TOL);
    for (size_t i = 0; i < m; i++) want[i] = x[i + off] * 0.37f;
    upload_x(dout, x);
    scale_inplace(dout + off, 0.37f, m, 0);
    snprintf(name, sizeof name, "scale_inplace n=%zu off=%d", m, off);
    check(name, download_x(dout + off, m), want, TOL);
    CUDA_CHECK(cudaFree(dx));
    CUDA_CHECK(cudaFree(dy));
    CUDA_CHECK(cudaFree(dout));
}

static void check_bias_backward(int N, int OC) {
    char name[128];
    std::vector<float> dout = rand_x((size_t)N * OC, 1.0f), db0(OC), want(OC);
    for (int c = 0; c < OC; c++) db0[c] = frand();  // an fp32 gradient: any float
    for (int c = 0; c < OC; c++) {
        double s = 0.0;
        for (int r = 0; r < N; r++) s += dout[(size_t)r * OC + c];
        want[c] = (float)(db0[c] + s);
    }
    floatX* d_dout = dev_x(dout);
    float* d_db = dev_copy(db0);
    size_t nscratch = bias_backward_scratch_floats(N, OC);
    float* scratch = dev_alloc<float>(nscratch);
    std::vector<unsigned char> first;
    auto upload_db = [&] { CUDA_CHECK(cudaMemcpy(d_db, db0.data(), OC * sizeof(float), cudaMemcpyHostToDevice)); };
    for (int v = 1; v <= 2; v++) {
        upload_db();
        poison(scratch, nscratch * sizeof(float));
        bias_backward_v(v, d_db, scratch, d_dout, N, OC);
        snprintf(name, sizeof name, "bias_backward_v%d N=%d OC=%d", v, N, OC);
        check(name, download(d_db, OC), want, TOL_GRAD32);
        if (v == 2) {  // determinism: again from the same start
            first = download_bytes(d_db, OC * sizeof(float));
            upload_db();
            poison(scratch, nscratch * sizeof(float));
            bias_backward_v(v, d_db, scratch, d_dout, N, OC);
            snprintf(name, sizeof name, "bias_backward_v%d N=%d OC=%d deterministic", v, N, OC);
            check_bits(name, first, download_bytes(d_db, OC * sizeof(float)));
        }
    }
    CUDA_CHECK(cudaFree(d_dout));
    CUDA_CHECK(cudaFree(d_db));
    CUDA_CHECK(cudaFree(scratch));
}

// colsum_add over rows x cols (row stride ld) of fp32 partials (LayerNorm's and the bias
// gradient's second pass) or of floatX values (cuBLASLt's bias-gradient epilogue's fallback):
// bit for bit against its CPU twin, and against a double-precision sum (both versions)
static void check_colsum(int rows, int cols, size_t ld, bool floatx_input) {
    char name[128];
    std::vector<float> in = floatx_input ? rand_x((size_t)rows * ld, 1.0f) : rand_f((size_t)rows * ld, 1.0f), out0 = rand_f(cols, 1.0f);
    std::vector<float> want(cols);
    for (int c = 0; c < cols; c++) {
        double s = out0[c];
        for (int r = 0; r < rows; r++) s += in[(size_t)r * ld + c];
        want[c] = (float)s;
    }
    std::vector<float> twin = colsum_add_ref(out0, in, rows, cols, ld);
    float* d_out = dev_copy(out0);
    const char* type = floatx_input ? "floatX" : "fp32";
    if (floatx_input) {
        floatX* d_in = dev_x(in);
        colsum_add(d_out, d_in, rows, cols, ld, 0);
        CUDA_CHECK(cudaFree(d_in));
    } else {
        float* d_in = dev_copy(in);
        for (int v = 1; v <= 2; v++) {
            CUDA_CHECK(cudaMemcpy(d_out, out0.data(), cols * sizeof(float), cudaMemcpyHostToDevice));
            colsum_add_v(v, d_out, d_in, rows, cols, ld);
            snprintf(name, sizeof name, "colsum_add_v%d %s rows=%d cols=%d ld=%zu", v, type, rows, cols, ld);
            check(name, download(d_out, cols), want, TOL_GRAD32);
        }
        CUDA_CHECK(cudaFree(d_in));
    }
    snprintf(name, sizeof name, "colsum_add_v2 %s rows=%d cols=%d ld=%zu equals its CPU twin", type, rows, cols, ld);
    check(name, download(d_out, cols), twin, 0.0f);
    if (floatx_input) {
        snprintf(name, sizeof name, "colsum_add_v2 %s rows=%d cols=%d ld=%zu", type, rows, cols, ld);
        check(name, download(d_out, cols), want, TOL_GRAD32);
    }
    CUDA_CHECK(cudaFree(d_out));
}

static void check_rows(int N, int C, int R) {
    char name[128];
    std::vector<float> src = rand_x((size_t)N * C, 1.0f), small = rand_x((size_t)R * C, 1.0f);
    std::vector<int> perm(N);
    for (int i = 0; i < N; i++) perm[i] = i;
    for (int i = N - 1; i > 0; i--) std::swap(perm[i], perm[irand(i + 1)]);
    std::vector<int> rows(perm.begin(), perm.begin() + R);  // R distinct rows
    floatX *d_src = dev_x(src), *d_small = dev_x(small), *d_dst = dev_alloc<floatX>((size_t)N * C);
    int* d_rows = dev_copy(rows);
    std::vector<float> want((size_t)R * C);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) want[(size_t)r * C + c] = src[(size_t)rows[r] * C + c];
    poison(d_dst, (size_t)N * C * sizeof(floatX));
    gather_rows(d_dst, d_src, d_rows, R, C, 0);
    snprintf(name, sizeof name, "gather_rows R=%d C=%d", R, C);
    check(name, download_x(d_dst, (size_t)R * C), want, 0.0f);
    want.assign((size_t)N * C, 0.0f);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) want[(size_t)rows[r] * C + c] = small[(size_t)r * C + c];
    poison(d_dst, (size_t)N * C * sizeof(floatX));
    scatter_rows_zero(d_dst, d_small, d_rows, R, N, C, 0);
    snprintf(name, sizeof name, "scatter_rows_zero R=%d N=%d C=%d", R, N, C);
    check(name, download_x(d_dst, (size_t)N * C), want, 0.0f);
    CUDA_CHECK(cudaFree(d_src));
    CUDA_CHECK(cudaFree(d_small));
    CUDA_CHECK(cudaFree(d_dst));
    CUDA_CHECK(cudaFree(d_rows));
}

static void timings(void) {
    const int BT = 4 * 1024, C = 768;
    const size_t n4 = (size_t)BT * 4 * C, n1 = (size_t)BT * C, X = sizeof(floatX);
    floatX *a = dev_alloc<floatX>(n4), *b = dev_alloc<floatX>(n4), *o = dev_alloc<floatX>(n4);
    float* scratch = dev_alloc<float>(bias_backward_scratch_floats(BT, 4 * C));
    float* db = dev_alloc<float>(4 * C);
    fill_hash(a, n4, 3.0f, 1);
    fill_hash(b, n4, 1.0f, 2);
    char name[128];
    for (int v = 1; v <= 2; v++) {
        snprintf(name, sizeof name, "gelu_forward_v%d n=%zu", v, n4);
        report_time(name, time_ms([&] { gelu_forward_v(v, o, a, n4); }, 20), 2.0 * n4 * X);
        snprintf(name, sizeof name, "gelu_backward_v%d n=%zu", v, n4);
        report_time(name, time_ms([&] { gelu_backward_v(v, o, a, b, n4); }, 20), 3.0 * n4 * X);
        snprintf(name, sizeof name, "residual_forward_v%d n=%zu", v, n1);
        report_time(name, time_ms([&] { residual_forward_v(v, o, a, b, n1); }, 20), 3.0 * n1 * X);
        // bias of the MLP's first matmul: N = BT rows, OC = 4C; the output is 12 KB (ignored)
        snprintf(name, sizeof name, "bias_backward_v%d N=%d OC=%d", v, BT, 4 * C);
        report_time(name, time_ms([&] { bias_backward_v(v, db, scratch, a, BT, 4 * C); }, 20), (double)n4 * X);
    }
    // the column sums' second pass: LayerNorm's at GPT-2 124M (B*T = 16384 rows: 512 chunks of
    // C = 768), the bias of its MLP (4C) and Llama-3.2-1B's RMSNorm (C = 2048); bytes: the partials.
    // Estimate for an H200 until measured (the emulator skips timings: its times mean nothing):
    // 1.5 MB at 4.8 TB/s is 0.3 us, so both versions are bound by latency, not bandwidth. v1 has
    // 3 blocks whose threads each issue 512 loads (a few in flight, ~0.3-0.6 us of L2/HBM latency
    // per round): ~40-80 us, 50 calls per 124M step (2 per LayerNorm) = 2-4 ms. v2 has 24 blocks
    // of 1024 threads issuing 16 loads each (4 rounds) and a 5-step tree: ~3-5 us with the
    // launch, ~0.2 ms per step.
    const int colsum_shapes[3][2] = {{512, 768}, {512, 3072}, {512, 2048}};
    float* partial = dev_alloc<float>((size_t)512 * 3072);
    CUDA_CHECK(cudaMemset(partial, 0, (size_t)512 * 3072 * sizeof(float)));
    for (int v = 1; v <= 2; v++)
        for (int i = 0; i < 3; i++) {
            int rows = colsum_shapes[i][0], cols = colsum_shapes[i][1];
            snprintf(name, sizeof name, "colsum_add_v%d rows=%d cols=%d", v, rows, cols);
            report_time(name, time_ms([&] { colsum_add_v(v, db, partial, rows, cols, (size_t)cols); }, 50), (double)rows * cols * sizeof(float));
        }
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    CUDA_CHECK(cudaFree(o));
    CUDA_CHECK(cudaFree(scratch));
    CUDA_CHECK(cudaFree(db));
    CUDA_CHECK(cudaFree(partial));
}

int main(void) {
    if (!have_cuda_device("elementwise")) return 0;
    check_map(3 * 4096 + 5, 0);
    check_map(1000, 1);
    check_bias_backward(1000, 2304);
    check_bias_backward(37, 5);
    check_colsum(512, 768, 768, false);  // GPT-2 124M's LayerNorm: 512 chunks of 32 rows
    check_colsum(37, 5, 5, false);       // a partial block, rows not a multiple of the lanes
    check_colsum(3, 40, 48, false);      // fewer rows than lanes, ld above cols
    check_colsum(1000, 72, 80, true);    // floatX rows (the bias-gradient fallback)
    check_rows(300, 768, 100);
    check_rows(50, 99, 17);
    timings();
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("elementwise [%s]: %d failure(s)\n", PRECISION_NAME, g_failures);
    return g_failures ? 1 : 0;
}
