// bpe.h: BPE tokenizer of GPT-2, Llama 3, Qwen2/Qwen3 and SmolLM2 (byte-level) and of
// Gemma 3 and Llama 2 (SentencePiece-style tokenizer.json) (header-only, no
// dependencies beyond libc and base/json.h).
//
//   char err[BPE_ERR_LEN];
//   BpeTokenizer *t;
//   if (bpe_load(&t, "model_dir_or_tokenizer.json", err, sizeof err)) { puts(err); ... }
//   int32_t im_start; bpe_add_special(t, "<|im_start|>", 12, &im_start, err, sizeof err);
//   BpeIds ids = {0};
//   bpe_encode(t, text, len, /*parse_special=*/0, &ids, err, sizeof err);   // appends to ids
//   BpeBytes out = {0};
//   bpe_decode(t, ids.data, ids.n, &out, err, sizeof err);                 // appends bytes
//   bpe_ids_free(&ids); bpe_bytes_free(&out); bpe_free(t);
//
// Every function that can fail returns 0 or a BPE_E* code and writes one line
// "FILE: problem" (or just "problem") into err. Nothing here prints or exits.
//
// Encoding follows GPT-2 exactly: the text is split by the GPT-2 pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (classes from tokenizer/unicode_tables.h; \s as JavaScript defines it), each piece
// is mapped byte by byte to GPT-2's printable byte alphabet and merged by rank.
// Invalid UTF-8 is not rejected: each byte that is not part of a valid UTF-8 sequence
// is treated as one character of class "other" (like punctuation), so every byte
// string is encoded and decodes back to itself. A tokenizer.json may instead name
// SmolLM2's digit split or the Split regexes of Llama 3 (= cl100k_base), Qwen2 and
// o200k_base (BPE_PRE_*, scanned by hand like GPT-2's; docs/tokenizer.md), and
// ignore_merges (a pre-token that is a vocabulary token is that token). Normalizers:
// NFC (tables from dev/gen_nfc_tables.py in nfc_tables.h), and for SentencePiece-style
// files (tokens are strings with "\xe2\x96\x81" for spaces and <0xNN> byte tokens; the
// bpe_sp_* functions) Replace(" " -> "\xe2\x96\x81") and Prepend("\xe2\x96\x81"), with
// byte_fallback, unk, Metaspace and Hugging Face's one-pair-at-a-time merge rule.
//
// A tokenizer keeps a cache of encoded pre-tokens, so bpe_encode modifies it: one
// tokenizer must not be used for encoding by two threads at once. Decoding is
// read-only and thread-safe.
#ifndef TOK_BPE_H
#define TOK_BPE_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "../base/json.h"
#include "../base/utf8.h"
#include "nfc_tables.h"
#include "unicode_tables.h"

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

// ---------------------------------------------------------------- pre-tokenization

enum { BPE_OTHER = 0, BPE_LETTER = 1, BPE_NUMBER = 2, BPE_SPACE = 3 };
enum { BPE_UPPERISH = 4, BPE_LOWERISH = 8 };  // o200k_base's letter groups (unicode_tables.h)

// The splitting rule of a tokenizer: each is one known regex, scanned by hand.
enum {
    BPE_PRE_GPT2 = 0,    // GPT-2's pattern (above)
    BPE_PRE_GPT2_DIGITS, // SmolLM2: every \p{N} character alone, GPT-2's pattern between them
    BPE_PRE_CL100K,      // Llama 3 = cl100k_base: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|...
    BPE_PRE_QWEN2,       // Qwen2: cl100k_base's with \p{N} instead of \p{N}{1,3}
    BPE_PRE_O200K,       // o200k_base: words split at lower-to-upper case changes
};

static inline int bpe_class_of_cp_(uint32_t cp) { return uc_stage2[uc_stage1[cp >> 8]][cp & 255] & 3; }

// Table entry (class | letter-group flags) and length of the character at s[i]; an
// invalid UTF-8 byte is one "other" character.
static inline int bpe_char_bits_at_(const unsigned char *s, size_t n, size_t i, int *bits) {
    unsigned c = s[i];
    if (c < 0x80) { *bits = uc_stage2[uc_stage1[0]][c]; return 1; }
    uint32_t cp;
    int l = utf8_decode(s + i, n - i, &cp);
    if (!l) { *bits = BPE_OTHER; return 1; }
    *bits = uc_stage2[uc_stage1[cp >> 8]][cp & 255];
    return l;
}
// Class (BPE_OTHER...BPE_SPACE) and length of the character at s[i].
static inline int bpe_char_at_(const unsigned char *s, size_t n, size_t i, int *cls) {
    int l = bpe_char_bits_at_(s, n, i, cls);
    *cls &= 3;
    return l;
}

// End of the run of characters of class cls starting at j.
static size_t bpe_run_end_(const unsigned char *s, size_t n, size_t j, int cls) {
    int c2;
    while (j < n) { int k = bpe_char_at_(s, n, j, &c2); if (c2 != cls) break; j += (size_t)k; }
    return j;
}

// End of the GPT-2 pre-token that starts at s[i] (i < n).
static size_t bpe_pretoken_end(const unsigned char *s, size_t n, size_t i) {
    unsigned c = s[i];
    if (c == '\'' && i + 1 < n) {  // 's 't 're 've 'm 'll 'd (case-sensitive)
        unsigned d = s[i + 1];
        if (d == 's' || d == 't' || d == 'm' || d == 'd') return i + 2;
        if (i + 2 < n) {
            unsigned e = s[i + 2];
            if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l')) return i + 3;
        }
    }
    int cls, k;
    if (c == ' ' && i + 1 < n) {  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+"
        k = bpe_char_at_(s, n, i + 1, &cls);
        if (cls != BPE_SPACE) return bpe_run_end_(s, n, i + 1 + (size_t)k, cls);
    }
    k = bpe_char_at_(s, n, i, &cls);
    if (cls != BPE_SPACE) return bpe_run_end_(s, n, i + (size_t)k, cls);
    // whitespace: "\s+(?!\S)" then "\s+"
    size_t j = bpe_run_end_(s, n, i, BPE_SPACE), last = i;
    for (size_t p = i; p < j; p += (size_t)bpe_char_at_(s, n, p, &cls)) last = p;
    if (j == n || last == i) return j;
    return last;  // leave the last whitespace character to the next pre-token
}

// cl100k_base / Qwen2 / o200k_base contraction at s[i], ASCII case-insensitive
// ('s 't 're 've 'm 'll 'd, also 'S 'Re 'LL...): its end, or i if there is none.
static size_t bpe_contraction_end_(const unsigned char *s, size_t n, size_t i) {
    if (i + 1 >= n || s[i] != '\'') return i;
    unsigned d = s[i + 1] | 0x20;  // ASCII lower case (maps no other byte onto a letter below)
    if (d == 's' || d == 't' || d == 'm' || d == 'd') return i + 2;
    if (i + 2 < n) {
        unsigned e = s[i + 2] | 0x20;
        if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l')) return i + 3;
    }
    return i;
}

// The whitespace alternatives shared by cl100k_base, Qwen2 and o200k_base, at a
// whitespace character s[i]: "\s*[\r\n]+", then "\s+(?!\S)", then "\s+".
static size_t bpe_space_end_(const unsigned char *s, size_t n, size_t i) {
    int cls;
    size_t j = bpe_run_end_(s, n, i, BPE_SPACE), last = i, newline = 0;
    for (size_t p = i; p < j; p += (size_t)bpe_char_at_(s, n, p, &cls)) {
        last = p;
        if (s[p] == '\r' || s[p] == '\n') newline = p + 1;
    }
    if (newline) return newline;  // up to the run's last \r or \n
    if (j == n || last == i) return j;
    return last;
}

// "[^\s\p{L}\p{N}]+" from j, then any of the bytes in tail ("\r\n", or o200k_base's
// "\r\n/": a '/' after the newlines).
static size_t bpe_punct_end_(const unsigned char *s, size_t n, size_t j, const char *tail) {
    j = bpe_run_end_(s, n, j, BPE_OTHER);
    while (j < n && s[j] && strchr(tail, s[j])) j++;
    return j;
}

// End of the cl100k_base (max_digits 3) or Qwen2 (max_digits 1) pre-token at s[i]:
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
static size_t bpe_pretoken_end_cl100k(const unsigned char *s, size_t n, size_t i, int max_digits) {
    size_t j = bpe_contraction_end_(s, n, i);
    if (j > i) return j;
    int cls, c2;
    int k = bpe_char_at_(s, n, i, &cls);
    if (cls == BPE_LETTER) return bpe_run_end_(s, n, i + (size_t)k, BPE_LETTER);
    if (cls == BPE_NUMBER) {
        j = i + (size_t)k;
        for (int d = 1; d < max_digits && j < n; d++) {
            int l = bpe_char_at_(s, n, j, &c2);
            if (c2 != BPE_NUMBER) break;
            j += (size_t)l;
        }
        return j;
    }
    if (s[i] != '\r' && s[i] != '\n' && i + (size_t)k < n) {  // one non-letter, non-digit prefix before letters
        int l = bpe_char_at_(s, n, i + (size_t)k, &c2);
        if (c2 == BPE_LETTER) return bpe_run_end_(s, n, i + (size_t)k + (size_t)l, BPE_LETTER);
        if (s[i] == ' ' && c2 == BPE_OTHER) return bpe_punct_end_(s, n, i + 1, "\r\n");
    }
    if (cls == BPE_OTHER) return bpe_punct_end_(s, n, i, "\r\n");
    return bpe_space_end_(s, n, i);
}

