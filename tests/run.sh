#!/usr/bin/env bash
# tests/run.sh: runs the tests that tests/manifest lists and totals their results (`make
# test` calls it after building what the tests need; run it from the repository root).
#
# A test prints one line per check: "ok NAME", "FAIL NAME: why" or "skip NAME: why". A test
# that exits non-zero without a FAIL line counts as one failure (a crash). The closing line
# is "N passed, N failed, N skipped", then each test's seconds, slowest first; the exit
# status is non-zero if anything failed.
#
# Environment (the Makefile sets the first three):
#   TEST_JOBS=N     tests run N at a time (default 1); a test tagged `alone` in the manifest
#                   runs with nothing beside it. Each test's output is held and printed whole
#                   when it ends, so outputs never interleave.
#   TEST_SAN=1      the sanitizer build: only the tests tagged `san` run.
#   TEST_GPU=1      the GPU programs were built (nvcc found): the tests tagged `gpu` run;
#                   otherwise each prints one skip line (SAN=1 builds no GPU program).
#   ONLY=REGEX      only the tests whose name matches (grep -E), e.g. ONLY='prepare|jinja'.
set -u
# a test that runs make (headers_cxx, the dev/cuda checks) runs it on its own, not as a
# part of the `make test` that started this script
unset MAKEFLAGS MFLAGS
manifest=${MANIFEST:-tests/manifest}
jobs=${TEST_JOBS:-1}
[ -f "$manifest" ] || { echo "FAIL tests/run.sh: no $manifest (run from the repository root)"; exit 1; }

names=() tags=() cmds=()
while read -r name tag cmd; do
    case $name in ''|'#'*) continue ;; esac
    if [ -n "${ONLY:-}" ] && ! grep -qE -- "$ONLY" <<< "$name"; then continue; fi
    if [ "${TEST_SAN:-}" = 1 ] && [[ ",$tag," != *,san,* ]]; then continue; fi
    if [[ ",$tag," == *,gpu,* ]] && [ "${TEST_GPU:-}" != 1 ]; then
        cmd="echo 'skip $name: the GPU programs were not built (nvcc not found; see docs/gpu.md)'"
    fi
    names+=("$name") tags+=("$tag") cmds+=("$cmd")
done < "$manifest"
[ ${#names[@]} -gt 0 ] || { echo "FAIL tests/run.sh: no test in $manifest matches"; exit 1; }

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
passed=0 failed=0 skipped=0 times=
declare -A running=()   # pid -> index

# Prints test i's output and adds up its lines.
report() {
    local i=$1 rc=$2 secs=$3 log="$logs/$1.log" p f s
    echo "== ${names[$i]}: ${cmds[$i]}"
    cat "$log"
    p=$(grep -c '^ok ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^skip ' "$log")
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL ${names[$i]}: exited with status $rc"
        failed=$((failed + 1))
    fi
    times+="$secs ${names[$i]}"$'\n'
}
start() {
    local i=$1
    ( t0=$(date +%s); bash -c "${cmds[$i]}" > "$logs/$i.log" 2>&1; rc=$?
      echo "$rc $(($(date +%s) - t0))" > "$logs/$i.end"; exit $rc ) &
    running[$!]=$i
}
# Waits for one running test to end and reports it.
reap() {
    local pid i
    wait -n -p pid "${!running[@]}"
    i=${running[$pid]}; unset "running[$pid]"
    read -r rc secs < "$logs/$i.end"
    report "$i" "$rc" "$secs"
}

for i in "${!names[@]}"; do
    if [[ ",${tags[$i]}," == *,alone,* ]]; then
        while [ ${#running[@]} -gt 0 ]; do reap; done
        start "$i"; reap
    else
        while [ ${#running[@]} -ge "$jobs" ]; do reap; done
        start "$i"
    fi
done
while [ ${#running[@]} -gt 0 ]; do reap; done

echo "$passed passed, $failed failed, $skipped skipped"
echo "seconds per test (slowest first; $jobs at a time):"
sort -rn <<< "$times" | awk 'NF { printf "  %5d  %s\n", $1, $2 }'
[ "$failed" -eq 0 ]
