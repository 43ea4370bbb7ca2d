#!/usr/bin/env bash
# Times one CPU training step of this trainer with LoRA (rank R on every linear layer of
# attention and MLP, the base frozen) against the full fine-tuning step of the same
# model, in one run, for a Llama-architecture model of SmolLM2-135M's shape (30 layers,
# 576 channels, 9 heads, 3 key/value heads, MLP 1536, vocab 49152, tied head; B=4, T=64)
# and, with QWEN3=1, Qwen3-0.6B's (28 layers, 1024 channels, 16 heads of 128, 8 key/value
# heads, MLP 3072, q/k norms, vocab 151936, tied head; B=2, T=64; about 10 GB for the
# full step). Every position is a target. Then PyTorch with the same LoRA (dev/bench_torch.py
# cpu-llama/cpu-qwen3 ... lora=R: rank R on q,k,v,o,gate,up,down, alpha 8, base frozen, AdamW
# over the adapters), same B and T, one after the other in the same run. Prints the median
# ms per step (after a warm-up step) of each, full over LoRA, PyTorch's LoRA over ours, and
# the memory lines of our two runs.
# Usage: bash dev/bench_lora.sh [STEPS] [RANK]   (needs python3-torch for the data; builds train_sft)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-4}
rank=${2:-16}
py=/usr/bin/python3
make -s train_sft
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the median step time (ms) of `./train_sft -e DESC FLAGS` on random documents of V tokens; the memory line to $tmp/mem
ours() {  # DESC V B T FLAGS...
    local desc=$1 V=$2 B=$3 T=$4
    shift 4
    $py dev/bench_torch.py data "$tmp/data.bin" "$V" $((B * (steps + 1))) "$T"
    rm -rf "$tmp/out"
    ./train_sft -i "$tmp/data.bin" -e "$desc" -b "$B" -t "$T" -x $((steps + 1)) -S 0 -n -1 -o "$tmp/out" "$@" > "$tmp/log"
    grep '^memory' "$tmp/log" | sed 's/^memory| per rank: //; s/; [0-9]* threads.*//' >> "$tmp/mem"
    grep '^step' "$tmp/log" | tail -n +2 | sed 's/.*| \([0-9.]*\) ms |.*/\1/' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
printf "%-34s %12s %12s %8s %14s %10s\n" "config ($(nproc) threads, R=$rank)" "full ms" "LoRA ms" "ratio" "torch LoRA ms" "torch/ours"
row() {  # name DESC V B T TORCH_MODE TORCH_ARGS...   (TORCH_ARGS: the model's shape up to VOCAB)
    local name=$1 desc=$2 V=$3 B=$4 T=$5 mode=$6
    shift 6
    : > "$tmp/mem"
    local full lora torch
    full=$(ours "$desc" "$V" "$B" "$T")
    lora=$(ours "$desc" "$V" "$B" "$T" -A "$rank")
    torch=$($py dev/bench_torch.py "$mode" "$@" "$B" "$T" "$steps" "lora=$rank")
    printf "%-34s %12.1f %12.1f %7.2fx %14.1f %9.2fx\n" "$name" "$full" "$lora" "$(echo "$full / $lora" | bc -l)" \
        "$torch" "$(echo "$torch / $lora" | bc -l)"
    sed -n '1s/^/    full: /p; 2s/^/    LoRA: /p' "$tmp/mem"
}
row "SmolLM2-135M shape, B=4 T=64" l30c576h9k3f1536t64 49152 4 64 cpu-llama 30 9 3 576 1536 49152
if [ "${QWEN3:-0}" = 1 ]; then
    row "Qwen3-0.6B shape, B=2 T=64" l28c1024h16k8f3072a128qt64 151936 2 64 cpu-qwen3 28 16 8 1024 3072 128 151936
fi
echo "ours ran with $(grep '^memory' "$tmp/log" | sed 's/.*; //'); PyTorch with torch.set_num_threads($(nproc))"