// o200k_base's words from s[k]: "[Upper]*[lower]+" (upper_first 0) or "[Upper]+[lower]*"
// (upper_first 1), where Upper = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and lower =
// [\p{Ll}\p{Lm}\p{Lo}\p{M}] overlap on Lm, Lo and M. Returns the end, or k if no match.
static size_t bpe_o200k_word_(const unsigned char *s, size_t n, size_t k, int upper_first) {
    int bits;
    size_t a = k, last_lower = k;  // end of the Upper run; end of its last lower character
    while (a < n) {
        int l = bpe_char_bits_at_(s, n, a, &bits);
        if (!(bits & BPE_UPPERISH)) break;
        a += (size_t)l;
        if (bits & BPE_LOWERISH) last_lower = a;
    }
    size_t e = a;  // the lower run after the Upper run
    while (e < n) {
        int l = bpe_char_bits_at_(s, n, e, &bits);
        if (!(bits & BPE_LOWERISH)) break;
        e += (size_t)l;
    }
    if (upper_first) return a > k ? e : k;
    if (e > a) return e;
    return last_lower;  // the regex gives back Upper characters until one is lower too
}

// End of the o200k_base pre-token at s[i]:
// [^\r\n\p{L}\p{N}]?[Upper]*[lower]+(?i:'s|...)?|[^\r\n\p{L}\p{N}]?[Upper]+[lower]*(?i:'s|...)?|
// \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
static size_t bpe_pretoken_end_o200k(const unsigned char *s, size_t n, size_t i) {
    int cls, c2;
    int k = bpe_char_at_(s, n, i, &cls);
    // a prefix: one character that is not \r, \n, a letter or a digit (marks are "other")
    size_t after = (cls != BPE_LETTER && cls != BPE_NUMBER && s[i] != '\r' && s[i] != '\n') ? i + (size_t)k : i;
    for (int upper_first = 0; upper_first < 2; upper_first++) {
        size_t e = after > i ? bpe_o200k_word_(s, n, after, upper_first) : after;
        if (e == after) e = bpe_o200k_word_(s, n, i, upper_first);  // without the prefix
        if (e > i) return bpe_contraction_end_(s, n, e);
    }
    if (cls == BPE_NUMBER) {
        size_t j = i + (size_t)k;
        for (int d = 1; d < 3 && j < n; d++) {
            int l = bpe_char_at_(s, n, j, &c2);
            if (c2 != BPE_NUMBER) break;
            j += (size_t)l;
        }
        return j;
    }
    if (s[i] == ' ' && i + 1 < n) {
        bpe_char_at_(s, n, i + 1, &c2);
        if (c2 == BPE_OTHER) return bpe_punct_end_(s, n, i + 1, "\r\n/");
    }
    if (cls == BPE_OTHER) return bpe_punct_end_(s, n, i, "\r\n/");
    return bpe_space_end_(s, n, i);
}

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

// ---------------------------------------------------------------- normalization

// Metaspace's prepend_scheme: when a "\xe2\x96\x81" goes before the text.
enum { BPE_META_ALWAYS = 1, BPE_META_FIRST, BPE_META_NEVER };

// Normalizers of a tokenizer.json, applied in the order the file lists them.
enum {
    BPE_NORM_NFC = 1,       // Unicode NFC (Qwen2, Qwen3)
    BPE_NORM_PREPEND,       // Prepend("\xe2\x96\x81") to non-empty text (Llama 2)
    BPE_NORM_SPACE,         // Replace(" " -> "\xe2\x96\x81") (Gemma 3, Llama 2)
};

// NFC (Unicode Standard Annex #15): full canonical decomposition, canonical ordering of
// combining marks by class, then canonical composition. Tables from
// dev/gen_nfc_tables.py (tokenizer/nfc_tables.h); Hangul syllables are computed.
enum { BPE_HANGUL_S = 0xAC00, BPE_HANGUL_L = 0x1100, BPE_HANGUL_V = 0x1161, BPE_HANGUL_T = 0x11A7,
       BPE_HANGUL_LN = 19, BPE_HANGUL_VN = 21, BPE_HANGUL_TN = 28, BPE_HANGUL_SN = 19 * 21 * 28 };
// An invalid UTF-8 byte b is carried as BPE_NFC_RAW + b: a starter that composes with nothing.
#define BPE_NFC_RAW 0x110000u

static inline int bpe_nfc_prop_(uint32_t cp) { return cp < 0x110000 ? nfc_stage2[nfc_stage1[cp >> 8]][cp & 255] : 0; }
static inline int bpe_ccc_(uint32_t cp) { return nfc_ccc[bpe_nfc_prop_(cp)]; }

// Index of key in the sorted first column of table[n][3], or -1.
static long bpe_nfc_find_(const uint32_t (*table)[3], long n, uint32_t a, uint32_t b, int pair) {
    long lo = 0, hi = n - 1;
    uint64_t key = ((uint64_t)a << 32) | (pair ? b : 0);
    while (lo <= hi) {
        long mid = (lo + hi) / 2;
        uint64_t k = ((uint64_t)table[mid][0] << 32) | (pair ? table[mid][1] : 0);
        if (k == key) return mid;
        if (k < key) lo = mid + 1; else hi = mid - 1;
    }
    return -1;
}

// Appends the full canonical decomposition of cp to t->nfc_buf[*n...].
static int bpe_nfc_decompose_(BpeTokenizer *t, uint32_t cp, size_t *n) {
    if (bpe_grow_((void **)&t->nfc_buf, &t->nfc_cap, *n + 4, sizeof(uint32_t))) return BPE_ENOMEM;
    if (cp >= BPE_HANGUL_S && cp < BPE_HANGUL_S + BPE_HANGUL_SN) {  // L V, or L V T
        uint32_t s = cp - BPE_HANGUL_S;
        t->nfc_buf[(*n)++] = BPE_HANGUL_L + s / (BPE_HANGUL_VN * BPE_HANGUL_TN);
        t->nfc_buf[(*n)++] = BPE_HANGUL_V + (s % (BPE_HANGUL_VN * BPE_HANGUL_TN)) / BPE_HANGUL_TN;
        if (s % BPE_HANGUL_TN) t->nfc_buf[(*n)++] = BPE_HANGUL_T + s % BPE_HANGUL_TN;
        return 0;
    }
    long k = cp < 0x110000 ? bpe_nfc_find_(nfc_decomp, NFC_NDECOMP, cp, 0, 0) : -1;
    if (k < 0) { t->nfc_buf[(*n)++] = cp; return 0; }
    int rc = bpe_nfc_decompose_(t, nfc_decomp[k][1], n);
    if (!rc && nfc_decomp[k][2]) rc = bpe_nfc_decompose_(t, nfc_decomp[k][2], n);
    return rc;
}

// The primary composite of starter a and b, or 0.
static uint32_t bpe_nfc_compose_(uint32_t a, uint32_t b) {
    if (a >= BPE_HANGUL_L && a < BPE_HANGUL_L + BPE_HANGUL_LN && b >= BPE_HANGUL_V && b < BPE_HANGUL_V + BPE_HANGUL_VN)
        return BPE_HANGUL_S + ((a - BPE_HANGUL_L) * BPE_HANGUL_VN + (b - BPE_HANGUL_V)) * BPE_HANGUL_TN;
    if (a >= BPE_HANGUL_S && a < BPE_HANGUL_S + BPE_HANGUL_SN && (a - BPE_HANGUL_S) % BPE_HANGUL_TN == 0 &&
        b > BPE_HANGUL_T && b < BPE_HANGUL_T + BPE_HANGUL_TN)  // T = 0x11A7 itself is no trailing consonant
        return a + (b - BPE_HANGUL_T);
    long k = bpe_nfc_find_(nfc_comp, NFC_NCOMP, a, b, 1);
    return k < 0 ? 0 : nfc_comp[k][2];
}

