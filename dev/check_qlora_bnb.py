#!/usr/bin/env python3
"""QLoRA against bitsandbytes and peft on a GPU (dev/gpu_check.sh's qlora_bnb_* rows).

  quantize TEST_NF4 TMPDIR
    A random weight (1000 x 333: 5203 full blocks of 64 and a short one; 21 nested blocks
    of 256, the last short), in fp32 and in bf16, with three blocks put first: NF4's 15
    thresholds (the midpoints of its 16 values) and 1 ulp either side at absmax 1, the same
    at absmax 3.7 (the value scaled by fp32(1/absmax): the kernel's reciprocal matters),
    and an all-zero block. bitsandbytes.functional.quantize_4bit(quant_type="nf4",
    blocksize=64) on the GPU (its CUDA kernel, the one that made the published
    checkpoints) against ours (TEST_NF4 --quantize: model/nf4.h, as --load_in_4bit
    quantizes), bit for bit, one check each: with compress_statistics=False the packed codes
    and the fp32 block absmax (..._codes_absmax); with compress_statistics=True the codes,
    the offset, the 8-bit absmax codes and the nested absmax (..._double_quant).

  peft ADAPTER_DIR BASE_DIR MERGED_DIR
    ADAPTER_DIR: a checkpoint our GPU trainer wrote training LoRA on the bnb-4bit directory
    BASE_DIR; MERGED_DIR: its -M 1 export (the dequantized base + s B A, dense). transformers
    loads BASE_DIR as bitsandbytes' Linear4bit layers on the GPU and peft's
    PeftModel.from_pretrained puts the adapter on it (every tensor of the file taken); its
    logits (fp32, TF32 off) equal transformers' logits of MERGED_DIR within 1e-5 of their
    largest magnitude, and the adapter moves the base's logits by more than that.

Prints "ok NAME ..." / "FAIL NAME: why" per check, or one "skip NAME: why" where torch with
CUDA, bitsandbytes, transformers or peft is missing; exits 1 if a check failed.
QLORA_BNB_DEVICE=cpu runs the same on bitsandbytes' CPU backend, to try the script without a
GPU: that backend is not the CUDA kernel (all-zero blocks, torch's CPU mean for the offset,
the nested quantization near midpoints: tests/model/test_nf4_bnb.sh), so quantize FAILs
there as those departures say, and peft's forward fails on tiny_llama's 32-wide rows.
"""
import os
import subprocess
import sys

mode = sys.argv[1] if len(sys.argv) > 1 else ""
row = "qlora_bnb_quantize" if mode == "quantize" else "qlora_bnb_peft"
try:
    import torch
    import bitsandbytes.functional as bf
    from safetensors.torch import load_file, save_file
    if mode == "peft":
        import bitsandbytes as bnb
        from transformers import AutoModelForCausalLM
        from peft import PeftModel
except ImportError as e:
    print("skip %s: %s" % (row, e))
    sys.exit(0)
DEVICE = os.environ.get("QLORA_BNB_DEVICE", "cuda")
if DEVICE == "cuda" and not torch.cuda.is_available():
    print("skip %s: torch %s sees no CUDA device" % (row, torch.__version__))
    sys.exit(0)
failed = False


def check(name, good, why):
    global failed
    print("ok %s" % name if good else "FAIL %s: %s" % (name, why))
    failed |= not good


def first_diff(a, b):
    """'' when the tensors are equal bit for bit, else where and how they first differ."""
    a, b = a.detach().cpu().reshape(-1), b.detach().cpu().reshape(-1)
    if a.numel() != b.numel():
        return "%d values vs %d" % (a.numel(), b.numel())
    if a.dtype == torch.float32:
        a, b = a.view(torch.int32), b.view(torch.int32)
    bad = (a != b).nonzero()
    if not len(bad):
        return ""
    i = bad[0].item()
    return "%d of %d differ, first at %d: %r (bnb) vs %r (ours)" % (len(bad), a.numel(), i, a[i].item(), b[i].item())


def adversarial_blocks():
    values = bf.get_4bit_type("nf4", device="cpu").float()
    mids = ((values[:-1] + values[1:]) / 2).tolist()  # NF4's 15 thresholds, in fp32
    block = []
    for m in mids:
        t = torch.tensor([m], dtype=torch.float32)
        block += [t, torch.nextafter(t, torch.tensor([2.0])), torch.nextafter(t, torch.tensor([-2.0]))]
    one = torch.cat(block + [torch.tensor([1.0])])
    one = torch.cat([one, torch.zeros(64 - one.numel())])
    return torch.cat([one, one * 3.7, torch.zeros(64)])


