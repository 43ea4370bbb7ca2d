/*
cpu/gemm.h: the CPU trainer's matrix multiply, gemm(): C[M,N] (+)= A[M,K] * B[K,N] with
A and B given by strides, blocked and vectorized (AVX-512, or AVX2 + FMA) and spread
over OpenMP threads. Deterministic: the same sums in the same order whatever the
thread count or vector width (the note below says how).

It is not a general BLAS (float only, no alpha/beta, no transposes beyond strides),
and it is C, not C++: only train_sft.c (and what includes it) uses it; the GPU's
products are in cuda/matmul.cuh. On base/ only.
*/
#ifndef CPU_GEMM_H
#define CPU_GEMM_H
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "../base/util.h"

// Matrix multiply: C[M,N] (+)= A[M,K] * B[K,N] with A and B given by strides, so
// one routine serves x*W, dout*W^T and x^T*dout. Blocked like BLIS: a block of A
// (up to MB x KC) is packed once into MR-row panels shared by all threads; each
// thread packs a KC x NC panel of B and runs a register-blocked micro-kernel over
// MR x NR tiles with vector FMAs. Every output element sums over K in the same
// fixed order whatever the thread count (deterministic), and with the same
// arithmetic whatever the vector width: a chain of fused multiply-adds (one
// rounding each) over each KC block, then one add of the block's sum into C. The
// FMAs are intrinsics, so they do not depend on the compiler's choice to contract
// a*b+c (the Makefile builds with -ffp-contract=off, so the rest of the trainer
// rounds every product too, the same on every machine): an AVX-512 build and an
// AVX2 build train bit for bit alike.

#if defined(__AVX512F__)
#include <immintrin.h>
#define GEMM_VEC 16
#define vfma(a, b, c) _mm512_fmadd_ps(a, b, c)   // a*b + c, rounded once
#define vsplat(x) _mm512_set1_ps(x)
#elif defined(__FMA__)
#include <immintrin.h>
#define GEMM_VEC 8
#define vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define vsplat(x) _mm256_set1_ps(x)
#else  // no FMA unit: two roundings, so results differ from the builds above
#define GEMM_VEC 8
#define vfma(a, b, c) ((a) * (b) + (c))
#define vsplat(x) ((x) - (vfloat){0})   // exact, -0 included
#endif
#define GEMM_MR 6
#define GEMM_NR (2 * GEMM_VEC)
#define GEMM_KC 256
#define GEMM_MB 1200   // rows of A packed at once (a multiple of MR)
#define GEMM_NC 256
typedef float vfloat __attribute__((vector_size(GEMM_VEC * sizeof(float))));

// Packs A[ic:ic+mc, pc:pc+kc] as MR-row panels: panel[p*MR + r], zero-padded.
// Row-contiguous A reads each row once; column-contiguous A (x^T) is read by columns.
static void gemm_pack_a(float *dst, const float *A, long a_rs, long a_cs, int ic, int mc, int pc, int kc, int M) {
    for (int ir = 0; ir < mc; ir += GEMM_MR, dst += GEMM_MR * kc) {
        if (a_rs == 1 && ir + GEMM_MR <= mc && ic + ir + GEMM_MR <= M) {  // columns contiguous: copy MR at a time
            for (int p = 0; p < kc; p++) memcpy(dst + p * GEMM_MR, A + ic + ir + (long)(pc + p) * a_cs, GEMM_MR * sizeof(float));
            continue;
        }
        for (int r = 0; r < GEMM_MR; r++) {
            int i = ic + ir + r;
            if (ir + r >= mc || i >= M) { for (int p = 0; p < kc; p++) dst[p * GEMM_MR + r] = 0.0f; continue; }
            const float *src = A + (long)i * a_rs + (long)pc * a_cs;
            for (int p = 0; p < kc; p++) dst[p * GEMM_MR + r] = src[(long)p * a_cs];
        }
    }
}

// Packs B[pc:pc+kc, jc:jc+nc] as NR-column panels: panel[p*NR + j], zero-padded.
static void gemm_pack_b(float *dst, const float *B, long b_rs, long b_cs, int pc, int kc, int jc, int nc, int N) {
    for (int jr = 0; jr < nc; jr += GEMM_NR, dst += GEMM_NR * kc) {
        int w = nc - jr < GEMM_NR ? nc - jr : GEMM_NR;
        if (jc + jr + w > N) w = N - jc - jr;
        if (b_cs == 1) {  // rows of B are contiguous
            for (int p = 0; p < kc; p++) {
                const float *src = B + (long)(pc + p) * b_rs + jc + jr;
                float *d = dst + p * GEMM_NR;
                for (int j = 0; j < w; j++) d[j] = src[j];
                for (int j = w; j < GEMM_NR; j++) d[j] = 0.0f;
            }
        } else {          // columns of B are contiguous (or neither)
            for (int j = 0; j < GEMM_NR; j++) {
                if (j >= w) { for (int p = 0; p < kc; p++) dst[p * GEMM_NR + j] = 0.0f; continue; }
                const float *src = B + (long)pc * b_rs + (long)(jc + jr + j) * b_cs;
                for (int p = 0; p < kc; p++) dst[p * GEMM_NR + j] = src[(long)p * b_rs];
            }
        }
    }
}

