"""PPO's SGD for the MLP models, in numpy on the parameters' own memory (issue 25).

At the sizes small-model RL trains at (two 64x64 tanh MLPs, minibatches of 256 rows), an SGD step of eager
torch on the CPU is bound by the cost of each op, not by its arithmetic: about 1.3 ms a step, of which the
matrix products are about 0.2 (``bench/learner_profile.py``; ``bench/fused_step.py`` found fusing the two
networks' ops into half as many gains 6%). `MLPLearner` takes the same step (forward, the PPO loss,
backward, the gradient clip, Adam) as a few dozen numpy calls on one flat buffer of the parameters: the
models' `torch.nn.Linear` weights are views of it, so acting, `get_weights`, checkpoints and export see the
weights it trains, and the optimizer's moments are views of two more, so that ``optimizer.state_dict()``
is torch's own Adam state (a checkpoint resumes under either learner).

It is the same arithmetic as `PPOPolicy.loss` under autograd and torch's Adam, up to float32 rounding
(``tests/test_mlp_learner.py`` checks gradients, updates and statistics against torch on random networks
and settings). `supported` says which policies it takes: `PPOPolicy` itself (not a subclass that changes
its loss or its learning), an `MLPModel` or `FrameStackModel` whose inputs have no weights (vector and
discrete observations), a Discrete action space, the CPU, float32, `torch.optim.Adam` without weight
decay, and the standard (not ``decoupled_clip``) objective. Elsewhere PPO trains with torch
(``config["learner"]``: "auto" picks this one where it is supported, "torch" never, "numpy" or an error
saying why not).

Its matrix products run on numpy's BLAS with as many threads as torch's intra-op pool
(``torch.get_num_threads()``, which ``trajview train --threads`` sets), through threadpoolctl when it is
installed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from ..views.sample_batch import SampleBatch
from .models.distributions import _CategoricalHead, draw_categorical
from .models.encoders import _OneHot, image_layout
from .models.framestack import FrameStackModel
from .models.mlp import MLPModel
from .numpy_nets import Dense, FlatAdam, action_indices, adam_unsupported, blas_limit, dense_layers, flat_rows, flushed_denormals
from .postprocessing import Postprocessing

__all__ = ["MLPActor", "MLPLearner", "model_supported", "supported"]

_F32 = np.float32


def _layers(net: Any) -> list[tuple[torch.nn.Linear, str | None]] | None:
    """``net``'s layers where it is ``Linear, Tanh, ..., Linear`` (`_mlp`'s shape), else None."""
    layers = dense_layers(list(net)) if type(net) is torch.nn.Sequential else None
    if not layers or layers[-1][1] is not None or any(act != "tanh" for _, act in layers[:-1]):
        return None
    return layers


def model_supported(policy: Any, base: Any) -> str | None:
    """None where `MLPActor` can act for ``policy`` (the module docstring, less the optimizer), a ``base``
    (`PPOPolicy`) that does not change ``base``'s acting; else why not."""
    return _model_check(policy, base)[0]


def _model_check(policy: Any, base: Any) -> tuple[str | None, list[torch.Tensor]]:
    """(`model_supported`'s answer, the two MLPs' parameters as `_params` lists them where it is None): the layers
    found once (the check runs before each update, `LearnerChoice`)."""
    cls = type(policy)
    if cls.action_sampler is not base.action_sampler:
        return f"{cls.__name__} changes PPOPolicy's action_sampler", []
    model = policy.model
    if type(model) not in (MLPModel, FrameStackModel):
        return f"the model is a {type(model).__name__}, not an MLPModel or FrameStackModel", []
    if model.pi_enc is not model.vf_enc or any(True for _ in model.pi_enc.parameters()):
        return "the model's observation encoder has weights (an image or another learned encoding)", []
    if isinstance(model, FrameStackModel) and model.act_enc is not None and any(True for _ in model.act_enc.parameters()):
        return "the model's action encoder has weights", []
    if type(model.action_dist) is not _CategoricalHead:
        return "the action space is not Discrete", []
    pi, vf = _layers(model.pi), _layers(model.vf)
    if pi is None or vf is None:
        return "the model's policy or value network is not a tanh MLP (Linear, Tanh, ..., Linear)", []
    params = _layer_params(pi + vf)
    if {id(p) for p in model.parameters()} != {id(p) for p in params}:
        return "the model has parameters outside its two MLPs", []
    if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in params):
        return "the model's parameters are not float32 tensors on the CPU", []
    return None, params


