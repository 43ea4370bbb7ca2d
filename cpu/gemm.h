/*
cpu/gemm.h: the CPU trainer's matrix multiply, gemm(): C[M,N] (+)= A[M,K] * B[K,N] with
A and B given by strides, blocked and vectorized (AVX-512, or AVX2 + FMA) and spread
over OpenMP threads. Deterministic: the same sums in the same order whatever the
thread count, vector width or blocking (the note below says how).

It is not a general BLAS (float only, no alpha/beta, no transposes beyond strides),
and it is C, not C++: only train_sft.c (and what includes it) uses it; the GPU's
products are in cuda/matmul.cuh. dev/bench_gemm.c times it against OpenBLAS on the
trainer's shapes. On base/ only.
*/
#ifndef CPU_GEMM_H
#define CPU_GEMM_H
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "../base/util.h"

// Matrix multiply: C[M,N] (+)= A[M,K] * B[K,N] with A and B given by strides, so one
// routine serves x*W, dout*W^T and x^T*dout.
//
// The arithmetic: every output element is ONE chain of fused multiply-adds (one
// rounding each) over k = 0..K-1 in order, starting from C's value (accumulate) or
// from 0. Blocking K only pauses the chain (the partial sum is stored in C and picked
// up again), so the result does not depend on the block sizes, the tiles, the vector
// width or the thread count: an AVX-512 build and an AVX2 build train bit for bit
// alike. The FMAs are intrinsics, so they do not depend on the compiler's choice to
// contract a*b+c (the Makefile builds with -ffp-contract=off, so the rest of the
// trainer rounds every product too, the same on every machine).
//
// The schedule: C is cut into tiles (of columns, or of rows for a tall product: gemm()
// says which) that the threads take one at a time (dynamic: a thread slowed by the
// machine's other work takes fewer), so one product is one parallel region with no
// barrier inside. For each block of KC rows of B a thread packs its tile's KC x nc
// slice into NR-column panels (contiguous vector
// loads in the micro-kernel; a panel, KC x NR floats, stays in L1 while A streams
// past it), packs a block of up to MC rows of A into MR-row panels, and runs a
// register-blocked micro-kernel over MR x NR tiles of C.
#if defined(__AVX512F__)
#include <immintrin.h>
#define GEMM_VEC 16
#define GEMM_MR 8   // 8 x 48: 24 accumulators of AVX-512's 32 registers, 3 for B, 1 for A
#define GEMM_NV 3
#define vfma(a, b, c) _mm512_fmadd_ps(a, b, c)   // a*b + c, rounded once
#define vsplat(x) _mm512_set1_ps(x)
#elif defined(__FMA__)
#include <immintrin.h>
#define GEMM_VEC 8
#define GEMM_MR 6   // 6 x 16: 12 accumulators of AVX2's 16 registers
#define GEMM_NV 2
#define vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define vsplat(x) _mm256_set1_ps(x)
#else  // no FMA unit: two roundings, so results differ from the builds above
#define GEMM_VEC 8
#define GEMM_MR 6
#define GEMM_NV 2
#define vfma(a, b, c) ((a) * (b) + (c))
#define vsplat(x) ((x) - (vfloat){0})   // exact, -0 included
#endif
#define GEMM_NR (GEMM_NV * GEMM_VEC)
#define GEMM_KC 128                // rows of B per packed panel: a KC x NR panel is 24 KB (AVX-512)
#define GEMM_MC (64 * GEMM_MR)     // rows of A swept per B panel before the next panel: A's block stays in L2
#define GEMM_NC (8 * GEMM_NR)      // widest column tile of a wide product
#define GEMM_NT 2048               // widest column tile of a tall one
typedef float vfloat __attribute__((vector_size(GEMM_VEC * sizeof(float))));
// Loops over the micro-tile's rows and vectors unroll completely, so that the
// accumulators are registers: gcc 12 at -O3 otherwise keeps a copy of them in memory,
// stored on every step of k (half the kernel's speed).
#define UNROLLED _Pragma("GCC unroll 16")

