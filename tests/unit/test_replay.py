"""ReplayLoad: the simulator's queue served by however many replicas the cluster reports, as a MetricsSource."""

from __future__ import annotations

import numpy as np
import pytest

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.sim.profiles import load_profile
from neuronfleet.sim.replay import ReplayLoad, per_replica_profile
from neuronfleet.sim.trace import Trace
from neuronfleet.sim.workload import build

ORIGIN = 1_800_000_000.0
DEP = InferenceDeployment.model_validate(
    {
        "apiVersion": "serving.neuronfleet.dev/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": "m", "namespace": "n"},
        "spec": {"model": {"name": "m", "source": "/tmp/m", "neuronCoresPerReplica": 1}},
    }
)


def steady_load(rate_per_replica_share: float, seconds: int = 120) -> tuple[ReplayLoad, list[int]]:
    """A constant arrival rate of ``share`` x one replica's throughput, and a settable replica count."""
    profile = per_replica_profile(load_profile("bert-base"), 1)
    best = max(p.throughput_per_s for p in profile.efficient_batches())
    # 100 arrivals per second, scaled so the rate is ``share`` replicas' worth.
    trace = Trace(np.arange(0, seconds, 0.01), None, None, "steady")
    factor = rate_per_replica_share * best / 100.0
    workload = build(trace, profile, factor, jitter=0.0, seed=0)
    replicas = [1]
    load = ReplayLoad(workload, profile, lambda: replicas[0], duration=float(seconds), measure_from=30.0)
    return load, replicas


def test_per_replica_profile_splits_throughput_by_neuroncores() -> None:
    base = load_profile("bert-base")
    half = per_replica_profile(base, 1, max_queue=512)
    assert [p.throughput_per_s for p in half.batches or []] == [p.throughput_per_s / 2 for p in base.batches or []]
    assert half.max_queue == 512 and half.replicas_per_node == 2
    # The share is of a profile replica's NeuronCores (instance cores / replicas per node): a profile
    # of two 1-core replicas per node keeps its figures at 1 core and doubles them at 2.
    assert [p.throughput_per_s for p in per_replica_profile(half, 1).batches or []] == [
        p.throughput_per_s for p in half.batches or []
    ]
    assert [p.throughput_per_s for p in per_replica_profile(half, 2).batches or []] == [
        p.throughput_per_s * 2 for p in half.batches or []
    ]


async def test_before_the_start_the_fleet_reports_idle_not_unavailable() -> None:
    load, _ = steady_load(0.5)
    snapshot, why = await load.snapshot(DEP, ORIGIN)
    assert snapshot is not None and why == ""
    assert (snapshot.queue_depth, snapshot.arrival_rate, snapshot.utilization) == (0.0, 0.0, 0.0)
    assert load.demand(0.0) == 0.0, "no arrivals before the start, and no window to divide by"
    # Started, but the scrape delay not yet past: still an idle fleet's zeros, not a made-up rate.
    load.start(ORIGIN)
    snapshot, why = await load.snapshot(DEP, ORIGIN + 3.0)
    assert snapshot is not None and why == ""
    assert (snapshot.queue_depth, snapshot.in_flight, snapshot.arrival_rate, snapshot.utilization) == (0.0,) * 4


def test_a_light_load_is_served_at_the_smallest_batch_latency() -> None:
    # A fifth of one replica's throughput never queues: each request is served alone, at batch 1's
    # latency, not held for the largest batch a backlog would take.
    load, _ = steady_load(0.2)
    load.start(ORIGIN)
    advance_through(load, 1, 120)
    totals = load.totals()
    single = min(load.profile.efficient_batches(), key=lambda p: p.batch)
    assert single.batch == 1
    assert totals.p50_ms == pytest.approx(single.latency_ms) and totals.p99_ms == pytest.approx(single.latency_ms)
    assert totals.slo_attainment == 1.0


def test_a_load_of_one_request_per_bin_at_most_still_reports_its_latency() -> None:
    # 0.3 % of one replica's throughput: no 10 ms bin holds more than one request. A bin of one
    # request weighs the percentiles as much as any; none is left out for holding too few.
    load, _ = steady_load(0.003)
    load.start(ORIGIN)
    advance_through(load, 1, 120)
    totals = load.totals()
    assert float(load.workload.count.max()) == 1.0 and totals.served > 100
    single = min(load.profile.efficient_batches(), key=lambda p: p.batch)
    assert totals.p50_ms == pytest.approx(single.latency_ms) and totals.p99_ms == pytest.approx(single.latency_ms)


