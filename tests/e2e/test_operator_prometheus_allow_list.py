"""A spec's prometheusUrl outside the operator's allow-list is never handed to the metrics source:
the deployment says PrometheusUrlNotAllowed (condition and Event) and holds; likewise a spec's query
overrides for the operator's own Prometheus under --prometheus-refuse-query-overrides
(PrometheusQueryNotAllowed). The real operator, sandbox."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from operator_harness import NEURON_SCHEDULER, REPO, OperatorHarness, example, inf2_node_groups

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.planning.prometheus_urls import PrometheusUrlPolicy
from neuronfleet.planning.signals import MetricSnapshot
from neuronfleet.sandbox import SandboxCluster

NS = "allowlist"
ALLOWED = "http://prometheus.monitoring.svc:9090"


class RecordingMetrics:
    """A metrics source that records which deployments it was asked about, and answers a calm fleet."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str | None]] = []

    async def snapshot(self, dep: InferenceDeployment, now: float) -> tuple[MetricSnapshot | None, str]:
        self.asked.append((dep.name, dep.spec.scaling.metrics.prometheus_url))
        return MetricSnapshot(now, queue_depth=0.0, in_flight=0.0, utilization=0.1), "metrics read"


@pytest.fixture
async def allow_listed(tmp_path: Path) -> AsyncIterator[tuple[OperatorHarness, RecordingMetrics]]:
    source = RecordingMetrics()
    async with SandboxCluster(
        node_groups=inf2_node_groups(), crd_dir=REPO / "crds", neuron_scheduler_name=NEURON_SCHEDULER
    ) as cluster:
        harness = OperatorHarness(cluster, tmp_path, metrics=lambda: source)
        harness.settings = replace(harness.settings, prometheus_urls=PrometheusUrlPolicy.from_entries([ALLOWED]))
        try:
            await harness.start()
            yield harness, source
        finally:
            await harness.close()


@pytest.fixture
async def refusing_overrides(tmp_path: Path) -> AsyncIterator[tuple[OperatorHarness, RecordingMetrics]]:
    source = RecordingMetrics()
    async with SandboxCluster(
        node_groups=inf2_node_groups(), crd_dir=REPO / "crds", neuron_scheduler_name=NEURON_SCHEDULER
    ) as cluster:
        harness = OperatorHarness(cluster, tmp_path, metrics=lambda: source)
        harness.settings = replace(harness.settings, refuse_query_overrides=True)
        try:
            await harness.start()
            yield harness, source
        finally:
            await harness.close()


def manifest(
    harness: OperatorHarness, name: str, prometheus_url: str | None, queries: dict[str, str] | None = None
) -> dict[str, Any]:
    metrics: dict[str, Any] = {"prometheusUrl": prometheus_url} if prometheus_url else {}
    metrics.update(queries or {})
    doc = example(
        "bert-embeddings",
        scaling={"mode": "Auto", "minReplicas": 1, "maxReplicas": 2, "intervalSeconds": 5, "metrics": metrics},
        warmPool={"mode": "Off"},
    )
    doc["metadata"]["name"] = name
    localized: dict[str, Any] = harness.localize(doc, namespace=NS)
    return localized


async def test_a_spec_url_not_allowed_is_not_asked_and_says_which_setting_allows_it(
    allow_listed: tuple[OperatorHarness, RecordingMetrics],
) -> None:
    harness, source = allow_listed
    await harness.apply(manifest(harness, "probe", "http://169.254.169.254:80/latest/meta-data/"))
    await harness.apply(manifest(harness, "allowed", f"{ALLOWED}/"))
    await harness.apply(manifest(harness, "default", None))

    def reason(name: str) -> str | None:
        found = harness.condition(NS, name, "ScalingActive").get("reason")
        return str(found) if found is not None else None

    await harness.wait(
        lambda: (
            reason("probe") == "PrometheusUrlNotAllowed"
            and reason("allowed") == "MetricsRead"
            and reason("default") == "MetricsRead"
        ),
        what="ScalingActive of the three deployments",
    )
    message = harness.condition(NS, "probe", "ScalingActive")["message"]
    assert "http://169.254.169.254:80" in message and "--prometheus-allowed-url" in message
    assert "meta-data" not in message  # the origin only
    # Never handed to the metrics source; the others were.
    assert {name for name, _ in source.asked} == {"allowed", "default"}

    def refused_events() -> list[dict[str, Any]]:
        return [
            e
            for e in harness.cluster.list("events", NS)
            if (e.get("involvedObject") or e.get("regarding") or {}).get("name") == "probe"
            and e.get("reason") == "PrometheusUrlNotAllowed"
        ]

    # Kopf posts Events after the status write.
    events = await harness.wait(refused_events, what="the PrometheusUrlNotAllowed Event")
    assert len(events) == 1 and events[0]["type"] == "Warning"
    assert "operator.prometheusAllowedUrls" in (events[0].get("message") or events[0].get("note") or "")
    # Held, as with missing metrics: the fleet stays at its first size.
    assert harness.deployment(NS, "probe")["status"]["desiredReplicas"] == 1


async def test_a_query_override_for_the_operators_prometheus_is_refused_when_the_operator_says_so(
    refusing_overrides: tuple[OperatorHarness, RecordingMetrics],
) -> None:
    harness, source = refusing_overrides
    secret = {"utilization": 'sum(other_tenant_secret_metric{namespace="tenant-b"})'}
    await harness.apply(manifest(harness, "override", None, secret))
    await harness.apply(manifest(harness, "own-url", ALLOWED, secret))  # asked without the credentials
    await harness.apply(manifest(harness, "default", None, {"arrivalPeak": ""}))  # a signal off: no override

    def reason(name: str) -> str | None:
        found = harness.condition(NS, name, "ScalingActive").get("reason")
        return str(found) if found is not None else None

    await harness.wait(
        lambda: (
            reason("override") == "PrometheusQueryNotAllowed"
            and reason("own-url") == "MetricsRead"
            and reason("default") == "MetricsRead"
        ),
        what="ScalingActive of the three deployments",
    )
    message = harness.condition(NS, "override", "ScalingActive")["message"]
    assert "spec.scaling.metrics.utilization is not run" in message and "--prometheus-refuse-query-overrides" in message
    assert "other_tenant_secret_metric" not in message
    assert {name for name, _ in source.asked} == {"own-url", "default"}

    def refused_events() -> list[dict[str, Any]]:
        return [
            e
            for e in harness.cluster.list("events", NS)
            if (e.get("involvedObject") or e.get("regarding") or {}).get("name") == "override"
            and e.get("reason") == "PrometheusQueryNotAllowed"
        ]

    events = await harness.wait(refused_events, what="the PrometheusQueryNotAllowed Event")
    assert len(events) == 1 and events[0]["type"] == "Warning"
    assert harness.deployment(NS, "override")["status"]["desiredReplicas"] == 1
