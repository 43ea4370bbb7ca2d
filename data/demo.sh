#!/usr/bin/env bash
# The demo: trains a small GPT-2 from scratch on the shipped synthetic tasks
# (data/demo/, made by data/make_demo.sh: addition and subtraction, both with
# their working written out, reversing a word and sorting its letters, as chat
# conversations), then scores the model on 200 held-out prompts before and
# after training, per task, and asks it a few of them with ./chat.
# About two minutes of training on 2 CPU cores, three minutes in all (docs/demo.md).
# Usage: bash data/demo.sh [OUTDIR [SEED]]   (default out/demo, seed 1337)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/demo}
seed=${2:-1337}
make -s train_sft chat
D=data/demo
MODEL=(-e d4c64h2t128 -z "$seed")
TASKS="add subtract reverse sort"

# Per-task exact match of a model on the eval set, with ./chat: prints "TASK RIGHT TOTAL"
# lines and "all RIGHT TOTAL". The eval rows carry their task; ./chat answers them in
# order and marks each [right; ...] or [wrong; ...].
score() {
    ./chat -e "$1" -k $D/tokenizer -f $D/eval.jsonl -g 48 > "$2"
    sed -n 's/^{"task":"\([a-z]*\)".*/\1/p' $D/eval.jsonl > "$2.tasks"
    grep -E '^  \[(right|wrong); expected: ' "$2" | cut -c4-8 > "$2.marks"
    if [ "$(wc -l < "$2.tasks")" -ne "$(wc -l < "$2.marks")" ]; then
        echo "demo.sh: $2: $(wc -l < "$2.marks") marked answers for $(wc -l < "$2.tasks") eval rows" >&2; exit 1
    fi
    paste "$2.tasks" "$2.marks" | awk '{ n[$1]++; n["all"]++; if ($2 == "right") { r[$1]++; r["all"]++ } }
                                     END { for (t in n) print t, r[t] + 0, n[t] }'
}

# The untrained model: one step at learning rate 0 saves the initial weights (same seed).
mkdir -p "$out"
./train_sft -i $D/train.bin "${MODEL[@]}" -b 8 -t 128 -l 0 -x 1 -o "$out/untrained" > "$out/untrained.log"
before=$(score "$out/untrained/$(cat "$out/untrained/latest")" "$out/before.txt")

TIMEFORMAT="%R %U %S"
# (the held-out prompts are scored below, with ./chat, outside the timed run)
{ time ./train_sft -i $D/train.bin -j $D/val.bin "${MODEL[@]}" \
    -b 8 -t 128 -l 6e-3 -u 40 -q 0 -x 4500 -c 0.1 -v 1500 -o "$out" ; } 2> "$out/time.txt"
read -r wall user sys < <(tail -1 "$out/time.txt")
model="$out/$(cat "$out/latest")"
after=$(score "$model" "$out/after.txt")

pct() { awk -v r="$1" -v n="$2" 'BEGIN { printf "%5.1f%%", 100 * r / n }'; }
echo
echo "summary | training: $wall s wall, $(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.0f", u + s }') s CPU (user+sys); answers in $out/after.txt"
echo "summary | exact match on the $(wc -l < $D/eval.jsonl) held-out prompts, before -> after training:"
for t in $TASKS all; do
    read -r _ r0 n0 < <(echo "$before" | grep "^$t ")
    read -r _ r1 n1 < <(echo "$after" | grep "^$t ")
    printf 'summary |   %-8s %3d/%-3d %s  ->  %3d/%-3d %s\n' "$t" "$r0" "$n0" "$(pct "$r0" "$n0")" "$r1" "$n1" "$(pct "$r1" "$n1")"
done

# The closing chat: the first held-out prompt of each task, asked with ./chat.
echo
for t in $TASKS; do grep -m1 "^{\"task\":\"$t\"" $D/eval.jsonl; done > "$out/chat.jsonl"
./chat -e "$model" -k $D/tokenizer -f "$out/chat.jsonl" -g 48 | sed 's/^/chat  | /'
