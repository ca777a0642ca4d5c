"""Query overrides refused for the operator's own Prometheus: which fields count, and the message."""

from __future__ import annotations

import pytest

from neuronfleet.api.v1alpha1 import MetricQueries
from neuronfleet.planning.prometheus_queries import overridden_queries, query_override_refusal


def test_the_default_queries_and_empty_ones_are_no_override() -> None:
    assert overridden_queries(MetricQueries()) == []
    assert query_override_refusal(MetricQueries()) is None
    # An empty query turns its signal off: nothing is asked, so nothing is read with the credentials.
    off = MetricQueries.model_validate({"utilization": "", "arrivalPeak": "  "})
    assert query_override_refusal(off) is None


@pytest.mark.parametrize(
    "field", ["queueDepth", "inFlight", "arrivalRate", "arrivalPeak", "utilization", "reporting", "sampleTime"]
)
def test_every_query_field_counts(field: str) -> None:
    metrics = MetricQueries.model_validate({field: 'sum(other_tenant_secret_metric{namespace="tenant-b"})'})
    assert overridden_queries(metrics) == [field]
    refusal = query_override_refusal(metrics)
    assert refusal is not None and refusal.startswith(f"spec.scaling.metrics.{field} is not run")
    assert "--prometheus-refuse-query-overrides" in refusal and "operator.prometheusRefuseQueryOverrides" in refusal
    assert "other_tenant_secret_metric" not in refusal  # the query is not quoted back


def test_a_spec_with_its_own_prometheus_url_runs_its_own_queries() -> None:
    metrics = MetricQueries.model_validate({"prometheusUrl": "http://prom.team-a:9090", "utilization": "sum(x)"})
    assert query_override_refusal(metrics) is None


def test_the_message_names_every_overridden_field() -> None:
    metrics = MetricQueries.model_validate({"utilization": "sum(x)", "queueDepth": "sum(y)", "timeoutSeconds": 3})
    refusal = query_override_refusal(metrics)
    assert refusal is not None
    assert refusal.startswith("spec.scaling.metrics.queueDepth, spec.scaling.metrics.utilization are not run")
