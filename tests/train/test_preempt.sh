#!/usr/bin/env bash
# tests/train/test_preempt.sh: stopping on SIGTERM/SIGINT, restarting a finished run, a rank
# that dies, and bad configurations across ranks, through real processes and signals.
#   bash tests/train/test_preempt.sh
# Environment: TRAINER (default ./train_sft), MPI_TRAINER (default ./train_sft_mpi;
# the MPI checks skip, saying why, where it or mpirun is missing).
#
# Checks, one "ok/FAIL/skip NAME" line each:
# - SIGTERM mid-run: exit 143, "stopped by SIGTERM at step N of M", the checkpoint of
#   step N (the last step logged) named by `latest`, a "stopped" line in metrics.jsonl;
#   `-y 1` then ends with the final model, optimizer state and losses of an
#   uninterrupted run, bit for bit.
# - SIGINT once: the same stop, exit 130; a second SIGINT ends the process at once.
# - SIGTERM inside a step (raised by the test hook SFT_TEST_POISON=term:N): before the
#   last step it stops the run after that step (exit 143); during the last step the run
#   finishes (exit 0, final validation, evaluation and checkpoint, the metrics and
#   final checkpoint of an uninterrupted run).
# - `-y 1` on a finished run: exit 0, "run already finished", nothing in -o changed.
# - mpirun -np 2: SIGTERM to one rank's pid stops both after the same step, rank 0
#   saves, every rank exits 143, and `-y 1` continues bit-identically; SIGTERM to mpirun
#   (which forwards it after odls_base_sigkill_timeout) stops the run the same way;
#   kill -9 of one rank ends mpirun non-zero within the bound docs/reliability.md states, with no
#   process left and `latest` naming a complete checkpoint.
# - bad configurations: one line and exit 1 on every rank.
set -u
cd "$(dirname "$0")/../.."
trainer=${TRAINER:-./train_sft}
mpi_trainer=${MPI_TRAINER:-./train_sft_mpi}
[ -x "$trainer" ] || { echo "FAIL preempt_setup: $trainer not found (make train_sft first)"; exit 1; }
tmp=$(mktemp -d /tmp/test_preempt.XXXXXX)
bg=""
# Process $1 and all its descendants.
tree() { local c; echo "$1"; for c in $(pgrep -P "$1"); do tree "$c"; done; }
cleanup() {
    [ -n "$bg" ] && kill -9 $(tree "$bg") 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
export OMP_NUM_THREADS=1  # results do not depend on it; one thread per process on a 2-core machine

# A run of many short steps (about 5 ms each here), so that a signal lands mid-run.
steps=300
flags="-i dev/ref/tiny_train.bin -e d2c64h2t32 -b 4 -t 32 -x $steps -l 1e-3 -u 5 -n 100"
final=$(printf 'step_%08d' "$steps")

# The loss and gradient-norm fields of a metrics file, one line per record.
losses() { grep -o '"\(loss\|grad_norm\)": [^,}]*' "$1"; }
# Training steps logged in a metrics file.
steps_logged() { local n; n=$(grep -c '"loss"' "$1" 2>/dev/null); echo "${n:-0}"; }
# Waits (up to 30 s) until the metrics file $1 has at least $2 step lines; 1 if never.
wait_steps() {
    local i
    for ((i = 0; i < 3000; i++)); do
        [ "$(steps_logged "$1")" -ge "$2" ] && return 0
        sleep 0.01
    done
    return 1
}
# Waits (up to 30 s) until file $1 holds the text $2.
wait_text() {
    local i
    for ((i = 0; i < 3000; i++)); do
        grep -qF -- "$2" "$1" 2>/dev/null && return 0
        sleep 0.01
    done
    return 1
}
# "" when every step_N directory in $1 is complete and `latest` names one, else why not.
check_checkpoints() {
    local out=$1 d f
    for d in "$out"/step_*; do
        [ -d "$d" ] || continue
        case $d in *.tmp|*.old) continue ;; esac  # never published; removed by the next write of that step
        for f in config.json model.safetensors state.bin; do
            [ -s "$d/$f" ] || { echo "$d has no $f"; return; }
        done
    done
    [ -f "$out/latest" ] || { echo "no latest"; return; }
    [ -d "$out/$(cat "$out/latest")" ] || echo "latest names $(cat "$out/latest"), which does not exist"
}
# The step field of the last line of metrics file $1.
last_step() { tail -1 "$1" | grep -o '"step": [0-9]*' | grep -o '[0-9]*$'; }

