#!/usr/bin/env bash
# What a real run prints and writes for the user to see: tiny trainings on the demo
# data (a few seconds), then checks of the HTML report against metrics.jsonl (by
# ./test_report DIR), of a resumed run's report (it includes the steps before the
# resume), of the step lines with -L, by default and on a terminal (run under `script`), of the
# closing summary, of the OpenMP wait setting, and of ./chat's usage line. Prints
# ok/FAIL/skip lines.
# Usage: bash tests/train/test_report.sh        (needs ./train_sft, ./chat, ./test_report)
set -u
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
D=data/demo
fails=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
head -3 $D/eval.jsonl > "$tmp/eval.jsonl"
tiny=(-i $D/train.bin -j $D/val.bin -k $D/tokenizer -E "$tmp/eval.jsonl" -e d1c32h2t64 -b 4 -t 64 -l 3e-3 -v 4 -a 6 -g 6 -S 0)

# a 12-step run with validation, evaluation and checkpoints, stdout to a file, a step line every 4 steps
if ./train_sft "${tiny[@]}" -x 12 -n 6 -L 4 -o "$tmp/run" > "$tmp/run.log" 2>&1; then
    ./test_report "$tmp/run" 12 | sed 's/^\(ok\|FAIL\|skip\) report_of_run/\1 run_report/'
    [ "${PIPESTATUS[0]}" -eq 0 ] || fails=$((fails + 1))
    steps=$(grep -o '^step [0-9]*/12' "$tmp/run.log" | tr '\n' ' ')
    [ "$steps" = "step 4/12 step 8/12 step 12/12 " ] && ok step_lines_every_L_steps || fail step_lines_every_L_steps "got: $steps"
    grep -q $'\r' "$tmp/run.log" && fail no_carriage_returns_in_logs "a log file got terminal redraws" || ok no_carriage_returns_in_logs
    summary=$(grep '^done  |' "$tmp/run.log")
    if grep -q '^done  | 12 steps, 3.07k tokens, in ' <<< "$summary" && grep -q 'train loss [0-9.]* (mean of the last 10 steps), validation loss [0-9.]* (step 12)' <<< "$summary" \
        && grep -q 'exact match [0-9.]*% (step 0) -> [0-9.]*% (step 12) on 3 prompts' <<< "$summary" \
        && grep -q "model $tmp/run/step_00000012 | report $tmp/run/report.html | metrics $tmp/run/metrics.jsonl" <<< "$summary"; then
        ok end_summary
    else
        fail end_summary "unexpected summary: $summary"
    fi
    # the summary's numbers are metrics.jsonl's: the mean of the last 10 losses, the last validation
    want=$(grep '"loss"' "$tmp/run/metrics.jsonl" | tail -10 | sed 's/.*"loss": \([^,]*\),.*/\1/' | awk '{s += $1} END {printf "%.4f", s / NR}')
    grep -q "train loss $want " <<< "$summary" && ok end_summary_loss_is_mean_of_last_10 || fail end_summary_loss_is_mean_of_last_10 "expected $want in: $summary"
else
    fail run_tiny_training "$(tail -3 "$tmp/run.log")"
fi

# OpenMP threads wait passively unless the environment says otherwise (the line says which)
if [ -z "${OMP_WAIT_POLICY:-}${GOMP_SPINCOUNT:-}" ]; then
    grep -q '^memory| .* threads, OMP_WAIT_POLICY=passive$' "$tmp/run.log" && ok openmp_waits_passively_by_default \
        || fail openmp_waits_passively_by_default "$(grep '^memory' "$tmp/run.log")"
    GOMP_SPINCOUNT=1000 ./train_sft "${tiny[@]}" -x 1 -o "$tmp/spin" 2>&1 | grep -q '^memory| .* threads, GOMP_SPINCOUNT=1000$' \
        && ok openmp_wait_setting_of_user_kept || fail openmp_wait_setting_of_user_kept "GOMP_SPINCOUNT=1000 not reported"
else
    echo "skip openmp_waits_passively_by_default: OMP_WAIT_POLICY or GOMP_SPINCOUNT is set here"
fi

# a resumed run: its report draws the steps before the resume too
if ./train_sft "${tiny[@]}" -x 6 -n 3 -o "$tmp/res" > "$tmp/res1.log" 2>&1 && ./train_sft "${tiny[@]}" -x 10 -y 1 -o "$tmp/res" > "$tmp/res2.log" 2>&1; then
    ./test_report "$tmp/res" 10 | sed 's/^\(ok\|FAIL\|skip\) report_of_run/\1 resumed_report/'
    [ "${PIPESTATUS[0]}" -eq 0 ] || fails=$((fails + 1))
    grep -q '^done  | 10 steps (4 in this run, resumed at step 6)' "$tmp/res2.log" && ok end_summary_resumed \
        || fail end_summary_resumed "$(grep '^done' "$tmp/res2.log" | head -1)"
else
    fail run_resumed_training "$(tail -3 "$tmp/res2.log")"
fi

