"""The env-adapter seam: the small interface a `RolloutWorker` steps, one implementation per env kind.

A worker never looks at what kind of env it has; `make_adapter` does, once,
and the worker's sampler talks to one of two interfaces:

* `VectorEnvAdapter` (single agent): ``num_envs`` envs stepped together with
  one action array; observations, rewards and flags come back as arrays of
  ``num_envs`` rows. A list of ``gymnasium.Env`` (`GymEnvList`) and a
  ``gymnasium.vector.VectorEnv`` in either autoreset mode (`GymVectorEnv`)
  implement it.
* `MultiAgentEnvAdapter` (multi agent): per env, dicts keyed by agent id. An
  agent needs an action when it is in the observation dict of the env's last
  ``reset`` or ``step`` and is not done (RLlib's ``MultiAgentEnv`` rule;
  PettingZoo's ``ParallelEnv`` satisfies it as it is, see
  `PettingZooParallelEnv`).

Nested observation and action spaces (``Dict`` / ``Tuple``, see
`trajview.views.nest`): a `VectorEnvAdapter` returns such observations as
``{leaf column: [num_envs, *leaf_shape]}`` (``{"obs.image": ..., "obs.vec":
...}``) instead of one array, and takes such actions the same way
(``{"actions.a": ...}``); `ObsRows` and the functions below handle both forms.

Either way, a step of an env that ends an episode returns that episode's
*final* observation; the worker then asks for the next episode's first
observation with ``reset_envs`` (single agent) or ``reset`` (multi agent), so
the final and the reset observation are never confused, whatever the env's
autoreset convention.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ..views.nest import Nest

__all__ = [
    "ObsRows",
    "obs_spec",
    "EnvAdapter",
    "MultiAgentEnvAdapter",
    "MultiAgentEnvList",
    "MultiAgentStep",
    "VectorEnvAdapter",
    "VectorStep",
    "empty_rows",
    "set_rows",
    "take_rows",
]

#: Rows of observations: one array ``[n, *shape]``, or for a nested space ``{leaf column: [n, *leaf_shape]}``.
ObsRows = Any


def take_rows(rows: ObsRows, idx: Any) -> ObsRows:
    """``rows[idx]`` of every leaf."""
    if isinstance(rows, dict):
        return {k: v[idx] for k, v in rows.items()}
    return rows[idx]


def empty_rows(like: ObsRows, n: int, zeros: bool = False) -> ObsRows:
    """``n`` new rows of the dtypes and shapes of ``like``'s (zeros if asked)."""
    make = np.zeros if zeros else np.empty
    if isinstance(like, dict):
        return {k: make((n,) + v.shape[1:], dtype=v.dtype) for k, v in like.items()}
    return make((n,) + like.shape[1:], dtype=like.dtype)


def set_rows(dst: ObsRows, dst_idx: Any, src: ObsRows, src_idx: Any) -> None:
    """``dst[dst_idx] = src[src_idx]`` for every leaf."""
    if isinstance(dst, dict):
        for k, v in dst.items():
            v[dst_idx] = src[k][src_idx]
    else:
        dst[dst_idx] = src[src_idx]


def obs_spec(space: Any) -> tuple[np.dtype, tuple[int, ...]]:
    """(dtype, shape) of one observation of ``space``; a ValueError for a space without them."""
    dtype, shape = getattr(space, "dtype", None), getattr(space, "shape", None)
    if dtype is None or shape is None:
        raise ValueError(f"observation_space: space {space!r} has no fixed dtype and shape; trajview stores fixed-shape arrays")
    return np.dtype(dtype), tuple(int(d) for d in shape)


class VectorStep(NamedTuple):
    """One step of every env of a `VectorEnvAdapter`."""

    #: [num_envs, *obs_shape] (nested spaces: ``{leaf column: [num_envs, *leaf_shape]}``); for an env whose
    #: episode ended, its final observation.
    obs: Any
    rewards: np.ndarray  # [num_envs] float64
    terminateds: np.ndarray  # [num_envs] bool
    truncateds: np.ndarray  # [num_envs] bool
    #: One info dict per env, or None when the step was asked not to collect them.
    infos: list[dict] | None
    #: Whether any env's episode ended (terminated or truncated) in this step.
    any_done: bool
    #: With ``isolate_failures=True``: the rows (positions among the stepped envs) whose env raised; else None.
    failed: np.ndarray | None = None
    #: The exceptions of the failed envs, in the order of ``failed``.
    errors: tuple = ()


class MultiAgentStep(NamedTuple):
    """One step of one env of a `MultiAgentEnvAdapter`: dicts keyed by agent id."""

    obs: dict
    rewards: dict
    terminateds: dict
    truncateds: dict
    infos: dict


