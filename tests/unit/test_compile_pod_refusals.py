"""A compile Job's pod the API server refuses is named from the Job's FailedCreate Event.

The Job controller, not the operator, creates the compile pod: a refusal is said only in a Warning
Event on the Job, ``Error creating: <the API server's error>`` (kubernetes
pkg/controller/controller_utils.go, RealPodControl.createPods). The wording below is the API
server's: the LimitRanger (plugin/pkg/admission/limitranger), pod validation
(pkg/apis/core/validation), the ResourceQuota admission plugin (``exceeded quota: %s, requested:
%s, used: %s, limited: %s``; ``failed quota: %s: must specify %s``), the ServiceAccount admission
plugin and a validating webhook's denial.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.kube.builders import BuilderConfig
from neuronfleet.kube.jobs import build_compile_job
from neuronfleet.kube.observe import AccountReads, JobEventReads, observe_compile_jobs
from neuronfleet.planning.admission import compile_pods, compile_refusal, refusal_for, workload_account
from neuronfleet.planning.compile import CompileObservation, compile_request
from neuronfleet.planning.fleet import FleetPolicy
from neuronfleet.planning.observation import DeploymentMemory, Observation, StatusMemory
from neuronfleet.planning.reasons import Reason
from neuronfleet.planning.reconcile_plan import DeleteCompileJob, plan_reconcile
from neuronfleet.planning.status import find_condition

REPO = Path(__file__).resolve().parents[2]
CREATED = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
POD = 'pods "bert-embeddings-compile-3f9c2a1b7d-"'


def deployment(**compile_spec: Any) -> InferenceDeployment:
    manifest = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    manifest["metadata"].update({"namespace": "search", "generation": 1, "uid": "5f0c6a3e-0000-4000-8000-000000000001"})
    manifest["spec"]["compile"].update(compile_spec)
    manifest["spec"]["scaling"] = {"mode": "Manual", "replicas": 1, "minReplicas": 0}
    manifest["spec"]["warmPool"] = {"mode": "Off"}
    return InferenceDeployment.model_validate(manifest)


def refusal(event_message: str, **compile_spec: Any) -> Any:
    dep = deployment(**compile_spec)
    account = workload_account("compile", dep.spec.compile.service_account_name, None)
    return compile_refusal(event_message, account, compile_pods("search", dep.spec.compile))


# ---------------------------------------------------------------------------------- recognition


def test_a_limit_ranges_default_cpu_limit_below_the_compile_request_names_spec_compile() -> None:
    named = refusal(
        'Error creating: Pod "bert-embeddings-compile-3f9c2a1b7d-x7k2p" is invalid: '
        'spec.containers[0].resources.requests: Invalid value: "2": must be less than or equal to cpu limit of 1'
    )
    assert named.reason == Reason.LIMIT_RANGE_REFUSED
    assert named.message == (
        "a LimitRange in namespace search gives a container that sets no CPU limit a default CPU limit of 1, below "
        "the CPU request of the compile Job's pod, 2 (spec.compile.cpu 2): the API server refuses a pod whose CPU "
        "limit is below its request, so the compile Job makes no pod (the Job controller keeps trying) (kubectl "
        "describe limitrange -n search). Set spec.compile.cpuLimit to at least 2 (a pod's own limit is not replaced "
        "by the default; unless the LimitRange's max CPU is below 2, which then refuses that limit), or set "
        "spec.compile.cpu to at most 1, or raise the LimitRange's default CPU limit"
    )


@pytest.mark.parametrize(
    ("said", "fix"),
    [
        ("maximum memory usage per Container is 4Gi, but limit is 8Gi", "set spec.compile.memory to at most 4Gi"),
        ("minimum cpu usage per Container is 4, but request is 2", "set spec.compile.cpu to at least 4"),
        ("maximum cpu usage per Container is 4.  No limit is specified", "set spec.compile.cpuLimit to at most 4"),
        (
            "maximum cpu usage per Container is 1.  No limit is specified",
            "set spec.compile.cpu to at most 1 (the request is 2: a spec.compile.cpuLimit between the request and "
            "the maximum cannot exist)",
        ),
        (
            "maximum ephemeral-storage usage per Container is 20Gi, but limit is 64Gi",
            "set spec.compile.ephemeralStorage to at most 20Gi",
        ),
    ],
)
def test_a_limit_ranges_min_or_max_names_the_spec_compile_field(said: str, fix: str) -> None:
    named = refusal(f"Error creating: {POD} is forbidden: {said}")
    assert named.reason == Reason.LIMIT_RANGE_REFUSED
    assert named.message.startswith(f"a LimitRange in namespace search refuses the compile Job's pod: {said} (it ")
    assert "so the compile Job makes no pod" in named.message
    assert named.message.endswith(f": {fix}, or change the LimitRange") or named.message.endswith(
        f": {fix} (and at least the request), or change the LimitRange"
    )
    assert "spec.runtime" not in named.message


def test_a_quota_exceeded_quotes_the_api_server_and_names_what_it_counts() -> None:
    said = (
        f"{POD} is forbidden: exceeded quota: compute, requested: requests.memory=8Gi, used: requests.memory=28Gi, "
        "limited: requests.memory=32Gi"
    )
    named = refusal(f"Error creating: {said}")
    assert named.reason == Reason.POD_CREATION_REFUSED
    assert named.message == (
        "the API server refuses the compile Job's pod, so the compile Job makes no pod (the Job controller keeps "
        f"trying): {said} (the pod would take the namespace over ResourceQuota compute: lower spec.compile.memory, "
        "or raise the quota or free some of it; kubectl describe resourcequota compute -n search)"
    )


def test_a_quota_that_needs_a_cpu_limit_names_spec_compile_cpu_limit() -> None:
    named = refusal(f"Error creating: {POD} is forbidden: failed quota: compute: must specify limits.cpu")
    assert named.reason == Reason.POD_CREATION_REFUSED
    assert named.message.endswith(
        f"{POD} is forbidden: failed quota: compute: must specify limits.cpu (ResourceQuota compute caps what the "
        "pod leaves unset: set spec.compile.cpuLimit; kubectl describe resourcequota compute -n search)"
    )


def test_a_webhooks_denial_is_quoted() -> None:
    said = (
        'admission webhook "validate.kyverno.svc-fail" denied the request: resource Pod/search/ was blocked due to '
        "the following policies: require-image-digest"
    )
    named = refusal(f"(combined from similar events): Error creating: {said}")
    assert named.reason == Reason.POD_CREATION_REFUSED
    assert named.message == (
        "the API server refuses the compile Job's pod, so the compile Job makes no pod (the Job controller keeps "
        f"trying): {said}"
    )


def test_a_missing_account_in_the_event_is_named_with_spec_compile() -> None:
    named = refusal(
        f"Error creating: {POD} is forbidden: error looking up service account search/model-compiler: "
        'serviceaccount "model-compiler" not found',
        serviceAccountName="model-compiler",
    )
    assert named.reason == Reason.SERVICE_ACCOUNT_MISSING
    assert named.message.startswith(
        "ServiceAccount model-compiler does not exist in namespace search, so the compile Job makes no pod"
    )
    assert "named by spec.compile.serviceAccountName" in named.message


def test_the_serving_path_names_a_quota_with_spec_runtime() -> None:
    # One recognition for both workloads: the serving pods' fields.
    said = "exceeded quota: compute, requested: limits.cpu=4, used: limits.cpu=6, limited: limits.cpu=8"
    named = refusal_for(
        403,
        f'{{"kind":"Status","message":"pods \\"p\\" is forbidden: {said}"}}',
        workload_account("serving", None, None),
        "403 Forbidden: quota",
    )
    assert named is not None and named.reason == Reason.POD_CREATION_REFUSED
    assert "lower spec.runtime.cpuLimit" in named.message


# -------------------------------------------------------------------------------------- the plan


def test_a_limit_range_refusal_of_the_compile_pod_turns_compiled_false_and_degraded() -> None:
    dep = deployment()
    request = compile_request(dep.spec, "/store", "fp")
    named = refusal(f"Error creating: {POD} is forbidden: maximum memory usage per Container is 4Gi, but limit is 8Gi")
    observed = CompileObservation(
        request, None, job_phase="running", job_name="job", running_jobs=("job",), pod_refused=named
    )
    plan = plan_reconcile(
        dep,
        Observation(CREATED, compile=observed),
        DeploymentMemory(),
        StatusMemory.from_status({}),
        FleetPolicy(),
        lambda _: "t" * 10,
    )
    compiled = find_condition({"status": plan.status}, "Compiled")
    assert (compiled["status"], compiled["reason"], compiled["message"]) == (
        "False",
        Reason.LIMIT_RANGE_REFUSED,
        named.message,
    )
    degraded = find_condition({"status": plan.status}, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", Reason.LIMIT_RANGE_REFUSED)
    assert plan.compile_actions == ()  # the Job keeps trying; nothing to replace while the spec is the same
    # Fixed in the spec (another memory: another job spec key): the pod-less Job is replaced at once.
    changed = replace(observed, job_spec="before", wanted_job_spec="after")
    plan = plan_reconcile(
        dep,
        Observation(CREATED, compile=changed),
        DeploymentMemory(),
        StatusMemory.from_status({}),
        FleetPolicy(),
        lambda _: "t" * 10,
    )
    (action,) = plan.compile_actions
    assert isinstance(action, DeleteCompileJob) and action.name == "job"  # the new one follows its deletion


# ---------------------------------------------------------------------------------- the reads


class _Kube:
    """A KubeApi with one pod-less compile Job, its FailedCreate Events (or a refused list) and no
    ServiceAccount."""

    def __init__(self, job: dict[str, Any], events: list[dict[str, Any]], events_error: Exception | None = None):
        self.job, self.events, self.events_error = job, events, events_error
        self.event_reads: list[dict[str, str]] = []
        self.account_reads: list[str] = []

    async def list_jobs(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        return [self.job]

    async def list_pods(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        return []

    async def list_events(self, namespace: str, fields: dict[str, str]) -> list[dict[str, Any]]:
        self.event_reads.append(dict(fields))
        await asyncio.sleep(0)  # an answer takes a turn of the loop: other reconciles run meanwhile
        if self.events_error is not None:
            raise self.events_error
        return self.events

    async def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        assert kind == "ServiceAccount"
        self.account_reads.append(name)
        return None


def _job(dep: InferenceDeployment) -> dict[str, Any]:
    job = build_compile_job(dep, compile_request(dep.spec, "s3://artifacts", "fingerprint"), BuilderConfig())
    job["metadata"].update(creationTimestamp=CREATED.strftime("%Y-%m-%dT%H:%M:%SZ"), uid="job-uid-1")
    job["status"] = {"active": 0}
    return job


def _event(message: str, last: str, count: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": f"e.{last}", "namespace": "search"},
        "involvedObject": {"kind": "Job", "name": "job", "uid": "job-uid-1"},
        "reason": "FailedCreate",
        "type": "Warning",
        "message": message,
        "count": count,
        "firstTimestamp": "2026-12-01T12:00:01Z",
        "lastTimestamp": last,
    }


QUOTA = f"Error creating: {POD} is forbidden: exceeded quota: compute, requested: requests.cpu=2, used: x, limited: y"
MISSING = (
    f"Error creating: {POD} is forbidden: error looking up service account search/model-compiler: "
    'serviceaccount "model-compiler" not found'
)


async def _observe(
    kube: _Kube, dep: InferenceDeployment, seconds: float, reads: tuple[AccountReads, JobEventReads] | None = None
) -> Any:
    request = compile_request(dep.spec, "s3://artifacts", "fingerprint")
    accounts, events = reads or (None, None)
    now = CREATED + timedelta(seconds=seconds)
    return await observe_compile_jobs(kube, "search", dep.name, request, now, accounts, events)  # type: ignore[arg-type]


async def test_the_newest_failed_create_event_is_read_once_the_job_has_had_no_pod_a_minute() -> None:
    dep = deployment(serviceAccountName="model-compiler")
    job = _job(dep)
    # The account was missing first (a repeated Event: its lastTimestamp moves), then created; now a
    # quota refuses the pod. The newest says why now.
    kube = _Kube(job, [_event(QUOTA, "2026-12-01T12:01:10Z"), _event(MISSING, "2026-12-01T12:00:50Z", count=7)])
    assert (await _observe(kube, dep, 30)).failed_create is None
    assert kube.event_reads == [], "a young Job is not a reason to read its Events"
    seen = await _observe(kube, dep, 90)
    assert seen.failed_create == QUOTA
    assert seen.missing_service_account is None and kube.account_reads == [], "the Event said why: no account read"
    # All the Job's Events (not only FailedCreate: its SuccessfulCreate says a refusal is older than
    # its last pod, tests/unit/test_compile_job_between_pods.py), of this Job only (its uid).
    assert kube.event_reads == [
        {
            "involvedObject.kind": "Job",
            "involvedObject.name": job["metadata"]["name"],
            "involvedObject.uid": "job-uid-1",
        }
    ]


async def test_a_jobs_events_are_read_at_most_once_a_minute_for_every_reconcile() -> None:
    dep = deployment()
    kube = _Kube(_job(dep), [_event(QUOTA, "2026-12-01T12:01:10Z")])
    reads = (AccountReads(), JobEventReads())
    # Many reconciles at once, then every interval: one read answers them all.
    seen = await asyncio.gather(*(_observe(kube, dep, 90, reads) for _ in range(8)))
    assert {s.failed_create for s in seen} == {QUOTA}
    for seconds in range(100, 150, 10):
        assert (await _observe(kube, dep, seconds, reads)).failed_create == QUOTA
    assert len(kube.event_reads) == 1
    # A minute on, it is read again: a changed refusal is seen.
    kube.events = [_event(MISSING, "2026-12-01T12:02:30Z")]
    assert (await _observe(kube, dep, 150, reads)).failed_create == MISSING
    assert len(kube.event_reads) == 2


@pytest.mark.parametrize("events_error", [ApiException(status=403, reason="Forbidden"), None], ids=["403", "none"])
async def test_without_events_the_account_is_read_as_before(events_error: Exception | None) -> None:
    # 403: the operator's role lacks `list events` (an older chart); none: expired (an hour) or never
    # recorded. Either way the account read still names a missing account, and nothing else breaks.
    dep = deployment(serviceAccountName="model-compiler")
    kube = _Kube(_job(dep), [], events_error)
    reads = (AccountReads(), JobEventReads())
    seen = await _observe(kube, dep, 150, reads)
    assert seen.failed_create is None
    assert seen.missing_service_account == "model-compiler"
    assert seen.message.startswith("no pod created for 2 min: the API server may be refusing it")
    # The refused read is kept a minute too: not asked again every reconcile.
    for seconds in range(160, 210, 10):
        await _observe(kube, dep, seconds, reads)
    assert len(kube.event_reads) == 1 and kube.account_reads == ["model-compiler"]
