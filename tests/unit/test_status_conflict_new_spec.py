"""A status write refused (409) because the user changed the spec since the body was read.

The reconcile plans from the body its watch delivered; its status write carries that body's
resourceVersion and meets 409 when the object changed since. It then reads the object again and
wrote its status over it whatever had changed: also when the copy read again had a new spec (a
``kubectl scale`` or edit meanwhile), and then applied the old spec's plan: pods made for a replica
count the user had just changed, each with a CreatedPod Event, for the next reconcile to delete. A
copy read again at another generation, or being deleted, is no longer the object the plan was made
for: nothing of it is written or applied, and the reconcile ends as a conflict (the daemon runs it
again at once, from the object as its watch has it then). Review r8.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kopf
import pytest
from handler_calls import as_called, kopf_body
from kubernetes_asyncio.client.exceptions import ApiException
from stub_deployments import EmptyCluster

from neuronfleet import handlers
from neuronfleet.api.v1alpha1 import InferenceDeployment
from neuronfleet.artifacts.store import ArtifactStore
from neuronfleet.handlers import OperatorContext
from neuronfleet.kube.builders import BuilderConfig
from neuronfleet.kube.client import JobDeletion
from neuronfleet.planning.admission import OperatorAccount
from neuronfleet.planning.observation import DeploymentMemory
from neuronfleet.reconcile import OperatorSettings, Reconciler, ReconcileReport
from neuronfleet.sandbox.artifacts import record_uncompiled_artifact

deployment_changed = as_called(handlers.deployment_changed)
keep_converging = as_called(handlers.keep_converging)

IMAGE = "registry.example/neuronserve:0.1.0"


def _body(source: Path, replicas: int, mode: str = "Manual") -> dict[str, Any]:
    return {
        "apiVersion": "serving.neuronfleet.dev/v1alpha1",
        "kind": "InferenceDeployment",
        "metadata": {"name": "emb", "namespace": "ns", "uid": "uid-1", "generation": 1, "resourceVersion": "10"},
        "spec": {
            "model": {"source": str(source), "format": "torchscript"},
            "scaling": {"mode": mode, "replicas": replicas, "minReplicas": 0},
            "warmPool": {"mode": "Off"},
        },
        "status": {},
    }


def _edited(body: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """``body`` as the API server has it after a spec change (a new generation and resourceVersion)."""
    new = copy.deepcopy(body)
    new["spec"]["scaling"].update(spec)
    meta = new["metadata"]
    meta["generation"] += 1
    meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
    return new


def _merge(old: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    merged = dict(old)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


class _ApiServer(EmptyCluster):
    """The object as the API server has it, with its optimistic concurrency on status writes, and
    the calls the apply makes. ``before_write`` runs before each status write, given its number
    (another writer acting between the reconcile's reads and its writes)."""

    def __init__(self, obj: dict[str, Any], before_write: Callable[[int], None] = lambda _: None) -> None:
        self.obj = obj
        self.before_write = before_write
        self.status_writes: list[int] = []  # the answer to each: 200 or 409
        self.created: list[str] = []
        # The fleet's pods and compile Jobs as listed (in the object's namespace), what was deleted
        # ("Pod <name>", "Job <name>") and the Events posted (reason, message).
        self.pods: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        self.deleted: list[str] = []
        self.events: list[tuple[str, str]] = []

    def _is_obj(self, namespace: str, name: str) -> bool:
        meta = self.obj["metadata"]
        return (namespace, name) == (meta["namespace"], meta["name"])

    async def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.obj) if kind == "InferenceDeployment" and self._is_obj(namespace, name) else None

    async def patch_status(
        self, namespace: str, name: str, patch: dict[str, Any], resource_version: str | None = None
    ) -> str:
        self.before_write(len(self.status_writes) + 1)
        if not self._is_obj(namespace, name):
            self.status_writes.append(404)
            raise ApiException(status=404, reason="Not Found")
        meta = self.obj["metadata"]
        if resource_version is not None and resource_version != meta["resourceVersion"]:
            self.status_writes.append(409)
            raise ApiException(status=409, reason="Conflict")
        self.status_writes.append(200)
        self.obj["status"] = _merge(self.obj.get("status") or {}, patch)
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        return str(meta["resourceVersion"])

    async def create(self, obj: dict[str, Any]) -> bool:
        self.created.append(f"{obj['kind']} {obj['metadata']['name']}")
        return True

    async def ensure(self, obj: dict[str, Any], current: Any) -> str:
        return "created"

    async def patch_pod_metadata(self, *args: Any) -> bool:
        return True

    async def list_pods(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        return copy.deepcopy(list(self.pods.values())) if namespace == self.obj["metadata"]["namespace"] else []

    async def list_jobs(self, namespace: str, labels: Any) -> list[dict[str, Any]]:
        return copy.deepcopy(list(self.jobs.values())) if namespace == self.obj["metadata"]["namespace"] else []

    async def delete_pod(self, namespace: str, name: str, *args: Any, **kwargs: Any) -> bool:
        """True when the pod was there to delete (the KubeApi's answer: False when gone already)."""
        if namespace != self.obj["metadata"]["namespace"]:
            return False
        self.deleted.append(f"Pod {name}")
        return self.pods.pop(name, None) is not None

    async def delete_job(self, namespace: str, name: str, *args: Any) -> JobDeletion:
        if namespace == self.obj["metadata"]["namespace"]:
            self.deleted.append(f"Job {name}")
            self.jobs.pop(name, None)
        return JobDeletion("gone")

    async def post_event(self, body: dict[str, Any], kind: str, reason: str, message: str) -> bool:
        self.events.append((reason, message))
        return True


def _reconciler(
    tmp_path: Path, kube: _ApiServer, body: dict[str, Any], operator_account: OperatorAccount | None = None
) -> Reconciler:
    store = tmp_path / "store"
    record_uncompiled_artifact(InferenceDeployment.model_validate(body).spec, store, "compiled", IMAGE)
    settings = OperatorSettings(
        artifact_store=str(store),
        builder=BuilderConfig(model_server_image=IMAGE),
        operator_account=operator_account,
    )
    return Reconciler(kube, ArtifactStore(), settings)  # type: ignore[arg-type]


def _source(tmp_path: Path) -> Path:
    source = tmp_path / "model.pt"
    source.write_bytes(b"weights")
    return source


def _pods(kube: _ApiServer) -> list[str]:
    return [made for made in kube.created if made.startswith("Pod ")]


def assert_nothing_done(report: ReconcileReport, kube: _ApiServer, live: dict[str, Any]) -> None:
    assert report.conflict and report.error is None, "a race, not a failure: the daemon re-runs it at once"
    assert kube.status_writes == [409], "the old spec's status was written over the new one"
    assert kube.obj["status"] == live["status"]
    assert kube.created == [], "the old spec's plan was applied"
    assert report.events == () and report.writes == 0


async def test_a_409_that_shows_a_new_spec_writes_and_applies_nothing_of_the_old_ones_plan(tmp_path: Path) -> None:
    old = _body(_source(tmp_path), replicas=3)  # what the watch had when the reconcile began
    new = _edited(old, replicas=0)  # the user scaled it to 0 meanwhile
    kube = _ApiServer(copy.deepcopy(new))
    reconciler = _reconciler(tmp_path, kube, old)

    report = await reconciler.reconcile(old, DeploymentMemory())

    assert_nothing_done(report, kube, new)


async def test_a_409_that_shows_the_object_being_deleted_writes_and_applies_nothing(tmp_path: Path) -> None:
    # Its deletion is under way (the garbage collector removes what it owns): anything made now is
    # made only to be collected. The same generation: only the deletionTimestamp tells.
    old = _body(_source(tmp_path), replicas=2)
    deleting = copy.deepcopy(old)
    deleting["metadata"].update(resourceVersion="11", deletionTimestamp="2026-12-05T03:00:00Z")
    kube = _ApiServer(copy.deepcopy(deleting))
    reconciler = _reconciler(tmp_path, kube, old)

    report = await reconciler.reconcile(old, DeploymentMemory())

    assert_nothing_done(report, kube, deleting)


async def test_a_409_that_shows_only_another_status_writer_is_still_written_over_and_applied(
    tmp_path: Path,
) -> None:
    # The control: the same spec at a newer resourceVersion (another controller wrote its own
    # condition): the plan is still the object's, written over the copy read again and applied.
    old = _body(_source(tmp_path), replicas=2)
    audited = copy.deepcopy(old)
    audited["metadata"]["resourceVersion"] = "11"
    audited["status"] = {"conditions": [{"type": "PolicyCompliant", "status": "True", "reason": "Audited"}]}
    kube = _ApiServer(audited)
    reconciler = _reconciler(tmp_path, kube, old)

    report = await reconciler.reconcile(old, DeploymentMemory())

    assert not report.conflict and report.error is None
    assert kube.status_writes[:2] == [409, 200]
    assert len(_pods(kube)) == 2
    assert {c["type"] for c in kube.obj["status"]["conditions"]} >= {"PolicyCompliant", "Ready"}


async def test_the_status_after_the_apply_is_not_written_over_a_spec_changed_during_the_apply(
    tmp_path: Path,
) -> None:
    # The first write went through and the plan was applied (its CreatedPod Events tell what was
    # done: true); the user's edit came before the second write: the outcome of the old spec's plan
    # is not written over the new spec's object. The re-run plans from the new one.
    old = _body(_source(tmp_path), replicas=2)
    kube = _ApiServer(copy.deepcopy(old))
    first_written: list[dict[str, Any]] = []

    def edit_before_the_second_write(write: int) -> None:
        if write == 2:
            first_written.append(copy.deepcopy(kube.obj["status"]))
            kube.obj = {**_edited(kube.obj, replicas=0), "status": kube.obj["status"]}

    kube.before_write = edit_before_the_second_write
    real_create = kube.create
    refused: list[str] = []

    async def create(obj: dict[str, Any]) -> bool:
        if obj["kind"] == "Pod" and not refused:
            # One create fails: the status after the apply says so, so there is a second write.
            refused.append(obj["metadata"]["name"])
            raise ApiException(status=503, reason="Service Unavailable")
        return await real_create(obj)

    kube.create = create  # type: ignore[method-assign]
    reconciler = _reconciler(tmp_path, kube, old)

    report = await reconciler.reconcile(old, DeploymentMemory())

    assert refused, "the apply met no error: there was no second write"
    assert kube.status_writes == [200, 409], "the old spec's outcome was written over the new spec"
    assert kube.obj["status"] == first_written[0]
    assert report.conflict and report.writes == 1
    assert report.error is not None and "409" not in report.error  # the create's 503, not the race


async def test_an_invalid_spec_is_not_reported_over_the_new_spec_a_409_showed(tmp_path: Path) -> None:
    # The body planned from has a spec the operator rejects; the user fixed it meanwhile: its
    # InvalidSpec status (and Event) would tell of a spec the object no longer has.
    source = _source(tmp_path)
    valid = _body(source, replicas=1)
    invalid = _body(source, replicas=1, mode="Sometimes")
    fixed = _edited(valid)
    kube = _ApiServer(copy.deepcopy(fixed))
    reconciler = _reconciler(tmp_path, kube, valid)

    report = await reconciler.reconcile(invalid, DeploymentMemory())

    assert report.conflict and report.error is None
    assert kube.status_writes == [409] and kube.obj["status"] == fixed["status"]
    assert report.events == () and report.writes == 0


async def test_an_invalid_specs_status_write_meeting_a_second_conflict_ends_as_a_conflict(tmp_path: Path) -> None:
    # Another status writer changes the object before each write: the write, and the one retried over
    # the object read again, meet a 409. A race, not a failure: no error, no write, re-run at once.
    source = _source(tmp_path)
    invalid = _body(source, replicas=1, mode="Sometimes")

    def another_writer(_: int) -> None:
        kube.obj["metadata"]["resourceVersion"] = str(int(kube.obj["metadata"]["resourceVersion"]) + 1)

    kube = _ApiServer(copy.deepcopy(invalid), before_write=another_writer)
    reconciler = _reconciler(tmp_path, kube, _body(source, replicas=1))

    report = await reconciler.reconcile(invalid, DeploymentMemory())

    assert report.conflict and report.error is None
    assert kube.status_writes == [409, 409]
    assert report.events == () and report.writes == 0


class _Daemon:
    """The operator's daemon for one object, with the real reconciler against ``kube``, and a body
    the test changes as Kopf's watch does (a live view). Each reconcile's body generation and
    whether it ended as a conflict are noted; the daemon stops after the first one that did not.
    The interval is an hour: a re-run that waited for it would not end within the test's deadline."""

    def __init__(self, tmp_path: Path, kube: _ApiServer, raw: dict[str, Any]) -> None:
        self.raw, self.runs, self.stop = raw, list[tuple[int, bool]](), list[bool]()
        self.ran = asyncio.Event()
        store = tmp_path / "store"
        record_uncompiled_artifact(InferenceDeployment.model_validate(raw).spec, store, "compiled", IMAGE)
        settings = OperatorSettings(
            artifact_store=str(store), builder=BuilderConfig(model_server_image=IMAGE), interval_seconds=3600.0
        )
        daemon = self

        class Noting(Reconciler):
            async def reconcile(self, body: Any, memory: DeploymentMemory, stopping: Any = None) -> ReconcileReport:
                report = await super().reconcile(body, memory, stopping)
                daemon.runs.append((body["metadata"]["generation"], report.conflict))
                if not report.conflict:
                    daemon.stop.append(True)
                    daemon.context.wakeups[("ns", "emb")].set()  # no wait for the interval to see it
                daemon.ran.set()
                return report

        self.context = OperatorContext(Noting(kube, ArtifactStore(), settings))  # type: ignore[arg-type]
        self.memo = kopf.Memo(context=self.context)

    async def run(self) -> None:
        stopped: Any = _Stopped(self.stop)
        async with asyncio.timeout(60):
            await keep_converging(body=kopf_body(self.raw), memo=self.memo, namespace="ns", name="emb", stopped=stopped)

    async def runs_seen(self, count: int, running: asyncio.Task[None]) -> None:
        """Until ``count`` reconciles ran, or the daemon (``running``) ended."""
        async with asyncio.timeout(60):
            while len(self.runs) < count and not running.done():
                self.ran.clear()
                ran = asyncio.ensure_future(self.ran.wait())
                await asyncio.wait({ran, running}, return_when=asyncio.FIRST_COMPLETED)
                ran.cancel()

    async def watch_delivers(self, obj: dict[str, Any]) -> None:
        self.raw.clear()
        self.raw.update(copy.deepcopy(obj))
        await deployment_changed(type="MODIFIED", body=kopf_body(self.raw), namespace="ns", name="emb", memo=self.memo)


class _Stopped:
    """Kopf's DaemonStopped as far as the daemon reads it: true once ``stop`` holds anything."""

    def __init__(self, stop: list[bool]) -> None:
        self.stop = stop

    def __bool__(self) -> bool:
        return bool(self.stop)

    async def wait(self) -> None:
        await asyncio.Event().wait()  # the daemon ends on ``bool(self)`` here


async def test_the_daemon_re_runs_at_once_from_the_new_spec_its_watch_has(tmp_path: Path) -> None:
    # The watch delivered the edit by the time the object was read again: the re-run, at once, plans
    # from it. Nothing was ever made for the old spec's 3 replicas.
    old = _body(_source(tmp_path), replicas=3)
    new = _edited(old, replicas=0)
    kube = _ApiServer(copy.deepcopy(new))
    daemon = _Daemon(tmp_path, kube, copy.deepcopy(old))
    read = kube.read

    async def read_as_the_watch_delivers(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        await daemon.watch_delivers(kube.obj)
        return await read(kind, namespace, name)

    kube.read = read_as_the_watch_delivers  # type: ignore[method-assign]

    await daemon.run()

    assert daemon.runs == [(1, True), (2, False)]
    assert kube.created == []
    assert kube.obj["status"]["observedGeneration"] == 2 and kube.obj["status"]["desiredReplicas"] == 0


async def test_a_watch_that_lags_the_409_delays_the_new_spec_to_its_delivery_not_the_interval(
    tmp_path: Path,
) -> None:
    # The re-run at once still has the old body: it meets the same conflict (nothing made again),
    # then waits; the watch's delivery of the new generation wakes it, an hour before its interval.
    old = _body(_source(tmp_path), replicas=3)
    new = _edited(old, replicas=0)
    kube = _ApiServer(copy.deepcopy(new))
    daemon = _Daemon(tmp_path, kube, copy.deepcopy(old))
    running = asyncio.create_task(daemon.run())

    await daemon.runs_seen(2, running)
    assert daemon.runs == [(1, True), (1, True)], "the old spec's plan was applied"
    await daemon.watch_delivers(kube.obj)
    await running

    assert daemon.runs == [(1, True), (1, True), (2, False)]
    assert kube.created == []
    assert kube.obj["status"]["observedGeneration"] == 2


async def test_a_stale_plan_with_nothing_to_write_is_not_applied(tmp_path: Path) -> None:
    # Review r10: a body whose planned status is the one already there wrote nothing, so no 409 said
    # the spec had changed since: the old spec's pods were made. With actions to apply, an empty
    # patch at the body's version checks it first.
    old = _body(_source(tmp_path), replicas=3)
    kube = _ApiServer(copy.deepcopy(old))
    reconciler = _reconciler(tmp_path, kube, old)
    real_create = kube.create
    refusing = [True]

    async def create(obj: dict[str, Any]) -> bool:  # the first reconcile's pods refused (a webhook down)
        if obj["kind"] == "Pod" and refusing[0]:
            raise ApiException(status=503, reason="Service Unavailable")
        return await real_create(obj)

    kube.create = create  # type: ignore[method-assign]
    first = await reconciler.reconcile(copy.deepcopy(kube.obj), DeploymentMemory())
    stale = copy.deepcopy(kube.obj)  # the watch's body: replicas 3, the status just written
    kube.obj = {**_edited(kube.obj, replicas=0), "status": kube.obj["status"]}  # scaled to 0, not yet delivered
    refusing[0] = False
    writes = len(kube.status_writes)

    report = await reconciler.reconcile(stale, first.memory)

    assert kube.status_writes[writes:] == [409] and report.conflict
    assert _pods(kube) == [], "pods made for the spec before the scale"

    # The same body while it is current: checked (200), then applied.
    kube.obj = copy.deepcopy(stale)
    report = await reconciler.reconcile(stale, first.memory)
    assert not report.conflict and kube.status_writes[writes + 1] == 200
    assert len(_pods(kube)) == 3


async def test_a_status_write_failing_with_another_answer_than_409_is_raised_not_taken_for_a_conflict(
    tmp_path: Path,
) -> None:
    # Only a 409 means "changed since": read again and write over it. Any other answer (here a 500)
    # is raised to the daemon, which reports it and backs off; reading the object again and writing
    # once more would hide it, and the plan is not applied.
    body = _body(_source(tmp_path), replicas=2)
    kube = _ApiServer(copy.deepcopy(body))
    reads: list[str] = []
    calls: list[int] = []

    def failing(number: int) -> None:
        calls.append(number)
        raise ApiException(status=500, reason="Internal Server Error")

    async def read(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        reads.append(kind)
        return None

    kube.before_write = failing
    kube.read = read  # type: ignore[method-assign]
    with pytest.raises(ApiException) as raised:
        await _reconciler(tmp_path, kube, body).reconcile(copy.deepcopy(body), DeploymentMemory())

    assert raised.value.status == 500
    assert calls == [1], "the status write was tried again"
    assert "InferenceDeployment" not in reads, "the object was read again as after a conflict"
    assert kube.created == [], "a plan whose status could not be written was applied"
