/*
dev/bench_gemm.c: the CPU trainer's gemm() (cpu/gemm.h) on the matrix products of a
training step, against OpenBLAS's sgemm on the same shapes, alternating the two in one
run. A benchmark, not a test: OpenBLAS is loaded with dlopen here and nowhere else (the
trainer never links a BLAS).

Usage: dev/bench_gemm [OPENBLAS.so [TITLE-PART]]   (TITLE-PART: only the tables whose title
contains it, e.g. "GPT-2" or "256 tokens"; dev/profile_step.sh finds the library: the one
numpy's wheel bundles in the referee environment, or Debian's libopenblas)

For each product it prints GFLOP/s of ours and of OpenBLAS (the median of repeats) and
their ratio (OpenBLAS's time over ours: above 1, ours is faster), the time the product takes per step, and at the end the step-weighted
totals of both: what the step's matrix products would cost with each.
*/
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>
#include "../cpu/gemm.h"

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };
// cblas_sgemm with 32-bit integers, and the 64-bit-integer build numpy bundles
typedef void (*sgemm32_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int);
typedef void (*sgemm64_fn)(int, int, int, long, long, long, float, const float *, long, const float *, long, float, float *, long);
static sgemm32_fn blas32;
static sgemm64_fn blas64;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

// One product of the step: C[M,N] (+)= A[M,K] B[K,N], A and B by strides as gemm() takes them
typedef struct {
    const char *name;
    int M, N, K;
    int a_trans, b_trans;  // 0: rows contiguous (stride 1 along K for A, along N for B); 1: columns contiguous
    int accumulate, per_step;
} Product;

static void openblas(const Product *p, const float *A, const float *B, float *C) {
    long lda = p->a_trans ? p->M : p->K, ldb = p->b_trans ? p->K : p->N;
    int ta = p->a_trans ? TRANS : NO_TRANS, tb = p->b_trans ? TRANS : NO_TRANS;
    float beta = p->accumulate ? 1.0f : 0.0f;
    if (blas64) blas64(ROW_MAJOR, ta, tb, p->M, p->N, p->K, 1.0f, A, lda, B, ldb, beta, C, p->N);
    else blas32(ROW_MAJOR, ta, tb, p->M, p->N, p->K, 1.0f, A, (int)lda, B, (int)ldb, beta, C, p->N);
}

static void ours(const Product *p, const float *A, const float *B, float *C) {
    long a_rs = p->a_trans ? 1 : p->K, a_cs = p->a_trans ? p->M : 1;
    long b_rs = p->b_trans ? 1 : p->N, b_cs = p->b_trans ? p->K : 1;
    gemm(p->M, p->N, p->K, A, a_rs, a_cs, B, b_rs, b_cs, C, p->N, p->accumulate);
}

static int cmp_double(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

// Seconds of one call, the two alternating so they see the same machine: the best of the
// repeats in t[0] (this machine's virtual cores are shared, and what others take shows up
// as outliers, never as speed) and the median in t[1].
static void time_both(const Product *p, const float *A, const float *B, float *C, double t_ours[2], double t_blas[2]) {
    double flops = 2.0 * p->M * p->N * p->K, to[15], tb[15];
    int reps = flops > 2e10 ? 3 : flops > 2e9 ? 7 : 15;
    ours(p, A, B, C);
    if (blas32 || blas64) openblas(p, A, B, C);
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        ours(p, A, B, C);
        double t1 = now();
        if (blas32 || blas64) openblas(p, A, B, C);
        double t2 = now();
        to[r] = t1 - t0;
        tb[r] = t2 - t1;
    }
    qsort(to, reps, sizeof(double), cmp_double);
    qsort(tb, reps, sizeof(double), cmp_double);
    t_ours[0] = to[0], t_ours[1] = to[reps / 2];
    t_blas[0] = (blas32 || blas64) ? tb[0] : 0, t_blas[1] = (blas32 || blas64) ? tb[reps / 2] : 0;
}

// The step's products of a model at BT tokens: per layer the four linear layers' forward,
// dinp and dweight, then the classifier (forward, its recompute in the backward where
// the rows take several chunks, dx, dhead).
// llama: weights stored [OUT, IN] (nn.Linear), else [IN, OUT] (GPT-2's Conv1D).
static int step_products(Product *out, int llama, int L, int C, int QKV, int FC, int FCIN, int V, int BT) {
    struct { const char *name; int in, out; } lin[4] = {{"qkv", C, QKV}, {"attproj", C, C}, {"fc", C, FC}, {"fcproj", FCIN, C}};
    int n = 0;
    static char names[64][48];
    for (int i = 0; i < 4; i++) {
        int I = lin[i].in, O = lin[i].out;
        snprintf(names[n], 48, "%s fwd", lin[i].name);
        out[n] = (Product){names[n], BT, O, I, 0, llama, 0, L};
        n++;
        snprintf(names[n], 48, "%s dinp", lin[i].name);
        out[n] = (Product){names[n], BT, I, O, 0, !llama, 1, L};
        n++;
        snprintf(names[n], 48, "%s dw", lin[i].name);
        out[n] = llama ? (Product){names[n], O, I, BT, 1, 0, 1, L} : (Product){names[n], I, O, BT, 1, 0, 1, L};
        n++;
    }
    // the trainer keeps the logits of a step whose rows fit one classifier chunk (2^24
    // floats, train_sft.c) and computes them again in the backward pass otherwise
    int one_chunk = (1 << 24) / V >= BT;
    out[n++] = (Product){one_chunk ? "head fwd" : "head fwd (x2)", BT, V, C, 0, 1, 0, one_chunk ? 1 : 2};
    out[n++] = (Product){"head dx", BT, C, V, 0, 0, 0, 1};
    out[n++] = (Product){"head dhead", V, C, BT, 1, 0, 1, 1};
    return n;
}

