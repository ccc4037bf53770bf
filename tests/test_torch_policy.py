"""TorchPolicy: the model's view requirements, recurrent state through the collector, learning."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import trajview as tv  # noqa: E402
from rollout_helpers import ScriptedEnv, creator_from  # noqa: E402

VR = tv.ViewRequirement


class CountingRNN(torch.nn.Module):
    """state_out = state_in + 1 (starting from 7), logits from obs: a recurrence the test can follow."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 5)
        self.view_requirements = {
            "state_in_0": VR("state_out_0", shift=-1),
            "prev_n_obs": VR("obs", shift="-1:0"),
        }

    def get_initial_state(self):
        return [torch.full((3,), 7.0)]

    def forward(self, obs, state):
        return self.lin(obs), state + 1


class RNNPolicy(tv.TorchPolicy):
    def __init__(self, obs_space, act_space, config=None):
        super().__init__(obs_space, act_space, config, model=CountingRNN())

    def action_sampler(self, input_dict, explore):
        logits, state = self.model(input_dict["obs"], input_dict["state_in_0"])
        _ = input_dict["prev_n_obs"]
        actions = torch.argmax(logits, dim=-1)
        logp = torch.log_softmax(logits, -1).gather(1, actions[:, None])[:, 0]
        return actions, [state], {"action_logp": logp}

    def loss(self, train_batch):
        logits, _ = self.model(train_batch["obs"], train_batch["state_in_0"])
        logp = torch.log_softmax(logits, -1).gather(1, train_batch["actions"][:, None])[:, 0]
        return (
            -(logp * train_batch["rewards"].float()).mean()
            + 0 * train_batch["action_logp"].sum()
            + 0 * train_batch["state_out_0"].sum()  # read, so it stays a training view
        )


def test_model_views_merge_and_recurrent_state_flows_through_the_store():
    w = tv.RolloutWorker(creator_from([ScriptedEnv((4,), 0)]), RNNPolicy, rollout_fragment_length=6)
    b = w.sample()
    vrs = w.policy.view_requirements
    assert "prev_n_obs" in vrs and vrs["state_in_0"].used_for_compute_actions
    assert w.policy.state_columns == {"state_out_0": (np.dtype(np.float32), (3,))}
    assert w.policy.extra_fetch_columns["action_logp"] == (np.dtype(np.float32), ())
    t = b["t"]
    # state_in at t is state_out at t-1; at t=0 it is the initial state (7).
    np.testing.assert_array_equal(b["state_in_0"][:, 0], 7 + t)
    np.testing.assert_array_equal(b["state_out_0"][:, 0], 8 + t)
    assert b["action_logp"].dtype == np.float32 and (b["action_logp"] <= 0).all()
    # Continues across the fragment cut.
    b2 = w.sample()
    np.testing.assert_array_equal(b2["state_in_0"][:, 0], 7 + b2["t"])


def test_learn_on_batch_steps_the_optimizer():
    w = tv.RolloutWorker(creator_from([ScriptedEnv((4,), 0)]), RNNPolicy, rollout_fragment_length=8)
    b = w.sample()
    before = [p.detach().clone() for p in w.policy.model.parameters()]
    stats = w.policy.learn_on_batch(b)
    assert np.isfinite(stats["loss"])
    assert any(not torch.equal(p0, p) for p0, p in zip(before, w.policy.model.parameters()))


def test_model_must_be_a_module():
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got int"):
        tv.TorchPolicy(ScriptedEnv.observation_space, ScriptedEnv.action_space, model=3)


def test_to_torch_takes_any_mapping():
    """A read-only mapping (not a dict) converts like a dict: every numeric column becomes a tensor."""
    import types

    policy = RNNPolicy(ScriptedEnv.observation_space, ScriptedEnv.action_space)
    cols = {"obs": np.ones((3, 2), np.float32), "actions": np.arange(3)}
    out = policy._to_torch(types.MappingProxyType(cols))
    assert sorted(out) == ["actions", "obs"]
    assert torch.equal(out["obs"], torch.ones(3, 2))


