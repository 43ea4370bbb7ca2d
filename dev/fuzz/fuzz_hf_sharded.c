// fuzz_hf_sharded: a sharded Hugging Face model directory as model_load_hf reads it
// (model/hf.h): config.json, a NUL byte, model.safetensors.index.json, a NUL
// byte, then the shards the index names (in the order of first mention), each a
// 4-byte little-endian length and its bytes. Properties: a rejected directory gets
// one line naming a file of it; the parameters are allocated only for a model the
// shards really hold (at most twice their size).
#include "fuzz.h"
#include "../../model/hf.h"
#include "../../model/model.h"

#define CONFIG "fuzz/config.json"
#define INDEX "fuzz/model.safetensors.index.json"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data, *end = s + size;
    const char *nul1 = (const char *)memchr(s, 0, size);
    if (!nul1) return 0;
    const char *nul2 = (const char *)memchr(nul1 + 1, 0, (size_t)(end - nul1 - 1));
    if (!nul2) return 0;
    ModelConfig cfg;
    HfWeights w;
    float *mem;
    ParamTensors p;
    size_t shard_bytes = 0;
    fz_begin();
    if (setjmp(fz_jmp)) {
        fz_after_fatal(NULL);
        FZ_CHECK(strstr(sft_fatal_message, "fuzz/"), "[%s]", sft_fatal_message);
        return 0;
    }
    model_parse_hf_config(CONFIG, s, (size_t)(nul1 - s), &cfg);
    memset(&w, 0, sizeof w);
    hf_parse_index(INDEX, nul1 + 1, (size_t)(nul2 - nul1 - 1), &w.index);
    w.files = (SafeTensors *)xcalloc((size_t)w.index.nfiles, sizeof(SafeTensors));
    const char *at = nul2 + 1;
    for (; w.nfiles < w.index.nfiles; w.nfiles++) {
        char path[300];
        snprintf(path, sizeof path, "fuzz/%s", w.index.files[w.nfiles]);
        uint32_t len;
        if (end - at < 4) fatal("%s: cannot open: no such file", path);
        memcpy(&len, at, 4);
        at += 4;
        if ((size_t)(end - at) < len) fatal("%s: cannot open: no such file", path);
        char *buf = (char *)xmalloc((size_t)len + 1);
        memcpy(buf, at, len);
        at += len;
        shard_bytes += len;
        st_open_buffer(&w.files[w.nfiles], path, buf, len);
    }
    model_load_hf_weights(&w, &cfg, &mem, &p);
    FZ_CHECK(model_num_parameters(&cfg) * sizeof(float) <= 2 * shard_bytes, "%zu parameters from %zu bytes of shards",
             model_num_parameters(&cfg), shard_bytes);
    free(mem);
    fz_end();
    return 0;
}
