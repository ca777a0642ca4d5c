"""A parked model (``scaling.mode`` Manual, replicas 0) keeps no Auto warm pool, in the operator and
the simulator alike; a Fixed pool keeps the pods its spec asks for.

Reviewer's finding: the CRD's refusal of ``minReplicas`` 0 in Auto mode recommends Manual replicas 0
to park a model, but an Auto pool kept its ``minPods`` warm pods (each on an Inf2 node) beside the
zero active replicas, and a takeover held the pool it found.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from neuronfleet.api.v1alpha1 import InferenceDeploymentSpec
from neuronfleet.planning import warmpool
from neuronfleet.planning.fit import pod_counts
from neuronfleet.planning.observation import DeploymentMemory, StatusMemory
from neuronfleet.planning.reconcile_plan import decide_targets
from neuronfleet.planning.signals import MetricSnapshot
from neuronfleet.sim.fleet import FleetCounts
from neuronfleet.sim.metrics import MetricsView
from neuronfleet.sim.policies import Observed, ours_from_policy_file

NOW = 1_800_000_000.0
AUTO_POOL = {"mode": "Auto", "minPods": 1, "maxPods": 2, "maxNodePlaceholders": 1}


def spec(scaling: dict[str, Any], warm_pool: dict[str, Any]) -> InferenceDeploymentSpec:
    return InferenceDeploymentSpec.model_validate(
        {"model": {"source": "s3://models/bert"}, "scaling": scaling, "warmPool": warm_pool}
    )


PARKED = {"mode": "Manual", "replicas": 0, "minReplicas": 0, "maxReplicas": 4}


@pytest.mark.parametrize("takeover", [False, True])
def test_a_parked_model_keeps_no_auto_warm_pool(takeover: bool) -> None:
    dep = spec(PARKED, AUTO_POOL)
    # A takeover finds the pool a predecessor wanted (2 warm pods, 1 placeholder): not held either.
    durable = StatusMemory(warm_pods=2, warm_placeholders=1) if takeover else None
    targets, _ = decide_targets(dep, DeploymentMemory(), None, "", 0, 0, NOW, durable)
    assert targets.scale.desired == 0
    assert (targets.warm.pods, targets.warm.node_placeholders) == (0, 0), targets.warm.reason
    assert targets.warm_reason.startswith("parked: Manual replicas 0"), targets.warm_reason


def test_the_simulator_parks_as_the_operator() -> None:
    ours = ours_from_policy_file({"scaling": PARKED, "warmPool": AUTO_POOL}, max_replicas=4, setting="parked")
    observed = Observed(FleetCounts(0, 0, 0, 0, 0, 0, 0), None, None)
    wanted = ours.decide(NOW, cast(MetricsView, _NoMetrics()), observed)  # only snapshot() is read
    assert (wanted.active, wanted.warm, wanted.placeholders) == (0, 0, 0), wanted.reason
    assert "parked: Manual replicas 0" in wanted.reason


class _NoMetrics:
    """Manual mode reads no metrics; the policy asks for a snapshot all the same."""

    def snapshot(self, now: float, delay: float, serving: int | None = None) -> MetricSnapshot:
        return MetricSnapshot(time=now - delay)


def test_manual_replicas_and_fixed_pools_keep_their_pools() -> None:
    # Manual with replicas: the Auto pool keeps minPods (only the demand goes unmeasured).
    serving = spec({**PARKED, "replicas": 2}, AUTO_POOL)
    targets, _ = decide_targets(serving, DeploymentMemory(), None, "", 2, 2, NOW)
    assert targets.warm.pods == 1
    # A Fixed pool is what the user asked for explicitly: kept, parked or not.
    fixed = spec(PARKED, {"mode": "Fixed", "pods": 1, "nodePlaceholders": 1})
    targets, _ = decide_targets(fixed, DeploymentMemory(), None, "", 0, 0, NOW)
    assert (targets.warm.pods, targets.warm.node_placeholders) == (1, 1)


def test_validate_plans_no_standby_beside_a_parked_fleet() -> None:
    # neuronfleet validate plans every pod count the operator places: parked, the Auto pool's
    # minPods is not one of them (0 active + 0 standby, planned as 1).
    dep = spec({**PARKED, "maxReplicas": 1}, {**AUTO_POOL, "minPods": 2, "maxPods": 2})
    assert pod_counts(dep) == [1, 3]
    assert warmpool.standby_range(dep.warm_pool, 0, 1, parked=True) == (0, 0)
