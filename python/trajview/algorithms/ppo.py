"""PPO in torch over trajview's views: clipped objective, GAE, minibatch SGD epochs.

`PPOPolicy` is a `TorchPolicy` around one of `trajview.algorithms.models`
(or any `trajview.algorithms.models.ViewModel`). Advantages come from
`trajview.algorithms.postprocessing.compute_gae_for_sample_batch`, per episode
segment, bootstrapping truncated segments with the model's value of the *next
step's views* (frame stack, recurrent state, attention memory), built from the
segment's own rows. Training batches of recurrent models are split into
minibatches of whole sequences.

Actions come from the model's `ActionHead` (``model.action_dist``): a
categorical for Discrete, independent categoricals for MultiDiscrete,
Bernoullis for MultiBinary, and for Box a diagonal Gaussian with a learned
state-independent log-std, tanh-squashed into the bounds (the action the env
gets is the action stored, and its logp includes the squash's
change-of-variables term; see `trajview.algorithms.models.distributions`).
"""

from __future__ import annotations

import contextlib
import warnings

from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any, Literal

import numpy as np
import torch

from .models import ViewModel, make_action_head, make_model
from .models.base import _np_lens
from .postprocessing import Postprocessing, bootstraps, compute_gae_for_sample_batch, gae_of_segments
from .schedules import SCHEDULED, check_schedule, scheduled_value
from ..views.sample_batch import SampleBatch
from ..policy.torch_policy import TorchPolicy, clip_grad_norm, cloned_state, grads_clearer
from .settings import check_ppo_settings
from .mlp_learner import MLPActor, MLPLearner, model_supported as mlp_acts, supported as mlp_supported
from .numpy_nets import LearnerChoice

__all__ = ["PPOPolicy", "PPO_DEFAULTS", "PROX_LOGP", "minibatches"]

#: PPO's settings (RLlib's names where it has one).
PPO_DEFAULTS: dict[str, Any] = {
    "model": "mlp",
    "model_config": {},
    "lr": 3e-4,
    "gamma": 0.99,
    "lambda": 0.95,
    "clip_param": 0.2,
    "vf_loss_coeff": 0.5,
    "entropy_coeff": 0.0,
    "num_sgd_iter": 10,
    "sgd_minibatch_size": 256,
    "grad_clip": 0.5,
    "explore": True,
    #: torch's fused Adam (the same update in one kernel per parameter): several times faster than the default
    #: per-tensor loop for models with many small parameters (the GTrXL's 50), equal up to rounding.
    "adam_fused": False,
    #: The decoupled clipped objective for batches sampled with older weights (asynchronous sampling): the ratio
    #: is clipped against the policy at the start of the update (the proximal policy), not the behaviour policy,
    #: and each row is importance-weighted by proximal / behaviour probability (Hilton et al. 2021, "Batch
    #: size-invariance for policy optimization"). On a batch sampled with the learner's own weights it is the
    #: standard objective.
    "decoupled_clip": False,
    #: The schedules of lr, clip_param and entropy_coeff over the run (`trajview.algorithms.schedules`):
    #: "constant", or "linear" from the value to zero (SB3's linear_schedule) as `PPOPolicy.progress_remaining`
    #: goes from 1 to 0 (the trainer sets it before each update).
    "lr_schedule": "constant",
    "clip_schedule": "constant",
    "entropy_schedule": "constant",
    #: Who takes the SGD steps: "numpy" (`trajview.algorithms.mlp_learner.MLPLearner`: the same step in numpy on
    #: the parameters' memory, several times faster than eager torch for the small MLP models on the CPU), "torch",
    #: or "auto": numpy where `mlp_learner.supported` takes the policy (an MLP or frame-stack model over vector
    #: observations, a Discrete action space, the CPU), torch elsewhere.
    "learner": "auto",
}

#: The column `PPOPolicy.learn_on_batch` adds with ``decoupled_clip``: each row's action logp under the
#: weights at the start of the update.
PROX_LOGP = "prox_logp"

