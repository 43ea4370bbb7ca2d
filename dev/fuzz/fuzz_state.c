// fuzz_state: the checkpoint optimizer state reader (train/trainer.h,
// read_state_buffer) for a fixed small model. Properties: a rejected file gets one
// line naming it; an accepted one has sane counters and fills m and v exactly.
#include "fuzz.h"
#include "../../train/trainer.h"

#define NAME "fuzz/state.bin"

// The model the seeds were written for: GPT-2 with 1 layer, 1 head, 4 channels, vocab 8,
// context 4 (dev/fuzz/make_seeds.py). Set by name: the config has grown fields since.
static ModelConfig seed_model(void) {
    ModelConfig c;
    memset(&c, 0, sizeof c);
    c.L = 1; c.NH = 1; c.C = 4; c.V = 8; c.maxT = 4; c.eps = 1e-5f;
    model_config_defaults(&c);
    return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static ModelConfig CFG;
    if (!CFG.L) CFG = seed_model();
    size_t P = model_num_parameters(&CFG);
    TrainState s;
    float *m = (float *)xmalloc(P * sizeof(float)), *v = (float *)xmalloc(P * sizeof(float));
    fz_begin();
    if (setjmp(fz_jmp)) { fz_after_fatal(NAME); free(m); free(v); return 0; }
    read_state_buffer(NAME, (const char *)data, size, &CFG, &s, m, v, P);
    FZ_CHECK(s.step >= 0 && s.adam_t >= 0 && s.adam_t <= s.step && s.epoch >= 0 && s.cursor >= 0, "counters");
    FZ_CHECK(size == 256 + 2 * P * sizeof(float) && !memcmp(m, data + 256, P * sizeof(float)), "m");
    fz_end();
    free(m); free(v);
    return 0;
}
