#!/usr/bin/env bash
# Runs libFuzzer harnesses, each for a bounded time from its committed seed corpus.
#   bash dev/fuzz/run.sh SECONDS HARNESS...      (make fuzz_run builds them first)
# New corpus entries go to a temporary directory (the committed seeds are not
# changed); a crash, leak, sanitizer report, timeout or too-large allocation stops
# that harness, leaves its reproducer in dev/fuzz/artifacts/ and makes this script
# fail. Prints one line per harness: executions, coverage (cov) and features (ft).
# The mutation seed is fixed (-seed=1, or FUZZ_SEED), so that a run can be repeated:
# the long campaigns on a developer's machine use other seeds.
# FUZZ_JOBS harnesses run at a time (default: the number of cores), each on its own core
# for its SECONDS; their lines are printed in the order given.
set -u
cd "$(dirname "$0")/../.."
secs=$1; shift
mkdir -p dev/fuzz/artifacts
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT
run_one() {  # run_one HARNESS: its lines on stdout, exit 1 if it failed
    local h=$1 bin=dev/fuzz/bin/fuzz_$1 work log rc execs covline cov ft failed=0
    work=$(mktemp -d)
    log=$work/log
    # -malloc_limit_mb: one allocation above this is reported (inputs here are a few
    # KB; no valid one needs more). -timeout: a single input taking over 10 s is a hang.
    "$bin" "$work" "dev/fuzz/corpus/$h" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 \
        -print_final_stats=1 -seed="${FUZZ_SEED:-1}" -artifact_prefix="dev/fuzz/artifacts/$h-" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    covline=$(grep -E '^#[0-9]+' "$log" | tail -1)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$covline"); ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$covline")
    if [ "$rc" -eq 0 ]; then
        echo "ok fuzz_$h: ${secs}s, ${execs:-?} executions, cov ${cov:-?}, ft ${ft:-?}"
    else
        echo "FAIL fuzz_$h: exit $rc after ${execs:-?} executions; reproducer in dev/fuzz/artifacts/$h-*; log:"
        # the harness's own messages (fuzz.h, properties), then the sanitizer's or
        # libFuzzer's report whole (every thread's stack), else the end of the log
        grep -E 'property failed|fatal message|fuzz.h:|Test unit written' "$log" | head -20
        if grep -q 'ERROR: ' "$log"; then sed -n '/ERROR: /,/^SUMMARY/p' "$log" | head -80
        else tail -n 30 "$log"; fi
        failed=1
    fi
    rm -rf "$work"
    return $failed
}
jobs=${FUZZ_JOBS:-$(nproc)}
i=0
for h in "$@"; do
    i=$((i + 1))
    (run_one "$h" > "$results/$i.out"; echo $? > "$results/$i.rc") &
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
done
wait
failed=0
for j in $(seq 1 $i); do
    cat "$results/$j.out"
    [ "$(cat "$results/$j.rc")" = 0 ] || failed=1
done
exit $failed
