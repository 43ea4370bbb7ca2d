// gpt2_files.h: GPT-2's tokenizer files, read and written: a vocabulary (OpenAI's
// encoder.json, Hugging Face's vocab.json) and merges (vocab.bpe, merges.txt), with
// added_tokens.json beside them as transformers saves a slow tokenizer's added tokens.
// Tokens are spelled in GPT-2's printable byte alphabet (bytes_to_unicode), which
// tokenizer.json's byte-level models share: their vocabulary and merges are read and
// written by the functions here too.
// Not here: tokenizer.json itself (tokenizer_json.h), choosing between the two
// (bpe_load in bpe.h).
#ifndef TOK_GPT2_FILES_H
#define TOK_GPT2_FILES_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "../base/json.h"
#include "../base/utf8.h"
#include "vocab.h"

// ---------------------------------------------------------------- bytes <-> GPT-2 printable alphabet

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the other 68 to U+0100...
static int bpe_byte_to_cp_(int b) {
    static int table[256], ready = 0;
    if (!ready) {
        int n = 0;
        for (int c = 0; c < 256; c++) {
            int printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);
            table[c] = printable ? c : 256 + n++;
        }
        ready = 1;
    }
    return table[b];
}
static int bpe_cp_to_byte_(uint32_t cp) {
    static int16_t inv[256 + 68];
    static int ready = 0;
    if (!ready) {
        for (int c = 0; c < 256 + 68; c++) inv[c] = -1;
        for (int b = 0; b < 256; b++) inv[bpe_byte_to_cp_(b)] = (int16_t)b;
        ready = 1;
    }
    return cp < 256 + 68 ? inv[cp] : -1;
}
// The order of the first 256 ids in GPT-2's encoder.json: printable bytes, then the rest.
static int bpe_gpt2_byte_order_(int i) {
    static int order[256], ready = 0;
    if (!ready) {
        int k = 0;
        for (int pass = 0; pass < 2; pass++)
            for (int c = 0; c < 256; c++) {
                int printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);
                if (printable == (pass == 0)) order[k++] = c;
            }
        ready = 1;
    }
    return order[i];
}

// Converts a token string in GPT-2's printable alphabet to bytes. Returns the byte
// count, or -1 if a character is not in the alphabet (or the text is not UTF-8).
static long bpe_unmap_(const char *s, size_t n, char *out) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, k = 0;
    while (i < n) {
        uint32_t cp;
        int l = utf8_decode(u + i, n - i, &cp);
        if (!l) return -1;
        int b = bpe_cp_to_byte_(cp);
        if (b < 0) return -1;
        out[k++] = (char)b;
        i += (size_t)l;
    }
    return (long)k;
}
// Bytes -> GPT-2 printable alphabet (UTF-8). out needs 2*n bytes.
static size_t bpe_map_(const char *s, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += utf8_encode(out + k, (uint32_t)bpe_byte_to_cp_((unsigned char)s[i]));
    return k;
}

// ---------------------------------------------------------------- loading

// Ids may leave holes, but no id may reach this bound for a file of n tokens (the
// id arrays are sized by the largest id, so a few bytes of JSON must not be able to
// ask for hundreds of megabytes).
static int64_t bpe_id_limit_(size_t n) {
    int64_t lim = 2 * (int64_t)n + 256;
    return lim < BPE_MAX_IDS ? lim : BPE_MAX_IDS;
}

