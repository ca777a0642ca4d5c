"""One idempotent reconcile of an InferenceDeployment: observe -> pure plans -> apply.

Every Kopf handler (create, update, resume, the per-object daemon) calls :meth:`Reconciler.reconcile`.
It holds no decision of its own; each step's rule lives in ``neuronfleet.planning``:

1. observe: the object, its pods and the nodes; the compile Job and the artifact store; metrics;
2. plan (pure): compile (``planning.compile``), desired active replicas (``planning.scaling``),
   warm pool (``planning.warmpool``), placement (``planning.placement``), fleet actions
   (``planning.fleet``), status (``planning.status``);
3. apply: Job, pod creations / relabels / deletions in the plan's order, Service and PDB (diffed
   first), then the status (patched only when it changed).

Everything the fleet needs to be rebuilt after a restart is on the pods (labels, deterministic
names), so a restarted operator converges without duplicates. What lives only in memory
(``DeploymentMemory``: the autoscaler's stabilization history, the warm pool's demand history)
restarts empty, which only makes the autoscaler more conservative for one window.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import pydantic
from kubernetes_asyncio.client.exceptions import ApiException

from neuronfleet.api.v1alpha1 import ColdStartStatus, InferenceDeployment, WarmPoolStatus
from neuronfleet.artifacts.store import ArtifactStore, StoreUnavailable
from neuronfleet.kube.builders import (
    BuilderConfig,
    build_pdb,
    build_service,
    object_for_action,
    parse_pod,
    pod_template_hash,
    relabel_patch,
)
from neuronfleet.kube.client import KubeClient
from neuronfleet.kube.coldstart import pod_timelines
from neuronfleet.kube.jobs import (
    LABEL_COMPILE_REQUEST,
    build_compile_job,
    compile_job_name,
    compile_job_selector,
    job_phase,
)
from neuronfleet.planning import coldstart, scaling, warmpool
from neuronfleet.planning.catalog import LABEL_ZONE
from neuronfleet.planning.compile import (
    CompileDecision,
    CompileObservation,
    JobPhase,
    StoredArtifact,
    compile_request,
    decide_compile,
    decide_unservable,
)
from neuronfleet.planning.fleet import (
    Action,
    CreatePlaceholder,
    CreatePod,
    DeletePlaceholder,
    DeletePod,
    FleetPlan,
    FleetPolicy,
    FleetSummary,
    FleetTarget,
    Relabel,
    describe_action,
    plan_fleet,
    policy_for_spec,
)
from neuronfleet.planning.labels import ArtifactRevision, deployment_selector
from neuronfleet.planning.placement import check_fits, plan_for_spec
from neuronfleet.planning.reasons import Event, Reason
from neuronfleet.planning.signals import MetricSnapshot
from neuronfleet.planning.status import LastScale, StatusInputs, build_status, rfc3339, status_patch

logger = logging.getLogger(__name__)


class MetricsSource(Protocol):
    """Where the autoscaler's signals come from (Prometheus in the operator)."""

    async def snapshot(self, dep: InferenceDeployment, now: float) -> tuple[MetricSnapshot | None, str]:
        """The fleet's signals, or None with the reason they are unavailable."""
        ...


@dataclass(frozen=True)
class OperatorSettings:
    """Operator-wide configuration (from the command line / Helm values)."""

    artifact_store: str = "/var/lib/neuronfleet/artifacts"
    builder: BuilderConfig = field(default_factory=BuilderConfig)
    fleet: FleetPolicy = field(default_factory=FleetPolicy)
    #: Seconds between reconciles of one object when nothing else wakes it.
    interval_seconds: float = 10.0


