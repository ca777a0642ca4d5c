"""The Kubernetes API failing part-way through an apply (a timeout, a refused connection), and pods
deleted under the operator: the rest of the apply still happens, the status says what failed, and
nothing is done that relied on what failed.

The operator's API adapter is the real one; a call is made to fail by wrapping one of its methods
on the running operator's client (the sandbox itself answers normally).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from operator_harness import OperatorHarness, example, ready

from neuronfleet.api.v1alpha1 import GROUP

NS = "apifail"
#: The UID of an object that is not the deployment (its predecessor under the same name).
OTHER_UID = "00000000-0000-0000-0000-000000000000"


def manual(harness: OperatorHarness, name: str, replicas: int = 2) -> dict[str, Any]:
    manifest = harness.localize(
        example(
            "bert-embeddings",
            scaling={"mode": "Manual", "replicas": replicas, "minReplicas": 0},
            warmPool={"mode": "Off"},
        ),
        namespace=NS,
    )
    manifest["metadata"]["name"] = name
    return manifest


def failing_pod_creations(harness: OperatorHarness, error: Callable[[], Exception]) -> list[str]:
    """Make the running operator's pod creations fail with ``error()``; returns the names tried."""
    assert harness.context is not None
    kube: Any = harness.context.reconciler.kube
    real: Callable[[dict[str, Any]], Awaitable[bool]] = kube.create
    tried: list[str] = []

    async def create(obj: dict[str, Any]) -> bool:
        if obj["kind"] == "Pod":
            tried.append(obj["metadata"]["name"])
            raise error()
        return await real(obj)

    kube.create = create
    return tried


@pytest.mark.parametrize(
    ("error", "needle"),
    [
        pytest.param(
            lambda: TimeoutError("the Kubernetes API did not answer within 30 s"), "did not answer", id="timeout"
        ),
        pytest.param(lambda: ConnectionRefusedError(111, "Connection refused"), "Connection refused", id="refused"),
    ],
)
async def test_a_pod_creation_that_times_out_still_gets_service_pdb_and_a_truthful_status(
    harness: OperatorHarness, error: Callable[[], Exception], needle: str
) -> None:
    # The 1,000-deployment benchmark: thousands of reconciles failed with TimeoutError after the first
    # status write, skipping the Service, the PDB and the status that reports the failure.
    tried = failing_pod_creations(harness, error)
    manifest = manual(harness, "slow")
    harness.precompile(manifest)
    await harness.apply(manifest)

    await harness.wait(
        lambda: needle in harness.condition(NS, "slow", "Degraded").get("message", ""),
        timeout=120,
        what="Degraded names the failed call",
    )
    degraded = harness.condition(NS, "slow", "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ReconcileError")
    assert harness.condition(NS, "slow", "Ready").get("status") == "False"
    assert harness.cluster.get("services", "slow", NS) is not None, "the Service was skipped"
    assert harness.cluster.get("poddisruptionbudgets", "slow", NS, group="policy") is not None, "the PDB was skipped"
    assert tried and not harness.pods(NS, "slow")
    assert not harness.events(NS, "slow", "CreatedPod"), "a pod creation that failed was reported as done"


