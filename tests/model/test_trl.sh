#!/usr/bin/env bash
# tests/model/test_trl.sh: trl trains what we train. dev/check_trl.py runs trl's SFTTrainer
# (the referee environment: dev/requirements-referee.txt, which .ci/run installs; elsewhere
# set SFT_REFEREE_PYTHON to a python with those packages) on the CPU in float32, on tiny
# fresh models saved as Hugging Face directories, and ./prepare + ./train_sft on the same
# rows with SFTConfig's values mapped through docs/training.md's "Coming from trl" table:
# the tokens and trained positions of each example, per-step loss (1e-5 relative), gradient
# norm (1e-4) and learning rate, and the final weights. The cases are in dev/check_trl.py.
# Without the environment every check skips, saying why.
set -u
cd "$(dirname "$0")/../.."
py=${SFT_REFEREE_PYTHON:-$HOME/.cache/sft-train/referee-venv/bin/python}
if ! "$py" -c 'import torch, transformers, trl, datasets' 2>/dev/null; then
    echo "skip trl_trains_what_we_train: no referee environment at $py (pip install -r dev/requirements-referee.txt into a venv and set SFT_REFEREE_PYTHON; .ci/run does)"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" dev/check_trl.py "$tmp" 2>&1 | grep -E '^(ok|FAIL|skip) |Error'
rc=${PIPESTATUS[0]}
echo "test_trl: exit $rc"
[ "$rc" = 0 ]
