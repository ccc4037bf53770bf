"""Type stubs of trajview's compiled core (private; use trajview.Collector)."""

from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np
import numpy.typing as npt

__version__: str

class _Buffer:
    """C++-owned memory behind the arrays of a batch (their numpy base)."""

    @property
    def address(self) -> int: ...
    @property
    def nbytes(self) -> int: ...

def _live_buffers() -> int: ...
def crc32(data: Any, crc: int = 0) -> int:
    """zlib.crc32(data, crc) of a contiguous buffer (carry-less multiply folding where the CPU has it)."""
def crc32_accelerated() -> bool: ...
def set_flush_denormals(on: bool) -> int:
    """Sets (True) or clears the calling thread's flush-to-zero / denormals-are-zero modes; returns the previous bits
    (for `restore_flush_denormals`; -1 on a CPU without them, where it does nothing)."""
def restore_flush_denormals(previous: int) -> None: ...
def any_nan(arrays: list[Any]) -> bool | None:
    """Whether any array of the list holds a NaN, in one call: True / False where each is a C-contiguous float32
    or float64 ndarray, None where one is not (check those another way). The GIL is released for large scans."""
def any_outside(array: Any, lo: int, hi: int) -> bool | None:
    """Whether any value of the array lies outside [lo, hi], in one pass: True / False where it is a C-contiguous
    int64 or int32 ndarray, None for any other array (check it another way)."""
def discounted_sums(x: np.ndarray, lengths: np.ndarray, factor: float) -> np.ndarray:
    """out[t] = x[t] + factor * out[t + 1] within each segment of consecutive rows (``lengths``: their row counts, in
    order, summing to len(x)): float64 in, a new float64 array out. ValueError where the lengths do not cover x."""
class _OutputCheck:
    """The common case of a policy's output checks in one call (`PolicyColumns.check_outputs`)."""

    def __init__(
        self,
        ndarray: type,
        action: tuple[str, np.dtype, tuple[int, ...], bool],
        bounds: tuple[int, int] | None,
        states: list[tuple[str, np.dtype, tuple[int, ...], bool]],
        extras: list[tuple[str, np.dtype, tuple[int, ...], bool]],
    ) -> None: ...
    def __call__(self, actions: Any, state_outs: Any, extra: Any, n: int, into: dict | None = None) -> dict[str, Any] | None:
        """The step's columns if the outputs are exactly as expected for ``n`` rows, else None (check them in Python)."""
    def _fast(self) -> Callable[..., dict[str, Any] | None]:
        """``__call__`` as a plain function of positional arguments (``actions, state_outs, extra, n[, into]``)."""

class _ActCounts:
    """`PolicyRunner`'s calls counted: the timestep, and ``free()`` every ``chunk`` calls."""

    def __init__(self, chunk: int, free: Callable[[], Any]) -> None: ...
    def count(self, n: int) -> None:
        """A call of ``n`` rows done: the timestep on; ``free()`` every ``chunk`` calls."""
    @property
    def timestep(self) -> int: ...
    @property
    def calls(self) -> int: ...

class _HotAct:
    """`PolicyRunner`'s short way in one call: the store's step, the policy's function, the output check, the count."""

    def __init__(
        self,
        step: Callable[..., Any],
        check: Callable[..., Any],
        data: dict[str, Any],
        ids: Any,
        out: dict[str, Any],
        n: int,
        zeros: Any,
        counts: _ActCounts,
        state_keys: list[str],
        extra_keys: list[str],
        unchecked: Any,
    ) -> None: ...
    @property
    def stage(self) -> int:
        """After a call that raised: 0 if the store refused the step, 1 if the policy or the check raised, 2 if what
        came after the outputs were stored did."""
    def take_unchecked(self) -> tuple[Any, Any, Any]:
        """(actions, state_outs, extra) of the last call whose check declined (then forgotten here)."""

class _ActOne:
    """`PolicyRunner`'s common single call in C++ (runner.py, ``_act_one``)."""

    def __init__(self, miss: Any, float32: Any, float64: Any) -> None: ...
    def _fast(self) -> Callable[[Any, Any, Any, Any, Any, Any], Any]:
        """The call as a plain function of positional arguments (``runner, obs, episode, reward, explore,
        full_fetch``)."""
    def _fused(self) -> Callable[[Any, Any, Any, Any, Any, Any, Any], Any]:
        """`PolicyRunner._act_hot`'s C++ call where it applies, else ``miss``, as a plain function of positional
        arguments (``runner, hot, obs, rewards, t, explore, mode``)."""

def step_envs(
    envs: list[Any], ids: Any, acts: Any, start: int, out: Any, dtype: Any, rew: Any, term: Any, trunc: Any,
    infos: list[Any] | None,
) -> tuple[int, Any, BaseException | None, bool]: ...
def reset_envs(
    envs: list[Any], ids: Any, start: int, out: Any, dtype: Any, infos: list[Any], seed: int | None
) -> tuple[int, Any, BaseException | None]: ...
def start_writeback(fd: int, offset: int, nbytes: int) -> bool:
    """Starts writing a file's dirty pages in [offset, offset + nbytes) to disk (a hint; False where unsupported)."""

