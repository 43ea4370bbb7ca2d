#!/usr/bin/env bash
# dev/gpu_check.sh: everything that needs a GPU, as one prepared run for a session lent
# one (H200 in mind: it must finish, builds included, in under 8 minutes).
#
#   OUT=/path [GPU_CHECK_BUDGET=SECONDS] bash dev/gpu_check.sh [--debug] [B] [STEPS]
#
# Writes every log, a summary table (summary.txt) and a machine-readable summary
# (summary.json) under $OUT (default out/gpu_check). Each check is one row: ok, FAIL
# or skip (with the reason). A non-zero exit, a crash, a time-out, a "CUDA error" /
# "error: CUDA" / "FAIL" line in the log, or a missing result is a FAIL; the script keeps
# going after a failure; exit status 1 if any check failed, 2 if none ran. Every command runs
# under `timeout`, so nothing hangs. Without a GPU every GPU check is a skip saying so.
# GPU_CHECK_BUDGET (default 450 s) bounds the whole run: a check's time-out is cut to what
# is left, and once less than 20 s is left the remaining checks are skips saying so (the
# checks run most important first: build, correctness, then the benchmarks).
# --debug builds with -DSYNC_LAUNCHES -lineinfo: a device sync after every launch, so an
# asynchronous error is reported at the kernel that caused it.
#
# Runs: the parallel build (timed); test_sftcu fp32 and bf16; every dev/cuda check in
# both precisions; compute-sanitizer memcheck and racecheck on a tiny training run;
# two identical GPT-2 124M runs (bit-identical losses); the 124M benchmark (B=16,
# T=1024, bf16) per recompute level at V = 50257 and 50304 with tokens/s, ms/step,
# MFU, peak memory and a per-kernel-class breakdown of one step (SFT_KERNEL_TIMES);
# the first loss near ln V; 2 ranks on the one GPU over NCCL (NCCL_MULTI_RANK_GPU_ENABLE=1:
# which case happened, NCCL >= 2.30 running it or <= 2.29 refusing, is the row); the data-
# parallel scaling efficiency where the machine has several GPUs; GPT-2 XL (1.5B, T=1024,
# -r 2) for a few steps with its peak memory; transformers loading our export and the
# Llama-family references (dev/ref/tiny_llama*, tiny_qwen2); PyTorch (torch.compile) on the same shapes;
# the Llama family's benchmark: SmolLM2-360M's, Llama-3.2-1B's and Qwen3-0.6B's shapes per recompute level
# (B=LLAMA_B, default 8, T=1024) with tokens/s, MFU and peak memory, and PyTorch on the 360M shape.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2
debug=0
if [ "${1:-}" = "--debug" ]; then debug=1; shift; fi
B=${1:-16}
STEPS=${2:-12}
OUT=${OUT:-out/gpu_check}
py=${PYTHON:-python3}
mkdir -p "$OUT/logs" "$OUT/runs"
OUT=$(cd "$OUT" && pwd)
rows="$OUT/rows.tsv"    # name, status, seconds, detail
bench="$OUT/bench.tsv"  # run, V, recompute, ms/step, tokens/s, MFU %, peak MiB, kernel breakdown
: > "$rows"
: > "$bench"
t_start=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET:-450}

