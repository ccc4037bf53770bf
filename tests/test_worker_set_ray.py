"""`tv.WorkerSet(backend="ray")`: rollout workers as Ray actors.

Ray is optional (``pip install ray``); without it this module is skipped. The
process backend (test_worker_set.py) covers the same protocol everywhere.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import rollout_helpers  # noqa: E402
import trajview as tv  # noqa: E402
from rollout_helpers import (  # noqa: E402
    FailingEnv,
    ObsActionPolicy,
    ScriptedEnv,
    assert_failure_reported_then_stopped,
    expected_action,
)


@pytest.fixture(scope="module")
def ray_session():
    # The actors unpickle this module's and rollout_helpers' classes by value: their files are not on the
    # workers' import path.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.cloudpickle.register_pickle_by_value(rollout_helpers)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_workers_sample_sync_and_report_errors(ray_session):
    counter = iter(range(1000))
    with tv.WorkerSet(lambda cfg: ScriptedEnv((4, 6), env_index=next(counter)), ObsActionPolicy,
                      num_workers=2, backend="ray", num_envs=2, rollout_fragment_length=5) as ws:
        each = ws.sample_each()
        for worker, b in enumerate(each, start=1):
            assert len(b) == 10
            assert (np.asarray(b["eps_id"]) >> 40 == worker).all()
            uid, t = b["obs"][:, 0].astype(int), b["obs"][:, 1].astype(int)
            np.testing.assert_array_equal(b["actions"], [expected_action(u, s) for u, s in zip(uid, t)])
        assert len(ws.sample()) == 20
        assert ws.get_weights() == [{"default_policy": {}}, {"default_policy": {}}]
        ws.set_weights({})
    assert_failure_reported_then_stopped(
        tv.WorkerSet(lambda cfg: FailingEnv(), ObsActionPolicy, num_workers=2, backend="ray",
                     rollout_fragment_length=5)
    )
    with pytest.raises(RuntimeError, match=r"rollout worker 1 failed:(.|\n)*rollout_fragment_length"):
        tv.WorkerSet(lambda cfg: ScriptedEnv(), ObsActionPolicy, num_workers=1, backend="ray",
                     rollout_fragment_length=0)
