// dev/cuda/matmul.cu: checks and timings of cuda/matmul.cuh's layer products against the CPU
// trainer's matmul_forward/backward and gelu_forward (cpu_ref.h).
// Version 1 is the path before the cuBLASLt epilogues: bias broadcast into the output then
// cublasGemmEx with beta = 1; separate GELU forward and backward passes; the bias gradient
// by bias_backward (a pass over dout). Version 2 is the header's: the bias, the GELU
// (keeping its input), the GELU's derivative and the bias gradient in cuBLASLt epilogues.
// Version 3 is the header's fallback for when cuBLASLt has no algorithm for an epilogue
// (BlasLt.epilogues_off: the plain product and the header's epilogue kernels); it must give
// version 2's results. The GELU outputs of version 2 are checked with TOL_GELU_LT and
// TOL_DGELU_LT (check.cuh: cuBLASLt's tanh may be the hardware's approximation); versions 1
// and 3 compute tanh with tanhf in our kernels and keep TOL. A run of the checks also counts
// the plans (descriptors and heuristic calls) each BlasLt made: repeated shapes reuse theirs.
// Build: make -C dev/cuda matmul [PRECISION=FP32], or
//   nvcc -std=c++17 -O3 -arch=sm_90 -I. [-DENABLE_FP32] dev/cuda/matmul.cu dev/cuda/cpu_ref.o -lcublas -lcublasLt -lgomp -o matmul
#include "../../cuda/common.cuh"
#include "../../cuda/elementwise.cuh"
#include "../../cuda/matmul.cuh"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // cpu_ref.h brings model/model.h's static helpers
#include "cpu_ref.h"
#pragma GCC diagnostic pop

#include "check.cuh"

#define WORKSPACE (32u << 20)

static cublasHandle_t g_blas;
static BlasLt g_lt, g_lt_off;  // the epilogues; the fallback (epilogues_off)
static BlasLt* lt_of(int version) { return version == 3 ? &g_lt_off : &g_lt; }
#define VERSIONS 3

// ----------------------------------------------------------------------------
// Version 1: the separate passes

static void matmul_forward_v1(floatX* out, const floatX* inp, const floatX* w, const floatX* bias, int N, int C, int OC) {
    bias_broadcast(out, bias, N, OC, OC, 0);  // the product is then added with beta = 1
    gemm_rm(g_blas, false, false, N, OC, C, inp, C, w, OC, out, OC, 1.0f);
}

static void matmul_forward_v(int version, floatX* out, const floatX* inp, const floatX* w, const floatX* bias, int N, int C, int OC) {
    if (version == 1) matmul_forward_v1(out, inp, w, bias, N, C, OC);
    else matmul_forward(lt_of(version), out, inp, w, bias, N, C, OC, 0);
}

static void matmul_forward_gelu_v(int version, floatX* out, floatX* pre, const floatX* inp, const floatX* w, const floatX* bias, int N, int C,
                                  int OC) {
    if (version == 1) {
        matmul_forward_v1(pre, inp, w, bias, N, C, OC);
        gelu_forward(out, pre, (size_t)N * OC, 0);
    } else {
        matmul_forward_gelu(lt_of(version), out, pre, inp, w, bias, N, C, OC, 0);
    }
}

// scratch: bias_backward_scratch_floats(N, OC) floats (v1) or OC (v2, v3); with gelu_pre (N x C),
// v1 puts the product in tmp (N x C) before the GELU backward pass
static void matmul_backward_v(int version, floatX* dinp, float* dw, float* dbias, float* scratch, floatX* tmp, const floatX* dout,
                              const floatX* inp, const floatX* w, const floatX* gelu_pre, int N, int C, int OC) {
    if (version == 1) {
        gemm_rm(g_blas, false, true, N, C, OC, dout, OC, w, OC, gelu_pre ? tmp : dinp, C, 0.0f);
        if (gelu_pre) gelu_backward(dinp, gelu_pre, tmp, (size_t)N * C, 0);
        gemm_rm(g_blas, true, false, C, OC, N, inp, C, dout, OC, dw, OC, 1.0f);
        bias_backward(dbias, scratch, dout, N, OC, 0);
    } else {
        matmul_backward(lt_of(version), dinp, dw, dbias, scratch, dout, inp, w, gelu_pre, N, C, OC, 0);
    }
}

// ----------------------------------------------------------------------------

