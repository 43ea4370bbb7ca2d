// dev/cuda/classifier.cu: checks and timings of cuda/classifier.cuh (the fused softmax
// cross-entropy over R rows of V logits) against the CPU trainer's crossentropy_softmax.
// Version 1 is the simplest correct one: a block per row, each thread an online
// (max, sum) over a strided set of elements, a shared-memory tree over the threads,
// then the gradient one element at a time; version 2 is the header's (16-byte
// accesses for the aligned middle of each row, warp-shuffle reductions).
// Build: make -C dev/cuda classifier [PRECISION=FP32], or
//   nvcc -std=c++17 -O3 -arch=sm_90 -I. [-DENABLE_FP32] dev/cuda/classifier.cu dev/cuda/cpu_ref.o -lgomp -o classifier
#include "../../cuda/common.cuh"
#include "../../cuda/classifier.cuh"
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

// ----------------------------------------------------------------------------
// Version 1

#define V1_THREADS 512

__global__ void crossentropy_softmax_v1_kernel(floatX* logits, float* losses, const int* targets, int V, float grad_scale) {
    __shared__ float sm[V1_THREADS], ss[V1_THREADS];
    floatX* row = logits + (size_t)blockIdx.x * V;
    int target = targets[blockIdx.x], t = threadIdx.x;
    float target_logit = to_float(row[target]);
    float m = -INFINITY, s = 0.0f;
    for (int v = t; v < V; v += blockDim.x) online_add(m, s, to_float(row[v]));
    sm[t] = m;
    ss[t] = s;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {  // blockDim.x is a power of two
        if (t < half) {
            online_merge(m, s, sm[t + half], ss[t + half]);
            sm[t] = m;
            ss[t] = s;
        }
        __syncthreads();
    }
    m = sm[0];
    s = ss[0];
    if (t == 0) losses[blockIdx.x] = logf(s) + m - target_logit;
    for (int v = t; v < V; v += blockDim.x)
        row[v] = from_float<floatX>((expf(to_float(row[v]) - m) / s - (v == target ? 1.0f : 0.0f)) * grad_scale);
}

static void crossentropy_softmax_v(int version, floatX* logits, float* losses, const int* targets, int R, int V, float grad_scale) {
    if (version == 1) {
        crossentropy_softmax_v1_kernel<<<R, V1_THREADS>>>(logits, losses, targets, V, grad_scale);
        CUDA_CHECK(cudaGetLastError());
    } else {
        crossentropy_softmax(logits, losses, targets, R, V, grad_scale, 0);
    }
}

// ----------------------------------------------------------------------------

// ok if every |got - want| <= tol * (|want| + 1e-6): small probabilities are checked too
static void check_each(const char* name, const std::vector<float>& got, const std::vector<float>& want, float tol) {
    size_t bad = 0, first = 0;
    double worst = 0.0;
    for (size_t i = 0; i < want.size(); i++) {
        double e = fabs((double)got[i] - (double)want[i]), lim = tol * (fabs((double)want[i]) + 1e-6);
        if (!(e <= lim)) {
            if (bad++ == 0) first = i;
        } else {
            worst = fmax(worst, e / lim * tol);
        }
    }
    if (bad) {
        printf("FAIL %s: %zu of %zu values off by more than %.0e x (|want| + 1e-6); first at [%zu]: got %.8g want %.8g\n", name, bad,
               want.size(), tol, first, got[first], want[first]);
        g_failures++;
    } else {
        printf("ok %s (max err %.2e x (|want| + 1e-6), %zu values)\n", name, worst, want.size());
    }
}

