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
// A model directory as transformers' save_pretrained writes it: config.json, and the
// weights in one model.safetensors or in shards model-0000k-of-0000n.safetensors
// that model.safetensors.index.json lists (where both exist, the single file is used,
// as transformers does). GPT-2 (GPT2LMHeadModel), Llama (LlamaForCausalLM) and Qwen2
// (Qwen2ForCausalLM); F32, F16 or BF16 tensors. Any problem is one fatal line naming
// the file at fault.

// A config.json field; an optional one that is absent or null is NULL.
static const JsonValue *hf_field(const JsonValue *root, const char *key, const char *path, int required) {
    const JsonValue *v = json_get(root, key);
    if (v && v->type == JSON_NULL && !required) v = NULL;
    if (!v && required) fatal("%s: missing field \"%s\"", path, key);
    return v;
}

static int json_field_int(const JsonValue *root, const char *key, const char *path, int required, int fallback) {
    const JsonValue *v = hf_field(root, key, path, required);
    if (!v) return fallback;
    int64_t x;
    if (json_int64(v, &x) != 0 || x < 0 || x > INT32_MAX) fatal("%s: field \"%s\" must be a non-negative integer", path, key);
    return (int)x;
}

static double json_field_num(const JsonValue *root, const char *key, const char *path, int required, double fallback) {
    const JsonValue *v = hf_field(root, key, path, required);
    if (!v) return fallback;
    if (v->type != JSON_NUMBER || !isfinite(v->number)) fatal("%s: field \"%s\" must be a finite number", path, key);
    return v->number;
}

static int json_field_bool(const JsonValue *root, const char *key, const char *path, int fallback) {
    const JsonValue *v = hf_field(root, key, path, 0);
    if (!v) return fallback;
    if (v->type != JSON_TRUE && v->type != JSON_FALSE) fatal("%s: field \"%s\" must be true or false", path, key);
    return v->type == JSON_TRUE;
}

// bos_token_id / eos_token_id: an id, a list of ids (the first is kept) or null (-1);
// absent: fallback.
static int hf_token_id(const JsonValue *root, const char *key, const char *path, int fallback) {
    const JsonValue *v = json_get(root, key);
    if (!v) return fallback;
    if (v->type == JSON_ARRAY) v = v->count ? &v->items[0] : NULL;
    if (!v || v->type == JSON_NULL) return -1;
    int64_t x;
    if (json_int64(v, &x) != 0 || x < 0 || x > INT32_MAX) fatal("%s: field \"%s\" must be a token id, a list of token ids or null", path, key);
    return (int)x;
}

static void hf_config_gpt2(const JsonValue *root, const char *path, GPT2Config *cfg) {
    const JsonValue *act = json_get(root, "activation_function");
    if (act && (act->type != JSON_STRING || strcmp(act->string, "gelu_new") != 0))
        fatal("%s: activation_function must be \"gelu_new\" (tanh-approximated GELU)", path);
    const JsonValue *inner = json_get(root, "n_inner");
    cfg->C = json_field_int(root, "n_embd", path, 1, 0);
    if (inner && inner->type != JSON_NULL && json_field_int(root, "n_inner", path, 1, 0) != 4 * cfg->C)
        fatal("%s: n_inner must be null or 4*n_embd", path);
    cfg->NH = json_field_int(root, "n_head", path, 1, 0);
    cfg->L = json_field_int(root, "n_layer", path, 1, 0);
    cfg->maxT = json_field_int(root, "n_positions", path, 1, 0);
    cfg->V = json_field_int(root, "vocab_size", path, 1, 0);
    const JsonValue *eps = json_get(root, "layer_norm_epsilon");
    if (!eps) fatal("%s: missing field \"layer_norm_epsilon\"", path);
    if (eps->type != JSON_NUMBER) fatal("%s: field \"layer_norm_epsilon\" must be a number", path);
    cfg->eps = (float)eps->number;
    gpt2_config_defaults(cfg);
}

