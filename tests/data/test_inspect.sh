#!/usr/bin/env bash
# Checks of `./prepare --inspect` on a data file written here byte by byte (so the
# expected counts, histogram and renderings are worked out by hand below, not by
# the code under test), and of `./tok decode` on the chat tokens prepare adds.
# Prints "ok NAME", "FAIL NAME: why" per check; run from anywhere.
set -u
cd "$(dirname "$0")/../.."
fails=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }

if [ ! -x ./prepare ] || [ ! -x ./tok ]; then make -s prepare tok || { echo "FAIL build: make prepare tok"; exit 1; }; fi
TOK=data/demo/tokenizer   # 314 tokens (ids 0..255 the bytes in GPT-2's order, 313 <|endoftext|>) + 314 <|im_start|>, 315 <|im_end|>
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# ---------------------------------------------------------------- a hand-made file
i64() { local i; for i in 0 1 2 3 4 5 6 7; do printf "\\x$(printf %02x $(( ($1 >> (8 * i)) & 255 )))"; done; }
u16() { local v; for v in "$@"; do printf "\\x$(printf %02x $((v & 255)))\\x$(printf %02x $((v >> 8)))"; done; }
u8() { local v; for v in "$@"; do printf "\\x$(printf %02x "$v")"; done; }
# Byte ids (GPT-2 order): '!'..'~' are 0..93 ('H' 39, 'i' 72, '\' 59, 'a' 64); bytes
# 161..172 are 94..105 and 174..255 are 106..187 (0xa9 102, 0xc3 127); then bytes
# 0..32, 127..160, 173 in order from 188 (0x00 188, TAB 197, LF 198, DEL 221, 0x85 227),
# so 0xc2 (194) is 126.
# doc 0 (6 tokens): <|endoftext|> H i [[ ! <|im_end|> <|endoftext|> ]]
# doc 1 (10 tokens): é(c3 a9) [[ \x00 TAB ]] \ DEL LF [[ H ]] U+0085(c2 85, a C1 control)
# doc 2 (2 tokens): c3 [[ a9 ]]          (an é split by the mark: escaped byte by byte)
# doc 3 (10 tokens): a [[ a a a a a a a a a ]]
TOKS="313 39 72 0 315 313   127 102 188 197 59 221 198 39 126 227   127 102   64 64 64 64 64 64 64 64 64 64"
MASK="0 0 0 1 1 1           0 0 1 1 0 0 0 1 0 0                 0 1       0 1 1 1 1 1 1 1 1 1"
# header: magic, version, 2 bytes per token, vocabulary, D, N, fingerprint (field 6), zeros (field 7: chat format gpt2)
write_file() {  # PATH VOCAB FINGERPRINT-BYTES-FILE
    { i64 20261130; i64 1; i64 2; i64 "$2"; i64 4; i64 28; cat "$3"; head -c $((121 * 8)) /dev/zero
      for o in 0 6 16 18 28; do i64 $o; done; u16 $TOKS; u8 $MASK; } > "$1"
}
dd if=data/demo/val.bin of="$T/fp" bs=1 skip=48 count=8 2>/dev/null   # the demo tokenizer's fingerprint, as prepare wrote it
head -c 8 /dev/zero > "$T/fp0"
printf '\x01\x02\x03\x04\x05\x06\x07\x08' > "$T/fpx"
write_file "$T/h.bin" 316 "$T/fp"
write_file "$T/old.bin" 316 "$T/fp0"
write_file "$T/other.bin" 316 "$T/fpx"
fp=$(od -A n -t x8 "$T/fp" | tr -d ' ')

if ./prepare --inspect "$T/h.bin" > "$T/out" 2> "$T/err"; then
    expect="file: $T/h.bin
