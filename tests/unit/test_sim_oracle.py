"""The feasible oracle on hand-computed cases, and its place between the instant oracle and a static fleet."""

from __future__ import annotations

import numpy as np
import pytest

from neuronfleet.sim import engine, oracle, runner
from neuronfleet.sim.policies import Static
from neuronfleet.sim.profiles import load_profile
from neuronfleet.sim.trace import Trace
from neuronfleet.sim.workload import build


def demand(*runs: tuple[int, int, int], seconds: int = 400) -> np.ndarray:
    d = np.zeros(seconds, dtype=np.int64)
    for start, stop, level in runs:
        d[start:stop] = np.maximum(d[start:stop], level)
    return d


def test_a_gap_shorter_than_a_relaunch_is_bridged() -> None:
    d = demand((100, 200, 1), (250, 350, 1))
    # Launch 60 s: keeping the node through the 50 s gap (250 s + one launch = 310) beats two launches (320).
    plan = oracle.feasible_plan(d, 60.0, start_nodes=0)
    assert plan.billed_node_seconds == pytest.approx(310.0)
    assert plan.launches == 1
    assert plan.serving[100:350].min() == 1 and plan.serving[:100].max() == 0 and plan.serving[350:].max() == 0
    # Launch 5 s: relaunching (2 x 105) is cheaper than keeping (255).
    plan = oracle.feasible_plan(d, 5.0, start_nodes=0)
    assert plan.billed_node_seconds == pytest.approx(210.0)
    assert plan.launches == 2
    assert plan.serving[210:240].max() == 0


def test_levels_are_bridged_one_by_one_and_the_starting_fleet_is_free() -> None:
    d = demand((0, 30, 2), (0, 100, 1), (70, 100, 2), seconds=100)
    plan = oracle.feasible_plan(d, 60.0, start_nodes=2)
    # Level 2's 40 s gap is bridged; both levels run from t = 0 on nodes already up.
    assert list(np.unique(plan.serving)) == [2]
    assert plan.billed_node_seconds == pytest.approx(200.0)
    assert plan.launches == 0


def test_ec2_minimum_bills_a_short_run_60_seconds() -> None:
    plan = oracle.feasible_plan(demand((100, 120, 1)), 10.0, start_nodes=0)
    assert plan.billed_node_seconds == pytest.approx(60.0)  # 10 s launch + 20 s serving, billed 60


def test_only_billing_after_the_measured_start_counts() -> None:
    plan = oracle.feasible_plan(demand((100, 200, 1)), 50.0, start_nodes=0, first=80)
    assert plan.billed_node_seconds == pytest.approx(120.0)  # launched at 50, counted from 80


def test_a_run_over_before_the_measured_start_is_billed_nothing() -> None:
    # The first run (a node up from t = 0) ends at 50, before the measured start at 100; the
    # second, 250 s later (no bridge at 60 s launches), is launched at 240 and billed to 400.
    plan = oracle.feasible_plan(demand((10, 50, 1), (300, 400, 1)), 60.0, start_nodes=0, first=100)
    assert plan.billed_node_seconds == pytest.approx(160.0)
    assert plan.launches == 1


def test_a_node_needed_sooner_than_a_launch_is_running_at_t0_as_a_static_fleets_are() -> None:
    # One node above the starting fleet from t = 20 with 100 s launches: no launch within the
    # replay serves it by then, so it is billed from t = 0 without a launch (not from t = -80).
    d = demand((0, 200, 1), (20, 200, 2), seconds=200)
    plan = oracle.feasible_plan(d, 100.0, start_nodes=1)
    assert plan.billed_node_seconds == pytest.approx(200.0 + 200.0)
    assert plan.launches == 0
    # Needed at t = 150, after a launch could land: launched at 50, billed from then.
    d = demand((0, 200, 1), (150, 200, 2), seconds=200)
    plan = oracle.feasible_plan(d, 100.0, start_nodes=1)
    assert plan.billed_node_seconds == pytest.approx(200.0 + 150.0)
    assert plan.launches == 1


def test_feasible_oracle_sits_between_the_instant_one_and_a_peak_static_fleet() -> None:
    rng = np.random.default_rng(1)
    # Ten minutes quiet, ten busy, ten quiet: a cold start (~450 s) fits in each quiet spell.
    rate = np.concatenate([np.full(600, 2.0), np.full(600, 10.0), np.full(600, 2.0)])
    times = np.concatenate([s + np.sort(rng.random(rng.poisson(r))) for s, r in enumerate(rate)])
    trace = Trace(times, None, None, "steps")
    profile = load_profile("bert-base")
    workload = build(trace, profile, 2000.0, jitter=1.0, seed=1, arrivals="rate")
    oracles = runner.run_oracles(workload, profile, seed=1)
    static = engine.run(workload, profile, Static(oracles.peak, "peak"), start_replicas=oracles.peak, seed=1)
    assert oracles.feasible.slo_attainment >= oracles.instant.slo_attainment - 1e-9
    assert oracles.feasible.slo_attainment > 0.999
    assert oracles.instant.usd < oracles.feasible.usd < static.usd
    assert max(oracles.feasible_schedule) >= oracles.peak


