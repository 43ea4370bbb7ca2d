// nf4.h: bitsandbytes' 4-bit NormalFloat format (NF4, Dettmers et al. 2023, QLoRA) as
// its CUDA kernels compute it, the kernels that made the published "-bnb-4bit"
// checkpoints: quantizing a weight to NF4 codes with block absmax, the double
// quantization of those absmax values to 8 bits, and dequantizing both back to fp32.
//
// It is not the file format (which tensors and JSON a checkpoint holds: model/hf.h's
// readers), not the GPU dequantization kernel, and not bitsandbytes' other formats (FP4,
// stochastic rounding, 8-bit optimizers).
//
// The arithmetic, each step rounded to fp32 as kQuantizeBlockwise and dQuantizeNF4
// (csrc/kernels.cu) do it, checked bit for bit against dev/ref_nf4.py by tests/model/test_nf4.c:
//   - blocks of NF4_BLOCK (64) along the flattened row-major weight, the last one short;
//     absmax = max |x| of the block;
//   - scale = fp32(1/absmax), correctly rounded. Under bitsandbytes' --use_fast_math the
//     kernel's reciprocal is rcp.approx, which may be 1 ulp off for some absmax; that can
//     move a code only where x * scale lands within an ulp or two of a threshold, and is
//     to be measured on a GPU against bitsandbytes itself;
//   - --use_fast_math also flushes subnormals: a subnormal weight counts as 0, a scale
//     under 2^-126 (absmax over 2^126) as 0; an all-zero block has scale inf, 0 * inf is
//     NaN, and a NaN is above no threshold: every code of such a block is 0 (-1 * 0);
//   - code = how many of the 15 thresholds (midpoints of adjacent NF4 values, rounded to
//     fp32: the kernel's float literals) y = fp32(x * scale) is above; element 2i goes to
//     the high nibble of byte i, 2i+1 to the low one, an odd count pads a 0;
//   - double quantization: offset = the mean of the absmax values (a compensated double
//     sum divided in double, then rounded to fp32: the exact mean rounded once, as the
//     reference has it, but for a double-rounding tie; torch's fp32 mean, which
//     bitsandbytes calls, may differ in its last bits, so a checkpoint's own offset is
//     read, never recomputed),
//     then absmax - offset in blocks of NF4_NESTED_BLOCK (256) quantized like the 4-bit
//     codes but to the nearest value of the signed 8-bit dynamic map, a tie at a midpoint
//     fp32(fp32(a + b) * 0.5) going to the even index (the kernel's binary search lands on
//     an even index and keeps it at a tie);
//   - dequantization: absmax = fp32(fp32(dynamic[q] * nested_absmax) + offset), then
//     w = fp32(nf4[code] * absmax).
#pragma once
#include <float.h>
#include <math.h>
#include <stdint.h>

#define NF4_BLOCK 64
#define NF4_NESTED_BLOCK 256

// create_normal_map(0.9677083, use_extra_value=True)'s 16 values and create_dynamic_map()'s
// 256, as fp32 (printed by dev/ref_nf4.py --c-table from their formulas; test_nf4 checks
// them against the reference and bitsandbytes' checkpoints carry them as quant_map and
// nested_quant_map).
static const float nf4_values[16] = {
    -0x1.0p+0, -0x1.647362p-1, -0x1.0cd66p-1, -0x1.94654p-2,
    -0x1.23449ap-2, -0x1.7a6a7ep-3, -0x1.74f0e2p-4, 0x0.0p+0,
    0x1.45f5fep-4, 0x1.4995c6p-3, 0x1.f809bap-3, 0x1.5a0674p-2,
    0x1.c3497p-2, 0x1.200f56p-1, 0x1.722766p-1, 0x1.0p+0,
};

