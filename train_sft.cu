/*
train_sft.cu: the SFT trainer on an NVIDIA GPU. Same flags, data format, training
semantics, checkpoints and Hugging Face export as the CPU trainer (train_sft.c),
which is its reference: every kernel in cuda/ has a CPU twin there, checked in
dev/cuda/, and test_sftcu compares whole steps.

Both model families of model/model.h: GPT-2, and the Llama family (Llama, Qwen2, Qwen3,
Gemma 3, SmolLM3: RMSNorm, rotary positions, SwiGLU or GeGLU, [out, in] weights, no position
embedding, tied or untied head, and the newer families' features: q/k norms, (1 + w) norms,
post norms, embedding and attention scales, per-layer rotary tables or none, sliding windows),
chosen by the configuration in a few dispatching layer functions (norm_*, linear_*, mlp_*,
attn_*), so that all run through the same layer_forward and gpu_backward.
Matrix products run through cuBLASLt (the layers', with bias, GELU, its derivative and the
bias gradient in the product's epilogue) and cuBLAS (the classifier's); everything else is our own kernels (the
headers in cuda/); each residual add is fused into the LayerNorm (RMSNorm) that follows it.
Precision is chosen at build time: bf16 (default) keeps weights, activations and
activation gradients in bf16 for the matrix work, with fp32 parameter gradients
(cuBLASLt writes the weight and bias gradients in fp32; they accumulate over the
micro-batches in fp32), fp32 master weights, fp32 AdamW moments and fp32 reductions;
`make train_sftcu PRECISION=FP32` computes in fp32 throughout.
-r sets gradient checkpointing: 0 stores every activation, 1 recomputes the LayerNorm
(RMSNorm) outputs and the MLP's first product with its GELU (SwiGLU) in backward, 2 keeps
only each layer's input and recomputes the layer.
Every kernel is deterministic (no float atomics), so a run is bit-identical run to run.
Data parallel: W processes, one per GPU, as in train/dist.h; the gradients meet once per
step over NCCL (cuda/dist.cuh), with ZeRO-1 sharding the fp32 master weights and AdamW
moments by default when W > 1; -Z 2 shards the gradients too, each unit's (block, head,
embeddings) reduce-scattered as its backward ends, beside the next one's backward; -Z 3 shards
the floatX weights too, each unit gathered before it is read, the next block's ahead (cuda/zero3.cuh).
QLoRA (-A on a bitsandbytes 4-bit base, or --load_in_4bit 1): the frozen linear weights stay
NF4 on the device (cuda/nf4.cuh), each dequantized into one floatX scratch before its product,
in the forward and again in the backward; they have no floatX copy in params.
*/
#include "train/dist.h"
#include "train/evalset.h"
#include "train/generate.h"
#include "train/plan.h"
#include "train/preempt.h"
#include "train/rendezvous.h"
#include "train/trainer.h"
#include "cuda/attention.cuh"
#include "cuda/classifier.cuh"
#include "cuda/common.cuh"
#include "cuda/dist.cuh"
#include "cuda/zero3.cuh"
#include "cuda/elementwise.cuh"
#include "cuda/encoder.cuh"
#include "cuda/layernorm.cuh"
#include "cuda/lora.cuh"
#include "cuda/matmul.cuh"
#include "cuda/nf4.cuh"
#include "cuda/optimizer.cuh"
#include "cuda/rmsnorm.cuh"
#include "cuda/rope.cuh"
#include "cuda/swiglu.cuh"

// ----------------------------------------------------------------------------
// The model on the device. Parameters are floatX, their gradients fp32, in one
// allocation each, laid out as in model/model.h but with the vocabulary padded to
// Vp (a multiple of 128: aligned logit rows and whole tiles for cuBLAS); the padding
// rows of wte are zero and stay zero (their logits get a zero gradient, so AdamW
// leaves them at 0). Master weights and AdamW moments are fp32, padded the same way.
// With ZeRO-1 over W ranks the flat array is cut into W equal shards (the last padded
// with zeros): each rank keeps the master weights and moments of its own shard only,
// and params and grads are W shards long so the collectives can work in place.

// Widths (model/model.h): QKV = (NH + 2 KVH) HS (3C for GPT-2), A = NH HS (C for GPT-2),
// FF the MLP's hidden width (4C for GPT-2), FW = the MLP's first product: FF for GPT-2,
// 2 FF for the Llama family ([gate | up]).
struct Acts {
    floatX *encoded;                   // (BT, C)
    floatX *ln1, *qkv, *atty;          // (BT, C) / (BT, QKV) (q and k after their norms and RoPE) / (BT, A), per layer unless recomputed
    floatX *qk_raw;                    // (BT, (NH + KVH) HS) q and k before their norms (qk_norm), kept as qkv
    float *qk_rstd;                    // (BT, NH + KVH) their rstd (qk_norm), kept as qkv
    floatX *attn_out, *mlp_out;        // (BT, C) each: o_proj's and down's outputs before the post norms (post_norms), kept as qkv
    float *attn_rstd, *mlp_rstd;       // (BT) each: the post norms' rstd (post_norms), kept as qkv
    float *ln1_mean, *ln1_rstd, *lse;  // (L, BT), (L, BT), (L, NH, BT); the means only for GPT-2's LayerNorm
    floatX *residual2, *ln2;           // (BT, C)
    float *ln2_mean, *ln2_rstd;        // (L, BT)
    floatX *fch, *fch_gelu;            // (BT, FW) the MLP's first product, (BT, FF) its GELU (SwiGLU) output, per layer at level 0
    floatX *residual3;                 // (L, BT, C): every layer's output, always kept
    floatX *lnf;                       // (BT, C)
    float *lnf_mean, *lnf_rstd;        // (BT)
    floatX *x_sel, *logits;            // (BT, C), (BT, Vp): rows that go to the classifier
    float *losses;                     // (BT)
    floatX *dresidual, *dln, *datty, *dqkv, *dfch, *dx_sel;  // gradient scratch, one layer: (BT, C), (BT, C), (BT, A), (BT, QKV), (BT, FW), (BT, C)
    floatX *dswiglu;                   // (BT, FF) the gradient of the SwiGLU (GeGLU) output (Llama family; empty for GPT-2)
    floatX *dpost;                     // (BT, C) the gradient of a sub-layer's output before its post norm (post_norms)
    floatX *lora_h;                    // LoRA: (adapters, BT, R) every adapter's h = s * dropout(x) A^T, all layers (cuda/lora.cuh)
    floatX *lora_dh;                   // LoRA: (BT, R) one adapter's dh in backward
    floatX *lora_x;                    // LoRA with dropout: (BT, widest input) one adapter's dropped-out input, or dh A in backward
    float *scratch;                    // reductions
    float *norm2, *grad_scale;         // one float each
};

// One micro-batch as the kernels read it. Its ints live in one block of
// batch_ints(BT) ints (host or device, laid out by batch_layout), so that a step
// uploads all its micro-batches in one copy.
struct Batch {
    int *inputs, *pos, *doc_start;     // (BT) tokens, positions, row position where the document starts
    int *rows, *row_targets;           // (num_rows) positions that go to the classifier and their targets
    EncoderPlan enc;                   // the rows of each distinct token and position, for encoder_backward
    float *losses;                     // (num_rows) device: the classifier rows' losses
    float *correct, *entropy;          // (num_rows) device: their trl metrics (cuda/classifier.cuh), or NULL: not formed
    int num_rows;
};

static size_t batch_ints(int BT) { return 11 * (size_t)BT + 1; }

// Points b's arrays into the block `base` of a micro-batch of BT positions.
static void batch_layout(Batch *b, int *base, int BT) {
    b->inputs = base; b->pos = base + BT; b->doc_start = base + 2 * (size_t)BT;
    b->rows = base + 3 * (size_t)BT; b->row_targets = base + 4 * (size_t)BT;
    b->enc.keys = base + 5 * (size_t)BT; b->enc.off = base + 7 * (size_t)BT; b->enc.rows = base + 9 * (size_t)BT + 1;
}

// With LoRA (model/lora.h, cuda/lora.cuh) the model's weights are frozen: params holds them in
// floatX only (no gradients, master copy or moments), and what trains are the adapters, in
// one floatX array in model/lora.h's layout with its fp32 gradients, master weights and
// moments; ZeRO-1 shards those. "The trained weights" below are params without LoRA and the
// adapters with it.

struct GpuModel {
    ModelConfig cfg;                    // the model (V: the real vocabulary)
    ModelConfig cfg_dev;                // the same with V = Vp: the layout on the device
    size_t num_params;                 // parameters of cfg: the host's arrays (checkpoints)
    size_t num_params_dev;             // parameters of cfg_dev: the device's arrays
    floatX *params;                    // (padded without LoRA, else num_params_dev) the weights the kernels read (num_params_dev of them); ZeRO-3: this rank's shard of them (LoRA: of the frozen base), the kernels read z3's buffers
    float *grads;                      // (padded; ZeRO-2: grad_floats) gradients of the trained weights for the step's mean loss, accumulated in fp32; with ZeRO-1 only this rank's shard is summed over ranks; ZeRO-2: the units' scratch
    size_t grad_floats;                // floats in grads
    float *gshard;                     // (shard) this rank's shard of the step's summed gradient: grads + lo, or ZeRO-2's own (z2.shard)
    GpuZero2 z2;                       // ZeRO-2 (cuda/dist.cuh): the units, the comm stream and its events; z2.u null below ZeRO-2
    GpuZero3 z3;                       // ZeRO-3 (cuda/zero3.cuh): the gathered units' buffers and events, on z2's stream; z3.u null below ZeRO-3
    floatX *p[NUM_PARAM_TENSORS];      // each tensor's start in params (ZeRO-3: in its unit's buffer; a per-layer tensor's in block[0], see lp)
    float *g[NUM_PARAM_TENSORS];       // each tensor's start in grads; null with LoRA (frozen)
    floatX *train;                     // (padded) the trained weights: params, or with LoRA the adapters; ZeRO-3 without LoRA: params, the shard (parameters lo ..)
    size_t num_train;                  // how many: num_params_dev, or the adapters' lora.floats
    float *master, *m, *v;             // (shard) this rank's fp32 state of the trained weights, from element lo; master == (float *)train + lo in the fp32 build
                                       // (ZeRO-3 without LoRA: train itself) unless offloaded; offloaded (-O 1): all three in pinned host memory
    bool offload;                      // -O 1: AdamW on the host (offload_adamw), the device keeps the floatX weights and the gradients
    float *host_grads;                 // (shard) offloaded: pinned, the step's gradient shard read back from the device
    floatX *host_weights;              // (shard) offloaded: pinned, the updated master in floatX on its way to the device (== master in the fp32 build)
    GpuComm *comm;                     // the ranks (cuda/dist.cuh); world 1: no communication
    int zero;                          // 1: ZeRO-1 (the state is sharded), 2: ZeRO-2 (the gradients too), 3: ZeRO-3 (the weights too), 0: every rank holds all of it
    size_t shard, lo;                  // elements in this rank's state and its first one (num_train and 0 without ZeRO)
    size_t padded;                     // elements of train (and grads below ZeRO-2): W * shard with ZeRO-1 to 3 (ZeRO-3 without LoRA: the whole, of which train holds the shard), else num_train
    LoraLayout lora;                   // the adapters (model/lora.h): settings, modules, offsets in train; lora.n == 0: full fine-tuning
    floatX *adapters;                  // (padded) LoRA: the adapter weights the kernels read (== train), else null
    uint64_t dropout_seed;             // LoRA dropout's draw (model/lora.h's lora_dropout_key): the run's seed,
    int64_t dropout_step;              // the optimizer step and
    int dropout_micro;                 // the micro-batch of the step (over all ranks); -1: no dropout (evaluation, generation)
    AdamWSettings adamw;               // betas and epsilon: adamw_defaults() from gpu_model_build, the flags' from main
    int B, T, recompute;
    Acts a;
    size_t acts_bytes, scratch_floats;
    Batch b;                           // the micro-batch the next forward/backward reads (device arrays)
    int *host_block, *dev_block;       // (batch_ints(BT)) one micro-batch, pinned host and device, for gpu_upload_batch
    int *slot_tok, *slot_pos;          // (V), (maxT) host scratch of encoder_backward_plan, -1 between calls
    cublasHandle_t blas;
    BlasLt lt;                         // cuBLASLt handle, sharing blas_workspace, and its cached plans
    void *blas_workspace;              // (BLAS_WORKSPACE bytes) cuBLAS's workspace, set once with the stream
    cudaStream_t stream;
    float *inv_freq;                   // (HS/2) RoPE's frequencies on the device (Llama family; rope_inv_freq)
    float *inv_freq_local;             // (HS/2) the sliding layers' own (rope_local_theta; rope_local_inv_freq), else null
    float *host_logits;                // one row, for generation
    floatX *host_row;
    Nf4Base q4;                        // QLoRA: the 4-bit base's linear weights (q4.parts null: none); their tensors' p[i] null
};

#define BLAS_WORKSPACE (32u << 20)  // cuBLAS's recommendation for Hopper

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}

// Per-layer activation arrays exist only where that level stores them; otherwise a
// single layer's worth is reused and recomputed in backward.
static bool stored_per_layer(int recompute, bool cheap_to_recompute) { return recompute == 0 || (recompute == 1 && !cheap_to_recompute); }

// Adds bytes to *total and allocates them on the device, or only counts them.
static void *acts_take(size_t bytes, size_t *total, bool allocate) {
    *total += bytes;
    return allocate ? dev_alloc(bytes) : NULL;
}

// Activations for B x T at recompute level `recompute`: allocates them (allocate)
// or only adds up their bytes (for the memory plan before anything is allocated).
// *scratch_floats gets the size of the shared reduction scratch. cfg is the device
// configuration (vocabulary padded to VOCAB_PAD: the logits have Vp columns).
// The MLP's first product's width: GPT-2's fc (FF), or the Llama family's gate|up (2 FF).
static size_t mlp_first_width(const ModelConfig *c) { return (is_llama_family(c) ? 2 : 1) * (size_t)c->FF; }

