"""The training loop's env steps per second, as `trajview train` runs it: one setting of `learner_profile.py`
(``make_trainer``: `trajview train`'s trainer and config, the env without a timer), one untimed warm-up
iteration, then ``--iterations`` of `trajview.train.loop.run_loop` (checkpoints included), timed as a whole.

``--no-checkpoints`` leaves the checkpoints out (the trainer's ``save_checkpoint`` does nothing): what they cost.
``--checkpoint-interval S`` sets PPO's interval (0: a checkpoint after every iteration, as before 2026-11-29).
Run it twice with two trees (``PYTHONPATH=<tree>/python``), alternating, to compare two commits:

    python bench/loop_speed.py --setting framestack-zoo --iterations 200 --reps 3
    python bench/loop_speed.py --setting framestack-zoo --iterations 200 --reps 3 --checkpoint-interval 0
    python bench/loop_speed.py --setting dqn --iterations 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import learner_profile  # noqa: E402


def one_run(setting: str, iterations: int, seed: int = 0, checkpoints: bool = True,
            interval: float | None = None) -> dict[str, Any]:
    from trajview.train.loop import run_loop

    with tempfile.TemporaryDirectory(prefix="tv-loop-speed-") as out:
        trainer = learner_profile.make_trainer(setting, out, seed, env=learner_profile.STATELESS_CARTPOLE_ID)
        try:
            if interval is not None:
                if not hasattr(trainer.config, "checkpoint_interval_s"):
                    raise SystemExit(f"--checkpoint-interval: {setting} has none (DQN writes after every iteration)")
                trainer.config.checkpoint_interval_s = interval
            trainer.train_iteration()  # warm-up (torch's first calls), not timed
            trainer.config.timesteps = trainer.env_steps * (1 + iterations)
            if not checkpoints:
                trainer.save_checkpoint = lambda background=False, defer=False: None
            steps0 = trainer.env_steps
            t0 = time.perf_counter()
            run_loop(trainer, desc=setting, log_line=str, progress=False, on_iteration=None, close=lambda: None)
            wall = time.perf_counter() - t0
            return {"wall_s": wall, "env_steps": trainer.env_steps - steps0,
                    "steps_per_s": (trainer.env_steps - steps0) / wall}
        finally:
            learner_profile.stop_trainer(trainer)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--setting", choices=learner_profile.SETTINGS, default="framestack-zoo")
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--no-checkpoints", action="store_true")
    p.add_argument("--checkpoint-interval", type=float, default=None)
    a = p.parse_args(argv)
    runs = []
    for rep in range(a.reps):
        r = one_run(a.setting, a.iterations, checkpoints=not a.no_checkpoints, interval=a.checkpoint_interval)
        runs.append(r)
        print(f"{a.setting} rep {rep}: {a.iterations} iterations, {r['env_steps']} env steps in {r['wall_s']:.2f} s: "
              f"{r['steps_per_s']:,.0f} env steps/s", flush=True)
    sps = [r["steps_per_s"] for r in runs]
    print(f"median {statistics.median(sps):,.0f} env steps/s ({min(sps):,.0f}-{max(sps):,.0f}) over {len(sps)} runs")
    return runs


if __name__ == "__main__":
    main()