def supported(policy: Any, base: Any) -> str | None:
    """None where `MLPLearner` can train ``policy`` (the module docstring), a ``base`` (`PPOPolicy`) that does not
    change ``base``'s learning; else why not, in a sentence."""
    cls = type(policy)
    if cls.loss is not base.loss or cls.learn_on_batch is not base.learn_on_batch:
        return f"{cls.__name__} changes PPOPolicy's loss or learn_on_batch"
    if policy.config.get("decoupled_clip"):
        return "the decoupled objective (config 'decoupled_clip') is torch's alone"
    why, params = _model_check(policy, base)
    if why is not None:
        return why
    return adam_unsupported(policy.get_optimizer(), params)


def _params(model: Any) -> list[torch.Tensor]:
    """The two MLPs' weights and biases, layer by layer, the policy's first."""
    return _layer_params((_layers(model.pi) or []) + (_layers(model.vf) or []))


def _layer_params(layers: list[tuple[torch.nn.Linear, str | None]]) -> list[torch.Tensor]:
    """The weights and biases of ``layers`` (`_layers`), in order."""
    return [p for m, _ in layers for p in (m.weight, m.bias)]


def _vector_obs(model: Any) -> bool:
    """Whether the model's observation is a Box that is not an image (its encoder: `_Flat`, floats flattened)."""
    return type(model.obs_space) is gym.spaces.Box and image_layout(model.obs_space) is None


def _flat_key(model: Any) -> str | None:
    """The one view the model's input rows flatten, where they are that alone (a Box observation, not an image, and
    no previous actions or rewards in a frame stack): the encoder's `_Flat` rule, floats flattened per row."""
    if not _vector_obs(model):
        return None
    if isinstance(model, FrameStackModel):
        return "prev_n_obs" if model.act_enc is None and not model.prev_rewards else None
    return "obs"


class _FrameRows:
    """A frame stack's input rows computed in numpy where its observation is a vector Box and its previous actions
    (if it reads them) are one Discrete: the arithmetic of its encoders (`_Flat`'s floats flattened per row,
    `_OneHot`'s one-hot per frame, the rewards as floats), concatenated in `FrameStackModel._inputs`' order. A call
    returns None for what that rule does not take (an action space's padding zeros, 0 outside the space, and values
    outside it): the model's own encoders build those rows, or raise naming the space."""

    __slots__ = ("eye", "start", "rewards")

    def __init__(self, eye: np.ndarray | None, start: int, rewards: bool) -> None:
        self.eye, self.start, self.rewards = eye, start, rewards

    @classmethod
    def of(cls, model: Any) -> _FrameRows | None:
        """The rows' rule for ``model`` (checked once: a model's encoders do not change), None where it has none."""
        if not isinstance(model, FrameStackModel) or not _vector_obs(model):
            return None
        eye, start = None, 0
        if model.act_enc is not None:
            encs = list(model.act_enc.leaf_encoders)
            if len(encs) != 1 or not isinstance(encs[0], _OneHot) or not encs[0].discrete:
                return None
            eye, start = np.eye(encs[0].n, dtype=_F32), encs[0].start0
        return cls(eye, start, model.prev_rewards)

    def __call__(self, d: Mapping[str, Any]) -> np.ndarray | None:
        obs = d["prev_n_obs"]
        if not len(obs):
            return None
        parts = [flat_rows(obs)]
        eye = self.eye
        if eye is not None:
            a = d["prev_n_actions"]
            idx = (a.numpy() if isinstance(a, torch.Tensor) else np.asarray(a)).astype(np.int64)  # (`_OneHot`'s .long())
            if self.start:
                idx -= self.start
            if int(idx.min()) < 0:
                return None
            try:  # (np.take, not eye[idx]: 4-6x faster on these small rows; an index past the last raises)
                parts.append(np.take(eye, idx, axis=0).reshape(len(idx), -1))
            except IndexError:
                return None
        if self.rewards:
            parts.append(flat_rows(d["prev_n_rewards"]))
        return np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]


