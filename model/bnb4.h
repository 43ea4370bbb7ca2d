// bnb4.h: one linear weight of a bitsandbytes 4-bit checkpoint as Linear4bit's state_dict
// writes it (QuantState.as_dict(packed=True)), read from an open safetensors file into
// the NF4 form of model/nf4.h, each tensor's dtype and size and the quant_state JSON
// checked against each other and against the shape the model expects; a file that
// disagrees is refused in one line. Dequantizing the weight to fp32.
//
// It is not which tensors of a model are quantized or config.json's
// quantization_config (the model loader's part), and it writes nothing.
//
// For a weight NAME of shape [rows, cols] (n = rows * cols, nb = ceil(n / blocksize)):
//   NAME                                    U8, (n + 1) / 2 bytes of codes (stored [.., 1])
//   NAME.absmax                             F32 [nb]; U8 [nb] when double quantized
//   NAME.quant_map                          F32 [16], NF4's values
//   NAME.nested_absmax                      F32 [ceil(nb / nested_blocksize)] (double quantized)
//   NAME.nested_quant_map                   F32 [256], the signed dynamic map (double quantized)
//   NAME.quant_state.bitsandbytes__nf4      U8, JSON text: quant_type "nf4", blocksize,
//       dtype (the weight's before quantization), shape [rows, cols], and when double
//       quantized nested_blocksize, nested_dtype "float32", nested_offset
#pragma once
#include <math.h>
#include "nf4.h"
#include "../base/json.h"
#include "../base/safetensors.h"
#include "../base/util.h"

typedef struct {
    int64_t rows, cols, n;
    int blocksize;
    char dtype[16];          // the weight's dtype before quantization
    uint8_t *codes;          // (n + 1) / 2
    float *absmax;           // [nb] when not double quantized
    uint8_t *qabsmax;        // [nb] when double quantized, with:
    float *nested_absmax;    // [ceil(nb / nested_blocksize)]
    int nested_blocksize;
    float offset;
} Bnb4Weight;

static int bnb4_pow2_block(int64_t b) { return b >= 32 && b <= 4096 && (b & (b - 1)) == 0; }

// The tensor NAME + suffix, with its dtype and element count as given; NULL when absent
// and optional.
static const StTensor *bnb4_tensor_(const SafeTensors *st, const char *name, const char *suffix, const char *dtype, int64_t numel, int optional) {
    char full[512];
    snprintf(full, sizeof full, "%s%s", name, suffix);
    const StTensor *t = st_find(st, full);
    if (!t) {
        if (optional) return NULL;
        fatal("%s: 4-bit weight %s has no tensor %s", st->path, name, full);
    }
    if (strcmp(t->dtype_name, dtype)) fatal("%s: %s is %s, expected %s", st->path, full, t->dtype_name, dtype);
    if (numel >= 0 && t->numel != numel)
        fatal("%s: %s has %lld elements, expected %lld for %s's shape and blocksize", st->path, full, (long long)t->numel, (long long)numel, name);
    return t;
}

static const void *bnb4_data_(const SafeTensors *st, const StTensor *t) { return st->buf + t->begin; }

static void bnb4_copy_f32_(const SafeTensors *st, const StTensor *t, float *out, int nonneg) {
    memcpy(out, bnb4_data_(st, t), (size_t)t->numel * 4);
    for (int64_t i = 0; i < t->numel; i++)
        if (!isfinite(out[i]) || (nonneg && out[i] < 0.0f))
            fatal("%s: %s[%lld] = %g: not a %s", st->path, t->name, (long long)i, out[i], nonneg ? "block absmax" : "finite value");
}

static void bnb4_same_table_(const SafeTensors *st, const StTensor *t, const float *want, int count) {
    if (memcmp(bnb4_data_(st, t), want, (size_t)count * 4))
        fatal("%s: %s differs from bitsandbytes' %s table", st->path, t->name, count == 16 ? "NF4" : "dynamic 8-bit");
}

static int64_t bnb4_json_int_(const SafeTensors *st, const char *name, const JsonValue *o, const char *key) {
    int64_t v;
    if (json_int64(json_get(o, key), &v) != 0) fatal("%s: %s's quant_state has no integer %s", st->path, name, key);
    return v;
}

static const char *bnb4_json_str_(const SafeTensors *st, const char *name, const JsonValue *o, const char *key) {
    const JsonValue *v = json_get(o, key);
    if (!v || v->type != JSON_STRING) fatal("%s: %s's quant_state has no string %s", st->path, name, key);
    return v->string;
}

