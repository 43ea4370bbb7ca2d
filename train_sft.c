/*
train_sft.c: supervised fine-tuning on the CPU, in C with OpenMP, of every family below (GPT-2,
Llama 3.x, SmolLM2, Qwen2.5, Qwen3, SmolLM3, Gemma 3), fully or with LoRA adapters.

This is the reference trainer: every other implementation is checked against it.
The families (model/model.h) are, as transformers computes them:
  GPT-2 (GPT2LMHeadModel): pre-LayerNorm blocks, learned positions, causal
    self-attention, a tanh-GELU MLP, Conv1D [in, out] weights with biases, the
    output head tied to the token embedding, no dropout;
  Llama 3.x (LlamaForCausalLM) and SmolLM2 (the same architecture): RMSNorm, rotary
    positions on q and k, grouped-query attention, a SwiGLU MLP, nn.Linear [out, in]
    weights without biases, a tied or untied output head;
  Qwen2.5 (Qwen2ForCausalLM): Llama with biases on q, k and v;
  Qwen3 (Qwen3ForCausalLM): Llama with q/k norms (each head RMS-normed before RoPE);
  SmolLM3 (SmolLM3ForCausalLM): Llama without RoPE on every 4th layer (NoPE);
  Gemma 3 (Gemma3ForCausalLM): Llama with q/k norms, a scaled embedding, (1 + w) norms,
    post norms on the attention's and the MLP's outputs, GeGLU, sliding-window layers
    with their own rotary table, and its own attention scale.
A model description (ModelConfig) is one block layout, GPT-2's or the Llama block, plus
these features as independent fields (qk_norm, post_norms, norm_plus_one, embed_scale,
mlp_act, per-layer flags for sliding windows and NoPE, ...): a family is a set of them,
so the trainer tests each feature where a layer needs it (layer_forward, layer_backward)
and names no family. The configuration picks the layer functions; the trainer is one.

Training packs whole documents into rows; a token attends only to earlier tokens
of its own document, and only tokens whose mask byte is 1 are targets. The loss of a
step is the sum of cross-entropy over all its targets divided by their number.

Layer functions come in forward/backward pairs. Backward functions ADD into their
gradient outputs, so the caller zeroes what must start at zero. Every reduction
runs in a fixed order, so results do not depend on the thread count and a resumed
run reproduces an uninterrupted one bit for bit.
*/
#include <omp.h>
#include "train/adamw.h"
#include "train/dist.h"
#include "train/evalset.h"
#include "train/generate.h"
#include "train/preempt.h"
#include "train/trainer.h"
#include "cpu/attention.h"
#include "cpu/gemm.h"
#include "cpu/lora.h"
#include "cpu/vecmath.h"

// ----------------------------------------------------------------------------
// Layers. Shapes: BT rows (B rows of T positions), C channels, OC output channels.

// x[i] = wte[token[i]] + wpe[pos[i]]  (pos restarts at 0 in every document).
// wpe NULL (Llama family: positions enter through RoPE instead): x[i] = wte[token[i]] * scale
// (scale 1, or Gemma 3's sqrt(C)).
static void encoder_forward(float *out, const int *inputs, const int *pos, const float *wte, const float *wpe, float scale, int BT, int C) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < BT; i++) {
        const float *te = wte + (size_t)inputs[i] * C;
        float *o = out + (size_t)i * C;
        if (!wpe) { for (int c = 0; c < C; c++) o[c] = te[c] * scale; continue; }
        const float *pe = wpe + (size_t)pos[i] * C;
        for (int c = 0; c < C; c++) o[c] = te[c] + pe[c];
    }
}

// dwte[token[i]] += dout[i] * scale (scale 1 with wpe), dwpe[pos[i]] += dout[i] (dwpe NULL: no
// wpe). Rows repeat across i, so threads split the channels instead of the rows: no
// races, fixed order.
static void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inputs, const int *pos, float scale, int BT, int C) {
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += 16) {
        int c1 = c0 + 16 < C ? c0 + 16 : C;
        for (int i = 0; i < BT; i++) {
            const float *d = dout + (size_t)i * C;
            float *te = dwte + (size_t)inputs[i] * C;
            if (!dwpe) { for (int c = c0; c < c1; c++) te[c] += d[c] * scale; continue; }
            for (int c = c0; c < c1; c++) te[c] += d[c];
            float *pe = dwpe + (size_t)pos[i] * C;
            for (int c = c0; c < c1; c++) pe[c] += d[c];
        }
    }
}

// y = (x - mean) / sqrt(var + eps) * w + b, statistics over the C channels of a row.
static void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= (float)C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) { float d = x[c] - m; v += d * d; }
        v /= (float)C;
        float s = 1.0f / sqrtf(v + eps);
        float *o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
        mean[i] = m;
        rstd[i] = s;
    }
}

// With n = (x - mean) * rstd and g = dy * w:
//   dx += rstd * (g - mean(g) - n * mean(g * n)),  dw += sum_rows dy * n,  db += sum_rows dy
// (dw NULL: frozen weights (LoRA), dx only; the same in the other backward passes)
static void layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                               const float *mean, const float *rstd, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
        float m = mean[i], s = rstd[i], g_mean = 0.0f, gn_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            float g = dy[c] * w[c];
            g_mean += g;
            gn_mean += g * (x[c] - m) * s;
        }
        g_mean /= (float)C;
        gn_mean /= (float)C;
        float *dx = dinp + (size_t)i * C;
        for (int c = 0; c < C; c++) dx[c] += s * (dy[c] * w[c] - g_mean - (x[c] - m) * s * gn_mean);
    }
    if (!dw) return;
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += 16) {
        int c1 = c0 + 16 < C ? c0 + 16 : C;
        float sw[16] = {0}, sb[16] = {0};
        for (int i = 0; i < N; i++) {
            const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
            for (int c = c0; c < c1; c++) { sw[c - c0] += dy[c] * (x[c] - mean[i]) * rstd[i]; sb[c - c0] += dy[c]; }
        }
        for (int c = c0; c < c1; c++) { dw[c] += sw[c - c0]; db[c] += sb[c - c0]; }
    }
}

// RMSNorm (Llama family): y = x * rstd * (w + one), rstd = 1 / sqrt(mean(x^2) + eps)
// over the C channels of a row, one = 0, or 1 where norms scale by 1 + w (Gemma 3);
// rstd (N) is kept for the backward pass.
static void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps, float one) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float s = 1.0f / sqrtf(ss / (float)C + eps);
        float *o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = x[c] * s * (w[c] + one);
        rstd[i] = s;
    }
}

// With n = x * rstd and g = dy * (w + one):  dx += rstd * (g - n * mean(g * n)),  dw += sum_rows dy * n
static void rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w, const float *rstd, int N, int C,
                             float one) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
        float s = rstd[i], gn_mean = 0.0f;
        for (int c = 0; c < C; c++) gn_mean += dy[c] * (w[c] + one) * x[c] * s;
        gn_mean /= (float)C;
        float *dx = dinp + (size_t)i * C;
        for (int c = 0; c < C; c++) dx[c] += s * (dy[c] * (w[c] + one) - x[c] * s * gn_mean);
    }
    if (!dw) return;
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += 16) {
        int c1 = c0 + 16 < C ? c0 + 16 : C;
        float sw[16] = {0};
        for (int i = 0; i < N; i++) {
            const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
            for (int c = c0; c < c1; c++) sw[c - c0] += dy[c] * x[c] * rstd[i];
        }
        for (int c = c0; c < c1; c++) dw[c] += sw[c - c0];
    }
}

// The weight layouts of a linear layer from C to OC channels: GPT-2's Conv1D stores
// w as [C, OC] (y = x w); Llama's nn.Linear as [OC, C] (y = x w^T). The gemm takes
// strides, so both are the same product read differently.
enum { W_IN_OUT, W_OUT_IN };

// out[N, OC] = inp[N, C] * W + bias[OC], W the [C, OC] matrix that w holds in `layout`
// (bias NULL: none)
static void matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC, int layout) {
    long w_rs = layout == W_IN_OUT ? OC : 1, w_cs = layout == W_IN_OUT ? 1 : C;
    if (!bias) { gemm(N, OC, C, inp, C, 1, w, w_rs, w_cs, out, OC, 0); return; }
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) memcpy(out + (size_t)i * OC, bias, (size_t)OC * sizeof(float));
    gemm(N, OC, C, inp, C, 1, w, w_rs, w_cs, out, OC, 1);
}

// dinp += dout * W^T,  dW += inp^T * dout (stored in w's layout),  dbias += column
// sums of dout (dbias NULL: no bias; dw NULL: frozen, and then no bias gradient either)
static void matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w, int N, int C, int OC,
                            int layout) {
    if (layout == W_IN_OUT) {
        gemm(N, C, OC, dout, OC, 1, w, 1, OC, dinp, C, 1);
        if (dw) gemm(C, OC, N, inp, 1, C, dout, OC, 1, dw, OC, 1);
    } else {
        gemm(N, C, OC, dout, OC, 1, w, C, 1, dinp, C, 1);
        if (dw) gemm(OC, C, N, dout, 1, OC, inp, C, 1, dw, C, 1);
    }
    if (!dbias || !dw) return;
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < OC; o0 += 16) {
        int o1 = o0 + 16 < OC ? o0 + 16 : OC;
        float s[16] = {0};
        for (int i = 0; i < N; i++)
            for (int o = o0; o < o1; o++) s[o - o0] += dout[(size_t)i * OC + o];
        for (int o = o0; o < o1; o++) dbias[o] += s[o - o0];
    }
}

// Rotary position embedding (Llama family), "rotate half" as Hugging Face's
// checkpoints use it: in every q and k head of a qkv row (the first NH + KVH heads
// of HS channels), for i < HS/2 and angle = pos * inv_freq[i],
//   x[i] = x1 cos - x2 sin,  x[i + HS/2] = x2 cos + x1 sin   (x1 = x[i], x2 = x[i + HS/2]).
// pos is the position within the document (restarting at 0 in each packed
// document). cos and sin are tables (positions, HS/2) of rope_table. In place.
static void rope_forward(float *qkv, const int *pos, const float *cos_t, const float *sin_t, int BT, int NH, int KVH, int HS) {
    int QKV = (NH + 2 * KVH) * HS, half = HS / 2;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < BT; r++) {
        const float *c = cos_t + (size_t)pos[r] * half, *sn = sin_t + (size_t)pos[r] * half;
        for (int h = 0; h < NH + KVH; h++) {
            float *x = qkv + (size_t)r * QKV + h * HS;
            for (int i = 0; i < half; i++) {
                float x1 = x[i], x2 = x[i + half];
                x[i] = x1 * c[i] - x2 * sn[i];
                x[i + half] = x2 * c[i] + x1 * sn[i];
            }
        }
    }
}

// The rotation is linear and orthogonal, so its backward pass rotates dq and dk by
// -angle (the transpose), in place; it needs no saved input.
static void rope_backward(float *dqkv, const int *pos, const float *cos_t, const float *sin_t, int BT, int NH, int KVH, int HS) {
    int QKV = (NH + 2 * KVH) * HS, half = HS / 2;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < BT; r++) {
        const float *c = cos_t + (size_t)pos[r] * half, *sn = sin_t + (size_t)pos[r] * half;
        for (int h = 0; h < NH + KVH; h++) {
            float *d = dqkv + (size_t)r * QKV + h * HS;
            for (int i = 0; i < half; i++) {
                float d1 = d[i], d2 = d[i + half];
                d[i] = d1 * c[i] + d2 * sn[i];
                d[i + half] = d2 * c[i] - d1 * sn[i];
            }
        }
    }
}

// Per-head RMSNorm of q and k (Qwen3, Gemma 3: q_norm, k_norm), before RoPE: in every
// qkv row (width QKV), each of the NH query heads and KVH key heads x (HS channels) becomes
// x * rstd * (w + one), rstd = 1 / sqrt(mean(x^2) + eps), w = wq for query heads and wk
// for key heads (HS each; one as in rmsnorm_forward). In place; the heads before the
// norm go to raw (BT, (NH + KVH) HS) and their rstd to rstd (BT, NH + KVH), for the backward pass.
static void qk_norm_forward(float *qkv, float *raw, float *rstd, const float *wq, const float *wk, int BT, int NH, int KVH, int HS, float eps,
                            float one) {
    int QKV = (NH + 2 * KVH) * HS, H = NH + KVH;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < BT; r++) {
        float *x = qkv + (size_t)r * QKV;
        memcpy(raw + (size_t)r * H * HS, x, (size_t)H * HS * sizeof(float));
        for (int h = 0; h < H; h++) {
            float *xh = x + h * HS, ss = 0.0f;
            const float *w = h < NH ? wq : wk;
            for (int i = 0; i < HS; i++) ss += xh[i] * xh[i];
            float sc = 1.0f / sqrtf(ss / (float)HS + eps);
            for (int i = 0; i < HS; i++) xh[i] = xh[i] * sc * (w[i] + one);
            rstd[(size_t)r * H + h] = sc;
        }
    }
}

