// cpu_ref.c: exports train_sft.c's layer functions (static there) under ref_
// names; see cpu_ref.h. Compiled with the C compiler and linked into the CUDA checks.
#define SFT_NO_MAIN
#include "../../train_sft.c"
#include "cpu_ref.h"

void ref_encoder_forward(float *out, const int *inputs, const int *pos, const float *wte, const float *wpe, int BT, int C) {
    encoder_forward(out, inputs, pos, wte, wpe, BT, C);
}
void ref_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inputs, const int *pos, int BT, int C) {
    encoder_backward(dwte, dwpe, dout, inputs, pos, BT, C);
}
void ref_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int N, int C, float eps) {
    layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps);
}
void ref_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C) {
    layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
void ref_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC) {
    matmul_forward(out, inp, w, bias, N, C, OC);
}
void ref_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w, int N, int C, int OC) {
    matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC);
}

// Grouped-query attention is multi-head attention in which each kv head is repeated for
// the NH/KVH query heads that read it; train_sft.c's attention is the multi-head case
// (rows [q | k | v] of 3 NH HS), so these run it on rows with the kv heads repeated.
// expanded (B*T, 3 NH HS) <- qkv (B*T, (NH + 2 KVH) HS)
static float *gqa_expand(const float *qkv, size_t BT, int NH, int KVH, int HS) {
    size_t QKV = (size_t)(NH + 2 * KVH) * HS, E = 3 * (size_t)NH * HS, G = (size_t)(NH / KVH);
    float *e = (float *)xmalloc(BT * E * sizeof(float));
    for (size_t r = 0; r < BT; r++) {
        const float *src = qkv + r * QKV;
        float *dst = e + r * E;
        memcpy(dst, src, (size_t)NH * HS * sizeof(float)); // q
        for (int h = 0; h < NH; h++) {
            size_t kvh = (size_t)h / G;
            memcpy(dst + ((size_t)NH + h) * HS, src + (NH + kvh) * HS, (size_t)HS * sizeof(float));
            memcpy(dst + (2 * (size_t)NH + h) * HS, src + (NH + KVH + kvh) * HS, (size_t)HS * sizeof(float));
        }
    }
    return e;
}
void ref_attention_forward(float *out, float *att, const float *qkv, const int *doc_start, int B, int T, int NH, int KVH, int HS) {
    float *e = gqa_expand(qkv, (size_t)B * T, NH, KVH, HS);
    attention_forward(out, att, e, doc_start, B, T, NH * HS, NH);
    free(e);
}
void ref_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, const int *doc_start, int B, int T, int NH,
                            int KVH, int HS) {
    size_t BT = (size_t)B * T, QKV = (size_t)(NH + 2 * KVH) * HS, E = 3 * (size_t)NH * HS, G = (size_t)(NH / KVH);
    float *e = gqa_expand(qkv, BT, NH, KVH, HS);
    float *de = (float *)xcalloc(BT * E, sizeof(float));
    attention_backward(de, dout, e, att, doc_start, B, T, NH * HS, NH);
    // each repeated kv head's gradient goes back to (adds into) its kv head
    for (size_t r = 0; r < BT; r++) {
        float *d = dqkv + r * QKV;
        const float *s = de + r * E;
        for (size_t i = 0; i < (size_t)NH * HS; i++) d[i] += s[i];
        for (int h = 0; h < NH; h++) {
            size_t kvh = (size_t)h / G;
            for (int i = 0; i < HS; i++) {
                d[(NH + kvh) * HS + i] += s[((size_t)NH + h) * HS + i];
                d[(NH + KVH + kvh) * HS + i] += s[(2 * (size_t)NH + h) * HS + i];
            }
        }
    }
    free(e);
    free(de);
}
void ref_gelu_forward(float *out, const float *inp, long N) { gelu_forward(out, inp, (size_t)N); }
void ref_gelu_backward(float *dinp, const float *inp, const float *dout, long N) { gelu_backward(dinp, inp, dout, (size_t)N); }
void ref_classifier_forward(float *logits, float *losses, const float *x, const float *wte, const int *targets, int R, int C, int V) {
    classifier_forward(logits, losses, x, wte, targets, R, C, V);
}
void ref_classifier_backward(float *dx, float *dwte, const float *dlogits, const float *x, const float *wte, int R, int C, int V) {
    classifier_backward(dx, dwte, dlogits, x, wte, R, C, V);
}
void ref_crossentropy_softmax(float *logits, float *losses, const int *targets, int R, int V) {
    crossentropy_softmax(logits, losses, targets, R, V);
}
void ref_adamw(float *p, const float *g, float *m, float *v, long n, float lr, float beta1, float beta2, float eps, float wd, int t) {
    adamw_tensor(p, g, m, v, (size_t)n, lr, beta1, beta2, eps, wd, t);
}