// lora: the adapters (none: lora->n == 0)
static size_t gpu_acts_alloc(Acts *a, size_t *scratch_floats, const ModelConfig *cfg, const LoraLayout *lora, int B, int T, int recompute,
                             bool allocate) {
    size_t L = cfg->L, C = cfg->C, BT = (size_t)B * T, V = cfg->V, NH = cfg->NH;
    size_t QKV = qkv_width(cfg), A = (size_t)cfg->NH * cfg->HS, FF = cfg->FF, FW = mlp_first_width(cfg);
    size_t t = 0, X = sizeof(floatX), F = sizeof(float);
    int llama = is_llama_family(cfg);
    size_t ML = llama ? 0 : L;  // LayerNorm means: RMSNorm has none
    size_t lay = stored_per_layer(recompute, true) ? L : 1;   // ln1, ln2, fch, fch_gelu: recomputed at level 1
    size_t big = stored_per_layer(recompute, false) ? L : 1;  // qkv, atty, lse, residual2: kept at level 1
    size_t QK = cfg->qk_norm ? (size_t)(cfg->NH + cfg->KVH) * cfg->HS : 0, QH = cfg->qk_norm ? (size_t)(cfg->NH + cfg->KVH) : 0;
    size_t PC = cfg->post_norms ? C : 0, P1 = cfg->post_norms ? 1 : 0;  // the post norms' widths
    a->encoded = (floatX *)acts_take(BT * C * X, &t, allocate);
    a->ln1 = (floatX *)acts_take(lay * BT * C * X, &t, allocate);
    a->qkv = (floatX *)acts_take(big * BT * QKV * X, &t, allocate);
    a->atty = (floatX *)acts_take(big * BT * A * X, &t, allocate);
    a->lse = (float *)acts_take(big * NH * BT * F, &t, allocate);
    a->qk_raw = (floatX *)acts_take(big * BT * QK * X, &t, allocate);
    a->qk_rstd = (float *)acts_take(big * BT * QH * F, &t, allocate);
    a->attn_out = (floatX *)acts_take(big * BT * PC * X, &t, allocate);
    a->mlp_out = (floatX *)acts_take(big * BT * PC * X, &t, allocate);
    a->attn_rstd = (float *)acts_take(big * BT * P1 * F, &t, allocate);
    a->mlp_rstd = (float *)acts_take(big * BT * P1 * F, &t, allocate);
    a->ln1_mean = (float *)acts_take(ML * BT * F, &t, allocate);
    a->ln1_rstd = (float *)acts_take(L * BT * F, &t, allocate);
    a->residual2 = (floatX *)acts_take(big * BT * C * X, &t, allocate);
    a->ln2 = (floatX *)acts_take(lay * BT * C * X, &t, allocate);
    a->ln2_mean = (float *)acts_take(ML * BT * F, &t, allocate);
    a->ln2_rstd = (float *)acts_take(L * BT * F, &t, allocate);
    a->fch = (floatX *)acts_take(lay * BT * FW * X, &t, allocate);
    a->fch_gelu = (floatX *)acts_take(lay * BT * FF * X, &t, allocate);
    a->residual3 = (floatX *)acts_take(L * BT * C * X, &t, allocate);
    a->lnf = (floatX *)acts_take(BT * C * X, &t, allocate);
    a->lnf_mean = (float *)acts_take((llama ? 0 : BT) * F, &t, allocate);
    a->lnf_rstd = (float *)acts_take(BT * F, &t, allocate);
    a->x_sel = (floatX *)acts_take(BT * C * X, &t, allocate);
    a->logits = (floatX *)acts_take(BT * V * X, &t, allocate);
    a->losses = (float *)acts_take(BT * F, &t, allocate);
    a->dresidual = (floatX *)acts_take(BT * C * X, &t, allocate);
    a->dln = (floatX *)acts_take(BT * C * X, &t, allocate);
    a->datty = (floatX *)acts_take(BT * A * X, &t, allocate);
    a->dqkv = (floatX *)acts_take(BT * QKV * X, &t, allocate);
    a->dfch = (floatX *)acts_take(BT * FW * X, &t, allocate);
    a->dx_sel = (floatX *)acts_take(BT * C * X, &t, allocate);
    a->dswiglu = (floatX *)acts_take((llama ? BT * FF : 0) * X, &t, allocate);
    a->dpost = (floatX *)acts_take(BT * PC * X, &t, allocate);
    size_t num_ad = (size_t)lora->n, R = (size_t)lora->lc.rank, widest = 0;  // LoRA: every adapter's h, one dh, one dropped-out input
    for (int i = 0; i < lora->n; i++) widest = (size_t)lora->ad[i].in > widest ? (size_t)lora->ad[i].in : widest;
    a->lora_h = (floatX *)acts_take(num_ad * BT * R * X, &t, allocate);
    a->lora_dh = (floatX *)acts_take((num_ad ? BT * R : 0) * X, &t, allocate);
    a->lora_x = (floatX *)acts_take((num_ad && lora->lc.dropout > 0.0f ? BT * widest : 0) * X, &t, allocate);
    size_t s = layernorm_backward_scratch_floats((int)BT, (int)C);  // RMSNorm's needs half of it
    // the bias gradient before it is added: GPT-2's widest product (in the epilogue); Qwen2's
    // q, k, v bias by bias_backward's partial sums
    size_t s2 = llama ? (cfg->qkv_bias ? bias_backward_scratch_floats((int)BT, (int)QKV) : 0) : FW;
    size_t s3 = attention_backward_scratch_floats(B, T, (int)NH);
    size_t s4 = global_norm_scratch_floats();
    size_t s5 = cfg->qk_norm ? qk_norm_backward_scratch_floats((int)BT, cfg->HS) : 0;
    if (s5 > s) s = s5;
    if (s2 > s) s = s2;
    if (s3 > s) s = s3;
    if (s4 > s) s = s4;
    *scratch_floats = s;
    a->scratch = (float *)acts_take(s * F, &t, allocate);
    a->norm2 = (float *)acts_take(F, &t, allocate);
    a->grad_scale = (float *)acts_take(F, &t, allocate);
    return t;
}

#define VOCAB_PAD 128

// Device layout (Vp rows of wte and of an untied lm_head, the padding after the V real ones)
// to host layout (V rows), for an fp32 array of the parameters' shape, tensor by tensor; kind:
// where dev is (cudaMemcpyDeviceToHost, or HostToHost for a host copy of the device layout).
static void params_to_host(const GpuModel *M, float *host, const float *dev, cudaMemcpyKind kind = cudaMemcpyDeviceToHost) {
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        size_t n = param_numel(&M->cfg, i), nd = param_numel(&M->cfg_dev, i);
        CUDA_CHECK(cudaMemcpy(host, dev, n * sizeof(float), kind));
        host += n; dev += nd;
    }
}

// The model's fp32 weights from the host layout into out (`floats` of them on the host, zero
// past the model) in the device layout (the vocabulary's padding rows zero).
static void model_to_dev_layout(const GpuModel *M, float *out, const float *host, size_t floats) {
    memset(out, 0, floats * sizeof(float));
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        size_t n = param_numel(&M->cfg, i), nd = param_numel(&M->cfg_dev, i);
        memcpy(out, host, n * sizeof(float));
        host += n; out += nd;
    }
}

// An fp32 array of the trained weights' shape from the host layout into out (padded floats,
// on the host) in the device layout: the model's (vocabulary padding) or the adapters' (the
// same layout), zero past num_train. The trainer's way to the device: each rank copies its
// shard [lo, lo + shard) from there.
static void trained_to_dev_layout(const GpuModel *M, float *out, const float *host) {
    if (M->lora.n) {
        memset(out, 0, M->padded * sizeof(float));
        memcpy(out, host, M->num_train * sizeof(float));
        return;
    }
    model_to_dev_layout(M, out, host, M->padded);
}

// ZeRO-1's shard: ceil(P / W) rounded up to 64 elements, so that every shard starts
// 256-byte aligned (the vector paths of the kernels); one rank or no ZeRO: all of P.
static size_t zero_shard(size_t P, int world, int zero) {
    if (!zero || world == 1) return P;
    return (dist_shard_size(P, world) + 63) / 64 * 64;
}

// The host's fp32 weights (host layout) as floatX into M->params (device layout, zero padding),
// one tensor at a time through the host
static void params_to_device_floatx(const GpuModel *M, const float *host) {
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        size_t n = param_numel(&M->cfg, i), nd = param_numel(&M->cfg_dev, i);
        if (!M->p[i]) { host += n; continue; }  // held 4-bit (QLoRA): never copied as floatX
        floatX *tmp = (floatX *)xcalloc(nd ? nd : 1, sizeof(floatX));
        for (size_t k = 0; k < n; k++) tmp[k] = from_float<floatX>(host[k]);
        CUDA_CHECK(cudaMemcpy(M->p[i], tmp, nd * sizeof(floatX), cudaMemcpyHostToDevice));
        free(tmp);
        host += n;
    }
}

// floatX copies of n fp32 values on the host (src) into dst on the device
static void floats_to_floatx(floatX *dst, const float *src, size_t n) {
    floatX *tmp = (floatX *)xmalloc((n ? n : 1) * sizeof(floatX));
    for (size_t i = 0; i < n; i++) tmp[i] = from_float<floatX>(src[i]);
    CUDA_CHECK(cudaMemcpy(dst, tmp, n * sizeof(floatX), cudaMemcpyHostToDevice));
    free(tmp);
}

// Whether tensor i stays 4-bit on the device (QLoRA: a layer's linear weight of a 4-bit base q4)
static bool held_4bit(const Bnb4Base *q4, int i) { return q4 && q4->w && bnb4_is_linear(i); }

// The model on the device from host_params (host layout). With LoRA (lora non-null, lora->n
// adapters) the weights are frozen and the adapters host_adapters (lora->floats, model/lora.h's
// layout) train; lora null: full fine-tuning. q4 (QLoRA, with LoRA): the 4-bit base whose linear
// weights go to the device in NF4 (their slots of host_params are zero and not read).
static void gpu_model_build(GpuModel *M, const ModelConfig *cfg, const float *host_params, const LoraLayout *lora,
                            const float *host_adapters, int B, int T, int recompute, GpuComm *comm, int zero, const Bnb4Base *q4 = nullptr,
                            bool offload = false) {
    M->cfg = *cfg;
    M->cfg_dev = *cfg;
    M->cfg_dev.V = (cfg->V + VOCAB_PAD - 1) / VOCAB_PAD * VOCAB_PAD;
    M->B = B; M->T = T; M->recompute = recompute;
    M->num_params = model_num_parameters(cfg);
    M->num_params_dev = model_num_parameters(&M->cfg_dev);
    memset(&M->lora, 0, sizeof M->lora);
    memset(&M->q4, 0, sizeof M->q4);
    if (lora && lora->n > 0) {  // a copy of the table: the caller's may go
        M->lora = *lora;
        M->lora.ad = (LoraAdapter *)xmalloc((size_t)lora->n * sizeof(LoraAdapter));
        memcpy(M->lora.ad, lora->ad, (size_t)lora->n * sizeof(LoraAdapter));
    }
    bool frozen = M->lora.n > 0;
    M->dropout_seed = 0; M->dropout_step = 0; M->dropout_micro = -1;
    M->adamw = adamw_defaults();
    size_t P = M->num_params_dev, BT = (size_t)B * T, V = cfg->V;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) P -= held_4bit(q4, i) ? param_numel(&M->cfg_dev, i) : 0;  // no floatX copy of them
    M->num_train = frozen ? M->lora.floats : P;
    M->comm = comm;
    M->zero = comm->world > 1 ? zero : 0;
    M->shard = zero_shard(M->num_train, comm->world, M->zero);
    M->lo = M->zero ? (size_t)comm->rank * M->shard : 0;
    M->padded = M->zero ? (size_t)comm->world * M->shard : M->num_train;
    CUDA_CHECK(cudaStreamCreate(&M->stream));
    CUBLAS_CHECK(cublasCreate(&M->blas));
    M->blas_workspace = dev_alloc(BLAS_WORKSPACE);
    CUBLAS_CHECK(cublasSetStream(M->blas, M->stream));  // every product runs on this stream, with this workspace
    CUBLAS_CHECK(cublasSetWorkspace(M->blas, M->blas_workspace, BLAS_WORKSPACE));
    blaslt_init(&M->lt, M->blas_workspace, BLAS_WORKSPACE);
    size_t N = M->padded, S = M->shard;
    // ZeRO-3 (cuda/zero3.cuh): params holds this rank's shard of the model's flat weights (LoRA: of
    // the frozen base's, ZeRO-1's layout of that vector; full fine-tuning: the trained shard S at lo)
    bool z3 = M->zero >= 3;
    size_t base_shard = z3 ? zero_shard(P, comm->world, M->zero) : 0, base_lo = (size_t)comm->rank * base_shard;
    M->params = (floatX *)dev_alloc((z3 ? base_shard : frozen ? P : N) * sizeof(floatX));
    M->adapters = frozen ? (floatX *)dev_alloc(N * sizeof(floatX)) : nullptr;
    M->train = frozen ? M->adapters : M->params;
    // ZeRO-2 keeps no full gradient: grads is the units' scratch (cuda/dist.cuh's GpuZero2)
    M->grad_floats = M->zero >= 2 ? dist_zero2_scratch_floats(&M->cfg_dev, &M->lora) : N;
    M->grads = (float *)dev_alloc(M->grad_floats * sizeof(float));
    M->offload = offload;
    M->host_grads = nullptr;
    M->host_weights = nullptr;
    if (offload) {  // ZeRO-Offload: the fp32 state of this rank's shard in pinned host memory, and the two staging arrays
        CUDA_CHECK(cudaMallocHost((void **)&M->master, S * sizeof(float)));
        CUDA_CHECK(cudaMallocHost((void **)&M->m, S * sizeof(float)));
        CUDA_CHECK(cudaMallocHost((void **)&M->v, S * sizeof(float)));
        CUDA_CHECK(cudaMallocHost((void **)&M->host_grads, S * sizeof(float)));
        memset(M->m, 0, S * sizeof(float));
        memset(M->v, 0, S * sizeof(float));
#if defined(ENABLE_FP32)
        M->host_weights = M->master;  // floatX is float: the master goes to the device as it is
#else
        CUDA_CHECK(cudaMallocHost((void **)&M->host_weights, S * sizeof(floatX)));
#endif
    } else {
#if defined(ENABLE_FP32)
        M->master = (float *)M->train + (z3 && !frozen ? 0 : M->lo);  // ZeRO-3: train is the shard
#else
        M->master = (float *)dev_alloc(S * sizeof(float));
#endif
        M->m = (float *)dev_alloc(S * sizeof(float));
        M->v = (float *)dev_alloc(S * sizeof(float));
        CUDA_CHECK(cudaMemset(M->m, 0, S * sizeof(float)));
        CUDA_CHECK(cudaMemset(M->v, 0, S * sizeof(float)));
    }
    size_t off = 0, pos[NUM_PARAM_TENSORS];
    memset(&M->z2, 0, sizeof M->z2);
    if (M->zero >= 2) {  // the units (train/dist.h) of the device layout, their scratch in grads
        DistUnit *u = dist_model_units(&M->cfg_dev, &M->lora, pos);
        if (frozen) for (int l = 0; l < cfg->L; l++) u[l].scratch = u[l].n ? M->grads + u[l].off[0] : nullptr;  // each layer's adapters
        else dist_units_place(u, cfg->L, M->grads, 0);
        zero2_init(&M->z2, u, cfg->L, M->lo, S, comm->world);
    }
    memset(&M->z3, 0, sizeof M->z3);
    if (z3) zero3_init(&M->z3, &M->cfg_dev, base_lo, base_shard, comm->world, M->z2.stream);
    M->gshard = M->z2.u ? M->z2.shard : M->grads + M->lo;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        M->p[i] = held_4bit(q4, i) ? nullptr : z3 ? (PARAM_INFO[i].per_layer ? M->z3.block[0] : i == P_WTE || i == P_WPE ? M->z3.emb : M->z3.head) + M->z3.pos[i]
                                                  : M->params + off;
        M->g[i] = frozen ? nullptr : M->z2.u ? dist_tensor_unit(M->z2.u, cfg->L, i)->scratch + pos[i] : M->grads + off;
        off += held_4bit(q4, i) ? 0 : param_numel(&M->cfg_dev, i);
    }
    // the trained weights in fp32 in the device layout on the host (zero padding), then as
    // floatX; the master copy from there. With LoRA the frozen weights go tensor by tensor
    // from the host (no fp32 copy of them on the device, ever)
    CUDA_CHECK(cudaMemset(M->grads, 0, M->grad_floats * sizeof(float)));  // ZeRO-2's scratch is zero between its flushes
    float *staged = (float *)xmalloc(N * sizeof(float));
    trained_to_dev_layout(M, staged, frozen ? host_adapters : host_params);
    if (frozen && z3) {  // the base's shard from a host copy of the whole base in the device layout
        float *base = (float *)xmalloc(base_shard * comm->world * sizeof(float));
        model_to_dev_layout(M, base, host_params, base_shard * comm->world);
        floats_to_floatx(M->params, base + base_lo, base_shard);
        free(base);
    } else if (frozen) {
        params_to_device_floatx(M, host_params);
        if (q4 && q4->w) {
            ParamTensors hp;
            param_pointers(cfg, (float *)host_params, &hp);
            nf4_base_upload(&M->q4, q4, cfg, &hp);
        }
    }
    if (z3 && !frozen) floats_to_floatx(M->train, staged + M->lo, S);
    else floats_to_floatx(M->train, staged, N);
    if (offload) memcpy(M->master, staged + M->lo, S * sizeof(float));
