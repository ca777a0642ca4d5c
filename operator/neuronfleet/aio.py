"""asyncio helpers shared by every layer: the operator's daemon and the sandbox's loops.

Pure asyncio, no I/O; the innermost layer, so both the operator's path and the sandbox import it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait for ``event`` at most ``timeout`` seconds; True if it is set.

    ``asyncio.timeout`` rather than ``asyncio.wait_for``: on Python 3.11 ``wait_for`` swallows a
    cancellation that arrives in the same loop step as the event (CPython issue 86296), and a loop
    that ends only by cancellation then runs on after its task was cancelled.
    """
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True


async def unless_set(work: Coroutine[Any, Any, T], event: asyncio.Event) -> T | None:
    """The result of ``work``, or None when ``event`` is set first (``work`` is then cancelled
    and awaited). An exception of ``work`` propagates."""
    task = asyncio.ensure_future(work)
    if event.is_set():
        task.cancel()
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait((task, waiter), return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not task.done():
            task.cancel()
            # Awaited, so that nothing of it runs on after this returns (or is cancelled).
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        return None
    return task.result()


__all__ = ["unless_set", "wait_event"]
