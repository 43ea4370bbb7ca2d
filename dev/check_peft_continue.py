#!/usr/bin/env python3
"""Checks that train_sft continues an adapter that peft itself made, and merges as peft
does. Two steps around a train_sft run (tests/model/test_transformers.sh runs them):

  make OUT_DIR: peft's get_peft_model(base, LoraConfig(...)).save_pretrained() writes
    one adapter directory per case into OUT_DIR (the cases below: rsLoRA on a Llama's
    q_proj and v_proj only; target_modules="all-linear" on Qwen3, which peft expands
    to the module names it saves; GPT-2's Conv1D c_attn and c_proj, where peft sets
    fan_in_fan_out itself). peft initializes B to 0, so an adapter would compute the
    base and a wrong scale or a misread tensor would not show: every lora_A and lora_B
    gets seeded random values before saving. base_model_name_or_path is the base's
    absolute path, as peft writes it for a model loaded from a local directory.
    OUT_DIR/cases.txt lists each case with the -t its run takes.

  check DATA.bin B OUT_DIR RUN_DIR...: RUN_DIR/<case> is `train_sft -e OUT_DIR/<case>
    -i DATA.bin -b B -t T -S 0 -M 1` (T from cases.txt, any -x). Then:
    - peft_first_step_loss: peft's forward (PeftModel.from_pretrained on the base,
      float64) of the first step's B rows, packed as base/datafile.h's loader packs
      them without shuffling (next-fit, documents cut to T, each document attending to
      itself from position 0, so each is run alone), gives the mean loss over the
      targets that train_sft logged for step 1 (1e-5 relative), and that loss differs
      from the base's (the adapter matters);
    - peft_merge_equals_ours: PeftModel.from_pretrained(base, the run's last
      checkpoint).merge_and_unload() has the weights of RUN_DIR/<case>/merged (1e-6
      relative to each tensor's largest entry), tensor for tensor, and the adapted
      ones moved.

Needs torch, safetensors, transformers and peft (dev/requirements-referee.txt); prints
"skip ..." and exits 0 where one is missing.
"""
import json
import math
import os
import struct
import sys

try:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    from peft import LoraConfig, PeftModel, get_peft_model
except ImportError as e:
    print("skip peft_continue: %s" % e)
    sys.exit(0)

REF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref")
# case -> (base, row length T for train_sft -t, LoraConfig arguments)
CASES = {
    "llama_rslora_qv": ("tiny_llama", 32, dict(r=4, lora_alpha=8, use_rslora=True, target_modules=["q_proj", "v_proj"])),
    "qwen3_all_linear": ("tiny_qwen3", 32, dict(r=8, lora_alpha=16, target_modules="all-linear")),
    "gpt2_conv1d": ("tiny", 24, dict(r=4, lora_alpha=6, target_modules=["c_attn", "c_proj"])),
}


def make(out):
    cases = []
    for k, (name, (base, T, kw)) in enumerate(sorted(CASES.items())):
        model = AutoModelForCausalLM.from_pretrained(os.path.join(REF, base), dtype=torch.float32)
        pm = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **kw))
        g = torch.Generator().manual_seed(1000 + k)
        with torch.no_grad():
            for n, p in pm.named_parameters():
                if "lora_" in n:
                    p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float32) * 0.3)
        pm.save_pretrained(os.path.join(out, name))
        cfg = json.load(open(os.path.join(out, name, "adapter_config.json")))
        print("made %s: peft %s, r %d, alpha %s, rsLoRA %s, fan_in_fan_out %s, targets %s"
              % (name, cfg.get("peft_version"), cfg["r"], cfg["lora_alpha"], cfg["use_rslora"], cfg["fan_in_fan_out"], cfg["target_modules"]))
        cases.append("%s %d\n" % (name, T))
    open(os.path.join(out, "cases.txt"), "w").write("".join(cases))


