// lora.h: LoRA (low-rank adapters, Hu et al. 2021) as both trainers share it: the
// settings, which Hugging Face modules are adapted and where each one sits in the
// fused base tensors of model/model.h, the one fp32 allocation of the adapter tensors,
// their initialization, the dropout mask, and the adapter files in PEFT's format
// (adapter_config.json + adapter_model.safetensors: write, read, merge).
//
// It is not the forward/backward code (cpu/lora.h with the CPU's gemm, cuda/lora.cuh with cuBLAS)
// and not the optimizer (the trainers run AdamW over lora_floats() floats instead of
// the base's parameters).
//
// Math (PEFT's LoraLayer, with s = alpha / R, or alpha / sqrt(R) with rsLoRA):
//   y = x W^T (+ b) + s * dropout(x) A^T B^T        A [R, in], B [out, R]
// A targeted module is a slice of a fused product of model/model.h: the output columns
// [off, off + rows) of P_QKVW (Llama family: q | k | v), P_FCW (gate | up), or the whole
// output of P_ATTPROJW, P_FCPROJW (and GPT-2's c_attn, c_fc). With h = dropout(x) A^T
// [N, R] and dout the gradient of that output slice [N, rows]:
//   forward:  out[:, off:off+rows] += s * h B^T
//   backward: dB = s * dout^T h,  dh = s * dout B,  dA = dh^T dropout(x),  dx += mask * (dh A)
// (mask the dropout's 0 or 1/(1-p) per element; the base W gets no gradient, dx also
// gets the base's dout W.) Dropout is on while training only (never at validation,
// evaluation or generation).
//
// Merging: W += s * B A on the slice; GPT-2's Conv1D stores W as [in, out] (W_IN_OUT),
// so there the update is W[i][off + o] += s * (B A)[o][i] (PEFT's fan_in_fan_out).
//
// Adapter memory: for each layer (in order), for each targeted module (in the order of
// LORA_MODULES), A then B, as lora_layout_init lays them out; the trainers keep the
// adapters, their gradients and AdamW moments in such blocks, like ParamTensors.
//
// Initialization (PEFT's reset_lora_parameters with init_lora_weights=True): A is
// Kaiming-uniform with a = sqrt(5), i.e. uniform in [-1/sqrt(in), 1/sqrt(in)); B = 0,
// so step 0 computes the base model. The random stream of adapter (layer l, module m)
// is its own Rng seeded with lora_init_seed(seed, l, m): the base's initialization,
// the data order and the sampling stream are untouched, and an adapter's A does not
// depend on which other modules are targeted.
//
// Dropout mask (counter-based, so it is the same on CPU and GPU, for any thread count
// or rank count, and after a resume): element e (= row * in + column of the module's
// [N, in] input in micro-batch k of optimizer step t, k counted over all ranks, 0..A*W-1)
// is kept iff lora_hash64(key + e) >> 40 >= lora_dropout_threshold(p), with
// key = lora_dropout_key(seed, t, k, l, m); kept elements are scaled by 1/(1-p).
//
// PEFT's format (peft/tuners/lora/layer.py, peft/utils/save_and_load.py): tensor
// names are the module's path in the PEFT model with the adapter name ("default")
// dropped: base_model.model.<module>.lora_A.weight [R, in] and .lora_B.weight [out, R],
// e.g. base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight (Llama family),
// base_model.model.transformer.h.0.attn.c_attn.lora_A.weight (GPT-2; the shapes are
// the same [R, in] and [out, R] for Conv1D, where fan_in_fan_out only changes the merge).
#ifndef SFT_LORA_H
#define SFT_LORA_H

#include <math.h>
#include "hf.h"
#include "hf_bnb4.h"
#include "model.h"
#include "../base/json.h"
#include "../base/rng.h"
#include "../base/safetensors.h"
#include "../base/util.h"

#ifdef __CUDACC__
#define LORA_HD __host__ __device__
#else
#define LORA_HD
#endif

// LoRA's alpha when none is given: PEFT's LoraConfig default (lora_alpha = 8), so the
// adapter's scale is 8 / R (e.g. 0.5 at R = 16; pass -B with 2R for a scale of 2).
#define LORA_DEFAULT_ALPHA 8.0f
#define LORA_MAX_RANK 4096

