"""`RolloutWorker`: steps envs with a policy and returns batches of exactly the views the policy asked for."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, cast, overload

from .._validate import positive_int
from ..collect.collector import Collector
from ..envs.base import MultiAgentEnvAdapter, VectorEnvAdapter
from ..envs.make import make_adapter
from ..policy.policy import Policy
from ..views import MultiAgentBatch, SampleBatch
from .agent_episode import AgentEpisodes
from .callbacks import Callbacks
from .config import RolloutConfig
from .env_sampler import EnvSampler
from .filter import Filter, NoFilter, filter_shape, make_filter
from .hooks import Hooks
from .metrics import EpisodeMetrics
from .multi_agent import MultiAgentSampler
from .options import BatchT
from .plan import view_snapshot
from .single_agent import DEFAULT_POLICY_ID, SingleAgentSampler

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .options import MultiAgentEnvCreator, SingleAgentEnvCreator, WorkerOptions

__all__ = ["DEFAULT_POLICY_ID", "RolloutWorker"]


#: The names of `RolloutConfig.validated`'s arguments (each one an argument of `RolloutWorker` too).
_CONFIG_ARGS = tuple(inspect.signature(RolloutConfig.validated).parameters)


class RolloutWorker(Generic[BatchT]):
    """Collects experience from gymnasium or PettingZoo envs (docs/contract.md, Rollouts).

    ``env_creator`` is a registered gymnasium env id (``"CartPole-v1"``:
    ``gym.make(env_id, **env_config)``, as RLlib) or a callable;
    ``env_creator(env_config)`` returns a ``gymnasium.Env`` (the worker makes
    ``num_envs`` of them and steps them together), a
    ``gymnasium.vector.VectorEnv`` (any autoreset mode; its ``num_envs`` is
    used), a PettingZoo ``ParallelEnv`` or ``AECEnv`` or an env with RLlib's
    ``MultiAgentEnv`` dict API (multi-agent: ``policy`` is then a dict
    ``policy_id -> Policy`` with ``policy_mapping_fn(agent_id, episode)`` or
    RLlib's ``(agent_id, episode, worker, **kwargs)``, and ``sample()``
    returns a `MultiAgentBatch`), or any `trajview.envs.EnvAdapter`.
    ``explore`` is passed to the policy (``sample(explore=...)`` for one
    call); ``observation_filter="MeanStdFilter"`` filters observations as
    RLlib does (``filters``, ``get_filters``, ``sync_filters``; a ``Dict`` /
    ``Tuple`` observation: one running mean / std per ``Box`` leaf, its
    ``Discrete`` / ``MultiDiscrete`` / ``MultiBinary`` leaves unchanged). Every step is stored once in a C++
    `Collector` (one per policy); ``sample()`` returns a `SampleBatch` with
    the policy's training views, postprocessed one episode segment at a time.

    The first ``sample()`` runs the policy's view-pruning pass. If the
    policy's ``view_requirements`` change between ``sample()`` calls, the next
    call builds a new store and restarts every episode (so that each view
    holds from t = 0); episodes in progress are dropped without
    ``on_episode_end``.

    ``horizon`` / ``soft_horizon`` as RLlib's old configs (docs/contract.md).
    Multi-agent, at a soft horizon: agents observed at that step start new
    trajectories from that observation; an agent waiting for its turn keeps
    its step open until its next observation (its ``new_obs``, with every
    reward since it acted), and only then starts its new trajectory (see
    docs/porting-from-rllib.md).

    Faults (docs/contract.md, Faults): if anything raises inside
    ``sample()``, the worker stays consistent (no transition that did not
    happen, none twice, no gap inside an episode; the next ``sample()``
    returns exactly the batch asked). An episode that cannot go on
    truthfully is cut at its last stored step, marked ``truncateds=True``,
    and its env reset. ``restart_failed_sub_environments=True`` recreates an
    env that raised (with ``env_creator``; its episode is cut, the others go
    on) instead of raising. ``nan_outputs`` ("raise" or "allow") says what
    NaN in the policy's float outputs gets. ``get_metrics()`` keeps the newest
    ``metrics_window`` finished episodes.

    ``lazy_views`` (default ``True``: columns with rows of 1 KiB or more, e.g.
    image frames) makes the views of big columns `LazyView` s in the returned
    batch: each frame once plus an index, so a 4-frame stack and ``new_obs``
    add no copies; reading a column materializes it, ``TorchPolicy`` gathers on
    its device. ``False`` copies every view out (see `Collector`).

    Typing: a worker whose ``env_creator`` returns a gymnasium ``Env`` or
    ``VectorEnv`` (or a `VectorEnvAdapter`), with one policy, is a
    ``RolloutWorker[SampleBatch]``; one over an env with ``possible_agents``
    (a PettingZoo ``ParallelEnv``, a `MultiAgentEnvAdapter`) or with a dict of
    policies is a ``RolloutWorker[MultiAgentBatch]``. So ``worker.sample()``
    needs no cast; an ``env_creator`` typed to return ``Any`` gives ``Any``.
    """

    @overload
    def __init__(
        self: RolloutWorker[MultiAgentBatch],
        env_creator: MultiAgentEnvCreator,
        policy: Policy | type[Policy] | dict[str, Policy | type[Policy]],
        **options: Unpack[WorkerOptions],
    ) -> None: ...

    @overload
    def __init__(
        self: RolloutWorker[SampleBatch],
        env_creator: SingleAgentEnvCreator,
        policy: Policy | type[Policy],
        **options: Unpack[WorkerOptions],
    ) -> None: ...

    @overload
    def __init__(
        self: RolloutWorker[MultiAgentBatch],
        env_creator: Callable[[dict], Any],
        policy: dict[str, Policy | type[Policy]],
        **options: Unpack[WorkerOptions],
    ) -> None: ...

    def __init__(
        self,
        env_creator: str | Callable[[dict], Any],
        policy: Policy | type[Policy] | dict[str, Policy | type[Policy]],
        *,
        num_envs: int = 1,
        batch_mode: str = "truncate_episodes",
        rollout_fragment_length: int = 200,
        count_steps_by: str = "env_steps",
        horizon: int | None = None,
        soft_horizon: bool = False,
        no_done_at_end: bool = False,
        callbacks: Callbacks | None = None,
        env_config: dict | None = None,
        policy_mapping_fn: Callable | None = None,
        seed: int | None = None,
        worker_index: int = 0,
        lazy_views: bool | int = True,
        restart_failed_sub_environments: bool = False,
        nan_outputs: str = "raise",
        metrics_window: int = 1000,
        eps_id_offset: int = 0,
        explore: bool = True,
        observation_filter: Any = "NoFilter",
    ) -> None:
        given = locals()  # the arguments: those `RolloutConfig.validated` takes go to it by name
        self.config = RolloutConfig.validated(**{name: given[name] for name in _CONFIG_ARGS})
        num_envs = positive_int("num_envs", num_envs)
        if callbacks is not None and not isinstance(callbacks, Callbacks):
            raise TypeError(f"callbacks must be a tv.Callbacks instance, got {type(callbacks).__name__}")
        self.callbacks = callbacks if callbacks is not None else Callbacks()
        if env_config is not None and not isinstance(env_config, Mapping):
            raise ValueError(f"env_config must be a dict (or None), got {type(env_config).__name__} {env_config!r}")
        self.env_config = dict(env_config or {})

        self.adapter = make_adapter(env_creator, self.env_config, num_envs)
        self.num_envs = self.adapter.num_envs
        self.metrics = EpisodeMetrics(self.config.metrics_window)
        self.sampler: EnvSampler
        self.policy_mapping_fn: Callable | None
        if isinstance(self.adapter, MultiAgentEnvAdapter):
            self.policy_mapping_fn, self.policy_map = _multi_agent_policies(
                self.adapter, policy, policy_mapping_fn, self
            )
            self.hooks = Hooks(self.callbacks, self, self.adapter.base_env, self.policy_map)
            self.sampler = MultiAgentSampler(AgentEpisodes(
                self.adapter, self.policy_map, self.policy_mapping_fn, self.config, self.hooks, self.metrics
            ))
        else:
            assert isinstance(self.adapter, VectorEnvAdapter)
            self.policy_mapping_fn = policy_mapping_fn
            self.policy_map = {DEFAULT_POLICY_ID: _single_policy(self.adapter, policy)}
            self.hooks = Hooks(self.callbacks, self, self.adapter.base_env, self.policy_map)
            self.sampler = SingleAgentSampler(
                self.adapter, self.policy_map[DEFAULT_POLICY_ID], self.config, self.hooks, self.metrics
            )
        self.explore = bool(explore)
        #: RLlib's observation filters, one per policy (``observation_filter="MeanStdFilter"``): every
        #: observation is filtered before it is stored; `WorkerSet.sync_filters` syncs them across workers.
        #: A Dict / Tuple space: one running statistic per Box leaf, its other leaves passed through; a policy
        #: whose space has no Box part gets NoFilter (an error if no policy's has one).
        self.filters: dict[str, Filter] = {}
        for pid, p in self.policy_map.items():
            if observation_filter in ("NoFilter", None):
                self.filters[pid] = NoFilter()
                continue
            shape = filter_shape(p.observation_space)
            if shape is None and not isinstance(observation_filter, Filter):
                self.filters[pid] = NoFilter()
                continue
            self.filters[pid] = make_filter(observation_filter, shape)
        if observation_filter not in ("NoFilter", None) and all(isinstance(f, NoFilter) for f in self.filters.values()):
            spaces = {pid: p.observation_space for pid, p in self.policy_map.items()}
            raise ValueError(
                f"observation_filter={observation_filter!r} needs an observation space with a Box part (a Box, or a "
                f"Dict / Tuple with a Box leaf: Discrete, MultiDiscrete and MultiBinary parts are not filtered), "
                f"got {spaces}"
            )
        self.sampler.filters = {pid: f for pid, f in self.filters.items() if not isinstance(f, NoFilter)}
        self.policy = next(iter(self.policy_map.values()))
        self.base_env = self.adapter.base_env
        self._snapshot: dict | None = None  # the policies' views the stores were built for
        self._builds = 0

    # -- settings (read-only views of the config) ----------------------------------

    @property
    def batch_mode(self) -> str:
        return self.config.batch_mode

    @property
    def rollout_fragment_length(self) -> int:
        return self.config.rollout_fragment_length

    @property
    def count_steps_by(self) -> str:
        return self.config.count_steps_by

    @property
    def horizon(self) -> int | None:
        return self.config.horizon

    @property
    def seed(self) -> int | None:
        return self.config.seed

    @property
    def worker_index(self) -> int:
        return self.config.worker_index

    @property
    def collectors(self) -> dict[str, Collector]:
        """The store of each policy (empty before the first ``sample()``)."""
        return self.sampler.collectors

    @property
    def collector(self) -> Collector:
        """The (first) policy's store (None before the first ``sample()``)."""
        return next(iter(self.collectors.values()), cast(Collector, None))

    # -- sampling ---------------------------------------------------------------

    def sample(self, explore: bool | None = None) -> BatchT:
        """Runs the envs and returns one batch (docs/contract.md, Rollouts, for its size).

        ``explore`` (default: the worker's ``explore``) is passed to the
        policy's ``compute_actions_from_input_dict``; ``False`` for evaluation.
        """
        self.sampler.explore = self.explore if explore is None else bool(explore)
        snapshot = {pid: view_snapshot(p.view_requirements) for pid, p in self.policy_map.items()}
        if snapshot != self._snapshot:
            # First call, or views were added or changed: new stores, and
            # every episode restarts so that each view holds from t = 0.
            self.sampler.build(self._builds)
            self._builds += 1
            self._snapshot = {pid: view_snapshot(p.view_requirements) for pid, p in self.policy_map.items()}
        return cast(BatchT, self.sampler.sample())

    def get_filters(self, flush_after: bool = False) -> dict[str, Filter]:
        """Copies of the observation filters (RLlib's ``get_filters``); ``flush_after`` clears their buffers."""
        out = {pid: f.copy() for pid, f in self.filters.items()}
        if flush_after:
            for f in self.filters.values():
                f.reset_buffer()
        return out

    def sync_filters(self, new_filters: Mapping[str, Filter]) -> None:
        """Each filter becomes a copy of ``new_filters[policy_id]`` (RLlib's ``sync_filters``)."""
        for pid, f in new_filters.items():
            if pid in self.filters:
                self.filters[pid].sync(f)

    def get_metrics(self) -> dict:
        """Since the last call (then forgotten): ``episode_returns`` / ``episode_lengths`` of the finished
        episodes (the newest ``metrics_window``; ``episodes_dropped`` counts older ones), ``num_faulty_episodes``
        (cut by a fault) and ``num_env_restarts``."""
        return self.metrics.pop()

    def get_policy(self, policy_id: str = DEFAULT_POLICY_ID) -> Policy:
        return self.policy_map[policy_id]

    # -- RLlib's reach into the worker's envs and policies --------------------------

    def sub_environments(self) -> list[Any]:
        """The envs this worker steps, as the ``env_creator`` made them (RLlib's ``get_sub_environments``): the
        list of gymnasium / PettingZoo / multi-agent envs; a gymnasium ``SyncVectorEnv``'s ``envs``; another
        ``VectorEnv`` (async, envpool) or an `EnvAdapter` given as it is: that one object."""
        base = self.adapter.base_env
        if isinstance(base, list):
            return list(base)
        envs = getattr(base, "envs", None)
        if isinstance(envs, (list, tuple)):
            return list(envs)
        return [base]

    def foreach_env(self, func: Callable[[Any], Any]) -> list[Any]:
        """``[func(env) for env in sub_environments()]`` (RLlib's ``foreach_env``)."""
        return [func(env) for env in self.sub_environments()]

    def foreach_policy(self, func: Callable[..., Any], **kwargs: Any) -> list[Any]:
        """``[func(policy, policy_id, **kwargs) for each policy]`` (RLlib's ``foreach_policy``), in the order of
        ``policy_map``."""
        return [func(policy, pid, **kwargs) for pid, policy in self.policy_map.items()]

    def get_weights(self, policies: Iterable[str] | None = None) -> dict[str, Any]:
        """``{policy_id: policy.get_weights()}`` of ``policies`` (default: every policy), RLlib's ``get_weights``."""
        ids = list(self.policy_map) if policies is None else list(policies)
        self._check_policy_ids(ids, "get_weights")
        return {pid: self.policy_map[pid].get_weights() for pid in ids}

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        """Each policy ``policy_id`` in ``weights`` gets ``weights[policy_id]`` (`Policy.set_weights`; RLlib's
        ``set_weights``); the others keep theirs. If a policy refuses its weights, the policies set before it get
        their earlier weights back: the call changes nothing."""
        if not isinstance(weights, Mapping):
            raise TypeError(f"set_weights takes {{policy_id: weights}} (RLlib's), got {type(weights).__name__}")
        self._check_policy_ids(list(weights), "set_weights")
        done: list[tuple[str, Any]] = []
        try:
            for pid, w in weights.items():
                before = self.policy_map[pid].get_weights()
                self.policy_map[pid].set_weights(w)
                done.append((pid, before))
        except BaseException:
            for pid, before in reversed(done):
                self.policy_map[pid].set_weights(before)
            raise

    def _check_policy_ids(self, ids: list[str], what: str) -> None:
        unknown = [pid for pid in ids if pid not in self.policy_map]
        if unknown:
            raise KeyError(f"{what}: no policy {unknown} in this worker (its policies: {list(self.policy_map)})")

    def stop(self) -> None:
        """Closes the envs."""
        self.adapter.close()