class _Reader:
    """The function from an input dict or batch to the rows both MLPs read (no weights make them:
    `model_supported`), as float32 numpy, its rule chosen once per model: the one view `_flat_key` names,
    flattened; else a frame stack's rows in numpy (`_FrameRows`); else (or where those return None) the model's own
    torch encoding. (A class, not a closure: an `MLPActor` holding it pickles with its policy.)"""

    __slots__ = ("model", "key", "frames")

    def __init__(self, model: Any) -> None:
        self.model = model
        self.key = _flat_key(model)
        self.frames = None if self.key is not None else _FrameRows.of(model)

    def numpy_rows(self, d: Mapping[str, Any]) -> np.ndarray | None:
        """The rows by the numpy rules (the one view, or a frame stack's rows), from arrays or CPU tensors; None
        where the model's torch encoding builds them (``d`` must then hold tensors: `__call__`)."""
        if self.key is not None:
            return flat_rows(d[self.key])
        return None if self.frames is None else self.frames(d)

    def __call__(self, d: Mapping[str, Any]) -> np.ndarray:
        x = self.numpy_rows(d)
        if x is not None:
            return x
        model = self.model
        with torch.no_grad():
            if isinstance(model, FrameStackModel):
                t, _ = model._inputs(d)
            else:
                from .models.spaces import get_nested

                t = model.pi_enc(get_nested(d, "obs", model.obs_space))
        return np.ascontiguousarray(t.numpy(), dtype=_F32)


