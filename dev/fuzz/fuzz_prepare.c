// fuzz_prepare: prepare's row conversion (data/prepare.c, render_row) for every row
// shape, each input line one JSONL row, with the small trained tokenizer, in each chat
// format (gpt2, chatml, llama3; the latter two's tokens added to the tokenizer).
// prepare.c is compiled in with its main() renamed, so the harness runs exactly
// the program's code. Properties: a bad row gets a one-line reason (the same in
// every format); a good row becomes a document of valid token ids whose first token
// is untrained and, in gpt2, an <|endoftext|> that ends with a trained one;
// render_row never calls fatal().
#include "fuzz.h"
#include "tokenizer.h"

#define main prepare_main
#include "../../data/prepare.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Ctx c;
    static ChatTokens formats[CHAT_NFORMATS];
    c.tok = fz_tokenizer_shared(&formats[CHAT_GPT2]);
    if (!formats[CHAT_LLAMA3].f) {  // once: the tokenizer is shared, so are the tokens added to it
        char err[BPE_ERR_LEN];
        if (chat_tokens_init(c.tok, CHAT_CHATML, &formats[CHAT_CHATML], err, sizeof err) ||
            chat_tokens_init(c.tok, CHAT_LLAMA3, &formats[CHAT_LLAMA3], err, sizeof err)) {
            fprintf(stderr, "chat tokens: %s\n", err);
            abort();
        }
    }
    ChatDoc d = {0};
    RowInfo info;  // what the warnings use; not checked here
    char why[512];
    const char *s = (const char *)data, *end = s + size;
    fz_begin();
    if (setjmp(fz_jmp)) {  // render_row reports bad rows; only out of memory would be fatal
        fprintf(stderr, "render_row called fatal: %s\n", sft_fatal_message);
        abort();
    }
    for (const char *line = s; line < end;) {
        const char *nl = (const char *)memchr(line, '\n', (size_t)(end - line));
        size_t n = nl ? (size_t)(nl - line) : (size_t)(end - line);
        JsonDoc doc;
        if (json_parse(line, n, &doc) == 0) {
            int bad_rows = 0;
            for (int f = 0; f < CHAT_NFORMATS; f++) {
                c.ct = formats[f];
                for (int train_on_prompt = 0; train_on_prompt < 2; train_on_prompt++) {
                    d.n = 0;
                    if (render_row(&c, doc.root, train_on_prompt, &d, &info, why, sizeof why)) {
                        FZ_CHECK(why[0] && !strchr(why, '\n'), "reason [%s]", why);
                        bad_rows++;
                        break;
                    }
                    FZ_CHECK(d.n >= 1 && !d.train[0], "format %d: document of %zu tokens", f, d.n);
                    if (f == CHAT_GPT2)
                        FZ_CHECK(d.n >= 2 && d.ids[0] == c.ct.bos && d.ids[d.n - 1] == c.ct.end && d.train[d.n - 1], "document of %zu tokens", d.n);
                    for (size_t i = 0; i < d.n; i++)
                        FZ_CHECK(d.ids[i] >= 0 && d.ids[i] < bpe_vocab_size(c.tok) && d.train[i] <= 1, "token %zu", i);
                }
            }
            FZ_CHECK(bad_rows == 0 || bad_rows == CHAT_NFORMATS, "a row bad in %d of the %d formats", bad_rows, CHAT_NFORMATS);
            json_free(&doc);
        }
        line += n + 1;
    }
    chat_doc_free(&d);
    fz_end();
    return 0;
}
