"""Simulated Inf2 node groups: configuration, parsing of ``--node-groups`` and Node objects.

Nodes carry what EKS and Karpenter put on Inf2 nodes: instance-type, zone and Karpenter labels,
the ``aws.amazon.com/neuron:NoSchedule`` taint, and allocatable cpu, memory, pods,
``aws.amazon.com/neuron`` (chips) and ``aws.amazon.com/neuroncore`` from the Inf2 catalog.
"""

from __future__ import annotations

import functools
import hashlib
import re
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from neuronfleet.planning import catalog
from neuronfleet.planning.catalog import InstanceType

#: Marks nodes the provisioner launched, or that stand for such (and may be consolidated).
PROVISIONED_ANNOTATION = "neuronfleet.dev/provisioned"
NODE_GROUP_LABEL = "eks.amazonaws.com/nodegroup"
KUBELET_VERSION = "v1.34.0-eks-sandbox"
KERNEL_VERSION = "6.1.134-150.224.amzn2023.x86_64"
MAX_PODS = 58


@dataclass(frozen=True)
class NodeGroup:
    """A group of identical Inf2 nodes (an EKS managed node group / Karpenter NodePool)."""

    name: str
    instance_type: str
    #: Nodes registered at the start.
    count: int = 1
    zones: tuple[str, ...] = ("us-east-1a",)
    #: The first ``min_nodes`` of those are static (a managed node group's): the provisioner never
    #: removes them; the others start as if it had launched them, and go when empty.
    min_nodes: int = 0
    max_nodes: int = 10
    #: Whether the provisioner may launch (and consolidate) nodes of this group.
    provisionable: bool = True
    labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        catalog.instance_type(self.instance_type)  # raises KeyError listing the known types
        if not self.zones:
            raise ValueError(f"node group {self.name!r} needs at least one zone")
        if self.count < 0 or self.min_nodes < 0 or self.max_nodes < self.min_nodes or self.count > self.max_nodes:
            raise ValueError(
                f"node group {self.name!r}: need 0 <= min ({self.min_nodes}) <= max ({self.max_nodes}) "
                f"and 0 <= count ({self.count}) <= max"
            )

    @property
    def itype(self) -> InstanceType:
        return catalog.instance_type(self.instance_type)


_SPEC_RE = re.compile(
    r"^(?P<name>[a-z0-9]([-a-z0-9]*[a-z0-9])?):(?P<type>inf2\.[0-9a-z]+)"
    r"(:(?P<count>\d+))?(:(?P<max>\d+))?(@(?P<zones>[-a-z0-9+]+))?$"
)


def parse_node_groups(text: str) -> list[NodeGroup]:
    """Parse ``NAME:TYPE[:COUNT[:MAX]][@ZONE+ZONE],...``, e.g. ``small:inf2.xlarge:2:4@us-east-1a+us-east-1b``.

    COUNT is also the group's ``min_nodes``: the nodes ``sandbox up`` announces stay, empty or not.

    Raises ValueError with the expected format on bad input.
    """
    groups: list[NodeGroup] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        match = _SPEC_RE.match(part)
        if not match:
            raise ValueError(
                f"bad node group {part!r}: expected NAME:TYPE[:COUNT[:MAX]][@ZONE+ZONE], "
                "e.g. small:inf2.xlarge:2:4@us-east-1a+us-east-1b"
            )
        count = int(match["count"] or 1)
        max_nodes = int(match["max"]) if match["max"] else max(count, 10)
        zones = tuple(match["zones"].split("+")) if match["zones"] else ("us-east-1a",)
        try:
            groups.append(NodeGroup(match["name"], match["type"], count, zones, min_nodes=count, max_nodes=max_nodes))
        except KeyError as exc:
            raise ValueError(str(exc.args[0])) from None
    if not groups:
        raise ValueError("no node groups given")
    names = [g.name for g in groups]
    if len(set(names)) != len(names):
        raise ValueError(f"node group names must be unique: {names}")
    return groups


def node_labels(group: NodeGroup, zone: str, hostname: str) -> dict[str, str]:
    itype = group.itype
    region = zone[:-1] if zone and zone[-1].isalpha() else zone
    return {
        "kubernetes.io/hostname": hostname,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        catalog.LABEL_INSTANCE_TYPE: itype.name,
        catalog.LABEL_ZONE: zone,
        "topology.kubernetes.io/region": region,
        catalog.LABEL_INSTANCE_FAMILY: "inf2",
        catalog.LABEL_ACCELERATOR_NAME: catalog.ACCELERATOR_NAME,
        catalog.LABEL_ACCELERATOR_COUNT: str(itype.chips),
        catalog.LABEL_NODEPOOL: group.name,
        NODE_GROUP_LABEL: group.name,
        "karpenter.sh/capacity-type": "on-demand",
        **group.labels,
    }


