// cuda/mma.cuh: the warp-level tensor-core operation the attention kernels use,
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (sm_80 and later), and helpers that
// move bf16 pairs and load its operand fragments from shared memory.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"),
// with g = lane / 4 and t = lane % 4; each 32-bit register holds two bf16, the element with
// the lower column (A, C) or row (B) index in its low 16 bits:
//   A (16 x 16, row-major)  a[0]: row g,   cols 2t, 2t+1     a[1]: row g+8, cols 2t, 2t+1
//                           a[2]: row g,   cols 2t+8, 2t+9   a[3]: row g+8, cols 2t+8, 2t+9
//   B (16 x 8, col-major)   b[0]: rows 2t, 2t+1, col g       b[1]: rows 2t+8, 2t+9, col g
//   C, D (16 x 8, fp32)     c[0], c[1]: row g, cols 2t, 2t+1 c[2], c[3]: row g+8, same cols
// So a C fragment pair of two neighbouring 8-column tiles, rounded to bf16, is the A
// fragment of the same 16 x 16 block: scores computed by one mma feed the next as operand.
//
// Under the CPU emulator (dev/cuda/emu, which defines CUDA_EMU) the mma is a rendezvous of
// the 32 lanes that assembles the matrices from these layouts and computes D = A B + C in fp32.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>
#include <string.h>

// D = A B + C for one warp; every lane passes its fragments (all 32 lanes, converged).
__device__ inline void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
#if defined(CUDA_EMU)
    emu::mma_m16n8k16_bf16(d, a, b, c);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                   "f"(c[3]));
#endif
}

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 (sm_75 and later): four 8 x 8 bf16
// matrices from shared memory, transposed. Lane l gives the address of row l % 8 of matrix
// l / 8 (8 contiguous bf16, 16-byte aligned) and receives in r[i] two elements of matrix i:
// (row 2 (l % 4), column l / 4) in the low half and (row 2 (l % 4) + 1, column l / 4) in
// the high half (PTX ISA, "Warp-level matrix load instruction: ldmatrix"). That is the B
// fragment layout (b: rows k = 2t, 2t + 1, column n = g) of a matrix stored with k as its
// row index. Under the emulator, a rendezvous of the warp like the mma.
__device__ inline void mma_ldmatrix_x4_trans(uint32_t r[4], const __nv_bfloat16 *row) {
#if defined(CUDA_EMU)
    emu::ldmatrix_x4_trans(r, row);
#else
    unsigned addr = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#endif
}

// Loads and stores of raw bits through another type (pairs of bf16 as uint32_t, 8 bf16 as
// uint4). The emulator is compiled by g++ with strict aliasing, so it goes through memcpy.
template <typename T> __device__ inline T mma_ld(const void *p) {
#if defined(CUDA_EMU)
    T v;
    memcpy(&v, p, sizeof v);
    return v;
#else
    return *reinterpret_cast<const T *>(p);
#endif
}
template <typename T> __device__ inline void mma_st(void *p, T v) {
#if defined(CUDA_EMU)
    memcpy(p, &v, sizeof v);
#else
    *reinterpret_cast<T *>(p) = v;
#endif
}

// Two floats rounded to bf16 (nearest even) in one register, lo in the low half.
__device__ inline uint32_t pack_bf16x2(float lo, float hi) {
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16(lo)) | ((uint32_t)__bfloat16_as_ushort(__float2bfloat16(hi)) << 16);
}

// A fragment of rows r0..r0+15, columns k0..k0+15 of a row-major bf16 matrix (row stride ld
// elements, even; k0 even) in shared memory.
__device__ inline void mma_load_a(uint32_t a[4], const __nv_bfloat16 *s, int ld, int r0, int k0) {
    int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const __nv_bfloat16 *p = s + (size_t)(r0 + g) * ld + k0 + 2 * t;
    a[0] = mma_ld<uint32_t>(p);
    a[1] = mma_ld<uint32_t>(p + 8 * ld);
    a[2] = mma_ld<uint32_t>(p + 8);
    a[3] = mma_ld<uint32_t>(p + 8 * ld + 8);
}

// B fragment (k = k0..k0+15, n = n0..n0+7) of B = M^T, where M is a row-major bf16 matrix
// (row stride ld, even; k0 even) whose rows are the n index: B[k][n] = M[n0+n][k0+k].
__device__ inline void mma_load_b(uint32_t b[2], const __nv_bfloat16 *s, int ld, int n0, int k0) {
    int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const __nv_bfloat16 *p = s + (size_t)(n0 + g) * ld + k0 + 2 * t;
    b[0] = mma_ld<uint32_t>(p);
    b[1] = mma_ld<uint32_t>(p + 8);
}

// B fragments (k = k0..k0+15) of two neighbouring 8-column blocks n0..n0+7 (b[0], b[1]) and
// n0+8..n0+15 (b[2], b[3]) of a row-major bf16 matrix whose rows are the k index (row stride
// ld elements, a multiple of 8; n0 a multiple of 8), in shared memory: one ldmatrix.x4.trans
// of the matrices (k0.., n0), (k0+8.., n0), (k0.., n0+8), (k0+8.., n0+8).
__device__ inline void mma_load_b2_trans(uint32_t b[4], const __nv_bfloat16 *s, int ld, int k0, int n0) {
    int lane = threadIdx.x % 32, m = lane / 8;
    mma_ldmatrix_x4_trans(b, s + (size_t)(k0 + 8 * (m % 2) + lane % 8) * ld + n0 + 8 * (m / 2));
}