async def test_a_status_write_that_times_out_after_the_apply_loses_no_event(harness: OperatorHarness) -> None:
    # The first status write (desired 0 -> 2) succeeds, a pod creation times out, and so does the status
    # write reporting it: the Scaled Event is posted all the same (the next reconcile sees 2 already).
    assert harness.context is not None
    kube: Any = harness.context.reconciler.kube
    real_create, real_patch_status = kube.create, kube.patch_status
    failed: list[str] = []

    async def create(obj: dict[str, Any]) -> bool:
        if obj["kind"] == "Pod" and "create" not in failed:
            failed.append("create")
            raise TimeoutError("the Kubernetes API did not answer within 30 s")
        return bool(await real_create(obj))

    async def patch_status(namespace: str, name: str, patch: dict[str, Any], *rest: Any) -> str | None:
        if "create" in failed and "status" not in failed:
            failed.append("status")
            raise TimeoutError("the Kubernetes API did not answer within 30 s")
        return await real_patch_status(namespace, name, patch, *rest)  # type: ignore[no-any-return]

    kube.create, kube.patch_status = create, patch_status
    manifest = manual(harness, "lossy")
    harness.precompile(manifest)
    await harness.apply(manifest)

    await harness.wait(
        lambda: len([p for p in harness.pods(NS, "lossy", "active") if ready(p)]) == 2,
        timeout=120,
        what="two ready active pods",
    )
    await harness.wait(lambda: harness.condition(NS, "lossy", "Ready").get("status") == "True", timeout=60)
    assert failed == ["create", "status"]
    scaled = [e["message"] for e in harness.events(NS, "lossy", "Scaled")]
    assert len(scaled) == 1 and scaled[0].startswith("initial size: 2 desired active replicas"), scaled
    assert harness.deployment(NS, "lossy")["status"]["desiredReplicas"] == 2
    assert {p["metadata"]["labels"][f"{GROUP}/role"] for p in harness.pods(NS, "lossy")} == {"active"}


def _ready_active(harness: OperatorHarness, name: str) -> int:
    return sum(1 for p in harness.pods(NS, name, "active") if ready(p))


async def test_a_pod_gone_before_its_promotion_drains_no_old_active_for_it(harness: OperatorHarness) -> None:
    # A swap promotes a ready new-revision warm pod, then demotes an old active that the promotion made
    # safe. When the warm pod is deleted under the operator (evicted, its node lost) between the
    # observation and the promotion, the promotion finds nothing (404) and the demotion must not
    # follow: the Service would lose a ready replica with nothing in its place.
    manifest = manual(harness, "swap")
    manifest["spec"]["compile"]["extraArgs"] = ["--tag=v1"]
    harness.precompile(manifest, label="v1")
    await harness.apply(manifest)
    await harness.wait(lambda: _ready_active(harness, "swap") == 2, timeout=120, what="two ready actives (v1)")
    await harness.wait_settled(NS, "swap", lambda: _ready_active(harness, "swap") == 2, what="v1 settled")

    lowest = [2]

    def watch(_: Any) -> None:
        lowest[0] = min(lowest[0], _ready_active(harness, "swap"))

    harness.cluster.store.listeners.append(watch)
    assert harness.context is not None
    kube: Any = harness.context.reconciler.kube
    real_patch = kube.patch_pod_metadata
    vanished: list[str] = []

    async def patch_pod_metadata(namespace: str, name: str, labels: Any, annotations: Any) -> bool:
        if labels.get(f"{GROUP}/role") == "active" and not vanished:
            vanished.append(name)
            harness.cluster.delete("pods", name, namespace, grace_period=0)
        return bool(await real_patch(namespace, name, labels, annotations))

    kube.patch_pod_metadata = patch_pod_metadata
    v2 = dict(
        manifest, spec={**manifest["spec"], "compile": {**manifest["spec"]["compile"], "extraArgs": ["--tag=v2"]}}
    )
    revision = harness.precompile(v2, label="v2")
    await harness.patch_spec(NS, "swap", {"compile": {"extraArgs": ["--tag=v2"]}})

    def swapped() -> bool:
        pods = harness.pods(NS, "swap")
        return (
            len(pods) == 2
            and all(ready(p) and p["metadata"]["labels"][f"{GROUP}/role"] == "active" for p in pods)
            and {p["metadata"]["labels"][f"{GROUP}/revision"] for p in pods} == {revision}
        )

    await harness.wait(swapped, timeout=300, what="two ready actives of v2")
    harness.cluster.store.listeners.remove(watch)
    assert vanished, "no promotion was attempted"
    assert lowest[0] == 2, f"ready active pods fell to {lowest[0]} during the swap"