// NFC of s[0..n): sets *out, *out_n to s itself when s is NFC already by the quick
// check (every character has combining class 0 and NFC_Quick_Check=Yes), otherwise to
// the normalized text in t->norm_buf. Invalid UTF-8 bytes pass through unchanged.
static int bpe_nfc_(BpeTokenizer *t, const unsigned char *s, size_t n, const unsigned char **out, size_t *out_n) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        if (s[i] < 0x80) { i++; continue; }
        int l = utf8_decode(s + i, n - i, &cp);
        if (!l) { i++; continue; }
        if (bpe_nfc_prop_(cp)) break;
        i += (size_t)l;
    }
    *out = s; *out_n = n;
    if (i == n) return 0;
    size_t m = 0;
    for (i = 0; i < n;) {  // decompose
        uint32_t cp;
        int l = utf8_decode(s + i, n - i, &cp);
        if (!l) { cp = BPE_NFC_RAW + s[i]; l = 1; }
        if (bpe_nfc_decompose_(t, cp, &m)) return BPE_ENOMEM;
        i += (size_t)l;
    }
    uint32_t *d = t->nfc_buf;
    for (size_t k = 1; k < m; k++) {  // canonical ordering: stable insertion sort of each run of non-starters
        int c = bpe_ccc_(d[k]);
        if (!c) continue;
        uint32_t x = d[k];
        size_t j = k;
        while (j > 0 && bpe_ccc_(d[j - 1]) > c) { d[j] = d[j - 1]; j--; }
        d[j] = x;
    }
    // compose: a character joins the last starter unless a character between them has a
    // combining class of 0 or at least its own (it is "blocked")
    size_t w = 1, starter = 0;
    int last = bpe_ccc_(d[0]) ? 256 : 0;  // a leading non-starter has no starter to join
    for (size_t k = 1; k < m; k++) {
        int c = bpe_ccc_(d[k]);
        uint32_t comp = d[starter] < 0x110000 && d[k] < 0x110000 ? bpe_nfc_compose_(d[starter], d[k]) : 0;
        if (comp && (last < c || last == 0)) { d[starter] = comp; continue; }
        if (c == 0) starter = w;
        last = c;
        d[w++] = d[k];
    }
    t->norm_buf.n = 0;
    if (bpe_grow_((void **)&t->norm_buf.data, &t->norm_buf.cap, 4 * w + 1, 1)) return BPE_ENOMEM;
    char *o = t->norm_buf.data;
    size_t k = 0;
    for (size_t j = 0; j < w; j++) {
        if (d[j] >= BPE_NFC_RAW) o[k++] = (char)(d[j] - BPE_NFC_RAW);
        else k += utf8_encode(o + k, d[j]);
    }
    t->norm_buf.n = k;
    *out = (const unsigned char *)o; *out_n = k;
    return 0;
}

// Rewrites *s, *n (which may be t->norm_buf) into a fresh buffer that becomes
// t->norm_buf: with prepend "\xe2\x96\x81" first, with replace every space as "\xe2\x96\x81".
static int bpe_space_rewrite_(BpeTokenizer *t, int prepend, int replace, const unsigned char **s, size_t *n) {
    const unsigned char *in = *s;
    size_t m = *n, spaces = 0;
    for (size_t i = 0; replace && i < m; i++) spaces += in[i] == ' ';
    BpeBytes b = {NULL, 0, 0};
    if (bpe_grow_((void **)&b.data, &b.cap, m + 2 * spaces + 4, 1)) return BPE_ENOMEM;
    if (prepend) { memcpy(b.data, "\xe2\x96\x81", 3); b.n = 3; }
    for (size_t i = 0; i < m; i++) {
        if (replace && in[i] == ' ') { memcpy(b.data + b.n, "\xe2\x96\x81", 3); b.n += 3; }
        else b.data[b.n++] = (char)in[i];
    }
    bpe_bytes_free(&t->norm_buf);
    t->norm_buf = b;
    *s = (const unsigned char *)b.data; *n = b.n;
    return 0;
}

// The tokenizer's normalizers applied to s[0..n): *out, *out_n is s itself or the
// result in a scratch buffer of t (valid until the next call).
static int bpe_normalize_(BpeTokenizer *t, const unsigned char *s, size_t n, const unsigned char **out, size_t *out_n) {
    *out = s; *out_n = n;
    for (int k = 0; k < t->n_norm && *out_n; k++) {
        const unsigned char *in = *out;
        size_t m = *out_n;
        if (t->norm[k] == BPE_NORM_NFC) {
            if (in == (const unsigned char *)t->norm_buf.data) {  // NFC after another normalizer: keep its input apart
                BpeBytes copy = t->norm_buf;
                memset(&t->norm_buf, 0, sizeof t->norm_buf);
                int rc = bpe_nfc_(t, in, m, out, out_n);
                if (!rc && *out == in) { bpe_bytes_free(&t->norm_buf); t->norm_buf = copy; }
                else bpe_bytes_free(&copy);
                if (rc) return rc;
            } else if (bpe_nfc_(t, in, m, out, out_n)) return BPE_ENOMEM;
            continue;
        }
        if (bpe_space_rewrite_(t, t->norm[k] == BPE_NORM_PREPEND, t->norm[k] == BPE_NORM_SPACE, out, out_n)) return BPE_ENOMEM;
    }
    return 0;
}

// ---------------------------------------------------------------- encoding

static int bpe_scratch_(BpeTokenizer *t, size_t n) {
    if (n <= t->w_cap) return 0;
    size_t nc = t->w_cap ? t->w_cap : 64;
    while (nc < n) nc *= 2;
    int32_t *a = (int32_t *)realloc(t->w_id, nc * sizeof(int32_t));
    if (!a) return -1;
    t->w_id = a;
    a = (int32_t *)realloc(t->w_prev, nc * sizeof(int32_t));
    if (!a) return -1;
    t->w_prev = a;
    a = (int32_t *)realloc(t->w_next, nc * sizeof(int32_t));
    if (!a) return -1;
    t->w_next = a;
    a = (int32_t *)realloc(t->w_pending, nc * sizeof(int32_t));
    if (!a) return -1;
    t->w_pending = a;
    // heap: at most n - 1 initial pairs plus one more per merge (each merge pops one)
    uint64_t *h = (uint64_t *)realloc(t->w_heap, 2 * nc * sizeof(uint64_t));
    if (!h) return -1;
    t->w_heap = h;
    t->w_cap = nc;
    return 0;
}

static inline void bpe_heap_push_(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p]; i = p;
    }
    h[i] = v;
}
static inline uint64_t bpe_heap_pop_(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && h[c + 1] < h[c]) c++;
        if (v <= h[c]) break;
        h[i] = h[c]; i = c;
    }
    if (m) h[i] = v;
    return top;
}

// BPE-merges the n symbols in t->w_id (scratch for n + 1 reserved) and appends the
// resulting ids to out. GPT-2's bpe() (merge_hf 0): repeatedly take the lowest-ranked
// adjacent pair and merge all its occurrences left to right; pairs formed by that pass
// are considered afterwards. Hugging Face's BPE (merge_hf 1): repeatedly merge the one
// lowest-ranked pair, the leftmost of equal ones, so a pair formed by a merge can merge
// before the other occurrences of the pair that formed it. The two agree unless a merge
// uses a token that only a later merge makes (Gemma 3's and Llama 2's files do).
static int bpe_merge_ids_(BpeTokenizer *t, size_t n, BpeIds *out) {
    int32_t *id = t->w_id, *prev = t->w_prev, *next = t->w_next, *pend = t->w_pending;
    uint64_t *heap = t->w_heap;
    size_t hn = 0;
    int32_t end = (int32_t)n;
    for (size_t i = 0; i < n; i++) { prev[i] = (int32_t)i - 1; next[i] = (int32_t)i + 1; }
    for (size_t i = 0; i + 1 < n; i++) {
        int32_t r = bpe_pmap_rank_(t, id[i], id[i + 1]);
        if (r >= 0) bpe_heap_push_(heap, &hn, ((uint64_t)r << 32) | i);
    }
    while (hn) {
        uint32_t rank = (uint32_t)(heap[0] >> 32);
        const int32_t *m = t->merges + 3 * (size_t)rank;
        size_t np = 0;
        while (hn && (uint32_t)(heap[0] >> 32) == rank) {
            int32_t p = (int32_t)(uint32_t)bpe_heap_pop_(heap, &hn);
            if (id[p] != m[0]) continue;  // stale (dead nodes have id -1)
            int32_t q = next[p];
            if (q == end || id[q] != m[1]) continue;
            id[p] = m[2];
            id[q] = -1;
            next[p] = next[q];
            if (next[q] != end) prev[next[q]] = p;
            pend[np++] = p;
            if (t->merge_hf) break;
        }
        for (size_t k = 0; k < np; k++) {
            int32_t p = pend[k];
            if (prev[p] >= 0) {
                int32_t r = bpe_pmap_rank_(t, id[prev[p]], id[p]);
                if (r >= 0) bpe_heap_push_(heap, &hn, ((uint64_t)r << 32) | (uint32_t)prev[p]);
            }
            if (next[p] != end) {
                int32_t r = bpe_pmap_rank_(t, id[p], id[next[p]]);
                if (r >= 0) bpe_heap_push_(heap, &hn, ((uint64_t)r << 32) | (uint32_t)p);
            }
        }
    }
    for (int32_t p = 0; p != end; p = next[p])
        if (bpe_ids_push(out, id[p])) return BPE_ENOMEM;
    return 0;
}

