// model.h: the model description shared by the CPU and CUDA trainers. Every
// family it knows (GPT-2; Llama 3.x and SmolLM2, which are Llama models; SmolLM3;
// Qwen2.5, model_type "qwen2"; Qwen3; Gemma 3) is a combination of features on one of
// two blocks, GPT-2's or Llama's (see below): ModelConfig holds the features, and the
// trainers compute from them, not from the family's name. Here: the configuration,
// size descriptors for fresh models, the parameter layout (every tensor in one
// allocation, in Hugging Face's layout so import and export are plain copies),
// fresh initialization and vocabulary growth.
// Not here: reading and writing Hugging Face model directories (config.json,
// safetensors: model/hf.h), LoRA adapters (model/lora.h), the forward and backward
// passes (train_sft.c, cuda/).
#ifndef SFT_MODEL_H
#define SFT_MODEL_H

#include <ctype.h>
#include <math.h>
#include "../base/rng.h"
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
    int pad_id;          // its pad_token_id, -1 if absent or null (written back on export: SmolLM3Config's
                         // default 128004 lies outside a smaller vocabulary, so null must be said)
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

// The model's end ids (config.json's eos_token_id, all of a list) into ids[0..4);
// returns how many.
static int model_end_ids(const ModelConfig *c, int ids[4]) {
    int n = 0;
    if (c->eos_id >= 0) ids[n++] = c->eos_id;
    for (int k = 0; k < c->n_eos_more && n < 4; k++) ids[n++] = c->eos_more[k];
    return n;
}

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
// hf_name: transformers' name of the tensor in GPT-2 (param_hf_parts gives the Llama
// family's; the tensors only it has are named here); per_layer: stacked over layers;
// decay: AdamW decays it (matrices and embeddings).
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

// Where every configuration starts, from its sizes L, NH, C, V, maxT and eps: GPT-2's
// block with its derived sizes (KVH = NH, HS = C/NH, FF = 4C, biases, tied head) and
// none of the newer features. The Llama family then sets its own (llama_family_features
// and the caller's sizes).
static void model_config_defaults(ModelConfig *c) {
    c->family = FAMILY_GPT2;
    c->KVH = c->NH; c->HS = c->NH > 0 ? c->C / c->NH : 0; c->FF = 4 * c->C;
    c->qkv_bias = 1; c->tied = 1;
    c->rope_theta = 0; c->rope_factor = 0; c->rope_low_freq = c->rope_high_freq = 0; c->rope_orig_maxT = 0;
    c->bos_id = c->eos_id = c->pad_id = -1;
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

// The two fills of model_init_random, each its own function: gcc 12 vectorizes the
// constant fill with 256-bit registers and, inlined next to the normal fill's calls to
// log and cos, does not clear their upper halves first (vzeroupper), which makes every
// libm call stall: GPT-2 124M's initialization took 30 s instead of 6.
__attribute__((noinline)) static void fill_floats(float *t, size_t n, float value) {
    for (size_t k = 0; k < n; k++) t[k] = value;
}
__attribute__((noinline)) static void fill_normal(float *t, size_t n, float std, Rng *r) {
    for (size_t k = 0; k < n; k++) t[k] = std * rng_normal(r);
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
        if (norm) fill_floats(t, n, cfg->norm_plus_one ? 0.0f : 1.0f);
        else if (!PARAM_INFO[i].decay) memset(t, 0, n * sizeof(float));
        else fill_normal(t, n, (i == P_ATTPROJW || i == P_FCPROJW) ? resid_std : 0.02f, &r);
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

#endif
