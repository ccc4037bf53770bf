"""Small MLPs trained in numpy on the memory of torch parameters: what the numpy learners share (issue 25).

At the sizes small-model RL trains at (MLPs of 64-256 units, minibatches of 64-256 rows), an SGD step of eager
torch on the CPU is bound by the cost of each op (dispatch, autograd's graph, the optimizer's Python), not by its
arithmetic. The numpy learners (`trajview.algorithms.mlp_learner` for PPO, `DQNPolicy`'s ``"learner"``) take the
same step as a few dozen numpy calls:

* `FlatAdam` moves a module's parameters, their gradients and torch Adam's moments into flat float32 buffers: the
  parameters become views of one (so acting, ``state_dict``, checkpoints and export see what it trains), the
  optimizer's ``exp_avg`` / ``exp_avg_sq`` / ``step`` views of the others (so ``optimizer.state_dict()`` stays
  torch's Adam state, and a checkpoint resumes under either learner). It clips the gradient's norm as
  ``torch.nn.utils.clip_grad_norm_`` and steps by torch's own fused Adam, over the whole buffer in one kernel.
* `Dense`: an MLP's forward (keeping each layer's output) and backward (writing each layer's gradients into
  `FlatAdam`'s buffer) for tanh and ReLU layers.
* `blas_limit`: numpy's BLAS on torch's intra-op thread count (threadpoolctl's; a no-op without it), and
  `flushed_denormals`: denormal floats flushed to zero while the learners step.

The arithmetic is torch's up to float32 rounding: ``tests/test_mlp_learner.py`` and ``tests/test_dqn.py`` check
weights, moments and statistics against the torch learners on random networks and settings.
"""

from __future__ import annotations

import contextlib
import math
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.optim.adam import adam as torch_adam

from .. import _core
from ..policy.torch_policy import cloned_state

__all__ = ["ADAM_PLAIN", "Dense", "FlatAdam", "FlatCopy", "LearnerChoice", "action_indices", "adam_unsupported", "blas_limit", "dense_layers", "flat_rows", "flushed_denormals"]

F32 = np.float32
#: What the numpy learners need of a torch Adam: these keys at these values (torch's defaults).
ADAM_PLAIN = {"weight_decay": 0, "amsgrad": False, "maximize": False, "capturable": False, "differentiable": False}
_ACTIVATIONS = {torch.nn.Tanh: "tanh", torch.nn.ReLU: "relu"}


def dense_layers(modules: Sequence[torch.nn.Module]) -> list[tuple[torch.nn.Linear, str | None]] | None:
    """``modules`` (e.g. a ``Sequential``'s) as ``[(Linear, activation after it or None), ...]`` where they are
    Linear layers each followed by at most one Tanh or ReLU; None for anything else."""
    out: list[tuple[torch.nn.Linear, str | None]] = []
    for m in modules:
        if type(m) is torch.nn.Linear:
            out.append((m, None))
        elif type(m) in _ACTIVATIONS and out and out[-1][1] is None:
            out[-1] = (out[-1][0], _ACTIVATIONS[type(m)])
        else:
            return None
    return out


def adam_unsupported(opt: Any, params: Sequence[torch.Tensor]) -> str | None:
    """None where ``opt`` is one torch Adam param group over exactly ``params`` with `ADAM_PLAIN`'s settings (what
    `FlatAdam` steps); else why not, in a sentence."""
    if type(opt) is not torch.optim.Adam or len(opt.param_groups) != 1:
        return f"the optimizer is a {type(opt).__name__} (one torch.optim.Adam param group is supported)"
    group = opt.param_groups[0]
    if {id(p) for p in group["params"]} != {id(p) for p in params}:
        return "the optimizer does not train exactly the model's parameters"
    for key, plain in ADAM_PLAIN.items():
        if group.get(key, plain) != plain:
            return f"the optimizer's {key!r} is {group[key]!r} (supported: {plain!r})"
    if any(p.device.type != "cpu" or p.dtype != torch.float32 or not p.requires_grad for p in params):
        return "the parameters are not trainable float32 tensors on the CPU"
    steps = adam_steps(opt, params)
    if len(set(steps)) > 1:  # (a torch run that had some parameters frozen for a while)
        return (f"the optimizer's parameters have taken different numbers of steps ({sorted(set(steps))}): the numpy "
                f"learner steps them together")
    return None


