#!/usr/bin/env bash
# dev/gpu_check.sh: everything that needs a GPU, as one prepared run for a session lent
# one H200 for about 15 minutes: one call of at most 10 minutes, of which only $OUT (at
# most 8 files of at most 16 MiB, at most two folders deep) and the last 12,000
# characters of output come back.
#
#   OUT=/path [GPU_CHECK_BUDGET=540] bash dev/gpu_check.sh [--debug]    the real run
#   OUT=/path bash dev/gpu_check.sh --dry-run      the same script on this machine, with the
#                                                  emulated GPU (dev/cuda/emu) and tiny shapes
#
# Everything (logs, data, run folders) goes to a scratch folder (GPU_CHECK_SCRATCH, default
# a fresh /tmp/gpu_check.XXXXXX, removed at the end); into $OUT (default out/gpu_check) go
# only summary.txt, summary.json, bench.tsv (one row per benchmark), kernels.tsv (kernel
# time per class of one step, per benchmark) and logs.tar.gz (every log, cut to fit
# 16 MiB). The summary is printed last, so it survives in the output's tail.
#
# Each check is one row: ok, FAIL or skip (with the reason). A non-zero exit, a time-out, a
# "CUDA error" / "error: CUDA" / "FAIL" line in its log, or a missing result is a FAIL; the
# script goes on after a failure. Exit status 1 if a check failed, 2 if none passed.
# GPU_CHECK_BUDGET (default 540 s, for a call of timeout_s 600) bounds the whole run: each
# check's time-out is cut to what is left of it less RESERVE (the summary and the archive),
# and once less than MIN_LEFT is left the remaining checks are skips saying so. The order is
# most valuable first:
#   preflight (GPU, driver, nvcc, nccl.h, free disk, Python packages)
#   -> one parallel build (make -j$(nproc) -k gpu_all: every GPU program at once; the
#      benchmark data are written meanwhile)
#   -> GPU vs CPU (test_sftcu fp32 and bf16)
#   -> the headline benchmarks, bf16, T=1024, -n -1 (no checkpoints): GPT-2 124M (B=16),
#      Llama-3.2-1B's, Qwen2.5-0.5B's, Qwen3-0.6B's and Gemma-3-1B's shapes (B=LLAMA_B, default 8): tokens/s, MFU,
#      peak memory, kernel time per class (SFT_KERNEL_TIMES)
#   -> LoRA on Llama-3.1-8B's shape (R=16 on every module, T=2048, -r 2, B=LORA_B, default 4):
#      the frozen bf16 base, tokens/s, MFU (4N per token: no weight gradients), peak memory
#   -> QLoRA on Llama-3.2-1B's shape (R=16 on every module, --load_in_4bit 1 on a written base):
#      its step time against bf16 LoRA on the same base, its peak memory against its plan
#   -> transformers loads our exports (GPT-2, Llama, Qwen2; dev/check_hf_export.py)
#   -> QLoRA against bitsandbytes and peft, where the device's Python has them: our NF4
#      quantization against quantize_4bit on the GPU bit for bit, peft loading the adapter the
#      GPU trainer wrote on bitsandbytes' 4-bit base (dev/check_qlora_bnb.py)
#   -> peft loads our LoRA adapters as W + s B A (dev/check_peft.py on dev/ref_lora.py's references)
#   -> the rest while the budget lasts: the dev/cuda checks (bf16, then fp32),
#      compute-sanitizer memcheck on a tiny step, GPT-2 XL (-r 2), 2 ranks on the one GPU (-Z 1, -Z 2),
#      124M with -r 1 and -r 2, 124M with the optimizer offloaded (-O 1) against without, -Z 3 and -Z 3 -O 1
#      on 2 ranks sharing the GPU (124M and Llama-3.2-1B's shapes), PyTorch (torch.compile) on the 124M shape, the Llama-family
#      references in transformers, racecheck.
# --debug builds with -DSYNC_LAUNCHES -lineinfo (an asynchronous error is reported at the
# kernel that caused it). The dry run (tests/gpu/test_gpu_check.sh runs it in `make test`) builds
# train_sftcu_fp32 for the emulator through the same make (dev/cuda/emu/nvcc_emu.sh as
# nvcc, the emulated NCCL as NCCL=DIR) in a converted copy, runs the same sequence on tiny
# shapes and needs no Python; what needs the real device or Python is a skip saying so.
set -u -o pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
mode=real debug=0
for a in "$@"; do
    case $a in
    --dry-run) mode=dry ;;
    --debug) debug=1 ;;
    *) echo "usage: [OUT=DIR] [GPU_CHECK_BUDGET=S] bash dev/gpu_check.sh [--dry-run] [--debug]" >&2; exit 2 ;;
    esac
done
OUT=${OUT:-$repo/out/gpu_check}
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
S=${GPU_CHECK_SCRATCH:-$(mktemp -d /tmp/gpu_check.XXXXXX)}
mkdir -p "$S/logs" "$S/runs" || exit 2
S=$(cd "$S" && pwd)
L=$S/logs R=$S/runs
rows=$S/rows.tsv bench=$S/bench.tsv kernels=$S/kernels.tsv
: > "$rows"
printf 'run\tshape\tB\tT\trecompute\tms_per_step\ttokens_per_s\tmfu_percent\tpeak_mib\n' > "$bench"
printf 'run\tclass\tms\tpercent\n' > "$kernels"
BUDGET=${GPU_CHECK_BUDGET:-540}
RESERVE=15   # seconds kept for the summary and the archive
MIN_LEFT=10  # a check is not started with less than this left
t_start=$(date +%s)
py=${PYTHON:-python3}
nproc=$(nproc)
PEAK=989e12  # H100/H200 SXM dense bf16 tensor-core peak, FLOP/s: the MFU denominator
if [ $mode = real ]; then
    B=${GPT2_B:-16} LB=${LLAMA_B:-8} T=1024 STEPS=${STEPS:-12} KT_STEP=4 DIST_STEPS=4 SHORT_STEPS=3 LORA_T=2048
    TRAINER=./train_sftcu
else  # an emulated step costs about a CPU second whatever the shape: few steps
    B=1 LB=1 T=32 STEPS=1 KT_STEP=1 DIST_STEPS=2 SHORT_STEPS=1 LORA_T=32
    TRAINER=./train_sftcu_fp32  # the one binary the dry run builds (the emulator is slow to build)
fi

elapsed() { echo $(($(date +%s) - t_start)); }

