"""`TrajviewCollector`: a TorchRL data collector (``torchrl.collectors.BaseCollector``) over trajview's rollouts.

It drives a ``TensorDictModule`` policy over gymnasium envs (or TorchRL's ``GymEnv`` / ``GymWrapper``, whose
gymnasium env it steps) with trajview's `RolloutWorker` (in this process) or `WorkerSet` (``num_workers``
processes), and yields TensorDicts in TorchRL's layout: ``observation``, ``action`` (and the policy's other
outputs), ``("next", "observation")``, ``("next", "reward")``, ``("next", "done" / "terminated" /
"truncated")``, ``("collector", "traj_ids")`` (`trajview.SampleBatch.to_tensordict` does the mapping).
``views`` (``tv.ViewRequirement`` s of ``"observation"``: a frame stack) are extra keys the policy reads and the
batches carry, built from the one stored copy of each observation: no ``CatFrames`` transform.
"""

from __future__ import annotations

import contextlib
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase, unravel_key
from tensordict.nn import TensorDictModule
from torch.nn.modules import module as _nn_module
from torchrl.envs import EnvBase
from torchrl.envs.utils import ExplorationType, exploration_type, set_exploration_type

with warnings.catch_warnings():  # torchrl 0.14 warns about its own weight updaters when torchrl.collectors loads
    warnings.simplefilter("ignore", DeprecationWarning)
    from torchrl.collectors import BaseCollector

from .._validate import positive_int
from ..policy import Policy
from ..policy.torch_policy import numpy_state
from ..rollout import RolloutWorker, WorkerSet
from ..views import SampleBatch, ViewRequirement

__all__ = ["TensorDictPolicy", "TrajviewCollector"]

OBS_KEY = "observation"
#: What `TensorDictPolicy`'s call without TensorDicts does with each output: skip it, the action, keep it.
_SKIP, _ACTION, _KEEP = 0, 1, 2
_NO_CONTEXT = contextlib.nullcontext()


def gym_env(env: Any) -> Any:
    """The gymnasium env a collector steps: ``env`` itself, or the one a TorchRL ``GymEnv`` / ``GymWrapper`` wraps."""
    if isinstance(env, EnvBase):
        inner = getattr(env, "_env", None)
        if type(env).__name__ not in ("GymEnv", "GymWrapper") or inner is None:
            raise TypeError(
                f"TrajviewCollector steps gymnasium envs: a TorchRL {type(env).__name__} is not one (GymEnv and "
                f"GymWrapper are: their gymnasium env is stepped). TorchRL transforms are not run: a frame stack is "
                f"a view (views={{'stack': tv.ViewRequirement('observation', shift='-3:0')}}), several envs are "
                f"num_envs="
            )
        return inner
    return env


