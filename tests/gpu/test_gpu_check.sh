#!/usr/bin/env bash
# tests/gpu/test_gpu_check.sh: dev/gpu_check.sh --dry-run (the emulated GPU, tiny shapes) keeps
# what the lent machine allows. One `ok/FAIL/skip NAME` line per check:
# - the dry run passes (exit 0, no FAIL) within GPU_CHECK_BUDGET=150 s (what does not fit
#   becomes a skip saying so), with the build and the first benchmark ok (skips here only
#   where the machine was so loaded that the budget stopped the build);
# - $OUT holds exactly summary.txt, summary.json, bench.tsv, kernels.tsv and logs.tar.gz:
#   at most 8 files, each under 16 MiB, none more than two folders down, plain names;
# - every check's time-out ends inside the budget less its reserve (from the rows the
#   archive carries), and the JSON parses (node, where it is);
# - the summary is the last thing printed; the run folders are removed as each run is
#   parsed (the kept scratch's runs/ is empty) and the scratch at the end;
# - the benchmarks wrote no checkpoint (-n -1: "no model saved") and have their rows in
#   bench.tsv and kernels.tsv;
# - with a budget of 5 s every check after the preflight is a skip naming the budget, the
#   files are still written, exit status 2 (nothing passed);
# - make's NCCL cases: NCCL=none, the pip wheel (found by python3 where the toolkit has no
#   nccl.h: its include, lib and rpath), found nowhere (-DSFT_NO_NCCL);
# - the CPU trainer's -n -1 writes no checkpoint either, and -n -2 is refused in one line.
set -u
cd "$(dirname "$0")/../.." || exit 1
tmp=$(mktemp -d /tmp/test_gpu_check.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok $1${2:+: $2}"; }
fail() { echo "FAIL $1: $2"; status=1; }
status=0
for t in g++ python3 tar; do  # python3: the emulator's convert.py
    command -v $t > /dev/null || { echo "skip gpu_check_dry_run: $t not found"; exit 0; }
done

# out_limits NAME DIR: the limits on what comes back from $OUT
out_limits() {
    local name=$1 d=$2 problems=""
    local n
    n=$(find "$d" -type f | wc -l)
    [ "$n" -le 8 ] || problems="$problems $n files (> 8);"
    [ -z "$(find "$d" -mindepth 4)" ] || problems="$problems deeper than two folders: $(find "$d" -mindepth 4 | head -1);"
    [ -z "$(find "$d" -type f -size +16383k)" ] || problems="$problems over 16 MiB: $(find "$d" -type f -size +16383k | head -1);"
    [ -z "$(find "$d" -mindepth 1 | sed "s|^$d/||" | grep '[^A-Za-z0-9._/-]')" ] || problems="$problems odd names;"
    [ -z "$(find "$d" ! -type f ! -type d)" ] || problems="$problems links or special files;"
    local want="bench.tsv kernels.tsv logs.tar.gz summary.json summary.txt" have
    have=$(cd "$d" && find . -type f | sed 's|^\./||' | sort | tr '\n' ' ' | sed 's/ $//')
    [ "$have" = "$want" ] || problems="$problems files '$have', expected '$want';"
    if [ -z "$problems" ]; then ok "$name" "$n files, $(du -sk "$d" | cut -f1) KiB, two folders deep at most"
    else fail "$name" "$problems"; fi
}

# ---- the dry run, scratch kept to look at it. Budget 150 s: it needs about 20 s of CPU
# time (so about 30-40 s on two idle cores); on a machine shared by many, the checks that
# no longer fit are skips saying so, and where even the build was stopped by the budget
# the checks of what it would have run are skips here too (the rest still apply).
budget=150
t0=$SECONDS
OUT=$tmp/out GPU_CHECK_BUDGET=$budget GPU_CHECK_SCRATCH=$tmp/scratch GPU_CHECK_KEEP=1 bash dev/gpu_check.sh --dry-run > "$tmp/dry.log" 2>&1
rc=$?
dt=$((SECONDS - t0))
if [ $rc -eq 0 ] || { [ $rc -eq 2 ] && grep -q '^skip  build .*stopped at the end of the time budget' "$tmp/out/summary.txt"; }; then ok gpu_check_dry_run_passes "exit 0 in ${dt}s: $(grep -m1 '^gpu_check (dry run)' "$tmp/out/summary.txt")"
else fail gpu_check_dry_run_passes "exit status $rc in ${dt}s: $(grep '^FAIL' "$tmp/dry.log" | head -3 | tr '\n' ' ')"; fi
loaded=""
grep -q '^skip  build .*stopped at the end of the time budget' "$tmp/out/summary.txt" && loaded="the build was stopped by the ${budget} s budget (a loaded machine)"
for c in preflight build gpt2_124M; do
    if grep -q "^ok    $c " "$tmp/out/summary.txt"; then continue; fi
    if [ -n "$loaded" ] && [ $c != preflight ]; then echo "skip gpu_check_dry_run_$c: $loaded"
    else fail "gpu_check_dry_run_$c" "no ok row for $c: $(grep " $c " "$tmp/out/summary.txt" | head -1)"; fi
done
out_limits gpu_check_dry_run_out_limits "$tmp/out"

# every check's time-out inside the budget (rows.tsv: name status seconds limit start detail)
mkdir -p "$tmp/ar"
if tar -xzf "$tmp/out/logs.tar.gz" -C "$tmp/ar" && [ -s "$tmp/ar/logs/rows.tsv" ]; then
    over=$(awk -F'\t' -v b=$budget '$4 > 0 && $5 + $4 > b - 15 {print $1 " starts at " $5 " s with a " $4 " s limit"}' "$tmp/ar/logs/rows.tsv")
    n=$(awk -F'\t' '$4 > 0' "$tmp/ar/logs/rows.tsv" | wc -l)
    if [ -z "$over" ] && [ "$n" -gt 0 ]; then ok gpu_check_dry_run_timeouts_in_budget "$n time-outs end by $((budget - 15)) s ($budget s budget less 15 s reserve)"
    else fail gpu_check_dry_run_timeouts_in_budget "${over:-no check with a time-out}"; fi
    if tar -tzf "$tmp/out/logs.tar.gz" | grep -q 'runs/\|\.bin$'; then fail gpu_check_dry_run_archive "the archive holds run folders or data"
    else ok gpu_check_dry_run_archive "$(tar -tzf "$tmp/out/logs.tar.gz" | grep -c '\.log$') logs"; fi
else fail gpu_check_dry_run_timeouts_in_budget "no logs/rows.tsv in logs.tar.gz"; fi
if command -v node > /dev/null; then
    if node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1])); if (!j.checks.length || j.budget_s !== +process.argv[2]) process.exit(1)' "$tmp/out/summary.json" $budget; then
        ok gpu_check_dry_run_json "summary.json parses, $(grep -c '"name"' "$tmp/out/summary.json") checks"
    else fail gpu_check_dry_run_json "summary.json does not parse or lacks checks/budget_s"; fi