// Adds one vocabulary entry whose key is in GPT-2's printable alphabet. Keys with
// characters outside it (only sensible for added tokens) are kept as raw UTF-8.
static int bpe_load_vocab_entry_(BpeTokenizer *t, const char *file, const char *key, size_t klen, const JsonValue *v,
                                 int64_t id_limit, char *err, size_t errlen) {
    int64_t id;
    if (json_int64(v, &id) || id < 0 || id >= id_limit)
        return bpe_err_(err, errlen, BPE_EFORMAT, "%s: token \"%.80s\" has an invalid id (not an integer in 0..%lld)",
                        file, key, (long long)id_limit - 1);
    char stack[256];
    char *buf = klen <= sizeof stack ? stack : (char *)malloc(klen);
    if (!buf) return bpe_err_(err, errlen, BPE_ENOMEM, "%s: out of memory", file);
    long bl = bpe_unmap_(key, klen, buf);
    const char *bytes = bl >= 0 ? buf : key;
    size_t nb = bl >= 0 ? (size_t)bl : klen;
    int rc = 0;
    if (id < t->n_ids && t->tok_len[id] >= 0)
        rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: duplicate id %ld (tokens \"%.80s\" and another)", file, (long)id, key);
    else if (bpe_vmap_find_(t, bytes, nb) >= 0)
        rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: duplicate token \"%.80s\"", file, key);
    else if (bpe_set_token_(t, (int32_t)id, bytes, nb) || bpe_vmap_insert_(t, (int32_t)id))
        rc = bpe_err_(err, errlen, BPE_ENOMEM, "%s: out of memory", file);
    if (buf != stack) free(buf);
    return rc;
}

static int bpe_load_vocab_json_(BpeTokenizer *t, const char *file, const JsonValue *obj, int64_t id_limit, char *err, size_t errlen) {
    if (!obj || obj->type != JSON_OBJECT)
        return bpe_err_(err, errlen, BPE_EFORMAT, "%s: the vocabulary is not a JSON object of token -> id", file);
    if (obj->count == 0) return bpe_err_(err, errlen, BPE_EFORMAT, "%s: the vocabulary is empty", file);
    for (size_t i = 0; i < obj->count; i++) {
        int rc = bpe_load_vocab_entry_(t, file, obj->keys[i], obj->key_lengths[i], &obj->items[i], id_limit, err, errlen);
        if (rc) return rc;
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_id[b] = bpe_vmap_find_(t, &c, 1);
        if (t->byte_id[b] < 0)
            return bpe_err_(err, errlen, BPE_EFORMAT, "%s: no token for byte 0x%02x (not a byte-level BPE vocabulary)", file, b);
    }
    return 0;
}

// One merge "a b" (a and b in the printable alphabet) at the next rank.
static int bpe_load_merge_(BpeTokenizer *t, const char *file, long where, const char *a, size_t na, const char *b,
                           size_t nb, char *err, size_t errlen) {
    char stack[512];
    char *buf = na + nb <= sizeof stack ? stack : (char *)malloc(na + nb);
    if (!buf) return bpe_err_(err, errlen, BPE_ENOMEM, "%s: out of memory", file);
    int rc = 0;
    long la = bpe_unmap_(a, na, buf), lb = la >= 0 ? bpe_unmap_(b, nb, buf + la) : -1;
    int32_t ia = la >= 0 ? bpe_vmap_find_(t, buf, (size_t)la) : -1;
    int32_t ib = lb >= 0 ? bpe_vmap_find_(t, buf + la, (size_t)lb) : -1;
    int32_t ir = (ia >= 0 && ib >= 0) ? bpe_vmap_find_(t, buf, (size_t)(la + lb)) : -1;
    if (ia < 0) rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: merge %ld names unknown token \"%.*s\"", file, where, (int)(na > 80 ? 80 : na), a);
    else if (ib < 0) rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: merge %ld names unknown token \"%.*s\"", file, where, (int)(nb > 80 ? 80 : nb), b);
    else if (ir < 0) rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: merge %ld: the merged token \"%.*s%.*s\" is not in the vocabulary",
                                   file, where, (int)(na > 80 ? 80 : na), a, (int)(nb > 80 ? 80 : nb), b);
    else {
        int mr = bpe_add_merge_(t, ia, ib, ir);
        if (mr == BPE_EINVAL) rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: merge %ld (\"%.*s %.*s\") is listed twice", file, where,
                                            (int)(na > 80 ? 80 : na), a, (int)(nb > 80 ? 80 : nb), b);
        else if (mr) rc = bpe_err_(err, errlen, BPE_ENOMEM, "%s: out of memory", file);
    }
    if (buf != stack) free(buf);
    return rc;
}

