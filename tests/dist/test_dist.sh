#!/usr/bin/env bash
# tests/dist/test_dist.sh: data-parallel training of the CPU trainer over MPI, through real
# processes: `mpirun -np 2 ./train_sft_mpi` against `./train_sft` with the same -d.
# Skipped (one "skip" line) where mpirun or train_sft_mpi is missing.
#
# Checks, one "ok/FAIL/skip NAME" line each:
# - 2 ranks (ZeRO-1, the default) = 1 process: per-step loss, gradient norm and trl's metrics within
#   1e-6 relative, validation losses too, final weights and AdamW moments within 1e-5
#   (fp sums in another order), the same counters, on a run with packing, masks,
#   accumulation (2 micro-batches per rank), clipping, weight decay, -S 1 and micro-
#   batches without targets on rank 1 (dev/dist_tool plan confirms the data has them);
# - ZeRO-0 on 2 ranks equals ZeRO-1 and the single process within the same tolerances;
# - a Qwen2 model packed best-fit (--packing_strategy bfd) on 2 ranks equals one process;
# - LoRA (a Llama's adapters, dropout on) on 2 ranks with ZeRO-1 equals one process;
# - ZeRO-1 on 2 and 3 ranks of a model whose parameter count neither divides (the last
#   shard short) equals the single process; every rank's validation batches hold targets
#   (dev/dist_tool val confirms it), so the sum of validation losses over ranks is checked;
# - ZeRO-2 (gradients reduce-scattered layer by layer into the shard) equals one process
#   within the same tolerances: GPT-2 on 2 ranks, the Qwen2 model (GQA, untied head) and
#   the odd count on 3 ranks, LoRA on 2; its memory line holds the shard and one layer's
#   scratch (with the embeddings and the head), not the whole gradient; its checkpoints resume bit-identically at the same W and
#   stage, and across W and stage (ZeRO-2 on 2 ranks -> one process; ZeRO-1 -> ZeRO-2);
# - ZeRO-3 (each rank holds its shard of the weights; each unit gathered before its forward and
#   again, for a block, before its backward) equals one process within the same tolerances: GPT-2
#   (tied head) on 2 ranks with empty micro-batches and validation dealt over ranks, the Qwen2
#   model (GQA, untied head) on 3 ranks with greedy samples during training (rank 0 gathers the
#   weights) equal to one process's, the odd count on 3 ranks; its memory line holds the weights'
#   shard and the gathered embeddings, head and one block (by hand); it resumes bit-identically at
#   the same W and stage, its checkpoint by one process at ZeRO-0, and a ZeRO-1 checkpoint with
#   ZeRO-3; with a 4-bit base (QLoRA) it is refused in one line;
# - ZeRO-3 with LoRA (the frozen base sharded and gathered as full fine-tuning's weights, the
#   adapters as with ZeRO-2), dropout on: 2 ranks equal one process and are bit-identical to
#   ZeRO-2 (adapters, moments, the -M 1 merged model); its adapter-only checkpoints resume at
#   ZeRO-0 and ZeRO-1; the Qwen2 model on 3 ranks (uneven shards of the base) with samples equals
#   one process, and its memory line holds the base's shard, the gathered buffers and the adapter;
# - QLoRA (dev/ref/tiny_llama_bnb4 with -A, dropout on) on 2 ranks with ZeRO-1 and ZeRO-2, and a
#   base quantized at load (--load_in_4bit 1) on 2 ranks, equal one process within the LoRA
#   tolerances; ranks whose 4-bit bases differ in one byte of codes are refused on every rank;
# - a step whose micro-batches have no target on any rank is skipped everywhere;
# - resuming a 2-rank run with 2 ranks is bit-identical to the uninterrupted run;
#   resuming it with 1 rank, and a 1-process run with 2 ranks, continues within 1e-5;
#   a 2-rank checkpoint equals the 1-process one (W-independent files);
# - per-rank memory printed at start matches the ZeRO accounting (moments of ceil(P/W)
#   parameters, P from the model's shape);
# - -d not a multiple of B*T*W, and W ranks with fewer rows per step: one line and exit 1
#   on each rank, before anything is written; ranks started with different flags, or
#   the same flags and different starting weights: one line on every rank, non-zero exit;
# - without MPI (./train_sft) and W > 1 from the environment: one line, exit 1; -Z 4 (no such
#   stage) likewise;
# - -O 1 (the GPU trainer's optimizer offload; this trainer's state is in host memory already)
#   changes nothing: checkpoint files and metrics byte for byte as without it, and the memory
#   line says where the state is; -O 2 is refused in one line.
set -u
cd "$(dirname "$0")/../.."
for f in train_sft dev/dist_tool; do
    [ -x "$f" ] || { echo "FAIL dist_setup: $f not built (make train_sft dev/dist_tool)"; exit 1; }
done
tmp=$(mktemp -d /tmp/test_dist.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1  # two ranks on a 2-core machine

ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; }

# ---- without MPI: W > 1 from a launcher's environment is refused ----
./dev/dist_tool mkdata "$tmp/data.bin"
base="-i $tmp/data.bin -e d2c64h2t32 -b 1 -t 16"
OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 ./train_sft $base -d 64 -x 2 -o "$tmp/nompi" > "$tmp/nompi.log" 2>&1
rc=$?
if [ $rc -eq 1 ] && [ "$(wc -l < "$tmp/nompi.log")" -eq 1 ] && grep -q "2 ranks (from mpirun) but this trainer was built without MPI: make train_sft_mpi" "$tmp/nompi.log" && [ ! -e "$tmp/nompi" ]; then
    ok dist_without_mpi_refuses
else
    fail dist_without_mpi_refuses "exit $rc, output: $(head -c 300 "$tmp/nompi.log")"
fi
RANK=1 WORLD_SIZE=2 ./train_sft $base -d 64 -x 2 -o "$tmp/nompi" > "$tmp/nompi.log" 2>&1
if grep -q "2 ranks (from torchrun)" "$tmp/nompi.log"; then ok dist_torchrun_environment_read; else fail dist_torchrun_environment_read "$(head -c 300 "$tmp/nompi.log")"; fi

./train_sft $base -R 2 -W 2 -o "$tmp/nompi" > "$tmp/nompi.log" 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -q "rank 2 is not below the world size 2 (from flags)" "$tmp/nompi.log"; then ok dist_rank_beyond_world_refused
else fail dist_rank_beyond_world_refused "exit $rc: $(head -c 300 "$tmp/nompi.log")"; fi

