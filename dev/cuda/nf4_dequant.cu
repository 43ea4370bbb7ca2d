// dev/cuda/nf4_dequant.cu: checks and timings of cuda/nf4.cuh's dequantization kernel (QLoRA's
// 4-bit base) against its CPU twin, model/nf4.h's nf4_dequantize_absmax + nf4_dequantize (what the
// CPU trainer runs), rounded once to floatX: bit for bit, on weights quantized by model/nf4.h as
// bitsandbytes' CUDA kernels would (random values, an all-zero block, a short last block, an odd
// count), with double quantization (the nested absmax: code x nested_absmax + offset) and without
// (fp32 absmax), at blocksizes 64 and 128 and nested blocksizes 256 and 64; and a dense part
// (a checkpoint's 16-bit one) copied in place. One version (a thread per byte of codes).
// Build: make -C dev/cuda nf4_dequant [PRECISION=FP32]
#include "../../cuda/common.cuh"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // model/'s static helpers
#include "../../cuda/nf4.cuh"
#pragma GCC diagnostic pop

#include "check.cuh"

// A weight of n values quantized on the CPU (model/nf4.h), its state on the device as an Nf4Part.
struct QuantizedWeight {
    std::vector<uint8_t> codes, qabsmax;
    std::vector<float> absmax, nested;
    float offset = 0.0f;
    Nf4Part part;
};

static void quantize(QuantizedWeight *q, const std::vector<float> &w, int blocksize, int nested_blocksize) {
    int64_t n = (int64_t)w.size(), nb = (n + blocksize - 1) / blocksize;
    q->codes.resize((size_t)(n + 1) / 2);
    q->absmax.resize((size_t)nb);
    nf4_quantize(w.data(), n, blocksize, q->codes.data(), q->absmax.data());
    memset(&q->part, 0, sizeof q->part);
    q->part.n = n;
    q->part.blocksize = blocksize;
    q->part.codes = dev_copy(q->codes);
    if (!nested_blocksize) {
        q->part.absmax = dev_copy(q->absmax);
        return;
    }
    // the double quantization of model/nf4.h at the nested blocksize asked for
    std::vector<float> centred((size_t)nb);
    double sum = 0.0;
    for (float a : q->absmax) sum += a;
    q->offset = (float)(sum / (double)nb);
    for (int64_t i = 0; i < nb; i++) centred[(size_t)i] = q->absmax[(size_t)i] - q->offset;
    q->qabsmax.resize((size_t)nb);
    q->nested.resize((size_t)((nb + nested_blocksize - 1) / nested_blocksize));
    nf4_quantize_dynamic(centred.data(), nb, nested_blocksize, q->qabsmax.data(), q->nested.data());
    q->part.qabsmax = dev_copy(q->qabsmax);
    q->part.nested_absmax = dev_copy(q->nested);
    q->part.nested_blocksize = nested_blocksize;
    q->part.offset = q->offset;
}

// The CPU twin: fp32 weights, then floatX's rounding
static std::vector<float> cpu_dequantize(const QuantizedWeight *q) {
    int64_t n = q->part.n, nb = (n + q->part.blocksize - 1) / q->part.blocksize;
    std::vector<float> absmax = q->absmax, w((size_t)n);
    if (q->part.nested_absmax) nf4_dequantize_absmax(q->qabsmax.data(), q->nested.data(), q->offset, nb, q->part.nested_blocksize, absmax.data());
    nf4_dequantize(q->codes.data(), absmax.data(), n, q->part.blocksize, w.data());
    for (float &x : w) x = round_x(x);
    return w;
}

static void free_part(Nf4Part *p) {
    for (const void *x : {(const void *)p->codes, (const void *)p->absmax, (const void *)p->qabsmax, (const void *)p->nested_absmax,
                          (const void *)p->dense})
        if (x) CUDA_CHECK(cudaFree((void *)x));
}

// Bit-for-bit comparison of the kernel's floatX output with the CPU twin's
static void check_same_bits(const char *name, const floatX *d_out, const std::vector<float> &want) {
    std::vector<float> got = download_x(d_out, want.size());
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < want.size(); i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) && bad++ == 0) first = i;
    if (bad) {
        printf("FAIL %s: %zu of %zu values differ from the CPU twin's; first at [%zu]: got %a want %a\n", name, bad, want.size(), first,
               got[first], want[first]);
        g_failures++;
    } else {
        printf("ok %s (bit for bit, %zu values)\n", name, want.size());
    }
}