// The settings as the flags give them (train/trainer.h's LORA_FLAGS).
typedef struct {
    int rank;             // -A: R; 0 = full fine-tuning
    float alpha;          // -B: alpha
    float dropout;        // -p: dropout probability on the adapters' input, [0, 1)
    int rslora;           // -Q: 1 = scale alpha / sqrt(R) (rsLoRA), 0 = alpha / R
    const char *targets;  // -T: comma-separated Hugging Face module names; "" = every linear layer of attention and MLP
    int merged;           // -M: 1 = also write the merged model (base + s B A) to <out>/merged at the end
    const char *base;     // -F: base model for an adapter given to -e ("" = its base_model_name_or_path)
} LoraArgs;

static void lora_args_defaults(LoraArgs *a) {
    memset(a, 0, sizeof *a);
    a->alpha = LORA_DEFAULT_ALPHA;
    a->targets = "";
    a->base = "";
}

#define LORA_FLAGS(a)                                                                                         \
    {'A', FLAG_INT, &(a)->rank, "LoRA: adapter rank R; 0 = full fine-tuning (default 0)"},                     \
    {'B', FLAG_FLOAT, &(a)->alpha, "LoRA: alpha; the adapters' B*A is scaled by alpha/R (default 8, as PEFT's)"}, \
    {'p', FLAG_FLOAT, &(a)->dropout, "LoRA: dropout probability on the adapters' input, training only (default 0)"}, \
    {'Q', FLAG_INT, &(a)->rslora, "LoRA: 1 = rsLoRA, scale alpha/sqrt(R) (default 0)"},                        \
    {'T', FLAG_STRING, &(a)->targets, "LoRA: target modules, comma-separated Hugging Face names (default: all linear layers; q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj or GPT-2's c_attn,c_proj,c_fc)"}, \
    {'M', FLAG_INT, &(a)->merged, "LoRA: 1 = also write the merged model (base + scaled B*A) to <out>/merged at the end (default 0)"}, \
    {'F', FLAG_STRING, &(a)->base, "LoRA: base model of a PEFT adapter directory given to -e, when its base_model_name_or_path is not a local directory"}

// ---------------------------------------------------------------------------
// The adaptable modules. Llama family (all of Llama, Qwen2, Qwen3, SmolLM3, Gemma 3):
// part = which of param_hf_parts' parts of the fused tensor; GPT-2's modules are whole
// tensors, and its `c_proj` names both attn.c_proj and mlp.c_proj (PEFT matches module
// names by suffix).
enum { LORA_Q, LORA_K, LORA_V, LORA_O, LORA_GATE, LORA_UP, LORA_DOWN,
       LORA_C_ATTN, LORA_ATTN_C_PROJ, LORA_C_FC, LORA_MLP_C_PROJ, LORA_NUM_MODULES };

typedef struct {
    const char *target;  // the name in target_modules
    int gpt2;            // 1: a GPT-2 module, 0: a Llama-family module
    int param;           // the fused base tensor (P_*)
    int part;            // its part (param_hf_parts), 0 for a whole tensor
    const char *path;    // the module's path in the Hugging Face model, %d = layer
} LoraModule;

static const LoraModule LORA_MODULES[LORA_NUM_MODULES] = {
    {"q_proj", 0, P_QKVW, 0, "model.layers.%d.self_attn.q_proj"},
    {"k_proj", 0, P_QKVW, 1, "model.layers.%d.self_attn.k_proj"},
    {"v_proj", 0, P_QKVW, 2, "model.layers.%d.self_attn.v_proj"},
    {"o_proj", 0, P_ATTPROJW, 0, "model.layers.%d.self_attn.o_proj"},
    {"gate_proj", 0, P_FCW, 0, "model.layers.%d.mlp.gate_proj"},
    {"up_proj", 0, P_FCW, 1, "model.layers.%d.mlp.up_proj"},
    {"down_proj", 0, P_FCPROJW, 0, "model.layers.%d.mlp.down_proj"},
    {"c_attn", 1, P_QKVW, 0, "transformer.h.%d.attn.c_attn"},
    {"c_proj", 1, P_ATTPROJW, 0, "transformer.h.%d.attn.c_proj"},
    {"c_fc", 1, P_FCW, 0, "transformer.h.%d.mlp.c_fc"},
    {"c_proj", 1, P_FCPROJW, 0, "transformer.h.%d.mlp.c_proj"},
};