# no ZeRO-4: refused in one line before anything is written; so is ZeRO-3 on a 4-bit base (QLoRA:
# its NF4 weights are not in the fp32 vector that ZeRO-3 shards)
./train_sft $base -d 64 -x 2 -Z 4 -o "$tmp/z4" > "$tmp/z4.log" 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -q "^error: -Z must be 0, 1, 2 or 3, got 4" "$tmp/z4.log" && [ ! -e "$tmp/z4" ]; then ok dist_zero4_refused
else fail dist_zero4_refused "exit $rc: $(head -c 300 "$tmp/z4.log")"; fi
./train_sft -i dev/ref/tiny_train.bin -e dev/ref/tiny_llama_bnb4 -b 1 -t 16 -d 64 -x 2 -A 2 -Z 3 -o "$tmp/z3qlora" > "$tmp/z3qlora.log" 2>&1; rc=$?
if [ $rc -eq 1 ] && [ "$(wc -l < "$tmp/z3qlora.log")" -eq 1 ] && [ ! -e "$tmp/z3qlora" ] &&
   grep -q "^error: -Z 3 shards the fp32 weights; a 4-bit base (QLoRA) keeps its NF4 weights outside them: use -Z 2" "$tmp/z3qlora.log"; then ok dist_zero3_qlora_refused
else fail dist_zero3_qlora_refused "exit $rc: $(head -c 300 "$tmp/z3qlora.log")"; fi

# -O 1: the same command line as the GPU trainer's offload; nothing changes here but the memory line
for o in 0 1; do ./train_sft $base -d 32 -x 2 -c 0.1 -O $o -o "$tmp/offload$o" > "$tmp/offload$o.log" 2>&1 || fail dist_cpu_offload_flag "-O $o exited $?"; done
why=""
for f in model.safetensors state.bin; do cmp -s "$tmp/offload0/step_00000002/$f" "$tmp/offload1/step_00000002/$f" || why+=" $f differs;"; done
cmp -s <(grep -o '"\(loss\|grad_norm\)": [^,}]*' "$tmp/offload0/metrics.jsonl") <(grep -o '"\(loss\|grad_norm\)": [^,}]*' "$tmp/offload1/metrics.jsonl") || why+=" metrics differ;"
grep -q '^memory| .*AdamW state .*; -O 1: in host memory, as always on the CPU)' "$tmp/offload1.log" || why+=" no '-O 1: in host memory' in the memory line;"
grep -q 'in host memory' "$tmp/offload0.log" && why+=" -O 0's memory line mentions offload;"
./train_sft $base -d 32 -x 2 -O 2 -o "$tmp/offload2" > "$tmp/offload2.log" 2>&1; rc=$?
{ [ $rc -eq 1 ] && grep -q '^error: -O (--offload_optimizer) must be 0 or 1, got 2' "$tmp/offload2.log"; } || why+=" -O 2: exit $rc, $(head -c 200 "$tmp/offload2.log")"
[ -z "$why" ] && ok dist_cpu_offload_flag_changes_nothing || fail dist_cpu_offload_flag_changes_nothing "$why"

if ! command -v mpirun > /dev/null; then echo "skip dist_mpi: mpirun not found (apt install openmpi-bin libopenmpi-dev)"; exit 0; fi
if [ ! -x train_sft_mpi ]; then echo "skip dist_mpi: train_sft_mpi not built (make train_sft_mpi; needs mpicc)"; exit 0; fi
# a rule broken so that ranks disagree on the collectives would hang: 120 s ends it
# In a sanitizer build (make test SAN=1) LeakSanitizer reports Open MPI's own
# allocations (in its dlopen'ed components) at exit: leaks are checked by the
# single-process runs here and in test_sft, not under mpirun.
launch="env ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 timeout 120 mpirun --allow-run-as-root --oversubscribe"
mpi="$launch -np 2"

# ---- the run: packing, masks, 2 micro-batches per rank, clipping, decay, -S 1, validation dealt ----
flags="$base -d 64 -x 8 -S 1 -l 1e-3 -u 2 -c 0.1 -G 0.5 -j $tmp/data.bin -v 4 -m 10"
plan=$(./dev/dist_tool plan "$tmp/data.bin" 16 1 2 2 8 1337 1)
empty1=$(echo "$plan" | sed -n 's/^rank 1 empty micro-batches //p')
[ "${empty1:-0}" -gt 0 ] || fail dist_data_has_empty_microbatches "rank 1 has none: $plan"
# every rank's validation batches (-m) hold targets, or the sum over ranks goes unchecked
# (the data's first rows have none); val_targets W -m: "" or the rank without targets
val_targets() { ./dev/dist_tool val "$tmp/data.bin" 16 1 "$1" "$2" | awk '$4 == 0 { print "rank " $2 " has no validation targets" }'; }
why=$(val_targets 2 10)
[ -z "$why" ] || fail dist_validation_on_every_rank "$why"

run1() { ./train_sft "$@" > "$tmp/last.log" 2>&1 || { fail "$name" "./train_sft exited $?: $(tail -1 "$tmp/last.log")"; return 1; }; }
run2() { $mpi ./train_sft_mpi "$@" > "$tmp/last.log" 2>&1 || { fail "$name" "mpirun exited $?: $(grep -m1 error "$tmp/last.log")"; return 1; }; }
# "key value" lines of a metrics file: loss, grad_norm, targets, trl's metrics (the same for any W:
# sums over every rank's targets, divided once), validation records, and skipped steps
series() { grep -o '"\(loss\|grad_norm\|targets\|mean_token_accuracy\|entropy\|num_tokens\|val_loss\|val_targets\|skipped\)": [^,}]*' "$1" | tr -d '":,'; }
# compares two series files within a relative tolerance; prints the first mismatch (a NaN
# or Inf is one: the trainers log neither, and NaN would compare as equal to anything)
close_series() {
    paste -d' ' "$1" "$2" | awk -v tol="$3" '
        { if ($1 != $3) { print "line " NR ": " $1 " vs " $3; bad = 1; exit }
          if ($2 == "true" || $4 == "true") { if ($2 != $4) { print "line " NR ": skipped " $2 " vs " $4; bad = 1; exit } next }
          if (tolower($2 " " $4) ~ /nan|inf/) { print "line " NR ": " $1 " " $2 " vs " $4 " (not a finite number)"; bad = 1; exit }
          d = $2 - $4; if (d < 0) d = -d; s = $4 < 0 ? -$4 : $4;
          if (!(d <= tol * s)) { print "line " NR ": " $1 " " $2 " vs " $4; bad = 1; exit } }
        END { if (!bad && NR == 0) print "empty"; }'
    [ "$(wc -l < "$1")" -eq "$(wc -l < "$2")" ] || echo "$(wc -l < "$1") vs $(wc -l < "$2") records"
}
# the comparison itself: a NaN on both sides (or one) is a mismatch
printf 'val_loss nan\n' > "$tmp/nan.s"; printf 'val_loss 4.1\n' > "$tmp/num.s"
if [ -n "$(close_series "$tmp/nan.s" "$tmp/nan.s" 1e-6)" ] && [ -n "$(close_series "$tmp/num.s" "$tmp/nan.s" 1e-6)" ] &&
   [ -n "$(close_series "$tmp/nan.s" "$tmp/num.s" 1e-6)" ] && [ -z "$(close_series "$tmp/num.s" "$tmp/num.s" 1e-6)" ]; then ok dist_compare_rejects_nan
