"""The status of an InferenceDeployment, built whole from one typed input (pure).

:func:`build_status` is the only place a status is made. It owns every section: conditions,
counts, ``ignoredReplicas``, ``selector`` (for the scale subresource), ``artifact``, ``placement``,
``warmPool``, ``coldStart``, ``autoscaler``, ``rollout`` and ``lastScaleTime`` / ``lastScaleReason``. A section the
inputs do not support is absent, never carried over from the previous status: :func:`status_patch`
then turns its absence into an explicit null, so a stale section (a compile failure once the spec
changes) leaves the object. One section is an input read back: while the spec fits no instance
type nothing is changed, and ``placement`` says where the pods of the last valid spec still serve
(:attr:`StatusInputs.kept_placement`, from the durable memory, which keeps the sticky type with it).
``rollout`` is read back too, by the fleet plan (the rollout's start, kept while its target is):
the section is written as the plan's summary returns it (:attr:`~neuronfleet.planning.fleet.FleetSummary.rollout`).

``Ready`` and ``Available`` split as a Deployment's rollout status and ``Available`` do: Available
is the desired active replicas ready, whatever revision they run (capacity); Ready is the current
generation served: Available, by the current spec's revision (artifact and pod template, no compile
or rollout pending), with nothing blocking the spec. Ready's reason says why not: the compile's
reason, NoInstanceTypeFits, RollingOut or ReplicasNotReady.

A spec the operator refuses (InvalidSpec) is no exception to "built whole": the status is that of
the last valid spec's fleet, which the operator keeps reconciling (:attr:`StatusInputs.refused`),
with Ready False and Degraded naming the refused generation (``observedGeneration``: the operator
has read it). An operator that has not parsed the last valid spec since it started reads it back
from ``status.lastValidSpec`` (:mod:`~neuronfleet.planning.last_valid`); when that one cannot be used
either, it cannot build its pods: :func:`invalid_status` then counts the pods found and keeps the rest
of the status.

Three steps, all pure:

1. :func:`compute_conditions` turns :class:`StatusInputs` into one :class:`ConditionValue` per
   :data:`CONDITION_TYPES`, each with a :class:`~neuronfleet.planning.reasons.Reason`;
2. :func:`merge_conditions` folds them into the previous conditions: a condition whose status did
   not flip keeps its ``lastTransitionTime``; conditions of other types are kept as they were;
3. :func:`status_patch` diffs the previous status against the new one, both ways (changed and
   removed keys), into the JSON merge patch to send, or None when nothing changed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

from neuronfleet.api.v1alpha1 import (
    ArtifactStatus,
    AutoscalerStatus,
    ColdStartStatus,
    CompileFailureStatus,
    Condition,
    ConditionType,
    InferenceDeploymentStatus,
    LastValidSpecStatus,
    PlacementStatus,
    RolloutStatus,
    ScaleEventStatus,
    TrendReadingStatus,
    WarmPoolStatus,
)
from neuronfleet.planning import hold
from neuronfleet.planning.compile import CompileDecision
from neuronfleet.planning.fleet import FleetSummary
from neuronfleet.planning.labels import active_selector, selector_string
from neuronfleet.planning.placement import PlacementPlan, problem_fields
from neuronfleet.planning.reasons import Reason, Refusal
from neuronfleet.planning.scaling import Checkpoint, service_rate_figure
from neuronfleet.planning.times import rfc3339 as rfc3339

ConditionStatus = Literal["True", "False", "Unknown"]
#: The order conditions are listed in.
CONDITION_TYPES: tuple[ConditionType, ...] = (
    "Ready",
    "Available",
    "Compiled",
    "Scheduled",
    "ScalingActive",
    "WarmPoolReady",
    "Degraded",
)
#: Compile outcomes a person has to act on, or know of (an artifact gone from the store: new pods
#: cannot load it until it is compiled again). They make the deployment Degraded (a Warning Event).
COMPILE_PROBLEMS = frozenset(
    {
        Reason.COMPILE_FAILED,
        Reason.ARTIFACT_MISSING,
        Reason.ARTIFACT_GONE,
        Reason.SOURCE_UNREADABLE,
        Reason.SERVICE_ACCOUNT_MISSING,
        Reason.CPU_LIMIT_BELOW_REQUEST,
        Reason.LIMIT_RANGE_REFUSED,
        Reason.POD_CREATION_REFUSED,
        Reason.PRIORITY_CLASS_MISSING,
    }
)


@dataclass(frozen=True)
class ConditionValue:
    """A condition's new value, before it is merged into the previous list."""

    type: ConditionType
    status: ConditionStatus
    reason: Reason
    message: str = ""


@dataclass(frozen=True)
class LastScale:
    """When the desired active replicas last changed, and why."""

    time: str
    reason: str


@dataclass(frozen=True)
class RefusedSpec:
    """The object's current spec, which the operator refused (InvalidSpec): the status is then that
    of the fleet kept for the last valid spec, which the conditions say is not the current one."""

    #: The generation refused (status.observedGeneration: the operator has read it, and says why not).
    generation: int | None
    #: Why, as Degraded says it (the fields, or the operator's own ServiceAccount).
    message: str
    #: The generation of the last valid spec, whose fleet is kept (None: unknown).
    kept_generation: int | None = None


