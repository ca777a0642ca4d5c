"""A Karpenter-like node provisioner for the sandbox's Inf2 node groups.

For pods the scheduler marked Unschedulable, it launches a node of the cheapest node group whose
instance type would take the pod (taints, nodeSelector/affinity incl. instance type and zone,
resources, NeuronCores), within the group's ``max_nodes``; the node registers (Ready) after
``provisioning_delay_s``; optionally it registers NotReady (with the not-ready taint) for
``node_ready_delay_s`` and advertises no Neuron resources until its device plugin registers
``device_plugin_delay_s`` later. Pending pods are packed onto nodes still launching before another is
launched. Nodes it launched that hold no pods except DaemonSet pods for ``consolidation_delay_s`` are
deleted, down to the group's ``min_nodes``, with a ``DisruptionTerminating`` Event on the Node as
Karpenter posts; the first ``min_nodes`` nodes a group starts with are static, never removed (a
floor: ``sandbox up``'s COUNT). As Karpenter's disruption skips a node not yet initialized (Ready, its
extended resources registered), a node still launching is no candidate, and its empty time counts
from when it is initialized.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from neuronfleet.sandbox.clock import run_controller
from neuronfleet.sandbox.errors import ApiError
from neuronfleet.sandbox.events import EventRecorder
from neuronfleet.sandbox.nodes import (
    NODE_GROUP_LABEL,
    PROVISIONED_ANNOTATION,
    NodeGroup,
    neuroncores_requested,
    node_allocatable,
    node_object,
    pod_requests,
)
from neuronfleet.sandbox.scheduler import Scheduler
from neuronfleet.sandbox.scheduling import allocate_cores, insufficient, is_active, node_chips, node_cores
from neuronfleet.sandbox.store import Store, WatchEvent

Obj = dict[str, Any]


@dataclass
class Launch:
    """A node being provisioned and the pods it was launched for."""

    group: NodeGroup
    zone: str
    template: Obj
    name: str
    #: Set once the node object exists (it may still be NotReady or lack Neuron resources).
    node_name: str = ""
    pods: list[Obj] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


class NodeNamer:
    """EKS-style node names and instance ids, unique per sandbox."""

    def __init__(self) -> None:
        self.count = 0

    def next(self, zone: str) -> tuple[str, str]:
        self.count += 1
        n = self.count
        region = zone[:-1] if zone[-1:].isalpha() else zone
        return f"ip-10-0-{n // 250}-{n % 250 + 1}.{region}.compute.internal", f"i-{n:017x}"


class Provisioner:
    def __init__(
        self,
        store: Store,
        scheduler: Scheduler,
        groups: list[NodeGroup],
        namer: NodeNamer,
        *,
        provisioning_delay_s: float = 60.0,
        consolidation_delay_s: float = 30.0,
        node_ready_delay_s: float = 0.0,
        device_plugin_delay_s: float = 0.0,
        interval_s: float = 5.0,
    ) -> None:
        self.store = store
        self.scheduler = scheduler
        self.groups = {g.name: g for g in groups}
        self.namer = namer
        self.provisioning_delay_s = provisioning_delay_s
        self.node_ready_delay_s = node_ready_delay_s
        self.device_plugin_delay_s = device_plugin_delay_s
        self.consolidation_delay_s = consolidation_delay_s
        self.interval_s = interval_s
        self.launches: list[Launch] = []
        self.nodes_launched = 0
        self._claims = 0
        self.nodes_removed = 0
        self._empty_since: dict[str, float] = {}
        self._wake = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self.events = EventRecorder(store, "karpenter")
        self._pods = store.resource("", "pods")
        self._nodes = store.resource("", "nodes")
        store.listeners.append(self._on_event)

    def _on_event(self, event: WatchEvent) -> None:
        if event.resource in (("", "pods"), ("", "nodes")):
            self._wake.set()

    async def run(self) -> None:
        await run_controller("provisioner", self.reconcile, self._wake, self.interval_s)

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        tasks = [launch.task for launch in self.launches if launch.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def reconcile(self) -> None:
        self._provision()
        self._consolidate()

    # ---- scale up --------------------------------------------------------------------------------

    def _unschedulable(self) -> list[Obj]:
        result = []
        for pod in self.scheduler.pending_pods():
            if (pod.get("status") or {}).get("nominatedNodeName"):
                continue
            for condition in (pod.get("status") or {}).get("conditions") or []:
                if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
                    result.append(pod)
        return result

    def group_node_count(self, group: NodeGroup) -> int:
        nodes = sum(
            1
            for n in self.store.iter(self._nodes)
            if (n["metadata"].get("labels") or {}).get(NODE_GROUP_LABEL) == group.name
        )
        return nodes + sum(1 for launch in self.launches if launch.group.name == group.name and not launch.node_name)

    def _fits(self, pod: Obj, template: Obj, placed: list[Obj]) -> bool:
        _, ok = self.scheduler.static_filter(pod, template)
        if not ok:
            return False
        if insufficient(pod, node_allocatable(template), _sum_requests(placed)):
            return False
        name = self.scheduler.neuron_scheduler_name
        contiguous = name is not None and (pod.get("spec") or {}).get("schedulerName") == name
        used = sum(neuroncores_requested(p) for p in placed)
        cores = allocate_cores(
            node_cores(template),
            set(range(used)),
            neuroncores_requested(pod),
            contiguous=contiguous,
            ring=node_chips(template) > 1,
        )
        return cores is not None

    def _provision(self) -> None:
        claimed = {p["metadata"]["uid"] for launch in self.launches for p in launch.pods}
        for pod in self._unschedulable():
            if pod["metadata"]["uid"] in claimed:
                continue
            launch = next((x for x in self.launches if self._fits(pod, x.template, x.pods)), None)
            if launch is None:
                launch = self._launch_for(pod)
            if launch is not None:
                launch.pods.append(pod)
                self.events.record(pod, "Normal", "Nominated", f"Pod should schedule on: nodeclaim/{launch.name}")
                claimed.add(pod["metadata"]["uid"])

    def _launch_for(self, pod: Obj) -> Launch | None:
        options: list[tuple[float, str, NodeGroup, str, Obj]] = []
        for group in self.groups.values():
            if not group.provisionable or self.group_node_count(group) >= group.max_nodes:
                continue
            for zone in group.zones:
                template = node_object(group, zone, "template", "i-template", True, self.store.clock.timestamp())
                if self._fits(pod, template, []):
                    load = sum(
                        1
                        for n in self.store.iter(self._nodes)
                        if (n["metadata"].get("labels") or {}).get("topology.kubernetes.io/zone") == zone
                    )
                    options.append((group.itype.usd_per_hour, f"{load:06d}{zone}", group, zone, template))
        if not options:
            return None
        options.sort(key=lambda o: (o[0], o[1]))
        _, _, group, zone, template = options[0]
        self._claims += 1
        launch = Launch(group, zone, template, f"{group.name}-{self._claims:05d}")
        self.launches.append(launch)
        launch.task = asyncio.get_running_loop().create_task(self._register_after_delay(launch))
        return launch

    async def _register_after_delay(self, launch: Launch) -> None:
        try:
            await asyncio.sleep(self.provisioning_delay_s)
            name, instance_id = self.namer.next(launch.zone)
            node = node_object(launch.group, launch.zone, name, instance_id, True, self.store.clock.timestamp())
            neuron = {k: v for k, v in node["status"]["allocatable"].items() if k.startswith("aws.amazon.com/")}
            if self.node_ready_delay_s > 0:
                node["spec"]["taints"].append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
                ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
                ready.update(status="False", reason="KubeletNotReady", message="container runtime network not ready")
            if self.device_plugin_delay_s > 0:
                # Extended resources appear only once the Neuron device plugin has registered.
                node["status"]["allocatable"].update({k: "0" for k in neuron})
                node["status"]["capacity"].update({k: "0" for k in neuron})
            self.store.create(self._nodes, None, node)
            launch.node_name = name
            self.nodes_launched += 1
            if self.node_ready_delay_s > 0:
                await asyncio.sleep(self.node_ready_delay_s)
                self._mark_ready(name)
            if self.device_plugin_delay_s > 0:
                await asyncio.sleep(self.device_plugin_delay_s)
                self._advertise(name, neuron)
        except ApiError:
            pass  # the node was deleted meanwhile
        finally:
            with contextlib.suppress(ValueError):
                self.launches.remove(launch)

    def _mark_ready(self, name: str) -> None:
        now = self.store.clock.timestamp()

        def ready(o: Obj) -> None:
            for condition in o["status"].get("conditions") or []:
                if condition["type"] == "Ready":
                    condition.update(
                        status="True",
                        reason="KubeletReady",
                        message="kubelet is posting ready status",
                        lastTransitionTime=now,
                        lastHeartbeatTime=now,
                    )

        self.store.update(self._nodes, None, name, ready, subresource="status")
        self.store.update(
            self._nodes,
            None,
            name,
            lambda o: o["spec"].__setitem__(
                "taints", [t for t in o["spec"].get("taints") or [] if t.get("key") != "node.kubernetes.io/not-ready"]
            ),
        )

    def _advertise(self, name: str, resources: dict[str, str]) -> None:
        def advertise(o: Obj) -> None:
            o["status"]["allocatable"].update(resources)
            o["status"]["capacity"].update(resources)

        self.store.update(self._nodes, None, name, advertise, subresource="status")

    # ---- consolidation ---------------------------------------------------------------------------

    def _consolidate(self) -> None:
        now = self.store.clock.monotonic()
        busy: set[str] = set()
        for pod in self.store.iter(self._pods):
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name and is_active(pod) and not _is_daemon(pod):
                busy.add(node_name)
        nominated = {(p.get("status") or {}).get("nominatedNodeName") for p in self.store.iter(self._pods)}
        # Registered but not initialized (NotReady, or its device plugin not yet registered): a pod
        # waits for it, and Karpenter takes only initialized nodes as disruption candidates.
        initializing = {launch.node_name for launch in self.launches if launch.node_name}
        for node in list(self.store.iter(self._nodes)):
            name = node["metadata"]["name"]
            group = self.groups.get((node["metadata"].get("labels") or {}).get(NODE_GROUP_LABEL, ""))
            # Only nodes it launched (or that stand for such): a group's first min_nodes are a managed
            # node group's, which Karpenter does not consolidate; removing them left `sandbox up` with
            # no node 30 s after announcing them, and the first compile waiting for one.
            provisioned = (node["metadata"].get("annotations") or {}).get(PROVISIONED_ANNOTATION) == "true"
            held = name in busy or name in nominated or name in initializing
            if group is None or not group.provisionable or not provisioned or held:
                self._empty_since.pop(name, None)
                continue
            since = self._empty_since.setdefault(name, now)
            if now - since < self.consolidation_delay_s:
                self._schedule_wake(self.consolidation_delay_s - (now - since))
                continue
            if self.group_node_count(group) <= group.min_nodes:
                continue
            with contextlib.suppress(ApiError):
                self.store.delete(self._nodes, None, name)
                self.nodes_removed += 1
                # Karpenter's words for an empty node it terminates (its disruption controller's Event).
                self.events.record(node, "Normal", "DisruptionTerminating", "Disrupting Node: Empty")
            self._empty_since.pop(name, None)

    def _schedule_wake(self, delay: float) -> None:
        # One pending timer at most: churn must not pile up timers. The floor matters under
        # looptime: its clock is quantized, and a remainder that rounds to zero would fire at once,
        # again and again, without fake time ever advancing (a livelock in real time).
        loop = asyncio.get_running_loop()
        due = loop.time() + max(delay, MIN_WAKE_S)
        if self._timer is not None and not self._timer.cancelled() and self._timer.when() <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(due, self._timer_fired)

    def _timer_fired(self) -> None:
        self._timer = None
        self._wake.set()


#: Shortest consolidation wake-up delay (see _schedule_wake).
MIN_WAKE_S = 0.05


def _is_daemon(pod: Obj) -> bool:
    return any(ref.get("kind") == "DaemonSet" for ref in pod["metadata"].get("ownerReferences") or [])


def _sum_requests(pods: list[Obj]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for pod in pods:
        for name, value in pod_requests(pod).items():
            total[name] = total.get(name, Decimal(0)) + value
    return total
