"""The sandbox API server says and refuses what kube-apiserver says and refuses (issue 14): node
objects the official client can read, name rules, Kubernetes-style messages, unknown-field warnings."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from neuronfleet.api.v1alpha1 import NAME_RULE_MESSAGE
from neuronfleet.sandbox import SandboxCluster, ThreadedSandboxCluster

GROUP, VERSION, PLURAL = "serving.neuronfleet.dev", "v1alpha1", "inferencedeployments"


def api_client(cluster: ThreadedSandboxCluster) -> kubernetes.client.ApiClient:
    config = kubernetes.client.Configuration()
    config.host = cluster.url
    return kubernetes.client.ApiClient(config)


def deployment(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceDeployment",
        "metadata": {"name": name},
        "spec": {"model": {"source": "s3://acme-models/bert/"}, **spec},
    }


def raw_patch(
    cluster: ThreadedSandboxCluster, name: str, content_type: str, patch: Any
) -> tuple[int, Any, dict[str, Any]]:
    request = urllib.request.Request(
        f"{cluster.url}/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}/{name}",
        data=json.dumps(patch).encode(),
        method="PATCH",
        headers={"Content-Type": content_type, "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, json.loads(exc.read())


def error_of(call: Any) -> tuple[int, dict[str, Any], str]:
    with pytest.raises(ApiException) as raised:
        call()
    body: dict[str, Any] = json.loads(raised.value.body)
    return int(raised.value.status), body, str(body.get("message", ""))


def test_official_client_lists_nodes(threaded_sandbox_cluster: ThreadedSandboxCluster) -> None:
    nodes = kubernetes.client.CoreV1Api(api_client(threaded_sandbox_cluster)).list_node().items
    assert len(nodes) == 2
    info = nodes[0].status.node_info
    assert info.boot_id and info.machine_id and info.system_uuid and info.kernel_version
    assert info.kube_proxy_version and info.kubelet_version.startswith("v1.34")
    assert len({n.status.node_info.machine_id for n in nodes}) == 2


@pytest.mark.parametrize("name", ["a.b", "1abc", "Upper", "ends-"])
def test_inference_deployment_names_must_be_dns_1035_labels(
    threaded_sandbox_cluster: ThreadedSandboxCluster, name: str
) -> None:
    api = kubernetes.client.CustomObjectsApi(api_client(threaded_sandbox_cluster))
    code, body, message = error_of(
        lambda: api.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, deployment(name))
    )
    assert code == 422
    assert NAME_RULE_MESSAGE in message
    if name in ("a.b", "1abc"):  # valid DNS-1123 subdomains: only the CRD's CEL rule refuses them
        assert message == (
            f'InferenceDeployment.serving.neuronfleet.dev "{name}" is invalid: '
            f'<nil>: Invalid value: "object": {NAME_RULE_MESSAGE}'
        )
    assert {"field": "<nil>", "message": f'Invalid value: "object": {NAME_RULE_MESSAGE}'}.items() <= (
        body["details"]["causes"][-1].items()
    )


def test_built_in_names_follow_their_kind(threaded_sandbox_cluster: ThreadedSandboxCluster) -> None:
    core = kubernetes.client.CoreV1Api(api_client(threaded_sandbox_cluster))
    service = {"metadata": {"name": "1abc"}, "spec": {"ports": [{"port": 80}]}}
    code, _, message = error_of(lambda: core.create_namespaced_service("default", service))
    assert code == 422
    assert message.startswith('Service "1abc" is invalid: metadata.name: Invalid value: "1abc": a DNS-1035 label')
    dotted = {"metadata": {"name": "a.b"}, "spec": {"ports": [{"port": 80}]}}
    assert "a DNS-1035 label" in error_of(lambda: core.create_namespaced_service("default", dotted))[2]
    # Pods are DNS-1123 subdomains: a dot and a leading digit are fine, 254 characters are not.
    pod = {"metadata": {"name": "1a.b"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    assert core.create_namespaced_pod("default", pod).metadata.name == "1a.b"
    long_pod = {"metadata": {"name": "a" * 254}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    code, _, message = error_of(lambda: core.create_namespaced_pod("default", long_pod))
    assert code == 422
    assert message == f'Pod "{"a" * 254}" is invalid: metadata.name: Invalid value: "{"a" * 254}": ' + (
        "must be no more than 253 characters"
    )
    namespace = {"metadata": {"name": "a.b"}}
    assert "RFC 1123 label" in error_of(lambda: core.create_namespace(namespace))[2]


def test_a_priority_class_keeps_its_value_and_preemption_policy(
    threaded_sandbox_cluster: ThreadedSandboxCluster,
) -> None:
    """kube-apiserver's ValidatePriorityClassUpdate: value and preemptionPolicy are immutable, so a
    ``helm upgrade`` changing priorityClasses.servingValue fails there; the rest may change."""
    scheduling = kubernetes.client.SchedulingV1Api(api_client(threaded_sandbox_cluster))
    scheduling.create_priority_class({"metadata": {"name": "neuronfleet-active"}, "value": 1000})
    code, body, message = error_of(lambda: scheduling.patch_priority_class("neuronfleet-active", {"value": 100000}))
    assert code == 422
    assert message == (
        'PriorityClass.scheduling.k8s.io "neuronfleet-active" is invalid: value: Forbidden: may not be changed in '
        "an update."
    )
    assert body["details"]["causes"] == [
        {"reason": "FieldValueForbidden", "message": "Forbidden: may not be changed in an update.", "field": "value"}
    ]
    code, _, message = error_of(
        lambda: scheduling.patch_priority_class("neuronfleet-active", {"preemptionPolicy": "Never"})
    )
    assert code == 422
    assert message.endswith('is invalid: preemptionPolicy: Invalid value: "Never": field is immutable')
    changed = scheduling.patch_priority_class(
        "neuronfleet-active", {"description": "d", "metadata": {"labels": {"a": "b"}}}
    )
    assert (changed.value, changed.description, changed.preemption_policy) == (1000, "d", "PreemptLowerPriority")
    # Replaced whole with the same value: allowed.
    current = scheduling.read_priority_class("neuronfleet-active")
    current.description = "e"
    assert scheduling.replace_priority_class("neuronfleet-active", current).value == 1000


def test_long_inference_deployment_name_gets_the_length_message(
    threaded_sandbox_cluster: ThreadedSandboxCluster,
) -> None:
    api = kubernetes.client.CustomObjectsApi(api_client(threaded_sandbox_cluster))
    _, _, message = error_of(
        lambda: api.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, deployment("a" * 254))
    )
    assert 'metadata.name: Invalid value: "' + "a" * 254 + '": must be no more than 253 characters' in message
    assert "RFC 1123 subdomain must consist" not in message


def test_messages_read_like_kubernetes(threaded_sandbox_cluster: ThreadedSandboxCluster) -> None:
    api = kubernetes.client.CustomObjectsApi(api_client(threaded_sandbox_cluster))
    inverted = deployment("inverted", scaling={"minReplicas": 8, "maxReplicas": 2})
    _, _, message = error_of(lambda: api.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, inverted))
    assert 'spec.scaling.minReplicas: Invalid value: "object": minReplicas must not exceed maxReplicas' in message
    assert '"dict"' not in message

    no_spec = deployment("no-spec")
    del no_spec["spec"]
    _, body, message = error_of(lambda: api.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, no_spec))
    assert message == 'InferenceDeployment.serving.neuronfleet.dev "no-spec" is invalid: spec: Required value'
    assert body["details"]["causes"][0]["field"] == "spec"

    api.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, deployment("bert"))
    remove_missing = [{"op": "remove", "path": "/spec/model/nope"}]
    code, _, body = raw_patch(threaded_sandbox_cluster, "bert", "application/json-patch+json", remove_missing)
    assert code == 422
    message = body["message"]
    assert message == (
        "the server rejected our request due to an error in our request: error in remove for path: "
        "'/spec/model/nope': Unable to remove nonexistent key: nope: missing value"
    )
    assert "{" not in message


def test_unknown_fields_in_a_merge_patch_are_dropped_with_a_warning(
    threaded_sandbox_cluster: ThreadedSandboxCluster,
) -> None:
    client = api_client(threaded_sandbox_cluster)
    kubernetes.client.CustomObjectsApi(client).create_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, deployment("bert")
    )
    code, headers, stored = raw_patch(
        threaded_sandbox_cluster, "bert", "application/merge-patch+json", {"spec": {"foo": 1, "scaling": {"bar": 2}}}
    )
    assert code == 200
    warnings = headers.get_all("Warning") or []
    assert '299 - "unknown field \\"spec.foo\\""' in warnings
    assert '299 - "unknown field \\"spec.scaling.bar\\""' in warnings
    assert "foo" not in stored["spec"]


async def test_bind_pod_lives_in_the_store(sandbox_cluster: SandboxCluster) -> None:
    sandbox_cluster.create(
        "pods", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}, "default"
    )
    bound = sandbox_cluster.store.bind_pod("default", "p", "somewhere")
    assert bound["spec"]["nodeName"] == "somewhere"
    from neuronfleet.sandbox import apiserver

    assert not hasattr(apiserver, "bind_pod")