async def test_a_service_and_pdb_whose_selectors_were_widened_by_hand_are_put_back(harness: OperatorHarness) -> None:
    # A key added to the Service's selector (kubectl edit, another tool) makes it select no pod: the
    # diff must see it (the API server adds no key to a selector) and the patch must remove it.
    from kubernetes_asyncio import client as k8s

    manifest = manual(harness, "edited", replicas=1)
    harness.precompile(manifest)
    await harness.apply(manifest)
    await harness.wait(lambda: harness.condition(NS, "edited", "Ready").get("status") == "True", timeout=120)
    service = harness.cluster.get("services", "edited", NS)
    pdb = harness.cluster.get("poddisruptionbudgets", "edited", NS, group="policy")
    assert service is not None and pdb is not None
    wanted_service, wanted_pdb = service["spec"]["selector"], pdb["spec"]["selector"]

    merge = "application/merge-patch+json"
    core, policy = await harness.client(k8s.CoreV1Api), await harness.client(k8s.PolicyV1Api)
    await core.patch_namespaced_service("edited", NS, {"spec": {"selector": {"tier": "legacy"}}}, _content_type=merge)
    extra = {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["legacy"]}]}
    await policy.patch_namespaced_pod_disruption_budget(
        "edited", NS, {"spec": {"selector": {**extra, "matchLabels": {"tier": "legacy"}}}}, _content_type=merge
    )

    def selectors() -> tuple[Any, Any]:
        service = harness.cluster.get("services", "edited", NS) or {}
        pdb = harness.cluster.get("poddisruptionbudgets", "edited", NS, group="policy") or {}
        return service.get("spec", {}).get("selector"), pdb.get("spec", {}).get("selector")

    assert selectors() != (wanted_service, wanted_pdb)
    await harness.wait(
        lambda: selectors() == (wanted_service, wanted_pdb), timeout=60, what="the selectors put back as built"
    )

    # Put back once: the next reconciles find them as built and write nothing.
    def child_patches() -> int:
        return sum(
            1
            for r in harness.cluster.request_log
            if r.method == "PATCH" and r.resource in ("services", "poddisruptionbudgets") and r.name == "edited"
        )

    patches, reconciles = child_patches(), harness.context.reconciles if harness.context else 0
    assert patches >= 4, "the two edits and the two repairs are in the log"
    await asyncio.sleep(60)  # fake time: about 30 reconciles
    assert harness.context is not None and harness.context.reconciles > reconciles + 10
    assert child_patches() == patches


def _slot_name(pod_name: str, slot: int) -> str:
    """The deterministic name of another slot of the same revision (``<deployment>-<revision>-<slot>``)."""
    return f"{pod_name.rsplit('-', 1)[0]}-{slot}"


async def test_a_re_created_deployment_skips_its_predecessors_pod_names_and_a_taken_name_is_reported(
    harness: OperatorHarness,
) -> None:
    manifest = manual(harness, "renamed", replicas=1)
    harness.precompile(manifest)
    await harness.apply(manifest)
    await harness.wait(lambda: _ready_active(harness, "renamed") == 1, timeout=90, what="one ready active pod")
    first = harness.pods(NS, "renamed", "active")[0]
    assert first["metadata"]["name"].endswith("-0")
    core = await harness.client(k8s.CoreV1Api)
    spec = {k: v for k, v in first["spec"].items() if k != "nodeName"}
    # Slot 1: a predecessor's pod (the fleet's labels, another owner) awaiting garbage collection.
    predecessor = {
        "metadata": {
            "name": _slot_name(first["metadata"]["name"], 1),
            "labels": first["metadata"]["labels"],
            "ownerReferences": [{**first["metadata"]["ownerReferences"][0], "uid": OTHER_UID}],
        },
        "spec": spec,
    }
    # Slot 2: an unrelated pod without the fleet's labels that happens to hold the name.
    squatter = {"metadata": {"name": _slot_name(first["metadata"]["name"], 2)}, "spec": spec}
    for pod in (predecessor, squatter):
        await core.create_namespaced_pod(NS, pod)

    await harness.scale(NS, "renamed", 2)
    await harness.wait(
        lambda: "belongs to" in harness.condition(NS, "renamed", "Degraded").get("message", ""),
        timeout=120,
        what="Degraded names the pod whose name is taken",
    )
    message = harness.condition(NS, "renamed", "Degraded")["message"]
    assert squatter["metadata"]["name"] in message and "no controller" in message, message
    assert not [e for e in harness.events(NS, "renamed", "CreatedPod") if squatter["metadata"]["name"] in e["message"]]

    # Once the squatter is gone, the next slot is created and the predecessor's pod is left alone.
    await core.delete_namespaced_pod(squatter["metadata"]["name"], NS, grace_period_seconds=0)

    def owned() -> list[dict[str, Any]]:
        pods = harness.pods(NS, "renamed", "active")
        return [p for p in pods if p["metadata"]["name"] != predecessor["metadata"]["name"]]

    await harness.wait(lambda: sum(1 for p in owned() if ready(p)) == 2, timeout=120, what="two owned ready pods")
    assert {p["metadata"]["name"] for p in owned()} == {first["metadata"]["name"], squatter["metadata"]["name"]}
    assert harness.cluster.get("pods", predecessor["metadata"]["name"], NS) is not None


