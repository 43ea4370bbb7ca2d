#!/usr/bin/env bash
# Where a CPU training step's time goes, against what this machine can do.
#
# 1. The machine: OpenBLAS's sgemm on 2048^3 (best of repeats; dev/bench_gemm.c loads
#    the OpenBLAS that numpy's wheel bundles in the referee environment, or Debian's
#    libopenblas, with dlopen: only this benchmark uses it).
# 2. Our gemm alone on every matrix product of the step, against OpenBLAS on the same
#    shapes (dev/bench_gemm), with BENCH_GEMM=1.
# 3. The trainer: STEPS steps of GPT-2 124M (B=4, T=64 and T=256) and of SmolLM2-135M's
#    shape (B=4, T=64) on random tokens, the median step time after the first, as
#    GFLOP/s of 6 x (matrix parameters) x tokens and as a fraction of the sgemm above;
#    and, where `perf` can sample this process, in a second run of the same steps (perf
#    slows them down), the step's time by phase (the matrix
#    kernels, their packing, attention, norms, activations, the classifier's softmax,
#    AdamW with the gradient norm, memory fills; start-up and checkpoint writing left out).
#
# Usage: bash dev/profile_step.sh [STEPS]     (default 4; ARCHFLAGS=... for another build)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-4}
py=${SFT_REFEREE_PYTHON:-$HOME/.cache/sft-train/referee-venv/bin/python}
blas=$(ls "$(dirname "$py")"/../lib/python3*/site-packages/numpy.libs/libscipy_openblas*.so 2> /dev/null | head -1 || true)
[ -n "$blas" ] || blas=$(ls /usr/lib/x86_64-linux-gnu/libopenblas.so.0 2> /dev/null || true)
make -s train_sft ${ARCHFLAGS:+ARCHFLAGS="$ARCHFLAGS"}
# OpenBLAS's fair best on this machine: its AVX-512 kernel where the CPU has AVX-512 (the
# wheel's OpenBLAS takes Zen 5 for Haswell: 230-260 GFLOP/s instead of 480 on 2048^3), its
# threads sleeping at once after a call (by default they spin for about 2^28 cycles and
# take the cores from our gemm, which runs next), and ours waiting passively as the trainer does.
# The kernel is set even over an OPENBLAS_CORETYPE in the environment (the development
# machines' says Haswell): the comparison is with the best OpenBLAS does here.
env_coretype=${OPENBLAS_CORETYPE:-}
if grep -q avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX; else unset OPENBLAS_CORETYPE; fi
export OPENBLAS_THREAD_TIMEOUT=${OPENBLAS_THREAD_TIMEOUT:-4} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
cc=${CC:-gcc}
$cc -O3 ${ARCHFLAGS:--march=native} -ffp-contract=off -fno-trapping-math -fno-math-errno -fopenmp -std=gnu11 -o dev/bench_gemm dev/bench_gemm.c -ldl -lm
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) threads; OpenBLAS: ${blas:-not found}, kernel ${OPENBLAS_CORETYPE:-its own choice}${env_coretype:+, overriding OPENBLAS_CORETYPE=$env_coretype}"
peak=0
if [ -n "$blas" ]; then
    ./dev/bench_gemm "$blas" square > "$tmp/square"
    peak=$(awk '$1 == "2048^3" { print $8 }' "$tmp/square")
    echo "OpenBLAS sgemm 2048^3: $peak GFLOP/s (ours: $(awk '$1 == "2048^3" { print $7 }' "$tmp/square"))"
fi
[ "${BENCH_GEMM:-0}" = 1 ] && ./dev/bench_gemm "$blas"
can_perf=0
if command -v perf > /dev/null && perf record -q -o "$tmp/probe.data" true > /dev/null 2>&1; then can_perf=1; fi
[ $can_perf = 1 ] || echo "(perf cannot sample here: no phase profile)"

