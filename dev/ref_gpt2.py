#!/usr/bin/env python3
"""Writes the PyTorch reference that test_sft.c checks the C trainer against.

Everything here is computed independently of the C code: the data file is written
with Python's struct, packing and targets follow the spec in the README, and the
model runs each document on its own (positions from 0, plain causal attention) in
float64, so packing, block-diagonal attention and masks are checked, not assumed.

Usage: python3 dev/ref_gpt2.py OUTDIR    (the committed copy lives in dev/ref/)
Writes OUTDIR/tiny/{config.json, model.safetensors} (and F16/BF16 copies in tiny_f16/,
tiny_bf16/), OUTDIR/tiny_train.bin, OUTDIR/tiny_val.bin and
OUTDIR/tiny_expect.safetensors.
Needs Debian's python3-torch (and python3-numpy).
"""
import json
import math
import os
import random
import struct
import sys

import torch

L, NH, C, V, MAXT, EPS = 2, 2, 16, 61, 24, 1e-5
B, T, A, STEPS = 2, 16, 2, 4
LR, WARMUP, FINAL_FRAC, WD, CLIP = 1e-2, 1, 0.1, 0.1, 0.5
BETAS, ADAM_EPS = (0.9, 0.95), 1e-8

# ---- data: documents with masks ---------------------------------------------
rnd = random.Random(20261130)
docs = []
for d in range(14):
    n = rnd.randint(2, 12)
    if d == 3:
        n = 21                     # longer than T: cut to its first T tokens
    if d == 7:
        n = 1                      # a single token: never a target
    toks = [rnd.randrange(V) for _ in range(n)]
    kind = d % 4
    if kind == 0:
        mask = [1] * n             # language modelling: everything (the first token still is no target)
    elif kind == 1:
        cut = rnd.randint(1, n)    # prompt/completion: only the tail
        mask = [0] * cut + [1] * (n - cut)
    elif kind == 2:
        mask = [rnd.randint(0, 1) for _ in range(n)]
    else:
        mask = [0] * n             # nothing trained
    docs.append((toks, mask))

# Validation documents (own generator, so the training data above stays as it was):
# (length, trained tail) per document, chosen so that the micro-batches hold very
# different numbers of targets; a mean of per-batch means then differs from the
# per-target mean by more than 0.5% (checked in main; test_sft allows 1e-5).
vrnd = random.Random(20261202)
val_docs = []
for n, tail in [(16, 15), (8, 7), (8, 7), (9, 1), (7, 0), (12, 1), (10, 9), (6, 5), (13, 4), (11, 10)]:
    val_docs.append(([vrnd.randrange(V) for _ in range(n)], [0] * (n - tail) + [1] * tail))


def write_data(path, docs):
    offsets = [0]
    for toks, _ in docs:
        offsets.append(offsets[-1] + len(toks))
    header = [20261130, 1, 2, V, len(docs), offsets[-1]] + [0] * 122
    with open(path, "wb") as f:
        f.write(struct.pack("<128q", *header))
        f.write(struct.pack("<%dq" % len(offsets), *offsets))
        for toks, _ in docs:
            f.write(struct.pack("<%dH" % len(toks), *toks))
        for _, mask in docs:
            f.write(bytes(mask))


# ---- packing (README: next-fit, rows never mix epochs, cut at T) -------------
def rows_of_epoch(docs):
    rows, cur, used = [], [], 0
    for i, (toks, _) in enumerate(docs):
        n = min(len(toks), T)
        if cur and n > T - used:
            rows.append(cur)
            cur, used = [], 0
        cur.append(i)
        used += n
        if used == T:
            rows.append(cur)
            cur, used = [], 0
    if cur:
        rows.append(cur)
    return rows


def row_stream():
    while True:                    # epochs repeat; shuffling is off (-S 0)
        for r in rows_of_epoch(docs):
            yield r


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


DTYPE_NAMES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.bool: "BOOL"}


