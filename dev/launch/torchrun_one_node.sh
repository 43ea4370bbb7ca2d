#!/usr/bin/env bash
# Data-parallel GPU training on one node, one process per GPU started by torchrun
# (PyTorch's launcher; only the launcher is Python, the trainer is not: --no_python).
#   NGPU=8 DATA=/path/to/data bash dev/launch/torchrun_one_node.sh
# torchrun gives each process RANK, WORLD_SIZE, LOCAL_RANK (its GPU), MASTER_ADDR and
# MASTER_PORT; its own agent listens on MASTER_PORT, so the trainer's NCCL id exchange
# uses MASTER_PORT + 1. The underscore spellings (--nproc_per_node) are the ones every
# torchrun version accepts. -d must be a multiple of B*T*NGPU (NGPU must divide 64).
set -euo pipefail
SFT=$(cd "$(dirname "$0")/../.." && pwd)
DATA=${DATA:-$SFT/data/sft}
OUT=${OUT:-$DATA/out}
NGPU=${NGPU:-8}
MASTER_PORT=${MASTER_PORT:-29500}   # the trainer's NCCL id exchange listens on MASTER_PORT + 1
# -y 1 resumes from OUT/latest, and the trainer refuses it when there is no checkpoint yet
RESUME=0; [ -f "$OUT/latest" ] && RESUME=1
exec torchrun --nnodes 1 --nproc_per_node "$NGPU" --master_addr 127.0.0.1 --master_port "$MASTER_PORT" --no_python \
    "$SFT/train_sftcu" -i "$DATA/train.bin" -j "$DATA/val.bin" -e "$DATA/gpt2" -k "$DATA/gpt2" -o "$OUT" \
    -b 8 -t 1024 -d 524288 -l 5e-5 -u 50 -c 0.1 -v 200 -n 200 -y "$RESUME"
