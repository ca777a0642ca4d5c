"""ScalingActive and the warm pool's reason say what the autoscaler's latest hold is about, at once.

A decision that repeats the last in all but its figures keeps the status's message (a steady fleet
must not write its status at each decision); two holds for different reasons (a refused query, then
a timeout; metrics missing, then every query turned off) are different decisions, and a decision
re-served between intervals names the signals that were off when it was made."""

from __future__ import annotations

from test_reconcile_plan import deployment
from test_takeover import FOLLOWING, queued

from neuronfleet.api.v1alpha1 import InferenceDeploymentSpec
from neuronfleet.planning.observation import DeploymentMemory
from neuronfleet.planning.reconcile_plan import decide_targets
from neuronfleet.planning.signals import MetricSnapshot

OFF = {"metrics": dict.fromkeys(["queueDepth", "inFlight", "arrivalRate", "utilization", "arrivalPeak"], "")}
WARM = {"mode": "Auto", "minPods": 1, "maxPods": 8, "maxNodePlaceholders": 0}
T = 1_800_000_000.0


def specs() -> tuple[InferenceDeploymentSpec, InferenceDeploymentSpec]:
    off = deployment(scaling={**FOLLOWING, "maxReplicas": 20, **OFF}, warmPool=WARM).spec
    on = deployment(scaling={**FOLLOWING, "maxReplicas": 20}, warmPool=WARM).spec
    return off, on


def test_turning_every_signal_off_during_an_outage_is_said_by_scaling_active() -> None:
    off, on = specs()
    m = DeploymentMemory()
    for dt in (0, 15, 30):  # Prometheus unreachable: the autoscaler holds
        t, m = decide_targets(on, m, None, "no metrics source configured", 2, 2, T + dt)
    # The SRE empties every query; the next decisions (45 s on):
    t, m = decide_targets(off, m, None, "no metrics source configured", 2, 2, T + 45)
    assert "no signal measures" in t.warm.reason
    # ScalingActive must say what the decision says (scale.reason: "no signal to scale on ...").
    assert "no signal to scale on" in t.message, t.message


def test_restoring_the_queries_during_an_outage_is_said_by_scaling_active() -> None:
    off, on = specs()
    m = DeploymentMemory()
    for dt in (0, 15, 30):
        t, m = decide_targets(off, m, MetricSnapshot(T + dt), "", 2, 2, T + dt)
    # Queries back, Prometheus down at the next decision:
    t, m = decide_targets(on, m, None, "no metrics source configured", 2, 2, T + 45)
    assert "metrics missing" in t.warm.reason and "metrics missing" in t.scale.reason
    assert "turned off" not in t.message, t.message


def test_a_decision_re_served_after_the_queries_are_restored_names_no_empty_list() -> None:
    off, on = specs()
    t, m = decide_targets(off, DeploymentMemory(), MetricSnapshot(T), "", 2, 2, T)
    t, m = decide_targets(on, m, queued(T + 5, 2, 0.4), "", 2, 2, T + 5)  # between decisions
    assert "( turned off)" not in t.warm.reason, t.warm.reason


def test_a_new_metrics_problem_is_said_at_once() -> None:
    _, on = specs()
    m = DeploymentMemory()
    refused = "spec.scaling.metrics.queueDepth: Prometheus refused the query: parse error"
    t, m = decide_targets(on, m, None, refused, 2, 2, T)
    # The SRE fixes the query; now Prometheus times out:
    t, m = decide_targets(on, m, None, "no answer within the snapshot's 5 s", 2, 2, T + 15)
    assert "no answer within" in t.message, t.message
