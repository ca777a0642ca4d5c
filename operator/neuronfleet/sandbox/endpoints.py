"""The sandbox's endpoints controller: a Service's pods as Endpoints and EndpointSlices.

What kube-controller-manager's endpoints and endpointslice controllers publish, for Services with
a selector: every pod the selector matches that has an IP and has not ended, Ready ones as ready
addresses and the others as not ready. A terminating pod is in the EndpointSlices (not ready, serving
while its Ready condition holds, terminating) and not in the Endpoints. A Service with
``publishNotReadyAddresses`` publishes every such pod as ready, terminating ones too (its
EndpointSlice conditions still say serving and terminating as they are).

Addresses are pod IPs; the port is the pod's container port that the Service's ``targetPort``
names, except for pods whose server runs as a local process (``sandbox.serving``): their pod IP is
127.0.0.1 and their port the one the sandbox gave them (the ``sandbox.neuronfleet.dev/port``
annotation), so each such pod gets its own subset and slice.
Both kinds carry an ownerReference to the Service (the garbage collector removes them with it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from neuronfleet.sandbox.clock import run_controller
from neuronfleet.sandbox.errors import ApiError
from neuronfleet.sandbox.nodes import pod_has_ended, pod_is_ready
from neuronfleet.sandbox.resources import ResourceType
from neuronfleet.sandbox.serving import PORT_ANNOTATION
from neuronfleet.sandbox.store import Obj, Store, WatchEvent

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
MANAGED_BY = "endpointslice-controller.k8s.io"

ENDPOINTS = ResourceType(
    group="", versions=["v1"], plural="endpoints", kind="Endpoints", namespaced=True, singular="endpoints",
    short_names=("ep",),
)  # fmt: skip
ENDPOINT_SLICES = ResourceType(
    group="discovery.k8s.io", versions=["v1"], plural="endpointslices", kind="EndpointSlice", namespaced=True,
    singular="endpointslice",
)  # fmt: skip


def _selects(selector: dict[str, str], pod: Obj) -> bool:
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())


def _target_port(service_port: Obj, pod: Obj) -> int | None:
    annotated = (pod["metadata"].get("annotations") or {}).get(PORT_ANNOTATION)
    if annotated:
        return int(annotated)
    target = service_port.get("targetPort", service_port.get("port"))
    if isinstance(target, int):
        return target
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == target:
                return int(port["containerPort"])
    return None


class EndpointsController:
    """Keeps ``Endpoints`` and ``EndpointSlice`` objects equal to each Service's pods."""

    def __init__(self, store: Store, *, interval_s: float = 10.0) -> None:
        self.store = store
        self.interval_s = interval_s
        for rt in (ENDPOINTS, ENDPOINT_SLICES):
            if rt.key not in store.resources:
                store.register(rt)
        self._services = store.resource("", "services")
        self._pods = store.resource("", "pods")
        self._endpoints = store.resource("", "endpoints")
        self._slices = store.resource("discovery.k8s.io", "endpointslices")
        self._wake = asyncio.Event()
        store.listeners.append(self._on_event)

    def _on_event(self, event: WatchEvent) -> None:
        if event.resource in (("", "services"), ("", "pods")):
            self._wake.set()

    async def run(self) -> None:
        await run_controller("endpoints controller", self.sync, self._wake, self.interval_s)

    def sync(self) -> None:
        for service in list(self.store.iter(self._services)):
            with contextlib.suppress(ApiError):
                self._sync_service(service)

    def _sync_service(self, service: Obj) -> None:
        meta, spec = service["metadata"], service.get("spec") or {}
        selector = spec.get("selector")
        if not selector or meta.get("deletionTimestamp"):
            return
        namespace, name = meta["namespace"], meta["name"]
        publish_not_ready = bool(spec.get("publishNotReadyAddresses"))
        # (port numbers per Service port) -> [(pod, ready)]
        groups: dict[tuple[int, ...], list[tuple[Obj, bool]]] = {}
        for pod in self.store.iter(self._pods, namespace):
            status = pod.get("status") or {}
            # endpointslice's ShouldPodBeInEndpoints: an IP, and not Succeeded or Failed.
            if pod_has_ended(pod) or not status.get("podIP") or not _selects(selector, pod):
                continue
            ports = tuple(_target_port(p, pod) or 0 for p in spec.get("ports") or [])
            if 0 in ports:
                continue
            terminating = bool(pod["metadata"].get("deletionTimestamp"))
            # Never ready while terminating, unless the Service publishes not-ready addresses.
            ready = publish_not_ready or (pod_is_ready(pod) and not terminating)
            groups.setdefault(ports, []).append((pod, ready))
        owner = {
            "apiVersion": "v1",
            "kind": "Service",
            "name": name,
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        # The Endpoints controller leaves terminating pods out (unless they are published anyway).
        in_endpoints = {
            ports: kept
            for ports, members in groups.items()
            if (kept := [m for m in members if publish_not_ready or not m[0]["metadata"].get("deletionTimestamp")])
        }
        self._write_endpoints(service, in_endpoints, owner)
        self._write_slices(service, groups, owner)

    def _port_list(self, service: Obj, numbers: tuple[int, ...]) -> list[Obj]:
        ports = (service.get("spec") or {}).get("ports") or []
        return [
            {**({"name": p["name"]} if p.get("name") else {}), "port": n, "protocol": p.get("protocol", "TCP")}
            for p, n in zip(ports, numbers, strict=True)
        ]

    def _write_endpoints(self, service: Obj, groups: dict[tuple[int, ...], list[tuple[Obj, bool]]], owner: Obj) -> None:
        namespace, name = service["metadata"]["namespace"], service["metadata"]["name"]
        subsets = []
        for numbers, members in sorted(groups.items()):
            subset: Obj = {}
            for key, wanted in (("addresses", True), ("notReadyAddresses", False)):
                addresses = [_address(pod) for pod, ready in members if ready is wanted]
                if addresses:
                    subset[key] = sorted(addresses, key=lambda a: (a["ip"], a["targetRef"]["name"]))
            subset["ports"] = self._port_list(service, numbers)
            subsets.append(subset)
        existing = self.store.try_get(self._endpoints, namespace, name)
        if existing is None:
            body: Any = {
                "metadata": {"name": name, "labels": dict(service["metadata"].get("labels") or {}),
                             "ownerReferences": [owner]},
                "subsets": subsets,
            }  # fmt: skip
            self.store.create(self._endpoints, namespace, body)
        elif (existing.get("subsets") or []) != subsets:
            self.store.update(self._endpoints, namespace, name, lambda o: o.__setitem__("subsets", subsets))

    def _write_slices(self, service: Obj, groups: dict[tuple[int, ...], list[tuple[Obj, bool]]], owner: Obj) -> None:
        namespace, name = service["metadata"]["namespace"], service["metadata"]["name"]
        wanted: dict[str, Obj] = {}
        for numbers, members in groups.items():
            slice_name = f"{name}-{'-'.join(str(n) for n in numbers)}"
            endpoints = [
                {
                    "addresses": [pod["status"]["podIP"]],
                    "conditions": {
                        "ready": ready,
                        "serving": pod_is_ready(pod),
                        "terminating": bool(pod["metadata"].get("deletionTimestamp")),
                    },
                    "nodeName": pod["spec"].get("nodeName"),
                    "targetRef": _target_ref(pod),
                }
                for pod, ready in sorted(members, key=lambda m: m[0]["metadata"]["name"])
            ]
            wanted[slice_name] = {"endpoints": endpoints, "ports": self._port_list(service, numbers)}
        current = {
            s["metadata"]["name"]: s
            for s in self.store.iter(self._slices, namespace)
            if (s["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL) == name
        }
        for slice_name, content in wanted.items():
            existing = current.get(slice_name)
            if existing is None:
                body: Any = {
                    "metadata": {
                        "name": slice_name,
                        "labels": {SERVICE_NAME_LABEL: name, MANAGED_BY_LABEL: MANAGED_BY},
                        "ownerReferences": [owner],
                    },
                    "addressType": "IPv4",
                    **content,
                }
                self.store.create(self._slices, namespace, body)
            elif {k: existing.get(k) for k in content} != content:
                self.store.update(self._slices, namespace, slice_name, lambda o, c=content: o.update(c))  # type: ignore[misc]
        for slice_name in set(current) - set(wanted):
            with contextlib.suppress(ApiError):
                self.store.delete(self._slices, namespace, slice_name)


def _target_ref(pod: Obj) -> Obj:
    meta = pod["metadata"]
    return {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}


def _address(pod: Obj) -> Obj:
    return {"ip": pod["status"]["podIP"], "nodeName": pod["spec"].get("nodeName"), "targetRef": _target_ref(pod)}


def _slice_endpoints(
    store: Store, namespace: str, service: str, wanted: Callable[[Obj], bool]
) -> list[tuple[str, int, str]]:
    """The endpoints of the Service's EndpointSlices whose conditions are ``wanted``: (ip, first
    port, pod name), sorted."""
    found = []
    slices = store.resource("discovery.k8s.io", "endpointslices")
    for endpoint_slice in store.iter(slices, namespace):
        if (endpoint_slice["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL) != service:
            continue
        ports = endpoint_slice.get("ports") or []
        if not ports:
            continue
        for endpoint in endpoint_slice.get("endpoints") or []:
            if wanted(endpoint.get("conditions") or {}):
                found.append((endpoint["addresses"][0], int(ports[0]["port"]), endpoint["targetRef"]["name"]))
    return sorted(found)


def ready_endpoints(store: Store, namespace: str, service: str) -> list[tuple[str, int, str]]:
    """The Service's ready endpoints from its EndpointSlices: (ip, first port, pod name), sorted."""
    return _slice_endpoints(store, namespace, service, lambda conditions: bool(conditions.get("ready")))


def routed_endpoints(store: Store, namespace: str, service: str) -> list[tuple[str, int, str]]:
    """Where kube-proxy sends the Service's traffic: its ready endpoints, else, when none is ready,
    those still serving while they terminate (its CategorizeEndpoints' fallback), as
    :func:`ready_endpoints` lists them."""
    return ready_endpoints(store, namespace, service) or _slice_endpoints(
        store, namespace, service, lambda conditions: bool(conditions.get("serving") and conditions.get("terminating"))
    )