// rope_theta and rope_scaling (transformers 4.x writes them), or both inside
// rope_parameters (transformers 5.x). Scaling: none, "default" (none) or "llama3".
static void hf_config_rope(const JsonValue *root, const char *path, GPT2Config *cfg) {
    const JsonValue *params = hf_field(root, "rope_parameters", path, 0);
    if (params && params->type != JSON_OBJECT) fatal("%s: rope_parameters must be an object", path);
    const char *what = params ? "rope_parameters" : "rope_scaling";
    const JsonValue *scaling = params ? params : hf_field(root, "rope_scaling", path, 0);
    cfg->rope_theta = (float)json_field_num(params ? params : root, "rope_theta", path, 0, 10000.0);
    cfg->rope_factor = cfg->rope_low_freq = cfg->rope_high_freq = 0;
    cfg->rope_orig_maxT = 0;
    if (!scaling) return;
    if (scaling->type != JSON_OBJECT) fatal("%s: %s must be null or an object", path, what);
    const JsonValue *type = json_get(scaling, "rope_type");
    if (!type) type = json_get(scaling, "type");
    if (!type || type->type != JSON_STRING) fatal("%s: %s has no \"rope_type\" string", path, what);
    if (!strcmp(type->string, "default")) return;
    if (strcmp(type->string, "llama3") != 0)
        fatal("%s: %s type \"%.40s\" is not supported (only \"llama3\", or none)", path, what, type->string);
    cfg->rope_factor = (float)json_field_num(scaling, "factor", path, 1, 0);
    cfg->rope_low_freq = (float)json_field_num(scaling, "low_freq_factor", path, 1, 0);
    cfg->rope_high_freq = (float)json_field_num(scaling, "high_freq_factor", path, 1, 0);
    cfg->rope_orig_maxT = json_field_int(scaling, "original_max_position_embeddings", path, 1, 0);
    if (cfg->rope_factor == 0) fatal("%s: %s factor must not be 0", path, what);
}

// LlamaConfig / Qwen2Config, with transformers' defaults for the optional fields
// (num_key_value_heads = heads, head_dim = hidden/heads, rms_norm_eps 1e-6,
// rope_theta 10000, tie_word_embeddings false for both; bos/eos 1/2 for Llama). Features this trainer does
// not compute are refused, never ignored.
static void hf_config_llama(const JsonValue *root, const char *path, int family, GPT2Config *cfg) {
    cfg->C = json_field_int(root, "hidden_size", path, 1, 0);
    cfg->NH = json_field_int(root, "num_attention_heads", path, 1, 0);
    cfg->L = json_field_int(root, "num_hidden_layers", path, 1, 0);
    cfg->maxT = json_field_int(root, "max_position_embeddings", path, 1, 0);
    cfg->V = json_field_int(root, "vocab_size", path, 1, 0);
    gpt2_config_defaults(cfg);
    cfg->family = family;
    cfg->FF = json_field_int(root, "intermediate_size", path, 1, 0);
    cfg->KVH = json_field_int(root, "num_key_value_heads", path, 0, cfg->NH);
    if (!hf_field(root, "head_dim", path, 0) && cfg->NH > 0 && cfg->C % cfg->NH)
        fatal("%s: hidden_size %d does not divide into %d heads and there is no head_dim", path, cfg->C, cfg->NH);
    cfg->HS = json_field_int(root, "head_dim", path, 0, cfg->NH > 0 ? cfg->C / cfg->NH : 0);
    cfg->eps = (float)json_field_num(root, "rms_norm_eps", path, 0, 1e-6);
    cfg->tied = json_field_bool(root, "tie_word_embeddings", path, 0);
    cfg->qkv_bias = family == FAMILY_QWEN2;  // Qwen2: q, k, v always have biases, o_proj none
    const JsonValue *act = hf_field(root, "hidden_act", path, 0);
    if (act && (act->type != JSON_STRING || strcmp(act->string, "silu") != 0)) fatal("%s: hidden_act must be \"silu\" (SwiGLU MLP)", path);
    if (family == FAMILY_LLAMA && json_field_bool(root, "attention_bias", path, 0))
        fatal("%s: attention_bias true (biases on q, k, v and o_proj) is not supported", path);
    if (json_field_bool(root, "mlp_bias", path, 0)) fatal("%s: mlp_bias true is not supported", path);
    if (json_field_bool(root, "use_sliding_window", path, 0)) fatal("%s: use_sliding_window true (sliding-window attention) is not supported", path);
    hf_config_rope(root, path, cfg);
    int llama = family == FAMILY_LLAMA;  // LlamaConfig's defaults are 1 and 2, Qwen2Config's none
    cfg->bos_id = hf_token_id(root, "bos_token_id", path, llama ? 1 : -1);
    cfg->eos_id = hf_token_id(root, "eos_token_id", path, llama ? 2 : -1);
}