static void check_forward(int N, int C, int OC) {
    char name[128];
    std::vector<float> inp = rand_x((size_t)N * C, 1.0f), w = rand_x((size_t)C * OC, 0.3f), bias = rand_x(OC, 0.5f);
    std::vector<float> want((size_t)N * OC), want_gelu((size_t)N * OC);
    ref_matmul_forward(want.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    ref_gelu_forward(want_gelu.data(), want.data(), (long)want.size());
    floatX *d_inp = dev_x(inp), *d_w = dev_x(w), *d_bias = dev_x(bias);
    floatX *d_out = dev_alloc<floatX>(want.size()), *d_pre = dev_alloc<floatX>(want.size());
    for (int v = 1; v <= VERSIONS; v++) {
        poison(d_out, want.size() * sizeof(floatX));
        matmul_forward_v(v, d_out, d_inp, d_w, d_bias, N, C, OC);
        snprintf(name, sizeof name, "matmul_forward_v%d N=%d C=%d OC=%d", v, N, C, OC);
        check(name, download_x(d_out, want.size()), want, TOL);
        if (OC % 8) continue;  // GELU_AUX_BIAS needs the aux row stride (OC) to be a multiple of 8
        poison(d_out, want.size() * sizeof(floatX));
        poison(d_pre, want.size() * sizeof(floatX));
        matmul_forward_gelu_v(v, d_out, d_pre, d_inp, d_w, d_bias, N, C, OC);
        snprintf(name, sizeof name, "matmul_forward_gelu_v%d N=%d C=%d OC=%d pre", v, N, C, OC);
        check(name, download_x(d_pre, want.size()), want, TOL);
        snprintf(name, sizeof name, "matmul_forward_gelu_v%d N=%d C=%d OC=%d gelu", v, N, C, OC);
        check(name, download_x(d_out, want.size()), want_gelu, v == 2 ? TOL_GELU_LT : TOL);
    }
    CUDA_CHECK(cudaFree(d_inp));
    CUDA_CHECK(cudaFree(d_w));
    CUDA_CHECK(cudaFree(d_bias));
    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(d_pre));
}