// The RMSNorm backward pass (rmsnorm_backward) per head, in place on the q and k heads of
// dqkv: dy (the gradient of the normed heads) becomes dx. dwq and dwk += sum over rows
// and heads of dy * n, n = raw * rstd; each channel's sum runs over rows, then heads, in order.
static void qk_norm_backward(float *dqkv, float *dwq, float *dwk, const float *raw, const float *rstd, const float *wq, const float *wk,
                             int BT, int NH, int KVH, int HS, float one) {
    int QKV = (NH + 2 * KVH) * HS, H = NH + KVH;
#pragma omp parallel for schedule(static) if (dwq)
    for (int i = 0; i < (dwq ? HS : 0); i++) {  // weight gradients first: they read dy, which the pass below overwrites
        float sq = 0.0f, sk = 0.0f;
        for (int r = 0; r < BT; r++)
            for (int h = 0; h < H; h++) {
                float g = dqkv[(size_t)r * QKV + h * HS + i] * raw[((size_t)r * H + h) * HS + i] * rstd[(size_t)r * H + h];
                if (h < NH) sq += g; else sk += g;
            }
        dwq[i] += sq;
        dwk[i] += sk;
    }
#pragma omp parallel for schedule(static)
    for (int r = 0; r < BT; r++)
        for (int h = 0; h < H; h++) {
            float *d = dqkv + (size_t)r * QKV + h * HS, sc = rstd[(size_t)r * H + h], gn_mean = 0.0f;
            const float *x = raw + ((size_t)r * H + h) * HS, *w = h < NH ? wq : wk;
            for (int i = 0; i < HS; i++) gn_mean += d[i] * (w[i] + one) * x[i] * sc;
            gn_mean /= (float)HS;
            for (int i = 0; i < HS; i++) d[i] = sc * (d[i] * (w[i] + one) - x[i] * sc * gn_mean);
        }
}

// cos and sin of the rotary angles pos * inv_freq[i] for positions 0..npos-1, each
// (npos, HS/2), in fp32 as transformers computes them.
static void rope_table(float *cos_t, float *sin_t, const float *inv_freq, int npos, int half) {
    for (int t = 0; t < npos; t++)
        for (int i = 0; i < half; i++) {
            float angle = (float)t * inv_freq[i];
            cos_t[(size_t)t * half + i] = cosf(angle);
            sin_t[(size_t)t * half + i] = sinf(angle);
        }
}

// GELU, tanh approximation ("gelu_new"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
#define GELU_SCALE 0.7978845608028654f
static void gelu_forward(float *out, const float *inp, size_t N) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanh_via_exp(GELU_SCALE * (x + 0.044715f * x * x * x)));
    }
}

static void gelu_backward(float *dinp, const float *inp, const float *dout, size_t N) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        float th = tanh_via_exp(u);
        float sech2 = 1.0f - th * th;
        float local = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += local * dout[i];
    }
}

// SwiGLU (Llama family): fch rows (N, 2FF) hold [gate | up]; out (N, FF) =
// silu(gate) * up, silu(g) = g sigmoid(g) = g / (1 + exp(-g)).
static void swiglu_forward(float *out, const float *fch, int N, int FF) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < N; r++) {
        const float *gate = fch + (size_t)r * 2 * FF, *up = gate + FF;
        float *o = out + (size_t)r * FF;
        for (int i = 0; i < FF; i++) o[i] = gate[i] / (1.0f + exp_vec(-gate[i])) * up[i];
    }
}

// dgate += dout * up * silu'(gate), silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g)));  dup += dout * silu(gate)
static void swiglu_backward(float *dfch, const float *fch, const float *dout, int N, int FF) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < N; r++) {
        const float *gate = fch + (size_t)r * 2 * FF, *up = gate + FF, *dy = dout + (size_t)r * FF;
        float *dgate = dfch + (size_t)r * 2 * FF, *dup = dgate + FF;
        for (int i = 0; i < FF; i++) {
            float sig = 1.0f / (1.0f + exp_vec(-gate[i]));
            dgate[i] += dy[i] * up[i] * sig * (1.0f + gate[i] * (1.0f - sig));
            dup[i] += dy[i] * gate[i] * sig;
        }
    }
}

// GeGLU (Gemma 3): fch rows (N, 2FF) hold [gate | up]; out (N, FF) = gelu(gate) * up,
// gelu the tanh approximation above (transformers' gelu_pytorch_tanh).
static void geglu_forward(float *out, const float *fch, int N, int FF) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < N; r++) {
        const float *gate = fch + (size_t)r * 2 * FF, *up = gate + FF;
        float *o = out + (size_t)r * FF;
        for (int i = 0; i < FF; i++) {
            float x = gate[i];
            o[i] = 0.5f * x * (1.0f + tanh_via_exp(GELU_SCALE * (x + 0.044715f * x * x * x))) * up[i];
        }
    }
}

// dgate += dout * up * gelu'(gate) (gelu' as in gelu_backward);  dup += dout * gelu(gate)
static void geglu_backward(float *dfch, const float *fch, const float *dout, int N, int FF) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < N; r++) {
        const float *gate = fch + (size_t)r * 2 * FF, *up = gate + FF, *dy = dout + (size_t)r * FF;
        float *dgate = dfch + (size_t)r * 2 * FF, *dup = dgate + FF;
        for (int i = 0; i < FF; i++) {
            float x = gate[i], th = tanh_via_exp(GELU_SCALE * (x + 0.044715f * x * x * x));
            float local = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
            dgate[i] += dy[i] * up[i] * local;
            dup[i] += dy[i] * 0.5f * x * (1.0f + th);
        }
    }
}

static void scale_floats(float *x, size_t n, float s) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

static void residual_forward(float *out, const float *a, const float *b, size_t N) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) out[i] = a[i] + b[i];
}

// Cross-entropy over R rows of logits: loss_r = logsumexp(logits_r) - logits_r[target_r],
// and the logits are replaced in place by d(loss_r)/d(logits_r) = softmax(logits_r) - onehot(target_r).
// In the same pass, trl's token metrics of each row: correct_r = 1 if the row's largest
// logit (the first of equal ones, as torch.argmax) is at the target, else 0, and entropy_r
// = -sum p log p of p = softmax(logits_r), as log(sum) - sum p (x - max) with the sums of
// the softmax already formed (nats).
static void crossentropy_softmax(float *logits, float *losses, float *correct, float *entropy, const int *targets, int R, int V) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++) {
        float *l = logits + (size_t)r * V;
        float mx = -INFINITY;
        int argmax = 0;
        for (int v = 0; v < V; v++) if (l[v] > mx) { mx = l[v]; argmax = v; }
        float target_logit = l[targets[r]];
        // weighted: the sum of exp(x - max) (x - max), in float lanes over blocks of 512
        // values (so the loop vectorizes), each block's lanes then added in double
        double sum = 0.0, weighted = 0.0;
        for (int v0 = 0; v0 < V; v0 += 512) {
            int v1 = v0 + 512 < V ? v0 + 512 : V, v = v0;
            float part[16] = {0};
            for (; v + 16 <= v1; v += 16)
                for (int k = 0; k < 16; k++) {
                    float d = l[v + k] - mx, e = exp_vec(d);
                    l[v + k] = e;
                    part[k] += e * d;
                }
            for (; v < v1; v++) {
                float d = l[v] - mx, e = exp_vec(d);
                l[v] = e;
                part[(v - v0) & 15] += e * d;
            }
            for (int k = 0; k < 16; k++) weighted += part[k];
        }
        for (int v = 0; v < V; v++) sum += l[v];
        losses[r] = (float)(log(sum) + mx - target_logit);
        correct[r] = argmax == targets[r] ? 1.0f : 0.0f;
        entropy[r] = (float)(log(sum) - weighted / sum);
        float inv = (float)(1.0 / sum);
        for (int v = 0; v < V; v++) l[v] *= inv;
        l[targets[r]] -= 1.0f;
    }
}

// Classifier over R selected rows x[R, C]: logits = x * head^T, head (V, C) the
// output head (wte when tied, else lm_head), then with targets the cross-entropy above.
static void classifier_forward(float *logits, float *losses, float *correct, float *entropy, const float *x, const float *head, const int *targets,
                               int R, int C, int V) {
    gemm(R, V, C, x, C, 1, head, 1, C, logits, V, 0);
    if (targets) crossentropy_softmax(logits, losses, correct, entropy, targets, R, V);
}

// dx = dlogits * head,  dhead += dlogits^T * x (dhead NULL: frozen)
static void classifier_backward(float *dx, float *dhead, const float *dlogits, const float *x, const float *head, int R, int C, int V) {
    gemm(R, C, V, dlogits, V, 1, head, C, 1, dx, C, 0);
    if (dhead) gemm(V, C, R, dlogits, 1, V, x, C, 1, dhead, C, 1);
}

// The classifier works on chunks of rows so that its logits never take more than
// classifier_chunk_floats (64 MB) however large the vocabulary (Gemma 3's 262,144 at
// B=4, T=1024 would need 4.3 GB for all rows at once): the forward pass computes each
// chunk's logits and losses and keeps only the losses; the backward pass computes the
// chunk's logits again (the same numbers: the products are deterministic), turns them
// into dlogits and takes that chunk's share of dx and dhead. Tests lower the size to
// make a tiny model's classifier take several chunks.
static int classifier_chunk_floats = 1 << 24;
static int classifier_chunk_rows(const ModelConfig *c, int BT) {
    int rows = classifier_chunk_floats / c->V;
    return rows < 1 ? 1 : rows > BT ? BT : rows;
}

// ----------------------------------------------------------------------------
// The model: parameters, gradients and AdamW moments (one allocation each, laid
// out as in model/model.h) and the activations of one micro-batch of up to B x T.
// Widths: QKV = (NH + 2 KVH) HS (qkv_width), A = NH HS (attention output), FF the
// MLP width, FCW the fc output (GPT-2: FF = 4C; Llama family: [gate | up], 2FF),
// QK = (NH + KVH) HS the q and k heads, CR the classifier's chunk of rows.

typedef struct {
    float *encoded;                    // (BT, C)
    float *ln1, *ln1_mean, *ln1_rstd;  // (L, BT, C), (L, BT) (GPT-2 only: RMSNorm keeps no mean), (L, BT)
    float *qkv;                        // (L, BT, QKV), q and k normed (qk_norm) and rotated by RoPE (Llama family)
    float *qk_raw, *qk_rstd;           // (L, BT, QK), (L, BT, NH + KVH): q and k heads before their norms, and its rstd (qk_norm)
    float *atty;                       // (L, BT, A)
    float *att;                        // (L, B, NH, T, T)
    float *attn_out, *attn_rstd;       // (L, BT, C), (L, BT): o_proj's output before post_attention_layernorm (post_norms)
    float *residual2;                  // (L, BT, C)
    float *ln2, *ln2_mean, *ln2_rstd;  // (L, BT, C), (L, BT) (GPT-2 only), (L, BT)
    float *fch;                        // (L, BT, FCW)
    float *fch_act;                    // (L, BT, FF): gelu(fch) (GPT-2), swiglu(fch) or geglu(fch) (Llama family)
    float *mlp_out, *mlp_rstd;         // (L, BT, C), (L, BT): down_proj's output before post_feedforward_layernorm (post_norms)
    float *residual3;                  // (L, BT, C)
    float *lnf, *lnf_mean, *lnf_rstd;  // (BT, C), (BT) (GPT-2 only), (BT)
    float *x_sel;                      // (BT, C): lnf rows that go to the classifier
    float *logits;                     // (CR, V): logits (then dlogits) of a chunk of the selected rows
    float *losses;                     // (BT): loss of each selected row
    float *rope_cos, *rope_sin;        // (T, HS/2) each: RoPE's cos and sin at positions 0..T-1 (Llama family; GPT-2 none)
    float *rope_cos_local, *rope_sin_local;  // (T, HS/2) each: the sliding layers' own table (rope_local_theta)
    // gradient scratch, reused layer by layer: (BT, C), (BT, C), (BT, A), (BT, QKV), (BT, FCW), (BT, FF), (BT, C),
    // (BT, C) (post_norms: the gradient of a sub-layer's output before its norm)
    float *dresidual, *dln, *datty, *dqkv, *dfch, *dfch_act, *dx_sel, *dpost;
} Activations;