static void check_dequantize(int64_t n, int blocksize, int nested_blocksize) {
    std::vector<float> w = rand_f((size_t)n, 0.05f);
    for (int i = 0; i < blocksize && i < n; i++) w[(size_t)(blocksize + i) % (size_t)n] = 0.0f;  // an all-zero block (absmax 0)
    for (int64_t i = 0; i < n; i += 97) w[(size_t)i] *= 40.0f;                                    // outliers: blocks of larger absmax
    QuantizedWeight q;
    quantize(&q, w, blocksize, nested_blocksize);
    std::vector<float> want = cpu_dequantize(&q);
    floatX *d_out = dev_alloc<floatX>((size_t)n);
    poison(d_out, (size_t)n * sizeof(floatX));
    Nf4Tables t = nf4_tables();
    nf4_dequantize_part(d_out, &q.part, &t, 0);
    char name[160];
    snprintf(name, sizeof name, "nf4_dequantize n=%lld blocksize=%d %s", (long long)n, blocksize,
             nested_blocksize ? (nested_blocksize == 256 ? "double quantized (nested 256)" : "double quantized (nested 64)") : "fp32 absmax");
    check_same_bits(name, d_out, want);
    CUDA_CHECK(cudaFree(d_out));
    free_part(&q.part);
}

// A dense part (held in 16 bits by the checkpoint) is copied into its place unchanged
static void check_dense_part(int64_t n) {
    std::vector<float> w = rand_x((size_t)n, 1.0f);
    Nf4Part p;
    memset(&p, 0, sizeof p);
    p.n = n;
    p.dense = dev_x(w);
    floatX *d_out = dev_alloc<floatX>((size_t)n);
    poison(d_out, (size_t)n * sizeof(floatX));
    Nf4Tables t = nf4_tables();
    nf4_dequantize_part(d_out, &p, &t, 0);
    check_same_bits("nf4_dense_part_copied", d_out, w);
    CUDA_CHECK(cudaFree(d_out));
    free_part(&p);
}

// Llama-3.1-8B's largest layer weight, gate|up (2 x 14336 x 4096): the traffic is the codes and
// the double-quantized absmax read, the floatX weight written
static void timings(void) {
    int64_t n = (int64_t)2 * 14336 * 4096, nb = n / NF4_BLOCK;
    uint8_t *codes = dev_alloc<uint8_t>((size_t)n / 2), *qabsmax = dev_alloc<uint8_t>((size_t)nb);
    float *nested = dev_alloc<float>((size_t)nb / NF4_NESTED_BLOCK + 1);
    floatX *out = dev_alloc<floatX>((size_t)n);
    CUDA_CHECK(cudaMemset(codes, 0x5A, (size_t)n / 2));
    CUDA_CHECK(cudaMemset(qabsmax, 0x80, (size_t)nb));
    CUDA_CHECK(cudaMemset(nested, 0, ((size_t)nb / NF4_NESTED_BLOCK + 1) * sizeof(float)));
    Nf4Part p;
    memset(&p, 0, sizeof p);
    p.codes = codes, p.qabsmax = qabsmax, p.nested_absmax = nested, p.offset = 0.01f, p.n = n, p.blocksize = NF4_BLOCK;
    p.nested_blocksize = NF4_NESTED_BLOCK;
    Nf4Tables t = nf4_tables();
    report_time("nf4_dequantize 2x14336x4096 (Llama-3.1-8B gate|up)", time_ms([&] { nf4_dequantize_part(out, &p, &t, 0); }, 20),
                (double)n / 2 + (double)nb + (double)n * sizeof(floatX));
    for (void *x : {(void *)codes, (void *)qabsmax, (void *)nested, (void *)out}) CUDA_CHECK(cudaFree(x));
}

int main(void) {
    if (!have_cuda_device("nf4_dequant")) return 0;
    check_dequantize(4096 * 3, 64, 256);   // whole blocks
    check_dequantize(100003, 64, 256);     // a short last block, an odd count, several nested blocks
    check_dequantize(100003, 64, 0);       // fp32 absmax (no double quantization)
    check_dequantize(70001, 128, 64);      // another blocksize and nested blocksize (a checkpoint's own)
    check_dense_part(1001);
    timings();
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("nf4_dequant [%s]: %d failure(s)\n", PRECISION_NAME, g_failures);
    return g_failures ? 1 : 0;
}
