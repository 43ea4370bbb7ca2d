// cuda/matmul.cuh: matrix products through cuBLAS and cuBLASLt, in row-major terms.
//
// A row-major matrix X (rows x cols, leading dimension ld) is, to column-major
// cuBLAS, the matrix X^T with the same ld. So C = op(A) op(B) (row-major) is
// computed as C^T = op(B)^T op(A)^T: the operands swap places and keep their
// transpose flags. All products accumulate in fp32 (CUBLAS_COMPUTE_32F, no TF32),
// with floatX inputs; the output is floatX (activations) or fp32 (parameter
// gradients, which are accumulated over micro-batches in fp32 in both builds).
//
// The layers' products go through cuBLASLt so that the work around them happens in the
// product's epilogue, on the fp32 accumulator, instead of in separate passes over memory:
//   forward:  + bias (BIAS); + bias then GELU, keeping the GELU input (GELU_AUX_BIAS);
//   backward: the GELU's derivative on the data gradient (DGELU, reading the GELU input
//             kept in forward); the bias gradient = column sums of dout, read while the
//             weight gradient's product reads dout anyway (BGRADA: cuBLASLt's A summed over k).
// cuBLASLt stores the bias gradient (it cannot accumulate it), so it goes to an fp32
// scratch of OC floats and a tiny kernel adds it to the fp32 gradient: one extra launch
// over OC floats instead of a pass over the N x OC dout. Where cuBLASLt has no algorithm for
// an epilogue, the plain product and our own kernels do its work (see "Fallback" below).
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <stdint.h>
#include "common.cuh"
#include "elementwise.cuh"

#define CUBLAS_CHECK(call)                                                                              \
    do {                                                                                                \
        cublasStatus_t st_ = (call);                                                                    \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                                             \
            fprintf(stderr, "error: cuBLAS status %d (%s:%d)\n", (int)st_, __FILE__, __LINE__);         \
            exit(1);                                                                                    \
        }                                                                                               \
    } while (0)

#if defined(ENABLE_FP32)
#define CUBLAS_FLOATX CUDA_R_32F
#else
#define CUBLAS_FLOATX CUDA_R_16BF
#endif

inline cudaDataType_t cublas_type(const float*) { return CUDA_R_32F; }
inline cudaDataType_t cublas_type(const __nv_bfloat16*) { return CUDA_R_16BF; }

