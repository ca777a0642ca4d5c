"""The fleet model on the sandbox: promotion, refill, draining, warm-then-swap, failures.

A store listener records every pod change the API server makes, so the tests check what happened
in between (a promotion is a relabel of the same pod; a deletion comes only after draining; ready
capacity never dips during a rollout), not only where the fleet ended.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from operator_harness import OperatorHarness, example, ready
from test_operator_quota_refusals import create_quota

from neuronfleet.api.v1alpha1 import GROUP
from neuronfleet.sandbox.store import WatchEvent

ROLE = f"{GROUP}/role"
NS = "fleet"


def manual_bert(harness: OperatorHarness, replicas: int, warm: int) -> dict[str, Any]:
    return harness.localize(
        example(
            "bert-embeddings",
            scaling={"mode": "Manual", "replicas": replicas, "minReplicas": 0},
            warmPool={"mode": "Fixed", "pods": warm, "nodePlaceholders": 0},
        ),
        namespace=NS,
    )


class PodHistory:
    """Every pod change, in order: (event type, name, uid, role, ready, deleting), and prior roles."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str | None, bool, bool]] = []
        self.first_role: dict[str, str | None] = {}

    def __call__(self, event: WatchEvent) -> None:
        if event.resource != ("", "pods"):
            return
        meta = event.obj["metadata"]
        if (meta.get("labels") or {}).get(f"{GROUP}/deployment") is None:
            return
        if event.old is not None and meta["uid"] not in self.first_role:
            self.first_role[meta["uid"]] = (event.old["metadata"].get("labels") or {}).get(ROLE)
        self.events.append(
            (
                event.type,
                meta["name"],
                meta["uid"],
                (meta.get("labels") or {}).get(ROLE),
                ready(event.obj),
                bool(meta.get("deletionTimestamp")),
            )
        )

    def roles_of(self, uid: str) -> list[str | None]:
        """The roles a pod went through while recording (starting with the one it had before)."""
        roles: list[str | None] = [self.first_role[uid]] if uid in self.first_role else []
        for _, _, event_uid, role, _, _ in self.events:
            if event_uid == uid and (not roles or roles[-1] != role):
                roles.append(role)
        return roles

    def created(self) -> list[str]:
        return [uid for kind, _, uid, *_ in self.events if kind == "ADDED"]


@contextmanager
def recording(harness: OperatorHarness) -> Iterator[PodHistory]:
    history = PodHistory()
    harness.cluster.store.listeners.append(history)
    try:
        yield history
    finally:
        harness.cluster.store.listeners.remove(history)


def counts(harness: OperatorHarness, name: str) -> tuple[int, int]:
    active = [p for p in harness.pods(NS, name, "active") if ready(p)]
    warm = [p for p in harness.pods(NS, name, "warm") if ready(p)]
    return len(active), len(warm)


