// hf_bnb4.h: a Hugging Face model directory quantized to 4 bits by bitsandbytes, as
// transformers' save_pretrained writes it and the "-bnb-4bit" repositories publish it:
// config.json's quantization_config checked (bitsandbytes, 4-bit, NF4), each linear
// weight of the layers that the files hold quantized (the weight's quant_state tensor
// says so; unsloth's checkpoints keep some in 16 bits) read into a Bnb4Weight of
// model/bnb4.h with the shape config.json implies, every other tensor read as
// model_load_hf reads it. Refused in one line: another quantization, GPT-2 (its
// Conv1D weights), anything but a layer's linear weight quantized (lm_head, embeddings
// and norms stay in their dtype).
//
// It is not the trainers' use of the 4-bit base (issue 30's wiring: dequantizing each
// layer's weights when its products need them); bnb4_base_dequantize fills the fp32
// parameters from it, for a dense copy.
#pragma once
#include "bnb4.h"
#include "hf.h"

// Part k of layer l's slice of parameter tensor i (as param_hf_parts lists them), when
// the files hold it quantized (codes != NULL).
typedef struct {
    int L;
    Bnb4Weight *w;  // [NUM_PARAM_TENSORS][L][3]
} Bnb4Base;

static Bnb4Weight *bnb4_base_at(const Bnb4Base *q, int i, int l, int k) { return &q->w[((size_t)i * q->L + l) * 3 + k]; }

static int bnb4_is_linear(int i) { return i == P_QKVW || i == P_ATTPROJW || i == P_FCW || i == P_FCPROJW; }

// config.json's quantization_config: 0 when there is none, 1 for bitsandbytes' NF4;
// any other quantization is refused.
static int hf_bnb4_config(const char *path, const char *text, size_t len) {
    JsonDoc doc;
    if (json_parse(text, len, &doc) != 0) fatal("%s: invalid JSON: %s", path, doc.error);
    const JsonValue *qc = doc.root->type == JSON_OBJECT ? json_get(doc.root, "quantization_config") : NULL;
    if (!qc || qc->type == JSON_NULL) { json_free(&doc); return 0; }
    if (qc->type != JSON_OBJECT) fatal("%s: quantization_config is not an object", path);
    const JsonValue *m = json_get(qc, "quant_method");
    if (!m || m->type != JSON_STRING || strcmp(m->string, "bitsandbytes"))
        fatal("%s: quantization_config's quant_method is %.40s; only bitsandbytes' 4-bit NF4 is read", path, m && m->type == JSON_STRING ? m->string : "missing");
    const JsonValue *b4 = json_get(qc, "load_in_4bit"), *b8 = json_get(qc, "load_in_8bit");
    if ((b8 && b8->type == JSON_TRUE) || !b4 || b4->type != JSON_TRUE)
        fatal("%s: quantization_config is not load_in_4bit; bitsandbytes' 8-bit weights are not read", path);
    const JsonValue *qt = json_get(qc, "bnb_4bit_quant_type");
    if (!qt || qt->type != JSON_STRING || strcmp(qt->string, "nf4"))
        fatal("%s: quantization_config's bnb_4bit_quant_type is %.20s; only nf4 is read", path, qt && qt->type == JSON_STRING ? qt->string : "missing");
    const JsonValue *st = json_get(qc, "bnb_4bit_quant_storage");
    if (st && st->type != JSON_NULL && (st->type != JSON_STRING || strcmp(st->string, "uint8")))
        fatal("%s: quantization_config's bnb_4bit_quant_storage is not uint8", path);
    json_free(&doc);
    return 1;
}

// Whether the files hold tensor NAME quantized (its quant_state is there).
static int hf_bnb4_quantized(const HfWeights *w, const char *name) {
    char qs[320];
    const SafeTensors *file;
    for (int fp4 = 0; fp4 < 2; fp4++) {
        snprintf(qs, sizeof qs, "%s.quant_state.bitsandbytes__%s", name, fp4 ? "fp4" : "nf4");
        if (hf_find(w, qs, &file)) return 1;
    }
    return 0;
}