def _categorical(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(log-probabilities, probabilities) of the categoricals over ``logits`` rows."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    total = e.sum(axis=1, keepdims=True)
    return shifted - np.log(total), e / total


def _nets(model: Any, grads: dict[int, np.ndarray] | None = None) -> tuple[Dense, Dense]:
    """The policy's and the value function's `Dense` networks (views of their parameters, and of their gradients
    in ``grads``: `FlatAdam.grads`)."""
    return Dense.of(_layers(model.pi) or [], grads), Dense.of(_layers(model.vf) or [], grads)


class MLPActor:
    """`PPOPolicy.action_sampler` for a policy `model_supported` takes, in numpy: the two MLPs' forward on the
    model's input rows, the categorical's probabilities, and the draw by `draw_categorical` (torch's generator, as
    the torch path draws), on views of the parameters (so always their current values)."""

    def __init__(self, policy: Any, base: Any) -> None:
        why = model_supported(policy, base)
        if why is not None:
            raise ValueError(f"PPOPolicy config 'learner': 'numpy' cannot act for this policy: {why}")
        self.policy = policy
        self.model = policy.model
        self._params = _params(self.model)
        self._read = _Reader(self.model)
        self._ptrs: list[int] = []
        self._nets: tuple[Dense, Dense] | None = None
        self._action_dtype: np.dtype | None = None  # the numpy dtype of the action head's torch dtype (`_dtype_of`)
        self._dtype_of: torch.dtype | None = None

    def _views(self) -> tuple[Dense, Dense]:
        ptrs = [p.data_ptr() for p in self._params]
        if ptrs != self._ptrs or self._nets is None:  # (new parameter tensors: `MLPLearner` binds them to its buffer)
            self._nets = _nets(self.model)
            self._ptrs = ptrs
        return self._nets

    def act(self, input_dict: Mapping[str, Any], explore: bool) -> tuple[torch.Tensor, list, dict[str, torch.Tensor]]:
        """`act_numpy`'s outputs as tensors (viewing its arrays): what ``action_sampler`` returns."""
        actions, states, extra = self.act_numpy(input_dict, explore)
        return torch.from_numpy(actions), states, {k: torch.from_numpy(v) for k, v in extra.items()}

    def act_numpy(self, input_dict: Mapping[str, Any], explore: bool) -> tuple[np.ndarray, list, dict[str, np.ndarray]]:
        """The actions, ``[]`` (no state) and the extra fetches (``action_logp``, ``vf_preds``) of ``input_dict``'s rows
        (arrays or CPU tensors), as numpy arrays of their own: the torch path's values and draws."""
        pi, vf = self._views()
        x = self._read(input_dict)
        logp_all, probs = _categorical(pi.forward(x)[-1])
        values = vf.forward(x)[-1][:, 0]
        if explore:
            idx = draw_categorical(torch.from_numpy(probs)).numpy()  # (the torch path's draws)
        else:
            idx = np.argmax(logp_all, axis=1)
        logp = logp_all[np.arange(len(x)), idx]
        head = self.model.action_dist
        dtype = self._action_dtype
        if dtype is None or self._dtype_of is not head.dtype:
            self._dtype_of = head.dtype
            dtype = self._action_dtype = torch.empty(0, dtype=head.dtype).numpy().dtype
        actions = (idx + head.start if head.start else idx).astype(dtype, copy=False)
        return actions, [], {SampleBatch.ACTION_LOGP: logp, SampleBatch.VF_PREDS: np.ascontiguousarray(values)}

    def value(self, input_dict: Mapping[str, Any]) -> np.ndarray:
        """The value function's output for each row of ``input_dict`` (the arithmetic of `act`'s ``vf_preds``)."""
        _, vf = self._views()
        return vf.forward(self._read(input_dict))[-1][:, 0]


#: Most bytes of the shuffled rows `_shuffled` takes for several epochs at once.
TAKE_BYTES = 4 << 20


def _shuffled(cols: dict[str, np.ndarray], n_rows: int, size: int, epochs: int) -> Iterator[dict[str, np.ndarray]]:
    """``epochs`` epochs of minibatches of ``size`` rows of ``cols`` (`MLPLearner._columns`' arrays), as
    `PPOPolicy`'s `minibatches` shuffles them: each epoch's rows in the order of a ``torch.randperm`` of its own,
    drawn in turn; one minibatch of every row, unshuffled, where ``n_rows <= size``.

    The epochs' shuffles are drawn first (nothing between them draws from torch's generator: the same draws), and
    the rows taken for as many epochs at once as fit in `TAKE_BYTES`: three takes (``v[perm]`` in half the time:
    the input rows, the actions, and the float columns as the rows of one array, each minibatch's column a
    contiguous slice of its row) for all of them. Each torch or numpy call between two SGD steps cost several
    times its isolated time in a run (a randperm of 512 rows: 33 us against 4; issue 25)."""
    if n_rows <= size:
        for _ in range(epochs):
            yield cols
        return
    perms = [torch.randperm(n_rows).numpy() for _ in range(epochs)]
    scalars = np.stack([cols["old_logp"], cols["adv"], cols["targets"]])
    row_bytes = cols["x"].itemsize * math.prod(cols["x"].shape[1:]) + cols["actions"].itemsize + scalars.itemsize * 3
    per_take = max(1, TAKE_BYTES // max(1, n_rows * row_bytes))
    for e0 in range(0, epochs, per_take):
        idx = perms[e0] if per_take == 1 else np.concatenate(perms[e0 : e0 + per_take])
        x, a, s = np.take(cols["x"], idx, axis=0), np.take(cols["actions"], idx), np.take(scalars, idx, axis=1)
        for off in range(0, len(idx), n_rows):
            for i in range(off, off + n_rows, size):
                j = min(i + size, off + n_rows)  # (an epoch's last minibatch ends with its rows)
                yield {"x": x[i:j], "actions": a[i:j], "old_logp": s[0, i:j], "adv": s[1, i:j], "targets": s[2, i:j]}


class MLPLearner:
    """`PPOPolicy.learn_on_batch` for a policy `supported` takes, in numpy (the module docstring)."""

    def __init__(self, policy: Any, base: Any) -> None:
        why = supported(policy, base)
        if why is not None:
            raise ValueError(f"PPOPolicy config 'learner': 'numpy' cannot train this policy: {why}")
        self.policy = policy
        self.base = base
        self.flat = FlatAdam(_params(policy.model), policy.get_optimizer)
        self.pi, self.vf = _nets(policy.model, self.flat.grads)
        self._reader: _Reader | None = None  # (made for the policy's model at the first batch)

    def is_bound(self) -> bool:
        """Whether the parameters and the optimizer's moments are still `FlatAdam`'s views."""
        return self.flat.is_bound()

    # -- learning ----------------------------------------------------------------------------------------------

    def learn_on_batch(self, train_batch: SampleBatch, checked: bool = False) -> np.ndarray | None:
        """``num_sgd_iter`` epochs of shuffled minibatches, as `PPOPolicy.learn_on_batch` (the same shuffles:
        ``torch.randperm``); returns the loss terms' means over the minibatches (`PPOPolicy`'s ``STATS``; None
        without a minibatch) and sets ``last_stats_tensor`` to the last minibatch's. ``checked``: `supported` was
        found None just now (`LearnerChoice.checked`), not asked again."""
        policy = self.policy
        why = None if checked else supported(policy, self.base)  # (a parameter frozen, the optimizer's ... since)
        if why is not None:
            raise ValueError(f"PPOPolicy config 'learner': the numpy learner cannot train this policy any more: {why}")
        if SampleBatch.SEQ_LENS in train_batch:
            raise ValueError("PPOPolicy config 'learner': the numpy learner takes minibatches of random rows; this "
                             "batch has seq_lens (minibatches of whole sequences): config 'learner' 'auto' or "
                             "'torch' trains on it")
        if not self.flat.is_bound():
            self.flat = FlatAdam(_params(policy.model), policy.get_optimizer)
            self.pi, self.vf = _nets(policy.model, self.flat.grads)
        with blas_limit(), flushed_denormals():
            return self._learn(train_batch)

    def _learn(self, train_batch: SampleBatch) -> np.ndarray | None:
        policy = self.policy
        cols = self._columns(train_batch)
        cfg = policy.config
        size = int(cfg["sgd_minibatch_size"])
        n_rows = len(cols["actions"])
        group = policy.get_optimizer().param_groups[0]
        lr = float(policy.scheduled("lr"))
        group["lr"] = lr
        clip = float(policy.scheduled("clip_param"))
        ent = float(policy.scheduled("entropy_coeff"))
        grad_clip = cfg.get("grad_clip")
        sums = np.zeros(6)
        n = 0
        stats = np.zeros(6)
        for mb in _shuffled(cols, n_rows, size, int(cfg["num_sgd_iter"])):
            stats = self._step(mb, clip, float(cfg["vf_loss_coeff"]), ent, grad_clip)
            sums += stats
            n += 1
        policy.last_stats_tensor = torch.from_numpy(stats.astype(_F32))  # (torch.tensor's cast, without its Python)
        return None if n == 0 else sums / n

    def _columns(self, train_batch: SampleBatch) -> dict[str, np.ndarray]:
        """The arrays a step reads: the MLPs' input rows, actions (from 0), old logps, advantages, value targets."""
        policy = self.policy
        model = policy.model
        read = self._reader
        if read is None or read.model is not model:
            read = self._reader = _Reader(model)
        x = read.numpy_rows(train_batch)  # (from the batch's arrays: no tensors made of its other columns)
        if x is None:
            x = read(policy._to_torch(train_batch))
        head = model.action_dist
        return {
            "x": x,
            "actions": action_indices(train_batch[SampleBatch.ACTIONS], head.start, head.num_inputs, SampleBatch.ACTIONS),
            "old_logp": np.asarray(train_batch[SampleBatch.ACTION_LOGP], dtype=_F32).reshape(-1),
            "adv": np.asarray(train_batch[Postprocessing.ADVANTAGES], dtype=_F32).reshape(-1),
            "targets": np.asarray(train_batch[Postprocessing.VALUE_TARGETS], dtype=_F32).reshape(-1),
        }

    def _step(self, mb: Mapping[str, np.ndarray], clip: float, vf_coef: float, ent: float, grad_clip: Any) -> np.ndarray:
        """One minibatch's SGD step; returns its ``STATS`` (policy loss, vf loss, entropy, kl, clip fraction, total)."""
        x, a = mb["x"], mb["actions"]
        rows = np.arange(len(a))
        b = _F32(len(a))
        pi_acts, vf_acts = self.pi.forward(x), self.vf.forward(x)
        logits, values = pi_acts[-1], vf_acts[-1][:, 0]
        logp_all, probs = _categorical(logits)
        logp = logp_all[rows, a]
        adv = mb["adv"]
        adv = (adv - adv.mean()) / (adv.std() + _F32(1e-8))
        ratio = np.exp(logp - mb["old_logp"])
        s1 = ratio * adv
        s2 = np.clip(ratio, _F32(1 - clip), _F32(1 + clip)) * adv
        take1 = s1 <= s2  # where the unclipped term is the min (ties: both carry half, together the whole)
        entropy = -(logp_all * probs).sum(axis=1)
        diff = values - mb["targets"]
        policy_loss = -float(np.minimum(s1, s2).mean())
        vf_loss = float(np.mean(diff * diff))
        mean_entropy = float(entropy.mean())
        total = policy_loss + vf_coef * vf_loss - (ent * mean_entropy if ent else 0.0)
        stats = np.array([policy_loss, vf_loss, mean_entropy, float(np.mean(mb["old_logp"] - logp)),
                          float(np.mean(np.abs(ratio - 1) > clip)), total])
        # d loss / d logp, then / d logits: (one-hot - probs) per row; the entropy term's: probs * (logp + H).
        d_logp = np.where(take1, adv * ratio, _F32(0)) * (_F32(-1) / b)
        d_logits = probs * (-d_logp)[:, None]
        d_logits[rows, a] += d_logp
        if ent:
            d_logits += probs * (logp_all + entropy[:, None]) * _F32(ent / float(b))
        d_values = diff * _F32(2 * vf_coef / float(b))
        self.pi.backward(pi_acts, d_logits)
        self.vf.backward(vf_acts, d_values[:, None])
        self.flat.clip(grad_clip)
        self.flat.step()
        return stats
