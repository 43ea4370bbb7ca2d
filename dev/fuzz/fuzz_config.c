// fuzz_config: Hugging Face config.json of every family (model/hf.h,
// model_parse_hf_config). Properties: a rejected file gets one line naming it; an
// accepted configuration passes model_check_config's limits (grouped-query heads that
// divide, an even head size for the Llama family), so the parameter count it implies
// fits in memory arithmetic (no overflow).
#include "fuzz.h"
#include "../../model/hf.h"
#include "../../model/model.h"

#define NAME "fuzz/config.json"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ModelConfig cfg;
    fz_begin();
    if (setjmp(fz_jmp)) { fz_after_fatal(NAME); return 0; }
    model_parse_hf_config(NAME, (const char *)data, size, &cfg);
    FZ_CHECK(cfg.L >= 1 && cfg.L <= 1000 && cfg.C >= 1 && cfg.C <= 65536 && cfg.NH >= 1 && cfg.V >= 1 &&
                 cfg.maxT >= 1 && cfg.maxT <= (1 << 20) && cfg.eps > 0 && cfg.eps < 1,
             "accepted L=%d C=%d NH=%d V=%d maxT=%d eps=%g", cfg.L, cfg.C, cfg.NH, cfg.V, cfg.maxT, cfg.eps);
    if (is_llama_family(&cfg))
        FZ_CHECK(cfg.KVH >= 1 && cfg.NH % cfg.KVH == 0 && cfg.HS >= 2 && cfg.HS % 2 == 0 && cfg.FF >= 1 && cfg.rope_theta > 1 &&
                     cfg.qkv_bias == (cfg.family == FAMILY_QWEN2),
                 "accepted NH=%d KVH=%d HS=%d FF=%d theta=%g", cfg.NH, cfg.KVH, cfg.HS, cfg.FF, cfg.rope_theta);
    else FZ_CHECK(cfg.C % cfg.NH == 0 && cfg.KVH == cfg.NH && cfg.HS * cfg.NH == cfg.C && cfg.FF == 4 * cfg.C, "GPT-2 C=%d NH=%d", cfg.C, cfg.NH);
    size_t n = model_num_parameters(&cfg);
    FZ_CHECK(n > 0 && n < ((size_t)1 << 52), "%zu parameters", n);
    fz_end();
    return 0;
}
