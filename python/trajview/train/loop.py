"""What the trainers of ``trajview train`` (`PPOTrainer`, `DQNTrainer`) share: the counters and how they go
into a checkpoint and come back, the iteration loop with its progress bar, the run's summary (metrics,
learning-curve plot), and what a run stopped early (Ctrl-C, SIGTERM, a failed worker) says."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import logging
import math
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from .._extras import require
from .._io import fsync_file
from ..policy.torch_policy import cloned_state
from ..errors import FileIntegrityError
from .checkpoint import Checkpoint, fitting, has_checkpoint, prepare_checkpoint, read_checkpoint, tensor_state
from .metrics import MetricsLog, plot_learning_curve, read_metrics, truncate_metrics

__all__ = ["NothingToTrain", "RunCounters", "Terminated", "interrupted", "on_sigterm", "run_loop", "summarize", "where_it_stopped"]

log = logging.getLogger("trajview.train")


class Stateful(Protocol):
    """What a checkpoint's weights may hold for a state taken when written (`RunCounters.commit_checkpoint`): a
    policy. ``state_snapshot`` (optional: ``get_state()`` cloned without it) returns a function that returns
    ``get_state()`` as it was at the call (`PPOPolicy.state_snapshot`)."""

    def get_state(self) -> Any: ...


def _stateful(value: Any) -> bool:
    return callable(getattr(value, "get_state", None))


def _mean(values: deque, dtype: type) -> float:
    """``np.mean`` of a window of returns or lengths (NaN where empty): its array made by ``np.fromiter`` (the same
    values, so the same mean, in a third of ``np.mean``'s time on a deque: done() and each metrics row read it)."""
    return float(np.fromiter(values, dtype, len(values)).mean()) if values else math.nan


def _snapshot(value: Any) -> Callable[[], Any]:
    """A function returning ``value`` (its ``get_state()``, if `Stateful`) as it is now."""
    if _stateful(value):
        take = getattr(value, "state_snapshot", None)
        if callable(take):
            return take()  # type: ignore[no-any-return]
        value = value.get_state()
    copied = cloned_state(value)
    return lambda: copied


class RunCounters:
    """A run's counters (iterations, env steps, episodes, seconds, the last episodes' returns and lengths), set
    up, checkpointed and restored the same way for every trainer."""

    #: What `counters_state` holds besides the return and length windows.
    COUNTERS = ("iteration", "env_steps", "episodes", "elapsed")

    config: Any

    iteration: int
    env_steps: int
    episodes: int
    elapsed: float
    returns: deque[float]
    lengths: deque[int]
    #: (iteration, env steps) of the run's checkpoint on disk: written by `run_loop` (`commit_checkpoint`,
    #: `flush_checkpoint`), taken back by `restore_counters`; None before the first.
    checkpointed: tuple[int, int] | None

    def start_counters(self, seed: int, threads: int, smoothing_episodes: int) -> None:
        """Zero counters, empty windows of ``smoothing_episodes``, and torch and numpy seeded (torch on
        ``threads`` threads)."""
        torch.set_num_threads(threads)
        torch.manual_seed(seed)
        np.random.seed(seed)
        self.iteration = self.env_steps = self.episodes = 0
        self.elapsed = 0.0
        self.returns = deque(maxlen=smoothing_episodes)
        self.lengths = deque(maxlen=smoothing_episodes)
        self.checkpointed = None
        self._committing: tuple[threading.Thread, tuple[int, int]] | None = None
        self._commit_error: BaseException | None = None
        #: The state of the last iteration, taken and not written yet (`commit_checkpoint` with ``defer``).
        self._deferred: tuple[Callable[[], Callable[[], Any]], tuple[int, int]] | None = None

    def append_row(self, row: dict[str, Any]) -> None:
        """Appends the iteration's metrics row to the run's file (`MetricsLog`: not fsynced here; the checkpoint
        that covers it fsyncs it)."""
        c = self.config
        log = getattr(self, "_metrics_log", None)
        if log is None or log.path != Path(c.metrics_path) or log.metrics_format != c.metrics_format:
            log = self._metrics_log = MetricsLog(c.metrics_path, c.metrics_format)
        log.append(row, sync=False)

    def close_metrics(self) -> None:
        """Closes the metrics file `append_row` keeps open (the next row opens it again)."""
        log = getattr(self, "_metrics_log", None)
        if log is not None:
            log.close()

    def counters_state(self) -> dict[str, Any]:
        """The counters and the windows, for a checkpoint's JSON (torch's RNG state goes with the tensors:
        ``torch.get_rng_state()`` under ``"torch_rng"``)."""
        return {"iteration": int(self.iteration), "env_steps": int(self.env_steps), "episodes": int(self.episodes),
                "elapsed": float(self.elapsed), "returns": [float(x) for x in self.returns],
                "lengths": [int(x) for x in self.lengths]}

    def _config_state(self) -> dict[str, Any]:
        """``dataclasses.asdict(config)`` for a checkpoint (read, never changed, by `prepare_checkpoint`): taken again
        only when a field's value changed since the last time (a config holds JSON's values, as the manifest it goes
        into does, so comparing values is exact), not at every iteration's checkpoint."""
        fields = vars(self.config)
        cached = getattr(self, "_config_cache", None)
        if cached is None or cached[0] != fields:
            cached = self._config_cache = (copy.deepcopy(fields), dataclasses.asdict(self.config))
        return cached[1]

    def restore_counters(self, ck: Checkpoint) -> None:
        """Takes back what `counters_state` saved (the checkpoint's counters, checked when read) and torch's RNG
        state; drops the metrics rows written after the checkpoint (a run killed between the two) and a partial
        last row (a run killed mid-write)."""
        rng = tensor_state(ck, "torch_rng")
        fitting(ck, "torch_rng (torch's RNG state)", lambda: torch.set_rng_state(rng))
        for k in self.COUNTERS:
            setattr(self, k, ck.counters[k])
        self.returns.extend(ck.counters["returns"])
        self.lengths.extend(ck.counters["lengths"])
        self.checkpointed = (self.iteration, self.env_steps)
        c = self.config  # type: ignore[attr-defined]
        rows, partial = truncate_metrics(c.metrics_path, self.iteration, c.metrics_format)
        if rows or partial:
            log.warning("%s: dropped %s written after the checkpoint's iteration %d", c.metrics_path,
                        " and ".join(([f"{rows} row(s)"] if rows else []) + (["a partial last line"] if partial
                                                                             else [])), self.iteration)

    def commit_checkpoint(self, algo: str, weights: dict[str, Any], extra: dict[str, Any] | None = None,
                          files: dict[str, Callable[[Any], None]] | None = None,
                          extra_meta: dict[str, Any] | None = None, background: bool = False,
                          defer: bool = False) -> None:
        """Commits the run's checkpoint (`trajview.train.checkpoint.write_checkpoint`): the settings, the counters,
        ``weights`` with torch's RNG state, the trainer's ``extra`` JSON and ``files``. A value of ``weights`` that
        is `Stateful` (a policy) stands for its ``get_state()``. With ``background``, the state is taken now
        (serialized: ``files`` must not change after) and written by a thread while the run goes on (its fsyncs
        off the iteration's path); `wait_checkpoint` waits for it, and the next commit first.

        With ``defer``, nothing is written: the state is taken now (a copy in memory: a `Stateful`'s
        ``state_snapshot()``, every other tensor cloned, the JSON copied) and replaces the one deferred before; the
        next commit drops it, `flush_checkpoint` writes it. A checkpoint with ``files`` (written from memory the
        next iteration changes) cannot be deferred."""
        at = (self.iteration, self.env_steps)
        if defer and files:
            raise ValueError("commit_checkpoint: a checkpoint with files cannot be deferred")

        def args() -> tuple[Path, str, dict[str, Any], dict[str, Any]]:
            return self.config.checkpoint_path, algo, self._config_state(), self.counters_state()

        def as_it_is() -> Callable[[], Any]:
            state = {k: v.get_state() if _stateful(v) else v for k, v in weights.items()}
            return prepare_checkpoint(*args(), {**state, "torch_rng": torch.get_rng_state()}, extra, files, extra_meta)

        # Until this call returns, a stop (Ctrl-C, SIGTERM, an error: `flush_checkpoint`) writes this iteration's
        # state as it is now, not an older one: nothing changes it before then (a stop while an earlier write is
        # waited for, or while this state is serialized or copied, loses nothing).
        self._deferred = (as_it_is, at)
        if defer:
            taken = args()
            copies = {k: _snapshot(v) for k, v in weights.items()}
            rng, extra_copy, meta_copy = torch.get_rng_state(), copy.deepcopy(extra), copy.deepcopy(extra_meta)

            def deferred() -> Callable[[], Any]:
                state = {k: f() for k, f in copies.items()}
                return prepare_checkpoint(*taken, {**state, "torch_rng": rng}, extra_copy, None, meta_copy)

            self._deferred = (deferred, at)
            return
        self.wait_checkpoint()
        self._commit(as_it_is(), at, background)  # (`_commit` drops the deferred state when it hands this off)

    def flush_checkpoint(self) -> None:
        """Waits for a checkpoint being written (`wait_checkpoint`), then writes the deferred one, if any (the state
        of the last iteration, taken when it ended: `commit_checkpoint` with ``defer``, or the one a stop came in the
        middle of committing). Ctrl-C and SIGTERM are held back until both are done (`_signals_held`: a second
        Ctrl-C while a stopped run writes its last iteration would lose it), then handled."""
        with _signals_held():
            self.wait_checkpoint()
            deferred = self._deferred
            if deferred is not None:
                prepare, at = deferred
                self._commit(prepare(), at, background=False)

    def _commit(self, commit_folder: Callable[[], Any], at: tuple[int, int], background: bool) -> None:
        metrics = self.config.metrics_path

        def commit() -> None:  # the metrics rows this checkpoint covers (appended unsynced) durable before it
            if os.path.exists(metrics):
                fsync_file(metrics)
            commit_folder()

        if not background:
            commit()
            self.checkpointed = at
            self._deferred = None  # (written: nothing left for `flush_checkpoint`)
            return

        def write() -> None:
            try:
                commit()
            except BaseException as e:  # raised by wait_checkpoint, in the run's thread
                self._commit_error = e

        self._commit_error = None
        thread = threading.Thread(target=write, name="trajview-checkpoint")
        # Ctrl-C / SIGTERM held back while the thread starts (a KeyboardInterrupt inside Thread.start() left a
        # thread that may run but could not be joined); a signal that came meanwhile is handled right after.
        with _signals_held():
            thread.start()
            self._committing = (thread, at)
            self._deferred = None  # (handed off: `wait_checkpoint` waits for it)

    def wait_checkpoint(self) -> None:
        """Waits for a checkpoint written in the background (`commit_checkpoint`) and raises its error, if any."""
        pending = self._committing
        if pending is None:
            return
        pending[0].join()
        self._committing = None
        err, self._commit_error = self._commit_error, None
        if err is not None:
            raise err
        self.checkpointed = pending[1]

    def load_checkpoint(self, algo: str) -> Checkpoint:
        """The run's checkpoint, read and checked (`read_checkpoint`), of ``algo``'s trainer."""
        ck = read_checkpoint(self.config.checkpoint_path)
        if ck.algo != algo:
            raise FileIntegrityError(ck.manifest_path, f"a {ck.algo.upper()} run's checkpoint, not {algo.upper()}'s")
        return ck

    @property
    def mean_return(self) -> float:
        """The mean return of the last ``smoothing_episodes`` episodes (NaN before the first)."""
        return _mean(self.returns, np.float64)

    def progress_row(self, steps: int, seconds: float) -> dict[str, Any]:
        """A metrics row's first columns, the same for every trainer: the counters (as they are after the
        iteration), the last episodes' mean return and length, and the iteration's ``steps`` env steps per second
        over its ``seconds``."""
        return {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "episode_return_mean": self.mean_return,
            "episode_len_mean": _mean(self.lengths, np.int64),
            "time_s": round(self.elapsed, 3),
            "steps_per_s": round(steps / seconds, 1),
        }


class _Run(Protocol):
    config: Any
    env_steps: int
    iteration: int
    elapsed: float
    checkpointed: tuple[int, int] | None
    returns: deque[float]

    @property
    def mean_return(self) -> float: ...

    def done(self) -> bool: ...

    def train_iteration(self) -> dict: ...

    def save_checkpoint(self, background: bool = False, defer: bool = False) -> None: ...

    def wait_checkpoint(self) -> None: ...

    def flush_checkpoint(self) -> None: ...


class NothingToTrain(ValueError):
    """A run whose stop condition holds before its first iteration (a resumed run that reached its timesteps or
    its stop reward): the message says which, and what continues it."""


def _why_done(run: _Run) -> str:
    c = run.config
    if run.env_steps >= c.timesteps:
        return (f"the run in {c.out_dir} already has {run.env_steps} env steps, its timesteps ({c.timesteps}): "
                f"--resume --timesteps N (N above {run.env_steps}) continues it")
    return (f"the run in {c.out_dir} already reached its stop reward {c.stop_reward:g} (mean return "
            f"{run.mean_return:.1f} over its last {len(run.returns)} episodes): --resume --stop-reward none (or a "
            f"higher one) continues it")


def run_loop(
    run: _Run,
    *,
    desc: str,
    log_line: Callable[[dict], str],
    progress: bool,
    on_iteration: Callable[[dict], None] | None,
    close: Callable[[], None],
) -> None:
    """Iterations until ``run.done()``; a progress bar (or, without, ``log_line(row)`` logged per iteration);
    ``close()`` at the end, whatever happened.

    Checkpoints (`RunCounters.commit_checkpoint`): an iteration that ends ``checkpoint_interval_s`` (PPO's
    ``--checkpoint-interval``; a config without it: 0) or more seconds after the last checkpoint was taken, and the
    last one, are written (while the next iteration runs, where the trainer can); the others' state is taken and
    kept in memory (``defer``), and the last of them is written when the loop ends early, however it ends (Ctrl-C,
    SIGTERM, an error: `RunCounters.flush_checkpoint`, which also waits for a write under way). So a run that stops
    keeps its last complete iteration, and one killed outright (SIGKILL, a power cut) at most the interval's
    seconds of iterations less."""
    tqdm = require("tqdm", "a training run's progress bar").tqdm

    c = run.config
    if run.done():  # (a resumed run: its stop condition held when its checkpoint was written)
        close()
        raise NothingToTrain(_why_done(run))
    bar = tqdm(total=c.timesteps, initial=min(run.env_steps, c.timesteps), unit="step", disable=not progress,
               dynamic_ncols=True, desc=desc)
    interval = getattr(c, "checkpoint_interval_s", 0.0)  # (DQN's config has none: its replay files are written
    last = time.monotonic()  # from the buffer's memory, which the next iteration changes, so after each iteration)
    try:
        while not run.done():
            if _terminate_requested:  # a SIGTERM whose Terminated was swallowed (`_terminate_requested`)
                raise Terminated()
            row = run.train_iteration()
            now = time.monotonic()
            due = now - last >= interval or run.done()
            run.save_checkpoint(background=True, defer=not due)  # written while the next iteration runs (PPO)
            if due:
                last = now
            if not bar.disable:  # (a bar not shown: its postfix not formatted either)
                bar.update(min(row["env_steps"], c.timesteps) - bar.n)
                post = {"ret": f"{row['episode_return_mean']:.1f}", "sps": f"{row['steps_per_s']:.0f}"}
                if "worker_steps_per_s" in row:  # PPO: each worker's sampling rate, the learner's wait for the batch
                    post["worker_sps"] = f"{row['worker_steps_per_s']:.0f}"
                    post["idle"] = f"{row['learner_idle_s']:.2f}s"
                bar.set_postfix(post, refresh=False)
            if on_iteration is not None:
                on_iteration(row)
            if not progress and log.isEnabledFor(logging.INFO):  # (the line made only where it is logged)
                log.info("%s", log_line(row))
    finally:
        try:
            run.flush_checkpoint()  # the last iteration's checkpoint written and complete (or its error raised)
        finally:
            bar.close()
            close()


def summarize(run: _Run, title: str) -> dict[str, Any]:
    """The run's summary (where the mean return first reached ``stop_reward``), with the learning curve plotted."""
    c = run.config
    rows = read_metrics(c.metrics_path)
    reached = None
    if c.stop_reward is not None:
        reached = next((r for r in rows if r["episode_return_mean"] >= c.stop_reward), None)
    png = Path(c.out_dir) / "learning_curve.png"
    plot_learning_curve(rows, png, title, c.stop_reward)
    return {
        "env_steps": run.env_steps,
        "iterations": run.iteration,
        "episode_return_mean": run.mean_return,
        "time_s": run.elapsed,
        "reached_stop_reward": reached is not None,
        "steps_to_stop_reward": int(reached["env_steps"]) if reached else None,
        "time_to_stop_reward_s": float(reached["time_s"]) if reached else None,
        "metrics": str(c.metrics_path),
        "plot": str(png),
        "checkpoint": str(c.checkpoint_path),
    }


def where_it_stopped(trainer: Any, config: Any) -> str:
    """Where a run that stopped early stands: the iteration its checkpoint holds (`RunCounters.checkpointed`: the
    last complete iteration, written when the loop stopped, so an iteration cut short is not in it), and how to go
    on."""
    if config is None or not has_checkpoint(config.checkpoint_path):
        ran = int(getattr(trainer, "iteration", 0) or 0) - int(getattr(trainer, "start_iteration", 0) or 0)
        if ran > 0 and config is not None:  # (each stop writes the last complete iteration: its write failed)
            return (f"no checkpoint was written: {ran} iteration(s) ran, but their checkpoint could not be written "
                    f"(the error above); --out {config.out_dir} holds their metrics alone, which --resume cannot "
                    f"continue: start the run again with another --out")
        return "the run stopped before its first iteration (nothing written)"
    saved = getattr(trainer, "checkpointed", None)
    if saved is None:  # the trainer did not get as far as its checkpoint's counters: a resumed run's start failed
        return f"the run's checkpoint {config.checkpoint_path} is as it was; --resume --out {config.out_dir} continues it"
    try:  # what the folder holds: a signal in the middle of a commit may come after it landed, before it was noted
        counters = read_checkpoint(config.checkpoint_path, weights=False).counters
        iteration, env_steps = int(counters["iteration"]), int(counters["env_steps"])
    except Exception:  # noqa: BLE001 (unreadable now: the last commit this process saw complete)
        iteration, env_steps = saved
    session = "" if iteration > getattr(trainer, "start_iteration", 0) else " (none of this session's)"
    return (f"the run's checkpoint {config.checkpoint_path} holds iteration {iteration} "
            f"({env_steps} env steps){session}; --resume --out {config.out_dir} continues it")




@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back for the block: their Python handlers (which run in the main thread, whichever
    thread the kernel gave the signal to: blocking it in the main thread alone does not keep a KeyboardInterrupt
    out, since any other thread, torch's included, may take it) are replaced by one that notes them; when the block
    ends, the handlers are put back and each signal that came is raised again, once, for them. Outside the main
    thread (no signal handlers there), or where a handler was set outside Python, nothing is held."""
    sigs = (signal.SIGINT, signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread() or any(signal.getsignal(s) is None for s in sigs):
        yield
        return
    came: list[int] = []

    def note(signum: int, frame: Any) -> None:
        if signum not in came:
            came.append(signum)

    old = [(s, signal.signal(s, note)) for s in sigs]
    try:
        yield
    finally:
        for s, handler in old:
            signal.signal(s, handler)
        for signum in came:
            signal.raise_signal(signum)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread by `on_sigterm`'s handler: a KeyboardInterrupt, so that it stops a run
    the way Ctrl-C does (the workers stopped, the checkpoint kept)."""


#: A SIGTERM came (`on_sigterm`'s handler). Its `Terminated` can be swallowed where Python runs the handler inside
#: a hook that ignores exceptions (the after-fork hooks of a worker process being started: "Exception ignored");
#: `run_loop` raises it again at its next iteration, so the run stops all the same.
_terminate_requested = False


def on_sigterm() -> Callable[[], None]:
    """Makes SIGTERM raise `Terminated` in the main thread (once: a second SIGTERM while the run stops is
    ignored; SIGKILL still ends it). Returns the function that puts the previous handler back. Called from
    another thread (where Python sets no handlers), it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, frame: Any) -> None:
        global _terminate_requested
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _terminate_requested = True  # (raised again by `run_loop` where Python swallowed the raise below)
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)

    def restore() -> None:
        global _terminate_requested
        signal.signal(signal.SIGTERM, previous)
        _terminate_requested = False

    return restore


def interrupted(trainer: Any, config: Any, stop: BaseException | None = None) -> int:
    """``trajview train`` stopped by Ctrl-C or SIGTERM (PPO or DQN): prints where the run stands
    (`where_it_stopped`) instead of a traceback; the exit code, 130 (SIGINT) or 143 (SIGTERM, ``stop`` a
    `Terminated`), as a shell gives a command a signal ended."""
    what = "terminated (SIGTERM)" if isinstance(stop, Terminated) else "interrupted"
    wait = getattr(trainer, "wait_checkpoint", None)
    if wait is not None:  # a checkpoint being written when the signal came completes first: the message names it
        try:
            wait()
        except BaseException:  # noqa: BLE001 (its write failed, or a second Ctrl-C: the one that stands is named)
            pass
    print(f"trajview train: {what}\n{where_it_stopped(trainer, config)}", file=sys.stderr)
    return 143 if isinstance(stop, Terminated) else 130
