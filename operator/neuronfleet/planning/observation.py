"""What one reconcile saw, and what it remembers between reconciles (pure data).

- :class:`Observation`: everything the adapters read this round (the fleet's pods as
  :class:`~neuronfleet.planning.fleet.PodView`, their start-up timelines, the compile pipeline,
  the metrics, the object's own annotations), and the time it was read. The plan reads no clock
  and no cluster: only this.
- :class:`StatusMemory`: the *durable* memory, the few facts the operator keeps in the object's
  status and reads back on the next reconcile (so they survive a restart): the last desired
  replicas (the autoscaler's current scale, as HPA's), the placement and its instance type (sticky
  placement; reported on while a spec change fits no instance type and the pods stay put), the
  artifact being served (kept while a new revision compiles), when and why it last scaled, the
  conditions (for their transition times), the autoscaler's checkpoint (what it learned: a
  restarted operator resumes from it) and the warm pool's size (held by a restarted operator until
  it has a history to size it from), when the rollout in progress began (RolloutStalled counts
  from it), the measured cold starts (``status.coldStart``: a restarted operator carries them
  over until it has measured enough pods of its own, :func:`~neuronfleet.planning.coldstart.take_over`),
  and the last valid spec (``status.lastValidSpec``: a restarted operator keeps a refused spec's fleet
  whole from it, :mod:`~neuronfleet.planning.last_valid`).
  Nothing else of the status is ever an input.
- :class:`DeploymentMemory`: the *in-process* memory (the autoscaler's state between checkpoints,
  the warm pool's history, measured cold starts, the outcome of the last apply). It restarts
  empty with the operator (and on a new leader); the autoscaler then resumes from the checkpoint,
  or holds the fleet it finds, the warm pool holds the pool it finds, and the cold starts start
  from the status's figures.

:func:`manifest_refused` says when a pod's last exit calls for reading the store again at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import pydantic

from neuronfleet.api.v1alpha1 import (
    GROUP,
    ColdStartStatus,
    InferenceDeployment,
    LastValidSpecStatus,
    PlacementStatus,
    ScalingSpec,
)
from neuronfleet.planning import coldstart, scaling, warmpool
from neuronfleet.planning.coldstart import PodTimeline
from neuronfleet.planning.compile import CompileFailure, CompileObservation, StoredArtifact
from neuronfleet.planning.fleet import PodView, RolloutRecord
from neuronfleet.planning.reasons import Reason, Refusal
from neuronfleet.planning.signals import MetricSnapshot
from neuronfleet.planning.status import LastScale, find_condition
from neuronfleet.planning.times import utc_seconds
from neuronserve.manifest import MANIFEST_MISMATCH_EXIT_CODE

#: Annotations holding JSON that the operator's framework (Kopf) parses on every event.
JSON_ANNOTATIONS = (f"{GROUP}/last-handled-configuration",)


@dataclass(frozen=True)
class Observation:
    """Everything one reconcile read, at ``now``."""

    now: datetime
    #: The fleet's pods (serving pods and placeholders; the compile Job's pods are not the fleet's).
    pods: tuple[PodView, ...] = ()
    #: Pods of other deployments (other models sharing the Inf2 nodes) on the fleet's nodes, per node
    #: name: a shrink removes the pod whose going empties a node, counting those too.
    neighbours: Mapping[str, int] = field(default_factory=dict)
    #: Names of pods with the fleet's labels that another object controls (a re-created
    #: deployment's predecessor, a pod made by hand): not the fleet's, but their names are taken.
    foreign_pod_names: frozenset[str] = frozenset()
    timelines: tuple[PodTimeline, ...] = ()
    #: None when the spec fits no instance type: nothing is compiled for it, so nothing is read.
    compile: CompileObservation | None = None
    #: The artifact store or the API could not be read for the compile pipeline.
    compile_error: str | None = None
    #: Read only when the autoscaler is due (see :func:`scaling_due`); None: not read or unavailable.
    metrics: MetricSnapshot | None = None
    #: Why ``metrics`` is None.
    metrics_problem: str = "no metrics source configured"
    #: The ScalingActive reason of ``metrics_problem``: PrometheusUrlNotAllowed when the operator's
    #: allow-list refused the spec's prometheusUrl (nothing was requested); PrometheusQueryNotAllowed
    #: when it refuses the spec's query overrides (likewise).
    metrics_problem_reason: Reason = Reason.METRICS_UNAVAILABLE
    corrupt_annotations: tuple[str, ...] = ()
    #: The uid of the succeeded compile Job whose request record this reconcile read again once it
    #: saw the Job done (None: none read); remembered in :attr:`DeploymentMemory.record_reread_job`.
    record_reread_job: str | None = None


def validation_problem(exc: pydantic.ValidationError, most: int = 3) -> str:
    """The first ``most`` problems of ``exc``, one line (the field path and pydantic's words)."""
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:most])


