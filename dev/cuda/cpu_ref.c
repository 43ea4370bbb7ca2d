// cpu_ref.c: exports train_sft.c's layer functions (static there) under ref_
// names; see cpu_ref.h. Compiled with the C compiler and linked into the CUDA checks.
#define SFT_NO_MAIN
#include "../../train_sft.c"
#include "cpu_ref.h"

void ref_encoder_forward(float *out, const int *inputs, const int *pos, const float *wte, const float *wpe, float scale, int BT, int C) {
    encoder_forward(out, inputs, pos, wte, wpe, scale, BT, C);
}
void ref_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inputs, const int *pos, float scale, int BT, int C) {
    encoder_backward(dwte, dwpe, dout, inputs, pos, scale, BT, C);
}
void ref_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int N, int C, float eps) {
    layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps);
}
void ref_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C) {
    layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
void ref_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC) {
    matmul_forward(out, inp, w, bias, N, C, OC, W_IN_OUT);
}
void ref_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w, int N, int C, int OC) {
    matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC, W_IN_OUT);
}

void ref_attention_forward(float *out, float *att, const float *qkv, const int *doc_start, int B, int T, int NH, int KVH, int HS,
                           int window) {
    attention_forward(out, att, qkv, doc_start, B, T, NH, KVH, HS, 1.0f / sqrtf((float)HS), window);  // the GPU kernels' scale
}
void ref_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, const int *doc_start, int B, int T, int NH,
                            int KVH, int HS, int window) {
    attention_backward(dqkv, dout, qkv, att, doc_start, B, T, NH, KVH, HS, 1.0f / sqrtf((float)HS), window);
}
void ref_gelu_forward(float *out, const float *inp, long N) { gelu_forward(out, inp, (size_t)N); }
void ref_gelu_backward(float *dinp, const float *inp, const float *dout, long N) { gelu_backward(dinp, inp, dout, (size_t)N); }
void ref_classifier_forward(float *logits, float *losses, float *correct, float *entropy, const float *x, const float *wte, const int *targets, int R,
                            int C, int V) {
    classifier_forward(logits, losses, correct, entropy, x, wte, targets, R, C, V);
}
void ref_classifier_backward(float *dx, float *dwte, const float *dlogits, const float *x, const float *wte, int R, int C, int V) {
    classifier_backward(dx, dwte, dlogits, x, wte, R, C, V);
}
void ref_crossentropy_softmax(float *logits, float *losses, float *correct, float *entropy, const int *targets, int R, int V) {
    crossentropy_softmax(logits, losses, correct, entropy, targets, R, V);
}
void ref_adamw(float *p, const float *g, float *m, float *v, long n, float lr, float beta1, float beta2, float eps, float wd, int t) {
    adamw_tensor(p, g, m, v, (size_t)n, 1.0f, 1.0f, lr, beta1, beta2, eps, wd, t);
}

// ---- the Llama family's layers ----
void ref_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps, float one) {
    rmsnorm_forward(out, rstd, inp, w, N, C, eps, one);
}
void ref_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w, const float *rstd, int N, int C,
                          float one) {
    rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C, one);
}
void ref_qk_norm_forward(float *qkv, float *raw, float *rstd, const float *wq, const float *wk, int BT, int NH, int KVH, int HS, float eps,
                         float one) {
    qk_norm_forward(qkv, raw, rstd, wq, wk, BT, NH, KVH, HS, eps, one);
}
void ref_qk_norm_backward(float *dqkv, float *dwq, float *dwk, const float *raw, const float *rstd, const float *wq, const float *wk, int BT,
                          int NH, int KVH, int HS, float one) {
    qk_norm_backward(dqkv, dwq, dwk, raw, rstd, wq, wk, BT, NH, KVH, HS, one);
}
void ref_geglu_forward(float *out, const float *fch, int BT, int FF) { geglu_forward(out, fch, BT, FF); }
void ref_geglu_backward(float *dfch, const float *fch, const float *dout, int BT, int FF) { geglu_backward(dfch, fch, dout, BT, FF); }
// train_sft.c reads cos and sin from tables over the positions; here tables up to the largest position given
static void ref_rope(float *qkv, const int *pos, const float *inv_freq, int BT, int NH, int KVH, int HS, int backward) {
    int npos = 1, half = HS / 2;
    for (int r = 0; r < BT; r++)
        if (pos[r] + 1 > npos) npos = pos[r] + 1;
    float *cos_t = (float *)xmalloc((size_t)npos * half * sizeof(float)), *sin_t = (float *)xmalloc((size_t)npos * half * sizeof(float));
    rope_table(cos_t, sin_t, inv_freq, npos, half);
    if (backward) rope_backward(qkv, pos, cos_t, sin_t, BT, NH, KVH, HS);
    else rope_forward(qkv, pos, cos_t, sin_t, BT, NH, KVH, HS);
    free(cos_t);
    free(sin_t);
}
void ref_rope_forward(float *qkv, const int *pos, const float *inv_freq, int BT, int NH, int KVH, int HS) {
    ref_rope(qkv, pos, inv_freq, BT, NH, KVH, HS, 0);
}
void ref_rope_backward(float *dqkv, const int *pos, const float *inv_freq, int BT, int NH, int KVH, int HS) {
    ref_rope(dqkv, pos, inv_freq, BT, NH, KVH, HS, 1);
}
void ref_swiglu_forward(float *out, const float *fch, int BT, int FF) { swiglu_forward(out, fch, BT, FF); }
void ref_swiglu_backward(float *dfch, const float *fch, const float *dout, int BT, int FF) { swiglu_backward(dfch, fch, dout, BT, FF); }
void ref_matmul_forward_oi(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC) {
    matmul_forward(out, inp, w, bias, N, C, OC, W_OUT_IN);
}
void ref_matmul_backward_oi(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w, int N, int C, int OC) {
    matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC, W_OUT_IN);
}

