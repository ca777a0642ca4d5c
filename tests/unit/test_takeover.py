"""An operator that takes a deployment over (a new leader, a restart, a rolling upgrade) decides as the
one before it would have: the autoscaler holds the fleet it finds through the scale-down window
(with or without a checkpoint in the status), and the Auto warm pool holds the pool the status
wants until it has a demand history of its own."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from test_reconcile_plan import T0, deployment

from neuronfleet.api.v1alpha1 import InferenceDeployment, ScalingSpec, WarmPoolSpec
from neuronfleet.planning import hold, scaling, warmpool
from neuronfleet.planning.compile import CompileObservation, StoredArtifact, compile_request
from neuronfleet.planning.fleet import DeletePod, FleetPolicy, PodView, apply_actions
from neuronfleet.planning.observation import DeploymentMemory, Observation, StatusMemory
from neuronfleet.planning.reconcile_plan import ReconcilePlan, decide_targets, plan_reconcile
from neuronfleet.planning.signals import MetricSnapshot
from neuronfleet.planning.times import rfc3339
from neuronfleet.sim.policies import DEFAULT_OURS, ours_from_policy_file


def queued(now: float, replicas_worth: float, utilization: float) -> MetricSnapshot:
    """Signals of a fleet whose service rate is not measured (no arrival rate): queued plus
    in-flight requests worth ``replicas_worth`` replicas at the default target queue depth of 8."""
    load = 8 * replicas_worth
    return MetricSnapshot(time=now, queue_depth=load * 0.8, in_flight=load * 0.2, utilization=utilization)


# ------------------------------------------------------------------------------------ autoscaler

AUTO = {
    "mode": "Auto",
    "minReplicas": 1,
    "maxReplicas": 10,
    "intervalSeconds": 15,
    "panicWindowSeconds": 0,
    "scaleDownDelayMode": "Fixed",
    "scaleDownDelaySeconds": 300,
}
#: A fleet that follows the demand down at once: no scale-down window.
FOLLOWING = {
    **AUTO,
    "scaleDownDelaySeconds": 0,
    "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
}


def test_a_new_leader_without_a_checkpoint_holds_the_fleet_through_the_scale_down_window() -> None:
    dep = deployment(scaling=AUTO, warmPool={"mode": "Off"})
    # The old leader: busy for a minute, so it grows the fleet; then the load drops and it holds.
    memory, current = DeploymentMemory(), 1
    for second in range(0, 61, 15):
        targets, memory = decide_targets(dep.spec, memory, queued(second, 40, 0.9), "", current, current, float(second))
        current = targets.scale.desired
    assert current >= 8
    targets, memory = decide_targets(dep.spec, memory, queued(75, 0, 0.05), "", current, current, 75.0)
    assert targets.scale.desired == current and memory.scaling_state.checkpoint is None  # no rate learned
    stayed, _ = decide_targets(dep.spec, memory, queued(90, 0, 0.05), "", current, current, 90.0)
    assert stayed.scale.desired == current

    # A new leader at 90 s: empty memory, and a status with no autoscaler section.
    durable = StatusMemory.from_status({"desiredReplicas": current})
    fresh, taken = decide_targets(
        dep.spec, DeploymentMemory(), queued(90, 0, 0.05), "", current, current, 90.0, durable
    )
    assert fresh.scale.desired == stayed.scale.desired, fresh.scale.reason
    assert "(fleet found at the takeover, held 300 s)" in fresh.scale.reason

    # Held for the window from the takeover, then released as the old leader's would have been.
    t, desired = 90.0, fresh.scale.desired
    while desired == current:
        t += 15
        later, taken = decide_targets(dep.spec, taken, queued(t, 0, 0.05), "", desired, desired, t, durable)
        desired = later.scale.desired
    assert t == 90 + 300 and desired < current


def test_the_fleet_found_goes_a_scale_down_window_after_the_takeover_though_a_longer_window_keeps_history() -> None:
    # Recommendations are kept for the longest window (here the scale-up one, 600 s), but the fleet
    # found holds only through the scale-down window (300 s): released exactly 300 s after the
    # takeover, as a recommendation made then would be.
    spec = {**AUTO, "behavior": {"scaleUp": {"stabilizationWindowSeconds": 600}}}
    dep = deployment(scaling=spec, warmPool={"mode": "Off"})
    durable = StatusMemory.from_status({"desiredReplicas": 8})
    t = 90.0
    targets, memory = decide_targets(dep.spec, DeploymentMemory(), queued(t, 0, 0.05), "", 8, 8, t, durable)
    while targets.scale.desired == 8:
        t += 15
        targets, memory = decide_targets(dep.spec, memory, queued(t, 0, 0.05), "", 8, 8, t, durable)
    assert t == 90 + 300, targets.scale.reason


def test_a_taken_over_fleet_still_grows_at_the_first_decision() -> None:
    """The fleet found holds a scale-down, not a scale-up: nobody recommended that size at the
    takeover. (A resumed autoscaler used to hold its first scale-up for one interval.)"""
    s = ScalingSpec.model_validate({"minReplicas": 1, "maxReplicas": 100, "panicWindowSeconds": 0})
    checkpoint = scaling.Checkpoint(0.0, 100.0, None, None, hold.History())
    busier = MetricSnapshot(time=100, queue_depth=0, in_flight=4, arrival_rate=2000, utilization=0.9)
    for state in (scaling.take_over(checkpoint, 100.0, 5, 0.8), scaling.take_over(None, 100.0, 5, 0.8)):
        decision = scaling.decide(s, state, busier, 5, 5, 100.0)
        assert decision.desired > 5, decision.reason


def test_the_fleet_found_is_not_held_when_the_window_is_zero() -> None:
    s = ScalingSpec.model_validate(FOLLOWING)
    decision = scaling.decide(
        s, scaling.take_over(None, 100.0, 8, s.target_utilization), queued(100, 1, 0.1), 8, 8, 100.0
    )
    assert decision.desired < 8, decision.reason


# ------------------------------------------------------------------------------------- warm pool


def swinging(t: float) -> int:
    """Demand swinging between 2 and 10 replicas every 2 minutes."""
    return 10 if int(t // 120) % 2 else 2


def test_a_new_leader_keeps_the_auto_warm_pool_it_finds() -> None:
    spec = WarmPoolSpec.model_validate({"mode": "Auto", "minPods": 0, "maxPods": 8})
    state, t = warmpool.WarmPoolState(), 0.0
    while t < 1200:  # the old leader's 20 minutes
        state = warmpool.plan(spec, state, swinging(t), t, active=swinging(t), max_active=20).new_state
        t += 15
    stayed = warmpool.plan(spec, state, 2, t, active=2, max_active=20)
    assert stayed.pods == 8

    fresh = warmpool.plan(spec, warmpool.take_over(t, stayed.pods, 1), 2, t, active=2, max_active=20)
    assert (fresh.pods, fresh.node_placeholders) == (8, 1)
    assert "the 8 warm pods and 1 placeholders found at the takeover" in fresh.reason


def test_the_pool_found_is_held_until_the_history_is_as_long_as_the_one_lost() -> None:
    spec = WarmPoolSpec.model_validate({"mode": "Auto", "minPods": 1, "maxPods": 8})
    state, t, pods = warmpool.take_over(0.0, 6, 2), 0.0, []
    while t <= warmpool.HISTORY_SECONDS:
        decision = warmpool.plan(spec, state, 2, t, active=2, max_active=20)
        state, t = decision.new_state, t + 15
        pods.append(decision.pods)
    # A flat demand needs minPods only, once the history is an hour long; until then, the pool found.
    assert set(pods[:-1]) == {6} and pods[-1] == 1
    assert state.found is None


def test_takeovers_in_a_row_hold_the_pool_found_one_history_length_after_the_first() -> None:
    """Takeovers every 50 minutes at a flat demand: each finds the pool its predecessor held, which
    must not start the hold again (it would never end: 6 warm pods for good)."""
    spec = WarmPoolSpec.model_validate({"mode": "Auto", "minPods": 1, "maxPods": 8})
    t, state, wanted = 0.0, warmpool.take_over(0.0, 6, 0), []
    for _ in range(6):
        end = t + 50 * 60
        while t < end:
            decision = warmpool.plan(spec, state, 2, t, active=2, max_active=20)
            state, t = decision.new_state, t + 15
        wanted.append((decision.pods, decision.held_since))
        state = warmpool.take_over(t, decision.pods, decision.node_placeholders, decision.held_since)
    assert wanted == [(6, 0.0)] + [(1, None)] * 5


def test_a_pool_the_history_alone_wants_is_not_marked_held() -> None:
    """What the history alone sizes is the predecessor's own evidence: the next takeover holds it anew."""
    spec = WarmPoolSpec.model_validate({"mode": "Auto", "minPods": 0, "maxPods": 8})
    state, t = warmpool.take_over(0.0, 2, 0), 0.0
    while t < 1200:
        decision = warmpool.plan(spec, state, swinging(t), t, active=swinging(t), max_active=20)
        state, t = decision.new_state, t + 15
    assert decision.pods == 8 and decision.held_since is None  # the swings want 8, more than the 2 found
    found = warmpool.take_over(t, 8, 0, decision.held_since).found
    assert found is not None and found.since == t
    # A heldSince ahead of the clock (skew) starts no later than now.
    later = warmpool.take_over(t, 8, 0, t + 600).found
    assert later is not None and later.since == t


