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

// Model families. GPT-2 is the teaching model; Llama and Qwen2 (as transformers'
// LlamaForCausalLM and Qwen2ForCausalLM compute them) share one block layout:
//   GPT-2:  x += attproj(attention(qkv(LayerNorm1(x))));  x += fcproj(gelu(fc(LayerNorm2(x))))
//           learned positions (wpe) added to the token embedding; biases everywhere;
//           output head tied to wte.
//   Llama:  x += o_proj(attention(rope(qkv(RMSNorm1(x)))));  x += down(silu(gate(x')) * up(x'))
//           with x' = RMSNorm2(x); rotary positions on q and k; grouped-query attention
//           (KVH <= NH key/value heads); no biases (Qwen2: q, k, v biases); output head
//           tied to wte or its own lm_head.
enum { FAMILY_GPT2, FAMILY_LLAMA, FAMILY_QWEN2 };

typedef struct {
    int family;  // FAMILY_GPT2, FAMILY_LLAMA or FAMILY_QWEN2
    int L;       // layers
    int NH;      // attention (query) heads
    int C;       // channels
    int V;       // vocabulary size
    int maxT;    // context length (positions)
    float eps;   // LayerNorm (GPT-2) or RMSNorm (Llama, Qwen2) epsilon
    int KVH;     // key/value heads: NH for GPT-2; divides NH (grouped-query attention)
    int HS;      // head size: C / NH for GPT-2; head_dim for Llama, Qwen2
    int FF;      // MLP hidden width: 4C for GPT-2; intermediate_size for Llama, Qwen2
    int qkv_bias;  // q, k, v have biases: GPT-2 and Qwen2 1, Llama 0
    int tied;      // output head is wte (1) or the lm_head tensor (0); GPT-2 always 1
    float rope_theta;  // rotary base: inv_freq[i] = rope_theta^(-2i/HS), i < HS/2 (Llama, Qwen2)
    // Llama 3's rope_scaling (rope_type "llama3"); rope_factor 0 = no scaling
    float rope_factor, rope_low_freq, rope_high_freq;  // factor, low_freq_factor, high_freq_factor
    int rope_orig_maxT;                                  // original_max_position_embeddings
    int bos_id, eos_id;  // config.json's bos/eos_token_id, -1 if absent (written back on export)
} GPT2Config;

static int is_llama_family(const GPT2Config *c) { return c->family != FAMILY_GPT2; }
// Width of the fused q|k|v projection: NH query heads, then KVH key and KVH value heads.
static int qkv_width(const GPT2Config *c) { return (c->NH + 2 * c->KVH) * c->HS; }

// The parameter tensors, in the order of the one allocation. A tensor a family does
// not have has 0 elements (Llama: wpe, every bias but Qwen2's qkvb, the LN biases;
// lm_head unless untied). Roles are the same in both families:
enum { P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB, P_LN2W, P_LN2B,
       P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB, P_LMHEAD, NUM_PARAM_TENSORS };

typedef union {
    struct {
        float *wte, *wpe, *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b,
              *fcw, *fcb, *fcprojw, *fcprojb, *lnfw, *lnfb, *lmhead;
    };
    float *t[NUM_PARAM_TENSORS];
} ParamTensors;