def test_a_plain_dict_of_arrays_converts_as_any_mapping_does():
    """The store's input dict (a plain dict of arrays) takes `_to_torch`'s shortcut: the same batch as the general
    path (the same columns, rows, values and dtypes, tensors viewing writeable arrays, read-only ones copied), and
    the same errors."""
    import types

    policy = RNNPolicy(ScriptedEnv.observation_space, ScriptedEnv.action_space)
    ro = np.arange(6, dtype=np.float64).reshape(3, 2)
    ro.flags.writeable = False
    cols = {"obs": np.ones((3, 2), np.float32), "actions": np.arange(3), "state_in_0": np.zeros((3, 3), np.float32),
            "ro": ro, "flags": np.array([True, False, True])}
    fast, general = policy._to_torch(dict(cols)), policy._to_torch(types.MappingProxyType(cols))
    assert type(fast) is type(general) is tv.SampleBatch
    assert list(fast) == list(general) and fast.count == general.count == 3
    assert fast.seq_keys == general.seq_keys
    for k in cols:
        assert fast[k].dtype == general[k].dtype and torch.equal(fast[k], general[k]), k
    assert fast["obs"].data_ptr() == cols["obs"].ctypes.data  # a view of the array
    assert fast["ro"].data_ptr() != ro.ctypes.data  # a read-only array is copied (torch tensors are writeable)
    # Whatever the shortcut does not take goes the general way: the same result or the same error.
    odd = [
        {"obs": np.ones((3, 2)), "actions": np.arange(2)},  # rows differ
        {"obs": np.ones((3, 2)), "scalar": np.array(1.0)},  # a 0-d array
        {"obs": np.ones((3, 2)), 5: np.arange(3)},  # a key that is not a str
        {"obs": np.ones((3, 2)), "infos": np.array([{}, {}, {}], dtype=object)},  # objects: left out
        {"obs": np.ones((2, 2)), "state_in_0": np.zeros((1, 3)), "seq_lens": np.array([2])},  # per-sequence rows
        {"obs": np.ones((3, 2)), "list": [1, 2, 3]},  # not an array
        {"obs": np.ones((3, 2)), "names": np.array(["a", "b", "c"])},  # strings: torch has no such tensors
        {"obs": np.ones((3, 2))[::-1]},  # a negative stride
        {"obs": np.ones((3, 2), ">f4")},  # not the native byte order
    ]
    for d in odd:
        try:
            want = policy._to_torch(types.MappingProxyType(d))
        except Exception as e:
            with pytest.raises(type(e), match=None) as info:
                policy._to_torch(dict(d))
            assert str(info.value) == str(e)
            continue
        got = policy._to_torch(dict(d))
        assert list(got) == list(want) and got.count == want.count and got.seq_keys == want.seq_keys
        for k in want:
            assert torch.equal(got[k], want[k])


def test_outputs_that_need_autograd_detached_still_convert():
    """An action_sampler output that is a parameter (requires grad) converts as before, through detach."""
    from trajview.policy.torch_policy import _to_numpy

    p = torch.nn.Parameter(torch.ones(2, 3))
    np.testing.assert_array_equal(_to_numpy(p), np.ones((2, 3), np.float32))
    assert _to_numpy({"a": (torch.zeros(1), torch.arange(2))})["a"][1].tolist() == [0, 1]


def test_compute_actions_converts_every_kind_of_output():
    """Outputs that are not plain CPU tensors (a parameter needing grad, numpy arrays, a tuple action) come back
    as numpy, as they did before the shortcut for plain tensors."""
    policy = RNNPolicy(ScriptedEnv.observation_space, ScriptedEnv.action_space)
    param = torch.nn.Parameter(torch.full((2, 3), 2.0))
    outputs = [
        (torch.tensor([1, 0]), [param], {"action_logp": np.zeros(2, np.float32)}),
        ((torch.tensor([1, 0]), torch.tensor([0.5, 0.5])), [torch.ones(2, 3)], {"action_logp": torch.zeros(2)}),
        (np.array([1, 0]), [torch.ones(2, 3)], {}),
    ]
    for out in outputs:
        policy.action_sampler = lambda t, e, out=out: out
        a, s, e = policy.compute_actions_from_input_dict({"obs": np.zeros((2, 2), np.float32)})
        flat_a = a if isinstance(a, tuple) else (a,)
        assert all(type(x) is np.ndarray for x in (*flat_a, *s, *e.values()))
        np.testing.assert_array_equal(s[0], out[1][0].detach().numpy())


