#!/bin/bash
# dev/cuda/emu/run.sh: runs the GPU code on the CPU under the emulator (see README.md).
#   dev/cuda/emu/run.sh [selftest] [dev] [banks] [test] [dist]     (default: selftest dev test)
# banks: dev/cuda/attention.cu (bf16) with the bank-conflict counter on its tensor-core
# version only (v3, whose kernels must have no conflict at the models' head sizes).
# Environment: WORK (default /tmp/cuda_emu): where the converted copy and binaries go;
#   EMU_ORDER=fwd|rev|rand: order of the threads of a block (and of the blocks, rev);
#   EMU_STREAM_ORDER=issue|rev|rand: the legal order in which the streams' work runs (README);
#   SAN="-fsanitize=address" or "-fsanitize=undefined": sanitizer for the emulated code;
#   DEV="attention mma" (default: all): which dev/cuda checks the dev target runs; a
#     check named NAME:PREC ("attention:bf16") is built in that precision only;
#   PRECS="bf16" (default "fp32 bf16"): which builds of the others;
#   BANKS=0: the dev checks without the bank-conflict counter (several times faster; the
#     banks target still counts);
#   REUSE=1: WORK already holds this repository's converted copy and the emulator's objects
#     from an earlier run.sh (and the trainers, if its test target ran): use them instead of
#     converting and building again, so that several run.sh can share one WORK, at once.
set -e
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
work=${WORK:-/tmp/cuda_emu}
src=$work/src
targets=${*:-selftest dev test}
FLAGS="-std=c++17 -O2 -g -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=0 -fopenmp -Wall -Wno-unused-function -Wno-format-truncation -Wno-unknown-pragmas -Wno-sign-compare -I$here/include -I$src $SAN"
if [ -n "${REUSE:-}" ]; then
    for f in "$src/train_sft.cu" "$work/obj/emu.o" "$work/obj/cublaslt.o" "$work/obj/nccl.o" "$work/obj/cpu_ref.o"; do
        [ -f "$f" ] || { echo "run.sh: REUSE=1 but $f is missing: run once without REUSE first" >&2; exit 2; }
    done
