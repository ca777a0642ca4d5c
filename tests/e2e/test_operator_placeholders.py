"""Node placeholders on the sandbox: they hold room on Inf2 nodes, yield it to real pods, come back.

The cluster starts with two inf2.xlarge nodes (two 1-core replicas each). Three active replicas and
one placeholder (warmPool Fixed, nodePlaceholders: 1) fill them. Scaling to four: the new pod
preempts the placeholder and starts at once on the room it held, without waiting for a node; the
operator recreates the placeholder, which makes the provisioner add a node, and it runs there.
"""

from __future__ import annotations

from typing import Any

from operator_harness import OperatorHarness, example, ready

from neuronfleet.api.v1alpha1 import GROUP
from neuronfleet.sandbox.store import WatchEvent

NS = "placeholders"
NAME = "minilm-embeddings"
ROLE = f"{GROUP}/role"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"


class Preemptions:
    """Uids of placeholder pods the scheduler marked for preemption (DisruptionTarget)."""

    def __init__(self) -> None:
        self.uids: set[str] = set()

    def __call__(self, event: WatchEvent) -> None:
        if event.resource != ("", "pods"):
            return
        pod = event.obj
        if (pod["metadata"].get("labels") or {}).get(ROLE) != "placeholder":
            return
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "DisruptionTarget" and condition.get("reason") == "PreemptionByScheduler":
                self.uids.add(pod["metadata"]["uid"])


def node_of(harness: OperatorHarness, pod: dict[str, Any]) -> dict[str, Any] | None:
    name = (pod.get("spec") or {}).get("nodeName")
    return harness.cluster.get("nodes", name) if name else None


def running_placeholders(harness: OperatorHarness) -> list[dict[str, Any]]:
    return [p for p in harness.pods(NS, NAME, "placeholder") if ready(p) and node_of(harness, p) is not None]


async def test_placeholders_hold_inf2_room_yield_it_to_real_pods_and_are_recreated(harness: OperatorHarness) -> None:
    manifest = harness.localize(
        example(
            "bert-embeddings",
            scaling={"mode": "Manual", "replicas": 3, "minReplicas": 0},
            warmPool={"mode": "Fixed", "pods": 0, "nodePlaceholders": 1},
        ),
        namespace=NS,
    )
    harness.precompile(manifest)
    preemptions = Preemptions()
    harness.cluster.store.listeners.append(preemptions)
    await harness.apply(manifest)

    # 1. The placeholder runs on an Inf2 node, next to three ready active pods; the nodes are full.
    await harness.wait(
        lambda: sum(ready(p) for p in harness.pods(NS, NAME, "active")) == 3 and running_placeholders(harness),
        timeout=300,
        what="3 active pods and a running placeholder",
    )
    (placeholder,) = running_placeholders(harness)
    held_node = node_of(harness, placeholder)
    assert held_node is not None and held_node["metadata"]["labels"][INSTANCE_TYPE].startswith("inf2.")
    assert placeholder["spec"].get("priorityClassName") == "neuronfleet-placeholder"
    nodes_before = {n["metadata"]["name"] for n in harness.cluster.list("nodes")}
    assert len(nodes_before) == 2

    first_three = {p["metadata"]["uid"] for p in harness.pods(NS, NAME, "active")}

    # 2. A fourth replica: it preempts the placeholder and is bound to the room it held, at once.
    await harness.scale(NS, NAME, 4)
    await harness.wait(
        lambda: placeholder["metadata"]["uid"] in preemptions.uids, timeout=120, what="the placeholder preempted"
    )

    def fourth_ready() -> dict[str, Any] | None:
        active = harness.pods(NS, NAME, "active")
        new = [p for p in active if p["metadata"]["uid"] not in first_three]
        return new[0] if len(new) == 1 and sum(ready(p) for p in active) == 4 else None

    newcomer = await harness.wait(fourth_ready, timeout=120, what="the fourth active pod ready")
    assert newcomer["spec"]["nodeName"] == held_node["metadata"]["name"]

    # 3. The placeholder is recreated; with no room left it brings a new Inf2 node and runs there.
    await harness.wait(
        lambda: [p for p in running_placeholders(harness) if p["metadata"]["uid"] != placeholder["metadata"]["uid"]],
        timeout=600,
        what="a new placeholder running",
    )
    (recreated,) = running_placeholders(harness)
    new_node = node_of(harness, recreated)
    assert new_node is not None
    assert new_node["metadata"]["name"] not in nodes_before
    assert new_node["metadata"]["labels"][INSTANCE_TYPE] == held_node["metadata"]["labels"][INSTANCE_TYPE]
    # The status follows the pods in the operator's next reconcile, so it is waited for.
    await harness.wait(
        lambda: (s := harness.deployment(NS, NAME)["status"]).get("placeholders") == 1 and s.get("readyReplicas") == 4,
        timeout=30,
        what="status: 1 placeholder and 4 ready replicas",
    )
    harness.cluster.store.listeners.remove(preemptions)
