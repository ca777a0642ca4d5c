"""The sandbox's Service router (``sandbox.router``) against small real HTTP backends.

The router runs as the sandbox runs it: a process that ``Routers`` starts for a Service and feeds
the Service's ready endpoints. EndpointSlices are written by hand here (what the endpoints
controller publishes), so each case sets exactly which endpoints are ready: the router must use
only those, prefer the one with the fewest outstanding requests, move on from a refusal or a dead
endpoint, and answer 503 / 429 itself, with a reason, when no endpoint takes the request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from neuronfleet.sandbox import SandboxCluster
from neuronfleet.sandbox.endpoints import ENDPOINT_SLICES, MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL
from neuronfleet.sandbox.router import RouterProcess, Routers
from neuronfleet.sandbox.serving import free_port

NS, SERVICE = "default", "embeddings"
Handler = Callable[[web.Request], Awaitable[web.Response]]


class Backend:
    """One HTTP server on 127.0.0.1 answering with ``handler``; counts what it received."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.received = 0
        self.port = free_port()
        self.runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        self.received += 1
        return await self.handler(request)

    async def start(self) -> Backend:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"


async def ok(request: web.Request) -> web.Response:
    return web.json_response({"path": request.path, "body": (await request.read()).decode()})


async def full(_: web.Request) -> web.Response:
    return web.json_response({"error": "queue full"}, status=429, headers={"Retry-After": "2"})


Routed = tuple[SandboxCluster, RouterProcess, aiohttp.ClientSession]


@pytest.fixture
async def routers() -> AsyncIterator[tuple[SandboxCluster, Routers]]:
    """A sandbox whose Service ``NS/SERVICE`` has its router process running."""
    async with SandboxCluster(run_scheduler=False, run_kubelet=False) as cluster:
        cluster.store.register(ENDPOINT_SLICES)
        routers = Routers(cluster.store)
        running = asyncio.create_task(routers.run())
        cluster.create("services", {"metadata": {"name": SERVICE}, "spec": {"selector": {"app": SERVICE}}}, NS)
        try:
            await routers.wait_url(NS, SERVICE, timeout=60)
            yield cluster, routers
        finally:
            running.cancel()
            await routers.stop()


@pytest.fixture
async def routed(routers: tuple[SandboxCluster, Routers]) -> AsyncIterator[Routed]:
    cluster, by_service = routers
    router = by_service.get(NS, SERVICE)
    assert router is not None
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield cluster, router, session


async def publish(cluster: SandboxCluster, router: RouterProcess, endpoints: dict[int, bool]) -> None:
    """One EndpointSlice per port (as the sandbox publishes served pods): port -> ready; returns
    once the router process uses the ready ones."""
    for port, is_ready in endpoints.items():
        cluster.create(
            "endpointslices",
            {
                "metadata": {
                    "name": f"{SERVICE}-{port}",
                    "labels": {SERVICE_NAME_LABEL: SERVICE, MANAGED_BY_LABEL: MANAGED_BY},
                },
                "addressType": "IPv4",
                "endpoints": [
                    {
                        "addresses": ["127.0.0.1"],
                        "conditions": {"ready": is_ready, "serving": is_ready, "terminating": False},
                        "targetRef": {"kind": "Pod", "namespace": NS, "name": f"pod-{port}", "uid": str(port)},
                    }
                ],
                "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
            },
            NS,
            group="discovery.k8s.io",
        )
    await router.synced()
    expected = {f"127.0.0.1:{port}" for port, is_ready in endpoints.items() if is_ready}
    assert set((await router.counters()).endpoints) == expected


async def post(session: aiohttp.ClientSession, router: RouterProcess) -> tuple[int, dict[str, str], dict[str, str]]:
    async with session.post(f"{router.url}/v2/models/m/infer", data=b'{"inputs": []}') as response:
        return response.status, await response.json(), dict(response.headers)


async def test_no_ready_endpoint_is_a_503_with_the_reason_at_once(
    routed: Routed,
) -> None:
    cluster, router, session = routed
    status, body, _ = await post(session, router)
    assert status == 503 and "no ready endpoint" in body["error"] and f"{NS}/{SERVICE}" in body["error"]
    backend = await Backend(ok).start()
    try:
        await publish(cluster, router, {backend.port: False})  # not ready: no traffic either
        status, body, _ = await post(session, router)
        assert status == 503
        assert backend.received == 0
    finally:
        await backend.stop()


