"""The scaling policy: signals, tolerance, stabilization, rate limits, panic, missing metrics, bounds."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from neuronfleet.api.v1alpha1 import ScalingSpec
from neuronfleet.planning.scaling import ScalingState, decide
from neuronfleet.planning.signals import MetricSnapshot


def spec(**overrides: Any) -> ScalingSpec:
    base: dict[str, Any] = {"minReplicas": 1, "maxReplicas": 100, "targetQueueDepth": 10, "panicWindowSeconds": 0}
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


def test_manual_mode() -> None:
    decision = decide(spec(mode="Manual", replicas=3), ScalingState(), None, 9, 9, 0)
    assert decision.desired == 3


def test_arrival_rate_signal_after_service_rate_is_known() -> None:
    # 4 replicas at 50 % serve 200/s: 100 /s each. Then 800/s arrive: 800 / (100 x 0.8) = 10.
    first = decide(spec(), ScalingState(), snap(0, 20, 0.5, rate=200), 4, 4, 0)
    assert first.new_state.service_rate == 100
    second = decide(spec(), first.new_state, snap(15, 20, 0.5, rate=800), 4, 4, 15)
    assert second.recommendation == 10


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
    first = decide(spec(), ScalingState(), snap(0, 20, 0.5, rate=200), 4, 4, 0)
    saturated = decide(spec(), first.new_state, snap(15, 5000, 1.0, rate=600), 4, 4, 15)
    assert saturated.signals["load"] == 8
    assert saturated.demand == 8  # 600 / (100 x 0.8) = 7.5 -> 8, not the queue's 500
    no_rate = decide(spec(), ScalingState(), snap(0, 60, 0.1), 4, 4, 0)
    assert no_rate.demand == no_rate.recommendation == 6
