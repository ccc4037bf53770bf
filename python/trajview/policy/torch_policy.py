"""`TorchPolicy`: a policy whose model is a ``torch.nn.Module`` with ``view_requirements``."""

from __future__ import annotations

import copy
import functools
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from .policy import Policy
from ..views import LazyView, SampleBatch
from ..views.lazy_view import to_device

__all__ = ["TorchPolicy", "clip_grad_norm", "cloned_state", "grads_clearer"]


def cloned_state(value: Any) -> Any:
    """``value`` (tensors in dicts, lists and tuples, and plain values) with every tensor cloned (detached): a
    state that later steps do not change (a policy's ``state_snapshot``: a deferred checkpoint's)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone() if value.requires_grad else value.clone()
    if type(value) is dict:
        return {k: cloned_state(v) for k, v in value.items()}
    if type(value) is OrderedDict:  # (a module's state_dict: its ``_metadata`` too, which load_state_dict reads)
        out = OrderedDict((k, cloned_state(v)) for k, v in value.items())
        if hasattr(value, "_metadata"):
            out._metadata = copy.deepcopy(value._metadata)  # type: ignore[attr-defined]
        return out
    if type(value) in (list, tuple):  # (a subclass, e.g. a namedtuple, is not built from one iterable: deepcopy)
        return type(value)(cloned_state(v) for v in value)
    if value is None or type(value) in _IMMUTABLE:
        return value
    return copy.deepcopy(value)  # (its tensors copied too)


_IMMUTABLE = frozenset({bool, int, float, str, bytes})


def _to_numpy(x: Any) -> Any:
    """A tensor (or a nested dict / tuple of them: a Dict / Tuple action) as numpy arrays."""
    if type(x) is torch.Tensor:
        try:
            return x.numpy()  # a CPU tensor without autograd (what an inference-mode call returns): its memory
        except (RuntimeError, TypeError):
            return x.detach().cpu().numpy()
    if isinstance(x, dict):
        return {k: _to_numpy(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(_to_numpy(v) for v in x)
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def _flat_items(key: str, value: Any) -> Any:
    """``(key, value)``, or for a nested value (dicts and tuples of arrays) one ``("key.leaf", leaf)`` per
    leaf: Dict keys joined with ``"."``, Tuple leaves by index (the layout of nested columns)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _flat_items(f"{key}.{k}", v)
    elif isinstance(value, tuple):
        for i, v in enumerate(value):
            yield from _flat_items(f"{key}.{i}", v)
    else:
        yield key, value


def _cpu_batch(batch: dict[str, Any]) -> SampleBatch | None:
    """`TorchPolicy._to_torch` of a plain dict of writeable numeric arrays of one row count, without ``seq_lens``
    (an input dict as the store gathers it) on the CPU: each column as the tensor viewing it. None for anything
    else (`_to_torch`'s general path converts it, or names what is wrong)."""
    if _SEQ_LENS in batch:
        return None
    cols: dict[str, torch.Tensor] = {}
    count = -1
    from_numpy = torch.from_numpy
    try:
        for k, v in batch.items():
            if type(v) is not np.ndarray or type(k) is not str or not v.flags.writeable:
                return None
            n = v.shape[0]  # (an IndexError for a 0-d array)
            if n != count:
                if count >= 0:
                    return None
                count = n
            cols[k] = from_numpy(v)  # (a TypeError for objects, strings, dtypes torch lacks)
    except (IndexError, TypeError):
        return None
    return SampleBatch._from_columns(cols, max(count, 0), _EMPTY, _EMPTY)


#: ``torch.inference_mode()``'s context without its Python wrapper (a third of a microsecond, not one and a half,
#: per compute-actions call); the public one where torch lacks it.
_inference_mode: Any = getattr(torch._C, "_InferenceMode", None)
_inference_mode = torch.inference_mode if _inference_mode is None else functools.partial(_inference_mode, True)

