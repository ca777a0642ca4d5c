"""A shrink on the sandbox leaves a node empty, and the sandbox's consolidation removes it.

The sandbox's inf2.xlarge nodes hold two 1-core replicas each; a node with no pod on it goes after
30 s (Karpenter's ``WhenEmpty`` consolidation, the NodePool of docs/install-eks.md). A warm pod or
a placeholder left alone on a node keeps it as surely as a serving pod, so the operator counts
every pod of the deployment on a node when it picks what to drain or delete. Where the zones
differ, their spread comes first; the layouts here leave the choice to the node counts.
"""

from __future__ import annotations

from typing import Any

from operator_harness import OperatorHarness, example, ready

NAME = "minilm-embeddings"
ZONE = "us-east-1a"


def layout(harness: OperatorHarness, namespace: str) -> dict[str, list[str]]:
    """Each node holding pods of the deployment: their roles."""
    out: dict[str, list[str]] = {}
    for pod in harness.pods(namespace, NAME):
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            out.setdefault(node, []).append(pod["metadata"]["labels"]["serving.neuronfleet.dev/role"])
    return {node: sorted(roles) for node, roles in sorted(out.items())}


def manifest(
    harness: OperatorHarness, namespace: str, replicas: int, warm: int, placeholders: int, zones: list[str]
) -> dict[str, Any]:
    spec = example(
        "bert-embeddings",
        scaling={"mode": "Manual", "replicas": replicas, "minReplicas": 0},
        warmPool={"mode": "Fixed", "pods": warm, "nodePlaceholders": placeholders},
        placement={"zones": zones},
    )
    return harness.localize(spec, namespace=namespace)


def one_node_left(harness: OperatorHarness, namespace: str, roles: list[str], used: set[str]) -> bool:
    """The deployment's pods are ``roles`` on one node, and the other nodes of ``used`` are gone
    (consolidated)."""
    left = layout(harness, namespace)
    nodes = {n["metadata"]["name"] for n in harness.cluster.list("nodes")}
    return list(left.values()) == [roles] and not (used - set(left)) & nodes


async def wait_for_one_node(harness: OperatorHarness, namespace: str, roles: list[str], used: set[str]) -> None:
    """Wait for :func:`one_node_left`; on a timeout, say where the pods are and which nodes are left."""
    try:
        await harness.wait(
            lambda: one_node_left(harness, namespace, roles, used), timeout=600, what=f"{roles} on one node"
        )
    except TimeoutError as error:
        nodes = [n["metadata"]["name"] for n in harness.cluster.list("nodes")]
        raise AssertionError(f"{error}: pods {layout(harness, namespace)}, nodes {nodes}") from None


async def test_scale_down_beside_a_warm_pod_frees_a_node(harness: OperatorHarness) -> None:
    ns = "packing-warm"
    # One zone: the sandbox packs both actives on one node and the warm pod on another.
    deployment = manifest(harness, ns, replicas=2, warm=1, placeholders=0, zones=[ZONE])
    harness.precompile(deployment)
    await harness.apply(deployment)
    await harness.wait_settled(
        ns,
        NAME,
        lambda: (
            sum(ready(p) for p in harness.pods(ns, NAME, "active")) == 2
            and sum(ready(p) for p in harness.pods(ns, NAME, "warm")) == 1
        ),
        timeout=600,
        what="2 active pods and 1 warm pod ready",
    )
    # Three pods need two nodes: one holds two of them, the other one.
    used = set(layout(harness, ns))
    assert sorted(len(roles) for roles in layout(harness, ns).values()) == [1, 2], layout(harness, ns)

    await harness.scale(ns, NAME, 1)
    # One active and one warm pod fit on one node: the pod that goes is the one alone on its node.
    await wait_for_one_node(harness, ns, ["active", "warm"], used)


