// fuzz_hf_bnb4: a bitsandbytes 4-bit model directory as model_load_hf_bnb4 reads it
// (model/hf_bnb4.h, model/bnb4.h): config.json (with a quantization_config), a NUL byte,
// then model.safetensors. Properties: a rejected pair gets one line naming a file; the
// parameters are allocated only for a model the safetensors file really holds (a 4-bit
// weight's fp32 slot is at most 8 times its codes' bytes: at most 8 times the file); an
// accepted base dequantizes (bnb4_base_dequantize) without reading outside its tensors.
#include "fuzz.h"
#include "../../model/hf_bnb4.h"

#define CONFIG "fuzz/config.json"
#define WEIGHTS "fuzz/model.safetensors"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data;
    const char *nul = (const char *)memchr(s, 0, size);
    if (!nul) return 0;
    size_t clen = (size_t)(nul - s), wlen = size - clen - 1;
    ModelConfig cfg;
    HfWeights w;
    Bnb4Base q;
    float *mem;
    ParamTensors p;
    fz_begin();
    if (setjmp(fz_jmp)) {
        fz_after_fatal(NULL);
        FZ_CHECK(strstr(sft_fatal_message, CONFIG) || strstr(sft_fatal_message, WEIGHTS), "[%s]", sft_fatal_message);
        return 0;
    }
    if (!hf_bnb4_config(CONFIG, s, clen)) { fz_end(); return 0; }  // not a 4-bit checkpoint: fuzz_hf_model's
    model_parse_hf_config(CONFIG, s, clen, &cfg);
    if (!is_llama_family(&cfg)) fatal("%s: 4-bit GPT-2 checkpoints (Conv1D weights) are not read; the Llama family's are", CONFIG);
    memset(&w, 0, sizeof w);
    memset(&q, 0, sizeof q);
    w.files = (SafeTensors *)xmalloc(sizeof(SafeTensors));
    char *buf = (char *)xmalloc(wlen + 1);
    memcpy(buf, nul + 1, wlen);
    st_open_buffer(&w.files[0], WEIGHTS, buf, wlen);
    w.nfiles = 1;
    model_load_bnb4_weights(&w, &cfg, &mem, &p, &q);
    FZ_CHECK(model_num_parameters(&cfg) * sizeof(float) <= 8 * wlen, "%zu parameters from %zu bytes", model_num_parameters(&cfg), wlen);
    bnb4_base_dequantize(&q, &cfg, &p);
    free(mem);
    bnb4_base_free(&q);
    fz_end();
    return 0;
}
