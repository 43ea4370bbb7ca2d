// dev/cuda/rmsnorm.cu: checks and timings of cuda/rmsnorm.cuh (RMSNorm forward, the fused
// residual + RMSNorm forward, RMSNorm backward, each with w and with Gemma 3's 1 + w; the
// per-head q/k RMSNorm) against the CPU twins ref_rmsnorm_forward/backward and
// ref_qk_norm_forward/backward (cpu_ref.h).
// Version 1 is the simplest correct one: one thread per row (as the CPU loop), and for dw
// one thread per channel over all rows in order; version 2 is the header's.
// Build: make -C dev/cuda rmsnorm [PRECISION=FP32]
#include "../../cuda/common.cuh"
#include "../../cuda/rmsnorm.cuh"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // cpu_ref.h brings model/model.h's static helpers
#include "cpu_ref.h"
#pragma GCC diagnostic pop

#include "check.cuh"

#define EPS 1e-5f

// ----------------------------------------------------------------------------
// Version 1: thread per row, like the CPU loop

__global__ void rmsnorm_forward_v1_kernel(floatX* out, float* rstd, const floatX* inp, const floatX* w, int N, int C, float eps) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const floatX* x = inp + (size_t)i * C;
    float ss = 0.0f;
    for (int c = 0; c < C; c++) ss += to_float(x[c]) * to_float(x[c]);
    float s = 1.0f / sqrtf(ss / (float)C + eps);
    for (int c = 0; c < C; c++) out[(size_t)i * C + c] = from_float<floatX>(to_float(x[c]) * s * to_float(w[c]));
    rstd[i] = s;
}

__global__ void rmsnorm_backward_v1_dinp_kernel(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* w, const float* rstd, int N,
                                                int C) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const floatX *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
    float s = rstd[i], gn = 0.0f;
    for (int c = 0; c < C; c++) gn += to_float(dy[c]) * to_float(w[c]) * to_float(x[c]) * s;
    gn /= (float)C;
    floatX* dx = dinp + (size_t)i * C;
    for (int c = 0; c < C; c++)
        dx[c] = from_float<floatX>(to_float(dx[c]) + s * (to_float(dy[c]) * to_float(w[c]) - to_float(x[c]) * s * gn));
}

__global__ void rmsnorm_backward_v1_dw_kernel(float* dw, const floatX* dout, const floatX* inp, const float* rstd, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f;
    for (int i = 0; i < N; i++) sw += to_float(dout[(size_t)i * C + c]) * to_float(inp[(size_t)i * C + c]) * rstd[i];
    dw[c] += sw;
}

static void rmsnorm_forward_v(int version, floatX* out, float* rstd, const floatX* inp, const floatX* w, int N, int C, float one = 0.0f) {
    if (version == 1) {
        rmsnorm_forward_v1_kernel<<<ceil_div(N, 128), 128>>>(out, rstd, inp, w, N, C, EPS);
        CUDA_CHECK(cudaGetLastError());
    } else {
        rmsnorm_forward(out, rstd, inp, w, N, C, EPS, one, 0);
    }
}

static void rmsnorm_backward_v(int version, floatX* dinp, float* dw, float* scratch, const floatX* dout, const floatX* inp, const floatX* w,
                               const float* rstd, int N, int C, float one = 0.0f) {
    if (version == 1) {
        rmsnorm_backward_v1_dinp_kernel<<<ceil_div(N, 128), 128>>>(dinp, dout, inp, w, rstd, N, C);
        CUDA_CHECK(cudaGetLastError());
        rmsnorm_backward_v1_dw_kernel<<<ceil_div(C, 128), 128>>>(dw, dout, inp, rstd, N, C);
        CUDA_CHECK(cudaGetLastError());
    } else {
        rmsnorm_backward(dinp, dw, scratch, dout, inp, w, rstd, N, C, one, 0);
    }
}

