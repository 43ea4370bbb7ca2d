// fuzz_tok_json: Hugging Face tokenizer.json (tokenizer/tokenizer_json.h,
// bpe_load_tokenizer_json_buffer). Properties: a rejected file gets one line naming
// it; an accepted tokenizer round-trips the input bytes themselves.
#include "fuzz.h"
#include "roundtrip.h"

#define NAME "fuzz/tokenizer.json"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    BpeTokenizer *t;
    char err[BPE_ERR_LEN];
    fz_begin();
    if (setjmp(fz_jmp)) { fz_after_fatal(NULL); return 0; }  // bpe.h never calls fatal
    int rc = bpe_load_tokenizer_json_buffer(&t, NAME, (const char *)data, size, err, sizeof err);
    if (rc) {
        FZ_CHECK(t == NULL && !strchr(err, '\n') && (strstr(err, NAME) || rc == BPE_ENOMEM), "error [%s]", err);
    } else {
        fz_check_roundtrip(t, (const char *)data, size, 0);
        fz_check_roundtrip(t, (const char *)data, size, 1);
        bpe_free(t);
    }
    fz_end();
    return 0;
}
