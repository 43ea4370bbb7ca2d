// dev/dist_tool.c: helpers for tests/dist/test_dist.sh (no Python in `make test`).
//   dist_tool diff DIR_A DIR_B     compare two checkpoints: prints the largest difference of
//                                  the weights and of the AdamW moments, per tensor relative to
//                                  its largest magnitude in DIR_B, and whether the counters
//                                  (step, updates, epoch, cursor, RNG, B, T, micro-batches) agree;
//                                  of LoRA checkpoints (PEFT adapters): the adapter blocks, whose
//                                  state files must also agree on the LoRA settings and base
//   dist_tool mkdata OUT           writes the test's data file (below)
//   dist_tool plan DATA T B A W STEPS SEED SHUFFLE
//                                  replays the training loader and prints, per rank, how many
//                                  of its micro-batches have no target, and how many steps have
//                                  none at all (so the test knows its data hits those cases)
//   dist_tool val DATA T B W BATCHES (-1: all)
//                                  deals the first BATCHES validation micro-batches as the
//                                  trainers do (round robin) and prints, per rank, how many
//                                  targets its batches hold (a rank with none never tests
//                                  the sum of the validation losses over ranks)
#include "../model/hf.h"
#include "../train/trainer.h"
#include "../train/dist.h"

static void usage(void) {
    fprintf(stderr, "usage: dist_tool diff DIR_A DIR_B | mkdata OUT | plan DATA T B A W STEPS SEED SHUFFLE | val DATA T B W BATCHES\n");
    exit(1);
}

// The largest difference between a and b (P floats laid out as model/model.h says),
// relative to the largest magnitude of b's tensor, worst over the tensors; its
// tensor's name goes to worst. The key bias is left out: its gradient is exactly 0
// (softmax ignores a shift), so AdamW turns rounding noise there into steps of
// +-lr of random sign (see test_sft.c, zero_key_bias).
static double max_rel_diff(const ModelConfig *c, const float *a, const float *b, const char **worst) {
    double result = 0;
    size_t off = 0, qkv = (size_t)qkv_width(c), k0 = (size_t)c->NH * c->HS, k1 = k0 + (size_t)c->KVH * c->HS;  // key part of a q|k|v row
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        size_t n = param_numel(c, i);
        double diff = 0, scale = 0;
        for (size_t k = 0; k < n; k++) {
            if (i == P_QKVB && k % qkv >= k0 && k % qkv < k1) continue;  // key bias
            double d = fabs((double)a[off + k] - (double)b[off + k]);
            if (!(d <= diff)) diff = d;  // NaN stays
            if (fabs((double)b[off + k]) > scale) scale = fabs((double)b[off + k]);
        }
        double rel = scale > 0 ? diff / scale : diff;
        HfPart parts[3];
        if (!(rel <= result)) { result = rel; *worst = param_hf_parts(c, i, parts) ? parts[0].name : PARAM_INFO[i].hf_name; }
        off += n;
    }
    return result;
}

// A LoRA checkpoint's adapter block on its base, and its state file (whose LoRA fields
// must be those of `want`, or of the file itself when want is NULL).
static float *load_lora_checkpoint(const char *dir, LoraLayout *lay, TrainState *s, float **m, float **v, StateLora *lo, const StateLora *want) {
    PeftAdapterConfig pc;
    ModelConfig c;
    float *base, *x;
    ParamTensors p;
    Bnb4Base q4;  // a QLoRA checkpoint's 4-bit base: loaded as the trainer loads it, then dropped
    lora_load_adapter_dir(dir, NULL, &pc, &c, &base, &p, lay, &x, &q4);
    bnb4_base_free(&q4);
    char path[4200];
    snprintf(path, sizeof path, "%s/state.bin", dir);
    size_t len;
    char *buf = read_whole_file(path, &len);
    int64_t h[32];
    read_state_header(path, buf, len, h);
    lo->rank = h[25]; lo->settings = h[26]; lo->base = h[27];
    *m = (float *)xmalloc(lay->floats * 4);
    *v = (float *)xmalloc(lay->floats * 4);
    read_state_buffer_lora(path, buf, len, &c, s, *m, *v, lay->floats, want ? want : lo);
    free(buf); free(base);
    return x;
}