@dataclass(frozen=True)
class StatusInputs:
    """Everything the status is built from; nothing else is read."""

    generation: int | None
    fleet: FleetSummary
    placement: PlacementPlan | None
    compile: CompileDecision
    #: The placement last reported (the durable memory's): reported again while ``placement`` has
    #: none chosen (the spec fits no instance type; the pods of the last valid spec stay where they are).
    kept_placement: PlacementStatus | None = None
    scaling_mode: Literal["Auto", "Manual"] = "Manual"
    #: Auto mode: whether the metrics were read this round (False: held, no scale-down).
    metrics_available: bool = True
    #: Auto mode: why scaling holds or changed (shown as the ScalingActive message).
    scaling_message: str = ""
    #: Auto mode: the ScalingActive reason while ``metrics_available`` is False.
    metrics_problem_reason: Reason = Reason.METRICS_UNAVAILABLE
    #: spec.scaling.replicas as set (None: unset); ignored in Auto mode, which the status says.
    spec_replicas: int | None = None
    #: Errors met while applying actions or reading the cluster, e.g. "403 Forbidden: pods ...".
    errors: tuple[str, ...] = ()
    #: Pod creations the API server refused this round (a missing PriorityClass, a quota...).
    refusals: tuple[Refusal, ...] = ()
    #: What the apply waits for without a fault: a Service or PDB of the deployment's name that the
    #: previous InferenceDeployment of that name controls, until the garbage collector removes it.
    #: Said in Ready's message, neither Degraded nor a Warning.
    waits: tuple[str, ...] = ()
    #: Pod creations the plan held because the API server would refuse them (a CPU limit below the
    #: request): said as the refusals are.
    foreseen_refusals: tuple[Refusal, ...] = ()
    #: Annotations of the object that could not be parsed (e.g. Kopf's last-handled-configuration).
    corrupt_annotations: tuple[str, ...] = ()
    #: A rollout running longer than spec.rollout.progressDeadlineSeconds.
    rollout_stalled: bool = False
    #: Problems that stop any placement, e.g. from placement.check_fits.
    spec_problems: tuple[str, ...] = field(default=())
    #: The replicas need contiguous NeuronCores and their pods name no scheduler that allocates
    #: them (placement.scheduler_warning): said in the Scheduled condition, which stays as it is.
    scheduler_warning: str | None = None
    warm_pool: WarmPoolStatus | None = None
    cold_start: ColdStartStatus | None = None
    autoscaler: AutoscalerStatus | None = None
    last_scale: LastScale | None = None
    #: The current spec is refused; the rest of the inputs are of the last valid spec's fleet.
    refused: RefusedSpec | None = None
    #: The spec reconciled (the current one, or the last valid one kept while the current is refused),
    #: written as ``status.lastValidSpec`` for an operator restarted under a refused spec to keep its fleet.
    last_valid: LastValidSpecStatus | None = None


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _held(fleet: FleetSummary, count: int, role: str = "", placeholders: int = 0) -> str:
    """The note "; N new pods [and M placeholders] held: why" for pods the fleet plan holds (empty
    when none is)."""
    if fleet.hold_reason is None:
        return ""
    held = [_plural(count, f"new {role} pod" if role else "new pod")] if count else []
    held += [_plural(placeholders, "placeholder")] if placeholders else []
    return f"; {' and '.join(held)} held: {fleet.hold_reason}" if held else ""


def _compiled(decision: CompileDecision) -> ConditionValue:
    return ConditionValue("Compiled", decision.compiled_status, Reason(decision.reason), decision.message)


def _scheduled(inputs: StatusInputs, placement_problems: list[str]) -> ConditionValue:
    fleet = inputs.fleet
    if placement_problems:
        return ConditionValue("Scheduled", "False", Reason.NO_INSTANCE_TYPE_FITS, "; ".join(placement_problems))
    # The pods are placed either way; a pod of several cores may then get cores apart on the ring.
    caution = f"; warning: {inputs.scheduler_warning}" if inputs.scheduler_warning else ""
    if fleet.unschedulable:
        first = fleet.unschedulable[0]
        return ConditionValue(
            "Scheduled",
            "False",
            Reason.UNSCHEDULABLE,
            f"{_plural(len(fleet.unschedulable), 'pod')} waiting for a node; {first.name}: {first.message}{caution}",
        )
    if not_scheduled := [p for p in fleet.stuck if p.reason == Reason.NOT_SCHEDULED]:
        return ConditionValue(
            "Scheduled",
            "False",
            Reason.NOT_SCHEDULED,
            f"{_plural(len(not_scheduled), 'pod')} not scheduled; {not_scheduled[0].name}: {not_scheduled[0].message}",
        )
    if refusals := inputs.foreseen_refusals + inputs.refusals:
        # Pods that were never created are not scheduled: say why they do not exist.
        refusal = refusals[0]
        return ConditionValue("Scheduled", "False", refusal.reason, refusal.message)
    # Every pod of the fleet, placeholders included: a placeholder not on a node holds no capacity.
    unbound_placeholders = max(0, fleet.placeholders - fleet.placeholders_bound)
    if fleet.unbound or unbound_placeholders:
        which = f" ({_plural(unbound_placeholders, 'placeholder')})" if unbound_placeholders else ""
        return ConditionValue(
            "Scheduled",
            "False",
            Reason.SCHEDULING,
            f"{_plural(fleet.unbound + unbound_placeholders, 'pod')}{which} waiting for the scheduler",
        )
    serving = fleet.active + fleet.warm
    # Serving pods are wanted only once there is an artifact to serve; placeholders at once.
    wanted_serving = fleet.desired_active + fleet.desired_warm
    wanted = (wanted_serving if fleet.revision_known else 0) + fleet.desired_placeholders
    # Before the first artifact: the serving pods come once it is compiled (Compiled says when).
    later = (
        f"{_plural(wanted_serving, 'pod')} wanted once compiled (see Compiled)"
        if not fleet.revision_known and wanted_serving
        else ""
    )
    if serving == 0 and fleet.placeholders == 0:
        if wanted:
            held = _held(fleet, fleet.held - fleet.held_placeholders, placeholders=fleet.held_placeholders)
            return ConditionValue(
                "Scheduled", "False", Reason.PODS_NOT_CREATED, f"0/{_plural(wanted, 'pod')} created yet{held}"
            )
        if later:
            return ConditionValue("Scheduled", "False", Reason.AWAITING_ARTIFACT, later)
        return ConditionValue("Scheduled", "True", Reason.NO_PODS_WANTED, "no pods wanted")
    where = ""
    if inputs.placement is not None and inputs.placement.chosen is not None:
        where = f" on {inputs.placement.chosen.name}"
    message = f"every pod is bound to a node{where}" + (f"; {later}" if later else "") + caution
    return ConditionValue("Scheduled", "True", Reason.ALL_PODS_SCHEDULED, message)