_Section = TypeVar("_Section", bound=pydantic.BaseModel)


def _status_section(status: Mapping[str, Any], key: str, model: type[_Section], unread: list[str]) -> _Section | None:
    """``status[key]`` parsed as ``model``; None when absent or not an object, or when it does not
    parse (then said in ``unread``)."""
    section = status.get(key)
    if not isinstance(section, Mapping):
        return None
    try:
        return model.model_validate(section)
    except pydantic.ValidationError as exc:
        unread.append(f"status.{key}: {validation_problem(exc)}")
        return None


@dataclass(frozen=True)
class StatusMemory:
    """The facts read back from the object's status (the durable memory)."""

    desired_replicas: int | None = None
    instance_type: str | None = None
    #: The whole ``placement`` section as read (None: absent, or not one): the placement of the pods
    #: that serve, reported on while the spec fits no instance type (the pods are left as they are).
    placement: PlacementStatus | None = None
    artifact: StoredArtifact | None = None
    #: The image that compiled it (``status.artifact.compileImage``); None: unknown (a status
    #: written before the field).
    artifact_image: str | None = None
    #: The source fingerprint its request was made with (``status.artifact.sourceFingerprint``).
    artifact_fingerprint: str | None = None
    last_scale: LastScale | None = None
    conditions: tuple[Mapping[str, Any], ...] = ()
    #: The status's ``autoscaler`` section as read (the last checkpoint), parsed only by a
    #: restarted operator's first decision (:func:`~neuronfleet.planning.status.checkpoint_from_status`).
    autoscaler: Mapping[str, Any] | None = None
    #: A compile that failed and is not to be run again as it was (``status.compileFailure``).
    compile_failure: CompileFailure | None = None
    #: The spec.scaling.replicas that Auto mode ignored (``status.ignoredReplicas``): a new value is
    #: said by one ReplicasIgnored Event.
    ignored_replicas: int | None = None
    #: The warm pods and node placeholders last wanted (``status.warmPool``): a restarted operator
    #: holds them until it has a demand history of its own (:func:`~neuronfleet.planning.warmpool.take_over`).
    warm_pods: int | None = None
    warm_placeholders: int | None = None
    #: Since when the predecessor held a pool found (``status.warmPool.heldSince``, Unix time): the
    #: hold is not started again. None: absent (as in a status written before the field), or not a time.
    warm_held_since: float | None = None
    #: The rollout in progress as last recorded (``status.rollout``): its target and start. None:
    #: absent (no rollout, or a status written before the field), or not one.
    rollout: RolloutRecord | None = None
    #: The measured cold starts as last written (``status.coldStart``): the figures of pods since gone,
    #: carried over by a restarted operator. None: absent, or not one.
    cold_start: ColdStartStatus | None = None
    #: The last spec the operator accepted (``status.lastValidSpec``), as written: kept while a later
    #: spec is refused, by an operator that has not parsed it itself (a restart, a new leader; see
    #: :func:`~neuronfleet.planning.last_valid.kept_from_status`). None: absent, or not one.
    last_valid_spec: LastValidSpecStatus | None = None
    #: The sections of the status found but not read (``"status.coldStart: <why>"``), which the
    #: reconcile logs: dropped without a word, carried figures went missing unexplained.
    unread: tuple[str, ...] = ()

    @classmethod
    def from_status(cls, status: Mapping[str, Any]) -> StatusMemory:
        """Tolerant of anything: a field of the wrong shape is simply not remembered."""
        desired = status.get("desiredReplicas")
        placement = status.get("placement")
        instance_type = placement.get("instanceType") if isinstance(placement, Mapping) else None
        unread: list[str] = []
        placement_section = (
            _status_section(status, "placement", PlacementStatus, unread) if isinstance(instance_type, str) else None
        )
        artifact = status.get("artifact")
        stored = None
        if isinstance(artifact, Mapping) and artifact.get("cacheKey") and artifact.get("uri"):
            stored = StoredArtifact(
                cache_key=str(artifact["cacheKey"]),
                uri=str(artifact["uri"]),
                manifest_sha256=str(artifact.get("sha256") or ""),
                backend="neuron" if artifact.get("backend") == "neuron" else "cpu",
            )
        image = artifact.get("compileImage") if stored is not None and isinstance(artifact, Mapping) else None
        fingerprint = (
            artifact.get("sourceFingerprint") if stored is not None and isinstance(artifact, Mapping) else None
        )
        last_time = status.get("lastScaleTime")
        last_scale = (
            LastScale(last_time, str(status.get("lastScaleReason") or "")) if isinstance(last_time, str) else None
        )
        conditions = status.get("conditions")
        ignored = status.get("ignoredReplicas")
        failure = status.get("compileFailure")
        compile_failure = (
            CompileFailure(str(failure["attempt"]), str(failure.get("message") or ""))
            if isinstance(failure, Mapping) and failure.get("attempt")
            else None
        )
        warm_pool = status.get("warmPool")
        warm_pods = warm_pool.get("desiredPods") if isinstance(warm_pool, Mapping) else None
        warm_placeholders = warm_pool.get("desiredPlaceholders") if isinstance(warm_pool, Mapping) else None
        held_since = utc_seconds(warm_pool.get("heldSince")) if isinstance(warm_pool, Mapping) else None
        rollout = status.get("rollout")
        rollout_started = utc_seconds(rollout.get("startedAt")) if isinstance(rollout, Mapping) else None
        rollout_target = rollout.get("target") if isinstance(rollout, Mapping) else None
        rollout_progressed = utc_seconds(rollout.get("progressedAt")) if isinstance(rollout, Mapping) else None
        cold_start = _status_section(status, "coldStart", ColdStartStatus, unread)
        last_valid = _status_section(status, "lastValidSpec", LastValidSpecStatus, unread)
        return cls(
            desired_replicas=desired if isinstance(desired, int) and desired >= 0 else None,
            instance_type=instance_type if isinstance(instance_type, str) else None,
            placement=placement_section,
            artifact=stored,
            artifact_image=image if isinstance(image, str) and image else None,
            artifact_fingerprint=fingerprint if isinstance(fingerprint, str) and fingerprint else None,
            last_scale=last_scale,
            conditions=tuple(c for c in conditions if isinstance(c, Mapping)) if isinstance(conditions, list) else (),
            autoscaler=autoscaler if isinstance(autoscaler := status.get("autoscaler"), Mapping) else None,
            compile_failure=compile_failure,
            ignored_replicas=ignored if isinstance(ignored, int) and ignored >= 0 else None,
            warm_pods=warm_pods if isinstance(warm_pods, int) and warm_pods >= 0 else None,
            warm_placeholders=(
                warm_placeholders if isinstance(warm_placeholders, int) and warm_placeholders >= 0 else None
            ),
            warm_held_since=held_since,
            rollout=(
                RolloutRecord(
                    rollout_target,
                    datetime.fromtimestamp(rollout_started, UTC),
                    datetime.fromtimestamp(rollout_progressed, UTC) if rollout_progressed is not None else None,
                )
                if isinstance(rollout_target, str) and rollout_started is not None
                else None
            ),
            cold_start=cold_start,
            last_valid_spec=last_valid,
            unread=tuple(unread),
        )

    def condition(self, kind: str) -> Mapping[str, Any]:
        """The remembered condition of ``kind`` (empty when there is none)."""
        return find_condition({"status": {"conditions": list(self.conditions)}}, kind)