#: What `PPOPolicy.learn_on_batch` returns: each loss term's mean over the minibatches.
STATS = ("policy_loss", "vf_loss", "entropy", "kl", "clip_frac", "total_loss")


def minibatches(batch: Mapping[str, torch.Tensor], size: int, generator: torch.Generator | None = None,
                epochs: int = 1):
    """Shuffled minibatches of about ``size`` rows (dict-like mappings of tensors, every key of ``batch``), for
    ``epochs`` epochs one after the other (each shuffled anew, in turn: the same as as many calls of one epoch; what
    every epoch reads alike, e.g. the sequences' lengths and starts, is worked out once).

    Without ``seq_lens``: random rows. With ``seq_lens``: whole sequences
    (their rows end to end, their per-sequence ``state_in_i`` rows and
    ``seq_lens``), shuffled, grouped until a minibatch holds ``>= size`` rows.

    A column is gathered when a minibatch's key is first read (`_Gathered`): a loss reads about half of a training
    batch's columns (not ``state_out_i``, ``new_obs``, ``rewards``, ``eps_id``, ...); gathering every column took
    about 7% of the LSTM preset's SGD step.
    """
    seq_lens = batch.get(SampleBatch.SEQ_LENS)
    n_rows = len(batch[SampleBatch.ACTIONS])
    if n_rows <= size:  # one minibatch of every row: its order changes no mean, so it is not shuffled (nor copied)
        for _ in range(epochs):
            yield dict(batch)
        return
    if seq_lens is None:
        actions = batch[SampleBatch.ACTIONS]
        for _ in range(epochs):
            perm = torch.randperm(n_rows, generator=generator)
            if isinstance(actions, torch.Tensor) and actions.device != perm.device:
                perm = perm.to(actions.device)  # (once, to the columns' device: a learner on a GPU)
            shuffled = _Gathered(batch, lambda k, v, perm=perm: _rows(v, perm))  # one gather per column read
            for a in range(0, n_rows, size):
                yield _Gathered(shuffled, lambda k, v, a=a: v[a : a + size])  # (views)
        return
    # The index arithmetic in numpy (one int per sequence: `_np_lens`), each minibatch's indices sent once to the
    # columns' device (a learner on a GPU); the shuffle is torch's (its generator).
    device = seq_lens.device
    lens_of = _np_lens(seq_lens)
    n_seq = len(lens_of)
    starts = np.cumsum(lens_of) - lens_of
    per_seq = {k for k, v in batch.items() if k == SampleBatch.SEQ_LENS or (k.startswith("state_in_") and len(v) == n_seq)}
    on_cpu = device.type == "cpu"
    for _ in range(epochs):
        order = torch.randperm(n_seq, generator=generator).numpy()
        # Every row of the sequences in shuffled order, once per epoch: a minibatch's rows are a slice of it.
        lens = lens_of[order]
        ends = np.cumsum(lens)
        at = np.repeat(starts[order] - (ends - lens), lens) + np.arange(int(ends[-1]) if n_seq else 0)
        # Close a minibatch after the sequence that brings it to >= size rows.
        groups, rows_in, first, r0 = [], 0, 0, 0
        for j, L in enumerate(lens.tolist()):
            rows_in += L
            if rows_in >= size:
                groups.append((order[first : j + 1], at[r0 : r0 + rows_in]))
                r0, rows_in, first = r0 + rows_in, 0, j + 1
        if first < n_seq:
            groups.append((order[first:], at[r0:]))
        for group, group_rows in groups:
            seqs, rows = torch.from_numpy(group), torch.from_numpy(group_rows)
            if not on_cpu:
                seqs, rows = seqs.to(device), rows.to(device)
            yield _Gathered(batch, lambda k, v, seqs=seqs, rows=rows: _rows(v, seqs if k in per_seq else rows))


