/*
tests/model/test_nf4.c: checks model/nf4.h (NF4 quantization with double quantization, as
bitsandbytes' CUDA kernels compute it) bit for bit against dev/ref_nf4.py's float64
reference in dev/ref/nf4_cases.safetensors: the value tables and thresholds; codes, block
absmax, nested codes, nested absmax, offset and the dequantized weight of random weights
(fp32 and bf16 values), an odd count, a short last block, and adversarial blocks (values on
each threshold and 1 ulp either side, with power-of-two and other absmax, all-zero and -0
blocks, absmax 1e30 and over 2^126, 1e-30 and subnormal blocks, the absmax from a negative
value, every absmax equal); the 8-bit dynamic quantizer on its midpoints; a hand-worked
packed example; and that the wrong variants (blocksize 128, no double quantization, the
nibbles swapped) are caught by these comparisons.
Prints "ok NAME" / "FAIL NAME: why" per check; exits 1 if anything failed.
Run from the repository root (make test does).
*/
#include "../../base/safetensors.h"
#include "../../model/nf4.h"
#include "../test_util.h"

#define REF "dev/ref/nf4_cases.safetensors"

static const StTensor *need(const SafeTensors *st, const char *name) {
    const StTensor *t = st_find(st, name);
    if (!t) fatal("%s: reference tensor %s missing (regenerate with dev/ref_nf4.py dev/ref)", st->path, name);
    return t;
}

static float *ref_f32(const SafeTensors *st, const char *name, int64_t *n) {
    const StTensor *t = need(st, name);
    float *out = (float *)xmalloc((size_t)t->numel * sizeof(float));
    st_read_f32(st, t, out);
    *n = t->numel;
    return out;
}

static const uint8_t *ref_u8(const SafeTensors *st, const char *name, int64_t *n) {
    const StTensor *t = need(st, name);
    if (strcmp(t->dtype_name, "U8")) fatal("%s: %s is %s, not U8", st->path, name, t->dtype_name);
    *n = t->numel;
    return (const uint8_t *)st->buf + t->begin;
}

// The first element where the float arrays differ in their bits, as text ("" when equal).
static void diff_f32(const char *what, const float *a, const float *b, int64_t n, int64_t nb, char *out, size_t on) {
    out[0] = 0;
    if (n != nb) { snprintf(out, on, "%s: %lld values, reference %lld", what, (long long)n, (long long)nb); return; }
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4)) { snprintf(out, on, "%s[%lld] = %a, reference %a", what, (long long)i, a[i], b[i]); return; }
}

static void diff_u8(const char *what, const uint8_t *a, const uint8_t *b, int64_t n, int64_t nb, char *out, size_t on) {
    out[0] = 0;
    if (n != nb) { snprintf(out, on, "%s: %lld bytes, reference %lld", what, (long long)n, (long long)nb); return; }
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i]) { snprintf(out, on, "%s[%lld] = 0x%02x, reference 0x%02x", what, (long long)i, a[i], b[i]); return; }
}

// How a case is quantized: the right way, or one of the wrong variants.
typedef enum { RIGHT, BLOCK_128, NO_DOUBLE_QUANT, NIBBLES_SWAPPED } Variant;

// Quantizes case NAME's weight as variant v and compares every output with the reference;
// the first difference goes to why ("" when all are equal). part selects what is
// compared: 0 codes and absmax, 1 the double quantization, 2 the dequantized weight.
static void run_case(const SafeTensors *st, const char *name, Variant v, int part, char *why, size_t wn) {
    char key[128];
    int64_t n, nref, nbref;
    snprintf(key, sizeof key, "%s.w", name);
    float *w = ref_f32(st, key, &n);
    int bs = v == BLOCK_128 ? 128 : NF4_BLOCK;
    int64_t nb = (n + bs - 1) / bs, nbytes = (n + 1) / 2, nn = (nb + NF4_NESTED_BLOCK - 1) / NF4_NESTED_BLOCK;
    uint8_t *codes = (uint8_t *)xmalloc((size_t)nbytes), *qabsmax = (uint8_t *)xmalloc((size_t)nb);
    float *absmax = (float *)xmalloc((size_t)nb * 4), *centred = (float *)xmalloc((size_t)nb * 4);
    float *nested = (float *)xmalloc((size_t)nn * 4), *deq_absmax = (float *)xmalloc((size_t)nb * 4), *deq = (float *)xmalloc((size_t)n * 4);
    nf4_quantize(w, n, bs, codes, absmax);
    if (v == NIBBLES_SWAPPED)
        for (int64_t i = 0; i < nbytes; i++) codes[i] = (uint8_t)(codes[i] << 4 | codes[i] >> 4);
    float offset = nf4_double_quantize(absmax, nb, centred, qabsmax, nested);
    if (v == NO_DOUBLE_QUANT) memcpy(deq_absmax, absmax, (size_t)nb * 4);
    else nf4_dequantize_absmax(qabsmax, nested, offset, nb, NF4_NESTED_BLOCK, deq_absmax);
    nf4_dequantize(codes, deq_absmax, n, bs, deq);

    why[0] = 0;
    if (part == 0) {
        snprintf(key, sizeof key, "%s.codes", name);
        const uint8_t *rc = ref_u8(st, key, &nref);
        diff_u8("codes", codes, rc, nbytes, nref, why, wn);
        snprintf(key, sizeof key, "%s.absmax", name);
        float *ra = ref_f32(st, key, &nbref);
        if (!why[0]) diff_f32("absmax", absmax, ra, nb, nbref, why, wn);
        free(ra);
    } else if (part == 1) {
        snprintf(key, sizeof key, "%s.qabsmax", name);
        const uint8_t *rq = ref_u8(st, key, &nref);
        diff_u8("qabsmax", qabsmax, rq, nb, nref, why, wn);
        snprintf(key, sizeof key, "%s.nested_absmax", name);
        float *rn = ref_f32(st, key, &nbref);
        if (!why[0]) diff_f32("nested_absmax", nested, rn, nn, nbref, why, wn);
        snprintf(key, sizeof key, "%s.offset", name);
        float *ro = ref_f32(st, key, &nbref);
        if (!why[0]) diff_f32("offset", &offset, ro, 1, nbref, why, wn);
        free(rn);
        free(ro);
    } else {
        snprintf(key, sizeof key, "%s.deq", name);
        float *rd = ref_f32(st, key, &nref);
        diff_f32("dequantized", deq, rd, n, nref, why, wn);
        free(rd);
    }
    free(w), free(codes), free(qabsmax), free(absmax), free(centred), free(nested), free(deq_absmax), free(deq);
}

