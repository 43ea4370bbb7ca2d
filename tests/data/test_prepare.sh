#!/usr/bin/env bash
# CLI checks of ./prepare: options and help, every kind of bad row (exit 1, the
# message names file and line, no output written and an existing output left
# untouched), --skip-bad counting, empty results, the report (against the trainer's
# own loader), --show, the committed demo data (regenerated and compared), and
# AddressSanitizer builds of the JSON parser test and of prepare on the bad rows.
# Prints "ok NAME", "FAIL NAME: why" or "skip NAME: why" per check; run from anywhere.
set -u
cd "$(dirname "$0")/../.."
fails=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }

if [ ! -x ./prepare ] || [ ! -x ./test_prepare ]; then make -s prepare test_prepare || { echo "FAIL build: make prepare test_prepare"; exit 1; }; fi
TOK=data/demo/tokenizer
if [ ! -f $TOK/encoder.json ]; then echo "FAIL demo-tokenizer: $TOK is missing (bash data/make_demo.sh)"; exit 1; fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
GOOD='{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"}]}'

# ---------------------------------------------------------------- options
if ./prepare -h > "$T/help" && grep -q -- '--train-on-prompt' "$T/help" && grep -q -- '--val-fraction' "$T/help" && grep -q -- '--strict' "$T/help"; then ok cli-help
else fail cli-help "prepare -h did not print the options"; fi
printf '%s\n' "$GOOD" > "$T/good.jsonl"
opt_case() {  # NAME EXPECTED-STDERR-SUBSTRING ARGS...
    local name=$1 want=$2; shift 2
    ./prepare "$@" > /dev/null 2> "$T/err"; local rc=$?
    if [ $rc -eq 1 ] && grep -q -- "$want" "$T/err" && [ "$(wc -l < "$T/err")" -eq 1 ] && [ ! -e "$T/o.bin" ]; then ok "cli-$name"
    else fail "cli-$name" "exit $rc, stderr: $(head -c 200 "$T/err")"; fi
}
./prepare > /dev/null 2> "$T/err"; rc=$?
if [ $rc -eq 1 ] && grep -q '^usage: prepare' "$T/err"; then ok cli-no-args-usage; else fail cli-no-args-usage "exit $rc"; fi
opt_case no-tokenizer "--tokenizer" --out "$T/o.bin" "$T/good.jsonl"
opt_case no-out "--out" --tokenizer $TOK "$T/good.jsonl"
opt_case no-input "no input" --tokenizer $TOK --out "$T/o.bin"
opt_case unknown-option "unknown option --frobnicate" --tokenizer $TOK --out "$T/o.bin" --frobnicate "$T/good.jsonl"
opt_case bad-max-len "--max-len" --tokenizer $TOK --out "$T/o.bin" --max-len abc "$T/good.jsonl"
opt_case bad-policy "--policy" --tokenizer $TOK --out "$T/o.bin" --max-len 9 --policy shorten "$T/good.jsonl"
opt_case policy-without-max-len "--policy needs --max-len" --tokenizer $TOK --out "$T/o.bin" --policy drop "$T/good.jsonl"
opt_case val-out-without-fraction "--val-out needs --val-fraction" --tokenizer $TOK --out "$T/o.bin" --val-out "$T/v.bin" "$T/good.jsonl"
opt_case fraction-without-val-out "--val-fraction needs --val-out" --tokenizer $TOK --out "$T/o.bin" --val-fraction 0.1 "$T/good.jsonl"
opt_case bad-fraction "--val-fraction" --tokenizer $TOK --out "$T/o.bin" --val-out "$T/v.bin" --val-fraction 1.5 "$T/good.jsonl"
opt_case missing-input "nope.jsonl: cannot open" --tokenizer $TOK --out "$T/o.bin" "$T/nope.jsonl"
opt_case bad-tokenizer "$T/notok" --tokenizer "$T/notok" --out "$T/o.bin" "$T/good.jsonl"
opt_case out-is-input "also an input" --tokenizer $TOK --out "$T/good.jsonl" "$T/good.jsonl"
printf '\n  \n\n' > "$T/blank.jsonl"
opt_case empty-input "no documents" --tokenizer $TOK --out "$T/o.bin" "$T/blank.jsonl"
printf '%s\n{"text":"x"}\n' "$GOOD" > "$T/two.jsonl"
opt_case empty-val "none of the" --tokenizer $TOK --out "$T/o.bin" --val-out "$T/v.bin" --val-fraction 0.000001 "$T/two.jsonl"
[ -e "$T/v.bin" ] && fail cli-empty-val-no-file "the val file was written"

