"""PPO's action distributions: log-probabilities against torch.distributions, the tanh squash's correction, bounds."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from torch.distributions import (  # noqa: E402
    AffineTransform,
    Bernoulli,
    Categorical,
    Normal,
    TanhTransform,
    TransformedDistribution,
)

from trajview.algorithms.models import UnsupportedSpaceError, make_action_head  # noqa: E402

B = 64


def test_categorical_matches_torch_and_honours_start():
    torch.manual_seed(0)
    head = make_action_head(gym.spaces.Discrete(5, start=-2))
    assert head.num_inputs == 5
    logits = torch.randn(B, 5)
    d = head(logits)
    a = d.sample()
    assert a.dtype == torch.int64 and a.shape == (B,) and int(a.min()) >= -2 and int(a.max()) <= 2
    ref = Categorical(logits=logits)
    torch.testing.assert_close(d.logp(a), ref.log_prob(a + 2))
    torch.testing.assert_close(d.entropy(), ref.entropy())
    assert torch.equal(d.deterministic(), torch.argmax(logits, -1) - 2)


def test_multi_categorical_is_independent_categoricals():
    torch.manual_seed(1)
    space = gym.spaces.MultiDiscrete(np.array([[3, 2], [4, 5]]), start=np.array([[0, 1], [-1, 0]]))
    head = make_action_head(space)
    assert head.num_inputs == 3 + 2 + 4 + 5
    logits = torch.randn(B, head.num_inputs)
    d = head(logits)
    a = d.sample()
    assert a.dtype == torch.int64 and a.shape == (B, 2, 2)
    assert all(space.contains(row) for row in a.numpy())
    parts = torch.split(logits, [3, 2, 4, 5], -1)
    flat = a.reshape(B, 4) - torch.tensor([0, 1, -1, 0])
    want = sum(Categorical(logits=p).log_prob(flat[:, i]) for i, p in enumerate(parts))
    torch.testing.assert_close(d.logp(a), want)
    torch.testing.assert_close(d.entropy(), sum(Categorical(logits=p).entropy() for p in parts))
    det = d.deterministic().reshape(B, 4) - torch.tensor([0, 1, -1, 0])
    assert torch.equal(det, torch.stack([torch.argmax(p, -1) for p in parts], -1))


def test_bernoulli_matches_torch():
    torch.manual_seed(2)
    space = gym.spaces.MultiBinary([2, 3])
    head = make_action_head(space)
    logits = torch.randn(B, 6)
    d = head(logits)
    a = d.sample()
    assert a.dtype == torch.int8 and a.shape == (B, 2, 3) and all(space.contains(r) for r in a.numpy())
    ref = Bernoulli(logits=logits)
    torch.testing.assert_close(d.logp(a), ref.log_prob(a.reshape(B, 6).float()).sum(-1))
    torch.testing.assert_close(d.entropy(), ref.entropy().sum(-1))
    assert torch.equal(d.deterministic().reshape(B, 6), (logits > 0).to(torch.int8))


def test_squashed_gaussian_logp_matches_a_tanh_affine_transform_of_a_normal():
    torch.manual_seed(3)
    space = gym.spaces.Box(np.array([-2.0, 0.0, -1.0], np.float32), np.array([2.0, 1.0, 3.0], np.float32))
    head = make_action_head(space, log_std_init=-0.3)
    assert head.num_inputs == 3 and torch.allclose(head.log_std, torch.full((3,), -0.3))
    mean = torch.randn(B, 3)
    d = head(mean)
    a = d.sample()
    assert a.dtype == torch.float32 and a.shape == (B, 3)
    assert all(space.contains(r) for r in a.numpy())
    low, high = torch.tensor(space.low, dtype=torch.float64), torch.tensor(space.high, dtype=torch.float64)
    ref = TransformedDistribution(
        Normal(mean.double(), torch.exp(head.log_std.detach()).double().expand(B, 3)),
        [TanhTransform(), AffineTransform((low + high) / 2, (high - low) / 2)],
    )
    torch.testing.assert_close(d.logp(a).double(), ref.log_prob(a.double()).sum(-1), atol=2e-4, rtol=1e-4)
    # The Gaussian's own entropy (before the squash), and the mean squashed for deterministic actions.
    torch.testing.assert_close(d.entropy(), Normal(mean, torch.exp(head.log_std)).entropy().sum(-1))
    assert not a.requires_grad  # sample(), like torch.distributions', is not differentiable
    torch.testing.assert_close(d.deterministic(), ((low + high) / 2 + torch.tanh(mean.double()) * (high - low) / 2).float())


def test_squash_correction_makes_the_density_integrate_to_one_over_the_bounds():
    head = make_action_head(gym.spaces.Box(-2.0, 2.0, (1,), np.float32))
    with torch.no_grad():
        head.log_std.fill_(-0.2)
    grid = torch.linspace(-2.0, 2.0, 400_001)[1:-1, None]
    for mean in (0.0, 0.7, -1.5):
        with torch.no_grad():
            p = torch.exp(head(torch.full((len(grid), 1), mean)).logp(grid)).double()
        mass = torch.trapezoid(p, grid[:, 0].double())
        assert float(mass) == pytest.approx(1.0, abs=2e-3), mean
    # Without the correction (the Gaussian's density of atanh(a / 2)) the mass would be far from 1.
    u = torch.atanh(grid[:, 0].double() / 2)
    plain = torch.exp(Normal(0.0, float(np.exp(-0.2))).log_prob(u))
    assert abs(float(torch.trapezoid(plain, grid[:, 0].double())) - 1.0) > 0.3


def test_squashed_actions_stay_within_bounds_at_the_extremes_and_logp_is_finite():
    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    head = make_action_head(space)
    d = head(torch.tensor([[50.0, -50.0], [0.0, 0.0]]))
    for a in (d.sample(), d.deterministic()):
        assert bool(((a >= -1) & (a <= 1)).all())
        assert bool(torch.isfinite(d.logp(a)).all())
    assert d.deterministic()[0].tolist() == [1.0, -1.0]


def test_unbounded_dimensions_are_plain_gaussian_and_float64_spaces_keep_their_dtype():
    torch.manual_seed(4)
    space = gym.spaces.Box(np.array([-np.inf, -1.0]), np.array([np.inf, 1.0]), dtype=np.float64)
    head = make_action_head(space)
    mean = torch.randn(B, 2)
    d = head(mean)
    a = d.sample()
    assert a.dtype == torch.float64 and bool(((a[:, 1] >= -1) & (a[:, 1] <= 1)).all())
    std = torch.exp(head.log_std)
    want0 = Normal(mean[:, 0], std[0]).log_prob(a[:, 0].float())
    t = a[:, 1].float()
    want1 = Normal(mean[:, 1], std[1]).log_prob(torch.atanh(t)) - torch.log1p(-t * t)
    torch.testing.assert_close(d.logp(a), want0 + want1, atol=1e-4, rtol=1e-4)


def test_gradients_reach_the_mean_and_the_log_std():
    head = make_action_head(gym.spaces.Box(-2.0, 2.0, (3,), np.float32))
    mean = torch.zeros(8, 3, requires_grad=True)
    d = head(mean)
    a = d.sample()
    (d.logp(a).sum() + d.entropy().sum()).backward()
    assert mean.grad is not None and head.log_std.grad is not None
    assert bool(torch.isfinite(head.log_std.grad).all()) and float(head.log_std.grad.abs().sum()) > 0


@pytest.mark.parametrize("space", [
    gym.spaces.Text(5),
    gym.spaces.Dict({"a": gym.spaces.Discrete(2)}),
    gym.spaces.Box(0, 10, (2,), np.int64),
])
def test_unsupported_action_spaces_are_refused(space):
    with pytest.raises(UnsupportedSpaceError, match="action_space"):
        make_action_head(space)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 7), batch=st.integers(1, 300), start=st.integers(-3, 3), seed=st.integers(0, 2**31 - 1))
def test_categorical_is_torchs_categorical_without_its_checks(n, batch, start, seed):
    """trajview's Categorical does torch.distributions.Categorical's arithmetic, op for op: the same logp,
    entropy and gradients bit for bit, and the same draws from the same seed."""
    from trajview.algorithms.models.distributions import Categorical

    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(batch, n, generator=gen) * 3).requires_grad_(True)
    actions = torch.randint(0, n, (batch,), generator=gen)
    mine, ref = Categorical(logits, start), torch.distributions.Categorical(logits=logits)
    lp, ref_lp = mine.logp(actions + start), ref.log_prob(actions)
    assert torch.equal(lp, ref_lp) and torch.equal(mine.entropy(), ref.entropy())
    g1 = torch.autograd.grad((lp * 1.5 + mine.entropy()).sum(), logits)[0]
    g2 = torch.autograd.grad((ref_lp * 1.5 + ref.entropy()).sum(), logits)[0]
    assert torch.equal(g1, g2)
    torch.manual_seed(seed)
    drawn = mine.sample()
    torch.manual_seed(seed)
    assert torch.equal(drawn, ref.sample() + start)


@settings(max_examples=80, deadline=None)
@given(rows=st.integers(0, 200), k=st.integers(1, 40), zeros=st.integers(0, 39), concentration=st.floats(0.01, 5.0),
       dtype=st.sampled_from([torch.float32, torch.float64]), unnormalized=st.booleans(),
       seed=st.integers(0, 2**31 - 1))
def test_draw_categorical_draws_what_torch_multinomial_draws(rows, k, zeros, concentration, dtype, unnormalized, seed):
    """`draw_categorical` against ``torch.multinomial(probs, 1, True)``: the same draws bit for bit from the same seed
    (rows of any size, some probabilities zero, float32 and float64, weights not summing to one), and the
    generator left in the same state."""
    from trajview.algorithms.models.distributions import draw_categorical

    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.full(k, concentration), rows)
    if rows and k > 1:
        probs[:, : min(zeros, k - 1)] = 0.0  # (each row keeps a nonzero weight)
        probs[probs.sum(1) == 0, -1] = 1.0
    if unnormalized:
        probs = probs * rng.uniform(0.1, 10, (rows, 1))
    p = torch.as_tensor(probs, dtype=dtype)
    torch.manual_seed(seed)
    want, after = torch.multinomial(p, 1, True)[:, 0] if rows else torch.zeros(0, dtype=torch.int64), torch.rand(4)
    torch.manual_seed(seed)
    got = draw_categorical(p)
    assert got.dtype == torch.int64 and torch.equal(got, want)
    if rows:
        assert torch.equal(torch.rand(4), after)
        assert bool((p.gather(1, got[:, None]) > 0).all())  # never a zero-probability action