typedef struct {
    ModelConfig cfg;
    size_t num_params;
    float *params_mem, *grads_mem, *m_mem, *v_mem;  // params and grads: `padded` floats; moments: opt_n
    Dist *dist;               // the ranks training this model together (NULL: this process alone)
    size_t padded;            // floats in params_mem (and grads_mem below ZeRO-2): W*shard with ZeRO-1 and 2 (zeros past num_params), else num_params
    size_t opt_lo, opt_n;     // the AdamW moments cover parameters [opt_lo, opt_lo + opt_n): all, or this rank's ZeRO-1 shard
    AdamWSettings adamw;      // betas and epsilon: adamw_defaults() from model_allocate, the flags' from main
    ParamTensors params, grads;
    int B, T;                 // activation capacity
    float *acts_mem;
    size_t acts_floats;
    Activations acts;
    int *rows;                // row index (b*T + t) of each classifier row
    int *row_targets;         // its target
    float *row_correct, *row_entropy;  // its trl metrics (crossentropy_softmax), with targets
    int num_rows;
    // LoRA (model/lora.h), when lora.lc.rank > 0: the base is frozen (grads_mem NULL, no
    // moments for it) and AdamW trains the adapter block; the trained vector is then the
    // adapter's: `trained`, `trained_grads` and `num_trained` (padded, opt_lo and opt_n
    // refer to it) are the adapter's, else params_mem, grads_mem and num_params
    LoraLayout lora;
    float *adapter, *adapter_grads;  // lora.floats each (padded with ZeRO-1)
    float *lora_acts;         // hs = s * dropout(x) A^T of every adapter, (BT, R) each, then scratch dh (BT, R) and dropout(x) (BT, max in)
    float *trained, *trained_grads;
    size_t num_trained;
    int training;             // 1 inside train_step: the adapters' dropout is on
    uint64_t dropout_seed;    // -z; with the step and the micro-batch (over all ranks), the key of the dropout mask
    int64_t dropout_step;
    int dropout_micro;
    // QLoRA: the frozen base's linear weights in NF4 (model/hf_bnb4.h; q4.w NULL for a
    // dense base), their slots in params zero; linear_weight dequantizes one part after
    // another into q4_w (the largest layer weight) each time a product needs it
    Bnb4Base q4;
    float *q4_w, *q4_absmax;  // fp32 scratch: one layer's weight, its block absmax
    // ZeRO-2 (train/dist.h's units): blocks 0..L-1, the head (L), the embeddings (L+1); with full
    // fine-tuning grads_mem is their scratch and grads point into it (a per-layer tensor at its
    // one-layer slot: grad_layer); the step's gradient lives only in grad_shard
    DistUnit *units;          // NULL below ZeRO-2
    float *grad_shard;        // (padded / W) this rank's shard of the step's summed gradient
    // ZeRO-3: params_mem holds the gathered weights of wunits (full fine-tuning: units; LoRA: the
    // frozen base's own), params point into it as grads do (weight_layer), and the weights
    // [rank * wshard, (rank + 1) * wshard) of the model's flat vector live here only
    float *weight_shard;      // NULL below ZeRO-3
    DistUnit *wunits;
    size_t wshard;
} Model;

static int model_is_lora(const Model *m) { return m->lora.lc.rank > 0; }



// Width of the fc layer's output: GPT-2's FF (= 4C), the Llama family's [gate | up] 2FF.
static int fc_width(const ModelConfig *c) { return is_llama_family(c) ? 2 * c->FF : c->FF; }

// Layout of the linear layers' weights: Conv1D [in, out] for GPT-2, nn.Linear [out, in] for the Llama family.
static int weight_layout(const ModelConfig *c) { return is_llama_family(c) ? W_OUT_IN : W_IN_OUT; }

// Layer l's slice of parameter (or gradient) tensor i; NULL when the family has no such tensor.
static float *param_layer(const ModelConfig *c, const ParamTensors *t, int i, int l) {
    int64_t shape[2];
    size_t n = (size_t)param_slice_shape(c, i, shape);
    return n ? t->t[i] + (size_t)l * n : NULL;
}

// Layer l's slice of gradient tensor i; NULL when the tensor is frozen (LoRA) or absent.
static float *grad_layer(const Model *m, int i, int l) { return model_is_lora(m) ? NULL : param_layer(&m->cfg, &m->grads, i, m->units ? 0 : l); }

// Layer l's slice of weight tensor i where products read it (ZeRO-3: the gathered block's one-layer slot).
static float *weight_layer(const Model *m, int i, int l) { return param_layer(&m->cfg, &m->params, i, m->weight_shard ? 0 : l); }

// Layer l's weight of linear tensor `param` as the products use it: the fp32 parameters,
// or with a 4-bit base its parts dequantized into the scratch (fp32, as bitsandbytes'
// dequantize_4bit computes them; a part the files hold in 16 bits copied).
static const float *linear_weight(const Model *m, int l, int param) {
    const float *w = weight_layer(m, param, l);
    if (!m->q4.w) return w;
    HfPart parts[3];
    int nparts = param_hf_parts(&m->cfg, param, parts);
    int64_t shape[2];
    param_slice_shape(&m->cfg, param, shape);
    size_t off = 0;
    for (int k = 0; k < nparts; k++) {
        const Bnb4Weight *bw = bnb4_base_at(&m->q4, param, l, k);
        size_t n = (size_t)(parts[k].rows * shape[1]);
        if (!bw->codes) { memcpy(m->q4_w + off, w + off, n * sizeof(float)); off += n; continue; }
        int64_t bs = bw->blocksize, nb = (bw->n + bs - 1) / bs;
        const float *absmax = bw->absmax;
        if (!absmax) {
            nf4_dequantize_absmax(bw->qabsmax, bw->nested_absmax, bw->offset, nb, bw->nested_blocksize, m->q4_absmax);
            absmax = m->q4_absmax;
        }
        float *out = m->q4_w + off;
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < nb; b++)  // block by block: each element's product is the same as bnb4_dequantize's
            nf4_dequantize(bw->codes + b * bs / 2, absmax + b, bw->n - b * bs < bs ? bw->n - b * bs : bs, (int)bs, out + b * bs);
        off += n;
    }
    return m->q4_w;
}

// The added 1 of the RMSNorms: 1 where they scale by 1 + w (Gemma 3), else 0.
static float norm_one(const ModelConfig *c) { return c->norm_plus_one ? 1.0f : 0.0f; }

// The block's normalization: LayerNorm for GPT-2; RMSNorm (no mean, no bias) for the Llama family.
static void norm_forward(const ModelConfig *c, float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int N) {
    if (is_llama_family(c)) rmsnorm_forward(out, rstd, inp, w, N, c->C, c->eps, norm_one(c));
    else layernorm_forward(out, mean, rstd, inp, w, b, N, c->C, c->eps);
}

static void norm_backward(const ModelConfig *c, float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                          const float *mean, const float *rstd, int N) {
    if (is_llama_family(c)) rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, c->C, norm_one(c));
    else layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, c->C);
}

// The MLP's activation of fch (BT rows) into fch_act, and its backward pass.
static void mlp_act_forward(const ModelConfig *c, float *fch_act, const float *fch, int BT) {
    if (c->mlp_act == MLP_SWIGLU) swiglu_forward(fch_act, fch, BT, c->FF);
    else if (c->mlp_act == MLP_GEGLU) geglu_forward(fch_act, fch, BT, c->FF);
    else gelu_forward(fch_act, fch, (size_t)BT * c->FF);
}

static void mlp_act_backward(const ModelConfig *c, float *dfch, const float *fch, const float *dfch_act, int BT) {
    if (c->mlp_act == MLP_SWIGLU) swiglu_backward(dfch, fch, dfch_act, BT, c->FF);
    else if (c->mlp_act == MLP_GEGLU) geglu_backward(dfch, fch, dfch_act, BT, c->FF);
    else gelu_backward(dfch, fch, dfch_act, (size_t)BT * c->FF);
}

// The embedding's factor: embed_scale, or 1.
static float embedding_scale(const ModelConfig *c) { return c->embed_scale != 0 ? c->embed_scale : 1.0f; }

// Layer l's rotary table (cos, sin) in a, or 0 when the layer has no RoPE.
static int layer_rope_table(const ModelConfig *c, const Activations *a, int l, const float **cos_t, const float **sin_t) {
    int kind = layer_rope(c, l);
    *cos_t = kind == ROPE_LOCAL ? a->rope_cos_local : a->rope_cos;
    *sin_t = kind == ROPE_LOCAL ? a->rope_sin_local : a->rope_sin;
    return kind != ROPE_NONE;
}

// Floats of each activation array for B x T, in the order of Activations; returns the count.
#define NUM_ACTIVATIONS 38
static int model_activation_sizes(const ModelConfig *c, int B, int T, size_t sizes[NUM_ACTIVATIONS]) {
    size_t BT = (size_t)B * T, L = (size_t)c->L, C = (size_t)c->C, QKV = (size_t)qkv_width(c), A = (size_t)c->NH * c->HS;
    size_t FF = (size_t)c->FF, FCW = (size_t)fc_width(c), llama = (size_t)is_llama_family(c);
    size_t mean = llama ? 0 : 1, rope = llama ? (size_t)T * (c->HS / 2) : 0, local = c->rope_local_theta != 0 ? rope : 0;
    size_t qk = c->qk_norm ? 1 : 0, post = c->post_norms ? 1 : 0, H = (size_t)c->NH + c->KVH, CR = (size_t)classifier_chunk_rows(c, (int)BT);
    size_t s[NUM_ACTIVATIONS] = {BT * C, L * BT * C, mean * L * BT, L * BT, L * BT * QKV, qk * L * BT * H * c->HS, qk * L * BT * H,
                                 L * BT * A, L * B * c->NH * (size_t)T * T, post * L * BT * C, post * L * BT,
                                 L * BT * C, L * BT * C, mean * L * BT, L * BT, L * BT * FCW, L * BT * FF, post * L * BT * C, post * L * BT,
                                 L * BT * C, BT * C, mean * BT, BT, BT * C, CR * (size_t)c->V, BT, rope, rope, local, local,
                                 BT * C, BT * C, BT * A, BT * QKV, BT * FCW, BT * FF, BT * C, post * BT * C};
    memcpy(sizes, s, sizeof s);
    return NUM_ACTIVATIONS;
}

static size_t model_activation_floats(const ModelConfig *c, int B, int T) {
    size_t sizes[NUM_ACTIVATIONS], total = 0;
    for (int i = 0; i < model_activation_sizes(c, B, T, sizes); i++) total += sizes[i];
    return total;
}

// Floats of LoRA's activations at B x T: every adapter's hs (BT, R), then the scratch
// dh (BT, R) and dropout(x) (BT, widest input; only with dropout).
static size_t lora_activation_floats(const LoraLayout *lay, int B, int T) {
    if (lay->lc.rank == 0) return 0;
    size_t BT = (size_t)B * T, R = (size_t)lay->lc.rank, in = 0;
    for (int i = 0; i < lay->n; i++) if ((size_t)lay->ad[i].in > in) in = (size_t)lay->ad[i].in;
    return ((size_t)lay->n + 1) * BT * R + (lay->lc.dropout > 0 ? BT * in : 0);
}

// Allocates gradients, moments and activations for B x T; with LoRA (m->lora and
// m->adapter set by the caller) the gradients and moments are the adapter's only.
static void model_allocate(Model *m, int B, int T) {
    const ModelConfig *c = &m->cfg;
    m->adamw = adamw_defaults();
    m->num_params = model_num_parameters(c);
    if (model_is_lora(m)) {
        m->trained = m->adapter;
        m->num_trained = m->lora.floats;
        m->adapter_grads = m->trained_grads = (float *)xcalloc(m->num_trained ? m->num_trained : 1, sizeof(float));
        m->lora_acts = (float *)xcalloc(lora_activation_floats(&m->lora, B, T), sizeof(float));
    } else {
        m->grads_mem = (float *)xcalloc(m->num_params, sizeof(float));
        param_pointers(c, m->grads_mem, &m->grads);
        m->trained = m->params_mem; m->trained_grads = m->grads_mem; m->num_trained = m->num_params;
    }
    m->padded = m->opt_n = m->num_trained;
    m->m_mem = (float *)xcalloc(m->num_trained ? m->num_trained : 1, sizeof(float));
    m->v_mem = (float *)xcalloc(m->num_trained ? m->num_trained : 1, sizeof(float));
    m->B = B; m->T = T;
    size_t BT = (size_t)B * T, sizes[NUM_ACTIVATIONS];
    int n = model_activation_sizes(c, B, T, sizes);
    Activations *a = &m->acts;
    float **ptrs[] = {&a->encoded, &a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->qkv, &a->qk_raw, &a->qk_rstd, &a->atty, &a->att, &a->attn_out,
                      &a->attn_rstd, &a->residual2, &a->ln2, &a->ln2_mean, &a->ln2_rstd, &a->fch, &a->fch_act, &a->mlp_out, &a->mlp_rstd,
                      &a->residual3, &a->lnf, &a->lnf_mean, &a->lnf_rstd, &a->x_sel, &a->logits, &a->losses, &a->rope_cos, &a->rope_sin,
                      &a->rope_cos_local, &a->rope_sin_local, &a->dresidual, &a->dln, &a->datty, &a->dqkv, &a->dfch, &a->dfch_act,
                      &a->dx_sel, &a->dpost};
    size_t total = 0;
    for (int i = 0; i < n; i++) total += sizes[i];
    m->acts_floats = total;
    m->acts_mem = (float *)xcalloc(total, sizeof(float));
    float *p = m->acts_mem;
    for (int i = 0; i < n; i++) { *ptrs[i] = p; p += sizes[i]; }
    if (is_llama_family(c)) {  // positions within a row are below T
        float *inv_freq = (float *)xcalloc((size_t)(c->HS / 2), sizeof(float));
        rope_inv_freq(c, inv_freq);
        rope_table(a->rope_cos, a->rope_sin, inv_freq, T, c->HS / 2);
        if (c->rope_local_theta != 0) {
            rope_local_inv_freq(c, inv_freq);
            rope_table(a->rope_cos_local, a->rope_sin_local, inv_freq, T, c->HS / 2);
        }
        free(inv_freq);
    }
    m->rows = (int *)xmalloc(BT * sizeof(int));
    m->row_targets = (int *)xmalloc(BT * sizeof(int));
    m->row_correct = (float *)xmalloc(BT * sizeof(float));
    m->row_entropy = (float *)xmalloc(BT * sizeof(float));
    if (m->q4.w) {
        int64_t max_n, max_blocks, largest = 0, shape[2];
        bnb4_base_bytes(&m->q4, &max_n, &max_blocks);
        for (int i = 0; i < NUM_PARAM_TENSORS; i++) if (bnb4_is_linear(i) && param_slice_shape(c, i, shape) > largest) largest = param_slice_shape(c, i, shape);
        m->q4_w = (float *)xmalloc((size_t)largest * sizeof(float));
        m->q4_absmax = (float *)xmalloc((size_t)(max_blocks > 0 ? max_blocks : 1) * sizeof(float));
    }
}

