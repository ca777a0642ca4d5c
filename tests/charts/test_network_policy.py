"""The chart's NetworkPolicies (networkPolicy.enabled): who may connect to what.

The rendered policies are read the way a network plugin reads them (:func:`admits`: a connection
to a pod's named port is let in when a policy selecting the pod has a rule for that port whose
peers match the caller), against the labels the operator really puts on its pods
(neuronfleet.kube.builders) and on the operator's pods (the chart's Deployment), so a selector
that drifted from those labels, or a rule that lets in everyone, fails here.
"""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest
import yaml
from chart_support import CHART, CI_VALUES, MINIMAL_VALUES, by_kind, helm, render

from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.kube.builders import PORT_NAME, common_labels, pod_labels
from neuronfleet.planning.labels import LABEL_MANAGED_BY, MANAGED_BY

KUBERNETES_VERSION = "1.34.0"
RELEASE_NS = "neuronfleet-system"
NAMESPACED = ["networkPolicy.enabled=true", "operator.watchNamespaces={search,chat}"]
PROMETHEUS = {"app.kubernetes.io/name": "prometheus"}


def _matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A label selector as Kubernetes evaluates it ({} selects everything)."""
    selector = selector or {}
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def _namespace_labels(name: str) -> dict[str, str]:
    return {"kubernetes.io/metadata.name": name}


def _peer_matches(peer: dict[str, Any], policy_ns: str, source_ns: str, source_labels: dict[str, str]) -> bool:
    assert "ipBlock" not in peer, "no ipBlock in these tests"
    if "namespaceSelector" in peer:
        if not _matches(peer["namespaceSelector"], _namespace_labels(source_ns)):
            return False
    elif source_ns != policy_ns:
        return False  # a podSelector alone selects pods of the policy's namespace
    return _matches(peer.get("podSelector"), source_labels)


def admits(
    policies: list[dict[str, Any]],
    target_ns: str,
    target_labels: dict[str, str],
    port: str,
    source_ns: str,
    source_labels: dict[str, str],
) -> bool:
    """Whether a pod (``source_*``) may connect to port ``port`` of a pod (``target_*``), by the
    ingress policies given (a pod no policy selects takes every connection)."""
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == target_ns
        and "Ingress" in p["spec"]["policyTypes"]
        and _matches(p["spec"]["podSelector"], target_labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            ports = rule.get("ports")
            if ports is not None and not any(p.get("port") == port for p in ports):
                continue
            peers = rule.get("from")
            if peers is None or any(_peer_matches(peer, target_ns, source_ns, source_labels) for peer in peers):
                return True
    return False


def _deployment() -> InferenceDeployment:
    doc = yaml.safe_load((CHART.parents[1] / "examples" / "bert-embeddings.yaml").read_text())
    doc["metadata"]["namespace"] = "search"
    return InferenceDeployment.model_validate(doc)


def _serving_pod() -> dict[str, str]:
    return pod_labels(_deployment(), "active", "template", "revision")


def _operator_pod(docs: list[dict[str, Any]]) -> tuple[dict[str, str], set[str]]:
    """The operator pod's labels and its container's port names."""
    (deployment,) = by_kind(docs, "Deployment")
    template = deployment["spec"]["template"]
    (container,) = template["spec"]["containers"]
    return template["metadata"]["labels"], {p["name"] for p in container.get("ports") or []}


def _policies(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    policies = by_kind(docs, "NetworkPolicy")
    for policy in policies:
        kubernetes_validate.validate(policy, KUBERNETES_VERSION, strict=True)
    return policies


def test_off_by_default() -> None:
    assert not by_kind(render(), "NetworkPolicy")
    assert not by_kind(render(sets=["operator.watchNamespaces={search}"]), "NetworkPolicy")


def test_the_operator_takes_its_metrics_scrape_from_its_namespace_and_monitoring_and_its_probe_from_anywhere() -> None:
    docs = render(sets=NAMESPACED, namespace=RELEASE_NS)
    policies = _policies(docs)
    (policy,) = [p for p in policies if p["metadata"]["namespace"] == RELEASE_NS]
    operator, ports = _operator_pod(docs)
    assert ports == {"healthz", "metrics"}
    # It selects the operator's pods, by the Deployment's own selector.
    (deployment,) = by_kind(docs, "Deployment")
    assert policy["spec"]["podSelector"] == deployment["spec"]["selector"]
    assert _matches(policy["spec"]["podSelector"], operator)
    neighbour = {"app": "grafana"}
    assert admits(policies, RELEASE_NS, operator, "metrics", RELEASE_NS, neighbour)
    assert not admits(policies, RELEASE_NS, operator, "metrics", "search", neighbour)
    # The usual Prometheus (the operator PodMonitor's, in monitoring): were its scrape refused,
    # NeuronfleetOperatorDown would fire for good.
    assert admits(policies, RELEASE_NS, operator, "metrics", "monitoring", PROMETHEUS)
    assert not admits(policies, RELEASE_NS, operator, "metrics", "monitoring", {"app": "grafana"})
    assert not admits(policies, RELEASE_NS, operator, "metrics", "search", PROMETHEUS)
    assert admits(policies, RELEASE_NS, operator, "healthz", "search", neighbour)
    # No other port is open.
    assert not admits(policies, RELEASE_NS, operator, "debug", RELEASE_NS, neighbour)


def test_the_pods_the_operator_makes_take_the_serving_port_from_their_namespace_and_prometheus() -> None:
    docs = render(sets=NAMESPACED, namespace=RELEASE_NS)
    policies = _policies(docs)
    workloads = sorted(
        (p for p in policies if p["metadata"]["namespace"] != RELEASE_NS), key=lambda p: p["metadata"]["namespace"]
    )
    assert [p["metadata"]["namespace"] for p in workloads] == ["chat", "search"]
    for policy in workloads:
        assert policy["spec"]["podSelector"] == {"matchLabels": {LABEL_MANAGED_BY: MANAGED_BY}}
    serving = _serving_pod()
    assert PORT_NAME == "http"
    client = {"app": "search-frontend"}
    assert admits(policies, "search", serving, PORT_NAME, "search", client)
    assert not admits(policies, "search", serving, PORT_NAME, "chat", client)
    assert not admits(policies, "search", serving, PORT_NAME, RELEASE_NS, client)
    assert admits(policies, "search", serving, PORT_NAME, "monitoring", PROMETHEUS)
    # The port takes inference requests too: a pod of another namespace labelled as Prometheus
    # (any tenant may label its own pod so) is not the monitoring namespace's Prometheus.
    assert not admits(policies, "search", serving, PORT_NAME, "team-b", PROMETHEUS)
    assert not admits(policies, "search", serving, PORT_NAME, "chat", PROMETHEUS)
    assert not admits(policies, "search", serving, PORT_NAME, "monitoring", {"app": "grafana"})
    assert not admits(policies, "search", serving, "grpc", "search", client)
    # The compile Jobs' and the placeholders' pods carry the label and have no port `http`: no
    # connection reaches them.
    compile_pod = common_labels(_deployment(), "compile")
    assert _matches(workloads[0]["spec"]["podSelector"], compile_pod)
    # The operator's pods are not the workloads': the release namespace's policy is the only one.
    operator, _ = _operator_pod(docs)
    assert not _matches(workloads[0]["spec"]["podSelector"], operator)


def test_the_selectors_are_configurable() -> None:
    monitoring = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": PROMETHEUS},
    }
    docs = render([CI_VALUES], namespace=RELEASE_NS)
    policies = _policies(docs)
    operator, _ = _operator_pod(docs)
    serving = _serving_pod()
    assert admits(policies, RELEASE_NS, operator, "metrics", "monitoring", PROMETHEUS)
    assert not admits(policies, RELEASE_NS, operator, "metrics", RELEASE_NS, {"app": "grafana"})
    assert not admits(policies, RELEASE_NS, operator, "metrics", "elsewhere", PROMETHEUS)
    assert admits(policies, "search", serving, PORT_NAME, "monitoring", PROMETHEUS)
    assert not admits(policies, "search", serving, PORT_NAME, "elsewhere", PROMETHEUS)
    (search,) = [p for p in policies if p["metadata"]["namespace"] == "search"]
    assert monitoring in search["spec"]["ingress"][0]["from"]
    # An ingress controller of another namespace, named in servingFrom.
    ingress = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
    result = helm(
        "template", "nf", str(CHART), "--namespace", RELEASE_NS, "--values", str(MINIMAL_VALUES),
        *(arg for item in NAMESPACED for arg in ("--set", item)),
        "--set-json", f"networkPolicy.servingFrom={json.dumps([ingress])}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    policies = _policies([doc for doc in yaml.safe_load_all(result.stdout) if doc])
    assert admits(policies, "chat", serving, PORT_NAME, "ingress-nginx", {"app": "controller"})
    assert not admits(policies, "chat", serving, PORT_NAME, "chat", {"app": "chat-frontend"})


@pytest.mark.parametrize(
    "sets",
    [
        ["networkPolicy.metricsFrom=null"],
        ["networkPolicy.servingFrom=null", "networkPolicy.prometheusFrom=null"],
        ["liveness.enabled=false", "operator.metricsPort=0"],
    ],
    ids=["no-metrics-peers", "no-serving-peers", "no-operator-ports"],
)
def test_an_empty_peer_list_lets_no_one_in_not_everyone(sets: list[str]) -> None:
    # A rule without `from` lets in every source: an empty list must drop the rule instead.
    result = helm(
        "template", "nf", str(CHART), "--namespace", RELEASE_NS, "--values", str(MINIMAL_VALUES),
        *(arg for item in NAMESPACED for arg in ("--set", item)),
        *(arg for item in sets for arg in ("--set-json", item.replace("=null", "=[]"))),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    policies = _policies(docs)
    for policy in policies:
        for rule in policy["spec"]["ingress"]:
            assert rule.get("from"), f"{policy['metadata']['name']}: a rule open to every source"
    operator, _ = _operator_pod(docs)
    anyone = ("search", {"app": "x"})
    if "metricsFrom" in sets[0]:
        assert not admits(policies, RELEASE_NS, operator, "metrics", RELEASE_NS, {"app": "x"})
        assert admits(policies, RELEASE_NS, operator, "healthz", *anyone)
    elif "servingFrom" in sets[0]:
        assert not admits(policies, "search", _serving_pod(), PORT_NAME, *anyone)
        assert not admits(policies, "search", _serving_pod(), PORT_NAME, "monitoring", PROMETHEUS)
    else:
        (policy,) = [p for p in policies if p["metadata"]["namespace"] == RELEASE_NS]
        assert policy["spec"]["ingress"] == []


def test_cluster_wide_the_workloads_policy_is_left_to_the_user_and_the_notes_say_so() -> None:
    docs = render(sets=["networkPolicy.enabled=true"], namespace=RELEASE_NS)
    (policy,) = _policies(docs)
    assert policy["metadata"]["namespace"] == RELEASE_NS
    args = ["install", "nf", str(CHART), "--dry-run=client", "--namespace", RELEASE_NS]
    args += ["--values", str(MINIMAL_VALUES), "--set", "networkPolicy.enabled=true"]
    result = helm(*args)
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("\nNOTES:\n", 1)[1]
    assert "NetworkPolicy: the operator's pods only" in notes
    assert 'docs/install-eks.md ("Network traffic")' in notes
    namespaced = helm(*args, *(arg for item in NAMESPACED for arg in ("--set", item)))
    assert "the pods it creates in search, chat" in namespaced.stdout.split("\nNOTES:\n", 1)[1]
    assert "NetworkPolicy" not in helm(*args[:-2]).stdout.split("\nNOTES:\n", 1)[1]


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ('networkPolicy.metricsFrom=[{"podSelectr": {}}]', "/networkPolicy/metricsFrom/0"),
        ("networkPolicy.servingFrom=[{}]", "/networkPolicy/servingFrom/0"),
        ('networkPolicy.prometheusFrom=[{"ipBlock": {}}]', "/networkPolicy/prometheusFrom/0/ipBlock"),
        ('networkPolicy.servingFrom=[{"podSelector": {"matchLabels": {"a": 1}}}]', "/networkPolicy/servingFrom/0"),
    ],
)
def test_bad_peers_fail_with_a_clear_message(setting: str, complaint: str) -> None:
    result = helm("template", "nf", str(CHART), "--values", str(MINIMAL_VALUES), "--set-json", setting)
    assert result.returncode != 0
    assert complaint in result.stderr