def adam_steps(opt: Any, params: Sequence[torch.Tensor]) -> list[float]:
    """Each parameter's Adam ``step`` in ``opt``'s state (0 where it has none yet)."""
    out = []
    for p in params:
        st = opt.state.get(p)
        out.append(float(st["step"]) if st and "step" in st else 0.0)
    return out


def flat_rows(value: Any) -> np.ndarray:
    """A batch column (array or CPU tensor) with each row flattened, as C-contiguous float32: what the models'
    vector encoders and `QNetwork` read (``x.float().flatten(1)``)."""
    v = value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
    return np.ascontiguousarray(v.reshape(len(v), -1), dtype=F32)


def action_indices(values: Any, start: int, n: int, column: str) -> np.ndarray:
    """``values`` (a batch's Discrete actions) as int64 indices ``values - start`` in ``[0, n)``: a `ValueError`
    naming ``column`` for one outside (numpy's indexing would wrap a negative one round where torch's ``gather``
    raises)."""
    a = np.asarray(values).astype(np.int64).reshape(-1)
    if start:
        a = a - start
    if len(a) and (int(a.min()) < 0 or int(a.max()) >= n):
        bad = int(a[(a < 0) | (a >= n)][0]) + start
        raise ValueError(f"column {column!r}: a Discrete({n}, start={start}) action must be in [{start}, {start + n}), "
                         f"got {bad}")
    return a


class Dense:
    """An MLP's layers as numpy arrays: per layer ``(weight [out, in], bias, weight grad, bias grad, activation)``
    (the gradients' arrays empty where the network only acts)."""

    def __init__(self, layers: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str | None]]) -> None:
        self.layers = layers

    @classmethod
    def of(cls, layers: Sequence[tuple[torch.nn.Linear, str | None]], grads: dict[int, np.ndarray] | None = None) -> "Dense":
        """Views of ``layers``' (`dense_layers`) parameters, and of their gradients in ``grads`` (by the
        parameter's id, `FlatAdam.grads`)."""
        none = np.empty(0, F32)
        g = grads or {}
        return cls([(m.weight.detach().numpy(), m.bias.detach().numpy(), g.get(id(m.weight), none),
                     g.get(id(m.bias), none), act) for m, act in layers])

    def forward(self, x: np.ndarray) -> list[np.ndarray]:
        """Each layer's input, then the output: ``[x, h1, ..., out]`` (after each layer's activation)."""
        acts = [x]
        for w, b, _, _, act in self.layers:
            z = acts[-1] @ w.T
            z += b
            if act == "tanh":
                np.tanh(z, out=z)
            elif act == "relu":
                np.maximum(z, 0, out=z)
            acts.append(z)
        return acts

    def backward(self, acts: list[np.ndarray], d_out: np.ndarray, input_grad: bool = False) -> np.ndarray | None:
        """Writes each layer's gradients, from the loss's gradient by the output ``d_out`` (taken before the last
        layer's activation here); returns the gradient by the input where ``input_grad`` (else None)."""
        d = d_out
        for i in range(len(self.layers) - 1, -1, -1):
            w, _, gw, gb, act = self.layers[i]
            out = acts[i + 1]
            if act == "tanh":
                d = d * (1 - out * out)  # tanh' from its output
            elif act == "relu":
                d = d * (out > 0)
            np.matmul(d.T, acts[i], out=gw)
            np.sum(d, axis=0, out=gb)
            if i or input_grad:
                d = d @ w
        return d if input_grad else None


