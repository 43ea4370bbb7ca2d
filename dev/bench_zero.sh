#!/usr/bin/env bash
# dev/bench_zero.sh [STEPS]: the CPU trainer's step time and per-rank memory at each ZeRO
# stage (-Z 0, 1, 2, 3) for 2 MPI ranks of a Llama-architecture model of SmolLM2-135M's shape
# (dev/bench_cpu.sh's l30c576h9k3f1536, vocab 49152, tied head) on random documents, B=2,
# T=64, 2 micro-batches per rank (-d 512), one OpenMP thread per rank. Prints per stage the
# memory| line (what each rank holds, by the trainer's own accounting), each rank's peak
# resident memory (/usr/bin/time's maximum RSS) and the median ms per step after the first
# (the warm-up), with the share of the step spent in collectives. About 4 minutes on 2 cores.
set -eu
cd "$(dirname "$0")/.."
steps=${1:-3}
make -s train_sft_mpi
tmp=$(mktemp -d /tmp/bench_zero.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 dev/bench_torch.py data "$tmp/data.bin" 49152 $((8 * steps)) 64
for z in 0 1 2 3; do
    # each rank under /usr/bin/time, its report named by the rank mpirun gives it
    mpirun -np 2 --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 \
        bash -c 'exec /usr/bin/time -f "rank $OMPI_COMM_WORLD_RANK peak RSS %M kB" -o "$0.$OMPI_COMM_WORLD_RANK" "$@"' "$tmp/rss$z" \
        ./train_sft_mpi -i "$tmp/data.bin" -e l30c576h9k3f1536 -b 2 -t 64 -d 512 -x "$steps" -S 0 -L 1 -v 0 -n -1 -Z $z -o "$tmp/out$z" > "$tmp/log$z" 2>&1 ||
        { echo "-Z $z failed: $(grep -m1 error "$tmp/log$z")"; continue; }
    # ms per step from metrics.jsonl's tokens_per_s (512 tokens a step), the first step left out
    ms=$(grep -o '"tokens_per_s": [0-9.]*' "$tmp/out$z/metrics.jsonl" | tail -n +2 | awk '{ print 512 / $2 * 1000 }' | sort -g |
         awk '{ a[NR] = $1 } END { printf "%.0f", a[int((NR + 1) / 2)] }')
    echo "-Z $z: $(grep '^memory|' "$tmp/log$z" | sed 's/; [0-9]* threads.*//')"
    echo "-Z $z: median $ms ms/step; $(sed -n 's/^ranks | \([0-9.]*%\) of this run.*/collectives \1 of the step time/p' "$tmp/log$z"); $(cat "$tmp"/rss$z.* | tr '\n' ' ')"
done
