#!/usr/bin/env bash
# Times one CPU training step of this trainer and of PyTorch on this machine, side
# by side, for GPT-2 124M (B=4, T=64), a small model (4 layers, 4 heads, 256
# channels, vocab 8192, B=8, T=256) and a Llama-architecture model of SmolLM2-135M's
# shape (30 layers, 576 channels, 9 heads, 3 key/value heads, MLP 1536, vocab 49152,
# tied head; B=4, T=64) and a Qwen3 of Qwen3-0.6B's shape (28 layers, 1024 channels, 16
# heads of 128, 8 key/value heads, MLP 3072, q/k norms, vocab 151936, tied head; B=1, T=256:
# about 10 GB for each trainer, one after the other; QWEN3=0 leaves it out, QWEN3=only runs
# only it). Every
# position is a target in both. Prints
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
# ours: the median step time (ms) of `./train_sft -e DESC` on random documents of V tokens
ours() {  # DESC V B T
    local desc=$1 V=$2 B=$3 T=$4
    $py dev/bench_torch.py data "$tmp/data.bin" "$V" $((B * (steps + 1))) "$T"
    rm -rf "$tmp/out"
    ./train_sft -i "$tmp/data.bin" -e "$desc" -b "$B" -t "$T" -x $((steps + 1)) -S 0 -L 1 -o "$tmp/out" > "$tmp/log"  # -L 1: a line per step
    grep '^step' "$tmp/log" | tail -n +2 | sed 's/.*| \([0-9.]*\) ms |.*/\1/' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
row() {  # name ours theirs
    printf "%-34s %12.1f %12.1f %7.2fx\n" "$1" "$2" "$3" "$(echo "$3 / $2" | bc -l)"
}
run() {  # name L NH C V B T
    local name=$1 L=$2 NH=$3 C=$4 V=$5 B=$6 T=$7
    row "$name" "$(ours "d${L}c${C}h${NH}t${T}" "$V" "$B" "$T")" "$($py dev/bench_torch.py cpu "$L" "$NH" "$C" "$V" "$B" "$T" "$steps")"
}
run_llama() {  # name L NH KVH C FF V B T
    local name=$1 L=$2 NH=$3 KVH=$4 C=$5 FF=$6 V=$7 B=$8 T=$9
    row "$name" "$(ours "l${L}c${C}h${NH}k${KVH}f${FF}t${T}" "$V" "$B" "$T")" \
        "$($py dev/bench_torch.py cpu-llama "$L" "$NH" "$KVH" "$C" "$FF" "$V" "$B" "$T" "$steps")"
}
if [ "${QWEN3:-1}" != only ]; then
    run "GPT-2 124M, B=4 T=64" 12 12 768 50257 4 64
    run "d4 C=256 V=8192, B=8 T=256" 4 4 256 8192 8 256
    run_llama "SmolLM2-135M shape, B=4 T=64" 30 9 3 576 1536 49152 4 64
fi
if [ "${QWEN3:-1}" != 0 ]; then
    row "Qwen3-0.6B shape, B=1 T=256" "$(ours l28c1024h16k8f3072a128qt256 151936 1 256)" \
        "$($py dev/bench_torch.py cpu-qwen3 28 16 8 1024 3072 128 151936 1 256 "$steps")"
fi
echo "ours ran with $(grep '^memory' "$tmp/log" | sed 's/.*; //'); PyTorch with torch.set_num_threads($(nproc))"
# PyTorch's CPU matrix products are only as fast as the BLAS it loads: netlib's reference
# libblas (Debian's default without libopenblas0-pthread) is about 10x slower than OpenBLAS
blas=$(ldd "$($py -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))')" | sed -n 's/.*libblas.so.3 => \([^ ]*\).*/\1/p')
echo "PyTorch's libblas.so.3: $(readlink -f "$blas")"
