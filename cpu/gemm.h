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
// machine's other work takes fewer). The operand every tile needs all of (A for column
// tiles, B for row tiles) is packed once, the threads sharing the work, before a barrier;
// the other is packed by each tile for itself. For each block of KC rows of B a tile has
// B's KC x nc slice as NR-column panels (contiguous vector loads in the micro-kernel),
// blocks of up to MC rows of A as MR-row panels, and runs a register-blocked
// micro-kernel over MR x NR tiles of C: for each A panel (KC x MR floats, which stays in
// L1) along the tile's B panels, which stream from L2. (The other order, a B panel kept
// in L1 while the A panels pass, needs KC x NR floats in L1: 48 KB for AVX-512's 48
// columns at KC 256, all of an Intel Xeon's L1: this order with KC 384 took GPT-2's products
// at 256 tokens from 0.93 to 0.97 of OpenBLAS's speed there, medians of six runs.)
#if defined(__AVX512F__)
#include <immintrin.h>
#define GEMM_VEC 16
#define GEMM_MR 8   // 8 x 48: 24 accumulators of AVX-512's 32 registers, 3 for B, 1 for A
#define GEMM_NV 3
#define GEMM_KC 384          // rows of B per packed block: an A panel is 12 KB of L1 (Xeon: 48 KB), C is loaded a third less often than at 256
#define GEMM_MC (64 * GEMM_MR)  // rows of A per packed block: A's block (768 KB) and a B slice (576 KB) in L2 (2 MB on the Xeon)
#define vfma(a, b, c) _mm512_fmadd_ps(a, b, c)   // a*b + c, rounded once
#define vsplat(x) _mm512_set1_ps(x)
#elif defined(__FMA__)
#include <immintrin.h>
#define GEMM_VEC 8
#define GEMM_MR 6   // 6 x 16: 12 accumulators of AVX2's 16 registers
#define GEMM_NV 2
#define GEMM_KC 256          // a KC x NR panel is 16 KB (measured on Zen 3: 128 loads C twice as often)
#define GEMM_MC (32 * GEMM_MR)  // A's block, 192 KB, in the 512 KB L2 beside the B slice
#define vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define vsplat(x) _mm256_set1_ps(x)
#else  // no FMA unit: two roundings, so results differ from the builds above
#define GEMM_VEC 8
#define GEMM_MR 6
#define GEMM_NV 2
#define GEMM_KC 256
#define GEMM_MC (32 * GEMM_MR)
#define vfma(a, b, c) ((a) * (b) + (c))
#define vsplat(x) ((x) - (vfloat){0})   // exact, -0 included
#endif
#define GEMM_NR (GEMM_NV * GEMM_VEC)
#define GEMM_NC (8 * GEMM_NR)      // widest column tile of a wide product
#define GEMM_NT 2048               // widest column tile of a tall one
typedef float vfloat __attribute__((vector_size(GEMM_VEC * sizeof(float))));
// Loops over the micro-tile's rows and vectors unroll completely, so that the
// accumulators are registers: gcc 12 at -O3 otherwise keeps a copy of them in memory,
// stored on every step of k (half the kernel's speed).
#define UNROLLED _Pragma("GCC unroll 16")

