"""Which deployments a reconcile reads the autoscaler's metrics for: an Auto one whose decision is
due, never a Manual one (its count is the spec's, and each snapshot is a round of Prometheus
queries run with the operator's credentials)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stub_deployments import EmptyCluster, torchscript_deployment

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.artifacts.store import ArtifactStore
from neuronfleet.kube.builders import BuilderConfig
from neuronfleet.planning.observation import DeploymentMemory, StatusMemory
from neuronfleet.planning.signals import MetricSnapshot
from neuronfleet.reconcile import OperatorSettings, Reconciler
from neuronfleet.sandbox.artifacts import record_uncompiled_artifact

IMAGE = "registry.example/neuronserve:0.1.0"


class _CountingMetrics:
    """A metrics source that answers an idle fleet and counts the snapshots asked of it."""

    def __init__(self) -> None:
        self.snapshots = 0

    async def snapshot(self, dep: InferenceDeployment, now: float) -> tuple[MetricSnapshot | None, str]:
        self.snapshots += 1
        return MetricSnapshot(time=now, queue_depth=0, in_flight=0, arrival_rate=0, utilization=0), ""


async def _snapshots_read(tmp_path: Path, scaling: dict[str, Any]) -> tuple[int, MetricSnapshot | None]:
    doc = torchscript_deployment(tmp_path).model_dump(by_alias=True, exclude_none=True)
    doc["spec"]["scaling"] = scaling
    dep = InferenceDeployment.model_validate(doc)
    store = tmp_path / "store"
    record_uncompiled_artifact(dep.spec, store, "compiled", IMAGE)
    settings = OperatorSettings(artifact_store=str(store), builder=BuilderConfig(model_server_image=IMAGE))
    metrics = _CountingMetrics()
    reconciler = Reconciler(EmptyCluster(), ArtifactStore(), settings, metrics)  # type: ignore[arg-type]
    observation = await reconciler.observe(dep, DeploymentMemory(), StatusMemory())
    return metrics.snapshots, observation.metrics


async def test_an_auto_deployment_due_a_decision_reads_one_snapshot(tmp_path: Path) -> None:
    count, snapshot = await _snapshots_read(tmp_path, {"mode": "Auto", "minReplicas": 1, "maxReplicas": 4})
    assert count == 1
    assert snapshot is not None


async def test_a_manual_deployment_reads_no_metrics(tmp_path: Path) -> None:
    count, snapshot = await _snapshots_read(tmp_path, {"mode": "Manual", "replicas": 2})
    assert count == 0
    assert snapshot is None