// dinp is overwritten, dw and dbias (fp32) accumulate onto what they held; with gelu, dinp
// goes on through a GELU whose input is pre (the MLP's projection: inp = gelu(pre))
static void check_backward(int N, int C, int OC, bool gelu) {
    char name[128];
    std::vector<float> inp = rand_x((size_t)N * C, 1.0f), w = rand_x((size_t)C * OC, 0.3f), dout = rand_x((size_t)N * OC, 1.0f);
    std::vector<float> pre = rand_x((size_t)N * C, 3.0f), dw0 = rand_f((size_t)C * OC, 1.0f), db0 = rand_f(OC, 1.0f);
    std::vector<float> want_dinp((size_t)N * C, 0.0f), want_dw = dw0, want_db = db0;
    ref_matmul_backward(want_dinp.data(), want_dw.data(), want_db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    if (gelu) {
        std::vector<float> dgelu_out = want_dinp;
        std::fill(want_dinp.begin(), want_dinp.end(), 0.0f);
        ref_gelu_backward(want_dinp.data(), pre.data(), dgelu_out.data(), (long)want_dinp.size());
    }
    const char* tag = gelu ? " gelu" : "";
    floatX *d_inp = dev_x(inp), *d_w = dev_x(w), *d_dout = dev_x(dout), *d_dinp = dev_alloc<floatX>(want_dinp.size());
    floatX *d_pre = gelu ? dev_x(pre) : nullptr, *d_tmp = dev_alloc<floatX>(want_dinp.size());
    float *d_dw = dev_alloc<float>(dw0.size()), *d_db = dev_alloc<float>(OC);
    size_t nscratch = bias_backward_scratch_floats(N, OC);
    float* scratch = dev_alloc<float>(nscratch);
    std::vector<unsigned char> first_dw, first_db;
    for (int v = 1; v <= VERSIONS; v++)
        for (int rep = 0; rep < 2; rep++) {
            CUDA_CHECK(cudaMemcpy(d_dw, dw0.data(), dw0.size() * sizeof(float), cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemcpy(d_db, db0.data(), OC * sizeof(float), cudaMemcpyHostToDevice));
            poison(d_dinp, want_dinp.size() * sizeof(floatX));
            poison(scratch, nscratch * sizeof(float));
            matmul_backward_v(v, d_dinp, d_dw, d_db, scratch, d_tmp, d_dout, d_inp, d_w, d_pre, N, C, OC);
            if (rep == 0) {
                snprintf(name, sizeof name, "matmul_backward_v%d%s N=%d C=%d OC=%d dinp", v, tag, N, C, OC);
                check(name, download_x(d_dinp, want_dinp.size()), want_dinp, gelu && v == 2 ? TOL_DGELU_LT : TOL);
                snprintf(name, sizeof name, "matmul_backward_v%d%s N=%d C=%d OC=%d dw", v, tag, N, C, OC);
                check(name, download(d_dw, dw0.size()), want_dw, TOL_GRAD32);
                snprintf(name, sizeof name, "matmul_backward_v%d%s N=%d C=%d OC=%d dbias", v, tag, N, C, OC);
                check(name, download(d_db, OC), want_db, TOL_GRAD32);
                first_dw = download_bytes(d_dw, dw0.size() * sizeof(float));
                first_db = download_bytes(d_db, OC * sizeof(float));
            } else {  // determinism: again from the same start
                snprintf(name, sizeof name, "matmul_backward_v%d%s N=%d C=%d OC=%d deterministic dw", v, tag, N, C, OC);
                check_bits(name, first_dw, download_bytes(d_dw, dw0.size() * sizeof(float)));
                snprintf(name, sizeof name, "matmul_backward_v%d%s N=%d C=%d OC=%d deterministic dbias", v, tag, N, C, OC);
                check_bits(name, first_db, download_bytes(d_db, OC * sizeof(float)));
            }
        }
    CUDA_CHECK(cudaFree(d_inp));
    CUDA_CHECK(cudaFree(d_w));
    CUDA_CHECK(cudaFree(d_dout));
    CUDA_CHECK(cudaFree(d_dinp));
    CUDA_CHECK(cudaFree(d_pre));
    CUDA_CHECK(cudaFree(d_tmp));
    CUDA_CHECK(cudaFree(d_dw));
    CUDA_CHECK(cudaFree(d_db));
    CUDA_CHECK(cudaFree(scratch));
}

// The Llama family's [out, in] products (matmul_forward_oi/backward_oi) against the CPU twins,
// with and without a bias (Qwen2's q, k, v), the bias gradient by bias_backward as train_sft.cu does
static void check_oi(int N, int C, int OC, bool with_bias) {
    char name[160];
    std::vector<float> inp = rand_x((size_t)N * C, 1.0f), w = rand_x((size_t)OC * C, 0.3f), bias = rand_x(OC, 0.5f);
    std::vector<float> dout = rand_x((size_t)N * OC, 1.0f), dw0 = rand_f((size_t)OC * C, 1.0f), db0 = rand_f(OC, 1.0f);
    std::vector<float> want((size_t)N * OC), want_dinp((size_t)N * C, 0.0f), want_dw = dw0, want_db = db0;
    ref_matmul_forward_oi(want.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, C, OC);
    ref_matmul_backward_oi(want_dinp.data(), want_dw.data(), want_db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    const char* tag = with_bias ? " bias" : "";
    floatX *d_inp = dev_x(inp), *d_w = dev_x(w), *d_b = dev_x(bias), *d_dout = dev_x(dout), *d_out = dev_alloc<floatX>(want.size());
    floatX* d_dinp = dev_alloc<floatX>(want_dinp.size());
    float *d_dw = dev_copy(dw0), *d_db = dev_copy(db0), *scratch = dev_alloc<float>(bias_backward_scratch_floats(N, OC));
    for (int v = 2; v <= (with_bias ? VERSIONS : 2); v++) {  // without a bias there is no epilogue to fall back from
        poison(d_out, want.size() * sizeof(floatX));
        matmul_forward_oi(lt_of(v), d_out, d_inp, d_w, with_bias ? d_b : nullptr, N, C, OC, 0);
        snprintf(name, sizeof name, "matmul_forward_oi_v%d%s N=%d C=%d OC=%d", v, tag, N, C, OC);
        check(name, download_x(d_out, want.size()), want, TOL);
    }
    std::vector<unsigned char> first[2];
    for (int rep = 0; rep < 2; rep++) {
        CUDA_CHECK(cudaMemcpy(d_dw, dw0.data(), dw0.size() * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(d_db, db0.data(), OC * sizeof(float), cudaMemcpyHostToDevice));
        poison(d_dinp, want_dinp.size() * sizeof(floatX));
        matmul_backward_oi(&g_lt, d_dinp, d_dw, d_dout, d_inp, d_w, N, C, OC, 0);
        bias_backward(d_db, scratch, d_dout, N, OC, 0);
        std::vector<unsigned char> got[2] = {download_bytes(d_dw, dw0.size() * sizeof(float)), download_bytes(d_db, OC * sizeof(float))};
        if (rep == 0) {
            snprintf(name, sizeof name, "matmul_backward_oi N=%d C=%d OC=%d dinp", N, C, OC);
            check(name, download_x(d_dinp, want_dinp.size()), want_dinp, TOL);
            snprintf(name, sizeof name, "matmul_backward_oi N=%d C=%d OC=%d dw", N, C, OC);
            check(name, download(d_dw, dw0.size()), want_dw, TOL_GRAD32);
            snprintf(name, sizeof name, "bias_backward N=%d OC=%d dbias", N, OC);
            check(name, download(d_db, OC), want_db, TOL_GRAD32);
            for (int k = 0; k < 2; k++) first[k] = got[k];
        } else {
            snprintf(name, sizeof name, "matmul_backward_oi N=%d C=%d OC=%d deterministic dw", N, C, OC);
            check_bits(name, first[0], got[0]);
            snprintf(name, sizeof name, "bias_backward N=%d OC=%d deterministic dbias", N, OC);
            check_bits(name, first[1], got[1]);
        }
    }
    for (floatX* p : {d_inp, d_w, d_b, d_dout, d_out, d_dinp}) CUDA_CHECK(cudaFree(p));
    for (float* p : {d_dw, d_db, scratch}) CUDA_CHECK(cudaFree(p));
}

static void check_true(const char* name, bool ok, long a, long b) {
    if (ok) printf("ok %s (%ld, %ld)\n", name, a, b);
    else printf("FAIL %s: %ld, %ld\n", name, a, b), g_failures++;
}

// The plan cache (cuda/matmul.cuh): a product repeated with other data and another bias of
// the same alignment makes no new plan; a bias of lower alignment makes one; more shapes than
// LT_PLANS evict old plans and every product stays right, the evicted shape included.
static void check_plan_reuse(void) {
    const int N = 16, C = 32, OC = 24, SHAPES = LT_PLANS + 6;
    std::vector<float> inp = rand_x((size_t)SHAPES * C, 1.0f), w = rand_x((size_t)C * OC, 0.3f), bias = rand_x(OC + 1, 0.5f);
    floatX *d_inp = dev_x(inp), *d_inp2 = dev_x(inp), *d_w = dev_x(w), *d_b1 = dev_x(bias), *d_b2 = dev_x(bias);
    floatX* d_out = dev_alloc<floatX>((size_t)SHAPES * OC);
    BlasLt lt;
    blaslt_init(&lt, g_lt.workspace, g_lt.workspace_bytes);
    matmul_forward(&lt, d_out, d_inp, d_w, d_b1, N, C, OC, 0);
    long first = lt.plans_made;
    matmul_forward(&lt, d_out, d_inp2, d_w, d_b2, N, C, OC, 0);  // other buffers of the same (256-byte) alignment
    check_true("matmul_plan_reused (plans after the first and second product)", first == 1 && lt.plans_made == 1, first, lt.plans_made);
    matmul_forward(&lt, d_out, d_inp, d_w, d_b1 + 1, N, C, OC, 0);
    check_true("matmul_plan_new_for_lower_bias_alignment (plans before, after)", lt.plans_made == 2, 1, lt.plans_made);
    std::vector<float> want((size_t)SHAPES * OC);
    ref_matmul_forward(want.data(), inp.data(), w.data(), bias.data(), SHAPES, C, OC);
    bool right = true;
    for (int k = 0; k <= SHAPES; k++) {  // row counts 1..SHAPES (N among them: a hit), then N again (evicted by then)
        int n = k < SHAPES ? k + 1 : N;
        poison(d_out, (size_t)SHAPES * OC * sizeof(floatX));
        matmul_forward(&lt, d_out, d_inp, d_w, d_b1, n, C, OC, 0);
        std::vector<float> got = download_x(d_out, (size_t)n * OC);
        for (size_t i = 0; i < got.size(); i++) right = right && fabsf(got[i] - want[i]) <= TOL * 8.0f;  // |want| < 8
    }
    check_true("matmul_plans_evicted_products_right (plans made, limit)", right && lt.plans_made == 2 + SHAPES, lt.plans_made, LT_PLANS);
    blaslt_destroy(&lt);
    for (floatX* p : {d_inp, d_inp2, d_w, d_b1, d_b2, d_out}) CUDA_CHECK(cudaFree(p));
}

// GPT-2 124M's four products at B*T = 8192 tokens (timing only: GPU)
static void timings(void) {
    const int BT = 8 * 1024, C = 768;
    const double X = sizeof(floatX);
    floatX *inp = dev_alloc<floatX>((size_t)BT * 4 * C), *w = dev_alloc<floatX>((size_t)4 * C * C), *bias = dev_alloc<floatX>(4 * C);
    floatX *out = dev_alloc<floatX>((size_t)BT * 4 * C), *pre = dev_alloc<floatX>((size_t)BT * 4 * C), *dout = dev_alloc<floatX>((size_t)BT * 4 * C);
    floatX* tmp = dev_alloc<floatX>((size_t)BT * 4 * C);
    float *dw = dev_alloc<float>((size_t)4 * C * C), *db = dev_alloc<float>(4 * C), *scratch = dev_alloc<float>(bias_backward_scratch_floats(BT, 4 * C));
    fill_hash(inp, (size_t)BT * 4 * C, 1.0f, 1);
    fill_hash(w, (size_t)4 * C * C, 0.02f, 2);
    fill_hash(bias, 4 * C, 0.1f, 3);
    fill_hash(dout, (size_t)BT * 4 * C, 1.0f, 4);
    const int shapes[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};  // qkv, attproj, fc, fcproj: (in, out)
    char name[160];
    for (int v = 1; v <= VERSIONS; v++)
        for (int i = 0; i < 4; i++) {
            int in = shapes[i][0], oc = shapes[i][1];
            double io = ((double)BT * in + (double)in * oc + (double)BT * oc) * X;  // inputs and output once
            if (i == 2) {
                snprintf(name, sizeof name, "matmul_forward_gelu_v%d BT=%d C=%d OC=%d", v, BT, in, oc);
                report_time(name, time_ms([&] { matmul_forward_gelu_v(v, out, pre, inp, w, bias, BT, in, oc); }, 20), io + BT * (double)oc * X);
            } else {
                snprintf(name, sizeof name, "matmul_forward_v%d BT=%d C=%d OC=%d", v, BT, in, oc);
                report_time(name, time_ms([&] { matmul_forward_v(v, out, inp, w, bias, BT, in, oc); }, 20), io);
            }
            const floatX* gelu_pre = i == 3 ? pre : nullptr;  // the MLP's projection: its input is gelu(fch)
            snprintf(name, sizeof name, "matmul_backward_v%d%s BT=%d C=%d OC=%d", v, gelu_pre ? " gelu" : "", BT, in, oc);
            report_time(name, time_ms([&] { matmul_backward_v(v, out, dw, db, scratch, tmp, dout, inp, w, gelu_pre, BT, in, oc); }, 20),
                        2 * io + (gelu_pre ? BT * (double)in * X : 0.0));
        }
    CUDA_CHECK(cudaFree(inp)); CUDA_CHECK(cudaFree(w)); CUDA_CHECK(cudaFree(bias)); CUDA_CHECK(cudaFree(out)); CUDA_CHECK(cudaFree(pre));
    CUDA_CHECK(cudaFree(dout)); CUDA_CHECK(cudaFree(tmp)); CUDA_CHECK(cudaFree(dw)); CUDA_CHECK(cudaFree(db)); CUDA_CHECK(cudaFree(scratch));
}

int main(void) {
    if (!have_cuda_device("matmul")) return 0;
    CUBLAS_CHECK(cublasCreate(&g_blas));
    void* workspace = dev_alloc<char>(WORKSPACE);
    blaslt_init(&g_lt, workspace, WORKSPACE);
    blaslt_init(&g_lt_off, workspace, WORKSPACE);
    g_lt_off.epilogues_off = true;
    CUBLAS_CHECK(cublasSetWorkspace(g_blas, workspace, WORKSPACE));
    check_forward(64, 48, 256);   // the MLP's first product at C = 64: 4C
    check_forward(37, 24, 72);    // odd row count
    check_forward(20, 16, 30);    // OC not a multiple of 8: bias only
    check_backward(64, 48, 256, false);
    check_backward(37, 72, 24, false);
    check_backward(37, 256, 48, true);  // the MLP's projection at C = 64: through the GELU of 4C
    check_oi(64, 48, 96, true);   // Qwen2's q|k|v at C = 48 (NH 4, KVH 2, HS 12): (NH + 2 KVH) HS = 96
    check_oi(37, 64, 40, false);  // Llama's down_proj shape (in > out), odd rows
    check_plan_reuse();
    timings();
    CUDA_CHECK(cudaDeviceSynchronize());
    blaslt_destroy(&g_lt);
    blaslt_destroy(&g_lt_off);
    CUBLAS_CHECK(cublasDestroy(g_blas));
    CUDA_CHECK(cudaFree(workspace));
    printf("matmul [%s]: %d failure(s)\n", PRECISION_NAME, g_failures);
    return g_failures ? 1 : 0;
}
