"""The demo's pacer holds the replay to --speed and survives speed changes (the compile runs at wall
speed, the replay at --speed)."""

from __future__ import annotations

import asyncio

import looptime
import pytest

from neuronfleet.demo import pacing
from neuronfleet.demo.pacing import Pacer


def test_pacer_keeps_running_across_speed_changes() -> None:
    pacer = Pacer(speed=1e6)

    async def scenario() -> tuple[bool, float]:
        task = asyncio.create_task(pacer.run())
        loop = asyncio.get_running_loop()
        start = loop.time()
        for speed in (2e6, 1e6, 5e6):
            await asyncio.sleep(Pacer.STEP_S / 3)  # the pacer is mid-step when its speed changes
            pacer.set_speed(speed)
        await asyncio.sleep(10 * Pacer.STEP_S)
        alive = not task.done()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return alive, loop.time() - start

    with asyncio.Runner(loop_factory=looptime.new_event_loop) as runner:
        alive, elapsed = runner.run(scenario())
    assert alive, "the pacer task died on a speed change"
    assert pacer.speed == 5e6
    assert elapsed >= 10 * Pacer.STEP_S


class WallClock:
    """The pacer's ``time`` module: a wall clock that moves only when the pacer blocks on it."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.mark.parametrize("speed", [4.0, 10.0])
def test_the_pacer_holds_simulated_time_to_speed_times_wall_time(speed: float, monkeypatch: pytest.MonkeyPatch) -> None:
    wall = WallClock()
    monkeypatch.setattr(pacing, "time", wall)
    pacer = Pacer(speed=speed)

    async def scenario() -> None:
        task = asyncio.create_task(pacer.run())
        await asyncio.sleep(8 * Pacer.STEP_S + Pacer.STEP_S / 2)  # eight steps, the ninth not yet done
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    with asyncio.Runner(loop_factory=looptime.new_event_loop) as runner:
        runner.run(scenario())
    # Nothing else takes wall time here: each step of simulated time is held for its share of a second.
    assert wall.slept == pytest.approx([Pacer.STEP_S / speed] * 8)
