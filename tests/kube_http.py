"""A KubeClient against an aiohttp app served over real HTTP on 127.0.0.1: an API server whose
answers a test writes by hand (a dropped field, a silent list, a log, a 404)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web
from kubernetes_asyncio import client

from neuronfleet.kube.client import REQUEST_TIMEOUT_SECONDS, KubeClient
from neuronfleet.sandbox.errors import ApiError


def refused(error: ApiError) -> web.Response:
    """``error`` answered as the API server answers it: its ``kind: Status`` body and HTTP code."""
    return web.json_response(error.status_body(), status=error.code)


@contextlib.asynccontextmanager
async def served_kube(
    app: web.Application, request_timeout: float = REQUEST_TIMEOUT_SECONDS
) -> AsyncIterator[KubeClient]:
    """``app`` served on a free port, and a KubeClient to it; both closed on exit."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    kube = KubeClient(client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{port}")), request_timeout)
    try:
        yield kube
    finally:
        await kube.close()
        await runner.cleanup()