async def test_shrinking_the_placeholders_after_a_scale_down_frees_a_node(harness: OperatorHarness) -> None:
    ns = "packing-placeholders"
    # Two zones (the sandbox's two nodes): each node holds an active pod and a placeholder.
    deployment = manifest(harness, ns, replicas=2, warm=0, placeholders=2, zones=[])
    harness.precompile(deployment)
    await harness.apply(deployment)
    await harness.wait_settled(
        ns,
        NAME,
        lambda: (
            sum(ready(p) for p in harness.pods(ns, NAME, "active")) == 2
            and sum(bool((p.get("spec") or {}).get("nodeName")) for p in harness.pods(ns, NAME, "placeholder")) == 2
        ),
        timeout=600,
        what="2 active pods and 2 placeholders on nodes",
    )
    used = set(layout(harness, ns))
    await harness.scale(ns, NAME, 1)
    await harness.wait(
        lambda: len(harness.pods(ns, NAME, "active")) == 1 and not harness.pods(ns, NAME, "draining"),
        timeout=600,
        what="1 active pod, none draining",
    )
    await harness.patch_spec(ns, NAME, {"warmPool": {"mode": "Fixed", "pods": 0, "nodePlaceholders": 1}})
    # The placeholder kept is the one beside the active pod: the other node empties.
    await wait_for_one_node(harness, ns, ["active", "placeholder"], used)
    placement = harness.deployment(ns, NAME)["status"].get("placement") or {}
    assert placement.get("nodes") == 1, placement


def ready_since(pod: dict[str, Any]) -> str:
    """When the pod became ready (its Ready condition's transition time)."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    since: str = next(c["lastTransitionTime"] for c in conditions if c["type"] == "Ready")
    return since


async def test_scale_down_beside_another_model_frees_a_node(harness: OperatorHarness) -> None:
    # Review r9: model A's two replicas on the sandbox's two nodes (one per zone), model B's replica
    # beside the A pod a drain picks on a tie (the newest ready, then the lowest name). Counting only
    # A's pods the operator drained that one, its node held by B anyway, and kept A's other pod alone
    # on its node: two nodes billed for two pods that fit one. Both deployments share a name, in
    # two namespaces: a pod of the other is told apart by its owner, not by its labels.
    a, b = (
        manifest(harness, ns, replicas=replicas, warm=0, placeholders=0, zones=[])
        for ns, replicas in (("shared-a", 2), ("shared-b", 1))
    )
    for m in (a, b):
        m["spec"]["warmPool"] = {"mode": "Off"}
    harness.precompile(a)
    await harness.apply(a)
    await harness.wait_settled(
        "shared-a",
        NAME,
        lambda: sum(ready(p) for p in harness.pods("shared-a", NAME, "active")) == 2,
        timeout=600,
        what="A's 2 active pods ready",
    )
    pods = harness.pods("shared-a", NAME, "active")
    assert len(layout(harness, "shared-a")) == 2, layout(harness, "shared-a")
    newest = max(ready_since(p) for p in pods)
    drained_on_a_tie = min((p for p in pods if ready_since(p) == newest), key=lambda p: p["metadata"]["name"])
    node = harness.cluster.get("nodes", drained_on_a_tie["spec"]["nodeName"])
    assert node is not None
    b["spec"]["placement"] = {"zones": [node["metadata"]["labels"]["topology.kubernetes.io/zone"]]}
    harness.precompile(b)
    await harness.apply(b)
    # (wait_settled follows one deployment's reconciles: B's pod ready is what A's plan must see.)
    await harness.wait(
        lambda: sum(ready(p) for p in harness.pods("shared-b", NAME, "active")) == 1,
        timeout=600,
        what="B's active pod ready",
    )
    assert set(layout(harness, "shared-b")) == {node["metadata"]["name"]}, layout(harness, "shared-b")
    used = set(layout(harness, "shared-a"))

    await harness.scale("shared-a", NAME, 1)

    def one_node() -> bool:
        nodes = {n["metadata"]["name"] for n in harness.cluster.list("nodes")}
        held = set(layout(harness, "shared-a")) | set(layout(harness, "shared-b"))
        return len(harness.pods("shared-a", NAME)) == 1 and len(held) == 1 and not (used - held) & nodes

    try:
        await harness.wait(one_node, timeout=600, what="A's pod beside B's on one node, the other node gone")
    except TimeoutError as error:
        where = {ns: layout(harness, ns) for ns in ("shared-a", "shared-b")}
        nodes = [n["metadata"]["name"] for n in harness.cluster.list("nodes")]
        raise AssertionError(f"{error}: pods {where}, nodes {nodes}") from None
