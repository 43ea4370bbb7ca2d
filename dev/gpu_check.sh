#!/usr/bin/env bash
# Everything that needs a GPU, as one prepared run for a session lent one (see the
# device tool): builds for sm_90, runs the GPU tests and the dev/cuda kernel checks,
# checks that transformers loads our export, and benchmarks GPT-2 124M (12 layers,
# 768 channels, T=1024, vocab 50257 padded to 50304, bf16) per recompute level
# against PyTorch (torch.compile, fused AdamW, flash attention) on the same machine.
# Prints a short table at the end. Usage: bash dev/gpu_check.sh [B] [STEPS]
set -u
cd "$(dirname "$0")/.."
B=${1:-16}
steps=${2:-12}
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
line() { printf '%s\n' "$*" | tee -a "$tmp/summary"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "== build (sm_90)"
make -s train_sft train_sftcu train_sftcu_fp32 test_sftcu test_sftcu_bf16 CUDA_ARCH=sm_90 || { echo "FAIL build"; exit 1; }
echo "== GPU trainer against the CPU trainer"
./test_sftcu 2>&1 | tee "$tmp/t1"; ./test_sftcu_bf16 2>&1 | tee "$tmp/t2"
line "tests: $(cat "$tmp/t1" "$tmp/t2" | grep -c '^ok') ok, $(cat "$tmp/t1" "$tmp/t2" | grep -c '^FAIL') FAIL"
if [ -f dev/cuda/Makefile ]; then
    echo "== dev/cuda kernel checks"
    for p in BF16 FP32; do
        make -s -C dev/cuda ARCH=sm_90 PRECISION=$p run 2>&1 | tee -a "$tmp/k"
    done
    line "kernel checks: $(grep -c '^ok' "$tmp/k") ok, $(grep -c '^FAIL' "$tmp/k") FAIL"
fi
echo "== Hugging Face export"
./train_sftcu -i dev/ref/tiny_train.bin -e d2c64h2t32 -b 2 -t 32 -x 2 -o "$tmp/export" > /dev/null 2>&1 &&
    $py dev/check_hf_export.py "$tmp/export/step_00000002" | tee -a "$tmp/summary"
echo "== benchmark: GPT-2 124M, B=$B, T=1024, bf16, $steps steps (median after 2)"
$py dev/bench_torch.py data "$tmp/bench.bin" 50304 $((B * (steps + 1))) 1024
N=124475904   # parameters of GPT-2 124M with the vocabulary padded to 50304
flops_per_token=$((6 * N + 6 * 12 * 768 * 1024))   # 6N + causal attention (6 L C T)
peak=989e12
printf '%-22s %10s %10s %8s %12s\n' "run" "ms/step" "tok/s" "MFU" "peak MiB" | tee -a "$tmp/summary"
for r in 0 1 2; do
    ./train_sftcu -i "$tmp/bench.bin" -e d12 -b "$B" -t 1024 -x "$steps" -S 0 -r $r -o "$tmp/b$r" > "$tmp/log$r" 2>&1 || { tail -3 "$tmp/log$r"; continue; }
    ms=$(grep '^step' "$tmp/log$r" | tail -n +3 | sed 's/.*| \([0-9.]*\) ms |.*/\1/' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    mem=$(grep 'peak in use' "$tmp/log$r" | sed 's/.*peak in use \([0-9.]*\) MiB.*/\1/')
    tps=$(awk "BEGIN {print $B * 1024 * 1000 / $ms}")
    printf '%-22s %10.1f %10.0f %7.1f%% %12s\n' "train_sftcu -r $r" "$ms" "$tps" "$(awk "BEGIN {print 100 * $tps * $flops_per_token / $peak}")" "$mem" | tee -a "$tmp/summary"
    [ $r -eq 0 ] && ours=$tps
done
tms=$($py dev/bench_torch.py gpu 12 12 768 50304 "$B" 1024 "$steps")
ttps=$(awk "BEGIN {print $B * 1024 * 1000 / $tms}")
printf '%-22s %10.1f %10.0f %7.1f%% %12s\n' "PyTorch (compile)" "$tms" "$ttps" "$(awk "BEGIN {print 100 * $ttps * $flops_per_token / $peak}")" "-" | tee -a "$tmp/summary"
[ -n "${ours:-}" ] && line "ours / PyTorch tokens/s: $(awk "BEGIN {printf \"%.2f\", $ours / $ttps}")"
echo "== summary"
cat "$tmp/summary"
