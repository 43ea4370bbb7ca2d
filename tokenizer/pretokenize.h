// pretokenize.h: how text is split into pre-tokens before merging: the splitting
// rules (BPE_PRE_*) of GPT-2, SmolLM2 (GPT-2's with single digits), Llama 3 (=
// cl100k_base), Qwen2 and o200k_base, each one known regex scanned by hand over the
// Unicode classes of unicode_tables.h. GPT-2's pattern is
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with \s as JavaScript defines it (docs/tokenizer.md has the others). An invalid UTF-8
// byte is one character of class "other" (like punctuation), so every byte string splits.
// Not here: a regex engine (a tokenizer.json naming any other regex is refused, see
// tokenizer_json.h), the normalizers that run before (normalize.h), the merging after
// (encode.h). Pure functions of the text: no tokenizer state.
#ifndef TOK_PRETOKENIZE_H
#define TOK_PRETOKENIZE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../base/utf8.h"
#include "unicode_tables.h"

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

#endif
