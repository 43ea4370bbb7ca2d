// cuda/matmul.cuh: matrix products through cuBLAS, in row-major terms.
//
// A row-major matrix X (rows x cols, leading dimension ld) is, to column-major
// cuBLAS, the matrix X^T with the same ld. So C = op(A) op(B) (row-major) is
// computed as C^T = op(B)^T op(A)^T: the operands swap places and keep their
// transpose flags. All products accumulate in fp32 (CUBLAS_COMPUTE_32F, no TF32),
// with floatX inputs; the output is floatX (activations) or fp32 (parameter
// gradients, which are accumulated over micro-batches in fp32 in both builds).
#pragma once
#include <cublas_v2.h>
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

// out[n, :] = bias (the product is then added with beta = 1)
__global__ void broadcast_rows_kernel(floatX* out, const floatX* bias, int N, int OC) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (long)N * OC) out[i] = bias[i % OC];
}

// out[N, OC] = inp[N, C] * w[C, OC] + bias[OC]   (w in Hugging Face's Conv1D layout);
// s must be the handle's stream
inline void matmul_forward(cublasHandle_t h, floatX* out, const floatX* inp, const floatX* w, const floatX* bias, int N, int C, int OC,
                           cudaStream_t s) {
    broadcast_rows_kernel<<<ceil_div((long)N * OC, 256), 256, 0, s>>>(out, bias, N, OC);
    LAUNCH_CHECK();
    gemm_rm(h, false, false, N, OC, C, inp, C, w, OC, out, OC, 1.0f);
}

// dinp = dout * w^T (overwritten), dw += inp^T * dout (fp32); the bias gradient is bias_backward's.
inline void matmul_backward_data_weight(cublasHandle_t h, floatX* dinp, float* dw, const floatX* dout, const floatX* inp, const floatX* w,
                                        int N, int C, int OC) {
    gemm_rm(h, false, true, N, C, OC, dout, OC, w, OC, dinp, C, 0.0f);
    gemm_rm(h, true, false, C, OC, N, inp, C, dout, OC, dw, OC, 1.0f);
}
