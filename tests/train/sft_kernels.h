// tests/train/sft_kernels.h: test_sft.c's checks of the CPU kernels' arithmetic: gemm
// against a double-precision loop and, bit for bit, against fmaf chains (cpu/gemm.h);
// dot_lanes, sum_squares_lanes and exp_vec against double precision (cpu/vecmath.h); attention
// (cpu/attention.h) bit for bit against its plain loops. Included by test_sft.c
// after its helpers (check, rel_err); not a header of its own.

// ---- the matrix kernel against a plain double-precision triple loop ---------

static void test_gemm(void) {
    int shapes[][3] = {{1, 1, 1}, {5, 7, 3}, {130, 300, 270}, {1300, 40, 520}, {7, 1000, 33}};
    double worst = 0.0;
    for (int sh = 0; sh < 5; sh++) {
        int M = shapes[sh][0], N = shapes[sh][1], K = shapes[sh][2];
        float *A = (float *)xmalloc((size_t)M * K * 4), *B = (float *)xmalloc((size_t)K * N * 4);
        float *C = (float *)xmalloc((size_t)M * N * 4), *R = (float *)xmalloc((size_t)M * N * 4);
        Rng r;
        rng_seed(&r, (uint64_t)sh);
        for (int i = 0; i < M * K; i++) A[i] = rng_normal(&r);
        for (int i = 0; i < K * N; i++) B[i] = rng_normal(&r);
        for (int layout = 0; layout < 4; layout++) {  // A and B each row- or column-contiguous
            long ars = layout & 1 ? 1 : K, acs = layout & 1 ? M : 1, brs = layout & 2 ? 1 : N, bcs = layout & 2 ? K : 1;
            for (int accumulate = 0; accumulate < 2; accumulate++) {
                for (int i = 0; i < M * N; i++) C[i] = 0.5f;
                gemm(M, N, K, A, ars, acs, B, brs, bcs, C, N, accumulate);
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        double acc = accumulate ? 0.5 : 0.0;
                        for (int p = 0; p < K; p++) acc += (double)A[i * ars + p * acs] * B[p * brs + j * bcs];
                        R[i * N + j] = (float)acc;
                    }
                worst = fmax(worst, rel_err(C, R, (size_t)M * N, 1.0) / sqrt((double)K));
            }
        }
        free(A); free(B); free(C); free(R);
    }
    check("gemm_matches_double_loop", worst < 1e-6, "worst error %.3g (relative to max |C|, per sqrt(K))", worst);
}

// ---- the gemm's arithmetic, exactly: the same on every machine with FMA units ----
// Each element is one chain of single-rounding FMAs over all of K, in order, starting
// from C's value. C's fmaf computes the same thing one element at a time, so an AVX-512
// and an AVX2 build (different tiles and vector widths) both match it bit for bit, and
// so does any blocking of K. (A build without FMA units rounds twice and is exempt.)
static void test_gemm_bitwise(void) {
#if defined(__FMA__) || defined(__AVX512F__)
    // short last tiles in M and N, K over several blocks, products wide enough to be cut
    // into column tiles for the threads (A packed once, shared), one of them with more
    // rows than one packed block of A (GEMM_MC) and a short last block of K, a tall one
    // (row tiles: B packed once, shared); each again with the shared operand packed one
    // KC block at a time (slabs of K, as the output head's products are)
    int shapes[][3] = {{7, 45, 600}, {13, 33, 256}, {1, 5, 1}, {70, 1100, 300}, {200, 130, 270}, {300, 40, 600}};
    long mismatches = 0, total = 0, slab_default = gemm_slab_floats;
    for (int sh = 0; sh < 12; sh++) {
        gemm_slab_floats = sh < 6 ? slab_default : 1;
        int M = shapes[sh % 6][0], N = shapes[sh % 6][1], K = shapes[sh % 6][2];
        float *A = (float *)xmalloc((size_t)M * K * 4), *B = (float *)xmalloc((size_t)K * N * 4), *C = (float *)xmalloc((size_t)M * N * 4);
        Rng r;
        rng_seed(&r, 100 + (uint64_t)sh);
        for (int i = 0; i < M * K; i++) A[i] = rng_normal(&r);
        for (int i = 0; i < K * N; i++) B[i] = rng_normal(&r);
        for (int layout = 0; layout < 4; layout++) {  // A and B each row- or column-contiguous
            long ars = layout & 1 ? 1 : K, acs = layout & 1 ? M : 1, brs = layout & 2 ? 1 : N, bcs = layout & 2 ? K : 1;
            for (int accumulate = 0; accumulate < 2; accumulate++) {
                for (int i = 0; i < M * N; i++) C[i] = 0.25f;
                gemm(M, N, K, A, ars, acs, B, brs, bcs, C, N, accumulate);
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        float c = accumulate ? 0.25f : 0.0f;
                        for (int p = 0; p < K; p++) c = fmaf(A[i * ars + p * acs], B[p * brs + j * bcs], c);
                        mismatches += memcmp(&c, &C[i * N + j], sizeof c) != 0;
                        total++;
                    }
            }
        }
        free(A); free(B); free(C);
    }
    gemm_slab_floats = slab_default;
    check("gemm_is_an_fma_chain_bit_for_bit", mismatches == 0, "%ld of %ld elements differ from fmaf chains over K", mismatches, total);
