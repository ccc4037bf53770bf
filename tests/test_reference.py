"""Hand-computed examples: `ReferenceCollector` follows docs/contract.md, Time axis and Views.

The reference is the oracle of the property tests (test_collector_property.py),
so every rule it implements is pinned here by an example worked out by hand.
Observations are scalars whose value is ``t + 1`` (so ``obs[t] == t + 1``)
and actions ``10 + t``: a value in a view tells at once which row it came from.
"""

from __future__ import annotations

import numpy as np
import pytest

import trajview as tv
from trajview.testing import ReferenceCollector

VR = tv.ViewRequirement

COLUMNS = {
    "obs": (np.float32, ()),
    "actions": (np.int64, ()),
    "rewards": (np.float32, ()),
    "terminateds": (np.bool_, ()),
    "truncateds": (np.bool_, ()),
    "state_out_0": (np.float32, (2,)),
}
INITIAL_STATE = np.array([7.0, 8.0], dtype=np.float32)


def make(views, num_envs=1, **kwargs):
    kwargs.setdefault("initial_rows", {"state_out_0": INITIAL_STATE})
    return ReferenceCollector(num_envs, COLUMNS, views, **kwargs)


def step_data(ts, done=False):
    """The data of step ``t`` for each ``t`` in ``ts`` (one per env slot given)."""
    ts = np.asarray(ts)
    return {
        "obs": (ts + 2).astype(np.float32),  # the observation after step t is obs[t + 1] == t + 2
        "actions": (10 + ts).astype(np.int64),
        "rewards": (0.5 * ts).astype(np.float32),
        "terminateds": np.full(len(ts), done),
        "truncateds": np.zeros(len(ts), dtype=bool),
        "state_out_0": np.stack([np.full(2, t + 1, dtype=np.float32) for t in ts]),
    }


def run(coll, num_steps, slot=0, end=True, first_t=0):
    """Play steps ``first_t .. num_steps - 1`` in ``slot``; return each input dict (before each action)."""
    if first_t == 0:
        coll.begin_episodes(np.array([slot]), {"obs": np.array([1.0], dtype=np.float32)})
    ids = np.array([slot])
    dicts = [coll.input_dict(ids)]
    for t in range(first_t, num_steps):
        dicts.append(coll.step(step_data([t], done=end and t == num_steps - 1), ids))
    if end:
        coll.end_episodes(ids)
    return dicts[:-1]  # the last dict is after the final step, never used for an action


def only(batches):
    assert len(batches) == 1
    return batches[0]


def test_frame_stack_zero_padding():
    coll = make({"stack": VR("obs", shift="-3:0"), "t": VR()})
    dicts = run(coll, 3)
    expected = [[0, 0, 0, 1], [0, 0, 1, 2], [0, 1, 2, 3]]
    for t, d in enumerate(dicts):
        np.testing.assert_array_equal(d["stack"], np.array([expected[t]], dtype=np.float32))
        assert d["stack"].dtype == np.float32
        np.testing.assert_array_equal(d["t"], [t])
    b = only(coll.build_batch())
    assert b["stack"].shape == (3, 4) and b["stack"].dtype == np.float32
    np.testing.assert_array_equal(b["stack"], expected)


def test_frame_stack_reset_padding():
    coll = make({"stack": VR("obs", shift="-3:0", padding="reset")})
    dicts = run(coll, 3)
    expected = [[1, 1, 1, 1], [1, 1, 1, 2], [1, 1, 2, 3]]
    for t, d in enumerate(dicts):
        np.testing.assert_array_equal(d["stack"], [expected[t]])
    np.testing.assert_array_equal(only(coll.build_batch())["stack"], expected)


def test_list_shift_keeps_order_and_repeats():
    coll = make({"odd": VR("obs", shift=[0, -2, 0, -1])})
    run(coll, 3)
    np.testing.assert_array_equal(only(coll.build_batch())["odd"], [[1, 0, 1, 0], [2, 0, 2, 1], [3, 1, 3, 2]])


