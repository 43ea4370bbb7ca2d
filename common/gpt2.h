// gpt2.h: the GPT-2 model description shared by the CPU and CUDA trainers:
// configuration, the parameter layout (one allocation), fresh initialization,
// and Hugging Face import/export (config.json + model.safetensors).
//
// Parameters are stored in Hugging Face's layout so import and export are plain
// copies: Conv1D weights are [in, out], per-layer tensors are stacked over layers.
//   wte (V, C)  wpe (maxT, C)  ln1w, ln1b (L, C)  qkvw (L, C, 3C)  qkvb (L, 3C)
//   attprojw (L, C, C)  attprojb (L, C)  ln2w, ln2b (L, C)  fcw (L, C, 4C)
//   fcb (L, 4C)  fcprojw (L, 4C, C)  fcprojb (L, C)  lnfw, lnfb (C)
#ifndef SFT_GPT2_H
#define SFT_GPT2_H

#include <ctype.h>
#include <math.h>
#include "json.h"
#include "rng.h"
#include "safetensors.h"
#include "util.h"

typedef struct {
    int L;       // layers
    int NH;      // attention heads
    int C;       // channels
    int V;       // vocabulary size
    int maxT;    // context length (positions)
    float eps;   // LayerNorm epsilon
} GPT2Config;

enum { P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB, P_LN2W, P_LN2B,
       P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB, NUM_PARAM_TENSORS };

typedef union {
    struct {
        float *wte, *wpe, *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b,
              *fcw, *fcb, *fcprojw, *fcprojb, *lnfw, *lnfb;
    };
    float *t[NUM_PARAM_TENSORS];
} ParamTensors;

// Per tensor: Hugging Face name (with %d for the layer), whether it is stacked over
// layers, whether AdamW decays it (matrices and embeddings only), and its one-layer
// shape in units of (V, maxT, C): shape[d] = a*C + b*V + c*maxT, encoded below.
typedef struct { const char *hf_name; int per_layer; int decay; int ndim; int dims[2][3]; } ParamInfo;
// dims[d] = {multiple of C, multiple of V, multiple of maxT}
static const ParamInfo PARAM_INFO[NUM_PARAM_TENSORS] = {
    {"wte.weight", 0, 1, 2, {{0, 1, 0}, {1, 0, 0}}},
    {"wpe.weight", 0, 1, 2, {{0, 0, 1}, {1, 0, 0}}},
    {"h.%d.ln_1.weight", 1, 0, 1, {{1, 0, 0}}},
    {"h.%d.ln_1.bias", 1, 0, 1, {{1, 0, 0}}},
    {"h.%d.attn.c_attn.weight", 1, 1, 2, {{1, 0, 0}, {3, 0, 0}}},
    {"h.%d.attn.c_attn.bias", 1, 0, 1, {{3, 0, 0}}},
    {"h.%d.attn.c_proj.weight", 1, 1, 2, {{1, 0, 0}, {1, 0, 0}}},
    {"h.%d.attn.c_proj.bias", 1, 0, 1, {{1, 0, 0}}},
    {"h.%d.ln_2.weight", 1, 0, 1, {{1, 0, 0}}},
    {"h.%d.ln_2.bias", 1, 0, 1, {{1, 0, 0}}},
    {"h.%d.mlp.c_fc.weight", 1, 1, 2, {{1, 0, 0}, {4, 0, 0}}},
    {"h.%d.mlp.c_fc.bias", 1, 0, 1, {{4, 0, 0}}},
    {"h.%d.mlp.c_proj.weight", 1, 1, 2, {{4, 0, 0}, {1, 0, 0}}},
    {"h.%d.mlp.c_proj.bias", 1, 0, 1, {{1, 0, 0}}},
    {"ln_f.weight", 0, 0, 1, {{1, 0, 0}}},
    {"ln_f.bias", 0, 0, 1, {{1, 0, 0}}},
};

// Shape of one layer's slice of tensor i (or of the whole tensor if not stacked).
static int64_t param_slice_shape(const GPT2Config *cfg, int i, int64_t shape[2]) {
    int64_t numel = 1;
    for (int d = 0; d < PARAM_INFO[i].ndim; d++) {
        const int *m = PARAM_INFO[i].dims[d];
        shape[d] = (int64_t)m[0] * cfg->C + (int64_t)m[1] * cfg->V + (int64_t)m[2] * cfg->maxT;
        numel *= shape[d];
    }
    return numel;
}

