#!/usr/bin/env python3
"""Writes the PyTorch reference that test_sft.c checks the C trainer against.

Everything here is computed independently of the C code: the data file is written
with Python's struct, packing and targets follow the spec in docs/training.md, and the
model runs each document on its own (positions from 0, plain causal attention) in
float64, so packing, block-diagonal attention and masks are checked, not assumed.
The data, packing and training rules are shared with dev/ref_llama.py in
dev/ref_common.py; this file holds the GPT-2 model.

Usage: python3 dev/ref_gpt2.py OUTDIR    (the committed copy lives in dev/ref/)
Writes OUTDIR/tiny/{config.json, model.safetensors} (and F16/BF16 copies in tiny_f16/,
tiny_bf16/), OUTDIR/tiny_train.bin, OUTDIR/tiny_val.bin and
OUTDIR/tiny_expect.safetensors.
Needs Debian's python3-torch (and python3-numpy).
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_common import V, docs, val_docs, write_data, write_safetensors, reference_expect  # noqa: E402

L, NH, C, MAXT, EPS = 2, 2, 16, 24, 1e-5


# ---- parameters (Hugging Face names and Conv1D [in, out] layout) --------------
g = torch.Generator().manual_seed(1234)


def rnd_t(*shape, std=0.1, mean=0.0):
    return (mean + std * torch.randn(*shape, generator=g)).float()


params = {"wte.weight": rnd_t(V, C), "wpe.weight": rnd_t(MAXT, C)}
for l in range(L):
    p = "h.%d." % l
    params[p + "ln_1.weight"] = rnd_t(C, mean=1.0)
    params[p + "ln_1.bias"] = rnd_t(C)
    params[p + "attn.c_attn.weight"] = rnd_t(C, 3 * C, std=0.2)
    params[p + "attn.c_attn.bias"] = rnd_t(3 * C)
    params[p + "attn.c_proj.weight"] = rnd_t(C, C, std=0.2)
    params[p + "attn.c_proj.bias"] = rnd_t(C)
    params[p + "ln_2.weight"] = rnd_t(C, mean=1.0)
    params[p + "ln_2.bias"] = rnd_t(C)
    params[p + "mlp.c_fc.weight"] = rnd_t(C, 4 * C, std=0.2)
    params[p + "mlp.c_fc.bias"] = rnd_t(4 * C)
    params[p + "mlp.c_proj.weight"] = rnd_t(4 * C, C, std=0.1)
    params[p + "mlp.c_proj.bias"] = rnd_t(C)
params["ln_f.weight"] = rnd_t(C, mean=1.0)
params["ln_f.bias"] = rnd_t(C)
NAMES = list(params.keys())


# ---- the model, one document at a time, float64 -------------------------------
def forward_doc(P, toks, L=L, NH=NH, C=C, EPS=EPS):
    """Logits of one document; P maps Hugging Face GPT-2 names (no prefix) to tensors."""
    n = len(toks)
    x = P["wte.weight"][toks] + P["wpe.weight"][torch.arange(n)]
    hs = C // NH
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    for l in range(L):
        p = "h.%d." % l
        h = torch.nn.functional.layer_norm(x, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], EPS)
        qkv = h @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=1)
        q, k, v = (t.view(n, NH, hs).transpose(0, 1) for t in (q, k, v))
        att = (q @ k.transpose(1, 2)) / math.sqrt(hs)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(0, 1).reshape(n, C)
        x = x + y @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"]
        h = torch.nn.functional.layer_norm(x, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], EPS)
        h = torch.nn.functional.gelu(h @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + h @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"]
    x = torch.nn.functional.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"], EPS)
    return x @ P["wte.weight"].T


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "dev/ref"
    os.makedirs(os.path.join(out, "tiny"), exist_ok=True)
    write_data(os.path.join(out, "tiny_train.bin"), docs)
    write_data(os.path.join(out, "tiny_val.bin"), val_docs)
    cfg = {"model_type": "gpt2", "activation_function": "gelu_new", "n_embd": C, "n_head": NH, "n_layer": L,
           "n_positions": MAXT, "vocab_size": V, "layer_norm_epsilon": EPS}
    with open(os.path.join(out, "tiny", "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(out, "tiny", "model.safetensors"), params, prefix="transformer.")
    # import variants: F16 with hub-style names (no prefix), the causal-mask buffers
    # and a tied lm_head.weight; BF16 with "transformer." names
    os.makedirs(os.path.join(out, "tiny_f16"), exist_ok=True)
    os.makedirs(os.path.join(out, "tiny_bf16"), exist_ok=True)
    for d in ("tiny_f16", "tiny_bf16"):
        with open(os.path.join(out, d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
    f16 = {k: v.half() for k, v in params.items()}
    for l in range(L):
        f16["h.%d.attn.bias" % l] = torch.tril(torch.ones(1, 1, MAXT, MAXT, dtype=torch.bool))
        f16["h.%d.attn.masked_bias" % l] = torch.tensor(-1e4)
    write_safetensors(os.path.join(out, "tiny_f16", "model.safetensors"), f16)
    bf16 = {"transformer." + k: v.bfloat16() for k, v in params.items()}
    bf16["lm_head.weight"] = bf16["transformer.wte.weight"].clone()
    write_safetensors(os.path.join(out, "tiny_bf16", "model.safetensors"), bf16)

    expect = {}
    for k in NAMES:
        expect["f16." + k] = params[k].half().float()
        expect["bf16." + k] = params[k].bfloat16().float()
    expect.update(reference_expect(forward_doc, params))
    write_safetensors(os.path.join(out, "tiny_expect.safetensors"), expect)
    print("wrote reference to %s: first micro-batch loss %.6f over %d targets, %d steps final loss %.6f"
          % (out, expect["loss"].item(), expect["targets"].item(), len(expect["train_loss"]), expect["train_loss"][-1]))


if __name__ == "__main__":
    main()
