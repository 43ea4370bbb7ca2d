// vocab.h: the BpeTokenizer and its tables: the vocabulary (id <-> bytes, a hash map
// from bytes to id), the merge table (pair -> rank -> result), the added and special
// tokens (a trie for matching them in text); creating, filling and freeing it, and the
// public queries (vocabulary size, id of a text, fingerprint, special or not,
// bpe_add_special). Also the small helpers every part uses: error lines, growing
// arrays, the hash, reading a file.
// Not here: filling it from files (gpt2_files.h, tokenizer_json.h), using it to encode
// and decode (encode.h). Callers include tokenizer/bpe.h, which includes this.
#ifndef TOK_VOCAB_H
#define TOK_VOCAB_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "../base/utf8.h"

#define BPE_ERR_LEN 512
enum { BPE_OK = 0, BPE_EIO = 1, BPE_EFORMAT = 2, BPE_ERANGE = 3, BPE_ENOMEM = 4, BPE_EINVAL = 5 };
#define BPE_MAX_IDS (1 << 24)

typedef struct { int32_t *data; size_t n, cap; } BpeIds;
typedef struct { char *data; size_t n, cap; } BpeBytes;

typedef struct {
    uint64_t hash;
    uint32_t key_off, key_len, val_off, val_len;
} BpeCacheEntry_;

typedef struct BpeTokenizer {
    int32_t n_ids;            // ids are 0..n_ids-1; unused ids have tok_len -1
    int32_t cap_ids;
    int64_t *tok_off;         // token bytes: tok_data + tok_off[id], tok_len[id] bytes
    int32_t *tok_len;
    uint8_t *tok_special;     // added tokens: 1 special, 2 not special (matched in any text); 0 others
    char *tok_data;
    size_t tok_data_n, tok_data_cap;
    int32_t byte_id[256];     // id of the single-byte token for each byte
    int32_t *vmap;            // open addressing: bytes -> id of a non-special token, -1 empty
    size_t vmap_cap;
    int32_t n_merges, cap_merges;
    int32_t *merges;          // 3 per rank: left id, right id, result id
    uint64_t *pmap_keys;      // (left << 32 | right) -> rank; UINT64_MAX empty
    int32_t *pmap_rank;
    size_t pmap_cap;
    int32_t *specials;        // ids of added tokens (special or not), in the order they were added
    int32_t n_specials, cap_specials;
    uint8_t special_first[256]; // bit 0/1: some special / non-special added token starts with this byte
    int pretok;               // BPE_PRE_*: how text is split into pre-tokens
    int ignore_merges;        // 1: a pre-token that is a vocabulary token is that one id (tiktoken, Llama 3)
    int merge_hf;             // 1: merge one pair at a time as Hugging Face does (tokenizer.json), 0: GPT-2's passes
    uint8_t norm[4];          // normalizers applied in order before pre-tokenization (BPE_NORM_*)
    int n_norm;
    BpeBytes norm_buf;        // scratch: the normalized text
    uint32_t *nfc_buf; size_t nfc_cap;  // scratch: code points being normalized
    // SentencePiece-style models (sp = 1: Gemma 3, Llama 2): tokens are strings of
    // characters ("\xe2\x96\x81" for a space, "<0x0A>" for a byte), tok_data holds what
    // each decodes to. The strings of the model's ids are kept here to look them up.
    int sp;
    int sp_split_space;       // pre_tokenizer Split(" ", MergedWithPrevious)
    int sp_metaspace;         // pre_tokenizer Metaspace: BPE_META_* (0: none)
    int sp_meta_split;        // Metaspace split: pieces begin at each "\xe2\x96\x81"
    int sp_byte_fallback;     // a character without a token becomes its <0xNN> byte tokens
    int32_t sp_byte_tok[256]; // the <0xNN> ids
    int32_t sp_unk;           // id of model.unk_token, or -1: characters without a token are dropped
    int sp_fuse_unk;          // consecutive unknown characters give one unk
    int sp_strip_space;       // decoder Strip(" ", 1, 0): decoding drops one leading space
    char *piece_data; size_t piece_data_n, piece_data_cap;
    int64_t *piece_off; int32_t *piece_len; int32_t n_pieces;  // ids 0..n_pieces-1; -1: no string
    uint64_t *piece_map; size_t piece_map_cap;  // string -> (hash >> 32) << 32 | id, open addressing, UINT64_MAX empty
    // added tokens as a trie over their text (rebuilt after a change), for matching in text
    int32_t *trie;            // 4 per node: first child, next sibling, byte, id of the token ending here (-1 none)
    size_t trie_n, trie_cap;
    int trie_dirty;
    // pre-token cache
    BpeCacheEntry_ *cache;
    size_t cache_n, cache_cap;
    uint32_t *cache_slots;    // entry index + 1, 0 empty
    size_t cache_slots_cap;
    char *cache_keys; size_t cache_keys_n, cache_keys_cap;
    int32_t *cache_vals; size_t cache_vals_n, cache_vals_cap;
    // scratch for merging one word
    int32_t *w_id, *w_prev, *w_next;
    uint64_t *w_heap;
    size_t w_cap;
    int32_t *w_pending;
} BpeTokenizer;