async def test_scale_up_promotes_warm_pods_then_refills_and_scale_down_drains(harness: OperatorHarness) -> None:
    manifest = manual_bert(harness, replicas=2, warm=2)
    harness.precompile(manifest)
    await harness.apply(manifest)
    name = manifest["metadata"]["name"]
    await harness.wait_settled(NS, name, lambda: counts(harness, name) == (2, 2), timeout=90, what="2 active + 2 warm")
    warm_before = {p["metadata"]["uid"] for p in harness.pods(NS, name, "warm")}

    with recording(harness) as history:
        await harness.scale(NS, name, 5)
        await harness.wait(lambda: counts(harness, name) == (5, 2), timeout=120, what="5 active + 2 warm")
    active_after = {p["metadata"]["uid"] for p in harness.pods(NS, name, "active")}
    assert warm_before <= active_after, "the warm pods were not promoted in place"
    for uid in warm_before:
        assert history.roles_of(uid) == ["warm", "active"], history.roles_of(uid)
    # 3 more active pods were needed; 2 came from the pool, so 1 new active and 2 new warm pods.
    assert len(history.created()) == 3

    with recording(harness) as history:
        await harness.scale(NS, name, 1)
        await harness.wait(
            lambda: counts(harness, name) == (1, 2) and len(harness.pods(NS, name)) == 3,
            timeout=120,
            what="1 active + 2 warm, drained pods gone",
        )
    # Deleted: the API server set deletionTimestamp (the kubelet then ends them within their grace).
    gone = {uid for kind, _, uid, _, _, deleting in history.events if deleting or kind == "DELETED"}
    assert len(gone) == 4
    for uid in gone:
        roles = history.roles_of(uid)
        # A serving pod is drained first. The pool may keep a demoted active and delete a standby on
        # an emptier node instead (it served nothing): that frees the node, where the pods share nodes.
        assert (roles[-1] == "draining" and "active" in roles) or roles == ["warm"], (
            f"deleted without draining: {roles}"
        )
    # Kept on as few nodes as hold them (two replicas a node here), so that the others can go.
    assert len({p["spec"].get("nodeName") for p in harness.pods(NS, name)}) == 2
    # The status follows the pods in the operator's next reconcile, so it is waited for. The drained
    # pods, counted as draining while they terminated, are gone: none is counted any more.

    def counted() -> tuple[Any, ...]:
        status = harness.deployment(NS, name)["status"]
        return (
            status.get("replicas"),
            status.get("readyReplicas"),
            status.get("warmReplicas"),
            status.get("drainingReplicas"),
        )

    try:
        await harness.wait(lambda: counted() == (1, 1, 2, 0), timeout=30, what="status counts (1, 1, 2, 0)")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}: the status says {counted()}") from None


@pytest.mark.parametrize("warm", [0, 1])
async def test_new_artifact_is_warmed_then_swapped_without_losing_ready_capacity(
    harness: OperatorHarness, warm: int
) -> None:
    """Neither ready active pods nor loaded standby dip during the rollout: an old loaded warm pod
    stays until a new one is loaded in its place."""
    manifest = manual_bert(harness, replicas=3, warm=warm)
    old_revision = harness.precompile(manifest, label="v1")
    await harness.apply(manifest)
    name = manifest["metadata"]["name"]
    await harness.wait(lambda: counts(harness, name) == (3, warm), timeout=90, what=f"3 active, {warm} warm")

    ready_counts: list[tuple[int, int]] = []
    stamped: set[str] = set()

    def watch_capacity(_: WatchEvent) -> None:
        ready_counts.append(counts(harness, name))
        # The kept old standby's clock, written through the API server's merge patch.
        for pod in harness.pods(NS, name, "warm"):
            if f"{GROUP}/kept-since" in (pod["metadata"].get("annotations") or {}):
                stamped.add(pod["metadata"]["name"])

    # A new compile of the same spec: change the compiler flags, record the new artifact.
    new_manifest = manual_bert(harness, replicas=3, warm=warm)
    new_manifest["spec"]["compile"]["optLevel"] = 3
    new_revision = harness.precompile(new_manifest, label="v2")
    assert new_revision != old_revision
    harness.cluster.store.listeners.append(watch_capacity)
    try:
        await harness.patch_spec(NS, name, {"compile": {"optLevel": 3}})

        def swapped() -> bool:
            pods = harness.pods(NS, name)
            revisions = {p["metadata"]["labels"][f"{GROUP}/revision"] for p in pods}
            return revisions == {new_revision} and counts(harness, name) == (3, warm)

        await harness.wait(swapped, timeout=120, what="all pods on the new revision")
    finally:
        harness.cluster.store.listeners.remove(watch_capacity)
    assert ready_counts, "no pod changes observed during the rollout"
    lowest_active = min(active for active, _ in ready_counts)
    assert lowest_active >= 3, f"ready active pods dropped to {lowest_active} during the rollout"
    lowest_warm = min(standby for _, standby in ready_counts)
    assert lowest_warm >= warm, f"loaded warm pods dropped to {lowest_warm} during the rollout"
    assert len(stamped) == warm, f"old warm pods stamped as kept standby: {sorted(stamped)}"
    assert harness.deployment(NS, name)["status"]["artifact"]["revision"] == new_revision


