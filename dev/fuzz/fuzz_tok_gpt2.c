// fuzz_tok_gpt2: the GPT-2 tokenizer files (tokenizer/gpt2_files.h, bpe_load_gpt2_buffers):
// encoder.json + vocab.bpe, which are the same formats as Hugging Face's
// vocab.json + merges.txt. The input is the vocabulary, a NUL byte, then the merges.
// Properties: a rejected pair gets one line naming the file at fault; an accepted
// tokenizer round-trips the input bytes themselves.
#include "fuzz.h"
#include "roundtrip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data;
    const char *nul = (const char *)memchr(s, 0, size);
    size_t vlen = nul ? (size_t)(nul - s) : size;
    const char *m = nul ? nul + 1 : s + size;
    size_t mlen = size - vlen - (nul ? 1 : 0);
    BpeTokenizer *t;
    char err[BPE_ERR_LEN];
    fz_begin();
    if (setjmp(fz_jmp)) { fz_after_fatal(NULL); return 0; }  // bpe.h never calls fatal
    int rc = bpe_load_gpt2_buffers(&t, "fuzz/encoder.json", s, vlen, "fuzz/vocab.bpe", m, mlen, err, sizeof err);
    if (rc) {
        FZ_CHECK(t == NULL && !strchr(err, '\n') && (strstr(err, "fuzz/encoder.json") || strstr(err, "fuzz/vocab.bpe") || rc == BPE_ENOMEM),
                 "error [%s]", err);
    } else {
        fz_check_roundtrip(t, s, size, 0);
        fz_check_roundtrip(t, s, size, 1);
        bpe_free(t);
    }
    fz_end();
    return 0;
}