static int lora_module_in_family(const ModelConfig *c, int m) { return LORA_MODULES[m].gpt2 == !is_llama_family(c); }

// The resolved settings: rank, scale and the set of targeted modules (bit m = LORA_*).
typedef struct {
    int rank;
    float alpha, dropout;
    int rslora;
    unsigned targets;
} LoraConfig;

// s = alpha / R, or alpha / sqrt(R) with rsLoRA (PEFT computes it in Python floats).
static float lora_scale(const LoraConfig *lc) {
    return (float)(lc->rslora ? (double)lc->alpha / sqrt((double)lc->rank) : (double)lc->alpha / (double)lc->rank);
}

// The valid target names of the family, comma-separated.
static void lora_valid_targets(const ModelConfig *c, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (int m = 0; m < LORA_NUM_MODULES; m++) {
        if (!lora_module_in_family(c, m) || m == LORA_MLP_C_PROJ) continue;
        len += (size_t)snprintf(buf + len, len < n ? n - len : 0, "%s%s", len ? "," : "", LORA_MODULES[m].target);
        if (len >= n) break;
    }
}

// The module set of one target name (GPT-2's c_proj: both), 0 if the family has none by that name.
static unsigned lora_target_bits(const ModelConfig *c, const char *name, size_t len) {
    unsigned bits = 0;
    for (int m = 0; m < LORA_NUM_MODULES; m++)
        if (lora_module_in_family(c, m) && strlen(LORA_MODULES[m].target) == len && !strncmp(LORA_MODULES[m].target, name, len)) bits |= 1u << m;
    return bits;
}

// Every linear layer of attention and MLP of the family.
static unsigned lora_all_targets(const ModelConfig *c) {
    unsigned bits = 0;
    for (int m = 0; m < LORA_NUM_MODULES; m++) if (lora_module_in_family(c, m)) bits |= 1u << m;
    return bits;
}

// Parses a comma-separated target list ("" = all) into module bits; 0 with a one-line
// message in err (naming `what`, the flag or file) for an unknown or repeated name.
static int lora_parse_targets(const ModelConfig *c, const char *list, const char *what, unsigned *out, char *err, size_t n) {
    *out = 0;
    if (!list[0]) { *out = lora_all_targets(c); return 1; }
    for (const char *s = list;;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        unsigned bits = lora_target_bits(c, s, len);
        if (!bits) {
            char valid[256];
            lora_valid_targets(c, valid, sizeof valid);
            snprintf(err, n, "%s: unknown LoRA target module '%.*s' for a %s model; valid: %s", what, (int)(len > 64 ? 64 : len), s,
                     is_llama_family(c) ? "Llama-family" : "GPT-2", valid);
            return 0;
        }
        if (*out & bits) { snprintf(err, n, "%s: LoRA target module '%.*s' is listed twice", what, (int)(len > 64 ? 64 : len), s); return 0; }
        *out |= bits;
        if (!e) return 1;
        s = e + 1;
    }
}

// ---------------------------------------------------------------------------
// The adapters of a model: one per (layer, targeted module), each A [R, in] then
// B [rows, R] in the one allocation.
typedef struct {
    int layer, module;   // the layer and LORA_* module
    int param;           // the fused base tensor P_* it adds to
    int in;              // its input width
    int off, rows;       // its output columns [off, off + rows) of the fused product, of `out` in all
    int out;             // the fused product's width (OC of the base matmul)
    size_t a, b;         // offsets (floats) of A and B in the adapter block
} LoraAdapter;

typedef struct {
    LoraConfig lc;
    float scale;         // lora_scale(&lc)
    int n;               // adapters
    LoraAdapter *ad;     // [n], ordered by layer, then module
    size_t floats;       // size of the adapter block
} LoraLayout;

// Input and output widths of fused tensor P_* `param` (the OC and C of its matmul).
static void lora_param_io(const ModelConfig *c, int param, int *in, int *out) {
    int64_t shape[2];
    param_slice_shape(c, param, shape);
    int llama = is_llama_family(c);  // Llama: [out, in]; GPT-2's Conv1D: [in, out]
    *out = (int)(llama ? shape[0] : shape[1]);
    *in = (int)(llama ? shape[1] : shape[0]);
}

