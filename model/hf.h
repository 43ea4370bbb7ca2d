// hf.h: Hugging Face model directories, read and written: config.json parsed into a
// ModelConfig (every family model/model.h knows, with transformers' defaults; features
// this trainer does not compute are refused) and written back as transformers writes
// it; the weights imported from model.safetensors or from the shards its index lists
// (F32, F16, BF16), and exported as F32 or BF16 in one file or in shards.
// Not here: what the configuration means and how the parameters are laid out in
// memory (model/model.h, whose layout is Hugging Face's, so import and export are
// copies); the safetensors format itself (base/safetensors.h); the tokenizer and chat
// files a checkpoint also carries (train/export.h); LoRA adapters (model/lora.h).
#ifndef SFT_HF_H
#define SFT_HF_H

#include <ctype.h>
#include <math.h>
#include "model.h"
#include "../base/json.h"
#include "../base/safetensors.h"
#include "../base/util.h"

// ---- Hugging Face import ----
// A model directory as transformers' save_pretrained writes it: config.json, and the
// weights in one model.safetensors or in shards model-0000k-of-0000n.safetensors
// that model.safetensors.index.json lists (where both exist, the single file is used,
// as transformers does). GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM, SmolLM3ForCausalLM and Gemma3ForCausalLM (the text models);
// F32, F16 or BF16 tensors. Any problem is one fatal line naming the file at fault.

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
    cfg->pad_id = hf_token_id(root, "pad_token_id", path, -1);
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

// A quantized checkpoint's linear weights are not floats. model/hf_bnb4.h reads
// bitsandbytes' 4-bit files and both trainers train LoRA on them
// (model_load_hf_or_bnb4, where the trainer sets TrainArgs.bnb4_supported); whatever loads
// through model_load_hf (chat, full fine-tuning's checkpoints) does not: say so by name
// rather than fail later on a tensor's dtype.
static void hf_refuse_quantized(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len;
    char *text = read_whole_file(path, &len);
    JsonDoc doc;
    if (json_parse(text, len, &doc) != 0) fatal("%s: invalid JSON: %s", path, doc.error);
    free(text);
    const JsonValue *qc = doc.root->type == JSON_OBJECT ? json_get(doc.root, "quantization_config") : NULL;
    if (qc)
        fatal("%s: a quantized checkpoint (quantization_config): 4-bit bases (QLoRA) are not supported yet; use the unquantized model's directory", path);
    json_free(&doc);
}

static void model_load_hf(const char *dir, ModelConfig *cfg, float **mem, ParamTensors *p) {
    hf_refuse_quantized(dir);
    model_read_hf_config(dir, cfg);
    HfWeights w;
    hf_weights_open(dir, &w);
    model_load_hf_weights(&w, cfg, mem, p);
}

// ---- Hugging Face export ----
// config.json as transformers writes it for the family (keys sorted, torch_dtype
// float32 or bfloat16), F32 or BF16 weights (--save_dtype) in transformers' names and layout (the stacked tensors split
// back into their parts; a tied head is not stored, as save_pretrained does), in one
// model.safetensors or, above max_shard_bytes, in shards with
// model.safetensors.index.json. Every file is written atomically; a model.safetensors
// or index of the other layout left in dir is removed after, so the directory loads
// as what was just written (shards of an earlier, larger export are left unlisted).

// The dtypes an export's weights are written in (--save_dtype): F32, or BF16 rounded
// to nearest even from the fp32 weights, with config.json's torch_dtype to match.
enum { HF_SAVE_F32, HF_SAVE_BF16 };
static const char *const HF_SAVE_DTYPE_TORCH[2] = {"float32", "bfloat16"};

