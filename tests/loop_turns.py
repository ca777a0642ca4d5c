"""Waiting on a condition by turns of the event loop, not by time: for state that has no event to
wait on (a task's progress, a listener's effect). No timer fires meanwhile unless the turns take that
long, so a condition that holds here held without any periodic wake-up's help."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(condition: Callable[[], bool], what: str = "the condition", turns: int = 10_000) -> None:
    """Let the loop turn until ``condition()`` holds; fail naming ``what`` after ``turns`` turns."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never held within {turns} loop turns: {what}")