// Shapes of one layer's slice, (rows, cols). GPT-2 stores its Conv1D weights as
// [in, out]; Llama and Qwen2 store nn.Linear weights as [out, in], so y = x W^T.
// Import and export stay plain copies: Llama's q_proj, k_proj, v_proj are stacked
// along their out dimension into qkvw (and their biases into qkvb), gate_proj and
// up_proj into fcw; rows of [out, in] tensors are contiguous, so stacking is
// concatenation.
//            GPT-2                      Llama / Qwen2
//   wte      (V, C)                     (V, C)        model.embed_tokens.weight
//   wpe      (maxT, C)                  -
//   ln1w     (L, C)  ln1b (L, C)        (L, C)        input_layernorm.weight; no ln1b
//   qkvw     (L, C, 3C)                 (L, QKV, C)   q_proj|k_proj|v_proj, QKV = (NH + 2 KVH) HS
//   qkvb     (L, 3C)                    (L, QKV)      Qwen2's q|k|v biases; Llama none
//   attprojw (L, C, C)                  (L, C, NH HS) o_proj
//   attprojb (L, C)                     -
//   ln2w     (L, C)  ln2b (L, C)        (L, C)        post_attention_layernorm.weight
//   fcw      (L, C, 4C)                 (L, 2FF, C)   gate_proj|up_proj
//   fcb      (L, 4C)                    -
//   fcprojw  (L, 4C, C)                 (L, C, FF)    down_proj
//   fcprojb  (L, C)                     -
//   lnfw     (C)     lnfb (C)           (C)           model.norm.weight
//   lmhead   -                          (V, C)        lm_head.weight, when untied
// per_layer: stacked over layers; decay: AdamW decays it (matrices and embeddings).
typedef struct { const char *hf_name; int per_layer; int decay; } ParamInfo;
static const ParamInfo PARAM_INFO[NUM_PARAM_TENSORS] = {
    {"wte.weight", 0, 1},            {"wpe.weight", 0, 1},
    {"h.%d.ln_1.weight", 1, 0},      {"h.%d.ln_1.bias", 1, 0},
    {"h.%d.attn.c_attn.weight", 1, 1}, {"h.%d.attn.c_attn.bias", 1, 0},
    {"h.%d.attn.c_proj.weight", 1, 1}, {"h.%d.attn.c_proj.bias", 1, 0},
    {"h.%d.ln_2.weight", 1, 0},      {"h.%d.ln_2.bias", 1, 0},
    {"h.%d.mlp.c_fc.weight", 1, 1},  {"h.%d.mlp.c_fc.bias", 1, 0},
    {"h.%d.mlp.c_proj.weight", 1, 1}, {"h.%d.mlp.c_proj.bias", 1, 0},
    {"ln_f.weight", 0, 0},           {"ln_f.bias", 0, 0},
    {"lm_head.weight", 0, 1},
};

// Shape of one layer's slice of tensor i (or of the whole tensor if not stacked);
// returns its element count (0: the family has no such tensor). 1-D tensors have shape[1] = 1.
static int64_t param_slice_shape(const GPT2Config *c, int i, int64_t shape[2]) {
    int64_t C = c->C, V = c->V, QKV = qkv_width(c), A = (int64_t)c->NH * c->HS, FF = c->FF;
    int llama = is_llama_family(c);
    int64_t r = 0, k = 1;
    switch (i) {
    case P_WTE: r = V; k = C; break;
    case P_WPE: if (!llama) { r = c->maxT; k = C; } break;
    case P_LN1W: case P_LN2W: case P_LNFW: r = C; break;
    case P_LN1B: case P_LN2B: case P_LNFB: case P_ATTPROJB: case P_FCPROJB: if (!llama) r = C; break;
    case P_QKVW: if (llama) { r = QKV; k = C; } else { r = C; k = QKV; } break;
    case P_QKVB: if (c->qkv_bias) r = QKV; break;
    case P_ATTPROJW: if (llama) { r = C; k = A; } else { r = A; k = C; } break;
    case P_FCW: if (llama) { r = 2 * FF; k = C; } else { r = C; k = FF; } break;
    case P_FCB: if (!llama) r = FF; break;
    case P_FCPROJW: if (llama) { r = C; k = FF; } else { r = FF; k = C; } break;
    case P_LMHEAD: if (!c->tied) { r = V; k = C; } break;
    }
    shape[0] = r; shape[1] = k;
    return r * k;
}

