// safetensors.h: reading and writing the safetensors format.
//
// Format: 8-byte little-endian header length H, then H bytes of JSON mapping each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative
// to the byte after the header; an optional "__metadata__" object of strings),
// then the data. Readers here check every field against the file size and that no
// two tensors overlap, so a truncated or hostile file is a clear error, never an
// out-of-bounds read or an allocation larger than the file.
#ifndef SFT_SAFETENSORS_H
#define SFT_SAFETENSORS_H

#include "json.h"
#include "util.h"

enum { ST_F32, ST_F16, ST_BF16, ST_OTHER };

typedef struct {
    char name[256];
    int dtype;             // ST_F32 / ST_F16 / ST_BF16 / ST_OTHER
    char dtype_name[16];
    int ndim;
    int64_t shape[8];
    int64_t numel;
    size_t begin, end;     // absolute byte offsets in the file
} StTensor;

typedef struct {
    char path[1024];
    char *buf;
    size_t len;
    StTensor *tensors;
    int count;
} SafeTensors;

static int st_dtype_size(const char *name, int *code) {
    if (!strcmp(name, "F32")) { *code = ST_F32; return 4; }
    if (!strcmp(name, "F16")) { *code = ST_F16; return 2; }
    if (!strcmp(name, "BF16")) { *code = ST_BF16; return 2; }
    *code = ST_OTHER;
    if (!strcmp(name, "F64") || !strcmp(name, "I64") || !strcmp(name, "U64")) return 8;
    if (!strcmp(name, "I32") || !strcmp(name, "U32")) return 4;
    if (!strcmp(name, "I16") || !strcmp(name, "U16")) return 2;
    if (!strcmp(name, "I8") || !strcmp(name, "U8") || !strcmp(name, "BOOL") || !strcmp(name, "F8_E4M3") || !strcmp(name, "F8_E5M2")) return 1;
    return 0;
}

static int st_cmp_begin_(const void *a, const void *b) {
    const StTensor *x = (const StTensor *)a, *y = (const StTensor *)b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

// Parses and checks the header of buf[0..len), the contents of path (buf is
// malloc'ed and now owned by st). Any problem is a fatal error naming the file.
static void st_open_buffer(SafeTensors *st, const char *path, char *buf, size_t len) {
    memset(st, 0, sizeof *st);
    snprintf(st->path, sizeof st->path, "%s", path);
    st->buf = buf;
    st->len = len;
    if (st->len < 8) fatal("%s: file is %zu bytes, too short for a safetensors header", path, st->len);
    uint64_t hlen;
    memcpy(&hlen, st->buf, 8);
    if (hlen > st->len - 8) fatal("%s: header length %llu exceeds the file size %zu: truncated or not safetensors", path, (unsigned long long)hlen, st->len);
    if (hlen > 100000000ull) fatal("%s: header length %llu is implausibly large", path, (unsigned long long)hlen);
    JsonDoc doc;
    if (json_parse(st->buf + 8, (size_t)hlen, &doc) != 0) fatal("%s: header is not valid JSON: %s", path, doc.error);
    if (doc.root->type != JSON_OBJECT) fatal("%s: header is not a JSON object", path);
    size_t data_start = 8 + (size_t)hlen, data_len = st->len - data_start;
    st->tensors = (StTensor *)xcalloc(doc.root->count ? doc.root->count : 1, sizeof(StTensor));
    for (size_t i = 0; i < doc.root->count; i++) {
        const char *name = doc.root->keys[i];
        const JsonValue *v = &doc.root->items[i];
        if (!strcmp(name, "__metadata__")) continue;
        if (strlen(name) >= sizeof st->tensors[0].name) fatal("%s: tensor name too long: %.60s...", path, name);
        StTensor *t = &st->tensors[st->count];
        snprintf(t->name, sizeof t->name, "%s", name);
        if (v->type != JSON_OBJECT) fatal("%s: entry for tensor %s is not an object", path, name);
        const JsonValue *dt = json_get(v, "dtype"), *shape = json_get(v, "shape"), *offs = json_get(v, "data_offsets");
        if (!dt || dt->type != JSON_STRING) fatal("%s: tensor %s has no dtype string", path, name);
        if (!shape || shape->type != JSON_ARRAY) fatal("%s: tensor %s has no shape array", path, name);
        if (!offs || offs->type != JSON_ARRAY || offs->count != 2) fatal("%s: tensor %s has no data_offsets [begin, end]", path, name);
        int esize = st_dtype_size(dt->string, &t->dtype);
        if (!esize) fatal("%s: tensor %s has unknown dtype %.20s", path, name, dt->string);
        snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dt->string);
        if (shape->count > 8) fatal("%s: tensor %s has %zu dimensions (at most 8 supported)", path, name, shape->count);
        t->ndim = (int)shape->count;
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            int64_t s;
            if (json_int64(&shape->items[d], &s) != 0 || s < 0 || s > ((int64_t)1 << 40))
                fatal("%s: tensor %s has an invalid shape entry", path, name);
            t->shape[d] = s;
            numel *= (uint64_t)s;
            if (numel > ((uint64_t)1 << 40)) fatal("%s: tensor %s is implausibly large", path, name);
        }
        t->numel = (int64_t)numel;
        int64_t b, e;
        if (json_int64(&offs->items[0], &b) != 0 || json_int64(&offs->items[1], &e) != 0 || b < 0 || e < b)
            fatal("%s: tensor %s has invalid data_offsets", path, name);
        if ((uint64_t)e > data_len)
            fatal("%s: tensor %s data ends at byte %lld but the data section has only %zu bytes: truncated file", path, name, (long long)e, data_len);
        if ((uint64_t)(e - b) != numel * (uint64_t)esize)
            fatal("%s: tensor %s has %lld data bytes but its shape and dtype %s need %llu", path, name, (long long)(e - b), t->dtype_name,
                  (unsigned long long)(numel * (uint64_t)esize));
        t->begin = data_start + (size_t)b;
        t->end = data_start + (size_t)e;
        st->count++;
    }
    json_free(&doc);
    // no two tensors share bytes, so the tensors together are no larger than the file
    StTensor *sorted = (StTensor *)xmalloc((size_t)(st->count ? st->count : 1) * sizeof(StTensor));
    memcpy(sorted, st->tensors, (size_t)st->count * sizeof(StTensor));
    qsort(sorted, (size_t)st->count, sizeof(StTensor), st_cmp_begin_);
    for (int i = 1, prev = 0; i < st->count; i++) {
        if (sorted[i].begin == sorted[i].end) continue;  // empty: holds no bytes
        if (sorted[prev].end > sorted[i].begin)
            fatal("%s: tensors %s and %s overlap in the data section", path, sorted[prev].name, sorted[i].name);
        prev = i;
    }
    free(sorted);
}