// A byte-level pre-token (n >= 1 bytes): one symbol per byte, merged.
static int bpe_merge_word_(BpeTokenizer *t, const unsigned char *s, size_t n, BpeIds *out) {
    if (bpe_scratch_(t, n + 1)) return BPE_ENOMEM;
    for (size_t i = 0; i < n; i++) t->w_id[i] = t->byte_id[s[i]];
    return bpe_merge_ids_(t, n, out);
}

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

// A SentencePiece-style word (n >= 1 bytes of normalized text), as Hugging Face's BPE
// model starts it: one symbol per character, the character's token if it has one;
// otherwise with byte_fallback its UTF-8 bytes as <0xNN> tokens, else unk_token (one for
// a run of such characters with fuse_unk), else nothing. An invalid UTF-8 byte is one
// character (it has no token). Then merged.
static int bpe_sp_merge_word_(BpeTokenizer *t, const unsigned char *s, size_t n, BpeIds *out) {
    if (bpe_scratch_(t, n + 1)) return BPE_ENOMEM;
    size_t m = 0;
    int unk_pending = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = (size_t)utf8_decode(s + i, n - i, &cp);
        if (!l) l = 1;
        int32_t id = bpe_piece_find_(t, (const char *)s + i, l);
        if (id >= 0) {
            if (unk_pending) { t->w_id[m++] = t->sp_unk; unk_pending = 0; }
            t->w_id[m++] = id;
        } else if (t->sp_byte_fallback) {  // (loading checked that all 256 byte tokens exist, so no unk is pending)
            for (size_t k = 0; k < l; k++) t->w_id[m++] = t->sp_byte_tok[s[i + k]];
        } else if (t->sp_unk >= 0) {
            if (unk_pending && !t->sp_fuse_unk) t->w_id[m++] = t->sp_unk;
            unk_pending = 1;
        }
        i += l;
    }
    if (unk_pending) t->w_id[m++] = t->sp_unk;
    return bpe_merge_ids_(t, m, out);
}

static int bpe_word_ids_(BpeTokenizer *t, const unsigned char *s, size_t n, BpeIds *out) {
    return t->sp ? bpe_sp_merge_word_(t, s, n, out) : bpe_merge_word_(t, s, n, out);
}

#define BPE_CACHE_MAX_ENTRIES (1u << 20)
#define BPE_CACHE_MAX_KEY 256

static int bpe_encode_word_(BpeTokenizer *t, const unsigned char *s, size_t n, BpeIds *out) {
    if (n == 1 && !t->sp) return bpe_ids_push(out, t->byte_id[s[0]]);
    if (t->ignore_merges) {
        int32_t id = t->sp ? bpe_piece_find_(t, (const char *)s, n) : bpe_vmap_find_(t, (const char *)s, n);
        if (id >= 0) return bpe_ids_push(out, id);
    }
    if (n > BPE_CACHE_MAX_KEY) return bpe_word_ids_(t, s, n, out);
    uint64_t h = bpe_hash_(s, n);
    if (!t->cache_slots_cap) {
        t->cache_slots_cap = 1 << 12;
        t->cache_slots = (uint32_t *)calloc(t->cache_slots_cap, sizeof(uint32_t));
        if (!t->cache_slots) { t->cache_slots_cap = 0; return BPE_ENOMEM; }
    }
    size_t mask = t->cache_slots_cap - 1, slot = (size_t)h & mask;
    for (;;) {
        uint32_t e = t->cache_slots[slot];
        if (!e) break;
        const BpeCacheEntry_ *ce = &t->cache[e - 1];
        if (ce->hash == h && ce->key_len == n && memcmp(t->cache_keys + ce->key_off, s, n) == 0) {
            if (out->n + ce->val_len > out->cap &&
                bpe_grow_((void **)&out->data, &out->cap, out->n + ce->val_len, sizeof(int32_t))) return BPE_ENOMEM;
            memcpy(out->data + out->n, t->cache_vals + ce->val_off, ce->val_len * sizeof(int32_t));
            out->n += ce->val_len;
            return 0;
        }
        slot = (slot + 1) & mask;
    }
    size_t before = out->n;
    int rc = bpe_word_ids_(t, s, n, out);
    if (rc) return rc;
    size_t nv = out->n - before;
    // store in the cache (start over when it is full)
    if (t->cache_n >= BPE_CACHE_MAX_ENTRIES) bpe_cache_clear_(t);
    if ((t->cache_n + 1) * 2 > t->cache_slots_cap) {
        size_t nc = t->cache_slots_cap * 2;
        uint32_t *ns = (uint32_t *)calloc(nc, sizeof(uint32_t));
        if (!ns) return BPE_ENOMEM;
        for (size_t i = 0; i < t->cache_n; i++) {
            size_t k = (size_t)t->cache[i].hash & (nc - 1);
            while (ns[k]) k = (k + 1) & (nc - 1);
            ns[k] = (uint32_t)i + 1;
        }
        free(t->cache_slots);
        t->cache_slots = ns; t->cache_slots_cap = nc;
        mask = nc - 1;
        slot = (size_t)h & mask;
        while (t->cache_slots[slot]) slot = (slot + 1) & mask;
    }
    if (bpe_grow_((void **)&t->cache, &t->cache_cap, t->cache_n + 1, sizeof(BpeCacheEntry_)) ||
        bpe_grow_((void **)&t->cache_keys, &t->cache_keys_cap, t->cache_keys_n + n, 1) ||
        bpe_grow_((void **)&t->cache_vals, &t->cache_vals_cap, t->cache_vals_n + nv, sizeof(int32_t)))
        return BPE_ENOMEM;
    BpeCacheEntry_ *ce = &t->cache[t->cache_n];
    ce->hash = h;
    ce->key_off = (uint32_t)t->cache_keys_n; ce->key_len = (uint32_t)n;
    ce->val_off = (uint32_t)t->cache_vals_n; ce->val_len = (uint32_t)nv;
    memcpy(t->cache_keys + t->cache_keys_n, s, n);
    memcpy(t->cache_vals + t->cache_vals_n, out->data + before, nv * sizeof(int32_t));
    t->cache_keys_n += n; t->cache_vals_n += nv;
    t->cache_slots[slot] = (uint32_t)++t->cache_n;
    return 0;
}

// End of the pre-token at s[i] (i < n) under splitting rule kind (BPE_PRE_*). *piece
// carries SmolLM2's state from one call to the next over a text (start it at 0): the
// end of the stretch without \p{N} characters that GPT-2's pattern is splitting.
static size_t bpe_pretoken_next(int kind, const unsigned char *s, size_t n, size_t i, size_t *piece) {
    int cls, l;
    switch (kind) {
    case BPE_PRE_CL100K: return bpe_pretoken_end_cl100k(s, n, i, 3);
    case BPE_PRE_QWEN2: return bpe_pretoken_end_cl100k(s, n, i, 1);
    case BPE_PRE_O200K: return bpe_pretoken_end_o200k(s, n, i);
    case BPE_PRE_GPT2_DIGITS:  // each \p{N} character alone; GPT-2's pattern on the text between
        if (i >= *piece) {     // the stretch from s[i] to the next \p{N} character after it (so
            size_t p = i + (size_t)bpe_char_at_(s, n, i, &cls);  // a digit at s[i] is a run of one)
            while (p < n && (l = bpe_char_at_(s, n, p, &cls), cls != BPE_NUMBER)) p += (size_t)l;
            *piece = p;
        }
        return bpe_pretoken_end(s, *piece, i);
    default: return bpe_pretoken_end(s, n, i);
    }
}

// Text without added tokens (at_start: it begins the input): normalized, split into
// pre-tokens, each encoded. SentencePiece-style: the whole text is one; with
// Split(" ", MergedWithPrevious) pieces end after each space; Metaspace first makes
// spaces "\xe2\x96\x81", prepends one (always, or only at_start with "first") unless the
// text begins with one, and with split each piece begins at a "\xe2\x96\x81".
static int bpe_encode_plain_(BpeTokenizer *t, const unsigned char *s, size_t n, int at_start, BpeIds *out) {
    size_t i = 0, piece = 0;
    int rc = bpe_normalize_(t, s, n, &s, &n);
    if (!rc && n && t->sp_metaspace) {
        int prepend = (t->sp_metaspace == BPE_META_ALWAYS || (t->sp_metaspace == BPE_META_FIRST && at_start)) &&
                      !(n >= 3 && !memcmp(s, "\xe2\x96\x81", 3)) && !(s[0] == ' ');
        rc = bpe_space_rewrite_(t, prepend, 1, &s, &n);
    }
    while (i < n && !rc) {
        size_t j = i;
        if (!t->sp) j = bpe_pretoken_next(t->pretok, s, n, i, &piece);
        else if (t->sp_meta_split) {
            j = i + 1;
            while (j + 2 < n && memcmp(s + j, "\xe2\x96\x81", 3)) j++;
            if (j + 2 >= n) j = n;
        } else if (!t->sp_split_space) j = n;
        else { while (j < n && s[j] != ' ') j++; if (j < n) j++; }
        rc = bpe_encode_word_(t, s + i, j - i, out);
        i = j;
    }
    return rc;
}