static size_t param_numel(const GPT2Config *cfg, int i) {
    int64_t shape[2];
    return (size_t)param_slice_shape(cfg, i, shape) * (PARAM_INFO[i].per_layer ? (size_t)cfg->L : 1);
}

static size_t gpt2_num_parameters(const GPT2Config *cfg) {
    size_t n = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) n += param_numel(cfg, i);
    return n;
}

// Points the tensors into one block of gpt2_num_parameters floats.
static void param_pointers(const GPT2Config *cfg, float *mem, ParamTensors *p) {
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) { p->t[i] = mem; mem += param_numel(cfg, i); }
}

static void gpt2_check_config(const GPT2Config *c, const char *what) {
    if (c->L < 1 || c->NH < 1 || c->C < 1 || c->V < 1 || c->maxT < 1)
        fatal("%s: model sizes must be positive (layers %d, heads %d, channels %d, vocab %d, context %d)", what, c->L, c->NH, c->C, c->V, c->maxT);
    if (c->C % c->NH) fatal("%s: %d channels do not divide into %d heads", what, c->C, c->NH);
    if (c->L > 1000 || c->C > 1 << 16 || c->maxT > 1 << 20 || (c->NH > c->C))
        fatal("%s: model sizes out of range (layers %d, heads %d, channels %d, context %d)", what, c->L, c->NH, c->C, c->maxT);
    if (!(c->eps > 0 && c->eps < 1)) fatal("%s: layer_norm_epsilon %g out of range", what, c->eps);
}

// Size descriptor "dN" = N layers, 64*N channels, N heads (head size 64), context
// 1024; optional suffixes override: c<channels> h<heads> t<context>, e.g. d4c256h4t512.
// Returns 0 if desc is a descriptor, -1 if it is not one.
static int gpt2_parse_descriptor(const char *desc, GPT2Config *cfg) {
    if (desc[0] != 'd' || !isdigit((unsigned char)desc[1])) return -1;
    const char *p = desc + 1;
    char *end;
    long L = strtol(p, &end, 10);
    long C = 64 * L, NH = L, T = 1024;
    p = end;
    while (*p) {
        char key = *p++;
        if (!isdigit((unsigned char)*p)) return -1;
        long v = strtol(p, &end, 10);
        p = end;
        if (key == 'c') C = v;
        else if (key == 'h') NH = v;
        else if (key == 't') T = v;
        else return -1;
    }
    if (L < 1 || L > 1000 || C < 1 || C > 65536 || NH < 1 || NH > C || T < 1 || T > 1 << 20) return -1;
    cfg->L = (int)L; cfg->C = (int)C; cfg->NH = (int)NH; cfg->maxT = (int)T; cfg->eps = 1e-5f;
    return 0;
}

// Fresh initialization: weights normal(0, 0.02), the two residual projections of
// each layer normal(0, 0.02/sqrt(2L)), biases 0, LayerNorm scales 1. Deterministic in seed.
static void gpt2_init_random(const GPT2Config *cfg, ParamTensors *p, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    float resid_std = 0.02f / sqrtf(2.0f * (float)cfg->L);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        size_t n = param_numel(cfg, i);
        float *t = p->t[i];
        if (i == P_LN1W || i == P_LN2W || i == P_LNFW) { for (size_t k = 0; k < n; k++) t[k] = 1.0f; }
        else if (!PARAM_INFO[i].decay) memset(t, 0, n * sizeof(float));
        else {
            float std = (i == P_ATTPROJW || i == P_FCPROJW) ? resid_std : 0.02f;
            for (size_t k = 0; k < n; k++) t[k] = std * rng_normal(&r);
        }
    }
}

// Grows the vocabulary to new_V (chat tokens added to a pretrained model's
// tokenizer): rows V..new_V-1 of the tied embedding start as the mean of the
// existing rows, so new tokens begin as an "average" token. Reallocates *mem.
static void gpt2_grow_vocab(GPT2Config *cfg, float **mem, ParamTensors *p, int new_V) {
    GPT2Config grown = *cfg;
    grown.V = new_V;
    float *nm = (float *)xmalloc(gpt2_num_parameters(&grown) * sizeof(float));
    ParamTensors np;
    param_pointers(&grown, nm, &np);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) memcpy(np.t[i], p->t[i], param_numel(cfg, i) * sizeof(float));
    int C = cfg->C;
    for (int c = 0; c < C; c++) {
        double sum = 0.0;
        for (int v = 0; v < cfg->V; v++) sum += p->wte[(size_t)v * C + c];
        float mean = (float)(sum / cfg->V);
        for (int v = cfg->V; v < new_V; v++) np.wte[(size_t)v * C + c] = mean;
    }
    free(*mem);
    *mem = nm;
    *p = np;
    *cfg = grown;
}