def ignored_replicas_note(replicas: int) -> str:
    """What the ScalingActive message says of a spec.scaling.replicas set in Auto mode."""
    return f"spec.scaling.replicas ({replicas}) is ignored in Auto mode"


def ignored_replicas(inputs: StatusInputs) -> int | None:
    """spec.scaling.replicas when Auto mode ignores it (None: unset, or Manual mode takes it).

    Written as ``status.ignoredReplicas``: the ReplicasIgnored Event compares it with the value read
    back (the durable memory), not with the wording of the ScalingActive message.
    """
    return inputs.spec_replicas if inputs.scaling_mode == "Auto" else None


def _scaling(inputs: StatusInputs) -> ConditionValue:
    fleet = inputs.fleet
    if inputs.scaling_mode == "Manual":
        if inputs.spec_replicas is None:
            # The fallback runs minReplicas, but `kubectl scale` (the scale subresource) reads the
            # unset field as 0: say both, so a --current-replicas precondition failing is explained.
            message = (
                f"spec.scaling.replicas is not set: minReplicas {fleet.desired_active} "
                "(the scale subresource reads 0 until replicas is set)"
            )
        elif inputs.spec_replicas != fleet.desired_active:
            message = (
                f"replicas set by spec.scaling.replicas: {inputs.spec_replicas}, "
                f"bounded to maxReplicas {fleet.desired_active}"
            )
        else:
            message = f"replicas set by spec.scaling.replicas: {fleet.desired_active}"
        return ConditionValue("ScalingActive", "False", Reason.MANUAL_SCALING, message)
    # `kubectl scale` writes spec.scaling.replicas whatever the mode: in Auto mode say it is ignored.
    ignored = ignored_replicas(inputs)
    note = f"; {ignored_replicas_note(ignored)}" if ignored is not None else ""
    if not inputs.metrics_available:
        return ConditionValue(
            "ScalingActive",
            "False",
            inputs.metrics_problem_reason,
            (inputs.scaling_message or "metrics could not be read; holding the replica count") + note,
        )
    return ConditionValue(
        "ScalingActive",
        "True",
        Reason.METRICS_READ,
        (inputs.scaling_message or f"autoscaling: {fleet.desired_active} active replicas wanted") + note,
    )


def _warm_pool(fleet: FleetSummary) -> ConditionValue:
    if fleet.desired_warm == 0 and fleet.desired_placeholders == 0:
        return ConditionValue("WarmPoolReady", "True", Reason.NO_WARM_POOL, "no warm pods or placeholders wanted")
    # A placeholder holds capacity only once it is on a node: an unscheduled one holds nothing,
    # and one the plan deletes (a surplus, a replaced template) holds it no longer.
    # Counted after the plan: a ready warm pod it promotes is no standby.
    if fleet.pool_ready >= fleet.desired_warm and fleet.spare_nodes >= fleet.desired_placeholders:
        return ConditionValue(
            "WarmPoolReady",
            "True",
            Reason.WARM_POOL_FULL,
            f"{_plural(fleet.pool_ready, 'warm pod')} ready, {_plural(fleet.spare_nodes, 'placeholder')} "
            "on nodes" + _kept_outdated(fleet),
        )
    return ConditionValue(
        "WarmPoolReady",
        "False",
        Reason.WARM_POOL_FILLING,
        f"{fleet.pool_ready}/{fleet.desired_warm} warm pods ready, "
        f"{fleet.spare_nodes}/{fleet.desired_placeholders} placeholders on nodes"
        + _held(fleet, fleet.held_warm, "warm", fleet.held_placeholders)
        + _kept_outdated(fleet),
    )


def _kept_outdated(fleet: FleetSummary) -> str:
    """The note "; N outdated warm pods [and M old placeholders] kept while new ones are held", or
    "kept until new ones are loaded" in a rollout that holds nothing (its loaded standby stays
    until new standby is loaded)."""
    kept = [_plural(fleet.kept_outdated_warm, "outdated warm pod")] if fleet.kept_outdated_warm else []
    kept += [_plural(fleet.kept_outdated_placeholders, "old placeholder")] if fleet.kept_outdated_placeholders else []
    until = "while new ones are held" if fleet.hold_reason else "until new ones are loaded"
    return f"; {' and '.join(kept)} kept {until}" if kept else ""