// ---- the whole CPU model, for test_sftcu ----
void *ref_model_new(const ModelConfig *cfg, const float *params, int B, int T) {
    Model *m = (Model *)xcalloc(1, sizeof(Model));
    m->cfg = *cfg;
    size_t P = model_num_parameters(cfg);
    m->params_mem = (float *)xmalloc(P * sizeof(float));
    memcpy(m->params_mem, params, P * sizeof(float));
    param_pointers(cfg, m->params_mem, &m->params);
    model_allocate(m, B, T);
    return m;
}
void *ref_model_new_lora(const ModelConfig *cfg, const float *params, const LoraLayout *lay, const float *adapter, int B, int T) {
    Model *m = (Model *)xcalloc(1, sizeof(Model));
    m->cfg = *cfg;
    size_t P = model_num_parameters(cfg);
    m->params_mem = (float *)xmalloc(P * sizeof(float));
    memcpy(m->params_mem, params, P * sizeof(float));
    param_pointers(cfg, m->params_mem, &m->params);
    m->lora = *lay;  // the model's own copies: model_free frees them
    m->lora.ad = (LoraAdapter *)xmalloc((size_t)lay->n * sizeof(LoraAdapter));
    memcpy(m->lora.ad, lay->ad, (size_t)lay->n * sizeof(LoraAdapter));
    m->adapter = (float *)xmalloc(lay->floats * sizeof(float));
    memcpy(m->adapter, adapter, lay->floats * sizeof(float));
    model_allocate(m, B, T);
    return m;
}
void ref_model_set_dropout(void *model, uint64_t seed, int64_t step, int micro) {
    Model *m = (Model *)model;
    m->training = micro >= 0;
    m->dropout_seed = seed;
    m->dropout_step = step;
    m->dropout_micro = micro;
}
void ref_model_free(void *model) { model_free((Model *)model); free(model); }
double ref_model_mean_loss_and_grads(void *model, const int *inputs, const int *pos, const int *doc_start, const int *targets, int B, int T,
                                     int *num_targets) {
    Model *m = (Model *)model;
    memset(m->trained_grads, 0, m->num_trained * sizeof(float));
    double loss = model_forward(m, inputs, pos, doc_start, targets, B, T);
    model_backward(m, inputs, pos, doc_start, B, T);
    *num_targets = m->num_rows;
    if (m->num_rows) scale_floats(m->trained_grads, m->num_trained, 1.0f / (float)m->num_rows);
    return m->num_rows ? loss / m->num_rows : 0.0;
}
const float *ref_model_grads(void *model) { return ((Model *)model)->trained_grads; }
const float *ref_model_logits(void *model, const int *inputs, const int *pos, const int *doc_start, const int *rows, int R, int B, int T) {
    Model *m = (Model *)model;
    memcpy(m->rows, rows, (size_t)R * sizeof(int));
    m->num_rows = R;
    model_forward(m, inputs, pos, doc_start, NULL, B, T);
    return m->acts.logits;
}
