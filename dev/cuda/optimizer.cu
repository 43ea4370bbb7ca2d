// dev/cuda/optimizer.cu: checks and timings of cuda/optimizer.cuh (the global squared
// gradient norm and the AdamW update) against a double-precision loop and the CPU
// trainer's adamw_tensor (cpu_ref.h: ref_adamw).
// Version 1 is the simplest correct one: the norm by a single block (strided fp32
// sums, a shared-memory tree), AdamW one thread per parameter; version 2 is the
// header's (a fixed grid of partial sums then one block; 4 parameters per thread).
// Build: make -C dev/cuda optimizer [PRECISION=FP32], or
//   nvcc -std=c++17 -O3 -arch=sm_90 -I. [-DENABLE_FP32] dev/cuda/optimizer.cu dev/cuda/cpu_ref.o -lgomp -o optimizer
#include "../../cuda/common.cuh"
#include "../../cuda/optimizer.cuh"
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

#define LR 1e-3f
#define BETA1 0.9f
#define BETA2 0.95f
#define ADAM_EPS 1e-8f
#define WD 0.1f

// ----------------------------------------------------------------------------
// Version 1

#define V1_THREADS 1024

__global__ void norm_v1_kernel(float* out, const floatX* g, size_t n) {
    __shared__ float sums[V1_THREADS];
    float acc = 0.0f;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
        float x = to_float(g[i]);
        acc += x * x;
    }
    sums[threadIdx.x] = acc;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = sums[0];
}

__global__ void adamw_v1_kernel(float* master, floatX* params, const floatX* grads, float* m, float* v, size_t n, float lr, float beta1,
                                float beta2, float eps, float wd, float step_size, float bc2_sqrt, const float* grad_scale) {
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    float g = to_float(grads[k]) * *grad_scale;
    float p = master ? master[k] : to_float(params[k]);
    p *= 1.0f - lr * wd;
    m[k] = beta1 * m[k] + (1.0f - beta1) * g;
    v[k] = beta2 * v[k] + (1.0f - beta2) * g * g;
    p -= step_size * m[k] / (sqrtf(v[k]) / bc2_sqrt + eps);
    if (master) master[k] = p;
    params[k] = from_float<floatX>(p);
}

static void norm_v(int version, float* out, float* scratch, const floatX* g, size_t n) {
    if (version == 1) {
        norm_v1_kernel<<<1, V1_THREADS>>>(out, g, n);
        CUDA_CHECK(cudaGetLastError());
    } else {
        global_norm_squared(out, scratch, g, n, 0);
    }
}

static void adamw_v(int version, float* master, floatX* params, const floatX* grads, float* m, float* v, size_t n, const float* grad_scale,
                    int t) {
    if (version == 1) {
        float step_size = LR / (1.0f - powf(BETA1, (float)t)), bc2_sqrt = sqrtf(1.0f - powf(BETA2, (float)t));
        adamw_v1_kernel<<<ceil_div((long)n, 256), 256>>>(master, params, grads, m, v, n, LR, BETA1, BETA2, ADAM_EPS, WD, step_size, bc2_sqrt,
                                                          grad_scale);
        CUDA_CHECK(cudaGetLastError());
    } else {
        adamw_update(master, params, grads, m, v, n, LR, BETA1, BETA2, ADAM_EPS, WD, grad_scale, t, 0);
    }
}

// ----------------------------------------------------------------------------

// off: element offset of the data (1: unaligned, the one-by-one path)
static void check_norm(size_t n, int off) {
    char name[128];
    std::vector<float> g = rand_x(n + off, 1.0f);
    double want = 0.0;
    for (size_t i = off; i < n + off; i++) want += (double)g[i] * g[i];
    floatX* d_g = dev_x(g);
    float *d_out = dev_alloc<float>(1), *scratch = dev_alloc<float>(global_norm_scratch_floats());
    std::vector<unsigned char> first;
    for (int v = 1; v <= 2; v++) {
        for (int rep = 0; rep < (v == 2 ? 2 : 1); rep++) {
            poison(d_out, sizeof(float));
            poison(scratch, global_norm_scratch_floats() * sizeof(float));
            norm_v(v, d_out, scratch, d_g + off, n);
            if (rep == 0) {
                snprintf(name, sizeof name, "global_norm_squared_v%d n=%zu off=%d", v, n, off);
                check(name, download(d_out, 1), std::vector<float>(1, (float)want), 1e-5f);
                first = download_bytes(d_out, sizeof(float));
            } else {
                snprintf(name, sizeof name, "global_norm_squared_v%d n=%zu off=%d deterministic", v, n, off);
                check_bits(name, first, download_bytes(d_out, sizeof(float)));
            }
        }
    }
    CUDA_CHECK(cudaFree(d_g));
    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(scratch));
}

