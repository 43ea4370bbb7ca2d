// dev/cuda/attention.cu: development and check program for the attention kernels.
//
//   make attention && ./attention            (bf16 storage)
//   make attention PRECISION=FP32 && ./attention_fp32
//   ./attention 2      only version 2 (checks and timing)
//
// Versions:
//   1: the simplest correct kernels. Forward: one block per (query, head, row) with the
//      query's scores in shared memory. Backward: one thread per (query, head) for dq and
//      one thread per (key, kv head) for dk, dv, each looping over the positions (and, for
//      dk, dv, the query heads of the group) it touches.
//   2: cuda/attention.cuh's fp32-FMA kernels (tiled, online softmax): what the fp32 build
//      and head sizes that are not a multiple of 16 use.
//   3: cuda/attention.cuh's tensor-core kernels (mma.sync bf16 -> fp32): what the bf16
//      build uses for head sizes that are multiples of 16. bf16 build only (skipped in the
//      fp32 build and for other head sizes).
// Every version is checked against the CPU trainer's attention (dev/cuda/cpu_ref.c) on
// random inputs with packed documents (random boundaries, length-1 documents, padding),
// with outputs filled with NaN before each run, for multi-head and grouped-query heads
// (NH/KVH = 1, 2, 3, 4, NH; head sizes 8 to 128 and 256). Then forward and backward are
// timed for B=4, T=1024 on the attention shapes of GPT-2 124M, SmolLM2-360M, Llama-3.2-1B,
// Llama-3-8B and Gemma-3-1B, with one document per row and (GPT-2, Llama 3 8B) ~128-token
// documents, and Gemma-3-1B's sliding window of 512 in 1024- and 4096-token rows.
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <vector>
#include "cuda/attention.cuh"
#include "cpu_ref.h"

// ---------------------------------------------------------------------------------------
// Version 1: simple kernels.

// Block-wide reductions for version 1 (blockDim.x a multiple of 32, at most 1024);
// every thread gets the result.
__device__ float v1_block_reduce(float v, bool is_max) {
    __shared__ float part[32];
    __shared__ float result;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = is_max ? warp_max(v) : warp_sum(v);
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float x = lane < nwarps ? part[lane] : (is_max ? -INFINITY : 0.0f);
        x = is_max ? warp_max(x) : warp_sum(x);
        if (lane == 0) result = x;
    }
    __syncthreads();
    float r = result;
    __syncthreads(); // part and result may be reused by the next call
    return r;
}

// Positions in a qkv row [q (NH heads) | k (KVH heads) | v (KVH heads)] of HS channels
// each, for version 1; query head h reads kv head h / (NH / KVH).
struct V1Heads {
    int NH, KVH, HS;
    __device__ size_t row() const { return (size_t)(NH + 2 * KVH) * HS; }
    __device__ size_t q(int h) const { return (size_t)h * HS; }
    __device__ size_t k(int kvh) const { return (size_t)(NH + kvh) * HS; }
    __device__ size_t v(int kvh) const { return (size_t)(NH + KVH + kvh) * HS; }
    __device__ int kv_of(int h) const { return h / (NH / KVH); }
};

// One block per (t, h, b); scores of keys first..t (att_first_key) in shared memory (T floats).
__global__ void attention_forward_v1_kernel(floatX *out, float *lse, const floatX *qkv, const int *doc_start, int T, int window,
                                            V1Heads H) {
    extern __shared__ float sc[];
    int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, kvh = H.kv_of(h), hs = H.HS;
    size_t R = H.row();
    const floatX *q = qkv + ((size_t)b * T + t) * R + H.q(h);
    int s0 = att_first_key(doc_start[(size_t)b * T + t], t, window);
    float scale = 1.0f / sqrtf((float)hs);
    float mx = -INFINITY;
    for (int s = s0 + threadIdx.x; s <= t; s += blockDim.x) {
        const floatX *k = qkv + ((size_t)b * T + s) * R + H.k(kvh);
        float d = 0.0f;
        for (int i = 0; i < hs; i++) d += to_float(q[i]) * to_float(k[i]);
        sc[s] = d * scale;
        mx = fmaxf(mx, sc[s]);
    }
    mx = v1_block_reduce(mx, true);
    float sum = 0.0f;
    for (int s = s0 + threadIdx.x; s <= t; s += blockDim.x) {
        sc[s] = expf(sc[s] - mx);
        sum += sc[s];
    }
    sum = v1_block_reduce(sum, false); // its barriers also make every sc[s] visible
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float acc = 0.0f;
        for (int s = s0; s <= t; s++) acc += sc[s] * to_float(qkv[((size_t)b * T + s) * R + H.v(kvh) + i]);
        out[((size_t)b * T + t) * H.NH * hs + H.q(h) + i] = from_float<floatX>(acc / sum);
    }
    if (threadIdx.x == 0) lse[((size_t)b * H.NH + h) * T + t] = mx + logf(sum);
}

#define V1_MAX_HS 256

