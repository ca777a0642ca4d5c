"""Warm-pool sizing: Off, Fixed, Auto on synthetic demand histories, and its bounds."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from neuronfleet.api.v1alpha1 import WarmPoolSpec
from neuronfleet.planning import warmpool
from neuronfleet.planning.warmpool import ColdStart, WarmPoolState, demand_increase_quantile, plan


def auto(**overrides: Any) -> WarmPoolSpec:
    base: dict[str, Any] = {"mode": "Auto", "maxPods": 50, "maxNodePlaceholders": 50, "coldStartTargetSeconds": 1}
    base.update(overrides)
    return WarmPoolSpec.model_validate(base)


def feed(spec: WarmPoolSpec, demand: list[int], step: float = 15, cold: ColdStart | None = None) -> Any:
    state = WarmPoolState()
    decision = None
    for i, d in enumerate(demand):
        decision = plan(spec, state, d, i * step, cold)
        state = decision.new_state
    assert decision is not None
    return decision


def test_off_and_fixed() -> None:
    assert feed(WarmPoolSpec(mode="Off"), [1, 5, 9]).pods == 0
    fixed = feed(WarmPoolSpec(mode="Fixed", pods=3, node_placeholders=1), [1, 5, 9])
    assert (fixed.pods, fixed.node_placeholders) == (3, 1)


def test_flat_demand_needs_no_warm_pods() -> None:
    decision = feed(auto(), [10] * 100, cold=ColdStart(pod_seconds=300, node_seconds=120))
    assert decision.pods == 0
    assert decision.node_placeholders == 0


def test_steps_are_covered_within_one_cold_start() -> None:
    # Demand steps up by 6 replicas every 150 s (10 ticks): within a 300 s cold start it grows by 12.
    demand = [10 + 6 * (i // 10) for i in range(200)]
    decision = feed(auto(coverage=0.95), demand, cold=ColdStart(pod_seconds=300, node_seconds=150))
    assert decision.pods == 12
    # Within 450 s it grows by 18: 6 more than the warm pods need a node waiting.
    assert decision.node_placeholders == 6
    assert "300s" in decision.reason


def test_coverage_quantile_ignores_rare_spikes() -> None:
    demand = [10] * 200
    demand[100] = 40  # one spike: increase 30 seen from only a few window starts out of ~200
    low = feed(auto(coverage=0.9), demand, cold=ColdStart(pod_seconds=60, node_seconds=60))
    high = feed(auto(coverage=0.999), demand, cold=ColdStart(pod_seconds=60, node_seconds=60))
    assert low.pods == 0
    assert high.pods == 30


def test_cold_start_target_shortens_the_horizon() -> None:
    demand = [10 + (i // 2) for i in range(100)]  # +1 replica every 30 s
    long = feed(auto(coldStartTargetSeconds=1), demand, cold=ColdStart(pod_seconds=300, node_seconds=1))
    short = feed(auto(coldStartTargetSeconds=240), demand, cold=ColdStart(pod_seconds=300, node_seconds=1))
    assert long.pods == 10
    assert short.pods == 2


def test_assumed_cold_start_until_measured() -> None:
    demand = [10 + (i // 2) for i in range(100)]
    decision = feed(auto(assumedPodColdStartSeconds=120), demand)
    assert decision.pods == 4


def test_bounds_apply() -> None:
    demand = [10 + 6 * (i // 10) for i in range(200)]
    decision = feed(auto(minPods=1, maxPods=5, maxNodePlaceholders=2), demand, cold=ColdStart(300, 150))
    assert decision.pods == 5
    assert decision.node_placeholders == 2


def test_increase_quantile_of_empty_history_is_zero() -> None:
    assert demand_increase_quantile((), 300, 0.95) == 0.0
    assert demand_increase_quantile(((0.0, 3),), 300, 0.95) == 0.0


@settings(max_examples=100, deadline=None)
@given(
    demand=st.lists(st.integers(0, 500), min_size=0, max_size=60),
    low=st.integers(0, 10),
    span=st.integers(0, 20),
    placeholders=st.integers(0, 10),
    coverage=st.floats(0.5, 0.999),
)
def test_warm_pool_within_bounds(demand: list[int], low: int, span: int, placeholders: int, coverage: float) -> None:
    s = auto(minPods=low, maxPods=low + span, maxNodePlaceholders=placeholders, coverage=coverage)
    state = WarmPoolState()
    for i, d in enumerate(demand):
        decision = plan(s, state, d, i * 15.0, ColdStart(200, 100))
        state = decision.new_state
        assert low <= decision.pods <= low + span
        assert 0 <= decision.node_placeholders <= placeholders


def test_active_headroom_counts_against_the_growth() -> None:
    demand = [10 + 6 * (i // 10) for i in range(200)]
    spec = auto(coverage=0.95)
    state = WarmPoolState()
    for i, d in enumerate(demand[:-1]):
        state = plan(spec, state, d, i * 15.0, ColdStart(300, 150)).new_state
    last = demand[-1]
    without = plan(spec, state, last, 199 * 15.0, ColdStart(300, 150))
    with_headroom = plan(spec, state, last, 199 * 15.0, ColdStart(300, 150), active=last + 5)
    assert without.pods == 12
    assert with_headroom.pods == 7
    assert with_headroom.node_placeholders == 6  # 18 - 5 headroom - 7 warm
    assert "active headroom 5" in with_headroom.reason


def test_standby_never_exceeds_what_max_replicas_lets_promote() -> None:
    demand = [10 + 6 * (i // 10) for i in range(200)]
    spec = auto(coverage=0.95)
    state = WarmPoolState()
    for i, d in enumerate(demand[:-1]):
        state = plan(spec, state, d, i * 15.0, ColdStart(300, 150)).new_state
    capped = plan(
        spec, state, demand[-1], 199 * 15.0, ColdStart(300, 150), active=demand[-1], max_active=demand[-1] + 3
    )
    assert capped.pods == 3
    assert capped.node_placeholders == 0


def test_min_pods_beyond_max_replicas_leaves_no_negative_placeholders() -> None:
    # The active fleet is at maxReplicas, so there is no room to promote into, yet minPods still
    # holds: the warm pods take more than the room, and the placeholders must stop at zero (a
    # negative count made the fleet plan slice its placeholder list from the end).
    spec = auto(minPods=2, maxPods=4, maxNodePlaceholders=2)
    state = WarmPoolState()
    for i, d in enumerate([1, 1, 3, 3, 1, 1, 3, 3]):
        decision = plan(spec, state, d, i * 60.0, ColdStart(300, 150), active=3, max_active=3)
        state = decision.new_state
        assert decision.pods == 2
        assert decision.node_placeholders == 0


def test_the_history_is_capped_however_long_the_cold_start() -> None:
    # A measured cold start of 10 h kept four times that in history: 9,600 decisions at 15 s, each
    # walked by every call (150 ms a call). Now at most MAX_HISTORY_SECONDS of them.
    sawtooth = [2 + (i // 20) % 6 for i in range(1200)]
    hours = feed(auto(), sawtooth, cold=ColdStart(pod_seconds=36000.0, node_seconds=180.0))
    history = hours.new_state.history
    assert history[-1][0] - history[0][0] <= warmpool.MAX_HISTORY_SECONDS
    assert len(history) == warmpool.MAX_HISTORY_SECONDS / 15 + 1
    assert f"history {len(history)} samples over 7200s" in hours.reason
    # The newest decisions are kept whole: the estimate is the one the kept span gives.
    horizon = 36000.0 - 1
    assert hours.pods == min(50, math.ceil(demand_increase_quantile(history, horizon, 0.95)))
    # A node horizon up to a quarter of the cap keeps its four horizons, as before the cap.
    # (node horizon 1500 + 300 - 1 = 1799 s: 7196 s kept, 7185 s between the 15 s ticks)
    quarter = feed(auto(), sawtooth, cold=ColdStart(pod_seconds=1500.0, node_seconds=300.0)).new_state.history
    assert quarter[-1][0] - quarter[0][0] == 7185
    # Decisions every second: the newest MAX_HISTORY_SAMPLES.
    fast = feed(auto(), sawtooth * 2, step=1.0).new_state.history
    assert len(fast) == warmpool.MAX_HISTORY_SAMPLES
    assert fast[-1][0] == 2399.0


def naive_increase_quantile(history: tuple[tuple[float, int], ...], horizon: float, coverage: float) -> float:
    """The rule as first written: each window's maximum by a slice (O(n x window))."""
    if horizon <= 0 or len(history) < 2:
        return 0.0
    times = np.array([t for t, _ in history], dtype=float)
    demand = np.array([d for _, d in history], dtype=float)
    ends = np.searchsorted(times, times + horizon, side="right")
    increases = [demand[i + 1 : max(ends[i], i + 2)].max() - demand[i] for i in range(len(history) - 1)]
    return float(np.quantile(np.maximum(increases, 0.0), coverage, method="inverted_cdf"))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from([0.0, 1.0, 5.0, 15.0, 40.0, 300.0]), st.integers(0, 60)), max_size=300),
    st.floats(0.0, 3000.0),
    st.floats(0.5, 0.999),
)
def test_increase_quantile_is_the_windows_exact_maximum(
    steps: list[tuple[float, int]], horizon: float, coverage: float
) -> None:
    # Uneven ticks, repeated times (gap 0), horizons shorter than a tick and longer than the history.
    history, t = [], 0.0
    for gap, demand in steps:
        t += gap
        history.append((t, demand))
    assert demand_increase_quantile(tuple(history), horizon, coverage) == naive_increase_quantile(
        tuple(history), horizon, coverage
    )


