"""One idempotent reconcile of an InferenceDeployment: observe -> pure plan -> apply.

The per-object daemon in :mod:`neuronfleet.handlers` is its only caller. This module decides
nothing; it reads, hands everything to :func:`neuronfleet.planning.reconcile_plan.plan_reconcile`
and writes what that returns:

1. observe (:meth:`Reconciler.observe`): the compile request and whether the model source is
   readable, the stored artifact (``artifacts``), the pods, nodes and compile Jobs (``kube``), the
   metrics when the autoscaler is due (``metrics``), all into one ``Observation`` at one ``now``;
2. plan (pure): actions, status and Events, from the observation, the in-process memory and the
   durable memory read back from the status (``StatusMemory``: desired replicas, sticky placement,
   the served artifact, last scale, condition times, the rollout's start);
3. apply (:meth:`Reconciler.apply`): the status (a merge patch of what changed, nothing when
   nothing did; published first, so the artifact is visible before the pods it leads to; when its
   409 shows a new spec, nothing of the plan is written or applied: :class:`Superseded`; a plan
   with actions and nothing to write sends an empty patch at the body's resourceVersion to meet
   that 409), compile
   Jobs, pod creations / relabels / deletions in the plan's order (stopping at the first failed
   call, and at a pod to relabel that is gone), Service and PDB (diffed first), then the status
   again if the apply's outcome changed it. A failed call after the first status write (an error
   answer, a timeout, a refused connection) is recorded, not raised: the rest of the apply that does
   not depend on it still runs, and the status and the daemon's back-off report it.

Events (:meth:`Reconciler.post_events`) are posted as soon as the write they tell of lands: those
of the first status write's changes before the apply, the apply's own and those of the status after
it at the end. A process killed between a write and its post loses them; its successor's first
reconcile (a fresh memory: a takeover) posts again the Warnings the status it finds already shows
(:func:`neuronfleet.planning.reconcile_plan.found_warnings`), never the Normal Events.

The caller's ``stopping`` event is checked before every write, and the reads under way when it is
set are cancelled: once the daemon is stopping (the operator exits, or a peer of higher priority
pauses it), the peer that takes over is already reconciling, perhaps from a newer spec, so the rest
is left undone (the apply is idempotent: the next leader does it, and posts its Events).

Everything the fleet needs to be rebuilt after a restart is on the pods (labels, deterministic
names) and in the durable memory, so a restarted operator converges without duplicates.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import pydantic
from kubernetes_asyncio.client.exceptions import ApiException

from neuronfleet.aio import unless_set
from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.artifacts.store import ArtifactStore, SourceUnreadable, StoreUnavailable
from neuronfleet.kube.builders import (
    BuilderConfig,
    build_pdb,
    build_service,
    foreign_controller,
    held_by_previous,
    object_for_action,
    pod_template_hash,
    relabel_patch,
    serving_account,
)
from neuronfleet.kube.client import UNANSWERED, KubeApi
from neuronfleet.kube.jobs import LABEL_COMPILE_REQUEST, build_compile_job, compile_job_selector, wanted_job_spec
from neuronfleet.kube.observe import AccountReads, JobEventReads, PodsOnNodes, controlled_by, observe_cluster
from neuronfleet.planning.admission import (
    OperatorAccount,
    OwnAccountCleanup,
    RunningAs,
    WorkloadAccount,
    WorkloadPods,
    compile_pods,
    compile_refusal,
    missing_account_message,
    own_account_cleanup,
    own_account_message,
    own_account_problem,
    refusal_for,
    serving_pods,
    spec_accounts,
    workload_account,
)
from neuronfleet.planning.compile import (
    CompileObservation,
    CompileRequest,
    DanglingRecord,
    StoredArtifact,
    compile_request,
    legacy_request,
    takes_over_legacy,
)
from neuronfleet.planning.fleet import (
    Action,
    CreatePlaceholder,
    CreatePod,
    DeletePlaceholder,
    DeletePod,
    FleetPolicy,
    Relabel,
    describe_action,
)
from neuronfleet.planning.labels import LABEL_ROLE, deployment_selector, service_name
from neuronfleet.planning.last_valid import SPEC_PROBLEMS, kept_from_status
from neuronfleet.planning.observation import (
    DeploymentMemory,
    Observation,
    StatusMemory,
    corrupt_annotations,
    last_valid_spec,
    manifest_refused,
    next_decision_in,
    scaling_due,
    seen_status,
    validation_problem,
)
from neuronfleet.planning.placement import Candidate, check_fits
from neuronfleet.planning.prometheus_queries import query_override_refusal
from neuronfleet.planning.prometheus_urls import PrometheusUrlPolicy
from neuronfleet.planning.reasons import Event, Reason, Refusal
from neuronfleet.planning.reconcile_plan import (
    DeleteCompileJob,
    DeleteHeldJobPods,
    ReconcilePlan,
    StartCompileJob,
    after_apply_events,
    first_write_events,
    first_write_status,
    inputs_after_apply,
    kept_announced,
    kept_as_announced,
    kept_fleet_events,
    kept_found_on_takeover,
    plan_reconcile,
    refused_fleet,
    status_after_apply,
    status_events,
)
from neuronfleet.planning.signals import MetricSnapshot
from neuronfleet.planning.status import (
    RefusedSpec,
    invalid_status,
    kept_degraded,
    status_patch,
    with_foreign_conditions,
)

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
    #: Reconciles running at once, across objects. Each makes its API calls one after another, and
    #: the client's connection pool is sized from this (kube.client.connection_pool_size), so a
    #: call's 30 s budget is spent on the API server, not queued for a connection behind a burst of
    #: objects (a thousand created at once timed out by the thousand).
    max_concurrent_reconciles: int = 32
    #: Which spec.scaling.metrics.prometheusUrl the operator may request (default: any).
    prometheus_urls: PrometheusUrlPolicy = field(default_factory=PrometheusUrlPolicy)
    #: Refuse a spec's query overrides when they would run against the operator's own Prometheus.
    refuse_query_overrides: bool = False
    #: The operator's own ServiceAccount and namespace: a spec whose workloads would run as it is
    #: invalid (planning.admission.own_account_problem). None (outside a pod): nothing is refused.
    operator_account: OperatorAccount | None = None


@dataclass(frozen=True)
class ReconcileReport:
    """What one reconcile saw and did, and the memory for the next one."""

    actions: tuple[Action, ...]
    events: tuple[Event, ...]
    status: Mapping[str, Any]
    memory: DeploymentMemory
    error: str | None = None
    #: Status writes made (0 when nothing changed).
    writes: int = 0
    #: The daemon stopped during the reconcile: the writes after that point were left undone.
    stopped: bool = False
    #: A status write met a conflict twice, or once when the object read again was no longer the
    #: one planned from (:class:`Superseded`: a new spec, deleted): the first write (nothing was
    #: written or applied) or the one after the apply (the plan was applied and its Events are in
    #: this report; the outcome stays in memory for the next first write).
    #: A race with another writer, not a failure: the conflict adds no error and no back-off; the
    #: daemon runs the reconcile again at once (once), from the object as its watch has it then.
    #: An apply error of the same reconcile is still in :attr:`error` (and counted in the error
    #: metric), but it lengthens the back-off only if the re-run meets it again.
    conflict: bool = False
    #: Seconds from the reconcile's end until the autoscaler's next decision is due (None: none is
    #: waited for): the daemon reconciles then if that comes before its interval.
    next_decision_in: float | None = None
    #: Why the current spec is refused (InvalidSpec), whether the last valid spec's fleet is
    #: reconciled or none is known (:attr:`refusal_idle`): not a failure, so no back-off from it, and a
    #: kept spec's autoscaler keeps its cadence. Its own errors, and a failed cleanup, are still in
    #: :attr:`error`.
    refusal: str | None = None
    #: The refusal left nothing to reconcile (no last valid spec known: the operator restarted since
    #: the spec was refused, and the status's ``lastValidSpec`` is absent or unusable): still no error,
    #: but retried on a back-off of its own (see :func:`neuronfleet.handlers.retry_delay`), not every
    #: interval, so it does not loop on the API.
    refusal_idle: bool = False


@dataclass(frozen=True)
class ApplyOutcome:
    """What applying a plan met."""

    events: tuple[Event, ...]
    refusals: tuple[Refusal, ...]
    errors: tuple[str, ...]
    #: The apply ended early because the daemon is stopping.
    stopped: bool = False
    #: What it waits for without a fault (see :attr:`neuronfleet.planning.status.StatusInputs.waits`).
    waits: tuple[str, ...] = ()


def utc_now() -> datetime:
    return datetime.now(UTC)


def _api_error(exc: ApiException) -> str:
    body = exc.body.decode(errors="replace") if isinstance(exc.body, bytes) else str(exc.body or "")
    return f"{exc.status} {exc.reason}: {body[:300]}"


#: A call that failed: an error answer, or none (see :data:`neuronfleet.kube.client.UNANSWERED`).
#: What applying one fleet action came to (see :meth:`Reconciler._apply_action`).
ActionResult = Literal["applied", "already", "gone"]


@dataclass(frozen=True)
class StatusWrite:
    """What a status write came to (see :meth:`Reconciler._write_status`)."""

    written: bool
    #: The object's status after it, as far as the operator knows, and its resourceVersion.
    status: Mapping[str, Any]
    version: str | None
    #: The resourceVersions it met before the one it made.
    seen: tuple[str, ...] = ()
    #: The status the object had when read again after a conflict (None: not read again).
    live: Mapping[str, Any] | None = None


#: What the operator logs of a reconcile whose first status write met a conflict twice.
STATUS_CONFLICT = (
    "status: the object changed while its status was written (409 Conflict, once more after reading it again); "
    "nothing applied, the reconcile runs again at once"
)
#: What the operator logs of a reconcile whose status write after the apply met a conflict twice.
STATUS_CONFLICT_AFTER_APPLY = (
    "status: the object changed while the status after the apply was written (409 Conflict, once more after "
    "reading it again); the outcome is kept in memory and the reconcile runs again at once"
)


#: What the operator logs when a status write's 409 showed another object than the one planned from.
STATUS_SUPERSEDED = (
    "status: the object changed while its status was written (409 Conflict) and, read again, {why}: "
    "{what}; the reconcile runs again at once"
)


class Superseded(Exception):
    """A status write met 409 and the object read again is not the one the plan was made from: its
    spec changed (another generation), it is being deleted, or it was deleted and created again.

    The plan's status would describe a spec the object no longer has (an observedGeneration behind
    it, a desired replica count the user just changed), and its actions would make pods for it that
    the next reconcile deletes, each with a CreatedPod / Scaled Event contradicting the user's edit.
    A race, not a failure: reported as a conflict, and the daemon re-runs the reconcile at once.
    """


def _superseded(planned: Mapping[str, Any], fresh: Mapping[str, Any]) -> str | None:
    """Why ``fresh`` (the object read again) is no longer the object whose metadata was ``planned``
    (None: the same one at a later resourceVersion: a status or metadata change only)."""
    meta = fresh.get("metadata") or {}
    if planned.get("uid") and meta.get("uid") and meta.get("uid") != planned.get("uid"):
        return "it was deleted and created again (another uid)"
    if meta.get("deletionTimestamp"):
        return "it is being deleted"
    if planned.get("generation") is not None and meta.get("generation") != planned.get("generation"):
        return f"its spec changed (generation {planned.get('generation')} -> {meta.get('generation')})"
    return None


class NameTaken(Exception):
    """A pod to create exists already and another object controls it."""


_CALL_FAILED: tuple[type[Exception], ...] = (ApiException, NameTaken, *UNANSWERED)


def _call_error(exc: Exception) -> str:
    """What a failed call says in the status: the API server's answer, else why there was none."""
    if isinstance(exc, ApiException):
        return _api_error(exc)
    return str(exc) or type(exc).__name__


