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
#pragma GCC diagnostic ignored "-Wunused-function"  // cpu_ref.h brings model/model.h's static helpers
#include "cpu_ref.h"
#pragma GCC diagnostic pop

#include "check.cuh"

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

__global__ void layernorm_backward_v1_dwdb_kernel(float* dw, float* db, const floatX* dout, const floatX* inp, const float* mean,
                                                  const float* rstd, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int i = 0; i < N; i++) {
        float dy = to_float(dout[(size_t)i * C + c]);
        sw += dy * (to_float(inp[(size_t)i * C + c]) - mean[i]) * rstd[i];
        sb += dy;
    }
    dw[c] += sw;
    db[c] += sb;
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

static void layernorm_backward_v(int version, floatX* dinp, float* dw, float* db, float* scratch, const floatX* dout, const floatX* inp,
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
    // backward's recompute (-r 1, -r 2) runs the plain LayerNorm on the stored residual:
    // it must give the fused kernel's output bit for bit
    std::vector<unsigned char> fused_out = download_bytes(d_out, n * sizeof(floatX));
    floatX* d_out2 = dev_alloc<floatX>(n);
    poison(d_out2, n * sizeof(floatX));
    layernorm_forward(d_out2, d_mean, d_rstd, d_res, d_w, d_b, N, C, EPS, 0);
    snprintf(name, sizeof name, "fused_residual_layernorm_forward N=%d C=%d equals layernorm_forward of the residual", N, C);
    check_bits(name, fused_out, download_bytes(d_out2, n * sizeof(floatX)));
    // as train_sft.cu calls it: the product's output in ln_out's buffer (operand b is ln_out)
    upload_x(d_out2, a2);
    poison(d_res, n * sizeof(floatX));
    fused_residual_layernorm_forward(d_res, d_out2, d_mean, d_rstd, d_r, d_out2, d_w, d_b, N, C, EPS, 0);
    snprintf(name, sizeof name, "fused_residual_layernorm_forward N=%d C=%d in place (b is ln_out)", N, C);
    check_bits(name, fused_out, download_bytes(d_out2, n * sizeof(floatX)));
    for (floatX* p : {d_a, d_r, d_w, d_b, d_out, d_res, d_a2, d_out2}) CUDA_CHECK(cudaFree(p));
    CUDA_CHECK(cudaFree(d_mean));
    CUDA_CHECK(cudaFree(d_rstd));
}

static void check_backward(int N, int C) {
    char name[160];
    size_t n = (size_t)N * C;
    std::vector<float> x = rand_x(n, 2.0f), w = rand_x(C, 1.0f), b = rand_x(C, 0.5f), dout = rand_x(n, 1.0f);
    std::vector<float> dinp0 = rand_x(n, 0.5f), dw0(C), db0(C), y(n), mean(N), rstd(N);
    for (int c = 0; c < C; c++) { dw0[c] = 0.5f * frand(); db0[c] = 0.5f * frand(); }  // fp32 gradients: any float
    ref_layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, EPS);
    std::vector<float> want_dinp = dinp0, want_dw = dw0, want_db = db0;
    ref_layernorm_backward(want_dinp.data(), want_dw.data(), want_db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    floatX *d_x = dev_x(x), *d_w = dev_x(w), *d_dout = dev_x(dout), *d_dinp = dev_x(dinp0);
    float *d_dw = dev_copy(dw0), *d_db = dev_copy(db0), *d_mean = dev_copy(mean), *d_rstd = dev_copy(rstd);
    size_t nscratch = layernorm_backward_scratch_floats(N, C);
    float* scratch = dev_alloc<float>(nscratch);
    std::vector<unsigned char> first[3];
    for (int v = 1; v <= 2; v++) {
        for (int rep = 0; rep < (v == 2 ? 2 : 1); rep++) {
            upload_x(d_dinp, dinp0);
            CUDA_CHECK(cudaMemcpy(d_dw, dw0.data(), C * sizeof(float), cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemcpy(d_db, db0.data(), C * sizeof(float), cudaMemcpyHostToDevice));
            poison(scratch, nscratch * sizeof(float));
            layernorm_backward_v(v, d_dinp, d_dw, d_db, scratch, d_dout, d_x, d_w, d_mean, d_rstd, N, C);
            std::vector<unsigned char> got[3] = {download_bytes(d_dinp, n * sizeof(floatX)), download_bytes(d_dw, C * sizeof(float)),
                                                 download_bytes(d_db, C * sizeof(float))};
            if (rep == 0) {
                snprintf(name, sizeof name, "layernorm_backward_v%d N=%d C=%d dinp", v, N, C);
                check(name, download_x(d_dinp, n), want_dinp, TOL);
                snprintf(name, sizeof name, "layernorm_backward_v%d N=%d C=%d dw", v, N, C);
                check(name, download(d_dw, C), want_dw, TOL_GRAD32);
                snprintf(name, sizeof name, "layernorm_backward_v%d N=%d C=%d db", v, N, C);
                check(name, download(d_db, C), want_db, TOL_GRAD32);
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
    for (floatX* p : {d_x, d_w, d_dout, d_dinp}) CUDA_CHECK(cudaFree(p));
    for (float* p : {d_dw, d_db, d_mean, d_rstd, scratch}) CUDA_CHECK(cudaFree(p));
}

static void timings(void) {
    const int N = 4 * 1024, C = 768;
    const size_t n = (size_t)N * C, X = sizeof(floatX);
    floatX *x = dev_alloc<floatX>(n), *x2 = dev_alloc<floatX>(n), *out = dev_alloc<floatX>(n), *res = dev_alloc<floatX>(n);
    floatX *w = dev_alloc<floatX>(C), *b = dev_alloc<floatX>(C);
    float *dw = dev_alloc<float>(C), *db = dev_alloc<float>(C);
    float *mean = dev_alloc<float>(N), *rstd = dev_alloc<float>(N), *scratch = dev_alloc<float>(layernorm_backward_scratch_floats(N, C));
    fill_hash(x, n, 2.0f, 1);
    fill_hash(x2, n, 1.0f, 2);
    fill_hash(w, C, 1.0f, 3);
    fill_hash(b, C, 1.0f, 4);
    CUDA_CHECK(cudaMemset(dw, 0, C * sizeof(float)));
    CUDA_CHECK(cudaMemset(db, 0, C * sizeof(float)));
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
    for (floatX* p : {x, x2, out, res, w, b}) CUDA_CHECK(cudaFree(p));
    for (float* p : {dw, db, mean, rstd, scratch}) CUDA_CHECK(cudaFree(p));
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
