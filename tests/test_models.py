"""trajview.models: inputs only from views; the flat training pass equals the step-by-step rollout."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import trajview as tv  # noqa: E402
from trajview.algorithms.models import FrameStackModel, GTrXLModel, LSTMModel, MLPModel, make_model  # noqa: E402
from trajview.algorithms.ppo import PPOPolicy  # noqa: E402

OBS = gym.spaces.Box(-1, 1, (2,), np.float32)
ACT = gym.spaces.Discrete(3)


def _cartpole_worker(model: str, seed: int = 0, num_envs: int = 3, fragment: int = 30, **model_config):
    torch.manual_seed(seed)
    env = gym.make("trajview/StatelessCartPole-v1")
    policy = PPOPolicy(env.observation_space, env.action_space, {"model": model, "model_config": model_config})
    w = tv.RolloutWorker(
        lambda cfg: gym.make("trajview/StatelessCartPole-v1"), policy, num_envs=num_envs,
        rollout_fragment_length=fragment, seed=seed,
    )
    return w, policy


def test_views_declared_by_each_model():
    fs = FrameStackModel(OBS, ACT, num_frames=16).view_requirements
    assert fs["prev_n_obs"].data_col == "obs" and fs["prev_n_obs"].shift_arr.tolist() == list(range(-15, 1))
    assert fs["prev_n_actions"].shift_arr.tolist() == list(range(-16, 0))
    assert fs["prev_n_rewards"].data_col == "rewards" and fs["prev_n_rewards"].shift_arr.tolist() == list(range(-16, 0))
    lstm = LSTMModel(OBS, ACT, max_seq_len=7).view_requirements
    for i in range(4):
        vr = lstm[f"state_in_{i}"]
        assert (vr.data_col, vr.shift_arr.tolist(), vr.batch_repeat_value) == (f"state_out_{i}", [-1], 7)
    att = GTrXLModel(OBS, ACT, max_seq_len=9, memory=5, num_layers=2).view_requirements
    for i in range(4):
        vr = att[f"state_in_{i}"]
        assert (vr.data_col, vr.shift_arr.tolist(), vr.batch_repeat_value) == (f"state_out_{i}", [-5, -4, -3, -2, -1], 9)
    assert set(MLPModel(OBS, ACT).view_requirements) == {"obs"}
    with pytest.raises(ValueError, match="model must be one of"):
        make_model("gru", OBS, ACT)
    with pytest.raises(ValueError, match="action_space: unsupported space Dict"):
        MLPModel(OBS, gym.spaces.Dict({"a": gym.spaces.Discrete(2)}))


def _lstm_step_by_step(m, batch, row_keys):
    """The reference of an LSTM training batch: `forward_step` row by row, each sequence (``seq_lens``) started
    from its ``state_in_i`` row and, at an ``is_init`` row inside a sequence, from the initial state; the rows'
    ``row_keys`` columns are the step's inputs. Returns the stacked (logits, values)."""
    is_init = batch.get("is_init")
    logits, values = [], []
    r = 0
    for q, L in enumerate(batch["seq_lens"].tolist()):
        for pos in range(L):
            if pos == 0:
                state = [batch[f"state_in_{i}"][q : q + 1] for i in range(4)]
            elif is_init is not None and bool(is_init[r]):
                state = [s[None] for s in m.get_initial_state()]
            d = {k: batch[k][r : r + 1] for k in row_keys}
            d.update({f"state_in_{i}": s for i, s in enumerate(state)})
            lg, v, state = m.forward_step(d)
            logits.append(lg[0])
            values.append(v[0])
            r += 1
    return torch.stack(logits), torch.stack(values)


