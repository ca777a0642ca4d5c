"""Pods the API server must refuse are named with the field or flag and the fix, or not made.

A missing ServiceAccount (serving pods: the operator's create is refused; compile Jobs: the Job
makes no pod, and the operator reads the account), a CPU limit below the CPU request (checked in
the plan, before any pod is made) and a LimitRange's default, min or max (named from the refusal).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from neuronfleet.api.v1alpha1 import CPU_LIMIT_MESSAGE, InferenceDeployment
from neuronfleet.api.validation import validate_manifest
from neuronfleet.cli import main
from neuronfleet.kube.builders import BuilderConfig, pod_template_hash
from neuronfleet.kube.jobs import build_compile_job, compile_job_name
from neuronfleet.kube.observe import AccountReads, observe_compile_jobs
from neuronfleet.planning.admission import (
    WorkloadPods,
    compile_cpu_limit_problem,
    missing_account_message,
    refusal_for,
    serving_cpu_limit_problem,
    serving_pods,
    workload_account,
)
from neuronfleet.planning.compile import CompileObservation, StoredArtifact, compile_request, decide_compile
from neuronfleet.planning.fleet import (
    CreatePlaceholder,
    CreatePod,
    FleetPolicy,
    PodView,
    apply_actions,
    policy_for_spec,
)
from neuronfleet.planning.observation import DeploymentMemory, Observation, StatusMemory
from neuronfleet.planning.placement import plan_for_spec
from neuronfleet.planning.reasons import Reason, Refusal
from neuronfleet.planning.reconcile_plan import DeleteCompileJob, StartCompileJob, plan_reconcile, status_events
from neuronfleet.planning.status import find_condition

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def deployment(**spec: Any) -> InferenceDeployment:
    manifest = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    manifest["metadata"].update({"namespace": "search", "generation": 1, "uid": "5f0c6a3e-0000-4000-8000-000000000001"})
    for key, value in spec.items():
        manifest["spec"].setdefault(key, {}).update(value)
    return InferenceDeployment.model_validate(manifest)


def forbidden_body(message: str, reason: str = "Forbidden") -> str:
    """A 403 answer's body as kube-apiserver sends it (JSON: the quotes in the message escaped)."""
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason})


# ------------------------------------------------------------------------ serving ServiceAccount


SA_REFUSAL = (
    'pods "bert-embeddings-a1b2c3d4e5-0" is forbidden: error looking up service account '
    'search/model-reader: serviceaccount "model-reader" not found'
)


def test_a_refusal_for_a_missing_serving_account_names_the_account_namespace_field_and_fix() -> None:
    account = workload_account("serving", "model-reader", "fleet-reader")
    refusal = refusal_for(403, forbidden_body(SA_REFUSAL), account)
    assert refusal is not None and refusal.reason == Reason.SERVICE_ACCOUNT_MISSING
    assert refusal.message.startswith(
        "ServiceAccount model-reader does not exist in namespace search, so no serving pod can be created; "
        "it is named by spec.runtime.serviceAccountName. Create it there"
    )
    assert "workloads.serviceAccounts" in refusal.message


def test_the_operators_flag_is_named_when_the_spec_names_no_serving_account() -> None:
    account = workload_account("serving", None, "model-reader")
    refusal = refusal_for(403, forbidden_body(SA_REFUSAL), account)
    assert refusal is not None
    assert "named by the operator's --serving-service-account (chart: workloads.servingServiceAccount)" in (
        refusal.message
    )


def test_other_refusals_keep_their_reasons() -> None:
    account = workload_account("serving", None, None)
    priority = refusal_for(
        403, forbidden_body('pods "x" is forbidden: no PriorityClass with name a was found'), account
    )
    assert priority is not None and priority.reason == Reason.PRIORITY_CLASS_MISSING
    quota = refusal_for(403, forbidden_body("exceeded quota: compute"), account, "403 Forbidden: exceeded quota")
    assert quota is not None and quota.reason == Reason.POD_CREATION_REFUSED
    assert quota.message == "the API server refused a pod: 403 Forbidden: exceeded quota"
    assert refusal_for(500, forbidden_body(SA_REFUSAL), account) is None


# ------------------------------------------------------------------------------------ LimitRange

