#!/usr/bin/env python3
"""Checks that Hugging Face's peft loads one of our LoRA adapters (a LoRA checkpoint,
or a reference of dev/ref_lora.py) as the model we train: PeftModel.from_pretrained on
the base (transformers' AutoModelForCausalLM of base_model_name_or_path, or BASE_DIR)
must give the logits of the base with every targeted weight replaced by W + s * B A
(GPT-2's Conv1D: W + s * (B A)^T), s = lora_alpha / r (/ sqrt(r) with use_rslora),
computed here from adapter_model.safetensors by PEFT's naming (lora_A [r, in],
lora_B [out, r] under base_model.model.<module>). PEFT must also have found every
tensor of the file (no missing or unexpected keys). With MERGED_DIR (train_sft -M 1's
<out>/merged), transformers' logits of that directory must be the same too.

Usage: python3 dev/check_peft.py ADAPTER_DIR [BASE_DIR [MERGED_DIR]]
Needs torch, safetensors, transformers and peft (dev/requirements-referee.txt;
tests/model/test_transformers.sh runs it); prints "skip ..." and exits 0 where one is
missing.
"""
import json
import math
import os
import sys

try:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    from peft import PeftModel
except ImportError as e:
    print("skip peft_loads_adapter: %s" % e)
    sys.exit(0)

adapter = sys.argv[1]
acfg = json.load(open(os.path.join(adapter, "adapter_config.json")))
base = sys.argv[2] if len(sys.argv) > 2 else acfg["base_model_name_or_path"]
merged_dir = sys.argv[3] if len(sys.argv) > 3 else None
r, alpha = acfg["r"], acfg["lora_alpha"]
s = alpha / math.sqrt(r) if acfg.get("use_rslora") else alpha / r
conv1d = bool(acfg.get("fan_in_fan_out"))


def fail(why):
    print("FAIL peft_loads_adapter: %s" % why)
    sys.exit(1)


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits[0].double()


model = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float64)
vocab = model.config.vocab_size
ids = torch.tensor([[(i * 37 + 11) % vocab for i in range(min(64, model.config.max_position_embeddings))]])
base_logits = logits(model, ids)

# ours: the base's state dict with s * B A added to each adapted weight
tensors = load_file(os.path.join(adapter, "adapter_model.safetensors"))
state = {k: v.clone() for k, v in model.state_dict().items()}
pairs = {}
for k in tensors:
    if not k.startswith("base_model.model.") or not (k.endswith(".lora_A.weight") or k.endswith(".lora_B.weight")):
        fail("%s: not a PEFT LoRA tensor name" % k)
    module = k[len("base_model.model."):-len(".lora_A.weight")]
    pairs.setdefault(module, {})[k[-len("A.weight"):][0]] = tensors[k].double()
for module, ab in pairs.items():
    if set(ab) != {"A", "B"}:
        fail("%s has lora_%s only" % (module, "".join(ab)))
    w = module + ".weight"
    if w not in state:
        fail("%s: no base weight %s" % (module, w))
    delta = s * (ab["B"] @ ab["A"])
    state[w] = state[w] + (delta.T if conv1d else delta)
ours_model = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float64)
ours_model.load_state_dict(state)
ours = logits(ours_model, ids)

peft_model = PeftModel.from_pretrained(model, adapter, torch_dtype=torch.float64)
peft_model.eval()
theirs = logits(peft_model, ids)
trained = {n for n, _ in peft_model.named_parameters() if "lora_" in n}
if len(trained) != len(tensors):
    fail("peft made %d LoRA tensors, the file holds %d" % (len(trained), len(tensors)))

scale = ours.abs().max().item()
err = (theirs - ours).abs().max().item() / scale
moved = (ours - base_logits).abs().max().item() / scale
if not (err < 1e-9) or not (moved > 1e-6):
    fail("peft's logits differ from W + s B A by %.3g (relative); the adapter moves the base's by %.3g" % (err, moved))
extra = ""
if merged_dir:
    merged = logits(AutoModelForCausalLM.from_pretrained(merged_dir, torch_dtype=torch.float64), ids)
    merr = (merged - theirs).abs().max().item() / scale
    if not (merr < 1e-5):  # our export is float32
        fail("the merged export %s differs from base + adapter by %.3g" % (merged_dir, merr))
    extra = ", merged export within %.3g" % merr
print("ok peft_loads_adapter (%s: %d adapters, r %d, scale %g; peft vs W + s B A %.3g, adapter moves logits %.3g%s)"
      % (adapter, len(pairs), r, s, err, moved, extra))
