"""PPO: whole-sequence minibatches, the loss, and learning on small tasks in a few thousand steps."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import trajview as tv  # noqa: E402
from trajview.algorithms.ppo import PPOPolicy, minibatches  # noqa: E402
from trajview.train import TrainConfig, PPOTrainer  # noqa: E402


def test_torch_sample_batch_with_seq_lens():
    # TorchPolicy converts batches with seq_lens to tensors (the pruning pass of recurrent models does).
    b = tv.SampleBatch({"obs": torch.zeros(5, 2), "seq_lens": torch.tensor([3, 2], dtype=torch.int32),
                        "state_in_0": torch.zeros(2, 4)})
    assert len(b) == 5 and b.seq_keys == {"seq_lens", "state_in_0"}
    with pytest.raises(TypeError, match="1-D integer array"):
        tv.SampleBatch({"obs": torch.zeros(5, 2), "seq_lens": torch.tensor([3.0, 2.0])})


def test_minibatches_are_whole_sequences_covering_the_batch_once():
    lens = torch.tensor([3, 1, 4, 4, 2, 4, 1], dtype=torch.int32)
    n = int(lens.sum())
    seq_of_row = torch.repeat_interleave(torch.arange(len(lens)), lens.long())
    batch = {"actions": torch.arange(n), "seq": seq_of_row, "seq_lens": lens,
             "state_in_0": torch.arange(len(lens))[:, None].float()}
    seen = []
    mbs = list(minibatches(batch, size=5, generator=torch.Generator().manual_seed(0)))
    # Each minibatch closes with the sequence that brings it to >= 5 rows (the last one holds the rest).
    assert all(len(mb["actions"]) >= 5 for mb in mbs[:-1]) and len(mbs) >= 3
    for mb in mbs:
        assert int(mb["seq_lens"].sum()) == len(mb["actions"])
        r = 0
        for q, L in enumerate(mb["seq_lens"].tolist()):
            rows = mb["actions"][r : r + L]
            s = int(mb["state_in_0"][q, 0])
            # The sequence's rows, in order, consecutive, with its own state_in row.
            assert rows.tolist() == list(range(int(lens[:s].sum()), int(lens[:s].sum()) + L))
            assert (mb["seq"][r : r + L] == s).all()
            r += L
        seen += mb["actions"].tolist()
    assert sorted(seen) == list(range(n))
    # Every key of the batch, each column gathered when first read (and the same tensor when read again).
    for mb in mbs:
        assert list(mb) == list(batch) and len(mb) == len(batch) and "seq" in mb and "missing" not in mb
        assert mb.get("missing") is None and mb["actions"] is mb["actions"]
    flat = {"actions": torch.arange(10), "x": torch.arange(10) * 2}
    mbs = list(minibatches(flat, size=4))
    assert [len(m["actions"]) for m in mbs] == [4, 4, 2]
    assert all((m["x"] == m["actions"] * 2).all() for m in mbs)
    assert sorted(torch.cat([m["actions"] for m in mbs]).tolist()) == list(range(10))


@pytest.mark.parametrize("kind", ["sequences", "rows", "one minibatch"])
@pytest.mark.parametrize("epochs", [1, 2, 5])
def test_minibatches_of_several_epochs_are_those_epochs_one_call_each(kind, epochs):
    """``minibatches(..., epochs=k)``: the minibatches of ``k`` calls of one epoch each, in turn, from the same
    generator (each epoch shuffled anew; the generator left where those calls leave it)."""
    lens = torch.tensor([3, 1, 4, 4, 2, 4, 1], dtype=torch.int32)
    n = int(lens.sum())
    batch = {"actions": torch.arange(n), "x": torch.arange(n) * 3}
    if kind == "sequences":
        batch.update(seq_lens=lens, state_in_0=torch.arange(len(lens))[:, None].float())
    size = n + 1 if kind == "one minibatch" else 5
    got_gen, want_gen = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    got = list(minibatches(batch, size, generator=got_gen, epochs=epochs))
    want = [mb for _ in range(epochs) for mb in minibatches(batch, size, generator=want_gen)]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert list(g) == list(w)
        for k in w:
            assert torch.equal(g[k], w[k]), k
    assert torch.equal(got_gen.get_state(), want_gen.get_state())


def _mlp_policy_and_batch(**config):
    """A PPO MLP policy on Stateless CartPole (clip 0.2, no value loss) and a 64-row batch without ``action_logp``:
    (policy, batch, each row's logp under the policy, the advantages)."""
    env = gym.make("trajview/StatelessCartPole-v1")
    p = PPOPolicy(env.observation_space, env.action_space,
                  {"model": "mlp", "clip_param": 0.2, "vf_loss_coeff": 0.0, **config})
    obs = torch.randn(64, 2)
    with torch.no_grad():
        logits, _ = p.model.forward_train({"obs": obs})
    actions = torch.randint(0, 2, (64,))
    logp = torch.log_softmax(logits, -1).gather(1, actions[:, None])[:, 0]
    adv = torch.randn(64)
    return p, {"obs": obs, "actions": actions, "advantages": adv, "value_targets": torch.zeros(64)}, logp, adv


def test_loss_clips_the_ratio():
    p, batch, logp, adv = _mlp_policy_and_batch()
    # Same policy: ratio 1, loss = -mean(normalized advantages) = 0, nothing clipped.
    assert float(p.loss({**batch, "action_logp": logp}).detach()) == pytest.approx(0.0, abs=1e-5)
    assert p.last_stats["clip_frac"] == 0.0 and p.last_stats["kl"] == pytest.approx(0.0, abs=1e-6)
    # Old policy much less likely: every ratio is far above 1 + clip; positive advantages are clipped at 1.2.
    p.loss({**batch, "action_logp": logp - 5.0})
    assert p.last_stats["clip_frac"] == 1.0
    norm = (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8)
    want = -torch.where(norm > 0, 1.2 * norm, torch.exp(torch.tensor(5.0)) * norm).mean()
    assert p.last_stats["policy_loss"] == pytest.approx(float(want), rel=1e-4)


def test_decoupled_clip_clips_against_the_proximal_policy_and_weights_to_the_behaviour_policy():
    """decoupled_clip (--async): surrogate = (prox / behaviour) * min(r A, clip(r) A), r = pi / prox, with prox the
    policy at the start of the update; with prox equal to the behaviour policy it is the standard objective."""
    from trajview.algorithms.ppo import PROX_LOGP

    torch.manual_seed(0)
    p, batch, logp, adv = _mlp_policy_and_batch(decoupled_clip=True)
    env = gym.make("trajview/StatelessCartPole-v1")
    behaviour = logp + 0.3 * torch.randn(64)  # a batch sampled with other (older) weights
    norm = (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8)
    # The proximal policy is the current one: r = 1, nothing clipped; each row weighted by prox / behaviour.
    p.loss({**batch, "action_logp": behaviour, PROX_LOGP: logp})
    want = -(torch.exp(logp - behaviour) * norm).mean()
    assert p.last_stats["policy_loss"] == pytest.approx(float(want), rel=1e-5)
    # A proximal policy far from the current one: r clipped at 1 +- 0.2 around prox, not around behaviour.
    prox = logp - 5.0
    p.loss({**batch, "action_logp": behaviour, PROX_LOGP: prox})
    r = torch.exp(logp - prox)
    want = -(torch.exp(prox - behaviour) * torch.min(r * norm, torch.clamp(r, 0.8, 1.2) * norm)).mean()
    assert p.last_stats["policy_loss"] == pytest.approx(float(want), rel=1e-5)
    # prox == behaviour: the standard clipped objective, value and gradient.
    std = PPOPolicy(env.observation_space, env.action_space, {"model": "mlp", "clip_param": 0.2, "vf_loss_coeff": 0.0})
    std.model.load_state_dict(p.model.state_dict())
    a = p.loss({**batch, "action_logp": behaviour, PROX_LOGP: behaviour})
    b = std.loss({**batch, "action_logp": behaviour})
    assert float(a.detach()) == pytest.approx(float(b.detach()), rel=1e-6)
    ga = torch.autograd.grad(a, list(p.model.parameters()), allow_unused=True)
    gb = torch.autograd.grad(b, list(std.model.parameters()), allow_unused=True)
    for x, y in zip(ga, gb):
        assert (x is None) == (y is None)
        if x is not None:
            torch.testing.assert_close(x, y)


def test_learn_on_batch_with_decoupled_clip_adds_the_proximal_logp_of_the_weights_before_the_update():
    env = gym.make("trajview/StatelessCartPole-v1")
    p = PPOPolicy(env.observation_space, env.action_space,
                  {"model": "lstm", "model_config": {"max_seq_len": 5, "cell_size": 8, "hidden": 8},
                   "decoupled_clip": True, "num_sgd_iter": 1, "sgd_minibatch_size": 20})
    w = tv.RolloutWorker(lambda cfg: gym.make("trajview/StatelessCartPole-v1"), p, num_envs=2,
                         rollout_fragment_length=20, seed=0)
    b = w.sample()
    seen = []
    orig = p.loss

    def spy(mb):
        seen.append(mb)
        return orig(mb)

    p.loss = spy
    p.learn_on_batch(b)
    from trajview.algorithms.ppo import PROX_LOGP
    # The batch was sampled with these weights: the proximal logp of each row is its stored behaviour logp.
    prox = torch.cat([mb[PROX_LOGP] for mb in seen]).sort().values
    stored = torch.as_tensor(b["action_logp"]).float().sort().values
    torch.testing.assert_close(prox, stored, atol=1e-5, rtol=1e-5)
    assert sum(len(mb[PROX_LOGP]) for mb in seen) == len(b)


def test_torch_policy_pruning_drops_views_nothing_reads():
    # TorchPolicy converts tracked batches to tensors without counting the conversion as reads.
    env = gym.make("trajview/StatelessCartPole-v1")
    p = PPOPolicy(env.observation_space, env.action_space, {"model": "mlp"})
    p._initialize_view_requirements()
    vrs = p.view_requirements
    for k in ("prev_actions", "prev_rewards", "env_id", "new_obs"):
        assert not vrs[k].used_for_compute_actions, k
    for k in ("prev_actions", "prev_rewards", "env_id"):
        assert not vrs[k].used_for_training, k
    assert vrs["obs"].used_for_compute_actions and vrs["obs"].used_for_training
    assert vrs["new_obs"].used_for_training  # read to bootstrap truncated segments


def test_postprocessing_adds_gae_and_the_loss_keeps_only_needed_views():
    env = gym.make("trajview/StatelessCartPole-v1")
    p = PPOPolicy(env.observation_space, env.action_space, {"model": "lstm", "model_config": {"max_seq_len": 5}})
    w = tv.RolloutWorker(lambda cfg: gym.make("trajview/StatelessCartPole-v1"), p, num_envs=2, rollout_fragment_length=20, seed=0)
    b = w.sample()
    assert {"advantages", "value_targets", "vf_preds", "action_logp", "seq_lens"} <= set(b.keys())
    vrs = p.view_requirements
    assert not vrs["prev_rewards"].used_for_training and not vrs["prev_rewards"].used_for_compute_actions
    assert vrs["state_in_0"].used_for_compute_actions and vrs["state_in_0"].batch_repeat_value == 5
    assert "infos" not in b
    # value_targets = advantages + vf_preds (GAE).
    np.testing.assert_allclose(b["value_targets"], b["advantages"] + b["vf_preds"], rtol=1e-5, atol=1e-5)


def _train(tmp_path, model, steps, seed=0, lr=3e-3, **kw):
    cfg = TrainConfig(env="trajview/RepeatPrevious-v0", model=model, seed=seed, timesteps=steps, envs_per_worker=8,
                      train_batch_size=400, sgd_minibatch_size=100, num_sgd_iter=6, lr=lr, stop_reward=None,
                      out_dir=str(tmp_path / model), **kw)
    t = PPOTrainer(cfg)
    t.train(progress=False)
    return t


@pytest.mark.parametrize("model,config,lr", [
    ("framestack", {"num_frames": 2, "hidden": (32,)}, 3e-3),
    ("lstm", {"max_seq_len": 10, "cell_size": 16, "hidden": 16}, 1e-2),
])
def test_ppo_learns_a_memory_task_that_mlp_cannot(tmp_path, model, config, lr):
    """RepeatPrevious: answer the bit shown one step earlier (19 of 20 steps rewarded; chance 9.5)."""
    t = _train(tmp_path, model, 6000, lr=lr, model_config=config)
    assert t.mean_return > 15.0, t.mean_return


def test_mlp_cannot_learn_the_memory_task(tmp_path):
    t = _train(tmp_path, "mlp", 4000, model_config={"hidden": (32,)})
    assert 6.0 < t.mean_return < 12.5, t.mean_return


@pytest.mark.parametrize("space", [
    gym.spaces.Box(-2.0, 2.0, (2,), np.float32),
    gym.spaces.MultiDiscrete([3, 4]),
    gym.spaces.MultiBinary(3),
])
def test_loss_kl_and_entropy_with_other_action_heads(space):
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    p = PPOPolicy(obs_space, space, {"model": "mlp", "vf_loss_coeff": 0.0})
    obs = torch.randn(64, 2)
    with torch.no_grad():
        inputs, _ = p.model.forward_train({"obs": obs})
        dist = p.model.action_dist(inputs)
        actions = dist.sample()
        logp = dist.logp(actions)
        entropy = float(dist.entropy().mean())
    assert all(space.contains(a) for a in actions.numpy())
    batch = {"obs": obs, "actions": actions, "advantages": torch.randn(64), "value_targets": torch.zeros(64)}
    # The policy that acted: ratio 1, KL 0, nothing clipped, the loss is -mean(normalized advantages) = 0.
    assert float(p.loss({**batch, "action_logp": logp}).detach()) == pytest.approx(0.0, abs=1e-5)
    assert p.last_stats["kl"] == pytest.approx(0.0, abs=1e-6) and p.last_stats["clip_frac"] == 0.0
    assert p.last_stats["entropy"] == pytest.approx(entropy, rel=1e-6)
    # An older policy that gave these actions less probability: the KL estimate is the mean logp gap.
    p.loss({**batch, "action_logp": logp - 0.3})
    assert p.last_stats["kl"] == pytest.approx(-0.3, abs=1e-5) and p.last_stats["clip_frac"] == 1.0


@pytest.mark.parametrize("obs_space, act_space", [
    (gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(3)),
    (gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (2,), np.float32), "b": gym.spaces.Discrete(4)}),
     gym.spaces.MultiDiscrete([2, 3])),
    (gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-1, 1, (2,), np.float32)),
    (gym.spaces.Box(0, 255, (16, 16, 1), np.uint8), gym.spaces.Discrete(2)),  # a CNN: weights, left as it is
])
def test_framestack_inputs_built_once_per_batch_equal_those_built_per_minibatch(obs_space, act_space):
    """`prepare_train` builds the frame stack's input rows once per training batch; every minibatch of them
    gives exactly the outputs (and gradients) the minibatch's own views give."""
    from trajview.algorithms.models import make_model

    torch.manual_seed(0)
    model = make_model("framestack", obs_space, act_space, num_frames=4)
    k, n = 4, 37
    rng = np.random.default_rng(1)

    def stack(space):
        return torch.as_tensor(np.stack([np.stack([space.sample() for _ in range(k)]) for _ in range(n)]))

    batch = {"prev_n_actions": stack(act_space), "prev_n_rewards": torch.as_tensor(rng.standard_normal((n, k))),
             "actions": stack(act_space)[:, 0]}
    if isinstance(obs_space, gym.spaces.Dict):
        batch.update({f"prev_n_obs.{name}": stack(sub) for name, sub in obs_space.spaces.items()})
    else:
        batch["prev_n_obs"] = stack(obs_space)
    prepared = model.prepare_train(dict(batch))
    has_weights = obs_space.shape == (16, 16, 1)
    assert (prepared == batch) if has_weights else ("prev_n_actions" not in prepared and "actions" in prepared)
    rows = torch.randperm(n)[:11]
    want = model.forward_train({key: v[rows] for key, v in batch.items()})
    got = model.forward_train({key: v[rows] for key, v in prepared.items()})
    for a, b in zip(want, got):
        assert torch.equal(a, b)
    grads = []
    for outs in (want, got):
        model.zero_grad()
        (outs[0].sum() + outs[1].sum()).backward(retain_graph=True)
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    assert all(torch.equal(a, b) for a, b in zip(*grads))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["get", "set", "del", "in", "iter", "len", "copy", "pop"]),
                          st.sampled_from(["a", "b", "seq_lens", "state_in_0", "new"])), max_size=12),
       st.booleans())
