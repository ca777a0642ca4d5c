"""The simulator's Prometheus view (:class:`neuronfleet.sim.metrics.MetricsView`): what a policy
deciding at ``now`` reads of a run, on short series computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from neuronfleet.api.default_queries import ARRIVAL_RATE_WINDOW_SECONDS, ONE_DEPLOYMENT, default_queries, promql_range
from neuronfleet.planning.signals import MetricSnapshot
from neuronfleet.sim.metrics import MetricsView


def test_the_rate_is_the_last_minutes_the_busy_ratio_the_last_scrapes_and_the_queue_a_gauge() -> None:
    # 120 one-second bins: 1 arrival a second, then 3 from t = 60 s; busy only in the last 15 s.
    count = np.array([1.0] * 60 + [3.0] * 60)
    busy = np.array([0.0] * 105 + [1.0] * 15)
    queue = np.arange(120, dtype=np.float64)
    metrics = MetricsView(1.0, count, queue, queue * 2, busy)
    at_end = metrics.snapshot(120.0, 0.0)
    assert (at_end.arrival_rate, at_end.utilization) == (3.0, 1.0)
    assert (at_end.queue_depth, at_end.in_flight) == (119.0, 238.0)  # the last bin's gauges
    # At 90 s the minute holds 30 s of each rate, and the scrape interval 5 busy seconds of 15.
    middle = metrics.snapshot(90.0, 0.0)
    assert middle.arrival_rate == pytest.approx(2.0)
    assert metrics.snapshot(110.0, 0.0).utilization == pytest.approx(5 / 15)
    # Read with a lag: the samples of ``delay`` earlier, stamped with their own time.
    assert metrics.snapshot(120.0, 30.0) == middle
    assert metrics.snapshot(10.0, 20.0) == MetricSnapshot(time=-10.0)  # nothing before t = 0


def test_the_rate_is_averaged_over_the_default_querys_range() -> None:
    # The CRD's default arrival-rate query and the simulated Prometheus read one window: a change
    # to either is a change to both.
    assert f"[{promql_range(ARRIVAL_RATE_WINDOW_SECONDS)}])" in default_queries(ONE_DEPLOYMENT)["arrival_rate"]
    assert (promql_range(60), promql_range(120), promql_range(90)) == ("1m", "2m", "90s")
    window = ARRIVAL_RATE_WINDOW_SECONDS
    # One arrival in the first second, then none: the rate reads it until it leaves the window.
    count = np.zeros(3 * window)
    count[0] = 1.0
    metrics = MetricsView(1.0, count, np.zeros(3 * window), np.zeros(3 * window), np.zeros(3 * window))
    assert metrics.snapshot(float(window), 0.0).arrival_rate == pytest.approx(1 / window)
    assert metrics.snapshot(float(window + 1), 0.0).arrival_rate == 0.0


def test_the_peak_in_a_fine_runs_first_second_is_the_rate_so_far() -> None:
    # 10 ms bins, one arrival in each for the first half second: no whole second to take a busiest
    # stretch of yet, so the peak is the rate (100/s), not 0.
    metrics = MetricsView(0.01, np.ones(50), np.zeros(50), np.zeros(50), np.zeros(50))
    snapshot = metrics.snapshot(0.5, 0.0, serving=1)
    assert snapshot.arrival_rate == pytest.approx(100.0)
    assert snapshot.arrival_peak == pytest.approx(100.0)


def test_the_windowed_load_averages_queued_and_in_flight_requests_over_its_window() -> None:
    queue_mean = np.arange(10, dtype=np.float64)  # 0, 1, 2, ...
    in_flight = np.full(10, 10.0)
    metrics = MetricsView(1.0, np.zeros(10), np.zeros(10), in_flight, np.zeros(10), queue_mean=queue_mean)
    assert metrics.mean_load(5.0, 3.0, 0.0) == pytest.approx(3.0 + 10.0)  # bins 2, 3, 4
    assert metrics.mean_load(7.0, 3.0, 2.0) == pytest.approx(3.0 + 10.0)  # the same, read 2 s late
    assert metrics.mean_load(5.0, 60.0, 0.0) == pytest.approx(2.0 + 10.0)  # a window longer than the run
    # The first bin is a window of its own; before it, nothing.
    assert metrics.mean_load(1.0, 3.0, 0.0) == pytest.approx(10.0)
    assert metrics.mean_load(0.5, 3.0, 0.0) is None