// C[M,N] = alpha * op(A)[M,K] op(B)[K,N] + beta * C, all row-major; trans_a means A is
// stored as K x M (so op(A) = A^T), trans_b means B is stored as N x K. C is floatX or float.
// alpha scales the product (LoRA's alpha / R, cuda/lora.cuh); 1 everywhere else.
// Runs on the handle's stream (set once, with its workspace, when the handle is made).
template <typename TC>
inline void gemm_rm(cublasHandle_t h, bool trans_a, bool trans_b, int M, int N, int K, const floatX* A, int lda, const floatX* B, int ldb,
                    TC* C, int ldc, float beta, float alpha = 1.0f) {
    CUBLAS_CHECK(cublasGemmEx(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, CUBLAS_FLOATX,
                              ldb, A, CUBLAS_FLOATX, lda, &beta, C, cublas_type(C), ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    LAUNCH_CHECK();
}

// ----------------------------------------------------------------------------
// cuBLASLt
//
// Plans: a product's descriptors, layouts and algorithm (the heuristic's choice) are made the
// first time its configuration is seen and reused after that: the layers' products have the
// same shapes every step, and creating four descriptors and asking the heuristic for each of
// a step's ~150 products costs host time of the order of the smaller products. The key is
// everything those depend on; the bias and aux pointers change from layer to layer and are
// set on the cached descriptor at each call (the algorithm depends only on their alignments,
// which are in the key).
//
// Fallback: where cuBLASLt has no algorithm for an epilogue (it may lack one for some shapes,
// types or library versions; CUBLAS_STATUS_NOT_SUPPORTED or no result), the product runs with
// the DEFAULT epilogue and our kernels do the epilogue's work, after one warning line per
// plan (per shape and epilogue; again only if the plan was evicted from the cache):
//   BIAS:           D = bias broadcast to every row (bias_broadcast), then D += the product;
//   GELU_AUX_BIAS:  the same into aux, then D = gelu(aux) (gelu_forward); in bf16 the GELU
//                   reads the rounded aux where the epilogue reads the fp32 sum;
//   DGELU:          D = the product, then D = D * gelu'(aux) (gelu_backward, in place);
//   BGRADA:         the product, then bias = column sums of op(B) (colsum_add into zeros).
// The emulator refuses epilogues with EMU_LT_REFUSE, so that test_sftcu runs this path; on a
// GPU, dev/cuda/matmul.cu checks it through epilogues_off.

// What a plan depends on (compared as bytes: set every field, zero the rest)
struct LtKey {
    int epi, trans_a, trans_b, M, N, K, lda, ldb, ldd, ldaux, dtype, accumulate;
    uint32_t align[5];  // alignments of A, B, D, bias and aux (0: no pointer) the algorithm may count on
};
struct LtPlan {
    LtKey key;
    bool used;
    bool fallback;  // no algorithm for the epilogue: the DEFAULT product and our kernels (no descriptors)
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
};
// GPT-2 needs 12 plans (4 products x forward, data and weight gradient) when its layers'
// pointers share their alignments, up to one set per layer when they do not
#define LT_PLANS 64

// The cuBLASLt handle, the workspace its products may use (the cuBLAS handle's: both run on
// one stream, so their products never overlap) and the cache of plans.
struct BlasLt {
    cublasLtHandle_t handle;
    void* workspace;         // (workspace_bytes) device memory
    size_t workspace_bytes;
    bool epilogues_off;      // every epilogue takes the fallback (dev/cuda/matmul.cu checks it on a GPU)
    LtPlan plans[LT_PLANS];
    int next_evict;          // the plan a new one replaces once all are used (round robin)
    long plans_made;         // plans created so far (cache misses): test_sftcu checks that a second step makes none
};

inline void blaslt_init(BlasLt* lt, void* workspace, size_t workspace_bytes) {
    memset(lt, 0, sizeof *lt);
    CUBLAS_CHECK(cublasLtCreate(&lt->handle));
    lt->workspace = workspace;
    lt->workspace_bytes = workspace_bytes;
}

inline void lt_plan_release(LtPlan* p) {
    if (p->used && !p->fallback) {
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->la));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lb));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->ld));
        CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
    }
    p->used = false;
}

inline void blaslt_destroy(BlasLt* lt) {
    for (int i = 0; i < LT_PLANS; i++) lt_plan_release(&lt->plans[i]);
    CUBLAS_CHECK(cublasLtDestroy(lt->handle));
}

// the largest power of two (at most 256) that divides the address: the alignment the
// heuristic may count on (its default assumes 256, which offsets into one allocation break)
inline uint32_t ptr_alignment(const void* p) {
    uint32_t a = 1;
    while (a < 256 && (uintptr_t)p % (2 * a) == 0) a *= 2;
    return a;
}

inline const char* lt_epilogue_name(int e) {
    switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "DEFAULT";
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
    case CUBLASLT_EPILOGUE_BGRADA: return "BGRADA";
    default: return "other";
    }
}

// whether our kernels can do the epilogue's work for this configuration (the cases the layers use)
inline bool lt_fallback_possible(const LtKey* k) {
    bool x = k->dtype == (int)CUBLAS_FLOATX, dense = k->ldd == k->N && k->ldaux == k->N;
    switch (k->epi) {
    case CUBLASLT_EPILOGUE_BIAS: return x && !k->accumulate;
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DGELU: return x && dense && !k->accumulate;
    case CUBLASLT_EPILOGUE_BGRADA: return k->dtype == (int)CUDA_R_32F && !k->trans_b;
    default: return false;
    }
}