def test_the_pool_found_obeys_the_bounds_of_today() -> None:
    spec = WarmPoolSpec.model_validate({"mode": "Auto", "minPods": 0, "maxPods": 3, "maxNodePlaceholders": 1})
    decision = warmpool.plan(spec, warmpool.take_over(0.0, 8, 4), 2, 0.0, active=2, max_active=20)
    assert (decision.pods, decision.node_placeholders) == (3, 1)
    # No more standby than maxReplicas lets promote.
    decision = warmpool.plan(spec, warmpool.take_over(0.0, 8, 4), 18, 0.0, active=18, max_active=20)
    assert (decision.pods, decision.node_placeholders) == (2, 0)
    # Headroom the active fleet holds now counts against the increases found, as against any.
    decision = warmpool.plan(spec, warmpool.take_over(0.0, 8, 4), 2, 0.0, active=9, max_active=20)
    assert (decision.pods, decision.node_placeholders) == (1, 1)
    # Fixed and Off are what the spec says.
    fixed = WarmPoolSpec.model_validate({"mode": "Fixed", "pods": 1, "nodePlaceholders": 0})
    decision = warmpool.plan(fixed, warmpool.take_over(0.0, 8, 4), 2, 0.0)
    assert decision.pods == 1 and decision.new_state.found is None  # not carried into a later Auto
    assert warmpool.take_over(0.0, None, 0).found is None


