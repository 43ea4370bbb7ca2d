// fuzz_datafile: the SFT data file reader (base/datafile.h, data_load_buffer) and
// the loader over what it accepts. Properties: a rejected file gets one line naming
// it; an accepted one packs into rows whose inputs and targets are token ids below
// the vocabulary size, in both packings (next-fit and best-fit, chosen by the
// document count); best-fit's epoch order holds every document once.
#include "fuzz.h"
#include "../../base/datafile.h"

#define NAME "fuzz.bin"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    DataFile df;
    Loader ld;
    fz_begin();
    if (setjmp(fz_jmp)) { fz_after_fatal(NAME); return 0; }
    char *buf = (char *)xmalloc(size + 1);
    memcpy(buf, data, size);
    data_load_buffer(&df, NAME, buf, size);
    int T = 1 + (int)(df.num_tokens % 7), B = 2, best_fit = (int)(df.num_docs % 2);
    int64_t filled;
    int64_t rows = loader_rows_in_epoch(&df, T, 1, 7, best_fit, 0, &filled);
    FZ_CHECK(rows >= 1 && filled >= 1 && filled <= rows * T, "rows %lld filled %lld", (long long)rows, (long long)filled);
    loader_init(&ld, &df, B, T, 1, 7, 1);
    loader_set_best_fit(&ld, best_fit);
    if (best_fit) {
        uint8_t *seen = (uint8_t *)xmalloc((size_t)df.num_docs);
        memset(seen, 0, (size_t)df.num_docs);
        for (int64_t i = 0; i < df.num_docs; i++) {
            int64_t d = ld.order[i];
            FZ_CHECK(d >= 0 && d < df.num_docs && !seen[d], "document %lld twice in the epoch", (long long)d);
            seen[d] = 1;
        }
        free(seen);
    }
    for (int step = 0; step < 3; step++) {
        loader_next_batch(&ld);
        for (int i = 0; i < B * T; i++) {
            FZ_CHECK(ld.inputs[i] >= 0 && ld.inputs[i] < df.vocab_size, "input %d", ld.inputs[i]);
            FZ_CHECK(ld.targets[i] >= -1 && ld.targets[i] < df.vocab_size, "target %d", ld.targets[i]);
            FZ_CHECK(ld.pos[i] >= 0 && ld.pos[i] < T && ld.doc_start[i] >= 0 && ld.doc_start[i] <= i % T, "pos");
        }
    }
    loader_free(&ld);
    data_free(&df);
    fz_end();
    return 0;
}
