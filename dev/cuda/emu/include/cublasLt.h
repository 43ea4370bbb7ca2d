// emulated cuBLASLt: the subset the trainer uses (matmul with the BIAS, GELU_BIAS,
// GELU_AUX_BIAS, DGELU and BGRADA/BGRADB epilogues), as a plain loop; see ../cublaslt.cpp.
// Names, enum values and signatures are those of CUDA 13's cublasLt.h.
#pragma once
#include <stdint.h>
#include "cublas_v2.h"
typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct { uint64_t data[32]; } cublasLtMatmulDescOpaque_t;
typedef cublasLtMatmulDescOpaque_t *cublasLtMatmulDesc_t;
typedef struct { uint64_t data[8]; } cublasLtMatrixLayoutOpaque_t;
typedef cublasLtMatrixLayoutOpaque_t *cublasLtMatrixLayout_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulPreferenceOpaque_t;
typedef cublasLtMatmulPreferenceOpaque_t *cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;
enum cublasLtMatmulDescAttributes_t {
    CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0, CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1, CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,
    CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4, CUBLASLT_MATMUL_DESC_TRANSC = 5, CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = 22, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26
};
enum cublasLtEpilogue_t {
    CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_BIAS = 4, CUBLASLT_EPILOGUE_GELU = 32, CUBLASLT_EPILOGUE_GELU_AUX = 160,
    CUBLASLT_EPILOGUE_GELU_BIAS = 36, CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164, CUBLASLT_EPILOGUE_DGELU = 192,
    CUBLASLT_EPILOGUE_DGELU_BGRAD = 208, CUBLASLT_EPILOGUE_BGRADA = 256, CUBLASLT_EPILOGUE_BGRADB = 512
};
enum cublasLtMatmulPreferenceAttributes_t {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8
};
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf, size_t bytes);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *buf,
                                                    size_t bytes);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                              cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *returned);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
                              const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes,
                              cudaStream_t stream);
