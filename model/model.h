// model.h: the model description shared by the CPU and CUDA trainers:
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
#include "../base/json.h"
#include "../base/rng.h"
#include "../base/safetensors.h"
#include "../base/util.h"

// Model families. GPT-2 is the teaching model; the others (as transformers'
// LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM and
// SmolLM3ForCausalLM compute them) share one block layout, the "Llama family":
//   GPT-2:  x += attproj(attention(qkv(LayerNorm1(x))));  x += fcproj(gelu(fc(LayerNorm2(x))))
//           learned positions (wpe) added to the token embedding; biases everywhere;
//           output head tied to wte.
//   Llama:  x += o_proj(attention(rope(qkv(RMSNorm1(x)))));  x += down(silu(gate(x')) * up(x'))
//           with x' = RMSNorm2(x); rotary positions on q and k; grouped-query attention
//           (KVH <= NH key/value heads); no biases (Qwen2: q, k, v biases); output head
//           tied to wte or its own lm_head.
// The newer families are the Llama block with a few orthogonal features (fields below):
//   Qwen3:   no biases; qk_norm: every q and k head RMS-normed (q_norm, k_norm, HS wide)
//            after the projection and before RoPE; head_dim independent of C / NH.
//   SmolLM3: Llama with no RoPE on the layers flagged LAYER_NO_ROPE (no_rope_layers[l]
//            == 0: every 4th layer, l % 4 == 3, by default).
//   Gemma 3: embed_scale (x = wte[token] * sqrt(C)); norm_plus_one (every RMSNorm scales
//            by 1 + w); qk_norm; post_norms (the attention and MLP outputs are RMS-normed
//            before their residual adds); attn_scalar (query_pre_attn_scalar: scores times its ^-1/2); MLP_GEGLU
//            (down(gelu_tanh(gate) * up)); the layers flagged LAYER_SLIDING attend within
//            a window and rotate with rope_local_theta, the others with rope_theta and
//            rope_linear.
//   block:  h = norm1(x); q|k|v = qkv(h); [q, k = qk_norm(q, k)]; [q, k = rope_l(q, k)]
//           a = o_proj(attention_l(q, k, v)); [a = post_attn_norm(a)]; x += a
//           h = norm2(x); m = down(act(gate(h)) * up(h)); [m = post_ffn_norm(m)]; x += m
enum { FAMILY_GPT2, FAMILY_LLAMA, FAMILY_QWEN2, FAMILY_QWEN3, FAMILY_GEMMA3, FAMILY_SMOLLM3 };

// The MLP's activation: GPT-2's tanh GELU of fc; the gated SwiGLU (silu(gate) * up) or
// GeGLU (gelu_tanh(gate) * up, Gemma 3) of the Llama family's [gate | up].
enum { MLP_GELU, MLP_SWIGLU, MLP_GEGLU };

// Per-layer flags (layer_flags[l]): LAYER_SLIDING attends to the `window` most recent
// positions of its document only (query i sees key j iff j <= i and i - j < window, as
// transformers' sliding_window); LAYER_NO_ROPE rotates neither q nor k (SmolLM3's NoPE).
#define MAX_LAYERS 1000
enum { LAYER_SLIDING = 1, LAYER_NO_ROPE = 2 };

typedef struct {
    int family;  // FAMILY_*
    int L;       // layers (<= MAX_LAYERS)
    int NH;      // attention (query) heads
    int C;       // channels
    int V;       // vocabulary size
    int maxT;    // context length (positions)
    float eps;   // LayerNorm (GPT-2) or RMSNorm (Llama family) epsilon
    int KVH;     // key/value heads: NH for GPT-2; divides NH (grouped-query attention)
    int HS;      // head size: C / NH for GPT-2; head_dim for the Llama family
    int FF;      // MLP hidden width: 4C for GPT-2; intermediate_size for the Llama family
    int qkv_bias;  // q, k, v have biases: GPT-2 and Qwen2 1, the others 0
    int tied;      // output head is wte (1) or the lm_head tensor (0); GPT-2 always 1
    float rope_theta;  // rotary base: inv_freq[i] = rope_theta^(-2i/HS), i < HS/2 (Llama family)
    // Llama 3's rope_scaling (rope_type "llama3"); rope_factor 0 = no scaling
    float rope_factor, rope_low_freq, rope_high_freq;  // factor, low_freq_factor, high_freq_factor
    int rope_orig_maxT;                                  // original_max_position_embeddings
    int bos_id;          // config.json's bos_token_id, -1 if absent (written back on export)
    int eos_id;          // its eos_token_id (the first of a list), -1 if absent
    int eos_more[3], n_eos_more;  // the rest of an eos_token_id list (Llama 3.2 Instruct: 128008, 128009)
    // the features of the newer families (all 0 for GPT-2, Llama and Qwen2 but mlp_act)
    int mlp_act;         // MLP_GELU (GPT-2), MLP_SWIGLU (Llama, Qwen2, Qwen3, SmolLM3), MLP_GEGLU (Gemma 3)
    int qk_norm;         // 1: per-head RMSNorm of q and k before RoPE, weights q_norm, k_norm (L, HS) (Qwen3, Gemma 3)
    int norm_plus_one;   // 1: RMSNorm computes x * rstd * (1 + w) (Gemma 3: all norms, q/k norms and the final one)
    int post_norms;      // 1: RMSNorms on the attention and MLP outputs before the residual adds, (L, C) each (Gemma 3)
    float embed_scale;   // token embeddings times this (Gemma 3: float32(sqrt(C))); 0: none
    float attn_scalar;   // attention scores times attn_scalar^-1/2 (Gemma 3's query_pre_attn_scalar); 0: HS, i.e. 1/sqrt(HS)
    int window;          // sliding window of the LAYER_SLIDING layers, in positions; 0: no such layer
    float rope_local_theta;  // rotary base of the LAYER_SLIDING layers (Gemma 3: rope_local_base_freq); 0: rope_theta
    float rope_linear;   // linear rope scaling of the other layers (rope_type "linear": inv_freq / factor); 0: none
    unsigned char layer_flags[MAX_LAYERS];  // LAYER_SLIDING | LAYER_NO_ROPE of each layer
} ModelConfig;

static int is_llama_family(const ModelConfig *c) { return c->family != FAMILY_GPT2; }
// Width of the fused q|k|v projection: NH query heads, then KVH key and KVH value heads.
static int qkv_width(const ModelConfig *c) { return (c->NH + 2 * c->KVH) * c->HS; }