// One thread per (b, h, t): dq_t = scale sum_s p_s (dout_t.v_s - D_t) k_s, D_t = dout_t.out_t.
__global__ void attention_backward_v1_dq_kernel(floatX *dqkv, const floatX *dout, const floatX *out, const float *lse,
                                                const floatX *qkv, const int *doc_start, int B, int T, int window, V1Heads H) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    int NH = H.NH, hs = H.HS;
    if (idx >= (long)B * NH * T) return;
    int t = (int)(idx % T), h = (int)((idx / T) % NH), b = (int)(idx / ((long)T * NH)), kvh = H.kv_of(h);
    size_t R = H.row(), OC = (size_t)NH * hs;
    float scale = 1.0f / sqrtf((float)hs);
    const floatX *q = qkv + ((size_t)b * T + t) * R + H.q(h);
    const floatX *dy = dout + ((size_t)b * T + t) * OC + H.q(h);
    const floatX *y = out + ((size_t)b * T + t) * OC + H.q(h);
    float D = 0.0f;
    for (int i = 0; i < hs; i++) D += to_float(dy[i]) * to_float(y[i]);
    float L = lse[((size_t)b * NH + h) * T + t];
    float dq[V1_MAX_HS];
    for (int i = 0; i < hs; i++) dq[i] = 0.0f;
    for (int s = att_first_key(doc_start[(size_t)b * T + t], t, window); s <= t; s++) {
        const floatX *k = qkv + ((size_t)b * T + s) * R + H.k(kvh);
        const floatX *v = qkv + ((size_t)b * T + s) * R + H.v(kvh);
        float sd = 0.0f, dp = 0.0f;
        for (int i = 0; i < hs; i++) {
            sd += to_float(q[i]) * to_float(k[i]);
            dp += to_float(dy[i]) * to_float(v[i]);
        }
        float p = expf(sd * scale - L);
        float g = p * (dp - D);
        for (int i = 0; i < hs; i++) dq[i] += g * to_float(k[i]);
    }
    floatX *dqrow = dqkv + ((size_t)b * T + t) * R + H.q(h);
    for (int i = 0; i < hs; i++) dqrow[i] = from_float<floatX>(dq[i] * scale);
}

// One thread per (b, kv head, s): dk_s, dv_s summed over the query heads of the group and
// the queries t >= s of the same document that see s (t - s < window, if any).
__global__ void attention_backward_v1_dkdv_kernel(floatX *dqkv, const floatX *dout, const floatX *out, const float *lse,
                                                  const floatX *qkv, const int *doc_start, int B, int T, int window, V1Heads H) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    int NH = H.NH, KVH = H.KVH, hs = H.HS, G = NH / KVH;
    if (idx >= (long)B * KVH * T) return;
    int s = (int)(idx % T), kvh = (int)((idx / T) % KVH), b = (int)(idx / ((long)T * KVH));
    size_t R = H.row(), OC = (size_t)NH * hs;
    float scale = 1.0f / sqrtf((float)hs);
    const floatX *k = qkv + ((size_t)b * T + s) * R + H.k(kvh);
    const floatX *v = qkv + ((size_t)b * T + s) * R + H.v(kvh);
    float dk[V1_MAX_HS], dv[V1_MAX_HS];
    for (int i = 0; i < hs; i++) dk[i] = dv[i] = 0.0f;
    for (int h = kvh * G; h < (kvh + 1) * G; h++)
        for (int t = s; t < T; t++) {
            if (att_first_key(doc_start[(size_t)b * T + t], t, window) > s) continue;
            const floatX *q = qkv + ((size_t)b * T + t) * R + H.q(h);
            const floatX *dy = dout + ((size_t)b * T + t) * OC + H.q(h);
            const floatX *y = out + ((size_t)b * T + t) * OC + H.q(h);
            float sd = 0.0f, dp = 0.0f, D = 0.0f;
            for (int i = 0; i < hs; i++) {
                sd += to_float(q[i]) * to_float(k[i]);
                dp += to_float(dy[i]) * to_float(v[i]);
                D += to_float(dy[i]) * to_float(y[i]);
            }
            float p = expf(sd * scale - lse[((size_t)b * NH + h) * T + t]);
            float g = p * (dp - D);
            for (int i = 0; i < hs; i++) {
                dv[i] += p * to_float(dy[i]);
                dk[i] += g * to_float(q[i]);
            }
        }
    floatX *row = dqkv + ((size_t)b * T + s) * R;
    for (int i = 0; i < hs; i++) {
        row[H.k(kvh) + i] = from_float<floatX>(dk[i] * scale);
        row[H.v(kvh) + i] = from_float<floatX>(dv[i]);
    }
}

// ---------------------------------------------------------------------------------------
// Dispatch over versions.

