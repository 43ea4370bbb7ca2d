/*
test_sft.c: checks the CPU trainer against the PyTorch reference in dev/ref/ (made
by dev/ref_gpt2.py, float64, one document at a time) and pins each training rule.
Prints "ok NAME" / "FAIL NAME: why" per check; exits 1 if anything failed.
Run from the repository root (make test does).
*/
#define SFT_NO_MAIN
#include "train_sft.c"
#include "model/hf.h"
#include "tests/test_util.h"

#define REF_DIR "dev/ref"
#define REF_MODEL REF_DIR "/tiny"
#define REF_DATA REF_DIR "/tiny_train.bin"
#define REF_VAL REF_DIR "/tiny_val.bin"
#define REF_EXPECT REF_DIR "/tiny_expect.safetensors"

// The Llama-family references (dev/ref_llama.py): a sharded Llama with grouped-query
// attention, an untied head and llama3 rope scaling; a Qwen2 with q/k/v biases and
// a tied head. Same data, packing and training settings as the GPT-2 reference.
#define REF_LLAMA REF_DIR "/tiny_llama"
#define REF_QWEN2 REF_DIR "/tiny_qwen2"
// The newer families' references (dev/ref_families.py): a Qwen3 with q/k norms, a head
// size that is not C/heads, an untied head and a sliding window on its second layer; a
// SmolLM3 with no RoPE on its first layer; a Gemma 3 with every Gemma feature (a
// sliding layer with its own rotary base, a full one with linear scaling).
#define REF_QWEN3 REF_DIR "/tiny_qwen3"
#define REF_SMOLLM3 REF_DIR "/tiny_smollm3"
#define REF_GEMMA3 REF_DIR "/tiny_gemma3"

static SafeTensors expect;       // REF_EXPECT, GPT-2's
static SafeTensors *cur_expect = &expect;  // the reference file expect_tensor reads

static float *expect_tensor(const char *name, int64_t *numel) {
    const StTensor *t = st_find(cur_expect, name);
    if (!t) fatal("%s: reference tensor %s missing (regenerate with dev/ref_gpt2.py, dev/ref_llama.py or dev/ref_families.py)", cur_expect->path, name);
    float *out = (float *)xmalloc((size_t)t->numel * sizeof(float));
    st_read_f32(cur_expect, t, out);
    if (numel) *numel = t->numel;
    return out;
}

static void model_from_dir(Model *m, const char *dir, int B, int T) {
    memset(m, 0, sizeof *m);
    model_load_hf(dir, &m->cfg, &m->params_mem, &m->params);
    model_allocate(m, B, T);
}

// The key bias shifts every attention score of a query by the same amount, which
// softmax ignores: its gradient is exactly 0, and what rounding leaves there (1e-9
// in fp32, 1e-17 in fp64) AdamW's normalization turns into steps of +-lr with a
// random sign. Parameter comparisons after AdamW steps therefore leave it out: the
// key part [NH*HS, (NH+KVH)*HS) of each layer's q|k|v bias (GPT-2 and Qwen2).
static void zero_key_bias(const ModelConfig *cfg, float *qkvb) {
    size_t QKV = (size_t)qkv_width(cfg), q = (size_t)cfg->NH * cfg->HS, kv = (size_t)cfg->KVH * cfg->HS;
    for (int l = 0; l < cfg->L; l++) memset(qkvb + l * QKV + q, 0, kv * sizeof(float));
}

// Compares every tensor of the model (per layer, by Hugging Face name: each part of
// a stacked tensor, as param_hf_parts names it) with reference tensors
// "<prefix><name>"; returns the worst relative error.
static double compare_params(const Model *m, const ParamTensors *p, const char *prefix, char *worst_name, size_t wn, int skip_key_bias) {
    const ModelConfig *c = &m->cfg;
    double worst = 0.0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        int64_t shape[2];
        int64_t numel = param_slice_shape(c, i, shape);
        if (numel == 0) continue;
        HfPart parts[3];
        int nparts = param_hf_parts(c, i, parts);
        for (int l = 0; l < (PARAM_INFO[i].per_layer ? c->L : 1); l++) {
            // our slice and the reference parts stacked the same way, so the key bias is the same range in both
            float *ours = (float *)xmalloc((size_t)numel * sizeof(float)), *ref = (float *)xmalloc((size_t)numel * sizeof(float));
            memcpy(ours, p->t[i] + (size_t)l * (size_t)numel, (size_t)numel * sizeof(float));
            int64_t at = 0;
            for (int k = 0; k < nparts; k++) {
                char name[256], full[300];
                snprintf(name, sizeof name, parts[k].name, l);
                snprintf(full, sizeof full, "%s%s", prefix, name);
                int64_t n;
                float *part = expect_tensor(full, &n);
                if (n != parts[k].rows * shape[1] || at + n > numel)
                    fatal("reference tensor %s has %lld elements, expected %lld", full, (long long)n, (long long)(parts[k].rows * shape[1]));
                memcpy(ref + at, part, (size_t)n * sizeof(float));
                at += n;
                free(part);
            }
            if (skip_key_bias && i == P_QKVB) {
                ModelConfig one = *c;
                one.L = 1;
                zero_key_bias(&one, ours);
                zero_key_bias(&one, ref);
            }
            // per part: a part's error is relative to its own scale
            at = 0;
            for (int k = 0; k < nparts; k++) {
                int64_t n = parts[k].rows * shape[1];
                double e = rel_err(ours + at, ref + at, (size_t)n, 1e-6);
                if (!(e <= worst)) { worst = e; snprintf(worst_name, wn, parts[k].name, l); }
                at += n;
            }
            free(ours); free(ref);
        }
    }
    return worst;
}

#include "tests/train/sft_kernels.h"

// ---- RoPE against hand-worked rotations ------------------------------------

// One q head and one k head of HS = 4 (NH = KVH = 1, so the qkv row is [q | k | v]),
// rope_theta 100: inv_freq = (1, 0.1). Row 0 at document position 3, row 1 at
// position 0: channel pairs (0, 2) and (1, 3) turn by 3 and 0.3 radians in row 0, and
// row 1 is unchanged. Then the backward pass is the transpose of the forward one:
// <rope(x), y> = <x, rope_backward(y)>.
static void test_rope_rules(void) {
    ModelConfig c;
    model_parse_descriptor("l1c4h1", &c);
    c.rope_theta = 100.0f;
    float inv_freq[2], cos_t[4 * 2], sin_t[4 * 2];
    rope_inv_freq(&c, inv_freq);
    rope_table(cos_t, sin_t, inv_freq, 4, 2);
    int pos[2] = {3, 0};
    float x[2][12], y[2][12];
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 12; i++) x[r][i] = (float)(i + 1) * (r ? -0.5f : 1.0f);
    memcpy(y, x, sizeof x);
    rope_forward(&y[0][0], pos, cos_t, sin_t, 2, 1, 1, 4);
    double worst = 0.0;
    for (int h = 0; h < 2; h++) {  // q then k of row 0
        const float *in = x[0] + 4 * h;
        double want[4];
        for (int i = 0; i < 2; i++) {
            double angle = 3.0 * (i == 0 ? 1.0 : 0.1), x1 = in[i], x2 = in[i + 2];
            want[i] = x1 * cos(angle) - x2 * sin(angle);
            want[i + 2] = x2 * cos(angle) + x1 * sin(angle);
        }
        for (int i = 0; i < 4; i++) worst = fmax(worst, fabs(y[0][4 * h + i] - want[i]));
    }
    int v_kept = !memcmp(&y[0][8], &x[0][8], 4 * sizeof(float)), row1_kept = !memcmp(y[1], x[1], sizeof x[1]);
    check("rope_rotates_halves_by_position", worst < 1e-5 && v_kept && row1_kept,
          "worst error %.3g against the hand-worked rotation; v unchanged %d; position 0 unchanged %d", worst, v_kept, row1_kept);
    float g[2][12], gb[2][12];
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 12; i++) g[r][i] = (float)((i * 7 + r * 3) % 5) - 2.0f;
    memcpy(gb, g, sizeof g);
    rope_backward(&gb[0][0], pos, cos_t, sin_t, 2, 1, 1, 4);
    double lhs = 0, rhs = 0;
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 12; i++) { lhs += (double)y[r][i] * g[r][i]; rhs += (double)x[r][i] * gb[r][i]; }
    check("rope_backward_is_transpose", fabs(lhs - rhs) < 1e-5 * fabs(lhs) && memcmp(gb, g, sizeof g) != 0, "<rope(x), y> %.8g vs <x, rope^T(y)> %.8g",
          lhs, rhs);
}

// ---- sliding-window attention against a naive float64 formulation ---------

// The rule written out per (query t, key s), independently of attention_first_key:
// visible iff s <= t, s is in t's document (doc_start[s] == doc_start[t]) and, with a
// window W > 0, t - s < W (transformers' sliding_window_overlay: kv_idx > q_idx - W).
static int window_visible(const int *ds_row, int t, int s, int window) {
    return s <= t && ds_row[s] == ds_row[t] && (window <= 0 || t - s < window);
}

// out (B, T, NH HS) in float64 from qkv (as attention_forward's), by that rule.
static void naive_window_attention(double *out, const double *qkv, const int *ds, int B, int T, int NH, int KVH, int HS, int window) {
    int QKV = (NH + 2 * KVH) * HS;
    double scale = 1.0 / sqrt((double)HS), *sc = (double *)xmalloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + ((size_t)b * T + t) * QKV + h * HS;
                int kh = h / (NH / KVH);
                double mx = -INFINITY, sum = 0.0;
                for (int s = 0; s < T; s++) {
                    if (!window_visible(ds + b * T, t, s, window)) continue;
                    const double *k = qkv + ((size_t)b * T + s) * QKV + (NH + kh) * HS;
                    double d = 0.0;
                    for (int i = 0; i < HS; i++) d += q[i] * k[i];
                    sc[s] = d * scale;
                    mx = fmax(mx, sc[s]);
                }
                for (int s = 0; s < T; s++)
                    if (window_visible(ds + b * T, t, s, window)) sum += exp(sc[s] - mx);
                double *o = out + ((size_t)b * T + t) * NH * HS + h * HS;
                for (int i = 0; i < HS; i++) o[i] = 0.0;
                for (int s = 0; s < T; s++) {
                    if (!window_visible(ds + b * T, t, s, window)) continue;
                    const double *v = qkv + ((size_t)b * T + s) * QKV + (NH + KVH + kh) * HS;
                    for (int i = 0; i < HS; i++) o[i] += exp(sc[s] - mx) / sum * v[i];
                }
            }
    free(sc);
}

