"""The Reconciler applies a plan's actions through the API and posts one Event per action it did:
a pod on a node that is gone is deleted and replaced (DeletedPod, CreatedPod); an action the API
answers was done already (the pod gone, the name ours) posts nothing."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

from test_status_conflict_new_spec import _ApiServer, _body, _pods, _reconciler, _source

from neuronfleet.planning.labels import service_name
from neuronfleet.planning.observation import DeploymentMemory


class _FleetApiServer(_ApiServer):
    """The stub API server listing the pods it is asked to create as running and ready on a node no
    list has; with ``deletes_find_pods`` False, each deletion answers that the pod was gone already."""

    def __init__(self, obj: dict[str, Any], *, deletes_find_pods: bool = True) -> None:
        super().__init__(obj)
        self.deletes_find_pods = deletes_find_pods

    async def create(self, obj: dict[str, Any]) -> bool:
        if obj["kind"] == "Pod":
            stored = copy.deepcopy(obj)
            stored["spec"]["nodeName"] = "ip-10-0-0-9"
            ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-07T00:00:00Z"}
            stored["status"] = {"phase": "Running", "conditions": [ready]}
            self.pods[obj["metadata"]["name"]] = stored
        return await super().create(obj)

    async def delete_pod(self, namespace: str, name: str, *args: Any, **kwargs: Any) -> bool:
        return await super().delete_pod(namespace, name) and self.deletes_find_pods


async def test_a_pod_on_a_node_gone_is_deleted_and_replaced_each_with_its_event(tmp_path: Path) -> None:
    body = _body(_source(tmp_path), replicas=1)
    kube = _FleetApiServer(copy.deepcopy(body))
    reconciler = _reconciler(tmp_path, kube, body)
    first = await reconciler.reconcile(copy.deepcopy(body), DeploymentMemory())
    (lost,) = kube.pods
    assert [reason for reason, _ in kube.events if reason == "CreatedPod"] == ["CreatedPod"]
    kube.events.clear()
    kube.created.clear()

    # No node is listed: the node the pod was bound to is gone (a fresh list agrees).
    second = await reconciler.reconcile(copy.deepcopy(kube.obj), first.memory)

    assert second.error is None
    assert kube.deleted == [f"Pod {lost}"]
    (replacement,) = kube.pods
    assert replacement != lost and _pods(kube) == [f"Pod {replacement}"]
    reasons = [reason for reason, _ in kube.events]
    assert reasons.count("DeletedPod") == 1 and reasons.count("CreatedPod") == 1
    deleted = next(message for reason, message in kube.events if reason == "DeletedPod")
    assert deleted.startswith(f"deleted pod {lost}: ")


async def test_a_deletion_the_api_says_was_done_already_posts_no_event(tmp_path: Path) -> None:
    body = _body(_source(tmp_path), replicas=1)
    kube = _FleetApiServer(copy.deepcopy(body), deletes_find_pods=False)
    reconciler = _reconciler(tmp_path, kube, body)
    first = await reconciler.reconcile(copy.deepcopy(body), DeploymentMemory())
    kube.events.clear()

    second = await reconciler.reconcile(copy.deepcopy(kube.obj), first.memory)

    assert second.error is None and len(kube.deleted) == 1
    assert "DeletedPod" not in [reason for reason, _ in kube.events]


class _StoppingApiServer(_FleetApiServer):
    """The stub API server that sets the daemon's stop when it creates its first pod."""

    def __init__(self, obj: dict[str, Any], stopping: asyncio.Event) -> None:
        super().__init__(obj)
        self.stopping = stopping

    async def create(self, obj: dict[str, Any]) -> bool:
        if obj["kind"] == "Pod":
            self.stopping.set()
        return await super().create(obj)


async def test_a_stop_during_the_apply_leaves_the_actions_after_it_undone(tmp_path: Path) -> None:
    # The daemon stops (a peer takes over) while the first of three pods is created: that call
    # stands, the two after it are the new leader's to make, and the report says it stopped.
    body = _body(_source(tmp_path), replicas=3)
    stopping = asyncio.Event()
    kube = _StoppingApiServer(copy.deepcopy(body), stopping)
    reconciler = _reconciler(tmp_path, kube, body)

    report = await reconciler.reconcile(copy.deepcopy(body), DeploymentMemory(), stopping)

    assert report.stopped and report.error is None
    assert len(report.actions) == 3, report.actions
    assert len(_pods(kube)) == 1, _pods(kube)
    assert [reason for reason, _ in kube.events].count("CreatedPod") == 1


class _ServiceTakenApiServer(_FleetApiServer):
    """The stub API server with a Service of the deployment's name in its namespace, made by a Helm
    release's controller; ``ensure`` records what it is asked to make or patch."""

    def __init__(self, obj: dict[str, Any]) -> None:
        super().__init__(obj)
        self.ensured: list[str] = []

    async def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if kind == "Service" and (namespace, name) == (self.obj["metadata"]["namespace"], service_name("emb")):
            owner = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "web-1", "controller": True}
            return {"metadata": {"name": name, "namespace": namespace, "ownerReferences": [owner]}}
        return await super().read(kind, namespace, name)

    async def ensure(self, obj: dict[str, Any], current: Any) -> str:
        self.ensured.append(f"{obj['kind']} {obj['metadata']['namespace']}/{obj['metadata']['name']}")
        return await super().ensure(obj, current)


async def test_a_service_of_the_same_name_another_controller_holds_is_left_alone_and_named(tmp_path: Path) -> None:
    # Read in the deployment's own namespace ("ns"), where it would be patched: the Service there
    # is another controller's, so it is not patched, and the error names its owner.
    body = _body(_source(tmp_path), replicas=1)
    kube = _ServiceTakenApiServer(copy.deepcopy(body))
    reconciler = _reconciler(tmp_path, kube, body)

    report = await reconciler.reconcile(copy.deepcopy(body), DeploymentMemory())

    assert report.error is not None, kube.ensured
    assert f"Service {service_name('emb')} exists and belongs to Deployment web" in report.error, report.error
    assert kube.ensured == ["PodDisruptionBudget ns/emb"]
