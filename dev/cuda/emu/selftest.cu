// dev/cuda/emu/selftest.cu: checks the emulator itself (barriers, shared memory, shuffles, ballot,
// __syncthreads_or) on a known kernel; mode 1 must abort (a warp op after a lane exited).
#include <cuda_runtime.h>
#include <stdio.h>
__global__ void k(int *out, int mode) {
    __shared__ int s[1024];
    extern __shared__ float dyn[];
    int t = threadIdx.x, lane = t % 32;
    s[t] = t;
    dyn[t] = (float)t;
    __syncthreads();
    int r = s[blockDim.x - 1 - t];                       // reads another thread's write
    int x = __shfl_xor_sync(0xffffffffu, t, 5);           // t ^ 5
    int d = __shfl_down_sync(0xffffffffu, t, 3);          // t+3 or t
    unsigned b = __ballot_sync(0xffffffffu, lane % 3 == 0);
    int any = __syncthreads_or(t == 77);
    int sum = t; for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    float dv = dyn[(t + 1) % blockDim.x];
    out[blockIdx.x * blockDim.x * 8 + t * 8 + 0] = r;
    out[blockIdx.x * blockDim.x * 8 + t * 8 + 1] = x;
    out[blockIdx.x * blockDim.x * 8 + t * 8 + 2] = d;
    out[blockIdx.x * blockDim.x * 8 + t * 8 + 3] = (int)b;
    out[blockIdx.x * blockDim.x * 8 + t * 8 + 4] = any;
    out[blockIdx.x * blockDim.x * 8 + t * 8 + 5] = sum;
    out[blockIdx.x * blockDim.x * 8 + t * 8 + 6] = (int)dv;
    out[blockIdx.x * blockDim.x * 8 + t * 8 + 7] = blockIdx.x;
    if (mode == 1 && t == 3) return;          // exits; the warp op below must be flagged
    if (mode >= 1) x = __shfl_xor_sync(0xffffffffu, x, 1);
    if (mode == 2 && lane < 16) __syncthreads();  // divergent barrier: deadlock
}
int main(int argc, char **argv) {
    int mode = argc > 1 ? atoi(argv[1]) : 0, nt = 1024, nb = 3, bad = 0;
    int *d; cudaMalloc(&d, nb * nt * 8 * sizeof(int));
    k<<<nb, nt, nt * sizeof(float)>>>(d, mode);
    int *h = (int *)malloc(nb * nt * 8 * sizeof(int));
    cudaMemcpy(h, d, nb * nt * 8 * sizeof(int), cudaMemcpyDeviceToHost);
    for (int b = 0; b < nb; b++) for (int t = 0; t < nt; t++) {
        int *o = h + (b * nt + t) * 8, lane = t % 32;
        unsigned eb = 0; for (int l = 0; l < 32; l++) if (l % 3 == 0) eb |= 1u << l;
        int wsum = 0; for (int l = 0; l < 32; l++) wsum += (t - lane) + l;
        int exp[8] = {nt - 1 - t, t ^ 5, lane + 3 < 32 ? t + 3 : t, (int)eb, 1, wsum, (t + 1) % nt, b};
        for (int i = 0; i < 8; i++) if (o[i] != exp[i]) { if (bad++ < 5) printf("b%d t%d field %d: %d vs %d\n", b, t, i, o[i], exp[i]); }
    }
    printf("selftest mode %d: %d mismatches\n", mode, bad);
    return bad != 0;
}
