"""Every policy, oracles included, is billed over the trace's span only; the tail after it is simulated
(late requests count) but not billed."""

from __future__ import annotations

import numpy as np
import pytest

from neuronfleet.sim import engine, oracle, runner
from neuronfleet.sim.policies import Static
from neuronfleet.sim.profiles import load_profile
from neuronfleet.sim.trace import Trace, with_history_pass
from neuronfleet.sim.workload import TAIL_SECONDS, Workload, build

PROFILE = load_profile("bert-base")


def flat(seconds: int = 900, rate: float = 5.0, seed: int = 3) -> Trace:
    rng = np.random.default_rng(seed)
    return Trace(np.sort(rng.random(rng.poisson(rate * seconds)) * seconds), None, None, "flat")


def rate_workload(trace: Trace, **kwargs: bool) -> Workload:
    return build(trace, PROFILE, 3000.0, jitter=1.0, seed=1, arrivals="rate", **kwargs)


def trace_end(workload: Workload) -> int:
    """The second after the last one holding an arrival."""
    return int(np.flatnonzero(workload.count_s)[-1]) + 1


def test_a_static_fleet_is_billed_for_the_trace_not_the_tail() -> None:
    workload = rate_workload(flat())
    assert workload.trace_seconds == trace_end(workload) == 900
    assert workload.seconds == 900 + TAIL_SECONDS
    result = engine.run(workload, PROFILE, Static(7, "7"), start_replicas=7, seed=1)
    assert result.replica_hours == pytest.approx(7 * 900 / 3600)
    assert result.usd == pytest.approx(7 * 900 / 3600 * PROFILE.instance.usd_per_hour)


def test_with_a_history_pass_billing_runs_from_the_measured_start_to_the_trace_end() -> None:
    doubled, measure_from = with_history_pass(flat(600))
    workload = rate_workload(doubled)
    result = engine.run(workload, PROFILE, Static(5, "5"), start_replicas=5, seed=1, measure_from=measure_from)
    assert result.replica_hours == pytest.approx(5 * (trace_end(workload) - measure_from) / 3600)


def test_the_tail_is_still_simulated_so_a_late_backlog_counts() -> None:
    # One replica and a burst in the trace's last second that its queue holds (no refusals): it
    # drains in the tail, and those requests' waits (seconds past the trace's end) are counted.
    profile = PROFILE.model_copy(update={"max_queue": 1_000_000})
    arrivals = np.concatenate([np.arange(0.0, 300.0, 0.5), np.full(40, 299.5)])
    workload = build(Trace(np.sort(arrivals), None, None, "late burst"), profile, 500.0, 0.0, 1)
    result = engine.run(workload, profile, Static(1, "1"), start_replicas=1, seed=1)
    assert result.requests == pytest.approx(workload.requests)
    assert result.rejected == 0
    # 20,000 requests at under 3,000 a second: the burst's middle leaves seconds after the trace ends.
    assert 299.5 + result.max_ms / 1e3 > workload.trace_seconds + 2
    assert result.replica_hours == pytest.approx(trace_end(workload) / 3600)


def test_both_oracles_are_billed_for_the_trace_not_the_tail() -> None:
    workload = rate_workload(flat())
    oracles = runner.run_oracles(workload, PROFILE, seed=1)
    schedule = np.asarray(oracles.schedule)
    assert oracles.instant.replica_hours == pytest.approx(schedule[: trace_end(workload)].sum() / 3600)
    # The feasible oracle's tail holds at least one node (its demand never drops below one replica).
    demand = -(-schedule // PROFILE.replicas_per_node)
    launch = oracle.launch_seconds(PROFILE)
    start_nodes = -(-oracles.start // PROFILE.replicas_per_node)
    trace_only = oracle.feasible_plan(demand, launch, start_nodes, stop=trace_end(workload))
    with_tail = oracle.feasible_plan(demand, launch, start_nodes)
    assert oracles.feasible.replica_hours == pytest.approx(trace_only.billed_node_seconds / 3600)
    assert trace_only.billed_node_seconds <= with_tail.billed_node_seconds - TAIL_SECONDS


def test_per_second_oracles_are_billed_for_the_trace_not_the_tail() -> None:
    workload = rate_workload(flat(), materialize=False)
    assert not workload.materialized
    instant, schedule = oracle.run(workload, PROFILE, seed=1)
    assert instant.replica_hours == pytest.approx(schedule[: trace_end(workload)].sum() / 3600)


def test_the_feasible_plan_bills_nothing_after_its_stop() -> None:
    demand = np.ones(400, dtype=np.int64)
    assert oracle.feasible_plan(demand, 60.0, start_nodes=1, stop=300).billed_node_seconds == pytest.approx(300.0)
    assert oracle.feasible_plan(demand, 60.0, start_nodes=1).billed_node_seconds == pytest.approx(400.0)


@pytest.mark.parametrize(
    ("arrivals", "jitter", "last", "expected"),
    [
        ("replicate", 0.0, 300.0, 301),  # a copy at exactly t = 300 falls in second 300
        ("replicate", 1.0, 300.0, 301),  # copies land in [300, 301)
        ("replicate", 1.0, 299.5, 301),
        ("superpose", 1.0, 300.0, 301),  # the period is ceil(300 + 1e-9): arrivals wrap within it
        ("rate", 1.0, 299.5, 300),
    ],
)
def test_trace_seconds_hold_every_arrival(arrivals: str, jitter: float, last: float, expected: int) -> None:
    times = np.concatenate([np.arange(0.0, last, 1.0), [last]])
    workload = build(Trace(times, None, None, "t"), PROFILE, 3.0, jitter, 1, arrivals=arrivals)  # type: ignore[arg-type]
    assert workload.trace_seconds == expected
    assert workload.trace_seconds == trace_end(workload)


@pytest.mark.parametrize("replicas", [44, 45])
def test_a_static_fleet_at_two_replicas_per_node_is_billed_for_ceil_half_the_nodes(replicas: int) -> None:
    # The start fleet is packed as the scheduler (and the feasible oracle) packs it: 44 replicas at
    # 2 per node hold 22 nodes, 45 hold 23; not one node per replica.
    profile = PROFILE.model_copy(update={"replicas_per_node": 2})
    workload = build(flat(), profile, 3000.0, jitter=1.0, seed=1, arrivals="rate")
    result = engine.run(workload, profile, Static(replicas, "n"), start_replicas=replicas, seed=1)
    node_hours = -(-replicas // 2) * 900 / 3600
    assert result.usd == pytest.approx(node_hours * profile.instance.usd_per_hour)
    assert result.chip_hours == pytest.approx(node_hours * profile.instance.chips)
    assert result.replica_hours == pytest.approx(replicas * 900 / 3600)


def test_the_feasible_oracle_bills_whole_nodes_at_two_replicas_per_node() -> None:
    # Three replicas all along at 2 per node: two whole nodes serve (four replicas' room), billed
    # for the trace, no launch (the starting fleet's three replicas already hold both nodes).
    profile = PROFILE.model_copy(update={"replicas_per_node": 2})
    workload = build(flat(), profile, 3000.0, jitter=1.0, seed=1, arrivals="rate")
    instant = np.full(workload.seconds, 3, dtype=np.int64)
    result, schedule = oracle.run_feasible(workload, profile, instant, start_replicas=3, seed=1)
    assert set(schedule.tolist()) == {4}
    node_hours = 2 * workload.trace_seconds / 3600
    assert result.usd == pytest.approx(node_hours * profile.instance.usd_per_hour)
    assert result.replica_hours == pytest.approx(node_hours * 2)
