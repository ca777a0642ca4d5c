"""The status write against a changing object: optimistic concurrency and stale watch bodies.

The operator plans from the body its watch delivered, which may be older than the object: another
controller may have added a condition of its own meanwhile (``status.conditions`` is a map keyed by
type), or the watch may not have delivered the operator's own writes yet. Each test drives one
reconciler by hand against the sandbox (no Kopf), so which body it reconciles from is the test's.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from operator_harness import FAST_START, NEURON_SCHEDULER, REPO, OperatorHarness, example, inf2_node_groups, ready

from neuronfleet.api.v1alpha1 import GROUP, PLURAL
from neuronfleet.handlers import OperatorContext
from neuronfleet.planning.observation import DeploymentMemory
from neuronfleet.planning.reconcile_plan import FOUND_ON_TAKEOVER
from neuronfleet.run_command import build_context
from neuronfleet.sandbox import SandboxCluster
from neuronfleet.sandbox.apiserver import RequestRecord

NS = "writes"
AUDITED = {
    "type": "PolicyCompliant",
    "status": "True",
    "reason": "Audited",
    "message": "audited by policy-controller",
    "lastTransitionTime": "2026-12-04T07:00:00Z",
}


@pytest.fixture
async def bare(tmp_path: Path) -> AsyncIterator[tuple[OperatorHarness, OperatorContext]]:
    """The sandbox and a reconciler of the operator's making, with no Kopf operator running."""
    async with SandboxCluster(
        node_groups=inf2_node_groups(),
        crd_dir=REPO / "crds",
        cold_start=FAST_START,
        provisioning_delay_s=5.0,
        neuron_scheduler_name=NEURON_SCHEDULER,
    ) as cluster:
        harness = OperatorHarness(cluster, tmp_path)
        await harness.ensure_priority_classes()
        context = await build_context(harness.settings, cluster.kubeconfig_path, clock=cluster.clock.wall)
        try:
            yield harness, context
        finally:
            await context.reconciler.kube.close()
            await harness.close()


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
    harness.precompile(manifest)
    return manifest


def conditions(harness: OperatorHarness, name: str) -> dict[str, tuple[str, str]]:
    status = harness.deployment(NS, name).get("status") or {}
    return {c["type"]: (c["status"], c.get("reason", "")) for c in status.get("conditions") or []}


async def add_foreign_condition(harness: OperatorHarness, name: str, message: str = AUDITED["message"]) -> None:
    """Another controller sets a condition of its own, as a controller does: the list as read, plus its own."""
    live = (harness.deployment(NS, name).get("status") or {}).get("conditions") or []
    await harness.patch_status(
        NS, name, {"conditions": [c for c in live if c["type"] != AUDITED["type"]] + [{**AUDITED, "message": message}]}
    )


def requests_for(harness: OperatorHarness, name: str, since: int) -> list[RequestRecord]:
    return [r for r in harness.cluster.request_log[since:] if r.resource == PLURAL and r.name == name]


def status_patches(records: list[RequestRecord]) -> list[int]:
    return [r.code for r in records if r.method == "PATCH" and r.subresource == "status"]


async def test_a_condition_another_controller_added_after_the_body_was_read_is_kept(
    bare: tuple[OperatorHarness, OperatorContext],
) -> None:
    # The merge patch replaced status.conditions whole, from the body the operator held: the other
    # controller's condition, added after that body was read, was gone after the operator's write.
    harness, context = bare
    reconciler = context.reconciler
    await harness.apply(manual(harness, "audited", replicas=1))
    first = await reconciler.reconcile(harness.deployment(NS, "audited"), DeploymentMemory())
    stale = harness.deployment(NS, "audited")  # what the operator's watch holds
    await add_foreign_condition(harness, "audited")
    await harness.wait(
        lambda: [p for p in harness.pods(NS, "audited", "active") if ready(p)], timeout=60, what="a ready pod"
    )
    assert conditions(harness, "audited")["Available"][0] == "False"

    since = len(harness.cluster.request_log)
    report = await reconciler.reconcile(stale, first.memory)

    assert report.writes == 1 and report.error is None
    after = conditions(harness, "audited")
    assert after["PolicyCompliant"] == ("True", "Audited"), "the other controller's condition was dropped"
    assert after["Available"][0] == "True", "the operator's own conditions were written as planned"
    records = requests_for(harness, "audited", since)
    # Sent with the body's resourceVersion: refused (409), read again once, merged and written.
    assert status_patches(records) == [409, 200]
    assert [r.method for r in records if r.method == "GET"] == ["GET"]


