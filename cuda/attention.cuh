// cuda/attention.cuh: block-diagonal causal self-attention (packed documents) with
// grouped-query heads, forward and backward, flash-attention style: the T x T scores never
// reach global memory.
//
// Semantics are those of train_sft.c's attention_forward / attention_backward. qkv is
// (B, T, QKV) with QKV = (NH + 2 KVH) HS, each row [q (NH heads) | k (KVH heads) | v (KVH
// heads)] of HS channels per head; out is (B, T, NH HS). Query head h reads key/value head
// h / (NH / KVH) (grouped-query attention; KVH == NH is GPT-2's multi-head attention). The
// query at position t attends to keys s with f <= s <= t, f = doc_start[b*T+t] or, with a
// sliding window of W > 0 keys, max(doc_start[b*T+t], t - W + 1) (att_first_key:
// transformers' convention, t - s < W); scores are q.k / sqrt(HS), softmax over those
// keys, out_t = sum_s p_s v_s. In the backward, dK and dV of a kv head are the sums over
// the NH / KVH query heads that read it.
//
// Two sets of kernels with the same tiling and skipping: the tensor-core kernels at the
// end of this file (bf16 build, head sizes that are multiples of 16: what the trainer uses
// there) and the fp32-FMA kernels described here (the fp32 build, other head sizes).
// attention_forward / attention_backward choose (AttKernels).
//
// FMA kernels (all arithmetic in fp32; tiles held in shared memory as float):
//  - Tiles of 64 queries x 64 keys, 256 threads as a 16 x 16 grid (ty, tx). In every
//    64 x 64 product a thread owns rows ty + 16i and columns tx + 16j (i, j < 4); in every
//    64 x hs accumulator it owns rows ty + 16i and channels tx + 16c. A row's 16 threads
//    are 16 consecutive lanes of one warp, so row reductions are 4 shuffles.
//  - Shared tiles are row-major with row stride hs + 1 (odd): reading a column across 16
//    rows and reading a row across 16 channels are both free of bank conflicts.
//  - Forward: one block per (query tile, query head, batch row); loops over the key tiles
//    that intersect [min first key of the tile, last query of the tile] with the online
//    softmax (running max m and sum l per query, in log2 units); saves lse = ln(sum
//    exp(score)) per query and query head.
//  - Backward, no atomics: D_t = dout_t . out_t first (one warp per (row, query head));
//    then one block per (key tile, kv head) accumulates dK, dV over the query tiles that
//    can see it and, within each, over the query heads of its group (in head order), and
//    one block per (query tile, query head) accumulates dQ over its key tiles; both
//    recompute P from lse. Each output element is written by exactly one thread, once:
//    dqkv is overwritten and the results are bit-identical run to run.
//  - Key (query) tiles entirely outside the attended range are skipped, so packed short
//    documents cost about (document length) per query, not T, and a window of W about W
//    (plus a partial tile at each end, masked inside).
//  - Grouped heads and occupancy (not measured: no GPU yet): the dK, dV kernels have
//    B KVH T/64 blocks, each doing NH/KVH times a multi-head block's work. With few kv
//    heads and a small batch (Qwen2.5-0.5B: KVH 2; B 4, T 1024 gives 128 blocks for 132
//    SMs) the longest block (key tile 0, which every query tile sees) sets the time. The
//    fix, if measurements show it, is to split a group over blocks with partial sums in
//    scratch and a fixed-order reduction (still no atomics).
//  - Head size 256 (Gemma 3's 270M and 1B): the forward keeps its Q, K, V and P tiles (209
//    KiB of the 227 KiB a block may have); the backward kernels run lean (att_fma_lean): four
//    [64][257] fp32 tiles are 257 KiB alone, so they hold three and two operands take
//    turns in one buffer: dK dV loads V there, computes dP^T, then loads Q over it (V is
//    read again from global memory for every query tile and head: 1.5x the tile loads);
//    dQ loads V, computes dP, then K. 225 KiB (dK dV) and 209 KiB (dQ) of shared memory,
//    one block per SM; ptxas (dev/cuda/resources.sh, fp32 build): forward 128 registers
//    (8 bytes spilled), dK dV 255 (no spill), dQ 168. The fp32 build is the checking
//    build, not the fast one (the bf16 build takes the tensor-core kernels below).
#pragma once
#include <limits.h>
#include <math.h>
#include "common.cuh"
#include "mma.cuh"

#define ATT_TILE 64     // queries per query tile and keys per key tile
#define ATT_THREADS 256 // 16 x 16 threads
#define ATT_PLD 65      // row stride of the 64 x 64 probability tiles in shared memory
#define ATT_LOG2E 1.4426950408889634f
#define ATT_LN2 0.6931471805599453f
#define ATT_SMEM_MAX (227 * 1024) // shared memory of one block (static + dynamic) on H100/H200

// Whether the FMA backward kernels run lean: four [64][HS+1] fp32 tiles and two 64 x 64
// P, dS tiles (plus ~1 KiB of static arrays) exceed a block's shared memory (HS 256: 290
// KiB; HS 128: 162 KiB), so they keep three tiles, two operands taking turns in one buffer.
__host__ __device__ constexpr bool att_fma_lean(int hs) {
    return (4 * ATT_TILE * (hs + 1) + 2 * ATT_TILE * ATT_PLD) * (int)sizeof(float) + 1024 > ATT_SMEM_MAX;
}
// fp32 [64][HS+1] tiles the FMA backward kernels hold
__host__ __device__ constexpr int att_fma_bwd_tiles(int hs) { return att_fma_lean(hs) ? 3 : 4; }

// Copy rows row0 .. row0+63 (channels 0 .. HS-1) of a (T, stride) matrix into a shared
// [64][HS+1] float tile; rows at or past T are zero.
template <int HS>
__device__ inline void att_load_tile(float *dst, const floatX *src, int row0, int T, size_t stride) {
    for (int idx = threadIdx.x; idx < ATT_TILE * HS; idx += ATT_THREADS) {
        int r = idx / HS, d = idx % HS;
        int t = row0 + r;
        dst[r * (HS + 1) + d] = t < T ? to_float(src[(size_t)t * stride + d]) : 0.0f;
    }
}

// s[i][j] = A[ty+16i] . Bm[tx+16j] over HS channels, A and Bm shared [64][HS+1] tiles.
template <int HS>
__device__ inline void att_tile_dot(float (&s)[4][4], const float *A, const float *Bm, int ty, int tx) {
    constexpr int LD = HS + 1;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) s[i][j] = 0.0f;
#pragma unroll 8
    for (int d = 0; d < HS; d++) {
        float a[4], bb[4];
#pragma unroll
        for (int i = 0; i < 4; i++) a[i] = A[(ty + 16 * i) * LD + d];
#pragma unroll
        for (int j = 0; j < 4; j++) bb[j] = Bm[(tx + 16 * j) * LD + d];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) s[i][j] = fmaf(a[i], bb[j], s[i][j]);
    }
}

// acc[i][c] += sum_k P[ty+16i][k] * M[k][tx+16c]: a 64 x 64 shared tile (row stride
// ATT_PLD) times a shared [64][HS+1] tile, into a thread's 4 x NC accumulator.
template <int HS, int NC>
__device__ inline void att_tile_accumulate(float (&acc)[4][NC], const float *P, const float *M, int ty, int tx) {
    constexpr int LD = HS + 1;
    for (int k = 0; k < ATT_TILE; k++) {
        float p[4], m[NC];
#pragma unroll
        for (int i = 0; i < 4; i++) p[i] = P[(ty + 16 * i) * ATT_PLD + k];
#pragma unroll
        for (int c = 0; c < NC; c++) m[c] = (tx + 16 * c < HS) ? M[k * LD + tx + 16 * c] : 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int c = 0; c < NC; c++) acc[i][c] = fmaf(p[i], m[c], acc[i][c]);
    }
}