else fail dist_compare_rejects_nan "close_series took a NaN for a match"; fi
# ok when the final checkpoints of two runs agree within 1e-5 with the same counters
# (a diff that fails, or prints no line, is a mismatch)
close_models() {
    local r
    r=$(./dev/dist_tool diff "$1" "$2" 2>&1) || { echo "dist_tool diff $1 $2 failed: $r"; return; }
    echo "$r" | awk 'NR == 1 { good = $2 <= 1e-5 && $4 <= 1e-5 && $6 == "same" } END { exit !(NR == 1 && good) }' || echo "${r:-dist_tool diff printed nothing}"
}
final=$(printf 'step_%08d' 8)

name=dist_two_ranks_equal_one_process
if run1 $flags -o "$tmp/one" && run2 $flags -o "$tmp/two"; then
    cp "$tmp/last.log" "$tmp/two.log"
    series "$tmp/one/metrics.jsonl" > "$tmp/one.s"; series "$tmp/two/metrics.jsonl" > "$tmp/two.s"
    why="$(close_series "$tmp/one.s" "$tmp/two.s" 1e-6)$(close_models "$tmp/two/$final" "$tmp/one/$final")"
    grep -q val_loss "$tmp/one.s" || why="no validation record $why"
    [ -z "$why" ] && ok $name || fail $name "$why"
fi

# rank 0 alone writes: the output holds what one process writes (no second lock owner, no stray files)
name=dist_rank0_only_output
if [ -f "$tmp/two/metrics.jsonl" ]; then
    lines=$(grep -c '"loss"' "$tmp/two/metrics.jsonl")
    if [ "$lines" -eq 8 ] && [ "$(ls "$tmp/two" | tr '\n' ' ')" = "$(ls "$tmp/one" | tr '\n' ' ')" ] && [ "$(grep -c '^done  | model' "$tmp/two.log")" -eq 1 ]; then ok $name
    else fail $name "$lines loss records, files: $(ls "$tmp/two" | tr '\n' ' ')"; fi
fi

# per-rank memory: moments of ceil(P/W) parameters, P = V*C + maxT*C + L*(12C^2 + 13C) + 2C
name=dist_memory_matches_zero_accounting
read -r L C V maxT <<< "$(sed -n 's/^model | GPT-2, \([0-9]*\) layers, [0-9]* heads, \([0-9]*\) channels, vocab \([0-9]*\), context \([0-9]*\).*/\1 \2 \3 \4/p' "$tmp/two.log")"
P=$(( V * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C )); shard=$(( (P + 1) / 2 ))
want="AdamW state $(awk -v n=$shard 'BEGIN { printf "%.3f", 8 * n / 1e6 }') MB (moments of $shard of $P parameters)"
want_grads="gradients $(awk -v n=$((2 * shard)) 'BEGIN { printf "%.3f", 4 * n / 1e6 }') MB"
want1="AdamW state $(awk -v n=$P 'BEGIN { printf "%.3f", 8 * n / 1e6 }') MB (moments of $P of $P parameters)"
if grep "^memory|" "$tmp/two.log" | grep -q "$want" && grep "^memory|" "$tmp/two.log" | grep -q "$want_grads"; then ok $name
else fail $name "expected '$want' and '$want_grads' in: $(grep '^memory|' "$tmp/two.log")"; fi

name=dist_zero0_equals_zero1
if run2 $flags -Z 0 -o "$tmp/z0"; then
    grep "^memory|" "$tmp/last.log" | grep -q "$want1" || fail dist_memory_zero0 "expected '$want1' in: $(grep '^memory|' "$tmp/last.log")"
    series "$tmp/z0/metrics.jsonl" > "$tmp/z0.s"
    why="$(close_series "$tmp/z0.s" "$tmp/two.s" 1e-6)$(close_models "$tmp/z0/$final" "$tmp/two/$final")$(close_models "$tmp/z0/$final" "$tmp/one/$final")"
    [ -z "$why" ] && ok $name || fail $name "$why"
fi

# a Llama-family model (untied head, grouped-query attention, q/k/v biases), packed best-fit
# (--packing_strategy bfd, in fewer rows per epoch than the next-fit runs above): ZeRO-1
# over 2 ranks equals one process (the sharding is over the flat parameters, whatever the
# family; every rank lays out the same best-fit order)
name=dist_llama_bfd_zero1_equals_one_process
lflags="${flags/d2c64h2t32/l2c32h4k2ubt32} --packing_strategy bfd"
rows_per_epoch() { sed -n 's/^data  | .* \([0-9]*\) rows per epoch, \([a-z_]*\) packing.*/\2 \1/p' "$1"; }
if run1 $lflags -o "$tmp/l1" && run2 $lflags -Z 1 -o "$tmp/l2"; then
    series "$tmp/l1/metrics.jsonl" > "$tmp/l1.s"; series "$tmp/l2/metrics.jsonl" > "$tmp/l2.s"
    why="$(close_series "$tmp/l1.s" "$tmp/l2.s" 1e-6)$(close_models "$tmp/l2/$final" "$tmp/l1/$final")"
    grep -q "^model | Qwen2, 2 layers, 4 heads (2 key/value heads)" "$tmp/last.log" || why="not the Qwen2 model: $(grep -m1 '^model' "$tmp/last.log") $why"
    read -r nf_name nf_rows <<< "$(rows_per_epoch "$tmp/two.log")"; read -r bf_name bf_rows <<< "$(rows_per_epoch "$tmp/last.log")"
    [ "$nf_name" = next_fit ] && [ "$bf_name" = bfd ] && [ "${bf_rows:-0}" -gt 0 ] && [ "$bf_rows" -lt "${nf_rows:-0}" ] ||
        why="not fewer rows with bfd: '$nf_name $nf_rows' then '$bf_name $bf_rows' $why"
    [ -z "$why" ] && ok $name || fail $name "$why"