// C tile (mr x nr, mr <= MR, nr <= NR) (+)= a panel * b panel over kc.
static void gemm_micro(int kc, const float *restrict a, const float *restrict b, float *C, long ldc, int mr, int nr, int accumulate) {
    vfloat acc[GEMM_MR][2];
    for (int r = 0; r < GEMM_MR; r++) { acc[r][0] = (vfloat){0}; acc[r][1] = (vfloat){0}; }
    for (int p = 0; p < kc; p++) {
        vfloat b0, b1;
        memcpy(&b0, b + p * GEMM_NR, sizeof b0);
        memcpy(&b1, b + p * GEMM_NR + GEMM_VEC, sizeof b1);
        const float *ap = a + p * GEMM_MR;
        for (int r = 0; r < GEMM_MR; r++) {
            vfloat ar = vsplat(ap[r]);
            acc[r][0] = vfma(ar, b0, acc[r][0]);
            acc[r][1] = vfma(ar, b1, acc[r][1]);
        }
    }
    for (int r = 0; r < mr; r++) {
        float *c = C + (long)r * ldc;
        if (nr == GEMM_NR) {
            vfloat c0 = {0}, c1 = {0};
            if (accumulate) { memcpy(&c0, c, sizeof c0); memcpy(&c1, c + GEMM_VEC, sizeof c1); }
            c0 += acc[r][0]; c1 += acc[r][1];
            memcpy(c, &c0, sizeof c0); memcpy(c + GEMM_VEC, &c1, sizeof c1);
        } else {
            float tmp[GEMM_NR];
            memcpy(tmp, &acc[r][0], sizeof acc[r][0]);
            memcpy(tmp + GEMM_VEC, &acc[r][1], sizeof acc[r][1]);
            for (int j = 0; j < nr; j++) c[j] = (accumulate ? c[j] : 0.0f) + tmp[j];
        }
    }
}

// Packing buffers, allocated once (allocating per call would map fresh pages on
// every product): a block of A shared by all threads, a panel of B per thread.
static float *gemm_a_buf;
static _Thread_local float *gemm_b_buf;

static void gemm(int M, int N, int K, const float *A, long a_rs, long a_cs, const float *B, long b_rs, long b_cs,
                 float *C, long ldc, int accumulate) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { if (!accumulate) for (int i = 0; i < M; i++) memset(C + (long)i * ldc, 0, (size_t)N * sizeof(float)); return; }
    if (!gemm_a_buf && !(gemm_a_buf = (float *)aligned_alloc(64, sizeof(float) * GEMM_MB * GEMM_KC))) fatal("out of memory in gemm");
    // column tiles narrow enough that every thread gets several
    int threads = omp_get_max_threads(), nc = (N + 4 * threads - 1) / (4 * threads);
    nc = (nc + GEMM_NR - 1) / GEMM_NR * GEMM_NR;
    if (nc > GEMM_NC) nc = GEMM_NC;
    int ntiles = (N + nc - 1) / nc;
    int parallel = (double)M * N * K > 2e5;
    for (int ic = 0; ic < M; ic += GEMM_MB) {
        int mb = M - ic < GEMM_MB ? M - ic : GEMM_MB;
        for (int pc = 0; pc < K; pc += GEMM_KC) {
            int kc = K - pc < GEMM_KC ? K - pc : GEMM_KC, acc = accumulate || pc > 0;
            int panels = (mb + GEMM_MR - 1) / GEMM_MR;
#pragma omp parallel for schedule(static) if (parallel)
            for (int q = 0; q < panels; q++) {
                int ir = q * GEMM_MR;
                gemm_pack_a(gemm_a_buf + (long)ir * kc, A, a_rs, a_cs, ic + ir, mb - ir < GEMM_MR ? mb - ir : GEMM_MR, pc, kc, M);
            }
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
            for (int t = 0; t < ntiles; t++) {
                if (!gemm_b_buf && !(gemm_b_buf = (float *)aligned_alloc(64, sizeof(float) * GEMM_KC * GEMM_NC))) fatal("out of memory in gemm");
                int jc = t * nc, ncur = N - jc < nc ? N - jc : nc;
                gemm_pack_b(gemm_b_buf, B, b_rs, b_cs, pc, kc, jc, ncur, N);
                for (int jr = 0; jr < ncur; jr += GEMM_NR) {
                    int nr = ncur - jr < GEMM_NR ? ncur - jr : GEMM_NR;
                    for (int ir = 0; ir < mb; ir += GEMM_MR) {
                        int mr = mb - ir < GEMM_MR ? mb - ir : GEMM_MR;
                        gemm_micro(kc, gemm_a_buf + (long)ir * kc, gemm_b_buf + (long)jr * kc, C + (long)(ic + ir) * ldc + jc + jr, ldc, mr, nr, acc);
                    }
                }
            }
        }
    }
}

#endif  // CPU_GEMM_H