// alias: no separate master weights (fp32 build: master == params; bf16 build: master = null, params are read)
static void check_adamw(size_t n, int off, bool alias) {
    char name[160];
    const int t = 3;
    const float gs = 0.5f;
    size_t nn = n + off;
    std::vector<float> master(nn), grads = rand_x(nn, 1.0f), m(nn), v(nn), params(nn);
    for (size_t i = 0; i < nn; i++) {
        master[i] = frand();
        params[i] = round_x(master[i]);
        m[i] = 0.1f * frand();
        v[i] = 0.01f * fabsf(frand());
    }
    // reference, from the same start: the master weights (or the params when aliased)
    std::vector<float> want_p(alias ? params : master), want_m(m), want_v(v), g_eff(nn), want_params(nn);
    for (size_t i = 0; i < nn; i++) g_eff[i] = grads[i] * gs;
    ref_adamw(want_p.data() + off, g_eff.data() + off, want_m.data() + off, want_v.data() + off, (long)n, LR, BETA1, BETA2, ADAM_EPS, WD, t);
    for (size_t i = 0; i < nn; i++) want_params[i] = round_x(want_p[i]);
    auto tail = [&](const std::vector<float>& a) { return std::vector<float>(a.begin() + off, a.end()); };
    floatX *d_params = dev_alloc<floatX>(nn), *d_grads = dev_x(grads);
    float *d_master = dev_alloc<float>(nn), *d_m = dev_alloc<float>(nn), *d_v = dev_alloc<float>(nn), *d_gs = dev_copy(std::vector<float>(1, gs));
#ifdef ENABLE_FP32
    float* master_arg = alias ? d_params : d_master;
#else
    float* master_arg = alias ? nullptr : d_master;
#endif
    std::vector<unsigned char> first[4];
    for (int ver = 1; ver <= 2; ver++) {
        for (int rep = 0; rep < (ver == 2 ? 2 : 1); rep++) {
            upload_x(d_params, params);
            CUDA_CHECK(cudaMemcpy(d_master, master.data(), nn * sizeof(float), cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemcpy(d_m, m.data(), nn * sizeof(float), cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemcpy(d_v, v.data(), nn * sizeof(float), cudaMemcpyHostToDevice));
            adamw_v(ver, master_arg ? master_arg + off : nullptr, d_params + off, d_grads + off, d_m + off, d_v + off, n, d_gs, t);
            std::vector<unsigned char> got[4] = {download_bytes(d_params, nn * sizeof(floatX)), download_bytes(d_master, nn * sizeof(float)),
                                                 download_bytes(d_m, nn * sizeof(float)), download_bytes(d_v, nn * sizeof(float))};
            const char* mode = alias ? " no-master" : "";
            if (rep == 0) {
                snprintf(name, sizeof name, "adamw_v%d n=%zu off=%d%s params", ver, n, off, mode);
                check(name, tail(download_x(d_params, nn)), tail(want_params), TOL);
                if (!alias) {
                    snprintf(name, sizeof name, "adamw_v%d n=%zu off=%d%s master", ver, n, off, mode);
                    check(name, tail(download(d_master, nn)), tail(want_p), 1e-5f);
                }
                snprintf(name, sizeof name, "adamw_v%d n=%zu off=%d%s m", ver, n, off, mode);
                check(name, tail(download(d_m, nn)), tail(want_m), 1e-5f);
                snprintf(name, sizeof name, "adamw_v%d n=%zu off=%d%s v", ver, n, off, mode);
                check(name, tail(download(d_v, nn)), tail(want_v), 1e-5f);
                for (int k = 0; k < 4; k++) first[k] = got[k];
            } else {
                std::vector<unsigned char> a, b;  // params, master, m, v of both runs, end to end
                for (int k = 0; k < 4; k++) {
                    a.insert(a.end(), first[k].begin(), first[k].end());
                    b.insert(b.end(), got[k].begin(), got[k].end());
                }
                snprintf(name, sizeof name, "adamw_v%d n=%zu off=%d%s deterministic", ver, n, off, mode);
                check_bits(name, a, b);
            }
        }
    }
    CUDA_CHECK(cudaFree(d_params));
    CUDA_CHECK(cudaFree(d_grads));
    for (float* p : {d_master, d_m, d_v, d_gs}) CUDA_CHECK(cudaFree(p));
}

static void timings(void) {
    const size_t n = 124439808;  // GPT-2 124M
    const size_t X = sizeof(floatX);
    floatX *params = dev_alloc<floatX>(n), *grads = dev_alloc<floatX>(n);
    float *master = dev_alloc<float>(n), *m = dev_alloc<float>(n), *v = dev_alloc<float>(n);
    float *out = dev_alloc<float>(1), *scratch = dev_alloc<float>(global_norm_scratch_floats()), *gs = dev_copy(std::vector<float>(1, 1.0f));
    fill_hash(params, n, 0.1f, 1);
    fill_hash(grads, n, 1e-3f, 2);
    CUDA_CHECK(cudaMemset(master, 0, n * sizeof(float)));
    CUDA_CHECK(cudaMemset(m, 0, n * sizeof(float)));
    CUDA_CHECK(cudaMemset(v, 0, n * sizeof(float)));
    char name[128];
    for (int ver = 1; ver <= 2; ver++) {
        // norm: read the gradients once
        snprintf(name, sizeof name, "global_norm_squared_v%d n=%zu", ver, n);
        report_time(name, time_ms([&] { norm_v(ver, out, scratch, grads, n); }, 5), (double)n * X);
        // AdamW: read master, grads, m, v; write master, params, m, v
        snprintf(name, sizeof name, "adamw_v%d n=%zu", ver, n);
        report_time(name, time_ms([&] { adamw_v(ver, master, params, grads, m, v, n, gs, 1); }, 5), (double)n * (24 + 2 * X));
    }
    CUDA_CHECK(cudaFree(params));
    CUDA_CHECK(cudaFree(grads));
    for (float* p : {master, m, v, out, scratch, gs}) CUDA_CHECK(cudaFree(p));
}

int main(void) {
    if (!have_cuda_device("optimizer")) return 0;
    check_norm(1000003, 0);  // a partial group at the end
    check_norm(100001, 1);   // unaligned: the one-by-one path
    check_norm(5, 0);        // fewer values than a group
    check_adamw(100003, 0, false);
    check_adamw(10001, 1, false);
    check_adamw(10003, 0, true);
    timings();
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("optimizer [%s]: %d failure(s)\n", PRECISION_NAME, g_failures);
    return g_failures ? 1 : 0;
}