@dataclass
class DeploymentMemory:
    """Per-object state that only shapes decisions over time (kept in Kopf's memo)."""

    scaling_state: scaling.ScalingState = field(default_factory=scaling.ScalingState)
    warm_state: warmpool.WarmPoolState = field(default_factory=warmpool.WarmPoolState)
    last_scaling_at: float | None = None
    last_decision: scaling.ScalingDecision | None = None
    cold_start: warmpool.ColdStart = field(default_factory=warmpool.ColdStart)
    #: Measured cold starts (rolling per instance type); ``cold_start`` is its p90s for the warm pool.
    cold_start_state: coldstart.ColdStartState = field(default_factory=coldstart.ColdStartState)


@dataclass(frozen=True)
class ReconcileReport:
    """What one reconcile saw and did."""

    actions: tuple[Action, ...]
    events: tuple[Event, ...]
    status: dict[str, Any]
    converged: bool
    error: str | None = None


def utc_now() -> datetime:
    return datetime.now(UTC)


def _stored_from_status(status: Mapping[str, Any]) -> StoredArtifact | None:
    artifact = status.get("artifact") or {}
    if not artifact.get("cacheKey") or not artifact.get("uri"):
        return None
    return StoredArtifact(
        cache_key=artifact["cacheKey"],
        uri=artifact["uri"],
        manifest_sha256=artifact.get("sha256") or "",
        backend=artifact.get("backend") or "cpu",
    )


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for condition in status.get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return {}


def _degraded_events(old_status: Mapping[str, Any], new_status: Mapping[str, Any]) -> list[Event]:
    """A Warning Event when Degraded turns True or its reason changes (not on every reconcile)."""
    before, after = _condition(old_status, "Degraded"), _condition(new_status, "Degraded")
    if after.get("status") != "True":
        return []
    if before.get("status") == "True" and before.get("reason") == after.get("reason"):
        return []
    return [Event("Warning", Reason(str(after.get("reason"))), str(after.get("message") or ""))]


def _api_error(exc: ApiException) -> str:
    body = exc.body.decode(errors="replace") if isinstance(exc.body, bytes) else str(exc.body or "")
    return f"{exc.status} {exc.reason}: {body[:300]}"