#if !defined(ENABLE_FP32)
    else CUDA_CHECK(cudaMemcpy(M->master, staged + M->lo, S * sizeof(float), cudaMemcpyHostToDevice));
#endif
    free(staged);
    M->acts_bytes = gpu_acts_alloc(&M->a, &M->scratch_floats, &M->cfg_dev, &M->lora, B, T, recompute, true);
    M->dev_block = (int *)dev_alloc(batch_ints((int)BT) * sizeof(int));
    CUDA_CHECK(cudaMallocHost((void **)&M->host_block, batch_ints((int)BT) * sizeof(int)));
    M->slot_tok = (int *)xmalloc(V * sizeof(int));
    M->slot_pos = (int *)xmalloc(cfg->maxT * sizeof(int));
    for (size_t i = 0; i < V; i++) M->slot_tok[i] = -1;
    for (int i = 0; i < cfg->maxT; i++) M->slot_pos[i] = -1;
    M->host_logits = (float *)xmalloc(V * sizeof(float));
    M->host_row = (floatX *)xmalloc(V * sizeof(floatX));
    M->inv_freq = M->inv_freq_local = NULL;
    if (is_llama_family(cfg)) {  // the shared frequencies (model/model.h), as the CPU trainer's
        size_t half = (size_t)(cfg->HS / 2);
        float *f = (float *)xmalloc(half * sizeof(float));
        rope_inv_freq(cfg, f);
        M->inv_freq = (float *)dev_alloc(half * sizeof(float));
        CUDA_CHECK(cudaMemcpy(M->inv_freq, f, half * sizeof(float), cudaMemcpyHostToDevice));
        if (cfg->rope_local_theta != 0) {
            rope_local_inv_freq(cfg, f);
            M->inv_freq_local = (float *)dev_alloc(half * sizeof(float));
            CUDA_CHECK(cudaMemcpy(M->inv_freq_local, f, half * sizeof(float), cudaMemcpyHostToDevice));
        }
        free(f);
    }
}

static void gpu_model_free(GpuModel *M) {
    Acts *a = &M->a;
    void *ptrs[] = {M->params, M->grads, a->encoded, a->ln1, a->qkv, a->atty, a->lse, a->ln1_mean, a->ln1_rstd, a->residual2,
                    a->ln2, a->ln2_mean, a->ln2_rstd, a->fch, a->fch_gelu, a->residual3, a->lnf, a->lnf_mean, a->lnf_rstd, a->x_sel,
                    a->logits, a->losses, a->dresidual, a->dln, a->datty, a->dqkv, a->dfch, a->dx_sel, a->dswiglu, a->scratch, a->norm2,
                    a->grad_scale, M->dev_block, M->blas_workspace, M->inv_freq, M->inv_freq_local, a->qk_raw, a->qk_rstd, a->attn_out,
                    a->mlp_out, a->attn_rstd, a->mlp_rstd, a->dpost, M->adapters, a->lora_h, a->lora_dh, a->lora_x};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) CUDA_CHECK(cudaFree(ptrs[i]));
    if (M->offload) {
        float *pinned[] = {M->master, M->m, M->v, M->host_grads};
        for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++) CUDA_CHECK(cudaFreeHost(pinned[i]));
        if ((void *)M->host_weights != (void *)M->master) CUDA_CHECK(cudaFreeHost(M->host_weights));
    } else {
        CUDA_CHECK(cudaFree(M->m));
        CUDA_CHECK(cudaFree(M->v));
#if !defined(ENABLE_FP32)
        CUDA_CHECK(cudaFree(M->master));
#endif
    }
    zero3_free(&M->z3);
    zero2_free(&M->z2);
    CUBLAS_CHECK(cublasDestroy(M->blas));
    blaslt_destroy(&M->lt);
    CUDA_CHECK(cudaStreamDestroy(M->stream));
    CUDA_CHECK(cudaFreeHost(M->host_block));
    free(M->host_logits); free(M->host_row); free(M->slot_tok); free(M->slot_pos);
    free(M->lora.ad);
    nf4_base_free(&M->q4);
}

// ----------------------------------------------------------------------------
// Per-kernel-class timing of one optimizer step, for the benchmark's breakdown:
// with SFT_KERNEL_TIMES=k in the environment, the k-th step of this process that
// has targets records a cudaEvent at every kt_mark; the time between two marks goes
// to the class of the earlier one, and the step ends with a "kernels|" line. The
// events add a little time to that step; every other step runs without them.

enum KernelClass { K_MATMUL, K_ATTENTION, K_LAYERNORM, K_CLASSIFIER, K_ENCODER, K_OPTIMIZER, K_OTHER, NUM_KCLASSES };
static const char *KCLASS_NAME[NUM_KCLASSES] = {"matmul", "attention", "layernorm", "classifier", "encoder", "optimizer", "other"};

struct KernelTimer {
    int step_to_time;      // 0: never
    int steps_seen;        // gpu_train_step calls so far
    bool on;               // recording this step
    int n, cap;            // marks recorded / events created
    cudaEvent_t *ev;       // (cap) one event per mark
    int *cls;              // (cap) the class that starts at each mark
};
static KernelTimer g_kt;

static void kt_mark(cudaStream_t s, int cls) {
    if (!g_kt.on) return;
    if (g_kt.n == g_kt.cap) {
        int cap = g_kt.cap ? 2 * g_kt.cap : 1024;
        g_kt.ev = (cudaEvent_t *)realloc(g_kt.ev, cap * sizeof(cudaEvent_t));
        g_kt.cls = (int *)realloc(g_kt.cls, cap * sizeof(int));
        if (!g_kt.ev || !g_kt.cls) fatal("out of memory");
        for (int i = g_kt.cap; i < cap; i++) CUDA_CHECK(cudaEventCreate(&g_kt.ev[i]));
        g_kt.cap = cap;
    }
    CUDA_CHECK(cudaEventRecord(g_kt.ev[g_kt.n], s));
    g_kt.cls[g_kt.n++] = cls;
}

static void kt_step_begin(void) {
    if (g_kt.steps_seen == 0) {
        const char *e = getenv("SFT_KERNEL_TIMES");
        g_kt.step_to_time = e ? atoi(e) : 0;
    }
    g_kt.steps_seen++;
    g_kt.on = g_kt.steps_seen == g_kt.step_to_time;
    g_kt.n = 0;
}

static void kt_step_end(cudaStream_t s) {
    if (!g_kt.on) return;
    kt_mark(s, K_OTHER);
    CUDA_CHECK(cudaStreamSynchronize(s));
    double ms[NUM_KCLASSES] = {0}, total = 0.0;
    for (int i = 0; i + 1 < g_kt.n; i++) {
        float t;
        CUDA_CHECK(cudaEventElapsedTime(&t, g_kt.ev[i], g_kt.ev[i + 1]));
        ms[g_kt.cls[i]] += t;
        total += t;
    }
    printf("kernels| step %d: %.2f ms on the GPU", g_kt.steps_seen, total);
    for (int k = 0; k < NUM_KCLASSES; k++) printf(" | %s %.2f ms (%.1f%%)", KCLASS_NAME[k], ms[k], total > 0 ? 100.0 * ms[k] / total : 0.0);
    printf("\n");
    g_kt.on = false;
}

// Pointers to layer l's activations (index 0 where one layer's worth is reused).
struct LayerActs {
    floatX *ln1, *qkv, *atty, *residual2, *ln2, *fch, *fch_gelu, *residual3;
    floatX *qk_raw, *attn_out, *mlp_out;                   // null without qk_norm (qk_raw), post_norms (the others)
    const floatX *input;
    float *ln1_mean, *ln1_rstd, *lse, *ln2_mean, *ln2_rstd;  // the means null for the Llama family
    float *qk_rstd, *attn_rstd, *mlp_rstd;                 // null as qk_raw, attn_out and mlp_out
};

static LayerActs layer_acts(const GpuModel *M, int l, int BT) {
    const Acts *a = &M->a;
    const ModelConfig *c = &M->cfg;
    size_t C = c->C, NH = c->NH, QKV = qkv_width(c), A = (size_t)c->NH * c->HS, FF = c->FF, FW = mlp_first_width(c);
    size_t lay = stored_per_layer(M->recompute, true) ? l : 0, big = stored_per_layer(M->recompute, false) ? l : 0;
    bool llama = is_llama_family(c);
    LayerActs r;
    r.ln1 = a->ln1 + lay * BT * C;
    r.qkv = a->qkv + big * BT * QKV;
    r.atty = a->atty + big * BT * A;
    r.lse = a->lse + big * NH * BT;
    size_t H = (size_t)c->NH + c->KVH;
    r.qk_raw = c->qk_norm ? a->qk_raw + big * BT * H * c->HS : nullptr;
    r.qk_rstd = c->qk_norm ? a->qk_rstd + big * BT * H : nullptr;
    r.attn_out = c->post_norms ? a->attn_out + big * BT * C : nullptr;
    r.mlp_out = c->post_norms ? a->mlp_out + big * BT * C : nullptr;
    r.attn_rstd = c->post_norms ? a->attn_rstd + big * BT : nullptr;
    r.mlp_rstd = c->post_norms ? a->mlp_rstd + big * BT : nullptr;
    r.residual2 = a->residual2 + big * BT * C;
    r.ln2 = a->ln2 + lay * BT * C;
    r.fch = a->fch + lay * BT * FW;
    r.fch_gelu = a->fch_gelu + lay * BT * FF;
    r.residual3 = a->residual3 + (size_t)l * BT * C;
    r.input = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * BT * C;
    r.ln1_mean = llama ? nullptr : a->ln1_mean + (size_t)l * BT; r.ln1_rstd = a->ln1_rstd + (size_t)l * BT;
    r.ln2_mean = llama ? nullptr : a->ln2_mean + (size_t)l * BT; r.ln2_rstd = a->ln2_rstd + (size_t)l * BT;
    return r;
}

// Layer l's slice of parameter tensor i (floatX weights) and of its fp32 gradient (for a
// tensor outside the layers, l = 0: the whole tensor); null for a tensor the family does
// not have (the Llama family's biases but Qwen2's q, k, v ones, its LayerNorm biases, wpe),
// and the gradient null for every tensor with LoRA (frozen: the backward skips it).
// ZeRO-2: every layer's gradient is in the one block's scratch (gpu_model_build). ZeRO-3: layer
// l's weights are in block buffer l % 2 (cuda/zero3.cuh).
static floatX *lp(const GpuModel *M, int i, int l) {
    int64_t shape[2], n = param_slice_shape(&M->cfg_dev, i, shape);
    if (n && M->z3.u && PARAM_INFO[i].per_layer) return M->z3.block[l % 2] + M->z3.pos[i];
    return n ? M->p[i] + (size_t)l * n : nullptr;
}
static float *lg(const GpuModel *M, int i, int l) {
    int64_t shape[2], n = param_slice_shape(&M->cfg_dev, i, shape);
    return n && M->g[i] ? M->g[i] + (M->z2.u ? 0 : (size_t)l * n) : nullptr;  // ZeRO-2: every layer's slice in the one block scratch
}

// ----------------------------------------------------------------------------
// LoRA (cuda/lora.cuh): the adapters on layer l's product of fused tensor `param` (P_QKVW,
// P_ATTPROJW, P_FCW, P_FCPROJW), added to the base product's output in forward and to its
// input gradient in backward.

// Adapter a's dropout in this micro-batch: its probability (0 outside training) and its draw
// (of the step, micro-batch, layer and module: the same in backward)
static float lora_dropout_of(const GpuModel *M, const LoraAdapter *a, uint64_t *key) {
    if (M->dropout_micro < 0 || M->lora.lc.dropout <= 0.0f) return 0.0f;
    *key = lora_dropout_key(M->dropout_seed, M->dropout_step, M->dropout_micro, a->layer, a->module);
    return M->lora.lc.dropout;
}

// adapter a's h (BT, R), kept from forward for backward
static floatX *lora_h(const GpuModel *M, const LoraAdapter *a, int BT) {
    return M->a.lora_h + (size_t)(a - M->lora.ad) * BT * M->lora.lc.rank;
}

// out (BT, OC) += every adapter's s * dropout(x) A^T B^T on its columns; x: the product's input (BT, IC)
static void lora_site_forward(GpuModel *M, int l, int param, floatX *out, const floatX *x, int BT) {
    const LoraAdapter *first;
    int n = lora_adapters_of(&M->lora, l, param, &first), R = M->lora.lc.rank;
    for (int k = 0; k < n; k++) {
        const LoraAdapter *a = first + k;
        uint64_t key = 0;
        float p = lora_dropout_of(M, a, &key);
        lora_adapter_forward(M->blas, out, lora_h(M, a, BT), M->a.lora_x, x, M->adapters + a->a, M->adapters + a->b, M->lora.scale, p, key, BT,
                             a->in, a->out, a->off, a->rows, R, M->stream);
    }
}

// The adapters' dA, dB (fp32, added) and dinp (BT, IC) += their part of the input gradient, from
// dout (BT, OC), the gradient of the product's output; x: its input, as in forward
static void lora_site_backward(GpuModel *M, int l, int param, floatX *dinp, const floatX *dout, const floatX *x, int BT) {
    const LoraAdapter *first;
    int n = lora_adapters_of(&M->lora, l, param, &first), R = M->lora.lc.rank;
    for (int k = 0; k < n; k++) {
        const LoraAdapter *a = first + k;
        uint64_t key = 0;
        float p = lora_dropout_of(M, a, &key);
        lora_adapter_backward(M->blas, dinp, M->grads + a->a, M->grads + a->b, M->a.lora_dh, M->a.lora_x, dout, lora_h(M, a, BT), x,
                              M->adapters + a->a, M->adapters + a->b, M->lora.scale, p, key, BT, a->in, a->out, a->off, a->rows, R, M->stream);
    }
}

// whether layer l's product of `param` has adapters (its epilogue then cannot be fused: the
// adapters add to the product before the GELU, and to the GELU output's gradient before its derivative)
static bool has_adapters(const GpuModel *M, int l, int param) {
    const LoraAdapter *first;
    return lora_adapters_of(&M->lora, l, param, &first) > 0;
}

// ----------------------------------------------------------------------------
// The layers whose kernels differ between the families, chosen by the configuration.
// GPT-2: LayerNorm, Conv1D weights [in, out] with biases, GELU (in the product's epilogue).
// Llama family: RMSNorm (no mean, no bias; Gemma 3's scales by 1 + w), nn.Linear weights
// [out, in] (Qwen2's q, k, v biases), q/k norms (Qwen3, Gemma 3), RoPE on q and k (per layer:
// the global or the sliding layers' table, or none), SwiGLU or GeGLU (Gemma 3).

// The added 1 of the RMSNorms: 1 where they scale by 1 + w (Gemma 3), else 0 (train_sft.c's norm_one).
static float norm_one(const ModelConfig *c) { return c->norm_plus_one ? 1.0f : 0.0f; }

// The token embedding's factor: embed_scale (Gemma 3), or 1 (train_sft.c's embedding_scale).
static float embedding_scale(const ModelConfig *c) { return c->embed_scale != 0 ? c->embed_scale : 1.0f; }

// out = norm(inp) over BT rows of C channels (mean unused by RMSNorm, b null there)
static void norm_forward(GpuModel *M, floatX *out, float *mean, float *rstd, const floatX *inp, const floatX *w, const floatX *b, int BT) {
    const ModelConfig *c = &M->cfg;
    kt_mark(M->stream, K_LAYERNORM);
    if (is_llama_family(c)) rmsnorm_forward(out, rstd, inp, w, BT, c->C, c->eps, norm_one(c), M->stream);
    else layernorm_forward(out, mean, rstd, inp, w, b, BT, c->C, c->eps, M->stream);
}

