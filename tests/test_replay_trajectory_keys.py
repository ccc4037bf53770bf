"""The one piece-cutting rule (`_core.trajectory_pieces`, which `ReplayStore::add` cuts by) and the writer-side
`TrajectoryKeys` checks built on it, against small pure-Python references."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajview import _core
from trajview.replay.trajectory_keys import TrajectoryKeys


def reference_pieces(keys: list[int], done: list[bool]) -> list[int]:
    """A piece starts at row 0, where the key changes, and after a row with its end flag set."""
    return [i for i in range(len(keys)) if i == 0 or keys[i] != keys[i - 1] or done[i - 1]]


def reference_first_kept_row(keys: list[int], done: list[bool], capacity: int, has_next: bool) -> int:
    """The first row from which the rest of the batch fits: its steps plus one final row per piece."""
    n = len(keys)
    for first in range(n + 1):
        pieces = len(reference_pieces(keys[first:], done[first:])) if has_next else 0
        if n - first + pieces <= capacity:
            return first
    return n


rows = st.lists(st.tuples(st.integers(-3, 3), st.booleans()), max_size=40)


@settings(max_examples=300, deadline=None)
@given(rows)
def test_pieces_match_the_reference(batch: list[tuple[int, bool]]) -> None:
    keys = [k for k, _ in batch]
    done = [d for _, d in batch]
    got = _core.trajectory_pieces(np.asarray(keys, np.int64), np.asarray(done, np.uint8))
    assert got.dtype == np.int64
    assert got.tolist() == reference_pieces(keys, done)


@settings(max_examples=300, deadline=None)
@given(rows, st.integers(1, 50), st.booleans())
def test_first_kept_row_matches_the_reference(batch: list[tuple[int, bool]], capacity: int, has_next: bool) -> None:
    keys = np.asarray([k for k, _ in batch], np.int64)
    done = np.asarray([d for _, d in batch], np.uint8)
    want = reference_first_kept_row(keys.tolist(), done.astype(bool).tolist(), capacity, has_next)
    assert TrajectoryKeys.first_kept_row(keys, done, capacity, has_next) == want


def test_pieces_refuse_arrays_of_two_lengths() -> None:
    with pytest.raises(ValueError, match="one length"):
        _core.trajectory_pieces(np.zeros(3, np.int64), np.zeros(2, np.uint8))


def test_check_writers_refuses_a_reused_id_and_changes_nothing() -> None:
    tk = TrajectoryKeys()
    keys, t, done = np.zeros(3, np.int64), np.arange(3), np.zeros(3, np.uint8)
    tk.commit(tk.check_writers(keys, t, done, "eps_id"), 0, True)
    assert tk.open == {0: (0, 2)}
    with pytest.raises(ValueError, match="trajectory id 0 .* is reused"):
        tk.check_writers(keys, t, done, "eps_id")
    assert tk.open == {0: (0, 2)}
    # t continues: joins; an end flag closes it
    tk.commit(tk.check_writers(keys, t + 3, np.array([0, 0, 1], np.uint8), "eps_id"), 1, True)
    assert tk.open == {}


def reference_step_error_row(keys: list[int], t: list[int], done: list[bool]) -> int | None:
    """The first row whose ``t`` is not its predecessor's + 1 within one piece (None: every piece counts up)."""
    starts = set(reference_pieces(keys, done))
    return next((r for r in range(1, len(t)) if r not in starts and t[r] != t[r - 1] + 1), None)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.booleans(), st.integers(-1, 2)), min_size=1, max_size=40))
def test_check_steps_refuses_exactly_the_first_jump_inside_a_piece(batch: list[tuple[int, bool, int]]) -> None:
    """`TrajectoryKeys.check_steps` against the reference: ``t`` made of random steps (mostly +1), refused at the
    first row inside a piece where it does not go up by one, naming that row."""
    keys = [k for k, _, _ in batch]
    done = [d for _, d, _ in batch]
    t = np.cumsum([1 if s in (1, 2) else s for _, _, s in batch]).tolist()
    want = reference_step_error_row(keys, t, done)
    call = lambda: TrajectoryKeys.check_steps(np.asarray(keys, np.int64), np.asarray(t, np.int64),  # noqa: E731
                                              np.asarray(done, np.uint8), "eps_id")
    if want is None:
        call()
    else:
        with pytest.raises(ValueError, match=rf"at rows {want - 1}-{want}, within one trajectory"):
            call()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=20), st.sampled_from(["bool", "u8", "2d"]))
def test_keys_end_flags_are_any_of_the_flag_columns(rows_: list[tuple[bool, bool]], kind: str) -> None:
    """`TrajectoryKeys.keys`' end flag of a row: any of its end columns set, whatever their dtype and shape (a
    bool column, a uint8 one, a column of two flags per row), and a new synthetic id after each end."""
    n = len(rows_)
    term = np.array([a for a, _ in rows_])
    trunc = np.array([b for _, b in rows_])
    if kind == "u8":
        term = term.astype(np.uint8)
    elif kind == "2d":
        term = np.stack([term, np.zeros(n, bool)], axis=1)
    keys, done = TrajectoryKeys().keys({"terminateds": term, "truncateds": trunc}, n, None, None)
    want = [a or b for a, b in rows_]
    assert done.astype(bool).tolist() == want
    assert keys.tolist() == [sum(want[:i]) for i in range(n)]
