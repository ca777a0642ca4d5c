"""The arrival peak: the runtime's busiest-stretch gauge, the simulator's view of it, their agreement,
and the operator's query for it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from prometheus_client import generate_latest

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.metrics.prometheus import queries_for
from neuronfleet.planning import signals
from neuronfleet.planning.signals import busiest_rate, peak_stretch_seconds
from neuronfleet.sim.metrics import MetricsView
from neuronserve import metrics as runtime_metrics
from neuronserve.metrics import ArrivalPeak, BusyTracker, ServerMetrics

REPO = Path(__file__).resolve().parents[2]


def test_the_runtime_and_the_simulator_use_the_same_window_and_stretch_rule() -> None:
    assert runtime_metrics.PEAK_WINDOW_SECONDS == signals.PEAK_WINDOW_SECONDS
    assert runtime_metrics.PEAK_MIN_REQUESTS == signals.PEAK_MIN_REQUESTS


def test_stretch_holds_enough_requests_to_rise_above_poisson_noise() -> None:
    assert peak_stretch_seconds(2500) == 1  # a bert-base replica: one second holds 2,500
    assert peak_stretch_seconds(400) == 1
    assert peak_stretch_seconds(399) == 2
    assert peak_stretch_seconds(10) == 40  # an LLM replica: 40 s hold 400 requests
    assert peak_stretch_seconds(1) == 60  # never longer than the window
    assert peak_stretch_seconds(0) == 60


def test_busiest_rate_slides_over_every_stretch() -> None:
    per_second = [5, 1, 9, 2, 8, 8, 0]
    assert busiest_rate(per_second, 1) == 9
    assert busiest_rate(per_second, 2) == 8  # 8 + 8
    assert busiest_rate(per_second, 3) == pytest.approx(19 / 3)  # 9 + 2 + 8, not 2 + 8 + 8
    assert busiest_rate(per_second, 10) == pytest.approx(33 / 7)  # longer than the span: its rate
    assert busiest_rate([], 1) == 0.0


def view(per_second: list[float], dt: float) -> MetricsView:
    """A metrics view whose arrivals are ``per_second``, spread evenly over bins of ``dt``."""
    per_bin = round(1 / dt)
    count = np.repeat(np.asarray(per_second, dtype=np.float64) / per_bin, per_bin)
    zeros = np.zeros_like(count)
    return MetricsView(dt, count, zeros, zeros, zeros)


@pytest.mark.parametrize("dt", [1.0, 0.01])
def test_simulated_peak_is_the_busiest_whole_second_of_the_last_minute(dt: float) -> None:
    # 90 s at 1,000/s with a 3,000/s second at 20 s (out of the window by 90 s) and 2,000/s at 70 s.
    per_second = [1000.0] * 90
    per_second[20] = 3000.0
    per_second[70] = 2000.0
    metrics = view(per_second, dt)
    snapshot = metrics.snapshot(90.0, 0.0, serving=2)  # 500/s per replica: one-second stretches
    assert snapshot.arrival_rate == pytest.approx(1000 + 1000 / 60)
    assert snapshot.arrival_peak == pytest.approx(2000.0)
    # Without the serving count (the baselines do not read it), no peak.
    assert metrics.snapshot(90.0, 0.0).arrival_peak is None


def test_simulated_peak_of_a_low_rate_replica_is_a_longer_stretch() -> None:
    # 100/s over 40 replicas is 2.5/s each: stretches of 160 s, longer than the window, so the
    # peak is the minute's rate and a busy second is not read as a burst.
    per_second = [100.0] * 120
    per_second[100] = 400.0
    snapshot = view(per_second, 1.0).snapshot(120.0, 0.0, serving=40)
    assert snapshot.arrival_peak == pytest.approx(snapshot.arrival_rate)
    assert snapshot.arrival_peak == pytest.approx(100 + 300 / 60)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_runtime_peak_counts_whole_seconds_within_the_window() -> None:
    clock = Clock(1000.0)
    tracker = ArrivalPeak(clock=clock)
    for second, count in ((1000, 600), (1001, 900), (1002, 700)):
        clock.now = second + 0.5
        for _ in range(count):
            tracker.record()
    clock.now = 1002.9
    assert tracker.peak() == 900  # the second under way (1002) is not over yet
    clock.now = 1003.1
    assert tracker.peak() == 900
    clock.now = 1062.5  # the window is 1002-1061: 600 and 900 are out, 700 alone is in it, and at
    # 700 per minute a stretch must be ceil(400 x 60 / 700) = 35 s long
    assert tracker.peak() == pytest.approx(700 / 35)


def test_runtime_peak_at_a_low_rate_uses_stretches_holding_enough_requests() -> None:
    clock = Clock(0.0)
    tracker = ArrivalPeak(clock=clock)
    # 60 s at 5 requests a second, one second of 20: stretches of ceil(400 / 5.25) = 77 s > 60 s,
    # so the whole window: a busy second at a low rate is noise, not a burst.
    for second in range(60):
        clock.now = second + 0.1
        for _ in range(20 if second == 30 else 5):
            tracker.record()
    clock.now = 60.0
    assert tracker.peak() == pytest.approx(315 / 60)


def test_runtime_exports_the_peak_and_counts_every_answered_request() -> None:
    clock = Clock(50.0)
    server = ServerMetrics(BusyTracker(), ArrivalPeak(clock=clock))
    clock.now = 50.2
    for outcome in ["ok"] * 300 + ["rejected"] * 100 + ["bad_request"] * 50:
        server.outcome(outcome)
    clock.now = 51.0
    text = generate_latest(server.registry).decode()
    assert "neuronserve_arrivals_peak_per_second 450.0" in text


def test_an_empty_query_turns_its_signal_off() -> None:
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    assert "arrival_peak" in queries_for(InferenceDeployment.model_validate(doc))
    doc["spec"]["scaling"].setdefault("metrics", {})["arrivalPeak"] = ""
    queries = queries_for(InferenceDeployment.model_validate(doc))
    assert "arrival_peak" not in queries and set(queries) == set(signals.QUERIED) - {"arrival_peak"}
