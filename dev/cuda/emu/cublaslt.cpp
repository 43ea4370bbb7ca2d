// cublaslt.cpp: the emulated cuBLASLt (include/cublasLt.h): descriptors, a heuristic that
// returns one algorithm when the problem is supported, and cublasLtMatmul as a plain loop
// (column-major, fp32 accumulation in k order) with the epilogues the trainer uses.
// Semantics follow NVIDIA's cublasLt.h/cuBLASLt documentation:
//   D = alpha op(A) op(B) + beta C, then the epilogue on each element x of D (m x n):
//   BIAS: x + bias[i] (bias: m values, the rows of D); GELU_BIAS: gelu(x + bias[i]);
//   GELU_AUX_BIAS: the same, and aux(i, j) = x + bias[i] (the GELU input, D's type, leading
//   dimension AUX_LD: at least m and a multiple of 8); DGELU: x * gelu'(aux(i, j)) (aux: the
//   GELU input, read, same type and ld rules); BGRADA: bias[i] = sum over k of
//   op(A)(i, k) (m values); BGRADB: bias[j] = sum over k of op(B)(k, j) (n values). The
//   bias gradient is stored (overwritten), not accumulated. Bias and aux have D's type.
// GELU here is the tanh form (and DGELU its derivative), as the trainer's: the header and documentation say only
// "GELU", so which form the library computes is checked on a GPU by dev/cuda/matmul.cu.
// Environment (read at every call, so a test may change it between products):
//   EMU_LT_TANH=approx: the GELU epilogues take tanh with the largest error the hardware's
//     approximate tanh is documented to have (PTX tanh.approx.f32: about 2^-11 relative):
//     tanhf(u) * (1 +- 2^-11), the sign from a hash of u's bits, clamped to [-1, 1]; this is
//     what the tolerances of the fp32 GELU checks are sized for (dev/cuda/check.cuh).
//   EMU_LT_REFUSE=BIAS,DGELU,... (epilogue names without CUBLASLT_EPILOGUE_, or "all" for
//     every epilogue but DEFAULT): the heuristic finds no algorithm for those epilogues
//     (CUBLAS_STATUS_NOT_SUPPORTED, 0 results), as the real library may for some shapes and
//     types, so that the trainer's fallback (cuda/matmul.cuh) runs here.
// What real cuBLASLt checks and this one reproduces: ld >= rows, layouts that match the
// transposes, a missing bias/aux pointer, aux ld, types, and pointers less aligned than
// the alignment the algorithm was chosen for (MIN_ALIGNMENT_*_BYTES, default 256; bias
// and aux pointers are read by the heuristic for their alignment) -> an error status.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>
#include "include/cublasLt.h"
#include "include/cuda_bf16.h"

namespace emu {
bool in_device(const void *p, size_t n);
}

namespace {
const uint64_t ALGO_MAGIC = 0x4c74456d75416c67ull;
struct Desc {
    int compute, scale, transa, transb, transc, epilogue, bias_type, aux_type;
    void *bias, *aux;
    int64_t aux_ld;
};
struct Layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};
struct Pref {
    uint64_t max_workspace;
    uint32_t align[4];  // promised minimum alignment of A, B, C, D
};
struct Problem {
    int m, n, k;
    bool opa_t, opb_t;
};