# on a terminal: one line redrawn in place (carriage return, erase to end of line),
# and validation/evaluation/checkpoint lines of their own, each after the newest step's
# line; redrawn at most every 0.1 s (LOG_REDRAW_SECONDS), so with millisecond steps
# only the first step, the steps before an event and the last are sure to be drawn
if script -qec "true" /dev/null > /dev/null 2>&1; then
    script -qec "stty cols 200; ./train_sft ${tiny[*]} -x 8 -n 3 -o $tmp/tty" /dev/null > "$tmp/tty.log" 2>&1
    flat=$(cat -v "$tmp/tty.log" | tr '\n' '|')  # ^M carriage return, ^[[K erase to end of line, | newline
    drawn=$(grep -oE '\^Mstep [0-9]+/8 ' <<< "$flat" | grep -oE '[0-9]+/' | tr -d / | tr '\n' ' ')
    missing=""
    for s in 1 3 4 6 8; do [[ " $drawn" == *" $s "* ]] || missing+=" $s"; done
    if [ -z "$missing" ] && grep -qE 'step 4/8 [^^]*ETA [0-9]+s\^\[\[K\^M\|val   \| step 4 \|' <<< "$flat" \
        && grep -qE "step 3/8 [^^]*\^\[\[K\^M\|saved \| checkpoint $tmp/tty/step_00000003\^M\|" <<< "$flat" && ! grep -q '^step' "$tmp/tty.log"; then
        ok terminal_progress_redrawn_in_place
    else
        fail terminal_progress_redrawn_in_place "steps drawn: $drawn(missing:$missing); output: $(head -c 1200 <<< "$flat")"
    fi
    # 400 steps of a few ms each: a few redraws a tenth of a second, not one a step
    script -qec "stty cols 200; ./train_sft ${tiny[*]} -x 400 -v 1000 -a 0 -n 0 -o $tmp/tty400" /dev/null > "$tmp/tty400.log" 2>&1
    redraws=$(cat -v "$tmp/tty400.log" | grep -oE '\^Mstep [0-9]+/400 ' | wc -l)
    if [ "$redraws" -ge 2 ] && [ "$redraws" -lt 200 ] && cat -v "$tmp/tty400.log" | grep -q '\^Mstep 400/400 '; then
        ok "terminal_progress_redraws_throttled ($redraws redraws for 400 steps)"
    else
        fail terminal_progress_redraws_throttled "$redraws redraws for 400 steps (expected fewer than 200, the last one drawn)"
    fi
else
    echo "skip terminal_progress_redrawn_in_place: script(1) cannot run a command on a pseudo-terminal here"
fi

# The default (-L 0) to a file: a step line for the first 10 steps, every ceil(steps/100)-th
# step, the last, and a step that ends 30 s or more after the last line. A 250-step run:
# steps 1-10, every 3rd, 250, and 151 (SFT_TEST_POISON=clock:151 moves the step-line clock
# 30 s ahead as step 151 begins); metrics.jsonl has every step. Expected lists from awk.
auto=(-i $D/train.bin -e d1c32h2t64 -b 1 -t 32 -S 0)
want=$(awk 'BEGIN { for (s = 1; s <= 250; s++) if (s <= 10 || s % 3 == 0 || s == 151 || s == 250) printf "%d ", s }')
if SFT_TEST_POISON=clock:151 ./train_sft "${auto[@]}" -x 250 -n -1 -o "$tmp/auto" > "$tmp/auto.log" 2>&1; then
    got=$(sed -n 's|^step \([0-9]*\)/250 .*|\1|p' "$tmp/auto.log" | tr '\n' ' ')
    [ "$got" = "$want" ] && ok step_lines_default_cadence "$(wc -w <<< "$got") lines for 250 steps" || fail step_lines_default_cadence "got: $got"
    n=$(grep -c '"loss": ' "$tmp/auto/metrics.jsonl")
    [ "$n" -eq 250 ] && ok metrics_every_step_with_default_cadence || fail metrics_every_step_with_default_cadence "$n step records, expected 250"
else
    fail step_lines_default_cadence "the run failed: $(tail -1 "$tmp/auto.log")"
fi
# resumed at step 105 (stopped by SIGTERM there): this run's first 10 steps, then every 2nd
# (1% of 200), and 200
want=$(awk 'BEGIN { for (s = 106; s <= 200; s++) if (s <= 115 || s % 2 == 0) printf "%d ", s }')
SFT_TEST_POISON=term:105 ./train_sft "${auto[@]}" -x 200 -o "$tmp/auto2" > /dev/null 2>&1
if ./train_sft "${auto[@]}" -x 200 -y 1 -o "$tmp/auto2" > "$tmp/auto2.log" 2>&1; then
    got=$(sed -n 's|^step \([0-9]*\)/200 .*|\1|p' "$tmp/auto2.log" | tr '\n' ' ')
    [ "$got" = "$want" ] && ok step_lines_default_cadence_resumed || fail step_lines_default_cadence_resumed "got: $got"
else
    fail step_lines_default_cadence_resumed "the resumed run failed: $(tail -1 "$tmp/auto2.log")"
fi

# -L -1 is bad input: one line, status 1, nothing written
out=$(./train_sft -i $D/train.bin -L -1 -o "$tmp/bad" 2>&1); rc=$?
if [ "$rc" -eq 1 ] && [ "$(wc -l <<< "$out")" -eq 1 ] && grep -q -- '-L must be >= 0' <<< "$out" && [ ! -e "$tmp/bad" ]; then
    ok bad_input_L_negative
else
    fail bad_input_L_negative "status $rc: $out"
fi

# ./chat's usage line names the flags it takes
usage=$(./chat -h 2>&1 | head -1)
if grep -q -- '-e MODEL_DIR \[-k TOKENIZER\]' <<< "$usage" && ! grep -q -- '-i ' <<< "$usage"; then ok chat_usage_line; else fail chat_usage_line "$usage"; fi
[ "$fails" -eq 0 ]