@settings(max_examples=60, deadline=None)
@given(
    shapes=st.lists(st.lists(st.integers(1, 7), min_size=0, max_size=3), min_size=1, max_size=6),
    without_grad=st.lists(st.booleans(), min_size=6, max_size=6),
    scale=st.sampled_from([1e-3, 1.0, 50.0]),
    max_norm=st.sampled_from([0.1, 0.5, 10.0]),
    seed=st.integers(0, 2**16),
)
def test_clip_grad_norm_is_torchs_bit_for_bit(shapes, without_grad, scale, max_norm, seed):
    """`clip_grad_norm` against torch's `clip_grad_norm_` (foreach and default) on copies of the same gradients: the
    same total norm and the same scaled gradients, bit for bit; parameters without a gradient are skipped."""
    from trajview.policy.torch_policy import clip_grad_norm

    g = torch.Generator().manual_seed(seed)
    params = []
    for shape, no_grad in zip(shapes, without_grad):
        p = torch.nn.Parameter(torch.randn(shape, generator=g))
        p.grad = None if no_grad else torch.randn(shape, generator=g) * scale
        params.append(p)

    def copies():
        out = [torch.nn.Parameter(p.detach().clone()) for p in params]
        for c, p in zip(out, params):
            c.grad = None if p.grad is None else p.grad.clone()
        return out

    ours = copies()
    total = clip_grad_norm(ours, max_norm)
    for foreach in (True, None):
        ref = copies()
        want = torch.nn.utils.clip_grad_norm_(ref, max_norm, foreach=foreach)
        assert torch.equal(total, want)
        for a, b in zip(ours, ref):
            assert (a.grad is None) == (b.grad is None)
            if a.grad is not None:
                assert torch.equal(a.grad, b.grad)


def test_clip_grad_norm_of_mixed_dtypes_is_torchs_own_call():
    from trajview.policy.torch_policy import clip_grad_norm

    a, b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    a.grad, b.grad = torch.full((3,), 2.0), torch.full((2,), 2.0, dtype=torch.float64)
    a2, b2 = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    a2.grad, b2.grad = a.grad.clone(), b.grad.clone()
    assert torch.equal(clip_grad_norm([a, b], 1.0), torch.nn.utils.clip_grad_norm_([a2, b2], 1.0, foreach=True))
    assert torch.equal(a.grad, a2.grad) and torch.equal(b.grad, b2.grad)
    assert float(clip_grad_norm([torch.nn.Parameter(torch.ones(2))], 1.0)) == 0.0  # no gradients: norm 0


def test_grads_clearer_does_what_zero_grad_does_and_takes_an_overriding_one():
    """`grads_clearer`: the optimizer's parameters' grads set to None (zero_grad's default), for every parameter
    group; a class that overrides zero_grad has its own called."""
    from trajview.policy.torch_policy import grads_clearer

    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    opt = torch.optim.Adam([{"params": net[0].parameters()}, {"params": net[1].parameters(), "lr": 0.1}])
    clear = grads_clearer(opt)
    for _ in range(2):
        net(torch.ones(5, 3)).sum().backward()
        assert all(p.grad is not None for p in net.parameters())
        clear()
        assert all(p.grad is None for p in net.parameters())
    calls = []

    class Counted(torch.optim.SGD):
        def zero_grad(self, set_to_none=True):
            calls.append(1)
            super().zero_grad(set_to_none)

    counted = Counted(net.parameters(), lr=0.1)
    clear = grads_clearer(counted)
    net(torch.ones(5, 3)).sum().backward()
    clear()
    assert len(calls) == 2 and all(p.grad is None for p in net.parameters())
