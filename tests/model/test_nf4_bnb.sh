#!/usr/bin/env bash
# tests/model/test_nf4_bnb.sh: dev/ref_nf4.py (the NF4 reference model/nf4.h is checked
# against) run in the referee environment, where bitsandbytes 0.50.2 is importable: its
# self-checks, and its cross-checks against bitsandbytes' own NF4 table, dynamic map,
# quantize_4bit (CPU backend; where that backend departs from the CUDA kernel, it departs
# only as ref_nf4.py's cross_check_bnb says), dequantize_4bit and QuantState's packed keys
# and JSON; and the cases it writes there, under torch 2, are the committed ones byte for
# byte. Then model/bnb4.h and model/hf_bnb4.h read files bitsandbytes and transformers wrote
# (below). About 20 s of CPU, nearly all of it importing torch, bitsandbytes (which pulls
# in torch.compile's machinery) and transformers in three Python processes.
# Without the environment it skips, saying why.
set -u
cd "$(dirname "$0")/../.."
py=${SFT_REFEREE_PYTHON:-$HOME/.cache/sft-train/referee-venv/bin/python}
if ! "$py" -c 'import torch, bitsandbytes' 2>/dev/null; then
    echo "skip nf4_against_bitsandbytes: no referee environment with bitsandbytes at $py (pip install -r dev/requirements-referee.txt into a venv and set SFT_REFEREE_PYTHON; .ci/run does)"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
# bitsandbytes prints a warning about an optional CPU kernel package on import; only the
# check lines matter here.
# bitsandbytes' CPU dequantization is eager then, not torch.compile'd: the same arithmetic
TORCHDYNAMO_DISABLE=1 "$py" dev/ref_nf4.py "$tmp" > "$tmp/log" 2>&1
rc=$?
grep -E '^(ok|FAIL|skip) ' "$tmp/log"
if [ $rc -ne 0 ]; then
    echo "FAIL nf4_reference_runs: dev/ref_nf4.py exited $rc: $(tail -1 "$tmp/log")"
    fails=$((fails + 1))
elif grep -q '^skip bitsandbytes' "$tmp/log"; then
    echo "FAIL nf4_bnb_cross_check_ran: bitsandbytes imports here but the reference did not use it"
    fails=$((fails + 1))
elif cmp -s "$tmp/nf4_cases.safetensors" dev/ref/nf4_cases.safetensors; then
    echo "ok nf4_reference_same_under_torch2"
else
    echo "FAIL nf4_reference_same_under_torch2: the referee's torch writes different cases than dev/ref/nf4_cases.safetensors"
    fails=$((fails + 1))
fi
# bitsandbytes' Linear4bit writes its state_dict (fp32 and bf16 weights, with and without
# double quantization) to safetensors; test_nf4 --read (model/bnb4.h) reads each weight and
# dequantizes it in fp32: equal to bitsandbytes' dequantize_4bit bit for bit (for bf16,
# ours rounded to bf16 as bitsandbytes rounds its fp32 product).
if [ ! -x ./test_nf4 ]; then
    echo "FAIL nf4_reads_bnb_files: ./test_nf4 is not built (make test_nf4)"
    exit 1