// Reductions over the 16 lanes (one tile row) sharing ty: lanes 0-15 or 16-31 of a warp.
__device__ inline float att_row_max(float v) {
    for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ inline float att_row_sum(float v) {
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The first key query t sees (train_sft.c's attention_first_key): its document's start ds
// and, with a sliding window of W > 0 keys, t - W + 1 (key s visible iff s <= t, t - s < W).
__host__ __device__ inline int att_first_key(int ds, int t, int window) { return window > 0 && t - window + 1 > ds ? t - window + 1 : ds; }

// Loads the first keys (att_first_key) of the 64 rows of tile q0 into ds_s (INT_MAX past T,
// so such rows see no key) and their minimum into *min_s. Contains __syncthreads; call
// from all threads.
__device__ inline void att_load_doc_start(int *ds_s, int *min_s, const int *ds_b, int q0, int T, int window) {
    if (threadIdx.x < ATT_TILE) {
        int t = q0 + threadIdx.x;
        ds_s[threadIdx.x] = t < T ? att_first_key(ds_b[t], t, window) : INT_MAX;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        int m = min(ds_s[threadIdx.x], ds_s[threadIdx.x + 32]);
        for (int o = 16; o > 0; o >>= 1) m = min(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (threadIdx.x == 0) *min_s = m;
    }
    __syncthreads();
}

// tiles (null in training; dev/cuda/attention.cu's check of the tile skipping): the number
// of tiles the block of tile `tile`, head `head` of `heads`, batch row blockIdx.z visited.
__device__ inline void att_count_tiles(int *tiles, int visited, int tile, int head, int heads) {
    if (tiles && threadIdx.x == 0) tiles[((size_t)blockIdx.z * heads + head) * gridDim.x + tile] = visited;
}

// ---------------------------------------------------------------------------------------
// Forward. Grid (query tiles, NH, B); the last query tiles (most keys) start first.
template <int HS>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_forward_kernel(floatX *out, float *lse, const floatX *qkv, const int *doc_start, int T, int NH, int KVH, float scale, int window,
                             int *tiles) {
    constexpr int LD = HS + 1;
    constexpr int NC = (HS + 15) / 16;
    extern __shared__ float att_smem[];
    float *Qs = att_smem;            // [64][LD]
    float *Ks = Qs + ATT_TILE * LD;  // [64][LD]
    float *Vs = Ks + ATT_TILE * LD;  // [64][LD]
    float *Ps = Vs + ATT_TILE * LD;  // [64][ATT_PLD]
    __shared__ int ds_s[ATT_TILE];
    __shared__ int kmin_s;

    const int q0 = (gridDim.x - 1 - blockIdx.x) * ATT_TILE;
    const int h = blockIdx.y, b = blockIdx.z, kvh = h / (NH / KVH);
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const size_t QKV = (size_t)(NH + 2 * KVH) * HS, OC = (size_t)NH * HS;
    const floatX *qb = qkv + (size_t)b * T * QKV + (size_t)h * HS;          // this query head
    const floatX *kb = qkv + (size_t)b * T * QKV + (size_t)(NH + kvh) * HS; // its kv head
    const floatX *vb = kb + (size_t)KVH * HS;
    const float scale_log2 = ATT_LOG2E * scale;

    att_load_tile<HS>(Qs, qb, q0, T, QKV);
    att_load_doc_start(ds_s, &kmin_s, doc_start + (size_t)b * T, q0, T, window);
    const int kmin = kmin_s;
    const int qlast = min(q0 + ATT_TILE, T) - 1;

    int rowq[4], rowds[4];
    float m[4], l[4], o[4][NC];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        rowq[i] = q0 + ty + 16 * i;
        rowds[i] = ds_s[ty + 16 * i];
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < NC; c++) o[i][c] = 0.0f;
    }

    int visited = 0;
    for (int k0 = (kmin / ATT_TILE) * ATT_TILE; k0 <= qlast; k0 += ATT_TILE, visited++) {
        att_load_tile<HS>(Ks, kb, k0, T, QKV);
        att_load_tile<HS>(Vs, vb, k0, T, QKV);
        __syncthreads();
        float s[4][4];
        att_tile_dot<HS>(s, Qs, Ks, ty, tx);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int key = k0 + tx + 16 * j;
                bool ok = key >= rowds[i] && key <= rowq[i];
                s[i][j] = ok ? s[i][j] * scale_log2 : -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
            float mnew = fmaxf(m[i], att_row_max(mx));
            float mref = mnew == -INFINITY ? 0.0f : mnew; // nothing seen yet: every p is 0
            float corr = exp2f(m[i] - mref);               // 0 when m[i] == -inf
            float rs = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float p = exp2f(s[i][j] - mref); // 0 for masked (-inf) scores
                rs += p;
                Ps[(ty + 16 * i) * ATT_PLD + tx + 16 * j] = p;
            }
            l[i] = l[i] * corr + att_row_sum(rs);
            m[i] = mnew;
#pragma unroll
            for (int c = 0; c < NC; c++) o[i][c] *= corr;
        }
        __syncthreads();
        att_tile_accumulate<HS, NC>(o, Ps, Vs, ty, tx);
        __syncthreads(); // before the next tile overwrites Ks, Vs, Ps
    }
    att_count_tiles(tiles, visited, q0 / ATT_TILE, h, NH);

#pragma unroll
    for (int i = 0; i < 4; i++) {
        if (rowq[i] >= T) continue;
        // every real query sees at least itself, so l[i] >= 1
        float inv = 1.0f / l[i];
        floatX *orow = out + ((size_t)b * T + rowq[i]) * OC + (size_t)h * HS;
#pragma unroll
        for (int c = 0; c < NC; c++)
            if (tx + 16 * c < HS) orow[tx + 16 * c] = from_float<floatX>(o[i][c] * inv);
        if (tx == 0) lse[((size_t)b * NH + h) * T + rowq[i]] = (m[i] + log2f(l[i])) * ATT_LN2;
    }
}

// ---------------------------------------------------------------------------------------
// Backward step 1: D[b,h,t] = dout_t . out_t over query head h's channels; one warp each.
__global__ void attention_backward_d_kernel(float *D, const floatX *dout, const floatX *out, int B, int T, int NH, int HS) {
    long w = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (w >= (long)B * T * NH) return; // the whole warp leaves together
    int h = (int)(w % NH);
    long bt = w / NH;
    int b = (int)(bt / T), t = (int)(bt % T);
    const floatX *dy = dout + (size_t)bt * NH * HS + (size_t)h * HS;
    const floatX *y = out + (size_t)bt * NH * HS + (size_t)h * HS;
    float s = 0.0f;
    for (int i = lane; i < HS; i += 32) s += to_float(dy[i]) * to_float(y[i]);
    s = warp_sum(s);
    if (lane == 0) D[((size_t)b * NH + h) * T + t] = s;
}