// ----------------------------------------------------------------------------

// one: 0, or 1 for the (1 + w) norms of Gemma 3 (version 2 only: version 1 is the plain RMSNorm)
static void check_forward(int N, int C, float one) {
    char name[160];
    size_t n = (size_t)N * C;
    std::vector<float> a = rand_x(n, 2.0f), r = rand_x(n, 1.0f), w = rand_x(C, 1.0f);
    std::vector<float> want(n), want_rstd(N);
    ref_rmsnorm_forward(want.data(), want_rstd.data(), a.data(), w.data(), N, C, EPS, one);
    floatX *d_a = dev_x(a), *d_r = dev_x(r), *d_w = dev_x(w), *d_out = dev_alloc<floatX>(n), *d_res = dev_alloc<floatX>(n);
    float* d_rstd = dev_alloc<float>(N);
    std::vector<unsigned char> first;
    for (int v = one != 0 ? 2 : 1; v <= 2; v++) {
        for (int rep = 0; rep < (v == 2 ? 2 : 1); rep++) {
            poison(d_out, n * sizeof(floatX));
            poison(d_rstd, N * sizeof(float));
            rmsnorm_forward_v(v, d_out, d_rstd, d_a, d_w, N, C, one);
            if (rep == 0) {
                snprintf(name, sizeof name, "rmsnorm_forward_v%d N=%d C=%d one=%g out", v, N, C, one);
                check(name, download_x(d_out, n), want, TOL);
                snprintf(name, sizeof name, "rmsnorm_forward_v%d N=%d C=%d one=%g rstd", v, N, C, one);
                check(name, download(d_rstd, N), want_rstd, 1e-4f);
                first = download_bytes(d_out, n * sizeof(floatX));
            } else {
                snprintf(name, sizeof name, "rmsnorm_forward_v%d N=%d C=%d one=%g deterministic", v, N, C, one);
                check_bits(name, first, download_bytes(d_out, n * sizeof(floatX)));
            }
        }
    }
    // fused: residual = round(r + a2) with a2 = a - r, so the CPU reference is the RMSNorm of the stored residual
    std::vector<float> a2(n), res(n);
    for (size_t i = 0; i < n; i++) {
        a2[i] = round_x(a[i] - r[i]);
        res[i] = round_x(r[i] + a2[i]);
    }
    ref_rmsnorm_forward(want.data(), want_rstd.data(), res.data(), w.data(), N, C, EPS, one);
    floatX* d_a2 = dev_x(a2);
    poison(d_out, n * sizeof(floatX));
    poison(d_res, n * sizeof(floatX));
    poison(d_rstd, N * sizeof(float));
    fused_residual_rmsnorm_forward(d_res, d_out, d_rstd, d_r, d_a2, d_w, N, C, EPS, one, 0);
    snprintf(name, sizeof name, "fused_residual_rmsnorm_forward N=%d C=%d one=%g residual", N, C, one);
    check(name, download_x(d_res, n), res, 0.0f);
    snprintf(name, sizeof name, "fused_residual_rmsnorm_forward N=%d C=%d one=%g out", N, C, one);
    check(name, download_x(d_out, n), want, TOL);
    snprintf(name, sizeof name, "fused_residual_rmsnorm_forward N=%d C=%d one=%g rstd", N, C, one);
    check(name, download(d_rstd, N), want_rstd, 1e-4f);
    // backward's recompute runs the plain RMSNorm on the stored residual: the fused kernel's output bit for bit
    std::vector<unsigned char> fused_out = download_bytes(d_out, n * sizeof(floatX));
    floatX* d_out2 = dev_alloc<floatX>(n);
    poison(d_out2, n * sizeof(floatX));
    rmsnorm_forward(d_out2, d_rstd, d_res, d_w, N, C, EPS, one, 0);
    snprintf(name, sizeof name, "fused_residual_rmsnorm_forward N=%d C=%d one=%g equals rmsnorm_forward of the residual", N, C, one);
    check_bits(name, fused_out, download_bytes(d_out2, n * sizeof(floatX)));
    // as train_sft.cu calls it: the product's output in out's buffer (operand b is out)
    upload_x(d_out2, a2);
    poison(d_res, n * sizeof(floatX));
    fused_residual_rmsnorm_forward(d_res, d_out2, d_rstd, d_r, d_out2, d_w, N, C, EPS, one, 0);
    snprintf(name, sizeof name, "fused_residual_rmsnorm_forward N=%d C=%d one=%g in place (b is out)", N, C, one);
    check_bits(name, fused_out, download_bytes(d_out2, n * sizeof(floatX)));
    for (floatX* p : {d_a, d_r, d_w, d_out, d_res, d_a2, d_out2}) CUDA_CHECK(cudaFree(p));
    CUDA_CHECK(cudaFree(d_rstd));
}