// vocab.bpe / merges.txt: optional "#version" line, then one "a b" per line.
static int bpe_load_merges_text_(BpeTokenizer *t, const char *file, const char *text, size_t len, char *err, size_t errlen) {
    size_t i = 0;
    long line = 0;
    while (i < len) {
        size_t e = i;
        while (e < len && text[e] != '\n') e++;
        line++;
        size_t le = e;
        if (le > i && text[le - 1] == '\r') le--;
        const char *ln = text + i;
        size_t n = le - i;
        i = e + 1;
        if (n == 0) continue;
        if (line == 1 && n >= 8 && memcmp(ln, "#version", 8) == 0) continue;
        const char *sp = (const char *)memchr(ln, ' ', n);
        if (!sp || sp == ln || sp == ln + n - 1 || memchr(sp + 1, ' ', (size_t)(ln + n - sp - 1)))
            return bpe_err_(err, errlen, BPE_EFORMAT, "%s: line %ld: expected two tokens separated by one space", file, line);
        int rc = bpe_load_merge_(t, file, line, ln, (size_t)(sp - ln), sp + 1, (size_t)(ln + n - sp - 1), err, errlen);
        if (rc) return rc;
    }
    return 0;
}

// Tokens that are neither single bytes nor made by a merge (GPT-2's "<|endoftext|>")
// are special tokens.
static int bpe_mark_unmerged_specials_(BpeTokenizer *t) {
    uint8_t *made = (uint8_t *)calloc((size_t)t->n_ids + 1, 1);
    if (!made) return BPE_ENOMEM;
    for (int b = 0; b < 256; b++) made[t->byte_id[b]] = 1;
    for (int32_t r = 0; r < t->n_merges; r++) made[t->merges[3 * r + 2]] = 1;
    int rc = 0;
    for (int32_t id = 0; id < t->n_ids && !rc; id++)
        if (t->tok_len[id] > 0 && !made[id]) rc = bpe_mark_special_(t, id);
    free(made);
    return rc;
}

// The contents of a vocabulary (encoder.json / vocab.json) and a merges file
// (vocab.bpe / merges.txt); the paths only name them in errors.
static int bpe_load_gpt2_buffers(BpeTokenizer **out, const char *vocab_path, const char *vtext, size_t vlen, const char *merges_path,
                                 const char *mtext, size_t mlen, char *err, size_t errlen) {
    *out = NULL;
    int rc = 0;
    BpeTokenizer *t = bpe_new_();
    JsonDoc doc;
    memset(&doc, 0, sizeof doc);
    if (!t) rc = bpe_err_(err, errlen, BPE_ENOMEM, "out of memory");
    else if (json_parse(vtext, vlen, &doc)) rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: bad JSON: %s", vocab_path, doc.error);
    else {
        rc = bpe_load_vocab_json_(t, vocab_path, doc.root, bpe_id_limit_(doc.root->count), err, errlen);
        json_free(&doc);
        if (!rc) rc = bpe_load_merges_text_(t, merges_path, mtext, mlen, err, errlen);
        if (!rc && bpe_mark_unmerged_specials_(t)) rc = bpe_err_(err, errlen, BPE_ENOMEM, "out of memory");
    }
    if (rc) { bpe_free(t); return rc; }
    *out = t;
    return 0;
}

static int bpe_load_gpt2_files(BpeTokenizer **out, const char *vocab_path, const char *merges_path, char *err, size_t errlen) {
    *out = NULL;
    char *vtext = NULL, *mtext = NULL;
    size_t vlen, mlen;
    int rc = bpe_read_file_(vocab_path, &vtext, &vlen, err, errlen);
    if (rc) return rc;
    rc = bpe_read_file_(merges_path, &mtext, &mlen, err, errlen);
    if (!rc) rc = bpe_load_gpt2_buffers(out, vocab_path, vtext, vlen, merges_path, mtext, mlen, err, errlen);
    free(vtext); free(mtext);
    return rc;
}