// The parameter tensors, in the order of the one allocation. A tensor a family does
// not have has 0 elements (Llama: wpe, every bias but Qwen2's qkvb, the LN biases;
// lm_head unless untied; q/k norms without qk_norm, the post norms without
// post_norms), so adding a feature leaves the other families' layouts unchanged.
// Roles are the same in all families:
enum { P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB, P_LN2W, P_LN2B,
       P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_QNORMW, P_KNORMW, P_POSTATTNW, P_POSTFFNW,
       P_LNFW, P_LNFB, P_LMHEAD, NUM_PARAM_TENSORS };

typedef union {
    struct {
        float *wte, *wpe, *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b,
              *fcw, *fcb, *fcprojw, *fcprojb, *qnormw, *knormw, *postattnw, *postffnw, *lnfw, *lnfb, *lmhead;
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
//   qnormw   -                          (L, HS)       self_attn.q_norm.weight (qk_norm)
//   knormw   -                          (L, HS)       self_attn.k_norm.weight (qk_norm)
//   postattnw -                         (L, C)        post_attention_layernorm.weight (post_norms: Gemma 3)
//   postffnw -                          (L, C)        post_feedforward_layernorm.weight (post_norms)
//   lnfw     (C)     lnfb (C)           (C)           model.norm.weight
//   lmhead   -                          (V, C)        lm_head.weight, when untied
// Gemma 3's names differ where its block has more norms: ln2w (the norm before the
// MLP) is pre_feedforward_layernorm, and post_attention_layernorm is postattnw, the
// norm of the attention output (Llama's post_attention_layernorm is ln2w).
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
    {"model.layers.%d.self_attn.q_norm.weight", 1, 0}, {"model.layers.%d.self_attn.k_norm.weight", 1, 0},
    {"model.layers.%d.post_attention_layernorm.weight", 1, 0}, {"model.layers.%d.post_feedforward_layernorm.weight", 1, 0},
    {"ln_f.weight", 0, 0},           {"ln_f.bias", 0, 0},
    {"lm_head.weight", 0, 1},
};

// Shape of one layer's slice of tensor i (or of the whole tensor if not stacked);
// returns its element count (0: the family has no such tensor). 1-D tensors have shape[1] = 1.
static int64_t param_slice_shape(const ModelConfig *c, int i, int64_t shape[2]) {
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
    case P_QNORMW: case P_KNORMW: if (c->qk_norm) r = c->HS; break;
    case P_POSTATTNW: case P_POSTFFNW: if (c->post_norms) r = C; break;
    }
    shape[0] = r; shape[1] = k;
    return r * k;
}

// Transformers' tensor names of tensor i's slice: up to 3 parts stacked along dim 0
// (Llama's q|k|v and gate|up), each a printf format with %d for the layer and its
// number of rows. Returns the number of parts (0 for an absent tensor).
typedef struct { const char *name; int64_t rows; } HfPart;
static int param_hf_parts(const ModelConfig *c, int i, HfPart parts[3]) {
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
    case P_LN2W:
        parts[0] = (HfPart){c->post_norms ? "model.layers.%d.pre_feedforward_layernorm.weight" : "model.layers.%d.post_attention_layernorm.weight",
                            shape[0]};
        return 1;
    case P_QNORMW: case P_KNORMW: case P_POSTATTNW: case P_POSTFFNW: parts[0] = (HfPart){PARAM_INFO[i].hf_name, shape[0]}; return 1;
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

static size_t param_numel(const ModelConfig *cfg, int i) {
    int64_t shape[2];
    return (size_t)param_slice_shape(cfg, i, shape) * (PARAM_INFO[i].per_layer ? (size_t)cfg->L : 1);
}

static size_t model_num_parameters(const ModelConfig *cfg) {
    size_t n = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) n += param_numel(cfg, i);
    return n;
}

// Points the tensors into one block of model_num_parameters floats.
static void param_pointers(const ModelConfig *cfg, float *mem, ParamTensors *p) {
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) { p->t[i] = mem; mem += param_numel(cfg, i); }
}

// The output head: wte when tied, else lm_head. (V, C) either way.
static float *output_head(const ModelConfig *c, const ParamTensors *p) { return c->tied ? p->wte : p->lmhead; }