def node_object(
    group: NodeGroup, zone: str, name: str, instance_id: str, provisioned: bool, now: str
) -> dict[str, Any]:
    """The Node an Inf2 instance of ``group`` registers as, Ready."""
    itype = group.itype
    resources = {
        "cpu": f"{itype.allocatable_cpu_millis}m",
        "memory": f"{itype.allocatable_memory_mib}Mi",
        "pods": str(MAX_PODS),
        "ephemeral-storage": "95Gi",
        catalog.RESOURCE_NEURON_DEVICE: str(itype.chips),
        catalog.RESOURCE_NEURONCORE: str(itype.neuroncores),
    }
    capacity = {**resources, "cpu": str(itype.vcpu), "memory": f"{itype.host_memory_gib}Gi"}
    annotations = {PROVISIONED_ANNOTATION: "true"} if provisioned else {}
    conditions = [
        {"type": t, "status": "False", "reason": r, "message": m, "lastHeartbeatTime": now, "lastTransitionTime": now}
        for t, r, m in (
            ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        )
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
    )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels(group, zone, name), "annotations": annotations},
        "spec": {
            "providerID": f"aws:///{zone}/{instance_id}",
            "taints": [{"key": catalog.NEURON_TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
        },
        "status": {
            "capacity": capacity,
            "allocatable": resources,
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": _ip_of(name)}, {"type": "Hostname", "address": name}],
            "nodeInfo": node_info(instance_id),
        },
    }


def node_info(instance_id: str) -> dict[str, str]:
    """``status.nodeInfo`` with every field the API requires (the official clients refuse a Node
    without one); machine, system and boot ids are derived from the instance id, so stable per node."""
    digest = hashlib.sha256(instance_id.encode()).hexdigest()
    system_uuid = str(uuid.UUID(digest[:32]))
    return {
        "machineID": digest[32:64],
        # EC2 instances report a system UUID starting with "ec2".
        "systemUUID": "ec2" + system_uuid[3:],
        "bootID": str(uuid.UUID(hashlib.sha256(f"boot:{instance_id}".encode()).hexdigest()[:32], version=4)),
        "kernelVersion": KERNEL_VERSION,
        "osImage": "Amazon Linux 2023 (neuronfleet sandbox)",
        "containerRuntimeVersion": "containerd://1.7.27",
        "kubeletVersion": KUBELET_VERSION,
        "kubeProxyVersion": KUBELET_VERSION,
        "operatingSystem": "linux",
        "architecture": "amd64",
    }


def _ip_of(name: str) -> str:
    digits = [int(x) for x in re.findall(r"\d+", name)][-2:]
    while len(digits) < 2:
        digits.insert(0, 0)
    return f"10.0.{digits[0] % 256}.{digits[1] % 256}"


# ---- resource quantities ----------------------------------------------------------------------

Resources = dict[str, Decimal]


def quantity(value: Any) -> Decimal:
    """A Kubernetes quantity as a Decimal (via the kubernetes client's parser)."""
    if isinstance(value, str | int):
        return _parsed_quantity(value)
    try:
        return Decimal(parse_quantity(value))
    except (ValueError, TypeError):
        return Decimal(0)


@functools.lru_cache(maxsize=4096)
def _parsed_quantity(value: str | int) -> Decimal:
    # The scheduler sums every bound pod's requests for every node it tries: a few distinct strings
    # ("1", "4Gi") parsed millions of times at a thousand pods.
    try:
        return Decimal(parse_quantity(value))
    except (ValueError, TypeError):
        return Decimal(0)


#: Pod phases from which a pod never runs again (it holds no resources, serves nothing, counts in no quota).
ENDED_PHASES = ("Succeeded", "Failed")


def pod_has_ended(pod: dict[str, Any] | None) -> bool:
    """Whether ``pod`` is Succeeded or Failed."""
    return ((pod or {}).get("status") or {}).get("phase") in ENDED_PHASES


def pod_is_ready(pod: dict[str, Any]) -> bool:
    """Whether ``pod``'s Ready condition is True (podutil.IsPodReady)."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def pod_requests(pod: dict[str, Any]) -> Resources:
    """Effective requests of a pod: sum over containers, max with init containers; limits imply
    requests for extended resources, as the scheduler computes them."""
    spec = pod.get("spec") or {}

    def of(container: dict[str, Any]) -> Resources:
        resources = container.get("resources") or {}
        requests = dict(resources.get("requests") or {})
        for name, value in (resources.get("limits") or {}).items():
            requests.setdefault(name, value)
        return {name: quantity(value) for name, value in requests.items()}

    total: Resources = {}
    for container in spec.get("containers") or []:
        for name, value in of(container).items():
            total[name] = total.get(name, Decimal(0)) + value
    for container in spec.get("initContainers") or []:
        for name, value in of(container).items():
            total[name] = max(total.get(name, Decimal(0)), value)
    total["pods"] = Decimal(1)
    return total


def node_allocatable(node: dict[str, Any]) -> Resources:
    return {name: quantity(value) for name, value in ((node.get("status") or {}).get("allocatable") or {}).items()}


def neuroncores_requested(pod: dict[str, Any]) -> int:
    """NeuronCores a pod needs: its neuroncore request, or 2 per requested Neuron device."""
    requests = pod_requests(pod)
    cores = int(requests.get(catalog.RESOURCE_NEURONCORE, 0))
    devices = int(requests.get(catalog.RESOURCE_NEURON_DEVICE, 0))
    return max(cores, devices * catalog.NEURONCORES_PER_CHIP)
