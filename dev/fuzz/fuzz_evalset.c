// fuzz_evalset: the exact-match evaluation JSONL reader (train/evalset.h,
// evalset_load_buffer) with the small trained tokenizer and a 64-token context.
// Properties: a rejected file gets one line naming it; every accepted row has a
// prompt of 1..64 valid token ids and its texts as written.
#include "fuzz.h"
#include "tokenizer.h"
#include "../../train/evalset.h"

#define NAME "fuzz/eval.jsonl"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ChatTokens ct;
    BpeTokenizer *tok;
    EvalSet es;
    fz_begin();
    if (setjmp(fz_jmp)) { fz_after_fatal(NAME); return 0; }
    tok = fz_tokenizer_new(&ct);
    char *text = (char *)xmalloc(size + 1);
    memcpy(text, data, size);
    evalset_load_buffer(&es, NAME, text, size, tok, &ct, 64, (int)(size & 1));
    FZ_CHECK(es.n >= 1, "no rows accepted");
    for (int i = 0; i < es.n; i++) {
        FZ_CHECK(es.prompt_lens[i] >= 1 && es.prompt_lens[i] <= 64 && es.prompt_texts[i], "row %d", i);
        for (int k = 0; k < es.prompt_lens[i]; k++) FZ_CHECK(es.prompts[i][k] >= 0 && es.prompts[i][k] < bpe_vocab_size(tok), "id");
    }
    evalset_free(&es);
    bpe_free(tok);
    fz_end();
    return 0;
}