// Backward step 2: dK, dV of one key tile of one kv head, looping over the query tiles
// that see it and, for each, over the query heads of the group that reads this kv head.
// Grid (key tiles, KVH, B); the first key tiles (most queries) start first.
template <int HS>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_backward_dkdv_kernel(floatX *dqkv, const floatX *dout, const float *lse, const float *D, const floatX *qkv,
                                   const int *doc_start, int T, int NH, int KVH, float scale, int window, int *tiles) {
    constexpr int LD = HS + 1;
    constexpr int NC = (HS + 15) / 16;
    constexpr bool LEAN = att_fma_lean(HS); // V reloaded into Q's buffer for every query tile and head
    extern __shared__ float att_smem[];
    float *Ks = att_smem;                         // [64][LD] keys of this block
    float *dOs = Ks + ATT_TILE * LD;              // [64][LD]
    float *Qs = dOs + ATT_TILE * LD;              // [64][LD] current query tile (of the current query head)
    float *Vs = LEAN ? Qs : Qs + ATT_TILE * LD;   // [64][LD] values of this block
    float *PT = Vs + ATT_TILE * LD;               // [64 keys][ATT_PLD] probabilities, transposed
    float *dST = PT + ATT_TILE * ATT_PLD; // [64 keys][ATT_PLD] score gradients, transposed
    __shared__ int ds_s[ATT_TILE];
    __shared__ float lse2_s[ATT_TILE], D_s[ATT_TILE];
    __shared__ int qmin_s;

    const int k0 = blockIdx.x * ATT_TILE;
    const int kvh = blockIdx.y, b = blockIdx.z, G = NH / KVH;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const size_t QKV = (size_t)(NH + 2 * KVH) * HS, OC = (size_t)NH * HS;
    const floatX *qkv_b = qkv + (size_t)b * T * QKV;
    const floatX *kb = qkv_b + (size_t)(NH + kvh) * HS, *vb = kb + (size_t)KVH * HS;
    const int *ds_b = doc_start + (size_t)b * T;
    const float scale_log2 = ATT_LOG2E * scale;
    const int klast = min(k0 + ATT_TILE, T) - 1;

    att_load_tile<HS>(Ks, kb, k0, T, QKV);
    if (!LEAN) att_load_tile<HS>(Vs, vb, k0, T, QKV);

    float dk[4][NC], dv[4][NC];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int c = 0; c < NC; c++) dk[i][c] = dv[i][c] = 0.0f;

    // queries before k0 cannot see these keys (causal), nor, with a window, queries from
    // klast + window on; tiles are aligned since 64 == 64
    const int qend = window > 0 ? min(T, klast + window) : T;
    int visited = 0;
    for (int q0 = k0; q0 < qend; q0 += ATT_TILE) {
        __syncthreads(); // every thread is done with the previous tile's ds_s
        att_load_doc_start(ds_s, &qmin_s, ds_b, q0, T, window);
        if (qmin_s > klast) continue; // no query of this tile reaches back to our keys (uniform)
        visited++;
        for (int h = kvh * G; h < (kvh + 1) * G; h++) {
            __syncthreads(); // every thread is done with the previous head's Qs, dOs, PT, dST
            att_load_tile<HS>(dOs, dout + (size_t)b * T * OC + (size_t)h * HS, q0, T, OC);
            if (LEAN) att_load_tile<HS>(Vs, vb, k0, T, QKV);
            else att_load_tile<HS>(Qs, qkv_b + (size_t)h * HS, q0, T, QKV);
            if (threadIdx.x < ATT_TILE) {
                int t = q0 + threadIdx.x;
                size_t bht = ((size_t)b * NH + h) * T + t;
                lse2_s[threadIdx.x] = t < T ? lse[bht] * ATT_LOG2E : 0.0f;
                D_s[threadIdx.x] = t < T ? D[bht] : 0.0f;
            }
            __syncthreads();
            float s[4][4], dp[4][4];
            att_tile_dot<HS>(dp, Vs, dOs, ty, tx); // dp[i][j] = v_(ty+16i) . dout_(tx+16j)
            if (LEAN) {
                __syncthreads(); // every thread is done with V
                att_load_tile<HS>(Qs, qkv_b + (size_t)h * HS, q0, T, QKV);
                __syncthreads();
            }
            att_tile_dot<HS>(s, Ks, Qs, ty, tx);  // s[i][j]  = k_(ty+16i) . q_(tx+16j)
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    int kr = ty + 16 * i, qr = tx + 16 * j;
                    int key = k0 + kr, q = q0 + qr;
                    bool ok = key >= ds_s[qr] && key <= q;
                    float e = exp2f(s[i][j] * scale_log2 - lse2_s[qr]); // read by every lane (no divergent shared access)
                    float p = ok ? e : 0.0f;
                    PT[kr * ATT_PLD + qr] = p;
                    dST[kr * ATT_PLD + qr] = p * (dp[i][j] - D_s[qr]);
                }
            __syncthreads();
            att_tile_accumulate<HS, NC>(dv, PT, dOs, ty, tx);
            att_tile_accumulate<HS, NC>(dk, dST, Qs, ty, tx);
        }
    }
    att_count_tiles(tiles, visited, blockIdx.x, kvh, KVH);

#pragma unroll
    for (int i = 0; i < 4; i++) {
        int key = k0 + ty + 16 * i;
        if (key >= T) continue;
        floatX *krow = dqkv + ((size_t)b * T + key) * QKV + (size_t)(NH + kvh) * HS, *vrow = krow + (size_t)KVH * HS;
#pragma unroll
        for (int c = 0; c < NC; c++) {
            int col = tx + 16 * c;
            if (col < HS) {
                krow[col] = from_float<floatX>(dk[i][c] * scale);
                vrow[col] = from_float<floatX>(dv[i][c]);
            }
        }
    }
}

// Backward step 3: dQ of one query tile of one query head, looping over its key tiles.
// Grid (query tiles, NH, B); the last query tiles (most keys) start first.
template <int HS>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_backward_dq_kernel(floatX *dqkv, const floatX *dout, const float *lse, const float *D, const floatX *qkv,
                                 const int *doc_start, int T, int NH, int KVH, float scale, int window, int *tiles) {
    constexpr int LD = HS + 1;
    constexpr int NC = (HS + 15) / 16;
    constexpr bool LEAN = att_fma_lean(HS); // K and V take turns in one buffer
    extern __shared__ float att_smem[];
    float *Qs = att_smem;                       // [64][LD]
    float *dOs = Qs + ATT_TILE * LD;            // [64][LD]
    float *Vs = dOs + ATT_TILE * LD;            // [64][LD]
    float *Ks = LEAN ? Vs : Vs + ATT_TILE * LD; // [64][LD]
    float *dSs = Ks + ATT_TILE * LD;            // [64 queries][ATT_PLD]
    __shared__ int ds_s[ATT_TILE];
    __shared__ int kmin_s;

    const int q0 = (gridDim.x - 1 - blockIdx.x) * ATT_TILE;
    const int h = blockIdx.y, b = blockIdx.z, kvh = h / (NH / KVH);
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const size_t QKV = (size_t)(NH + 2 * KVH) * HS, OC = (size_t)NH * HS;
    const floatX *qb = qkv + (size_t)b * T * QKV + (size_t)h * HS;          // this query head
    const floatX *kb = qkv + (size_t)b * T * QKV + (size_t)(NH + kvh) * HS; // its kv head
    const floatX *vb = kb + (size_t)KVH * HS;
    const float scale_log2 = ATT_LOG2E * scale;

    att_load_tile<HS>(Qs, qb, q0, T, QKV);
    att_load_tile<HS>(dOs, dout + (size_t)b * T * OC + (size_t)h * HS, q0, T, OC);
    att_load_doc_start(ds_s, &kmin_s, doc_start + (size_t)b * T, q0, T, window);
    const int kmin = kmin_s;
    const int qlast = min(q0 + ATT_TILE, T) - 1;

    int rowq[4], rowds[4];
    float rowlse2[4], rowD[4], dq[4][NC];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int r = ty + 16 * i;
        rowq[i] = q0 + r;
        rowds[i] = ds_s[r];
        bool valid = rowq[i] < T;
        rowlse2[i] = valid ? lse[((size_t)b * NH + h) * T + rowq[i]] * ATT_LOG2E : 0.0f;
        rowD[i] = valid ? D[((size_t)b * NH + h) * T + rowq[i]] : 0.0f;
#pragma unroll
        for (int c = 0; c < NC; c++) dq[i][c] = 0.0f;
    }

    int visited = 0;
    for (int k0 = (kmin / ATT_TILE) * ATT_TILE; k0 <= qlast; k0 += ATT_TILE, visited++) {
        att_load_tile<HS>(Vs, vb, k0, T, QKV);
        if (!LEAN) att_load_tile<HS>(Ks, kb, k0, T, QKV);
        __syncthreads();
        float s[4][4], dp[4][4];
        att_tile_dot<HS>(dp, dOs, Vs, ty, tx); // dp[i][j] = dout_(ty+16i) . v_(tx+16j)
        if (LEAN) {
            __syncthreads(); // every thread is done with V
            att_load_tile<HS>(Ks, kb, k0, T, QKV);
            __syncthreads();
        }
        att_tile_dot<HS>(s, Qs, Ks, ty, tx);   // s[i][j]  = q_(ty+16i) . k_(tx+16j)
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int key = k0 + tx + 16 * j;
                bool ok = key >= rowds[i] && key <= rowq[i];
                float p = ok ? exp2f(s[i][j] * scale_log2 - rowlse2[i]) : 0.0f;
                dSs[(ty + 16 * i) * ATT_PLD + tx + 16 * j] = p * (dp[i][j] - rowD[i]);
            }
        __syncthreads();
        att_tile_accumulate<HS, NC>(dq, dSs, Ks, ty, tx);
        __syncthreads(); // before the next tile overwrites Ks, Vs, dSs
    }
    att_count_tiles(tiles, visited, q0 / ATT_TILE, h, NH);

