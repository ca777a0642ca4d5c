"""Status of an InferenceDeployment: conditions, counts and selector (pure).

Two steps, both pure:

1. :func:`compute_conditions` turns what the reconcile knows (:class:`StatusInputs`: the fleet
   summary from :func:`neuronfleet.planning.fleet.plan_fleet`, the placement plan, the compile
   state, the scaling mode, errors met while applying) into one :class:`ConditionValue` per type:
   Ready, Compiled, Scheduled, ScalingActive, WarmPoolReady, Degraded.
2. :func:`merge_conditions` folds them into the previous ``status.conditions``: a condition whose
   status did not flip keeps its ``lastTransitionTime``; reason, message and
   ``observedGeneration`` are refreshed. Conditions of other types are kept as they were.

:func:`build_status` does both and adds counts, ``selector`` (for the scale subresource) and the
placement, returning the ``status`` dict to patch (camelCase wire form).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from neuronfleet.api.v1alpha1 import Condition, ConditionType
from neuronfleet.planning.fleet import FleetSummary
from neuronfleet.planning.labels import active_selector, selector_string
from neuronfleet.planning.placement import PlacementPlan

ConditionStatus = Literal["True", "False", "Unknown"]
#: The order conditions are listed in.
CONDITION_TYPES: tuple[ConditionType, ...] = (
    "Ready",
    "Compiled",
    "Scheduled",
    "ScalingActive",
    "WarmPoolReady",
    "Degraded",
)


@dataclass(frozen=True)
class ConditionValue:
    """A condition's new value, before it is merged into the previous list."""

    type: ConditionType
    status: ConditionStatus
    reason: str
    message: str = ""


@dataclass(frozen=True)
class CompileState:
    """Where compilation stands. ``failed`` carries the compile Job's error when it failed."""

    revision: str | None = None
    uri: str | None = None
    in_progress: bool = False
    failed: str | None = None


@dataclass(frozen=True)
class StatusInputs:
    """Everything the conditions are computed from."""

    generation: int | None
    fleet: FleetSummary
    placement: PlacementPlan | None
    compile: CompileState
    scaling_mode: Literal["Auto", "Manual"] = "Manual"
    #: Auto mode: whether the metrics were read this round (False: held, no scale-down).
    metrics_available: bool = True
    #: Auto mode: why scaling holds or changed (shown as the ScalingActive message).
    scaling_message: str = ""
    #: Errors met while applying actions or reading the cluster, e.g. "Forbidden: pods ...".
    errors: tuple[str, ...] = ()
    #: A rollout running longer than spec.rollout.progressDeadlineSeconds.
    rollout_stalled: bool = False
    #: Problems that stop any placement, e.g. from placement.check_fits or a missing scheduler.
    spec_problems: tuple[str, ...] = field(default=())


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def compute_conditions(inputs: StatusInputs) -> list[ConditionValue]:
    """One value per condition type, each with a CamelCase reason and a readable message."""
    fleet = inputs.fleet
    conditions: list[ConditionValue] = []
    placement_problems = list(inputs.spec_problems)
    if inputs.placement is not None:
        placement_problems += [p for p in inputs.placement.problems if p not in placement_problems]

    # Compiled.
    comp = inputs.compile
    if comp.failed:
        compiled = ConditionValue("Compiled", "False", "CompileFailed", comp.failed)
    elif comp.revision:
        compiled = ConditionValue("Compiled", "True", "ArtifactReady", f"revision {comp.revision} at {comp.uri}")
    elif comp.in_progress:
        compiled = ConditionValue("Compiled", "False", "Compiling", "the model is being compiled for Neuron")
    else:
        compiled = ConditionValue("Compiled", "Unknown", "Pending", "compilation has not started")
    conditions.append(compiled)

    # Scheduled.
    if placement_problems:
        scheduled = ConditionValue("Scheduled", "False", "NoInstanceTypeFits", "; ".join(placement_problems))
    elif fleet.unschedulable:
        first = fleet.unschedulable[0]
        scheduled = ConditionValue(
            "Scheduled",
            "False",
            "Unschedulable",
            f"{_plural(len(fleet.unschedulable), 'pod')} waiting for a node; {first.name}: {first.message}",
        )
    elif not_scheduled := [p for p in fleet.stuck if p.reason == "NotScheduled"]:
        scheduled = ConditionValue(
            "Scheduled",
            "False",
            "NotScheduled",
            f"{_plural(len(not_scheduled), 'pod')} not scheduled; {not_scheduled[0].name}: {not_scheduled[0].message}",
        )
    elif fleet.unbound:
        scheduled = ConditionValue(
            "Scheduled", "False", "Scheduling", f"{_plural(fleet.unbound, 'pod')} waiting for the scheduler"
        )
    else:
        where = ""
        if inputs.placement is not None and inputs.placement.chosen is not None:
            where = f" on {inputs.placement.chosen.name}"
        scheduled = ConditionValue("Scheduled", "True", "AllPodsScheduled", f"every pod is bound to a node{where}")
    conditions.append(scheduled)

    # ScalingActive.
    if inputs.scaling_mode == "Manual":
        scaling = ConditionValue(
            "ScalingActive", "False", "ManualScaling", f"replicas set by spec.scaling.replicas: {fleet.desired_active}"
        )
    elif not inputs.metrics_available:
        scaling = ConditionValue(
            "ScalingActive",
            "False",
            "MetricsUnavailable",
            inputs.scaling_message or "metrics could not be read; holding the replica count",
        )
    else:
        scaling = ConditionValue(
            "ScalingActive",
            "True",
            "MetricsRead",
            inputs.scaling_message or f"autoscaling: {fleet.desired_active} active replicas wanted",
        )
    conditions.append(scaling)

    # WarmPoolReady.
    if fleet.desired_warm == 0 and fleet.desired_placeholders == 0:
        warm = ConditionValue("WarmPoolReady", "True", "NoWarmPool", "no warm pods or placeholders wanted")
    elif fleet.warm_ready >= fleet.desired_warm and fleet.placeholders >= fleet.desired_placeholders:
        warm = ConditionValue(
            "WarmPoolReady",
            "True",
            "WarmPoolFull",
            f"{_plural(fleet.warm_ready, 'warm pod')} ready, {_plural(fleet.placeholders, 'placeholder')}",
        )
    else:
        warm = ConditionValue(
            "WarmPoolReady",
            "False",
            "WarmPoolFilling",
            f"{fleet.warm_ready}/{fleet.desired_warm} warm pods ready, "
            f"{fleet.placeholders}/{fleet.desired_placeholders} placeholders",
        )
    conditions.append(warm)

    # Degraded: anything a person should look at.
    troubles: list[tuple[str, str]] = []
    if placement_problems:
        troubles.append(("NoInstanceTypeFits", "; ".join(placement_problems)))
    if comp.failed:
        troubles.append(("CompileFailed", comp.failed))
    if fleet.stuck:
        first = fleet.stuck[0]
        troubles.append(
            (first.reason, f"{_plural(len(fleet.stuck), 'pod')} not starting; {first.name}: {first.message}")
        )
    if inputs.rollout_stalled:
        troubles.append(("RolloutStalled", "the new revision has not become ready within the progress deadline"))
    if inputs.errors:
        troubles.append(("ReconcileError", "; ".join(inputs.errors)))
    if troubles:
        degraded = ConditionValue("Degraded", "True", troubles[0][0], "; ".join(message for _, message in troubles))
    else:
        degraded = ConditionValue("Degraded", "False", "AsExpected", "")

    # Ready: the desired active replicas of the current revision serve.
    if fleet.desired_active == 0:
        ready = ConditionValue("Ready", "True", "ScaledToZero", "no active replicas wanted")
    elif not fleet.revision_known:
        ready = ConditionValue("Ready", "False", "AwaitingArtifact", "no compiled artifact yet")
    elif fleet.ready_active >= fleet.desired_active and not fleet.rolling_out:
        ready = ConditionValue(
            "Ready", "True", "ReplicasReady", f"{fleet.ready_active}/{fleet.desired_active} active replicas ready"
        )
    elif fleet.rolling_out:
        ready = ConditionValue(
            "Ready",
            "True" if fleet.ready_active >= fleet.desired_active else "False",
            "RollingOut",
            f"{fleet.current_ready_active}/{fleet.desired_active} active replicas on the new revision, "
            f"{fleet.ready_active} ready in all",
        )
    else:
        ready = ConditionValue(
            "Ready",
            "False",
            "ReplicasNotReady",
            f"{fleet.ready_active}/{fleet.desired_active} active replicas ready",
        )
    conditions.insert(0, ready)
    conditions.append(degraded)
    return conditions


