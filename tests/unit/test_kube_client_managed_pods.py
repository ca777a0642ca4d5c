"""The list of every model's pods (the plan's ``neighbours``) is one shared, cached read."""

from __future__ import annotations

import asyncio

from aiohttp import web
from kubernetes_asyncio import client

from neuronfleet.kube.client import KubeClient

POD = {
    "metadata": {
        "name": "llm-0",
        "namespace": "b",
        "labels": {"app.kubernetes.io/managed-by": "neuronfleet", "serving.neuronfleet.dev/deployment": "llm"},
        "annotations": {"big": "x" * 1000},
    },
    "spec": {"nodeName": "n1", "containers": [{"name": "server", "image": "server:1"}]},
    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
}


async def test_reconciles_share_one_cached_list_of_the_operators_pods_kept_trimmed() -> None:
    asked: list[tuple[str, str]] = []
    release = asyncio.Event()
    arrived = asyncio.Event()

    async def list_pods(request: web.Request) -> web.Response:
        asked.append((request.path, request.query.get("labelSelector", "")))
        arrived.set()
        await release.wait()
        return web.json_response({"items": [POD]})

    app = web.Application()
    app.router.add_get("/api/v1/pods", list_pods)
    app.router.add_get("/api/v1/namespaces/b/pods", list_pods)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    kube = KubeClient(client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{port}")), request_timeout=5)
    try:
        waiting = [asyncio.ensure_future(kube.list_managed_pods(None)) for _ in range(5)]
        await arrived.wait()
        release.set()
        lists = await asyncio.gather(*waiting)
        # One request for the five reconciles, across every namespace, by the managed-by label.
        assert asked == [("/api/v1/pods", "app.kubernetes.io/managed-by=neuronfleet")]
        assert all(pods is lists[0] for pods in lists)
        # Kept between reads: only whose the pod is and where, not its containers or annotations.
        assert lists[0] == [
            {
                "metadata": {"name": "llm-0", "namespace": "b", "labels": POD["metadata"]["labels"]},
                "spec": {"nodeName": "n1"},
                "status": {"phase": "Running"},
            }
        ]
        assert await kube.list_managed_pods(None) is lists[0]  # cached: no request
        assert len(asked) == 1
        await kube.list_managed_pods("b")  # a namespaced install lists a deployment's namespace
        assert asked[1] == ("/api/v1/namespaces/b/pods", "app.kubernetes.io/managed-by=neuronfleet")
    finally:
        await kube.close()
        await runner.cleanup()