async def test_a_second_conflict_is_left_to_the_next_reconcile(bare: tuple[OperatorHarness, OperatorContext]) -> None:
    # Another writer changes the object before each of the operator's writes: one retry, then the
    # reconcile ends without a write (no exception, no loop), reported as a conflict (the daemon
    # runs the next one at once); the next one, undisturbed, writes.
    harness, context = bare
    reconciler = context.reconciler
    await harness.apply(manual(harness, "busy", replicas=1))
    kube: Any = reconciler.kube
    real_patch_status = kube.patch_status
    interfering = [True]
    calls: list[int] = []

    async def patch_status(*args: Any) -> Any:
        calls.append(len(calls))
        if interfering[0]:
            await add_foreign_condition(harness, "busy", f"audit {len(calls)}")
        return await real_patch_status(*args)

    kube.patch_status = patch_status
    since = len(harness.cluster.request_log)
    report = await reconciler.reconcile(harness.deployment(NS, "busy"), DeploymentMemory())

    assert report.writes == 0
    assert report.conflict and report.error is None, "a race, not a failure: the daemon re-runs it at once"
    records = requests_for(harness, "busy", since)
    assert status_patches(records) == [200, 409, 200, 409]  # the other writer's, then the operator's, twice
    assert not harness.pods(NS, "busy"), "nothing applied before the status that leads to it is written"

    interfering[0] = False
    report = await reconciler.reconcile(harness.deployment(NS, "busy"), report.memory)
    assert report.writes >= 1 and report.error is None
    assert conditions(harness, "busy")["PolicyCompliant"] == ("True", "Audited")
    assert harness.pods(NS, "busy")
    assert len(calls) == 2 + report.writes  # two tries, then the next reconcile's writes, no conflict


async def test_a_body_at_the_status_between_a_reconciles_two_writes_is_known_stale(
    bare: tuple[OperatorHarness, OperatorContext],
) -> None:
    # A reconcile writes its status twice (the plan's, then the apply's outcome). A body the watch
    # delivered between the two was taken for the object as it is: a redundant write, and the
    # Degraded Warning Event posted again.
    harness, context = bare
    reconciler = context.reconciler
    await harness.apply(manual(harness, "mid", replicas=2))
    kube: Any = reconciler.kube
    real_create = kube.create

    async def create(obj: dict[str, Any]) -> bool:
        if obj["kind"] == "Pod":
            raise TimeoutError("the Kubernetes API did not answer within 30 s")
        return bool(await real_create(obj))

    kube.create = create
    written: list[dict[str, Any]] = []
    listener: Callable[[Any], None] = lambda e: (  # noqa: E731
        written.append({"metadata": copy.deepcopy(e.obj["metadata"]), "status": copy.deepcopy(e.obj.get("status"))})
        if e.resource == (GROUP, PLURAL) and e.type == "MODIFIED"
        else None
    )
    harness.cluster.store.listeners.append(listener)
    first = await reconciler.reconcile(harness.deployment(NS, "mid"), DeploymentMemory())
    harness.cluster.store.listeners.remove(listener)
    assert first.writes == 2
    assert [e.reason.value for e in first.events if e.type == "Warning"] == ["ReconcileError"]
    between = {**harness.deployment(NS, "mid"), **written[0]}  # the watch has the first write, not the second

    since = len(harness.cluster.request_log)
    version = harness.deployment(NS, "mid")["metadata"]["resourceVersion"]
    second = await reconciler.reconcile(between, first.memory)

    assert second.writes == 0, "the status the operator wrote second was written again"
    assert [e.reason.value for e in second.events if e.type == "Warning"] == []
    # Its pods still to make, one empty patch checks the object is the one planned from (review r10),
    # sent with the version the operator wrote last, not the body's: a no-op, not a write.
    assert status_patches(requests_for(harness, "mid", since)) == [200]
    assert harness.deployment(NS, "mid")["metadata"]["resourceVersion"] == version