def test_the_status_section_of_the_pool_is_read_tolerantly() -> None:
    memory = StatusMemory.from_status({"warmPool": {"desiredPods": 4, "desiredPlaceholders": 1}})
    assert (memory.warm_pods, memory.warm_placeholders, memory.warm_held_since) == (4, 1, None)
    for section in ("garbage", {"desiredPods": -1, "desiredPlaceholders": "two", "heldSince": "noon"}, None):
        memory = StatusMemory.from_status({"warmPool": section})
        assert (memory.warm_pods, memory.warm_placeholders, memory.warm_held_since) == (None, None, None)
    for written in ("2026-11-30T12:00:00Z", "2026-11-30T12:00:00"):  # without a zone: UTC
        memory = StatusMemory.from_status({"warmPool": {"desiredPods": 4, "heldSince": written}})
        assert memory.warm_held_since == T0.timestamp()


# ------------------------------------------------------------------------------ the operator's plan


def plan_at(
    dep: InferenceDeployment, second: float, pods: tuple[PodView, ...], memory: DeploymentMemory, status: dict[str, Any]
) -> ReconcilePlan:
    request = compile_request(dep.spec, "/store", "fp")
    stored = StoredArtifact("c" * 64, "/store/cccc", "d" * 64, "cpu")
    now = T0 + timedelta(seconds=second)
    ready = sum(1 for p in pods if p.role == "active" and p.ready) or 1
    metrics = queued(now.timestamp(), swinging(second), min(1.0, 0.8 * swinging(second) / ready))
    observation = Observation(now, pods=pods, compile=CompileObservation(request, stored), metrics=metrics)
    return plan_reconcile(dep, observation, memory, StatusMemory.from_status(status), FleetPolicy(), lambda c: "t" * 10)