# ---- the uninterrupted reference ----
if ! $trainer $flags -o "$tmp/ref" > "$tmp/ref.log" 2>&1; then
    echo "FAIL preempt_reference_run: $(tail -1 "$tmp/ref.log")"; exit 1
fi
losses "$tmp/ref/metrics.jsonl" > "$tmp/ref.losses"

# ---- SIGTERM mid-run, then -y 1 ----
# The step N of the line "stopped by SIG at step N of $steps; resume with -y 1" in log $2.
stopped_step() { grep -o "stopped by $1 at step [0-9]* of $steps; resume with -y 1" "$2" | grep -o 'step [0-9]*' | grep -o '[0-9]*'; }
# Checks a run in output dir $1 stopped by signal $2 (its stdout in $3): "" or why not.
check_stopped() {
    local out=$1 sig=$2 log=$3 n
    n=$(stopped_step "$sig" "$log")
    [ -n "$n" ] || { echo "no 'stopped by $sig at step N of $steps; resume with -y 1' line: $(tail -1 "$log")"; return; }
    [ "$n" -lt "$steps" ] || { echo "stopped at the last step $n: the signal came too late"; return; }
    [ "$(steps_logged "$out/metrics.jsonl")" -eq "$n" ] || { echo "stopped at step $n but $(steps_logged "$out/metrics.jsonl") steps were logged"; return; }
    [ "$(cat "$out/latest" 2>/dev/null)" = "$(printf 'step_%08d' "$n")" ] || { echo "latest is '$(cat "$out/latest" 2>/dev/null)', not the checkpoint of step $n"; return; }
    tail -1 "$out/metrics.jsonl" | grep -q "^{\"step\": $n, \"stopped\": \"$sig\"}$" || { echo "metrics.jsonl does not end with the stop: $(tail -1 "$out/metrics.jsonl")"; return; }
    local why
    why=$(check_checkpoints "$out")
    [ -z "$why" ] || echo "$why"
}

# Compares run $1's final checkpoint and losses with the reference's: "" or why not.
same_as_reference() {
    local out=$1 ref=${2:-$tmp/ref} f
    for f in model.safetensors state.bin; do
        cmp -s "$out/$final/$f" "$ref/$final/$f" || { echo "$final/$f differs from the uninterrupted run's"; return; }
    done
    losses "$out/metrics.jsonl" | cmp -s - <(losses "$ref/metrics.jsonl") || echo "the logged losses differ from the uninterrupted run's"
}

out="$tmp/term"
$trainer $flags -o "$out" > "$tmp/term.log" 2> "$tmp/term.err" &
bg=$!
wait_steps "$out/metrics.jsonl" 20
kill -TERM "$bg"
wait "$bg"; rc=$?; bg=""
why=$(check_stopped "$out" SIGTERM "$tmp/term.log")
if [ "$rc" -ne 143 ]; then echo "FAIL preempt_sigterm_stops: exit status $rc, expected 143: $(tail -1 "$tmp/term.err")"
elif [ -n "$why" ]; then echo "FAIL preempt_sigterm_stops: $why"
else echo "ok preempt_sigterm_stops (at step $(stopped_step SIGTERM "$tmp/term.log") of $steps, exit 143, checkpoint and metrics line)"; fi
$trainer $flags -o "$out" -y 1 > "$tmp/term_resume.log" 2>&1; rc=$?
why=$(same_as_reference "$out")
if [ "$rc" -ne 0 ]; then echo "FAIL preempt_sigterm_resume: -y 1 exited $rc: $(tail -1 "$tmp/term_resume.log")"
elif [ -n "$why" ]; then echo "FAIL preempt_sigterm_resume: $why"
else echo "ok preempt_sigterm_resume (the final model, optimizer state and losses equal the uninterrupted run's)"; fi