// attention_forward / attention_backward / attention_decode with windows 1, 3 and 5
// (shorter than the documents), 9, T + 4 (longer than every document) and 0 (full), on
// two rows of packed documents (lengths 7, 1, 9 | 13, 4; a window of 9 or more is
// the plain causal mask): the forward against the naive formulation, the backward
// against central differences of it (loss sum(out * R)), the decode step against row t.
static void test_window_attention(void) {
    enum { B = 2, T = 17, NH = 4, KVH = 2, HS = 4, QKV = (NH + 2 * KVH) * HS, A = NH * HS };
    int ds[B * T];
    for (int t = 0; t < T; t++) {
        ds[t] = t < 7 ? 0 : t < 8 ? 7 : 8;
        ds[T + t] = t < 13 ? 0 : 13;
    }
    float qkv[B * T * QKV], R[B * T * A], out[B * T * A], dqkv[B * T * QKV];
    double qkvd[B * T * QKV], outd[B * T * A], op[B * T * A], om[B * T * A];
    Rng rng;
    rng_seed(&rng, 12345);
    for (int i = 0; i < B * T * QKV; i++) qkv[i] = (2.0f * rng_float(&rng) - 1.0f) * 1.5f;
    for (int i = 0; i < B * T * A; i++) R[i] = 2.0f * rng_float(&rng) - 1.0f;
    float *att = (float *)xmalloc((size_t)B * NH * T * T * sizeof(float));
    const int windows[] = {1, 3, 5, 9, T + 4, 0};
    for (size_t wi = 0; wi < sizeof windows / sizeof windows[0]; wi++) {
        int W = windows[wi];
        for (int i = 0; i < B * T * QKV; i++) qkvd[i] = qkv[i];
        attention_forward(out, att, qkv, ds, B, T, NH, KVH, HS, 1.0f / sqrtf((float)HS), W);
        naive_window_attention(outd, qkvd, ds, B, T, NH, KVH, HS, W);
        double fe = 0.0;
        for (int i = 0; i < B * T * A; i++) fe = fmax(fe, fabs(out[i] - outd[i]));
        char name[96];
        snprintf(name, sizeof name, "attention_window_%d_forward_matches_naive", W);
        check(name, fe < 1e-5, "max |out - naive| %.3g", fe);

        memset(dqkv, 0, sizeof dqkv);
        attention_backward(dqkv, R, qkv, att, ds, B, T, NH, KVH, HS, 1.0f / sqrtf((float)HS), W);
        double be = 0.0, bmax = 0.0, h = 1e-5;
        for (int i = 0; i < B * T * QKV; i++) {
            qkvd[i] = qkv[i] + h;
            naive_window_attention(op, qkvd, ds, B, T, NH, KVH, HS, W);
            qkvd[i] = qkv[i] - h;
            naive_window_attention(om, qkvd, ds, B, T, NH, KVH, HS, W);
            qkvd[i] = qkv[i];
            double g = 0.0;
            for (int j = 0; j < B * T * A; j++) g += (op[j] - om[j]) * R[j];
            g /= 2 * h;
            be = fmax(be, fabs(dqkv[i] - g));
            bmax = fmax(bmax, fabs(g));
        }
        snprintf(name, sizeof name, "attention_window_%d_backward_matches_finite_differences", W);
        check(name, be < 1e-4 * bmax, "max |dqkv - fd| %.3g, max |fd| %.3g", be, bmax);

        // decode: row 1's first document (positions 0..12) through the cache layout (rows of KVH HS)
        float kc[13 * KVH * HS], vc[13 * KVH * HS], dec[A], datt[NH * 13];
        for (int s = 0; s < 13; s++) {
            memcpy(kc + s * KVH * HS, qkv + (size_t)(T + s) * QKV + A, KVH * HS * sizeof(float));
            memcpy(vc + s * KVH * HS, qkv + (size_t)(T + s) * QKV + A + KVH * HS, KVH * HS * sizeof(float));
        }
        double de = 0.0;
        for (int t = 0; t < 13; t++) {
            attention_decode(dec, datt, qkv + (size_t)(T + t) * QKV, kc, vc, t, 13, NH, KVH, HS, 1.0f / sqrtf((float)HS), W);
            for (int i = 0; i < A; i++) de = fmax(de, fabs(dec[i] - outd[(size_t)(T + t) * A + i]));
        }
        snprintf(name, sizeof name, "attention_window_%d_decode_matches_naive", W);
        check(name, de < 1e-5, "max |decode - naive| %.3g", de);
    }
    free(att);
}

// ---- against PyTorch -----------------------------------------------------

// Check names are "<tag>reference_...": tag "" for GPT-2, "llama_" and "qwen2_".
static void check_name(char *buf, size_t n, const char *tag, const char *name) { snprintf(buf, n, "%sreference_%s", tag, name); }

// chunk_rows > 0: the classifier works on chunks of that many rows (loss and gradients
// only: logits of more rows than a chunk are not kept).
static void test_reference_forward_backward(const char *tag, const char *model_dir, int chunk_rows) {
    char name[128];
    DataFile df;
    data_load(&df, REF_DATA);
    Model m;
    int saved_chunk = classifier_chunk_floats;
    if (chunk_rows) classifier_chunk_floats = chunk_rows * 61;  // the reference vocabulary
    model_from_dir(&m, model_dir, 2, 16);
    Loader ld;
    loader_init(&ld, &df, 2, 16, 0, 0, 1);
    loader_next_batch(&ld);
    int BT = 32, V = m.cfg.V;

    // logits at every filled position
    float *ref_logits = expect_tensor("logits", NULL), *filled = expect_tensor("filled", NULL);
    if (!chunk_rows) {
        m.num_rows = 0;
        for (int i = 0; i < BT; i++) if (filled[i] > 0) m.rows[m.num_rows++] = i;
        model_forward(&m, ld.inputs, ld.pos, ld.doc_start, NULL, 2, 16);
        double worst = 0.0;
        for (int r = 0; r < m.num_rows; r++) {
            double e = rel_err(m.acts.logits + (size_t)r * V, ref_logits + (size_t)m.rows[r] * V, (size_t)V, 1.0);
            if (e > worst) worst = e;
        }
        check_name(name, sizeof name, tag, "logits");
        check(name, worst < 2e-5 && m.num_rows > 20, "max relative error %.3g over %d positions", worst, m.num_rows);
    }

    // loss: mean over targets; then gradients of that mean
    float *ref_loss = expect_tensor("loss", NULL), *ref_count = expect_tensor("targets", NULL);
    double loss_sum = model_forward(&m, ld.inputs, ld.pos, ld.doc_start, ld.targets, 2, 16);
    double loss = loss_sum / ld.num_targets;
    check_name(name, sizeof name, tag, "target_count");
    check(name, ld.num_targets == (int)ref_count[0], "%d targets, reference %d", ld.num_targets, (int)ref_count[0]);
    check_name(name, sizeof name, tag, "loss");
    check(name, fabs(loss - ref_loss[0]) < 1e-5 * fabs(ref_loss[0]), "loss %.8f, reference %.8f", loss, ref_loss[0]);
    memset(m.grads_mem, 0, m.num_params * sizeof(float));
    model_backward(&m, ld.inputs, ld.pos, ld.doc_start, 2, 16);
    scale_floats(m.grads_mem, m.num_params, 1.0f / (float)ld.num_targets);
    char worst_name[256] = "";
    double ge = compare_params(&m, &m.grads, "grad.", worst_name, sizeof worst_name, 0);
    check_name(name, sizeof name, tag, "gradients");
    check(name, ge < 1e-4 && (!chunk_rows || m.num_rows > 2 * classifier_chunk_rows(&m.cfg, BT)), "worst relative gradient error %.3g in %s",
          ge, worst_name);
    free(ref_logits); free(filled); free(ref_loss); free(ref_count);
    loader_free(&ld); model_free(&m); data_free(&df);
    classifier_chunk_floats = saved_chunk;
}

static void test_reference_training(const char *tag, const char *model_dir) {
    char name[128];
    float *s = expect_tensor("settings", NULL);
    int B = (int)s[0], T = (int)s[1], A = (int)s[2], steps = (int)s[3], warmup = (int)s[5];
    float lr = s[4], final_frac = s[6], wd = s[7], clip = s[8];
    DataFile df;
    data_load(&df, REF_DATA);
    Model m;
    model_from_dir(&m, model_dir, B, T);
    Loader ld;
    loader_init(&ld, &df, B, T, 0, 0, 1);
    float *ref_loss = expect_tensor("train_loss", NULL), *ref_norm = expect_tensor("train_grad_norm", NULL);
    float *ref_lr = expect_tensor("train_lr", NULL), *ref_targets = expect_tensor("train_targets", NULL);
    int64_t adam_t = 0;
    double worst_loss = 0, worst_norm = 0, worst_lr = 0;
    int targets_ok = 1;
    for (int step = 0; step < steps; step++) {
        float step_lr = lr_at_step(step, steps, lr, warmup, final_frac);
        StepResult r = train_step(&m, &ld, A, step_lr, wd, clip, &adam_t);
        worst_loss = fmax(worst_loss, fabs(r.loss - ref_loss[step]) / fabs(ref_loss[step]));
        worst_norm = fmax(worst_norm, fabs(r.grad_norm - ref_norm[step]) / fabs(ref_norm[step]));
        worst_lr = fmax(worst_lr, fabs(step_lr - ref_lr[step]) / fabs(ref_lr[step]));
        targets_ok &= r.targets == (int64_t)ref_targets[step];
    }
    int clipped = 0;
    for (int step = 0; step < steps; step++) clipped |= ref_norm[step] > clip;
    check_name(name, sizeof name, tag, "lr_schedule");
    check(name, worst_lr < 1e-6, "worst relative LR error %.3g", worst_lr);
    check_name(name, sizeof name, tag, "step_targets");
    check(name, targets_ok, "targets per step differ from the reference");
    check_name(name, sizeof name, tag, "step_losses");
    check(name, worst_loss < 1e-5, "worst relative loss error %.3g", worst_loss);
    check_name(name, sizeof name, tag, "grad_norms");
    check(name, worst_norm < 1e-5 && clipped, "worst relative norm error %.3g (clipping active: %d)", worst_norm, clipped);
    char worst_name[256] = "";
    double pe = compare_params(&m, &m.params, "final.", worst_name, sizeof worst_name, 1);
    check_name(name, sizeof name, tag, "adamw_params");
    check(name, pe < 1e-5, "worst relative parameter error %.3g in %s after %d steps", pe, worst_name, steps);
    check_name(name, sizeof name, tag, "adam_count");
    check(name, adam_t == steps, "AdamW step count %lld, expected %d", (long long)adam_t, steps);
    free(s); free(ref_loss); free(ref_norm); free(ref_lr); free(ref_targets);
    loader_free(&ld); model_free(&m); data_free(&df);
}

// The same checks for the Llama-family references, each against its own expectations;
// Gemma 3's (the 262,144-token vocabulary family) once more with the classifier in
// chunks of 3 rows.
static void test_llama_references(void) {
    const char *tags[] = {"llama_", "qwen2_", "qwen3_", "smollm3_", "gemma3_", "gemma3_chunked_"};
    const char *dirs[] = {REF_LLAMA, REF_QWEN2, REF_QWEN3, REF_SMOLLM3, REF_GEMMA3, REF_GEMMA3};
    const char *files[] = {REF_LLAMA "_expect.safetensors", REF_QWEN2 "_expect.safetensors", REF_QWEN3 "_expect.safetensors",
                           REF_SMOLLM3 "_expect.safetensors", REF_GEMMA3 "_expect.safetensors", REF_GEMMA3 "_expect.safetensors"};
    for (int k = 0; k < 6; k++) {
        SafeTensors st;
        st_open(&st, files[k]);
        cur_expect = &st;
        int chunked = k == 5;
        test_reference_forward_backward(tags[k], dirs[k], chunked ? 3 : 0);
        if (!chunked) test_reference_training(tags[k], dirs[k]);
        cur_expect = &expect;
        st_close(&st);
    }
}

