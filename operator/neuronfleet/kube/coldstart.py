"""Pod and node objects -> :class:`~neuronfleet.planning.coldstart.PodTimeline` (the timestamps only).

Reads what the API server and kubelet write: ``metadata.creationTimestamp``, the PodScheduled and
Ready conditions' ``lastTransitionTime``, and the containers' ``state.running.startedAt`` (the
latest over the pod's containers: the pod runs once all of them do); for the node,
its ``creationTimestamp`` and its Ready condition's ``lastTransitionTime`` (when the node last turned
Ready: after a later NotReady flap, the flap's end, hours after the pod's start, and no time while it
is NotReady; :func:`~neuronfleet.planning.coldstart.measure` takes a Ready time after the pod's
binding as such a flap). The instance type is the node's ``node.kubernetes.io/instance-type``
label, else the pod's nodeSelector on it. A container (or init container) waiting for a reason that
means its start failed (:data:`~neuronfleet.planning.reasons.STUCK_WAITING_REASONS`: an image pull
that failed, a container that could not be created) marks the timeline ``start_failed``: the pull
retried in back-off is not a restart, and once the container runs nothing on the pod says it
failed. The startup budget (how long after its start a container may take to be Ready) is, over the
pod's containers with a readiness or startup probe, the longest of the startup probe's
``initialDelaySeconds + failureThreshold x periodSeconds`` (the kubelet kills the container after
that), or the readiness probe's own ``initialDelaySeconds`` if later, plus ``successThreshold``
readiness periods (the probes that can make it Ready once the startup probe has passed); zero or
left-out periods and thresholds take Kubernetes' defaults, as the API server stores them; unknown
(None) when such a container has no startup probe, since nothing then bounds its start. Native
sidecars (init containers with ``restartPolicy: Always``, as a service mesh injects) have started
before the main containers start (the kubelet starts the next container once a sidecar's startup
probe passed), so their start is in the ``start`` phase, not in the budget; but the pod is Ready only
once their readiness probes pass too, which run on beside the main containers: a sidecar's
readiness ``initialDelaySeconds`` (from its own, earlier start) plus ``successThreshold`` periods
counts, and a sidecar with a readiness probe but no startup probe makes the budget unknown. Plain
init containers run to completion before the main containers start: not in the budget. Only serving
pods (role warm, active or draining) are measured: placeholders run no model and the compile Job's
pods (deployment label, no role) are no replicas. Malformed or missing fields give None, never an
exception: the pod is then simply not measured.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from neuronfleet.planning.coldstart import PodTimeline
from neuronfleet.planning.labels import LABEL_ROLE, SERVING_ROLES
from neuronfleet.planning.reasons import STUCK_WAITING_REASONS
from neuronfleet.planning.status import find_condition

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

Obj = Mapping[str, Any]


def parse_time(value: Any) -> float | None:
    """An RFC 3339 timestamp (metav1.Time or MicroTime) as Unix seconds; None if absent or malformed."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _condition_time(obj: Obj, kind: str) -> float | None:
    """When the ``kind`` condition last turned True (None unless it is True now)."""
    condition = find_condition(obj, kind)
    return parse_time(condition.get("lastTransitionTime")) if condition.get("status") == "True" else None


def _containers_started(pod: Obj) -> tuple[float | None, int]:
    statuses = [s for s in (pod.get("status") or {}).get("containerStatuses") or [] if isinstance(s, Mapping)]
    restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
    started = [parse_time(((s.get("state") or {}).get("running") or {}).get("startedAt")) for s in statuses]
    if not started or any(t is None for t in started):
        return None, restarts
    return max(t for t in started if t is not None), restarts


def _start_failed(pod: Obj) -> bool:
    """Whether a container of the pod waits for a reason that means its start failed."""
    status = pod.get("status") or {}
    statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    return any(
        ((s.get("state") or {}).get("waiting") or {}).get("reason") in STUCK_WAITING_REASONS
        for s in statuses
        if isinstance(s, Mapping)
    )


def _seconds(probe: Obj, key: str, default: int) -> float | None:
    """A probe field, ``default`` where it is left out or 0 (the API server defaults a zero
    periodSeconds, failureThreshold or successThreshold so; a delay's default is 0 anyway); None
    when it is not a number the API server would take."""
    value = probe.get(key) or default
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else None


