"""What the view-pruning pass refuses in a policy's outputs: errors that name the setting, expected and got."""

from __future__ import annotations

import numpy as np
import pytest
from rollout_helpers import ObsActionPolicy, creator_from, make_envs

import trajview as tv


def worker_with(outputs):
    class P(ObsActionPolicy):
        def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
            a, _, _ = super().compute_actions_from_input_dict(input_dict, explore, timestep)
            state_outs, extra = outputs(len(a))
            return a, state_outs, extra

    return tv.RolloutWorker(creator_from(make_envs(2)), P, num_envs=2, rollout_fragment_length=3)


@pytest.mark.parametrize("name", ["new_obs", "prev_actions", "prev_rewards", "infos", "eps_id", "t", "seq_lens",
                                  "state_in_0", "dones"])
def test_extra_fetches_named_like_a_view_are_errors(name):
    w = worker_with(lambda n: ([], {name: np.zeros(n, np.float32)}))
    with pytest.raises(ValueError, match=rf"extra fetch '{name}': .*rename the fetch"):
        w.sample()


def test_an_extra_fetch_with_its_own_view_is_fine():
    class P(ObsActionPolicy):
        def __init__(self, obs_space, act_space, config=None):
            super().__init__(obs_space, act_space, config)
            self.view_requirements["vf_preds"] = tv.ViewRequirement(used_for_compute_actions=False)

        def compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs):
            a, _, _ = super().compute_actions_from_input_dict(input_dict, explore, timestep)
            return a, [], {"vf_preds": np.full(len(a), 0.5, np.float32)}

    b = tv.RolloutWorker(creator_from(make_envs(2)), P, num_envs=2, rollout_fragment_length=3).sample()
    assert (b["vf_preds"] == 0.5).all()


@pytest.mark.parametrize(
    "outputs, pattern",
    [
        (lambda n: (None, {}), r"state_outs: .*must return a list of arrays .* got NoneType"),
        (lambda n: ([], None), r"extra_fetches: .*must return a dict of arrays .* got NoneType"),
        (lambda n: ([], {"label": np.array(["a"] * n)}), r"extra fetch 'label': .*dtype <U1, which a trajectory store"),
        (lambda n: ([], {"obj": np.array([object()] * n)}), r"extra fetch 'obj': .*dtype object"),
        (lambda n: ([], {"c": np.zeros(n, np.complex64)}), r"extra fetch 'c': .*dtype complex64"),
    ],
)
def test_bad_outputs_in_the_pruning_pass(outputs, pattern):
    with pytest.raises(ValueError, match=pattern):
        worker_with(outputs).sample()
