#!/usr/bin/env bash
# dev/bench_dist.sh [REPEATS] [STEPS]: the CPU trainer's step time on 1 process against
# 2 MPI ranks with the same global batch (-d), and the share of the 2-rank step spent in
# the collectives (train_sft's closing "ranks |" line: time inside the reduce-scatter,
# all-gather and sums, waiting for the slower rank included).
# The demo's data with the earlier demo's model shape (d4c128h4t128), B=8, T=128, -d = 2 micro-batches per
# step in all: 1 process with OMP_NUM_THREADS=2 computes both, each of 2 ranks with
# OMP_NUM_THREADS=1 computes one. Prints every command it runs, then medians of REPEATS
# (default 3) runs of STEPS (default 10) steps each; the two setups take turns.
set -eu
cd "$(dirname "$0")/.."
repeats=${1:-3}; steps=${2:-10}
make -s train_sft train_sft_mpi
tmp=$(mktemp -d /tmp/bench_dist.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
flags="-i data/demo/train.bin -e d4c128h4t128 -b 8 -t 128 -d 2048 -x $steps -v 0 -S 1"
one="env OMP_NUM_THREADS=2 ./train_sft $flags -o $tmp/one"
two="mpirun -np 2 --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 ./train_sft_mpi $flags -o $tmp/two"
echo "1 process: $one"
echo "2 ranks:   $two"
# ms per step from the closing "tokens/s during steps" (2048 tokens per step)
ms_per_step() { sed -n 's/.*; \([0-9.]*\) tokens\/s during steps.*/\1/p' "$1" | awk '{ printf "%.1f\n", 2048 / $1 * 1000 }'; }
for ((i = 1; i <= repeats; i++)); do
    rm -rf "$tmp/one" "$tmp/two"
    $one > "$tmp/one.log" 2>&1
    $two > "$tmp/two.log" 2>&1
    a=$(ms_per_step "$tmp/one.log"); b=$(ms_per_step "$tmp/two.log")
    c=$(sed -n 's/^ranks | \([0-9.]*\)% of this run.*/\1/p' "$tmp/two.log")
    echo "run $i: 1 process $a ms/step, 2 ranks $b ms/step, collectives $c% of the 2-rank step"
    echo "$a" >> "$tmp/a"; echo "$b" >> "$tmp/b"; echo "$c" >> "$tmp/c"
done
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "median of $repeats: 1 process $(median "$tmp/a") ms/step, 2 ranks $(median "$tmp/b") ms/step, collectives $(median "$tmp/c")% of the 2-rank step"