def startup_budget(pod: Obj) -> float | None:
    """Longest container start -> Ready the pod's probes allow on a first start (see the module
    docstring); None when not known. Kubernetes' defaults apply to fields left out.

    The startup probe's ``initialDelaySeconds + failureThreshold x periodSeconds``, or the
    readiness probe's own ``initialDelaySeconds`` (also counted from the container's start) if
    later, then ``successThreshold`` readiness periods for the probes that make it Ready; for a
    native sidecar, its readiness probe's delay and passes alone (it started before the main
    containers, which the pod's start is counted from).
    """
    budgets: list[float] = []
    spec = pod.get("spec") or {}
    for container in spec.get("containers") or []:
        if not isinstance(container, Mapping):
            continue
        startup, readiness = container.get("startupProbe"), container.get("readinessProbe")
        if not isinstance(startup, Mapping):
            if readiness is None:
                continue  # Ready as soon as it runs
            return None
        fields = [
            _seconds(startup, "initialDelaySeconds", 0),
            _seconds(startup, "failureThreshold", 3),
            _seconds(startup, "periodSeconds", 10),
        ]
        if isinstance(readiness, Mapping):
            fields += [
                _seconds(readiness, "initialDelaySeconds", 0),
                _seconds(readiness, "periodSeconds", 10),
                _seconds(readiness, "successThreshold", 1),
            ]
        else:
            fields += [0.0, 0.0, 0.0]
        known = [value for value in fields if value is not None]
        if len(known) < len(fields):
            return None
        delay, failures, period, ready_delay, ready_period, successes = known
        budgets.append(max(delay + failures * period, ready_delay) + successes * ready_period)
    for container in spec.get("initContainers") or []:
        # A plain init container has finished, and a sidecar has started, before the main
        # containers start; only a sidecar's readiness can still hold the pod's Ready after that.
        if not isinstance(container, Mapping) or container.get("restartPolicy") != "Always":
            continue
        readiness = container.get("readinessProbe")
        if readiness is None:
            continue  # Ready once started
        if not isinstance(readiness, Mapping) or not isinstance(container.get("startupProbe"), Mapping):
            return None  # its readiness may pass at any time: nothing bounds it
        fields = [
            _seconds(readiness, "initialDelaySeconds", 0),
            _seconds(readiness, "periodSeconds", 10),
            _seconds(readiness, "successThreshold", 1),
        ]
        known = [value for value in fields if value is not None]
        if len(known) < len(fields):
            return None
        ready_delay, ready_period, successes = known
        budgets.append(ready_delay + successes * ready_period)
    return max(budgets, default=None)


def pod_timeline(pod: Obj, nodes: Mapping[str, Obj]) -> PodTimeline | None:
    """The pod's start-up timestamps, with its node's (``nodes``: name -> node object); None for placeholders."""
    metadata = pod.get("metadata") or {}
    role = (metadata.get("labels") or {}).get(LABEL_ROLE)
    if role not in SERVING_ROLES:
        # Placeholders run no model; pods without a role (the compile Job's) are no replicas.
        return None
    uid = metadata.get("uid") or metadata.get("name")
    if not uid:
        return None
    spec = pod.get("spec") or {}
    node = nodes.get(spec.get("nodeName") or "") or {}
    node_meta = node.get("metadata") or {}
    instance_type = (node_meta.get("labels") or {}).get(INSTANCE_TYPE_LABEL) or (spec.get("nodeSelector") or {}).get(
        INSTANCE_TYPE_LABEL
    )
    started, restarts = _containers_started(pod)
    return PodTimeline(
        uid=str(uid),
        instance_type=instance_type,
        created=parse_time(metadata.get("creationTimestamp")),
        scheduled=_condition_time(pod, "PodScheduled"),
        started=started,
        ready=_condition_time(pod, "Ready"),
        node_created=parse_time(node_meta.get("creationTimestamp")) if node else None,
        node_ready=_condition_time(node, "Ready") if node else None,
        restarts=restarts,
        start_failed=_start_failed(pod),
        startup_budget=startup_budget(pod),
        name=metadata.get("name") if isinstance(metadata.get("name"), str) else None,
    )


def pod_timelines(pods: Iterable[Obj], nodes: Iterable[Obj]) -> list[PodTimeline]:
    """Timelines of the serving pods among ``pods`` (nodes as listed from the API)."""
    by_name = {(n.get("metadata") or {}).get("name") or "": n for n in nodes}
    return [t for pod in pods if (t := pod_timeline(pod, by_name)) is not None]


__all__ = ["INSTANCE_TYPE_LABEL", "parse_time", "pod_timeline", "pod_timelines", "startup_budget"]