def serving(pods: list[PodView], now: datetime) -> tuple[PodView, ...]:
    return tuple(replace(p, ready=True, phase="Running", ready_at=p.ready_at or now, node="node-1") for p in pods)


@pytest.mark.parametrize("scaling_spec", [AUTO, FOLLOWING], ids=["scale-down window", "no window"])
def test_a_restarted_operator_plans_what_the_old_one_would_have(scaling_spec: dict[str, Any]) -> None:
    """The whole plan, from the status and pods alone, with no checkpoint (no arrival rate: the
    service rate is never learned), right after the demand fell: the new leader's first plan is the
    old leader's. With a scale-down window the active fleet holds (and its headroom covers the
    growth: no warm pod); without one the warm pool covers it."""
    dep = deployment(
        scaling={**scaling_spec, "maxReplicas": 20},
        warmPool={"mode": "Auto", "minPods": 0, "maxPods": 8, "maxNodePlaceholders": 0},
    )
    status: dict[str, Any]
    pods: tuple[PodView, ...]
    memory, status, pods = DeploymentMemory(), {}, ()
    second = 0
    while second < 1200 or swinging(second) == 10:  # 20 minutes, until the demand is low again
        result = plan_at(dep, second, pods, memory, status)
        memory, status = result.memory, result.status
        now = T0 + timedelta(seconds=second)
        pods = serving(apply_actions(list(pods), result.actions, now), now)
        second += 15
    assert "autoscaler" not in status
    stayed = plan_at(dep, second, pods, memory, status)
    restarted = plan_at(dep, second, pods, DeploymentMemory(), status)
    assert restarted.status["desiredReplicas"] == stayed.status["desiredReplicas"]
    assert restarted.status["warmPool"]["desiredPods"] == stayed.status["warmPool"]["desiredPods"]
    assert restarted.actions == stayed.actions
    if scaling_spec is AUTO:
        assert stayed.status["desiredReplicas"] == status["desiredReplicas"] >= 8
    else:
        assert stayed.status["warmPool"]["desiredPods"] >= 4
        warm = {pod.name for pod in pods if pod.role == "warm"}
        assert len(warm) >= 4 and not [a for a in restarted.actions if isinstance(a, DeletePod) and a.name in warm]


def _found_pool_of_6() -> tuple[Any, CompileObservation, dict[str, Any]]:
    """An Auto pool (1-8 pods) following a demand of 2, its compile stored, and the status an earlier
    operator left: 6 warm pods wanted (the pool a takeover finds)."""
    dep = deployment(
        scaling={**FOLLOWING, "maxReplicas": 20},
        warmPool={"mode": "Auto", "minPods": 1, "maxPods": 8, "maxNodePlaceholders": 0},
    )
    request = compile_request(dep.spec, "/store", "fp")
    compiled = CompileObservation(request, StoredArtifact("c" * 64, "/store/cccc", "d" * 64, "cpu"))
    return dep, compiled, {"desiredReplicas": 2, "warmPool": {"desiredPods": 6, "desiredPlaceholders": 0}}