#pragma unroll
    for (int i = 0; i < 4; i++) {
        if (rowq[i] >= T) continue;
        floatX *row = dqkv + ((size_t)b * T + rowq[i]) * QKV + (size_t)h * HS;
#pragma unroll
        for (int c = 0; c < NC; c++)
            if (tx + 16 * c < HS) row[tx + 16 * c] = from_float<floatX>(dq[i][c] * scale);
    }
}

// ---------------------------------------------------------------------------------------
// Tensor-core kernels (bf16 build only: they read bf16 Q, K, V, dout). Same semantics,
// 64 x 64 tiles, tile skipping and kernel split as the kernels above, but every matrix
// product of a tile is mma.sync m16n8k16 bf16 x bf16 -> fp32 (cuda/mma.cuh):
//  - 128 threads, 4 warps; warp w owns rows 16w .. 16w+15 of the block's 64-row tile
//    (queries in the forward and dQ kernels, keys in the dK, dV kernel). Each lane holds
//    two of those rows (g and g + 8) of a 16 x 64 score block as C fragments; a row's
//    reductions are 2 shuffles among its 4 lanes.
//  - Scores S and dP stay in registers in fp32; P and dS are rounded to bf16 and become,
//    in place, the A fragments of the next product (see cuda/mma.cuh). Accumulators (O,
//    dQ, dK, dV), the online softmax (m, l) and lse are fp32.
//  - The backward computes S and dP in both of its kernels: 7 tile products where one
//    kernel with atomic dQ updates would need 5 (1.4x the FLOPs), the price of no atomics.
//  - Shared tiles are bf16, row-major [64][HS + 8]: rows padded by 8 elements (16 bytes), so
//    the 8 rows one fragment load touches start 4 banks apart (row stride HS/2 + 4 words)
//    and no load or store of a tile has bank conflicts at head sizes 64 and 128 (the
//    emulator counts them: dev/cuda/emu/README.md). The operands whose contiguous index
//    must be the other one (V in O = P V, K in dQ = dS K, Q and dout in dK, dV) are read
//    with ldmatrix.trans (cuda/mma.cuh) from the same row-major tiles. (An earlier layout
//    stored them transposed with 2-byte stores, [HS][64 + 8]: 8 lanes of a store hit one
//    bank, 8-way conflicts at head size 64 and 16-way at 128 on every such tile.)
//  - Rows past T are zero in every tile: a masked probability (0) times a padded row must
//    stay 0, not NaN.
//  - Expected speed (a model, not a measurement; docs/benchmarks.md, "GPU estimates"): per 64 x 64
//    tile and SM at head size 64, the forward issues 256 mma (411 clocks if mma.sync runs
//    at 62% of the dense peak, a guess), 704 shared wavefronts (K, V stores 128; per warp
//    16 Q, 64 K, 64 V fragment wavefronts: no conflicts) and ~2000 warp instructions
//    (~500 clocks on 4 schedulers). Shared memory bounds it: x1.3 for imperfect overlap,
//    ~280 TFLOP/s computed, ~260 counted at B=4, T=1024, 12 x 64 causal on an H200 (132
//    SMs, 1.83 GHz). Backward: dK dV 512 mma, 1280 wavefronts; dQ 384 mma, 1024
//    wavefronts; ~190 TFLOP/s counted. K/V tiles are loaded synchronously (no cp.async
//    double buffering): several resident blocks per SM hide that latency in the model.
//    ptxas (dev/cuda/resources.sh) at HS 64: forward 107 registers (4 blocks, 16 warps per
//    SM), dK dV 205 (2 blocks), dQ 153 (3); at HS 128 dK dV uses 255 and spills 28 bytes.
//  - Head size 256 (Gemma 3): the shared tiles fit (forward 3 x 33 KiB = 99 KiB, backward
//    4 x 33 = 132 KiB), the accumulators do not: a warp's 16 x 256 fp32 block is 128
//    registers a lane, and dK dV has two. So the channels are split in two parts
//    (att_tc_parts): 256 threads, warps 4p .. 4p+3 own the same 64 rows as the 4 warps at
//    HS 128 and accumulate channels 128p .. 128p+127 of O, dQ, dK and dV, as at HS 128.
//    Each part computes the full scores (S, dP over all 256 channels) itself: the same
//    values in both parts (the same fragments in the same order), so both see the same
//    softmax; part 0 writes lse. That is 1.5x the useful mma in the forward and dK dV and
//    1.67x in dQ; the alternative, half the score channels per part with the partial sums
//    exchanged through shared memory, saves those mma but adds 32 KiB, a barrier and
//    shared traffic of the same order per tile. Tile rows are 264 bf16 (132 words, 4
//    banks apart per row, as at 64 and 128): no bank conflicts (the emulator counts 0).
//    ptxas: forward 168 registers, dK dV 255 (20 bytes spilled), dQ 218; 256 threads, so
//    one block (8 warps) per SM in each. Expected speed (the model above, not a
//    measurement): per 64 x 64 tile the forward issues 1536 mma (1024 useful) and 4096
//    shared wavefronts (the 8 warps each read the whole K tile as fragments), ~190
//    TFLOP/s; dK dV 3072 mma, 7680 wavefronts; dQ 2560 mma, 6656 wavefronts; ~135 TFLOP/s
//    counted for the backward; less where one resident block per SM leaves the tile loads
//    unhidden (perhaps 150 and 110). Gemma-3-1B's attention is ~2% of its step's FLOPs
//    (four heads, one kv head, window 512 on 22 of 26 layers), so this is not its bottleneck.
#if !defined(ENABLE_FP32)
#define ATT_TC_PAD 8 // padding of a shared tile row, in bf16 elements

// Channel parts: head sizes above 128 split every block's accumulators (O, dQ, dK, dV)
// over 2 groups of 4 warps (threads 128 p .. 128 p + 127 hold channels p HS/2 ..); each
// group computes the full scores itself.
__host__ __device__ constexpr int att_tc_parts(int hs) { return hs > 128 ? 2 : 1; }
__host__ __device__ constexpr int att_tc_threads(int hs) { return 128 * att_tc_parts(hs); }