static const float nf4_dynamic_map[256] = {
    -0x1.fc6666p-1, -0x1.f53334p-1, -0x1.eep-1, -0x1.e6ccccp-1,
    -0x1.df999ap-1, -0x1.d86666p-1, -0x1.d13334p-1, -0x1.cap-1,
    -0x1.c2ccccp-1, -0x1.bb999ap-1, -0x1.b46666p-1, -0x1.ad3334p-1,
    -0x1.a6p-1, -0x1.9eccccp-1, -0x1.97999ap-1, -0x1.906666p-1,
    -0x1.893334p-1, -0x1.82p-1, -0x1.7accccp-1, -0x1.73999ap-1,
    -0x1.6c6668p-1, -0x1.653334p-1, -0x1.5ep-1, -0x1.56ccccp-1,
    -0x1.4f999ap-1, -0x1.486668p-1, -0x1.413334p-1, -0x1.3ap-1,
    -0x1.32ccccp-1, -0x1.2b999ap-1, -0x1.246668p-1, -0x1.1d3334p-1,
    -0x1.16p-1, -0x1.0eccccp-1, -0x1.079998p-1, -0x1.006666p-1,
    -0x1.f26664p-2, -0x1.e4p-2, -0x1.d59998p-2, -0x1.c73334p-2,
    -0x1.b8ccccp-2, -0x1.aa6666p-2, -0x1.9cp-2, -0x1.8d9998p-2,
    -0x1.7f3334p-2, -0x1.70ccccp-2, -0x1.626666p-2, -0x1.54p-2,
    -0x1.459998p-2, -0x1.373334p-2, -0x1.28ccccp-2, -0x1.1a6668p-2,
    -0x1.0cp-2, -0x1.fb3332p-3, -0x1.de6666p-3, -0x1.c1999ap-3,
    -0x1.a4ccccp-3, -0x1.88p-3, -0x1.6b3334p-3, -0x1.4e6666p-3,
    -0x1.31999ap-3, -0x1.14ccccp-3, -0x1.fp-4, -0x1.b66668p-4,
    -0x1.93d70ap-4, -0x1.8851eep-4, -0x1.7ccccep-4, -0x1.7147aep-4,
    -0x1.65c29p-4, -0x1.5a3d7p-4, -0x1.4eb854p-4, -0x1.433334p-4,
    -0x1.37ae14p-4, -0x1.2c28f6p-4, -0x1.20a3d6p-4, -0x1.151ebap-4,
    -0x1.09999ap-4, -0x1.fc28f6p-5, -0x1.e51ebap-5, -0x1.ce147ap-5,
    -0x1.b70a3ep-5, -0x1.ap-5, -0x1.88f5c2p-5, -0x1.71eb86p-5,
    -0x1.5ae146p-5, -0x1.43d70ap-5, -0x1.2ccccep-5, -0x1.15c29p-5,
    -0x1.fd70a4p-6, -0x1.cf5c2ap-6, -0x1.a147aep-6, -0x1.733334p-6,
    -0x1.451ebap-6, -0x1.170a3ep-6, -0x1.d1eb86p-7, -0x1.75c29p-7,
    -0x1.3e76c8p-7, -0x1.2c083p-7, -0x1.19999ap-7, -0x1.072b02p-7,
    -0x1.e978d4p-8, -0x1.c49ba6p-8, -0x1.9fbe76p-8, -0x1.7ae148p-8,
    -0x1.56041ap-8, -0x1.3126e8p-8, -0x1.0c49bap-8, -0x1.ced914p-9,
    -0x1.851eb8p-9, -0x1.3b645ap-9, -0x1.e353f8p-10, -0x1.4fdf3ap-10,
    -0x1.eecbfep-11, -0x1.b3d07cp-11, -0x1.78d5p-11, -0x1.3dd982p-11,
    -0x1.02de02p-11, -0x1.8fc506p-12, -0x1.19ce0ap-12, -0x1.47ae16p-13,
    -0x1.743e96p-14, -0x1.15df66p-14, -0x1.6f0068p-15, -0x1.64840cp-16,
    -0x1.040bfep-17, -0x1.b43528p-19, -0x1.27476ep-21, 0x0.0p+0,
    0x1.27476ep-21, 0x1.b43528p-19, 0x1.040bfep-17, 0x1.64840cp-16,
    0x1.6f0068p-15, 0x1.15df66p-14, 0x1.743e96p-14, 0x1.47ae16p-13,
    0x1.19ce0ap-12, 0x1.8fc506p-12, 0x1.02de02p-11, 0x1.3dd982p-11,
    0x1.78d5p-11, 0x1.b3d07cp-11, 0x1.eecbfep-11, 0x1.4fdf3ap-10,
    0x1.e353f8p-10, 0x1.3b645ap-9, 0x1.851eb8p-9, 0x1.ced914p-9,
    0x1.0c49bap-8, 0x1.3126e8p-8, 0x1.56041ap-8, 0x1.7ae148p-8,
    0x1.9fbe76p-8, 0x1.c49ba6p-8, 0x1.e978d4p-8, 0x1.072b02p-7,
    0x1.19999ap-7, 0x1.2c083p-7, 0x1.3e76c8p-7, 0x1.75c29p-7,
    0x1.d1eb86p-7, 0x1.170a3ep-6, 0x1.451ebap-6, 0x1.733334p-6,
    0x1.a147aep-6, 0x1.cf5c2ap-6, 0x1.fd70a4p-6, 0x1.15c29p-5,
    0x1.2ccccep-5, 0x1.43d70ap-5, 0x1.5ae146p-5, 0x1.71eb86p-5,
    0x1.88f5c2p-5, 0x1.ap-5, 0x1.b70a3ep-5, 0x1.ce147ap-5,
    0x1.e51ebap-5, 0x1.fc28f6p-5, 0x1.09999ap-4, 0x1.151ebap-4,
    0x1.20a3d6p-4, 0x1.2c28f6p-4, 0x1.37ae14p-4, 0x1.433334p-4,
    0x1.4eb854p-4, 0x1.5a3d7p-4, 0x1.65c29p-4, 0x1.7147aep-4,
    0x1.7ccccep-4, 0x1.8851eep-4, 0x1.93d70ap-4, 0x1.b66668p-4,
    0x1.fp-4, 0x1.14ccccp-3, 0x1.31999ap-3, 0x1.4e6666p-3,
    0x1.6b3334p-3, 0x1.88p-3, 0x1.a4ccccp-3, 0x1.c1999ap-3,
    0x1.de6666p-3, 0x1.fb3332p-3, 0x1.0cp-2, 0x1.1a6668p-2,
    0x1.28ccccp-2, 0x1.373334p-2, 0x1.459998p-2, 0x1.54p-2,
    0x1.626666p-2, 0x1.70ccccp-2, 0x1.7f3334p-2, 0x1.8d9998p-2,
    0x1.9cp-2, 0x1.aa6666p-2, 0x1.b8ccccp-2, 0x1.c73334p-2,
    0x1.d59998p-2, 0x1.e4p-2, 0x1.f26664p-2, 0x1.006666p-1,
    0x1.079998p-1, 0x1.0eccccp-1, 0x1.16p-1, 0x1.1d3334p-1,
    0x1.246668p-1, 0x1.2b999ap-1, 0x1.32ccccp-1, 0x1.3ap-1,
    0x1.413334p-1, 0x1.486668p-1, 0x1.4f999ap-1, 0x1.56ccccp-1,
    0x1.5ep-1, 0x1.653334p-1, 0x1.6c6668p-1, 0x1.73999ap-1,
    0x1.7accccp-1, 0x1.82p-1, 0x1.893334p-1, 0x1.906666p-1,
    0x1.97999ap-1, 0x1.9eccccp-1, 0x1.a6p-1, 0x1.ad3334p-1,
    0x1.b46666p-1, 0x1.bb999ap-1, 0x1.c2ccccp-1, 0x1.cap-1,
    0x1.d13334p-1, 0x1.d86666p-1, 0x1.df999ap-1, 0x1.e6ccccp-1,
    0x1.eep-1, 0x1.f53334p-1, 0x1.fc6666p-1, 0x1.0p+0,
};