def _degraded(inputs: StatusInputs, placement_problems: list[str]) -> ConditionValue:
    fleet, decision = inputs.fleet, inputs.compile
    troubles: list[tuple[Reason, str]] = []
    if placement_problems:
        troubles.append((Reason.NO_INSTANCE_TYPE_FITS, "; ".join(placement_problems)))
    if decision.reason in COMPILE_PROBLEMS:
        troubles.append((Reason(decision.reason), decision.message))
    for refusal in inputs.foreseen_refusals + inputs.refusals:
        troubles.append((refusal.reason, refusal.message))
    if fleet.stuck:
        first = fleet.stuck[0]
        troubles.append(
            (Reason(first.reason), f"{_plural(len(fleet.stuck), 'pod')} not starting; {first.name}: {first.message}")
        )
    if inputs.rollout_stalled:
        if fleet.outdated_active == 0:
            # Only old standby is left (a rollback, the pool's new pods not loading): the actives
            # are not the ones to look at.
            stalled = (
                "every active pod runs the new revision, but its warm pool has not become ready "
                "within the progress deadline"
            )
        else:
            stalled = "the new revision has not become ready within the progress deadline"
        troubles.append((Reason.ROLLOUT_STALLED, stalled))
    for annotation in inputs.corrupt_annotations:
        troubles.append(
            (
                Reason.CORRUPT_ANNOTATION,
                f"annotation {annotation} is not valid JSON and is ignored; "
                f"remove it with: kubectl annotate infdep <name> {annotation}-",
            )
        )
    if inputs.errors:
        troubles.append((Reason.RECONCILE_ERROR, "; ".join(inputs.errors)))
    if inputs.refused is not None:
        # First: the refused spec is what a person has to fix; the kept fleet's troubles follow. A
        # kept spec that fits no instance type gets no pod made: promising replacements would lie.
        note = UNFIT_FLEET_NOTE if placement_problems else KEPT_FLEET_NOTE
        troubles.insert(0, (Reason.INVALID_SPEC, refused_note(inputs.refused, note)))
    if troubles:
        return ConditionValue("Degraded", "True", troubles[0][0], "; ".join(message for _, message in troubles))
    return ConditionValue("Degraded", "False", Reason.AS_EXPECTED, "")


def _ready_counts(fleet: FleetSummary, revision: str | None = None) -> str:
    """The "ready/desired active replicas ready" message. Counts never read "16/15": surplus ready
    pods (about to drain) are said apart."""
    desired = fleet.desired_active
    ready = min(fleet.ready_active, desired)
    surplus = f", {fleet.ready_active - desired} more being scaled down" if fleet.ready_active > desired else ""
    of = f" of revision {revision}" if revision else ""
    return f"{ready}/{desired} active replicas{of} ready{surplus}"


#: Compile outcomes that leave the current spec's artifact unserved, and what Ready says of each
#: (the Compiled condition, or Degraded, has the detail).
_NOT_COMPILED: dict[Reason, str] = {
    Reason.COMPILING: "compiling this spec's artifact (see Compiled)",
    Reason.SOURCE_UNREADABLE: "cannot compile: spec.model.source is unreadable (see Degraded)",
    Reason.COMPILE_FAILED: "cannot compile: the compile of this spec failed (see Compiled and status.compileFailure)",
    Reason.ARTIFACT_MISSING: "this spec's compile Job succeeded but its artifact is not in the store (see Compiled)",
    Reason.ARTIFACT_GONE: "this spec's artifact is gone from the store and is being compiled again (see Compiled)",
    Reason.SERVICE_ACCOUNT_MISSING: "cannot compile: the compile Job's ServiceAccount does not exist (see Compiled)",
    Reason.CPU_LIMIT_BELOW_REQUEST: "cannot compile: spec.compile.cpuLimit is below spec.compile.cpu (see Compiled)",
    Reason.LIMIT_RANGE_REFUSED: "cannot compile: a LimitRange refuses the compile Job's pod (see Compiled)",
    Reason.POD_CREATION_REFUSED: "cannot compile: the API server refuses the compile Job's pod (see Compiled)",
    Reason.PRIORITY_CLASS_MISSING: "cannot compile: the compile Job's PriorityClass does not exist (see Compiled)",
    Reason.STORE_UNAVAILABLE: "the artifact store could not be read: whether this spec's artifact is the one "
    "served is unknown (see Degraded)",
}


def not_compiled_note(decision: CompileDecision) -> str:
    """What Ready says of a spec whose artifact is not (known to be) the one served."""
    return _NOT_COMPILED.get(Reason(decision.reason), decision.message)


def compile_blocker(inputs: StatusInputs, placement_problems: Sequence[str]) -> tuple[Reason, str] | None:
    """Why the current spec's artifact is not (known to be) the one served; None when it is."""
    if placement_problems:
        return (
            Reason.NO_INSTANCE_TYPE_FITS,
            f"the spec fits no allowed instance type ({problem_fields(placement_problems)}; see Degraded)",
        )
    decision = inputs.compile
    if decision.reason == Reason.ARTIFACT_READY:
        return None
    return Reason(decision.reason), not_compiled_note(decision)


def _available(inputs: StatusInputs, placement_problems: Sequence[str]) -> ConditionValue:
    """The desired active replicas are ready, whatever revision they run (capacity)."""
    fleet = inputs.fleet
    desired = fleet.desired_active
    if desired == 0:
        return ConditionValue("Available", "True", Reason.SCALED_TO_ZERO, "no active replicas wanted")
    if not fleet.revision_known:
        blocker = compile_blocker(inputs, placement_problems)
        # A compile under way is a wait; anything else is why there will be none: say which.
        if blocker is None or blocker[0] == Reason.COMPILING:
            message = "no compiled artifact yet (see Compiled)"
        else:
            message = f"no compiled artifact: {blocker[1]}"
        return ConditionValue("Available", "False", Reason.AWAITING_ARTIFACT, message)
    if fleet.ready_active >= desired:
        return ConditionValue("Available", "True", Reason.REPLICAS_READY, _ready_counts(fleet))
    # Capacity short: when the fleet plan holds the pods that would add it, say why.
    held = _held(fleet, fleet.held_active, "active")
    return ConditionValue("Available", "False", Reason.REPLICAS_NOT_READY, _ready_counts(fleet) + held)


