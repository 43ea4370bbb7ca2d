// roundtrip.h: the tokenizer property the harnesses share: every byte string
// encodes (with and without special-token parsing) to ids that decode back to it,
// unless the tokenizer changes that text (fz_text_kept_).
#ifndef SFT_FUZZ_ROUNDTRIP_H
#define SFT_FUZZ_ROUNDTRIP_H

#include "../../tokenizer/bpe.h"
#include "fuzz.h"

// 1 if decoding must give s back: no normalizer changes it (NFC's quick check passes,
// no space becomes U+2581, nothing is prepended, also by Metaspace), and for SentencePiece-style models
// it has no U+2581 and no "<0x" (both decode to something else), every character has a
// token or byte tokens (byte_fallback), and no leading space a Strip decoder drops.
static int fz_text_kept_(BpeTokenizer *t, const char *s, size_t n) {
    for (int k = 0; k < t->n_norm; k++) {
        const unsigned char *o;
        size_t m;
        if (t->norm[k] == BPE_NORM_NFC && (bpe_nfc_(t, (const unsigned char *)s, n, &o, &m) || o != (const unsigned char *)s)) return 0;
        if (t->norm[k] == BPE_NORM_SPACE && memchr(s, ' ', n)) return 0;
        if (t->norm[k] == BPE_NORM_PREPEND) return 0;
    }
    if (!t->sp) return 1;
    if (t->sp_metaspace && (memchr(s, ' ', n) || t->sp_metaspace != BPE_META_NEVER)) return 0;
    for (size_t i = 0; i + 2 < n; i++)
        if (!memcmp(s + i, "\xe2\x96\x81", 3) || !memcmp(s + i, "<0x", 3)) return 0;
    return t->sp_byte_fallback && !(t->sp_strip_space && n && s[0] == ' ');
}

static void fz_check_roundtrip(BpeTokenizer *t, const char *s, size_t n, int parse_special) {
    char err[BPE_ERR_LEN];
    BpeIds ids = {0};
    BpeBytes out = {0};
    FZ_CHECK(bpe_encode(t, s, n, parse_special, &ids, err, sizeof err) == 0, "encode: %s", err);
    for (size_t i = 0; i < ids.n; i++)
        FZ_CHECK(ids.data[i] >= 0 && ids.data[i] < bpe_vocab_size(t), "id %d of %d", ids.data[i], bpe_vocab_size(t));
    FZ_CHECK(bpe_decode(t, ids.data, ids.n, &out, err, sizeof err) == 0, "decode: %s", err);
    if (fz_text_kept_(t, s, n))
        FZ_CHECK(out.n == n && (n == 0 || memcmp(out.data, s, n) == 0), "decode(encode(x)) != x (%zu bytes in, %zu out)", n, out.n);
    bpe_ids_free(&ids);
    bpe_bytes_free(&out);
}

#endif