async def test_failed_pod_and_lost_node_are_replaced(harness: OperatorHarness) -> None:
    manifest = manual_bert(harness, replicas=3, warm=0)
    harness.precompile(manifest)
    await harness.apply(manifest)
    name = manifest["metadata"]["name"]
    await harness.wait(lambda: counts(harness, name) == (3, 0), timeout=90, what="3 active")
    kubelet = harness.cluster.kubelet
    assert kubelet is not None

    victim = harness.pods(NS, name, "active")[0]["metadata"]["name"]
    kubelet.fail_pod(NS, victim)
    await harness.wait(
        lambda: (
            counts(harness, name) == (3, 0) and victim not in {p["metadata"]["name"] for p in harness.pods(NS, name)}
        ),
        timeout=90,
        what="failed pod replaced",
    )

    node = harness.pods(NS, name, "active")[0]["spec"]["nodeName"]
    on_node = {p["metadata"]["uid"] for p in harness.pods(NS, name) if p["spec"].get("nodeName") == node}
    await harness.cluster.delete_node(node) if hasattr(harness.cluster, "delete_node") else _remove_node(harness, node)
    await harness.wait(
        lambda: (
            counts(harness, name) == (3, 0) and not on_node & {p["metadata"]["uid"] for p in harness.pods(NS, name)}
        ),
        timeout=120,
        what="pods of the removed node replaced elsewhere",
    )
    assert all(p["spec"]["nodeName"] != node for p in harness.pods(NS, name))


def _remove_node(harness: OperatorHarness, node: str) -> None:
    store = harness.cluster.store
    store.delete(store.resource("", "nodes"), None, node)


async def test_a_pod_it_does_not_control_is_neither_counted_nor_drained(harness: OperatorHarness) -> None:
    # A pod with the fleet's labels but another controller (a deployment deleted and re-created
    # under the same name leaves such pods until garbage collection) or none (made by hand).
    manifest = manual_bert(harness, replicas=2, warm=0)
    harness.precompile(manifest)
    await harness.apply(manifest)
    name = manifest["metadata"]["name"]
    await harness.wait_settled(NS, name, lambda: counts(harness, name) == (2, 0), timeout=90, what="2 active")
    owned = {p["metadata"]["uid"] for p in harness.pods(NS, name, "active")}
    template = harness.pods(NS, name, "active")[0]
    spec = {k: v for k, v in template["spec"].items() if k != "nodeName"}
    labels = dict(template["metadata"]["labels"])
    strays = [
        {"metadata": {"name": "by-hand", "labels": labels}, "spec": spec},
        {
            "metadata": {
                "name": "previous-incarnation",
                "labels": labels,
                "ownerReferences": [
                    {**template["metadata"]["ownerReferences"][0], "uid": "00000000-0000-0000-0000-000000000000"}
                ],
            },
            "spec": spec,
        },
    ]
    core = await harness.client(k8s.CoreV1Api)
    for stray in strays:
        await core.create_namespaced_pod(NS, stray)
    stray_names = {s["metadata"]["name"] for s in strays}

    def strays_ready() -> bool:
        pods = {p["metadata"]["name"]: p for p in harness.pods(NS, name, "active")}
        return all(n in pods and ready(pods[n]) for n in stray_names)

    await harness.wait_settled(NS, name, strays_ready, timeout=90, what="the stray pods ready")
    active = {p["metadata"]["uid"] for p in harness.pods(NS, name, "active")}
    assert owned <= active, "the operator drained one of its own pods for a pod it does not control"
    assert stray_names <= {p["metadata"]["name"] for p in harness.pods(NS, name, "active")}
    status = harness.deployment(NS, name)["status"]
    assert (status.get("replicas"), status.get("readyReplicas")) == (2, 2), status