def _single_policy(adapter: VectorEnvAdapter, policy: Any) -> Policy:
    if isinstance(policy, dict):
        raise TypeError("a dict of policies needs a multi-agent env (e.g. a PettingZoo ParallelEnv)")
    if isinstance(policy, type) and issubclass(policy, Policy):
        policy = policy(adapter.observation_space, adapter.action_space, {})
    if not isinstance(policy, Policy):
        raise TypeError(f"policy must be a tv.Policy instance or subclass, got {type(policy).__name__}")
    return policy


def mapping_caller(fn: Callable, worker: Any) -> Callable[[Any, Any], Any]:
    """``fn(agent_id, episode)`` for a ``policy_mapping_fn`` of either signature: trajview's
    ``(agent_id, episode)`` or RLlib's ``(agent_id, episode, worker, **kwargs)`` (``worker`` passed)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C callable: call it as trajview does
        return fn
    positional = [
        p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    var_pos = any(p.kind == p.VAR_POSITIONAL for p in params.values())
    var_kw = any(p.kind == p.VAR_KEYWORD for p in params.values())
    if "worker" in params and params["worker"].kind == params["worker"].KEYWORD_ONLY:
        return lambda agent_id, episode: fn(agent_id, episode, worker=worker)
    if len(positional) >= 3 or var_pos:
        if len(positional) >= 3 and positional[2].default is not positional[2].empty and positional[2].name != "worker":
            return fn  # a third optional argument that is not RLlib's worker
        return lambda agent_id, episode: fn(agent_id, episode, worker)
    if var_kw:
        return lambda agent_id, episode: fn(agent_id, episode, worker=worker)
    return fn


def _multi_agent_policies(
    adapter: MultiAgentEnvAdapter, policy: Any, policy_mapping_fn: Callable | None, worker: Any = None
) -> tuple[Callable, dict[str, Policy]]:
    policies = policy if isinstance(policy, dict) else {DEFAULT_POLICY_ID: policy}
    if policy_mapping_fn is None:
        if len(policies) != 1:
            raise ValueError(f"policy_mapping_fn is required with {len(policies)} policies ({sorted(policies)})")
        only = next(iter(policies))
        policy_mapping_fn = lambda agent_id, episode, **kw: only  # noqa: E731
    else:
        policy_mapping_fn = mapping_caller(policy_mapping_fn, worker)
    agents = adapter.possible_agents
    built = {}
    for pid, p in policies.items():
        if isinstance(p, type) and issubclass(p, Policy):
            agent = next((a for a in agents if policy_mapping_fn(a, None) == pid), agents[0])
            p = p(adapter.observation_space(agent), adapter.action_space(agent), {})
        if not isinstance(p, Policy):
            raise TypeError(f"policy {pid!r} must be a tv.Policy instance or subclass, got {type(p).__name__}")
        built[pid] = p
    return policy_mapping_fn, built
