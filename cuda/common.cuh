// cuda/common.cuh: what every CUDA file of the GPU trainer shares: error checks,
// the storage type of weights and activations (floatX), conversions and warp sums.
//
// Precision is chosen when compiling: by default floatX is bf16 (weights,
// activations and gradients for the matrix work; fp32 master weights, AdamW
// moments and every reduction); -DENABLE_FP32 makes floatX float, so the GPU
// computes in fp32 and can be compared closely with the CPU trainer.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CUDA_CHECK(call)                                                                                   \
    do {                                                                                                   \
        cudaError_t err_ = (call);                                                                         \
        if (err_ != cudaSuccess) {                                                                         \
            fprintf(stderr, "error: CUDA: %s (%s:%d)\n", cudaGetErrorString(err_), __FILE__, __LINE__);    \
            exit(1);                                                                                       \
        }                                                                                                  \
    } while (0)

// After every kernel launch: the launch error, and with -DSYNC_LAUNCHES (the debug
// build of dev/gpu_check.sh --debug) a device sync, so that an error in the kernel
// is reported at the launch that caused it instead of at a later call.
#if defined(SYNC_LAUNCHES)
#define LAUNCH_CHECK()                               \
    do {                                             \
        CUDA_CHECK(cudaGetLastError());              \
        CUDA_CHECK(cudaDeviceSynchronize());         \
    } while (0)
#else
#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())
#endif

#if defined(ENABLE_FP32)
typedef float floatX;
#define PRECISION_NAME "fp32"
#else
typedef __nv_bfloat16 floatX;
#define PRECISION_NAME "bf16"
#endif

__host__ __device__ inline float to_float(float x) { return x; }
__host__ __device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __host__ __device__ inline T from_float(float x);
template <> __host__ __device__ inline float from_float<float>(float x) { return x; }
template <> __host__ __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }

__device__ inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ inline float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

inline int ceil_div(long a, long b) { return (int)((a + b - 1) / b); }
