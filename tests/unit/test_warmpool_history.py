"""The Auto warm pool's demand history on the operator's path (reconcile_plan.decide_targets).

It was sampled at every reconcile, not at every scaling decision (a reviewer's script showed it):
a reconcile runs on every pod event, and a scale-up's pod events (created, bound, started, ready,
relabelled) flooded the history with samples right after the burst, pulling the quantile down.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from neuronfleet.api.v1alpha1 import InferenceDeploymentSpec
from neuronfleet.planning.observation import DeploymentMemory
from neuronfleet.planning.reconcile_plan import Targets, decide_targets
from neuronfleet.planning.signals import MetricSnapshot

T0 = 1_800_000_000.0
INTERVAL = 15.0


def spec(max_replicas: int, max_pods: int, **scaling: Any) -> InferenceDeploymentSpec:
    """Queue-driven scaling that follows the demand both ways at once (no panic, no hold), so the
    active fleet holds no headroom above the demand and the pool is the history's figure."""
    return InferenceDeploymentSpec.model_validate(
        {
            "model": {"source": "s3://models/bert"},
            "scaling": {
                "minReplicas": 1,
                "maxReplicas": max_replicas,
                "targetQueueDepth": 10,
                "panicWindowSeconds": 0,
                "scaleDownDelaySeconds": 0,
                "behavior": {
                    "scaleDown": {
                        "stabilizationWindowSeconds": 0,
                        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
                    }
                },
                **scaling,
            },
            "warmPool": {"mode": "Auto", "maxPods": max_pods},
        }
    )


def demanding(replicas: int, now: float) -> MetricSnapshot:
    """A snapshot whose queued plus in-flight requests ask for ``replicas`` at targetQueueDepth 10
    (the busy ratio low enough not to ask for more)."""
    return MetricSnapshot(now, queue_depth=5.0 * replicas, in_flight=5.0 * replicas, utilization=0.1)


def run(
    dep: InferenceDeploymentSpec,
    demand: Callable[[float], int | None],
    times: Iterable[float],
    memory: DeploymentMemory | None = None,
    start: int = 1,
) -> tuple[Targets, DeploymentMemory]:
    """The operator's targets at each of ``times`` (seconds after T0), the fleet following them
    from ``start`` active replicas; ``demand`` None: Prometheus unreachable."""
    memory = memory or DeploymentMemory()
    targets = None
    # The current scale, as the operator's status holds it: the last desired count.
    current = memory.last_decision.desired if memory.last_decision is not None else start
    for t in times:
        wanted = demand(t)
        snapshot = None if wanted is None else demanding(wanted, T0 + t)
        targets, memory = decide_targets(dep, memory, snapshot, "connection refused", current, current, T0 + t)
        current = targets.scale.desired
    assert targets is not None
    return targets, memory


def test_reconciles_between_decisions_record_no_demand() -> None:
    dep = spec(max_replicas=40, max_pods=20)
    decisions = [INTERVAL * i for i in range(4)]
    # 40 reconciles woken by pod events within the next 10 s: no decision is due.
    reconciles = [45 + 0.25 * j for j in range(40)]
    targets, memory = run(dep, lambda t: 10, decisions, start=10)
    assert len(memory.warm_state.history) == 4
    held, memory = run(dep, lambda t: 10, reconciles, memory)
    assert held.scale is targets.scale  # the decision re-served
    assert len(memory.warm_state.history) == 4
    assert "history 4 samples over 45s" in held.warm.reason


def test_a_bursts_pod_events_leave_the_pool_as_sampled_per_decision() -> None:
    # An hour of 40 replicas with one step to 60 for 5 minutes: within the 270 s pod horizon the
    # demand grew by 20 from the starts of the 18 windows before the step (7.5 % of them): p95 20.
    dep = spec(max_replicas=100, max_pods=30)

    def demand(t: float) -> int:
        return 60 if 2400 <= t < 2700 else 40

    decisions = [INTERVAL * k for k in range(int(3600 / INTERVAL))]
    per_decision, _ = run(dep, demand, decisions, start=40)
    # The step's pod events between the decisions: 20 new pods x ~7 (added, bound, scheduled,
    # creating, running, ready, relabelled) over the 300 s cold start, 20 drained pods x ~4
    # (relabelled, annotated, deleting, deleted) over 150 s.
    events = [2400 + 300 * k / 140 for k in range(1, 141)] + [2700 + 150 * k / 80 for k in range(1, 81)]
    times = sorted(set(decisions) | {t for t in events if t % INTERVAL})
    per_reconcile, memory = run(dep, demand, times, start=40)
    assert per_decision.warm.pods == 20
    assert (per_reconcile.warm.pods, per_reconcile.warm.node_placeholders) == (
        per_decision.warm.pods,
        per_decision.warm.node_placeholders,
    )
    assert per_reconcile.warm.reason == per_decision.warm.reason
    assert len(memory.warm_state.history) == len(decisions)
