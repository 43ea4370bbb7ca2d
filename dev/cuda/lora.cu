// dev/cuda/lora.cu: checks and timings of cuda/lora.cuh (LoRA's adapter products through
// cuBLAS and the dropout kernels on the adapter's input).
// - dropout: the mask of every element equals model/lora.h's lora_dropout_mask for the key,
//   bit for bit (the CPU trainer applies the same function, cpu/lora.h's lora_dropout_forward),
//   about a fraction p is dropped, the backward adds the gradient through the same mask, and
//   another key draws another mask;
// - the products: h, the output slice, dB, dA, dh and dx against a plain double loop on the
//   same (rounded) inputs, with and without dropout, at a column offset inside a wider product
//   (Llama's k_proj in q|k|v) and on a whole product; the columns outside the slice untouched.
// One version of each (the dropout kernels are one thread per element; the products are cuBLAS's).
// Build: make -C dev/cuda lora [PRECISION=FP32]
#include "../../cuda/common.cuh"
#include "../../cuda/lora.cuh"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // cpu_ref.h brings model/model.h's static helpers
#include "cpu_ref.h"
#pragma GCC diagnostic pop

#include "check.cuh"

static cublasHandle_t g_blas;

// the mask's values on the host: model/lora.h's function, as the CPU trainer applies it
static std::vector<float> host_mask(size_t n, uint64_t key, float p) {
    std::vector<float> m(n);
    uint32_t threshold = lora_dropout_threshold(p);
    float keep = 1.0f / (1.0f - p);
    for (size_t e = 0; e < n; e++) m[e] = lora_dropout_mask(key, e, threshold, keep);
    return m;
}

static void check_dropout(size_t n, float p) {
    char name[160];
    uint64_t key = lora_dropout_key(1337, 5, 3, 2, LORA_V), other = lora_dropout_key(1337, 5, 4, 2, LORA_V);
    std::vector<float> x = rand_x(n, 1.0f), g = rand_x(n, 1.0f), dx0 = rand_x(n, 1.0f), mask = host_mask(n, key, p);
    std::vector<float> want(n), want_dx(n);
    size_t dropped = 0;
    for (size_t e = 0; e < n; e++) {
        want[e] = round_x(x[e] * mask[e]);
        want_dx[e] = round_x(dx0[e] + g[e] * mask[e]);
        dropped += mask[e] == 0.0f;
    }
    floatX *d_x = dev_x(x), *d_g = dev_x(g), *d_dx = dev_x(dx0), *d_xd = dev_alloc<floatX>(n);
    poison(d_xd, n * sizeof(floatX));
    lora_dropout_forward(d_xd, d_x, n, key, p, 0);
    lora_dropout_backward(d_dx, d_g, n, key, p, 0);
    std::vector<float> got = download_x(d_xd, n), got_dx = download_x(d_dx, n);
    snprintf(name, sizeof name, "lora_dropout_forward n=%zu p=%g", n, p);
    check(name, got, want, 0.0f);  // the same float product, rounded once: exact
    snprintf(name, sizeof name, "lora_dropout_backward n=%zu p=%g", n, p);
    check(name, got_dx, want_dx, TOL);  // a + b * c: the GPU may fuse it
    // about n p dropped (within 5 standard deviations), and another micro-batch's key draws another mask
    double sd = sqrt((double)n * p * (1.0 - p));
    std::vector<float> mask2 = host_mask(n, other, p);
    size_t differ = 0;
    for (size_t e = 0; e < n; e++) differ += (mask[e] == 0.0f) != (mask2[e] == 0.0f);
    bool ok = fabs((double)dropped - n * p) <= 5.0 * sd + 1.0 && differ > 0;
    printf("%s lora_dropout_mask n=%zu p=%g (%zu dropped, %.0f expected; %zu differ under another key)\n", ok ? "ok" : "FAIL", n, p, dropped,
           n * p, differ);
    if (!ok) g_failures++;
    for (floatX* q : {d_x, d_g, d_dx, d_xd}) CUDA_CHECK(cudaFree(q));
}