# ---------------------------------------------------------------- bad rows
# Each bad row is line 3 of a file (a good row, a blank line, the bad row, a good row).
# prepare must exit 1 with "FILE:3: reason", write nothing (neither --out nor
# --val-out, no temporary left), and leave an existing --out untouched.
BAD_NAMES=(); BAD_ROWS=(); BAD_WHY=()
add_bad() { BAD_NAMES+=("$1"); BAD_ROWS+=("$2"); BAD_WHY+=("$3"); }
add_bad malformed-json '{"text": "abc"' 'invalid JSON'
add_bad trailing-text '{"text":"a"} x' 'invalid JSON'
add_bad single-quotes "{'text':'a'}" 'invalid JSON'
add_bad invalid-utf8 $'{"text":"a\xffb"}' 'invalid UTF-8'
add_bad invalid-utf8-outside $'{"text":"a"}\xc3' 'invalid JSON'
add_bad lone-surrogate '{"text":"\ud800"}' 'surrogate'
add_bad not-an-object '["text","a"]' 'must be a JSON object'
add_bad no-shape '{"question":"a","answer":"b"}' 'no known shape'
add_bad ambiguous '{"text":"a","messages":[]}' 'ambiguous row'
add_bad missing-completion '{"prompt":"a"}' 'missing field "completion"'
add_bad missing-prompt '{"completion":"a"}' 'missing field "prompt"'
add_bad missing-output '{"instruction":"a","input":"b"}' 'missing field "output"'
add_bad missing-instruction '{"output":"a"}' 'missing field "instruction"'
add_bad missing-content '{"messages":[{"role":"user"}]}' 'missing field "content"'
add_bad missing-role '{"messages":[{"content":"x"}]}' 'missing field "role"'
add_bad missing-value '{"conversations":[{"from":"human"}]}' 'missing field "value"'
add_bad unknown-role '{"messages":[{"role":"tool","content":"x"}]}' 'unknown role "tool"'
add_bad unknown-role-nul '{"messages":[{"role":"user\u0000","content":"x"}]}' 'unknown role'
add_bad unknown-from '{"conversations":[{"from":"bot","value":"x"}]}' 'unknown role "bot"'
add_bad messages-human '{"messages":[{"role":"human","content":"x"}]}' 'unknown role "human"'
add_bad from-and-role '{"conversations":[{"from":"human","role":"user","value":"x"}]}' 'conversations\[0\] has both "from" and "role"'
add_bad sharegpt-role-no-content '{"conversations":[{"role":"user","value":"x"}]}' 'conversations\[0\]: missing field "content"'
add_bad sharegpt-no-from '{"conversations":[{"value":"x"}]}' 'missing field "from" (or "role")'
add_bad system-with-messages '{"system":"S","messages":[{"role":"user","content":"x"}]}' '"system" field is only read with'
add_bad system-with-text '{"system":"S","text":"x"}' '"system" field is only read with'
add_bad history-string '{"instruction":"a","output":"b","history":"x"}' '"history" must be a list of \[instruction, response\] pairs'
add_bad history-triple '{"instruction":"a","output":"b","history":[["q","r","s"]]}' 'history\[0\] must be a pair of strings'
add_bad history-number '{"instruction":"a","output":"b","history":[["q","r"],["q",1]]}' 'history\[1\] must be a pair of strings'
add_bad system-number '{"system":1,"instruction":"a","output":"b"}' '"system" must be a string'
add_bad system-twice '{"system":"S","conversations":[{"from":"system","value":"T"},{"from":"human","value":"x"}]}' 'both a "system" field and a system message (conversations\[0\])'
add_bad content-number '{"messages":[{"role":"user","content":5}]}' 'content must be a string, got a number'
add_bad content-null '{"messages":[{"role":"assistant","content":null}]}' 'content must be a string, got null'
add_bad content-list '{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}' 'content must be a string, got a list'
add_bad role-number '{"messages":[{"role":1,"content":"x"}]}' 'role must be a string'
add_bad text-list '{"text":["a"]}' '"text" must be a string'
add_bad prompt-number '{"prompt":1,"completion":"a"}' '"prompt" must be a string or a list'
add_bad completion-object '{"prompt":"a","completion":{"x":1}}' '"completion" must be a string or a list'
add_bad input-number '{"instruction":"a","input":5,"output":"b"}' '"input" must be a string'
add_bad output-number '{"instruction":"a","output":5}' '"output" must be a string'
add_bad messages-empty '{"messages":[]}' 'empty list'
add_bad messages-string '{"messages":"hi"}' 'must be a list of messages'
add_bad message-string '{"messages":["hi"]}' 'messages\[0\] must be an object'
add_bad second-message-bad '{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":2}]}' 'messages\[1\].content'
add_bad prompt-list-bad '{"prompt":[{"role":"human","content":"a"}],"completion":"b"}' 'prompt\[0\].role: unknown role'
add_bad row-number '42' 'must be a JSON object, got a number'

