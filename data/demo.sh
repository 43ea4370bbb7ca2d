#!/usr/bin/env bash
# The demo: trains a small GPT-2 from scratch on the shipped synthetic tasks
# (data/demo/, made by data/make_demo.sh: addition, reversing, sorting and
# counting letters, as chat conversations) and reports exact-match accuracy on
# 200 held-out prompts before and after training, then asks the trained model a
# few questions with ./chat. A few minutes on 2 CPU cores.
# Usage: bash data/demo.sh [OUTDIR]          (default out/demo)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/demo}
make -s train_sft chat
D=data/demo
start=$(date +%s)
./train_sft -i $D/train.bin -j $D/val.bin -k $D/tokenizer -E $D/eval.jsonl \
    -e d4c128h4t128 -b 16 -t 128 -l 3e-3 -u 20 -x 800 -c 0.1 -v 200 -a 400 -g 16 -o "$out"
echo "demo  | trained in $(( $(date +%s) - start )) s; accuracy per step is in $out/metrics.jsonl"
model="$out/$(cat "$out/latest")"
for q in "What is 23+45?" 'Reverse "SMILE".' 'Sort the letters of "DCBA".' 'Count the letter "A" in "BANANA".'; do
    printf 'chat  | %s  ->  ' "$q"
    ./chat -e "$model" -k $D/tokenizer -p "$q"
done