static void check_tables(const SafeTensors *st) {
    int64_t n;
    char why[256];
    float *v = ref_f32(st, "nf4_values", &n);
    diff_f32("nf4_values", nf4_values, v, 16, n, why, sizeof why);
    check("nf4_values_equal_reference", !why[0], "%s", why);
    free(v);
    float thr[15];
    nf4_thresholds(thr);
    v = ref_f32(st, "nf4_thresholds", &n);
    diff_f32("thresholds", thr, v, 15, n, why, sizeof why);
    check("thresholds_equal_reference", !why[0], "%s", why);
    free(v);
    v = ref_f32(st, "dynamic_map", &n);
    diff_f32("dynamic_map", nf4_dynamic_map, v, 256, n, why, sizeof why);
    check("dynamic_map_equals_reference", !why[0], "%s", why);
    free(v);
}

// Independent of the reference: [1, -1, 0, 0.5] has absmax 1, scale 1; 1 is above all 15
// thresholds, -1 above none, 0 above the 7 negative ones, 0.5 above 12 (the 13th is
// (0.4407 + 0.5626) / 2 = 0.5017): bytes 15 << 4 | 0 and 7 << 4 | 12. An odd [0.25]:
// 15 and the pad's 7. An all-zero pair: NaNs, code 0, and back to -1 * 0 = -0.
static void check_hand_worked(void) {
    const float w[4] = {1.0f, -1.0f, 0.0f, 0.5f}, odd[1] = {0.25f}, zero[2] = {0.0f, 0.0f};
    uint8_t c[2], co[1], cz[1];
    float a, ao, az, back[2];
    nf4_quantize(w, 4, NF4_BLOCK, c, &a);
    nf4_quantize(odd, 1, NF4_BLOCK, co, &ao);
    nf4_quantize(zero, 2, NF4_BLOCK, cz, &az);
    nf4_dequantize(cz, &az, 2, NF4_BLOCK, back);
    check("hand_worked_packed", c[0] == 0xF0 && c[1] == 0x7C && a == 1.0f, "bytes 0x%02x 0x%02x absmax %g", c[0], c[1], a);
    check("odd_count_pads_zero", co[0] == 0xF7 && ao == 0.25f, "byte 0x%02x", co[0]);
    check("zero_block_codes_0", cz[0] == 0x00 && az == 0.0f && back[0] == 0.0f && signbit(back[0]), "byte 0x%02x back %g", cz[0], back[0]);
}

static void check_dynamic(const SafeTensors *st) {
    int64_t n, nq, na;
    float *x = ref_f32(st, "dyn8.x", &n);
    const uint8_t *rq = ref_u8(st, "dyn8.q", &nq);
    float *ra = ref_f32(st, "dyn8.absmax", &na);
    int64_t nb = (n + NF4_NESTED_BLOCK - 1) / NF4_NESTED_BLOCK;
    uint8_t *q = (uint8_t *)xmalloc((size_t)n);
    float *a = (float *)xmalloc((size_t)nb * 4);
    nf4_quantize_dynamic(x, n, NF4_NESTED_BLOCK, q, a);
    char why[256];
    diff_u8("q", q, rq, n, nq, why, sizeof why);
    if (!why[0]) diff_f32("absmax", a, ra, nb, na, why, sizeof why);
    check("dynamic_quantize_on_midpoints", !why[0], "%s", why);
    free(x), free(ra), free(q), free(a);
}

int main(void) {
    SafeTensors st;
    st_open(&st, REF);
    check_tables(&st);
    check_hand_worked();
    check_dynamic(&st);
    static const char *cases[] = {"random", "random_bf16", "odd", "short", "adversarial", "flat"};
    static const char *parts[] = {"codes_absmax", "double_quant", "dequantized"};
    char name[128], why[512];
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int p = 0; p < 3; p++) {
            run_case(&st, cases[c], RIGHT, p, why, sizeof why);
            snprintf(name, sizeof name, "%s_%s", cases[c], parts[p]);
            check(name, !why[0], "%s", why);
        }
    // The wrong variants, caught by the same comparisons (the difference each one shows is
    // printed, so a reader sees what the check would say of such code).
    static const struct { Variant v; int part; const char *name; } wrong[] = {
        {BLOCK_128, 0, "wrong_blocksize_128_caught"},
        {NO_DOUBLE_QUANT, 2, "wrong_no_double_quant_caught"},
        {NIBBLES_SWAPPED, 0, "wrong_nibbles_swapped_caught"},
    };
    for (size_t i = 0; i < sizeof wrong / sizeof *wrong; i++) {
        run_case(&st, "random", wrong[i].v, wrong[i].part, why, sizeof why);
        check(wrong[i].name, why[0] != 0, "the comparison found no difference");
        if (why[0]) printf("# %s: %s\n", wrong[i].name, why);
    }
    st_close(&st);
    return failures ? 1 : 0;
}