// The added token starting at s[i] (the longest if several match) whose kind is in
// kinds (bit 0 special, bit 1 not special), or -1; its text is *len bytes.
static int32_t bpe_special_at_(const BpeTokenizer *t, const unsigned char *s, size_t n, size_t i, int kinds, size_t *len) {
    if (!(t->special_first[s[i]] & kinds)) return -1;
    int32_t best = -1, node = 0;
    for (size_t j = i; j < n; j++) {  // walk the trie along the text
        int32_t c = t->trie[4 * node];
        while (c >= 0 && t->trie[4 * c + 2] != s[j]) c = t->trie[4 * c + 1];
        if (c < 0) break;
        node = c;
        int32_t id = t->trie[4 * node + 3];
        if (id >= 0 && (t->tok_special[id] & kinds)) { best = id; *len = j + 1 - i; }
    }
    return best;
}

// Encodes text[0..len) and appends the ids to out. With parse_special, occurrences of
// special-token text (e.g. "<|endoftext|>") become those tokens; without it they are
// encoded as ordinary text. Added tokens that are not special (a tokenizer.json's
// "special": false, e.g. Qwen2's "<tool_call>") are always matched, as Hugging Face
// does; where several added tokens match at one place, the longest wins.
static int bpe_encode(BpeTokenizer *t, const char *text, size_t len, int parse_special, BpeIds *out,
                      char *err, size_t errlen) {
    const unsigned char *s = (const unsigned char *)text;
    int rc = 0, kinds = parse_special ? 3 : 2;
    size_t start = 0;
    for (size_t i = 0; i < len && !rc && t->n_specials;) {
        size_t sp_len = 0;
        int32_t sp = bpe_special_at_(t, s, len, i, kinds, &sp_len);
        if (sp < 0) { i++; continue; }
        rc = bpe_encode_plain_(t, s + start, i - start, start == 0, out);
        if (!rc) rc = bpe_ids_push(out, sp);
        i += sp_len;
        start = i;
    }
    if (!rc) rc = bpe_encode_plain_(t, s + start, len - start, start == 0, out);
    if (rc) return bpe_err_(err, errlen, rc, "out of memory while encoding");
    return 0;
}

// ---------------------------------------------------------------- decoding

// Appends the bytes of ids[0..n) to out. Fails on an id that is not a token. With a
// decoder Strip(" ", 1, 0) (Llama 2), a space that would begin this output is dropped.
static int bpe_decode(const BpeTokenizer *t, const int32_t *ids, size_t n, BpeBytes *out, char *err, size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        size_t l;
        const char *b = bpe_token_bytes(t, ids[i], &l);
        if (!b) return bpe_err_(err, errlen, BPE_ERANGE, "token id %ld is out of range (vocabulary size %d)",
                                (long)ids[i], (int)t->n_ids);
        if (t->sp_strip_space && i == 0 && l && b[0] == ' ') { b++; l--; }
        if (bpe_bytes_append(out, b, l)) return bpe_err_(err, errlen, BPE_ENOMEM, "out of memory while decoding");
    }
    return 0;
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

static int bpe_file_exists_(const char *path) { struct stat st; return stat(path, &st) == 0 && S_ISREG(st.st_mode); }

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