static void st_open(SafeTensors *st, const char *path) {
    size_t len;
    char *buf = read_whole_file(path, &len);
    st_open_buffer(st, path, buf, len);
}

static void st_close(SafeTensors *st) { free(st->buf); free(st->tensors); memset(st, 0, sizeof *st); }

static const StTensor *st_find(const SafeTensors *st, const char *name) {
    for (int i = 0; i < st->count; i++)
        if (!strcmp(st->tensors[i].name, name)) return &st->tensors[i];
    return NULL;
}

static float st_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else {  // subnormal: normalize
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3FF) << 13);
        }
    } else if (exp == 31) bits = sign | 0x7F800000u | (man << 13);
    else bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

// Copies a tensor into out (numel floats), converting F16/BF16 to fp32.
static void st_read_f32(const SafeTensors *st, const StTensor *t, float *out) {
    const uint8_t *src = (const uint8_t *)st->buf + t->begin;
    if (t->dtype == ST_F32) { memcpy(out, src, (size_t)t->numel * 4); return; }
    if (t->dtype == ST_OTHER) fatal("%s: tensor %s has dtype %s; expected F32, F16 or BF16", st->path, t->name, t->dtype_name);
    for (int64_t i = 0; i < t->numel; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        if (t->dtype == ST_BF16) { uint32_t bits = (uint32_t)h << 16; memcpy(&out[i], &bits, 4); }
        else out[i] = st_half_to_float(h);
    }
}

// ---- writing: F32 or BF16 tensors, header padded with spaces to a multiple of 8 ----

typedef struct { char name[256]; int ndim; int64_t shape[4]; const float *data; } StOut;

// fp32 to bf16 rounded to nearest, ties to even (torch's .to(torch.bfloat16)); a NaN
// stays a NaN (the rounding could carry its payload into the exponent).
static uint16_t st_float_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((bits >> 16) | 0x40);
    return (uint16_t)((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// Writes the tensors (fp32 data) to path as F32, or as BF16 when bf16 is 1.
static void st_write(const char *path, const StOut *tensors, int count, int bf16) {
    size_t cap = 256 + (size_t)count * 400, n = 0, esize = bf16 ? 2 : 4;
    char *h = (char *)xmalloc(cap);
    n += (size_t)snprintf(h + n, cap - n, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t offset = 0;
    for (int i = 0; i < count; i++) {
        int64_t numel = 1;
        n += (size_t)snprintf(h + n, cap - n, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", tensors[i].name, bf16 ? "BF16" : "F32");
        for (int d = 0; d < tensors[i].ndim; d++) {
            n += (size_t)snprintf(h + n, cap - n, "%s%lld", d ? "," : "", (long long)tensors[i].shape[d]);
            numel *= tensors[i].shape[d];
        }
        n += (size_t)snprintf(h + n, cap - n, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                              (unsigned long long)(offset + esize * (uint64_t)numel));
        offset += esize * (uint64_t)numel;
    }
    n += (size_t)snprintf(h + n, cap - n, "}");
    while (n % 8) h[n++] = ' ';
    AtomicFile af;
    atomic_open(&af, path);
    uint64_t hlen = n;
    atomic_write(&af, &hlen, 8);
    atomic_write(&af, h, n);
    uint16_t chunk[4096];
    for (int i = 0; i < count; i++) {
        int64_t numel = 1;
        for (int d = 0; d < tensors[i].ndim; d++) numel *= tensors[i].shape[d];
        if (!bf16) { atomic_write(&af, tensors[i].data, 4 * (size_t)numel); continue; }
        for (int64_t at = 0; at < numel; at += 4096) {  // converted in pieces: no copy of the tensor
            int64_t k = numel - at < 4096 ? numel - at : 4096;
            for (int64_t j = 0; j < k; j++) chunk[j] = st_float_to_bf16(tensors[i].data[at + j]);
            atomic_write(&af, chunk, 2 * (size_t)k);
        }
    }
    atomic_commit(&af);
    free(h);
}

static void st_write_f32(const char *path, const StOut *tensors, int count) { st_write(path, tensors, count, 0); }

#endif