// residual_out = a + bsum, out = norm(residual_out); out may be bsum (in place)
static void fused_residual_norm_forward(GpuModel *M, floatX *residual_out, floatX *out, float *mean, float *rstd, const floatX *a,
                                        const floatX *bsum, const floatX *w, const floatX *b, int BT) {
    const ModelConfig *c = &M->cfg;
    kt_mark(M->stream, K_LAYERNORM);
    if (is_llama_family(c)) fused_residual_rmsnorm_forward(residual_out, out, rstd, a, bsum, w, BT, c->C, c->eps, norm_one(c), M->stream);
    else fused_residual_layernorm_forward(residual_out, out, mean, rstd, a, bsum, w, b, BT, c->C, c->eps, M->stream);
}

// dinp += the norm's input gradient, dw (and GPT-2's db) += its weight gradients
static void norm_backward(GpuModel *M, floatX *dinp, float *dw, float *db, const floatX *dout, const floatX *inp, const floatX *w,
                          const float *mean, const float *rstd, int BT) {
    const ModelConfig *c = &M->cfg;
    kt_mark(M->stream, K_LAYERNORM);
    if (is_llama_family(c)) rmsnorm_backward(dinp, dw, M->a.scratch, dout, inp, w, rstd, BT, c->C, norm_one(c), M->stream);
    else layernorm_backward(dinp, dw, db, M->a.scratch, dout, inp, w, mean, rstd, BT, c->C, M->stream);
}

// Layer l's weight of linear tensor `param` as the products read it: the frozen floatX weights,
// or with a 4-bit base (QLoRA) its NF4 parts dequantized into the scratch (cuda/nf4.cuh), valid
// until the next call (its time counts as the product's)
static const floatX *linear_weight(GpuModel *M, int param, int l) {
    return M->q4.parts ? nf4_layer_weight(&M->q4, &M->cfg, param, l, M->stream) : lp(M, param, l);
}

// out (BT, OC) = inp (BT, IC) times layer l's weight of tensor `param` (+ bias; null: none,
// Llama family only), plus its adapters (LoRA)
static void linear_forward(GpuModel *M, int l, int param, floatX *out, const floatX *inp, const floatX *bias, int BT, int IC, int OC) {
    kt_mark(M->stream, K_MATMUL);
    const floatX *w = linear_weight(M, param, l);
    if (is_llama_family(&M->cfg)) matmul_forward_oi(&M->lt, out, inp, w, bias, BT, IC, OC, M->stream);
    else matmul_forward(&M->lt, out, inp, w, bias, BT, IC, OC, M->stream);
    lora_site_forward(M, l, param, out, inp, BT);
}

// dinp = dout times w^T (overwritten) plus the adapters' part (LoRA), dw += (fp32), dbias += its
// column sums (when not null; both null with LoRA), w layer l's weight of tensor `param`
static void linear_backward(GpuModel *M, int l, int param, floatX *dinp, float *dw, float *dbias, const floatX *dout, const floatX *inp, int BT,
                            int IC, int OC) {
    cudaStream_t s = M->stream;
    kt_mark(s, K_MATMUL);
    const floatX *w = linear_weight(M, param, l);  // dequantized again for dx (QLoRA)
    if (!is_llama_family(&M->cfg)) {
        matmul_backward(&M->lt, dinp, dw, dbias, M->a.scratch, dout, inp, w, nullptr, BT, IC, OC, s);
    } else {
        matmul_backward_oi(&M->lt, dinp, dw, dout, inp, w, BT, IC, OC, s);
        if (dbias) bias_backward(dbias, M->a.scratch, dout, BT, OC, s);
    }
    lora_site_backward(M, l, param, dinp, dout, inp, BT);
}

// The MLP up to its hidden activation x.fch_gelu (BT, FF) from x.ln2: GPT-2 fch = fc(ln2) and
// its GELU in the product's epilogue; Llama fch = [gate | up] of ln2 and the SwiGLU (GeGLU) kernel.
static void mlp_up_forward(GpuModel *M, int l, const LayerActs *x, int BT) {
    const ModelConfig *c = &M->cfg;
    cudaStream_t s = M->stream;
    kt_mark(s, K_MATMUL);
    if (!is_llama_family(c) && !has_adapters(M, l, P_FCW)) {
        matmul_forward_gelu(&M->lt, x->fch_gelu, x->fch, x->ln2, lp(M, P_FCW, l), lp(M, P_FCB, l), BT, c->C, c->FF, s);
        return;
    }
    if (!is_llama_family(c)) {  // with adapters: the product with its bias and theirs, then the GELU
        linear_forward(M, l, P_FCW, x->fch, x->ln2, lp(M, P_FCB, l), BT, c->C, c->FF);
        kt_mark(s, K_OTHER);
        gelu_forward(x->fch_gelu, x->fch, (size_t)BT * c->FF, s);
        return;
    }
    linear_forward(M, l, P_FCW, x->fch, x->ln2, nullptr, BT, c->C, 2 * c->FF);
    kt_mark(s, K_OTHER);
    glu_forward(x->fch_gelu, x->fch, BT, c->FF, c->mlp_act, s);
}

// Backward through the MLP's output product and its activation: from dout (the residual
// stream's gradient) to M->a.dfch, the gradient of the first product's output. GPT-2: the
// GELU's derivative in the epilogue; Llama: the product into dswiglu, then SwiGLU's (GeGLU's) backward.
static void mlp_down_backward(GpuModel *M, int l, const LayerActs *x, const floatX *dout, int BT) {
    const ModelConfig *c = &M->cfg;
    Acts *a = &M->a;
    cudaStream_t s = M->stream;
    kt_mark(s, K_MATMUL);
    if (!is_llama_family(c) && !has_adapters(M, l, P_FCPROJW)) {
        matmul_backward(&M->lt, a->dfch, lg(M, P_FCPROJW, l), lg(M, P_FCPROJB, l), a->scratch, dout, x->fch_gelu, lp(M, P_FCPROJW, l), x->fch, BT,
                        c->FF, c->C, s);
        return;
    }
    if (!is_llama_family(c)) {  // with adapters: the GELU output's gradient, theirs added, then the GELU's derivative
        linear_backward(M, l, P_FCPROJW, a->dfch, lg(M, P_FCPROJW, l), lg(M, P_FCPROJB, l), dout, x->fch_gelu, BT, c->FF, c->C);
        kt_mark(s, K_OTHER);
        gelu_backward(a->dfch, x->fch, a->dfch, (size_t)BT * c->FF, s);
        return;
    }
    linear_backward(M, l, P_FCPROJW, a->dswiglu, lg(M, P_FCPROJW, l), nullptr, dout, x->fch_gelu, BT, c->FF, c->C);
    kt_mark(s, K_OTHER);
    glu_backward(a->dfch, x->fch, a->dswiglu, BT, c->FF, c->mlp_act, s);
}

// Layer l's rotary frequencies on the device, or null for a layer without RoPE (NoPE, GPT-2).
static const float *layer_inv_freq(const GpuModel *M, int l) {
    int kind = layer_rope(&M->cfg, l);
    return kind == ROPE_NONE ? nullptr : kind == ROPE_LOCAL ? M->inv_freq_local : M->inv_freq;
}

// Attention of layer l (document-masked causal, within the layer's window; query head h reads
// key/value head h / (NH/KVH); scores times attention_scale): q and k normed per head
// (qk_norm), then rotated by the layer's table (if any), in place in qkv.
static void attn_forward(GpuModel *M, int l, const LayerActs *x, int B, int T) {
    const ModelConfig *c = &M->cfg;
    kt_mark(M->stream, K_ATTENTION);
    if (c->qk_norm)
        qk_norm_forward(x->qkv, x->qk_raw, x->qk_rstd, lp(M, P_QNORMW, l), lp(M, P_KNORMW, l), B * T, c->NH, c->KVH, c->HS, c->eps, norm_one(c),
                        M->stream);
    const float *inv_freq = layer_inv_freq(M, l);
    if (inv_freq) rope_forward(x->qkv, M->b.pos, inv_freq, B * T, c->NH, c->KVH, c->HS, M->stream);
    attention_forward(x->atty, x->lse, x->qkv, M->b.doc_start, B, T, c->NH, c->KVH, c->HS, attention_scale(c), layer_window(c, l), M->stream);
}

// M->a.dqkv = the gradient of layer l's q|k|v product's output (before the q/k norms and RoPE), from M->a.datty
static void attn_backward(GpuModel *M, int l, const LayerActs *x, int B, int T) {
    const ModelConfig *c = &M->cfg;
    Acts *a = &M->a;
    kt_mark(M->stream, K_ATTENTION);
    attention_backward(a->dqkv, a->scratch, a->datty, x->atty, x->lse, x->qkv, M->b.doc_start, B, T, c->NH, c->KVH, c->HS, attention_scale(c),
                       layer_window(c, l), M->stream);
    const float *inv_freq = layer_inv_freq(M, l);
    if (inv_freq) rope_backward(a->dqkv, M->b.pos, inv_freq, B * T, c->NH, c->KVH, c->HS, M->stream);
    if (c->qk_norm)
        qk_norm_backward(a->dqkv, lg(M, P_QNORMW, l), lg(M, P_KNORMW, l), a->scratch, x->qk_raw, x->qk_rstd, lp(M, P_QNORMW, l), lp(M, P_KNORMW, l),
                         B * T, c->NH, c->KVH, c->HS, norm_one(c), M->stream);
}

// A sub-layer's output product (layer l's tensor `param`, bias pb) into out: without post norms
// the product itself; with them (Gemma 3) the product into prod (kept for backward) and its
// RMSNorm (weight w, rstd kept) into out. out then goes to the fused residual add + next norm.
static void sublayer_output_forward(GpuModel *M, int l, int param, floatX *out, floatX *prod, float *rstd, const floatX *w, const floatX *inp,
                                    const floatX *pb, int BT, int IC) {
    const ModelConfig *c = &M->cfg;
    if (!c->post_norms) { linear_forward(M, l, param, out, inp, pb, BT, IC, c->C); return; }
    linear_forward(M, l, param, prod, inp, pb, BT, IC, c->C);
    kt_mark(M->stream, K_LAYERNORM);
    rmsnorm_forward(out, rstd, prod, w, BT, c->C, c->eps, norm_one(c), M->stream);
}

// The gradient of a sub-layer's output product from dout (the residual stream's): dout itself,
// or with post norms their backward into M->a.dpost (zeroed first: the kernel adds), dw += its weight gradient.
static const floatX *sublayer_output_backward(GpuModel *M, const floatX *dout, float *dw, const floatX *prod, const floatX *w, const float *rstd,
                                              int BT) {
    const ModelConfig *c = &M->cfg;
    if (!c->post_norms) return dout;
    kt_mark(M->stream, K_LAYERNORM);
    CUDA_CHECK(cudaMemsetAsync(M->a.dpost, 0, (size_t)BT * c->C * sizeof(floatX), M->stream));
    rmsnorm_backward(M->a.dpost, dw, M->a.scratch, dout, prod, w, rstd, BT, c->C, norm_one(c), M->stream);
    return M->a.dpost;
}

// ----------------------------------------------------------------------------
// Forward and backward of the whole model

// One transformer layer forward (as in train_sft.c's model_forward) from its ln1, already
// computed, up to the MLP's hidden activation; the layer's last product and residual add are
// layer_output_forward's. The first residual add is fused into ln2.
static void layer_forward(GpuModel *M, int l, int B, int T) {
    const ModelConfig *c = &M->cfg;
    int C = c->C, BT = B * T, A = c->NH * c->HS;
    LayerActs x = layer_acts(M, l, BT);
    linear_forward(M, l, P_QKVW, x.qkv, x.ln1, lp(M, P_QKVB, l), BT, C, qkv_width(c));
    attn_forward(M, l, &x, B, T);
    // the attention projection (post-normed) goes to ln2's buffer: the fused kernel reads each row before it writes it
    sublayer_output_forward(M, l, P_ATTPROJW, x.ln2, x.attn_out, x.attn_rstd, lp(M, P_POSTATTNW, l), x.atty, lp(M, P_ATTPROJB, l), BT, A);
    fused_residual_norm_forward(M, x.residual2, x.ln2, x.ln2_mean, x.ln2_rstd, x.input, x.ln2, lp(M, P_LN2W, l), lp(M, P_LN2B, l), BT);
    mlp_up_forward(M, l, &x, BT);
}

// Layer l's last product and residual add (residual3 = residual2 + [post_norm](fcproj(fch_gelu))),
// fused into the norm that follows: the next layer's ln1, or after the last layer lnf.
static void layer_output_forward(GpuModel *M, int l, int B, int T) {
    const ModelConfig *c = &M->cfg;
    int BT = B * T;
    Acts *a = &M->a;
    LayerActs x = layer_acts(M, l, BT);
    floatX *ln_out = a->lnf;
    float *mean = a->lnf_mean, *rstd = a->lnf_rstd;
    const floatX *w = lp(M, P_LNFW, 0), *b = lp(M, P_LNFB, 0);
    if (l + 1 < c->L) {
        LayerActs next = layer_acts(M, l + 1, BT);
        ln_out = next.ln1; mean = next.ln1_mean; rstd = next.ln1_rstd;
        w = lp(M, P_LN1W, l + 1); b = lp(M, P_LN1B, l + 1);
    }
    // into the norm's output buffer, which the fused kernel reads row by row before writing it
    sublayer_output_forward(M, l, P_FCPROJW, ln_out, x.mlp_out, x.mlp_rstd, lp(M, P_POSTFFNW, l), x.fch_gelu, lp(M, P_FCPROJB, l), BT, c->FF);
    fused_residual_norm_forward(M, x.residual3, ln_out, mean, rstd, x.residual2, ln_out, w, b, BT);
}

// ZeRO-3 (cuda/zero3.cuh): the compute stream waits for the gather of block k (k < L), the head
// (L) or the embeddings (L + 1) before its first kernel that reads it.
static void z3_wait(GpuModel *M, int k) {
    if (M->z3.u) zero3_wait(&M->z3, k, M->stream);
}

// Forward over B rows of T positions (the micro-batch already on the device), then
// the classifier on the M->b.num_rows rows listed in M->b.rows. With targets
// (M->b.row_targets), the losses go to M->b.losses (trl's metrics to M->b.correct and
// M->b.entropy, unless NULL) and the logits become the loss gradient scaled by grad_scale.
static void gpu_forward(GpuModel *M, int B, int T, bool with_targets, float grad_scale) {
    const ModelConfig *c = &M->cfg;
    int C = c->C, V = c->V, Vp = M->cfg_dev.V, BT = B * T, L = c->L;
    cudaStream_t s = M->stream;
    Acts *a = &M->a;
    kt_mark(s, K_ENCODER);
    if (M->z3.u) zero3_forward_begin(&M->z3, M->comm, M->params);  // ZeRO-3: the embeddings, blocks 0 and 1 (or the head)
    z3_wait(M, L + 1);
    // no wpe: Llama family, whose token embedding is scaled (Gemma 3's sqrt(C); else 1)
    encoder_forward(a->encoded, M->b.inputs, M->b.pos, M->p[P_WTE], lp(M, P_WPE, 0), embedding_scale(c), BT, C, s);
    LayerActs x0 = layer_acts(M, 0, BT);
    z3_wait(M, 0);
    norm_forward(M, x0.ln1, x0.ln1_mean, x0.ln1_rstd, a->encoded, lp(M, P_LN1W, 0), lp(M, P_LN1B, 0), BT);
    for (int l = 0; l < L; l++) {
        layer_forward(M, l, B, T);
        z3_wait(M, l + 1);                 // the next block (its ln1), or after the last the head (ln_f)
        layer_output_forward(M, l, B, T);  // ends with the next layer's ln1, or lnf
        if (M->z3.u) zero3_forward_block_done(&M->z3, M->comm, l, M->params, s);  // block l's buffer takes block l + 2
    }
    int R = M->b.num_rows;
    if (R == 0) return;
    kt_mark(s, K_CLASSIFIER);
    gather_rows(a->x_sel, a->lnf, M->b.rows, R, C, s);
    kt_mark(s, K_CLASSIFIER);
    gemm_rm(M->blas, false, true, R, Vp, C, a->x_sel, C, M->p[c->tied ? P_WTE : P_LMHEAD], C, a->logits, Vp, 0.0f);
    kt_mark(s, K_CLASSIFIER);
    if (with_targets) crossentropy_softmax(a->logits, M->b.losses, M->b.correct, M->b.entropy, M->b.row_targets, R, V, Vp, grad_scale, s);
}