def quantize(test_nf4, tmp):
    torch.manual_seed(30)
    for dtype in (torch.float32, torch.bfloat16):
        name = "qlora_bnb_quantize_%s" % str(dtype)[6:]
        w = torch.randn(1000, 333) * 0.02
        adv = adversarial_blocks()
        w.view(-1)[:adv.numel()] = adv
        w = w.to(dtype)
        path, out = os.path.join(tmp, name + ".safetensors"), os.path.join(tmp, name + ".ours.safetensors")
        save_file({"w": w.contiguous()}, path)
        r = subprocess.run([test_nf4, "--quantize", path, "w", out], capture_output=True, text=True)
        if r.returncode:
            check(name, False, "%s --quantize exited %d: %s" % (test_nf4, r.returncode, r.stderr.strip()[:200]))
            continue
        ours = load_file(out)
        wc = w.to(DEVICE)
        q1, s1 = bf.quantize_4bit(wc, blocksize=64, quant_type="nf4", compress_statistics=False)
        q2, s2 = bf.quantize_4bit(wc, blocksize=64, quant_type="nf4", compress_statistics=True)
        # the first level (the kernel's absmax, reciprocal and thresholds), then the double
        # quantization (the offset is torch's fp32 mean of the absmax on the GPU, ours the exact
        # mean rounded once: an ulp apart changes absmax codes and nested absmax)
        for part, pairs in (("codes_absmax", (("codes", q1, ours["codes"]), ("absmax", s1.absmax, ours["absmax"]))),
                            ("double_quant", (("codes", q2, ours["codes"]), ("offset", s2.offset.reshape(1).float(), ours["offset"]),
                                              ("absmax codes", s2.absmax, ours["qabsmax"]),
                                              ("nested absmax", s2.state2.absmax, ours["nested_absmax"])))):
            why = ["%s: %s" % (what, d) for what, theirs, mine in pairs for d in [first_diff(theirs, mine)] if d]
            if s1.absmax.numel() != 5204 or s2.state2.absmax.numel() != 21:
                why.append("%d blocks, %d nested (expected 5204, 21)" % (s1.absmax.numel(), s2.state2.absmax.numel()))
            check("%s_%s" % (name, part), not why, "; ".join(why))
        print("# %s: %d code bytes, %d blocks, %d nested blocks; offset %r (bnb) vs %r (ours) on %s"
              % (name, ours["codes"].numel(), s1.absmax.numel(), s2.state2.absmax.numel(), s2.offset.item(), ours["offset"].item(),
                 torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE))


def peft(adapter, base, merged):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(DEVICE)
    model = AutoModelForCausalLM.from_pretrained(base, device_map={"": dev})
    n4 = sum(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())
    vocab = model.config.vocab_size
    ids = torch.tensor([[(i * 37 + 11) % vocab for i in range(min(48, model.config.max_position_embeddings))]], device=dev)
    pm = PeftModel.from_pretrained(model, adapter)
    pm.eval()
    with torch.no_grad():
        theirs = pm(input_ids=ids).logits[0].double()
        with pm.disable_adapter():
            base_logits = pm(input_ids=ids).logits[0].double()
        dense = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32).to(dev)
        ours = dense(input_ids=ids).logits[0].double()
    tensors = load_file(os.path.join(adapter, "adapter_model.safetensors"))
    made = sum(1 for n, _ in pm.named_parameters() if "lora_" in n)
    scale = ours.abs().max().item()
    err = (theirs - ours).abs().max().item() / scale
    moved = (ours - base_logits).abs().max().item() / scale
    check("qlora_bnb_peft_loads_gpu_adapter", n4 == 14 and made == len(tensors) and err < 1e-5 and moved > 1e-5,
          "%d Linear4bit layers (14 expected), peft made %d LoRA tensors of the file's %d; peft on the 4-bit base vs our "
          "merge %.3g relative (1e-5 allowed); the adapter moves the logits %.3g" % (n4, made, len(tensors), err, moved))
    print("# peft on bitsandbytes' 4-bit base: %d Linear4bit, %d adapter tensors; logits vs our -M 1 merge %.3g relative, "
          "the adapter moves them %.3g" % (n4, made, err, moved))


if mode == "quantize" and len(sys.argv) == 4:
    quantize(sys.argv[2], sys.argv[3])
elif mode == "peft" and len(sys.argv) == 5:
    peft(sys.argv[2], sys.argv[3], sys.argv[4])
else:
    print("usage: check_qlora_bnb.py quantize TEST_NF4 TMPDIR | peft ADAPTER_DIR BASE_DIR MERGED_DIR", file=sys.stderr)
    sys.exit(2)
sys.exit(1 if failed else 0)