// Transformers' tensor names of tensor i's slice: up to 3 parts stacked along dim 0
// (Llama's q|k|v and gate|up), each a printf format with %d for the layer and its
// number of rows. Returns the number of parts (0 for an absent tensor).
typedef struct { const char *name; int64_t rows; } HfPart;
static int param_hf_parts(const GPT2Config *c, int i, HfPart parts[3]) {
    int64_t shape[2];
    if (param_slice_shape(c, i, shape) == 0) return 0;
    if (!is_llama_family(c)) { parts[0].name = PARAM_INFO[i].hf_name; parts[0].rows = shape[0]; return 1; }
    int64_t q = (int64_t)c->NH * c->HS, kv = (int64_t)c->KVH * c->HS;
    switch (i) {
    case P_WTE: parts[0] = (HfPart){"model.embed_tokens.weight", shape[0]}; return 1;
    case P_LN1W: parts[0] = (HfPart){"model.layers.%d.input_layernorm.weight", shape[0]}; return 1;
    case P_QKVW:
        parts[0] = (HfPart){"model.layers.%d.self_attn.q_proj.weight", q};
        parts[1] = (HfPart){"model.layers.%d.self_attn.k_proj.weight", kv};
        parts[2] = (HfPart){"model.layers.%d.self_attn.v_proj.weight", kv};
        return 3;
    case P_QKVB:
        parts[0] = (HfPart){"model.layers.%d.self_attn.q_proj.bias", q};
        parts[1] = (HfPart){"model.layers.%d.self_attn.k_proj.bias", kv};
        parts[2] = (HfPart){"model.layers.%d.self_attn.v_proj.bias", kv};
        return 3;
    case P_ATTPROJW: parts[0] = (HfPart){"model.layers.%d.self_attn.o_proj.weight", shape[0]}; return 1;
    case P_LN2W: parts[0] = (HfPart){"model.layers.%d.post_attention_layernorm.weight", shape[0]}; return 1;
    case P_FCW:
        parts[0] = (HfPart){"model.layers.%d.mlp.gate_proj.weight", c->FF};
        parts[1] = (HfPart){"model.layers.%d.mlp.up_proj.weight", c->FF};
        return 2;
    case P_FCPROJW: parts[0] = (HfPart){"model.layers.%d.mlp.down_proj.weight", shape[0]}; return 1;
    case P_LNFW: parts[0] = (HfPart){"model.norm.weight", shape[0]}; return 1;
    case P_LMHEAD: parts[0] = (HfPart){"lm_head.weight", shape[0]}; return 1;
    }
    return 0;
}

// Matrices and embeddings are 2-D; norm scales and biases 1-D.
static int param_ndim(int i) { return PARAM_INFO[i].decay ? 2 : 1; }

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

// The output head: wte when tied, else lm_head. (V, C) either way.
static float *output_head(const GPT2Config *c, const ParamTensors *p) { return c->tied ? p->wte : p->lmhead; }

// Rotary frequencies of a Llama-family model: out[i] = rope_theta^(-2i/HS) for
// i < HS/2 (in double, stored as float), then Llama 3's rope_scaling when
// rope_factor != 0: with wavelen = 2 pi / out[i] and the original context orig,
// wavelengths longer than orig / low_freq are divided by factor, shorter than
// orig / high_freq kept, and the band between blends the two by
// smooth = (orig / wavelen - low_freq) / (high_freq - low_freq).
static void rope_inv_freq(const GPT2Config *c, float *out /* HS/2 */) {
    const double pi = 3.14159265358979323846;
    for (int i = 0; i < c->HS / 2; i++) {
        double f = pow((double)c->rope_theta, -2.0 * i / c->HS);
        if (c->rope_factor != 0) {
            double wavelen = 2 * pi / f, orig = c->rope_orig_maxT;
            double low_wavelen = orig / c->rope_low_freq, high_wavelen = orig / c->rope_high_freq;
            if (wavelen > low_wavelen) f /= c->rope_factor;
            else if (wavelen >= high_wavelen) {
                double smooth = (orig / wavelen - c->rope_low_freq) / (c->rope_high_freq - c->rope_low_freq);
                f = (1 - smooth) * f / c->rope_factor + smooth * f;
            }
        }
        out[i] = (float)f;
    }
}

// GPT-2's derived sizes (KVH = NH, HS = C/NH, FF = 4C, biases, tied head), set by
// everything that makes a GPT-2 configuration.
static void gpt2_config_defaults(GPT2Config *c) {
    c->family = FAMILY_GPT2;
    c->KVH = c->NH; c->HS = c->NH > 0 ? c->C / c->NH : 0; c->FF = 4 * c->C;
    c->qkv_bias = 1; c->tied = 1;
    c->rope_theta = 0; c->rope_factor = 0; c->rope_low_freq = c->rope_high_freq = 0; c->rope_orig_maxT = 0;
    c->bos_id = c->eos_id = -1;
}