class EnvAdapter(ABC):
    """What every adapter has: the number of envs, what callbacks see as ``base_env``, and ``close``."""

    #: True for `MultiAgentEnvAdapter` s.
    multi_agent: bool = False
    #: Envs stepped together.
    num_envs: int
    #: The env object(s) as the user made them (``base_env`` in callbacks).
    base_env: Any
    #: Set once the env returned a numpy float32 (or float16) reward, and once it returned any other kind
    #: (a Python float or int, a numpy float64 or int, ...): see `reward_dtype`. Only `note_reward` sets them.
    saw_f32_rewards: bool = False
    saw_other_rewards: bool = False

    @property
    def reward_dtype(self) -> np.dtype:
        """The dtype of the env's rewards, the one rule for every adapter and space: float32 when every reward
        the env returned so far was a numpy float32 (or float16), else float64 (one other reward is enough:
        float32 would round it). Batches carry their rewards in it; the store keeps float64, which holds
        float32 rewards exactly."""
        if self.saw_f32_rewards and not self.saw_other_rewards:
            return np.dtype(np.float32)
        return np.dtype(np.float64)

    def note_reward(self, r: Any) -> None:
        """Records the kind of a checked reward ``r`` (an array, e.g. a VectorEnv's rewards: its dtype's)."""
        kind = r.dtype.type if isinstance(r, np.ndarray) else type(r)
        if kind is np.float32 or kind is np.float16:
            self.saw_f32_rewards = True
        else:
            self.saw_other_rewards = True

    @abstractmethod
    def close(self) -> None:
        """Closes every env."""