# ---- -y 1 on the finished run: nothing to do, nothing written ----
snapshot() { (cd "$1" && find . -printf '%p %s %T@\n' | sort && find . -type f -exec md5sum {} + | sort); }
snapshot "$out" > "$tmp/before"
$trainer $flags -o "$out" -y 1 > "$tmp/again.log" 2>&1; rc=$?
snapshot "$out" > "$tmp/after"
want="run already finished at step $steps (checkpoint $out/$final); nothing to do"
if [ "$rc" -ne 0 ]; then echo "FAIL preempt_finished_restart: exit status $rc, expected 0: $(tail -1 "$tmp/again.log")"
elif ! grep -qxF "$want" "$tmp/again.log"; then echo "FAIL preempt_finished_restart: no line '$want': $(tail -1 "$tmp/again.log")"
elif ! cmp -s "$tmp/before" "$tmp/after"; then echo "FAIL preempt_finished_restart: the output directory changed: $(diff "$tmp/before" "$tmp/after" | head -3 | tr '\n' ' ')"
else echo "ok preempt_finished_restart (exit 0, says so, the output directory unchanged)"; fi

# ---- SIGINT once: the same stop ----
out="$tmp/int"
$trainer $flags -o "$out" > "$tmp/int.log" 2> "$tmp/int.err" &
bg=$!
wait_steps "$out/metrics.jsonl" 20
kill -INT "$bg"
wait "$bg"; rc=$?; bg=""
why=$(check_stopped "$out" SIGINT "$tmp/int.log")
if [ "$rc" -ne 130 ]; then echo "FAIL preempt_sigint_stops: exit status $rc, expected 130: $(tail -1 "$tmp/int.err")"
elif [ -n "$why" ]; then echo "FAIL preempt_sigint_stops: $why"
else echo "ok preempt_sigint_stops (at step $(stopped_step SIGINT "$tmp/int.log"), exit 130)"; fi

# ---- the edge of "finished": a checkpoint one step before the end resumes; at or past the end it does not ----
n=$(stopped_step SIGINT "$tmp/int.log")
if [ -n "$n" ]; then
    r1=$($trainer ${flags/-x $steps/-x $((n + 1))} -o "$out" -y 1 2>&1); rc1=$?
    r2=$($trainer ${flags/-x $steps/-x $((n + 1))} -o "$out" -y 1 2>&1); rc2=$?
    r3=$($trainer ${flags/-x $steps/-x $n} -o "$out" -y 1 2>&1); rc3=$?
    if [ "$rc1" -ne 0 ] || ! grep -q "^done  | $((n + 1)) steps (1 in this run" <<< "$r1"; then echo "FAIL preempt_finished_edge: -x $((n + 1)) from the checkpoint of step $n did not train one step (exit $rc1): $(tail -1 <<< "$r1")"
    elif [ "$rc2" -ne 0 ] || ! grep -q "^run already finished at step $((n + 1)) " <<< "$r2"; then echo "FAIL preempt_finished_edge: again with -x $((n + 1)): exit $rc2: $(tail -1 <<< "$r2")"
    elif [ "$rc3" -ne 0 ] || ! grep -q "^run already finished at step $((n + 1)) " <<< "$r3"; then echo "FAIL preempt_finished_edge: with -x $n below the checkpoint: exit $rc3: $(tail -1 <<< "$r3")"
    else echo "ok preempt_finished_edge (checkpoint at $n, -x $((n + 1)): one step; then finished, also for -x $n)"; fi
fi