header: version 1, 2 bytes per token, vocabulary 316, tokenizer fingerprint $fp
chat format: gpt2
documents: 4
tokens: 28 (trained 16, fraction 0.5714); largest token id 315
document length: min 2, mean 7.0, max 10
document length histogram (tokens: documents):
              2-3:        1 ####################
              4-7:        1 ####################
             8-15:        2 ########################################"
    if [ "$(cat "$T/out")" = "$expect" ]; then ok inspect-summary-and-histogram
    else fail inspect-summary-and-histogram "got: $(cat "$T/out")"; fi
else fail inspect-summary-and-histogram "exit status $?: $(cat "$T/err")"; fi

doc_of() { sed -n '/^--- document/,$p' "$T/out" | tail -n +2; }  # the rendering after the document line
./prepare --inspect "$T/h.bin" --doc 0 > "$T/out" 2>&1
if [ "$(doc_of)" = "313 39 72 [[0 315 313]]" ] && grep -q '^--- document 0 of 4: 6 tokens, 3 trained' "$T/out"; then ok inspect-doc-ids
else fail inspect-doc-ids "got: $(cat "$T/out")"; fi
./prepare --inspect "$T/h.bin" --tokenizer $TOK --doc 0 > "$T/out" 2>&1
if [ "$(doc_of)" = "<|endoftext|>Hi[[!<|im_end|><|endoftext|>]]" ] &&
   grep -q "^tokenizer: $TOK (with the chat tokens): vocabulary 316, fingerprint $fp: matches the file$" "$T/out"; then ok inspect-doc-text
else fail inspect-doc-text "got: $(cat "$T/out")"; fi
./prepare --inspect "$T/h.bin" --tokenizer $TOK --doc 1 > "$T/out" 2>&1
want=$(printf '%s\n%s' 'é[[\x00\t]]\\\x7f' '[[H]]\xc2\x85')
if [ "$(doc_of)" = "$want" ]; then ok inspect-doc-escapes
else fail inspect-doc-escapes "got: $(doc_of | od -c | head -5)"; fi
./prepare --inspect "$T/h.bin" --tokenizer $TOK --doc 2 > "$T/out" 2>&1
if [ "$(doc_of)" = '\xc3[[\xa9]]' ]; then ok inspect-doc-split-character
else fail inspect-doc-split-character "got: $(doc_of)"; fi
./prepare --inspect "$T/h.bin" --doc 3 > "$T/out" 2>&1
if [ "$(doc_of)" = "64 [[64 64 64 64 64 64 64 64 64]]" ]; then ok inspect-doc-ends-trained
else fail inspect-doc-ends-trained "got: $(doc_of)"; fi

# a file without a fingerprint (written before the field existed), and one made with another tokenizer
./prepare --inspect "$T/old.bin" --tokenizer $TOK > "$T/out" 2>&1
if grep -q '^header: .*tokenizer fingerprint unknown' "$T/out" && grep -q 'same vocabulary size (the file has no fingerprint to compare)$' "$T/out"
then ok inspect-old-file; else fail inspect-old-file "got: $(cat "$T/out")"; fi
./prepare --inspect "$T/other.bin" --tokenizer $TOK > "$T/out" 2>&1
if grep -q "fingerprint $fp: DOES NOT MATCH the file (vocabulary 316, fingerprint 0807060504030201)" "$T/out"
then ok inspect-fingerprint-mismatch; else fail inspect-fingerprint-mismatch "got: $(cat "$T/out")"; fi
TOKS=${TOKS/313 39 72/313 350 72}   # doc 0 with an id the tokenizer lacks
write_file "$T/big.bin" 400 "$T/fp0"
./prepare --inspect "$T/big.bin" --tokenizer $TOK --doc 0 > "$T/out" 2>&1
if grep -q "vocabulary 316, fingerprint $fp: DOES NOT MATCH the file (vocabulary 400, fingerprint 0000000000000000)" "$T/out" &&
   [ "$(doc_of)" = "<|endoftext|><unknown id 350>i[[!<|im_end|><|endoftext|>]]" ]
then ok inspect-vocabulary-mismatch; else fail inspect-vocabulary-mismatch "got: $(cat "$T/out")"; fi

