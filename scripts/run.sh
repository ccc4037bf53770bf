#!/usr/bin/env bash
# Sets up a virtualenv with trajview and runs the main job: PPO on Stateless
# CartPole (CartPole-v1 without the velocities) with a 16-frame-stack model fed
# only by trajectory views, until the mean return of the last 100 episodes
# reaches 150 (or 200,000 env steps). Progress bar on the terminal; metrics
# CSV, learning-curve PNG and checkpoint in runs/framestack-seed0/.
# Extra arguments go to `trajview train` (e.g. --model lstm, --seed 1, --resume).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TRAJVIEW_VENV:-$PWD/.venv}
[ -x "$VENV/bin/python" ] || "${PYTHON:-python3}" -m venv "$VENV"
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install -q torch==2.13.0   # torch first: the CPU build on disk
python -m pip install -q .
trajview train "$@"