// F16 (hub names, buffers, tied lm_head) and BF16 files import as the reference values.
static void test_import_variants(void) {
    const char *dirs[] = {REF_DIR "/tiny_f16", REF_DIR "/tiny_bf16"};
    const char *prefixes[] = {"f16.", "bf16."};
    for (int k = 0; k < 2; k++) {
        Model m;
        memset(&m, 0, sizeof m);
        model_load_hf(dirs[k], &m.cfg, &m.params_mem, &m.params);
        char worst_name[256] = "", name[64];
        double e = compare_params(&m, &m.params, prefixes[k], worst_name, sizeof worst_name, 0);
        snprintf(name, sizeof name, "import_%s", k == 0 ? "f16_hub_names" : "bf16_prefixed");
        check(name, e == 0.0, "values differ from the reference conversion (%.3g in %s)", e, worst_name);
        free(m.params_mem);
    }
}

// ---- training rules, C against C ------------------------------------------


static void write_docs(const char *path, int V, int D, const int *lens, const uint32_t *tokens, const uint8_t *mask) {
    int64_t *off = (int64_t *)xmalloc(8 * (size_t)(D + 1));
    off[0] = 0;
    for (int d = 0; d < D; d++) off[d + 1] = off[d] + lens[d];
    data_write(path, 2, V, 0, 0, NULL, D, off, tokens, mask);
    free(off);
}

// Packed rows (next-fit or best-fit) give the same loss and gradients as one document per row.
static void test_packed_equals_unpacked(int best_fit) {
    DataFile df;
    data_load(&df, REF_DATA);
    int T = 16, D = (int)df.num_docs;
    int64_t rows = loader_rows_in_epoch(&df, T, 0, 0, best_fit, 0, NULL);
    Model packed, single;
    model_from_dir(&packed, REF_MODEL, (int)rows, T);
    model_from_dir(&single, REF_MODEL, D, T);
    Loader ld;
    loader_init(&ld, &df, (int)rows, T, 0, 0, 0);
    loader_set_best_fit(&ld, best_fit);
    loader_next_batch(&ld);
    // one document per row, built here from the file directly
    int n = D * T;
    int *in = (int *)xcalloc((size_t)n, sizeof(int)), *pos = (int *)xcalloc((size_t)n, sizeof(int));
    int *start = (int *)xcalloc((size_t)n, sizeof(int)), *tgt = (int *)xmalloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) { tgt[i] = -1; start[i] = 0; pos[i] = i % T; }  // doc_start is a position within the row
    int count = 0;
    for (int d = 0; d < D; d++) {
        int64_t len = data_doc_length(&df, d), off = df.offsets[d];
        if (len > T) len = T;
        for (int j = 0; j < len; j++) {
            in[d * T + j] = (int)data_token(&df, off + j);
            if (j + 1 < len && df.mask[off + j + 1]) { tgt[d * T + j] = (int)data_token(&df, off + j + 1); count++; }
        }
    }
    memset(packed.grads_mem, 0, packed.num_params * sizeof(float));
    memset(single.grads_mem, 0, single.num_params * sizeof(float));
    double lp = model_forward(&packed, ld.inputs, ld.pos, ld.doc_start, ld.targets, (int)rows, T);
    model_backward(&packed, ld.inputs, ld.pos, ld.doc_start, (int)rows, T);
    double ls = model_forward(&single, in, pos, start, tgt, D, T);
    model_backward(&single, in, pos, start, D, T);
    double ge = rel_err(packed.grads_mem, single.grads_mem, packed.num_params, 1e-6);
    check(best_fit ? "best_fit_rows_equal_one_document_per_row" : "packed_rows_equal_one_document_per_row",
          ld.num_targets == count && fabs(lp - ls) < 1e-5 * fabs(ls) && ge < 1e-5 && rows < D,
          "targets %d vs %d, loss %.8f vs %.8f, gradient error %.3g, %lld rows for %d documents", ld.num_targets, count, lp, ls, ge,
          (long long)rows, D);
    free(in); free(pos); free(start); free(tgt);
    loader_free(&ld); model_free(&packed); model_free(&single); data_free(&df);
}

// B=4 A=1, B=2 A=2 and B=1 A=4 take the same step.
static void test_accumulation_equivalence(void) {
    DataFile df;
    data_load(&df, REF_DATA);
    int configs[3][2] = {{4, 1}, {2, 2}, {1, 4}};
    float *after[3];
    double loss[3];
    float norm[3];
    size_t P = 0;
    for (int k = 0; k < 3; k++) {
        Model m;
        model_from_dir(&m, REF_MODEL, configs[k][0], 16);
        Loader ld;
        loader_init(&ld, &df, configs[k][0], 16, 0, 0, 1);
        int64_t t = 0;
        StepResult r = train_step(&m, &ld, configs[k][1], 1e-2f, 0.1f, 1.0f, &t);
        loss[k] = r.loss; norm[k] = r.grad_norm;
        P = m.num_params;
        after[k] = (float *)xmalloc(P * sizeof(float));
        memcpy(after[k], m.params_mem, P * sizeof(float));
        ParamTensors pt;
        param_pointers(&m.cfg, after[k], &pt);
        zero_key_bias(&m.cfg, pt.qkvb);  // see zero_key_bias
        loader_free(&ld); model_free(&m);
    }
    double e1 = rel_err(after[1], after[0], P, 1e-6), e2 = rel_err(after[2], after[0], P, 1e-6);
    check("accumulation_B4A1_B2A2_B1A4",
          fabs(loss[1] - loss[0]) < 1e-6 * loss[0] && fabs(loss[2] - loss[0]) < 1e-6 * loss[0] && fabs(norm[1] - norm[0]) < 1e-5 * norm[0] &&
              fabs(norm[2] - norm[0]) < 1e-5 * norm[0] && e1 < 1e-5 && e2 < 1e-5,
          "losses %.8f %.8f %.8f, norms %.6f %.6f %.6f, parameter errors %.3g %.3g", loss[0], loss[1], loss[2], norm[0], norm[1], norm[2], e1, e2);
    for (int k = 0; k < 3; k++) free(after[k]);
    data_free(&df);
}

#include "tests/train/sft_metrics.h"

// A step without targets changes nothing; a micro-batch without targets adds nothing.
static void test_steps_without_targets(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/notargets.bin", tmp_root);
    // doc 0 (16 tokens) fills row 0 with no targets; doc 1 (16 tokens) has targets
    int lens[2] = {16, 16};
    uint32_t toks[32];
    uint8_t mask[32];
    for (int i = 0; i < 32; i++) { toks[i] = (uint32_t)(i * 7 % 61); mask[i] = i >= 16 && i % 3 == 0; }
    write_docs(path, 61, 2, lens, toks, mask);
    DataFile df;
    data_load(&df, path);
    Model m;
    model_from_dir(&m, REF_MODEL, 1, 16);
    Loader ld;
    loader_init(&ld, &df, 1, 16, 0, 0, 1);
    size_t P = m.num_params;
    float *before = (float *)xmalloc(P * sizeof(float));
    memcpy(before, m.params_mem, P * sizeof(float));
    int64_t t = 0;
    StepResult r = train_step(&m, &ld, 1, 1e-2f, 0.1f, 1.0f, &t);  // row 0 only: no targets
    int untouched = !memcmp(before, m.params_mem, P * sizeof(float));
    int moments_zero = 1;
    for (size_t i = 0; i < P; i++) moments_zero &= m.m_mem[i] == 0.0f && m.v_mem[i] == 0.0f;
    check("step_without_targets_is_skipped", r.skipped && r.targets == 0 && t == 0 && untouched && moments_zero,
          "skipped %d, targets %lld, adam count %lld, params untouched %d, moments zero %d", r.skipped, (long long)r.targets, (long long)t,
          untouched, moments_zero);
    // A=2 starting at the empty row equals A=1 on the second row alone
    Model m2;
    model_from_dir(&m2, REF_MODEL, 1, 16);
    Loader l2;
    loader_init(&l2, &df, 1, 16, 0, 0, 1);
    loader_seek(&ld, 0, 0);
    int64_t t1 = 0, t2 = 0;
    StepResult two = train_step(&m2, &l2, 2, 1e-2f, 0.1f, 1.0f, &t2);
    loader_seek(&ld, 0, 1);
    StepResult one = train_step(&m, &ld, 1, 1e-2f, 0.1f, 1.0f, &t1);
    check("micro_batch_without_targets_adds_nothing",
          two.loss == one.loss && two.targets == one.targets && !memcmp(m.params_mem, m2.params_mem, P * sizeof(float)),
          "loss %.8f vs %.8f, targets %lld vs %lld", two.loss, one.loss, (long long)two.targets, (long long)one.targets);
    free(before);
    loader_free(&ld); loader_free(&l2); model_free(&m); model_free(&m2); data_free(&df);
}