@dataclass(frozen=True)
class DeploymentMemory:
    """Per-object state kept in the operator's process between reconciles."""

    scaling_state: scaling.ScalingState = field(default_factory=scaling.ScalingState)
    warm_state: warmpool.WarmPoolState = field(default_factory=warmpool.WarmPoolState)
    last_scaling_at: float | None = None
    last_decision: scaling.ScalingDecision | None = None
    #: The ``scaling.mode`` ``last_decision`` was made in: it is re-served in that mode only (see
    #: :func:`scaling_due`).
    last_decision_mode: str | None = None
    #: The ScalingActive message and metrics availability of ``last_decision`` (held between decisions).
    scaling_message: str = ""
    #: When ``scaling_message`` was last rewritten (a decision that changes nothing keeps it a while).
    scaling_message_at: float | None = None
    metrics_available: bool = False
    #: The warm pool's last decision as the status says it, and when its reason was last rewritten (a
    #: reason whose figures alone moved is kept a while, as ``scaling_message``).
    warm_said: warmpool.WarmPoolDecision | None = None
    warm_said_at: float | None = None
    #: Why metrics were not available at ``last_decision`` (its ScalingActive reason).
    metrics_problem_reason: Reason = Reason.METRICS_UNAVAILABLE
    cold_start: warmpool.ColdStart = field(default_factory=warmpool.ColdStart)
    #: Measured cold starts (rolling per instance type, and what a takeover carried over from the
    #: status); ``cold_start`` is its p90s for the warm pool.
    cold_start_state: coldstart.ColdStartState = field(default_factory=coldstart.ColdStartState)
    #: What the last apply met: pod creations refused, API errors. Reported until an apply succeeds.
    refusals: tuple[Refusal, ...] = ()
    apply_errors: tuple[str, ...] = ()
    #: ... and what it waited for without a fault (:attr:`~neuronfleet.planning.status.StatusInputs.waits`).
    apply_waits: tuple[str, ...] = ()
    #: The last status write: (the status before it, the status written).
    written: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None
    #: The object's resourceVersion after that write (what the next write is sent with, when the body
    #: is no newer).
    written_version: str | None = None
    #: The resourceVersions the last writing reconcile saw that its last write superseded: the body's
    #: it planned from, one read again after a conflict, and that of its first write when it wrote
    #: twice. A body at one of them is older than the operator's own last write.
    superseded_versions: frozenset[str] = frozenset()
    #: The uid of the succeeded compile Job whose request record was read again once it was seen done
    #: (the first read may precede its end; after that one read again, the store's memory serves, not
    #: a second read on every reconcile while the Job is kept a day).
    record_reread_job: str | None = None
    #: Whether this process has announced again the Warnings the status showed when it took the object
    #: over (:func:`~neuronfleet.planning.reconcile_plan.found_warnings`). A fresh memory is a takeover
    #: (a start, a restart, a daemon resumed after a peering pause): False until its first reconcile
    #: that gets as far as its status write, so once per takeover, not at every reconcile.
    takeover_announced: bool = False
    #: The last spec the operator parsed and accepted (the object as it was then): while a later
    #: spec is refused (InvalidSpec), its fleet is kept whole from it (:func:`last_valid_spec`).
    #: Not durable itself: a restarted operator (or a new leader) reads the one the status keeps
    #: (:attr:`StatusMemory.last_valid_spec`) instead.
    last_valid: InferenceDeployment | None = None
    #: While a spec is refused, the (status, reason) of the kept fleet's own Degraded (computed as
    #: without the refusal) last announced: Degraded's reason stays InvalidSpec, so its changes alone
    #: would post no Event of the kept fleet's troubles (see
    #: :func:`~neuronfleet.planning.reconcile_plan.kept_fleet_events`).
    kept_degraded: tuple[str, str] | None = None


