// roundtrip.h: the tokenizer property the harnesses share: every byte string
// encodes (with and without special-token parsing) to ids that decode back to it.
#ifndef SFT_FUZZ_ROUNDTRIP_H
#define SFT_FUZZ_ROUNDTRIP_H

#include "../../tokenizer/bpe.h"
#include "fuzz.h"

static void fz_check_roundtrip(BpeTokenizer *t, const char *s, size_t n, int parse_special) {
    char err[BPE_ERR_LEN];
    BpeIds ids = {0};
    BpeBytes out = {0};
    FZ_CHECK(bpe_encode(t, s, n, parse_special, &ids, err, sizeof err) == 0, "encode: %s", err);
    for (size_t i = 0; i < ids.n; i++)
        FZ_CHECK(ids.data[i] >= 0 && ids.data[i] < bpe_vocab_size(t), "id %d of %d", ids.data[i], bpe_vocab_size(t));
    FZ_CHECK(bpe_decode(t, ids.data, ids.n, &out, err, sizeof err) == 0, "decode: %s", err);
    FZ_CHECK(out.n == n && (n == 0 || memcmp(out.data, s, n) == 0), "decode(encode(x)) != x (%zu bytes in, %zu out)", n, out.n);
    bpe_ids_free(&ids);
    bpe_bytes_free(&out);
}

#endif
