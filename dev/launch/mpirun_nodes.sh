#!/usr/bin/env bash
# Data-parallel GPU training on several nodes, started by Open MPI's mpirun over ssh.
#   NP=16 DATA=/shared/sft bash dev/launch/mpirun_nodes.sh HOSTFILE
# HOSTFILE has one line per node, "node1 slots=8" (slots = GPUs); NP = the sum of the
# slots. The repository (built with make train_sftcu_mpi) must be at the same path on
# every node, and DATA and OUT on a filesystem every node mounts at the same path (every
# rank reads the checkpoint it resumes from). train_sftcu_mpi sends its NCCL id over MPI:
# no MASTER_ADDR, no -f. -d must be a multiple of B*T*NP (here 8*1024*NP: NP must divide 64).
set -euo pipefail
HOSTFILE=${1:?usage: mpirun_nodes.sh HOSTFILE}
SFT=$(cd "$(dirname "$0")/../.." && pwd)
DATA=${DATA:-/shared/sft}
OUT=${OUT:-$DATA/out}
NP=${NP:-16}
# -y 1 resumes from OUT/latest, and the trainer refuses it when there is no checkpoint yet
RESUME=0; [ -f "$OUT/latest" ] && RESUME=1
# On SIGTERM mpirun passes it on to the ranks, and kills them odls_base_sigkill_timeout
# seconds later (default 1): 60 leaves them time to finish the step and write the
# checkpoint (the trainer then exits 143, and -y 1 continues).
exec mpirun --hostfile "$HOSTFILE" -np "$NP" --bind-to none --mca odls_base_sigkill_timeout 60 -x PATH -x LD_LIBRARY_PATH \
    "$SFT/train_sftcu_mpi" -i "$DATA/train.bin" -j "$DATA/val.bin" -e "$DATA/gpt2" -k "$DATA/gpt2" -o "$OUT" \
    -b 8 -t 1024 -d 524288 -l 5e-5 -u 50 -c 0.1 -v 200 -n 200 -y "$RESUME"