// The Split regexes we know, as tokenizer.json files spell them (after JSON unescaping).
static const char BPE_RE_CL100K[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char BPE_RE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char BPE_RE_O200K[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static int bpe_json_type_is_(const JsonValue *v, const char *type) {
    const JsonValue *ty = json_get(v, "type");
    return v && v->type == JSON_OBJECT && ty && ty->type == JSON_STRING && strcmp(ty->string, type) == 0;
}

// A ByteLevel pre-tokenizer with add_prefix_space false and use_regex as wanted
// (absent means true); 0 or an error naming the file.
static int bpe_json_check_byte_level_(const JsonValue *bl, int want_regex, const char *path, char *err, size_t errlen) {
    const JsonValue *aps = json_get(bl, "add_prefix_space"), *ur = json_get(bl, "use_regex");
    if (aps && aps->type == JSON_TRUE)
        return bpe_err_(err, errlen, BPE_EFORMAT, "%s: ByteLevel add_prefix_space=true is not supported", path);
    if ((!ur || ur->type != JSON_FALSE) != want_regex)
        return bpe_err_(err, errlen, BPE_EFORMAT, "%s: ByteLevel use_regex=%s is not supported %s", path, want_regex ? "false" : "true",
                        want_regex ? "(GPT-2 style files use the regex)" : "after a Split (the Split is the regex)");
    return 0;
}

// The pre-tokenizer of a tokenizer.json as BPE_PRE_* in *kind: ByteLevel (GPT-2),
// Sequence[ByteLevel], Sequence[Split(known regex, Isolated), ByteLevel(use_regex
// false)], or Sequence[Digits(individual_digits), ByteLevel]. Anything else is refused.
static int bpe_json_pretok_(const JsonValue *pt, const char *path, int *kind, char *err, size_t errlen) {
    const JsonValue *list = json_get(pt, "pretokenizers");
    size_t n = bpe_json_type_is_(pt, "Sequence") && list && list->type == JSON_ARRAY ? list->count : 0;
    const JsonValue *first = n ? &list->items[0] : pt, *last = n ? &list->items[n - 1] : pt;
    if (n <= 1 && bpe_json_type_is_(first, "ByteLevel")) {
        *kind = BPE_PRE_GPT2;
        return bpe_json_check_byte_level_(first, 1, path, err, errlen);
    }
    if (n == 2 && bpe_json_type_is_(first, "Split") && bpe_json_type_is_(last, "ByteLevel")) {
        const JsonValue *re = json_get(json_get(first, "pattern"), "Regex");
        const JsonValue *beh = json_get(first, "behavior"), *inv = json_get(first, "invert");
        if (!re || re->type != JSON_STRING)
            return bpe_err_(err, errlen, BPE_EFORMAT, "%s: pre_tokenizer Split without a pattern.Regex string is not supported", path);
        if (!strcmp(re->string, BPE_RE_CL100K)) *kind = BPE_PRE_CL100K;
        else if (!strcmp(re->string, BPE_RE_QWEN2)) *kind = BPE_PRE_QWEN2;
        else if (!strcmp(re->string, BPE_RE_O200K)) *kind = BPE_PRE_O200K;
        else return bpe_err_(err, errlen, BPE_EFORMAT, "%s: pre_tokenizer Split regex \"%.100s\" is not supported "
                             "(known: Llama 3 / cl100k_base, Qwen2, o200k_base)", path, re->string);
        if (!beh || beh->type != JSON_STRING || strcmp(beh->string, "Isolated") || (inv && inv->type != JSON_FALSE))
            return bpe_err_(err, errlen, BPE_EFORMAT, "%s: pre_tokenizer Split must have behavior \"Isolated\" and invert false", path);
        return bpe_json_check_byte_level_(last, 0, path, err, errlen);
    }
    if (n == 2 && bpe_json_type_is_(first, "Digits") && bpe_json_type_is_(last, "ByteLevel")) {
        const JsonValue *ind = json_get(first, "individual_digits");
        if (!ind || ind->type != JSON_TRUE)
            return bpe_err_(err, errlen, BPE_EFORMAT, "%s: pre_tokenizer Digits without individual_digits=true is not supported", path);
        *kind = BPE_PRE_GPT2_DIGITS;
        return bpe_json_check_byte_level_(last, 1, path, err, errlen);
    }
    return bpe_err_(err, errlen, BPE_EFORMAT, "%s: this pre_tokenizer is not supported (known: ByteLevel; Split with the "
                    "Llama 3 / cl100k_base, Qwen2 or o200k_base regex + ByteLevel; Digits + ByteLevel)", path);
}

// ---------------------------------------------------------------- SentencePiece-style tokenizer.json

static int bpe_json_is_string_(const JsonValue *v, const char *s) {
    return v && v->type == JSON_STRING && v->length == strlen(s) && memcmp(v->string, s, v->length) == 0;
}

// The normalizer of a tokenizer.json into t->norm: null, NFC, and for SentencePiece-style
// models (sp) Replace(" " -> "\xe2\x96\x81") and Prepend("\xe2\x96\x81"), alone or in a Sequence.
static int bpe_json_normalizers_(BpeTokenizer *t, const JsonValue *norm, int sp, const char *path, char *err, size_t errlen) {
    t->n_norm = 0;
    if (!norm || norm->type == JSON_NULL) return 0;
    const JsonValue *list = json_get(norm, "normalizers");
    int seq = bpe_json_type_is_(norm, "Sequence") && list && list->type == JSON_ARRAY;
    size_t n = seq ? list->count : 1;
    for (size_t k = 0; k < n; k++) {
        const JsonValue *v = seq ? &list->items[k] : norm;
        const JsonValue *ty = json_get(v, "type");
        int kind = 0;
        if (bpe_json_type_is_(v, "NFC")) kind = BPE_NORM_NFC;
        else if (sp && bpe_json_type_is_(v, "Replace") && bpe_json_is_string_(json_get(json_get(v, "pattern"), "String"), " ") &&
                 bpe_json_is_string_(json_get(v, "content"), "\xe2\x96\x81")) kind = BPE_NORM_SPACE;
        else if (sp && bpe_json_type_is_(v, "Prepend") && bpe_json_is_string_(json_get(v, "prepend"), "\xe2\x96\x81")) kind = BPE_NORM_PREPEND;
        for (int j = 0; j < t->n_norm; j++) if (t->norm[j] == kind) kind = 0;  // each at most once
        if (!kind || t->n_norm == 4)
            return bpe_err_(err, errlen, BPE_EFORMAT, "%s: normalizer %s is not supported (known: null, NFC%s)", path,
                            ty && ty->type == JSON_STRING ? ty->string : "(without a type)",
                            sp ? ", Replace(\" \" -> \"\xe2\x96\x81\"), Prepend(\"\xe2\x96\x81\"), a Sequence of them" : "");
        t->norm[t->n_norm++] = (uint8_t)kind;
    }
    return 0;
}

// 1 if the pre-tokenizer and model make a SentencePiece-style tokenizer.json (no
// ByteLevel pre-tokenizer: null, a Split on a string, Metaspace; or byte_fallback).
static int bpe_json_is_sp_(const JsonValue *pt, const JsonValue *model) {
    const JsonValue *bf = json_get(model, "byte_fallback");
    return !pt || pt->type == JSON_NULL || bpe_json_type_is_(pt, "Metaspace") ||
           (bpe_json_type_is_(pt, "Split") && json_get(json_get(pt, "pattern"), "String")) || (bf && bf->type == JSON_TRUE);
}

// The pre-tokenizer, decoder and model options of a SentencePiece-style tokenizer.json.
static int bpe_json_sp_config_(BpeTokenizer *t, const JsonValue *root, const char *path, char *err, size_t errlen) {
    const JsonValue *pt = json_get(root, "pre_tokenizer"), *dec = json_get(root, "decoder"), *model = json_get(root, "model");
    if (bpe_json_type_is_(pt, "Metaspace")) {
        const JsonValue *rep = json_get(pt, "replacement"), *sch = json_get(pt, "prepend_scheme"), *aps = json_get(pt, "add_prefix_space");
        const JsonValue *split = json_get(pt, "split");
        if (!bpe_json_is_string_(rep, "\xe2\x96\x81"))
            return bpe_err_(err, errlen, BPE_EFORMAT, "%s: pre_tokenizer Metaspace: only replacement \"\xe2\x96\x81\" is supported", path);
        if (bpe_json_is_string_(sch, "always") || (!sch && (!aps || aps->type == JSON_TRUE))) t->sp_metaspace = BPE_META_ALWAYS;
        else if (bpe_json_is_string_(sch, "first")) t->sp_metaspace = BPE_META_FIRST;
        else if (bpe_json_is_string_(sch, "never") || (!sch && aps && aps->type == JSON_FALSE)) t->sp_metaspace = BPE_META_NEVER;
        else return bpe_err_(err, errlen, BPE_EFORMAT, "%s: pre_tokenizer Metaspace: prepend_scheme must be always, first or never", path);
        t->sp_meta_split = !split || split->type != JSON_FALSE;
    } else if (pt && pt->type != JSON_NULL) {
        const JsonValue *inv = json_get(pt, "invert");
        if (!bpe_json_type_is_(pt, "Split") || !bpe_json_is_string_(json_get(json_get(pt, "pattern"), "String"), " ") ||
            !bpe_json_is_string_(json_get(pt, "behavior"), "MergedWithPrevious") || (inv && inv->type != JSON_FALSE))
            return bpe_err_(err, errlen, BPE_EFORMAT, "%s: pre_tokenizer: a SentencePiece-style model must have null, "
                            "Metaspace or Split(String \" \", behavior MergedWithPrevious, invert false)", path);
        t->sp_split_space = 1;
    }
    // decoder: Sequence[Replace("\xe2\x96\x81" -> " "), ByteFallback, Fuse] and optionally Strip(" ", 1, 0)
    const JsonValue *list = json_get(dec, "decoders");
    size_t n = bpe_json_type_is_(dec, "Sequence") && list && list->type == JSON_ARRAY ? list->count : 0;
    int ok = n == 3 || n == 4;
    if (ok) {
        const JsonValue *r = &list->items[0];
        ok = bpe_json_type_is_(r, "Replace") && bpe_json_is_string_(json_get(json_get(r, "pattern"), "String"), "\xe2\x96\x81") &&
             bpe_json_is_string_(json_get(r, "content"), " ") && bpe_json_type_is_(&list->items[1], "ByteFallback") &&
             bpe_json_type_is_(&list->items[2], "Fuse");
    }
    if (ok && n == 4) {
        const JsonValue *st = &list->items[3];
        int64_t start, stop;
        ok = bpe_json_type_is_(st, "Strip") && bpe_json_is_string_(json_get(st, "content"), " ") &&
             !json_int64(json_get(st, "start"), &start) && start == 1 && !json_int64(json_get(st, "stop"), &stop) && stop == 0;
        t->sp_strip_space = 1;
    }
    if (!ok)
        return bpe_err_(err, errlen, BPE_EFORMAT, "%s: decoder: a SentencePiece-style model must have Sequence[Replace(\"\xe2\x96\x81\" -> \" \"), "
                        "ByteFallback, Fuse], optionally then Strip(\" \", 1, 0)", path);
    static const char *const empty_or_null[] = {"continuing_subword_prefix", "end_of_word_suffix", "dropout"};
    for (int k = 0; k < 3; k++) {
        const JsonValue *v = json_get(model, empty_or_null[k]);
        if (v && v->type != JSON_NULL && !(v->type == JSON_STRING && v->length == 0))
            return bpe_err_(err, errlen, BPE_EFORMAT, "%s: model.%s must be null or empty", path, empty_or_null[k]);
    }
    const JsonValue *bf = json_get(model, "byte_fallback"), *fu = json_get(model, "fuse_unk");
    t->sp_byte_fallback = bf && bf->type == JSON_TRUE;
    t->sp_fuse_unk = fu && fu->type == JSON_TRUE;
    return 0;
}

// What a SentencePiece-style token decodes to, as the decoder above does it to one
// token: "<0xNN>" is byte NN, otherwise each "\xe2\x96\x81" is a space. out needs n bytes.
static size_t bpe_sp_decode_piece_(const char *s, size_t n, char *out) {
    if (n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>') {
        int v = 0, ok = 1;
        for (int k = 3; k < 5; k++) {
            char c = s[k];
            v = v * 16 + (c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : (ok = 0));
        }
        if (ok) { out[0] = (char)v; return 1; }
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 2 < n && !memcmp(s + i, "\xe2\x96\x81", 3)) { out[k++] = ' '; i += 2; }
        else out[k++] = s[i];
    }
    return k;
}

// Gives id the string s[0..n) (and, with in_model, makes the BPE model know it).
static int bpe_sp_set_piece_(BpeTokenizer *t, int32_t id, const char *s, size_t n, int in_model) {
    if (bpe_grow_((void **)&t->piece_data, &t->piece_data_cap, t->piece_data_n + n + 1, 1)) return BPE_ENOMEM;
    memcpy(t->piece_data + t->piece_data_n, s, n);
    t->piece_off[id] = (int64_t)t->piece_data_n;
    t->piece_len[id] = (int32_t)n;
    t->piece_data_n += n;
    if (!in_model) return 0;
    uint64_t hash = bpe_hash_(s, n);
    size_t mask = t->piece_map_cap - 1, h = (size_t)hash & mask;
    while (t->piece_map[h] != UINT64_MAX) h = (h + 1) & mask;
    t->piece_map[h] = (hash >> 32) << 32 | (uint32_t)id;
    return 0;
}

// model.vocab and model.merges of a SentencePiece-style tokenizer.json; n_ids bounds
// the ids of the vocabulary and the added tokens.
static int bpe_sp_load_model_(BpeTokenizer *t, const char *path, const JsonValue *model, int64_t id_limit, int32_t n_ids,
                              char *err, size_t errlen) {
    const JsonValue *vocab = json_get(model, "vocab"), *merges = json_get(model, "merges");
    if (!vocab || vocab->type != JSON_OBJECT || vocab->count == 0)
        return bpe_err_(err, errlen, BPE_EFORMAT, "%s: model.vocab is not a non-empty JSON object of token -> id", path);
    t->piece_off = (int64_t *)malloc((size_t)n_ids * sizeof(int64_t));
    t->piece_len = (int32_t *)malloc((size_t)n_ids * sizeof(int32_t));
    for (t->piece_map_cap = 1024; t->piece_map_cap < 2 * vocab->count; t->piece_map_cap *= 2) {}
    t->piece_map = (uint64_t *)malloc(t->piece_map_cap * sizeof(uint64_t));
    size_t key_bytes = 0;
    for (size_t i = 0; i < vocab->count; i++) key_bytes += vocab->key_lengths[i];
    // sized up front: the strings, the decoded bytes, and the hash tables of the tokens and merges
    if (!t->piece_off || !t->piece_len || !t->piece_map || bpe_grow_((void **)&t->piece_data, &t->piece_data_cap, key_bytes + 1, 1) ||
        bpe_grow_((void **)&t->tok_data, &t->tok_data_cap, key_bytes + 1, 1) || bpe_pmap_reserve_(t, merges && merges->type == JSON_ARRAY ? merges->count : 0))
        return bpe_err_(err, errlen, BPE_ENOMEM, "%s: out of memory", path);
    memset(t->piece_map, 0xff, t->piece_map_cap * sizeof(uint64_t));
    for (int32_t i = 0; i < n_ids; i++) t->piece_len[i] = -1;
    t->n_pieces = n_ids;
    char *buf = NULL;
    size_t buf_cap = 0;
    int rc = 0;
    for (size_t i = 0; i < vocab->count && !rc; i++) {
        const char *key = vocab->keys[i];
        size_t klen = vocab->key_lengths[i];
        int64_t id;
        if (json_int64(&vocab->items[i], &id) || id < 0 || id >= id_limit)
            rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: token \"%.80s\" has an invalid id (not an integer in 0..%lld)",
                          path, key, (long long)id_limit - 1);
        else if (t->piece_len[id] >= 0)
            rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: duplicate id %ld (tokens \"%.80s\" and another)", path, (long)id, key);
        else if (bpe_piece_find_(t, key, klen) >= 0)
            rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: duplicate token \"%.80s\"", path, key);
        else if (bpe_grow_((void **)&buf, &buf_cap, klen + 1, 1) || bpe_sp_set_piece_(t, (int32_t)id, key, klen, 1) ||
                 bpe_set_token_(t, (int32_t)id, buf, bpe_sp_decode_piece_(key, klen, buf)) ||
                 (bpe_vmap_find_(t, t->tok_data + t->tok_off[id], (size_t)t->tok_len[id]) < 0 && bpe_vmap_insert_(t, (int32_t)id)))
            rc = bpe_err_(err, errlen, BPE_ENOMEM, "%s: out of memory", path);
    }
    for (int b = 0; b < 256 && !rc; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->sp_byte_tok[b] = bpe_piece_find_(t, name, 6);
        if (t->sp_byte_fallback && t->sp_byte_tok[b] < 0)
            rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: model.byte_fallback is true but the vocabulary has no token %s", path, name);
    }
    const JsonValue *unk = json_get(model, "unk_token");
    if (!rc && unk && unk->type == JSON_STRING && (t->sp_unk = bpe_piece_find_(t, unk->string, unk->length)) < 0)
        rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: model.unk_token \"%.80s\" is not in the vocabulary", path, unk->string);
    else if (!rc && unk && unk->type != JSON_STRING && unk->type != JSON_NULL)
        rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: model.unk_token is not a string", path);
    if (!rc && (!merges || merges->type != JSON_ARRAY)) rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: model.merges is not an array", path);
    for (size_t i = 0; !rc && i < merges->count; i++) {
        const JsonValue *m = &merges->items[i];
        const char *a, *b;
        size_t na, nb;
        if (m->type == JSON_STRING) {  // "a b": the pieces have no spaces
            const char *sp = (const char *)memchr(m->string, ' ', m->length);
            if (!sp || sp == m->string || sp == m->string + m->length - 1 || memchr(sp + 1, ' ', (size_t)(m->string + m->length - sp - 1))) {
                rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: merge %ld: expected two tokens separated by one space", path, (long)i + 1);
                break;
            }
            a = m->string; na = (size_t)(sp - a); b = sp + 1; nb = (size_t)(m->string + m->length - b);
        } else if (m->type == JSON_ARRAY && m->count == 2 && m->items[0].type == JSON_STRING && m->items[1].type == JSON_STRING) {
            a = m->items[0].string; na = m->items[0].length; b = m->items[1].string; nb = m->items[1].length;
        } else {
            rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: merge %ld is neither \"a b\" nor [\"a\", \"b\"]", path, (long)i + 1);
            break;
        }
        int32_t ia = bpe_piece_find_(t, a, na), ib = bpe_piece_find_(t, b, nb), ir = -1;
        if (ia >= 0 && ib >= 0) {
            if (bpe_grow_((void **)&buf, &buf_cap, na + nb, 1)) { rc = bpe_err_(err, errlen, BPE_ENOMEM, "%s: out of memory", path); break; }
            memcpy(buf, a, na); memcpy(buf + na, b, nb);
            ir = bpe_piece_find_(t, buf, na + nb);
        }
        int w = (int)(na > 80 ? 80 : na), wb = (int)(nb > 80 ? 80 : nb);
        if (ia < 0) rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: merge %ld names unknown token \"%.*s\"", path, (long)i + 1, w, a);
        else if (ib < 0) rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: merge %ld names unknown token \"%.*s\"", path, (long)i + 1, wb, b);
        else if (ir < 0) rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: merge %ld: the merged token \"%.*s%.*s\" is not in the vocabulary",
                                       path, (long)i + 1, w, a, wb, b);
        else {
            int mr = bpe_add_merge_(t, ia, ib, ir);
            if (mr == BPE_EINVAL) rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: merge %ld (\"%.*s %.*s\") is listed twice", path, (long)i + 1, w, a, wb, b);
            else if (mr) rc = bpe_err_(err, errlen, BPE_ENOMEM, "%s: out of memory", path);
        }
    }
    free(buf);
    return rc;
}

