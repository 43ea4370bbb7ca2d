#!/usr/bin/env python3
"""Checks that Hugging Face transformers loads one of our exports (a checkpoint
directory) as the same model: GPT2LMHeadModel.from_pretrained(DIR) must give the
logits that dev/ref_gpt2.py's independent forward gives with the exported tensors.

Usage: python3 dev/check_hf_export.py CHECKPOINT_DIR
Needs torch, safetensors and transformers (the GPU machine's image has them); prints
"skip ..." and exits 0 where transformers is missing.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import torch
    from safetensors.torch import load_file
    from transformers import GPT2LMHeadModel
except ImportError as e:
    print("skip hf_export_loads_in_transformers: %s" % e)
    sys.exit(0)

from ref_gpt2 import forward_doc  # noqa: E402

d = sys.argv[1]
cfg = json.load(open(os.path.join(d, "config.json")))
model = GPT2LMHeadModel.from_pretrained(d, dtype=torch.float64).eval()
P = {k.removeprefix("transformer."): v.double() for k, v in load_file(os.path.join(d, "model.safetensors")).items()}
toks = [(i * 7919 + 13) % cfg["vocab_size"] for i in range(min(64, cfg["n_positions"]))]
with torch.no_grad():
    hf = model(torch.tensor([toks])).logits[0]
    ours = forward_doc(P, toks, cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["layer_norm_epsilon"])
err = ((hf - ours).abs().max() / ours.abs().max()).item()
tied = model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
ok = err < 1e-9 and tied
print("%s hf_export_loads_in_transformers: relative logit difference %.3g, lm_head tied %s" % ("ok" if ok else "FAIL", err, tied))
sys.exit(0 if ok else 1)
