"""`trajview.torchrl.TrajviewCollector` beside TorchRL's own `Collector` (0.14's name for SyncDataCollector).

The cases follow TorchRL's collector tests (test/test_collector.py: batch sizes and frame counts, trajectory
ids, consistency with a rollout of the env, set_seed, update_policy_weights_, state dicts, shutdown), run
through TorchRL's public interface; the layout is compared key by key with TorchRL's collector's, and the
data step by step with a plain gymnasium loop (the reference).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensordict")
pytest.importorskip("torchrl")

import gymnasium as gym  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402
from torch import nn  # noqa: E402
from torchrl.envs import GymEnv, StepCounter, TransformedEnv  # noqa: E402
from torchrl.envs.utils import ExplorationType  # noqa: E402

import trajview as tv  # noqa: E402
from trajview.torchrl import TrajviewCollector  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from torchrl.collectors import Collector  # noqa: E402


def pendulum():
    return gym.make("Pendulum-v1")


def linear_policy(seed=0, in_key="observation", n_in=3):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Flatten(-2) if n_in != 3 else nn.Identity(), nn.Linear(n_in, 1), nn.Tanh())
    return TensorDictModule(net, in_keys=[in_key], out_keys=["action"])


def reference_rollout(policy, steps, seed):
    """Pendulum stepped by hand: the policy's (deterministic) action on each observation; reset with
    ``seed`` once, then without one (gymnasium's rule, as trajview's envs), max 200 steps per episode."""
    env = pendulum()
    obs, _ = env.reset(seed=seed)
    rows = []
    traj = 0
    for _ in range(steps):
        with torch.no_grad():
            act = policy(tv_td(obs))["action"].numpy()[0]
        nxt, r, term, trunc, _ = env.step(act)
        rows.append((obs, act, nxt, float(r), bool(term), bool(trunc), traj))
        obs = nxt
        if term or trunc:
            obs, _ = env.reset()
            traj += 1
    return rows


def tv_td(obs):
    from tensordict import TensorDict

    return TensorDict({"observation": torch.as_tensor(obs).unsqueeze(0)}, batch_size=[1])


def test_layout_matches_torchrls_collector():
    policy = linear_policy()
    ours = TrajviewCollector(pendulum, policy, frames_per_batch=100, total_frames=100, seed=0)
    theirs = Collector(lambda: GymEnv("Pendulum-v1"), policy, frames_per_batch=100, total_frames=100,
                       auto_register_policy_transforms=False)
    a, b = next(iter(ours)), next(iter(theirs))
    ka, kb = set(a.keys(True, True)), set(b.keys(True, True))
    assert kb <= ka, kb - ka
    for k in kb:
        assert a[k].shape == b[k].shape and a[k].dtype == b[k].dtype, k
    assert a.batch_size == b.batch_size == torch.Size([100])
    ours.shutdown()
    theirs.shutdown()


@pytest.mark.parametrize("num_envs,num_workers", [(1, 0), (3, 0), (2, 2)])
def test_batch_size_and_frame_count(num_envs, num_workers):
    fpb = 60
    c = TrajviewCollector(pendulum, linear_policy(), frames_per_batch=fpb, total_frames=250, num_envs=num_envs,
                          num_workers=num_workers, seed=1)
    slots = num_envs * max(num_workers, 1)
    shapes = [td.shape for td in c]
    assert len(shapes) == len(c) == 5  # 250 rounded up to whole batches, as TorchRL does
    assert all(s == (torch.Size([fpb]) if slots == 1 else torch.Size([slots, fpb // slots])) for s in shapes)
    c.shutdown()


def test_matches_a_plain_gymnasium_loop():
    policy = linear_policy(3)
    c = TrajviewCollector(pendulum, policy, frames_per_batch=150, total_frames=450, seed=7,
                          exploration_type=ExplorationType.DETERMINISTIC)
    got = torch.cat(list(c))
    c.shutdown()
    ref = reference_rollout(policy, 450, seed=7)
    obs, act, nxt, rew, term, trunc, traj = zip(*ref)
    torch.testing.assert_close(got["observation"], torch.as_tensor(np.stack(obs)))
    torch.testing.assert_close(got["action"], torch.as_tensor(np.stack(act)))
    torch.testing.assert_close(got["next", "observation"], torch.as_tensor(np.stack(nxt)))
    torch.testing.assert_close(got["next", "reward"][:, 0], torch.tensor(rew, dtype=torch.float32))
    assert got["next", "terminated"][:, 0].tolist() == list(term)
    assert got["next", "truncated"][:, 0].tolist() == list(trunc)
    assert (got["next", "done"] == (got["next", "terminated"] | got["next", "truncated"])).all()
    ids = got["collector", "traj_ids"]
    # One id per trajectory, a new one after each end (TorchRL's traj_ids rule).
    changes = (ids[1:] != ids[:-1]).tolist()
    assert changes == [bool(t) for t in (np.array(trunc) | np.array(term))[:-1]]
    assert len(set(ids.tolist())) == traj[-1] + 1


def test_next_observation_is_the_next_steps_observation():
    c = TrajviewCollector(pendulum, linear_policy(), frames_per_batch=300, total_frames=300, num_envs=3, seed=0)
    td = next(iter(c))
    c.shutdown()
    for env in td:  # [envs, T]: each row one env in time order
        same = env["collector", "traj_ids"][1:] == env["collector", "traj_ids"][:-1]
        assert torch.equal(env["next", "observation"][:-1][same], env["observation"][1:][same])


def test_views_are_keys_the_policy_reads():
    vr = tv.ViewRequirement("observation", shift="-3:0")
    policy = linear_policy(in_key="stack", n_in=12)
    c = TrajviewCollector(pendulum, policy, frames_per_batch=250, total_frames=250, views={"stack": vr}, seed=0,
                          exploration_type=ExplorationType.DETERMINISTIC)
    td = next(iter(c))
    c.shutdown()
    assert td["stack"].shape == (250, 4, 3)
    ids = td["collector", "traj_ids"]
    for t in range(250):
        for j, s in enumerate(range(-3, 1)):
            u = t + s
            want = td["observation"][u] if u >= 0 and ids[u] == ids[t] else torch.zeros(3)
            assert torch.equal(td["stack"][t, j], want), (t, s)
    with torch.no_grad():  # the action is the policy's on the stack (no CatFrames anywhere)
        torch.testing.assert_close(policy(td.select("stack").clone())["action"], td["action"])


def test_set_seed_reproduces_and_reset_moves_on():
    c = TrajviewCollector(pendulum, linear_policy(), frames_per_batch=50, total_frames=-1, seed=0,
                          exploration_type=ExplorationType.DETERMINISTIC)
    it = iter(c)
    a = next(it)
    assert c.set_seed(0) == 0
    b = next(iter(c))
    torch.testing.assert_close(a["observation"], b["observation"])
    c.reset()
    d = next(iter(c))
    assert not torch.equal(a["observation"][0], d["observation"][0])
    c.shutdown()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_update_policy_weights(num_workers):
    policy = linear_policy()
    c = TrajviewCollector(pendulum, policy, frames_per_batch=40, total_frames=-1, num_workers=num_workers, seed=0,
                          exploration_type=ExplorationType.DETERMINISTIC)
    it = iter(c)
    next(it)
    with torch.no_grad():
        policy.module[1].weight.fill_(0.5)
        policy.module[1].bias.fill_(-0.25)
    c.update_policy_weights_()
    td = next(it).reshape(-1)
    with torch.no_grad():
        want = policy(td.select("observation").clone())["action"]
    torch.testing.assert_close(td["action"], want)
    c.shutdown()


def test_state_dict_round_trip():
    p1, p2 = linear_policy(0), linear_policy(1)
    c1 = TrajviewCollector(pendulum, p1, frames_per_batch=20, total_frames=100, seed=0)
    it = iter(c1)
    next(it)
    next(it)
    c2 = TrajviewCollector(pendulum, p2, frames_per_batch=20, total_frames=100, seed=0)
    c2.load_state_dict(c1.state_dict())
    assert torch.equal(p2.module[1].weight, p1.module[1].weight)
    assert sum(1 for _ in c2) == 3  # 40 of the 100 frames were collected already
    with pytest.raises(ValueError, match="frames"):
        c2.load_state_dict({"policy_state_dict": p1.state_dict(), "frames": -1, "iter": 0})
    c1.shutdown()
    c2.shutdown()


def test_torchrl_gym_envs_and_refusals():
    c = TrajviewCollector(lambda: GymEnv("Pendulum-v1"), linear_policy(), frames_per_batch=10, total_frames=-1)
    assert next(iter(c)).shape == (10,)
    c.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        next(iter(c))
    with pytest.raises(TypeError, match="transforms are not run"):
        TrajviewCollector(lambda: TransformedEnv(GymEnv("Pendulum-v1"), StepCounter()), linear_policy(),
                          frames_per_batch=10)
    with pytest.raises(ValueError, match="divisible"):
        TrajviewCollector(pendulum, linear_policy(), frames_per_batch=10, num_envs=3)
    with pytest.raises(ValueError, match="the policy reads 'pixels'"):
        TrajviewCollector(pendulum, TensorDictModule(nn.Linear(3, 1), in_keys=["pixels"], out_keys=["action"]),
                          frames_per_batch=10)


# -- the same checks on both collectors (TorchRL's test_collector.py patterns) ------------------------------------

def _seeded_gym_env(seed):
    def make():
        env = GymEnv("Pendulum-v1")
        if seed is not None:
            env.set_seed(seed)
        return env
    return make


COLLECTORS = {
    "trajview": lambda policy, fpb, total, seed=None: TrajviewCollector(pendulum, policy, frames_per_batch=fpb,
                                                                       total_frames=total, seed=seed),
    "torchrl": lambda policy, fpb, total, seed=None: Collector(_seeded_gym_env(seed), policy, frames_per_batch=fpb,
                                                               total_frames=total,
                                                               auto_register_policy_transforms=False),
}


@pytest.fixture(params=sorted(COLLECTORS))
def make_collector(request):
    return COLLECTORS[request.param]


def test_frames_and_batches_both(make_collector):
    c = make_collector(linear_policy(), 50, 250)
    batches = list(c)
    assert [b.numel() for b in batches] == [50] * 5 and len(c) == 5
    c.shutdown()


def test_trajectory_ids_and_next_observation_both(make_collector):
    c = make_collector(linear_policy(), 450, 450)
    td = next(iter(c))
    c.shutdown()
    ids = td["collector", "traj_ids"]
    done = td["next", "done"][:, 0]
    # A new id right after each end, never inside a trajectory; next observation = the next step's within one.
    assert ((ids[1:] != ids[:-1]) == done[:-1]).all()
    same = ids[1:] == ids[:-1]
    assert torch.equal(td["next", "observation"][:-1][same], td["observation"][1:][same])
    assert done.sum() == 2  # Pendulum's 200-step time limit, twice in 450 steps
    assert (td["next", "truncated"][:, 0] == done).all()


def test_same_seed_same_data_both(make_collector):
    policy = linear_policy()
    first = []
    for _ in range(2):
        c = make_collector(policy, 30, -1, seed=3)
        first.append(next(iter(c)))
        c.shutdown()
    torch.testing.assert_close(first[0]["observation"], first[1]["observation"])
    c = make_collector(policy, 30, -1, seed=4)
    assert not torch.equal(next(iter(c))["observation"][0], first[0]["observation"][0])
    c.shutdown()


def test_policy_weights_are_used_both(make_collector):
    policy = linear_policy()
    c = make_collector(policy, 20, -1)
    it = iter(c)
    next(it)
    with torch.no_grad():
        policy.module[1].weight.fill_(-0.5)
    c.update_policy_weights_()
    td = next(it)
    with torch.no_grad():
        torch.testing.assert_close(policy(td.select("observation").clone())["action"], td["action"])
    c.shutdown()


# -- the policy call without TensorDicts (a plain TensorDictModule) ----------------------------------------------


def cartpole():
    return gym.make("CartPole-v1")


class _Sampled(nn.Module):
    """Logits of a linear layer and an action drawn from them with torch's RNG (so RNG use shows)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.linear = nn.Linear(4, 2)

    def forward(self, obs):
        logits = self.linear(obs)
        return torch.multinomial(torch.softmax(logits, -1), 1).squeeze(-1), logits, obs.sum(-1, keepdim=True)

    def act(self, obs, scale=1.0):
        a, logits, _ = self.forward(obs * scale)
        return {"action": a, "logits": logits}


