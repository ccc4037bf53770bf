"""`WorkerSet(backend="ray")` on a Ray cluster of several nodes, simulated on this machine
(`ray.cluster_utils.Cluster`): workers spread over the nodes, batches and weights crossing nodes, and a
node removed mid-run (its worker replaced on a node left, or a `WorkerError` naming it)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray
cluster_utils = pytest.importorskip("ray.cluster_utils")

import rollout_helpers  # noqa: E402
import trajview as tv  # noqa: E402
from rollout_helpers import ScriptedEnv  # noqa: E402


class NodePolicy(rollout_helpers.CounterPolicy):
    """CounterPolicy whose weights also say which Ray node the worker runs on."""

    def get_weights(self):
        node = ray.get_runtime_context().get_node_id()
        return {"count": np.array([self.count], np.int64), "node": np.frombuffer(node.encode(), np.uint8).copy()}

    def set_weights(self, weights):
        self.count = int(weights["count"][0])


def node_of(weights) -> str:
    return bytes(weights["default_policy"]["node"]).decode()


@pytest.fixture(scope="module")
def cluster():
    c = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    c.add_node(num_cpus=2)
    c.wait_for_nodes()
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.cloudpickle.register_pickle_by_value(rollout_helpers)
    yield c
    ray.shutdown()
    c.shutdown()


def test_workers_on_two_nodes_and_a_node_removed_mid_run(cluster):
    counter = iter(range(1000))
    with tv.WorkerSet(lambda cfg: ScriptedEnv((4, 6), env_index=next(counter)), NodePolicy, num_workers=2,
                      backend="ray", ray_options={"num_cpus": 1, "scheduling_strategy": "SPREAD"}, num_envs=2,
                      rollout_fragment_length=5, recreate_failed_workers=True) as ws:
        nodes = [node_of(w) for w in ws.get_weights()]
        assert len(set(nodes)) == 2  # one worker per node
        head = ray.get_runtime_context().get_node_id()
        ws.set_weights({"count": np.array([3], np.int64)})  # weights cross to both nodes
        each = ws.sample_each()
        for worker, b in enumerate(each, start=1):
            assert len(b) == 10 and (b["actions"] == 3).all()  # batches cross back, sampled with those weights
            assert (np.asarray(b["eps_id"]) >> 40 == worker).all()
        # Remove the node that is not the head (the driver's): its worker dies with it and is replaced.
        other = next(n for n in cluster.list_all_nodes() if n.node_id != head)
        lost = nodes.index(other.node_id) + 1
        cluster.remove_node(other)
        b = ws.sample()
        assert len(b) >= 10  # the healthy worker's batch at least; the lost one was replaced
        assert ws.num_worker_restarts == 1
        nodes_after = [node_of(w) for w in ws.get_weights()]
        assert nodes_after[lost - 1] == head  # the replacement runs on the node left
        each = ws.sample_each()
        assert all(len(x) == 10 and (x["actions"] == 3).all() for x in each)  # it got the last weights