// Reads weight NAME, expected [rows, cols]; refuses (one line) whatever disagrees.
static void bnb4_read_weight(const SafeTensors *st, const char *name, int64_t rows, int64_t cols, Bnb4Weight *w) {
    memset(w, 0, sizeof *w);
    w->rows = rows, w->cols = cols, w->n = rows * cols;
    if (bnb4_tensor_(st, name, ".quant_state.bitsandbytes__fp4", "U8", -1, 1))
        fatal("%s: %s is quantized to FP4; only NF4 is supported", st->path, name);
    const StTensor *qs = bnb4_tensor_(st, name, ".quant_state.bitsandbytes__nf4", "U8", -1, 0);
    JsonDoc doc;
    if (json_parse((const char *)bnb4_data_(st, qs), (size_t)qs->numel, &doc) != 0)
        fatal("%s: %s is not JSON: %s", st->path, qs->name, doc.error);
    const JsonValue *o = doc.root;
    if (o->type != JSON_OBJECT) fatal("%s: %s is not a JSON object", st->path, qs->name);
    static const char *known[] = {"quant_type", "blocksize", "dtype", "shape", "nested_blocksize", "nested_dtype", "nested_offset"};
    for (size_t i = 0; i < o->count; i++) {
        size_t k = 0;
        while (k < sizeof known / sizeof *known && strcmp(o->keys[i], known[k])) k++;
        if (k == sizeof known / sizeof *known) fatal("%s: %s's quant_state has an unknown key %.60s", st->path, name, o->keys[i]);
    }
    if (strcmp(bnb4_json_str_(st, name, o, "quant_type"), "nf4")) fatal("%s: %s's quant_state says quant_type is not nf4", st->path, name);
    int64_t bs = bnb4_json_int_(st, name, o, "blocksize");
    if (!bnb4_pow2_block(bs)) fatal("%s: %s's blocksize %lld is not one of bitsandbytes' (32 to 4096, a power of two)", st->path, name, (long long)bs);
    w->blocksize = (int)bs;
    const char *dt = bnb4_json_str_(st, name, o, "dtype");
    if (strcmp(dt, "float32") && strcmp(dt, "bfloat16") && strcmp(dt, "float16"))
        fatal("%s: %s's quant_state dtype %.30s is not float32, bfloat16 or float16", st->path, name, dt);
    snprintf(w->dtype, sizeof w->dtype, "%s", dt);
    const JsonValue *shape = json_get(o, "shape");
    int64_t r, c;
    if (!shape || shape->type != JSON_ARRAY || shape->count != 2 || json_int64(&shape->items[0], &r) || json_int64(&shape->items[1], &c))
        fatal("%s: %s's quant_state shape is not [rows, cols]", st->path, name);
    if (r != rows || c != cols)
        fatal("%s: %s's quant_state shape is [%lld, %lld]; the model needs [%lld, %lld]", st->path, name, (long long)r, (long long)c, (long long)rows, (long long)cols);
    int64_t nb = (w->n + bs - 1) / bs;
    const StTensor *codes = bnb4_tensor_(st, name, "", "U8", (w->n + 1) / 2, 0);
    bnb4_same_table_(st, bnb4_tensor_(st, name, ".quant_map", "F32", 16, 0), nf4_values, 16);
    int nested_json = json_get(o, "nested_offset") != NULL;
    const StTensor *nested = bnb4_tensor_(st, name, ".nested_absmax", "F32", -1, 1);
    if (nested_json != (nested != NULL) || (json_get(o, "nested_blocksize") != NULL) != nested_json || (json_get(o, "nested_dtype") != NULL) != nested_json)
        fatal("%s: %s's quant_state and tensors disagree on double quantization", st->path, name);
    w->codes = (uint8_t *)xmalloc((size_t)codes->numel);
    memcpy(w->codes, bnb4_data_(st, codes), (size_t)codes->numel);
    if (!nested) {
        w->absmax = (float *)xmalloc((size_t)nb * 4);
        bnb4_copy_f32_(st, bnb4_tensor_(st, name, ".absmax", "F32", nb, 0), w->absmax, 1);
    } else {
        int64_t nbs = bnb4_json_int_(st, name, o, "nested_blocksize");
        if (!bnb4_pow2_block(nbs)) fatal("%s: %s's nested_blocksize %lld is not one of bitsandbytes' (32 to 4096, a power of two)", st->path, name, (long long)nbs);
        if (strcmp(bnb4_json_str_(st, name, o, "nested_dtype"), "float32")) fatal("%s: %s's nested_dtype is not float32", st->path, name);
        const JsonValue *off = json_get(o, "nested_offset");
        if (off->type != JSON_NUMBER || !isfinite((float)off->number))
            fatal("%s: %s's nested_offset is not a finite number", st->path, name);
        w->nested_blocksize = (int)nbs;
        w->offset = (float)off->number;  // bitsandbytes writes the fp32 offset's exact double
        w->qabsmax = (uint8_t *)xmalloc((size_t)nb);
        memcpy(w->qabsmax, bnb4_data_(st, bnb4_tensor_(st, name, ".absmax", "U8", nb, 0)), (size_t)nb);
        int64_t nn = (nb + nbs - 1) / nbs;
        bnb4_tensor_(st, name, ".nested_absmax", "F32", nn, 0);
        w->nested_absmax = (float *)xmalloc((size_t)nn * 4);
        bnb4_copy_f32_(st, nested, w->nested_absmax, 1);
        bnb4_same_table_(st, bnb4_tensor_(st, name, ".nested_quant_map", "F32", 256, 0), nf4_dynamic_map, 256);
    }
    json_free(&doc);
}

// The weight in fp32, [rows, cols] row-major; absmax_scratch holds ceil(n / blocksize) floats.
static void bnb4_dequantize(const Bnb4Weight *w, float *absmax_scratch, float *out) {
    int64_t nb = (w->n + w->blocksize - 1) / w->blocksize;
    const float *absmax = w->absmax;
    if (!absmax) {
        nf4_dequantize_absmax(w->qabsmax, w->nested_absmax, w->offset, nb, w->nested_blocksize, absmax_scratch);
        absmax = absmax_scratch;
    }
    nf4_dequantize(w->codes, absmax, w->n, w->blocksize, out);
}

static void bnb4_free(Bnb4Weight *w) {
    free(w->codes), free(w->absmax), free(w->qabsmax), free(w->nested_absmax);
    memset(w, 0, sizeof *w);
}