def _run(policy, monkeypatch, fast, num_envs=1, batches=2):
    """Two batches of a seeded collector, with the fast call allowed or not; and how often it was taken."""
    from trajview.torchrl import collector as coll

    calls = []
    real = coll.TensorDictPolicy._call_fast

    def counted(self, src, n):
        calls.append(n)
        return real(self, src, n)

    with monkeypatch.context() as m:
        m.setattr(coll.TensorDictPolicy, "_call_fast", counted)
        if not fast:
            m.setattr(coll, "_fast_out_keys", lambda module: None)
        c = TrajviewCollector(cartpole, policy, frames_per_batch=64 * num_envs, total_frames=-1, num_envs=num_envs,
                              seed=5)
        torch.manual_seed(11)
        it = iter(c)
        out = [next(it) for _ in range(batches)]
        c.shutdown()
    return out, len(calls)


def _assert_same_batches(a, b):
    for x, y in zip(a, b):
        assert set(x.keys(True, True)) == set(y.keys(True, True))
        for k in x.keys(True, True):
            assert x[k].dtype == y[k].dtype and torch.equal(x[k], y[k]), k


def _fast_policies():
    return {
        "tuple_out": lambda: TensorDictModule(_Sampled(), in_keys=["observation"],
                                              out_keys=["action", "logits", ("aux", "sum")]),
        "kwargs_in": lambda: TensorDictModule(_Sampled(), in_keys={"obs": "observation"},
                                              out_keys=["action", "logits", "total"]),
        "method_dict_out": lambda: TensorDictModule(_Sampled(), in_keys=["observation"], out_keys=["action", "logits"],
                                                    method="act", method_kwargs={"scale": 2.0}),
        "not_inplace_ignored_out": lambda: TensorDictModule(_Sampled(), in_keys=["observation"],
                                                            out_keys=["action", "_", "observation"], inplace=False),
    }


