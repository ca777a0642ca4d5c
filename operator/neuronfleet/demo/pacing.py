"""Pacing the simulated-load replay: ``looptime``'s compressed clock held to ``--speed``.

``looptime`` jumps the loop's clock to the next timer whenever nothing is ready, so on its own the
replay would run as fast as the CPU allows. :class:`Pacer` holds simulated time to ``speed``
simulated seconds per wall second by sleeping (blocking) the remainder of each step: crude, but it
needs no help from the code under test. :class:`RealTimeRunner` drops the speed to 1 while a real
process (the compile) runs, since a process takes real seconds whatever the loop's clock does.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from neuronfleet.sandbox import ContainerResult
from neuronfleet.sandbox.runners import SubprocessRunner


class Pacer:
    """Keeps the loop's (looptime) clock at ``speed`` simulated seconds per wall second."""

    STEP_S = 0.25

    def __init__(self, speed: float) -> None:
        self.speed = speed
        self._anchor: tuple[float, float] | None = None

    def set_speed(self, speed: float) -> None:
        self.speed = speed
        self._anchor = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self._anchor is None:
                self._anchor = (loop.time(), time.monotonic())
            await asyncio.sleep(self.STEP_S)
            if self._anchor is None:
                continue  # the speed changed while asleep: start over from here
            sim0, wall0 = self._anchor
            ahead = (loop.time() - sim0) / self.speed - (time.monotonic() - wall0)
            if ahead > 0:
                # Blocking on purpose: an await would let looptime jump the clock again.
                time.sleep(min(ahead, 1.0))  # noqa: ASYNC251
            elif ahead < -2.0:
                # The machine cannot keep up: do not race to catch up afterwards.
                self._anchor = None


class RealTimeRunner:
    """A kubelet container runner whose real process runs with the loop's clock at wall speed.

    A process (the compile) takes real seconds whatever the loop's clock does; at ``--speed`` its
    Job's deadlines and the operator's timers would run out ``speed`` times too early.
    """

    def __init__(self, runner: SubprocessRunner, pacer: Pacer) -> None:
        self.runner = runner
        self.pacer = pacer

    async def __call__(self, pod: dict[str, Any]) -> ContainerResult | None:
        speed = self.pacer.speed
        self.pacer.set_speed(1.0)
        try:
            return await self.runner(pod)
        finally:
            self.pacer.set_speed(speed)