// One adapter (A [R, IC], B [O, R], scale s) on the columns [col, col + O) of an N x OC product,
// dropout p (0: none) with key: forward, then backward from dout, against double loops.
static void check_products(int N, int IC, int OC, int col, int O, int R, float s, float p) {
    char name[200], tag[120];
    snprintf(tag, sizeof tag, "N=%d IC=%d OC=%d cols [%d, %d) R=%d p=%g", N, IC, OC, col, col + O, R, p);
    uint64_t key = lora_dropout_key(7, 2, 1, 0, LORA_K);
    std::vector<float> x = rand_x((size_t)N * IC, 1.0f), A = rand_x((size_t)R * IC, 0.5f), B = rand_x((size_t)O * R, 0.5f);
    std::vector<float> out0 = rand_x((size_t)N * OC, 1.0f), dout = rand_x((size_t)N * OC, 1.0f), dx0 = rand_x((size_t)N * IC, 1.0f);
    std::vector<float> dA0 = rand_f((size_t)R * IC, 1.0f), dB0 = rand_f((size_t)O * R, 1.0f);
    std::vector<float> mask = p > 0 ? host_mask((size_t)N * IC, key, p) : std::vector<float>((size_t)N * IC, 1.0f);
    // the reference, in double from the rounded inputs; h and dh rounded as the GPU stores them
    std::vector<float> xd((size_t)N * IC), h((size_t)N * R), dh((size_t)N * R);
    for (size_t e = 0; e < xd.size(); e++) xd[e] = round_x(x[e] * mask[e]);
    std::vector<float> want_h((size_t)N * R), want_out = out0, want_dA = dA0, want_dB = dB0, want_dx = dx0, want_dh((size_t)N * R);
    for (int n = 0; n < N; n++)
        for (int r = 0; r < R; r++) {
            double acc = 0.0;
            for (int i = 0; i < IC; i++) acc += (double)xd[(size_t)n * IC + i] * A[(size_t)r * IC + i];
            want_h[(size_t)n * R + r] = (float)(s * acc);
            h[(size_t)n * R + r] = round_x((float)(s * acc));
        }
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double acc = 0.0;
            for (int r = 0; r < R; r++) acc += (double)h[(size_t)n * R + r] * B[(size_t)o * R + r];
            want_out[(size_t)n * OC + col + o] = (float)(out0[(size_t)n * OC + col + o] + acc);
        }
    for (int o = 0; o < O; o++)
        for (int r = 0; r < R; r++) {
            double acc = 0.0;
            for (int n = 0; n < N; n++) acc += (double)dout[(size_t)n * OC + col + o] * h[(size_t)n * R + r];
            want_dB[(size_t)o * R + r] += (float)acc;
        }
    for (int n = 0; n < N; n++)
        for (int r = 0; r < R; r++) {
            double acc = 0.0;
            for (int o = 0; o < O; o++) acc += (double)dout[(size_t)n * OC + col + o] * B[(size_t)o * R + r];
            want_dh[(size_t)n * R + r] = (float)(s * acc);
            dh[(size_t)n * R + r] = round_x((float)(s * acc));
        }
    for (int r = 0; r < R; r++)
        for (int i = 0; i < IC; i++) {
            double acc = 0.0;
            for (int n = 0; n < N; n++) acc += (double)dh[(size_t)n * R + r] * xd[(size_t)n * IC + i];
            want_dA[(size_t)r * IC + i] += (float)acc;
        }
    for (int n = 0; n < N; n++)
        for (int i = 0; i < IC; i++) {
            double acc = 0.0;
            for (int r = 0; r < R; r++) acc += (double)dh[(size_t)n * R + r] * A[(size_t)r * IC + i];
            want_dx[(size_t)n * IC + i] = (float)(dx0[(size_t)n * IC + i] + mask[(size_t)n * IC + i] * acc);
        }
    floatX *d_x = dev_x(x), *d_A = dev_x(A), *d_B = dev_x(B), *d_out = dev_x(out0), *d_dout = dev_x(dout), *d_dx = dev_x(dx0);
    floatX *d_xd = dev_alloc<floatX>((size_t)N * IC), *d_h = dev_alloc<floatX>((size_t)N * R), *d_dh = dev_alloc<floatX>((size_t)N * R);
    float *d_dA = dev_copy(dA0), *d_dB = dev_copy(dB0);
    std::vector<unsigned char> out_before = download_bytes(d_out, (size_t)N * OC * sizeof(floatX));
    // as train_sft.cu's lora_site_forward and lora_site_backward call them
    const floatX* xin = d_x;
    if (p > 0) { lora_dropout_forward(d_xd, d_x, (size_t)N * IC, key, p, 0); xin = d_xd; }
    lora_forward(g_blas, d_out, d_h, xin, d_A, d_B, s, N, IC, OC, col, O, R);
    lora_backward_weights(g_blas, d_dA, d_dB, d_dh, d_dout, d_h, xin, d_B, s, N, IC, OC, col, O, R);
    if (p > 0) {
        lora_backward_dx(g_blas, d_xd, d_dh, d_A, N, IC, R, 0.0f);
        lora_dropout_backward(d_dx, d_xd, (size_t)N * IC, key, p, 0);
    } else {
        lora_backward_dx(g_blas, d_dx, d_dh, d_A, N, IC, R, 1.0f);
    }
    snprintf(name, sizeof name, "lora_forward_h %s", tag);
    check(name, download_x(d_h, (size_t)N * R), want_h, TOL);
    snprintf(name, sizeof name, "lora_forward_out %s", tag);
    check(name, download_x(d_out, (size_t)N * OC), want_out, TOL);
    std::vector<unsigned char> out_after = download_bytes(d_out, (size_t)N * OC * sizeof(floatX));
    size_t X = sizeof(floatX), changed = 0;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < OC; c++)
            if ((c < col || c >= col + O) && memcmp(&out_before[((size_t)n * OC + c) * X], &out_after[((size_t)n * OC + c) * X], X)) changed++;
    printf("%s lora_forward_other_columns_untouched %s (%zu changed)\n", changed ? "FAIL" : "ok", tag, changed);
    if (changed) g_failures++;
    snprintf(name, sizeof name, "lora_backward_dB %s", tag);
    check(name, download(d_dB, (size_t)O * R), want_dB, TOL);
    snprintf(name, sizeof name, "lora_backward_dh %s", tag);
    check(name, download_x(d_dh, (size_t)N * R), want_dh, TOL);
    snprintf(name, sizeof name, "lora_backward_dA %s", tag);
    check(name, download(d_dA, (size_t)R * IC), want_dA, TOL);
    snprintf(name, sizeof name, "lora_backward_dx %s", tag);
    check(name, download_x(d_dx, (size_t)N * IC), want_dx, TOL);
    for (floatX* q : {d_x, d_A, d_B, d_out, d_dout, d_dx, d_xd, d_h, d_dh}) CUDA_CHECK(cudaFree(q));
    CUDA_CHECK(cudaFree(d_dA));
    CUDA_CHECK(cudaFree(d_dB));
}