// The largest difference of n floats relative to b's largest magnitude.
static double block_rel_diff(const float *a, const float *b, size_t n) {
    double diff = 0, scale = 0;
    for (size_t k = 0; k < n; k++) {
        double d = fabs((double)a[k] - (double)b[k]);
        if (!(d <= diff)) diff = d;
        if (fabs((double)b[k]) > scale) scale = fabs((double)b[k]);
    }
    return scale > 0 ? diff / scale : diff;
}

static int cmd_diff_lora(const char *da, const char *db) {
    LoraLayout la, lb;
    TrainState sa, sb;
    float *ma, *va, *mb, *vb;
    StateLora loa, lob;
    float *xa = load_lora_checkpoint(da, &la, &sa, &ma, &va, &loa, NULL), *xb = load_lora_checkpoint(db, &lb, &sb, &mb, &vb, &lob, &loa);
    if (la.floats != lb.floats) fatal("%s and %s: different adapters", da, db);
    int same = sa.step == sb.step && sa.adam_t == sb.adam_t && sa.epoch == sb.epoch && sa.cursor == sb.cursor && sa.rng == sb.rng &&
               sa.B == sb.B && sa.T == sb.T && sa.A == sb.A && sa.data_docs == sb.data_docs && sa.data_tokens == sb.data_tokens;
    double w = block_rel_diff(xa, xb, la.floats), m = block_rel_diff(ma, mb, la.floats), v = block_rel_diff(va, vb, la.floats);
    printf("weights %.3g moments %.3g counters %s (LoRA adapters of %zu floats)\n", w, m > v ? m : v, same ? "same" : "differ", la.floats);
    free(xa); free(xb); free(ma); free(va); free(mb); free(vb); lora_layout_free(&la); lora_layout_free(&lb);
    return 0;
}

static int cmd_diff(const char *da, const char *db) {
    if (lora_is_adapter_dir(da)) return cmd_diff_lora(da, db);
    ModelConfig ca, cb;
    float *pa, *pb;
    ParamTensors ta, tb;
    model_load_hf(da, &ca, &pa, &ta);
    model_load_hf(db, &cb, &pb, &tb);
    if (memcmp(&ca, &cb, sizeof ca)) fatal("%s and %s: different model shapes", da, db);
    size_t P = model_num_parameters(&ca);
    float *ma = (float *)xmalloc(P * 4), *va = (float *)xmalloc(P * 4), *mb = (float *)xmalloc(P * 4), *vb = (float *)xmalloc(P * 4);
    TrainState sa, sb;
    char path[4200];
    snprintf(path, sizeof path, "%s/state.bin", da);
    read_state_file(path, &ca, &sa, ma, va, P);
    snprintf(path, sizeof path, "%s/state.bin", db);
    read_state_file(path, &cb, &sb, mb, vb, P);
    int same = sa.step == sb.step && sa.adam_t == sb.adam_t && sa.epoch == sb.epoch && sa.cursor == sb.cursor && sa.rng == sb.rng &&
               sa.B == sb.B && sa.T == sb.T && sa.A == sb.A && sa.data_docs == sb.data_docs && sa.data_tokens == sb.data_tokens;
    const char *ww = "-", *wm = "-", *wv = "-";
    double w = max_rel_diff(&ca, pa, pb, &ww), m = max_rel_diff(&ca, ma, mb, &wm), v = max_rel_diff(&ca, va, vb, &wv);
    printf("weights %.3g moments %.3g counters %s (worst: weights %s, first moment %s, second moment %s)\n", w, m > v ? m : v,
           same ? "same" : "differ", ww, wm, wv);
    free(pa); free(pb); free(ma); free(va); free(mb); free(vb);
    return 0;
}

