"""What the PyTorch references share (dev/ref_gpt2.py, dev/ref_llama.py): the tiny
training and validation documents and their data files, packing, the safetensors
writer, and the training rules (loss over masked targets, gradient accumulation,
clipping, AdamW with decay on matrices, warmup + cosine LR, validation), each written
from the spec in docs/training.md and independent of the C code.

A model enters as forward(P, toks) -> [len(toks), V] float64 logits of one document
(positions from 0, plain causal attention), so packing, block-diagonal attention,
position restarts and masks are checked by test_sft, not assumed.
"""
import json
import math
import random
import struct

import torch

V = 61                                   # the data's vocabulary (token ids < V)
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
# per-target mean by more than 0.5% (checked in reference_expect; test_sft allows 1e-5).
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


# ---- packing (docs/training.md: next-fit, rows never mix epochs, cut at T) -------------
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


# ---- safetensors ----------------------------------------------------------------
DTYPE_NAMES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.bool: "BOOL"}


def write_safetensors(path, tensors, prefix="", metadata=None):
    """safetensors by hand: 8-byte header length, JSON header (with metadata, when
    given, as "__metadata__" first, as the safetensors library writes it), raw
    little-endian data. float64 tensors are stored as F32."""
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
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


# ---- loss over packed rows, LR schedule ---------------------------------------
def rows_loss(forward, P, rows, docs=docs):
    """Summed cross-entropy over the targets of packed rows (documents of `docs`),
    the target count, and the logits at every filled row position (zeros at padding)."""
    total, count = 0.0, 0
    logits = torch.zeros(len(rows), T, V, dtype=torch.float64)
    for r, row in enumerate(rows):
        at = 0
        for d in row:
            toks, mask = docs[d]
            n = min(len(toks), T)
            lg = forward(P, toks[:n])
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


# ---- the expectations: one micro-batch, STEPS optimizer steps, validation --------
def reference_expect(forward, params, dtype=torch.float64):
    """The expect entries for a model given as forward(P, toks) and its float32
    parameters (name -> tensor; the names are used as they are, after "grad." and
    "final."), computed in dtype (float64 for the reference; float32 to see how far a
    float32 implementation may land from it). Weight decay applies to the 2-D tensors
    (matrices and embeddings, an untied head included), not to the 1-D ones (norm
    weights, biases)."""
    names = list(params.keys())
    expect = {}
    P = {k: v.to(dtype, copy=True).requires_grad_(True) for k, v in params.items()}
    stream = row_stream()
    # 1. the first micro-batch: logits, loss, gradients of the mean loss
    rows = [next(stream) for _ in range(B)]
    total, count, logits = rows_loss(forward, P, rows)
    (total / count).backward()
    expect["logits"] = logits
    filled = torch.zeros(B, T)
    for r, row in enumerate(rows):
        filled[r, :sum(min(len(docs[d][0]), T) for d in row)] = 1
    expect["filled"] = filled
    expect["loss"] = torch.tensor([total.item() / count])
    expect["targets"] = torch.tensor([float(count)])
    for k in names:
        expect["grad." + k] = P[k].grad.clone()

    # 2. STEPS optimizer steps of A micro-batches: sum of losses / targets of the step,
    #    clip_grad_norm_, AdamW with decay on 2-D tensors only, warmup + cosine LR.
    P = {k: v.to(dtype, copy=True).requires_grad_(True) for k, v in params.items()}
    decay = [P[k] for k in names if P[k].dim() == 2]
    no_decay = [P[k] for k in names if P[k].dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=ADAM_EPS)
    stream = row_stream()
    losses, norms, lrs, counts = [], [], [], []
    for s in range(STEPS):
        total, count = 0.0, 0
        for _ in range(A):
            t, c, _ = rows_loss(forward, P, [next(stream) for _ in range(B)])
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
    for k in names:
        expect["final." + k] = P[k].detach().clone()
    # 3. validation with the initial parameters: the val file in file order, B rows per
    #    micro-batch, no wrap (the last micro-batch is padded); loss = sum over the
    #    targets of all micro-batches / their number, over the whole file and over the
    #    first two micro-batches (-m 2).
    vrows = rows_of_epoch(val_docs)
    batches = []
    with torch.no_grad():
        P0 = {k: v.to(dtype, copy=True) for k, v in params.items()}
        for i in range(0, len(vrows), B):
            t, c, _ = rows_loss(forward, P0, vrows[i:i + B], val_docs)
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
    if dtype == torch.float64:
        print("validation: %d micro-batches with %s targets" % (len(batches), [c for _, c in batches]))
    # settings, in this order: B T A steps lr warmup final_frac wd clip
    expect["settings"] = torch.tensor([B, T, A, STEPS, LR, WARMUP, FINAL_FRAC, WD, CLIP], dtype=torch.float64)
    return expect