def rfc3339(moment: datetime) -> str:
    """A UTC timestamp as Kubernetes writes it (seconds, ``Z``)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_conditions(
    previous: Sequence[Condition | dict[str, Any]],
    new: Sequence[ConditionValue],
    now: datetime,
    generation: int | None,
) -> list[Condition]:
    """The new conditions, keeping ``lastTransitionTime`` where the status did not flip.

    ``previous`` may be API models or wire dicts (as read from the object). Types present only in
    ``previous`` are kept unchanged; the result lists the known types in :data:`CONDITION_TYPES`
    order, then the others.
    """
    old: dict[str, Condition] = {}
    for item in previous:
        condition = item if isinstance(item, Condition) else Condition.model_validate(item)
        old[condition.type] = condition
    merged: dict[str, Condition] = dict(old)
    for value in new:
        before = old.get(value.type)
        keep_time = before is not None and before.status == value.status and before.last_transition_time
        merged[value.type] = Condition(
            type=value.type,
            status=value.status,
            reason=value.reason,
            message=value.message,
            last_transition_time=before.last_transition_time if keep_time and before else rfc3339(now),
            observed_generation=generation,
        )
    order: dict[str, int] = {name: index for index, name in enumerate(CONDITION_TYPES)}
    return sorted(merged.values(), key=lambda c: (order.get(c.type, len(order)), c.type))


def build_status(
    deployment: str,
    inputs: StatusInputs,
    previous_conditions: Sequence[Condition | dict[str, Any]],
    now: datetime,
) -> dict[str, Any]:
    """The ``status`` to patch: observedGeneration, conditions, counts, selector, placement, artifact."""
    fleet = inputs.fleet
    conditions = merge_conditions(previous_conditions, compute_conditions(inputs), now, inputs.generation)
    status: dict[str, Any] = {
        "observedGeneration": inputs.generation,
        "conditions": [c.to_wire() for c in conditions],
        "replicas": fleet.active,
        "readyReplicas": fleet.ready_active,
        "warmReplicas": fleet.warm_ready,
        "drainingReplicas": fleet.draining,
        "desiredReplicas": fleet.desired_active,
        "placeholders": fleet.placeholders,
        "selector": selector_string(active_selector(deployment)),
    }
    if inputs.generation is None:
        del status["observedGeneration"]
    plan = inputs.placement
    if plan is not None and plan.chosen is not None:
        status["placement"] = {
            "instanceType": plan.chosen.name,
            "replicasPerNode": plan.chosen.replicas_per_node,
            "nodes": plan.chosen.nodes,
            "usdPerHour": round(plan.chosen.usd_per_hour, 5),
            "reason": plan.reason,
        }
    if inputs.compile.revision:
        status["artifact"] = {"revision": inputs.compile.revision, "uri": inputs.compile.uri}
    return status
