#!/usr/bin/env bash
# Data-parallel GPU training on one node: one rank per GPU, started by Open MPI's mpirun.
#   NGPU=8 DATA=/path/to/data bash dev/launch/mpirun_one_node.sh
# DATA holds train.bin, val.bin and gpt2/ (Hugging Face GPT-2: the model and its
# tokenizer); checkpoints go to OUT. Each rank reads its rank, the world size and its GPU
# (local rank) from OMPI_COMM_WORLD_*; train_sftcu_mpi (the GPU trainer built with MPI)
# sends its NCCL id over MPI, so no MASTER_ADDR and no -f are needed. -d must be a
# multiple of B*T*NGPU (here 8*1024*NGPU: NGPU must divide 64). As root, Open MPI also
# wants --allow-run-as-root.
set -euo pipefail
SFT=$(cd "$(dirname "$0")/../.." && pwd)   # the built repository (make train_sftcu_mpi)
DATA=${DATA:-$SFT/data/sft}
OUT=${OUT:-$DATA/out}
NGPU=${NGPU:-8}
# -y 1 resumes from OUT/latest, and the trainer refuses it when there is no checkpoint yet
RESUME=0; [ -f "$OUT/latest" ] && RESUME=1
# On SIGTERM mpirun passes it on to the ranks, and kills them odls_base_sigkill_timeout
# seconds later (default 1): 60 leaves them time to finish the step and write the
# checkpoint (the trainer then exits 143, and -y 1 continues).
exec mpirun -np "$NGPU" --bind-to none --mca odls_base_sigkill_timeout 60 \
    "$SFT/train_sftcu_mpi" -i "$DATA/train.bin" -j "$DATA/val.bin" -e "$DATA/gpt2" -k "$DATA/gpt2" -o "$OUT" \
    -b 8 -t 1024 -d 524288 -l 5e-5 -u 50 -c 0.1 -v 200 -n 200 -y "$RESUME"