// 48 documents over a 64-token vocabulary, from a fixed generator. Every third is
// 16 tokens with no target at all: with -t 16 it fills a row of its own and makes
// an empty micro-batch (-b 1). The first four documents are such rows, so with -S 0
// and 4 micro-batches per step the first step has no target anywhere. The others
// are 3..11 tokens (several share a row) with a prompt part left untrained.
static int cmd_mkdata(const char *out) {
    enum { DOCS = 48 };
    int64_t offsets[DOCS + 1] = {0};
    uint32_t tokens[DOCS * 16];
    uint8_t mask[DOCS * 16];
    Rng r;
    rng_seed(&r, 42);
    int64_t n = 0;
    for (int d = 0; d < DOCS; d++) {
        int empty = d < 4 || d % 3 == 0;
        int len = empty ? 16 : 3 + (int)rng_below(&r, 9), prompt = empty ? len : 1 + (int)rng_below(&r, 2);
        for (int j = 0; j < len; j++, n++) { tokens[n] = (uint32_t)rng_below(&r, 64); mask[n] = j >= prompt; }
        offsets[d + 1] = n;
    }
    data_write(out, 2, 64, 0, 0, NULL, DOCS, offsets, tokens, mask);
    return 0;
}

static int cmd_plan(char **argv) {
    DataFile df;
    data_load(&df, argv[0]);
    int T = atoi(argv[1]), B = atoi(argv[2]), A = atoi(argv[3]), W = atoi(argv[4]), steps = atoi(argv[5]);
    Loader ld;
    loader_init(&ld, &df, B, T, atoi(argv[7]), (uint64_t)atoll(argv[6]), 1);
    int empty_mb[64] = {0}, empty_steps = 0;
    if (W < 1 || W > 64) usage();
    for (int s = 0; s < steps; s++) {
        int n = 0;
        for (int k = 0; k < A * W; k++) {
            loader_next_batch(&ld);
            n += ld.num_targets;
            empty_mb[k / A] += ld.num_targets == 0;
        }
        empty_steps += n == 0;
    }
    for (int w = 0; w < W; w++) printf("rank %d empty micro-batches %d\n", w, empty_mb[w]);
    printf("empty steps %d\n", empty_steps);
    loader_free(&ld);
    data_free(&df);
    return 0;
}

static int cmd_val(char **argv) {
    DataFile df;
    data_load(&df, argv[0]);
    int T = atoi(argv[1]), B = atoi(argv[2]), W = atoi(argv[3]), batches = atoi(argv[4]);
    if (W < 1 || W > 64) usage();
    Loader ld;
    loader_init(&ld, &df, B, T, 0, 0, 0);  // the validation loader: in order, one pass
    int64_t targets[64] = {0};
    for (int k = 0; (batches < 0 || k < batches) && !ld.exhausted; k++) {
        loader_next_batch(&ld);
        for (int w = 0; w < W; w++) targets[w] += dist_owns_val_batch(w, W, k) ? ld.num_targets : 0;
    }
    for (int w = 0; w < W; w++) printf("rank %d validation targets %lld\n", w, (long long)targets[w]);
    loader_free(&ld);
    data_free(&df);
    return 0;
}

int main(int argc, char **argv) {
    (void)poison_this_step;  // trainer.h's test hook: not used by this tool
    if (argc == 4 && !strcmp(argv[1], "diff")) return cmd_diff(argv[2], argv[3]);
    if (argc == 3 && !strcmp(argv[1], "mkdata")) return cmd_mkdata(argv[2]);
    if (argc == 10 && !strcmp(argv[1], "plan")) return cmd_plan(argv + 2);
    if (argc == 7 && !strcmp(argv[1], "val")) return cmd_val(argv + 2);
    usage();
}