static void check_backward(int N, int C, float one) {
    char name[160];
    size_t n = (size_t)N * C;
    std::vector<float> x = rand_x(n, 2.0f), w = rand_x(C, 1.0f), dout = rand_x(n, 1.0f);
    std::vector<float> dinp0 = rand_x(n, 0.5f), dw0 = rand_f(C, 0.5f), y(n), rstd(N);
    ref_rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, EPS, one);
    std::vector<float> want_dinp = dinp0, want_dw = dw0;
    ref_rmsnorm_backward(want_dinp.data(), want_dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C, one);
    floatX *d_x = dev_x(x), *d_w = dev_x(w), *d_dout = dev_x(dout), *d_dinp = dev_x(dinp0);
    float *d_dw = dev_copy(dw0), *d_rstd = dev_copy(rstd);
    size_t nscratch = rmsnorm_backward_scratch_floats(N, C);
    float* scratch = dev_alloc<float>(nscratch);
    std::vector<unsigned char> first[2];
    for (int v = one != 0 ? 2 : 1; v <= 2; v++) {
        for (int rep = 0; rep < (v == 2 ? 2 : 1); rep++) {
            upload_x(d_dinp, dinp0);
            CUDA_CHECK(cudaMemcpy(d_dw, dw0.data(), C * sizeof(float), cudaMemcpyHostToDevice));
            poison(scratch, nscratch * sizeof(float));
            rmsnorm_backward_v(v, d_dinp, d_dw, scratch, d_dout, d_x, d_w, d_rstd, N, C, one);
            std::vector<unsigned char> got[2] = {download_bytes(d_dinp, n * sizeof(floatX)), download_bytes(d_dw, C * sizeof(float))};
            if (rep == 0) {
                snprintf(name, sizeof name, "rmsnorm_backward_v%d N=%d C=%d one=%g dinp", v, N, C, one);
                check(name, download_x(d_dinp, n), want_dinp, TOL);
                snprintf(name, sizeof name, "rmsnorm_backward_v%d N=%d C=%d one=%g dw", v, N, C, one);
                check(name, download(d_dw, C), want_dw, TOL_GRAD32);
                for (int k = 0; k < 2; k++) first[k] = got[k];
            } else {
                const char* what[2] = {"dinp", "dw"};
                for (int k = 0; k < 2; k++) {
                    snprintf(name, sizeof name, "rmsnorm_backward_v%d N=%d C=%d one=%g %s deterministic", v, N, C, one, what[k]);
                    check_bits(name, first[k], got[k]);
                }
            }
        }
    }
    for (floatX* p : {d_x, d_w, d_dout, d_dinp}) CUDA_CHECK(cudaFree(p));
    for (float* p : {d_dw, d_rstd, scratch}) CUDA_CHECK(cudaFree(p));
}

