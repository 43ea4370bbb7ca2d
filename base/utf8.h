// utf8.h: strict UTF-8 decoding and encoding, shared by the JSON parser, the
// tokenizer and the programs that print model output; Python's str.strip() (Jinja's
// trim filter), shared by the chat formats.
#ifndef SFT_UTF8_H
#define SFT_UTF8_H

#include <stddef.h>
#include <stdint.h>

// Decodes one UTF-8 sequence at s[0..n): returns its length and sets *cp, or
// returns 0 if it is invalid (overlong, surrogate, beyond U+10FFFF, truncated).
static inline int utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    int len;
    uint32_t min;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; min = 0x10000; }
    else return 0;
    if ((size_t)len > n) return 0;
    uint32_t v = c & (0x3F >> (len - 1));
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

// Writes code point cp (at most U+10FFFF, not a surrogate) as UTF-8; returns the byte count.
static inline size_t utf8_encode(char *out, uint32_t cp) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F)); return 4;
}

// Python's str.isspace() for one code point, which is what str.strip() without
// arguments removes (and so Jinja's `trim`): general category Zs, or bidirectional
// class WS, B or S. That is TAB..CR, the separators U+001C..U+001F, space, U+0085
// (NEL), U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F and U+3000;
// not U+180E, U+200B or U+FEFF (format characters).
static inline int py_isspace(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// str.strip() on the UTF-8 text s[0..*n): returns where the stripped text starts and
// sets *n to its length. Stripping stops at a byte sequence that is not valid UTF-8
// (a stray continuation byte 0x85 is not U+0085).
static inline const char *py_strip_span(const char *s, size_t *n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t lo = 0, hi = *n;
    uint32_t cp = 0;
    int k;
    while (lo < hi && (k = utf8_decode(p + lo, hi - lo, &cp)) > 0 && py_isspace(cp)) lo += (size_t)k;
    while (hi > lo) {
        size_t start = hi - 1;  // the last sequence starts at most 3 continuation bytes back
        while (start > lo && hi - start < 4 && (p[start] & 0xC0) == 0x80) start--;
        if (utf8_decode(p + start, hi - start, &cp) != (int)(hi - start) || !py_isspace(cp)) break;
        hi = start;
    }
    *n = hi - lo;
    return s + lo;
}

#endif