async def test_an_auto_scaled_fleet_can_be_drained_one_pod_at_a_time(harness: OperatorHarness) -> None:
    # The PDB had maxUnavailable: 1, so the disruption controller expected the pods of the
    # deployment's /scale, spec.scaling.replicas: unset in Auto mode, 0 expected, no eviction ever
    # allowed (a node drain or a consolidation blocked). minAvailable counts the selected pods.
    manifest = harness.localize(
        example(
            "bert-embeddings", scaling={"mode": "Auto", "minReplicas": 2, "maxReplicas": 4}, warmPool={"mode": "Off"}
        ),
        namespace=NS,
    )
    harness.precompile(manifest)
    await harness.apply(manifest)
    name = manifest["metadata"]["name"]
    await harness.wait(
        lambda: sum(ready(p) for p in harness.pods(NS, name, "active")) == 2, timeout=120, what="2 ready active pods"
    )
    budget = harness.cluster.get("poddisruptionbudgets", name, NS, group="policy") or {}
    assert budget["spec"]["minAvailable"] == 1

    def allowed() -> int:
        status = (harness.cluster.get("poddisruptionbudgets", name, NS, group="policy") or {}).get("status") or {}
        return int(status.get("disruptionsAllowed", -1))

    await harness.wait(lambda: allowed() == 1, timeout=30, what="one disruption allowed")
    core = await harness.client(k8s.CoreV1Api)
    first, second = (p["metadata"]["name"] for p in harness.pods(NS, name, "active"))
    eviction: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": first, "namespace": NS},
    }
    await core.create_namespaced_pod_eviction(first, NS, eviction)
    eviction["metadata"]["name"] = second
    with pytest.raises(k8s.ApiException) as refused:
        await core.create_namespaced_pod_eviction(second, NS, eviction)
    assert refused.value.status == 429


async def test_a_rollout_whose_new_pods_are_refused_stamps_and_releases_the_old_standby(
    harness: OperatorHarness,
) -> None:
    """A ResourceQuota the old pods fill refuses every new pod, and the apply stops at the first
    refused create: the kept old warm pod is still stamped, and released once kept for the progress
    deadline (which frees its quota for a new pod)."""
    manifest = manual_bert(harness, replicas=1, warm=1)
    manifest["spec"].setdefault("rollout", {})["progressDeadlineSeconds"] = 60
    harness.precompile(manifest, label="v1")
    await harness.apply(manifest)
    name = manifest["metadata"]["name"]
    await harness.wait(lambda: counts(harness, name) == (1, 1), timeout=90, what="1 active, 1 warm")
    (old_warm,) = [p["metadata"]["name"] for p in harness.pods(NS, name, "warm")]
    await create_quota(harness, NS, "pods", {"pods": "2"})
    new_manifest = manual_bert(harness, replicas=1, warm=1)
    new_manifest["spec"]["compile"]["optLevel"] = 3
    harness.precompile(new_manifest, label="v2")
    stamped: set[str] = set()

    def watch_stamp(event: WatchEvent) -> None:
        meta = event.obj["metadata"]
        if event.resource == ("", "pods") and f"{GROUP}/kept-since" in (meta.get("annotations") or {}):
            stamped.add(meta["name"])

    harness.cluster.store.listeners.append(watch_stamp)
    try:
        await harness.patch_spec(NS, name, {"compile": {"optLevel": 3}})
        await harness.wait(
            lambda: harness.condition(NS, name, "Degraded").get("reason") == "PodCreationRefused",
            timeout=120,
            what="Degraded=True PodCreationRefused",
        )
        await harness.wait(lambda: old_warm in stamped, timeout=120, what=f"{old_warm} stamped kept-since")
        await harness.wait(
            lambda: old_warm not in [p["metadata"]["name"] for p in harness.pods(NS, name)],
            timeout=600,
            what=f"{old_warm} released after the progress deadline",
        )
    finally:
        harness.cluster.store.listeners.remove(watch_stamp)

    # Released for the deadline, not deleted for another reason (a scale-down, the rollout's end):
    # its Event is posted once the reconcile that deleted it ends.
    def deletions() -> list[str]:
        return [
            e["message"]
            for e in harness.cluster.list("events", NS)
            if e.get("reason") == "DeletedPod" and old_warm in e.get("message", "")
        ]

    await harness.wait(lambda: bool(deletions()), timeout=60, what=f"DeletedPod Event for {old_warm}")
    assert any("kept for the progress deadline (60s)" in m for m in deletions()), deletions()


