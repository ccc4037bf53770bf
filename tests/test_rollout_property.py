"""Property tests over whole rollouts: every env step appears exactly once, with the right views."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import trajview as tv
from rollout_helpers import UID_STRIDE, ObsActionPolicy, ScriptedEnv, expected_action

VR = tv.ViewRequirement


class LookbackPolicy(ObsActionPolicy):
    def __init__(self, obs_space, act_space, config=None):
        super().__init__(obs_space, act_space, config)
        self.view_requirements["stack"] = VR("obs", shift="-2:0")
        self.view_requirements["prev_actions"] = VR("actions", shift=-1)
        self.view_requirements["next_actions"] = VR("actions", shift=1, used_for_compute_actions=False)


@settings(max_examples=40, deadline=None)
@given(
    num_envs=st.integers(1, 4),
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=4),
    truncate=st.booleans(),
    fragment=st.integers(1, 12),
    batch_mode=st.sampled_from(["truncate_episodes", "complete_episodes"]),
    horizon=st.one_of(st.none(), st.integers(1, 8)),
    vector=st.sampled_from([None, "NEXT_STEP", "SAME_STEP"]),
    samples=st.integers(1, 5),
    lazy=st.sampled_from([False, 1]),  # 1: every column's views are LazyViews in the batch
)
def test_every_env_step_appears_exactly_once(
    num_envs, lengths, truncate, fragment, batch_mode, horizon, vector, samples, lazy
):
    envs = [ScriptedEnv(lengths, i, truncate) for i in range(num_envs)]
    if vector is None:
        it = iter(envs)
        creator = lambda cfg: next(it)  # noqa: E731
    else:
        mode = getattr(gym.vector.AutoresetMode, vector)
        creator = lambda cfg: gym.vector.SyncVectorEnv([lambda e=e: e for e in envs], autoreset_mode=mode)  # noqa: E731
    w = tv.RolloutWorker(
        creator, LookbackPolicy, num_envs=1 if vector else num_envs, batch_mode=batch_mode,
        rollout_fragment_length=fragment, horizon=horizon, lazy_views=lazy,
    )
    seen: dict[tuple[int, int], int] = {}
    for _ in range(samples):
        b = w.sample()
        if lazy:
            assert {"obs", "new_obs", "stack", "actions", "prev_actions", "next_actions"} <= set(b.lazy_keys)
        target = fragment * num_envs
        if batch_mode == "truncate_episodes":
            assert len(b) == target
        else:
            assert len(b) >= target
        uid = b["obs"][:, 0].astype(int)
        env_t = b["obs"][:, 1].astype(int)
        for r in range(len(b)):
            key = (uid[r], env_t[r])
            assert key not in seen, f"env step {key} emitted twice"
            seen[key] = int(b["eps_id"][r])
        for ep in b.split_by_episode():
            u = ep["obs"][:, 0].astype(int)
            et = ep["obs"][:, 1].astype(int)
            t = ep["t"]
            assert len(set(u)) == 1  # one env episode (the horizon may split it into several)
            assert (np.diff(t) == 1).all() and (np.diff(et) == 1).all()
            if batch_mode == "complete_episodes":
                assert t[0] == 0
            length = lengths[(u[0] % UID_STRIDE) % len(lengths)]
            # Views read only this episode: the frame stack and previous/next actions.
            for r in range(len(ep)):
                for j, s in enumerate(range(-2, 1)):
                    want = [u[r], et[r] + s] if t[r] + s >= 0 else [0, 0]
                    assert ep["stack"][r, j].tolist() == want
                assert ep["prev_actions"][r] == (expected_action(u[r], et[r] - 1) if t[r] >= 1 else 0)
                if r + 1 < len(ep):
                    assert ep["next_actions"][r] == expected_action(u[r], et[r] + 1)
            np.testing.assert_array_equal(ep["new_obs"][:, 1], et + 1)
            np.testing.assert_array_equal(ep["actions"], (u + et) % 5)
            ended_env = et[-1] + 1 == length
            flag = ep["truncateds"][-1] if truncate else ep["terminateds"][-1]
            if ended_env:
                assert flag
            if horizon is not None and not ended_env and t[-1] + 1 == horizon:
                assert ep["truncateds"][-1]
    # Every step the envs took before the last sample's end, per episode, forms a prefix with no gaps.
    by_uid: dict[int, list[int]] = {}
    for u, et in seen:
        by_uid.setdefault(u, []).append(et)
    for u, ts in by_uid.items():
        if batch_mode == "truncate_episodes":
            assert sorted(ts) == list(range(len(ts))), f"episode {u} has gaps"


class IdentityPostprocess(LookbackPolicy):
    """Overrides postprocess_trajectory (as the identity): the worker then runs it per episode segment."""

    calls = 0

    def postprocess_trajectory(self, sample_batch, other_agent_batches=None, episode=None):
        IdentityPostprocess.calls += 1
        return sample_batch


@settings(max_examples=30, deadline=None)
@given(
    num_envs=st.integers(1, 4),
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=4),
    fragment=st.integers(1, 12),
    batch_mode=st.sampled_from(["truncate_episodes", "complete_episodes"]),
    lazy=st.sampled_from([False, 1]),
)
def test_flat_batch_without_postprocessing_equals_the_per_episode_path(num_envs, lengths, fragment, batch_mode, lazy):
    """A policy with the default postprocess_trajectory gets the store's flat batch unsplit: the same rows."""

    def worker(policy_cls):
        envs = iter([ScriptedEnv(lengths, i) for i in range(num_envs)])
        return tv.RolloutWorker(lambda cfg: next(envs), policy_cls, num_envs=num_envs, batch_mode=batch_mode,
                                rollout_fragment_length=fragment, lazy_views=lazy)

    flat, split = worker(LookbackPolicy), worker(IdentityPostprocess)
    before = IdentityPostprocess.calls
    for _ in range(3):
        a, b = flat.sample(), split.sample()
        assert sorted(a) == sorted(b) and len(a) == len(b)
        for k in b:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert IdentityPostprocess.calls > before
    assert flat.sampler._ended.keys() == split.sampler._ended.keys()