@pytest.mark.parametrize("name", sorted(_fast_policies()))
@pytest.mark.parametrize("num_envs", [1, 3])
def test_fast_policy_call_equals_the_modules_own_call(name, num_envs, monkeypatch):
    """Exactly a TensorDictModule: called without TensorDicts, the batches (actions drawn with torch's RNG,
    the other outputs, the envs' steps) equal those of the module's own call on the same seeds."""
    make = _fast_policies()[name]
    fast, n_fast = _run(make(), monkeypatch, fast=True, num_envs=num_envs)
    slow, n_slow = _run(make(), monkeypatch, fast=False, num_envs=num_envs)
    assert n_fast >= 128 and n_slow == 0
    _assert_same_batches(fast, slow)
    assert ("next", "observation") in fast[0].keys(True)


class _Listing(nn.Module):
    def forward(self, obs):
        return (obs[:, 2] > 0).long(), [[1.0, 2.0]] * len(obs)


class _Nested(nn.Module):
    def forward(self, obs):
        return {"action": (obs[:, 2] > 0).long(), "pair": {"x": obs[:, :2], "y": obs[:, 2:]}}


@pytest.mark.parametrize("module,pair_key", [(_Listing, "pair"), (_Nested, ("pair", "x"))], ids=["list", "dict"])
def test_outputs_the_fast_call_cannot_map_go_through_the_modules_writing(module, pair_key, monkeypatch):
    """A list output (TensorDict.from_any makes it a tensor), a dict of outputs holding a dict (a nested
    TensorDict): written by the module's own code, the same batches."""
    make = lambda: TensorDictModule(module(), in_keys=["observation"], out_keys=["action", "pair"])  # noqa: E731
    fast, n_fast = _run(make(), monkeypatch, fast=True)
    slow, _ = _run(make(), monkeypatch, fast=False)
    assert n_fast >= 128
    _assert_same_batches(fast, slow)
    assert pair_key in fast[0].keys(True, True)
    if module is _Listing:
        assert torch.equal(fast[0]["pair"][0], torch.tensor([1.0, 2.0]))


