// cpu_ref.h: the CPU trainer's layer functions (train_sft.c), exported for the
// CUDA kernel checks in dev/cuda/ and for test_sftcu: every GPU kernel is checked
// against its CPU twin. Build cpu_ref.c with gcc and link it. Semantics, shapes and
// "backward adds into its outputs" are exactly those of train_sft.c.
#pragma once
#include "../../model/model.h"
#include "../../model/lora.h"
#ifdef __cplusplus
extern "C" {
#endif
// wpe (dwpe) may be null: no position embedding, the token embedding times scale (1 with wpe)
void ref_encoder_forward(float *out, const int *inputs, const int *pos, const float *wte, const float *wpe, float scale, int BT, int C);
void ref_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inputs, const int *pos, float scale, int BT, int C);
void ref_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int N, int C, float eps);
void ref_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C);
void ref_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC);
void ref_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w, int N, int C, int OC);
// Grouped-query attention: qkv rows [q (NH HS) | k (KVH HS) | v (KVH HS)], out rows NH HS,
// query head h reads kv head h / (NH/KVH). att is (B, NH, T, T) scratch for the CPU's
// materialized attention; the backward adds into dqkv. window: the sliding window in keys
// (0: full causal), as train_sft.c's attention_first_key.
void ref_attention_forward(float *out, float *att, const float *qkv, const int *doc_start, int B, int T, int NH, int KVH, int HS,
                           int window);
void ref_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, const int *doc_start, int B, int T, int NH,
                            int KVH, int HS, int window);
void ref_gelu_forward(float *out, const float *inp, long N);
void ref_gelu_backward(float *dinp, const float *inp, const float *dout, long N);
// logits (R, V) in, with targets: losses, correct (1 if the first largest logit is the
// target, else 0) and entropy (nats) (R each) out and logits replaced by softmax - onehot
void ref_classifier_forward(float *logits, float *losses, float *correct, float *entropy, const float *x, const float *wte, const int *targets, int R,
                            int C, int V);
void ref_classifier_backward(float *dx, float *dwte, const float *dlogits, const float *x, const float *wte, int R, int C, int V);
void ref_crossentropy_softmax(float *logits, float *losses, float *correct, float *entropy, const int *targets, int R, int V);
// torch.optim.AdamW on n parameters (decay already folded: pass wd = 0 for no decay)
void ref_adamw(float *p, const float *g, float *m, float *v, long n, float lr, float beta1, float beta2, float eps, float wd, int t);
// The Llama family's layers.
// RMSNorm: y = x * rstd * (w + one), one 0 or 1 (Gemma 3); backward adds into dinp and dw.
void ref_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps, float one);
void ref_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w, const float *rstd, int N, int C,
                          float one);
// Per-head q/k RMSNorm in place on the q and k heads of qkv rows; raw (BT, (NH + KVH) HS) and
// rstd (BT, NH + KVH) out. Backward: dq, dk in place (overwritten), dwq and dwk added into.
void ref_qk_norm_forward(float *qkv, float *raw, float *rstd, const float *wq, const float *wk, int BT, int NH, int KVH, int HS, float eps,
                         float one);
void ref_qk_norm_backward(float *dqkv, float *dwq, float *dwk, const float *raw, const float *rstd, const float *wq, const float *wk, int BT,
                          int NH, int KVH, int HS, float one);
// RoPE in place on the q and k heads of qkv (BT, (NH + 2 KVH) HS); backward rotates dq, dk back
void ref_rope_forward(float *qkv, const int *pos, const float *inv_freq, int BT, int NH, int KVH, int HS);
void ref_rope_backward(float *dqkv, const int *pos, const float *inv_freq, int BT, int NH, int KVH, int HS);
// SwiGLU: out (BT, FF) = silu(gate) * up of fch (BT, [gate FF | up FF]); backward adds into dfch
void ref_swiglu_forward(float *out, const float *fch, int BT, int FF);
void ref_swiglu_backward(float *dfch, const float *fch, const float *dout, int BT, int FF);
// GeGLU (Gemma 3): out = gelu_tanh(gate) * up; backward adds into dfch
void ref_geglu_forward(float *out, const float *fch, int BT, int FF);
void ref_geglu_backward(float *dfch, const float *fch, const float *dout, int BT, int FF);
// [out, in] weights (nn.Linear): out = inp w^T + bias (bias may be null); backward adds
void ref_matmul_forward_oi(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC);
void ref_matmul_backward_oi(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w, int N, int C, int OC);
// The whole CPU model (train_sft.c's Model), for test_sftcu. ModelConfig is model/model.h's.
void *ref_model_new(const ModelConfig *cfg, const float *params, int B, int T);
void ref_model_free(void *model);
// zeroes the gradients, runs forward and backward on the micro-batch, scales the
// gradients to those of the mean loss; returns the mean loss and the target count
double ref_model_mean_loss_and_grads(void *model, const int *inputs, const int *pos, const int *doc_start, const int *targets, int B, int T,
                                     int *num_targets);
const float *ref_model_grads(void *model);
// LoRA: the model with adapters `adapter` (lay->floats, model/lora.h's layout) on the frozen
// params; ref_model_grads then gives the adapters' gradients (lay->floats)
void *ref_model_new_lora(const ModelConfig *cfg, const float *params, const LoraLayout *lay, const float *adapter, int B, int T);
// LoRA's dropout for the next forward and backward: the draw of (seed, step, micro-batch); micro -1: off
void ref_model_set_dropout(void *model, uint64_t seed, int64_t step, int micro);
// logits (R x V) of the listed row positions
const float *ref_model_logits(void *model, const int *inputs, const int *pos, const int *doc_start, const int *rows, int R, int B, int T);
#ifdef __cplusplus
}
#endif
