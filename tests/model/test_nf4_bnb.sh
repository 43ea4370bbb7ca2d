#!/usr/bin/env bash
# tests/model/test_nf4_bnb.sh: dev/ref_nf4.py (the NF4 reference model/nf4.h is checked
# against) run in the referee environment, where bitsandbytes 0.50.2 is importable: its
# self-checks, and its cross-checks against bitsandbytes' own NF4 table, dynamic map,
# quantize_4bit (CPU backend; where that backend departs from the CUDA kernel, it departs
# only as ref_nf4.py's cross_check_bnb says), dequantize_4bit and QuantState's packed keys
# and JSON; and the cases it writes there, under torch 2, are the committed ones byte for
# byte. About 15 s of CPU, nearly all of it importing torch and bitsandbytes (which pulls
# in torch.compile's machinery).
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
[ $fails -eq 0 ]