#if defined(__AVX__)
// Transposes an 8-column block of n rows (n = 8, or 6: the AVX2 build's A panels) at
// src (row i at src + i*ld) into 8 rows of n floats at dst (row j at dst + j*dst_ld).
// With n = 6 the loads of rows 6 and 7 repeat row 5 (never past the rows given) and
// dst_ld is 6: each 8-float store runs 2 floats into the next row, which the next
// store, in ascending order, overwrites; the last row is stored as 4 + 2 floats, so
// nothing is written past row 7's n floats (a neighbouring panel may be another thread's).
static inline void gemm_transpose8(float *dst, long dst_ld, const float *src, long ld, int n) {
    __m256 r[8], t[8], s[8], o[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + (i < n ? i : n - 1) * ld);
    for (int i = 0; i < 8; i += 2) t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    for (int i = 0; i < 8; i += 4) {  // [x0 y0 z0 w0 | x4 ...] from the pairs' interleavings
        s[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {  // the low halves hold columns 0-3, the high halves 4-7
        o[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
        o[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
    }
    if (n == 8) { for (int i = 0; i < 8; i++) _mm256_storeu_ps(dst + i * dst_ld, o[i]); return; }
    for (int i = 0; i < 7; i++) _mm256_storeu_ps(dst + i * dst_ld, o[i]);
    _mm_storeu_ps(dst + 7 * dst_ld, _mm256_castps256_ps128(o[7]));
    _mm_storel_pi((__m64 *)(dst + 7 * dst_ld + 4), _mm256_extractf128_ps(o[7], 1));
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
                for (int j = 0; j < j8; j += 8) gemm_transpose8(dst + p * GEMM_NR + j, GEMM_NR, src + (long)j * b_cs + p, b_cs, 8);
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
#if defined(__AVX__)
        if (a_cs == 1 && mr == GEMM_MR)  // rows contiguous: transposes of 8 columns
            for (; p0 + 8 <= kc; p0 += 8) gemm_transpose8(dst + p0 * GEMM_MR, GEMM_MR, src + p0, a_rs, GEMM_MR);
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
    // C's rows come from L3 or memory (each tile is visited once per KC block): ask for
    // them now, so that they arrive while the loop below runs
    for (int r = 0; r < mr; r++) __builtin_prefetch(C + (long)r * ldc, 1), __builtin_prefetch(C + (long)r * ldc + GEMM_NR - 1, 1);
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
#pragma GCC unroll 4
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

// One operand packed once for a whole product (gemm() says when), read by every
// thread: A when every column tile needs all of it, B when every row tile does. Packed
// a slab of K at a time (a few KC blocks, so that the slab stays in L3): within a slab,
// the KC-row blocks one after another, each all of the operand's rows (A: panels of MR
// rows) or columns (B: panels of NR columns), so block pc's panel at row or column i
// starts at pad*(pc-k0) + i*kc. Grown to the largest slab seen.
static float *gemm_shared;
static size_t gemm_shared_floats;
static long gemm_slab_floats = 1L << 20;  // 4 MB (a variable: the tests make it one KC block, to check slabs)

// One tile of C, rows [i0, i0+m) by columns [jc, jc+nc), over K's rows [k0, k1) (a
// multiple of KC apart, or up to K). a_packed / b_packed: the slab of A (m_pad rows) or
// of B (n_pad columns) packed by gemm(), or NULL: the tile packs its part itself.
static void gemm_tile(const float *A, long a_rs, long a_cs, const float *B, long b_rs, long b_cs, float *C, long ldc, int K, int accumulate,
                      int i0, int m, int jc, int nc, int k0, int k1, const float *a_packed, long m_pad, const float *b_packed, long n_pad) {
    if (!b_packed && gemm_b_cols < nc) {
        free(gemm_b_buf);
        gemm_b_cols = (nc + GEMM_NR - 1) / GEMM_NR * GEMM_NR;
        gemm_b_buf = (float *)aligned_alloc(64, sizeof(float) * GEMM_KC * gemm_b_cols);
        if (!gemm_b_buf) fatal("out of memory in gemm");
    }
    if (!a_packed && !gemm_a_buf && !(gemm_a_buf = (float *)aligned_alloc(64, sizeof(float) * GEMM_KC * GEMM_MC))) fatal("out of memory in gemm");
    for (int pc = k0; pc < k1; pc += GEMM_KC) {
        int kc = K - pc < GEMM_KC ? K - pc : GEMM_KC, from_c = accumulate || pc > 0;
        const float *bpc = b_packed ? b_packed + n_pad * (pc - k0) + (long)jc * kc : gemm_b_buf;
        if (!b_packed) gemm_pack_b(gemm_b_buf, B, b_rs, b_cs, pc, kc, jc, nc);
        for (int ic = i0; ic < i0 + m; ic += GEMM_MC) {
            int mc = i0 + m - ic < GEMM_MC ? i0 + m - ic : GEMM_MC;
            const float *ap = a_packed ? a_packed + m_pad * (pc - k0) + (long)ic * kc : gemm_a_buf;
            if (!a_packed) gemm_pack_a(gemm_a_buf, A, a_rs, a_cs, ic, mc, pc, kc);
            for (int ir = ic; ir < ic + mc; ir += GEMM_MR) {  // one A panel in L1, the B panels past it
                int mr = ic + mc - ir < GEMM_MR ? ic + mc - ir : GEMM_MR;
                for (int jr = 0; jr < nc; jr += GEMM_NR) {
                    int nr = nc - jr < GEMM_NR ? nc - jr : GEMM_NR;
                    float *c = C + (long)ir * ldc + jc + jr;
                    gemm_micro(kc, ap + (long)(ir - ic) * kc, bpc + (long)jr * kc, c, ldc, mr, nr, from_c);
                }
            }
        }
    }
}

// Rounds x up to a multiple of unit.
static long gemm_round_up(long x, long unit) { return (x + unit - 1) / unit * unit; }

static void gemm(int M, int N, int K, const float *A, long a_rs, long a_cs, const float *B, long b_rs, long b_cs, float *C, long ldc,
                 int accumulate) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { if (!accumulate) for (int i = 0; i < M; i++) memset(C + (long)i * ldc, 0, (size_t)N * sizeof(float)); return; }
    // Tiles, about four per thread (so that a thread slowed by the machine's other work
    // can hand work over). A wide product is cut into column tiles of all rows, at most
    // NC wide: each thread reads its slice of B once, and A, packed once, once per tile.
    // A tall one (M at least 2N: the weight gradients of the wider side, the output
    // head's) is cut into row tiles of all columns (up to GEMM_NT): A, the larger, is
    // then read once, and B, packed once, once per tile.
    int threads = omp_get_max_threads(), tall = M >= 2 * N;
    // The cut side is dealt in units (MR rows or NR columns) as evenly as it divides:
    // tiles of rounded-up equal widths would leave the last one short, and with two
    // threads and eight tiles that short tile is an eighth of the product run by one
    // thread while the other waits at the barrier.
    long units = tall ? (M + GEMM_MR - 1) / GEMM_MR : (N + GEMM_NR - 1) / GEMM_NR, most = tall ? GEMM_MC / GEMM_MR : GEMM_NC / GEMM_NR;
    long cut = 4L * threads;  // about four tiles a thread, a multiple of the threads
    if (cut < (units + most - 1) / most) cut = gemm_round_up((units + most - 1) / most, threads);
    if (cut > units) cut = units;
    int tn_tall = N < GEMM_NT ? N : GEMM_NT;
    int rows = tall ? (int)cut : 1, cols = tall ? (N + tn_tall - 1) / tn_tall : (int)cut, tiles = rows * cols;
    int parallel = tiles > 1 && (double)M * N * K > 2e5;
    // The operand every tile needs all of is packed once per slab of K, the threads
    // sharing the packing, before any tile reads it (not inside another parallel region:
    // there is one buffer). A slab: as many KC blocks as fit gemm_slab_floats, at least one.
    long m_pad = gemm_round_up(M, GEMM_MR), n_pad = gemm_round_up(N, GEMM_NR);
    int share_a = rows == 1 && cols > 1 && !omp_in_parallel(), share_b = cols == 1 && rows > 1 && !omp_in_parallel();
    long pad = share_a ? m_pad : share_b ? n_pad : 0, slab = K;
    if (pad) {
        long blocks = gemm_slab_floats / (pad * GEMM_KC);
        slab = (blocks > 0 ? blocks : 1) * GEMM_KC;
        if (slab > K) slab = K;
        size_t need = (size_t)(pad * gemm_round_up(slab, GEMM_KC));
        if (gemm_shared_floats < need) {
            free(gemm_shared);
            gemm_shared_floats = need;
            if (!(gemm_shared = (float *)aligned_alloc(64, need * sizeof(float)))) fatal("out of memory in gemm");
        }
    }
    int chunk = share_a ? GEMM_MC : GEMM_NC, chunks = pad ? (int)((share_a ? M : N) + chunk - 1) / chunk : 0;
#pragma omp parallel if (parallel)
    for (long k0 = 0; k0 < K; k0 += slab) {  // every thread runs every slab
        int k1 = K - k0 < slab ? K : (int)(k0 + slab), packs = pad ? (int)((k1 - k0 + GEMM_KC - 1) / GEMM_KC) * chunks : 0;
#pragma omp for schedule(static)
        for (int j = 0; j < packs; j++) {  // the implicit barrier at its end: the slab is packed
            int pc = (int)k0 + j / chunks * GEMM_KC, i = j % chunks * chunk, kc = K - pc < GEMM_KC ? K - pc : GEMM_KC;
            float *dst = gemm_shared + pad * (pc - k0) + (long)i * kc;
            if (share_a) gemm_pack_a(dst, A, a_rs, a_cs, i, M - i < chunk ? M - i : chunk, pc, kc);
            else gemm_pack_b(dst, B, b_rs, b_cs, pc, kc, i, N - i < chunk ? N - i : chunk);
        }
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < tiles; t++) {  // the implicit barrier: no thread packs the next slab while a tile reads this one
            int r = t / cols, c = t % cols;  // tile (r, c): units [r*units/rows, (r+1)*units/rows) of a tall product's rows
            int i0 = tall ? (int)(r * units / rows) * GEMM_MR : 0, i1 = tall ? (int)((r + 1) * units / rows) * GEMM_MR : M;
            int jc = tall ? c * tn_tall : (int)(c * units / cols) * GEMM_NR, j1 = tall ? jc + tn_tall : (int)((c + 1) * units / cols) * GEMM_NR;
            gemm_tile(A, a_rs, a_cs, B, b_rs, b_cs, C, ldc, K, accumulate, i0, (i1 < M ? i1 : M) - i0, jc, (j1 < N ? j1 : N) - jc, (int)k0, k1,
                      share_a ? gemm_shared : NULL, m_pad, share_b ? gemm_shared : NULL, n_pad);
        }
    }
}

#endif  // CPU_GEMM_H