static inline float nf4_flush(float x) { return fabsf(x) < FLT_MIN ? 0.0f : x; }

// The 15 thresholds: midpoints of adjacent values (exact in double), rounded to fp32.
static inline void nf4_thresholds(float thr[15]) {
    for (int k = 0; k < 15; k++) thr[k] = (float)(((double)nf4_values[k] + (double)nf4_values[k + 1]) * 0.5);
}

// The number of thresholds y is above, by bisection (a NaN is above none).
static inline int nf4_code_of(float y, const float thr[15]) {
    int c = 0;
    for (int step = 8; step >= 1; step /= 2)
        if (y > thr[c + step - 1]) c += step;
    return c;
}

// A block's scale as the kernel has it: inf for a zero absmax, 0 where it would be subnormal.
static inline float nf4_block_scale(float absmax) { return absmax == 0.0f ? INFINITY : nf4_flush(1.0f / absmax); }

static inline float nf4_block_absmax(const float *x, int64_t len) {
    float a = 0.0f;
    for (int64_t i = 0; i < len; i++) a = fmaxf(a, fabsf(nf4_flush(x[i])));
    return a;
}

// w[n] (fp32; a bf16 weight widened) to codes[(n + 1) / 2] and absmax[ceil(n / blocksize)].
// blocksize is bitsandbytes' (64 for every published checkpoint); even, as the packing needs.
static void nf4_quantize(const float *w, int64_t n, int blocksize, uint8_t *codes, float *absmax) {
    float thr[15];
    nf4_thresholds(thr);
    for (int64_t b0 = 0; b0 < n; b0 += blocksize) {
        int64_t len = n - b0 < blocksize ? n - b0 : blocksize;
        float a = nf4_block_absmax(w + b0, len), s = nf4_block_scale(a);
        absmax[b0 / blocksize] = a;
        for (int64_t i = 0; i < len + (len & 1); i += 2) {
            float y0 = nf4_flush(w[b0 + i]) * s;
            float y1 = (i + 1 < len ? nf4_flush(w[b0 + i + 1]) : 0.0f) * s;  // the odd count's pad
            codes[(b0 + i) / 2] = (uint8_t)(nf4_code_of(y0, thr) << 4 | nf4_code_of(y1, thr));
        }
    }
}

