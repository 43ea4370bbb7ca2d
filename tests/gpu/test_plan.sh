#!/usr/bin/env bash
# tests/gpu/test_plan.sh: the GPU trainer's memory planner (train_sftcu --plan GIB), which
# needs the GPU program but no GPU. One `ok/FAIL/skip NAME` line per check:
# - Llama-3.1-8B's published config.json (tests/testdata/configs): P by a hand count from the
#   config's sizes, and the plan's weights, gradients and AdamW terms by the formulas of
#   docs/distributed.md (bf16 weights 2P, fp32 gradients 4P, master weights and two moments
#   12 bytes a value of the shard ceil(P/W) rounded up to 64), their sum with the activations
#   as printed;
# - the refusal names the cheapest change: with room for -Z 2's plan (printed by --plan -Z 2)
#   a -Z 1 run is told `-Z 2`; with a little less, but room for -Z 2 -r 1, that pair (-r 1
#   alone and -b halved are dearer or do not fit); on 8 GPUs of 24 GiB at -b 1 -r 2, `-Z 3 -O 1`
#   (no cheaper setting fits: the table below); with room for nothing, what else to do; a plan
#   that fits exits 0, one that does not exits 1;
# - docs/distributed.md's table is dev/plan_table.sh's output, cell for cell.
set -u
cd "$(dirname "$0")/../.." || exit 1
ok() { echo "ok $1${2:+: $2}"; }
fail() { echo "FAIL $1: $2"; status=1; }
status=0
[ -x ./train_sftcu ] || { echo "skip plan: ./train_sftcu not built (nvcc not found)"; exit 0; }
command -v python3 > /dev/null || { echo "skip plan: python3 not found"; exit 0; }
cfg8=tests/testdata/configs/llama-3.1-8b

# plan GIB FLAGS...: the run's output (stdout and stderr) and its exit status on the last line
plan() { local gib=$1; shift; ./train_sftcu --plan "$gib" -e $cfg8 -t 2048 "$@" 2>&1; echo "rc=$?"; }

out=$(plan 1000 -b 1 -r 2 -W 8 -Z 1)
if python3 - "$out" "$cfg8/config.json" <<'EOF'; then ok plan_llama31_8b_terms "$(echo "$out" | sed -n 2p | cut -c1-150)"; else fail plan_llama31_8b_terms "$out"; fi
import json, re, sys
out, c = sys.argv[1], json.load(open(sys.argv[2]))
V, C, L, FF = c['vocab_size'], c['hidden_size'], c['num_hidden_layers'], c['intermediate_size']
KV = c['num_key_value_heads'] * C // c['num_attention_heads']
P = 2 * V * C + C + L * (2 * C + 2 * C * C + 2 * C * KV + 3 * C * FF)  # embeddings, untied head, norms, q o k v, gate up down
W = 8
S = -(-(-(-P // W)) // 64) * 64
GiB = 2 ** 30
m = re.search(r'P = (\d+), W = 8, ZeRO-1', out)
t = re.search(r'parameters ([\d.]+) GiB \+ gradients ([\d.]+) GiB \+ master weights and AdamW ([\d.]+) GiB \+ activations ([\d.]+) GiB = ([\d.]+) GiB', out)
want = [2 * W * S / GiB, 4 * W * S / GiB, 12 * S / GiB]  # ZeRO-1 pads the weights and gradients to W shards
ok = m and int(m.group(1)) == P and t and all(abs(float(t.group(i + 1)) - want[i]) < 0.006 for i in range(3))
ok = ok and abs(sum(float(t.group(i)) for i in range(1, 5)) - float(t.group(5))) < 0.02 and out.endswith('rc=0')
if not ok: print(f'P {P}, want {want}', file=sys.stderr)
sys.exit(0 if ok else 1)
EOF

total() { sed -n 's/.* = \([0-9.]*\) GiB; a GPU.*/\1/p' <<< "$1"; }
z2=$(total "$(plan 1000 -b 4 -r 0 -W 8 -Z 2)")
z2r1=$(total "$(plan 1000 -b 4 -r 1 -W 8 -Z 2)")
gib=$(python3 -c "print(f'{$z2 + 0.05:.2f}')")  # room for -Z 2 (plus the cuBLAS workspace)
out=$(plan "$gib" -b 4 -r 0 -W 8 -Z 1)
if grep -q "the cheapest change that fits: -Z 2 ($z2 GiB)" <<< "$out" && [ "${out##*rc=}" = 1 ]; then ok plan_cheapest_change_zero2 "$gib GiB: -Z 2 ($z2 GiB)"
else fail plan_cheapest_change_zero2 "$out"; fi
gib=$(python3 -c "print(f'{($z2 + $z2r1) / 2 + 0.03:.2f}')")  # not -Z 2 alone, but with -r 1
out=$(plan "$gib" -b 4 -r 0 -W 8 -Z 1)
if grep -q "the cheapest change that fits: -Z 2 -r 1 ($z2r1 GiB)" <<< "$out"; then ok plan_cheapest_change_two_flags "$gib GiB: -Z 2 -r 1 ($z2r1 GiB)"
else fail plan_cheapest_change_two_flags "$out"; fi
out=$(plan 24 -b 1 -r 2 -W 8 -Z 1)
if grep -q "the cheapest change that fits: -Z 3 -O 1 (14.64 GiB)" <<< "$out"; then ok plan_cheapest_change_zero3_offload "24 GiB, 8 ranks: -Z 3 -O 1"
else fail plan_cheapest_change_zero3_offload "$out"; fi
out=$(plan 8 -b 4 -r 0 -W 1)
if grep -q "no setting of -Z, -r, -b.* makes it fit: use more ranks, LoRA (-A)" <<< "$out" && [ "${out##*rc=}" = 1 ]; then ok plan_nothing_fits "$(grep -o 'no setting.*' <<< "$out")"
else fail plan_nothing_fits "$out"; fi
table=$(bash dev/plan_table.sh 2>&1)
# the whole table, in order (grep -F would take each line alone)
if [ -n "$table" ] && python3 -c 'import sys; sys.exit(sys.argv[1] not in open("docs/distributed.md").read())' "$table"; then ok plan_table_in_docs "$(wc -l <<< "$table") lines of dev/plan_table.sh as in docs/distributed.md"
else fail plan_table_in_docs "docs/distributed.md does not hold dev/plan_table.sh's table (run it and paste): $(head -c 300 <<< "$table")"; fi
exit $status