static void timings(void) {
    const int N = 8 * 1024, IC = 4096;  // Llama-3.1-8B's width, 8k positions
    size_t n = (size_t)N * IC, X = sizeof(floatX);
    floatX *x = dev_alloc<floatX>(n), *xd = dev_alloc<floatX>(n);
    fill_hash(x, n, 1.0f, 1);
    uint64_t key = lora_dropout_key(1, 0, 0, 0, LORA_Q);
    char name[128];
    snprintf(name, sizeof name, "lora_dropout_forward n=%zu", n);
    report_time(name, time_ms([&] { lora_dropout_forward(xd, x, n, key, 0.1f, 0); }, 20), 2.0 * n * X);  // read x, write xd
    snprintf(name, sizeof name, "lora_dropout_backward n=%zu", n);
    report_time(name, time_ms([&] { lora_dropout_backward(xd, x, n, key, 0.1f, 0); }, 20), 3.0 * n * X);  // read g and dx, write dx
    for (floatX* q : {x, xd}) CUDA_CHECK(cudaFree(q));
}

int main(void) {
    if (!have_cuda_device("lora")) return 0;
    CUBLAS_CHECK(cublasCreate(&g_blas));
    check_dropout(100000, 0.1f);
    check_dropout(4097, 0.5f);
    check_products(37, 48, 80, 32, 16, 4, 2.0f, 0.0f);   // k_proj's 16 columns after q's 32 of a q|k|v product
    check_products(37, 48, 80, 32, 16, 4, 2.0f, 0.25f);  // the same with dropout
    check_products(20, 64, 24, 0, 24, 8, 0.5f, 0.0f);    // a whole product (o_proj, GPT-2's c_attn)
    timings();
    CUDA_CHECK(cudaDeviceSynchronize());
    CUBLAS_CHECK(cublasDestroy(g_blas));
    printf("lora [%s]: %d failure(s)\n", PRECISION_NAME, g_failures);
    return g_failures ? 1 : 0;
}