sentinel="existing output, must survive"
nbad=${#BAD_NAMES[@]}
for ((i = 0; i < nbad; i++)); do
    name=${BAD_NAMES[$i]}
    f="$T/bad-$name.jsonl"
    printf '%s\n\n%s\n%s\n' "$GOOD" "${BAD_ROWS[$i]}" "$GOOD" > "$f"
    rm -f "$T/o.bin" "$T/v.bin"
    ./prepare --tokenizer $TOK --out "$T/o.bin" --val-out "$T/v.bin" --val-fraction 0.5 "$f" > "$T/out" 2> "$T/err"; rc=$?
    msg=$(head -c 300 "$T/err")
    if [ $rc -ne 1 ]; then fail "bad-row-$name" "exit status $rc, expected 1 ($msg)"
    elif ! grep -q "^error: $f:3: " "$T/err"; then fail "bad-row-$name" "the message does not name $f:3: $msg"
    elif ! grep -q -- "${BAD_WHY[$i]}" "$T/err"; then fail "bad-row-$name" "the message does not say '${BAD_WHY[$i]}': $msg"
    elif [ -e "$T/o.bin" ] || [ -e "$T/v.bin" ] || ls "$T"/*.tmp > /dev/null 2>&1; then fail "bad-row-$name" "an output file was written"
    else ok "bad-row-$name"; fi
    # an existing output stays as it was
    printf '%s' "$sentinel" > "$T/o.bin"
    ./prepare --tokenizer $TOK --out "$T/o.bin" "$f" > /dev/null 2>&1; rc=$?
    if [ $rc -eq 1 ] && [ "$(cat "$T/o.bin")" = "$sentinel" ]; then ok "bad-row-$name-keeps-output"
    else fail "bad-row-$name-keeps-output" "exit $rc, or the existing output changed"; fi
done
rm -f "$T/o.bin"

# --skip-bad: all the bad rows above, between good rows; each skipped and counted
: > "$T/mixed.jsonl"
for ((i = 0; i < nbad; i++)); do printf '%s\n%s\n' "$GOOD" "${BAD_ROWS[$i]}" >> "$T/mixed.jsonl"; done
ASAN_BAD="$T/mixed.jsonl"
./prepare --tokenizer $TOK --out "$T/o.bin" --skip-bad "$T/mixed.jsonl" > "$T/out" 2> "$T/err"; rc=$?
if [ $rc -eq 0 ] && grep -q "^rows read: $((2 * nbad)) " "$T/out" && grep -q "^documents written: $nbad (train $nbad, val 0)" "$T/out" &&
   grep -q "^dropped: $nbad (too long 0, no trained tokens 0, bad rows skipped $nbad)" "$T/out" &&
   [ "$(grep -c '^warning: skipping bad row' "$T/err")" -eq 10 ] && grep -q "$nbad bad rows skipped" "$T/err"; then
    ok "skip-bad-counts ($nbad bad rows)"
else fail skip-bad-counts "exit $rc; report: $(grep -E '^(rows|documents|dropped)' "$T/out" | tr '\n' ';')"; fi
printf '%s\n' "${BAD_ROWS[0]}" "${BAD_ROWS[5]}" > "$T/allbad.jsonl"
./prepare --tokenizer $TOK --out "$T/o2.bin" --skip-bad "$T/allbad.jsonl" > /dev/null 2> "$T/err"; rc=$?
if [ $rc -eq 1 ] && grep -q "no documents" "$T/err" && [ ! -e "$T/o2.bin" ]; then ok skip-bad-all-bad-is-error
else fail skip-bad-all-bad-is-error "exit $rc: $(tail -1 "$T/err")"; fi

# ---------------------------------------------------------------- JSON arrays
# A file whose first non-space byte is '[' is one JSON array of rows (see
# test_prepare for the rows of every shape as a pretty-printed array). A broken array
# is fatal even with --skip-bad; a bad element is a bad row named by line and index.
arr_case() {  # NAME FILE-CONTENT (printf format) EXPECTED-STDERR-REGEX [OPTIONS]
    local name=$1 text=$2 want=$3; shift 3
    printf "$text" > "$T/arr.json"
    rm -f "$T/o.bin"
    ./prepare --tokenizer $TOK --out "$T/o.bin" "$@" "$T/arr.json" > /dev/null 2> "$T/err"; local rc=$?
    if [ $rc -eq 1 ] && grep -q -- "^error: $T/arr.json:$want" "$T/err" && [ "$(wc -l < "$T/err")" -eq 1 ] && [ ! -e "$T/o.bin" ]; then ok "array-$name"
    else fail "array-$name" "exit $rc, stderr: $(head -c 300 "$T/err")"; fi
    cp "$T/arr.json" "$T/arr-$name.json"  # again under ASan below
}
arr_case truncated '[\n  {"text": "a"},\n  {"text": "b"}\n' "4: the file ends inside the array, after 2 elements" --skip-bad
arr_case truncated-in-element '[\n  {"text": "a"},\n  {"text": "b' "3: the file ends inside element 1 of the array" --skip-bad
arr_case truncated-in-string-with-bracket '[{"text": "a ] \\" }' "1: the file ends inside element 0 of the array"
arr_case trailing-garbage '[{"text": "a"}]\n\nx\n' "3: unexpected text after the closing ']' of the array" --skip-bad
arr_case two-arrays '[{"text": "a"}] [{"text": "b"}]' "1: unexpected text after the closing ']'"
arr_case missing-comma '[{"text": "a"}\n {"text": "b"}]' "2: expected ',' or ']' after element 0 of the array, found '{'" --skip-bad
arr_case trailing-comma '[{"text": "a"},\n]' "2: element 1 of the array is missing" --skip-bad
arr_case double-comma '[{"text": "a"},,{"text": "b"}]' "1: element 1 of the array is missing"
arr_case bad-element '[\n  {"text": "a"},\n  {"text": "b"},\n  {\n    "messages": [\n      {"role": "tool", "content": "x"}\n    ]\n  }\n]\n' \
    '4: element 2: messages\[0\].role: unknown role "tool"'
arr_case bad-element-json '[\n  {"text": "a"},\n  {\n    "text": "b" x\n  }\n]' '3: element 1: invalid JSON (line 4 column 17: '
arr_case bad-element-json-first-line '[{"text": "a"}, {"text": "b" x}]' '1: element 1: invalid JSON (line 1 column 30: '
printf '  []  ' > "$T/arr.json"
./prepare --tokenizer $TOK --out "$T/o.bin" "$T/arr.json" > /dev/null 2> "$T/err"; rc=$?
if [ $rc -eq 1 ] && grep -q "^error: no documents for $T/o.bin (0 rows read" "$T/err"; then ok array-empty-no-rows
else fail array-empty-no-rows "exit $rc: $(head -c 300 "$T/err")"; fi
# --skip-bad skips a bad element and reads on
printf '[\n  {"text": "a"},\n  {"text": 5},\n  {"text": "c"}\n]' > "$T/arr.json"
./prepare --tokenizer $TOK --out "$T/o.bin" --skip-bad "$T/arr.json" > "$T/out" 2> "$T/err"; rc=$?
if [ $rc -eq 0 ] && grep -q "^rows read: 3 " "$T/out" && grep -q "^documents written: 2 " "$T/out" && grep -q "bad rows skipped 1)" "$T/out" &&
   grep -q "^warning: skipping bad row $T/arr.json:3: element 1: \"text\" must be a string" "$T/err"; then ok array-skip-bad-element
else fail array-skip-bad-element "exit $rc: $(tr '\n' ';' < "$T/err") $(head -3 "$T/out" | tr '\n' ';')"; fi
# the element scanner follows strings: brackets, commas and escaped quotes inside them
# are text; the array gives the same data file as the JSONL of the same rows
R1='{"text":"a ] } , [ { \" \\"}'; R2='{"prompt":"[{","completion":"\"]"}'; R3='{"messages":[{"role":"user","content":"}],"},{"role":"assistant","content":"[[,"}]}'
printf '%s\n%s\n%s\n' "$R1" "$R2" "$R3" > "$T/rows.jsonl"
printf '[%s,%s ,\n%s]' "$R1" "$R2" "$R3" > "$T/rows.json"
./prepare --tokenizer $TOK --out "$T/l.bin" "$T/rows.jsonl" > /dev/null 2>&1; rc1=$?
./prepare --tokenizer $TOK --out "$T/a.bin" "$T/rows.json" > "$T/out" 2>&1; rc2=$?
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && cmp -s "$T/l.bin" "$T/a.bin" && grep -q "^documents written: 3 " "$T/out"; then ok array-strings-with-brackets
else fail array-strings-with-brackets "exit $rc1/$rc2, or the files differ: $(head -3 "$T/out" | tr '\n' ';')"; fi
# rows longer than the 1 MB read buffer, and rows across its refills: an array and
# the JSONL of the same rows give the same data file
awk 'BEGIN { s = "word"; for (i = 0; i < 18; i++) s = s " " s;
             for (i = 0; i < 6000; i++) { if (i == 3000) printf "{\"text\":\"%s\"}\n", s; printf "{\"text\":\"row %d with [brackets], {braces} and \\\"quotes\\\"\"}\n", i } }' > "$T/long.jsonl"
awk 'BEGIN { printf "[" } { printf "%s%s\n", (NR > 1 ? ",  " : ""), $0 } END { printf "]" }' "$T/long.jsonl" > "$T/long.json"
./prepare --tokenizer $TOK --out "$T/l.bin" "$T/long.jsonl" > /dev/null 2>&1; rc1=$?
./prepare --tokenizer $TOK --out "$T/a.bin" "$T/long.json" > "$T/out" 2>&1; rc2=$?
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && cmp -s "$T/l.bin" "$T/a.bin" && grep -q "^documents written: 6001 " "$T/out"; then
    ok "array-long-rows-across-buffers ($(stat -c %s "$T/long.json") bytes)"
else fail array-long-rows-across-buffers "exit $rc1/$rc2, or the files differ: $(head -3 "$T/out" | tr '\n' ';')"; fi
# a JSONL file and an array file in one run; an empty array adds nothing
printf '[]\n' > "$T/empty.json"
./prepare --tokenizer $TOK --out "$T/m.bin" "$T/rows.json" "$T/empty.json" "$T/rows.jsonl" > "$T/out" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "^rows read: 6 (3 files)" "$T/out"; then ok array-and-jsonl-together
else fail array-and-jsonl-together "exit $rc: $(head -3 "$T/out" | tr '\n' ';')"; fi

# ---------------------------------------------------------------- warnings and --strict
# Valid rows that train badly: each listed on stderr with its line, counted in the report.
W="$T/warn.jsonl"
{
    printf '%s\n' "$GOOD"                                                                                   # 1
    printf '%s\n' '{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":" \n\t"}]}'  # 2 empty reply
    printf '%s\n' '{"instruction":"a","output":""}'                                                         # 3 empty reply
    printf '%s\n' '{"prompt":"a","completion":""}'                                                          # 4 empty reply
    printf '%s\n' '{"text":""}'                                                                             # 5 empty text
    printf '%s\n' '{"messages":[{"role":"user","content":"Hi"}]}'                                           # 6 no assistant
    printf '%s\n' '{"conversations":[{"from":"human","value":"Yo"}]}'                                       # 7 no assistant
    printf '%s\n' '{"prompt":[{"role":"user","content":"Q"}],"completion":[{"role":"user","content":"R"}]}' # 8 no assistant
    printf '%s\n' '{"prompt":[{"role":"user","content":"Q"},{"role":"assistant","content":"A"}],"completion":[{"role":"user","content":"S"}]}'  # 9 (few-shot answers are not trained)
    printf '%s\n' '{"id": 7, "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}'  # 10 duplicate of 1
    printf '%s\n' '{"text":"Hello world"}'                                                                  # 11
    printf '%s\n' '{"prompt":"Hello","completion":" world"}'                                                # 12 same tokens as 11, another mask
    printf '%s\n' '{"prompt":"","completion":"Hello world"}'                                                # 13 duplicate of 11
    printf '%s\n' "$GOOD" "$GOOD" "$GOOD"                                                                   # 14-16 duplicates of 1
} > "$W"
./prepare --tokenizer $TOK --out "$T/o.bin" "$W" > "$T/out" 2> "$T/err"; rc=$?
if [ $rc -eq 0 ] && grep -q "^warnings: empty reply 4, no assistant turn 4, duplicate 5 " "$T/out" && grep -q "^documents written: 16 " "$T/out"; then
    ok "warnings-counted (empty reply 4, no assistant turn 4, duplicate 5)"
else fail warnings-counted "exit $rc: $(grep -E '^(warnings|documents)' "$T/out" | tr '\n' ';')"; fi
want_lines=("$W:2: empty reply: messages[1].content is empty or only whitespace"
    "$W:3: empty reply: output is empty or only whitespace"
    "$W:4: empty reply: completion is empty or only whitespace"
    "$W:5: empty text: text is empty or only whitespace"
    "$W:6: conversation without an assistant turn"
    "$W:7: conversation without an assistant turn"
    "$W:8: conversation without an assistant turn"
    "$W:9: conversation without an assistant turn"
    "$W:10: duplicate of the document from $W:1 "
    "$W:13: duplicate of the document from $W:11 ")
listed=1
for ((i = 0; i < 10; i++)); do
    [ "$(sed -n "$((i + 1))p" "$T/err" | cut -c1-$((9 + ${#want_lines[$i]})))" = "warning: ${want_lines[$i]}" ] || { listed=0; fail warnings-listed "line $((i + 1)) of stderr is not 'warning: ${want_lines[$i]}...': $(sed -n "$((i + 1))p" "$T/err")"; break; }
done
if [ $listed -eq 1 ] && grep -q "^warning: 13 warnings in all (only the first 10 are listed" "$T/err" && [ "$(wc -l < "$T/err")" -eq 11 ]; then ok warnings-listed
elif [ $listed -eq 1 ]; then fail warnings-listed "stderr: $(tail -2 "$T/err")"; fi
# --strict: each kind of warning is an error (exit 1, nothing written)
strict_case() {  # NAME ROW EXPECTED-STDERR
    printf '%s\n%s\n' "$GOOD" "$2" > "$T/strict.jsonl"
    rm -f "$T/o.bin"
    ./prepare --tokenizer $TOK --out "$T/o.bin" --strict "$T/strict.jsonl" > /dev/null 2> "$T/err"; local rc=$?
    if [ $rc -eq 1 ] && grep -q -- "^error: $T/strict.jsonl:2: $3.* (--strict)\$" "$T/err" && [ ! -e "$T/o.bin" ]; then ok "strict-$1"
    else fail "strict-$1" "exit $rc: $(head -c 300 "$T/err")"; fi
}
strict_case empty-reply '{"instruction":"a","output":""}' 'empty reply: output'
strict_case no-assistant '{"messages":[{"role":"system","content":"S"},{"role":"user","content":"Hi"}]}' 'conversation without an assistant turn'
strict_case duplicate "$GOOD" "duplicate of the document from $T/strict.jsonl:1"
./prepare --tokenizer $TOK --out "$T/o.bin" --strict --skip-bad "$W" > "$T/out" 2> "$T/err"; rc=$?
if [ $rc -eq 0 ] && grep -q "^documents written: 3 " "$T/out" && grep -q "bad rows skipped 13)" "$T/out" && grep -q "^warnings: empty reply 0, no assistant turn 0, duplicate 0 " "$T/out"; then
    ok strict-skip-bad-skips-warned-rows
else fail strict-skip-bad-skips-warned-rows "exit $rc: $(grep -E '^(warnings|documents|dropped)' "$T/out" | tr '\n' ';')"; fi

# ---------------------------------------------------------------- progress
# Inputs over 8 MB get a progress line on stderr: not a terminal here, so one line per
# tenth of the input, the last at 100% with every row counted.
awk 'BEGIN { for (i = 0; i < 45000; i++) printf "{\"text\":\"row %d %s\"}\n", i, "aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjjj kkkk llll mmmm nnnn oooo pppp qqqq rrrr ssss tttt uuuu vvvv wwww xxxx yyyy zzzz aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjjj kkkk llll mmmm" }' > "$T/big.jsonl"
./prepare --tokenizer $TOK --out "$T/o.bin" "$T/big.jsonl" > "$T/out" 2> "$T/err"; rc=$?
size=$(stat -c %s "$T/big.jsonl")
pcts=$(grep '^progress: ' "$T/err" | sed 's/.*(\([0-9]*\)%).*/\1/' | tr '\n' ' ')
if [ $rc -eq 0 ] && [ "$size" -gt 8388608 ] && [ "$pcts" = "10 20 30 40 50 60 70 80 90 100 " ] &&
   tail -1 "$T/err" | grep -q "^progress: 45000 rows, .* MB (100%), [0-9.]* MB/s, ETA 0 s$"; then ok "progress-lines ($size bytes)"
else fail progress-lines "exit $rc, size $size, percentages '$pcts', last: $(tail -1 "$T/err")"; fi
./prepare --tokenizer $TOK --out "$T/o.bin" data/demo/train.jsonl > /dev/null 2> "$T/err"
if [ ! -s "$T/err" ]; then ok progress-quiet-on-small-inputs; else fail progress-quiet-on-small-inputs "$(head -2 "$T/err")"; fi

# ---------------------------------------------------------------- drops and the report
# Truncation to 6 tokens cuts all the trained tokens of a conversation (its answer
# starts later); a text row keeps trained tokens.
printf '%s\n{"text":"one two three four five six seven eight"}\n' "$GOOD" > "$T/trunc.jsonl"
./prepare --tokenizer $TOK --out "$T/o.bin" --max-len 6 "$T/trunc.jsonl" > "$T/out" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "^dropped: 1 (too long 0, no trained tokens 1, bad rows skipped 0)" "$T/out" && grep -q "^truncated: 1 " "$T/out" &&
   grep -q "^train tokens: 6 " "$T/out"; then ok report-truncate-drops-untrained
else fail report-truncate-drops-untrained "exit $rc: $(tr '\n' ';' < "$T/out")"; fi
./prepare --tokenizer $TOK --out "$T/o.bin" --max-len 20 --policy drop "$T/trunc.jsonl" > "$T/out" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "^dropped: 1 (too long 1, no trained tokens 0," "$T/out" && grep -q "^truncated: 0" "$T/out"; then ok report-policy-drop
else fail report-policy-drop "exit $rc: $(tr '\n' ';' < "$T/out")"; fi

D=data/demo/train.jsonl
./prepare --tokenizer $TOK --out "$T/all.bin" --pack-T 64 "$D" > "$T/out" 2>&1; rc=$?
rows=$(grep -c . "$D")
ref=$(./test_prepare --pack-stats "$T/all.bin" 64)
eff=$(echo "$ref" | awk '/^efficiency/ {print $2}')
prow=$(echo "$ref" | awk '/^efficiency/ {print $4}')
lens=$(echo "$ref" | awk '/^lengths/ {print $2, $3, $4, $5, $6, $7, $8, $9}')
if [ $rc -eq 0 ] && grep -q "^rows read: $rows (1 file)" "$T/out" && grep -q "^train packing at T=64: efficiency $eff (.* / $prow rows x 64 positions" "$T/out"; then
    ok "report-packing-matches-loader (efficiency $eff, $prow rows)"
else fail report-packing-matches-loader "loader says efficiency $eff rows $prow; report: $(grep packing "$T/out")"; fi
if grep -q "^train document length: $lens\$" "$T/out"; then ok "report-length-percentiles ($lens)"
else fail report-length-percentiles "expected '$lens', report: $(grep 'document length' "$T/out")"; fi
ntok=$(grep '^train tokens:' "$T/out" | awk '{print $3}'); ntr=$(grep '^train tokens:' "$T/out" | awk '{print $5}' | tr -d ,)
./prepare --tokenizer $TOK --out "$T/all2.bin" --train-on-prompt "$D" > "$T/out2" 2>&1
ntr2=$(grep '^train tokens:' "$T/out2" | awk '{print $5}' | tr -d ,)
if [ -n "$ntok" ] && [ "$ntr2" = "$((ntok - rows))" ] && [ "$ntr" -lt "$ntr2" ]; then ok "report-train-on-prompt ($ntr2 of $ntok trained)"
else fail report-train-on-prompt "trained $ntr2 of $ntok tokens with --train-on-prompt, expected $((ntok - rows))"; fi

# --show: the first N documents, trained text inside [[ ]], with a legend
./prepare --tokenizer $TOK --out "$T/o.bin" --show 3 "$D" > "$T/out" 2>&1
if grep -q "Text inside \[\[ \]\] is trained" "$T/out" && [ "$(grep -c '^--- document ' "$T/out")" -eq 3 ] &&
   grep -q '^\[\[.*<|im_end|><|endoftext|>\]\]$' "$T/out" && ! grep -q '\[\[<|im_start|>' "$T/out"; then ok show-marks-trained
else fail show-marks-trained "unexpected --show output: $(head -c 300 "$T/out")"; fi

# ---------------------------------------------------------------- the committed demo
if bash data/make_demo.sh "$T/demo" > "$T/demo.log" 2>&1; then
    same=1
    for f in train.jsonl eval.jsonl train.bin val.bin tokenizer/encoder.json tokenizer/vocab.bpe tokenizer/tokenizer.json; do
        cmp -s "$T/demo/$f" "data/demo/$f" || { same=0; fail demo-reproducible "data/demo/$f differs from a fresh bash data/make_demo.sh"; }
    done
    [ $same -eq 1 ] && ok demo-reproducible
    sz=$(du -cb data/demo/*.jsonl data/demo/*.bin data/demo/tokenizer/* | tail -1 | cut -f1)
    if [ "$sz" -lt 3500000 ]; then ok "demo-size ($sz bytes)"; else fail demo-size "data/demo is $sz bytes (limit 3.5 MB: it ships in the repository)"; fi
else fail demo-reproducible "bash data/make_demo.sh failed: $(tail -3 "$T/demo.log")"; fi

# ---------------------------------------------------------------- AddressSanitizer
ASAN="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all -std=gnu11"
if ! ${CC:-gcc} $ASAN -o "$T/asan_probe" -x c - <<< 'int main(void){return 0;}' > "$T/asan.log" 2>&1 || ! "$T/asan_probe" >> "$T/asan.log" 2>&1; then
    echo "skip asan: cannot build or run with -fsanitize=address ($(head -c 200 "$T/asan.log"))"
elif ! ${CC:-gcc} $ASAN -o "$T/test_prepare_asan" tests/data/test_prepare.c -lm > "$T/asan.log" 2>&1 ||
     ! ${CC:-gcc} $ASAN -o "$T/prepare_asan" data/prepare.c -lm >> "$T/asan.log" 2>&1; then
    fail asan-build "$(head -c 300 "$T/asan.log")"
else
    export ASAN_OPTIONS=exitcode=99:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
    "$T/test_prepare_asan" --json-only > "$T/asan.out" 2>&1; rc=$?
    sed -e 's/^ok /ok asan-/' -e 's/^FAIL /FAIL asan-/' "$T/asan.out" | grep -E '^(ok|FAIL) '
    [ $rc -ne 0 ] && ! grep -q '^FAIL' "$T/asan.out" && fail asan-json "exit $rc: $(grep -m3 -E 'ERROR|runtime error' "$T/asan.out")"
    bad_ok=1
    for ((i = 0; i < nbad; i++)); do
        "$T/prepare_asan" --tokenizer $TOK --out "$T/oa.bin" "$T/bad-${BAD_NAMES[$i]}.jsonl" > /dev/null 2> "$T/err"; rc=$?
        if [ $rc -ne 1 ] || grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error' "$T/err"; then
            bad_ok=0; fail "asan-prepare-bad-row-${BAD_NAMES[$i]}" "exit $rc: $(grep -m2 -E 'ERROR|runtime error' "$T/err")"
        fi
    done
    [ $bad_ok -eq 1 ] && ok "asan-prepare-bad-rows ($nbad rows, each exits 1 cleanly)"
    arr_ok=1
    for f in "$T"/arr-*.json; do
        "$T/prepare_asan" --tokenizer $TOK --out "$T/oa.bin" "$f" > /dev/null 2> "$T/err"; rc=$?
        if [ $rc -ne 1 ] || grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error' "$T/err"; then
            arr_ok=0; fail "asan-prepare-$(basename "$f")" "exit $rc: $(grep -m2 -E 'ERROR|runtime error' "$T/err")"
        fi
    done
    [ $arr_ok -eq 1 ] && ok "asan-prepare-broken-arrays ($(ls "$T"/arr-*.json | wc -l) files, each exits 1 cleanly)"
    "$T/prepare_asan" --tokenizer $TOK --out "$T/oa.bin" --val-out "$T/va.bin" --val-fraction 0.2 --skip-bad --show 2 --max-len 20 \
        "$ASAN_BAD" "$D" "$T/rows.json" "$W" "$T/arr.json" "$T/long.json" "$T/long.jsonl" > /dev/null 2> "$T/err"; rc=$?
    if [ $rc -eq 0 ] && ! grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error' "$T/err"; then ok asan-prepare-skip-bad-split-show
    else fail asan-prepare-skip-bad-split-show "exit $rc: $(grep -m2 -E 'ERROR|runtime error' "$T/err")"; fi
fi

[ $fails -eq 0 ]