// a new plan for key: descriptors and the heuristic's algorithm, or the fallback
inline LtPlan* lt_plan_make(BlasLt* lt, const LtKey* key, void* bias, const void* aux) {
    LtPlan* p = nullptr;
    for (int i = 0; i < LT_PLANS && !p; i++)
        if (!lt->plans[i].used) p = &lt->plans[i];
    if (!p) {
        p = &lt->plans[lt->next_evict];
        lt->next_evict = (lt->next_evict + 1) % LT_PLANS;
        lt_plan_release(p);
    }
    lt->plans_made++;
    p->key = *key;
    p->used = true;
    p->fallback = false;
    int M = key->M, N = key->N, K = key->K;
    bool trans_a = key->trans_a, trans_b = key->trans_b;
    if (lt->epilogues_off && key->epi != CUBLASLT_EPILOGUE_DEFAULT && lt_fallback_possible(key)) {
        p->fallback = true;
        return p;
    }
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t opa = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, opb = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint32_t e = (uint32_t)key->epi;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    if (bias) CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (aux) {
        int64_t ldx = key->ldaux;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldx, sizeof ldx));
    }
    // column-major layouts: cuBLASLt's A is our B (N x K after its op), its B our A (K x M), D is N x M
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, CUBLAS_FLOATX, trans_b ? K : N, trans_b ? N : K, key->ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, CUBLAS_FLOATX, trans_a ? M : K, trans_a ? K : M, key->lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->ld, (cudaDataType_t)key->dtype, N, M, key->ldd));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = lt->workspace_bytes;
    // cuBLASLt's A is our B, its B our A; C is D (in place)
    uint32_t align_a = key->align[1], align_b = key->align[0], align_d = key->align[2];
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof align_d));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof align_d));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt->handle, p->desc, p->la, p->lb, p->ld, p->ld, pref, 1, &result, &found);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
        p->algo = result.algo;
        return p;
    }
    bool no_algorithm = st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0);
    if (!no_algorithm || !lt_fallback_possible(key)) {
        fprintf(stderr, "error: cuBLASLt has no algorithm for a %d x %d x %d product with epilogue %s (status %d)%s\n", M, N, K,
                lt_epilogue_name(key->epi), (int)st, no_algorithm ? " and there is no fallback for it" : "");
        exit(1);
    }
    fprintf(stderr, "warning: cuBLASLt has no algorithm for the %d x %d x %d product with epilogue %s: using the plain product and separate epilogue kernels\n",
            M, N, K, lt_epilogue_name(key->epi));
    lt_plan_release(p);  // its descriptors
    p->used = true;
    p->fallback = true;
    return p;
}

// out[r * ld + c] = bias[c] for r < rows, c < cols: the bias where the product is then added
// (the fallback of the BIAS epilogues). CPU twin: the bias term of matmul_forward (train_sft.c).
__global__ void bias_broadcast_kernel(floatX* out, const floatX* bias, int rows, int cols, size_t ld) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)rows * cols) return;
    size_t r = i / cols, c = i % cols;
    out[r * ld + c] = bias[c];
}
inline void bias_broadcast(floatX* out, const floatX* bias, int rows, int cols, size_t ld, cudaStream_t s) {
    if (rows <= 0 || cols <= 0) return;
    bias_broadcast_kernel<<<ceil_div((long)rows * cols, 256), 256, 0, s>>>(out, bias, rows, cols, ld);
    LAUNCH_CHECK();
}