// ZeRO-2: the full gradient buffer becomes the units' scratch (reused by every block, zeroed
// by each flush) and this rank's shard of the step's gradient. With LoRA the adapter block's
// gradient stays whole (it is small and the adapters find their gradients by offset).
// pos[i]: tensor i's place in its unit (full fine-tuning).
static void model_split_units(Model *m, size_t shard, size_t pos[NUM_PARAM_TENSORS]) {
    const ModelConfig *c = &m->cfg;
    int L = c->L;
    m->units = dist_model_units(c, &m->lora, pos);
    if (model_is_lora(m)) {
        m->trained_grads = m->adapter_grads = (float *)xcalloc(m->num_trained ? m->num_trained : 1, sizeof(float));
        for (int l = 0; l < L; l++) if (m->units[l].n) m->units[l].scratch = m->adapter_grads + m->units[l].off[0];
    } else {
        m->trained_grads = m->grads_mem = (float *)xcalloc(dist_zero2_scratch_floats(c, &m->lora), sizeof(float));
        dist_units_place(m->units, L, m->grads_mem, 0);
        for (int i = 0; i < NUM_PARAM_TENSORS; i++) m->grads.t[i] = dist_tensor_unit(m->units, L, i)->scratch + pos[i];
    }
    for (int k = 0; k < L + 2; k++) dist_unit_counts(&m->units[k], shard, m->dist->world);
    m->grad_shard = (float *)xcalloc(shard, sizeof(float));
}

// ZeRO-3 (after model_split_units): this rank keeps its shard of the weights' flat vector (full
// fine-tuning: the parameters' ZeRO-1 shard; LoRA: the frozen base's, in full fine-tuning's units,
// the adapters staying whole as with ZeRO-2); params_mem becomes the units' gathered weights, laid
// out like full fine-tuning's gradient scratch, params pointing into it as grads do. A unit's
// weights there are zero until it is gathered.
static void model_shard_weights(Model *m, size_t pos[NUM_PARAM_TENSORS]) {
    int L = m->cfg.L, W = m->dist->world;
    m->wshard = dist_shard_size(m->num_params, W);
    size_t P = m->num_params, lo = m->wshard * (size_t)m->dist->rank;
    m->weight_shard = (float *)xcalloc(m->wshard, sizeof(float));
    if (lo < P) memcpy(m->weight_shard, m->params_mem + lo, (P - lo < m->wshard ? P - lo : m->wshard) * sizeof(float));
    free(m->params_mem);
    m->params_mem = (float *)xcalloc(dist_zero3_weight_floats(&m->cfg), sizeof(float));
    if (model_is_lora(m)) m->wunits = dist_frozen_units(&m->cfg, m->wshard, W, m->params_mem, pos);
    else { m->trained = m->weight_shard; m->wunits = m->units; dist_units_place(m->units, L, m->params_mem, 1); }
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) m->params.t[i] = dist_tensor_unit(m->wunits, L, i)->weights + pos[i];
}

// Trains m on the ranks of d (after model_allocate). With ZeRO-1 each rank keeps the
// AdamW moments of one shard only, and parameters and gradients are padded to W
// shards for the reduce-scatter and all-gather; ZeRO-2 keeps no full gradient
// (model_split_units), ZeRO-3 no full copy of the weights either (model_shard_weights).
static void model_distribute(Model *m, Dist *d) {
    m->dist = d;
    if (!d->zero) return;
    size_t shard = dist_shard_size(m->num_trained, d->world), P = m->num_trained;
    m->padded = shard * (size_t)d->world;
    m->opt_lo = shard * (size_t)d->rank;
    m->opt_n = m->opt_lo >= P ? 0 : P - m->opt_lo < shard ? P - m->opt_lo : shard;
    float *params = (float *)xcalloc(m->padded, sizeof(float)), *grads = d->zero >= 2 ? NULL : (float *)xcalloc(m->padded, sizeof(float));
    memcpy(params, m->trained, P * sizeof(float));
    free(m->trained); free(m->trained_grads); free(m->m_mem); free(m->v_mem);
    m->trained = params; m->trained_grads = grads;
    if (model_is_lora(m)) { m->adapter = params; m->adapter_grads = grads; }
    else {
        m->params_mem = params; m->grads_mem = grads;
        param_pointers(&m->cfg, m->params_mem, &m->params);
        if (grads) param_pointers(&m->cfg, m->grads_mem, &m->grads);
    }
    m->m_mem = (float *)xcalloc(shard, sizeof(float));
    m->v_mem = (float *)xcalloc(shard, sizeof(float));
    size_t pos[NUM_PARAM_TENSORS];
    if (d->zero >= 2) model_split_units(m, shard, pos);
    if (d->zero >= 3) model_shard_weights(m, pos);
}

static void model_free(Model *m) {
    free(m->params_mem); free(m->grads_mem); free(m->m_mem); free(m->v_mem); free(m->acts_mem);
    free(m->adapter); free(m->adapter_grads); free(m->lora_acts); lora_layout_free(&m->lora);
    free(m->rows); free(m->row_targets); free(m->row_correct); free(m->row_entropy);
    free(m->q4_w); free(m->q4_absmax); bnb4_base_free(&m->q4);
    if (m->wunits != m->units) dist_units_free(m->wunits, m->cfg.L + 2);
    dist_units_free(m->units, m->cfg.L + 2); free(m->grad_shard); free(m->weight_shard);
}

// ----------------------------------------------------------------------------
// The linear layers with their LoRA adapters (cpu/lora.h): layer l's product of tensor
// `param` (P_QKVW, P_ATTPROJW, P_FCW, P_FCPROJW), plus in forward every adapter's
// s * dropout(inp) A^T B^T on its columns, and in backward the adapters' gradients and
// their part of the input's gradient (train_sft.cu's linear_forward, linear_backward).

// Adapter a's dropout in this micro-batch: its probability (0 outside training) and its draw
// (of the step, micro-batch, layer and module: the same in backward)
static float lora_dropout_of(const Model *m, const LoraAdapter *a, uint64_t *key) {
    if (!m->training || m->lora.lc.dropout == 0) return 0.0f;
    *key = lora_dropout_key(m->dropout_seed, m->dropout_step, m->dropout_micro, a->layer, a->module);
    return m->lora.lc.dropout;
}

// The adapters of layer l's product of `param`: their count, the first at *first
static int lora_site(const Model *m, int l, int param, const LoraAdapter **first) {
    return model_is_lora(m) ? lora_adapters_of(&m->lora, l, param, first) : 0;
}

// out[N, OC] = inp[N, C] W (+ bias) and its adapters; each keeps its h [N, R] in m->lora_acts
static void linear_forward(Model *m, int l, int param, float *out, const float *inp, const float *bias, int N, int C, int OC) {
    matmul_forward(out, inp, linear_weight(m, l, param), bias, N, C, OC, weight_layout(&m->cfg));
    const LoraAdapter *first;
    int count = lora_site(m, l, param, &first), R = m->lora.lc.rank;
    size_t BTR = (size_t)m->B * m->T * R;
    float *xd = m->lora_acts + ((size_t)m->lora.n + 1) * BTR;
    for (int j = 0; j < count; j++) {
        const LoraAdapter *a = first + j;
        uint64_t key = 0;
        float p = lora_dropout_of(m, a, &key);
        lora_adapter_forward(out, m->lora_acts + (size_t)(a - m->lora.ad) * BTR, xd, inp, m->adapter + a->a, m->adapter + a->b, m->lora.scale, p, key,
                             N, a->in, a->out, a->off, a->rows, R);
    }
}

// dinp += dout W^T, dW (dbias) += as matmul_backward (NULL: frozen), and the adapters' dA, dB and
// part of dinp, from dout [N, OC] the gradient of linear_forward's output
static void linear_backward(Model *m, int l, int param, float *dinp, float *dw, float *dbias, const float *dout, const float *inp, int N, int C,
                            int OC) {
    matmul_backward(dinp, dw, dbias, dout, inp, linear_weight(m, l, param), N, C, OC, weight_layout(&m->cfg));
    const LoraAdapter *first;
    int count = lora_site(m, l, param, &first), R = m->lora.lc.rank;
    size_t BTR = (size_t)m->B * m->T * R;
    float *dh = m->lora_acts + (size_t)m->lora.n * BTR, *xd = dh + BTR;
    for (int j = 0; j < count; j++) {
        const LoraAdapter *a = first + j;
        uint64_t key = 0;
        float p = lora_dropout_of(m, a, &key);
        lora_adapter_backward(dinp, m->adapter_grads + a->a, m->adapter_grads + a->b, dh, xd, dout, m->lora_acts + (size_t)(a - m->lora.ad) * BTR,
                              inp, m->adapter + a->a, m->adapter + a->b, m->lora.scale, p, key, N, a->in, a->out, a->off, a->rows, R);
    }
}

// One transformer block forward (train_sft.cu's layer_forward and layer_output_forward):
// layer l from its input (the embeddings, or the previous block's residual3) to its
// residual3, keeping what layer_backward needs in m->acts.
// GPT-2 block:  x2 = x + attproj(attention(qkv(LN1(x))));  x3 = x2 + fcproj(gelu(fc(LN2(x2))))
// Llama block:  x2 = x + o_proj(attention(rope(qkv(RMS1(x)))));  x3 = x2 + down(swiglu(gate|up(RMS2(x2))))
// with the features of model/model.h where the model has them: q/k norms before RoPE, a
// layer's own rotary table or none, a sliding window, post norms on o_proj's and
// down's outputs, GeGLU.
static void layer_forward(Model *m, int l, const int *pos, const int *doc_start, int B, int T) {
    const ModelConfig *c = &m->cfg;
    int C = c->C, NH = c->NH, KVH = c->KVH, HS = c->HS, BT = B * T, H = NH + KVH;
    int QKV = qkv_width(c), A = NH * HS, FF = c->FF, FCW = fc_width(c);
    float scale = attention_scale(c), one = norm_one(c);
    Activations *a = &m->acts;
    const float *residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * BT * C;
    size_t o1 = (size_t)l * BT, oc = o1 * C;
    float *qkv = a->qkv + o1 * QKV, *atty = a->atty + o1 * A, *fch = a->fch + o1 * FCW, *fch_act = a->fch_act + o1 * FF;
    norm_forward(c, a->ln1 + oc, a->ln1_mean + o1, a->ln1_rstd + o1, residual, weight_layer(m, P_LN1W, l), weight_layer(m, P_LN1B, l), BT);
    linear_forward(m, l, P_QKVW, qkv, a->ln1 + oc, weight_layer(m, P_QKVB, l), BT, C, QKV);
    if (c->qk_norm)
        qk_norm_forward(qkv, a->qk_raw + o1 * H * HS, a->qk_rstd + o1 * H, weight_layer(m, P_QNORMW, l), weight_layer(m, P_KNORMW, l), BT,
                        NH, KVH, HS, c->eps, one);
    const float *cos_t, *sin_t;
    if (layer_rope_table(c, a, l, &cos_t, &sin_t)) rope_forward(qkv, pos, cos_t, sin_t, BT, NH, KVH, HS);
    attention_forward(atty, a->att + (size_t)l * B * NH * T * T, qkv, doc_start, B, T, NH, KVH, HS, scale, layer_window(c, l));
    float *attn = c->post_norms ? a->attn_out + oc : a->residual2 + oc;
    linear_forward(m, l, P_ATTPROJW, attn, atty, weight_layer(m, P_ATTPROJB, l), BT, A, C);
    if (c->post_norms) rmsnorm_forward(a->residual2 + oc, a->attn_rstd + o1, attn, weight_layer(m, P_POSTATTNW, l), BT, C, c->eps, one);
    residual_forward(a->residual2 + oc, a->residual2 + oc, residual, (size_t)BT * C);
    norm_forward(c, a->ln2 + oc, a->ln2_mean + o1, a->ln2_rstd + o1, a->residual2 + oc, weight_layer(m, P_LN2W, l),
                 weight_layer(m, P_LN2B, l), BT);
    linear_forward(m, l, P_FCW, fch, a->ln2 + oc, weight_layer(m, P_FCB, l), BT, C, FCW);
    mlp_act_forward(c, fch_act, fch, BT);
    float *mlp = c->post_norms ? a->mlp_out + oc : a->residual3 + oc;
    linear_forward(m, l, P_FCPROJW, mlp, fch_act, weight_layer(m, P_FCPROJB, l), BT, FF, C);
    if (c->post_norms) rmsnorm_forward(a->residual3 + oc, a->mlp_rstd + o1, mlp, weight_layer(m, P_POSTFFNW, l), BT, C, c->eps, one);
    residual_forward(a->residual3 + oc, a->residual3 + oc, a->residual2 + oc, (size_t)BT * C);
}

