"""The operator's own metrics, scraped over HTTP from the endpoint :func:`serve` starts."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from neuronfleet.metrics.operator_metrics import OperatorMetrics, serve


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def status(desired: int, actual: int, scaling_active: str = "True") -> dict[str, object]:
    return {
        "desiredReplicas": desired,
        "replicas": actual,
        "readyReplicas": actual - 1,
        "warmReplicas": 1,
        "drainingReplicas": 0,
        "placeholders": 2,
        "warmPool": {"desiredPods": 1},
        "conditions": [{"type": "ScalingActive", "status": scaling_active}],
    }


def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted({"namespace": "ns", "name": "bert", **labels}.items()))


def test_reconciles_errors_counts_and_scaling_decisions_are_scraped() -> None:
    metrics = OperatorMetrics()
    port = serve(metrics, 0, "127.0.0.1")
    metrics.record_reconcile("ns", "bert", 0.03, status(2, 2))
    metrics.record_reconcile("ns", "bert", 0.2, status(4, 2), error_kind="ApiException")
    metrics.record_reconcile("ns", "bert", 0.01, status(3, 4, scaling_active="False"))
    samples = scrape(port)
    assert samples[key("neuronfleet_reconciles_total", outcome="ok")] == 2
    assert samples[key("neuronfleet_reconciles_total", outcome="error")] == 1
    assert samples[key("neuronfleet_reconcile_errors_total", kind="ApiException")] == 1
    assert samples[key("neuronfleet_reconcile_duration_seconds_count")] == 3
    assert samples[key("neuronfleet_reconcile_duration_seconds_sum")] == pytest.approx(0.24)
    assert samples[key("neuronfleet_replicas", kind="desired")] == 3
    assert samples[key("neuronfleet_replicas", kind="actual")] == 4
    assert samples[key("neuronfleet_replicas", kind="ready")] == 3
    assert samples[key("neuronfleet_replicas", kind="placeholders")] == 2
    assert samples[key("neuronfleet_replicas", kind="warm_desired")] == 1
    assert samples[key("neuronfleet_scaling_decisions_total", direction="up")] == 1
    assert samples[key("neuronfleet_scaling_decisions_total", direction="down")] == 1
    assert samples[key("neuronfleet_metrics_available")] == 0


def test_forget_drops_a_deleted_objects_series_only() -> None:
    metrics = OperatorMetrics()
    port = serve(metrics, 0, "127.0.0.1")
    metrics.record_reconcile("ns", "bert", 0.01, status(1, 1))
    metrics.record_reconcile("ns", "other", 0.01, status(1, 1))
    metrics.forget("ns", "bert")
    names = {dict(labels).get("name") for _, labels in scrape(port)}
    assert "bert" not in names and "other" in names
