// cuda/nf4.cuh: QLoRA's frozen 4-bit base on the GPU. The NF4 state of every quantized part
// of the layers' linear weights (model/hf_bnb4.h's Bnb4Base: codes, block absmax or their
// double quantization) lives on the device in one allocation; a layer's weight is
// dequantized by a kernel into one floatX scratch (bf16, or fp32 in the ENABLE_FP32 build)
// when a product needs it, in the forward and again in the backward, so no dense copy of
// the quantized weights is ever held.
//
// The arithmetic is model/nf4.h's (the CPU twin, nf4_dequantize_absmax + nf4_dequantize):
//   absmax = fp32(fp32(dynamic[q] * nested_absmax[b / nested_blocksize]) + offset)  (double quantization)
//   w = fp32(nf4[code] * absmax), then one rounding to floatX
// with __fmul_rn/__fadd_rn so that nvcc cannot contract the nested step into an FMA (one
// rounding instead of two: another absmax than bitsandbytes' dequantize_4bit). Checked bit
// for bit against the CPU twin by dev/cuda/nf4_dequant.cu.
//
// A part that a checkpoint holds in 16 bits (unsloth's keep some) is uploaded dense as
// floatX and copied into the scratch in its place.
#pragma once
#include "../model/hf_bnb4.h"
#include "common.cuh"

// NF4's 16 values and the signed dynamic map (model/nf4.h), passed by value to the kernel
struct Nf4Tables { float values[16]; float dynamic[256]; };

static Nf4Tables nf4_tables(void) {
    Nf4Tables t;
    memcpy(t.values, nf4_values, sizeof t.values);
    memcpy(t.dynamic, nf4_dynamic_map, sizeof t.dynamic);
    return t;
}

// One part of a layer's linear weight on the device: its NF4 state (absmax, or qabsmax
// with nested_absmax and offset), or dense (a part the checkpoint holds unquantized).
struct Nf4Part {
    const uint8_t *codes;         // (n + 1) / 2, element 2i in the high nibble of byte i
    const float *absmax;          // [nb], or null when double quantized:
    const uint8_t *qabsmax;       // [nb]
    const float *nested_absmax;   // [ceil(nb / nested_blocksize)]
    float offset;
    int64_t n;
    int blocksize, nested_blocksize;
    const floatX *dense;          // (n) the unquantized part, or null
};

// Thread i dequantizes byte i: elements 2i and 2i + 1 (the same block: blocksize is even).
__global__ void nf4_dequantize_kernel(floatX *out, const uint8_t *codes, const float *absmax, const uint8_t *qabsmax, const float *nested_absmax,
                                      float offset, int64_t n, int blocksize, int nested_blocksize, Nf4Tables t) {
    __shared__ float values[16], dynamic[256];
    for (int k = threadIdx.x; k < 256; k += blockDim.x) {
        dynamic[k] = t.dynamic[k];
        if (k < 16) values[k] = t.values[k];
    }
    __syncthreads();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, e = 2 * i;
    if (e >= n) return;
    int64_t b = e / blocksize;
    float a = absmax ? absmax[b] : __fadd_rn(__fmul_rn(dynamic[qabsmax[b]], nested_absmax[b / nested_blocksize]), offset);
    uint8_t c = codes[i];
    out[e] = from_float<floatX>(__fmul_rn(values[c >> 4], a));
    if (e + 1 < n) out[e + 1] = from_float<floatX>(__fmul_rn(values[c & 15], a));
}

// out (part->n floatX) = the part's weight
inline void nf4_dequantize_part(floatX *out, const Nf4Part *part, const Nf4Tables *t, cudaStream_t s) {
    if (part->dense) {
        CUDA_CHECK(cudaMemcpyAsync(out, part->dense, (size_t)part->n * sizeof(floatX), cudaMemcpyDeviceToDevice, s));
        return;
    }
    int64_t bytes = (part->n + 1) / 2;
    if (bytes == 0) return;
    nf4_dequantize_kernel<<<ceil_div((long)bytes, 256), 256, 0, s>>>(out, part->codes, part->absmax, part->qabsmax, part->nested_absmax, part->offset,
                                                                      part->n, part->blocksize, part->nested_blocksize, *t);
    LAUNCH_CHECK();
}

// ----------------------------------------------------------------------------
// The whole 4-bit base on the device.

struct Nf4Base {
    int L;
    Nf4Part *parts;      // host array [NUM_PARAM_TENSORS][L][3]: device pointers (codes null: no such part)
    unsigned char *mem;  // the one device allocation every part points into
    size_t bytes;        // its size
    floatX *scratch;     // the largest layer slice of a linear tensor, in floatX
    size_t scratch_n;
    Nf4Tables tables;
};

static size_t nf4_align(size_t b) { return (b + 255) / 256 * 256; }

// Device bytes of one part: quantized (n weights in blocks of blocksize, nested blocks of
// nested_blocksize; 0: absmax in fp32) or dense (floatX), each array 256-byte aligned.
static size_t nf4_part_device_bytes(int64_t n, int blocksize, int nested_blocksize, bool dense) {
    if (dense) return nf4_align((size_t)n * sizeof(floatX));
    size_t nb = (size_t)((n + blocksize - 1) / blocksize);
    if (!nested_blocksize) return nf4_align((size_t)(n + 1) / 2) + nf4_align(nb * 4);
    return nf4_align((size_t)(n + 1) / 2) + nf4_align(nb) + nf4_align((nb + nested_blocksize - 1) / nested_blocksize * 4);
}