// Loader rules: first token never a target, positions restart, cut at T, next-fit rows.
static void test_loader_rules(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/loader.bin", tmp_root);
    int lens[4] = {5, 4, 9, 3};  // T = 8: [5 + pad3] [4 + 3 + pad1]? no: next-fit -> [5][4][9 cut to 8][3]... see below
    uint32_t toks[21];
    uint8_t mask[21];
    for (int i = 0; i < 21; i++) { toks[i] = 100 + (uint32_t)i; mask[i] = 1; }
    write_docs(path, 200, 4, lens, toks, mask);
    DataFile df;
    data_load(&df, path);
    Loader ld;
    loader_init(&ld, &df, 4, 8, 0, 0, 0);
    loader_next_batch(&ld);
    // row 0: doc0 (5) then doc1 (4) does not fit -> row 1: doc1 (4) + doc2 (9 > 4 left) -> row 2: doc2 cut to 8 -> row 3: doc3
    int ok = 1;
    int expect_in[4][8] = {{100, 101, 102, 103, 104, 0, 0, 0}, {105, 106, 107, 108, 0, 0, 0, 0},
                           {109, 110, 111, 112, 113, 114, 115, 116}, {118, 119, 120, 0, 0, 0, 0, 0}};
    int expect_tgt[4][8] = {{101, 102, 103, 104, -1, -1, -1, -1}, {106, 107, 108, -1, -1, -1, -1, -1},
                            {110, 111, 112, 113, 114, 115, 116, -1}, {119, 120, -1, -1, -1, -1, -1, -1}};
    for (int b = 0; b < 4; b++)
        for (int t = 0; t < 8; t++) {
            ok &= ld.inputs[b * 8 + t] == expect_in[b][t];
            ok &= ld.targets[b * 8 + t] == expect_tgt[b][t];
        }
    check("loader_next_fit_cut_and_targets", ok, "packed rows differ from the hand-worked layout");
    check("loader_positions_restart", ld.pos[8 + 3] == 3 && ld.pos[16 + 7] == 7 && ld.doc_start[8 + 2] == 0 && ld.pos[0] == 0,
          "positions or document starts wrong");
    check("loader_exhausts_without_wrap", ld.exhausted, "loader did not stop at the end of the data");
    // two short documents share a row; the second starts at position 0 and attends from its start
    int lens2[2] = {3, 2};
    uint32_t t2[5] = {1, 2, 3, 4, 5};
    uint8_t m2[5] = {1, 1, 1, 1, 1};
    write_docs(path, 200, 2, lens2, t2, m2);
    DataFile d2;
    data_load(&d2, path);
    Loader l2;
    loader_init(&l2, &d2, 1, 8, 0, 0, 0);
    loader_next_batch(&l2);
    check("loader_packs_documents_with_boundaries",
          l2.inputs[3] == 4 && l2.pos[3] == 0 && l2.doc_start[4] == 3 && l2.targets[2] == -1 && l2.targets[3] == 5 && l2.num_targets == 3,
          "row: inputs %d %d, pos %d, start %d, targets %d %d, count %d", l2.inputs[3], l2.inputs[4], l2.pos[3], l2.doc_start[4],
          l2.targets[2], l2.targets[3], l2.num_targets);
    // shuffling is a deterministic function of (seed, epoch), and differs between epochs
    Loader a, b;
    loader_init(&a, &df, 1, 8, 1, 7, 1);
    loader_init(&b, &df, 1, 8, 1, 7, 1);
    int same = !memcmp(a.order, b.order, 4 * sizeof(int64_t));
    loader_seek(&b, 1, 0);
    loader_seek(&a, 1, 0);
    same &= !memcmp(a.order, b.order, 4 * sizeof(int64_t));
    check("loader_shuffle_deterministic", same, "two loaders with one seed disagree");
    loader_free(&a); loader_free(&b); loader_free(&l2); loader_free(&ld); data_free(&d2); data_free(&df);
}

// Positions restart at 0 for every document, also one that starts mid-row, and
// every token attends from its own document's start: all positions of three rows
// holding two and three documents each, hand-worked (T = 8, lengths 2 3 3 | 4 4 | 5 2).
static void test_positions_mid_row(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/positions.bin", tmp_root);
    int lens[7] = {2, 3, 3, 4, 4, 5, 2};
    uint32_t toks[23];
    uint8_t mask[23];
    for (int i = 0; i < 23; i++) { toks[i] = (uint32_t)i; mask[i] = 1; }
    write_docs(path, 61, 7, lens, toks, mask);
    DataFile df;
    data_load(&df, path);
    Loader ld;
    loader_init(&ld, &df, 3, 8, 0, 0, 0);
    loader_next_batch(&ld);
    int expect_pos[24] = {0, 1, 0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 4, 0, 1, 0};
    int expect_start[24] = {0, 0, 2, 2, 2, 5, 5, 5, 0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 0, 5, 5, 7};  // the last: padding, its own start
    int bad = -1;
    for (int i = 23; i >= 0; i--)
        if (ld.pos[i] != expect_pos[i] || ld.doc_start[i] != expect_start[i]) bad = i;
    int b = bad < 0 ? 0 : bad;  // the first wrong position, for the message
    check("loader_positions_restart_mid_row", bad < 0, "row %d position %d: pos %d, document start %d; expected %d, %d", b / 8, b % 8,
          ld.pos[b], ld.doc_start[b], expect_pos[b], expect_start[b]);
    loader_free(&ld); data_free(&df);
}

// Best-fit packing, T = 8, lengths 1 5 6 3 2 4 9 7 4 (document d's tokens are all d + 1):
// next-fit takes 7 rows ([1 5] [6] [3 2] [4] [9 cut] [7] [4]); best fit decreasing 5 full
// ones ([9 cut] [7 1] [6 2] [5 3] [4 4]). Every document appears once per epoch, whole in
// one row (the one longer than T cut to T tokens), and a loader sought to a saved (epoch,
// cursor) serves what the running one does.
static void test_best_fit_rules(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/bestfit.bin", tmp_root);
    enum { D = 9, T = 8 };
    int lens[D] = {1, 5, 6, 3, 2, 4, 9, 7, 4}, n = 0;
    uint32_t toks[41];
    uint8_t mask[41];
    for (int d = 0; d < D; d++)
        for (int j = 0; j < lens[d]; j++) { toks[n] = (uint32_t)d + 1; mask[n++] = 1; }
    write_docs(path, 16, D, lens, toks, mask);
    DataFile df;
    data_load(&df, path);
    // in file order (-S 0) and shuffled; best fit without the decreasing order would take 6 rows in file order
    int64_t filled, rows = loader_rows_in_epoch(&df, T, 1, 3, 1, 0, &filled), nf_rows = loader_rows_in_epoch(&df, T, 1, 3, 0, 0, NULL);
    int64_t rows_in_order = loader_rows_in_epoch(&df, T, 0, 0, 1, 0, NULL);
    check("best_fit_rows_hand_worked", rows == 5 && rows_in_order == 5 && filled == 40 && loader_rows_in_epoch(&df, T, 0, 0, 0, 0, NULL) == 7 && nf_rows >= rows,
          "%lld rows holding %lld tokens, %lld in file order (next-fit: %lld); expected 5 full rows", (long long)rows, (long long)filled,
          (long long)rows_in_order, (long long)nf_rows);
    // T = 10, lengths 3 6 2 5 4: best fit puts 4 with 6 (room 4) and 2 with 5 and 3
    // (room 2), 2 full rows; worst fit (the most room) and next-fit take 3
    char path2[512];
    snprintf(path2, sizeof path2, "%s/bestfit2.bin", tmp_root);
    write_docs(path2, 16, 5, (int[]){3, 6, 2, 5, 4}, toks, mask);
    DataFile df2;
    data_load(&df2, path2);
    int64_t filled2, rows2 = loader_rows_in_epoch(&df2, 10, 0, 0, 1, 0, &filled2);
    check("best_fit_rows_hand_worked_least_room", rows2 == 2 && filled2 == 20, "%lld rows holding %lld tokens; expected 2 full rows",
          (long long)rows2, (long long)filled2);
    // T = 10, lengths 6 6 3 3 in file order: the oldest bin of the least room takes each 3, as in trl's
    // _pack_bfd (a deque per room), whose rows are documents [0 2] [1 3] (trl 1.13 on 4 such rows, T 10)
    write_docs(path2, 16, 4, (int[]){6, 6, 3, 3}, toks, mask);
    data_free(&df2); data_load(&df2, path2);
    Loader ld;
    loader_init(&ld, &df2, 2, 10, 0, 0, 0);
    loader_set_best_fit(&ld, 1);  // rows fill next-fit over this order: [0 2] (9 tokens), then 1 does not fit
    check("best_fit_bins_as_trl", ld.order[0] == 0 && ld.order[1] == 2 && ld.order[2] == 1 && ld.order[3] == 3,
          "documents in the order %lld %lld %lld %lld; trl's rows are [0 2] [1 3]", (long long)ld.order[0], (long long)ld.order[1],
          (long long)ld.order[2], (long long)ld.order[3]);
    loader_free(&ld); data_free(&df2);
    loader_init(&ld, &df, 5, T, 1, 3, 0);
    loader_set_best_fit(&ld, 1);
    loader_next_batch(&ld);
    int count[D + 1] = {0}, row_of[D + 1], whole = 1;
    for (int i = 0; i < 5 * T; i++) {
        int d = ld.inputs[i], p = i % T;
        if (count[d]++ == 0) row_of[d] = i / T;
        whole &= row_of[d] == i / T && ld.pos[i] == count[d] - 1 && ld.doc_start[i] == p - ld.pos[i];  // contiguous, in one row
    }
    int once = count[0] == 0;  // no padding: all five rows are full
    for (int d = 0; d < D; d++) once &= count[d + 1] == (lens[d] > T ? T : lens[d]);
    check("best_fit_every_document_once_per_epoch", once && ld.exhausted, "token counts per document wrong or loader not exhausted");
    check("best_fit_documents_whole_in_one_row", whole, "a document is split across rows or its positions do not restart");
    Loader run, back;
    loader_init(&run, &df, 2, T, 1, 3, 1);
    loader_init(&back, &df, 2, T, 1, 3, 1);
    loader_set_best_fit(&run, 1);
    loader_set_best_fit(&back, 1);
    int same = 1;
    for (int step = 0; step < 6; step++) {  // through three epochs
        loader_seek(&back, run.epoch, run.cursor);
        loader_next_batch(&run);
        loader_next_batch(&back);
        same &= !memcmp(run.inputs, back.inputs, sizeof(int) * 2 * T) && !memcmp(run.doc_start, back.doc_start, sizeof(int) * 2 * T);
    }
    check("best_fit_resume_serves_the_same_rows", same, "a loader sought to the saved position serves other rows");
    loader_free(&run); loader_free(&back); loader_free(&ld); data_free(&df);
}

// Import -> export -> import is bit-exact, and the export's tensors keep HF names.
static void test_hf_round_trip(void) {
    Model m;
    memset(&m, 0, sizeof m);
    model_load_hf(REF_MODEL, &m.cfg, &m.params_mem, &m.params);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/export", tmp_root);
    make_dirs(dir);
    model_save_hf(dir, &m.cfg, &m.params, HF_SAVE_F32);
    Model r;
    memset(&r, 0, sizeof r);
    model_load_hf(dir, &r.cfg, &r.params_mem, &r.params);
    size_t P = model_num_parameters(&m.cfg);
    int same_cfg = !memcmp(&m.cfg, &r.cfg, sizeof m.cfg);
    check("hf_round_trip_bit_exact", same_cfg && !memcmp(m.params_mem, r.params_mem, P * sizeof(float)), "config equal %d", same_cfg);
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    SafeTensors st;
    st_open(&st, path);
    check("hf_export_names", st_find(&st, "transformer.h.1.attn.c_attn.weight") && st_find(&st, "transformer.wte.weight") &&
                                 st.count == 4 + 12 * m.cfg.L && st_find(&st, "transformer.h.0.mlp.c_proj.weight")->shape[0] == 4 * m.cfg.C,
          "exported names or shapes are not GPT2LMHeadModel's");
    st_close(&st);
    free(m.params_mem); free(r.params_mem);
}

// ---- the program: resume and bad input --------------------------------------