// Rows row0 .. row0+63 (HS channels) of a (T, stride) bf16 matrix into a shared [64][HS+8]
// tile dst; rows at or past T are zero. 16-byte loads and stores (HS, the stride and the
// head offset are multiples of 8); a quarter-warp stores 128 contiguous bytes of one row
// at head sizes 64 and 128 (no bank conflicts).
template <int HS>
__device__ inline void att_tc_load_tile(__nv_bfloat16 *dst, const __nv_bfloat16 *src, int row0, int T, size_t stride) {
    constexpr int LD = HS + ATT_TC_PAD, CHUNKS = HS / 8;
    for (int idx = threadIdx.x; idx < ATT_TILE * CHUNKS; idx += att_tc_threads(HS)) {
        int r = idx / CHUNKS, c = (idx % CHUNKS) * 8;
        int t = row0 + r;
        uint4 v = {0u, 0u, 0u, 0u};
        if (t < T) v = mma_ld<uint4>(src + (size_t)t * stride + c);
        mma_st<uint4>(dst + r * LD + c, v);
    }
}

// s = A Bm^T over HS channels for one warp: rows r0..r0+15 of the shared [..][HS+8] tile A
// times rows 0..63 of the tile Bm, a 16 x 64 block as 8 C fragments (8 columns each).
template <int HS>
__device__ inline void att_tc_scores(float (&s)[8][4], const __nv_bfloat16 *A, int r0, const __nv_bfloat16 *Bm) {
    constexpr int LD = HS + ATT_TC_PAD;
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int i = 0; i < 4; i++) s[n][i] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < HS / 16; kc++) {
        uint32_t a[4];
        mma_load_a(a, A, LD, r0, kc * 16);
#pragma unroll
        for (int n = 0; n < 8; n++) {
            uint32_t bb[2];
            mma_load_b(bb, Bm, LD, n * 8, kc * 16);
            mma_m16n8k16_bf16(s[n], a, bb, s[n]);
        }
    }
}

// acc += P M[:, c0 .. c0+DH-1] for one warp: P a 16 x 64 block in C fragments (fp32,
// rounded here to bf16), M (64 x HS) the shared row-major tile Ms [64][HS+8], read with
// ldmatrix.trans (two 8-channel blocks per load); acc is 16 x DH (this part's channels).
template <int HS, int DH>
__device__ inline void att_tc_accumulate(float (&acc)[DH / 8][4], const float (&p)[8][4], const __nv_bfloat16 *Ms, int c0) {
    constexpr int LD = HS + ATT_TC_PAD;
#pragma unroll
    for (int kc = 0; kc < 4; kc++) {
        uint32_t a[4];
        a[0] = pack_bf16x2(p[2 * kc][0], p[2 * kc][1]);
        a[1] = pack_bf16x2(p[2 * kc][2], p[2 * kc][3]);
        a[2] = pack_bf16x2(p[2 * kc + 1][0], p[2 * kc + 1][1]);
        a[3] = pack_bf16x2(p[2 * kc + 1][2], p[2 * kc + 1][3]);
#pragma unroll
        for (int c = 0; c < DH / 8; c += 2) {
            uint32_t bb[4];
            mma_load_b2_trans(bb, Ms, LD, kc * 16, c0 + c * 8);
            mma_m16n8k16_bf16(acc[c], a, bb, acc[c]);
            mma_m16n8k16_bf16(acc[c + 1], a, bb + 2, acc[c + 1]);
        }
    }
}

// Reductions over the 4 lanes holding one row of a C fragment (lanes 4g .. 4g+3).
__device__ inline float att_tc_row_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ inline float att_tc_row_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Stores a warp's 16 x DH fp32 accumulator (C fragments) times mul as bf16 into rows
// row0 .. row0+15 (those < T), channels 0 .. DH-1 of a (T, stride) matrix.
template <int DH>
__device__ inline void att_tc_store_rows(__nv_bfloat16 *dst, size_t stride, int row0, int T, const float (&acc)[DH / 8][4],
                                         const float (&mul)[2]) {
    int lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int t = row0 + g + 8 * r;
        if (t >= T) continue;
        __nv_bfloat16 *row = dst + (size_t)t * stride;
#pragma unroll
        for (int c = 0; c < DH / 8; c++)
            mma_st<uint32_t>(row + c * 8 + 2 * t4, pack_bf16x2(acc[c][2 * r] * mul[r], acc[c][2 * r + 1] * mul[r]));
    }
}

// Forward. Grid (query tiles, NH, B); the last query tiles (most keys) start first.
template <int HS>
__global__ void __launch_bounds__(att_tc_threads(HS))
    attention_forward_tc_kernel(__nv_bfloat16 *out, float *lse, const __nv_bfloat16 *qkv, const int *doc_start, int T, int NH,
                                int KVH, float scale, int window, int *tiles) {
    constexpr int LD = HS + ATT_TC_PAD;
    extern __shared__ float4 att_tc_smem[]; // 16-byte aligned
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)att_tc_smem; // [64][LD]
    __nv_bfloat16 *Ks = Qs + ATT_TILE * LD;            // [64][LD]
    __nv_bfloat16 *Vs = Ks + ATT_TILE * LD;            // [64][LD]
    __shared__ int ds_s[ATT_TILE];
    __shared__ int kmin_s;

    const int q0 = (gridDim.x - 1 - blockIdx.x) * ATT_TILE;
    const int h = blockIdx.y, b = blockIdx.z, kvh = h / (NH / KVH);
    constexpr int DH = HS / att_tc_parts(HS); // channels of this part
    const int warp = threadIdx.x / 32 % 4, part = threadIdx.x / 128, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
    const size_t QKV = (size_t)(NH + 2 * KVH) * HS, OC = (size_t)NH * HS;
    const __nv_bfloat16 *qb = qkv + (size_t)b * T * QKV + (size_t)h * HS;          // this query head
    const __nv_bfloat16 *kb = qkv + (size_t)b * T * QKV + (size_t)(NH + kvh) * HS; // its kv head
    const __nv_bfloat16 *vb = kb + (size_t)KVH * HS;
    const float scale_log2 = ATT_LOG2E * scale;

    att_tc_load_tile<HS>(Qs, qb, q0, T, QKV);
    att_load_doc_start(ds_s, &kmin_s, doc_start + (size_t)b * T, q0, T, window); // its barriers also publish Qs
    const int kmin = kmin_s;
    const int qlast = min(q0 + ATT_TILE, T) - 1;

    // this lane's rows of the tile: 16 warp + g (r = 0) and 16 warp + g + 8 (r = 1)
    int rowq[2], rowds[2];
    float m[2], l[2], o[DH / 8][4];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        rowq[r] = q0 + 16 * warp + g + 8 * r;
        rowds[r] = ds_s[16 * warp + g + 8 * r];
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
#pragma unroll
    for (int c = 0; c < DH / 8; c++)