// One transformer block backward (train_sft.cu's gpu_backward loop body): with
// a->dresidual the gradient of layer l's residual3, adds the block's parameter (or
// adapter) gradients and leaves in a->dresidual the gradient of its input.
static void layer_backward(Model *m, int l, const int *pos, const int *doc_start, int B, int T) {
    const ModelConfig *c = &m->cfg;
    int C = c->C, NH = c->NH, KVH = c->KVH, HS = c->HS, BT = B * T, H = NH + KVH;
    int QKV = qkv_width(c), A = NH * HS, FF = c->FF, FCW = fc_width(c);
    float scale = attention_scale(c), one = norm_one(c);
    Activations *a = &m->acts;
    size_t btc = (size_t)BT * C;
    const float *residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * btc;
    size_t o1 = (size_t)l * BT, oc = o1 * C;
    float *qkv = a->qkv + o1 * QKV, *atty = a->atty + o1 * A, *fch = a->fch + o1 * FCW, *fch_act = a->fch_act + o1 * FF;
    // MLP: residual3 = residual2 + [post_norm](fcproj(act(fc(norm2(residual2)))))
    const float *dmlp = a->dresidual;
    if (c->post_norms) {
        memset(a->dpost, 0, btc * sizeof(float));
        rmsnorm_backward(a->dpost, grad_layer(m, P_POSTFFNW, l), a->dresidual, a->mlp_out + oc, weight_layer(m, P_POSTFFNW, l),
                         a->mlp_rstd + o1, BT, C, one);
        dmlp = a->dpost;
    }
    memset(a->dfch_act, 0, (size_t)BT * FF * sizeof(float));
    linear_backward(m, l, P_FCPROJW, a->dfch_act, grad_layer(m, P_FCPROJW, l), grad_layer(m, P_FCPROJB, l), dmlp, fch_act, BT, FF, C);
    memset(a->dfch, 0, (size_t)BT * FCW * sizeof(float));
    mlp_act_backward(c, a->dfch, fch, a->dfch_act, BT);
    memset(a->dln, 0, btc * sizeof(float));
    linear_backward(m, l, P_FCW, a->dln, grad_layer(m, P_FCW, l), grad_layer(m, P_FCB, l), a->dfch, a->ln2 + oc, BT, C, FCW);
    norm_backward(c, a->dresidual, grad_layer(m, P_LN2W, l), grad_layer(m, P_LN2B, l), a->dln, a->residual2 + oc,
                  weight_layer(m, P_LN2W, l), a->ln2_mean + o1, a->ln2_rstd + o1, BT);
    // attention: residual2 = residual + [post_norm](attproj(attention(rope(qk_norm(qkv(norm1(residual)))))))
    const float *dattn = a->dresidual;
    if (c->post_norms) {
        memset(a->dpost, 0, btc * sizeof(float));
        rmsnorm_backward(a->dpost, grad_layer(m, P_POSTATTNW, l), a->dresidual, a->attn_out + oc, weight_layer(m, P_POSTATTNW, l),
                         a->attn_rstd + o1, BT, C, one);
        dattn = a->dpost;
    }
    memset(a->datty, 0, (size_t)BT * A * sizeof(float));
    linear_backward(m, l, P_ATTPROJW, a->datty, grad_layer(m, P_ATTPROJW, l), grad_layer(m, P_ATTPROJB, l), dattn, atty, BT, A, C);
    memset(a->dqkv, 0, (size_t)BT * QKV * sizeof(float));
    attention_backward(a->dqkv, a->datty, qkv, a->att + (size_t)l * B * NH * T * T, doc_start, B, T, NH, KVH, HS, scale, layer_window(c, l));
    const float *cos_t, *sin_t;
    if (layer_rope_table(c, a, l, &cos_t, &sin_t)) rope_backward(a->dqkv, pos, cos_t, sin_t, BT, NH, KVH, HS);
    if (c->qk_norm)
        qk_norm_backward(a->dqkv, grad_layer(m, P_QNORMW, l), grad_layer(m, P_KNORMW, l), a->qk_raw + o1 * H * HS, a->qk_rstd + o1 * H,
                         weight_layer(m, P_QNORMW, l), weight_layer(m, P_KNORMW, l), BT, NH, KVH, HS, one);
    memset(a->dln, 0, btc * sizeof(float));
    linear_backward(m, l, P_QKVW, a->dln, grad_layer(m, P_QKVW, l), grad_layer(m, P_QKVB, l), a->dqkv, a->ln1 + oc, BT, C, QKV);
    norm_backward(c, a->dresidual, grad_layer(m, P_LN1W, l), grad_layer(m, P_LN1B, l), a->dln, residual,
                  weight_layer(m, P_LN1W, l), a->ln1_mean + o1, a->ln1_rstd + o1, BT);
}

// ZeRO-3: gathers unit k's weights (block k < L, the head L, the embeddings L + 1) from every
// rank's shard just before they are read, every rank the same units in the same order: each
// block before its forward and its backward, the embeddings and the head once per micro-batch
// (train/dist.h's dist_unit_gather says why).
static void model_gather(Model *m, int k) {
    if (m->weight_shard) dist_unit_gather(m->dist, &m->wunits[k], m->weight_shard, m->wshard * (size_t)m->dist->rank, m->wshard);
}

// Forward pass over B rows of T positions. The classifier runs on the positions
// that have a target (targets != NULL; returns the summed loss) or, with
// targets == NULL, on the positions listed in m->rows[0..m->num_rows) by the caller
// (at most classifier_chunk_rows of them; their logits are left in acts.logits).
// The embeddings, the blocks (layer_forward), the final norm, the classifier.
static double model_forward(Model *m, const int *inputs, const int *pos, const int *doc_start, const int *targets, int B, int T) {
    const ModelConfig *c = &m->cfg;
    int L = c->L, C = c->C, V = c->V, BT = B * T, llama = is_llama_family(c);
    ParamTensors *p = &m->params;
    Activations *a = &m->acts;
    model_gather(m, L + 1);
    encoder_forward(a->encoded, inputs, pos, p->wte, llama ? NULL : p->wpe, embedding_scale(c), BT, C);
    for (int l = 0; l < L; l++) { model_gather(m, l); layer_forward(m, l, pos, doc_start, B, T); }
    model_gather(m, L);
    norm_forward(c, a->lnf, a->lnf_mean, a->lnf_rstd, a->residual3 + (size_t)(L - 1) * BT * C, p->lnfw, param_layer(c, p, P_LNFB, 0), BT);
    if (targets) {
        m->num_rows = 0;
        for (int i = 0; i < BT; i++)
            if (targets[i] >= 0) { m->rows[m->num_rows] = i; m->row_targets[m->num_rows++] = targets[i]; }
    }
    for (int r = 0; r < m->num_rows; r++) memcpy(a->x_sel + (size_t)r * C, a->lnf + (size_t)m->rows[r] * C, (size_t)C * sizeof(float));
    int CR = classifier_chunk_rows(c, BT);
    if (!targets && m->num_rows > CR) fatal("model_forward: logits of %d rows asked for; at most %d fit the classifier's chunk", m->num_rows, CR);
    for (int r0 = 0; r0 < m->num_rows; r0 += CR)
        classifier_forward(a->logits, a->losses + r0, m->row_correct + r0, m->row_entropy + r0, a->x_sel + (size_t)r0 * C, output_head(c, p),
                           targets ? m->row_targets + r0 : NULL, m->num_rows - r0 < CR ? m->num_rows - r0 : CR, C, V);
    double loss = 0.0;
    if (targets) for (int r = 0; r < m->num_rows; r++) loss += a->losses[r];
    return loss;
}

// Adds the trl metrics of the rows of the last model_forward with targets to *sums, in row order.
static void add_token_sums(const Model *m, TokenSums *sums) {
    for (int r = 0; r < m->num_rows; r++) { sums->correct += m->row_correct[r]; sums->entropy += m->row_entropy[r]; }
}

// ZeRO-2: unit k's gradient is complete; reduce-scatter it into this rank's shard. The
// CPU trainer does it synchronously, between two layers' backward: the same OpenMP
// threads compute and communicate, and Open MPI progresses a non-blocking collective
// only inside MPI calls (no progress thread by default), so MPI_Ireduce_scatter would
// overlap nothing. Every rank flushes the same units in the same order.
static void model_unit_done(Model *m, int k) {
    if (m->units) dist_unit_flush(m->dist, &m->units[k], m->grad_shard, m->opt_lo, m->padded / (size_t)m->dist->world);
}

// ZeRO-3: the gathers of one forward pass (model_forward's order) without the pass, on a rank
// that has no micro-batch to compute while the others gather.
static void model_forward_gathers(Model *m) {
    for (int k = -1; m->weight_shard && k <= m->cfg.L; k++) model_gather(m, k < 0 ? m->cfg.L + 1 : k);
}

// A micro-batch without targets on this rank: with ZeRO-2 the other ranks' flushes still
// need this rank's (zero) part, unit by unit in the backward's order; with ZeRO-3 their
// gathers need its shard, in the forward's and the backward's order between the flushes.
static void model_units_flush_empty(Model *m) {
    int L = m->cfg.L;
    if (!m->units) return;
    model_forward_gathers(m);  // ZeRO-3
    model_unit_done(m, L);
    for (int l = L - 1; l >= 0; l--) { model_gather(m, l); model_unit_done(m, l); }
    model_unit_done(m, L + 1);
}

// Backward pass after model_forward with targets: adds d(sum of losses)/d(params)
// to the gradients (ZeRO-2: unit by unit into the shard, model_unit_done; ZeRO-3: each block's
// weights gathered again first, the head's and the embeddings' still there from the forward).
static void model_backward(Model *m, const int *inputs, const int *pos, const int *doc_start, int B, int T) {
    const ModelConfig *c = &m->cfg;
    int L = c->L, C = c->C, V = c->V, BT = B * T, llama = is_llama_family(c);
    ParamTensors *p = &m->params, *g = &m->grads;
    Activations *a = &m->acts;
    size_t btc = (size_t)BT * C;
    // the classifier chunk by chunk; with one chunk, its dlogits are still in acts.logits from the forward pass
    int CR = classifier_chunk_rows(c, BT);
    for (int r0 = 0; r0 < m->num_rows; r0 += CR) {
        int n = m->num_rows - r0 < CR ? m->num_rows - r0 : CR;
        const float *x = a->x_sel + (size_t)r0 * C;
        if (m->num_rows > CR)
            classifier_forward(a->logits, a->losses + r0, m->row_correct + r0, m->row_entropy + r0, x, output_head(c, p), m->row_targets + r0, n, C, V);
        classifier_backward(a->dx_sel + (size_t)r0 * C, model_is_lora(m) ? NULL : output_head(c, g), a->logits, x, output_head(c, p), n, C, V);
    }
    memset(a->dln, 0, btc * sizeof(float));  // dln holds d(lnf): zero except selected rows
    for (int r = 0; r < m->num_rows; r++) memcpy(a->dln + (size_t)m->rows[r] * C, a->dx_sel + (size_t)r * C, (size_t)C * sizeof(float));
    memset(a->dresidual, 0, btc * sizeof(float));
    norm_backward(c, a->dresidual, model_is_lora(m) ? NULL : g->lnfw, grad_layer(m, P_LNFB, 0), a->dln, a->residual3 + (size_t)(L - 1) * BT * C, p->lnfw, a->lnf_mean,
                  a->lnf_rstd, BT);
    model_unit_done(m, L);
    for (int l = L - 1; l >= 0; l--) {
        model_gather(m, l);
        layer_backward(m, l, pos, doc_start, B, T);
        model_unit_done(m, l);
    }
    if (!model_is_lora(m)) encoder_backward(g->wte, llama ? NULL : g->wpe, a->dresidual, inputs, pos, embedding_scale(c), BT, C);
    model_unit_done(m, L + 1);
}

// ----------------------------------------------------------------------------
// Optimizer: global gradient norm and clipping (torch.nn.utils.clip_grad_norm_),
// then AdamW (torch.optim.AdamW): p *= 1 - lr*wd (matrices and embeddings only);
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps),
// with b1, b2 and eps from Model.adamw (--adam_beta1, --adam_beta2, --adam_epsilon)

#define REDUCE_CHUNKS 256

// The sum of squares of g*scale in double over fixed chunks (sum_squares_lanes within
// each): the same sum whatever the thread count.
static double sum_of_squares(const float *g, size_t n, float scale) {
    double partial[REDUCE_CHUNKS];
    size_t chunk = (n + REDUCE_CHUNKS - 1) / REDUCE_CHUNKS;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < REDUCE_CHUNKS; k++) {
        size_t lo = (size_t)k * chunk, hi = lo + chunk < n ? lo + chunk : n;
        partial[k] = lo < hi ? sum_squares_lanes(g + lo, hi - lo, scale) : 0.0;
    }
    double total = 0.0;
    for (int k = 0; k < REDUCE_CHUNKS; k++) total += partial[k];
    return total;
}

// One AdamW step (update count t) on n parameters with weight decay wd, the gradient
// being g * mean * clip (rounded after each product: the mean over the step's targets,
// then clipping's coefficient, 1 when it does not clip). Scaling here rather than in
// g itself saves two passes over the gradient's memory a step.
static void adamw_tensor(float *p, const float *g, float *m, float *v, size_t n, float mean, float clip, float lr, float beta1, float beta2,
                         float eps, float wd, int64_t t) {
    AdamWStep a = adamw_constants(lr, beta1, beta2, eps, wd, t);
#pragma omp parallel for schedule(static)
    for (size_t k = 0; k < n; k++) p[k] = adamw_one(p[k], g[k] * mean * clip, &m[k], &v[k], &a);  // train/adamw.h: the GPU trainer's formula too
}

