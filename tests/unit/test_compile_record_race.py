"""A compile Job that succeeds between the operator's read of its request record and its list of Jobs.

The reconcile reads the record first and the Jobs after: a Job that wrote its record and ended in
between was seen succeeded with no record, and the deployment reported ``Compiled=False
ArtifactMissing`` (a failure the user is told to retry by hand) for a compile that had worked. It
happened in CI (``test_sandbox_simulated_compile``): the record is read again once the Job is seen
succeeded, once per Job.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stub_deployments import EmptyCluster, torchscript_deployment

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.artifacts.store import ArtifactStore
from neuronfleet.kube.builders import BuilderConfig
from neuronfleet.kube.jobs import build_compile_job
from neuronfleet.planning.compile import compile_request
from neuronfleet.planning.observation import DeploymentMemory, StatusMemory
from neuronfleet.planning.reconcile_plan import plan_reconcile
from neuronfleet.reconcile import OperatorSettings, Reconciler
from neuronfleet.sandbox.artifacts import record_uncompiled_artifact

IMAGE = "registry.example/neuronserve:0.1.0"


def _deployment(tmp_path: Path) -> InferenceDeployment:
    return torchscript_deployment(tmp_path)


class _JobEndsWhileListed(EmptyCluster):
    """A KubeApi whose compile Job writes its record and succeeds just before the operator lists it
    (``writes``: whether it writes one: a Job that stores elsewhere does not)."""

    def __init__(self, dep: InferenceDeployment, store: Path, writes: bool = True) -> None:
        self.dep, self.store, self.writes = dep, store, writes
        self.listed = 0

    async def list_jobs(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        self.listed += 1
        if self.writes and self.listed == 1:
            record_uncompiled_artifact(self.dep.spec, self.store, "compiled", IMAGE)
        request = compile_request(
            self.dep.spec, str(self.store), ArtifactStore().fingerprint(self.dep.spec.model.source), IMAGE
        )
        job = build_compile_job(self.dep, request, BuilderConfig(model_server_image=IMAGE))
        job["metadata"]["uid"] = "job-1"
        job["metadata"]["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        job["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
        return [job]


def _compiled(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Compiled")


async def test_a_job_that_succeeds_after_the_record_was_read_is_compiled_not_artifact_missing(
    tmp_path: Path,
) -> None:
    dep = _deployment(tmp_path)
    store = tmp_path / "store"
    settings = OperatorSettings(artifact_store=str(store), builder=BuilderConfig(model_server_image=IMAGE))
    reconciler = Reconciler(_JobEndsWhileListed(dep, store), ArtifactStore(), settings)  # type: ignore[arg-type]
    memory = DeploymentMemory()
    observation = await reconciler.observe(dep, memory, StatusMemory())
    assert observation.compile is not None and observation.compile.job_phase == "succeeded"
    plan = plan_reconcile(dep, observation, memory, StatusMemory(), settings.fleet, lambda _: "template")
    compiled = _compiled(plan.status)
    assert (compiled["status"], compiled["reason"]) == ("True", "ArtifactReady"), compiled


async def test_a_job_that_succeeded_without_its_record_is_read_again_once_and_reported(tmp_path: Path) -> None:
    dep = _deployment(tmp_path)
    store = tmp_path / "store"
    settings = OperatorSettings(artifact_store=str(store), builder=BuilderConfig(model_server_image=IMAGE))
    kube = _JobEndsWhileListed(dep, store, writes=False)
    reads: list[Any] = []

    class CountingStore(ArtifactStore):
        def lookup(self, request: Any, recheck: bool = False) -> Any:
            reads.append(request.key)
            return super().lookup(request, recheck)

    reconciler = Reconciler(kube, CountingStore(), settings)  # type: ignore[arg-type]
    memory = DeploymentMemory()
    for _ in range(3):
        observation = await reconciler.observe(dep, memory, StatusMemory())
        plan = plan_reconcile(dep, observation, memory, StatusMemory(), settings.fleet, lambda _: "template")
        memory = plan.memory
        compiled = _compiled(plan.status)
        assert (compiled["status"], compiled["reason"]) == ("False", "ArtifactMissing"), compiled
    # The first reconcile read the record twice (before and after it saw the Job succeeded); the
    # later ones once each: the Job was known succeeded before they read.
    assert len(reads) == 4, reads