def _ready(inputs: StatusInputs, placement_problems: Sequence[str], available: ConditionValue) -> ConditionValue:
    """The current generation is served: Available, by the fleet of the current spec (its artifact
    and pod template, no compile or rollout pending), and nothing blocks the spec."""
    fleet, serve = inputs.fleet, inputs.compile.serve
    blocker = compile_blocker(inputs, placement_problems)
    if blocker is not None:
        reason, message = blocker
        if reason == Reason.NO_INSTANCE_TYPE_FITS:
            message += ": the pods of the last valid spec, if any, are left as they were"
        elif serve is not None and fleet.revision_known:
            message += f"; revision {serve.revision} keeps serving"
        status: ConditionStatus = "Unknown" if reason == Reason.STORE_UNAVAILABLE else "False"
        return ConditionValue("Ready", status, reason, message)
    desired = fleet.desired_active
    if desired == 0:
        return ConditionValue("Ready", "True", Reason.SCALED_TO_ZERO, "no active replicas wanted")
    # Ready speaks for the actives: old standby kept beside current actives alone is the pool's
    # business (WarmPoolReady says it is kept), not a rollout Ready waits for.
    if fleet.rolling_out_actives:
        return ConditionValue(
            "Ready",
            "False",
            Reason.ROLLING_OUT,
            f"{min(fleet.current_ready_active, desired)}/{desired} active replicas on the new revision, "
            f"{fleet.ready_active} ready in all" + _held(fleet, fleet.held_rollout),
        )
    if available.status != "True":
        return ConditionValue("Ready", "False", available.reason, available.message)
    revision = serve.revision if serve is not None else None
    return ConditionValue("Ready", "True", Reason.REPLICAS_READY, _ready_counts(fleet, revision))


def updated_replicas(inputs: StatusInputs) -> int:
    """Ready active replicas of the current spec's revision (its artifact and pod template)."""
    if inputs.refused is not None:
        return 0  # the current spec is refused: no pod is of it
    if compile_blocker(inputs, placement_problems(inputs)) is not None:
        return 0
    return inputs.fleet.current_ready_active


def placement_problems(inputs: StatusInputs) -> list[str]:
    """What stops any placement of the spec (the spec's own problems first), once each."""
    problems = list(inputs.spec_problems)
    if inputs.placement is not None:
        problems += [p for p in inputs.placement.problems if p not in problems]
    return problems


def kept_degraded(inputs: StatusInputs) -> ConditionValue | None:
    """The kept fleet's own Degraded while the current spec is refused, as without the refusal (None
    when the spec is not refused): what its Events are made from, beside InvalidSpec's."""
    if inputs.refused is None:
        return None
    return _degraded(replace(inputs, refused=None), placement_problems(inputs))


def compute_conditions(inputs: StatusInputs) -> list[ConditionValue]:
    """One value per condition type, in :data:`CONDITION_TYPES` order."""
    problems = placement_problems(inputs)
    available = _available(inputs, problems)
    ready = _ready(inputs, problems, available)
    if inputs.refused is not None:
        # The current generation is not served, whatever the kept fleet does: a check waiting for
        # the observed generation and Ready must not pass on a spec the operator refused.
        message = _refused_ready(inputs.refused, replaced=not problems)
        ready = ConditionValue("Ready", "False", Reason.INVALID_SPEC, message)
    if inputs.waits:
        ready = replace(ready, message="; ".join((ready.message, *inputs.waits)))
    return [
        ready,
        available,
        _compiled(inputs.compile),
        _scheduled(inputs, problems),
        _scaling(inputs),
        _warm_pool(inputs.fleet),
        _degraded(inputs, problems),
    ]


def find_condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    """The condition of type ``kind`` in ``obj["status"]["conditions"]`` (any Kubernetes object, or a
    status given as ``{"status": status}``); empty when absent or malformed."""
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for condition in conditions if isinstance(conditions, list) else ():
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return {}


def autoscaler_status(checkpoint: Checkpoint | None) -> AutoscalerStatus | None:
    """The ``autoscaler`` section for ``checkpoint`` (absent without one).

    Figures are rounded so that the section reads well: whole seconds, and the service rate to 0.1
    request/s or 4 significant digits, whichever is finer (a restarted operator resumes from it:
    rounded to 0.1/s, a slow LLM replica's 0.06/s came back as 0.1 and one of 0.04/s not at all,
    and the fleet then oscillated between a third too few replicas and panic). The section
    changes only when the checkpoint is renewed, so it costs at most one status write per
    :data:`~neuronfleet.planning.scaling.CHECKPOINT_SECONDS`; it is rendered once per checkpoint.
    """
    if checkpoint is None:
        return None
    rendered = checkpoint.derived.get("status")
    if rendered is None:
        rendered = checkpoint.derived["status"] = _render_autoscaler_status(checkpoint) or False
    if not isinstance(rendered, AutoscalerStatus):
        return None
    # A copy the caller owns, its lists too; their items are frozen models, shared (a deep copy
    # cost ~1 ms, twice the rendering).
    return rendered.model_copy(
        update={
            "scale_events": list(rendered.scale_events) if rendered.scale_events is not None else None,
            "trend_readings": list(rendered.trend_readings) if rendered.trend_readings is not None else None,
        }
    )


