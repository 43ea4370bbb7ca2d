#!/usr/bin/env bash
# Data-parallel GPU training on several nodes with torchrun: run this once on every node,
# with the same MASTER_ADDR (node 0's address, reachable from all nodes) and its own
# NODE_RANK (0 on the node at MASTER_ADDR):
#   NODE_RANK=0 MASTER_ADDR=10.0.0.1 NNODES=2 NGPU=8 DATA=/shared/sft bash dev/launch/torchrun_nodes.sh
#   NODE_RANK=1 MASTER_ADDR=10.0.0.1 NNODES=2 NGPU=8 DATA=/shared/sft bash dev/launch/torchrun_nodes.sh
# torchrun's agent listens on MASTER_PORT on node 0; the trainer's NCCL id exchange uses
# MASTER_PORT + 1 there: both ports must be open between the nodes. The repository must
# be at the same path on every node, DATA and OUT on a filesystem all of them mount.
# -d must be a multiple of B*T*NNODES*NGPU (8*1024*16 here).
set -euo pipefail
SFT=$(cd "$(dirname "$0")/../.." && pwd)
DATA=${DATA:-/shared/sft}
OUT=${OUT:-$DATA/out}
NNODES=${NNODES:-2}
NGPU=${NGPU:-8}
NODE_RANK=${NODE_RANK:?set NODE_RANK: 0 on the node at MASTER_ADDR, 1, 2, ... on the others}
MASTER_ADDR=${MASTER_ADDR:?set MASTER_ADDR: node 0 address}
MASTER_PORT=${MASTER_PORT:-29500}
# -y 1 resumes from OUT/latest, and the trainer refuses it when there is no checkpoint yet
RESUME=0; [ -f "$OUT/latest" ] && RESUME=1
exec torchrun --nnodes "$NNODES" --node_rank "$NODE_RANK" --nproc_per_node "$NGPU" \
    --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" --no_python \
    "$SFT/train_sftcu" -i "$DATA/train.bin" -j "$DATA/val.bin" -e "$DATA/gpt2" -k "$DATA/gpt2" -o "$OUT" \
    -b 8 -t 1024 -d 524288 -l 5e-5 -u 50 -c 0.1 -v 200 -n 200 -y "$RESUME"
