"""``unless_set``: a stopping daemon's reads end when it is told to stop, not when they finish."""

from __future__ import annotations

import asyncio

import pytest

from neuronfleet.aio import unless_set


async def test_the_work_is_cancelled_and_awaited_when_the_event_is_set_first() -> None:
    event, started, ended = asyncio.Event(), asyncio.Event(), []

    async def slow_read() -> str:
        started.set()
        try:
            await asyncio.Event().wait()  # a read that never answers
        finally:
            ended.append("cancelled")
        return "never"

    waiting = asyncio.create_task(unless_set(slow_read(), event))
    await started.wait()
    event.set()
    assert await waiting is None
    assert ended == ["cancelled"], "nothing of the work runs on after unless_set returns"


async def test_the_result_or_the_exception_of_the_work_when_it_ends_first() -> None:
    async def read() -> int:
        return 7

    async def failing() -> int:
        raise LookupError("no such object")

    assert await unless_set(read(), asyncio.Event()) == 7
    with pytest.raises(LookupError, match="no such object"):
        await unless_set(failing(), asyncio.Event())


async def test_work_is_not_started_when_the_event_is_already_set() -> None:
    ran: list[bool] = []

    async def read() -> bool:
        ran.append(True)
        return True

    event = asyncio.Event()
    event.set()
    assert await unless_set(read(), event) is None
    assert ran == []
