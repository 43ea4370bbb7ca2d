#!/usr/bin/env python3
"""The LoRA references test_sft.c checks the CPU trainer's adapters against.

LoRA (Hu et al. 2021; PEFT's LoraLayer) on a frozen base: a targeted linear layer
computes y = x W^T + s * x A^T B^T with A [r, in], B [out, r] and s = alpha / r
(alpha / sqrt(r) with rsLoRA); dropout 0 here. Written from that math: the model is
the float64 forward of dev/ref_gpt2.py / dev/ref_llama.py on the effective weights
W + s * B A (GPT-2's Conv1D stores W as [in, out], so there W + s * (B A)^T), which is
the same function of x, A and B; autograd then gives the adapters' gradients, and
ref_common's training rules (loss over targets, accumulation, clipping, AdamW with
decay on 2-D tensors: every adapter tensor) train the adapters only, the base held.

A and B start random (not PEFT's B = 0), so the first gradients of both are non-zero.
Each reference is a PEFT adapter directory (adapter_config.json,
adapter_model.safetensors with PEFT's tensor names) on a committed base, and
<name>_expect.safetensors with the entries of ref_common.reference_expect under the
adapters' PEFT names, plus "merged.<name>": the base merged with the initial adapter.

  tiny_lora_gpt2:   GPT-2 (dev/ref/tiny), every linear layer (c_attn, c_proj: both, c_fc), r 2, alpha 3
  tiny_lora_llama:  Llama (dev/ref/tiny_llama), q_proj, v_proj, down_proj only, r 4, alpha 6
  tiny_lora_rslora: Llama, every linear layer, r 4, alpha 6, rsLoRA (s = 6 / 2)
  tiny_qlora_llama: QLoRA: Llama on tiny_llama_bnb4 (tiny_llama with its layers' linear
                    weights in NF4 with double quantization, written by dev/ref_nf4.py as
                    bitsandbytes saves them), every linear layer, r 2, alpha 4; the
                    reference runs on the dequantized weights (ref_nf4.py's float64 arithmetic)

Usage: python3 dev/ref_lora.py OUTDIR   (after dev/ref_gpt2.py and dev/ref_llama.py, whose
base models it names; .ci/run regenerates and compares with dev/check_ref.py).
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_gpt2  # noqa: E402
import ref_llama  # noqa: E402
import ref_nf4  # noqa: E402
from ref_common import CLIP, write_safetensors, reference_expect  # noqa: E402

GPT2_MODULES = {  # target name -> the modules it names in a layer (PEFT matches by suffix)
    "c_attn": ["attn.c_attn"], "c_proj": ["attn.c_proj", "mlp.c_proj"], "c_fc": ["mlp.c_fc"]}
LLAMA_MODULES = {t: ["self_attn." + t] for t in ("q_proj", "k_proj", "v_proj", "o_proj")}
LLAMA_MODULES.update({t: ["mlp." + t] for t in ("gate_proj", "up_proj", "down_proj")})


def adapters_of(gpt2, base, L, targets, r, seed, b_std):
    """Random adapters {PEFT name: tensor} of every targeted module, and a map from each
    module's base weight name to its (A name, B name)."""
    g = torch.Generator().manual_seed(seed)
    table = GPT2_MODULES if gpt2 else LLAMA_MODULES
    adapters, where = {}, {}
    for l in range(L):
        for t in targets:
            for mod in table[t]:
                w = ("h.%d.%s.weight" if gpt2 else "model.layers.%d.%s.weight") % (l, mod)
                inp, out = base[w].shape if gpt2 else base[w].shape[::-1]
                path = ("transformer.h.%d.%s" if gpt2 else "model.layers.%d.%s") % (l, mod)
                a, b = "base_model.model.%s.lora_A.weight" % path, "base_model.model.%s.lora_B.weight" % path
                adapters[a] = (torch.rand(r, inp, generator=g) * 2 - 1).float() / math.sqrt(inp)
                adapters[b] = (b_std * torch.randn(out, r, generator=g)).float()
                where[w] = (a, b)
    return dict(sorted(adapters.items(), key=lambda kv: order_key(kv[0]))), where


