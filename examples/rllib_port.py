"""An RLlib (old API stack) custom model and policy, ported to trajview.

The RLlib original (not run here; see docs/porting.md for the side by side)::

    class FrameStackModel(TorchModelV2, nn.Module):
        def __init__(self, obs_space, action_space, num_outputs, model_config, name, num_frames=4):
            TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
            nn.Module.__init__(self)
            self.view_requirements["prev_n_obs"] = ViewRequirement("obs", shift=f"-{num_frames - 1}:0", space=obs_space)
            self.view_requirements["prev_n_actions"] = ViewRequirement("actions", shift=f"-{num_frames}:-1",
                                                                       space=action_space)
            ...
        def forward(self, input_dict, state, seq_lens):
            x = torch.cat([input_dict["prev_n_obs"].flatten(1), one_hot(input_dict["prev_n_actions"])], 1)
            self._value = self.vf(x).squeeze(1)
            return self.pi(x), state
        def value_function(self):
            return self._value

    ModelCatalog.register_custom_model("frame_stack", FrameStackModel)
    config = (PPOConfig().api_stack(enable_rl_module_and_learner=False, enable_env_runner_and_connector_v2=False)
              .environment("StatelessCartPole")
              .env_runners(num_env_runners=0, num_envs_per_env_runner=8, rollout_fragment_length=250)
              .training(model={"custom_model": "frame_stack", "custom_model_config": {"num_frames": 4}}))

The trajview port below: the model is a plain ``torch.nn.Module`` whose
``view_requirements`` a `tv.TorchPolicy` merges into the policy's; the policy
(an advantage actor-critic, A2C-style) writes ``action_sampler``,
``postprocess_trajectory`` and ``loss``; a `tv.RolloutWorker` replaces the
config's env runner. ``padding="reset"`` gives RLlib's pre-episode frames
(copies of the first observation); trajview's default is zeros.

Checks: the training batch holds the views the model asked for and not the
ones nobody reads (pruned: ``prev_rewards``, ``infos``), the batch is exactly
``num_envs * rollout_fragment_length`` rows, and the loss on a fixed batch
decreases under a few gradient steps.

    python examples/rllib_port.py            # 10 iterations of sample + learn
    python examples/rllib_port.py --smoke    # a few seconds
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import trajview as tv
from trajview.algorithms import postprocessing

VR = tv.ViewRequirement


class FrameStackModel(nn.Module):
    """RLlib's FrameStackModel as a torch module: its inputs are only its ``view_requirements``."""

    def __init__(self, obs_space: gym.spaces.Box, action_space: gym.spaces.Discrete, num_frames: int = 4) -> None:
        super().__init__()
        self.num_frames = num_frames
        self.num_actions = int(action_space.n)
        self.view_requirements = {
            "prev_n_obs": VR("obs", shift=f"-{num_frames - 1}:0", space=obs_space, padding="reset"),
            "prev_n_actions": VR("actions", shift=f"-{num_frames}:-1", space=action_space),
        }
        in_dim = num_frames * (int(np.prod(obs_space.shape)) + self.num_actions)
        self.pi = nn.Sequential(nn.Linear(in_dim, 64), nn.Tanh(), nn.Linear(64, self.num_actions))
        self.vf = nn.Sequential(nn.Linear(in_dim, 64), nn.Tanh(), nn.Linear(64, 1))

    def features(self, prev_n_obs: torch.Tensor, prev_n_actions: torch.Tensor) -> torch.Tensor:
        one_hot = nn.functional.one_hot(prev_n_actions.long(), self.num_actions).float()
        return torch.cat([prev_n_obs.float().flatten(1), one_hot.flatten(1)], 1)

    def forward(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.features(batch["prev_n_obs"], batch["prev_n_actions"])
        return self.pi(x), self.vf(x).squeeze(1)


def to_torch(batch: tv.SampleBatch) -> dict[str, torch.Tensor]:
    """The batch's columns as tensors viewing its arrays (what TorchPolicy does before its loss)."""
    return {k: torch.from_numpy(np.asarray(batch[k])) for k in batch.keys()}


def categorical(logits: torch.Tensor, actions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(actions, their log-probabilities): sampled from ``logits`` unless given."""
    logp_all = torch.log_softmax(logits, -1)
    if actions is None:
        actions = torch.multinomial(logp_all.exp(), 1)[:, 0]
    return actions, logp_all.gather(1, actions.long()[:, None])[:, 0]


class A2CPolicy(tv.TorchPolicy):
    model: FrameStackModel

    def __init__(self, observation_space: Any, action_space: Any, config: dict[str, Any] | None = None) -> None:
        model = FrameStackModel(observation_space, action_space, num_frames=4)
        super().__init__(observation_space, action_space, {"lr": 1e-3, **(config or {})}, model=model)

    def action_sampler(
        self, input_dict: tv.SampleBatch, explore: bool | None
    ) -> tuple[torch.Tensor, list[torch.Tensor], dict[str, torch.Tensor]]:
        logits, value = self.model(input_dict)
        actions, _ = categorical(logits)
        return actions, [], {tv.SampleBatch.VF_PREDS: value}

    def postprocess_trajectory(
        self, sample_batch: tv.SampleBatch, other_agent_batches: dict[str, Any] | None = None, episode: Any = None
    ) -> tv.SampleBatch:
        # RLlib bootstraps a cut trajectory with the model's value of the next step's input dict; here that
        # input is the segment's last stack shifted by one frame (new_obs[-1] appended), built from its own views.
        def next_value(last_new_obs: np.ndarray) -> float:
            stack = np.concatenate([sample_batch["prev_n_obs"][-1, 1:], last_new_obs[None]])
            acts = np.append(sample_batch["prev_n_actions"][-1, 1:], sample_batch["actions"][-1])
            with torch.no_grad():
                x = self.model.features(torch.as_tensor(stack)[None], torch.as_tensor(acts)[None])
                return float(self.model.vf(x)[0, 0])

        return postprocessing.compute_gae_for_sample_batch(sample_batch, next_value, gamma=0.99, lambda_=0.95)

    def loss(self, train_batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        logits, value = self.model(train_batch)
        _, logp = categorical(logits, train_batch["actions"])
        adv = train_batch["advantages"].float()
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        loss: torch.Tensor = -(logp * adv).mean() + 0.5 * ((value - train_batch["value_targets"].float()) ** 2).mean()
        return loss


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="a few seconds: 2 iterations")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    iterations = 2 if args.smoke else 10

    # RLlib: num_envs_per_env_runner=8, rollout_fragment_length=250 -> batches of 8 * 250 = 2000 env steps.
    env = gym.make("trajview/StatelessCartPole-v1")
    policy = A2CPolicy(env.observation_space, env.action_space)
    worker = tv.RolloutWorker(
        lambda cfg: gym.make("trajview/StatelessCartPole-v1"), policy, num_envs=8, rollout_fragment_length=250,
        seed=args.seed,
    )
    for it in range(iterations):
        batch = worker.sample()
        assert len(batch) == 8 * 250
        stats = policy.learn_on_batch(batch)
        returns = worker.get_metrics()["episode_returns"]
        print(f"iteration {it + 1}: loss {stats['loss']:.3f}, mean return {np.mean(returns) if returns else float('nan'):.1f}")

    # Pruning: what neither the model, postprocessing nor the loss reads was never built.
    assert {"prev_n_obs", "prev_n_actions", "vf_preds", "advantages", "value_targets"} <= set(batch)
    assert "prev_rewards" not in batch and "infos" not in batch, sorted(batch)
    assert batch["prev_n_obs"].shape == (2000, 4, 2) and batch["prev_n_actions"].shape == (2000, 4)

    # The loss on one fixed batch goes down under gradient steps.
    fixed = to_torch(batch)
    with torch.no_grad():
        before = float(policy.loss(fixed))
    for _ in range(20):
        policy.learn_on_batch(batch)
    with torch.no_grad():
        after = float(policy.loss(fixed))
    print(f"loss on a fixed batch: {before:.4f} -> {after:.4f}")
    assert after < before
    worker.stop()
    print("ok: ported model's views built, unused views pruned, loss decreased")


if __name__ == "__main__":
    main()
