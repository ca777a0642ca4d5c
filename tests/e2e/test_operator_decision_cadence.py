"""The autoscaler decides every ``spec.scaling.intervalSeconds``, whatever the operator's reconcile
interval, and a steady fleet's extra wake-ups for its decisions write nothing more.

Reviewer's finding: with the chart's ``reconcileIntervalSeconds`` 10, a deployment with
``intervalSeconds`` 15 decided every 20 s (the first periodic reconcile at least 15 s after the last
decision), and one with ``intervalSeconds`` 5 every 10 s (the daemon woke no sooner than its interval).
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest
from operator_harness import OperatorHarness, e2e_cluster, example

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.planning.signals import MetricSnapshot

#: The chart's operator.reconcileIntervalSeconds.
OPERATOR_INTERVAL = 10.0
WRITES = {"POST", "PUT", "PATCH", "DELETE"}


class Recording:
    """A steady fleet's metrics, recording when the autoscaler read them (once per decision)."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def snapshot(self, dep: InferenceDeployment, now: float) -> tuple[MetricSnapshot | None, str]:
        self.calls.append(now)
        return MetricSnapshot(now, queue_depth=0.0, in_flight=4.0, utilization=0.5), "scripted"


@pytest.mark.parametrize("spec_interval", [15, 5])
async def test_decisions_come_every_interval_seconds_and_a_steady_fleet_writes_nothing(
    tmp_path: Path, spec_interval: int
) -> None:
    async with e2e_cluster() as cluster:
        sources: list[Recording] = []

        def make() -> Recording:
            sources.append(Recording())
            return sources[-1]

        harness = OperatorHarness(cluster, tmp_path, interval=OPERATOR_INTERVAL, metrics=make)
        try:
            context = await harness.start()
            doc = example(
                "bert-embeddings",
                scaling={"mode": "Auto", "minReplicas": 1, "maxReplicas": 4, "intervalSeconds": spec_interval},
            )
            doc["metadata"]["name"] = "steady"
            await harness.apply(harness.localize(doc))
            await harness.wait(
                lambda: any(
                    p for p in harness.pods("default", "steady", "active") if p["status"].get("phase") == "Running"
                ),
                300,
            )
            await asyncio.sleep(60)  # the pod events of the start pass (looptime: no wall time)
            calls_before, reconciles_before = len(sources[-1].calls), context.reconciles
            requests_before = len(cluster.request_log)
            await asyncio.sleep(200)
            calls = sources[-1].calls[calls_before:]
            reconciles = context.reconciles - reconciles_before
            window = cluster.request_log[requests_before:]
        finally:
            await harness.close()
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(calls)]
    assert gaps and all(abs(gap - spec_interval) <= 0.5 for gap in gaps), gaps
    # Woken for its decisions too, the steady deployment writes no more (no Event, no pod, and a
    # status patch only when the warm pool's reason or ScalingActive's message, whose figures alone
    # move, is rewritten: at most every 5 minutes, so once at most in the window); only its reads
    # are repeated, one reconcile's per wake-up.
    writes = [f"{r.method} {r.resource} {r.name}" for r in window if r.method in WRITES]
    assert len(writes) <= 1, writes
    print(
        f"intervalSeconds {spec_interval}: {len(calls)} decisions, {reconciles} reconciles, "
        f"{len(window)} requests ({len(window) / max(1, reconciles):.2f} per reconcile) in 200 s"
    )