// The opened weights w of a 4-bit checkpoint of cfg (the Llama family): the parameters
// into *mem and p (a quantized part's slots zero), the quantized parts into q; w is
// closed. (dev/fuzz/fuzz_hf_bnb4.c feeds it files from memory.)
static void model_load_bnb4_weights(HfWeights *wp, const ModelConfig *cfg, float **mem, ParamTensors *p, Bnb4Base *q) {
    HfWeights w = *wp;
    memset(wp, 0, sizeof *wp);
    q->L = cfg->L;
    q->w = (Bnb4Weight *)xcalloc((size_t)NUM_PARAM_TENSORS * cfg->L * 3, sizeof(Bnb4Weight));
    for (int pass = 0; pass < 2; pass++) {  // 0: find, check and read the quantized parts; 1: the rest
        if (pass == 1) {
            *mem = (float *)xcalloc(model_num_parameters(cfg), sizeof(float));
            param_pointers(cfg, *mem, p);
        }
        for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
            HfPart parts[3];
            int nparts = param_hf_parts(cfg, i, parts), per_layer = PARAM_INFO[i].per_layer;
            int64_t shape[2];
            size_t numel = (size_t)param_slice_shape(cfg, i, shape);
            for (int l = 0; nparts && l < (per_layer ? cfg->L : 1); l++) {
                size_t offset = (size_t)l * numel;
                for (int k = 0; k < nparts; k++) {
                    char name[256];
                    snprintf(name, sizeof name, parts[k].name, l);
                    if (hf_bnb4_quantized(&w, name)) {
                        if (!bnb4_is_linear(i))
                            fatal("%s: %s is quantized; bitsandbytes quantizes only the layers' linear weights (lm_head, embeddings and norms stay in their dtype)",
                                  hf_weights_path(&w), name);
                        const SafeTensors *file;
                        if (pass == 0) {
                            if (!hf_find(&w, name, &file)) fatal("%s: missing tensor %s", hf_weights_path(&w), name);
                            bnb4_read_weight(file, name, parts[k].rows, shape[1], bnb4_base_at(q, i, l, k));
                        }
                        offset += (size_t)(parts[k].rows * shape[1]);
                        continue;
                    }
                    const SafeTensors *file;
                    const StTensor *t = model_hf_part(&w, cfg, i, l, &parts[k], &file);
                    if (pass == 1) st_read_f32(file, t, p->t[i] + offset);
                    offset += (size_t)t->numel;
                }
            }
        }
    }
    if (cfg->tied && hf_bnb4_quantized(&w, "lm_head.weight"))
        fatal("%s: lm_head.weight is quantized; bitsandbytes keeps the output head in its dtype", hf_weights_path(&w));
    hf_weights_close(&w);
}

// Loads directory dir (config.json with a bitsandbytes quantization_config): the
// parameters of the model into *mem and p (a quantized part's slots zero), the quantized
// parts into q.
static void model_load_hf_bnb4(const char *dir, ModelConfig *cfg, float **mem, ParamTensors *p, Bnb4Base *q) {
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len;
    char *text = read_whole_file(path, &len);
    int quantized = hf_bnb4_config(path, text, len);
    free(text);
    if (!quantized) fatal("%s: has no quantization_config; not a bitsandbytes 4-bit checkpoint", path);
    model_read_hf_config(dir, cfg);
    if (!is_llama_family(cfg)) fatal("%s: 4-bit GPT-2 checkpoints (Conv1D weights) are not read; the Llama family's are", path);
    HfWeights w;
    hf_weights_open(dir, &w);
    model_load_bnb4_weights(&w, cfg, mem, p, q);
}

// Writes every quantized part, dequantized to fp32, into its slots of p.
static void bnb4_base_dequantize(const Bnb4Base *q, const ModelConfig *cfg, ParamTensors *p) {
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        if (!bnb4_is_linear(i)) continue;
        HfPart parts[3];
        int nparts = param_hf_parts(cfg, i, parts);
        int64_t shape[2];
        size_t numel = (size_t)param_slice_shape(cfg, i, shape);
        for (int l = 0; l < q->L; l++) {
            size_t offset = (size_t)l * numel;
            for (int k = 0; k < nparts; k++) {
                const Bnb4Weight *bw = bnb4_base_at(q, i, l, k);
                if (bw->codes) {
                    float *scratch = (float *)xmalloc((size_t)(bw->n / bw->blocksize + 1) * sizeof(float));
                    bnb4_dequantize(bw, scratch, p->t[i] + offset);
                    free(scratch);
                }
                offset += (size_t)(parts[k].rows * shape[1]);
            }
        }
    }
}

static void bnb4_base_free(Bnb4Base *q) {
    for (size_t j = 0; q->w && j < (size_t)NUM_PARAM_TENSORS * q->L * 3; j++) bnb4_free(&q->w[j]);
    free(q->w);
    memset(q, 0, sizeof *q);
}

// Whether directory dir's config.json has a quantization_config (refused in one line
// unless it is bitsandbytes' 4-bit NF4).
static int hf_dir_is_bnb4(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!path_exists(path)) return 0;
    size_t len;
    char *text = read_whole_file(path, &len);
    int q = hf_bnb4_config(path, text, len);
    free(text);
    return q;
}

// Model directory dir into cfg, *mem, p: a bitsandbytes 4-bit one into q as well when
// q is given (the caller trains on 4-bit bases), else refused as model_load_hf refuses
// it; q->w stays NULL for an unquantized directory.
static void model_load_hf_or_bnb4(const char *dir, ModelConfig *cfg, float **mem, ParamTensors *p, Bnb4Base *q) {
    if (q) memset(q, 0, sizeof *q);
    if (q && hf_dir_is_bnb4(dir)) model_load_hf_bnb4(dir, cfg, mem, p, q);
    else model_load_hf(dir, cfg, mem, p);
}

