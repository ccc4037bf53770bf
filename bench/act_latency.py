"""Per-call latency of acting outside a worker (issue 26): the view bookkeeping on top of the model.

For the frame-stack and the LSTM PPO models (their default sizes, CartPole's spaces, one torch thread),
each call is timed on its own (``time.perf_counter``), in alternating rounds (``--interleave``: the variants in
turn call by call; see `measure`), for:

* ``single``: ``policy.compute_single_action(obs, prev_reward=r, explore=False)``, one implicit episode
  (the views built by a one-episode `PolicyRunner`);
* ``act_many``: ``runner.act_many(obs[64], episodes, rewards=r[64], explore=False)``, 64 episodes at once;

and, side by side in the same run, on inputs built once beforehand (the same rows the runner built):

* ``policy``: ``policy.compute_actions_from_input_dict(prebuilt input dict)`` (numpy in, numpy out: what the
  runner calls after building the views);
* ``model``: the model alone: ``policy.action_sampler(prebuilt tensors, False)`` under ``torch.inference_mode``;
  where the policy's numpy actor computes its actions (``policy.numpy_actor()``: the frame stack's MLPs), that
  actor on the prebuilt arrays (``actor.act_numpy(prebuilt input dict, False)``), its own fastest call, which the
  runner makes too.

It prints the median and the spread (25th-75th percentile) per call in microseconds, and the runner's cost
over each baseline. The goal (issue 26): the runner's median at most 20% over ``model`` in every row (the view
bookkeeping, the conversions and the output checks together at most 20% on top of the torch model on prebuilt
inputs); the ``policy`` column shows how much of that is `compute_actions_from_input_dict`'s. Episodes restart
every 200 steps. Each call's arguments (observation rows, rewards, ``episode_start`` flags) are made before the
timed rounds, so that a timed region holds the call alone, as the model's does.

``--env-step``: before each timed call (of every variant), untimed, the envs step as in an acting loop (one
``trajview/StatelessCartPole-v1`` step for a single call, a 64-env ``SyncVectorEnv`` step for ``act_many``). A
call right after other work runs with colder caches than one in a tight loop: the model alone then takes
longer too, and the comparison is the one a user's loop sees.

    python bench/act_latency.py               # 5 rounds of 400 calls
    python bench/act_latency.py --interleave  # the same, the variants call by call
    python bench/act_latency.py --env-step    # the same, an env step before each call
    python bench/act_latency.py --split       # where the runner's time goes (see `split`)
    python bench/act_latency.py --parts       # the runner's own parts alone, in tight loops (see `parts`)
    python bench/act_latency.py --cold        # single operations right after a model call, and again (see `cold`)
    python bench/act_latency.py --quick       # a smoke run (timings meaningless)
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from typing import Any

import gymnasium as gym
import numpy as np

import trajview as tv

EPISODES = 64
EPISODE_LEN = 200
OBS_SPACE = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT_SPACE = gym.spaces.Discrete(2)
MODELS = ("framestack", "lstm")
#: The goal (issue 26): the runner's median per call at most this factor of the model's on prebuilt inputs.
GOAL = 1.2


def make_policy(model: str) -> Any:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    return tv.PPOPolicy(OBS_SPACE, ACT_SPACE, {"model": model})


class Case:
    """One model, ``n`` rows per call: the runner's call and the two baselines on the runner's own inputs."""

    def __init__(self, model: str, n: int, calls: int, seed: int = 0) -> None:
        import torch

        self.torch = torch
        self.n = n
        self.policy = make_policy(model)
        rng = np.random.default_rng(seed)
        self.obs = rng.uniform(-1, 1, (calls, n, 4)).astype(np.float32)
        self.rewards = rng.uniform(0, 1, (calls, n))
        # Each call's arguments, made beforehand: the timed region holds the call alone (the model's call indexes
        # nothing either). Single calls take a row and a float64 scalar, as an env returns them.
        self.obs_args = [self.obs[i, 0] if n == 1 else self.obs[i] for i in range(calls)]
        self.reward_args = [self.rewards[i, 0] if n == 1 else self.rewards[i] for i in range(calls)]
        self.starts = {flag: np.full(n, flag) for flag in (False, True)}
        self.t = 0
        if n == 1:
            self.runner = None
        else:
            self.runner = tv.PolicyRunner(self.policy, max_episodes=n, explore=False)
            self.keys = list(range(n))
        # The baselines' inputs: what the runner built for a call in mid-episode (captured once).
        inner = self.policy.compute_actions_from_input_dict
        captured: list = []

        def capture(d: Any, **kw: Any) -> Any:
            captured.append(d)
            return inner(d, **kw)

        self.policy.compute_actions_from_input_dict = capture
        for _ in range(5):
            self.act(0)
        del self.policy.compute_actions_from_input_dict
        self.inputs = captured[-1]
        self.tensors = self.policy._to_torch(self.inputs)
        self.arrays = {k: np.asarray(v) for k, v in self.inputs.items()}
        self.actor = self.policy.numpy_actor()
        self.t = 0

    def act(self, i: int) -> Any:
        """The runner's call (the implicit episode of compute_single_action for one row)."""
        start = self.t % EPISODE_LEN == 0
        self.t += 1
        if self.runner is None:
            reward = None if start else self.reward_args[i]
            return self.policy.compute_single_action(self.obs_args[i], prev_reward=reward, explore=False,
                                                     episode_start=start)[0]
        return self.runner.act_many(self.obs_args[i], self.keys, rewards=self.reward_args[i], explore=False,
                                    episode_start=self.starts[start])

    def policy_call(self, i: int) -> Any:
        return self.policy.compute_actions_from_input_dict(self.inputs, explore=False)[0]

    def model_call(self, i: int) -> Any:
        if self.actor is not None:
            return self.actor.act_numpy(self.arrays, False)[0]
        with self.torch.inference_mode():
            return self.policy.action_sampler(self.tensors, False)[0]

    def step_data(self, runner: Any) -> dict[str, np.ndarray]:
        """What ``runner``'s store steps with at its next call of the same episodes (its last outputs, the first
        call's observations and rewards, no ends): for timing the step alone."""
        ends = self.starts[False]
        return {**runner._last_data, "obs": self.obs[0], "rewards": self.rewards[0], "terminateds": ends,
                "truncateds": ends}