static void lora_layout_init(LoraLayout *lay, const ModelConfig *c, const LoraConfig *lc) {
    memset(lay, 0, sizeof *lay);
    lay->lc = *lc;
    lay->scale = lora_scale(lc);
    int per_layer = 0;
    for (int m = 0; m < LORA_NUM_MODULES; m++) per_layer += (lc->targets >> m) & 1;
    lay->ad = (LoraAdapter *)xcalloc((size_t)(per_layer * c->L > 0 ? per_layer * c->L : 1), sizeof(LoraAdapter));
    size_t off = 0;
    for (int l = 0; l < c->L; l++) {
        for (int m = 0; m < LORA_NUM_MODULES; m++) {
            if (!((lc->targets >> m) & 1)) continue;
            LoraAdapter *a = &lay->ad[lay->n++];
            a->layer = l; a->module = m; a->param = LORA_MODULES[m].param;
            lora_param_io(c, a->param, &a->in, &a->out);
            HfPart parts[3];
            int np = param_hf_parts(c, a->param, parts);
            a->off = 0;
            for (int k = 0; k < LORA_MODULES[m].part && k < np; k++) a->off += (int)parts[k].rows;
            a->rows = is_llama_family(c) ? (int)parts[LORA_MODULES[m].part].rows : a->out;
            a->a = off; off += (size_t)lc->rank * a->in;
            a->b = off; off += (size_t)a->rows * lc->rank;
        }
    }
    lay->floats = off;
}

static void lora_layout_free(LoraLayout *lay) { free(lay->ad); memset(lay, 0, sizeof *lay); }

// The adapters on fused tensor `param` of layer l: returns their count (0, 1, 2 or 3:
// Llama's q, k, v) and the first in *first; they are adjacent in the table.
static int lora_adapters_of(const LoraLayout *lay, int l, int param, const LoraAdapter **first) {
    *first = NULL;
    int count = 0;
    for (int i = 0; i < lay->n; i++) {
        if (lay->ad[i].layer != l || lay->ad[i].param != param) continue;
        if (!count) *first = &lay->ad[i];
        count++;
    }
    return count;
}

// ---------------------------------------------------------------------------
// Initialization and the dropout stream.