class FlatAdam:
    """``params`` and the Adam state of the optimizer ``get_optimizer()`` returns, in flat buffers (the module
    docstring). `is_bound` says whether they still are (a loaded optimizer state dict replaces the moments,
    ``param.data = ...`` a parameter); `bind` moves them again, their values kept."""

    def __init__(self, params: Sequence[torch.Tensor], get_optimizer: Callable[[], torch.optim.Optimizer]) -> None:
        self.params = list(params)
        self.get_optimizer = get_optimizer
        self._bound: tuple[Any, ...] = ()
        self.bind()

    def is_bound(self) -> bool:
        opt = self.get_optimizer()
        if not self._bound or self._bound[0] is not opt:
            return False
        _, ptrs, m_views, v_views = self._bound
        for p, ptr, m, v in zip(self.params, ptrs, m_views, v_views):
            st = opt.state.get(p)
            if p.data_ptr() != ptr or st is None or st.get("exp_avg") is not m or st.get("exp_avg_sq") is not v:
                return False
        return True

    def bind(self) -> None:
        opt = self.get_optimizer()
        params = self.params
        sizes = [p.numel() for p in params]
        n = sum(sizes)
        flat = {k: np.zeros(n, F32) for k in ("param", "grad", "m", "v")}
        steps = np.asarray(adam_steps(opt, params), F32)
        if len(set(steps.tolist())) > 1:
            raise ValueError(adam_unsupported(opt, params))
        views: dict[str, list[torch.Tensor]] = {k: [] for k in flat}
        off = 0
        for i, (p, k) in enumerate(zip(params, sizes)):
            st = opt.state.get(p) or {}
            for key, src in (("param", p.detach()), ("m", st.get("exp_avg")), ("v", st.get("exp_avg_sq")), ("grad", None)):
                view = torch.from_numpy(flat[key][off : off + k]).view(p.shape)
                if src is not None:
                    view.copy_(src.detach().reshape(p.shape))
                views[key].append(view)
            off += k
        step_views = torch.from_numpy(steps)
        step_list = [step_views[i] for i in range(len(params))]
        for p, pv, m, v, s in zip(params, views["param"], views["m"], views["v"], step_list):
            p.data = pv
            opt.state[p] = {"step": s, "exp_avg": m, "exp_avg_sq": v}
        self.flat, self.steps = flat, steps
        self.tensors = {k: torch.from_numpy(v) for k, v in flat.items()}
        self._step = torch.zeros(())
        #: Each parameter's gradient array, by the parameter's id (`Dense.of`).
        self.grads = {id(p): g.numpy() for p, g in zip(params, views["grad"])}
        self._bound = (opt, [p.data_ptr() for p in params], views["m"], views["v"])
        self._step_list = step_list
        #: Each parameter's (offset, shape) in the buffers, and its position by the address of its first element.
        self._layout = [(o, tuple(p.shape)) for o, p in zip(np.cumsum([0, *sizes[:-1]]).tolist(), params)]
        self._at = {p.data_ptr(): j for j, p in enumerate(params)}
        self._pos = {id(p): j for j, p in enumerate(params)}  # (each parameter's position, by its identity)

    def copy(self) -> FlatCopy | None:
        """The parameters and the optimizer's state as they are now, for a checkpoint written later (`FlatCopy`:
        the buffers copied whole, the tensors made when asked); None where the optimizer holds more than `bind`
        put in it (another key in a parameter's state, a state-dict hook), or the buffers are no longer bound."""
        opt = self.get_optimizer()
        if (not self.is_bound() or type(opt).state_dict is not torch.optim.Optimizer.state_dict
                or opt._optimizer_state_dict_pre_hooks or opt._optimizer_state_dict_post_hooks
                or len(opt.param_groups) != 1 or len(opt.state) != len(self.params)):
            return None
        group = opt.param_groups[0]
        index = {id(p): i for i, p in enumerate(group["params"])}
        pos = self._pos
        entries = []
        for p, st in opt.state.items():  # (torch's packed state keeps this order)
            j = pos.get(id(p))
            if j is None or len(st) != 3 or st.get("step") is not self._step_list[j]:
                return None
            entries.append((index[id(p)], j))
        flat = self.flat
        packed = cloned_state({k: v for k, v in group.items() if k != "params"})
        packed["params"] = list(range(len(group["params"])))
        return FlatCopy(self, flat["param"].copy(), flat["m"].copy(), flat["v"].copy(), self.steps.copy(), entries,
                        packed)

    def clip(self, max_norm: float | None) -> None:
        """``torch.nn.utils.clip_grad_norm_``: the gradient scaled by ``max_norm / (norm + 1e-6)`` where that is
        below 1."""
        if max_norm is None:
            return
        g = self.flat["grad"]
        coef = float(max_norm) / (float(np.sqrt(np.dot(g, g))) + 1e-6)
        if coef < 1.0:
            g *= F32(coef)

    def step(self) -> None:
        """torch's fused Adam (``torch.optim.adam.adam(..., fused=True)``: one kernel) over the buffers, with the
        optimizer's param group's lr, betas and eps; each parameter's ``step`` follows."""
        group = self.get_optimizer().param_groups[0]
        beta1, beta2 = group["betas"]
        t = self.tensors
        # The count the parameters' ``step`` views hold (torch's Adam steps them in place too, when the learner was
        # "torch" for a while): the learners check first that they are all equal (`adam_unsupported`).
        self._step.fill_(float(self.steps[0]) if len(self.steps) else 0.0)
        torch_adam([t["param"]], [t["grad"]], [t["m"]], [t["v"]], [], [self._step], fused=True, amsgrad=False,
                   beta1=float(beta1), beta2=float(beta2), lr=float(group["lr"]), weight_decay=0.0,
                   eps=float(group["eps"]), maximize=False, grad_scale=None, found_inf=None)
        self.steps.fill(float(self._step))