// Elements of the dequantization scratch: the largest layer slice of a linear tensor.
static size_t nf4_scratch_numel(const ModelConfig *cfg) {
    size_t largest = 0;
    int64_t shape[2];
    for (int i = 0; i < NUM_PARAM_TENSORS; i++)
        if (bnb4_is_linear(i) && (size_t)param_slice_shape(cfg, i, shape) > largest) largest = (size_t)param_slice_shape(cfg, i, shape);
    return largest;
}

// Device bytes of base q's parts as nf4_base_upload places them (with the dense ones); q
// null: the base as --load_in_4bit would quantize cfg's linear weights (blocks of 64, nested
// 256), for the planner before any weight is read.
static size_t nf4_base_device_bytes(const Bnb4Base *q, const ModelConfig *cfg) {
    size_t total = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        if (!bnb4_is_linear(i)) continue;
        HfPart parts[3];
        int nparts = param_hf_parts(cfg, i, parts);
        int64_t shape[2];
        param_slice_shape(cfg, i, shape);
        for (int l = 0; l < cfg->L; l++)
            for (int k = 0; k < nparts; k++) {
                const Bnb4Weight *w = q ? bnb4_base_at(q, i, l, k) : NULL;
                int64_t n = parts[k].rows * shape[1];
                if (!q) total += nf4_part_device_bytes(n, NF4_BLOCK, NF4_NESTED_BLOCK, false);
                else total += nf4_part_device_bytes(n, w->blocksize, w->absmax ? 0 : w->nested_blocksize, !w->codes);
            }
    }
    return total;
}

// Copies base q (and the dense parts' fp32 values from the host parameters p, where the
// checkpoint holds them) to the device, and allocates the scratch.
static void nf4_base_upload(Nf4Base *d, const Bnb4Base *q, const ModelConfig *cfg, const ParamTensors *p) {
    d->L = cfg->L;
    d->bytes = nf4_base_device_bytes(q, cfg);
    CUDA_CHECK(cudaMalloc(&d->mem, d->bytes ? d->bytes : 1));
    d->parts = (Nf4Part *)xcalloc((size_t)NUM_PARAM_TENSORS * cfg->L * 3, sizeof(Nf4Part));
    d->scratch_n = nf4_scratch_numel(cfg);
    CUDA_CHECK(cudaMalloc(&d->scratch, (d->scratch_n ? d->scratch_n : 1) * sizeof(floatX)));
    d->tables = nf4_tables();
    size_t at = 0;
    auto put = [&](const void *src, size_t bytes) {  // the next aligned array of d->mem
        unsigned char *dst = d->mem + at;
        CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
        at += nf4_align(bytes);
        return (const void *)dst;
    };
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        if (!bnb4_is_linear(i)) continue;
        HfPart parts[3];
        int nparts = param_hf_parts(cfg, i, parts);
        int64_t shape[2];
        size_t numel = (size_t)param_slice_shape(cfg, i, shape);
        for (int l = 0; l < cfg->L; l++) {
            size_t off = (size_t)l * numel;
            for (int k = 0; k < nparts; k++) {
                const Bnb4Weight *w = bnb4_base_at(q, i, l, k);
                Nf4Part *dp = &d->parts[((size_t)i * cfg->L + l) * 3 + k];
                dp->n = parts[k].rows * shape[1];
                if (!w->codes) {  // held dense by the checkpoint: floatX, as the other frozen weights
                    floatX *tmp = (floatX *)xmalloc((size_t)dp->n * sizeof(floatX));
                    for (int64_t e = 0; e < dp->n; e++) tmp[e] = from_float<floatX>(p->t[i][off + (size_t)e]);
                    dp->dense = (const floatX *)put(tmp, (size_t)dp->n * sizeof(floatX));
                    free(tmp);
                } else {
                    int64_t nb = (w->n + w->blocksize - 1) / w->blocksize;
                    dp->blocksize = w->blocksize;
                    dp->codes = (const uint8_t *)put(w->codes, (size_t)(w->n + 1) / 2);
                    if (w->absmax) dp->absmax = (const float *)put(w->absmax, (size_t)nb * 4);
                    else {
                        dp->qabsmax = (const uint8_t *)put(w->qabsmax, (size_t)nb);
                        dp->nested_absmax = (const float *)put(w->nested_absmax, (size_t)((nb + w->nested_blocksize - 1) / w->nested_blocksize) * 4);
                        dp->nested_blocksize = w->nested_blocksize;
                        dp->offset = w->offset;
                    }
                }
                off += (size_t)dp->n;
            }
        }
    }
    if (at != d->bytes) fatal("nf4_base_upload: placed %zu bytes of the %zu counted", at, d->bytes);
}

// Layer l's weight of linear tensor i, dequantized part after part into the scratch
// (which it returns): valid until the next call.
static const floatX *nf4_layer_weight(Nf4Base *d, const ModelConfig *cfg, int i, int l, cudaStream_t s) {
    HfPart parts[3];
    int nparts = param_hf_parts(cfg, i, parts);
    size_t off = 0;
    for (int k = 0; k < nparts; k++) {
        const Nf4Part *p = &d->parts[((size_t)i * d->L + l) * 3 + k];
        nf4_dequantize_part(d->scratch + off, p, &d->tables, s);
        off += (size_t)p->n;
    }
    return d->scratch;
}

static void nf4_base_free(Nf4Base *d) {
    if (d->mem) CUDA_CHECK(cudaFree(d->mem));
    if (d->scratch) CUDA_CHECK(cudaFree(d->scratch));
    free(d->parts);
    memset(d, 0, sizeof *d);
}