class Reconciler:
    """Observe -> plan -> apply for InferenceDeployments, with the clients made at start-up."""

    def __init__(
        self,
        kube: KubeClient,
        store: ArtifactStore,
        settings: OperatorSettings,
        metrics: MetricsSource | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.kube = kube
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self.clock = clock

    # ---------------------------------------------------------------------------------- compile

    async def _compile(
        self, dep: InferenceDeployment, previous: StoredArtifact | None
    ) -> tuple[CompileDecision, list[Event]]:
        namespace = dep.metadata.namespace or "default"
        fingerprint = await asyncio.to_thread(self.store.fingerprint, dep.spec.model.source)
        request = compile_request(dep.spec, self.settings.artifact_store, fingerprint)
        stored = await asyncio.to_thread(self.store.lookup, request)
        job_name = compile_job_name(dep.name, request)
        phase: JobPhase = "absent"
        message = ""
        if stored is None:
            job = await self.kube.get_job(namespace, job_name)
            phase, message = job_phase(job)
            if phase == "failed":
                message = await self._failure_details(namespace, job_name, message)
        decision = decide_compile(CompileObservation(request, stored, phase, message), previous)
        events: list[Event] = []
        if decision.create_job and await self.kube.create(build_compile_job(dep, request, self.settings.builder)):
            events.append(
                Event("Normal", Reason.COMPILE_STARTED, f"compile Job {job_name} started: {decision.message}")
            )
        # A newer spec supersedes compiles of older requests that are still running.
        for job in await self.kube.list_jobs(namespace, compile_job_selector(dep.name)):
            name = job["metadata"]["name"]
            if name != job_name and job_phase(job)[0] == "running" and await self.kube.delete_job(namespace, name):
                events.append(
                    Event("Normal", Reason.COMPILE_SUPERSEDED, f"deleted compile Job {name}: the spec changed")
                )
        return decision, events

    async def _failure_details(self, namespace: str, job_name: str, message: str) -> str:
        pods = await self.kube.list_pods(namespace, {"job-name": job_name})
        for pod in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "", reverse=True):
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                terminated = (status.get("state") or {}).get("terminated") or {}
                if terminated.get("message"):
                    return f"{message}; {terminated['message'].strip()[-800:]}"
            tail = await self.kube.pod_log_tail(namespace, pod["metadata"]["name"])
            if tail:
                return f"{message}; log tail: {tail.strip()[-800:]}"
        return message

    # ---------------------------------------------------------------------------------- scaling

    async def _desired_active(
        self, dep: InferenceDeployment, memory: DeploymentMemory, current: int, ready: int
    ) -> tuple[scaling.ScalingDecision, bool, str]:
        """The scaling decision (at the spec's interval) and whether metrics were available."""
        now = self.clock().timestamp()
        spec = dep.spec.scaling
        due = memory.last_scaling_at is None or now - memory.last_scaling_at >= spec.interval_seconds
        if not due and memory.last_decision is not None and spec.mode == "Auto":
            last = memory.last_decision
            return last, bool(last.signals), last.reason
        snapshot, why = (None, "no metrics source configured")
        if spec.mode == "Auto" and self.metrics is not None:
            snapshot, why = await self.metrics.snapshot(dep, now)
        decision = scaling.decide(spec, memory.scaling_state, snapshot, current, ready, now)
        memory.scaling_state = decision.new_state
        memory.last_scaling_at = now
        memory.last_decision = decision
        available = snapshot is not None
        return decision, available, decision.reason if available else f"{why}; {decision.reason}"

    async def decide_targets(
        self, dep: InferenceDeployment, memory: DeploymentMemory, current: int, ready: int, now: float
    ) -> tuple[scaling.ScalingDecision, warmpool.WarmPoolDecision, bool, str]:
        """Desired active replicas and standby for this tick, updating ``memory``.

        The whole decision path of the operator (the simulator's :class:`neuronfleet.sim.policies.Ours`
        must match it; tests/unit/test_operator_sim_parity.py checks that): the scaling decision at
        the spec's interval, then the warm pool from its demand and the measured cold starts.
        """
        scale, metrics_ok, scaling_message = await self._desired_active(dep, memory, current, ready)
        warm = warmpool.plan(
            dep.spec.warm_pool,
            memory.warm_state,
            scale.demand,
            now,
            memory.cold_start,
            active=scale.desired,
            max_active=dep.spec.scaling.max_replicas,
        )
        memory.warm_state = warm.new_state
        return scale, warm, metrics_ok, scaling_message

    # -------------------------------------------------------------------------------- reconcile

    async def reconcile(self, body: Mapping[str, Any], memory: DeploymentMemory) -> ReconcileReport:
        now = self.clock()
        raw_status = dict(body.get("status") or {})
        try:
            dep = InferenceDeployment.model_validate({k: v for k, v in body.items() if k != "status"})
        except pydantic.ValidationError as exc:
            message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
            return await self._report_invalid(body, raw_status, f"spec rejected by the operator: {message}")

        namespace = dep.metadata.namespace or "default"
        events: list[Event] = []
        errors: list[str] = []

        spec_problems = check_fits(dep.spec)
        previous = _stored_from_status(raw_status)
        if spec_problems:
            decision = decide_unservable(spec_problems, previous)
        else:
            try:
                decision, compile_events = await self._compile(dep, previous)
                events += compile_events
            except (ApiException, StoreUnavailable) as exc:
                detail = _api_error(exc) if isinstance(exc, ApiException) else str(exc)
                errors.append(f"compile pipeline: {detail}")
                decision = CompileDecision(False, previous, "Unknown", Reason.STORE_UNAVAILABLE, detail)

        pods = [
            pod
            for pod in await self.kube.list_pods(namespace, deployment_selector(dep.name))
            # The compile Job's pods carry the deployment label too, but they are the Job's, not the
            # fleet's: as role-less pods the fleet would drain and delete a running compile.
            if LABEL_COMPILE_REQUEST not in (pod["metadata"].get("labels") or {})
        ]
        node_objects = await self.kube.list_nodes()
        nodes = {node["metadata"]["name"] for node in node_objects}
        zones = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(LABEL_ZONE, "") for n in node_objects}
        views = [parse_pod(pod, nodes, node_zones=zones) for pod in pods]
        current_type = (raw_status.get("placement") or {}).get("instanceType")
        memory.cold_start_state = coldstart.observe(memory.cold_start_state, pod_timelines(pods, node_objects))
        memory.cold_start = coldstart.for_warm_pool(memory.cold_start_state, current_type)
        active_now = [v for v in views if v.role == "active" and not v.deleting]
        ready_now = sum(1 for v in active_now if v.ready)

        # The autoscaler's "current" is the current scale, as HPA's: the last desired count (kept in
        # status, so it survives a restart), not the pods that happen to be active at this instant.
        # A pod that failed or is being replaced must not pull the desired count down with it.
        previous_desired = raw_status.get("desiredReplicas")
        current_scale = previous_desired if isinstance(previous_desired, int) else len(active_now)
        scale, warm, metrics_ok, scaling_message = await self.decide_targets(
            dep, memory, current_scale, ready_now, now.timestamp()
        )

        placement = plan_for_spec(dep.spec, max(1, scale.desired + warm.pods), current_type=current_type)
        artifact = decision.serve
        plan: FleetPlan | None = None
        if placement.chosen is not None and not spec_problems:
            template = pod_template_hash(dep, placement.chosen, self.settings.builder)
            target = FleetTarget(
                template=template,
                artifact=ArtifactRevision(artifact.revision, artifact.uri) if artifact else None,
                active=scale.desired,
                warm=warm.pods,
                placeholders=warm.node_placeholders,
            )
            policy = policy_for_spec(dep.spec, self.settings.fleet)
            plan = plan_fleet(dep.name, target, views, now, policy)

        def status_now() -> dict[str, Any]:
            return self._status(
                dep,
                raw_status,
                plan,
                placement,
                decision,
                scale,
                warm,
                metrics_ok,
                scaling_message,
                errors,
                spec_problems,
                now,
                coldstart.status(memory.cold_start_state, measured_type),
            )

        measured_type = placement.chosen.instance_type.name if placement.chosen is not None else current_type
        # The status is published before the actions: what it reports (the compiled artifact above
        # all) is then visible before any pod it leads to is created.
        status = status_now()
        await self._patch_status(namespace, dep.name, raw_status, status)
        published = status
        if plan is not None and placement.chosen is not None:
            try:
                await self._apply(dep, placement.chosen, plan.actions, namespace)
                events += [describe_action(a) for a in plan.actions]
                await self._ensure_service(dep)
            except ApiException as exc:
                errors.append(_api_error(exc))
                status = status_now()
        events += _degraded_events(raw_status, status)
        if raw_status.get("desiredReplicas", 0) != status["desiredReplicas"]:
            events.append(
                Event(
                    "Normal",
                    Reason.SCALED,
                    f"desired active replicas {raw_status.get('desiredReplicas', 0)} -> {status['desiredReplicas']}: "
                    f"{scale.reason}",
                )
            )
        await self._patch_status(namespace, dep.name, published, status)
        converged = plan is not None and not plan.actions and plan.summary.converged
        return ReconcileReport(
            plan.actions if plan else (), tuple(events), status, converged, "; ".join(errors) or None
        )

    async def _report_invalid(
        self, body: Mapping[str, Any], raw_status: dict[str, Any], message: str
    ) -> ReconcileReport:
        metadata = body.get("metadata") or {}
        namespace, name = metadata.get("namespace") or "default", metadata.get("name") or ""
        now = rfc3339(self.clock())
        condition = {
            "type": "Degraded",
            "status": "True",
            "reason": "InvalidSpec",
            "message": message,
            "lastTransitionTime": now,
            "observedGeneration": metadata.get("generation"),
        }
        conditions = [c for c in raw_status.get("conditions") or [] if c.get("type") != "Degraded"] + [condition]
        status = {**raw_status, "conditions": conditions, "observedGeneration": metadata.get("generation")}
        await self._patch_status(namespace, name, raw_status, status)
        return ReconcileReport((), (Event("Warning", Reason.INVALID_SPEC, message),), status, False, message)

    async def _apply(
        self, dep: InferenceDeployment, candidate: Any, actions: tuple[Action, ...], namespace: str
    ) -> None:
        """Apply actions in the plan's order; stop at the first failure (later ones may rely on it)."""
        for action in actions:
            if isinstance(action, CreatePod | CreatePlaceholder):
                await self.kube.create(object_for_action(dep, candidate, action, self.settings.builder))
            elif isinstance(action, Relabel):
                patch = relabel_patch(action)["metadata"]
                await self.kube.patch_pod_metadata(
                    namespace, action.name, patch.get("labels", {}), patch.get("annotations", {})
                )
            elif isinstance(action, DeletePod | DeletePlaceholder):
                await self.kube.delete_pod(namespace, action.name, action.grace_period_seconds)

    async def _ensure_service(self, dep: InferenceDeployment) -> None:
        namespace = dep.metadata.namespace or "default"
        for obj in (build_service(dep), build_pdb(dep)):
            current = await self.kube.read(obj["kind"], namespace, obj["metadata"]["name"])
            await self.kube.ensure(obj, current)

    def _status(
        self,
        dep: InferenceDeployment,
        raw_status: dict[str, Any],
        plan: FleetPlan | None,
        placement: Any,
        decision: CompileDecision,
        scale: scaling.ScalingDecision,
        warm: warmpool.WarmPoolDecision,
        metrics_ok: bool,
        scaling_message: str,
        errors: list[str],
        spec_problems: list[str],
        now: datetime,
        cold_start: ColdStartStatus,
    ) -> dict[str, Any]:
        summary = (
            plan.summary
            if plan
            else FleetSummary(
                desired_active=scale.desired,
                desired_warm=warm.pods,
                desired_placeholders=warm.node_placeholders,
                active=0,
                ready_active=0,
                warm_ready=0,
                warm=0,
                draining=0,
                placeholders=0,
                current_ready_active=0,
                outdated=0,
                revision_known=decision.serve is not None,
            )
        )
        previous_desired = raw_status.get("desiredReplicas")
        if previous_desired != summary.desired_active:
            last_scale: LastScale | None = LastScale(rfc3339(now), scale.reason)
        elif raw_status.get("lastScaleTime"):
            last_scale = LastScale(str(raw_status["lastScaleTime"]), str(raw_status.get("lastScaleReason") or ""))
        else:
            last_scale = None
        inputs = StatusInputs(
            generation=dep.metadata.generation,
            fleet=summary,
            placement=placement,
            compile=decision,
            scaling_mode=dep.spec.scaling.mode,
            metrics_available=metrics_ok or dep.spec.scaling.mode == "Manual",
            scaling_message=scaling_message,
            errors=tuple(errors),
            rollout_stalled=summary.rollout_stalled(now, dep.spec.rollout.progress_deadline_seconds),
            spec_problems=tuple(spec_problems),
            warm_pool=WarmPoolStatus(
                desired_pods=warm.pods, desired_placeholders=warm.node_placeholders, reason=warm.reason
            ),
            cold_start=cold_start,
            last_scale=last_scale,
        )
        return build_status(dep.name, inputs, raw_status.get("conditions") or [], now)

    async def _patch_status(self, namespace: str, name: str, old: dict[str, Any], new: dict[str, Any]) -> None:
        patch = status_patch(old, new)
        if patch is not None:
            await self.kube.patch_status(namespace, name, patch)


__all__ = [
    "DeploymentMemory",
    "Event",
    "MetricsSource",
    "OperatorSettings",
    "ReconcileReport",
    "Reconciler",
]