else echo "skip gpu_check_dry_run_json: node not found"; fi

# the summary is printed last
n=$(wc -l < "$tmp/out/summary.txt")
if [ "$n" -gt 3 ] && tail -n "$n" "$tmp/dry.log" | cmp -s - "$tmp/out/summary.txt" && [ "$(wc -c < "$tmp/out/summary.txt")" -le 12000 ]; then
    ok gpu_check_dry_run_summary_last "the last $n lines printed are summary.txt ($(wc -c < "$tmp/out/summary.txt") bytes: the output's tail holds it)"
else fail gpu_check_dry_run_summary_last "the output does not end with summary.txt, or it is over 12,000 bytes"; fi

# run folders removed once parsed; no checkpoints written by the benchmarks
if [ -d "$tmp/scratch/runs" ] && [ -z "$(ls -A "$tmp/scratch/runs")" ]; then ok gpu_check_dry_run_removes_runs "runs/ is empty at the end"
else fail gpu_check_dry_run_removes_runs "left in runs/: $(ls -A "$tmp/scratch/runs" 2>&1 | head -5 | tr '\n' ' ')"; fi
nb=0
for b in $(awk -F'\t' '$2 == "ok" && $1 ~ /^(gpt2_124M|llama32_1B|qwen25_05B|qwen3_06B)(_r[12])?$/ {print $1}' "$tmp/ar/logs/rows.tsv" 2> /dev/null); do
    log=$tmp/ar/logs/$b.log
    if ! grep -q '^done  | no model saved (-n -1)' "$log" || grep -q '^saved |' "$log"; then fail gpu_check_dry_run_no_checkpoints "$b: a checkpoint was saved or no '-n -1' line"; fi
    if ! grep -q "^$b	" "$tmp/out/bench.tsv" || ! grep -q "^$b	matmul	" "$tmp/out/kernels.tsv"; then fail gpu_check_dry_run_bench_rows "$b: no row in bench.tsv or kernels.tsv"; fi
    nb=$((nb + 1))
done
[ $nb -gt 0 ] && ok gpu_check_dry_run_benchmarks "$nb benchmarks ran, each in bench.tsv and kernels.tsv"
if [ $nb -eq 0 ]; then
    if [ -n "$loaded" ]; then echo "skip gpu_check_dry_run_benchmarks: $loaded"; else fail gpu_check_dry_run_benchmarks "no benchmark ran"; fi
fi

# ---- a spent budget: skips saying so, the files still written, the scratch removed
OUT=$tmp/out5 GPU_CHECK_BUDGET=5 GPU_CHECK_SCRATCH=$tmp/scratch5 bash dev/gpu_check.sh --dry-run > "$tmp/dry5.log" 2>&1
rc=$?
bad=$(awk 'NR > 3 && /^(ok|FAIL) / && $2 != "preflight"' "$tmp/out5/summary.txt" 2> /dev/null)
nbudget=$(grep -c '^skip .*time budget' "$tmp/out5/summary.txt" 2> /dev/null)
if [ $rc -eq 2 ] && [ -z "$bad" ] && [ "${nbudget:-0}" -gt 3 ] && [ ! -e "$tmp/scratch5" ]; then
    ok gpu_check_spent_budget_skips "exit 2, $nbudget checks skipped for the budget, scratch removed"
