#!/usr/bin/env python3
"""Writes the PyTorch reference for the newer Llama-block families (Qwen3ForCausalLM,
SmolLM3ForCausalLM, Gemma3ForCausalLM) that test_sft.c checks the C trainer against.

The models are written here from the architecture description (float64, Debian's
python3-torch; not transformers' code), one document at a time with positions from 0,
as dev/ref_llama.py does; the data, packing and training rules are dev/ref_common.py's
(B=2 rows of T=16, A=2 micro-batches, 4 AdamW steps with clipping to 0.5, decay 0.1 on
the 2-D tensors only: every norm weight, q_norm and k_norm included, is 1-D and not
decayed).

The block, for a config.json dict cfg (hs = head_dim), on top of dev/ref_llama.py's:
  x = embed_tokens[toks] * s      s = float32(sqrt(hidden_size)) for Gemma 3, else 1
  per layer l:
    h = norm(x, input_layernorm)
    q, k, v = h @ q_proj.T, h @ k_proj.T, h @ v_proj.T (heads of hs)
    Qwen3, Gemma 3: q = norm(q, q_norm) and k = norm(k, k_norm) per head (over hs
        channels), BEFORE the rotation
    rope(q), rope(k) with the layer's frequencies, except on SmolLM3's layers with
        no_rope_layers[l] == 0 (no rotation at all)
    att = softmax(q.k * scale) over keys j of the same document with j <= i and, on a
        sliding layer (layer_types[l] == "sliding_attention"), i - j < sliding_window;
        scale = query_pre_attn_scalar^-1/2 (Gemma 3), else hs^-1/2
    o = (att @ v heads concatenated) @ o_proj.T
    Gemma 3: o = norm(o, post_attention_layernorm) (the attention output's own norm)
    x = x + o
    h = norm(x, pre_feedforward_layernorm) for Gemma 3, else norm(x, post_attention_layernorm)
    m = (act(h @ gate_proj.T) * (h @ up_proj.T)) @ down_proj.T, act = silu, Gemma 3:
        gelu_tanh(u) = 0.5 u (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3)))
    Gemma 3: m = norm(m, post_feedforward_layernorm)
    x = x + m
  logits = norm(x, model.norm) @ W.T, W = lm_head.weight or embed_tokens (tied)
  norm(x, w) = x / sqrt(mean(x^2) + rms_norm_eps) * w, and * (1 + w) for Gemma 3
  frequencies: rope_theta^(-2i/hs), divided by factor for rope_scaling {"rope_type":
  "linear"}; Gemma 3's sliding layers use rope_local_base_freq^(-2i/hs), unscaled.

Writes (OUTDIR is dev/ref for the committed copy), each a config.json, one F32
model.safetensors and NAME_expect.safetensors with the entries of dev/ref_llama.py:
  tiny_qwen3/    2 layers, hidden 32, 4 heads and 2 kv heads of head_dim 12 (not
                 hidden/heads), intermediate 48, untied lm_head, q/k norms, rope_theta
                 10000; use_sliding_window with max_window_layers 1: layer 1 attends to
                 a window of 6 positions.
  tiny_smollm3/  2 layers, hidden 32, 4 heads, 2 kv heads (head_dim 8), intermediate
                 48, tied head, rope_theta 2e6, no_rope_layers [0, 1]: layer 0 has no
                 RoPE (not the default every-4th layer, so the list is what counts).
  tiny_gemma3/   2 layers, hidden 32, 4 heads and 2 kv heads of head_dim 16, intermediate
                 48, tied head, layer_types [sliding, full] with sliding_window 5,
                 rope_local_base_freq 10000 on the sliding layer, rope_theta 1e6 with
                 linear scaling factor 8 on the full one, query_pre_attn_scalar 24 (not
                 head_dim), norm weights around 0 (they scale by 1 + w).
  Documents of the first micro-batch run up to 16 positions, so the windows of 5 and 6
  cut most of them.

Checked while writing (the script stops otherwise): each model agrees to rounding
with a second, per-position formulation (one query at a time over an explicit key
range, interleaved-pair rotation as complex numbers, gelu as u * sigmoid(2 sqrt(2/pi)
(u + 0.044715 u^3)), rsqrt norms); central finite differences of the mean loss agree
with the gradients of a few parameters of every kind the new features add; every
feature changes the first micro-batch's logits by far more than test_sft's tolerance
when it is left out or misplaced (the mutations test_sft must catch: norm after RoPE,
w instead of 1 + w, post norm after the residual add, window off by one, NoPE on the
wrong layer, no embedding scale, 1/sqrt(head_dim) instead of query_pre_attn_scalar,
no linear scaling, one rotary base for all layers); and the computation nudged by
float32-sized rounding lands within a fifth of test_sft's tolerances, float32 itself
within a half (dev/ref_llama.py's check_float32_lands_close; the seeds were chosen
for it: most random models fail it).

Usage: python3 dev/ref_families.py OUTDIR   (after dev/ref_gpt2.py, which writes the
data files; .ci/run regenerates all and compares with dev/check_ref.py).
"""
import copy
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_common import V, B, CLIP, docs, row_stream, rows_loss, write_safetensors, reference_expect  # noqa: E402
from ref_llama import ST_METADATA, write_config, check_float32_lands_close  # noqa: E402

