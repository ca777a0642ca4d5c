"""The live demo's open-loop client against a real HTTP server on 127.0.0.1: every request gets exactly
one outcome (200 ok, 429 rejected, dropped connection lost, closed port refused), measured at the client
from each request's scheduled send time; each second's progress counts the answers that came in it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import numpy as np
from aiohttp import web

from neuronfleet.demo.loadgen import OpenLoopClient, Progress
from neuronfleet.sandbox.router import ServiceRouter
from neuronfleet.sandbox.serving import free_port

#: ClientTotals rounds its wall and CPU seconds to 0.01 s: each is off by at most this much.
ROUNDING_S = 0.005


@contextlib.asynccontextmanager
async def _serving(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> AsyncIterator[int]:
    """A real HTTP server on 127.0.0.1 answering ``POST /infer`` with ``handler``; yields its port."""
    app = web.Application()
    app.router.add_post("/infer", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield port
    finally:
        await runner.cleanup()


async def test_every_request_gets_one_outcome_measured_at_the_client() -> None:
    """200 -> ok, 429 -> rejected, a dropped connection -> lost; a closed port -> refused."""
    seen = 0

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal seen
        await request.read()
        seen += 1
        if seen % 10 == 0:
            return web.Response(status=429)
        if seen % 10 == 5:
            assert request.transport is not None
            request.transport.close()  # accepted, never answered
            await asyncio.sleep(1)
        await asyncio.sleep(0.002)
        return web.json_response({"ok": True})

    async with _serving(handler) as port:
        arrivals = np.linspace(0.0, 1.0, 100, endpoint=False)
        client = OpenLoopClient(
            f"http://127.0.0.1:{port}/infer", b"{}", arrivals, slo_ms=50, max_requests=100, max_seconds=5, timeout_s=3
        )
        cpu_before, wall_before = time.process_time(), time.perf_counter()
        totals = await client.run()
        cpu_used, wall_used = time.process_time() - cpu_before, time.perf_counter() - wall_before
    counts = totals.counts
    assert sum(counts.values()) == 100 == totals.scheduled
    # Measured from the scheduled send time, which came after the run began: each answer's latency
    # fits in what was left of the run after its request was due, and includes the send's lateness.
    answered = ~np.isnan(client.latency_ms)
    assert answered.sum() == counts["ok"] + counts["rejected"]
    left_ms = (totals.wall_s + ROUNDING_S - arrivals[answered]) * 1000.0
    assert np.all(client.latency_ms[answered] <= left_ms)
    assert np.all(client.lateness_ms[answered] <= client.latency_ms[answered])
    # The run's own time and CPU time: within what this test saw pass around it.
    assert 0.0 <= totals.client_cpu_s <= cpu_used + ROUNDING_S
    assert arrivals[-1] - ROUNDING_S <= totals.wall_s <= wall_used + ROUNDING_S
    assert counts["rejected"] == 10 and counts["lost"] == 10 and counts["ok"] == 80, counts
    assert totals.within_slo <= counts["ok"] and totals.p50_ms is not None and totals.p50_ms >= 2.0
    # An answer counted came within the client's timeout (3 s) of the request's scheduled time.
    assert totals.max_ms is not None and totals.max_ms <= 3000 + 500
    assert 1 <= totals.peak_outstanding <= 100  # counted as requests went out, never above those sent
    assert totals.slo_attainment == totals.within_slo / 100

    closed = OpenLoopClient(
        f"http://127.0.0.1:{free_port()}/infer", b"{}", np.zeros(3), slo_ms=50, max_requests=3, max_seconds=1
    )
    assert (await closed.run()).counts["refused"] == 3


async def test_the_client_sends_at_most_max_outstanding_and_counts_the_rest_not_sent() -> None:
    """A server that holds every request: with 3 allowed outstanding, the 3 first go out and the other 2
    are counted not_sent (never queued), then the 3 come back ok once the server lets them go."""
    held: list[web.Request] = []
    release, three_held = asyncio.Event(), asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        held.append(request)
        if len(held) == 3:
            three_held.set()
        await release.wait()
        return web.json_response({"ok": True})

    async with _serving(handler) as port:
        arrivals = np.zeros(5)  # all due at once: the client takes all five before any request task runs
        client = OpenLoopClient(
            f"http://127.0.0.1:{port}/infer",
            b"{}",
            arrivals,
            slo_ms=50,
            max_requests=5,
            max_seconds=5,
            max_outstanding=3,
            timeout_s=10,
        )
        running = asyncio.create_task(client.run())
        await asyncio.wait_for(three_held.wait(), timeout=10)
        release.set()
        totals = await running
    assert (totals.counts["ok"], totals.counts["not_sent"]) == (3, 2), totals.counts
    assert totals.peak_outstanding == 3 and len(held) == 3


async def test_a_request_dropped_behind_the_sandbox_router_is_lost_at_the_client() -> None:
    """The live demo sends through the sandbox's router: a request a server took and dropped comes back
    as the router's 502 (one not answered in time, 504), and the client counts it lost, not an error."""
    seen = 0
    release = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal seen
        await request.read()
        seen += 1
        if seen % 10 == 5:
            assert request.transport is not None
            request.transport.abort()  # taken, then the server died
        if seen % 10 == 7:
            await asyncio.wait_for(release.wait(), 10)  # longer than the router's timeout
        return web.json_response({"ok": True})

    async with _serving(handler) as port:
        router = await ServiceRouter("demo/svc", timeout_s=0.5).start()
        router.endpoints = [f"127.0.0.1:{port}"]
        try:
            arrivals = np.linspace(0.0, 1.0, 20, endpoint=False)
            client = OpenLoopClient(
                f"{router.url}/infer", b"{}", arrivals, slo_ms=50, max_requests=20, max_seconds=5, timeout_s=3
            )
            totals = await client.run()
        finally:
            release.set()
            await router.stop()
    counts = totals.counts
    assert sum(counts.values()) == 20 == seen
    assert counts["lost"] == 4 and counts["ok"] == 16 and counts["error"] == 0, counts
    assert sum(router.dropped.values()) == 2 and sum(router.timed_out.values()) == 2


async def test_each_seconds_progress_holds_the_answers_that_came_in_it_however_slow() -> None:
    """A request held 800 ms by the server is answered in the next second: that second's progress
    carries its latency (a per-second p99 that left out answers slower than the rest of their second
    would hide exactly the slow ones). A later request, refused at once, keeps the run going past it."""
    hold_s = 0.8
    seen = 0

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal seen
        await request.read()
        seen += 1
        if seen > 1:
            return web.Response(status=429)
        await asyncio.sleep(hold_s)
        burn_until = time.process_time() + 0.05  # CPU time the machine's reading must see
        while time.process_time() < burn_until:
            pass
        return web.json_response({"ok": True})

    reports: list[Progress] = []
    async with _serving(handler) as port:
        client = OpenLoopClient(
            f"http://127.0.0.1:{port}/infer",
            b"{}",
            np.array([0.5, 2.3]),
            slo_ms=50,
            max_requests=2,
            max_seconds=5,
            progress=reports.append,
        )
        totals = await client.run()
    assert (totals.counts["ok"], totals.counts["rejected"]) == (1, 1)
    with_answer = [r for r in reports if r.p50_ms is not None]
    assert len(with_answer) == 1, reports  # counted once, in the second it came
    assert with_answer[0].p99_ms is not None and with_answer[0].p99_ms >= hold_s * 1000.0
    # The client read the machine's CPU every second it ran: the server's 50 ms of work shows.
    assert client.machine_seconds and any(second.busy_share > 0 for second in client.machine_seconds)