def test_samples_after_now_are_dropped_so_the_history_stays_oldest_first() -> None:
    # A clock stepped back by less than a decision moves the history (between two decisions): the
    # sample appended at now went before later ones, and searchsorted ran on an unsorted array.
    state = WarmPoolState(tuple((100.0 + 15 * i, 10) for i in range(20)))
    after = plan(auto(), state, 12, 300.0).new_state
    times = [t for t, _ in after.history]
    assert times == sorted(times) and times[-1] == 300.0 and len(times) == 15


@settings(max_examples=60, deadline=None)
@given(
    demand=st.lists(st.integers(0, 30), min_size=2, max_size=40),
    active=st.integers(0, 30),
    max_active=st.integers(0, 30),
    low=st.integers(0, 5),
    span=st.integers(0, 10),
    placeholders=st.integers(0, 10),
)
def test_standby_range_bounds_what_auto_sizing_keeps_and_is_reached(
    demand: list[int], active: int, max_active: int, low: int, span: int, placeholders: int
) -> None:
    # validate plans the pod counts from standby_range; the operator sizes with plan(): one rule.
    spec = auto(minPods=low, maxPods=low + span, maxNodePlaceholders=placeholders, coverage=0.99)
    least, most = warmpool.standby_range(spec, active, max_active)
    state = WarmPoolState()
    for i, d in enumerate(demand):
        decision = plan(spec, state, d, i * 15.0, ColdStart(600, 600), active=active, max_active=max_active)
        state = decision.new_state
        assert least <= decision.pods + decision.node_placeholders <= most
    # The most is reached: a step larger than the bounds within the horizon, and no headroom.
    step = plan(
        spec, WarmPoolState(history=((0.0, 0), (15.0, 1000))), None, 30.0, ColdStart(600, 600), active, max_active
    )
    assert step.pods + step.node_placeholders == most
    assert least == low and most <= max(max_active - active, low)


def test_standby_range_of_off_and_fixed_ignores_the_active_count() -> None:
    assert warmpool.standby_range(WarmPoolSpec(mode="Off"), 3, 3) == (0, 0)
    fixed = WarmPoolSpec(mode="Fixed", pods=2, node_placeholders=1)
    assert warmpool.standby_range(fixed, 10, 10) == warmpool.standby_range(fixed, 0, 10) == (3, 3)
