"""Compile Jobs an InferenceDeployment finds of the object of the same name deleted before it was
created (a reviewer's repro): the garbage collector removes them in the background, after the owner,
so an object deleted and created again at once lists them with the labels and names of its own.
Their outcome is not the new object's: a failed one was taken as this object's failure and kept in
status.compileFailure after the Job was gone, so the re-created object never compiled.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stub_deployments import torchscript_deployment

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.artifacts.store import ArtifactStore
from neuronfleet.kube.builders import BuilderConfig, held_by_previous
from neuronfleet.kube.jobs import build_compile_job, compile_job_name
from neuronfleet.planning import reconcile_plan
from neuronfleet.planning.compile import CompileDecision, CompileObservation, compile_request, legacy_request
from neuronfleet.planning.observation import DeploymentMemory, StatusMemory
from neuronfleet.planning.reconcile_plan import DeleteCompileJob, StartCompileJob, plan_reconcile
from neuronfleet.reconcile import OperatorSettings, Reconciler

IMAGE = "registry.example/neuronserve:0.1.0"
PREVIOUS_UID, UID = "uid-before", "uid-now"


class _JobsKube:
    """A KubeApi holding these compile Jobs (each with a pod), no fleet pod, no node."""

    def __init__(self, jobs: list[dict[str, Any]]) -> None:
        self.jobs = jobs

    async def list_jobs(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        return self.jobs

    async def list_pods(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        if "job-name" in labels:
            return [{"metadata": {"name": f"{labels['job-name']}-abcde"}, "status": {}}]
        return []

    async def list_nodes(self, fresh: bool = False) -> list[dict[str, Any]]:
        return []

    async def list_events(self, namespace: str, fields: Any) -> list[dict[str, Any]]:
        return []

    async def pod_log_tail(self, namespace: str, name: str, lines: int = 20) -> str:
        return "neuronx-cc: out of memory"


def _deployment(tmp_path: Path, uid: str = UID) -> InferenceDeployment:
    return torchscript_deployment(tmp_path, uid=uid)


def _settings(tmp_path: Path) -> OperatorSettings:
    return OperatorSettings(artifact_store=str(tmp_path / "store"), builder=BuilderConfig(model_server_image=IMAGE))


def _job(dep: InferenceDeployment, phase: str, legacy: bool = False) -> dict[str, Any]:
    """The compile Job ``dep``'s operator made for its spec (its legacy key's with ``legacy``), in ``phase``."""
    fingerprint = ArtifactStore().fingerprint(dep.spec.model.source)
    store = str(Path(dep.spec.model.source).parent / "store")
    request = (
        legacy_request(dep.spec, store, fingerprint, IMAGE)
        if legacy
        else compile_request(dep.spec, store, fingerprint, IMAGE)
    )
    assert request is not None
    job = build_compile_job(dep, request, BuilderConfig(model_server_image=IMAGE))
    job["metadata"]["uid"] = f"job-of-{dep.metadata.uid}"
    job["metadata"]["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = {
        "running": [],
        "failed": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "OOM"}],
    }[phase]
    job["status"] = {"active": 1 if phase == "running" else 0, "conditions": conditions}
    return job


async def _round(
    tmp_path: Path, jobs: list[dict[str, Any]]
) -> tuple[CompileDecision, tuple[Any, ...], tuple[str, ...], CompileObservation, dict[str, Any]]:
    """The re-created object's first reconcile: its compile decision, actions and errors, and status."""
    dep = _deployment(tmp_path)
    settings = _settings(tmp_path)
    reconciler = Reconciler(_JobsKube(jobs), ArtifactStore(), settings)  # type: ignore[arg-type]
    observation = await reconciler.observe(dep, DeploymentMemory(), StatusMemory())
    assert observation.compile_error is None and observation.compile is not None
    decision, actions, errors = reconcile_plan._compile(dep, observation, StatusMemory(), [], takeover=True)
    plan = plan_reconcile(dep, observation, DeploymentMemory(), StatusMemory(), settings.fleet, lambda _: "template")
    return decision, actions, errors, observation.compile, plan.status


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


async def test_the_previous_objects_failed_job_is_waited_for_not_taken_as_this_objects_failure(tmp_path: Path) -> None:
    failed = _job(_deployment(tmp_path, PREVIOUS_UID), "failed")
    decision, actions, errors, observed, status = await _round(tmp_path, [failed])
    assert decision.reason == "Compiling" and decision.failure is None, decision
    assert (observed.job_phase, observed.running_jobs) == ("taken", ())
    assert "compileFailure" not in status
    assert "previous InferenceDeployment emb" in decision.message
    assert "garbage collector is removing it" in decision.message
    # Its name is the request's: nothing is made until the collector has removed it, nothing deleted.
    assert actions == () and errors == ()
    assert _condition(status, "Degraded")["status"] == "False"
    # Once it is gone, this object's Job is made under that name.
    _, actions, _, _, _ = await _round(tmp_path, [])
    assert [(type(a), a.name) for a in actions] == [(StartCompileJob, failed["metadata"]["name"])]


async def test_the_previous_objects_running_jobs_are_left_to_the_collector(tmp_path: Path) -> None:
    previous = _deployment(tmp_path, PREVIOUS_UID)
    # One of the request's name (the same spec), one of the legacy key (another name): neither is
    # this object's compile, to follow, adopt or supersede.
    for job in (_job(previous, "running"), _job(previous, "running", legacy=True)):
        decision, actions, errors, observed, _ = await _round(tmp_path, [job])
        assert not any(isinstance(a, DeleteCompileJob) for a in actions), actions
        assert observed.running_jobs == () and errors == ()
        request_job = compile_job_name("emb", observed.request)
        if job["metadata"]["name"] == request_job:
            assert actions == () and decision.reason == "Compiling" and "garbage collector" in decision.message
        else:
            assert [(type(a), a.name) for a in actions] == [(StartCompileJob, request_job)]


async def test_a_legacy_job_this_object_controls_is_still_adopted(tmp_path: Path) -> None:
    legacy = _job(_deployment(tmp_path), "running", legacy=True)
    _, actions, _, observed, _ = await _round(tmp_path, [legacy])
    assert (actions, observed.job_name, observed.job_phase) == ((), legacy["metadata"]["name"], "running")


async def test_a_job_of_the_requests_name_another_owner_controls_is_reported(tmp_path: Path) -> None:
    job = _job(_deployment(tmp_path), "failed")
    job["metadata"]["ownerReferences"] = []  # orphaned (a deletion with --cascade=orphan), or made by hand
    decision, actions, errors, _, status = await _round(tmp_path, [job])
    assert actions == () and decision.failure is None
    assert errors and "no controller" in errors[0] and "delete or rename it" in errors[0], errors
    assert _condition(status, "Degraded")["reason"] == "ReconcileError"


def test_held_by_previous_is_an_object_of_the_same_kind_and_name_under_another_uid(tmp_path: Path) -> None:
    job = _job(_deployment(tmp_path, PREVIOUS_UID), "running")
    assert held_by_previous(job, "emb", UID)
    assert not held_by_previous(job, "emb", PREVIOUS_UID)  # its own
    assert not held_by_previous(job, "other", UID)
    ref = job["metadata"]["ownerReferences"][0]
    assert not held_by_previous({"metadata": {"ownerReferences": [{**ref, "kind": "Deployment"}]}}, "emb", UID)
    assert not held_by_previous({"metadata": {"ownerReferences": [{**ref, "controller": False}]}}, "emb", UID)
    assert not held_by_previous({"metadata": {}}, "emb", UID)
    assert not held_by_previous(None, "emb", UID)
