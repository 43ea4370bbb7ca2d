#!/usr/bin/env bash
# How the CPU trainer's OpenMP settings behave when the machine is shared: times a
# 60-step run of the demo's model (d4c128h4t128, B=16, T=128) on data/demo with
# each setting, on its own and next to one busy process (`yes > /dev/null`, one
# core's worth of load). Prints the median wall time of REPEATS runs per cell.
# Usage: bash dev/bench_shared.sh [REPEATS]     (default 5; builds train_sft)
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-5}
make -s train_sft
tmp=$(mktemp -d)
busy_pid=
trap '[ -n "$busy_pid" ] && kill "$busy_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
cp train_sft "$tmp/train_sft"  # the binary measured, whatever is rebuilt meanwhile
D=data/demo
one_run() {  # env assignments...: prints the run's wall time in seconds
    local t0 t1
    t0=$(date +%s.%N)
    env "$@" "$tmp/train_sft" -i $D/train.bin -e d4c128h4t128 -b 16 -t 128 -l 3e-3 -u 20 -x 60 -c 0.1 -o "$tmp/out" > "$tmp/log"
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# name|environment (each setting is explicit, so the binary's own default does not matter,
# except in the last row, which runs with nothing set)
settings=(
  "libgomp default (spin 300000)|GOMP_SPINCOUNT=300000"
  "OMP_WAIT_POLICY=passive|OMP_WAIT_POLICY=passive"
  "GOMP_SPINCOUNT=10000|GOMP_SPINCOUNT=10000"
  "OMP_NUM_THREADS=1|OMP_NUM_THREADS=1 GOMP_SPINCOUNT=300000"
  "train_sft's default (nothing set)|"
)
printf "%-36s %10s %10s   (median s of %d runs, %d CPUs, 60 steps)\n" "setting" "quiet" "busy" "$reps" "$(nproc)"
for s in "${settings[@]}"; do
    name=${s%%|*}; envs=${s#*|}
    quiet=(); busy=()
    for r in $(seq "$reps"); do
        quiet+=("$(one_run $envs)")
        yes > /dev/null & busy_pid=$!
        busy+=("$(one_run $envs)")
        kill "$busy_pid"; wait "$busy_pid" 2>/dev/null || true; busy_pid=
    done
    printf "%-36s %10.2f %10.2f   quiet: %s  busy: %s\n" "$name" "$(printf '%s\n' "${quiet[@]}" | median)" \
        "$(printf '%s\n' "${busy[@]}" | median)" "${quiet[*]}" "${busy[*]}"
done