@pytest.mark.parametrize("hidden,post_hidden", [(8, ()), (0, (6, 4)), (8, (5,))])
def test_lstm_flat_pass_equals_step_by_step_on_random_sequences(hidden, post_hidden):
    """With a layer before the LSTM or none (``hidden`` 0), and tanh layers after it (``post_hidden``) or none."""
    torch.manual_seed(0)
    m = LSTMModel(OBS, ACT, max_seq_len=5, cell_size=8, hidden=hidden, prev_action=True, prev_reward=True,
                  post_hidden=post_hidden)
    assert m.pi_head.in_features == (post_hidden[-1] if post_hidden else 8)
    assert (m.pi_core.fc is None) == (hidden == 0)
    lens = [5, 2, 5, 1, 3, 5, 4]
    n = sum(lens)
    obs, acts, rews = torch.randn(n, 2), torch.randint(0, 3, (n,)), torch.randn(n).double()
    states = [torch.randn(len(lens), 8) for _ in range(4)]
    batch = {"obs": obs, "prev_actions": acts, "prev_rewards": rews, "seq_lens": torch.tensor(lens, dtype=torch.int32),
             **{f"state_in_{i}": s for i, s in enumerate(states)}}
    logits, values = m.forward_train(batch)
    want_l, want_v = _lstm_step_by_step(m, batch, ("obs", "prev_actions", "prev_rewards"))
    torch.testing.assert_close(logits, want_l, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(values, want_v, atol=1e-5, rtol=1e-5)
    # Gradients flow through the packed pass to every parameter.
    (logits.sum() + values.sum()).backward()
    assert all(p.grad is not None for p in m.parameters())


@pytest.mark.parametrize("kwargs,what", [
    ({"hidden": -1}, "hidden must be an int >= 0, got -1"),
    ({"hidden": 2.5}, "hidden must be an int >= 0, got 2.5"),
    ({"cell_size": 0}, "cell_size must be an int >= 1, got 0"),
    ({"post_hidden": 64}, "post_hidden must be a list of ints >= 1 .*got 64"),
    ({"post_hidden": [64, 0]}, r"post_hidden\[1\] must be an int >= 1, got 0"),
    ({"post_hidden": [True]}, r"post_hidden\[0\] must be an int >= 1, got True"),
    ({"post_hidden": "64"}, "post_hidden must be a list of ints >= 1 .*got '64'"),
])
def test_lstm_sizes_are_checked(kwargs, what):
    with pytest.raises(ValueError, match=f"LSTMModel: {what}"):
        LSTMModel(OBS, ACT, **kwargs)


@pytest.mark.parametrize("model", ["lstm", "attention"])
def test_episode_start_inside_a_sequence_resets_the_memory(model):
    """A flat batch whose sequence holds the end of one episode and the start of the next (is_init):
    the training pass equals a rollout that restarts from the initial state there."""
    torch.manual_seed(2)
    if model == "lstm":
        m = LSTMModel(OBS, ACT, max_seq_len=6, cell_size=8, hidden=8)
    else:
        m = GTrXLModel(OBS, ACT, max_seq_len=6, memory=3, attention_dim=8, num_heads=2, ff_dim=8)
    lens = [6, 3]
    t = torch.tensor([7, 8, 0, 1, 2, 3, 4, 5, 6])  # episode A's t=7, 8, then episode B from t=0
    is_init = t == 0
    obs, acts = torch.randn(9, 2), torch.randint(0, 3, (9,))
    k = 4 if model == "lstm" else 2
    shape = (2, 8) if model == "lstm" else (2, 3, 8)
    states = [torch.randn(*shape) for _ in range(k)]
    # Sequence 1 starts at B's t=4: its state_in is whatever B's rollout had there; take it from the rollout below.
    init = [s.detach() for s in m.get_initial_state()]
    want_l, state = [], [s[0] for s in states]
    for r in range(6):
        if is_init[r]:
            state = [i if model == "lstm" else torch.zeros(3, 8) for i in init]
        d = {"obs": obs[r : r + 1], "prev_actions": acts[r : r + 1], "t": t[r : r + 1],
             **{f"state_in_{i}": s[None] for i, s in enumerate(state)}}
        with torch.no_grad():
            lg, v, outs = m.forward_step(d)
        want_l.append(lg[0])
        state = [o[0] for o in outs] if model == "lstm" else [torch.cat([s[1:], o]) for s, o in zip(state, outs)]
    for i in range(k):
        states[i][1] = state[i]
    for r in range(6, 9):
        d = {"obs": obs[r : r + 1], "prev_actions": acts[r : r + 1], "t": t[r : r + 1],
             **{f"state_in_{i}": s[None] for i, s in enumerate(state)}}
        with torch.no_grad():
            lg, v, outs = m.forward_step(d)
        want_l.append(lg[0])
        state = [o[0] for o in outs] if model == "lstm" else [torch.cat([s[1:], o]) for s, o in zip(state, outs)]
    batch = {"obs": obs, "prev_actions": acts, "t": t, "is_init": is_init, "seq_lens": torch.tensor(lens),
             **{f"state_in_{i}": s for i, s in enumerate(states)}}
    with torch.no_grad():
        logits, _ = m.forward_train(batch)
    torch.testing.assert_close(logits, torch.stack(want_l), atol=1e-5, rtol=1e-5)


def test_gtrxl_flat_pass_equals_step_by_step_on_random_sequences():
    torch.manual_seed(1)
    M, D = 3, 8
    m = GTrXLModel(OBS, ACT, max_seq_len=4, memory=M, attention_dim=D, num_layers=2, num_heads=2, ff_dim=8)
    lens, t0 = [4, 1, 4, 2], [0, 4, 9, 1]  # sequence starts: the first two read the pre-episode pad
    n = sum(lens)
    obs, acts = torch.randn(n, 2), torch.randint(0, 3, (n,))
    t = torch.cat([torch.arange(a, a + L) for a, L in zip(t0, lens)])
    mems = [torch.randn(len(lens), M, D) for _ in range(4)]
    batch = {"obs": obs, "prev_actions": acts, "t": t, "seq_lens": torch.tensor(lens),
             **{f"state_in_{i}": s for i, s in enumerate(mems)}}
    logits, values = m.forward_train(batch)
    want_l, want_v = [], []
    r = 0
    for q, L in enumerate(lens):
        mem = [s[q] for s in mems]
        for _ in range(L):
            d = {"obs": obs[r : r + 1], "prev_actions": acts[r : r + 1], "t": t[r : r + 1]}
            d.update({f"state_in_{i}": s[None] for i, s in enumerate(mem)})
            lg, v, outs = m.forward_step(d)
            want_l.append(lg[0])
            want_v.append(v[0])
            mem = [torch.cat([s[1:], o]) for s, o in zip(mem, outs)]  # the window slides by one stored row
            r += 1
    torch.testing.assert_close(logits, torch.stack(want_l), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(values, torch.stack(want_v), atol=1e-5, rtol=1e-5)


def test_lstm_padded_pass_equals_pack_sequence_reference_with_gradients():
    """The [T, runs] padded pass gives pack_sequence's outputs and the same gradients (padding is never read)."""
    from torch.nn.utils.rnn import pack_sequence

    from trajview.algorithms.models.lstm import _LSTMCore

    torch.manual_seed(3)
    core = _LSTMCore(5, 6, 7)
    lens = torch.tensor([4, 1, 6, 2, 6, 3])
    x = torch.randn(int(lens.sum()), 5, requires_grad=True)
    h0, c0 = torch.randn(len(lens), 7), torch.randn(len(lens), 7)
    out = core.flat(x, lens, h0, c0)
    g = torch.randn_like(out)
    got = torch.autograd.grad((out * g).sum(), [x, *core.parameters()])

    z = torch.tanh(core.fc(x))
    ref_out, _ = core.lstm(pack_sequence(list(torch.split(z, lens.tolist())), enforce_sorted=False),
                           (h0[None], c0[None]))
    unpacked, _ = torch.nn.utils.rnn.pad_packed_sequence(ref_out, batch_first=True)
    ref = torch.cat([unpacked[i, :L] for i, L in enumerate(lens.tolist())])
    want = torch.autograd.grad((ref * g).sum(), [x, *core.parameters()])
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_gtrxl_block_equals_a_plain_reference():
    """The block runs the policy's and the value function's layers as one (weights stacked on a first dimension),
    projects keys / values once per row and takes each query's window out of one score matmul per sequence. The
    reference takes each network and each row alone, gathers its window (the M entries before it and itself) and
    projects each window row (``kv(ln1(window) + pos)``) with plain per-network layers, as the paper's layer reads."""
    from torch.nn import functional as F

    from trajview.algorithms.models.gtrxl import _GTrXLBlock

    torch.manual_seed(4)
    G, M, D, H, T = 2, 3, 8, 2, 5
    lens = [5, 2, 4, 1]
    S, W = len(lens), M + T
    block = _GTrXLBlock(G, D, H, M, 16)
    with torch.no_grad():  # non-trivial norms, so a mixed-up gain or bias shows
        for p in block.parameters():
            p.add_(0.1 * torch.randn_like(p))
    seqs = torch.randn(G, S, W, D)
    for s, L in enumerate(lens):
        seqs[:, s, M + L:] = 0  # after a sequence's end
    seqs.requires_grad_(True)
    slots = [(s, i) for s, L in enumerate(lens) for i in range(L)]
    q_at = torch.tensor([s * T + i for s, i in slots])
    x = torch.stack([seqs[:, s, M + i] for s, i in slots], 1)  # the query rows are their slots' rows
    valid = torch.rand(S, T, M + 1) > 0.3
    valid[..., -1] = True  # a row always sees itself
    got = block(x, seqs, q_at, valid)

    def lin(layer, g, z):
        out = z @ layer.weight[g]
        return out if layer.bias is None else out + layer.bias[g, 0]

    def gate(gt, g, x, y):
        wr, wz, wh = lin(gt.w, g, y).chunk(3, -1)
        ur, uz = lin(gt.u_rz, g, x).chunk(2, -1)
        r, z = torch.sigmoid(wr + ur), torch.sigmoid(wz + uz - gt.bias)
        return (1 - z) * x + z * torch.tanh(wh + lin(gt.u_h, g, r * x))

    want = []
    for g in range(G):
        def ln(m, z, g=g):
            return F.layer_norm(z, (D,), m.weight[g, 0], m.bias[g, 0])
        rows = []
        for j, (s, i) in enumerate(slots):
            window = seqs[g, s, i : i + M + 1]
            q = lin(block.q, g, ln(block.ln1, x[g, j])).view(H, 1, D // H)
            k, v = lin(block.kv, g, ln(block.ln1, window) + block.pos[g]).chunk(2, -1)
            k = k.view(M + 1, H, D // H).transpose(0, 1)
            v = v.view(M + 1, H, D // H).transpose(0, 1)
            sc = ((q @ k.transpose(-1, -2)) / np.sqrt(D // H)).masked_fill(~valid[s, i][None, None], float("-inf"))
            a = (torch.softmax(sc, -1) @ v).reshape(D)
            hh = gate(block.gate1, g, x[g, j], torch.relu(lin(block.o, g, a)))
            ff = lin(block.ff2, g, torch.relu(lin(block.ff1, g, ln(block.ln2, hh))))
            rows.append(gate(block.gate2, g, hh, torch.relu(ff)))
        want.append(torch.stack(rows))
    want_t = torch.stack(want)
    torch.testing.assert_close(got, want_t, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(got)
    params = list(block.parameters())
    got_grads = torch.autograd.grad((got * g).sum(), [seqs, *params], retain_graph=True)
    want_grads = torch.autograd.grad((want_t * g).sum(), [seqs, *params])
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_gtrxl_networks_are_independent():
    """The policy's and the value function's weights live in one core, but neither network reads the other's:
    the policy's output has no gradient in the value function's weights, and the reverse."""
    import gymnasium as gym

    from trajview.algorithms.models.gtrxl import GTrXLModel

    torch.manual_seed(5)
    m = GTrXLModel(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), max_seq_len=4, memory=3)
    n = 5
    d = {"obs": torch.randn(n, 3), "prev_actions": torch.randint(0, 2, (n,)), "t": torch.arange(n),
         **{f"state_in_{i}": torch.randn(n, 3, 32) for i in range(2)}}
    logits, value, _ = m.forward_step(d)
    stacked = [p for p in m.core.parameters()]
    g_pi = torch.autograd.grad(logits.sum(), stacked, allow_unused=True, retain_graph=True)
    g_vf = torch.autograd.grad(value.sum(), stacked, allow_unused=True)
    checked = 0
    for p, a, b in zip(stacked, g_pi, g_vf):
        assert a is not None and b is not None and p.shape[0] == 2
        assert torch.count_nonzero(a[1]) == 0 and torch.count_nonzero(b[0]) == 0
        checked += int(torch.count_nonzero(a[0]) > 0) + int(torch.count_nonzero(b[1]) > 0)
    assert checked > len(stacked)  # most weights do move each network's own output


def _earlier_gtrxl_layout(state: dict) -> dict:
    """The state dict of the earlier GTrXL (a pi_core and a vf_core of nn.Linear / nn.LayerNorm, the MLP as
    ``ff.0`` / ``ff.2``) holding ``state``'s weights: what a checkpoint of that version held."""
    out = {}
    for key, v in state.items():
        if not key.startswith("core."):
            out[key] = v
            continue
        rest = key[len("core."):].replace("ff1.", "ff.0.").replace("ff2.", "ff.2.")
        leaf, owner = rest.rsplit(".", 1)[-1], rest.rsplit(".", 2)[-2]
        for g, name in enumerate(("pi_core.", "vf_core.")):
            if leaf == "pos":
                w = v[g]
            elif owner.startswith("ln") or leaf == "bias":
                w = v[g, 0]
            else:
                w = v[g].t()
            out[name + rest] = w.clone()
    return out


def test_gtrxl_loads_a_checkpoint_of_the_earlier_two_core_layout():
    """Checkpoints from before the two networks were stacked load into the stacked core with the same outputs;
    PPO resumes from such a checkpoint with fresh optimizer moments (and says so)."""
    import gymnasium as gym

    from trajview.algorithms.models.gtrxl import GTrXLModel
    from trajview.algorithms.ppo import PPOPolicy

    space, acts = gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2)
    torch.manual_seed(6)
    a = GTrXLModel(space, acts, max_seq_len=4, memory=3, num_layers=2)
    old = _earlier_gtrxl_layout(a.state_dict())
    assert any(k.startswith("pi_core.blocks.1.ff.2.") for k in old) and not any(k.startswith("core.") for k in old)
    b = GTrXLModel(space, acts, max_seq_len=4, memory=3, num_layers=2)
    b.load_state_dict(old)
    for k, v in a.state_dict().items():
        torch.testing.assert_close(b.state_dict()[k], v, rtol=0, atol=0)
    n = 5
    d = {"obs": torch.randn(n, 2), "prev_actions": torch.randint(0, 2, (n,)), "t": torch.arange(n),
         **{f"state_in_{i}": torch.randn(n, 3, 32) for i in range(4)}}
    with torch.no_grad():
        for x, y in zip(a.forward_step(d)[:2], b.forward_step(d)[:2]):
            torch.testing.assert_close(x, y, rtol=0, atol=0)
    cfg = {"model": "attention", "model_config": {"max_seq_len": 4, "memory": 3, "num_layers": 2}}
    p = PPOPolicy(space, acts, cfg)
    new_state = p.get_state()
    p2 = PPOPolicy(space, acts, cfg)
    with pytest.warns(UserWarning, match="earlier layout"):
        # An optimizer state of other parameters than the stacked core's (as saved with the earlier weights).
        other = torch.optim.Adam([torch.zeros(3, requires_grad=True)]).state_dict()
        p2.set_state({"model": _earlier_gtrxl_layout(new_state["model"]), "optimizer": other})
    for k, v in new_state["model"].items():
        torch.testing.assert_close(p2.model.state_dict()[k], v, rtol=0, atol=0)
    with pytest.raises(ValueError):  # the same optimizer mismatch with weights of today's layout is an error
        PPOPolicy(space, acts, cfg).set_state({"model": new_state["model"], "optimizer": other})


FRAMESTACK_OBS_ONLY = {"prev_actions": False, "prev_rewards": False}


@pytest.mark.parametrize("model", ["lstm", "attention", "framestack", "framestack-obs-only", "mlp"])
def test_training_pass_over_collected_batch_reproduces_rollout_outputs(model):
    """With unchanged weights, forward_train over the flat batch gives each step's logp and value from acting."""
    cfg = {"lstm": {"max_seq_len": 7, "cell_size": 16}, "attention": {"max_seq_len": 7, "memory": 5},
           "framestack": {"num_frames": 4}, "framestack-obs-only": {"num_frames": 4, **FRAMESTACK_OBS_ONLY},
           "mlp": {}}[model]
    w, policy = _cartpole_worker(model.removesuffix("-obs-only"), **cfg)
    for _ in range(3):  # later fragments: sequences start mid-episode and read earlier fragments' state
        b = w.sample()
    assert len(b) == 90
    if model in ("lstm", "attention"):
        assert b["seq_lens"].max() <= 7 and b["seq_lens"].sum() == 90
        assert len(b["state_in_0"]) == len(b["seq_lens"])
    tensors = dict(policy._to_torch(b).items())
    with torch.no_grad():
        logits, values = policy.model.forward_train(tensors)
    logp = torch.log_softmax(logits, -1).gather(1, tensors["actions"][:, None].long())[:, 0]
    np.testing.assert_allclose(logp.numpy(), b["action_logp"], atol=1e-5)
    np.testing.assert_allclose(values.numpy(), b["vf_preds"], atol=1e-5)


def test_gtrxl_memory_view_matches_stored_state_out_rows():
    M = 5
    w, policy = _cartpole_worker("attention", num_envs=2, fragment=12, max_seq_len=4, memory=M, num_layers=1)
    rows: dict[tuple[int, int], np.ndarray] = {}  # (eps_id, t) -> state_out_0 row
    checked = 0
    for _ in range(6):
        b = w.sample()
        for e, t, s in zip(b["eps_id"], b["t"], b["state_out_0"]):
            rows[(int(e), int(t))] = s
        starts = np.concatenate([[0], np.cumsum(b["seq_lens"])[:-1]])
        assert b["state_in_0"].shape == (len(starts), M, 32)
        for q, r in enumerate(starts):
            e, t0 = int(b["eps_id"][r]), int(b["t"][r])
            for j in range(M):
                want = rows[(e, t0 - M + j)] if t0 - M + j >= 0 else np.zeros(32, np.float32)
                np.testing.assert_array_equal(b["state_in_0"][q, j], want)
                checked += 1
    assert checked > 100
    # Each step's memory row is stored once: the store's column is state_out_0, [32] per step.
    assert policy.state_columns["state_out_0"] == (np.dtype(np.float32), (32,))


@pytest.mark.parametrize("model", ["lstm", "attention", "framestack", "framestack-obs-only", "mlp"])
def test_bootstrap_input_is_the_next_steps_input(model):
    """The value that bootstraps a fragment cut equals the critic's value at that episode's next step."""
    cfg = {"lstm": {"max_seq_len": 4, "cell_size": 16}, "attention": {"max_seq_len": 4, "memory": 5},
           "framestack": {"num_frames": 6}, "framestack-obs-only": {"num_frames": 6, **FRAMESTACK_OBS_ONLY},
           "mlp": {}}[model]
    w, policy = _cartpole_worker(model.removesuffix("-obs-only"), num_envs=2, fragment=10, **cfg)
    first = w.sample()
    second = w.sample()
    compared = 0
    for seg in first.split_by_episode():
        if seg["terminateds"][-1]:
            continue
        eid, t_last = int(seg["eps_id"][-1]), int(seg["t"][-1])
        nxt = np.flatnonzero((second["eps_id"] == eid) & (second["t"] == t_last + 1))
        assert len(nxt) == 1
        assert policy.value_of_next_step(seg) == pytest.approx(float(second["vf_preds"][nxt[0]]), abs=1e-5)
        compared += 1
    assert compared >= 1


BOOTSTRAP_MODELS = {"lstm": {"max_seq_len": 4, "cell_size": 16}, "attention": {"max_seq_len": 4, "memory": 5},
                    "framestack": {"num_frames": 6}, "mlp": {}}


def _gae_of_each_segment(policy, batch, value_of):
    """Each episode segment of the sampled ``batch`` with its advantages and value targets as `postprocess_trajectory`
    computes them one segment at a time, the bootstrap value from ``value_of(segment)``: (segment, reference)."""
    from trajview.algorithms.postprocessing import compute_gae_for_sample_batch

    out = []
    for seg in batch.split_by_episode():
        ref = compute_gae_for_sample_batch(seg.copy(), lambda _obs: value_of(seg), gamma=policy.config["gamma"],
                                           lambda_=policy.config["lambda"])
        out.append((seg, ref))
    return out


@pytest.mark.parametrize("model", list(BOOTSTRAP_MODELS))
def test_a_samples_bootstrap_values_come_from_one_critic_call_equal_to_each_segments_own(model):
    """The sampler hands a batch's segments to the policy at once (`PPOPolicy.flat_postprocessor`): the truncated
    ones' bootstrap values come from one call of the critic on their stacked inputs, equal (to float32 rounding) to
    each segment's own call, and the advantages are GAE's with them."""
    w, policy = _cartpole_worker(model, num_envs=4, fragment=10, **BOOTSTRAP_MODELS[model])
    w.sample()  # (the first: the view-pruning pass's postprocessing of a dummy batch, one segment, comes first)
    inner = policy.values_of_next_steps
    critic = policy._values_of
    calls: list[int] = []

    def spy(inputs, n):
        calls.append(n)
        return critic(inputs, n)

    policy._values_of = spy
    batches = [w.sample() for _ in range(3)]
    del policy._values_of
    # One call per sample, of every segment cut at the fragment's end (4 envs: at least 2 run on, in a batch of 40).
    assert len(calls) == 3 and all(c >= 2 for c in calls), calls
    compared = 0
    for b in batches:
        for seg, ref in _gae_of_each_segment(policy, b, lambda s: float(inner([s])[0])):
            np.testing.assert_allclose(seg["advantages"], ref["advantages"], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(seg["value_targets"], ref["value_targets"], rtol=1e-5, atol=1e-5)
            compared += not seg["terminateds"][-1]
    assert compared >= 6
    # Outside a sampler's postprocessing, value_of_next_step computes its segment's own value.
    seg = next(s for s in batches[-1].split_by_episode() if not s["terminateds"][-1])
    assert policy._bootstrapped is None and policy.value_of_next_step(seg) == float(inner([seg])[0])


def test_bootstrap_inputs_that_do_not_stack_and_overrides_are_valued_one_segment_at_a_time():
    """Bootstrap inputs that do not stack (shapes differ between segments) are valued one segment at a time, with the
    same advantages; a subclass's value_of_next_step is called for each segment (the batched values are not used)."""
    w, policy = _cartpole_worker("mlp", num_envs=4, fragment=10)
    w.sample()
    model = policy.model
    own = model.bootstrap_input
    # (the MLP reads obs only; each episode its own width)
    model.bootstrap_input = lambda seg: {**own(seg), "seen": np.zeros((1, 1 + int(seg["eps_id"][0])))}
    sizes: list[int] = []
    inner = policy.values_of_next_steps
    policy.values_of_next_steps = lambda segs: (sizes.append(len(segs)), inner(segs))[1]
    b = w.sample()
    assert sizes[0] >= 2 and sizes[1:] == [1] * sizes[0]  # the stacked call fell back to one call per segment
    for seg, ref in _gae_of_each_segment(policy, b, lambda s: float(inner([s])[0])):
        np.testing.assert_allclose(seg["advantages"], ref["advantages"], rtol=1e-5, atol=1e-5)

    class Halved(PPOPolicy):
        def value_of_next_step(self, segment):
            asked.append(len(segment))
            return 0.5 * super().value_of_next_step(segment)

    asked: list[int] = []
    env = gym.make("trajview/StatelessCartPole-v1")
    torch.manual_seed(0)
    halved = Halved(env.observation_space, env.action_space, {"model": "mlp"})
    w = tv.RolloutWorker(lambda cfg: gym.make("trajview/StatelessCartPole-v1"), halved, num_envs=4,
                         rollout_fragment_length=10, seed=0)
    w.sample()
    asked.clear()
    b = w.sample()
    cut = [s for s in b.split_by_episode() if not s["terminateds"][-1]]
    assert len(asked) == len(cut) >= 2
    for seg, ref in _gae_of_each_segment(halved, b, lambda s: 0.5 * float(halved.values_of_next_steps([s])[0])):
        np.testing.assert_allclose(seg["advantages"], ref["advantages"], rtol=1e-5, atol=1e-5)


def test_multi_agent_segments_are_bootstrapped_in_one_call_per_policy():
    """Multi-agent: each policy's truncated segments of a batch (agents that joined late, left, were not observed
    every step) are valued in one call of its critic, and the advantages equal GAE's per segment."""
    pytest.importorskip("pettingzoo")
    from ma_envs import Script, ScriptedEnv

    script = Script(40, join=[0, 2, 5], leave=[None, 20, None], final_obs=[True, True, True], turns=[0b111, 0b101])
    space = gym.spaces.Box(-1e9, 1e9, (2,), np.float64)
    torch.manual_seed(0)
    policies = {p: PPOPolicy(space, gym.spaces.Discrete(7), {"model": "mlp"}) for p in ("even", "odd")}
    it = iter(range(100))
    w = tv.RolloutWorker(lambda cfg: ScriptedEnv([script], 3, next(it)), policies, num_envs=2,
                         rollout_fragment_length=7, policy_mapping_fn=lambda a, *_, **__: "odd" if a == "a1" else "even")
    w.sample()
    calls: dict[str, list[int]] = {"even": [], "odd": []}
    for pid, pol in policies.items():
        inner = pol.values_of_next_steps
        pol.values_of_next_steps = (lambda segs, pid=pid, inner=inner: (calls[pid].append(len(segs)), inner(segs))[1])
    batches = [w.sample() for _ in range(4)]
    assert len(calls["even"]) == 4 and all(c >= 2 for c in calls["even"]), calls  # a0 and a2 in 2 envs
    compared = 0
    for b in batches:
        for pid, pb in b.policy_batches.items():
            pol = policies[pid]
            spy = pol.__dict__.pop("values_of_next_steps")  # (the reference: the policy's own, per segment)
            for seg, ref in _gae_of_each_segment(pol, pb, lambda s: float(pol.values_of_next_steps([s])[0])):
                np.testing.assert_allclose(seg["advantages"], ref["advantages"], rtol=1e-5, atol=1e-5)
                compared += not seg["terminateds"][-1]
            pol.values_of_next_steps = spy
    assert compared >= 8


def test_stacked_bootstrap_inputs():
    from trajview.algorithms.ppo import _stacked

    a = {"obs": {"x": np.ones((1, 2), np.float32), "y": (np.zeros((1,), np.int64),)}, "t": np.array([3])}
    b = {"obs": {"x": np.full((1, 2), 2, np.float32), "y": (np.ones((1,), np.int64),)}, "t": np.array([4])}
    got = _stacked([a, b])
    np.testing.assert_array_equal(got["obs"]["x"], [[1, 1], [2, 2]])
    np.testing.assert_array_equal(got["obs"]["y"][0], [0, 1])
    np.testing.assert_array_equal(got["t"], [3, 4])
    assert got["obs"]["x"].dtype == np.float32 and type(got["obs"]["y"]) is tuple
    for other in ({**b, "t": np.array([4.0])},                     # another dtype
                  {**b, "t": np.array([4, 5])},                     # two rows
                  {"obs": b["obs"]},                                # a key missing
                  {**b, "t": 4},                                    # not an array
                  {**b, "obs": {"x": b["obs"]["x"]}}):              # a nested key missing
        assert _stacked([a, other]) is None


@pytest.mark.parametrize("prev_actions,prev_rewards", [(True, True), (True, False), (False, True), (False, False)])
def test_framestack_switches_choose_the_inputs(prev_actions, prev_rewards):
    """The frame stack's input row is the last n observations, then (if asked) the n previous actions one-hot
    and the n previous rewards, zeros (action 0) before the episode's start: checked against a per-step reference built
    from the sampled batch's own obs/actions/rewards; a view left out is not requested."""
    k = 3
    w, policy = _cartpole_worker("framestack", num_envs=2, fragment=12, num_frames=k,
                                 prev_actions=prev_actions, prev_rewards=prev_rewards)
    policy.keep_views = {"obs", "actions", "rewards"}  # the reference reads them
    model = policy.model
    assert set(model.view_requirements) == {"prev_n_obs"} | ({"prev_n_actions"} if prev_actions else set()) | (
        {"prev_n_rewards"} if prev_rewards else set())
    assert model.pi[0].in_features == 2 * k + 2 * k * prev_actions + k * prev_rewards
    b = w.sample()
    x, _ = model._inputs(dict(policy._to_torch(b).items()))
    eps, ts = b["eps_id"], b["t"]
    for r in range(len(b)):
        def earlier(col, back, width):  # the row ``back`` steps before row r in its episode, zeros before its start
            q = np.flatnonzero((eps == eps[r]) & (ts == ts[r] - back))
            return b[col][q[0]].reshape(width).astype(np.float32) if len(q) else np.zeros(width, np.float32)
        want = [earlier("obs", back, 2) for back in range(k - 1, -1, -1)]
        if prev_actions:
            # the action view reads action 0 before the start, one-hot encoded like any other
            want += [np.eye(2, dtype=np.float32)[int(earlier("actions", back, 1)[0])] for back in range(k, 0, -1)]
        if prev_rewards:
            want += [earlier("rewards", back, 1) for back in range(k, 0, -1)]
        np.testing.assert_allclose(x[r].numpy(), np.concatenate(want), rtol=0, atol=0)
    policy.learn_on_batch(policy.postprocess_trajectory(b))  # it trains


def test_framestack_switch_must_be_a_bool():
    with pytest.raises(TypeError, match="FrameStackModel prev_rewards must be a bool, got int 0"):
        FrameStackModel(OBS, ACT, num_frames=4, prev_rewards=0)


@settings(max_examples=40, deadline=None)
@given(
    lens=st.lists(st.integers(1, 6), min_size=1, max_size=5),
    layout=st.sampled_from([(8, ()), (0, ()), (0, (6, 4)), (5, (3,))]),
    init_at=st.sets(st.integers(0, 29), max_size=6),
    seed=st.integers(0, 2**16),
)
def test_lstm_training_pass_equals_a_step_by_step_reference(lens, layout, init_at, seed):
    """Random sequence lengths, episode starts (``is_init``) anywhere, every layer layout (a layer before the LSTM or
    none, tanh layers after it or none): each row's logits and value from the flat training pass equal a plain
    step-by-step loop's. The reference starts each sequence from its ``state_in`` row and, at an ``is_init`` row
    inside a sequence, from the initial state."""
    torch.manual_seed(seed)
    hidden, post = layout
    m = LSTMModel(OBS, ACT, max_seq_len=6, cell_size=5, hidden=hidden, post_hidden=post, prev_action=True)
    n = sum(lens)
    obs, acts = torch.randn(n, 2), torch.randint(0, 3, (n,))
    is_init = torch.tensor([r in init_at for r in range(n)])
    states = [torch.randn(len(lens), 5) for _ in range(4)]
    batch = {"obs": obs, "prev_actions": acts, "is_init": is_init, "seq_lens": torch.tensor(lens),
             **{f"state_in_{i}": s for i, s in enumerate(states)}}
    with torch.no_grad():
        logits, values = m.forward_train(batch)
        want_l, want_v = _lstm_step_by_step(m, batch, ("obs", "prev_actions"))
    torch.testing.assert_close(logits, want_l, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(values, want_v, atol=1e-5, rtol=1e-5)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=8), st.data())
def test_sequence_index_and_split_points_match_a_python_reference(lens, data):
    """`flat_sequence_index` and `_split_points` (numpy index arithmetic) against a loop over the rows: runs start at
    each sequence's first row and at each is_init row; a run from a sequence start reads that sequence's state_in, one
    from an episode start inside it the initial state (-1)."""
    from trajview.algorithms.models import flat_sequence_index
    from trajview.algorithms.models.base import _split_points

    n = sum(lens)
    is_init = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    seq_of_row = [q for q, L in enumerate(lens) for _ in range(L)]
    pos = [p for L in lens for p in range(L)]
    got_seq, got_pos = flat_sequence_index(torch.tensor(lens, dtype=torch.int32))
    assert got_seq.dtype == got_pos.dtype == torch.int64
    assert got_seq.tolist() == seq_of_row and got_pos.tolist() == pos
    runs: list[list[int]] = []  # [length, from_seq]
    for r in range(n):
        if pos[r] == 0 or is_init[r]:
            runs.append([0, seq_of_row[r] if pos[r] == 0 else -1])
        runs[-1][0] += 1
    for init in (torch.tensor(is_init), np.array(is_init)):
        lens_out, from_seq = _split_points({"is_init": init}, torch.tensor(lens))
        assert [list(x) for x in zip(lens_out.tolist(), from_seq.tolist())] == runs
    lens_out, from_seq = _split_points({}, lens)
    assert lens_out.tolist() == [L for L in lens if L] and from_seq.tolist() == [q for q, L in enumerate(lens) if L]
    if n:
        with pytest.raises(ValueError, match=f"seq_lens sum to {n} rows, but the batch has {n - 1} rows"):
            _split_points({"is_init": np.zeros(n - 1, bool)}, lens)


class _SegmentBySegment(PPOPolicy):
    """PPO postprocessed one segment at a time (no flat postprocessor): the reference of the one-pass way."""

    def flat_postprocessor(self):
        return None


@pytest.mark.parametrize("model", list(BOOTSTRAP_MODELS))
@settings(max_examples=6, deadline=None)
@given(num_envs=st.integers(1, 5), fragment=st.integers(1, 25), seed=st.integers(0, 3))
def test_a_batch_postprocessed_in_one_pass_equals_each_segment_postprocessed(model, num_envs, fragment, seed):
    """The sampler's one pass over a batch's segments (`PPOPolicy.flat_postprocessor`: GAE over the flat batch, the
    bootstrap inputs read in one pass) gives the batch that postprocessing each segment and concatenating gives:
    every column, bit for bit, over several samples (episodes that end, run on, and start inside a batch)."""
    env = gym.make("trajview/StatelessCartPole-v1")
    batches = {}
    for cls in (PPOPolicy, _SegmentBySegment):
        torch.manual_seed(seed)
        policy = cls(env.observation_space, env.action_space,
                     {"model": model, "model_config": BOOTSTRAP_MODELS[model]})
        w = tv.RolloutWorker(lambda cfg: gym.make("trajview/StatelessCartPole-v1"), policy, num_envs=num_envs,
                             rollout_fragment_length=fragment, seed=seed)
        batches[cls] = [w.sample() for _ in range(3)]
        w.stop()
    for one_pass, each in zip(batches[PPOPolicy], batches[_SegmentBySegment]):
        assert set(one_pass.keys()) == set(each.keys()) and len(one_pass) == len(each)
        for key in each.keys():
            np.testing.assert_array_equal(np.asarray(one_pass[key]), np.asarray(each[key]), err_msg=key)


def test_a_model_that_changes_bootstrap_input_alone_is_bootstrapped_one_segment_at_a_time():
    """A subclass (or an instance) that changes ``bootstrap_input`` but not ``bootstrap_inputs`` is not read by the
    parent's one-pass ``bootstrap_inputs`` (None: each truncated segment's own ``bootstrap_input`` is called)."""
    class Shifted(MLPModel):
        def bootstrap_input(self, segment):
            return {"obs": super().bootstrap_input(segment)["obs"] + 1.0}

    model = Shifted(OBS, ACT)
    assert model.bootstrap_inputs_if_same({}, np.array([0]), np.array([1])) is None
    plain = MLPModel(OBS, ACT)
    rows = tv.SampleBatch(new_obs=np.arange(8, dtype=np.float32).reshape(4, 2))
    np.testing.assert_array_equal(plain.bootstrap_inputs_if_same(rows, np.array([0, 2]), np.array([2, 4]))["obs"],
                                  np.array([[2, 3], [6, 7]], np.float32))
    plain.bootstrap_input = lambda segment: {"obs": np.zeros((1, 2), np.float32)}
    assert plain.bootstrap_inputs_if_same(rows, np.array([0]), np.array([2])) is None


def test_postprocess_trajectory_patched_onto_the_class_is_called_for_each_segment(monkeypatch):
    """The one pass stands for `PPOPolicy`'s own postprocess_trajectory only: one patched onto the class (as a
    subclass's override) is called for every segment of the batch."""
    calls: list[int] = []
    own = PPOPolicy.postprocess_trajectory

    def counted(self, sample_batch, other_agent_batches=None, episode=None):
        calls.append(len(sample_batch))
        return own(self, sample_batch, other_agent_batches, episode)

    monkeypatch.setattr(PPOPolicy, "postprocess_trajectory", counted)
    w, _ = _cartpole_worker("mlp", num_envs=3, fragment=20)
    w.sample()  # (the first also postprocesses the view-pruning pass's dummy batch)
    calls.clear()
    b = w.sample()
    assert sum(calls) == len(b) == 60 and len(calls) == len(b.split_by_episode())


def test_episodes_seen_after_a_one_pass_sample_are_current_at_every_segment(monkeypatch):
    """A sample postprocessed in one pass sets no episode's last values (nothing reads them there); when a later
    sample goes segment by segment (a `postprocess_trajectory` patched in between), each segment's episode has the
    length, last action, reward and observation of the segment's last row, for episodes running across both."""
    w, policy = _cartpole_worker("mlp", num_envs=3, fragment=7)
    for _ in range(3):
        w.sample()  # (in one pass)
    seen = []
    own = PPOPolicy.postprocess_trajectory

    def recording(self, sample_batch, other_agent_batches=None, episode=None):
        if episode is not None:
            b = sample_batch
            seen.append((int(b["t"][-1]) + 1 == episode.length, int(b["actions"][-1]) == int(episode.last_action_for()),
                         float(b["rewards"][-1]) == episode.last_reward_for(),
                         np.array_equal(b["new_obs"][-1], episode.last_observation_for()), int(b["t"][0]) > 0))
        return own(self, sample_batch, other_agent_batches, episode)

    monkeypatch.setattr(PPOPolicy, "postprocess_trajectory", recording)
    for _ in range(3):
        w.sample()
    assert len(seen) >= 9 and all(all(s[:4]) for s in seen), seen
    assert any(s[4] for s in seen)  # (episodes that began before the patch, in a sample postprocessed in one pass)


def _gtrxl_next_inputs_reference(model, segment):
    """The GTrXL's next-step inputs of one segment, by the textbook reading: the last row's features, t + 1, and
    each layer's memory as the last M rows of (the M rows before the segment, the segment's state_out rows)."""
    last = {"obs": np.asarray(segment["new_obs"])[-1:]}
    if model.features.prev_action:
        last["prev_actions"] = np.asarray(segment["actions"])[-1:]
    if model.features.prev_reward:
        last["prev_rewards"] = np.asarray(segment["rewards"])[-1:]
    last["t"] = np.asarray(segment["t"])[-1:] + 1
    for i in range(2 * model.num_layers):
        first = np.asarray(segment[f"state_in_{i}"])[0]
        rows = np.asarray(segment[f"state_out_{i}"])
        last[f"state_in_{i}"] = np.concatenate([first, rows])[-model.memory:][None]
    return last


@pytest.mark.parametrize("fragment", [1, 3, 12])
def test_the_gtrxls_next_step_inputs_of_a_batchs_segments_are_each_segments_own(fragment):
    """`GTrXLModel.bootstrap_inputs` over a flat batch's segments (segments shorter and longer than the memory):
    row k is segment k's inputs by the textbook reading, bit for bit."""
    w, policy = _cartpole_worker("attention", num_envs=3, fragment=fragment, **BOOTSTRAP_MODELS["attention"])
    model = policy.model
    for _ in range(3):
        batch = w.sample()
        segments = batch.split_by_episode()
        lengths = np.array([len(s) for s in segments])
        ends = np.cumsum(lengths)
        got = model.bootstrap_inputs(batch, ends - lengths, ends)
        for k, seg in enumerate(segments):
            ref = _gtrxl_next_inputs_reference(model, seg)
            assert set(got) == set(ref)
            for key, value in ref.items():
                np.testing.assert_array_equal(got[key][k : k + 1], value, err_msg=key)
