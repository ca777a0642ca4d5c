"""The simulator and the operator decide the same for the same metric sequence.

One recorded sequence of :class:`MetricSnapshot` (a ramp up, a plateau, a metrics gap, a fall) is
fed to the operator's decision path, :func:`neuronfleet.planning.reconcile_plan.decide_targets` (the
pure function the operator's plan calls, with its :class:`DeploymentMemory`), and to the simulator's
policy, :class:`neuronfleet.sim.policies.Ours`, through a replaying :class:`MetricsView`. Both see
the same fleet counts and measured cold starts each tick; their desired active replicas, warm pods,
node placeholders and reasons must agree tick by tick.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.metrics.prometheus import queries_for
from neuronfleet.planning.observation import DeploymentMemory, StatusMemory
from neuronfleet.planning.reconcile_plan import decide_targets, warm_pool_status
from neuronfleet.planning.signals import QUERIED, MetricSnapshot
from neuronfleet.planning.status import autoscaler_status
from neuronfleet.planning.warmpool import ColdStart, WarmPoolDecision
from neuronfleet.sim.fleet import FleetCounts
from neuronfleet.sim.metrics import MetricsView
from neuronfleet.sim.policies import Observed, ours_from_policy_file

REPO = Path(__file__).resolve().parents[2]
INTERVAL = 15.0
#: Seconds from sample to decision (as the simulator's scrape delay).
DELAY = 10.0
TICKS = 140
DOWN_POLICIES = [{"type": "Percent", "value": 100, "periodSeconds": 15}]
POLICY: dict[str, Any] = {
    "scaling": {
        "mode": "Auto",
        "minReplicas": 1,
        "maxReplicas": 20,
        "targetQueueDepth": 8,
        "intervalSeconds": int(INTERVAL),
        "scaleDownDelaySeconds": 0,
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 120, "policies": DOWN_POLICIES}},
    },
    "warmPool": {"mode": "Auto", "minPods": 0, "maxPods": 6, "maxNodePlaceholders": 3, "coverage": 0.9},
}


def recorded_sequence() -> dict[float, MetricSnapshot | None]:
    """Snapshots per decision time: load rises to ~90 requests, holds, drops; a 4-tick gap."""
    rng = np.random.default_rng(7)
    sequence: dict[float, MetricSnapshot | None] = {}
    for tick in range(1, TICKS + 1):
        now = tick * INTERVAL
        level = 90 * math.sin(math.pi * min(tick, 100) / 100) ** 2
        if 60 <= tick < 64:
            sequence[now] = None  # Prometheus unreachable
            continue
        queue = max(0.0, level * 0.6 + rng.normal(0, 2))
        sequence[now] = MetricSnapshot(
            time=now - DELAY,
            queue_depth=queue,
            in_flight=min(level, 4.0 * (1 + tick // 10)),
            arrival_rate=level * 2.5,
            utilization=min(1.0, 0.15 + level / 100),
        )
    return sequence


class ReplayView(MetricsView):
    """The simulator's metrics view, answering from the same recording."""

    def __init__(self, sequence: dict[float, MetricSnapshot | None], start: float = 0.0) -> None:
        empty = np.zeros(0)
        super().__init__(1.0, empty, empty, empty, empty)
        self.sequence = sequence
        self.start = start

    def snapshot(self, now: float, delay: float, serving: int | None = None) -> MetricSnapshot:
        assert delay == DELAY
        snapshot = self.sequence[now]
        # The simulator has no "unreachable": its gap is a snapshot with every signal missing.
        return replace(snapshot, time=snapshot.time + self.start) if snapshot else MetricSnapshot(time=now - delay)


def deployment(policy: dict[str, Any] = POLICY) -> InferenceDeployment:
    manifest = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    manifest["spec"]["scaling"] = policy["scaling"]
    manifest["spec"]["warmPool"] = policy["warmPool"]
    return InferenceDeployment.model_validate(manifest)


def as_the_reader_returns(dep: InferenceDeployment, snapshot: MetricSnapshot | None) -> MetricSnapshot | None:
    """``snapshot`` as the operator's Prometheus reader returns it for ``dep``: a field whose query it
    does not ask (:func:`queries_for`: an empty query) is None."""
    asked = queries_for(dep)
    if snapshot is None:
        return None
    unasked: dict[str, Any] = {name: None for name in QUERIED if name not in asked}
    return replace(snapshot, **unasked)


def written_status(memory: DeploymentMemory, warm: WarmPoolDecision | None, active: int) -> dict[str, Any]:
    """What the operator's status holds for a successor: the sections :func:`plan_reconcile`
    writes (the autoscaler's checkpoint, rounded for reading; the warm pool last wanted), in wire form."""
    status: dict[str, Any] = {"desiredReplicas": active}
    section = autoscaler_status(memory.scaling_state.checkpoint)
    if section is not None:
        status["autoscaler"] = section.to_wire()
    if warm is not None:
        status["warmPool"] = warm_pool_status(warm.pods, warm.node_placeholders, warm.held_since, warm.reason).to_wire()
    return status


