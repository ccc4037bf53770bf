"""`LazyView`: a batch column kept as rows of a shared array plus an index (see docs/contract.md, Views).

numpy only; `LazyView.to_torch` imports torch when called.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["LazyView"]


class LazyView:
    """A batch column kept as rows of a shared array plus an index: its value is ``base[index]``.

    Collectors built with ``lazy_views`` hand these out for the views of big
    columns (e.g. a 4-frame stack and ``new_obs`` over 84x84 frames): the
    batch then holds each stored row once (``base``, shared by every view of
    that column) plus 8 bytes per (row, offset) of ``index``, instead of
    copying every row each view reads. ``SampleBatch`` materializes a lazy
    column when it is read (``batch[key]``) and keeps the result; ``to_torch``
    gathers on a device instead (ship ``base`` once, gather there).

    ``shape``/``dtype``/``len`` are those of the array it stands for; slicing
    rows (``view[a:b]``) is another `LazyView`; any other indexing, ``np.asarray``
    and `materialize` give numpy arrays.
    """

    __slots__ = ("base", "index")

    def __init__(self, base: np.ndarray, index: np.ndarray) -> None:
        base = np.asarray(base)
        index = np.asarray(index)
        if base.ndim == 0:
            raise ValueError("LazyView base must have a row axis, got a 0-d array")
        if not np.issubdtype(index.dtype, np.integer) or index.ndim == 0:
            raise TypeError(f"LazyView index must be an integer array with a row axis, got {index.dtype} {index.shape}")
        if index.size and (int(index.min()) < 0 or int(index.max()) >= len(base)):
            raise IndexError(
                f"LazyView index must be in [0, {len(base)}) (the base's rows), got [{index.min()}, {index.max()}]"
            )
        self.base = base
        self.index = index

    @classmethod
    def _trusted(cls, base: np.ndarray, index: np.ndarray) -> LazyView:
        view = cls.__new__(cls)
        view.base = base
        view.index = index
        return view

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.index.shape) + tuple(self.base.shape[1:])

    @property
    def dtype(self) -> np.dtype:
        return self.base.dtype

    @property
    def ndim(self) -> int:
        return self.index.ndim + self.base.ndim - 1

    @property
    def nbytes(self) -> int:
        """Bytes of the materialized array (numpy's meaning); `stored_nbytes` is what it holds."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.base.itemsize

    @property
    def stored_nbytes(self) -> int:
        """Bytes this view holds: its base (shared with the other views of its column) and its index."""
        return self.base.nbytes + self.index.nbytes

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, key: Any) -> Any:
        if type(key) is slice and key.step is None or isinstance(key, slice) and key.step == 1:
            view = LazyView.__new__(LazyView)
            view.base = self.base
            view.index = self.index[key]
            return view
        if isinstance(key, tuple) and len(key) > self.index.ndim:
            return self.materialize()[key]
        return self.base[self.index[key]]

    def materialize(self) -> np.ndarray:
        """The array this view stands for (a fresh copy)."""
        return np.take(self.base, self.index, axis=0)

    def copy(self) -> np.ndarray:
        return self.materialize()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self.materialize()
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def to_torch(self, device: Any = None, _bases: dict | None = None) -> Any:
        """``base[index]`` as a torch tensor, gathered on ``device``.

        ``_bases`` (id(base) -> tensor) lets several views of one column share one transfer of ``base``.
        """
        import torch

        key = id(self.base)
        if _bases is not None and key in _bases:
            base = _bases[key]
        else:
            base = self.base if self.base.flags.writeable else self.base.copy()
            base = to_device(torch.from_numpy(base), device)
            if _bases is not None:
                _bases[key] = base
        return base[to_device(torch.from_numpy(self.index), device)]

    def __repr__(self) -> str:
        return f"LazyView(shape={self.shape}, dtype={self.dtype}, base rows={len(self.base)})"


def to_device(t: Any, device: Any) -> Any:
    """A CPU tensor on ``device``: to a CUDA device through pinned (page-locked) host memory, the copy queued
    without waiting (`torch.Tensor.pin_memory`); elsewhere as ``t.to(device)``. The one rule for every batch
    the learner ships to its device (`TorchPolicy._to_torch`, lazy views' bases)."""
    import torch

    dev = torch.device(device) if device is not None else None
    if dev is not None and dev.type == "cuda":
        return t.pin_memory().to(dev, non_blocking=True)
    return t.to(device)