static LORA_HD inline uint64_t lora_hash64(uint64_t x) {  // splitmix64's finalizer of x + the golden ratio
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

#define LORA_INIT_SALT 0x4c6f5241496e6974ull     // "LoRAInit"
#define LORA_DROPOUT_SALT 0x4c6f524144726f70ull  // "LoRADrop"

static uint64_t lora_init_seed(uint64_t seed, int layer, int module) {
    return lora_hash64(lora_hash64(seed ^ LORA_INIT_SALT) + (uint64_t)layer * LORA_NUM_MODULES + (uint64_t)module);
}

// A = uniform(-1/sqrt(in), 1/sqrt(in)) from the adapter's own stream, B = 0.
static void lora_init(const LoraLayout *lay, float *mem, uint64_t seed) {
    for (int i = 0; i < lay->n; i++) {
        const LoraAdapter *a = &lay->ad[i];
        Rng r;
        rng_seed(&r, lora_init_seed(seed, a->layer, a->module));
        float bound = 1.0f / sqrtf((float)a->in);
        for (size_t k = 0; k < (size_t)lay->lc.rank * a->in; k++) mem[a->a + k] = (2.0f * rng_float(&r) - 1.0f) * bound;
        memset(mem + a->b, 0, (size_t)a->rows * lay->lc.rank * sizeof(float));
    }
}

static LORA_HD inline uint64_t lora_dropout_key(uint64_t seed, int64_t step, int micro, int layer, int module) {
    uint64_t h = lora_hash64(seed ^ LORA_DROPOUT_SALT);
    h = lora_hash64(h ^ (uint64_t)step);
    h = lora_hash64(h ^ (uint64_t)micro);
    return lora_hash64(h ^ ((uint64_t)layer * LORA_NUM_MODULES + (uint64_t)module));
}

// Elements whose 24-bit draw is below this are dropped: p * 2^24.
static LORA_HD inline uint32_t lora_dropout_threshold(float p) { return (uint32_t)((double)p * 16777216.0); }

// The mask's value of element e: 0 (dropped) or 1/(1-p).
static LORA_HD inline float lora_dropout_mask(uint64_t key, uint64_t e, uint32_t threshold, float keep_scale) {
    return (uint32_t)(lora_hash64(key + e) >> 40) >= threshold ? keep_scale : 0.0f;
}

// ---------------------------------------------------------------------------
// Merging into the base: W += s * B A on each adapter's slice.
static void lora_merge(const ModelConfig *c, ParamTensors *p, const LoraLayout *lay, const float *mem) {
    int R = lay->lc.rank, llama = is_llama_family(c);
    for (int i = 0; i < lay->n; i++) {
        const LoraAdapter *a = &lay->ad[i];
        int64_t shape[2];
        size_t slice = (size_t)param_slice_shape(c, a->param, shape);
        float *w = p->t[a->param] + (size_t)a->layer * slice;
        const float *A = mem + a->a, *B = mem + a->b;
        for (int o = 0; o < a->rows; o++)
            for (int k = 0; k < a->in; k++) {
                double d = 0.0;
                for (int r = 0; r < R; r++) d += (double)B[(size_t)o * R + r] * A[(size_t)r * a->in + k];
                float *wk = llama ? &w[(size_t)(a->off + o) * a->in + k] : &w[(size_t)k * a->out + a->off + o];
                *wk += (float)(lay->scale * d);
            }
    }
}

// ---------------------------------------------------------------------------
// PEFT I/O.

// PEFT's tensor name of adapter a's A (which = 'A') or B ('B').
static void lora_peft_name(const LoraAdapter *a, char which, char *buf, size_t n) {
    char path[200];
    snprintf(path, sizeof path, LORA_MODULES[a->module].path, a->layer);
    snprintf(buf, n, "base_model.model.%s.lora_%c.weight", path, which);
}

// Writes dir/adapter_config.json and dir/adapter_model.safetensors (each atomically:
// a temporary name, then renamed). base: the base model's directory (base_model_name_or_path).
static void lora_save_peft(const char *dir, const ModelConfig *c, const LoraLayout *lay, const float *mem, const char *base) {
    const LoraConfig *lc = &lay->lc;
    char targets[512] = "", alpha[32], dropout[32], path[4200];
    size_t tl = 0;
    for (int m = 0; m < LORA_NUM_MODULES; m++)  // in module order; GPT-2's c_proj (both modules) once
        if (((lc->targets >> m) & 1) && m != LORA_MLP_C_PROJ)
            tl += (size_t)snprintf(targets + tl, sizeof targets - tl, "%s\"%s\"", tl ? ", " : "", LORA_MODULES[m].target);
    hf_json_float(alpha, sizeof alpha, lc->alpha);
    hf_json_float(dropout, sizeof dropout, lc->dropout);
    JsonBuf base_json = {NULL, 0, 0};
    json_buf_string(&base_json, base, strlen(base));
    char json[8192];
    int len = snprintf(json, sizeof json,
        "{\n  \"base_model_name_or_path\": %s,\n  \"bias\": \"none\",\n  \"fan_in_fan_out\": %s,\n  \"inference_mode\": true,\n"
        "  \"init_lora_weights\": true,\n  \"lora_alpha\": %s,\n  \"lora_dropout\": %s,\n  \"modules_to_save\": null,\n"
        "  \"peft_type\": \"LORA\",\n  \"r\": %d,\n  \"target_modules\": [%s],\n  \"task_type\": \"CAUSAL_LM\",\n  \"use_dora\": false,\n"
        "  \"use_rslora\": %s\n}\n",
        base_json.p, is_llama_family(c) ? "false" : "true", alpha, dropout, lc->rank, targets, lc->rslora ? "true" : "false");
    free(base_json.p);
    if (len < 0 || (size_t)len >= sizeof json) fatal("%s: adapter_config.json too long", dir);
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    write_file_atomic(path, json, (size_t)len);
    StOut *outs = (StOut *)xcalloc((size_t)(2 * lay->n > 0 ? 2 * lay->n : 1), sizeof(StOut));
    for (int i = 0; i < lay->n; i++) {
        const LoraAdapter *a = &lay->ad[i];
        StOut *oa = &outs[2 * i], *ob = &outs[2 * i + 1];
        lora_peft_name(a, 'A', oa->name, sizeof oa->name);
        oa->ndim = 2; oa->shape[0] = lc->rank; oa->shape[1] = a->in; oa->data = mem + a->a;
        lora_peft_name(a, 'B', ob->name, sizeof ob->name);
        ob->ndim = 2; ob->shape[0] = a->rows; ob->shape[1] = lc->rank; ob->data = mem + a->b;
    }
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    st_write_f32(path, outs, 2 * lay->n);
    free(outs);
}

// 1 if dir holds a PEFT adapter (adapter_config.json).
static int lora_is_adapter_dir(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    return path_exists(path);
}

// What adapter_config.json says, before the base model is known.
typedef struct {
    int rank, rslora, fan_in_fan_out;
    float alpha, dropout;
    char targets[65536]; // target_modules, comma-separated (full module paths, one per layer, for "all-linear")
    char base[4096];     // base_model_name_or_path ("" if null)
} PeftAdapterConfig;

// Reads and checks dir/adapter_config.json: a LoRA adapter of a causal LM that this
// code computes as PEFT does (no DoRA, biases, extra trained modules, per-layer
// patterns or layer subsets). Every problem is one fatal line naming the file.
static void lora_read_peft_config(const char *dir, PeftAdapterConfig *pc) {
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    memset(pc, 0, sizeof *pc);
    size_t len;
    char *text = read_whole_file(path, &len);
    JsonDoc doc;
    if (json_parse(text, len, &doc) != 0) fatal("%s: not valid JSON: %s", path, doc.error);
    const JsonValue *root = doc.root, *v;
    if (root->type != JSON_OBJECT) fatal("%s: not a JSON object", path);
    v = json_get(root, "peft_type");
    if (!v || v->type != JSON_STRING || strcmp(v->string, "LORA")) fatal("%s: peft_type is not \"LORA\"", path);
    v = json_get(root, "task_type");
    if (v && v->type != JSON_NULL && (v->type != JSON_STRING || strcmp(v->string, "CAUSAL_LM")))
        fatal("%s: task_type is not \"CAUSAL_LM\"", path);
    int64_t r;
    v = json_get(root, "r");
    if (!v || json_int64(v, &r) != 0 || r < 1 || r > LORA_MAX_RANK) fatal("%s: r must be an integer from 1 to %d", path, LORA_MAX_RANK);
    pc->rank = (int)r;
    v = json_get(root, "lora_alpha");
    if (!v || v->type != JSON_NUMBER || !(v->number > 0) || !isfinite(v->number) || v->number > 1e6) fatal("%s: lora_alpha must be a positive number", path);
    pc->alpha = (float)v->number;
    v = json_get(root, "lora_dropout");
    pc->dropout = 0.0f;
    if (v && v->type != JSON_NULL) {
        if (v->type != JSON_NUMBER || !(v->number >= 0 && v->number < 1)) fatal("%s: lora_dropout must be a number in [0, 1)", path);
        pc->dropout = (float)v->number;
    }
    const char *bools[4] = {"use_rslora", "fan_in_fan_out", "use_dora", "lora_bias"};
    int vals[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; k++) {
        v = json_get(root, bools[k]);
        if (!v || v->type == JSON_NULL) continue;
        if (v->type != JSON_TRUE && v->type != JSON_FALSE) fatal("%s: %s must be true or false", path, bools[k]);
        vals[k] = v->type == JSON_TRUE;
    }
    pc->rslora = vals[0]; pc->fan_in_fan_out = vals[1];
    if (vals[2]) fatal("%s: use_dora is true: DoRA adapters are not supported", path);
    if (vals[3]) fatal("%s: lora_bias is true: adapters with a bias on lora_B are not supported", path);
    v = json_get(root, "bias");
    if (v && (v->type != JSON_STRING || strcmp(v->string, "none"))) fatal("%s: bias must be \"none\" (trained biases are not supported)", path);
    const char *absent[6] = {"modules_to_save", "layers_to_transform", "rank_pattern", "alpha_pattern", "exclude_modules", "target_parameters"};
    for (int k = 0; k < 6; k++) {
        v = json_get(root, absent[k]);
        if (v && v->type != JSON_NULL && !((v->type == JSON_OBJECT || v->type == JSON_ARRAY) && v->count == 0))
            fatal("%s: %s is set: not supported (every layer of the targeted modules, one rank and alpha)", path, absent[k]);
    }
    v = json_get(root, "target_modules");
    if (!v || v->type != JSON_ARRAY || v->count == 0)
        fatal("%s: target_modules must be a non-empty list of module names (a regular expression is not supported)", path);
    size_t tl = 0;
    for (size_t k = 0; k < v->count; k++) {
        const JsonValue *t = &v->items[k];
        if (t->type != JSON_STRING || t->length == 0 || t->length > 200 || strchr(t->string, ','))
            fatal("%s: target_modules[%zu] is not a module name", path, k);
        if (tl + t->length + 2 >= sizeof pc->targets) fatal("%s: target_modules is too long", path);
        tl += (size_t)snprintf(pc->targets + tl, sizeof pc->targets - tl, "%s%s", tl ? "," : "", t->string);
    }
    v = json_get(root, "base_model_name_or_path");
    if (v && v->type == JSON_STRING) {
        if (v->length >= sizeof pc->base || strlen(v->string) != v->length) fatal("%s: base_model_name_or_path is too long or holds a NUL", path);
        snprintf(pc->base, sizeof pc->base, "%s", v->string);
    } else if (v && v->type != JSON_NULL) fatal("%s: base_model_name_or_path must be a string", path);
    json_free(&doc);
    free(text);
}

// PEFT's test of whether target_modules' entry e names the module at path p (the
// module's name in the base model): the whole path, or a suffix of it from a dot on.
// So "q_proj" names every layer's q_proj, GPT-2's "c_proj" both attn.c_proj and
// mlp.c_proj, and "model.layers.0.self_attn.q_proj" (target_modules="all-linear" is
// saved as such full paths) one layer's.
static int lora_target_names_path(const char *e, size_t elen, const char *p) {
    size_t plen = strlen(p);
    if (elen > plen || strncmp(p + plen - elen, e, elen)) return 0;
    return elen == plen || p[plen - elen - 1] == '.';
}

// The LoraConfig of an adapter config on base model c (its target names and
// fan_in_fan_out checked against the family). The entries, matched as PEFT matches
// them, must name each module in every layer or in none: adapters on some layers only
// are refused.
static void lora_config_from_peft(const char *dir, const PeftAdapterConfig *pc, const ModelConfig *c, LoraConfig *lc) {
    char err[512], what[4200], path[256];
    snprintf(what, sizeof what, "%s/adapter_config.json", dir);
    memset(lc, 0, sizeof *lc);
    lc->rank = pc->rank; lc->alpha = pc->alpha; lc->dropout = pc->dropout; lc->rslora = pc->rslora;
    // layers[m * L + l]: some entry names module m of layer l (PEFT allows a module
    // named twice)
    unsigned char *layers = (unsigned char *)xcalloc((size_t)LORA_NUM_MODULES * (size_t)c->L, 1);
    for (const char *s = pc->targets;;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        int found = 0;
        for (int m = 0; m < LORA_NUM_MODULES; m++)
            for (int l = 0; l < c->L && lora_module_in_family(c, m); l++) {
                snprintf(path, sizeof path, LORA_MODULES[m].path, l);
                if (lora_target_names_path(s, len, path)) layers[m * c->L + l] = 1, found = 1;
            }
        if (!found) {
            char one[80];
            unsigned b;
            snprintf(one, sizeof one, "%.*s", (int)(len > 64 ? 64 : len), s);
            if (!lora_parse_targets(c, one, what, &b, err, sizeof err)) fatal("%s", err);
            fatal("%s: target_modules entry '%s' names no module of this %d-layer base", what, one, c->L);
        }
        if (!e) break;
        s = e + 1;
    }
    unsigned bits = 0;
    for (int m = 0; m < LORA_NUM_MODULES; m++) {
        int n = 0;
        for (int l = 0; l < c->L; l++) n += layers[m * c->L + l];
        if (n == c->L) bits |= 1u << m;
        else if (n > 0) {
            snprintf(path, sizeof path, LORA_MODULES[m].path, 0);
            fatal("%s: target_modules names %s in %d of the base's %d layers: adapters on some layers only are not supported", what,
                  strrchr(path, '.') + 1, n, c->L);
        }
    }
    free(layers);
    lc->targets = bits;
    if (pc->fan_in_fan_out != !is_llama_family(c))
        fatal("%s: fan_in_fan_out is %s but the base is %s (%s)", what, pc->fan_in_fan_out ? "true" : "false",
              is_llama_family(c) ? "a Llama-family model of nn.Linear layers" : "GPT-2, whose Conv1D layers need true", "PEFT sets it by the layer type");
}

// Reads dir/adapter_model.safetensors into mem (lay->floats): every adapter's lora_A
// [R, in] and lora_B [rows, R] must be there with that shape (F32, F16 or BF16), and
// nothing else.
static void lora_load_peft_weights(const char *dir, const LoraLayout *lay, float *mem) {
    char path[4200], name[300];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    SafeTensors st;
    st_open(&st, path);
    int R = lay->lc.rank;
    for (int i = 0; i < lay->n; i++) {
        const LoraAdapter *a = &lay->ad[i];
        for (int w = 0; w < 2; w++) {
            lora_peft_name(a, w ? 'B' : 'A', name, sizeof name);
            const StTensor *t = st_find(&st, name);
            int64_t r0 = w ? a->rows : R, r1 = w ? R : a->in;
            if (!t) fatal("%s: tensor %s is missing (adapter_config.json targets its module)", path, name);
            if (t->ndim != 2 || t->shape[0] != r0 || t->shape[1] != r1) {  // the shape, not the count: [in, R] is not [R, in]
                char got[160];
                size_t gl = (size_t)snprintf(got, sizeof got, "[");
                for (int d = 0; d < t->ndim && gl < sizeof got; d++)
                    gl += (size_t)snprintf(got + gl, sizeof got - gl, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
                fatal("%s: tensor %s has shape %s], expected [%lld, %lld]", path, name, got, (long long)r0, (long long)r1);
            }
            st_read_f32(&st, t, mem + (w ? a->b : a->a));
        }
    }
    if (st.count != 2 * lay->n) {
        for (int k = 0; k < st.count; k++) {
            int known = 0;
            for (int i = 0; i < lay->n && !known; i++)
                for (int w = 0; w < 2 && !known; w++) {
                    lora_peft_name(&lay->ad[i], w ? 'B' : 'A', name, sizeof name);
                    known = !strcmp(name, st.tensors[k].name);
                }
            if (!known) fatal("%s: unexpected tensor %s (not an adapter of the modules adapter_config.json targets on this base)", path, st.tensors[k].name);
        }
    }
    for (size_t k = 0; k < lay->floats; k++)
        if (!isfinite(mem[k])) fatal("%s: the adapter holds NaN or Inf", path);
    st_close(&st);
}

// A PEFT adapter directory on its base: the base (base_dir, e.g. -F; NULL or "" = the
// adapter's base_model_name_or_path, which must then be a local directory) loaded into
// cfg/params_mem/params, the adapter's layout into lay and its weights into *adapter
// (malloc'ed). pc: what adapter_config.json says. Returns the base directory used.
// q4: where a bitsandbytes 4-bit base goes (model_load_hf_or_bnb4); NULL refuses one.
static const char *lora_load_adapter_dir(const char *dir, const char *base_dir, PeftAdapterConfig *pc, ModelConfig *cfg, float **params_mem,
                                         ParamTensors *params, LoraLayout *lay, float **adapter, Bnb4Base *q4) {
    lora_read_peft_config(dir, pc);
    const char *base = base_dir && base_dir[0] ? base_dir : pc->base;
    if (!base[0] || !is_directory(base))
        fatal("%s/adapter_config.json: base_model_name_or_path '%s' is not a local directory: pass the base model's directory with -F", dir, pc->base);
    model_load_hf_or_bnb4(base, cfg, params_mem, params, q4);
    LoraConfig lc;
    lora_config_from_peft(dir, pc, cfg, &lc);
    lora_layout_init(lay, cfg, &lc);
    *adapter = (float *)xmalloc((lay->floats ? lay->floats : 1) * sizeof(float));
    lora_load_peft_weights(dir, lay, *adapter);
    return base;
}

#endif