#else
    printf("skip gemm_is_an_fma_chain_bit_for_bit: built without FMA units (ARCHFLAGS has no -mfma or -march with FMA)\n");
#endif
}

// ---- dot_lanes against a double-precision dot product --------------------------
// Lengths around the 16 lanes (a tail in lanes 0..n%16-1) and head sizes (64, 80, 128).
static void test_dot_lanes(void) {
    int lengths[] = {1, 7, 15, 16, 17, 33, 64, 80, 128, 1000};
    double worst = 0.0;
    Rng r;
    rng_seed(&r, 21);
    float x[1000], y[1000];
    for (int i = 0; i < 1000; i++) x[i] = rng_normal(&r), y[i] = rng_normal(&r);
    for (int k = 0; k < 10; k++) {
        int n = lengths[k];
        double want = 0.0, scale = 0.0;
        for (int i = 0; i < n; i++) want += (double)x[i] * y[i], scale += fabs((double)x[i] * y[i]);
        worst = fmax(worst, fabs(dot_lanes(x, y, n) - want) / scale);
    }
    check("dot_lanes_matches_double", worst < 1e-6, "worst error %.3g relative to sum |x_i y_i|", worst);
}

// ---- sum_squares_lanes against a sequential double sum ----------------------------
// The same lengths; each product rounded to float first (g * scale as a float), as the
// trainer's gradient norm defines it. Only the double additions' order differs.
static void test_sum_squares_lanes(void) {
    int lengths[] = {1, 7, 15, 16, 17, 33, 64, 80, 128, 1000};
    double worst = 0.0;
    Rng r;
    rng_seed(&r, 22);
    float g[1000], scale = 0.37f;
    for (int i = 0; i < 1000; i++) g[i] = rng_normal(&r);
    for (int k = 0; k < 10; k++) {
        int n = lengths[k];
        double want = 0.0;
        for (int i = 0; i < n; i++) { float x = g[i] * scale; want += (double)x * x; }
        worst = fmax(worst, fabs(sum_squares_lanes(g, (size_t)n, scale) - want) / want);
    }
    check("sum_squares_lanes_matches_double", worst < 1e-13, "worst relative error %.3g", worst);
}

// ---- exp_vec against double-precision exp ------------------------------------
static void test_exp_vec(void) {
    double worst = 0.0;
    float worst_x = 0.0f;
    for (int i = 0; i <= 2000000; i++) {
        float x = -87.0f + 175.0f * (float)i / 2000000.0f;
        double e = exp((double)x);
        float ef = (float)e, ulp = nextafterf(ef, INFINITY) - ef;
        double err = fabs((double)exp_vec(x) - e) / ulp;
        if (err > worst) { worst = err; worst_x = x; }
    }
    check("exp_vec_within_1.5_ulp", worst <= 1.5, "worst %.3f ulp at x = %g", worst, worst_x);
    float lo = exp_vec(-1000.0f), hi = exp_vec(1000.0f), nan = exp_vec(NAN);
    check("exp_vec_clamps_and_keeps_nan", lo >= 0.0f && lo < 2e-38f && isfinite(hi) && hi > 1e38f && isnan(nan),
          "exp_vec(-1000) = %g, exp_vec(1000) = %g, exp_vec(nan) = %g", lo, hi, nan);
}

// ---- attention (cpu/attention.h) against its plain loops, bit for bit ---------

