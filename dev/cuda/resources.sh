#!/usr/bin/env bash
# dev/cuda/resources.sh: the per-kernel resource check of the GPU trainer at sm_90, from
# the compiler itself (no GPU needed). For the bf16 and the fp32 build of train_sft.cu:
# nvcc -ptx (one front-end pass), then ptxas -v on that PTX (the same register
# allocation a build does) and, for every kernel the build contains (each template
# instance), checks
#   - registers x threads per block <= 65536 (registers are allocated per warp in units of
#     256, i.e. ceil(regs * 32 / 256) * 256 per warp), so that a block can launch at all;
#   - static shared memory <= 48 KiB (the static limit; dynamic shared memory is a launch
#     parameter: the emulator checks every launch against the 48 KiB default, the
#     cudaFuncSetAttribute(MaxDynamicSharedMemorySize) opt-in and the 227 KiB per block,
#     static plus dynamic, see dev/cuda/emu/README.md);
# and reports spills (bytes of spill stores/loads: local-memory traffic) and the
# occupancy the registers, threads and static shared memory allow (resident warps per SM
# of 64; dynamic shared memory can only lower it).
# Threads per block: the kernel's __launch_bounds__ (the PTX .maxntid directive nvcc
# writes for it). The hardware refuses a launch of more threads than that bound, and the
# emulator (convert.py) checks every launch against it, so it is an upper bound of every
# real launch. A kernel without __launch_bounds__ can be launched with up to 1024 threads,
# so it is checked at 1024 (it passes with at most 64 registers); give it a bound if not.
#   bash dev/cuda/resources.sh [ARCH]     (default sm_90; run from the repository root)
# Prints one ok/FAIL line per build, the table of kernels, and FAIL lines naming kernels.
set -u
arch=${1:-sm_90}
nvcc=${NVCC:-nvcc}  # NCCL_FLAGS: where nccl.h is, as the Makefile found it (make test passes both)
ptxas=$(dirname "$(command -v "$nvcc")")/ptxas
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for prec in bf16 fp32; do
    flag=; [ "$prec" = fp32 ] && flag=-DENABLE_FP32
    start=$(date +%s)
    if ! "$nvcc" -std=c++17 -O3 -arch="$arch" -I. ${NCCL_FLAGS:-} $flag -ptx -o "$tmp/$prec.ptx" train_sft.cu 2> "$tmp/$prec.nvcc"; then
        echo "FAIL resources_$prec: nvcc -ptx failed: $(head -c 300 "$tmp/$prec.nvcc")"
        status=1
        continue
    fi
    if ! "$ptxas" -arch="$arch" -v "$tmp/$prec.ptx" -o "$tmp/$prec.cubin" 2> "$tmp/$prec.ptxas"; then
        echo "FAIL resources_$prec: ptxas failed: $(head -c 300 "$tmp/$prec.ptxas")"
        status=1
        continue
    fi
    secs=$(($(date +%s) - start))
    # kernel -> threads per block from .maxntid (x * y * z)
    awk '/^\.(visible |weak )?\.entry/ { name = $NF; sub(/\(.*/, "", name) }
         /^\.maxntid/ && name != "" { gsub(/,/, " "); n = 1; for (i = 2; i <= NF; i++) n *= $i; print name, n; name = "" }' \
        "$tmp/$prec.ptx" > "$tmp/$prec.bounds"
    # kernel regs static_smem spill_stores spill_loads, from ptxas -v
    awk '/Compiling entry function/ { match($0, /'"'"'[^'"'"']+'"'"'/); k = substr($0, RSTART + 1, RLENGTH - 2); st = 0; ld = 0 }
         /bytes spill stores/ && k != "" { for (i = 1; i <= NF; i++) { if ($(i+1) == "bytes" && $(i+2) == "spill" && $(i+3) == "stores,") st = $i; if ($(i+1) == "bytes" && $(i+2) == "spill" && $(i+3) == "loads") ld = $i } }
         /Used [0-9]+ registers/ && k != "" { r = 0; sm = 0
             for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^registers/) r = $i; if ($(i+1) == "bytes" && $(i+2) ~ /^smem/) sm = $i }
             print k, r, sm, st, ld; k = "" }' "$tmp/$prec.ptxas" > "$tmp/$prec.res"
    nk=$(wc -l < "$tmp/$prec.res")
    if [ "$nk" -eq 0 ]; then
        echo "FAIL resources_$prec: no kernels found in the ptxas output"
        status=1
        continue
    fi
    bad=0
    printf '  %-6s %5s %7s %8s %13s %9s  %s\n' build regs threads "smem B" "spill st/ld" "warps/SM" kernel
    while read -r k regs smem st ld; do
        threads=$(awk -v k="$k" '$1 == k { print $2 }' "$tmp/$prec.bounds")
        bound=yes
        if [ -z "$threads" ]; then threads=1024; bound=no; fi
        warps=$(((threads + 31) / 32))
        per_warp=$((((regs * 32 + 255) / 256) * 256))
        name=$(echo "$k" | c++filt 2> /dev/null || echo "$k")
        name=${name%%(*}
        # occupancy: blocks per SM from threads (2048), blocks (32), registers and static smem (228 KiB, 1 KiB reserved per block)
        b_thr=$((2048 / (warps * 32))); b_reg=$((per_warp > 0 ? 65536 / (per_warp * warps) : 32)); b_sm=$((233472 / (smem + 1024)))
        blocks=32
        for x in $b_thr $b_reg $b_sm; do [ "$x" -lt "$blocks" ] && blocks=$x; done
        occ=$((blocks * warps)); [ "$occ" -gt 64 ] && occ=64
        printf '  %-6s %5d %7s %8d %6d/%-6d %9s  %s\n' "$prec" "$regs" "$threads$([ $bound = no ] && echo '*')" "$smem" "$st" "$ld" "$occ/64" "$name"
        if [ $((per_warp * warps)) -gt 65536 ]; then
            echo "FAIL resources_$prec $name: $regs registers x $threads threads per block ($([ $bound = no ] && echo 'no __launch_bounds__: any launch up to 1024')) need $((per_warp * warps)) > 65536 registers"
            bad=$((bad + 1))
        fi
        if [ "$smem" -gt 49152 ]; then
            echo "FAIL resources_$prec $name: $smem bytes of static shared memory > 48 KiB"
            bad=$((bad + 1))
        fi
    done < "$tmp/$prec.res"
    spills=$(awk '$4 > 0 || $5 > 0' "$tmp/$prec.res" | wc -l)
    if [ "$bad" -eq 0 ]; then
        echo "ok resources_$prec: $nk kernels within the sm_90 limits ($spills with spills; * = no __launch_bounds__, checked at 1024 threads; nvcc -ptx + ptxas -v ${secs} s)"
    else
        echo "FAIL resources_$prec: $bad limit(s) exceeded (above)"
        status=1
    fi
done
exit $status
