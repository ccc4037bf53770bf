"""`Hooks`: calls a `Callbacks` object's hooks with RLlib's arguments, skipping the ones it does not override."""

from __future__ import annotations

from typing import Any

from .callbacks import Callbacks, Episode

__all__ = ["HOOK_NAMES", "Hooks"]

HOOK_NAMES = ("on_episode_start", "on_episode_step", "on_episode_end", "on_postprocess_trajectory", "on_sample_end")


class Hooks:
    """The callbacks of one worker, bound to what every hook is passed (worker, base_env, policies).

    ``"on_episode_step" in hooks`` says whether that hook is overridden, so
    samplers skip the per-step work a no-op hook would need.
    """

    def __init__(self, callbacks: Callbacks, worker: Any, base_env: Any, policies: dict) -> None:
        self.callbacks = callbacks
        self.worker = worker
        self.base_env = base_env
        self.policies = policies
        self.active = frozenset(h for h in HOOK_NAMES if getattr(type(callbacks), h) is not getattr(Callbacks, h))

    def __contains__(self, hook: str) -> bool:
        return hook in self.active

    def __bool__(self) -> bool:
        return bool(self.active)

    def episode_start(self, episode: Episode, env_index: int) -> None:
        if "on_episode_start" in self.active:
            self.callbacks.on_episode_start(
                worker=self.worker, base_env=self.base_env, policies=self.policies, episode=episode, env_index=env_index
            )

    def episode_step(self, episode: Episode, env_index: int) -> None:
        if "on_episode_step" in self.active:
            self.callbacks.on_episode_step(
                worker=self.worker, base_env=self.base_env, policies=self.policies, episode=episode, env_index=env_index
            )

    def episode_end(self, episode: Episode, env_index: int) -> None:
        if "on_episode_end" in self.active:
            self.callbacks.on_episode_end(
                worker=self.worker, base_env=self.base_env, policies=self.policies, episode=episode, env_index=env_index
            )

    def postprocess_trajectory(
        self, episode: Episode, agent_id: Any, policy_id: str, postprocessed: Any, original: dict
    ) -> None:
        if "on_postprocess_trajectory" in self.active:
            self.callbacks.on_postprocess_trajectory(
                worker=self.worker,
                episode=episode,
                agent_id=agent_id,
                policy_id=policy_id,
                policies=self.policies,
                postprocessed_batch=postprocessed,
                original_batches=original,
            )

    def sample_end(self, samples: Any) -> None:
        if "on_sample_end" in self.active:
            self.callbacks.on_sample_end(worker=self.worker, samples=samples)