# one configuration: NAME DESC V B T MATRIX_PARAMS
profile() {
    local name=$1 desc=$2 V=$3 B=$4 T=$5 P=$6
    /usr/bin/python3 dev/bench_torch.py data "$tmp/data.bin" "$V" $((B * (steps + 1))) "$T"
    rm -rf "$tmp/out"
    local run=(./train_sft -i "$tmp/data.bin" -e "$desc" -b "$B" -t "$T" -S 0 -L 1 -n -1 -o "$tmp/out")
    "${run[@]}" -x $((steps + 1)) > "$tmp/log"   # timed without perf: sampling slows the step by about 12%
    local ms
    ms=$(grep '^step' "$tmp/log" | tail -n +2 | sed 's/.*| \([0-9.]*\) ms |.*/\1/' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    awk -v n="$name" -v ms="$ms" -v P="$P" -v tok=$((B * T)) -v peak="$peak" 'BEGIN {
        gf = 6 * P * tok / (ms / 1000) / 1e9
        printf "\n%s: %.0f ms a step (median of steps 2-%d), %.1f GFLOP/s", n, ms, '"$steps"' + 1, gf
        if (peak > 0) printf " = %.2f of OpenBLAS sgemm", gf / peak
        printf "\n" }'
    [ $can_perf = 1 ] || return 0
    # The steps' samples alone: the same run with one step, under perf too, subtracted
    # symbol by symbol (start-up, the first step and the final save are the same in both)
    local k
    for k in 1 $((steps + 1)); do
        rm -rf "$tmp/out"
        perf record -q -F 999 -o "$tmp/perf$k.data" "${run[@]}" -x "$k" > "$tmp/perflog$k" 2>&1
        perf report -i "$tmp/perf$k.data" --no-children --sort dso,symbol -n --percent-limit 0 2> /dev/null |
            awk '/^ +[0-9.]+%/ { print $3, $5, $2 }' > "$tmp/samples$k"
    done
    local perf_ms
    perf_ms=$(grep '^step' "$tmp/perflog$((steps + 1))" | tail -n +2 | sed 's/.*| \([0-9.]*\) ms |.*/\1/' | awk '{s += $1} END {print s}')
    awk -v steps="$steps" -v wall="$perf_ms" -v threads="$(nproc)" '
        FNR == NR { one[$1 " " $2] = $3; next }
        {
            dso = $1; sym = $2; n = $3 - one[dso " " sym]
            if (dso ~ /kernel/) next  # start-up page clearing in the kernel varies by seconds from run to run
            if (sym ~ /gemm_micro/) p = "matrix kernels"
            else if (sym ~ /^gemm/) p = "packing (gemm tiles)"
            else if (sym ~ /attention/) p = "attention"
            else if (sym ~ /norm_(forward|backward)|rope/) p = "norms, rotary"
            else if (sym ~ /gelu|swiglu|geglu|residual|matmul_backward|encoder/) p = "activations, residual, biases, embeddings"
            else if (sym ~ /crossentropy|classifier/) p = "classifier softmax"
            else if (sym ~ /adamw|sum_of_squares/) p = "AdamW and gradient norm"
            else if (sym ~ /memset|memmove|memcpy/) p = "memory fills and copies"
            else if (dso ~ /libgomp/) p = "OpenMP (threads waiting at barriers, spinning)"
            else p = "other"
            t[p] += n; total += n
        }
        END {
            printf "    the %d steps under perf: %.0f ms of threads x wall time, %.0f ms of it sampled in our code and its libraries\n", steps, threads * wall, total / 0.999
            for (p in t) printf "    %5.1f%%  %6.1f ms a step  %s\n", 100 * t[p] / (threads * wall * 0.999), t[p] / 0.999 / steps, p
            printf "    %5.1f%%  %6.1f ms a step  the kernel, or threads asleep (passive wait)\n", 100 * (1 - total / (threads * wall * 0.999)), (threads * wall - total / 0.999) / steps
        }' "$tmp/samples1" "$tmp/samples$((steps + 1))" > "$tmp/phases"
    grep '^    the' "$tmp/phases"
    grep -v '^    the' "$tmp/phases" | sort -rn
}
profile "GPT-2 124M, B=4 T=64" d12c768h12t64 50257 4 64 123532032
profile "GPT-2 124M, B=4 T=256" d12c768h12t256 50257 4 256 123532032
profile "SmolLM2-135M shape, B=4 T=64" l30c576h9k3f1536t64 49152 4 64 134479872
echo
echo "ran with $(grep '^memory' "$tmp/log" | sed 's/.*; //'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
