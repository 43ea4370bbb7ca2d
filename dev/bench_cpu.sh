#!/usr/bin/env bash
# Times one CPU training step of this trainer and of PyTorch on this machine, side
# by side, for GPT-2 124M (B=4, T=64) and a small model (4 layers, 4 heads, 256
# channels, vocab 8192, B=8, T=256). Every position is a target in both. Prints
# the median ms per step (after a warm-up step) and PyTorch's time over ours, and the
# thread count and OpenMP wait policy our trainer ran with (it reports them itself).
# Usage: bash dev/bench_cpu.sh [STEPS]      (needs python3-torch; builds train_sft)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-4}
py=/usr/bin/python3
make -s train_sft
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf "%-34s %12s %12s %8s\n" "config ($(nproc) threads)" "ours ms" "torch ms" "speedup"
run() {  # name L NH C V B T
    local name=$1 L=$2 NH=$3 C=$4 V=$5 B=$6 T=$7
    $py dev/bench_torch.py data "$tmp/data.bin" "$V" $((B * (steps + 1))) "$T"
    ./train_sft -i "$tmp/data.bin" -e "d${L}c${C}h${NH}t${T}" -b "$B" -t "$T" -x $((steps + 1)) -S 0 -o "$tmp/out" > "$tmp/log"
    ours=$(grep '^step' "$tmp/log" | tail -n +2 | sed 's/.*| \([0-9.]*\) ms |.*/\1/' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    theirs=$($py dev/bench_torch.py cpu "$L" "$NH" "$C" "$V" "$B" "$T" "$steps")
    printf "%-34s %12.1f %12.1f %7.2fx\n" "$name" "$ours" "$theirs" "$(echo "$theirs / $ours" | bc -l)"
}
run "GPT-2 124M, B=4 T=64" 12 12 768 50257 4 64
run "d4 C=256 V=8192, B=8 T=256" 4 4 256 8192 8 256
echo "ours ran with $(grep '^memory' "$tmp/log" | sed 's/.*; //'); PyTorch with torch.set_num_threads($(nproc))"
