"""Which of a Service's pods the sandbox's endpoints controller publishes, and as what, as
kube-controller-manager's endpoints and endpointslice controllers do (ShouldPodBeInEndpoints and the
EndpointSlice conditions): a pod with an IP that has not ended is in; a terminating pod is in the
EndpointSlices only, never ready, unless the Service publishes not-ready addresses."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from neuronfleet.sandbox.clock import Clock
from neuronfleet.sandbox.endpoints import EndpointsController, ready_endpoints, routed_endpoints
from neuronfleet.sandbox.store import Store

#: name -> (phase, Ready condition, terminating, pod IP)
PODS = {
    "serving": ("Running", True, False, "10.1.0.1"),
    "starting": ("Pending", False, False, "10.1.0.2"),
    "leaving": ("Running", True, True, "10.1.0.3"),
    "done": ("Succeeded", False, False, "10.1.0.4"),
    "unplaced": ("Pending", False, False, ""),
}


def _cluster(*, publish_not_ready: bool, target_port: int | str = 8080) -> tuple[Store, EndpointsController]:
    clock = Clock()
    clock.bind(asyncio.get_running_loop())
    store = Store(clock)
    store.graceful_pods = True  # a running pod's deletion waits for its kubelet: it stays terminating
    controller = EndpointsController(store)
    pods = store.resource("", "pods")
    service = {
        "metadata": {"name": "model"},
        "spec": {
            "selector": {"app": "model"},
            "ports": [{"name": "http", "port": 80, "targetPort": target_port}],
            "publishNotReadyAddresses": publish_not_ready,
        },
    }
    store.create(store.resource("", "services"), "default", service)
    for name, (phase, ready, terminating, ip) in PODS.items():
        body = {
            "metadata": {"name": name, "labels": {"app": "model"}},
            "spec": {
                "containers": [
                    {"name": "server", "image": "neuronserve:1", "ports": [{"name": "http", "containerPort": 8080}]}
                ],
                "nodeName": "node-1",
            },
        }
        store.create(pods, "default", body)

        def status(o: dict[str, Any], phase: str = phase, ready: bool = ready, ip: str = ip) -> None:
            o["status"] = {
                "phase": phase,
                "conditions": [{"type": "Ready", "status": str(ready)}],
                **({"podIP": ip, "podIPs": [{"ip": ip}]} if ip else {}),
            }

        store.update(pods, "default", name, status, subresource="status")
        if terminating:
            store.delete(pods, "default", name, grace_period=30)
    controller.sync()
    return store, controller


def _endpoints(store: Store) -> dict[str, list[str]]:
    (subset,) = store.get(store.resource("", "endpoints"), "default", "model")["subsets"]
    assert subset["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    return {
        key: sorted(address["targetRef"]["name"] for address in subset.get(key) or [])
        for key in ("addresses", "notReadyAddresses")
    }


def _slice_conditions(store: Store) -> dict[str, tuple[bool, bool, bool]]:
    (endpoint_slice,) = store.iter(store.resource("discovery.k8s.io", "endpointslices"), "default")
    return {
        endpoint["targetRef"]["name"]: (
            endpoint["conditions"]["ready"],
            endpoint["conditions"]["serving"],
            endpoint["conditions"]["terminating"],
        )
        for endpoint in endpoint_slice["endpoints"]
    }


#: (publishNotReadyAddresses, the Endpoints' addresses, each slice endpoint's (ready, serving,
#: terminating)); an ended pod and one without an IP are in neither. Without it a terminating pod
#: is in the EndpointSlices only, and a pending one with an IP is not ready; with it every pod with
#: an IP is published ready, terminating ones too.
PUBLISHED = [
    (
        False,
        {"addresses": ["serving"], "notReadyAddresses": ["starting"]},
        {"leaving": (False, True, True), "serving": (True, True, False), "starting": (False, False, False)},
    ),
    (
        True,
        {"addresses": ["leaving", "serving", "starting"], "notReadyAddresses": []},
        {"leaving": (True, True, True), "serving": (True, True, False), "starting": (True, False, False)},
    ),
]


@pytest.mark.looptime
@pytest.mark.parametrize(("publish_not_ready", "endpoints", "conditions"), PUBLISHED, ids=["default", "publish"])
async def test_which_pods_the_endpoints_and_their_slices_hold(
    publish_not_ready: bool, endpoints: dict[str, list[str]], conditions: dict[str, tuple[bool, bool, bool]]
) -> None:
    store, _ = _cluster(publish_not_ready=publish_not_ready)
    assert store.get(store.resource("", "pods"), "default", "leaving")["metadata"].get("deletionTimestamp")
    assert _endpoints(store) == endpoints
    assert _slice_conditions(store) == conditions


@pytest.mark.looptime
async def test_a_later_sync_follows_the_pods_and_ports_and_drops_the_slice_of_a_port_gone() -> None:
    store, controller = _cluster(publish_not_ready=False)
    pods, services = store.resource("", "pods"), store.resource("", "services")
    slices = store.resource("discovery.k8s.io", "endpointslices")

    def ready(o: dict[str, Any]) -> None:
        o["status"].update(phase="Running", conditions=[{"type": "Ready", "status": "True"}])

    store.update(pods, "default", "starting", ready, subresource="status")
    store.delete(pods, "default", "leaving", grace_period=0)
    controller.sync()
    assert _endpoints(store) == {"addresses": ["serving", "starting"], "notReadyAddresses": []}
    assert _slice_conditions(store) == {"serving": (True, True, False), "starting": (True, True, False)}

    def new_port(o: dict[str, Any]) -> None:
        o["spec"]["ports"][0]["targetPort"] = 9090

    store.update(services, "default", "model", new_port)
    controller.sync()
    assert [s["metadata"]["name"] for s in store.iter(slices, "default")] == ["model-9090"]


@pytest.mark.looptime
async def test_traffic_goes_to_the_ready_endpoints_else_to_those_serving_while_they_terminate() -> None:
    # kube-proxy's CategorizeEndpoints: with no ready endpoint anywhere it falls back to the serving
    # terminating ones (a pod deleted but still Ready, draining), rather than refusing every request.
    store, controller = _cluster(publish_not_ready=False)
    assert [name for _, _, name in routed_endpoints(store, "default", "model")] == ["serving"]
    store.delete(store.resource("", "pods"), "default", "serving", grace_period=30)
    controller.sync()
    assert ready_endpoints(store, "default", "model") == []
    assert [name for _, _, name in routed_endpoints(store, "default", "model")] == ["serving", "leaving"]


@pytest.mark.looptime
async def test_a_named_target_port_is_the_container_port_of_that_name() -> None:
    store, _ = _cluster(publish_not_ready=False, target_port="http")
    assert _endpoints(store) == {"addresses": ["serving"], "notReadyAddresses": ["starting"]}  # at 8080