// ZeRO-2 (cuda/dist.cuh): a unit's scratch is about to be written (unit_write), or unit k's
// (block k < L, the head L, the embeddings L + 1) backward is done and it goes to the shards
// (unit_done).
static void unit_write(GpuModel *M) {
    if (M->z2.u) zero2_before_write(&M->z2, M->stream);
}
static void unit_done(GpuModel *M, int k) {
    if (M->z2.u) zero2_unit_done(&M->z2, M->comm, k, M->stream);
}

// Backward after gpu_forward with targets: adds the gradients to M->grads (ZeRO-2: unit by
// unit to this rank's shard, each unit reduce-scattered as its backward ends).
static void gpu_backward(GpuModel *M, int B, int T) {
    const ModelConfig *c = &M->cfg;
    int C = c->C, Vp = M->cfg_dev.V, BT = B * T, L = c->L, R = M->b.num_rows, A = c->NH * c->HS;
    cudaStream_t s = M->stream;
    Acts *a = &M->a;
    int head = c->tied ? P_WTE : P_LMHEAD;  // the output head: wte, or the untied lm_head
    unit_write(M);  // the head's and the embeddings' (a tied head's gradient goes to wte's, in the embeddings' unit, flushed last)
    if (M->z3.u) zero3_backward_begin(&M->z3, M->comm, M->params);  // ZeRO-3: the head, the embeddings and the last two blocks are held
    // classifier (over the padded vocabulary; the padding's dlogits are 0): dx = dlogits * head, dhead += dlogits^T * x
    kt_mark(s, K_CLASSIFIER);
    gemm_rm(M->blas, false, false, R, C, Vp, a->logits, Vp, M->p[head], C, a->dx_sel, C, 0.0f);
    kt_mark(s, K_CLASSIFIER);
    if (M->g[head]) gemm_rm(M->blas, true, false, Vp, C, R, a->logits, Vp, a->x_sel, C, M->g[head], C, 1.0f);  // null: frozen (LoRA)
    kt_mark(s, K_CLASSIFIER);
    scatter_rows_zero(a->dln, a->dx_sel, M->b.rows, R, BT, C, s);
    kt_mark(s, K_OTHER);
    CUDA_CHECK(cudaMemsetAsync(a->dresidual, 0, (size_t)BT * C * sizeof(floatX), s));
    norm_backward(M, a->dresidual, lg(M, P_LNFW, 0), lg(M, P_LNFB, 0), a->dln, a->residual3 + (size_t)(L - 1) * BT * C, lp(M, P_LNFW, 0),
                  a->lnf_mean, a->lnf_rstd, BT);
    unit_done(M, L);
    for (int l = L - 1; l >= 0; l--) {
        LayerActs x = layer_acts(M, l, BT);
        z3_wait(M, l);
        if (M->recompute == 2) {  // everything but the layer's input was dropped
            norm_forward(M, x.ln1, x.ln1_mean, x.ln1_rstd, x.input, lp(M, P_LN1W, l), lp(M, P_LN1B, l), BT);
            layer_forward(M, l, B, T);
            // the MLP's post norm needs its input and rstd: the product again, its normed output dropped (dln is free here)
            if (c->post_norms)
                sublayer_output_forward(M, l, P_FCPROJW, a->dln, x.mlp_out, x.mlp_rstd, lp(M, P_POSTFFNW, l), x.fch_gelu, lp(M, P_FCPROJB, l), BT,
                                        c->FF);
        }
        if (M->recompute == 1) {  // the norm outputs and the MLP's first product were dropped
            norm_forward(M, x.ln2, x.ln2_mean, x.ln2_rstd, x.residual2, lp(M, P_LN2W, l), lp(M, P_LN2B, l), BT);
            mlp_up_forward(M, l, &x, BT);  // the forward's own calls: bit-identical activations
        }
        unit_write(M);  // after the recompute, which thus overlaps the previous block's reduce-scatter
        // MLP: residual3 = residual2 + [post_norm](fcproj(act(fc(ln2(residual2)))))
        const floatX *dmlp = sublayer_output_backward(M, a->dresidual, lg(M, P_POSTFFNW, l), x.mlp_out, lp(M, P_POSTFFNW, l), x.mlp_rstd, BT);
        mlp_down_backward(M, l, &x, dmlp, BT);
        linear_backward(M, l, P_FCW, a->dln, lg(M, P_FCW, l), lg(M, P_FCB, l), a->dfch, x.ln2, BT, C, (int)mlp_first_width(c));
        norm_backward(M, a->dresidual, lg(M, P_LN2W, l), lg(M, P_LN2B, l), a->dln, x.residual2, lp(M, P_LN2W, l), x.ln2_mean, x.ln2_rstd, BT);
        // attention: residual2 = input + [post_norm](attproj(attention(rope(qk_norm(qkv(ln1(input)))))))
        const floatX *dattn = sublayer_output_backward(M, a->dresidual, lg(M, P_POSTATTNW, l), x.attn_out, lp(M, P_POSTATTNW, l), x.attn_rstd, BT);
        linear_backward(M, l, P_ATTPROJW, a->datty, lg(M, P_ATTPROJW, l), lg(M, P_ATTPROJB, l), dattn, x.atty, BT, A, C);
        attn_backward(M, l, &x, B, T);
        if (M->recompute == 1) norm_forward(M, x.ln1, x.ln1_mean, x.ln1_rstd, x.input, lp(M, P_LN1W, l), lp(M, P_LN1B, l), BT);
        linear_backward(M, l, P_QKVW, a->dln, lg(M, P_QKVW, l), lg(M, P_QKVB, l), a->dqkv, x.ln1, BT, C, qkv_width(c));
        norm_backward(M, a->dresidual, lg(M, P_LN1W, l), lg(M, P_LN1B, l), a->dln, x.input, lp(M, P_LN1W, l), x.ln1_mean, x.ln1_rstd, BT);
        unit_done(M, l);
        if (M->z3.u) zero3_backward_block_done(&M->z3, M->comm, l, M->params, s);  // after the reduce-scatter: block l's buffer takes block l - 2
    }
    kt_mark(s, K_ENCODER);
    unit_write(M);  // the embeddings' scratch, in the allocation of block 0's, which is being reduce-scattered
    if (M->g[P_WTE]) encoder_backward(M->g[P_WTE], lg(M, P_WPE, 0), a->dresidual, &M->b.enc, embedding_scale(c), C, s);  // null: frozen (LoRA)
    unit_done(M, L + 1);
}

// ZeRO-2: a micro-batch without targets on this rank still takes part in the other ranks'
// reduce-scatters, unit by unit in the backward's order, with its (zero) scratch; ZeRO-3: in
// the forward's and the backward's gathers too, in gpu_forward's and gpu_backward's order.
static void units_done_empty(GpuModel *M) {
    if (!M->z2.u) return;
    GpuZero3 *z = M->z3.u ? &M->z3 : nullptr;
    if (z) zero3_forward_gathers_only(z, M->comm, M->params, M->stream);
    if (z) zero3_backward_begin(z, M->comm, M->params);
    unit_done(M, M->cfg.L);
    for (int l = M->cfg.L - 1; l >= 0; l--) {
        unit_done(M, l);
        if (z) zero3_backward_block_done(z, M->comm, l, M->params, M->stream);
    }
    unit_done(M, M->cfg.L + 1);
}

// Fills the host block of a micro-batch (laid out as h): its positions, its
// classifier rows (the targets' positions, or without targets the n_given rows
// given) and, with targets, the encoder backward's plan.
static void batch_fill(GpuModel *M, Batch *h, const int *inputs, const int *pos, const int *doc_start, const int *targets, int BT,
                       const int *given_rows, int n_given) {
    memcpy(h->inputs, inputs, BT * sizeof(int));
    memcpy(h->pos, pos, BT * sizeof(int));
    memcpy(h->doc_start, doc_start, BT * sizeof(int));
    h->num_rows = 0;
    h->enc.num_keys[0] = h->enc.num_keys[1] = 0;
    if (targets) {
        for (int i = 0; i < BT; i++)
            if (targets[i] >= 0) { h->rows[h->num_rows] = i; h->row_targets[h->num_rows++] = targets[i]; }
        encoder_backward_plan(&h->enc, inputs, pos, BT, M->slot_tok, M->slot_pos);
    } else {
        memcpy(h->rows, given_rows, n_given * sizeof(int));
        h->num_rows = n_given;
    }
}

// Makes the device block dev (a copy of host block h) the current micro-batch, its losses
// going to losses and, with stats not NULL, the rows' trl metrics to stats (correct) and
// stats + BT (entropy).
static void batch_use(GpuModel *M, const Batch *h, int *dev, float *losses, float *stats, int BT) {
    batch_layout(&M->b, dev, BT);
    M->b.num_rows = h->num_rows;
    M->b.enc.num_keys[0] = h->enc.num_keys[0];
    M->b.enc.num_keys[1] = h->enc.num_keys[1];
    M->b.losses = losses;
    M->b.correct = stats;
    M->b.entropy = stats ? stats + BT : NULL;
}

// One micro-batch to the device as the current one (for evaluation, generation and
// tests; a training step uploads all of its micro-batches at once instead).
static void gpu_upload_batch(GpuModel *M, const int *inputs, const int *pos, const int *doc_start, const int *targets, int BT,
                             const int *given_rows, int n_given) {
    CUDA_CHECK(cudaStreamSynchronize(M->stream));  // the previous copy from the pinned block is done
    Batch h;
    batch_layout(&h, M->host_block, BT);
    batch_fill(M, &h, inputs, pos, doc_start, targets, BT, given_rows, n_given);
    CUDA_CHECK(cudaMemcpyAsync(M->dev_block, M->host_block, batch_ints(BT) * sizeof(int), cudaMemcpyHostToDevice, M->stream));
    batch_use(M, &h, M->dev_block, M->a.losses, NULL, BT);
}

// Sum of the losses of the classifier rows, in row order in double (as on the CPU).
static double gpu_loss_sum(GpuModel *M, float *host_losses) {
    CUDA_CHECK(cudaMemcpyAsync(host_losses, M->b.losses, M->b.num_rows * sizeof(float), cudaMemcpyDeviceToHost, M->stream));
    CUDA_CHECK(cudaStreamSynchronize(M->stream));
    double sum = 0.0;
    for (int r = 0; r < M->b.num_rows; r++) sum += host_losses[r];
    return sum;
}

// ----------------------------------------------------------------------------
// One optimizer step over A*W micro-batches, W the number of ranks. Every rank makes
// all of them with the same loader (so all know the step's number of targets N
// without communication) and computes its own A (train/dist.h); the loss gradient
// is scaled by 1/N as it is formed: the gradients are those of the global mean loss.
// After the last micro-batch the gradients are summed across ranks once: an
// all-reduce, or with ZeRO-1 a reduce-scatter (each rank gets the sum of its shard),
// AdamW on the shard and an all-gather of the updated bf16 parameters; that
// communication runs on the same stream after the backward. ZeRO-2 instead reduce-scatters
// each unit's gradient as its backward ends, on the comm stream beside the backward
// (gpu_backward's unit_done), and each rank accumulates only its shard. ZeRO-3 gathers no
// weights after the update: each unit's are gathered before they are read (cuda/zero3.cuh).

// The host side is pinned, so the step's one upload (all micro-batches) and one
// download (losses, trl's metrics and gradient norm) are asynchronous copies; the step waits for
// the device once, after the gradient norm, since the loss and the norm decide
// whether AdamW runs (the numerical guard); AdamW then runs while the host moves on.
struct StepBuffers {
    int A, BT;
    int *host, *dev;                   // (A, batch_ints(BT)) the micro-batches' blocks, pinned host and device
    Batch *batches;                    // (A) host views of the blocks
    float *host_losses, *dev_losses;   // (A, 3, BT) each micro-batch's row losses, correct and entropy, pinned host and device
    float *host_norm2;                 // (1) pinned: the squared gradient norm
    float *losses;                     // (BT) pageable, for gpu_evaluate
};

static void step_buffers_init(StepBuffers *b, int A, int BT) {
    size_t n = (size_t)A * batch_ints(BT);
    b->A = A; b->BT = BT;
    CUDA_CHECK(cudaMallocHost((void **)&b->host, n * sizeof(int)));
    b->dev = (int *)dev_alloc(n * sizeof(int));
    b->batches = (Batch *)xmalloc((size_t)A * sizeof(Batch));
    for (int k = 0; k < A; k++) batch_layout(&b->batches[k], b->host + (size_t)k * batch_ints(BT), BT);
    CUDA_CHECK(cudaMallocHost((void **)&b->host_losses, (size_t)A * 3 * BT * sizeof(float)));
    b->dev_losses = (float *)dev_alloc((size_t)A * 3 * BT * sizeof(float));
    CUDA_CHECK(cudaMallocHost((void **)&b->host_norm2, sizeof(float)));
    b->losses = (float *)xmalloc((size_t)BT * sizeof(float));
}

static void step_buffers_free(StepBuffers *b) {
    CUDA_CHECK(cudaFreeHost(b->host)); CUDA_CHECK(cudaFree(b->dev)); free(b->batches);
    CUDA_CHECK(cudaFreeHost(b->host_losses)); CUDA_CHECK(cudaFree(b->dev_losses)); CUDA_CHECK(cudaFreeHost(b->host_norm2));
    free(b->losses);
}

struct StepResult {
    double loss;        // sum of target losses / number of targets
    float grad_norm;    // before clipping
    int64_t targets;
    int skipped;        // STEP_UPDATED, or why no update: STEP_NO_TARGETS, STEP_NONFINITE
    TokenSums sums;     // trl's metrics of the step's targets, summed over all ranks
    int64_t tokens;     // positions holding a token in the step's micro-batches, all ranks (trl's num_tokens grows by it)
};

// ZeRO-Offload's AdamW (-O 1) on [a, b) of the trained weights (inside this rank's shard), on
// the host's threads with train/adamw.h's formula, the kernel's: the gradient is host_grads
// (the shard read back in the step's one wait) times clip, the coefficient grad_clip_coef
// computes from the same squared norm as the device's grad_clip_scale. Piece by piece, each
// updated piece is rounded to floatX (round to nearest even, as __float2bfloat16) and its copy
// to the device's weights (`weights`: train from element lo; ZeRO-3's shard) is queued on the
// stream at once: it runs while the host updates the next piece.
#define OFFLOAD_PIECE ((size_t)1 << 22)  // values per copy: 16 MiB of fp32, 8 MiB of bf16

static void offload_adamw(GpuModel *M, floatX *weights, size_t a, size_t b, float lr, float wd, float clip, int64_t t) {
    AdamWStep step = adamw_constants(lr, M->adamw.beta1, M->adamw.beta2, M->adamw.eps, wd, t);
    for (size_t at = a; at < b; at += OFFLOAD_PIECE) {
        size_t n = b - at < OFFLOAD_PIECE ? b - at : OFFLOAD_PIECE, k0 = at - M->lo;
#pragma omp parallel for schedule(static)
        for (size_t k = k0; k < k0 + n; k++) {  // the kernel's g * (*grad_scale), then adamw_one
            M->master[k] = adamw_one(M->master[k], M->host_grads[k] * clip, &M->m[k], &M->v[k], &step);
#if !defined(ENABLE_FP32)
            M->host_weights[k] = from_float<floatX>(M->master[k]);
#endif
        }
        CUDA_CHECK(cudaMemcpyAsync(weights + k0, M->host_weights + k0, n * sizeof(floatX), cudaMemcpyHostToDevice, M->stream));
    }
}