fi

# ---- LoRA: only the adapters' gradients are reduced and their moments sharded ----
# A Llama (C 32, q 32 and v 16 rows, MLP 128) with adapters on q_proj, v_proj and down_proj,
# rank 3: 2 layers x ((3*32 + 32*3) + (3*32 + 16*3) + (3*128 + 32*3)) = 1632 floats, 816 per
# rank; dropout on: 2 ranks (ZeRO-1) equal one process,
# losses within 1e-6 and the final adapters and moments within 1e-5; the memory line
# counts moments of the adapter's shard only.
name=dist_lora_zero1_equals_one_process
loflags="${flags/d2c64h2t32/l2c32h4k2t32} -A 3 -T q_proj,v_proj,down_proj -p 0.1"
if run1 $loflags -o "$tmp/lo1" && run2 $loflags -o "$tmp/lo2"; then
    series "$tmp/lo1/metrics.jsonl" > "$tmp/lo1.s"; series "$tmp/lo2/metrics.jsonl" > "$tmp/lo2.s"
    why="$(close_series "$tmp/lo1.s" "$tmp/lo2.s" 1e-6)$(close_models "$tmp/lo2/$final" "$tmp/lo1/$final")"
    grep -q "(moments of 816 of 1632 adapter parameters; the base is frozen)" "$tmp/last.log" || why="memory line: $(grep -m1 '^memory' "$tmp/last.log") $why"
    [ -f "$tmp/lo2/$final/adapter_model.safetensors" ] || why="no adapter checkpoint $why"
    [ -z "$why" ] && ok $name || fail $name "$why"
fi

# ---- ZeRO-1 over a parameter count that W does not divide: the last rank's shard is short ----
# 48895 parameters (d3c35h5t32: odd, not a multiple of 3): with 2 ranks the last shard
# is 1 shorter than the others, with 3 ranks 2 shorter; both equal one process (ln_f.bias,
# the last tensor, ends in the short shard). Validation over the whole file (every rank
# has targets there).
oflags="${base/d2c64h2t32/d3c35h5t32} -d 96 -x 4 -S 1 -l 1e-3 -u 1 -j $tmp/data.bin -v 2 -m -1"
why=$(val_targets 3 -1)
[ -z "$why" ] || fail dist_validation_on_every_rank "$why"
if name=dist_odd_count_reference run1 $oflags -o "$tmp/o1"; then
    series "$tmp/o1/metrics.jsonl" > "$tmp/o1.s"
    for w in 2 3; do
        name=dist_zero1_short_last_shard_${w}_ranks
        P=48895; shard=$(( (P + w - 1) / w ))
        if $launch -np $w ./train_sft_mpi $oflags -o "$tmp/o$w" > "$tmp/last.log" 2>&1; then
            series "$tmp/o$w/metrics.jsonl" > "$tmp/o$w.s"
            why="$(close_series "$tmp/o1.s" "$tmp/o$w.s" 1e-6)$(close_models "$tmp/o$w/step_00000004" "$tmp/o1/step_00000004")"
            grep -q "(moments of $shard of $P parameters)" "$tmp/last.log" || why="not $P parameters in shards of $shard: $(grep -m1 '^memory' "$tmp/last.log") $why"
            [ $((P % w)) -ne 0 ] || why="$P is a multiple of $w $why"
            [ -z "$why" ] && ok $name || fail $name "$why"
        else fail $name "mpirun exited $?: $(grep -m1 error "$tmp/last.log")"; fi
    done
fi

# ---- a step with no target anywhere: -S 0 puts the data's first four empty rows in step 1 ----
name=dist_empty_step_skipped_everywhere
sflags="$base -d 64 -x 3 -S 0 -l 1e-3"
if run1 $sflags -o "$tmp/s1" && run2 $sflags -o "$tmp/s2"; then
    series "$tmp/s1/metrics.jsonl" > "$tmp/s1.s"; series "$tmp/s2/metrics.jsonl" > "$tmp/s2.s"
    why=$(close_series "$tmp/s1.s" "$tmp/s2.s" 1e-6)
    head -1 "$tmp/s2.s" | grep -q "skipped true" || why="step 1 not skipped: $(head -1 "$tmp/s2.s") $why"
    [ -z "$why" ] && ok $name || fail $name "$why"
fi

# ---- resume ----
# a copy of a run's output as it was after the checkpoint of step 4 (the later checkpoint removed)
rewind() {
    rm -rf "$2"; cp -r "$1" "$2"; rm -rf "$2/$final"; printf 'step_%08d\n' 4 > "$2/latest"
}
name=dist_resume_same_world_bit_identical
if run2 $flags -n 4 -o "$tmp/r2"; then
    rewind "$tmp/r2" "$tmp/r2b"
    if run2 $flags -n 4 -y 1 -o "$tmp/r2b"; then
        why=""
        for f in model.safetensors state.bin config.json; do cmp -s "$tmp/r2/$final/$f" "$tmp/r2b/$final/$f" || why="$why $f differs"; done
        cmp -s <(series "$tmp/r2/metrics.jsonl") <(series "$tmp/r2b/metrics.jsonl") || why="$why metrics differ"
        [ -z "$why" ] && ok $name || fail $name "$why"
    fi
fi
name=dist_checkpoint_independent_of_world
if run1 $flags -n 4 -o "$tmp/r1"; then
    why=$(close_models "$tmp/r2/step_00000004" "$tmp/r1/step_00000004")
    [ -z "$why" ] && ok $name || fail $name "$why"
fi
name=dist_resume_two_ranks_with_one
rewind "$tmp/r2" "$tmp/r21"
if run1 $flags -n 4 -y 1 -o "$tmp/r21"; then
    why=$(close_models "$tmp/r21/$final" "$tmp/r2/$final")
    [ -z "$why" ] && ok $name || fail $name "$why"
fi
name=dist_resume_one_process_with_two
rewind "$tmp/r1" "$tmp/r12"
if run2 $flags -n 4 -y 1 -o "$tmp/r12"; then
    why=$(close_models "$tmp/r12/$final" "$tmp/r1/$final")
    [ -z "$why" ] && ok $name || fail $name "$why"
fi