// Reads a config.json's text[0..len) (path names it in errors): model_type "gpt2"
// (or none: older GPT-2 files), "llama" or "qwen2".
static void gpt2_parse_hf_config(const char *path, const char *text, size_t len, GPT2Config *cfg) {
    JsonDoc doc;
    if (json_parse(text, len, &doc) != 0) fatal("%s: invalid JSON: %s", path, doc.error);
    if (doc.root->type != JSON_OBJECT) fatal("%s: expected a JSON object", path);
    memset(cfg, 0, sizeof *cfg);
    const JsonValue *mt = json_get(doc.root, "model_type");
    if (mt && mt->type != JSON_STRING) fatal("%s: model_type must be a string", path);
    if (!mt || !strcmp(mt->string, "gpt2")) hf_config_gpt2(doc.root, path, cfg);
    else if (!strcmp(mt->string, "llama")) hf_config_llama(doc.root, path, FAMILY_LLAMA, cfg);
    else if (!strcmp(mt->string, "qwen2")) hf_config_llama(doc.root, path, FAMILY_QWEN2, cfg);
    else fatal("%s: model_type \"%.40s\" is not supported (gpt2, llama, qwen2)", path, mt->string);
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

// model.safetensors.index.json: {"metadata": {...}, "weight_map": {tensor: file}}.
// Every file must be a plain name inside the model directory (no "/", not "." or
// ".."), so a hostile index cannot make the loader read elsewhere.
typedef struct {
    char path[1024];  // the index file, for messages
    int count;        // weight_map entries
    char **tensors;   // [count] tensor names
    int *file;        // [count] which of files holds each tensor
    int nfiles;       // distinct files, in the order of first mention
    char **files;     // [nfiles] file names, relative to the model directory
} HfIndex;

static void hf_index_free(HfIndex *ix) {
    for (int k = 0; k < ix->count; k++) free(ix->tensors[k]);
    for (int k = 0; k < ix->nfiles; k++) free(ix->files[k]);
    free(ix->tensors); free(ix->file); free(ix->files);
    memset(ix, 0, sizeof *ix);
}

static char *hf_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = (char *)xmalloc(n);
    memcpy(d, s, n);
    return d;
}

