"""The adapter's create against real HTTP answering as the API server does: each kind goes to its
API's collection with the object as sent, True once created, False when it exists already (a
retried reconcile's create), and any other refusal is raised."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from kube_http import refused, served_kube
from kubernetes_asyncio.client.exceptions import ApiException

from neuronfleet.kube.client import KubeClient
from neuronfleet.sandbox.errors import ApiError, already_exists

COLLECTIONS = {
    "Pod": "/api/v1/namespaces/serving/pods",
    "Service": "/api/v1/namespaces/serving/services",
    "PodDisruptionBudget": "/apis/policy/v1/namespaces/serving/poddisruptionbudgets",
    "Job": "/apis/batch/v1/namespaces/serving/jobs",
}


@pytest.fixture
async def created() -> AsyncIterator[tuple[KubeClient, list[tuple[str, dict[str, Any]]]]]:
    seen: list[tuple[str, dict[str, Any]]] = []

    async def create(request: web.Request) -> web.Response:
        body = await request.json()
        name = body["metadata"]["name"]
        if name == "exists":
            return refused(already_exists("pods", "", name))
        if name == "forbidden":
            return refused(ApiError(403, "Forbidden", f'jobs.batch "{name}" is forbidden'))
        seen.append((request.path, body))
        return web.json_response(body, status=201)

    app = web.Application()
    for path in COLLECTIONS.values():
        app.router.add_post(path, create)
    async with served_kube(app) as kube:
        yield kube, seen


def _object(kind: str, name: str) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name, "namespace": "serving", "labels": {"app": "bert"}}}


async def test_each_kind_is_created_in_its_collection_and_true_once_created(
    created: tuple[KubeClient, list[tuple[str, dict[str, Any]]]],
) -> None:
    kube, seen = created
    for kind in COLLECTIONS:
        assert await kube.create(_object(kind, f"new-{kind.lower()}")) is True
    assert seen == [(path, _object(kind, f"new-{kind.lower()}")) for kind, path in COLLECTIONS.items()]


async def test_an_object_there_already_is_false_and_another_refusal_is_raised(
    created: tuple[KubeClient, list[tuple[str, dict[str, Any]]]],
) -> None:
    kube, _ = created
    assert await kube.create(_object("Pod", "exists")) is False
    with pytest.raises(ApiException) as refused:
        await kube.create(_object("Job", "forbidden"))
    assert refused.value.status == 403