def decide_both(
    sequence: dict[float, MetricSnapshot | None],
    between: tuple[float, ...] = (),
    restart_at: tuple[int, ...] = (),
    start: float = 0.0,
    policy: dict[str, Any] = POLICY,
) -> tuple[list[tuple[int, int, int, str]], list[tuple[int, int, int, str]]]:
    """Each tick's (active, warm pods, node placeholders, reason) from the operator and the simulator.

    ``between``: seconds after each tick at which the operator reconciles again before the next
    decision is due (a pod event or the daemon's wake-up), as it does in a cluster; the simulator
    decides only at the ticks. ``restart_at``: ticks at which the operator restarts before deciding
    (a fresh memory, the status its predecessor wrote) and the simulator's policy does too
    (:meth:`Ours.restart`). ``start``: the clock at tick 0 (the sequence's times are offsets from it)."""
    dep = deployment(policy)
    memory = DeploymentMemory()
    sim_policy = ours_from_policy_file(policy, max_replicas=20, setting="parity")
    sim_policy.scrape_delay = DELAY
    view = ReplayView({start + t: snap for t, snap in sequence.items()}, start)

    active, ready_history = 1, [1, 1]
    operator_decisions, sim_decisions = [], []
    durable: StatusMemory | None = None
    warm_written: WarmPoolDecision | None = None
    for tick in range(1, TICKS + 1):
        now = start + tick * INTERVAL
        ready = min(active, ready_history[-2])  # new pods take two ticks to become ready
        if tick in restart_at:
            durable = StatusMemory.from_status(written_status(memory, warm_written, active))
            memory = DeploymentMemory()
            sim_policy.restart(now, active)
        # Cold starts measured part-way through the run change the warm-pool horizons of both.
        cold = ColdStart(pod_seconds=90.0, node_seconds=150.0) if tick >= 40 else ColdStart()
        memory = replace(memory, cold_start=cold)
        snapshot = as_the_reader_returns(dep, sequence[now - start])  # None: Prometheus unavailable
        if snapshot is not None:
            snapshot = replace(snapshot, time=snapshot.time + start)
        targets, memory = decide_targets(
            dep.spec, memory, snapshot, "Prometheus unavailable", active, ready, now, durable
        )
        scale, warm = targets.scale, targets.warm
        warm_written = warm
        sim_targets = sim_policy.decide(
            now,
            view,
            Observed(FleetCounts(ready, active, 0, 0, 0, 0, active - ready), cold.pod_seconds, cold.node_seconds),
        )
        operator_decisions.append((scale.desired, warm.pods, warm.node_placeholders, f"{scale.reason} | {warm.reason}"))
        sim_decisions.append((sim_targets.active, sim_targets.warm, sim_targets.placeholders, sim_targets.reason))
        for offset in between:
            _, memory = decide_targets(
                dep.spec, memory, snapshot, "Prometheus unavailable", scale.desired, ready, now + offset
            )
        active = scale.desired
        ready_history.append(active)
    return operator_decisions, sim_decisions


def test_operator_and_simulator_decide_alike_tick_by_tick() -> None:
    operator_decisions, sim_decisions = decide_both(recorded_sequence())
    for tick, (ours, theirs) in enumerate(zip(operator_decisions, sim_decisions, strict=True), start=1):
        assert ours == theirs, f"tick {tick}: operator {ours} != simulator {theirs}"
    # The sequence exercises every path: scale-up, hold on missing metrics, scale-down, a warm pool.
    desired = [d[0] for d in operator_decisions]
    assert max(desired) >= 8 and desired[-1] < max(desired)
    assert any("metrics missing" in d[3] for d in operator_decisions[59:63])
    assert max(d[1] for d in operator_decisions) > 0
    assert any("pod cold start 90s" in d[3] for d in operator_decisions)


def test_reconciles_between_decisions_leave_the_operator_deciding_as_the_simulator() -> None:
    """A reconcile runs on every pod event (and the daemon's tick), most of them between two of the
    autoscaler's decisions: they re-serve its decision and record no demand, so the warm pool's
    history holds one sample per decision, as the simulator's (each of those reconciles once added a
    sample: the pool then hung on how many pod events followed a burst)."""
    operator_decisions, sim_decisions = decide_both(recorded_sequence(), between=(0.5, 3.0, 7.25, 14.5))
    for tick, (ours, theirs) in enumerate(zip(operator_decisions, sim_decisions, strict=True), start=1):
        assert ours == theirs, f"tick {tick}: operator {ours} != simulator {theirs}"
    # One sample per decision (none at the 4 decisions without metrics).
    assert f"history {TICKS - 4} samples" in operator_decisions[-1][3]
    assert max(d[1] for d in operator_decisions) > 0