static void forward_version(int version, floatX *out, float *lse, const floatX *qkv, const int *doc_start, int B, int T, int NH,
                            int KVH, int HS, int window, const AttTileCounts *tiles = nullptr) {
    if (version == 1) {
        size_t smem = (size_t)T * sizeof(float);
        if (smem > 48 * 1024)
            CUDA_CHECK(cudaFuncSetAttribute(attention_forward_v1_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attention_forward_v1_kernel<<<dim3(T, NH, B), 128, smem>>>(out, lse, qkv, doc_start, T, window, V1Heads{NH, KVH, HS});
        CUDA_CHECK(cudaGetLastError());
    } else {
        attention_forward(out, lse, qkv, doc_start, B, T, NH, KVH, HS, 1.0f / sqrtf((float)HS), window, 0, version == 2 ? ATT_FMA : ATT_TC, tiles);
    }
}

static void backward_version(int version, floatX *dqkv, float *scratch, const floatX *dout, const floatX *out, const float *lse,
                             const floatX *qkv, const int *doc_start, int B, int T, int NH, int KVH, int HS, int window,
                             const AttTileCounts *tiles = nullptr) {
    if (version == 1) {
        V1Heads H{NH, KVH, HS};
        attention_backward_v1_dq_kernel<<<ceil_div(B * NH * T, 128), 128>>>(dqkv, dout, out, lse, qkv, doc_start, B, T, window, H);
        CUDA_CHECK(cudaGetLastError());
        attention_backward_v1_dkdv_kernel<<<ceil_div(B * KVH * T, 128), 128>>>(dqkv, dout, out, lse, qkv, doc_start, B, T, window, H);
        CUDA_CHECK(cudaGetLastError());
    } else {
        attention_backward(dqkv, scratch, dout, out, lse, qkv, doc_start, B, T, NH, KVH, HS, 1.0f / sqrtf((float)HS), window, 0, version == 2 ? ATT_FMA : ATT_TC,
                           tiles);
    }
}

#define NUM_VERSIONS 3

// The emulator's bank-conflict counter, where it is built in (run.sh's dev builds).
struct emu_bank_totals_t {
    unsigned long long requests, extra;
    int worst;
};
#ifdef CUDA_EMU
static bool emu_bank_counting() { return emu::bank_counting(); }
#else
static bool emu_bank_counting() { return false; }
#endif

// whether version v has kernels for head size hs in this build
static bool version_available(int v, int hs) { return v != 3 || attention_tc_supported(hs); }

// ---------------------------------------------------------------------------------------
// Inputs.

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rng_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}
static float rng_uniform(float lo, float hi) { return lo + (hi - lo) * (rng_u32() >> 8) * (1.0f / 16777216.0f); }

// Packing modes: 0 one document per row; 1 random packing (documents of 1..~T/3 tokens,
// some of length 1, padding at the end of some rows, a row that is all padding);
// 2 documents of 96..160 tokens with a little padding at the end of each row.
static void make_doc_start(int *ds, int B, int T, int mode) {
    for (int b = 0; b < B; b++) {
        int *row = ds + (size_t)b * T;
        if (mode == 0) {
            for (int t = 0; t < T; t++) row[t] = 0;
            continue;
        }
        int pad = 0;
        if (mode == 1) {
            int r = rng_u32() % 4;
            pad = r == 0 ? 0 : r == 1 ? 1 + (int)(rng_u32() % (T / 4 + 1)) : r == 2 ? 1 : 0;
            if (b == 1 && B > 2) pad = T; // one row that is only padding
        } else {
            pad = (int)(rng_u32() % 32);
        }
        if (pad > T) pad = T;
        int t = 0;
        while (t < T - pad) {
            int len;
            if (mode == 1) {
                int r = rng_u32() % 8;
                len = r < 2 ? 1 : r < 4 ? 1 + (int)(rng_u32() % 8) : 1 + (int)(rng_u32() % (T / 3 + 1));
            } else {
                len = 96 + (int)(rng_u32() % 65);
            }
            if (t + len > T - pad) len = T - pad - t;
            for (int i = 0; i < len; i++) row[t + i] = t;
            t += len;
        }
        for (; t < T; t++) row[t] = t; // padding attends only to itself
    }
}

static const char *mode_name(int mode) { return mode == 0 ? "single-doc" : mode == 1 ? "random-pack" : "pack-128"; }

// ---------------------------------------------------------------------------------------
// Comparison.

// Reports the largest |got - ref| relative to max |ref|; NaN or Inf in got fails.
static bool check_tensor(const char *name, const float *got, const float *ref, size_t n, float tol) {
    double maxref = 0.0, maxerr = 0.0;
    size_t worst = 0;
    for (size_t i = 0; i < n; i++) maxref = fmax(maxref, fabs((double)ref[i]));
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) {
            printf("FAIL %s: element %zu is %f (ref %g)\n", name, i, got[i], ref[i]);
            return false;
        }
        double e = fabs((double)got[i] - (double)ref[i]);
        if (e > maxerr) {
            maxerr = e;
            worst = i;
        }
    }
    double rel = maxref > 0.0 ? maxerr / maxref : maxerr;
    if (rel > tol) {
        printf("FAIL %s: max err %.3e at element %zu (got %.6g, ref %.6g), max |ref| %.3e, relative %.3e > tol %.1e\n", name,
               maxerr, worst, got[worst], ref[worst], maxref, rel, tol);
        return false;
    }
    printf("ok %s (relative err %.2e)\n", name, rel);
    return true;
}