static StepResult gpu_train_step(GpuModel *M, Loader *ld, StepBuffers *sb, int A, float lr, float weight_decay, float grad_clip, int64_t *adam_t) {
    StepResult r = {0.0, 0.0f, 0, 0, {0.0, 0.0}, 0};
    int B = ld->B, T = ld->T, BT = B * T, W = M->comm->world;
    size_t block = batch_ints(BT);
    for (int k = 0; k < A * W; k++) {  // the previous step's upload finished before its sync: the pinned blocks are free
        loader_next_batch(ld);
        r.targets += ld->num_targets;
        r.tokens += loader_batch_tokens(ld);
        if (dist_owns_microbatch(M->comm->rank, A, k))
            batch_fill(M, &sb->batches[k % A], ld->inputs, ld->pos, ld->doc_start, ld->targets, BT, NULL, 0);
    }
    if (r.targets == 0) { r.skipped = STEP_NO_TARGETS; return r; }
    float inv_targets = 1.0f / (float)r.targets;
    kt_step_begin();
    kt_mark(M->stream, K_OTHER);
    CUDA_CHECK(cudaMemcpyAsync(sb->dev, sb->host, (size_t)A * block * sizeof(int), cudaMemcpyHostToDevice, M->stream));
    if (M->z2.u) CUDA_CHECK(cudaMemsetAsync(M->gshard, 0, M->shard * sizeof(float), M->stream));  // (the scratch is zero)
    else CUDA_CHECK(cudaMemsetAsync(M->grads, 0, M->padded * sizeof(float), M->stream));
    for (int k = 0; k < A; k++) {
        if (sb->batches[k].num_rows == 0) { units_done_empty(M); continue; }  // contributes nothing
        float *rows_out = sb->dev_losses + (size_t)k * 3 * BT;  // [losses | correct | entropy]
        batch_use(M, &sb->batches[k], sb->dev + (size_t)k * block, rows_out, rows_out + BT, BT);
        M->dropout_micro = M->comm->rank * A + k;  // LoRA's dropout: the micro-batch's index over all ranks (dist_owns_microbatch)
        gpu_forward(M, B, T, true, inv_targets);
        gpu_backward(M, B, T);
    }
    M->dropout_micro = -1;  // no dropout outside the step
    kt_mark(M->stream, K_OPTIMIZER);
    if (M->z2.u) zero2_join(&M->z2, M->stream);  // ZeRO-2: the shard is summed over ranks already, unit by unit
    if (poison_this_step == POISON_GRAD) {  // test hook (trainer.h)
        float nan = NAN;
        CUDA_CHECK(cudaMemcpyAsync(M->z2.u ? M->gshard : M->grads, &nan, sizeof nan, cudaMemcpyHostToDevice, M->stream));
        CUDA_CHECK(cudaStreamSynchronize(M->stream));
    }
    // the sum over ranks; with ZeRO-1 and 2 each rank's squared norm of its shard, then their sum
    if (M->zero == 1) comm_reduce_scatter_sum(M->comm, M->grads, M->shard);
    else if (!M->zero) comm_allreduce_sum(M->comm, M->grads, M->num_train);
    global_norm_squared(M->a.norm2, M->a.scratch, M->gshard, M->zero ? M->shard : M->num_train, M->stream);
    if (M->zero) comm_allreduce_sum(M->comm, M->a.norm2, 1);
    kt_mark(M->stream, K_OTHER);
    CUDA_CHECK(cudaMemcpyAsync(sb->host_losses, sb->dev_losses, (size_t)A * 3 * BT * sizeof(float), cudaMemcpyDeviceToHost, M->stream));
    CUDA_CHECK(cudaMemcpyAsync(sb->host_norm2, M->a.norm2, sizeof(float), cudaMemcpyDeviceToHost, M->stream));
    // offloaded: the summed gradient shard to pinned memory, read after the wait below (with ZeRO-2 the
    // shard is final only after the last unit's reduction, so this copy cannot start earlier)
    if (M->offload) CUDA_CHECK(cudaMemcpyAsync(M->host_grads, M->gshard, M->shard * sizeof(float), cudaMemcpyDeviceToHost, M->stream));
    // The step's one wait for the device (with several ranks: with comm_wait's deadline):
    // the loss and the gradient norm decide whether AdamW runs; with one rank AdamW then
    // runs while the host prepares the next step.
    if (M->comm->comm) comm_wait(M->comm, "gradient reduction");
    else CUDA_CHECK(cudaStreamSynchronize(M->stream));
    double sums[3] = {0.0, 0.0, 0.0};  // loss, correct, entropy: in row order in double, as on the CPU; then summed over ranks
    for (int k = 0; k < A; k++)
        for (int q = 0; q < sb->batches[k].num_rows; q++)
            for (int j = 0; j < 3; j++) sums[j] += sb->host_losses[((size_t)k * 3 + j) * BT + q];
    if (M->comm->comm) ops_allreduce_f64(M->comm, sums, 3);
    r.loss = sums[0] / (double)r.targets;
    r.sums.correct = sums[1];
    r.sums.entropy = sums[2];
    if (poison_this_step == POISON_LOSS) r.loss = NAN;  // test hook (trainer.h)
    r.grad_norm = sqrtf(*sb->host_norm2);
    // a NaN or Inf loss or gradient never reaches the weights or AdamW's moments and count
    if (!isfinite(r.loss) || !isfinite(r.grad_norm)) { r.skipped = STEP_NONFINITE; kt_step_end(M->stream); return r; }
    kt_mark(M->stream, K_OPTIMIZER);
    float clip = grad_clip_coef(*sb->host_norm2, grad_clip);  // offloaded: the host's copy of grad_clip_scale's
    if (!M->offload) grad_clip_scale(M->a.grad_scale, M->a.norm2, grad_clip, M->stream);
    *adam_t += 1;
    // AdamW on this rank's part [lo, hi) of each tensor (all of it without ZeRO-1), on the device or
    // offloaded on the host; with LoRA the adapters are one range, every A and B a matrix with
    // weight decay (as the CPU trainer's)
    size_t off = 0, lo = M->lo, hi = M->lo + M->shard < M->num_train ? M->lo + M->shard : M->num_train;
    floatX *weights = M->z3.u && !M->lora.n ? M->train : M->train + lo;  // the floatX weights from element lo (ZeRO-3: the shard itself)
    for (int i = 0; i < (M->lora.n ? 1 : NUM_PARAM_TENSORS); i++) {
        size_t n = M->lora.n ? M->num_train : param_numel(&M->cfg_dev, i);
        size_t a = off > lo ? off : lo, b = off + n < hi ? off + n : hi;
        float wd = M->lora.n || PARAM_INFO[i].decay ? weight_decay : 0.0f;
        if (a < b && M->offload) offload_adamw(M, weights, a, b, lr, wd, clip, *adam_t);
        else if (a < b)
            adamw_update(M->master + (a - lo), weights + (a - lo), M->gshard + (a - lo), M->m + (a - lo), M->v + (a - lo), b - a, lr, M->adamw.beta1, M->adamw.beta2,
                         M->adamw.eps, wd, M->a.grad_scale, (int)*adam_t, M->stream);
        off += n;
    }
    // ZeRO-3: nothing is gathered until a unit is read; with LoRA the frozen base's gathers stay
    // valid and the adapters, like every trained weight below ZeRO-3, go to every rank at once
    if (M->z3.u && !M->lora.n) zero3_weights_updated(&M->z3, M->stream);
    else if (M->zero) {  // every rank's updated shard of the bf16 weights to every rank
        comm_allgather(M->comm, M->train, M->shard);
        comm_wait(M->comm, "parameter all-gather");
    }
    kt_step_end(M->stream);
    return r;
}

// Mean loss per target over up to max_batches micro-batches (-1: the whole file).
// Rank r evaluates the micro-batches k with k % W == r; the sums are added over ranks. ZeRO-3:
// every rank makes one pass per round of W batches, its forward or, when its batch has no
// targets or the file ended before it, the forward's gathers alone (the others' forwards need them).
static double gpu_evaluate(GpuModel *M, Loader *ld, StepBuffers *sb, int max_batches, int64_t *targets_out) {
    loader_seek(ld, 0, 0);
    double sum = 0.0;
    int64_t n = 0;
    int k = 0, W = M->comm->world;
    bool passed = false;  // ZeRO-3: this rank has made its pass of the round
    for (; (max_batches < 0 || k < max_batches) && !ld->exhausted; k++) {
        loader_next_batch(ld);
        if (k % W == 0) passed = false;
        if (dist_owns_val_batch(M->comm->rank, W, k) && ld->num_targets > 0) {
            gpu_upload_batch(M, ld->inputs, ld->pos, ld->doc_start, ld->targets, ld->B * ld->T, NULL, 0);
            gpu_forward(M, ld->B, ld->T, true, 1.0f);
            sum += gpu_loss_sum(M, sb->losses);
            n += ld->num_targets;
            passed = true;
        }
        if (M->z3.u && k % W == W - 1 && !passed) zero3_forward_gathers_only(&M->z3, M->comm, M->params, M->stream);
    }
    if (M->z3.u && k % W != 0 && !passed) zero3_forward_gathers_only(&M->z3, M->comm, M->params, M->stream);  // the last round, cut short
    if (M->z3.u) zero2_join(&M->z2, M->stream);  // the gathers before the compute stream's collective below
    if (M->comm->comm) {
        double sums[2] = {sum, (double)n};  // target counts are far below 2^53: exact in double
        ops_allreduce_f64(M->comm, sums, 2);
        sum = sums[0];
        n = (int64_t)sums[1];
    }
    *targets_out = n;
    return n ? sum / (double)n : NAN;
}

// The GPU model as a Generator: each call runs the whole sequence (one row, at most
// the trainer's T positions) and returns the last position's logits.
struct GpuGenerator { GpuModel *M; int *pos, *start; };

static void gpu_generator_reset(void *) {}

// ZeRO-3: rank 0 generates alone, but each forward gathers from every rank, so the others
// follow it: before each of rank 0's forwards the ranks sum 1 (rank 0's `more`), after its last
// 0, and for each 1 the others run the forward's gathers. Returns whether a forward follows.
static bool z3_follow_signal(GpuModel *M, bool more) {
    zero2_join(&M->z2, M->stream);  // the gathers so far before the compute stream's collective
    double x = more ? 1.0 : 0.0;
    ops_allreduce_f64(M->comm, &x, 1);
    return x > 0.0;
}

static const float *gpu_generator_next(void *self, const int *seq, int len) {
    GpuGenerator *g = (GpuGenerator *)self;
    GpuModel *M = g->M;
    int row = len - 1;
    if (M->z3.u) z3_follow_signal(M, true);
    gpu_upload_batch(M, seq, g->pos, g->start, NULL, len, &row, 1);
    gpu_forward(M, 1, len, false, 1.0f);
    CUDA_CHECK(cudaMemcpyAsync(M->host_row, M->a.logits, M->cfg.V * sizeof(floatX), cudaMemcpyDeviceToHost, M->stream));
    CUDA_CHECK(cudaStreamSynchronize(M->stream));
    for (int v = 0; v < M->cfg.V; v++) M->host_logits[v] = to_float(M->host_row[v]);
    return M->host_logits;
}

// Samples and -E (trainer.h's generate_and_evaluate, rank 0's); with ZeRO-3 the other ranks
// follow rank 0's forwards (z3_follow_signal).
static void gpu_generate(GpuModel *M, const TrainArgs *a, const RunSetup *r, const Generator *gen, int64_t step, int final, RunLog *log, Rng *rng) {
    if (!M->z3.u || !generation_due(a, r, step, final)) { generate_and_evaluate(a, r, gen, step, final, log, rng); return; }
    if (M->comm->rank == 0) {
        generate_and_evaluate(a, r, gen, step, final, log, rng);
        z3_follow_signal(M, false);
        return;
    }
    while (z3_follow_signal(M, false)) zero3_forward_gathers_only(&M->z3, M->comm, M->params, M->stream);
}

static void gpu_generator_init(GpuGenerator *g, Generator *gen, GpuModel *M) {
    int cap = M->T < M->cfg.maxT ? M->T : M->cfg.maxT;
    g->M = M;
    g->pos = (int *)xmalloc((size_t)cap * sizeof(int));
    g->start = (int *)xcalloc((size_t)cap, sizeof(int));
    for (int i = 0; i < cap; i++) g->pos[i] = i;
    gen->self = g; gen->reset = gpu_generator_reset; gen->next_logits = gpu_generator_next; gen->V = M->cfg.V; gen->cap = cap;
}

// An fp32 array of the trained weights' shape from the device layout to the host layout: the
// model's (vocabulary padding, params_to_host) or the adapters' (the same layout on both);
// kind: where dev is, as in params_to_host.
static void trained_to_host(const GpuModel *M, float *host, const float *dev, cudaMemcpyKind kind = cudaMemcpyDeviceToHost) {
    if (!M->lora.n) { params_to_host(M, host, dev, kind); return; }
    CUDA_CHECK(cudaMemcpy(host, dev, M->num_train * sizeof(float), kind));
}

// One fp32 state array (this rank's shard) to the host in the host layout, on every rank.
// With ZeRO the shards meet in rounds through grads (free between steps): in each, every
// rank puts the next piece of its shard at its place in grads (a W-th of grads: with ZeRO-1
// the whole shard, with ZeRO-2, where grads is the units' scratch, a part of it), the
// all-gather brings every rank's, and they go to a host copy of the device layout.
// Offloaded (-O 1) the state is in pinned host memory: the same, from there.
static void state_to_host(GpuModel *M, float *host, const float *state) {
    if (!M->zero) { trained_to_host(M, host, state, M->offload ? cudaMemcpyHostToHost : cudaMemcpyDeviceToHost); return; }
    size_t W = (size_t)M->comm->world, S = M->shard, k = M->grad_floats / W < S ? M->grad_floats / W : S;
    float *full = (float *)xmalloc(M->padded * sizeof(float));
    for (size_t at = 0; at < S; at += k) {
        size_t n = S - at < k ? S - at : k;
        CUDA_CHECK(cudaMemcpyAsync(M->grads + (size_t)M->comm->rank * n, state + at, n * sizeof(float),
                                   M->offload ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice, M->stream));
        comm_allgather(M->comm, M->grads, n);
        comm_wait(M->comm, "checkpoint gather");
        for (size_t r = 0; r < W; r++) CUDA_CHECK(cudaMemcpy(full + r * S + at, M->grads + r * n, n * sizeof(float), cudaMemcpyDeviceToHost));
    }
    if (M->z2.u) CUDA_CHECK(cudaMemsetAsync(M->grads, 0, M->grad_floats * sizeof(float), M->stream));  // the scratch is zero between flushes
    trained_to_host(M, host, full, cudaMemcpyHostToHost);
    free(full);
}

// The host's full array (host layout) into this rank's shard of a state array (offloaded: in host memory).
static void state_to_device(GpuModel *M, float *state, const float *host) {
    float *full = (float *)xmalloc(M->padded * sizeof(float));
    trained_to_dev_layout(M, full, host);
    CUDA_CHECK(cudaMemcpy(state, full + M->lo, M->shard * sizeof(float), M->offload ? cudaMemcpyHostToHost : cudaMemcpyHostToDevice));
    free(full);
}

// Master weights (of the model, or with LoRA of the adapters) and moments back to the host
// (host layout), for checkpoints: a collective (every rank calls it); the same arrays as one
// process would write.
static void gpu_download_state(GpuModel *M, float *params, float *m, float *v) {
    state_to_host(M, params, M->master);
    state_to_host(M, m, M->m);
    state_to_host(M, v, M->v);
}

