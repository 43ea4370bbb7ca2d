// dev/cuda/layernorm.cu: checks and timings of cuda/layernorm.cuh (layernorm forward,
// the fused residual + layernorm forward, layernorm backward) against the CPU
// trainer's layernorm_forward/backward (cpu_ref.h).
// Version 1 is the simplest correct one: one thread per row (as the CPU loop), and
// for dw/db one thread per channel over all rows in order; version 2 is the header's.
// Build: make -C dev/cuda layernorm [PRECISION=FP32], or
//   nvcc -std=c++17 -O3 -arch=sm_90 -I. [-DENABLE_FP32] dev/cuda/layernorm.cu dev/cuda/cpu_ref.o -lgomp -o layernorm
#include "../../cuda/common.cuh"
#include "../../cuda/layernorm.cuh"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // cpu_ref.h brings common/gpt2.h's static helpers
#include "cpu_ref.h"
#pragma GCC diagnostic pop

// ---- check harness (the same block opens every dev/cuda kernel check) ----
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <vector>

#ifdef ENABLE_FP32
#define TOL 1e-4f  // relative to the largest |reference| of each tensor
#else
#define TOL 1e-2f
#endif
#define PEAK_GBPS 4800.0  // H200 HBM3e

static int g_failures = 0;

inline bool have_cuda_device(const char* name) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        printf("skip %s: no CUDA device\n", name);
        return false;
    }
    return true;
}

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
inline uint64_t rng_next() {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
inline float frand() { return (float)((double)(rng_next() >> 40) * (2.0 / 16777216.0) - 1.0); }  // [-1, 1)
inline int irand(int n) { return (int)((rng_next() >> 33) % (uint64_t)n); }
// what a float becomes when stored as floatX: the CPU reference gets exactly the GPU's inputs
inline float round_x(float x) { return to_float(from_float<floatX>(x)); }
inline std::vector<float> rand_x(size_t n, float scale) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = round_x(frand() * scale);
    return v;
}

template <typename T> inline T* dev_alloc(size_t n) {
    T* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, (n ? n : 1) * sizeof(T)));
    return p;
}
inline void upload_x(floatX* d, const std::vector<float>& h) {
    std::vector<floatX> t(h.size());
    for (size_t i = 0; i < h.size(); i++) t[i] = from_float<floatX>(h[i]);
    CUDA_CHECK(cudaMemcpy(d, t.data(), t.size() * sizeof(floatX), cudaMemcpyHostToDevice));
}
inline floatX* dev_x(const std::vector<float>& h) {
    floatX* d = dev_alloc<floatX>(h.size());
    upload_x(d, h);
    return d;
}
inline std::vector<float> download_x(const floatX* d, size_t n) {
    std::vector<floatX> t(n);
    CUDA_CHECK(cudaMemcpy(t.data(), d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) h[i] = to_float(t[i]);
    return h;
}
template <typename T> inline T* dev_copy(const std::vector<T>& h) {
    T* d = dev_alloc<T>(h.size());
    CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T> inline std::vector<T> download(const T* d, size_t n) {
    std::vector<T> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
inline std::vector<unsigned char> download_bytes(const void* d, size_t bytes) {
    std::vector<unsigned char> h(bytes);
    CUDA_CHECK(cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost));
    return h;
}
// all-ones bytes: NaN in fp32 and in bf16, so an output the kernel fails to write is caught
inline void poison(void* d, size_t bytes) { CUDA_CHECK(cudaMemset(d, 0xFF, bytes)); }

// ok if every |got - want| <= tol * max|want| (NaN fails)
inline void check(const char* name, const std::vector<float>& got, const std::vector<float>& want, float tol) {
    double maxref = 0.0, maxerr = 0.0;
    for (size_t i = 0; i < want.size(); i++) maxref = fmax(maxref, fabs((double)want[i]));
    double lim = tol * (maxref > 0.0 ? maxref : 1.0);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < want.size(); i++) {
        double e = fabs((double)got[i] - (double)want[i]);
        if (!(e <= lim)) {
            if (bad++ == 0) first = i;
            maxerr = INFINITY;
        } else if (e > maxerr) {
            maxerr = e;
        }
    }
    if (got.size() != want.size()) {
        printf("FAIL %s: %zu values, want %zu\n", name, got.size(), want.size());
        g_failures++;
    } else if (bad) {
        printf("FAIL %s: %zu of %zu values off by more than %.3g (tol %.0e x max|ref| %.4g); first at [%zu]: got %.8g want %.8g\n", name, bad,
               want.size(), lim, tol, maxref, first, got[first], want[first]);
        g_failures++;
    } else {
        printf("ok %s (max err %.3g = %.2e x max|ref| %.4g, %zu values)\n", name, maxerr, maxref > 0 ? maxerr / maxref : maxerr, maxref,
               want.size());
    }
}
inline void check_bits(const char* name, const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) i++;
    if (a.size() != b.size() || i < a.size()) {
        printf("FAIL %s: two runs differ (first at byte %zu of %zu)\n", name, i, a.size());
        g_failures++;
    } else {
        printf("ok %s (bitwise identical, %zu bytes)\n", name, a.size());
    }
}

