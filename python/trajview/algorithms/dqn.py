"""`DQNPolicy`: double DQN (dueling head and double Q optional) whose Q-network reads a frame stack that is a view.

Acting, the policy reads ``stack = obs@[-(k-1)..0]`` (the collector builds it,
zeros before the episode start). Learning, it reads replay samples whose
``stack`` and ``next_stack = obs@[-(k-2)..+1]`` are views built by the replay
buffer at sample time from observations stored once (``next_stack`` ends with
the episode's final observation at its last step). Target:
``r + gamma * (1 - terminated) * Q_target(s', argmax_a Q(s', a))`` (double
DQN; with ``double_q`` false, ``max_a Q_target(s', a)``: DQN as in the Nature
paper and Stable-Baselines3); Huber loss, optionally weighted by prioritized replay's importance
weights, whose new priorities are the absolute TD errors.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from .dqn_learner import DQNLearner, supported as numpy_supported
from .numpy_nets import LearnerChoice, action_indices, blas_limit, flushed_denormals
from .settings import check_dqn_settings
from ..policy import Policy
from ..policy.torch_policy import clip_grad_norm, numpy_state
from ..views import SampleBatch, ViewRequirement

__all__ = ["DQNPolicy", "QNetwork", "DEFAULT_DQN_CONFIG"]

#: The columns of a replay sample that `DQNPolicy.learn_on_replay` reads (torch's step and the numpy learner's).
REPLAY_COLUMNS = ("stack", "next_stack", "actions", "rewards", "terminateds")

DEFAULT_DQN_CONFIG: dict[str, Any] = {
    "num_frames": 4,
    "hidden": 256,
    "dueling": True,
    #: Double DQN's target (the online network picks the next action, the target network values it); False: the
    #: target network's max (DQN's, Stable-Baselines3's).
    "double_q": True,
    "lr": 1e-3,
    "gamma": 0.99,
    "grad_clip": 10.0,
    "target_update_interval": 500,  # gradient steps between hard target updates
    "seed": 0,
    #: torch's fused Adam (one kernel per step instead of ~8 ops per parameter tensor: a fifth of a gradient
    #: step of the default network on the CPU); the same update up to rounding.
    "adam_fused": True,
    #: Where the networks live and learn ("cpu", "cuda", a torch device string); actions come back as numpy.
    "device": "cpu",
    #: Who takes the gradient steps and picks the greedy actions: "numpy" (`trajview.algorithms.dqn_learner`: the
    #: same step in numpy on the parameters' memory, several times faster than eager torch on the CPU), "torch",
    #: or "auto": numpy where `dqn_learner.supported` takes the policy (on the CPU), torch elsewhere.
    "learner": "auto",
}


class QNetwork(nn.Module):
    """An MLP over a flattened ``[B, k, *obs_shape]`` stack; a dueling head (value + centred advantages)."""

    def __init__(self, in_features: int, num_actions: int, hidden: int, dueling: bool) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.dueling = dueling
        self.adv = nn.Linear(hidden, num_actions)
        self.value = nn.Linear(hidden, 1) if dueling else None

    def forward(self, stack: torch.Tensor) -> torch.Tensor:
        h = self.body(stack.flatten(1))
        a = self.adv(h)
        if self.value is None:
            return a
        return self.value(h) + a - a.mean(dim=1, keepdim=True)


class DQNPolicy(Policy):
    """Double DQN (or DQN: ``double_q``) on a frame-stack view (see the module docs). ``config``:
    `DEFAULT_DQN_CONFIG` keys."""

    def __init__(self, observation_space: Any, action_space: Any, config: dict | None = None) -> None:
        cfg = {**DEFAULT_DQN_CONFIG, **(config or {})}
        unknown = sorted(set(cfg) - set(DEFAULT_DQN_CONFIG))
        if unknown:
            raise ValueError(f"DQNPolicy: unknown config keys {unknown}; known: {sorted(DEFAULT_DQN_CONFIG)}")
        check_dqn_settings(cfg, str)  # (errors name the key: "num_frames must be an int >= 2, got 1")
        super().__init__(observation_space, action_space, cfg)
        k = int(cfg["num_frames"])
        if not hasattr(action_space, "n"):
            raise ValueError(f"DQN needs a Discrete action space, got {action_space}")
        self.num_frames = k
        self.num_actions = int(action_space.n)
        #: The first action (``Discrete(n, start=k)``): the Q-network's output i is action ``start + i``.
        self.action_start = int(getattr(action_space, "start", 0))
        self.view_requirements["stack"] = ViewRequirement("obs", shift=f"-{k - 1}:0")
        in_features = k * int(np.prod(observation_space.shape))
        torch.manual_seed(int(cfg["seed"]))
        self.device = torch.device(cfg["device"])
        self.q = QNetwork(in_features, self.num_actions, int(cfg["hidden"]), bool(cfg["dueling"])).to(self.device)
        self.target = copy.deepcopy(self.q).requires_grad_(False)
        # Acting runs on the CPU: one env step's batch is too small for a GPU to pay off. With the learner on
        # another device, a CPU copy of the Q-network acts, refreshed from the learner's at the first action after
        # its weights changed (a gradient step, `set_weights`, `set_state`).
        self._actor = self.q if self.device.type == "cpu" else copy.deepcopy(self.q).cpu().requires_grad_(False)
        self._actor_stale = False
        self._params = list(self.q.parameters())
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=float(cfg["lr"]), fused=bool(cfg["adam_fused"]) or None)
        self.epsilon = 1.0
        self.grad_steps = 0
        self._rng = np.random.default_rng(int(cfg["seed"]) + 1)
        self._learner_choice = LearnerChoice()
        if cfg["learner"] == "numpy":
            self.numpy_learner()  # (a ValueError now, saying why, where it cannot train this policy)

    def numpy_learner(self, learning: bool = False) -> DQNLearner | None:
        """The `DQNLearner` that takes this policy's gradient steps and greedy actions (config "learner"), or None
        where torch does (``learning``: checked again for a gradient step, `LearnerChoice`). Config "numpy" on a
        policy it cannot train raises a `ValueError` saying why."""
        return self._learner_choice.get(self.config["learner"], self.optimizer,
                                        lambda: numpy_supported(self, DQNPolicy), lambda: DQNLearner(self, DQNPolicy),
                                        learning)

    @contextlib.contextmanager
    def learning_steps(self) -> Iterator[None]:
        """A context for a run of `learn_on_replay` calls with nothing between them that changes the policy (a
        trainer's gradient steps): the numpy learner's support (`numpy_learner`) and its views of the parameters
        are checked at the first call, not at each (`LearnerChoice.held`), and numpy's BLAS thread limit is set
        once for the block (`blas_limit`), and where the numpy learner takes the steps, its denormal mode too
        (`flushed_denormals`): each later step of the block enters neither (`DQNLearner.learn`'s ``repeat``)."""
        with contextlib.ExitStack() as block:
            block.enter_context(self._learner_choice.held())
            block.enter_context(blas_limit())
            if self.numpy_learner() is not None:
                block.enter_context(flushed_denormals())
            yield

    def _q_changed(self) -> None:
        """The Q-network's weights changed: a CPU copy that acts (a learner elsewhere) is refreshed before the next
        action."""
        self._actor_stale = self._actor is not self.q

    def replay_views(self) -> dict[str, ViewRequirement]:
        """The views a replay sample needs: the stack and the next step's stack (``obs`` read up to ``+1``)."""
        k = self.num_frames
        return {"stack": ViewRequirement("obs", shift=f"-{k - 1}:0"),
                "next_stack": ViewRequirement("obs", shift=f"-{k - 2}:1")}

    def replay_columns(self) -> tuple[str, ...] | None:
        """The columns of a replay sample that `learn_on_replay` reads (`ReplayBuffer.sample`'s ``columns``: the
        trainer gathers no others), or None (every column) where a subclass, or a function set on this instance,
        changes how it learns."""
        cls, own = type(self), vars(self)
        if (cls.learn_on_replay is not DQNPolicy.learn_on_replay or cls._learn_torch is not DQNPolicy._learn_torch
                or "learn_on_replay" in own or "_learn_torch" in own):
            return None
        return REPLAY_COLUMNS

    def compute_actions_from_input_dict(
        self, input_dict: Mapping[str, Any], explore: bool | None = None, timestep: int | None = None, **kwargs: Any
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        learner = self.numpy_learner()
        if learner is not None:
            actions = learner.greedy(input_dict["stack"])
        else:
            stack = torch.as_tensor(np.asarray(input_dict["stack"], dtype=np.float32))
            if self._actor_stale:
                self._actor.load_state_dict(self.q.state_dict())
                self._actor_stale = False
            with torch.no_grad():
                actions = self._actor(stack).argmax(dim=1).numpy().astype(np.int64)
        if explore is not False and self.epsilon > 0:
            rand = self._rng.random(len(actions)) < self.epsilon
            actions[rand] = self._rng.integers(0, self.num_actions, int(rand.sum()))
        if self.action_start:
            actions += self.action_start
        return actions, [], {}

    def loss(self, train_batch: SampleBatch) -> Any:
        """Names what learning needs from the collector (the pruning pass calls it on a dummy batch): the
        replay buffer stores these columns; the stacks are built from ``obs`` at sample time."""
        return [train_batch[k] for k in ("obs", "new_obs", "actions", "rewards", "terminateds", "truncateds")]

    def learn_on_replay(self, batch: Mapping[str, Any], weights: np.ndarray | None = None) -> dict[str, Any]:
        """One gradient step on a replay sample (``stack``, ``next_stack``, ``actions``, ``rewards``,
        ``terminateds``); returns the loss, mean Q and ``td_errors`` (for priorities)."""
        learner = self.numpy_learner(learning=True)
        if learner is not None:
            choice = self._learner_choice
            out = learner.learn(batch, weights, checked=choice.checked, repeat=choice.repeat)
        else:
            out = self._learn_torch(batch, weights)
        self._q_changed()
        self.grad_steps += 1
        if self.grad_steps % int(self.config["target_update_interval"]) == 0:
            self.target.load_state_dict(self.q.state_dict())
        return out

    def _learn_torch(self, batch: Mapping[str, Any], weights: np.ndarray | None) -> dict[str, Any]:
        """`learn_on_replay`'s gradient step by torch (autograd, the optimizer)."""
        def tensor(key: str, dtype: Any) -> torch.Tensor:
            return torch.from_numpy(np.asarray(batch[key], dtype=dtype)).to(self.device)

        s, s2 = tensor("stack", np.float32), tensor("next_stack", np.float32)
        a = torch.from_numpy(action_indices(batch["actions"], self.action_start, self.num_actions, "actions"))
        a, r = a.to(self.device), tensor("rewards", np.float32)
        term = tensor("terminateds", np.float32)
        gamma = float(self.config["gamma"])
        q = self.q(s).gather(1, a[:, None]).squeeze(1)
        with torch.no_grad():
            if self.config["double_q"]:
                a2 = self.q(s2).argmax(dim=1, keepdim=True)
                q2 = self.target(s2).gather(1, a2).squeeze(1)
            else:
                q2 = self.target(s2).max(dim=1).values
            y = r + gamma * (1.0 - term) * q2
        td = q - y
        per = nn.functional.smooth_l1_loss(q, y, reduction="none")
        if weights is not None:
            per = per * torch.from_numpy(np.asarray(weights, dtype=np.float32)).to(self.device)
        loss = per.mean()
        self.optimizer.zero_grad()
        loss.backward()
        clip_grad_norm(self._params, float(self.config["grad_clip"]))
        self.optimizer.step()
        return {"td_loss": float(loss.detach()), "q_mean": float(q.detach().mean()),
                "td_errors": td.detach().abs().cpu().numpy()}

    def get_weights(self) -> dict[str, Any]:
        return numpy_state(self.q)

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        self.q.load_state_dict({k: torch.as_tensor(v) for k, v in weights.items()})
        self._q_changed()

    def get_state(self) -> dict:
        """Networks, optimizer, epsilon, step counter and the exploration RNG (for checkpoints)."""
        return {"q": self.q.state_dict(), "target": self.target.state_dict(), "optimizer": self.optimizer.state_dict(),
                "epsilon": self.epsilon, "grad_steps": self.grad_steps, "rng": self._rng.bit_generator.state}

    def set_state(self, state: dict) -> None:
        self.q.load_state_dict(state["q"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.epsilon = float(state["epsilon"])
        self.grad_steps = int(state["grad_steps"])
        self._rng.bit_generator.state = state["rng"]
        self._q_changed()