def test_operator_and_simulator_agree_on_the_arrival_peak() -> None:
    """A steady rate long enough to measure the service rate, then bursts within the minute."""
    sequence: dict[float, MetricSnapshot | None] = {}
    for tick in range(1, TICKS + 1):
        now = tick * INTERVAL
        peak = 150.0 * (4.0 if 50 <= tick < 70 else 1.05)
        sequence[now] = MetricSnapshot(
            time=now - DELAY, queue_depth=0.5, in_flight=4.0, arrival_rate=150.0, utilization=0.5, arrival_peak=peak
        )
    operator_decisions, sim_decisions = decide_both(sequence)
    assert operator_decisions == sim_decisions
    assert any(d[3].startswith("peak ") for d in operator_decisions)  # the busiest second led
    assert max(d[0] for d in operator_decisions[50:70]) > max(d[0] for d in operator_decisions[30:49])


def test_a_diverging_policy_is_detected() -> None:
    """The comparison is sensitive: a simulator with another scale-down window decides otherwise."""
    sequence = recorded_sequence()
    other = {
        **POLICY,
        "scaling": {
            **POLICY["scaling"],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0, "policies": DOWN_POLICIES}},
        },
    }
    a = ours_from_policy_file(POLICY, max_replicas=20, setting="a")
    b = ours_from_policy_file(other, max_replicas=20, setting="b")
    view = ReplayView(sequence)
    differ = False
    active_a = active_b = 1
    for tick in range(1, TICKS + 1):
        now = tick * INTERVAL
        ta = a.decide(now, view, Observed(FleetCounts(active_a, active_a, 0, 0, 0, 0, 0), None, None))
        tb = b.decide(now, view, Observed(FleetCounts(active_b, active_b, 0, 0, 0, 0, 0), None, None))
        differ |= ta.active != tb.active
        active_a, active_b = ta.active, tb.active
    assert differ


def test_a_restarted_operator_and_simulator_resume_alike_from_the_status() -> None:
    """Review r17 finding 4: a restarted operator resumes from its status (the autoscaler's
    checkpoint as written: whole seconds, the service rate rounded), so a simulated restart resumes
    from the same round trip, not from the exact in-memory checkpoint: their reasons differed. The
    clock is a real one (not whole-second ticks from 0), so the written times are rounded too."""
    sequence: dict[float, MetricSnapshot | None] = {}
    for tick in range(1, TICKS + 1):
        now = tick * INTERVAL
        rate = 137.3 * (1 + 0.8 * math.sin(math.pi * tick / 70) ** 2)  # a service rate to learn, then more load
        sequence[now] = MetricSnapshot(
            time=now - DELAY, queue_depth=0.5, in_flight=rate / 37.137, arrival_rate=rate, utilization=0.5
        )
    start = 1_764_000_000.37
    operator_decisions, sim_decisions = decide_both(sequence, restart_at=(45, 90, 120), start=start)
    for tick, (ours, theirs) in enumerate(zip(operator_decisions, sim_decisions, strict=True), start=1):
        assert ours == theirs, f"tick {tick}: operator {ours} != simulator {theirs}"
    # The restarts resumed from a checkpoint (sized on the service rate at once), and a pool wanted.
    assert operator_decisions[44][3].startswith("rate "), operator_decisions[44]
    assert "found at the takeover" in operator_decisions[89][3]
    assert max(d[2] for d in operator_decisions[44:]) > 0


@pytest.mark.parametrize("query", ["queueDepth", "inFlight", "arrivalRate", "utilization", "arrivalPeak"])
def test_an_empty_query_turns_its_signal_off_in_the_simulator_as_in_the_operator(query: str) -> None:
    """Review r17 finding 2: the operator's reader never asks an empty query (the signal is None),
    but the simulator's metrics compute every signal and its policy sized on the one turned off."""
    sequence: dict[float, MetricSnapshot | None] = {}
    for tick in range(1, TICKS + 1):
        now = tick * INTERVAL
        rate = 150.0 if tick < 60 else 300.0 if tick < 100 else 90.0  # a service rate to learn, then more, less
        sequence[now] = MetricSnapshot(
            time=now - DELAY,
            queue_depth=0.5 * rate / 150,
            in_flight=4.0 * rate / 150,
            arrival_rate=rate,
            utilization=min(1.0, 0.5 * rate / 150),
            arrival_peak=rate * (3.0 if 70 <= tick < 75 else 1.05),
        )
    policy = {**POLICY, "scaling": {**POLICY["scaling"], "metrics": {query: ""}}}
    operator_decisions, sim_decisions = decide_both(sequence, policy=policy)
    for tick, (ours, theirs) in enumerate(zip(operator_decisions, sim_decisions, strict=True), start=1):
        assert ours == theirs, f"tick {tick}: operator {ours} != simulator {theirs}"
    # The run moved: up with the load, and down again.
    desired = [d[0] for d in operator_decisions]
    assert max(desired) > desired[0] and desired[-1] < max(desired)