class _Short(nn.Module):
    def forward(self, obs):
        return {"action": (obs[:, 2] > 0).long()}


class _TupleKeyed(nn.Module):
    def forward(self, obs):  # ("action",) is not "action" to the module's call: one output, the dict
        return {("action",): (obs[:, 2] > 0).long(), "logits": obs[:, :2]}


@pytest.mark.parametrize("module", [_Short, _TupleKeyed])
def test_dicts_without_every_out_key_fail_as_the_modules_own_call(module, monkeypatch):
    for fast in (True, False):
        with pytest.raises(RuntimeError, match="There are more out_keys than tensors"):
            _run(TensorDictModule(module(), in_keys=["observation"], out_keys=["action", "logits"]), monkeypatch, fast)


def _hooked():
    p = _fast_policies()["tuple_out"]()
    p.register_forward_hook(lambda mod, args, out: out.set("hooked", torch.ones(out.batch_size)))
    return p


class _SubModule(TensorDictModule):
    pass


def _select_out_keys():
    p = _fast_policies()["tuple_out"]()
    p.select_out_keys("action", "logits")
    return p


@pytest.mark.parametrize("make", [_hooked, lambda: _SubModule(_Sampled(), in_keys=["observation"],
                                                               out_keys=["action", "logits", "total"]),
                                  _select_out_keys], ids=["forward_hook", "subclass", "select_out_keys"])