// Per-head q/k RMSNorm in place on qkv rows (BT, (NH + 2 KVH) HS), forward and backward,
// against ref_qk_norm_forward/backward: the normed q and k (v untouched), raw and rstd, the
// gradients of q and k before the norms (v's gradient untouched) and of the weights.
static void check_qk_norm(int BT, int NH, int KVH, int HS, float one) {
    char name[160];
    int H = NH + KVH, QKV = (NH + 2 * KVH) * HS;
    size_t n = (size_t)BT * QKV, nr = (size_t)BT * H * HS;
    std::vector<float> qkv = rand_x(n, 2.0f), wq = rand_x(HS, 1.0f), wk = rand_x(HS, 1.0f), dqkv = rand_x(n, 1.0f);
    std::vector<float> dwq0 = rand_f(HS, 0.5f), dwk0 = rand_f(HS, 0.5f);
    std::vector<float> want = qkv, want_raw(nr), want_rstd((size_t)BT * H), want_d = dqkv, want_dwq = dwq0, want_dwk = dwk0;
    ref_qk_norm_forward(want.data(), want_raw.data(), want_rstd.data(), wq.data(), wk.data(), BT, NH, KVH, HS, EPS, one);
    ref_qk_norm_backward(want_d.data(), want_dwq.data(), want_dwk.data(), want_raw.data(), want_rstd.data(), wq.data(), wk.data(), BT, NH, KVH,
                         HS, one);
    floatX *d_qkv = dev_x(qkv), *d_raw = dev_alloc<floatX>(nr), *d_wq = dev_x(wq), *d_wk = dev_x(wk), *d_d = dev_x(dqkv);
    float *d_rstd = dev_alloc<float>((size_t)BT * H), *d_dwq = dev_copy(dwq0), *d_dwk = dev_copy(dwk0);
    size_t nscratch = qk_norm_backward_scratch_floats(BT, HS);
    float* scratch = dev_alloc<float>(nscratch);
    poison(d_raw, nr * sizeof(floatX));
    poison(d_rstd, (size_t)BT * H * sizeof(float));
    poison(scratch, nscratch * sizeof(float));
    qk_norm_forward(d_qkv, d_raw, d_rstd, d_wq, d_wk, BT, NH, KVH, HS, EPS, one, 0);
    // the backward reads the device's own raw and rstd (their check above is against the CPU's)
    qk_norm_backward(d_d, d_dwq, d_dwk, scratch, d_raw, d_rstd, d_wq, d_wk, BT, NH, KVH, HS, one, 0);
    const char* shape = "BT=%d NH=%d KVH=%d HS=%d one=%g";
    char sh[96];
    snprintf(sh, sizeof sh, shape, BT, NH, KVH, HS, one);
    snprintf(name, sizeof name, "qk_norm_forward %s qkv", sh);
    check(name, download_x(d_qkv, n), want, TOL);
    snprintf(name, sizeof name, "qk_norm_forward %s raw", sh);
    check(name, download_x(d_raw, nr), want_raw, 0.0f);
    snprintf(name, sizeof name, "qk_norm_forward %s rstd", sh);
    check(name, download(d_rstd, (size_t)BT * H), want_rstd, 1e-4f);
    snprintf(name, sizeof name, "qk_norm_backward %s dqkv", sh);
    check(name, download_x(d_d, n), want_d, TOL);
    snprintf(name, sizeof name, "qk_norm_backward %s dwq", sh);
    check(name, download(d_dwq, HS), want_dwq, TOL_GRAD32);
    snprintf(name, sizeof name, "qk_norm_backward %s dwk", sh);
    check(name, download(d_dwk, HS), want_dwk, TOL_GRAD32);
    // deterministic: the same weight gradients bit for bit on a second run
    std::vector<unsigned char> first = download_bytes(d_dwq, HS * sizeof(float));
    CUDA_CHECK(cudaMemcpy(d_dwq, dwq0.data(), HS * sizeof(float), cudaMemcpyHostToDevice));
    upload_x(d_d, dqkv);
    qk_norm_backward(d_d, d_dwq, d_dwk, scratch, d_raw, d_rstd, d_wq, d_wk, BT, NH, KVH, HS, one, 0);
    snprintf(name, sizeof name, "qk_norm_backward %s dwq deterministic", sh);
    check_bits(name, first, download_bytes(d_dwq, HS * sizeof(float)));
    for (floatX* p : {d_qkv, d_raw, d_wq, d_wk, d_d}) CUDA_CHECK(cudaFree(p));
    for (float* p : {d_rstd, d_dwq, d_dwk, scratch}) CUDA_CHECK(cudaFree(p));
}