async def test_a_change_the_object_read_again_shows_made_is_not_announced_again(
    bare: tuple[OperatorHarness, OperatorContext],
) -> None:
    # A reconcile planned from a body that lags the operator's own last write, with no memory of it
    # (a daemon started again after a peering pause or a handover drops its memory): its write meets
    # 409 and it reads the object again, which shows the change already made. Its Events were still
    # derived from the lagging body: "Scaled: initial size" was posted a second time.
    harness, context = bare
    reconciler = context.reconciler
    await harness.apply(manual(harness, "again", replicas=2))
    lagging = harness.deployment(NS, "again")
    first = await reconciler.reconcile(lagging, DeploymentMemory())
    assert [e.reason.value for e in first.events].count("Scaled") == 1

    since = len(harness.cluster.request_log)
    second = await reconciler.reconcile(lagging, DeploymentMemory())

    records = requests_for(harness, "again", since)
    assert status_patches(records)[:1] == [409] and [r.method for r in records].count("GET") == 1
    assert second.error is None and not second.conflict
    assert [(e.reason.value, e.message) for e in second.events] == [], "announced again from the lagging body"


async def test_a_second_conflict_on_the_write_after_the_apply_is_a_race_not_a_failure(
    bare: tuple[OperatorHarness, OperatorContext],
) -> None:
    # The status after the apply met 409 twice (another writer before each try): it was reported
    # as an error ("status: 409 Conflict"), so the daemon counted a failure and backed off, while
    # the same race on the first write is a conflict, re-run at once. The Events of what was
    # applied are posted once: by this reconcile, not again by the re-run that writes its outcome.
    harness, context = bare
    reconciler = context.reconciler
    await harness.apply(manual(harness, "racing", replicas=1))
    kube: Any = reconciler.kube
    real_patch_status = kube.patch_status
    calls: list[int] = []

    async def patch_status(*args: Any) -> Any:
        calls.append(len(calls))
        if len(calls) in (2, 3):  # the write after the apply, and its one retry
            await add_foreign_condition(harness, "racing", f"audit {len(calls)}")
        return await real_patch_status(*args)

    real_create = kube.create
    refused: list[str] = []

    async def create(obj: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if obj.get("kind") == "Pod" and not refused:
            # A failed create: the status after the apply differs from the first one (it says so).
            refused.append(obj["metadata"]["name"])
            raise ApiException(status=503, reason="Service Unavailable")
        return await real_create(obj, *args, **kwargs)

    kube.patch_status = patch_status
    kube.create = create
    since = len(harness.cluster.request_log)
    report = await reconciler.reconcile(harness.deployment(NS, "racing"), DeploymentMemory())

    assert refused, "the apply met no error: there was no second write to disturb"
    assert status_patches(requests_for(harness, "racing", since)) == [200, 200, 409, 200, 409]
    assert report.conflict, "a race, not a failure: the daemon re-runs it at once"
    assert report.error is not None and "409" not in report.error, "the conflict was reported as an error"
    assert report.writes == 1, "the first write was made"

    again = await reconciler.reconcile(harness.deployment(NS, "racing"), report.memory)
    assert again.error is None and not again.conflict and again.writes >= 1
    posted = [(e.reason.value, e.message) for e in report.events + again.events]
    assert len(posted) == len(set(posted)), f"an Event posted twice: {posted}"
    assert [reason for reason, _ in posted].count("Scaled") == 1


async def test_an_invalid_spec_read_again_after_a_conflict_is_not_announced_again(
    bare: tuple[OperatorHarness, OperatorContext],
) -> None:
    # The invalid-spec path took its Events from the lagging body even when its write met 409 and
    # read the object again: the Invalid condition an earlier reconcile had announced was announced
    # again (the main path uses the copy read again).
    harness, context = bare
    reconciler = context.reconciler
    await harness.apply(manual(harness, "broken", replicas=1))
    lagging = copy.deepcopy(harness.deployment(NS, "broken"))
    lagging["spec"]["scaling"]["mode"] = "Sometimes"  # what the operator's model rejects
    first = await reconciler.reconcile(lagging, DeploymentMemory())
    assert first.refusal and first.error is None and first.writes == 1 and first.events

    since = len(harness.cluster.request_log)
    second = await reconciler.reconcile(lagging, DeploymentMemory())

    records = requests_for(harness, "broken", since)
    assert status_patches(records)[:1] == [409] and [r.method for r in records].count("GET") == 1
    # A fresh memory is a takeover: the Warning the status read again shows is said once more, as
    # found there (review r13); from the lagging body it was announced as a new change.
    said = [(e.reason.value, e.message.startswith(f"{FOUND_ON_TAKEOVER}: ")) for e in second.events]
    assert said == [("InvalidSpec", True)], "announced again from the lagging body"
    # Once per takeover: the same process's next reconcile says nothing more.
    third = await reconciler.reconcile(lagging, second.memory)
    assert [(e.reason.value, e.message) for e in third.events] == [], "announced again at the next reconcile"


async def test_a_plan_of_the_spec_before_a_scale_is_not_applied_when_its_409_shows_the_new_one(
    bare: tuple[OperatorHarness, OperatorContext],
) -> None:
    # A reconcile planned from the body before a `kubectl scale`: its status write met 409, the
    # object read again had the new spec, and the old status was written over it and the old plan
    # applied anyway: pods made for 2 replicas (CreatedPod Events) that the user had just scaled to 0.
    harness, context = bare
    reconciler = context.reconciler
    await harness.apply(manual(harness, "scaled", replicas=2))
    before = copy.deepcopy(harness.deployment(NS, "scaled"))  # what the operator's watch holds
    await harness.scale(NS, "scaled", 0)
    scaled = harness.deployment(NS, "scaled")
    assert scaled["metadata"]["generation"] != before["metadata"]["generation"]

    since = len(harness.cluster.request_log)
    report = await reconciler.reconcile(before, DeploymentMemory())

    assert report.conflict and report.error is None and report.events == ()
    assert status_patches(requests_for(harness, "scaled", since)) == [409]
    assert not harness.pods(NS, "scaled"), "the plan of the spec before the scale was applied"
    assert harness.deployment(NS, "scaled").get("status") == scaled.get("status")

    # The re-run, from the object as the watch has it now, plans the new spec.
    again = await reconciler.reconcile(harness.deployment(NS, "scaled"), report.memory)
    assert not again.conflict and again.error is None and again.writes >= 1
    assert not harness.pods(NS, "scaled")
    status = harness.deployment(NS, "scaled")["status"]
    assert status["observedGeneration"] == scaled["metadata"]["generation"] and status["desiredReplicas"] == 0


async def test_an_empty_status_patch_with_a_resource_version_is_a_no_op_or_a_conflict(
    bare: tuple[OperatorHarness, OperatorContext],
) -> None:
    # What the reconcile's check of a body relies on (review r10), as kube-apiserver does for a merge
    # patch carrying metadata.resourceVersion: at the current version nothing is stored (no new
    # resourceVersion, no watch event); at an older one, 409.
    harness, context = bare
    kube = context.reconciler.kube
    await harness.apply(manual(harness, "checked", replicas=0))
    current = harness.deployment(NS, "checked")
    version = current["metadata"]["resourceVersion"]
    events: list[str] = []
    listener: Callable[[Any], None] = lambda e: (  # noqa: E731
        events.append(e.type) if e.resource == (GROUP, PLURAL) else None
    )
    harness.cluster.store.listeners.append(listener)
    try:
        assert await kube.patch_status(NS, "checked", {}, version) == version
    finally:
        harness.cluster.store.listeners.remove(listener)
    assert events == [] and harness.deployment(NS, "checked") == current
    await harness.scale(NS, "checked", 1)
    with pytest.raises(ApiException) as refused:
        await kube.patch_status(NS, "checked", {}, version)
    assert refused.value.status == 409


async def test_a_plan_of_the_spec_before_a_scale_is_not_applied_when_its_status_has_nothing_to_write(
    bare: tuple[OperatorHarness, OperatorContext],
) -> None:
    # A reconcile from the body before a `kubectl scale` (the watch lagging) whose planned status is
    # the one already there wrote nothing, so met no 409: the old spec's plan was applied, pods made
    # for 2 replicas the user had just scaled to 0. Review r10.
    harness, context = bare
    reconciler = context.reconciler
    await harness.apply(manual(harness, "quiet", replicas=2))
    kube: Any = reconciler.kube
    real_create = kube.create
    refusing = [True]

    async def create(obj: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if obj.get("kind") == "Pod" and refusing[0]:  # a webhook down: the first reconcile makes no pod
            raise ApiException(status=503, reason="Service Unavailable")
        return await real_create(obj, *args, **kwargs)

    kube.create = create
    first = await reconciler.reconcile(harness.deployment(NS, "quiet"), DeploymentMemory())
    assert first.writes >= 1 and not harness.pods(NS, "quiet")
    stale = copy.deepcopy(harness.deployment(NS, "quiet"))  # what the operator's watch holds
    await harness.scale(NS, "quiet", 0)
    refusing[0] = False

    since = len(harness.cluster.request_log)
    report = await reconciler.reconcile(stale, first.memory)

    assert report.conflict and report.error is None
    assert status_patches(requests_for(harness, "quiet", since)) == [409]
    assert not harness.pods(NS, "quiet"), "the plan of the spec before the scale was applied"