// ---------------------------------------------------------------- utilities

static int bpe_err_(char *err, size_t errlen, int code, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        for (char *c = err; *c; c++) if (*c == '\n' || *c == '\r') *c = ' ';  // one line
    }
    return code;
}

static int bpe_grow_(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 16;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

static int bpe_ids_push(BpeIds *v, int32_t id) {
    if (v->n == v->cap && bpe_grow_((void **)&v->data, &v->cap, v->n + 1, sizeof(int32_t))) return BPE_ENOMEM;
    v->data[v->n++] = id;
    return 0;
}
static int bpe_bytes_append(BpeBytes *b, const void *s, size_t n) {
    if (bpe_grow_((void **)&b->data, &b->cap, b->n + n + 1, 1)) return BPE_ENOMEM;
    memcpy(b->data + b->n, s, n);
    b->n += n;
    b->data[b->n] = 0;  // always NUL-terminated for convenience
    return 0;
}
static void bpe_ids_free(BpeIds *v) { free(v->data); v->data = NULL; v->n = v->cap = 0; }
static void bpe_bytes_free(BpeBytes *b) { free(b->data); b->data = NULL; b->n = b->cap = 0; }

static uint64_t bpe_hash_(const void *p, size_t n) {
    const unsigned char *s = (const unsigned char *)p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t k; memcpy(&k, s, 8);
        h = (h ^ (k * 0xbf58476d1ce4e5b9ull)) * 0x94d049bb133111ebull;
        h ^= h >> 29;
        s += 8; n -= 8;
    }
    uint64_t k = 0;
    for (size_t i = 0; i < n; i++) k |= (uint64_t)s[i] << (8 * i);
    h = (h ^ (k * 0xbf58476d1ce4e5b9ull)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
    return h;
}

static int bpe_read_file_(const char *path, char **out, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return bpe_err_(err, errlen, BPE_EIO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = (char *)malloc(cap);
    if (!buf) { fclose(f); return bpe_err_(err, errlen, BPE_ENOMEM, "%s: out of memory", path); }
    for (;;) {
        if (n == cap) {
            char *nb = (char *)realloc(buf, cap * 2);
            if (!nb) { free(buf); fclose(f); return bpe_err_(err, errlen, BPE_ENOMEM, "%s: out of memory", path); }
            buf = nb; cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); return bpe_err_(err, errlen, BPE_EIO, "%s: read error", path); }
    *out = buf;
    *len = n;
    return 0;
}

static int bpe_file_exists_(const char *path) { struct stat st; return stat(path, &st) == 0 && S_ISREG(st.st_mode); }

// ---------------------------------------------------------------- tokenizer construction

static void bpe_cache_clear_(BpeTokenizer *t) {
    t->cache_n = 0; t->cache_keys_n = 0; t->cache_vals_n = 0;
    if (t->cache_slots) memset(t->cache_slots, 0, t->cache_slots_cap * sizeof(uint32_t));
}

static void bpe_free(BpeTokenizer *t) {
    if (!t) return;
    free(t->tok_off); free(t->tok_len); free(t->tok_special); free(t->tok_data);
    free(t->vmap); free(t->merges); free(t->pmap_keys); free(t->pmap_rank); free(t->specials);
    free(t->cache); free(t->cache_slots); free(t->cache_keys); free(t->cache_vals);
    free(t->w_id); free(t->w_prev); free(t->w_next); free(t->w_heap); free(t->w_pending);
    free(t->norm_buf.data); free(t->nfc_buf); free(t->piece_data); free(t->piece_off); free(t->piece_len); free(t->piece_map);
    free(t->trie);
    free(t);
}

static BpeTokenizer *bpe_new_(void) {
    BpeTokenizer *t = (BpeTokenizer *)calloc(1, sizeof *t);
    if (!t) return NULL;
    for (int b = 0; b < 256; b++) t->byte_id[b] = t->sp_byte_tok[b] = -1;
    t->sp_unk = -1;
    return t;
}

static const char *bpe_token_bytes(const BpeTokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_ids || t->tok_len[id] < 0) return NULL;
    if (len) *len = (size_t)t->tok_len[id];
    return t->tok_data + t->tok_off[id];
}

static int32_t bpe_vmap_find_(const BpeTokenizer *t, const char *s, size_t n) {
    if (!t->vmap_cap) return -1;
    size_t mask = t->vmap_cap - 1, h = (size_t)bpe_hash_(s, n) & mask;
    for (;;) {
        int32_t id = t->vmap[h];
        if (id < 0) return -1;
        if ((size_t)t->tok_len[id] == n && memcmp(t->tok_data + t->tok_off[id], s, n) == 0) return id;
        h = (h + 1) & mask;
    }
}
static int bpe_vmap_insert_(BpeTokenizer *t, int32_t id) {
    if ((size_t)(t->n_ids + 1) * 2 > t->vmap_cap) {  // rebuild larger
        size_t nc = t->vmap_cap ? t->vmap_cap : 1024;
        while (nc < (size_t)(t->n_ids + 1) * 2) nc *= 2;
        int32_t *nv = (int32_t *)malloc(nc * sizeof(int32_t));
        if (!nv) return -1;
        memset(nv, 0xff, nc * sizeof(int32_t));
        for (size_t i = 0; i < t->vmap_cap; i++) {
            int32_t x = t->vmap[i];
            if (x < 0) continue;
            size_t h = (size_t)bpe_hash_(t->tok_data + t->tok_off[x], (size_t)t->tok_len[x]) & (nc - 1);
            while (nv[h] >= 0) h = (h + 1) & (nc - 1);
            nv[h] = x;
        }
        free(t->vmap);
        t->vmap = nv;
        t->vmap_cap = nc;
    }
    size_t mask = t->vmap_cap - 1;
    size_t h = (size_t)bpe_hash_(t->tok_data + t->tok_off[id], (size_t)t->tok_len[id]) & mask;
    while (t->vmap[h] >= 0) h = (h + 1) & mask;
    t->vmap[h] = id;
    return 0;
}

// Id of the SentencePiece-style model's token whose string is s[0..n), or -1.
static int32_t bpe_piece_find_(const BpeTokenizer *t, const char *s, size_t n) {
    if (!t->piece_map_cap) return -1;
    uint64_t hash = bpe_hash_(s, n), tag = hash >> 32;
    size_t mask = t->piece_map_cap - 1, h = (size_t)hash & mask;
    for (;;) {  // (the tag saves reading the strings of other entries)
        uint64_t e = t->piece_map[h];
        if (e == UINT64_MAX) return -1;
        int32_t id = (int32_t)(uint32_t)e;
        if (e >> 32 == tag && (size_t)t->piece_len[id] == n && memcmp(t->piece_data + t->piece_off[id], s, n) == 0) return id;
        h = (h + 1) & mask;
    }
}

// Gives id the bytes s[0..n). Returns BPE_EINVAL if id already has bytes.
static int bpe_set_token_(BpeTokenizer *t, int32_t id, const char *s, size_t n) {
    if (id >= t->cap_ids) {
        int32_t nc = t->cap_ids ? t->cap_ids : 1024;
        while (nc <= id) nc *= 2;
        int64_t *o = (int64_t *)realloc(t->tok_off, (size_t)nc * sizeof(int64_t));
        if (!o) return BPE_ENOMEM;
        t->tok_off = o;
        int32_t *l = (int32_t *)realloc(t->tok_len, (size_t)nc * sizeof(int32_t));
        if (!l) return BPE_ENOMEM;
        t->tok_len = l;
        uint8_t *sp = (uint8_t *)realloc(t->tok_special, (size_t)nc);
        if (!sp) return BPE_ENOMEM;
        t->tok_special = sp;
        for (int32_t i = t->cap_ids; i < nc; i++) { t->tok_len[i] = -1; t->tok_off[i] = 0; t->tok_special[i] = 0; }
        t->cap_ids = nc;
    }
    if (t->tok_len[id] >= 0) return BPE_EINVAL;
    if (bpe_grow_((void **)&t->tok_data, &t->tok_data_cap, t->tok_data_n + n + 1, 1)) return BPE_ENOMEM;
    memcpy(t->tok_data + t->tok_data_n, s, n);
    t->tok_off[id] = (int64_t)t->tok_data_n;
    t->tok_len[id] = (int32_t)n;
    t->tok_data_n += n;
    if (id >= t->n_ids) t->n_ids = id + 1;
    return 0;
}

static int32_t bpe_pmap_rank_(const BpeTokenizer *t, int32_t a, int32_t b) {
    if (!t->pmap_cap) return -1;
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t mask = t->pmap_cap - 1, h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
    for (;;) {
        uint64_t k = t->pmap_keys[h];
        if (k == key) return t->pmap_rank[h];
        if (k == UINT64_MAX) return -1;
        h = (h + 1) & mask;
    }
}

// Makes the pair table large enough for n merges in all (kept at most half full).
static int bpe_pmap_reserve_(BpeTokenizer *t, size_t n) {
    if (n * 2 > t->pmap_cap) {
        size_t nc = t->pmap_cap ? t->pmap_cap : 1024;
        while (n * 2 > nc) nc *= 2;
        uint64_t *nk = (uint64_t *)malloc(nc * sizeof(uint64_t));
        int32_t *nr = (int32_t *)malloc(nc * sizeof(int32_t));
        if (!nk || !nr) { free(nk); free(nr); return BPE_ENOMEM; }
        memset(nk, 0xff, nc * sizeof(uint64_t));
        for (size_t i = 0; i < t->pmap_cap; i++) {
            uint64_t k = t->pmap_keys[i];
            if (k == UINT64_MAX) continue;
            size_t h = (size_t)((k * 0x9E3779B97F4A7C15ull) >> 20) & (nc - 1);
            while (nk[h] != UINT64_MAX) h = (h + 1) & (nc - 1);
            nk[h] = k; nr[h] = t->pmap_rank[i];
        }
        free(t->pmap_keys); free(t->pmap_rank);
        t->pmap_keys = nk; t->pmap_rank = nr; t->pmap_cap = nc;
    }
    return 0;
}

// Appends a merge (left, right) -> result. Returns BPE_EINVAL if the pair is listed already.
static int bpe_add_merge_(BpeTokenizer *t, int32_t a, int32_t b, int32_t r) {
    if (bpe_pmap_reserve_(t, (size_t)t->n_merges + 1)) return BPE_ENOMEM;
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t mask = t->pmap_cap - 1, h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
    while (t->pmap_keys[h] != UINT64_MAX) {
        if (t->pmap_keys[h] == key) return BPE_EINVAL;
        h = (h + 1) & mask;
    }
    if (t->n_merges == t->cap_merges) {
        int32_t nc = t->cap_merges ? t->cap_merges * 2 : 1024;
        int32_t *m = (int32_t *)realloc(t->merges, (size_t)nc * 3 * sizeof(int32_t));
        if (!m) return BPE_ENOMEM;
        t->merges = m; t->cap_merges = nc;
    }
    t->pmap_keys[h] = key;
    t->pmap_rank[h] = t->n_merges;
    t->merges[3 * t->n_merges] = a;
    t->merges[3 * t->n_merges + 1] = b;
    t->merges[3 * t->n_merges + 2] = r;
    t->n_merges++;
    return 0;
}

// The text an added token is matched by: its string in the model (SentencePiece-style
// models) or its bytes.
static const char *bpe_added_text_(const BpeTokenizer *t, int32_t id, int32_t *len) {
    if (id < t->n_pieces && t->piece_len[id] >= 0) { *len = t->piece_len[id]; return t->piece_data + t->piece_off[id]; }
    *len = t->tok_len[id];
    return t->tok_data + t->tok_off[id];
}

// Adds the text of added token id to the trie of added tokens (node 0 is the root).
static int bpe_trie_insert_(BpeTokenizer *t, int32_t id) {
    int32_t len;
    const unsigned char *s = (const unsigned char *)bpe_added_text_(t, id, &len);
    if (!t->trie_n) {
        if (bpe_grow_((void **)&t->trie, &t->trie_cap, 4, 4 * sizeof(int32_t))) return BPE_ENOMEM;
        t->trie[0] = t->trie[1] = t->trie[3] = -1; t->trie[2] = 0;
        t->trie_n = 1;
    }
    size_t node = 0;
    for (int32_t k = 0; k < len; k++) {
        int32_t c = t->trie[4 * node];
        while (c >= 0 && t->trie[4 * c + 2] != s[k]) c = t->trie[4 * c + 1];
        if (c < 0) {
            if (bpe_grow_((void **)&t->trie, &t->trie_cap, t->trie_n + 1, 4 * sizeof(int32_t))) return BPE_ENOMEM;
            c = (int32_t)t->trie_n++;
            t->trie[4 * c] = -1; t->trie[4 * c + 1] = t->trie[4 * node]; t->trie[4 * c + 2] = s[k]; t->trie[4 * c + 3] = -1;
            t->trie[4 * node] = c;
        }
        node = (size_t)c;
    }
    t->trie[4 * node + 3] = id;
    return 0;
}

// Makes id an added token: kind 1 special, 2 not special.
static int bpe_mark_added_(BpeTokenizer *t, int32_t id, int kind) {
    if (t->tok_special[id]) { t->tok_special[id] = (uint8_t)kind; return 0; }
    if (bpe_trie_insert_(t, id)) return BPE_ENOMEM;
    if (t->n_specials == t->cap_specials) {
        int32_t nc = t->cap_specials ? t->cap_specials * 2 : 8;
        int32_t *s = (int32_t *)realloc(t->specials, (size_t)nc * sizeof(int32_t));
        if (!s) return BPE_ENOMEM;
        t->specials = s; t->cap_specials = nc;
    }
    t->specials[t->n_specials++] = id;
    t->tok_special[id] = (uint8_t)kind;
    int32_t len;
    const char *text = bpe_added_text_(t, id, &len);
    if (len > 0) t->special_first[(unsigned char)text[0]] |= (uint8_t)kind;
    bpe_cache_clear_(t);
    return 0;
}
static int bpe_mark_special_(BpeTokenizer *t, int32_t id) { return bpe_mark_added_(t, id, 1); }

// ---------------------------------------------------------------- public queries

static int32_t bpe_vocab_size(const BpeTokenizer *t) { return t->n_ids; }

// Id of the token whose bytes are s[0..n) (a special token's text, or a vocabulary
// token's decoded bytes such as " the"), or -1. Special tokens are looked up first.
static int32_t bpe_token_id(const BpeTokenizer *t, const char *s, size_t n) {
    for (int32_t i = 0; i < t->n_specials; i++) {
        int32_t id = t->specials[i];
        if ((size_t)t->tok_len[id] == n && memcmp(t->tok_data + t->tok_off[id], s, n) == 0) return id;
    }
    return bpe_vmap_find_(t, s, n);
}

// A 64-bit fingerprint of the vocabulary: FNV-1a (64-bit) over the token count as
// uint32 little-endian, then for every id 0..n-1 in order its byte length as uint32
// little-endian (0xFFFFFFFF for an id without a token) followed by its bytes.
// Special, added and chat tokens count like any other; merges and the special flag
// do not, so a vocabulary read from encoder.json or from tokenizer.json gives the
// same value. A result of 0 becomes 1: data files use 0 for "unknown".
static uint64_t bpe_fingerprint(const BpeTokenizer *t) {
    uint64_t h = 0xcbf29ce484222325ull;
    unsigned char le[4];
    uint32_t n = (uint32_t)t->n_ids;
    for (int32_t id = -1; id < t->n_ids; id++) {
        uint32_t v = id < 0 ? n : t->tok_len[id] < 0 ? 0xFFFFFFFFu : (uint32_t)t->tok_len[id];
        for (int k = 0; k < 4; k++) le[k] = (unsigned char)(v >> (8 * k));
        for (int k = 0; k < 4; k++) { h ^= le[k]; h *= 0x100000001b3ull; }
        if (id < 0 || t->tok_len[id] < 0) continue;
        const unsigned char *s = (const unsigned char *)t->tok_data + t->tok_off[id];
        for (int32_t k = 0; k < t->tok_len[id]; k++) { h ^= s[k]; h *= 0x100000001b3ull; }
    }
    return h ? h : 1;
}

// 1 for special tokens (added tokens marked "special": true, tokens added by
// bpe_add_special); 0 for the rest, including added tokens marked "special": false.
static int bpe_is_special(const BpeTokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_ids && t->tok_special[id] == 1;
}

// Registers s[0..n) (non-empty UTF-8) as a special token and returns its id in *id: the
// existing id if the text is already a token, otherwise the next free id (vocab size).
static int bpe_add_special(BpeTokenizer *t, const char *s, size_t n, int32_t *id, char *err, size_t errlen) {
    if (n == 0) return bpe_err_(err, errlen, BPE_EINVAL, "special token is empty");
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (!l) return bpe_err_(err, errlen, BPE_EINVAL, "special token is not valid UTF-8");
        i += (size_t)l;
    }
    int32_t found = bpe_token_id(t, s, n);
    if (found < 0) {
        if (t->n_ids >= BPE_MAX_IDS) return bpe_err_(err, errlen, BPE_ERANGE, "too many tokens");
        found = t->n_ids;
        if (bpe_set_token_(t, found, s, n)) return bpe_err_(err, errlen, BPE_ENOMEM, "out of memory");
    }
    if (bpe_mark_special_(t, found)) return bpe_err_(err, errlen, BPE_ENOMEM, "out of memory");
    *id = found;
    return 0;
}

#endif
