"""The sandbox's Service router (``sandbox.router``) against small real HTTP backends.

The router runs as the sandbox runs it: a process that ``Routers`` starts for a Service and feeds
the Service's ready endpoints. EndpointSlices are written by hand here (what the endpoints
controller publishes), so each case sets exactly which endpoints are ready: the router must use
only those, prefer the one with the fewest outstanding requests, and re-send a request only to the
next endpoint when its connection could not be made (nothing was sent), as kube-proxy's rules
effectively do. An answer of the endpoint (a 429, a 503) is passed through; a request the endpoint
took and then dropped is a 502, one it did not answer in time a 504: never re-sent, so that a lost
request shows (review r6).
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from neuronfleet.sandbox import SandboxCluster
from neuronfleet.sandbox.endpoints import ENDPOINT_SLICES, MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL
from neuronfleet.sandbox.router import MAX_BODY_BYTES, RouterProcess, Routers, ServiceRouter
from neuronfleet.sandbox.serving import free_port

NS, SERVICE = "default", "embeddings"
Handler = Callable[[web.Request], Awaitable[web.Response]]


class Backend:
    """One HTTP server on 127.0.0.1 answering with ``handler``; counts what it received."""

    def __init__(self, handler: Handler, *, client_max_size: int = 1024**2) -> None:
        self.handler = handler
        self.client_max_size = client_max_size  # aiohttp's default: 1 MiB
        self.received = 0
        self.port = free_port()
        self.runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        self.received += 1
        return await self.handler(request)

    async def start(self) -> Backend:
        app = web.Application(client_max_size=self.client_max_size)
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


async def test_ready_endpoints_none_of_which_can_be_reached_are_a_503(routed: Routed) -> None:
    cluster, router, session = routed
    await publish(cluster, router, {free_port(): True, free_port(): True})  # nothing listens on either
    status, body, _ = await post(session, router)
    assert status == 503 and body["error"] == f"no ready endpoint of {NS}/{SERVICE} could be reached"


async def test_a_head_request_is_answered_with_the_length_a_get_would_have(routed: Routed) -> None:
    cluster, router, session = routed
    backend = await Backend(ok).start()
    try:
        await publish(cluster, router, {backend.port: True})
        async with session.get(f"{router.url}/v2/health/ready") as response:
            length = len(await response.read())
        async with session.head(f"{router.url}/v2/health/ready") as response:
            assert response.status == 200
            assert response.headers["Content-Length"] == str(length) and await response.read() == b""
    finally:
        await backend.stop()


async def test_only_ready_endpoints_and_the_next_one_after_a_dead_process_counted_as_re_sent(
    routed: Routed,
) -> None:
    cluster, router, session = routed
    serving, unready = await Backend(ok).start(), await Backend(ok).start()
    dead_port = free_port()  # nothing listens: a process that died
    try:
        await publish(cluster, router, {serving.port: True, unready.port: False, dead_port: True})
        answers = [await post(session, router) for _ in range(12)]
        assert all(status == 200 for status, _, _ in answers), answers
        assert {headers["X-Sandbox-Endpoint"] for _, _, headers in answers} == {serving.endpoint}
        assert answers[0][1] == {"path": "/v2/models/m/infer", "body": '{"inputs": []}'}
        assert serving.received == 12 and unready.received == 0
        counters = await router.counters()
        # The dead endpoint was tried (round robin) and each of those requests re-sent, and counted.
        assert counters.sent[f"127.0.0.1:{dead_port}"] == counters.resent > 0, counters
    finally:
        for backend in (serving, unready):
            await backend.stop()


async def test_a_429_is_passed_through_with_retry_after_not_re_sent(
    routed: Routed,
) -> None:
    cluster, router, session = routed
    backends = [await Backend(full).start() for _ in range(2)]
    try:
        await publish(cluster, router, {b.port: True for b in backends})
        status, body, headers = await post(session, router)
        assert status == 429 and body == {"error": "queue full"}
        assert headers["Retry-After"] == "2"
        assert sum(b.received for b in backends) == 1  # the endpoint's answer, as kube-proxy passes it on
        counters = await router.counters()
        assert counters.resent == 0 and not counters.refused
    finally:
        for backend in backends:
            await backend.stop()


async def test_a_body_up_to_the_routers_limit_is_forwarded_and_a_larger_one_refused_unsent(
    routed: Routed,
) -> None:
    cluster, router, session = routed
    sizes: list[int] = []

    async def measures(request: web.Request) -> web.Response:
        sizes.append(len(await request.read()))
        return web.json_response({})

    backend = await Backend(measures, client_max_size=4 * 1024 * 1024).start()
    try:
        await publish(cluster, router, {backend.port: True})
        body = b"x" * (3 * 1024 * 1024)  # a large batch: over any server's limit, not the router's
        async with session.post(f"{router.url}/v2/models/m/infer", data=body) as response:
            assert response.status == 200
        assert sizes == [len(body)]
        # Over the limit: refused on its Content-Length, before any of it is read or sent on.
        address = urllib.parse.urlsplit(router.url)
        reader, writer = await asyncio.open_connection(address.hostname, address.port)
        head = f"POST /v2/models/m/infer HTTP/1.1\r\nHost: r\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n"
        writer.write(head.encode())
        status_line = await reader.readline()
        writer.close()
        assert status_line.split()[1] == b"413"
        assert sizes == [len(body)]
    finally:
        await backend.stop()


async def drops(request: web.Request) -> web.Response:
    """Takes the request, then its connection dies (a server SIGKILLed or OOM-killed mid-request)."""
    await request.read()
    assert request.transport is not None
    request.transport.abort()
    return web.json_response({"never": "sent"})


async def unavailable(request: web.Request) -> web.Response:
    """Takes the request, then answers 503 (a server that shut down while it ran)."""
    await request.read()
    return web.json_response({"error": "shut down mid-request"}, status=503, headers={"Retry-After": "3"})


@pytest.mark.parametrize(
    ("bad", "status", "body"),
    [
        (drops, 502, None),
        (unavailable, 503, {"error": "shut down mid-request"}),
    ],
    ids=["dropped-502", "503-passed-through"],
)
async def test_a_request_the_endpoint_took_and_did_not_serve_is_not_re_sent(
    routed: Routed, bad: Handler, status: int, body: dict[str, str] | None
) -> None:
    # kube-proxy never re-sends a request: had the router sent it on to the next endpoint, its client
    # would see a 200 and a request the first endpoint lost could not be seen (review r6).
    cluster, router, session = routed
    failing, serving = await Backend(bad).start(), await Backend(ok).start()
    try:
        await publish(cluster, router, {failing.port: True, serving.port: True})
        answers = [await post(session, router) for _ in range(6)]
        statuses = sorted(s for s, _, _ in answers)
        assert statuses == sorted([200] * serving.received + [status] * failing.received), answers
        assert failing.received > 0 and failing.received + serving.received == 6  # each request sent once
        failed = [(b, h) for s, b, h in answers if s == status]
        if body is not None:
            assert all(b == body and h["Retry-After"] == "3" for b, h in failed), failed
        else:
            assert all("dropped" in b["error"] and failing.endpoint in b["error"] for b, _ in failed), failed
        assert all(h["X-Sandbox-Endpoint"] == failing.endpoint for _, h in failed), failed
        counters = await router.counters()
        assert counters.resent == 0, counters
        assert counters.dropped[failing.endpoint] == (failing.received if status == 502 else 0), counters
    finally:
        await failing.stop()
        await serving.stop()


async def test_a_request_not_answered_in_time_is_a_504_not_re_sent() -> None:
    # In process, for a short timeout (the router process uses 60 s).
    release = asyncio.Event()

    async def stuck(request: web.Request) -> web.Response:
        body = (await request.read()).decode()
        await asyncio.wait_for(release.wait(), 30)
        return web.json_response({"path": request.path, "body": body})

    slow = await Backend(stuck).start()
    other = await Backend(ok).start()
    router = await ServiceRouter(f"{NS}/{SERVICE}", timeout_s=0.5).start()
    try:
        router.endpoints = [slow.endpoint]
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{router.url}/v2/models/m/infer", data=b"{}") as response:
                assert response.status == 504, await response.text()
                assert "did not answer" in (await response.json())["error"]
                assert response.headers["X-Sandbox-Endpoint"] == slow.endpoint
            # With a second endpoint, the request that timed out is still not sent again.
            router.endpoints = [slow.endpoint, other.endpoint]
            statuses = []
            for _ in range(4):
                async with session.post(f"{router.url}/v2/models/m/infer", data=b"{}") as response:
                    statuses.append(response.status)
        assert sorted(statuses) == sorted([200] * other.received + [504] * (slow.received - 1)), statuses
        assert slow.received + other.received == 5 and router.resent == 0
        assert router.timed_out[slow.endpoint] == slow.received
    finally:
        release.set()
        await router.stop()
        await slow.stop()
        await other.stop()


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


async def test_requests_one_after_another_take_the_ready_endpoints_in_turn(
    routed: Routed,
) -> None:
    cluster, router, session = routed
    backends = [await Backend(ok).start() for _ in range(3)]
    try:
        await publish(cluster, router, {b.port: True for b in backends})
        # Each answered before the next is sent: every endpoint has none outstanding, so the turn decides.
        order = [(await post(session, router))[2]["X-Sandbox-Endpoint"] for _ in range(9)]
        assert sorted(set(order)) == sorted(b.endpoint for b in backends)
        assert order[3:] == order[:6]  # a fixed cycle through all three,
        assert len(set(order[:3])) == 3  # each once per turn
    finally:
        for backend in backends:
            await backend.stop()


async def test_only_a_service_with_a_selector_and_not_being_deleted_is_routed(
    routers: tuple[SandboxCluster, Routers],
) -> None:
    cluster, by_service = routers
    # No selector: its endpoints are someone else's to write (an external or headless Service).
    cluster.create("services", {"metadata": {"name": "external"}, "spec": {"ports": [{"port": 80}]}}, NS)
    held = {"name": "held", "finalizers": ["example.com/hold"]}
    cluster.create("services", {"metadata": held, "spec": {"selector": {"app": "held"}}}, NS)
    await by_service.wait_url(NS, "held", timeout=60)  # the pass that started it saw "external" too
    assert by_service.get(NS, "external") is None
    cluster.delete("services", "held", NS)  # Terminating while its finalizer holds it
    await cluster.wait_for(lambda: by_service.get(NS, "held") is None, timeout=30, what="the router stopped")
    assert cluster.get("services", "held", NS) is not None


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
        assert successor is not None  # wait_for returns what ``replaced`` gave once truthy
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