#pragma unroll
        for (int i = 0; i < 4; i++) o[c][i] = 0.0f;

    int visited = 0;
    for (int k0 = (kmin / ATT_TILE) * ATT_TILE; k0 <= qlast; k0 += ATT_TILE, visited++) {
        __syncthreads(); // every warp is done with the previous Ks, Vs
        att_tc_load_tile<HS>(Ks, kb, k0, T, QKV);
        att_tc_load_tile<HS>(Vs, vb, k0, T, QKV);
        __syncthreads();
        float s[8][4];
        att_tc_scores<HS>(s, Qs, 16 * warp, Ks);
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int r = i / 2, key = k0 + 8 * n + 2 * t4 + i % 2;
                bool ok = key >= rowds[r] && key <= rowq[r];
                s[n][i] = ok ? s[n][i] * scale_log2 : -INFINITY;
                mx[r] = fmaxf(mx[r], s[n][i]);
            }
        float mref[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mnew = fmaxf(m[r], att_tc_row_max(mx[r]));
            mref[r] = mnew == -INFINITY ? 0.0f : mnew; // nothing seen yet: every p is 0
            float corr = exp2f(m[r] - mref[r]);        // 0 when m[r] == -inf
            m[r] = mnew;
            l[r] *= corr;
#pragma unroll
            for (int c = 0; c < DH / 8; c++) {
                o[c][2 * r] *= corr;
                o[c][2 * r + 1] *= corr;
            }
        }
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                s[n][i] = exp2f(s[n][i] - mref[i / 2]); // 0 for masked (-inf) scores
                rs[i / 2] += s[n][i];
            }
        l[0] += att_tc_row_sum(rs[0]);
        l[1] += att_tc_row_sum(rs[1]);
        att_tc_accumulate<HS, DH>(o, s, Vs, part * DH);
    }
    att_count_tiles(tiles, visited, q0 / ATT_TILE, h, NH);

    // every real query sees at least itself, so l >= 1; rows past T are not stored
    float inv[2] = {rowq[0] < T ? 1.0f / l[0] : 0.0f, rowq[1] < T ? 1.0f / l[1] : 0.0f};
    att_tc_store_rows<DH>(out + (size_t)b * T * OC + (size_t)h * HS + part * DH, OC, q0 + 16 * warp, T, o, inv);
#pragma unroll
    for (int r = 0; r < 2; r++)
        if (part == 0 && t4 == 0 && rowq[r] < T) lse[((size_t)b * NH + h) * T + rowq[r]] = (m[r] + log2f(l[r])) * ATT_LN2;
}

// Backward dK, dV of one key tile of one kv head, looping over the query tiles that see
// it and, for each, over the query heads of the kv head's group (warp w owns keys
// 16w .. 16w+15). Grid (key tiles, KVH, B). Works on transposed blocks: S^T = K Q^T,
// dP^T = V dout^T; dV += P^T dout, dK += dS^T Q.
template <int HS>
__global__ void __launch_bounds__(att_tc_threads(HS))
    attention_backward_dkdv_tc_kernel(__nv_bfloat16 *dqkv, const __nv_bfloat16 *dout, const float *lse, const float *D,
                                      const __nv_bfloat16 *qkv, const int *doc_start, int T, int NH, int KVH, float scale, int window,
                                      int *tiles) {
    constexpr int LD = HS + ATT_TC_PAD;
    extern __shared__ float4 att_tc_smem[]; // 16-byte aligned
    __nv_bfloat16 *Ks = (__nv_bfloat16 *)att_tc_smem; // [64][LD] keys of this block
    __nv_bfloat16 *Vs = Ks + ATT_TILE * LD;            // [64][LD]
    __nv_bfloat16 *Qs = Vs + ATT_TILE * LD;            // [64][LD] current query tile (current query head)
    __nv_bfloat16 *dOs = Qs + ATT_TILE * LD;           // [64][LD]
    __shared__ int ds_s[ATT_TILE];
    __shared__ float lse2_s[ATT_TILE], D_s[ATT_TILE];
    __shared__ int qmin_s;

    const int k0 = blockIdx.x * ATT_TILE;
    const int kvh = blockIdx.y, b = blockIdx.z, G = NH / KVH;
    constexpr int DH = HS / att_tc_parts(HS); // channels of this part
    const int warp = threadIdx.x / 32 % 4, part = threadIdx.x / 128, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
    const size_t QKV = (size_t)(NH + 2 * KVH) * HS, OC = (size_t)NH * HS;
    const __nv_bfloat16 *qkv_b = qkv + (size_t)b * T * QKV;
    const __nv_bfloat16 *kb = qkv_b + (size_t)(NH + kvh) * HS, *vb = kb + (size_t)KVH * HS;
    const int *ds_b = doc_start + (size_t)b * T;
    const float scale_log2 = ATT_LOG2E * scale;
    const int klast = min(k0 + ATT_TILE, T) - 1;

    att_tc_load_tile<HS>(Ks, kb, k0, T, QKV);
    att_tc_load_tile<HS>(Vs, vb, k0, T, QKV);

    float dk[DH / 8][4], dv[DH / 8][4];
#pragma unroll
    for (int c = 0; c < DH / 8; c++)
#pragma unroll
        for (int i = 0; i < 4; i++) dk[c][i] = dv[c][i] = 0.0f;
    int key[2];
    key[0] = k0 + 16 * warp + g;
    key[1] = key[0] + 8;

    // queries before k0 cannot see these keys (causal), nor, with a window, queries from
    // klast + window on
    const int qend = window > 0 ? min(T, klast + window) : T;
    int visited = 0;
    for (int q0 = k0; q0 < qend; q0 += ATT_TILE) {
        __syncthreads(); // every warp is done with the previous tile's ds_s
        att_load_doc_start(ds_s, &qmin_s, ds_b, q0, T, window);
        if (qmin_s > klast) continue; // no query of this tile reaches back to our keys (uniform)
        visited++;
        for (int h = kvh * G; h < (kvh + 1) * G; h++) {
            __syncthreads(); // every warp is done with the previous head's tiles
            att_tc_load_tile<HS>(Qs, qkv_b + (size_t)h * HS, q0, T, QKV);
            att_tc_load_tile<HS>(dOs, dout + (size_t)b * T * OC + (size_t)h * HS, q0, T, OC);
            if (threadIdx.x < ATT_TILE) {
                int t = q0 + threadIdx.x;
                size_t bht = ((size_t)b * NH + h) * T + t;
                lse2_s[threadIdx.x] = t < T ? lse[bht] * ATT_LOG2E : 0.0f;
                D_s[threadIdx.x] = t < T ? D[bht] : 0.0f;
            }
            __syncthreads();
            float p[8][4], ds[8][4];
            att_tc_scores<HS>(p, Ks, 16 * warp, Qs);  // S^T: p[n][i] = k_(row) . q_(8n + 2 t4 + i % 2)
            att_tc_scores<HS>(ds, Vs, 16 * warp, dOs); // dP^T
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int qr = 8 * n + 2 * t4 + i % 2, kk = key[i / 2];
                    bool ok = kk >= ds_s[qr] && kk <= q0 + qr;
                    float e = exp2f(p[n][i] * scale_log2 - lse2_s[qr]); // read by every lane (no divergent shared access)
                    p[n][i] = ok ? e : 0.0f;
                    ds[n][i] = p[n][i] * (ds[n][i] - D_s[qr]);
                }
            att_tc_accumulate<HS, DH>(dv, p, dOs, part * DH);
            att_tc_accumulate<HS, DH>(dk, ds, Qs, part * DH);
        }
    }
    att_count_tiles(tiles, visited, blockIdx.x, kvh, KVH);

    const float mul_k[2] = {scale, scale}, mul_v[2] = {1.0f, 1.0f};
    __nv_bfloat16 *dkb = dqkv + (size_t)b * T * QKV + (size_t)(NH + kvh) * HS + part * DH;
    att_tc_store_rows<DH>(dkb, QKV, k0 + 16 * warp, T, dk, mul_k);
    att_tc_store_rows<DH>(dkb + (size_t)KVH * HS, QKV, k0 + 16 * warp, T, dv, mul_v);
}

