#!/usr/bin/env bash
# How the CPU trainer's OpenMP settings behave when the machine is shared: times a
# 60-step run of the earlier demo's model (d4c128h4t128, B=16, T=128) on data/demo with
# each setting, as the machine is ("quiet") and next to one more busy process
# (`yes > /dev/null`, a core's worth of load: "busy"). The settings take turns
# within each repeat, so that they all see the same changes in the machine's load.
# Prints the median wall time per cell and every time measured; a run longer than
# LIMIT seconds is stopped and counted as LIMIT.
# Usage: bash dev/bench_shared.sh [REPEATS] [LIMIT]     (default 3, 300; builds train_sft)
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
limit=${2:-300}
make -s train_sft
tmp=$(mktemp -d)
busy_pid=
trap '[ -n "$busy_pid" ] && kill "$busy_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
cp train_sft "$tmp/train_sft"  # the binary measured, whatever is rebuilt meanwhile
D=data/demo
one_run() {  # env assignments...: prints the run's wall time in seconds
    local t0 t1
    t0=$(date +%s.%N)
    env "$@" timeout "$limit" "$tmp/train_sft" -i $D/train.bin -e d4c128h4t128 -b 16 -t 128 -l 3e-3 -u 20 -x 60 -c 0.1 \
        -o "$tmp/out" > "$tmp/log" || true
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l | xargs printf "%.1f\n"
}
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# name|environment: each setting explicit, so train_sft's own default does not
# matter, except in the last row, which runs with nothing set
settings=(
  "libgomp default (spin 300000)|GOMP_SPINCOUNT=300000"
  "OMP_NUM_THREADS=1|OMP_NUM_THREADS=1 GOMP_SPINCOUNT=300000"
  "OMP_WAIT_POLICY=passive|OMP_WAIT_POLICY=passive"
  "train_sft default (nothing set)|"
)
declare -A quiet busy
for r in $(seq "$reps"); do
    for i in "${!settings[@]}"; do
        envs=${settings[$i]#*|}
        quiet[$i]+="$(one_run $envs) "
        yes > /dev/null & busy_pid=$!
        busy[$i]+="$(one_run $envs) "
        kill "$busy_pid"; wait "$busy_pid" 2>/dev/null || true; busy_pid=
    done
done
echo "60 steps of d4c128h4t128 B=16 T=128 on $(nproc) CPUs; train_sft's line: $(grep '^memory' "$tmp/log" | sed 's/.*; //')"
printf "%-34s %8s %8s   %s\n" "setting (median s of $reps)" "quiet" "busy" "all runs: quiet | busy"
for i in "${!settings[@]}"; do
    printf "%-34s %8s %8s   %s| %s\n" "${settings[$i]%%|*}" "$(median <<< "${quiet[$i]}")" "$(median <<< "${busy[$i]}")" "${quiet[$i]}" "${busy[$i]}"
done