// A directory with encoder.json + vocab.bpe (OpenAI) or vocab.json + merges.txt (Hugging Face).
// added_tokens.json beside GPT-2's files, as transformers saves a slow tokenizer's added
// tokens: {"<|im_start|>": 50257, ...}. Each becomes a special token with its id: one the
// vocabulary has must be that token's id, the others must follow the vocabulary in order.
static int bpe_load_added_tokens_json_(BpeTokenizer *t, const char *path, char *err, size_t errlen) {
    char *text;
    size_t len;
    int rc = bpe_read_file_(path, &text, &len, err, errlen);
    if (rc) return rc;
    JsonDoc doc;
    if (json_parse(text, len, &doc) != 0) { rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: invalid JSON: %s", path, doc.error); free(text); return rc; }
    const JsonValue *r = doc.root;  // its numbers point into text
    size_t n = r->type == JSON_OBJECT ? r->count : 0;
    if (r->type != JSON_OBJECT) rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: expected an object of token: id", path);
    int64_t *ids = (int64_t *)calloc(n ? n : 1, sizeof *ids);
    if (!ids) rc = bpe_err_(err, errlen, BPE_ENOMEM, "out of memory");
    for (size_t k = 0; !rc && k < n; k++) {  // tokens the vocabulary has, and every id checked
        if (json_int64(&r->items[k], &ids[k]) != 0 || ids[k] < 0 || ids[k] >= BPE_MAX_IDS)
            rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: \"%.80s\": not a token id", path, r->keys[k]);
        int32_t have = rc ? -1 : bpe_token_id(t, r->keys[k], r->key_lengths[k]), got;
        if (have >= 0 && have != ids[k])
            rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: \"%.80s\" is token %d in the vocabulary, not %lld", path, r->keys[k], (int)have, (long long)ids[k]);
        else if (have >= 0) rc = bpe_add_special(t, r->keys[k], r->key_lengths[k], &got, err, errlen);
        else ids[k] = -1 - ids[k];  // new: added below, in id order
    }
    for (int32_t next = t->n_ids; !rc; next++) {  // the new ones: ids n_ids, n_ids + 1, ... without gaps
        size_t k = 0, left = 0;
        for (size_t i = 0; i < n; i++) { left += ids[i] < 0; if (ids[i] == -1 - (int64_t)next) k = i + 1; }
        if (!left) break;
        if (!k) { rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: the new tokens' ids must follow the vocabulary's %d tokens without gaps", path, (int)next); break; }
        int32_t got;
        rc = bpe_add_special(t, r->keys[k - 1], r->key_lengths[k - 1], &got, err, errlen);
        ids[k - 1] = next;
    }
    free(ids);
    json_free(&doc);
    free(text);
    return rc;
}