static void hf_parse_index(const char *path, const char *text, size_t len, HfIndex *ix) {
    memset(ix, 0, sizeof *ix);
    snprintf(ix->path, sizeof ix->path, "%s", path);
    JsonDoc doc;
    if (json_parse(text, len, &doc) != 0) fatal("%s: invalid JSON: %s", path, doc.error);
    const JsonValue *map = json_get(doc.root, "weight_map");
    if (!map || map->type != JSON_OBJECT || map->count == 0) fatal("%s: no \"weight_map\" object naming the tensors' files", path);
    if (map->count > 1000000) fatal("%s: weight_map has %zu entries, implausibly many", path, map->count);
    ix->tensors = (char **)xcalloc(map->count, sizeof(char *));
    ix->file = (int *)xcalloc(map->count, sizeof(int));
    ix->files = (char **)xcalloc(map->count, sizeof(char *));
    for (size_t k = 0; k < map->count; k++) {
        const JsonValue *f = &map->items[k];
        const char *name = map->keys[k];
        if (f->type != JSON_STRING) fatal("%s: weight_map entry of %.100s is not a file name", path, name);
        const char *s = f->string;
        if (f->length == 0 || strlen(s) != f->length || f->length > 255 || strchr(s, '/') || !strcmp(s, ".") || !strcmp(s, ".."))
            fatal("%s: weight_map names file \"%.100s\" for %.100s; expected a plain file name inside the model directory", path, s, name);
        int j = 0;
        while (j < ix->nfiles && strcmp(ix->files[j], s) != 0) j++;
        if (j == ix->nfiles) ix->files[ix->nfiles++] = hf_strdup(s);
        ix->tensors[ix->count] = hf_strdup(name);
        ix->file[ix->count++] = j;
    }
    json_free(&doc);
}

// The weights of a model directory: its opened safetensors files and, when sharded,
// which file holds which tensor.
typedef struct {
    SafeTensors *files;  // [nfiles] opened files (the whole contents in memory)
    int nfiles;
    HfIndex index;       // count 0: one model.safetensors, files[0]
} HfWeights;

static const char *hf_weights_path(const HfWeights *w) { return w->index.count ? w->index.path : w->files[0].path; }

// Tensor `name` and the file holding it, or NULL if the model has no such tensor.
static const StTensor *hf_find(const HfWeights *w, const char *name, const SafeTensors **file) {
    *file = &w->files[0];
    if (!w->index.count) return st_find(&w->files[0], name);
    for (int k = w->index.count; k-- > 0;) {  // the last of repeated keys, as json_get
        if (strcmp(w->index.tensors[k], name) != 0) continue;
        *file = &w->files[w->index.file[k]];
        const StTensor *t = st_find(*file, name);
        if (!t) fatal("%s: has no tensor %s, which %s says it holds", (*file)->path, name, w->index.path);
        return t;
    }
    return NULL;
}

static void hf_weights_close(HfWeights *w) {
    for (int k = 0; k < w->nfiles; k++) st_close(&w->files[k]);
    free(w->files);
    hf_index_free(&w->index);
}

// Opens dir's model.safetensors, else the shards model.safetensors.index.json lists.
static void hf_weights_open(const char *dir, HfWeights *w) {
    char path[4096];
    memset(w, 0, sizeof *w);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (path_exists(path)) {
        w->files = (SafeTensors *)xcalloc(1, sizeof(SafeTensors));
        w->nfiles = 1;
        st_open(&w->files[0], path);
        return;
    }
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (!path_exists(path)) fatal("%s: no model.safetensors and no model.safetensors.index.json", dir);
    size_t len;
    char *text = read_whole_file(path, &len);
    hf_parse_index(path, text, len, &w->index);
    free(text);
    w->files = (SafeTensors *)xcalloc((size_t)w->index.nfiles, sizeof(SafeTensors));
    for (; w->nfiles < w->index.nfiles; w->nfiles++) {
        snprintf(path, sizeof path, "%s/%s", dir, w->index.files[w->nfiles]);
        st_open(&w->files[w->nfiles], path);
    }
}

