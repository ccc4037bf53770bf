"""A recurrent policy (state views from get_initial_state, max_seq_len sequences) in multi-agent batches counted
by agent steps with truncated episodes: the surplus agent steps of a batch's last env step are held back (in the
store for agents that run on, carried as a one-row piece for agents whose trajectory finished). Every row
appears once across consecutive batches, each batch's sequences and ``state_in_0`` rows are right, and each
batch holds exactly the target agent steps."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pettingzoo")

import trajview as tv  # noqa: E402
from ma_envs import Script, ScriptedEnv  # noqa: E402
from test_multi_agent_turns import scripts  # noqa: E402

VR = tv.ViewRequirement
INIT = np.array([-1.0, -1.0], np.float32)


def recurrent(max_seq_len):
    class Recurrent(tv.Policy):
        """state_out = the observation (``[uid, s]``): a row's state_in must be its agent's previous obs."""

        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.view_requirements["state_in_0"] = VR("state_out_0", shift=-1, batch_repeat_value=max_seq_len)

        def get_initial_state(self):
            return [INIT.copy()]

        def compute_actions_from_input_dict(self, d, explore=None, timestep=None, **kw):
            obs = np.asarray(d["obs"])
            h = np.asarray(d["state_in_0"])
            if self._views_initialized:  # (not the pruning pass: its dummy input holds samples of the spaces)
                # At action time too: state_in is the agent's previous observation, or the initial state.
                first = h[:, 0] == -1
                np.testing.assert_array_equal(h[~first, 0], obs[~first, 0].astype(np.float32))
                assert (h[~first, 1] < obs[~first, 1]).all()
            return (obs[:, 0] + obs[:, 1]).astype(np.int64) % 7, [obs.astype(np.float32)], {}

        def loss(self, b):
            return b["obs"], b["state_in_0"], b["seq_lens"], b["actions"]

    return Recurrent


def by_parity(agent_id, *args, **kwargs):
    return "even" if int(agent_id[1:]) % 2 == 0 else "odd"


def make_worker(scripts_, n_agents, num_envs, max_seq_len, **kw):
    it = iter(range(1000))
    p = recurrent(max_seq_len)
    return tv.RolloutWorker(lambda cfg: ScriptedEnv(scripts_, n_agents, next(it)), {"even": p, "odd": p},
                            num_envs=num_envs, policy_mapping_fn=by_parity, count_steps_by="agent_steps",
                            batch_mode="truncate_episodes", **kw)


def check_batches(batches, target, max_seq_len):
    """Rows once across batches (each trajectory's rows a prefix of it), and per batch: agent_steps() == target,
    sequences of one trajectory's consecutive steps (at most max_seq_len), state_in_0 of each sequence = the
    obs of its trajectory's previous step (the initial state at t == 0). Returns {(uid, t): obs_s}."""
    seen: dict[tuple[int, int], float] = {}
    for b in batches:
        assert b.agent_steps() == target
        assert sum(len(pb) for pb in b.policy_batches.values()) == target
        for pb in b.policy_batches.values():
            uid = pb["obs"][:, 0].astype(np.int64)
            t = pb["t"]
            for j in range(len(pb)):
                key = (int(uid[j]), int(t[j]))
                assert key not in seen, f"row {key} twice"
                seen[key] = float(pb["obs"][j, 1])
    for b in batches:
        for pb in b.policy_batches.values():
            uid = pb["obs"][:, 0].astype(np.int64)
            t = pb["t"]
            seq_lens = pb["seq_lens"]
            assert seq_lens.dtype == np.int32 and int(seq_lens.sum()) == len(pb)
            assert len(pb["state_in_0"]) == len(seq_lens)
            assert (seq_lens >= 1).all() and (seq_lens <= max_seq_len).all()
            start = 0
            for q, n in enumerate(seq_lens.tolist()):
                rows = slice(start, start + n)
                assert (uid[rows] == uid[start]).all(), "a sequence crosses trajectories"
                np.testing.assert_array_equal(t[rows], np.arange(t[start], t[start] + n))
                u, t0 = int(uid[start]), int(t[start])
                want = INIT if t0 == 0 else np.array([u, seen[(u, t0 - 1)]], np.float32)
                np.testing.assert_array_equal(pb["state_in_0"][q], want, err_msg=f"sequence {q} of {(u, t0)}")
                start += n
    for u, t0 in seen:
        assert t0 == 0 or (u, t0 - 1) in seen, f"row {(u, t0)} without its trajectory's earlier rows"
    return seen


def test_finished_trajectory_last_step_carried_into_next_batch():
    # One env, two agents observed every step, episodes of 3 env steps (6 agent steps), fragment 5: the first
    # batch's last env step ends both trajectories with one agent step too many, so one finished trajectory's
    # last step (t=2) is carried into the next batch. Its segment is one sequence of 3 rows (max_seq_len 4):
    # the carried row becomes a sequence of its own, its state_in the obs of that agent's step t=1.
    sc = Script(3, [0, 0], [None, None], [True, True], [0b11])
    w = make_worker([sc], 2, 1, 4, rollout_fragment_length=5)
    batches = [w.sample() for _ in range(4)]
    seen = check_batches(batches, 5, 4)
    assert len(seen) == 20  # 4 batches of 5; every row of the first 3 episodes (18) and 2 of the 4th
    b0, b1 = batches[0], batches[1]
    rows0 = {(int(u), int(t)) for pb in b0.policy_batches.values() for u, t in zip(pb["obs"][:, 0], pb["t"])}
    carried = {(0, 2), (1, 2)} - rows0
    assert len(carried) == 1
    (u, _t), = carried
    pb = b1.policy_batches["even" if u % 2 == 0 else "odd"]
    assert int(pb["obs"][0, 0]) == u and pb["t"][0] == 2 and pb["seq_lens"][0] == 1
    assert pb["terminateds"][0]
    np.testing.assert_array_equal(pb["state_in_0"][0], [u, 1])  # the agent's obs at step t=1
    for b in batches:
        for pb in b.policy_batches.values():
            assert not [k for k in pb.keys() if k.startswith("__")]  # no internal columns


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4).flatmap(lambda n: st.tuples(st.just(n), scripts(n))), st.integers(1, 3),
       st.integers(1, 6), st.integers(2, 4), st.one_of(st.none(), st.integers(2, 6)))
def test_recurrent_agent_steps_hold_back(agents_scripts, num_envs, fragment, max_seq_len, horizon):
    n_agents, scripts_ = agents_scripts
    w = make_worker(scripts_, n_agents, num_envs, max_seq_len, rollout_fragment_length=fragment, horizon=horizon)
    check_batches([w.sample() for _ in range(4)], fragment * num_envs, max_seq_len)