async def test_a_rollout_none_of_whose_new_pods_can_be_created_is_reported_stalled(harness: OperatorHarness) -> None:
    """A ResourceQuota the old pod fills refuses every new pod, and no old standby is there to
    release: no pod of the new revision ever exists. The rollout is reported stalled all the same
    once past its progress deadline, counted from status.rollout.startedAt (before, it had no start
    without a new pod, and was never reported)."""
    manifest = manual_bert(harness, replicas=1, warm=0)
    manifest["spec"].setdefault("rollout", {})["progressDeadlineSeconds"] = 60
    harness.precompile(manifest, label="v1")
    await harness.apply(manifest)
    name = manifest["metadata"]["name"]
    await harness.wait(lambda: counts(harness, name) == (1, 0), timeout=90, what="1 ready active pod")
    (old,) = [p["metadata"]["name"] for p in harness.pods(NS, name)]
    await create_quota(harness, NS, "pods", {"pods": "1"})
    new_manifest = manual_bert(harness, replicas=1, warm=0)
    new_manifest["spec"]["compile"]["optLevel"] = 3
    harness.precompile(new_manifest, label="v2")
    await harness.patch_spec(NS, name, {"compile": {"optLevel": 3}})

    def degraded() -> dict[str, Any]:
        return harness.condition(NS, name, "Degraded")

    await harness.wait(
        lambda: degraded().get("reason") == "PodCreationRefused", timeout=120, what="Degraded=True PodCreationRefused"
    )
    started = (harness.deployment(NS, name).get("status") or {}).get("rollout")
    assert started is not None and set(started) == {"target", "startedAt"}, started
    await harness.wait(
        lambda: "the new revision has not become ready within the progress deadline" in degraded().get("message", ""),
        timeout=600,
        what="RolloutStalled said in Degraded",
    )
    assert degraded()["reason"] == "PodCreationRefused"  # the first trouble, said first
    assert harness.deployment(NS, name)["status"]["rollout"] == started  # kept, not restarted each reconcile
    assert [p["metadata"]["name"] for p in harness.pods(NS, name)] == [old]  # no new pod was ever made


async def test_a_new_runtime_port_rolls_the_pods_while_the_service_keeps_its_port(harness: OperatorHarness) -> None:
    """The pods roll warm-then-swap to spec.runtime.port's new value; the Service's port, which its
    clients use, stays, and its targetPort (the port's name) follows the pods: at no moment do ready
    active pods serve while the Service no longer offers the port its clients know."""
    manifest = manual_bert(harness, replicas=2, warm=0)
    harness.precompile(manifest)
    await harness.apply(manifest)
    name = manifest["metadata"]["name"]

    def active_ports() -> list[int]:
        return sorted(
            p["spec"]["containers"][0]["ports"][0]["containerPort"]
            for p in harness.pods(NS, name, "active")
            if ready(p)
        )

    def service_ports() -> list[tuple[int, Any]]:
        service = harness.cluster.get("services", name, NS)
        return [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] if service else []

    await harness.wait(lambda: active_ports() == [8080, 8080] and service_ports() != [], timeout=90, what="2 active")
    assert service_ports() == [(8080, "http")]
    seen: list[tuple[list[tuple[int, Any]], list[int]]] = []
    harness.cluster.store.listeners.append(lambda _: seen.append((service_ports(), active_ports())))
    await harness.patch_spec(NS, name, {"runtime": {"port": 9090}})
    await harness.wait(lambda: active_ports() == [9090, 9090], timeout=120, what="2 active on 9090")
    assert service_ports() == [(8080, "http")]
    assert all(ports == [(8080, "http")] for ports, _ in seen), {str(ports) for ports, _ in seen}