# ---- ZeRO-2: gradients reduce-scattered layer by layer, accumulated in the shard alone ----
# The same runs as above with -Z 2 equal the single process within the same tolerances
# (losses and gradient norms 1e-6 relative, final weights and moments 1e-5 of each tensor's
# largest magnitude): GPT-2 (tied head: wte's gradient gathers the head's and the
# embedding's parts before its flush) on 2 ranks with empty micro-batches on rank 1 and
# clipping; the Qwen2 model (grouped-query attention, untied lm_head, its own unit) and the
# odd parameter count on 3 ranks (shards that end inside tensors and inside a block's
# pieces, the last short); LoRA's adapters on 2 ranks with dropout.
name=dist_zero2_equals_one_process
if run2 $flags -Z 2 -o "$tmp/z2"; then
    cp "$tmp/last.log" "$tmp/z2.log"
    series "$tmp/z2/metrics.jsonl" > "$tmp/z2.s"
    why="$(close_series "$tmp/one.s" "$tmp/z2.s" 1e-6)$(close_models "$tmp/z2/$final" "$tmp/one/$final")"
    [ -z "$why" ] && ok $name || fail $name "$why"
fi
# per-rank memory: the gradient is the shard (ceil(P/2)) plus the scratch of the embeddings
# (V*C + maxT*C), the head (ln_f: 2C) and one block (12C^2 + 13C), which every block reuses
# (the reduce-scatter is in place). With 2 layers that is no saving over ZeRO-1's whole
# gradient; with L layers the block's part is 1/L of it (docs/distributed.md: SmolLM2-135M).
name=dist_zero2_memory_holds_no_full_gradient
P=$(( V * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C )); shard=$(( (P + 1) / 2 ))
scr=$(( V * C + maxT * C + 2 * C + 12 * C * C + 13 * C ))
want="gradients $(awk -v n=$((shard + scr)) 'BEGIN { printf "%.3f", 4 * n / 1e6 }') MB (ZeRO-2: the shard of $shard and the layer-by-layer scratch of $scr)"
if grep "^memory|" "$tmp/z2.log" 2>/dev/null | grep -qF "$want"; then ok $name
else fail $name "expected '$want' in: $(grep '^memory|' "$tmp/z2.log" 2>/dev/null)"; fi

name=dist_zero2_llama_three_ranks_equal_one_process
l3flags="${oflags/d3c35h5t32/l2c32h4k2ubt32}"
if run1 $l3flags -o "$tmp/l31" && $launch -np 3 ./train_sft_mpi $l3flags -Z 2 -o "$tmp/l33" > "$tmp/last.log" 2>&1; then
    series "$tmp/l31/metrics.jsonl" > "$tmp/l31.s"; series "$tmp/l33/metrics.jsonl" > "$tmp/l33.s"
    why="$(close_series "$tmp/l31.s" "$tmp/l33.s" 1e-6)$(close_models "$tmp/l33/step_00000004" "$tmp/l31/step_00000004")"
    grep -q "^model | Qwen2, 2 layers, 4 heads (2 key/value heads).*untied" "$tmp/last.log" || why="not the untied GQA model: $(grep -m1 '^model' "$tmp/last.log") $why"
    [ -z "$why" ] && ok $name || fail $name "$why"
else fail $name "a run failed: $(grep -m1 error "$tmp/last.log")"; fi

name=dist_zero2_short_last_shard_3_ranks
if [ -f "$tmp/o1.s" ] && $launch -np 3 ./train_sft_mpi $oflags -Z 2 -o "$tmp/oz3" > "$tmp/last.log" 2>&1; then
    series "$tmp/oz3/metrics.jsonl" > "$tmp/oz3.s"
    why="$(close_series "$tmp/o1.s" "$tmp/oz3.s" 1e-6)$(close_models "$tmp/oz3/step_00000004" "$tmp/o1/step_00000004")"
    grep -q "(moments of 16299 of 48895 parameters)" "$tmp/last.log" || why="shards: $(grep -m1 '^memory' "$tmp/last.log") $why"
    [ -z "$why" ] && ok $name || fail $name "$why"
else fail $name "mpirun exited or no reference: $(grep -m1 error "$tmp/last.log")"; fi

name=dist_zero2_lora_equals_one_process
if [ -f "$tmp/lo1.s" ] && run2 $loflags -Z 2 -M 1 -o "$tmp/loz2"; then
    series "$tmp/loz2/metrics.jsonl" > "$tmp/loz2.s"
    why="$(close_series "$tmp/lo1.s" "$tmp/loz2.s" 1e-6)$(close_models "$tmp/loz2/$final" "$tmp/lo1/$final")"
    grep -q "(ZeRO-2: the shard of 816 and the layer-by-layer scratch of 1632)" "$tmp/last.log" || why="memory line: $(grep -m1 '^memory' "$tmp/last.log") $why"
    [ -z "$why" ] && ok $name || fail $name "$why"
fi

# ---- QLoRA: LoRA on a 4-bit NF4 base (docs/lora.md): every rank holds the same 4-bit base and
# dequantizes each layer's weight into its own scratch, forward and backward; only the adapters
# are reduced and sharded, as for LoRA ----
# dev/ref/tiny_llama_bnb4 (tiny_llama's 14 linear weights in bitsandbytes' layout, vocabulary
# 61: dev/ref's data) with -A 2 on every linear layer (1856 adapter floats, 928 per rank),
# dropout, clipping, 2 micro-batches per rank, validation over the whole file: 2 ranks with
# ZeRO-1 and with ZeRO-2 equal one process within the LoRA checks' tolerances (losses and
# gradient norms 1e-6 relative, final adapters and moments 1e-5); so does tiny_llama quantized
# at load (--load_in_4bit 1, adapters on q_proj, up_proj, down_proj); ranks whose 4-bit bases
# differ in one byte of codes (the fp32 rest the same) are refused on every rank.
qflags="-i dev/ref/tiny_train.bin -e dev/ref/tiny_llama_bnb4 -b 1 -t 16 -d 64 -x 4 -S 1 -l 1e-2 -c 0.5 -A 2 -p 0.1 -j dev/ref/tiny_val.bin -v 2 -m -1"
qfinal=$(printf 'step_%08d' 4)
name=dist_qlora_zero1_equals_one_process
if run1 $qflags -o "$tmp/q1" && run2 $qflags -o "$tmp/q2"; then
    series "$tmp/q1/metrics.jsonl" > "$tmp/q1.s"; series "$tmp/q2/metrics.jsonl" > "$tmp/q2.s"
    why="$(close_series "$tmp/q1.s" "$tmp/q2.s" 1e-6)$(close_models "$tmp/q2/$qfinal" "$tmp/q1/$qfinal")"
    grep -q "4-bit base: 15360 weights in NF4.*(moments of 928 of 1856 adapter parameters; the base is frozen)" "$tmp/last.log" || why="memory line: $(grep -m1 '^memory' "$tmp/last.log") $why"
    grep -q val_loss "$tmp/q1.s" || why="no validation record $why"
    [ -z "$why" ] && ok $name || fail $name "$why"