def test_takeovers_in_a_row_release_the_pool_found_one_hour_after_the_first() -> None:
    """The whole plan at a flat demand of 2, the status's pool 6 warm pods, and a takeover every 50
    minutes (a crash-looping operator, rolling upgrades): only the status and the pods carry over.
    The pool falls to minPods an hour after the first takeover, not never."""
    dep, compiled, status = _found_pool_of_6()
    pods: tuple[PodView, ...] = ()
    wanted, held = [], []
    for takeover in range(4):
        memory = DeploymentMemory()
        for second in range(takeover * 50 * 60, (takeover + 1) * 50 * 60, 60):
            now = T0 + timedelta(seconds=second)
            ready = sum(1 for p in pods if p.role == "active" and p.ready) or 1
            observation = Observation(
                now,
                pods=pods,
                compile=compiled,
                metrics=queued(now.timestamp(), 2, min(1.0, 1.6 / ready)),
            )
            result = plan_reconcile(
                dep, observation, memory, StatusMemory.from_status(status), FleetPolicy(), lambda c: "t" * 10
            )
            memory, status = result.memory, result.status
            pods = serving(apply_actions(list(pods), result.actions, now), now)
        wanted.append(status["warmPool"]["desiredPods"])
        held.append(status["warmPool"].get("heldSince"))
    assert wanted == [6, 1, 1, 1], status["warmPool"]
    # The hold's start is written while it holds, and the status says nothing once it has ended.
    assert held == ["2026-11-30T12:00:00Z", None, None, None]


def test_a_steady_fleet_after_a_takeover_writes_its_status_only_at_decisions() -> None:
    """A pool found at a takeover is held for an hour; its reason said how long the hold had left
    ("for 3590s more"), so every reconcile (the daemon's tick, each pod event) planned another status
    and wrote it, for the hour after every restart. It says when the hold ends, which no round moves."""
    dep, compiled, status = _found_pool_of_6()
    pods: tuple[PodView, ...]
    memory, pods = DeploymentMemory(), ()
    writes: list[tuple[int, bool]] = []
    for second in range(0, 300, 5):  # reconciles every 5 s, a decision every 15 s
        now = T0 + timedelta(seconds=second)
        observation = Observation(now, pods=pods, compile=compiled, metrics=queued(now.timestamp(), 2, 0.4))
        decides = memory.last_scaling_at is None or now.timestamp() - memory.last_scaling_at >= 15
        result = plan_reconcile(
            dep, observation, memory, StatusMemory.from_status(status), FleetPolicy(), lambda c: "t" * 10
        )
        if result.status != status:
            writes.append((second, decides))
        memory, status = result.memory, result.status
        pods = serving(apply_actions(list(pods), result.actions, now), now)
    # Once the fleet has settled (its pods made and ready), a round between decisions writes nothing.
    assert [second for second, decides in writes if not decides and second >= 60] == []
    assert status["warmPool"]["desiredPods"] == 6
    assert "found at the takeover, held until 2026-11-30T13:00:00Z" in status["warmPool"]["reason"]


def test_manual_scaling_says_the_auto_pool_found_is_kept_while_held() -> None:
    dep = deployment(
        scaling={"mode": "Manual", "replicas": 2, "minReplicas": 0, "maxReplicas": 10},
        warmPool={"mode": "Auto", "minPods": 0, "maxPods": 8},
    )
    durable = StatusMemory.from_status({"desiredReplicas": 2, "warmPool": {"desiredPods": 5, "desiredPlaceholders": 0}})
    targets, memory = decide_targets(dep.spec, DeploymentMemory(), None, "", 2, 2, T0.timestamp(), durable)
    assert targets.warm.pods == 5
    assert "only minPods are kept" not in targets.warm.reason
    assert "Manual does not measure: the pool found at the takeover is kept while held" in targets.warm.reason
    # Once the hold has ended, only minPods.
    later = T0.timestamp() + warmpool.HISTORY_SECONDS
    targets, _ = decide_targets(dep.spec, memory, None, "", 2, 2, later, durable)
    assert targets.warm.pods == 0
    assert "Manual does not measure: only minPods are kept" in targets.warm.reason


