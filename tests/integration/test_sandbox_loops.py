"""The sandbox's background loops end when their task is cancelled, even as they are woken.

Each loop (Prometheus targets, routers; the operator's reconcile daemon waits the same way) sleeps
until an event or a timeout and ends only by cancellation. On Python 3.11, ``asyncio.wait_for``
returns the event's result instead of raising when the cancellation arrives in the same loop step
as the event (CPython issue 86296): such a loop goes on forever, and whoever awaits it after
cancelling hangs (a test's teardown did, once). The loops wait with ``wait_event``
(``asyncio.timeout``), which passes the cancellation on.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from loop_turns import until

from neuronfleet.aio import wait_event
from neuronfleet.sandbox.clock import Clock
from neuronfleet.sandbox.prometheus import PodTargets, PrometheusServer
from neuronfleet.sandbox.router import Routers
from neuronfleet.sandbox.serving import ServerProcesses, ServingOptions
from neuronfleet.sandbox.store import Store


async def cancel_as_woken(
    loop_body: Callable[[], Coroutine[Any, Any, None]], wake: Callable[[], None]
) -> asyncio.Task[None]:
    """Start ``loop_body``, let it block, then wake it and cancel it in the same loop step."""
    task = asyncio.create_task(loop_body())
    for _ in range(5):  # into its wait
        await asyncio.sleep(0)
    assert not task.done()
    wake()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5.0)
    assert task in done, "the loop went on after its task was cancelled"
    return task


def event_loop_body(
    event: asyncio.Event, wait: Callable[[asyncio.Event], Awaitable[object]], rounds: list[int]
) -> Callable[[], Coroutine[Any, Any, None]]:
    async def body() -> None:
        while True:
            rounds.append(1)
            event.clear()
            await wait(event)

    return body


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for is built on asyncio.timeout from Python 3.12")
async def test_wait_for_swallows_a_cancellation_that_comes_with_the_event_on_this_python() -> None:
    """The hazard itself: why the loops do not use ``wait_for``."""
    event = asyncio.Event()
    rounds: list[int] = []

    async def with_wait_for(e: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(e.wait(), 1.0)

    task = asyncio.create_task(event_loop_body(event, with_wait_for, rounds)())
    for _ in range(5):
        await asyncio.sleep(0)
    event.set()
    task.cancel()
    await until(lambda: len(rounds) >= 2, "a second round after the cancellation")
    assert not task.done()  # cancelled, yet still looping
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_wait_event_passes_that_cancellation_on() -> None:
    event = asyncio.Event()
    rounds: list[int] = []

    async def with_wait_event(e: asyncio.Event) -> None:
        await wait_event(e, 1.0)

    task = await cancel_as_woken(event_loop_body(event, with_wait_event, rounds), event.set)
    assert task.cancelled() and len(rounds) == 1


async def test_wait_event_says_whether_the_event_came() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    event.set()
    assert await wait_event(event, 0.01) is True


def pod(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }


async def test_prometheus_targets_stop_when_cancelled_as_a_pod_changes(tmp_path: Path) -> None:
    clock = Clock()
    clock.bind(asyncio.get_running_loop())
    store = Store(clock)
    servers = ServerProcesses(ServingOptions(), {}, tmp_path / "servers")
    targets = PodTargets(store, servers, PrometheusServer("prometheus", tmp_path / "prometheus"))
    pods = store.resource("", "pods")

    def add_pod() -> None:
        store.create(pods, "default", pod("p"))

    task = await cancel_as_woken(targets.run, add_pod)

    assert task.cancelled()
    assert targets.written == []  # it ran (no served pods) and left the store's listeners as it found them
    assert targets._on_event not in store.listeners


async def test_the_router_loop_stops_when_cancelled_as_a_service_changes() -> None:
    clock = Clock()
    clock.bind(asyncio.get_running_loop())
    store = Store(clock)
    routers = Routers(store)
    services = store.resource("", "services")
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}

    def add_service() -> None:
        store.create(services, "default", service)

    task = await cancel_as_woken(routers.run, add_service)

    assert task.cancelled()
    assert routers.routers == {}  # a Service without a selector is not routed
    await routers.stop()