def env_stepper(n: int) -> Any:
    """A function that steps ``n`` StatelessCartPole envs once (resetting those that ended): the work an acting
    loop does between two calls (`--env-step`)."""
    if n == 1:
        env = gym.make("trajview/StatelessCartPole-v1")
        env.reset(seed=0)

        def step() -> None:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()

        return step
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("trajview/StatelessCartPole-v1") for _ in range(n)])
    envs.reset(seed=0)
    return lambda: envs.step(envs.action_space.sample())  # (the vector env resets ended envs itself)


def measure(model: str, n: int, rounds: int = 5, calls: int = 400, env_step: bool = False,
            interleave: bool = False) -> dict[str, list[float]]:
    """Per-call seconds of ``runner`` / ``policy`` / ``model_only`` calls: ``rounds`` of ``calls`` calls each, each
    round ``calls`` calls of one variant, then of the next; with ``interleave``, the three variants in turn call by
    call, the order turned by one at each call (runner, policy, model; policy, model, runner; model, runner,
    policy; ...). With ``env_step``, an untimed step of ``n`` envs before each call.

    Interleaved, each variant's calls are spread over the same stretch of time, so a machine whose speed drifts (a
    shared VM: the model alone took 190 to 340 us a call within minutes) slows all three alike, and the model alone
    runs after another variant's call rather than in a tight loop of its own calls."""
    case = Case(model, n, calls)
    out: dict[str, list[float]] = {"runner": [], "policy": [], "model_only": []}
    fns = {"runner": case.act, "policy": case.policy_call, "model_only": case.model_call}
    between = env_stepper(n) if env_step else None
    clock = time.perf_counter
    names = list(fns)
    # Interleaved, the order turns by one at every call (runner, policy, model; policy, model, runner; ...): each
    # variant follows each other one as often. In a fixed order the model alone always ran right after the policy's
    # call, which for a numpy actor computes the same thing: it found its code warm, the runner never did.
    order = ([(name, i) for i in range(calls) for name in names[i % 3:] + names[:i % 3]] if interleave
             else [(name, i) for name in fns for i in range(calls)])
    for _ in range(rounds):
        for name, i in order:
            if between is not None:
                between()
            fn = fns[name]
            t0 = clock()
            fn(i)
            out[name].append(clock() - t0)
    return out


