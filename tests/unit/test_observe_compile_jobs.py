"""What a running compile Job's observation says when its pod has not started.

A pod the API server refuses (a ResourceQuota, a LimitRange, an admission webhook) is never made:
the Job controller retries the create and says why only in a FailedCreate Event, so the Compiled
condition read "compile Job running" for the Job's whole timeoutSeconds (1-2 h), then
DeadlineExceeded with no cause. Time here is the reconcile's ``now`` against the Job's
creationTimestamp; no clock is waited on.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.kube.jobs import compile_job_name
from neuronfleet.kube.observe import NO_POD_SECONDS, observe_compile_jobs
from neuronfleet.planning.compile import CompileObservation, compile_request, decide_compile

REPO = Path(__file__).resolve().parents[2]
CREATED = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


class _Kube:
    """A KubeApi that lists these Jobs and these pods (all the compile-Job reads need)."""

    def __init__(self, jobs: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        self.jobs, self.pods = jobs, pods
        self.reads: list[tuple[str, str, str]] = []

    async def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads.append((kind, namespace, name))
        return None  # every account these tests name is missing

    async def list_jobs(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        return self.jobs

    async def list_pods(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        return self.pods

    async def list_events(self, namespace: str, fields: Any) -> list[dict[str, Any]]:
        return []  # no FailedCreate Event (expired, or never recorded): the message stays general


def _deployment() -> InferenceDeployment:
    doc = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    doc["metadata"]["namespace"] = "search"
    return InferenceDeployment.model_validate(doc)


def _running_job(dep: InferenceDeployment, **status: Any) -> dict[str, Any]:
    """The current request's compile Job (what observe reads of it), made at CREATED, with no
    condition: running."""
    name = compile_job_name(dep.name, compile_request(dep.spec, "s3://artifacts", "fingerprint"))
    created = CREATED.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"name": name, "namespace": "search", "creationTimestamp": created, "annotations": {}},
        "spec": {"backoffLimit": 0},
        "status": status,
    }


async def _message(job: dict[str, Any], pods: list[dict[str, Any]], now: datetime | None) -> str:
    dep = _deployment()
    request = compile_request(dep.spec, "s3://artifacts", "fingerprint")
    seen = await observe_compile_jobs(_Kube([job], pods), "search", dep.name, request, now)  # type: ignore[arg-type]
    assert seen.phase == "running"
    return seen.message


async def test_a_job_without_a_pod_after_a_minute_says_the_api_server_may_be_refusing_it() -> None:
    dep = _deployment()
    job = _running_job(dep, active=0)
    request = compile_request(dep.spec, "s3://artifacts", "fingerprint")
    seen = await observe_compile_jobs(
        _Kube([job], []),  # type: ignore[arg-type]
        "search",
        dep.name,
        request,
        CREATED + timedelta(seconds=150),
    )
    name = job["metadata"]["name"]
    assert seen.message == (
        "no pod created for 2 min: the API server may be refusing it (a ResourceQuota, LimitRange or "
        f"admission policy); see the FailedCreate events of kubectl describe job {name} -n search"
    )
    # The planner puts it in the Compiled condition, instead of a plain "running" for 1-2 h.
    observed = CompileObservation(request, None, "running", seen.message, job_name=seen.name)
    assert decide_compile(observed, None).message.endswith(f"; its pod is waiting: {seen.message}")


async def test_a_young_job_without_a_pod_is_only_running() -> None:
    # The Job controller makes the pod within seconds; a slow one is not called refused.
    job = _running_job(_deployment())
    assert await _message(job, [], CREATED + timedelta(seconds=NO_POD_SECONDS - 1)) == ""
    assert await _message(job, [], CREATED + timedelta(seconds=NO_POD_SECONDS)) != ""


async def test_without_the_reconciles_clock_or_a_creation_time_nothing_is_guessed() -> None:
    job = _running_job(_deployment())
    assert await _message(job, [], None) == ""
    del job["metadata"]["creationTimestamp"]
    assert await _message(job, [], CREATED + timedelta(hours=1)) == ""


async def test_a_suspended_job_has_no_pod_by_design() -> None:
    job = _running_job(_deployment())
    job["spec"]["suspend"] = True
    assert await _message(job, [], CREATED + timedelta(hours=1)) == ""


async def test_a_failed_create_condition_is_reported_as_is() -> None:
    condition = {
        "type": "ReplicaFailure",
        "status": "True",
        "reason": "FailedCreate",
        "message": 'pods "bert-compile-x" is forbidden: exceeded quota: compute, requested: memory=24Gi',
    }
    job = _running_job(_deployment(), conditions=[condition])
    # Young or not: the cause is known.
    assert await _message(job, [], CREATED + timedelta(seconds=5)) == (
        'FailedCreate: pods "bert-compile-x" is forbidden: exceeded quota: compute, requested: memory=24Gi'
    )
    # A condition that has cleared (status False: the pod was made since) is no cause.
    cleared = _running_job(_deployment(), conditions=[{**condition, "status": "False"}])
    assert await _message(cleared, [], CREATED + timedelta(seconds=5)) == ""


async def test_a_job_whose_pod_exists_reads_the_pod_not_its_age() -> None:
    job = _running_job(_deployment(), active=1)
    pulling = {
        "metadata": {"name": "bert-compile-x-abcde"},
        "status": {"containerStatuses": [{"state": {"waiting": {"reason": "ImagePullBackOff", "message": "denied"}}}]},
    }
    running = {"metadata": {"name": "bert-compile-x-abcde"}, "status": {"containerStatuses": [{"state": {}}]}}
    late = CREATED + timedelta(hours=1)
    assert await _message(job, [pulling], late) == "ImagePullBackOff: denied"
    assert await _message(job, [running], late) == ""


async def test_a_job_being_deleted_is_not_running_and_says_what_holds_it() -> None:
    # Kept by another controller's finalizer after the operator's DELETE, it was listed as running and
    # deleted again, with an Event, on every reconcile.
    dep = _deployment()
    job = _running_job(dep, active=1)
    job["metadata"].update(deletionTimestamp="2025-01-01T12:01:00Z", finalizers=["example.com/audit"])
    old = {**_running_job(dep, active=1), "metadata": {**job["metadata"], "name": "older-request-job"}}
    request = compile_request(dep.spec, "s3://artifacts", "fingerprint")
    seen = await observe_compile_jobs(
        _Kube([job, old], []),  # type: ignore[arg-type]
        "search",
        dep.name,
        request,
        CREATED + timedelta(seconds=150),
    )
    assert (seen.phase, seen.running) == ("removing", ())
    assert seen.message == "being deleted since 2025-01-01T12:01:00Z, held by the finalizer(s) example.com/audit"


async def test_a_held_jobs_live_pods_are_those_its_uid_controls() -> None:
    # A Job being deleted (another controller's finalizer holds it): its live pods are what the plan
    # deletes on every reconcile. By the Job's uid, not its name alone: a pod of an earlier Job of
    # that name, or one labelled by hand, is not its compile.
    dep = _deployment()
    held = {
        "metadata": {
            "name": "old-job",
            "namespace": "search",
            "uid": "uid-held",
            "deletionTimestamp": "2025-01-01T12:05:00Z",
            "finalizers": ["example.com/audit"],
        },
        "status": {},
    }

    def pod(name: str, uid: str, **meta: Any) -> dict[str, Any]:
        refs = [{"kind": "Job", "name": "old-job", "uid": uid, "controller": True}]
        return {"metadata": {"name": name, "labels": {"job-name": "old-job"}, "ownerReferences": refs, **meta}}

    pods = [
        pod("old-job-live", "uid-held"),
        pod("old-job-going", "uid-held", deletionTimestamp="2025-01-01T12:05:01Z"),
        pod("old-job-earlier", "uid-earlier"),
    ]
    request = compile_request(dep.spec, "s3://artifacts", "fingerprint")
    seen = await observe_compile_jobs(_Kube([held], pods), "search", dep.name, request, CREATED)  # type: ignore[arg-type]
    assert seen.held_pods == (("old-job", ("old-job-live",)),)
    assert seen.running == ()


async def test_a_job_whose_pod_succeeded_is_finishing_and_reads_no_account() -> None:
    # Its pod succeeded and the Job controller has not marked it complete yet (or did after the Job
    # was listed): no next pod is due, so nothing refuses one. It read as a Job between two pods, and
    # its account was read and named missing when it was (the likely cause of the one account read an
    # e2e run saw after its compile had moved on; that timing was not reproduced on demand).
    dep = _deployment()
    request = compile_request(dep.spec, "s3://artifacts", "fingerprint")
    late = CREATED + timedelta(hours=1)

    async def observed(phase: str, job_uid: str = "job-1") -> tuple[str, list[tuple[str, str, str]]]:
        job = _running_job(dep, active=0)
        job["metadata"]["uid"] = job_uid
        job["spec"]["template"] = {"spec": {"serviceAccountName": "model-compiler"}}
        owner = {"kind": "Job", "name": job["metadata"]["name"], "uid": "job-1", "controller": True}
        pod = {
            "metadata": {"name": f"{job['metadata']['name']}-abcde", "ownerReferences": [owner]},
            "status": {"phase": phase},
        }
        kube = _Kube([job], [pod])
        seen = await observe_compile_jobs(kube, "search", dep.name, request, late)  # type: ignore[arg-type]
        return seen.missing_service_account or seen.message, kube.reads

    assert await observed("Succeeded") == ("", [])
    # The succeeded pod of an earlier Job of this name (made again: a retry), not yet collected, is not its own.
    assert await observed("Succeeded", job_uid="job-2") == (
        "model-compiler",
        [("ServiceAccount", "search", "model-compiler")],
    )
    # A failed pod is between two attempts: a missing account refuses the next, so it is read.
    assert await observed("Failed") == ("model-compiler", [("ServiceAccount", "search", "model-compiler")])


class _KubeWithLogs(_Kube):
    async def pod_log_tail(self, namespace: str, name: str) -> str:
        return f"Traceback ...\nneuronx-cc failed in {name}\n"


def _failed_pod(name: str, created: str, **terminated: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "status": {"containerStatuses": [{"state": {"terminated": {"exitCode": 1, **terminated}}}]},
    }


async def _failure(pods: list[dict[str, Any]]) -> str:
    dep = _deployment()
    job = _running_job(dep, failed=2)
    job["status"]["conditions"] = [
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the limit"}
    ]
    request = compile_request(dep.spec, "s3://artifacts", "fingerprint")
    seen = await observe_compile_jobs(_KubeWithLogs([job], pods), "search", dep.name, request, CREATED)  # type: ignore[arg-type]
    assert seen.phase == "failed"
    return seen.message


async def test_a_failed_compile_says_how_its_newest_pod_ended() -> None:
    # Out of memory: only the container's reason says so (its log ends mid-compile), and the fix is
    # spec.compile.memory.
    oom = _failed_pod("c-new", "2025-01-01T12:05:00Z", reason="OOMKilled", exitCode=137)
    said = _failed_pod("c-old", "2025-01-01T12:00:00Z", message="unsupported operator aten::foo")
    message = await _failure([said, oom])
    assert message.endswith("; the compile ran out of memory (OOMKilled, exit code 137): raise spec.compile.memory")
    assert message.startswith("BackoffLimitExceeded")
    # Its termination message (the compile's own, or its log's tail under FallbackToLogsOnError).
    assert (await _failure([said])).endswith("; unsupported operator aten::foo")
    # Neither: the tail of its log.
    assert (await _failure([_failed_pod("c-x", "2025-01-01T12:00:00Z")])).endswith(
        "; log tail: Traceback ...\nneuronx-cc failed in c-x"
    )
