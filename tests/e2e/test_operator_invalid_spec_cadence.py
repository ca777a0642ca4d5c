"""Under InvalidSpec the kept fleet is scaled as the last valid spec says, at its cadence: the
autoscaler decides every spec.scaling.intervalSeconds of that spec (real Kopf operator, sandbox).

Found by review: the refusal was reported as the reconcile's error, so the daemon backed off
(30 s, then longer) and ignored the next decision's time: the kept fleet decided every 30 s, not 15.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

from operator_harness import OperatorHarness, e2e_cluster, example
from test_operator_decision_cadence import OPERATOR_INTERVAL, Recording
from test_operator_invalid_spec import NS, edit_last_valid_spec, refuse_a_running_deployment

from neuronfleet.metrics.operator_metrics import OperatorMetrics
from neuronfleet.planning.admission import OperatorAccount
from neuronfleet.reconcile import ReconcileReport


async def test_the_kept_fleet_decides_every_interval_seconds_under_a_refused_spec(tmp_path: Path) -> None:
    async with e2e_cluster() as cluster:
        sources: list[Recording] = []

        def make() -> Recording:
            sources.append(Recording())
            return sources[-1]

        harness = OperatorHarness(cluster, tmp_path, interval=OPERATOR_INTERVAL, metrics=make)
        # A spec naming the operator's own account: accepted by the CRD, refused by the operator.
        harness.settings = replace(harness.settings, operator_account=OperatorAccount("default", "nf-operator"))
        try:
            await harness.start()
            doc = example(
                "bert-embeddings", scaling={"mode": "Auto", "minReplicas": 1, "maxReplicas": 4, "intervalSeconds": 15}
            )
            doc["metadata"]["name"] = "steady"
            await harness.apply(harness.localize(doc))
            await harness.wait(
                lambda: any(
                    p for p in harness.pods("default", "steady", "active") if p["status"].get("phase") == "Running"
                ),
                300,
            )
            await harness.patch_spec("default", "steady", {"runtime": {"serviceAccountName": "nf-operator"}})
            await harness.wait(
                lambda: harness.condition("default", "steady", "Degraded").get("reason") == "InvalidSpec", 60
            )
            await asyncio.sleep(60)  # looptime: simulated seconds
            before = len(sources[-1].calls)
            await asyncio.sleep(200)
            gaps = [round(b - a, 1) for a, b in itertools.pairwise(sources[-1].calls[before:])]
        finally:
            await harness.close()
    assert len(gaps) >= 10 and all(abs(g - 15) <= 0.5 for g in gaps), gaps


async def test_a_spec_refused_after_a_restart_is_no_reconcile_error_and_is_retried_on_a_back_off(
    harness: OperatorHarness,
) -> None:
    # Review r18, finding 3: with no last valid spec kept (the operator restarted since), the refusal
    # was the reconcile's error: outcome="error", neuronfleet_reconcile_errors_total and its alert,
    # for a spec the same operator, before the restart, reported apart from errors. A restarted
    # operator now keeps the fleet from status.lastValidSpec; removed here, as in a status written by
    # an operator from before that field, it has none to keep it from.
    await refuse_a_running_deployment(harness, "bert")
    await harness.stop()
    await edit_last_valid_spec(harness, "bert", None)
    context = await harness.start()
    context.metrics = OperatorMetrics()
    reports: list[tuple[float, ReconcileReport]] = []
    real = context.reconcile

    async def recorded(body: Any, namespace: str, name: str, stopping: asyncio.Event | None = None) -> ReconcileReport:
        report = await real(body, namespace, name, stopping)
        reports.append((asyncio.get_running_loop().time(), report))
        return report

    context.reconcile = recorded  # type: ignore[method-assign]
    await asyncio.sleep(120)  # looptime: simulated seconds
    assert reports and all(report.refusal and report.error is None for _, report in reports)
    registry = context.metrics.registry
    labels = {"namespace": NS, "name": "bert"}
    assert registry.get_sample_value("neuronfleet_reconciles_total", {**labels, "outcome": "error"}) is None
    assert registry.get_sample_value("neuronfleet_reconcile_errors_total", {**labels, "kind": "ReconcileError"}) is None
    assert registry.get_sample_value("neuronfleet_reconciles_total", {**labels, "outcome": "ok"})
    # Nothing is reconciled for it, so it is retried on a back-off of its own (not every interval).
    gaps = [round(b - a, 1) for (a, _), (b, _) in itertools.pairwise(reports)]
    assert gaps == [4.0, 8.0, 16.0, 30.0, 30.0, 30.0], gaps