fi
name=dist_qlora_zero2_equals_one_process
if [ -f "$tmp/q1.s" ] && run2 $qflags -Z 2 -o "$tmp/qz2"; then
    series "$tmp/qz2/metrics.jsonl" > "$tmp/qz2.s"
    why="$(close_series "$tmp/q1.s" "$tmp/qz2.s" 1e-6)$(close_models "$tmp/qz2/$qfinal" "$tmp/q1/$qfinal")"
    grep -q "(ZeRO-2: the shard of 928 and the layer-by-layer scratch of 1856)" "$tmp/last.log" || why="memory line: $(grep -m1 '^memory' "$tmp/last.log") $why"
    [ -z "$why" ] && ok $name || fail $name "$why"
fi
name=dist_qlora_load_in_4bit_equals_one_process
qlflags="${qflags/tiny_llama_bnb4/tiny_llama --load_in_4bit 1} -T q_proj,up_proj,down_proj"
if run1 $qlflags -o "$tmp/ql1" && run2 $qlflags -o "$tmp/ql2"; then
    series "$tmp/ql1/metrics.jsonl" > "$tmp/ql1.s"; series "$tmp/ql2/metrics.jsonl" > "$tmp/ql2.s"
    why="$(close_series "$tmp/ql1.s" "$tmp/ql2.s" 1e-6)$(close_models "$tmp/ql2/$qfinal" "$tmp/ql1/$qfinal")"
    grep -q "4-bit base: 15360 weights in NF4" "$tmp/last.log" || why="not quantized at load: $(grep -m1 '^memory' "$tmp/last.log") $why"
    [ -z "$why" ] && ok $name || fail $name "$why"
fi
name=dist_qlora_different_4bit_bases_refused
mkdir -p "$tmp/other_bnb4" && cp dev/ref/tiny_llama_bnb4/config.json "$tmp/other_bnb4/"
# the copy: two codes of the first byte of layer 1's up_proj changed (xor 0x11)
python3 - dev/ref/tiny_llama_bnb4/model.safetensors "$tmp/other_bnb4/model.safetensors" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
t = json.loads(b[8:8 + n])["model.layers.1.mlp.up_proj.weight"]
assert t["dtype"] == "U8"
b[8 + n + t["data_offsets"][0]] ^= 0x11
open(sys.argv[2], "wb").write(b)
PY
$launch -np 1 ./train_sft_mpi $qflags -o "$tmp/qbad" : -np 1 ./train_sft_mpi ${qflags/dev\/ref\/tiny_llama_bnb4/$tmp/other_bnb4} -o "$tmp/qbad" \
    > "$tmp/qbad.log" 2>&1; rc=$?
n=$(grep -c "the ranks disagree on" "$tmp/qbad.log")
[ $rc -ne 0 ] && [ "$n" -eq 2 ] && [ ! -e "$tmp/qbad" ] && ok $name || fail $name "exit $rc, $n of 2 ranks said so, $tmp/qbad $([ -e "$tmp/qbad" ] && echo written || echo absent): $(head -c 300 "$tmp/qbad.log")"

# checkpoints do not depend on the stage: a ZeRO-2 run resumed at the same W and stage is
# bit-identical to the uninterrupted one; resumed by one process (W 2 -> 1, ZeRO-2 -> 0) and a
# ZeRO-1 checkpoint resumed with ZeRO-2 continue within 1e-5; its checkpoint equals one process's
name=dist_zero2_resume_same_stage_bit_identical
if run2 $flags -Z 2 -n 4 -o "$tmp/rz2"; then
    rewind "$tmp/rz2" "$tmp/rz2b"
    if run2 $flags -Z 2 -n 4 -y 1 -o "$tmp/rz2b"; then
        why=""
        for f in model.safetensors state.bin config.json; do cmp -s "$tmp/rz2/$final/$f" "$tmp/rz2b/$final/$f" || why="$why $f differs"; done
        cmp -s <(series "$tmp/rz2/metrics.jsonl") <(series "$tmp/rz2b/metrics.jsonl") || why="$why metrics differ"
        why="$why$(close_models "$tmp/rz2/step_00000004" "$tmp/r1/step_00000004")"
        [ -z "$why" ] && ok $name || fail $name "$why"
    fi
fi
name=dist_zero2_resume_with_one_process_zero0
rewind "$tmp/rz2" "$tmp/rz21"
if run1 $flags -n 4 -y 1 -o "$tmp/rz21"; then
    why=$(close_models "$tmp/rz21/$final" "$tmp/rz2/$final")
    [ -z "$why" ] && ok $name || fail $name "$why"
fi
name=dist_zero1_checkpoint_resumed_with_zero2
rewind "$tmp/r2" "$tmp/r2z2"
if run2 $flags -Z 2 -n 4 -y 1 -o "$tmp/r2z2"; then
    why=$(close_models "$tmp/r2z2/$final" "$tmp/r2/$final")
    [ -z "$why" ] && ok $name || fail $name "$why"
fi

# ---- ZeRO-3: the weights sharded too, gathered unit by unit ----
# The GPT-2 run above with -Z 3 equals the single process (tied head: wte, in the embeddings'
# unit, is gathered before the encoder and read by the head; validation's 10 batches dealt over
# 2 ranks, a rank without targets in a round still gathers); per-rank memory by hand: the
# weights are the shard (ceil(P/2)) plus the gathered embeddings (V*C + maxT*C), head (ln_f: 2C)
# and one block (12C^2 + 13C), the same floats as the gradient's scratch.
name=dist_zero3_equals_one_process
if run2 $flags -Z 3 -o "$tmp/z3"; then
    cp "$tmp/last.log" "$tmp/z3.log"
    series "$tmp/z3/metrics.jsonl" > "$tmp/z3.s"
    why="$(close_series "$tmp/one.s" "$tmp/z3.s" 1e-6)$(close_models "$tmp/z3/$final" "$tmp/one/$final")"
    grep -q val_loss "$tmp/z3.s" || why="no validation record $why"
    [ -z "$why" ] && ok $name || fail $name "$why"
