"""What the demo measures while it runs: the fleet read from the cluster, samples, integrals, Events.

:func:`read_fleet` reads the deployment's pods and the cluster's nodes from the sandbox store;
:class:`Recorder` keeps the timeline, the pod- and node-seconds and the operator's ``Scaled``
Events; :func:`scale_direction` reads an Event's message. The load side of each sample comes from
a :class:`LoadView` (the simulated replay, or the live client's own measurements).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from neuronfleet.api.v1alpha1 import GROUP, PLURAL
from neuronfleet.demo.report import ScaleEvent
from neuronfleet.sandbox import SandboxCluster
from neuronfleet.sandbox.nodes import pod_is_ready
from neuronfleet.sandbox.store import WatchEvent

TIMELINE_KEYS = ("t", "demand", "queue", "desired", "active", "ready", "warm", "placeholders", "nodes", "util")


class LoadView(Protocol):
    """The load's side of a sample: the demo's replay or its live client."""

    def demand(self, t: float) -> float:
        """Requests per second arriving at replay second ``t``."""
        ...

    def queue_depth(self) -> float: ...

    def utilization(self) -> float: ...


@dataclass
class FleetView:
    """The deployment's pods and the cluster's nodes at one instant (read from the sandbox store)."""

    active: int = 0
    ready: int = 0
    warm: int = 0
    warm_ready: int = 0
    draining: int = 0
    placeholders: int = 0
    nodes_by_type: dict[str, int] = field(default_factory=dict)
    #: node name -> (instance type, zone, roles of the deployment's pods on it, ready flags)
    nodes: dict[str, tuple[str, str, list[tuple[str, bool]]]] = field(default_factory=dict)
    desired: int = 0
    status: dict[str, Any] = field(default_factory=dict)


def read_fleet(cluster: SandboxCluster, namespace: str, name: str) -> FleetView:
    view = FleetView()
    for node in cluster.list("nodes"):
        labels = node["metadata"].get("labels") or {}
        itype = labels.get("node.kubernetes.io/instance-type", "?")
        view.nodes_by_type[itype] = view.nodes_by_type.get(itype, 0) + 1
        view.nodes[node["metadata"]["name"]] = (itype, labels.get("topology.kubernetes.io/zone", "?"), [])
    for pod in cluster.list("pods", namespace):
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        if labels.get(f"{GROUP}/deployment") != name or meta.get("deletionTimestamp"):
            continue
        role = labels.get(f"{GROUP}/role", "?")
        ready = pod_is_ready(pod)
        if role == "active":
            view.active += 1
            view.ready += ready
        elif role == "warm":
            view.warm += 1
            view.warm_ready += ready
        elif role == "draining":
            view.draining += 1
        elif role == "placeholder":
            view.placeholders += 1
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name in view.nodes:
            view.nodes[node_name][2].append((role, ready))
    obj = cluster.get(PLURAL, name, namespace, group=GROUP)
    view.status = dict((obj or {}).get("status") or {})
    view.desired = int(view.status.get("desiredReplicas") or 0)
    return view


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    for item in status.get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return {}


def scale_direction(message: str) -> int:
    """+1 for a scale-up event message ``desired active replicas A -> B: ...``, -1 down, 0 unknown."""
    head = message.split(":", 1)[0].rsplit(" ", 3)
    try:
        before, after = int(head[-3]), int(head[-1])
    except (ValueError, IndexError):
        return 0
    return (after > before) - (after < before)


@dataclass
class Recorder:
    """What the demo measures while the load runs: samples, integrals, events."""

    load: LoadView
    timeline: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in TIMELINE_KEYS})
    node_seconds: dict[str, float] = field(default_factory=dict)
    active_seconds: float = 0.0
    warm_seconds: float = 0.0
    peak_active: int = 0
    min_active: int | None = None
    peak_nodes: int = 0
    events: list[ScaleEvent] = field(default_factory=list)
    #: The operator's Events (on the InferenceDeployment), newest first, and the cluster's.
    recent: deque[tuple[str, str, str]] = field(default_factory=lambda: deque(maxlen=7))
    cluster_recent: deque[tuple[str, str, str]] = field(default_factory=lambda: deque(maxlen=3))
    started: bool = False
    #: Replay seconds of lead-in before the measured span (figures and timeline start after it).
    lead_in: float = 0.0
    replay_now: float = 0.0

    @property
    def measured_now(self) -> float:
        """Seconds into the measured span (negative during the lead-in)."""
        return self.replay_now - self.lead_in

    def on_store_event(self, event: WatchEvent) -> None:
        if event.resource != ("", "events") or event.type != "ADDED":
            return
        obj = event.obj
        reason = str(obj.get("reason") or "")
        message = str(obj.get("message") or "")
        stamp = f"{self.measured_now / 60:5.1f}m" if self.started else "setup"
        kind = (obj.get("involvedObject") or {}).get("kind")
        feed = self.recent if kind == "InferenceDeployment" else self.cluster_recent
        if feed and feed[0][1:] == (reason, message):
            return  # the same event again (e.g. FailedScheduling per pending pod)
        feed.appendleft((stamp, reason, message))
        if self.started and reason == "Scaled" and self.measured_now >= 0:
            self.events.append(ScaleEvent(self.measured_now, message))

    def integrate(self, view: FleetView, seconds: float) -> None:
        for itype, count in view.nodes_by_type.items():
            self.node_seconds[itype] = self.node_seconds.get(itype, 0.0) + count * seconds
        self.active_seconds += view.active * seconds
        self.warm_seconds += view.warm * seconds
        self.peak_active = max(self.peak_active, view.active)
        self.min_active = view.active if self.min_active is None else min(self.min_active, view.active)
        self.peak_nodes = max(self.peak_nodes, sum(view.nodes_by_type.values()))

    def sample(self, t: float, view: FleetView) -> None:
        """One timeline row at replay second ``t`` (stored as measured time)."""
        row = {
            "t": t - self.lead_in,
            "demand": self.load.demand(t),
            "queue": self.load.queue_depth(),
            "desired": view.desired,
            "active": view.active,
            "ready": view.ready,
            "warm": view.warm,
            "placeholders": view.placeholders,
            "nodes": sum(view.nodes_by_type.values()),
            "util": self.load.utilization(),
        }
        for key, value in row.items():
            self.timeline[key].append(float(value))

    @property
    def scale_ups(self) -> int:
        return sum(1 for e in self.events if scale_direction(e.message) > 0)

    @property
    def scale_downs(self) -> int:
        return sum(1 for e in self.events if scale_direction(e.message) < 0)
