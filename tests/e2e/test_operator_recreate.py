"""An InferenceDeployment deleted and created again under the same name before the garbage collector
has removed the old object's children (background deletion: the owner goes first, its dependents
after, from a queue that can lag by seconds or more).

The sandbox's garbage collector is held (:class:`HeldCollector`) from the deletion until the test
has seen what the new object says of the old children, then released: no lag is guessed or slept.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes_asyncio import client as k8s
from operator_harness import OperatorHarness, example, ready

from neuronfleet.api.v1alpha1 import GROUP, PLURAL, VERSION
from neuronfleet.sandbox.kubelet import ContainerResult
from neuronfleet.sandbox.store import Store

NS = "recreate"


class HeldCollector:
    """The sandbox store's garbage collection, held: each owner removed is queued, not collected,
    until :meth:`release` runs the queue (the real collector works from a queue too)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.collect = store._schedule_gc
        self.queued: list[tuple[Any, ...]] = []

    def _queue(self, uid: str, propagation: str, owner_key: Any = None) -> None:
        self.queued.append((uid, propagation, owner_key))

    def hold(self) -> None:
        self.store._schedule_gc = self._queue  # type: ignore[method-assign]

    def release(self) -> None:
        self.store._schedule_gc = self.collect  # type: ignore[method-assign]
        queued, self.queued = self.queued, []
        for args in queued:
            self.collect(*args)


@contextmanager
def held_collector(harness: OperatorHarness) -> Iterator[HeldCollector]:
    collector = HeldCollector(harness.cluster.store)
    collector.hold()
    try:
        yield collector
    finally:
        collector.release()


async def delete_and_recreate(harness: OperatorHarness, manifest: dict[str, Any]) -> str:
    """Delete the object, wait until it is gone (its finalizer removed), create it again: its new uid."""
    name = manifest["metadata"]["name"]
    old_uid = harness.deployment(NS, name)["metadata"]["uid"]
    custom = k8s.CustomObjectsApi(await harness.api())
    await custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
    await harness.wait(
        lambda: harness.cluster.get(PLURAL, name, NS, group=GROUP) is None, timeout=60, what="the old object gone"
    )
    await harness.apply(manifest)
    new_uid = str(harness.deployment(NS, name)["metadata"]["uid"])
    assert new_uid != old_uid
    return new_uid


def controllers(harness: OperatorHarness, plural: str, name: str, group: str = "") -> list[str]:
    obj = harness.cluster.get(plural, name, NS, group=group) if group else harness.cluster.get(plural, name, NS)
    return [ref["uid"] for ref in (obj or {}).get("metadata", {}).get("ownerReferences") or [] if ref.get("controller")]


def warnings(harness: OperatorHarness, uid: str) -> list[tuple[str, str]]:
    return [
        (e["reason"], e["message"])
        for e in harness.cluster.list("events", NS)
        if e["involvedObject"].get("uid") == uid and e["type"] == "Warning"
    ]


def compile_jobs(harness: OperatorHarness) -> list[dict[str, Any]]:
    return list(harness.cluster.list("jobs", NS, group="batch"))