def _refusal(exc: ApiException, serving: WorkloadAccount, pods: WorkloadPods) -> Refusal | None:
    """A pod creation refused at admission (403 Forbidden / 422), named by planning when it can."""
    body = exc.body.decode(errors="replace") if isinstance(exc.body, bytes) else str(exc.body or "")
    return refusal_for(exc.status or 0, body, serving, _api_error(exc), pods)


class Reconciler:
    """Observe -> plan -> apply for InferenceDeployments, with the clients made at start-up."""

    def __init__(
        self,
        kube: KubeApi,
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
        #: Answers about compile Jobs' ServiceAccounts and FailedCreate Events, shared by every
        #: deployment's reconcile.
        self.account_reads = AccountReads()
        self.job_event_reads = JobEventReads()
        #: neuronfleet's pods by the node each holds (other deployments' pods on a fleet's nodes are
        #: counted from it): Kopf's live index of the pods it watches, handed over once at start-up
        #: (:func:`neuronfleet.handlers.share_pod_index`). None outside Kopf: no neighbours counted.
        self.occupancy: PodsOnNodes | None = None

    # ---------------------------------------------------------------------------------- observe

    async def _observe_compile(
        self, dep: InferenceDeployment, durable: StatusMemory | None = None
    ) -> tuple[CompileRequest | None, CompileObservation | None, str | None]:
        """The compile request, the stored artifact and whether the source is readable.

        ``durable``: the status read back, whose served artifact a request record left by an operator
        from before the compile image joined the request key is taken over from (no compile).
        """
        try:
            problem = None
            try:
                fingerprint = await asyncio.to_thread(self.store.fingerprint, dep.spec.model.source)
            except SourceUnreadable as exc:
                fingerprint, problem = None, str(exc)
            image = self.settings.builder.model_server_image
            served = durable.artifact if durable is not None else None
            if problem is not None and served is not None and durable is not None and durable.artifact_fingerprint:
                # The source cannot be listed (deleted after its compile, access denied): the spec's
                # request as of the last listing, whose artifact the status serves, is looked up.
                request, found = await self._lookup(dep, durable.artifact_fingerprint, image, durable)
                if not isinstance(found, StoredArtifact):
                    # Another spec (none of its artifact stored): as without the fingerprint kept.
                    request, found = await self._lookup(dep, None, image, durable)
            else:
                request, found = await self._lookup(dep, fingerprint, image, durable)
        except StoreUnavailable as exc:
            return None, None, str(exc)
        observed = CompileObservation(
            request,
            found if isinstance(found, StoredArtifact) else None,
            source_problem=problem,
            wanted_job_spec=wanted_job_spec(dep, self.settings.builder),
            dangling=found if isinstance(found, DanglingRecord) else None,
            inherited=legacy_request(dep.spec, self.settings.artifact_store, request.source_fingerprint, image),
        )
        return request, observed, None

    async def _lookup(
        self, dep: InferenceDeployment, fingerprint: str | None, image: str, durable: StatusMemory | None
    ) -> tuple[CompileRequest, StoredArtifact | DanglingRecord | None]:
        """The request of ``dep`` with this source fingerprint, and what the store holds for it."""
        request = compile_request(dep.spec, self.settings.artifact_store, fingerprint, image)
        found = await asyncio.to_thread(self.store.lookup, request)
        legacy = legacy_request(dep.spec, self.settings.artifact_store, fingerprint, image)
        if found is None and legacy is not None and durable is not None and durable.artifact is not None:
            # Read only while the status serves an artifact: a second read, of the older key.
            taken = takes_over_legacy(
                await asyncio.to_thread(self.store.lookup, legacy), durable.artifact, durable.artifact_image, image
            )
            found = taken if taken is not None else found
        return request, found

    async def observe(
        self, dep: InferenceDeployment, memory: DeploymentMemory, durable: StatusMemory | None = None
    ) -> Observation:
        """Every read of one reconcile, at one ``now``."""
        now = self.clock()
        namespace = dep.metadata.namespace or "default"
        request, compiled, compile_error = (None, None, None)
        record_reread_job = None
        # An unservable spec is not compiled: nothing to read.
        if not check_fits(dep.spec, self.settings.builder.daemonset_headroom):
            request, compiled, compile_error = await self._observe_compile(dep, durable)
        # An error answer to the fleet's reads is raised (they are needed, and it names the read);
        # the compile Jobs' is reported in the Compiled condition and retried.
        cluster = await observe_cluster(
            self.kube,
            namespace,
            dep.name,
            request,
            dep.metadata.uid,
            now,
            self.account_reads,
            self.job_event_reads,
            serving_account(dep, self.settings.builder),
            compiled.inherited if compiled is not None else None,
            self.occupancy,
        )
        if cluster.jobs_unread is not None:
            compile_error = f"compile Jobs: {_api_error(cluster.jobs_unread)}"
        if request is not None and compiled is not None and manifest_refused(cluster.pods, compiled.stored):
            # A pod found another manifest at the artifact's URI than the one recorded (and verified
            # within the store's TTL): read it again now rather than let new pods crash-loop on it.
            try:
                found = await asyncio.to_thread(self.store.lookup, request, True)
            except StoreUnavailable as exc:
                compile_error = str(exc)
            else:
                compiled = replace(
                    compiled,
                    stored=found if isinstance(found, StoredArtifact) else None,
                    dangling=found if isinstance(found, DanglingRecord) else None,
                )
        if compiled is not None and cluster.jobs is not None:
            jobs = cluster.jobs
            account = workload_account(
                "compile", dep.spec.compile.service_account_name, self.settings.builder.compile_service_account
            )
            refused = None
            if jobs.failed_create is not None:
                refused = compile_refusal(jobs.failed_create, account, compile_pods(namespace, dep.spec.compile))
            elif jobs.missing_service_account is not None:
                refused = Refusal(
                    Reason.SERVICE_ACCOUNT_MISSING,
                    missing_account_message(account, namespace, jobs.missing_service_account),
                )
            compiled = replace(
                compiled,
                job_phase=jobs.phase,
                job_message=jobs.message,
                job_name=jobs.name,
                running_jobs=jobs.running,
                job_spec=jobs.job_spec,
                job_republishes=jobs.republishes,
                pod_refused=refused,
                held_job_pods=jobs.held_pods,
                job_inherited=jobs.inherited,
                job_taken_by=jobs.taken_by,
                job_taken_by_previous=jobs.taken_by_previous,
            )
            if jobs.inherited and compiled.inherited is not None and compiled.stored is None:
                # The operator before's compile of this very spec with this image: its record, under
                # its key, once written. Read only while its Job stands for this request's.
                try:
                    legacy = await asyncio.to_thread(self.store.lookup, compiled.inherited)
                except StoreUnavailable as exc:
                    compile_error = str(exc)
                else:
                    served = durable.artifact if durable is not None else None
                    image = durable.artifact_image if durable is not None else None
                    taken = takes_over_legacy(legacy, served, image, compiled.request.image, jobs.phase)
                    compiled = replace(compiled, stored=taken) if taken is not None else compiled
            if (
                compiled.stored is None
                and jobs.phase == "succeeded"
                and (jobs.uid is None or jobs.uid != memory.record_reread_job)
            ):
                # The record was read before the Jobs were listed: a Job that wrote it and ended in
                # between looked like one that succeeded without writing it (ArtifactMissing, a retry
                # asked of the user, for a compile that worked). A republishing Job's artifact is read
                # afresh too, not a dangling look remembered from before it (a file put back meanwhile
                # leaves the manifest and record as they were). Once per Job: a later reconcile's
                # first read follows its end (the succeeded Job is kept a day, and ArtifactMissing
                # lasts until a retry is asked).
                try:
                    found = await asyncio.to_thread(self.store.lookup, compiled.request, True)
                except StoreUnavailable as exc:
                    compile_error = str(exc)
                else:
                    record_reread_job = jobs.uid
                    compiled = replace(
                        compiled,
                        stored=found if isinstance(found, StoredArtifact) else None,
                        dangling=found if isinstance(found, DanglingRecord) else None,
                    )
        snapshot, problem, problem_reason = None, "no metrics source configured", Reason.METRICS_UNAVAILABLE
        spec = dep.spec.scaling
        if spec.mode == "Auto" and scaling_due(spec, memory, now.timestamp()):
            # A spec's URL outside the allow-list is refused before any metrics source sees it.
            refusal = (
                self.settings.prometheus_urls.refusal(spec.metrics.prometheus_url)
                if spec.metrics.prometheus_url
                else None
            )
            # ... and so are queries of its own to run with the operator's credentials, when refused.
            query_refusal = query_override_refusal(spec.metrics) if self.settings.refuse_query_overrides else None
            if refusal is not None:
                problem, problem_reason = refusal, Reason.PROMETHEUS_URL_NOT_ALLOWED
            elif query_refusal is not None:
                problem, problem_reason = query_refusal, Reason.PROMETHEUS_QUERY_NOT_ALLOWED
            elif self.metrics is not None:
                snapshot, problem = await self.metrics.snapshot(dep, now.timestamp())
        return Observation(
            now=now,
            pods=cluster.pods,
            neighbours=cluster.neighbours,
            foreign_pod_names=cluster.foreign_pod_names,
            timelines=cluster.timelines,
            compile=compiled,
            compile_error=compile_error,
            metrics=snapshot,
            metrics_problem=problem,
            metrics_problem_reason=problem_reason,
            corrupt_annotations=corrupt_annotations(dep.metadata.annotations),
            record_reread_job=record_reread_job,
        )

    # ------------------------------------------------------------------------------------ apply

    async def _write_status(
        self,
        namespace: str,
        name: str,
        known: Mapping[str, Any],
        new: Mapping[str, Any],
        version: str | None,
        planned: Mapping[str, Any],
        check: bool = False,
    ) -> StatusWrite:
        """Write what changed from ``known`` (the object's status at ``version``) to ``new``, sent
        with ``version``: a conflict (409, the object changed since) reads the object again once and
        writes ``new`` over that, with the other controllers' conditions as it has them. A second
        conflict raises (its ApiException); on either of a reconcile's writes it is reported as a
        conflict (:attr:`ReconcileReport.conflict`), which the daemon re-runs at once to plan anew.

        ``planned``: the metadata of the body ``new`` was planned from. When the object read again is
        no longer that one (:func:`_superseded`), nothing is written: :class:`Superseded` is raised.

        ``check``: with nothing to write, still have the API server say whether ``version`` is the
        object's current one (the plan has actions to apply, which a new spec would not ask for).
        """
        target = with_foreign_conditions(new, known)
        patch = status_patch(known, target)
        if patch is None and (not check or version is None):
            return StatusWrite(False, known, version)
        seen: tuple[str, ...] = (version,) if version else ()
        try:
            if patch is None:
                # An empty merge patch carrying only metadata.resourceVersion: kube-apiserver applies a
                # patch's resourceVersion as a precondition (409 when the object has another) and
                # stores nothing for a patch that changes nothing (no new resourceVersion, no watch
                # event), as the sandbox does. Without it no write would meet the 409 that tells a
                # plan made from a stale body (the watch lagging a scale) from a current one.
                checked = await self.kube.patch_status(namespace, name, {}, version)
                return StatusWrite(False, known, checked or version)
            made = await self.kube.patch_status(namespace, name, patch, version)
            return StatusWrite(True, target, made, seen)
        except ApiException as exc:
            if exc.status != 409 or version is None:
                raise
            conflict = exc
        fresh = await self.kube.read("InferenceDeployment", namespace, name)
        if fresh is None:
            raise conflict  # deleted meanwhile: nothing to write
        if (why := _superseded(planned, fresh)) is not None:
            raise Superseded(why) from conflict
        fresh_status = fresh.get("status")
        live: Mapping[str, Any] = fresh_status if isinstance(fresh_status, Mapping) else {}
        fresh_version = (fresh.get("metadata") or {}).get("resourceVersion")
        fresh_version = str(fresh_version) if fresh_version else None
        seen += (fresh_version,) if fresh_version else ()
        target = with_foreign_conditions(new, live)
        patch = status_patch(live, target)
        if patch is None:
            return StatusWrite(False, live, fresh_version, seen, live)
        made = await self.kube.patch_status(namespace, name, patch, fresh_version)
        logger.info("%s/%s: the status write met a conflict; written over the object read again", namespace, name)
        return StatusWrite(True, target, made, seen, live)

    async def _apply_compile(
        self, dep: InferenceDeployment, plan: ReconcilePlan, stopping: asyncio.Event
    ) -> list[Event]:
        namespace = dep.metadata.namespace or "default"
        events = []
        for action in plan.compile_actions:
            if stopping.is_set():
                break
            if isinstance(action, StartCompileJob):
                job = build_compile_job(dep, action.request, self.settings.builder, action.republish)
                if await self.kube.create(job):
                    message = f"compile Job {action.name} started for {action.request.source}"
                    if action.republish is not None:
                        message += f": {action.republish.describe()}"
                    events.append(Event("Normal", Reason.COMPILE_STARTED, message))
            elif isinstance(action, DeleteCompileJob):
                deletion = await self.kube.delete_job(namespace, action.name)
                if deletion.outcome == "deleted":
                    message = f"deleted compile Job {action.name}: {action.why}"
                    events.append(Event("Normal", Reason.COMPILE_SUPERSEDED, message))
                elif deletion.outcome == "held":
                    # Once: the next reconcile sees its deletionTimestamp and leaves it be.
                    message = (
                        f"deleted compile Job {action.name}: {action.why}; it stays, Terminating, until the "
                        f"finalizer(s) {', '.join(deletion.finalizers)} are removed (by their controller)"
                        f"{await self._delete_held_job_pods(namespace, action.name, deletion.uid)}"
                    )
                    events.append(Event("Normal", Reason.COMPILE_SUPERSEDED, message))
            elif isinstance(action, DeleteHeldJobPods):
                # No Event: the Job's deletion posted its one; a failure is retried on the next reconcile.
                try:
                    deleted = [pod for pod in action.pods if await self.kube.delete_pod(namespace, pod)]
                except _CALL_FAILED as exc:
                    logger.warning(
                        "%s: the pods of the held compile Job %s were not deleted: %s", namespace, action.job, exc
                    )
                else:
                    if deleted:
                        logger.info(
                            "%s: deleted the pod(s) %s of the held compile Job %s", namespace, deleted, action.job
                        )
        return events

    async def _delete_held_job_pods(self, namespace: str, job: str, uid: str) -> str:
        """Delete the pods of ``job`` (with ``uid``), a Job another controller's finalizer keeps after
        its DELETE; what the CompileSuperseded Event adds of it.

        The garbage collector deletes a Background delete's dependents only once the owner is gone,
        and the Job controller manages no Job being deleted: its compile would run on, holding its
        node, until that finalizer is removed. Done at once here; any left (a failed call, an operator
        stop) are deleted on later reconciles (:class:`DeleteHeldJobPods`).
        """
        if not uid:
            return "; its pods are deleted on the next reconcile"
        try:
            pods = [
                pod["metadata"]["name"]
                for pod in await self.kube.list_pods(namespace, {"job-name": job})
                if not pod["metadata"].get("deletionTimestamp") and controlled_by(pod, uid)
            ]
            deleted = [name for name in pods if await self.kube.delete_pod(namespace, name)]
        except _CALL_FAILED as exc:
            logger.warning("%s: the pods of the held compile Job %s were not deleted: %s", namespace, job, exc)
            return f"; its pods could not be deleted yet ({_call_error(exc)}): retried on the next reconcile"
        return f"; its pod(s) {', '.join(deleted)} deleted, ending the compile" if deleted else ""

    async def _apply_action(self, dep: InferenceDeployment, candidate: Candidate, action: Action) -> ActionResult:
        """Apply one action: ``applied``; ``already`` when a pod to delete is gone or a pod to create
        exists already, ours (nothing done, no Event); ``gone`` when a pod to relabel is gone (the
        plan's later actions may rely on it: a demotion follows the promotion that makes it safe)."""
        namespace = dep.metadata.namespace or "default"
        if isinstance(action, CreatePod | CreatePlaceholder):
            pod = object_for_action(dep, candidate, action, self.settings.builder)
            if not await self.kube.create(pod):
                # 409: a create retried after a lost answer (ours), or a name someone else holds
                # without the fleet's labels (the plan skips the names of labelled ones).
                owner = foreign_controller(await self.kube.read("Pod", namespace, action.name), pod)
                if owner is not None:
                    raise NameTaken(
                        f"pod {action.name} exists and belongs to {owner}, not to this InferenceDeployment: "
                        "left as it is; delete or rename it"
                    )
                # Ours: this call made nothing, so no CreatedPod. The round that made the pod posted
                # one (this plan was made before the watch showed the pod), unless that call's answer
                # was lost: then it was reported as a failed call, and the pod is simply there.
                return "already"
        elif isinstance(action, Relabel):
            patch = relabel_patch(action)["metadata"]
            labels, annotations = patch.get("labels", {}), patch.get("annotations", {})
            if not await self.kube.patch_pod_metadata(namespace, action.name, labels, annotations):
                return "gone"
        elif isinstance(action, DeletePod | DeletePlaceholder) and not await self.kube.delete_pod(
            namespace, action.name, action.grace_period_seconds
        ):
            return "already"
        return "applied"

    async def apply(
        self, dep: InferenceDeployment, plan: ReconcilePlan, stopping: asyncio.Event | None = None
    ) -> ApplyOutcome:
        """Compile Jobs, then the fleet's actions in the plan's order (stopping at the first
        failure: later ones may rely on it), then Service and PDB; nothing more once ``stopping`` is set.

        A failed call (an error answer, a timeout, a refused connection) is recorded, not raised: what
        does not depend on it is still applied, and the status then reports it.
        """
        stopping = stopping or asyncio.Event()
        events: list[Event] = []
        errors: list[str] = []
        refusals: list[Refusal] = []
        waits: list[str] = []
        try:
            events += await self._apply_compile(dep, plan, stopping)
        except _CALL_FAILED as exc:
            errors.append(f"compile Job: {_call_error(exc)}")
        if plan.candidate is None or stopping.is_set():
            return ApplyOutcome(tuple(events), (), tuple(errors), stopping.is_set())
        namespace = dep.metadata.namespace or "default"
        for action in plan.actions:
            if stopping.is_set():
                return ApplyOutcome(tuple(events), tuple(refusals), tuple(errors), True)
            try:
                result = await self._apply_action(dep, plan.candidate, action)
                if result == "gone":
                    # Deleted since it was observed: its deletion wakes the next reconcile, which
                    # plans without it. No error: the fleet changed, the operator did not fail.
                    logger.info("%s/%s: pod %s is gone; the rest of the plan waits", namespace, dep.name, action.name)
                    break
            except _CALL_FAILED as exc:
                serving = workload_account(
                    "serving", dep.spec.runtime.service_account_name, self.settings.builder.serving_service_account
                )
                pods = serving_pods(namespace, dep.spec.runtime, plan.candidate)
                refusal = (
                    _refusal(exc, serving, pods)
                    if isinstance(exc, ApiException) and isinstance(action, CreatePod | CreatePlaceholder)
                    else None
                )
                if refusal is not None:
                    refusals.append(refusal)
                else:
                    errors.append(_call_error(exc))
                break
            if result == "applied" and (event := describe_action(action)) is not None:
                events.append(event)
        try:
            for kind, name in (("Service", service_name(dep.name)), ("PodDisruptionBudget", dep.name)):
                current = await self.kube.read(kind, namespace, name)
                # The Service keeps the port it has (its clients'), whatever spec.runtime.port now says.
                obj = (
                    build_service(dep, current)
                    if kind == "Service"
                    else build_pdb(dep, plan.inputs.fleet.desired_active)
                )
                if stopping.is_set():
                    return ApplyOutcome(tuple(events), tuple(refusals), tuple(errors), True)
                owner = foreign_controller(current, obj)
                if owner is not None and held_by_previous(current, dep.name, dep.metadata.uid):
                    # Deleted and created again before the garbage collector removed the old object's
                    # children: it removes this one too, unaided; the next reconcile (an interval
                    # away) makes ours. Meanwhile the old one selects the same pods by their labels.
                    waits.append(
                        f"{kind} {name} belongs to the previous {owner} (deleted; another uid), which the garbage "
                        "collector is removing: this object's is made once it is gone"
                    )
                    continue
                if owner is not None:
                    errors.append(
                        f"{kind} {name} exists and belongs to {owner}, not to this InferenceDeployment: "
                        "left as it is; delete or rename it"
                    )
                    continue
                await self.kube.ensure(obj, current)
        except _CALL_FAILED as exc:
            errors.append(_call_error(exc))
        return ApplyOutcome(tuple(events), tuple(refusals), tuple(errors), waits=tuple(waits))

    async def post_events(self, body: Mapping[str, Any], events: Sequence[Event]) -> None:
        """Post ``events`` about the object ``body``, with the operator's own client (see
        :meth:`neuronfleet.kube.client.KubeClient.post_event`: a failure is logged, never raised)."""
        if events:
            await asyncio.gather(*(self.kube.post_event(dict(body), e.type, e.reason.value, e.message) for e in events))

    # -------------------------------------------------------------------------------- reconcile

    async def reconcile(
        self, body: Mapping[str, Any], memory: DeploymentMemory, stopping: asyncio.Event | None = None
    ) -> ReconcileReport:
        """Observe, plan and apply once; nothing more is written once ``stopping`` is set (see the
        module), and the reads under way then are cancelled."""
        stopping = stopping or asyncio.Event()
        body_status = body.get("status")
        body_version = (body.get("metadata") or {}).get("resourceVersion")
        status, version = seen_status(
            body_status if isinstance(body_status, Mapping) else {}, memory, str(body_version) if body_version else None
        )
        if (body.get("metadata") or {}).get("deletionTimestamp"):
            # Being deleted: the garbage collector removes the pods, Jobs, Service and PDB; anything
            # made now would be made only to be collected (the API server bumps the generation when
            # it sets deletionTimestamp, which wakes a reconcile).
            return ReconcileReport((), (), status, memory)
        try:
            dep = InferenceDeployment.model_validate({k: v for k, v in body.items() if k != "status"})
        except pydantic.ValidationError as exc:
            message = validation_problem(exc, SPEC_PROBLEMS)
            return await self._refused(
                body, status, version, memory, f"spec rejected by the operator: {message}", stopping
            )

        namespace = dep.metadata.namespace or "default"
        builder = self.settings.builder
        accounts = spec_accounts(dep, builder.compile_service_account, builder.serving_service_account)
        operator = self.settings.operator_account
        if operator is not None and (problem := own_account_problem(namespace, accounts, operator)):
            # Nothing is planned or made as that account; what runs as it already is acted on.
            cleanup, failed = await self._clear_own_account(dep, operator, stopping)
            message = own_account_message(problem, cleanup)
            return await self._refused(body, status, version, memory, message, stopping, failed)
        return await self._reconcile_spec(body, dep, status, version, replace(memory, last_valid=dep), stopping)

    async def _refused(
        self,
        body: Mapping[str, Any],
        status: Mapping[str, Any],
        version: str | None,
        memory: DeploymentMemory,
        message: str,
        stopping: asyncio.Event,
        failed: str | None = None,
    ) -> ReconcileReport:
        """A spec the operator refuses (InvalidSpec): the fleet of the last valid spec is reconciled
        as that spec says (lost pods replaced), the status saying the current generation is refused.
        That spec is the memory's, else (a restart since, a new leader) the status's
        (``status.lastValidSpec``, checked again as a spec is); when neither can be used, the pods are
        counted and reported, nothing is made."""
        metadata = body.get("metadata") or {}
        kept = last_valid_spec(memory, metadata.get("uid"))
        if kept is None:
            builder = self.settings.builder
            stored = kept_from_status(
                StatusMemory.from_status(status).last_valid_spec,
                body,
                builder.compile_service_account,
                builder.serving_service_account,
                self.settings.operator_account,
            )
            if isinstance(stored, str):
                namespace, name = metadata.get("namespace") or "default", metadata.get("name") or ""
                # Said at every reconcile while it lasts: why a lost pod is not replaced.
                logger.info("%s/%s: no last valid spec to keep the fleet from: %s", namespace, name, stored)
                return await self._report_invalid(body, status, version, memory, message, stopping, stored, failed)
            kept = stored
        refused = RefusedSpec(metadata.get("generation"), message, kept.metadata.generation)
        report = await self._reconcile_spec(body, kept, status, version, memory, stopping, refused)
        # The refusal is said in the status and apart from errors: counted as one, it backed the
        # daemon off (30 s, then longer) past the kept spec's decisions (every intervalSeconds).
        error = "; ".join(part for part in (failed, report.error) if part) or None
        return replace(report, error=error, refusal=message)

    async def _reconcile_spec(
        self,
        body: Mapping[str, Any],
        dep: InferenceDeployment,
        status: Mapping[str, Any],
        version: str | None,
        memory: DeploymentMemory,
        stopping: asyncio.Event,
        refused: RefusedSpec | None = None,
    ) -> ReconcileReport:
        """Observe, plan and apply for ``dep`` (the body's spec, or the last valid one while the
        body's is ``refused``), writing the status of the object ``body``."""
        namespace = dep.metadata.namespace or "default"
        builder = self.settings.builder
        durable = StatusMemory.from_status(status)
        for section in durable.unread:
            # Rewritten from this operator's own figures at the next write: said, as what was lost
            # (a rollback past a field added since, before the status models ignored unknown ones).
            logger.info("%s/%s: a status section could not be read, not carried over: %s", namespace, dep.name, section)
        observation = await unless_set(self.observe(dep, memory, durable), stopping)
        if observation is None:
            return ReconcileReport((), (), status, memory, None, 0, stopped=True)
        plan = plan_reconcile(
            dep,
            observation,
            memory,
            durable,
            self.settings.fleet,
            lambda candidate: pod_template_hash(dep, candidate, builder),
            builder.daemonset_headroom,
            builder.default_scheduler_name,
            refused,
        )
        for rejected in plan.memory.cold_start_state.rejections:
            # Once per pod while it exists (per operator process): what would have skewed the
            # measured cold starts, and so the warm pool, is visible without being in the status.
            logger.info(
                "%s/%s: pod %s not measured as a cold start: %s",
                namespace,
                dep.name,
                rejected.name or rejected.uid,
                rejected.reason,
            )
        if stopping.is_set():
            return ReconcileReport((), (), status, memory, None, 0, stopped=True)
        planned = body.get("metadata") or {}
        try:
            # With actions to apply, an empty first write still checks the body is current (one more
            # request, for those reconciles alone): a new spec is otherwise not noticed before its
            # plan is applied, when the status planned from the stale body is the one already there.
            check = bool(plan.actions or plan.compile_actions)
            # A takeover's Degraded False waits for the apply's outcome (first_write_status says why).
            sent = first_write_status(durable, plan.status, not memory.takeover_announced)
            first = await self._write_status(namespace, dep.name, status, sent, version, planned, check)
        except Superseded as exc:
            # Planned from a spec the object no longer has: none of it is applied either. The
            # re-run plans from the object as the watch has it then (a watch that has not delivered
            # the new spec yet makes it meet this once more; its delivery wakes the daemon).
            what = "nothing of the plan made from it before is written or applied"
            logger.info("%s/%s: %s", namespace, dep.name, STATUS_SUPERSEDED.format(why=exc, what=what))
            return ReconcileReport((), (), status, memory, None, 0, conflict=True)
        except ApiException as exc:
            if exc.status != 409:
                raise
            # Not raised, no error: a race is no failure (no ReconcileFailed Warning, no back-off).
            # Nothing wakes the daemon for a status-only change, so it re-runs the reconcile itself.
            logger.info("%s/%s: %s", namespace, dep.name, STATUS_CONFLICT)
            return ReconcileReport((), (), status, memory, None, 0, conflict=True)
        writes = int(first.written)
        last = first
        if first.live is not None:
            # The body planned from lagged the object (a 409): what the status said before this
            # reconcile, and so which Events its changes make, is the copy read again. From the
            # body, a change an earlier reconcile had written and announced was announced again.
            durable = StatusMemory.from_status(first.live)
        # Posted as soon as the write lands, not after the apply (pod creations, drains: long): an
        # operator killed meanwhile left a status whose change its successor reads as already so and
        # never announces. Posted even once stopping: they tell of a write made, which stands.
        takeover = not memory.takeover_announced
        # A takeover's Recovered waits for the apply's outcome (first_write_events says why).
        said = tuple(first_write_events(durable, plan.status, plan.scale_reason, plan.compile_succeeded, takeover))
        # Under a refused spec Degraded's reason stays InvalidSpec: the kept fleet's own troubles get
        # their Events from its Degraded as without the refusal.
        kept_first = kept_degraded(plan.inputs)
        found = kept_found_on_takeover(memory, durable, kept_first)
        said += tuple(kept_fleet_events(kept_announced(memory, durable), kept_first, found=found))
        await self.post_events(body, said)
        outcome = await self.apply(dep, plan, stopping)
        final, memory = status_after_apply(
            plan, dep, durable, outcome.refusals, outcome.errors, observation, outcome.waits
        )
        unwritten: tuple[str, ...] = ()
        conflict = False
        # The apply's outcome not written: a Recovered held back (first_write_events) stays unsaid here;
        # the Degraded found stays written (first_write_status), so whoever reconciles next says it.
        unconfirmed = False
        seen = first.seen
        try:
            if stopping.is_set():
                final = plan.status
                unconfirmed = True
            else:
                second = await self._write_status(namespace, dep.name, first.status, final, first.version, planned)
                if second.written:
                    writes += 1
                    seen += (*second.seen, *((first.version,) if first.written and first.version else ()))
                    last = second
        except Superseded as exc:
            # The spec changed during the apply: its outcome is that of a plan the object no longer
            # asks for. What was applied and written first stands, and its Events are true; the
            # re-run plans from the new spec and writes its own status.
            conflict = True
            what = "the apply's outcome is not written (what it did stands)"
            logger.info("%s/%s: %s", namespace, dep.name, STATUS_SUPERSEDED.format(why=exc, what=what))
            final = plan.status
            unconfirmed = True
        except _CALL_FAILED as exc:
            # Raising here would lose the Events of what was applied and of the first write (a
            # "Scaled" that the next reconcile, reading the new desired count, never posts). The
            # outcome stays in memory, so the next reconcile's first write publishes it.
            if isinstance(exc, ApiException) and exc.status == 409:
                # A race (a conflict once more after reading the object again), as on the first
                # write: no error, no back-off; the daemon re-runs the reconcile at once.
                conflict = True
                logger.info("%s/%s: %s", namespace, dep.name, STATUS_CONFLICT_AFTER_APPLY)
            else:
                unwritten = (f"status: {_call_error(exc)}",)
                logger.warning(
                    "%s/%s: the status after the apply was not written: %s", namespace, dep.name, unwritten[0]
                )
            final = plan.status
            unconfirmed = True
        memory = replace(memory, takeover_announced=True)
        if writes:
            memory = replace(
                memory,
                written=(status, last.status),
                written_version=last.version,
                superseded_versions=frozenset(seen) - {last.version},
            )
        # The apply's Events, and those of what its outcome changed from the first write.
        rest = outcome.events + tuple(
            after_apply_events(durable, plan.status, final, plan.scale_reason, takeover and not unconfirmed)
        )
        kept_final = kept_first
        if final is not plan.status:
            kept_final = kept_degraded(inputs_after_apply(plan, outcome.refusals, outcome.errors, outcome.waits))
            found = kept_found_on_takeover(memory, durable, kept_final)
            rest += tuple(kept_fleet_events(kept_as_announced(kept_first), kept_final, found=found))
        memory = replace(memory, kept_degraded=kept_as_announced(kept_final))
        await self.post_events(body, rest)
        events = said + rest
        error = "; ".join(outcome.errors + plan.observe_errors + unwritten) or None
        stopped = outcome.stopped or stopping.is_set()
        # From the clock at the reconcile's end, not the observation's: the daemon's wait starts now.
        due = next_decision_in(dep.spec.scaling, memory, self.clock().timestamp())
        return ReconcileReport(plan.actions, events, final, memory, error, writes, stopped, conflict, due)

    async def _clear_own_account(
        self, dep: InferenceDeployment, operator: OperatorAccount, stopping: asyncio.Event
    ) -> tuple[OwnAccountCleanup, str | None]:
        """Delete the refused spec's placeholders, warm pods and compile Jobs running as the operator's
        account (planning.admission.own_account_cleanup); what it keeps, and why a call failed (None)."""
        namespace, name = dep.metadata.namespace or "default", dep.name
        try:
            pods = await self.kube.list_pods(namespace, deployment_selector(name))
            jobs = await self.kube.list_jobs(namespace, compile_job_selector(name))
        except _CALL_FAILED as exc:
            return OwnAccountCleanup((), (), ()), f"reading what runs as the operator's account: {_call_error(exc)}"
        running = tuple(
            RunningAs(
                pod["metadata"]["name"],
                (pod["metadata"].get("labels") or {}).get(LABEL_ROLE, ""),
                (pod.get("spec") or {}).get("serviceAccountName") or "default",
            )
            for pod in pods
            # A compile Job's pod goes with its Job; a pod terminating is going already.
            if controlled_by(pod, dep.metadata.uid)
            and LABEL_COMPILE_REQUEST not in (pod["metadata"].get("labels") or {})
            and not pod["metadata"].get("deletionTimestamp")
        ) + tuple(
            RunningAs(
                job["metadata"]["name"],
                "compile",
                ((job.get("spec") or {}).get("template") or {}).get("spec", {}).get("serviceAccountName") or "default",
            )
            for job in jobs
            if controlled_by(job, dep.metadata.uid) and not job["metadata"].get("deletionTimestamp")
        )
        cleanup = own_account_cleanup(running, operator)
        try:
            for pod_name in cleanup.pods:
                if stopping.is_set():
                    break
                await self.kube.delete_pod(namespace, pod_name)
                logger.info("%s/%s: deleted pod %s: it ran as the operator's own account", namespace, name, pod_name)
            for job_name in cleanup.jobs:
                if stopping.is_set():
                    break
                await self.kube.delete_job(namespace, job_name)
                logger.info(
                    "%s/%s: deleted compile Job %s: it ran as the operator's own account", namespace, name, job_name
                )
        except _CALL_FAILED as exc:
            return cleanup, f"deleting what runs as the operator's account: {_call_error(exc)}"
        return cleanup, None

    async def _report_invalid(
        self,
        body: Mapping[str, Any],
        status: Mapping[str, Any],
        version: str | None,
        memory: DeploymentMemory,
        message: str,
        stopping: asyncio.Event,
        unusable: str,
        failed: str | None = None,
    ) -> ReconcileReport:
        """The refusal reported without a last valid spec to build from (``unusable``: why the status's
        cannot be used): the pods found counted, nothing made."""
        metadata = body.get("metadata") or {}
        namespace, name = metadata.get("namespace") or "default", metadata.get("name") or ""
        now = self.clock()
        fleet = None
        try:
            # Counted, not planned: the status says what serves, and the capacity a lost pod took.
            cluster = await unless_set(
                observe_cluster(self.kube, namespace, name, None, metadata.get("uid"), now), stopping
            )
        except _CALL_FAILED as exc:
            # The previous counts stay; the error says why they could not be renewed.
            failed = "; ".join(part for part in (failed, f"reading the pods: {_call_error(exc)}") if part)
        else:
            if cluster is not None:
                fleet = refused_fleet(cluster.pods, now, StatusMemory.from_status(status))
        new = invalid_status(status, message, metadata.get("generation"), now, fleet, unusable)
        if stopping.is_set():
            return ReconcileReport((), (), status, memory, failed, 0, stopped=True, refusal=message)
        try:
            write = await self._write_status(namespace, name, status, new, version, metadata)
        except Superseded as exc:
            # The spec rejected is no longer the object's (fixed meanwhile): said of it, nothing.
            what = "the spec rejected before is not reported"
            logger.info("%s/%s: %s", namespace, name, STATUS_SUPERSEDED.format(why=exc, what=what))
            return ReconcileReport((), (), status, memory, None, 0, conflict=True)
        except ApiException as exc:
            if exc.status != 409:
                raise
            logger.info("%s/%s: %s", namespace, name, STATUS_CONFLICT)
            return ReconcileReport((), (), status, memory, None, 0, conflict=True)
        writes = int(write.written)
        takeover = not memory.takeover_announced
        memory = replace(memory, takeover_announced=True)
        if writes:
            memory = replace(
                memory,
                written=(status, write.status),
                written_version=write.version,
                superseded_versions=frozenset(write.seen) - {write.version},
            )
        # After a 409 the copy read again says what was announced already (as in :meth:`reconcile`).
        durable = StatusMemory.from_status(status if write.live is None else write.live)
        events = tuple(status_events(durable, new, "", takeover=takeover))
        await self.post_events(body, events)
        # The refusal apart from errors, as with a last valid spec kept (:meth:`_refused`): counted as
        # one, the same spec was a reconcile error (outcome="error", the errors alert) only after a
        # restart. A failed cleanup or pod read is still an error.
        return ReconcileReport((), events, new, memory, failed, writes, refusal=message, refusal_idle=True)


__all__ = [
    "DeploymentMemory",
    "MetricsSource",
    "OperatorSettings",
    "ReconcileReport",
    "Reconciler",
]
