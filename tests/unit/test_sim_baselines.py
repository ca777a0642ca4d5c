"""Baseline fidelity: HPA, KEDA, Knative KPA and Ray Serve against hand-computed scenarios."""

from __future__ import annotations

import numpy as np

from neuronfleet.api.v1alpha1 import ScalingBehavior
from neuronfleet.sim import engine
from neuronfleet.sim.baselines import Hpa, HpaBehavior, Keda, Kpa, RayServe
from neuronfleet.sim.profiles import load_profile
from neuronfleet.sim.trace import Trace
from neuronfleet.sim.workload import build


def test_hpa_tolerance_and_ratio() -> None:
    hpa = Hpa(0.5, 1, 100, "0.5")
    assert hpa.recommend(0.54, current=10, ready=10) == 10  # |1 - 1.08| <= 0.1
    assert hpa.recommend(0.6, current=10, ready=10) == 12  # ceil(1.2 x 10)
    assert hpa.recommend(0.9, current=12, ready=10) == 18  # ready pods only
    assert hpa.recommend(None, current=7, ready=7) == 7


def test_hpa_scale_up_policies_4_pods_or_100_percent_per_15s() -> None:
    behavior = HpaBehavior(min_replicas=1, max_replicas=100)
    assert behavior.normalize(100, current=2, now=0) == 6  # max(2 + 4, 2 x 2)
    behavior = HpaBehavior(min_replicas=1, max_replicas=100)
    assert behavior.normalize(100, current=10, now=0) == 20  # max(10 + 4, 10 x 2)
    # Within the same 15 s period the start count is 10, so 20 is still the limit.
    assert behavior.normalize(100, current=20, now=5) == 20
    assert behavior.normalize(100, current=20, now=16) == 40
    # A small step leaves room in its period: 10 -> 12, then within the same 15 s up to 20 (the limit
    # counted from the period's start, 10), not held at 12 as if the period were used up.
    behavior = HpaBehavior(min_replicas=1, max_replicas=100)
    assert behavior.normalize(12, current=10, now=0) == 12
    assert behavior.normalize(100, current=12, now=5) == 20


def test_hpa_300s_downscale_stabilization() -> None:
    behavior = HpaBehavior(min_replicas=1, max_replicas=100)
    behavior.normalize(20, current=20, now=0)
    desired = {now: behavior.normalize(5, current=20, now=now) for now in range(15, 316, 15)}
    assert all(d == 20 for t, d in desired.items() if t < 300)
    assert desired[300] == 5  # the recommendation of 20 at t=0 left the window (> now - 300)