// average ms per call of f() over reps calls after a warm-up call
template <typename F> float time_ms(F f, int reps) {
    cudaEvent_t t0, t1;
    CUDA_CHECK(cudaEventCreate(&t0));
    CUDA_CHECK(cudaEventCreate(&t1));
    f();
    CUDA_CHECK(cudaEventRecord(t0));
    for (int i = 0; i < reps; i++) f();
    CUDA_CHECK(cudaEventRecord(t1));
    CUDA_CHECK(cudaEventSynchronize(t1));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
    CUDA_CHECK(cudaEventDestroy(t0));
    CUDA_CHECK(cudaEventDestroy(t1));
    return ms / reps;
}
// bytes: the minimum traffic the kernel must move (documented at each call)
inline void report_time(const char* name, float ms, double bytes) {
    double gbps = bytes / (ms * 1e-3) / 1e9;
    printf("time %s [%s]: %.4f ms, %.1f GB/s (%.0f%% of %.1f TB/s)\n", name, PRECISION_NAME, ms, gbps, 100.0 * gbps / PEAK_GBPS,
           PEAK_GBPS / 1000);
}

// fills n floatX on the device with uniform values in [-scale, scale) from a hash of the index (big timing buffers)
__global__ void fill_hash_kernel(floatX* p, size_t n, float scale, uint32_t seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32) ^ seed;
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    p[i] = from_float<floatX>(((float)(h >> 8) * (1.0f / 8388608.0f) - 1.0f) * scale);
}
inline void fill_hash(floatX* p, size_t n, float scale, uint32_t seed) {
    fill_hash_kernel<<<ceil_div((long)n, 256), 256>>>(p, n, scale, seed);
    CUDA_CHECK(cudaGetLastError());
}
// ---- end of the check harness ----

#define EPS 1e-5f

// ----------------------------------------------------------------------------
// Version 1: thread per row, like the CPU loop

__global__ void layernorm_forward_v1_kernel(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w, const floatX* b, int N,
                                            int C, float eps) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const floatX* x = inp + (size_t)i * C;
    float m = 0.0f;
    for (int c = 0; c < C; c++) m += to_float(x[c]);
    m /= (float)C;
    float v = 0.0f;
    for (int c = 0; c < C; c++) {
        float d = to_float(x[c]) - m;
        v += d * d;
    }
    float s = 1.0f / sqrtf(v / (float)C + eps);
    for (int c = 0; c < C; c++) out[(size_t)i * C + c] = from_float<floatX>((to_float(x[c]) - m) * s * to_float(w[c]) + to_float(b[c]));
    mean[i] = m;
    rstd[i] = s;
}

__global__ void layernorm_backward_v1_dinp_kernel(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* w, const float* mean,
                                                  const float* rstd, int N, int C) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const floatX *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
    float m = mean[i], s = rstd[i], g_mean = 0.0f, gn_mean = 0.0f;
    for (int c = 0; c < C; c++) {
        float g = to_float(dy[c]) * to_float(w[c]);
        g_mean += g;
        gn_mean += g * (to_float(x[c]) - m) * s;
    }
    g_mean /= (float)C;
    gn_mean /= (float)C;
    floatX* dx = dinp + (size_t)i * C;
    for (int c = 0; c < C; c++)
        dx[c] = from_float<floatX>(to_float(dx[c]) +
                                   s * (to_float(dy[c]) * to_float(w[c]) - g_mean - (to_float(x[c]) - m) * s * gn_mean));
}