// D[M,N] (row-major, ld ldd, type dtype) = op(A)[M,K] op(B)[K,N] (+ D when accumulate), then
// the epilogue `epi`, in row-major terms (cuBLASLt's A is our B and its m is our N):
//   CUBLASLT_EPILOGUE_BIAS           D = x + bias[n]                       (bias: N values of D's type)
//   CUBLASLT_EPILOGUE_GELU_AUX_BIAS  D = gelu(x + bias[n]), aux = x + bias (aux: M x N, row stride ldaux, a multiple of 8)
//   CUBLASLT_EPILOGUE_DGELU          D = x * gelu'(aux)                    (aux read: the GELU input, as above)
//   CUBLASLT_EPILOGUE_BGRADA         D = x, bias[n] = sum over k of op(B)[k, n] (stored, not added; D's type)
//   CUBLASLT_EPILOGUE_DEFAULT        D = x
// Exits with a message if cuBLASLt has no algorithm and there is no fallback (see above).
inline void lt_matmul_rm(BlasLt* lt, cublasLtEpilogue_t epi, bool trans_a, bool trans_b, int M, int N, int K, const floatX* A, int lda,
                         const floatX* B, int ldb, void* D, cudaDataType_t dtype, int ldd, bool accumulate, void* bias, const void* aux,
                         int ldaux, cudaStream_t s) {
    LtKey key;
    memset(&key, 0, sizeof key);
    key.epi = (int)epi;
    key.trans_a = trans_a;
    key.trans_b = trans_b;
    key.M = M;
    key.N = N;
    key.K = K;
    key.lda = lda;
    key.ldb = ldb;
    key.ldd = ldd;
    key.ldaux = aux ? ldaux : 0;
    key.dtype = (int)dtype;
    key.accumulate = accumulate;
    const void* ptrs[5] = {A, B, D, bias, aux};
    for (int i = 0; i < 5; i++) key.align[i] = ptrs[i] ? ptr_alignment(ptrs[i]) : 0;
    LtPlan* p = nullptr;
    for (int i = 0; i < LT_PLANS && !p; i++)
        if (lt->plans[i].used && !memcmp(&lt->plans[i].key, &key, sizeof key)) p = &lt->plans[i];
    if (!p) p = lt_plan_make(lt, &key, bias, aux);
    const cublasLtEpilogue_t plain = CUBLASLT_EPILOGUE_DEFAULT;
    if (p->fallback) {
        switch (epi) {
        case CUBLASLT_EPILOGUE_BIAS:
            bias_broadcast((floatX*)D, (const floatX*)bias, M, N, ldd, s);
            lt_matmul_rm(lt, plain, trans_a, trans_b, M, N, K, A, lda, B, ldb, D, dtype, ldd, true, nullptr, nullptr, 0, s);
            break;
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
            bias_broadcast((floatX*)aux, (const floatX*)bias, M, N, ldaux, s);
            lt_matmul_rm(lt, plain, trans_a, trans_b, M, N, K, A, lda, B, ldb, (void*)aux, dtype, ldaux, true, nullptr, nullptr, 0, s);
            gelu_forward((floatX*)D, (const floatX*)aux, (size_t)M * N, s);
            break;
        case CUBLASLT_EPILOGUE_DGELU:
            lt_matmul_rm(lt, plain, trans_a, trans_b, M, N, K, A, lda, B, ldb, D, dtype, ldd, false, nullptr, nullptr, 0, s);
            gelu_backward((floatX*)D, (const floatX*)aux, (const floatX*)D, (size_t)M * N, s);
            break;
        default:  // BGRADA (lt_fallback_possible)
            lt_matmul_rm(lt, plain, trans_a, trans_b, M, N, K, A, lda, B, ldb, D, dtype, ldd, accumulate, nullptr, nullptr, 0, s);
            CUDA_CHECK(cudaMemsetAsync(bias, 0, (size_t)N * sizeof(float), s));
            colsum_add((float*)bias, B, K, N, (size_t)ldb, s);
            break;
        }
        return;
    }
    if (bias) CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (aux) CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(lt->handle, p->desc, &alpha, B, p->la, A, p->lb, &beta, D, p->ld, D, p->ld, &p->algo, lt->workspace,
                                lt->workspace_bytes, s));
    LAUNCH_CHECK();
}

// ----------------------------------------------------------------------------
// The layers' products (w in Hugging Face's Conv1D layout: C x OC)

// out[N, OC] = inp[N, C] * w[C, OC] + bias[OC]
inline void matmul_forward(BlasLt* lt, floatX* out, const floatX* inp, const floatX* w, const floatX* bias, int N, int C, int OC,
                           cudaStream_t s) {
    lt_matmul_rm(lt, CUBLASLT_EPILOGUE_BIAS, false, false, N, OC, C, inp, C, w, OC, out, CUBLAS_FLOATX, OC, false, (void*)bias, nullptr, 0, s);
}

