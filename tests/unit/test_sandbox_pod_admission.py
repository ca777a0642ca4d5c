"""What the sandbox API server fills in and refuses when a pod is created, as kube-apiserver's pod
defaulting and validation do: the not-ready and unreachable tolerations, the QoS class, a pod
without containers."""

from __future__ import annotations

from typing import Any

import pytest

from neuronfleet.sandbox.clock import Clock
from neuronfleet.sandbox.errors import ApiError
from neuronfleet.sandbox.store import Store

NOT_READY, UNREACHABLE = "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"


def _create(spec: dict[str, Any]) -> dict[str, Any]:
    store = Store(Clock())
    return store.create(store.resource("", "pods"), "default", {"metadata": {"name": "p"}, "spec": spec})


def _container(**resources: dict[str, str]) -> dict[str, Any]:
    return {"name": "c", "image": "i", "resources": resources}


def test_a_pod_gets_both_default_tolerations_once() -> None:
    tolerations = _create({"containers": [_container()]})["spec"]["tolerations"]
    assert tolerations == [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        for key in (NOT_READY, UNREACHABLE)
    ]
    own = {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}
    tolerations = _create({"containers": [_container()], "tolerations": [own]})["spec"]["tolerations"]
    assert [t["key"] for t in tolerations] == [NOT_READY, UNREACHABLE]  # its own kept, no second one
    assert tolerations[0]["tolerationSeconds"] == 30


@pytest.mark.parametrize(
    ("resources", "qos"),
    [
        ({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}, "Guaranteed"),
        ({"limits": {"cpu": "1", "memory": "1Gi"}}, "Guaranteed"),  # requests default to the limits
        ({"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}, "Burstable"),
        ({"limits": {"cpu": "1"}}, "Burstable"),  # memory unlimited
        ({}, "BestEffort"),
    ],
)
def test_the_qos_class_follows_requests_and_limits(resources: dict[str, dict[str, str]], qos: str) -> None:
    assert _create({"containers": [_container(**resources)]})["status"]["qosClass"] == qos


@pytest.mark.parametrize("spec", [{}, {"containers": []}, {"containers": "c"}])
def test_a_pod_without_containers_is_refused(spec: dict[str, Any]) -> None:
    with pytest.raises(ApiError) as refused:
        _create(spec)
    assert refused.value.code == 422
    assert refused.value.message == 'Pod "p" is invalid: spec.containers: Required value'