// The loops cpu/attention.h's functions stand for: a query row at a time, one dot_lanes
// per key, the weighted sums and dk, dv updated key by key in memory (the code before
// they were vectorized over keys). The same sums in the same order, so the same bits.
static void plain_attention(float *out, float *att, float *dqkv, const float *dout, const float *qkv, const int *ds, int B, int T, int NH,
                            int KVH, int HS, float scale, int window) {
    int QKV = (NH + 2 * KVH) * HS, A = NH * HS, group = NH / KVH;
    float *g = (float *)xmalloc((size_t)T * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * QKV + h * HS, *kv = qkv + (size_t)b * T * QKV + A + h / group * HS;
                float *a = att + (((size_t)b * NH + h) * T + t) * T, *o = out + ((size_t)b * T + t) * A + h * HS, mx = -INFINITY, sum = 0.0f;
                int s0 = attention_first_key(ds[b * T + t], t, window);
                for (int s = s0; s <= t; s++) a[s] = dot_lanes(q, kv + (size_t)s * QKV, HS) * scale, mx = fmaxf(mx, a[s]);
                for (int s = s0; s <= t; s++) a[s] = exp_vec(a[s] - mx);
                for (int s = s0; s <= t; s++) sum += a[s];
                for (int i = 0; i < HS; i++) o[i] = 0.0f;
                for (int s = s0; s <= t; s++) {
                    a[s] *= 1.0f / sum;
                    for (int i = 0; i < HS; i++) o[i] += a[s] * kv[(size_t)s * QKV + KVH * HS + i];
                }
            }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)  // heads in order: the key/value head's updates in the order of its query heads
            for (int t = 0; t < T; t++) {
                const float *a = att + (((size_t)b * NH + h) * T + t) * T, *dy = dout + ((size_t)b * T + t) * A + h * HS;
                const float *q = qkv + ((size_t)b * T + t) * QKV + h * HS;
                float *dq = dqkv + ((size_t)b * T + t) * QKV + h * HS, dot = 0.0f;
                size_t k0 = (size_t)b * T * QKV + A + h / group * HS, v0 = k0 + KVH * HS;
                int s0 = attention_first_key(ds[b * T + t], t, window);
                for (int s = s0; s <= t; s++) {
                    g[s] = dot_lanes(dy, qkv + v0 + (size_t)s * QKV, HS), dot += a[s] * g[s];
                    for (int i = 0; i < HS; i++) dqkv[v0 + (size_t)s * QKV + i] += a[s] * dy[i];
                }
                for (int s = s0; s <= t; s++) {
                    float dpre = a[s] * (g[s] - dot) * scale;
                    for (int i = 0; i < HS; i++) dq[i] += dpre * qkv[k0 + (size_t)s * QKV + i], dqkv[k0 + (size_t)s * QKV + i] += dpre * q[i];
                }
            }
    free(g);
}

// attention_forward and attention_backward against plain_attention, every output bit for
// bit: head sizes 4, 20 and 80 (the scalar, one-vector and four-vector paths of the
// weighted sums), T = 37 (a last block of keys shorter than a vector), grouped-query and
// not, packed documents (lengths 11, 1, 25 | 37), windows 0 (full), 1 and 6.
static void test_attention_bitwise(void) {
    enum { B = 2, T = 37 };
    const int shapes[][3] = {{4, 2, 4}, {3, 3, 20}, {2, 1, 80}}, windows[] = {0, 1, 6};
    int ds[B * T], differ = 0, cases = 0;
    for (int t = 0; t < T; t++) ds[t] = t < 11 ? 0 : t < 12 ? 11 : 12, ds[T + t] = 0;
    Rng rng;
    rng_seed(&rng, 4242);
    for (int sh = 0; sh < 3; sh++) {
        int NH = shapes[sh][0], KVH = shapes[sh][1], HS = shapes[sh][2], QKV = (NH + 2 * KVH) * HS, A = NH * HS;
        size_t nq = (size_t)B * T * QKV, no = (size_t)B * T * A, na = (size_t)B * NH * T * T;
        float *qkv = (float *)xmalloc(nq * 4), *dout = (float *)xmalloc(no * 4), *out[2], *att[2], *dqkv[2];
        for (int k = 0; k < 2; k++) out[k] = (float *)xcalloc(no, 4), att[k] = (float *)xcalloc(na, 4), dqkv[k] = (float *)xcalloc(nq, 4);
        for (size_t i = 0; i < nq; i++) qkv[i] = 2.0f * rng_float(&rng) - 1.0f;
        for (size_t i = 0; i < no; i++) dout[i] = 2.0f * rng_float(&rng) - 1.0f;
        for (int w = 0; w < 3; w++, cases++) {
            float scale = 1.0f / sqrtf((float)HS);
            memset(dqkv[0], 0, nq * 4), memset(dqkv[1], 0, nq * 4);
            attention_forward(out[0], att[0], qkv, ds, B, T, NH, KVH, HS, scale, windows[w]);
            attention_backward(dqkv[0], dout, qkv, att[0], ds, B, T, NH, KVH, HS, scale, windows[w]);
            plain_attention(out[1], att[1], dqkv[1], dout, qkv, ds, B, T, NH, KVH, HS, scale, windows[w]);
            differ += memcmp(out[0], out[1], no * 4) != 0 || memcmp(dqkv[0], dqkv[1], nq * 4) != 0;
        }
        free(qkv), free(dout);
        for (int k = 0; k < 2; k++) free(out[k]), free(att[k]), free(dqkv[k]);
    }
    check("attention_is_its_plain_loops_bit_for_bit", differ == 0, "%d of %d cases differ", differ, cases);
}