// Backward dQ of one query tile of one query head, looping over its key tiles: S = Q K^T,
// dP = dout V^T, dQ += dS K. Grid (query tiles, NH, B); the last query tiles (most keys)
// start first.
template <int HS>
__global__ void __launch_bounds__(att_tc_threads(HS))
    attention_backward_dq_tc_kernel(__nv_bfloat16 *dqkv, const __nv_bfloat16 *dout, const float *lse, const float *D,
                                    const __nv_bfloat16 *qkv, const int *doc_start, int T, int NH, int KVH, float scale, int window,
                                    int *tiles) {
    constexpr int LD = HS + ATT_TC_PAD;
    extern __shared__ float4 att_tc_smem[]; // 16-byte aligned
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)att_tc_smem; // [64][LD]
    __nv_bfloat16 *dOs = Qs + ATT_TILE * LD;           // [64][LD]
    __nv_bfloat16 *Ks = dOs + ATT_TILE * LD;           // [64][LD]
    __nv_bfloat16 *Vs = Ks + ATT_TILE * LD;            // [64][LD]
    __shared__ int ds_s[ATT_TILE];
    __shared__ int kmin_s;

    const int q0 = (gridDim.x - 1 - blockIdx.x) * ATT_TILE;
    const int h = blockIdx.y, b = blockIdx.z, kvh = h / (NH / KVH);
    constexpr int DH = HS / att_tc_parts(HS); // channels of this part
    const int warp = threadIdx.x / 32 % 4, part = threadIdx.x / 128, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
    const size_t QKV = (size_t)(NH + 2 * KVH) * HS, OC = (size_t)NH * HS;
    const __nv_bfloat16 *qb = qkv + (size_t)b * T * QKV + (size_t)h * HS;          // this query head
    const __nv_bfloat16 *kb = qkv + (size_t)b * T * QKV + (size_t)(NH + kvh) * HS; // its kv head
    const __nv_bfloat16 *vb = kb + (size_t)KVH * HS;
    const float scale_log2 = ATT_LOG2E * scale;

    att_tc_load_tile<HS>(Qs, qb, q0, T, QKV);
    att_tc_load_tile<HS>(dOs, dout + (size_t)b * T * OC + (size_t)h * HS, q0, T, OC);
    att_load_doc_start(ds_s, &kmin_s, doc_start + (size_t)b * T, q0, T, window); // its barriers also publish Qs, dOs
    const int kmin = kmin_s;
    const int qlast = min(q0 + ATT_TILE, T) - 1;

    int rowq[2], rowds[2];
    float rowlse2[2], rowD[2], dq[DH / 8][4];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        rowq[r] = q0 + 16 * warp + g + 8 * r;
        rowds[r] = ds_s[16 * warp + g + 8 * r];
        bool valid = rowq[r] < T;
        rowlse2[r] = valid ? lse[((size_t)b * NH + h) * T + rowq[r]] * ATT_LOG2E : 0.0f;
        rowD[r] = valid ? D[((size_t)b * NH + h) * T + rowq[r]] : 0.0f;
    }
#pragma unroll
    for (int c = 0; c < DH / 8; c++)
#pragma unroll
        for (int i = 0; i < 4; i++) dq[c][i] = 0.0f;

    int visited = 0;
    for (int k0 = (kmin / ATT_TILE) * ATT_TILE; k0 <= qlast; k0 += ATT_TILE, visited++) {
        __syncthreads(); // every warp is done with the previous Ks, Vs
        att_tc_load_tile<HS>(Ks, kb, k0, T, QKV);
        att_tc_load_tile<HS>(Vs, vb, k0, T, QKV);
        __syncthreads();
        float p[8][4], ds[8][4];
        att_tc_scores<HS>(p, Qs, 16 * warp, Ks);   // S
        att_tc_scores<HS>(ds, dOs, 16 * warp, Vs); // dP
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int r = i / 2, kk = k0 + 8 * n + 2 * t4 + i % 2;
                bool ok = kk >= rowds[r] && kk <= rowq[r];
                p[n][i] = ok ? exp2f(p[n][i] * scale_log2 - rowlse2[r]) : 0.0f;
                ds[n][i] = p[n][i] * (ds[n][i] - rowD[r]);
            }
        att_tc_accumulate<HS, DH>(dq, ds, Ks, part * DH);
    }
    att_count_tiles(tiles, visited, q0 / ATT_TILE, h, NH);

    const float mul[2] = {scale, scale};
    att_tc_store_rows<DH>(dqkv + (size_t)b * T * QKV + (size_t)h * HS + part * DH, QKV, q0 + 16 * warp, T, dq, mul);
}
#endif // !ENABLE_FP32

// ---------------------------------------------------------------------------------------
// Host launchers.

// Head sizes with kernels: multiples of 8 up to 128, and 256 (fp32 FMA kernels); the
// tensor-core kernels take the multiples of 16 among them (one mma k step is 16
// channels). 64 (GPT-2 124M, SmolLM2, Llama 3.2, Qwen2.5-0.5B), 128 (Llama 3 8B,
// Qwen2.5-7B, Qwen3) and 256 (Gemma 3 270M and 1B) are in both sets.
#define ATT_HEAD_SIZES(X) X(8) X(16) X(24) X(32) X(40) X(48) X(56) X(64) X(72) X(80) X(88) X(96) X(104) X(112) X(120) X(128) X(256)
#define ATT_TC_HEAD_SIZES(X) X(16) X(32) X(48) X(64) X(80) X(96) X(112) X(128) X(256)

// Refuses head shapes without kernels (one line, exit 1).
inline void attention_check_heads(int NH, int KVH, int HS) {
    if (NH <= 0 || KVH <= 0 || NH % KVH != 0) {
        fprintf(stderr, "error: attention: %d query heads cannot share %d kv heads (need a positive divisor)\n", NH, KVH);
        exit(1);
    }
    if (HS <= 0 || ((HS % 8 != 0 || HS > 128) && HS != 256)) {
        fprintf(stderr, "error: attention: head size %d not supported (kernels for the multiples of 8 up to 128, and 256)\n", HS);
        exit(1);
    }
}

// Which kernels run: ATT_AUTO is the tensor-core kernels where they exist (bf16 build, head
// size a multiple of 16), else the fp32-FMA ones; dev/cuda/attention.cu picks one directly.
enum AttKernels { ATT_AUTO, ATT_FMA, ATT_TC };

// Per-block tile counts (dev/cuda/attention.cu checks the skipping with them; a null
// member is not recorded): forward and dQ blocks (B, NH, query tiles) count the key tiles
// they visited, dK dV blocks (B, KVH, key tiles) the query tiles.
struct AttTileCounts {
    int *fwd, *dkdv, *dq;
};

inline bool attention_tc_supported(int hs) {
#if defined(ENABLE_FP32)
    (void)hs;
    return false;
#else
    return hs % 16 == 0 && (hs <= 128 || hs == 256);
#endif
}

inline bool attention_use_tc(int hs, AttKernels which) {
    if (which == ATT_TC && !attention_tc_supported(hs)) {
        fprintf(stderr, "error: attention: no tensor-core kernels for head size %d in the %s build\n", hs, PRECISION_NAME);
        exit(1);
    }
    return which == ATT_TC || (which == ATT_AUTO && attention_tc_supported(hs));
}

