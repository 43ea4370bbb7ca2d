// tests/train/sft_kernels.h: test_sft.c's checks of the CPU kernels' arithmetic: gemm
// against a double-precision loop and, bit for bit, against fmaf chains (cpu/gemm.h);
// dot_lanes, sum_squares_lanes and exp_vec against double precision (cpu/vecmath.h). Included by test_sft.c
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
