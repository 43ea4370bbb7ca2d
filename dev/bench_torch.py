#!/usr/bin/env python3
"""PyTorch side of the benchmarks (dev/bench_cpu.sh, dev/gpu_check.sh).

  bench_torch.py data FILE VOCAB DOCS DOC_LEN        write a data file of random documents (all tokens trained)
  bench_torch.py cpu L NH C VOCAB B T STEPS          time PyTorch CPU training steps of the same GPT-2 (AdamW,
                                                     clipping, all positions trained); prints ms per step
  bench_torch.py gpu L NH C VOCAB B T STEPS          the same on a CUDA GPU as a user would run it: bf16
                                                     autocast, torch.compile, fused AdamW, flash attention
                                                     (scaled_dot_product_attention); prints ms per step
  bench_torch.py cpu-llama L NH KVH C FF VOCAB B T STEPS [untied]
  bench_torch.py gpu-llama L NH KVH C FF VOCAB B T STEPS [untied]
                                                     the same for a Llama-architecture model (RMSNorm, rotary
                                                     positions with theta 10000, grouped-query attention with
                                                     KVH key/value heads of size C/NH, SwiGLU MLP of width FF,
                                                     no biases, tied head unless "untied"), as the trainer's
                                                     lN descriptors build it; written from the architecture
                                                     (llama_api.md's conventions), not from transformers
  bench_torch.py cpu-qwen3 L NH KVH C FF HS VOCAB B T STEPS
                                                     the same with Qwen3's differences: head size HS (not
                                                     C/NH) and every q and k head RMS-normed before RoPE
                                                     (as the trainer's lN...a<HS>q descriptors build it)
  cpu-llama ... STEPS [untied] lora=R, cpu-qwen3 ... STEPS lora=R
                                                     LoRA of rank R on q, k, v, o, gate, up and down of every
                                                     layer, as the trainer's -A R: y = x W^T + (alpha/R) (x A^T) B^T
                                                     with alpha 8 (LORA_DEFAULT_ALPHA, model/lora.h), A uniform
                                                     in +-1/sqrt(in), B = 0; the base, embeddings and norms frozen
                                                     (requires_grad False), AdamW and clipping over A and B only
On the CPU: Debian's python3-torch 1.13 (with libopenblas0-pthread) or PyTorch 2.x from PyPI
(the referee environment); dev/bench_cpu.sh runs both.
"""
import math
import os
import random
import struct
import sys
import time


def write_data(path, vocab, docs, doc_len):
    rnd = random.Random(1)
    n = docs * doc_len
    header = [20261130, 1, 2 if vocab <= 65536 else 4, vocab, docs, n] + [0] * 122
    with open(path, "wb") as f:
        f.write(struct.pack("<128q", *header))
        f.write(struct.pack("<%dq" % (docs + 1), *[i * doc_len for i in range(docs + 1)]))
        fmt = "<%dH" if vocab <= 65536 else "<%dI"
        f.write(struct.pack(fmt % n, *[rnd.randrange(vocab) for _ in range(n)]))
        f.write(bytes([1]) * n)


def bench_torch(device, L, NH, C, V, B, T, steps):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    gpu = device == "gpu"
    dev = "cuda" if gpu else "cpu"
    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x, mask):
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
            if gpu:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # torch 1.13 (Debian) has no scaled_dot_product_attention
                att = (q @ k.transpose(-2, -1)) / math.sqrt(C // NH)
                att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
                y = att @ v
            y = y.transpose(1, 2).reshape(B, T, C)
            x = x + self.proj(y)
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.lnf = nn.LayerNorm(C)

        def forward(self, idx, targets):
            mask = ~torch.tril(torch.ones(T, T, dtype=torch.bool, device=idx.device))
            x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
            for b in self.blocks:
                x = b(x, mask)
            logits = self.lnf(x) @ self.wte.weight.T
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    model = GPT().to(dev)
    time_steps(model, gpu, dev, V, B, T, steps)


LORA_ALPHA = 8.0  # the trainer's default alpha (LORA_DEFAULT_ALPHA in model/lora.h)


def lora_linear(base, outs, R):
    """Freezes the nn.Linear `base`, whose output is the concatenation of modules of sizes
    `outs` (q, k, v fused; gate, up fused), and adds each module its own rank-R adapter:
    y_m = x W_m^T + (alpha/R) (x A_m^T) B_m^T, A_m [R, in], B_m [out_m, R]."""
    import torch
    import torch.nn as nn
    base.weight.requires_grad_(False)
    fan_in = base.in_features
    A = nn.ParameterList([nn.Parameter(torch.empty(R, fan_in).uniform_(-1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in))) for _ in outs])
    Bm = nn.ParameterList([nn.Parameter(torch.zeros(o, R)) for o in outs])
    scale = LORA_ALPHA / R

    class LoraLinear(nn.Module):
        def __init__(self):
            super().__init__()
            self.base, self.A, self.B = base, A, Bm

        def forward(self, x):  # x (B, T, in) -> (B, T, sum(outs))
            delta = torch.cat([(x @ a.T) @ b.T for a, b in zip(self.A, self.B)], -1)
            return self.base(x) + scale * delta

    return LoraLinear()


