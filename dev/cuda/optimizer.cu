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
#pragma GCC diagnostic ignored "-Wunused-function"  // cpu_ref.h brings model/model.h's static helpers
#include "cpu_ref.h"
#pragma GCC diagnostic pop

#include "check.cuh"

#define LR 1e-3f
#define BETA1 0.9f
#define BETA2 0.95f
#define ADAM_EPS 1e-8f
#define WD 0.1f

// ----------------------------------------------------------------------------
// Version 1

#define V1_THREADS 1024

__global__ void norm_v1_kernel(float* out, const float* g, size_t n) {
    __shared__ float sums[V1_THREADS];
    float acc = 0.0f;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
        float x = g[i];
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

__global__ void adamw_v1_kernel(float* master, floatX* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
                                float beta2, float eps, float wd, float step_size, float bc2_sqrt, const float* grad_scale) {
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    float g = grads[k] * *grad_scale;
    float p = master ? master[k] : to_float(params[k]);
    p *= 1.0f - lr * wd;
    m[k] = beta1 * m[k] + (1.0f - beta1) * g;
    v[k] = beta2 * v[k] + (1.0f - beta2) * g * g;
    p -= step_size * m[k] / (sqrtf(v[k]) / bc2_sqrt + eps);
    if (master) master[k] = p;
    params[k] = from_float<floatX>(p);
}

static void norm_v(int version, float* out, float* scratch, const float* g, size_t n) {
    if (version == 1) {
        norm_v1_kernel<<<1, V1_THREADS>>>(out, g, n);
        CUDA_CHECK(cudaGetLastError());
    } else {
        global_norm_squared(out, scratch, g, n, 0);
    }
}

static void adamw_v(int version, float* master, floatX* params, const float* grads, float* m, float* v, size_t n, const float* grad_scale,
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
    std::vector<float> g = rand_f(n + off, 1.0f);
    double want = 0.0;
    for (size_t i = off; i < n + off; i++) want += (double)g[i] * g[i];
    float* d_g = dev_copy(g);
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
    std::vector<float> master(nn), grads = rand_f(nn, 1.0f), m(nn), v(nn), params(nn);
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
    floatX* d_params = dev_alloc<floatX>(nn);
    float* d_grads = dev_copy(grads);
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
    for (float* p : {d_grads, d_master, d_m, d_v, d_gs}) CUDA_CHECK(cudaFree(p));
}

static void timings(void) {
    const size_t n = 124439808;  // GPT-2 124M
    const size_t X = sizeof(floatX);
    floatX* params = dev_alloc<floatX>(n);
    float *grads = dev_alloc<float>(n), *master = dev_alloc<float>(n), *m = dev_alloc<float>(n), *v = dev_alloc<float>(n);
    float *out = dev_alloc<float>(1), *scratch = dev_alloc<float>(global_norm_scratch_floats()), *gs = dev_copy(std::vector<float>(1, 1.0f));
    fill_hash(params, n, 0.1f, 1);
    CUDA_CHECK(cudaMemset(grads, 0, n * sizeof(float)));
    CUDA_CHECK(cudaMemset(master, 0, n * sizeof(float)));
    CUDA_CHECK(cudaMemset(m, 0, n * sizeof(float)));
    CUDA_CHECK(cudaMemset(v, 0, n * sizeof(float)));
    char name[128];
    for (int ver = 1; ver <= 2; ver++) {
        // norm: read the gradients once
        snprintf(name, sizeof name, "global_norm_squared_v%d n=%zu", ver, n);
        report_time(name, time_ms([&] { norm_v(ver, out, scratch, grads, n); }, 5), (double)n * sizeof(float));
        // AdamW: read master, grads, m, v; write master, params, m, v (all fp32 but params)
        snprintf(name, sizeof name, "adamw_v%d n=%zu", ver, n);
        report_time(name, time_ms([&] { adamw_v(ver, master, params, grads, m, v, n, gs, 1); }, 5), (double)n * (28 + X));
    }
    CUDA_CHECK(cudaFree(params));
    for (float* p : {grads, master, m, v, out, scratch, gs}) CUDA_CHECK(cudaFree(p));
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
