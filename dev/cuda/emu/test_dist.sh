#!/usr/bin/env bash
# dev/cuda/emu/test_dist.sh BIN_DIR: the GPU trainer's data parallelism under the CUDA
# emulator, as real processes talking through the emulated NCCL (run by `run.sh dist`
# from the converted copy of the repository, with BIN_DIR holding train_sftcu and
# train_sftcu_fp32 built for the emulator). One `ok/FAIL/skip NAME` line per check:
# - 2 ranks launched by torchrun (Debian's python3-torch; the NCCL id over TCP, -Z 0 through
#   -f DIR) against 1 process with the same -d, in fp32 with ZeRO-1 and -Z 0, and in bf16: per-step losses, gradient norms and
#   validation losses, the final weights, AdamW moments and counters (cmp_runs.py; the
#   tolerances are float rounding: only the order of the gradient sums differs); the same
#   with ZeRO-1 for a Llama-family model (untied head, grouped-query attention) and a Gemma 3 one,
#   and for LoRA adapters on a frozen GPT-2 (with dropout),
#   and on 2 and 3 ranks for a model whose parameter count they do not divide (the last shard short);
# - 2 ranks launched by mpirun with the MPI build (train_sftcu_fp32_mpi: the NCCL id by
#   MPI_Bcast; no MASTER_ADDR, no -f, so the rendezvous cannot have carried it) against 1;
# - the CPU trainer on the same flags (its kernels sum in other orders, and AdamW turns
#   the small relative differences of tiny gradients into larger ones: weights to 1e-3) (one process, and mpirun -np 2 ./train_sft_mpi where
#   Open MPI and that target are present);
# - checkpoints do not depend on W: a 2-rank run's step-2 checkpoint resumed by 1 process
#   (and the other way round) ends where the uninterrupted run ends;
# - ZeRO-2 (-Z 2) against 1 process: GPT-2 on 2 ranks (torchrun) and 3 (uneven shards), a
#   Llama-family model on 3, LoRA on 2, bf16 on 2, 2 micro-batches a rank; its checkpoint resumed by 1
#   process and 1 process's by 3 ranks with ZeRO-2; the CPU trainer; its gradient memory is
#   the shard and the units' scratch (4S + 4U), with nothing else allocated beyond the plan;
# - per-rank memory: the ZeRO-1 state is 8P/W bytes (fp32) and what is allocated follows
#   the plan; a rank killed with -9 ends the other with an error line within 30 s; a rank
#   that hangs ends the other by SFT_NCCL_TIMEOUT; ranks started with different flags
#   refuse with one line; a build without NCCL (-DSFT_NO_NCCL) refuses W > 1 with one line.
set -u
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
tmp=$(mktemp -d /tmp/test_dist.XXXXXX)
pids=""
cleanup() {
    for p in $pids; do kill -9 "$p" 2> /dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
export OMP_NUM_THREADS=1 EMU_DEVICES=2 SFT_NCCL_TIMEOUT=30
status=0
ok() { echo "ok $1${2:+: $2}"; }
fail() { echo "FAIL $1: $2"; status=1; }
cmp_runs() { $py "$here/cmp_runs.py" "$@" || status=1; }

F="-i dev/ref/tiny_train.bin -j dev/ref/tiny_val.bin -v 2 -m -1 -e d2c64h2t32 -b 2 -t 16 -x 4 -n 2 -S 1 -l 1e-2 -d 128"
port=$((29500 + RANDOM % 400))
# torchrun2 NAME BINARY FLAGS...: 2 ranks on this machine; the NCCL id over TCP to torchrun's
# MASTER_ADDR at MASTER_PORT + 1, or with RDZV=dir through a directory (-f)
# (--redirects/--tee 2: torch 1.13's default of "no redirection" fails on Python 3.12)
torchrun2() {
    local name=$1 b=$2 f=""
    shift 2
    [ "${RDZV:-tcp}" = dir ] && { mkdir -p "$tmp/$name.rdzv"; f="-f $tmp/$name.rdzv"; }
    port=$((port + 2))
    timeout 300 $py -m torch.distributed.run --redirects 2 --tee 2 --log_dir "$tmp/$name.tlogs" --no_python --nproc_per_node 2 \
        --master_port $port "$b" $F -o "$tmp/$name" $f "$@" > "$tmp/$name.log" 2>&1
}
single() {
    local name=$1 b=$2
    shift 2
    timeout 300 "$b" $F -o "$tmp/$name" "$@" > "$tmp/$name.log" 2>&1
}
ran() {  # ran NAME STATUS: a run that must have succeeded
    if [ "$2" -ne 0 ]; then fail "$1" "exit status $2; log: $(grep -m2 -i 'error' "$tmp/$1.log" | tr '\n' ' ')"; return 1; fi
}

# hand NAME W BINARY FLAGS...: W ranks started by hand (-R -W) through -f DIR; the exit status of rank 0, or else of the first failing rank
hand() {
    local name=$1 w=$2 b=$3 rc=0 ps="" p
    shift 3
    mkdir -p "$tmp/$name.rdzv"
    for ((r = 1; r < w; r++)); do
        EMU_DEVICES=$w timeout 300 "$b" $F -o "$tmp/$name" -f "$tmp/$name.rdzv" -R $r -W $w "$@" > "$tmp/$name.r$r.log" 2>&1 &
        ps="$ps $!"
    done
    pids="$pids $ps"
    EMU_DEVICES=$w timeout 300 "$b" $F -o "$tmp/$name" -f "$tmp/$name.rdzv" -R 0 -W $w "$@" > "$tmp/$name.log" 2>&1 || rc=$?
    for p in $ps; do
        wait $p
        local x=$?
        [ $rc -eq 0 ] && rc=$x
    done
    return $rc
}
# one_mem LOG: a run's planned MiB and each rank's in use (the memory| lines)
one_mem() {
    sed -n 's/^memory| per rank: .*= \([0-9.]*\) MiB planned.*/\1/p' "$1"
    sed -n 's/^memory| rank [0-9]*: in use after setup \([0-9.]*\) MiB/\1/p' "$1"
}
# unit_memory NAME WHAT LETTER HELD L ONE LINE...: in a ZeRO-2 or ZeRO-3 memory| line, WHAT (the
# gradients or the parameters) is the shard S (ceil(P/W) rounded up to 64) plus the units' LETTER
# = P - (L - HELD) x the block's 12C^2 + 13C (C = 64: the embeddings, ln_f and HELD blocks), and
# what each rank has in use beyond the plan is 1 process's (ONE: one_mem of its log). Each LINE:
# P, LETTER, W, WHAT's MiB, the shard's, the units', the planned total, then each rank's in use.
unit_memory() {
    $py - "$@" <<'PYEOF' || status=1
import sys
name, what, letter, held, L, one = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6].split()
MiB, C = 1048576, 64
problems, seen = [], []
if len(one) != 2: problems.append(f'no 1-process memory lines: {sys.argv[6]!r}')
else: extra1 = float(one[1]) - float(one[0])
for text in sys.argv[7:]:
    v = text.split()
    if len(v) < 8 or problems:
        problems.append(f'no memory line: {text!r}'); continue
    P, X, W = int(v[0]), int(v[1]), int(v[2])
    total, shard_mib, units_mib, planned = (float(x) for x in v[3:7])
    used = [float(x) for x in v[7:]]
    expect = P - (L - held) * (12 * C * C + 13 * C)
    S = ((P + W - 1) // W + 63) // 64 * 64
    if X != expect: problems.append(f'W={W}: {letter} = {X}, expected {expect}')
    if abs(shard_mib - 4 * S / MiB) > 0.006: problems.append(f'W={W}: shard {shard_mib} MiB, expected 4S = {4 * S / MiB:.3f}')
    if abs(units_mib - 4 * expect / MiB) > 0.006: problems.append(f'W={W}: units {units_mib} MiB, expected 4{letter} = {4 * expect / MiB:.3f}')
    if abs(total - (4 * S + 4 * expect) / MiB) > 0.006: problems.append(f'W={W}: {what} {total} MiB, expected 4S + 4{letter}')
    if len(used) != W: problems.append(f'W={W}: {len(used)} in-use lines')
    for u in used:
        if abs(u - planned - extra1) > 0.02: problems.append(f'W={W}: in use {u} MiB minus planned {planned} is not the 1-process {extra1:.2f} MiB')
    seen.append(f'W={W}: 4S + 4{letter} = {4 * S / MiB:.3f} + {4 * X / MiB:.3f} MiB (P = {P}, {letter} = {X})')
if problems:
    print(f'FAIL {name}: ' + '; '.join(problems)); sys.exit(1)
print(f'ok {name}: {what} ' + ', '.join(seen) + f'; in use beyond the plan {extra1:.2f} MiB as 1 process')
PYEOF
}

# ---- ZeRO-3 (-Z 3): the floatX weights sharded in the units (cuda/zero3.cuh), each gathered (a
# group of ncclBroadcast, one per rank holding part of it) into its own buffer before it is read,
# the next block ahead on the comm stream; the gradients as ZeRO-2. 4-layer models: with 2 layers
# no block buffer is ever gathered into twice in a step, so the comm stream's wait before it
# overwrites a buffer would go unexercised. GPT-2 on 2 ranks (torchrun; again by hand with
# EMU_STREAM_ORDER=rev) and on 3 (uneven shards), a Llama-family model (untied lm_head,
# grouped-query heads) on 3 with greedy samples every 2 steps (rank 0 generates, the others follow
# its forwards' gathers); 2 micro-batches a rank, against 1 process: losses and norms 1e-5, weights
# and moments 1e-3 for GPT-2 (at 4 layers ZeRO-1 and ZeRO-2 on the same flags end 4.5e-4 apart from
# 1 process, in one mlp.c_proj weight whose gradient is nearly zero: AdamW scales the rounding of
# the sums' order up), 1e-4 for the Llama-family model. The gathered weights are the same floats as
# the whole ones, so -Z 3 is bit-identical to -Z 2 at the same W (checked, in the rev order too,
# and in the bf16 build).
# Then checkpoints across W and stage, the memory line, LoRA, and QLoRA's refusal. With
# DIST_ZERO3_ONLY=1 the script ends after these checks. ----
z3_started=$SECONDS
F_GPT2=$F
F=${F/-e d2c64h2t32/-e d4c64h2t32}
single z3_one "$bin/train_sftcu_fp32"; ran z3_one $? &&
    { torchrun2 z3 "$bin/train_sftcu_fp32" -Z 3; ran z3 $? && cmp_runs dist_zero3_gpt2_2_ranks_equals_1_rank "$tmp/z3_one" "$tmp/z3" 1e-5 1e-3; }
[ -d "$tmp/z3" ] && { hand z3_z2 2 "$bin/train_sftcu_fp32" -Z 2; ran z3_z2 $? && cmp_runs dist_zero3_bit_identical_to_zero2 "$tmp/z3_z2" "$tmp/z3" 0 0
    EMU_STREAM_ORDER=rev hand z3_rev 2 "$bin/train_sftcu_fp32" -Z 3; ran z3_rev $? && cmp_runs dist_zero3_stream_order_rev_bit_identical "$tmp/z3" "$tmp/z3_rev" 0 0; }
# the bf16 build (bf16 shard and broadcasts, the fp32 master shard apart): bit-identical to its -Z 2
hand z3_bf16_z2 2 "$bin/train_sftcu" -Z 2; ran z3_bf16_z2 $? &&
    { hand z3_bf16 2 "$bin/train_sftcu" -Z 3; ran z3_bf16 $? && cmp_runs dist_zero3_bf16_bit_identical_to_zero2 "$tmp/z3_bf16_z2" "$tmp/z3_bf16" 0 0; }
# a ZeRO-3 checkpoint resumed by 1 process, and a ZeRO-1 one (2 ranks) by 2 ranks with ZeRO-3
if [ -d "$tmp/z3/step_00000002" ]; then
    cp -r "$tmp/z3" "$tmp/z3_res1"; rm -rf "$tmp/z3_res1"/step_00000004; echo step_00000002 > "$tmp/z3_res1/latest"
    single z3_res1 "$bin/train_sftcu_fp32" -y 1; ran z3_res1 $? && cmp_runs dist_zero3_checkpoint_resumed_by_1 "$tmp/z3_one" "$tmp/z3_res1" 1e-5 1e-3
    hand z3_z1 2 "$bin/train_sftcu_fp32" -Z 1
    if ran z3_z1 $?; then
        rm -rf "$tmp/z3_z1"/step_00000004; echo step_00000002 > "$tmp/z3_z1/latest"
        hand z3_z1 2 "$bin/train_sftcu_fp32" -Z 3 -y 1; ran z3_z1 $? && cmp_runs dist_zero1_checkpoint_resumed_with_zero3 "$tmp/z3_one" "$tmp/z3_z1" 1e-5 1e-3
    fi
else fail dist_zero3_checkpoint_resume "no step-2 checkpoint from the ZeRO-3 run"; fi
F=${F/-d 128/-d 192}  # 6 micro-batches a step: 2 a rank on 3 ranks
single z3_one192 "$bin/train_sftcu_fp32"; ran z3_one192 $? &&
    { hand z3w3 3 "$bin/train_sftcu_fp32" -Z 3; ran z3w3 $? && cmp_runs dist_zero3_gpt2_3_ranks_equals_1_rank "$tmp/z3_one192" "$tmp/z3w3" 1e-5 1e-4; }
F="${F/-e d4c64h2t32/-e l4c64h4k2f96t32u} -s 2 -g 8"
single z3_llama_one "$bin/train_sftcu_fp32"; ran z3_llama_one $? &&
    { hand z3_llama_w3 3 "$bin/train_sftcu_fp32" -Z 3; ran z3_llama_w3 $? && cmp_runs dist_zero3_llama_3_ranks_equals_1_rank "$tmp/z3_llama_one" "$tmp/z3_llama_w3" 1e-5 1e-4
      n=$(grep -c '^sample | generated' "$tmp/z3_llama_w3.log")
      if [ "$n" -ge 2 ] && cmp -s <(grep '^sample | generated' "$tmp/z3_llama_one.log") <(grep '^sample | generated' "$tmp/z3_llama_w3.log"); then
          ok dist_zero3_llama_samples_equal_1_rank "$n greedy samples as one process's"
      else fail dist_zero3_llama_samples_equal_1_rank "$n samples, or not one process's: $(grep -m1 '^sample | generated' "$tmp/z3_llama_w3.log")"; fi; }
F=$F_GPT2
# memory: the parameters are the floatX shard S (ceil(P/W) rounded up to 64) and the gathered
# units G = wte + wpe + ln_f + two blocks = P - (L - 2) x the block's 12C^2 + 13C (d4c64: L 4, C 64),
# the gradients ZeRO-2's; what is in use beyond the plan is the same as 1 process's
z3mem() {
    sed -n 's/^memory| per rank: parameters \([0-9.]*\) MiB (ZeRO-3: the shard \([0-9.]*\) and the gathered units \([0-9.]*\)).*= \([0-9.]*\) MiB planned.*P = \([0-9]*\), U = [0-9]*, G = \([0-9]*\), W = \([0-9]*\),.*/\5 \6 \7 \1 \2 \3 \4/p' "$1"
    sed -n 's/^memory| rank [0-9]*: in use after setup \([0-9.]*\) MiB/\1/p' "$1"
}
unit_memory dist_zero3_memory_accounting parameters G 2 4 "$(one_mem "$tmp/z3_one.log")" "$(z3mem "$tmp/z3.log")" "$(z3mem "$tmp/z3w3.log")"
# the weights' traffic of the last step of the 2-rank run (4 steps, -v 2: the last step follows an
# update and no validation, so nothing is held): the forward gathers L blocks, the embeddings and
# the head, the backward L - 2 blocks (the two at the turn are held), the second micro-batch 2(L - 2):
# 10 blocks of 12C^2 + 13C, wte (vocabulary 61 padded to 128 rows) and wpe (32 positions), C = 64
# wide, ln_f 2C (the head is tied: wte is the embeddings')
want=$((10 * (12 * 64 * 64 + 13 * 64) + 128 * 64 + 32 * 64 + 2 * 64))
got=$(sed -n 's/^zero3| the last step gathered \([0-9]*\) values.*/\1/p' "$tmp/z3.log")
if [ "$got" = "$want" ]; then ok dist_zero3_gathered_values_per_step "$(grep -m1 '^zero3|' "$tmp/z3.log")"
else fail dist_zero3_gathered_values_per_step "got '${got}' values, want $want (hand count): $(grep -m1 '^zero3|' "$tmp/z3.log")"; fi

# LoRA with -Z 3 (rank 4 on every module, dropout 0.1, the merged model written: -M 1): the frozen
# base sharded and gathered in the same units (never invalidated: it does not change), the adapters
# as with ZeRO-2; bit-identical to -Z 2 on 2 ranks, the merged model too
F_SAVED=$F
F="${F/-e d2c64h2t32/-e d4c64h2t32} -A 4 -p 0.1 -M 1"
hand z3_lora_z2 2 "$bin/train_sftcu_fp32" -Z 2; ran z3_lora_z2 $? &&
    { hand z3_lora 2 "$bin/train_sftcu_fp32" -Z 3; ran z3_lora $? && cmp_runs dist_zero3_lora_bit_identical_to_zero2 "$tmp/z3_lora_z2" "$tmp/z3_lora" 0 0
      if cmp -s "$tmp/z3_lora_z2/merged/model.safetensors" "$tmp/z3_lora/merged/model.safetensors" && grep -q '(ZeRO-3: the base.s shard' "$tmp/z3_lora.log"; then
          ok dist_zero3_lora_merged_equals_zero2 "$(grep -o 'parameters [0-9.]* MiB (ZeRO-3[^)]*)' "$tmp/z3_lora.log")"
      else fail dist_zero3_lora_merged_equals_zero2 "merged/model.safetensors differs or is missing, or no base shard in: $(grep -m1 '^memory| per' "$tmp/z3_lora.log")"; fi; }
F=$F_SAVED
# a 4-bit base (QLoRA) with -Z 3 is refused in one line, as by the CPU trainer
d="$tmp/z3qlora"; mkdir -p "$d/rdzv"
timeout 60 "$bin/train_sftcu_fp32" ${F/-e d2c64h2t32/-e dev/ref/tiny_llama_bnb4 -A 2} -o "$d/out" -f "$d/rdzv" -R 0 -W 2 -Z 3 > "$d/r0.log" 2>&1; rc=$?
if [ $rc -eq 1 ] && [ "$(wc -l < "$d/r0.log")" -eq 1 ] && grep -q '^error: -Z 3 shards the floatX weights; a 4-bit base (QLoRA) keeps its NF4 weights outside them: use -Z 2' "$d/r0.log"; then
    ok dist_zero3_qlora_refused "$(cut -c1-120 "$d/r0.log")"
else fail dist_zero3_qlora_refused "exit status $rc: $(head -c 300 "$d/r0.log")"; fi
echo "time dist_zero3: $((SECONDS - z3_started)) s for the ZeRO-3 checks"
[ -n "${DIST_ZERO3_ONLY:-}" ] && exit $status

# ---- 2 ranks vs 1 (fp32) ----
single one "$bin/train_sftcu_fp32"; ran one $? || exit 1
torchrun2 z1 "$bin/train_sftcu_fp32"; ran z1 $? && cmp_runs dist_torchrun_zero1_equals_1_rank "$tmp/one" "$tmp/z1" 1e-6 1e-5
RDZV=dir torchrun2 z0 "$bin/train_sftcu_fp32" -Z 0; ran z0 $? && cmp_runs dist_torchrun_zero0_equals_1_rank "$tmp/one" "$tmp/z0" 1e-6 1e-5
[ -d "$tmp/z0" ] && [ -d "$tmp/z1" ] && cmp_runs dist_zero1_equals_zero0 "$tmp/z0" "$tmp/z1" 1e-6 1e-5
if grep -q '^ranks | 2 (from torchrun), ZeRO-1' "$tmp/z1.log"; then ok dist_torchrun_discovered "2 ranks from torchrun's environment, ZeRO-1 by default"
else fail dist_torchrun_discovered "no 'ranks | 2 (from torchrun), ZeRO-1' line"; fi
n0=$(grep -c '^step ' "$tmp/z1.log")
if [ "$n0" -eq 4 ]; then ok dist_only_rank0_prints "4 step lines from 2 ranks"; else fail dist_only_rank0_prints "$n0 step lines, expected 4 (rank 0's)"; fi

# ---- the Llama family (untied lm_head padded like wte, grouped-query heads): 2 ranks with ZeRO-1 vs 1 (fp32) ----
# Weights to 1e-4: the up_proj weights end 2.4e-5 apart (losses 2.4e-7), and as much with
# -Z 0 (no sharding): the order of the gradient sums over ranks, which AdamW scales up for
# the up_proj's small gradients at this fresh initialization; a missing shard differs by order 1.
F_GPT2=$F
F=${F/-e d2c64h2t32/-e l2c64h4k2f96t32u}
single llama_one "$bin/train_sftcu_fp32"; ran llama_one $? &&
    { torchrun2 llama_z1 "$bin/train_sftcu_fp32"; ran llama_z1 $? && cmp_runs dist_llama_zero1_equals_1_rank "$tmp/llama_one" "$tmp/llama_z1" 1e-6 1e-4; }
F=$F_GPT2

# ---- LoRA (rank 4 on every module, dropout 0.1): only the adapters' gradients are reduced and
# ZeRO-1 shards their state; 2 ranks vs 1 (fp32): losses, norms, the adapters (adapter_model.safetensors)
# and their moments. The frozen base is the same on every rank (-e dev/ref/tiny, never updated) ----
F_GPT2=$F
F=${F/-e d2c64h2t32/-e dev/ref/tiny -A 4 -p 0.1}
single lora_one "$bin/train_sftcu_fp32"; ran lora_one $? &&
    { torchrun2 lora_z1 "$bin/train_sftcu_fp32"; ran lora_z1 $? && cmp_runs dist_lora_zero1_equals_1_rank "$tmp/lora_one" "$tmp/lora_z1" 1e-6 1e-5; }
F=$F_GPT2

# ---- ZeRO-1 shards that W does not divide: the last rank's is short ----
# d2c40h5t32 has 45920 parameters on the device (vocabulary padded to 128): shards of
# 22976 on 2 ranks (the last 32 short) and 15360 on 3 (the last 160 short), ln_f.bias
# ending in the short one; 2 and 3 ranks (started by hand, -R -W, through -f DIR) equal 1 process.
F_GPT2=$F
F="-i dev/ref/tiny_train.bin -j dev/ref/tiny_val.bin -v 2 -m -1 -e d2c40h5t32 -b 1 -t 16 -x 2 -S 1 -l 1e-3 -d 96"
single short_one "$bin/train_sftcu_fp32"
if ran short_one $?; then
    for w in 2 3; do
        mkdir -p "$tmp/short_z$w.rdzv"
        rcs=0 ps=""
        for ((r = 1; r < w; r++)); do
            EMU_DEVICES=$w timeout 300 "$bin/train_sftcu_fp32" $F -o "$tmp/short_z$w" -f "$tmp/short_z$w.rdzv" -R $r -W $w > "$tmp/short_z$w.r$r.log" 2>&1 &
            ps="$ps $!"
        done
        pids="$pids $ps"
        EMU_DEVICES=$w timeout 300 "$bin/train_sftcu_fp32" $F -o "$tmp/short_z$w" -f "$tmp/short_z$w.rdzv" -R 0 -W $w > "$tmp/short_z$w.log" 2>&1 || rcs=$?
        for p in $ps; do wait $p || rcs=$?; done
        if ran short_z$w $rcs; then
            if grep -q "P = 45920, W = $w, ZeRO-1" "$tmp/short_z$w.log"; then cmp_runs dist_zero1_short_last_shard_${w}_ranks "$tmp/short_one" "$tmp/short_z$w" 1e-6 1e-5
            else fail dist_zero1_short_last_shard_${w}_ranks "not 45920 parameters over $w ranks: $(grep -m1 '^memory| per rank' "$tmp/short_z$w.log")"; fi
        fi
    done
fi
F=$F_GPT2

# ---- Gemma 3 (embedding scale, (1 + w) norms, q/k norms, post norms, GeGLU, a window of 4 in
# 16-token rows on layer 0): 2 ranks with ZeRO-1 vs 1 (fp32), the Llama family's tolerances ----
F=${F_GPT2/-e d2c64h2t32/-e l2c64h4k2f96t32gw4p2}
single gemma3_one "$bin/train_sftcu_fp32"; ran gemma3_one $? &&
    { torchrun2 gemma3_z1 "$bin/train_sftcu_fp32"; ran gemma3_z1 $? && cmp_runs dist_gemma3_zero1_equals_1_rank "$tmp/gemma3_one" "$tmp/gemma3_z1" 1e-6 1e-4; }
F=$F_GPT2

# ---- 2 ranks from mpirun: the NCCL id over MPI (train_sftcu_fp32_mpi), no MASTER_ADDR, no -f ----
if [ -x "$bin/train_sftcu_fp32_mpi" ] && command -v mpirun > /dev/null; then
    ( unset MASTER_ADDR MASTER_PORT SFT_RDZV_PORT
      timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 "$bin/train_sftcu_fp32_mpi" $F -o "$tmp/mpi" > "$tmp/mpi.log" 2>&1 )
    if ran mpi $?; then
        if grep -q '^ranks | 2 (from mpirun), ZeRO-1' "$tmp/mpi.log"; then cmp_runs dist_mpirun_nccl_id_over_mpi_equals_1_rank "$tmp/one" "$tmp/mpi" 1e-6 1e-5
        else fail dist_mpirun_nccl_id_over_mpi_equals_1_rank "no 'ranks | 2 (from mpirun), ZeRO-1' line"; fi
    fi
else echo "skip dist_mpirun_nccl_id_over_mpi_equals_1_rank: no mpirun or no train_sftcu_fp32_mpi (mpicxx) built"; fi

# ---- the CPU trainer on the same flags ----
if [ -x ./train_sft ]; then
    single cpu ./train_sft; ran cpu $? && cmp_runs dist_gpu_2_ranks_equals_cpu "$tmp/cpu" "$tmp/z1" 1e-5 1e-3
else echo "skip dist_gpu_2_ranks_equals_cpu: ./train_sft not built"; fi
if command -v mpirun > /dev/null && make -s train_sft_mpi > /dev/null 2>&1; then
    timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 ./train_sft_mpi $F -o "$tmp/cpu_mpi" > "$tmp/cpu_mpi.log" 2>&1
    ran cpu_mpi $? && cmp_runs dist_gpu_2_ranks_equals_cpu_mpirun_2_ranks "$tmp/cpu_mpi" "$tmp/z1" 1e-5 1e-3
else echo "skip dist_gpu_2_ranks_equals_cpu_mpirun_2_ranks: no mpirun or no train_sft_mpi target"; fi

# ---- bf16: 2 ranks (bf16 all-gather of the weights) vs 1 ----
# The fp32 sums of the two runs differ in order; once that flips the bf16 rounding of a
# weight (one bf16 step is 2^-8 = 3.9e-3 relative), the runs differ at bf16 precision,
# so the weights and moments are held to 4e-3 of each tensor's largest value (a missing
# reduction or gather differs by order 1).
single one_bf16 "$bin/train_sftcu"; ran one_bf16 $? &&
    { torchrun2 z1_bf16 "$bin/train_sftcu"; ran z1_bf16 $? && cmp_runs dist_bf16_zero1_equals_1_rank "$tmp/one_bf16" "$tmp/z1_bf16" 1e-4 4e-3; }

# ---- checkpoints do not depend on W ----
# resume RUN W NAME [FLAGS...]: RUN's step-2 checkpoint continued to the end by W ranks as NAME
resume() {
    local from=$1 w=$2 name=$3
    shift 3
    cp -r "$tmp/$from" "$tmp/$name"
    rm -rf "$tmp/$name"/step_00000004
    echo step_00000002 > "$tmp/$name/latest"
    if [ "$w" -eq 1 ]; then single "$name" "$bin/train_sftcu_fp32" -y 1 "$@"
    else torchrun2 "$name" "$bin/train_sftcu_fp32" -y 1 "$@"; fi
}
if [ -d "$tmp/z1/step_00000002" ]; then
    resume z1 1 res21; ran res21 $? && cmp_runs dist_checkpoint_of_2_ranks_resumed_by_1 "$tmp/one" "$tmp/res21" 1e-6 1e-5
    resume one 2 res12; ran res12 $? && cmp_runs dist_checkpoint_of_1_rank_resumed_by_2 "$tmp/one" "$tmp/res12" 1e-6 1e-5
else fail dist_checkpoint_resume "no step-2 checkpoint from the 2-rank run"; fi

# ---- per-rank memory against the ZeRO accounting (the emulator counts exact bytes) ----
# mem LOG: P, the planned state and total MiB, then every rank's MiB in use, from rank 0's memory lines
mem() {
    sed -n 's/^memory| per rank: .*master weights and AdamW \([0-9.]*\) MiB.*= \([0-9.]*\) MiB planned.*P = \([0-9]*\),.*/\3 \1 \2/p' "$1"
    sed -n 's/^memory| rank [0-9]*: in use after setup \([0-9.]*\) MiB/\1/p' "$1"
}
$py - "$(mem "$tmp/one.log")" "$(mem "$tmp/z1.log")" "$(mem "$tmp/z0.log")" <<'EOF' || status=1
import sys
def parse(text):
    words = text.split()
    return int(words[0]), float(words[1]), float(words[2]), [float(u) for u in words[3:]]
(P, s1, t1, u1), (_, sz1, tz1, uz1), (_, sz0, tz0, uz0) = [parse(a) for a in sys.argv[1:4]]
MiB = 1048576
shard = ((P + 1) // 2 + 63) // 64 * 64  # ceil(P/2) rounded up to 64 elements, as in train_sft.cu
expect1, expect2 = 8 * P / MiB, 8 * shard / MiB  # fp32 build: master weights are the parameters; m and v
problems = []
if len(u1) != 1 or len(uz1) != 2 or len(uz0) != 2: problems.append(f'in-use lines per run: {len(u1)}, {len(uz1)}, {len(uz0)}')
if abs(s1 - expect1) > 0.006: problems.append(f'1 rank: state {s1} MiB, expected 8P = {expect1:.3f}')
if abs(sz0 - expect1) > 0.006: problems.append(f'-Z 0: state {sz0} MiB, expected 8P = {expect1:.3f}')
if abs(sz1 - expect2) > 0.006: problems.append(f'ZeRO-1, 2 ranks: state {sz1} MiB, expected 8P/2 = {expect2:.3f}')
# what is allocated beyond the plan (cuBLAS workspace, step buffers) must be the same for every rank and W
extra = [u - t1 for u in u1] + [u - tz1 for u in uz1] + [u - tz0 for u in uz0]
if max(extra) - min(extra) > 0.02: problems.append(f'in use minus planned differs: {extra} MiB')
if problems:
    print('FAIL dist_memory_zero_accounting: ' + '; '.join(problems))
    sys.exit(1)
print(f'ok dist_memory_zero_accounting: P = {P}: state {s1} MiB on 1 rank, {sz1} MiB per rank with ZeRO-1 on 2, {sz0} MiB with -Z 0; '
      f'every rank allocated {min(extra):.2f} MiB beyond the plan')
EOF

# ---- ZeRO-2: each unit's gradient reduce-scatterv'd (one ncclReduce per rank, in a group)
# as its backward ends, on the comm stream; only the shard accumulates over the micro-batches.
# Against 1 process in fp32 (losses and norms 1e-5, weights and moments 1e-5, the Llama
# family's 1e-4 as above, and GPT-2's on 3 ranks: a few weights whose gradient is nearly zero
# end up to 8.7e-5 apart, where ZeRO-1 on the same flags gives 6e-6, since ZeRO-2 sums over
# ranks per micro-batch and ZeRO-1 once a step, and AdamW scales such rounding up): GPT-2 (tied
# head, flushed with the embeddings) on 2 ranks by torchrun
# and on 3 (uneven shards: the last one short), a Llama-family model (untied lm_head, grouped-
# query heads) on 3, LoRA adapters on 2; every run 2 micro-batches per rank a step. Then
# checkpoints across stages, the CPU trainer, and the memory of the shard and the scratch ----
z2_started=$SECONDS
torchrun2 z2 "$bin/train_sftcu_fp32" -Z 2; ran z2 $? && cmp_runs dist_zero2_gpt2_2_ranks_equals_1_rank "$tmp/one" "$tmp/z2" 1e-5 1e-5
F_GPT2=$F
F=${F/-d 128/-d 192}  # 6 micro-batches a step: 2 a rank on 3 ranks
single one192 "$bin/train_sftcu_fp32"; ran one192 $? &&
    { hand z2w3 3 "$bin/train_sftcu_fp32" -Z 2; ran z2w3 $? && cmp_runs dist_zero2_gpt2_3_ranks_equals_1_rank "$tmp/one192" "$tmp/z2w3" 1e-5 1e-4; }
F=${F/-e d2c64h2t32/-e l2c64h4k2f96t32u}
single llama_one192 "$bin/train_sftcu_fp32"; ran llama_one192 $? &&
    { hand llama_z2w3 3 "$bin/train_sftcu_fp32" -Z 2; ran llama_z2w3 $? && cmp_runs dist_zero2_llama_3_ranks_equals_1_rank "$tmp/llama_one192" "$tmp/llama_z2w3" 1e-5 1e-4; }
F=${F_GPT2/-e d2c64h2t32/-e dev/ref/tiny -A 4 -p 0.1}
[ -d "$tmp/lora_one" ] && { torchrun2 lora_z2 "$bin/train_sftcu_fp32" -Z 2; ran lora_z2 $? && cmp_runs dist_zero2_lora_2_ranks_equals_1_rank "$tmp/lora_one" "$tmp/lora_z2" 1e-5 1e-5; }
F=$F_GPT2
# bf16 (the fp32 master shard apart from the bf16 weights), the bf16 ZeRO-1 check's tolerances
[ -d "$tmp/one_bf16" ] && { torchrun2 z2_bf16 "$bin/train_sftcu" -Z 2; ran z2_bf16 $? && cmp_runs dist_zero2_bf16_equals_1_rank "$tmp/one_bf16" "$tmp/z2_bf16" 1e-4 4e-3; }
# a ZeRO-2 checkpoint (the same files as every stage's) resumed by 1 process, and 1 process's by 3 ranks with ZeRO-2
if [ -d "$tmp/z2/step_00000002" ]; then
    resume z2 1 res_z2_1; ran res_z2_1 $? && cmp_runs dist_zero2_checkpoint_resumed_by_1 "$tmp/one" "$tmp/res_z2_1" 1e-5 1e-5
    cp -r "$tmp/one192" "$tmp/res_1_z2w3"; rm -rf "$tmp/res_1_z2w3"/step_00000004; echo step_00000002 > "$tmp/res_1_z2w3/latest"
    F=${F/-d 128/-d 192}
    hand res_1_z2w3 3 "$bin/train_sftcu_fp32" -Z 2 -y 1; ran res_1_z2w3 $? && cmp_runs dist_checkpoint_of_1_rank_resumed_by_3_with_zero2 "$tmp/one192" "$tmp/res_1_z2w3" 1e-5 1e-5
    F=$F_GPT2
else fail dist_zero2_checkpoint_resume "no step-2 checkpoint from the ZeRO-2 run"; fi
if [ -d "$tmp/cpu" ]; then [ -d "$tmp/z2" ] && cmp_runs dist_zero2_gpu_2_ranks_equals_cpu "$tmp/cpu" "$tmp/z2" 1e-5 1e-3
else echo "skip dist_zero2_gpu_2_ranks_equals_cpu: no CPU trainer run (./train_sft not built)"; fi
# memory: the gradients are the shard (ceil(P/W) rounded up to 64) and the units' scratch U =
# wte + wpe + ln_f + one block = P - (L - 1) x the block's 12C^2 + 13C (d2c64: L 2, C 64);
# what is in use beyond the plan is the same as 1 process's (no full gradient buffer anywhere)
z2mem() {
    sed -n 's/^memory| per rank: .*gradients \([0-9.]*\) MiB (ZeRO-2: the shard \([0-9.]*\) and the units. scratch \([0-9.]*\)).*= \([0-9.]*\) MiB planned.*P = \([0-9]*\), U = \([0-9]*\), W = \([0-9]*\),.*/\5 \6 \7 \1 \2 \3 \4/p' "$1"
    sed -n 's/^memory| rank [0-9]*: in use after setup \([0-9.]*\) MiB/\1/p' "$1"
}
unit_memory dist_zero2_memory_accounting gradients U 1 2 "$(one_mem "$tmp/one.log")" "$(z2mem "$tmp/z2.log")" "$(z2mem "$tmp/z2w3.log")"
echo "time dist_zero2: $((SECONDS - z2_started)) s for the ZeRO-2 checks"

# ---- optimizer offload (-O 1): this rank's fp32 master shard and AdamW moments in pinned host
# memory, AdamW on the host's threads with the kernel's own formula (train/adamw.h): equal to the
# same run without offload bit for bit (both checkpoints byte for byte, metrics.jsonl but the
# speed): 1 process in fp32 and bf16 and with LoRA, ZeRO-1, ZeRO-2 and ZeRO-3 on 2 ranks (torchrun), ZeRO-2 on 3
# (uneven shards); those 3 ranks against the CPU trainer (its tolerances above); an offloaded
# step-2 checkpoint resumed without offload, and one without resumed with it by 2 ranks with
# ZeRO-2, end as the uninterrupted run; the device holds 8P bytes less (fp32: the moments),
# the host the 12P (master copy and moments) the memory| line plans ----
# same_bits NAME RUN_A RUN_B: two runs' outputs byte for byte
same_bits() {
    local name=$1 a=$tmp/$2 b=$tmp/$3 f why=""
    for f in "$a"/step_00000002/*.safetensors "$a"/step_00000002/state.bin "$a"/step_00000004/*.safetensors "$a"/step_00000004/state.bin; do
        [ -f "$f" ] && cmp -s "$f" "$b/${f#"$a"/}" || why+=" ${f#"$a"/} differs or is missing;"
    done
    cmp -s <(sed 's/"tokens_per_s": [^,]*, //' "$a/metrics.jsonl") <(sed 's/"tokens_per_s": [^,]*, //' "$b/metrics.jsonl") || why+=" metrics.jsonl differs"
    if [ -z "$why" ]; then ok "$name" "checkpoints of steps 2 and 4 and $(grep -c '"loss"' "$a/metrics.jsonl") steps' metrics identical"
    else fail "$name" "$2 and $3:$why"; fi
}
off_started=$SECONDS
single one_off "$bin/train_sftcu_fp32" -O 1; ran one_off $? && same_bits dist_offload_1_rank_equals_no_offload one one_off
single one_bf16_off "$bin/train_sftcu" -O 1; ran one_bf16_off $? && same_bits dist_offload_bf16_1_rank_equals_no_offload one_bf16 one_bf16_off
F=${F_GPT2/-e d2c64h2t32/-e dev/ref/tiny -A 4 -p 0.1}  # LoRA: the adapters' state offloaded
[ -d "$tmp/lora_one" ] && { single lora_one_off "$bin/train_sftcu_fp32" -O 1; ran lora_one_off $? && same_bits dist_offload_lora_1_rank_equals_no_offload lora_one lora_one_off; }
F=$F_GPT2
torchrun2 z1_off "$bin/train_sftcu_fp32" -O 1; ran z1_off $? && same_bits dist_offload_zero1_2_ranks_equals_no_offload z1 z1_off
torchrun2 z2_off "$bin/train_sftcu_fp32" -Z 2 --offload_optimizer 1; ran z2_off $? && same_bits dist_offload_zero2_2_ranks_equals_no_offload z2 z2_off
F=${F/-d 128/-d 192}
hand z2w3_off 3 "$bin/train_sftcu_fp32" -Z 2 -O 1; ran z2w3_off $? && same_bits dist_offload_zero2_3_ranks_equals_no_offload z2w3 z2w3_off
if [ -x ./train_sft ]; then
    single cpu192 ./train_sft; ran cpu192 $? && [ -d "$tmp/z2w3_off" ] && cmp_runs dist_offload_zero2_3_ranks_equals_cpu "$tmp/cpu192" "$tmp/z2w3_off" 1e-5 1e-3
else echo "skip dist_offload_zero2_3_ranks_equals_cpu: ./train_sft not built"; fi
F=${F_GPT2/-e d2c64h2t32/-e d4c64h2t32}  # ZeRO-3's 4-layer model: the offloaded update writes the shard the gathers read
[ -d "$tmp/z3" ] && { torchrun2 z3_off "$bin/train_sftcu_fp32" -Z 3 -O 1; ran z3_off $? && same_bits dist_offload_zero3_2_ranks_equals_no_offload z3 z3_off; }
F=$F_GPT2
if [ -d "$tmp/one_off/step_00000002" ] && [ -d "$tmp/z2/step_00000002" ]; then
    resume one_off 1 res_off_plain; ran res_off_plain $? && same_bits dist_offload_checkpoint_resumed_without_offload one res_off_plain
    resume z2 2 res_z2_off -Z 2 -O 1; ran res_z2_off $? && same_bits dist_offload_zero2_checkpoint_resumed_with_offload z2 res_z2_off
else fail dist_offload_resume "no step-2 checkpoint from the offloaded 1-process run or the ZeRO-2 run"; fi
# memory: planned and allocated device bytes drop by the state (fp32 build: 8P, the moments; the master
# is the weights themselves), the host holds 12P (or 12S per rank with ZeRO) and the staging 4P
offmem() {  # offmem LOG: device state, pinned state, staging, planned MiB, P, W, then the ranks' in-use MiB
    sed -n 's/^memory| per rank: .*master weights and AdamW \([0-9.]*\) MiB\( (offloaded, -O 1: \([0-9.]*\) MiB in pinned host memory, 12P\/W, and \([0-9.]*\) MiB of gradient staging there)\)\{0,1\} + activations.*= \([0-9.]*\) MiB planned.*P = \([0-9]*\),.*W = \([0-9]*\),.*/\1 \3 \4 \5 \6 \7/p' "$1"
    sed -n 's/^memory| rank [0-9]*: in use after setup \([0-9.]*\) MiB/\1/p' "$1"
}
$py - "$(offmem "$tmp/one.log")" "$(offmem "$tmp/one_off.log")" "$(offmem "$tmp/z2_off.log")" <<'PYEOF' || status=1
import sys
MiB = 1048576
one, off, z2 = (a.split() for a in sys.argv[1:4])
problems = []
try:
    P = int(one[2]); planned1, used1 = float(one[1]), float(one[4])  # no pinned fields without offload
    dstate, hstate, staging, planned, _, _, used = (float(x) for x in off[:7])
    if dstate != 0: problems.append(f'offloaded device state {dstate} MiB, expected 0')
    if abs(hstate - 12 * P / MiB) > 0.006: problems.append(f'pinned state {hstate} MiB, expected 12P = {12 * P / MiB:.3f}')
    if abs(staging - 4 * P / MiB) > 0.006: problems.append(f'staging {staging} MiB, expected 4P = {4 * P / MiB:.3f}')
    if abs((planned1 - planned) - 8 * P / MiB) > 0.011: problems.append(f'planned {planned1} - {planned} MiB, expected 8P = {8 * P / MiB:.3f}')
    if abs((used1 - used) - 8 * P / MiB) > 0.02: problems.append(f'in use {used1} - {used} MiB, expected 8P = {8 * P / MiB:.3f} less on the device')
    S = ((P + 1) // 2 + 63) // 64 * 64
    zh, W = float(z2[1]), int(z2[5])
    if W != 2 or abs(zh - 12 * S / MiB) > 0.006: problems.append(f'ZeRO-2 on {W} ranks: pinned state {zh} MiB, expected 12S = {12 * S / MiB:.3f}')
except (ValueError, IndexError) as e:
    problems.append(f'memory lines not as expected ({e}): {sys.argv[1:4]}')
if problems:
    print('FAIL dist_offload_memory: ' + '; '.join(problems)); sys.exit(1)
print(f'ok dist_offload_memory: P = {P}: the device holds {used1 - used:.2f} MiB less (8P), the host {hstate} MiB (12P) and {staging} MiB of staging; '
      f'ZeRO-2 on 2 ranks {zh} MiB a rank (12S)')
PYEOF
echo "time dist_offload: $((SECONDS - off_started)) s for the offload checks"

# ---- a rank that dies, and ranks that disagree ----
# two ranks started by hand (-R -W), so that the test, not torchrun, kills one
kill_test() {
    local victim=$1 name=dist_rank_${1}_killed_ends_the_other
    local survivor=$((1 - victim)) d="$tmp/kill$victim"
    mkdir -p "$d/rdzv"
    local p0 p1
    "$bin/train_sftcu_fp32" $F -x 1000 -o "$d/out" -f "$d/rdzv" -R 0 -W 2 > "$d/r0.log" 2>&1 & p0=$!
    "$bin/train_sftcu_fp32" $F -x 1000 -o "$d/out" -f "$d/rdzv" -R 1 -W 2 > "$d/r1.log" 2>&1 & p1=$!
    pids="$pids $p0 $p1"
    local t=0
    until grep -q '^step 2/' "$d/r0.log" 2> /dev/null || [ $t -ge 600 ]; do sleep 0.2; t=$((t + 1)); done
    local pv=$p0 ps=$p1
    [ "$victim" -eq 1 ] && { pv=$p1; ps=$p0; }
    kill -9 $pv
    { wait $pv; } 2> /dev/null
    local t0=$SECONDS rc
    ( sleep 30; kill -9 $ps 2> /dev/null ) & local guard=$!
    wait $ps; rc=$?
    kill $guard 2> /dev/null
    local dt=$((SECONDS - t0)) line
    line=$(grep -m1 "^error: rank $survivor of 2" "$d/r$survivor.log")
    if [ $rc -ne 0 ] && [ $rc -ne 137 ] && [ -n "$line" ]; then ok "$name" "rank $survivor exited $rc after ${dt}s: $line"
    else fail "$name" "rank $survivor: exit status $rc after ${dt}s (137: still running after 30 s), error line '${line}'"; fi
}
kill_test 1
kill_test 0

# a rank that stops (SIGSTOP: alive, silent) ends the other once the emulated NCCL's
# receive times out (NCCL_EMU_TIMEOUT=5, before SFT_NCCL_TIMEOUT=30: the transport's error path)
d="$tmp/stop"
mkdir -p "$d/rdzv"
"$bin/train_sftcu_fp32" $F -x 1000 -o "$d/out" -f "$d/rdzv" -R 1 -W 2 > "$d/r1.log" 2>&1 & p1=$!
pids="$pids $p1"
NCCL_EMU_TIMEOUT=5 timeout 120 "$bin/train_sftcu_fp32" $F -x 1000 -o "$d/out" -f "$d/rdzv" -R 0 -W 2 > "$d/r0.log" 2>&1 & p0=$!
t=0
until grep -q '^step 2/' "$d/r0.log" 2> /dev/null || [ $t -ge 600 ]; do sleep 0.2; t=$((t + 1)); done
kill -STOP $p1
t0=$SECONDS
wait $p0; rc=$?
kill -9 $p1; { wait $p1; } 2> /dev/null
line=$(grep -m1 '^error: rank 0 of 2' "$d/r0.log")
if [ $rc -eq 1 ] && [ -n "$line" ] && [ $((SECONDS - t0)) -le 30 ]; then ok dist_stopped_rank_times_out "after $((SECONDS - t0))s: $line"
else fail dist_stopped_rank_times_out "rank 0: exit status $rc after $((SECONDS - t0))s (124: not ended within 120 s), error line '$line'"; fi

# a rank that hangs (alive, answering nothing: NCCL_EMU_HANG=K stops its collective K)
# ends the other by the trainer's own deadline (SFT_NCCL_TIMEOUT=20 on rank 0: longer than
# an emulated step on a loaded machine, or the wait for a slow but live rank 1 would end it
# first), not by the emulated NCCL's receive time-out (600 s here) nor by the test's (90 s). K=6 is step 1's
# all-reduce of the loss and trl's two metric sums (host values, read back through the staging buffer: through
# pageable memory the copy would wait behind the hung collective and the deadline would
# never be checked), K=9 step 2's gradient reduce-scatter; the hung rank's line names the
# collective, so a change in the trainer's order of collectives shows here.
hang_test() {
    local k=$1 expect=$2 name=dist_hung_rank_deadline_$3 d="$tmp/hang$1"
    mkdir -p "$d/rdzv"
    NCCL_EMU_TIMEOUT=600 NCCL_EMU_HANG=$k SFT_NCCL_TIMEOUT=600 "$bin/train_sftcu_fp32" $F -x 1000 -o "$d/out" -f "$d/rdzv" -R 1 -W 2 > "$d/r1.log" 2>&1 &
    local p1=$! t0=$SECONDS rc
    pids="$pids $p1"
    NCCL_EMU_TIMEOUT=600 SFT_NCCL_TIMEOUT=20 timeout -s KILL 90 "$bin/train_sftcu_fp32" $F -x 1000 -o "$d/out" -f "$d/rdzv" -R 0 -W 2 > "$d/r0.log" 2>&1
    rc=$?
    kill -9 $p1 2> /dev/null; { wait $p1; } 2> /dev/null
    local line hung
    line=$(grep -m1 '^error: rank 0 of 2: .*no progress for 20 s' "$d/r0.log")
    hung=$(grep -m1 "stops answering at collective $k ($expect" "$d/r1.log")
    if [ $rc -eq 1 ] && [ -n "$line" ] && [ -n "$hung" ] && [ $((SECONDS - t0)) -le 80 ]; then ok "$name" "after $((SECONDS - t0))s: $line"
    else fail "$name" "rank 0: exit status $rc after $((SECONDS - t0))s (137: still waiting after 90 s), error line '$line'; rank 1: '$(grep -m1 'emulated NCCL' "$d/r1.log")' (expected collective $k: $expect)"; fi
}
hang_test 6 "AllReduce of 3, type 8" host_allreduce
hang_test 9 "ReduceScatter" gradient_reduce_scatter

# ranks with different flags: the rendezvous refuses rank 1 at once (one line, exit 1);
# rank 0 keeps waiting for a right rank 1 until SFT_RDZV_TIMEOUT, then exits 1
d="$tmp/disagree"
mkdir -p "$d/rdzv"
"$bin/train_sftcu_fp32" $F -o "$d/out" -f "$d/rdzv" -R 1 -W 2 -l 2e-2 > "$d/r1.log" 2>&1 & p1=$!
pids="$pids $p1"
SFT_RDZV_TIMEOUT=5 timeout 60 "$bin/train_sftcu_fp32" $F -o "$d/out" -f "$d/rdzv" -R 0 -W 2 > "$d/r0.log" 2>&1; rc0=$?
wait $p1; rc1=$?
if [ $rc0 -eq 1 ] && [ $rc1 -eq 1 ] && grep -q '^error: rank 1 of 2: .*fingerprint' "$d/r1.log" && grep -q '^error: rank 0 of 2' "$d/r0.log"; then
    ok dist_ranks_with_different_flags_refuse "$(grep -m1 '^error' "$d/r1.log" | cut -c1-120)"
else fail dist_ranks_with_different_flags_refuse "exit statuses $rc0 and $rc1; $(cat "$d/r0.log" "$d/r1.log" | grep -m2 error)"; fi
# a build without NCCL (make found no nccl.h: -DSFT_NO_NCCL) refuses W > 1 with one line
if [ -x "$bin/train_sftcu_fp32_nonccl" ]; then
    d="$tmp/nonccl"
    mkdir -p "$d/rdzv"
    timeout 60 "$bin/train_sftcu_fp32_nonccl" $F -o "$d/out" -f "$d/rdzv" -R 0 -W 2 > "$d/r0.log" 2>&1; rc=$?
    if [ $rc -eq 1 ] && [ "$(wc -l < "$d/r0.log")" -eq 1 ] && grep -q '^error: this build has no NCCL.*runs 1 rank, not 2: install NCCL' "$d/r0.log"; then
        ok dist_no_nccl_build_refuses_2_ranks "$(cut -c1-120 "$d/r0.log")"
    else fail dist_no_nccl_build_refuses_2_ranks "exit status $rc, output: $(head -c 300 "$d/r0.log")"; fi
else echo "skip dist_no_nccl_build_refuses_2_ranks: $bin/train_sftcu_fp32_nonccl not built"; fi
exit $status