def test_prev_actions_and_prev_rewards():
    views = {
        "prev_actions": VR("actions", shift=-1),
        "prev_rewards": VR("rewards", shift=-1),
        "prev_actions_list": VR("actions", shift=[-1]),
    }
    coll = make(views)
    dicts = run(coll, 3)
    for t, d in enumerate(dicts):
        np.testing.assert_array_equal(d["prev_actions"], [0 if t == 0 else 10 + t - 1])
        np.testing.assert_array_equal(d["prev_actions_list"], [[0 if t == 0 else 10 + t - 1]])
    b = only(coll.build_batch())
    np.testing.assert_array_equal(b["prev_actions"], [0, 10, 11])
    assert b["prev_actions"].dtype == np.int64
    np.testing.assert_array_equal(b["prev_rewards"], [0.0, 0.0, 0.5])
    assert b["prev_actions_list"].shape == (3, 1)


def test_new_obs_is_obs_at_plus_one_including_the_final_obs():
    coll = make({"obs": VR(), "new_obs": VR("obs", shift=1), "obs_plus_2": VR("obs", shift=2)})
    dicts = run(coll, 3)
    # The compute-actions dict never holds a view of the future.
    assert set(dicts[0]) == {"obs"}
    np.testing.assert_array_equal([d["obs"][0] for d in dicts], [1, 2, 3])
    b = only(coll.build_batch())
    np.testing.assert_array_equal(b["obs"], [1, 2, 3])
    np.testing.assert_array_equal(b["new_obs"], [2, 3, 4])  # 4 is the final (terminal) observation
    np.testing.assert_array_equal(b["obs_plus_2"], [3, 4, 0])  # past the last row: zeros


def test_next_actions_read_zero_at_the_last_step():
    coll = make({"actions": VR(), "next_actions": VR("actions", shift=1)})
    dicts = run(coll, 3)
    assert "next_actions" not in dicts[0] and "actions" not in dicts[0]  # actions[t] is not known before step t
    b = only(coll.build_batch())
    np.testing.assert_array_equal(b["actions"], [10, 11, 12])
    np.testing.assert_array_equal(b["next_actions"], [11, 12, 0])


def test_state_in_reads_initial_state_before_the_start():
    coll = make({"state_in_0": VR("state_out_0", shift=-1), "state_out_0": VR(used_for_compute_actions=False)})
    dicts = run(coll, 3)
    np.testing.assert_array_equal(dicts[0]["state_in_0"], [INITIAL_STATE])
    np.testing.assert_array_equal(dicts[2]["state_in_0"], [[2, 2]])
    assert "state_out_0" not in dicts[0]
    b = only(coll.build_batch())
    np.testing.assert_array_equal(b["state_in_0"], [[7, 8], [1, 1], [2, 2]])
    np.testing.assert_array_equal(b["state_out_0"], [[1, 1], [2, 2], [3, 3]])


def test_initial_rows_are_read_before_the_start_under_reset_padding_too():
    # docs/contract.md, Views, Pre-buffer: state_out_i reads the initial state there, so state_in_0 at t = 0 is the
    # initial state whatever the padding (the episode's first output would be the state after the first step).
    coll = make({"s": VR("state_out_0", shift=-1, padding="reset", used_for_compute_actions=False)})
    run(coll, 2)
    np.testing.assert_array_equal(only(coll.build_batch())["s"], [INITIAL_STATE.tolist(), [1, 1]])
    coll = make({"state_in_0": VR("state_out_0", shift=-1, padding="reset")})  # known before the first action
    assert run(coll, 1)[0]["state_in_0"].tolist() == [INITIAL_STATE.tolist()]


def test_reset_padding_on_a_step_column_is_refused_for_compute_actions():
    # Row 0 of actions is not known before the first action: the input dict could not read it.
    with pytest.raises(ValueError, match="prev_actions"):
        make({"prev_actions": VR("actions", shift=-1, padding="reset")})
    make({"next_actions": VR("actions", shift=[-1, 1], padding="reset")})  # never in the input dict: fine