// Quantize at load: every layer's linear weight of the dense parameters (*mem, p; the
// Llama family's [out, in] weights, as bitsandbytes' Linear4bit holds them) to NF4 in
// blocks of 64 with double quantization (model/nf4.h, as bitsandbytes' CUDA kernels
// would), into q; *mem is replaced by a block whose quantized slots are zero and never
// written, so no fp32 copy of those weights stays resident. lm_head, the embeddings
// and the norms stay fp32, as bitsandbytes leaves them.
static void bnb4_base_quantize(const ModelConfig *cfg, float **mem, ParamTensors *p, Bnb4Base *q) {
    if (!is_llama_family(cfg)) fatal("--load_in_4bit: GPT-2's Conv1D weights are not quantized here; the Llama family's are");
    q->L = cfg->L;
    q->w = (Bnb4Weight *)xcalloc((size_t)NUM_PARAM_TENSORS * cfg->L * 3, sizeof(Bnb4Weight));
    float *fresh = (float *)xcalloc(model_num_parameters(cfg), sizeof(float));
    ParamTensors np;
    param_pointers(cfg, fresh, &np);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        int64_t shape[2];
        size_t numel = (size_t)param_slice_shape(cfg, i, shape), count = numel * (PARAM_INFO[i].per_layer ? (size_t)cfg->L : 1);
        if (!bnb4_is_linear(i)) { if (count) memcpy(np.t[i], p->t[i], count * sizeof(float)); continue; }
        HfPart parts[3];
        int nparts = param_hf_parts(cfg, i, parts);
        for (int l = 0; l < cfg->L; l++) {
            size_t offset = (size_t)l * numel;
            for (int k = 0; k < nparts; k++) {
                Bnb4Weight *w = bnb4_base_at(q, i, l, k);
                w->rows = parts[k].rows, w->cols = shape[1], w->n = w->rows * w->cols;
                w->blocksize = NF4_BLOCK;
                snprintf(w->dtype, sizeof w->dtype, "float32");
                int64_t nb = (w->n + NF4_BLOCK - 1) / NF4_BLOCK;
                float *absmax = (float *)xmalloc((size_t)nb * sizeof(float)), *centred = (float *)xmalloc((size_t)nb * sizeof(float));
                w->codes = (uint8_t *)xmalloc((size_t)(w->n + 1) / 2);
                nf4_quantize(p->t[i] + offset, w->n, NF4_BLOCK, w->codes, absmax);
                w->qabsmax = (uint8_t *)xmalloc((size_t)nb);
                w->nested_absmax = (float *)xmalloc((size_t)((nb + NF4_NESTED_BLOCK - 1) / NF4_NESTED_BLOCK) * sizeof(float));
                w->nested_blocksize = NF4_NESTED_BLOCK;
                w->offset = nf4_double_quantize(absmax, nb, centred, w->qabsmax, w->nested_absmax);
                free(absmax), free(centred);
                offset += (size_t)w->n;
            }
        }
    }
    free(*mem);
    *mem = fresh;
    *p = np;
}

// Bytes of the 4-bit state (codes, absmax, nested state) and the largest weight and
// block count of one part, for the trainers' memory lines and scratch.
static size_t bnb4_base_bytes(const Bnb4Base *q, int64_t *max_n, int64_t *max_blocks) {
    size_t bytes = 0;
    *max_n = 0, *max_blocks = 0;
    for (size_t j = 0; q->w && j < (size_t)NUM_PARAM_TENSORS * q->L * 3; j++) {
        const Bnb4Weight *w = &q->w[j];
        if (!w->codes) continue;
        int64_t nb = (w->n + w->blocksize - 1) / w->blocksize;
        bytes += (size_t)(w->n + 1) / 2 + (w->absmax ? (size_t)nb * 4 : (size_t)nb + (size_t)((nb + w->nested_blocksize - 1) / w->nested_blocksize) * 4 + 4);
        if (w->n > *max_n) *max_n = w->n;
        if (nb > *max_blocks) *max_blocks = nb;
    }
    return bytes;
}

// FNV-1a of the 4-bit state, folded into h (a resume's check that the base is the same).
static uint64_t bnb4_base_hash(const Bnb4Base *q, uint64_t h) {
    for (size_t j = 0; q->w && j < (size_t)NUM_PARAM_TENSORS * q->L * 3; j++) {
        const Bnb4Weight *w = &q->w[j];
        if (!w->codes) continue;
        int64_t nb = (w->n + w->blocksize - 1) / w->blocksize;
        h = fnv1a(h, w->codes, (size_t)(w->n + 1) / 2);
        if (w->absmax) h = fnv1a(h, w->absmax, (size_t)nb * 4);
        else {
            h = fnv1a(h, w->qabsmax, (size_t)nb);
            h = fnv1a(h, w->nested_absmax, (size_t)((nb + w->nested_blocksize - 1) / w->nested_blocksize) * 4);
            h = fnv1a(h, &w->offset, 4);
        }
    }
    return h;
}
