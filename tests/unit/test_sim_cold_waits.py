"""The "cold waits" column: what the engine counts, and that the table's legend and the docs say so."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from neuronfleet.sim import engine, report
from neuronfleet.sim.metrics import MetricsView
from neuronfleet.sim.policies import Observed, Targets
from neuronfleet.sim.profiles import load_profile
from neuronfleet.sim.scaledown import ScaleDownBy
from neuronfleet.sim.trace import Trace
from neuronfleet.sim.workload import build

REPO = Path(__file__).resolve().parents[2]


class GrowsToTwo:
    """One ready replica asking for a second from the first decision on: it starts (~450 s) while an
    overloaded queue refuses requests."""

    name = "grows"
    setting = "2"
    interval = 1.0
    start_replicas: int | None = 1
    scale_down: ScaleDownBy = "operator"
    reads_cold_starts = False

    def prime(self, replicas: int, now: float) -> None:
        return None

    def decide(self, now: float, metrics: MetricsView, observed: Observed) -> Targets:
        return Targets(2)


def test_cold_waits_count_requests_missing_the_slo_rejected_included_while_a_replica_starts() -> None:
    profile = load_profile("bert-base").model_copy(update={"max_queue": 4})
    arrivals = np.sort(np.random.default_rng(1).random(300 * 20) * 300)
    workload = build(Trace(arrivals, None, None, "flat"), profile, 300.0, 1.0, 1, arrivals="rate")
    # Measured from the first decision (WARMUP_SECONDS): from then on the second replica is starting.
    result = engine.run(workload, profile, GrowsToTwo(), start_replicas=1, seed=1, measure_from=engine.WARMUP_SECONDS)
    assert result.rejected > 0
    # The trace ends before the second replica is ready: every miss, late or refused, is a cold wait,
    # and the count is of requests (not request-seconds: a refused request waits for nothing).
    assert result.cold_start_misses == pytest.approx(result.requests - result.within_slo)
    assert result.cold_start_misses >= result.rejected


def test_the_legend_and_the_docs_say_cold_waits_are_requests() -> None:
    caption = str(report.table("t", [], 50.0, 0.99).caption)
    assert "cold waits = requests that missed the SLO (rejected included) while a replica was starting" in caption
    row = next(
        line for line in (REPO / "docs" / "tuning.md").read_text().splitlines() if line.startswith("| cold waits")
    )
    assert "request-seconds" not in row
    assert "requests that missed the SLO (late or rejected) while a replica was still starting" in row