def order_key(name):
    """Layer, then the module's place in the block, then A before B (the order is free; this one reads well)."""
    parts = name.split(".")
    layer = int(parts[parts.index("h" if "h" in parts else "layers") + 1])
    mods = ["c_attn", "attn.c_proj", "c_fc", "mlp.c_proj", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    mod = next(i for i, m in enumerate(mods) if ("." + m + ".lora_") in name)
    return (layer, mod, name)


def effective(base, adapters, where, s, gpt2):
    """The base weights with each adapter's s * B A added (transposed for Conv1D)."""
    P = dict(base)
    for w, (a, b) in where.items():
        delta = s * (adapters[b] @ adapters[a])       # [out, in]
        P[w] = base[w] + (delta.T if gpt2 else delta)
    return P


def write_reference(out, name, gpt2, base_dir, base_params, forward_doc, L, targets, r, alpha, rslora, seed, b_std=0.3):
    s = alpha / math.sqrt(r) if rslora else alpha / r
    adapters, where = adapters_of(gpt2, base_params, L, targets, r, seed, b_std)

    def forward(Pa, toks):  # Pa: the adapters (trained); the base as float64 constants of the same dtype
        dt = next(iter(Pa.values())).dtype
        base = {k: v.to(dt) for k, v in base_params.items()}
        return forward_doc(effective(base, Pa, where, s, gpt2), toks)

    expect = reference_expect(forward, adapters)
    assert max(expect["train_grad_norm"].tolist()) > CLIP, "%s: clipping is never active" % name
    # the scale must matter: s applied as alpha (or alpha / r without rsLoRA) changes the loss well past 1e-5
    with torch.no_grad():
        P64 = {k: v.double() for k, v in adapters.items()}
        base64 = {k: v.double() for k, v in base_params.items()}
        from ref_common import row_stream, rows_loss, B
        stream = row_stream()
        rows = [next(stream) for _ in range(B)]
        for wrong in (alpha, alpha / r if rslora else alpha / math.sqrt(r)):
            t, c, _ = rows_loss(lambda P, tk: forward_doc(effective(base64, P, where, wrong, gpt2), tk), P64, rows)
            assert abs(t.item() / c - expect["loss"].item()) > 1e-3 * expect["loss"].item(), "%s: scale %g vs %g hardly matters" % (name, wrong, s)
    ref_llama.check_float32_lands_close(expect, forward, adapters, name)
    for k, v in effective({k: v.double() for k, v in base_params.items()}, {k: v.double() for k, v in adapters.items()}, where, s, gpt2).items():
        expect["merged." + k] = v
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    cfg = {"base_model_name_or_path": base_dir, "bias": "none", "fan_in_fan_out": gpt2, "inference_mode": True,
           "init_lora_weights": True, "lora_alpha": alpha, "lora_dropout": 0.0, "modules_to_save": None, "peft_type": "LORA",
           "r": r, "target_modules": sorted(targets), "task_type": "CAUSAL_LM", "use_dora": False, "use_rslora": rslora}
    with open(os.path.join(d, "adapter_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    write_safetensors(os.path.join(d, "adapter_model.safetensors"), adapters, metadata={"format": "pt"})
    write_safetensors(os.path.join(out, name + "_expect.safetensors"), expect)
    print("%s: %d adapter tensors, scale %g; first micro-batch loss %.6f; grad norms %s; final loss %.6f"
          % (name, len(adapters), s, expect["loss"].item(), ["%.3f" % x for x in expect["train_grad_norm"].tolist()], expect["train_loss"][-1]))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "dev/ref"
    write_reference(out, "tiny_lora_gpt2", True, "dev/ref/tiny", ref_gpt2.params, ref_gpt2.forward_doc, ref_gpt2.L,
                    ["c_attn", "c_proj", "c_fc"], 2, 3.0, False, 7001)
    cfg = ref_llama.LLAMA_CONFIG
    llama = ref_llama.init_params(cfg, ref_llama.LLAMA_SEED)
    fwd = lambda P, t: ref_llama.forward_doc(P, t, cfg)  # noqa: E731
    L = cfg["num_hidden_layers"]
    write_reference(out, "tiny_lora_llama", False, "dev/ref/tiny_llama", llama, fwd, L, ["q_proj", "v_proj", "down_proj"], 4, 6.0, False, 7002)
    write_reference(out, "tiny_lora_rslora", False, "dev/ref/tiny_llama", llama, fwd, L, list(LLAMA_MODULES), 4, 6.0, True, 7005)
    # QLoRA: tiny_llama's layers' linear weights quantized by ref_nf4.py (NF4, double
    # quantization) into a bnb-4bit directory; the reference is LoRA on their dequantized values
    linear = {k for k in llama if ".self_attn." in k or ".mlp." in k}
    deq = ref_nf4.write_bnb4_dir(os.path.join(out, "tiny_llama_bnb4"), cfg, {k: v.numpy() for k, v in llama.items()}, linear)
    assert len(deq) == 7 * L and all(k not in deq for k in ("lm_head.weight", "model.embed_tokens.weight"))
    dense = {k: torch.from_numpy(deq[k]) if k in deq else v for k, v in llama.items()}
    write_reference(out, "tiny_qlora_llama", False, "dev/ref/tiny_llama_bnb4", dense, fwd, L, list(LLAMA_MODULES), 2, 4.0, False, 7006)


if __name__ == "__main__":
    main()