class TensorDictPolicy(Policy):
    """A trajview `Policy` running a TorchRL ``TensorDictModule``: its ``in_keys`` read the observation (as
    ``"observation"``) and the views; ``"action"`` goes to the envs; every other output key is stored and comes
    back in the batches (a ``ProbabilisticActor``'s ``loc``, ``scale``, ``action_log_prob``).

    Made by `TrajviewCollector` (a subclass per collector, holding its module and views).
    """

    module: Any = None
    views: dict[str, ViewRequirement] = {}
    explore_type: Any = ExplorationType.RANDOM

    def __init__(self, observation_space: Any, action_space: Any, config: dict | None = None) -> None:
        super().__init__(observation_space, action_space, config)
        for name in (SampleBatch.PREV_ACTIONS, SampleBatch.PREV_REWARDS, SampleBatch.DONES, SampleBatch.INFOS,
                     SampleBatch.UNROLL_ID, SampleBatch.AGENT_INDEX):
            self.view_requirements.pop(name, None)  # not in TorchRL's layout
        for name, vr in self.views.items():
            self.view_requirements[name] = vr
        self._in_keys: list[str] = []
        for k in self.module.in_keys:
            if not isinstance(k, str) and len(k) == 1:
                k = k[0]
            self._in_keys.append(k)
            if k != OBS_KEY and k not in self.views:
                raise ValueError(f"TrajviewCollector: the policy reads {k!r}; it can read {OBS_KEY!r} and the views "
                                 f"{sorted(self.views)}")

        #: Whether the policy is exactly a TensorDictModule (`_fast_out_keys`); its plan of outputs (what each
        #: out key is: skipped, the action, kept under its name) is made for its in and out keys at first use.
        self._fast = _fast_out_keys(self.module) is not None
        self._fast_for: tuple[Any, Any] = (None, None)
        self._fast_plan: list[tuple[int, str]] = []

    def compute_actions_from_input_dict(
        self, input_dict: Mapping[str, Any], explore: bool | None = None, timestep: int | None = None, **kwargs: Any
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        src: dict[str, Any] = {}
        n = 0
        for k in self._in_keys:
            arr = np.asarray(input_dict[SampleBatch.OBS if k == OBS_KEY else k])
            n = len(arr)
            src[k] = torch.from_numpy(np.ascontiguousarray(arr))
        kind = self.explore_type if explore is not False else ExplorationType.DETERMINISTIC
        # TorchRL's exploration type for the call (set only where it is not that already: the same state).
        with torch.no_grad(), (set_exploration_type(kind) if exploration_type() is not kind else _NO_CONTEXT):
            if self._fast and self._fast_ready():
                out = self._call_fast(src, n)
                if not isinstance(out, TensorDictBase):
                    return out
            else:
                out = self.module(TensorDict(src, batch_size=[n]))
        return self._outputs(out, src)

    def _outputs(self, out: TensorDictBase, src: Mapping[str, Any]) -> tuple[np.ndarray, list, dict[str, np.ndarray]]:
        """The action and the other outputs of the policy's TensorDict (what the general call gives)."""
        action = out.get("action").detach().cpu().numpy()
        extra: dict[str, np.ndarray] = {}
        for k in out.keys(include_nested=True, leaves_only=True):
            key = (k,) if isinstance(k, str) else tuple(k)
            if key == ("action",) or (len(key) == 1 and key[0] in src):
                continue
            extra[".".join(key)] = out.get(key).detach().cpu().numpy()
        return action, [], extra

    def _call_fast(self, src: dict[str, Any],
                   n: int) -> tuple[np.ndarray, list, dict[str, np.ndarray]] | TensorDictBase:
        """A plain ``TensorDictModule``'s call without its TensorDicts: its module (or ``method``) on the input
        tensors, the outputs mapped to ``out_keys`` as the module's call maps them. Where an output is not a
        tensor of the batch's size, the outputs go through the module's own writing onto the TensorDict the
        general call builds (its conversions, size checks and errors), which is returned."""
        mod = self.module
        d = mod.__dict__
        inner = mod._modules["module"] if "module" in mod._modules else d["module"]
        fn = inner if d["method"] is None else getattr(inner, d["method"])
        tensors = [src[k] for k in self._in_keys]
        if d["_kwargs"] is not None:
            call_kw = dict(zip(d["_kwargs"], tensors))
            call_kw.update(d["method_kwargs"])
            res = fn(**call_kw)
        else:
            res = fn(*tensors, **d["method_kwargs"])
        plan = self._fast_plan
        if res is None:
            res = ()
        if isinstance(res, (dict, TensorDictBase)):
            picked = _pick(res, mod.out_keys)
            if picked is not None:
                res = picked
        outs = res if isinstance(res, tuple) else (res,)
        if len(outs) == len(plan):
            action: np.ndarray | None = None
            extra: dict[str, np.ndarray] = {}
            for (what, name), t in zip(plan, outs):
                if type(t) is not torch.Tensor or t.ndim == 0 or t.shape[0] != n:
                    break
                if what == _ACTION:
                    action = t.detach().cpu().numpy()
                elif what == _KEEP:
                    extra[name] = t.detach().cpu().numpy()
            else:
                if action is not None:
                    return action, [], extra
        # Anything else: the module's own writing (TensorDict.from_any of each output, its size checks, its
        # errors) onto the TensorDict the general call would have built.
        out: TensorDictBase = mod._write_to_tensordict(TensorDict(src, batch_size=[n]), list(outs))
        return out

    def _fast_ready(self) -> bool:
        """Whether this call may go without TensorDicts: a `_fast_out_keys` policy whose call is plain
        (`_plain_call`) and whose keys are still those the plan of outputs was made for."""
        mod = self.module
        if not self._fast or not _plain_call(mod):
            return False
        d = mod.__dict__
        if d.get("_get_kwargs"):
            return False
        if d.get("_in_keys") is not self._fast_for[0] or d.get("_out_keys") is not self._fast_for[1]:
            keys = _fast_out_keys(mod)
            if keys is None or [k if isinstance(k, str) or len(k) != 1 else k[0] for k in mod.in_keys] != self._in_keys:
                return False
            src = set(self._in_keys)
            self._fast_plan = [(_SKIP, "") if k == ("_",) else (_ACTION, "") if k == ("action",)
                               else (_SKIP, "") if len(k) == 1 and k[0] in src else (_KEEP, ".".join(k))
                               for k in keys]
            self._fast_for = (d.get("_in_keys"), d.get("_out_keys"))
        return True

    def get_weights(self) -> dict[str, Any]:
        return numpy_state(self.module)

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        self.module.load_state_dict({k: torch.as_tensor(np.asarray(v)) for k, v in weights.items()})


def _fast_out_keys(module: Any) -> list[tuple[str, ...]] | None:
    """The ``out_keys`` (as tuples) of a policy whose call `TensorDictPolicy` may make without TensorDicts:
    exactly a ``tensordict.nn.TensorDictModule`` (no subclass: a subclass may change ``forward``) writing
    ``"action"``, no key twice or under another, nothing read with ``get_kwargs``; else ``None``. Whether
    its call is plain (no hooks, no ``select_out_keys``) is checked at each call (`_plain_call`)."""
    if type(module) is not TensorDictModule or getattr(module, "_get_kwargs", None):
        return None
    keys = [(k,) if isinstance(k, str) else tuple(k) for k in module.out_keys_source]
    if ("action",) not in keys or len(set(keys)) != len(keys):
        return None
    for a in keys:
        if any(a != b and b[:len(a)] == a for b in keys):
            return None
    return keys


def _plain_call(module: Any) -> bool:
    """Whether calling ``module`` (a `_fast_out_keys` one) runs nothing but its ``forward``: no hooks of its
    own or global ones (``select_out_keys`` is a forward hook), its ``out_keys`` its ``out_keys_source``."""
    return not (module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or module._backward_pre_hooks or _nn_module._global_forward_hooks
                or _nn_module._global_forward_pre_hooks or _nn_module._global_backward_hooks
                or _nn_module._global_backward_pre_hooks or module._out_keys_apparent != module._out_keys)


def _pick(res: Any, out_keys: list[Any]) -> tuple[Any, ...] | None:
    """A dict (or TensorDict) output holding every out key (``key in res``, as the module's call checks): its
    values in ``out_keys`` order (a dict's keys unravelled first, as the call does); else ``None``."""
    if not all(k in res for k in out_keys):
        return None
    if isinstance(res, dict):
        res = {unravel_key(k): v for k, v in res.items()}
    return tuple(res.get(k) for k in out_keys)


def _policy_class(module: Any, views: Mapping[str, ViewRequirement], explore_type: Any) -> type[TensorDictPolicy]:
    return type("CollectorPolicy", (TensorDictPolicy,), {"module": module, "views": dict(views),
                                                         "explore_type": explore_type})


def _obs_view(name: str, vr: ViewRequirement) -> ViewRequirement:
    """A view of ``"observation"`` as the store names it (``obs``)."""
    if not isinstance(vr, ViewRequirement):
        raise TypeError(f"views[{name!r}] must be a tv.ViewRequirement, got {type(vr).__name__}")
    col = vr.column(name)
    if col != OBS_KEY:
        raise ValueError(f"views[{name!r}] reads {col!r}; a collector's views read {OBS_KEY!r}")
    return ViewRequirement(SampleBatch.OBS, shift=vr.shift, padding=vr.padding,
                           used_for_compute_actions=vr.used_for_compute_actions, used_for_training=vr.used_for_training)


class TrajviewCollector(BaseCollector):  # type: ignore[misc]
    """TorchRL's collector interface over trajview's rollout workers.

    Args:
        create_env_fn: a callable returning a gymnasium env, or a TorchRL ``GymEnv`` / ``GymWrapper``.
        policy: a ``TensorDictModule`` (``in_keys``: ``"observation"`` and/or view names; ``out_keys``:
            ``"action"`` and anything else to keep).
        frames_per_batch: env steps per yielded batch (divisible by ``num_envs * max(num_workers, 1)``).
        total_frames: env steps before iteration stops (``-1``: never); rounded up to a whole batch.
        num_envs: envs per worker, stepped together.
        num_workers: ``0`` (the default): the envs run in this process; ``n``: ``n`` worker processes
            (trajview's `WorkerSet`), their batches joined.
        views: ``{name: tv.ViewRequirement("observation", ...)}``: keys the policy reads and the batches carry.
        seed: seeds the envs (env ``k`` gets ``seed + k``) and the workers' RNGs.
        exploration_type: TorchRL's ``ExplorationType`` while collecting (default ``RANDOM``).

    Each batch is ``[frames_per_batch]`` for one env, else ``[envs, frames_per_batch // envs]`` (one row per
    env, in time order), as TorchRL's collectors shape a batched env's. Rewards come as float32.
    """

    def __init__(
        self,
        create_env_fn: Callable[[], Any],
        policy: Any,
        frames_per_batch: int,
        total_frames: int = -1,
        *,
        num_envs: int = 1,
        num_workers: int = 0,
        views: Mapping[str, ViewRequirement] | None = None,
        seed: int | None = None,
        exploration_type: Any = ExplorationType.RANDOM,
    ) -> None:
        super().__init__()
        if not callable(create_env_fn):
            raise TypeError(f"create_env_fn must be a callable returning an env, got {type(create_env_fn).__name__}")
        if not hasattr(policy, "in_keys") or not callable(policy):
            raise TypeError(f"policy must be a TensorDictModule, got {type(policy).__name__}")
        self.frames_per_batch = positive_int("frames_per_batch", frames_per_batch)
        if isinstance(total_frames, bool) or not isinstance(total_frames, int) or (total_frames < 1 and total_frames != -1):
            raise ValueError(f"total_frames must be an int >= 1 or -1 (never stop), got {total_frames!r}")
        self.num_envs = positive_int("num_envs", num_envs)
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"num_workers must be an int >= 0, got {num_workers!r}")
        self.num_workers = num_workers
        slots = self.num_envs * max(num_workers, 1)
        if self.frames_per_batch % slots:
            raise ValueError(f"frames_per_batch ({frames_per_batch}) must be divisible by num_envs * num_workers "
                             f"({slots})")
        if total_frames > 0 and total_frames % self.frames_per_batch:
            total_frames = -(-total_frames // self.frames_per_batch) * self.frames_per_batch
        self.total_frames = total_frames
        self.policy = policy
        self._views = {str(k): _obs_view(str(k), v) for k, v in (views or {}).items()}
        self._create_env_fn = create_env_fn
        self._exploration_type = exploration_type
        self._seed = seed
        self._resets = 0
        self._frames = 0
        self._iter = -1
        self._runner: Any = None
        self._build()

    # -- workers -------------------------------------------------------------------------------------------

    def _build(self) -> None:
        self._stop_runner()
        make = self._create_env_fn
        cls = _policy_class(self.policy, self._views, self._exploration_type)
        seed = self._seed
        if seed is not None and self._resets:
            seed += self._resets * self.num_envs * max(self.num_workers, 1)
        kw: dict[str, Any] = {"num_envs": self.num_envs, "seed": seed,
                              "rollout_fragment_length": self.frames_per_batch // (self.num_envs * max(self.num_workers, 1))}
        creator = _EnvCreator(make)
        if self.num_workers:
            self._runner = WorkerSet(creator, cls, num_workers=self.num_workers, **kw)
        else:
            self._runner = RolloutWorker(creator, cls, **kw)

    def _stop_runner(self) -> None:
        if self._runner is not None:
            self._runner.stop()
            self._runner = None

    def _to_tensordict(self, batch: SampleBatch) -> TensorDictBase:
        td = batch.to_tensordict(obs_key=OBS_KEY)
        reward = td.get(("next", "reward"))
        if reward.dtype != torch.float32:
            td.set(("next", "reward"), reward.to(torch.float32))
        for k in ("env_id", "t", "unroll_id", "agent_index", "is_init"):
            td.pop(k, None)
        slots = self.num_envs * max(self.num_workers, 1)
        if slots == 1:
            return td
        env = np.asarray(batch["env_id"]) if "env_id" in batch else np.zeros(len(batch), np.int64)
        if self.num_workers:  # worker i's env k: its rows follow worker i's batch
            per = len(batch) // self.num_workers
            env = env + self.num_envs * (np.arange(len(batch)) // per)
        order = torch.from_numpy(np.argsort(env, kind="stable"))
        return td[order].reshape(slots, -1)

    # -- TorchRL's collector interface ---------------------------------------------------------------------

    def iterator(self) -> Iterator[TensorDictBase]:
        while self.total_frames == -1 or self._frames < self.total_frames:
            if self._runner is None:
                raise RuntimeError("TrajviewCollector: shut down; make a new one")
            batch = self._runner.sample()
            td = self._to_tensordict(batch)
            self._frames += td.numel()
            self._iter += 1
            yield td

    def update_policy_weights_(self, policy_or_weights: Any = None, *args: Any, **kwargs: Any) -> None:
        """Weights of the collector's policy (the module it was given, or ``policy_or_weights``: a module or
        its ``state_dict`` / TensorDict of weights) to its workers. In-process, the module is the one the
        collector runs: loading ``policy_or_weights`` into it is all there is to do."""
        if policy_or_weights is not None:
            if isinstance(policy_or_weights, torch.nn.Module):
                state = policy_or_weights.state_dict()
            elif isinstance(policy_or_weights, TensorDictBase):
                state = policy_or_weights.flatten_keys(".").to_dict()
            else:
                state = dict(policy_or_weights)
            self.policy.load_state_dict(state)
        if self.num_workers and self._runner is not None:
            self._runner.set_weights({k: v.detach().cpu().numpy() for k, v in self.policy.state_dict().items()})

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds the envs (env ``k``: ``seed + k``); their episodes start over. Returns the last seed used."""
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an int, got {seed!r}")
        self._seed, self._resets = seed, 0
        self._build()
        return seed + self.num_envs * max(self.num_workers, 1) - 1

    def reset(self, index: Any = None, **kwargs: Any) -> None:
        """Every env starts a new episode (with a seed: the next seeds in line)."""
        if index is not None:
            raise ValueError("TrajviewCollector.reset resets every env (index=None)")
        self._resets += 1
        self._build()

    def shutdown(self, timeout: float | None = None, close_env: bool = True, raise_on_error: bool = True) -> None:
        self._stop_runner()

    def state_dict(self) -> OrderedDict:
        return OrderedDict(policy_state_dict=self.policy.state_dict(), frames=self._frames, iter=self._iter)

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        if not isinstance(state_dict, Mapping) or not {"policy_state_dict", "frames", "iter"} <= set(state_dict):
            raise ValueError("TrajviewCollector.load_state_dict: expected policy_state_dict, frames and iter")
        frames, it = state_dict["frames"], state_dict["iter"]
        if type(frames) is not int or frames < 0 or type(it) is not int:
            raise ValueError(f"TrajviewCollector.load_state_dict: frames and iter must be ints, got {frames!r}, {it!r}")
        self.policy.load_state_dict(state_dict["policy_state_dict"])
        self._frames, self._iter = frames, it
        self.update_policy_weights_()

    def __len__(self) -> int:
        if self.total_frames == -1:
            raise RuntimeError("TrajviewCollector: total_frames=-1 has no length")
        return self.total_frames // self.frames_per_batch

    def __del__(self) -> None:
        try:
            self._stop_runner()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __repr__(self) -> str:
        return (f"TrajviewCollector(frames_per_batch={self.frames_per_batch}, total_frames={self.total_frames}, "
                f"num_envs={self.num_envs}, num_workers={self.num_workers}, views={sorted(self._views)})")


class _EnvCreator:
    """trajview's ``env_creator(env_config)`` from TorchRL's ``create_env_fn()``."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make

    def __call__(self, env_config: Mapping[str, Any]) -> Any:
        return gym_env(self.make())
