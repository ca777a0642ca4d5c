"""The sandbox scheduler: binds pending pods to simulated nodes, with preemption.

Serves pods whose ``schedulerName`` is the default scheduler or the configured Neuron scheduler;
pods addressed to any other scheduler stay Pending untouched (so the operator can detect an
unknown scheduler). Filters: node readiness/unschedulable, taints and tolerations, nodeSelector
and required node affinity, resource requests, NeuronCores (contiguous on the chip ring for the
Neuron scheduler), zone topology spread (DoNotSchedule filters, ScheduleAnyway scores), required
inter-pod affinity and anti-affinity. Scoring: ScheduleAnyway skew, then preferred node affinity
weight, then packing (most-allocated NeuronCores first, which keeps nodes free for consolidation).
Not done: preferred inter-pod affinity, minDomains; spread's nodeAffinityPolicy and nodeTaintsPolicy
are not read, their defaults apply (Honor: only nodes the pod's node affinity admits count; Ignore:
tainted nodes count).
Preemption: lower-priority pods are evicted (DisruptionTarget condition, graceful delete) from the
node needing the fewest, lowest-priority victims; the preemptor is nominated to it. As in
kube-scheduler, a nominated pod's requests (and NeuronCores) count on its node against pods of lower
or equal priority, so another pod does not take the room it preempted for, and a nomination that can
no longer be honoured (the pod fits nowhere and preempts nothing) is cleared, so the provisioner,
which passes over nominated pods, launches a node for it. Nominated pods are not counted for spread
and inter-pod affinity (kube-scheduler counts them there too).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from neuronfleet.sandbox.clock import run_controller
from neuronfleet.sandbox.conditions import disruption_target, set_condition
from neuronfleet.sandbox.errors import ApiError
from neuronfleet.sandbox.events import EventRecorder
from neuronfleet.sandbox.nodes import Resources, neuroncores_requested, node_allocatable
from neuronfleet.sandbox.scheduling import (
    CORES_ANNOTATION,
    allocate_cores,
    cores_in_use,
    insufficient,
    is_active,
    labels_of,
    node_chips,
    node_cores,
    node_matches,
    pod_affinity_violation,
    preferred_affinity_weight,
    spread_violation,
    untolerated_taint,
    used_resources,
)
from neuronfleet.sandbox.store import Store, WatchEvent

Obj = dict[str, Any]
DEFAULT_SCHEDULER = "default-scheduler"


def pod_priority(pod: Obj) -> int:
    return int((pod.get("spec") or {}).get("priority") or 0)


def node_ready(node: Obj) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


class Placement:
    """Where a pod fits: the node and the NeuronCores it gets there."""

    def __init__(self, node: Obj, cores: list[int], score: tuple[Any, ...]) -> None:
        self.node = node
        self.cores = cores
        self.score = score


def _pod_key(pod: Obj) -> tuple[Any, ...]:
    """What of a pod matters to placing others (or itself): where it is bound, whether it holds
    resources, its labels (spread, affinity), its NeuronCores, its nomination and its spec."""
    meta, status = pod["metadata"], pod.get("status") or {}
    return (
        (pod.get("spec") or {}),
        is_active(pod),
        bool(meta.get("deletionTimestamp")),
        meta.get("labels"),
        (meta.get("annotations") or {}).get(CORES_ANNOTATION),
        status.get("nominatedNodeName"),
    )


def _node_key(node: Obj) -> tuple[Any, ...]:
    """What of a node matters to placement: its spec (taints, unschedulable), labels, allocatable,
    readiness and deletion; not its heartbeats."""
    return (
        node.get("spec"),
        node["metadata"].get("labels"),
        bool(node["metadata"].get("deletionTimestamp")),
        (node.get("status") or {}).get("allocatable"),
        node_ready(node),
    )


@dataclass
class Snapshot:
    """The cluster as a round sees it: nodes, the active pods bound to each, and the pending pods
    nominated to each (the room they preempted for)."""

    nodes: list[Obj]
    pods_by_node: dict[str, list[Obj]]
    nominated: dict[str, list[Obj]] = field(default_factory=dict)

    def bound(self, pod: Obj, node_name: str) -> None:
        """Count ``pod`` (as bound) on ``node_name``: it holds resources there and no room elsewhere."""
        self.pods_by_node.setdefault(node_name, []).append(pod)
        self.unnominated(pod)

    def unnominated(self, pod: Obj) -> None:
        """Keep no room for ``pod`` on any node: it is bound, or its nomination was cleared (the
        rest of the round must see the room free, as the next round would)."""
        uid = pod["metadata"]["uid"]
        for name, waiting in self.nominated.items():
            self.nominated[name] = [p for p in waiting if p["metadata"]["uid"] != uid]


def reserved_for(pod: Obj, nominated: list[Obj]) -> list[Obj]:
    """The pods nominated to a node whose room ``pod`` must leave them: those of higher or equal
    priority (a lower-priority nomination yields, as kube-scheduler's does), not ``pod`` itself."""
    priority, uid = pod_priority(pod), pod["metadata"]["uid"]
    return [p for p in nominated if p["metadata"]["uid"] != uid and pod_priority(p) >= priority]


@dataclass(frozen=True)
class NodeUsage:
    """What a node offers and what its bound pods take: the same for every pod tried in a round
    until a pod is bound there, so a round computes it once per node, not once per pod and node."""

    allocatable: Resources
    used: Resources
    cores: set[int]

    @classmethod
    def of(cls, node: Obj, on_node: list[Obj]) -> NodeUsage:
        return cls(node_allocatable(node), used_resources(on_node), cores_in_use(on_node))


class Scheduler:
    """Binds pending pods; runs as one task in the sandbox loop, woken by pod and node events."""

    def __init__(
        self,
        store: Store,
        *,
        neuron_scheduler_name: str | None = "neuron-scheduler",
        retry_interval_s: float = 10.0,
    ) -> None:
        self.store = store
        self.neuron_scheduler_name = neuron_scheduler_name
        # None: no Neuron scheduler extension runs (pods addressed to it stay Pending).
        self.scheduler_names = {DEFAULT_SCHEDULER} | ({neuron_scheduler_name} if neuron_scheduler_name else set())
        self.retry_interval_s = retry_interval_s
        self.bindings = 0
        self.preemptions = 0
        #: Scheduling rounds run (each tries every pending pod on every node).
        self.rounds = 0
        self.events = EventRecorder(store, DEFAULT_SCHEDULER)
        self._wake = asyncio.Event()
        self._pods = store.resource("", "pods")
        self._nodes = store.resource("", "nodes")
        store.listeners.append(self._on_event)

    def _on_event(self, event: WatchEvent) -> None:
        # A round costs pending pods x nodes: wake only for what can change a placement, not for the
        # kubelet's progress reports on bound pods and its node heartbeats (most of the events).
        if event.resource not in (("", "pods"), ("", "nodes")):
            return
        key = _pod_key if event.resource == ("", "pods") else _node_key
        if event.type != "MODIFIED" or event.old is None or key(event.old) != key(event.obj):
            self._wake.set()

    async def run(self) -> None:
        await run_controller("scheduler", self.schedule_pending, self._wake, self.retry_interval_s)

    # ---- one round -------------------------------------------------------------------------------

    def _snapshot(self) -> Snapshot:
        nodes = list(self.store.iter(self._nodes))
        pods_by_node: dict[str, list[Obj]] = {}
        for pod in self.store.iter(self._pods):
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name and is_active(pod):
                pods_by_node.setdefault(node_name, []).append(pod)
        nominated: dict[str, list[Obj]] = {}
        for pod in self.pending_pods():
            nominee = (pod.get("status") or {}).get("nominatedNodeName")
            if nominee:
                nominated.setdefault(nominee, []).append(pod)
        return Snapshot(nodes, pods_by_node, nominated)

    def pending_pods(self) -> list[Obj]:
        pending = [
            pod
            for pod in self.store.iter(self._pods)
            if not (pod.get("spec") or {}).get("nodeName")
            and not pod["metadata"].get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
            and (pod.get("spec") or {}).get("schedulerName", DEFAULT_SCHEDULER) in self.scheduler_names
        ]
        pending.sort(
            key=lambda p: (-pod_priority(p), p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"])
        )
        return pending

    def schedule_pending(self) -> int:
        """Try every pending pod once; return how many were bound."""
        self.rounds += 1
        bound = 0
        snapshot: Snapshot | None = None
        usage: dict[str, NodeUsage] = {}
        for pod in self.pending_pods():
            # A round runs without yielding to the loop: the cluster changes only by what it does
            # itself, so the snapshot (and each node's usage) is read once, updated on a bind, and
            # read again after a preemption.
            if snapshot is None:
                snapshot, usage = self._snapshot(), {}
            nodes, pods_by_node = snapshot.nodes, snapshot.pods_by_node
            placement, reasons = self.find_placement(
                pod, nodes, pods_by_node, usage=usage, nominated=snapshot.nominated
            )
            if placement is not None:
                if self._bind(pod, placement):
                    bound += 1
                    meta, node_name = pod["metadata"], placement.node["metadata"]["name"]
                    bound_pod = self.store.try_get(self._pods, meta["namespace"], meta["name"])
                    if bound_pod is None:
                        snapshot = None
                    else:
                        snapshot.bound(bound_pod, node_name)
                        usage.pop(node_name, None)
                continue
            if self._waiting_for_victims(pod, pods_by_node):
                continue
            if self._preempt(pod, nodes, pods_by_node, snapshot.nominated):
                snapshot = None
                continue
            self._mark_unschedulable(pod, len(nodes), reasons)
            # Its nomination is cleared: the pods after it in this round may take that room.
            snapshot.unnominated(pod)
        return bound

    def find_placement(
        self,
        pod: Obj,
        nodes: list[Obj],
        pods_by_node: dict[str, list[Obj]],
        *,
        ignore: set[str] | None = None,
        usage: dict[str, NodeUsage] | None = None,
        nominated: dict[str, list[Obj]] | None = None,
    ) -> tuple[Placement | None, Counter[str]]:
        """The best node for ``pod``, or why none fits (each reason counted once per node it holds
        for). ``usage``: each node's usage by name, kept by the caller while ``pods_by_node`` stays
        as it is (not with ``ignore``); ``nominated``: the pending pods nominated to each node."""
        reasons: Counter[str] = Counter()
        best: Placement | None = None
        spread_counts: dict[int, dict[str, int]] = {}
        for node in nodes:
            name = node["metadata"]["name"]
            on_node = [p for p in pods_by_node.get(name, []) if not ignore or p["metadata"]["uid"] not in ignore]
            node_usage = None
            if usage is not None and not ignore:
                node_usage = usage.get(name)
                if node_usage is None:
                    node_usage = usage[name] = NodeUsage.of(node, on_node)
            waiting = (nominated or {}).get(name, [])
            why, placement = self.fits(pod, node, on_node, nodes, pods_by_node, spread_counts, node_usage, waiting)
            if placement is None:
                reasons.update(why)
            elif best is None or placement.score < best.score:
                best = placement
        return best, reasons

    def fits(
        self,
        pod: Obj,
        node: Obj,
        on_node: list[Obj],
        nodes: list[Obj],
        pods_by_node: dict[str, list[Obj]],
        spread_counts: dict[int, dict[str, int]] | None = None,
        usage: NodeUsage | None = None,
        nominated: list[Obj] | None = None,
    ) -> tuple[tuple[str, ...], Placement | None]:
        """(the reasons it does not fit, or the placement); ``spread_counts``: see
        :func:`spread_violation`; ``usage``: the node's, when the caller keeps it (else read from
        ``on_node``); ``nominated``: the pending pods nominated to the node, whose room is kept for
        those of higher or equal priority (:func:`reserved_for`)."""
        reason, filtered = self.static_filter(pod, node)
        if not filtered:
            return (reason,), None
        if usage is None:
            usage = NodeUsage.of(node, on_node)
        reserved = reserved_for(pod, nominated or [])
        used, cores_used = usage.used, usage.cores
        if reserved:
            used = dict(used)
            for name, value in used_resources(reserved).items():
                used[name] = used.get(name, Decimal(0)) + value
        # Every resource short, as kube-scheduler's NodeResourcesFit reports them, not the first.
        missing = insufficient(pod, usage.allocatable, used)
        if missing:
            return tuple(f"Insufficient {name}" for name in missing), None
        ring = node_chips(node) > 1
        if reserved:
            # The nominated pods' NeuronCores are taken first, as if they were bound (they have none yet).
            cores_used = set(cores_used)
            for waiting in sorted(reserved, key=lambda p: -pod_priority(p)):
                block = allocate_cores(
                    node_cores(node),
                    cores_used,
                    neuroncores_requested(waiting),
                    contiguous=self._contiguous(waiting),
                    ring=ring,
                )
                cores_used |= set(block or [])
        cores = allocate_cores(
            node_cores(node), cores_used, neuroncores_requested(pod), contiguous=self._contiguous(pod), ring=ring
        )
        if cores is None:
            return ("node(s) did not have enough contiguous free NeuronCores",), None
        violated, penalty = spread_violation(pod, node, nodes, pods_by_node, hard=True, counts_cache=spread_counts)
        if violated:
            return ("node(s) didn't match pod topology spread constraints",), None
        affinity_reason = pod_affinity_violation(pod, node, nodes, pods_by_node)
        if affinity_reason is not None:
            return (affinity_reason,), None
        free_after = node_cores(node) - len(cores_used) - len(cores)
        preferred = preferred_affinity_weight(pod, labels_of(node))
        score = (penalty, -preferred, free_after, node["metadata"]["name"])
        return (), Placement(node, cores, score)

    def _contiguous(self, pod: Obj) -> bool:
        """Whether the pod's NeuronCores are a contiguous block (the Neuron scheduler extension's)."""
        return (
            self.neuron_scheduler_name is not None
            and (pod.get("spec") or {}).get("schedulerName") == self.neuron_scheduler_name
        )

    def static_filter(self, pod: Obj, node: Obj) -> tuple[str, bool]:
        """Filters that no eviction can change: readiness, taints, selectors."""
        if node["metadata"].get("deletionTimestamp") or not node_ready(node):
            return "node(s) were not ready", False
        if (node.get("spec") or {}).get("unschedulable"):
            return "node(s) were unschedulable", False
        taint = untolerated_taint(pod, (node.get("spec") or {}).get("taints") or [])
        if taint is not None:
            return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}", False
        if not node_matches(pod, labels_of(node), node["metadata"]["name"]):
            return "node(s) didn't match Pod's node affinity/selector", False
        return "", True

    def _bind(self, pod: Obj, placement: Placement) -> bool:
        annotations = {CORES_ANNOTATION: ",".join(str(c) for c in placement.cores)} if placement.cores else None
        try:
            self.store.bind_pod(
                pod["metadata"]["namespace"],
                pod["metadata"]["name"],
                placement.node["metadata"]["name"],
                annotations,
            )
        except ApiError:
            return False
        self.bindings += 1
        meta = pod["metadata"]
        node_name = placement.node["metadata"]["name"]
        self.events.record(
            pod, "Normal", "Scheduled", f"Successfully assigned {meta['namespace']}/{meta['name']} to {node_name}"
        )
        return True

    # ---- preemption --------------------------------------------------------------------------------

    def _waiting_for_victims(self, pod: Obj, pods_by_node: dict[str, list[Obj]]) -> bool:
        nominated = (pod.get("status") or {}).get("nominatedNodeName")
        if not nominated:
            return False
        return any(p["metadata"].get("deletionTimestamp") for p in pods_by_node.get(nominated, []))

    def _preempt(
        self, pod: Obj, nodes: list[Obj], pods_by_node: dict[str, list[Obj]], nominated: dict[str, list[Obj]]
    ) -> bool:
        spec = pod.get("spec") or {}
        if spec.get("preemptionPolicy") == "Never":
            return False
        priority = pod_priority(pod)
        choice: tuple[tuple[int, int, str], Obj, list[Obj]] | None = None
        for node in nodes:
            _, ok = self.static_filter(pod, node)
            if not ok:
                continue
            on_node = pods_by_node.get(node["metadata"]["name"], [])
            candidates = sorted(
                (p for p in on_node if pod_priority(p) < priority and not p["metadata"].get("deletionTimestamp")),
                key=lambda p: (pod_priority(p), p["metadata"].get("creationTimestamp", "")),
            )
            victims: list[Obj] = []
            remaining = list(on_node)
            for victim in candidates:
                victims.append(victim)
                remaining = [p for p in remaining if p["metadata"]["uid"] != victim["metadata"]["uid"]]
                # The room kept for pods nominated there counts, as in any fit (kube-scheduler's too).
                _, placement = self.fits(
                    pod,
                    node,
                    remaining,
                    nodes,
                    {**pods_by_node, node["metadata"]["name"]: remaining},
                    nominated=nominated.get(node["metadata"]["name"], []),
                )
                if placement is not None:
                    key = (max(pod_priority(v) for v in victims), len(victims), node["metadata"]["name"])
                    if choice is None or key < choice[0]:
                        choice = (key, node, list(victims))
                    break
        if choice is None:
            return False
        _, node, victims = choice
        node_name = node["metadata"]["name"]
        now = self.store.clock.timestamp()
        for victim in victims:
            meta = victim["metadata"]
            with contextlib.suppress(ApiError):
                self.store.update(
                    self._pods,
                    meta["namespace"],
                    meta["name"],
                    lambda o: set_condition(
                        o,
                        disruption_target(
                            "PreemptionByScheduler",
                            f"{DEFAULT_SCHEDULER}: preempting to accommodate a higher priority pod",
                            now,
                        ),
                    ),
                    subresource="status",
                )
                self.store.delete(self._pods, meta["namespace"], meta["name"])
                self.events.record(
                    victim, "Normal", "Preempted", f"Preempted by pod {pod['metadata']['uid']} on node {node_name}"
                )
        self.preemptions += len(victims)
        with contextlib.suppress(ApiError):
            self.store.update(
                self._pods,
                pod["metadata"]["namespace"],
                pod["metadata"]["name"],
                lambda o: o.setdefault("status", {}).__setitem__("nominatedNodeName", node_name),
                subresource="status",
            )
        return True

    def _mark_unschedulable(self, pod: Obj, node_count: int, reasons: Counter[str]) -> None:
        """Say why the pod fits nowhere, and clear its nomination: it fits nowhere and preempted
        nothing, so the room it was nominated to is gone (kube-scheduler clears it then too), and the
        provisioner, which passes over nominated pods, must see it."""
        details = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
        message = f"0/{node_count} nodes are available" + (f": {details}." if details else ".")
        status = pod.get("status") or {}
        said = any(
            condition.get("type") == "PodScheduled" and condition.get("message") == message
            for condition in status.get("conditions") or []
        )
        if said and not status.get("nominatedNodeName"):
            return
        now = self.store.clock.timestamp()

        def unschedulable(obj: Obj) -> None:
            obj.setdefault("status", {}).pop("nominatedNodeName", None)
            set_condition(
                obj,
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": now,
                },
            )

        with contextlib.suppress(ApiError):
            self.store.update(
                self._pods, pod["metadata"]["namespace"], pod["metadata"]["name"], unschedulable, subresource="status"
            )
        if not said:
            self.events.record(pod, "Warning", "FailedScheduling", message)
