// encode.h: text to ids and back. Encoding follows GPT-2 exactly: added tokens are
// matched first (the longest at a place; special ones only with parse_special), the
// text between them is normalized (normalize.h), split into pre-tokens
// (pretokenize.h), each mapped byte by byte to single-byte tokens and merged by rank,
// either in GPT-2's passes or one pair at a time as Hugging Face's BPE does
// (tokenizer.json), with ignore_merges where the file asks for it (a pre-token that is a
// vocabulary token is that token). SentencePiece-style models (Gemma 3, Llama 2) start
// from one symbol per character instead, with byte_fallback, unk and Metaspace. Encoded
// pre-tokens are cached. Decoding concatenates the tokens' bytes.
// Not here: the tables being used (vocab.h), loading them (gpt2_files.h,
// tokenizer_json.h).
#ifndef TOK_ENCODE_H
#define TOK_ENCODE_H

#include <stdint.h>
#include <string.h>

#include "../base/utf8.h"
#include "normalize.h"
#include "pretokenize.h"
#include "vocab.h"

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

#endif