// AdamW on the parameters [m->opt_lo, m->opt_lo + m->opt_n) (ZeRO-3: in weight_shard) with their gradients
// g[0..opt_n) and the moments. A ZeRO-1 shard may start or end inside a tensor, so
// each tensor's overlap with the range gets that tensor's weight decay.
// With LoRA every tensor of the adapter block is a matrix: all decay.
static void adamw_update(Model *m, const float *g, float mean, float clip, float lr, float weight_decay, int64_t t) {
    size_t lo = m->opt_lo, hi = m->opt_lo + m->opt_n, off = 0;
    const AdamWSettings *w = &m->adamw;
    if (model_is_lora(m)) {
        adamw_tensor(m->adapter + lo, g, m->m_mem, m->v_mem, m->opt_n, mean, clip, lr, w->beta1, w->beta2, w->eps, weight_decay, t);
        return;
    }
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        size_t end = off + param_numel(&m->cfg, i), a = off > lo ? off : lo, b = end < hi ? end : hi;
        if (a < b)
            adamw_tensor(m->weight_shard ? m->weight_shard + (a - lo) : m->params_mem + a, g + (a - lo), m->m_mem + (a - lo), m->v_mem + (a - lo), b - a, mean, clip, lr, w->beta1, w->beta2, w->eps,
                         PARAM_INFO[i].decay ? weight_decay : 0.0f, t);
        off = end;
    }
}

// ----------------------------------------------------------------------------
// One optimizer step over A micro-batches.

typedef struct {
    double loss;        // sum of target losses / number of targets
    float grad_norm;    // before clipping
    int64_t targets;
    int skipped;        // STEP_UPDATED, or why no update: STEP_NO_TARGETS, STEP_NONFINITE
    TokenSums sums;     // trl's metrics of the step's targets, summed over all ranks
    int64_t tokens;     // positions holding a token in the step's micro-batches, all ranks (trl's num_tokens grows by it)
} StepResult;

// Data parallel (m->dist, W ranks): every rank makes all A*W micro-batches of the
// step and computes only its own block of A (dist_owns_microbatch), so all know the
// step's number of targets N. The gradient and loss sums meet once, after the last
// micro-batch: summed everywhere (allreduce), or with ZeRO-1 each rank receives the
// sum over its shard (reduce-scatter), updates that shard and all-gathers the
// parameters. ZeRO-2 reduce-scatters during every micro-batch's backward instead, unit
// by unit, and accumulates the step in the shard alone (the loss sums still meet once);
// ZeRO-3 also gathers each unit's weights before they are read and never the whole.
// Norm and clipping are over the whole gradient either way (the shards' squares summed).
static StepResult train_step(Model *m, Loader *ld, int A, float lr, float weight_decay, float grad_clip, int64_t *adam_t) {
    StepResult r = {0};
    Dist *d = m->dist;
    int W = d ? d->world : 1;
    if (m->units) memset(m->grad_shard, 0, m->padded / (size_t)W * sizeof(float));
    else memset(m->trained_grads, 0, m->padded * sizeof(float));
    double sums[3] = {0.0, 0.0, 0.0};  // loss, correct, entropy: this rank's, then (with ranks) every rank's
    for (int k = 0; k < A * W; k++) {
        loader_next_batch(ld);
        r.targets += ld->num_targets;
        r.tokens += loader_batch_tokens(ld);
        if (d && !dist_owns_microbatch(d->rank, A, k)) continue;  // another rank's
        if (ld->num_targets == 0) { model_units_flush_empty(m); continue; }  // contributes nothing
        m->training = 1;
        m->dropout_micro = k;
        sums[0] += model_forward(m, ld->inputs, ld->pos, ld->doc_start, ld->targets, ld->B, ld->T);
        TokenSums ts = {0.0, 0.0};
        add_token_sums(m, &ts);
        sums[1] += ts.correct;
        sums[2] += ts.entropy;
        model_backward(m, ld->inputs, ld->pos, ld->doc_start, ld->B, ld->T);
        m->training = 0;
    }
    if (r.targets == 0) { r.skipped = STEP_NO_TARGETS; return r; }  // on every rank: N is the same everywhere
    // g[0..opt_n): the summed gradient of the parameters this rank updates
    float *g = m->units ? m->grad_shard : m->trained_grads;
    if (poison_this_step == POISON_GRAD) g[0] = NAN;  // test hook (trainer.h)
    if (d && d->zero == 1) dist_reduce_scatter_sum_f32(d, m->trained_grads, g, m->padded / (size_t)W);
    else if (d && !d->zero) dist_allreduce_sum_f32(d, m->trained_grads, m->num_trained);  // ZeRO-2: summed already, unit by unit
    if (d) dist_allreduce_sum_f64(d, sums, 3);
    float mean = 1.0f / (float)r.targets;  // sum of losses -> mean over the step's targets (applied as g is read)
    r.loss = sums[0] / (double)r.targets;
    r.sums.correct = sums[1];
    r.sums.entropy = sums[2];
    if (poison_this_step == POISON_LOSS) r.loss = NAN;
    double sq = sum_of_squares(g, m->opt_n, mean);
    if (d && d->zero) dist_allreduce_sum_f64(d, &sq, 1);
    r.grad_norm = (float)sqrt(sq);
    if (!isfinite(r.loss) || !isfinite(r.grad_norm)) { r.skipped = STEP_NONFINITE; return r; }  // never reaches the weights
    float clip = 1.0f;
    if (grad_clip > 0.0f) {
        float coef = grad_clip / (r.grad_norm + 1e-6f);
        if (coef < 1.0f) clip = coef;
    }
    *adam_t += 1;
    adamw_update(m, g, mean, clip, lr, weight_decay, *adam_t);
    if (d && d->zero && m->trained != m->weight_shard) {  // full fine-tuning's ZeRO-3 gathers unit by unit when the weights are next read
        size_t shard = m->padded / (size_t)W;
        dist_allgather_f32(d, m->trained + (size_t)d->rank * shard, m->trained, shard);
    }
    return r;
}

// Mean loss per target over up to max_batches micro-batches (-1: the whole file) from
// the start. Data parallel: micro-batch k is evaluated by rank k % W, and the sums meet.
// ZeRO-3's forwards gather, so every rank makes one pass per round of W micro-batches: its
// batch's forward, or the gathers alone when it has no targets or the file ended before it.
static double evaluate(Model *m, Loader *ld, int max_batches, int64_t *targets_out) {
    loader_seek(ld, 0, 0);
    double sum[2] = {0.0, 0.0};  // loss, targets
    int k = 0;
    for (; (max_batches < 0 || k < max_batches) && !ld->exhausted; k++) {
        loader_next_batch(ld);
        if (m->dist && !dist_owns_val_batch(m->dist->rank, m->dist->world, k)) continue;
        if (ld->num_targets == 0) { model_forward_gathers(m); continue; }
        sum[0] += model_forward(m, ld->inputs, ld->pos, ld->doc_start, ld->targets, ld->B, ld->T);
        sum[1] += ld->num_targets;
    }
    if (m->dist && k % m->dist->world && m->dist->rank >= k % m->dist->world) model_forward_gathers(m);  // the last round's pass
    if (m->dist) dist_allreduce_sum_f64(m->dist, sum, 2);
    int64_t n = (int64_t)sum[1];
    *targets_out = n;
    return n ? sum[0] / (double)n : NAN;
}

// ----------------------------------------------------------------------------
// Generation with a key/value cache: each new token runs the layers on one row
// and attends to the cached keys and values of the earlier tokens, so a token
// costs O(current length) instead of a forward pass over the whole prefix. The
// cache grows with the sequence (doubling, up to the context), so a model with a
// long context (Llama 3's 131072 positions) holds only what generation reaches.

typedef struct {
    int len, cap;            // tokens in the cache, positions it has room for (<= context)
    int kvw;                 // width of a cached key or value row: KVH * HS (GPT-2: C)
    float *k, *v;            // (L, cap, kvw): keys (rotated by RoPE in the Llama family) and values
    float *x, *ln, *post;    // (C): the residual stream; a normed row or a projection; a post-normed projection (post_norms)
    float *qkv;              // (QKV)
    float *qk_raw, *qk_rstd; // (NH + KVH) HS, NH + KVH: the q/k norms' input and rstd (qk_norm)
    float *atty;             // (NH * HS)
    float *fch, *fch_act;    // (fc width), (FF)
    float *att;              // (NH, cap)
    float *inv_freq, *inv_freq_local;  // (HS / 2): RoPE's frequencies (Llama family); the sliding layers' own (rope_local_theta)
    float *rope_cos, *rope_sin, *rope_cos_local, *rope_sin_local;  // (HS / 2): cos and sin at the current position, of each table
    float *logits;           // (V)
} KVCache;

static void kv_init(KVCache *kv, const ModelConfig *c, int cap) {
    memset(kv, 0, sizeof *kv);
    kv->cap = cap;
    kv->kvw = c->KVH * c->HS;
    size_t lc = (size_t)c->L * cap * kv->kvw, half = (size_t)(c->HS / 2);
    kv->k = (float *)xmalloc(lc * sizeof(float));
    kv->v = (float *)xmalloc(lc * sizeof(float));
    kv->x = (float *)xmalloc((size_t)c->C * sizeof(float));
    kv->ln = (float *)xmalloc((size_t)c->C * sizeof(float));
    kv->post = (float *)xmalloc((size_t)c->C * sizeof(float));
    kv->qkv = (float *)xmalloc((size_t)qkv_width(c) * sizeof(float));
    kv->qk_raw = (float *)xmalloc((size_t)(c->NH + c->KVH) * c->HS * sizeof(float));
    kv->qk_rstd = (float *)xmalloc((size_t)(c->NH + c->KVH) * sizeof(float));
    kv->atty = (float *)xmalloc((size_t)c->NH * c->HS * sizeof(float));
    kv->fch = (float *)xmalloc((size_t)fc_width(c) * sizeof(float));
    kv->fch_act = (float *)xmalloc((size_t)c->FF * sizeof(float));
    kv->att = (float *)xmalloc((size_t)c->NH * cap * sizeof(float));
    kv->inv_freq = (float *)xmalloc(half * sizeof(float));
    kv->inv_freq_local = (float *)xmalloc(half * sizeof(float));
    kv->rope_cos = (float *)xmalloc(half * sizeof(float));
    kv->rope_sin = (float *)xmalloc(half * sizeof(float));
    kv->rope_cos_local = (float *)xmalloc(half * sizeof(float));
    kv->rope_sin_local = (float *)xmalloc(half * sizeof(float));
    if (is_llama_family(c)) rope_inv_freq(c, kv->inv_freq);
    if (c->rope_local_theta != 0) rope_local_inv_freq(c, kv->inv_freq_local);
    kv->logits = (float *)xmalloc((size_t)c->V * sizeof(float));
}

// Makes room for n positions (n <= context): the capacity doubles, or becomes n,
// capped at the context; each layer's cached rows move to the new layout.
static void kv_reserve(KVCache *kv, const ModelConfig *c, int n) {
    if (n <= kv->cap) return;
    if (n > c->maxT) fatal("generation: position %d is beyond the model's context of %d positions", n - 1, c->maxT);
    int cap = 2 * kv->cap > n ? 2 * kv->cap : n;
    if (cap > c->maxT) cap = c->maxT;
    size_t lc = (size_t)c->L * cap * kv->kvw, row = (size_t)kv->kvw;
    float *k = (float *)xmalloc(lc * sizeof(float)), *v = (float *)xmalloc(lc * sizeof(float));
    for (int l = 0; l < c->L; l++) {
        memcpy(k + (size_t)l * cap * row, kv->k + (size_t)l * kv->cap * row, (size_t)kv->len * row * sizeof(float));
        memcpy(v + (size_t)l * cap * row, kv->v + (size_t)l * kv->cap * row, (size_t)kv->len * row * sizeof(float));
    }
    free(kv->k); free(kv->v); free(kv->att);
    kv->k = k; kv->v = v;
    kv->att = (float *)xmalloc((size_t)c->NH * cap * sizeof(float));
    kv->cap = cap;
}

static void kv_free(KVCache *kv) {
    free(kv->k); free(kv->v); free(kv->x); free(kv->ln); free(kv->post); free(kv->qkv); free(kv->qk_raw); free(kv->qk_rstd); free(kv->atty);
    free(kv->fch); free(kv->fch_act); free(kv->att); free(kv->inv_freq); free(kv->inv_freq_local); free(kv->rope_cos); free(kv->rope_sin);
    free(kv->rope_cos_local); free(kv->rope_sin_local); free(kv->logits);
}

// out[OC] = x[C] * W + bias (bias NULL: none), W as in matmul_forward: one row, so a
// matrix-vector product (memory bound).
static void matvec_forward(float *out, const float *x, const float *w, const float *bias, int C, int OC, int layout) {
    if (layout == W_OUT_IN) {  // each output is a dot product with a contiguous row of w
#pragma omp parallel for schedule(static)
        for (int o = 0; o < OC; o++) {
            const float *wr = w + (size_t)o * C;
            float d = bias ? bias[o] : 0.0f;
            for (int c = 0; c < C; c++) d += x[c] * wr[c];
            out[o] = d;
        }
        return;
    }
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < OC; o0 += 64) {
        int o1 = o0 + 64 < OC ? o0 + 64 : OC;
        float acc[64];
        for (int o = o0; o < o1; o++) acc[o - o0] = bias ? bias[o] : 0.0f;
        for (int c = 0; c < C; c++) {
            const float *wr = w + (size_t)c * OC;
            for (int o = o0; o < o1; o++) acc[o - o0] += x[c] * wr[o];
        }
        memcpy(out + o0, acc, (size_t)(o1 - o0) * sizeof(float));
    }
}

