"""``trajview train`` on many workers (issue 16): the whole PPO loop, sampling throughput, learning equivalence.

Three measurements, side by side in one run (tables printed as markdown):

* **(a) the PPO loop**: `trajview.train.PPOTrainer` with the main job's settings
  (PPO, the frame-stack model, Stateless CartPole, 20 envs per worker, train
  batch 2000, 5 SGD epochs of minibatches of 250, fused Adam, 1 torch thread: its preset), no stop
  reward, ``--loop-steps`` env steps (default 30,000) for 1 worker (the
  default: local backend), 2 workers (process backend), 2 workers with
  ``--async`` and 1 worker with ``--async`` (a worker process sampling
  while the learner trains: RLlib's AsyncSampler). Env steps per second of the whole training loop (sampling,
  SGD, weight syncs) over every iteration after the first (which holds
  torch's warm-up), and per iteration the learner's idle time (the seconds
  it waited for its batch), its SGD time and the workers' own sampling rate;
  and the CPU time of the trainer's and its workers' processes per 1,000 env
  steps after the first iteration (it hardly depends on what else runs on
  the machine; the wall-clock figures do). With ``--env-step-us US`` each
  env step costs US microseconds more, in a busy loop on the CPU (as a
  simulator's step would; ``--env-step-kind busy``, the default) or asleep
  (``sleep``: as an env waiting for a simulator elsewhere, its core free):
  the same loops where sampling, not SGD, takes most of an iteration.
* **(b) sampling throughput**: an env whose step costs ``--step-us``
  microseconds (default 200), obs float32[4], 50-step episodes, 8 envs per
  worker, fragment 100, a constant policy. ``--env-kind busy`` (the
  default) spends the 200 us in a busy loop on the CPU, as a simulator
  would; ``sleep`` sleeps them (no CPU: shows what the framework costs when
  cores are not the limit). 1, 2 and 4 workers, process and Ray backends,
  against one `RolloutWorker` in this process; ``--rounds`` ``sample()``
  calls after one warm-up. Per worker: env steps per second of wall-clock
  (all workers' steps / wall-clock / workers) and the ratio to the
  in-process worker's. Workers beyond the cores share them: with ``busy``
  the per-worker figure then falls with the cores (the machine's limit,
  not the framework's).
* **(c) learning equivalence**: the (a) run to mean return 150 (the last 100
  episodes), up to 200,000 env steps, seeds ``--seeds`` (default 0 1 2), on
  each loop of (a) with the same 20 envs in all (10 per worker for two
  workers: batches of one layout, 100-step fragments): env steps and seconds
  to 150 per seed, and whether every other loop's runs are within the
  1-worker runs' spread (min..max).

    python bench/train_parallel.py                 # all three (~10 minutes on 2 cores)
    python bench/train_parallel.py --quick         # a smoke of each (~1-2 minutes)
    python bench/train_parallel.py --only b        # one part (a, b or c; repeatable)

Ray rows are left out (with a line saying so) where Ray is not installed.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import gymnasium as gym
import numpy as np

import trajview as tv

# -- (a) and (c): the PPO training loop ----------------------------------------------------------------


#: (label, TrainConfig settings) of the loops compared.
LOOPS: list[tuple[str, dict[str, Any]]] = [
    ("1 worker (local)", {"workers": 1}),
    ("2 workers (process)", {"workers": 2, "backend": "process"}),
    ("2 workers (process, --async)", {"workers": 2, "backend": "process", "async_sampling": True}),
    # RLlib's AsyncSampler for one worker: it samples in the background while the learner trains.
    ("1 worker (process, --async)", {"workers": 1, "backend": "process", "async_sampling": True}),
]


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds so far of the processes ``pids`` (from /proc; nan where it cannot be read)."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return math.nan
        total += (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime
    return total


def train_run(settings: dict[str, Any], timesteps: int, seed: int = 0, stop_reward: float | None = None,
              **overrides: Any) -> list[dict]:
    """One `PPOTrainer` run in a temporary directory; its metrics rows, each with ``cpu_s``: the CPU seconds so far
    of the trainer's process and its workers' processes (or Ray actors') since the run started."""
    from trajview.train import TrainConfig, PPOTrainer

    with tempfile.TemporaryDirectory(prefix="tv-bench-train-") as out:
        # The settings `trajview train` runs with: the model's preset (the frame stack's: fused Adam) under these.
        cfg = TrainConfig.with_model_presets(seed=seed, timesteps=timesteps, stop_reward=stop_reward, out_dir=out,
                                             **{**settings, **overrides})
        trainer = PPOTrainer(cfg)
        ws = getattr(trainer.rollouts, "workers", None)
        pids = [os.getpid()] + ([p for p in ws.worker_pids() if p is not None] if isinstance(ws, tv.WorkerSet) else [])
        c0 = cpu_seconds(pids)
        rows: list[dict] = []

        def note(row: dict) -> None:
            row["cpu_s"] = cpu_seconds(pids) - c0
            rows.append(row)

        trainer.train(progress=False, on_iteration=note)
    return rows


def loop_figures(rows: list[dict]) -> dict[str, float]:
    """Env steps per second over the iterations after the first, and per-iteration means of the rest."""
    if len(rows) < 2:
        raise ValueError("need at least 2 iterations (raise the env steps)")
    first, last, rest = rows[0], rows[-1], rows[1:]
    return {
        "steps_per_s": (last["env_steps"] - first["env_steps"]) / (last["time_s"] - first["time_s"]),
        "idle_s": statistics.mean(r["learner_idle_s"] for r in rest),
        "learn_s": statistics.mean(r["learn_s"] for r in rest),
        "iter_s": (last["time_s"] - first["time_s"]) / len(rest),
        "worker_sps": statistics.mean(r["worker_steps_per_s"] for r in rest),
        "staleness": statistics.mean(r["staleness_mean"] for r in rest),
        "sync_kb": statistics.mean(r["weights_sync_bytes"] for r in rest) / 1024,
        "cpu_ms_per_1k": 1e6 * (last["cpu_s"] - first["cpu_s"]) / (last["env_steps"] - first["env_steps"]),
    }


def load() -> str:
    """The machine's load averages (1, 5, 15 min): above the core count, the figures are shared with others."""
    try:
        return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "load average unknown"


def spend(kind: str, seconds: float) -> None:
    """An env step's cost: ``seconds`` asleep (``kind="sleep"``: the core free) or in a busy loop on the CPU."""
    if kind == "sleep":
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


#: The gymnasium id of Stateless CartPole whose step costs ``env_step_us`` more (part (a) with ``--env-step-us``).
COSTLY_ENV_ID = "trajview-bench/CostlyStatelessCartPole-v1"


class CostlyStep(gym.Wrapper):
    """Each ``step`` of the wrapped env also spends ``step_us`` microseconds: in a busy loop on the CPU
    (``kind="busy"``, as a simulator computing its step) or asleep (``"sleep"``, as an env waiting for a simulator
    in another process or on another machine: the core is free meanwhile)."""

    def __init__(self, env: gym.Env, step_us: float, kind: str) -> None:
        super().__init__(env)
        self.step_s, self.kind = step_us * 1e-6, kind

    def step(self, action):
        spend(self.kind, self.step_s)
        return self.env.step(action)


def make_costly_stateless_cartpole(step_us: float, kind: str) -> gym.Env:
    return CostlyStep(gym.make("trajview/StatelessCartPole-v1"), step_us, kind)


def part_a(timesteps: int, env_step_us: float = 0.0, env_step_kind: str = "busy",
           **overrides: Any) -> list[dict[str, Any]]:
    env = "Stateless CartPole"
    if env_step_us > 0:
        # Registered here, before the workers start: the process backend's workers are forked and inherit it.
        gym.register(COSTLY_ENV_ID, entry_point=make_costly_stateless_cartpole,
                     kwargs={"step_us": env_step_us, "kind": env_step_kind})
        overrides = {**overrides, "env": COSTLY_ENV_ID}
        how = "a busy loop" if env_step_kind == "busy" else "asleep"
        env = f"Stateless CartPole with {env_step_us:g} us more per step ({how})"
    print(f"\n### (a) PPO loop: frame-stack model on {env}, {timesteps:,} env steps each ({load()})\n")
    out = []
    for label, settings in LOOPS:
        f = loop_figures(train_run(settings, timesteps, **overrides))
        out.append({"label": label, **f})
    base = out[0]["steps_per_s"]
    sync2 = out[1]["steps_per_s"]
    print("| loop | env steps/s | vs 1 worker | vs 2 sync | learner idle s/iter | SGD s/iter | s/iter | "
          "worker sampling steps/s | staleness | weights sent KiB/iter | CPU ms per 1k env steps |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in out:
        print(f"| {r['label']} | {r['steps_per_s']:,.0f} | {r['steps_per_s'] / base:.2f}x | "
              f"{r['steps_per_s'] / sync2:.2f}x | {r['idle_s']:.3f} | {r['learn_s']:.3f} | {r['iter_s']:.3f} | "
              f"{r['worker_sps']:,.0f} | {r['staleness']:.2f} | {r['sync_kb']:.0f} | {r['cpu_ms_per_1k']:.0f} |")
    print(f"\n({load()} at the end)")
    print(f"goals: 2 workers >= 1.6x 1 worker: {out[1]['steps_per_s'] / base:.2f}x; "
          f"--async >= 1.3x 2 sync: {out[2]['steps_per_s'] / sync2:.2f}x")
    # Amdahl: a synchronous loop samples (the 1-worker loop's wait for its batch), then trains; only the sampling
    # divides over the workers.
    sample1, sgd1 = out[0]["idle_s"], out[0]["learn_s"]
    print(f"a synchronous loop's bound from the 1-worker loop's parts (sampling {sample1:.3f} s, SGD {sgd1:.3f} s "
          f"per iteration): 2 workers at most {(sample1 + sgd1) / (sample1 / 2 + sgd1):.2f}x, any number "
          f"{(sample1 + sgd1) / sgd1:.2f}x")
    # The two goals multiply: 2 async workers at >= 1.6 * 1.3 = 2.08x one worker. Where sampling and SGD are CPU
    # work (a busy env), the async loop does the 1-worker loop's work (and some more: batches and weights sent) on
    # at most min(cores, 3) cores at a time (2 workers and the learner), so it cannot pass that many times one
    # worker; a sleeping env leaves its core free, and can.
    cores = os.cpu_count() or 1
    print(f"both goals at once ask 2 async workers for >= {1.6 * 1.3:.2f}x one worker: measured "
          f"{out[2]['steps_per_s'] / base:.2f}x; with sampling and SGD on the CPU, {cores} cores allow at most "
          f"{min(cores, 3)}x")
    return out


def part_c(seeds: list[int], target: float, max_steps: int) -> list[dict[str, Any]]:
    print(f"\n### (c) learning equivalence: env steps to mean return {target:g} (up to {max_steps:,}; {load()})\n")
    out = []
    for label, settings in LOOPS:
        # The same 20 envs in all, whatever the workers (the preset's 20 for one worker, 10 each for two): every
        # loop trains on batches of the same layout (2,000 env steps, 100-step fragments), so the loops differ only
        # in where they sample and in staleness.
        same_envs = {"envs_per_worker": 20 // settings["workers"]}
        for seed in seeds:
            rows = train_run(settings, max_steps, seed=seed, stop_reward=target, **same_envs)
            hit = next((r for r in rows if r["episode_return_mean"] >= target), None)
            out.append({"label": label, "seed": seed, "steps": hit["env_steps"] if hit else None,
                        "time_s": hit["time_s"] if hit else None})
            print(f"  {label} seed {seed}: {out[-1]['steps'] or 'not reached'}", file=sys.stderr)
    print("| loop | " + " | ".join(f"seed {s}" for s in seeds) + " | mean env steps | mean s |")
    print("|---|" + "---|" * len(seeds) + "---|---|")
    spread: tuple[int, int] | None = None
    verdicts = []
    for k, (label, _) in enumerate(LOOPS):
        mine = [r for r in out if r["label"] == label]
        steps = [r["steps"] for r in mine]
        cells = [f"{s:,} ({r['time_s']:.0f} s)" if s else "not reached" for s, r in zip(steps, mine)]
        got = [s for s in steps if s]
        mean = f"{statistics.mean(got):,.0f}" if got else "–"
        mean_s = f"{statistics.mean(r['time_s'] for r in mine if r['time_s']):.1f}" if got else "–"
        print(f"| {label} | " + " | ".join(cells) + f" | {mean} | {mean_s} |")
        if k == 0:
            spread = (min(got), max(got)) if len(got) == len(steps) else None
        elif spread is not None:
            inside = len(got) == len(steps) and all(spread[0] <= s <= spread[1] for s in got)
            verdicts.append(f"{label}: {'within' if inside else 'NOT within'} the 1-worker spread "
                            f"{spread[0]:,}..{spread[1]:,}")
    print()
    for v in verdicts:
        print(v)
    # Per seed, against the 1-worker run of the same seed, in train batches. An async loop trains on
    # batches sampled with the weights before the last update, so even if each update learned as much as a
    # synchronous one, its returns (and its env steps to the target) would trail by one batch.
    from trajview.train import TrainConfig

    batch = TrainConfig.with_model_presets().train_batch_size  # every loop here keeps the preset's
    base = {r["seed"]: r["steps"] for r in out if r["label"] == LOOPS[0][0] and r["steps"]}
    for label, settings in LOOPS[1:]:
        extra = [r["steps"] - base[r["seed"]] for r in out if r["label"] == label and r["steps"] and r["seed"] in base]
        if extra:
            lag = " (its batches' inherent lag: 1)" if settings.get("async_sampling") else ""
            print(f"{label}: env steps beyond the 1-worker run of the same seed: mean {statistics.mean(extra):+,.0f}, "
                  f"{statistics.mean(extra) / batch:+.1f} batches{lag}")
    if spread is None:
        print("a 1-worker run did not reach the target: no spread to compare with")
    return out


# -- (b) sampling throughput ---------------------------------------------------------------------------

STEP_US = 200
EPISODE_LEN = 50
NUM_ENVS = 8
FRAGMENT = 100


class TimedEnv(gym.Env):
    """Each step costs ``step_us`` microseconds: a busy loop on the CPU (``busy``) or a sleep (``sleep``)."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, kind: str, step_us: float) -> None:
        self.kind, self.step_s = kind, step_us * 1e-6
        self._t = 0
        self._obs = np.zeros(4, np.float32)

    def reset(self, *, seed=None, options=None):
        self._t = 0
        return self._obs, {}

    def step(self, action):
        spend(self.kind, self.step_s)
        self._t += 1
        return self._obs, 1.0, self._t >= EPISODE_LEN, False, {}


class ConstantPolicy(tv.Policy):
    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        return np.zeros(len(input_dict["obs"]), np.int64), [], {}


def timed_env_creator(kind: str, step_us: float):
    return lambda cfg: TimedEnv(kind, step_us)


def sampling_rate(backend: str | None, workers: int, kind: str, step_us: float, rounds: int) -> float:
    """Env steps per second per worker: ``rounds`` samples (after one warm-up) of ``workers`` workers,
    all their steps / wall-clock / workers. ``backend`` None: one RolloutWorker in this process."""
    kwargs = dict(num_envs=NUM_ENVS, rollout_fragment_length=FRAGMENT)
    creator = timed_env_creator(kind, step_us)
    if backend is None:
        runner: Any = tv.RolloutWorker(creator, ConstantPolicy, **kwargs)
        sample, stop = runner.sample, runner.stop
    else:
        ws = tv.WorkerSet(creator, ConstantPolicy, num_workers=workers, backend=backend, **kwargs)
        sample, stop = ws.sample, ws.stop
    try:
        sample()  # warm-up: the workers' first sample builds their stores
        t0 = time.perf_counter()
        steps = sum(len(sample()) for _ in range(rounds))
        wall = time.perf_counter() - t0
    finally:
        stop()
    assert steps == rounds * workers * NUM_ENVS * FRAGMENT
    return steps / wall / workers


def part_b(kinds: list[str], workers: list[int], backends: list[str], step_us: float, rounds: int) -> list[dict]:
    print(f"\n### (b) sampling: {step_us:g} us per env step, {NUM_ENVS} envs per worker, fragment {FRAGMENT}, "
          f"{rounds} rounds; {os.cpu_count()} cores; {load()}\n")
    out = []
    ray_started = False
    if "ray" in backends:
        try:
            import ray
        except ImportError:
            print("Ray is not installed: the ray rows are left out (pip install 'trajview[ray]')")
            backends = [b for b in backends if b != "ray"]
        else:
            if not ray.is_initialized():
                ray.init(address="local", include_dashboard=False, log_to_driver=False)
                ray_started = True
    try:
        for kind in kinds:
            base = sampling_rate(None, 1, kind, step_us, rounds)
            out.append({"kind": kind, "backend": "in-process", "workers": 1, "per_worker": base, "ratio": 1.0})
            for backend in backends:
                for n in workers:
                    r = sampling_rate(backend, n, kind, step_us, rounds)
                    out.append({"kind": kind, "backend": backend, "workers": n, "per_worker": r, "ratio": r / base})
    finally:
        if ray_started:
            import ray

            ray.shutdown()
    ideal = 1e6 / step_us
    print(f"| env | backend | workers | env steps/s per worker | vs 1 in-process worker | all workers' steps/s | "
          f"(ideal per worker: {ideal:,.0f}) |")
    print("|---|---|---|---|---|---|---|")
    for r in out:
        print(f"| {r['kind']} | {r['backend']} | {r['workers']} | {r['per_worker']:,.0f} | {r['ratio']:.2f} | "
              f"{r['per_worker'] * r['workers']:,.0f} | |")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a smoke of each part: few steps, 1 seed, target 50")
    p.add_argument("--only", action="append", choices=("a", "b", "c"), help="run only these parts")
    p.add_argument("--loop-steps", type=int, default=30_000, help="(a) env steps per loop")
    p.add_argument("--env-step-us", type=float, default=0.0,
                   help="(a) microseconds more per env step: a costlier env than Stateless CartPole")
    p.add_argument("--env-step-kind", choices=("busy", "sleep"), default="busy",
                   help="(a) how --env-step-us is spent: a busy loop on the CPU, or asleep (the core free)")
    p.add_argument("--step-us", type=float, default=STEP_US, help="(b) microseconds per env step")
    p.add_argument("--env-kind", action="append", choices=("busy", "sleep"), help="(b) default: busy, then sleep")
    p.add_argument("--rounds", type=int, default=6, help="(b) sample() calls timed per row")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="(c) seeds")
    p.add_argument("--target", type=float, default=150.0, help="(c) the mean return to reach")
    p.add_argument("--max-steps", type=int, default=200_000, help="(c) give up after this many env steps")
    args = p.parse_args(argv)
    parts = args.only or ["a", "b", "c"]
    kinds = args.env_kind or ["busy", "sleep"]
    workers, backends = [1, 2, 4], ["process", "ray"]
    if args.quick:
        args.loop_steps, args.rounds, args.seeds, args.target, args.max_steps = 8_000, 2, [0], 50.0, 40_000
        kinds, workers = kinds[:1], [1, 2]
    import torch

    print(f"# trajview train on many workers ({os.cpu_count()} cores, torch {torch.__version__}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")
    if "a" in parts:
        part_a(args.loop_steps, args.env_step_us, args.env_step_kind)
    if "b" in parts:
        part_b(kinds, workers, backends, args.step_us, args.rounds)
    if "c" in parts:
        part_c(args.seeds, args.target, args.max_steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
