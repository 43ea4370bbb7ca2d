// fuzz_safetensors: the safetensors reader (base/safetensors.h, st_open_buffer), and
// on it a bitsandbytes 4-bit weight "w" of shape [8, 24] (model/bnb4.h) where the file
// has its quant_state.
// Properties: a rejected file gets one line naming it; every tensor of an accepted
// one lies inside the file and its F32/F16/BF16 data converts without reading outside;
// an accepted 4-bit weight dequantizes without reading outside its tensors.
#include "fuzz.h"
#include "../../base/safetensors.h"
#include "../../model/bnb4.h"

#define NAME "fuzz.safetensors"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    SafeTensors st;
    fz_begin();
    if (setjmp(fz_jmp)) { fz_after_fatal(NAME); return 0; }
    char *buf = (char *)xmalloc(size + 1);
    memcpy(buf, data, size);
    st_open_buffer(&st, NAME, buf, size);
    for (int i = 0; i < st.count; i++) {
        const StTensor *t = &st.tensors[i];
        FZ_CHECK(t->begin <= t->end && t->end <= st.len, "tensor %s at [%zu, %zu) of %zu", t->name, t->begin, t->end, st.len);
        FZ_CHECK(st_find(&st, t->name) != NULL, "st_find %s", t->name);
        if (t->dtype == ST_OTHER) continue;
        float *out = (float *)xmalloc((size_t)t->numel * sizeof(float));
        st_read_f32(&st, t, out);
        free(out);
    }
    if (st_find(&st, "w.quant_state.bitsandbytes__nf4") || st_find(&st, "w.quant_state.bitsandbytes__fp4")) {
        Bnb4Weight w;
        bnb4_read_weight(&st, "w", 8, 24, &w);
        float *out = (float *)xmalloc(8 * 24 * sizeof(float)), *scratch = (float *)xmalloc((8 * 24 / 32 + 1) * sizeof(float));
        bnb4_dequantize(&w, scratch, out);
        free(out);
        free(scratch);
        bnb4_free(&w);
    }
    st_close(&st);
    fz_end();
    return 0;
}