static int bpe_load_gpt2_dir(BpeTokenizer **out, const char *dir, char *err, size_t errlen) {
    *out = NULL;
    struct stat st;
    if (stat(dir, &st) != 0) return bpe_err_(err, errlen, BPE_EIO, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return bpe_err_(err, errlen, BPE_EIO, "%s: not a directory", dir);
    size_t n = strlen(dir) + 32;
    char *v = (char *)malloc(n), *m = (char *)malloc(n);
    if (!v || !m) { free(v); free(m); return bpe_err_(err, errlen, BPE_ENOMEM, "out of memory"); }
    int rc;
    snprintf(v, n, "%s/encoder.json", dir); snprintf(m, n, "%s/vocab.bpe", dir);
    if (!bpe_file_exists_(v) && !bpe_file_exists_(m)) {
        snprintf(v, n, "%s/vocab.json", dir); snprintf(m, n, "%s/merges.txt", dir);
        if (!bpe_file_exists_(v) && !bpe_file_exists_(m)) {
            free(v); free(m);
            return bpe_err_(err, errlen, BPE_EIO, "%s: no encoder.json + vocab.bpe or vocab.json + merges.txt in this directory", dir);
        }
    }
    rc = bpe_load_gpt2_files(out, v, m, err, errlen);
    snprintf(v, n, "%s/added_tokens.json", dir);
    if (!rc && bpe_file_exists_(v)) rc = bpe_load_added_tokens_json_(*out, v, err, errlen);
    if (rc && *out) { bpe_free(*out); *out = NULL; }
    free(v); free(m);
    return rc;
}

// ---------------------------------------------------------------- saving

static void bpe_json_write_string_(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { fputc('\\', f); fputc(c, f); }
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

// Token id in GPT-2's printable alphabet (buf needs 2 * length bytes).
static size_t bpe_token_mapped_(const BpeTokenizer *t, int32_t id, char *buf) {
    return bpe_map_(t->tok_data + t->tok_off[id], (size_t)t->tok_len[id], buf);
}

static int bpe_max_token_len_(const BpeTokenizer *t) {
    int32_t m = 1;
    for (int32_t i = 0; i < t->n_ids; i++) if (t->tok_len[i] > m) m = t->tok_len[i];
    return m;
}

static int bpe_close_(FILE *f, const char *path, char *err, size_t errlen) {
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return bpe_err_(err, errlen, BPE_EIO, "%s: write error", path);
    return 0;
}

// Writes the vocabulary as a JSON object (id order); specials included (as GPT-2 does).
static void bpe_write_vocab_object_(const BpeTokenizer *t, FILE *f, char *buf, int skip_specials) {
    fputc('{', f);
    int first = 1;
    for (int32_t id = 0; id < t->n_ids; id++) {
        if (t->tok_len[id] < 0 || (skip_specials && t->tok_special[id])) continue;
        if (!first) fputs(", ", f);
        first = 0;
        bpe_json_write_string_(f, buf, bpe_token_mapped_(t, id, buf));
        fprintf(f, ": %d", (int)id);
    }
    fputc('}', f);
}

// encoder.json + vocab.bpe in dir (created if missing).
static int bpe_save_gpt2_dir(const BpeTokenizer *t, const char *dir, char *err, size_t errlen) {
    if (t->sp || t->n_norm) return bpe_err_(err, errlen, BPE_EINVAL, "%s: GPT-2 files cannot describe this tokenizer (%s)", dir,
                                            t->sp ? "SentencePiece-style" : "it has a normalizer");
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) return bpe_err_(err, errlen, BPE_EIO, "%s: cannot create directory: %s", dir, strerror(errno));
    size_t n = strlen(dir) + 32;
    char *path = (char *)malloc(n);
    char *buf = (char *)malloc(4 * (size_t)bpe_max_token_len_(t) + 8);
    if (!path || !buf) { free(path); free(buf); return bpe_err_(err, errlen, BPE_ENOMEM, "out of memory"); }
    int rc = 0;
    snprintf(path, n, "%s/encoder.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f) rc = bpe_err_(err, errlen, BPE_EIO, "%s: cannot create: %s", path, strerror(errno));
    else {
        bpe_write_vocab_object_(t, f, buf, 0);
        fputc('\n', f);
        rc = bpe_close_(f, path, err, errlen);
    }
    if (!rc) {
        snprintf(path, n, "%s/vocab.bpe", dir);
        f = fopen(path, "wb");
        if (!f) rc = bpe_err_(err, errlen, BPE_EIO, "%s: cannot create: %s", path, strerror(errno));
        else {
            fputs("#version: 0.2\n", f);
            for (int32_t r = 0; r < t->n_merges; r++) {
                fwrite(buf, 1, bpe_token_mapped_(t, t->merges[3 * r], buf), f);
                fputc(' ', f);
                fwrite(buf, 1, bpe_token_mapped_(t, t->merges[3 * r + 1], buf), f);
                fputc('\n', f);
            }
            rc = bpe_close_(f, path, err, errlen);
        }
    }
    free(path); free(buf);
    return rc;
}

#endif