// Part `part` of layer l's slice of parameter tensor i, checked against the shape
// cfg implies; *file is the file holding it. GPT-2 names may carry "transformer.".
static const StTensor *gpt2_hf_part(const HfWeights *w, const GPT2Config *cfg, int i, int l, const HfPart *part, const SafeTensors **file) {
    int64_t shape[2];
    param_slice_shape(cfg, i, shape);
    char name[256], prefixed[300];
    snprintf(name, sizeof name, part->name, l);
    snprintf(prefixed, sizeof prefixed, "transformer.%s", name);
    const StTensor *t = is_llama_family(cfg) ? NULL : hf_find(w, prefixed, file);
    if (!t) t = hf_find(w, name, file);
    if (!t) fatal("%s: missing tensor %s", hf_weights_path(w), is_llama_family(cfg) ? name : prefixed);
    int ndim = param_ndim(i);
    int64_t want[2] = {part->rows, shape[1]};
    int ok = t->ndim == ndim;
    for (int d = 0; ok && d < t->ndim; d++) ok = t->shape[d] == want[d];
    if (!ok) {
        char got[128] = "", exp[128] = "";
        for (int d = 0; d < t->ndim; d++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        for (int d = 0; d < ndim; d++) snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%s%lld", d ? ", " : "", (long long)want[d]);
        fatal("%s: tensor %s has shape [%s], expected [%s] from config.json", (*file)->path, t->name, got, exp);
    }
    return t;
}

// The parameters of the model cfg describes from opened weights (closed here): each
// tensor's parts (transformers' names, param_hf_parts) stacked along dim 0. Extra
// tensors (attn.bias buffers, rotary inv_freq) are ignored. A tied model may still
// store lm_head.weight; it must then equal the embedding. Allocates *mem
// (gpt2_num_parameters floats) only once every tensor is found with its shape, so
// the parameters take at most twice the files' size (tensors do not overlap;
// F16/BF16 widen to fp32), however large a model config.json describes.
static void gpt2_load_hf_weights(HfWeights *w, const GPT2Config *cfg, float **mem, ParamTensors *p) {
    for (int pass = 0; pass < 2; pass++) {  // 0: find and check every tensor; 1: copy
        if (pass == 1) {
            *mem = (float *)xmalloc(gpt2_num_parameters(cfg) * sizeof(float));
            param_pointers(cfg, *mem, p);
        }
        for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
            HfPart parts[3];
            int nparts = param_hf_parts(cfg, i, parts);
            int64_t shape[2];
            size_t numel = (size_t)param_slice_shape(cfg, i, shape);
            for (int l = 0; nparts && l < (PARAM_INFO[i].per_layer ? cfg->L : 1); l++) {
                size_t offset = (size_t)l * numel;
                for (int k = 0; k < nparts; k++) {
                    const SafeTensors *file;
                    const StTensor *t = gpt2_hf_part(w, cfg, i, l, &parts[k], &file);
                    if (pass == 1) st_read_f32(file, t, p->t[i] + offset);
                    offset += (size_t)t->numel;
                }
            }
        }
    }
    if (cfg->tied) {
        const SafeTensors *file;
        const StTensor *head = hf_find(w, "lm_head.weight", &file);
        if (head) {
            size_t n = (size_t)cfg->V * cfg->C;
            if (head->ndim != 2 || head->shape[0] != cfg->V || head->shape[1] != cfg->C)
                fatal("%s: tensor lm_head.weight has the wrong shape (expected [%d, %d])", file->path, cfg->V, cfg->C);
            float *tmp = (float *)xmalloc(n * sizeof(float));
            st_read_f32(file, head, tmp);
            if (memcmp(tmp, p->wte, n * sizeof(float)) != 0)
                fatal("%s: lm_head.weight differs from the token embedding, but the output head is tied%s", file->path,
                      is_llama_family(cfg) ? " (tie_word_embeddings)" : "; untied output embeddings are not supported for GPT-2");
            free(tmp);
        }
    }
    hf_weights_close(w);
}

// A single opened model.safetensors (closed here): what the fuzzer feeds.
static void gpt2_load_hf_opened(SafeTensors *st, const GPT2Config *cfg, float **mem, ParamTensors *p) {
    HfWeights w;
    memset(&w, 0, sizeof w);
    w.files = (SafeTensors *)xmalloc(sizeof(SafeTensors));
    w.files[0] = *st;
    w.nfiles = 1;
    memset(st, 0, sizeof *st);
    gpt2_load_hf_weights(&w, cfg, mem, p);
}