def test_hpa_counts_a_change_against_a_policy_for_its_whole_period_up_to_1800s() -> None:
    # One pod per 1,800 s (the longest period HPA allows): the step at t = 0 uses the period up.
    behavior = HpaBehavior(
        behavior=ScalingBehavior.model_validate(
            {"scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 1800}]}}
        ),
        min_replicas=1,
        max_replicas=100,
    )
    assert behavior.normalize(10, current=2, now=0) == 3
    assert [behavior.normalize(10, current=3, now=now) for now in (15, 900, 1799)] == [3, 3, 3]
    assert behavior.normalize(10, current=3, now=1801) == 4


def test_keda_average_value_then_hpa_behavior() -> None:
    keda = Keda(10, 1, 100, "10")
    assert keda.step(0, 100.0, current=4)[0] == 8  # ceil(100 / 10) = 10, limited to max(4 + 4, 2 x 4)
    assert keda.step(15, 42.0, current=4)[0] == 4  # 42 / (10 x 4) = 1.05: within tolerance


def test_keda_cooldown_to_zero_and_activation() -> None:
    keda = Keda(10, 0, 100, "10", activation_threshold=0.0)
    keda.behavior.behavior.scale_down.stabilization_window_seconds = 0
    assert keda.step(0, 5.0, current=2)[0] == 1  # active: HPA scales to ceil(5 / 10)
    replicas = 1
    history = {}
    for now in range(15, 346, 15):
        replicas, _ = keda.step(now, 0.0, current=replicas)
        history[now] = replicas
    assert all(r == 1 for t, r in history.items() if t < 300)
    assert history[300] == 0  # first 30 s poll at or after 300 s of inactivity
    # Strictly greater than the activation threshold: 0 does not activate, 0.5 does (at a poll).
    assert keda.step(330, 0.0, current=0)[0] == 0
    assert keda.step(360, 0.5, current=0)[0] == 1
    # Active again at 360: the cooldown to zero counts from that poll, not from the first activity.
    assert keda.step(390, 0.0, current=1)[0] == 1
    assert keda.step(630, 0.0, current=1)[0] == 1
    assert keda.step(660, 0.0, current=1)[0] == 0


def test_kpa_panics_at_twice_ready_and_holds() -> None:
    kpa = Kpa(10, 1, 1000, "10")
    desired, panic = kpa.step(0, stable=100, panic=190, ready=10)
    assert (desired, panic) == (10, False)  # panic 19 / 10 < 2: the stable count rules
    desired, panic = kpa.step(2, stable=100, panic=200, ready=10)
    assert (desired, panic) == (20, True)  # 20 / 10 >= 2: panic, panic count wins
    # The burst passes: panic holds the count (never scales down) for one stable window.
    for now in range(4, 63, 2):
        desired, panic = kpa.step(now, stable=50, panic=50, ready=20)
        assert (desired, panic) == (20, True), now
    desired, panic = kpa.step(64, stable=50, panic=50, ready=20)
    assert not panic
    assert desired == 10  # ceil(50 / 10), limited to floor(20 / 2) = 10 per tick anyway


def test_kpa_scale_down_rate_is_2x_per_tick() -> None:
    kpa = Kpa(10, 1, 1000, "10")
    assert kpa.step(0, stable=10, panic=10, ready=40)[0] == 20


def test_ray_serve_upscale_and_downscale_delays() -> None:
    ray = RayServe(2, 1, 100, "2")
    applied = [ray.step(total_ongoing=40.0, current=5) for _ in range(31)]
    assert applied[:30] == [5] * 30
    assert applied[30] == 20  # after more than upscale_delay (30 s) of 1 s periods
    ray = RayServe(2, 1, 100, "2")
    down = [ray.step(total_ongoing=2.0, current=10) for _ in range(601)]
    assert set(down[:600]) == {10}
    assert down[600] == 1


def test_ray_serve_counter_resets_on_direction_change() -> None:
    ray = RayServe(2, 1, 100, "2")
    for _ in range(20):
        ray.step(40.0, 5)
    ray.step(2.0, 5)  # one decision downwards resets the upscale count
    assert [ray.step(40.0, 5) for _ in range(30)] == [5] * 30


def test_ray_serve_counter_resets_when_the_decision_holds() -> None:
    ray = RayServe(2, 1, 100, "2")
    for _ in range(600):
        assert ray.step(10.0, 5) == 5  # 10 ongoing / 2 per replica: the count holds
    # Fewer wanted from now: the whole downscale delay still runs from here.
    assert [ray.step(2.0, 5) for _ in range(600)] == [5] * 600
    assert ray.step(2.0, 5) == 1


def test_kpa_activator_in_path_when_excess_burst_capacity_is_negative() -> None:
    kpa = Kpa(70, 1, 100, "70")
    # 100 per pod before the 0.7 utilization; TBC 200: 3 pods and 99 in flight leave 1 -> out of path.
    assert kpa.excess_burst_capacity(3, 99.0) == 1
    assert kpa.excess_burst_capacity(3, 101.0) < 0
    assert kpa.excess_burst_capacity(2, 0.0) == 0
    assert Kpa(70, 1, 100, "70", target_burst_capacity=-1).excess_burst_capacity(50, 0.0) < 0


def test_ray_serve_replicas_cap_ongoing_requests_and_queue_in_the_router() -> None:
    profile = load_profile("bert-base")
    # 2,800 requests/s for one minute: one replica with batches of 16 keeps up (2,940/s); capped at
    # batches of 4 (max_ongoing_requests 5) it does not (2,700/s), and the excess waits, unrefused.
    trace = Trace(np.arange(0, 60, 0.01), None, None, "steady")
    workload = build(trace, profile, 28.0, jitter=0.0, seed=0)
    ray = RayServe(2, 1, 1, "2")
    result = engine.run(workload, profile, ray, start_replicas=1, seed=0)
    uncapped = RayServe(2, 1, 1, "2", max_ongoing_requests=1000)
    free = engine.run(workload, profile, uncapped, start_replicas=1, seed=0)
    assert result.rejected == 0
    assert result.p99_ms > 10 * free.p99_ms
    assert free.slo_attainment > 0.99 > result.slo_attainment


def test_the_baselines_decide_without_the_measured_cold_starts() -> None:
    # The engine keeps the running cold-start p90 only for a policy that says it reads it (a
    # Knative run measures two million cold starts): given to a baseline that says it does not, it
    # changes none of its decisions.
    profile = load_profile("bert-base")
    rng = np.random.default_rng(4)
    # Two bursts over a quiet half hour: each baseline launches pods (cold starts measured) and
    # scales them down again.
    rate = np.where((np.arange(1800) // 300) % 3 == 1, 40.0, 4.0)
    arrivals = np.sort(np.concatenate([s + rng.random(rng.poisson(r)) for s, r in enumerate(rate)]))
    workload = build(Trace(arrivals, None, None, "bursts"), profile, 100.0, jitter=0.0, seed=0)
    for make in (
        lambda: Hpa(0.2, 1, 40, "0.2"),
        lambda: Keda(8, 1, 40, "8"),
        lambda: Kpa(10, 1, 40, "10"),
        lambda: RayServe(2, 1, 40, "2"),
    ):
        declared, given = make(), make()
        assert not declared.reads_cold_starts
        given.reads_cold_starts = True
        runs = [engine.run(workload, profile, policy, start_replicas=3, seed=1) for policy in (declared, given)]
        # At least three launches: the p90 given is known.
        assert max(runs[0].timeline["active"]) >= 6 and runs[0].timeline == runs[1].timeline, declared.name
        assert (runs[0].within_slo, runs[0].usd) == (runs[1].within_slo, runs[1].usd), declared.name
