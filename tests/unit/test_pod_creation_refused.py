"""A pod creation the API server refuses, through the Reconciler: a 403 or 422 is a refusal, named
in the status when the operator knows its words (here a missing PriorityClass, with its fix); any
other failed answer is a reconcile error, not a refusal; a name another controller's pod holds is an
error that names that controller."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException
from test_status_conflict_new_spec import _ApiServer, _body, _reconciler, _source

from neuronfleet.planning.observation import DeploymentMemory

PRIORITY_CLASS_MISSING = 'pods "emb-a1" is forbidden: no PriorityClass with name neuronfleet-active was found'


class _RefusingApiServer(_ApiServer):
    """Answers every pod creation with ``status`` and a Status body saying ``message``."""

    def __init__(self, obj: dict[str, Any], status: int, message: str) -> None:
        super().__init__(obj)
        self.answer = (status, message)
        self.attempts = 0

    async def create(self, obj: dict[str, Any]) -> bool:
        if obj["kind"] != "Pod":
            return await super().create(obj)
        self.attempts += 1
        status, message = self.answer
        exc = ApiException(status=status, reason="Forbidden" if status == 403 else "Internal Server Error")
        exc.body = json.dumps({"kind": "Status", "status": "Failure", "message": message, "code": status}).encode()
        raise exc


def _degraded(kube: _ApiServer) -> dict[str, Any]:
    return next(c for c in kube.obj["status"]["conditions"] if c["type"] == "Degraded")


async def test_a_403_for_a_missing_priority_class_is_named_with_its_fix(tmp_path: Path) -> None:
    body = _body(_source(tmp_path), replicas=2)
    kube = _RefusingApiServer(copy.deepcopy(body), 403, PRIORITY_CLASS_MISSING)
    report = await _reconciler(tmp_path, kube, body).reconcile(copy.deepcopy(body), DeploymentMemory())

    assert kube.attempts == 1, "the plan's later creations rely on the first: it stops there"
    assert report.error is None, "a refusal is said as one, not counted as a failed call"
    degraded = _degraded(kube)
    assert (degraded["status"], degraded["reason"]) == ("True", "PriorityClassMissing")
    assert "PriorityClass neuronfleet-active does not exist" in degraded["message"]
    assert "priorityClasses.create" in degraded["message"]


async def test_a_500_on_a_pod_creation_is_an_error_not_a_refusal(tmp_path: Path) -> None:
    body = _body(_source(tmp_path), replicas=2)
    kube = _RefusingApiServer(copy.deepcopy(body), 500, PRIORITY_CLASS_MISSING)
    report = await _reconciler(tmp_path, kube, body).reconcile(copy.deepcopy(body), DeploymentMemory())

    assert kube.attempts == 1
    assert report.error is not None and "500" in report.error
    assert _degraded(kube)["reason"] != "PriorityClassMissing"


class _NameHeldApiServer(_ApiServer):
    """Every pod name the plan creates is held already by a pod a ReplicaSet controls."""

    async def create(self, obj: dict[str, Any]) -> bool:
        return bool(obj["kind"] != "Pod")

    async def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if kind != "Pod":
            return await super().read(kind, namespace, name)
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d4f", "uid": "rs-1", "controller": True}
        return {"metadata": {"name": name, "namespace": namespace, "ownerReferences": [owner]}}


async def test_a_pod_name_another_controller_holds_is_an_error_that_names_it(tmp_path: Path) -> None:
    body = _body(_source(tmp_path), replicas=1)
    kube = _NameHeldApiServer(copy.deepcopy(body))
    report = await _reconciler(tmp_path, kube, body).reconcile(copy.deepcopy(body), DeploymentMemory())

    assert report.error is not None
    assert "exists and belongs to ReplicaSet web-5d4f, not to this InferenceDeployment" in report.error
    assert "delete or rename it" in report.error