async def test_a_recreated_object_does_not_take_the_old_ones_failed_compile_and_compiles_once_it_is_gone(
    harness: OperatorHarness,
) -> None:
    # The compile fails; the user fixes the cause and deletes and re-creates the object to retry.
    # The old object's failed Job (same request, so same name) is still there: it is not the new
    # object's failure, and the new object compiles once the collector has removed it.
    kubelet = harness.cluster.kubelet
    assert kubelet is not None
    fails = True

    async def compile_container(pod: dict[str, Any]) -> ContainerResult:
        if fails:
            return ContainerResult(1, "neuronx-cc: out of memory")
        harness.precompile(manifest)  # what a compile that works leaves: the artifact and its record
        return ContainerResult(0, "")

    kubelet.container_runner = compile_container
    manifest = harness.localize(
        example(
            "bert-embeddings",
            scaling={"mode": "Manual", "replicas": 1, "minReplicas": 0},
            warmPool={"mode": "Off"},
            compile={"backoffLimit": 0},
        ),
        namespace=NS,
    )
    name = manifest["metadata"]["name"]
    await harness.apply(manifest)
    await harness.wait(
        lambda: harness.condition(NS, name, "Compiled").get("reason") == "CompileFailed",
        timeout=300,
        what="the first compile to fail",
    )
    (old_job,) = compile_jobs(harness)
    fails = False

    with held_collector(harness) as collector:
        new_uid = await delete_and_recreate(harness, manifest)
        await harness.wait(
            lambda: harness.condition(NS, name, "Compiled").get("reason"), timeout=60, what="the new object's Compiled"
        )
        compiled = harness.condition(NS, name, "Compiled")
        assert compiled["reason"] == "Compiling", f"the new object took the old object's failed Job: {compiled}"
        assert "previous InferenceDeployment" in compiled["message"], compiled
        assert "garbage collector" in compiled["message"], compiled
        assert "compileFailure" not in harness.deployment(NS, name).get("status", {})
        assert harness.condition(NS, name, "Degraded").get("status") != "True"
        # The old Job is still there, still the old object's: the operator leaves it to the collector.
        assert [j["metadata"]["uid"] for j in compile_jobs(harness)] == [old_job["metadata"]["uid"]]
        assert collector.queued, "the old object's children were not held"

    await harness.wait(
        lambda: harness.condition(NS, name, "Compiled").get("status") == "True", timeout=300, what="compiled"
    )
    (job,) = compile_jobs(harness)
    assert [ref["uid"] for ref in job["metadata"]["ownerReferences"]] == [new_uid]
    assert "compileFailure" not in harness.deployment(NS, name).get("status", {})
    assert warnings(harness, new_uid) == []


async def test_a_recreated_object_waits_for_the_old_service_and_pdb_without_degrading(
    harness: OperatorHarness,
) -> None:
    manifest = harness.localize(
        example(
            "bert-embeddings", scaling={"mode": "Manual", "replicas": 2, "minReplicas": 0}, warmPool={"mode": "Off"}
        ),
        namespace=NS,
    )
    harness.precompile(manifest)
    name = manifest["metadata"]["name"]
    await harness.apply(manifest)
    await harness.wait(
        lambda: sum(ready(p) for p in harness.pods(NS, name, "active")) == 2, timeout=120, what="2 ready active pods"
    )
    old_uid = harness.deployment(NS, name)["metadata"]["uid"]
    assert controllers(harness, "services", name) == [old_uid]

    def waiting_note() -> str:
        ready_message = harness.condition(NS, name, "Ready").get("message", "")
        return ready_message if "garbage collector" in ready_message else ""

    with held_collector(harness):
        new_uid = await delete_and_recreate(harness, manifest)
        await harness.wait(
            lambda: waiting_note() or harness.condition(NS, name, "Degraded").get("status") == "True",
            timeout=120,
            what="the new object to say it waits for the old Service and PDB",
        )
        assert harness.condition(NS, name, "Degraded").get("status") != "True", harness.condition(NS, name, "Degraded")
        note = waiting_note()
        assert f"Service {name}" in note and f"PodDisruptionBudget {name}" in note, note
        assert "previous InferenceDeployment" in note, note
        # Left to the collector: not patched over, not deleted by the operator.
        assert controllers(harness, "services", name) == [old_uid]
        assert controllers(harness, "poddisruptionbudgets", name, "policy") == [old_uid]

    await harness.wait(
        lambda: (
            controllers(harness, "services", name) == [new_uid]
            and controllers(harness, "poddisruptionbudgets", name, "policy") == [new_uid]
        ),
        timeout=120,
        what="the new object's Service and PDB once the old ones are gone",
    )
    await harness.wait(lambda: not waiting_note(), timeout=60, what="the note gone from Ready")
    await harness.wait(
        lambda: sum(ready(p) for p in harness.pods(NS, name, "active")) >= 2, timeout=120, what="served again"
    )
    assert warnings(harness, new_uid) == []
    assert harness.condition(NS, name, "Degraded").get("status") == "False"