// pre[N, OC] = inp * w + bias (the GELU input, for backward), out = gelu(pre) (tanh form),
// GELU taken of the fp32 value before pre is rounded to floatX; OC must be a multiple of 8
inline void matmul_forward_gelu(BlasLt* lt, floatX* out, floatX* pre, const floatX* inp, const floatX* w, const floatX* bias, int N,
                                int C, int OC, cudaStream_t s) {
    lt_matmul_rm(lt, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, false, false, N, OC, C, inp, C, w, OC, out, CUBLAS_FLOATX, OC, false, (void*)bias, pre,
                 OC, s);
}

// out[i] += inp[i] for n fp32 values
__global__ void add_f32_kernel(float* out, const float* inp, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += inp[i];
}

// dinp = dout * w^T (overwritten), dw += inp^T * dout and dbias += column sums of dout (both
// fp32); bias_scratch: OC floats, where BGRADA stores the column sums before they are added.
// dw and dbias null: a frozen layer (LoRA), only dinp: the weight-gradient product is skipped.
// With gelu_pre (N x C: inp = gelu(gelu_pre), C a multiple of 8) the data gradient goes on
// through the GELU: dinp = (dout * w^T) * gelu'(gelu_pre), the gradient of gelu_pre.
inline void matmul_backward(BlasLt* lt, floatX* dinp, float* dw, float* dbias, float* bias_scratch, const floatX* dout,
                            const floatX* inp, const floatX* w, const floatX* gelu_pre, int N, int C, int OC, cudaStream_t s) {
    lt_matmul_rm(lt, gelu_pre ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT, false, true, N, C, OC, dout, OC, w, OC, dinp, CUBLAS_FLOATX, C,
                 false, nullptr, gelu_pre, C, s);
    if (!dw) return;
    lt_matmul_rm(lt, CUBLASLT_EPILOGUE_BGRADA, true, false, C, OC, N, inp, C, dout, OC, dw, CUDA_R_32F, OC, true, bias_scratch, nullptr, 0, s);
    add_f32_kernel<<<ceil_div(OC, 256), 256, 0, s>>>(dbias, bias_scratch, OC);
    LAUNCH_CHECK();
}

// ----------------------------------------------------------------------------
// The Llama family's products: w in nn.Linear's layout, [out, in] = OC x C, so y = x w^T.
// The same cuBLASLt calls with the other transposes; no GELU (SwiGLU is its own kernel,
// cuda/swiglu.cuh). The only bias is Qwen2's on q, k, v: its gradient comes from
// bias_backward (cuda/elementwise.cuh), since here dout is the weight gradient's first
// operand, whose column sums would need cuBLASLt's BGRADB epilogue (not used anywhere yet,
// so not relied on before it is checked on a GPU).

// out[N, OC] = inp[N, C] * w[OC, C]^T (+ bias[OC] when bias is not null)
inline void matmul_forward_oi(BlasLt* lt, floatX* out, const floatX* inp, const floatX* w, const floatX* bias, int N, int C, int OC,
                              cudaStream_t s) {
    lt_matmul_rm(lt, bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, false, true, N, OC, C, inp, C, w, C, out, CUBLAS_FLOATX, OC,
                 false, (void*)bias, nullptr, 0, s);
}

// dinp[N, C] = dout[N, OC] * w[OC, C] (overwritten), dw[OC, C] += dout^T * inp (fp32); dw null:
// a frozen layer (LoRA), only dinp
inline void matmul_backward_oi(BlasLt* lt, floatX* dinp, float* dw, const floatX* dout, const floatX* inp, const floatX* w, int N, int C,
                               int OC, cudaStream_t s) {
    lt_matmul_rm(lt, CUBLASLT_EPILOGUE_DEFAULT, false, false, N, C, OC, dout, OC, w, C, dinp, CUBLAS_FLOATX, C, false, nullptr, nullptr, 0, s);
    if (!dw) return;
    lt_matmul_rm(lt, CUBLASLT_EPILOGUE_DEFAULT, true, false, OC, C, N, dout, OC, inp, C, dw, CUDA_R_32F, C, true, nullptr, nullptr, 0, s);
}