def _rows(column: Any, index: torch.Tensor) -> Any:
    """``column[index]`` (``index``: 1-D int64): a tensor's by ``index_select``, the same rows in 2-4x less time on
    the CPU than indexing's general machinery (which, unlike it, also takes an index on another device: sent to the
    column's here)."""
    if type(column) is not torch.Tensor:
        return column[index]
    if index.device != column.device:
        index = index.to(column.device)
    return column.index_select(0, index)


class _Gathered(MutableMapping):
    """`minibatches`' minibatch: ``batch``'s keys, each value ``gather(key, batch[key])``, computed when the key is
    first read and kept. A dict's ways besides (a loss may set, replace or delete a key of its minibatch; ``copy``:
    a dict of every column), none of which changes ``batch``."""

    __slots__ = ("_batch", "_gather", "_done", "_gone")

    def __init__(self, batch: Mapping[str, Any], gather: Any) -> None:
        self._batch, self._gather = batch, gather
        self._done: dict[str, Any] = {}  # the columns read (gathered) or set
        self._gone: set[str] = set()  # ``batch``'s keys deleted here

    def __getitem__(self, key: str) -> Any:
        done = self._done
        if key not in done:
            if key in self._gone:
                raise KeyError(key)
            done[key] = self._gather(key, self._batch[key])
        return done[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._done[key] = value
        self._gone.discard(key)

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        self._done.pop(key, None)
        if key in self._batch:
            self._gone.add(key)

    def __contains__(self, key: object) -> bool:
        return key in self._done or (key in self._batch and key not in self._gone)

    def __iter__(self) -> Iterator[str]:
        batch, gone = self._batch, self._gone
        yield from (k for k in batch if k not in gone)
        yield from (k for k in self._done if k not in batch)

    def __len__(self) -> int:
        batch = self._batch
        return len(batch) - len(self._gone) + sum(1 for k in self._done if k not in batch)

    def copy(self) -> dict[str, Any]:
        return dict(self)


class PPOPolicy(TorchPolicy):
    """Proximal policy optimization (clipped surrogate) for a view-fed model.

    Action spaces: Discrete, MultiDiscrete, MultiBinary and Box (a
    tanh-squashed diagonal Gaussian with a learned state-independent log-std,
    ``model_config["log_std_init"]``, default 0). Observation spaces: what the
    models' `SpaceEncoder` reads (vectors, images, discrete leaves, nested in
    Dict and Tuple).

    ``config``: `PPO_DEFAULTS` keys. ``model`` is a `ViewModel` instance, or
    built from ``config["model"]`` (a name in `trajview.algorithms.models.MODELS`) and
    ``config["model_config"]`` (its keyword arguments). A model without an
    ``action_dist`` gets ``make_action_head(action_space)`` as a submodule.
    """

    model: ViewModel  # set by TorchPolicy.__init__: the model given, or the one built here

    #: The bootstrap values `_postprocessing` computed, by segment (``id``: (the segment, its value)); None outside.
    _bootstrapped: dict[int, tuple[SampleBatch, float]] | None = None

    def __init__(self, observation_space: Any, action_space: Any, config: dict | None = None, *, model: ViewModel | None = None):
        cfg = {**PPO_DEFAULTS, **(config or {})}
        unknown = sorted(set(cfg) - set(PPO_DEFAULTS) - {"device"})
        if unknown:
            raise ValueError(f"PPOPolicy: unknown config keys {unknown}; known: {sorted([*PPO_DEFAULTS, 'device'])}")
        check_ppo_settings(cfg, lambda key: f"PPOPolicy config {key!r}")
        if model is None:
            model = make_model(cfg["model"], observation_space, action_space, **dict(cfg["model_config"]))
        if getattr(model, "action_dist", None) is None:
            model.action_dist = make_action_head(action_space)
        for key in SCHEDULED.values():
            check_schedule(f"PPOPolicy config {key!r}", cfg[key])
        super().__init__(observation_space, action_space, cfg, model=model)
        self.last_stats_tensor = torch.zeros(len(STATS))
        #: The run's progress remaining (`trajview.algorithms.schedules.progress_remaining`) that the scheduled
        #: settings are at (`scheduled`): 1 until the trainer sets it before an update.
        self.progress_remaining = 1.0
        self._learner_choice = LearnerChoice()
        self._mlp_actor: MLPActor | None | Literal[False] = None  # None: not checked yet; False: torch acts
        if cfg["learner"] == "numpy":  # what can be known now (the optimizer is checked at the first update)
            why = mlp_acts(self, PPOPolicy) or ("the decoupled objective (config 'decoupled_clip') is torch's alone"
                                                if cfg["decoupled_clip"] else None)
            if why is not None:
                raise ValueError(f"PPOPolicy config 'learner': 'numpy' cannot train this policy: {why}")

    def scheduled(self, name: str) -> float:
        """The value of ``name`` ("lr", "clip_param" or "entropy_coeff") now: its config value following its
        schedule (config "lr_schedule", "clip_schedule", "entropy_schedule": `trajview.algorithms.schedules`) at
        `progress_remaining`."""
        return scheduled_value(self.config[SCHEDULED[name]], float(self.config[name]), self.progress_remaining)

    # -- acting ---------------------------------------------------------------

    def numpy_actor(self) -> MLPActor | None:
        """The `MLPActor` that computes this policy's actions (config "learner" "numpy", or "auto" where
        `mlp_learner.model_supported` takes the model), or None where torch computes them."""
        actor = self._mlp_actor
        if actor is None or (isinstance(actor, MLPActor) and (actor.policy is not self or actor.model is not self.model)):
            mode = self.config["learner"]
            self._mlp_actor = (MLPActor(self, PPOPolicy) if mode == "numpy" or (
                mode == "auto" and mlp_acts(self, PPOPolicy) is None) else False)
        return self._mlp_actor or None

    def action_sampler(self, input_dict, explore):
        explore = self.config["explore"] if explore is None else explore
        actor = self.numpy_actor()
        if actor is not None:
            return actor.act(input_dict, bool(explore))
        dist_inputs, value, state_outs = self.model.forward_step(input_dict)
        dist = self.model.action_dist(dist_inputs)
        actions = dist.sample() if explore else dist.deterministic()
        return actions, state_outs, {SampleBatch.ACTION_LOGP: dist.logp(actions), SampleBatch.VF_PREDS: value}

    def _act_on_arrays(self, arrays, explore):
        """The numpy actor's outputs for ``arrays`` (a plain dict of arrays: a compute-actions input dict), read as
        they are (no tensors in between), where it computes this policy's actions (`numpy_actor`, and no
        ``action_sampler`` of a subclass or set on the instance, which computes them instead); else None.
        (`_NumpyActing.__call__` keeps this decision while what it reads is unchanged: a change to the rule here
        changes its test there too.)"""
        if "action_sampler" in self.__dict__ or type(self).action_sampler is not _ACTION_SAMPLER:
            return None
        actor = self.numpy_actor()
        if actor is None:
            return None
        return actor.act_numpy(arrays, bool(self.config["explore"] if explore is None else explore))

    def _reused_inputs(self, inputs):
        """`TorchPolicy._reused_inputs`; where the numpy actor computes the actions (`numpy_actor`), it reads the
        refilled arrays themselves (`_act_on_arrays`), and the torch path's function runs where it does not
        (any more)."""
        run = super()._reused_inputs(inputs)
        if run is None or type(self).action_sampler is not _ACTION_SAMPLER or self.numpy_actor() is None:
            return run  # (once torch acts, it does for good: `numpy_actor`)
        return _NumpyActing(self, dict(inputs), run)

    # -- postprocessing -----------------------------------------------------------

    def value_of_next_step(self, segment: SampleBatch) -> float:
        """The critic's value of the step after ``segment``'s last step (its views built from the segment): by the
        arithmetic that gave the segment's ``vf_preds`` (the `MLPActor`'s where it acts, else the model's). Inside
        `_postprocessing`, the value computed there for ``segment`` (the same object)."""
        pending = self._bootstrapped
        if pending is not None:
            hit = pending.get(id(segment))
            if hit is not None and hit[0] is segment:
                return hit[1]
        return float(self.values_of_next_steps([segment])[0])

    def values_of_next_steps(self, segments: Sequence[SampleBatch]) -> np.ndarray:
        """`value_of_next_step` of each of ``segments`` (float64, ``[len(segments)]``): one call of the critic on
        their bootstrap inputs stacked row after row (each row's value is its own, as in an acting call of many
        envs), or one call per segment where those inputs do not stack (`_stacked`)."""
        rows = [self.model.bootstrap_input(s) for s in segments]
        inputs = rows[0] if len(rows) == 1 else _stacked(rows)
        if inputs is None:
            return np.concatenate([self.values_of_next_steps([s]) for s in segments])
        return self._values_of(inputs, len(segments))

    def _values_of(self, inputs: Any, n: int) -> np.ndarray:
        """The critic's values (float64, ``[n]``) of bootstrap inputs (``n`` rows): the numpy actor's arithmetic
        where it acts, else the model's ``forward_step``."""
        actor = self.numpy_actor()
        values: Any
        if actor is not None:
            values = actor.value(self._to_torch(inputs))
        else:
            with torch.inference_mode():
                _, values, _ = self.model.forward_step(self._to_torch(inputs))
            values = values.detach().cpu().numpy()
        return np.asarray(values, np.float64).reshape(n)

    @contextlib.contextmanager
    def _postprocessing(self, segments: list[SampleBatch]) -> Iterator[None]:
        """`Policy._postprocessing`: the bootstrap values of the ``segments`` that need one (`bootstraps`: not
        ended by a termination) in one call of the critic (`values_of_next_steps`; per segment, they took 2-5% of a
        `trajview train` iteration: issue 25), which `value_of_next_step` then hands out. Only where
        ``postprocess_trajectory`` and ``value_of_next_step`` are this class's (an override may read other
        inputs)."""
        truncated = [s for s in segments if bootstraps(s)] if self._own_postprocessing() else []
        if len(truncated) > 1:
            values = self.values_of_next_steps(truncated)
            self._bootstrapped = {id(s): (s, float(v)) for s, v in zip(truncated, values)}
        try:
            yield
        finally:
            self._bootstrapped = None

    def _own_postprocessing(self) -> bool:
        """Whether ``postprocess_trajectory`` and ``value_of_next_step`` are this class's (an override may read
        other inputs, or compute otherwise)."""
        cls = type(self)
        return (cls.postprocess_trajectory is _POSTPROCESS_TRAJECTORY and cls.value_of_next_step is _VALUE_OF_NEXT_STEP
                and "postprocess_trajectory" not in self.__dict__ and "value_of_next_step" not in self.__dict__)

    def flat_postprocessor(self) -> Callable[[SampleBatch, np.ndarray], SampleBatch] | None:
        """`Policy.flat_postprocessor`: `_postprocess_flat` where `postprocess_trajectory` and `value_of_next_step`
        are this class's, else None."""
        return self._postprocess_flat if self._own_postprocessing() else None

    def _postprocess_flat(self, batch: SampleBatch, lengths: np.ndarray) -> SampleBatch:
        """Every segment's GAE in one pass (`gae_of_segments`), with the bootstrap values of the segments not ended
        by a termination (`bootstraps`) in one call of the critic, on their inputs read from ``batch`` in one pass
        (the model's ``bootstrap_inputs_if_same``; else `values_of_next_steps` on their rows of ``batch``):
        `postprocess_trajectory`'s figures, segment by segment (the same float64 arithmetic)."""
        lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
        ends = np.cumsum(lengths)
        total = int(ends[-1]) if len(ends) else 0
        if total != len(batch):
            raise ValueError(f"{type(self).__name__}'s flat postprocessing: the segments' lengths sum to {total} "
                             f"rows, the batch has {len(batch)}")
        if len(batch) == 0:
            return batch  # (as `compute_gae_for_sample_batch` returns an empty segment)
        terminated = np.asarray(batch[SampleBatch.TERMINATEDS], dtype=bool)
        last_r = np.zeros(len(lengths))
        cut = np.flatnonzero((lengths > 0) & ~terminated[np.maximum(ends - 1, 0)])
        if len(cut):
            one_pass = getattr(self.model, "bootstrap_inputs_if_same", None)  # (a model that is no ViewModel: None)
            inputs = None if one_pass is None else one_pass(batch, ends[cut] - lengths[cut], ends[cut])
            last_r[cut] = (self.values_of_next_steps([batch[int(ends[k] - lengths[k]) : int(ends[k])] for k in cut])
                           if inputs is None else self._values_of(inputs, len(cut)))
        adv, targets = gae_of_segments(batch[SampleBatch.REWARDS], batch[SampleBatch.VF_PREDS], lengths, last_r,
                                       float(self.config["gamma"]), float(self.config["lambda"]))
        batch[Postprocessing.ADVANTAGES] = adv
        batch[Postprocessing.VALUE_TARGETS] = targets
        return batch

    def postprocess_trajectory(self, sample_batch, other_agent_batches=None, episode=None):
        return compute_gae_for_sample_batch(
            sample_batch,
            lambda _new_obs: self.value_of_next_step(sample_batch),
            gamma=float(self.config["gamma"]),
            lambda_=float(self.config["lambda"]),
        )

    # -- learning -------------------------------------------------------------------

    def loss(self, train_batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        cfg = self.config
        dist_inputs, values = self.model.forward_train(train_batch)
        dist = self.model.action_dist(dist_inputs)
        logp = dist.logp(train_batch[SampleBatch.ACTIONS])
        old_logp = torch.as_tensor(train_batch[SampleBatch.ACTION_LOGP]).float()
        adv = torch.as_tensor(train_batch[Postprocessing.ADVANTAGES]).float()
        adv = (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8)
        clip = self.scheduled("clip_param")
        prox_logp = train_batch.get(PROX_LOGP) if isinstance(train_batch, Mapping) else None
        # Standard PPO clips the ratio against the behaviour policy; the decoupled objective clips it against the
        # proximal policy and importance-weights each row from the behaviour policy to the proximal one.
        ratio = torch.exp(logp - (old_logp if prox_logp is None else prox_logp))
        surrogate = torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)
        if prox_logp is not None:
            surrogate = torch.exp(prox_logp - old_logp) * surrogate
        targets = torch.as_tensor(train_batch[Postprocessing.VALUE_TARGETS]).float()
        vf_loss = torch.mean((values - targets) ** 2)
        policy_loss = -surrogate.mean()
        total = policy_loss + float(cfg["vf_loss_coeff"]) * vf_loss
        entropy_coeff = self.scheduled("entropy_coeff")
        if entropy_coeff:
            entropy = dist.entropy().mean()
            total = total - entropy_coeff * entropy
        else:  # a zero coefficient: the entropy is only a statistic (no graph; the loss and gradients are the same)
            with torch.no_grad():
                entropy = dist.entropy().mean()
        with torch.no_grad():  # as one tensor (STATS' order): read once per learn_on_batch, not once per minibatch
            self.last_stats_tensor = torch.stack([
                policy_loss, vf_loss, entropy, torch.mean(old_logp - logp),
                torch.mean((torch.abs(ratio - 1) > clip).float()), total]).detach()
        return total

    @property
    def last_stats(self) -> dict[str, float]:
        """The last minibatch's loss terms (`STATS`), as floats."""
        return dict(zip(STATS, self.last_stats_tensor.tolist()))

    def logp_of_actions(self, tensors: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Each row's action logp (float32) under the current weights, in eval mode and without gradients: a training
        batch's tensors (`TorchPolicy._to_torch`) read by the model as in training (`ViewModel.forward_train`)."""
        with torch.no_grad():
            self.model.eval()
            dist_inputs, _ = self.model.forward_train(tensors)
            return self.model.action_dist(dist_inputs).logp(tensors[SampleBatch.ACTIONS]).float()

    def numpy_learner(self, learning: bool = False) -> MLPLearner | None:
        """The `MLPLearner` that takes this policy's SGD steps (config "learner"), or None where torch takes them
        (``learning``: checked again for an update, `LearnerChoice`). Config "numpy" on a policy it cannot train
        raises a `ValueError` saying why."""
        return self._learner_choice.get(self.config["learner"], self.get_optimizer(),
                                        lambda: mlp_supported(self, PPOPolicy), lambda: MLPLearner(self, PPOPolicy),
                                        learning)

    def learn_on_batch(self, train_batch: SampleBatch) -> dict:
        """``num_sgd_iter`` epochs of shuffled minibatches (whole sequences for recurrent models), by torch or by
        `numpy_learner` (config "learner")."""
        if self._optimizer is None:
            self._optimizer = self.optimizer()
        learner = self.numpy_learner(learning=True)
        if learner is not None and SampleBatch.SEQ_LENS in train_batch and self.config["learner"] == "auto":
            learner = None  # (minibatches of whole sequences: torch's `minibatches`)
        if learner is not None:
            means = learner.learn_on_batch(train_batch, checked=self._learner_choice.checked)
            return {} if means is None else dict(zip(STATS, means.tolist()))
        for g in self._optimizer.param_groups:
            g["lr"] = self.scheduled("lr")
        tensors = self.model.prepare_train(dict(self._to_torch(train_batch).items()))
        if self.config["decoupled_clip"]:
            tensors[PROX_LOGP] = self.logp_of_actions(tensors)
        size = int(self.config["sgd_minibatch_size"])
        grad_clip = self.config.get("grad_clip")
        sums: torch.Tensor | None = None
        n = 0
        params = [p for p in self.model.parameters() if p.requires_grad]  # once: model.parameters() walks modules
        zero_grad = grads_clearer(self._optimizer)  # (its parameters taken once, as ``params``)
        self.model.train()
        for mb in minibatches(tensors, size, epochs=int(self.config["num_sgd_iter"])):
            loss = self.loss(mb)
            zero_grad()
            loss.backward()
            if grad_clip is not None:
                clip_grad_norm(params, float(grad_clip))
            self._optimizer.step()
            sums = self.last_stats_tensor if sums is None else sums + self.last_stats_tensor
            n += 1
        return {} if sums is None else dict(zip(STATS, (sums / n).tolist()))

    def optimizer(self) -> torch.optim.Optimizer:
        fused = bool(self.config["adam_fused"]) or None  # None: torch's default (the per-tensor loop on the CPU)
        return torch.optim.Adam(self.model.parameters(), lr=float(self.config["lr"]), eps=1e-5, fused=fused)

    def get_state(self) -> dict:
        """Model and optimizer state (for checkpoints)."""
        if self._optimizer is None:
            self._optimizer = self.optimizer()
        return {"model": self.model.state_dict(), "optimizer": self._optimizer.state_dict()}

    def state_snapshot(self) -> Callable[[], dict]:
        """`get_state` as it is now, for later (a deferred checkpoint: `RunCounters.commit_checkpoint`): a function
        that returns it, its tensors copies that later steps do not change. Where the numpy learner holds the
        weights and Adam's moments (`FlatAdam`), its buffers are copied whole and the tensors made when asked
        (`FlatCopy`); else every tensor is cloned now."""
        learner = self._learner_choice.learner
        if learner is not None and type(self).get_state is _GET_STATE and "get_state" not in vars(self):
            copied = learner.flat.copy()
            if copied is not None:
                model = copied.module_state(self.model.state_dict())
                return lambda: {"model": model(), "optimizer": copied.optimizer_state()}
        state = cloned_state(self.get_state())
        return lambda: state

    def set_state(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        if self._optimizer is None:
            self._optimizer = self.optimizer()
        try:
            self._optimizer.load_state_dict(state["optimizer"])
        except ValueError:
            if not getattr(self.model, "loaded_earlier_layout", False):
                raise
            # Weights of an earlier layout (the GTrXL's two cores), converted: their Adam moments are per old
            # parameter and do not carry over.
            warnings.warn("the checkpoint's GTrXL weights are of trajview's earlier layout (pi_core / vf_core): "
                          "loaded into the stacked core; the optimizer's moments start afresh", stacklevel=2)
            self._optimizer = self.optimizer()




def _stacked(rows: list[Any]) -> Any:
    """Bootstrap input dicts ``rows`` (`ViewModel.bootstrap_input`'s: one row each, nested dicts / tuples of
    ``[1, ...]`` arrays) as one input dict of their rows in order; None unless each holds the same keys, arrays of
    the same dtype and shape, one row each."""
    first = rows[0]
    if type(first) is dict or type(first) is tuple:
        if not all(type(r) is type(first) and len(r) == len(first) for r in rows):
            return None
        keys = list(first) if type(first) is dict else range(len(first))
        if type(first) is dict and not all(r.keys() == first.keys() for r in rows):
            return None
        parts = [_stacked([r[k] for r in rows]) for k in keys]
        if any(p is None for p in parts):
            return None
        return dict(zip(keys, parts)) if type(first) is dict else tuple(parts)
    if (type(first) is np.ndarray and first.ndim and first.shape[0] == 1
            and all(type(r) is np.ndarray and r.dtype == first.dtype and r.shape == first.shape for r in rows)):
        return np.concatenate(rows)
    return None


#: `PPOPolicy.action_sampler` as defined here: a subclass's, or one patched onto the class, computes the actions
#: instead of the numpy actor (`PPOPolicy._act_on_arrays`).
_ACTION_SAMPLER = PPOPolicy.action_sampler
#: `PPOPolicy.postprocess_trajectory` and `value_of_next_step` as defined here (`PPOPolicy._own_postprocessing`: one
#: patched onto the class, like a subclass's, is called segment by segment).
_POSTPROCESS_TRAJECTORY = PPOPolicy.postprocess_trajectory
_VALUE_OF_NEXT_STEP = PPOPolicy.value_of_next_step
#: `PPOPolicy.get_state` as defined here: `PPOPolicy.state_snapshot` copies the numpy learner's buffers for it alone.
_GET_STATE = PPOPolicy.get_state


class _NumpyActing:
    """`PPOPolicy._reused_inputs`' function: the numpy actor on the caller's arrays while it acts for the policy, else
    the torch path's function (``run``, which calls ``action_sampler``: also where one is set on the instance).

    A call where nothing `PPOPolicy._act_on_arrays` reads has changed since the first (the policy's actor, its model,
    its ``action_sampler``) calls that actor at once, as `_act_on_arrays` would (a call outside a worker is a few
    attribute reads over the model's own time: issue 26); any other asks `_act_on_arrays`."""

    __slots__ = ("policy", "arrays", "run", "actor", "model")

    def __init__(self, policy: PPOPolicy, arrays: dict[str, Any], run: Any) -> None:
        self.policy, self.arrays, self.run = policy, arrays, run
        self.actor = policy.numpy_actor()
        self.model = policy.model

    def __call__(self, explore: bool | None, timestep: int | None) -> tuple[Any, list, dict]:
        policy, actor = self.policy, self.actor
        if (policy._mlp_actor is actor and policy.model is self.model  # (the actor made for this policy and model)
                and "action_sampler" not in policy.__dict__ and type(policy).action_sampler is _ACTION_SAMPLER):
            return actor.act_numpy(self.arrays,  # type: ignore[union-attr]
                                   bool(policy.config["explore"] if explore is None else explore))
        out = policy._act_on_arrays(self.arrays, explore)
        return self.run(explore, timestep) if out is None else out  # type: ignore[no-any-return]