template <int HS>
void attention_forward_fma_hs(floatX *out, float *lse, const floatX *qkv, const int *doc_start, int B, int T, int NH, int KVH,
                              float scale, int window, int *tiles, cudaStream_t stream) {
    size_t smem = (3 * (size_t)ATT_TILE * (HS + 1) + (size_t)ATT_TILE * ATT_PLD) * sizeof(float);
    CUDA_CHECK(cudaFuncSetAttribute(attention_forward_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid(ceil_div(T, ATT_TILE), NH, B);
    attention_forward_kernel<HS><<<grid, ATT_THREADS, smem, stream>>>(out, lse, qkv, doc_start, T, NH, KVH, scale, window, tiles);
    LAUNCH_CHECK();
}

template <int HS>
void attention_backward_fma_hs(floatX *dqkv, const float *D, const floatX *dout, const float *lse, const floatX *qkv,
                               const int *doc_start, int B, int T, int NH, int KVH, float scale, int window, const AttTileCounts &tiles,
                               cudaStream_t stream) {
    size_t smem_kv = (att_fma_bwd_tiles(HS) * (size_t)ATT_TILE * (HS + 1) + 2 * (size_t)ATT_TILE * ATT_PLD) * sizeof(float);
    CUDA_CHECK(cudaFuncSetAttribute(attention_backward_dkdv_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem_kv));
    attention_backward_dkdv_kernel<HS><<<dim3(ceil_div(T, ATT_TILE), KVH, B), ATT_THREADS, smem_kv, stream>>>(
        dqkv, dout, lse, D, qkv, doc_start, T, NH, KVH, scale, window, tiles.dkdv);
    LAUNCH_CHECK();
    size_t smem_q = (att_fma_bwd_tiles(HS) * (size_t)ATT_TILE * (HS + 1) + (size_t)ATT_TILE * ATT_PLD) * sizeof(float);
    CUDA_CHECK(cudaFuncSetAttribute(attention_backward_dq_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_q));
    attention_backward_dq_kernel<HS><<<dim3(ceil_div(T, ATT_TILE), NH, B), ATT_THREADS, smem_q, stream>>>(
        dqkv, dout, lse, D, qkv, doc_start, T, NH, KVH, scale, window, tiles.dq);
    LAUNCH_CHECK();
}

#if !defined(ENABLE_FP32)
// shared bytes of the tensor-core kernels: `tiles` [64][HS+8] bf16 tiles
inline size_t att_tc_smem_bytes(int hs, int tiles) { return (size_t)tiles * ATT_TILE * (hs + ATT_TC_PAD) * sizeof(__nv_bfloat16); }

template <int HS>
void attention_forward_tc_hs(floatX *out, float *lse, const floatX *qkv, const int *doc_start, int B, int T, int NH, int KVH,
                             float scale, int window, int *tiles, cudaStream_t stream) {
    size_t smem = att_tc_smem_bytes(HS, 3); // Q, K, V
    CUDA_CHECK(cudaFuncSetAttribute(attention_forward_tc_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid(ceil_div(T, ATT_TILE), NH, B);
    attention_forward_tc_kernel<HS><<<grid, att_tc_threads(HS), smem, stream>>>(out, lse, qkv, doc_start, T, NH, KVH, scale, window, tiles);
    LAUNCH_CHECK();
}

template <int HS>
void attention_backward_tc_hs(floatX *dqkv, const float *D, const floatX *dout, const float *lse, const floatX *qkv,
                              const int *doc_start, int B, int T, int NH, int KVH, float scale, int window, const AttTileCounts &tiles,
                              cudaStream_t stream) {
    size_t smem_kv = att_tc_smem_bytes(HS, 4); // K, V, Q, dout
    CUDA_CHECK(cudaFuncSetAttribute(attention_backward_dkdv_tc_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem_kv));
    attention_backward_dkdv_tc_kernel<HS><<<dim3(ceil_div(T, ATT_TILE), KVH, B), att_tc_threads(HS), smem_kv, stream>>>(
        dqkv, dout, lse, D, qkv, doc_start, T, NH, KVH, scale, window, tiles.dkdv);
    LAUNCH_CHECK();
    size_t smem_q = att_tc_smem_bytes(HS, 4); // Q, dout, K, V
    CUDA_CHECK(cudaFuncSetAttribute(attention_backward_dq_tc_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem_q));
    attention_backward_dq_tc_kernel<HS><<<dim3(ceil_div(T, ATT_TILE), NH, B), att_tc_threads(HS), smem_q, stream>>>(
        dqkv, dout, lse, D, qkv, doc_start, T, NH, KVH, scale, window, tiles.dq);
    LAUNCH_CHECK();
}
#endif

// qkv (B,T,(NH+2KVH)HS) floatX in; out (B,T,NH HS) floatX and lse (B,NH,T) float (the
// log-sum-exp of each query's scaled scores) out. scale: the factor on q.k (1/sqrt(HS), or Gemma 3's
// query_pre_attn_scalar^-1/2). window: the sliding window in keys (0:
// full causal). tiles: per-block tile counts (dev/cuda/attention.cu), null in training.
inline void attention_forward(floatX *out, float *lse, const floatX *qkv, const int *doc_start, int B, int T, int NH, int KVH,
                              int HS, float scale, int window, cudaStream_t stream, AttKernels which = ATT_AUTO,
                              const AttTileCounts *tiles = nullptr) {
    int *tiles_fwd = tiles ? tiles->fwd : nullptr;
    attention_check_heads(NH, KVH, HS);
#if !defined(ENABLE_FP32)
    if (attention_use_tc(HS, which)) {
        switch (HS) {
#define ATT_CASE(H)                                                                                                    \
    case H: attention_forward_tc_hs<H>(out, lse, qkv, doc_start, B, T, NH, KVH, scale, window, tiles_fwd, stream); break;
            ATT_TC_HEAD_SIZES(ATT_CASE)
#undef ATT_CASE
        }
        return;
    }
#else
    attention_use_tc(HS, which); // fails for ATT_TC
#endif
    switch (HS) {
#define ATT_CASE(H)                                                                                                    \
    case H: attention_forward_fma_hs<H>(out, lse, qkv, doc_start, B, T, NH, KVH, scale, window, tiles_fwd, stream); break;
        ATT_HEAD_SIZES(ATT_CASE)
#undef ATT_CASE
    }
}

// Scratch floats attention_backward needs: D (B, NH, T).
inline size_t attention_backward_scratch_floats(int B, int T, int NH) { return (size_t)B * NH * T; }

// dqkv (B,T,(NH+2KVH)HS) floatX is overwritten (not accumulated); dK, dV of a kv head are
// summed over its query heads. Deterministic: no atomics.
inline void attention_backward(floatX *dqkv, float *scratch, const floatX *dout, const floatX *out, const float *lse,
                               const floatX *qkv, const int *doc_start, int B, int T, int NH, int KVH, int HS, float scale, int window,
                               cudaStream_t stream, AttKernels which = ATT_AUTO, const AttTileCounts *tiles = nullptr) {
    const AttTileCounts counts = tiles ? *tiles : AttTileCounts{nullptr, nullptr, nullptr};
    attention_check_heads(NH, KVH, HS);
    bool tc = attention_use_tc(HS, which);
    long warps = (long)B * T * NH;
    attention_backward_d_kernel<<<ceil_div(warps * 32, 256), 256, 0, stream>>>(scratch, dout, out, B, T, NH, HS);
    LAUNCH_CHECK();
#if !defined(ENABLE_FP32)
    if (tc) {
        switch (HS) {
#define ATT_CASE(H)                                                                                                    \
    case H: attention_backward_tc_hs<H>(dqkv, scratch, dout, lse, qkv, doc_start, B, T, NH, KVH, scale, window, counts, stream); break;
            ATT_TC_HEAD_SIZES(ATT_CASE)
#undef ATT_CASE
        }
        return;
    }
#else
    (void)tc;
#endif
    switch (HS) {
#define ATT_CASE(H)                                                                                                    \
    case H: attention_backward_fma_hs<H>(dqkv, scratch, dout, lse, qkv, doc_start, B, T, NH, KVH, scale, window, counts, stream); break;
        ATT_HEAD_SIZES(ATT_CASE)
#undef ATT_CASE
    }
}
