"""Which of a reconcile's reads an API error answered.

An error from any read of the cluster, with a compile request, was taken for a failed read of the
compile Jobs: a 429 (API Priority and Fairness) on the list of the fleet's pods read ``Compiled
Unknown StoreUnavailable`` and ``Degraded: compile pipeline: compile Jobs: 429``, though the Jobs
were never listed and the artifact was stored; the fleet was then listed a second time. The
fleet's reads are needed to plan (their error fails the reconcile, naming the read, as without a
compile request); the compile Jobs' error alone is reported in the status and retried. Review r8.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from stub_deployments import torchscript_deployment

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.artifacts.store import ArtifactStore
from neuronfleet.kube.builders import BuilderConfig
from neuronfleet.planning.observation import DeploymentMemory, StatusMemory
from neuronfleet.planning.reconcile_plan import plan_reconcile
from neuronfleet.reconcile import OperatorSettings, Reconciler
from neuronfleet.sandbox.artifacts import record_uncompiled_artifact

IMAGE = "registry.example/neuronserve:0.1.0"
THROTTLED: dict[str, Any] = {"status": 429, "reason": "Too Many Requests"}


def _deployment(tmp_path: Path) -> InferenceDeployment:
    return torchscript_deployment(tmp_path)


class _Throttled:
    """A KubeApi whose first call of ``failing`` (list_pods, list_nodes or list_jobs) answers 429."""

    def __init__(self, failing: str) -> None:
        self.failing = failing
        self.calls: list[str] = []

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name == self.failing and self.calls.count(name) == 1:
            raise ApiException(**THROTTLED)

    async def list_pods(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        self._call("list_pods")
        return []

    async def list_nodes(self, fresh: bool = False) -> list[dict[str, Any]]:
        self._call("list_nodes")
        return []

    async def list_jobs(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        self._call("list_jobs")
        return []

    async def list_events(self, namespace: str, fields: Any) -> list[dict[str, Any]]:
        return []


def _reconciler(tmp_path: Path, dep: InferenceDeployment, kube: _Throttled) -> Reconciler:
    store = tmp_path / "store"
    record_uncompiled_artifact(dep.spec, store, "compiled", IMAGE)  # the artifact is stored
    settings = OperatorSettings(artifact_store=str(store), builder=BuilderConfig(model_server_image=IMAGE))
    return Reconciler(kube, ArtifactStore(), settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(("failing", "read"), [("list_pods", "the pods of emb"), ("list_nodes", "the nodes")])
async def test_a_failed_fleet_read_is_named_and_not_blamed_on_the_compile_jobs(
    tmp_path: Path, failing: str, read: str
) -> None:
    dep = _deployment(tmp_path)
    kube = _Throttled(failing)
    reconciler = _reconciler(tmp_path, dep, kube)

    with pytest.raises(ApiException) as raised:
        await reconciler.observe(dep, DeploymentMemory(), StatusMemory())

    # Raised (the daemon's ReconcileFailed Event and back-off), as without a compile request: no
    # status is planned from a fleet unread, so no condition says anything of the compile.
    assert raised.value.status == 429
    assert read in str(raised.value), f"the failed read is not named: {raised.value}"
    assert kube.calls.count(failing) == 1, "the fleet was read again after its read failed"


async def test_a_failed_compile_jobs_read_is_reported_and_the_fleet_not_read_again(tmp_path: Path) -> None:
    # The control: the Jobs' own error is still the compile pipeline's, and the fleet, read once
    # and fine, is planned from.
    dep = _deployment(tmp_path)
    kube = _Throttled("list_jobs")
    reconciler = _reconciler(tmp_path, dep, kube)

    observation = await reconciler.observe(dep, DeploymentMemory(), StatusMemory())
    plan = plan_reconcile(dep, observation, DeploymentMemory(), StatusMemory(), reconciler.settings.fleet, str)

    compiled = next(c for c in plan.status["conditions"] if c["type"] == "Compiled")
    assert (compiled["status"], compiled["reason"]) == ("Unknown", "StoreUnavailable")
    assert compiled["message"].startswith("compile Jobs: 429 Too Many Requests")
    assert kube.calls.count("list_pods") == 1 and kube.calls.count("list_nodes") == 1