class FlatCopy:
    """`FlatAdam`'s buffers as `FlatAdam.copy` took them: `optimizer_state` is what ``optimizer.state_dict()``
    returned then, `module_state` a module's ``state_dict()`` of then with its parameters' values from the copies.
    The copies are three array copies and the optimizer's param group; the tensors (views of the copies) are made
    when asked: cloning each of a small model's ~50 tensors took most of a deferred checkpoint's time (issue 25)."""

    __slots__ = ("layout", "at", "param", "m", "v", "steps", "entries", "group")

    def __init__(self, flat: FlatAdam, param: np.ndarray, m: np.ndarray, v: np.ndarray, steps: np.ndarray,
                 entries: list[tuple[int, int]], group: dict[str, Any]) -> None:
        self.layout, self.at = flat._layout, flat._at
        self.param, self.m, self.v, self.steps, self.entries, self.group = param, m, v, steps, entries, group

    def _view(self, buffer: np.ndarray, j: int) -> torch.Tensor:
        off, shape = self.layout[j]
        return torch.from_numpy(buffer[off : off + math.prod(shape)]).view(shape)

    def optimizer_state(self) -> dict[str, Any]:
        """The optimizer's ``state_dict()`` when copied (torch's layout: each parameter's state by its index in
        the param group, in the order the optimizer's state held them)."""
        steps = torch.from_numpy(self.steps)
        state = {i: {"step": steps[j], "exp_avg": self._view(self.m, j), "exp_avg_sq": self._view(self.v, j)}
                 for i, j in self.entries}
        return {"state": state, "param_groups": [dict(self.group)]}

    def module_state(self, state: OrderedDict[str, Any]) -> Callable[[], OrderedDict[str, Any]]:
        """A module's ``state_dict()`` taken when this was copied (``state``): a function that returns it with each
        of the buffers' parameters in it (a float32 tensor that is one of them) as the copy's view, every other
        value cloned now."""
        at, layout = self.at, self.layout
        kept: list[tuple[str, Any, int]] = []  # (key, value cloned, or the parameter's position)
        for k, t in state.items():
            j = at.get(t.data_ptr(), -1) if type(t) is torch.Tensor else -1
            if j >= 0 and t.dtype == torch.float32 and tuple(t.shape) == layout[j][1] and t.is_contiguous():
                kept.append((k, None, j))
            else:
                kept.append((k, cloned_state(t), -1))
        metadata = getattr(state, "_metadata", None)  # (a fresh dict of each state_dict() call)

        def made() -> OrderedDict[str, Any]:
            out = OrderedDict((k, self._view(self.param, j) if j >= 0 else v) for k, v, j in kept)
            if metadata is not None:
                out._metadata = metadata  # type: ignore[attr-defined]
            return out

        return made


@contextlib.contextmanager
def flushed_denormals() -> Iterator[None]:
    """Float arithmetic in this thread with denormal numbers flushed to zero, then the mode as it was.

    Adam's moments of weights whose gradient stays zero (a ReLU unit that never fires) decay geometrically into
    the denormal range (below 1.2e-38) within about a thousand steps; arithmetic on denormals is tens of times
    slower on x86 CPUs, and the zoo DQN's Adam step took 0.42 ms instead of 0.07. Values that small are zero for
    any learning rate, so the learners take their steps with them flushed (`_core.set_flush_denormals`, the
    mode torch.set_flush_denormal sets) and restore the caller's mode after."""
    previous = _core.set_flush_denormals(True)
    try:
        yield
    finally:
        _core.restore_flush_denormals(previous)