# ------------------------------------------------------------------------------------- simulator


def test_the_simulated_operator_takes_over_as_the_operator_does() -> None:
    ours = ours_from_policy_file(DEFAULT_OURS, 100, "default")
    ours.pool_wanted = (3, 1, None)
    ours.restart(960, 7)  # no checkpoint yet
    assert ours.scaling_state == scaling.ScalingState(fleet_found=(960, 7))
    assert ours.warm_state == warmpool.take_over(960, 3, 1)
    ours.pool_wanted = (3, 1, 900.0)  # the pool was held since 900: still since then
    ours.restart(975, 7)
    assert ours.warm_state == warmpool.take_over(900, 3, 1)
    ours.restart(990, 7, resume=False)
    assert (ours.scaling_state, ours.warm_state) == (scaling.ScalingState(), warmpool.WarmPoolState())


# ---------------------------------------------------------------------------- measured cold starts


def test_a_restarted_operator_sizes_the_auto_pool_from_the_cold_start_in_the_status() -> None:
    """The pods whose starts were measured are gone; the status still says what they measured. A
    restarted operator sized the pool for the assumed 300 s beside a status.coldStart of p90 800 s."""
    dep = deployment(
        scaling={**FOLLOWING, "maxReplicas": 20},
        warmPool={"mode": "Auto", "minPods": 0, "maxPods": 8, "maxNodePlaceholders": 2},
    )
    first = plan_at(dep, 0, (), DeploymentMemory(), {})
    instance_type = first.status["placement"]["instanceType"]
    measured = {
        "instanceType": instance_type,
        "pod": {"p50Seconds": 790.0, "p90Seconds": 800.0, "samples": 14},
        "node": {"p50Seconds": 200.0, "p90Seconds": 240.0, "samples": 5},
    }
    restarted = plan_at(dep, 15, (), DeploymentMemory(), {**first.status, "coldStart": measured})
    reason = restarted.status["warmPool"]["reason"]
    assert "pod cold start 800s" in reason and "+node 240s" in reason, reason
    # The status keeps saying what the pool is sized from (and what the next takeover carries); a
    # status written before lastSampleTime gets the takeover's time, so the next does not restart the day.
    taken = rfc3339(T0 + timedelta(seconds=15))
    assert restarted.status["coldStart"]["pod"] == {**measured["pod"], "lastSampleTime": taken}
    assert restarted.status["coldStart"]["node"] == {**measured["node"], "lastSampleTime": taken}
    dated = {**measured, "pod": {**measured["pod"], "lastSampleTime": rfc3339(T0 - timedelta(hours=3))}}
    again = plan_at(dep, 15, (), DeploymentMemory(), {**first.status, "coldStart": dated})
    assert again.status["coldStart"]["pod"] == dated["pod"]
    # Another instance type's figures are not this one's.
    elsewhere = {**measured, "instanceType": "inf2.48xlarge" if instance_type != "inf2.48xlarge" else "inf2.xlarge"}
    moved = plan_at(dep, 15, (), DeploymentMemory(), {**first.status, "coldStart": elsewhere})
    assert "pod cold start 300s" in moved.status["warmPool"]["reason"]


def test_the_status_section_of_the_cold_start_is_read_tolerantly() -> None:
    section = {"instanceType": "inf2.xlarge", "pod": {"p50Seconds": 1.0, "p90Seconds": 2.0, "samples": 3}}
    memory = StatusMemory.from_status({"coldStart": section})
    assert memory.cold_start is not None and memory.cold_start.pod.samples == 3
    for garbage in ("garbage", {"pod": {"samples": -1}}, {"pod": "fast"}, None):
        assert StatusMemory.from_status({"coldStart": garbage}).cold_start is None