static void timings(void) {
    const int N = 4 * 1024, C = 960;  // SmolLM2-360M's width
    const size_t n = (size_t)N * C, X = sizeof(floatX);
    floatX *x = dev_alloc<floatX>(n), *x2 = dev_alloc<floatX>(n), *out = dev_alloc<floatX>(n), *res = dev_alloc<floatX>(n);
    floatX* w = dev_alloc<floatX>(C);
    float *dw = dev_alloc<float>(C), *rstd = dev_alloc<float>(N), *scratch = dev_alloc<float>(rmsnorm_backward_scratch_floats(N, C));
    fill_hash(x, n, 2.0f, 1);
    fill_hash(x2, n, 1.0f, 2);
    fill_hash(w, C, 1.0f, 3);
    CUDA_CHECK(cudaMemset(dw, 0, C * sizeof(float)));
    rmsnorm_forward(out, rstd, x, w, N, C, EPS, 0.0f, 0);
    char name[128];
    for (int v = 1; v <= 2; v++) {
        // forward: read x, write out
        snprintf(name, sizeof name, "rmsnorm_forward_v%d N=%d C=%d", v, N, C);
        report_time(name, time_ms([&] { rmsnorm_forward_v(v, out, rstd, x, w, N, C); }, 20), 2.0 * n * X);
        // backward: read dout, inp, dinp and write dinp; the dw pass re-reads dout and inp (counted once)
        snprintf(name, sizeof name, "rmsnorm_backward_v%d N=%d C=%d", v, N, C);
        report_time(name, time_ms([&] { rmsnorm_backward_v(v, res, dw, scratch, x2, x, w, rstd, N, C); }, 20), 4.0 * n * X);
    }
    // fused: read a and b, write residual and out
    snprintf(name, sizeof name, "fused_residual_rmsnorm_forward N=%d C=%d", N, C);
    report_time(name, time_ms([&] { fused_residual_rmsnorm_forward(res, out, rstd, x, x2, w, N, C, EPS, 0.0f, 0); }, 20), 4.0 * n * X);
    for (floatX* p : {x, x2, out, res, w}) CUDA_CHECK(cudaFree(p));
    for (float* p : {dw, rstd, scratch}) CUDA_CHECK(cudaFree(p));
}

int main(void) {
    if (!have_cuda_device("rmsnorm")) return 0;
    for (float one : {0.0f, 1.0f}) {  // w, and Gemma 3's 1 + w
        check_forward(300, 576, one);  // SmolLM2-135M's width: the 16-byte path
        check_forward(67, 97, one);    // odd C: the one-by-one path
        check_backward(300, 576, one);
        check_backward(1000, 100, one);  // chunks of rows over more than one partial
        check_backward(67, 97, one);
    }
    check_qk_norm(300, 4, 2, 64, 0.0f);  // Qwen3-like: GQA, plain weights
    check_qk_norm(300, 4, 2, 64, 1.0f);  // Gemma 3: 1 + w
    check_qk_norm(70, 3, 1, 40, 1.0f);   // a head size not a multiple of 32, a partial chunk of rows
    timings();
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("rmsnorm [%s]: %d failure(s)\n", PRECISION_NAME, g_failures);
    return g_failures ? 1 : 0;
}