# ---- SIGTERM during the last step: the run ends as a finished run ----
# The test hook SFT_TEST_POISON=term:N (train/trainer.h) raises SIGTERM as step N
# begins, so the signal lands inside step N on every run. Step 3 of 4: the run stops
# after it (exit 143). Step 4 of 4: it goes on to the final validation, evaluation
# and checkpoint, and its metrics and final checkpoint are the uninterrupted run's
# (exit 0, no "stopped" record, `latest` the final step).
head -2 data/demo/eval.jsonl > "$tmp/eval.jsonl"
lflags="-i data/demo/train.bin -j data/demo/val.bin -k data/demo/tokenizer -E $tmp/eval.jsonl -e d1c32h2t64 -b 4 -t 64 -l 3e-3 -x 4 -v 2 -m 2 -g 6 -S 0"
# metrics.jsonl without its timings
records() { sed 's/, "tokens_per_s": [0-9.]*//' "$1"; }
if ! $trainer $lflags -o "$tmp/last_ref" > "$tmp/last_ref.log" 2>&1; then echo "FAIL preempt_sigterm_last_step: the reference run failed: $(tail -1 "$tmp/last_ref.log")"
else
    SFT_TEST_POISON=term:3 $trainer $lflags -o "$tmp/last3" > "$tmp/last3.log" 2>&1; rc=$?
    if [ "$rc" -ne 143 ] || ! grep -q "stopped by SIGTERM at step 3 of 4" "$tmp/last3.log"; then
        echo "FAIL preempt_sigterm_in_step_stops_after_it: exit $rc (expected 143, stopped at step 3 of 4): $(tail -1 "$tmp/last3.log")"
    else echo "ok preempt_sigterm_in_step_stops_after_it (SIGTERM inside step 3 of 4: stopped after step 3, exit 143)"; fi
    out="$tmp/last4"
    SFT_TEST_POISON=term:4 $trainer $lflags -o "$out" > "$tmp/last4.log" 2> "$tmp/last4.err"; rc=$?
    why=""
    grep -q "^signal| SIGTERM" "$tmp/last4.err" || why="no SIGTERM arrived (stderr: $(head -c 200 "$tmp/last4.err"))"
    [ "$rc" -eq 0 ] || why="$why exit $rc, expected 0: $(tail -1 "$tmp/last4.log")"
    grep -q "stopped by" "$tmp/last4.log" && why="$why it stopped as preempted"
    cmp -s <(records "$out/metrics.jsonl") <(records "$tmp/last_ref/metrics.jsonl") ||
        why="$why metrics differ from the uninterrupted run's: $(diff <(records "$out/metrics.jsonl") <(records "$tmp/last_ref/metrics.jsonl") | head -3 | tr '\n' ' ')"
    for f in model.safetensors state.bin; do cmp -s "$out/step_00000004/$f" "$tmp/last_ref/step_00000004/$f" || why="$why step_00000004/$f differs"; done
    [ "$(cat "$out/latest" 2>/dev/null)" = step_00000004 ] || why="$why latest is '$(cat "$out/latest" 2>/dev/null)'"
    tail -2 "$out/metrics.jsonl" | grep -q '"val_loss"' && tail -1 "$out/metrics.jsonl" | grep -q '"eval_accuracy"' || why="$why no final validation and evaluation"
    [ -z "$why" ] && echo "ok preempt_sigterm_last_step_finishes (exit 0; final validation, evaluation and checkpoint as uninterrupted)" || echo "FAIL preempt_sigterm_last_step_finishes: $why"
fi

# ---- a second SIGINT ends the process at once ----
# Steps of about 0.3 s, so that the second signal arrives within the step the first one
# let finish; the first is known to have arrived when its stderr line is there.
out="$tmp/int2"
$trainer -i dev/ref/tiny_train.bin -e d4c256h4t64 -b 16 -t 64 -x 50 -o "$out" > "$tmp/int2.log" 2> "$tmp/int2.err" &
bg=$!
wait_steps "$out/metrics.jsonl" 1
kill -INT "$bg"
wait_text "$tmp/int2.err" "signal| SIGINT"
kill -INT "$bg" 2>/dev/null
wait "$bg"; rc=$?; bg=""
if grep -q "stopped by" "$tmp/int2.log"; then echo "FAIL preempt_second_sigint: the run stopped after its step instead of at once"
elif [ "$rc" -ne 130 ]; then echo "FAIL preempt_second_sigint: exit status $rc, expected 130 (ended by SIGINT): $(tail -1 "$tmp/int2.log")"
else echo "ok preempt_second_sigint (ended by the second SIGINT before the step ended)"; fi

# ---- several ranks (mpirun) ----
if ! command -v mpirun > /dev/null; then
    echo "skip preempt_mpi: mpirun not found (apt install openmpi-bin libopenmpi-dev)"; exit 0
fi
if [ ! -x "$mpi_trainer" ]; then
    echo "skip preempt_mpi: $mpi_trainer not found (make train_sft_mpi)"; exit 0