class LearnerChoice:
    """Which learner takes a policy's steps, by its config ``"learner"``: the numpy learner ``make()`` builds, or
    None (torch). "torch": None. "numpy": the numpy learner (``make`` raises where it cannot train the policy).
    "auto": the numpy learner where ``why_not()`` is None, checked again when the optimizer changes and before each
    learning step (``learning``: a parameter frozen, the optimizer's settings or the config changed since), and
    dropped (torch from then on) when the policy changed under it so that it no longer applies. (Acting does not
    check again: what it reads cannot change under a bound learner but the weights, which it reads as they are.)"""

    def __init__(self) -> None:
        self.learner: Any = None
        self._checked_for: Any = None  # the optimizer "auto" last checked for
        #: Whether the last `get` found ``why_not()`` None just now: the learner it returned need not check again.
        self.checked = False
        #: Whether the last `get` was a later learning step of a `held` block whose earlier step found the learner
        #: supported: nothing between the two changed the policy, so the learner's own checks of it (its views of
        #: the parameters) need not run again either.
        self.repeat = False
        self._holding = False  # inside `held`
        self._held_ok: Any = None  # the learner found supported inside `held`, and the mode it was found for

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A run of learning steps with nothing between them that could change the policy (a trainer's gradient
        steps, one after the other): inside the block, a learner found supported for a learning step stays so for
        the block's later steps in the same mode, without ``why_not()`` again (DQN: 1,008 checks of 23-39 us per
        iteration at the zoo's settings, about 1% of it; 63 in blocks)."""
        if self._holding:  # (nested: the outer block's)
            yield
            return
        self._holding = True
        try:
            yield
        finally:
            self._holding = False
            self._held_ok = None

    def get(self, mode: str, optimizer: Any, why_not: Callable[[], str | None], make: Callable[[], Any],
            learning: bool = False) -> Any:
        self.checked = self.repeat = False
        if mode == "torch":
            return None
        if self.learner is not None:
            if mode == "numpy" or (not learning and self.learner.is_bound()):
                return self.learner  # ("numpy" on a policy it no longer takes: the learner raises at its step)
            held = self._held_ok
            self.repeat = held is not None and held[0] is self.learner and held[1] == mode
            if self.repeat or why_not() is None:
                self.checked = True
                if self._holding:
                    self._held_ok = (self.learner, mode)
                return self.learner
            self.learner = None
        if mode == "auto" and self._checked_for is optimizer:
            return None
        self._checked_for = optimizer
        if mode == "numpy" or why_not() is None:
            self.checked = mode == "auto"
            self.learner = make()
            if self._holding and self.checked:
                self._held_ok = (self.learner, mode)
        return self.learner


_BLAS: Any = None  # threadpoolctl's controllers of numpy's BLAS libraries, found once; () without threadpoolctl
_BLAS_HELD: list[int] = []  # the thread counts of the `blas_limit` blocks open now (in this process), innermost last


def _blas_libraries() -> tuple[Any, ...]:
    global _BLAS
    if _BLAS is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _BLAS = ()
        else:
            _BLAS = tuple(c for c in ThreadpoolController().lib_controllers if c.user_api == "blas")
    return _BLAS  # type: ignore[no-any-return]


def blas_limit() -> Any:
    """A context in which numpy's BLAS runs on ``torch.get_num_threads()`` threads (threadpoolctl's, which the
    ``torch`` and ``train`` extras bring; without it a no-op: numpy's BLAS keeps its own count). Inside a block of
    the same count (a run of learning steps: `DQNPolicy.learning_steps`), nothing more: setting and restoring the
    limit took 2-3% of a DQN iteration, once per gradient step."""
    libs = _blas_libraries()
    if not libs:
        return contextlib.nullcontext()
    threads = torch.get_num_threads()
    if _BLAS_HELD and _BLAS_HELD[-1] == threads:
        return contextlib.nullcontext()
    return _blas_held(libs, threads)


@contextlib.contextmanager
def _blas_held(libs: tuple[Any, ...], threads: int) -> Iterator[None]:
    """threadpoolctl's ``limit(limits=threads, user_api="blas")`` on its controllers of the BLAS libraries, without
    the limiter's bookkeeping (it reads every library's info at each entry: ~0.1 ms of an iteration in a run):
    each library's count set, then put back."""
    before = [c.get_num_threads() for c in libs]
    for c in libs:
        c.set_num_threads(threads)
    _BLAS_HELD.append(threads)
    try:
        yield
    finally:
        _BLAS_HELD.pop()
        for c, n in zip(libs, before):
            if n is not None:
                c.set_num_threads(n)
