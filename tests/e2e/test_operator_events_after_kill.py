"""The Events of a status change when the operator is killed (SIGKILL, OOM, its node lost) between
the status write and its Events (review r13, finding 2).

The next operator reads the status as "already so" and never posts what the change meant. So the
Events of the first status write are posted as soon as it lands, before the apply (pod creations and
drains take long), and a new operator announces again, once, the Warnings the status it takes over
already shows. A kill in the window of one write and its post can still lose a Normal Event.
"""

from __future__ import annotations

import asyncio
from typing import Any

from operator_harness import OperatorHarness, example, ready

from neuronfleet.planning.reconcile_plan import FOUND_ON_TAKEOVER

NS = "killed"


def manual(harness: OperatorHarness, name: str, replicas: int) -> dict[str, Any]:
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


def events_of(harness: OperatorHarness, name: str, type_: str | None = None) -> list[tuple[str, str]]:
    """The (reason, message) of the Events posted about ``name``, of ``type_`` (None: any)."""
    return [
        (str(e.get("reason")), str(e.get("message") or ""))
        for e in harness.events(NS, name)
        if type_ in (None, e.get("type"))
    ]


async def running(harness: OperatorHarness, name: str, replicas: int) -> None:
    manifest = manual(harness, name, replicas)
    harness.precompile(manifest)
    await harness.apply(manifest)
    await harness.wait(lambda: sum(ready(p) for p in harness.pods(NS, name, "active")) == replicas, timeout=120)
    await harness.wait(lambda: harness.condition(NS, name, "Ready").get("status") == "True", timeout=60)


async def reconciles(harness: OperatorHarness, count: int) -> None:
    """Wait for ``count`` more reconciles (of the one deployment the test runs) to begin and end."""
    assert harness.context is not None
    context = harness.context
    started = context.reconciles
    await harness.wait(lambda: context.reconciles >= started + count + 1, timeout=120, what=f"{count} reconciles")


async def test_the_scaled_event_is_posted_before_the_apply_so_a_kill_in_it_loses_nothing(
    harness: OperatorHarness,
) -> None:
    # Scaled 2 -> 3 was posted at the end of the reconcile, after the pod creations: a kill during
    # them lost it, and the next operator, reading desiredReplicas 3, never posted it.
    await running(harness, "scale", 2)
    assert harness.context is not None
    kube: Any = harness.context.reconciler.kube
    real_create = kube.create
    creating = asyncio.Event()

    async def create(obj: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if obj.get("kind") == "Pod":
            creating.set()
            await asyncio.Event().wait()  # the operator is killed here, in the apply
        return await real_create(obj, *args, **kwargs)

    kube.create = create
    await harness.patch_spec(NS, "scale", {"scaling": {"replicas": 3}})
    await harness.wait(creating.is_set, timeout=60, what="the apply's pod creation under way")
    assert harness.deployment(NS, "scale")["status"]["desiredReplicas"] == 3
    scaled = [message for reason, message in events_of(harness, "scale") if reason == "Scaled"]
    assert any("2 -> 3" in message for message in scaled), f"no Scaled 2 -> 3 before the apply: {scaled}"

    await harness.crash()
    await harness.start()
    await harness.wait(lambda: sum(ready(p) for p in harness.pods(NS, "scale", "active")) == 3, timeout=120)
    scaled = [message for reason, message in events_of(harness, "scale") if reason == "Scaled"]
    assert len(scaled) == 2, f"the restarted operator said the scale again: {scaled}"  # initial size, 2 -> 3


async def test_a_degraded_warning_lost_with_a_killed_operator_is_posted_once_by_the_next(
    harness: OperatorHarness,
) -> None:
    # The reviewer's shape: the status write with Degraded=True lands, and the operator dies before
    # it posts anything. Its successor read Degraded=True as already announced: no Warning, ever.
    await running(harness, "deg", 1)
    assert harness.context is not None
    kube: Any = harness.context.reconciler.kube
    real_patch_status = kube.patch_status
    written: list[dict[str, Any]] = []

    def degraded(patch: dict[str, Any]) -> bool:
        conditions = (patch.get("status") or patch).get("conditions") or []
        return any(c.get("type") == "Degraded" and c.get("status") == "True" for c in conditions)

    async def patch_status(namespace: str, name: str, patch: dict[str, Any], *rest: Any) -> Any:
        made = await real_patch_status(namespace, name, patch, *rest)
        if not written and degraded(patch):
            written.append(patch)
            await asyncio.Event().wait()  # killed here: the write landed, nothing after it runs
        return made

    kube.patch_status = patch_status
    # The artifact store unreadable (a file where its directory should be): Degraded ReconcileError.
    bad = harness.store_dir.parent / "not-a-dir"
    bad.write_text("x")
    await harness.patch_spec(NS, "deg", {"compile": {"artifactStore": str(bad / "sub")}})
    await harness.wait(lambda: bool(written), timeout=60, what="a status write with Degraded=True landed")
    assert events_of(harness, "deg", "Warning") == [], "the Warning was posted before the kill"

    await harness.crash()
    await harness.start()
    await harness.wait(lambda: events_of(harness, "deg", "Warning"), timeout=60, what="a Warning Event")
    await reconciles(harness, 3)
    degraded_now = harness.condition(NS, "deg", "Degraded")
    assert degraded_now.get("status") == "True"
    assert events_of(harness, "deg", "Warning") == [
        (str(degraded_now["reason"]), f"{FOUND_ON_TAKEOVER}: {degraded_now['message']}")
    ], "announced once per takeover, not at every reconcile"