fi
# A command, not a shell function (a background job's $! must be a process of it:
# env execs timeout); `timeout` ends a run that hangs (a rule broken so that ranks wait
# for each other). Open MPI leaves its own allocations at exit: under SAN=1 no leak
# check for the ranks.
mpi="env ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 timeout -k 5 120 mpirun --oversubscribe"
[ "$(id -u)" = 0 ] && mpi="$mpi --allow-run-as-root"
# The mpirun started under timeout $1.
mpirun_pid() { pgrep -P "$1" -x mpirun; }
# The pid of rank $2 among the children of the mpirun that timeout $1 runs, or "".
rank_pid() {
    local p
    for p in $(pgrep -P "$(mpirun_pid "$1")"); do
        tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
    done
}
# Waits (up to 30 s) for rank $2 of mpirun $1 to start; prints its pid.
wait_rank_pid() {
    local i p
    for ((i = 0; i < 3000; i++)); do
        p=$(rank_pid "$1" "$2")
        [ -n "$p" ] && { echo "$p"; return; }
        sleep 0.01
    done
}

$mpi -np 2 $mpi_trainer $flags -o "$tmp/mref" > "$tmp/mref.log" 2>&1 || { echo "FAIL preempt_mpi_reference_run: $(grep error "$tmp/mref.log" | head -1)"; exit 1; }

# SIGTERM to rank 1 only: both stop after the same step, every rank exits 143 (so mpirun
# does). odls_base_sigkill_timeout=0: mpirun kills the other ranks at once when the first
# one exits, so rank 0 must have saved and logged before any rank leaves.
out="$tmp/mterm"
OMPI_MCA_odls_base_sigkill_timeout=0 $mpi -np 2 $mpi_trainer $flags -o "$out" > "$tmp/mterm.log" 2>&1 &
bg=$!
wait_steps "$out/metrics.jsonl" 20
kill -TERM "$(wait_rank_pid "$bg" 1)"
wait "$bg"; rc=$?; bg=""
why=$(check_stopped "$out" SIGTERM "$tmp/mterm.log")
if [ "$rc" -ne 143 ]; then echo "FAIL preempt_mpi_sigterm_one_rank: mpirun exited $rc, expected 143: $(grep -m1 error "$tmp/mterm.log")"
elif [ -n "$why" ]; then echo "FAIL preempt_mpi_sigterm_one_rank: $why"
else echo "ok preempt_mpi_sigterm_one_rank (both ranks stopped at step $(stopped_step SIGTERM "$tmp/mterm.log"), mpirun exit 143)"; fi
$mpi -np 2 $mpi_trainer $flags -o "$out" -y 1 > "$tmp/mterm_resume.log" 2>&1; rc=$?
why=$(same_as_reference "$out" "$tmp/mref")
if [ "$rc" -ne 0 ]; then echo "FAIL preempt_mpi_sigterm_resume: -y 1 exited $rc: $(grep -m1 error "$tmp/mterm_resume.log")"
elif [ -n "$why" ]; then echo "FAIL preempt_mpi_sigterm_resume: $why"
else echo "ok preempt_mpi_sigterm_resume (2 ranks: final model and losses equal the uninterrupted 2-rank run's)"; fi

