#!/usr/bin/env bash
# tests/train/test_crash.sh: the trainer's crash safety, through real processes.
#   bash tests/train/test_crash.sh [TRIALS]     (default 24; `make test` runs 5)
# Environment: TRAINER (default ./train_sft; the GPU trainer takes the same flags),
# SEED (default 1): the kill times are a function of it, so a run is reproducible
# up to the machine's timing.
#
# Checks, one "ok/FAIL/skip NAME" line each:
# - kill -9 at random moments: each trial starts the trainer and kills it 1 to 3
#   times, resuming with -y 1 each time (or starting afresh while there is no
#   checkpoint yet), then lets it finish. After every kill `latest` must name a
#   complete checkpoint, equal byte for byte to the uninterrupted run's checkpoint
#   of that step; every resume must succeed; the final model and every logged loss
#   must equal the uninterrupted run's bit for bit. A kill counts as landing during
#   a checkpoint write when it leaves a step_N.tmp directory or latest.tmp made by
#   that run (a kill after the last file's rename but before `latest` is replaced
#   counts as between checkpoints).
# - files and directories are flushed (fsync) before the renames that publish them
#   (strace, skipped where it is missing).
# - kill -9 while a Hugging Face directory is written (a LoRA run's merged model and
#   base, a checkpoint; strace kills at a chosen write): the previous directory intact,
#   no half-written one under the final name.
# - steps made NaN by the test hook SFT_TEST_POISON leave the model as it was, and
#   -K of them in a row stop the run with exit 2.
# - a second trainer on a locked output directory refuses; kill -9 leaves no stale lock.
# - a full disk (a small tmpfs; skipped where mount is not allowed) and a file-size
#   limit (ulimit -f) during a checkpoint: one line, exit 1, the previous checkpoint
#   and `latest` intact, and a later -y 1 finishes exactly as the uninterrupted run.
set -u
cd "$(dirname "$0")/../.."
trials=${1:-24}
seed=${SEED:-1}
trainer=${TRAINER:-./train_sft}
[ -x "$trainer" ] || { echo "FAIL crash_setup: $trainer not found (make train_sft first)"; exit 1; }
tmp=$(mktemp -d /tmp/test_crash.XXXXXX)
mounted=""
bg_pid=""
cleanup() {
    [ -n "$bg_pid" ] && kill -9 "$bg_pid" 2>/dev/null
    [ -n "$mounted" ] && umount "$mounted" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
export OMP_NUM_THREADS=1  # results do not depend on it; one thread starts fastest on a busy machine

steps=12
flags="-i dev/ref/tiny_train.bin -e d2c64h2t32 -b 2 -t 16 -x $steps -n 1 -S 1 -l 1e-2 -u 2"
final=$(printf 'step_%08d' "$steps")

# The loss and gradient-norm fields of a metrics file, one line per record.
losses() { grep -o '"\(loss\|grad_norm\|val_loss\)": [^,}]*' "$1"; }

# "complete" when `latest` in $1 names a checkpoint equal to the reference's, else why not.
check_latest() {
    local out=$1 name f
    [ -f "$out/latest" ] || { echo "none"; return; }
    name=$(cat "$out/latest")
    [ -d "$out/$name" ] || { echo "latest names $name, which does not exist"; return; }
    for f in config.json model.safetensors state.bin; do
        cmp -s "$out/$name/$f" "$tmp/ref/$name/$f" || { echo "$name/$f differs from the uninterrupted run's"; return; }
    done
    echo "complete"
}

# ---- the uninterrupted reference run ----
t0=$(date +%s%N)
if ! $trainer $flags -o "$tmp/ref" > "$tmp/ref.log" 2>&1; then
    echo "FAIL crash_reference_run: $(tail -1 "$tmp/ref.log")"; exit 1
fi
ref_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
t0=$(date +%s%N)  # the first run is slowed by a cold start: time a second one too, keep the shorter
$trainer $flags -o "$tmp/timing" > /dev/null 2>&1
t1=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$t1" -lt "$ref_ms" ] && ref_ms=$t1
losses "$tmp/ref/metrics.jsonl" > "$tmp/ref.losses"

# ---- kill -9 trials ----
RANDOM=$seed
kills=0; during_write=0; before_first=0; after_end=0; bad=""
for ((trial = 1; trial <= trials; trial++)); do
    out="$tmp/trial$trial"
    nk=$((1 + RANDOM % 3))
    outcome=""
    for ((k = 1; k <= nk; k++)); do
        resume=""
        [ -f "$out/latest" ] && resume="-y 1"
        [ -f "$out/latest" ] && [ "$(cat "$out/latest")" = "$final" ] && break  # already finished
        # a moment within what is left of the run (a resumed run is shorter)
        done_steps=0
        [ -n "$resume" ] && done_steps=$((10#$(sed 's/step_//' "$out/latest")))
        delay=$((RANDOM % (ref_ms * (steps - done_steps) / steps + 1)))
        mkdir -p "$out"; touch "$out/.marker"
        $trainer $flags -o "$out" $resume > "$out/run.log" 2>&1 &
        pid=$!
        sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
        if kill -9 "$pid" 2>/dev/null; then
            wait "$pid" 2>/dev/null
            kills=$((kills + 1))
            if [ -n "$(find "$out" \( -path '*/step_*.tmp*' -o -name latest.tmp \) -newer "$out/.marker" | head -1)" ]; then
                during_write=$((during_write + 1)); where="during a checkpoint write"
            elif [ ! -f "$out/latest" ]; then
                before_first=$((before_first + 1)); where="before the first checkpoint"
            else
                where="between checkpoints"
            fi
        else
            wait "$pid"; rc=$?
            [ "$rc" -eq 0 ] || bad="$bad trial $trial: a run exited with $rc ($(tail -1 "$out/run.log"));"
            after_end=$((after_end + 1)); where="after the run had ended"
        fi
        state=$(check_latest "$out")
        [ "$state" = complete ] || [ "$state" = none ] || bad="$bad trial $trial kill $k: $state;"
        outcome="$outcome kill at ${delay} ms $where (latest: $state, $(cat "$out/latest" 2>/dev/null || echo -));"
    done
    # finish: resume from the last checkpoint (or start afresh if there is none)
    if ! { [ -f "$out/latest" ] && [ "$(cat "$out/latest")" = "$final" ]; }; then
        resume=""
        [ -f "$out/latest" ] && resume="-y 1"
        mkdir -p "$out"
        $trainer $flags -o "$out" $resume > "$out/run.log" 2>&1 || bad="$bad trial $trial: the final run failed ($(tail -1 "$out/run.log"));"
    fi
    same="final model differs"
    cmp -s "$out/$final/model.safetensors" "$tmp/ref/$final/model.safetensors" && same="final model identical"
    [ "$same" = "final model identical" ] || bad="$bad trial $trial: final model differs;"
    if losses "$out/metrics.jsonl" | cmp -s - "$tmp/ref.losses"; then same="$same, losses identical"
    else same="$same, losses differ"; bad="$bad trial $trial: logged losses differ;"; fi
    echo "# trial $trial:$outcome $same"
done
summary="$trials trials, $kills kills: $during_write during checkpoint writes, $before_first before the first checkpoint, $((kills - during_write - before_first)) between checkpoints; $after_end runs ended before their kill"
if [ -z "$bad" ]; then echo "ok kill9_resume_exact: $summary"; else echo "FAIL kill9_resume_exact: $summary;$bad"; fi

# ---- fsync before publishing ----
if command -v strace > /dev/null; then
    out="$tmp/strace"
    strace -f -y -e trace=fsync,rename,renameat,renameat2 -o "$tmp/strace.log" $trainer $flags -x 1 -o "$out" > /dev/null 2>&1
    # every rename of X.tmp to X comes after an fsync of X.tmp, and is followed by an
    # fsync of X's directory before anything else is renamed
    why=$(awk -v out="$out" '
        /^[0-9]+ +fsync\(/ { match($0, /<[^>]*>/); p = substr($0, RSTART + 1, RLENGTH - 2); synced[p] = 1
                             if (pending != "" && p == pending) pending = ""; next }
        /rename(at2)?\(/ { if (pending != "") { print "no fsync of " pending " after renaming into it"; exit }
                           n = split($0, q, "\""); src = q[2]; dst = q[n - 1]
                           if (substr(src, 1, 1) != "/") next
                           if (!synced[src]) { print "renamed " src " without an fsync first"; exit }
                           d = dst; sub(/\/[^\/]*$/, "", d); pending = d; renames++ }
        END { if (pending != "") print "no fsync of " pending " after the last rename"; else if (renames < 5) print "only " renames " renames seen" }
    ' "$tmp/strace.log")
    if [ -z "$why" ]; then echo "ok fsync_before_rename"; else echo "FAIL fsync_before_rename: $why (trace $tmp/strace.log)"; fi
else
    echo "skip fsync_before_rename: strace not installed"
fi

# ---- Hugging Face directories are complete or absent (issue 33, rule 18) ----
# kill -9 in the middle of writing a directory's model.safetensors (strace injects SIGKILL
# at the second write to it, whether it is written under <dir>.tmp or under <dir>): the
# previous <dir> must be intact, byte for byte, and no half-written one under the final
# name. For a LoRA run's -M 1 merged model and its base (a fresh model's, written at the
# start), and a checkpoint.
# kill_writing OUT DIR FLAGS...: runs the trainer with FLAGS -o OUT, killed while writing OUT/DIR
kill_writing() {
    local out=$1 dir=$2; shift 2
    (strace -f -o /dev/null -P "$out/$dir.tmp/model.safetensors.tmp" -P "$out/$dir/model.safetensors.tmp" \
        -e trace=write -e inject=write:signal=KILL:when=2 $trainer "$@" -o "$out" > /dev/null 2>&1; exit $?) 2> /dev/null  # not exec'd: its "Killed" line goes to /dev/null
}
# same_dir A B: A and B hold the same files with the same bytes
same_dir() { diff -r "$1" "$2" > /dev/null 2>&1; }
if command -v strace > /dev/null; then
    lora="-i dev/ref/tiny_train.bin -b 2 -t 16 -l 1e-2 -A 2 -n 1"
    # the merged model: a finished run's, then a longer run in the same directory killed while replacing it
    out="$tmp/hfdir_merged"
    $trainer $lora -e dev/ref/tiny_llama -x 1 -M 1 -o "$out" > /dev/null 2>&1 && cp -r "$out/merged" "$tmp/merged.before"
    kill_writing "$out" merged $lora -e dev/ref/tiny_llama -x 2 -M 1; rc=$?
    if [ "$rc" -eq 137 ] && [ -d "$tmp/merged.before" ] && same_dir "$out/merged" "$tmp/merged.before"; then
        echo "ok merged_dir_intact_after_kill"
    else
        echo "FAIL merged_dir_intact_after_kill: exit $rc (137: killed while writing); $out/merged: $(ls "$out/merged" 2>&1 | tr '\n' ' ')"
    fi
    # LoRA's base: killed while writing the first one (none may appear), then while replacing a finished run's
    out="$tmp/hfdir_base"
    kill_writing "$out" base $lora -e d2c16h2t24 -x 1; rc1=$?
    [ -e "$out/base" ] && first="a base directory appeared" || first=""
    $trainer $lora -e d2c16h2t24 -x 1 -o "$out" > /dev/null 2>&1 && cp -r "$out/base" "$tmp/base.before"
    kill_writing "$out" base $lora -e d2c16h2t24 -x 1 -z 7; rc2=$?  # another seed: another base
    if [ "$rc1" -eq 137 ] && [ -z "$first" ] && [ "$rc2" -eq 137 ] && [ -d "$tmp/base.before" ] && same_dir "$out/base" "$tmp/base.before"; then
        echo "ok lora_base_dir_intact_after_kill"
    else
        echo "FAIL lora_base_dir_intact_after_kill: exits $rc1 $rc2 (137: killed while writing) ${first}; $out/base: $(ls "$out/base" 2>&1 | tr '\n' ' ')"
    fi
    # a checkpoint: step 2's killed while written; latest still names step 1's, complete
    out="$tmp/hfdir_ckpt"
    kill_writing "$out" step_00000002 $flags -x 2; rc=$?
    if [ "$rc" -eq 137 ] && [ ! -e "$out/step_00000002" ] && [ "$(check_latest "$out")" = complete ] && [ "$(cat "$out/latest")" = step_00000001 ]; then
        echo "ok checkpoint_dir_absent_after_kill"
    else
        echo "FAIL checkpoint_dir_absent_after_kill: exit $rc (137: killed while writing), latest $(cat "$out/latest" 2>/dev/null), step_00000002: $(ls "$out/step_00000002" 2>&1 | tr '\n' ' ')"
    fi
else
    echo "skip hf_dirs_intact_after_kill: strace not installed (it kills the trainer at a chosen write)"
fi

# ---- the non-finite guard, through the test hook (for TRAINER=the GPU trainer too) ----
out="$tmp/poison"
SFT_TEST_POISON=grad:2,loss:3 $trainer $flags -o "$out" > /dev/null 2> "$tmp/poison.err"; rc=$?
if [ "$rc" -eq 0 ] && grep -q '^{"step": 2, "skipped": "nonfinite", "consecutive": 1}$' "$out/metrics.jsonl" &&
   grep -q '^{"step": 3, "skipped": "nonfinite", "consecutive": 2}$' "$out/metrics.jsonl" && grep -q '^{"step": 4, "loss": ' "$out/metrics.jsonl" &&
   ! cmp -s "$out/step_00000002/model.safetensors" "$tmp/ref/step_00000002/model.safetensors" &&
   cmp -s "$out/step_00000002/model.safetensors" "$out/step_00000001/model.safetensors" &&
   cmp -s "$out/step_00000003/model.safetensors" "$out/step_00000001/model.safetensors"; then
    echo "ok nonfinite_steps_leave_the_model_unchanged"
else
    echo "FAIL nonfinite_steps_leave_the_model_unchanged: exit $rc: $(head -c 300 "$tmp/poison.err")"
fi
SFT_TEST_POISON=grad:3,grad:4 $trainer $flags -K 2 -o "$tmp/poison2" > /dev/null 2> "$tmp/poison2.err"; rc=$?
if [ "$rc" -eq 2 ] && grep -q '^error: stopping: 2 steps in a row (through step 4)' "$tmp/poison2.err" && [ "$(cat "$tmp/poison2/latest")" = step_00000003 ]; then
    echo "ok nonfinite_guard_stops_with_exit_2"
else
    echo "FAIL nonfinite_guard_stops_with_exit_2: exit $rc, latest $(cat "$tmp/poison2/latest" 2>/dev/null): $(cat "$tmp/poison2.err")"
fi

# ---- the output directory lock ----
out="$tmp/locked"
$trainer ${flags/-x $steps/-x 1000000} -n 0 -o "$out" > /dev/null 2>&1 &
bg_pid=$!
for i in $(seq 100); do [ -s "$out/metrics.jsonl" ] && break; sleep 0.1; done
$trainer $flags -o "$out" > /dev/null 2> "$tmp/second.err"; rc=$?
lines=$(wc -l < "$tmp/second.err")
alive=0; kill -0 "$bg_pid" 2>/dev/null && alive=1
if [ "$rc" -eq 1 ] && [ "$lines" -eq 1 ] && grep -q "^error: $out: another trainer (process $bg_pid) is using this output directory" "$tmp/second.err" &&
   [ "$alive" -eq 1 ] && [ -s "$out/metrics.jsonl" ]; then
    echo "ok second_trainer_refused"
else
    echo "FAIL second_trainer_refused: exit $rc, $lines stderr lines, first still running $alive: $(cat "$tmp/second.err")"
fi
kill -9 "$bg_pid"; wait "$bg_pid" 2>/dev/null; bg_pid=""
if $trainer ${flags/-x $steps/-x 2} -o "$out" > /dev/null 2> "$tmp/third.err"; then echo "ok no_stale_lock_after_kill9"
else echo "FAIL no_stale_lock_after_kill9: $(cat "$tmp/third.err")"; fi

# ---- a write error during a checkpoint ----
# $1 name, $2 output dir, $3 the command prefix that makes writes fail. The directory
# gets the reference's checkpoint of step 4 as if a run had died after it; the run
# with -y 1 must then fail at step 5's checkpoint and leave step 4 and latest alone.
write_error_case() {
    local name=$1 out=$2 prefix=$3 rc lines
    mkdir -p "$out"
    cp -r "$tmp/ref/step_00000004" "$out/"
    echo step_00000004 > "$out/latest"
    bash -c "$prefix; exec $trainer $flags -o $out -y 1" > /dev/null 2> "$tmp/$name.err"; rc=$?
    lines=$(wc -l < "$tmp/$name.err")
    local state; state=$(check_latest "$out")
    local leftovers; leftovers=$(cd "$out" && ls -d step_00000005* 2>/dev/null)
    if [ "$rc" -eq 1 ] && [ "$lines" -eq 1 ] && grep -q '^error: .*step_00000005.tmp.*: write failed: ' "$tmp/$name.err" &&
       [ "$(cat "$out/latest")" = step_00000004 ] && [ "$state" = complete ] && [ -z "$leftovers" ]; then
        echo "ok ${name}_keeps_previous_checkpoint: $(cat "$tmp/$name.err")"
    else
        echo "FAIL ${name}_keeps_previous_checkpoint: exit $rc, $lines stderr lines, latest $(cat "$out/latest") ($state), left: $leftovers: $(cat "$tmp/$name.err")"
    fi
}
checkpoint_kb=$(du -sk "$tmp/ref/step_00000004" | cut -f1)
# ulimit -f: a checkpoint file larger than the limit cannot be written (EFBIG)
write_error_case file_size_limit "$tmp/ulimit" "ulimit -f $((checkpoint_kb / 4))"
$trainer $flags -o "$tmp/ulimit" -y 1 > /dev/null 2>&1 && cmp -s "$tmp/ulimit/$final/model.safetensors" "$tmp/ref/$final/model.safetensors" &&
    echo "ok file_size_limit_then_resume_exact" || echo "FAIL file_size_limit_then_resume_exact: the resumed run failed or differs"
# a full disk: a tmpfs with room for half a checkpoint more than the copied one
mkdir -p "$tmp/full"
if mount -t tmpfs -o size=$((2 * checkpoint_kb + checkpoint_kb / 2 + 64))k tmpfs "$tmp/full" 2> /dev/null; then
    mounted="$tmp/full"
    head -c $((checkpoint_kb * 1024)) /dev/zero > "$tmp/full/filler"
    write_error_case disk_full "$tmp/full/out" "true"
    rm "$tmp/full/filler"
    mount -o remount,size=64m "$tmp/full"  # room for the rest of the run
    $trainer $flags -o "$tmp/full/out" -y 1 > /dev/null 2>&1 && cmp -s "$tmp/full/out/$final/model.safetensors" "$tmp/ref/$final/model.safetensors" &&
        echo "ok disk_full_then_resume_exact" || echo "FAIL disk_full_then_resume_exact: the resumed run failed or differs"
else
    echo "skip disk_full_keeps_previous_checkpoint: cannot mount a tmpfs here (needs root); the ulimit -f case above covers write errors"
fi