# errors: exit 1, one line
err_case() {  # NAME WANT ARGS...
    local name=$1 want=$2; shift 2
    ./prepare --inspect "$@" > /dev/null 2> "$T/err"; local rc=$?
    if [ $rc -eq 1 ] && [ "$(wc -l < "$T/err")" -eq 1 ] && grep -q -- "$want" "$T/err"; then ok "inspect-error-$name"
    else fail "inspect-error-$name" "exit $rc: $(cat "$T/err")"; fi
}
err_case doc-out-of-range "h.bin: --doc 4 is out of range: the file has 4 documents" "$T/h.bin" --doc 4
err_case bad-doc "--doc: 'x' is not a document number" "$T/h.bin" --doc x
err_case missing-file "nope.bin: cannot open" "$T/nope.bin"
err_case unknown-option "unknown option --frob" "$T/h.bin" --frob
head -c 1100 "$T/h.bin" > "$T/cut.bin"
err_case truncated "cut.bin: file is 1100 bytes" "$T/cut.bin"

# ---------------------------------------------------------------- ./tok decode of prepare's tokens
if [ "$(echo "313 314 39 72 198 315" | ./tok decode --gpt2 $TOK)" = "$(printf '<|endoftext|><|im_start|>Hi\n<|im_end|>')" ]
then ok tok-decode-chat-tokens; else fail tok-decode-chat-tokens "got: $(echo "313 314 39 72 198 315" | ./tok decode --gpt2 $TOK 2>&1)"; fi
echo "314 316" | ./tok decode --gpt2 $TOK > /dev/null 2> "$T/err"; rc=$?
if [ $rc -eq 1 ] && grep -q 'token id 316 is out of range (vocabulary size 316)' "$T/err"; then ok tok-decode-beyond-chat-tokens
else fail tok-decode-beyond-chat-tokens "exit $rc: $(cat "$T/err")"; fi
# a prepared document, as ids (from the inspector), decoded by ./tok: the document's text
printf '%s\n' '{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Ok"}]}' > "$T/one.jsonl"
./prepare --tokenizer $TOK --out "$T/one.bin" "$T/one.jsonl" > /dev/null
./prepare --inspect "$T/one.bin" --doc 0 > "$T/out"
doc_of | tr -d '[]' | ./tok decode --gpt2 $TOK > "$T/text" 2> "$T/err"
if cmp -s "$T/text" <(printf '<|endoftext|><|im_start|>user\nHi<|im_end|><|im_start|>assistant\nOk<|im_end|><|endoftext|>'); then
    ok tok-decode-prepared-document
else fail tok-decode-prepared-document "got: $(cat "$T/text" "$T/err")"; fi

# ---------------------------------------------------------------- the chat format and default system message
# llama3 with the demo tokenizer: its five tokens are added after the 314 (314..318);
# the inspector reads the format from the header, so with the tokenizer they decode
./prepare --tokenizer $TOK --chat-format llama3 --system "$(printf 'Be\tbrief.')" --out "$T/l3.bin" "$T/one.jsonl" > /dev/null
./prepare --inspect "$T/l3.bin" --tokenizer $TOK --doc 0 > "$T/out" 2>&1
want=$(printf '%s\n\n%s\n\n%s\n\n%s' '<|begin_of_text|><|start_header_id|>system<|end_header_id|>' \
    'Be\tbrief.<|eot_id|><|start_header_id|>user<|end_header_id|>' 'Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>' '[[Ok<|eot_id|>]]')
if grep -qx 'chat format: llama3' "$T/out" && grep -qx 'default system message: Be\\tbrief\.' "$T/out" &&
   grep -q 'vocabulary 319, fingerprint .*: matches the file' "$T/out" && [ "$(doc_of)" = "$want" ]; then ok inspect-chat-format-and-system
else fail inspect-chat-format-and-system "got: $(cat "$T/out")"; fi

[ $fails -eq 0 ]