async def test_a_pod_already_gone_when_deleted_gets_no_deleted_event(harness: OperatorHarness) -> None:
    manifest = manual(harness, "vanishing", replicas=2)
    harness.precompile(manifest)
    await harness.apply(manifest)
    await harness.wait(lambda: _ready_active(harness, "vanishing") == 2, timeout=90, what="two ready active pods")
    assert harness.context is not None
    kube: Any = harness.context.reconciler.kube
    real_delete = kube.delete_pod
    raced: list[str] = []

    async def delete_pod(namespace: str, name: str, grace_period_seconds: int | None = None) -> bool:
        # Someone else deletes the pod first: the operator's own call then answers 404.
        raced.append(name)
        assert await real_delete(namespace, name, 0)
        return bool(await real_delete(namespace, name, grace_period_seconds))

    kube.delete_pod = delete_pod
    await harness.scale(NS, "vanishing", 1)
    # Settled: a whole reconcile after the deletion, so the Events of the one that deleted are posted.
    await harness.wait_settled(NS, "vanishing", lambda: len(harness.pods(NS, "vanishing")) == 1, what="one pod left")
    assert raced
    deleted = [e["message"] for e in harness.events(NS, "vanishing", "DeletedPod")]
    assert not [m for m in deleted if any(name in m for name in raced)], deleted


async def test_a_pod_create_answered_409_by_our_own_pod_gets_no_second_created_event(harness: OperatorHarness) -> None:
    # A create whose pod already exists and is ours (the answer to an earlier create lost, or a plan
    # made before the watch showed the last round's pod) made nothing: it posted CreatedPod anyway.
    assert harness.context is not None
    kube: Any = harness.context.reconciler.kube
    real_create: Callable[[dict[str, Any]], Awaitable[bool]] = kube.create
    repeated: list[str] = []

    async def create(obj: dict[str, Any]) -> bool:
        if obj["kind"] != "Pod":
            return await real_create(obj)
        # The first create succeeds unseen (its answer lost); the operator's own call then answers 409.
        assert await real_create(obj)
        repeated.append(obj["metadata"]["name"])
        return await real_create(obj)

    kube.create = create
    manifest = manual(harness, "repeated", replicas=2)
    harness.precompile(manifest)
    await harness.apply(manifest)
    await harness.wait_settled(
        NS, "repeated", lambda: _ready_active(harness, "repeated") == 2, what="two ready active pods"
    )
    assert len(repeated) == 2
    created = [e["message"] for e in harness.events(NS, "repeated", "CreatedPod")]
    assert not [m for m in created if any(name in m for name in repeated)], created
    assert harness.condition(NS, "repeated", "Degraded")["status"] == "False"
