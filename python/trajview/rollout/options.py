"""Static typing of `RolloutWorker` and `WorkerSet`: which env creators and policies give which batch type.

Nothing here changes what runs; it lets a type checker know that a worker over
gymnasium envs returns `SampleBatch` es and one with a dict of policies returns
`MultiAgentBatch` es, so single-agent code indexes ``worker.sample()`` without
casts::

    worker = tv.RolloutWorker(lambda cfg: gym.make("CartPole-v1"), MyPolicy)   # RolloutWorker[SampleBatch]
    obs = worker.sample()["obs"]                                               # SampleBatch

The keyword options are listed once, as `TypedDict` s, for the overloads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, TypeVar, Union

from ..views import MultiAgentBatch, SampleBatch

if TYPE_CHECKING:
    import gymnasium as gym

    from ..envs.base import MultiAgentEnvAdapter, VectorEnvAdapter
    from .callbacks import Callbacks

__all__ = ["BatchT", "MultiAgentEnvLike", "WorkerOptions", "WorkerSetOptions"]

#: The batch type a worker's ``sample()`` returns: `SampleBatch` (single agent), `MultiAgentBatch` (multi-agent),
#: or their union where the env kind is not known statically.
BatchT = TypeVar("BatchT", bound=Union[SampleBatch, MultiAgentBatch])


class MultiAgentEnvLike(Protocol):
    """What the typing takes for a multi-agent env (a PettingZoo ``ParallelEnv``): it lists its agents."""

    possible_agents: Any


if TYPE_CHECKING:
    #: What an ``env_creator`` of a single-agent worker returns.
    SingleAgentEnv = Union["gym.Env[Any, Any]", "gym.vector.VectorEnv[Any, Any, Any]", VectorEnvAdapter]
    #: ... or a registered gymnasium env id (``"CartPole-v1"``: ``gym.make(env_id, **env_config)``).
    SingleAgentEnvCreator = Union[str, Callable[[dict[str, Any]], SingleAgentEnv]]
    #: What an ``env_creator`` of a multi-agent worker returns (first in the overloads: a ``ParallelEnv``
    #: subclass is typed as ``Any`` where PettingZoo has no type information, and must not pass as single-agent).
    MultiAgentEnvCreator = Callable[[dict[str, Any]], Union[MultiAgentEnvLike, MultiAgentEnvAdapter]]


class _SamplingOptions(TypedDict, total=False):
    num_envs: int
    batch_mode: str
    rollout_fragment_length: int
    count_steps_by: str
    horizon: int | None
    soft_horizon: bool
    no_done_at_end: bool
    callbacks: Callbacks | None
    env_config: dict[str, Any] | None
    policy_mapping_fn: Callable[..., str] | None
    seed: int | None
    lazy_views: bool | int
    restart_failed_sub_environments: bool
    nan_outputs: str
    metrics_window: int
    explore: bool
    observation_filter: Any


class WorkerOptions(_SamplingOptions, total=False):
    """The keyword arguments of `RolloutWorker` (see there for each one's meaning)."""

    worker_index: int
    eps_id_offset: int


class WorkerSetOptions(_SamplingOptions, total=False):
    """The keyword arguments of `WorkerSet`: its own, and every worker's (but ``worker_index``)."""

    num_workers: int
    backend: str
    start_method: str
    ray_options: dict[str, Any] | None
    recreate_failed_workers: bool
    max_restarts: int
    sample_timeout_s: float | None
    start_timeout_s: float | None
