#!/usr/bin/env bash
# Regenerates the committed demo dataset in data/demo/ (deterministic: the same
# files every run):
#   train.jsonl  16000 synthetic task conversations (make_tasks, seed 1)
#   eval.jsonl   200 held-out {"task","prompt","completion"} pairs (prompts not in train.jsonl)
#   tokenizer/   a small BPE tokenizer (./tok train) trained on the fixed wording of
#                the training prompts and answers, so digits and task letters stay
#                single tokens
#   train.bin, val.bin   ./prepare output (about 5% of the rows go to val.bin)
# Usage: bash data/make_demo.sh [DIR]   (default data/demo; tests/data/test_prepare.sh
# regenerates into a temporary DIR and compares with the committed files)
set -euo pipefail
cd "$(dirname "$0")/.."
make -s make_tasks tok prepare
D=${1:-data/demo}
mkdir -p "$D"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
./make_tasks --train-out "$D/train.jsonl" --eval-out "$D/eval.jsonl" --corpus-out "$tmp/corpus.txt" \
    --n-train 16000 --n-eval 200 --seed 1 --max-digits 2
rm -rf "$D/tokenizer"
./tok train --vocab-size 512 --out "$D/tokenizer" "$tmp/corpus.txt"
./prepare --tokenizer "$D/tokenizer" --out "$D/train.bin" --val-out "$D/val.bin" --val-fraction 0.05 --seed 1 \
    --pack-T 128 --show 2 "$D/train.jsonl"
du -ch "$D"/* | tail -1