fi
name=dist_zero3_memory_holds_the_weights_shard
P=$(( V * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C )); shard=$(( (P + 1) / 2 ))
scr=$(( V * C + maxT * C + 2 * C + 12 * C * C + 13 * C ))
want="parameters $(awk -v n=$((shard + scr)) 'BEGIN { printf "%.3f", 4 * n / 1e6 }') MB (ZeRO-3: the shard of $shard and the gathered embeddings, head and one layer, $scr)"
want_grads="gradients $(awk -v n=$((shard + scr)) 'BEGIN { printf "%.3f", 4 * n / 1e6 }') MB (ZeRO-3: the shard of $shard and the layer-by-layer scratch of $scr)"
if grep "^memory|" "$tmp/z3.log" 2>/dev/null | grep -qF "$want" && grep "^memory|" "$tmp/z3.log" | grep -qF "$want_grads"; then ok $name
else fail $name "expected '$want' and '$want_grads' in: $(grep '^memory|' "$tmp/z3.log" 2>/dev/null)"; fi

# the Qwen2 model (GQA, untied lm_head: its own unit, biases in the blocks) on 3 ranks, with a
# greedy sample every 2 steps (rank 0 generates from the weights gathered to it): the same
# losses, weights and samples as one process
name=dist_zero3_llama_three_ranks_equal_one_process
if run1 $l3flags -s 2 -g 8 -o "$tmp/l31s" && cp "$tmp/last.log" "$tmp/l31s.log" &&
   $launch -np 3 ./train_sft_mpi $l3flags -s 2 -g 8 -Z 3 -o "$tmp/l3z3" > "$tmp/last.log" 2>&1; then
    series "$tmp/l31s/metrics.jsonl" > "$tmp/l31s.s"; series "$tmp/l3z3/metrics.jsonl" > "$tmp/l3z3.s"
    why="$(close_series "$tmp/l31s.s" "$tmp/l3z3.s" 1e-6)$(close_models "$tmp/l3z3/step_00000004" "$tmp/l31s/step_00000004")"
    grep -q "^model | Qwen2, 2 layers, 4 heads (2 key/value heads).*untied" "$tmp/last.log" || why="not the untied GQA model: $(grep -m1 '^model' "$tmp/last.log") $why"
    n=$(grep -c "^sample | generated" "$tmp/last.log")
    [ "$n" -ge 2 ] && cmp -s <(grep "^sample | generated" "$tmp/last.log") <(grep "^sample | generated" "$tmp/l31s.log") ||
        why="$n samples, or not one process's: $(grep -m1 '^sample | generated' "$tmp/last.log") vs $(grep -m1 '^sample | generated' "$tmp/l31s.log") $why"
    [ -z "$why" ] && ok $name || fail $name "$why"
else fail $name "a run failed: $(grep -m1 error "$tmp/last.log")"; fi

name=dist_zero3_short_last_shard_3_ranks
if [ -f "$tmp/o1.s" ] && $launch -np 3 ./train_sft_mpi $oflags -Z 3 -o "$tmp/ozz3" > "$tmp/last.log" 2>&1; then
    series "$tmp/ozz3/metrics.jsonl" > "$tmp/ozz3.s"
    why="$(close_series "$tmp/o1.s" "$tmp/ozz3.s" 1e-6)$(close_models "$tmp/ozz3/step_00000004" "$tmp/o1/step_00000004")"
    grep -q "(ZeRO-3: the shard of 16299 and the gathered" "$tmp/last.log" || why="shards: $(grep -m1 '^memory' "$tmp/last.log") $why"
    [ -z "$why" ] && ok $name || fail $name "$why"
else fail $name "mpirun exited or no reference: $(grep -m1 error "$tmp/last.log")"; fi

# checkpoints: a ZeRO-3 run resumed at the same W and stage is bit-identical to the uninterrupted
# one and its checkpoint of step 4 equals one process's; resumed by one process at ZeRO-0 (W 2 ->
# 1, ZeRO-3 -> 0), and a ZeRO-1 checkpoint resumed with ZeRO-3, continue within 1e-5
name=dist_zero3_resume_same_stage_bit_identical
if run2 $flags -Z 3 -n 4 -o "$tmp/rz3"; then
    rewind "$tmp/rz3" "$tmp/rz3b"
    if run2 $flags -Z 3 -n 4 -y 1 -o "$tmp/rz3b"; then
        why=""
        for f in model.safetensors state.bin config.json; do cmp -s "$tmp/rz3/$final/$f" "$tmp/rz3b/$final/$f" || why="$why $f differs"; done
        cmp -s <(series "$tmp/rz3/metrics.jsonl") <(series "$tmp/rz3b/metrics.jsonl") || why="$why metrics differ"
        why="$why$(close_models "$tmp/rz3/step_00000004" "$tmp/r1/step_00000004")"
        [ -z "$why" ] && ok $name || fail $name "$why"
    fi
fi
name=dist_zero3_resume_with_one_process_zero0
rewind "$tmp/rz3" "$tmp/rz31"
if run1 $flags -n 4 -y 1 -o "$tmp/rz31"; then
    why=$(close_models "$tmp/rz31/$final" "$tmp/rz3/$final")
    [ -z "$why" ] && ok $name || fail $name "$why"
fi
name=dist_zero1_checkpoint_resumed_with_zero3
rewind "$tmp/r2" "$tmp/r2z3"
if run2 $flags -Z 3 -n 4 -y 1 -o "$tmp/r2z3"; then
    why=$(close_models "$tmp/r2z3/$final" "$tmp/r2/$final")
    [ -z "$why" ] && ok $name || fail $name "$why"
fi

# ---- ZeRO-3 with LoRA: each rank holds its shard of the frozen base (ceil(P/W) of its flat
# vector), gathered unit by unit as full fine-tuning's weights are; the adapters as with ZeRO-2 ----
# The LoRA run above (tied head, dropout) with -Z 3 on 2 ranks equals one process within the
# LoRA tolerances, and is bit-identical to ZeRO-2 on 2 ranks (the gathered base holds the same
# floats: the same products in the same order), adapter checkpoints and the -M 1 merged model
# (rank 0 merges into the base gathered to it) alike; its checkpoints hold the adapter only, and
# continue within 1e-5 resumed by one process (ZeRO-0) and by 2 ranks at ZeRO-1.
name=dist_zero3_lora_equals_one_process
if [ -f "$tmp/lo1.s" ] && run2 $loflags -Z 3 -M 1 -n 4 -o "$tmp/loz3"; then
    series "$tmp/loz3/metrics.jsonl" > "$tmp/loz3.s"
    why="$(close_series "$tmp/lo1.s" "$tmp/loz3.s" 1e-6)$(close_models "$tmp/loz3/$final" "$tmp/lo1/$final")"
    for f in "$final/adapter_model.safetensors" "$final/state.bin" merged/model.safetensors; do
        cmp -s "$tmp/loz3/$f" "$tmp/loz2/$f" || why="$why $f not ZeRO-2's"
    done
    [ -e "$tmp/loz3/step_00000004/model.safetensors" ] && why="$why the base in a LoRA checkpoint"
    [ -z "$why" ] && ok $name || fail $name "$why"
