// fuzz_hf_model: a Hugging Face model directory as model_load_hf reads it
// (model/hf.h): config.json, a NUL byte, then model.safetensors. Properties: a
// rejected pair gets one line naming a file; the parameters are allocated only
// for a model the safetensors file really holds (run.sh's -malloc_limit_mb catches a
// config.json that could size them alone).
#include "fuzz.h"
#include "../../model/hf.h"
#include "../../model/model.h"

#define CONFIG "fuzz/config.json"
#define WEIGHTS "fuzz/model.safetensors"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data;
    const char *nul = (const char *)memchr(s, 0, size);
    if (!nul) return 0;
    size_t clen = (size_t)(nul - s), wlen = size - clen - 1;
    ModelConfig cfg;
    SafeTensors st;
    float *mem;
    ParamTensors p;
    fz_begin();
    if (setjmp(fz_jmp)) {
        fz_after_fatal(NULL);
        FZ_CHECK(strstr(sft_fatal_message, CONFIG) || strstr(sft_fatal_message, WEIGHTS), "[%s]", sft_fatal_message);
        return 0;
    }
    model_parse_hf_config(CONFIG, s, clen, &cfg);
    char *buf = (char *)xmalloc(wlen + 1);
    memcpy(buf, nul + 1, wlen);
    st_open_buffer(&st, WEIGHTS, buf, wlen);
    model_load_hf_opened(&st, &cfg, &mem, &p);
    FZ_CHECK(model_num_parameters(&cfg) * sizeof(float) <= 2 * wlen, "%zu parameters from %zu bytes", model_num_parameters(&cfg), wlen);
    free(mem);
    fz_end();
    return 0;
}