#: Pod validation's 422 after the LimitRanger gave the container its default CPU limit (recent
#: versions add "of <limit>"; kubernetes/kubernetes#112835 quotes the older form, on 1.24).
DEFAULT_LIMIT_REFUSAL = (
    'Pod "bert-embeddings-a1b2c3d4e5-0" is invalid: spec.containers[0].resources.requests: '
    'Invalid value: "3420m": must be less than or equal to cpu limit of 1'
)


def computed_pods() -> WorkloadPods:
    dep = deployment()
    chosen = plan_for_spec(dep.spec, 1).chosen
    assert chosen is not None
    return serving_pods("search", dep.spec.runtime, chosen)


def test_a_limit_ranges_default_cpu_limit_below_the_request_names_the_request_and_the_fixes() -> None:
    pods = computed_pods()
    request = pods.cpu_request
    answer = forbidden_body(DEFAULT_LIMIT_REFUSAL.replace("3420m", request), "Invalid")
    refusal = refusal_for(422, answer, workload_account("serving", None, None), "422 Invalid", pods)
    assert refusal is not None and refusal.reason == Reason.LIMIT_RANGE_REFUSED
    assert refusal.message == (
        "a LimitRange in namespace search gives a container that sets no CPU limit a default CPU limit of 1, "
        f"below the CPU request of each replica, {request} (the replica's share of an inf2.xlarge node, as "
        "spec.runtime.cpu is unset): the API server refuses a pod whose CPU limit is below its request, so no "
        "serving pod or placeholder is created (kubectl describe limitrange -n search). Set spec.runtime.cpuLimit "
        f"to at least {request} (a pod's own limit is not replaced by the default; unless the LimitRange's max CPU "
        f"is below {request}, which then refuses that limit), or set spec.runtime.cpu to at most 1, or raise the "
        "LimitRange's default CPU limit"
    )
    # The older wording does not say the limit.
    older = forbidden_body(DEFAULT_LIMIT_REFUSAL.removesuffix(" of 1"), "Invalid")
    refusal = refusal_for(422, older, workload_account("serving", None, None), "", pods)
    assert refusal is not None and refusal.reason == Reason.LIMIT_RANGE_REFUSED
    assert "a default CPU limit, below the CPU request" in refusal.message
    assert "or lower spec.runtime.cpu, or raise the LimitRange's default CPU limit" in refusal.message


def test_a_limit_below_the_request_is_the_specs_own_when_it_sets_one() -> None:
    pods = WorkloadPods("search", "2000m", "spec.runtime.cpu 2", "1")
    answer = forbidden_body(DEFAULT_LIMIT_REFUSAL.replace("3420m", "2"), "Invalid")
    refusal = refusal_for(422, answer, workload_account("serving", None, None), "", pods)
    assert refusal is not None and refusal.reason == Reason.CPU_LIMIT_BELOW_REQUEST
    assert refusal.message.startswith("spec.runtime.cpuLimit 1 is below the CPU request of each replica, 2000m")


@pytest.mark.parametrize(
    ("said", "fix"),
    [
        # LimitRanger (plugin/pkg/admission/limitranger, maxConstraint / minConstraint), 403.
        (
            "maximum cpu usage per Container is 2, but request is 3420m",
            "set spec.runtime.cpu to at most 2 (the request is 3420m: a spec.runtime.cpuLimit between the request "
            "and the maximum cannot exist)",
        ),
        # A maximum below the request: a limit within it would be below the request, refused as well.
        (
            "maximum cpu usage per Container is 2, but limit is 4",
            "set spec.runtime.cpu to at most 2 (the request is 3420m: a spec.runtime.cpuLimit between the request "
            "and the maximum cannot exist)",
        ),
        ("maximum cpu usage per Container is 4, but limit is 6", "set spec.runtime.cpuLimit to at most 4"),
        ("minimum cpu usage per Container is 4, but request is 3420m", "set spec.runtime.cpu to at least 4"),
        ("minimum cpu usage per Container is 4, but limit is 2", "set spec.runtime.cpuLimit to at least 4"),
        ("maximum memory usage per Pod is 8Gi, but limit is 13Gi", "set spec.runtime.memory to at most 8Gi"),
        (
            "maximum ephemeral-storage usage per Container is 10Gi, but limit is 17Gi",
            "set spec.runtime.ephemeralStorage to at most 10Gi",
        ),
    ],
)
def test_a_limit_ranges_min_or_max_is_named_with_the_field_that_sets_what_it_compares(said: str, fix: str) -> None:
    limit = next((value for value in ("4", "6") if f"limit is {value}" in said), None)
    pods = WorkloadPods("search", "3420m", "spec.runtime.cpu 3420m", limit)
    answer = forbidden_body(f'pods "bert-embeddings-a1b2c3d4e5-0" is forbidden: {said}')
    refusal = refusal_for(403, answer, workload_account("serving", None, None), "", pods)
    assert refusal is not None and refusal.reason == Reason.LIMIT_RANGE_REFUSED
    assert refusal.message == (
        f"a LimitRange in namespace search refuses the serving pods: {said} (each replica requests 3420m CPU: "
        "spec.runtime.cpu 3420m); so no serving pod or placeholder is created (kubectl describe limitrange -n "
        f"search): {fix}, or change the LimitRange"
    )


