"""The adapter's compile-Job calls against real HTTP answering as the API server does: the list asks
the API server to filter by label, and a DELETE reads as deleted, held (another controller's
finalizers keep the Job: the operator waits, naming them) or gone (a repeated delete)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from kube_http import refused, served_kube

from neuronfleet.kube.client import JobDeletion, KubeClient
from neuronfleet.sandbox.errors import not_found

JOBS = "/apis/batch/v1/namespaces/serving/jobs"
COMPILE_JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "compile-a", "uid": "u-a"}}


async def _list(request: web.Request) -> web.Response:
    items = [COMPILE_JOB] if request.query.get("labelSelector") == "app=bert" else []
    return web.json_response({"apiVersion": "batch/v1", "kind": "JobList", "items": items})


async def _delete(request: web.Request) -> web.Response:
    assert request.query["propagationPolicy"] == "Background"  # the Job's pods go with it
    name = request.match_info["name"]
    if name == "compile-gone":
        return refused(not_found("jobs", "batch", name))
    meta: dict[str, Any] = {"name": name, "uid": f"u-{name}"}
    if name == "compile-held":
        meta |= {"deletionTimestamp": "2026-12-07T10:00:00Z", "finalizers": ["example.com/audit"]}
    if name == "compile-ending":  # marked for deletion with no finalizer to keep it: on its way out
        meta |= {"deletionTimestamp": "2026-12-07T10:00:00Z"}
    return web.json_response({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta})


@pytest.fixture
async def kube() -> AsyncIterator[KubeClient]:
    app = web.Application()
    app.router.add_get(JOBS, _list)
    app.router.add_delete(JOBS + "/{name}", _delete)
    async with served_kube(app) as kube:
        yield kube


async def test_jobs_are_listed_by_the_label_selector(kube: KubeClient) -> None:
    assert await kube.list_jobs("serving", {"app": "bert"}) == [COMPILE_JOB]
    assert await kube.list_jobs("serving", {"app": "other"}) == []


async def test_a_jobs_delete_reads_as_deleted_held_or_gone(kube: KubeClient) -> None:
    assert await kube.delete_job("serving", "compile-a") == JobDeletion("deleted")
    assert await kube.delete_job("serving", "compile-held") == JobDeletion(
        "held", ("example.com/audit",), "u-compile-held"
    )
    assert await kube.delete_job("serving", "compile-ending") == JobDeletion("deleted")
    assert await kube.delete_job("serving", "compile-gone") == JobDeletion("gone")