def last_valid_spec(memory: DeploymentMemory, uid: str | None) -> InferenceDeployment | None:
    """The last valid spec of the object ``uid`` whose current spec is refused: the one the memory
    holds, when it is this object's (not that of a deleted one of the same name); None: unknown."""
    kept = memory.last_valid
    if kept is None or uid is None or kept.metadata.uid != uid:
        return None
    return kept


def seen_status(
    body_status: Mapping[str, Any], memory: DeploymentMemory, body_version: str | None = None
) -> tuple[Mapping[str, Any], str | None]:
    """The object's status as it is, and the resourceVersion to write it from: the one we last wrote
    when the body is older than that write (its resourceVersion one that write superseded, or its
    status the one from before it), else the body's.

    The body comes from a watch, which may not yet have delivered our own writes; reading an older
    status back would repeat the write and its Events ("Scaled 0 -> 2" twice, a Degraded Warning
    again when the body holds the status between a reconcile's two writes).
    """
    if memory.written is not None:
        before, after = memory.written
        if body_version is not None and body_version in memory.superseded_versions:
            return after, memory.written_version
        if body_status == before and body_status != after:
            return after, memory.written_version
    return body_status, body_version


#: How early a reconcile may come for the autoscaler's decision and still make it, at most (and at
#: most a tenth of ``intervalSeconds``). The daemon waits for the decision on the event loop's clock,
#: the reconcile reads the wall clock: one a fraction of a second early was not due, and the decision
#: waited for the next wake-up, up to the operator's whole interval later. Small, so that a pod
#: event shortly before the due time re-serves the last decision, as the simulator, which decides
#: on the interval's grid, does.
DECISION_EARLY_SECONDS = 0.25