// ---- Hugging Face import ----

static int json_field_int(const JsonValue *root, const char *key, const char *path, int required, int fallback) {
    const JsonValue *v = json_get(root, key);
    if (!v) {
        if (required) fatal("%s: missing field \"%s\"", path, key);
        return fallback;
    }
    int64_t x;
    if (json_int64(v, &x) != 0 || x < 0 || x > INT32_MAX) fatal("%s: field \"%s\" must be a non-negative integer", path, key);
    return (int)x;
}

// Reads a config.json's text[0..len) (path names it in errors).
static void gpt2_parse_hf_config(const char *path, const char *text, size_t len, GPT2Config *cfg) {
    JsonDoc doc;
    if (json_parse(text, len, &doc) != 0) fatal("%s: invalid JSON: %s", path, doc.error);
    if (doc.root->type != JSON_OBJECT) fatal("%s: expected a JSON object", path);
    const JsonValue *mt = json_get(doc.root, "model_type");
    if (mt && (mt->type != JSON_STRING || strcmp(mt->string, "gpt2") != 0))
        fatal("%s: model_type is not \"gpt2\"; only GPT-2 models are supported", path);
    const JsonValue *act = json_get(doc.root, "activation_function");
    if (act && (act->type != JSON_STRING || strcmp(act->string, "gelu_new") != 0))
        fatal("%s: activation_function must be \"gelu_new\" (tanh-approximated GELU)", path);
    const JsonValue *inner = json_get(doc.root, "n_inner");
    cfg->C = json_field_int(doc.root, "n_embd", path, 1, 0);
    if (inner && inner->type != JSON_NULL && json_field_int(doc.root, "n_inner", path, 1, 0) != 4 * cfg->C)
        fatal("%s: n_inner must be null or 4*n_embd", path);
    cfg->NH = json_field_int(doc.root, "n_head", path, 1, 0);
    cfg->L = json_field_int(doc.root, "n_layer", path, 1, 0);
    cfg->maxT = json_field_int(doc.root, "n_positions", path, 1, 0);
    cfg->V = json_field_int(doc.root, "vocab_size", path, 1, 0);
    const JsonValue *eps = json_get(doc.root, "layer_norm_epsilon");
    if (!eps) fatal("%s: missing field \"layer_norm_epsilon\"", path);
    if (eps->type != JSON_NUMBER) fatal("%s: field \"layer_norm_epsilon\" must be a number", path);
    cfg->eps = (float)eps->number;
    json_free(&doc);
    gpt2_check_config(cfg, path);
}

static void gpt2_read_hf_config(const char *dir, GPT2Config *cfg) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len;
    char *text = read_whole_file(path, &len);
    gpt2_parse_hf_config(path, text, len, cfg);
    free(text);
}

