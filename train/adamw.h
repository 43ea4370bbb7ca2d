// train/adamw.h: AdamW's update of one value and the clipping coefficient, the one copy of
// the formula that the CPU trainer (adamw_tensor), the GPU kernel (cuda/optimizer.cuh's
// adamw_kernel) and the GPU trainer's optimizer offloaded to the host (-O 1) all call, so
// that the three compute the same float operations in the same order.
//
// Bit for bit: each product is rounded before it is added (ADAMW_MUL). The CPU build never
// fuses a*b+c (the Makefile's -ffp-contract=off), the host half of nvcc's build and the CUDA
// emulator compile for x86-64 without FMA, and on the device nvcc would fuse by default
// (--fmad=true): __fmul_rn there forbids it. Division and sqrtf are IEEE-rounded on both
// (nvcc's defaults -prec-div=true -prec-sqrt=true), powf only sets the step's constants,
// which the host computes for the device too (adamw_constants).
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define ADAMW_HD __host__ __device__
#else
#define ADAMW_HD
#endif

#if defined(__CUDA_ARCH__)
#define ADAMW_MUL(a, b) __fmul_rn((a), (b))
#else
#define ADAMW_MUL(a, b) ((a) * (b))
#endif

// The constants of update t (counted from 1): bias corrections folded into the step size
// and the second moment's root, and the decoupled weight decay's factor.
typedef struct {
    float beta1, beta2, eps, step_size, decay, bc2_sqrt;
} AdamWStep;

static inline AdamWStep adamw_constants(float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t) {
    AdamWStep a;
    a.beta1 = beta1;
    a.beta2 = beta2;
    a.eps = eps;
    a.step_size = lr / (1.0f - powf(beta1, (float)t));
    a.bc2_sqrt = sqrtf(1.0f - powf(beta2, (float)t));
    a.decay = 1.0f - lr * weight_decay;
    return a;
}

// torch.optim.AdamW on one value p with gradient g (already scaled by the mean and the clip):
//   p *= 1 - lr wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// Returns the new p; m and v are updated in place.
ADAMW_HD static inline float adamw_one(float p, float g, float *m, float *v, const AdamWStep *a) {
    p = ADAMW_MUL(p, a->decay);
    *m = ADAMW_MUL(a->beta1, *m) + ADAMW_MUL(1.0f - a->beta1, g);
    *v = ADAMW_MUL(a->beta2, *v) + ADAMW_MUL(ADAMW_MUL(1.0f - a->beta2, g), g);
    return p - ADAMW_MUL(a->step_size, *m) / (sqrtf(*v) / a->bc2_sqrt + a->eps);
}

// The factor that clips a gradient of squared norm norm2 to max_norm: 1 when max_norm <= 0
// or the norm is below it (the GPU trainer's, on the device and, offloaded, on the host).
ADAMW_HD static inline float grad_clip_coef(float norm2, float max_norm) {
    float s = 1.0f;
    if (max_norm > 0.0f) {
        float coef = max_norm / (sqrtf(norm2) + 1e-6f);
        if (coef < 1.0f) s = coef;
    }
    return s;
}
