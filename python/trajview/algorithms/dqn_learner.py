"""DQN's gradient step and greedy actions in numpy for `DQNPolicy`'s Q-network (issue 25; config "learner").

The same step as `DQNPolicy.learn_on_replay` under autograd and torch's Adam, up to float32 rounding (the
Q-network's forward, the target network's values of the next stack, double DQN's or DQN's target, the Huber
loss with prioritized replay's weights, the backward pass, the gradient-norm clip, Adam; `trajview.algorithms.
numpy_nets` has the parts), on a flat buffer that the Q-network's parameters and Adam's moments view (so the
optimizer's state dict is torch's Adam state, and a checkpoint resumes under either learner). The eager torch
step costs about 2 ms on the CPU for the zoo's 256x256 network at 64 rows, most of it per-op overhead.

`supported` says which policies it takes: `DQNPolicy` itself (not a subclass that changes ``learn_on_replay``
or acting), on the CPU, with torch's Adam without weight decay. ``tests/test_dqn.py`` checks it against the
torch learner on random networks and settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import numpy as np

from .numpy_nets import Dense, FlatAdam, action_indices, adam_unsupported, blas_limit, dense_layers, flat_rows, flushed_denormals

__all__ = ["DQNLearner", "supported"]

_F32 = np.float32


def supported(policy: Any, base: Any) -> str | None:
    """None where `DQNLearner` can train and act for ``policy`` (a ``base``, `DQNPolicy`, that does not change its
    learning or acting); else why not, in a sentence."""
    cls = type(policy)
    if cls.learn_on_replay is not base.learn_on_replay or (
            cls.compute_actions_from_input_dict is not base.compute_actions_from_input_dict):
        return f"{cls.__name__} changes DQNPolicy's learn_on_replay or compute_actions_from_input_dict"
    if policy.device.type != "cpu":
        return f"the learner is on {policy.device}, not the CPU"
    q = policy.q
    body = dense_layers(list(q.body))
    if body is None or any(act != "relu" for _, act in body):
        return "the Q-network's body is not a ReLU MLP"
    return adam_unsupported(policy.optimizer, list(q.parameters()))


class _QNet:
    """A `QNetwork` as numpy: its body and heads as `Dense` views (of the gradients in ``grads`` too)."""

    def __init__(self, q: Any, grads: dict[int, np.ndarray] | None = None) -> None:
        self.body = Dense.of(dense_layers(list(q.body)) or [], grads)
        self.adv = Dense.of([(q.adv, None)], grads)
        self.value = None if q.value is None else Dense.of([(q.value, None)], grads)
        self.ptrs = [p.data_ptr() for p in q.parameters()]  # the tensors viewed

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, tuple]:
        """Q-values ``[B, actions]``, and what `backward` needs."""
        h = self.body.forward(x)
        a = self.adv.forward(h[-1])
        if self.value is None:
            return a[-1], (h, a, None)
        v = self.value.forward(h[-1])
        adv = a[-1]
        return v[-1] + adv - adv.mean(axis=1, keepdims=True), (h, a, v)

    def backward(self, cache: tuple, d_q: np.ndarray) -> None:
        h, a, v = cache
        if v is None or self.value is None:
            d_h = self.adv.backward(a, d_q, input_grad=True)
        else:  # q = v + a - mean(a)
            d_adv = self.adv.backward(a, d_q - d_q.mean(axis=1, keepdims=True), input_grad=True)
            d_v = self.value.backward(v, d_q.sum(axis=1, keepdims=True), input_grad=True)
            d_h = cast(np.ndarray, d_adv) + cast(np.ndarray, d_v)
        self.body.backward(h, cast(np.ndarray, d_h))


class DQNLearner:
    """`DQNPolicy.learn_on_replay` and its greedy actions, in numpy (the module docstring)."""

    def __init__(self, policy: Any, base: Any) -> None:
        why = supported(policy, base)
        if why is not None:
            raise ValueError(f"DQNPolicy config 'learner': 'numpy' cannot train this policy: {why}")
        self.policy, self.base = policy, base
        self._bind()

    def _bind(self) -> None:
        policy = self.policy
        self.flat = FlatAdam(list(policy.q.parameters()), lambda: policy.optimizer)
        self.online = _QNet(policy.q, self.flat.grads)
        self.target = _QNet(policy.target)

    def is_bound(self) -> bool:
        """Whether the Q-network's parameters and the optimizer's moments are still `FlatAdam`'s views."""
        return self.flat.is_bound()

    def _check(self, checked: bool = False) -> None:
        """Binds again where the parameters or Adam's moments are no longer the buffers' views (a loaded state), and
        views the target network's tensors again where they changed. ``checked``: `supported` was found None just
        now (`LearnerChoice.checked`), not asked again."""
        why = None if checked else supported(self.policy, self.base)  # (a parameter frozen, the optimizer's ... since)
        if why is not None:
            raise ValueError(f"DQNPolicy config 'learner': the numpy learner cannot train this policy any more: {why}")
        if not self.flat.is_bound():
            self._bind()
        if self.target.ptrs != [p.data_ptr() for p in self.policy.target.parameters()]:
            self.target = _QNet(self.policy.target)

    def greedy(self, stack: Any) -> np.ndarray:
        """The Q-network's argmax action of each row of ``stack`` (int64)."""
        if self.online.ptrs != [p.data_ptr() for p in self.flat.params]:  # (``param.data = ...``)
            self._check()
        q, _ = self.online.forward(flat_rows(stack))
        return np.argmax(q, axis=1).astype(np.int64)

    def learn(self, batch: Mapping[str, Any], weights: np.ndarray | None, checked: bool = False,
              repeat: bool = False) -> dict[str, Any]:
        """One gradient step (`DQNPolicy.learn_on_replay`'s); returns its loss, mean Q and absolute TD errors.
        ``checked``: as `_check`'s; ``repeat``: a later step of a run whose first step checked (`LearnerChoice.repeat`:
        nothing between them changed the policy), no `_check` at all, and the BLAS limit and the denormal mode are
        the block's (`DQNPolicy.learning_steps`)."""
        if repeat:
            return self._learn(batch, weights)
        self._check(checked)
        with blas_limit(), flushed_denormals():
            return self._learn(batch, weights)

    def _learn(self, batch: Mapping[str, Any], weights: np.ndarray | None) -> dict[str, Any]:
        cfg = self.policy.config
        s, s2 = flat_rows(batch["stack"]), flat_rows(batch["next_stack"])
        a = action_indices(batch["actions"], self.policy.action_start, self.policy.num_actions, "actions")
        r = np.asarray(batch["rewards"], dtype=_F32).reshape(-1)
        term = np.asarray(batch["terminateds"], dtype=_F32).reshape(-1)
        rows = np.arange(len(a))
        q_all, cache = self.online.forward(s)
        q = q_all[rows, a]
        q2_all, _ = self.target.forward(s2)
        if cfg["double_q"]:
            q2 = q2_all[rows, np.argmax(self.online.forward(s2)[0], axis=1)]
        else:
            q2 = q2_all.max(axis=1)
        y = r + _F32(cfg["gamma"]) * (_F32(1) - term) * q2
        td = q - y
        abs_td = np.abs(td)
        per = np.where(abs_td < 1, _F32(0.5) * td * td, abs_td - _F32(0.5))  # smooth_l1_loss, beta 1
        d = np.clip(td, _F32(-1), _F32(1))
        if weights is not None:
            w = np.asarray(weights, dtype=_F32).reshape(-1)
            per = per * w
            d = d * w
        loss = float(per.mean())
        d_q = np.zeros_like(q_all)
        d_q[rows, a] = d * _F32(1 / len(a))
        self.online.backward(cache, d_q)
        self.flat.clip(float(cfg["grad_clip"]))
        self.flat.step()
        return {"td_loss": loss, "q_mean": float(q.mean()), "td_errors": abs_td}