// For a fresh model of descriptor `desc` and extra flags; check names start with `tag`.
static void test_resume_bit_identical(const char *tag, const char *desc, const char *flags) {
    char cmd[2048], a[512], b[512], err[4096], common[512], name[128];
    snprintf(a, sizeof a, "%s/run_full_%s", tmp_root, desc);
    snprintf(b, sizeof b, "%s/run_resumed_%s", tmp_root, desc);
    snprintf(common, sizeof common, "./train_sft -i " REF_DATA " -j " REF_DATA " -v 2 -m 2 -s 3 -g 4 -w 0.8 -e %s -b 2 -t 16 -d 64 -x 7 -l 1e-2 -u 2 -c 0.1 -S 1 %s",
             desc, flags);
    snprintf(cmd, sizeof cmd, "%s -o %s", common, a);
    int rc1 = run(cmd, err, sizeof err);
    snprintf(cmd, sizeof cmd, "%s -n 3 -o %s", common, b);
    int rc2 = run(cmd, err, sizeof err);
    // pretend the run died after step 4: the checkpoint of step 3 is the latest
    char path[600], dir6[600];
    snprintf(path, sizeof path, "%s/latest", b);
    write_file_atomic(path, "step_00000003\n", 14);
    snprintf(dir6, sizeof dir6, "%s/step_00000006", b);
    remove_flat_dir(dir6);
    snprintf(cmd, sizeof cmd, "%s -n 3 -o %s -y 1", common, b);
    int rc3 = run(cmd, err, sizeof err);
    snprintf(path, sizeof path, "%s/metrics.jsonl", a);
    char *ma = read_text(path);
    snprintf(path, sizeof path, "%s/metrics.jsonl", b);
    char *mb = read_text(path);
    char la[4096], lb[4096];
    loss_lines(ma, la, sizeof la);
    loss_lines(mb, lb, sizeof lb);
    int steps = 0, vals = 0;
    for (char *p = la; (p = strstr(p, "\"loss\"")); p++) steps++;
    for (char *p = la; (p = strstr(p, "val_loss")); p++) vals++;
    snprintf(name, sizeof name, "%sresume_losses_bit_identical", tag);
    check(name, rc1 == 0 && rc2 == 0 && rc3 == 0 && !strcmp(la, lb) && steps == 7 && vals == 5,
          "exit codes %d %d %d, %d steps, %d validations; full run %s vs resumed %s", rc1, rc2, rc3, steps, vals, la, lb);
    snprintf(path, sizeof path, "%s/step_00000007/model.safetensors", a);
    char *fa = NULL, *fb = NULL;
    size_t na = 0, nb = 0;
    if (path_exists(path)) fa = read_whole_file(path, &na);
    snprintf(path, sizeof path, "%s/step_00000007/model.safetensors", b);
    if (path_exists(path)) fb = read_whole_file(path, &nb);
    snprintf(name, sizeof name, "%sresume_final_model_bit_identical", tag);
    check(name, fa && fb && na == nb && !memcmp(fa, fb, na), "final exports differ or are missing");
    free(ma); free(mb); free(fa); free(fb);
}

// One thread and three threads give bit-identical losses (every reduction has a fixed
// order), for GPT-2 and for a grouped-query Llama (dK/dV summed over a group in order).
static void test_thread_count_independent(const char *tag, const char *desc, const char *flags) {
    char cmd[2048], err[4096], path[700], la[4096], lb[4096], common[512], name[128];
    snprintf(common, sizeof common, "./train_sft -i " REF_DATA " -e %s -b 3 -t 16 -x 3 -l 1e-2 -S 1 %s", desc, flags);
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 %s -o %s/threads1_%s", common, tmp_root, desc);
    int rc1 = run(cmd, err, sizeof err);
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=3 %s -o %s/threads3_%s", common, tmp_root, desc);
    int rc2 = run(cmd, err, sizeof err);
    snprintf(path, sizeof path, "%s/threads1_%s/metrics.jsonl", tmp_root, desc);
    char *ma = read_text(path);
    snprintf(path, sizeof path, "%s/threads3_%s/metrics.jsonl", tmp_root, desc);
    char *mb = read_text(path);
    loss_lines(ma, la, sizeof la);
    loss_lines(mb, lb, sizeof lb);
    snprintf(name, sizeof name, "%sthread_count_independent", tag);
    check(name, rc1 == 0 && rc2 == 0 && la[0] && !strcmp(la, lb), "exit %d %d; 1 thread %s vs 3 threads %s", rc1, rc2, la, lb);
    free(ma); free(mb);
}

// ---- shuffling, validation and sampling, through the program -----------------

// The runs below use one thread: their models are tiny, and on a busy machine the
// thread barriers of a many-threaded run would cost more than its arithmetic.
#define ONE_THREAD "OMP_NUM_THREADS=1 "

// The "targets" of the training lines of a metrics file, in order; returns how many.
static int step_targets(const char *metrics, int *out, int max) {
    int n = 0;
    for (const char *p = metrics; p && (p = strstr(p, "\"targets\": ")) && n < max; p++) out[n++] = atoi(p + 11);
    return n;
}

// Each of 8 documents fills a row of T=16 alone and has its own number of targets
// (document d has d+1), so with B=1 the targets of step s name the document it
// trained on: the metrics spell out the order of each epoch.
static void test_shuffle_orders(void) {
    char data[600], cmd[2048], err[4096], path[700];
    snprintf(data, sizeof data, "%s/orders.bin", tmp_root);
    int lens[8];
    uint32_t toks[8 * 16];
    uint8_t mask[8 * 16];
    for (int d = 0; d < 8; d++) {
        lens[d] = 16;
        for (int j = 0; j < 16; j++) { toks[d * 16 + j] = (uint32_t)((d * 16 + j) * 7 % 61); mask[d * 16 + j] = j >= 1 && j <= d + 1; }
    }
    write_docs(data, 61, 8, lens, toks, mask);
    int seq[2][20] = {{0}}, n[2], rc[2];
    const char *shuffle_flag[2] = {"", "-S 0"};  // the default first: it must shuffle
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, ONE_THREAD "./train_sft -i %s -e d1c16h2t24 -b 1 -t 16 -x 16 %s -o %s/orders%d", data, shuffle_flag[k], tmp_root, k);
        rc[k] = run(cmd, err, sizeof err);
        snprintf(path, sizeof path, "%s/orders%d/metrics.jsonl", tmp_root, k);
        char *metrics = read_text(path);
        n[k] = step_targets(metrics, seq[k], 20);
        free(metrics);
    }
    // per epoch: every document once (a permutation of 1..8), and whether it is file order
    int perm[2][2], in_order[2][2];
    for (int k = 0; k < 2; k++)
        for (int e = 0; e < 2; e++) {
            int seen = 0;
            in_order[k][e] = 1;
            for (int s = 0; s < 8; s++) {
                int t = seq[k][e * 8 + s];
                if (t >= 1 && t <= 8) seen |= 1 << (t - 1);
                in_order[k][e] &= t == s + 1;
            }
            perm[k][e] = rc[k] == 0 && n[k] == 16 && seen == 255;
        }
    int same_twice = n[0] == 16 && !memcmp(seq[0], seq[0] + 8, 8 * sizeof(int));
    check("shuffle_off_keeps_file_order", perm[1][0] && perm[1][1] && in_order[1][0] && in_order[1][1],
          "exit %d, %d steps; -S 0 did not take the documents in file order", rc[1], n[1]);
    check("shuffle_default_not_file_order", perm[0][0] && perm[0][1] && !in_order[0][0] && !in_order[0][1],
          "exit %d, %d steps; epoch orders a permutation %d %d, in file order %d %d", rc[0], n[0], perm[0][0], perm[0][1], in_order[0][0],
          in_order[0][1]);
    check("shuffle_new_order_each_epoch", perm[0][0] && perm[0][1] && !same_twice,
          "exit %d, %d steps; the second epoch repeats the first epoch's order", rc[0], n[0]);
}

// Validation loss = sum over the targets of all validation micro-batches / their
// number, against PyTorch on a file whose micro-batches hold 29, 2, 18 and 10 targets
// (a mean of per-batch means is about 1% off): evaluate() directly, then the program's
// step-0 line.
static void test_validation_reference(void) {
    float *ref_loss = expect_tensor("val_loss", NULL), *ref_targets = expect_tensor("val_targets", NULL);
    DataFile df;
    data_load(&df, REF_VAL);
    Model m;
    model_from_dir(&m, REF_MODEL, 2, 16);
    Loader ld;
    loader_init(&ld, &df, 2, 16, 0, 0, 0);
    int64_t n_all, n_two;
    double all = evaluate(&m, &ld, -1, &n_all), two = evaluate(&m, &ld, 2, &n_two);
    check("reference_validation_loss",
          fabs(all - ref_loss[0]) < 1e-5 * ref_loss[0] && fabs(two - ref_loss[1]) < 1e-5 * ref_loss[1] && n_all == (int64_t)ref_targets[0] &&
              n_two == (int64_t)ref_targets[1],
          "whole file %.8f over %lld targets, reference %.8f over %d; first 2 micro-batches %.8f over %lld, reference %.8f over %d", all,
          (long long)n_all, ref_loss[0], (int)ref_targets[0], two, (long long)n_two, ref_loss[1], (int)ref_targets[1]);
    loader_free(&ld); model_free(&m); data_free(&df);
    char cmd[2048], err[4096], path[700];
    snprintf(cmd, sizeof cmd, ONE_THREAD "./train_sft -i " REF_DATA " -j " REF_VAL " -m -1 -e " REF_MODEL " -b 2 -t 16 -x 1 -o %s/val", tmp_root);
    int rc = run(cmd, err, sizeof err);
    snprintf(path, sizeof path, "%s/val/metrics.jsonl", tmp_root);
    char *metrics = read_text(path);
    const char *line = metrics ? strstr(metrics, "{\"step\": 0, \"val_loss\": ") : NULL;
    double loss = NAN;
    long long targets = -1;
    if (line) sscanf(line, "{\"step\": 0, \"val_loss\": %lf, \"val_targets\": %lld", &loss, &targets);
    check("program_validation_loss", rc == 0 && fabs(loss - ref_loss[0]) < 1e-5 * ref_loss[0] && targets == (long long)ref_targets[0],
          "exit %d; step-0 validation %.6f over %lld targets, reference %.8f over %d", rc, loss, targets, ref_loss[0], (int)ref_targets[0]);
    free(metrics); free(ref_loss); free(ref_targets);
}

// The "sample | generated:" lines of a program's output, each ending "; "; returns how many.
static int sample_lines(const char *output, char *out, size_t n) {
    int count = 0;
    out[0] = 0;
    for (const char *p = output; p && (p = strstr(p, "sample | generated:")); p++, count++) {
        size_t len = strcspn(p, "\n");
        if (strlen(out) + len + 3 < n) { strncat(out, p, len); strcat(out, "; "); }
    }
    return count;
}