__global__ void layernorm_backward_v1_dwdb_kernel(floatX* dw, floatX* db, const floatX* dout, const floatX* inp, const float* mean,
                                                  const float* rstd, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int i = 0; i < N; i++) {
        float dy = to_float(dout[(size_t)i * C + c]);
        sw += dy * (to_float(inp[(size_t)i * C + c]) - mean[i]) * rstd[i];
        sb += dy;
    }
    dw[c] = from_float<floatX>(to_float(dw[c]) + sw);
    db[c] = from_float<floatX>(to_float(db[c]) + sb);
}

static void layernorm_forward_v(int version, floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w, const floatX* b, int N,
                                int C) {
    if (version == 1) {
        layernorm_forward_v1_kernel<<<ceil_div(N, 128), 128>>>(out, mean, rstd, inp, w, b, N, C, EPS);
        CUDA_CHECK(cudaGetLastError());
    } else {
        layernorm_forward(out, mean, rstd, inp, w, b, N, C, EPS, 0);
    }
}

static void layernorm_backward_v(int version, floatX* dinp, floatX* dw, floatX* db, float* scratch, const floatX* dout, const floatX* inp,
                                 const floatX* w, const float* mean, const float* rstd, int N, int C) {
    if (version == 1) {
        layernorm_backward_v1_dinp_kernel<<<ceil_div(N, 128), 128>>>(dinp, dout, inp, w, mean, rstd, N, C);
        CUDA_CHECK(cudaGetLastError());
        layernorm_backward_v1_dwdb_kernel<<<ceil_div(C, 128), 128>>>(dw, db, dout, inp, mean, rstd, N, C);
        CUDA_CHECK(cudaGetLastError());
    } else {
        layernorm_backward(dinp, dw, db, scratch, dout, inp, w, mean, rstd, N, C, 0);
    }
}

// ----------------------------------------------------------------------------

