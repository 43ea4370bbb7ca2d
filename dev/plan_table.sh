#!/usr/bin/env bash
# dev/plan_table.sh: docs/distributed.md's table of per-rank device memory, from the GPU
# trainer's own planner (train_sftcu --plan, no GPU needed): full fine-tuning of
# Llama-3.1-8B's and Llama-3.1-70B's published shapes (tests/testdata/configs), bf16,
# B=1, T=2048, -r 2, at each ZeRO stage without and with the optimizer offloaded (-O 1).
# A cell is what each rank needs in GiB; * marks a plan that fits the GPU named in its row
# (train_sftcu --plan exits 0). tests/gpu/test_plan.sh checks the docs' copy against it.
#
# Usage: bash dev/plan_table.sh      (prints the Markdown table)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x ./train_sftcu ] || { echo "dev/plan_table.sh: build ./train_sftcu first (make train_sftcu)" >&2; exit 1; }

# cell CONFIG GIB W ZERO OFFLOAD: the per-rank GiB of the plan, with * when it fits
cell() {
    local out rc
    out=$(./train_sftcu --plan "$2" -e "tests/testdata/configs/$1" -b 1 -t 2048 -r 2 -W "$3" -Z "$4" -O "$5" 2>&1) && rc=0 || rc=$?
    local gib
    gib=$(sed -n 's/.* = \([0-9.]*\) GiB; a GPU.*/\1/p' <<< "$out")
    [ -n "$gib" ] || { echo "dev/plan_table.sh: no plan from $1 W=$3 -Z $4 -O $5: $out" >&2; exit 1; }
    if [ "$rc" -eq 0 ]; then printf '%s*' "$gib"; else printf '%s' "$gib"; fi
}

echo "| model, ranks W, GPU (GiB) | -Z 0 | -Z 1 | -Z 2 | -Z 3 | -Z 0 -O 1 | -Z 1 -O 1 | -Z 2 -O 1 | -Z 3 -O 1 |"
echo "|---|---|---|---|---|---|---|---|---|"
while read -r name config gib w; do
    row="| $name, W = $w, $gib |"
    for o in 0 1; do
        for z in 0 1 2 3; do
            if [ "$w" -eq 1 ] && [ "$z" -gt 0 ]; then row="$row - |"; continue; fi  # one rank: nothing to shard
            row="$row $(cell "$config" "$gib" "$w" "$z" "$o") |"
        done
    done
    echo "$row"
done << 'EOF'
Llama-3.1-8B llama-3.1-8b 24 1
Llama-3.1-8B llama-3.1-8b 24 8
Llama-3.1-8B llama-3.1-8b 24 16
Llama-3.1-70B llama-3.1-70b 139 16
Llama-3.1-70B llama-3.1-70b 139 64
EOF