def _early(spec: ScalingSpec) -> float:
    return min(DECISION_EARLY_SECONDS, spec.interval_seconds / 10)


def scaling_due(spec: ScalingSpec, memory: DeploymentMemory, now: float) -> bool:
    """Whether the autoscaler decides this round (every ``spec.intervalSeconds``, a reconcile up to
    :data:`DECISION_EARLY_SECONDS` early included).

    A clock that reads before the last decision was stepped back (NTP, a restored VM): due, or the
    autoscaler re-served its last decision, a burst unseen, until the clock caught up with it.
    A ``mode`` other than the last decision's: due, either way. Switched back to Auto within the
    interval, the Manual decision was re-served until it ran out (ScalingActive "manual: replicas
    N" while Prometheus answered, and the warm pool read its demand None as metrics missing).
    """
    last = memory.last_scaling_at
    return (
        last is None
        or now < last
        or now - last >= spec.interval_seconds - _early(spec)
        or memory.last_decision_mode != spec.mode
    )


def next_decision_in(spec: ScalingSpec, memory: DeploymentMemory, now: float) -> float | None:
    """Seconds from ``now`` until the autoscaler's next decision is due (0: due already), for the
    daemon to reconcile then if that comes before its periodic interval; None when no decision is
    waited for: Manual mode decides at every reconcile, and a memory that has made no decision (the
    reconcile stopped before planning) has none to count from.

    Only an Auto decision made in Auto mode counts (another mode's is due at once, see
    :func:`scaling_due`, and the reconcile that follows makes one). Before the daemon waited for it,
    a deployment with ``intervalSeconds`` 15 under the chart's 10 s interval decided every 20 s (at
    the first periodic reconcile at least 15 s after its last decision), one with 5 every 10 s.
    """
    last = memory.last_scaling_at
    if spec.mode != "Auto" or last is None or memory.last_decision_mode != spec.mode:
        return None
    if now < last:  # the clock was stepped back: due at once (scaling_due)
        return 0.0
    return max(0.0, last + spec.interval_seconds - now)


def corrupt_annotations(annotations: Mapping[str, str]) -> tuple[str, ...]:
    """The JSON annotations (:data:`JSON_ANNOTATIONS`) that do not parse."""
    corrupt = []
    for key in JSON_ANNOTATIONS:
        value = annotations.get(key)
        if value is None:
            continue
        try:
            json.loads(value)
        except ValueError:
            corrupt.append(key)
    return tuple(corrupt)


def manifest_refused(pods: Iterable[PodView], stored: StoredArtifact | None) -> bool:
    """Whether a serving pod pinned to ``stored``'s manifest exited because the manifest at its URI
    is another one (``neuronserve serve`` exit code ``MANIFEST_MISMATCH_EXIT_CODE``) and is not
    serving: the artifact was replaced after it was recorded. The store's memory of having verified
    it (up to ``VERIFIED_TTL_SECONDS``) is then out of date: it is read again this reconcile, so the
    record is found dangling and republished at once, not after minutes of crash loop.
    """
    if stored is None or not stored.manifest_sha256:
        return False
    return any(
        pod.artifact_sha256 == stored.manifest_sha256
        and pod.last_exit_code == MANIFEST_MISMATCH_EXIT_CODE
        and not pod.ready
        and not pod.deleting
        for pod in pods
    )
