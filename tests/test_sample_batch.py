"""Tests for `SampleBatch`, `MultiAgentBatch` and `concat_samples`."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajview import MultiAgentBatch, SampleBatch, concat_samples

SB = SampleBatch


def ptr(a: np.ndarray) -> int:
    """Address of an array's first element."""
    return a.__array_interface__["data"][0]


def make_parent(n_rows: int = 12, n_seqs: int | None = None) -> dict[str, np.ndarray]:
    """A flat buffer per column, like the collector builds."""
    parent = {
        SB.OBS: np.arange(n_rows * 2, dtype=np.float32).reshape(n_rows, 2),
        SB.ACTIONS: np.arange(n_rows, dtype=np.int64),
        SB.REWARDS: np.arange(n_rows, dtype=np.float32) / 10,
        SB.EPS_ID: np.repeat(np.arange(n_rows // 4, dtype=np.int64), 4),
    }
    if n_seqs is not None:
        parent[SB.SEQ_LENS] = np.full(n_seqs, n_rows // n_seqs, dtype=np.int32)
        parent["state_in_0"] = np.arange(n_seqs * 3, dtype=np.float32).reshape(n_seqs, 3)
    return parent


SEQ = frozenset({SB.SEQ_LENS, "state_in_0"})


# -- construction -------------------------------------------------------------


def test_column_constants():
    assert (SB.OBS, SB.NEXT_OBS, SB.ACTIONS, SB.REWARDS) == ("obs", "new_obs", "actions", "rewards")
    assert (SB.PREV_ACTIONS, SB.PREV_REWARDS) == ("prev_actions", "prev_rewards")
    assert (SB.TERMINATEDS, SB.TRUNCATEDS, SB.DONES, SB.INFOS) == ("terminateds", "truncateds", "dones", "infos")
    assert (SB.EPS_ID, SB.UNROLL_ID, SB.AGENT_INDEX, SB.ENV_ID, SB.T) == (
        "eps_id",
        "unroll_id",
        "agent_index",
        "env_id",
        "t",
    )
    assert (SB.SEQ_LENS, SB.IS_INIT, SB.ACTION_LOGP) == ("seq_lens", "is_init", "action_logp")
    assert (SB.ACTION_DIST_INPUTS, SB.VF_PREDS) == ("action_dist_inputs", "vf_preds")


def test_construction_converts_lists_and_counts_rows():
    b = SampleBatch({"obs": [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]}, actions=[1, 2, 3])
    assert isinstance(b, dict)
    assert isinstance(b["obs"], np.ndarray) and b["obs"].shape == (3, 2) and b["obs"].dtype == np.float64
    assert b["actions"].tolist() == [1, 2, 3]
    assert b.count == 3 and len(b) == 3
    assert list(b.keys()) == ["obs", "actions"]


def test_construction_keeps_numpy_arrays_without_copy():
    obs = np.zeros((4, 3), dtype=np.float32)
    b = SampleBatch(obs=obs)
    assert b["obs"] is obs


def test_kwargs_override_data():
    b = SampleBatch({"a": [1, 2]}, a=[5, 6])
    assert b["a"].tolist() == [5, 6]


def test_empty_batch():
    b = SampleBatch()
    assert b.count == 0 and len(b) == 0 and dict(b) == {}
    assert b.split_by_episode() == []


def test_infos_may_hold_objects():
    infos = [{"a": 1}, {"b": [1, 2]}, {}]
    b = SampleBatch(infos=infos, rewards=[0.0, 1.0, 2.0])
    assert b["infos"].dtype == object and b["infos"].shape == (3,)
    assert b["infos"][1] == {"b": [1, 2]}
    assert b.count == 3


def test_object_dtype_rejected_outside_infos():
    with pytest.raises(TypeError, match=r"column 'actions' .*got dtype object"):
        SampleBatch(actions=np.array([{"x": 1}, None], dtype=object))


def test_ragged_list_rejected_naming_column():
    with pytest.raises(ValueError, match=r"column 'obs' cannot be converted"):
        SampleBatch(obs=[[1, 2], [3]])


def test_scalar_column_rejected():
    with pytest.raises(ValueError, match=r"column 'rewards' must have a batch axis"):
        SampleBatch(rewards=1.0)


def test_non_str_key_rejected():
    with pytest.raises(TypeError, match=r"column names must be str, got 3"):
        SampleBatch({3: [1, 2]})


def test_length_mismatch_names_column_expected_and_got():
    with pytest.raises(ValueError, match=r"column 'actions' has 2 rows, expected 3 \(the rows of column 'obs'\)"):
        SampleBatch(obs=np.zeros((3, 2)), actions=[1, 2])


def test_seq_lens_makes_state_in_per_sequence():
    b = SampleBatch(
        obs=np.zeros((5, 2)),
        seq_lens=np.array([3, 2], dtype=np.int32),
        state_in_0=np.ones((2, 4)),
    )
    assert b.count == 5 and len(b) == 5
    assert b._seq_keys == {"seq_lens", "state_in_0"}
    assert b.seq_keys == {"seq_lens", "state_in_0"}


def test_state_in_without_seq_lens_is_per_step():
    b = SampleBatch(obs=np.zeros((5, 2)), state_in_0=np.ones((5, 4)))
    assert b._seq_keys == frozenset()
    assert b.count == 5


def test_state_in_per_step_when_length_differs_from_seq_lens():
    b = SampleBatch(obs=np.zeros((5, 2)), seq_lens=np.array([3, 2]), state_in_0=np.ones((5, 4)))
    assert b._seq_keys == {"seq_lens"}
    assert b.count == 5


def test_registered_seq_keys():
    b = SampleBatch(
        obs=np.zeros((6, 2)),
        seq_lens=[4, 2],
        seq_feat=np.array([7.0, 8.0]),
        seq_keys=["seq_feat"],
    )
    assert b._seq_keys == {"seq_lens", "seq_feat"}
    assert b.count == 6
    # Without registration the same column is a misaligned per-step column.
    with pytest.raises(ValueError, match=r"column 'seq_feat' has 2 rows, expected 6"):
        SampleBatch(obs=np.zeros((6, 2)), seq_lens=[4, 2], seq_feat=np.array([7.0, 8.0]))


def test_per_sequence_mismatch_mentions_both_lengths():
    with pytest.raises(ValueError, match=r"column 'state_in_0' has 3 rows, expected 5 .* or 2 \(one row per sequence\)"):
        SampleBatch(obs=np.zeros((5, 2)), seq_lens=[3, 2], state_in_0=np.ones((3, 4)))


def test_count_from_seq_lens_when_only_per_sequence_columns():
    b = SampleBatch(seq_lens=np.array([3, 4]), state_in_0=np.zeros((2, 1)))
    assert b.count == 7


def test_seq_lens_must_be_integer():
    with pytest.raises(TypeError, match=r"'seq_lens' must be a 1-D integer array, got shape \(2,\) dtype float64"):
        SampleBatch(obs=np.zeros((3, 1)), seq_lens=[1.5, 1.5])


def test_setitem_validates_and_keeps_batch_intact():
    b = SampleBatch(obs=np.zeros((3, 2)), actions=[0, 1, 2])
    b["advantages"] = [0.5, 0.25, 0.125]
    assert b["advantages"].tolist() == [0.5, 0.25, 0.125]
    with pytest.raises(ValueError, match=r"column 'vf_preds' has 4 rows, expected 3"):
        b["vf_preds"] = np.zeros(4)
    assert "vf_preds" not in b and b.count == 3
    # Replacing a column with a wrong length names that column, not another one.
    with pytest.raises(ValueError, match=r"column 'obs' has 2 rows, expected 3"):
        b["obs"] = np.zeros((2, 2))
    assert b["obs"].shape == (3, 2)


def test_update_and_pop_and_del():
    b = SampleBatch(obs=np.zeros((2, 1)))
    b.update({"actions": [1, 2]}, rewards=[0.0, 1.0])
    assert sorted(b) == ["actions", "obs", "rewards"]
    assert b.pop("actions").tolist() == [1, 2]
    assert b.pop("missing", 42) == 42
    del b["rewards"]
    assert list(b) == ["obs"] and b.count == 2
    with pytest.raises(KeyError):
        del b["rewards"]
    with pytest.raises(ValueError, match=r"column 'x' has 3 rows, expected 2"):
        b.update(x=[1, 2, 3])


def test_to_dict_is_plain_dict_of_same_arrays():
    b = SampleBatch(obs=np.zeros((2, 1)), actions=[3, 4])
    d = b.to_dict()
    assert type(d) is dict
    assert d["obs"] is b["obs"] and d["actions"].tolist() == [3, 4]


def test_copy_deep_and_shallow():
    b = SampleBatch(obs=np.zeros((3, 2)), actions=[0, 1, 2])
    deep = b.copy()
    assert not np.shares_memory(deep["obs"], b["obs"])
    deep["obs"][0, 0] = 9.0
    assert b["obs"][0, 0] == 0.0
    shallow = b.copy(shallow=True)
    assert shallow["obs"] is b["obs"]
    shallow["new"] = [1, 1, 1]
    assert "new" not in b
    assert type(deep) is SampleBatch and deep.count == 3


def test_pickle_roundtrip():
    b = SampleBatch(obs=np.arange(6.0).reshape(3, 2), seq_lens=[2, 1], feat=np.array([1, 2]), seq_keys=["feat"])
    c = pickle.loads(pickle.dumps(b))
    assert type(c) is SampleBatch
    assert c.count == 3 and c._seq_keys == {"seq_lens", "feat"}
    np.testing.assert_array_equal(c["obs"], b["obs"])
    d = copy.deepcopy(b)
    assert not np.shares_memory(d["obs"], b["obs"]) and d._seq_keys == b._seq_keys


def test_repr_lists_rows_and_columns():
    b = SampleBatch(obs=np.zeros((3, 2)), actions=[0, 1, 2])
    assert repr(b) == "SampleBatch(3 rows: ['obs', 'actions'])"


# -- slicing ------------------------------------------------------------------


def test_row_slice_returns_views():
    b = SampleBatch(obs=np.arange(10.0).reshape(5, 2), actions=np.arange(5))
    s = b[1:4]
    assert isinstance(s, SampleBatch)
    assert s.count == 3 and len(s) == 3
    assert s["actions"].tolist() == [1, 2, 3]
    assert np.shares_memory(s["obs"], b["obs"])
    assert ptr(s["obs"]) == ptr(b["obs"]) + 1 * b["obs"].strides[0]
    s["actions"][0] = 100
    assert b["actions"][1] == 100


def test_row_slice_negative_and_open_ends():
    b = SampleBatch(actions=np.arange(5))
    assert b[-2:]["actions"].tolist() == [3, 4]
    assert b[:2]["actions"].tolist() == [0, 1]
    assert b[4:2].count == 0


def test_row_slice_with_step_rejected():
    b = SampleBatch(actions=np.arange(5))
    with pytest.raises(ValueError, match=r"step 1, got 2"):
        b[::2]


def test_row_slice_with_seq_lens_on_boundaries():
    b = SampleBatch(
        obs=np.arange(7.0),
        seq_lens=np.array([3, 2, 2], dtype=np.int32),
        state_in_0=np.array([[10.0], [20.0], [30.0]]),
    )
    s = b[3:7]
    assert s.count == 4
    assert s["obs"].tolist() == [3.0, 4.0, 5.0, 6.0]
    assert s["seq_lens"].tolist() == [2, 2]
    assert s["state_in_0"].tolist() == [[20.0], [30.0]]
    assert np.shares_memory(s["state_in_0"], b["state_in_0"])
    assert s._seq_keys == {"seq_lens", "state_in_0"}
    head = b[:3]
    assert head["seq_lens"].tolist() == [3] and head["state_in_0"].tolist() == [[10.0]]
    empty = b[7:]
    assert empty.count == 0 and empty["seq_lens"].tolist() == []


def test_row_slice_with_seq_lens_off_boundary_rejected():
    b = SampleBatch(obs=np.arange(7.0), seq_lens=[3, 2, 2], state_in_0=np.zeros((3, 1)))
    with pytest.raises(ValueError, match=r"row slice 1:5 must start and end on sequence boundaries \[0, 3, 5, 7\], got 1"):
        b[1:5]
    with pytest.raises(ValueError, match=r"got 4"):
        b[3:4]


def test_row_slice_with_padded_seq_lens_rejected():
    b = SampleBatch(obs=np.arange(8.0), seq_lens=[3, 2], state_in_0=np.zeros((2, 1)))
    with pytest.raises(ValueError, match=r"'seq_lens' sum to 5, expected 8"):
        b[0:4]


# -- split_by_episode / rows --------------------------------------------------


def test_split_by_episode_on_eps_id():
    b = SampleBatch(eps_id=[7, 7, 7, 3, 3, 9], actions=np.arange(6))
    parts = b.split_by_episode()
    assert [p["eps_id"].tolist() for p in parts] == [[7, 7, 7], [3, 3], [9]]
    assert [p.count for p in parts] == [3, 2, 1]
    assert all(np.shares_memory(p["actions"], b["actions"]) for p in parts)


def test_split_by_episode_on_done_flags():
    b = SampleBatch(
        actions=np.arange(6),
        terminateds=[False, True, False, False, False, False],
        truncateds=[False, False, False, True, False, False],
    )
    parts = b.split_by_episode()
    assert [p["actions"].tolist() for p in parts] == [[0, 1], [2, 3], [4, 5]]


def test_split_by_episode_without_markers_rejected():
    b = SampleBatch(actions=np.arange(3))
    with pytest.raises(ValueError, match=r"split_by_episode needs column 'eps_id'"):
        b.split_by_episode()


def test_split_by_episode_with_sequences():
    b = SampleBatch(
        eps_id=[1, 1, 1, 2, 2],
        seq_lens=[2, 1, 2],
        state_in_0=np.array([[1.0], [2.0], [3.0]]),
    )
    a, c = b.split_by_episode()
    assert a["seq_lens"].tolist() == [2, 1] and a["state_in_0"].tolist() == [[1.0], [2.0]]
    assert c["seq_lens"].tolist() == [2] and c["state_in_0"].tolist() == [[3.0]]


def test_rows_iterates_per_step_columns():
    b = SampleBatch(actions=[1, 2], rewards=[0.5, 1.5], seq_lens=[2], state_in_0=np.zeros((1, 3)))
    rows = list(b.rows())
    assert [(r["actions"], r["rewards"]) for r in rows] == [(1, 0.5), (2, 1.5)]
    assert set(rows[0]) == {"actions", "rewards"}


# -- access tracking ----------------------------------------------------------


def test_access_tracking_off_by_default():
    b = SampleBatch(obs=np.zeros((2, 1)))
    _ = b["obs"]
    b["x"] = [1, 2]
    del b["x"]
    assert b.accessed_keys == set() and b.added_keys == set() and b.deleted_keys == set()


def test_access_tracking_records_reads_adds_deletes():
    b = SampleBatch(obs=np.zeros((2, 1)), actions=[0, 1], rewards=[0.0, 1.0], infos=[{}, {}])
    b.enable_access_tracking()
    _ = b["obs"]
    b.get("prev_actions")  # a missing key that was asked for counts as read
    assert "actions" in b  # membership is not a read
    b["advantages"] = [1.0, 2.0]
    b["obs"] = np.ones((2, 1))  # replacing is not adding
    del b["infos"]
    b.pop("rewards")
    assert b.accessed_keys == {"obs", "prev_actions"}
    assert b.added_keys == {"advantages"}
    assert b.deleted_keys == {"infos", "rewards"}


def test_access_tracking_through_slices_items_and_disable():
    b = SampleBatch(obs=np.zeros((4, 1)), actions=np.arange(4), eps_id=[0, 0, 1, 1])
    b.enable_access_tracking()
    for part in b.split_by_episode():
        _ = part["actions"]
    assert b.accessed_keys == {"actions"}
    _ = list(b.items())
    assert b.accessed_keys == {"actions", "obs", "eps_id"}
    b.disable_access_tracking()
    b.accessed_keys.clear()
    _ = b["obs"]
    assert b.accessed_keys == set()


# -- concat_samples -----------------------------------------------------------


def test_concat_plain_batches():
    a = SampleBatch(obs=np.zeros((2, 2)), actions=[0, 1])
    b = SampleBatch(obs=np.ones((3, 2)), actions=[2, 3, 4])
    c = concat_samples([a, b])
    assert isinstance(c, SampleBatch)
    assert c.count == 5
    assert c["actions"].tolist() == [0, 1, 2, 3, 4]
    assert c["obs"].shape == (5, 2) and c["obs"][2:].sum() == 6.0
    assert not np.shares_memory(c["obs"], a["obs"])


def test_concat_with_sequences():
    a = SampleBatch(obs=np.arange(3.0), seq_lens=[2, 1], state_in_0=np.array([[1.0], [2.0]]))
    b = SampleBatch(obs=np.arange(3.0, 5.0), seq_lens=[2], state_in_0=np.array([[3.0]]))
    c = concat_samples([a, b])
    assert c.count == 5
    assert c["seq_lens"].tolist() == [2, 1, 2]
    assert c["state_in_0"].tolist() == [[1.0], [2.0], [3.0]]
    assert c._seq_keys == {"seq_lens", "state_in_0"}
    assert c[3:5]["state_in_0"].tolist() == [[3.0]]


def test_concat_empty_and_single():
    assert concat_samples([]).count == 0
    a = SampleBatch(actions=[1, 2])
    c = concat_samples([a])
    assert c.count == 2 and c["actions"].tolist() == [1, 2] and c is not a


def test_concat_missing_key_names_key_and_batch():
    a = SampleBatch(obs=np.zeros((2, 1)), actions=[0, 1])
    b = SampleBatch(obs=np.zeros((2, 1)), actions=[0, 1])
    c = SampleBatch(obs=np.zeros((2, 1)))
    with pytest.raises(ValueError, match=r"batch 2 has no column 'actions' \(batch 0 has it\)"):
        concat_samples([a, b, c])
    with pytest.raises(ValueError, match=r"batch 0 has no column 'actions' \(batch 1 has it\)"):
        concat_samples([c, a])


def test_concat_shape_mismatch_names_column():
    a = SampleBatch(obs=np.zeros((2, 3)))
    b = SampleBatch(obs=np.zeros((2, 4)))
    with pytest.raises(ValueError, match=r"column 'obs' has per-row shape \(4,\) in batch 1, expected \(3,\)"):
        concat_samples([a, b])


def test_concat_mixed_types_rejected():
    a = SampleBatch(actions=[1])
    with pytest.raises(TypeError, match=r"got dict at index 1"):
        concat_samples([a, {"actions": np.array([2])}])


# -- zero-copy concat of segments ---------------------------------------------


def test_segment_columns_are_views_of_parent():
    parent = make_parent()
    seg = SampleBatch._segment(parent, (4, 8), None, frozenset())
    assert seg.count == 4
    assert seg["actions"].tolist() == [4, 5, 6, 7]
    assert ptr(seg["obs"]) == ptr(parent["obs"]) + 4 * parent["obs"].strides[0]


def test_zero_copy_concat_of_consecutive_segments():
    parent = make_parent()
    segs = [SampleBatch._segment(parent, r, None, frozenset()) for r in [(0, 4), (4, 8), (8, 12)]]
    segs[1]["rewards"][:] = -1.0  # in-place edits are fine: they write the parent
    c = concat_samples(segs)
    assert c.count == 12
    for k in parent:
        assert np.shares_memory(c[k], parent[k])
        assert ptr(c[k]) == ptr(parent[k])
        assert c[k].shape == parent[k].shape
    assert c["rewards"][4:8].tolist() == [-1.0] * 4
    # A middle run stays zero copy as well.
    mid = concat_samples(segs[1:])
    assert ptr(mid["actions"]) == ptr(parent["actions"]) + 4 * 8
    assert mid["actions"].tolist() == list(range(4, 12))


def test_zero_copy_concat_result_is_itself_a_segment():
    parent = make_parent(16)
    segs = [SampleBatch._segment(parent, (i, i + 4), None, frozenset()) for i in range(0, 16, 4)]
    left = concat_samples(segs[:2])
    right = concat_samples(segs[2:])
    both = concat_samples([left, right])
    assert ptr(both["obs"]) == ptr(parent["obs"]) and both.count == 16
    assert np.shares_memory(both["actions"], parent["actions"])
    # Slices of segments are segments too.
    again = concat_samples([both[0:5], both[5:16]])
    assert ptr(again["actions"]) == ptr(parent["actions"]) and again.count == 16


def test_zero_copy_concat_with_sequences():
    parent = make_parent(12, n_seqs=6)  # six sequences of 2 steps
    segs = [
        SampleBatch._segment(parent, (0, 4), (0, 2), SEQ),
        SampleBatch._segment(parent, (4, 12), (2, 6), SEQ),
    ]
    assert segs[1]["state_in_0"].shape == (4, 3)
    assert segs[1]._seq_keys == SEQ
    c = concat_samples(segs)
    assert c.count == 12 and c._seq_keys == SEQ
    assert ptr(c["state_in_0"]) == ptr(parent["state_in_0"]) and c["state_in_0"].shape == (6, 3)
    assert ptr(c["seq_lens"]) == ptr(parent["seq_lens"])
    assert ptr(c["obs"]) == ptr(parent["obs"])


def test_replaced_column_falls_back_to_copy_for_that_column_only():
    parent = make_parent()
    segs = [SampleBatch._segment(parent, r, None, frozenset()) for r in [(0, 4), (4, 8)]]
    segs[1]["rewards"] = np.full(4, 5.0, dtype=np.float32)
    c = concat_samples(segs)
    assert not np.shares_memory(c["rewards"], parent["rewards"])
    assert c["rewards"].tolist() == pytest.approx([0.0, 0.1, 0.2, 0.3, 5.0, 5.0, 5.0, 5.0])
    assert ptr(c["obs"]) == ptr(parent["obs"])  # the untouched columns stay views
    assert ptr(c["actions"]) == ptr(parent["actions"])


def test_added_column_is_concatenated_others_zero_copy():
    parent = make_parent()
    segs = [SampleBatch._segment(parent, r, None, frozenset()) for r in [(0, 4), (4, 8)]]
    for s in segs:
        s["advantages"] = np.ones(4)
    c = concat_samples(segs)
    assert c["advantages"].tolist() == [1.0] * 8
    assert ptr(c["obs"]) == ptr(parent["obs"])


def test_non_consecutive_segments_are_copied():
    parent = make_parent()
    a = SampleBatch._segment(parent, (0, 4), None, frozenset())
    b = SampleBatch._segment(parent, (8, 12), None, frozenset())
    c = concat_samples([a, b])
    assert not np.shares_memory(c["actions"], parent["actions"])
    assert c["actions"].tolist() == [0, 1, 2, 3, 8, 9, 10, 11]
    reordered = concat_samples([SampleBatch._segment(parent, (4, 8), None, frozenset()), a])
    assert not np.shares_memory(reordered["actions"], parent["actions"])
    assert reordered["actions"].tolist() == [4, 5, 6, 7, 0, 1, 2, 3]


def test_segments_of_different_parents_are_copied():
    p1, p2 = make_parent(), make_parent()
    a = SampleBatch._segment(p1, (0, 4), None, frozenset())
    b = SampleBatch._segment(p2, (4, 8), None, frozenset())
    c = concat_samples([a, b])
    assert not np.shares_memory(c["obs"], p1["obs"]) and not np.shares_memory(c["obs"], p2["obs"])
    assert c["actions"].tolist() == list(range(8))


def test_segment_and_plain_batch_are_copied():
    parent = make_parent()
    a = SampleBatch._segment(parent, (0, 4), None, frozenset())
    plain = SampleBatch({k: v[4:8] for k, v in parent.items()})
    c = concat_samples([a, plain])
    assert not np.shares_memory(c["actions"], parent["actions"])
    assert c["actions"].tolist() == list(range(8))


def test_segment_stays_valid_after_parent_dict_is_dropped():
    parent = make_parent()
    seg = SampleBatch._segment(parent, (4, 8), None, frozenset())
    del parent
    assert seg["actions"].tolist() == [4, 5, 6, 7]


def test_segment_out_of_range_rejected():
    parent = make_parent()
    with pytest.raises(ValueError, match=r"column 'obs' has 12 rows, expected at least 20"):
        SampleBatch._segment(parent, (10, 20), None, frozenset())


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=8))
def test_zero_copy_concat_property(lengths):
    n = sum(lengths)
    parent = {"x": np.arange(n, dtype=np.int64), "y": np.arange(2 * n, dtype=np.float64).reshape(n, 2)}
    edges = np.concatenate(([0], np.cumsum(lengths))).tolist()
    segs = [SampleBatch._segment(parent, (a, b), None, frozenset()) for a, b in zip(edges[:-1], edges[1:])]
    c = concat_samples(segs)
    assert c.count == n
    np.testing.assert_array_equal(c["x"], parent["x"])
    if n and len(segs) > 1:
        assert ptr(c["x"]) == ptr(parent["x"]) and ptr(c["y"]) == ptr(parent["y"])


# -- MultiAgentBatch ----------------------------------------------------------


def test_multi_agent_batch_counts():
    p0 = SampleBatch(actions=[0, 1, 2])
    p1 = SampleBatch(actions=[5, 6])
    ma = MultiAgentBatch({"p0": p0, "p1": p1}, env_steps=3)
    assert ma.policy_batches["p0"] is p0
    assert ma.env_steps() == 3 and ma.count == 3 and len(ma) == 3
    assert ma.agent_steps() == 5


def test_multi_agent_batch_accepts_plain_dicts():
    ma = MultiAgentBatch({"p0": {"actions": [1, 2]}}, 2)
    assert isinstance(ma.policy_batches["p0"], SampleBatch)
    assert ma.agent_steps() == 2


def test_multi_agent_batch_bad_input():
    with pytest.raises(TypeError, match=r"policy_batches\['p0'\] must be a SampleBatch, got list"):
        MultiAgentBatch({"p0": [1, 2]}, 2)
    with pytest.raises(ValueError, match=r"env_steps must be >= 0, got -1"):
        MultiAgentBatch({}, -1)
    with pytest.raises(TypeError, match=r"env_steps must be an int, got 1.5"):
        MultiAgentBatch({}, 1.5)


def test_concat_multi_agent_batches():
    a = MultiAgentBatch({"p0": SampleBatch(actions=[0, 1]), "p1": SampleBatch(actions=[9])}, 2)
    b = MultiAgentBatch({"p0": SampleBatch(actions=[2])}, 1)
    c = concat_samples([a, b])
    assert isinstance(c, MultiAgentBatch)
    assert c.env_steps() == 3 and c.agent_steps() == 4
    assert c.policy_batches["p0"]["actions"].tolist() == [0, 1, 2]
    assert c.policy_batches["p1"]["actions"].tolist() == [9]


def test_concat_multi_agent_segments_zero_copy():
    parent = make_parent()
    a = MultiAgentBatch({"p0": SampleBatch._segment(parent, (0, 4), None, frozenset())}, 4)
    b = MultiAgentBatch({"p0": SampleBatch._segment(parent, (4, 8), None, frozenset())}, 4)
    c = concat_samples([a, b])
    assert c.env_steps() == 8
    assert ptr(c.policy_batches["p0"]["obs"]) == ptr(parent["obs"])


@settings(max_examples=200, deadline=None)
@given(
    rows=st.integers(0, 4),
    seqs=st.sampled_from([None, [1], [2, 1], [0, 3]]),
    key=st.sampled_from(["obs", "new", "state_in_0", "seq_lens", "a"]),
    length=st.integers(-1, 1),
    ndim=st.integers(0, 2),
    nested_a=st.booleans(),
)
def test_setting_a_column_lays_the_batch_out_as_the_general_rule_does(rows, seqs, key, length, ndim, nested_a):
    """`SampleBatch.__setitem__` skips laying the batch out again for a per-step array of the batch's row count in a
    batch without sequences: the count, the per-sequence columns, the columns and any error are those of the general
    rule (`_layout` over every column), whatever the batch and the value."""
    from trajview.views.layout import _layout, _to_array
    from trajview.views.nest import leaf_names

    cols = {"obs": np.arange(rows * 2, dtype=np.float32).reshape(rows, 2), "rewards": np.zeros(rows)}
    if nested_a:
        cols["a.x"] = np.zeros(rows)
    if seqs is not None:
        if sum(seqs) != rows:
            seqs = [rows]
        cols["seq_lens"] = np.asarray(seqs, np.int32)
        cols["state_in_0"] = np.zeros((len(seqs), 3), np.float32)
    batch = SampleBatch(cols)
    n = max(batch.count + length, 0) if key != "state_in_0" or seqs is None else max(len(seqs) + length, 0)
    value = np.ones((n, 2)[:ndim] if ndim else (), np.float32) if ndim != 1 else np.ones(n, np.float32)
    # The general rule: every column, the new one in place of the old (and of a nested column's leaves).
    try:
        arr = _to_array(key, value)
        old = leaf_names(key, dict.keys(batch))
        want_cols = {k: v for k, v in dict.items(batch) if k != key and k not in old}
        want_cols[key] = arr
        kept = frozenset(k for k, v in dict.items(batch) if k not in batch.seq_keys and want_cols.get(k) is v)
        want = ("ok", *_layout(want_cols, batch._extra_seq_keys, kept), sorted(want_cols))
    except (ValueError, TypeError) as e:
        want = ("error", type(e).__name__, str(e), sorted(dict.keys(batch)))
    before = sorted(dict.keys(batch))
    try:
        batch[key] = value
        got = ("ok", batch.count, batch.seq_keys, sorted(dict.keys(batch)))
    except (ValueError, TypeError) as e:
        got = ("error", type(e).__name__, str(e), sorted(dict.keys(batch)))
        assert sorted(dict.keys(batch)) == before
    assert got == want