# SIGTERM to mpirun: Open MPI 4 sends the ranks SIGCONT at once, SIGTERM after
# odls_base_sigkill_timeout seconds and SIGKILL after as many again; with 3 s the ranks
# stop after their step and save. mpirun itself exits 1 after a signal, whatever the ranks do.
out="$tmp/mrun"
# A one-layer model of 16 channels, steps of well under a millisecond: mpirun gives the
# ranks a pseudo-terminal, and a signalled mpirun stops reading it; when rank 0 redrew its
# step line every step it filled it and blocked there, missing the stop, which this run
# caught every time (the redraws are now at most 10 a second: LOG_REDRAW_SECONDS). Lines
# that are not redraws fill it as well at thousands of steps a second, so none come: no
# checkpoints but the stop's (-n 0; -n 100's "saved" lines failed CI), and rows of 4 x 32
# positions, which always hold targets (with 1 x 16 the skipped steps' lines did).
mrun_flags="${flags/-x $steps/-x 100000}"
mrun_flags="${mrun_flags/-n 100/-n 0}"
OMPI_MCA_odls_base_sigkill_timeout=3 $mpi -np 2 $mpi_trainer ${mrun_flags/-e d2c64h2t32/-e d1c16h1t32} -o "$out" > "$tmp/mrun.log" 2>&1 &
bg=$!
wait_steps "$out/metrics.jsonl" 5
kill -TERM "$(mpirun_pid "$bg")"
wait "$bg"; rc=$?; bg=""
# mpirun, shutting down, may drop the ranks' last output lines: the stop is read from
# the metrics line rank 0 appends before it exits.
n=$(grep -o '"step": *[0-9]*, *"stopped": *"SIGTERM"' "$out/metrics.jsonl" | grep -o '[0-9]\+' | head -1)
why=$(check_checkpoints "$out")
if [ -z "$n" ]; then echo "FAIL preempt_mpi_sigterm_mpirun: no stop in metrics.jsonl (mpirun exited $rc): $(tail -c 300 "$out/metrics.jsonl" | tr '\n' ' ')"
elif [ "$(cat "$out/latest")" != "$(printf 'step_%08d' "$n")" ] || [ -n "$why" ]; then echo "FAIL preempt_mpi_sigterm_mpirun: stopped at $n but latest is $(cat "$out/latest") $why"
else echo "ok preempt_mpi_sigterm_mpirun (stopped at step $n with its checkpoint; mpirun exited $rc)"; fi

# kill -9 of rank 1 (checkpoints every step, so rank 0 is often writing one): mpirun
# ends the job and exits non-zero within the bound, no rank is left running, and
# `latest` names a checkpoint one process resumes from (-d 256: the 2-rank default B*T*W).
out="$tmp/mkill"
$mpi -np 2 $mpi_trainer ${flags/-n 100/-n 1} -o "$out" > "$tmp/mkill.log" 2>&1 &
bg=$!
wait_steps "$out/metrics.jsonl" 20
p0=$(rank_pid "$bg" 0)
t0=$(date +%s%N)
kill -9 "$(wait_rank_pid "$bg" 1)"
wait "$bg"; rc=$?; bg=""
for ((i = 0; i < 6000; i++)); do  # rank 0 gone (or a zombie waiting for init), 60 s at most
    [ -n "$p0" ] && [ -e /proc/$p0 ] && [ "$(awk '{print $3}' /proc/$p0/stat 2>/dev/null)" != Z ] || break
    sleep 0.01
done
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
why=$(check_checkpoints "$out")
if [ "$rc" -eq 0 ]; then echo "FAIL preempt_mpi_rank_killed: mpirun exited 0"
elif [ "$ms" -gt 60000 ]; then echo "FAIL preempt_mpi_rank_killed: mpirun took $ms ms to end, more than 60 s"
elif [ -z "$p0" ]; then echo "FAIL preempt_mpi_rank_killed: rank 0's pid not found"
elif [ -e /proc/$p0 ] && [ "$(awk '{print $3}' /proc/$p0/stat 2>/dev/null)" != Z ]; then echo "FAIL preempt_mpi_rank_killed: rank 0 (pid $p0) still runs"; kill -9 "$p0"
elif [ -n "$why" ]; then echo "FAIL preempt_mpi_rank_killed: $why"
elif ! n=$(cat "$out/latest" | grep -o '[1-9][0-9]*$') || ! $trainer ${flags/-x $steps/-x $((n + 1))} -d 256 -o "$out" -y 1 > "$tmp/mkill_resume.log" 2>&1; then
    echo "FAIL preempt_mpi_rank_killed: one process could not resume from $(cat "$out/latest"): $(tail -1 "$tmp/mkill_resume.log")"
elif ! grep -q "exited on signal 9" "$tmp/mkill.log"; then echo "FAIL preempt_mpi_rank_killed: no message naming the killed rank: $(tail -2 "$tmp/mkill.log" | tr '\n' ' ')"
else echo "ok preempt_mpi_rank_killed (mpirun exited $rc and rank 0 was gone $ms ms after the kill; mpirun named the killed rank; latest names a complete checkpoint, resumed by one process)"; fi