// bf16 build: inputs are exact bf16 on both sides; the outputs are rounded to bf16 (2^-9
// relative, ~2e-3 of max |ref|: what versions 1 and 2 show), and version 3 also rounds each
// P and dS to bf16 before its second product, adding at most 2^-9 of each term |p v| (|dS q|
// ...) of the sum: of the same size again. Under the emulator the largest errors are 4.6e-3
// (v2) and 5.3e-3 (v3) of max |ref|; 2e-2 leaves room for other inputs and the hardware's
// summation order inside the mma (fp32, far smaller). A wrong mask, scale, fragment or
// skipped tile gives errors of order 1 (see the mutations in the report of the change).
#ifdef ENABLE_FP32
static const float TOL = 1e-4f;
#else
static const float TOL = 2e-2f;
#endif

static std::vector<float> to_host_float(const floatX *d, size_t n) {
    std::vector<floatX> hx(n);
    CUDA_CHECK(cudaMemcpy(hx.data(), d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) h[i] = to_float(hx[i]);
    return h;
}

struct Config {
    int B, T, NH, KVH, HS, mode;
    float amp;  // q, k, v uniform in [-amp, amp]
    int window; // sliding window in keys, 0: full causal
};

// The tiles a block must visit, counted by brute force from the rule itself (query t sees
// key s iff s <= t, same document, t - s < window if window > 0): for each batch row and
// 64-tile index i, need_q[b][i] counts the key tiles holding a key some query of tile i
// sees (what a forward or dQ block of query tile i visits), need_k[b][i] the query tiles
// with a query that sees some key of tile i (a dK dV block).
static void needed_tiles(const int *ds, int B, int T, int window, std::vector<int> &need_q, std::vector<int> &need_k) {
    int nt = (T + 63) / 64;
    need_q.assign((size_t)B * nt, 0);
    need_k.assign((size_t)B * nt, 0);
    std::vector<char> pair((size_t)nt * nt);
    for (int b = 0; b < B; b++) {
        const int *d = ds + (size_t)b * T;
        std::fill(pair.begin(), pair.end(), 0);
        for (int t = 0; t < T; t++)
            for (int s = 0; s <= t; s++)
                if (d[s] == d[t] && (window <= 0 || t - s < window)) pair[(size_t)(t / 64) * nt + s / 64] = 1;
        for (int i = 0; i < nt; i++)
            for (int j = 0; j < nt; j++) {
                need_q[(size_t)b * nt + i] += pair[(size_t)i * nt + j];
                need_k[(size_t)b * nt + j] += pair[(size_t)i * nt + j];
            }
    }
}

// Compares per-block tile counts (B, heads, nt) with the brute-force need (B, nt).
static bool check_tiles(const char *name, const int *got, const std::vector<int> &need, int B, int heads, int nt, long *visited) {
    *visited = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < nt; i++) {
                int g = got[((size_t)b * heads + h) * nt + i], n = need[(size_t)b * nt + i];
                *visited += g;
                if (g != n) {
                    printf("FAIL %s: block (row %d, head %d, tile %d) visited %d tiles, %d needed\n", name, b, h, i, g, n);
                    return false;
                }
            }
    return true;
}

// Splits (B*T) rows [q (NH HS) | k (KVH HS) | v (KVH HS)] into q (B*T, NH HS), k and v
// (B*T, KVH HS).
static void split_qkv(const float *rows, size_t BT, int NH, int KVH, int HS, float *q, float *k, float *v) {
    size_t nq = (size_t)NH * HS, nk = (size_t)KVH * HS;
    for (size_t r = 0; r < BT; r++) {
        const float *x = rows + r * (nq + 2 * nk);
        memcpy(q + r * nq, x, nq * sizeof(float));
        memcpy(k + r * nk, x + nq, nk * sizeof(float));
        memcpy(v + r * nk, x + nq + nk, nk * sizeof(float));
    }
}

// Under the emulator's bank-conflict counter (dev/cuda/emu/README.md): the shared-memory
// requests and extra wavefronts of the kernels of version v (2 FMA, 3 tensor-core) so far.
static emu_bank_totals_t version_banks(int v) {
    emu_bank_totals_t t = {0, 0, 0};
#ifdef CUDA_EMU
    const char *names[2][3] = {{"attention_forward_kernel", "attention_backward_dkdv_kernel", "attention_backward_dq_kernel"},
                               {"attention_forward_tc_kernel", "attention_backward_dkdv_tc_kernel", "attention_backward_dq_tc_kernel"}};
    for (const char *n : names[v - 2]) {
        emu::BankCount c = emu::bank_count(n);
        t.requests += c.requests;
        t.extra += c.extra;
        t.worst = t.worst > c.worst ? t.worst : c.worst;
    }
#else
    (void)v;
#endif
    return t;
}

// The tensor-core kernels must have no bank conflicts at the head sizes the models use;
// the other head sizes (16..48, 80..112) have 2-way conflicts on some 16-byte tile stores.
static bool must_be_conflict_free(int v, int hs) { return v == 3 && (hs == 64 || hs == 128 || hs == 256); }