// An added token of a SentencePiece-style tokenizer.json: the vocabulary's token with
// that id must have the same string; a new id decodes to its content (as the decoder does).
static int bpe_sp_added_token_(BpeTokenizer *t, const char *path, int32_t id, const char *s, size_t n, char *err, size_t errlen) {
    if (t->piece_len[id] >= 0) {
        if ((size_t)t->piece_len[id] != n || memcmp(t->piece_data + t->piece_off[id], s, n) != 0 || t->tok_special[id])
            return bpe_err_(err, errlen, BPE_EFORMAT, "%s: added token \"%.80s\" has id %ld, which is already another token", path, s, (long)id);
        return 0;
    }
    int dup = bpe_piece_find_(t, s, n) >= 0;
    for (int32_t k = 0; k < t->n_specials && !dup; k++) {
        int32_t l;
        const char *x = bpe_added_text_(t, t->specials[k], &l);
        dup = (size_t)l == n && memcmp(x, s, n) == 0;
    }
    if (dup) return bpe_err_(err, errlen, BPE_EFORMAT, "%s: duplicate token \"%.80s\"", path, s);
    char *buf = (char *)malloc(n + 1);
    int rc = !buf || bpe_sp_set_piece_(t, id, s, n, 0) || bpe_set_token_(t, id, buf, bpe_sp_decode_piece_(s, n, buf));
    free(buf);
    return rc ? bpe_err_(err, errlen, BPE_ENOMEM, "out of memory") : 0;
}