static void gpt2_check_config(const GPT2Config *c, const char *what) {
    if (c->L < 1 || c->NH < 1 || c->C < 1 || c->V < 1 || c->maxT < 1)
        fatal("%s: model sizes must be positive (layers %d, heads %d, channels %d, vocab %d, context %d)", what, c->L, c->NH, c->C, c->V, c->maxT);
    if (c->L > 1000 || c->C > 1 << 16 || c->maxT > 1 << 20 || (c->NH > c->C))
        fatal("%s: model sizes out of range (layers %d, heads %d, channels %d, context %d)", what, c->L, c->NH, c->C, c->maxT);
    if (!(c->eps > 0 && c->eps < 1)) fatal("%s: norm epsilon %g out of range", what, c->eps);
    if (!is_llama_family(c)) {
        if (c->C % c->NH) fatal("%s: %d channels do not divide into %d heads", what, c->C, c->NH);
        return;
    }
    if (c->KVH < 1 || c->NH % c->KVH)
        fatal("%s: %d key/value heads do not divide the %d attention heads", what, c->KVH, c->NH);
    if (c->HS < 2 || c->HS % 2 || c->HS > 1024) fatal("%s: head size %d must be even and in [2, 1024]", what, c->HS);
    if ((int64_t)c->NH * c->HS > 1 << 16 || c->FF < 1 || c->FF > 1 << 20)
        fatal("%s: model sizes out of range (heads x head size %lld, intermediate size %d)", what, (long long)c->NH * c->HS, c->FF);
    if (!(c->rope_theta > 1 && c->rope_theta < 1e12)) fatal("%s: rope_theta %g out of range", what, c->rope_theta);
    if (c->rope_factor != 0 && !(c->rope_factor >= 1 && c->rope_low_freq > 0 && c->rope_high_freq > c->rope_low_freq && c->rope_orig_maxT > 0))
        fatal("%s: rope_scaling out of range (factor %g, low_freq_factor %g, high_freq_factor %g, original_max_position_embeddings %d)",
              what, c->rope_factor, c->rope_low_freq, c->rope_high_freq, c->rope_orig_maxT);
}

// Size descriptors for fresh models (tests, demos, benchmarks):
//   "dN": GPT-2 with N layers, 64*N channels, N heads (head size 64), context 1024;
//         suffixes override: c<channels> h<heads> t<context>, e.g. d4c256h4t512.
//   "lN": Llama with N layers, 64*N channels, N heads of size C/heads, as many
//         key/value heads, intermediate size 8C/3 rounded up to a multiple of 64,
//         context 1024, rope_theta 10000, RMSNorm eps 1e-5, tied head; suffixes
//         c<channels> h<heads> k<kv heads> f<intermediate> t<context> as numbers,
//         and the letters u (untied lm_head) and b (q/k/v biases: Qwen2).
//         SmolLM2-135M's shape is l30c576h9k3f1536.
// Returns 0 if desc is a descriptor, -1 if it is not one (sizes are checked later
// by gpt2_check_config).
static int gpt2_parse_descriptor(const char *desc, GPT2Config *cfg) {
    if ((desc[0] != 'd' && desc[0] != 'l') || !isdigit((unsigned char)desc[1])) return -1;
    int llama = desc[0] == 'l';
    const char *p = desc + 1;
    char *end;
    long L = strtol(p, &end, 10);
    long C = 64 * L, NH = L, KVH = -1, FF = -1, T = 1024, untied = 0, bias = 0;
    p = end;
    while (*p) {
        char key = *p++;
        if (llama && (key == 'u' || key == 'b')) { if (key == 'u') untied = 1; else bias = 1; continue; }
        if (!isdigit((unsigned char)*p)) return -1;
        long v = strtol(p, &end, 10);
        p = end;
        if (key == 'c') C = v;
        else if (key == 'h') NH = v;
        else if (key == 't') T = v;
        else if (llama && key == 'k') KVH = v;
        else if (llama && key == 'f') FF = v;
        else return -1;
    }
    if (L < 1 || L > 1000 || C < 1 || C > 65536 || NH < 1 || NH > C || T < 1 || T > 1 << 20) return -1;
    cfg->L = (int)L; cfg->C = (int)C; cfg->NH = (int)NH; cfg->maxT = (int)T; cfg->eps = 1e-5f;
    gpt2_config_defaults(cfg);
    if (!llama) return 0;
    if (KVH < 1 || KVH > NH) KVH = KVH == -1 ? NH : 0;
    if (FF == -1) FF = (8 * C / 3 + 63) / 64 * 64;
    if (FF < 1 || FF > 1 << 20) return -1;
    cfg->family = bias ? FAMILY_QWEN2 : FAMILY_LLAMA;
    cfg->KVH = (int)KVH; cfg->HS = (int)(C / NH); cfg->FF = (int)FF;
    cfg->qkv_bias = (int)bias; cfg->tied = !untied;
    cfg->rope_theta = 10000.0f;
    return 0;
}