// The index of the dynamic map's value nearest y (ties to the even index; NaN: 0), by the
// kernel's bisection: 7 halvings from index 127 land on an even index p with
// map[p-1] < y <= map[p+1]; then y goes to the neighbour past the midpoint.
static inline int nf4_dynamic_index(float y) {
    int p = 127;
    for (int step = 64; step >= 1; step /= 2) p += y > nf4_dynamic_map[p] ? step : -step;
    if (y > nf4_dynamic_map[p]) {
        int q = p + 1;
        return y > (nf4_dynamic_map[q] + nf4_dynamic_map[p]) * 0.5f ? q : p;
    }
    if (p == 0) return 0;
    return y < (nf4_dynamic_map[p - 1] + nf4_dynamic_map[p]) * 0.5f ? p - 1 : p;
}

// quantize_blockwise with the dynamic map: x[n] to q[n] and absmax[ceil(n / blocksize)].
static void nf4_quantize_dynamic(const float *x, int64_t n, int blocksize, uint8_t *q, float *absmax) {
    for (int64_t b0 = 0; b0 < n; b0 += blocksize) {
        int64_t len = n - b0 < blocksize ? n - b0 : blocksize;
        float a = nf4_block_absmax(x + b0, len), s = nf4_block_scale(a);
        absmax[b0 / blocksize] = a;
        for (int64_t i = 0; i < len; i++) q[b0 + i] = (uint8_t)nf4_dynamic_index(nf4_flush(x[b0 + i]) * s);
    }
}

// Double quantization of absmax[nb]: qabsmax[nb], nested_absmax[ceil(nb / 256)], the
// offset. centred[nb] is scratch.
static float nf4_double_quantize(const float *absmax, int64_t nb, float *centred, uint8_t *qabsmax, float *nested_absmax) {
    if (nb <= 0) return 0.0f;
    double sum = 0.0, comp = 0.0;  // Neumaier's compensated sum
    for (int64_t i = 0; i < nb; i++) {
        double t = sum + absmax[i];
        comp += fabs(sum) >= fabs((double)absmax[i]) ? (sum - t) + absmax[i] : ((double)absmax[i] - t) + sum;
        sum = t;
    }
    float offset = (float)((sum + comp) / (double)nb);
    for (int64_t i = 0; i < nb; i++) centred[i] = absmax[i] - offset;
    nf4_quantize_dynamic(centred, nb, NF4_NESTED_BLOCK, qabsmax, nested_absmax);
    return offset;
}

// The absmax values back from their double quantization (nested_blocksize from the checkpoint).
static void nf4_dequantize_absmax(const uint8_t *qabsmax, const float *nested_absmax, float offset, int64_t nb, int nested_blocksize, float *absmax) {
    for (int64_t i = 0; i < nb; i++) {
        float v = nf4_dynamic_map[qabsmax[i]] * nested_absmax[i / nested_blocksize];
        absmax[i] = v + offset;
    }
}

// codes[(n + 1) / 2] and absmax[ceil(n / blocksize)] back to w[n] in fp32 (blocksize
// even, as bitsandbytes' are: a block starts on a byte), a byte's two codes at a time.
static void nf4_dequantize(const uint8_t *codes, const float *absmax, int64_t n, int blocksize, float *w) {
    for (int64_t b0 = 0; b0 < n; b0 += blocksize) {
        int64_t len = n - b0 < blocksize ? n - b0 : blocksize;
        float a = absmax[b0 / blocksize];
        const uint8_t *c = codes + b0 / 2;
        float *o = w + b0;
        for (int64_t i = 0; i + 1 < len; i += 2) {
            o[i] = nf4_values[c[i / 2] >> 4] * a;
            o[i + 1] = nf4_values[c[i / 2] & 15] * a;
        }
        if (len & 1) o[len - 1] = nf4_values[c[len / 2] >> 4] * a;
    }
}
