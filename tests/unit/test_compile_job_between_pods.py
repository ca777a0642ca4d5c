"""A running compile Job with no pod listed between two attempts is not a Job the API server refuses.

The Job controller replaces a compile pod that failed or was lost (its node gone, preempted) after
its back-off: meanwhile the Job lists no pod. Read by its age alone as "never made a pod", it was
reported refused (Compiled=False PodCreationRefused, Degraded=True with a Warning) from a
FailedCreate Event of before its first pod (Events last an hour), and with spec.compile changed
meanwhile the running Job was deleted. Found by review r8; the genuine case (a quota refusing the
first pod) is reported as before (tests/unit/test_compile_pod_refusals.py).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from stub_deployments import torchscript_deployment

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.artifacts.store import ArtifactStore
from neuronfleet.kube.builders import BuilderConfig
from neuronfleet.kube.client import JobDeletion
from neuronfleet.kube.jobs import build_compile_job
from neuronfleet.planning.compile import compile_request
from neuronfleet.planning.observation import DeploymentMemory, StatusMemory
from neuronfleet.planning.reasons import Reason
from neuronfleet.planning.reconcile_plan import DeleteCompileJob, ReconcilePlan, plan_reconcile, status_events
from neuronfleet.reconcile import OperatorSettings, Reconciler

IMAGE = "registry.example/neuronserve:0.1.0"
NOW = datetime(2026, 12, 5, 3, 0, 0, tzinfo=UTC)
QUOTA = (
    'Error creating: pods "emb-compile-x" is forbidden: exceeded quota: compute, requested: requests.memory=16Gi, '
    "used: requests.memory=60Gi, limited: requests.memory=64Gi"
)


def _z(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _deployment(tmp_path: Path, memory: str | None = None) -> InferenceDeployment:
    return torchscript_deployment(tmp_path, compile_spec=None if memory is None else {"memory": memory})


def _event(reason: str, message: str, minutes_ago: float, count: int = 1) -> dict[str, Any]:
    at = _z(NOW - timedelta(minutes=minutes_ago))
    return {
        "metadata": {"name": f"emb-compile.{reason}.{minutes_ago}", "creationTimestamp": at},
        "reason": reason,
        "message": message,
        "firstTimestamp": at,
        "lastTimestamp": at,
        "count": count,
    }


class _JobWithoutPodKube:
    """The compile Job (of ``job_dep``'s spec) was made 40 min ago, with ``status``; no pod of it is
    listed now, and its Events are ``events`` (by default: a quota refused its pod 39 min ago, three
    times, before the pod was made). The fleet has no pod and no node."""

    def __init__(
        self,
        job_dep: InferenceDeployment,
        store: Path,
        status: dict[str, Any],
        events: list[dict[str, Any]] | None = None,
    ) -> None:
        self.job_dep, self.store, self.status = job_dep, store, status
        self.events = [_event("FailedCreate", QUOTA, 39, count=3)] if events is None else events
        self.event_reads = 0

    async def list_jobs(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        request = compile_request(
            self.job_dep.spec, str(self.store), ArtifactStore().fingerprint(self.job_dep.spec.model.source), IMAGE
        )
        job = build_compile_job(self.job_dep, request, BuilderConfig(model_server_image=IMAGE))
        job["metadata"]["uid"] = "job-1"
        job["metadata"]["creationTimestamp"] = _z(NOW - timedelta(minutes=40))
        job["status"] = {"startTime": _z(NOW - timedelta(minutes=40)), **self.status}
        return [job]

    async def list_pods(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        return []

    async def list_nodes(self, fresh: bool = False) -> list[dict[str, Any]]:
        return []

    async def list_events(self, namespace: str, fields: Any) -> list[dict[str, Any]]:
        self.event_reads += 1
        return self.events

    async def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return {"metadata": {"name": name}}


async def _plan(tmp_path: Path, kube: _JobWithoutPodKube, dep: InferenceDeployment) -> ReconcilePlan:
    settings = OperatorSettings(artifact_store=str(kube.store), builder=BuilderConfig(model_server_image=IMAGE))
    reconciler = Reconciler(kube, ArtifactStore(), settings, clock=lambda: NOW)  # type: ignore[arg-type]
    observation = await reconciler.observe(dep, DeploymentMemory(), StatusMemory())
    return plan_reconcile(dep, observation, DeploymentMemory(), StatusMemory(), settings.fleet, lambda _: "template")


def _conditions(plan: ReconcilePlan) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in plan.status["conditions"]}


#: What the Job's status says of a pod that existed: one running or ready (the list raced it), one
#: failed or succeeded (counted, or not yet: uncountedTerminatedPods), one being deleted.
MADE_A_POD = [
    {"active": 0, "failed": 1},
    {"active": 1},
    {"ready": 1},
    {"succeeded": 1},
    {"terminating": 1},
    {"uncountedTerminatedPods": {"failed": ["pod-uid-1"]}},
]


async def test_a_job_whose_pod_failed_and_is_not_yet_replaced_is_compiling_not_refused(tmp_path: Path) -> None:
    dep = _deployment(tmp_path)
    kube = _JobWithoutPodKube(dep, tmp_path / "store", {"active": 0, "failed": 1})
    plan = await _plan(tmp_path, kube, dep)
    conditions = _conditions(plan)
    compiled = conditions["Compiled"]
    assert (compiled["status"], compiled["reason"]) == ("Unknown", Reason.COMPILING), compiled
    assert compiled["message"].startswith("compile Job running for "), compiled["message"]
    assert "refus" not in compiled["message"] and "no pod created" not in compiled["message"]
    assert conditions["Degraded"]["status"] != "True", conditions["Degraded"]
    events = status_events(StatusMemory(), plan.status, plan.scale_reason)
    assert [e for e in events if e.reason == Reason.POD_CREATION_REFUSED] == [], events
    # Its Events are read (a FailedCreate newer than its last pod would be why it has none: a refused
    # retry), and the refusal of before its first pod, with no SuccessfulCreate to order it by, is not.
    assert kube.event_reads == 1


@pytest.mark.parametrize("status", MADE_A_POD, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
async def test_no_pod_listed_is_not_a_refusal_once_the_jobs_status_shows_one_existed(
    tmp_path: Path, status: dict[str, Any]
) -> None:
    dep = _deployment(tmp_path)
    no_events: list[dict[str, Any]] = []
    for events in (no_events, None):  # no Event (expired) or the old refusal's: neither says refused
        plan = await _plan(tmp_path, _JobWithoutPodKube(dep, tmp_path / "store", status, events), dep)
        compiled = _conditions(plan)["Compiled"]
        assert compiled["reason"] == Reason.COMPILING, compiled
        assert "no pod created" not in compiled["message"], compiled["message"]


async def test_a_job_between_two_pods_is_kept_when_spec_compile_changed(tmp_path: Path) -> None:
    # Made under spec.compile.memory 16Gi, since raised: a running Job is kept (the change applies to
    # the next compile); only one the API server refuses, which never ran, is replaced at once.
    job_dep, dep = _deployment(tmp_path, "16Gi"), _deployment(tmp_path, "24Gi")
    kube = _JobWithoutPodKube(job_dep, tmp_path / "store", {"active": 0, "failed": 1})
    plan = await _plan(tmp_path, kube, dep)
    assert [a for a in plan.compile_actions if isinstance(a, DeleteCompileJob)] == []
    refused = _JobWithoutPodKube(job_dep, tmp_path / "store", {"active": 0})
    plan = await _plan(tmp_path, refused, dep)
    assert [a.name for a in plan.compile_actions if isinstance(a, DeleteCompileJob)] != []


@pytest.mark.parametrize("status", [{}, {"active": 0, "failed": 0, "succeeded": 0, "ready": 0, "terminating": 0}])
async def test_a_job_that_never_made_a_pod_is_still_refused(tmp_path: Path, status: dict[str, Any]) -> None:
    # The genuine case: the quota refused the Job's first pod, and the Job controller keeps trying.
    dep = _deployment(tmp_path)
    kube = _JobWithoutPodKube(dep, tmp_path / "store", status, [_event("FailedCreate", QUOTA, 1, count=9)])
    plan = await _plan(tmp_path, kube, dep)
    conditions = _conditions(plan)
    assert (conditions["Compiled"]["status"], conditions["Compiled"]["reason"]) == (
        "False",
        Reason.POD_CREATION_REFUSED,
    )
    assert (conditions["Degraded"]["status"], conditions["Degraded"]["reason"]) == (
        "True",
        Reason.POD_CREATION_REFUSED,
    )


# ------------------------------------------- a pod its status does not count: the Job's own Events


def _created_pod(minutes_ago: float) -> dict[str, Any]:
    return _event("SuccessfulCreate", "Created pod: emb-compile-x-abcde", minutes_ago)


async def test_a_failed_create_older_than_the_jobs_last_pod_is_not_the_cause(tmp_path: Path) -> None:
    # The compile Job's pod failure policy ignores a disruption (preempted, its node gone): such a pod
    # is counted nowhere in the Job's status once gone. The Job controller's SuccessfulCreate Event of
    # it, newer than the refusal, says the Job made a pod since.
    job_dep, dep = _deployment(tmp_path, "16Gi"), _deployment(tmp_path, "24Gi")
    events = [_event("FailedCreate", QUOTA, 39, count=3), _created_pod(38)]
    kube = _JobWithoutPodKube(job_dep, tmp_path / "store", {"active": 0}, events)
    conditions = _conditions(await _plan(tmp_path, kube, job_dep))
    assert conditions["Compiled"]["reason"] == Reason.COMPILING, conditions["Compiled"]
    assert "no pod created" not in conditions["Compiled"]["message"], conditions["Compiled"]["message"]
    assert conditions["Degraded"]["status"] != "True", conditions["Degraded"]
    # spec.compile changed meanwhile: the running Job is kept.
    plan = await _plan(tmp_path, kube, dep)
    assert [a for a in plan.compile_actions if isinstance(a, DeleteCompileJob)] == []


async def test_a_failed_create_newer_than_the_jobs_last_pod_is_the_cause(tmp_path: Path) -> None:
    # Its pod lost, the Job's next one is refused now (the quota taken meanwhile): refused again.
    dep = _deployment(tmp_path)
    events = [_created_pod(38), _event("FailedCreate", QUOTA, 1, count=4)]
    plan = await _plan(tmp_path, _JobWithoutPodKube(dep, tmp_path / "store", {"active": 0}, events), dep)
    compiled = _conditions(plan)["Compiled"]
    assert (compiled["status"], compiled["reason"]) == ("False", Reason.POD_CREATION_REFUSED), compiled


async def test_a_resumed_job_is_aged_from_its_start_and_an_older_refusal_is_not_its_cause(tmp_path: Path) -> None:
    # Kubernetes resets status.startTime when a suspended Job is resumed (by a queue controller such
    # as Kueue): made 40 min ago, started 30 s ago, it is young; a FailedCreate of before is no cause.
    dep = _deployment(tmp_path)
    started = {"active": 0, "startTime": _z(NOW - timedelta(seconds=30))}
    kube = _JobWithoutPodKube(dep, tmp_path / "store", started)
    plan = await _plan(tmp_path, kube, dep)
    compiled = _conditions(plan)["Compiled"]
    assert (compiled["reason"], kube.event_reads) == (Reason.COMPILING, 0), compiled
    assert "no pod created" not in compiled["message"], compiled["message"]
    # Two minutes after the start, still no pod: the old Event is still not why; the age is the start's.
    kube.status = {"active": 0, "startTime": _z(NOW - timedelta(seconds=150))}
    plan = await _plan(tmp_path, kube, dep)
    compiled = _conditions(plan)["Compiled"]
    assert compiled["reason"] == Reason.COMPILING, compiled
    assert "its pod is waiting: no pod created for 2 min: the API server may be refusing it" in compiled["message"]


# ------------------------------------- a retry refused after a pod its status counts (review r10)


@pytest.mark.parametrize("status", [{"active": 0, "failed": 1}, {"uncountedTerminatedPods": {"failed": ["pod-uid-1"]}}])
async def test_a_retry_refused_after_a_counted_failure_is_reported(tmp_path: Path, status: dict[str, Any]) -> None:
    # Its first pod made 38 min ago failed (counted), and the quota, taken meanwhile, refuses the retry:
    # the FailedCreate newer than its last SuccessfulCreate is why it has no pod now, not a back-off.
    dep = _deployment(tmp_path)
    events = [_created_pod(38), _event("FailedCreate", QUOTA, 1, count=9)]
    kube = _JobWithoutPodKube(dep, tmp_path / "store", status, events)
    conditions = _conditions(await _plan(tmp_path, kube, dep))
    compiled = conditions["Compiled"]
    assert (compiled["status"], compiled["reason"]) == ("False", Reason.POD_CREATION_REFUSED), compiled
    assert "exceeded quota: compute" in compiled["message"], compiled["message"]
    assert (conditions["Degraded"]["status"], conditions["Degraded"]["reason"]) == (
        "True",
        Reason.POD_CREATION_REFUSED,
    )


# Events are stamped to the second: a retry made in the second of its refusal is as new as it, and
# "as new or newer" reads that as made too.
@pytest.mark.parametrize("refused_minutes_ago", [5, 2], ids=["refused-before", "refused-in-the-same-second"])
async def test_a_counted_failure_whose_retry_is_made_after_the_refusal_is_compiling(
    tmp_path: Path, refused_minutes_ago: float
) -> None:
    # Refused once after its first pod failed, then made (the quota freed): its newest SuccessfulCreate,
    # newer than the refusal, says the retry exists; the list raced it or it is being replaced again.
    dep = _deployment(tmp_path)
    events = [_created_pod(38), _event("FailedCreate", QUOTA, refused_minutes_ago), _created_pod(2)]
    kube = _JobWithoutPodKube(dep, tmp_path / "store", {"active": 0, "failed": 1}, events)
    compiled = _conditions(await _plan(tmp_path, kube, dep))["Compiled"]
    assert compiled["reason"] == Reason.COMPILING, compiled
    assert "no pod created" not in compiled["message"], compiled["message"]


class _AccountGoneKube(_JobWithoutPodKube):
    """The Job's ServiceAccount deleted since its first pod; the operator may not list Events (403)."""

    async def list_events(self, namespace: str, fields: Any) -> list[dict[str, Any]]:
        self.event_reads += 1
        raise ApiException(status=403, reason="Forbidden")

    async def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return None


async def test_a_retry_refused_for_a_deleted_service_account_is_reported(tmp_path: Path) -> None:
    dep = _deployment(tmp_path)
    dep.spec.compile.service_account_name = "model-compiler"
    kube = _AccountGoneKube(dep, tmp_path / "store", {"active": 0, "failed": 1})
    compiled = _conditions(await _plan(tmp_path, kube, dep))["Compiled"]
    assert (compiled["status"], compiled["reason"]) == ("False", Reason.SERVICE_ACCOUNT_MISSING), compiled
    assert "model-compiler" in compiled["message"], compiled["message"]


class _FailedPodListedKube(_JobWithoutPodKube):
    """As a cluster has it: the Job's failed pod (made 38 min ago) is still listed, for its logs."""

    async def list_pods(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        return [
            {
                "metadata": {"name": "emb-compile-x-abcde", "creationTimestamp": _z(NOW - timedelta(minutes=38))},
                "status": {
                    "phase": "Failed",
                    "conditions": [{"type": "PodScheduled", "status": "True"}],
                    "containerStatuses": [{"name": "compile", "state": {"terminated": {"exitCode": 1}}}],
                },
            }
        ]


@pytest.mark.parametrize("created", [True, False], ids=["with-successful-create", "successful-create-expired"])
async def test_a_retry_refused_beside_the_failed_pod_still_listed_is_reported(tmp_path: Path, created: bool) -> None:
    # The Job controller keeps a failed pod: listed, it is no pod that runs. The refusal newer than it
    # (or than its SuccessfulCreate) is why the Job has none now.
    dep = _deployment(tmp_path)
    events = [_created_pod(38)] if created else []
    kube = _FailedPodListedKube(
        dep, tmp_path / "store", {"active": 0, "failed": 1}, [*events, _event("FailedCreate", QUOTA, 1, count=9)]
    )
    compiled = _conditions(await _plan(tmp_path, kube, dep))["Compiled"]
    assert (compiled["status"], compiled["reason"]) == ("False", Reason.POD_CREATION_REFUSED), compiled


@pytest.mark.parametrize("events", [[], None], ids=["no-event", "refused-before-the-pod"])
async def test_a_failed_pod_listed_and_no_newer_refusal_is_compiling(
    tmp_path: Path, events: list[dict[str, Any]] | None
) -> None:
    dep = _deployment(tmp_path)
    kube = _FailedPodListedKube(dep, tmp_path / "store", {"active": 0, "failed": 1}, events)
    compiled = _conditions(await _plan(tmp_path, kube, dep))["Compiled"]
    assert compiled["reason"] == Reason.COMPILING, compiled
    assert "no pod created" not in compiled["message"], compiled["message"]


class _DeletingKube(_JobWithoutPodKube):
    """As :class:`_JobWithoutPodKube`, whose Job's DELETE comes to ``outcome``."""

    def __init__(self, job_dep: InferenceDeployment, store: Path, deletion: JobDeletion) -> None:
        super().__init__(job_dep, store, {"active": 0})
        self.deletion = deletion

    async def delete_job(self, namespace: str, name: str) -> JobDeletion:
        return self.deletion


@pytest.mark.parametrize(
    ("deletion", "said"),
    [
        (JobDeletion("deleted"), "deleted compile Job {job}: the API server refuses its pod"),
        (JobDeletion("held", ("example.com/audit",)), "until the finalizer(s) example.com/audit are removed"),
        (JobDeletion("gone"), None),  # another deleted it first: nothing of ours to announce
    ],
    ids=["deleted", "held", "gone"],
)
async def test_a_superseded_jobs_delete_is_announced_by_what_it_came_to(
    tmp_path: Path, deletion: JobDeletion, said: str | None
) -> None:
    job_dep, dep = _deployment(tmp_path, "16Gi"), _deployment(tmp_path, "24Gi")
    kube = _DeletingKube(job_dep, tmp_path / "store", deletion)
    plan = await _plan(tmp_path, kube, dep)
    (job,) = [a.name for a in plan.compile_actions if isinstance(a, DeleteCompileJob)]
    settings = OperatorSettings(artifact_store=str(kube.store), builder=BuilderConfig(model_server_image=IMAGE))
    reconciler = Reconciler(kube, ArtifactStore(), settings, clock=lambda: NOW)  # type: ignore[arg-type]
    events = await reconciler._apply_compile(dep, plan, asyncio.Event())
    superseded = [e.message for e in events if e.reason == Reason.COMPILE_SUPERSEDED]
    if said is None:
        assert superseded == []
    else:
        assert len(superseded) == 1 and said.format(job=job) in superseded[0], superseded