// The angles of position t, as rope_table computes them.
static void kv_rope_angles(float *cos_t, float *sin_t, const float *inv_freq, int t, int half) {
    for (int i = 0; i < half; i++) {
        float angle = (float)t * inv_freq[i];
        cos_t[i] = cosf(angle);
        sin_t[i] = sinf(angle);
    }
}

// Attention of the one query at position t (q: the NH heads of its qkv row) to the cached
// keys and values kc, vc (rows of KVH HS) of positions 0..t, one document: out (NH HS) as
// attention_forward's row t, with the same scale and sliding window (first key
// attention_first_key(0, t, window)). att: NH rows of cap floats, scratch.
static void attention_decode(float *out, float *att, const float *q, const float *kc, const float *vc, int t, int cap, int NH,
                             int KVH, int HS, float scale, int window) {
    int kvw = KVH * HS, group = NH / KVH, s0 = attention_first_key(0, t, window);
#pragma omp parallel for schedule(static)
    for (int h = 0; h < NH; h++) {  // softmax over the cached positions s0..t
        const float *qh = q + h * HS;
        int kh = h / group;
        float *a = att + (size_t)h * cap, mx = -INFINITY, sum = 0.0f;
        for (int s = s0; s <= t; s++) {
            const float *k = kc + (size_t)s * kvw + kh * HS;
            float d = 0.0f;
            for (int i = 0; i < HS; i++) d += qh[i] * k[i];
            a[s] = d * scale;
            if (a[s] > mx) mx = a[s];
        }
        for (int s = s0; s <= t; s++) a[s] = exp_vec(a[s] - mx);
        for (int s = s0; s <= t; s++) sum += a[s];
        float *o = out + h * HS;
        for (int i = 0; i < HS; i++) o[i] = 0.0f;
        for (int s = s0; s <= t; s++) {
            const float *v = vc + (size_t)s * kvw + kh * HS;
            for (int i = 0; i < HS; i++) o[i] += a[s] / sum * v[i];
        }
    }
}

// The adapters of layer l's product of `param` on one row (cpu/lora.h's lora_forward_row)
static void lora_matvec(const Model *m, int l, int param, float *out, const float *x) {
    const LoraAdapter *first;
    int count = lora_site(m, l, param, &first);
    for (int j = 0; j < count; j++) {
        const LoraAdapter *a = first + j;
        lora_forward_row(out, x, m->adapter + a->a, m->adapter + a->b, m->lora.scale, a->in, a->off, a->rows, m->lora.lc.rank);
    }
}

// Appends `token` at position kv->len (< context) and returns the logits for the next token.
// Each layer computes what model_forward does for one row; a sliding layer attends to
// its window of cached positions only.
static const float *model_decode_step(const Model *m, KVCache *kv, int token) {
    const ModelConfig *c = &m->cfg;
    const ParamTensors *p = &m->params;
    int C = c->C, NH = c->NH, KVH = c->KVH, HS = c->HS, QKV = qkv_width(c), A = NH * HS, t = kv->len;
    int llama = is_llama_family(c), wl = weight_layout(c), kvw = kv->kvw, zero = 0;
    float mean, rstd, scale = attention_scale(c), one = norm_one(c), emb = embedding_scale(c);
    kv_reserve(kv, c, t + 1);
    for (int i = 0; i < C; i++) kv->x[i] = llama ? p->wte[(size_t)token * C + i] * emb : p->wte[(size_t)token * C + i] + p->wpe[(size_t)t * C + i];
    if (llama) kv_rope_angles(kv->rope_cos, kv->rope_sin, kv->inv_freq, t, HS / 2);
    if (c->rope_local_theta != 0) kv_rope_angles(kv->rope_cos_local, kv->rope_sin_local, kv->inv_freq_local, t, HS / 2);
    for (int l = 0; l < c->L; l++) {
        norm_forward(c, kv->ln, &mean, &rstd, kv->x, weight_layer(m, P_LN1W, l), weight_layer(m, P_LN1B, l), 1);
        matvec_forward(kv->qkv, kv->ln, linear_weight(m, l, P_QKVW), weight_layer(m, P_QKVB, l), C, QKV, wl);
        lora_matvec(m, l, P_QKVW, kv->qkv, kv->ln);
        if (c->qk_norm)
            qk_norm_forward(kv->qkv, kv->qk_raw, kv->qk_rstd, weight_layer(m, P_QNORMW, l), weight_layer(m, P_KNORMW, l), 1, NH, KVH, HS, c->eps,
                            one);
        int rope = layer_rope(c, l), local = rope == ROPE_LOCAL;
        if (rope != ROPE_NONE)  // a one-position table
            rope_forward(kv->qkv, &zero, local ? kv->rope_cos_local : kv->rope_cos, local ? kv->rope_sin_local : kv->rope_sin, 1, NH, KVH, HS);
        float *kc = kv->k + (size_t)l * kv->cap * kvw, *vc = kv->v + (size_t)l * kv->cap * kvw;
        memcpy(kc + (size_t)t * kvw, kv->qkv + A, (size_t)kvw * sizeof(float));
        memcpy(vc + (size_t)t * kvw, kv->qkv + A + kvw, (size_t)kvw * sizeof(float));
        attention_decode(kv->atty, kv->att, kv->qkv, kc, vc, t, kv->cap, NH, KVH, HS, scale, layer_window(c, l));
        matvec_forward(kv->ln, kv->atty, linear_weight(m, l, P_ATTPROJW), weight_layer(m, P_ATTPROJB, l), A, C, wl);
        lora_matvec(m, l, P_ATTPROJW, kv->ln, kv->atty);
        const float *attn = kv->ln;
        if (c->post_norms) { rmsnorm_forward(kv->post, &rstd, kv->ln, weight_layer(m, P_POSTATTNW, l), 1, C, c->eps, one); attn = kv->post; }
        for (int i = 0; i < C; i++) kv->x[i] += attn[i];
        norm_forward(c, kv->ln, &mean, &rstd, kv->x, weight_layer(m, P_LN2W, l), weight_layer(m, P_LN2B, l), 1);
        matvec_forward(kv->fch, kv->ln, linear_weight(m, l, P_FCW), weight_layer(m, P_FCB, l), C, fc_width(c), wl);
        lora_matvec(m, l, P_FCW, kv->fch, kv->ln);
        mlp_act_forward(c, kv->fch_act, kv->fch, 1);
        matvec_forward(kv->ln, kv->fch_act, linear_weight(m, l, P_FCPROJW), weight_layer(m, P_FCPROJB, l), c->FF, C, wl);
        lora_matvec(m, l, P_FCPROJW, kv->ln, kv->fch_act);
        const float *mlp = kv->ln;
        if (c->post_norms) { rmsnorm_forward(kv->post, &rstd, kv->ln, weight_layer(m, P_POSTFFNW, l), 1, C, c->eps, one); mlp = kv->post; }
        for (int i = 0; i < C; i++) kv->x[i] += mlp[i];
    }
    norm_forward(c, kv->ln, &mean, &rstd, kv->x, p->lnfw, param_layer(c, p, P_LNFB, 0), 1);
    const float *head = output_head(c, p);
#pragma omp parallel for schedule(static)
    for (int v = 0; v < c->V; v++) {
        const float *w = head + (size_t)v * C;
        float d = 0.0f;
        for (int i = 0; i < C; i++) d += kv->ln[i] * w[i];
        kv->logits[v] = d;
    }
    kv->len++;
    return kv->logits;
}

// The CPU model as a Generator (train/generate.h): each call feeds the tokens the
// cache has not seen yet, so generation costs O(length) per token.
typedef struct { const Model *m; KVCache kv; } CpuGenerator;

static void cpu_generator_reset(void *self) { ((CpuGenerator *)self)->kv.len = 0; }

static const float *cpu_generator_next(void *self, const int *seq, int len) {
    CpuGenerator *g = (CpuGenerator *)self;
    const float *logits = g->kv.logits;
    while (g->kv.len < len) logits = model_decode_step(g->m, &g->kv, seq[g->kv.len]);
    return logits;
}

// The cache starts with room for 256 positions (or the context, if shorter) and grows as needed.
static void cpu_generator_init(CpuGenerator *g, Generator *gen, const Model *m) {
    g->m = m;
    kv_init(&g->kv, &m->cfg, m->cfg.maxT < 256 ? m->cfg.maxT : 256);
    gen->self = g; gen->reset = cpu_generator_reset; gen->next_logits = cpu_generator_next;
    gen->V = m->cfg.V; gen->cap = m->cfg.maxT;
}

// ----------------------------------------------------------------------------
// Memory of one rank, in floats: parameters (padded to W shards with ZeRO-1 and 2; ZeRO-3: the
// shard plus the units' gathered weights, `gathered`), gradients (all, padded with ZeRO-1; ZeRO-2
// and 3: the shard plus the units' scratch, grad_scratch), the AdamW moments (two per parameter,
// or per parameter of the shard) and one micro-batch's activations. LoRA (lay->lc.rank > 0): the
// gradients and moments are the adapter's, the parameters the frozen base (ZeRO-3: its shard plus
// the gathered weights) plus the whole adapter, `adapter`. Not counted: the whole model that every
// rank reads at start, and that ZeRO-3 gathers to rank 0 to write a checkpoint, generate or merge.
typedef struct { size_t params, gathered, adapter, grads, grad_scratch, adamw, acts; } RankMemory;

static RankMemory rank_memory(const ModelConfig *c, const LoraLayout *lay, int B, int T, int world, int zero) {
    size_t base = model_num_parameters(c), P = lay->lc.rank ? lay->floats : base, shard = dist_shard_size(P, world);
    size_t trained = zero ? shard * world : P, scratch = zero >= 2 ? dist_zero2_scratch_floats(c, lay) : 0;
    size_t gathered = zero >= 3 ? dist_zero3_weight_floats(c) : 0, weights = zero >= 3 ? dist_shard_size(base, world) + gathered : base;
    RankMemory r = {lay->lc.rank ? weights + trained : zero >= 3 ? weights : trained, gathered, lay->lc.rank ? trained : 0, zero >= 2 ? shard + scratch : trained,
                    scratch, 2 * (zero ? shard : P), model_activation_floats(c, B, T) + lora_activation_floats(lay, B, T)};
    return r;
}

// The memory plan of what main allocates after setup (the parameters are already
// in memory): refuse now rather than be killed by the out-of-memory killer later.
static void check_host_memory(const RankMemory *r) {
    MemTerm terms[] = {{"gradients", 4.0 * r->grads, "use a smaller model (-e)"},
                       {"AdamW state", 4.0 * r->adamw, "use a smaller model (-e), or more ranks with ZeRO-1 or 2 (-Z 1, -Z 2)"},
                       {"activations", 4.0 * r->acts, "lower -b (rows per micro-batch) or -t (row length)"}};
    check_memory_plan(terms, 3, host_memory_available(), "MemAvailable in /proc/meminfo");
}

// Reads the AdamW moments of a -y 1 resume (resume_state): with ZeRO-1 the file's
// full moments pass through a temporary and each rank keeps its shard.
static void resume_dist(const TrainArgs *a, const RunSetup *r, Model *m, TrainState *s, Loader *ld, Rng *sample_rng) {
    size_t P = m->num_trained;
    if (m->opt_n == P && m->opt_lo == 0) { resume_state(a, r, s, m->m_mem, m->v_mem, P, ld, sample_rng); return; }
    float *mf = (float *)xcalloc(P, sizeof(float)), *vf = (float *)xcalloc(P, sizeof(float));
    resume_state(a, r, s, mf, vf, P, ld, sample_rng);
    memcpy(m->m_mem, mf + m->opt_lo, m->opt_n * sizeof(float));
    memcpy(m->v_mem, vf + m->opt_lo, m->opt_n * sizeof(float));
    free(mf); free(vf);
}

// The checkpoint files of s with the weights p and the moments m, v: the model, or LoRA's adapter.
static void save_model_checkpoint(const TrainArgs *a, const RunSetup *r, const Model *m, const ParamTensors *p, const TrainState *s,
                                  const float *mf, const float *vf) {
    CheckpointLora lora = {&m->lora, m->adapter, r->lora_base, r->lora_state};
    save_checkpoint_files(a->out_dir, &m->cfg, p, model_is_lora(m) ? &lora : NULL, &r->extras, s, mf, vf, m->num_trained,
                          hf_save_dtype_from_name(a->save_dtype));
}

// Rank 0 writes the checkpoint of s (the same files whatever W is); with ZeRO-1 the
// moment shards are first gathered to it, with ZeRO-3 the weights' too.
static void checkpoint_dist(const TrainArgs *a, const RunSetup *r, Model *m, const TrainState *s) {
    if (a->ckpt_every < 0) return;  // -n -1: no checkpoints
    Dist *d = m->dist;
    if (!d->zero) {
        if (d->rank == 0) save_model_checkpoint(a, r, m, &m->params, s, m->m_mem, m->v_mem);
        return;
    }
    size_t shard = m->padded / (size_t)d->world;
    float *mf = dist_gather_to_root(d, m->m_mem, shard), *vf = dist_gather_to_root(d, m->v_mem, shard);
    float *weights = m->weight_shard && !model_is_lora(m) ? dist_gather_to_root(d, m->weight_shard, m->wshard) : NULL;  // LoRA's: the adapter only
    ParamTensors whole = m->params;
    if (weights) param_pointers(&m->cfg, weights, &whole);
    if (d->rank == 0) save_model_checkpoint(a, r, m, &whole, s, mf, vf);
    free(mf); free(vf); free(weights);
}

