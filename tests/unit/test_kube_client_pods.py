"""The adapter's writes to a pod against real HTTP answering as the API server does: a relabel is a
JSON merge patch of the pod's metadata (a None removes the key), a delete passes its grace period,
and both are False when the pod is gone already (a retried reconcile)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from kube_http import refused, served_kube

from neuronfleet.kube.client import MERGE_PATCH, KubeClient
from neuronfleet.sandbox.errors import not_found

POD = "/api/v1/namespaces/serving/pods/{name}"


@pytest.fixture
async def pods() -> AsyncIterator[tuple[KubeClient, list[tuple[str, str, Any]]]]:
    calls: list[tuple[str, str, Any]] = []

    async def patch(request: web.Request) -> web.Response:
        if request.match_info["name"] == "gone":
            return refused(not_found("pods", "", "gone"))
        calls.append(("PATCH", request.content_type, await request.json()))
        return web.json_response({"kind": "Pod", "metadata": {"name": request.match_info["name"]}})

    async def delete(request: web.Request) -> web.Response:
        if request.match_info["name"] == "gone":
            return refused(not_found("pods", "", "gone"))
        calls.append(("DELETE", request.match_info["name"], request.query.get("gracePeriodSeconds")))
        return web.json_response({"kind": "Pod", "metadata": {"name": request.match_info["name"]}})

    app = web.Application()
    app.router.add_patch(POD, patch)
    app.router.add_delete(POD, delete)
    async with served_kube(app) as kube:
        yield kube, calls


async def test_a_relabel_is_a_merge_patch_and_false_for_a_pod_gone(
    pods: tuple[KubeClient, list[tuple[str, str, Any]]],
) -> None:
    kube, calls = pods
    assert await kube.patch_pod_metadata("serving", "p-0", {"role": "warm"}, {"drain-start": None}) is True
    assert calls == [
        ("PATCH", MERGE_PATCH, {"metadata": {"labels": {"role": "warm"}, "annotations": {"drain-start": None}}})
    ]
    assert await kube.patch_pod_metadata("serving", "gone", {"role": "warm"}, {}) is False


async def test_a_delete_passes_its_grace_period_and_is_false_for_a_pod_gone(
    pods: tuple[KubeClient, list[tuple[str, str, Any]]],
) -> None:
    kube, calls = pods
    assert await kube.delete_pod("serving", "p-1", grace_period_seconds=30) is True
    assert await kube.delete_pod("serving", "p-2") is True
    assert calls == [("DELETE", "p-1", "30"), ("DELETE", "p-2", None)]
    assert await kube.delete_pod("serving", "gone") is False