def test_a_load_above_one_at_a_time_is_served_in_the_next_batch_size() -> None:
    # 0.8 of a replica's best throughput is more than batch 1 serves but never queues: the median
    # request rides a batch of 4, its latency plus half the wait to fill it (at most the delay bound).
    load, _ = steady_load(0.8)
    load.start(ORIGIN)
    advance_through(load, 1, 120)
    efficient = sorted(load.profile.efficient_batches(), key=lambda p: p.batch)
    one, four = efficient[:2]
    assert (one.batch, four.batch) == (1, 4)
    assert one.throughput_per_s < 0.8 * max(p.throughput_per_s for p in efficient) < four.throughput_per_s
    assert four.latency_ms < load.totals().p50_ms <= four.latency_ms + load.profile.max_batch_delay_ms / 2


def advance_through(load: ReplayLoad, first: int, last: int) -> None:
    """Replay seconds ``first`` to ``last`` (both included), one at a time, as the clock moves."""
    for second in range(first, last + 1):
        load.advance(ORIGIN + second)


def backlogged_load() -> tuple[ReplayLoad, list[int]]:
    """One replica served 1.5 replicas' worth for the first 60 s: its queue is full."""
    load, replicas = steady_load(1.5)
    load.start(ORIGIN)
    advance_through(load, 1, 60)
    return load, replicas


async def test_queue_builds_when_underserved_and_drains_when_scaled() -> None:
    load, replicas = backlogged_load()
    backlog = load.queue_depth()
    assert backlog == pytest.approx(load.profile.max_queue), "1.5 replicas' worth on one replica fills its queue"
    snapshot, _ = await load.snapshot(DEP, ORIGIN + 60)
    assert snapshot is not None
    assert snapshot.time == pytest.approx(ORIGIN + 60 - load.scrape_delay)
    assert snapshot.utilization == pytest.approx(1.0)
    assert snapshot.arrival_rate == pytest.approx(load.demand(60.0, window=60.0), rel=0.05)

    replicas[0] = 3
    advance_through(load, 61, 120)
    assert load.queue_depth() < 1.0, "three replicas drain the backlog"
    totals = load.totals()
    # Only arrivals from 30 s on count (the lead-in is left out).
    assert totals.requests == pytest.approx(float(load.workload.count[3000:12000].sum()))
    assert totals.served + totals.rejected == pytest.approx(totals.requests)
    assert totals.rejected > 0, "past the queue bound requests are refused"
    assert 0.0 < totals.slo_attainment < 1.0, "the backlog missed the SLO, the drained fleet met it"
    # The percentiles are the served requests' (weighted by each bin's): most were served at once,
    # and more than one in a hundred waited in the backlog past the SLO.
    assert totals.within_slo > 0.5 * totals.served and totals.within_slo < 0.99 * totals.served
    assert totals.p50_ms <= load.profile.slo_ms < totals.p99_ms


def test_with_no_replica_left_the_backlog_waits_and_new_requests_are_refused() -> None:
    # The last pod gone (a node lost): nothing is served, what was queued waits for capacity, and
    # the requests arriving meanwhile have no endpoint.
    load, replicas = backlogged_load()
    backlog = load.queue_depth()
    assert backlog > 0
    refused_before = float(load.sim.rejected.sum())
    replicas[0] = 0
    advance_through(load, 61, 65)
    assert load.queue_depth() == pytest.approx(backlog)
    arrived = float(load.workload.work[6000:6500].sum())
    assert float(load.sim.rejected.sum()) - refused_before == pytest.approx(arrived)
    replicas[0] = 3
    advance_through(load, 66, 120)
    assert load.queue_depth() < 1.0, "the backlog is served once replicas are back"


def test_requests_with_no_replica_to_serve_them_are_counted_refused() -> None:
    load, replicas = steady_load(0.5)
    replicas[0] = 0
    load.start(ORIGIN)
    load.advance(ORIGIN + 120)
    totals = load.totals()
    assert totals.requests > 10_000
    assert totals.rejected == pytest.approx(totals.requests)
    assert totals.served == pytest.approx(0.0, abs=1e-6)