static void gpt2_load_hf(const char *dir, GPT2Config *cfg, float **mem, ParamTensors *p) {
    gpt2_read_hf_config(dir, cfg);
    HfWeights w;
    hf_weights_open(dir, &w);
    gpt2_load_hf_weights(&w, cfg, mem, p);
}

// ---- Hugging Face export ----
// config.json as transformers writes it for the family (keys sorted, torch_dtype
// float32), F32 weights in transformers' names and layout (the stacked tensors split
// back into their parts; a tied head is not stored, as save_pretrained does), in one
// model.safetensors or, above max_shard_bytes, in shards with
// model.safetensors.index.json. Every file is written atomically; a model.safetensors
// or index of the other layout left in dir is removed after, so the directory loads
// as what was just written (shards of an earlier, larger export are left unlisted).

// A float as Python writes it: integers as 500000.0, others as the shortest decimal
// that reads back as the same float (1e-05).
static void hf_json_float(char *out, size_t n, float x) {
    if (x == floorf(x) && fabsf(x) < 1e15f) { snprintf(out, n, "%.1f", (double)x); return; }  // 500000.0, not 5e+05
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(out, n, "%.*g", prec, (double)x);
        if (strtof(out, NULL) == x) break;
    }
}

// Appends `  "key": value,\n` to buf (value formatted by fmt).
static void hf_kv(char *buf, size_t cap, size_t *len, const char *key, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void hf_kv(char *buf, size_t cap, size_t *len, const char *key, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    *len += (size_t)snprintf(buf + *len, cap - *len, "  \"%s\": ", key);
    *len += (size_t)vsnprintf(buf + *len, cap - *len, fmt, ap);
    *len += (size_t)snprintf(buf + *len, cap - *len, ",\n");
    va_end(ap);
}

// Writes dir/config.json.
static void hf_write_config(const char *dir, const GPT2Config *c) {
    char path[4096], json[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int n;
    if (!is_llama_family(c)) {
        n = snprintf(json, sizeof json,
            "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
            "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n"
            "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": null,\n  \"layer_norm_epsilon\": %.9g,\n"
            "  \"activation_function\": \"gelu_new\",\n  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n"
            "  \"attn_pdrop\": 0.0,\n  \"initializer_range\": 0.02,\n  \"tie_word_embeddings\": true,\n"
            "  \"torch_dtype\": \"float32\"\n}\n",
            c->V, c->maxT, c->maxT, c->C, c->L, c->NH, (double)c->eps);
        write_file_atomic(path, json, (size_t)n);
        return;
    }
    int qwen = c->family == FAMILY_QWEN2;
    char eps[32], theta[32], scaling[512], f[32], lo[32], hi[32], bos[16] = "null", eos[16] = "null";
    if (c->bos_id >= 0) snprintf(bos, sizeof bos, "%d", c->bos_id);
    if (c->eos_id >= 0) snprintf(eos, sizeof eos, "%d", c->eos_id);
    hf_json_float(eps, sizeof eps, c->eps);
    hf_json_float(theta, sizeof theta, c->rope_theta);
    hf_json_float(f, sizeof f, c->rope_factor);
    hf_json_float(lo, sizeof lo, c->rope_low_freq);
    hf_json_float(hi, sizeof hi, c->rope_high_freq);
    if (c->rope_factor == 0) snprintf(scaling, sizeof scaling, "null");
    else snprintf(scaling, sizeof scaling,
                  "{\n    \"factor\": %s,\n    \"high_freq_factor\": %s,\n    \"low_freq_factor\": %s,\n"
                  "    \"original_max_position_embeddings\": %d,\n    \"rope_type\": \"llama3\"\n  }",
                  f, hi, lo, c->rope_orig_maxT);
    size_t len = (size_t)snprintf(json, sizeof json, "{\n");
    // keys in sorted order, as transformers writes them; Qwen2Config has no
    // attention_bias, mlp_bias or pretraining_tp, and has the (unused) window fields
    hf_kv(json, sizeof json, &len, "architectures", "[\n    \"%s\"\n  ]", qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM");
    if (!qwen) hf_kv(json, sizeof json, &len, "attention_bias", "false");
    hf_kv(json, sizeof json, &len, "attention_dropout", "0.0");
    hf_kv(json, sizeof json, &len, "bos_token_id", "%s", bos);
    hf_kv(json, sizeof json, &len, "eos_token_id", "%s", eos);
    if (!qwen || c->HS * c->NH != c->C) hf_kv(json, sizeof json, &len, "head_dim", "%d", c->HS);  // Qwen2Config: only if not hidden/heads
    hf_kv(json, sizeof json, &len, "hidden_act", "\"silu\"");
    hf_kv(json, sizeof json, &len, "hidden_size", "%d", c->C);
    hf_kv(json, sizeof json, &len, "initializer_range", "0.02");
    hf_kv(json, sizeof json, &len, "intermediate_size", "%d", c->FF);
    hf_kv(json, sizeof json, &len, "max_position_embeddings", "%d", c->maxT);
    if (qwen) hf_kv(json, sizeof json, &len, "max_window_layers", "%d", c->L);
    if (!qwen) hf_kv(json, sizeof json, &len, "mlp_bias", "false");
    hf_kv(json, sizeof json, &len, "model_type", qwen ? "\"qwen2\"" : "\"llama\"");
    hf_kv(json, sizeof json, &len, "num_attention_heads", "%d", c->NH);
    hf_kv(json, sizeof json, &len, "num_hidden_layers", "%d", c->L);
    hf_kv(json, sizeof json, &len, "num_key_value_heads", "%d", c->KVH);
    if (!qwen) hf_kv(json, sizeof json, &len, "pretraining_tp", "1");
    hf_kv(json, sizeof json, &len, "rms_norm_eps", "%s", eps);
    hf_kv(json, sizeof json, &len, "rope_scaling", "%s", scaling);
    hf_kv(json, sizeof json, &len, "rope_theta", "%s", theta);
    if (qwen) hf_kv(json, sizeof json, &len, "sliding_window", "null");  // what Qwen2Config keeps without use_sliding_window
    hf_kv(json, sizeof json, &len, "tie_word_embeddings", c->tied ? "true" : "false");
    hf_kv(json, sizeof json, &len, "torch_dtype", "\"float32\"");
    hf_kv(json, sizeof json, &len, "use_cache", "true");
    if (qwen) hf_kv(json, sizeof json, &len, "use_sliding_window", "false");
    hf_kv(json, sizeof json, &len, "vocab_size", "%d", c->V);
    len -= 2;  // the last ",\n"
    len += (size_t)snprintf(json + len, sizeof json - len, "\n}\n");
    write_file_atomic(path, json, len);
}

// The tensors of the export in transformers' names: the embeddings, then layer by
// layer (so shards, filled in this order, split between layers mostly), then the final
// norm and lm_head. Returns the count; *out is allocated.
static int hf_export_tensors(const GPT2Config *cfg, const ParamTensors *p, StOut **out) {
    int cap = 3 * NUM_PARAM_TENSORS * (cfg->L + 1), count = 0;
    StOut *outs = (StOut *)xcalloc((size_t)cap, sizeof(StOut));
    for (int stage = 0; stage < 3; stage++) {  // 0: before the layers, 1: layers, 2: after
        for (int l = 0; l < (stage == 1 ? cfg->L : 1); l++) {
            for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
                int where = PARAM_INFO[i].per_layer ? 1 : i < P_LN1W ? 0 : 2;
                HfPart parts[3];
                int nparts = where == stage ? param_hf_parts(cfg, i, parts) : 0;
                int64_t shape[2];
                size_t numel = (size_t)param_slice_shape(cfg, i, shape);
                const float *data = p->t[i] + (size_t)l * numel;
                for (int k = 0; k < nparts; k++) {
                    StOut *o = &outs[count++];
                    char name[200];
                    snprintf(name, sizeof name, parts[k].name, l);
                    snprintf(o->name, sizeof o->name, "%s%s", is_llama_family(cfg) ? "" : "transformer.", name);
                    o->ndim = param_ndim(i);
                    o->shape[0] = parts[k].rows; o->shape[1] = shape[1];
                    o->data = data;
                    data += (size_t)parts[k].rows * (size_t)shape[1];
                }
            }
        }
    }
    *out = outs;
    return count;
}

// SFT_MAX_SHARD_SIZE: bytes per shard above which exports are sharded, as a number
// with an optional decimal unit (KB, MB, GB); default 5GB, as save_pretrained's.
static uint64_t hf_max_shard_bytes(void) {
    const char *s = getenv("SFT_MAX_SHARD_SIZE");
    if (!s || !*s) return 5000000000ull;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    uint64_t unit = !strcmp(end, "") || !strcmp(end, "B") ? 1 : !strcmp(end, "KB") ? 1000 : !strcmp(end, "MB") ? 1000000
                  : !strcmp(end, "GB") ? 1000000000ull : 0;
    if (!isdigit((unsigned char)s[0]) || errno || v == 0 || unit == 0 || v > (1ull << 50))
        fatal("SFT_MAX_SHARD_SIZE=%s: expected a size like 5GB, 200MB or 1000000 (bytes)", s);
    return (uint64_t)v * unit;
}

static void hf_remove_if_present(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (path_exists(path) && unlink(path) != 0) fatal("%s: cannot remove: %s", path, strerror(errno));
}

static void gpt2_save_hf_sharded(const char *dir, const GPT2Config *cfg, const ParamTensors *p, uint64_t max_shard_bytes) {
    hf_write_config(dir, cfg);
    StOut *outs;
    int count = hf_export_tensors(cfg, p, &outs);
    // shards in order, a new one when the next tensor would overflow this one (a
    // tensor larger than the limit gets a shard of its own)
    int *shard = (int *)xmalloc((size_t)count * sizeof(int)), nshards = 0;
    uint64_t used = 0, total = 0;
    for (int k = 0; k < count; k++) {
        uint64_t bytes = 4 * (uint64_t)outs[k].shape[0] * (uint64_t)outs[k].shape[1];
        if (k == 0 || (used > 0 && used + bytes > max_shard_bytes)) { nshards++; used = 0; }
        shard[k] = nshards - 1;
        used += bytes;
        total += bytes;
    }
    char path[4096];
    if (nshards == 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        st_write_f32(path, outs, count);
        hf_remove_if_present(dir, "model.safetensors.index.json");
    } else {
        size_t cap = 256 + (size_t)count * 320, n = 0;
        char *index = (char *)xmalloc(cap);
        n += (size_t)snprintf(index, cap, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {", (unsigned long long)total);
        for (int first = 0, s = 0; s < nshards; s++) {
            int last = first;
            while (last < count && shard[last] == s) last++;
            char file[64];
            snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", s + 1, nshards);
            snprintf(path, sizeof path, "%s/%s", dir, file);
            st_write_f32(path, outs + first, last - first);
            for (int k = first; k < last; k++)
                n += (size_t)snprintf(index + n, cap - n, "%s\n    \"%s\": \"%s\"", k ? "," : "", outs[k].name, file);
            first = last;
        }
        n += (size_t)snprintf(index + n, cap - n, "\n  }\n}\n");
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        write_file_atomic(path, index, n);
        free(index);
        hf_remove_if_present(dir, "model.safetensors");
    }
    free(shard);
    free(outs);
}

// The export of checkpoints and the final model, sharded above SFT_MAX_SHARD_SIZE.
static void gpt2_save_hf(const char *dir, const GPT2Config *cfg, const ParamTensors *p) {
    gpt2_save_hf_sharded(dir, cfg, p, hf_max_shard_bytes());
}

#endif