// Resume restores the sampling RNG: the checkpoint of step 2 is taken after the
// temperature sample of step 1 has drawn from it, and the resumed run's samples of
// steps 2, 3 and the end equal the uninterrupted run's.
static void test_resume_sampling(void) {
    char out[600], cmd[2048], path[700], full[4096], resumed[4096];
    snprintf(out, sizeof out, "%s/resume_sampling", tmp_root);
    const char *common = ONE_THREAD "./train_sft -i " REF_DATA " -e d1c16h2t24 -b 2 -t 16 -x 4 -n 2 -s 1 -g 8 -w 1";
    snprintf(cmd, sizeof cmd, "%s -o %s > %s/full.txt 2>&1", common, out, tmp_root);
    int rc1 = system(cmd);
    snprintf(path, sizeof path, "%s/latest", out);
    write_file_atomic(path, "step_00000002\n", 14);
    snprintf(cmd, sizeof cmd, "%s -y 1 -o %s > %s/resumed.txt 2>&1", common, out, tmp_root);
    int rc2 = system(cmd);
    snprintf(path, sizeof path, "%s/full.txt", tmp_root);
    char *a = read_text(path);
    snprintf(path, sizeof path, "%s/resumed.txt", tmp_root);
    char *b = read_text(path);
    int na = sample_lines(a, full, sizeof full), nb = sample_lines(b, resumed, sizeof resumed);
    const char *tail = full;  // the full run's samples from step 2 on: skip the one of step 1
    if (na == 4) tail = strstr(full, "; ") + 2;
    check("resume_restores_sampling_rng", rc1 == 0 && rc2 == 0 && na == 4 && nb == 3 && !strcmp(tail, resumed),
          "exit %d %d, %d and %d samples; uninterrupted: %sresumed: %s", rc1, rc2, na, nb, full, resumed);
    free(a); free(b);
}

#include "tests/train/sft_inputs.h"

// Data with a larger vocabulary than a pretrained model grows the embedding: old
// rows unchanged, new rows the mean of the old ones, the export has the new size.
static void test_vocab_growth(void) {
    char data[600], out[600], cmd[2048], err[4096], dir[700];
    snprintf(data, sizeof data, "%s/grow.bin", tmp_root);
    int lens[1] = {4};
    uint32_t toks[4] = {1, 70, 99, 2};
    uint8_t mask[4] = {0, 1, 1, 1};
    write_docs(data, 100, 1, lens, toks, mask);
    snprintf(out, sizeof out, "%s/grow", tmp_root);
    snprintf(cmd, sizeof cmd, "./train_sft -i %s -e " REF_MODEL " -b 1 -t 16 -x 1 -l 0 -o %s", data, out);
    int rc = run(cmd, err, sizeof err);
    Model orig, grown;
    memset(&orig, 0, sizeof orig);
    memset(&grown, 0, sizeof grown);
    model_load_hf(REF_MODEL, &orig.cfg, &orig.params_mem, &orig.params);
    snprintf(dir, sizeof dir, "%s/step_00000001", out);
    if (rc != 0 || !is_directory(dir)) { check("vocab_growth", 0, "exit %d: %s", rc, err); return; }
    model_load_hf(dir, &grown.cfg, &grown.params_mem, &grown.params);
    int C = orig.cfg.C, ok = grown.cfg.V == 100 && !memcmp(orig.params.wte, grown.params.wte, (size_t)61 * C * sizeof(float));
    double worst = 0.0;
    for (int c = 0; c < C; c++) {
        double mean = 0.0;
        for (int v = 0; v < 61; v++) mean += orig.params.wte[v * C + c];
        mean /= 61;
        for (int v = 61; v < 100; v++) worst = fmax(worst, fabs(grown.params.wte[v * C + c] - mean));
    }
    check("vocab_growth_mean_rows", ok && worst < 1e-6, "V=%d, old rows kept %d, new rows off the mean by %.3g", grown.cfg.V, ok, worst);
    free(orig.params_mem); free(grown.params_mem);
}

// The KV-cache decoder gives the same logits as the full forward pass, for GPT-2 and
// the Llama-family references (RoPE at the cache position, grouped-query heads,
// biases, untied head; q/k norms, NoPE, sliding windows of 5 and 6 positions over 24,
// two rotary tables, post norms, GeGLU). The cache starts with room for 5 positions and grows.
static void test_kv_cache_decode(void) {
    const char *dirs[] = {REF_MODEL, REF_LLAMA, REF_QWEN2, REF_QWEN3, REF_SMOLLM3, REF_GEMMA3};
    const char *names[] = {"kv_cache_decode_matches_forward", "llama_kv_cache_decode_matches_forward", "qwen2_kv_cache_decode_matches_forward",
                           "qwen3_kv_cache_decode_matches_forward", "smollm3_kv_cache_decode_matches_forward",
                           "gemma3_kv_cache_decode_matches_forward"};
    for (int k = 0; k < 6; k++) {
        Model m;
        model_from_dir(&m, dirs[k], 1, 24);
        int toks[24], pos[24], start[24] = {0};
        for (int i = 0; i < 24; i++) { toks[i] = (i * 17 + 3) % m.cfg.V; pos[i] = i; m.rows[i] = i; }
        m.num_rows = 24;
        model_forward(&m, toks, pos, start, NULL, 1, 24);
        KVCache kv;
        kv_init(&kv, &m.cfg, 5);
        double worst = 0.0;
        for (int i = 0; i < 24; i++) {
            const float *l = model_decode_step(&m, &kv, toks[i]);
            worst = fmax(worst, rel_err(l, m.acts.logits + (size_t)i * m.cfg.V, (size_t)m.cfg.V, 1.0));
        }
        check(names[k], worst < 1e-5 && kv.cap >= 24 && kv.cap < 48, "max relative logit error %.3g, cache for %d positions", worst, kv.cap);
        kv_free(&kv);
        model_free(&m);
    }
}

// A checkpoint over an existing one is replaced whole, and latest points at it.
static void test_checkpoint_atomic(void) {
    char out[512], cmd[2048], err[4096], path[700];
    snprintf(out, sizeof out, "%s/ckpt", tmp_root);
    snprintf(cmd, sizeof cmd, "./train_sft -i " REF_DATA " -e d1c16h2t24 -b 2 -t 16 -x 2 -S 0 -o %s", out);
    int rc1 = run(cmd, err, sizeof err), rc2 = run(cmd, err, sizeof err);
    snprintf(path, sizeof path, "%s/latest", out);
    char *latest = read_text(path);
    snprintf(path, sizeof path, "%s/step_00000002.tmp", out);
    int tmp_left = path_exists(path);
    snprintf(path, sizeof path, "%s/step_00000002", out);
    Model m;
    memset(&m, 0, sizeof m);
    model_load_hf(path, &m.cfg, &m.params_mem, &m.params);
    check("checkpoint_rewrite_and_latest", rc1 == 0 && rc2 == 0 && latest && !strcmp(latest, "step_00000002\n") && !tmp_left && m.cfg.L == 1,
          "exit %d %d, latest '%s', temporary left %d", rc1, rc2, latest ? latest : "(none)", tmp_left);
    free(latest);
    free(m.params_mem);
}

// ---- crash safety and guards: non-finite steps, lost targets, memory plan ----

// A step whose gradient or loss is NaN (the SFT_TEST_POISON hook's two kinds) makes
// no update: weights, AdamW moments and AdamW's step count stay as they were, and
// the next clean step is an ordinary update.
static void test_nonfinite_step_skipped(void) {
    DataFile df;
    data_load(&df, REF_DATA);
    const char *names[2] = {"nonfinite_gradient_step_changes_nothing", "nonfinite_loss_step_changes_nothing"};
    for (int k = 0; k < 2; k++) {
        Model m;
        model_from_dir(&m, REF_MODEL, 2, 16);
        Loader ld;
        loader_init(&ld, &df, 2, 16, 0, 0, 1);
        int64_t t = 0;
        train_step(&m, &ld, 1, 1e-2f, 0.1f, 1.0f, &t);  // a real update first, so the moments are not zero
        size_t P = m.num_params, bytes = P * sizeof(float);
        float *before = (float *)xmalloc(3 * bytes);
        memcpy(before, m.params_mem, bytes); memcpy(before + P, m.m_mem, bytes); memcpy(before + 2 * P, m.v_mem, bytes);
        poison_this_step = k == 0 ? POISON_GRAD : POISON_LOSS;
        StepResult r = train_step(&m, &ld, 1, 1e-2f, 0.1f, 1.0f, &t);
        poison_this_step = POISON_NONE;
        int same = !memcmp(before, m.params_mem, bytes) && !memcmp(before + P, m.m_mem, bytes) && !memcmp(before + 2 * P, m.v_mem, bytes);
        int64_t t_after_skip = t;
        StepResult next = train_step(&m, &ld, 1, 1e-2f, 0.1f, 1.0f, &t);
        int finite = all_finite(m.params_mem, P) && all_finite(m.m_mem, P) && all_finite(m.v_mem, P);
        check(names[k], r.skipped == STEP_NONFINITE && t_after_skip == 1 && same && next.skipped == STEP_UPDATED && t == 2 && finite,
              "skipped %d, adam count %lld after the skip, state unchanged %d; next step skipped %d, count %lld, finite %d", r.skipped,
              (long long)t_after_skip, same, next.skipped, (long long)t, finite);
        free(before);
        loader_free(&ld);
        model_free(&m);
    }
    data_free(&df);
}

// int64 field `index` of a state.bin header (8 = AdamW updates), or -1.
static int64_t state_field(const char *state_path, int index) {
    if (!path_exists(state_path)) return -1;
    size_t n;
    char *buf = read_whole_file(state_path, &n);
    int64_t v = -1;
    if (n >= 256) memcpy(&v, buf + 8 * index, 8);
    free(buf);
    return v;
}

// The guard through real runs with the test hook: skipped steps are logged, the run
// goes on, and K non-finite steps in a row stop it with exit 2 (not K-1, and a clean
// step in between resets the count).
static void test_nonfinite_guard_run(void) {
    char cmd[2048], err[4096], out[512], path[700];
    const char *common = "OMP_NUM_THREADS=1 ./train_sft -i " REF_DATA " -e d1c16h2t24 -b 2 -t 16 -x 5 -S 0 -n 1";  // one thread: fastest to start
    snprintf(out, sizeof out, "%s/nonfinite", tmp_root);
    snprintf(cmd, sizeof cmd, "SFT_TEST_POISON=grad:2,loss:3 %s -o %s", common, out);
    int rc = run(cmd, err, sizeof err);
    snprintf(path, sizeof path, "%s/metrics.jsonl", out);
    char *metrics = read_text(path);
    int logged = metrics && strstr(metrics, "{\"step\": 2, \"skipped\": \"nonfinite\"") && strstr(metrics, "{\"step\": 3, \"skipped\": \"nonfinite\"") &&
                 strstr(metrics, "{\"step\": 4, \"loss\"");
    snprintf(path, sizeof path, "%s/step_00000005/state.bin", out);
    int64_t updates = state_field(path, 8);
    check("nonfinite_steps_skipped_and_logged", rc == 0 && logged && updates == 3, "exit %d, skips logged %d, AdamW updates %lld (expected 3): %s",
          rc, logged, (long long)updates, err);
    free(metrics);
    struct { const char *poison, *k; int want; const char *name; } cases[] = {
        {"grad:2,grad:3,grad:4", "3", 2, "nonfinite_guard_stops_after_K_in_a_row"},
        {"grad:2,grad:3,grad:4", "4", 0, "nonfinite_guard_allows_K_minus_1"},
        {"grad:1,grad:2,loss:4,loss:5", "3", 0, "nonfinite_guard_count_resets_on_a_good_step"},
    };
    for (int i = 0; i < 3; i++) {
        snprintf(out, sizeof out, "%s/guard%d", tmp_root, i);
        snprintf(cmd, sizeof cmd, "SFT_TEST_POISON=%s %s -K %s -o %s", cases[i].poison, common, cases[i].k, out);
        rc = run(cmd, err, sizeof err);
        snprintf(path, sizeof path, "%s/latest", out);
        char *latest = read_text(path);
        int ok = rc == cases[i].want;
        if (cases[i].want == 2)  // stopped at step 4: the message, and the newest checkpoint is step 3's
            ok = ok && strstr(err, "error: stopping: 3 steps in a row (through step 4)") && latest && !strcmp(latest, "step_00000003\n");
        check(cases[i].name, ok, "exit %d (expected %d), latest %s: %s", rc, cases[i].want, latest ? latest : "(none)", err);
        free(latest);
    }
}

