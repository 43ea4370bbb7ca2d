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
Then model/bnb4.h: a weight in bitsandbytes' checkpoint layout (written here from the
reference's case, as QuantState.as_dict(packed=True) names and shapes it; that layout is
checked against bitsandbytes' own files by tests/model/test_nf4_bnb.sh) read and
dequantized to the reference's weights bit for bit, with and without double quantization;
and hostile files (absmax of the wrong size, quant_state JSON that disagrees with the
tensors or the model, truncated codes, FP4, another table) refused in one line.
Then model/hf_bnb4.h: a 4-bit directory made here from dev/ref/tiny_llama (each layer
linear weight quantized by model/nf4.h) read back to the expected parameters; a quantized
lm_head, a weight without its nested absmax, GPT-2 and other quantization_configs refused
in one line.
./test_nf4 --read FILE NAME ROWS COLS OUT reads one weight and writes it in fp32 to OUT;
--read-model DIR OUTDIR reads a 4-bit directory and exports it dense; --config FILE reads
a config.json's quantization_config (test_nf4_bnb.sh's and the refusals' way in);
--quantize FILE NAME OUT quantizes one weight as --load_in_4bit does and writes its NF4
state (dev/gpu_check.sh compares it with bitsandbytes' CUDA quantize_4bit; checked here to
write the reference's state of the random case).
Prints "ok NAME" / "FAIL NAME: why" per check; exits 1 if anything failed.
Run from the repository root (make test does).
*/
#include "../../base/safetensors.h"
#include "../../model/bnb4.h"
#include "../../model/hf_bnb4.h"
#include "../../model/nf4.h"
#include "../test_util.h"
#include <unistd.h>

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

// ---- bitsandbytes' checkpoint layout (model/bnb4.h) ------------------------------------

typedef struct { char name[160]; const char *dtype; int64_t shape[2]; int ndim; const void *data; size_t bytes; } OutTensor;

static void write_st(const char *path, const OutTensor *t, int count) {
    JsonBuf h = {0};
    size_t off = 0;
    json_buf_puts(&h, "{");
    for (int i = 0; i < count; i++) {
        json_buf_printf(&h, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld", i ? "," : "", t[i].name, t[i].dtype, (long long)t[i].shape[0]);
        if (t[i].ndim == 2) json_buf_printf(&h, ",%lld", (long long)t[i].shape[1]);
        json_buf_printf(&h, "],\"data_offsets\":[%zu,%zu]}", off, off + t[i].bytes);
        off += t[i].bytes;
    }
    json_buf_puts(&h, "}");
    while (h.n % 8) json_buf_puts(&h, " ");
    FILE *f = fopen(path, "wb");
    if (!f) fatal("cannot write %s", path);
    uint64_t hl = h.n;
    fwrite(&hl, 8, 1, f);
    fwrite(h.p, 1, h.n, f);
    for (int i = 0; i < count; i++) fwrite(t[i].data, 1, t[i].bytes, f);
    fclose(f);
    free(h.p);
}

// How a written file departs from bitsandbytes' layout.
typedef enum { GOOD, GOOD_PLAIN, ABSMAX_SHORT, SHAPE_SWAPPED, CODES_TRUNCATED, FP4, BLOCKSIZE_128, NESTED_KEYS_ONLY,
               OTHER_QUANT_MAP, NOT_JSON, NESTED_F16, OFFSET_STRING, CODES_F32 } Hostile;

// Writes case NAME of the reference as weight "layer.weight" of a bitsandbytes checkpoint
// (double quantized, or with fp32 absmax for GOOD_PLAIN), departing from it as h says.
static void write_bnb(const SafeTensors *ref, const char *name, Hostile h, const char *path) {
    char key[128], js[512];
    int64_t nc, nb, nn, junk;
    snprintf(key, sizeof key, "%s.w", name);
    const StTensor *wt = need(ref, key);
    snprintf(key, sizeof key, "%s.codes", name);
    const uint8_t *codes = ref_u8(ref, key, &nc);
    snprintf(key, sizeof key, "%s.qabsmax", name);
    const uint8_t *q = ref_u8(ref, key, &nb);
    snprintf(key, sizeof key, "%s.nested_absmax", name);
    float *nested = ref_f32(ref, key, &nn);
    snprintf(key, sizeof key, "%s.offset", name);
    float *offset = ref_f32(ref, key, &junk);
    snprintf(key, sizeof key, "%s.absmax", name);
    float *absmax = ref_f32(ref, key, &junk);
    float *nf4 = ref_f32(ref, "nf4_values", &junk), *dyn = ref_f32(ref, "dynamic_map", &junk);
    if (h == OTHER_QUANT_MAP) nf4[3] = 0.5f * nf4[3];
    int plain = h == GOOD_PLAIN || h == NESTED_KEYS_ONLY;  // the latter's JSON claims double quantization
    // As json.dumps writes it (", " and ": "), the offset as the shortest round trip.
    int64_t rows = wt->shape[0], cols = wt->ndim == 2 ? wt->shape[1] : 1;
    snprintf(js, sizeof js, "{\"quant_type\": \"nf4\", \"blocksize\": %d, \"dtype\": \"bfloat16\", \"shape\": [%lld, %lld]",
             h == BLOCKSIZE_128 ? 128 : 64, (long long)(h == SHAPE_SWAPPED ? cols : rows), (long long)(h == SHAPE_SWAPPED ? rows : cols));
    if (!plain || h == NESTED_KEYS_ONLY) {
        char off[40];
        snprintf(off, sizeof off, h == OFFSET_STRING ? "\"%.17g\"" : "%.17g", (double)offset[0]);
        snprintf(js + strlen(js), sizeof js - strlen(js), ", \"nested_blocksize\": 256, \"nested_dtype\": \"%s\", \"nested_offset\": %s",
                 h == NESTED_F16 ? "float16" : "float32", off);
    }
    strcat(js, "}");
    if (h == NOT_JSON) js[strlen(js) - 1] = 0;
    OutTensor t[6];
    int k = 0;
    t[k++] = (OutTensor){"layer.weight", h == CODES_F32 ? "F32" : "U8", {h == CODES_F32 ? nc / 4 : nc - (h == CODES_TRUNCATED), 1}, 2, codes,
                         (size_t)(h == CODES_F32 ? nc / 4 * 4 : nc - (h == CODES_TRUNCATED))};
    if (plain) t[k++] = (OutTensor){"layer.weight.absmax", "F32", {nb}, 1, absmax, (size_t)nb * 4};
    else t[k++] = (OutTensor){"layer.weight.absmax", "U8", {nb - (h == ABSMAX_SHORT)}, 1, q, (size_t)(nb - (h == ABSMAX_SHORT))};
    t[k++] = (OutTensor){"layer.weight.quant_map", "F32", {16}, 1, nf4, 64};
    if (!plain) {
        t[k++] = (OutTensor){"layer.weight.nested_absmax", "F32", {nn}, 1, nested, (size_t)nn * 4};
        t[k++] = (OutTensor){"layer.weight.nested_quant_map", "F32", {256}, 1, dyn, 1024};
    }
    t[k++] = (OutTensor){"", "U8", {(int64_t)strlen(js)}, 1, js, strlen(js)};
    snprintf(t[k - 1].name, sizeof t[k - 1].name, "layer.weight.quant_state.bitsandbytes__%s", h == FP4 ? "fp4" : "nf4");
    write_st(path, t, k);
    free(nested), free(offset), free(absmax), free(nf4), free(dyn);
}

// --read FILE NAME ROWS COLS OUT
static int read_mode(char **argv) {
    SafeTensors st;
    st_open(&st, argv[2]);
    Bnb4Weight w;
    bnb4_read_weight(&st, argv[3], atoll(argv[4]), atoll(argv[5]), &w);
    float *out = (float *)xmalloc((size_t)w.n * 4), *scratch = (float *)xmalloc((size_t)(w.n / w.blocksize + 1) * 4);
    bnb4_dequantize(&w, scratch, out);
    FILE *f = fopen(argv[6], "wb");
    if (!f || fwrite(out, 4, (size_t)w.n, f) != (size_t)w.n || fclose(f)) fatal("cannot write %s", argv[6]);
    bnb4_free(&w);
    free(out), free(scratch);
    st_close(&st);
    return 0;
}

// --quantize FILE NAME OUT: weight NAME (F32 or BF16, any shape) quantized by model/nf4.h
// as --load_in_4bit does (blocks of NF4_BLOCK, double quantization), written to OUT as
// "codes" (U8, element 2i in the high nibble), "absmax" (F32, the first level), "qabsmax"
// (U8), "nested_absmax" (F32) and "offset" (F32 [1]): dev/gpu_check.sh compares them with
// bitsandbytes' quantize_4bit on the GPU.
static int quantize_mode(char **argv) {
    SafeTensors st;
    st_open(&st, argv[2]);
    const StTensor *t = need(&st, argv[3]);
    int64_t n = t->numel, nb = (n + NF4_BLOCK - 1) / NF4_BLOCK, nn = (nb + NF4_NESTED_BLOCK - 1) / NF4_NESTED_BLOCK;
    float *w = (float *)xmalloc((size_t)n * 4), *absmax = (float *)xmalloc((size_t)nb * 4), *centred = (float *)xmalloc((size_t)nb * 4);
    float *nested = (float *)xmalloc((size_t)nn * 4);
    uint8_t *codes = (uint8_t *)xmalloc((size_t)(n + 1) / 2), *q = (uint8_t *)xmalloc((size_t)nb);
    st_read_f32(&st, t, w);
    nf4_quantize(w, n, NF4_BLOCK, codes, absmax);
    float offset = nf4_double_quantize(absmax, nb, centred, q, nested);
    OutTensor out[] = {
        {"codes", "U8", {(n + 1) / 2}, 1, codes, (size_t)(n + 1) / 2},
        {"absmax", "F32", {nb}, 1, absmax, (size_t)nb * 4},
        {"qabsmax", "U8", {nb}, 1, q, (size_t)nb},
        {"nested_absmax", "F32", {nn}, 1, nested, (size_t)nn * 4},
        {"offset", "F32", {1}, 1, &offset, 4},
    };
    write_st(argv[4], out, (int)(sizeof out / sizeof *out));
    free(w), free(absmax), free(centred), free(nested), free(codes), free(q);
    st_close(&st);
    return 0;
}

// --quantize on the reference's random weight writes the reference's NF4 state: what
// dev/gpu_check.sh compares with bitsandbytes' CUDA quantize_4bit is model/nf4.h's.
static void check_quantize_mode(const SafeTensors *ref, const char *self) {
    char out[512], cmd[2048], err[4096], why[512] = "";
    snprintf(out, sizeof out, "%s/quantized.safetensors", tmp_root);
    snprintf(cmd, sizeof cmd, "%s --quantize %s random.w %s", self, REF, out);
    int rc = run(cmd, err, sizeof err);
    if (rc) { check("quantize_mode_writes_reference_state", 0, "exit %d: %s", rc, err); return; }
    SafeTensors st;
    st_open(&st, out);
    static const char *keys[][2] = {{"codes", "random.codes"}, {"qabsmax", "random.qabsmax"}, {"absmax", "random.absmax"},
                                    {"nested_absmax", "random.nested_absmax"}, {"offset", "random.offset"}};
    for (int k = 0; k < 5 && !why[0]; k++) {
        int64_t n, nr;
        if (k < 2) {
            const uint8_t *a = ref_u8(&st, keys[k][0], &n), *b = ref_u8(ref, keys[k][1], &nr);
            diff_u8(keys[k][0], a, b, n, nr, why, sizeof why);
        } else {
            float *a = ref_f32(&st, keys[k][0], &n), *b = ref_f32(ref, keys[k][1], &nr);
            diff_f32(keys[k][0], a, b, n, nr, why, sizeof why);
            free(a), free(b);
        }
    }
    check("quantize_mode_writes_reference_state", !why[0], "%s", why);
    st_close(&st);
}

static void check_bnb_files(const SafeTensors *ref, const char *self) {
    char path[512], out[512], cmd[2048], err[4096], why[256];
    snprintf(path, sizeof path, "%s/bnb.safetensors", tmp_root);
    snprintf(out, sizeof out, "%s/deq.bin", tmp_root);
    static const char *names[] = {"random", "odd", "short"};
    for (int plain = 0; plain < 2; plain++)
        for (size_t c = 0; c < sizeof names / sizeof *names; c++) {
            int64_t n, rows, cols;
            char key[64];
            snprintf(key, sizeof key, "%s.w", names[c]);
            const StTensor *wt = need(ref, key);
            rows = wt->shape[0], cols = wt->shape[1];
            write_bnb(ref, names[c], plain ? GOOD_PLAIN : GOOD, path);
            snprintf(cmd, sizeof cmd, "%s --read %s layer.weight %lld %lld %s", self, path, (long long)rows, (long long)cols, out);
            int rc = run(cmd, err, sizeof err);
            float *expect;
            if (plain) {  // the reference's codes times its fp32 absmax
                int64_t nc, nb;
                snprintf(key, sizeof key, "%s.codes", names[c]);
                const uint8_t *codes = ref_u8(ref, key, &nc);
                snprintf(key, sizeof key, "%s.absmax", names[c]);
                float *absmax = ref_f32(ref, key, &nb);
                float *nf4 = ref_f32(ref, "nf4_values", &nb);
                n = rows * cols;
                expect = (float *)xmalloc((size_t)n * 4);
                for (int64_t i = 0; i < n; i++) expect[i] = nf4[i & 1 ? codes[i / 2] & 15 : codes[i / 2] >> 4] * absmax[i / 64];
                free(absmax), free(nf4);
            } else {
                snprintf(key, sizeof key, "%s.deq", names[c]);
                expect = ref_f32(ref, key, &n);
            }
            size_t len = 0;
            float *got = rc == 0 ? (float *)read_whole_file(out, &len) : NULL;
            why[0] = 0;
            if (rc) snprintf(why, sizeof why, "exit %d: %s", rc, err);
            else diff_f32("read and dequantized", got, expect, (int64_t)(len / 4), n, why, sizeof why);
            snprintf(key, sizeof key, "bnb4_read_%s%s", names[c], plain ? "_plain_absmax" : "");
            check(key, !why[0], "%s", why);
            free(got), free(expect);
        }
    static const struct { Hostile h; const char *name, *says; } bad[] = {
        {ABSMAX_SHORT, "hostile_absmax_short", "layer.weight.absmax has 299 elements, expected 300"},
        {SHAPE_SWAPPED, "hostile_json_shape_swapped", "quant_state shape is [200, 96]; the model needs [96, 200]"},
        {CODES_TRUNCATED, "hostile_codes_truncated", "layer.weight has 9599 elements, expected 9600"},
        {FP4, "hostile_fp4", "quantized to FP4"},
        {BLOCKSIZE_128, "hostile_json_blocksize_128", "expected 150 for layer.weight's shape and blocksize"},
        {NESTED_KEYS_ONLY, "hostile_nested_json_without_tensors", "disagree on double quantization"},
        {OTHER_QUANT_MAP, "hostile_quant_map", "differs from bitsandbytes' NF4 table"},
        {NOT_JSON, "hostile_quant_state_not_json", "is not JSON"},
        {NESTED_F16, "hostile_nested_dtype", "nested_dtype is not float32"},
        {OFFSET_STRING, "hostile_offset_string", "nested_offset is not a finite number"},
        {CODES_F32, "hostile_codes_dtype", "layer.weight is F32, expected U8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_bnb(ref, "random", bad[i].h, path);
        unlink(out);
        snprintf(cmd, sizeof cmd, "%s --read %s layer.weight 96 200 %s", self, path, out);
        int rc = run(cmd, err, sizeof err);
        int lines = 0;
        for (const char *p = err; *p; p++) lines += *p == '\n';
        check(bad[i].name, rc == 1 && lines == 1 && strstr(err, bad[i].says) && !path_exists(out),
              "exit %d, %d lines, stderr: %s", rc, lines, err);
    }
}

// --read-model DIR OUTDIR: a 4-bit directory (model/hf_bnb4.h) exported dense in fp32.
static int read_model_mode(char **argv) {
    ModelConfig cfg;
    float *mem = NULL;
    ParamTensors p;
    Bnb4Base q;
    model_load_hf_bnb4(argv[2], &cfg, &mem, &p, &q);
    bnb4_base_dequantize(&q, &cfg, &p);
    make_dirs(argv[3]);
    model_save_hf(argv[3], &cfg, &p, HF_SAVE_F32);
    bnb4_base_free(&q);
    free(mem);
    return 0;
}

// config.json texts with quantization_configs: hf_bnb4_config's answer or one-line refusal.
static void check_quantization_configs(const char *self) {
    static const struct { const char *name, *qc, *says; } cases[] = {
        {"quant_config_nf4", "{\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true, \"load_in_8bit\": false, \"bnb_4bit_quant_type\": \"nf4\", \"bnb_4bit_quant_storage\": \"uint8\", \"bnb_4bit_use_double_quant\": true}", NULL},
        {"quant_config_fp4_refused", "{\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true, \"bnb_4bit_quant_type\": \"fp4\"}", "bnb_4bit_quant_type is fp4; only nf4 is read"},
        {"quant_config_8bit_refused", "{\"quant_method\": \"bitsandbytes\", \"load_in_8bit\": true, \"load_in_4bit\": false}", "8-bit weights are not read"},
        {"quant_config_gptq_refused", "{\"quant_method\": \"gptq\", \"bits\": 4}", "quant_method is gptq"},
        {"quant_config_storage_refused", "{\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true, \"bnb_4bit_quant_type\": \"nf4\", \"bnb_4bit_quant_storage\": \"bfloat16\"}", "bnb_4bit_quant_storage is not uint8"},
        {"quant_config_not_object", "[1]", "quantization_config is not an object"},
    };
    char path[512], cmd[1024], err[2048];
    snprintf(path, sizeof path, "%s/config.json", tmp_root);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        FILE *f = fopen(path, "w");
        fprintf(f, "{\"model_type\": \"llama\", \"quantization_config\": %s}", cases[i].qc);
        fclose(f);
        snprintf(cmd, sizeof cmd, "%s --config %s", self, path);
        int rc = run(cmd, err, sizeof err), lines = 0;
        for (const char *p = err; *p; p++) lines += *p == '\n';
        if (!cases[i].says) check(cases[i].name, rc == 0 && !err[0], "exit %d: %s", rc, err);
        else check(cases[i].name, rc == 1 && lines == 1 && strstr(err, cases[i].says), "exit %d, %d lines: %s", rc, lines, err);
    }
    const char *none = "{\"model_type\": \"llama\"}";
    check("quant_config_absent", hf_bnb4_config("none", none, strlen(none)) == 0, "a plain config.json read as quantized");
}

// ---- a 4-bit directory (model/hf_bnb4.h) ------------------------------------------------

typedef enum { DIR_GOOD, DIR_LM_HEAD_QUANTIZED, DIR_NESTED_MISSING } DirVariant;

static int is_layer_linear(const char *name) {
    static const char *ends[] = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "gate_proj.weight", "up_proj.weight", "down_proj.weight"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof ends / sizeof *ends; i++)
        if (n > strlen(ends[i]) && !strcmp(name + n - strlen(ends[i]), ends[i])) return 1;
    return 0;
}

// dev/ref/tiny_llama (untied head) written to dir as bitsandbytes' 4-bit checkpoint
// would hold it: each layer linear weight quantized with double quantization by
// model/nf4.h, the rest F32, config.json with a quantization_config; and in *expect
// the parameters a loader must give back: the linear weights quantized and dequantized.
static void write_bnb_dir(const char *dir, DirVariant v, float **expect) {
    ModelConfig cfg;
    float *mem = NULL;
    ParamTensors p;
    model_load_hf("dev/ref/tiny_llama", &cfg, &mem, &p);
    StOut *outs;
    int count = hf_export_tensors(&cfg, &p, &outs), k = 0;
    OutTensor *t = (OutTensor *)xcalloc((size_t)count * 6, sizeof(OutTensor));
    void *bufs[1024];
    int nbufs = 0;
    float *nf4 = (float *)xmalloc(64), *dyn = (float *)xmalloc(1024);
    memcpy(nf4, nf4_values, 64), memcpy(dyn, nf4_dynamic_map, 1024);
    for (int i = 0; i < count; i++) {
        StOut *o = &outs[i];
        int64_t n = o->shape[0] * (o->ndim == 2 ? o->shape[1] : 1);
        if (!is_layer_linear(o->name) && !(v == DIR_LM_HEAD_QUANTIZED && !strcmp(o->name, "lm_head.weight"))) {
            t[k++] = (OutTensor){"", "F32", {o->shape[0], o->shape[1]}, o->ndim, o->data, (size_t)n * 4};
            snprintf(t[k - 1].name, sizeof t[k - 1].name, "%s", o->name);
            continue;
        }
        int64_t nb = (n + 63) / 64, nn = (nb + 255) / 256;
        uint8_t *codes = (uint8_t *)xmalloc((size_t)(n + 1) / 2), *q = (uint8_t *)xmalloc((size_t)nb);
        float *absmax = (float *)xmalloc((size_t)nb * 4), *centred = (float *)xmalloc((size_t)nb * 4), *nested = (float *)xmalloc((size_t)nn * 4);
        nf4_quantize(o->data, n, 64, codes, absmax);
        float offset = nf4_double_quantize(absmax, nb, centred, q, nested);
        nf4_dequantize_absmax(q, nested, offset, nb, 256, absmax);
        nf4_dequantize(codes, absmax, n, 64, (float *)o->data);  // the expected parameters, in mem
        char *js = (char *)xmalloc(512);
        snprintf(js, 512, "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"float32\", \"shape\": [%lld, %lld], "
                 "\"nested_blocksize\": 256, \"nested_dtype\": \"float32\", \"nested_offset\": %.17g}", (long long)o->shape[0], (long long)o->shape[1], (double)offset);
        const char *suffix[6] = {"", ".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map", ".quant_state.bitsandbytes__nf4"};
        OutTensor parts[6] = {{"", "U8", {(n + 1) / 2, 1}, 2, codes, (size_t)(n + 1) / 2}, {"", "U8", {nb}, 1, q, (size_t)nb},
                              {"", "F32", {16}, 1, nf4, 64}, {"", "F32", {nn}, 1, nested, (size_t)nn * 4},
                              {"", "F32", {256}, 1, dyn, 1024}, {"", "U8", {(int64_t)strlen(js)}, 1, js, strlen(js)}};
        for (int j = 0; j < 6; j++) {
            if (v == DIR_NESTED_MISSING && j == 3 && strstr(o->name, "layers.1.mlp.up_proj")) continue;
            t[k] = parts[j];
            snprintf(t[k++].name, sizeof t->name, "%s%s", o->name, suffix[j]);
        }
        bufs[nbufs++] = codes, bufs[nbufs++] = q, bufs[nbufs++] = absmax, bufs[nbufs++] = centred, bufs[nbufs++] = nested, bufs[nbufs++] = js;
    }
    char path[600];
    make_dirs(dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_st(path, t, k);
    size_t len;
    char *cfg_text = read_whole_file("dev/ref/tiny_llama/config.json", &len);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"quantization_config\": {\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true, \"load_in_8bit\": false, "
               "\"bnb_4bit_quant_type\": \"nf4\", \"bnb_4bit_use_double_quant\": true, \"bnb_4bit_quant_storage\": \"uint8\"},%s", strchr(cfg_text, '{') + 1);
    fclose(f);
    *expect = mem;
    for (int i = 0; i < nbufs; i++) free(bufs[i]);
    free(cfg_text), free(outs), free(t), free(nf4), free(dyn);
}

static void check_bnb_dirs(const char *self) {
    char dir[512], out[512], cmd[2048], err[4096];
    snprintf(dir, sizeof dir, "%s/tiny_llama_bnb4", tmp_root);
    float *expect;
    write_bnb_dir(dir, DIR_GOOD, &expect);
    ModelConfig cfg;
    float *mem = NULL;
    ParamTensors p;
    Bnb4Base q;
    model_load_hf_bnb4(dir, &cfg, &mem, &p, &q);
    int nq = 0;
    for (size_t j = 0; j < (size_t)NUM_PARAM_TENSORS * q.L * 3; j++) nq += q.w[j].codes != NULL;
    bnb4_base_dequantize(&q, &cfg, &p);
    size_t np = model_num_parameters(&cfg), first = np;
    for (size_t j = 0; j < np && first == np; j++)
        if (memcmp(&mem[j], &expect[j], 4)) first = j;
    check("bnb4_dir_reads", nq == 14 && first == np, "%d quantized parts, first differing parameter %zu of %zu", nq, first, np);
    bnb4_base_free(&q);
    free(mem), free(expect);
    static const struct { DirVariant v; const char *name, *says; } bad[] = {
        {DIR_LM_HEAD_QUANTIZED, "bnb4_dir_lm_head_quantized_refused", "lm_head.weight is quantized"},
        {DIR_NESTED_MISSING, "bnb4_dir_nested_missing_refused", "model.layers.1.mlp.up_proj.weight's quant_state and tensors disagree on double quantization"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(dir, sizeof dir, "%s/bad%zu", tmp_root, i);
        write_bnb_dir(dir, bad[i].v, &expect);
        free(expect);
        snprintf(out, sizeof out, "%s/out%zu", tmp_root, i);
        snprintf(cmd, sizeof cmd, "%s --read-model %s %s", self, dir, out);
        int rc = run(cmd, err, sizeof err), lines = 0;
        for (const char *c = err; *c; c++) lines += *c == '\n';
        check(bad[i].name, rc == 1 && lines == 1 && strstr(err, bad[i].says) && !path_exists(out), "exit %d, %d lines: %s", rc, lines, err);
    }
    // GPT-2's Conv1D weights: refused from config.json alone
    snprintf(dir, sizeof dir, "%s/gpt2", tmp_root);
    make_dirs(dir);
    size_t len;
    char *cfg_text = read_whole_file("dev/ref/tiny/config.json", &len), path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"quantization_config\": {\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true, \"bnb_4bit_quant_type\": \"nf4\"},%s", strchr(cfg_text, '{') + 1);
    fclose(f);
    free(cfg_text);
    snprintf(cmd, sizeof cmd, "%s --read-model %s %s/gpt2_out", self, dir, tmp_root);
    int rc = run(cmd, err, sizeof err);
    check("bnb4_dir_gpt2_refused", rc == 1 && strstr(err, "4-bit GPT-2 checkpoints (Conv1D weights) are not read"), "exit %d: %s", rc, err);
}

int main(int argc, char **argv) {
    if (argc == 7 && !strcmp(argv[1], "--read")) return read_mode(argv);
    if (argc == 4 && !strcmp(argv[1], "--read-model")) return read_model_mode(argv);
    if (argc == 5 && !strcmp(argv[1], "--quantize")) return quantize_mode(argv);
    if (argc == 3 && !strcmp(argv[1], "--config")) {
        size_t len;
        char *text = read_whole_file(argv[2], &len);
        return hf_bnb4_config(argv[2], text, len) == 1 ? (free(text), 0) : 1;
    }
    snprintf(tmp_root, sizeof tmp_root, "/tmp/test_nf4_XXXXXX");
    if (!mkdtemp(tmp_root)) fatal("mkdtemp failed");
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
    check_quantize_mode(&st, argv[0]);
    check_bnb_files(&st, argv[0]);
    check_quantization_configs(argv[0]);
    check_bnb_dirs(argv[0]);
    st_close(&st);
    remove_flat_dir(tmp_root);
    return failures ? 1 : 0;
}
