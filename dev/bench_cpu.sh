#!/usr/bin/env bash
# Times one CPU training step of this trainer and of PyTorch on this machine, side
# by side, against two PyTorch builds in the same run: Debian's python3-torch 1.13
# (/usr/bin/python3, with OpenBLAS) and current PyTorch 2.x from PyPI (its oneDNN/MKL
# kernels) in the referee environment ($SFT_REFEREE_PYTHON, default
# ~/.cache/sft-train/referee-venv/bin/python: dev/requirements-referee.txt; its column
# says "-" where it is absent). For each model the three run one after the other
# (ours, torch 1.13, torch 2.x), so the two torches alternate under the same load, for GPT-2 124M (B=4, T=64), a small model (4 layers, 4 heads, 256
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
# Prints each torch's version and where its matrix products come from.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-4}
py=/usr/bin/python3
py2=${SFT_REFEREE_PYTHON:-$HOME/.cache/sft-train/referee-venv/bin/python}
"$py2" -c 'import torch' 2> /dev/null || py2=
make -s train_sft
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
v1=$($py -c 'import torch; print(torch.__version__)')
v2=$([ -n "$py2" ] && "$py2" -c 'import torch; print(torch.__version__)' || echo "-")
# Debian's torch 1.13 without libopenblas0-pthread multiplies with netlib's reference BLAS,
# about 50x slower than OpenBLAS: its column then says 0 instead of spending minutes a step
blas1=$(ldd "$($py -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))')" | sed -n 's/.*libblas.so.3 => \([^ ]*\).*/\1/p')
netlib=0
case "$(readlink -f "$blas1")" in */blas/libblas.so*) netlib=1 ;; esac
printf "%-34s %10s %14s %8s %14s %8s\n" "config ($(nproc) threads)" "ours ms" "torch $v1" "speedup" "torch $v2" "speedup"
# ours: the median step time (ms) of `./train_sft -e DESC` on random documents of V tokens
ours() {  # DESC V B T
    local desc=$1 V=$2 B=$3 T=$4
    $py dev/bench_torch.py data "$tmp/data.bin" "$V" $((B * (steps + 1))) "$T"
    rm -rf "$tmp/out"
    ./train_sft -i "$tmp/data.bin" -e "$desc" -b "$B" -t "$T" -x $((steps + 1)) -S 0 -L 1 -o "$tmp/out" > "$tmp/log"  # -L 1: a line per step
    grep '^step' "$tmp/log" | tail -n +2 | sed 's/.*| \([0-9.]*\) ms |.*/\1/' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
row() {  # name ours torch1 torch2 ("-" where absent)
    local r2="-" s2="-"
    [ "$4" != - ] && r2=$(printf "%.1f" "$4") && s2=$(printf "%.2fx" "$(echo "$4 / $2" | bc -l)")
    printf "%-34s %10.1f %14.1f %7.2fx %14s %8s\n" "$1" "$2" "$3" "$(echo "$3 / $2" | bc -l)" "$r2" "$s2"
}
torch2() {  # bench_torch.py's arguments, run by PyTorch 2.x; "-" without it
    if [ -n "$py2" ]; then "$py2" dev/bench_torch.py "$@"; else echo -; fi
}
# one model: ours, then torch 1.13, then torch 2.x
triple() {  # name DESC V B T bench_torch.py-ARGS...
    local name=$1 desc=$2 V=$3 B=$4 T=$5; shift 5
    local o t1
    o=$(ours "$desc" "$V" "$B" "$T")
    t1=$(if [ "$netlib" = 1 ]; then echo 0; else $py dev/bench_torch.py "$@"; fi)
    row "$name" "$o" "$t1" "$(torch2 "$@")"
}
run() {  # name L NH C V B T
    local name=$1 L=$2 NH=$3 C=$4 V=$5 B=$6 T=$7
    triple "$name" "d${L}c${C}h${NH}t${T}" "$V" "$B" "$T" cpu "$L" "$NH" "$C" "$V" "$B" "$T" "$steps"
}
run_llama() {  # name L NH KVH C FF V B T
    local name=$1 L=$2 NH=$3 KVH=$4 C=$5 FF=$6 V=$7 B=$8 T=$9
    triple "$name" "l${L}c${C}h${NH}k${KVH}f${FF}t${T}" "$V" "$B" "$T" cpu-llama "$L" "$NH" "$KVH" "$C" "$FF" "$V" "$B" "$T" "$steps"
}
if [ "${QWEN3:-1}" != only ]; then
    run "GPT-2 124M, B=4 T=64" 12 12 768 50257 4 64
    run "d4 C=256 V=8192, B=8 T=256" 4 4 256 8192 8 256
    run_llama "SmolLM2-135M shape, B=4 T=64" 30 9 3 576 1536 49152 4 64
fi
if [ "${QWEN3:-1}" != 0 ]; then
    triple "Qwen3-0.6B shape, B=1 T=256" l28c1024h16k8f3072a128qt256 151936 1 256 cpu-qwen3 28 16 8 1024 3072 128 151936 1 256 "$steps"
fi
echo "ours ran with $(grep '^memory' "$tmp/log" | sed 's/.*; //'); PyTorch with torch.set_num_threads($(nproc))"
# PyTorch's CPU matrix products are only as fast as the BLAS it loads: netlib's reference
# libblas (Debian's default without libopenblas0-pthread) is about 10x slower than OpenBLAS
blas=$(ldd "$($py -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))')" | sed -n 's/.*libblas.so.3 => \([^ ]*\).*/\1/p')
echo "PyTorch $v1 ($py): libblas.so.3 $(readlink -f "$blas")"
[ -z "$py2" ] || echo "PyTorch $v2 ($py2): $("$py2" -c 'import re, torch; c = torch.__config__.show(); print("BLAS " + ",".join(re.findall(r"BLAS_INFO=(\w+)", c)) + ", oneDNN " + str(torch.backends.mkldnn.is_available()) + ", CPU kernels " + torch.backends.cpu.get_cpu_capability())')"