static void check_ce(int R, int V, float grad_scale) {
    char name[160];
    size_t n = (size_t)R * V;
    std::vector<float> logits = rand_x(n, 5.0f);
    for (int r = 0; r < R; r += 3)  // some rows far from zero: needs the max subtracted
        for (int v = 0; v < V; v++) logits[(size_t)r * V + v] = round_x(logits[(size_t)r * V + v] + 40.0f);
    std::vector<int> targets(R);
    for (int r = 0; r < R; r++) targets[r] = irand(V);
    targets[0] = 0;
    targets[R - 1] = V - 1;
    std::vector<float> want = logits, want_loss(R);
    ref_crossentropy_softmax(want.data(), want_loss.data(), targets.data(), R, V);
    for (size_t i = 0; i < n; i++) want[i] *= grad_scale;
    floatX* d_logits = dev_alloc<floatX>(n);
    float* d_losses = dev_alloc<float>(R);
    int* d_targets = dev_copy(targets);
    std::vector<unsigned char> first[2];
    for (int v = 1; v <= 2; v++) {
        for (int rep = 0; rep < (v == 2 ? 2 : 1); rep++) {
            upload_x(d_logits, logits);
            poison(d_losses, R * sizeof(float));
            crossentropy_softmax_v(v, d_logits, d_losses, d_targets, R, V, grad_scale);
            std::vector<unsigned char> got[2] = {download_bytes(d_logits, n * sizeof(floatX)), download_bytes(d_losses, R * sizeof(float))};
            if (rep == 0) {
                snprintf(name, sizeof name, "crossentropy_softmax_v%d R=%d V=%d scale=%g losses", v, R, V, grad_scale);
                check(name, download(d_losses, R), want_loss, 1e-5f);
                snprintf(name, sizeof name, "crossentropy_softmax_v%d R=%d V=%d scale=%g dlogits", v, R, V, grad_scale);
                std::vector<float> g = download_x(d_logits, n);
                check(name, g, want, TOL);
                snprintf(name, sizeof name, "crossentropy_softmax_v%d R=%d V=%d scale=%g dlogits each", v, R, V, grad_scale);
                check_each(name, g, want, TOL);
                first[0] = got[0];
                first[1] = got[1];
            } else {
                snprintf(name, sizeof name, "crossentropy_softmax_v%d R=%d V=%d dlogits deterministic", v, R, V);
                check_bits(name, first[0], got[0]);
                snprintf(name, sizeof name, "crossentropy_softmax_v%d R=%d V=%d losses deterministic", v, R, V);
                check_bits(name, first[1], got[1]);
            }
        }
    }
    CUDA_CHECK(cudaFree(d_logits));
    CUDA_CHECK(cudaFree(d_losses));
    CUDA_CHECK(cudaFree(d_targets));
}

static void timings(void) {
    const int R = 4 * 1024, V = 50257;
    const size_t n = (size_t)R * V, X = sizeof(floatX);
    std::vector<int> targets(R);
    for (int r = 0; r < R; r++) targets[r] = irand(V);
    floatX* logits = dev_alloc<floatX>(n);
    float* losses = dev_alloc<float>(R);
    int* d_targets = dev_copy(targets);
    char name[128];
    for (int v = 1; v <= 2; v++) {
        fill_hash(logits, n, 5.0f, 1);  // later calls see gradients instead of logits: the same work
        // the row is read twice, but the second read should come from L2: count one read and one write
        snprintf(name, sizeof name, "crossentropy_softmax_v%d R=%d V=%d", v, R, V);
        report_time(name, time_ms([&] { crossentropy_softmax_v(v, logits, losses, d_targets, R, V, 1.0f); }, 10), 2.0 * n * X);
    }
    CUDA_CHECK(cudaFree(logits));
    CUDA_CHECK(cudaFree(losses));
    CUDA_CHECK(cudaFree(d_targets));
}

int main(void) {
    if (!have_cuda_device("classifier")) return 0;
    check_ce(16, 50257, 1.0f);  // odd V: rows start at every alignment
    check_ce(9, 50257, 0.25f);
    check_ce(33, 1000, 1.0f);
    check_ce(5, 7, 1.0f);  // V smaller than the vector width and than a warp
    check_ce(3, 1, 1.0f);  // a single class: loss 0, gradient 0
    timings();
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("classifier [%s]: %d failure(s)\n", PRECISION_NAME, g_failures);
    return g_failures ? 1 : 0;
}