// AdamW moments from the host (host layout), for a resumed run.
static void gpu_upload_moments(GpuModel *M, const float *m, const float *v) {
    state_to_device(M, M->m, m);
    state_to_device(M, M->v, v);
}

// ----------------------------------------------------------------------------
// The device memory plan of gpu_model_build against what the device has free:
// refuse before allocating rather than fail halfway through. Per rank, for Ψ
// parameters: floatX weights (2Ψ in bf16) and fp32 gradients (4Ψ), both whole on
// every rank, plus the fp32 master weights and two AdamW moments (12Ψ) divided by W
// with ZeRO-1: 2Ψ + 4Ψ + 12Ψ/W bytes. (The ZeRO paper's 2Ψ + 2Ψ + 12Ψ/W keeps bf16
// gradients; this trainer accumulates them in fp32.) The fp32 build has no separate
// master copy: 4Ψ + 4Ψ + 8Ψ/W. ZeRO-2 keeps a shard of the gradients and the units' scratch
// U (the embeddings', the head's and one block's; LoRA: the adapters' gradient) instead:
// 2Ψ + 4Ψ/W + 4U + 12Ψ/W. ZeRO-3 keeps the floatX weights' shard and the gathered units' buffers
// G (the embeddings', the head's and two blocks', cuda/zero3.cuh) instead: 2Ψ/W + 2G + 4Ψ/W + 4U + 12Ψ/W.
// With LoRA, for Ψ frozen weights and Φ adapter weights: 2Ψ + 2Φ weights, 4Φ gradients and
// 12Φ/W state (fp32 build: 4Ψ + 4Φ + 4Φ + 8Φ/W), plus the adapters' activations; ZeRO-3 shards
// the frozen weights the same way: 2Ψ/W + 2G + 2Φ.
// QLoRA (q4 given): the layers' linear weights leave Ψ; they count as their NF4 state on the
// device (codes, absmax or qabsmax with the nested absmax, each array 256-byte aligned: about
// 0.53 bytes a weight in blocks of 64) plus one floatX scratch of the largest layer slice.
// q4->w null: the base as --load_in_4bit would quantize cfg's (for a plan of a shape alone).
// Offloaded (-O 1, offload_adamw) the state leaves the device: 0 there, and on the host in pinned
// memory the master shard and the moments, 12Ψ/W in both builds (the fp32 build's master is a copy
// of its own there), host_state, plus the staging host_staging: the gradient shard read back
// (4Ψ/W) and, in bf16, the updated weights on their way to the device (2Ψ/W).
struct MemPlan {
    double params, grads, grad_scratch, state, acts, base4, scratch4;  // device bytes; grad_scratch: ZeRO-2's part of grads
    double gathered;                                                  // ZeRO-3's part of params: the gathered units' buffers
    double host_state, host_staging;                                  // pinned host bytes of the offloaded optimizer
};

static MemPlan memory_plan(const ModelConfig *cfg, const LoraLayout *lora, int B, int T, int recompute, int world, int zero,
                           const Bnb4Base *q4 = nullptr, int offload = 0) {
    ModelConfig dev = *cfg;  // the device's layout: vocabulary padded as in gpu_model_build
    dev.V = (cfg->V + VOCAB_PAD - 1) / VOCAB_PAD * VOCAB_PAD;
    size_t P = model_num_parameters(&dev), trained = lora->n ? lora->floats : P;
    MemPlan m = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    if (q4) {
        for (int i = 0; i < NUM_PARAM_TENSORS; i++) P -= bnb4_is_linear(i) ? param_numel(&dev, i) : 0;
        m.base4 = (double)nf4_base_device_bytes(q4->w ? q4 : NULL, cfg);
        m.scratch4 = (double)nf4_scratch_numel(cfg) * sizeof(floatX);
    }
    size_t S = zero_shard(trained, world, zero), N = zero && world > 1 ? S * world : trained;
    Acts sizing;
    size_t scratch, BT = (size_t)B * T;
    m.gathered = zero >= 3 && world > 1 ? (double)zero3_gathered_floats(&dev) * sizeof(floatX) : 0.0;
    // ZeRO-3: the shard of the model (LoRA: of the frozen base, plus the adapters, whole) and the gathered units
    m.params = m.gathered > 0 ? (double)(zero_shard(P, world, zero) + (lora->n ? N : 0)) * sizeof(floatX) + m.gathered
                              : (double)(lora->n ? P + N : N) * sizeof(floatX);
    m.grad_scratch = zero >= 2 && world > 1 ? 4.0 * (double)dist_zero2_scratch_floats(&dev, lora) : 0.0;
    m.grads = zero >= 2 && world > 1 ? 4.0 * (double)S + m.grad_scratch : 4.0 * N;
    m.state = offload ? 0.0 : (sizeof(floatX) == sizeof(float) ? 8.0 : 12.0) * S;
    m.host_state = offload ? 12.0 * S : 0.0;
    m.host_staging = offload ? (4.0 + (sizeof(floatX) == sizeof(float) ? 0.0 : (double)sizeof(floatX))) * S : 0.0;
    m.acts = (double)gpu_acts_alloc(&sizing, &scratch, &dev, lora, B, T, recompute, false) + (double)batch_ints((int)BT) * sizeof(int);
    return m;
}

static double plan_total(const MemPlan *m) { return m->params + m->base4 + m->scratch4 + m->grads + m->state + m->acts; }

// ----------------------------------------------------------------------------
// The planner (train/plan.h's search) on this trainer's plan: the shape, and the knobs it may turn.
struct PlanShape {
    const ModelConfig *cfg;
    const LoraLayout *lora;
    const Bnb4Base *q4;  // QLoRA's base, or null
    int T, world;
    PlanLimits limits;  // -Z up to 3, or 2 for QLoRA (a 4-bit base is not sharded); -O 1
};

static MemPlan plan_memory(const PlanShape *s, PlanKnobs k) {
    return memory_plan(s->cfg, s->lora, k.B, s->T, k.recompute, s->world, k.zero, s->q4, k.offload);
}

static double plan_shape_total(const void *shape, PlanKnobs k) {
    MemPlan m = plan_memory((const PlanShape *)shape, k);
    return plan_total(&m);
}

// Refuses (one line, exit 1) a plan that needs more than `available` bytes, naming its terms
// and the cheapest change that fits, or what to do when no flag of the run's makes it fit.
static void check_device_memory(const PlanShape *s, PlanKnobs now, const MemPlan *m, double available, const char *source) {
    if (plan_total(m) <= available) return;
    const char *names[6] = {"parameters (" PRECISION_NAME ")", "gradients (fp32)", "master weights and AdamW state (fp32, this rank's ZeRO shard)",
                            "activations", "the 4-bit base (NF4 codes, absmax, nested state)", "the dequantization scratch (one layer's weight)"};
    double bytes[6] = {m->params, m->grads, m->state, m->acts, m->base4, m->scratch4};
    char terms[1024] = "", change[96], advice[256];
    for (int i = 0, k = 0; i < (m->base4 > 0 ? 6 : 4); i++) k += snprintf(terms + k, sizeof terms - k, "%s%s %.2f GiB", i ? ", " : "", names[i], bytes[i] / 1073741824.0);
    PlanKnobs fit;
    if (plan_cheapest_fit(plan_shape_total, s, s->world > 1 ? s->limits : PlanLimits{now.zero, s->limits.offload}, now, available, &fit)) {
        MemPlan f = plan_memory(s, fit);
        plan_flags(now, fit, change, sizeof change);
        snprintf(advice, sizeof advice, "the cheapest change that fits:%s (%.2f GiB)", change, plan_total(&f) / 1073741824.0);
    } else {
        snprintf(advice, sizeof advice, "no setting of -Z, -r, -b, -O makes it fit: use more ranks, LoRA (-A), QLoRA (--load_in_4bit) or a smaller model (-e)");
    }
    fatal("not enough device memory: each rank needs %.2f GiB (%s) but %.2f GiB is available (%s); %s", plan_total(m) / 1073741824.0, terms,
          available / 1073741824.0, source, advice);
}

// --plan GIB: the plan of these flags on W ranks (-W) of GPUs with GIB GiB each, printed
// without a GPU, data or weights (the shape from -e's config.json, or a size with -i's
// vocabulary); exits 0 when it fits, else as a run would refuse it.
static int plan_only(const char *prog, TrainArgs *a, int recompute, double gib) {
    ModelConfig cfg;
    if (is_directory(a->init)) model_read_hf_config(a->init, &cfg);
    else if (model_parse_descriptor(a->init, &cfg) == 0) {
        if (!a->train_path[0]) usage_error(prog, "--plan with a size (-e %s) needs -i DATA for the vocabulary, or -e a model directory", a->init);
        DataFile df;
        data_load(&df, a->train_path);
        cfg.V = (int)df.vocab_size;
        data_free(&df);
        model_check_config(&cfg, a->init);
    } else usage_error(prog, "--plan: -e must be a model directory (its config.json) or a size like l16c2048h32k8f8192");
    if (a->T == 0) a->T = cfg.maxT < 512 ? cfg.maxT : 512;
    LoraLayout lora;
    memset(&lora, 0, sizeof lora);
    if (a->lora.rank) {
        LoraConfig lc = {a->lora.rank, a->lora.alpha, a->lora.dropout, a->lora.rslora, 0};
        char err[512];
        if (!lora_parse_targets(&cfg, a->lora.targets, "-T", &lc.targets, err, sizeof err)) usage_error(prog, "%s", err);
        lora_layout_init(&lora, &cfg, &lc);
    }
    Bnb4Base at_load;  // w null: as --load_in_4bit would quantize the shape
    memset(&at_load, 0, sizeof at_load);
    if (a->load_in_4bit && !a->lora.rank) usage_error(prog, "--load_in_4bit needs -A (QLoRA trains adapters on the 4-bit base)");
    int world = a->world > 0 ? a->world : 1;
    PlanShape s = {&cfg, &lora, a->load_in_4bit ? &at_load : nullptr, a->T, world, {a->load_in_4bit ? 2 : 3, 1}};
    PlanKnobs now = {a->B, recompute, world > 1 ? (a->zero >= 0 ? a->zero : 1) : 0, a->offload};
    MemPlan m = plan_memory(&s, now);
    double GiB = 1073741824.0, available = gib * GiB - BLAS_WORKSPACE;
    printf("plan| %s: P = %zu%s, W = %d, ZeRO-%d%s, -b %d -t %d -r %d, %s\n", a->init, model_num_parameters(&cfg), a->lora.rank ? " (LoRA)" : "", world,
           now.zero, now.offload ? ", optimizer offloaded (-O 1)" : "", a->B, a->T, recompute, PRECISION_NAME);
    char gathered[96] = "", host[128] = "";
    if (m.gathered > 0) snprintf(gathered, sizeof gathered, " (of them the gathered units %.2f GiB)", m.gathered / GiB);
    if (now.offload) snprintf(host, sizeof host, "; on the host, pinned: %.2f GiB of master weights and AdamW and %.2f GiB of staging", m.host_state / GiB, m.host_staging / GiB);
    printf("plan| per rank: parameters %.2f GiB%s + gradients %.2f GiB + master weights and AdamW %.2f GiB + activations %.2f GiB%s = %.2f GiB; "
           "a GPU of %.2f GiB has %.2f GiB for them (less the cuBLAS workspace)%s\n", m.params / GiB, gathered, m.grads / GiB, m.state / GiB, m.acts / GiB,
           m.base4 > 0 ? " + the 4-bit base and its scratch" : "", plan_total(&m) / GiB, gib, available / GiB, host);
    fflush(stdout);
    check_device_memory(&s, now, &m, available, "--plan");
    printf("plan| fits\n");
    lora_layout_free(&lora);
    return 0;
}

// Offloaded (-O 1): the pinned host arrays against the host's MemAvailable (each rank of a node
// checks alone: ranks started together may each see the memory the others are about to take).
static void check_offload_host_memory(const MemPlan *m) {
    MemTerm terms[] = {{"master weights and AdamW state (fp32, pinned, this rank's ZeRO shard; -O 1)", m->host_state,
                        "use more ranks with -Z 1 or -Z 2 (each holds 1/W), or keep the state on the GPU (-O 0)"},
                       {"gradient and weight staging (pinned; -O 1)", m->host_staging, "use more ranks with -Z 1 or -Z 2 (each holds 1/W)"}};
    check_memory_plan(terms, 2, host_memory_available(), "MemAvailable in /proc/meminfo");
}

// The NCCL unique id from rank 0 to every rank. Built with MPI (make train_sftcu_mpi)
// and started by mpirun (or srun with MPI): MPI_Bcast, MPI ended by dist_finish.
// Otherwise through train/rendezvous.h: TCP to MASTER_ADDR, or files in the shared
// directory -f DIR, where ranks of another run are refused (over MPI, the
// dist_check_same calls after comm_start refuse them).
#ifndef SFT_NO_NCCL
static void exchange_nccl_id(Dist *d, const TrainArgs *a, uint64_t fingerprint, ncclUniqueId *id) {
    if (d->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(id);
        if (r != ncclSuccess) fatal("ncclGetUniqueId: %s", ncclGetErrorString(r));
    }
#ifdef USE_MPI
    if (dist_mpi_launched(d)) {
        dist_mpi_init(d);
        MPI_Bcast(id, (int)sizeof *id, MPI_BYTE, 0, MPI_COMM_WORLD);
        return;
    }
#endif
    char err[512];
    RdzvJob job;
    if (rdzv_job_init(&job, d->rank, d->world, fingerprint, err, sizeof err) != 0) fatal("%s", err);
    if (rdzv_exchange(&job, a->rdzv_dir, id, sizeof *id, err, sizeof err) != 0) fatal("rank %d of %d: %s", d->rank, d->world, err);
}
#endif

#ifndef SFT_NO_MAIN
int main(int argc, char **argv) {
    preempt_install();
    TrainArgs args;
    train_args_defaults(&args);
    args.bnb4_supported = 1;  // QLoRA: LoRA on a 4-bit base (-e a bnb-4bit directory, --load_in_4bit)
    int recompute = 0;
    float plan_gib = 0;
    Flag flags[] = {COMMON_FLAGS(&args),
                    {'r', FLAG_INT, &recompute, "recompute in backward: 0 none, 1 norms (LayerNorm, RMSNorm) and the MLP's first product with its GELU (SwiGLU), 2 whole layers (default 0)"}};
    LongFlag long_flags[] = {COMMON_LONG_FLAGS(&args),
                             {"plan", FLAG_FLOAT, &plan_gib, "print the device memory each of -W ranks would need with these flags, on GPUs of this many "
                              "GiB, and exit (1 with the cheapest change that fits, if it does not); needs no GPU, no data with -e a model directory"}};
    parse_flags_with_long(argc, argv, "-i train.bin [flags]", flags, (int)(sizeof flags / sizeof flags[0]), long_flags,
                          (int)(sizeof long_flags / sizeof long_flags[0]));
    if (plan_gib > 0) return plan_only(argv[0], &args, recompute, plan_gib);
    check_train_args(argv[0], &args);
    const int save_dtype = hf_save_dtype_from_name(args.save_dtype);  // HF_SAVE_*: exported weights
    if (recompute < 0 || recompute > 2) usage_error(argv[0], "-r must be 0, 1 or 2, got %d", recompute);
    Dist dist;
    dist_discover(&dist, argv[0], &args);
    comm_require_nccl(&dist);  // a build without NCCL (-DSFT_NO_NCCL) refuses W > 1 here
    int lead = dist.rank == 0;  // only rank 0 prints, writes metrics and saves checkpoints
    // ranks other than 0 train silently (errors still reach stderr); their log is silent too (trainer.h)
    if (!lead && !freopen("/dev/null", "w", stdout)) fatal("/dev/null: cannot open: %s", strerror(errno));
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) fatal("no CUDA device found; use ./train_sft on the CPU");
    if (dist.local_rank >= devices)
        fatal("rank %d: local rank %d needs GPU %d, but %d GPU(s) are visible (one process per GPU; -D sets the GPU)", dist.rank,
              dist.local_rank, dist.local_rank, devices);
    CUDA_CHECK(cudaSetDevice(dist.local_rank));  // before anything allocates on a device or NCCL looks at it

    RunSetup run;
    setup_run(argv[0], &args, &run);
    if (dist.zero == 3 && dist.world > 1 && run.q4.w)  // as the CPU trainer
        usage_error(argv[0], "-Z 3 shards the floatX weights; a 4-bit base (QLoRA) keeps its NF4 weights outside them: use -Z 2");
    if (run_already_finished(&args, &run, dist.rank == 0)) {  // a restarted job: nothing written
        run_free(&run);
        return 0;
    }
    ModelConfig cfg = run.cfg;
    int steps = run.steps, A = run.A, BT = args.B * args.T;
    GpuComm comm;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
