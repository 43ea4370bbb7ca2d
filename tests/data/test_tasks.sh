#!/usr/bin/env bash
# Checks of ./make_tasks: every answer it writes (eval rows and every training row
# shape) against answers recomputed here, independently, in awk from the prompt;
# the committed data/demo/eval.jsonl the same way; determinism; bad options.
# Prints "ok NAME", "FAIL NAME: why" or "skip NAME: why" per check; run from anywhere.
set -u
cd "$(dirname "$0")/../.."
fails=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }

if [ ! -x ./make_tasks ]; then make -s make_tasks || { echo "FAIL build: make make_tasks"; exit 1; }; fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# check_answers FILE MAX_DIGITS: prints "BAD line: why" for each row whose answer is
# not the expected one, then "rows N add A subtract S reverse R sort S".
# The expected answers, written out here from the task definitions in docs/data.md:
#   add      a+b: for each digit column from the ones up "x+y=s, " (the first column)
#            or "x+y+c=s, " (c = the carry into it), MAX_DIGITS columns, then "so a+b"
#   subtract a-b with a >= b: for each digit column from the ones up "x-y=d, " (the first
#            column) or "x-y-c=d, " (c = the borrow it lent), where x is the digit plus 10
#            when the column borrows, MAX_DIGITS columns, then "so a-b"
#   reverse  the word backwards;  sort  its letters in order (the word's letters are distinct)
check_answers() {
    awk -v D="$2" '
    function rev(w,   i, r) { r = ""; for (i = length(w); i >= 1; i--) r = r substr(w, i, 1); return r }
    function srt(w,   i, j, n, c, t, r) {
        n = length(w); for (i = 1; i <= n; i++) c[i] = substr(w, i, 1)
        for (i = 2; i <= n; i++) { t = c[i]; for (j = i - 1; j >= 1 && c[j] > t; j--) c[j + 1] = c[j]; c[j + 1] = t }
        r = ""; for (i = 1; i <= n; i++) r = r c[i]; return r }
    function dup(w,   i) { for (i = 2; i <= length(w); i++) if (index(substr(w, 1, i - 1), substr(w, i, 1))) return 1; return 0 }
    function subtr(a, b,   col, x, y, c, d, r) {
        r = ""; c = 0
        for (col = 0; col < D; col++) {
            x = int(a / 10 ^ col) % 10; y = int(b / 10 ^ col) % 10; d = x - y - c
            if (d < 0) { x += 10; d += 10 }
            r = r (col ? x "-" y "-" c "=" d : x "-" y "=" d) ", "; c = (x > 9) }
        return r "so " (a - b) }
    function add(a, b,   col, x, y, c, s, r) {
        r = ""; c = 0
        for (col = 0; col < D; col++) {
            x = int(a / 10 ^ col) % 10; y = int(b / 10 ^ col) % 10; s = x + y + c
            r = r (col ? x "+" y "+" c "=" s : x "+" y "=" s) ", "; c = int(s / 10) }
        return r "so " (a + b) }
    {
        if (!match($0, /"[^"]*"(}])?}$/)) { print "BAD " NR ": no final string"; next }
        got = substr($0, RSTART + 1, RLENGTH - 1); sub(/".*/, "", got)
        task = ""
        if (match($0, /What is [0-9]+\+[0-9]+\?/)) {
            task = "add"; p = substr($0, RSTART + 8, RLENGTH - 9); split(p, ab, "+"); want = add(ab[1] + 0, ab[2] + 0)
        } else if (match($0, /What is [0-9]+-[0-9]+\?/)) {
            task = "subtract"; p = substr($0, RSTART + 8, RLENGTH - 9); split(p, ab, "-")
            if (ab[1] + 0 < ab[2] + 0) print "BAD " NR ": subtract " p " would be negative"
            want = subtr(ab[1] + 0, ab[2] + 0)
        } else if (match($0, /Reverse \\"[A-Z]+\\"\./)) {
            task = "reverse"; want = rev(substr($0, RSTART + 10, RLENGTH - 13))
        } else if (match($0, /Sort the letters of \\"[A-Z]+\\"\./)) {
            task = "sort"; w = substr($0, RSTART + 22, RLENGTH - 25); want = srt(w)
            if (dup(w)) print "BAD " NR ": sort word " w " repeats a letter"
        }
        if (task == "") { print "BAD " NR ": no task prompt"; next }
        if (match($0, /^{"task":"[a-z]+"/) && substr($0, 10, RLENGTH - 10) != task) print "BAD " NR ": task tag is not " task
        if (got != want) print "BAD " NR ": " task " answer \"" got "\", expected \"" want "\""
        n[task]++
    }
    END { printf "rows %d add %d subtract %d reverse %d sort %d\n", NR, n["add"], n["subtract"], n["reverse"], n["sort"] }' "$1"
}

# answers_case NAME FILE MAX_DIGITS ROWS: every row right, every task present
answers_case() {
    local res; res=$(check_answers "$2" "$3")
    local bad; bad=$(echo "$res" | grep -c '^BAD')
    local last; last=$(echo "$res" | tail -1)
    if [ "$bad" -eq 0 ] && [[ "$last" == "rows $4 "* ]] && ! echo "$last" | grep -q ' 0\b'; then ok "$1 ($last)"
    else fail "$1" "$bad wrong rows, $last; first: $(echo "$res" | grep -m1 '^BAD')"; fi
}

./make_tasks --train-out "$T/tr.jsonl" --eval-out "$T/ev.jsonl" --n-train 3000 --n-eval 1000 --seed 5 --max-digits 3 > /dev/null 2>&1 ||
    fail make-tasks-run "make_tasks exited $?"
answers_case answers-eval-3-digits "$T/ev.jsonl" 3 1000
answers_case answers-train-3-digits "$T/tr.jsonl" 3 3000
# every training row shape occurs (and was checked above)
shapes=$(awk '/^{"messages":\[{"role":"system"/ {s++} /^{"messages":\[{"role":"user"/ {m++} /^{"prompt":\[/ {l++} /^{"prompt":"/ {p++}
              END { print (s > 0 && m > 0 && l > 0 && p > 0) ? "all" : "missing" }' "$T/tr.jsonl")
if [ "$shapes" = all ]; then ok train-shapes-present; else fail train-shapes-present "a chat shape is missing from the training rows"; fi
if [ -f data/demo/eval.jsonl ]; then answers_case answers-demo-eval data/demo/eval.jsonl 2 200
else fail answers-demo-eval "data/demo/eval.jsonl is missing (bash data/make_demo.sh)"; fi

./make_tasks --train-out "$T/tr2.jsonl" --eval-out "$T/ev2.jsonl" --n-train 3000 --n-eval 1000 --seed 5 --max-digits 3 > /dev/null 2>&1
if cmp -s "$T/tr.jsonl" "$T/tr2.jsonl" && cmp -s "$T/ev.jsonl" "$T/ev2.jsonl"; then ok deterministic; else fail deterministic "same seed, different files"; fi

# bad options: one line naming the problem, exit 1, nothing written
bad_case() {  # NAME EXPECTED-STDERR-SUBSTRING ARGS...
    local name=$1 want=$2; shift 2
    ./make_tasks "$@" > /dev/null 2> "$T/err"; local rc=$?
    if [ $rc -eq 1 ] && grep -q -- "$want" "$T/err" && [ "$(wc -l < "$T/err")" -eq 1 ] && [ ! -e "$T/o.jsonl" ]; then ok "cli-$name"
    else fail "cli-$name" "exit $rc, stderr: $(head -c 200 "$T/err")"; fi
}
bad_case no-outputs "--train-out and --eval-out are required"
bad_case bad-digits "--max-digits" --train-out "$T/o.jsonl" --eval-out "$T/e.jsonl" --max-digits 0
bad_case unknown-option "unknown option --frobnicate" --train-out "$T/o.jsonl" --eval-out "$T/e.jsonl" --frobnicate 1

[ $fails -eq 0 ]