fi
TORCHDYNAMO_DISABLE=1 "$py" - "$tmp" > "$tmp/bnb.log" 2>&1 <<'PY'
import subprocess, sys
import numpy as np, torch, bitsandbytes as bnb, bitsandbytes.functional as bf
from safetensors.torch import save_file
tmp = sys.argv[1]
torch.manual_seed(3)
for dtype in (torch.float32, torch.bfloat16):
    for nested in (True, False):
        rows, cols = 96, 200
        w = (torch.randn(rows, cols) * 0.02).to(dtype)
        q = bnb.nn.Linear4bit(cols, rows, bias=False, compress_statistics=nested, quant_type="nf4", compute_dtype=dtype)
        q.weight = bnb.nn.Params4bit(w.clone(), requires_grad=False, compress_statistics=nested, quant_type="nf4")
        q = q.to("cpu")
        path = "%s/bnb_%s_%d.safetensors" % (tmp, str(dtype)[6:], nested)
        save_file({"model.layer." + k: v.contiguous() for k, v in q.state_dict().items()}, path)
        theirs = bf.dequantize_4bit(q.weight.data, q.weight.quant_state).reshape(-1)
        name = "nf4_reads_bnb_%s%s" % (str(dtype)[6:], "_double_quant" if nested else "")
        r = subprocess.run(["./test_nf4", "--read", path, "model.layer.weight", str(rows), str(cols), path + ".out"], capture_output=True, text=True)
        if r.returncode:
            print("FAIL %s: test_nf4 --read: %s" % (name, r.stderr.strip()))
            continue
        ours = torch.from_numpy(np.fromfile(path + ".out", dtype=np.float32)).to(dtype)
        same = ours.numel() == theirs.numel() and torch.equal(ours.view(torch.int16 if dtype == torch.bfloat16 else torch.int32),
                                                             theirs.view(torch.int16 if dtype == torch.bfloat16 else torch.int32))
        print(("ok %s" % name) if same else "FAIL %s: dequantized weights differ from bitsandbytes'" % name)
PY
# A whole directory as transformers writes it (save_pretrained of dev/ref/tiny_llama
# quantized by bitsandbytes on the CPU: config.json's quantization_config, the layers'
# linear weights in 4 bits): model/hf_bnb4.h reads it (test_nf4 --read-model exports it
# dense); each Linear4bit's weight equals bitsandbytes' dequantize_4bit bit for bit, every
# other tensor the original's.
TORCHDYNAMO_DISABLE=1 "$py" - "$tmp" >> "$tmp/bnb.log" 2>&1 <<'PY'
import glob, subprocess, sys
import torch, bitsandbytes as bnb, bitsandbytes.functional as bf
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, BitsAndBytesConfig
tmp = sys.argv[1]
qc = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.float32)
m = AutoModelForCausalLM.from_pretrained("dev/ref/tiny_llama", quantization_config=qc, device_map="cpu", dtype=torch.float32)
m.save_pretrained(tmp + "/tiny_llama_bnb4")
r = subprocess.run(["./test_nf4", "--read-model", tmp + "/tiny_llama_bnb4", tmp + "/dense"], capture_output=True, text=True)
if r.returncode:
    print("FAIL nf4_reads_transformers_dir: test_nf4 --read-model: %s" % r.stderr.strip())
    sys.exit(0)
ours = load_file(tmp + "/dense/model.safetensors")
orig = {}
for f in glob.glob("dev/ref/tiny_llama/*.safetensors"):
    orig.update(load_file(f))
# bitsandbytes' own reading of the saved file (QuantState.from_dict, as Linear4bit's
# loading does) with its torch backend's 4-bit dequantization: 0.50.2's native CPU one
# takes an AVX-512 path when a row's length is a multiple of 16, which indexes absmax per
# row as if rows held whole blocks (csrc/cpu_ops.cpp, dequantizeBlockwise4bitCpu), so
# it is wrong for tiny_llama's 32- and 48-wide rows (right when rows are a multiple of 64,
# as in real models); the CUDA kernel and the torch backend count blocks along the
# flattened weight.
from bitsandbytes.backends.default.ops import _dequantize_4bit_compute
saved = load_file(tmp + "/tiny_llama_bnb4/model.safetensors")
quantized = {n + ".weight" for n, mod in m.named_modules() if isinstance(mod, bnb.nn.Linear4bit)}
def theirs(k):
    qs = bf.QuantState.from_dict({s[len(k) + 1:]: v for s, v in saved.items() if s.startswith(k + ".")}, device=torch.device("cpu"))
    absmax = bf.dequantize_blockwise(qs.absmax, qs.state2) + qs.offset
    return _dequantize_4bit_compute(saved[k].reshape(-1), absmax, qs.code, qs.blocksize, qs.shape, qs.dtype)