else fail gpu_check_spent_budget_skips "exit status $rc, rows that ran: '$bad', $nbudget budget skips, scratch $( [ -e "$tmp/scratch5" ] && echo kept || echo removed)"; fi
out_limits gpu_check_spent_budget_out_limits "$tmp/out5"
n=$(wc -l < "$tmp/out5/summary.txt")
if [ "$n" -gt 3 ] && tail -n "$n" "$tmp/dry5.log" | cmp -s - "$tmp/out5/summary.txt"; then ok gpu_check_spent_budget_summary_last "the last $n lines printed are summary.txt"
else fail gpu_check_spent_budget_summary_last "the output does not end with summary.txt"; fi

# ---- the Makefile's NCCL cases (make nccl_info, and what the trainer's build line gets)
nvcc_stand_in=$(command -v true)  # any program: only its folder's ../include is looked at
# SAN= : under `make test SAN=1` the Makefile drops nvcc (and so NCCL) from the build
nccl_case() {  # nccl_case ARGS...: make's nccl_info line and train_sftcu's build line
    make -s nccl_info SAN= NVCC="$nvcc_stand_in" "$@" 2>&1 | tail -1
    make -s -n -W train_sft.cu train_sftcu SAN= NVCC="$nvcc_stand_in" "$@" 2>&1 | grep -m1 ' -o train_sftcu '
}
r=$(nccl_case NCCL=none)
if echo "$r" | grep -q '^nccl: none' && echo "$r" | sed -n 2p | grep -q -- '-DSFT_NO_NCCL' && ! echo "$r" | sed -n 2p | grep -q -- '-lnccl\|libnccl'; then
    ok make_nccl_none "-DSFT_NO_NCCL, no NCCL library"
else fail make_nccl_none "$r"; fi
mkdir -p "$tmp/wheel/nvidia/nccl/include" "$tmp/wheel/nvidia/nccl/lib"
touch "$tmp/wheel/nvidia/nccl/include/nccl.h"
if [ -e /usr/include/nccl.h ]; then echo "skip make_nccl_pip_wheel: /usr/include/nccl.h is found before a wheel"
else
    r=$(PYTHONPATH=$tmp/wheel nccl_case CUDA_DIR="$tmp/no_cuda")
    w=$tmp/wheel/nvidia/nccl
    if echo "$r" | grep -q "^nccl: wheel ($w/include/nccl.h)" && echo "$r" | sed -n 2p | grep -q -- "-I$w/include" &&
        echo "$r" | sed -n 2p | grep -q -- "-L$w/lib -l:libnccl.so.2 -Xlinker -rpath=$w/lib" && ! echo "$r" | sed -n 2p | grep -q SFT_NO_NCCL; then
        ok make_nccl_pip_wheel "found through python3 in a toolkit without nccl.h: include, lib and rpath"
    else fail make_nccl_pip_wheel "$r"; fi
    r=$(nccl_case CUDA_DIR="$tmp/no_cuda" NCCL_WHEEL_GLOB=)
    if python3 -c 'import nvidia.nccl' 2> /dev/null; then echo "skip make_nccl_found_nowhere: this python3 has an NVIDIA NCCL wheel"
    elif echo "$r" | grep -q '^nccl: none' && echo "$r" | sed -n 2p | grep -q -- '-DSFT_NO_NCCL'; then ok make_nccl_found_nowhere "none: -DSFT_NO_NCCL"
    else fail make_nccl_found_nowhere "$r"; fi
fi

# ---- the CPU trainer's -n -1
if make -s train_sft > /dev/null 2>&1; then
    ./train_sft -i dev/ref/tiny_train.bin -e d2c64h2t32 -b 2 -t 32 -x 2 -n -1 -o "$tmp/cpu" > "$tmp/cpu.log" 2>&1
    rc=$?
    ./train_sft -i dev/ref/tiny_train.bin -n -2 -o "$tmp/cpu2" > "$tmp/cpu2.log" 2>&1
    rc2=$?
    if [ $rc -eq 0 ] && [ -z "$(ls "$tmp/cpu" | grep -E '^(step_|latest)')" ] && grep -q '^done  | no model saved (-n -1)' "$tmp/cpu.log" &&
        [ $rc2 -eq 1 ] && [ "$(wc -l < "$tmp/cpu2.log")" -eq 1 ] && grep -q -- '-n must be >= -1' "$tmp/cpu2.log"; then
        ok train_sft_no_checkpoints "-n -1: $(ls "$tmp/cpu" | tr '\n' ' ')only; -n -2: $(cat "$tmp/cpu2.log")"
    else fail train_sft_no_checkpoints "exit $rc, in -o: $(ls "$tmp/cpu" | tr '\n' ' '); -n -2: exit $rc2, $(head -2 "$tmp/cpu2.log")"; fi
else fail train_sft_no_checkpoints "make train_sft failed"; fi
exit $status