# ---- bad configurations: one line and exit 1 on every rank ----
# Each rank runs under a shell that records its exit status and stderr, so that
# mpirun does not end one rank because another ended first.
# bad NAME EXPECTED_TEXT MPIRUN_ARGS...: "{}" in the arguments stands for the rank's files.
bad() {
    local name=$1 want=$2 r rc lines msg
    shift 2
    rm -f "$tmp"/bad.*
    $mpi "$@" > "$tmp/bad.mpirun" 2>&1
    for r in 0 1; do
        rc=$(cat "$tmp/bad.rc.$r" 2>/dev/null)
        lines=$(wc -l < "$tmp/bad.err.$r" 2>/dev/null)
        msg=$(head -1 "$tmp/bad.err.$r" 2>/dev/null)
        if [ "$rc" != 1 ]; then echo "FAIL preempt_bad_$name: rank $r exited '$rc', expected 1: $msg $(tail -1 "$tmp/bad.mpirun")"; return; fi
        if [ "$lines" != 1 ]; then echo "FAIL preempt_bad_$name: rank $r printed $lines lines on stderr: $(head -3 "$tmp/bad.err.$r" | tr '\n' '|')"; return; fi
        case $msg in *"$want"*) ;; *) echo "FAIL preempt_bad_$name: rank $r said '$msg', expected it to mention '$want'"; return ;; esac
    done
    echo "ok preempt_bad_$name (both ranks: exit 1, one line: $msg)"
}
rank_sh='"$@" > /dev/null 2> '"$tmp"'/bad.err.$OMPI_COMM_WORLD_RANK; echo $? > '"$tmp"'/bad.rc.$OMPI_COMM_WORLD_RANK'
small="-i dev/ref/tiny_train.bin -e d2c64h2t32 -b 2 -t 16 -x 3"
bad d_not_multiple "not a multiple of B*T*W" -np 2 sh -c "$rank_sh" _ $mpi_trainer $small -d 96 -o "$tmp/bad_out"
bad world_above_rows "fewer than the 2 ranks" -np 2 sh -c "$rank_sh" _ $mpi_trainer $small -d 32 -o "$tmp/bad_out"
bad flags_differ "the ranks disagree" -np 1 sh -c "$rank_sh" _ $mpi_trainer $small -l 1e-3 -o "$tmp/bad_out" : \
    -np 1 sh -c "$rank_sh" _ $mpi_trainer $small -l 2e-3 -o "$tmp/bad_out"
bad data_differs "the ranks disagree" -np 1 sh -c "$rank_sh" _ $mpi_trainer $small -o "$tmp/bad_out" : \
    -np 1 sh -c "$rank_sh" _ $mpi_trainer ${small/tiny_train/tiny_val} -o "$tmp/bad_out"
[ -e "$tmp/bad_out/metrics.jsonl" ] && echo "FAIL preempt_bad_nothing_written: a refused run wrote $tmp/bad_out/metrics.jsonl"

# torchrun's environment for the CPU trainer: the MPI build needs mpirun, the plain build MPI
env RANK=0 WORLD_SIZE=2 $mpi_trainer $small -o "$tmp/bad_out" > /dev/null 2> "$tmp/bad.env"; rc=$?
if [ "$rc" -eq 1 ] && [ "$(wc -l < "$tmp/bad.env")" -eq 1 ] && grep -q "start them with mpirun" "$tmp/bad.env"; then echo "ok preempt_bad_torchrun_env_mpi_build ($(cat "$tmp/bad.env"))"
else echo "FAIL preempt_bad_torchrun_env_mpi_build: exit $rc: $(head -2 "$tmp/bad.env" | tr '\n' '|')"; fi
env RANK=1 WORLD_SIZE=2 $trainer $small -o "$tmp/bad_out" > /dev/null 2> "$tmp/bad.env"; rc=$?
if [ "$rc" -eq 1 ] && [ "$(wc -l < "$tmp/bad.env")" -eq 1 ] && grep -q "built without MPI" "$tmp/bad.env"; then echo "ok preempt_bad_torchrun_env_plain_build ($(cat "$tmp/bad.env"))"
else echo "FAIL preempt_bad_torchrun_env_plain_build: exit $rc: $(head -2 "$tmp/bad.env" | tr '\n' '|')"; fi