#: The parts of a runner's call that `split` times.
PARTS = ("step", "check", "lane")


def split(model: str, n: int, rounds: int = 5, calls: int = 400) -> dict[str, list[float]]:
    """Per-call seconds of the runner's call and of its parts, each timed inside the call (``time.perf_counter``
    around it), in rounds alternating with the model alone: ``step`` (the store's step, which writes the input dict
    into the reused arrays), ``check`` (the output checks: the C++ check of the runner's short way, or
    `PolicyColumns.check_outputs`; both where the C++ one declines), ``lane`` (the policy on the reused arrays,
    model included: `_Lane.run`, or the short way's function); then each of ``check`` and ``lane`` again alone, in a
    tight loop on one call's outputs / inputs (``check_alone``, ``lane_alone``). The rest of a call is the runner's
    own Python. A part costs more inside the runner's calls than alone: the other parts' work in between (caches,
    branch predictors) slows it, and the model too."""
    from trajview.rollout import runner as runner_mod

    case = Case(model, n, calls)
    case.act(0)
    runner = case.runner if case.runner is not None else case.policy._single_action_runner
    out: dict[str, list[float]] = {k: [] for k in ("runner", "model_only", *PARTS, "check_alone", "lane_alone")}
    clock = time.perf_counter

    def timed(fn: Any, name: str) -> Any:
        samples = out[name]

        def call(*args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                samples.append(clock() - t0)

        return call

    columns = runner._columns
    check, lane_run, hot_init = columns.check_outputs, runner_mod._Lane.run, runner_mod._Hot.__init__
    step_into, hot_check = runner._step_into, runner._hot_check
    # (the short way's C++ call, `_core._HotAct`, calls the step and the check it is given when its `_Hot` is made,
    # and the policy's function it is passed at each call: `hot.run`)
    runner._step_into = timed(step_into, "step")
    runner._hot_check = None if hot_check is None else timed(hot_check, "check")
    columns.check_outputs = timed(check, "check")
    runner_mod._Lane.run = timed(lane_run, "lane")  # type: ignore[method-assign]

    def timed_hot(hot: Any, *args: Any) -> None:  # the short way's parts (its function: `_Lane.run`'s, or its own)
        hot_init(hot, *args)
        if not isinstance(hot.run, functools.partial):  # (a partial of `_Lane.run`, timed above)
            hot.run = timed(hot.run, "lane")

    runner_mod._Hot.__init__ = timed_hot  # type: ignore[method-assign]
    runner._hot = None  # (made again, timed, by the next call)
    try:
        for _ in range(rounds):
            for i in range(calls):
                t0 = clock()
                case.act(i)
                out["runner"].append(clock() - t0)
            for i in range(calls):
                t0 = clock()
                case.model_call(i)
                out["model_only"].append(clock() - t0)
    finally:
        runner._step_into, runner._hot_check = step_into, hot_check
        del columns.check_outputs
        runner_mod._Lane.run = lane_run  # type: ignore[method-assign]
        runner_mod._Hot.__init__ = hot_init  # type: ignore[method-assign]
        runner._hot = None
    lane = runner._lanes[n]
    outputs = lane.run(None, False, 0)
    for _ in range(rounds):
        for i in range(calls):
            t0 = clock()
            lane.run(None, False, 0)
            out["lane_alone"].append(clock() - t0)
        for i in range(calls):
            t0 = clock()
            check(*outputs, n)
            out["check_alone"].append(clock() - t0)
    return out


def parts(model: str, number: int = 3000, repeat: int = 7) -> dict[str, float]:
    """Microseconds of four parts of the runner's work for 64 episodes, each alone in a tight loop (the best of
    ``repeat`` loops of ``number``: `timeit`'s rule, the least disturbed loop): ``check`` (the output checks of one
    `act_many` call's outputs, `PolicyColumns.check_outputs`), ``nan_scan`` (`_core.any_nan` over the state_outs
    and float extra fetches of that call), ``drop`` (the store dropping 32 calls' steps, as the runner does
    every 32 calls; median of 15) and ``step`` (the store's step of one call into the reused input arrays; the
    best of ``30 * repeat`` loops of 32). Run with one trajview, then another (e.g. an older wheel), to compare
    them."""
    import timeit

    from trajview import _core

    case = Case(model, EPISODES, 3 * 32 * 16)
    for i in range(40):
        case.act(i)
    runner = case.runner
    assert runner is not None
    lane = runner._lanes[EPISODES]  # type: ignore[index]
    outs = lane.run(None, False, 0)
    floats = [a for a in [*outs[1], *outs[2].values()] if a.dtype.kind == "f"]
    check = runner._columns.check_outputs

    def best(fn: Any) -> float:
        return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6

    def drop() -> float:
        for i in range(32):
            case.act(i)
        t0 = time.perf_counter()
        runner._collector.discard_steps()
        return (time.perf_counter() - t0) * 1e6

    # One call's step (the last call's outputs, the next observations and rewards) into the lane's arrays, 32 at a
    # time (the store then drops them, untimed, as the runner does every 32 calls).
    data = case.step_data(runner)
    step_into, out = runner._step_into, lane.out

    def steps() -> float:
        t0 = time.perf_counter()
        for _ in range(32):
            step_into(data, None, out)
        t = time.perf_counter() - t0
        runner._collector.discard_steps()
        return t / 32 * 1e6

    return {"check": best(lambda: check(*outs, EPISODES)), "nan_scan": best(lambda: _core.any_nan(floats)),
            "nan_values": float(sum(a.size for a in floats)), "drop": statistics.median(drop() for _ in range(15)),
            "step": min(steps() for _ in range(max(repeat, 1) * 30))}


def cold(model: str, reps: int = 300) -> dict[str, tuple[float, float]]:
    """Microseconds of single operations of a runner's call (the frame stack's or LSTM's single call), each timed
    once right after a call of the model on prebuilt tensors and then at once again: (median first, median second)
    over ``reps`` rounds. The first is what the operation costs inside a runner's call (its code and data come back
    from memory the model's call evicted); the second, in a tight loop. An operation's cost after the model is
    mostly the code it runs, not its work: the runner's bookkeeping after the model costs several times what it
    costs alone (``--split``)."""
    from trajview import _core

    case = Case(model, 1, 8)
    for i in range(5):
        case.act(i)
    runner = case.policy._single_action_runner
    lane = runner._lanes[1]
    data = case.step_data(runner)
    step_into, out = runner._step_into, lane.out
    with case.torch.inference_mode():
        tensor = case.policy.action_sampler(case.tensors, False)[0]
    obs, arr = case.obs[0, 0], np.zeros(3, np.float32)
    ops = {
        "a call into trajview's C++ doing nothing (_core.any_nan([]))": lambda: _core.any_nan([]),
        "the store's step of one row into the reused arrays": lambda: step_into(data, None, out),
        "np.asarray(1.0)": lambda: np.asarray(1.0),
        "obs[None]": lambda: obs[None],
        "tensor.numpy()": lambda: tensor.numpy(),
        "array.item(0)": lambda: arr.item(0),
        "dict(step data)": lambda: dict(data),
        "a Python call doing nothing": lambda: None,
    }
    clock = time.perf_counter_ns
    samples: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in ops}
    for rep in range(reps):
        for name, op in ops.items():
            case.model_call(0)
            t0 = clock()
            op()
            t1 = clock()
            op()
            t2 = clock()
            samples[name][0].append((t1 - t0) / 1e3)
            samples[name][1].append((t2 - t1) / 1e3)
        if rep % 16 == 15:
            runner._collector.discard_steps()  # (the steps above: dropped as the runner drops its own)
    return {k: (statistics.median(a), statistics.median(b)) for k, (a, b) in samples.items()}