def _render_autoscaler_status(checkpoint: Checkpoint) -> AutoscalerStatus | None:
    rate = service_rate_figure(checkpoint.service_rate)
    if rate <= 0:
        return None  # a service rate of zero is not one the autoscaler uses (nor the API accepts)
    history = checkpoint.history
    return AutoscalerStatus(
        checkpoint_time=rfc3339(datetime.fromtimestamp(checkpoint.time, UTC)),
        service_rate_per_replica=rate,
        cold_start_seconds=round(checkpoint.cold_start) if checkpoint.cold_start is not None else None,
        scale_down_delay_seconds=checkpoint.hold_seconds,
        history_start_minute=history.first_minute if history.needs else None,
        history_recommendations=history.packed[0] if history.needs else None,
        history_needs=history.packed[1] if history.needs else None,
        service_rate_key=checkpoint.service_rate_key,
        scale_events=[ScaleEventStatus(time=_second_after(t), replicas=c) for t, c in checkpoint.scale_events] or None,
        panic_since=_second_after(checkpoint.panic_since) if checkpoint.panic_since is not None else None,
        panic_last_triggered=(
            _second_after(checkpoint.panic_last_triggered) if checkpoint.panic_last_triggered is not None else None
        ),
        # To the second (truncated, as checkpointTime: never after it) and 0.001 replica: the line
        # through them moves by far less than the readings' noise.
        trend_readings=[
            TrendReadingStatus(time=rfc3339(datetime.fromtimestamp(t, UTC)), replicas=round(v, 3))
            for t, v in checkpoint.rates
        ]
        or None,
    )


def _second_after(time: float) -> str:
    """``time`` as RFC 3339, rounded up to the second: truncated, a scale event stopped counting
    against a rate policy up to a second before the old operator's stopped."""
    return rfc3339(datetime.fromtimestamp(math.ceil(time), UTC))


def checkpoint_from_status(section: object) -> Checkpoint | None:
    """The checkpoint an ``autoscaler`` status section holds; None when it holds none or is not
    one (an edited or truncated section is not resumed from: the autoscaler learns again)."""
    if not isinstance(section, Mapping):
        return None
    try:
        parsed = AutoscalerStatus.model_validate(section)
        if parsed.checkpoint_time is None or not parsed.service_rate_per_replica:
            return None
        time = datetime.fromisoformat(parsed.checkpoint_time).timestamp()
        history = hold.History()
        if parsed.history_start_minute is not None and parsed.history_recommendations and parsed.history_needs:
            recommendations = hold.unpack(parsed.history_recommendations)
            needs = hold.unpack(parsed.history_needs)
            if len(recommendations) != len(needs):
                return None
            history = hold.History(parsed.history_start_minute, recommendations, needs)
        events = tuple(
            (datetime.fromisoformat(event.time).timestamp(), event.replicas) for event in parsed.scale_events or ()
        )
        panic_since, panic_last = (
            datetime.fromisoformat(value).timestamp() if value is not None else None
            for value in (parsed.panic_since, parsed.panic_last_triggered)
        )
        rates = tuple(
            sorted(
                (datetime.fromisoformat(reading.time).timestamp(), reading.replicas)
                for reading in parsed.trend_readings or ()
            )
        )
    except ValueError:  # pydantic's ValidationError is a ValueError
        return None
    if rates and rates[-1][0] > time:
        return None  # a reading after the checkpoint was taken: not one this operator wrote
    return Checkpoint(
        time=time,
        service_rate=parsed.service_rate_per_replica,
        cold_start=parsed.cold_start_seconds,
        hold_seconds=parsed.scale_down_delay_seconds,
        history=history,
        service_rate_key=parsed.service_rate_key,
        scale_events=events,
        panic_since=panic_since,
        panic_last_triggered=panic_last,
        rates=rates,
    )


def merge_conditions(
    previous: Sequence[Condition | Mapping[str, Any]],
    new: Sequence[ConditionValue],
    now: datetime,
    generation: int | None,
    refused: RefusedSpec | None = None,
) -> list[Condition]:
    """The new conditions, keeping ``lastTransitionTime`` where the status did not flip.

    ``previous`` may be API models or wire dicts (as read from the object); malformed entries are
    dropped. Types present only in ``previous`` are kept unchanged; the result lists the known
    types in :data:`CONDITION_TYPES` order, then the others.

    With the current spec ``refused`` (``generation`` is the refused one), only Ready and Degraded
    carry ``generation``: the others speak of the kept fleet, so they carry the last valid spec's
    generation (or, unknown, the one they carried): ``kubectl wait --for=condition=Compiled`` must
    not pass on a spec nothing was compiled for.
    """
    old: dict[str, Condition] = {}
    for item in previous:
        if isinstance(item, Condition):
            old[item.type] = item
            continue
        try:
            condition = Condition.model_validate(item)
        except ValueError:
            continue
        old[condition.type] = condition
    merged: dict[str, Condition] = dict(old)
    for value in new:
        before = old.get(value.type)
        keep_time = before is not None and before.status == value.status and before.last_transition_time
        merged[value.type] = Condition(
            type=value.type,
            status=value.status,
            reason=str(value.reason),
            message=value.message,
            last_transition_time=before.last_transition_time if keep_time and before else rfc3339(now),
            observed_generation=_generation_of(value.type, before, generation, refused),
        )
    order: dict[str, int] = {name: index for index, name in enumerate(CONDITION_TYPES)}
    return sorted(merged.values(), key=lambda c: (order.get(c.type, len(order)), c.type))