bad = [k for k in sorted(quantized) if not torch.equal(ours[k].view(torch.int32), theirs(k).view(torch.int32))]
bad += [k for k in orig if k not in quantized and not torch.equal(ours[k], orig[k])]
ok = len(quantized) == 14 and set(ours) == set(orig) and not bad
print("ok nf4_reads_transformers_dir" if ok else "FAIL nf4_reads_transformers_dir: %d quantized, differing %r" % (len(quantized), bad[:3]))
# The bnb-4bit directory dev/ref_nf4.py wrote for test_lora's QLoRA reference
# (dev/ref/tiny_llama_bnb4) loads in transformers as bitsandbytes' Linear4bit layers whose
# dequantized weights are model/hf_bnb4.h's bit for bit.
m = AutoModelForCausalLM.from_pretrained("dev/ref/tiny_llama_bnb4", device_map="cpu")
r = subprocess.run(["./test_nf4", "--read-model", "dev/ref/tiny_llama_bnb4", tmp + "/ref_dense"], capture_output=True, text=True)
ours = load_file(tmp + "/ref_dense/model.safetensors") if r.returncode == 0 else {}
bad, n = [], 0
for name, mod in m.named_modules():
    if isinstance(mod, bnb.nn.Linear4bit):
        qs = mod.weight.quant_state
        absmax = bf.dequantize_blockwise(qs.absmax, qs.state2) + qs.offset
        w = _dequantize_4bit_compute(mod.weight.data.reshape(-1), absmax, qs.code, qs.blocksize, qs.shape, qs.dtype)
        n += 1
        if name + ".weight" not in ours or not torch.equal(w.view(torch.int32), ours[name + ".weight"].view(torch.int32)): bad.append(name)
print("ok nf4_reference_dir_loads_in_transformers" if n == 14 and not bad else
      "FAIL nf4_reference_dir_loads_in_transformers: %d Linear4bit, differing %r %s" % (n, bad[:3], r.stderr.strip()))
PY
grep -E '^(ok|FAIL|skip) ' "$tmp/bnb.log"
# The CPU trainer trains only LoRA on a 4-bit base: given that directory without -A it
# says so in one line, before reading a weight; chat (no 4-bit support) refuses it in one
# line naming quantization_config (model/hf.h).
out=$(./train_sft -e "$tmp/tiny_llama_bnb4" -i data/demo/train.bin -x 1 -o "$tmp/out" 2>&1)
rc=$?
if [ $rc -eq 1 ] && [ "$(echo "$out" | grep -c 'trains with LoRA only; pass -A R')" -eq 1 ] && [ ! -e "$tmp/out" ]; then
    echo "ok nf4_dir_refused_by_trainer_without_lora: $(echo "$out" | tail -1 | cut -c1-120)"
else
    echo "FAIL nf4_dir_refused_by_trainer_without_lora: exit $rc: $(echo "$out" | tail -1)"
    fails=$((fails + 1))
fi
out=$(./chat -e "$tmp/tiny_llama_bnb4" -k data/demo/tokenizer -g 2 -p hi 2>&1)
rc=$?
if [ $rc -eq 1 ] && [ "$(echo "$out" | grep -c 'quantization_config.*not supported yet')" -eq 1 ]; then
    echo "ok nf4_dir_refused_by_chat"
else
    echo "FAIL nf4_dir_refused_by_chat: exit $rc: $(echo "$out" | tail -1)"
    fails=$((fails + 1))
fi
if [ $(grep -c '^ok ' "$tmp/bnb.log") -ne 6 ]; then
    echo "FAIL nf4_reads_bnb_files: $(grep -v '^ok ' "$tmp/bnb.log" | grep -v kernels | tail -1)"
    fails=$((fails + 1))
fi
[ $fails -eq 0 ]