# row NAME STATUS SECONDS DETAIL
row() {
    local detail=${4//$'\t'/ }
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${detail//$'\n'/ }" >> "$rows"
    printf '%-5s %-40s %6ss  %s\n' "$2" "$1" "$3" "$4"
}

# check NAME TIMEOUT_S COMMAND...: runs the command (log in $OUT/logs/NAME.log) and
# records ok or FAIL. Returns 0 on ok.
check() {
    local name=$1 limit=$2 log="$OUT/logs/$1.log"
    shift 2
    local left=$((BUDGET - ($(date +%s) - t_start)))
    if [ "$left" -lt 20 ]; then
        row "$name" skip 0 "the time budget (GPU_CHECK_BUDGET=$BUDGET s) is spent"
        return 1
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    local t0=$SECONDS rc
    timeout --kill-after=10 "$limit" "$@" > "$log" 2>&1
    rc=$?
    local dt=$((SECONDS - t0)) why=""
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then why="timed out after ${limit}s"
    elif [ $rc -ne 0 ]; then why="exit status $rc"
    fi
    local nfail nerr
    nfail=$(grep -c '^FAIL' "$log")
    nerr=$(grep -c -E 'CUDA error|error: CUDA|error: cuBLAS|ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]' "$log")
    [ "$nfail" -gt 0 ] && why="${why:+$why; }$nfail FAIL line(s): $(grep -m1 '^FAIL' "$log" | cut -c1-160)"
    [ "$nerr" -gt 0 ] && why="${why:+$why; }$nerr error line(s): $(grep -m1 -E 'CUDA error|error: CUDA|error: cuBLAS|ERROR SUMMARY|RACECHECK SUMMARY' "$log" | cut -c1-160)"
    if [ -n "$why" ]; then
        row "$name" FAIL "$dt" "$why (log logs/$name.log)"
        return 1
    fi
    local nok nskip
    nok=$(grep -c '^ok' "$log")
    nskip=$(grep -c '^skip' "$log")
    if [ "$nok" -eq 0 ] && [ "$nskip" -gt 0 ]; then  # the program itself skipped: not a pass
        row "$name" skip "$dt" "$(grep -m1 '^skip' "$log" | cut -c1-160)"
        return 1
    fi
    local extra=""
    [ "$nskip" -gt 0 ] && extra=", $nskip skip line(s)"
    row "$name" ok "$dt" "$nok ok line(s)$extra"
    return 0
}
skip() { row "$1" skip 0 "$2"; }
fail() { row "$1" FAIL 0 "$2"; }

# ---- what this machine has
have_gpu=0
gpu_why="nvidia-smi not found"
if command -v nvidia-smi > /dev/null; then
    if timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/logs/nvidia-smi.log" 2>&1; then
        have_gpu=1
        gpu_why=""
    else
        gpu_why="nvidia-smi finds no GPU: $(head -c 160 "$OUT/logs/nvidia-smi.log")"
    fi
fi
have_nvcc=0
command -v "${NVCC:-nvcc}" > /dev/null && have_nvcc=1
echo "== gpu_check: $( [ $have_gpu = 1 ] && cat "$OUT/logs/nvidia-smi.log" || echo "no GPU ($gpu_why)"), B=$B, $STEPS steps, debug=$debug, logs in $OUT"

# ---- build (parallel; timed)
built=0
if [ $have_nvcc = 0 ]; then
    skip build "nvcc not found"
elif [ $have_gpu = 0 ] && [ "${BUILD:-0}" != 1 ]; then
    skip build "no GPU: nothing would run the binaries (BUILD=1 builds anyway)"
else
    nvcc_cmd=${NVCC:-nvcc}
    [ $debug = 1 ] && nvcc_cmd="$nvcc_cmd -DSYNC_LAUNCHES -lineinfo"
    jobs=$(nproc)
    bt0=$SECONDS
    if check build 420 bash -c "make -j$jobs -s train_sft train_sftcu train_sftcu_fp32 test_sftcu test_sftcu_bf16 CUDA_ARCH=sm_90 NVCC='$nvcc_cmd' &&
            make -j$jobs -s -C dev/cuda ARCH=sm_90 NVCC='$nvcc_cmd' all &&
            make -j$jobs -s -C dev/cuda ARCH=sm_90 NVCC='$nvcc_cmd' PRECISION=FP32 all"; then
        built=1
    fi
    echo "build: $((SECONDS - bt0)) s with make -j$jobs" >> "$OUT/logs/build.log"
fi

gpu_ready() {  # gpu_ready NAME...: 0 if the checks can run, else records each as a skip
    local why=""
    if [ $have_gpu = 0 ]; then why="no GPU: $gpu_why"
    elif [ $built = 0 ]; then why="not built (see the build row)"
    else return 0; fi
    for n in "$@"; do skip "$n" "$why"; done
    return 1
}

# ---- correctness
for t in test_sftcu test_sftcu_bf16; do
    gpu_ready "$t" && check "$t" 300 "./$t"
done
for p in BF16 FP32; do
    for src in dev/cuda/*.cu; do
        n=$(basename "$src" .cu)
        [ $p = FP32 ] && n=${n}_fp32
        gpu_ready "dev_cuda_$n" && check "dev_cuda_$n" 180 "dev/cuda/$n"
    done
done
tiny="-i dev/ref/tiny_train.bin -e d2c64h2t32 -b 2 -t 32 -x 2 -S 1"
for tool in memcheck racecheck; do
    if ! command -v compute-sanitizer > /dev/null; then skip "sanitizer_$tool" "compute-sanitizer not in this image"; continue; fi
    gpu_ready "sanitizer_$tool" && check "sanitizer_$tool" 240 compute-sanitizer --tool "$tool" --error-exitcode 3 ./train_sftcu $tiny -o "$OUT/runs/san_$tool"
done
if gpu_ready hf_export_loads_in_transformers; then
    if check hf_export_train 60 ./train_sftcu $tiny -o "$OUT/runs/export"; then
        check hf_export_loads_in_transformers 120 "$py" dev/check_hf_export.py "$OUT/runs/export/step_00000002"
    fi
fi
# The Llama-family reference directories are Hugging Face directories: transformers'
# LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM / Gemma3ForCausalLM /
# SmolLM3ForCausalLM against dev/ref_llama.py's and dev/ref_families.py's float64
# forward (needs transformers, not the GPU; a skip where it is missing).
for m in tiny_llama tiny_llama_bf16 tiny_qwen2 tiny_qwen3 tiny_smollm3 tiny_gemma3; do
    check "ref_${m}_in_transformers" 120 "$py" dev/check_hf_export.py "dev/ref/$m"
done

# ---- data parallel on the one GPU: 2 ranks (-R -W, both -D 0) against 1 process, same -d.
# NCCL 2.30 allows several ranks per GPU with NCCL_MULTI_RANK_GPU_ENABLE=1 (experimental);
# NCCL <= 2.29 refuses with "Duplicate GPU detected": recorded as a skip saying so.
# Every rank runs under timeout, so a hang is a FAIL, never a stuck script.
if gpu_ready dist_2_ranks_one_gpu; then
    d="$OUT/runs/dist"
    rm -rf "$d" && mkdir -p "$d/rdzv"
    dflags="$tiny -x 4 -d 128 -S 1 -l 1e-2"
    t0=$SECONDS
    timeout 120 ./train_sftcu_fp32 $dflags -o "$d/one" > "$OUT/logs/dist_1_rank.log" 2>&1
    rc1=$?
    for r in 0 1; do
        NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_DEBUG=WARN SFT_NCCL_TIMEOUT=60 timeout --kill-after=10 150 \
            ./train_sftcu_fp32 $dflags -o "$d/two" -f "$d/rdzv" -R $r -W 2 -D 0 > "$OUT/logs/dist_2_ranks_r$r.log" 2>&1 &
        eval "p$r=$!"
    done
    wait "$p0"; rc0=$?
    wait "$p1"; rcb=$?
    dt=$((SECONDS - t0))
    ver=$(sed -n 's/^ranks | .*NCCL \([0-9.]*\).*/\1/p' "$OUT/logs/dist_2_ranks_r0.log")
    if grep -qi 'Duplicate GPU' "$OUT"/logs/dist_2_ranks_r*.log; then
        row dist_2_ranks_one_gpu skip "$dt" "NCCL ${ver:-<= 2.29} refuses 2 ranks on one GPU (Duplicate GPU detected); NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1 allows it"
    elif [ $rc0 -eq 124 ] || [ $rcb -eq 124 ] || [ $rc0 -eq 137 ] || [ $rcb -eq 137 ]; then
        fail dist_2_ranks_one_gpu "timed out (exit statuses $rc0, $rcb; logs logs/dist_2_ranks_r*.log)"
    elif [ $rc1 -ne 0 ] || [ $rc0 -ne 0 ] || [ $rcb -ne 0 ]; then
        fail dist_2_ranks_one_gpu "exit statuses: 1 rank $rc1, 2 ranks $rc0 and $rcb: $(grep -h -m1 error "$OUT"/logs/dist_*.log | head -1 | cut -c1-160)"
    else  # fp32: only the order of the gradient sums differs (dev/cuda/emu/test_dist.sh: 1e-6 there)
        a=$(grep -o '"loss": [^,]*' "$d/one/metrics.jsonl" | cut -d' ' -f2); b=$(grep -o '"loss": [^,]*' "$d/two/metrics.jsonl" | cut -d' ' -f2)
        worst=$(paste <(echo "$a") <(echo "$b") | awk '{d = $1 - $2; if (d < 0) d = -d; d /= $1; if (d > w) w = d} END {if (NR == 4) printf "%.2e", w; else print "missing"}')
        if [ "$worst" != missing ] && awk -v w="$worst" 'BEGIN {exit !(w <= 1e-5)}'; then
            row dist_2_ranks_one_gpu ok "$dt" "NCCL $ver, NCCL_MULTI_RANK_GPU_ENABLE=1: 4 losses of 2 ranks within $worst of 1 rank"
        else fail dist_2_ranks_one_gpu "losses of 2 ranks vs 1: largest relative difference $worst (> 1e-5 or missing)"; fi
    fi
fi

# ---- GPT-2 124M: data, determinism, benchmark per recompute level and vocabulary
flops_per_token() {  # 6 N (N: parameters at the real vocabulary) + attention 6 L C T (causal)
    local V=$1
    echo $((6 * (V * 768 + 1024 * 768 + 12 * (12 * 768 * 768 + 13 * 768) + 2 * 768) + 6 * 12 * 768 * 1024))
}
median_ms() {  # median ms/step of a log's steps after the first two
    grep '^step' "$1" | tail -n +3 | sed -n 's/.*| \([0-9.]*\) ms |.*/\1/p' | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'
}
if gpu_ready determinism_124M bench_124M_V50257_r0 bench_124M_V50257_r1 bench_124M_V50257_r2 bench_124M_V50304_r0 \
    bench_124M_V50304_r1 bench_124M_V50304_r2 first_loss_V50257 first_loss_V50304 pytorch_compile gpt2_xl_r2; then
    for V in 50257 50304; do
        check "bench_data_V$V" 120 "$py" dev/bench_torch.py data "$OUT/runs/bench_$V.bin" "$V" $((B * (STEPS + 1))) 1024
    done
    d12="-e d12 -b $B -t 1024 -S 0"
    # two identical runs: bit-identical losses
    if check determinism_run1 180 ./train_sftcu -i "$OUT/runs/bench_50304.bin" $d12 -x 6 -o "$OUT/runs/det1" &&
        check determinism_run2 180 ./train_sftcu -i "$OUT/runs/bench_50304.bin" $d12 -x 6 -o "$OUT/runs/det2"; then
        a=$(grep -o '"loss": [^,]*' "$OUT/runs/det1/metrics.jsonl"); b=$(grep -o '"loss": [^,]*' "$OUT/runs/det2/metrics.jsonl")
        if [ -n "$a" ] && [ "$a" = "$b" ]; then row determinism_124M ok 0 "$(echo "$a" | wc -l) losses bit-identical"
        else fail determinism_124M "losses differ or missing: $(echo $a | cut -c1-80) vs $(echo $b | cut -c1-80)"; fi
    fi
    for V in 50257 50304; do
        flops=$(flops_per_token $V)
        for r in 0 1 2; do
            name="bench_124M_V${V}_r$r"
            log="$OUT/logs/$name.log"
            SFT_KERNEL_TIMES=4 check "$name" 240 ./train_sftcu -i "$OUT/runs/bench_$V.bin" $d12 -x "$STEPS" -r $r -o "$OUT/runs/$name"
            ms=$(median_ms "$log")
            mem=$(sed -n 's/.*peak in use \([0-9.]*\) MiB.*/\1/p' "$log")
            kern=$(grep -m1 '^kernels|' "$log" | cut -d'|' -f2- | sed 's/^ //')
            if [ $r = 0 ]; then  # random init: the first loss is about ln V
                l1=$(sed -n 's/^step 1\/[0-9]* | loss \([0-9.]*\).*/\1/p' "$log")
                if awk -v l="$l1" -v V="$V" 'BEGIN {exit !(l != "" && l - log(V) < 0.5 && log(V) - l < 0.5)}'; then
                    row "first_loss_V$V" ok 0 "step 1 loss $l1, ln V = $(awk -v V="$V" 'BEGIN {printf "%.4f", log(V)}')"
                else fail "first_loss_V$V" "step 1 loss '$l1' is not within 0.5 of ln V = $(awk -v V="$V" 'BEGIN {printf "%.4f", log(V)}')"; fi
            fi
            if [ -z "$ms" ] || [ -z "$mem" ]; then fail "${name}_result" "no ms/step or peak memory in the log"; continue; fi
            tps=$(awk -v b="$B" -v ms="$ms" 'BEGIN {printf "%.0f", b * 1024 * 1000 / ms}')
            mfu=$(awk -v t="$tps" -v f="$flops" 'BEGIN {printf "%.1f", 100 * t * f / 989e12}')
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "train_sftcu" "$V" "$r" "$ms" "$tps" "$mfu" "$mem" "$kern" >> "$bench"
        done
    done
    # scaling over every GPU of this machine (one rank per GPU, ZeRO-1): tokens/s against
    # W times the 1-GPU run's (bench_124M_V50304_r0); needs at least 2 GPUs
    ngpu=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')
    if [ "$ngpu" -lt 2 ]; then skip dist_scaling "one GPU: no scaling measurement (needs 2 or more)"
    elif [ ! -s "$OUT/logs/bench_124M_V50304_r0.log" ]; then skip dist_scaling "no 1-GPU benchmark to compare with"
    else
        mkdir -p "$OUT/runs/scaling_rdzv"
        sname="dist_scaling_${ngpu}gpu"
        check "$sname" 300 "$py" -m torch.distributed.run --redirects 2 --tee 2 --log_dir "$OUT/runs/scaling_tlogs" --no_python \
            --nproc_per_node "$ngpu" ./train_sftcu -i "$OUT/runs/bench_50304.bin" $d12 -d $((B * 1024 * ngpu)) -x "$STEPS" -o "$OUT/runs/scaling"
        ms1=$(median_ms "$OUT/logs/bench_124M_V50304_r0.log"); msw=$(median_ms "$OUT/logs/$sname.log")
        if [ -n "$ms1" ] && [ -n "$msw" ]; then
            row dist_scaling_efficiency ok 0 "$(awk -v w="$ngpu" -v a="$ms1" -v b="$msw" -v B="$B" 'BEGIN {
                t1 = B * 1024 * 1000 / a; tw = w * B * 1024 * 1000 / b
                printf "%d GPUs: %.0f tok/s = %.1f%% of %d x %.0f tok/s (1 GPU)", w, tw, 100 * tw / (w * t1), w, t1}')"
        else fail dist_scaling_efficiency "no ms/step in the logs"; fi
    fi
    # PyTorch on the same shapes (bf16 autocast, torch.compile, fused AdamW, flash attention)
    if check pytorch_compile 420 "$py" dev/bench_torch.py gpu 12 12 768 50304 "$B" 1024 "$STEPS"; then
        tms=$(tail -1 "$OUT/logs/pytorch_compile.log" | tr -d ' \n')
        if [[ "$tms" =~ ^[0-9.]+$ ]]; then
            tps=$(awk -v b="$B" -v ms="$tms" 'BEGIN {printf "%.0f", b * 1024 * 1000 / ms}')
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "pytorch_compile" 50304 - "$tms" "$tps" \
                "$(awk -v t="$tps" -v f="$(flops_per_token 50304)" 'BEGIN {printf "%.1f", 100 * t * f / 989e12}')" - - >> "$bench"
        else fail pytorch_compile_result "no ms/step on the last line of the log"; fi
    fi
    # GPT-2 XL (48 layers, 1600 channels, 25 heads): fits with -r 2 and trains a few steps
    check data_xl 60 "$py" dev/bench_torch.py data "$OUT/runs/bench_xl.bin" 50257 $((4 * 4)) 1024 &&
        check gpt2_xl_r2 420 ./train_sftcu -i "$OUT/runs/bench_xl.bin" -e d48c1600h25 -b 4 -t 1024 -x 3 -r 2 -S 0 -o "$OUT/runs/xl" &&
        row gpt2_xl_peak_memory ok 0 "$(grep -m1 'peak in use' "$OUT/logs/gpt2_xl_r2.log" | sed 's/^memory| //')"
fi

# ---- the Llama family: SmolLM2-360M's, Llama-3.2-1B's and Qwen3-0.6B's shapes (fresh models
# of the same sizes and vocabularies, tied heads; Qwen3 with its q/k norms and head size 128)
# per recompute level, T=1024, B=$LB (default 8): tokens/s, MFU and peak memory; then PyTorch
# (torch.compile) on the 360M shape. (Gemma-3-1B's head size 256 has no GPU attention kernel.)
LB=${LLAMA_B:-8}
llama_flops_per_token() {  # L C NH KVH FF V [HS]: 6 N (N: parameters, the tied head once) + attention 6 L NH HS T (causal)
    local L=$1 C=$2 NH=$3 KVH=$4 FF=$5 V=$6 HS=${7:-$(($2 / $3))}
    echo $((6 * (V * C + L * (C * (NH + 2 * KVH) * HS + NH * HS * C + 3 * C * FF + 2 * C) + C) + 6 * L * NH * HS * 1024))
}
if gpu_ready bench_smollm2_360M_r0 bench_smollm2_360M_r1 bench_smollm2_360M_r2 bench_llama32_1B_r0 bench_llama32_1B_r1 \
    bench_llama32_1B_r2 bench_qwen3_06B_r0 bench_qwen3_06B_r1 bench_qwen3_06B_r2 pytorch_compile_smollm2_360M; then
    # name L C NH KVH FF V HS descriptor-suffix (HS: the head size; the suffix: a128q for Qwen3's head size and family)
    for shape in "smollm2_360M 32 960 15 5 2560 49152 64 -" "llama32_1B 16 2048 32 8 8192 128256 64 -" \
        "qwen3_06B 28 1024 16 8 3072 151936 128 a128q"; do
        read -r sname L C NH KVH FF V HS suffix <<< "$shape"
        [ "$suffix" = - ] && suffix=""
        check "bench_data_$sname" 120 "$py" dev/bench_torch.py data "$OUT/runs/bench_$sname.bin" "$V" $((LB * (STEPS + 1))) 1024 || continue
        flops=$(llama_flops_per_token "$L" "$C" "$NH" "$KVH" "$FF" "$V" "$HS")
        for r in 0 1 2; do
            name="bench_${sname}_r$r"
            log="$OUT/logs/$name.log"
            SFT_KERNEL_TIMES=4 check "$name" 300 ./train_sftcu -i "$OUT/runs/bench_$sname.bin" -e "l${L}c${C}h${NH}k${KVH}f${FF}t1024$suffix" \
                -b "$LB" -t 1024 -S 0 -x "$STEPS" -r $r -o "$OUT/runs/$name" || { rm -rf "$OUT/runs/$name"; continue; }
            rm -rf "$OUT/runs/$name"  # its final checkpoint: 15 GB for the 1B shape (F32 export + AdamW state)
            ms=$(median_ms "$log")
            mem=$(sed -n 's/.*peak in use \([0-9.]*\) MiB.*/\1/p' "$log")
            kern=$(grep -m1 '^kernels|' "$log" | cut -d'|' -f2- | sed 's/^ //')
            if [ -z "$ms" ] || [ -z "$mem" ]; then fail "${name}_result" "no ms/step or peak memory in the log"; continue; fi
            tps=$(awk -v b="$LB" -v ms="$ms" 'BEGIN {printf "%.0f", b * 1024 * 1000 / ms}')
            mfu=$(awk -v t="$tps" -v f="$flops" 'BEGIN {printf "%.1f", 100 * t * f / 989e12}')
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$sname" "$V" "$r" "$ms" "$tps" "$mfu" "$mem" "$kern" >> "$bench"
        done
    done
    if check pytorch_compile_smollm2_360M 420 "$py" dev/bench_torch.py gpu-llama 32 15 5 960 2560 49152 "$LB" 1024 "$STEPS"; then
        tms=$(tail -1 "$OUT/logs/pytorch_compile_smollm2_360M.log" | tr -d ' \n')
        if [[ "$tms" =~ ^[0-9.]+$ ]]; then
            tps=$(awk -v b="$LB" -v ms="$tms" 'BEGIN {printf "%.0f", b * 1024 * 1000 / ms}')
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "pytorch_smollm2" 49152 - "$tms" "$tps" \
                "$(awk -v t="$tps" -v f="$(llama_flops_per_token 32 960 15 5 2560 49152)" 'BEGIN {printf "%.1f", 100 * t * f / 989e12}')" - - >> "$bench"
        else fail pytorch_compile_smollm2_360M_result "no ms/step on the last line of the log"; fi
    fi
fi

# ---- summary: table and JSON
total=$(($(date +%s) - t_start))
nok=$(awk -F'\t' '$2 == "ok"' "$rows" | wc -l)
nfail=$(awk -F'\t' '$2 == "FAIL"' "$rows" | wc -l)
nskip=$(awk -F'\t' '$2 == "skip"' "$rows" | wc -l)
{
    echo "gpu_check: $nok ok, $nfail FAIL, $nskip skip in ${total}s (B=$B, $STEPS steps, debug=$debug)"
    [ $have_gpu = 1 ] && echo "device: $(cat "$OUT/logs/nvidia-smi.log")" || echo "device: none ($gpu_why)"
    awk -F'\t' '{printf "%-5s %-40s %6ss  %s\n", $2, $1, $3, $4}' "$rows"
    if [ -s "$bench" ]; then
        echo
        printf '%-16s %6s %3s %9s %9s %6s %10s  %s\n' run V -r ms/step tok/s MFU% "peak MiB" "kernel time per class, one step"
        awk -F'\t' '{printf "%-16s %6s %3s %9s %9s %6s %10s  %s\n", $1, $2, $3, $4, $5, $6, $7, $8}' "$bench"
    fi
} > "$OUT/summary.txt"
json_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }
{
    printf '{"ok": %d, "fail": %d, "skip": %d, "seconds": %d, "B": %d, "steps": %d, "debug": %d, "device": %s,\n "checks": [' \
        "$nok" "$nfail" "$nskip" "$total" "$B" "$STEPS" "$debug" "$(json_str "$( [ $have_gpu = 1 ] && cat "$OUT/logs/nvidia-smi.log" || echo "none: $gpu_why")")"
    sep=""
    while IFS=$'\t' read -r n s t d; do
        printf '%s\n  {"name": %s, "status": %s, "seconds": %s, "detail": %s}' "$sep" "$(json_str "$n")" "$(json_str "$s")" "$t" "$(json_str "$d")"
        sep=","
    done < "$rows"
    printf '],\n "bench": ['
    sep=""
    while IFS=$'\t' read -r run V r ms tps mfu mem kern; do
        printf '%s\n  {"run": %s, "V": %s, "recompute": %s, "ms_per_step": %s, "tokens_per_s": %s, "mfu_percent": %s, "peak_mib": %s, "kernels": %s}' \
            "$sep" "$(json_str "$run")" "$V" "$(json_str "$r")" "$ms" "$tps" "$mfu" "$(json_str "$mem")" "$(json_str "$kern")"
        sep=","
    done < "$bench"
    printf ']}\n'
} > "$OUT/summary.json"
echo "== summary ($OUT/summary.txt, $OUT/summary.json)"
cat "$OUT/summary.txt"
[ "$nfail" -gt 0 ] && exit 1
[ "$nok" -eq 0 ] && exit 2  # nothing ran (no GPU): not a pass either
exit 0
