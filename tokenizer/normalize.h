// normalize.h: the normalizers a tokenizer.json may name, applied to text before it
// is split into pre-tokens: NFC (Unicode Standard Annex #15, tables from
// dev/gen_nfc_tables.py in nfc_tables.h; Hangul syllables computed) and, for
// SentencePiece-style files, Replace(" " -> "\xe2\x96\x81") and Prepend("\xe2\x96\x81")
// (also what the Metaspace pre-tokenizer does to spaces). Invalid UTF-8 bytes pass
// through unchanged. Results go to scratch buffers of the BpeTokenizer.
// Not here: reading the normalizer from a tokenizer.json (tokenizer_json.h), the
// splitting rules (pretokenize.h).
#ifndef TOK_NORMALIZE_H
#define TOK_NORMALIZE_H

#include <stdint.h>
#include <string.h>

#include "../base/utf8.h"
#include "nfc_tables.h"
#include "vocab.h"

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

#endif