#: The conditions that speak for the current generation even when it is refused.
REFUSED_GENERATION_CONDITIONS = frozenset({"Ready", "Degraded"})


def _generation_of(
    kind: str, before: Condition | None, generation: int | None, refused: RefusedSpec | None
) -> int | None:
    if refused is None or kind in REFUSED_GENERATION_CONDITIONS:
        return generation
    if refused.kept_generation is not None:
        return refused.kept_generation
    return before.observed_generation if before is not None else None


#: What a kept placement's reason starts with: it is the last valid spec's, not the current one's.
KEPT_PLACEMENT_NOTE = (
    "kept: the pods of the last valid spec run here (the current spec fits no allowed instance type; "
    "see Scheduled); chosen then: "
)


def _placement(plan: PlacementPlan | None, kept: PlacementStatus | None) -> PlacementStatus | None:
    if plan is None or plan.chosen is None:
        # The pods of the last valid spec still run there; and a spec fixed later should find them
        # there too (the sticky type is read back from this section) rather than move them. Said so
        # in the reason, once (the section is read back every round: no rewrite for nothing).
        if kept is None or (kept.reason or "").startswith(KEPT_PLACEMENT_NOTE):
            return kept
        return kept.model_copy(update={"reason": KEPT_PLACEMENT_NOTE + (kept.reason or "")})
    return PlacementStatus(
        instance_type=plan.chosen.name,
        replicas_per_node=plan.chosen.replicas_per_node,
        nodes=plan.chosen.nodes,
        usd_per_hour=round(plan.chosen.usd_per_hour, 5),
        reason=plan.reason,
    )


def _artifact(decision: CompileDecision) -> ArtifactStatus | None:
    serve = decision.serve
    if serve is None:
        return None
    return ArtifactStatus(
        uri=serve.uri,
        sha256=serve.manifest_sha256,
        revision=serve.revision,
        cache_key=serve.cache_key,
        backend=serve.backend,
        compile_image=decision.serve_image,
        source_fingerprint=decision.serve_fingerprint,
    )


