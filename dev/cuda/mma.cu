// dev/cuda/mma.cu: checks the tensor-core operation of cuda/mma.cuh (mma.sync m16n8k16
// bf16 -> fp32) against a plain matrix product on the host.
//
//   make mma && ./mma
//
// A (16 x 16), B (16 x 8) and C (16 x 8) hold a different value in every element, so a
// transposed, swapped or shifted fragment changes the result. The values are small integers
// (and quarters in C): every product and partial sum is exact in fp32, so D must equal the
// host's product exactly in any summation order, on the GPU and under the emulator.
// Checked twice: with the fragments gathered element by element from the PTX ISA layout
// (written out here, independently of cuda/mma.cuh), and with mma_load_a / mma_load_b
// from shared memory as the attention kernels use them; and B fragments of two 8-column
// blocks with mma_load_b2_trans (ldmatrix.x4.trans) from a row-major B (rows k). On a GPU
// this also checks the emulator's layouts against the hardware.
#include "check.cuh"
#include "../../cuda/mma.cuh"

#define LDS 24  // row stride of the shared copies (as in the kernels: padded, even)

// d_spec, d_help, d_trans: (16, 8) row-major results; d_trans2 = A b2 + C; a (16, 16),
// b and b2 (16, 8), c (16, 8) row-major.
__global__ void mma_check_kernel(float *d_spec, float *d_help, float *d_trans, float *d_trans2, const float *a, const float *b,
                                 const float *b2, const float *c) {
    __shared__ __nv_bfloat16 As[16 * LDS], Bt[8 * LDS];  // A row-major; B transposed: Bt[n][k]
    __shared__ uint4 Bs_raw[16 * LDS / 8];               // [b | b2] row-major (k rows), 16-byte aligned for ldmatrix
    __nv_bfloat16 *Bs = (__nv_bfloat16 *)Bs_raw;
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    for (int i = lane; i < 256; i += 32) As[(i / 16) * LDS + i % 16] = __float2bfloat16(a[i]);
    for (int i = lane; i < 128; i += 32) Bt[(i % 8) * LDS + i / 8] = __float2bfloat16(b[i]);
    for (int i = lane; i < 128; i += 32) {
        Bs[(i / 8) * LDS + i % 8] = __float2bfloat16(b[i]);
        Bs[(i / 8) * LDS + 8 + i % 8] = __float2bfloat16(b2[i]);
    }
    __syncwarp();
    // the layouts of the PTX ISA, element by element
    uint32_t fa[4], fb[2];
    float fc[4], fd[4];
    for (int r = 0; r < 4; r++) {
        int row = g + 8 * (r % 2), col = 2 * t + 8 * (r / 2);
        fa[r] = pack_bf16x2(a[row * 16 + col], a[row * 16 + col + 1]);
    }
    for (int r = 0; r < 2; r++) {
        int k = 2 * t + 8 * r;
        fb[r] = pack_bf16x2(b[k * 8 + g], b[(k + 1) * 8 + g]);
    }
    for (int i = 0; i < 4; i++) fc[i] = c[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
    mma_m16n8k16_bf16(fd, fa, fb, fc);
    for (int i = 0; i < 4; i++) d_spec[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = fd[i];
    // the kernels' loaders
    mma_load_a(fa, As, LDS, 0, 0);
    mma_load_b(fb, Bt, LDS, 0, 0);
    mma_m16n8k16_bf16(fd, fa, fb, fc);
    for (int i = 0; i < 4; i++) d_help[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = fd[i];
    // ldmatrix.trans from the row-major copy: b[0..1] for b, b[2..3] for b2
    uint32_t fb4[4];
    mma_load_b2_trans(fb4, Bs, LDS, 0, 0);
    mma_m16n8k16_bf16(fd, fa, fb4, fc);
    for (int i = 0; i < 4; i++) d_trans[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = fd[i];
    mma_m16n8k16_bf16(fd, fa, fb4 + 2, fc);
    for (int i = 0; i < 4; i++) d_trans2[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = fd[i];
}

int main() {
    if (!have_cuda_device("mma")) return 0;
    std::vector<float> a(256), b(128), b2(128), c(128), want(128), want2(128);
    for (int i = 0; i < 256; i++) a[i] = (float)(((i * 37) % 256) - 128);  // a permutation of -128..127
    for (int i = 0; i < 128; i++) b[i] = (float)(((i * 53) % 128) - 64);   // a permutation of -64..63
    for (int i = 0; i < 128; i++) b2[i] = (float)(((i * 19) % 128) - 60);  // another, shifted
    for (int i = 0; i < 128; i++) c[i] = 0.25f * (float)((i * 29) % 128) - 7.0f;
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            double s = c[m * 8 + n];
            double s2 = s;
            for (int k = 0; k < 16; k++) s += (double)a[m * 16 + k] * b[k * 8 + n];
            for (int k = 0; k < 16; k++) s2 += (double)a[m * 16 + k] * b2[k * 8 + n];
            want[m * 8 + n] = (float)s;
            want2[m * 8 + n] = (float)s2;
        }
    float *da = dev_copy(a), *db = dev_copy(b), *db2 = dev_copy(b2), *dc = dev_copy(c);
    float *dspec = dev_alloc<float>(128), *dhelp = dev_alloc<float>(128), *dtrans = dev_alloc<float>(128), *dtrans2 = dev_alloc<float>(128);
    poison(dspec, 128 * sizeof(float));
    poison(dhelp, 128 * sizeof(float));
    poison(dtrans, 128 * sizeof(float));
    poison(dtrans2, 128 * sizeof(float));
    mma_check_kernel<<<1, 32>>>(dspec, dhelp, dtrans, dtrans2, da, db, db2, dc);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    // exact: tolerance 0
    check("mma m16n8k16 bf16, fragments from the PTX layout", download(dspec, 128), want, 0.0f);
    check("mma m16n8k16 bf16, fragments from mma_load_a/mma_load_b", download(dhelp, 128), want, 0.0f);
    check("mma m16n8k16 bf16, B fragments from mma_load_b2_trans (ldmatrix.trans), first block", download(dtrans, 128), want, 0.0f);
    check("mma m16n8k16 bf16, B fragments from mma_load_b2_trans (ldmatrix.trans), second block", download(dtrans2, 128), want2, 0.0f);
    cudaFree(da);
    cudaFree(db);
    cudaFree(db2);
    cudaFree(dtrans);
    cudaFree(dtrans2);
    cudaFree(dc);
    cudaFree(dspec);
    cudaFree(dhelp);
    return g_failures != 0;
}