static void check_forward(int N, int C) {
    char name[160];
    size_t n = (size_t)N * C;
    std::vector<float> a = rand_x(n, 2.0f), r = rand_x(n, 1.0f), w = rand_x(C, 1.0f), b = rand_x(C, 0.5f);
    for (size_t i = 0; i < n; i++) a[i] = round_x(a[i] + 0.3f);  // a nonzero mean
    std::vector<float> want(n), want_mean(N), want_rstd(N);
    ref_layernorm_forward(want.data(), want_mean.data(), want_rstd.data(), a.data(), w.data(), b.data(), N, C, EPS);
    floatX *d_a = dev_x(a), *d_r = dev_x(r), *d_w = dev_x(w), *d_b = dev_x(b), *d_out = dev_alloc<floatX>(n), *d_res = dev_alloc<floatX>(n);
    float *d_mean = dev_alloc<float>(N), *d_rstd = dev_alloc<float>(N);
    std::vector<unsigned char> first;
    for (int v = 1; v <= 2; v++) {
        for (int rep = 0; rep < (v == 2 ? 2 : 1); rep++) {
            poison(d_out, n * sizeof(floatX));
            poison(d_mean, N * sizeof(float));
            poison(d_rstd, N * sizeof(float));
            layernorm_forward_v(v, d_out, d_mean, d_rstd, d_a, d_w, d_b, N, C);
            if (rep == 0) {
                snprintf(name, sizeof name, "layernorm_forward_v%d N=%d C=%d out", v, N, C);
                check(name, download_x(d_out, n), want, TOL);
                snprintf(name, sizeof name, "layernorm_forward_v%d N=%d C=%d mean", v, N, C);
                check(name, download(d_mean, N), want_mean, 1e-4f);
                snprintf(name, sizeof name, "layernorm_forward_v%d N=%d C=%d rstd", v, N, C);
                check(name, download(d_rstd, N), want_rstd, 1e-4f);
                first = download_bytes(d_out, n * sizeof(floatX));
            } else {
                snprintf(name, sizeof name, "layernorm_forward_v%d N=%d C=%d deterministic", v, N, C);
                check_bits(name, first, download_bytes(d_out, n * sizeof(floatX)));
            }
        }
    }
    // fused: residual = round(r + a2) with a2 = a - r, so the CPU reference is the layernorm of the stored residual
    std::vector<float> a2(n), res(n);
    for (size_t i = 0; i < n; i++) {
        a2[i] = round_x(a[i] - r[i]);
        res[i] = round_x(r[i] + a2[i]);
    }
    ref_layernorm_forward(want.data(), want_mean.data(), want_rstd.data(), res.data(), w.data(), b.data(), N, C, EPS);
    floatX* d_a2 = dev_x(a2);
    poison(d_out, n * sizeof(floatX));
    poison(d_res, n * sizeof(floatX));
    poison(d_mean, N * sizeof(float));
    poison(d_rstd, N * sizeof(float));
    fused_residual_layernorm_forward(d_res, d_out, d_mean, d_rstd, d_r, d_a2, d_w, d_b, N, C, EPS, 0);
    snprintf(name, sizeof name, "fused_residual_layernorm_forward N=%d C=%d residual", N, C);
    check(name, download_x(d_res, n), res, 0.0f);
    snprintf(name, sizeof name, "fused_residual_layernorm_forward N=%d C=%d out", N, C);
    check(name, download_x(d_out, n), want, TOL);
    snprintf(name, sizeof name, "fused_residual_layernorm_forward N=%d C=%d mean", N, C);
    check(name, download(d_mean, N), want_mean, 1e-4f);
    snprintf(name, sizeof name, "fused_residual_layernorm_forward N=%d C=%d rstd", N, C);
    check(name, download(d_rstd, N), want_rstd, 1e-4f);
    for (floatX* p : {d_a, d_r, d_w, d_b, d_out, d_res, d_a2}) CUDA_CHECK(cudaFree(p));
    CUDA_CHECK(cudaFree(d_mean));
    CUDA_CHECK(cudaFree(d_rstd));
}

static void check_backward(int N, int C) {
    char name[160];
    size_t n = (size_t)N * C;
    std::vector<float> x = rand_x(n, 2.0f), w = rand_x(C, 1.0f), b = rand_x(C, 0.5f), dout = rand_x(n, 1.0f);
    std::vector<float> dinp0 = rand_x(n, 0.5f), dw0 = rand_x(C, 0.5f), db0 = rand_x(C, 0.5f), y(n), mean(N), rstd(N);
    ref_layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, EPS);
    std::vector<float> want_dinp = dinp0, want_dw = dw0, want_db = db0;
    ref_layernorm_backward(want_dinp.data(), want_dw.data(), want_db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    floatX *d_x = dev_x(x), *d_w = dev_x(w), *d_dout = dev_x(dout), *d_dinp = dev_x(dinp0), *d_dw = dev_x(dw0), *d_db = dev_x(db0);
    float *d_mean = dev_copy(mean), *d_rstd = dev_copy(rstd);
    size_t nscratch = layernorm_backward_scratch_floats(N, C);
    float* scratch = dev_alloc<float>(nscratch);
    std::vector<unsigned char> first[3];
    for (int v = 1; v <= 2; v++) {
        for (int rep = 0; rep < (v == 2 ? 2 : 1); rep++) {
            upload_x(d_dinp, dinp0);
            upload_x(d_dw, dw0);
            upload_x(d_db, db0);
            poison(scratch, nscratch * sizeof(float));
            layernorm_backward_v(v, d_dinp, d_dw, d_db, scratch, d_dout, d_x, d_w, d_mean, d_rstd, N, C);
            std::vector<unsigned char> got[3] = {download_bytes(d_dinp, n * sizeof(floatX)), download_bytes(d_dw, C * sizeof(floatX)),
                                                 download_bytes(d_db, C * sizeof(floatX))};
            if (rep == 0) {
                snprintf(name, sizeof name, "layernorm_backward_v%d N=%d C=%d dinp", v, N, C);
                check(name, download_x(d_dinp, n), want_dinp, TOL);
                snprintf(name, sizeof name, "layernorm_backward_v%d N=%d C=%d dw", v, N, C);
                check(name, download_x(d_dw, C), want_dw, TOL);
                snprintf(name, sizeof name, "layernorm_backward_v%d N=%d C=%d db", v, N, C);
                check(name, download_x(d_db, C), want_db, TOL);
                for (int k = 0; k < 3; k++) first[k] = got[k];
            } else {
                const char* what[3] = {"dinp", "dw", "db"};
                for (int k = 0; k < 3; k++) {
                    snprintf(name, sizeof name, "layernorm_backward_v%d N=%d C=%d %s deterministic", v, N, C, what[k]);
                    check_bits(name, first[k], got[k]);
                }
            }
        }
    }
    for (floatX* p : {d_x, d_w, d_dout, d_dinp, d_dw, d_db}) CUDA_CHECK(cudaFree(p));
    for (float* p : {d_mean, d_rstd, scratch}) CUDA_CHECK(cudaFree(p));
}