#ifndef SFT_NO_NCCL
    if (dist.world > 1) exchange_nccl_id(&dist, &args, run_fingerprint(&args, &run), &id);
#endif
    comm_start(&comm, &dist, &id, 0);
    dist_check_same(&dist, run_fingerprint(&args, &run), "the run's flags, data files and model shape");
    dist_check_same(&dist, fnv1a(0xcbf29ce484222325ull, run.params, model_num_parameters(&run.cfg) * sizeof(float)),
                    "the model's starting weights (-e, or the checkpoint of -y 1)");
    bool lora = run_is_lora(&run);  // LoRA: the base frozen, the adapters run.adapter train
    if (lora) dist_check_same(&dist, fnv1a(0xcbf29ce484222325ull, run.adapter, run.lora.floats * sizeof(float)), "the LoRA adapter's starting weights");
    size_t free0, total_mem;
    CUDA_CHECK(cudaMemGetInfo(&free0, &total_mem));
    attention_check_heads(cfg.NH, cfg.KVH, cfg.HS);  // before allocating: head sizes without attention kernels (e.g. 12)
    PlanShape shape = {&cfg, &run.lora, run.q4.w ? &run.q4 : nullptr, args.T, dist.world, {run.q4.w ? 2 : 3, 1}};
    PlanKnobs knobs = {args.B, recompute, dist.zero, args.offload};
    MemPlan plan = plan_memory(&shape, knobs);
    check_device_memory(&shape, knobs, &plan, (double)free0 - (double)BLAS_WORKSPACE, "free on the device, cudaMemGetInfo, less the cuBLAS workspace");
    if (args.offload) check_offload_host_memory(&plan);
    if (lead) warn_lost_targets(&run.train, args.T);
    if (lead) open_output_dir(args.out_dir);
    if (lead && run.write_base) save_hf_dir(run.lora_base, args.out_dir, &run.cfg, &run.p, &run.extras, HF_SAVE_F32);  // LoRA's base as trained on, for adapter_config.json to name
    GpuModel M;
    gpu_model_build(&M, &cfg, run.params, &run.lora, run.adapter, args.B, args.T, recompute, &comm, dist.zero, &run.q4, args.offload);
    M.dropout_seed = (uint64_t)args.seed;
    M.adamw = args.adamw;
    comm.stream = M.stream;  // from now on the collectives run on the model's stream
    size_t P = lora ? run.lora.floats : M.num_params;  // the trained weights in the host layout (checkpoints)
    CheckpointLora ck_lora = {&run.lora, run.adapter, run.lora_base, run.lora_state};
    float *host_m = (float *)xcalloc(P, sizeof(float)), *host_v = (float *)xcalloc(P, sizeof(float));
    Loader loader, val_loader;
    loader_init(&loader, &run.train, args.B, args.T, args.shuffle, (uint64_t)args.seed, 1);
    if (run.have_val) loader_init(&val_loader, &run.val, args.B, args.T, 0, 0, 0);
    TrainState state;
    memset(&state, 0, sizeof state);
    Rng sample_rng;
    rng_seed(&sample_rng, (uint64_t)args.seed + 1);
    resume_state(&args, &run, &state, host_m, host_v, P, &loader, &sample_rng);
    if (args.resume) gpu_upload_moments(&M, host_m, host_v);
    char trainer[200];
    const char *offloaded = args.offload ? ", AdamW offloaded to the CPU" : "";
    if (dist.world > 1)
        snprintf(trainer, sizeof trainer, "train_sftcu (%d GPUs over NCCL, ZeRO-%d, %s, recompute level %d%s)", dist.world, M.zero, PRECISION_NAME,
                 recompute, offloaded);
    else snprintf(trainer, sizeof trainer, "train_sftcu (GPU, %s, recompute level %d%s)", PRECISION_NAME, recompute, offloaded);
    RunLog log;
    run_log_open(&log, &args, &run, state.step, trainer);
    StepBuffers sb;
    step_buffers_init(&sb, A, BT);

    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dist.local_rank));
    size_t free1;
    CUDA_CHECK(cudaMemGetInfo(&free1, &total_mem));
    double MiB = 1048576.0;
    printf("device| %s, %.1f GiB, %s, recompute level %d\n", prop.name, total_mem / 1073741824.0, PRECISION_NAME, recompute);
#ifndef SFT_NO_NCCL
    if (dist.world > 1) {
        int v = 0;
        ncclGetVersion(&v);  // since NCCL 2.9: major * 10000 + minor * 100 + patch
        printf("ranks | %d (from %s), ZeRO-%d, NCCL %d.%d.%d\n", dist.world, dist.launcher, M.zero, v / 10000, v / 100 % 100, v % 100);
    }
#endif
    print_run_summary(&args, &run, M.num_params);
    if (lora) print_lora_summary(&run);
    // every rank's device memory in use, printed by rank 0, against the plan (the same on every rank)
    double *used = (double *)xcalloc((size_t)dist.world, sizeof(double));
    used[dist.rank] = (double)(free0 - free1);
    if (comm.comm) ops_allreduce_f64(&comm, used, (size_t)dist.world);
    bool fp32 = sizeof(floatX) == sizeof(float);
    const char *g = M.z2.u ? (lora ? "4A/W + 4U" : "4P/W + 4U") : lora ? "4A" : "4P";  // the gradients (ZeRO-2: shard and scratch)
    char formula[128], adapters[160] = "", base4[200] = "", grad_parts[128] = "", param_parts[128] = "", host_part[200] = "";
    char state_f[16] = "";  // the state's term on the device: none when offloaded
    if (!args.offload) snprintf(state_f, sizeof state_f, " + %s%c/W", fp32 ? "8" : "12", lora ? 'A' : 'P');
    const char *wts = M.z3.u ? (fp32 ? "4P/W + 4G" : "2P/W + 2G") : (fp32 ? "4P" : "2P");  // the floatX weights (ZeRO-3: the shard and the gathered units)
    if (run.q4.w) snprintf(formula, sizeof formula, fp32 ? "QLoRA: 4(P - Q) + NF4(Q) + 4S + 4A + %s%s" : "QLoRA: 2(P - Q) + NF4(Q) + 2S + 2A + %s%s", g, state_f);
    else if (lora) snprintf(formula, sizeof formula, "LoRA: %s + %s + %s%s", wts, fp32 ? "4A" : "2A", g, state_f);
    else snprintf(formula, sizeof formula, "%s + %s%s", wts, g, state_f);
    if (args.offload)
        snprintf(host_part, sizeof host_part, " (offloaded, -O 1: %.2f MiB in pinned host memory, 12%c/W, and %.2f MiB of gradient%s staging there)",
                 plan.host_state / MiB, lora ? 'A' : 'P', plan.host_staging / MiB, fp32 ? "" : " and weight");
    if (lora) snprintf(adapters, sizeof adapters, ", A = %zu adapter weights", M.num_train);
    // Q: the layers' linear weights, the 4-bit base (of them q4n in NF4; a checkpoint's 16-bit parts count in its bytes as floatX)
    size_t q4all = 0, q4n = 0;
    for (int i = 0; run.q4.w && i < NUM_PARAM_TENSORS; i++) q4all += bnb4_is_linear(i) ? param_numel(&cfg, i) : 0;
    for (size_t j = 0; run.q4.w && j < (size_t)NUM_PARAM_TENSORS * run.q4.L * 3; j++) q4n += run.q4.w[j].codes ? (size_t)run.q4.w[j].n : 0;
    if (run.q4.w) {
        size_t k = strlen(adapters);
        snprintf(adapters + k, sizeof adapters - k, ", Q = %zu linear weights, %zu of them in NF4", q4all, q4n);
    }
    if (M.z2.u) {
        size_t k = strlen(adapters);
        snprintf(adapters + k, sizeof adapters - k, ", U = %zu", M.grad_floats);
        snprintf(grad_parts, sizeof grad_parts, " (ZeRO-%d: the shard %.2f and the units' scratch %.2f)", M.zero, (plan.grads - plan.grad_scratch) / MiB,
                 plan.grad_scratch / MiB);
    }
    if (M.z3.u) {  // G: the gathered embeddings, head and two blocks (cuda/zero3.cuh)
        size_t k = strlen(adapters);
        snprintf(adapters + k, sizeof adapters - k, ", G = %zu", zero3_gathered_floats(&M.cfg_dev));
        double adapter = lora ? (double)M.padded * sizeof(floatX) : 0.0;
        if (lora) snprintf(param_parts, sizeof param_parts, " (ZeRO-3: the base's shard %.2f, the gathered units %.2f and the adapter %.2f)",
                           (plan.params - plan.gathered - adapter) / MiB, plan.gathered / MiB, adapter / MiB);
        else snprintf(param_parts, sizeof param_parts, " (ZeRO-3: the shard %.2f and the gathered units %.2f)", (plan.params - plan.gathered) / MiB,
                      plan.gathered / MiB);
    }
    if (run.q4.w)
        snprintf(base4, sizeof base4, " + 4-bit base %.2f MiB (NF4 codes, absmax, nested state) + dequantization scratch %.2f MiB", plan.base4 / MiB,
                 plan.scratch4 / MiB);
    printf("memory| per rank: parameters %.2f MiB%s%s + gradients %.2f MiB%s + master weights and AdamW %.2f MiB%s + activations %.2f MiB "
           "= %.2f MiB planned (%s, P = %zu%s, W = %d, ZeRO-%d)\n", plan.params / MiB, param_parts, base4, plan.grads / MiB, grad_parts, plan.state / MiB, host_part,
           plan.acts / MiB,
           (plan.params + plan.base4 + plan.scratch4 + plan.grads + plan.state + plan.acts) / MiB, formula, M.num_params_dev, adapters, dist.world, M.zero);
    for (int r = 0; r < dist.world; r++) printf("memory| rank %d: in use after setup %.2f MiB\n", r, used[r] / MiB);
    free(used);
    fflush(stdout);

    GpuGenerator gpu_gen;
    Generator gen;
    gpu_generator_init(&gpu_gen, &gen, &M);
    size_t min_free = free1;
    NonfiniteGuard guard = {args.max_nonfinite, 0};
    const char *ct = getenv("SFT_CKPT_TIMEOUT");  // how long the other ranks wait for rank 0 to write a checkpoint
    double ckpt_timeout = ct && atof(ct) > 0 ? atof(ct) : 1800.0;
    int stop = 0;  // the signal that stopped the run (preempt.h), 0 while it goes on
    size_t step_gathered = 0;  // ZeRO-3: the values the last training step gathered (its weights' traffic)
    for (int64_t step = state.step; step < steps && !stop; step++) {
        if (run.have_val && args.val_every > 0 && step % args.val_every == 0) {
            int64_t n;
            double vl = gpu_evaluate(&M, &val_loader, &sb, args.val_batches, &n);
            log_validation(&log, step, vl, n);
        }
        gpu_generate(&M, &args, &run, &gen, step, 0, &log, &sample_rng);  // every rank: they stay in step (output: rank 0's)
        float lr = train_lr(&args, (int)step, steps);
        double t0 = now_seconds();
        poison_this_step = test_poison_for_step(step + 1);
        M.dropout_step = step;  // LoRA's dropout draw (with the seed and the micro-batch)
        size_t gathered0 = M.z3.gathered_values;
        StepResult r = gpu_train_step(&M, &loader, &sb, A, lr, args.weight_decay, args.grad_clip, &state.adam_t);
        double dt = now_seconds() - t0;
        step_gathered = M.z3.gathered_values - gathered0;
        size_t free_now;
        CUDA_CHECK(cudaMemGetInfo(&free_now, &total_mem));
        if (free_now < min_free) min_free = free_now;
        state.step = step + 1;
        state.num_tokens += r.tokens;
        if (!nonfinite_guard(&guard, &log, state.step, r.skipped, r.loss, r.grad_norm))  // every rank: all stop at the same step
            log_step(&log, state.step, r.skipped, r.loss, lr, r.grad_norm, r.targets, &r.sums, state.num_tokens, dt);
        if (state.step < steps) stop = preempt_poll(&dist);
        if ((args.ckpt_every > 0 && state.step % args.ckpt_every == 0 && state.step < steps) || (stop && args.ckpt_every >= 0)) {
            gpu_download_state(&M, lora ? run.adapter : run.params, host_m, host_v);  // every rank: the shards meet
            state.epoch = loader.epoch; state.cursor = loader.cursor; state.rng = sample_rng.state;
            if (lead) save_checkpoint_files(args.out_dir, &cfg, &run.p, lora ? &ck_lora : NULL, &run.extras, &state, host_m, host_v, P, save_dtype);
            comm_barrier(&comm, "waiting for rank 0's checkpoint (SFT_CKPT_TIMEOUT)", ckpt_timeout);
            log_checkpoint(&log, state.step, 0);
        }
    }
    if (stop) preempt_exit(&dist, &log, state.step, steps, stop);  // the checkpoint of state.step is saved
    log_break(&log);
    require_updates(&state);
    if (run.have_val) {
        int64_t n;
        double vl = gpu_evaluate(&M, &val_loader, &sb, args.val_batches, &n);
        log_validation(&log, state.step, vl, n);
    }
    gpu_generate(&M, &args, &run, &gen, state.step, 1, &log, &sample_rng);
    log_break(&log);
    printf("memory| peak in use %.1f MiB of %.1f MiB (rank 0)\n", (free0 - min_free) / MiB, total_mem / MiB);
    if (M.z3.u) printf("zero3| the last step gathered %zu values (%.2f MiB) into each rank\n", step_gathered, step_gathered * sizeof(floatX) / MiB);
    if (args.ckpt_every >= 0 || args.lora.merged) gpu_download_state(&M, lora ? run.adapter : run.params, host_m, host_v);  // every rank
    if (args.ckpt_every >= 0) {  // -n -1 (benchmarks): no checkpoint
        state.epoch = loader.epoch; state.cursor = loader.cursor; state.rng = sample_rng.state;
        if (lead) save_checkpoint_files(args.out_dir, &cfg, &run.p, lora ? &ck_lora : NULL, &run.extras, &state, host_m, host_v, P, save_dtype);
    }
    log_checkpoint(&log, state.step, 1);
    if (lora && args.lora.merged && lead && run.q4.w) bnb4_base_dequantize(&run.q4, &run.cfg, &run.p);  // the dense base to merge into (QLoRA)
    if (lora && args.lora.merged && lead) save_merged(args.out_dir, &run.cfg, run.params, &run.lora, run.adapter, &run.extras, save_dtype);
    run_log_close(&log, state.step);
    dist_finish(&dist);  // NCCL's communicator, then MPI where it carried the id
    step_buffers_free(&sb);
    loader_free(&loader);
    if (run.have_val) loader_free(&val_loader);
    gpu_model_free(&M);
    free(host_m); free(host_v);
    free(gpu_gen.pos); free(gpu_gen.start);
    run_free(&run);
    return 0;
}
#endif
