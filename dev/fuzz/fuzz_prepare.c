// fuzz_prepare: prepare's row conversion (data/prepare.c, render_row) for every row
// shape, each input line one JSONL row, with the small trained tokenizer.
// prepare.c is compiled in with its main() renamed, so the harness runs exactly
// the program's code. Properties: a bad row gets a one-line reason; a good row
// becomes a document that starts with an untrained <|endoftext|>, ends with a
// trained one, and holds only valid token ids; render_row never calls fatal().
#include "fuzz.h"
#include "tokenizer.h"

#define main prepare_main
#include "../../data/prepare.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Ctx c;
    c.tok = fz_tokenizer_shared(&c.ct);
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
            for (int train_on_prompt = 0; train_on_prompt < 2; train_on_prompt++) {
                d.n = 0;
                if (render_row(&c, doc.root, train_on_prompt, &d, &info, why, sizeof why)) {
                    FZ_CHECK(why[0] && !strchr(why, '\n'), "reason [%s]", why);
                    break;
                }
                FZ_CHECK(d.n >= 2 && d.ids[0] == c.ct.bos && !d.train[0] && d.ids[d.n - 1] == c.ct.end && d.train[d.n - 1],
                         "document of %zu tokens", d.n);
                for (size_t i = 0; i < d.n; i++)
                    FZ_CHECK(d.ids[i] >= 0 && d.ids[i] < bpe_vocab_size(c.tok) && d.train[i] <= 1, "token %zu", i);
            }
            json_free(&doc);
        }
        line += n + 1;
    }
    chat_doc_free(&d);
    fz_end();
    return 0;
}