static void exit_without_leak_check(void) { _exit(1); }

// save_checkpoint refuses a model holding NaN: nothing is written, latest unchanged.
static void test_checkpoint_never_nonfinite(void) {
    char out[512], path[700];
    snprintf(out, sizeof out, "%s/nan_ckpt", tmp_root);
    make_dirs(out);
    Model m;
    model_from_dir(&m, REF_MODEL, 1, 16);
    m.params_mem[m.num_params / 2] = NAN;
    TrainState st;
    memset(&st, 0, sizeof st);
    st.step = 1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        // The child has none of the parent's OpenMP worker threads, so a leak check at
        // exit (SAN=1) would report their per-thread buffers: fatal's exit(1) leaves
        // through _exit(1) instead, the same status without the check.
        atexit(exit_without_leak_check);
        freopen("/dev/null", "w", stderr);
        save_checkpoint(out, &m.cfg, &m.params, &st, m.m_mem, m.v_mem, m.num_params, NULL);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    snprintf(path, sizeof path, "%s/step_00000001", out);
    int written = path_exists(path);
    snprintf(path, sizeof path, "%s/step_00000001.tmp", out);
    written |= path_exists(path);
    snprintf(path, sizeof path, "%s/latest", out);
    written |= path_exists(path);
    check("checkpoint_with_nan_not_written", WIFEXITED(status) && WEXITSTATUS(status) == 1 && !written, "exit %d, something written %d",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1, written);
    model_free(&m);
}

// Exit status of read_state_file(path) for cfg in a child process (fatal: 1).
static int read_state_status(const char *path, const ModelConfig *cfg) {
    size_t P = model_num_parameters(cfg);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        atexit(exit_without_leak_check);  // as in test_checkpoint_never_nonfinite
        freopen("/dev/null", "w", stderr);
        TrainState st;
        float *mv = (float *)xmalloc(2 * P * sizeof(float));
        read_state_file(path, cfg, &st, mv, mv + P, P);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// state.bin records the model's family and Llama sizes: a model with the same
// parameter count but other key/value heads and MLP width is refused (l2c32h4k1f64
// has 48 fewer q|k|v rows per layer than l2c32h4k4f48 and 16 more MLP units of 3 x 32
// weights: the same count); a file written before those fields (zeros there) is a
// GPT-2 model's, so it resumes a GPT-2 model but not a Llama of the same count.
static void test_state_model_fields(void) {
    ModelConfig a, b, g;
    model_parse_descriptor("l2c32h4k4f48", &a);
    model_parse_descriptor("l2c32h4k1f64", &b);
    model_parse_descriptor("d2c32h4", &g);
    a.V = b.V = g.V = 61;
    size_t P = model_num_parameters(&a), PG = model_num_parameters(&g);
    float *zeros = (float *)xcalloc(2 * (P > PG ? P : PG), sizeof(float));
    TrainState st;
    memset(&st, 0, sizeof st);
    char path[600], old_path[600];
    snprintf(path, sizeof path, "%s/state_llama.bin", tmp_root);
    write_state_file(path, &a, &st, zeros, zeros + P, P);
    // state files as written before fields 18..23 existed, for the GPT-2 and the Llama
    int old_status[2];
    for (int k = 0; k < 2; k++) {
        const ModelConfig *c = k == 0 ? &g : &a;
        size_t Pk = model_num_parameters(c);
        snprintf(old_path, sizeof old_path, "%s/state_old_%d.bin", tmp_root, k);
        write_state_file(old_path, c, &st, zeros, zeros + Pk, Pk);
        size_t n;
        char *buf = read_whole_file(old_path, &n);
        memset(buf + 18 * sizeof(int64_t), 0, 6 * sizeof(int64_t));
        write_file_atomic(old_path, buf, n);
        free(buf);
        old_status[k] = read_state_status(old_path, c);
    }
    int same = read_state_status(path, &a), other = read_state_status(path, &b), old_gpt2 = old_status[0], old_llama = old_status[1];
    check("state_checks_llama_sizes", P == model_num_parameters(&b) && same == 0 && other == 1,
          "same parameter count %d, same model exit %d (want 0), other kv heads/MLP exit %d (want 1)", P == model_num_parameters(&b), same, other);
    check("state_before_family_fields_is_gpt2", old_gpt2 == 0 && old_llama == 1, "old file read as GPT-2: exit %d (want 0), as Llama: exit %d (want 1)",
          old_gpt2, old_llama);
    // the newer families' features: a Gemma 3 state file does not resume a model of the
    // same sizes with another window, another sliding pattern or without its embedding scale
    ModelConfig g1, g2, g3, g4;
    model_parse_descriptor("l3c32h4k2a16gw5p3", &g1);
    model_parse_descriptor("l3c32h4k2a16gw6p3", &g2);
    model_parse_descriptor("l3c32h4k2a16gw5p2", &g3);
    g1.V = g2.V = g3.V = 61;
    g4 = g1;
    g4.embed_scale = 0;
    size_t PGem = model_num_parameters(&g1);
    float *gz = (float *)xcalloc(2 * PGem, sizeof(float));
    snprintf(path, sizeof path, "%s/state_gemma3.bin", tmp_root);
    write_state_file(path, &g1, &st, gz, gz + PGem, PGem);
    int g_same = read_state_status(path, &g1), g_window = read_state_status(path, &g2), g_pattern = read_state_status(path, &g3);
    int g_scale = read_state_status(path, &g4);
    check("state_checks_family_features", PGem == model_num_parameters(&g2) && g_same == 0 && g_window == 1 && g_pattern == 1 && g_scale == 1,
          "same model exit %d (want 0); other window %d, other sliding layers %d, no embedding scale %d (want 1)", g_same, g_window, g_pattern, g_scale);
    free(gz);
    free(zeros);
}

// Documents whose targets lie beyond -t: a warning with the counts at start, and a run
// that trained nothing ends with exit 3 and no checkpoint.
static void test_lost_targets_and_nothing_trained(void) {
    char data[512], out[512], cmd[2048], err[4096], path[700];
    // doc 0: 20 tokens, targets at 17 and 18; doc 1: 24 tokens, targets at 16, 20, 23;
    // doc 2: 8 tokens, targets at 3..7. At T=16: 2 documents lose 2 + 3 = 5 targets of 10.
    int lens[3] = {20, 24, 8};
    uint32_t toks[52];
    uint8_t mask[52] = {0};
    for (int i = 0; i < 52; i++) toks[i] = (uint32_t)(i * 5 % 61);
    mask[17] = mask[18] = 1;
    mask[20 + 16] = mask[20 + 20] = mask[20 + 23] = 1;
    for (int j = 3; j < 8; j++) mask[44 + j] = 1;
    snprintf(data, sizeof data, "%s/lost_all.bin", tmp_root);
    write_docs(data, 61, 2, lens, toks, mask);
    snprintf(out, sizeof out, "%s/nothing", tmp_root);
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 ./train_sft -i %s -e d1c16h2t24 -b 1 -t 16 -x 4 -n 1 -o %s", data, out);
    int rc = run(cmd, err, sizeof err);
    snprintf(path, sizeof path, "%s/latest", out);
    int latest = path_exists(path);
    snprintf(path, sizeof path, "%s/step_00000004", out);
    int final = path_exists(path);
    check("nothing_trained_exits_3_without_checkpoint",
          rc == 3 && strstr(err, "warning: ") && strstr(err, "2 documents longer than T=16 lose 5 of their targets") &&
              strstr(err, "(100.0% of all 5 targets): NO TARGET IS LEFT") && strstr(err, "error: nothing was trained") && !final,
          "exit %d, latest %d, final checkpoint %d: %s", rc, latest, final, err);
    snprintf(data, sizeof data, "%s/lost_half.bin", tmp_root);
    write_docs(data, 61, 3, lens, toks, mask);
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 ./train_sft -i %s -e d1c16h2t24 -b 1 -t 16 -x 3 -o %s/half", data, tmp_root);
    rc = run(cmd, err, sizeof err);
    check("lost_targets_warning_counts", rc == 0 && strstr(err, "2 documents longer than T=16 lose 5 of their targets beyond position 16 (50.0% of all 10 targets);") &&
          !strstr(err, "NO TARGET"), "exit %d: %s", rc, err);
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 ./train_sft -i %s -e d1c16h2t24 -b 1 -t 24 -x 3 -o %s/kept", data, tmp_root);
    rc = run(cmd, err, sizeof err);
    check("no_lost_targets_no_warning", rc == 0 && !strstr(err, "warning"), "exit %d: %s", rc, err);
}

// The memory plan: hand-made terms, then a run whose activations cannot fit anywhere.
static void test_memory_plan(void) {
    MemTerm t[3] = {{"a", 10, ""}, {"b", 30, ""}, {"c", 20, ""}};
    int over = memory_plan_overflow(t, 3, 59), fits = memory_plan_overflow(t, 3, 60), unknown = memory_plan_overflow(t, 3, -1);
    check("memory_plan_names_largest_term", over == 1 && fits == -1 && unknown == -1, "59 -> %d (expected 1), 60 -> %d, unknown -> %d", over, fits,
          unknown);
    // 8 layers x 16384 rows x 8 heads x 1024^2 attention floats: 4.4 TB
    expect_bad("memory_plan", "-i " REF_DATA " -e d8c64h8t1024 -b 16384 -t 1024", "the largest term is activations: lower -b");
}

// Data parallel (train/dist.h): rank, world and local rank from the flags and the
// launchers' environments in their order of precedence; the work split helpers.
static void test_dist_discovery(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS",
                          "SLURM_LOCALID", "SLURM_STEP_ID", "SLURM_STEPID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "PET_NPROC_PER_NODE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    TrainArgs a;
    Dist d;
#define DISCOVER(r, w, l, z) (train_args_defaults(&a), a.rank = (r), a.world = (w), a.local_rank = (l), a.zero = (z), dist_discover(&d, "test", &a))
#define IS(launcher_, rank_, world_, local_, zero_) \
    (!strcmp(d.launcher, launcher_) && d.rank == (rank_) && d.world == (world_) && d.local_rank == (local_) && d.zero == (zero_))
#define SHOW "got %s rank %d of %d, local %d, ZeRO %d", d.launcher, d.rank, d.world, d.local_rank, d.zero
    DISCOVER(-1, -1, -1, -1);
    check("dist_single_process", IS("single", 0, 1, 0, 0) && a.world == 1 && a.zero == 0, SHOW);
    setenv("RANK", "6", 1); setenv("WORLD_SIZE", "8", 1);
    DISCOVER(-1, -1, -1, -1);
    check("dist_pytorchjob_one_per_pod", IS("torchrun", 6, 8, 0, 1), SHOW);
    setenv("PET_NPROC_PER_NODE", "auto", 1);  // the training operator's default
    DISCOVER(-1, -1, -1, -1);
    check("dist_pytorchjob_nproc_auto", IS("torchrun", 6, 8, 0, 1), SHOW);
    setenv("PET_NPROC_PER_NODE", "4", 1);
    DISCOVER(-1, -1, -1, -1);
    check("dist_pytorchjob_local_from_nproc", IS("torchrun", 6, 8, 2, 1), SHOW);
    setenv("LOCAL_RANK", "1", 1);
    DISCOVER(-1, -1, -1, -1);
    check("dist_torchrun", IS("torchrun", 6, 8, 1, 1), SHOW);
    setenv("SLURM_PROCID", "3", 1); setenv("SLURM_NTASKS", "4", 1); setenv("SLURM_LOCALID", "3", 1);
    DISCOVER(-1, -1, -1, -1);
    check("dist_slurm_batch_script_is_not_a_step", IS("torchrun", 6, 8, 1, 1), SHOW);
    setenv("SLURM_STEP_ID", "0", 1);
    DISCOVER(-1, -1, -1, -1);
    check("dist_srun_before_torchrun", IS("srun", 3, 4, 3, 1), SHOW);
    setenv("OMPI_COMM_WORLD_RANK", "1", 1); setenv("OMPI_COMM_WORLD_SIZE", "2", 1); setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
    DISCOVER(-1, -1, -1, 0);
    check("dist_mpirun_first", IS("mpirun", 1, 2, 0, 0), SHOW);
    DISCOVER(0, 3, -1, -1);
    check("dist_flags_override", IS("flags", 0, 3, 0, 1) && a.rank == 0 && a.world == 3, SHOW);
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    DISCOVER(2, 4, -1, -1);
    check("dist_flags_local_rank_defaults_to_rank", IS("flags", 2, 4, 2, 1), SHOW);
    DISCOVER(2, 4, 0, -1);
    check("dist_flags_local_rank", IS("flags", 2, 4, 0, 1), SHOW);
#undef DISCOVER
#undef IS
#undef SHOW
    // A = 3 micro-batches per rank, W = 2: rank 1 computes 3, 4, 5; validation is dealt 1, 3, 5, ...
    Dist r1;
    memset(&r1, 0, sizeof r1);
    r1.rank = 1; r1.world = 2;
    int mine = 0, val = 0;
    for (int k = 0; k < 6; k++) mine |= dist_owns_microbatch(r1.rank, 3, k) << k;
    for (int k = 0; k < 6; k++) val |= dist_owns_val_batch(r1.rank, r1.world, k) << k;
    check("dist_microbatch_blocks", mine == 0x38 && val == 0x2a, "rank 1 owns micro-batch mask %#x, validation mask %#x", mine, val);
    check("dist_shard_size", dist_shard_size(7, 2) == 4 && dist_shard_size(8, 2) == 4 && dist_shard_size(5, 1) == 5, "shards %zu %zu %zu",
          dist_shard_size(7, 2), dist_shard_size(8, 2), dist_shard_size(5, 1));
}

// The step numbers of the lines "step N/TOTAL ..." in the text, as " N N ... ".
static void step_line_numbers(const char *text, int total, char *out, size_t n) {
    char want[32];
    size_t len = 0;
    out[0] = 0;
    int k = snprintf(want, sizeof want, "/%d ", total);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        int step;
        char slash[32];
        if (sscanf(p, "step %d%31s", &step, slash) == 2 && !strncmp(slash, want, (size_t)k - 1))
            len += (size_t)snprintf(out + len, len < n ? n - len : 0, " %d", step);
    }
}

