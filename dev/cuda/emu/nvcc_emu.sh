#!/usr/bin/env bash
# dev/cuda/emu/nvcc_emu.sh: stands in for nvcc in `make NVCC=...` inside a copy of the
# repository converted by convert.py (dev/gpu_check.sh --dry-run builds that way, so the
# dry run goes through the same make targets as the real run): compiles the .cu file with
# g++ against the emulator's headers and links the emulator's objects, EMU_OBJ/emu.o,
# cublaslt.o and nccl.o (EMU_OBJ is required). GPU-only flags (-arch, -lineinfo, -ccbin),
# the CUDA libraries and a real NCCL's -L/-rpath are dropped; -Xcompiler's list is passed
# on; EMU_OPT (default -O0: the dry run's shapes are tiny, the build time counts) is the
# optimization level.
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${EMU_OBJ:?EMU_OBJ must name the folder with emu.o, cublaslt.o and nccl.o}"
args=()
while [ $# -gt 0 ]; do
    case $1 in
    -arch=* | -lineinfo | -O[0-3]) ;;
    -ccbin | -Xlinker) shift ;;
    -Xcompiler) IFS=, read -r -a x <<< "$2"; args+=("${x[@]}"); shift ;;
    -lcublas | -lcublasLt | -lnccl | -l:libnccl.so.2 | -L*) ;;
    *.cu) args+=(-x c++ "$1" -x none) ;;
    *) args+=("$1") ;;
    esac
    shift
done
exec g++ ${EMU_OPT:--O0} -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=0 -Wno-unknown-pragmas -Wno-sign-compare -I"$here/include" "${args[@]}" \
    "$EMU_OBJ/emu.o" "$EMU_OBJ/cublaslt.o" "$EMU_OBJ/nccl.o" -lpthread