def bench_llama(device, L, NH, KVH, C, FF, V, B, T, steps, untied=False, HS=None, qk_norm=False, lora_rank=0):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    gpu = device == "gpu"
    dev = "cuda" if gpu else "cpu"
    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)
    HS = HS or C // NH
    eps = 1e-5

    def rmsnorm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    # rotary angles of positions 0..T-1 (one document per row), rotate-half convention
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, HS, 2, dtype=torch.float64) / HS))
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq.float()[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1).to(dev), torch.cat([ang.sin()] * 2, -1).to(dev)

    def rope(x):  # x (B, heads, T, HS)
        x1, x2 = x[..., : HS // 2], x[..., HS // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = nn.Parameter(torch.ones(C)), nn.Parameter(torch.ones(C))
            self.qn, self.kn = (nn.Parameter(torch.ones(HS)), nn.Parameter(torch.ones(HS))) if qk_norm else (None, None)
            self.qkv = nn.Linear(C, (NH + 2 * KVH) * HS, bias=False)
            self.o = nn.Linear(NH * HS, C, bias=False)
            self.gate_up = nn.Linear(C, 2 * FF, bias=False)
            self.down = nn.Linear(FF, C, bias=False)

        def forward(self, x, mask):
            q, k, v = self.qkv(rmsnorm(x, self.n1)).split([NH * HS, KVH * HS, KVH * HS], dim=2)
            q, k = q.view(B, T, NH, HS).transpose(1, 2), k.view(B, T, KVH, HS).transpose(1, 2)
            if qk_norm:
                q, k = rmsnorm(q, self.qn), rmsnorm(k, self.kn)
            q = rope(q)
            k = rope(k).repeat_interleave(NH // KVH, dim=1)
            v = v.view(B, T, KVH, HS).transpose(1, 2).repeat_interleave(NH // KVH, dim=1)
            if gpu:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
                att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
                y = att @ v
            x = x + self.o(y.transpose(1, 2).reshape(B, T, NH * HS))
            gate, up = self.gate_up(rmsnorm(x, self.n2)).split(FF, dim=2)
            return x + self.down(F.silu(gate) * up)

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.nf = nn.Parameter(torch.ones(C))
            self.head = nn.Linear(C, V, bias=False) if untied else None

        def forward(self, idx, targets):
            mask = ~torch.tril(torch.ones(T, T, dtype=torch.bool, device=idx.device))
            x = self.wte(idx)
            for b in self.blocks:
                x = b(x, mask)
            x = rmsnorm(x, self.nf)
            logits = self.head(x) if untied else x @ self.wte.weight.T
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    model = Llama()
    if lora_rank:
        for p in model.parameters():
            p.requires_grad_(False)
        for b in model.blocks:
            b.qkv = lora_linear(b.qkv, [NH * HS, KVH * HS, KVH * HS], lora_rank)
            b.o = lora_linear(b.o, [C], lora_rank)
            b.gate_up = lora_linear(b.gate_up, [FF, FF], lora_rank)
            b.down = lora_linear(b.down, [C], lora_rank)
    time_steps(model.to(dev), gpu, dev, V, B, T, steps)


def time_steps(model, gpu, dev, V, B, T, steps):
    import torch
    params = [p for p in model.parameters() if p.requires_grad]  # LoRA: the adapters only
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, **({"fused": True} if gpu else {}))
    step_model = torch.compile(model) if gpu else model
    idx = torch.randint(V, (B, T), device=dev)
    tgt = torch.randint(V, (B, T), device=dev)
    times = []
    warmup = 3 if gpu else 1            # compilation and first-touch happen in the first steps
    for s in range(steps + warmup):
        if gpu:
            torch.cuda.synchronize()
        t0 = time.time()
        if gpu:
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                loss = step_model(idx, tgt)
        else:
            loss = step_model(idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if gpu:
            torch.cuda.synchronize()
        if s >= warmup:
            times.append(time.time() - t0)
    times.sort()
    print("%.1f" % (1000 * times[len(times) // 2]))


if sys.argv[1] == "data":
    write_data(sys.argv[2], *map(int, sys.argv[3:6]))
elif sys.argv[1].endswith("-qwen3"):
    L, NH, KVH, C, FF, HS, V, B, T, steps = map(int, sys.argv[2:12])
    extra = sys.argv[12:]
    rank = int(extra[0][5:]) if extra and extra[0].startswith("lora=") else 0
    bench_llama(sys.argv[1].split("-")[0], L, NH, KVH, C, FF, V, B, T, steps, HS=HS, qk_norm=True, lora_rank=rank)
elif sys.argv[1].endswith("-llama"):
    extra = sys.argv[11:]
    rank = int(extra[-1][5:]) if extra and extra[-1].startswith("lora=") else 0
    bench_llama(sys.argv[1].split("-")[0], *map(int, sys.argv[2:11]), untied="untied" in extra, lora_rank=rank)
else:
    bench_torch(sys.argv[1], *map(int, sys.argv[2:9]))
