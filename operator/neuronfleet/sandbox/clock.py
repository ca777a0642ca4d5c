"""Time of the sandbox: the event loop's clock (so ``looptime`` fast-forwards it) mapped to wall time.

Wall-clock timestamps (creationTimestamp, condition lastTransitionTime, ...) are
``epoch + (loop.time() - origin)``: they stay consistent with every delay the sandbox sleeps, also
when ``looptime`` compresses an hour into a second.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Callable

from neuronfleet.aio import wait_event

#: metav1.Time's serialisation: RFC 3339 in whole seconds, UTC.
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class Clock:
    """Loop time for delays, epoch-anchored wall time for timestamps."""

    def __init__(self, epoch: datetime.datetime | None = None) -> None:
        self.epoch = epoch or datetime.datetime.now(tz=datetime.UTC).replace(microsecond=0)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._origin = 0.0

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Anchor the epoch at the loop's current time (called once the loop runs)."""
        self._loop = loop
        self._origin = loop.time()

    def monotonic(self) -> float:
        """Seconds on the loop's clock (what ``asyncio.sleep`` measures)."""
        return self._loop.time() if self._loop is not None else time.monotonic()

    def elapsed(self) -> float:
        """Seconds since the sandbox started."""
        return self.monotonic() - self._origin

    def wall(self) -> datetime.datetime:
        return self.epoch + datetime.timedelta(seconds=self.elapsed())

    def timestamp(self, offset_s: float = 0.0) -> str:
        """RFC 3339 with seconds, as metav1.Time serialises."""
        moment = self.wall() + datetime.timedelta(seconds=offset_s)
        return moment.strftime(TIMESTAMP_FORMAT)

    def micro_timestamp(self) -> str:
        """RFC 3339 with microseconds, as metav1.MicroTime serialises."""
        return self.wall().strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def seconds_since(self, timestamp: str | datetime.datetime | None) -> float | None:
        """Age of a moment (or an RFC 3339 timestamp) on this clock; None if absent or unparsable."""
        moment = timestamp if isinstance(timestamp, datetime.datetime) else parse_timestamp(timestamp)
        return None if moment is None else (self.wall() - moment).total_seconds()


def parse_timestamp(timestamp: str | None) -> datetime.datetime | None:
    """An RFC 3339 timestamp (as the API serialises metav1.Time) as a datetime; None if absent or unparsable."""
    if not timestamp:
        return None
    try:
        return datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None


async def run_controller(name: str, sync: Callable[[], object], wake: asyncio.Event, interval_s: float | None) -> None:
    """The loop of every sandbox controller: one round, then sleep until woken or the interval ends.

    A failing round is logged, never fatal: one bad object must not stop a controller.
    """
    while True:
        wake.clear()
        try:
            sync()
        except Exception:
            logging.getLogger(__name__).exception("sandbox %s: round failed", name)
        await wait_event(wake, interval_s)
