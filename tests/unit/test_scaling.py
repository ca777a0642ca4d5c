"""The scaling policy: signals, tolerance, stabilization, rate limits, panic, missing metrics, bounds."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neuronfleet.api.v1alpha1 import InferenceDeploymentSpec, ScalingSpec
from neuronfleet.planning import hold
from neuronfleet.planning.observation import DECISION_EARLY_SECONDS, DeploymentMemory, next_decision_in, scaling_due
from neuronfleet.planning.reconcile_plan import decide_targets
from neuronfleet.planning.scaling import (
    DECLINE_CREDIT,
    SERVICE_RATE_DECAY,
    SERVICE_RATE_RISE,
    Checkpoint,
    ScalingState,
    decide,
    resume,
    scale_down_limit,
    scale_up_limit,
    service_rate_key,
    take_over,
    unmeasured,
)
from neuronfleet.planning.signals import MetricSnapshot


def spec(**overrides: Any) -> ScalingSpec:
    base: dict[str, Any] = {
        "minReplicas": 1,
        "maxReplicas": 100,
        "targetQueueDepth": 10,
        "panicWindowSeconds": 0,
        "scaleDownDelaySeconds": 0,
    }
    base.update(overrides)
    return ScalingSpec.model_validate(base)


def snap(now: float, load: float, utilization: float = 0.5, rate: float | None = None) -> MetricSnapshot:
    return MetricSnapshot(
        time=now, queue_depth=load / 2, in_flight=load / 2, arrival_rate=rate, utilization=utilization
    )


def test_queue_depth_drives_desired_replicas() -> None:
    decision = decide(spec(), ScalingState(), snap(0, 70), current=4, ready=4, now=0)
    assert decision.desired == 7  # 70 / 10 per replica
    assert decision.recommendation == 7


def test_saturated_queue_counts_at_most_panic_threshold_times_ready() -> None:
    decision = decide(spec(), ScalingState(), snap(0, 2000, 0.1), current=10, ready=4, now=0)
    assert decision.signals["load"] == 8  # 2 x 4 ready, not 200
    assert decision.recommendation == 8  # pods already starting (10) cover it: nothing compounds


def test_scale_up_rate_policy_limits_the_step() -> None:
    decision = decide(spec(), ScalingState(), snap(0, 100, 1.0), current=20, ready=30, now=0)
    assert decision.recommendation == 38  # utilization 1.0 x 30 / 0.8
    assert decision.desired == 38
    decision = decide(spec(), ScalingState(), snap(0, 100, 1.0), current=2, ready=30, now=0)
    assert decision.desired == 6  # max(2 + 4 pods, 2 x 100 %) per 15 s
    assert "scale-up limited to 6" in decision.reason


def test_a_scale_up_to_exactly_its_limit_is_not_said_limited() -> None:
    # From 2 the step allows max(2 + 4 pods, 2 x 100 %) = 6: asked for 6 it gets 6, and nothing was
    # limited; asked for 7 it gets 6, and the reason says why.
    exact = decide(spec(), ScalingState(), snap(0, 0, 0.8), current=2, ready=6, now=0)
    assert (exact.recommendation, exact.desired) == (6, 6)
    assert "limited" not in exact.reason and "stabilized" not in exact.reason  # the recommendation, as it was
    over = decide(spec(), ScalingState(), snap(0, 0, 0.8), current=2, ready=7, now=0)
    assert (over.recommendation, over.desired) == (7, 6)
    assert "scale-up limited to 6" in over.reason


def test_utilization_guardrail_wins_when_queues_are_short() -> None:
    decision = decide(spec(), ScalingState(), snap(0, 10, utilization=1.0), current=8, ready=8, now=0)
    assert decision.recommendation == 10  # 1.0 * 8 / 0.8


def test_within_tolerance_keeps_current() -> None:
    decision = decide(spec(), ScalingState(), snap(0, 105, utilization=0.1), current=10, ready=10, now=0)
    assert decision.desired == 10
    decision = decide(spec(), ScalingState(), snap(0, 115, utilization=0.1), current=10, ready=10, now=0)
    assert decision.desired == 12


def test_scale_down_waits_for_the_stabilization_window() -> None:
    state = ScalingState()
    state = decide(spec(), state, snap(0, 100, 0.1), current=10, ready=10, now=0).new_state
    desired = []
    for now in range(15, 331, 15):
        decision = decide(spec(), state, snap(now, 20, 0.1), current=10, ready=10, now=now)
        state = decision.new_state
        desired.append((now, decision.desired))
    assert all(d == 10 for t, d in desired if t < 300)
    assert dict(desired)[300] == 2


def test_scale_down_delay_holds_the_highest_recommendation_of_its_window() -> None:
    # The default delay (1800 s) is longer than the stabilization window (300 s): it decides.
    s = spec(scaleDownDelaySeconds=ScalingSpec().scale_down_delay_seconds)
    assert s.scale_down_delay_seconds == 1800
    state = decide(s, ScalingState(), snap(0, 100, 0.1), current=10, ready=10, now=0).new_state
    desired = {}
    for now in range(15, 1816, 15):
        decision = decide(s, state, snap(now, 20, 0.1), current=10, ready=10, now=now)
        state = decision.new_state
        desired[now] = decision.desired
    assert all(d == 10 for t, d in desired.items() if t < 1800)
    assert desired[1800] == 2
    # A longer stabilization window wins over a shorter delay.
    longer = spec(
        scaleDownDelaySeconds=60,
        behavior={
            "scaleDown": {
                "stabilizationWindowSeconds": 120,
                "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
            }
        },
    )
    state = decide(longer, ScalingState(), snap(0, 100, 0.1), 10, 10, 0).new_state
    assert decide(longer, state, snap(90, 20, 0.1), 10, 10, 90).desired == 10
    assert decide(longer, state, snap(120, 20, 0.1), 10, 10, 120).desired == 2


def test_scale_down_rate_policy_limits_the_step() -> None:
    s = spec(
        behavior={
            "scaleDown": {
                "stabilizationWindowSeconds": 0,
                "policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}],
            }
        }
    )
    state = ScalingState()
    first = decide(s, state, snap(0, 10, 0.1), current=10, ready=10, now=0)
    assert first.desired == 8
    second = decide(s, first.new_state, snap(15, 10, 0.1), current=8, ready=8, now=15)
    assert second.desired == 8  # 2 pods already removed within the 60 s period
    third = decide(s, second.new_state, snap(61, 10, 0.1), current=8, ready=8, now=61)
    assert third.desired == 6


@pytest.mark.parametrize(("select", "floor"), [("Max", 5), ("Min", 8)])
def test_scale_down_select_policy_picks_the_largest_or_the_smallest_step(select: str, floor: int) -> None:
    # From 10 replicas with almost no load: 2 pods or 50 % a minute. Max (the default) allows the
    # larger step (down to 5), Min the smaller (down to 8), as HPA's selectPolicy.
    behavior = {
        "scaleDown": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": select,
            "policies": [
                {"type": "Pods", "value": 2, "periodSeconds": 60},
                {"type": "Percent", "value": 50, "periodSeconds": 60},
            ],
        }
    }
    assert decide(spec(behavior=behavior), ScalingState(), snap(0, 10, 0.1), 10, 10, 0).desired == floor


def test_select_policy_min_and_disabled() -> None:
    up_min = {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Min",
            "policies": [
                {"type": "Pods", "value": 4, "periodSeconds": 15},
                {"type": "Percent", "value": 100, "periodSeconds": 15},
            ],
        }
    }
    assert decide(spec(behavior=up_min), ScalingState(), snap(0, 1000), 10, 10, 0).desired == 14
    disabled = {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Disabled",
            "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15}],
        }
    }
    assert decide(spec(behavior=disabled), ScalingState(), snap(0, 1000), 10, 10, 0).desired == 10


def test_scale_up_stabilization_takes_the_minimum_of_the_window() -> None:
    s = spec(
        behavior={
            "scaleUp": {
                "stabilizationWindowSeconds": 60,
                "policies": [{"type": "Percent", "value": 1000, "periodSeconds": 15}],
            }
        }
    )
    state = decide(s, ScalingState(), snap(0, 50, 0.1), 5, 5, 0).new_state
    decision = decide(s, state, snap(15, 300, 0.1), 5, 5, 15)
    assert decision.desired == 5  # the window still holds a recommendation of 5
    state = decision.new_state
    for now in (30, 45, 60):
        state = decide(s, state, snap(now, 300, 0.1), 5, 5, now).new_state
    assert decide(s, state, snap(75, 300, 0.1), 5, 5, 75).desired == 10  # load capped at 2 x 5 ready


def test_panic_scales_up_at_once_and_holds() -> None:
    slow_up = {
        "scaleUp": {"stabilizationWindowSeconds": 0, "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}
    }
    s = spec(panicWindowSeconds=6, panicThreshold=2.0, behavior=slow_up)
    calm_spec = spec(panicWindowSeconds=0, behavior=slow_up)
    assert decide(calm_spec, ScalingState(), snap(0, 400), current=4, ready=4, now=0).desired == 5
    burst = decide(s, ScalingState(), snap(0, 400), current=4, ready=4, now=0)
    assert burst.panic
    assert burst.desired == 8  # the rate limit (1 pod per 60 s) does not apply in panic
    calm = decide(s, burst.new_state, snap(15, 20, 0.1), current=8, ready=8, now=15)
    assert calm.panic
    assert calm.desired == 8
    state = calm.new_state
    for now in range(30, 301, 15):
        decision = decide(s, state, snap(now, 20, 0.1), 8, 8, now)
        state = decision.new_state
        if now < 300:
            assert decision.panic, now
            assert decision.desired == 8
    assert not decision.panic
    assert "panic over" in decision.reason


def test_the_panic_window_averages_the_demand_of_the_decisions_within_it() -> None:
    # panicWindowSeconds was only an on/off switch: 6, 60 and 600 decided alike.
    def run(window: int, loads: list[float]) -> list[bool]:
        s = spec(panicWindowSeconds=window, panicThreshold=2.0)
        state, panics = ScalingState(), []
        for k, load in enumerate(loads):
            decision = decide(s, state, snap(15 * k, load, 0.1), 4, 4, 15 * k)
            state = decision.new_state
            panics.append(decision.panic)
        return panics

    # One decision reads a queue of 200 (demand 8 = 2 x 4 ready) among quiet ones (demand 2).
    spike = [20.0, 20.0, 20.0, 200.0]
    assert run(6, spike)[-1]  # no longer than the 15 s interval: the latest decision alone
    assert not run(60, spike)[-1]  # (2 + 2 + 2 + 8) / 4 = 3.5 < 8: the burst did not last
    # A burst that lasts the window panics there too, once the window's mean reaches the threshold.
    lasting = [20.0, 20.0, 20.0, 200.0, 200.0, 200.0, 200.0, 200.0]
    assert run(60, lasting) == [False] * 6 + [True] * 2  # from 90 s the window (30, 90] holds only it
    assert run(6, lasting) == [False] * 3 + [True] * 5
    assert not any(run(0, lasting))


def test_scale_up_disabled_holds_in_panic_too() -> None:
    # "Disabled turns scaling in this direction off": panic skips rate limits, not the switch.
    s = spec(panicWindowSeconds=6, panicThreshold=2.0, behavior={"scaleUp": {"selectPolicy": "Disabled"}})
    burst = decide(s, ScalingState(), snap(0, 400), current=4, ready=4, now=0)
    assert burst.panic
    assert burst.desired == 4
    assert "scale-up disabled" in burst.reason


def test_a_direction_given_in_part_takes_hpas_defaults_for_the_rest() -> None:
    # As HPA v2: scaleDown: {selectPolicy: Disabled} or {stabilizationWindowSeconds: 60} is enough.
    behavior = spec(behavior={"scaleDown": {"stabilizationWindowSeconds": 60}, "scaleUp": {"selectPolicy": "Min"}})
    up, down = behavior.behavior.scale_up, behavior.behavior.scale_down
    assert (down.stabilization_window_seconds, [(p.type, p.value, p.period_seconds) for p in down.policies]) == (
        60,
        [("Percent", 100, 15)],
    )
    assert (up.select_policy, up.stabilization_window_seconds, [(p.type, p.value) for p in up.policies]) == (
        "Min",
        0,
        [("Pods", 4), ("Percent", 100)],
    )
    off = spec(behavior={"scaleDown": {"selectPolicy": "Disabled"}})
    state = decide(off, ScalingState(), snap(0, 10), current=6, ready=6, now=0).new_state
    assert decide(off, state, snap(600, 10), current=6, ready=6, now=600).desired == 6


def test_below_panic_threshold_no_panic() -> None:
    s = spec(panicWindowSeconds=6, panicThreshold=2.0)
    decision = decide(s, ScalingState(), snap(0, 70), current=4, ready=4, now=0)
    assert not decision.panic
    assert decision.desired == 7


def test_missing_metrics_hold() -> None:
    decision = decide(spec(), ScalingState(), MetricSnapshot(time=0), current=7, ready=7, now=0)
    assert decision.desired == 7
    assert "metrics missing" in decision.reason
    assert decide(spec(), ScalingState(), None, current=7, ready=7, now=0).desired == 7


def test_stale_metrics_hold() -> None:
    old = snap(0, 0, 0.0)
    decision = decide(spec(), ScalingState(), old, current=7, ready=7, now=1000)
    assert decision.desired == 7


def test_partial_metrics_scale_up_but_not_down() -> None:
    only_util = MetricSnapshot(time=0, utilization=0.05)
    assert decide(spec(), ScalingState(), only_util, 7, 7, 0).desired == 7
    high_util = MetricSnapshot(time=0, utilization=1.0)
    assert decide(spec(), ScalingState(), high_util, 8, 8, 0).desired == 10


def test_a_snapshot_covering_fewer_pods_than_are_ready_never_shrinks_the_fleet() -> None:
    # Half of 10 pods' scrapes fail: their series go stale and leave the sums, which read half the
    # demand with no signal missing. The fleet scaled down to 5 under 400/s it needed 10 for.
    s = spec(targetQueueDepth=8)
    state = steady(s, 400, 0.8, 10)  # 50/s per replica
    half = MetricSnapshot(time=45, queue_depth=2, in_flight=8, arrival_rate=200, utilization=0.8, reporting=5)
    decision = decide(s, state, half, 10, 10, 45)
    assert decision.signals["rate"] == pytest.approx(5)  # 200 / (50 x 0.8)
    assert decision.desired == 10 and decision.recommendation == 10
    assert "no scale-down: metrics of 5 of 10 ready pods" in decision.reason
    # Partial snapshots are not measured either: their arrival rate reads low, their utilization not.
    later = decision.new_state
    for now in (60, 75, 90):
        later = decide(s, later, replace(half, time=now), 10, 10, now).new_state
    assert later.service_rate == state.service_rate
    # It may still grow the fleet, and says why the snapshot is partial.
    burst = replace(half, arrival_rate=900)
    grown = decide(s, state, burst, 10, 10, 45)
    assert grown.desired > 10 and "metrics of 5 of 10 ready pods" in grown.reason
    # All 10 reporting (or no count read): a scale-down as before.
    whole = decide(s, state, replace(half, reporting=10), 10, 10, 45)
    assert whole.recommendation == 5 and "ready pods" not in whole.reason


def test_manual_mode() -> None:
    decision = decide(spec(mode="Manual", replicas=3), ScalingState(), None, 9, 9, 0)
    assert decision.desired == 3


def steady(s: ScalingSpec, rate: float, util: float, ready: int, ticks: int = 3) -> ScalingState:
    """The state after ``ticks`` decisions 15 s apart at a steady rate, utilization and ready count."""
    state = ScalingState()
    for tick in range(ticks):
        state = decide(s, state, snap(tick * 15, 0, util, rate=rate), ready, ready, tick * 15).new_state
    return state


def test_service_rate_is_measured_only_once_rate_and_ready_held_still() -> None:
    # 4 replicas 50 % busy with 200/s: 100/s each. Measured from the third tick on (30 s steady).
    s = spec()
    assert steady(s, 200, 0.5, 4, ticks=2).service_rate is None
    assert steady(s, 200, 0.5, 4, ticks=3).service_rate == 100
    state = steady(s, 200, 0.5, 4, ticks=2)
    moved = decide(s, state, snap(30, 0, 0.5, rate=260), 4, 4, 30).new_state  # rate moved 30 %
    assert moved.service_rate is None
    rescaled = decide(s, state, snap(30, 0, 0.5, rate=200), 5, 5, 30).new_state  # ready changed
    assert rescaled.service_rate is None


def test_service_rate_ignores_idle_saturated_and_backlogged_samples() -> None:
    s = spec()
    assert steady(s, 200, 0.1, 4).service_rate is None  # idle: too noisy
    assert steady(s, 200, 0.99, 4).service_rate is None  # saturated: arrivals exceed throughput
    state = ScalingState()
    for tick in range(3):
        backlog = MetricSnapshot(time=tick * 15, queue_depth=50, in_flight=4, arrival_rate=200, utilization=0.5)
        state = decide(s, state, backlog, 4, 4, tick * 15).new_state
    assert state.service_rate is None  # 50 queued > 1 per ready replica


def test_service_rate_rises_fast_and_falls_slowly() -> None:
    # Dynamic batching: at low load small batches show less than a replica can serve.
    s = spec()
    state = steady(s, 200, 0.5, 4)  # 100/s
    higher = decide(s, state, snap(45, 0, 0.5, rate=204), 4, 4, 45).new_state  # shows 102/s
    assert higher.service_rate is not None
    assert abs(higher.service_rate - (100 + SERVICE_RATE_RISE * 2)) < 1e-9
    lower = decide(s, state, snap(45, 0, 0.5, rate=196), 4, 4, 45).new_state  # shows 98/s
    assert lower.service_rate is not None
    assert abs(lower.service_rate - (100 - SERVICE_RATE_DECAY * 2)) < 1e-9


def test_arrival_rate_drives_replicas_once_the_service_rate_is_known() -> None:
    state = steady(spec(), 200, 0.5, 4)  # 100/s per replica
    # 800/s arrive: 800 / (100 x 0.8) = 10; utilization no longer counts (1.0 x 4 / 0.8 = 5).
    decision = decide(spec(), state, snap(45, 0, 1.0, rate=800), 4, 4, 45)
    assert decision.signals == {"rate": 10.0}
    assert decision.recommendation == 10


def test_a_missing_arrival_rate_once_measured_is_a_missing_signal_not_the_load_fallback() -> None:
    # 10 replicas seen to serve 50/s each serve 250/s; under batching 16 requests run per replica and
    # the devices read 65 % busy. One scrape gap (rate()[1m] with fewer than two samples) left the
    # arrival rate out, and the in-flight (160 / 8 = 20) and busy-ratio signals, which the rule drops
    # once the service rate is known, doubled the fleet in panic.
    s = spec(targetQueueDepth=8, panicWindowSeconds=6)
    state = replace(steady(s, 400, 0.8, 10), measured_since=0.0)
    assert state.service_rate == 50
    gap = MetricSnapshot(time=45, queue_depth=10, in_flight=160, arrival_rate=None, utilization=0.65)
    decision = decide(s, state, gap, 10, 10, 45)
    assert (decision.desired, decision.panic, decision.signals) == (10, False, {})
    assert "metrics missing (arrival_rate): holding 10" in decision.reason
    # The signals left may grow the fleet (a burst in the queue), never shrink it, and the reason says so.
    burst = replace(gap, queue_depth=200)
    grown = decide(s, state, burst, 10, 10, 45)
    assert set(grown.signals) == {"burst"} and grown.desired > 10
    assert "arrival_rate missing" in grown.reason
    quiet = MetricSnapshot(time=45, queue_depth=0, in_flight=1, arrival_rate=None, utilization=0.1, arrival_peak=50)
    held = decide(s, state, quiet, 10, 10, 45)
    assert held.signals == {"peak": pytest.approx(50 / (50 * 1.1))}
    assert held.desired == 10 and "no scale-down: arrival_rate missing" in held.reason


def test_a_missing_signal_says_no_scale_down_only_where_it_holds_one() -> None:
    # With arrival_rate missing the peak alone sizes the fleet: at 10 replicas' worth it asks for
    # the 10 there are, so nothing is held, and the reason names the gap without claiming a hold.
    s = spec(targetQueueDepth=8, panicWindowSeconds=6)
    state = replace(steady(s, 400, 0.8, 10), measured_since=0.0)
    at_current = MetricSnapshot(
        time=45, queue_depth=0, in_flight=1, arrival_rate=None, utilization=0.1, arrival_peak=10 * 50 * 1.1
    )
    kept = decide(s, state, at_current, 10, 10, 45)
    assert (kept.recommendation, kept.desired) == (10, 10)
    assert "arrival_rate missing" in kept.reason and "no scale-down" not in kept.reason
    below = decide(s, state, replace(at_current, arrival_peak=5 * 50 * 1.1), 10, 10, 45)
    assert (below.recommendation, below.desired) == (10, 10)
    assert "no scale-down: arrival_rate missing" in below.reason


def test_a_new_revision_forgets_the_service_rate_learned_on_the_old_one() -> None:
    # v1 served 50/s per replica. v2, twice as slow, kept that rate: 400/s sized 10 replicas where 20
    # were needed, queues filled, panic doubled the fleet, the rate signal halved it again, for a day.
    s = spec(maxReplicas=40)
    state = ScalingState()
    for tick in range(3):
        state = decide(s, state, snap(tick * 15, 0, 0.8, rate=400), 10, 10, tick * 15, rate_key="v1").new_state
    assert (state.service_rate, state.service_rate_key) == (50, "v1")
    assert state.checkpoint is not None and state.checkpoint.service_rate_key == "v1"
    # v2 rolled out: its replicas are saturated.
    saturated = MetricSnapshot(time=45, queue_depth=500, in_flight=40, arrival_rate=400, utilization=1.0)
    decision = decide(s, state, saturated, 10, 10, 45, rate_key="v2")
    assert decision.new_state.service_rate is None and decision.new_state.checkpoint is None
    assert "rate" not in decision.signals and decision.signals["utilization"] == pytest.approx(12.5)
    assert "service rate 50/s forgotten: now v2" in decision.reason
    # Measured again on v2 (20 replicas 80 % busy with 400/s: 25/s each), it sizes v2's fleet.
    state = decision.new_state
    for tick in range(4, 8):
        state = decide(s, state, snap(tick * 15, 0, 0.8, rate=400), 20, 20, tick * 15, rate_key="v2").new_state
    assert state.service_rate == 25
    assert decide(s, state, snap(120, 0, 0.8, rate=400), 20, 20, 120, rate_key="v2").recommendation == 20
    # No key (the simulator), or the same key: nothing forgotten.
    assert decide(s, state, snap(120, 0, 0.8, rate=400), 20, 20, 120).new_state.service_rate == 25


def test_a_checkpoint_of_another_key_is_forgotten_and_one_without_a_key_trusted() -> None:
    s = spec()
    old = Checkpoint(0.0, 50.0, None, None, ScalingState().history, service_rate_key="v1")
    assert (
        decide(
            s, resume(old, 60, 10, s.target_utilization), snap(60, 0, 0.8, rate=400), 10, 10, 60, "v2"
        ).new_state.service_rate
        is None
    )
    keyless = replace(old, service_rate_key=None)
    kept = decide(
        s, resume(keyless, 60, 10, s.target_utilization), snap(60, 0, 0.8, rate=400), 10, 10, 60, "v2"
    ).new_state
    assert (kept.service_rate, kept.service_rate_key) == (50.0, "v2")


def test_the_service_rate_key_names_what_the_rate_depends_on() -> None:
    base = InferenceDeploymentSpec.model_validate({"model": {"source": "s3://models/bert"}})
    key = service_rate_key(base, "r1", "inf2.xlarge")
    assert key is not None and "r1" in key and "inf2.xlarge" in key
    assert service_rate_key(base, None, "inf2.xlarge") is None  # unknown: nothing is forgotten
    assert service_rate_key(base, "r1", None) is None
    changed = [
        service_rate_key(base, "r2", "inf2.xlarge"),
        service_rate_key(base, "r1", "inf2.8xlarge"),
        service_rate_key(
            base.model_copy(update={"model": base.model.model_copy(update={"neuron_cores_per_replica": 1})}),
            "r1",
            "inf2.xlarge",
        ),
        service_rate_key(
            base.model_copy(update={"runtime": base.runtime.model_copy(update={"max_batch_delay_ms": 20.0})}),
            "r1",
            "inf2.xlarge",
        ),
    ]
    assert len({key, *changed}) == 5


def test_dynamic_batching_busy_device_at_low_load_does_not_scale_up() -> None:
    # 10 replicas were seen to serve 1125/s each (9000/s at 80 % busy). At 6000/s with small batches
    # the devices are 90 % busy, yet the demand needs 6000 / (1125 x 0.8) = 6.67 -> 7 replicas, not the
    # 12 the busy ratio (0.9 x 10 / 0.8 = 11.25) would ask for.
    state = steady(spec(), 9000, 0.8, 10)
    assert state.service_rate == 1125
    decision = decide(spec(), state, snap(45, 0, 0.9, rate=6000), 10, 10, 45)
    assert decision.recommendation == 7


def test_a_burst_shows_as_a_queue_beyond_its_usual_depth() -> None:
    state = steady(spec(), 200, 0.5, 4)  # 100/s per replica, 80/s at the 0.8 target
    usual = MetricSnapshot(time=45, queue_depth=40, in_flight=30, arrival_rate=200, utilization=0.5)
    assert "burst" not in decide(spec(), state, usual, 4, 4, 45).signals  # 40 = 10 per ready replica
    # 100 queued, 60 beyond the usual 40, count as arrivals within 0.25 s: 240/s, 3 replicas at 80/s
    # on top of the 4 ready ones (in-flight requests aside).
    burst = MetricSnapshot(time=45, queue_depth=100, in_flight=30, arrival_rate=200, utilization=0.5)
    decision = decide(spec(), state, burst, 4, 4, 45)
    assert decision.signals["burst"] == pytest.approx(4 + 60 / 0.25 / 80)
    assert decision.recommendation == 7


@settings(max_examples=200, deadline=None)
@given(
    low=st.integers(0, 20),
    span=st.integers(0, 50),
    current=st.integers(0, 80),
    load=st.one_of(st.none(), st.floats(0, 1e5)),
    util=st.one_of(st.none(), st.floats(0, 1)),
    panic=st.sampled_from([0, 6]),
)
def test_desired_within_bounds_and_no_scale_down_on_missing(
    low: int, span: int, current: int, load: float | None, util: float | None, panic: int
) -> None:
    s = spec(minReplicas=low, maxReplicas=low + span, panicWindowSeconds=panic)
    snapshot = MetricSnapshot(
        time=0, queue_depth=None if load is None else load, in_flight=None if load is None else 0.0, utilization=util
    )
    decision = decide(s, ScalingState(), snapshot, current, current, 0)
    assert low <= decision.desired <= low + span
    if load is None or util is None:
        assert decision.desired >= min(current, low + span)


def test_demand_prefers_the_arrival_rate_over_a_saturated_queue() -> None:
    state = steady(spec(), 200, 0.5, 4)
    saturated = decide(spec(), state, MetricSnapshot(45, 0, 5000, 600, 1.0), 4, 4, 45)
    assert saturated.signals == {"rate": 7.5}
    assert saturated.demand == 8  # 600 / (100 x 0.8) = 7.5 -> 8, not the in-flight's 500
    no_rate = decide(spec(), ScalingState(), snap(0, 60, 0.1), 4, 4, 0)
    assert no_rate.demand == no_rate.recommendation == 6


def test_trend_adds_the_rise_expected_within_a_cold_start() -> None:
    from neuronfleet.planning.scaling import _line
    from neuronfleet.planning.scaling import _trend as trend_of_line

    def _trend(rates: tuple[tuple[float, float], ...], horizon: float) -> float | None:
        return trend_of_line(_line(rates), rates[-1][0], horizon)

    # 10 -> 16 replicas over 1200 s: 0.005 per second; 480 s ahead: 16 + 2.4.
    assert _trend(((0, 10.0), (600, 13.0), (1200, 16.0)), 480) == pytest.approx(18.4)
    # The line, not the last reading: 10, 16, 13 has its line at 14.5 by 1200 s (slope 0.0025/s).
    assert _trend(((0, 10.0), (600, 16.0), (1200, 13.0)), 480) == pytest.approx(14.5 + 1.2)
    assert _trend(((0, 16.0), (600, 13.0), (1200, 10.0)), 480) is None  # falling
    assert _trend(((0, 10.0), (300, 13.0), (600, 16.0)), 480) is None  # under half of the 1800 s window


def test_a_rising_demand_asks_ahead_and_a_scale_up_measures_the_cold_start() -> None:
    s = spec()
    state = steady(s, 400, 0.5, 4)  # 200/s per replica; rate signal = arrivals / 160
    rate, now, current = 400.0, 30, 4
    for _ in range(61):  # +16/s every 15 s over 915 s: a slope of 0.00667 replicas per second
        now += 15
        rate += 16
        # The 4 ready replicas get busier (200/s each at full use); the pods asked for are starting.
        decision = decide(s, state, snap(now, 0, min(1.0, rate / 800), rate=rate), current, 4, now)
        state, current = decision.new_state, decision.desired
    assert decision.signals["trend"] > decision.signals["rate"]
    # 1376/s / 160 = 8.6 now; the trend adds 0.1/15 s x 480 s = 3.2: 11.8 -> 12.
    assert decision.signals["rate"] == pytest.approx(1376 / 160)
    assert decision.signals["trend"] == pytest.approx(1376 / 160 + 0.1 / 15 * 480)
    assert decision.desired == 12
    assert state.cold_start is None and state.launches
    # All the pods asked for serve 200 s after the last scale-up: the scale-ups' waits are measured.
    later = decide(s, state, snap(now + 200, 0, 0.5, rate=rate), current, current, now + 200)
    assert later.new_state.launches == ()
    assert later.new_state.cold_start is not None and 200 <= later.new_state.cold_start <= 200 + 915


def test_recommendations_before_the_service_rate_is_known_do_not_hold_the_fleet() -> None:
    s = spec(scaleDownDelaySeconds=1800)

    def busy(now: float) -> MetricSnapshot:
        return MetricSnapshot(time=now, queue_depth=0, in_flight=80, arrival_rate=400, utilization=0.9)

    state, current = ScalingState(), 4
    for now in (0, 15, 30):
        decision = decide(s, state, busy(now), current, 4, now)
        state, current = decision.new_state, decision.desired
        assert decision.recommendation == 8  # in flight 80 / 10, at most 2 x 4 ready
    # At 30 s the rate and the 4 ready replicas had held still: 400 / (0.9 x 4) = 111/s per replica.
    assert state.service_rate == pytest.approx(400 / 3.6)
    decision = decide(s, state, busy(45), current, 4, 45)
    assert decision.signals["rate"] == pytest.approx(4.5)  # 400 / (111 x 0.8)
    assert decision.desired == 5  # the earlier 8s, made without it, no longer hold the fleet
    assert decision.new_state.recommendations == ((45, 5),)


def test_a_falling_demand_is_followed_down_at_half_its_trend() -> None:
    s = spec(scaleDownDelaySeconds=1800, tolerance=0)
    state = steady(s, 400, 0.5, 4)  # 200/s per replica: the rate signal is arrivals / 160
    current = 20
    for k in range(81):  # the rate signal falls from 20 by 0.15 every 15 s, to 8 at 1245 s
        now = 45 + 15 * k
        rate = 160 * (20 - 0.15 * k)
        decision = decide(s, state, snap(now, 0, min(1.0, rate / 4000), rate=rate), current, 20, now)
        state, current = decision.new_state, decision.desired
    assert decision.recommendation == 8
    # Held with its level, the first recommendations (20 until 135 s) would keep 20. Lowered by half
    # the decline since (0.005 per second), 20 at 135 s is 20 - 0.005 x 1110 = 14.45 -> 15 now.
    assert decision.desired == 15


def test_panic_reason_says_how_long_not_an_epoch() -> None:
    s = spec(panicWindowSeconds=6, panicThreshold=2.0)
    start = 1_796_076_196.0  # an operator's clock is the epoch
    burst = decide(s, ScalingState(), snap(start, 400), current=4, ready=4, now=start)
    again = decide(s, burst.new_state, snap(start + 30, 400), current=8, ready=4, now=start + 30)
    assert again.panic
    assert "panic for 30 s" in again.reason, again.reason
    assert "1796076" not in again.reason


def test_the_busiest_second_needs_its_own_capacity() -> None:
    state = steady(spec(), 200, 0.5, 4)  # 100/s per replica
    # Steady traffic: a busiest second of 220/s at 1.1 x 100/s needs 2 replicas, fewer than the
    # minute's rate at 0.8 (200 / 80 = 2.5 -> 3): the peak changes nothing.
    calm = MetricSnapshot(time=45, queue_depth=0, in_flight=4, arrival_rate=200, utilization=0.5, arrival_peak=220)
    decision = decide(spec(), state, calm, 4, 4, 45)
    assert decision.signals["peak"] == pytest.approx(2.0)
    assert decision.recommendation == 3
    # Clients acting together: the same minute's rate arrives in bursts of 880/s, which need 8.
    bursty = replace(calm, arrival_peak=880)
    decision = decide(spec(), state, bursty, 4, 4, 45)
    assert decision.signals["peak"] == pytest.approx(8.0)
    assert decision.recommendation == 8
    # peakUtilization is the knob: at 1.6, 880 / (100 x 1.6) = 5.5 -> 6.
    assert decide(spec(peakUtilization=1.6), state, bursty, 4, 4, 45).recommendation == 6
    # No peak reported (an older runtime, or the query returns nothing): the rate alone decides.
    assert "peak" not in decide(spec(), state, replace(calm, arrival_peak=None), 4, 4, 45).signals


@pytest.mark.parametrize(
    ("policies", "select"),
    [
        ([{"type": "Percent", "value": 100, "periodSeconds": 15}], "Max"),
        (
            [{"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}],
            "Min",
        ),
    ],
)
def test_a_percent_scale_up_policy_can_start_a_fleet_at_zero(policies: list[dict[str, Any]], select: str) -> None:
    # A percentage of zero replicas is zero: without a floor a fleet scaled to zero stayed there
    # for every demand short of panic (and for ever with panic mode off).
    behavior = {"scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": select, "policies": policies}}
    s = spec(minReplicas=0, behavior=behavior)
    state = ScalingState()
    desired = 0
    for tick in range(4):
        decision = decide(s, state, snap(tick * 15.0, 5), current=desired, ready=desired, now=tick * 15.0)
        state, desired = decision.new_state, decision.desired
    assert desired == 1


def test_a_scale_up_limit_never_scales_the_fleet_down() -> None:
    # Scale-ups and a scale-down within one scale-up period: when the period's start counted only
    # what was added, it lay below what the fleet had, the limit fell below the current count and a
    # recommendation to grow shrank the fleet. As HPA does, the limit is at least the current count
    # (growth beyond the policies, as in panic, still puts the start that low).
    behavior = {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Min",
            "policies": [
                {"type": "Pods", "value": 4, "periodSeconds": 60},
                {"type": "Percent", "value": 100, "periodSeconds": 60},
            ],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": 0,
            "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
        },
    }
    s = spec(panicThreshold=10, scaleDownDelayMode="Fixed", behavior=behavior)
    up = decide(s, ScalingState(), snap(0, 70), current=3, ready=3, now=0)
    assert up.desired == 6
    down = decide(s, up.new_state, snap(5, 20, utilization=0.1), current=6, ready=6, now=5)
    assert down.desired == 2
    again = decide(s, down.new_state, snap(10, 80), current=2, ready=2, now=10)
    assert again.recommendation is not None and again.recommendation > 2
    assert again.desired >= 2


def test_a_scale_down_limit_never_scales_the_fleet_up() -> None:
    # maxReplicas lowered removes replicas outside the rate policy; raised again within the
    # policy's period, the period's start (current plus what was removed) lay above the current
    # count, and a recommendation to shrink grew the fleet back. The limit is at most the current
    # count.
    behavior = {
        "scaleDown": {
            "stabilizationWindowSeconds": 0,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
        },
    }
    s = spec(scaleDownDelayMode="Fixed", behavior=behavior)
    lowered = decide(replace_bounds(s, 4), ScalingState(), snap(0, 100), current=10, ready=10, now=0)
    assert lowered.desired == 4
    shrink = decide(s, lowered.new_state, snap(15, 20, utilization=0.1), current=4, ready=4, now=15)
    assert shrink.recommendation == 2
    assert shrink.desired <= 4


def replace_bounds(s: ScalingSpec, max_replicas: int) -> ScalingSpec:
    return s.model_copy(update={"max_replicas": max_replicas})


@pytest.mark.parametrize("interval", [25, 60, 300])
def test_the_service_rate_is_learned_at_any_interval(interval: int) -> None:
    # Decisions further apart than the steadiness window left no sample to compare with (25 s: none
    # 30-45 s back; 60 s and more: none kept at all), so the arrival rate, the primary signal, was
    # never used at those (valid) intervalSeconds.
    s = spec(intervalSeconds=interval)
    state = ScalingState()
    for tick in range(4):
        now = tick * float(interval)
        decision = decide(s, state, snap(now, 4, utilization=0.5, rate=20.0), current=2, ready=2, now=now)
        state = decision.new_state
    assert state.service_rate == pytest.approx(20.0)
    assert "rate" in decision.signals


def test_auto_mode_holds_one_replica_even_with_min_replicas_zero() -> None:
    # An object stored before the CRD refused minReplicas 0 in Auto mode: idle, it keeps one.
    s = spec(minReplicas=0, behavior={"scaleDown": {"stabilizationWindowSeconds": 0}})
    assert decide(s, ScalingState(), snap(0, 0.0, 0.0, rate=0.0), current=3, ready=3, now=0).desired == 1


def test_a_measured_fleet_scales_down_without_the_signals_it_no_longer_uses() -> None:
    # Once the service rate is known, the in-flight count and the busy ratio size nothing: an exporter
    # without the in-flight gauge, or a utilization query that answers nothing, must not hold the
    # fleet at its peak for good. The arrival rate and the queue are still needed.
    s = spec(scaleDownDelayMode="Fixed", scaleDownDelaySeconds=0)
    state = replace(steady(s, 400, 0.8, 10), measured_since=0.0)
    assert state.service_rate == 50
    quiet = MetricSnapshot(time=45, queue_depth=0, in_flight=None, arrival_rate=100, utilization=None)
    decision = decide(s, state, quiet, 10, 10, 45)
    assert decision.recommendation == 3  # 100 / (50 x 0.8) = 2.5
    assert "missing" not in decision.reason
    without_queue = replace(quiet, queue_depth=None)
    held = decide(s, state, without_queue, 10, 10, 45)
    assert held.recommendation == 10 and "no scale-down: queue_depth missing" in held.reason


def test_a_percent_scale_down_floor_is_truncated_as_hpa_does() -> None:
    # HPA's calculateScaleDownLimitWithBehaviors truncates int32(start * (1 - value/100)); rounded
    # up, a 10 % policy kept a fleet of 10 or fewer at its size for good (8 x 0.9 = 7.2 -> 8).
    behavior = {
        "scaleDown": {
            "stabilizationWindowSeconds": 0,
            "policies": [{"type": "Percent", "value": 10, "periodSeconds": 60}],
        }
    }
    s = spec(scaleDownDelayMode="Fixed", behavior=behavior)
    assert scale_down_limit(s.behavior.scale_down, (), 8, 0.0) == 7
    assert scale_down_limit(s.behavior.scale_down, (), 10, 0.0) == 9
    state, current = ScalingState(), 8
    for tick in range(9):
        now = tick * 15.0
        decision = decide(s, state, snap(now, 5, 0.05), current=current, ready=current, now=now)
        state, current = decision.new_state, decision.desired
    assert decision.recommendation == 1
    assert current == 5  # one replica per 60 s period: at 0, 60 and 120 s


def test_a_policy_period_starts_at_current_less_added_plus_removed_as_in_hpa() -> None:
    # HPA (kubernetes/kubernetes#109058) starts both directions' periods at current - added +
    # deleted. Counting only additions for a scale-up, a burst right after 10 -> 4 was limited to 8
    # (twice the lowered count) where HPA allows 20; counting only removals for a scale-down, a
    # shrink right after 4 -> 10 at 50 %/60 s stopped at 5 where HPA goes to 2.
    s = spec()
    assert scale_up_limit(s.behavior.scale_up, ((0.0, -6),), 4, 10.0) == 20
    halve = spec(behavior={"scaleDown": {"policies": [{"type": "Percent", "value": 50, "periodSeconds": 60}]}})
    assert scale_down_limit(halve.behavior.scale_down, ((0.0, 6),), 10, 10.0) == 2
    # Events outside the period do not count, and the limit never moves the fleet the other way.
    assert scale_up_limit(s.behavior.scale_up, ((0.0, -6),), 4, 20.0) == 8
    assert scale_down_limit(halve.behavior.scale_down, ((0.0, 6), (5.0, -8)), 2, 10.0) == 2
    # Through decide: 10 -> 4 on a quiet reading, then a burst within the scale-up period.
    quick = spec(
        panicThreshold=10, scaleDownDelayMode="Fixed", behavior={"scaleDown": {"stabilizationWindowSeconds": 0}}
    )
    down = decide(quick, ScalingState(), snap(0, 35, 0.1), current=10, ready=10, now=0)
    assert down.desired == 4
    burst = decide(quick, down.new_state, snap(10, 350, 0.1), current=4, ready=4, now=10)
    assert burst.recommendation == 35
    assert burst.desired == 20


@pytest.mark.parametrize(
    ("snapshot", "service_rate"),
    [
        (MetricSnapshot(0, queue_depth=0.0, in_flight=1.0, utilization=1e308), None),
        (MetricSnapshot(0, queue_depth=0.0, in_flight=1.0, arrival_rate=1e308, utilization=0.5), 1.0),
        (MetricSnapshot(0, queue_depth=1e308, in_flight=1.0, arrival_rate=10.0, utilization=0.5), 1.0),
    ],
)
def test_a_huge_finite_sample_asks_for_the_most_replicas_instead_of_raising(
    snapshot: MetricSnapshot, service_rate: float | None
) -> None:
    # A finite sample passes the snapshot's check; the signal it made overflowed to inf, and
    # math.ceil(inf) raised OverflowError out of every reconcile of the deployment.
    s = spec(panicWindowSeconds=6, maxReplicas=50)
    state = replace(ScalingState(), service_rate=service_rate, measured_since=0.0 if service_rate else None)
    decision = decide(s, state, snapshot, current=4, ready=4, now=0)
    assert decision.recommendation is not None and decision.recommendation >= 50
    assert decision.desired == 50  # panic: past the rate limits, up to maxReplicas


def test_an_arrival_rate_overflowing_over_the_busy_ratio_is_no_service_rate() -> None:
    # 1e308 / 0.2 is inf: learned, it read every later arrival rate as no demand at all.
    snapshot = MetricSnapshot(60, queue_depth=0.0, in_flight=1.0, arrival_rate=1e308, utilization=0.2)
    state = replace(ScalingState(), recent=((0.0, 1, 1e308), (30.0, 1, 1e308)))
    assert decide(spec(), state, snapshot, current=1, ready=1, now=60).new_state.service_rate is None


def test_a_wall_clock_stepped_back_neither_skips_decisions_nor_holds_a_burst() -> None:
    # Stepped back 600 s (NTP, a restored VM): now - last decision stayed negative, so no decision
    # was due for 615 s and the last one (3 replicas) was served through a burst; decided, the calm
    # recommendation stamped in the future still held the scale-up window's minimum at the fleet.
    deployment = InferenceDeploymentSpec.model_validate(
        {
            "model": {"source": "s3://models/bert"},
            "scaling": {"minReplicas": 1, "maxReplicas": 40, "targetQueueDepth": 8},
        }
    )
    start = 1_800_000_000.0
    calm = MetricSnapshot(start, queue_depth=0.0, in_flight=4.0, utilization=0.5)
    targets, memory = decide_targets(deployment, DeploymentMemory(), calm, "", 4, 4, start)
    assert targets.scale.desired == 3
    stepped = start - 600 + 15
    assert scaling_due(deployment.scaling, memory, stepped)
    burst = MetricSnapshot(stepped, queue_depth=400.0, in_flight=40.0, utilization=1.0)
    targets, memory = decide_targets(deployment, memory, burst, "", 4, 4, stepped)
    assert targets.scale.desired == 8 and targets.scale.panic
    # The state's times were moved back with the clock: nothing is left in its future.
    state = memory.scaling_state
    assert all(t <= stepped for t, _ in (*state.recommendations, *state.scale_events, *state.demands))


def test_a_decision_reached_a_fraction_early_is_made_not_put_off() -> None:
    # The daemon waits for the decision on the event loop's clock and the reconcile reads the wall
    # clock: 0.1 s early, the decision was not due and waited for the next wake-up (the operator's
    # whole interval, 10 s by default) while the fleet served its last one.
    auto = spec(intervalSeconds=15)
    memory = DeploymentMemory(last_scaling_at=1000.0, last_decision_mode="Auto")
    assert scaling_due(auto, memory, 1000.0 + 15 - 0.1)
    assert scaling_due(auto, memory, 1000.0 + 15 - DECISION_EARLY_SECONDS), "as early as allowed: due"
    assert not scaling_due(auto, memory, 1000.0 + 14)
    # At most a tenth of the interval early: a 1 s interval is not decided at 0.6 s.
    assert not scaling_due(spec(intervalSeconds=1), memory, 1000.6)


def test_the_next_decision_is_due_interval_seconds_after_the_last() -> None:
    auto = spec(intervalSeconds=15)
    memory = DeploymentMemory(last_scaling_at=1000.0, last_decision_mode="Auto")
    assert next_decision_in(auto, memory, 1000.0) == 15
    assert next_decision_in(auto, memory, 1010.5) == 4.5
    # Overdue (a reconcile that ran long): at once; so when the clock was stepped back.
    assert next_decision_in(auto, memory, 1020.0) == 0
    assert next_decision_in(auto, memory, 900.0) == 0
    # Nothing waited for: Manual decides at every reconcile, and a memory without a decision (a
    # reconcile that stopped before planning) has none to count from (waking at once would spin).
    manual = spec(mode="Manual", replicas=2)
    assert next_decision_in(manual, replace(memory, last_decision_mode="Manual"), 1000.0) is None
    assert next_decision_in(auto, DeploymentMemory(), 1000.0) is None


def test_a_clock_stepped_back_moves_the_history_and_renews_the_checkpoint() -> None:
    s = spec(scaleDownDelayMode="Learned")
    state = replace(steady(s, 400, 0.8, 10), measured_since=0.0)
    for tick in range(3, 40):
        state = decide(s, state, snap(15.0 * tick, 4, 0.8, rate=400), 10, 10, 15.0 * tick).new_state
    history, checkpoint = state.history, state.checkpoint
    assert checkpoint is not None and len(history.needs) == 10
    back = 15.0 * 40 - 300  # the clock stepped back 5 minutes
    after = decide(s, state, snap(back, 4, 0.8, rate=400), 10, 10, back).new_state
    # The minutes go on from the last one (not folded into minutes that are now in the future).
    assert after.history.first_minute + len(after.history.needs) - 1 == int(back // 60)
    assert len(after.history.needs) in (10, 11)
    assert after.checkpoint is not None and after.checkpoint.time == back


@pytest.mark.parametrize("query", ["queueDepth", "utilization"])
def test_a_signal_the_spec_turned_off_is_not_missing(query: str) -> None:
    # An empty query turns its signal off (the operator's refusal message calls it allowed). Counted
    # as missing, it forbade every scale-down: a fleet grown for a busy hour stayed at its peak, and
    # with the queue off the service rate (which waited for a queue reading) was never measured.
    s = spec(scaleDownDelayMode="Fixed", metrics={query: ""})
    field = {"queueDepth": "queue_depth", "utilization": "utilization"}[query]
    state, current = ScalingState(), 8
    for tick in range(6):
        now = 15.0 * tick
        values: dict[str, float | None] = {
            "queue_depth": 1.0,
            "in_flight": 2.0,
            "arrival_rate": 20.0,
            "utilization": 0.3,
        }
        values[field] = None
        decision = decide(s, state, MetricSnapshot(now, **values), current=current, ready=current, now=now)
        state, current = decision.new_state, decision.desired
    assert "missing" not in decision.reason
    assert current < 8
    if query == "queueDepth":
        assert state.service_rate is not None and "rate" in decision.signals
    # A query that is set and answers nothing is still missing: no scale-down on it.
    held = decide(spec(scaleDownDelayMode="Fixed"), ScalingState(), MetricSnapshot(0, **values), 8, 8, 0)
    assert held.desired == 8 and f"{field} missing" in held.reason


@pytest.mark.parametrize(
    ("overrides", "window", "holder"),
    [
        ({"scaleDownDelaySeconds": 1800, "scaleDownDelayMode": "Fixed"}, 1800, "(scale-down delay 1800 s)"),
        (
            {
                "scaleDownDelaySeconds": 0,
                "scaleDownDelayMode": "Learned",
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 600}},
            },
            600,
            "(scale-down stabilization window 600 s)",
        ),
    ],
)
def test_the_decline_credit_never_lowers_a_fixed_delay_or_the_stabilization_window(
    overrides: dict[str, Any], window: int, holder: str
) -> None:
    # A demand falling 0.1 replica per 15 s: the decline credit lowered every held recommendation,
    # and a Fixed 1800 s delay released 18 at 900 s where its window still held a 20, an HPA window
    # of 600 s 17 where it held 18.
    s = spec(tolerance=0, **overrides)
    state, current = replace(ScalingState(), service_rate=100.0, measured_since=0.0), 20
    for k in range(160):
        now = 15.0 * k
        arrivals = 80.0 * max(2.0, 20 - 0.1 * k)
        decision = decide(s, state, MetricSnapshot(now, 0.0, 5.0, arrivals), current, current, now)
        state, current = decision.new_state, decision.desired
        assert current >= max(r for t, r in state.recommendations if t > now - window or t == now)
    assert holder in decision.reason


def test_the_reason_says_the_learned_delay_held_less_the_decline() -> None:
    s = spec(scaleDownDelaySeconds=1800, tolerance=0)
    state, current = replace(ScalingState(), service_rate=100.0, measured_since=0.0), 20
    for k in range(100):
        now = 15.0 * k
        arrivals = 80.0 * max(2.0, 20 - 0.1 * k)
        decision = decide(s, state, MetricSnapshot(now, 0.0, 5.0, arrivals), current, current, now)
        state, current = decision.new_state, decision.desired
    assert "(learned scale-down delay 1800 s, less the decline)" in decision.reason


@pytest.mark.parametrize("start", [0.0, 1_764_590_400.0])
def test_the_learned_delay_lowers_each_held_recommendation_by_the_decline_since_it_was_made(start: float) -> None:
    # The demand falls 0.1 replica per 15 s from 20: the trend line's slope is -1/150 replica per
    # second, credited at DECLINE_CREDIT (0.5). At 1,350 s the oldest held recommendation, 20 made at
    # the start, stands at 20 - 1350 / 300 = 15.5: 16 replicas, on any clock (the age counts, not
    # the time of day).
    s = spec(scaleDownDelaySeconds=1800, tolerance=0)
    state, current = replace(ScalingState(), service_rate=100.0, measured_since=start), 20
    for k in range(91):
        now = start + 15.0 * k
        arrivals = 80.0 * (20 - 0.1 * k)
        decision = decide(s, state, MetricSnapshot(now, 0.0, 5.0, arrivals), current, current, now)
        state, current = decision.new_state, decision.desired
    assert DECLINE_CREDIT == 0.5
    assert (decision.recommendation, decision.desired) == (11, 16), decision.reason
    assert "(learned scale-down delay 1800 s, less the decline)" in decision.reason


def test_a_clock_stepped_back_moves_the_warm_pools_demand_history_with_the_autoscalers() -> None:
    # Only the autoscaler's times were moved back: the warm pool's history stayed in the future, no
    # longer oldest first (searchsorted on an unsorted array), and a ramp after the step wanted 9
    # warm pods where the same history moved back wants 5.
    deployment = InferenceDeploymentSpec.model_validate(
        {
            "model": {"source": "s3://models/bert"},
            "scaling": {"minReplicas": 1, "maxReplicas": 40, "targetQueueDepth": 10, "panicWindowSeconds": 0},
            "warmPool": {"mode": "Auto", "maxPods": 20},
        }
    )
    start, memory = 1_800_000_000.0, DeploymentMemory()
    for tick in range(160):  # 40 minutes of a flat demand of 10 replicas
        now = start + 15 * tick
        # (The busy ratio read too, low: with a signal missing the demand is unknown, none recorded.)
        calm = MetricSnapshot(now, queue_depth=50.0, in_flight=50.0, utilization=0.1)
        _, memory = decide_targets(deployment, memory, calm, "", 10, 10, now)
    last = now
    stepped = last - 1800 + 15  # the clock stepped back 30 minutes
    burst = MetricSnapshot(stepped, queue_depth=70.0, in_flight=70.0, utilization=0.1)
    _, memory = decide_targets(deployment, memory, burst, "", 10, 10, stepped)
    times = [t for t, _ in memory.warm_state.history]
    assert times == sorted(times) and times[-1] == stepped
    assert len(times) == 161  # moved, not dropped
    # Moved by the same as the autoscaler's times: the last decision before the step is at one
    # time in both memories.
    assert times[-2] == memory.scaling_state.recommendations[-2][0] == stepped - 15


def test_a_clock_step_moves_every_time_the_autoscaler_keeps_by_the_same_shift() -> None:
    # Left where it was, one time (when the learned hold was last chosen, say) would put its
    # event in the future of the stepped clock, or far in its past.
    from neuronfleet.planning.scaling import _moved

    state = replace(
        ScalingState(),
        recommendations=((1000.0, 5),),
        scale_events=((990.0, 1),),
        launches=((995.0, 6),),
        demands=((1000.0, 5.0),),
        rates=((1000.0, 4.0),),
        recent=((1000.0, 5, 4.0),),
        panic_since=980.0,
        panic_last_triggered=985.0,
        hold_chosen_at=970.0,
        measured_since=900.0,
        fleet_found=(960.0, 4),
    )
    moved = _moved(state, -300.0)
    pairs = ("recommendations", "scale_events", "launches", "demands", "rates", "recent")
    assert all(getattr(moved, name)[0][0] == getattr(state, name)[0][0] - 300 for name in pairs)
    assert (moved.panic_since, moved.panic_last_triggered, moved.hold_chosen_at, moved.measured_since) == (
        680.0,
        685.0,
        670.0,
        600.0,
    )
    assert moved.fleet_found == (660.0, 4)


def test_a_restart_after_a_clock_step_back_records_the_new_minutes_after_the_history() -> None:
    # The checkpoint's history ends 10 minutes after the restart's clock: hold.resume kept it there,
    # and the new decisions were folded into its future (busy) minutes instead of growing it.
    s = spec(scaleDownDelaySeconds=600)
    t0 = 1_800_000_000.0
    last = int(t0 // 60)
    history = hold.History(last - 119, (40,) * 120, (5,) * 100 + (30,) * 20)
    now = t0 - 600
    state = take_over(Checkpoint(t0, 50.0, 60.0, 600.0, history, None), now, 10, s.target_utilization)
    for tick in range(8):
        at = now + 15 * tick
        calm = MetricSnapshot(at, queue_depth=0, in_flight=2, arrival_rate=100, utilization=0.2)
        state = decide(s, state, calm, 10, 10, at).new_state
    h = state.history
    assert h.first_minute + len(h.needs) - 1 == int(at // 60)
    assert len(h.needs) == 122 and h.needs[-2:] == (2, 2) and h.needs[-3] == 30


def test_metrics_missing_after_a_clock_step_back_renew_the_checkpoint() -> None:
    # The missing-metrics path moved the state back but kept the checkpoint's future time and its
    # history from before the step (status.autoscaler showed both).
    t0 = 1_800_000_000.0
    history = hold.History(int(t0 // 60) - 9, (5,) * 10, (4,) * 10)
    state = ScalingState(
        recommendations=((t0, 5),),
        recent=((t0, 5, 100.0),),
        service_rate=20.0,
        history=history,
        checkpoint=Checkpoint(t0, 20.0, 60.0, 600.0, history, None),
        measured_since=t0 - 600,
    )
    now = t0 - 900
    decision = decide(spec(scaleDownDelaySeconds=600), state, None, 5, 5, now)
    assert decision.reason.startswith("metrics missing")
    checkpoint = decision.new_state.checkpoint
    assert checkpoint is not None and checkpoint.time == now
    assert checkpoint.history == decision.new_state.history
    assert checkpoint.history.first_minute + len(checkpoint.history.needs) - 1 < int(now // 60)


def test_manual_mode_forgets_the_auto_scale_events() -> None:
    # Kept, Auto's +4 was subtracted from the Manual count of 2 back in Auto: the period "started"
    # at -2 and a burst was limited to 2 replicas for the rest of the 600 s period.
    base: dict[str, Any] = {
        "scaleDownDelaySeconds": 0,
        "behavior": {"scaleUp": {"policies": [{"type": "Pods", "value": 4, "periodSeconds": 600}]}},
    }
    auto, manual = spec(**base), spec(**base, mode="Manual", replicas=2)

    def busy(t: float, load: float) -> MetricSnapshot:
        return MetricSnapshot(t, queue_depth=load / 2, in_flight=load / 2, utilization=0.9)

    state, current = ScalingState(), 6
    for t in (0.0, 15.0):
        decision = decide(auto, state, busy(t, 100), current, current, t)
        state, current = decision.new_state, decision.desired
    assert current == 10 and state.scale_events
    decision = decide(manual, state, busy(60, 100), current, current, 60)
    state, current = decision.new_state, decision.desired
    assert current == 2 and state.scale_events == ()
    decision = decide(auto, state, busy(120, 300), current, current, 120)
    assert decision.desired == 4  # +4 from the Manual count, as a fresh autoscaler's first step


@pytest.mark.parametrize("peak_off", [False, True])
def test_an_empty_arrival_rate_sizes_the_fleet_as_before_a_measurement(peak_off: bool) -> None:
    # Turned off with a service rate known (resumed, or learned before the edit), the fleet was
    # sized on the peak alone (20 busy replicas shrank to 2), or with the peak off too on no signal
    # at all: held for good, the reason saying "metrics missing (all)".
    metrics = {"arrivalRate": "", **({"arrivalPeak": ""} if peak_off else {})}
    s = spec(scaleDownDelayMode="Fixed", metrics=metrics)
    state, current = ScalingState(service_rate=10.0, measured_since=0.0), 20
    for tick in range(1, 6):
        now = 15.0 * tick
        snapshot = MetricSnapshot(now, queue_depth=100.0, in_flight=100.0, utilization=0.2, arrival_peak=20.0)
        decision = decide(s, state, snapshot, current, current, now)
        state, current = decision.new_state, decision.desired
    assert set(decision.signals) == {"load", "utilization"}
    assert current == 20  # load 200 / 10 at target: 20, where the peak alone wanted 2
    assert state.service_rate == 10.0  # kept for when the query is back


def test_a_fleet_with_every_signal_turned_off_says_so() -> None:
    s = spec(metrics={"arrivalRate": "", "queueDepth": "", "inFlight": "", "utilization": ""})
    decision = decide(s, ScalingState(), MetricSnapshot(0.0), 3, 3, 0.0)
    assert decision.desired == 3
    assert (
        decision.reason
        == "no signal to scale on (arrival_rate, in_flight, queue_depth, utilization turned off): holding 3"
    )


def test_a_forgotten_service_rate_is_said_to_4_significant_digits() -> None:
    # To 0.1/s, a slow LLM's 0.04/s read "0.0/s forgotten".
    state = ScalingState(service_rate=0.04321, service_rate_key="rev-a")
    snapshot = MetricSnapshot(0.0, queue_depth=0, in_flight=1, utilization=0.5, arrival_rate=0.1)
    decision = decide(spec(), state, snapshot, 3, 3, 0.0, rate_key="rev-b")
    assert "service rate 0.04321/s forgotten: now rev-b" in decision.reason


def test_an_absurd_finite_arrival_rate_is_no_service_rate() -> None:
    # 1e300/s held 30 s is finite: learned, every later arrival rate read as no demand and the fleet
    # of 10 fell to minReplicas.
    s = spec()
    state, current = ScalingState(), 10
    for tick in range(6):
        now = 15.0 * tick
        snapshot = MetricSnapshot(now, queue_depth=0.0, in_flight=10.0, arrival_rate=1e300, utilization=0.5)
        decision = decide(s, state, snapshot, current, current, now)
        state, current = decision.new_state, decision.desired
    assert state.service_rate is None
    assert current >= 5


def test_a_utilization_signal_with_no_ready_replica_to_read_is_not_turned_off() -> None:
    # In-flight turned off (so no load signal) and no replica ready yet: the busy ratio is read but
    # sizes nothing until a replica is ready. The decision said "no signal to scale on (in_flight
    # turned off)", and the warm pool took its demand for unmeasured by design and aged out as in
    # Manual mode, where the fleet only waited for its first replica.
    s = spec(metrics={"inFlight": ""})
    snapshot = MetricSnapshot(0.0, queue_depth=0.0, utilization=0.0)
    decision = decide(s, ScalingState(), snapshot, 3, 0, 0.0)
    assert decision.desired == 3
    assert decision.signals_off == ()
    assert unmeasured(s, decision) is None
    assert decision.reason == "no ready replica to measure utilization on (in_flight turned off): holding 3"
    # A signal missing besides is said as missing: the wait for a replica is not why it holds.
    missing_queue = decide(s, ScalingState(), MetricSnapshot(0.0, utilization=0.0), 3, 0, 0.0)
    assert missing_queue.desired == 3
    assert missing_queue.reason == "metrics missing (queue_depth): holding 3"


@pytest.mark.parametrize(("before", "after"), [(0.8, 0.5), (0.9, 0.45), (0.5, 0.8)])
def test_a_changed_target_utilization_is_not_read_as_a_demand_that_moves(before: float, after: float) -> None:
    # A reviewer's reproduction: an SRE lowers spec.scaling.targetUtilization on a flat demand. The
    # trend's readings were kept in replicas at the old target, so the rate signal's step (10 -> 16
    # replicas at 80/s) read as a rising demand: the trend asked for 18 and held them 30 minutes.
    # Raised instead, the step read as a falling demand, and the learned delay's decline credit
    # released replicas the demand still needed sooner than its window.
    service_rate, arrival = 10.0, 80.0
    state, current, t = ScalingState(service_rate=service_rate), math.ceil(arrival / (service_rate * before)), 0.0
    flat = {"minReplicas": 1, "maxReplicas": 100, "panicWindowSeconds": 0}
    snapshot = {"queue_depth": 0.0, "in_flight": 1.0, "arrival_rate": arrival, "arrival_peak": arrival}
    for _ in range(120):  # 30 minutes at the first target
        decision = decide(
            spec(**flat, targetUtilization=before), state, MetricSnapshot(t, **snapshot), current, current, t
        )
        state, current, t = decision.new_state, decision.desired, t + 15
    needed = math.ceil(arrival / (service_rate * after) - 1e-9)
    seen = []
    for _ in range(120):  # the next 30 minutes at the second, the demand unchanged
        decision = decide(
            spec(**flat, targetUtilization=after), state, MetricSnapshot(t, **snapshot), current, current, t
        )
        state, current, t = decision.new_state, decision.desired, t + 15
        seen.append((decision.recommendation, decision.reason))
        assert "trend" not in decision.signals, decision.reason
    assert {r for r, _ in seen} == {needed}, seen[:3]
    assert not [why for _, why in seen if "less the decline" in why]
    assert current == needed


def test_a_scale_up_the_fleet_was_lowered_from_is_not_measured_when_a_later_one_reaches_its_count() -> None:
    # A scale-up to 8 from 5 is still starting when the fleet is put back at 5 (a Manual count, or
    # a count set by hand): its pods were cancelled. Left waiting, the next scale-up to 8 would
    # record the first one's age as a cold start, and the warm pool and the hold read that estimate.
    s = spec()
    waiting = replace(ScalingState(), launches=((0.0, 8),))
    manual = decide(spec(mode="Manual", replicas=5), waiting, snap(100, 50), 5, 5, 100)
    assert manual.new_state.launches == ()
    # The same in Auto when the decision keeps the fleet at a count below the scale-up (5 of 5).
    kept = decide(s, waiting, snap(100, 50), 5, 5, 100)
    assert kept.desired == 5
    assert kept.new_state.launches == ()
    # A scale-up to 8 at 400 s served at 700 s measures 300 s, not 700; a decision between, keeping
    # the 8 while 3 of them still start, keeps it waiting.
    up = decide(s, kept.new_state, snap(400, 80), 5, 5, 400)
    assert up.desired == 8
    starting = decide(s, up.new_state, snap(550, 80), 8, 5, 550)
    assert starting.desired == 8 and starting.new_state.launches == up.new_state.launches
    served = decide(s, starting.new_state, snap(700, 80), 8, 8, 700)
    assert served.new_state.cold_start == 300


@pytest.mark.parametrize(
    ("util", "queued", "measured"),
    [(0.2, 0, 250.0), (0.95, 0, 200 / 3.8), (0.5, 4, 100.0), (0.199, 0, None), (0.951, 0, None), (0.5, 5, None)],
)
def test_the_service_rate_bounds_are_inclusive(util: float, queued: float, measured: float | None) -> None:
    # 200/s over 4 ready replicas: measured at a utilization from 0.2 to 0.95 inclusive and with at
    # most one request queued per ready replica; just outside either bound, not.
    s = spec()
    state = ScalingState()
    for tick in range(3):
        sample = MetricSnapshot(time=tick * 15, queue_depth=queued, in_flight=4, arrival_rate=200, utilization=util)
        state = decide(s, state, sample, 4, 4, tick * 15).new_state
    assert state.service_rate == (None if measured is None else pytest.approx(measured))


def test_a_busy_ratio_read_with_no_replica_ready_measures_no_service_rate() -> None:
    # A custom utilization query may answer while no replica is ready (the default averages ready
    # pods only): 200/s over no ready replica is no rate a replica serves, and no division by zero.
    s = spec()
    state = ScalingState()
    for tick in range(3):
        sample = MetricSnapshot(time=tick * 15, queue_depth=0, in_flight=0, arrival_rate=200, utilization=0.5)
        state = decide(s, state, sample, 2, 0, tick * 15).new_state
    assert state.service_rate is None


def test_a_fleet_found_at_the_takeover_stops_being_named_once_out_of_the_window() -> None:
    # 10 replicas found at 0 s, held 300 s; a burst at 105 s asks for 8, held by the delay until
    # 405 s. Past 300 s the 8 are the delay's, not the fleet found's: it is still remembered (the
    # scale-up window is longer) but holds nothing down.
    windows = {"scaleDown": {"stabilizationWindowSeconds": 60}, "scaleUp": {"stabilizationWindowSeconds": 600}}
    s = spec(scaleDownDelayMode="Fixed", scaleDownDelaySeconds=300, behavior=windows)
    state = take_over(None, 0.0, 10, s.target_utilization)
    current, said = 10, {}
    for t in range(0, 421, 15):
        decision = decide(s, state, snap(t, 80 if t == 105 else 20, 0.05), current, current, float(t))
        state, current = decision.new_state, decision.desired
        said[t] = (decision.desired, decision.reason.partition("; ")[2])
    assert said[285] == (10, "stabilized to 10 (fleet found at the takeover, held 300 s)")
    assert {said[t] for t in range(300, 391, 15)} == {(8, "stabilized to 8 (scale-down delay 300 s)")}
    assert said[405] == (2, "")
