#!/usr/bin/env bash
# Runs each test program given as an argument and totals their results.
# Test programs print one line per check: "ok NAME", "FAIL NAME: why" or
# "skip NAME: why". This script prints the closing "N passed, N failed" line
# and exits non-zero if any check failed or any program crashed.
set -u
passed=0; failed=0; skipped=0; crashed=0
log=$(mktemp)
for cmd in "$@"; do
    echo "== $cmd"
    bash -c "$cmd" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    p=$(grep -c '^ok ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^skip ' "$log")
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $cmd: exited with status $rc"
        failed=$((failed + 1)); crashed=1
    fi
done
rm -f "$log"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$crashed" -eq 0 ]
