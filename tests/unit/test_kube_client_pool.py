"""The operator's Kubernetes client opens a connection for each reconcile that may run at once.

kubernetes_asyncio's pool is 100 connections unless told otherwise, and ``KubeClient._json``'s
timeout covers waiting for one: with ``max_concurrent_reconciles`` above 100 (the CLI and the chart
take up to 1000), the calls beyond the pool queued inside their budget and timed out. A real HTTP
server that answers only once it holds a given number of requests at once shows how many reach it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from neuronfleet.artifacts.store import ArtifactStore
from neuronfleet.kube.client import KubeClient, connection_pool_size
from neuronfleet.reconcile import OperatorSettings
from neuronfleet.run_command import build_context

#: Calls made at once: above kubernetes_asyncio's default pool of 100.
CALLS = 150


class Gate:
    """Holds every request until ``wanted`` are in flight together, then answers them all."""

    def __init__(self, wanted: int) -> None:
        self.wanted = wanted
        self.in_flight = 0
        self.peak = 0
        self.open = asyncio.Event()

    async def handle(self, _request: web.Request) -> web.Response:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        if self.in_flight >= self.wanted:
            self.open.set()
        try:
            await self.open.wait()
        finally:
            self.in_flight -= 1
        return web.json_response({"kind": "PodList", "apiVersion": "v1", "items": []})


@pytest.fixture
async def gate_kubeconfig(tmp_path: Path) -> AsyncIterator[tuple[Gate, Path]]:
    gate = Gate(CALLS)
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/default/pods", gate.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "gate", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "gate", "user": {"token": "t"}}],
                "contexts": [{"name": "gate", "context": {"cluster": "gate", "user": "gate"}}],
                "current-context": "gate",
            }
        )
    )
    try:
        yield gate, kubeconfig
    finally:
        gate.open.set()
        await runner.cleanup()


async def _list_at_once(kube: KubeClient) -> list[BaseException | None]:
    results = await asyncio.gather(*(kube.list_pods("default", {}) for _ in range(CALLS)), return_exceptions=True)
    return [result if isinstance(result, BaseException) else None for result in results]


async def test_the_default_pool_holds_calls_beyond_100_until_they_time_out(
    gate_kubeconfig: tuple[Gate, Path],
) -> None:
    """The suspicion, verified: 100 connections, and the calls queued behind them wait until calls
    time out (the server answers only once it holds all 150 at once)."""
    gate, kubeconfig = gate_kubeconfig
    kube = await KubeClient.connect(kubeconfig)
    kube.request_timeout = 2.0
    in_flight_at_first_timeout: list[int] = []

    async def list_noting_the_first_timeout() -> None:
        try:
            await kube.list_pods("default", {})
        except TimeoutError:
            # The first call to time out resumes here before any call queued behind it can take the
            # connection it freed (one event loop: the waiter wakes, connects and sends only later), so
            # this is what the pool let through. Past it the server sees more: how many more depends
            # on how the host schedules the timeouts, which is why the peak is not asserted on.
            if not in_flight_at_first_timeout:
                in_flight_at_first_timeout.append(gate.peak)
            raise

    try:
        connector = kube.api_client.rest_client.pool_manager.connector
        assert connector is not None and connector.limit == 100
        outcomes = await asyncio.gather(
            *(list_noting_the_first_timeout() for _ in range(CALLS)), return_exceptions=True
        )
    finally:
        await kube.close()
    # The pool let 100 through and held the rest until calls timed out. How many time out in all is
    # the host's doing, not the pool's: once the first of the 100 time out, the calls queued behind
    # them take the freed connections, and if 150 reach the gate at once it opens and answers the
    # calls still waiting (on a loaded host, only 54 of the 150 had timed out by then).
    assert in_flight_at_first_timeout == [100]
    assert any(isinstance(outcome, TimeoutError) for outcome in outcomes)


async def test_the_operators_client_has_a_connection_for_each_reconcile_at_once(
    gate_kubeconfig: tuple[Gate, Path],
) -> None:
    gate, kubeconfig = gate_kubeconfig
    context = await build_context(OperatorSettings(max_concurrent_reconciles=CALLS), kubeconfig)
    kube = context.reconciler.kube
    assert isinstance(kube, KubeClient)
    kube.request_timeout = 10.0  # a failure ends in 10 s, not 30
    try:
        # Given no store (as `neuronfleet run` gives none), the operator reads artifacts through its own.
        assert isinstance(context.reconciler.store, ArtifactStore)
        # Room beside them for the Events posted after a reconcile, the node list, the peering checks.
        connector = kube.api_client.rest_client.pool_manager.connector
        assert connector is not None and connector.limit == connection_pool_size(CALLS) == CALLS + 100
        outcomes = await _list_at_once(kube)
    finally:
        await kube.close()
    assert outcomes == [None] * CALLS
    assert gate.peak == CALLS