def write_safetensors(path, tensors, prefix=""):
    """safetensors by hand: 8-byte header length, JSON header, raw little-endian data."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        if t.dtype == torch.float64:
            t = t.float()
        if t.dtype in (torch.float16, torch.bfloat16):
            data = t.view(torch.int16).numpy().tobytes()
        else:
            data = t.numpy().tobytes()
        header[prefix + name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


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


def rows_loss(P, rows, docs=docs):
    """Summed cross-entropy over the targets of packed rows (documents of `docs`),
    the target count, and the logits at every filled row position (zeros at padding)."""
    total, count = 0.0, 0
    logits = torch.zeros(len(rows), T, V, dtype=torch.float64)
    for r, row in enumerate(rows):
        at = 0
        for d in row:
            toks, mask = docs[d]
            n = min(len(toks), T)
            lg = forward_doc(P, toks[:n])
            logits[r, at:at + n] = lg.detach()
            for j in range(1, n):          # token j is predicted from tokens < j
                if mask[j]:
                    total = total + torch.nn.functional.cross_entropy(lg[j - 1:j], torch.tensor([toks[j]]), reduction="sum")
                    count += 1
            at += n
    return total, count, logits


def lr_at(s):
    if s < WARMUP:
        return LR * (s + 1) / WARMUP
    lo, span = LR * FINAL_FRAC, STEPS - 1 - WARMUP
    return lo + 0.5 * (LR - lo) * (1 + math.cos(math.pi * (s - WARMUP) / span))


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
    P = {k: v.double().requires_grad_(True) for k, v in params.items()}
    stream = row_stream()
    # 1. the first micro-batch: logits, loss, gradients of the mean loss
    rows = [next(stream) for _ in range(B)]
    total, count, logits = rows_loss(P, rows)
    (total / count).backward()
    expect["logits"] = logits
    filled = torch.zeros(B, T)
    for r, row in enumerate(rows):
        filled[r, :sum(min(len(docs[d][0]), T) for d in row)] = 1
    expect["filled"] = filled
    expect["loss"] = torch.tensor([total.item() / count])
    expect["targets"] = torch.tensor([float(count)])
    for k in NAMES:
        expect["grad." + k] = P[k].grad.clone()

    # 2. STEPS optimizer steps of A micro-batches: sum of losses / targets of the step,
    #    clip_grad_norm_, AdamW with decay on 2-D tensors only, warmup + cosine LR.
    P = {k: v.double().requires_grad_(True) for k, v in params.items()}
    decay = [P[k] for k in NAMES if P[k].dim() == 2]
    no_decay = [P[k] for k in NAMES if P[k].dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=ADAM_EPS)
    stream = row_stream()
    losses, norms, lrs, counts = [], [], [], []
    for s in range(STEPS):
        total, count = 0.0, 0
        for _ in range(A):
            t, c, _ = rows_loss(P, [next(stream) for _ in range(B)])
            total, count = total + t, count + c
        opt.zero_grad()
        (total / count).backward()
        norm = torch.nn.utils.clip_grad_norm_(list(P.values()), CLIP)
        for grp in opt.param_groups:
            grp["lr"] = lr_at(s)
        opt.step()
        losses.append(total.item() / count)
        norms.append(norm.item())
        lrs.append(lr_at(s))
        counts.append(count)
    expect["train_loss"] = torch.tensor(losses, dtype=torch.float64)
    expect["train_grad_norm"] = torch.tensor(norms, dtype=torch.float64)
    expect["train_lr"] = torch.tensor(lrs, dtype=torch.float64)
    expect["train_targets"] = torch.tensor(counts, dtype=torch.float64)
    for k in NAMES:
        expect["final." + k] = P[k].detach().clone()
    # 3. validation with the initial parameters: the val file in file order, B rows per
    #    micro-batch, no wrap (the last micro-batch is padded); loss = sum over the
    #    targets of all micro-batches / their number, over the whole file and over the
    #    first two micro-batches (-m 2).
    vrows = rows_of_epoch(val_docs)
    batches = []
    with torch.no_grad():
        P0 = {k: v.double() for k, v in params.items()}
        for i in range(0, len(vrows), B):
            t, c, _ = rows_loss(P0, vrows[i:i + B], val_docs)
            batches.append((float(t), c))
    assert len(batches) >= 3 and all(c > 0 for _, c in batches)
    val_loss, val_targets = [], []
    for k in (len(batches), 2):
        tot, cnt = sum(t for t, _ in batches[:k]), sum(c for _, c in batches[:k])
        per_batch = sum(t / c for t, c in batches[:k]) / k
        assert abs(per_batch - tot / cnt) > 5e-3 * (tot / cnt), "validation batches too even to tell the normalizations apart"
        val_loss.append(tot / cnt)
        val_targets.append(cnt)
    expect["val_loss"] = torch.tensor(val_loss, dtype=torch.float64)        # [whole file, first 2 micro-batches]
    expect["val_targets"] = torch.tensor(val_targets, dtype=torch.float64)
    print("validation: %d micro-batches with %s targets" % (len(batches), [c for _, c in batches]))
    # settings, in this order: B T A steps lr warmup final_frac wd clip
    expect["settings"] = torch.tensor([B, T, A, STEPS, LR, WARMUP, FINAL_FRAC, WD, CLIP], dtype=torch.float64)
    write_safetensors(os.path.join(out, "tiny_expect.safetensors"), expect)
    print("wrote reference to %s: first micro-batch loss %.6f over %d targets, %d steps final loss %.6f"
          % (out, expect["loss"].item(), expect["targets"].item(), STEPS, losses[-1]))


if __name__ == "__main__":
    main()