static void *load_openblas(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "bench_gemm: %s\n", dlerror()); return NULL; }
    blas32 = (sgemm32_fn)dlsym(h, "cblas_sgemm");
    if (!blas32) blas64 = (sgemm64_fn)dlsym(h, "scipy_cblas_sgemm64_");
    if (!blas32 && !blas64) blas32 = (sgemm32_fn)dlsym(h, "scipy_cblas_sgemm");
    void (*set_threads)(int) = (void (*)(int))dlsym(h, blas64 ? "scipy_openblas_set_num_threads64_" : "openblas_set_num_threads");
    if (!set_threads) set_threads = (void (*)(int))dlsym(h, "scipy_openblas_set_num_threads");
    if (set_threads) set_threads(omp_get_max_threads());
    if (!blas32 && !blas64) fprintf(stderr, "bench_gemm: %s has no cblas_sgemm\n", path);
    return h;
}

static const char *only;  // run only the tables whose title contains this

static void bench_model(const char *title, Product *p, int n) {
    if (only && !strstr(title, only)) return;
    size_t most = 0;
    for (int i = 0; i < n; i++) {
        size_t a = (size_t)p[i].M * p[i].K, b = (size_t)p[i].K * p[i].N, c = (size_t)p[i].M * p[i].N;
        if (a > most) most = a;
        if (b > most) most = b;
        if (c > most) most = c;
    }
    float *A = malloc(most * sizeof(float)), *B = malloc(most * sizeof(float)), *C = malloc(most * sizeof(float));
    if (!A || !B || !C) fatal("out of memory");
    for (size_t i = 0; i < most; i++) A[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f, B[i] = (float)((i * 104729) % 997) * 1e-3f - 0.5f, C[i] = 0;
    printf("\n%s\n%-16s %6s %6s %6s %2s%2s %9s %9s %6s %6s %10s %10s\n", title, "product", "M", "N", "K", "tA", "tB", "ours GF/s", "BLAS GF/s",
           "ratio", "median", "ours ms/st", "BLAS ms/st");
    double sum_o[2] = {0}, sum_b[2] = {0}, flops = 0;
    for (int i = 0; i < n; i++) {
        double to[2], tb[2], f = 2.0 * p[i].M * p[i].N * p[i].K;
        time_both(&p[i], A, B, C, to, tb);
        for (int k = 0; k < 2; k++) sum_o[k] += to[k] * p[i].per_step, sum_b[k] += tb[k] * p[i].per_step;
        flops += f * p[i].per_step;
        printf("%-16s %6d %6d %6d %2d%2d %9.1f %9.1f %6.2f %6.2f %10.1f %10.1f\n", p[i].name, p[i].M, p[i].N, p[i].K, p[i].a_trans, p[i].b_trans,
               f / to[0] * 1e-9, tb[0] > 0 ? f / tb[0] * 1e-9 : 0, tb[0] / to[0], tb[1] / to[1], to[0] * p[i].per_step * 1e3, tb[0] * p[i].per_step * 1e3);
    }
    printf("%-16s %32s %9.1f %9.1f %6.2f %6.2f %10.1f %10.1f\n", "step's products", "", flops / sum_o[0] * 1e-9, flops / sum_b[0] * 1e-9,
           sum_b[0] / sum_o[0], sum_b[1] / sum_o[1], sum_o[0] * 1e3, sum_b[0] * 1e3);
    free(A), free(B), free(C);
}

int main(int argc, char **argv) {
    if (argc > 1 && argv[1][0]) load_openblas(argv[1]);
    if (argc > 2) only = argv[2];
    printf("%d threads; ours: %d-float vectors, micro-tile %dx%d, KC %d; OpenBLAS: %s\n", omp_get_max_threads(), GEMM_VEC, GEMM_MR, GEMM_NR, GEMM_KC,
           (blas32 || blas64) ? argv[1] : "not loaded");
    Product square[] = {{"2048^3", 2048, 2048, 2048, 0, 0, 0, 1}};
    bench_model("square", square, 1);
    Product p[64];
    int n;
    int bts[2] = {256, 1024};
    for (int i = 0; i < 2; i++) {
        char title[128];
        n = step_products(p, 0, 12, 768, 2304, 3072, 3072, 50257, bts[i]);
        snprintf(title, sizeof title, "GPT-2 124M, %d tokens a step (B*T)", bts[i]);
        bench_model(title, p, n);
        n = step_products(p, 1, 30, 576, 960, 3072, 1536, 49152, bts[i]);
        snprintf(title, sizeof title, "SmolLM2-135M shape, %d tokens a step", bts[i]);
        bench_model(title, p, n);
    }
    return 0;
}