// --save_dtype's value (f32 or float32, bf16 or bfloat16) as HF_SAVE_*, or -1.
static int hf_save_dtype_from_name(const char *name) {
    if (!strcmp(name, "f32") || !strcmp(name, "float32")) return HF_SAVE_F32;
    if (!strcmp(name, "bf16") || !strcmp(name, "bfloat16")) return HF_SAVE_BF16;
    return -1;
}

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
static void hf_write_llama_config(const char *path, const ModelConfig *c, int dtype) {
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
    if (c->pad_id >= 0) hf_entry(&es, "pad_token_id", "%d", c->pad_id);
    else hf_entry(&es, "pad_token_id", "null");  // not the config class's default (SmolLM3's is 128004)
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
        // an int in Gemma3TextConfig (transformers 5 refuses 16.0); a fraction only if one was read
        if (c->attn_scalar == (float)(int)c->attn_scalar) snprintf(scalar, sizeof scalar, "%d", (int)c->attn_scalar);
        else hf_json_float(scalar, sizeof scalar, c->attn_scalar);
        hf_entry(&es, "attn_logit_softcapping", "null");
        hf_entry(&es, "final_logit_softcapping", "null");
        hf_entry(&es, "query_pre_attn_scalar", "%s", scalar);
        hf_entry(&es, "rope_local_base_freq", "%s", local);
    }
    hf_entry(&es, "tie_word_embeddings", c->tied ? "true" : "false");
    hf_entry(&es, "torch_dtype", "\"%s\"", HF_SAVE_DTYPE_TORCH[dtype]);
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

// Writes dir/config.json for weights of dtype (HF_SAVE_*).
static void hf_write_config(const char *dir, const ModelConfig *c, int dtype) {
    char path[4096], json[4096], bos[16], eos[96];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (is_llama_family(c)) { hf_write_llama_config(path, c, dtype); return; }
    hf_token_ids_json(c, bos, sizeof bos, eos, sizeof eos);
    int n = snprintf(json, sizeof json,
        "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
        "  \"bos_token_id\": %s,\n  \"eos_token_id\": %s,\n"
        "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n"
        "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": null,\n  \"layer_norm_epsilon\": %.9g,\n"
        "  \"activation_function\": \"gelu_new\",\n  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n"
        "  \"attn_pdrop\": 0.0,\n  \"initializer_range\": 0.02,\n  \"tie_word_embeddings\": true,\n"
        "  \"torch_dtype\": \"%s\"\n}\n",
        bos, eos, c->V, c->maxT, c->maxT, c->C, c->L, c->NH, (double)c->eps, HF_SAVE_DTYPE_TORCH[dtype]);
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

static void model_save_hf_sharded(const char *dir, const ModelConfig *cfg, const ParamTensors *p, uint64_t max_shard_bytes, int dtype) {
    hf_write_config(dir, cfg, dtype);
    StOut *outs;
    int count = hf_export_tensors(cfg, p, &outs);
    // shards in order, a new one when the next tensor would overflow this one (a
    // tensor larger than the limit gets a shard of its own)
    int *shard = (int *)xmalloc((size_t)count * sizeof(int)), nshards = 0;
    uint64_t used = 0, total = 0;
    for (int k = 0; k < count; k++) {
        uint64_t bytes = (dtype == HF_SAVE_BF16 ? 2 : 4) * (uint64_t)outs[k].shape[0] * (uint64_t)outs[k].shape[1];
        if (k == 0 || (used > 0 && used + bytes > max_shard_bytes)) { nshards++; used = 0; }
        shard[k] = nshards - 1;
        used += bytes;
        total += bytes;
    }
    char path[4096];
    if (nshards == 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        st_write(path, outs, count, dtype == HF_SAVE_BF16);
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
            st_write(path, outs + first, last - first, dtype == HF_SAVE_BF16);
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

// The export of checkpoints and the final model, sharded above SFT_MAX_SHARD_SIZE,
// its weights in dtype (HF_SAVE_*).
static void model_save_hf(const char *dir, const ModelConfig *cfg, const ParamTensors *p, int dtype) {
    model_save_hf_sharded(dir, cfg, p, hf_max_shard_bytes(), dtype);
}


#endif