def test_batch_repeat_value_gives_one_row_per_sequence_and_seq_lens():
    views = {"obs": VR(), "state_in_0": VR("state_out_0", shift=-1, batch_repeat_value=2)}
    coll = make(views)
    run(coll, 5)
    b = only(coll.build_batch())
    np.testing.assert_array_equal(b["obs"], [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(b["state_in_0"], [[7, 8], [2, 2], [4, 4]])  # at t = 0, 2, 4
    np.testing.assert_array_equal(b["seq_lens"], [2, 2, 1])
    assert b["seq_lens"].dtype == np.int32
    assert b.count == 5 and len(b) == 5


def test_different_batch_repeat_values_are_refused():
    views = {"a": VR("obs", batch_repeat_value=2), "b": VR("obs", batch_repeat_value=3)}
    with pytest.raises(ValueError, match="batch_repeat_value"):
        make(views)


def test_boundary_columns():
    coll = make({"obs": VR()}, num_envs=2, eps_id_start=100)
    run(coll, 2, slot=1)
    b = only(coll.build_batch())
    for key, dtype, values in [
        ("eps_id", np.int64, [100, 100]),
        ("env_id", np.int64, [1, 1]),
        ("t", np.int64, [0, 1]),
        ("is_init", np.bool_, [True, False]),
    ]:
        assert b[key].dtype == dtype
        np.testing.assert_array_equal(b[key], values)


def test_boundary_columns_in_the_input_dict_only_when_asked_for():
    views = {"obs": VR(), "t": VR(), "eps_id": VR(used_for_compute_actions=False), "is_init": VR()}
    coll = make(views)
    dicts = run(coll, 2)
    assert set(dicts[1]) == {"obs", "t"}  # is_init is a training column only
    np.testing.assert_array_equal(dicts[1]["t"], [1])
    assert set(only(coll.build_batch())) == {"obs", "eps_id", "env_id", "t", "is_init"}


def test_env_id_is_the_only_prunable_boundary_column():
    views = {"obs": VR(), **{col: VR(used_for_training=False) for col in ("t", "eps_id", "env_id", "is_init")}}
    coll = make(views)
    run(coll, 2)
    assert set(only(coll.build_batch())) == {"obs", "eps_id", "t", "is_init"}


@pytest.mark.parametrize("key, vr", [("t", VR(shift=-1)), ("t", VR(shift=[0])), ("time", VR("t"))])
def test_boundary_views_only_under_their_name_at_shift_0(key, vr):
    with pytest.raises(ValueError, match="boundary"):
        make({key: vr})


def test_fragment_cut_mid_episode_looks_back_across_the_cut():
    views = {
        "stack": VR("obs", shift="-3:0"),
        "new_obs": VR("obs", shift=1),
        "next_actions": VR("actions", shift=1),
        "state_in_0": VR("state_out_0", shift=-1, batch_repeat_value=2),
    }
    coll = make(views)
    run(coll, 3, end=False)
    assert coll.num_steps() == 3 and coll.num_complete_steps() == 0
    first = only(coll.build_batch())
    assert coll.num_steps() == 0
    np.testing.assert_array_equal(first["t"], [0, 1, 2])
    np.testing.assert_array_equal(first["new_obs"], [2, 3, 4])  # obs[3] is already stored
    np.testing.assert_array_equal(first["next_actions"], [11, 12, 0])  # actions[3] is not known yet
    np.testing.assert_array_equal(first["seq_lens"], [2, 1])

    run(coll, 5, first_t=3)  # steps 3 and 4, then the episode ends
    second = only(coll.build_batch())
    np.testing.assert_array_equal(second["t"], [3, 4])
    np.testing.assert_array_equal(second["is_init"], [False, False])
    np.testing.assert_array_equal(second["stack"], [[1, 2, 3, 4], [2, 3, 4, 5]])  # reaches back into the first fragment
    np.testing.assert_array_equal(second["new_obs"], [5, 6])
    np.testing.assert_array_equal(second["next_actions"], [14, 0])
    np.testing.assert_array_equal(second["state_in_0"], [[3, 3]])  # the sequence starts at the cut, t = 3
    np.testing.assert_array_equal(second["seq_lens"], [2])
    assert coll.build_batch() == []


def test_views_never_read_the_previous_episode_of_the_slot():
    views = {"stack": VR("obs", shift="-3:0"), "prev_actions": VR("actions", shift=-1), "new_obs": VR("obs", shift=1)}
    coll = make(views)
    run(coll, 3)  # episode 0 in slot 0
    run(coll, 2)  # episode 1 in slot 0, before episode 0 was emitted
    dicts = run(coll, 2, end=False)  # episode 2, never ends
    np.testing.assert_array_equal(dicts[0]["stack"], [[0, 0, 0, 1]])
    np.testing.assert_array_equal(dicts[0]["prev_actions"], [0])
    batches = coll.build_batch()
    assert [b["eps_id"][0] for b in batches] == [0, 1, 2]
    # The last new_obs is the episode's final observation, not the next episode's first (1).
    np.testing.assert_array_equal(batches[0]["new_obs"], [2, 3, 4])
    np.testing.assert_array_equal(batches[1]["new_obs"], [2, 3])
    for b in batches:
        np.testing.assert_array_equal(b["stack"][0], [0, 0, 0, 1])
        np.testing.assert_array_equal(b["prev_actions"][0], 0)


def test_complete_only_and_segment_order():
    coll = make({"obs": VR()}, num_envs=3)
    coll.begin_episodes(np.array([0, 1, 2]), {"obs": np.ones(3, dtype=np.float32)})
    for t in range(2):
        coll.step(step_data([t, t, t]))
    coll.end_episodes(np.array([2]))
    coll.add_step(step_data([2, 2]), np.array([0, 1]))
    coll.end_episodes(np.array([0]))
    assert coll.num_steps() == 8 and coll.num_complete_steps() == 5
    np.testing.assert_array_equal(coll.eps_ids(), [-1, 1, -1])
    np.testing.assert_array_equal(coll.episode_lengths(), [-1, 3, -1])

    done = coll.build_batch(complete_only=True)
    assert [(b["eps_id"][0], b.count) for b in done] == [(2, 2), (0, 3)]  # in the order they finished
    assert coll.num_steps() == 3 and coll.num_complete_steps() == 0

    coll.begin_episodes(np.array([0]), {"obs": np.ones(1, dtype=np.float32)})
    coll.add_step(step_data([0, 3]), np.array([0, 1]))
    coll.end_episodes(np.array([1]))
    rest = coll.build_batch()
    # Finished first (eps 1, all 4 steps since it was never emitted), then ongoing by slot.
    assert [(b["eps_id"][0], b.count) for b in rest] == [(1, 4), (3, 1)]
    np.testing.assert_array_equal(rest[0]["t"], [0, 1, 2, 3])


def test_input_dict_rows_follow_env_ids_order():
    views = {"obs": VR(), "prev_actions": VR("actions", shift=-1), "t": VR(), "eps_id": VR(), "env_id": VR()}
    coll = make(views, num_envs=3, eps_id_start=5)
    eps = coll.begin_episodes(np.array([2, 0]), {"obs": np.array([20, 0], dtype=np.float32)})
    np.testing.assert_array_equal(eps, [5, 6])
    assert eps.dtype == np.int64
    d = coll.step(step_data([0, 0]), np.array([0, 2]))
    np.testing.assert_array_equal(d["eps_id"], [6, 5])
    np.testing.assert_array_equal(d["env_id"], [0, 2])
    np.testing.assert_array_equal(d["t"], [1, 1])
    assert d["t"].dtype == d["eps_id"].dtype == d["env_id"].dtype == np.int64
    d = coll.input_dict(np.array([2, 0]))
    np.testing.assert_array_equal(d["eps_id"], [5, 6])
    np.testing.assert_array_equal(d["prev_actions"], [10, 10])
    with pytest.raises(ValueError, match="slot 1"):
        coll.input_dict()  # slot 1 is idle


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda d: d.update(obs=d["obs"].astype(np.float64)), "obs.*float32.*float64"),
        (lambda d: d.update(actions=d["actions"].astype(np.float32)), "actions.*int64.*float32"),
        (lambda d: d.update(state_out_0=d["state_out_0"][:, :1]), "state_out_0"),
        (lambda d: d.pop("rewards"), "rewards"),
        (lambda d: d.update(bogus=d["rewards"]), "bogus"),
    ],
)
def test_bad_step_data_raises_and_writes_nothing(change, match):
    coll = make({"obs": VR(), "actions": VR()})
    coll.begin_episodes(np.array([0]), {"obs": np.ones(1, dtype=np.float32)})
    data = step_data([0])
    change(data)
    with pytest.raises(ValueError, match=match):
        coll.add_step(data)
    assert coll.num_steps() == 0
    coll.add_step(step_data([0]))
    np.testing.assert_array_equal(only(coll.build_batch())["actions"], [10])


def test_safe_casts_are_accepted():
    coll = make({"actions": VR()})
    coll.begin_episodes(np.array([0]), {"obs": np.ones(1, dtype=np.float16)})
    data = step_data([0])
    data["actions"] = data["actions"].astype(np.int8)
    coll.add_step(data)
    b = only(coll.build_batch())
    assert b["actions"].dtype == np.int64


def test_unknown_data_col_is_refused():
    with pytest.raises(ValueError, match="nope"):
        make({"x": VR("nope")})