def test_hooks_subclasses_and_selected_keys_take_the_general_call(make, monkeypatch):
    fast, n_fast = _run(make(), monkeypatch, fast=True)
    slow, _ = _run(make(), monkeypatch, fast=False)
    assert n_fast == 0
    _assert_same_batches(fast, slow)
    keys = set(fast[0].keys(True, True))
    if make is _hooked:
        assert "hooked" in keys and bool(fast[0]["hooked"].all())
    if make is _select_out_keys:
        assert ("aux", "sum") not in keys and "logits" in keys


def test_a_global_forward_hook_takes_the_general_call(monkeypatch):
    seen = []
    handle = torch.nn.modules.module.register_module_forward_hook(lambda mod, args, out: seen.append(type(mod)))
    try:
        _, n_fast = _run(_fast_policies()["tuple_out"](), monkeypatch, fast=True, batches=1)
    finally:
        handle.remove()
    assert n_fast == 0 and TensorDictModule in seen


@pytest.mark.parametrize("dist", ["categorical", "one_hot"])
def test_probabilistic_actor_batches_follow_the_seed(dist, monkeypatch):
    """A ProbabilisticActor (Categorical / OneHotCategorical, actions drawn with torch's RNG): the same batches
    on the same seeds; its call is TorchRL's own (not exactly a TensorDictModule)."""
    from tensordict.nn import TensorDictModule as TDM, TensorDictSequential
    from torchrl.modules import OneHotCategorical, ProbabilisticActor
    from torch.distributions import Categorical

    def make():
        torch.manual_seed(3)
        net = TDM(nn.Linear(4, 2), in_keys=["observation"], out_keys=["logits"])
        cls = Categorical if dist == "categorical" else OneHotCategorical
        actor = ProbabilisticActor(net, in_keys=["logits"], distribution_class=cls, return_log_prob=True)
        if dist == "one_hot":  # CartPole takes an int: the index of the one-hot sample
            return TensorDictSequential(actor, TDM(lambda a: a.argmax(-1), in_keys=["action"], out_keys=["action"]))
        return actor

    a, n_a = _run(make(), monkeypatch, fast=True)
    b, _ = _run(make(), monkeypatch, fast=False)
    assert n_a == 0
    _assert_same_batches(a, b)
    assert "action_log_prob" in a[0].keys()


def test_out_keys_changed_after_construction_are_followed(monkeypatch):
    """The fast call's map of outputs follows the module's out_keys when they change between calls (the policy
    object alone: a collector's rollout refuses new columns mid-run)."""
    from trajview.torchrl import collector as coll
    from trajview.views import SampleBatch

    policy = _fast_policies()["tuple_out"]()
    env = cartpole()
    p = coll._policy_class(policy, {}, ExplorationType.RANDOM)(env.observation_space, env.action_space, {})
    obs = {SampleBatch.OBS: np.zeros((5, 4), np.float32)}
    assert set(p.compute_actions_from_input_dict(obs)[2]) == {"logits", "aux.sum"}
    policy.out_keys = ["action", "scores", "total"]
    calls = []
    real = coll.TensorDictPolicy._call_fast
    monkeypatch.setattr(coll.TensorDictPolicy, "_call_fast", lambda self, src, n: calls.append(n) or real(self, src, n))
    torch.manual_seed(0)
    action, _, extra = p.compute_actions_from_input_dict(obs)
    assert calls == [5] and set(extra) == {"scores", "total"}
    monkeypatch.setattr(coll, "_fast_out_keys", lambda module: None)
    general = coll._policy_class(policy, {}, ExplorationType.RANDOM)(env.observation_space, env.action_space, {})
    torch.manual_seed(0)
    action2, _, extra2 = general.compute_actions_from_input_dict(obs)
    assert calls == [5] and np.array_equal(action, action2) and extra.keys() == extra2.keys()
    assert all(np.array_equal(extra[k], extra2[k]) for k in extra)