def print_cold(reps: int) -> None:
    print(f"single operations of a runner's call, right after a model call and then again at once (microseconds, "
          f"medians of {reps})\n")
    print("| model | operation | after the model | again at once | ratio |")
    print("|---|---|---|---|---|")
    for model in MODELS:
        for name, (first, second) in cold(model, reps).items():
            print(f"| {model} | {name} | {first:.2f} | {second:.2f} | {first / second:.1f}x |")


def print_parts() -> None:
    print(f"the runner's parts for {EPISODES} episodes, each alone in a tight loop (microseconds; best of 7 loops, "
          f"the step: of 210 loops of 32, the drop: median of 15)\n")
    print("| model | the store's step | output checks | NaN scan (values) | dropping 32 calls' steps |")
    print("|---|---|---|---|---|")
    for model in MODELS:
        m = parts(model)
        print(f"| {model} | {m['step']:.2f} | {m['check']:.2f} | {m['nan_scan']:.2f} ({m['nan_values']:.0f}) | "
              f"{m['drop']:.1f} |")


def print_split(rounds: int, calls: int) -> None:
    print(f"per-call microseconds, medians; {rounds} rounds x {calls} calls, 1 torch thread; parts timed inside the "
          f"runner's calls, and alone in a tight loop\n")
    print("| model | call | runner | model | step | check (alone) | lane: policy + model (alone) | lane over model "
          "(alone) | rest: the runner's Python |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in MODELS:
        for n, what in ((1, "compute_single_action"), (EPISODES, f"act_many x{EPISODES}")):
            m = {k: summary(v)[0] for k, v in split(model, n, rounds, calls).items()}
            rest = m["runner"] - m["step"] - m["check"] - m["lane"]
            print(f"| {model} | {what} | {m['runner']:.1f} | {m['model_only']:.1f} | {m['step']:.1f} | "
                  f"{m['check']:.1f} ({m['check_alone']:.1f}) | {m['lane']:.1f} ({m['lane_alone']:.1f}) | "
                  f"{m['lane'] - m['model_only']:+.1f} ({m['lane_alone'] - m['model_only']:+.1f}) | {rest:.1f} |")


def summary(samples: list[float]) -> tuple[float, float, float]:
    """(median, 25th, 75th percentile) in microseconds."""
    q = statistics.quantiles(samples, n=4) if len(samples) > 1 else [samples[0]] * 3
    return statistics.median(samples) * 1e6, q[0] * 1e6, q[2] * 1e6


def run(rounds: int, calls: int, env_step: bool = False, interleave: bool = False) -> list[dict[str, Any]]:
    rows = []
    for model in MODELS:
        for n, what in ((1, "compute_single_action"), (EPISODES, f"act_many x{EPISODES}")):
            m = measure(model, n, rounds, calls, env_step, interleave)
            s = {k: summary(v) for k, v in m.items()}
            rows.append({"model": model, "call": what, **s,
                         "over_policy": s["runner"][0] / s["policy"][0] - 1,
                         "over_model": s["runner"][0] / s["model_only"][0] - 1})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=400, help="calls per round and variant")
    ap.add_argument("--quick", action="store_true", help="1 round of 20 calls (a smoke run)")
    ap.add_argument("--env-step", action="store_true", help="an untimed env step before each call (see above)")
    ap.add_argument("--interleave", action="store_true",
                    help="the variants in turn call by call (default: each round, all calls of one, then the next)")
    ap.add_argument("--split", action="store_true", help="where the runner's time goes, part by part (`split`)")
    ap.add_argument("--parts", action="store_true", help="the runner's own parts alone, in tight loops (`parts`)")
    ap.add_argument("--cold", action="store_true", help="single operations right after a model call (`cold`)")
    args = ap.parse_args()
    rounds, calls = (1, 20) if args.quick else (args.rounds, args.calls)
    if args.split:
        print_split(rounds, calls)
        return
    if args.cold:
        print_cold(20 if args.quick else 300)
        return
    if args.parts:
        print_parts()
        return
    rows = run(rounds, calls, args.env_step, args.interleave)

    def fmt(s: tuple[float, float, float]) -> str:
        return f"{s[0]:8.1f} ({s[1]:.1f}-{s[2]:.1f})"

    print(f"per-call microseconds, median (25th-75th percentile); {rounds} rounds x {calls} calls, "
          f"{'the variants call by call' if args.interleave else 'each variant in a block'}, 1 torch thread"
          f"{'; an untimed env step before each call' if args.env_step else ''}\n")
    print("| model | call | runner | policy on prebuilt inputs | model on prebuilt tensors | runner over policy "
          "| runner over model |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['call']} | {fmt(r['runner'])} | {fmt(r['policy'])} | {fmt(r['model_only'])} | "
              f"{r['over_policy']:+.0%} | {r['over_model']:+.0%} |")
    met = [r["over_model"] <= GOAL - 1 for r in rows]
    print(f"\ngoal: runner at most {GOAL - 1:.0%} over the model on prebuilt tensors in every row: "
          f"{'met' if all(met) else 'not met'} ({sum(met)} of {len(met)} rows)")


if __name__ == "__main__":
    main()