class FreshInputPolicy(LookbackPolicy):
    """Checks that every compute-actions input is what the store gives at that moment (the sampler may gather it
    together with the step before, `SingleAgentSampler._next_inputs`: never stale)."""

    worker = None
    checked = 0

    def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
        w = FreshInputPolicy.worker
        if w is not None and w.collector is not None and len(input_dict["obs"]) == w.num_envs:
            fresh = w.collector.input_dict()
            assert sorted(input_dict) == sorted(fresh)
            for k in fresh:
                np.testing.assert_array_equal(np.asarray(input_dict[k]), np.asarray(fresh[k]), err_msg=k)
            FreshInputPolicy.checked += 1
        return super().compute_actions_from_input_dict(input_dict, explore, timestep, **kwargs)


class FlakyCallbacks(tv.Callbacks):
    """on_episode_step raises at the given calls (after the step is stored: the next sample goes on)."""

    def __init__(self, raise_at):
        self.raise_at, self.calls = set(raise_at), 0

    def on_episode_step(self, **kwargs):
        self.calls += 1
        if self.calls in self.raise_at:
            raise RuntimeError("injected callback fault")


@settings(max_examples=40, deadline=None)
@given(
    num_envs=st.integers(1, 4),
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=4),
    fragment=st.integers(1, 12),
    batch_mode=st.sampled_from(["truncate_episodes", "complete_episodes"]),
    horizon=st.one_of(st.none(), st.integers(1, 8)),
    soft_horizon=st.booleans(),
    raise_at=st.sets(st.integers(1, 60), max_size=3),
    samples=st.integers(1, 5),
)
def test_the_policy_always_reads_the_store_as_it_is(
    num_envs, lengths, fragment, batch_mode, horizon, soft_horizon, raise_at, samples
):
    envs = iter([ScriptedEnv(lengths, i) for i in range(num_envs)])
    w = tv.RolloutWorker(lambda cfg: next(envs), FreshInputPolicy, num_envs=num_envs, batch_mode=batch_mode,
                         rollout_fragment_length=fragment, horizon=horizon,
                         soft_horizon=soft_horizon and horizon is not None, callbacks=FlakyCallbacks(raise_at))
    FreshInputPolicy.worker, before = w, FreshInputPolicy.checked
    try:
        for _ in range(samples + len(raise_at)):
            try:
                b = w.sample()
            except RuntimeError as e:
                assert "injected" in str(e)
                continue
            np.testing.assert_array_equal(b["actions"], (b["obs"][:, 0].astype(int) + b["obs"][:, 1].astype(int)) % 5)
    finally:
        FreshInputPolicy.worker = None
    assert FreshInputPolicy.checked > before