// Issue 33, rule 19: a skipped step (no targets, or a NaN loss or gradient) prints its
// step line whatever the cadence: -L 4, and -L 0 past the first 10 steps where it prints
// every 2nd step; and on a terminal the skipped step's line stays (ends with a newline)
// instead of being redrawn over by the next step's. The data: 20 documents of T = 16
// tokens, one per step (-b 1 -S 0), the 13th without targets, so steps 13, 33, 53, ...
// have none; the test hook makes step 15's gradient NaN. The expected lines are worked
// from the rule as docs/training.md states it.
static void test_skipped_step_lines(void) {
    char path[512], cmd[2048], out[600], log[700], got[1024], want[1024];
    snprintf(path, sizeof path, "%s/skips.bin", tmp_root);
    int lens[20];
    uint32_t toks[320];
    uint8_t mask[320];
    for (int i = 0; i < 320; i++) { toks[i] = (uint32_t)(i * 11 % 61); mask[i] = i / 16 != 12 && i % 16 >= 4; }
    for (int d = 0; d < 20; d++) lens[d] = 16;
    write_docs(path, 61, 20, lens, toks, mask);
    struct { const char *name, *flags; int steps, every, first; } cases[] = {
        {"skipped_steps_printed_with_L_4", "-L 4", 40, 4, 0},
        {"skipped_steps_printed_with_L_0", "-L 0", 120, 2, 10},  // ceil(120 / 100) = 2
    };
    for (int c = 0; c < 2; c++) {
        snprintf(out, sizeof out, "%s/skips%d", tmp_root, c);
        snprintf(log, sizeof log, "%s.log", out);
        snprintf(cmd, sizeof cmd, "SFT_TEST_POISON=grad:15 OMP_NUM_THREADS=1 ./train_sft -i %s -e d1c16h2t16 -b 1 -t 16 -S 0 -n -1 -x %d %s -o %s > %s 2>&1",
                 path, cases[c].steps, cases[c].flags, out, log);
        int rc = system(cmd);
        char *text = read_text(log);
        step_line_numbers(text, cases[c].steps, got, sizeof got);
        size_t len = 0;
        for (int s = 1; s <= cases[c].steps; s++)
            if (s <= cases[c].first || s % cases[c].every == 0 || s == cases[c].steps || s % 20 == 13 || s == 15)
                len += (size_t)snprintf(want + len, sizeof want - len, " %d", s);
        int skips = text && strstr(text, "step 13/") && strstr(strstr(text, "step 13/"), "| skipped: no targets") && strstr(text, "step 15/") &&
                    strstr(strstr(text, "step 15/"), "| skipped: non-finite");
        check(cases[c].name, rc == 0 && skips && !strcmp(got, want), "exit %d; step lines%s, expected%s", rc, got, want);
        free(text);
    }
    // on a terminal (script(1) gives the run one)
    if (system("script -qec true /dev/null > /dev/null 2>&1") != 0) {
        printf("skip skipped_step_line_stays_on_terminal: script(1) cannot run a command on a pseudo-terminal here\n");
        return;
    }
    snprintf(out, sizeof out, "%s/skips_tty", tmp_root);
    snprintf(log, sizeof log, "%s.log", out);
    snprintf(cmd, sizeof cmd, "SFT_TEST_POISON=grad:15 script -qec 'stty cols 200; ./train_sft -i %s -e d1c16h2t16 -b 1 -t 16 -S 0 -n -1 -x 16 -o %s' "
             "/dev/null > %s 2>&1", path, out, log);
    int rc = system(cmd);
    char *text = read_text(log);
    // each skipped step's line, erased to the end (ESC [K), then a newline (\r\n on a terminal)
    const char *s13 = text ? strstr(text, "step 13/16 | skipped: no targets") : NULL, *s15 = text ? strstr(text, "step 15/16 | skipped: non-finite") : NULL;
    const char *e13 = s13 ? strpbrk(s13, "\r\033") : NULL, *e15 = s15 ? strpbrk(s15, "\r\033") : NULL;
    int ok13 = e13 && (!strncmp(e13, "\033[K\r\n", 5) || !strncmp(e13, "\r\n", 2)), ok15 = e15 && (!strncmp(e15, "\033[K\r\n", 5) || !strncmp(e15, "\r\n", 2));
    check("skipped_step_line_stays_on_terminal", rc == 0 && ok13 && ok15, "exit %d; step 13's line ends %s, step 15's %s (a newline keeps it)", rc,
          !s13 ? "(missing)" : ok13 ? "with a newline" : "without a newline: the next step draws over it", !s15 ? "(missing)" : ok15 ? "with a newline" : "without");
    free(text);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(tmp_root, sizeof tmp_root, "/tmp/test_sft.%d", (int)getpid());
    if (make_dirs(tmp_root) != 0) fatal("%s: cannot create test directory", tmp_root);
    if (!path_exists("./train_sft")) fatal("./train_sft not found: run from the repository root after make train_sft");
    st_open(&expect, REF_EXPECT);
    test_gemm();
    test_gemm_bitwise();
    test_dot_lanes();
    test_sum_squares_lanes();
    test_exp_vec();
    test_rope_rules();
    test_window_attention();
    test_attention_bitwise();
    test_reference_forward_backward("", REF_MODEL, 0);
    test_reference_training("", REF_MODEL);
    test_llama_references();
    test_import_variants();
    test_packed_equals_unpacked(0);
    test_packed_equals_unpacked(1);
    test_accumulation_equivalence();
    test_token_metrics();
    test_steps_without_targets();
    test_loader_rules();
    test_positions_mid_row();
    test_best_fit_rules();
    test_hf_round_trip();
    test_checkpoint_atomic();
    test_vocab_growth();
    test_kv_cache_decode();
    // best-fit packing rides on the Qwen2 resume and the Llama thread runs, so that it costs no run of its own
    test_resume_bit_identical("", "d2c16h2t24", "");
    test_resume_bit_identical("llama_", "l2c32h4k2f48ut24", "");  // untied head, grouped-query
    test_resume_bit_identical("qwen2_bfd_", "l2c32h4k1bt24", "--packing_strategy bfd");  // q/k/v biases
    test_resume_bit_identical("gemma3_", "l3c32h4k2a16gw5p3t24", "");  // every Gemma 3 feature; the export's layer_types
    test_thread_count_independent("", "d2c32h2t24", "");
    test_thread_count_independent("llama_bfd_", "l2c32h4k2t24", "--packing_strategy bfd");
    test_thread_count_independent("gemma3_", "l3c32h4k2a16gw5p3t24", "");
    test_shuffle_orders();
    test_validation_reference();
    test_resume_sampling();
    test_bad_inputs();
    test_vocab_consistency();
    test_chat_format_from_data();
    test_nonfinite_step_skipped();
    test_nonfinite_guard_run();
    test_skipped_step_lines();
    test_checkpoint_never_nonfinite();
    test_state_model_fields();
    test_lost_targets_and_nothing_trained();
    test_memory_plan();
    test_dist_discovery();
    st_close(&expect);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_root);
    if (failures == 0 && system(cmd) != 0) printf("note: could not remove %s\n", tmp_root);
    printf("test_sft: %d failed\n", failures);
    return failures ? 1 : 0;
}