// Checks every version on one configuration; returns the number of failures.
static int check_config(const Config &cf, int only_version) {
    int B = cf.B, T = cf.T, NH = cf.NH, KVH = cf.KVH, hs = cf.HS;
    size_t BT = (size_t)B * T, QKV = (size_t)(NH + 2 * KVH) * hs;
    size_t nqkv = BT * QKV, nout = BT * NH * hs, nkv = BT * KVH * hs, nlse = (size_t)B * NH * T;
    std::vector<float> qkv(nqkv), dout(nout);
    std::vector<int> ds(BT);
    make_doc_start(ds.data(), B, T, cf.mode);
    // inputs rounded to floatX, so the CPU sees exactly what the GPU sees
    for (auto &x : qkv) x = to_float(from_float<floatX>(rng_uniform(-cf.amp, cf.amp)));
    for (auto &x : dout) x = to_float(from_float<floatX>(rng_uniform(-1.0f, 1.0f)));
    char shape[128];
    snprintf(shape, sizeof shape, "%s B=%d T=%d NH=%d KVH=%d hs=%d window=%d", mode_name(cf.mode), B, T, NH, KVH, hs, cf.window);

    // CPU reference
    std::vector<float> ref_out(nout), ref_att((size_t)B * NH * T * T), ref_dqkv(nqkv, 0.0f), ref_lse(nlse);
    ref_attention_forward(ref_out.data(), ref_att.data(), qkv.data(), ds.data(), B, T, NH, KVH, hs, cf.window);
    ref_attention_backward(ref_dqkv.data(), dout.data(), qkv.data(), ref_att.data(), ds.data(), B, T, NH, KVH, hs, cf.window);
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = &qkv[((size_t)b * T + t) * QKV + (size_t)h * hs];
                double mx = -INFINITY, sum = 0.0;
                std::vector<double> sc(t + 1);
                int s0 = att_first_key(ds[(size_t)b * T + t], t, cf.window);
                for (int s = s0; s <= t; s++) {
                    const float *k = &qkv[((size_t)b * T + s) * QKV + (size_t)(NH + h / (NH / KVH)) * hs];
                    double d = 0.0;
                    for (int i = 0; i < hs; i++) d += (double)q[i] * k[i];
                    sc[s] = d * scale;
                    mx = fmax(mx, sc[s]);
                }
                for (int s = s0; s <= t; s++) sum += exp(sc[s] - mx);
                ref_lse[((size_t)b * NH + h) * T + t] = (float)(mx + log(sum));
            }
    std::vector<float> ref_dq(nout), ref_dk(nkv), ref_dv(nkv);
    split_qkv(ref_dqkv.data(), BT, NH, KVH, hs, ref_dq.data(), ref_dk.data(), ref_dv.data());

    // device buffers
    floatX *d_qkv, *d_out, *d_dout, *d_dqkv;
    float *d_lse, *d_scratch;
    int *d_ds;
    size_t nscratch = attention_backward_scratch_floats(B, T, NH);
    std::vector<floatX> hx(nqkv);
    CUDA_CHECK(cudaMalloc(&d_qkv, nqkv * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&d_dqkv, nqkv * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&d_out, nout * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&d_dout, nout * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&d_lse, nlse * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_scratch, nscratch * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_ds, BT * sizeof(int)));
    for (size_t i = 0; i < nqkv; i++) hx[i] = from_float<floatX>(qkv[i]);
    CUDA_CHECK(cudaMemcpy(d_qkv, hx.data(), nqkv * sizeof(floatX), cudaMemcpyHostToDevice));
    for (size_t i = 0; i < nout; i++) hx[i] = from_float<floatX>(dout[i]);
    CUDA_CHECK(cudaMemcpy(d_dout, hx.data(), nout * sizeof(floatX), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_ds, ds.data(), BT * sizeof(int), cudaMemcpyHostToDevice));
    // per-block tile counts of versions 2 and 3 against the brute-force need
    int nt = (T + 63) / 64;
    std::vector<int> need_q, need_k;
    needed_tiles(ds.data(), B, T, cf.window, need_q, need_k);
    AttTileCounts d_tiles;
    CUDA_CHECK(cudaMalloc(&d_tiles.fwd, (size_t)B * NH * nt * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_tiles.dq, (size_t)B * NH * nt * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_tiles.dkdv, (size_t)B * KVH * nt * sizeof(int)));

    int fails = 0;
    char name[256];
    for (int v = 1; v <= NUM_VERSIONS; v++) {
        if (only_version && v != only_version) continue;
        if (!version_available(v, hs)) {
            printf("skip v%d %s: no kernels for this head size in the %s build\n", v, shape, PRECISION_NAME);
            continue;
        }
        std::vector<float> out1, dqkv1;
        for (int rep = 0; rep < (v >= 2 ? 2 : 1); rep++) {
            // poison: all-ones bytes are NaN in float and in bf16
            CUDA_CHECK(cudaMemset(d_out, 0xFF, nout * sizeof(floatX)));
            CUDA_CHECK(cudaMemset(d_lse, 0xFF, nlse * sizeof(float)));
            CUDA_CHECK(cudaMemset(d_dqkv, 0xFF, nqkv * sizeof(floatX)));
            CUDA_CHECK(cudaMemset(d_scratch, 0xFF, nscratch * sizeof(float)));
            emu_bank_totals_t banks0 = v >= 2 ? version_banks(v) : emu_bank_totals_t{0, 0, 0};
            forward_version(v, d_out, d_lse, d_qkv, d_ds, B, T, NH, KVH, hs, cf.window, &d_tiles);
            backward_version(v, d_dqkv, d_scratch, d_dout, d_out, d_lse, d_qkv, d_ds, B, T, NH, KVH, hs, cf.window, &d_tiles);
            CUDA_CHECK(cudaDeviceSynchronize());
            if (v >= 2 && rep == 0 && emu_bank_counting()) {
                emu_bank_totals_t banks1 = version_banks(v);
                unsigned long long req = banks1.requests - banks0.requests, extra = banks1.extra - banks0.extra;
                snprintf(name, sizeof name, "v%d %s shared memory without bank conflicts", v, shape);
                if (!must_be_conflict_free(v, hs))
                    printf("note %s: %llu requests, %llu extra wavefronts (not required here)\n", name, req, extra);
                else if (extra == 0)
                    printf("ok %s (%llu requests)\n", name, req);
                else {
                    printf("FAIL %s: %llu extra wavefronts in %llu requests (worst %d-way so far)\n", name, extra, req, banks1.worst);
                    fails++;
                }
            }
            std::vector<float> out = to_host_float(d_out, nout), dqkv = to_host_float(d_dqkv, nqkv);
            if (v >= 2 && rep == 0) {
                // tile skipping: every block visits exactly the tiles the rule needs
                std::vector<int> tf((size_t)B * NH * nt), tq((size_t)B * NH * nt), tk((size_t)B * KVH * nt);
                CUDA_CHECK(cudaMemcpy(tf.data(), d_tiles.fwd, tf.size() * sizeof(int), cudaMemcpyDeviceToHost));
                CUDA_CHECK(cudaMemcpy(tq.data(), d_tiles.dq, tq.size() * sizeof(int), cudaMemcpyDeviceToHost));
                CUDA_CHECK(cudaMemcpy(tk.data(), d_tiles.dkdv, tk.size() * sizeof(int), cudaMemcpyDeviceToHost));
                long vf, vq, vk;
                snprintf(name, sizeof name, "v%d %s tiles visited", v, shape);
                bool ok = check_tiles(name, tf.data(), need_q, B, NH, nt, &vf) && check_tiles(name, tq.data(), need_q, B, NH, nt, &vq) &&
                          check_tiles(name, tk.data(), need_k, B, KVH, nt, &vk);
                if (ok) printf("ok %s (forward and dq %ld, dk dv %ld of %ld causal tiles per head)\n", name, vf / NH, vk / KVH,
                               (long)B * nt * (nt + 1) / 2);
                fails += !ok;
            }
            if (rep == 1) {
                // determinism: the second run must be bit-identical
                snprintf(name, sizeof name, "v%d %s deterministic", v, shape);
                bool same = memcmp(out.data(), out1.data(), nout * sizeof(float)) == 0 &&
                            memcmp(dqkv.data(), dqkv1.data(), nqkv * sizeof(float)) == 0;
                printf(same ? "ok %s\n" : "FAIL %s: second run differs\n", name);
                fails += !same;
                break;
            }
            out1 = out;
            dqkv1 = dqkv;
            std::vector<float> lse(nlse), dq(nout), dk(nkv), dv(nkv);
            CUDA_CHECK(cudaMemcpy(lse.data(), d_lse, nlse * sizeof(float), cudaMemcpyDeviceToHost));
            split_qkv(dqkv.data(), BT, NH, KVH, hs, dq.data(), dk.data(), dv.data());
            const char *parts[5] = {"out", "lse", "dq", "dk", "dv"};
            const float *gots[5] = {out.data(), lse.data(), dq.data(), dk.data(), dv.data()};
            const float *refs[5] = {ref_out.data(), ref_lse.data(), ref_dq.data(), ref_dk.data(), ref_dv.data()};
            size_t ns[5] = {nout, nlse, nout, nkv, nkv};
            for (int p = 0; p < 5; p++) {
                snprintf(name, sizeof name, "v%d %s amp=%g %s", v, shape, cf.amp, parts[p]);
                // lse is computed in fp32 from the same inputs in both precisions
                fails += !check_tensor(name, gots[p], refs[p], ns[p], p == 1 ? 1e-4f : TOL);
            }
        }
    }
    cudaFree(d_qkv);
    cudaFree(d_dqkv);
    cudaFree(d_out);
    cudaFree(d_dout);
    cudaFree(d_lse);
    cudaFree(d_scratch);
    cudaFree(d_ds);
    cudaFree(d_tiles.fwd);
    cudaFree(d_tiles.dq);
    cudaFree(d_tiles.dkdv);
    return fails;
}

