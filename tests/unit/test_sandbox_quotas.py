"""The sandbox's ResourceQuota arithmetic (sandbox.quotas): what a pod counts, the resources a quota
must find set, and quantities printed as resource.Quantity prints them."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from neuronfleet.sandbox.clock import Clock
from neuronfleet.sandbox.quotas import (
    format_quantity,
    namespace_quota_usage,
    pod_quota_usage,
    quota_constraint_problem,
    quota_tracks_for_pods,
)
from neuronfleet.sandbox.resourcequota import QuotaController
from neuronfleet.sandbox.store import Store


def container(
    name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None
) -> dict[str, Any]:
    return {"name": name, "resources": {"requests": requests or {}, "limits": limits or {}}}


@pytest.mark.parametrize(
    ("name", "tracked"),
    [
        ("pods", True),
        ("limits.cpu", True),
        ("requests.aws.amazon.com/neuroncore", True),
        ("limits.aws.amazon.com/neuroncore", False),  # only requests of an extended resource
        ("requests.example.kubernetes.io/thing", False),  # native
        ("services", False),
        ("count/pods", False),  # not emulated
    ],
)
def test_quota_tracks_for_pods(name: str, tracked: bool) -> None:
    assert quota_tracks_for_pods(name) is tracked


def test_pod_usage_sums_containers_takes_the_init_maximum_and_defaults_requests_to_limits() -> None:
    spec = {
        "containers": [
            container("a", {"cpu": "500m"}, {"memory": "1Gi", "aws.amazon.com/neuroncore": "2"}),
            container("b", {"cpu": "1", "memory": "512Mi"}),
        ],
        "initContainers": [container("init", {"cpu": "2"})],
    }
    assert pod_quota_usage(spec) == {
        "pods": 1,
        "cpu": 2,
        "requests.cpu": 2,
        "memory": Decimal(1536 * 2**20),
        "requests.memory": Decimal(1536 * 2**20),
        "limits.memory": Decimal(2**30),
        "requests.aws.amazon.com/neuroncore": 2,
    }


def test_an_init_containers_request_alone_is_the_pods() -> None:
    # A resource only an init container asks for, less than one unit: the pod takes exactly that.
    spec = {"containers": [container("main")], "initContainers": [container("init", {"cpu": "250m"})]}
    assert pod_quota_usage(spec) == {"pods": 1, "cpu": Decimal("0.25"), "requests.cpu": Decimal("0.25")}


def test_terminal_pods_use_nothing() -> None:
    running = {"spec": {"containers": [container("a", {"cpu": "1"})]}, "status": {"phase": "Running"}}
    done = {"spec": {"containers": [container("a", {"cpu": "1"})]}, "status": {"phase": "Succeeded"}}
    assert namespace_quota_usage([running, done, running])["requests.cpu"] == 2


def test_must_specify_lists_each_resource_sorted_with_its_containers() -> None:
    spec = {
        "containers": [container("b", {"cpu": "1"}), container("a")],
        "initContainers": [container("c", {"memory": "1"})],
    }
    tracked = {"limits.cpu", "requests.cpu", "pods", "requests.aws.amazon.com/neuroncore"}
    assert quota_constraint_problem(spec, tracked) == "must specify limits.cpu for: a,b,c; requests.cpu for: a,c"
    assert quota_constraint_problem(spec, {"pods", "requests.aws.amazon.com/neuroncore"}) == ""


@pytest.mark.parametrize(
    ("value", "resource", "shown"),
    [
        (Decimal(0), "requests.memory", "0"),
        (Decimal(8 * 2**30), "requests.memory", "8Gi"),
        (Decimal(1536 * 2**20), "limits.memory", "1536Mi"),
        (Decimal(3 * 2**10), "memory", "3Ki"),
        (Decimal(2**40), "requests.memory", "1Ti"),
        (Decimal(3 * 2**50), "limits.memory", "3Pi"),
        (Decimal(2**60), "memory", "1Ei"),
        (Decimal(1500), "memory", "1500"),
        (Decimal("0.5"), "cpu", "500m"),
        (Decimal("2.1"), "limits.cpu", "2100m"),
        (Decimal(4), "limits.cpu", "4"),
        (Decimal(2000), "requests.cpu", "2k"),
        (Decimal(2 * 10**18), "requests.cpu", "2E"),
        (Decimal(3), "requests.aws.amazon.com/neuroncore", "3"),
    ],
)
def test_quantities_print_as_the_api_server_prints_them(value: Decimal, resource: str, shown: str) -> None:
    assert format_quantity(value, resource) == shown


def test_a_quota_made_after_its_pods_or_changed_gets_its_status_without_a_pod_event() -> None:
    # The controller marks a namespace when one of its quotas is made or its spec changes, not only
    # when a pod comes or goes: a quota made after its pods showed no usage until the next pod event.
    store = Store(Clock())
    controller = QuotaController(store)
    pod = {"metadata": {"name": "m"}, "spec": {"containers": [container("server", {"cpu": "2"}, {"cpu": "2"})]}}
    store.create(store.resource("", "pods"), "default", pod)
    controller.sync()
    quotas = store.resource("", "resourcequotas")
    store.create(quotas, "default", {"metadata": {"name": "q"}, "spec": {"hard": {"requests.cpu": "4"}}})
    controller.sync()
    assert store.get(quotas, "default", "q")["status"] == {"hard": {"requests.cpu": "4"}, "used": {"requests.cpu": "2"}}

    def raise_hard(o: dict[str, Any]) -> None:
        o["spec"]["hard"]["requests.cpu"] = "8"

    store.update(quotas, "default", "q", raise_hard)
    controller.sync()
    assert store.get(quotas, "default", "q")["status"]["hard"] == {"requests.cpu": "8"}


def test_a_pod_that_ends_leaves_its_quotas_usage_without_being_deleted() -> None:
    store = Store(Clock())
    controller = QuotaController(store)
    pods, quotas = store.resource("", "pods"), store.resource("", "resourcequotas")
    pod = {"metadata": {"name": "m"}, "spec": {"containers": [container("server", {"cpu": "2"}, {"cpu": "2"})]}}
    store.create(pods, "default", pod)
    store.create(quotas, "default", {"metadata": {"name": "q"}, "spec": {"hard": {"requests.cpu": "4"}}})
    controller.sync()
    assert store.get(quotas, "default", "q")["status"]["used"] == {"requests.cpu": "2"}

    def failed(o: dict[str, Any]) -> None:
        o["status"] = {"phase": "Failed"}

    store.update(pods, "default", "m", failed, subresource="status")
    controller.sync()
    assert store.get(quotas, "default", "q")["status"]["used"] == {"requests.cpu": "0"}
