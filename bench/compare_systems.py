"""The systems that bench/compare.py runs side by side, behind one small interface.

Each ``make_<system>(workload, num_envs, steps)`` builds a collector for
``steps`` env steps (``num_envs`` envs, ``steps // num_envs`` each) that steps
the same dummy env (`CmpEnv`) with the same constant policy (action 0), and
returns a `Run`:

* ``sample()``: collect ``steps`` env steps the way the system does (its own
  vectorized env, its own storage), return what it produced;
* ``stored_bytes(data)``: the bytes the system holds for those steps (its
  store: a batch, episodes, a rollout buffer, a replay buffer).

Workloads: W1 obs float32[4]; W2 obs uint8[84, 84], read through a 4-frame
stack in each system's own way (a view, a ``VecFrameStack``, ``CatFrames``, a
``FrameStackObservation`` wrapper, RLlib's frame-stacking connector).

Only bench/compare.py imports this module, and only inside the
``.venv-compare`` environment (``pip install -r bench/requirements-compare.txt``):
each system's package is imported inside its own ``make_*`` function.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Any, Callable

import gymnasium as gym
import numpy as np

EPISODE_LEN = 50  # the dummy env terminates every 50 steps
POOL = 7  # pre-generated observations, cycled through
FRAME_BYTES = 84 * 84
SYSTEMS = ("trajview", "trajview-collector", "rllib-old", "rllib-new", "torchrl", "sb3", "tianshou")


class CmpEnv(gym.Env):
    """A dummy env whose step costs almost nothing: obs from a pool of 7, reward 1, 50-step episodes.

    ``channel=True`` gives W2 frames as uint8[84, 84, 1] (what RLlib's frame-stacking connector accepts).
    """

    metadata: dict[str, Any] = {}

    def __init__(self, workload: str = "W1", channel: bool = False) -> None:
        rng = np.random.default_rng(0)
        if workload == "W1":
            self.observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
            self._pool = [rng.standard_normal(4).astype(np.float32) for _ in range(POOL)]
        else:
            shape = (84, 84, 1) if channel else (84, 84)
            self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
            self._pool = [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(POOL)]
        self.action_space = gym.spaces.Discrete(2)
        self._t = 0

    def reset(self, *, seed=None, options=None):
        self._t = 0
        return self._pool[0], {}

    def step(self, action):
        self._t += 1
        return self._pool[self._t % POOL], 1.0, self._t >= EPISODE_LEN, False, {}


@dataclass
class Run:
    sample: Callable[[], Any]
    stored_bytes: Callable[[Any], int]
    notes: dict[str, Any] = field(default_factory=dict)
    setup: Callable[[], Any] | None = None  # untimed, before each sample


def nbytes_of(x: Any, seen: set | None = None) -> int:
    """Bytes of every numpy array / torch tensor reachable through dicts, lists, tuples and attributes."""
    seen = set() if seen is None else seen
    if id(x) in seen:
        return 0
    seen.add(id(x))
    if isinstance(x, np.ndarray):
        return x.nbytes if x.base is None or id(x.base) not in seen else 0
    if type(x).__name__ == "LazyView":  # trajview: a shared base of rows (counted once) plus an index
        return nbytes_of(x.base, seen) + x.index.nbytes
    mod = type(x).__module__
    if mod.startswith("torch") and hasattr(x, "element_size") and hasattr(x, "nelement"):
        return x.element_size() * x.nelement()
    if isinstance(x, dict):
        return sum(nbytes_of(v, seen) for v in dict.values(x))  # dict.values: no lazy column materializes
    if isinstance(x, (list, tuple)):
        return sum(nbytes_of(v, seen) for v in x)
    if isinstance(x, (str, bytes, int, float, bool, type(None))):
        return 0
    d = getattr(x, "__dict__", None)
    return 0 if d is None else sum(nbytes_of(v, seen) for v in d.values())


def bare_loop(workload: str, num_envs: int, steps: int) -> Run:
    """The bare env + policy loop: the same envs and the constant policy, nothing stored."""
    envs = [CmpEnv(workload) for _ in range(num_envs)]
    obs = np.stack([e.reset()[0] for e in envs])
    T = steps // num_envs

    def sample():
        for _ in range(T):
            actions = np.zeros(len(obs), np.int64)  # the policy
            for i, (env, a) in enumerate(zip(envs, actions.tolist())):
                o, _r, te, tr, _ = env.step(a)
                if te or tr:
                    o, _ = env.reset()
                obs[i] = o
        return None

    return Run(sample, lambda data: 0)


# ----------------------------------------------------------------------------- trajview


def trajview_policy_cls(stack: bool, padding: str = "zero"):
    import trajview as tv

    class ConstantPolicy(tv.Policy):
        def __init__(self, obs_space, act_space, config=None):
            super().__init__(obs_space, act_space, config)
            if stack:
                self.view_requirements["prev_n_obs"] = tv.ViewRequirement("obs", shift="-3:0", padding=padding)

        def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kw):
            # A frame-stack model reads the stack (and not obs): the pruning pass keeps obs out of the
            # compute-actions input, as it would for such a model.
            x = input_dict["prev_n_obs"] if stack else input_dict["obs"]
            return np.zeros(len(x), np.int64), [], {}

        def loss(self, train_batch):
            cols = ["obs", "new_obs", "actions", "rewards", "terminateds", "truncateds"]
            return [train_batch[k] for k in cols + (["prev_n_obs"] if stack else [])]

    return ConstantPolicy


def make_trajview(workload: str, num_envs: int, steps: int) -> Run:
    import trajview as tv

    stack = workload == "W2"
    w = tv.RolloutWorker(lambda cfg: CmpEnv(workload), trajview_policy_cls(stack), num_envs=num_envs,
                         rollout_fragment_length=steps // num_envs)
    row_bytes = CmpEnv(workload)._pool[0].nbytes  # one observation (a frame on W2)
    held = {"carried": 0, "stored": 0}
    notes: dict[str, Any] = {"store": "RolloutWorker.sample(): rows the Collector holds for the sample (before "
                                      "the batch is built); returns the training batch (lazy views: frames once)"}
    emit = w.sampler._emit

    def emit_and_measure(complete):
        # What the store holds for this fragment, less the look-back rows carried in from the last one.
        held["stored"] = w.collector.held_nbytes() - held["carried"]
        batch = emit(complete)
        held["carried"] = w.collector.held_nbytes()  # look-back rows + newest obs, per env, for the next fragment
        notes["carried_rows_per_env"] = held["carried"] / num_envs / row_bytes
        notes["allocated_bytes_per_step_frames"] = w.collector.nbytes() / steps / row_bytes
        return batch

    w.sampler._emit = emit_and_measure  # type: ignore[method-assign]

    def sample():
        batch = w.sample()
        notes["batch_bytes_per_step_frames"] = nbytes_of(batch) / len(batch) / row_bytes
        return batch

    return Run(sample, lambda batch: held["stored"], notes)


def make_trajview_collector(workload: str, num_envs: int, steps: int) -> Run:
    """The loop SB3 users write, with `tv.Collector` as the store: step the envs, ``coll.step`` (store the
    step and build the next inference dict, the 4-frame stack included), end/begin episodes. Store only:
    the untimed setup before each sample emits the previous one (``build_batch``), as a learner would."""
    import trajview as tv

    stack = workload == "W2"
    envs = [CmpEnv(workload) for _ in range(num_envs)]
    obs_space = envs[0].observation_space
    cols = {"obs": (obs_space.dtype, obs_space.shape), "actions": (np.int64, ()), "rewards": (np.float32, ()),
            "terminateds": (np.bool_, ()), "truncateds": (np.bool_, ())}
    vr = tv.ViewRequirement
    views = {"obs": vr("obs", used_for_compute_actions=not stack), "actions": vr("actions"), "rewards": vr("rewards"), "terminateds": vr("terminateds"),
             "truncateds": vr("truncateds"), "new_obs": vr("obs", shift=1, used_for_compute_actions=False)}
    if stack:
        views["prev_n_obs"] = vr("obs", shift="-3:0")
    T = steps // num_envs
    coll = tv.Collector(num_envs, cols, views, chunk_rows=T)
    ids = np.arange(num_envs)
    coll.begin_episodes(ids, {"obs": np.stack([e.reset()[0] for e in envs])})
    new_obs = np.zeros((num_envs, *obs_space.shape), obs_space.dtype)
    rew = np.zeros(num_envs, np.float32)
    term = np.zeros(num_envs, bool)
    trunc = np.zeros(num_envs, bool)
    state = {"inp": coll.input_dict()}

    def sample():
        inp = state["inp"]
        for _ in range(T):
            if stack:
                inp["prev_n_obs"]  # the model reads the stack
            actions = np.zeros(num_envs, np.int64)  # the policy
            done = []
            for i, (env, a) in enumerate(zip(envs, actions.tolist())):
                o, r, te, tr, _ = env.step(a)
                new_obs[i], rew[i], term[i], trunc[i] = o, r, te, tr
                if te or tr:
                    done.append(i)
            inp = coll.step({"obs": new_obs, "actions": actions, "rewards": rew, "terminateds": term,
                             "truncateds": trunc})
            if done:
                coll.end_episodes(done)
                coll.begin_episodes(done, {"obs": np.stack([envs[i].reset()[0] for i in done])})
                inp = coll.input_dict()
        state["inp"] = inp
        # What the store holds for this sample, less the look-back rows carried in from the last one.
        state["stored"] = coll.held_nbytes() - state["carried"]
        return None

    def setup():
        coll.build_batch()  # the learner takes the last sample
        state["carried"] = coll.held_nbytes()

    state["carried"] = 0
    return Run(sample, lambda _: state["stored"],
               {"store": "tv.Collector.step loop, store only (stack built for inference): rows held for the sample"},
               setup=setup)


# ----------------------------------------------------------------------------- RLlib old stack


def rllib_old_policy_cls(stack: bool, equivalence: bool = False):
    from ray.rllib.policy.policy import Policy
    from ray.rllib.policy.view_requirement import ViewRequirement

    class ConstantPolicy(Policy):
        def __init__(self, obs_space, act_space, config):
            super().__init__(obs_space, act_space, config)
            vr = self.view_requirements
            if not equivalence:
                for k in ("prev_actions", "prev_rewards", "infos"):  # trajview's worker prunes these too
                    vr.pop(k, None)
            if stack:
                vr["prev_n_obs"] = ViewRequirement("obs", shift="-3:0", space=obs_space)

        def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kw):
            obs = np.asarray(input_dict["obs"])
            if equivalence:
                return cartpole_rule(obs), [], {}
            return np.zeros(len(obs), np.int64), [], {}

        def compute_actions(self, obs_batch, *a, **k):
            return np.zeros(len(obs_batch), np.int64), [], {}

        def get_weights(self):
            return {}

        def set_weights(self, weights):
            pass

    return ConstantPolicy


def rllib_old_config(num_envs: int, fragment: int, spaces):
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    return (AlgorithmConfig()
            .api_stack(enable_rl_module_and_learner=False, enable_env_runner_and_connector_v2=False)
            .env_runners(num_envs_per_env_runner=num_envs, rollout_fragment_length=fragment,
                         batch_mode="truncate_episodes")
            .environment(observation_space=spaces[0], action_space=spaces[1]))


def rllib_policy_batch(b):
    return b.policy_batches["default_policy"] if hasattr(b, "policy_batches") else b


def make_rllib_old(workload: str, num_envs: int, steps: int) -> Run:
    from ray.rllib.evaluation.rollout_worker import RolloutWorker

    env = CmpEnv(workload)
    cfg = rllib_old_config(num_envs, steps // num_envs, (env.observation_space, env.action_space))
    w = RolloutWorker(env_creator=lambda c: CmpEnv(workload), config=cfg,
                      default_policy_class=rllib_old_policy_cls(workload == "W2"))

    def sample():
        return rllib_policy_batch(w.sample())

    return Run(sample, lambda b: sum(np.asarray(v).nbytes for k, v in b.items() if k != "infos"),
               {"store": "SampleBatch (SimpleListCollector)"})


# ----------------------------------------------------------------------------- RLlib new stack


def make_rllib_new(workload: str, num_envs: int, steps: int) -> Run:
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
    from ray.tune.registry import register_env

    class ConstantModule(TorchRLModule):
        def setup(self):
            self.unused = torch.nn.Parameter(torch.zeros(1))

        def _forward(self, batch, **kw):
            return {"actions": torch.zeros(batch["obs"].shape[0], dtype=torch.int64)}

    register_env("trajview-compare", lambda cfg: CmpEnv(cfg["workload"], channel=cfg["workload"] == "W2"))
    cfg = (PPOConfig().environment("trajview-compare", env_config={"workload": workload})
           .env_runners(num_env_runners=0, num_envs_per_env_runner=num_envs,
                        rollout_fragment_length=steps // num_envs)
           .rl_module(rl_module_spec=RLModuleSpec(module_class=ConstantModule)))
    if workload == "W2":
        from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule

        cfg = cfg.env_runners(env_to_module_connector=lambda env, spaces=None, device=None:
                              FrameStackingEnvToModule(num_frames=4))
    runner = SingleAgentEnvRunner(config=cfg)

    def sample():
        return runner.sample(num_timesteps=steps)

    def stored(episodes):
        return sum(nbytes_of([e.observations, e.actions, e.rewards, e.extra_model_outputs]) for e in episodes)

    return Run(sample, stored, {"store": "SingleAgentEpisode list"})


# ----------------------------------------------------------------------------- TorchRL


def torchrl_env(workload: str, num_envs: int):
    from torchrl.envs import CatFrames, Compose, GymWrapper, TransformedEnv, UnsqueezeTransform

    # A gymnasium vector env wrapped by GymWrapper: TorchRL's batched env that steps fastest here
    # (SerialEnv over 64 GymWrappers took 15x longer per step on W1).
    vec = gym.vector.SyncVectorEnv([lambda: CmpEnv(workload)] * num_envs,
                                   autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    env = GymWrapper(vec, categorical_action_encoding=True)
    if workload == "W2":
        env = TransformedEnv(env, Compose(UnsqueezeTransform(-3, in_keys=["observation"]),
                                          CatFrames(N=4, dim=-3, in_keys=["observation"])))
    return env


def make_torchrl(workload: str, num_envs: int, steps: int) -> Run:
    import torch
    from tensordict.nn import TensorDictModule
    from torchrl.collectors import Collector

    stack = workload == "W2"

    class Constant(torch.nn.Module):
        def forward(self, obs):
            return torch.zeros(obs.shape[:-3] if stack else obs.shape[:-1], dtype=torch.int64)

    policy = TensorDictModule(Constant(), in_keys=["observation"], out_keys=["action"])
    collector = Collector(torchrl_env(workload, num_envs), policy, frames_per_batch=steps, total_frames=-1)
    it = iter(collector)
    return Run(lambda: next(it), lambda td: int(td.bytes()), {"store": "collector output TensorDict"})


# ----------------------------------------------------------------------------- Stable-Baselines3


class SB3Collect:
    """What SB3's ``OnPolicyAlgorithm.collect_rollouts`` does, with the constant policy: a DummyVecEnv
    (VecFrameStack on W2) stepped ``T`` times, each step added to a ``RolloutBuffer``."""

    def __init__(self, workload: str, num_envs: int, steps: int) -> None:
        import torch
        from stable_baselines3.common.buffers import RolloutBuffer
        from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

        env = DummyVecEnv([lambda: CmpEnv(workload)] * num_envs)
        if workload == "W2":
            env = VecFrameStack(env, 4)
        self.env, self.B, self.T = env, num_envs, steps // num_envs
        self.rb = RolloutBuffer(self.T, env.observation_space, env.action_space, device="cpu", n_envs=num_envs)
        self.values, self.log_probs = torch.zeros(num_envs), torch.zeros(num_envs)
        self.obs, self.starts = env.reset(), np.ones(num_envs, bool)

    def sample(self):
        rb, env = self.rb, self.env
        rb.reset()
        obs, starts = self.obs, self.starts
        for _ in range(self.T):
            actions = np.zeros(self.B, np.int64)  # the policy
            new_obs, rewards, dones, _infos = env.step(actions)
            rb.add(obs, actions.reshape(-1, 1), rewards, starts, self.values, self.log_probs)
            obs, starts = new_obs, dones
        self.obs, self.starts = obs, starts
        return rb

    def stored(self, rb) -> int:
        return sum(a.nbytes for a in (rb.observations, rb.actions, rb.rewards, rb.episode_starts, rb.values,
                                      rb.log_probs, rb.advantages, rb.returns))


def make_sb3(workload: str, num_envs: int, steps: int) -> Run:
    c = SB3Collect(workload, num_envs, steps)
    return Run(c.sample, c.stored, {"store": "RolloutBuffer"})


def sb3_replay_bytes_per_step(workload: str, num_envs: int, size: int) -> float:
    """Bytes per step of ``ReplayBuffer(optimize_memory_usage=True)`` with VecFrameStack obs (preallocated)."""
    from stable_baselines3.common.buffers import ReplayBuffer
    from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

    env = DummyVecEnv([lambda: CmpEnv(workload)] * num_envs)
    if workload == "W2":
        env = VecFrameStack(env, 4)
    rep = ReplayBuffer(size, env.observation_space, env.action_space, device="cpu", n_envs=num_envs,
                       optimize_memory_usage=True, handle_timeout_termination=False)
    b = sum(v.nbytes for v in vars(rep).values() if isinstance(v, np.ndarray))
    return b / (rep.buffer_size * num_envs)  # SB3 keeps size // n_envs rows of n_envs steps


# ----------------------------------------------------------------------------- Tianshou


def make_tianshou(workload: str, num_envs: int, steps: int) -> Run:
    from tianshou.algorithm.algorithm_base import Policy
    from tianshou.data import Batch, Collector, VectorReplayBuffer
    from tianshou.env import DummyVectorEnv

    stack = workload == "W2"

    def make_env():
        env = CmpEnv(workload)
        return gym.wrappers.FrameStackObservation(env, 4) if stack else env

    class Constant(Policy):
        def forward(self, batch, state=None, **kw):
            return Batch(act=np.zeros(len(batch.obs), np.int64))

    # W2: the memory-saving setup of Tianshou's Atari examples: the env stacks, the buffer keeps the last frame.
    kw = dict(stack_num=4, save_only_last_obs=True, ignore_obs_next=True) if stack else {}
    buf = VectorReplayBuffer(steps, num_envs, **kw)
    collector = Collector(Constant(action_space=gym.spaces.Discrete(2)), DummyVectorEnv([make_env] * num_envs), buf)
    collector.reset()

    def sample():
        buf.reset()
        collector.collect(n_step=steps)
        return buf

    return Run(sample, lambda b: nbytes_of(b._meta), {"store": "VectorReplayBuffer" + (" (stack_num=4)" if stack else "")})


MAKERS: dict[str, Callable[[str, int, int], Run]] = {
    "bare": bare_loop,
    "trajview": make_trajview,
    "trajview-collector": make_trajview_collector,
    "rllib-old": make_rllib_old,
    "rllib-new": make_rllib_new,
    "torchrl": make_torchrl,
    "sb3": make_sb3,
    "tianshou": make_tianshou,
}


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("trajview", "ray", "torchrl", "tensordict", "stable-baselines3", "tianshou", "torch", "numpy",
                "gymnasium"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


# ----------------------------------------------------------------------------- data equivalence helpers


def cartpole_rule(obs: np.ndarray) -> np.ndarray:
    """A deterministic policy on CartPole observations (same actions in both systems): push the way the
    pole leans (episodes of 30 to 60 steps, so many boundaries)."""
    return (np.asarray(obs)[:, 2] > 0).astype(np.int64)


class SeededCartPole(gym.Wrapper):
    """CartPole-v1 seeded once at construction; seeds passed to reset later are ignored."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self._seed: int | None = seed

    def reset(self, *, seed=None, options=None):
        s, self._seed = self._seed, None
        return self.env.reset(seed=s)


def collect_gc() -> None:
    gc.collect()


# ----------------------------------------------------------------------------- training-batch builds (W2)
#
# Each ``build_<system>(num_envs, steps)`` returns (refill, build): ``refill()`` collects ``steps`` W2 steps
# into the system's store (untimed), ``build()`` builds the training batch from them (timed) and returns it.
# The batch holds the 4-frame stack wherever the system builds it at batch time.


def build_trajview(num_envs: int, steps: int, lazy: bool = True):
    """``lazy``: the batch holds each frame once plus indices (``lazy_views=True``, RolloutWorker's default);
    otherwise every view, the stack included, is copied out (``lazy_views=False``)."""
    import functools

    import trajview as tv
    from _common import CollectorRunner, make_pool

    runner = CollectorRunner(make_pool("W2", num_envs), functools.partial(tv.Collector, lazy_views=lazy),
                             chunk_rows=steps // num_envs)
    return (lambda: runner.steps(steps // num_envs)), runner.batch


def build_rllib_old(num_envs: int, steps: int):
    from ray.rllib.evaluation.collectors.agent_collector import AgentCollector
    from ray.rllib.policy.sample_batch import concat_samples

    env = CmpEnv("W2")
    policy = rllib_old_policy_cls(True)(env.observation_space, env.action_space, {})
    vrs = policy.view_requirements
    T = steps // num_envs
    state: dict[str, Any] = {"acs": []}

    def refill():
        acs = []
        for j in range(num_envs):
            ac = AgentCollector(vrs, is_training=True)
            ac.add_init_obs(episode_id=j, agent_index=0, env_id=j, init_obs=env._pool[0], t=-1)
            for t in range(T):
                ac.add_action_reward_next_obs({
                    "actions": 0, "rewards": 1.0, "terminateds": False, "truncateds": False,
                    "new_obs": env._pool[(t + 1) % POOL], "eps_id": j, "agent_index": 0, "env_id": j, "t": t,
                })
            acs.append(ac)
        state["acs"] = acs

    def build():
        return concat_samples([ac.build_for_training(vrs) for ac in state["acs"]])

    return refill, build


def build_sb3(num_envs: int, steps: int):
    c = SB3Collect("W2", num_envs, steps)
    return c.sample, lambda: next(c.rb.get(batch_size=None))


def build_tianshou(num_envs: int, steps: int):
    run = make_tianshou("W2", num_envs, steps)
    state: dict[str, Any] = {}

    def refill():
        state["buf"] = run.sample()

    def build():
        return state["buf"].sample(0)[0]  # every stored step, obs stacked (stack_num=4)

    return refill, build


BUILDERS = {"trajview": build_trajview, "trajview-copied": lambda n, s: build_trajview(n, s, lazy=False), "rllib-old": build_rllib_old, "sb3": build_sb3, "tianshou": build_tianshou}


# ----------------------------------------------------------------------------- replay: 256 x 32 slices, 100k W2 steps

REPLAY_TRAJ = 500


def replay_frames(capacity: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(frames [capacity, 84, 84], eps_id, t): 500-step trajectories, frame k = pool[k % 7]."""
    rng = np.random.default_rng(0)
    pool = rng.integers(0, 256, (POOL, 84, 84), dtype=np.uint8)
    k = np.arange(capacity)
    return pool[k % POOL], (k // REPLAY_TRAJ).astype(np.int64), (k % REPLAY_TRAJ).astype(np.int64)


def replay_trajview(capacity: int, num_slices: int, slice_len: int):
    import trajview as tv

    frames, eps, t = replay_frames(capacity)
    n = capacity
    rb = tv.ReplayBuffer(capacity, columns=["obs", "actions", "rewards", "terminateds", "truncateds", "eps_id", "t"],
                         sampler=tv.SliceSampler(slice_len=slice_len, seed=0))
    for a in range(0, n, 10_000):
        b = slice(a, min(a + 10_000, n))
        rb.add(tv.SampleBatch({"obs": frames[b], "actions": np.zeros(b.stop - a, np.int64),
                               "rewards": np.ones(b.stop - a, np.float32), "terminateds": t[b] == REPLAY_TRAJ - 1,
                               "truncateds": np.zeros(b.stop - a, bool), "eps_id": eps[b], "t": t[b]}))
    del frames
    views = {"stack": tv.ViewRequirement("obs", shift="-3:0")}

    def sample():
        return rb.sample(num_slices * slice_len, views=views)

    return sample, {"stored_bytes_per_step_per_frame": rb.nbytes() / len(rb) / FRAME_BYTES,
                    "what": "SliceSampler slices + the 4-frame stack view built at sample time (zeros before t=0)"}


def replay_torchrl(capacity: int, num_slices: int, slice_len: int):
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer
    from torchrl.envs import CatFrames

    frames, eps, t = replay_frames(capacity)
    done = torch.from_numpy(t == REPLAY_TRAJ - 1).unsqueeze(-1)
    td = TensorDict({
        "observation": torch.from_numpy(frames).unsqueeze(-3),  # [N, 1, 84, 84], as the env's UnsqueezeTransform gives
        "action": torch.zeros(capacity, dtype=torch.int64),
        "episode": torch.from_numpy(eps),
        "done": torch.zeros(capacity, 1, dtype=torch.bool),
        "next": {"reward": torch.ones(capacity, 1), "done": done, "terminated": done.clone(),
                 "truncated": torch.zeros(capacity, 1, dtype=torch.bool)},
    }, batch_size=[capacity])
    del frames
    # Frames stored once; CatFrames stacks them along each sampled slice (TorchRL's recommended
    # sample-time stacking: "store trajectories ... sample slices ... then apply the frame stacking transform").
    # (Applied to the sample: as the buffer's own transform it changes the batch shape, which
    # TensorDictReplayBuffer.sample refuses when it writes the indices back.)
    catframes = CatFrames(N=4, dim=-3, in_keys=["observation"], out_keys=["stack"], padding="constant")
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity),
                                sampler=SliceSampler(num_slices=num_slices, end_key=("next", "done"), strict_length=True,
                                                     cache_values=True),  # the docs' advice for speed
                                batch_size=num_slices * slice_len)
    rb.extend(td)
    del td

    def sample():
        return catframes(rb.sample().reshape(num_slices, slice_len).refine_names(None, "time"))

    stored = sum(v.element_size() * v.nelement() for v in rb.storage._storage.values(True, True))
    return sample, {"stored_bytes_per_step_per_frame": stored / capacity / FRAME_BYTES,
                    "what": "TensorDictReplayBuffer + SliceSampler(num_slices=256), CatFrames(N=4) over each slice "
                            "(the first 3 steps of a slice get padding, not the frames before it)"}


def replay_rllib_new(capacity: int, num_slices: int, slice_len: int):
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode
    from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer

    frames, _eps, _t = replay_frames(capacity + 1)
    rb = EpisodeReplayBuffer(capacity=capacity, batch_size_B=num_slices, batch_length_T=slice_len)
    episodes = []
    for a in range(0, capacity, REPLAY_TRAJ):
        ep = SingleAgentEpisode(observations=list(frames[a: a + REPLAY_TRAJ + 1]), actions=[0] * REPLAY_TRAJ,
                                rewards=[1.0] * REPLAY_TRAJ, terminated=True, len_lookback_buffer=0)
        episodes.append(ep.to_numpy())
    del frames
    rb.add(episodes)
    del episodes

    def sample():
        return rb.sample(batch_size_B=num_slices, batch_length_T=slice_len)

    return sample, {"what": "EpisodeReplayBuffer.sample(batch_size_B=256, batch_length_T=32): episode chunks, "
                            "no frame stack (RLlib stacks in the learner connector)"}


REPLAYS = {"trajview": replay_trajview, "torchrl": replay_torchrl, "rllib-new": replay_rllib_new}