// Fresh initialization: weights normal(0, 0.02), the two residual projections of
// each layer (attproj/o_proj, fcproj/down_proj) normal(0, 0.02/sqrt(2L)), biases 0,
// norm scales 1. Deterministic in seed.
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
// tokenizer): rows V..new_V-1 of the embedding (and of an untied lm_head) start
// as the mean of the existing rows, so new tokens begin as an "average" token.
// Reallocates *mem.
static void gpt2_grow_vocab(GPT2Config *cfg, float **mem, ParamTensors *p, int new_V) {
    GPT2Config grown = *cfg;
    grown.V = new_V;
    float *nm = (float *)xmalloc(gpt2_num_parameters(&grown) * sizeof(float));
    ParamTensors np;
    param_pointers(&grown, nm, &np);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) memcpy(np.t[i], p->t[i], param_numel(cfg, i) * sizeof(float));
    int C = cfg->C;
    for (int k = 0; k < 2; k++) {
        const float *old = k == 0 ? p->wte : p->lmhead;
        float *grow = k == 0 ? np.wte : np.lmhead;
        if (k == 1 && cfg->tied) break;
        for (int c = 0; c < C; c++) {
            double sum = 0.0;
            for (int v = 0; v < cfg->V; v++) sum += old[(size_t)v * C + c];
            float mean = (float)(sum / cfg->V);
            for (int v = cfg->V; v < new_V; v++) grow[(size_t)v * C + c] = mean;
        }
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
    gpt2_config_defaults(cfg);
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
    int ndim = param_ndim(i);
    int ok = t->ndim == ndim;
    for (int d = 0; ok && d < t->ndim; d++) ok = t->shape[d] == shape[d];
    if (!ok) {
        char got[128] = "", want[128] = "";
        for (int d = 0; d < t->ndim; d++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        for (int d = 0; d < ndim; d++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "", (long long)shape[d]);
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
        for (int l = 0; param_numel(cfg, i) && l < (PARAM_INFO[i].per_layer ? cfg->L : 1); l++) gpt2_hf_tensor(st, cfg, i, l);
    *mem = (float *)xmalloc(gpt2_num_parameters(cfg) * sizeof(float));
    param_pointers(cfg, *mem, p);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        int64_t shape[2];
        size_t numel = (size_t)param_slice_shape(cfg, i, shape);
        for (int l = 0; numel && l < (PARAM_INFO[i].per_layer ? cfg->L : 1); l++) st_read_f32(st, gpt2_hf_tensor(st, cfg, i, l), p->t[i] + (size_t)l * numel);
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
        int layers = numel == 0 ? 0 : PARAM_INFO[i].per_layer ? cfg->L : 1;
        for (int l = 0; l < layers; l++) {
            StOut *o = &outs[count++];
            char name[200];
            snprintf(name, sizeof name, PARAM_INFO[i].hf_name, l);
            snprintf(o->name, sizeof o->name, "transformer.%s", name);
            o->ndim = param_ndim(i);
            o->shape[0] = shape[0]; o->shape[1] = shape[1];
            o->data = p->t[i] + (size_t)l * (size_t)numel;
        }
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_write_f32(path, outs, count);
    free(outs);
}

#endif
