#!/usr/bin/env bash
# Sets up a virtualenv with trajview and runs the main job: PPO on Stateless
# CartPole (CartPole-v1 without the velocities) with a 16-frame-stack model fed
# only by trajectory views, until the mean return of the last 100 episodes
# reaches 150 (or 200,000 env steps); then the control, a plain MLP on the same
# observations, for 200,000 env steps; then a table of both. Progress bars on
# the terminal; metrics CSV, learning-curve PNG and checkpoint in
# runs/framestack-seed0/ and runs/mlp-seed0/.
# With arguments, runs `trajview train ARGS` instead (e.g. --model lstm --seed 1).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TRAJVIEW_VENV:-$PWD/.venv}
[ -x "$VENV/bin/python" ] || "${PYTHON:-python3}" -m venv "$VENV"
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install -q torch==2.13.0   # torch first: the CPU build on disk
python -m pip install -q '.[train]'   # the train extra: tqdm, matplotlib (torch is there)
if [ $# -gt 0 ]; then
  exec trajview train "$@"
fi
# trajview train refuses a new run in a folder that holds one: an earlier main job's runs are kept, renamed.
for d in runs/framestack-seed0 runs/mlp-seed0; do
  if [ -e "$d" ]; then
    kept="$d.$(date +%Y%m%d-%H%M%S)"
    mv "$d" "$kept" && echo "an earlier run was in $d: kept as $kept"
  fi
done
trajview train --model framestack --seed 0 --out runs/framestack-seed0
trajview train --model mlp --seed 0 --out runs/mlp-seed0
trajview report runs/framestack-seed0 runs/mlp-seed0