// ---- Llama-family layers (the shared design of issue 12), written here from that
// description in plain fp32 C until train_sft.c's own layers replace them ----
void ref_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps) {
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float s = 1.0f / sqrtf(ss / C + eps);
        for (int c = 0; c < C; c++) out[(size_t)i * C + c] = x[c] * s * w[c];
        rstd[i] = s;
    }
}
void ref_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w, const float *rstd, int N, int C) {
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
        float s = rstd[i], gn = 0.0f;
        for (int c = 0; c < C; c++) gn += dy[c] * w[c] * x[c] * s;
        gn /= C;
        for (int c = 0; c < C; c++) {
            dinp[(size_t)i * C + c] += s * (dy[c] * w[c] - x[c] * s * gn);
            dw[c] += dy[c] * x[c] * s;
        }
    }
}
// q and k heads of every row of qkv (BT, (NH + 2 KVH) HS) rotated by sign * angle
static void ref_rope_rotate(float *qkv, const int *pos, const float *inv_freq, int BT, int NH, int KVH, int HS, float sign) {
    int half = HS / 2, width = (NH + 2 * KVH) * HS;
    for (int r = 0; r < BT; r++)
        for (int h = 0; h < NH + KVH; h++) {
            float *x = qkv + (size_t)r * width + (size_t)h * HS;
            for (int i = 0; i < half; i++) {
                float a = (float)pos[r] * inv_freq[i], c = cosf(a), s = sign * sinf(a);
                float x1 = x[i], x2 = x[i + half];
                x[i] = x1 * c - x2 * s;
                x[i + half] = x2 * c + x1 * s;
            }
        }
}
void ref_rope_forward(float *qkv, const int *pos, const float *inv_freq, int BT, int NH, int KVH, int HS) {
    ref_rope_rotate(qkv, pos, inv_freq, BT, NH, KVH, HS, 1.0f);
}
void ref_rope_backward(float *dqkv, const int *pos, const float *inv_freq, int BT, int NH, int KVH, int HS) {
    ref_rope_rotate(dqkv, pos, inv_freq, BT, NH, KVH, HS, -1.0f);
}
void ref_swiglu_forward(float *out, const float *fch, int BT, int FF) {
    for (int r = 0; r < BT; r++)
        for (int j = 0; j < FF; j++) {
            float g = fch[(size_t)r * 2 * FF + j], u = fch[(size_t)r * 2 * FF + FF + j];
            out[(size_t)r * FF + j] = g / (1.0f + expf(-g)) * u;
        }
}
void ref_swiglu_backward(float *dfch, const float *fch, const float *dout, int BT, int FF) {
    for (int r = 0; r < BT; r++)
        for (int j = 0; j < FF; j++) {
            size_t o = (size_t)r * 2 * FF + j;
            float g = fch[o], u = fch[o + FF], dh = dout[(size_t)r * FF + j], sg = 1.0f / (1.0f + expf(-g));
            dfch[o] += dh * u * sg * (1.0f + g * (1.0f - sg));
            dfch[o + FF] += dh * g * sg;
        }
}
// nn.Linear: out (N, OC) = inp (N, C) w^T + bias, w (OC, C) [out, in]; bias may be null
void ref_matmul_forward_oi(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC) {
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            float acc = bias ? bias[o] : 0.0f;
            for (int c = 0; c < C; c++) acc += inp[(size_t)i * C + c] * w[(size_t)o * C + c];
            out[(size_t)i * OC + o] = acc;
        }
}
// dinp += dout w, dw += dout^T inp, dbias += column sums of dout (when not null)
void ref_matmul_backward_oi(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w, int N, int C, int OC) {
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            float d = dout[(size_t)i * OC + o];
            for (int c = 0; c < C; c++) {
                dinp[(size_t)i * C + c] += d * w[(size_t)o * C + c];
                dw[(size_t)o * C + c] += d * inp[(size_t)i * C + c];
            }
            if (dbias) dbias[o] += d;
        }
}

// ---- the whole CPU model, for test_sftcu ----
void *ref_model_new(const GPT2Config *cfg, const float *params, int B, int T) {
    GPT2 *m = (GPT2 *)xcalloc(1, sizeof(GPT2));
    m->cfg = *cfg;
    size_t P = gpt2_num_parameters(cfg);
    m->params_mem = (float *)xmalloc(P * sizeof(float));
    memcpy(m->params_mem, params, P * sizeof(float));
    param_pointers(cfg, m->params_mem, &m->params);
    gpt2_allocate(m, B, T);
    return m;
}
void ref_model_free(void *model) { gpt2_free((GPT2 *)model); free(model); }
double ref_model_mean_loss_and_grads(void *model, const int *inputs, const int *pos, const int *doc_start, const int *targets, int B, int T,
                                     int *num_targets) {
    GPT2 *m = (GPT2 *)model;
    memset(m->grads_mem, 0, m->num_params * sizeof(float));
    double loss = gpt2_forward(m, inputs, pos, doc_start, targets, B, T);
    gpt2_backward(m, inputs, pos, doc_start, B, T);
    *num_targets = m->num_rows;
    if (m->num_rows) scale_gradients(m->grads_mem, m->num_params, 1.0f / (float)m->num_rows);
    return m->num_rows ? loss / m->num_rows : 0.0;
}
const float *ref_model_grads(void *model) { return ((GPT2 *)model)->grads_mem; }
const float *ref_model_logits(void *model, const int *inputs, const int *pos, const int *doc_start, const int *rows, int R, int B, int T) {
    GPT2 *m = (GPT2 *)model;
    memcpy(m->rows, rows, (size_t)R * sizeof(int));
    m->num_rows = R;
    gpt2_forward(m, inputs, pos, doc_start, NULL, B, T);
    return m->acts.logits;
}