async def test_only_ready_endpoints_and_the_next_one_after_a_refusal_or_a_dead_process(
    routed: Routed,
) -> None:
    cluster, router, session = routed
    serving, refusing, unready = await Backend(ok).start(), await Backend(full).start(), await Backend(ok).start()
    dead_port = free_port()  # nothing listens: a process that died
    try:
        await publish(cluster, router, {serving.port: True, refusing.port: True, unready.port: False, dead_port: True})
        answers = [await post(session, router) for _ in range(12)]
        assert all(status == 200 for status, _, _ in answers), answers
        assert {headers["X-Sandbox-Endpoint"] for _, _, headers in answers} == {serving.endpoint}
        assert answers[0][1] == {"path": "/v2/models/m/infer", "body": '{"inputs": []}'}
        assert serving.received == 12 and unready.received == 0
        assert refusing.received > 0  # tried, refused, and the request went on
    finally:
        for backend in (serving, refusing, unready):
            await backend.stop()


async def test_every_ready_endpoint_refusing_is_a_429_with_retry_after(
    routed: Routed,
) -> None:
    cluster, router, session = routed
    backends = [await Backend(full).start() for _ in range(2)]
    try:
        await publish(cluster, router, {b.port: True for b in backends})
        status, body, headers = await post(session, router)
        assert status == 429 and "refused" in body["error"]
        assert headers["Retry-After"] == "2"
        assert [b.received for b in backends] == [1, 1]  # each tried once, no retry storm
        assert (await router.counters()).refused[429] == 1
    finally:
        for backend in backends:
            await backend.stop()


async def test_least_outstanding_requests_avoid_a_busy_endpoint(
    routed: Routed,
) -> None:
    cluster, router, session = routed
    release, arrived = asyncio.Event(), asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        arrived.set()
        await asyncio.wait_for(release.wait(), 10)
        return await ok(request)

    busy, idle = await Backend(slow).start(), await Backend(ok).start()
    try:
        await publish(cluster, router, {busy.port: True, idle.port: True})
        # Two requests at once: one goes to each endpoint; the idle one answers, the busy one holds.
        held = [asyncio.create_task(post(session, router)) for _ in range(2)]
        await asyncio.wait_for(arrived.wait(), 10)
        answered, holding = await asyncio.wait(held, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        assert len(answered) == 1 and len(holding) == 1
        assert next(iter(answered)).result()[2]["X-Sandbox-Endpoint"] == idle.endpoint
        # While the busy endpoint holds its request, every further one goes to the idle endpoint.
        quick = [await post(session, router) for _ in range(5)]
        assert {headers["X-Sandbox-Endpoint"] for _, _, headers in quick} == {idle.endpoint}
        release.set()
        assert all(status == 200 for status, _, _ in await asyncio.gather(*held))
    finally:
        release.set()
        await busy.stop()
        await idle.stop()


async def test_a_router_process_that_dies_is_started_again_and_one_whose_service_goes_is_stopped(
    routers: tuple[SandboxCluster, Routers], routed: Routed
) -> None:
    cluster, router, session = routed
    by_service = routers[1]
    backend = await Backend(ok).start()
    try:
        await publish(cluster, router, {backend.port: True})
        assert router._process is not None
        router._process.kill()  # a crash of the router process

        def replaced() -> RouterProcess | None:
            current = by_service.get(NS, SERVICE)
            return current if current is not None and current is not router and not current.exited else None

        # Routers looks at its processes at least every 5 s: a new one, fed the endpoints, serves again.
        successor = await cluster.wait_for(replaced, timeout=30, what="a new router process")
        await successor.synced()
        status, _, headers = await post(session, successor)
        assert status == 200 and headers["X-Sandbox-Endpoint"] == backend.endpoint

        cluster.delete("services", SERVICE, NS)
        await cluster.wait_for(lambda: by_service.get(NS, SERVICE) is None, timeout=30, what="the router stopped")
        assert successor.exited
        with pytest.raises(aiohttp.ClientConnectionError):
            await post(session, successor)
    finally:
        await backend.stop()


async def test_the_router_process_exits_when_its_stdin_closes() -> None:
    # The sandbox killed without a chance to stop its routers (SIGKILL, OOM): the pipe closes.
    router = await RouterProcess(NS, SERVICE).start()
    try:
        process = router._process
        assert process is not None and process.stdin is not None
        process.stdin.close()
        assert await asyncio.wait_for(process.wait(), 15) == 0
    finally:
        await router.stop()