#if defined(__AVX__)
// Transposes the 8x8 block at src (row i at src + i*ld) into dst (row i at dst + i*dst_ld).
static inline void gemm_transpose8(float *dst, long dst_ld, const float *src, long ld) {
    __m256 r[8], t[8], s[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * ld);
    for (int i = 0; i < 8; i += 2) t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    for (int i = 0; i < 8; i += 4) {  // [x0 y0 z0 w0 | x4 ...] from the pairs' interleavings
        s[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {  // the low halves hold columns 0-3, the high halves 4-7
        _mm256_storeu_ps(dst + i * dst_ld, _mm256_permute2f128_ps(s[i], s[i + 4], 0x20));
        _mm256_storeu_ps(dst + (i + 4) * dst_ld, _mm256_permute2f128_ps(s[i], s[i + 4], 0x31));
    }
}
#endif

// Packs B[pc:pc+kc, jc:jc+nc] as NR-column panels: panel[p*NR + j], zero-padded past N.
static void gemm_pack_b(float *dst, const float *B, long b_rs, long b_cs, int pc, int kc, int jc, int nc) {
    for (int jr = 0; jr < nc; jr += GEMM_NR, dst += GEMM_NR * kc) {
        int w = nc - jr < GEMM_NR ? nc - jr : GEMM_NR;
        if (b_cs == 1) {  // rows of B are contiguous: copy each row's run
            for (int p = 0; p < kc; p++) {
                const float *src = B + (long)(pc + p) * b_rs + jc + jr;
                float *d = dst + p * GEMM_NR;
                if (w == GEMM_NR) { memcpy(d, src, GEMM_NR * sizeof(float)); continue; }  // a fixed size: vector moves
                memcpy(d, src, (size_t)w * sizeof(float));
                for (int j = w; j < GEMM_NR; j++) d[j] = 0.0f;
            }
            continue;
        }
        // columns of B contiguous (x * W^T, dout * W with W [in, out]): a transpose, in 8x8
        // blocks in registers where B's columns are contiguous, element by element elsewhere
        const float *src = B + (long)pc * b_rs + (long)(jc + jr) * b_cs;
        int j8 = 0, p8 = 0;
#if defined(__AVX__)
        if (b_rs == 1) {
            j8 = w / 8 * 8, p8 = kc / 8 * 8;
            for (int p = 0; p < p8; p += 8)
                for (int j = 0; j < j8; j += 8) gemm_transpose8(dst + p * GEMM_NR + j, GEMM_NR, src + (long)j * b_cs + p, b_cs);
        }
#endif
        for (int j = 0; j < GEMM_NR; j++)
            for (int p = j < j8 ? p8 : 0; p < kc; p++) dst[p * GEMM_NR + j] = j < w ? src[(long)j * b_cs + (long)p * b_rs] : 0.0f;
    }
}

// Packs A[i0:i0+mc, pc:pc+kc] as MR-row panels, panel[p*MR + r], rows past mc zero. Read
// in place instead, A's MR rows would often share cache sets (row lengths that are
// multiples of 1024 floats are common: every row at the same offset in its page), and
// its columns (x^T, dout^T) sit a page or more apart, out of the prefetchers' reach.
static void gemm_pack_a(float *dst, const float *A, long a_rs, long a_cs, int i0, int mc, int pc, int kc) {
    for (int ir = 0; ir < mc; ir += GEMM_MR, dst += GEMM_MR * kc) {
        int mr = mc - ir < GEMM_MR ? mc - ir : GEMM_MR, p0 = 0;
        const float *src = A + (long)(i0 + ir) * a_rs + (long)pc * a_cs;
        if (a_rs == 1 && mr == GEMM_MR) {  // columns contiguous: a run of MR at each k
            for (int p = 0; p < kc; p++) memcpy(dst + p * GEMM_MR, src + (long)p * a_cs, GEMM_MR * sizeof(float));
            continue;
        }
#if defined(__AVX__) && GEMM_MR == 8
        if (a_cs == 1 && mr == GEMM_MR)  // rows contiguous: 8x8 transposes
            for (; p0 + 8 <= kc; p0 += 8) gemm_transpose8(dst + p0 * GEMM_MR, GEMM_MR, src + p0, a_rs);
#endif
        for (int p = p0; p < kc; p++)
            for (int r = 0; r < GEMM_MR; r++) dst[p * GEMM_MR + r] = r < mr ? src[(long)r * a_rs + (long)p * a_cs] : 0.0f;
    }
}

// The micro-kernel: C tile (mr x nr, mr <= MR, nr <= NR) = (from_c ? C : 0) + A panel * B
// panel over kc, each element a chain of FMAs. a: the packed A panel, a[p * MR + r];
// b: the packed B panel, b[p * NR + j].
static void gemm_micro(int kc, const float *restrict a, const float *restrict b, float *C, long ldc, int mr, int nr, int from_c) {
    // acc is indexed only by constants (loops to MR and NV that unroll), so that it
    // stays in registers; a short tile goes through a full-size copy in memory
    int full = mr == GEMM_MR && nr == GEMM_NR;
    float edge[GEMM_MR * GEMM_NR];
    if (!full) {
        memset(edge, 0, sizeof edge);
        if (from_c) for (int r = 0; r < mr; r++) memcpy(edge + r * GEMM_NR, C + (long)r * ldc, (size_t)nr * sizeof(float));
    }
    vfloat acc[GEMM_MR][GEMM_NV];
    UNROLLED for (int r = 0; r < GEMM_MR; r++)
        UNROLLED for (int v = 0; v < GEMM_NV; v++) {
            vfloat c = {0};
            if (!full) memcpy(&c, edge + r * GEMM_NR + v * GEMM_VEC, sizeof c);
            else if (from_c) memcpy(&c, C + (long)r * ldc + v * GEMM_VEC, sizeof c);
            acc[r][v] = c;
        }
    for (int p = 0; p < kc; p++, a += GEMM_MR, b += GEMM_NR) {
        vfloat bv[GEMM_NV];
        UNROLLED for (int v = 0; v < GEMM_NV; v++) memcpy(&bv[v], b + v * GEMM_VEC, sizeof(vfloat));
        UNROLLED for (int r = 0; r < GEMM_MR; r++) {
            vfloat ar = vsplat(a[r]);
            UNROLLED for (int v = 0; v < GEMM_NV; v++) acc[r][v] = vfma(ar, bv[v], acc[r][v]);
        }
    }
    UNROLLED for (int r = 0; r < GEMM_MR; r++)
        UNROLLED for (int v = 0; v < GEMM_NV; v++) {
            vfloat c = acc[r][v];
            memcpy(full ? C + (long)r * ldc + v * GEMM_VEC : edge + r * GEMM_NR + v * GEMM_VEC, &c, sizeof c);
        }
    if (!full) for (int r = 0; r < mr; r++) memcpy(C + (long)r * ldc, edge + r * GEMM_NR, (size_t)nr * sizeof(float));
}

// Per-thread buffers, allocated once (allocating per call would map fresh pages on
// every product): the packed B slice of a tile (grown to the widest tile seen) and a
// packed block of A.
static _Thread_local float *gemm_b_buf, *gemm_a_buf;
static _Thread_local int gemm_b_cols;

// One tile of C, rows [i0, i0+m) by columns [jc, jc+nc), over all of K.
static void gemm_tile(const float *A, long a_rs, long a_cs, const float *B, long b_rs, long b_cs, float *C, long ldc, int K, int accumulate,
                      int i0, int m, int jc, int nc) {
    if (gemm_b_cols < nc) {
        free(gemm_b_buf);
        gemm_b_cols = (nc + GEMM_NR - 1) / GEMM_NR * GEMM_NR;
        gemm_b_buf = (float *)aligned_alloc(64, sizeof(float) * GEMM_KC * gemm_b_cols);
        if (!gemm_b_buf) fatal("out of memory in gemm");
    }
    if (!gemm_a_buf && !(gemm_a_buf = (float *)aligned_alloc(64, sizeof(float) * GEMM_KC * GEMM_MC))) fatal("out of memory in gemm");
    for (int pc = 0; pc < K; pc += GEMM_KC) {
        int kc = K - pc < GEMM_KC ? K - pc : GEMM_KC, from_c = accumulate || pc > 0;
        gemm_pack_b(gemm_b_buf, B, b_rs, b_cs, pc, kc, jc, nc);
        for (int ic = i0; ic < i0 + m; ic += GEMM_MC) {
            int mc = i0 + m - ic < GEMM_MC ? i0 + m - ic : GEMM_MC;
            gemm_pack_a(gemm_a_buf, A, a_rs, a_cs, ic, mc, pc, kc);
            for (int jr = 0; jr < nc; jr += GEMM_NR) {
                int nr = nc - jr < GEMM_NR ? nc - jr : GEMM_NR;
                const float *bp = gemm_b_buf + (long)jr * kc;
                for (int ir = ic; ir < ic + mc; ir += GEMM_MR) {
                    int mr = ic + mc - ir < GEMM_MR ? ic + mc - ir : GEMM_MR;
                    float *c = C + (long)ir * ldc + jc + jr;
                    gemm_micro(kc, gemm_a_buf + (long)(ir - ic) * kc, bp, c, ldc, mr, nr, from_c);
                }
            }
        }
    }
}

// Rounds x up to a multiple of unit.
static int gemm_round_up(int x, int unit) { return (x + unit - 1) / unit * unit; }

static void gemm(int M, int N, int K, const float *A, long a_rs, long a_cs, const float *B, long b_rs, long b_cs, float *C, long ldc,
                 int accumulate) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { if (!accumulate) for (int i = 0; i < M; i++) memset(C + (long)i * ldc, 0, (size_t)N * sizeof(float)); return; }
    // Tiles, about four per thread (so that a thread slowed by the machine's other work
    // can hand work over). A wide product is cut into column tiles of all rows, at most
    // NC wide: each thread reads its slice of B once and A once per tile. A tall one (M at
    // least 2N: the weight gradients of the wider side, the output head's) is cut into
    // row tiles of all columns (up to GEMM_NT): A, the larger, is then read once. A deep
    // one (K much larger than M and N: dx of the output head, over the vocabulary) reads
    // A and B from memory, not cache, once per tile: one column tile per thread.
    int threads = omp_get_max_threads(), tall = M >= 2 * N, deep = (double)K >= 4.0 * ((double)M + N), parts = deep ? threads : 4 * threads;
    int tm = tall ? gemm_round_up((M + parts - 1) / parts, GEMM_MR) : M;
    int tn = tall ? (N < GEMM_NT ? N : GEMM_NT) : gemm_round_up((N + parts - 1) / parts, GEMM_NR);
    if (tall && tm > GEMM_MC) tm = GEMM_MC;
    if (!tall && tn > GEMM_NC) tn = GEMM_NC;
    int rows = (M + tm - 1) / tm, cols = (N + tn - 1) / tn, tiles = rows * cols;
    int parallel = tiles > 1 && (double)M * N * K > 2e5;
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
    for (int t = 0; t < tiles; t++) {
        int i0 = t / cols * tm, jc = t % cols * tn;
        gemm_tile(A, a_rs, a_cs, B, b_rs, b_cs, C, ldc, K, accumulate, i0, M - i0 < tm ? M - i0 : tm, jc, N - jc < tn ? N - jc : tn);
    }
}

#endif  // CPU_GEMM_H
