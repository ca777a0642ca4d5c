"""The operator's own metrics, scraped over HTTP from the endpoint :func:`serve` starts."""

from __future__ import annotations

import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.metrics.operator_metrics import OperatorMetrics, serve
from neuronfleet.planning.compile import CompileObservation, compile_request
from neuronfleet.planning.fleet import FleetPolicy
from neuronfleet.planning.observation import DeploymentMemory, Observation, StatusMemory
from neuronfleet.planning.reconcile_plan import plan_reconcile

REPO = Path(__file__).resolve().parents[2]


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
    assert samples[("neuronfleet_reconcile_duration_seconds_count", ())] == 3
    assert samples[("neuronfleet_reconcile_duration_seconds_sum", ())] == pytest.approx(0.24)
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


def test_a_count_the_status_no_longer_holds_has_no_series() -> None:
    # With the warm pool turned off, status.warmPool and the warm counts went away, and the
    # neuronfleet_replicas series kept their last values (warm_desired 1, placeholders 2) for ever.
    metrics = OperatorMetrics()
    port = serve(metrics, 0, "127.0.0.1")
    metrics.record_reconcile("ns", "bert", 0.01, status(2, 2))
    assert scrape(port)[key("neuronfleet_replicas", kind="warm_desired")] == 1
    without_pool = {
        field: value
        for field, value in status(2, 2).items()
        if field not in ("warmPool", "warmReplicas", "placeholders")
    }
    metrics.record_reconcile("ns", "bert", 0.01, without_pool)
    kinds = {dict(labels)["kind"] for name, labels in scrape(port) if name == "neuronfleet_replicas"}
    assert kinds == {"desired", "actual", "ready", "draining"}
    # A reconcile that wrote no status (it failed) says nothing of the counts: they stay.
    metrics.record_reconcile("ns", "bert", 0.01, None, "ApiException")
    assert scrape(port)[key("neuronfleet_replicas", kind="desired")] == 2
    # And a count back in the status is back.
    metrics.record_reconcile("ns", "bert", 0.01, status(2, 2))
    assert scrape(port)[key("neuronfleet_replicas", kind="warm_desired")] == 1


def with_conditions(*conditions: dict[str, str]) -> dict[str, object]:
    return {**status(2, 2), "conditions": list(conditions)}


def test_metrics_available_has_no_series_in_manual_mode() -> None:
    # An alert on neuronfleet_metrics_available == 0 means "the autoscaler holds": a Manual
    # deployment reads no signal and must not look like one holding.
    metrics = OperatorMetrics()
    port = serve(metrics, 0, "127.0.0.1")
    auto_holding = {"type": "ScalingActive", "status": "False", "reason": "MetricsUnavailable"}
    manual = {"type": "ScalingActive", "status": "False", "reason": "ManualScaling"}
    metrics.record_reconcile("ns", "bert", 0.01, with_conditions(auto_holding))
    assert scrape(port)[key("neuronfleet_metrics_available")] == 0
    metrics.record_reconcile("ns", "bert", 0.01, with_conditions(manual))
    assert key("neuronfleet_metrics_available") not in scrape(port)
    metrics.record_reconcile(
        "ns", "bert", 0.01, with_conditions({**auto_holding, "status": "True", "reason": "MetricsRead"})
    )
    assert scrape(port)[key("neuronfleet_metrics_available")] == 1


def test_degraded_is_one_series_per_object_with_the_current_reason() -> None:
    def other(reason: str) -> tuple[tuple[str, str], ...]:
        return tuple(sorted({"namespace": "ns", "name": "other", "reason": reason}.items()))

    metrics = OperatorMetrics()
    port = serve(metrics, 0, "127.0.0.1")
    metrics.record_reconcile(
        "ns", "bert", 0.01, with_conditions({"type": "Degraded", "status": "False", "reason": "AsExpected"})
    )
    assert scrape(port)[key("neuronfleet_degraded", reason="AsExpected")] == 0
    metrics.record_reconcile(
        "ns", "bert", 0.01, with_conditions({"type": "Degraded", "status": "True", "reason": "CompileFailed"})
    )
    metrics.record_reconcile(
        "ns", "other", 0.01, with_conditions({"type": "Degraded", "status": "True", "reason": "CompileFailed"})
    )
    samples = scrape(port)
    degraded = {labels: value for (name, labels), value in samples.items() if name == "neuronfleet_degraded"}
    assert degraded == {
        key("neuronfleet_degraded", reason="CompileFailed")[1]: 1,
        other("CompileFailed"): 1,
    }
    metrics.forget("ns", "other")
    metrics.record_reconcile(
        "ns", "other", 0.01, with_conditions({"type": "Degraded", "status": "True", "reason": "RolloutStalled"})
    )
    assert scrape(port)[("neuronfleet_degraded", other("RolloutStalled"))] == 1


