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
// over OC floats instead of a pass over the N x OC dout.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <stdint.h>
#include "common.cuh"

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
// Runs on the handle's stream (set once, with its workspace, when the handle is made).
template <typename TC>
inline void gemm_rm(cublasHandle_t h, bool trans_a, bool trans_b, int M, int N, int K, const floatX* A, int lda, const floatX* B, int ldb,
                    TC* C, int ldc, float beta) {
    float alpha = 1.0f;
    CUBLAS_CHECK(cublasGemmEx(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, CUBLAS_FLOATX,
                              ldb, A, CUBLAS_FLOATX, lda, &beta, C, cublas_type(C), ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    LAUNCH_CHECK();
}

// ----------------------------------------------------------------------------
// cuBLASLt

// The cuBLASLt handle and the workspace its products may use (the cuBLAS handle's: both
// run on one stream, so their products never overlap).
struct BlasLt {
    cublasLtHandle_t handle;
    void* workspace;         // (workspace_bytes) device memory
    size_t workspace_bytes;
};

// the largest power of two (at most 256) that divides the address: the alignment the
// heuristic may count on (its default assumes 256, which offsets into one allocation break)
inline uint32_t ptr_alignment(const void* p) {
    uint32_t a = 1;
    while (a < 256 && (uintptr_t)p % (2 * a) == 0) a *= 2;
    return a;
}

// D[M,N] (row-major, ld ldd, type dtype) = op(A)[M,K] op(B)[K,N] (+ D when accumulate), then
// the epilogue `epi`, in row-major terms (cuBLASLt's A is our B and its m is our N):
//   CUBLASLT_EPILOGUE_BIAS           D = x + bias[n]                       (bias: N values of D's type)
//   CUBLASLT_EPILOGUE_GELU_AUX_BIAS  D = gelu(x + bias[n]), aux = x + bias (aux: M x N, row stride ldaux, a multiple of 8)
//   CUBLASLT_EPILOGUE_DGELU          D = x * gelu'(aux)                    (aux read: the GELU input, as above)
//   CUBLASLT_EPILOGUE_BGRADA         D = x, bias[n] = sum over k of op(B)[k, n] (stored, not added; D's type)
//   CUBLASLT_EPILOGUE_DEFAULT        D = x
// Exits with a message if cuBLASLt has no algorithm for the problem.
inline void lt_matmul_rm(const BlasLt* lt, cublasLtEpilogue_t epi, bool trans_a, bool trans_b, int M, int N, int K, const floatX* A, int lda,
                         const floatX* B, int ldb, void* D, cudaDataType_t dtype, int ldd, bool accumulate, void* bias, const void* aux,
                         int ldaux, cudaStream_t s) {
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t opa = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, opb = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint32_t e = (uint32_t)epi;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    if (bias) CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (aux) {
        int64_t ld = ldaux;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    }
    // column-major layouts: cuBLASLt's A is our B (N x K after its op), its B our A (K x M), D is N x M
    cublasLtMatrixLayout_t la, lb, ld;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUBLAS_FLOATX, trans_b ? K : N, trans_b ? N : K, ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUBLAS_FLOATX, trans_a ? M : K, trans_a ? K : M, lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, dtype, N, M, ldd));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = lt->workspace_bytes;
    uint32_t align_a = ptr_alignment(B), align_b = ptr_alignment(A), align_d = ptr_alignment(D);
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof align_d));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof align_d));
    cublasLtMatmulHeuristicResult_t algo;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt->handle, desc, la, lb, ld, ld, pref, 1, &algo, &found);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
        fprintf(stderr, "error: cuBLASLt has no algorithm for a %d x %d x %d product with epilogue %u (status %d)\n", M, N, K, e, (int)st);
        exit(1);
    }
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(lt->handle, desc, &alpha, B, la, A, lb, &beta, D, ld, D, ld, &algo.algo, lt->workspace, lt->workspace_bytes, s));
    LAUNCH_CHECK();
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(la));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lb));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(ld));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
}

// ----------------------------------------------------------------------------
// The layers' products (w in Hugging Face's Conv1D layout: C x OC)

// out[N, OC] = inp[N, C] * w[C, OC] + bias[OC]
inline void matmul_forward(const BlasLt* lt, floatX* out, const floatX* inp, const floatX* w, const floatX* bias, int N, int C, int OC,
                           cudaStream_t s) {
    lt_matmul_rm(lt, CUBLASLT_EPILOGUE_BIAS, false, false, N, OC, C, inp, C, w, OC, out, CUBLAS_FLOATX, OC, false, (void*)bias, nullptr, 0, s);
}

// pre[N, OC] = inp * w + bias (the GELU input, for backward), out = gelu(pre) (tanh form),
// GELU taken of the fp32 value before pre is rounded to floatX; OC must be a multiple of 8
inline void matmul_forward_gelu(const BlasLt* lt, floatX* out, floatX* pre, const floatX* inp, const floatX* w, const floatX* bias, int N,
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
// With gelu_pre (N x C: inp = gelu(gelu_pre), C a multiple of 8) the data gradient goes on
// through the GELU: dinp = (dout * w^T) * gelu'(gelu_pre), the gradient of gelu_pre.
inline void matmul_backward(const BlasLt* lt, floatX* dinp, float* dw, float* dbias, float* bias_scratch, const floatX* dout,
                            const floatX* inp, const floatX* w, const floatX* gelu_pre, int N, int C, int OC, cudaStream_t s) {
    lt_matmul_rm(lt, gelu_pre ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT, false, true, N, C, OC, dout, OC, w, OC, dinp, CUBLAS_FLOATX, C,
                 false, nullptr, gelu_pre, C, s);
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
inline void matmul_forward_oi(const BlasLt* lt, floatX* out, const floatX* inp, const floatX* w, const floatX* bias, int N, int C, int OC,
                              cudaStream_t s) {
    lt_matmul_rm(lt, bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, false, true, N, OC, C, inp, C, w, C, out, CUBLAS_FLOATX, OC,
                 false, (void*)bias, nullptr, 0, s);
}

// dinp[N, C] = dout[N, OC] * w[OC, C] (overwritten), dw[OC, C] += dout^T * inp (fp32)
inline void matmul_backward_oi(const BlasLt* lt, floatX* dinp, float* dw, const floatX* dout, const floatX* inp, const floatX* w, int N, int C,
                               int OC, cudaStream_t s) {
    lt_matmul_rm(lt, CUBLASLT_EPILOGUE_DEFAULT, false, false, N, C, OC, dout, OC, w, C, dinp, CUBLAS_FLOATX, C, false, nullptr, nullptr, 0, s);
    lt_matmul_rm(lt, CUBLASLT_EPILOGUE_DEFAULT, true, false, OC, C, N, dout, OC, inp, C, dw, CUDA_R_32F, C, true, nullptr, nullptr, 0, s);
}