size_t type_size(int t) { return t == CUDA_R_32F ? 4 : 2; }
uint32_t alignment_of(const void *p) {
    uintptr_t u = (uintptr_t)p;
    uint32_t a = 1;
    while (a < 256 && u % (2 * a) == 0) a *= 2;
    return a;
}
bool has_bias_in(int e) { return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
bool is_bgrad(int e) { return e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB; }
bool is_gelu(int e) { return e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
bool has_aux(int e) { return e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU; }

// EMU_LT_REFUSE lists this epilogue (or is "all" and the epilogue is not DEFAULT)
bool refused(int e) {
    static const struct { int e; const char *name; } names[] = {{CUBLASLT_EPILOGUE_BIAS, "BIAS"}, {CUBLASLT_EPILOGUE_GELU_BIAS, "GELU_BIAS"},
        {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, "GELU_AUX_BIAS"}, {CUBLASLT_EPILOGUE_DGELU, "DGELU"}, {CUBLASLT_EPILOGUE_BGRADA, "BGRADA"},
        {CUBLASLT_EPILOGUE_BGRADB, "BGRADB"}};
    const char *list = getenv("EMU_LT_REFUSE");
    if (!list || e == CUBLASLT_EPILOGUE_DEFAULT) return false;
    if (!strcmp(list, "all")) return true;
    for (const auto &n : names) {
        if (n.e != e) continue;
        size_t len = strlen(n.name);
        for (const char *p = list; (p = strstr(p, n.name)); p += len)
            if ((p == list || p[-1] == ',') && (p[len] == 0 || p[len] == ',')) return true;
    }
    return false;
}

cublasStatus_t reject(cublasStatus_t st, const char *why) {
    fprintf(stderr, "EMU cuBLASLt: %s\n", why);
    return st;
}

// the checks shared by the heuristic and the matmul; fills the problem's sizes
cublasStatus_t check_problem(const Desc *d, const Layout *A, const Layout *B, const Layout *C, const Layout *D, Problem *p) {
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F) return reject(CUBLAS_STATUS_NOT_SUPPORTED, "compute/scale type not 32F");
    for (int t : {d->transa, d->transb})
        if (t != CUBLAS_OP_N && t != CUBLAS_OP_T) return reject(CUBLAS_STATUS_NOT_SUPPORTED, "transpose other than N/T");
    if (d->transc != CUBLAS_OP_N) return reject(CUBLAS_STATUS_NOT_SUPPORTED, "TRANSC must be N");
    for (const Layout *l : {A, B, C, D})
        if (l->ld < (int64_t)std::max<uint64_t>(1, l->rows)) return reject(CUBLAS_STATUS_INVALID_VALUE, "leading dimension below the row count");
    p->opa_t = d->transa == CUBLAS_OP_T;
    p->opb_t = d->transb == CUBLAS_OP_T;
    p->m = (int)D->rows;
    p->n = (int)D->cols;
    p->k = (int)(p->opa_t ? A->rows : A->cols);
    if ((p->opa_t ? A->cols : A->rows) != D->rows || (p->opb_t ? B->rows : B->cols) != D->cols || (p->opb_t ? B->cols : B->rows) != (uint64_t)p->k)
        return reject(CUBLAS_STATUS_INVALID_VALUE, "layouts of A, B and D do not match the transposes");
    if (C->rows != D->rows || C->cols != D->cols || C->ld != D->ld || C->type != D->type)
        return reject(CUBLAS_STATUS_NOT_SUPPORTED, "C's layout differs from D's (only in-place C == D is emulated)");
    if (A->type != B->type || (A->type != CUDA_R_32F && A->type != CUDA_R_16BF) || (D->type != A->type && D->type != CUDA_R_32F))
        return reject(CUBLAS_STATUS_NOT_SUPPORTED, "type combination (A == B in {32F, 16BF}, D == A or 32F)");
    int e = d->epilogue;
    if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_DGELU && !has_bias_in(e) && !is_bgrad(e))
        return reject(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue not emulated");
    if (has_bias_in(e) || is_bgrad(e)) {
        if (!d->bias) return reject(CUBLAS_STATUS_INVALID_VALUE, "epilogue needs BIAS_POINTER");
        if (d->bias_type != -1 && d->bias_type != D->type) return reject(CUBLAS_STATUS_NOT_SUPPORTED, "bias type other than D's");
        if (alignment_of(d->bias) < type_size(D->type)) return reject(CUBLAS_STATUS_INVALID_VALUE, "bias pointer not aligned to its type");
    }
    if (has_aux(e)) {
        if (!d->aux) return reject(CUBLAS_STATUS_INVALID_VALUE, "GELU_AUX/DGELU needs EPILOGUE_AUX_POINTER");
        if (d->aux_ld < (int64_t)D->rows || d->aux_ld % 8 != 0) return reject(CUBLAS_STATUS_INVALID_VALUE, "AUX_LD below the row count or not a multiple of 8");
        if (d->aux_type != -1 && d->aux_type != D->type) return reject(CUBLAS_STATUS_NOT_SUPPORTED, "aux type other than D's");
        if (alignment_of(d->aux) < type_size(D->type)) return reject(CUBLAS_STATUS_INVALID_VALUE, "aux pointer not aligned to its type");
    }
    return CUBLAS_STATUS_SUCCESS;
}

float load(const void *p, cudaDataType_t t, size_t i) {
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}
void store(void *p, cudaDataType_t t, size_t i, float v) {
    if (t == CUDA_R_32F) ((float *)p)[i] = v;
    else ((__nv_bfloat16 *)p)[i] = __float2bfloat16(v);
}
// tanh as the epilogue computes it: tanhf, or with EMU_LT_TANH=approx off by the full 2^-11
// relative error of the hardware's approximation, in a direction that varies with u
float epilogue_tanh(float u) {
    float t = tanhf(u);
    const char *mode = getenv("EMU_LT_TANH");
    if (!mode || strcmp(mode, "approx")) return t;
    uint32_t h;
    memcpy(&h, &u, 4);
    h *= 0x9e3779b1u;
    t *= (h >> 31) ? 1.0f + 0x1p-11f : 1.0f - 0x1p-11f;
    return fminf(1.0f, fmaxf(-1.0f, t));
}
float gelu_tanh(float x) { return 0.5f * x * (1.0f + epilogue_tanh(0.7978845608028654f * (x + 0.044715f * x * x * x))); }
float dgelu_tanh(float x) {
    const float s = 0.7978845608028654f;
    float th = epilogue_tanh(s * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * s * (1.0f + 3.0f * 0.044715f * x * x);
}
size_t extent(const Layout *l) { return l->rows && l->cols ? ((size_t)(l->cols - 1) * l->ld + l->rows) * type_size(l->type) : 0; }
}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = (cublasLtHandle_t)malloc(1);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale) {
    Desc *x = new Desc{(int)compute, (int)scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, -1, -1, nullptr, nullptr, 0};
    *d = (cublasLtMatmulDesc_t)x;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete (Desc *)d;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t dd, cublasLtMatmulDescAttributes_t a, const void *buf, size_t bytes) {
    Desc *d = (Desc *)dd;
    auto i32 = [&](int *dst) {
        if (bytes != 4) return reject(CUBLAS_STATUS_INVALID_VALUE, "attribute size is not 4 bytes");
        memcpy(dst, buf, 4);
        return CUBLAS_STATUS_SUCCESS;
    };
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return i32(&d->transa);
    case CUBLASLT_MATMUL_DESC_TRANSB: return i32(&d->transb);
    case CUBLASLT_MATMUL_DESC_TRANSC: return i32(&d->transc);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return i32(&d->epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return i32(&d->bias_type);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return i32(&d->aux_type);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
        if (bytes != sizeof(void *)) return reject(CUBLAS_STATUS_INVALID_VALUE, "pointer attribute of the wrong size");
        memcpy(a == CUBLASLT_MATMUL_DESC_BIAS_POINTER ? &d->bias : &d->aux, buf, bytes);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
        if (bytes != 8) return reject(CUBLAS_STATUS_INVALID_VALUE, "AUX_LD is an int64_t");
        memcpy(&d->aux_ld, buf, 8);
        return CUBLAS_STATUS_SUCCESS;
    default: return reject(CUBLAS_STATUS_NOT_SUPPORTED, "matmul descriptor attribute not emulated");
    }
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
    *l = (cublasLtMatrixLayout_t) new Layout{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete (Layout *)l;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = (cublasLtMatmulPreference_t) new Pref{0, {256, 256, 256, 256}};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    delete (Pref *)p;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pp, cublasLtMatmulPreferenceAttributes_t a, const void *buf,
                                                    size_t bytes) {
    Pref *p = (Pref *)pp;
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
        if (bytes != 8) return reject(CUBLAS_STATUS_INVALID_VALUE, "MAX_WORKSPACE_BYTES is a uint64_t");
        memcpy(&p->max_workspace, buf, 8);
        return CUBLAS_STATUS_SUCCESS;
    }
    if (a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) {
        if (bytes != 4) return reject(CUBLAS_STATUS_INVALID_VALUE, "MIN_ALIGNMENT is a uint32_t");
        memcpy(&p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, 4);
        return CUBLAS_STATUS_SUCCESS;
    }
    return reject(CUBLAS_STATUS_NOT_SUPPORTED, "preference attribute not emulated");
}