def series_of(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], family: str) -> dict[str, float]:
    """The reason label -> value of one family's series of ns/bert."""
    return {
        dict(labels)["reason"]: value
        for (name, labels), value in samples.items()
        if name == family and dict(labels)["name"] == "bert"
    }


def test_available_is_one_series_per_object_with_the_current_reason() -> None:
    metrics = OperatorMetrics()
    port = serve(metrics, 0, "127.0.0.1")
    for status_, reason in (("False", "AwaitingArtifact"), ("False", "ReplicasNotReady"), ("True", "ReplicasReady")):
        metrics.record_reconcile(
            "ns", "bert", 0.01, with_conditions({"type": "Available", "status": status_, "reason": reason})
        )
        assert series_of(scrape(port), "neuronfleet_available") == {reason: 1 if status_ == "True" else 0}
    # A status without the condition (an error before any status) leaves the series as it was.
    metrics.record_reconcile("ns", "bert", 0.01, with_conditions())
    assert series_of(scrape(port), "neuronfleet_available") == {"ReplicasReady": 1}
    metrics.forget("ns", "bert")
    assert series_of(scrape(port), "neuronfleet_available") == {}
    # After a forget the first reason is the only series again (nothing remembered of before).
    metrics.record_reconcile(
        "ns", "bert", 0.01, with_conditions({"type": "Available", "status": "False", "reason": "ReplicasNotReady"})
    )
    assert series_of(scrape(port), "neuronfleet_available") == {"ReplicasNotReady": 0}


def test_a_deployment_on_its_first_compile_says_so_in_neuronfleet_available() -> None:
    # The series the chart's NeuronfleetReplicasBelowDesired leaves out: desired 1, ready 0 and
    # metrics unavailable while the first compile runs are a deployment coming up, not one failing.
    manifest = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    manifest["metadata"].update({"namespace": "ns", "name": "bert", "generation": 1})
    manifest["spec"]["scaling"] = {"mode": "Auto", "minReplicas": 1, "maxReplicas": 5}
    manifest["spec"]["warmPool"] = {"mode": "Off"}
    dep = InferenceDeployment.model_validate(manifest)
    compiling = CompileObservation(compile_request(dep.spec, "/store", "fp"), None, job_phase="running", job_name="j")
    observation = Observation(
        datetime(2026, 11, 30, 12, 0, tzinfo=UTC), compile=compiling, metrics=None, metrics_problem="no samples"
    )
    result = plan_reconcile(
        dep, observation, DeploymentMemory(), StatusMemory.from_status({}), FleetPolicy(), lambda _: "t" * 10
    )
    metrics = OperatorMetrics()
    port = serve(metrics, 0, "127.0.0.1")
    metrics.record_reconcile("ns", "bert", 0.01, result.status)
    samples = scrape(port)
    assert samples[key("neuronfleet_replicas", kind="desired")] == 1
    assert samples[key("neuronfleet_replicas", kind="ready")] == 0
    assert samples[key("neuronfleet_metrics_available")] == 0
    assert series_of(samples, "neuronfleet_available") == {"AwaitingArtifact": 0}


def test_the_reconcile_duration_histogram_is_the_operators_not_one_per_deployment() -> None:
    # 16 series per deployment (buckets, sum, count, created): 16,000 of them at 1,000 deployments.
    metrics = OperatorMetrics()
    for name in ("a", "b", "c"):
        metrics.record_reconcile("ns", name, 0.01, status(1, 1))
    histogram = [
        s
        for f in metrics.registry.collect()
        if f.name == "neuronfleet_reconcile_duration_seconds"
        for s in f.samples
        if s.name.endswith("_count")
    ]
    assert [(s.labels, s.value) for s in histogram] == [({}, 3)]