def first_rows(path, B, T):
    """The documents of the loader's first B rows without shuffling, each cut to T, with
    their target masks (base/datafile.h: next-fit, a cut document's last token has no
    target)."""
    b = open(path, "rb").read()
    head = struct.unpack("<128q", b[:1024])
    width, D, N = head[2], head[4], head[5]
    off = struct.unpack("<%dq" % (D + 1), b[1024:1024 + 8 * (D + 1)])
    at = 1024 + 8 * (D + 1)
    ids = struct.unpack("<%d%s" % (N, "H" if width == 2 else "I"), b[at:at + width * N])
    mask = b[at + width * N:at + width * N + N]
    docs, d = [], 0
    for _ in range(B):
        filled = 0
        while d < D:
            n = min(off[d + 1] - off[d], T)
            if filled > 0 and n > T - filled:
                break
            docs.append((list(ids[off[d]:off[d] + n]), list(mask[off[d]:off[d] + n])))
            filled += n
            d += 1
            if filled == T:
                break
    return docs


def mean_loss(model, docs):
    total, count = 0.0, 0
    with torch.no_grad():
        for toks, mask in docs:
            logp = torch.log_softmax(model(input_ids=torch.tensor([toks])).logits[0].double(), -1)
            for i in range(1, len(toks)):
                if mask[i]:
                    total -= logp[i - 1, toks[i]].item()
                    count += 1
    return total / count, count


def check(data, B, out, runs):
    ok_all = True
    for name in sorted(CASES):
        base = os.path.join(REF, CASES[name][0])
        run = os.path.join(runs, name)
        metrics = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
        ours = next(m for m in metrics if m.get("step") == 1 and "loss" in m)
        ckpt = os.path.join(run, open(os.path.join(run, "latest")).read().strip())
        docs = first_rows(data, B, CASES[name][1])

        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float64).eval()
        base_loss, _ = mean_loss(model, docs)
        peft = PeftModel.from_pretrained(model, os.path.join(out, name), torch_dtype=torch.float64).eval()
        loss, count = mean_loss(peft, docs)
        err = abs(loss - ours["loss"]) / loss
        moved = abs(loss - base_loss) / loss
        ok = err < 1e-5 and moved > 1e-3 and count == ours["targets"]
        print("%s peft_first_step_loss: %s: peft %.8f, train_sft %.8f (%d targets, train_sft %d), relative difference %.2g (allowed 1e-5); the base's %.6f"
              % ("ok" if ok else "FAIL", name, loss, ours["loss"], count, ours["targets"], err, base_loss))
        ok_all = ok_all and ok

        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float64).eval()
        before = {k: v.clone() for k, v in model.state_dict().items()}
        merged = PeftModel.from_pretrained(model, ckpt, torch_dtype=torch.float64).merge_and_unload().state_dict()
        mine = {k: v.double() for k, v in load_file(os.path.join(run, "merged", "model.safetensors")).items()}
        why, worst, adapted = [], 0.0, 0
        for k, v in merged.items():
            if k not in mine:
                if k == "lm_head.weight" and model.config.tie_word_embeddings:
                    continue  # tied: save_pretrained does not store it either
                why.append("%s missing from ours" % k)
                continue
            if mine[k].shape != v.shape:
                why.append("%s: shape %s, peft's %s" % (k, tuple(mine[k].shape), tuple(v.shape)))
                continue
            worst = max(worst, ((mine[k] - v).abs().max() / v.abs().max()).item())
            adapted += bool(((v - before[k]).abs().max() / v.abs().max()).item() > 1e-3)
        why += ["%s is not peft's" % k for k in mine if k not in merged]
        lora_modules = len({n.rsplit(".lora_", 1)[0] for n in load_file(os.path.join(ckpt, "adapter_model.safetensors"))})
        if adapted != lora_modules:
            why.append("%d tensors moved by the merge, the adapter has %d modules" % (adapted, lora_modules))
        ok = not why and worst < 1e-6
        print("%s peft_merge_equals_ours: %s: merge_and_unload of %s vs our -M 1 export: worst relative difference %.2g (allowed 1e-6), %d tensors adapted%s"
              % ("ok" if ok else "FAIL", name, os.path.basename(ckpt), worst, adapted, ": " + "; ".join(why[:3]) if why else ""))
        ok_all = ok_all and ok
    return ok_all


if sys.argv[1:2] == ["make"] and len(sys.argv) == 3:
    make(sys.argv[2])
elif sys.argv[1:2] == ["check"] and len(sys.argv) == 6:
    sys.exit(0 if check(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]) else 1)
else:
    sys.exit("usage: check_peft_continue.py make OUT_DIR | check DATA.bin B OUT_DIR RUNS_DIR")