def test_several_limit_range_refusals_are_all_named() -> None:
    said = "maximum cpu usage per Container is 2, but request is 3420m, maximum memory usage per Container is 8Gi"
    answer = forbidden_body(f'pods "p" is forbidden: [{said}, but limit is 13Gi]')
    refusal = refusal_for(403, answer, workload_account("serving", None, None))
    assert refusal is not None and refusal.reason == Reason.LIMIT_RANGE_REFUSED
    assert refusal.message.endswith(
        "(kubectl describe limitrange -n <namespace>): set spec.runtime.cpu to at most 2, set spec.runtime.memory "
        "to at most 8Gi, or change the LimitRange"
    )
    assert "maximum cpu usage per Container is 2, but request is 3420m; maximum memory usage" in refusal.message


# ------------------------------------------------------------------------ compile ServiceAccount

CREATED = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class _Kube:
    """A KubeApi with one compile Job, no pod, and the ServiceAccounts ``accounts`` (or a refused read);
    its FailedCreate Events are ``failed_creates`` (or a refused list: ``events_error``)."""

    def __init__(
        self,
        job: dict[str, Any],
        accounts: set[str],
        read_error: Exception | None = None,
        failed_creates: list[dict[str, Any]] | None = None,
        events_error: Exception | None = None,
    ) -> None:
        self.job, self.accounts, self.read_error = job, accounts, read_error
        self.failed_creates, self.events_error = failed_creates or [], events_error
        self.reads: list[str] = []
        self.event_reads: list[dict[str, str]] = []

    async def list_events(self, namespace: str, fields: dict[str, str]) -> list[dict[str, Any]]:
        self.event_reads.append(dict(fields))
        await asyncio.sleep(0)  # an answer takes a turn of the loop: other reconciles run meanwhile
        if self.events_error is not None:
            raise self.events_error
        return self.failed_creates

    async def list_jobs(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        return [self.job]

    async def list_pods(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        return []

    async def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        assert kind == "ServiceAccount"
        self.reads.append(name)
        await asyncio.sleep(0)  # an answer takes a turn of the loop: other reconciles run meanwhile
        if self.read_error is not None:
            raise self.read_error
        return {"metadata": {"name": name}} if name in self.accounts else None


def _compile_job(dep: InferenceDeployment, config: BuilderConfig) -> dict[str, Any]:
    request = compile_request(dep.spec, "s3://artifacts", "fingerprint")
    job = build_compile_job(dep, request, config)
    job["metadata"]["creationTimestamp"] = CREATED.strftime("%Y-%m-%dT%H:%M:%SZ")
    job["status"] = {"active": 0}
    assert job["metadata"]["name"] == compile_job_name(dep.name, request)
    return job


async def _observe(kube: _Kube, dep: InferenceDeployment, seconds: float, accounts: AccountReads | None = None) -> Any:
    request = compile_request(dep.spec, "s3://artifacts", "fingerprint")
    now = CREATED + timedelta(seconds=seconds)
    return await observe_compile_jobs(kube, "search", dep.name, request, now, accounts)  # type: ignore[arg-type]


async def test_a_job_without_a_pod_has_its_account_read_and_found_missing() -> None:
    dep = deployment(compile={"serviceAccountName": "model-compiler"})
    kube = _Kube(_compile_job(dep, BuilderConfig()), accounts=set())
    assert (await _observe(kube, dep, 30)).missing_service_account is None
    assert kube.reads == [], "a young Job is not a reason to read the account"
    assert (await _observe(kube, dep, 150)).missing_service_account == "model-compiler"
    kube.accounts.add("model-compiler")
    assert (await _observe(kube, dep, 210)).missing_service_account is None


async def test_the_operators_answer_about_an_account_is_kept_a_minute_for_every_deployment() -> None:
    dep = deployment(compile={"serviceAccountName": "model-compiler"})
    kube = _Kube(_compile_job(dep, BuilderConfig()), accounts=set())
    accounts = AccountReads()
    # Many deployments' reconciles at once, then every interval: one read answers them all.
    seen = await asyncio.gather(*(_observe(kube, dep, 150, accounts) for _ in range(8)))
    assert {s.missing_service_account for s in seen} == {"model-compiler"}
    for seconds in range(160, 210, 10):
        assert (await _observe(kube, dep, seconds, accounts)).missing_service_account == "model-compiler"
    assert kube.reads == ["model-compiler"]
    # A minute on, it is read again: an account created meanwhile is seen.
    kube.accounts.add("model-compiler")
    assert (await _observe(kube, dep, 210, accounts)).missing_service_account is None
    assert kube.reads == ["model-compiler"] * 2


async def test_an_unanswered_read_of_an_account_is_not_kept() -> None:
    dep = deployment(compile={"serviceAccountName": "model-compiler"})
    kube = _Kube(_compile_job(dep, BuilderConfig()), set(), TimeoutError("the API server did not answer"))
    accounts = AccountReads()
    assert (await _observe(kube, dep, 150, accounts)).missing_service_account is None
    kube.read_error = None
    assert (await _observe(kube, dep, 160, accounts)).missing_service_account == "model-compiler"
    assert len(kube.reads) == 2


@pytest.mark.parametrize(
    "error", [ApiException(status=403, reason="Forbidden"), TimeoutError("the API server did not answer")]
)
async def test_an_account_the_operator_may_not_read_is_unknown_not_missing(error: Exception) -> None:
    dep = deployment(compile={"serviceAccountName": "model-compiler"})
    kube = _Kube(_compile_job(dep, BuilderConfig()), accounts=set(), read_error=error)
    seen = await _observe(kube, dep, 150)
    assert seen.missing_service_account is None
    assert seen.message.startswith("no pod created for 2 min")


async def test_the_default_account_is_never_read() -> None:
    dep = deployment()
    kube = _Kube(_compile_job(dep, BuilderConfig()), accounts=set())
    assert (await _observe(kube, dep, 150)).missing_service_account is None
    assert kube.reads == []


def test_a_missing_compile_account_turns_compiled_false_with_the_operators_flag_named() -> None:
    dep = deployment()
    account = workload_account("compile", dep.spec.compile.service_account_name, "model-compiler")
    message = missing_account_message(account, "search", "model-compiler")
    request = compile_request(dep.spec, "s3://artifacts", "fingerprint")
    refused = Refusal(Reason.SERVICE_ACCOUNT_MISSING, message)
    observed = CompileObservation(request, None, job_phase="running", job_name="job", pod_refused=refused)
    decision = decide_compile(observed, None)
    assert (decision.compiled_status, decision.reason, decision.create_job) == (
        "False",
        Reason.SERVICE_ACCOUNT_MISSING,
        False,
    )
    assert decision.message.startswith(
        "ServiceAccount model-compiler does not exist in namespace search, so the compile Job makes no pod"
    )
    assert "named by the operator's --compile-service-account (chart: workloads.compileServiceAccount)" in (
        decision.message
    )


# ------------------------------------------------------------------------------------ CPU limits

MANUAL = {"scaling": {"mode": "Manual", "replicas": 2, "minReplicas": 0}, "warmPool": {"mode": "Off"}}


def _stored(dep: InferenceDeployment) -> CompileObservation:
    request = compile_request(dep.spec, "/store", "fp")
    return CompileObservation(request, StoredArtifact("c" * 64, "/store/cccc", "d" * 64, "cpu"), job_name="job")


def _plan(dep: InferenceDeployment, observation: Observation) -> Any:
    return plan_reconcile(
        dep, observation, DeploymentMemory(), StatusMemory.from_status({}), FleetPolicy(), lambda _: "t" * 10
    )


def test_a_cpu_limit_below_the_computed_request_names_both_figures() -> None:
    dep = deployment(runtime={"cpuLimit": "1"})
    chosen = plan_for_spec(dep.spec, 1).chosen
    assert chosen is not None and chosen.cpu_millis_per_replica > 1000  # an inf2.xlarge's share
    problem = serving_cpu_limit_problem(dep.spec.runtime, chosen)
    assert problem == (
        f"spec.runtime.cpuLimit 1 is below the CPU request of each replica, {chosen.cpu_millis_per_replica}m "
        f"(spec.runtime.cpu is unset: the replica's share of an {chosen.name} node, as neuronfleet plan shows): "
        "the API server refuses a pod whose CPU limit is below its request, so no serving pod or placeholder "
        f"is created; raise spec.runtime.cpuLimit to at least {chosen.cpu_millis_per_replica}m, or set "
        "spec.runtime.cpu to at most 1 (placement then packs replicas by it)"
    )
    assert serving_cpu_limit_problem(deployment(runtime={"cpuLimit": "4"}).spec.runtime, chosen) is None
    # Exact, as the API server compares: a limit equal to the request is fine.
    equal = deployment(runtime={"cpu": "1500m", "cpuLimit": "1.5"})
    equal_chosen = plan_for_spec(equal.spec, 1).chosen
    assert equal_chosen is not None and equal_chosen.cpu_millis_per_replica == 1500
    assert serving_cpu_limit_problem(equal.spec.runtime, equal_chosen) is None
    below = deployment(runtime={"cpu": "1500m", "cpuLimit": "1.499"})
    assert serving_cpu_limit_problem(below.spec.runtime, equal_chosen) == (
        "spec.runtime.cpuLimit 1.499 is below the CPU request of each replica, 1500m (spec.runtime.cpu 1500m): "
        "the API server refuses a pod whose CPU limit is below its request, so no serving pod or placeholder is "
        "created; raise spec.runtime.cpuLimit to at least 1500m, or lower spec.runtime.cpu"
    )


def test_a_plan_with_an_impossible_cpu_limit_creates_no_pod_and_says_why_once() -> None:
    # A node placeholder has a replica's resources: it would be refused too.
    with_placeholder = {**MANUAL, "warmPool": {"mode": "Fixed", "pods": 0, "nodePlaceholders": 1}}
    dep = deployment(runtime={"cpuLimit": "500m"}, **with_placeholder)
    plan = _plan(dep, Observation(T0, compile=_stored(dep)))
    assert not [a for a in plan.actions if isinstance(a, CreatePod | CreatePlaceholder)]
    degraded = find_condition({"status": plan.status}, "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == Reason.CPU_LIMIT_BELOW_REQUEST
    assert "spec.runtime.cpuLimit 500m is below the CPU request of each replica" in degraded["message"]
    assert find_condition({"status": plan.status}, "Scheduled")["reason"] == Reason.CPU_LIMIT_BELOW_REQUEST
    events = status_events(StatusMemory.from_status({}), plan.status, plan.scale_reason)
    assert [e.reason for e in events if e.type == "Warning"] == [Reason.CPU_LIMIT_BELOW_REQUEST]

    fixed = deployment(runtime={"cpuLimit": "4"}, **with_placeholder)
    actions = _plan(fixed, Observation(T0, compile=_stored(fixed))).actions
    assert sorted(type(a).__name__ for a in actions) == ["CreatePlaceholder", "CreatePod", "CreatePod"]


def _conditions(status: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


HELD = "spec.runtime.cpuLimit is below the pods' CPU request (see Degraded)"


def test_a_pool_held_by_an_impossible_cpu_limit_is_said_held_not_wanted_as_none() -> None:
    # Regression: the placeholder the pool wants (status.warmPool.desiredPlaceholders 1, placed and
    # priced in status.placement) was dropped from the fleet's target, so WarmPoolReady read
    # "0/0 placeholders on nodes" and said nothing of it being held.
    pool = {"mode": "Fixed", "pods": 2, "nodePlaceholders": 1}
    dep = deployment(runtime={"cpuLimit": "500m"}, scaling=MANUAL["scaling"], warmPool=pool)
    plan = _plan(dep, Observation(T0, compile=_stored(dep)))
    assert not [a for a in plan.actions if isinstance(a, CreatePod | CreatePlaceholder)]
    assert (plan.status["warmPool"]["desiredPods"], plan.status["warmPool"]["desiredPlaceholders"]) == (2, 1)
    assert (plan.status["replicas"], plan.status["warmReplicas"], plan.status["placeholders"]) == (0, 0, 0)
    conditions = _conditions(plan.status)
    assert conditions["WarmPoolReady"] == (
        "False",
        Reason.WARM_POOL_FILLING,
        f"0/2 warm pods ready, 0/1 placeholders on nodes; 2 new warm pods and 1 placeholder held: {HELD}",
    )
    assert conditions["Available"][2] == f"0/2 active replicas ready; 2 new active pods held: {HELD}"


@pytest.mark.parametrize("max_surge", [0, 1, 3])
def test_a_running_fleet_whose_cpu_limit_turns_impossible_says_what_is_held_and_counts_only_what_runs(
    max_surge: int,
) -> None:
    # The pod template carries the CPU limit: lowering it makes every running pod outdated, and no
    # pod of the new template can be made. Regression: WarmPoolReady said "4 new warm pods held" of a
    # pool of 2 (the 2 replacements of the serving replicas were counted as pool), and Ready said
    # RollingOut without a word of the rollout being held. Regression: with spec.rollout.maxSurge 1
    # the held counts were clamped by the surge, which paces only pods that load: "1 new pod held",
    # and the pool's 2 held warm pods were not mentioned.
    pool = {"mode": "Fixed", "pods": 2, "nodePlaceholders": 1}
    rollout = {"maxSurge": max_surge}
    dep = deployment(scaling=MANUAL["scaling"], warmPool=pool, rollout=rollout)
    policy = policy_for_spec(dep.spec)
    status: dict[str, Any]
    pods: tuple[PodView, ...]
    now, pods, memory, status = T0, (), DeploymentMemory(), {}
    for _ in range(3):
        result = plan_reconcile(
            dep,
            Observation(now, pods=pods, compile=_stored(dep)),
            memory,
            StatusMemory.from_status(status),
            policy,
            lambda chosen: pod_template_hash(dep, chosen),
        )
        pods = tuple(
            replace(p, ready=True, phase="Running", node="n1", ready_at=now)
            for p in apply_actions(list(pods), result.actions, now)
        )
        memory, status, now = result.memory, result.status, now + timedelta(seconds=10)
    assert sorted(p.role for p in pods) == ["active", "active", "placeholder", "warm", "warm"]

    lowered = deployment(runtime={"cpuLimit": "500m"}, scaling=MANUAL["scaling"], warmPool=pool, rollout=rollout)
    result = plan_reconcile(
        lowered,
        Observation(now, pods=pods, compile=_stored(lowered)),
        memory,
        StatusMemory.from_status(status),
        policy,
        lambda chosen: pod_template_hash(lowered, chosen),
    )
    assert not [a for a in result.actions if isinstance(a, CreatePod | CreatePlaceholder)]
    # The serving replicas of the earlier template keep serving, and so does its standby: nothing
    # could replace it (regression: the warm pods and the placeholder were deleted, leaving none).
    assert not [a for a in result.actions if getattr(a, "name", "") in {p.name for p in pods}]
    after = apply_actions(list(pods), result.actions, now)
    assert sorted(p.role for p in after) == ["active", "active", "placeholder", "warm", "warm"]
    again = plan_reconcile(
        lowered,
        Observation(now + timedelta(seconds=10), pods=tuple(after), compile=_stored(lowered)),
        result.memory,
        StatusMemory.from_status(result.status),
        policy,
        lambda chosen: pod_template_hash(lowered, chosen),
    )
    assert again.actions == ()
    status = again.status
    assert (status["replicas"], status["readyReplicas"], status["warmReplicas"], status["placeholders"]) == (2, 2, 0, 1)
    conditions = _conditions(status)
    assert conditions["WarmPoolReady"][2] == (
        f"0/2 warm pods ready, 1/1 placeholders on nodes; 2 new warm pods and 1 placeholder held: {HELD}; "
        "2 outdated warm pods and 1 old placeholder kept while new ones are held"
    )
    assert conditions["Ready"] == (
        "False",
        Reason.ROLLING_OUT,
        f"0/2 active replicas on the new revision, 2 ready in all; 2 new pods held: {HELD}",
    )
    assert conditions["Available"][:2] == ("True", Reason.REPLICAS_READY)
    assert conditions["Degraded"][1] == Reason.CPU_LIMIT_BELOW_REQUEST


def test_a_compile_cpu_limit_below_its_request_starts_no_job() -> None:
    dep = deployment(compile={"cpu": "4", "cpuLimit": "3500m"}, **MANUAL)
    assert compile_cpu_limit_problem(dep.spec.compile) == (
        "spec.compile.cpuLimit 3500m is below spec.compile.cpu 4: the API server refuses a pod whose CPU limit "
        "is below its request, so no compile Job is started; raise spec.compile.cpuLimit or lower spec.compile.cpu"
    )
    request = compile_request(dep.spec, "/store", "fp")
    plan = _plan(dep, Observation(T0, compile=CompileObservation(request, None, job_name="job")))
    assert not [a for a in plan.compile_actions if isinstance(a, StartCompileJob)]
    compiled = find_condition({"status": plan.status}, "Compiled")
    assert (compiled["status"], compiled["reason"]) == ("False", Reason.CPU_LIMIT_BELOW_REQUEST)
    assert find_condition({"status": plan.status}, "Degraded")["reason"] == Reason.CPU_LIMIT_BELOW_REQUEST

    # A stored artifact needs no Job: the compile limit then stops nothing.
    served = _plan(dep, Observation(T0, compile=_stored(dep)))
    assert find_condition({"status": served.status}, "Compiled")["reason"] == Reason.ARTIFACT_READY
    fine = deployment(compile={"cpu": "4", "cpuLimit": "4"}, **MANUAL)
    assert compile_cpu_limit_problem(fine.spec.compile) is None


@pytest.mark.parametrize(
    ("section", "cpu", "limit", "refused"),
    [
        ("compile", "4", "2", True),
        ("compile", "4", "4.0", False),
        ("compile", "1500m", "999m", True),
        ("compile", "900m", "1000m", False),
        ("runtime", "2", "1.5", True),
        ("runtime", "2500m", "2500m", False),
        # Forms standard CEL cannot compare: the CRD lets them in, the operator's plan checks them.
        ("compile", "4", "500m", False),
        ("runtime", None, "500m", False),
    ],
)
def test_the_crd_refuses_a_cpu_limit_below_the_request_of_the_same_section(
    section: str, cpu: str | None, limit: str, refused: bool
) -> None:
    manifest = yaml.safe_load((REPO / "examples" / "bert-embeddings.yaml").read_text())
    manifest["spec"].setdefault(section, {}).update({"cpuLimit": limit, **({"cpu": cpu} if cpu else {})})
    _, problems = validate_manifest(manifest)
    messages = [f"{p.path}: {p.message}" for p in problems]
    assert (f"spec.{section}: {CPU_LIMIT_MESSAGE}" in messages) is refused, messages


def test_neuronfleet_plan_says_a_cpu_limit_below_the_request_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-f", str(REPO / "examples" / "invalid" / "cpu-limit-below-computed-request.yaml")]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "✗ spec.runtime.cpuLimit 500m is below the CPU request of each replica, 3420m" in out


def test_a_job_stuck_on_a_missing_account_is_replaced_once_another_account_is_named() -> None:
    # The Job was made naming "typo"; the spec now names an account that exists. Without replacing
    # it, the Job would sit without a pod until its timeoutSeconds (an hour by default).
    dep = deployment(compile={"serviceAccountName": "model-compiler"}, **MANUAL)
    request = compile_request(dep.spec, "/store", "fp")
    message = missing_account_message(workload_account("compile", "model-compiler", None), "search", "typo")
    observed = CompileObservation(
        request,
        None,
        job_phase="running",
        job_name="job",
        running_jobs=("job",),
        job_spec="made-with-typo",
        wanted_job_spec="now-model-compiler",
        pod_refused=Refusal(Reason.SERVICE_ACCOUNT_MISSING, message),
    )
    plan = _plan(dep, Observation(T0, compile=observed))
    (action,) = plan.compile_actions
    assert isinstance(action, DeleteCompileJob) and action.name == "job"
    assert action.why.startswith("the API server refuses its pod, and spec.compile")
    assert find_condition({"status": plan.status}, "Compiled")["reason"] == Reason.COMPILING
    # The same settings: reported, and left to make its pod once the account exists.
    same = _plan(dep, Observation(T0, compile=replace(observed, wanted_job_spec="made-with-typo")))
    assert same.compile_actions == ()
    assert find_condition({"status": same.status}, "Compiled")["reason"] == Reason.SERVICE_ACCOUNT_MISSING


async def test_reconciles_waiting_for_an_unanswered_account_read_share_it() -> None:
    # Reconciles asking about the same account waited for one another's read under a lock: while the
    # API server did not answer, the k-th got its "unknown" after k timeouts, each reading in turn.
    dep = deployment(compile={"serviceAccountName": "model-compiler"})
    kube = _Kube(_compile_job(dep, BuilderConfig()), set(), TimeoutError("the API server did not answer"))
    accounts = AccountReads()
    seen = await asyncio.gather(*(_observe(kube, dep, 150, accounts) for _ in range(8)))
    assert {s.missing_service_account for s in seen} == {None}
    assert kube.reads == ["model-compiler"], "each waiting reconcile read again"
    assert accounts.held() == 0, "an unanswered read is not kept"


async def test_keys_read_unanswered_or_expired_are_not_kept() -> None:
    # Every key asked about during an outage kept a lock for good (10,000 accounts: 10,000 locks).
    dep = deployment(compile={"serviceAccountName": "model-compiler"})
    kube = _Kube(_compile_job(dep, BuilderConfig()), set(), TimeoutError("the API server did not answer"))
    accounts = AccountReads()
    for index in range(1000):
        assert await accounts.answer(kube, f"team-{index}", "model-compiler", CREATED) == "unanswered"  # type: ignore[arg-type]
    assert accounts.held() == 0
    kube.read_error = None
    for index in range(3):
        await accounts.answer(kube, f"team-{index}", "model-compiler", CREATED)  # type: ignore[arg-type]
    assert accounts.held() == 3
    # Exactly the answers' lifetime on, they are no longer served, so a kept answer clears them too.
    expiry = CREATED + timedelta(seconds=accounts.ttl_seconds)
    await accounts.answer(kube, "other", "model-compiler", expiry)  # type: ignore[arg-type]
    assert accounts.held() == 1


class _GatedKube:
    """Its first ServiceAccount read fails once ``gate`` is set, and at that moment another
    reconcile becomes ready (``failed``); later reads find the account."""

    def __init__(self) -> None:
        self.reads: list[str] = []
        self.gate, self.failed = asyncio.Event(), asyncio.Event()

    async def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads.append(name)
        if len(self.reads) == 1:
            await self.gate.wait()
            self.failed.set()
            raise TimeoutError("the API server did not answer")
        return {"metadata": {"name": name}}


async def test_a_read_that_has_just_failed_is_not_handed_to_a_caller_arriving_in_that_loop_step() -> None:
    # A read that had just ended stayed "under way" until its done-callback ran: a reconcile that
    # asked in that same loop step was handed its failure ("unanswered") without a read of its own.
    kube = _GatedKube()
    accounts = AccountReads()

    async def late() -> str:
        await kube.failed.wait()
        return await accounts.answer(kube, "search", "model-compiler", CREATED)  # type: ignore[arg-type]

    first = asyncio.ensure_future(accounts.answer(kube, "search", "model-compiler", CREATED))  # type: ignore[arg-type]
    second = asyncio.ensure_future(late())
    kube.gate.set()
    assert await first == "unanswered"
    assert await second == "found", "handed the read that had just failed"
    assert kube.reads == ["model-compiler", "model-compiler"]
