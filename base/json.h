// json.h: a small, strict JSON parser (RFC 8259) for hostile input, and the two
// pieces the writers of JSON files share (a growable buffer, string literals).
//
// Used for Hugging Face config.json and safetensors headers, tokenizer files and
// JSONL datasets. The whole text is parsed into a tree of JsonValue nodes; every
// read is bounds-checked, nesting is limited (JSON_MAX_DEPTH) so a hostile file
// cannot exhaust the stack, and the error message says where parsing stopped.
//
//   JsonDoc doc;
//   if (json_parse(text, len, &doc) != 0) { printf("%s\n", doc.error); ... }
//   const JsonValue *n = json_get(doc.root, "n_embd");
//   int64_t v; if (json_int64(n, &v) != 0) { ...not an integer... }
//   json_free(&doc);
//
// Strings are decoded to UTF-8 (\uXXXX escapes and surrogate pairs included) and
// NUL-terminated; `length` is exact, so a string holding "\u0000" is still whole.
// Lone surrogates and invalid UTF-8 in the input are errors. When an object repeats
// a key, json_get returns the last one (as Python's json does).
#ifndef SFT_JSON_H
#define SFT_JSON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "utf8.h"
#include "util.h"

#define JSON_MAX_DEPTH 512

typedef enum { JSON_NULL, JSON_FALSE, JSON_TRUE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

typedef struct JsonValue {
    JsonType type;
    double number;            // JSON_NUMBER: value as a double
    const char *number_text;  // JSON_NUMBER: the literal as written (not NUL-terminated)
    size_t number_length;
    char *string;             // JSON_STRING: decoded UTF-8, NUL-terminated
    size_t length;            // JSON_STRING: bytes in string, excluding the NUL
    struct JsonValue *items;  // JSON_ARRAY / JSON_OBJECT: the elements / member values
    char **keys;              // JSON_OBJECT: member names (decoded, NUL-terminated)
    size_t *key_lengths;      // JSON_OBJECT: byte length of each name
    size_t count;             // JSON_ARRAY / JSON_OBJECT: number of elements / members
} JsonValue;

typedef struct {
    JsonValue *root;
    char error[160];          // set when json_parse fails: "line L column C: reason"
} JsonDoc;

typedef struct {
    const unsigned char *p, *start, *end;
    const char *error;
    int depth;
} JsonParser_;

static void json_free_value_(JsonValue *v) {
    if (v->type == JSON_STRING) free(v->string);
    if (v->type == JSON_ARRAY || v->type == JSON_OBJECT) {
        for (size_t i = 0; i < v->count; i++) {
            json_free_value_(&v->items[i]);
            if (v->type == JSON_OBJECT) free(v->keys[i]);
        }
        free(v->items);
        free(v->keys);
        free(v->key_lengths);
    }
    v->type = JSON_NULL;
}

static void json_free(JsonDoc *doc) {
    if (doc->root) { json_free_value_(doc->root); free(doc->root); }
    doc->root = NULL;
}

static void json_skip_space_(JsonParser_ *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static int json_fail_(JsonParser_ *ps, const char *why) { if (!ps->error) ps->error = why; return -1; }

static int json_hex4_(JsonParser_ *ps, unsigned *out) {
    if (ps->end - ps->p < 4) return json_fail_(ps, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = ps->p[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return json_fail_(ps, "bad hex digit in \\u escape");
        v = v * 16 + d;
    }
    ps->p += 4;
    *out = v;
    return 0;
}

// Parses a string starting at the opening quote. The decoded text is never longer
// than the escaped text, so one allocation of the raw length suffices.
static int json_parse_string_(JsonParser_ *ps, char **out, size_t *out_len) {
    ps->p++;  // opening quote
    const unsigned char *q = ps->p;
    while (q < ps->end && *q != '"') q += (*q == '\\' && q + 1 < ps->end) ? 2 : 1;
    if (q >= ps->end) return json_fail_(ps, "unterminated string");
    char *buf = (char *)malloc((size_t)(q - ps->p) + 1);
    if (!buf) return json_fail_(ps, "out of memory");
    size_t n = 0;
    while (*ps->p != '"') {
        unsigned c = *ps->p;
        if (c < 0x20) { free(buf); return json_fail_(ps, "control character in string"); }
        if (c == '\\') {
            ps->p++;
            unsigned e = *ps->p++;
            switch (e) {
            case '"': buf[n++] = '"'; break;
            case '\\': buf[n++] = '\\'; break;
            case '/': buf[n++] = '/'; break;
            case 'b': buf[n++] = '\b'; break;
            case 'f': buf[n++] = '\f'; break;
            case 'n': buf[n++] = '\n'; break;
            case 'r': buf[n++] = '\r'; break;
            case 't': buf[n++] = '\t'; break;
            case 'u': {
                unsigned cp;
                if (json_hex4_(ps, &cp)) { free(buf); return -1; }
                if (cp >= 0xDC00 && cp <= 0xDFFF) { free(buf); return json_fail_(ps, "unpaired low surrogate in \\u escape"); }
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    unsigned lo;
                    if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u') { free(buf); return json_fail_(ps, "unpaired high surrogate in \\u escape"); }
                    ps->p += 2;
                    if (json_hex4_(ps, &lo)) { free(buf); return -1; }
                    if (lo < 0xDC00 || lo > 0xDFFF) { free(buf); return json_fail_(ps, "unpaired high surrogate in \\u escape"); }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                n += utf8_encode(buf + n, cp);
                break;
            }
            default: free(buf); return json_fail_(ps, "unknown escape in string");
            }
        } else {
            uint32_t cp;
            int len = utf8_decode(ps->p, (size_t)(q - ps->p), &cp);
            if (!len) { free(buf); return json_fail_(ps, "invalid UTF-8 in string"); }
            memcpy(buf + n, ps->p, (size_t)len);
            n += (size_t)len;
            ps->p += len;
        }
    }
    ps->p++;  // closing quote
    buf[n] = 0;
    *out = buf;
    *out_len = n;
    return 0;
}

static int json_parse_number_(JsonParser_ *ps, JsonValue *v) {
    const unsigned char *s = ps->p;
    if (ps->p < ps->end && *ps->p == '-') ps->p++;
    if (ps->p >= ps->end) return json_fail_(ps, "truncated number");
    if (*ps->p == '0') ps->p++;
    else if (*ps->p >= '1' && *ps->p <= '9') { while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++; }
    else return json_fail_(ps, "invalid number");
    if (ps->p < ps->end && *ps->p == '.') {
        ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return json_fail_(ps, "invalid number: digit expected after '.'");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-')) ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return json_fail_(ps, "invalid number: digit expected in exponent");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    }
    size_t len = (size_t)(ps->p - s);
    char tmp[64];
    if (len < sizeof tmp) { memcpy(tmp, s, len); tmp[len] = 0; v->number = strtod(tmp, NULL); }
    else {  // very long literal: strtod needs a NUL-terminated copy
        char *big = (char *)malloc(len + 1);
        if (!big) return json_fail_(ps, "out of memory");
        memcpy(big, s, len); big[len] = 0;
        v->number = strtod(big, NULL);
        free(big);
    }
    v->type = JSON_NUMBER;
    v->number_text = (const char *)s;
    v->number_length = len;
    return 0;
}

static int json_parse_value_(JsonParser_ *ps, JsonValue *v);

// Appends to a growable array of values (and keys, for objects).
static int json_push_(JsonParser_ *ps, JsonValue *v, size_t *cap, int with_keys) {
    if (v->count < *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 4;
    JsonValue *items = (JsonValue *)realloc(v->items, nc * sizeof(JsonValue));
    if (!items) return json_fail_(ps, "out of memory");
    v->items = items;
    if (with_keys) {
        char **keys = (char **)realloc(v->keys, nc * sizeof(char *));
        if (!keys) return json_fail_(ps, "out of memory");
        v->keys = keys;
        size_t *kl = (size_t *)realloc(v->key_lengths, nc * sizeof(size_t));
        if (!kl) return json_fail_(ps, "out of memory");
        v->key_lengths = kl;
    }
    *cap = nc;
    return 0;
}

static int json_parse_container_(JsonParser_ *ps, JsonValue *v, int is_object) {
    if (++ps->depth > JSON_MAX_DEPTH) return json_fail_(ps, "nesting too deep");
    v->type = is_object ? JSON_OBJECT : JSON_ARRAY;
    char close = is_object ? '}' : ']';
    size_t cap = 0;
    ps->p++;
    json_skip_space_(ps);
    if (ps->p < ps->end && *ps->p == close) { ps->p++; ps->depth--; return 0; }
    for (;;) {
        json_skip_space_(ps);
        if (json_push_(ps, v, &cap, is_object)) return -1;
        JsonValue *item = &v->items[v->count];
        memset(item, 0, sizeof *item);
        if (is_object) {
            if (ps->p >= ps->end || *ps->p != '"') return json_fail_(ps, "expected a string key");
            char *key; size_t klen;
            if (json_parse_string_(ps, &key, &klen)) return -1;
            v->keys[v->count] = key;
            v->key_lengths[v->count] = klen;
            v->count++;  // counted now so json_free releases the key even if the value fails
            json_skip_space_(ps);
            if (ps->p >= ps->end || *ps->p != ':') return json_fail_(ps, "expected ':' after key");
            ps->p++;
            json_skip_space_(ps);
            if (json_parse_value_(ps, item)) return -1;
        } else {
            v->count++;
            if (json_parse_value_(ps, item)) return -1;
        }
        json_skip_space_(ps);
        if (ps->p >= ps->end) return json_fail_(ps, is_object ? "unterminated object" : "unterminated array");
        if (*ps->p == ',') { ps->p++; continue; }
        if (*ps->p == close) { ps->p++; break; }
        return json_fail_(ps, is_object ? "expected ',' or '}' in object" : "expected ',' or ']' in array");
    }
    ps->depth--;
    return 0;
}

static int json_literal_(JsonParser_ *ps, const char *word, JsonType type, JsonValue *v) {
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) return json_fail_(ps, "invalid literal");
    ps->p += n;
    v->type = type;
    return 0;
}

static int json_parse_value_(JsonParser_ *ps, JsonValue *v) {
    json_skip_space_(ps);
    if (ps->p >= ps->end) return json_fail_(ps, "unexpected end of input");
    switch (*ps->p) {
    case '{': return json_parse_container_(ps, v, 1);
    case '[': return json_parse_container_(ps, v, 0);
    case '"': v->type = JSON_STRING; v->string = NULL;
        if (json_parse_string_(ps, &v->string, &v->length)) { v->type = JSON_NULL; return -1; }
        return 0;
    case 't': return json_literal_(ps, "true", JSON_TRUE, v);
    case 'f': return json_literal_(ps, "false", JSON_FALSE, v);
    case 'n': return json_literal_(ps, "null", JSON_NULL, v);
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) return json_parse_number_(ps, v);
        return json_fail_(ps, "unexpected character");
    }
}

// Parses exactly one JSON value (surrounding whitespace allowed). Returns 0 on
// success; otherwise -1 with doc->error set and nothing left to free.
static int json_parse(const char *text, size_t len, JsonDoc *doc) {
    JsonParser_ ps = {(const unsigned char *)text, (const unsigned char *)text, (const unsigned char *)text + len, NULL, 0};
    doc->error[0] = 0;
    doc->root = (JsonValue *)calloc(1, sizeof(JsonValue));
    if (!doc->root) { snprintf(doc->error, sizeof doc->error, "out of memory"); return -1; }
    int rc = json_parse_value_(&ps, doc->root);
    if (rc == 0) {
        json_skip_space_(&ps);
        if (ps.p != ps.end) rc = json_fail_(&ps, "unexpected text after the JSON value");
    }
    if (rc != 0) {
        int line = 1, col = 1;
        for (const unsigned char *c = ps.start; c < ps.p && c < ps.end; c++) {
            if (*c == '\n') { line++; col = 1; } else col++;
        }
        snprintf(doc->error, sizeof doc->error, "line %d column %d: %s", line, col, ps.error ? ps.error : "parse error");
        json_free(doc);
        return -1;
    }
    return 0;
}

// The member named key of an object (the last one if repeated), or NULL.
static const JsonValue *json_get(const JsonValue *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT) return NULL;
    size_t klen = strlen(key);
    for (size_t i = obj->count; i-- > 0;)
        if (obj->key_lengths[i] == klen && memcmp(obj->keys[i], key, klen) == 0) return &obj->items[i];
    return NULL;
}

// Reads an integer-valued number exactly (no fraction, no exponent, fits in int64).
static int json_int64(const JsonValue *v, int64_t *out) {
    if (!v || v->type != JSON_NUMBER || v->number_length > 20) return -1;
    int64_t acc = 0;
    size_t i = 0;
    int neg = 0;
    if (v->number_text[0] == '-') { neg = 1; i = 1; }
    if (i >= v->number_length) return -1;
    for (; i < v->number_length; i++) {
        char c = v->number_text[i];
        if (c < '0' || c > '9') return -1;
        int d = c - '0';
        if (acc > (INT64_MAX - d) / 10) return -1;
        acc = acc * 10 + d;
    }
    *out = neg ? -acc : acc;
    return 0;
}

// ---- writing JSON text: a growable buffer (fatal when out of memory) and string literals
typedef struct { char *p; size_t n, cap; } JsonBuf;

static void json_buf_put(JsonBuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 1024;
        while (nc < b->n + n + 1) nc *= 2;
        char *p = (char *)realloc(b->p, nc);
        if (!p) fatal("out of memory building JSON text (%zu bytes)", nc);
        b->p = p; b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void json_buf_puts(JsonBuf *b, const char *s) { json_buf_put(b, s, strlen(s)); }
static void json_buf_printf(JsonBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void json_buf_printf(JsonBuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    json_buf_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

// s[0..n) as a JSON string: quotes, backslashes and control characters escaped.
static void json_buf_string(JsonBuf *b, const char *s, size_t n) {
    json_buf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { json_buf_put(b, "\\", 1); json_buf_put(b, s + i, 1); }
        else if (c == '\n') json_buf_puts(b, "\\n");
        else if (c < 0x20) json_buf_printf(b, "\\u%04x", c);
        else json_buf_put(b, s + i, 1);
    }
    json_buf_put(b, "\"", 1);
}

#endif