else
    python3 "$here/convert.py" "$repo" "$src"
    sed -i 's/^    timings();/    \/\/ timings(); (emulator: no timing)/; s/^    time_config(/    if (0) time_config(/' "$src"/dev/cuda/*.cu
    mkdir -p "$work/obj"
    g++ $FLAGS -c -o "$work/obj/emu.o" "$here/emu.cpp" & a=$!
    g++ $FLAGS -c -o "$work/obj/cublaslt.o" "$here/cublaslt.cpp" & b=$!
    wait $a; wait $b
    g++ $FLAGS -c -o "$work/obj/nccl.o" "$here/nccl.cpp" & a=$!
    gcc -O2 -g -fopenmp -std=gnu11 -I"$src" $SAN -c -o "$work/obj/cpu_ref.o" "$src/dev/cuda/cpu_ref.c" & b=$!
    wait $a; wait $b
fi
build() {  # build OUT SRC [flags]; BUILD_CXX=mpicxx for an MPI build; COUNT_BANKS=1: with the bank-conflict counter
    local out=$1 f=$2 inst=
    shift 2
    # the counter (emu.cpp, README): every load and store of the emulated program calls a
    # hook (g++'s ThreadSanitizer instrumentation, linked without its runtime); no
    # vectorization or store merging, so the accesses are the source's. Not with SAN.
    if [ -n "${COUNT_BANKS:-}" ] && [ -z "$SAN" ]; then inst="-fsanitize=thread --param tsan-instrument-func-entry-exit=0 -fno-tree-vectorize -fno-store-merging"; fi
    ${BUILD_CXX:-g++} $FLAGS $inst "$@" -c -o "$out.o" -x c++ "$f"
    ${BUILD_CXX:-g++} $FLAGS -o "$out" "$out.o" "$work/obj/emu.o" "$work/obj/cublaslt.o" "$work/obj/nccl.o" "$work/obj/cpu_ref.o" -lm -lpthread
}
both() {  # both "OUT SRC [flags]" "OUT SRC [flags]": two builds at once (one g++ each, on two cores); fails if either does
    build $1 & local a=$!
    build $2 & local b=$!
    local ra=0 rb=0
    wait $a || ra=$?
    wait $b || rb=$?
    [ $ra -eq 0 ] && [ $rb -eq 0 ]
}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_stack_use_after_return=0:detect_leaks=0}
status=0
cd "$src"
for t in $targets; do
    case $t in
    selftest)
        both "$work/selftest dev/cuda/emu/selftest.cu" "$work/selftest_lt dev/cuda/emu/selftest_lt.cu"
        "$work/selftest" 0 || status=1
        "$work/selftest_lt" || status=1
        if sh -c '"$1" 1 > /dev/null 2>&1' _ "$work/selftest" 2> /dev/null; then echo "FAIL selftest 1: an exited lane at a warp op was not caught"; status=1; else echo "ok selftest 1: an exited lane at a warp op is caught"; fi
        # the mma fragment layouts (also a dev check); the streams and events
        both "$work/mma dev/cuda/mma.cu" "$work/selftest_streams dev/cuda/emu/selftest_streams.cu"
        "$work/mma" || status=1
        # with every wait: passes in each order; without one: fails, as selftest_streams.cu says
        for o in issue rev rand; do EMU_STREAM_ORDER=$o "$work/selftest_streams" || status=1; done
        for d in produce gather reuse; do
            for o in issue rev rand; do
                log=$work/selftest_streams.$d.$o.log
                # (through sh, whose "Aborted" line goes to /dev/null: the log has the emulator's own)
                EMU_STREAM_ORDER=$o sh -c '"$1" "$2" > "$3" 2>&1' _ "$work/selftest_streams" $d "$log" 2> /dev/null && r=0 || r=$?
                if [ $r -ne 0 ] && grep -q '^EMU ERROR: stream race' "$log"; then echo "ok selftest_streams $d ($o): the missing wait is caught: $(grep -m1 '^EMU ERROR' "$log" | cut -c1-400)"
                else echo "FAIL selftest_streams $d ($o): the missing wait was not reported (log $log)"; status=1; fi
            done
        done
        log=$work/selftest_streams.hidden.log
        EMU_STREAM_ORDER=rev "$work/selftest_streams" hidden > "$log" 2>&1 && r=0 || r=$?
        if [ $r -ne 0 ] && grep -q '^FAIL hidden' "$log"; then echo "ok selftest_streams hidden (rev): the missing wait changes the result: $(grep -m1 '^FAIL' "$log")"
        else echo "FAIL selftest_streams hidden (rev): the missing wait changed nothing (log $log)"; status=1; fi
        ;;
    dev)
        for spec in ${DEV:-$(cd dev/cuda && ls *.cu | sed 's/\.cu$//')}; do
            n=${spec%%:*} precs=${PRECS:-fp32 bf16}
            [ "$n" = "$spec" ] || precs=${spec#*:}
            f=dev/cuda/$n.cu
            bins=
            specs=()
            for p in $precs; do
                if [ "$p" = fp32 ]; then specs+=("$work/${n}_fp32 $f -DENABLE_FP32"); bins="$bins $work/${n}_fp32"
                else specs+=("$work/$n $f"); bins="$bins $work/$n"; fi
            done
            counter=1; [ "${BANKS:-1}" = 0 ] && counter=
            if [ ${#specs[@]} -eq 2 ]; then COUNT_BANKS=$counter both "${specs[0]}" "${specs[1]}"; else COUNT_BANKS=$counter build ${specs[0]}; fi
            for b in $bins; do
                if "$b" > "$b.log" 2>&1; then r=ok; else r=FAIL; status=1; fi
                echo "$r $(basename "$b"): $(grep -c '^ok' "$b.log") ok lines, $(grep -c 'FAIL' "$b.log") FAIL lines (log $b.log)"
                grep '^emu banks' "$b.log" | sed 's/^/    /' || true  # the shared-memory bank conflicts of each kernel
            done
        done
        ;;
    banks)
        COUNT_BANKS=1 build "$work/attention_banks" dev/cuda/attention.cu
        b=$work/attention_banks
        if "$b" 3 > "$b.log" 2>&1; then r=ok; else r=FAIL; status=1; fi
        echo "$r $(basename "$b") (v3): $(grep -c '^ok' "$b.log") ok lines, $(grep -c 'FAIL' "$b.log") FAIL lines (log $b.log)"
        grep '^emu banks' "$b.log" | sed 's/^/    /' || true
        ;;
    test)
        make -s train_sft > /dev/null
        both "train_sftcu_fp32 train_sft.cu -DENABLE_FP32" "train_sftcu train_sft.cu"; built_trainers=1
        both "test_sftcu test_sftcu.cu -DENABLE_FP32" "test_sftcu_bf16 test_sftcu.cu"
        ./test_sftcu || status=1
        ./test_sftcu_bf16 || status=1
        ;;
    dist)  # 2 ranks through the emulated NCCL (test_dist.sh); not in the default set
        make -s train_sft > /dev/null
        # the same two builds as the test target's: copied when it made them in this run, or
        # in an earlier one whose WORK this one reuses
        if [ -n "${built_trainers:-}" ] || { [ -n "${REUSE:-}" ] && [ -x train_sftcu_fp32 ] && [ -x train_sftcu ]; }; then
            cp train_sftcu_fp32 train_sftcu "$work/"
        else both "$work/train_sftcu_fp32 train_sft.cu -DENABLE_FP32" "$work/train_sftcu train_sft.cu"; fi
        build "$work/train_sftcu_fp32_nonccl" train_sft.cu -DENABLE_FP32 -DSFT_NO_NCCL & nonccl=$!  # a build where make found no nccl.h
        rm -f "$work/train_sftcu_fp32_mpi"  # the NCCL id over MPI under mpirun (test_dist.sh skips its check without mpicxx)
        if command -v mpicxx > /dev/null; then BUILD_CXX=mpicxx build "$work/train_sftcu_fp32_mpi" train_sft.cu -DENABLE_FP32 -DUSE_MPI; fi
        wait $nonccl
        bash dev/cuda/emu/test_dist.sh "$work" || status=1
        ;;
    *) echo "unknown target $t"; exit 2 ;;
    esac
done
exit $status