class VectorEnvAdapter(EnvAdapter):
    """``num_envs`` single-agent envs stepped together with one action array.

    Rows of every returned array are env indices ``0 .. num_envs - 1``.
    """

    multi_agent = False
    #: The space of one env's observation and action.
    observation_space: Any
    action_space: Any
    #: Whether `step` writes the observations into ``obs_out`` when given one (else it returns its own array).
    writes_obs_in_place: bool = False
    #: Whether `step` can step some envs only (``env_ids``): envs stepped one by one can, a VectorEnv cannot.
    can_step_some: bool = False

    def _nest(self, attr: str) -> Nest:
        """The `Nest` of the space ``self.<attr>``, made once per space."""
        space = getattr(self, attr)
        nest = self.__dict__.get("_nest_" + attr)
        if nest is None or nest.space is not space:
            nest = self.__dict__["_nest_" + attr] = Nest.from_space(space, attr)
        return nest

    @property
    def obs_nest(self) -> Nest:
        """The leaves of the observation space (`Nest.flat` for one array per step)."""
        return self._nest("observation_space")

    @property
    def action_nest(self) -> Nest:
        """The leaves of the action space."""
        return self._nest("action_space")

    @abstractmethod
    def reset(self, seed: int | None = None) -> tuple[np.ndarray, list[dict]]:
        """Resets every env: (first observations [num_envs, ...], one info dict per env).

        ``seed`` seeds env ``i`` with ``seed + i`` (a VectorEnv: as its own
        ``reset(seed=...)`` does); None leaves the envs' RNGs as they are.
        """

    @abstractmethod
    def step(
        self,
        actions: np.ndarray,
        obs_out: np.ndarray | None = None,
        need_infos: bool = False,
        isolate_failures: bool = False,
        env_ids: np.ndarray | None = None,
    ) -> VectorStep:
        """Steps every env with its row of ``actions`` (or only the envs ``env_ids``, if `can_step_some`).

        ``obs_out`` ([num_envs, ...] of the observation space's dtype and
        shape), when given, may receive the new observations in place (the
        returned ``obs`` is then ``obs_out``): a caller passes the store's own
        rows, so that big observations are written once. The returned arrays
        may be reused by the next call: copy what must outlive it.

        Rewards and flags are checked (`trajview.envs.checks`) and
        observations must fit the observation space: a bad value raises a
        ValueError naming the column and the env. If the step raises (an env's
        exception, a bad value, a KeyboardInterrupt), `moved_on` says which
        envs it may have changed. With ``isolate_failures=True`` an env's
        ``Exception`` does not stop the others: it is reported in the result's
        ``failed`` / ``errors`` instead (BaseExceptions such as
        KeyboardInterrupt still raise). With ``env_ids``, the rows of
        ``actions`` and of the result are those envs' (no ``obs_out`` then).
        """

    @abstractmethod
    def moved_on(self) -> np.ndarray:
        """After a `step` that raised: the envs it may have stepped (sorted indices).

        Their episodes cannot go on truthfully (their step was not stored):
        the caller ends them and resets those envs (`reset_envs`) before the
        next step. The other envs are as they were before the failed step.
        """

    def recreate(self, env_ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Closes the envs of ``env_ids`` and makes new ones in their place (after they raised).

        Returns the indices of every env that was replaced (some adapters can
        only replace all of them). Each replaced env must then be reset
        (`reset_envs`). Adapters made by `make_adapter` can; others raise.
        """
        raise NotImplementedError(
            f"{type(self).__name__} cannot recreate failed envs (restart_failed_sub_environments=True needs an "
            f"adapter made by trajview.envs.make_adapter from an env_creator)"
        )

    @abstractmethod
    def reset_envs(self, env_ids: Sequence[int] | np.ndarray) -> tuple[np.ndarray, list[dict]]:
        """The next episode's first observation (and info) for each env of ``env_ids``, whose episode ended.

        Call it after the step that returned ``terminated`` or ``truncated``
        for those envs, before the next ``step``.
        """


class MultiAgentEnvAdapter(EnvAdapter):
    """``num_envs`` multi-agent envs; per env, dicts keyed by agent id.

    An agent needs an action when it is in the observation dict of its env's
    last ``reset`` or ``step`` and is not terminated or truncated there.
    """

    multi_agent = True
    #: Every agent id an env may ever have, in a fixed order (its index is ``agent_index``).
    possible_agents: list

    @abstractmethod
    def observation_space(self, agent: Any) -> Any:
        """The observation space of ``agent``."""

    @abstractmethod
    def action_space(self, agent: Any) -> Any:
        """The action space of ``agent``."""

    @abstractmethod
    def reset(self, env_index: int, seed: int | None = None) -> tuple[dict, dict]:
        """Resets env ``env_index``: (observations by agent, infos by agent)."""

    @abstractmethod
    def step(self, actions: list[dict]) -> list[MultiAgentStep]:
        """Steps every env with ``actions[i]`` (agent id -> action); one `MultiAgentStep` per env.

        If it raises, `moved_on` says which envs it may have stepped.
        """

    @abstractmethod
    def moved_on(self) -> list[int]:
        """After a `step` that raised: the envs it may have stepped (their episodes cannot go on truthfully)."""


class MultiAgentEnvList(MultiAgentEnvAdapter):
    """``envs[i]`` is env ``i``, stepped one after the other; agents, their order and their spaces are ``envs[0]``'s.

    The shared part of the adapters for lists of multi-agent envs (PettingZoo
    parallel and AEC envs, RLlib-style dict envs): each implements `_step_one`
    and `reset` (and `_agents` and the spaces where they are not PettingZoo's,
    ``envs[0].possible_agents`` and ``envs[0].observation_space(agent)``);
    ``moved_on`` knows which envs a step that raised reached.
    """

    def __init__(
        self, envs: Sequence[Any], env_creator: Any = None, env_config: dict | None = None
    ) -> None:
        self._creator = env_creator
        self._config = dict(env_config or {})
        self._stepping = -1
        self.envs = list(envs)
        self.num_envs = len(self.envs)
        self.base_env = self.envs
        self.possible_agents = self._agents(self.envs[0])

    def _agents(self, env: Any) -> list:
        """Every agent id ``env`` may have, in a fixed order."""
        return list(env.possible_agents)

    def observation_space(self, agent: Any) -> Any:
        """``envs[0].observation_space(agent)`` (PettingZoo's API)."""
        return self.envs[0].observation_space(agent)

    def action_space(self, agent: Any) -> Any:
        """``envs[0].action_space(agent)``."""
        return self.envs[0].action_space(agent)

    @abstractmethod
    def _step_one(self, i: int, env: Any, actions: dict) -> MultiAgentStep:
        """Steps env ``i`` with its agents' ``actions``; its result, checked."""

    def step(self, actions: list[dict]) -> list[MultiAgentStep]:
        out = []
        for i, env in enumerate(self.envs):
            self._stepping = i
            res = self._step_one(i, env, actions[i])
            if not self.saw_other_rewards:
                self.note_rewards(res.rewards)
            out.append(res)
        self._stepping = -1
        return out

    def note_rewards(self, rewards: dict) -> None:
        """`note_reward` of each of one env step's checked rewards (by agent), until one is not a float32."""
        for r in rewards.values():
            self.note_reward(r)

    def moved_on(self) -> list[int]:
        return list(range(self._stepping + 1))

    def close(self) -> None:
        for env in self.envs:
            close = getattr(env, "close", None)
            if callable(close):
                close()