QWEN3_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 5,
    "eos_token_id": 6,
    "head_dim": 12,
    "hidden_act": "silu",
    "hidden_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 48,
    "max_position_embeddings": 64,
    "max_window_layers": 1,
    "model_type": "qwen3",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "pad_token_id": None,  # said, not left to the config class (SmolLM3Config's is 128004)
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "sliding_window": 6,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "use_cache": True,
    "use_sliding_window": True,
    "vocab_size": V,
}

SMOLLM3_CONFIG = {
    "architectures": ["SmolLM3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 48,
    "max_position_embeddings": 64,
    "mlp_bias": False,
    "model_type": "smollm3",
    "no_rope_layers": [0, 1],
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "pad_token_id": None,  # said, not left to the config class (SmolLM3Config's is 128004)
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 2000000.0,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": V,
}

GEMMA3_CONFIG = {
    "architectures": ["Gemma3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attn_logit_softcapping": None,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "final_logit_softcapping": None,
    "head_dim": 16,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 48,
    "layer_types": ["sliding_attention", "full_attention"],
    "max_position_embeddings": 64,
    "model_type": "gemma3_text",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "pad_token_id": 0,
    "query_pre_attn_scalar": 24,
    "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000.0,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    "rope_theta": 1000000.0,
    "sliding_window": 5,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "use_cache": True,
    "vocab_size": V,
}


def family(cfg):
    return cfg["model_type"]


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


# ---- the per-layer features, from config.json --------------------------------------
def layer_sliding(cfg, l):
    """Whether layer l attends within sliding_window, by transformers' rules: Qwen3 only
    with use_sliding_window, from max_window_layers on unless layer_types lists the
    layers; SmolLM3 where layer_types says so, by default the NoPE layers with
    use_sliding_window; Gemma 3 by layer_types, by default all but every
    sliding_window_pattern-th (6th) layer. A null window means none."""
    kind, types = family(cfg), cfg.get("layer_types")
    if kind == "qwen3":
        if not cfg.get("use_sliding_window", False) or cfg.get("sliding_window", 4096) is None:
            return False
        return types[l] == "sliding_attention" if types else l >= cfg.get("max_window_layers", 28)
    if kind == "smollm3":
        if cfg.get("sliding_window") is None:
            return False
        return types[l] == "sliding_attention" if types else cfg.get("use_sliding_window", False) and not layer_rotates(cfg, l)
    if cfg.get("sliding_window", 4096) is None:
        return False
    return types[l] == "sliding_attention" if types else (l + 1) % cfg.get("sliding_window_pattern", 6) != 0


def window(cfg):
    return cfg.get("sliding_window", 4096)


def layer_rotates(cfg, l):
    """SmolLM3: no_rope_layers[l] == 1, by default all but every no_rope_layer_interval-th (4th) layer."""
    if family(cfg) != "smollm3":
        return True
    if cfg.get("no_rope_layers") is not None:
        return cfg["no_rope_layers"][l] == 1
    return (l + 1) % cfg.get("no_rope_layer_interval", 4) != 0


def layer_inv_freq(cfg, l):
    """inv_freq [hs/2] of layer l, float64."""
    hs = head_dim(cfg)
    exps = torch.arange(0, hs, 2, dtype=torch.float64) / hs
    if family(cfg) == "gemma3_text" and layer_sliding(cfg, l):
        return cfg["rope_local_base_freq"] ** (-exps)
    inv = cfg["rope_theta"] ** (-exps)
    rs = cfg.get("rope_scaling")
    if rs is not None:
        assert rs["rope_type"] == "linear"
        inv = inv / rs["factor"]
    return inv


def embed_scale(cfg):
    if family(cfg) != "gemma3_text":
        return 1.0
    return torch.tensor(math.sqrt(cfg["hidden_size"]), dtype=torch.float32).item()   # transformers casts it to the weights' float32


def attn_scale(cfg):
    return cfg["query_pre_attn_scalar"] ** -0.5 if family(cfg) == "gemma3_text" else head_dim(cfg) ** -0.5


# ---- parameters (transformers' names, nn.Linear [out, in] layout) ----------------
def init_params(cfg, seed):
    g = torch.Generator().manual_seed(seed)

    def rnd_t(*shape, std, mean=0.0):
        return (mean + std * torch.randn(*shape, generator=g)).float()

    C, I, hs = cfg["hidden_size"], cfg["intermediate_size"], head_dim(cfg)
    qd, kvd = cfg["num_attention_heads"] * hs, cfg["num_key_value_heads"] * hs
    gemma = family(cfg) == "gemma3_text"
    norm_mean = 0.0 if gemma else 1.0          # Gemma's norms scale by 1 + w
    P = {"model.embed_tokens.weight": rnd_t(cfg["vocab_size"], C, std=0.3)}
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        P[p + "input_layernorm.weight"] = rnd_t(C, std=0.1, mean=norm_mean)
        for proj, out in (("q", qd), ("k", kvd), ("v", kvd), ("o", C)):
            P[p + "self_attn.%s_proj.weight" % proj] = rnd_t(out, C if proj != "o" else qd, std=0.2)
        if family(cfg) in ("qwen3", "gemma3_text"):
            P[p + "self_attn.q_norm.weight"] = rnd_t(hs, std=0.2, mean=norm_mean)
            P[p + "self_attn.k_norm.weight"] = rnd_t(hs, std=0.2, mean=norm_mean)
        if gemma:
            P[p + "post_attention_layernorm.weight"] = rnd_t(C, std=0.1, mean=norm_mean)
            P[p + "pre_feedforward_layernorm.weight"] = rnd_t(C, std=0.1, mean=norm_mean)
            P[p + "post_feedforward_layernorm.weight"] = rnd_t(C, std=0.1, mean=norm_mean)
        else:
            P[p + "post_attention_layernorm.weight"] = rnd_t(C, std=0.1, mean=norm_mean)
        for proj, shape in (("gate", (I, C)), ("up", (I, C)), ("down", (C, I))):
            P[p + "mlp.%s_proj.weight" % proj] = rnd_t(*shape, std=0.2 if proj != "down" else 0.1)
    P["model.norm.weight"] = rnd_t(C, std=0.1, mean=norm_mean)
    if not cfg.get("tie_word_embeddings", False):
        P["lm_head.weight"] = rnd_t(cfg["vocab_size"], C, std=0.2)
    return P


# ---- the model, one document at a time (float64 for the reference) ---------------
# MUTATIONS: name -> what the forward pass does wrong, to show the reference tells each
# one apart (check_mutations_matter); the reference itself runs with none.
MUTATIONS = ("norm_after_rope", "w_not_1_plus_w", "post_norm_after_add", "window_plus_one", "nope_layer_moved",
             "no_embed_scale", "head_dim_scale", "no_linear_scaling", "one_rope_base")


def forward_doc(P, toks, cfg, mutation=None):
    """Logits [n, vocab] of one document; P maps transformers' names to tensors."""
    n, L = len(toks), cfg["num_hidden_layers"]
    NH, KVH, hs, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg), cfg["rms_norm_eps"]
    gemma = family(cfg) == "gemma3_text"
    plus_one = gemma and mutation != "w_not_1_plus_w"

    def norm(x, w):
        return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * ((1 + w) if plus_one else w)

    def rope(x, inv):
        angles = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
        angles = torch.cat((angles, angles), dim=1)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def lin(name, h):
        return h @ P[name + ".weight"].T

    x = P["model.embed_tokens.weight"][toks] * (1.0 if mutation == "no_embed_scale" else embed_scale(cfg))
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    kv_of = torch.arange(NH) // (NH // KVH)
    scale = hs ** -0.5 if mutation == "head_dim_scale" else attn_scale(cfg)
    for l in range(L):
        p = "model.layers.%d." % l
        h = norm(x, P[p + "input_layernorm.weight"])
        q = lin(p + "self_attn.q_proj", h).view(n, NH, hs).transpose(0, 1)
        k = lin(p + "self_attn.k_proj", h).view(n, KVH, hs).transpose(0, 1)
        v = lin(p + "self_attn.v_proj", h).view(n, KVH, hs).transpose(0, 1)
        rotates = layer_rotates(cfg, l)
        if mutation == "nope_layer_moved" and family(cfg) == "smollm3":
            rotates = l % 4 != 3                 # the default rule instead of the config's list
        inv = layer_inv_freq(cfg, l)
        if mutation == "no_linear_scaling" and gemma and not layer_sliding(cfg, l):
            inv = inv * cfg["rope_scaling"]["factor"]
        if mutation == "one_rope_base" and gemma:
            inv = layer_inv_freq(cfg, L - 1)     # the full layers' frequencies everywhere
        qk_norm = family(cfg) in ("qwen3", "gemma3_text")
        if qk_norm and mutation != "norm_after_rope":
            q, k = norm(q, P[p + "self_attn.q_norm.weight"]), norm(k, P[p + "self_attn.k_norm.weight"])
        if rotates:
            q, k = rope(q, inv), rope(k, inv)
        if qk_norm and mutation == "norm_after_rope":
            q, k = norm(q, P[p + "self_attn.q_norm.weight"]), norm(k, P[p + "self_attn.k_norm.weight"])
        allowed = j <= i
        if layer_sliding(cfg, l):
            w = window(cfg) + (1 if mutation == "window_plus_one" else 0)
            allowed = allowed & (i - j < w)
        k, v = k[kv_of], v[kv_of]
        att = ((q @ k.transpose(1, 2)) * scale).masked_fill(~allowed, float("-inf")).softmax(dim=-1)
        o = lin(p + "self_attn.o_proj", (att @ v).transpose(0, 1).reshape(n, NH * hs))
        if gemma and mutation == "post_norm_after_add":
            x = norm(x + o, P[p + "post_attention_layernorm.weight"])
        elif gemma:
            x = x + norm(o, P[p + "post_attention_layernorm.weight"])
        else:
            x = x + o
        h = norm(x, P[p + ("pre_feedforward_layernorm.weight" if gemma else "post_attention_layernorm.weight")])
        gate, up = lin(p + "mlp.gate_proj", h), lin(p + "mlp.up_proj", h)
        act = torch.nn.functional.gelu(gate, approximate="tanh") if gemma else torch.nn.functional.silu(gate)
        m = lin(p + "mlp.down_proj", act * up)
        x = x + (norm(m, P[p + "post_feedforward_layernorm.weight"]) if gemma else m)
    x = norm(x, P["model.norm.weight"])
    head = P["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else P["lm_head.weight"]
    return x @ head.T


def forward_doc_per_position(P, toks, cfg):
    """forward_doc written a second way: every query position on its own over an
    explicit range of keys (the window's first key max(0, i - window + 1)), q/k rows
    permuted to interleaved pairs rotated as complex numbers, norms as rsqrt, gelu as
    u * sigmoid(2 sqrt(2/pi) (u + 0.044715 u^3)), F.linear, kv heads repeated."""
    F = torch.nn.functional
    n, L = len(toks), cfg["num_hidden_layers"]
    NH, KVH, hs, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg), cfg["rms_norm_eps"]
    gemma = family(cfg) == "gemma3_text"

    def norm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (w + 1 if gemma else w)

    def to_pairs(y, nh):       # channel (head, half, i) -> (head, i, half): rotate_half's layout as pairs
        return y.view(n, nh, 2, hs // 2).transpose(2, 3).reshape(n, nh, hs)

    def from_pairs(y, nh):
        return y.view(n, nh, hs // 2, 2).transpose(2, 3).reshape(n, nh, hs)

    def rotate(y, nh, inv):
        turn = torch.polar(torch.ones(n, hs // 2, dtype=torch.float64), torch.outer(torch.arange(n, dtype=torch.float64), inv))
        z = torch.view_as_complex(to_pairs(y, nh).view(n, nh, hs // 2, 2).contiguous()) * turn[:, None, :]
        return from_pairs(torch.view_as_real(z).reshape(n, nh, hs), nh)

    x = F.embedding(torch.tensor(toks), P["model.embed_tokens.weight"]) * embed_scale(cfg)
    for l in range(L):
        p = "model.layers.%d." % l
        h = norm(x, P[p + "input_layernorm.weight"])
        q = F.linear(h, P[p + "self_attn.q_proj.weight"]).view(n, NH, hs)
        k = F.linear(h, P[p + "self_attn.k_proj.weight"]).view(n, KVH, hs)
        v = F.linear(h, P[p + "self_attn.v_proj.weight"]).view(n, KVH, hs)
        if p + "self_attn.q_norm.weight" in P:
            q, k = norm(q, P[p + "self_attn.q_norm.weight"]), norm(k, P[p + "self_attn.k_norm.weight"])
        if layer_rotates(cfg, l):
            q, k = rotate(q, NH, layer_inv_freq(cfg, l)), rotate(k, KVH, layer_inv_freq(cfg, l))
        k, v = k.repeat_interleave(NH // KVH, dim=1), v.repeat_interleave(NH // KVH, dim=1)
        rows = []
        for t in range(n):
            first = max(0, t - window(cfg) + 1) if layer_sliding(cfg, l) else 0
            scores = torch.einsum("hd,jhd->hj", q[t], k[first:t + 1]) * attn_scale(cfg)
            rows.append(torch.einsum("hj,jhd->hd", torch.softmax(scores, dim=-1), v[first:t + 1]))
        o = F.linear(torch.stack(rows).reshape(n, NH * hs), P[p + "self_attn.o_proj.weight"])
        x = x + (norm(o, P[p + "post_attention_layernorm.weight"]) if gemma else o)
        h = norm(x, P[p + ("pre_feedforward_layernorm.weight" if gemma else "post_attention_layernorm.weight")])
        gate, up = F.linear(h, P[p + "mlp.gate_proj.weight"]), F.linear(h, P[p + "mlp.up_proj.weight"])
        if gemma:
            act = gate * torch.sigmoid(2 * math.sqrt(2 / math.pi) * (gate + 0.044715 * gate ** 3))
        else:
            act = gate * torch.sigmoid(gate)
        m = F.linear(act * up, P[p + "mlp.down_proj.weight"])
        x = x + (norm(m, P[p + "post_feedforward_layernorm.weight"]) if gemma else m)
    return F.linear(norm(x, P["model.norm.weight"]), P.get("lm_head.weight", P["model.embed_tokens.weight"]))


# ---- checks of the models themselves ----------------------------------------------
def first_batch_logits(P, cfg, mutation=None):
    stream = row_stream()
    rows = [next(stream) for _ in range(B)]
    with torch.no_grad():
        return rows_loss(lambda P, t: forward_doc(P, t, cfg, mutation), P, rows)[2]


def check_two_formulations_agree(params, cfg, name):
    P = {k: v.double() for k, v in params.items()}
    with torch.no_grad():
        worst = max(((forward_doc(P, toks, cfg) - forward_doc_per_position(P, toks, cfg)).abs().max() /
                     forward_doc(P, toks, cfg).abs().max()).item() for toks, _ in docs)
    assert worst < 1e-12, "%s: the two formulations differ by %.3g" % (name, worst)
    print("%s: the per-position formulation agrees to %.3g on every training document" % (name, worst))


def check_mutations_matter(params, cfg, name, mutations):
    """Each mutation must move the first micro-batch's logits far beyond test_sft's
    2e-5 (relative to the largest logit), or the C code could get it wrong unnoticed."""
    P = {k: v.double() for k, v in params.items()}
    ref = first_batch_logits(P, cfg)
    moved = {}
    for mut in mutations:
        moved[mut] = ((first_batch_logits(P, cfg, mut) - ref).abs().max() / ref.abs().max()).item()
        assert moved[mut] > 1e-3, "%s: mutation %s changes the logits by only %.3g" % (name, mut, moved[mut])
    print("%s: mutations change the logits by %s" % (name, ", ".join("%s %.3g" % kv for kv in moved.items())))


def check_finite_differences(params, cfg, name, entries):
    """Central differences of the first micro-batch's mean loss against autograd for a
    few parameter entries (name, flat index)."""
    P = {k: v.double().requires_grad_(True) for k, v in params.items()}
    stream = row_stream()
    rows = [next(stream) for _ in range(B)]

    def mean_loss(P):
        total, count, _ = rows_loss(lambda P, t: forward_doc(P, t, cfg), P, rows)
        return total / count

    mean_loss(P).backward()
    worst, h = 0.0, 1e-6
    for k, idx in entries:
        with torch.no_grad():
            Q = {n: v.detach().clone() for n, v in P.items()}
            Q[k].view(-1)[idx] += h
            up = mean_loss(Q).item()
            Q[k].view(-1)[idx] -= 2 * h
            down = mean_loss(Q).item()
        fd, ad = (up - down) / (2 * h), P[k].grad.view(-1)[idx].item()
        err = abs(fd - ad) / max(abs(ad), 1e-3)
        worst = max(worst, err)
        assert err < 1e-5, "%s: d loss / d %s[%d]: finite differences %.9g, autograd %.9g" % (name, k, idx, fd, ad)
    print("%s: finite differences agree with autograd on %d entries (worst %.3g)" % (name, len(entries), worst))


def write_reference(out, name, cfg, params, mutations, fd_entries):
    d = os.path.join(out, name)
    write_config(d, cfg)
    write_safetensors(os.path.join(d, "model.safetensors"), params, metadata=ST_METADATA)
    check_two_formulations_agree(params, cfg, name)
    check_mutations_matter(params, cfg, name, mutations)
    check_finite_differences(params, cfg, name, fd_entries)
    forward = lambda P, t: forward_doc(P, t, cfg)  # noqa: E731
    expect = reference_expect(forward, params)
    assert min(expect["train_grad_norm"].tolist()) > CLIP, "clipping is not active at every step"
    check_float32_lands_close(expect, forward, params, name)
    write_safetensors(os.path.join(out, name + "_expect.safetensors"), expect)
    print("%s: first micro-batch loss %.6f over %d targets; grad norms %s; final loss %.6f"
          % (name, expect["loss"].item(), expect["targets"].item(),
             ["%.3f" % x for x in expect["train_grad_norm"].tolist()], expect["train_loss"][-1]))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "dev/ref"
    L = "model.layers.%d."
    write_reference(out, "tiny_qwen3", QWEN3_CONFIG, init_params(QWEN3_CONFIG, 5109),
                    ["norm_after_rope", "window_plus_one"],
                    [((L % 0) + "self_attn.q_norm.weight", 3), ((L % 1) + "self_attn.k_norm.weight", 7), ("lm_head.weight", 40)])
    write_reference(out, "tiny_smollm3", SMOLLM3_CONFIG, init_params(SMOLLM3_CONFIG, 5125),
                    ["nope_layer_moved"],
                    [((L % 0) + "self_attn.q_proj.weight", 11), ((L % 0) + "self_attn.k_proj.weight", 50), ("model.embed_tokens.weight", 100)])
    write_reference(out, "tiny_gemma3", GEMMA3_CONFIG, init_params(GEMMA3_CONFIG, 5342),
                    ["norm_after_rope", "w_not_1_plus_w", "post_norm_after_add", "window_plus_one", "no_embed_scale",
                     "head_dim_scale", "no_linear_scaling", "one_rope_base"],
                    [((L % 0) + "post_attention_layernorm.weight", 5), ((L % 1) + "post_feedforward_layernorm.weight", 9),
                     ((L % 1) + "pre_feedforward_layernorm.weight", 2), ((L % 0) + "self_attn.q_norm.weight", 4),
                     ((L % 1) + "self_attn.k_norm.weight", 1), ("model.embed_tokens.weight", 77), ("model.norm.weight", 3)])


if __name__ == "__main__":
    main()
