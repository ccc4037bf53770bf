#!/usr/bin/env bash
# Sets up a virtualenv with trajview and runs the main job.
# Until the rollout worker lands, the main job is the collector demo:
# CartPole envs, frame-stack views, every batch checked against the env's data.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TRAJVIEW_VENV:-$PWD/.venv}
[ -x "$VENV/bin/python" ] || "${PYTHON:-python3}" -m venv "$VENV"
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install -q torch==2.13.0   # torch first: the CPU build on disk
python -m pip install -q .
python -m trajview.demo "$@"
