// dev/cuda/emu/selftest_lt.cu: checks the emulated cuBLASLt (cublaslt.cpp) against a plain
// double-precision loop written here from the documented semantics, for every emulated
// epilogue, both transposes, beta 0 and 1 and the three type combinations; then the error
// statuses real cuBLASLt gives for bad leading dimensions, aux ld, a missing bias pointer,
// a pointer less aligned than promised and an unsupported epilogue; then the environment's
// modes: EMU_LT_REFUSE (no algorithm for the listed epilogues) and EMU_LT_TANH=approx (the
// GELU epilogue's tanh off by the full 2^-11 of the hardware's approximation, no more).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

static int failures = 0;
static void report(bool ok, const char *name, const char *detail) {
    printf("%s selftest_lt %s%s%s\n", ok ? "ok" : "FAIL", name, ok ? "" : ": ", ok ? "" : detail);
    if (!ok) failures++;
}
static unsigned rng = 12345;
static float frand() { rng = rng * 1664525u + 1013904223u; return (float)(rng >> 8) / 8388608.0f - 1.0f; }
static float round_to(cudaDataType_t t, float x) { return t == CUDA_R_32F ? x : __bfloat162float(__float2bfloat16(x)); }
static size_t tsize(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }
static void *upload(const std::vector<float> &v, cudaDataType_t t) {
    void *d;
    cudaMalloc(&d, v.size() * tsize(t) + 256);
    std::vector<unsigned char> raw(v.size() * tsize(t));
    for (size_t i = 0; i < v.size(); i++) {
        if (t == CUDA_R_32F) memcpy(&raw[i * 4], &v[i], 4);
        else { __nv_bfloat16 b = __float2bfloat16(v[i]); memcpy(&raw[i * 2], &b, 2); }
    }
    cudaMemcpy(d, raw.data(), raw.size(), cudaMemcpyHostToDevice);
    return d;
}
static std::vector<float> download(const void *d, size_t n, cudaDataType_t t) {
    std::vector<unsigned char> raw(n * tsize(t));
    cudaMemcpy(raw.data(), d, raw.size(), cudaMemcpyDeviceToHost);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) {
        if (t == CUDA_R_32F) memcpy(&v[i], &raw[i * 4], 4);
        else { __nv_bfloat16 b; memcpy(&b, &raw[i * 2], 2); v[i] = __bfloat162float(b); }
    }
    return v;
}
static double gelu(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
static double dgelu(double x) {  // d/dx of gelu above, by a central difference (independent of the emulator's closed form)
    const double h = 1e-4;
    return (gelu(x + h) - gelu(x - h)) / (2 * h);
}
static bool close(const std::vector<float> &got, const std::vector<double> &want, double tol, char *msg) {
    double mx = 1e-30;
    for (double w : want) mx = fmax(mx, fabs(w));
    for (size_t i = 0; i < want.size(); i++)
        if (!(fabs(got[i] - want[i]) <= tol * mx)) {
            snprintf(msg, 200, "[%zu] got %.8g want %.8g", i, got[i], want[i]);
            return false;
        }
    return true;
}

struct Setup {  // one problem's descriptors; the caller sets attributes and runs it
    cublasLtMatmulDesc_t d;
    cublasLtMatrixLayout_t A, B, C, D;
    cublasLtMatmulPreference_t p;
};
static Setup setup(cudaDataType_t tin, cudaDataType_t tout, int ta, int tb, int m, int n, int k, int lda, int ldb, int ldd) {
    Setup s;
    cublasLtMatmulDescCreate(&s.d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(s.d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, 4);
    cublasLtMatmulDescSetAttribute(s.d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, 4);
    cublasLtMatrixLayoutCreate(&s.A, tin, ta ? k : m, ta ? m : k, lda);
    cublasLtMatrixLayoutCreate(&s.B, tin, tb ? n : k, tb ? k : n, ldb);
    cublasLtMatrixLayoutCreate(&s.C, tout, m, n, ldd);
    cublasLtMatrixLayoutCreate(&s.D, tout, m, n, ldd);
    cublasLtMatmulPreferenceCreate(&s.p);
    return s;
}
static cublasStatus_t run(cublasLtHandle_t h, Setup &s, const void *A, const void *B, void *D, float beta) {
    cublasLtMatmulHeuristicResult_t r;
    int got = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, s.d, s.A, s.B, s.C, s.D, s.p, 1, &r, &got);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (got != 1) return CUBLAS_STATUS_NOT_SUPPORTED;
    float alpha = 1.0f;
    return cublasLtMatmul(h, s.d, &alpha, A, s.A, B, s.B, &beta, D, s.C, D, s.D, &r.algo, nullptr, 0, 0);
}

int main() {
    cublasLtHandle_t h;
    cublasLtCreate(&h);
    const int m = 24, n = 10, k = 37;
    const cudaDataType_t tins[3] = {CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF}, touts[3] = {CUDA_R_32F, CUDA_R_16BF, CUDA_R_32F};
    const int epis[7] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
                         CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_BGRADA, CUBLASLT_EPILOGUE_BGRADB};
    int cases = 0, bad = 0;
    char msg[200] = "", first[300] = "";
    for (int ty = 0; ty < 3; ty++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int ei = 0; ei < 7; ei++)
                    for (int bi = 0; bi < 2; bi++) {
                        cudaDataType_t tin = tins[ty], tout = touts[ty];
                        int e = epis[ei];
                        float beta = (float)bi;
                        int lda = (ta ? k : m) + 3, ldb = (tb ? n : k) + 1, ldd = m + 2, ldaux = 32;
                        std::vector<float> a((size_t)lda * (ta ? m : k)), b((size_t)ldb * (tb ? k : n)), c((size_t)ldd * n), bias(m);
                        for (auto &x : a) x = round_to(tin, frand());
                        for (auto &x : b) x = round_to(tin, frand());
                        for (auto &x : c) x = round_to(tout, frand());
                        for (auto &x : bias) x = round_to(tout, frand());
                        size_t nb = e == CUBLASLT_EPILOGUE_BGRADB ? n : m;
                        void *dA = upload(a, tin), *dB = upload(b, tin), *dD = upload(c, tout);
                        std::vector<float> aux0((size_t)ldaux * n);  // DGELU's input: a GELU input in [-3, 3)
                        for (auto &x : aux0) x = round_to(tout, 3.0f * frand());
                        void *dbias = upload(bias, tout), *daux = upload(aux0, tout);
                        Setup s = setup(tin, tout, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, lda, ldb, ldd);
                        cublasLtMatmulDescSetAttribute(s.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, 4);
                        if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_DGELU)
                            cublasLtMatmulDescSetAttribute(s.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias);
                        if (e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU) {
                            int64_t ld = ldaux;
                            cublasLtMatmulDescSetAttribute(s.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &daux, sizeof daux);
                            cublasLtMatmulDescSetAttribute(s.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, 8);
                        }
                        cublasStatus_t st = run(h, s, dA, dB, dD, beta);
                        // the reference: element (i, j) of op(A), op(B) read straight from the column-major arrays
                        std::vector<double> wd(c.begin(), c.end()), waux(aux0.begin(), aux0.end()), wbias(nb);
                        for (int j = 0; j < n; j++)
                            for (int i = 0; i < m; i++) {
                                double x = 0.0;
                                for (int l = 0; l < k; l++) x += (double)a[ta ? l + (size_t)i * lda : i + (size_t)l * lda] * b[tb ? j + (size_t)l * ldb : l + (size_t)j * ldb];
                                x += beta * c[i + (size_t)j * ldd];
                                if (e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) x += bias[i];
                                if (e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) waux[i + (size_t)j * ldaux] = x;
                                if (e == CUBLASLT_EPILOGUE_DGELU) x *= dgelu(aux0[i + (size_t)j * ldaux]);
                                wd[i + (size_t)j * ldd] = (e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) ? gelu(x) : x;
                            }
                        for (size_t i = 0; i < nb; i++) {
                            double s2 = 0.0;
                            for (int l = 0; l < k; l++)
                                s2 += e == CUBLASLT_EPILOGUE_BGRADA ? a[ta ? l + i * lda : i + (size_t)l * lda] : b[tb ? i + (size_t)l * ldb : l + i * ldb];
                            wbias[i] = s2;
                        }
                        double tol = tout == CUDA_R_32F ? 1e-5 : 1e-2;
                        bool ok = st == CUBLAS_STATUS_SUCCESS && close(download(dD, c.size(), tout), wd, tol, msg);
                        if (ok && e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) ok = close(download(daux, waux.size(), tout), waux, tol, msg);
                        if (ok && (e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB)) ok = close(download(dbias, nb, tout), wbias, tol, msg);
                        if (st != CUBLAS_STATUS_SUCCESS) snprintf(msg, sizeof msg, "status %d", (int)st);
                        cases++;
                        if (!ok && bad++ == 0) snprintf(first, sizeof first, "type %d ta %d tb %d epilogue %d beta %g: %s", ty, ta, tb, e, beta, msg);
                        cudaFree(dA); cudaFree(dB); cudaFree(dD); cudaFree(dbias); cudaFree(daux);
                    }
    snprintf(msg, sizeof msg, "%d of %d cases differ from the loop; first: %s", bad, cases, first);
    report(bad == 0, "epilogues_match_loop", msg);

    // error statuses, on one fp32 problem (D = A B with A m x k, B k x n)
    std::vector<float> a((size_t)m * k, 0.5f), b((size_t)k * n, 0.25f), c((size_t)m * n, 0.0f), bias(m, 1.0f);
    void *dA = upload(a, CUDA_R_32F), *dB = upload(b, CUDA_R_32F), *dD = upload(c, CUDA_R_32F), *dbias = upload(bias, CUDA_R_32F);
    int e;
    Setup s = setup(CUDA_R_32F, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, m - 1, k, m);
    report(run(h, s, dA, dB, dD, 0.0f) == CUBLAS_STATUS_INVALID_VALUE, "lda_below_rows_is_invalid", "lda < m accepted");
    s = setup(CUDA_R_32F, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, m, k, m);
    e = CUBLASLT_EPILOGUE_BIAS;
    cublasLtMatmulDescSetAttribute(s.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, 4);
    report(run(h, s, dA, dB, dD, 0.0f) == CUBLAS_STATUS_INVALID_VALUE, "bias_without_pointer_is_invalid", "accepted");
    e = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int64_t ld = m + 4;  // >= m but not a multiple of 8
    cublasLtMatmulDescSetAttribute(s.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, 4);
    cublasLtMatmulDescSetAttribute(s.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias);
    cublasLtMatmulDescSetAttribute(s.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &dD, sizeof dD);
    cublasLtMatmulDescSetAttribute(s.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, 8);
    report(run(h, s, dA, dB, dD, 0.0f) == CUBLAS_STATUS_INVALID_VALUE, "aux_ld_not_multiple_of_8_is_invalid", "accepted");
    e = CUBLASLT_EPILOGUE_DGELU_BGRAD;
    cublasLtMatmulDescSetAttribute(s.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, 4);
    report(run(h, s, dA, dB, dD, 0.0f) == CUBLAS_STATUS_NOT_SUPPORTED, "unemulated_epilogue_not_supported", "accepted");
    // D one float past a 256-byte boundary, with the default promise of 256-byte alignment
    e = CUBLASLT_EPILOGUE_DEFAULT;
    cublasLtMatmulDescSetAttribute(s.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, 4);
    void *dD2;
    cudaMalloc(&dD2, c.size() * 4 + 256);
    report(run(h, s, dA, dB, (float *)dD2 + 1, 0.0f) == CUBLAS_STATUS_INVALID_VALUE, "misaligned_d_is_invalid", "accepted");
    uint32_t four = 4;
    cublasLtMatmulPreferenceSetAttribute(s.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &four, 4);  // C is D (in place)
    cublasLtMatmulPreferenceSetAttribute(s.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &four, 4);
    report(run(h, s, dA, dB, (float *)dD2 + 1, 0.0f) == CUBLAS_STATUS_SUCCESS, "misaligned_d_ok_when_promised", "rejected");
    // BGRADB overwrites the bias gradient (preset to 1.0): each column of B sums to k * 0.25
    e = CUBLASLT_EPILOGUE_BGRADB;
    cublasLtMatmulDescSetAttribute(s.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, 4);
    bool ok = run(h, s, dA, dB, dD, 0.0f) == CUBLAS_STATUS_SUCCESS;
    std::vector<float> g = download(dbias, n, CUDA_R_32F);
    for (int j = 0; j < n; j++) ok = ok && g[j] == 0.25f * k;
    report(ok, "bgrad_overwrites", "the bias gradient was not k * 0.25");

    // EMU_LT_REFUSE: the listed epilogues (whole names only) and, with "all", every one but DEFAULT
    auto status_with = [&](int epi) {
        cublasLtMatmulDescSetAttribute(s.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, 4);
        return run(h, s, dA, dB, dD, 0.0f);
    };
    setenv("EMU_LT_REFUSE", "DGELU,BIAS", 1);
    ok = status_with(CUBLASLT_EPILOGUE_BIAS) == CUBLAS_STATUS_NOT_SUPPORTED && status_with(CUBLASLT_EPILOGUE_GELU_BIAS) == CUBLAS_STATUS_SUCCESS &&
         status_with(CUBLASLT_EPILOGUE_BGRADB) == CUBLAS_STATUS_SUCCESS && status_with(CUBLASLT_EPILOGUE_DEFAULT) == CUBLAS_STATUS_SUCCESS;
    report(ok, "refuse_lists_epilogues", "EMU_LT_REFUSE=DGELU,BIAS: BIAS not refused, or GELU_BIAS, BGRADB or DEFAULT refused");
    setenv("EMU_LT_REFUSE", "all", 1);
    ok = status_with(CUBLASLT_EPILOGUE_BGRADB) == CUBLAS_STATUS_NOT_SUPPORTED && status_with(CUBLASLT_EPILOGUE_DEFAULT) == CUBLAS_STATUS_SUCCESS;
    report(ok, "refuse_all_but_default", "EMU_LT_REFUSE=all: BGRADB not refused or DEFAULT refused");
    unsetenv("EMU_LT_REFUSE");

    // EMU_LT_TANH=approx: GELU_BIAS with inputs x = A B + bias spread over [-4, 4]; the error of
    // each output against the exact tanh GELU, in units of 0.5 |x tanh(u)| 2^-11 (the output's
    // error for a tanh off by 2^-11 relative): at most 1 (plus fp32 rounding), near 1 somewhere
    for (auto &x : a) x = 4.0f * frand() / sqrtf((float)k);
    for (auto &x : b) x = frand();
    for (auto &x : bias) x = frand();
    void *dA2 = upload(a, CUDA_R_32F), *dB2 = upload(b, CUDA_R_32F), *dbias2 = upload(bias, CUDA_R_32F);
    cudaMemcpy(dA, dA2, a.size() * 4, cudaMemcpyDeviceToDevice);
    cudaMemcpy(dB, dB2, b.size() * 4, cudaMemcpyDeviceToDevice);
    cudaMemcpy(dbias, dbias2, bias.size() * 4, cudaMemcpyDeviceToDevice);
    setenv("EMU_LT_TANH", "approx", 1);
    e = CUBLASLT_EPILOGUE_GELU_BIAS;
    cublasLtMatmulDescSetAttribute(s.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, 4);
    cublasLtMatmulDescSetAttribute(s.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias);
    ok = run(h, s, dA, dB, dD, 0.0f) == CUBLAS_STATUS_SUCCESS;
    unsetenv("EMU_LT_TANH");
    g = download(dD, (size_t)m * n, CUDA_R_32F);
    double worst = 0.0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double x = bias[i];
            for (int l = 0; l < k; l++) x += (double)a[i + (size_t)l * m] * b[l + (size_t)j * k];
            double unit = 0.5 * fabs(x * tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))) * 0x1p-11 + 1e-6 * (1.0 + fabs(x));
            worst = fmax(worst, fabs(g[i + (size_t)j * m] - gelu(x)) / unit);
        }
    snprintf(msg, sizeof msg, "worst error %.3f units of 0.5 |x tanh| 2^-11 (want 0.5 to 1.05)", worst);
    report(ok && worst > 0.5 && worst <= 1.05, "approx_tanh_error_is_2^-11", msg);
    cudaFree(dA2); cudaFree(dB2); cudaFree(dbias2);
    printf("selftest_lt: %d failed\n", failures);
    return failures != 0;
}