def build_status(
    deployment: str,
    inputs: StatusInputs,
    previous_conditions: Sequence[Condition | Mapping[str, Any]],
    now: datetime,
) -> dict[str, Any]:
    """The whole ``status`` (wire form): what the inputs support, and nothing else."""
    fleet = inputs.fleet
    conditions = merge_conditions(
        previous_conditions, compute_conditions(inputs), now, inputs.generation, inputs.refused
    )
    status = InferenceDeploymentStatus(
        observed_generation=inputs.generation,
        conditions=conditions,
        replicas=fleet.active,
        ready_replicas=fleet.ready_active,
        updated_replicas=updated_replicas(inputs),
        warm_replicas=fleet.warm_ready,
        draining_replicas=fleet.draining,
        desired_replicas=fleet.desired_active,
        ignored_replicas=ignored_replicas(inputs),
        placeholders=fleet.placeholders,
        selector=selector_string(active_selector(deployment)),
        artifact=_artifact(inputs.compile),
        compile_failure=(
            CompileFailureStatus(attempt=failure.attempt, message=failure.message[:2000])
            if (failure := inputs.compile.failure) is not None
            else None
        ),
        placement=_placement(inputs.placement, inputs.kept_placement),
        warm_pool=inputs.warm_pool,
        cold_start=inputs.cold_start,
        autoscaler=inputs.autoscaler,
        # Written as the plan returns it: the same record (a stable time) on every reconcile of one
        # rollout, so a rollout that does not progress writes nothing.
        rollout=(
            RolloutStatus(
                target=fleet.rollout.target,
                started_at=rfc3339(fleet.rollout.started_at),
                progressed_at=rfc3339(fleet.rollout.progressed_at) if fleet.rollout.progressed_at else None,
            )
            if fleet.rollout is not None
            else None
        ),
        last_valid_spec=inputs.last_valid,
        last_scale_time=inputs.last_scale.time if inputs.last_scale else None,
        last_scale_reason=inputs.last_scale.reason if inputs.last_scale else None,
    )
    return status.to_wire()


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON merge patch (RFC 7386) from ``old`` to ``new``; None when they are equal.

    Compared both ways: a key of ``old`` that ``new`` lacks becomes an explicit null, so the
    server removes it; nested objects are diffed key by key; lists are replaced whole.
    """
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            nested = status_patch(before, value)
            if nested is not None:
                patch[key] = nested
        elif before != value or key not in old:
            patch[key] = value
    return patch or None


def with_foreign_conditions(ours: Mapping[str, Any], live: Mapping[str, Any]) -> dict[str, Any]:
    """The status to write: ``ours`` (built from the body the reconcile planned from), with the
    conditions of types the operator does not set (not in :data:`CONDITION_TYPES`: another
    controller's) as ``live`` has them, listed as :func:`merge_conditions` lists them.

    ``status.conditions`` is a map keyed by type that a merge patch replaces whole: those of an
    older body would undo another controller's change made since.
    """
    own = [c for c in ours.get("conditions") or [] if isinstance(c, Mapping) and c.get("type") in CONDITION_TYPES]
    foreign = [
        c for c in live.get("conditions") or [] if not (isinstance(c, Mapping) and c.get("type") in CONDITION_TYPES)
    ]
    if "conditions" not in ours and not foreign:
        return dict(ours)
    order: dict[str, int] = {name: index for index, name in enumerate(CONDITION_TYPES)}

    def key(condition: Any) -> tuple[int, str]:
        kind = str(condition.get("type")) if isinstance(condition, Mapping) else ""
        return order.get(kind, len(order)), kind

    return {**ours, "conditions": sorted(own + foreign, key=key)}


#: What Degraded adds to InvalidSpec while the operator keeps the last valid spec's fleet.
KEPT_FLEET_NOTE = (
    "the fleet of {kept} is kept as a Deployment keeps its old ReplicaSet: its lost pods are "
    "replaced and it is scaled as that spec says, until the spec is fixed"
)
#: ... and while that spec fits no allowed instance type: its plan places no pod.
UNFIT_FLEET_NOTE = (
    "the pods of {kept} are kept as they are, but none is made for it: that spec fits no allowed "
    "instance type (see Scheduled), so a lost pod stays lost until the spec is fixed"
)
#: ... and while it cannot: it has not parsed that spec since it started (a restart, a new leader), and
#: the one the status keeps cannot be used ({why}: :func:`~neuronfleet.planning.last_valid.kept_from_status`).
UNKNOWN_FLEET_NOTE = (
    "the pods of {kept} are kept, but a lost one is not replaced: the operator builds pods "
    "from a spec it parsed, has not parsed that one since it started (a restart or a new leader), "
    "and cannot use the one the status keeps ({why}); fix the spec"
)


#: ... and of a spec never valid (no pods, no status of a valid spec): nothing was made, nothing is.
NOTHING_NOTE = "nothing is made for it until it is fixed"


def _kept(refused: RefusedSpec) -> str:
    if refused.kept_generation is None:
        return "the last valid spec"
    return f"generation {refused.kept_generation}, the last valid spec,"


def refused_note(refused: RefusedSpec, note: str, **fields: str) -> str:
    """Degraded's InvalidSpec message: which generation is refused and why, then what is kept
    (``note`` with ``{kept}`` and the other ``fields`` filled in)."""
    which = f"generation {refused.generation} refused" if refused.generation is not None else "refused"
    return f"{which}: {refused.message}; {note.format(kept=_kept(refused), **fields)}"


def _refused_ready(refused: RefusedSpec, replaced: bool = True) -> str:
    kept = _kept(refused)
    if replaced:
        return f"the spec is invalid (see Degraded); the fleet of {kept} is kept (see Available)"
    return (
        f"the spec is invalid (see Degraded); the pods of {kept} are kept, "
        "and a lost one is not replaced (see Available)"
    )


def invalid_status(
    previous: Mapping[str, Any],
    message: str,
    generation: int | None,
    now: datetime,
    fleet: FleetSummary | None = None,
    unusable: str = "none is kept",
) -> dict[str, Any]:
    """The status of an object whose spec the operator refused, when it cannot build the last valid
    spec's pods (it has not parsed one since it started, and the status's ``lastValidSpec`` cannot be
    used: ``unusable`` says why): Degraded InvalidSpec, and not Ready for that generation (a check that
    waits for the observed generation and Ready must not pass on a spec the operator refused).

    ``fleet``: the pods as observed, counted as the last valid spec's (the desired counts are those
    read back from the status): the counts and Available say what runs, and a pod lost meanwhile
    shows as capacity lost, which is not replaced (nothing can be built without a spec). The rest of
    the previous status (artifact, placement, autoscaler) is the last valid spec's and stays as it was;
    without ``fleet`` (the pods could not be read) the counts stay too.
    """
    refused = RefusedSpec(generation, message)
    # A status of a valid spec has its desired count; pods found say there was one too.
    seen = fleet is not None and fleet.active + fleet.warm + fleet.draining + fleet.placeholders > 0
    if "desiredReplicas" in previous or seen:
        values = [
            ConditionValue(
                "Degraded", "True", Reason.INVALID_SPEC, refused_note(refused, UNKNOWN_FLEET_NOTE, why=unusable)
            ),
            ConditionValue("Ready", "False", Reason.INVALID_SPEC, _refused_ready(refused, replaced=False)),
        ]
    else:
        values = [
            ConditionValue("Degraded", "True", Reason.INVALID_SPEC, refused_note(refused, NOTHING_NOTE)),
            ConditionValue(
                "Ready", "False", Reason.INVALID_SPEC, f"the spec is invalid (see Degraded); {NOTHING_NOTE}"
            ),
        ]
    counts: dict[str, Any] = {}
    if fleet is not None:
        available = _available(StatusInputs(generation, fleet, None, _NO_COMPILE), [])
        if available.status != "True" and available.reason == Reason.REPLICAS_NOT_READY:
            available = replace(
                available,
                message=f"{available.message}; lost pods are not replaced while the spec is refused (see Degraded)",
            )
        values.append(available)
        counts = {
            "replicas": fleet.active,
            "readyReplicas": fleet.ready_active,
            "updatedReplicas": 0,
            "warmReplicas": fleet.warm_ready,
            "drainingReplicas": fleet.draining,
            "placeholders": fleet.placeholders,
        }
    conditions = merge_conditions(previous.get("conditions") or [], values, now, generation, refused)
    status = {**previous, **counts, "conditions": [c.to_wire() for c in conditions]}
    if generation is not None:
        status["observedGeneration"] = generation
    return status


#: A compile decision that blocks nothing: :func:`invalid_status` computes Available from the pods alone.
_NO_COMPILE = CompileDecision(False, None, "True", Reason.ARTIFACT_READY, "")