// The text[0..len) of a Hugging Face tokenizer.json of a byte-level BPE model (GPT-2's
// pre-tokenizer); path only names it in errors.
static int bpe_load_tokenizer_json_buffer(BpeTokenizer **out, const char *path, const char *text, size_t len, char *err, size_t errlen) {
    *out = NULL;
    int rc = 0;
    BpeTokenizer *t = bpe_new_();
    JsonDoc doc;
    memset(&doc, 0, sizeof doc);
    if (!t) return bpe_err_(err, errlen, BPE_ENOMEM, "out of memory");
    if (json_parse(text, len, &doc)) {
        rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: bad JSON: %s", path, doc.error);
        bpe_free(t);
        return rc;
    }
    const JsonValue *model = json_get(doc.root, "model");
    const JsonValue *type = json_get(model, "type");
    const JsonValue *pt = json_get(doc.root, "pre_tokenizer");
    const JsonValue *merges = json_get(model, "merges");
    const JsonValue *added = json_get(doc.root, "added_tokens");
    const JsonValue *norm = json_get(doc.root, "normalizer");
    t->sp = bpe_json_is_sp_(pt, model);
    t->merge_hf = 1;
    if (!model || model->type != JSON_OBJECT) rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: no \"model\" object", path);
    else if (type && (type->type != JSON_STRING || strcmp(type->string, "BPE") != 0))
        rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: model type is not BPE", path);
    else if (!merges || merges->type != JSON_ARRAY) rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: model.merges is not an array", path);
    else if (added && added->type != JSON_ARRAY && added->type != JSON_NULL)
        rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: added_tokens is not an array", path);
    else rc = bpe_json_normalizers_(t, norm, t->sp, path, err, errlen);
    if (!rc) rc = t->sp ? bpe_json_sp_config_(t, doc.root, path, err, errlen) : bpe_json_pretok_(pt, path, &t->pretok, err, errlen);
    t->ignore_merges = json_get(model, "ignore_merges") && json_get(model, "ignore_merges")->type == JSON_TRUE;
    const JsonValue *vocab = json_get(model, "vocab");
    size_t n_added = added && added->type == JSON_ARRAY ? added->count : 0;
    int64_t id_limit = bpe_id_limit_((vocab && vocab->type == JSON_OBJECT ? vocab->count : 0) + n_added);
    if (!rc && t->sp) {  // the id tables cover the largest id of the vocabulary and the added tokens
        int64_t top = -1, id;
        for (size_t i = 0; vocab && vocab->type == JSON_OBJECT && i < vocab->count; i++)
            if (!json_int64(&vocab->items[i], &id) && id > top && id < id_limit) top = id;
        for (size_t i = 0; i < n_added; i++)
            if (!json_int64(json_get(&added->items[i], "id"), &id) && id > top && id < id_limit) top = id;
        rc = bpe_sp_load_model_(t, path, model, id_limit, top >= 0 ? (int32_t)top + 1 : 1, err, errlen);
    } else if (!rc) rc = bpe_load_vocab_json_(t, path, vocab, id_limit, err, errlen);
    for (size_t i = 0; !rc && !t->sp && i < merges->count; i++) {
        const JsonValue *m = &merges->items[i];
        if (m->type == JSON_STRING) {
            const char *sp = (const char *)memchr(m->string, ' ', m->length);
            if (!sp || sp == m->string || sp == m->string + m->length - 1 ||
                memchr(sp + 1, ' ', (size_t)(m->string + m->length - sp - 1)))
                rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: merge %ld: expected two tokens separated by one space", path, (long)i + 1);
            else
                rc = bpe_load_merge_(t, path, (long)i + 1, m->string, (size_t)(sp - m->string), sp + 1,
                                     (size_t)(m->string + m->length - sp - 1), err, errlen);
        } else if (m->type == JSON_ARRAY && m->count == 2 && m->items[0].type == JSON_STRING && m->items[1].type == JSON_STRING) {
            rc = bpe_load_merge_(t, path, (long)i + 1, m->items[0].string, m->items[0].length, m->items[1].string,
                                 m->items[1].length, err, errlen);
        } else {
            rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: merge %ld is neither \"a b\" nor [\"a\", \"b\"]", path, (long)i + 1);
        }
    }
    for (size_t i = 0; !rc && added && added->type == JSON_ARRAY && i < added->count; i++) {
        const JsonValue *a = &added->items[i];
        const JsonValue *c = json_get(a, "content");
        int64_t id;
        if (!c || c->type != JSON_STRING || c->length == 0 || json_int64(json_get(a, "id"), &id) || id < 0 || id >= id_limit) {
            rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: added_tokens[%ld] needs an integer \"id\" (0..%lld) and a non-empty \"content\"",
                          path, (long)i, (long long)id_limit - 1);
            break;
        }
        static const char *const unsupported[] = {"lstrip", "rstrip", "single_word", "normalized"};
        for (int k = 0; k < (t->n_norm ? 4 : 3) && !rc; k++)  // normalized: matched in the normalized text
            if (json_get(a, unsupported[k]) && json_get(a, unsupported[k])->type == JSON_TRUE)
                rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: added token \"%.80s\": %s=true is not supported%s", path, c->string,
                              unsupported[k], k == 3 ? " with a normalizer" : "");
        if (rc) break;
        if (t->sp) {
            rc = bpe_sp_added_token_(t, path, (int32_t)id, c->string, c->length, err, errlen);
            if (rc) break;
        } else if (id < t->n_ids && t->tok_len[id] >= 0) {
            if ((size_t)t->tok_len[id] != c->length || memcmp(t->tok_data + t->tok_off[id], c->string, c->length) != 0 ||
                t->tok_special[id]) {
                rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: added token \"%.80s\" has id %ld, which is already another token",
                              path, c->string, (long)id);
                break;
            }
        } else {
            if (bpe_token_id(t, c->string, c->length) >= 0) {
                rc = bpe_err_(err, errlen, BPE_EFORMAT, "%s: duplicate token \"%.80s\"", path, c->string);
                break;
            }
            if (bpe_set_token_(t, (int32_t)id, c->string, c->length)) { rc = bpe_err_(err, errlen, BPE_ENOMEM, "out of memory"); break; }
        }
        if (bpe_mark_added_(t, (int32_t)id, json_get(a, "special") && json_get(a, "special")->type == JSON_FALSE ? 2 : 1))
            rc = bpe_err_(err, errlen, BPE_ENOMEM, "out of memory");
    }
    json_free(&doc);
    if (rc) { bpe_free(t); return rc; }
    *out = t;
    return 0;
}

// A Hugging Face tokenizer.json file.
static int bpe_load_tokenizer_json(BpeTokenizer **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    char *text = NULL;
    size_t len;
    int rc = bpe_read_file_(path, &text, &len, err, errlen);
    if (rc) return rc;
    rc = bpe_load_tokenizer_json_buffer(out, path, text, len, err, errlen);
    free(text);
    return rc;
}

// A tokenizer.json file, or a directory: its tokenizer.json if it has one (a Hugging
// Face model directory; Qwen2's also has vocab.json + merges.txt, which lack its
// pre-tokenizer), otherwise its GPT-2 files.
static int bpe_load(BpeTokenizer **out, const char *path, char *err, size_t errlen) {
    struct stat st;
    *out = NULL;
    if (stat(path, &st) != 0) return bpe_err_(err, errlen, BPE_EIO, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return bpe_load_tokenizer_json(out, path, err, errlen);
    size_t n = strlen(path) + 32;
    char *tj = (char *)malloc(n);
    if (!tj) return bpe_err_(err, errlen, BPE_ENOMEM, "out of memory");
    snprintf(tj, n, "%s/tokenizer.json", path);
    int rc = bpe_file_exists_(tj) ? bpe_load_tokenizer_json(out, tj, err, errlen) : bpe_load_gpt2_dir(out, path, err, errlen);
    free(tj);
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

// A Hugging Face tokenizer.json (byte-level BPE) with this tokenizer's pre-tokenizer,
// ignore_merges and added tokens.
static int bpe_save_tokenizer_json(const BpeTokenizer *t, const char *path, char *err, size_t errlen) {
    if (t->sp) return bpe_err_(err, errlen, BPE_EINVAL, "%s: saving a SentencePiece-style tokenizer is not supported", path);
    char *buf = (char *)malloc(4 * (size_t)bpe_max_token_len_(t) + 8);
    if (!buf) return bpe_err_(err, errlen, BPE_ENOMEM, "out of memory");
    FILE *f = fopen(path, "wb");
    if (!f) { free(buf); return bpe_err_(err, errlen, BPE_EIO, "%s: cannot create: %s", path, strerror(errno)); }
    fputs("{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,\n\"added_tokens\": [", f);
    for (int32_t k = 0; k < t->n_specials; k++) {
        int32_t id = t->specials[k];
        fprintf(f, "%s\n  {\"id\": %d, \"content\": ", k ? "," : "", (int)id);
        bpe_json_write_string_(f, t->tok_data + t->tok_off[id], (size_t)t->tok_len[id]);
        fprintf(f, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": %s}",
                t->tok_special[id] == 1 ? "true" : "false");
    }
    fprintf(f, "],\n\"normalizer\": %s,\n\"pre_tokenizer\": ", t->n_norm ? "{\"type\": \"NFC\"}" : "null");  // (NFC is the only one here)
    const char *re = t->pretok == BPE_PRE_CL100K ? BPE_RE_CL100K : t->pretok == BPE_PRE_QWEN2 ? BPE_RE_QWEN2
                   : t->pretok == BPE_PRE_O200K ? BPE_RE_O200K : NULL;
    if (re) {
        fputs("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": ", f);
        bpe_json_write_string_(f, re, strlen(re));
        fputs("}, \"behavior\": \"Isolated\", \"invert\": false}, "
              "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}]},\n", f);
    } else {
        fputs(t->pretok == BPE_PRE_GPT2_DIGITS ? "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", \"individual_digits\": true}, " : "", f);
        fputs("{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}", f);
        fputs(t->pretok == BPE_PRE_GPT2_DIGITS ? "]},\n" : ",\n", f);
    }
    fprintf(f, "\"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, \"use_regex\": true},\n"
               "\"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n"
               "\"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": \"\", "
               "\"end_of_word_suffix\": \"\", \"fuse_unk\": false, \"byte_fallback\": false,%s\n\"vocab\": ",
            t->ignore_merges ? " \"ignore_merges\": true," : "");  // GPT-2 style files stay as they were
    bpe_write_vocab_object_(t, f, buf, 1);
    fputs(",\n\"merges\": [", f);
    for (int32_t r = 0; r < t->n_merges; r++) {
        fputs(r ? ",\n  " : "\n  ", f);
        size_t la = bpe_token_mapped_(t, t->merges[3 * r], buf);
        buf[la] = ' ';
        size_t lb = bpe_token_mapped_(t, t->merges[3 * r + 1], buf + la + 1);
        bpe_json_write_string_(f, buf, la + 1 + lb);
    }
    fputs("]}}\n", f);
    free(buf);
    return bpe_close_(f, path, err, errlen);
}

#include "bpe_train.h"

#endif