static void timings(void) {
    const int N = 4 * 1024, C = 768;
    const size_t n = (size_t)N * C, X = sizeof(floatX);
    floatX *x = dev_alloc<floatX>(n), *x2 = dev_alloc<floatX>(n), *out = dev_alloc<floatX>(n), *res = dev_alloc<floatX>(n);
    floatX *w = dev_alloc<floatX>(C), *b = dev_alloc<floatX>(C), *dw = dev_alloc<floatX>(C), *db = dev_alloc<floatX>(C);
    float *mean = dev_alloc<float>(N), *rstd = dev_alloc<float>(N), *scratch = dev_alloc<float>(layernorm_backward_scratch_floats(N, C));
    fill_hash(x, n, 2.0f, 1);
    fill_hash(x2, n, 1.0f, 2);
    fill_hash(w, C, 1.0f, 3);
    fill_hash(b, C, 1.0f, 4);
    fill_hash(dw, C, 1.0f, 5);
    fill_hash(db, C, 1.0f, 6);
    layernorm_forward(out, mean, rstd, x, w, b, N, C, EPS, 0);
    char name[128];
    for (int v = 1; v <= 2; v++) {
        // forward: read x, write out (mean/rstd are negligible)
        snprintf(name, sizeof name, "layernorm_forward_v%d N=%d C=%d", v, N, C);
        report_time(name, time_ms([&] { layernorm_forward_v(v, out, mean, rstd, x, w, b, N, C); }, 20), 2.0 * n * X);
        // backward: read dout, inp, dinp and write dinp; the dw/db pass re-reads dout and inp (counted once)
        snprintf(name, sizeof name, "layernorm_backward_v%d N=%d C=%d", v, N, C);
        report_time(name, time_ms([&] { layernorm_backward_v(v, res, dw, db, scratch, x2, x, w, mean, rstd, N, C); }, 20), 4.0 * n * X);
    }
    // fused: read a and b, write residual and out
    snprintf(name, sizeof name, "fused_residual_layernorm_forward N=%d C=%d", N, C);
    report_time(name, time_ms([&] { fused_residual_layernorm_forward(res, out, mean, rstd, x, x2, w, b, N, C, EPS, 0); }, 20), 4.0 * n * X);
    for (floatX* p : {x, x2, out, res, w, b, dw, db}) CUDA_CHECK(cudaFree(p));
    for (float* p : {mean, rstd, scratch}) CUDA_CHECK(cudaFree(p));
}

int main(void) {
    if (!have_cuda_device("layernorm")) return 0;
    check_forward(300, 768);  // the 16-byte path
    check_forward(67, 97);    // odd C: the one-by-one path
    check_backward(300, 768);
    check_backward(1000, 100);  // chunks of rows over more than one partial
    check_backward(67, 97);
    timings();
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("layernorm [%s]: %d failure(s)\n", PRECISION_NAME, g_failures);
    return g_failures ? 1 : 0;
}