def clip_grad_norm(params: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_(params, max_norm)`` (the 2-norm over every gradient; gradients scaled by
    ``min(1, max_norm / (norm + 1e-6))``; parameters without a gradient skipped; the total norm returned), in the
    same ops as torch's foreach path: the same values, bit for bit. Where every gradient is a dense tensor of one
    device and dtype (a small model's usual case) it skips the Python of torch's wrapper (grouping by device and
    dtype, the foreach-support checks: about 45 of a zoo frame-stack SGD step's 1,300 us); anything else is
    torch's own call."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    first = grads[0]
    if not all(g.device == first.device and g.dtype is first.dtype and g.layout is torch.strided for g in grads):
        return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    torch._foreach_mul_(grads, coef)
    return total


_SEQ_LENS = SampleBatch.SEQ_LENS
_EMPTY: frozenset[str] = frozenset()


def grads_clearer(optimizer: torch.optim.Optimizer) -> Callable[[], None]:
    """A function doing ``optimizer.zero_grad()`` (torch's default, ``set_to_none``) for a run of steps over the
    optimizer's parameters as they are now: each one's ``.grad`` set to None, without that call's own Python around
    it (a profiler annotation and a dynamo guard: 2% of a GTrXL update on the CPU). Where the optimizer's class
    overrides ``zero_grad``, that. (``zero_grad`` itself runs once here: torch sets an optimizer up at its first
    call.)"""
    optimizer.zero_grad()
    if type(optimizer).zero_grad is not torch.optim.Optimizer.zero_grad or "zero_grad" in vars(optimizer):
        return optimizer.zero_grad
    params = [p for group in optimizer.param_groups for p in group["params"]]

    def clear() -> None:
        for p in params:
            p.grad = None

    return clear


def numpy_state(module: torch.nn.Module) -> dict[str, np.ndarray]:
    """``module``'s ``state_dict`` as numpy arrays on the CPU, copies (a CPU tensor's ``numpy()`` shares its memory:
    a snapshot that training would change, and that a rollback would "restore" to the new values)."""
    return {k: np.array(v.detach().cpu().numpy(), copy=True) for k, v in module.state_dict().items()}


class TorchPolicy(Policy):
    """Base of torch policies.

    The model is a ``torch.nn.Module``; its ``view_requirements`` dict (if
    any) is merged into the policy's, so a model declares what it reads (frame
    stacks, previous actions, ``state_in_i``) and the collector builds it. A
    model with ``get_initial_state()`` is recurrent.

    Subclasses implement ``action_sampler(input_dict, explore) -> (actions,
    state_outs, extra_fetches)`` and ``loss(train_batch) -> scalar tensor``,
    both on dicts of torch tensors (zero-copy views of the collector's arrays).
    Nested observations read nested there too (``input_dict["obs"]["image"]``,
    a tensor per leaf); a ``Dict`` / ``Tuple`` action space takes actions as
    a dict / tuple of tensors.
    """

    def __init__(
        self,
        observation_space: Any,
        action_space: Any,
        config: dict | None = None,
        *,
        model: torch.nn.Module,
    ) -> None:
        super().__init__(observation_space, action_space, config)
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self.device = torch.device(self.config.get("device", "cpu"))
        self.model = model.to(self.device)
        self.view_requirements.update(getattr(model, "view_requirements", {}) or {})
        self._optimizer: torch.optim.Optimizer | None = None
        self._on_cpu = self.device.type == "cpu"

    # -- numpy <-> torch -------------------------------------------------------------

    def _to_torch(self, batch: Mapping[str, Any]) -> SampleBatch:
        """A batch of tensors viewing the arrays (``infos`` and other object columns are left out).

        A nested value (a dict or tuple of arrays, e.g. a Dict observation in
        a hand-built input dict) becomes one tensor column per leaf,
        ``"obs.image"``, ``"obs.0"``, as in the collector's batches; the
        tensor batch gives them back nested (``batch["obs"]["image"]``).
        """
        if type(batch) is dict and self._on_cpu:
            fast = _cpu_batch(batch)  # a compute-actions input dict of arrays (the store's): each a tensor viewing it
            if fast is not None:
                return fast
        cols: dict[str, torch.Tensor] = {}
        bases: dict = {}  # lazy views of one column share one transfer of their base
        # dict.items: converting is not reading (a tracked batch would count every column as read,
        # and the pruning pass would keep every view); the reads are tracked on the tensor batch.
        items = dict.items(batch) if isinstance(batch, dict) else batch.items()
        for k, v in (kv for key, value in items for kv in _flat_items(key, value)):
            if isinstance(v, torch.Tensor):
                cols[k] = to_device(v, self.device) if v.device.type == "cpu" else v.to(self.device)
            elif type(v) is LazyView:
                cols[k] = v.to_torch(self.device, bases)
            elif isinstance(v, np.ndarray) and v.dtype != object:
                t = torch.from_numpy(v) if v.flags.writeable else torch.from_numpy(v.copy())
                cols[k] = to_device(t, self.device)
        seq_keys: Iterable[str] = getattr(batch, "seq_keys", frozenset())
        out = SampleBatch(cols, seq_keys=[k for k in seq_keys if k in cols])
        if getattr(batch, "_tracking", False):
            out.enable_access_tracking()
        return out

    @staticmethod
    def _merge_tracking(src: Any, dst: SampleBatch) -> None:
        if getattr(src, "_tracking", False):
            src.accessed_keys.update(dst.accessed_keys)

    # -- Policy API --------------------------------------------------------------

    def get_initial_state(self) -> list[np.ndarray]:
        fn = getattr(self.model, "get_initial_state", None)
        return [_to_numpy(s) for s in fn()] if fn is not None else []

    def action_sampler(
        self, input_dict: SampleBatch, explore: bool | None
    ) -> tuple[torch.Tensor, list[torch.Tensor], dict[str, torch.Tensor]]:
        raise NotImplementedError(f"{type(self).__name__} must implement action_sampler")

    def compute_actions_from_input_dict(
        self, input_dict: Mapping[str, Any], explore: bool | None = None, timestep: int | None = None, **kwargs: Any
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        if (type(input_dict) is dict and type(self)._act_on_arrays is not TorchPolicy._act_on_arrays
                and all(type(v) is np.ndarray for v in input_dict.values())):
            out = self._act_on_arrays(input_dict, explore)  # (a plain dict of arrays: the store's input dict)
            if out is not None:
                return out
        tensors = self._to_torch(input_dict)
        try:
            return self._actions_on(tensors, explore)
        finally:
            if type(input_dict) is not dict:  # (a plain dict tracks no reads)
                self._merge_tracking(input_dict, tensors)

    def _act_on_arrays(
        self, arrays: dict[str, np.ndarray], explore: bool | None
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]] | None:
        """The policy's outputs computed from ``arrays`` (a plain dict of arrays) as they are, where a subclass has
        such a way (e.g. `PPOPolicy`'s numpy actor); None (here): the tensors' way runs."""
        return None

    def _reused_inputs(
        self, inputs: dict[str, np.ndarray]
    ) -> Callable[[bool | None, int | None], tuple[Any, list, dict]] | None:
        """Tensors viewing ``inputs`` (a plain dict of arrays on the CPU) are made once; each ``run`` reads them as
        the caller refilled them, in a batch of its own (what ``action_sampler`` sets or removes in its batch stays
        there). None where ``compute_actions_from_input_dict`` is overridden (it may do more than this) or the
        arrays are not what `_cpu_batch` views."""
        if type(self).compute_actions_from_input_dict is not TorchPolicy.compute_actions_from_input_dict:
            return None
        if not self._on_cpu or type(inputs) is not dict:
            return None
        tensors = _cpu_batch(inputs)
        if tensors is None:
            return None
        cols, count = dict.copy(tensors), tensors.count
        actions_on, batch = self._actions_on, SampleBatch._from_columns
        return lambda explore, timestep: actions_on(batch(cols, count, _EMPTY, _EMPTY), explore)

    def _actions_on(self, tensors: SampleBatch, explore: bool | None) -> tuple[Any, list, dict]:
        """`action_sampler` on a tensor batch, its outputs as numpy arrays."""
        # inference_mode: no autograd bookkeeping at all (about 10% of a small model's step); what it returns
        # leaves as numpy arrays.
        with _inference_mode():
            actions, state_outs, extra = self.action_sampler(tensors, explore)
        try:  # CPU tensors without autograd (what an inference-mode call returns): each one's memory as numpy
            return (
                actions.numpy() if type(actions) is torch.Tensor else _to_numpy(actions),
                [s.numpy() if type(s) is torch.Tensor else _to_numpy(s) for s in state_outs],
                {k: v.numpy() if type(v) is torch.Tensor else _to_numpy(v) for k, v in extra.items()},
            )
        except (AttributeError, RuntimeError, TypeError):
            pass  # (a tensor on another device or needing grad, or outputs of the wrong kind: the general way)
        return _to_numpy(actions), [_to_numpy(s) for s in state_outs], {k: _to_numpy(v) for k, v in extra.items()}

    def _run_loss_for_pruning(self, batch: SampleBatch) -> None:
        tensors = self._to_torch(batch)
        self.loss(tensors)
        self._merge_tracking(batch, tensors)

    def get_weights(self) -> dict[str, Any]:
        """The model's ``state_dict`` as numpy arrays (on the CPU, copies: `numpy_state`): what `set_weights` takes."""
        return numpy_state(self.model)

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        """Loads `get_weights` output into the model (on its device); names and shapes must match."""
        self.model.load_state_dict({k: torch.as_tensor(np.asarray(v)) for k, v in weights.items()})

    def get_optimizer(self) -> torch.optim.Optimizer:
        """The optimizer ``learn_on_batch`` steps, made by `optimizer` on first use (or now)."""
        if self._optimizer is None:
            self._optimizer = self.optimizer()
        return self._optimizer

    def optimizer(self) -> torch.optim.Optimizer:
        """The optimizer ``learn_on_batch`` steps (Adam, ``config["lr"]``, default 5e-5)."""
        return torch.optim.Adam(self.model.parameters(), lr=float(self.config.get("lr", 5e-5)))

    def learn_on_batch(self, train_batch: SampleBatch) -> dict:
        """One gradient step on ``loss(train_batch)``; returns ``{"loss": float}``."""
        if self._optimizer is None:
            self._optimizer = self.optimizer()
        tensors = self._to_torch(train_batch)
        loss = self.loss(tensors)
        self._optimizer.zero_grad()
        loss.backward()
        max_norm = self.config.get("grad_clip")
        if max_norm is not None:
            clip_grad_norm(list(self.model.parameters()), float(max_norm))
        self._optimizer.step()
        return {"loss": float(loss.detach())}
