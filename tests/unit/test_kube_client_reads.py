"""The Kubernetes API adapter's reads that answer something other than an object: a pod's log tail
(a failed compile Job's message quotes it) and an object that is not there (None, which the apply
reads as "create it"); and the node list that every reconcile shares. Against real HTTP answering
as the API server does."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from kube_http import refused, served_kube

from neuronfleet.kube.client import KubeClient
from neuronfleet.sandbox.errors import not_found

LOG = "compiling bucket 1x128\nneuronx-cc: error: out of memory\n"


async def _log(request: web.Request) -> web.Response:
    assert request.query.get("tailLines") == "20"
    return web.Response(text=LOG, content_type="text/plain")


async def _not_found(request: web.Request) -> web.Response:
    return refused(not_found("services", "", "missing"))


@pytest.fixture
async def kube() -> AsyncIterator[KubeClient]:
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/default/pods/compile-x/log", _log)
    app.router.add_get("/api/v1/namespaces/default/services/missing", _not_found)
    async with served_kube(app) as kube:
        yield kube


async def test_a_pods_log_tail_is_its_text(kube: KubeClient) -> None:
    assert await kube.pod_log_tail("default", "compile-x") == LOG


async def test_an_object_that_is_not_there_reads_as_none(kube: KubeClient) -> None:
    assert await kube.read("Service", "default", "missing") is None


async def test_the_node_list_is_shared_until_a_caller_asks_for_a_fresh_one() -> None:
    # Every reconcile reads the nodes: one list serves them all for NODE_CACHE_SECONDS.
    lists: list[str] = []

    async def nodes(request: web.Request) -> web.Response:
        lists.append(f"node-{len(lists) + 1}")  # each list answers with a node of its own
        return web.json_response({"items": [{"metadata": {"name": lists[-1]}}]})

    app = web.Application()
    app.router.add_get("/api/v1/nodes", nodes)
    async with served_kube(app) as kube:
        first = await kube.list_nodes()
        assert await kube.list_nodes() == first == [{"metadata": {"name": "node-1"}}]
        assert await kube.list_nodes(fresh=True) == [{"metadata": {"name": "node-2"}}]
    assert lists == ["node-1", "node-2"]