// Rotary frequencies of a Llama-family model: out[i] = rope_theta^(-2i/HS) for
// i < HS/2 (in double, stored as float), then Llama 3's rope_scaling when
// rope_factor != 0: with wavelen = 2 pi / out[i] and the original context orig,
// wavelengths longer than orig / low_freq are divided by factor, shorter than
// orig / high_freq kept, and the band between blends the two by
// smooth = (orig / wavelen - low_freq) / (high_freq - low_freq); or the linear
// scaling rope_linear != 0: out[i] / rope_linear. These are the frequencies of the
// layers without LAYER_SLIDING (all layers when rope_local_theta is 0).
static void rope_inv_freq(const ModelConfig *c, float *out /* HS/2 */) {
    const double pi = 3.14159265358979323846;
    for (int i = 0; i < c->HS / 2; i++) {
        double f = pow((double)c->rope_theta, -2.0 * i / c->HS);
        if (c->rope_linear != 0) f /= c->rope_linear;
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

// The sliding layers' own frequencies when rope_local_theta != 0 (Gemma 3's
// rope_local_base_freq, never scaled): out[i] = rope_local_theta^(-2i/HS).
static void rope_local_inv_freq(const ModelConfig *c, float *out /* HS/2 */) {
    for (int i = 0; i < c->HS / 2; i++) out[i] = (float)pow((double)c->rope_local_theta, -2.0 * i / c->HS);
}

// Which rotary table layer l uses: ROPE_NONE (SmolLM3's NoPE layers; GPT-2), ROPE_GLOBAL
// (rope_inv_freq) or ROPE_LOCAL (a sliding layer of a model with rope_local_theta).
enum { ROPE_NONE, ROPE_GLOBAL, ROPE_LOCAL };
static int layer_rope(const ModelConfig *c, int l) {
    if (!is_llama_family(c) || (c->layer_flags[l] & LAYER_NO_ROPE)) return ROPE_NONE;
    return (c->layer_flags[l] & LAYER_SLIDING) && c->rope_local_theta != 0 ? ROPE_LOCAL : ROPE_GLOBAL;
}

// Layer l's attention window: c->window on a LAYER_SLIDING layer, else 0 (full causal).
static int layer_window(const ModelConfig *c, int l) { return (c->layer_flags[l] & LAYER_SLIDING) ? c->window : 0; }

// The factor on q.k: attn_scalar^-1/2 (computed in double, as Python does), or 1/sqrt(HS) when it is 0.
static float attention_scale(const ModelConfig *c) { return c->attn_scalar != 0 ? (float)(1.0 / sqrt((double)c->attn_scalar)) : 1.0f / sqrtf((float)c->HS); }

// Whether the model has any layer of the given flag.
static int any_layer_flag(const ModelConfig *c, int flag) {
    for (int l = 0; l < c->L; l++) if (c->layer_flags[l] & flag) return 1;
    return 0;
}

// GPT-2's derived sizes (KVH = NH, HS = C/NH, FF = 4C, biases, tied head), set by
// everything that makes a GPT-2 configuration.
static void model_config_defaults(ModelConfig *c) {
    c->family = FAMILY_GPT2;
    c->KVH = c->NH; c->HS = c->NH > 0 ? c->C / c->NH : 0; c->FF = 4 * c->C;
    c->qkv_bias = 1; c->tied = 1;
    c->rope_theta = 0; c->rope_factor = 0; c->rope_low_freq = c->rope_high_freq = 0; c->rope_orig_maxT = 0;
    c->bos_id = c->eos_id = -1;
    c->n_eos_more = 0;
    memset(c->eos_more, 0, sizeof c->eos_more);
    c->mlp_act = MLP_GELU;
    c->qk_norm = c->norm_plus_one = c->post_norms = 0;
    c->embed_scale = c->attn_scalar = 0;
    c->window = 0;
    c->rope_local_theta = c->rope_linear = 0;
    memset(c->layer_flags, 0, sizeof c->layer_flags);
}

// The features of family f on top of the Llama block (model_config_defaults first;
// sizes, rotary bases and windows are the caller's): the MLP and norms, biases, and
// for Gemma 3 the embedding scale sqrt(C) (in float, as transformers casts it).
static void llama_family_features(ModelConfig *c, int f) {
    c->family = f;
    c->mlp_act = f == FAMILY_GEMMA3 ? MLP_GEGLU : MLP_SWIGLU;
    c->qkv_bias = f == FAMILY_QWEN2;
    c->qk_norm = f == FAMILY_QWEN3 || f == FAMILY_GEMMA3;
    c->norm_plus_one = c->post_norms = f == FAMILY_GEMMA3;
    c->embed_scale = f == FAMILY_GEMMA3 ? (float)sqrt((double)c->C) : 0.0f;
}

static void model_check_config(const ModelConfig *c, const char *what) {
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
    if (c->rope_linear != 0 && !(c->rope_linear >= 1 && c->rope_linear < 1e6 && c->rope_factor == 0))
        fatal("%s: linear rope scaling factor %g out of range", what, c->rope_linear);
    if (c->rope_local_theta != 0 && !(c->rope_local_theta > 1 && c->rope_local_theta < 1e12))
        fatal("%s: local rope theta %g out of range", what, c->rope_local_theta);
    if (c->L > MAX_LAYERS) fatal("%s: %d layers, at most %d are supported", what, c->L, MAX_LAYERS);
    if (any_layer_flag(c, LAYER_SLIDING) && !(c->window >= 1 && c->window <= 1 << 20))
        fatal("%s: sliding-window layers with a window of %d positions", what, c->window);
    if (!(c->attn_scalar >= 0 && c->attn_scalar < 1e9) || !(c->embed_scale >= 0 && c->embed_scale < 1e4))
        fatal("%s: query_pre_attn_scalar %g or embedding scale %g out of range", what, c->attn_scalar, c->embed_scale);
}

// Size descriptors for fresh models (tests, demos, benchmarks):
//   "dN": GPT-2 with N layers, 64*N channels, N heads (head size 64), context 1024;
//         suffixes override: c<channels> h<heads> t<context>, e.g. d4c256h4t512.
//   "lN": Llama with N layers, 64*N channels, N heads of size C/heads, as many
//         key/value heads, intermediate size 8C/3 rounded up to a multiple of 64,
//         context 1024, rope_theta 10000, RMSNorm eps 1e-5, tied head; suffixes
//         c<channels> h<heads> k<kv heads> f<intermediate> t<context> a<head size>
//         as numbers, the letters u (untied lm_head) and b (q/k/v biases: Qwen2), and
//         one family letter:
//           q  Qwen3: q/k norms, no biases;
//           n  SmolLM3: no RoPE on every 4th layer (l % 4 == 3);
//           g  Gemma 3: embeddings times sqrt(C), (1 + w) norms, post norms, q/k norms,
//              GeGLU, every p-th layer (p<N>, default 6: l % p == p - 1) full attention
//              and the others sliding with window w<N> (default 512) and rotary base 10000
//              (rope_theta 1e6 on the full ones), query_pre_attn_scalar = head size.
//         SmolLM2-135M's shape is l30c576h9k3f1536; Qwen3-0.6B's l28c1024h16k8f3072a128q.
// Returns 0 if desc is a descriptor, -1 if it is not one (sizes are checked later
// by model_check_config).
static int model_parse_descriptor(const char *desc, ModelConfig *cfg) {
    if ((desc[0] != 'd' && desc[0] != 'l') || !isdigit((unsigned char)desc[1])) return -1;
    int llama = desc[0] == 'l';
    const char *p = desc + 1;
    char *end;
    long L = strtol(p, &end, 10);
    long C = 64 * L, NH = L, KVH = -1, FF = -1, T = 1024, HS = -1, window = 512, pattern = 6, untied = 0, bias = 0;
    int family = FAMILY_LLAMA;
    p = end;
    while (*p) {
        char key = *p++;
        if (llama && (key == 'u' || key == 'b')) { if (key == 'u') untied = 1; else bias = 1; continue; }
        if (llama && (key == 'q' || key == 'n' || key == 'g')) {
            if (family != FAMILY_LLAMA) return -1;
            family = key == 'q' ? FAMILY_QWEN3 : key == 'n' ? FAMILY_SMOLLM3 : FAMILY_GEMMA3;
            continue;
        }
        if (!isdigit((unsigned char)*p)) return -1;
        long v = strtol(p, &end, 10);
        p = end;
        if (key == 'c') C = v;
        else if (key == 'h') NH = v;
        else if (key == 't') T = v;
        else if (llama && key == 'k') KVH = v;
        else if (llama && key == 'f') FF = v;
        else if (llama && key == 'a') HS = v;
        else if (llama && key == 'w') window = v;
        else if (llama && key == 'p') pattern = v;
        else return -1;
    }
    if (L < 1 || L > MAX_LAYERS || C < 1 || C > 65536 || NH < 1 || NH > C || T < 1 || T > 1 << 20) return -1;
    if (bias && family != FAMILY_LLAMA) return -1;
    cfg->L = (int)L; cfg->C = (int)C; cfg->NH = (int)NH; cfg->maxT = (int)T; cfg->eps = 1e-5f;
    model_config_defaults(cfg);
    if (!llama) return 0;
    if (KVH < 1 || KVH > NH) KVH = KVH == -1 ? NH : 0;
    if (FF == -1) FF = (8 * C / 3 + 63) / 64 * 64;
    if (HS == -1) HS = C / NH;
    if (FF < 1 || FF > 1 << 20 || HS < 1 || HS > 1024 || window < 1 || window > 1 << 20 || pattern < 1 || pattern > MAX_LAYERS) return -1;
    cfg->KVH = (int)KVH; cfg->HS = (int)HS; cfg->FF = (int)FF;
    llama_family_features(cfg, bias ? FAMILY_QWEN2 : family);
    cfg->tied = !untied;
    cfg->rope_theta = 10000.0f;
    if (family == FAMILY_SMOLLM3)
        for (int l = 0; l < L; l++) cfg->layer_flags[l] = l % 4 == 3 ? LAYER_NO_ROPE : 0;
    if (family == FAMILY_GEMMA3) {
        cfg->rope_theta = 1e6f;
        cfg->rope_local_theta = 10000.0f;
        cfg->attn_scalar = (float)HS;
        cfg->window = (int)window;
        for (int l = 0; l < L; l++) cfg->layer_flags[l] = l % pattern == pattern - 1 ? 0 : LAYER_SLIDING;
        if (!any_layer_flag(cfg, LAYER_SLIDING)) cfg->window = 0;  // p1: every layer full
    }
    return 0;
}

// Fresh initialization: weights normal(0, 0.02), the two residual projections of
// each layer (attproj/o_proj, fcproj/down_proj) normal(0, 0.02/sqrt(2L)), biases 0,
// norm scales 1 (w = 0 where norms scale by 1 + w). Deterministic in seed.
static void model_init_random(const ModelConfig *cfg, ParamTensors *p, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    float resid_std = 0.02f / sqrtf(2.0f * (float)cfg->L);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        size_t n = param_numel(cfg, i);
        float *t = p->t[i];
        int norm = i == P_LN1W || i == P_LN2W || i == P_LNFW || i == P_QNORMW || i == P_KNORMW || i == P_POSTATTNW || i == P_POSTFFNW;
        if (norm) { for (size_t k = 0; k < n; k++) t[k] = cfg->norm_plus_one ? 0.0f : 1.0f; }
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
static void model_grow_vocab(ModelConfig *cfg, float **mem, ParamTensors *p, int new_V) {
    ModelConfig grown = *cfg;
    grown.V = new_V;
    float *nm = (float *)xmalloc(model_num_parameters(&grown) * sizeof(float));
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

// bos_token_id / eos_token_id: an id, a list of ids (the first; hf_eos_more keeps the rest) or null (-1);
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

// The ids after the first of an eos_token_id list, kept so export writes the list back
// (transformers' generate stops on any of them); at most 3.
static void hf_eos_more(const JsonValue *root, const char *path, ModelConfig *cfg) {
    const JsonValue *v = json_get(root, "eos_token_id");
    cfg->n_eos_more = 0;
    if (!v || v->type != JSON_ARRAY) return;
    if (v->count > 4) fatal("%s: eos_token_id lists %d ids; at most 4 are supported", path, (int)v->count);
    for (int k = 1; k < (int)v->count; k++) {
        int64_t x;
        if (json_int64(&v->items[k], &x) != 0 || x < 0 || x > INT32_MAX) fatal("%s: field \"eos_token_id\" must be a token id, a list of token ids or null", path);
        cfg->eos_more[cfg->n_eos_more++] = (int)x;
    }
}

static void hf_config_gpt2(const JsonValue *root, const char *path, ModelConfig *cfg) {
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
    model_config_defaults(cfg);
    // absent: ModelConfig's default 50256, where the vocabulary has it
    int dflt = cfg->V > 50256 ? 50256 : -1;
    cfg->bos_id = hf_token_id(root, "bos_token_id", path, dflt);
    cfg->eos_id = hf_token_id(root, "eos_token_id", path, dflt);
    hf_eos_more(root, path, cfg);
}

// One rotary description: rope_theta (default_theta when absent) and the scaling in
// `scaling` (null or an object; `what` names it in errors): none, "default" (none),
// "llama3", or "linear" where allow_linear (the newer families: every frequency
// divided by factor). theta_src holds rope_theta.
static void hf_rope_entry(const JsonValue *theta_src, const JsonValue *scaling, const char *what, const char *path, int allow_linear,
                          double default_theta, ModelConfig *cfg) {
    cfg->rope_theta = (float)json_field_num(theta_src, "rope_theta", path, 0, default_theta);
    cfg->rope_factor = cfg->rope_low_freq = cfg->rope_high_freq = cfg->rope_linear = 0;
    cfg->rope_orig_maxT = 0;
    if (!scaling) return;
    if (scaling->type != JSON_OBJECT) fatal("%s: %s must be null or an object", path, what);
    const JsonValue *type = json_get(scaling, "rope_type");
    if (!type) type = json_get(scaling, "type");
    if (!type || type->type != JSON_STRING) fatal("%s: %s has no \"rope_type\" string", path, what);
    if (!strcmp(type->string, "default")) return;
    if (allow_linear && !strcmp(type->string, "linear")) {
        cfg->rope_linear = (float)json_field_num(scaling, "factor", path, 1, 0);
        if (cfg->rope_linear == 0) fatal("%s: %s factor must not be 0", path, what);
        return;
    }
    if (strcmp(type->string, "llama3") != 0)
        fatal("%s: %s type \"%.40s\" is not supported (only \"llama3\"%s, or none)", path, what, type->string, allow_linear ? ", \"linear\"" : "");
    cfg->rope_factor = (float)json_field_num(scaling, "factor", path, 1, 0);
    cfg->rope_low_freq = (float)json_field_num(scaling, "low_freq_factor", path, 1, 0);
    cfg->rope_high_freq = (float)json_field_num(scaling, "high_freq_factor", path, 1, 0);
    cfg->rope_orig_maxT = json_field_int(scaling, "original_max_position_embeddings", path, 1, 0);
    if (cfg->rope_factor == 0) fatal("%s: %s factor must not be 0", path, what);
}

// rope_theta and rope_scaling (transformers 4.x writes them), or both inside
// rope_parameters (transformers 5.x).
static void hf_config_rope(const JsonValue *root, const char *path, int allow_linear, double default_theta, ModelConfig *cfg) {
    const JsonValue *params = hf_field(root, "rope_parameters", path, 0);
    if (params && params->type != JSON_OBJECT) fatal("%s: rope_parameters must be an object", path);
    if (params) hf_rope_entry(params, params, "rope_parameters", path, allow_linear, default_theta, cfg);
    else hf_rope_entry(root, hf_field(root, "rope_scaling", path, 0), "rope_scaling", path, allow_linear, default_theta, cfg);
}

// Gemma 3's two rotary tables: the full-attention layers' rope_theta (default 1e6)
// with rope_scaling (none or linear), the sliding layers' rope_local_base_freq
// (default 10000, never scaled); or transformers 5.x's rope_parameters with one
// entry per layer type, {"full_attention": {...}, "sliding_attention": {...}}.
static void hf_config_rope_gemma3(const JsonValue *root, const char *path, ModelConfig *cfg) {
    const JsonValue *params = hf_field(root, "rope_parameters", path, 0);
    if (!params) {
        hf_rope_entry(root, hf_field(root, "rope_scaling", path, 0), "rope_scaling", path, 1, 1e6, cfg);
        cfg->rope_local_theta = (float)json_field_num(root, "rope_local_base_freq", path, 0, 10000.0);
    } else {
        const JsonValue *full = params->type == JSON_OBJECT ? json_get(params, "full_attention") : NULL;
        const JsonValue *local = params->type == JSON_OBJECT ? json_get(params, "sliding_attention") : NULL;
        if (!full || !local || full->type != JSON_OBJECT || local->type != JSON_OBJECT)
            fatal("%s: rope_parameters must hold \"full_attention\" and \"sliding_attention\" objects", path);
        ModelConfig sliding = *cfg;
        hf_rope_entry(local, local, "rope_parameters.sliding_attention", path, 0, 10000.0, &sliding);
        if (sliding.rope_factor != 0) fatal("%s: rope_parameters.sliding_attention must have rope_type \"default\"", path);
        hf_rope_entry(full, full, "rope_parameters.full_attention", path, 1, 1e6, cfg);
        cfg->rope_local_theta = sliding.rope_theta;
    }
    if (cfg->rope_factor != 0) fatal("%s: Gemma 3's rope scaling must be \"linear\" or none", path);
}

// layer_types (a list of "full_attention" / "sliding_attention", one per layer):
// sets LAYER_SLIDING where it says sliding and the model has a window (window > 0;
// transformers ignores the entry otherwise). Absent: returns 0 and sets nothing.
static int hf_layer_types(const JsonValue *root, const char *path, ModelConfig *cfg) {
    const JsonValue *v = hf_field(root, "layer_types", path, 0);
    if (!v) return 0;
    if (v->type != JSON_ARRAY || (int)v->count < cfg->L || cfg->L > MAX_LAYERS)
        fatal("%s: layer_types must list \"full_attention\" or \"sliding_attention\" for each of the %d layers", path, cfg->L);
    for (int l = 0; l < cfg->L; l++) {
        const JsonValue *t = &v->items[l];
        int sliding = t->type == JSON_STRING && !strcmp(t->string, "sliding_attention");
        if (!sliding && !(t->type == JSON_STRING && !strcmp(t->string, "full_attention")))
            fatal("%s: layer_types[%d] must be \"full_attention\" or \"sliding_attention\"", path, l);
        if (sliding && cfg->window > 0) cfg->layer_flags[l] |= LAYER_SLIDING;
    }
    return 1;
}

// sliding_window: a positive integer, null (0: no window) or absent (fallback).
static int hf_sliding_window(const JsonValue *root, const char *path, int fallback) {
    const JsonValue *v = json_get(root, "sliding_window");
    if (!v) return fallback;
    if (v->type == JSON_NULL) return 0;
    int w = json_field_int(root, "sliding_window", path, 1, 0);
    if (w < 1) fatal("%s: sliding_window must be a positive integer or null", path);
    return w;
}

// A field that must be absent or null (a feature this trainer does not compute).
static void hf_refuse_non_null(const JsonValue *root, const char *key, const char *path) {
    if (hf_field(root, key, path, 0)) fatal("%s: %s is not supported (must be null or absent)", path, key);
}

// LlamaConfig, Qwen2Config, Qwen3Config, SmolLM3Config and Gemma3TextConfig, with
// transformers' defaults for the optional fields (num_key_value_heads = heads;
// head_dim = hidden/heads, Qwen3 128, Gemma 3 256; rms_norm_eps 1e-6; rope_theta
// 10000, SmolLM3 2e6, Gemma 3 1e6; tie_word_embeddings false, SmolLM3 and Gemma 3
// true; bos/eos 1/2 for Llama, 128000/128001 for SmolLM3, 2/1 for Gemma 3, none for
// Qwen). Features this trainer does not compute are refused, never ignored.
static void hf_config_llama(const JsonValue *root, const char *path, int family, ModelConfig *cfg) {
    int qwen3 = family == FAMILY_QWEN3, gemma = family == FAMILY_GEMMA3, smol = family == FAMILY_SMOLLM3;
    cfg->C = json_field_int(root, "hidden_size", path, 1, 0);
    cfg->NH = json_field_int(root, "num_attention_heads", path, 1, 0);
    cfg->L = json_field_int(root, "num_hidden_layers", path, 1, 0);
    cfg->maxT = json_field_int(root, "max_position_embeddings", path, 1, 0);
    cfg->V = json_field_int(root, "vocab_size", path, 1, 0);
    if (cfg->L > MAX_LAYERS) fatal("%s: %d layers, at most %d are supported", path, cfg->L, MAX_LAYERS);
    model_config_defaults(cfg);
    llama_family_features(cfg, family);
    cfg->FF = json_field_int(root, "intermediate_size", path, 1, 0);
    cfg->KVH = json_field_int(root, "num_key_value_heads", path, 0, cfg->NH);
    int default_hs = qwen3 ? 128 : gemma ? 256 : cfg->NH > 0 ? cfg->C / cfg->NH : 0;
    if (!qwen3 && !gemma && !hf_field(root, "head_dim", path, 0) && cfg->NH > 0 && cfg->C % cfg->NH)
        fatal("%s: hidden_size %d does not divide into %d heads and there is no head_dim", path, cfg->C, cfg->NH);
    cfg->HS = json_field_int(root, "head_dim", path, 0, default_hs);
    cfg->eps = (float)json_field_num(root, "rms_norm_eps", path, 0, 1e-6);
    cfg->tied = json_field_bool(root, "tie_word_embeddings", path, gemma || smol);
    const char *act_key = gemma ? "hidden_activation" : "hidden_act", *act_want = gemma ? "gelu_pytorch_tanh" : "silu";
    const JsonValue *act = hf_field(root, act_key, path, 0);
    if (act && (act->type != JSON_STRING || strcmp(act->string, act_want) != 0))
        fatal("%s: %s must be \"%s\" (%s MLP)", path, act_key, act_want, gemma ? "GeGLU" : "SwiGLU");
    if (family != FAMILY_QWEN2 && json_field_bool(root, "attention_bias", path, 0))
        fatal("%s: attention_bias true (biases on q, k, v and o_proj) is not supported", path);
    if (json_field_bool(root, "mlp_bias", path, 0)) fatal("%s: mlp_bias true is not supported", path);
    if (family == FAMILY_LLAMA || family == FAMILY_QWEN2) {
        if (json_field_bool(root, "use_sliding_window", path, 0)) fatal("%s: use_sliding_window true (sliding-window attention) is not supported", path);
        hf_config_rope(root, path, 0, 10000.0, cfg);
    } else if (qwen3) {  // Qwen3Config: the window only with use_sliding_window; layers from max_window_layers on
        int use = json_field_bool(root, "use_sliding_window", path, 0);
        cfg->window = use ? hf_sliding_window(root, path, 4096) : 0;
        int from = json_field_int(root, "max_window_layers", path, 0, 28);
        if (!hf_layer_types(root, path, cfg) && cfg->window > 0)
            for (int l = from; l < cfg->L; l++) cfg->layer_flags[l] |= LAYER_SLIDING;
        hf_config_rope(root, path, 1, 10000.0, cfg);
    } else if (smol) {  // SmolLM3Config: no_rope_layers[l] 1 = RoPE, 0 = NoPE; by default every interval-th layer NoPE
        const JsonValue *nr = hf_field(root, "no_rope_layers", path, 0);
        int interval = json_field_int(root, "no_rope_layer_interval", path, 0, 4);
        if (!nr && interval < 1) fatal("%s: no_rope_layer_interval must be at least 1", path);
        if (nr && (nr->type != JSON_ARRAY || (int)nr->count < cfg->L))
            fatal("%s: no_rope_layers must list 0 or 1 for each of the %d layers", path, cfg->L);
        for (int l = 0; l < cfg->L; l++) {
            int64_t x = (l + 1) % (interval ? interval : 1) != 0;
            if (nr && (json_int64(&nr->items[l], &x) != 0 || (x != 0 && x != 1))) fatal("%s: no_rope_layers[%d] must be 0 or 1", path, l);
            if (x == 0) cfg->layer_flags[l] |= LAYER_NO_ROPE;
        }
        cfg->window = hf_sliding_window(root, path, 0);
        if (!hf_layer_types(root, path, cfg) && json_field_bool(root, "use_sliding_window", path, 0) && cfg->window > 0)
            for (int l = 0; l < cfg->L; l++)
                if (cfg->layer_flags[l] & LAYER_NO_ROPE) cfg->layer_flags[l] |= LAYER_SLIDING;
        hf_config_rope(root, path, 1, 2000000.0, cfg);
    } else {  // Gemma3TextConfig: layer_types, or every sliding_window_pattern-th layer full
        hf_refuse_non_null(root, "attn_logit_softcapping", path);
        hf_refuse_non_null(root, "final_logit_softcapping", path);
        if (json_field_bool(root, "use_bidirectional_attention", path, 0)) fatal("%s: use_bidirectional_attention true is not supported", path);
        cfg->window = hf_sliding_window(root, path, 4096);
        int pattern = json_field_int(root, "sliding_window_pattern", path, 0, 6);
        if (!hf_layer_types(root, path, cfg)) {
            if (pattern < 1) fatal("%s: sliding_window_pattern must be at least 1", path);
            for (int l = 0; l < cfg->L; l++)
                if ((l + 1) % pattern != 0 && cfg->window > 0) cfg->layer_flags[l] |= LAYER_SLIDING;
        }
        cfg->attn_scalar = (float)json_field_num(root, "query_pre_attn_scalar", path, 0, 256.0);
        if (!(cfg->attn_scalar > 0)) fatal("%s: query_pre_attn_scalar must be positive", path);
        hf_config_rope_gemma3(root, path, cfg);
    }
    if (!any_layer_flag(cfg, LAYER_SLIDING)) cfg->window = 0;
    int bos = family == FAMILY_LLAMA ? 1 : smol ? 128000 : gemma ? 2 : -1, eos = family == FAMILY_LLAMA ? 2 : smol ? 128001 : gemma ? 1 : -1;
    cfg->bos_id = hf_token_id(root, "bos_token_id", path, bos);
    cfg->eos_id = hf_token_id(root, "eos_token_id", path, eos);
    hf_eos_more(root, path, cfg);
}

// Reads a config.json's text[0..len) (path names it in errors): model_type "gpt2"
// (or none: older GPT-2 files), "llama", "qwen2", "qwen3", "gemma3_text" or "smollm3".
static void model_parse_hf_config(const char *path, const char *text, size_t len, ModelConfig *cfg) {
    JsonDoc doc;
    if (json_parse(text, len, &doc) != 0) fatal("%s: invalid JSON: %s", path, doc.error);
    if (doc.root->type != JSON_OBJECT) fatal("%s: expected a JSON object", path);
    memset(cfg, 0, sizeof *cfg);
    const JsonValue *mt = json_get(doc.root, "model_type");
    if (mt && mt->type != JSON_STRING) fatal("%s: model_type must be a string", path);
    if (!mt || !strcmp(mt->string, "gpt2")) hf_config_gpt2(doc.root, path, cfg);
    else if (!strcmp(mt->string, "llama")) hf_config_llama(doc.root, path, FAMILY_LLAMA, cfg);
    else if (!strcmp(mt->string, "qwen2")) hf_config_llama(doc.root, path, FAMILY_QWEN2, cfg);
    else if (!strcmp(mt->string, "qwen3")) hf_config_llama(doc.root, path, FAMILY_QWEN3, cfg);
    else if (!strcmp(mt->string, "gemma3_text")) hf_config_llama(doc.root, path, FAMILY_GEMMA3, cfg);
    else if (!strcmp(mt->string, "smollm3")) hf_config_llama(doc.root, path, FAMILY_SMOLLM3, cfg);
    else if (!strcmp(mt->string, "gemma3"))
        fatal("%s: model_type \"gemma3\" (Gemma3ForConditionalGeneration, text and vision) is not supported: only the text models, model_type \"gemma3_text\" (Gemma 3 270M, 1B)", path);
    else fatal("%s: model_type \"%.40s\" is not supported (gpt2, llama, qwen2, qwen3, gemma3_text, smollm3)", path, mt->string);
    json_free(&doc);
    model_check_config(cfg, path);
}

static void model_read_hf_config(const char *dir, ModelConfig *cfg) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len;
    char *text = read_whole_file(path, &len);
    model_parse_hf_config(path, text, len, cfg);
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
static const StTensor *model_hf_part(const HfWeights *w, const ModelConfig *cfg, int i, int l, const HfPart *part, const SafeTensors **file) {
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
// (model_num_parameters floats) only once every tensor is found with its shape, so
// the parameters take at most twice the files' size (tensors do not overlap;
// F16/BF16 widen to fp32), however large a model config.json describes.
static void model_load_hf_weights(HfWeights *w, const ModelConfig *cfg, float **mem, ParamTensors *p) {
    for (int pass = 0; pass < 2; pass++) {  // 0: find and check every tensor; 1: copy
        if (pass == 1) {
            *mem = (float *)xmalloc(model_num_parameters(cfg) * sizeof(float));
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
                    const StTensor *t = model_hf_part(w, cfg, i, l, &parts[k], &file);
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
static void model_load_hf_opened(SafeTensors *st, const ModelConfig *cfg, float **mem, ParamTensors *p) {
    HfWeights w;
    memset(&w, 0, sizeof w);
    w.files = (SafeTensors *)xmalloc(sizeof(SafeTensors));
    w.files[0] = *st;
    w.nfiles = 1;
    memset(st, 0, sizeof *st);
    model_load_hf_weights(&w, cfg, mem, p);
}

static void model_load_hf(const char *dir, ModelConfig *cfg, float **mem, ParamTensors *p) {
    model_read_hf_config(dir, cfg);
    HfWeights w;
    hf_weights_open(dir, &w);
    model_load_hf_weights(&w, cfg, mem, p);
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

// config.json entries, written sorted by key as transformers writes them.
typedef struct { const char *key; char *value; } HfEntry;
typedef struct { HfEntry e[48]; int n; } HfEntries;

static void hf_entry(HfEntries *es, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void hf_entry(HfEntries *es, const char *key, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *v = (char *)xmalloc((size_t)n + 1);
    vsnprintf(v, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    es->e[es->n].key = key;
    es->e[es->n++].value = v;
}

static int hf_entry_cmp(const void *a, const void *b) { return strcmp(((const HfEntry *)a)->key, ((const HfEntry *)b)->key); }

// A JSON list of one string (or number) per layer: item(c, l).
static char *hf_layer_list(const ModelConfig *c, const char *(*item)(const ModelConfig *, int)) {
    size_t cap = 64 + (size_t)c->L * 32, n = 0;
    char *out = (char *)xmalloc(cap);
    n += (size_t)snprintf(out, cap, "[");
    for (int l = 0; l < c->L; l++) n += (size_t)snprintf(out + n, cap - n, "%s\n    %s", l ? "," : "", item(c, l));
    snprintf(out + n, cap - n, "\n  ]");
    return out;
}
static const char *hf_layer_type(const ModelConfig *c, int l) { return (c->layer_flags[l] & LAYER_SLIDING) ? "\"sliding_attention\"" : "\"full_attention\""; }
static const char *hf_layer_rope(const ModelConfig *c, int l) { return (c->layer_flags[l] & LAYER_NO_ROPE) ? "0" : "1"; }

// bos_token_id and eos_token_id as config.json writes them: an id or null; the eos a
// list where the model has several (bos needs 16 bytes, eos 96).
static void hf_token_ids_json(const ModelConfig *c, char *bos, size_t bn, char *eos, size_t en) {
    snprintf(bos, bn, "null");
    snprintf(eos, en, "null");
    if (c->bos_id >= 0) snprintf(bos, bn, "%d", c->bos_id);
    if (c->eos_id >= 0 && c->n_eos_more == 0) snprintf(eos, en, "%d", c->eos_id);
    else if (c->eos_id >= 0) {
        size_t e = (size_t)snprintf(eos, en, "[\n    %d", c->eos_id);
        for (int k = 0; k < c->n_eos_more; k++) e += (size_t)snprintf(eos + e, en - e, ",\n    %d", c->eos_more[k]);
        snprintf(eos + e, en - e, "\n  ]");
    }
}

// The Llama family's config.json: the fields each family's config class writes, with
// values that rebuild this model (Qwen2Config has no attention_bias, mlp_bias or
// pretraining_tp, and keeps its unused window fields; Gemma 3 as its published files,
// rope_theta / rope_local_base_freq / rope_scaling and layer_types).
static void hf_write_llama_config(const char *path, const ModelConfig *c) {
    int f = c->family, qwen2 = f == FAMILY_QWEN2, qwen3 = f == FAMILY_QWEN3, gemma = f == FAMILY_GEMMA3, smol = f == FAMILY_SMOLLM3;
    const char *arch = f == FAMILY_LLAMA ? "LlamaForCausalLM" : qwen2 ? "Qwen2ForCausalLM" : qwen3 ? "Qwen3ForCausalLM" : gemma ? "Gemma3ForCausalLM" : "SmolLM3ForCausalLM";
    const char *type = f == FAMILY_LLAMA ? "llama" : qwen2 ? "qwen2" : qwen3 ? "qwen3" : gemma ? "gemma3_text" : "smollm3";
    char eps[32], theta[32], scaling[512], fa[32], lo[32], hi[32], bos[16], eos[96];
    hf_token_ids_json(c, bos, sizeof bos, eos, sizeof eos);
    hf_json_float(eps, sizeof eps, c->eps);
    hf_json_float(theta, sizeof theta, c->rope_theta);
    hf_json_float(lo, sizeof lo, c->rope_low_freq);
    hf_json_float(hi, sizeof hi, c->rope_high_freq);
    if (c->rope_factor != 0) {
        hf_json_float(fa, sizeof fa, c->rope_factor);
        snprintf(scaling, sizeof scaling,
                 "{\n    \"factor\": %s,\n    \"high_freq_factor\": %s,\n    \"low_freq_factor\": %s,\n"
                 "    \"original_max_position_embeddings\": %d,\n    \"rope_type\": \"llama3\"\n  }",
                 fa, hi, lo, c->rope_orig_maxT);
    } else if (c->rope_linear != 0) {
        hf_json_float(fa, sizeof fa, c->rope_linear);
        snprintf(scaling, sizeof scaling, "{\n    \"factor\": %s,\n    \"rope_type\": \"linear\"\n  }", fa);
    } else snprintf(scaling, sizeof scaling, "null");
    int sliding = any_layer_flag(c, LAYER_SLIDING);
    HfEntries es;
    es.n = 0;
    hf_entry(&es, "architectures", "[\n    \"%s\"\n  ]", arch);
    if (!qwen2) hf_entry(&es, "attention_bias", "false");
    hf_entry(&es, "attention_dropout", "0.0");
    hf_entry(&es, "bos_token_id", "%s", bos);
    hf_entry(&es, "eos_token_id", "%s", eos);
    if (!(qwen2 || smol) || c->HS * c->NH != c->C) hf_entry(&es, "head_dim", "%d", c->HS);  // Qwen2, SmolLM3: only if not hidden/heads
    hf_entry(&es, gemma ? "hidden_activation" : "hidden_act", gemma ? "\"gelu_pytorch_tanh\"" : "\"silu\"");
    hf_entry(&es, "hidden_size", "%d", c->C);
    hf_entry(&es, "initializer_range", "0.02");
    hf_entry(&es, "intermediate_size", "%d", c->FF);
    hf_entry(&es, "max_position_embeddings", "%d", c->maxT);
    if (qwen2 || qwen3) hf_entry(&es, "max_window_layers", "%d", c->L);
    if (f == FAMILY_LLAMA || smol) hf_entry(&es, "mlp_bias", "false");
    hf_entry(&es, "model_type", "\"%s\"", type);
    hf_entry(&es, "num_attention_heads", "%d", c->NH);
    hf_entry(&es, "num_hidden_layers", "%d", c->L);
    hf_entry(&es, "num_key_value_heads", "%d", c->KVH);
    if (f == FAMILY_LLAMA) hf_entry(&es, "pretraining_tp", "1");
    hf_entry(&es, "rms_norm_eps", "%s", eps);
    hf_entry(&es, "rope_scaling", "%s", scaling);
    hf_entry(&es, "rope_theta", "%s", theta);
    if (qwen2) hf_entry(&es, "sliding_window", "null");  // what Qwen2Config keeps without use_sliding_window
    if (qwen3 || gemma || smol) {
        char *types = hf_layer_list(c, hf_layer_type);
        hf_entry(&es, "layer_types", "%s", types);
        free(types);
        if (sliding) hf_entry(&es, "sliding_window", "%d", c->window);
        else hf_entry(&es, "sliding_window", "null");
    }
    if (qwen3 || smol) hf_entry(&es, "use_sliding_window", sliding ? "true" : "false");
    if (smol) {
        char *rope = hf_layer_list(c, hf_layer_rope);
        hf_entry(&es, "no_rope_layers", "%s", rope);
        free(rope);
    }
    if (gemma) {
        char local[32], scalar[32];
        hf_json_float(local, sizeof local, c->rope_local_theta);
        hf_json_float(scalar, sizeof scalar, c->attn_scalar);
        hf_entry(&es, "attn_logit_softcapping", "null");
        hf_entry(&es, "final_logit_softcapping", "null");
        hf_entry(&es, "query_pre_attn_scalar", "%s", scalar);
        hf_entry(&es, "rope_local_base_freq", "%s", local);
    }
    hf_entry(&es, "tie_word_embeddings", c->tied ? "true" : "false");
    hf_entry(&es, "torch_dtype", "\"float32\"");
    hf_entry(&es, "use_cache", "true");
    if (qwen2) hf_entry(&es, "use_sliding_window", "false");
    hf_entry(&es, "vocab_size", "%d", c->V);
    qsort(es.e, (size_t)es.n, sizeof es.e[0], hf_entry_cmp);
    size_t cap = 256, len = 0;
    for (int k = 0; k < es.n; k++) cap += strlen(es.e[k].key) + strlen(es.e[k].value) + 8;
    char *json = (char *)xmalloc(cap);
    len += (size_t)snprintf(json, cap, "{\n");
    for (int k = 0; k < es.n; k++) {
        len += (size_t)snprintf(json + len, cap - len, "  \"%s\": %s%s\n", es.e[k].key, es.e[k].value, k + 1 < es.n ? "," : "");
        free(es.e[k].value);
    }
    len += (size_t)snprintf(json + len, cap - len, "}\n");
    write_file_atomic(path, json, len);
    free(json);
}

// Writes dir/config.json.
static void hf_write_config(const char *dir, const ModelConfig *c) {
    char path[4096], json[4096], bos[16], eos[96];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (is_llama_family(c)) { hf_write_llama_config(path, c); return; }
    hf_token_ids_json(c, bos, sizeof bos, eos, sizeof eos);
    int n = snprintf(json, sizeof json,
        "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
        "  \"bos_token_id\": %s,\n  \"eos_token_id\": %s,\n"
        "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n"
        "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": null,\n  \"layer_norm_epsilon\": %.9g,\n"
        "  \"activation_function\": \"gelu_new\",\n  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n"
        "  \"attn_pdrop\": 0.0,\n  \"initializer_range\": 0.02,\n  \"tie_word_embeddings\": true,\n"
        "  \"torch_dtype\": \"float32\"\n}\n",
        bos, eos, c->V, c->maxT, c->maxT, c->C, c->L, c->NH, (double)c->eps);
    write_file_atomic(path, json, (size_t)n);
}

// The tensors of the export in transformers' names: the embeddings, then layer by
// layer (so shards, filled in this order, split between layers mostly), then the final
// norm and lm_head. Returns the count; *out is allocated.
static int hf_export_tensors(const ModelConfig *cfg, const ParamTensors *p, StOut **out) {
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

static void model_save_hf_sharded(const char *dir, const ModelConfig *cfg, const ParamTensors *p, uint64_t max_shard_bytes) {
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
static void model_save_hf(const char *dir, const ModelConfig *cfg, const ParamTensors *p) {
    model_save_hf_sharded(dir, cfg, p, hf_max_shard_bytes());
}

#endif
