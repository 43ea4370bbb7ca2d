// fuzz_parquet: the Parquet reader of ./prepare (data/parquet.h, pq_open_buffer and
// pq_next_row) over any bytes, with the columns prepare reads and a 64 MB limit per row
// group. Properties: a rejected file gets one line naming it; every row is one JSON
// object that base/json.h's parser accepts or refuses only for its UTF-8 (the reader
// passes strings' bytes through unchecked and escapes the rest).
#include "fuzz.h"
#include "../../base/json.h"
#include "../../data/parquet.h"

#define NAME "fuzz.parquet"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const cols[] = {"text", "prompt", "completion", "messages", "conversations", "instruction", "input", "output", "system", "history"};
    PqReader r;
    fz_begin();
    if (setjmp(fz_jmp)) { fz_after_fatal(NAME); return 0; }
    pq_open_buffer(&r, NAME, data, size, cols, (int)(sizeof cols / sizeof *cols));
    r.mem_limit = (int64_t)64 << 20;
    const char *js;
    size_t n;
    while (pq_next_row(&r, &js, &n)) {
        FZ_CHECK(n >= 2 && js[0] == '{' && js[n - 1] == '}' && strlen(js) == n, "row %lld is not one object", (long long)r.row);
        JsonDoc doc;
        if (json_parse(js, n, &doc) == 0) {
            FZ_CHECK(doc.root->type == JSON_OBJECT, "row %lld parsed to a non-object", (long long)r.row);
            json_free(&doc);
        } else
            FZ_CHECK(strstr(doc.error, "UTF-8") != NULL, "row %lld: the reader wrote invalid JSON: %s", (long long)r.row, doc.error);
    }
    pq_close(&r);
    fz_end();
    return 0;
}