fi
for z in 0 1; do
    name=dist_zero3_lora_checkpoint_resumed_with_zero$z
    rewind "$tmp/loz3" "$tmp/loz3r$z"
    resume=(run1); [ $z = 0 ] || resume=(run2 -Z 1)
    if "${resume[@]}" $loflags -n 4 -y 1 -o "$tmp/loz3r$z"; then
        why=$(close_models "$tmp/loz3r$z/$final" "$tmp/loz3/$final")
        [ -z "$why" ] && ok $name || fail $name "$why"
    fi
done
# the Qwen2 model (GQA, untied lm_head, q/k/v biases) with the adapters on 3 ranks: the base's
# 35104 floats in shards of 11702 (the last 11700), the adapter's 1632 in shards of 544; greedy
# samples every 2 steps (rank 0 generates from the base gathered to it) and validation equal one
# process's; memory by hand: the base's shard, the gathered embeddings (V*C), head (C + V*C) and
# one block (2C norms, (C + 2KV)*C + C + 2KV for q/k/v with biases, C*C, 3*FF*C), the adapter whole
name=dist_zero3_lora_llama_three_ranks_equal_one_process
l3loflags="$l3flags -A 3 -T q_proj,v_proj,down_proj -p 0.1 -s 2 -g 8"
if run1 $l3loflags -o "$tmp/ll31" && cp "$tmp/last.log" "$tmp/ll31.log" &&
   $launch -np 3 ./train_sft_mpi $l3loflags -Z 3 -o "$tmp/ll3z3" > "$tmp/last.log" 2>&1; then
    series "$tmp/ll31/metrics.jsonl" > "$tmp/ll31.s"; series "$tmp/ll3z3/metrics.jsonl" > "$tmp/ll3z3.s"
    why="$(close_series "$tmp/ll31.s" "$tmp/ll3z3.s" 1e-6)$(close_models "$tmp/ll3z3/step_00000004" "$tmp/ll31/step_00000004")"
    n=$(grep -c "^sample | generated" "$tmp/last.log")
    [ "$n" -ge 2 ] && cmp -s <(grep "^sample | generated" "$tmp/last.log") <(grep "^sample | generated" "$tmp/ll31.log") ||
        why="$n samples, or not one process's: $(grep -m1 '^sample | generated' "$tmp/last.log") $why"
    read -r L C KV FF V <<< "$(sed -n 's/^model | Qwen2, \([0-9]*\) layers, [0-9]* heads (\([0-9]*\) key\/value heads) of size \([0-9]*\), \([0-9]*\) channels, MLP \([0-9]*\), vocab \([0-9]*\),.*untied.*/\1 \4 \2*\3 \5 \6/p' "$tmp/last.log")"
    KV=$(( ${KV:-0} )); block=$(( 2 * C + (C + 2 * KV) * C + C + 2 * KV + C * C + 3 * FF * C ))
    P=$(( V * C + L * block + C + V * C )); shard=$(( (P + 2) / 3 )); gathered=$(( V * C + C + V * C + block ))
    want="parameters $(awk -v n=$((shard + gathered + 1632)) 'BEGIN { printf "%.3f", 4 * n / 1e6 }') MB (ZeRO-3: the shard of $shard and the gathered embeddings, head and one layer, $gathered; the adapter, whole, 1632)"
    grep "^memory|" "$tmp/last.log" | grep -qF "$want" && [ $P -eq 35104 ] || why="expected '$want' in: $(grep '^memory|' "$tmp/last.log") $why"
    [ -z "$why" ] && ok $name || fail $name "$why"
else fail $name "a run failed: $(grep -m1 error "$tmp/last.log")"; fi

# ---- bad configurations: every rank refuses with one line ----
# Each rank checks -d before MPI starts, so each is run alone here (-R r -W 2): under
# mpirun the first rank to exit makes mpirun end the others, maybe before they print.
for bad in "48 is not a multiple of B\*T\*W = 1\*16\*2 = 32" "16 gives 1 rows per step, fewer than the 2 ranks x B = 2 rows"; do
    d=${bad%% *}; name=dist_batch_${d}_refused; why=""
    for r in 0 1; do
        ./train_sft $base -d "$d" -x 2 -R $r -W 2 -o "$tmp/bad" > "$tmp/bad.log" 2>&1; rc=$?
        [ $rc -eq 1 ] && [ "$(wc -l < "$tmp/bad.log")" -eq 1 ] && grep -q "^error: -d $bad" "$tmp/bad.log" || why="$why rank $r: exit $rc, $(head -c 200 "$tmp/bad.log")"
    done
    $mpi ./train_sft_mpi $base -d "$d" -x 2 -o "$tmp/bad" > "$tmp/bad.log" 2>&1; rc=$?
    [ $rc -ne 0 ] && grep -q "error: -d $bad" "$tmp/bad.log" || why="$why mpirun: exit $rc, $(head -c 200 "$tmp/bad.log")"
    [ -e "$tmp/bad" ] && why="$why: $tmp/bad was created"
    [ -z "$why" ] && ok $name || fail $name "$why"
done
# ranks that disagree meet in the first collective: every rank says so, then all exit 1
name=dist_mismatched_flags_refused
$launch -np 1 ./train_sft_mpi $base -d 64 -x 2 -l 1e-3 -o "$tmp/bad" : \
    -np 1 ./train_sft_mpi $base -d 64 -x 2 -l 2e-3 -o "$tmp/bad" > "$tmp/bad.log" 2>&1; rc=$?
n=$(grep -c "the ranks disagree on the run's flags" "$tmp/bad.log")
[ $rc -ne 0 ] && [ "$n" -eq 2 ] && ok $name || fail $name "exit $rc, $n of 2 ranks said so: $(head -c 300 "$tmp/bad.log")"
# the same flags but different starting weights (a checkpoint of the same shape on rank 1)
name=dist_different_weights_refused
$launch -np 1 ./train_sft_mpi $base -d 64 -x 2 -o "$tmp/bad" : -np 1 ./train_sft_mpi $base -d 64 -x 2 -e "$tmp/one/$final" -o "$tmp/bad" \
    > "$tmp/bad.log" 2>&1; rc=$?
n=$(grep -c "the ranks disagree on the model's starting weights" "$tmp/bad.log")
[ $rc -ne 0 ] && [ "$n" -eq 2 ] && ok $name || fail $name "exit $rc, $n of 2 ranks said so: $(head -c 300 "$tmp/bad.log")"