// ---------------------------------------------------------------------------------------
// Timing.

static const double ASSUMED_PEAK_TFLOPS = 989.0; // H100/H200 SXM dense bf16 tensor cores

static void time_config(const char *model, int B, int T, int NH, int KVH, int hs, int mode, int only_version, int window = 0) {
    size_t nqkv = (size_t)B * T * (NH + 2 * KVH) * hs, nout = (size_t)B * T * NH * hs, nlse = (size_t)B * NH * T;
    std::vector<int> ds((size_t)B * T);
    make_doc_start(ds.data(), B, T, mode);
    double pairs = 0.0; // attended (query, key) pairs per query head
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) pairs += t - att_first_key(ds[(size_t)b * T + t], t, window) + 1;
    double fwd_flops = 4.0 * hs * NH * pairs;  // q.k and p v: 2 hs each
    double bwd_flops = 10.0 * hs * NH * pairs; // q.k again, dv, dp, dq, dk: 2 hs each
    std::vector<floatX> hx(nqkv);
    for (auto &x : hx) x = from_float<floatX>(rng_uniform(-1.0f, 1.0f));
    floatX *d_qkv, *d_out, *d_dout, *d_dqkv;
    float *d_lse, *d_scratch;
    int *d_ds;
    CUDA_CHECK(cudaMalloc(&d_qkv, nqkv * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&d_dqkv, nqkv * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&d_out, nout * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&d_dout, nout * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&d_lse, nlse * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_scratch, attention_backward_scratch_floats(B, T, NH) * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_ds, (size_t)B * T * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d_qkv, hx.data(), nqkv * sizeof(floatX), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_dout, hx.data(), nout * sizeof(floatX), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_ds, ds.data(), (size_t)B * T * sizeof(int), cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    for (int v = 1; v <= NUM_VERSIONS; v++) {
        if (only_version && v != only_version) continue;
        if (!version_available(v, hs)) continue;
        int reps = v == 1 ? 2 : 20;
        float ms_f = 0.0f, ms_b = 0.0f;
        forward_version(v, d_out, d_lse, d_qkv, d_ds, B, T, NH, KVH, hs, window); // warm-up
        backward_version(v, d_dqkv, d_scratch, d_dout, d_out, d_lse, d_qkv, d_ds, B, T, NH, KVH, hs, window);
        CUDA_CHECK(cudaEventRecord(e0));
        for (int r = 0; r < reps; r++) forward_version(v, d_out, d_lse, d_qkv, d_ds, B, T, NH, KVH, hs, window);
        CUDA_CHECK(cudaEventRecord(e1));
        CUDA_CHECK(cudaEventSynchronize(e1));
        CUDA_CHECK(cudaEventElapsedTime(&ms_f, e0, e1));
        CUDA_CHECK(cudaEventRecord(e0));
        for (int r = 0; r < reps; r++)
            backward_version(v, d_dqkv, d_scratch, d_dout, d_out, d_lse, d_qkv, d_ds, B, T, NH, KVH, hs, window);
        CUDA_CHECK(cudaEventRecord(e1));
        CUDA_CHECK(cudaEventSynchronize(e1));
        CUDA_CHECK(cudaEventElapsedTime(&ms_b, e0, e1));
        ms_f /= reps;
        ms_b /= reps;
        double tf = fwd_flops / (ms_f * 1e-3) / 1e12, tb = bwd_flops / (ms_b * 1e-3) / 1e12;
        printf("time v%d %-12s %-10s B=%d T=%d NH=%d KVH=%d hs=%d window=%d: forward %8.3f ms %7.2f TFLOP/s (%5.2f%% of peak), "
               "backward %8.3f ms %7.2f TFLOP/s (%5.2f%%)\n",
               v, model, mode_name(mode), B, T, NH, KVH, hs, window, ms_f, tf, 100.0 * tf / ASSUMED_PEAK_TFLOPS, ms_b, tb,
               100.0 * tb / ASSUMED_PEAK_TFLOPS);
    }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    cudaFree(d_qkv);
    cudaFree(d_dqkv);
    cudaFree(d_out);
    cudaFree(d_dout);
    cudaFree(d_lse);
    cudaFree(d_scratch);
    cudaFree(d_ds);
}

int main(int argc, char **argv) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("skip attention: no CUDA device\n");
        return 0;
    }
    int only_version = argc > 1 ? atoi(argv[1]) : 0;
    if (only_version < 0 || only_version > NUM_VERSIONS) {
        fprintf(stderr, "usage: %s [version 1..%d]\n", argv[0], NUM_VERSIONS);
        return 1;
    }
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("attention checks on %s, storage %s, tolerance %.0e (relative to max |ref| of each tensor)\n", prop.name,
           PRECISION_NAME, TOL);

    const Config configs[] = {
        // multi-head (KVH = NH, GPT-2's attention)
        {2, 64, 2, 2, 32, 1, 2.0f},     // hs 32, one tile
        {3, 160, 4, 4, 32, 1, 2.0f},    // hs 32, documents across tiles, an all-padding row
        {3, 200, 4, 4, 64, 1, 2.0f},    // hs 64, T not a multiple of 64, an all-padding row
        {2, 256, 2, 2, 64, 0, 2.0f},    // hs 64, one document per row
        {2, 256, 2, 2, 64, 0, 5.0f},    // sharp softmax: exercises the online rescaling
        {2, 300, 4, 4, 64, 2, 2.0f},    // hs 64, ~128-token documents
        {2, 130, 4, 4, 24, 1, 2.0f},    // hs 24: channel groups only partly used
        {3, 150, 2, 2, 128, 1, 2.0f},   // hs 128, an all-padding row
        {2, 97, 2, 2, 16, 1, 2.0f},     // hs 16
        {2, 97, 2, 2, 8, 1, 2.0f},      // hs 8
        {4, 1, 2, 2, 32, 0, 2.0f},      // T = 1
        // grouped-query (query head h reads kv head h / (NH/KVH)), odd T
        {2, 197, 9, 3, 64, 1, 2.0f},    // NH/KVH 3 (SmolLM2-135M's heads), random packing
        {2, 261, 8, 2, 64, 2, 2.0f},    // NH/KVH 4, ~128-token documents
        {3, 131, 4, 1, 64, 1, 2.0f},    // NH/KVH = NH (one kv head), an all-padding row
        {2, 193, 8, 2, 128, 1, 2.0f},   // hs 128, NH/KVH 4 (Llama 3 8B's groups)
        {3, 99, 6, 2, 128, 1, 2.0f},    // hs 128, NH/KVH 3, an all-padding row
        {2, 131, 3, 1, 128, 0, 5.0f},   // hs 128, one kv head, one document per row, sharp softmax
        {2, 77, 6, 3, 24, 1, 2.0f},     // hs 24 (FMA kernels only), NH/KVH 2
        {3, 130, 2, 1, 256, 1, 2.0f},   // hs 256 (Gemma 3's: two channel parts, lean FMA backward), one kv head, an all-padding row
        // sliding windows (query t sees keys t-W+1..t of its document)
        {2, 200, 4, 2, 64, 1, 2.0f, 50},    // random packing: documents shorter and longer than the window
        {2, 300, 4, 4, 64, 2, 2.0f, 100},   // ~128-token documents, window shorter than each
        {2, 150, 2, 2, 32, 0, 2.0f, 1},     // window 1: each query sees only itself
        {3, 130, 3, 1, 128, 1, 2.0f, 200},  // window >= T: the causal mask
        {1, 520, 2, 1, 64, 0, 2.0f, 66},    // one document, W = 64 + 2: query tile 2 starts at klast + W - 1 of key tile 0
        {2, 97, 6, 3, 24, 1, 2.0f, 7},      // hs 24 (FMA kernels only)
        {1, 200, 2, 1, 256, 2, 5.0f, 70},   // hs 256, ~128-token documents longer than the window, sharp softmax
    };
    int fails = 0;
    for (const Config &cf : configs) fails += check_config(cf, only_version);

    // the attention shapes of the models the trainer takes
    time_config("GPT-2 124M", 4, 1024, 12, 12, 64, 0, only_version);
    time_config("GPT-2 124M", 4, 1024, 12, 12, 64, 2, only_version);
    time_config("SmolLM2-360M", 4, 1024, 15, 5, 64, 0, only_version);
    time_config("Llama-3.2-1B", 4, 1024, 32, 8, 64, 0, only_version);
    time_config("Llama-3-8B", 4, 1024, 32, 8, 128, 0, only_version);
    time_config("Llama-3-8B", 4, 1024, 32, 8, 128, 2, only_version);
    // a sliding window of 512 in 4096-token rows (Gemma 3's sliding layers) against the
    // full causal mask: the window should cost about 512/2048 of it
    time_config("sliding-4096", 1, 4096, 8, 2, 128, 0, only_version);
    time_config("sliding-4096", 1, 4096, 8, 2, 128, 0, only_version, 512);
    // Gemma-3-1B: 4 query heads of 256 on one kv head; its 5 sliding layers of 6 use W=512
    time_config("Gemma-3-1B", 4, 1024, 4, 1, 256, 0, only_version);
    time_config("Gemma-3-1B", 4, 1024, 4, 1, 256, 0, only_version, 512);
    time_config("Gemma-3-1B", 1, 4096, 4, 1, 256, 0, only_version);
    time_config("Gemma-3-1B", 1, 4096, 4, 1, 256, 0, only_version, 512);
    printf("TFLOP/s count the attended (query, key) pairs only (forward 4*hs, backward 10*hs FLOPs per pair and query head),\n"
           "against an assumed dense bf16 peak of %.0f TFLOP/s (H100/H200 SXM).\n",
           ASSUMED_PEAK_TFLOPS);
    if (fails) {
        printf("FAIL attention: %d check(s) failed\n", fails);
        return 1;
    }
    printf("ok attention: all checks passed\n");
    return 0;
}