def test_per_second_oracle_schedules_meet_the_slo_by_construction() -> None:
    rng = np.random.default_rng(4)
    rate = 2.0 + 6.0 * np.sin(np.linspace(0, np.pi, 1800)) ** 2
    times = np.concatenate([s + np.sort(rng.random(rng.poisson(r))) for s, r in enumerate(rate)])
    trace = Trace(times, None, None, "hump")
    profile = load_profile("bert-base")
    lazy = build(trace, profile, 3000.0, jitter=1.0, seed=2, arrivals="rate", materialize=False)
    schedule = oracle.initial_schedule(lazy, profile)
    # The same arrivals, materialized, through the engine on that schedule.
    fine = build(trace, profile, 3000.0, jitter=1.0, seed=2, arrivals="rate", materialize=True)
    result = engine.run(fine, profile, oracle.Oracle(), start_replicas=0, seed=1, schedule=schedule)
    assert result.slo_attainment >= 0.999
    reported, _ = oracle.run(lazy, profile, seed=1)
    assert reported.slo_attainment == 1.0
    # Every pod it runs serves: its timeline has no warm pods and no placeholders.
    assert set(reported.timeline["warm"]) == set(reported.timeline["placeholders"]) == {0.0}
    assert reported.usd == pytest.approx(result.usd)


def test_the_window_of_the_instant_oracle_leaves_room_for_the_largest_batch_and_its_delay() -> None:
    # A burst of 40 ms of work in one 10 ms bin of an otherwise idle minute. The SLO less the largest
    # batch's latency and the batch delay leaves a budget of 2 or 4 bins: the burst must be served
    # within it, so the second of the burst needs 40 / (budget) replicas; every other second one.
    from neuronfleet.sim.workload import PER_SECOND, Workload

    base = load_profile("bert-base")
    largest = max(p.latency_ms for p in base.efficient_batches())
    dt = 1 / PER_SECOND
    seconds = 60
    fine_work = np.zeros(seconds * PER_SECOND)
    fine_work[30 * PER_SECOND + 50] = 0.04
    fine_count = (fine_work > 0).astype(np.float64)
    workload = Workload(
        dt=dt,
        seconds=seconds,
        count_s=fine_count.reshape(seconds, -1).sum(axis=1),
        work_s=fine_work.reshape(seconds, -1).sum(axis=1),
        mean_work=0.04,
        mean_service_seconds=0.04,
        duration=float(seconds),
        factor=1.0,
        trace_seconds=seconds,
        fine_count=fine_count,
        fine_work=fine_work,
    )
    for budget_bins, replicas in ((2, 2), (4, 1)):
        # The budget falls on a whole number of bins less a hair, so that round-off cannot move it.
        slo_ms = largest + 10.0 + budget_bins * 10.0 + 0.5
        profile = base.model_copy(update={"slo_ms": slo_ms, "max_batch_delay_ms": 10.0})
        schedule = oracle.initial_schedule(workload, profile)
        assert schedule[30] == replicas, (budget_bins, schedule[30])
        assert set(np.delete(schedule, 30)) == {1}


def test_a_whole_number_of_replicas_of_work_is_that_many_replicas_round_off_included() -> None:
    # 100 fine bins of 0.07 s sum to 7.0000000000000036 replicas of work: a plain ceil would add an
    # eighth replica to every second of the instant oracle; 11 sums exactly, and must stay 11.
    from neuronfleet.sim.workload import PER_SECOND, Workload

    profile = load_profile("bert-base")
    seconds, dt = 30, 1 / PER_SECOND
    for level in (7, 11):
        fine_work = np.full(seconds * PER_SECOND, level * dt)
        fine_count = np.ones(seconds * PER_SECOND)
        workload = Workload(
            dt=dt,
            seconds=seconds,
            count_s=fine_count.reshape(seconds, -1).sum(axis=1),
            work_s=fine_work.reshape(seconds, -1).sum(axis=1),
            mean_work=level * dt,
            mean_service_seconds=dt,
            duration=float(seconds),
            factor=1.0,
            trace_seconds=seconds,
            fine_count=fine_count,
            fine_work=fine_work,
        )
        assert set(oracle.initial_schedule(workload, profile)) == {level}