# row NAME STATUS SECONDS LIMIT START DETAIL
row() {
    local d=${6//$'\t'/ }
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "${d//$'\n'/ }" >> "$rows"
    printf '%-5s %-34s %5ss  %s\n' "$2" "$1" "$3" "$(printf '%s' "$6" | cut -c1-150)"
}
skip() { row "$1" skip 0 0 "$(elapsed)" "$2"; }
fail() { row "$1" FAIL 0 0 "$(elapsed)" "$2"; }
okrow() { row "$1" ok 0 0 "$(elapsed)" "$2"; }

# limit_for LIMIT [START]: LIMIT cut to what is left of the budget at START (seconds since
# the start; default now); empty when too little is left. A check passes the START it
# records, so that START + limit stays within the budget even when the clock ticks between.
limit_for() {
    local l
    l=$((BUDGET - RESERVE - ${2:-$(elapsed)}))
    [ "$l" -lt $MIN_LEFT ] && return 1
    [ "$1" -lt "$l" ] && echo "$1" || echo "$l"
}

# check NAME LIMIT COMMAND...: runs COMMAND (log $L/NAME.log) under its time-out and
# records ok, FAIL or skip; returns 0 on ok.
check() {
    local name=$1 want=$2 log=$L/$1.log limit
    shift 2
    local t0 s0 rc
    s0=$(elapsed) t0=$SECONDS
    if ! limit=$(limit_for "$want" "$s0"); then
        skip "$name" "the time budget (GPU_CHECK_BUDGET=$BUDGET s) is spent"
        return 1
    fi
    timeout --kill-after=5 "$limit" "$@" > "$log" 2>&1
    rc=$?
    local dt=$((SECONDS - t0)) why=""
    if { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && [ "$limit" -lt "$want" ]; then  # the budget's end, not the check's
        row "$name" skip "$dt" "$limit" "$s0" "stopped at the end of the time budget (GPU_CHECK_BUDGET=$BUDGET s) after ${limit}s; its own limit is ${want}s (logs/$name.log)"
        return 1
    fi
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then why="timed out after ${limit}s"
    elif [ $rc -ne 0 ]; then why="exit status $rc"
    fi
    local pat='CUDA error|error: CUDA|error: cuBLAS|ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]' nfail nerr
    nfail=$(grep -c '^FAIL' "$log")
    nerr=$(grep -c -E "$pat" "$log")
    [ "$nfail" -gt 0 ] && why="${why:+$why; }$nfail FAIL line(s): $(grep -m1 '^FAIL' "$log" | cut -c1-160)"
    [ "$nerr" -gt 0 ] && why="${why:+$why; }$nerr error line(s): $(grep -m1 -E "$pat" "$log" | cut -c1-160)"
    [ $rc -ne 0 ] && [ -z "${why##exit status*}" ] && why="$why: $(grep -m1 -i 'error' "$log" | cut -c1-160)"
    if [ -n "$why" ]; then
        row "$name" FAIL "$dt" "$limit" "$s0" "$why (logs/$name.log)"
        return 1
    fi
    local nok nskip
    nok=$(grep -c '^ok' "$log")
    nskip=$(grep -c '^skip' "$log")
    if [ "$nok" -eq 0 ] && [ "$nskip" -gt 0 ]; then  # the program itself skipped: not a pass
        row "$name" skip "$dt" "$limit" "$s0" "$(grep -m1 '^skip' "$log" | cut -c1-160)"
        return 1
    fi
    local what
    if [ "$nok" -gt 0 ]; then what="$nok ok line(s)$([ "$nskip" -gt 0 ] && echo ", $nskip skip line(s)")"
    else what="exit 0: $(grep -v '^[[:space:]]*$' "$log" | tail -1 | cut -c1-140)"; fi  # a program without ok lines: its last line
    row "$name" ok "$dt" "$limit" "$s0" "$what"
    return 0
}

# ---- preflight (seconds): what this machine has
have_gpu=0 gpu="none"
if [ $mode = dry ]; then
    gpu="dry run: the emulated GPU (dev/cuda/emu) on $(nproc) CPU cores"
    have_gpu=1
elif command -v nvidia-smi > /dev/null && timeout 20 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$L/nvidia-smi.log" 2>&1; then
    have_gpu=1 gpu="$(head -1 "$L/nvidia-smi.log")"
else
    gpu="no GPU: $(head -c 160 "$L/nvidia-smi.log" 2> /dev/null || echo "nvidia-smi not found")"
fi
if [ $mode = dry ]; then
    NVCC="$repo/dev/cuda/emu/nvcc_emu.sh"
    nvcc_ver="dev/cuda/emu/nvcc_emu.sh (g++ $(g++ -dumpversion))"
else
    # an image may have the toolkit without it on PATH: /usr/local/cuda's, and its libraries for the binaries
    if ! command -v "${NVCC:-nvcc}" > /dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=$PATH:/usr/local/cuda/bin; fi
    [ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64
    NVCC=${NVCC:-nvcc}
    nvcc_ver=$(timeout 20 "$NVCC" --version 2> /dev/null | grep -o 'release [0-9.]*' || echo "not found")
fi
nccl_arg=""
[ $mode = dry ] && nccl_arg="NCCL=@SRC@/dev/cuda/emu"  # the emulated NCCL's include/nccl.h, in the converted copy
nccl=$(cd "$repo" && timeout 20 make -s nccl_info NVCC="$NVCC" ${nccl_arg//@SRC@/$repo} 2>&1 | tail -1)
disk=$(df -Pk "$S" | awk 'NR == 2 {printf "%.1f GiB free at %s", $4 / 1048576, $6}')
pyv=$(timeout 20 "$py" -c 'import importlib.metadata as m
def v(p):
    try: return m.version(p)
    except Exception: return "missing"
print("torch " + v("torch") + ", transformers " + v("transformers") + ", bitsandbytes " + v("bitsandbytes") + ", peft " + v("peft") +
      ", nvidia-nccl-cu13 " + v("nvidia-nccl-cu13"))' 2> /dev/null || echo "python3 not usable")
[ $mode = dry ] && pyv="not used by the dry run"
san=$(command -v compute-sanitizer || echo "not found")
echo "== gpu_check ($mode run), budget ${BUDGET}s, scratch $S, results in $OUT"
okrow preflight "device: $gpu | nvcc: $nvcc_ver | $nccl | disk: $disk | python: $pyv | compute-sanitizer: $san"
[ $have_gpu = 1 ] || skip gpu "$gpu: every GPU check below is a skip"

# ---- the benchmark data, written while the build runs (real run; the dry run uses dev/ref's)
# shapes: NAME DESCRIPTOR VOCAB B  (GPT-2 124M's V is GPT-2's 50257)
if [ $mode = real ]; then
    SHAPES="gpt2_124M d12 50257 $B
llama32_1B l16c2048h32k8f8192t1024 128256 $LB
qwen25_05B l24c896h14k2f4864t1024b 151936 $LB
qwen3_06B l28c1024h16k8f3072t1024a128q 151936 $LB
gemma3_1B l26c1152h4k1f6912t1024a256gw512p6 262144 $LB"
    XL="gpt2_xl d48c1600h25 50257 4"
    LORA="llama31_8b_lora l32c4096h32k8f14336t2048u 128256 ${LORA_B:-4}"  # B: docs/lora.md's GPU memory table
else
    SHAPES="gpt2_124M d2c64h2t32 61 $B
llama32_1B l2c64h4k2f96t32 61 $LB
qwen25_05B l2c64h4k2f96t32b 61 $LB
qwen3_06B l2c64h4k2f96t32a32q 61 $LB
gemma3_1B l2c64h2k1f96t32a256gw16p2 61 $LB"
    XL="gpt2_xl d3c96h3t32 61 2"  # 61: dev/ref/tiny_train.bin's vocabulary
    LORA="llama31_8b_lora l2c64h4k2f96t32 61 1"
fi
data_pids=""
start_data() {  # start_data NAME V DOCS [T]: bench_torch.py in the background, its own row when waited for
    local limit
    limit=$(limit_for 150) || { skip "data_$1" "the time budget is spent"; return; }
    ( s0=$(elapsed) t0=$SECONDS
      timeout --kill-after=5 "$limit" "$py" dev/bench_torch.py data "$R/data_$1.bin" "$2" "$3" "${4:-$T}" > "$L/data_$1.log" 2>&1
      echo "$? $((SECONDS - t0)) $limit $s0" > "$R/data_$1.rc" ) &
    data_pids="$data_pids $!"
}
data_file() {  # data_file NAME: the data file's path once written (its row recorded the first time), else nothing
    if [ $mode = dry ]; then echo "$repo/dev/ref/tiny_train.bin"; return 0; fi
    if [ -f "$R/data_$1.rc" ]; then
        local rc dt lim s0
        read -r rc dt lim s0 < "$R/data_$1.rc"
        rm -f "$R/data_$1.rc"
        if [ "$rc" = 0 ]; then row "data_$1" ok "$dt" "$lim" "$s0" "$R/data_$1.bin" >&2; touch "$R/data_$1.ok"
        else row "data_$1" FAIL "$dt" "$lim" "$s0" "exit status $rc: $(tail -c 160 "$L/data_$1.log")" >&2; fi
    fi
    [ -f "$R/data_$1.ok" ] && echo "$R/data_$1.bin"
}
if [ $mode = real ] && [ $have_gpu = 1 ]; then
    cd "$repo" || exit 2
    while read -r name desc V b; do start_data "$name" "$V" $((b * (STEPS + 1))); done <<< "$SHAPES"
    read -r name desc V b <<< "$XL"
    start_data "$name" "$V" $((b * 4))
    read -r name desc V b <<< "$LORA"
    start_data "$name" "$V" $((b * (STEPS + 1))) $LORA_T
fi

# ---- the build: one make over every GPU program (-k: one broken check does not stop the rest)
built=0
if [ $have_gpu = 0 ]; then skip build "$gpu"
elif [ $mode = real ] && [ "$nvcc_ver" = "not found" ]; then skip build "nvcc not found"
elif [ $mode = real ]; then
    W=$repo
    nv=$NVCC
    [ $debug = 1 ] && nv="$NVCC -DSYNC_LAUNCHES -lineinfo"
    check build 300 make -C "$W" -k -j"$nproc" -s gpu_all NVCC="$nv" CUDA_ARCH=sm_90 && built=1
else  # dry run: convert a copy for the emulator, its objects, then the same make with the stand-in nvcc
    W=$S/src
    emu_build() {
        set -e
        python3 "$repo/dev/cuda/emu/convert.py" "$repo" "$W" 2> /dev/null
        mkdir -p "$S/emu_obj"
        local f="-std=c++17 -O1 -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=0 -fopenmp -w -I$repo/dev/cuda/emu/include"
        g++ $f -c -o "$S/emu_obj/emu.o" "$repo/dev/cuda/emu/emu.cpp" &
        local p=$!
        g++ $f -c -o "$S/emu_obj/cublaslt.o" "$repo/dev/cuda/emu/cublaslt.cpp"
        g++ $f -c -o "$S/emu_obj/nccl.o" "$repo/dev/cuda/emu/nccl.cpp"
        wait $p
        EMU_OBJ=$S/emu_obj make -C "$W" -k -j"$nproc" -s train_sftcu_fp32 NVCC="$NVCC" "${nccl_arg//@SRC@/$W}"
    }
    export S W repo NVCC nproc nccl_arg
    export -f emu_build
    check build 300 bash -c emu_build && built=1
fi
[ $mode = dry ] && mkdir -p "$W"  # where the dry run's build did not get to: an empty folder, no binaries
cd "${W:-$repo}" || exit 2

# ready NAME BINARY: 0 if BINARY can run, else NAME is a skip saying why
ready() {
    if [ $have_gpu = 0 ]; then skip "$1" "$gpu"; return 1; fi
    if ! limit_for 1 > /dev/null; then skip "$1" "the time budget (GPU_CHECK_BUDGET=$BUDGET s) is spent"; return 1; fi
    if [ ! -x "$2" ]; then skip "$1" "$2 was not built$([ $mode = dry ] && echo " (the dry run builds only $TRAINER)" || echo " (see the build row)")"; return 1; fi
    return 0
}

# ---- GPU vs CPU
for t in test_sftcu test_sftcu_bf16; do
    if [ $mode = dry ]; then skip "$t" "dry run: the emulated $t takes minutes (dev/cuda/emu/run.sh test runs it)"
    elif ready "$t" "./$t"; then check "$t" 120 "./$t"; fi
done

# ---- benchmarks
median_ms() {  # the median ms/step of a log's steps after the first two (all of them where there are fewer than 3)
    local skip=3
    [ "$(grep -c '^step' "$1")" -lt 3 ] && skip=1
    grep '^step' "$1" | tail -n +$skip | sed -n 's/.*| \([0-9.]*\) ms |.*/\1/p' | sort -n | awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]}'
}
# flops_per_token DESCRIPTOR V [T [lora]]: 6 N (N: the parameters, a tied head once) + causal attention 6 L NH HS T
# (HS: the descriptor's a<N>, else C / NH), where Gemma 3's sliding layers (g: all but every p-th,
# window w) count 12 NH HS (W - W^2 / 2T) per token (the mean of min(t, W) keys) instead of 6 NH HS T;
# with lora 4 N (forward and input gradients: a frozen base has no weight-gradient products)
flops_per_token() {
    awk -v d="$1" -v V="$2" -v T="${3:-$T}" -v w="$([ "${4:-}" = lora ] && echo 4 || echo 6)" 'BEGIN {
        fam = substr(d, 1, 1); s = substr(d, 2); L = s + 0; C = 64 * L; NH = L; KVH = -1; FF = -1; bias = 0; HS = -1
        qk = 0; gemma = 0; W = 512; P = 6
        while (match(s, /[a-z][0-9]*/)) {
            k = substr(s, RSTART, 1); v = substr(s, RSTART + 1, RLENGTH - 1) + 0; s = substr(s, RSTART + RLENGTH)
            if (k == "c") C = v; else if (k == "h") NH = v; else if (k == "k") KVH = v; else if (k == "f") FF = v; else if (k == "b") bias = 1; else if (k == "a") HS = v
            else if (k == "q") qk = 1; else if (k == "g") { qk = 1; gemma = 1 } else if (k == "w") W = v; else if (k == "p") P = v
        }
        if (fam == "d") N = V * C + 1024 * C + L * (12 * C * C + 13 * C) + 2 * C
        else {
            if (HS < 0) HS = C / NH; if (KVH < 0) KVH = NH; if (FF < 0) FF = int((8 * C / 3 + 63) / 64) * 64
            N = V * C + L * (C * (NH + 2 * KVH) * HS + bias * (NH + 2 * KVH) * HS + NH * HS * C + 3 * C * FF + (2 + 2 * gemma) * C + 2 * qk * HS) + C
        }
        if (HS < 0) HS = C / NH
        sliding = gemma ? L - int(L / P) : 0
        att = 6 * (L - sliding) * NH * HS * T + (W < T ? 12 * sliding * NH * HS * (W - W * W / (2 * T)) : 6 * sliding * NH * HS * T)
        printf "%.0f", w * N + att }'
}
# bench NAME DESCRIPTOR V B RECOMPUTE LIMIT [T [FLAGS...]]: a run without checkpoints (-n -1),
# at T (default $T) with the trainer's FLAGS (LoRA's -A: MFU of 4N per token); its row in
# bench.tsv, its kernel times in kernels.tsv; its run folder removed once parsed
# BENCH_DATA: the data file's name when not the run's; BENCH_SHAPE: the descriptor when -e is a directory
bench_run() {
    local name=$1 desc=$2 V=$3 b=$4 r=$5 lim=$6 t=${7:-$T} data kind="" shape=${BENCH_SHAPE:-$2}
    local extra=("${@:8}")
    [[ " ${extra[*]} " == *" -A "* ]] && kind=lora
    ready "$name" "$TRAINER" || return 1
    if ! data=$(data_file "${BENCH_DATA:-${name%_r[0-9]}}"); then skip "$name" "no data file (see its data_ row)"; return 1; fi
    SFT_KERNEL_TIMES=$KT_STEP check "$name" "$lim" "$TRAINER" -i "$data" -e "$desc" -b "$b" -t "$t" -x $STEPS -r "$r" -S 0 -n -1 -L 1 -o "$R/$name" "${extra[@]}"
    local rc=$? log=$L/$name.log
    rm -rf "${R:?}/$name"
    [ $rc -eq 0 ] || return 1
    local ms mem tps mfu
    ms=$(median_ms "$log")
    mem=$(sed -n 's/^memory| peak in use \([0-9.]*\) MiB.*/\1/p' "$log")
    if [ -z "$ms" ] || [ -z "$mem" ]; then fail "${name}_result" "no ms/step or peak memory in logs/$name.log"; return 1; fi
    tps=$(awk -v b="$b" -v t="$t" -v ms="$ms" 'BEGIN {printf "%.0f", b * t * 1000 / ms}')
    mfu=$(awk -v x="$tps" -v f="$(flops_per_token "$shape" "$V" "$t" $kind)" -v p=$PEAK 'BEGIN {printf "%.1f", 100 * x * f / p}')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$shape" "$b" "$t" "$r" "$ms" "$tps" "$mfu" "$mem" >> "$bench"
    grep -m1 '^kernels|' "$log" | tr '|' '\n' | sed -n 's/^ *\([a-z]*\) \([0-9.]*\) ms (\([0-9.]*\)%).*/\1 \2 \3/p' |
        while read -r cls kms pct; do printf '%s\t%s\t%s\t%s\n' "$name" "$cls" "$kms" "$pct" >> "$kernels"; done
    return 0
}
[ -n "$data_pids" ] && wait $data_pids
while read -r name desc V b; do bench_run "$name" "$desc" "$V" "$b" 0 180; done <<< "$SHAPES"
# LoRA R=16 (alpha 32) on every module of Llama-3.1-8B's shape: the base frozen in bf16; its
# random initialization on the host takes a while (8B weights), hence the limit
read -r name desc V b <<< "$LORA"
bench_run "$name" "$desc" "$V" "$b" 2 240 $LORA_T -A 16 -B 32
# QLoRA (issue 30) on Llama-3.2-1B's shape, R=16 (alpha 32) on every module: the random base
# as a directory (LoRA on the descriptor writes it to <out>/base; -n -1: nothing else), then
# bf16 LoRA and --load_in_4bit 1 on it: QLoRA's step time against LoRA's, and its peak memory
# against its plan (the memory| line's; cuBLAS's workspace and allocations outside the plan
# may add up to 1 GiB before it is a FAIL)
read -r name desc V b <<< "$(echo "$SHAPES" | sed -n 2p)"
qsrc=$R/qlora_src
if ready "${name}_qlora_base" "$TRAINER" && data=$(data_file "$name") &&
    check "${name}_qlora_base" 120 "$TRAINER" -i "$data" -e "$desc" -A 1 -b 1 -t $T -x 1 -S 0 -n -1 -o "$qsrc"; then
    BENCH_DATA=$name BENCH_SHAPE=$desc bench_run "${name}_lora" "$qsrc/base" "$V" "$b" 0 180 $T -A 16 -B 32 &&
        BENCH_DATA=$name BENCH_SHAPE=$desc bench_run "${name}_qlora" "$qsrc/base" "$V" "$b" 0 180 $T -A 16 -B 32 --load_in_4bit 1 &&
        { ql=$L/${name}_qlora.log
          lms=$(median_ms "$L/${name}_lora.log") qms=$(median_ms "$ql")
          plan=$(sed -n 's/^memory| per rank: .*= \([0-9.]*\) MiB planned.*/\1/p' "$ql") peak=$(sed -n 's/^memory| peak in use \([0-9.]*\) MiB.*/\1/p' "$ql")
          detail="QLoRA $qms ms/step against bf16 LoRA $lms ms/step ($(awk -v a="$qms" -v b="$lms" 'BEGIN {printf "%.2fx", a / b}')); peak $peak MiB against the plan's $plan MiB"
          if [ -n "$plan" ] && [ -n "$peak" ] && awk -v p="$peak" -v q="$plan" 'BEGIN {exit !(p <= q + 1024)}'; then okrow "${name}_qlora_vs_lora" "$detail"
          else fail "${name}_qlora_vs_lora" "$detail (peak over the plan by more than 1 GiB, or missing)"; fi; }
fi
rm -rf "${qsrc:?}"
if [ -s "$L/gpt2_124M.log" ]; then  # random init: the first loss is about ln V
    l1=$(sed -n 's/^step 1\/[0-9]* | loss \([0-9.]*\).*/\1/p' "$L/gpt2_124M.log")
    V1=$(echo "$SHAPES" | awk 'NR == 1 {print $3}')
    if awk -v l="$l1" -v V="$V1" 'BEGIN {exit !(l != "" && (l - log(V)) ^ 2 < 0.25)}'; then okrow first_loss_near_lnV "step 1 loss $l1, ln V = $(awk -v V="$V1" 'BEGIN {printf "%.4f", log(V)}')"
    else fail first_loss_near_lnV "step 1 loss '$l1' is not within 0.5 of ln V = $(awk -v V="$V1" 'BEGIN {printf "%.4f", log(V)}')"; fi
fi

# ---- transformers loads our exports (a tiny model of each family, trained SHORT_STEPS steps)
for fam in "gpt2 d2c64h2t32" "llama l2c64h4k2f96t32" "qwen2 l2c64h4k2f96t32b"; do
    read -r f desc <<< "$fam"
    n=hf_export_$f
    if [ $mode = dry ] && [ $f != gpt2 ]; then skip "$n" "dry run: one family (the same path)"; continue; fi
    ready "$n" "$TRAINER" || continue
    if check "${n}_train" 60 "$TRAINER" -i "$repo/dev/ref/tiny_train.bin" -e "$desc" -b 2 -t 32 -x $SHORT_STEPS -S 1 -o "$R/$n"; then
        if [ $mode = dry ]; then skip "${n}_loads_in_transformers" "dry run: needs Python's transformers (the device image has it)"
        else check "${n}_loads_in_transformers" 90 "$py" "$repo/dev/check_hf_export.py" "$R/$n/$(printf 'step_%08d' $SHORT_STEPS)"; fi
    fi
    rm -rf "${R:?}/$n"
done
# ... and one trained with its tokenizer (-k): the directory alone with AutoTokenizer and generate
n=hf_export_with_tokenizer
if ready "$n" "$TRAINER" && check "${n}_train" 60 "$TRAINER" -i "$repo/data/demo/train.bin" -k "$repo/data/demo/tokenizer" -e d2c64h2t64 -b 2 -t 64 \
    -x $SHORT_STEPS -S 1 -o "$R/$n"; then
    if [ $mode = dry ]; then skip "${n}_loads_in_transformers" "dry run: needs Python's transformers (the device image has it)"
    else check "${n}_loads_in_transformers" 90 "$py" "$repo/dev/check_hf_export.py" "$R/$n/$(printf 'step_%08d' $SHORT_STEPS)"; fi
fi
rm -rf "${R:?}/$n"

# ---- QLoRA against bitsandbytes and peft (dev/check_qlora_bnb.py): our NF4 quantization
# (test_nf4 --quantize: model/nf4.h, as --load_in_4bit) against bitsandbytes' quantize_4bit on
# the GPU bit for bit; the adapter our GPU trainer trained on dev/ref/tiny_llama_bnb4 put by
# peft on bitsandbytes' 4-bit base: its logits equal those of our -M 1 merge. Skips naming
# what is missing where the device's Python lacks bitsandbytes, peft or transformers.
missing=""  # what the device's Python cannot import of torch, bitsandbytes, transformers, peft
[ $mode = real ] && missing=$(timeout 20 "$py" -c 'import importlib.util as u
print(" ".join(p for p in ("torch", "bitsandbytes", "transformers", "peft") if u.find_spec(p) is None))' 2> /dev/null ||
    echo "torch bitsandbytes transformers peft")
lacks() { local p; for p; do [[ " $missing " == *" $p "* ]] && return 0; done; return 1; }
if [ $mode = dry ]; then skip qlora_bnb_quantize "dry run: needs bitsandbytes on a GPU"
elif [ $have_gpu = 0 ]; then skip qlora_bnb_quantize "$gpu"
elif lacks torch bitsandbytes; then skip qlora_bnb_quantize "$py cannot import: $missing"
elif check qlora_bnb_test_nf4_build 120 make -s -C "$repo" test_nf4 && mkdir -p "$R/qlora_quantize"; then
    check qlora_bnb_quantize 120 "$py" "$repo/dev/check_qlora_bnb.py" quantize "$repo/test_nf4" "$R/qlora_quantize"
    rm -rf "${R:?}/qlora_quantize"
fi
qp=$R/qlora_peft
if [ $mode = dry ]; then skip qlora_bnb_peft "dry run: needs bitsandbytes and peft on a GPU"
elif lacks torch bitsandbytes transformers peft; then skip qlora_bnb_peft "$py cannot import: $missing"
elif ready qlora_bnb_peft "$TRAINER" && check qlora_bnb_peft_train 60 "$TRAINER" -i "$repo/dev/ref/tiny_train.bin" \
    -e "$repo/dev/ref/tiny_llama_bnb4" -A 2 -b 2 -t 16 -l 1e-2 -x $SHORT_STEPS -S 1 -M 1 -o "$qp"; then
    adapter=$qp/$(printf 'step_%08d' $SHORT_STEPS)
    if [ -f "$adapter/adapter_model.safetensors" ] && [ -f "$qp/merged/model.safetensors" ]; then
        check qlora_bnb_peft 120 "$py" "$repo/dev/check_qlora_bnb.py" peft "$adapter" "$repo/dev/ref/tiny_llama_bnb4" "$qp/merged"
    else fail qlora_bnb_peft "no adapter in $adapter or no merge in $qp/merged"; fi
fi
rm -rf "${qp:?}"

# ---- the rest, while the budget lasts
# the dev/cuda kernel checks, bf16 then fp32
if [ $mode = dry ]; then skip dev_cuda "dry run: the dev/cuda checks are built only for the GPU (dev/cuda/emu/run.sh dev runs them emulated)"
else
    for sfx in "" _fp32; do
        for src in "$repo"/dev/cuda/*.cu; do
            n=$(basename "$src" .cu)$sfx
            ready "dev_cuda_$n" "dev/cuda/$n" && check "dev_cuda_$n" 60 "dev/cuda/$n"
        done
    done
fi
tiny="-i $repo/dev/ref/tiny_train.bin -e d2c64h2t32 -b 2 -t 32 -x 2 -S 1 -n -1"
if [ $mode = dry ] || [ "$san" = "not found" ]; then skip sanitizer_memcheck "compute-sanitizer: $([ $mode = dry ] && echo "not in a dry run" || echo "not in this image")"
elif ready sanitizer_memcheck "$TRAINER"; then
    check sanitizer_memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 "$TRAINER" $tiny -o "$R/san_memcheck"
    rm -rf "${R:?}/san_memcheck"
fi
# GPT-2 XL (48 layers, 1600 channels, 25 heads): fits with -r 2 and trains a few steps
read -r name desc V b <<< "$XL"
if ready gpt2_xl "$TRAINER" && data=$(data_file gpt2_xl); then
    check gpt2_xl 180 "$TRAINER" -i "$data" -e "$desc" -b "$b" -t $T -x $SHORT_STEPS -r 2 -S 0 -n -1 -o "$R/xl" &&
        okrow gpt2_xl_peak_memory "$(grep -m1 'peak in use' "$L/gpt2_xl.log" | sed 's/^memory| //')"
    rm -rf "${R:?}/xl"
elif [ $have_gpu = 1 ] && [ -x "$TRAINER" ]; then skip gpt2_xl "no data file (see the data_gpt2_xl row)"; fi

# 2 ranks on the one GPU (-R -W, both -D 0) against 1 process with the same -d, fp32, with
# ZeRO-1 (the default), then ZeRO-2 (each unit's gradient reduce-scattered on a second
# stream beside the backward) and ZeRO-3 (each unit's weights gathered on that stream, the
# next block's ahead of the compute): the event waits on a real device, which the emulator's
# race check can only reason about. (2 layers: the blocks' two buffers are each gathered into
# once a step, so the comm stream's wait before a buffer is reused is not exercised here;
# dev/cuda/emu/test_dist.sh's 4-layer ZeRO-3 checks do that.) NCCL >= 2.30 allows it with NCCL_MULTI_RANK_GPU_ENABLE=1;
# older NCCL refuses ("Duplicate GPU detected"): a skip saying so. Every rank under timeout:
# a hang is a FAIL, never stuck.
dist_bin=./train_sftcu_fp32
# two_ranks ZERO: the 2-rank run with -Z ZERO into $d/z$ZERO within what is left of the row's
# limit (lim, from t0); sets rc0 and rcb to the ranks' exit statuses
two_ranks() {
    local z=$1 r lim2=$((lim - (SECONDS - t0)))  # what is left of the row's limit
    [ $lim2 -lt 1 ] && lim2=1
    mkdir -p "$d/rdzv$z"
    for r in 0 1; do
        NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_DEBUG=WARN SFT_NCCL_TIMEOUT=30 timeout --kill-after=5 "$lim2" \
            $dist_bin $dflags -Z "$z" -o "$d/z$z" -f "$d/rdzv$z" -R $r -W 2 -D 0 > "$L/dist_2_ranks_z${z}_r$r.log" 2>&1 &
        eval "p$r=$!"
    done
    wait "$p0"; rc0=$?
    wait "$p1"; rcb=$?
}
# worst_loss DIR: the largest relative difference of DIR's step losses from the 1-rank run's
# ("missing" unless all DIST_STEPS are there)
worst_loss() {
    local a b2
    a=$(grep -o '"loss": [^,]*' "$d/one/metrics.jsonl" | cut -d' ' -f2); b2=$(grep -o '"loss": [^,]*' "$1/metrics.jsonl" 2> /dev/null | cut -d' ' -f2)
    paste <(echo "$a") <(echo "$b2") | awk -v n=$DIST_STEPS '{d = $1 - $2; if (d < 0) d = -d; d /= $1; if (d > w) w = d} END {if (NR == n) printf "%.2e", w; else print "missing"}'
}
if ready dist_2_ranks_one_gpu "$dist_bin" && lim=$(limit_for 120); then  # 120 s: the 1-rank run, then the 2 ranks in what is left of it
    d=$R/dist
    mkdir -p "$d"
    dflags="$tiny -x $DIST_STEPS -d 128 -l 1e-2"
    s0=$(elapsed) t0=$SECONDS
    timeout --kill-after=5 "$lim" $dist_bin $dflags -o "$d/one" > "$L/dist_1_rank.log" 2>&1
    rc1=$?
    two_ranks 1
    rc0_z1=$rc0 rcb_z1=$rcb rc0=0 rcb=0
    [ $rc0_z1 -eq 0 ] && [ $rcb_z1 -eq 0 ] && two_ranks 2  # ZeRO-2 where ZeRO-1 ran
    rc0_z2=$rc0 rcb_z2=$rcb rc0=0 rcb=0
    [ $rc0_z2 -eq 0 ] && [ $rcb_z2 -eq 0 ] && two_ranks 3  # ZeRO-3 where ZeRO-2 ran
    dt=$((SECONDS - t0))
    ver=$(sed -n 's/^ranks | .*NCCL \([0-9.]*\).*/\1/p' "$L/dist_2_ranks_z1_r0.log")
    if grep -qi 'Duplicate GPU' "$L"/dist_2_ranks_z*_r*.log; then
        row dist_2_ranks_one_gpu skip "$dt" "$lim" "$s0" "NCCL ${ver:-<= 2.29} refuses 2 ranks on one GPU (Duplicate GPU detected); NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1 allows it"
    elif grep -q 'this build has no NCCL' "$L"/dist_2_ranks_z*_r*.log; then
        row dist_2_ranks_one_gpu skip "$dt" "$lim" "$s0" "built without NCCL (see the preflight row's nccl)"
    elif [ "$lim" -lt 120 ] && echo " $rc1 $rc0_z1 $rcb_z1 $rc0_z2 $rcb_z2 $rc0 $rcb " | grep -qE ' (124|137) '; then
        row dist_2_ranks_one_gpu skip "$dt" "$lim" "$s0" "stopped at the end of the time budget (GPU_CHECK_BUDGET=$BUDGET s) after ${dt}s; its own limit is 120s"
    elif [ $rc1 -ne 0 ] || [ $rc0_z1 -ne 0 ] || [ $rcb_z1 -ne 0 ] || [ $rc0_z2 -ne 0 ] || [ $rcb_z2 -ne 0 ] || [ $rc0 -ne 0 ] || [ $rcb -ne 0 ]; then
        row dist_2_ranks_one_gpu FAIL "$dt" "$lim" "$s0" "exit statuses: 1 rank $rc1, 2 ranks with -Z 1 $rc0_z1 and $rcb_z1, with -Z 2 $rc0_z2 and $rcb_z2, with -Z 3 $rc0 and $rcb (124/137: timed out): $(grep -h -m1 error "$L"/dist_*.log | head -1 | cut -c1-160)"
    else  # fp32: only the order of the gradient sums differs (dev/cuda/emu/test_dist.sh: 1e-6 there, 1e-5 for ZeRO-2 and 3)
        w1=$(worst_loss "$d/z1") w2=$(worst_loss "$d/z2") w3=$(worst_loss "$d/z3")
        if [ "$w1" != missing ] && [ "$w2" != missing ] && [ "$w3" != missing ] && awk -v a="$w1" -v b="$w2" -v c="$w3" 'BEGIN {exit !(a <= 1e-5 && b <= 1e-5 && c <= 1e-5)}'; then
            row dist_2_ranks_one_gpu ok "$dt" "$lim" "$s0" "NCCL ${ver:-?}: $DIST_STEPS losses of 2 ranks within $w1 (-Z 1), $w2 (-Z 2) and $w3 (-Z 3) of 1 rank"
        else row dist_2_ranks_one_gpu FAIL "$dt" "$lim" "$s0" "losses of 2 ranks vs 1: largest relative difference $w1 with -Z 1, $w2 with -Z 2, $w3 with -Z 3 (> 1e-5 or missing)"; fi
    fi
    rm -rf "$d"
elif [ $have_gpu = 1 ] && [ -x "$dist_bin" ]; then skip dist_2_ranks_one_gpu "the time budget (GPU_CHECK_BUDGET=$BUDGET s) is spent"; fi

# what recomputation costs on the 124M shape
read -r name desc V b <<< "$(echo "$SHAPES" | head -1)"
for r in 1 2; do
    if [ $mode = dry ]; then skip "${name}_r$r" "dry run: the same path as ${name}"
    else bench_run "${name}_r$r" "$desc" "$V" "$b" "$r" 120; fi
done
# ZeRO-Offload (-O 1) on the 124M shape, 1 rank: the fp32 master weights and AdamW moments in
# pinned host memory, AdamW on the host's threads. Its step time and peak memory against the
# headline run's without it; the step lines' losses and norms must be the same (both sides
# compute train/adamw.h's formula with every product rounded: equal bit for bit), and the peak lower
if BENCH_DATA=$name bench_run "${name}_offload" "$desc" "$V" "$b" 0 120 $T -O 1; then
    ol=$L/${name}_offload.log hl=$L/$name.log
    peak() { sed -n 's/^memory| peak in use \([0-9.]*\) MiB.*/\1/p' "$1"; }
    losses() { grep '^step' "$1" | sed -n 's/^\(step [0-9]*\/[0-9]* | loss [0-9.]*\) .*\(| norm [0-9.]*\) .*/\1 \2/p'; }
    oms=$(median_ms "$ol") hms=$(median_ms "$hl" 2> /dev/null) opk=$(peak "$ol") hpk=$(peak "$hl" 2> /dev/null)
    detail="$oms ms/step against $hms without offload ($(awk -v a="$oms" -v b="$hms" 'BEGIN {if (b > 0) printf "%.2fx", a / b}')); peak $opk MiB against $hpk MiB"
    if [ -z "$hms" ] || [ -z "$hpk" ]; then fail "${name}_offload_vs_device" "no headline $name run to compare with (see its row)"
    elif [ -z "$(losses "$ol")" ] || ! cmp -s <(losses "$ol") <(losses "$hl"); then fail "${name}_offload_vs_device" "$detail; the step lines' losses or norms differ: $(diff <(losses "$hl") <(losses "$ol") | grep -m1 '^>')"
    elif awk -v a="$opk" -v b="$hpk" 'BEGIN {exit !(a < b)}'; then okrow "${name}_offload_vs_device" "$detail; $(losses "$ol" | wc -l) step lines' losses and norms identical"
    else fail "${name}_offload_vs_device" "$detail: the peak is not lower"; fi
fi
# ZeRO-3 and the offloaded optimizer on real shapes (issue 29): 2 ranks sharing the one GPU (as
# dist_2_ranks_one_gpu), bf16, one micro-batch a rank, -Z 3 and then -Z 3 -O 1, on GPT-2 124M's
# and Llama-3.2-1B's shapes. Each row: rank 0's median ms/step, what the last step gathered into
# each rank (the zero3| line), the GPU's peak in use (both ranks' allocations, and the CUDA
# contexts and NCCL's buffers) against twice the plan; the -O 1 row also needs the -Z 3 row's
# step lines (losses and norms) bit for bit.
# zero3_pair NAME DESC V B [FLAGS...]
zero3_pair() {
    local name=$1 desc=$2 V=$3 b=$4 data lim r s0 t0 rc0 rc1 dd=$R/$1 p0 p1
    shift 4
    ready "$name" "$TRAINER" || return 1
    if ! data=$(data_file "${name%%_z3*}"); then skip "$name" "no data file (see its data_ row)"; return 1; fi
    lim=$(limit_for 150) || { skip "$name" "the time budget (GPU_CHECK_BUDGET=$BUDGET s) is spent"; return 1; }
    mkdir -p "$dd/rdzv"
    s0=$(elapsed) t0=$SECONDS
    for r in 0 1; do
        NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_DEBUG=WARN SFT_NCCL_TIMEOUT=60 timeout --kill-after=5 "$lim" "$TRAINER" -i "$data" -e "$desc" -b "$b" \
            -t $T -d $((2 * b * T)) -x $SHORT_STEPS -S 0 -n -1 -L 1 -o "$dd" -f "$dd/rdzv" -R $r -W 2 -D 0 "$@" > "$L/${name}_r$r.log" 2>&1 &
        eval "p$r=$!"
    done
    wait "$p0"; rc0=$?
    wait "$p1"; rc1=$?
    local dt=$((SECONDS - t0)) log=$L/${name}_r0.log ms gath peak plan
    rm -rf "$dd"
    if grep -qi 'Duplicate GPU' "$L/${name}_r0.log" "$L/${name}_r1.log"; then
        row "$name" skip "$dt" "$lim" "$s0" "NCCL refuses 2 ranks on one GPU (Duplicate GPU detected); NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1 allows it"; return 1
    elif [ $rc0 -ne 0 ] || [ $rc1 -ne 0 ]; then
        row "$name" FAIL "$dt" "$lim" "$s0" "exit statuses $rc0 and $rc1 (124/137: timed out): $(grep -h -m1 error "$L/${name}_r0.log" "$L/${name}_r1.log" | head -1 | cut -c1-160)"; return 1
    fi
    ms=$(median_ms "$log")
    gath=$(sed -n 's/^zero3| the last step gathered [0-9]* values (\([0-9.]*\) MiB).*/\1/p' "$log")
    peak=$(sed -n 's/^memory| peak in use \([0-9.]*\) MiB.*/\1/p' "$log")
    plan=$(sed -n 's/^memory| per rank: .*= \([0-9.]*\) MiB planned.*/\1/p' "$log")
    if [ -z "$ms" ] || [ -z "$gath" ] || [ -z "$peak" ] || [ -z "$plan" ]; then
        row "$name" FAIL "$dt" "$lim" "$s0" "no ms/step, zero3| line or memory| lines in logs/${name}_r0.log"; return 1
    fi
    zero3_detail="$ms ms/step; the last step gathered $gath MiB into each rank; peak in use $peak MiB on the GPU for both ranks, plan 2 x $plan MiB"
    zero3_time="$dt $lim $s0"  # the row's seconds, limit and start, for its ok or FAIL row
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$desc" "$b" $T 0 "$ms" "$(awk -v b="$b" -v ms="$ms" -v t=$T 'BEGIN {printf "%.0f", 2 * b * t * 1000 / ms}')" - "$peak" >> "$bench"
    return 0
}
zero3_losses() { grep '^step' "$1" | sed -n 's/^\(step [0-9]*\/[0-9]* | loss [0-9.]*\) .*\(| norm [0-9.]*\) .*/\1 \2/p'; }
while read -r name desc V b; do
    case $name in gpt2_124M | llama32_1B) ;; *) continue ;; esac
    # shellcheck disable=SC2086  # zero3_time: three numbers
    if zero3_pair "${name}_z3_2_ranks" "$desc" "$V" "$b" -Z 3; then row "${name}_z3_2_ranks" ok $zero3_time "$zero3_detail"; fi
    if zero3_pair "${name}_z3_offload_2_ranks" "$desc" "$V" "$b" -Z 3 -O 1; then
        a=$L/${name}_z3_2_ranks_r0.log o=$L/${name}_z3_offload_2_ranks_r0.log
        if [ -n "$(zero3_losses "$o")" ] && cmp -s <(zero3_losses "$a") <(zero3_losses "$o"); then
            row "${name}_z3_offload_2_ranks" ok $zero3_time "$zero3_detail; step lines as -Z 3's without offload"
        else row "${name}_z3_offload_2_ranks" FAIL $zero3_time "$zero3_detail; the step lines differ from -Z 3's: $(diff <(zero3_losses "$a") <(zero3_losses "$o") | grep -m1 '^>')"; fi
    fi
done <<< "$SHAPES"
# PyTorch (bf16 autocast, torch.compile, fused AdamW, flash attention) on the 124M shape
if [ $mode = dry ]; then skip pytorch_compile "dry run: needs PyTorch on a GPU"
elif [ $have_gpu = 1 ] && check pytorch_compile 240 "$py" "$repo/dev/bench_torch.py" gpu 12 12 768 50304 "$B" $T $STEPS; then
    tms=$(tail -1 "$L/pytorch_compile.log" | tr -d ' \n')
    if [[ "$tms" =~ ^[0-9.]+$ ]]; then
        tps=$(awk -v b="$B" -v ms="$tms" 'BEGIN {printf "%.0f", b * 1024 * 1000 / ms}')
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' pytorch_compile_124M d12 "$B" $T - "$tms" "$tps" \
            "$(awk -v x="$tps" -v f="$(flops_per_token d12 50304)" -v p=$PEAK 'BEGIN {printf "%.1f", 100 * x * f / p}')" - >> "$bench"
    else fail pytorch_compile_result "no ms/step on the last line of logs/pytorch_compile.log"; fi
fi
# transformers' Llama / Qwen2 / Qwen3 / SmolLM3 / Gemma 3 against dev/ref_llama.py's and
# dev/ref_families.py's float64 forward on the reference directories
for m in tiny_llama tiny_llama_bf16 tiny_qwen2 tiny_qwen3 tiny_smollm3 tiny_gemma3; do
    if [ $mode = dry ]; then skip "ref_${m}_in_transformers" "dry run: needs Python's transformers"
    else check "ref_${m}_in_transformers" 90 "$py" "$repo/dev/check_hf_export.py" "$repo/dev/ref/$m"; fi
done
# peft loads dev/ref_lora.py's adapters (PEFT's names, shapes, fan_in_fan_out, rsLoRA) on their bases as W + s B A
for m in tiny_lora_gpt2:tiny tiny_lora_llama:tiny_llama tiny_lora_rslora:tiny_llama; do
    if [ $mode = dry ]; then skip "ref_${m%%:*}_in_peft" "dry run: needs Python's peft"
    else check "ref_${m%%:*}_in_peft" 90 "$py" "$repo/dev/check_peft.py" "$repo/dev/ref/${m%%:*}" "$repo/dev/ref/${m##*:}"; fi
done
if [ $mode = real ] && [ "$san" != "not found" ] && ready sanitizer_racecheck "$TRAINER"; then
    check sanitizer_racecheck 150 compute-sanitizer --tool racecheck --error-exitcode 3 "$TRAINER" $tiny -o "$R/san_racecheck"
    rm -rf "${R:?}/san_racecheck"
fi

# ---- the summary (summary.txt, summary.json, bench.tsv, kernels.tsv) and the archive
cd "$repo" || exit 2
total=$(elapsed)
nok=$(awk -F'\t' '$2 == "ok"' "$rows" | wc -l)
nfail=$(awk -F'\t' '$2 == "FAIL"' "$rows" | wc -l)
nskip=$(awk -F'\t' '$2 == "skip"' "$rows" | wc -l)
cp "$bench" "$OUT/bench.tsv"
cp "$kernels" "$OUT/kernels.tsv"
cp "$rows" "$L/rows.tsv"
# logs.tar.gz under 16 MiB: whole, else every log cut to its first and last K KiB
archive=$OUT/logs.tar.gz cut=""
tar -czf "$archive" -C "$S" logs
for k in 1024 256 64 16 4; do
    [ "$(stat -c %s "$archive")" -lt 16000000 ] && break
    rm -rf "$S/logs_cut" && mkdir -p "$S/logs_cut"
    for f in "$L"/*; do
        n=$(stat -c %s "$f")
        if [ "$n" -gt $((2 * k * 1024)) ]; then
            { head -c $((k * 1024)) "$f"; printf '\n[... %d bytes cut by gpu_check.sh ...]\n' $((n - 2 * k * 1024)); tail -c $((k * 1024)) "$f"; } > "$S/logs_cut/$(basename "$f")"
        else cp "$f" "$S/logs_cut/"; fi
    done
    tar -czf "$archive" -C "$S" logs_cut
    cut=" (each log cut to its first and last $k KiB)"
done
{
    echo "gpu_check ($mode run): $nok ok, $nfail FAIL, $nskip skip in ${total}s of a ${BUDGET}s budget (debug=$debug)"
    echo "device: $gpu"
    # details cut so that the whole summary fits the 12,000 characters of output that come
    # back (FAILs and the preflight longer); the dev/cuda checks that passed on one line
    awk -F'\t' '$1 ~ /^dev_cuda_/ && $2 == "ok" {n++; t += $3; names = names " " substr($1, 10); next}
        {printf "%-5s %-34s %5ss  %s\n", $2, $1, $3, substr($6, 1, $1 == "preflight" ? 400 : $2 == "FAIL" ? 220 : 110)}
        END {if (n) printf "%-5s %-34s %5ss  %s\n", "ok", "dev_cuda (" n " checks)", t, substr(names, 2)}' "$rows"
    echo
    awk -F'\t' '{printf "%-20s %-26s %3s %5s %3s %9s %9s %5s %9s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9}' "$bench"
    echo
    echo "kernel time of one step per class (ms, % of the step):"
    awk -F'\t' 'NR > 1 {k[$1] = k[$1] sprintf(" %s %s (%s%%)", $2, $3, $4); if (!($1 in o)) {o[$1] = ++n; r[n] = $1}}
                END {for (i = 1; i <= n; i++) printf "  %-20s%s\n", r[i], k[r[i]]}' "$kernels"
    echo "files in $OUT: summary.txt summary.json bench.tsv kernels.tsv logs.tar.gz$cut"
} > "$OUT/summary.txt"
json_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }
{
    printf '{"mode": "%s", "ok": %d, "fail": %d, "skip": %d, "seconds": %d, "budget_s": %d, "reserve_s": %d, "debug": %d, "device": %s,\n "checks": [' \
        "$mode" "$nok" "$nfail" "$nskip" "$total" "$BUDGET" "$RESERVE" "$debug" "$(json_str "$gpu")"
    sep=""
    while IFS=$'\t' read -r n s t lim s0 d; do
        printf '%s\n  {"name": %s, "status": %s, "seconds": %s, "limit_s": %s, "start_s": %s, "detail": %s}' "$sep" "$(json_str "$n")" \
            "$(json_str "$s")" "$t" "$lim" "$s0" "$(json_str "$d")"
        sep=","
    done < "$rows"
    printf '\n ]}\n'
} > "$OUT/summary.json"
[ "${GPU_CHECK_KEEP:-0}" = 1 ] || rm -rf "$S"
echo "== summary ($OUT)"
cat "$OUT/summary.txt"
[ "$nfail" -gt 0 ] && exit 1
[ "$nok" -le 1 ] && exit 2  # nothing but the preflight passed: not a pass either
exit 0