// Layer l's slice of parameter tensor i in st, checked against the shape cfg implies.
static const StTensor *gpt2_hf_tensor(const SafeTensors *st, const GPT2Config *cfg, int i, int l) {
    int64_t shape[2];
    param_slice_shape(cfg, i, shape);
    char name[256], prefixed[300];
    snprintf(name, sizeof name, PARAM_INFO[i].hf_name, l);
    snprintf(prefixed, sizeof prefixed, "transformer.%s", name);
    const StTensor *t = st_find(st, prefixed);
    if (!t) t = st_find(st, name);
    if (!t) fatal("%s: missing tensor %s", st->path, prefixed);
    int ok = t->ndim == PARAM_INFO[i].ndim;
    for (int d = 0; ok && d < t->ndim; d++) ok = t->shape[d] == shape[d];
    if (!ok) {
        char got[128] = "", want[128] = "";
        for (int d = 0; d < t->ndim; d++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        for (int d = 0; d < PARAM_INFO[i].ndim; d++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "", (long long)shape[d]);
        fatal("%s: tensor %s has shape [%s], expected [%s] from config.json", st->path, t->name, got, want);
    }
    return t;
}

// Loads a Hugging Face GPT-2 directory: config.json + model.safetensors. Names may
// carry the "transformer." prefix or not; attn.bias / attn.masked_bias buffers are
// ignored; an lm_head.weight must equal wte (the output embedding is tied).
// Allocates *mem (gpt2_num_parameters floats) only once every tensor is found with
// its shape, so the parameters take at most twice the file's size (tensors do not
// overlap; F16/BF16 widen to fp32), however large a model config.json describes.
// gpt2_load_hf_opened is the second half: the parameters of the model cfg describes,
// from an opened model.safetensors (closed here).
static void gpt2_load_hf_opened(SafeTensors *st, const GPT2Config *cfg, float **mem, ParamTensors *p) {
    const char *path = st->path;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++)
        for (int l = 0; l < (PARAM_INFO[i].per_layer ? cfg->L : 1); l++) gpt2_hf_tensor(st, cfg, i, l);
    *mem = (float *)xmalloc(gpt2_num_parameters(cfg) * sizeof(float));
    param_pointers(cfg, *mem, p);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        int64_t shape[2];
        size_t numel = (size_t)param_slice_shape(cfg, i, shape);
        for (int l = 0; l < (PARAM_INFO[i].per_layer ? cfg->L : 1); l++) st_read_f32(st, gpt2_hf_tensor(st, cfg, i, l), p->t[i] + (size_t)l * numel);
    }
    const StTensor *head = st_find(st, "lm_head.weight");
    if (head) {
        size_t n = (size_t)cfg->V * cfg->C;
        if (head->ndim != 2 || head->shape[0] != cfg->V || head->shape[1] != cfg->C)
            fatal("%s: tensor lm_head.weight has the wrong shape (expected [%d, %d])", path, cfg->V, cfg->C);
        float *tmp = (float *)xmalloc(n * sizeof(float));
        st_read_f32(st, head, tmp);
        if (memcmp(tmp, p->wte, n * sizeof(float)) != 0)
            fatal("%s: lm_head.weight differs from wte.weight; untied output embeddings are not supported", path);
        free(tmp);
    }
    st_close(st);
}

static void gpt2_load_hf(const char *dir, GPT2Config *cfg, float **mem, ParamTensors *p) {
    gpt2_read_hf_config(dir, cfg);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    SafeTensors st;
    st_open(&st, path);
    gpt2_load_hf_opened(&st, cfg, mem, p);
}

// ---- Hugging Face export: config.json + model.safetensors (F32, "transformer."
// names as GPT2LMHeadModel.save_pretrained writes them; lm_head is tied, not stored).
static void gpt2_save_hf(const char *dir, const GPT2Config *cfg, const ParamTensors *p) {
    char path[4096], json[2048];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int n = snprintf(json, sizeof json,
        "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
        "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n"
        "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": null,\n  \"layer_norm_epsilon\": %.9g,\n"
        "  \"activation_function\": \"gelu_new\",\n  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n"
        "  \"attn_pdrop\": 0.0,\n  \"initializer_range\": 0.02,\n  \"tie_word_embeddings\": true,\n"
        "  \"torch_dtype\": \"float32\"\n}\n",
        cfg->V, cfg->maxT, cfg->maxT, cfg->C, cfg->L, cfg->NH, (double)cfg->eps);
    write_file_atomic(path, json, (size_t)n);
    int count = 0, cap = NUM_PARAM_TENSORS * cfg->L;
    StOut *outs = (StOut *)xcalloc((size_t)cap, sizeof(StOut));
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        int64_t shape[2];
        int64_t numel = param_slice_shape(cfg, i, shape);
        int layers = PARAM_INFO[i].per_layer ? cfg->L : 1;
        for (int l = 0; l < layers; l++) {
            StOut *o = &outs[count++];
            char name[200];
            snprintf(name, sizeof name, PARAM_INFO[i].hf_name, l);
            snprintf(o->name, sizeof o->name, "transformer.%s", name);
            o->ndim = PARAM_INFO[i].ndim;
            o->shape[0] = shape[0]; o->shape[1] = shape[1];
            o->data = p->t[i] + (size_t)l * (size_t)numel;
        }
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_write_f32(path, outs, count);
    free(outs);
}

#endif
