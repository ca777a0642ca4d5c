"""Node placeholders on the sandbox: they hold room on Inf2 nodes, yield it to real pods, come back.

The cluster starts with two inf2.xlarge nodes (two 1-core replicas each). Three active replicas and
one placeholder (warmPool Fixed, nodePlaceholders: 1) fill them. Scaling to four: the new pod
preempts the placeholder and starts at once on the room it held, without waiting for a node; the
operator recreates the placeholder, which makes the provisioner add a node, and it runs there.
A deployment whose compile failed (nothing to serve, none coming) gets none: held, not made.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client as k8s
from operator_harness import OperatorHarness, example, ready

from neuronfleet.api.v1alpha1 import GROUP
from neuronfleet.planning.compile import ANNOTATION_COMPILE_RETRY
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


async def test_placeholders_are_held_once_the_compile_fails_and_come_back_with_a_new_compile(
    harness: OperatorHarness,
) -> None:
    # Spare Inf2 nodes are kept for a compile under way (they are wanted once it ends), not for a
    # spec that cannot compile: those made meanwhile are deleted, and status.placement stops pricing them.
    name = "failing"
    manifest = harness.localize(
        example(
            "bert-embeddings",
            scaling={"mode": "Manual", "replicas": 1, "minReplicas": 0},
            warmPool={"mode": "Fixed", "pods": 0, "nodePlaceholders": 2},
        ),
        namespace=NS,
    )
    manifest["metadata"]["name"] = name
    await harness.apply(manifest)  # not precompiled: its compile Job starts
    await harness.wait(
        lambda: len(harness.pods(NS, name, "placeholder")) == 2 and harness.cluster.list("jobs", NS, group="batch"),
        what="two placeholders while it compiles",
    )
    compiling_nodes = harness.deployment(NS, name)["status"]["placement"]["nodes"]

    # The Job fails, as Kubernetes marks it after its retries.
    [job] = harness.cluster.list("jobs", NS, group="batch")
    failed = {
        "type": "Failed",
        "status": "True",
        "reason": "BackoffLimitExceeded",
        "message": "Job has reached the specified backoff limit",
    }
    await k8s.BatchV1Api(await harness.api()).patch_namespaced_job_status(
        job["metadata"]["name"], NS, {"status": {"conditions": [failed]}}
    )
    await harness.wait_settled(
        NS,
        name,
        lambda: (
            harness.condition(NS, name, "Compiled").get("reason") == "CompileFailed"
            and not harness.pods(NS, name, "placeholder")
        ),
        what="no placeholder once the compile failed",
    )
    warm = harness.condition(NS, name, "WarmPoolReady")
    assert "2 placeholders held: no artifact to serve: cannot compile: " in warm["message"], warm["message"]
    assert harness.deployment(NS, name)["status"]["placement"]["nodes"] < compiling_nodes
    deleted = [
        e["message"]
        for e in harness.cluster.list("events", NS)
        if e.get("reason") == "DeletedPlaceholder" and (e.get("involvedObject") or {}).get("name") == name
    ]
    assert len(deleted) == 2 and all("held: no artifact to serve" in m for m in deleted), deleted

    # Asked to compile again (the retry annotation): a compile is under way, the capacity wanted again.
    await harness.annotate(NS, name, {ANNOTATION_COMPILE_RETRY: "1"})
    await harness.wait(
        lambda: len(harness.pods(NS, name, "placeholder")) == 2, what="the placeholders back with a new compile"
    )