// One algorithm (no workspace) when the problem is supported; it remembers the promised
// alignments of A, B, C, D and the alignment of the bias/aux pointers it was chosen for.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t dd, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                              cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t pp, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *returned) {
    *returned = 0;
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requested <= 0) return CUBLAS_STATUS_INVALID_VALUE;
    const Desc *d = (const Desc *)dd;
    const Pref *p = (const Pref *)pp;
    if (refused(d->epilogue)) return CUBLAS_STATUS_NOT_SUPPORTED;  // EMU_LT_REFUSE: no algorithm
    Problem pr;
    cublasStatus_t st = check_problem(d, (Layout *)A, (Layout *)B, (Layout *)C, (Layout *)D, &pr);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    const Layout *ls[4] = {(Layout *)A, (Layout *)B, (Layout *)C, (Layout *)D};
    for (int i = 0; i < 4; i++)
        if (p->align[i] < type_size(ls[i]->type)) return reject(CUBLAS_STATUS_NOT_SUPPORTED, "no algorithm for a matrix aligned below its element size");
    memset(&results[0], 0, sizeof results[0]);
    uint64_t *a = results[0].algo.data;
    a[0] = ALGO_MAGIC;
    for (int i = 0; i < 4; i++) a[1 + i] = p->align[i];
    a[5] = d->bias ? alignment_of(d->bias) : 0;
    a[6] = d->aux ? alignment_of(d->aux) : 0;
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t dd, const void *alpha, const void *Ap, cublasLtMatrixLayout_t Adesc,
                              const void *Bp, cublasLtMatrixLayout_t Bdesc, const void *beta, const void *Cp, cublasLtMatrixLayout_t Cdesc, void *Dp,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes, cudaStream_t stream) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    const Desc *d = (const Desc *)dd;
    const Layout *A = (Layout *)Adesc, *B = (Layout *)Bdesc, *C = (Layout *)Cdesc, *D = (Layout *)Ddesc;
    Problem pr;
    cublasStatus_t st = check_problem(d, A, B, C, D, &pr);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (!algo || algo->data[0] != ALGO_MAGIC) return reject(CUBLAS_STATUS_INVALID_VALUE, "algo is not one from cublasLtMatmulAlgoGetHeuristic");
    const void *ptrs[4] = {Ap, Bp, Cp, Dp};
    static const char *names[4] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; i++)
        if (alignment_of(ptrs[i]) < algo->data[1 + i]) {
            fprintf(stderr, "EMU cuBLASLt: %s is %u-byte aligned, the algorithm was chosen for %llu\n", names[i], alignment_of(ptrs[i]),
                    (unsigned long long)algo->data[1 + i]);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    if ((d->bias && alignment_of(d->bias) < algo->data[5]) || (d->aux && alignment_of(d->aux) < algo->data[6]))
        return reject(CUBLAS_STATUS_INVALID_VALUE, "bias/aux pointer less aligned than when the algorithm was chosen");
    int m = pr.m, n = pr.n, k = pr.k, e = d->epilogue;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    if (!emu::in_device(Ap, extent(A)) || !emu::in_device(Bp, extent(B)) || !emu::in_device(Dp, extent(D)) || (Cp != Dp && !emu::in_device(Cp, extent(C))))
        emu::fail("cublasLtMatmul: a matrix lies outside device memory");
    size_t es = type_size(D->type);
    size_t nbias = e == CUBLASLT_EPILOGUE_BGRADB ? n : m;
    if ((has_bias_in(e) || is_bgrad(e)) && !emu::in_device(d->bias, nbias * es)) emu::fail("cublasLtMatmul: bias outside device memory");
    if (has_aux(e) && !emu::in_device(d->aux, ((size_t)(n - 1) * d->aux_ld + m) * es))
        emu::fail("cublasLtMatmul: aux outside device memory");
    if (workspace_bytes && !emu::in_device(workspace, workspace_bytes)) emu::fail("cublasLtMatmul: workspace outside device memory");
    // the emulated library runs on the host, once the stream has reached the call; what it reads and writes:
    std::vector<emu::Access> acc;
    auto touch = [&](const void *p, size_t bytes, bool write) {
        if (bytes) acc.push_back({p, bytes, write});
    };
    touch(Ap, extent(A), false);
    touch(Bp, extent(B), false);
    touch(Cp, extent(C), false);
    touch(Dp, extent(D), true);
    if (has_bias_in(e) || is_bgrad(e)) touch(d->bias, nbias * es, is_bgrad(e));
    if (has_aux(e)) touch(d->aux, ((size_t)(n - 1) * d->aux_ld + m) * es, e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
    emu::host_op(stream, "cublasLtMatmul", acc);
    float al = *(const float *)alpha, be = *(const float *)beta;
    // op(A) as m rows of k, op(B)^T as n rows of k, contiguous float
    std::vector<float> a((size_t)m * k), b((size_t)n * k);
    for (int i = 0; i < m; i++)
        for (int l = 0; l < k; l++) a[(size_t)i * k + l] = load(Ap, A->type, pr.opa_t ? l + (size_t)i * A->ld : i + (size_t)l * A->ld);
    for (int j = 0; j < n; j++)
        for (int l = 0; l < k; l++) b[(size_t)j * k + l] = load(Bp, B->type, pr.opb_t ? j + (size_t)l * B->ld : l + (size_t)j * B->ld);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            const float *x = &a[(size_t)i * k], *y = &b[(size_t)j * k];
            float s = 0.0f;
            for (int l = 0; l < k; l++) s += x[l] * y[l];
            size_t ci = i + (size_t)j * D->ld;
            float r = al * s;
            if (be != 0.0f) r += be * load(Cp, C->type, ci);  // beta == 0: C is not read
            if (has_bias_in(e)) r += load(d->bias, D->type, i);
            if (e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) store(d->aux, D->type, i + (size_t)j * d->aux_ld, r);
            if (e == CUBLASLT_EPILOGUE_DGELU) r *= dgelu_tanh(load(d->aux, D->type, i + (size_t)j * d->aux_ld));
            store(Dp, D->type, ci, is_gelu(e) ? gelu_tanh(r) : r);
        }
    if (e == CUBLASLT_EPILOGUE_BGRADA)
        for (int i = 0; i < m; i++) {
            float s = 0.0f;
            for (int l = 0; l < k; l++) s += a[(size_t)i * k + l];
            store(d->bias, D->type, i, s);
        }
    if (e == CUBLASLT_EPILOGUE_BGRADB)
        for (int j = 0; j < n; j++) {
            float s = 0.0f;
            for (int l = 0; l < k; l++) s += b[(size_t)j * k + l];
            store(d->bias, D->type, j, s);
        }
    return CUBLAS_STATUS_SUCCESS;
}
