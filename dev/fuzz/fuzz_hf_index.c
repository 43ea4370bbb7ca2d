// fuzz_hf_index: model.safetensors.index.json (model/hf.h, hf_parse_index).
// Properties: a rejected file gets one line naming it; an accepted one names only
// plain files inside the model directory (no "/", not "." or "..", no NUL), and
// every tensor maps to one of them.
#include "fuzz.h"
#include "../../model/hf.h"
#include "../../model/model.h"

#define NAME "fuzz/model.safetensors.index.json"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    HfIndex ix;
    fz_begin();
    if (setjmp(fz_jmp)) { fz_after_fatal(NAME); return 0; }
    hf_parse_index(NAME, (const char *)data, size, &ix);
    FZ_CHECK(ix.count > 0 && ix.nfiles > 0 && ix.nfiles <= ix.count, "%d tensors in %d files", ix.count, ix.nfiles);
    for (int k = 0; k < ix.nfiles; k++) {
        const char *f = ix.files[k];
        FZ_CHECK(f[0] && !strchr(f, '/') && strcmp(f, ".") && strcmp(f, ".."), "file name [%s] leaves the directory", f);
    }
    for (int k = 0; k < ix.count; k++) FZ_CHECK(ix.file[k] >= 0 && ix.file[k] < ix.nfiles, "tensor %s in file %d", ix.tensors[k], ix.file[k]);
    hf_index_free(&ix);
    fz_end();
    return 0;
}
