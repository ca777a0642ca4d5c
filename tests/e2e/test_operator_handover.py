"""A stopping operator writes nothing more: the peer taking over is already reconciling.

Kopf's goodbye on SIGTERM (lifetime 0), or a new peer of higher priority pausing the leader, lets
the next replica act at once, while the old leader's daemon gets a grace to finish. A reconcile of
the old leader under way then (here: in a slow read, as a Prometheus query or an S3 lookup near
their timeouts) planned from the spec it read at its start; finishing it demoted a serving pod and
deleted the new leader's pod after a scale-up it had not seen. And an operator that exits: Kopf
cancels its Event poster when it asks the daemons to stop, so the Events of writes made in the
grace were lost for good (the next operator, reading the new status, posts none).

Real time, not looptime: Kopf's peering compares keep-alives with the wall clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fixtures_peering import NS, Instance, converged, ha_manifest
from operator_harness import OperatorHarness, example, ready

from neuronfleet.api.v1alpha1 import GROUP
from neuronfleet.reconcile import ReconcileReport
from neuronfleet.sandbox import SandboxCluster
from neuronfleet.sandbox.store import WatchEvent

#: A slow read (seconds), inside Kopf's grace for a stopping daemon (handlers.STOP_GRACE_SECONDS).
SLOW_READ = 3.0


class FleetChanges:
    """Pods of the deployment deleted, and pods demoted from active, once ``armed``."""

    def __init__(self, cluster: SandboxCluster, name: str) -> None:
        self.name = name
        self.armed = False
        self.roles: dict[str, str] = {}
        self.removed: list[str] = []
        self.demoted: list[str] = []
        cluster.store.listeners.append(self.observe)

    def observe(self, event: WatchEvent) -> None:
        if event.resource != ("", "pods"):
            return
        meta = event.obj["metadata"]
        labels = meta.get("labels") or {}
        if labels.get(f"{GROUP}/deployment") != self.name:
            return
        pod, role = meta["name"], labels.get(f"{GROUP}/role", "")
        if self.armed:
            if (event.type == "DELETED" or meta.get("deletionTimestamp")) and pod not in self.removed:
                self.removed.append(pod)
            if self.roles.get(pod) == "active" and role != "active" and pod not in self.demoted:
                self.demoted.append(pod)
        self.roles[pod] = role


def slow_once(target: Any, method: str, when: Callable[..., bool] = lambda *args: True) -> asyncio.Event:
    """``target.method``'s first call for which ``when(*args)`` holds takes SLOW_READ seconds more
    (a slow answer of the API server, Prometheus or S3); the Event returned is set in it."""
    real = getattr(target, method)
    started = asyncio.Event()

    async def slow(*args: Any) -> Any:
        if not started.is_set() and when(*args):
            started.set()
            await asyncio.sleep(SLOW_READ)  # the slow answer itself, not a wait for something
        return await real(*args)

    setattr(target, method, slow)
    return started


def record_reports(instance: Instance, reports: list[ReconcileReport]) -> None:
    assert instance.context is not None
    context = instance.context
    real = context.reconcile

    async def reconcile(body: Any, namespace: str, name: str, stopping: asyncio.Event | None = None) -> Any:
        report = await real(body, namespace, name, stopping)
        reports.append(report)
        return report

    context.reconcile = reconcile  # type: ignore[method-assign]


async def serving_one_manual_replica(harness: OperatorHarness, namespace: str) -> str:
    """The example deployment at one Manual replica in ``namespace``, its pod ready; its name."""
    manifest = harness.localize(
        example("bert-embeddings", scaling={"mode": "Manual", "replicas": 1, "minReplicas": 0}), namespace=namespace
    )
    name: str = manifest["metadata"]["name"]
    harness.precompile(manifest)
    await harness.apply(manifest)
    await harness.wait(lambda: any(ready(p) for p in harness.pods(namespace, name, "active")), timeout=90, what="up")
    return name


@pytest.mark.looptime(False)
@pytest.mark.timeout(150)
@pytest.mark.parametrize("hand_over", ["sigterm", "new-pod-outranks"])
async def test_a_leader_stopped_in_a_reconcile_writes_nothing_once_a_peer_takes_over(
    peering_cluster: SandboxCluster, silenced: set[str], tmp_path: Path, hand_over: str
) -> None:
    """sigterm: the leader A is stopped (a rolling update deletes its pod) and the standby B takes
    over; new-pod-outranks: a new pod B of the rolling update drew a higher priority than A."""
    cluster = peering_cluster
    harness = OperatorHarness(cluster, tmp_path)
    await harness.ensure_priority_classes()
    a = Instance(harness, "operator-a", priority=200)
    b = Instance(harness, "operator-b", priority=100 if hand_over == "sigterm" else 300)
    try:
        await a.start()
        if hand_over == "sigterm":
            await b.start()
        manifest = ha_manifest(harness, 2)
        name = manifest["metadata"]["name"]
        harness.precompile(manifest)
        await harness.apply(manifest)
        await harness.wait(lambda: converged(harness, name, 2), timeout=60, what="the fleet up, by A")
        assert b.reconciles == 0
        changes = FleetChanges(cluster, name)
        a_reports: list[ReconcileReport] = []
        record_reports(a, a_reports)
        assert a.context is not None
        in_slow_read = slow_once(a.context.reconciler, "observe")
        await harness.wait(in_slow_read.is_set, timeout=30, what="A in a slow read")
        reports_before = len(a_reports)

        # A read replicas=2; the user scales to 3 while A is in its read; A hands over.
        changes.armed = True
        await harness.scale(NS, name, 3)
        stopping_a: asyncio.Task[None] | None = None
        if hand_over == "sigterm":
            stopping_a = asyncio.create_task(a.sigterm())
        else:
            await b.start()
        await harness.wait(lambda: converged(harness, name, 3), timeout=60, what="3 active, by B")
        # A's reconcile under way has returned (or A has exited): whatever it was going to write is written.
        await harness.wait(
            lambda: len(a_reports) > reports_before or (stopping_a is not None and stopping_a.done()),
            timeout=30,
            what="A's reconcile under way over",
        )
        if stopping_a is not None:
            await stopping_a
        assert not changes.removed, f"pods removed after a scale-up to 3: {changes.removed}"
        assert not changes.demoted, f"serving pods demoted after a scale-up to 3: {changes.demoted}"
        stale = a_reports[reports_before:]
        assert all(r.stopped and r.writes == 0 and not r.events for r in stale), stale
        assert converged(harness, name, 3)
    finally:
        await a.close()
        await b.close()
        await harness.close()


def events_of(harness: OperatorHarness, namespace: str, name: str) -> list[str]:
    return [f"{e.get('reason')}: {e.get('message') or e.get('note')}" for e in harness.events(namespace, name)]


@pytest.mark.looptime(False)
@pytest.mark.timeout(120)
async def test_a_scale_up_under_way_at_sigterm_is_applied_with_its_event_by_the_next_operator(
    harness: OperatorHarness,
) -> None:
    namespace = "sigterm"
    name = await serving_one_manual_replica(harness, namespace)
    await harness.wait(
        lambda: any("initial size" in e for e in events_of(harness, namespace, name)), timeout=30, what="Events"
    )
    before = events_of(harness, namespace, name)

    assert harness.context is not None
    in_slow_read = slow_once(harness.context.reconciler, "observe", lambda dep, *_: dep.spec.scaling.replicas == 2)
    await harness.scale(namespace, name, 2)
    await harness.wait(in_slow_read.is_set, timeout=30, what="the reconcile of the scale-up in a slow read")
    await harness.stop()  # SIGTERM: Kopf's Event poster is cancelled at once
    status = harness.deployment(namespace, name).get("status") or {}
    assert status.get("desiredReplicas") == 1, "the stopping operator wrote the scale-up, whose Events are lost"
    assert len(harness.pods(namespace, name, "active")) == 1

    await harness.start()  # the next operator
    await harness.wait(lambda: len(harness.pods(namespace, name, "active")) == 2, timeout=60, what="2 active")
    await harness.wait(
        lambda: any("1 -> 2" in e for e in events_of(harness, namespace, name) if e not in before),
        timeout=30,
        what="the Scaled Event of the scale-up",
    )


@pytest.mark.looptime(False)
@pytest.mark.timeout(120)
async def test_the_event_of_a_write_on_the_wire_at_sigterm_is_posted_by_the_stopping_operator(
    harness: OperatorHarness,
) -> None:
    # The write is sent before the stop, so it lands, and the next operator, reading the new status,
    # has nothing to tell. Kopf's Event poster, cancelled at once on SIGTERM, lost its Event.
    namespace = "on-the-wire"
    name = await serving_one_manual_replica(harness, namespace)

    assert harness.context is not None
    in_write = slow_once(
        harness.context.reconciler.kube,
        "patch_status",
        lambda ns, obj_name, patch, *_: obj_name == name and patch.get("desiredReplicas") == 2,
    )
    await harness.scale(namespace, name, 2)
    await harness.wait(in_write.is_set, timeout=30, what="the status write of the scale-up under way")
    await harness.stop()  # SIGTERM while the write is on the wire
    assert (harness.deployment(namespace, name).get("status") or {}).get("desiredReplicas") == 2
    scaled = [
        e
        for e in harness.cluster.list("events", namespace)
        if (e.get("involvedObject") or {}).get("name") == name and "1 -> 2" in (e.get("message") or "")
    ]
    assert scaled, events_of(harness, namespace, name)
    assert {e["source"]["component"] for e in scaled} == {"neuronfleet"}