def test_a_minibatch_behaves_as_the_dict_of_its_gathered_columns(ops, sequences):
    """`minibatches`' minibatches (columns gathered when read) against a plain dict of the same columns gathered at
    once, under random reads, writes and deletions; the training batch itself never changes."""
    lens = torch.tensor([3, 1, 4, 2], dtype=torch.int32)
    n = int(lens.sum())
    batch = {"a": torch.arange(n), "b": torch.arange(n) * 2.0, "actions": torch.arange(n)}
    if sequences:
        batch.update({"seq_lens": lens, "state_in_0": torch.arange(4.0)[:, None]})
    before = {k: v.clone() for k, v in batch.items()}
    mb = next(iter(minibatches(batch, size=3, generator=torch.Generator().manual_seed(0))))
    want = {k: mb[k] for k in list(batch)}  # every column, read once (the same gathers)
    mb = next(iter(minibatches(batch, size=3, generator=torch.Generator().manual_seed(0))))
    for op, key in ops:
        if op == "get":
            got = mb.get(key, None)
            ref = want.get(key, None)
            assert (got is None) == (ref is None) and (ref is None or torch.equal(got, ref))
        elif op == "set":
            mb[key] = want[key] = torch.tensor([7.0])
        elif op in ("del", "pop"):
            if key in want:
                del want[key]
                if op == "del":
                    del mb[key]
                else:
                    mb.pop(key)
            else:
                with pytest.raises(KeyError):
                    del mb[key]
        elif op == "in":
            assert (key in mb) == (key in want)
        elif op == "iter":
            assert sorted(mb) == sorted(want)
        elif op == "len":
            assert len(mb) == len(want)
        else:
            c = mb.copy()
            assert type(c) is dict and sorted(c) == sorted(want) and all(torch.equal(c[k], want[k]) for k in want)
    assert all(torch.equal(batch[k], before[k]) for k in before) and sorted(batch) == sorted(before)
