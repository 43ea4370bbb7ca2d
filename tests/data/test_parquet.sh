#!/usr/bin/env bash
# Parquet input of ./prepare (data/parquet.h): each fixture in tests/testdata/parquet/,
# written by DuckDB and by arrow-rs (parquet-wasm) from the rows of a JSONL file beside it
# (tests/data/make_parquet.mjs: flat and nested columns, pages v1 and v2, dictionary and
# plain, two rows per row group, every codec, nulls, extra columns), must give the
# training file the JSONL gives, byte for byte; several shards in one call give the
# shards' rows in order; a truncated or damaged file is one error line naming it, exit 1,
# nothing written. Prints "ok NAME", "FAIL NAME: why" per check.
set -u
cd "$(dirname "$0")/../.."
fails=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
if [ ! -x ./prepare ]; then make -s prepare || { echo "FAIL build: make prepare"; exit 1; }; fi
TOK=data/demo/tokenizer
D=tests/testdata/parquet
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

for s in messages sharegpt alpaca pc; do
    ./prepare --tokenizer $TOK --out "$T/$s.bin" "$D/$s.jsonl" > /dev/null 2> "$T/err" || { fail "jsonl-$s" "$(head -c 200 "$T/err")"; continue; }
    for f in "$D"/*_"$s"_*.parquet; do
        n=$(basename "$f" .parquet)
        if ./prepare --tokenizer $TOK --out "$T/p.bin" "$f" > /dev/null 2> "$T/err" && cmp -s "$T/p.bin" "$T/$s.bin"; then ok "parquet-$n"
        else fail "parquet-$n" "not the JSONL's training file: $(head -c 200 "$T/err")"; fi
        rm -f "$T/p.bin"
    done
done

# several shards in one call, in order, against the JSONL files in the same order
cat "$D/messages.jsonl" "$D/sharegpt.jsonl" "$D/alpaca.jsonl" > "$T/all.jsonl"
./prepare --tokenizer $TOK --out "$T/all.bin" "$T/all.jsonl" > /dev/null 2>&1
if ./prepare --tokenizer $TOK --out "$T/shards.bin" "$D/duckdb_messages_zstd.parquet" "$D/arrow_sharegpt_v2_dict_gzip.parquet" \
       "$D/arrow_alpaca_v1_dict_snappy.parquet" > /dev/null 2> "$T/err" && cmp -s "$T/shards.bin" "$T/all.bin"; then ok parquet-shards-in-order
else fail parquet-shards-in-order "$(head -c 200 "$T/err")"; fi

# damaged files: one line naming the file, exit 1, no output
bad_case() {  # NAME FILE WANT
    ./prepare --tokenizer $TOK --out "$T/o.bin" "$2" > /dev/null 2> "$T/err"; local rc=$?
    if [ $rc -eq 1 ] && [ "$(wc -l < "$T/err")" -eq 1 ] && grep -q "$2" "$T/err" && grep -q -- "$3" "$T/err" && [ ! -e "$T/o.bin" ]; then ok "parquet-bad-$1"
    else fail "parquet-bad-$1" "exit $rc: $(head -c 300 "$T/err")"; fi
}
src=$D/arrow_messages_v2_dict_snappy.parquet
size=$(stat -c %s "$src")
head -c $((size - 3)) "$src" > "$T/truncated.parquet"; bad_case truncated "$T/truncated.parquet" "no PAR1 at the end"
head -c $((size / 2)) "$src" > "$T/half.parquet"; printf 'PAR1' >> "$T/half.parquet"; bad_case half "$T/half.parquet" "footer"
# the footer's length claims more than the file
{ head -c $((size - 8)) "$src"; printf '\377\377\377\000PAR1'; } > "$T/len.parquet"; bad_case footer-length "$T/len.parquet" "larger than the file"
# a page's bytes damaged: flip every byte in the middle of the data
python3 -c "
import sys; b = bytearray(open('$src', 'rb').read()); n = len(b)
for i in range(40, 200): b[i] ^= 0x5a
open('$T/flipped.parquet', 'wb').write(b)"
bad_case damaged-pages "$T/flipped.parquet" "row group\|page\|malformed"

[ $fails -eq 0 ]