class _TrajectoryStore:
    def __init__(
        self,
        num_slots: int,
        columns: list[tuple[str, str, list[int], bool, bytes | None]],
        views: list[tuple[str, str, list[int], bool, str, int, bool, bool]],
        chunk_rows: int,
        eps_id_start: int,
        inference_boundary: Sequence[str],
        emit_env_id: bool,
        lazy_min_row_bytes: int = 0,
        slots_per_env: int = 1,
    ) -> None: ...
    def begin_episodes(
        self, env_ids: npt.ArrayLike, obs: Mapping[str, npt.ArrayLike], out: dict[str, np.ndarray] | None = None
    ) -> list[int]: ...
    def add_step(
        self, data: Mapping[str, npt.ArrayLike], env_ids: npt.ArrayLike | None = None, end: npt.ArrayLike | None = None
    ) -> None: ...
    def input_dict(
        self, env_ids: npt.ArrayLike | None = None, out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]: ...
    def step(
        self,
        data: Mapping[str, npt.ArrayLike],
        env_ids: npt.ArrayLike | None = None,
        out: dict[str, np.ndarray] | None = None,
    ) -> dict[str, np.ndarray]: ...
    def _fast_step(self) -> Callable[[Mapping[str, Any], Any, dict[str, np.ndarray]], dict[str, np.ndarray]]:
        """``step(data, env_ids, out)`` as a plain function of the three, positional."""
    def end_episodes(self, env_ids: npt.ArrayLike | None) -> None: ...
    def build_batch(
        self, complete_only: bool, hold: npt.ArrayLike | None = None
    ) -> tuple[
        dict[str, np.ndarray | tuple[np.ndarray, npt.NDArray[np.int64]]], list[dict[str, Any]], list[str], int, int
    ]: ...
    def discard_steps(self) -> None: ...
    def num_steps(self) -> int: ...
    def num_complete_steps(self) -> int: ...
    def nbytes(self) -> int: ...
    def held_nbytes(self) -> int: ...
    def _next_rows(self, column: str) -> np.ndarray | None: ...
    def eps_ids(self) -> npt.NDArray[np.int64]: ...
    def episode_lengths(self) -> npt.NDArray[np.int64]: ...
    def inference_keys(self) -> list[str]: ...
    def training_keys(self) -> list[str]: ...

class SampleMode:
    """How a replay sample picks its slices (C++'s SampleMode)."""

    PER_TRAJECTORY: ClassVar[SampleMode]
    PER_STEP: ClassVar[SampleMode]
    PRIORITIZED: ClassVar[SampleMode]
    GIVEN: ClassVar[SampleMode]
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...
    def __int__(self) -> int: ...

class SliceRequest:
    """What one replay sample takes (C++'s SliceRequest): `trajview.replay.Sampler.draw` returns one."""

    def __init__(
        self,
        mode: SampleMode,
        num_slices: int,
        slice_len: int,
        strict_length: bool = False,
        pad_output: bool = False,
        seed: int = 0,
        beta: float = 0.0,
        truncated_key: str | None = None,
        done_key: str | None = None,
        picks: npt.ArrayLike | None = None,
    ) -> None: ...
    @property
    def mode(self) -> SampleMode: ...
    @property
    def num_slices(self) -> int: ...
    @property
    def slice_len(self) -> int: ...
    @property
    def strict_length(self) -> bool: ...
    @property
    def pad_output(self) -> bool: ...
    @property
    def seed(self) -> int: ...
    @property
    def beta(self) -> float: ...
    @property
    def truncated_key(self) -> str | None: ...
    @property
    def done_key(self) -> str | None: ...
    @property
    def picks(self) -> npt.NDArray[np.int64]: ...

def trajectory_pieces(keys: npt.NDArray[np.int64], done: npt.NDArray[np.uint8]) -> npt.NDArray[np.int64]:
    """The first row of each trajectory piece: a new key, or the row after a done flag (ReplayStore::add's rule)."""

class _Replay:
    def __init__(
        self,
        capacity: int,
        columns: list[tuple[str, str, list[int], bool]],
        rings: list[np.ndarray] | None = None,
    ) -> None: ...
    def add(
        self,
        data: Mapping[str, np.ndarray],
        next_obs: Mapping[str, np.ndarray],
        keys: npt.NDArray[np.int64],
        t: npt.NDArray[np.integer[Any]] | None,
        done: npt.NDArray[np.uint8],
    ) -> None: ...
    def sample(
        self, request: SliceRequest, views: list[tuple[str, str, list[int], bool, str]]
    ) -> tuple[
        dict[str, np.ndarray], npt.NDArray[np.int64], npt.NDArray[np.int64], int, npt.NDArray[np.int64],
        npt.NDArray[np.float64],
    ]: ...
    def enable_priorities(self, alpha: float, eps: float) -> None: ...
    def update_priority(self, rows: npt.NDArray[np.int64], priorities: npt.NDArray[np.float64]) -> int: ...
    def priority_leaves(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]: ...
    def max_priority(self) -> float: ...
    def skipped_priority_updates(self) -> int: ...
    def prioritized(self) -> bool: ...
    def step_rows(self) -> npt.NDArray[np.int64]: ...
    def locate(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]: ...
    def trajectory_lengths(self) -> npt.NDArray[np.int64]: ...
    def meta(self) -> dict[str, Any]: ...
    def restore(self, meta: Mapping[str, Any]) -> None: ...
    def column_view(self, column: int) -> npt.NDArray[np.uint8]: ...
    def trajectories(self) -> list[dict[str, Any]]: ...
    def num_steps(self) -> int: ...
    def rows_written(self) -> int: ...
    def num_trajectories(self) -> int: ...
    def nbytes(self) -> int: ...
    def capacity(self) -> int: ...
