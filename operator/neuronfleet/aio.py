"""asyncio helpers shared by every layer: the operator's daemon and the sandbox's loops.

Pure asyncio, no I/O; the innermost layer, so both the operator's path and the sandbox import it.
"""

from __future__ import annotations

import asyncio


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


__all__ = ["wait_event"]