// generate_and_evaluate (rank 0 alone, a token at a time) with ZeRO-3's weights: every rank's
// shard is first gathered to rank 0, whose generator reads a view of m with all the weights.
static void generate_dist(const TrainArgs *a, const RunSetup *r, Model *m, CpuGenerator *cg, const Generator *gen, int64_t step, int final,
                          RunLog *log, Rng *sample_rng) {
    if (!m->weight_shard || !generation_due(a, r, step, final)) { generate_and_evaluate(a, r, gen, step, final, log, sample_rng); return; }
    float *weights = dist_gather_to_root(m->dist, m->weight_shard, m->wshard);
    Model whole = *m;
    whole.weight_shard = NULL;  // weight_layer: every layer in params
    if (weights) param_pointers(&m->cfg, weights, &whole.params);
    cg->m = &whole;
    generate_and_evaluate(a, r, gen, step, final, log, sample_rng);
    cg->m = m;
    free(weights);
}

// OpenMP threads that wait for work spin on their core (libgomp: 300000 spins
// before sleeping). When another program wants that core, the spinning thread holds
// it while the thread with the work waits for a turn: next to one busy process on a
// 2-core machine a run took several times longer (docs/benchmarks.md: shared machines). Waiting passively
// (sleeping at once) avoids that at a small cost on a quiet machine. libgomp reads
// its settings when the program loads, before main, so the program runs itself
// again with OMP_WAIT_POLICY=passive in its environment; a user's own
// OMP_WAIT_POLICY or GOMP_SPINCOUNT is left alone.
static void openmp_wait_passively(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY");  // could not: run on with libgomp's defaults
}

// How OpenMP threads wait in this process, for the start-up report.
static void openmp_wait_description(char *buf, size_t n) {
    const char *policy = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
    if (policy) snprintf(buf, n, "OMP_WAIT_POLICY=%s", policy);
    else if (spin) snprintf(buf, n, "GOMP_SPINCOUNT=%s", spin);
    else snprintf(buf, n, "libgomp's default wait (spin, then sleep)");
}

#ifndef SFT_NO_MAIN
int main(int argc, char **argv) {
    openmp_wait_passively(argv);
    preempt_install();
    TrainArgs args;
    train_args_defaults(&args);
    args.bnb4_supported = 1;  // QLoRA: LoRA on a 4-bit base (-e a bnb-4bit directory, --load_in_4bit)
    Flag flags[] = {COMMON_FLAGS(&args)};
    LongFlag long_flags[] = {COMMON_LONG_FLAGS(&args)};
    parse_flags_with_long(argc, argv, "-i train.bin [flags]", flags, (int)(sizeof flags / sizeof flags[0]), long_flags,
                          (int)(sizeof long_flags / sizeof long_flags[0]));
    check_train_args(argv[0], &args);
    Dist dist;
    dist_discover(&dist, argv[0], &args);

    // ranks other than 0 train silently: rank 0 prints and records the run (errors still reach stderr)
    if (dist.rank > 0 && !freopen("/dev/null", "w", stdout)) fatal("/dev/null: cannot open: %s", strerror(errno));

    // inputs first, so a bad input fails before anything is written
    RunSetup run;
    setup_run(argv[0], &args, &run);
    if (dist.zero == 3 && run.q4.w) usage_error(argv[0], "-Z 3 shards the fp32 weights; a 4-bit base (QLoRA) keeps its NF4 weights outside them: use -Z 2");
    dist_start(&dist);
    dist_check_same(&dist, run_fingerprint(&args, &run), "the run's flags, data files and model shape");
    if (run_already_finished(&args, &run, dist.rank == 0)) {  // a restarted job: nothing written
        run_free(&run);
        dist_finish(&dist);
        return 0;
    }
    RankMemory mem = rank_memory(&run.cfg, &run.lora, args.B, args.T, dist.world, dist.zero);
    check_host_memory(&mem);
    if (dist.rank == 0) {
        warn_lost_targets(&run.train, args.T);
        open_output_dir(args.out_dir);
        if (run.write_base) save_hf_dir(run.lora_base, args.out_dir, &run.cfg, &run.p, &run.extras, HF_SAVE_F32);  // LoRA's base as trained on, for adapter_config.json to name
    }
    Model model;
    memset(&model, 0, sizeof model);
    model.cfg = run.cfg;
    model.params_mem = run.params;
    model.params = run.p;
    run.params = NULL;  // the model owns them now
    if (run_is_lora(&run)) {
        lora_layout_init(&model.lora, &model.cfg, &run.lora.lc);
        model.adapter = run.adapter;
        run.adapter = NULL;
        model.dropout_seed = (uint64_t)args.seed;
    }
    model.q4 = run.q4;  // the model owns the 4-bit base now
    memset(&run.q4, 0, sizeof run.q4);
    model_allocate(&model, args.B, args.T);
    model.adamw = args.adamw;
    dist_check_same_floats(&dist, model.params_mem, model.num_params, "the model's starting weights (-e, or the checkpoint of -y 1)");
    if (model_is_lora(&model)) dist_check_same_floats(&dist, model.adapter, model.num_trained, "the LoRA adapter's starting weights");
    model_distribute(&model, &dist);  // after the check: ZeRO-3 keeps only this rank's shard
    Loader loader, val_loader;
    loader_init(&loader, &run.train, args.B, args.T, args.shuffle, (uint64_t)args.seed, 1);
    if (run.have_val) loader_init(&val_loader, &run.val, args.B, args.T, 0, 0, 0);
    TrainState state = {0};
    Rng sample_rng;
    rng_seed(&sample_rng, (uint64_t)args.seed + 1);
    resume_dist(&args, &run, &model, &state, &loader, &sample_rng);
    char wait[128], trainer[256];
    static const char *zero_stage_name[] = {"", ", data parallel with ZeRO-1 over MPI", ", data parallel with ZeRO-2 over MPI", ", data parallel with ZeRO-3 over MPI"};
    openmp_wait_description(wait, sizeof wait);
    snprintf(trainer, sizeof trainer, "train_sft (CPU, %d OpenMP threads, %s)%s", omp_get_max_threads(), wait,
             dist.world > 1 ? (dist.zero ? zero_stage_name[dist.zero] : ", data parallel over MPI") : "");
    RunLog log;
    run_log_open(&log, &args, &run, state.step, trainer);

    print_run_summary(&args, &run, model.num_params);
    if (dist.world > 1)
        printf("ranks | %d ranks (%s), ZeRO-%d: each rank computes %d of the %d micro-batches of a step%s\n", dist.world, dist.launcher, dist.zero,
               run.A, run.A * dist.world, dist.zero == 3 ? ", holds 1/W of the weights, gathers each layer's before its forward and its backward, "
               "reduce-scatters its gradient as its backward ends and updates 1/W of the parameters"
               : dist.zero == 2 ? ", reduce-scatters each layer's gradient as its backward ends and updates 1/W of the parameters"
               : dist.zero ? " and updates 1/W of the parameters" : "");
    if (model_is_lora(&model)) print_lora_summary(&run);
    // a 4-bit base: its quantized weights' fp32 slots are never written (not resident); they count as their NF4 state and the scratch
    char q4[256] = "";
    double params_bytes = mem.params * 4.0;
    if (model.q4.w) {
        int64_t max_n, max_blocks;
        size_t qn = 0, qb = bnb4_base_bytes(&model.q4, &max_n, &max_blocks);
        for (size_t j = 0; j < (size_t)NUM_PARAM_TENSORS * model.q4.L * 3; j++) qn += model.q4.w[j].codes ? (size_t)model.q4.w[j].n : 0;
        int64_t shape[2], scratch = max_blocks;
        for (int i = 0; i < NUM_PARAM_TENSORS; i++) if (bnb4_is_linear(i) && param_slice_shape(&model.cfg, i, shape) > scratch - max_blocks) scratch = max_blocks + param_slice_shape(&model.cfg, i, shape);
        params_bytes += (double)qb + 4.0 * (double)scratch - 4.0 * (double)qn;
        snprintf(q4, sizeof q4, " (4-bit base: %zu weights in NF4 with their absmax and nested state %.3f MB, %.3f MB in fp32; "
                 "dequantization scratch %.3f MB)", qn, qb / 1e6, qn * 4 / 1e6, scratch * 4 / 1e6);
    }
    char grad_parts[160] = "", weight_parts[200] = "", adapter_part[64] = "";
    if (dist.zero >= 2)
        snprintf(grad_parts, sizeof grad_parts, " (ZeRO-%d: the shard of %zu and the layer-by-layer scratch of %zu)", dist.zero, mem.grads - mem.grad_scratch,
                 mem.grad_scratch);
    if (model_is_lora(&model)) snprintf(adapter_part, sizeof adapter_part, "; the adapter, whole, %zu", mem.adapter);
    if (dist.zero >= 3)
        snprintf(weight_parts, sizeof weight_parts, " (ZeRO-3: the shard of %zu and the gathered embeddings, head and one layer, %zu%s)",
                 mem.params - mem.gathered - mem.adapter, mem.gathered, adapter_part);
    printf("memory| per rank: parameters %.3f MB%s%s, gradients %.3f MB%s, AdamW state %.3f MB (moments of %zu of %zu %s%s), activations %.3f MB; "
           "%d threads, %s\n", params_bytes / 1e6, q4, weight_parts, mem.grads * 4 / 1e6, grad_parts, mem.adamw * 4 / 1e6, mem.adamw / 2, model.num_trained,
           model_is_lora(&model) ? "adapter parameters; the base is frozen" : "parameters",
           args.offload ? "; -O 1: in host memory, as always on the CPU" : "", mem.acts * 4 / 1e6, omp_get_max_threads(), wait);

    CpuGenerator cpu_gen;
    Generator gen;
    cpu_generator_init(&cpu_gen, &gen, &model);
    int steps = run.steps;
    NonfiniteGuard guard = {args.max_nonfinite, 0};
    double step_comm = 0;  // seconds of the steps spent in collectives
    int stop = 0;  // the signal that stopped the run (preempt.h), 0 while it goes on
    for (int64_t step = state.step; step < steps && !stop; step++) {
        if (run.have_val && args.val_every > 0 && step % args.val_every == 0) {
            int64_t n;
            double vl = evaluate(&model, &val_loader, args.val_batches, &n);
            log_validation(&log, step, vl, n);
        }
        generate_dist(&args, &run, &model, &cpu_gen, &gen, step, 0, &log, &sample_rng);
        float lr = train_lr(&args, (int)step, steps);
        double t0 = now_seconds();
        poison_this_step = test_poison_for_step(step + 1);
        double c0 = dist.comm_seconds;
        model.dropout_step = step;
        StepResult r = train_step(&model, &loader, run.A, lr, args.weight_decay, args.grad_clip, &state.adam_t);
        double dt = now_seconds() - t0;
        step_comm += dist.comm_seconds - c0;
        state.step = step + 1;
        state.num_tokens += r.tokens;
        if (!nonfinite_guard(&guard, &log, state.step, r.skipped, r.loss, r.grad_norm))
            log_step(&log, state.step, r.skipped, r.loss, lr, r.grad_norm, r.targets, &r.sums, state.num_tokens, dt);
        if (state.step < steps) stop = preempt_poll(&dist);
        if ((args.ckpt_every > 0 && state.step % args.ckpt_every == 0 && state.step < steps) || stop) {
            state.epoch = loader.epoch; state.cursor = loader.cursor; state.rng = sample_rng.state;
            checkpoint_dist(&args, &run, &model, &state);
            log_checkpoint(&log, state.step, 0);
        }
    }
    if (stop) preempt_exit(&dist, &log, state.step, steps, stop);  // the checkpoint of state.step is saved
    log_break(&log);
    require_updates(&state);
    if (run.have_val) {
        int64_t n;
        double vl = evaluate(&model, &val_loader, args.val_batches, &n);
        log_validation(&log, state.step, vl, n);
    }
    generate_dist(&args, &run, &model, &cpu_gen, &gen, state.step, 1, &log, &sample_rng);
    state.epoch = loader.epoch; state.cursor = loader.cursor; state.rng = sample_rng.state;
    checkpoint_dist(&args, &run, &model, &state);
    log_checkpoint(&log, state.step, 1);
    if (args.lora.merged && dist.rank == 0 && model.q4.w) bnb4_base_dequantize(&model.q4, &model.cfg, &model.params);  // the dense base to merge into
    float *base = args.lora.merged && model.weight_shard ? dist_gather_to_root(&dist, model.weight_shard, model.wshard) : NULL;  // ZeRO-3: the whole base to merge into
    if (args.lora.merged && dist.rank == 0) save_merged(args.out_dir, &model.cfg, base ? base : model.params_mem, &model.lora, model.adapter, &run.extras,
                                                         hf_save_dtype_from_name(args.save_dtype));
    free(base);
    run_log_close(&log, state.step);
    if (dist.world > 1)
        printf("ranks | %.1f%% of this run's step time was spent in collectives (%.3f s of %.3f s, waiting for the slowest rank included)\n",
               100.0 * step_comm / log.step_seconds, step_comm, log.step_seconds);

    loader_free(&loader);
    if (run.have_val) loader_free(&val_loader);
    kv_free(&cpu_gen.kv);
    model_free(&model);
    run_free(&run);
    dist_finish(&dist);
    return 0;
}
#endif
