"""A flat column name that collides with a leaf of a nested value is an error naming both, wherever columns
are built from nested values (`trajview.views.nest.flatten_columns`: SampleBatch, the collector's columns and
steps, ReplayBuffer.add); before, the later entry silently replaced the leaf."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trajview as tv
from trajview.views.nest import flatten_columns, flatten_value, is_nested_value

# -- the rule against a reference --------------------------------------------------------------------------------

KEYS = ["a", "b", "0", "1"]
names = st.lists(st.sampled_from(KEYS), min_size=1, max_size=3).map(".".join)
nested = st.recursive(
    st.integers(0, 9).map(lambda i: np.full(2, i)),
    lambda children: st.dictionaries(st.sampled_from(KEYS), children, min_size=1, max_size=3),
    max_leaves=5,
)


def reference(columns: dict) -> dict | None:
    """The leaves of every entry; None (a collision) if two entries name one column, or one entry's column
    lies above another's (``x.a`` and ``x.a.b``), where either comes from a nested value."""
    items = []  # (entry, column, value, from a nested value)
    for name, value in columns.items():
        if isinstance(value, dict):
            items += [(name, c, v, True) for c, v in flatten_value(name, value).items()]
        else:
            items.append((name, name, value, False))
    for e1, c1, _, n1 in items:
        for e2, c2, _, n2 in items:
            if (e1, c1) != (e2, c2) and (n1 or n2) and (c1 == c2 or c2.startswith(c1 + ".")):
                return None
    return {c: v for _, c, v, _ in items}


@settings(deadline=None, max_examples=300)
@given(st.dictionaries(names, st.one_of(st.integers(0, 9).map(lambda i: np.full(2, i)), nested), min_size=1,
                       max_size=4))
def test_flatten_columns_is_the_reference(columns):
    want = reference(columns)

    def leaves(k, v):
        return flatten_value(k, v) if is_nested_value(v) else None

    if want is None:
        with pytest.raises(ValueError, match="give each column once"):
            flatten_columns(columns, leaves)
    else:
        got = flatten_columns(columns, leaves)
        assert list(got) == list(want) and all(got[k] is want[k] for k in got)


# -- every place that builds columns from nested values -------------------------------------------------------


@pytest.mark.parametrize("order", ["flat first", "nested first"])
def test_sample_batch_refuses_a_flat_name_of_a_nested_leaf(order):
    flat, nest = ("obs.a", np.zeros(3)), ("obs", {"a": np.ones(3), "b": np.ones(3)})
    data = dict([flat, nest] if order == "flat first" else [nest, flat])
    with pytest.raises(ValueError, match=re.escape("column 'obs.a' is given twice")) as e:
        tv.SampleBatch(data)
    assert "a column of its own" in str(e.value) and "a leaf of the nested column 'obs'" in str(e.value)
    with pytest.raises(ValueError, match="'obs.a'"):
        tv.SampleBatch({"obs": {"a": np.ones(3)}}, **{"obs.a": np.zeros(3)})
    # A flat column above or below a nested leaf: which one is the leaf would depend on the order.
    with pytest.raises(ValueError, match=re.escape("column 'obs.a' (a column of its own) would have column 'obs.a.b'")):
        tv.SampleBatch({"obs.a": np.zeros(3), "obs": {"a": {"b": np.ones(3)}}})
    with pytest.raises(ValueError, match=re.escape("column 'obs.a' (a leaf of the nested column 'obs') would have "
                                                   "column 'obs.a.b' (a column of its own)")):
        tv.SampleBatch({"obs": {"a": np.ones(3)}, "obs.a.b": np.zeros(3)})
    # Leaves beside each other are fine: obs is {"a", "b"}.
    b = tv.SampleBatch({"obs.a": np.zeros(3), "obs": {"b": np.ones(3)}})
    assert sorted(b["obs"]) == ["a", "b"]


def test_collector_columns_and_steps_refuse_the_collision():
    box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    with pytest.raises(ValueError, match=re.escape("column 'obs.a' is given twice")):
        tv.Collector(1, {"obs.a": (np.float32, (2,)), "obs": gym.spaces.Dict(a=box)}, {"obs": tv.ViewRequirement()})
    c = tv.Collector(1, {"obs": gym.spaces.Dict(a=box, b=box), "rewards": (np.float64, ())},
                     {"obs": tv.ViewRequirement(), "rewards": tv.ViewRequirement()})
    row = {"a": np.zeros((1, 2), np.float32), "b": np.zeros((1, 2), np.float32)}
    c.begin_episodes([0], {"obs": row})
    with pytest.raises(ValueError, match=re.escape("column 'obs.a' is given twice")):
        c.add_step({"obs": row, "obs.a": np.ones((1, 2), np.float32), "rewards": np.zeros(1)})
    c.add_step({"obs": row, "rewards": np.ones(1)})  # the refused step changed nothing
    (seg,) = c.build_batch()
    assert len(seg) == 1 and seg["rewards"].tolist() == [1.0]


def test_replay_add_refuses_the_collision():
    rb = tv.ReplayBuffer(16)
    with pytest.raises(ValueError, match=re.escape("column 'obs.a' is given twice")):
        rb.add({"obs": {"a": np.ones(2)}, "obs.a": np.zeros(2), "rewards": np.zeros(2),
                "eps_id": np.zeros(2, np.int64)})
    assert len(rb) == 0


def test_replay_columns_refuse_the_collision():
    box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    with pytest.raises(ValueError, match=re.escape("column 'obs.a' is given twice")):
        tv.ReplayBuffer(16, columns={"obs": gym.spaces.Dict(a=box), "obs.a": (np.float32, (2,))})
    rb = tv.ReplayBuffer(16, columns={"obs": gym.spaces.Dict(a=box), "obs.b": (np.float32, (2,))})
    assert sorted(rb.columns) == ["obs.a", "obs.b"]
